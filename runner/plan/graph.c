/*
 * Sundial planner: from the pipeline's transform tree to a flat graph of leaf nodes.
 *
 * The Pipeline proto is a tree of composites whose leaves are the primitives; only leaves run.
 * This file walks the tree from the root transforms and produces pl_node records:
 *
 *   composite (has subtransforms)   -> its subtransforms, recursively; except
 *   combine_per_key (liftable)      -> Precombine, GBK, Merge, Extract (new coders/pcolls;
 *                                      lift.c)
 *   reshuffle / redistribute_*      -> nothing; its output becomes an alias of its input and
 *                                      the consumers are forced to start stages (only when
 *                                      input and output agree on coder and windowing; else
 *                                      its subtransforms)
 *   impulse, group_by_key, flatten, teststream -> runner nodes (env "")
 *   pardo with restriction_coder_id -> PairWithRestriction, SplitAndSize, Process (forced root;
 *                                      pardo.c, which also checks every ParDoPayload)
 *   unknown leaf, outputs in inputs -> nothing (identity placeholder, see outputs_among_inputs)
 *   other leaves                    -> SDK nodes if the URN is SDK-executable, else a problem
 *
 * Aliases can only be resolved once the whole tree was walked (a consumer may be visited before
 * the Reshuffle it reads from), so a second pass ("finish", here) rewires inputs, classifies
 * main and side inputs, records producers and checks every reference. Then rewrite.c reroutes
 * the TestStream outputs the runner cannot store in their consumers' coder and makes each
 * Flatten's inputs concatenable; the new nodes it adds are finished with sd__plan_finish_node.
 * A third pass (topo.c) orders the nodes topologically; ties are broken by node id so the order,
 * and therefore the stage numbering, never depends on map iteration order. sd__plan_analyze at
 * the end of this file runs the passes in that order.
 *
 * This file also owns node construction (sd__plan_add_node and the synthesized transforms and
 * PCollections the other passes create), so a node is always built the same way.
 *
 * Every check records a problem and continues; the walk stops only on SD_ENOMEM. Nodes are
 * stored by value in a vector, so code holds indexes across pushes, never pointers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/log.h"
#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

#define MAX_NESTING     256
#define MAX_ALIAS_CHAIN 1024

static bool streq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* ----------------------------------------------------------------------------------------- */
/* Lookups                                                                                    */
/* ----------------------------------------------------------------------------------------- */

const pb_pcoll *sd__plan_pcoll_get(const pl_ctx *c, const char *id)
{
    const pb_pcoll *p = sd_map_get_str(&c->new_pcolls, id);
    return p != NULL ? p : sd_map_get_str(&c->pcolls, id);
}

pl_node *sd__plan_producer(const pl_ctx *c, const char *pcoll)
{
    uintptr_t v = (uintptr_t)sd_map_get_str(&c->producer, pcoll);
    return v == 0 ? NULL : sd__plan_node(c, (size_t)(v - 1));
}

const char *
sd__plan_unique_id(pl_ctx *c, const sd_map *taken, const sd_map *taken2, const char *base)
{
    if (!sd_map_has(taken, sd_bytes_str(base)) &&
        (taken2 == NULL || !sd_map_has(taken2, sd_bytes_str(base)))) {
        return sd_arena_strdup(&c->scratch, base);
    }
    for (unsigned i = 2;; i++) {
        char *id = sd_arena_printf(&c->scratch, "%s_%u", base, i);
        if (id == NULL) {
            return NULL;
        }
        if (!sd_map_has(taken, sd_bytes_str(id)) &&
            (taken2 == NULL || !sd_map_has(taken2, sd_bytes_str(id)))) {
            return id;
        }
    }
}

static const char *spec_urn(const pb_transform *t)
{
    return t->spec != NULL && t->spec->urn != NULL ? t->spec->urn : "";
}

/* ----------------------------------------------------------------------------------------- */
/* URN classes                                                                                */
/* ----------------------------------------------------------------------------------------- */

/* Leaves an SDK environment is expected to execute. */
static bool urn_sdk_executable(const char *urn)
{
#define URN_OF(name, urn) urn,
    static const char *const urns[] = {
        SD_URN_TRANSFORM_PARDO,
        SD_URN_TRANSFORM_WINDOW_INTO,
        SD_URN_TRANSFORM_MAP_WINDOWS,
        SD_URN_TRANSFORM_MERGE_WINDOWS,
        SD_URN_TRANSFORM_TO_STRING,
        SD_URN_COMBINE_COMPONENTS(URN_OF) SD_URN_SDF_COMPONENTS(URN_OF)
    };
#undef URN_OF
    for (size_t i = 0; i < sizeof(urns) / sizeof(urns[0]); i++) {
        if (streq(urn, urns[i])) {
            return true;
        }
    }
    return false;
}

static bool urn_is_combine_component(const char *urn)
{
#define IS_URN(name, member) streq(urn, member) ||
    return SD_URN_COMBINE_COMPONENTS(IS_URN) false;
#undef IS_URN
}

static bool urn_is_reshuffle(const char *urn)
{
    return streq(urn, SD_URN_TRANSFORM_RESHUFFLE) ||
           streq(urn, SD_URN_TRANSFORM_REDISTRIBUTE_ARBITRARILY) ||
           streq(urn, SD_URN_TRANSFORM_REDISTRIBUTE_BY_KEY);
}

/* Packed bytes of a windowing strategy without its coder and environment ids (compared
 * structurally by the caller); NULL when out of memory. */
static uint8_t *pack_wstrat_shape(pl_ctx *c, const pb_wstrat *ws, size_t *len)
{
    pb_wstrat copy = *ws;
    copy.window_coder_id = (char *)"";
    copy.environment_id = (char *)"";
    *len = protobuf_c_message_get_packed_size(&copy.base);
    uint8_t *buf = sd_arena_alloc(&c->scratch, *len > 0 ? *len : 1);
    if (buf != NULL) {
        protobuf_c_message_pack(&copy.base, buf);
    }
    return buf;
}

