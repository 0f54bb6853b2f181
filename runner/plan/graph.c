/*
 * Sundial planner: from the pipeline's transform tree to a flat graph of leaf nodes.
 *
 * The Pipeline proto is a tree of composites whose leaves are the primitives; only leaves run.
 * This file walks the tree from the root transforms and produces pl_node records:
 *
 *   composite (has subtransforms)   -> its subtransforms, recursively; except
 *   combine_per_key (liftable)      -> Precombine, GBK, Merge, Extract (new coders/pcolls)
 *   reshuffle / redistribute_*      -> nothing; its output becomes an alias of its input and
 *                                      the consumers are forced to start stages
 *   impulse, group_by_key, flatten, teststream -> runner nodes (env "")
 *   pardo with restriction_coder_id -> PairWithRestriction, SplitAndSize, Process (forced root)
 *   unknown leaf, outputs in inputs -> nothing (identity placeholder, see outputs_among_inputs)
 *   other leaves                    -> SDK nodes if the URN is SDK-executable, else a problem
 *
 * Aliases can only be resolved once the whole tree was walked (a consumer may be visited before
 * the Reshuffle it reads from), so a second pass ("finish") rewires inputs, classifies main and
 * side inputs, records producers and checks every reference. Then each TestStream output that
 * the runner cannot store in its consumers' coder is rerouted through an SDK-side transcoding
 * Flatten (rewrite_teststreams), and each Flatten's inputs are
 * made concatenable (rewrite_flattens): an input in another coder than the output's goes
 * through an SDK-side transcoding Flatten, a repeated input through a runner-side copy, each
 * into a PCollection of its own, so no other consumer of the input sees a changed coder and
 * the engine never sees one input twice. A third pass orders the nodes
 * topologically; ties are broken by node id so the order, and therefore the stage numbering,
 * never depends on map iteration order.
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

static pl_node *node_at(const pl_ctx *c, size_t i)
{
    return SD_VEC_AT(&c->nodes, pl_node, i);
}

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
    return v == 0 ? NULL : node_at(c, (size_t)(v - 1));
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
    static const char *const urns[] = {
        SD_URN_TRANSFORM_PARDO,
        SD_URN_TRANSFORM_WINDOW_INTO,
        SD_URN_TRANSFORM_MAP_WINDOWS,
        SD_URN_TRANSFORM_MERGE_WINDOWS,
        SD_URN_TRANSFORM_TO_STRING,
        SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE,
        SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS,
        SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS,
        SD_URN_TRANSFORM_COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS,
        SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES,
        SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION,
        SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS,
        SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS,
        SD_URN_TRANSFORM_SDF_TRUNCATE_SIZED_RESTRICTIONS,
    };
    for (size_t i = 0; i < sizeof(urns) / sizeof(urns[0]); i++) {
        if (streq(urn, urns[i])) {
            return true;
        }
    }
    return false;
}

static bool urn_is_combine_component(const char *urn)
{
    return streq(urn, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE) ||
           streq(urn, SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS) ||
           streq(urn, SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS) ||
           streq(urn, SD_URN_TRANSFORM_COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS) ||
           streq(urn, SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES);
}

static bool urn_is_reshuffle(const char *urn)
{
    return streq(urn, SD_URN_TRANSFORM_RESHUFFLE) ||
           streq(urn, SD_URN_TRANSFORM_REDISTRIBUTE_ARBITRARILY) ||
           streq(urn, SD_URN_TRANSFORM_REDISTRIBUTE_BY_KEY);
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
#define COPY_IOS(c, n_src, src, n_dst, dst)                                         \
    do {                                                                            \
        (n_dst) = (n_src);                                                          \
        (dst) = sd_arena_alloc(&(c)->scratch, sizeof(pl_io) * ((n_src) + 1)); \
        if ((dst) == NULL)                                                          \
            return SD_ENOMEM;                                                       \
        for (size_t i_ = 0; i_ < (n_src); i_++) {                                   \
            (dst)[i_].local = (src)[i_]->key;                                       \
            (dst)[i_].pcoll = (src)[i_]->value;                                     \
        }                                                                           \
        qsort((dst), (n_dst), sizeof(pl_io), io_cmp);                               \
    } while (0)

/* Add a node for transform message t; OUT: idx. */
static sd_status
add_node(pl_ctx *c, const char *id, pl_kind kind, const char *env, pb_transform *t, size_t *idx)
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
static sd_status
new_pcoll(pl_ctx *c, const char *base, const char *coder, const pb_pcoll *like, const char **id)
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

static const char *new_transform_id(pl_ctx *c, const char *tid, const char *suffix)
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
/* ParDo                                                                                      */
/* ----------------------------------------------------------------------------------------- */

static bool pardo_has_side(const pb_pardo *pd, const char *local)
{
    for (size_t i = 0; pd != NULL && i < pd->n_side_inputs; i++) {
        if (streq(pd->side_inputs[i]->key, local)) {
            return true;
        }
    }
    return false;
}

