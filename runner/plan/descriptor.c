/*
 * Sundial planner: ProcessBundleDescriptors.
 *
 * One descriptor per SDK stage, with id = stage id. It holds:
 *   transforms     the fused transforms (the pipeline's own messages, so unknown fields
 *                  survive; copies only where the planner changed something: rewired inputs,
 *                  rewritten timer coders, synthesized lifted/SDF transforms), one
 *                  beam:runner:source:v1 producing the stage's main input, and one
 *                  beam:runner:sink:v1 per stage output; ports carry a RemoteGrpcPort with
 *                  api_service_descriptor.url = data_url and the port coder;
 *   pcollections   every PCollection those transforms name; those in the PCollection table
 *                  carry their wire coder (the LP rule, plan.h);
 *   coders         the closure (components included) of every coder named by the
 *                  PCollections, windowing strategies, ports, ParDo state and timer specs,
 *                  restriction coders and combine accumulators;
 *   windowing strategies and environments named by the above;
 *   state_api_service_descriptor{url = state_url} always (the TypeScript worker crashes on a
 *                  side input without it), timer_api_service_descriptor{url = data_url} when the
 *                  stage has timers (timers travel on the data stream).
 *
 * The message is assembled from borrowed and scratch pieces, packed once into the plan's arena,
 * and unpacked again with an arena-backed allocator: the plan gets both forms and owns them
 * without pointing into the caller's pipeline. Map entries are emitted sorted by key, so the
 * bytes are deterministic.
 */
#include <string.h>

#include "proto/state_spec.h"
#include "runner/base/alloc.h"
#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

typedef Org__Apache__Beam__Model__FnExecution__V1__RemoteGrpcPort pb_port;
typedef Org__Apache__Beam__Model__Pipeline__V1__ApiServiceDescriptor pb_api;
typedef Org__Apache__Beam__Model__Pipeline__V1__TimerFamilySpec pb_timer_spec;
typedef Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload__TimerFamilySpecsEntry pb_timer_entry;

/* Put key -> value unless key is present. */
static sd_status put_new(sd_map *m, const char *key, void *value)
{
    if (sd_map_has(m, sd_bytes_str(key))) {
        return SD_OK;
    }
    return sd_map_put_str(m, key, value);
}

/* ----------------------------------------------------------------------------------------- */
/* Transforms                                                                                 */
/* ----------------------------------------------------------------------------------------- */

static pb_transform *port_transform(pl_ctx *c,
                                    const char *id,
                                    const char *urn,
                                    const char *port_coder,
                                    const char *pcoll,
                                    bool source)
{
    pb_api api;
    pb_port rp;
    org__apache__beam__model__pipeline__v1__api_service_descriptor__init(&api);
    org__apache__beam__model__fn_execution__v1__remote_grpc_port__init(&rp);
    api.url = (char *)c->opt.data_url;
    rp.api_service_descriptor = &api;
    rp.coder_id = (char *)port_coder;
    size_t len = protobuf_c_message_get_packed_size(&rp.base);
    uint8_t *buf = sd_arena_alloc(&c->scratch, len);
    if (buf == NULL) {
        return NULL;
    }
    protobuf_c_message_pack(&rp.base, buf);
    ProtobufCBinaryData payload = { len, buf };
    pl_io io = { source ? "out" : "in", pcoll };
    return sd__plan_synth_transform(c, id, urn, payload, "", source ? 0 : 1, &io, source ? 1 : 0,
                                    &io);
}

/*
 * The message a node contributes: its own, or a copy whose ParDoPayload names the wire forms of
 * its timer family coders. OUT: msg.
 */