/*
 * A Reshuffle is run as nothing (its output an alias of its input) only when that changes no
 * byte a consumer reads: both PCollections must have structurally equal coders and windowing
 * strategies. Python's Reshuffle before a GroupByKey reads its input with FastPrimitivesCoder
 * and writes its output with DeterministicFastPrimitivesCoderV2, which encode the same value
 * differently; its consumers must get the output coder's bytes, which the composite's own
 * subtransforms (AddRandomKeys, GroupByKey, RemoveRandomKeys) produce.
 */
static bool same_bytes(pl_ctx *c, const char *in_id, const char *out_id)
{
    const pb_pcoll *in = sd__plan_pcoll_get(c, in_id);
    const pb_pcoll *out = sd__plan_pcoll_get(c, out_id);
    if (in == NULL || out == NULL) {
        return true; /* the missing PCollection is reported by the finishing pass */
    }
    if (!sd__plan_coders_equal(c, in->coder_id, out->coder_id)) {
        return false;
    }
    if (streq(in->windowing_strategy_id, out->windowing_strategy_id)) {
        return true;
    }
    const pb_wstrat *wi = sd_map_get_str(&c->wstrats, in->windowing_strategy_id);
    const pb_wstrat *wo = sd_map_get_str(&c->wstrats, out->windowing_strategy_id);
    if (wi == NULL || wo == NULL) {
        return true; /* reported by the finishing pass */
    }
    if (!sd__plan_coders_equal(c, wi->window_coder_id, wo->window_coder_id)) {
        return false;
    }
    size_t li, lo;
    const uint8_t *bi = pack_wstrat_shape(c, wi, &li);
    const uint8_t *bo = pack_wstrat_shape(c, wo, &lo);
    return bi != NULL && bo != NULL && li == lo && memcmp(bi, bo, li) == 0;
}