/* Check the ParDoPayload parts that do not depend on the graph; fill node flags. */
static sd_status check_pardo(pl_ctx *c, size_t idx)
{
    pl_node *n = node_at(c, idx);
    const pb_pardo *pd = n->pardo;
    const char *tn = sd__plan_tname(c, n->id);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    bool stateful = pd->n_state_specs > 0 || pd->n_timer_family_specs > 0;
    /* Beam sorts by timestamp per key, so only a stateful (keyed) ParDo can ask for it. */
    if (pd->requires_time_sorted_input && !stateful) {
        PL_TRY(sd__plan_problem(c, false,
                                "%s: requires_time_sorted_input on a ParDo without state or "
                                "timers is not supported",
                                tn));
    }
    if (stateful && pd->restriction_coder_id[0] != '\0') {
        PL_TRY(sd__plan_problem(c, false,
                                "%s: a splittable DoFn with state or timers is not supported", tn));
    }
    for (size_t i = 0; i < pd->n_side_inputs; i++) {
        const char *local = pd->side_inputs[i]->key;
        const Org__Apache__Beam__Model__Pipeline__V1__SideInput *si = pd->side_inputs[i]->value;
        if (si == NULL || si->access_pattern == NULL) {
            PL_TRY(sd__plan_problem(c, true, "%s: side input \"%s\" has no access pattern", tn,
                                    local));
            continue;
        }
        const char *ap = si->access_pattern->urn;
        if (!streq(ap, SD_URN_SIDE_INPUT_ITERABLE) && !streq(ap, SD_URN_SIDE_INPUT_MULTIMAP)) {
            PL_TRY(sd__plan_problem(c, false,
                                    "%s: side input \"%s\" has unsupported access pattern "
                                    "\"%s\" (only iterable, multimap)",
                                    tn, local, ap));
        }
    }
    for (size_t i = 0; i < pd->n_state_specs; i++) {
        const char *sid = pd->state_specs[i]->key;
        const Org__Apache__Beam__Model__Pipeline__V1__StateSpec *ss = pd->state_specs[i]->value;
        if (ss == NULL) {
            PL_TRY(sd__plan_problem(c, true, "%s: state \"%s\" has no spec", tn, sid));
            continue;
        }
        if (ss->protocol != NULL && ss->protocol->urn[0] != '\0') {
            const char *pu = ss->protocol->urn;
            if (!streq(pu, SD_URN_USER_STATE_BAG) && !streq(pu, SD_URN_USER_STATE_MULTIMAP) &&
                !streq(pu, SD_URN_USER_STATE_ORDERED_LIST)) {
                PL_TRY(sd__plan_problem(
                    c, false, "%s: state \"%s\" uses unsupported protocol \"%s\"", tn, sid, pu));
            }
        }
        const char *coders[2] = { NULL, NULL };
        switch (ss->spec_case) {
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_READ_MODIFY_WRITE_SPEC:
            coders[0] = ss->read_modify_write_spec->coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_BAG_SPEC:
            coders[0] = ss->bag_spec->element_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_COMBINING_SPEC:
            coders[0] = ss->combining_spec->accumulator_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_MAP_SPEC:
            coders[0] = ss->map_spec->key_coder_id;
            coders[1] = ss->map_spec->value_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_SET_SPEC:
            coders[0] = ss->set_spec->element_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_ORDERED_LIST_SPEC:
            coders[0] = ss->ordered_list_spec->element_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_MULTIMAP_SPEC:
            coders[0] = ss->multimap_spec->key_coder_id;
            coders[1] = ss->multimap_spec->value_coder_id;
            break;
        default:
            break;
        }
        for (size_t j = 0; j < 2; j++) {
            if (coders[j] != NULL && coders[j][0] != '\0') {
                char *who = sd_arena_printf(&c->scratch, "%s state \"%s\"", tn, sid);
                if (who == NULL) {
                    return SD_ENOMEM;
                }
                PL_TRY(sd__plan_check_coder(c, coders[j], who));
            }
        }
    }
    pl_timer *timers = NULL;
    if (pd->n_timer_family_specs > 0) {
        timers = sd_arena_alloc(&c->scratch, sizeof(*timers) * pd->n_timer_family_specs);
        if (timers == NULL) {
            return SD_ENOMEM;
        }
    }
    for (size_t i = 0; i < pd->n_timer_family_specs; i++) {
        const char *fid = pd->timer_family_specs[i]->key;
        const Org__Apache__Beam__Model__Pipeline__V1__TimerFamilySpec *tf =
            pd->timer_family_specs[i]->value;
        timers[i].family = fid;
        timers[i].coder = tf != NULL ? tf->timer_family_coder_id : "";
        if (tf == NULL) {
            PL_TRY(sd__plan_problem(c, true, "%s: timer family \"%s\" has no spec", tn, fid));
            continue;
        }
        if (tf->time_domain ==
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIME_DOMAIN__ENUM__EVENT_TIME) {
            timers[i].domain = SD_PLAN_EVENT_TIME;
        } else if (tf->time_domain ==
                   ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIME_DOMAIN__ENUM__PROCESSING_TIME) {
            timers[i].domain = SD_PLAN_PROCESSING_TIME;
        } else {
            PL_TRY(sd__plan_problem(c, false,
                                    "%s: timer family \"%s\" has unsupported time domain %d", tn,
                                    fid, (int)tf->time_domain));
        }
        char *who = sd_arena_printf(&c->scratch, "%s timer family \"%s\"", tn, fid);
        if (who == NULL) {
            return SD_ENOMEM;
        }
        const char *urn = sd__plan_coder_urn(c, tf->timer_family_coder_id);
        PL_TRY(sd__plan_check_coder(c, tf->timer_family_coder_id, who));
        if (urn != NULL && !streq(urn, SD_URN_CODER_TIMER)) {
            PL_TRY(sd__plan_problem(c, true, "%s: coder \"%s\" is \"%s\", expected %s", who,
                                    tf->timer_family_coder_id, urn, SD_URN_CODER_TIMER));
        }
    }
    if (pd->restriction_coder_id[0] != '\0') {
        char *who = sd_arena_printf(&c->scratch, "%s restriction", tn);
        if (who == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd__plan_check_coder(c, pd->restriction_coder_id, who));
    }
    n = node_at(c, idx);
    n->timers = timers;
    n->n_timers = pd->n_timer_family_specs;
    n->stateful = stateful;
    n->forced_root = n->forced_root || stateful;
    n->finalization = pd->requests_finalization;
    n->time_sorted = pd->requires_time_sorted_input && stateful;
    n->window_expiration = pd->on_window_expiration_timer_family_spec[0] != '\0';
    n->expiration_family = NULL;
    if (n->window_expiration) {
        n->expiration_family =
            sd_arena_strdup(&c->scratch, pd->on_window_expiration_timer_family_spec);
        if (n->expiration_family == NULL) {
            return SD_ENOMEM;
        }
    }
    return SD_OK;
}

/* The one main input of t given its ParDoPayload; NULL (and *count) when not exactly one. */
static const char *pardo_main_local(const pb_transform *t, const pb_pardo *pd, size_t *count)
{
    const char *local = NULL;
    *count = 0;
    for (size_t i = 0; i < t->n_inputs; i++) {
        if (!pardo_has_side(pd, t->inputs[i]->key)) {
            local = t->inputs[i]->key;
            (*count)++;
        }
    }
    return *count == 1 ? local : NULL;
}

/*
 * A splittable DoFn: three nodes; the process node keeps the ParDo's id. The DoFn's side
 * inputs go to all three, since its restriction methods (GetInitialRestriction, SplitRestriction,
 * GetSize) may read them as ProcessElement does: the SDK looks each one up among the inputs of
 * the transform it is running.
 */
