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

#include "runner/base/alloc.h"
#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

typedef Org__Apache__Beam__Model__FnExecution__V1__RemoteGrpcPort pb_port;
typedef Org__Apache__Beam__Model__Pipeline__V1__ApiServiceDescriptor pb_api;
typedef Org__Apache__Beam__Model__Pipeline__V1__TimerFamilySpec pb_timer_spec;
typedef Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload__TimerFamilySpecsEntry pb_timer_entry;

static pl_node *node_at(const pl_ctx *c, size_t i)
{
    return SD_VEC_AT(&c->nodes, pl_node, i);
}

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
        const char *ids[2] = { NULL, NULL };
        switch (ss->spec_case) {
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_READ_MODIFY_WRITE_SPEC:
            ids[0] = ss->read_modify_write_spec->coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_BAG_SPEC:
            ids[0] = ss->bag_spec->element_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_COMBINING_SPEC:
            ids[0] = ss->combining_spec->accumulator_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_MAP_SPEC:
            ids[0] = ss->map_spec->key_coder_id;
            ids[1] = ss->map_spec->value_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_SET_SPEC:
            ids[0] = ss->set_spec->element_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_ORDERED_LIST_SPEC:
            ids[0] = ss->ordered_list_spec->element_coder_id;
            break;
        case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_MULTIMAP_SPEC:
            ids[0] = ss->multimap_spec->key_coder_id;
            ids[1] = ss->multimap_spec->value_coder_id;
            break;
        default:
            break;
        }
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

/* Fill a protobuf-c map field (array of entry pointers) from m, sorted by key. */
#define FILL_MAP(c, m, Entry, init_fn, n_field, field)                                  \
    do {                                                                                \
        size_t n_;                                                                      \
        sd_status s_;                                                                   \
        const char **k_ = sorted_keys((c), (m), &n_, &s_);                              \
        if (s_ != SD_OK) {                                                              \
            st = s_;                                                                    \
            goto done;                                                                  \
        }                                                                               \
        Entry **arr_ = sd_arena_alloc(&(c)->scratch, sizeof(Entry *) * (n_ + 1)); \
        if (arr_ == NULL) {                                                             \
            st = SD_ENOMEM;                                                             \
            goto done;                                                                  \
        }                                                                               \
        for (size_t i_ = 0; i_ < n_; i_++) {                                            \
            arr_[i_] = sd_arena_alloc(&(c)->scratch, sizeof(Entry));              \
            if (arr_[i_] == NULL) {                                                     \
                st = SD_ENOMEM;                                                         \
                goto done;                                                              \
            }                                                                           \
            init_fn(arr_[i_]);                                                          \
            arr_[i_]->key = (char *)k_[i_];                                             \
            arr_[i_]->value = sd_map_get_str((m), k_[i_]);                              \
        }                                                                               \
        d.n_field = n_;                                                                 \
        d.field = arr_;                                                                 \
    } while (0)