static sd_status node_message(pl_ctx *c, const pl_node *n, pb_transform **msg)
{
    *msg = n->msg;
    if (n->pardo == NULL || n->n_timers == 0) {
        return SD_OK;
    }
    const pb_pardo *pd = n->pardo;
    bool changed = false;
    pb_timer_entry **entries =
        sd_arena_alloc(&c->scratch, sizeof(*entries) * (pd->n_timer_family_specs + 1));
    if (entries == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < pd->n_timer_family_specs; i++) {
        entries[i] = pd->timer_family_specs[i];
        const pb_timer_spec *ts = entries[i]->value;
        if (ts == NULL) {
            continue;
        }
        const char *wire;
        PL_TRY(sd__plan_wire_coder(c, ts->timer_family_coder_id, &wire));
        if (strcmp(wire, ts->timer_family_coder_id) == 0) {
            continue;
        }
        pb_timer_entry *e = sd_arena_memdup(&c->scratch, entries[i], sizeof(*e));
        pb_timer_spec *nts = sd_arena_memdup(&c->scratch, ts, sizeof(*nts));
        if (e == NULL || nts == NULL) {
            return SD_ENOMEM;
        }
        nts->timer_family_coder_id = (char *)wire;
        e->value = nts;
        entries[i] = e;
        changed = true;
    }
    if (!changed) {
        return SD_OK;
    }
    /* Shallow copies keep every other field, unknown fields included. */
    pb_pardo copy = *pd;
    copy.timer_family_specs = entries;
    size_t len = protobuf_c_message_get_packed_size(&copy.base);
    uint8_t *buf = sd_arena_alloc(&c->scratch, len);
    pb_transform *t = sd_arena_memdup(&c->scratch, n->msg, sizeof(*t));
    pb_spec *spec = sd_arena_memdup(&c->scratch, n->msg->spec, sizeof(*spec));
    if (buf == NULL || t == NULL || spec == NULL) {
        return SD_ENOMEM;
    }
    protobuf_c_message_pack(&copy.base, buf);
    spec->payload.len = len;
    spec->payload.data = buf;
    t->spec = spec;
    *msg = t;
    return SD_OK;
}