static sd_status expand_sdf(pl_ctx *c, const char *tid, const pb_transform *t, pb_pardo *pd)
{
    const char *tn = sd__plan_tname(c, tid);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    size_t count;
    const char *local = pardo_main_local(t, pd, &count);
    if (local == NULL) {
        return sd__plan_problem(c, true, "%s: a ParDo needs exactly one main input, found %zu", tn,
                                count);
    }
    const char *in_pc = NULL;
    for (size_t i = 0; i < t->n_inputs; i++) {
        if (streq(t->inputs[i]->key, local)) {
            in_pc = t->inputs[i]->value;
        }
    }
    const pb_pcoll *in = sd__plan_pcoll_get(c, in_pc);
    if (in == NULL) {
        return sd__plan_problem(c, true, "%s: input PCollection \"%s\" does not exist", tn, in_pc);
    }
    if (sd__plan_coder_get(c, pd->restriction_coder_id) == NULL) {
        return SD_OK; /* reported by check_pardo */
    }
    char *b1 = sd_arena_printf(&c->scratch, "%s/sdf_kv_elem_restr", tid);
    char *b2 = sd_arena_printf(&c->scratch, "%s/sdf_size", tid);
    char *b3 = sd_arena_printf(&c->scratch, "%s/sdf_kv_elem_restr_size", tid);
    char *p1 = sd_arena_printf(&c->scratch, "%s/pair_with_restriction", tid);
    char *p2 = sd_arena_printf(&c->scratch, "%s/split_and_size", tid);
    if (b1 == NULL || b2 == NULL || b3 == NULL || p1 == NULL || p2 == NULL) {
        return SD_ENOMEM;
    }
    const char *ker, *size, *kers, *pwr, *sns;
    const char *c1[2] = { in->coder_id, pd->restriction_coder_id };
    PL_TRY(sd__plan_new_coder(c, b1, SD_URN_CODER_KV, 2, c1, &ker));
    PL_TRY(sd__plan_new_coder(c, b2, SD_URN_CODER_DOUBLE, 0, NULL, &size));
    const char *c3[2] = { ker, size };
    PL_TRY(sd__plan_new_coder(c, b3, SD_URN_CODER_KV, 2, c3, &kers));
    PL_TRY(new_pcoll(c, p1, ker, in, &pwr));
    PL_TRY(new_pcoll(c, p2, kers, in, &sns));

    const char *id_pair = new_transform_id(c, tid, "PairWithRestriction");
    const char *id_split = new_transform_id(c, tid, "SplitAndSizeRestrictions");
    if (id_pair == NULL || id_split == NULL) {
        return SD_ENOMEM;
    }
    ProtobufCBinaryData payload = t->spec->payload;
    /* Each transform: the ParDo's inputs with the main input replaced by the one it reads. */
    pl_io *pins = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (t->n_inputs + 1));
    pl_io *sins = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (t->n_inputs + 1));
    pl_io *ins = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (t->n_inputs + 1));
    pl_io *outs = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (t->n_outputs + 1));
    if (pins == NULL || sins == NULL || ins == NULL || outs == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < t->n_inputs; i++) {
        bool main = streq(t->inputs[i]->key, local);
        pins[i].local = sins[i].local = ins[i].local = t->inputs[i]->key;
        pins[i].pcoll = main ? in_pc : t->inputs[i]->value;
        sins[i].pcoll = main ? pwr : t->inputs[i]->value;
        ins[i].pcoll = main ? sns : t->inputs[i]->value;
    }
    pl_io pout = { "out", pwr };
    pb_transform *tp =
        sd__plan_synth_transform(c, id_pair, SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION, payload,
                                 t->environment_id, t->n_inputs, pins, 1, &pout);
    pl_io sout = { "out", sns };
    pb_transform *ts = sd__plan_synth_transform(
        c, id_split, SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS, payload, t->environment_id,
        t->n_inputs, sins, 1, &sout);
    if (tp == NULL || ts == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < t->n_outputs; i++) {
        outs[i].local = t->outputs[i]->key;
        outs[i].pcoll = t->outputs[i]->value;
    }
    pb_transform *tproc = sd__plan_synth_transform(
        c, tid, SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS, payload,
        t->environment_id, t->n_inputs, ins, t->n_outputs, outs);
    if (tproc == NULL) {
        return SD_ENOMEM;
    }
    /* Keep the user's name and annotations/display data on the transform running the DoFn. */
    tproc->unique_name = t->unique_name;
    tproc->n_display_data = t->n_display_data;
    tproc->display_data = t->display_data;
    tproc->n_annotations = t->n_annotations;
    tproc->annotations = t->annotations;
    tproc->base.n_unknown_fields = t->base.n_unknown_fields;
    tproc->base.unknown_fields = t->base.unknown_fields;

    size_t i1, i2, i3;
    PL_TRY(add_node(c, id_pair, PL_SDK, t->environment_id, tp, &i1));
    PL_TRY(add_node(c, id_split, PL_SDK, t->environment_id, ts, &i2));
    PL_TRY(add_node(c, tid, PL_SDK, t->environment_id, tproc, &i3));
    /* Their side inputs are the ParDo's (the payload says which inputs are sides). */
    node_at(c, i1)->pardo = pd;
    node_at(c, i2)->pardo = pd;
    pl_node *n = node_at(c, i3);
    n->pardo = pd;
    n->splittable = true;
    n->forced_root = true;
    return check_pardo(c, i3);
}

/* ----------------------------------------------------------------------------------------- */
/* Combine lifting                                                                            */
/* ----------------------------------------------------------------------------------------- */

/* The environment of a composite: its own, else that of its first descendant that has one. */
static const char *composite_env(const pl_ctx *c, const pb_transform *t, unsigned depth)
{
    if (t->environment_id != NULL && t->environment_id[0] != '\0') {
        return t->environment_id;
    }
    for (size_t i = 0; depth < 16 && i < t->n_subtransforms; i++) {
        const pb_transform *s = sd_map_get_str(&c->transforms, t->subtransforms[i]);
        if (s != NULL) {
            const char *e = composite_env(c, s, depth + 1);
            if (e[0] != '\0') {
                return e;
            }
        }
    }
    return "";
}

/*
 * Whether a trigger still sees what it needs when a combine is lifted. Lifting precombines
 * in the SDK, so the GroupByKey sees one accumulator where several elements were: a trigger
 * that counts elements (AfterCount(n > 1), and whatever contains one) would fire late or
 * never. Beam's own rule (Python's is_compatible_with_combiner_lifting): time- and
 * watermark-based triggers lift, count-based ones do not, unknown shapes do not.
 */
static bool trigger_liftable(const pb_trigger *t, unsigned depth)
{
    if (t == NULL) {
        return true;
    }
    if (depth > 64) {
        return false;
    }
    switch (t->trigger_case) {
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER__NOT_SET:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_DEFAULT:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_ALWAYS:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_NEVER:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_PROCESSING_TIME:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        return true;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_ELEMENT_COUNT:
        return t->element_count != NULL && t->element_count->element_count <= 1;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_END_OF_WINDOW:
        return t->after_end_of_window == NULL ||
               (trigger_liftable(t->after_end_of_window->early_firings, depth + 1) &&
                trigger_liftable(t->after_end_of_window->late_firings, depth + 1));
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_ANY:
        for (size_t i = 0; t->after_any != NULL && i < t->after_any->n_subtriggers; i++) {
            if (!trigger_liftable(t->after_any->subtriggers[i], depth + 1)) {
                return false;
            }
        }
        return true;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_REPEAT:
        return t->repeat == NULL || trigger_liftable(t->repeat->subtrigger, depth + 1);
    default:
        return false;
    }
}