sd_status sd__plan_descriptor(pl_ctx *c, const pl_stage *st_in, sd_plan_stage *ps)
{
    sd_map tmap, pmap, wmap, cmap, emap;
    sd_map_init(&tmap, NULL);
    sd_map_init(&pmap, NULL);
    sd_map_init(&wmap, NULL);
    sd_map_init(&cmap, NULL);
    sd_map_init(&emap, NULL);
    sd_vec roots;
    sd_vec_init(&roots, sizeof(const char *));
    sd_status st = SD_OK;
    pb_pbd d;
    org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__init(&d);

    /* Transforms. */
    for (size_t m = 0; st == SD_OK && m < st_in->members.len; m++) {
        const pl_node *n = node_at(c, *SD_VEC_AT(&st_in->members, size_t, m));
        pb_transform *msg;
        st = node_message(c, n, &msg);
        if (st == SD_OK) {
            st = sd_map_put_str(&tmap, n->id, msg);
        }
        if (st == SD_OK) {
            st = node_coders(c, n, &roots);
        }
    }
    if (st != SD_OK) {
        goto done;
    }
    pb_transform *src = port_transform(c, ps->source_transform, SD_URN_RUNNER_SOURCE,
                                       ps->source_port_coder_id, ps->inputs[0], true);
    if (src == NULL) {
        st = SD_ENOMEM;
        goto done;
    }
    if ((st = sd_map_put_str(&tmap, ps->source_transform, src)) != SD_OK ||
        (st = sd_vec_push(&roots, &ps->source_port_coder_id)) != SD_OK) {
        goto done;
    }
    for (size_t i = 0; i < ps->n_outputs; i++) {
        const sd_plan_output *o = &ps->outputs[i];
        pb_transform *sink = port_transform(c, o->sink_transform, SD_URN_RUNNER_SINK,
                                            o->port_coder_id, o->pcollection, false);
        if (sink == NULL) {
            st = SD_ENOMEM;
            goto done;
        }
        if ((st = sd_map_put_str(&tmap, o->sink_transform, sink)) != SD_OK ||
            (st = sd_vec_push(&roots, &o->port_coder_id)) != SD_OK) {
            goto done;
        }
    }

    /* PCollections named by the transforms, with wire coders where they cross a boundary. */
    size_t it = 0;
    sd_bytes key;
    void *val;
    while (st == SD_OK && sd_map_next(&tmap, &it, &key, &val)) {
        const pb_transform *t = val;
        for (size_t k = 0; st == SD_OK && k < t->n_inputs + t->n_outputs; k++) {
            const char *pc =
                k < t->n_inputs ? t->inputs[k]->value : t->outputs[k - t->n_inputs]->value;
            if (sd_map_has(&pmap, sd_bytes_str(pc))) {
                continue;
            }
            const pb_pcoll *p = sd__plan_pcoll_get(c, pc);
            if (p == NULL) {
                st = SD_EINTERNAL;
                break;
            }
            const char *wire = sd_map_get_str(&c->boundary, pc);
            if (wire != NULL && strcmp(wire, p->coder_id) != 0) {
                pb_pcoll *copy = sd_arena_memdup(&c->scratch, p, sizeof(*copy));
                if (copy == NULL) {
                    st = SD_ENOMEM;
                    break;
                }
                copy->coder_id = (char *)wire;
                p = copy;
            }
            st = sd_map_put_str(&pmap, pc, (void *)p);
            if (st == SD_OK) {
                st = sd_vec_push(&roots, &p->coder_id);
            }
            const pb_wstrat *ws = sd_map_get_str(&c->wstrats, p->windowing_strategy_id);
            if (st == SD_OK && ws != NULL) {
                st = put_new(&wmap, p->windowing_strategy_id, (void *)ws);
                if (st == SD_OK) {
                    st = sd_vec_push(&roots, &ws->window_coder_id);
                }
                if (st == SD_OK && ws->environment_id[0] != '\0') {
                    const pb_env *e = sd_map_get_str(&c->envs, ws->environment_id);
                    if (e != NULL) {
                        st = put_new(&emap, ws->environment_id, (void *)e);
                    }
                }
            }
        }
    }
    if (st != SD_OK) {
        goto done;
    }

    /* Coders: closure over components (roots grows while we walk it). */
    for (size_t i = 0; st == SD_OK && i < roots.len; i++) {
        const char *id = *SD_VEC_AT(&roots, const char *, i);
        if (sd_map_has(&cmap, sd_bytes_str(id))) {
            continue;
        }
        const pb_coder *k = sd__plan_coder_get(c, id);
        if (k == NULL) {
            st = SD_EINTERNAL;
            break;
        }
        st = sd_map_put_str(&cmap, id, (void *)k);
        for (size_t j = 0; st == SD_OK && j < k->n_component_coder_ids; j++) {
            const char *comp = k->component_coder_ids[j];
            st = sd_vec_push(&roots, &comp);
        }
    }
    if (st != SD_OK) {
        goto done;
    }

    const pb_env *env = sd_map_get_str(&c->envs, ps->environment_id);
    if (env != NULL && (st = put_new(&emap, ps->environment_id, (void *)env)) != SD_OK) {
        goto done;
    }

    d.id = (char *)ps->id;
    FILL_MAP(
        c, &tmap,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__TransformsEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__transforms_entry__init,
        n_transforms, transforms);
    FILL_MAP(
        c, &pmap,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__PcollectionsEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__pcollections_entry__init,
        n_pcollections, pcollections);
    FILL_MAP(
        c, &wmap,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__WindowingStrategiesEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__windowing_strategies_entry__init,
        n_windowing_strategies, windowing_strategies);
    FILL_MAP(
        c, &cmap, Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__CodersEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__coders_entry__init,
        n_coders, coders);
    FILL_MAP(
        c, &emap,
        Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor__EnvironmentsEntry,
        org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__environments_entry__init,
        n_environments, environments);

    pb_api state_api, timer_api;
    org__apache__beam__model__pipeline__v1__api_service_descriptor__init(&state_api);
    org__apache__beam__model__pipeline__v1__api_service_descriptor__init(&timer_api);
    state_api.url = (char *)c->opt.state_url;
    timer_api.url = (char *)c->opt.data_url;
    d.state_api_service_descriptor = &state_api;
    if (ps->n_timer_families > 0) {
        d.timer_api_service_descriptor = &timer_api;
    }

    size_t len = protobuf_c_message_get_packed_size(&d.base);
    uint8_t *bytes = sd_arena_alloc(c->out, len);
    if (bytes == NULL) {
        st = SD_ENOMEM;
        goto done;
    }
    protobuf_c_message_pack(&d.base, bytes);
    ProtobufCAllocator pa = sd__plan_arena_pb(c->out);
    ps->descriptor = org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__unpack(
        &pa, len, bytes);
    if (ps->descriptor == NULL) {
        st = c->out->failed ? SD_ENOMEM : SD_EINTERNAL;
        goto done;
    }
    ps->descriptor_bytes = sd_bytes_make(bytes, len);

done:
    sd_map_deinit(&tmap);
    sd_map_deinit(&pmap);
    sd_map_deinit(&wmap);
    sd_map_deinit(&cmap);
    sd_map_deinit(&emap);
    sd_vec_deinit(&roots);
    return st;
}