static bool reshuffle_keeps_bytes(pl_ctx *c, const pb_transform *t)
{
    return same_bytes(c, t->inputs[0]->value, t->outputs[0]->value);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/*
 * Python's Create of more than one element ends its expansion with a Reshuffle of its own:
 * LABEL/Impulse, LABEL/FlatMap(<lambda at core.py:N>) (the encoded values), then
 * LABEL/MaybeReshuffle/Reshuffle and LABEL/Map(decode). It is there to spread the values
 * over workers; on a LOOPBACK worker it buys a stage (13-20 ms of the SDK's time) and no
 * parallelism, so its consumers fuse with the values' producer. Recognized by those names: the
 * Reshuffle inside LABEL/MaybeReshuffle, reading the values PCollection of LABEL's FlatMap. A
 * Reshuffle a user applies keeps its fusion break (its consumers start stages).
 */
static bool is_create_reshuffle(pl_ctx *c, const char *parent, const pb_transform *t)
{
    static const char maybe[] = "MaybeReshuffle";
    static const char values[] = "FlatMap(<lambda at core.py:";
    const pb_transform *pt = parent != NULL ? sd_map_get_str(&c->transforms, parent) : NULL;
    const pb_pcoll *in = sd__plan_pcoll_get(c, t->inputs[0]->value);
    if (pt == NULL || in == NULL || pt->unique_name == NULL || t->unique_name == NULL ||
        in->unique_name == NULL || !ends_with(pt->unique_name, maybe)) {
        return false;
    }
    size_t label = strlen(pt->unique_name) - (sizeof(maybe) - 1); /* "LABEL/" or "" */
    if (label > 0 && pt->unique_name[label - 1] != '/') {
        return false;
    }
    size_t own = strlen(pt->unique_name);
    if (strncmp(t->unique_name, pt->unique_name, own) != 0 ||
        strcmp(t->unique_name + own, "/Reshuffle") != 0) {
        return false;
    }
    /* The SDK names a PCollection "<length of the label><label>.<tag>": try the name from each
     * point of its leading digits on (a label may itself start with digits). */
    const char *name = in->unique_name;
    for (size_t k = 0;; k++) {
        if (strncmp(name + k, pt->unique_name, label) == 0 &&
            strncmp(name + k + label, values, sizeof(values) - 1) == 0) {
            return true;
        }
        if (name[k] < '0' || name[k] > '9') {
            return false;
        }
    }
}

/*
 * Every Impulse emits the same single element (empty bytes, the global window, the minimum
 * timestamp), so the second and later ones are the first one again: their outputs become
 * aliases of the first's, and the transforms reading them (the first ParDos of each Create,
 * of each source) read one PCollection side by side and fuse into one stage (fuse.c) instead
 * of one SDK stage each. Only when the outputs agree on coder and windowing strategy.
 */
static sd_status runner_leaf(pl_ctx *c, const char *tid, const pb_transform *t, pl_kind kind);

static sd_status impulse(pl_ctx *c, const char *tid, const pb_transform *t)
{
    if (!c->opt.separate_siblings && t->n_inputs == 0 && t->n_outputs == 1 &&
        t->outputs[0]->value != NULL && sd__plan_pcoll_get(c, t->outputs[0]->value) != NULL) {
        const char *out = t->outputs[0]->value;
        if (c->first_impulse == NULL) {
            c->first_impulse = out;
        } else if (strcmp(out, c->first_impulse) != 0 && same_bytes(c, c->first_impulse, out)) {
            PL_TRY(sd_map_put_str(&c->alias, out, (char *)c->first_impulse));
            return sd_map_put_str(&c->fuse_alias, out, PL_PRESENT);
        }
    }
    return runner_leaf(c, tid, t, PL_IMPULSE);
}

static bool env_lists_capability(const pl_ctx *c, const char *env_id, const char *urn)
{
    const pb_env *e = sd_map_get_str(&c->envs, env_id);
    for (size_t i = 0; e != NULL && i < e->n_capabilities; i++) {
        if (streq(e->capabilities[i], urn)) {
            return true;
        }
    }
    return false;
}

/* ----------------------------------------------------------------------------------------- */
/* Index                                                                                      */
/* ----------------------------------------------------------------------------------------- */

#define INDEX_MAP(c, comps, field, map, what)                                         \
    do {                                                                              \
        for (size_t i_ = 0; i_ < (comps)->n_##field; i_++) {                          \
            const char *k_ = (comps)->field[i_]->key;                                 \
            if ((comps)->field[i_]->value == NULL) {                                  \
                PL_TRY(sd__plan_problem((c), true, what " \"%s\" has no value", k_)); \
                continue;                                                             \
            }                                                                         \
            PL_TRY(sd_map_put_str((map), k_, (comps)->field[i_]->value));             \
        }                                                                             \
    } while (0)

static sd_status index_components(pl_ctx *c)
{
    const pb_components *k = c->p->components;
    if (k == NULL) {
        return sd__plan_problem(c, true, "pipeline has no components");
    }
    INDEX_MAP(c, k, transforms, &c->transforms, "transform");
    INDEX_MAP(c, k, pcollections, &c->pcolls, "PCollection");
    INDEX_MAP(c, k, coders, &c->coders, "coder");
    INDEX_MAP(c, k, windowing_strategies, &c->wstrats, "windowing strategy");
    INDEX_MAP(c, k, environments, &c->envs, "environment");
    for (size_t i = 0; i < k->n_transforms; i++) {
        PL_TRY(sd_map_put_str(&c->transform_ids, k->transforms[i]->key, PL_PRESENT));
    }
    return SD_OK;
}

static sd_status check_requirements(pl_ctx *c)
{
    static const char *const accepted[] = {
        SD_URN_REQUIREMENT_STATEFUL_PROCESSING,  SD_URN_REQUIREMENT_SPLITTABLE_DOFN,
        SD_URN_REQUIREMENT_ON_WINDOW_EXPIRATION, SD_URN_REQUIREMENT_BUNDLE_FINALIZATION,
        SD_URN_REQUIREMENT_STABLE_INPUT,         SD_URN_REQUIREMENT_TIME_SORTED_INPUT,
    };
    for (size_t i = 0; i < c->p->n_requirements; i++) {
        const char *r = c->p->requirements[i];
        bool ok = false;
        for (size_t j = 0; j < sizeof(accepted) / sizeof(accepted[0]); j++) {
            ok = ok || streq(r, accepted[j]);
        }
        if (ok) {
            continue;
        }
        PL_TRY(sd__plan_problem(c, false, "unknown requirement \"%s\"", r));
    }
    return SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Nodes and synthesized components                                                           */
/* ----------------------------------------------------------------------------------------- */

static int io_cmp(const void *a, const void *b)
{
    return strcmp(((const pl_io *)a)->local, ((const pl_io *)b)->local);
}

/* Copy a protobuf-c string map (inputs or outputs: same layout) into a sorted pl_io array. */
#define COPY_IOS(c, n_src, src, n_dst, dst)                                   \
    do {                                                                      \
        (n_dst) = (n_src);                                                    \
        (dst) = sd_arena_alloc(&(c)->scratch, sizeof(pl_io) * ((n_src) + 1)); \
        if ((dst) == NULL)                                                    \
            return SD_ENOMEM;                                                 \
        for (size_t i_ = 0; i_ < (n_src); i_++) {                             \
            (dst)[i_].local = (src)[i_]->key;                                 \
            (dst)[i_].pcoll = (src)[i_]->value;                               \
        }                                                                     \
        qsort((dst), (n_dst), sizeof(pl_io), io_cmp);                         \
    } while (0)

/* Add a node for transform message t; OUT: idx. */
sd_status sd__plan_add_node(pl_ctx *c,
                            const char *id,
                            pl_kind kind,
                            const char *env,
                            pb_transform *t,
                            size_t *idx)
{
    pl_node *n;
    PL_TRY(sd_vec_push_zero(&c->nodes, (void **)&n));
    *idx = c->nodes.len - 1;
    n->id = id;
    n->kind = kind;
    n->urn = spec_urn(t);
    n->env = kind == PL_SDK ? (env != NULL ? env : "") : "";
    n->msg = t;
    n->stage = SD_PLAN_NONE;
    COPY_IOS(c, t->n_inputs, t->inputs, n->n_inputs, n->inputs);
    COPY_IOS(c, t->n_outputs, t->outputs, n->n_outputs, n->outputs);
    PL_TRY(sd_map_put_str(&c->node_index, id, (void *)(uintptr_t)(*idx + 1)));
    PL_TRY(sd_map_put_str(&c->transform_ids, id, PL_PRESENT));
    return SD_OK;
}

/* A synthesized PTransform in scratch. in/out give the maps. */
pb_transform *sd__plan_synth_transform(pl_ctx *c,
                                       const char *id,
                                       const char *urn,
                                       ProtobufCBinaryData payload,
                                       const char *env,
                                       size_t n_in,
                                       const pl_io *in,
                                       size_t n_out,
                                       const pl_io *out)
{
    sd_arena *a = &c->scratch;
    pb_transform *t = sd_arena_alloc(a, sizeof(*t));
    pb_spec *spec = sd_arena_alloc(a, sizeof(*spec));
    pb_io_entry **ins = sd_arena_alloc(a, sizeof(*ins) * (n_in + 1));
    pb_out_entry **outs = sd_arena_alloc(a, sizeof(*outs) * (n_out + 1));
    if (t == NULL || spec == NULL || ins == NULL || outs == NULL) {
        return NULL;
    }
    org__apache__beam__model__pipeline__v1__ptransform__init(t);
    org__apache__beam__model__pipeline__v1__function_spec__init(spec);
    spec->urn = (char *)urn;
    spec->payload = payload;
    t->spec = spec;
    t->unique_name = (char *)id;
    t->environment_id = (char *)(env != NULL ? env : "");
    for (size_t i = 0; i < n_in; i++) {
        ins[i] = sd_arena_alloc(a, sizeof(*ins[i]));
        if (ins[i] == NULL) {
            return NULL;
        }
        org__apache__beam__model__pipeline__v1__ptransform__inputs_entry__init(ins[i]);
        ins[i]->key = (char *)in[i].local;
        ins[i]->value = (char *)in[i].pcoll;
    }
    for (size_t i = 0; i < n_out; i++) {
        outs[i] = sd_arena_alloc(a, sizeof(*outs[i]));
        if (outs[i] == NULL) {
            return NULL;
        }
        org__apache__beam__model__pipeline__v1__ptransform__outputs_entry__init(outs[i]);
        outs[i]->key = (char *)out[i].local;
        outs[i]->value = (char *)out[i].pcoll;
    }
    t->n_inputs = n_in;
    t->inputs = ins;
    t->n_outputs = n_out;
    t->outputs = outs;
    return t;
}

/* A synthesized PCollection like `like` (windowing, boundedness) with coder. OUT: id. */
sd_status sd__plan_new_pcoll(pl_ctx *c,
                             const char *base,
                             const char *coder,
                             const pb_pcoll *like,
                             const char **id)
{
    const char *nid = sd__plan_unique_id(c, &c->pcolls, &c->new_pcolls, base);
    pb_pcoll *p = sd_arena_alloc(&c->scratch, sizeof(*p));
    if (nid == NULL || p == NULL) {
        return SD_ENOMEM;
    }
    org__apache__beam__model__pipeline__v1__pcollection__init(p);
    p->unique_name = (char *)nid;
    p->coder_id = (char *)coder;
    p->is_bounded = like->is_bounded;
    p->windowing_strategy_id = like->windowing_strategy_id;
    PL_TRY(sd_map_put_str(&c->new_pcolls, nid, p));
    *id = nid;
    return SD_OK;
}

const char *sd__plan_new_transform_id(pl_ctx *c, const char *tid, const char *suffix)
{
    char *base = sd_arena_printf(&c->scratch, "%s/%s", tid, suffix);
    if (base == NULL) {
        return NULL;
    }
    return sd__plan_unique_id(c, &c->transform_ids, NULL, base);
}

/* ----------------------------------------------------------------------------------------- */
/* Payload decoding                                                                           */
/* ----------------------------------------------------------------------------------------- */

/* Decode t's payload as msg type; *out NULL (and a problem recorded) when it does not decode. */
static sd_status decode_payload(pl_ctx *c,
                                const char *tid,
                                const pb_transform *t,
                                const ProtobufCMessageDescriptor *desc,
                                const char *what,
                                ProtobufCMessage **out)
{
    *out = NULL;
    ProtobufCAllocator pa = sd__plan_arena_pb(&c->scratch);
    size_t len = t->spec != NULL ? t->spec->payload.len : 0;
    const uint8_t *data = t->spec != NULL ? t->spec->payload.data : NULL;
    *out = protobuf_c_message_unpack(desc, &pa, len, data);
    if (*out != NULL) {
        return SD_OK;
    }
    if (c->scratch.failed) {
        return SD_ENOMEM;
    }
    const char *tn = sd__plan_tname(c, tid);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    return sd__plan_problem(c, true, "%s: payload does not decode as %s", tn, what);
}

/* ----------------------------------------------------------------------------------------- */
/* Expansion                                                                                  */
/* ----------------------------------------------------------------------------------------- */

static sd_status expand(pl_ctx *c, const char *tid, const char *parent, unsigned depth);
static sd_status check_pcoll(pl_ctx *c, const char *pc, const char *tn, bool *ok);

/* Check the PCollections of a transform that will not run (so their problems are reported). */
static sd_status check_transform_pcolls(pl_ctx *c, const pb_transform *t, const char *tn)
{
    bool ok;
    for (size_t i = 0; i < t->n_inputs; i++) {
        PL_TRY(check_pcoll(c, t->inputs[i]->value, tn, &ok));
    }
    for (size_t i = 0; i < t->n_outputs; i++) {
        PL_TRY(check_pcoll(c, t->outputs[i]->value, tn, &ok));
    }
    return SD_OK;
}

static sd_status expand_children(pl_ctx *c, const char *tid, const pb_transform *t, unsigned depth)
{
    for (size_t i = 0; i < t->n_subtransforms; i++) {
        PL_TRY(expand(c, t->subtransforms[i], tid, depth + 1));
    }
    return SD_OK;
}

static sd_status runner_leaf(pl_ctx *c, const char *tid, const pb_transform *t, pl_kind kind)
{
    const char *tn = sd__plan_tname(c, tid);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    bool ok = true;
    switch (kind) {
    case PL_IMPULSE:
        if (t->n_inputs != 0 || t->n_outputs != 1) {
            PL_TRY(sd__plan_problem(c, true,
                                    "%s: Impulse needs no inputs and one output (has %zu and %zu)",
                                    tn, t->n_inputs, t->n_outputs));
            ok = false;
        }
        break;
    case PL_GBK: {
        bool late = false;
        for (size_t i = 0; i < t->n_outputs; i++) {
            late = late || streq(t->outputs[i]->key, SD_GBK_LATE_OUTPUT_TAG);
        }
        if (t->n_inputs != 1 || t->n_outputs != (late ? 2u : 1u)) {
            PL_TRY(sd__plan_problem(c, true,
                                    "%s: GroupByKey needs one input and one output, and may "
                                    "have a late-data output \"" SD_GBK_LATE_OUTPUT_TAG "\" "
                                    "(has %zu and %zu)",
                                    tn, t->n_inputs, t->n_outputs));
            ok = false;
        }
        break;
    }
    case PL_FLATTEN:
        if (t->n_outputs != 1) {
            PL_TRY(sd__plan_problem(c, true, "%s: Flatten needs one output (has %zu)", tn,
                                    t->n_outputs));
            ok = false;
        }
        break;
    case PL_TESTSTREAM:
        c->n_teststreams++;
        if (t->n_inputs != 0 || t->n_outputs == 0) {
            PL_TRY(sd__plan_problem(c, true,
                                    "%s: TestStream needs no inputs and at least one output", tn));
            ok = false;
        }
        break;
    case PL_SDK:
        break;
    }
    if (!ok) {
        return SD_OK;
    }
    pb_teststream *ts = NULL;
    if (kind == PL_TESTSTREAM) {
        ProtobufCMessage *m;
        PL_TRY(decode_payload(
            c, tid, t, &org__apache__beam__model__pipeline__v1__test_stream_payload__descriptor,
            "TestStreamPayload", &m));
        if (m == NULL) {
            return SD_OK;
        }
        ts = (pb_teststream *)m;
        char *who = sd_arena_printf(&c->scratch, "%s payload", tn);
        if (who == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd__plan_check_coder(c, ts->coder_id, who));
    }
    size_t idx;
    PL_TRY(sd__plan_add_node(c, tid, kind, "", (pb_transform *)t, &idx));
    sd__plan_node(c, idx)->teststream = ts;
    return SD_OK;
}

static sd_status check_env(pl_ctx *c, const char *env, const char *tn);

/*
 * Does a leaf only re-list PCollections it consumes? The Python SDK submits such identity
 * placeholders: a composite whose expansion returned its input unchanged (Create's
 * MaybeReshuffle for 0 or 1 elements) is sent as a leaf with no subtransforms whose output is
 * its input, under an SDK-private URN (beam:transform:pickled_python:v1) when the SDK did not
 * pre-optimize the pipeline (streaming). It produces nothing, so it has nothing to run: Beam's
 * own runner drops leaves whose outputs are a subset of their inputs (translations.py,
 * leaf_transform_stages) and Prism ignores the 1-in-1-out case at Prepare. At least one output
 * is required, so an unknown sink-like transform (no outputs) is still refused.
 */
static bool outputs_among_inputs(const pb_transform *t)
{
    if (t->n_outputs == 0) {
        return false;
    }
    for (size_t i = 0; i < t->n_outputs; i++) {
        bool found = false;
        for (size_t j = 0; j < t->n_inputs && !found; j++) {
            found = t->outputs[i]->value != NULL && t->inputs[j]->value != NULL &&
                    streq(t->outputs[i]->value, t->inputs[j]->value);
        }
        if (!found) {
            return false;
        }
    }
    return true;
}

static sd_status sdk_leaf(pl_ctx *c, const char *tid, const pb_transform *t)
{
    const char *urn = spec_urn(t);
    const char *tn = sd__plan_tname(c, tid);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    if (urn[0] == '\0') {
        if (t->n_inputs == 0 && t->n_outputs == 0) {
            return SD_OK; /* an empty composite: nothing to run */
        }
        if (outputs_among_inputs(t)) {
            /* A pass-through composite (Java's identity and tuple projection transforms
             * return their input): its outputs are produced elsewhere. */
            return check_transform_pcolls(c, t, tn);
        }
        return sd__plan_problem(c, true, "%s has no URN and no subtransforms", tn);
    }
    bool known = urn_sdk_executable(urn) || env_lists_capability(c, t->environment_id, urn);
    if (!known && outputs_among_inputs(t)) {
        /* An identity placeholder: nothing to run, and its outputs already have producers. */
        return check_transform_pcolls(c, t, tn);
    }
    if (!known) {
        PL_TRY(check_transform_pcolls(c, t, tn));
        /* Its environment is reported too (once), so one Prepare lists every problem. */
        if (t->environment_id != NULL && t->environment_id[0] != '\0') {
            PL_TRY(check_env(c, t->environment_id, tn));
        }
        if (streq(urn, SD_URN_TRANSFORM_COMBINE_PER_KEY) ||
            streq(urn, SD_URN_TRANSFORM_COMBINE_GLOBALLY) || urn_is_reshuffle(urn)) {
            return sd__plan_problem(c, false, "%s: composite \"%s\" has no subtransforms to run",
                                    tn, urn);
        }
        if (streq(urn, SD_URN_TRANSFORM_READ)) {
            return sd__plan_problem(c, false,
                                    "%s: the deprecated Read primitive \"%s\" is not supported "
                                    "(SDKs should expand sources into splittable DoFns)",
                                    tn, urn);
        }
        return sd__plan_problem(c, false,
                                "%s: unknown transform URN \"%s\" (not runnable by Sundial nor "
                                "listed by environment \"%s\")",
                                tn, urn, t->environment_id);
    }
    if (streq(urn, SD_URN_TRANSFORM_PARDO)) {
        ProtobufCMessage *m;
        PL_TRY(decode_payload(c, tid, t,
                              &org__apache__beam__model__pipeline__v1__par_do_payload__descriptor,
                              "ParDoPayload", &m));
        if (m == NULL) {
            return SD_OK;
        }
        pb_pardo *pd = (pb_pardo *)m;
        if (pd->restriction_coder_id[0] != '\0') {
            return sd__plan_expand_sdf(c, tid, t, pd);
        }
        size_t idx;
        PL_TRY(sd__plan_add_node(c, tid, PL_SDK, t->environment_id, (pb_transform *)t, &idx));
        sd__plan_node(c, idx)->pardo = pd;
        return sd__plan_check_pardo(c, idx);
    }
    const char *acc = NULL;
    if (urn_is_combine_component(urn)) {
        ProtobufCMessage *m;
        PL_TRY(decode_payload(c, tid, t,
                              &org__apache__beam__model__pipeline__v1__combine_payload__descriptor,
                              "CombinePayload", &m));
        if (m == NULL) {
            return SD_OK;
        }
        acc = ((pb_combine *)m)->accumulator_coder_id;
        if (acc[0] != '\0') {
            char *who = sd_arena_printf(&c->scratch, "%s accumulator", tn);
            if (who == NULL) {
                return SD_ENOMEM;
            }
            PL_TRY(sd__plan_check_coder(c, acc, who));
        }
    }
    size_t idx;
    PL_TRY(sd__plan_add_node(c, tid, PL_SDK, t->environment_id, (pb_transform *)t, &idx));
    sd__plan_node(c, idx)->acc_coder = acc;
    return SD_OK;
}

static sd_status expand(pl_ctx *c, const char *tid, const char *parent, unsigned depth)
{
    const pb_transform *t = sd_map_get_str(&c->transforms, tid);
    if (t == NULL) {
        if (parent == NULL) {
            return sd__plan_problem(c, true, "root transform \"%s\" does not exist", tid);
        }
        return sd__plan_problem(c, true, "subtransform \"%s\" of transform \"%s\" does not exist",
                                tid, parent);
    }
    if (sd_map_has(&c->expanded, sd_bytes_str(tid))) {
        return SD_OK; /* reached twice (listed as a root and a subtransform): run it once */
    }
    if (sd_map_has(&c->visiting, sd_bytes_str(tid)) || depth > MAX_NESTING) {
        return sd__plan_problem(c, true,
                                "transform \"%s\" contains itself (cycle in subtransforms)", tid);
    }
    PL_TRY(sd_map_put_str(&c->visiting, tid, PL_PRESENT));
    PL_TRY(sd_map_put_str(&c->expanded, tid, PL_PRESENT));

    const char *urn = spec_urn(t);
    sd_status st = SD_OK;
    if (urn_is_reshuffle(urn) && t->n_inputs == 1 && t->n_outputs == 1 &&
        reshuffle_keeps_bytes(c, t)) {
        PL_TRY(sd_map_put_str(&c->alias, t->outputs[0]->value, t->inputs[0]->value));
        if (is_create_reshuffle(c, parent, t)) {
            PL_TRY(sd_map_put_str(&c->fuse_alias, t->outputs[0]->value, PL_PRESENT));
        }
    } else if (urn_is_reshuffle(urn) && t->n_subtransforms == 0 && t->n_inputs == 1 &&
               t->n_outputs == 1) {
        /* Reported, and aliased all the same so its consumers raise no second problem. */
        const char *tn = sd__plan_tname(c, tid);
        PL_TRY(sd_map_put_str(&c->alias, t->outputs[0]->value, t->inputs[0]->value));
        st = tn == NULL ? SD_ENOMEM
                        : sd__plan_problem(c, false,
                                           "%s: \"%s\" changes its elements' coder or windowing "
                                           "strategy (PCollection \"%s\" to \"%s\") and has no "
                                           "subtransforms to re-encode them with",
                                           tn, urn, t->inputs[0]->value, t->outputs[0]->value);
    } else if (streq(urn, SD_URN_TRANSFORM_IMPULSE)) {
        st = impulse(c, tid, t);
    } else if (streq(urn, SD_URN_TRANSFORM_GROUP_BY_KEY)) {
        st = runner_leaf(c, tid, t, PL_GBK);
    } else if (streq(urn, SD_URN_TRANSFORM_FLATTEN)) {
        st = runner_leaf(c, tid, t, PL_FLATTEN);
    } else if (streq(urn, SD_URN_TRANSFORM_TEST_STREAM)) {
        st = runner_leaf(c, tid, t, PL_TESTSTREAM);
    } else if (streq(urn, SD_URN_TRANSFORM_COMBINE_PER_KEY) && c->opt.lift_combiners) {
        bool lifted = false;
        const char *why = NULL;
        st = sd__plan_try_lift(c, tid, t, &lifted, &why);
        if (st == SD_OK && !lifted) {
            SD_INFO("plan", "combine %s is not lifted: %s", tid, why);
            if (t->n_subtransforms > 0) {
                st = expand_children(c, tid, t, depth);
            } else {
                const char *tn = sd__plan_tname(c, tid);
                st = tn == NULL ? SD_ENOMEM
                                : sd__plan_problem(c, false,
                                                   "%s: combine_per_key cannot be lifted (%s) "
                                                   "and has no subtransforms",
                                                   tn, why);
            }
        }
    } else if (t->n_subtransforms > 0) {
        st = expand_children(c, tid, t, depth);
    } else {
        st = sdk_leaf(c, tid, t);
    }
    sd_map_remove(&c->visiting, sd_bytes_str(tid));
    return st;
}

static sd_status expand_roots(pl_ctx *c)
{
    if (c->p->n_root_transform_ids > 0) {
        for (size_t i = 0; i < c->p->n_root_transform_ids; i++) {
            PL_TRY(expand(c, c->p->root_transform_ids[i], NULL, 0));
        }
        return SD_OK;
    }
    /* No roots listed: every transform that is nobody's subtransform, in id order. */
    sd_map children;
    sd_map_init(&children, NULL);
    sd_status st = SD_OK;
    size_t it = 0;
    sd_bytes key;
    void *val;
    while (st == SD_OK && sd_map_next(&c->transforms, &it, &key, &val)) {
        const pb_transform *t = val;
        for (size_t i = 0; st == SD_OK && i < t->n_subtransforms; i++) {
            st = sd_map_put_str(&children, t->subtransforms[i], PL_PRESENT);
        }
    }
    const pb_components *k = c->p->components;
    const char **ids = NULL;
    if (st == SD_OK) {
        ids = sd_arena_alloc(&c->scratch, sizeof(*ids) * (k->n_transforms + 1));
        if (ids == NULL) {
            st = SD_ENOMEM;
        }
    }
    size_t n = 0;
    for (size_t i = 0; st == SD_OK && i < k->n_transforms; i++) {
        if (k->transforms[i]->value != NULL) {
            ids[n++] = k->transforms[i]->key;
        }
    }
    if (st == SD_OK) {
        qsort(ids, n, sizeof(*ids), sd__plan_strptr_cmp);
    }
    for (size_t i = 0; st == SD_OK && i < n; i++) {
        if (!sd_map_has(&children, sd_bytes_str(ids[i])) &&
            (i == 0 || strcmp(ids[i - 1], ids[i]) != 0)) {
            st = expand(c, ids[i], NULL, 0);
        }
    }
    sd_map_deinit(&children);
    return st;
}

/* ----------------------------------------------------------------------------------------- */
/* Finish: aliases, main/side inputs, references, producers                                  */
/* ----------------------------------------------------------------------------------------- */

/* Follow pc's aliases. OUT: cut, whether one of them is a fusion break (not fuse_alias). */
static const char *resolve_alias(const pl_ctx *c, const char *pc, bool *cut)
{
    *cut = false;
    for (unsigned i = 0; i < MAX_ALIAS_CHAIN; i++) {
        const char *next = sd_map_get_str(&c->alias, pc);
        if (next == NULL) {
            return pc;
        }
        *cut = *cut || !sd_map_has(&c->fuse_alias, sd_bytes_str(pc));
        pc = next;
    }
    return pc;
}

static sd_status check_pcoll(pl_ctx *c, const char *pc, const char *tn, bool *ok)
{
    const pb_pcoll *p = sd__plan_pcoll_get(c, pc);
    *ok = p != NULL;
    if (p == NULL) {
        char *key = sd_arena_printf(&c->scratch, "p:%s", pc);
        if (key == NULL) {
            return SD_ENOMEM;
        }
        if (sd_map_has(&c->seen, sd_bytes_str(key))) {
            return SD_OK;
        }
        PL_TRY(sd_map_put_str(&c->seen, key, PL_PRESENT));
        return sd__plan_problem(c, true, "PCollection \"%s\" (used by %s) does not exist", pc, tn);
    }
    char *who = sd_arena_printf(&c->scratch, "PCollection \"%s\"", pc);
    if (who == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd__plan_check_coder(c, p->coder_id, who));
    PL_TRY(sd__plan_check_windowing(c, p->windowing_strategy_id, who));
    if (sd_map_has(&c->wstrats, sd_bytes_str(p->windowing_strategy_id))) {
        PL_TRY(sd_map_put_str(&c->used_ws, p->windowing_strategy_id, PL_PRESENT));
    }
    return SD_OK;
}

static sd_status check_env(pl_ctx *c, const char *env, const char *tn)
{
    if (env[0] == '\0') {
        return sd__plan_problem(c, true, "%s runs in an SDK but has no environment_id", tn);
    }
    char *key = sd_arena_printf(&c->scratch, "e:%s", env);
    if (key == NULL) {
        return SD_ENOMEM;
    }
    if (sd_map_has(&c->seen, sd_bytes_str(key))) {
        return SD_OK;
    }
    PL_TRY(sd_map_put_str(&c->seen, key, PL_PRESENT));
    const pb_env *e = sd_map_get_str(&c->envs, env);
    if (e == NULL) {
        return sd__plan_problem(c, true, "environment \"%s\" (used by %s) does not exist", env, tn);
    }
    if (streq(e->urn, SD_URN_ENV_EXTERNAL) || streq(e->urn, SD_URN_ENV_PROCESS)) {
        return SD_OK;
    }
    if (streq(e->urn, SD_URN_ENV_DOCKER)) {
        return sd__plan_problem(c, false,
                                "environment \"%s\" is Docker (%s), which Sundial cannot run; "
                                "use LOOPBACK (%s) or PROCESS (%s)",
                                env, e->urn, SD_URN_ENV_EXTERNAL, SD_URN_ENV_PROCESS);
    }
    return sd__plan_problem(c, false, "environment \"%s\" has unsupported URN \"%s\" (only %s, %s)",
                            env, e->urn, SD_URN_ENV_EXTERNAL, SD_URN_ENV_PROCESS);
}

/*
 * Point n->msg at a scratch copy whose inputs (outputs = false) or outputs (true) are n's
 * current ones, after they were rewired. The two map entry types have the same layout.
 */
sd_status sd__plan_sync_msg_io(pl_ctx *c, pl_node *n, bool outputs)
{
    size_t count = outputs ? n->n_outputs : n->n_inputs;
    const pl_io *ios = outputs ? n->outputs : n->inputs;
    pb_transform *copy = sd_arena_memdup(&c->scratch, n->msg, sizeof(*n->msg));
    void **entries = sd_arena_alloc(&c->scratch, sizeof(*entries) * (count + 1));
    if (copy == NULL || entries == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        if (outputs) {
            pb_out_entry *e = sd_arena_alloc(&c->scratch, sizeof(*e));
            if (e == NULL) {
                return SD_ENOMEM;
            }
            org__apache__beam__model__pipeline__v1__ptransform__outputs_entry__init(e);
            e->key = (char *)ios[i].local;
            e->value = (char *)ios[i].pcoll;
            entries[i] = e;
        } else {
            pb_io_entry *e = sd_arena_alloc(&c->scratch, sizeof(*e));
            if (e == NULL) {
                return SD_ENOMEM;
            }
            org__apache__beam__model__pipeline__v1__ptransform__inputs_entry__init(e);
            e->key = (char *)ios[i].local;
            e->value = (char *)ios[i].pcoll;
            entries[i] = e;
        }
    }
    if (outputs) {
        copy->n_outputs = count;
        copy->outputs = (pb_out_entry **)entries;
    } else {
        copy->n_inputs = count;
        copy->inputs = (pb_io_entry **)entries;
    }
    n->msg = copy;
    return SD_OK;
}

sd_status sd__plan_finish_node(pl_ctx *c, size_t idx)
{
    pl_node *n = sd__plan_node(c, idx);
    const char *tn = sd__plan_tname(c, n->id);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    /* 1. Reshuffle aliases. */
    bool changed = false;
    bool *aliased = sd_arena_alloc(&c->scratch, sizeof(bool) * (n->n_inputs + 1));
    if (aliased == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < n->n_inputs; i++) {
        bool cut = false;
        const char *r = resolve_alias(c, n->inputs[i].pcoll, &cut);
        if (r != n->inputs[i].pcoll) {
            n->inputs[i].pcoll = r;
            aliased[i] = cut;
            changed = true;
        }
    }
    if (changed) {
        PL_TRY(sd__plan_sync_msg_io(c, n, false));
    }

    /* 2. Main and side inputs. */
    if (n->kind == PL_SDK) {
        size_t n_main = 0;
        size_t n_side = 0;
        for (size_t i = 0; i < n->n_inputs; i++) {
            if (sd__plan_pardo_has_side(n->pardo, n->inputs[i].local)) {
                n_side++;
            } else {
                n_main++;
                n->main_input = n->inputs[i].pcoll;
                /* A consumer of an elided Reshuffle starts a stage (the fusion break). */
                n->forced_root = n->forced_root || aliased[i];
                n->after_reshuffle = n->after_reshuffle || aliased[i];
            }
        }
        if (n_main != 1) {
            n->main_input = NULL;
            PL_TRY(sd__plan_problem(c, true,
                                    "%s: an SDK transform needs exactly one main input, found %zu",
                                    tn, n_main));
        }
        if (n_side > 0) {
            n->sides = sd_arena_alloc(&c->scratch, sizeof(pl_side) * n_side);
            if (n->sides == NULL) {
                return SD_ENOMEM;
            }
        }
        const pb_pardo *pd = n->pardo;
        for (size_t i = 0; pd != NULL && i < pd->n_side_inputs; i++) {
            const char *local = pd->side_inputs[i]->key;
            const pl_io *io = NULL;
            for (size_t j = 0; j < n->n_inputs; j++) {
                if (streq(n->inputs[j].local, local)) {
                    io = &n->inputs[j];
                }
            }
            if (io == NULL) {
                PL_TRY(sd__plan_problem(c, true,
                                        "%s: side input \"%s\" is not among the transform's inputs",
                                        tn, local));
                continue;
            }
            const Org__Apache__Beam__Model__Pipeline__V1__SideInput *si = pd->side_inputs[i]->value;
            pl_side *s = &n->sides[n->n_sides++];
            s->local = local;
            s->pcoll = io->pcoll;
            s->access = si != NULL && si->access_pattern != NULL &&
                                streq(si->access_pattern->urn, SD_URN_SIDE_INPUT_MULTIMAP)
                            ? SD_PLAN_SIDE_MULTIMAP
                            : SD_PLAN_SIDE_ITERABLE;
            s->mapping =
                si != NULL && si->window_mapping_fn != NULL ? si->window_mapping_fn->urn : "";
        }
        PL_TRY(check_env(c, n->env, tn));
    } else if (n->kind == PL_GBK) {
        n->main_input = n->inputs[0].pcoll;
    }

    /* 3. References. */
    for (size_t i = 0; i < n->n_inputs; i++) {
        bool ok;
        PL_TRY(check_pcoll(c, n->inputs[i].pcoll, tn, &ok));
    }
    for (size_t i = 0; i < n->n_outputs; i++) {
        bool ok;
        const char *pc = n->outputs[i].pcoll;
        PL_TRY(check_pcoll(c, pc, tn, &ok));
        pl_node *other = sd__plan_producer(c, pc);
        if (other != NULL && other != n) {
            const char *on = sd__plan_tname(c, other->id);
            if (on == NULL) {
                return SD_ENOMEM;
            }
            PL_TRY(sd__plan_problem(c, true, "PCollection \"%s\" is produced by both %s and %s", pc,
                                    on, tn));
            continue;
        }
        PL_TRY(sd_map_put_str(&c->producer, pc, (void *)(uintptr_t)(idx + 1)));
    }

    /* 4. Keyed inputs. */
    n = sd__plan_node(c, idx);
    if ((n->kind == PL_GBK || n->stateful) && n->main_input != NULL) {
        const pb_pcoll *in = sd__plan_pcoll_get(c, n->main_input);
        const char *urn = in != NULL ? sd__plan_coder_urn(c, in->coder_id) : NULL;
        if (urn != NULL && !streq(urn, SD_URN_CODER_KV)) {
            PL_TRY(sd__plan_problem(c, n->kind == PL_GBK,
                                    "%s: %s input \"%s\" must have a KV coder (%s), has \"%s\"", tn,
                                    n->kind == PL_GBK ? "GroupByKey" : "stateful ParDo",
                                    n->main_input, SD_URN_CODER_KV, urn));
        }
    }
    return SD_OK;
}

static sd_status check_consumers(pl_ctx *c)
{
    for (size_t i = 0; i < c->nodes.len; i++) {
        pl_node *n = sd__plan_node(c, i);
        for (size_t j = 0; j < n->n_inputs; j++) {
            const char *pc = n->inputs[j].pcoll;
            if (sd__plan_producer(c, pc) != NULL || sd__plan_pcoll_get(c, pc) == NULL) {
                continue; /* produced, or already reported as missing */
            }
            const char *tn = sd__plan_tname(c, n->id);
            if (tn == NULL) {
                return SD_ENOMEM;
            }
            PL_TRY(sd__plan_problem(c, true,
                                    "PCollection \"%s\" (input of %s) is not produced by any "
                                    "transform that runs",
                                    pc, tn));
        }
    }
    return SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Entry                                                                                      */
/* ----------------------------------------------------------------------------------------- */

sd_status sd__plan_analyze(pl_ctx *c)
{
    PL_TRY(index_components(c));
    if (c->p->components == NULL) {
        return SD_OK;
    }
    PL_TRY(sd__plan_custom_window_coders(c));
    PL_TRY(check_requirements(c));
    PL_TRY(expand_roots(c));
    for (size_t i = 0; i < c->nodes.len; i++) {
        PL_TRY(sd__plan_finish_node(c, i));
    }
    PL_TRY(sd__plan_rewrite_teststreams(c));
    PL_TRY(sd__plan_rewrite_flattens(c));
    PL_TRY(sd__plan_rewrite_merging_gbks(c));
    PL_TRY(check_consumers(c));
    /* A pipeline with no leaf transforms is valid: it has nothing to do and finishes at once
     * (the TypeScript SDK submits such pipelines in its programming-guide tests). */
    return sd__plan_topo_sort(c);
}