/*
 * The Beam TypeScript SDK (2.49) announces exactly these two capabilities on its environments
 * and nothing else, which no other SDK does: the one way a runner can know it faces that SDK.
 */
bool sd__plan_env_is_typescript(const pl_ctx *c, const char *env_id)
{
    const pb_env *e = sd_map_get_str(&c->envs, env_id);
    if (e == NULL || e->n_capabilities != 2) {
        return false;
    }
    bool window = false, siblings = false;
    for (size_t i = 0; i < e->n_capabilities; i++) {
        window = window || streq(e->capabilities[i], "beam:coder:interval_window:v1");
        siblings = siblings || streq(e->capabilities[i], "beam:protocol:sibling_workers:v1");
    }
    return window && siblings;
}

static bool coder_has_urn(const pl_ctx *c, const char *coder_id, const char *urn, unsigned depth)
{
    const pb_coder *cd = sd__plan_coder_get(c, coder_id);
    if (cd == NULL || depth > 32) {
        return false;
    }
    if (cd->spec != NULL && cd->spec->urn != NULL && streq(cd->spec->urn, urn)) {
        return true;
    }
    for (size_t i = 0; i < cd->n_component_coder_ids; i++) {
        if (coder_has_urn(c, cd->component_coder_ids[i], urn, depth + 1)) {
            return true;
        }
    }
    return false;
}

/*
 * Lift a combine_per_key composite if possible. OUT: lifted; why (when not lifted: the reason,
 * static or scratch string).
 */