/* Coder ids a node names outside its PCollections. */
static sd_status node_coders(pl_ctx *c, const pl_node *n, sd_vec *roots)
{
    if (n->acc_coder != NULL && n->acc_coder[0] != '\0') {
        PL_TRY(sd_vec_push(roots, &n->acc_coder));
    }
    const pb_pardo *pd = n->pardo;
    if (pd == NULL) {
        return SD_OK;
    }
    if (pd->restriction_coder_id[0] != '\0') {
        const char *r = pd->restriction_coder_id;
        PL_TRY(sd_vec_push(roots, &r));
    }
    for (size_t i = 0; i < pd->n_timer_family_specs; i++) {
        const pb_timer_spec *ts = pd->timer_family_specs[i]->value;
        if (ts != NULL) {
            const char *wire;
            PL_TRY(sd__plan_wire_coder(c, ts->timer_family_coder_id, &wire));
            PL_TRY(sd_vec_push(roots, &wire));
        }
    }
    for (size_t i = 0; i < pd->n_state_specs; i++) {
        const Org__Apache__Beam__Model__Pipeline__V1__StateSpec *ss = pd->state_specs[i]->value;
        if (ss == NULL) {
            continue;
        }
        const char *ids[2];
        sd_pb_state_coder_ids(ss, ids);
        for (size_t j = 0; j < 2; j++) {
            if (ids[j] != NULL && ids[j][0] != '\0') {
                PL_TRY(sd_vec_push(roots, &ids[j]));
            }
        }
    }
    return SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Assembly                                                                                   */
/* ----------------------------------------------------------------------------------------- */

/* Sorted NUL-terminated keys of m (scratch). */
static const char **sorted_keys(pl_ctx *c, const sd_map *m, size_t *n, sd_status *st)
{
    sd_bytes *keys = sd_map_sorted_keys(m, n);
    *st = SD_OK;
    if (keys == NULL) {
        if (*n != 0) {
            *st = SD_ENOMEM;
        }
        return NULL;
    }
    const char **out = sd_arena_alloc(&c->scratch, sizeof(*out) * (*n + 1));
    for (size_t i = 0; out != NULL && i < *n; i++) {
        char *k = sd_arena_memdup(&c->scratch, keys[i].ptr, keys[i].len + 1);
        if (k == NULL) {
            out = NULL;
            break;
        }
        k[keys[i].len] = '\0';
        out[i] = k;
    }
    sd_free(keys);
    if (out == NULL) {
        *st = SD_ENOMEM;
    }
    return out;
}

/* Fill map field `field` of descriptor d (array of entry pointers) from m, sorted by key. */
#define FILL_MAP(c, d, m, Entry, init_fn, n_field, field)                         \
    do {                                                                          \
        size_t n_;                                                                \
        sd_status s_;                                                             \
        const char **k_ = sorted_keys((c), (m), &n_, &s_);                        \
        if (s_ != SD_OK) {                                                        \
            return s_;                                                            \
        }                                                                         \
        Entry **arr_ = sd_arena_alloc(&(c)->scratch, sizeof(Entry *) * (n_ + 1)); \
        if (arr_ == NULL) {                                                       \
            return SD_ENOMEM;                                                     \
        }                                                                         \
        for (size_t i_ = 0; i_ < n_; i_++) {                                      \
            arr_[i_] = sd_arena_alloc(&(c)->scratch, sizeof(Entry));              \
            if (arr_[i_] == NULL) {                                               \
                return SD_ENOMEM;                                                 \
            }                                                                     \
            init_fn(arr_[i_]);                                                    \
            arr_[i_]->key = (char *)k_[i_];                                       \
            arr_[i_]->value = sd_map_get_str((m), k_[i_]);                        \
        }                                                                         \
        (d)->n_field = n_;                                                        \
        (d)->field = arr_;                                                        \
    } while (0)

/* The components of one descriptor, collected before they are packed. */
typedef struct pbd_parts {
    /* id -> message (the pipeline's, or a scratch copy) for each descriptor map. */
    sd_map transforms, pcolls, wstrats, coders, envs;
    sd_vec roots; /* const char *: coder ids whose closure the descriptor needs */
} pbd_parts;

/* The stage's member transforms plus its source and sink ports. */
static sd_status
collect_transforms(pl_ctx *c, const pl_stage *st_in, const sd_plan_stage *ps, pbd_parts *p)
{
    for (size_t m = 0; m < st_in->members.len; m++) {
        const pl_node *n = sd__plan_node(c, *SD_VEC_AT(&st_in->members, size_t, m));
        pb_transform *msg;
        PL_TRY(node_message(c, n, &msg));
        PL_TRY(sd_map_put_str(&p->transforms, n->id, msg));
        PL_TRY(node_coders(c, n, &p->roots));
    }
    pb_transform *src = port_transform(c, ps->source_transform, SD_URN_RUNNER_SOURCE,
                                       ps->source_port_coder_id, ps->inputs[0], true);
    if (src == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd_map_put_str(&p->transforms, ps->source_transform, src));
    PL_TRY(sd_vec_push(&p->roots, &ps->source_port_coder_id));
    for (size_t i = 0; i < ps->n_outputs; i++) {
        const sd_plan_output *o = &ps->outputs[i];
        pb_transform *sink = port_transform(c, o->sink_transform, SD_URN_RUNNER_SINK,
                                            o->port_coder_id, o->pcollection, false);
        if (sink == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd_map_put_str(&p->transforms, o->sink_transform, sink));
        PL_TRY(sd_vec_push(&p->roots, &o->port_coder_id));
    }
    return SD_OK;
}

/*
 * PCollections named by the transforms, with wire coders where they cross a boundary, and
 * their windowing strategies and those strategies' environments.
 */
static sd_status collect_pcolls(pl_ctx *c, pbd_parts *p)
{
    size_t it = 0;
    sd_bytes key;
    void *val;
    while (sd_map_next(&p->transforms, &it, &key, &val)) {
        const pb_transform *t = val;
        for (size_t k = 0; k < t->n_inputs + t->n_outputs; k++) {
            const char *pc =
                k < t->n_inputs ? t->inputs[k]->value : t->outputs[k - t->n_inputs]->value;
            if (sd_map_has(&p->pcolls, sd_bytes_str(pc))) {
                continue;
            }
            const pb_pcoll *pcoll = sd__plan_pcoll_get(c, pc);
            if (pcoll == NULL) {
                return SD_EINTERNAL;
            }
            const char *wire = sd_map_get_str(&c->boundary, pc);
            const char *urn = sd__plan_coder_urn(c, pcoll->coder_id);
            if (wire == NULL && urn != NULL && strcmp(urn, SD_URN_CODER_WINDOWED_VALUE) == 0) {
                /* Inside the stage the SDK's own coder, but never a bare windowed_value. */
                PL_TRY(sd__plan_pcoll_coder(c, pcoll->coder_id, &wire));
            }
            if (wire != NULL && strcmp(wire, pcoll->coder_id) != 0) {
                pb_pcoll *copy = sd_arena_memdup(&c->scratch, pcoll, sizeof(*copy));
                if (copy == NULL) {
                    return SD_ENOMEM;
                }
                copy->coder_id = (char *)wire;
                pcoll = copy;
            }
            PL_TRY(sd_map_put_str(&p->pcolls, pc, (void *)pcoll));
            PL_TRY(sd_vec_push(&p->roots, &pcoll->coder_id));
            const pb_wstrat *ws = sd_map_get_str(&c->wstrats, pcoll->windowing_strategy_id);
            if (ws == NULL) {
                continue;
            }
            PL_TRY(put_new(&p->wstrats, pcoll->windowing_strategy_id, (void *)ws));
            PL_TRY(sd_vec_push(&p->roots, &ws->window_coder_id));
            if (ws->environment_id[0] != '\0') {
                const pb_env *e = sd_map_get_str(&c->envs, ws->environment_id);
                if (e != NULL) {
                    PL_TRY(put_new(&p->envs, ws->environment_id, (void *)e));
                }
            }
        }
    }
    return SD_OK;
}

/* Coders: closure over components (roots grows while we walk it). */
static sd_status collect_coders(pl_ctx *c, pbd_parts *p)
{
    for (size_t i = 0; i < p->roots.len; i++) {
        const char *id = *SD_VEC_AT(&p->roots, const char *, i);
        if (sd_map_has(&p->coders, sd_bytes_str(id))) {
            continue;
        }
        const pb_coder *k = sd__plan_coder_get(c, id);
        if (k == NULL) {
            return SD_EINTERNAL;
        }
        PL_TRY(sd_map_put_str(&p->coders, id, (void *)k));
        for (size_t j = 0; j < k->n_component_coder_ids; j++) {
            const char *comp = k->component_coder_ids[j];
            PL_TRY(sd_vec_push(&p->roots, &comp));
        }
    }
    return SD_OK;
}

/* The descriptor's five component maps, each sorted by key. */
static sd_status fill_maps(pl_ctx *c, const pbd_parts *p, pb_pbd *d)
{
    FILL_MAP(
        c, d, &p->transforms,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__TransformsEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__transforms_entry__init,
        n_transforms, transforms);
    FILL_MAP(
        c, d, &p->pcolls,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__PcollectionsEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__pcollections_entry__init,
        n_pcollections, pcollections);
    FILL_MAP(
        c, d, &p->wstrats,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__WindowingStrategiesEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__windowing_strategies_entry__init,
        n_windowing_strategies, windowing_strategies);
    FILL_MAP(
        c, d, &p->coders,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__CodersEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__coders_entry__init,
        n_coders, coders);
    FILL_MAP(
        c, d, &p->envs,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__EnvironmentsEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__environments_entry__init,
        n_environments, environments);
    return SD_OK;
}

/*
 * Point d at the State (and, with timers, the Data) API, pack it into the plan's arena and
 * unpack it there again, so *out and *out_bytes live as long as the plan.
 */
static sd_status pack_descriptor(pl_ctx *c,
                                 pb_pbd *d,
                                 const sd_plan_stage *ps,
                                 const pb_pbd **out,
                                 sd_bytes *out_bytes)
{
    pb_api state_api, timer_api;
    org__apache__beam__model__pipeline__v1__api_service_descriptor__init(&state_api);
    org__apache__beam__model__pipeline__v1__api_service_descriptor__init(&timer_api);
    state_api.url = (char *)c->opt.state_url;
    timer_api.url = (char *)c->opt.data_url;
    d->state_api_service_descriptor = &state_api;
    if (ps->n_timer_families > 0) {
        d->timer_api_service_descriptor = &timer_api;
    }

    size_t len = protobuf_c_message_get_packed_size(&d->base);
    uint8_t *bytes = sd_arena_alloc(c->out, len);
    sd_status st = SD_OK;
    if (bytes == NULL) {
        st = SD_ENOMEM;
    } else {
        protobuf_c_message_pack(&d->base, bytes);
        ProtobufCAllocator pa = sd__plan_arena_pb(c->out);
        *out = org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__unpack(
            &pa, len, bytes);
        if (*out == NULL) {
            st = c->out->failed ? SD_ENOMEM : SD_EINTERNAL;
        } else {
            *out_bytes = sd_bytes_make(bytes, len);
        }
    }
    /* The API descriptors live on this stack frame: d must not point at them any more. */
    d->state_api_service_descriptor = NULL;
    d->timer_api_service_descriptor = NULL;
    return st;
}

/*
 * The drain variant of a splittable stage (see sd_plan_stage.drain_descriptor): p as built for
 * the stage, plus "<process>/TruncateSizedRestrictions" (the SDF's ParDoPayload, environment
 * and inputs, the main one the stage input) writing a new PCollection "<input>/truncated"
 * (the input's wire coder and windowing) that the process transform reads instead.
 */
static sd_status
add_drain_truncate(pl_ctx *c, const pl_stage *st_in, sd_plan_stage *ps, pbd_parts *p)
{
    const pl_node *proc = NULL;
    for (size_t m = 0; m < st_in->members.len && proc == NULL; m++) {
        const pl_node *n = sd__plan_node(c, *SD_VEC_AT(&st_in->members, size_t, m));
        if (n->splittable) {
            proc = n;
        }
    }
    pb_transform *pt = proc == NULL ? NULL : sd_map_get_str(&p->transforms, proc->id);
    const pb_pcoll *in = sd_map_get_str(&p->pcolls, ps->inputs[0]);
    if (pt == NULL || in == NULL) {
        return SD_EINTERNAL;
    }
    const char *tid = sd__plan_new_transform_id(c, proc->id, "TruncateSizedRestrictions");
    const char *base = sd_arena_printf(&c->scratch, "%s/truncated", ps->inputs[0]);
    const char *out_pc;
    if (tid == NULL || base == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd__plan_new_pcoll(c, base, in->coder_id, in, &out_pc));
    PL_TRY(sd_map_put_str(&p->pcolls, out_pc, (void *)sd__plan_pcoll_get(c, out_pc)));

    /* The process transform, reading the truncated restrictions (a shallow copy). */
    pb_transform *copy = sd_arena_memdup(&c->scratch, pt, sizeof(*copy));
    pl_io *ins = sd_arena_alloc(&c->scratch, sizeof(*ins) * (pt->n_inputs + 1));
    if (copy == NULL || ins == NULL) {
        return SD_ENOMEM;
    }
    copy->inputs = sd_arena_alloc(&c->scratch, sizeof(*copy->inputs) * (pt->n_inputs + 1));
    if (copy->inputs == NULL) {
        return SD_ENOMEM;
    }
    bool found = false;
    for (size_t i = 0; i < pt->n_inputs; i++) {
        ins[i].local = pt->inputs[i]->key;
        ins[i].pcoll = pt->inputs[i]->value;
        copy->inputs[i] = pt->inputs[i];
        if (!found && strcmp(ins[i].pcoll, proc->main_input) == 0 &&
            !sd__plan_pardo_has_side(proc->pardo, ins[i].local)) {
            found = true;
            copy->inputs[i] = sd_arena_memdup(&c->scratch, pt->inputs[i], sizeof(**copy->inputs));
            if (copy->inputs[i] == NULL) {
                return SD_ENOMEM;
            }
            copy->inputs[i]->value = (char *)out_pc;
        }
    }
    if (!found) {
        return SD_EINTERNAL;
    }
    pl_io out = { "out", out_pc };
    pb_transform *trunc =
        sd__plan_synth_transform(c, tid, SD_URN_TRANSFORM_SDF_TRUNCATE_SIZED_RESTRICTIONS,
                                 pt->spec->payload, pt->environment_id, pt->n_inputs, ins, 1, &out);
    if (trunc == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd_map_put_str(&p->transforms, proc->id, copy));
    PL_TRY(sd_map_put_str(&p->transforms, tid, trunc));
    ps->drain_truncate = sd_arena_strdup(c->out, tid);
    ps->drain_process = sd_arena_strdup(c->out, proc->id);
    return ps->drain_truncate == NULL || ps->drain_process == NULL ? SD_ENOMEM : SD_OK;
}

/* Assemble descriptor id from p and pack it into *out / *out_bytes. */
static sd_status assemble(pl_ctx *c,
                          const pbd_parts *p,
                          sd_plan_stage *ps,
                          const char *id,
                          const pb_pbd **out,
                          sd_bytes *out_bytes)
{
    pb_pbd d;
    org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__init(&d);
    d.id = (char *)id;
    PL_TRY(fill_maps(c, p, &d));
    return pack_descriptor(c, &d, ps, out, out_bytes);
}

/* Collect stage st_in's components into p, then assemble and pack its descriptor into ps
 * (and, for a splittable stage, its drain variant). */
static sd_status build_descriptor(pl_ctx *c, const pl_stage *st_in, sd_plan_stage *ps, pbd_parts *p)
{
    PL_TRY(collect_transforms(c, st_in, ps, p));
    PL_TRY(collect_pcolls(c, p));
    PL_TRY(collect_coders(c, p));
    const pb_env *env = sd_map_get_str(&c->envs, ps->environment_id);
    if (env != NULL) {
        PL_TRY(put_new(&p->envs, ps->environment_id, (void *)env));
    }
    PL_TRY(assemble(c, p, ps, ps->id, &ps->descriptor, &ps->descriptor_bytes));
    if (!ps->splittable || ps->n_inputs == 0) {
        return SD_OK;
    }
    PL_TRY(add_drain_truncate(c, st_in, ps, p));
    const char *id = sd_arena_printf(c->out, "%s-drain", ps->id);
    if (id == NULL) {
        return SD_ENOMEM;
    }
    return assemble(c, p, ps, id, &ps->drain_descriptor, &ps->drain_descriptor_bytes);
}

sd_status sd__plan_descriptor(pl_ctx *c, const pl_stage *st_in, sd_plan_stage *ps)
{
    pbd_parts p;
    sd_map_init(&p.transforms, NULL);
    sd_map_init(&p.pcolls, NULL);
    sd_map_init(&p.wstrats, NULL);
    sd_map_init(&p.coders, NULL);
    sd_map_init(&p.envs, NULL);
    sd_vec_init(&p.roots, sizeof(const char *));
    sd_status st = build_descriptor(c, st_in, ps, &p);
    sd_map_deinit(&p.transforms);
    sd_map_deinit(&p.pcolls);
    sd_map_deinit(&p.wstrats);
    sd_map_deinit(&p.coders);
    sd_map_deinit(&p.envs);
    sd_vec_deinit(&p.roots);
    return st;
}