static sd_status
try_lift(pl_ctx *c, const char *tid, const pb_transform *t, bool *lifted, const char **why)
{
    *lifted = false;
    if (t->n_inputs != 1 || t->n_outputs != 1) {
        *why = "it needs exactly one input and one output";
        return SD_OK;
    }
    ProtobufCAllocator pa = sd__plan_arena_pb(&c->scratch);
    pb_combine *cp = NULL;
    if (t->spec != NULL) {
        cp = org__apache__beam__model__pipeline__v1__combine_payload__unpack(
            &pa, t->spec->payload.len, t->spec->payload.data);
    }
    if (cp == NULL) {
        if (c->scratch.failed) {
            return SD_ENOMEM;
        }
        *why = "its payload is not a CombinePayload";
        return SD_OK;
    }
    const char *acc = cp->accumulator_coder_id;
    if (acc[0] == '\0' || sd__plan_coder_get(c, acc) == NULL) {
        *why = "its accumulator coder is missing";
        return SD_OK;
    }
    const char *tn = sd__plan_tname(c, tid);
    char *who = tn == NULL ? NULL : sd_arena_printf(&c->scratch, "%s accumulator", tn);
    if (who == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd__plan_check_coder(c, acc, who));
    const char *in_pc = t->inputs[0]->value;
    const pb_pcoll *in = sd__plan_pcoll_get(c, in_pc);
    if (in == NULL) {
        *why = "its input PCollection is missing";
        return SD_OK;
    }
    const pb_coder *kv = sd__plan_coder_get(c, in->coder_id);
    if (kv == NULL || kv->spec == NULL || !streq(kv->spec->urn, SD_URN_CODER_KV) ||
        kv->n_component_coder_ids != 2) {
        *why = "its input coder is not a KV coder";
        return SD_OK;
    }
    const pb_wstrat *ws = sd_map_get_str(&c->wstrats, in->windowing_strategy_id);
    if (ws == NULL) {
        *why = "its input windowing strategy is missing";
        return SD_OK;
    }
    if (!sd__plan_ws_non_merging(c, ws)) {
        *why = "its input windows merge";
        return SD_OK;
    }
    if (ws->output_time !=
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW &&
        ws->output_time != ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__UNSPECIFIED) {
        *why = "its input output time is not END_OF_WINDOW";
        return SD_OK;
    }
    if (!trigger_liftable(ws->trigger, 0)) {
        *why = "its trigger counts elements, which precombining would hide";
        return SD_OK;
    }
    const char *env = composite_env(c, t, 0);
    if (env[0] == '\0') {
        *why = "it has no environment";
        return SD_OK;
    }
    /*
     * Right answers by default: the TypeScript SDK 2.49's VarIntCoder, which its generic
     * object coder uses for numbers too, keeps 32 bits, so a lifted sum (whose accumulator
     * crosses the wire) wraps where its direct runner, which never encodes accumulators, is
     * exact. An accumulator that is a bare varint (a JavaScript number: sum, count) crosses
     * the wire with that SDK's DoubleCoder instead, which carries every JavaScript number
     * exactly; the runner chooses the lifted PCollections' coders, and nothing else reads
     * them. Other accumulators holding integers are not lifted: the values are grouped and the
     * SDK combines them in memory (one grouped element per key, which the SDK must receive
     * in one message of at most 4 MiB).
     */
    bool ts = !c->opt.force_lift && sd__plan_env_is_typescript(c, env);
    const pb_coder *acc_coder = sd__plan_coder_get(c, acc);
    if (ts && acc_coder != NULL && acc_coder->spec != NULL &&
        streq(acc_coder->spec->urn, SD_URN_CODER_VARINT)) {
        const char *base = sd_arena_printf(&c->scratch, "%s/acc_double", tid);
        if (base == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd__plan_new_coder(c, base, SD_URN_CODER_DOUBLE, 0, NULL, &acc));
    } else if (ts && (coder_has_urn(c, acc, SD_URN_CODER_VARINT, 0) ||
                      coder_has_urn(c, acc, "beam:coder:genericobjectjs:v1", 0))) {
        *why = "the TypeScript SDK 2.49 encodes integers in accumulators with 32 bits (set "
               "beam:option:sundial_lift_combiners:v1 to true to lift it anyway)";
        return SD_OK;
    }

    const char *k = kv->component_coder_ids[0];
    const char *b[6] = {
        sd_arena_printf(&c->scratch, "%s/acc_iter", tid),
        sd_arena_printf(&c->scratch, "%s/kv_acc", tid),
        sd_arena_printf(&c->scratch, "%s/kv_acc_iter", tid),
        sd_arena_printf(&c->scratch, "%s/lifted", tid),
        sd_arena_printf(&c->scratch, "%s/grouped", tid),
        sd_arena_printf(&c->scratch, "%s/merged", tid),
    };
    for (size_t i = 0; i < 6; i++) {
        if (b[i] == NULL) {
            return SD_ENOMEM;
        }
    }
    const char *iter_a, *kv_ka, *kv_kia, *lifted_pc, *grouped_pc, *merged_pc;
    PL_TRY(sd__plan_new_coder(c, b[0], SD_URN_CODER_ITERABLE, 1, &acc, &iter_a));
    const char *ka[2] = { k, acc };
    PL_TRY(sd__plan_new_coder(c, b[1], SD_URN_CODER_KV, 2, ka, &kv_ka));
    const char *kia[2] = { k, iter_a };
    PL_TRY(sd__plan_new_coder(c, b[2], SD_URN_CODER_KV, 2, kia, &kv_kia));
    PL_TRY(new_pcoll(c, b[3], kv_ka, in, &lifted_pc));
    PL_TRY(new_pcoll(c, b[4], kv_kia, in, &grouped_pc));
    PL_TRY(new_pcoll(c, b[5], kv_ka, in, &merged_pc));

    const char *ids[4] = {
        new_transform_id(c, tid, "Precombine"),
        new_transform_id(c, tid, "Group"),
        new_transform_id(c, tid, "Merge"),
        new_transform_id(c, tid, "Extract"),
    };
    for (size_t i = 0; i < 4; i++) {
        if (ids[i] == NULL) {
            return SD_ENOMEM;
        }
        /* Reserve each id before the next is chosen. */
        PL_TRY(sd_map_put_str(&c->transform_ids, ids[i], PL_PRESENT));
    }
    ProtobufCBinaryData payload = t->spec->payload;
    ProtobufCBinaryData none = { 0, NULL };
    const char *urns[4] = {
        SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE,
        SD_URN_TRANSFORM_GROUP_BY_KEY,
        SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS,
        SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS,
    };
    pl_io in_io[4] = {
        { t->inputs[0]->key, in_pc },
        { "in", lifted_pc },
        { "in", grouped_pc },
        { "in", merged_pc },
    };
    pl_io out_io[4] = {
        { "out", lifted_pc },
        { "out", grouped_pc },
        { "out", merged_pc },
        { t->outputs[0]->key, t->outputs[0]->value },
    };
    for (size_t i = 0; i < 4; i++) {
        bool gbk = i == 1;
        pb_transform *nt = sd__plan_synth_transform(c, ids[i], urns[i], gbk ? none : payload,
                                                    gbk ? "" : env, 1, &in_io[i], 1, &out_io[i]);
        if (nt == NULL) {
            return SD_ENOMEM;
        }
        size_t idx;
        PL_TRY(add_node(c, ids[i], gbk ? PL_GBK : PL_SDK, env, nt, &idx));
        if (!gbk) {
            node_at(c, idx)->acc_coder = acc;
        }
    }
    *lifted = true;
    return SD_OK;
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
    case PL_GBK:
        if (t->n_inputs != 1 || t->n_outputs != 1) {
            PL_TRY(sd__plan_problem(c, true,
                                    "%s: GroupByKey needs one input and one output (has %zu and "
                                    "%zu)",
                                    tn, t->n_inputs, t->n_outputs));
            ok = false;
        }
        break;
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
    PL_TRY(add_node(c, tid, kind, "", (pb_transform *)t, &idx));
    node_at(c, idx)->teststream = ts;
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
            return expand_sdf(c, tid, t, pd);
        }
        size_t idx;
        PL_TRY(add_node(c, tid, PL_SDK, t->environment_id, (pb_transform *)t, &idx));
        node_at(c, idx)->pardo = pd;
        return check_pardo(c, idx);
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
    PL_TRY(add_node(c, tid, PL_SDK, t->environment_id, (pb_transform *)t, &idx));
    node_at(c, idx)->acc_coder = acc;
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
    if (urn_is_reshuffle(urn) && t->n_inputs == 1 && t->n_outputs == 1) {
        PL_TRY(sd_map_put_str(&c->alias, t->outputs[0]->value, t->inputs[0]->value));
    } else if (streq(urn, SD_URN_TRANSFORM_IMPULSE)) {
        st = runner_leaf(c, tid, t, PL_IMPULSE);
    } else if (streq(urn, SD_URN_TRANSFORM_GROUP_BY_KEY)) {
        st = runner_leaf(c, tid, t, PL_GBK);
    } else if (streq(urn, SD_URN_TRANSFORM_FLATTEN)) {
        st = runner_leaf(c, tid, t, PL_FLATTEN);
    } else if (streq(urn, SD_URN_TRANSFORM_TEST_STREAM)) {
        st = runner_leaf(c, tid, t, PL_TESTSTREAM);
    } else if (streq(urn, SD_URN_TRANSFORM_COMBINE_PER_KEY) && c->opt.lift_combiners) {
        bool lifted = false;
        const char *why = NULL;
        st = try_lift(c, tid, t, &lifted, &why);
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

static const char *resolve_alias(const pl_ctx *c, const char *pc)
{
    for (unsigned i = 0; i < MAX_ALIAS_CHAIN; i++) {
        const char *next = sd_map_get_str(&c->alias, pc);
        if (next == NULL) {
            return pc;
        }
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
static sd_status sync_msg_io(pl_ctx *c, pl_node *n, bool outputs)
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

static sd_status finish_node(pl_ctx *c, size_t idx)
{
    pl_node *n = node_at(c, idx);
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
        const char *r = resolve_alias(c, n->inputs[i].pcoll);
        if (r != n->inputs[i].pcoll) {
            n->inputs[i].pcoll = r;
            aliased[i] = true;
            changed = true;
        }
    }
    if (changed) {
        PL_TRY(sync_msg_io(c, n, false));
    }

    /* 2. Main and side inputs. */
    if (n->kind == PL_SDK) {
        size_t n_main = 0;
        size_t n_side = 0;
        for (size_t i = 0; i < n->n_inputs; i++) {
            if (pardo_has_side(n->pardo, n->inputs[i].local)) {
                n_side++;
            } else {
                n_main++;
                n->main_input = n->inputs[i].pcoll;
                /* A consumer of an elided Reshuffle starts a stage (the fusion break). */
                n->forced_root = n->forced_root || aliased[i];
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
    n = node_at(c, idx);
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

/* ----------------------------------------------------------------------------------------- */
/* Flatten inputs: transcoding and repeated inputs                                            */
/* ----------------------------------------------------------------------------------------- */

/*
 * The environment that transcodes a Flatten input: the input's producer's (so the transcoder
 * fuses into that stage), else the Flatten's own, else that of an SDK consumer of the
 * Flatten's output, else that of any SDK node. NULL when the pipeline runs no SDK code.
 */
static const char *transcode_env(const pl_ctx *c, size_t fidx, const char *in_pc)
{
    const pl_node *prod = sd__plan_producer(c, in_pc);
    if (prod != NULL && prod->kind == PL_SDK && prod->env[0] != '\0') {
        return prod->env;
    }
    const pl_node *f = node_at(c, fidx);
    const char *own = f->msg->environment_id;
    if (own != NULL && own[0] != '\0' && sd_map_has(&c->envs, sd_bytes_str(own))) {
        return own;
    }
    const char *out_pc = f->outputs[0].pcoll;
    const char *any = NULL;
    for (size_t i = 0; i < c->nodes.len; i++) {
        const pl_node *n = node_at(c, i);
        if (n->kind != PL_SDK || n->env[0] == '\0') {
            continue;
        }
        for (size_t j = 0; j < n->n_inputs; j++) {
            if (streq(n->inputs[j].pcoll, out_pc)) {
                return n->env;
            }
        }
        any = any != NULL ? any : n->env;
    }
    return any;
}

/*
 * A one-input Flatten reading input i of Flatten fidx into a new PCollection (coder `coder`,
 * the input's windowing and boundedness), which becomes that input instead. env NULL makes it
 * a runner-side Flatten (an element copy), otherwise an SDK-side one: the SDK decodes with the
 * input's coder and its data sink encodes with `coder`, which is how an element changes coder
 * without the runner parsing either. The new node is finished here (producer, references).
 */
static sd_status
reroute_flatten_input(pl_ctx *c, size_t fidx, size_t i, const char *env, const char *coder)
{
    const pl_node *f = node_at(c, fidx);
    const char *in_pc = f->inputs[i].pcoll;
    const pb_pcoll *in = sd__plan_pcoll_get(c, in_pc);
    bool sdk = env != NULL;
    char *tbase = sd_arena_printf(&c->scratch, "%s/%s/%s", f->id, sdk ? "Transcode" : "Copy",
                                  f->inputs[i].local);
    char *pbase = sd_arena_printf(&c->scratch, "%s/%s/%s", f->id, sdk ? "transcoded" : "copy",
                                  f->inputs[i].local);
    if (tbase == NULL || pbase == NULL) {
        return SD_ENOMEM;
    }
    const char *tid = sd__plan_unique_id(c, &c->transform_ids, NULL, tbase);
    if (tid == NULL) {
        return SD_ENOMEM;
    }
    const char *pc;
    PL_TRY(new_pcoll(c, pbase, coder, in, &pc));
    pl_io io_in = { "0", in_pc };
    pl_io io_out = { "0", pc };
    ProtobufCBinaryData none = { 0, NULL };
    pb_transform *t = sd__plan_synth_transform(c, tid, SD_URN_TRANSFORM_FLATTEN, none,
                                               sdk ? env : "", 1, &io_in, 1, &io_out);
    if (t == NULL) {
        return SD_ENOMEM;
    }
    size_t idx;
    PL_TRY(add_node(c, tid, sdk ? PL_SDK : PL_FLATTEN, env, t, &idx));
    PL_TRY(finish_node(c, idx));
    node_at(c, fidx)->inputs[i].pcoll = pc;
    return SD_OK;
}

/*
 * The runner concatenates a Flatten's input bytes, so every input must arrive in the output's
 * coder, and the engine reads each input PCollection once. Per input, in listing order:
 *   - its coder differs (structurally) from the output's: an SDK-side transcoding Flatten
 *     (Prism injects the same) re-encodes it into a PCollection of its own with the output's
 *     coder, so the input keeps its coder for every other consumer (a GroupByKey, a side
 *     input, another Flatten with another coder);
 *   - else it repeats an earlier input: a runner-side copy Flatten gives this listing its own
 *     PCollection, so each listing contributes every element once (Beam semantics).
 * When no SDK environment exists at all, differing inputs are left as they are and take the
 * output's wire coder at assembly (the only choice without an SDK to transcode).
 */
static sd_status rewrite_flattens(pl_ctx *c)
{
    size_t n_nodes = c->nodes.len; /* new nodes are one-input Flattens: nothing to rewrite */
    for (size_t k = 0; k < n_nodes; k++) {
        pl_node *f = node_at(c, k);
        if (f->kind != PL_FLATTEN || f->n_outputs != 1) {
            continue;
        }
        const pb_pcoll *out = sd__plan_pcoll_get(c, f->outputs[0].pcoll);
        if (out == NULL) {
            continue; /* reported */
        }
        size_t n_in = f->n_inputs;
        const char **orig = sd_arena_alloc(&c->scratch, sizeof(*orig) * (n_in + 1));
        if (orig == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < n_in; i++) {
            orig[i] = f->inputs[i].pcoll;
        }
        bool changed = false;
        for (size_t i = 0; i < n_in; i++) {
            const pb_pcoll *in = sd__plan_pcoll_get(c, orig[i]);
            if (in == NULL) {
                continue; /* reported */
            }
            bool repeat = false;
            for (size_t j = 0; j < i && !repeat; j++) {
                repeat = streq(orig[j], orig[i]);
            }
            const char *env = NULL;
            if (!sd__plan_coders_equal(c, in->coder_id, out->coder_id)) {
                env = transcode_env(c, k, orig[i]);
            }
            if (env != NULL) {
                PL_TRY(reroute_flatten_input(c, k, i, env, out->coder_id));
                changed = true;
            } else if (repeat) {
                PL_TRY(reroute_flatten_input(c, k, i, NULL, in->coder_id));
                changed = true;
            }
        }
        if (changed) {
            PL_TRY(sync_msg_io(c, node_at(c, k), false));
        }
    }
    return SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* TestStream outputs: transcoding                                                            */
/* ----------------------------------------------------------------------------------------- */

/*
 * The coder a TestStream's elements are stored in, or NULL when the runner cannot store them in
 * any form an SDK can read. Each element arrives as the outer encoding of the payload's coder C,
 * and the engine keeps nested encodings. When W(C) = C (the C SDK's coders) the runner
 * re-encodes each element (xplan.c); when C is opaque (pickled_python, TypeScript's
 * genericobjectjs), W(C) = length_prefix(C), and varint(len) + the outer bytes already is its
 * nested encoding. A known structural coder over opaque parts falls between: kv(pickled,
 * pickled) has W = kv(lp(pickled), lp(pickled)), and only the SDK knows where a pickled key
 * ends; such elements are stored length-prefixed whole, in a new length_prefix(C) "<C>_raw".
 * OUT: stored (id), needs_sdk (the stored form is not W(C): every output must be transcoded).
 */
static sd_status
teststream_stored_coder(pl_ctx *c, const char *coder, const char **stored, bool *needs_sdk)
{
    *stored = NULL;
    *needs_sdk = false;
    const char *urn = sd__plan_coder_urn(c, coder);
    if (urn == NULL) {
        return SD_OK; /* missing: reported */
    }
    PL_TRY(sd__plan_wire_coder(c, coder, stored));
    if (streq(*stored, coder) || !sd__plan_coder_known(urn)) {
        return SD_OK;
    }
    *needs_sdk = true;
    char *base = sd_arena_printf(&c->scratch, "%s_raw", coder);
    if (base == NULL) {
        return SD_ENOMEM;
    }
    return sd__plan_new_coder(c, base, SD_URN_CODER_LENGTH_PREFIX, 1, &coder, stored);
}

/*
 * The environment that transcodes a TestStream output: that of its first SDK consumer (main or
 * side input, in node order, so the transcoder fuses with it when it can), else of any SDK
 * node. NULL when the pipeline runs no SDK code.
 */
static const char *teststream_transcode_env(const pl_ctx *c, const char *pcoll)
{
    const char *any = NULL;
    for (size_t i = 0; i < c->nodes.len; i++) {
        const pl_node *n = node_at(c, i);
        if (n->kind != PL_SDK || n->env[0] == '\0') {
            continue;
        }
        for (size_t j = 0; j < n->n_inputs; j++) {
            if (streq(n->inputs[j].pcoll, pcoll)) {
                return n->env;
            }
        }
        any = any != NULL ? any : n->env;
    }
    return any;
}

/*
 * Output i of TestStream tsidx now goes to a new PCollection "<ts>/raw/<tag>" (coder raw, the
 * output's windowing and boundedness), and an SDK-side beam:transform:flatten:v1
 * "<ts>/Transcode/<tag>" in env reads it and produces the original output PCollection: the SDK
 * decodes with raw and its data sink encodes with the output's wire coder. Every consumer keeps
 * reading the original PCollection. The new node is finished here (producer, references).
 */
static sd_status
reroute_teststream_output(pl_ctx *c, size_t tsidx, size_t i, const char *env, const char *raw)
{
    const pl_node *ts = node_at(c, tsidx);
    const char *out_pc = ts->outputs[i].pcoll;
    const pb_pcoll *out = sd__plan_pcoll_get(c, out_pc);
    char *tbase = sd_arena_printf(&c->scratch, "%s/Transcode/%s", ts->id, ts->outputs[i].local);
    char *pbase = sd_arena_printf(&c->scratch, "%s/raw/%s", ts->id, ts->outputs[i].local);
    if (tbase == NULL || pbase == NULL) {
        return SD_ENOMEM;
    }
    const char *tid = sd__plan_unique_id(c, &c->transform_ids, NULL, tbase);
    if (tid == NULL) {
        return SD_ENOMEM;
    }
    const char *pc;
    PL_TRY(new_pcoll(c, pbase, raw, out, &pc));
    pl_io io_in = { "0", pc };
    pl_io io_out = { "0", out_pc };
    ProtobufCBinaryData none = { 0, NULL };
    pb_transform *t = sd__plan_synth_transform(c, tid, SD_URN_TRANSFORM_FLATTEN, none, env, 1,
                                               &io_in, 1, &io_out);
    if (t == NULL) {
        return SD_ENOMEM;
    }
    size_t idx;
    PL_TRY(add_node(c, tid, PL_SDK, env, t, &idx));
    /* The transcoder takes over the output; the TestStream produces the raw PCollection. */
    PL_TRY(sd_map_put_str(&c->producer, out_pc, (void *)(uintptr_t)(idx + 1)));
    PL_TRY(sd_map_put_str(&c->producer, pc, (void *)(uintptr_t)(tsidx + 1)));
    node_at(c, tsidx)->outputs[i].pcoll = pc;
    return finish_node(c, idx);
}

/*
 * The runner stores a TestStream's elements in one coder (teststream_stored_coder), but each
 * output's consumers read that output's own coder, which need not be the payload's: Python
 * encodes the elements with FastPrimitivesCoder (pickled_python) and gives the output the
 * element type's coder, e.g. kv(DeterministicFastPrimitivesCoder, FastPrimitivesCoder), whose
 * key bytes differ. So an output is rerouted (reroute_teststream_output) through an SDK that
 * decodes the stored form and encodes the output's coder when its coder differs (structurally)
 * from the payload's or the stored form is not W(payload coder); otherwise, as for the C SDK's
 * and TypeScript's TestStreams, its consumers read the runner's bytes directly. Without any SDK
 * environment nothing can transcode, and the TestStream is left as it is. Prism has no such
 * step and fails these pipelines ("zero length key").
 */
static sd_status rewrite_teststreams(pl_ctx *c)
{
    size_t n_nodes = c->nodes.len; /* new nodes are SDK Flattens */
    for (size_t k = 0; k < n_nodes; k++) {
        pl_node *n = node_at(c, k);
        if (n->kind != PL_TESTSTREAM || n->teststream == NULL) {
            continue;
        }
        const char *coder = n->teststream->coder_id;
        const char *stored;
        bool needs_sdk;
        PL_TRY(teststream_stored_coder(c, coder, &stored, &needs_sdk));
        /* No PCollection is named "": this asks for any SDK node's environment. */
        if (stored == NULL || teststream_transcode_env(c, "") == NULL) {
            continue; /* reported, or no SDK to transcode */
        }
        bool changed = false;
        size_t n_out = n->n_outputs;
        for (size_t i = 0; i < n_out; i++) {
            const char *pc = node_at(c, k)->outputs[i].pcoll;
            const pb_pcoll *out = sd__plan_pcoll_get(c, pc);
            if (out == NULL) {
                continue; /* reported */
            }
            if (!needs_sdk && sd__plan_coders_equal(c, coder, out->coder_id)) {
                continue;
            }
            const char *env = teststream_transcode_env(c, pc);
            PL_TRY(reroute_teststream_output(c, k, i, env, stored));
            changed = true;
        }
        if (changed) {
            n = node_at(c, k);
            n->teststream_raw_coder = stored;
            PL_TRY(sync_msg_io(c, n, true));
        }
    }
    return SD_OK;
}

static sd_status check_consumers(pl_ctx *c)
{
    for (size_t i = 0; i < c->nodes.len; i++) {
        pl_node *n = node_at(c, i);
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
/* Topological order                                                                          */
/* ----------------------------------------------------------------------------------------- */

/*
 * Natural order: digit runs compare as numbers ("transform_5" < "transform_23"), so stage
 * numbers follow the order in which SDKs number their transforms. Ties (e.g. "a01" vs "a1")
 * fall back to plain strcmp, keeping the order total.
 */
static int natural_cmp(const char *a, const char *b)
{
    const char *x = a;
    const char *y = b;
    while (*x != '\0' && *y != '\0') {
        bool dx = *x >= '0' && *x <= '9';
        bool dy = *y >= '0' && *y <= '9';
        if (dx && dy) {
            while (*x == '0') {
                x++;
            }
            while (*y == '0') {
                y++;
            }
            size_t nx = 0;
            size_t ny = 0;
            while (x[nx] >= '0' && x[nx] <= '9') {
                nx++;
            }
            while (y[ny] >= '0' && y[ny] <= '9') {
                ny++;
            }
            if (nx != ny) {
                return nx < ny ? -1 : 1;
            }
            int r = strncmp(x, y, nx);
            if (r != 0) {
                return r;
            }
            x += nx;
            y += ny;
            continue;
        }
        if (*x != *y) {
            return (unsigned char)*x < (unsigned char)*y ? -1 : 1;
        }
        x++;
        y++;
    }
    if (*x != *y) {
        return *x == '\0' ? -1 : 1;
    }
    return strcmp(a, b);
}

/* The ready set of topo_sort: a binary min-heap of node indices by natural id order. */
static bool ready_less(const pl_ctx *c, size_t a, size_t b)
{
    return natural_cmp(node_at(c, a)->id, node_at(c, b)->id) < 0;
}

static void ready_push(const pl_ctx *c, size_t *heap, size_t *len, size_t v)
{
    size_t i = (*len)++;
    heap[i] = v;
    while (i > 0 && ready_less(c, heap[i], heap[(i - 1) / 2])) {
        size_t parent = (i - 1) / 2, t = heap[i];
        heap[i] = heap[parent];
        heap[parent] = t;
        i = parent;
    }
}

static size_t ready_pop(const pl_ctx *c, size_t *heap, size_t *len)
{
    size_t top = heap[0];
    heap[0] = heap[--*len];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *len && ready_less(c, heap[l], heap[m])) {
            m = l;
        }
        if (r < *len && ready_less(c, heap[r], heap[m])) {
            m = r;
        }
        if (m == i) {
            break;
        }
        size_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
    return top;
}

/*
 * Kahn's algorithm, always taking the smallest ready id (natural order), so the order and the
 * stage numbering never depend on hashing: O((nodes + edges) log nodes). The edges come from
 * the producer index (one per consumed input that some node produces), laid out once as
 * compressed rows, so a pipeline of a million transforms sorts in well under a second.
 */
static sd_status topo_sort(pl_ctx *c)
{
    size_t n = c->nodes.len;
    size_t n_edges = 0;
    for (size_t i = 0; i < n; i++) {
        n_edges += node_at(c, i)->n_inputs;
    }
    c->topo = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    size_t *indeg = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    bool *done = sd_arena_alloc(&c->scratch, sizeof(bool) * (n + 1));
    size_t *first = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 2)); /* row starts */
    size_t *fill = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    size_t *to = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n_edges + 1));
    size_t *heap = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    if (c->topo == NULL || indeg == NULL || done == NULL || first == NULL || fill == NULL ||
        to == NULL || heap == NULL) {
        return SD_ENOMEM;
    }
    memset(indeg, 0, sizeof(size_t) * (n + 1));
    memset(done, 0, sizeof(bool) * (n + 1));
    memset(first, 0, sizeof(size_t) * (n + 2));
    /* Count each producer's out-edges, then place them (first[p] .. first[p + 1]). */
    for (size_t i = 0; i < n; i++) {
        pl_node *nd = node_at(c, i);
        for (size_t j = 0; j < nd->n_inputs; j++) {
            uintptr_t v = (uintptr_t)sd_map_get_str(&c->producer, nd->inputs[j].pcoll);
            if (v != 0) {
                first[v]++; /* producer index v - 1, counted at v: prefix sums shift it */
                indeg[i]++;
            }
        }
    }
    for (size_t p = 1; p <= n + 1 && p < n + 2; p++) {
        first[p] += first[p - 1];
    }
    memcpy(fill, first, sizeof(size_t) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        pl_node *nd = node_at(c, i);
        for (size_t j = 0; j < nd->n_inputs; j++) {
            uintptr_t v = (uintptr_t)sd_map_get_str(&c->producer, nd->inputs[j].pcoll);
            if (v != 0) {
                to[fill[v - 1]++] = i;
            }
        }
    }
    size_t n_ready = 0;
    for (size_t i = 0; i < n; i++) {
        if (indeg[i] == 0) {
            ready_push(c, heap, &n_ready, i);
        }
    }
    c->n_topo = 0;
    while (n_ready > 0) {
        size_t best = ready_pop(c, heap, &n_ready);
        done[best] = true;
        c->topo[c->n_topo++] = best;
        for (size_t e = first[best]; e < first[best + 1]; e++) {
            if (--indeg[to[e]] == 0) {
                ready_push(c, heap, &n_ready, to[e]);
            }
        }
    }
    if (c->n_topo == n) {
        return SD_OK;
    }
    sd_buf names;
    sd_buf_init(&names, 0);
    size_t listed = 0;
    sd_status st = SD_OK;
    for (size_t i = 0; st == SD_OK && i < n && listed < 6; i++) {
        if (!done[i]) {
            st = sd_buf_printf(&names, "%s\"%s\"", listed ? ", " : "", node_at(c, i)->id);
            listed++;
        }
    }
    if (st == SD_OK) {
        st = sd_buf_append_byte(&names, 0);
    }
    if (st == SD_OK) {
        st = sd__plan_problem(c, true, "the transforms form a cycle (involving %s%s)",
                              (const char *)names.data, n - c->n_topo > listed ? ", ..." : "");
    }
    sd_buf_deinit(&names);
    return st;
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
    PL_TRY(check_requirements(c));
    PL_TRY(expand_roots(c));
    for (size_t i = 0; i < c->nodes.len; i++) {
        PL_TRY(finish_node(c, i));
    }
    PL_TRY(rewrite_teststreams(c));
    PL_TRY(rewrite_flattens(c));
    PL_TRY(check_consumers(c));
    /* A pipeline with no leaf transforms is valid: it has nothing to do and finishes at once
     * (the TypeScript SDK submits such pipelines in its programming-guide tests). */
    return topo_sort(c);
}
