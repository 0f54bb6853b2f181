/*
 * Sundial C SDK: descriptor -> operator graph — how the bundle processor is built.
 *
 * sd__proc_create reads a ProcessBundleDescriptor once and copies everything it needs:
 *
 *   1. one operator per leaf transform (build_op, by URN). It creates the PCollection nodes
 *      (pcn) it reads or writes on first sight, with their coders and window fns, and joins
 *      the consumers of its input nodes. Data ports get their RemoteGrpcPort coder (a
 *      length_prefix around the PCollection coder is unwrapped), ParDos their DoFn payload,
 *      side inputs, state and timer specs and splittable role, combines their CombineFn and
 *      accumulator coder; an unknown URN fails with the transform's name
 *   2. the operators are put in topological order from the sources (depth-first post-order,
 *      reversed), the order start_bundle and finish_bundle walk
 *   3. a splittable DoFn's process operator learns the data source whose encoding its
 *      residuals use
 *   4. each DoFn's setup runs, last, once the graph is known to be valid; on any failure the
 *      processor is destroyed, which tears down the DoFns already set up
 *
 * Errors name the transform and what is wrong. Operators are freed by sd__proc_op_destroy,
 * which also runs a set-up DoFn's teardown.
 *
 * Siblings: proc_ops.c runs the operators built here, proc_ctx.c is their DoFns' context,
 * proc.c runs bundles and destroys the processor; their shared types are in proc_int.h.
 */
#include "sdk-harness/src/proc_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/urns/urns.h"

#define PLF(x) org__apache__beam__model__pipeline__v1__##x
#define FNF(x) org__apache__beam__model__fn_execution__v1__##x

typedef SD_FN(ProcessBundleDescriptor) pb_PBD;
typedef SD_PL(PTransform) pb_PTransform;
typedef SD_PL(FunctionSpec) pb_FunctionSpec;

/* ================================================================ descriptor lookups */

static const char *pbd_string_map(size_t n, void **entries, const char *key)
{
    for (size_t i = 0; i < n; i++) {
        SD_PL(PTransform__InputsEntry) *e = entries[i];
        if (strcmp(e->key, key) == 0) {
            return e->value;
        }
    }
    return NULL;
}

/* ================================================================ descriptor lookups */
/* ================================================================ descriptor lookups */

typedef struct pbd_table {
    const pb_PBD *d;
} pbd_table;

static bool coder_lookup(void *ctx, const char *id, const char **urn, sd_bytes *payload,
                         const char *const **component_ids, size_t *n_components)
{
    const pb_PBD *d = ctx;
    for (size_t i = 0; i < d->n_coders; i++) {
        if (strcmp(d->coders[i]->key, id) == 0) {
            const SD_PL(Coder) *c = d->coders[i]->value;
            if (c == NULL || c->spec == NULL) {
                return false;
            }
            *urn = c->spec->urn;
            *payload = sd_bytes_make(c->spec->payload.data, c->spec->payload.len);
            *component_ids = (const char *const *)c->component_coder_ids;
            *n_components = c->n_component_coder_ids;
            return true;
        }
    }
    return false;
}

static sd_status build_coder(const pb_PBD *d, const char *id, sd_coder **out, sd_err *err)
{
    sd_coder_table t = { coder_lookup, (void *)d };
    return sd_coder_build(&t, id, out, err);
}

static const SD_PL(WindowingStrategy) *find_windowing(const pb_PBD *d, const char *id)
{
    for (size_t i = 0; i < d->n_windowing_strategies; i++) {
        if (strcmp(d->windowing_strategies[i]->key, id) == 0) {
            return d->windowing_strategies[i]->value;
        }
    }
    return NULL;
}

static const SD_PL(PCollection) *find_pcoll(const pb_PBD *d, const char *id)
{
    for (size_t i = 0; i < d->n_pcollections; i++) {
        if (strcmp(d->pcollections[i]->key, id) == 0) {
            return d->pcollections[i]->value;
        }
    }
    return NULL;
}

static int64_t duration_ms(const Google__Protobuf__Duration *d)
{
    return d == NULL ? 0 : d->seconds * 1000 + d->nanos / 1000000;
}

static int64_t timestamp_ms(const Google__Protobuf__Timestamp *t)
{
    return t == NULL ? 0 : t->seconds * 1000 + t->nanos / 1000000;
}

static sd_status parse_window_fn(const pb_FunctionSpec *fs, winfn *out, sd_err *err)
{
    memset(out, 0, sizeof(*out));
    if (fs == NULL || fs->urn == NULL || strcmp(fs->urn, SD_URN_WINDOW_FN_GLOBAL) == 0) {
        out->kind = SD_WINDOW_GLOBAL;
        return SD_OK;
    }
    if (strcmp(fs->urn, SD_URN_WINDOW_FN_FIXED) == 0) {
        SD_PL(FixedWindowsPayload) *m = PLF(fixed_windows_payload__unpack)(
            NULL, fs->payload.len, fs->payload.data);
        if (m == NULL) {
            return sd_err_set(err, SD_EPROTO, "window fn %s: malformed payload", fs->urn);
        }
        out->kind = SD_WINDOW_FIXED;
        out->size = duration_ms(m->size);
        out->offset = timestamp_ms(m->offset);
        PLF(fixed_windows_payload__free_unpacked)(m, NULL);
    } else if (strcmp(fs->urn, SD_URN_WINDOW_FN_SLIDING) == 0) {
        SD_PL(SlidingWindowsPayload) *m = PLF(sliding_windows_payload__unpack)(
            NULL, fs->payload.len, fs->payload.data);
        if (m == NULL) {
            return sd_err_set(err, SD_EPROTO, "window fn %s: malformed payload", fs->urn);
        }
        out->kind = SD_WINDOW_SLIDING;
        out->size = duration_ms(m->size);
        out->period = duration_ms(m->period);
        out->offset = timestamp_ms(m->offset);
        PLF(sliding_windows_payload__free_unpacked)(m, NULL);
    } else if (strcmp(fs->urn, SD_URN_WINDOW_FN_SESSION) == 0) {
        SD_PL(SessionWindowsPayload) *m = PLF(session_windows_payload__unpack)(
            NULL, fs->payload.len, fs->payload.data);
        if (m == NULL) {
            return sd_err_set(err, SD_EPROTO, "window fn %s: malformed payload", fs->urn);
        }
        out->kind = SD_WINDOW_SESSIONS;
        out->gap = duration_ms(m->gap_size);
        PLF(session_windows_payload__free_unpacked)(m, NULL);
    } else {
        return sd_err_set(err, SD_EUNIMPL, "window fn %s is not supported by the C SDK", fs->urn);
    }
    if ((out->kind == SD_WINDOW_FIXED && out->size <= 0) ||
        (out->kind == SD_WINDOW_SLIDING && (out->size <= 0 || out->period <= 0)) ||
        (out->kind == SD_WINDOW_SESSIONS && out->gap <= 0)) {
        return sd_err_set(err, SD_EPROTO, "window fn %s: sizes, periods and gaps must be > 0",
                          fs->urn);
    }
    return SD_OK;
}

/* Assign windows for ts. OUT: ws (reset first). */

/* ================================================================ construction */

void sd__proc_op_destroy(op *o)
{
    if (o == NULL) {
        return;
    }
    if (o->kind == OP_PARDO && o->setup_done && o->fn->teardown != NULL) {
        o->fn->teardown(o->state);
    }
    sd_free(o->tid);
    sd_free(o->outs);
    sd_coder_destroy(o->port_coder);
    sd_buf_deinit(&o->pending);
    sd_wv_header_deinit(&o->hdr);
    sd_free(o->payload);
    sd__dofn_payload_deinit(&o->pl);
    sd_buf_deinit(&o->ctx.scratch);
    for (size_t i = 0; i < o->n_sides; i++) {
        sd_free(o->sides[i].local);
    }
    sd_free(o->sides);
    for (size_t i = 0; i < o->n_state_slots; i++) {
        sd_free(o->state_ids[i]);
        sd_coder_destroy(o->state_coders[i]);
        if (o->state_key_coders != NULL) {
            sd_coder_destroy(o->state_key_coders[i]);
        }
        if (o->state_cfgs != NULL) {
            sd_free(o->state_cfgs[i]);
        }
    }
    sd_free(o->state_ids);
    sd_free(o->state_coders);
    sd_free(o->state_infos);
    sd_free(o->state_key_coders);
    sd_free(o->state_cfgs);
    sd_free(o->main_local);
    for (size_t i = 0; i < o->n_out_locals; i++) {
        sd_free(o->out_locals[i]);
    }
    sd_free(o->out_locals);
    for (size_t i = 0; i < o->n_fams; i++) {
        sd_free(o->fams[i].family);
        sd_coder_destroy(o->fams[i].coder);
        sd_buf_deinit(&o->fams[i].out);
        sd_buf_deinit(&o->fams[i].in_pending);
    }
    sd_free(o->fams);
    sd_timer_deinit(&o->timer);
    for (size_t i = 0; i < o->ctx.reads.len; i++) {
        buf_free_value(*SD_VEC_AT(&o->ctx.reads, sd_buf *, i));
    }
    sd_vec_deinit(&o->ctx.reads);
    sd_map_deinit(&o->counters);
    sd_free(o->cpayload);
    sd_coder_destroy(o->acc_coder);
    sd_map_deinit(&o->accs);
    sd_buf_deinit(&o->b1);
    sd_buf_deinit(&o->b2);
    sd_buf_deinit(&o->b3);
    sd_free(o);
}

static pcn *find_pcn(sd__proc *bp, const char *id)
{
    for (size_t i = 0; i < bp->pcs.len; i++) {
        pcn *pc = *SD_VEC_AT(&bp->pcs, pcn *, i);
        if (strcmp(pc->id, id) == 0) {
            return pc;
        }
    }
    return NULL;
}

static sd_status add_pcn(sd__proc *bp, const pb_PBD *d, const char *id, pcn **out, sd_err *err)
{
    pcn *pc = find_pcn(bp, id);
    if (pc != NULL) {
        *out = pc;
        return SD_OK;
    }
    const SD_PL(PCollection) *m = find_pcoll(d, id);
    if (m == NULL) {
        return sd_err_set(err, SD_EPROTO, "descriptor %s: PCollection %s is not in the descriptor",
                          d->id, id);
    }
    pc = sd_calloc(1, sizeof(*pc));
    if (pc == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_vec_init(&pc->consumers, sizeof(op *));
    pc->id = sd_strdup(id);
    if (pc->id == NULL || sd_vec_push(&bp->pcs, &pc) != SD_OK) {
        sd_free(pc->id);
        sd_free(pc);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_status st = build_coder(d, m->coder_id, &pc->coder, err);
    if (st != SD_OK) {
        return sd_err_prefix(err, "PCollection %s: ", id);
    }
    const SD_PL(WindowingStrategy) *ws = find_windowing(d, m->windowing_strategy_id);
    if (ws == NULL) {
        return sd_err_set(err, SD_EPROTO, "PCollection %s: windowing strategy %s is not in the "
                          "descriptor", id, m->windowing_strategy_id);
    }
    if ((st = parse_window_fn(ws->window_fn, &pc->wf, err)) != SD_OK ||
        (st = build_coder(d, ws->window_coder_id, &pc->window_coder, err)) != SD_OK) {
        return sd_err_prefix(err, "PCollection %s: ", id);
    }
    *out = pc;
    return SD_OK;
}

static sd_status new_op(sd__proc *bp, op_kind kind, const char *tid, op **out, sd_err *err)
{
    op *o = sd_calloc(1, sizeof(*o));
    if (o == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    o->kind = kind;
    o->bp = bp;
    o->tid = sd_strdup(tid);
    o->ctx.op = o;
    sd_vec_init(&o->ctx.reads, sizeof(sd_buf *));
    sd_timer_init(&o->timer);
    sd_buf_init(&o->pending, 0);
    sd_buf_init(&o->ctx.scratch, 0);
    sd_buf_init(&o->b1, 0);
    sd_buf_init(&o->b2, 0);
    sd_buf_init(&o->b3, 0);
    sd_wv_header_init(&o->hdr);
    sd_map_init(&o->counters, counter_free);
    sd_map_init(&o->accs, acc_free);
    if (o->tid == NULL || sd_vec_push(&bp->ops, &o) != SD_OK) {
        sd__proc_op_destroy(o);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    *out = o;
    return SD_OK;
}

static sd_status connect_input(sd__proc *bp, const pb_PBD *d, op *o, const char *pcoll_id,
                               sd_err *err)
{
    pcn *pc;
    sd_status st = add_pcn(bp, d, pcoll_id, &pc, err);
    if (st != SD_OK) {
        return st;
    }
    o->in = pc;
    return sd_vec_push(&pc->consumers, &o) == SD_OK ? SD_OK
                                                    : sd_err_set(err, SD_ENOMEM, "out of memory");
}

static sd_status set_outputs(sd__proc *bp, const pb_PBD *d, op *o, size_t n, const char **ids,
                             sd_err *err)
{
    o->n_outs = n;
    o->outs = sd_calloc(n > 0 ? n : 1, sizeof(pcn *));
    if (o->outs == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == NULL) {
            continue;
        }
        sd_status st = add_pcn(bp, d, ids[i], &o->outs[i], err);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* The element coder of the port coder vs the PCollection's: same, or LP around it. */
static sd_status port_mode(op *o, const pcn *pc, sd_err *err)
{
    if (o->port_coder->kind != SD_CODER_WINDOWED_VALUE &&
        o->port_coder->kind != SD_CODER_PARAM_WINDOWED_VALUE) {
        return sd_err_set(err, SD_EPROTO, "transform %s: port coder %s is not a windowed value "
                          "coder", o->tid, o->port_coder->urn);
    }
    o->param_wv = o->port_coder->kind == SD_CODER_PARAM_WINDOWED_VALUE;
    const sd_coder *ec = sd_wv_element_coder(o->port_coder);
    if (sd_coder_equal(ec, pc->coder)) {
        o->lp_wrap = false;
        return SD_OK;
    }
    if (ec->kind == SD_CODER_LENGTH_PREFIX && sd_coder_equal(ec->components[0], pc->coder)) {
        o->lp_wrap = true;
        return SD_OK;
    }
    return sd_err_set(err, SD_EPROTO,
                      "transform %s: port element coder %s does not match PCollection %s's "
                      "coder %s", o->tid, ec->urn, pc->id, pc->coder->urn);
}

static sd_status build_port(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o,
                            sd_err *err)
{
    SD_FN(RemoteGrpcPort) *port = FNF(remote_grpc_port__unpack)(NULL, t->spec->payload.len,
                                                                  t->spec->payload.data);
    if (port == NULL) {
        return sd_err_set(err, SD_EPROTO, "transform %s: malformed RemoteGrpcPort", o->tid);
    }
    sd_status st = build_coder(d, port->coder_id, &o->port_coder, err);
    FNF(remote_grpc_port__free_unpacked)(port, NULL);
    (void)bp;
    return st != SD_OK ? sd_err_prefix(err, "transform %s: ", o->tid) : SD_OK;
}

/* State ids with their coders and timer families with their timer coders. */
static sd_status build_state_specs(const pb_PBD *d, const SD_PL(ParDoPayload) *pp, op *o,
                                   sd_err *err)
{
    sd_status st;
    o->stateful = pp->n_state_specs > 0 || pp->n_timer_family_specs > 0;
    if (pp->n_state_specs > 0) {
        o->state_ids = sd_calloc(pp->n_state_specs, sizeof(char *));
        o->state_coders = sd_calloc(pp->n_state_specs, sizeof(sd_coder *));
        o->state_infos = sd_calloc(pp->n_state_specs, sizeof(sd__state_info));
        o->state_key_coders = sd_calloc(pp->n_state_specs, sizeof(sd_coder *));
        o->state_cfgs = sd_calloc(pp->n_state_specs, sizeof(uint8_t *));
        o->n_state_slots = o->state_ids != NULL && o->state_coders != NULL
                               ? pp->n_state_specs : 0;
        if (o->state_ids == NULL || o->state_coders == NULL || o->state_infos == NULL ||
            o->state_key_coders == NULL || o->state_cfgs == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < pp->n_state_specs; i++) {
        const SD_PL(StateSpec) *ss = pp->state_specs[i]->value;
        const char *cid = NULL;
        sd__state_info *info = &o->state_infos[o->n_states];
        if (ss != NULL &&
            ss->spec_case == ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_BAG_SPEC) {
            cid = ss->bag_spec->element_coder_id;
            info->kind = SD_STATE_BAG;
        } else if (ss != NULL &&
                   ss->spec_case ==
                       ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_READ_MODIFY_WRITE_SPEC) {
            cid = ss->read_modify_write_spec->coder_id;
            info->kind = SD_STATE_VALUE;
        } else if (ss != NULL &&
                   ss->spec_case ==
                       ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_COMBINING_SPEC) {
            sd_bytes name;
            const SD_PL(FunctionSpec) *cf = ss->combining_spec->combine_fn;
            cid = ss->combining_spec->accumulator_coder_id;
            info->kind = SD_STATE_COMBINING;
            if (cf == NULL || strcmp(cf->urn, SD_URN_COMBINEFN_C) != 0) {
                return sd_err_set(err, SD_EUNIMPL, "transform %s: combining state %s: the "
                                  "CombineFn is not a C CombineFn (%s)", o->tid,
                                  pp->state_specs[i]->key, SD_URN_COMBINEFN_C);
            }
            o->state_cfgs[o->n_states] = sd_memdup(cf->payload.data, cf->payload.len);
            if (o->state_cfgs[o->n_states] == NULL && cf->payload.len > 0) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
            if ((st = sd__combinefn_payload_decode(
                     sd_bytes_make(o->state_cfgs[o->n_states], cf->payload.len), &name,
                     &info->config, err)) != SD_OK) {
                return sd_err_prefix(err, "transform %s: combining state %s: ", o->tid,
                                     pp->state_specs[i]->key);
            }
            info->cfn = sd__find_combinefn(name);
            if (info->cfn == NULL) {
                return sd_err_set(err, SD_ENOTFOUND, "transform %s: combining state %s: no "
                                  "CombineFn registered as \"%.*s\" in this worker", o->tid,
                                  pp->state_specs[i]->key, (int)name.len,
                                  (const char *)name.ptr);
            }
        } else if (ss != NULL &&
                   ss->spec_case ==
                       ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_MAP_SPEC) {
            cid = ss->map_spec->value_coder_id;
            info->kind = SD_STATE_MAP;
            if ((st = build_coder(d, ss->map_spec->key_coder_id,
                                  &o->state_key_coders[o->n_states], err)) != SD_OK) {
                return sd_err_prefix(err, "transform %s: map state %s keys: ", o->tid,
                                     pp->state_specs[i]->key);
            }
            info->key_coder = o->state_key_coders[o->n_states];
        } else if (ss != NULL &&
                   ss->spec_case ==
                       ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_ORDERED_LIST_SPEC) {
            cid = ss->ordered_list_spec->element_coder_id;
            info->kind = SD_STATE_ORDERED_LIST;
        } else {
            return sd_err_set(err, SD_EUNIMPL, "transform %s: state %s: only bag, value, "
                              "combining, map and ordered-list state are supported", o->tid,
                              pp->state_specs[i]->key);
        }
        o->state_ids[o->n_states] = sd_strdup(pp->state_specs[i]->key);
        if (o->state_ids[o->n_states] == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        st = build_coder(d, cid, &o->state_coders[o->n_states], err);
        info->coder = o->state_coders[o->n_states];
        o->n_states++;
        if (st != SD_OK) {
            return sd_err_prefix(err, "transform %s: state %s: ", o->tid,
                                 pp->state_specs[i]->key);
        }
    }
    if (pp->n_timer_family_specs > 0) {
        o->fams = sd_calloc(pp->n_timer_family_specs, sizeof(tfam));
        if (o->fams == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < pp->n_timer_family_specs; i++) {
        const SD_PL(TimerFamilySpec) *ts = pp->timer_family_specs[i]->value;
        tfam *f = &o->fams[o->n_fams++];
        sd_buf_init(&f->out, 0);
        sd_buf_init(&f->in_pending, 0);
        f->family = sd_strdup(pp->timer_family_specs[i]->key);
        if (f->family == NULL || ts == NULL) {
            return sd_err_set(err, f->family == NULL ? SD_ENOMEM : SD_EPROTO,
                              "transform %s: bad timer family", o->tid);
        }
        if ((st = build_coder(d, ts->timer_family_coder_id, &f->coder, err)) != SD_OK) {
            return sd_err_prefix(err, "transform %s: timer family %s: ", o->tid, f->family);
        }
        if (f->coder->kind != SD_CODER_TIMER) {
            return sd_err_set(err, SD_EPROTO, "transform %s: timer family %s: coder %s is not a "
                              "timer coder", o->tid, f->family, f->coder->urn);
        }
    }
    return SD_OK;
}

/* A ParDo's payload: checks, state specs, the DoFn payload copied and decoded, the DoFn looked
 * up, and a splittable DoFn's watermark estimator. */
static sd_status read_pardo_payload(const pb_PBD *d, const pb_PTransform *t, op *o, sd_err *err)
{
    sd_status st;
    SD_PL(ParDoPayload) *pp = PLF(par_do_payload__unpack)(NULL, t->spec->payload.len,
                                                            t->spec->payload.data);
    if (pp == NULL || pp->do_fn == NULL) {
        if (pp != NULL) {
            PLF(par_do_payload__free_unpacked)(pp, NULL);
        }
        return sd_err_set(err, SD_EPROTO, "transform %s: malformed ParDoPayload", o->tid);
    }
    if (strcmp(pp->do_fn->urn, SD_URN_DOFN_C) != 0) {
        st = sd_err_set(err, SD_EUNIMPL, "transform %s: DoFn URN %s is not a C DoFn (%s)",
                        o->tid, pp->do_fn->urn, SD_URN_DOFN_C);
        PLF(par_do_payload__free_unpacked)(pp, NULL);
        return st;
    }
    if (pp->restriction_coder_id != NULL && pp->restriction_coder_id[0] != '\0' &&
        o->sdf_role == 0) {
        st = sd_err_set(err, SD_EPROTO, "transform %s: a splittable ParDo reached the SDK "
                        "unexpanded (the runner must expand it into the SDF components)", o->tid);
        PLF(par_do_payload__free_unpacked)(pp, NULL);
        return st;
    }
    if ((st = build_state_specs(d, pp, o, err)) != SD_OK) {
        PLF(par_do_payload__free_unpacked)(pp, NULL);
        return st;
    }
    o->payload = sd_memdup(pp->do_fn->payload.data, pp->do_fn->payload.len);
    size_t plen = pp->do_fn->payload.len;
    PLF(par_do_payload__free_unpacked)(pp, NULL);
    if (o->payload == NULL && plen > 0) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if ((st = sd__dofn_payload_decode(sd_bytes_make(o->payload, plen), &o->pl, err)) != SD_OK) {
        return sd_err_prefix(err, "transform %s: ", o->tid);
    }
    o->fn = sd__find_dofn(o->pl.name);
    if (o->fn == NULL) {
        return sd_err_set(err, SD_ENOTFOUND,
                          "transform %s: no DoFn registered as \"%.*s\" in this worker (register "
                          "it before sd_sdk_main)", o->tid, (int)o->pl.name.len,
                          (const char *)o->pl.name.ptr);
    }
    if (o->sdf_role != 0) {
        if (o->fn->initial_restriction == NULL) {
            return sd_err_set(err, SD_EINVAL, "transform %s: DoFn \"%.*s\" runs as a splittable "
                              "DoFn but has no initial_restriction", o->tid,
                              (int)o->pl.name.len, (const char *)o->pl.name.ptr);
        }
        if ((st = sd__sdf_payload_wm(sd_bytes_make(o->payload, plen), &o->wm_spec, err)) !=
            SD_OK) {
            return sd_err_prefix(err, "transform %s: ", o->tid);
        }
    }
    return SD_OK;
}

/* The pair-with-restriction and split-and-size components of a splittable DoFn. */
static sd_status connect_sdf_component(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t,
                                       op *o, sd_err *err)
{
    sd_status st;
    /* One input, one output "out"; side inputs belong to the process transform. */
    if (t->n_inputs != 1 || t->n_outputs != 1) {
        return sd_err_set(err, SD_EPROTO, "transform %s: an SDF component needs one input "
                          "and one output", o->tid);
    }
    if ((st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK) {
        return st;
    }
    const sd_coder *ic = o->in->coder;
    if (o->sdf_role == SDF_SPLIT &&
        (ic->kind != SD_CODER_KV || ic->components[1]->kind != SD_CODER_KV)) {
        return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not KV(element, "
                          "restriction)", o->tid, o->in->id);
    }
    const char *out_id = t->outputs[0]->value;
    return set_outputs(bp, d, o, 1, &out_id, err);
}

/* A ParDo's side inputs by local name (their access patterns from the ParDoPayload). OUT:
 * main_in, the input that is not a side input (NULL when there is none). */
static sd_status connect_sides(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o,
                               const char **main_in_out, sd_err *err)
{
    sd_status st;
    SD_PL(ParDoPayload) *pp;
    const char *main_in = NULL;
    /* Side inputs by local name, main input = the other one. */
    o->n_sides = o->pl.n_sides;
    o->sides = o->n_sides > 0 ? sd_calloc(o->n_sides, sizeof(side)) : NULL;
    if (o->n_sides > 0 && o->sides == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < t->n_inputs; i++) {
        bool is_side = false;
        for (size_t j = 0; j < o->pl.n_sides; j++) {
            sd_bytes s = o->pl.sides[j];
            if (strlen(t->inputs[i]->key) == s.len && memcmp(t->inputs[i]->key, s.ptr, s.len) == 0) {
                is_side = true;
                o->sides[j].local = sd_strdup(t->inputs[i]->key);
                if (o->sides[j].local == NULL) {
                    return sd_err_set(err, SD_ENOMEM, "out of memory");
                }
                if ((st = add_pcn(bp, d, t->inputs[i]->value, &o->sides[j].pc, err)) != SD_OK) {
                    return st;
                }
            }
        }
        if (!is_side) {
            main_in = t->inputs[i]->value;
        }
    }
    for (size_t j = 0; j < o->n_sides; j++) {
        if (o->sides[j].pc == NULL) {
            return sd_err_set(err, SD_EPROTO, "transform %s: side input %.*s is not an input",
                              o->tid, (int)o->pl.sides[j].len, (const char *)o->pl.sides[j].ptr);
        }
    }
    /* Multimap-ness comes from the ParDoPayload; re-read it for the access patterns. */
    pp = PLF(par_do_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
    for (size_t j = 0; pp != NULL && j < pp->n_side_inputs; j++) {
        for (size_t k = 0; k < o->n_sides; k++) {
            if (strcmp(pp->side_inputs[j]->key, o->sides[k].local) == 0 &&
                pp->side_inputs[j]->value != NULL &&
                pp->side_inputs[j]->value->access_pattern != NULL) {
                o->sides[k].multimap =
                    strcmp(pp->side_inputs[j]->value->access_pattern->urn,
                           SD_URN_SIDE_INPUT_MULTIMAP) == 0;
                if (o->sides[k].multimap && o->sides[k].pc->coder->kind != SD_CODER_KV) {
                    PLF(par_do_payload__free_unpacked)(pp, NULL);
                    return sd_err_set(err, SD_EPROTO, "transform %s: multimap side input %s is "
                                      "not a KV PCollection", o->tid, o->sides[k].local);
                }
            }
        }
    }
    if (pp != NULL) {
        PLF(par_do_payload__free_unpacked)(pp, NULL);
    }
    *main_in_out = main_in;
    return SD_OK;
}

/* A ParDo's outputs in the DoFn payload's tag order. */
static sd_status connect_pardo_outputs(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t,
                                       op *o, sd_err *err)
{
    sd_status st;
    const char **ids = sd_calloc(o->pl.n_outputs + 1, sizeof(char *));
    if (ids == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < o->pl.n_outputs; i++) {
        char tag[256];
        snprintf(tag, sizeof(tag), "%.*s", (int)o->pl.outputs[i].len,
                 (const char *)o->pl.outputs[i].ptr);
        ids[i] = pbd_string_map(t->n_outputs, (void **)t->outputs, tag);
    }
    st = set_outputs(bp, d, o, o->pl.n_outputs, ids, err);
    sd_free(ids);
    return st;
}

/* A splittable DoFn's process component: the local names its residual roots carry. */
static sd_status record_sdf_locals(const pb_PTransform *t, op *o, sd_err *err)
{
    /* Residual roots name the main input and every output by local name. */
    const sd_coder *ic = o->in->coder;
    if (ic->kind != SD_CODER_KV || ic->components[0]->kind != SD_CODER_KV) {
        return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not KV(KV(element, "
                          "restriction), size)", o->tid, o->in->id);
    }
    for (size_t i = 0; i < t->n_inputs && o->main_local == NULL; i++) {
        if (strcmp(t->inputs[i]->value, o->in->id) == 0) {
            o->main_local = sd_strdup(t->inputs[i]->key);
            if (o->main_local == NULL) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
        }
    }
    o->out_locals = t->n_outputs > 0 ? sd_calloc(t->n_outputs, sizeof(char *)) : NULL;
    if (t->n_outputs > 0 && o->out_locals == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < t->n_outputs; i++) {
        o->out_locals[i] = sd_strdup(t->outputs[i]->key);
        if (o->out_locals[i] == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        o->n_out_locals++;
    }
    return SD_OK;
}

/* A ParDo operator: its payload and DoFn, then its inputs (main and side) and outputs. */
static sd_status build_pardo(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o,
                             sd_err *err)
{
    sd_status st = read_pardo_payload(d, t, o, err);
    if (st != SD_OK) {
        return st;
    }
    if (o->sdf_role == SDF_PAIR || o->sdf_role == SDF_SPLIT) {
        return connect_sdf_component(bp, d, t, o, err);
    }
    const char *main_in = NULL;
    if ((st = connect_sides(bp, d, t, o, &main_in, err)) != SD_OK) {
        return st;
    }
    if (main_in == NULL) {
        return sd_err_set(err, SD_EPROTO, "transform %s: no main input", o->tid);
    }
    if ((st = connect_input(bp, d, o, main_in, err)) != SD_OK) {
        return st;
    }
    if (o->stateful && o->in->coder->kind != SD_CODER_KV) {
        return sd_err_set(err, SD_EPROTO, "transform %s: stateful DoFn input %s is not a KV",
                          o->tid, o->in->id);
    }
    st = connect_pardo_outputs(bp, d, t, o, err);
    if (st == SD_OK && o->sdf_role == SDF_PROCESS) {
        st = record_sdf_locals(t, o, err);
    }
    return st;
}

static sd_status build_combine(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o,
                               sd_err *err)
{
    sd_status st;
    sd_bytes name;
    SD_PL(CombinePayload) *cp = PLF(combine_payload__unpack)(NULL, t->spec->payload.len,
                                                               t->spec->payload.data);
    if (cp == NULL || cp->combine_fn == NULL) {
        if (cp != NULL) {
            PLF(combine_payload__free_unpacked)(cp, NULL);
        }
        return sd_err_set(err, SD_EPROTO, "transform %s: malformed CombinePayload", o->tid);
    }
    if (strcmp(cp->combine_fn->urn, SD_URN_COMBINEFN_C) != 0) {
        st = sd_err_set(err, SD_EUNIMPL, "transform %s: CombineFn URN %s is not a C CombineFn",
                        o->tid, cp->combine_fn->urn);
        PLF(combine_payload__free_unpacked)(cp, NULL);
        return st;
    }
    size_t plen = cp->combine_fn->payload.len;
    o->cpayload = sd_memdup(cp->combine_fn->payload.data, plen);
    st = build_coder(d, cp->accumulator_coder_id, &o->acc_coder, err);
    PLF(combine_payload__free_unpacked)(cp, NULL);
    if (st != SD_OK) {
        return sd_err_prefix(err, "transform %s: accumulator coder: ", o->tid);
    }
    if (o->cpayload == NULL && plen > 0) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if ((st = sd__combinefn_payload_decode(sd_bytes_make(o->cpayload, plen), &name, &o->ccfg,
                                           err)) != SD_OK) {
        return sd_err_prefix(err, "transform %s: ", o->tid);
    }
    o->cfn = sd__find_combinefn(name);
    if (o->cfn == NULL) {
        return sd_err_set(err, SD_ENOTFOUND,
                          "transform %s: no CombineFn registered as \"%.*s\" in this worker",
                          o->tid, (int)name.len, (const char *)name.ptr);
    }
    if (t->n_inputs != 1 || t->n_outputs != 1) {
        return sd_err_set(err, SD_EPROTO, "transform %s: a combine component needs one input and "
                          "one output", o->tid);
    }
    if ((st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK) {
        return st;
    }
    if (o->in->coder->kind != SD_CODER_KV) {
        return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not a KV", o->tid,
                          o->in->id);
    }
    if ((o->kind == OP_MERGE || o->kind == OP_COMBINE_GROUPED) &&
        o->in->coder->components[1]->kind != SD_CODER_ITERABLE) {
        return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not KV<K, Iterable<V>>",
                          o->tid, o->in->id);
    }
    const char *out_id = t->outputs[0]->value;
    return set_outputs(bp, d, o, 1, &out_id, err);
}

static sd_status build_op(sd__proc *bp, const pb_PBD *d, const char *tid, const pb_PTransform *t,
                          sd_err *err)
{
    const char *urn = t->spec->urn;
    op *o;
    sd_status st;
    static const struct {
        const char *urn;
        op_kind kind;
    } combines[] = {
        { SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE, OP_PRECOMBINE },
        { SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS, OP_MERGE },
        { SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS, OP_EXTRACT },
        { SD_URN_TRANSFORM_COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS, OP_CONVERT },
        { SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES, OP_COMBINE_GROUPED },
    };
    if (strcmp(urn, SD_URN_RUNNER_SOURCE) == 0) {
        if (t->n_outputs != 1) {
            return sd_err_set(err, SD_EPROTO, "data source %s: expected one output", tid);
        }
        if ((st = new_op(bp, OP_SOURCE, tid, &o, err)) != SD_OK ||
            (st = build_port(bp, d, t, o, err)) != SD_OK) {
            return st;
        }
        const char *out_id = t->outputs[0]->value;
        if ((st = set_outputs(bp, d, o, 1, &out_id, err)) != SD_OK ||
            (st = port_mode(o, o->outs[0], err)) != SD_OK) {
            return st;
        }
        return sd_vec_push(&bp->srcs, &o) == SD_OK ? SD_OK
                                                   : sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (strcmp(urn, SD_URN_RUNNER_SINK) == 0) {
        if (t->n_inputs != 1) {
            return sd_err_set(err, SD_EPROTO, "data sink %s: expected one input", tid);
        }
        if ((st = new_op(bp, OP_SINK, tid, &o, err)) != SD_OK ||
            (st = build_port(bp, d, t, o, err)) != SD_OK ||
            (st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK ||
            (st = port_mode(o, o->in, err)) != SD_OK) {
            return st;
        }
        return sd_vec_push(&bp->sinks, &o) == SD_OK ? SD_OK
                                                    : sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (strcmp(urn, SD_URN_TRANSFORM_PARDO) == 0) {
        if ((st = new_op(bp, OP_PARDO, tid, &o, err)) != SD_OK) {
            return st;
        }
        return build_pardo(bp, d, t, o, err);
    }
    static const struct {
        const char *urn;
        int role;
    } sdfs[] = {
        { SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION, SDF_PAIR },
        { SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS, SDF_SPLIT },
        { SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS, SDF_PROCESS },
    };
    for (size_t i = 0; i < sizeof(sdfs) / sizeof(sdfs[0]); i++) {
        if (strcmp(urn, sdfs[i].urn) == 0) {
            if ((st = new_op(bp, OP_PARDO, tid, &o, err)) != SD_OK) {
                return st;
            }
            o->sdf_role = sdfs[i].role;
            return build_pardo(bp, d, t, o, err);
        }
    }
    if (strcmp(urn, SD_URN_TRANSFORM_WINDOW_INTO) == 0) {
        if (t->n_inputs != 1 || t->n_outputs != 1) {
            return sd_err_set(err, SD_EPROTO, "transform %s: WindowInto needs one input and one "
                              "output", tid);
        }
        if ((st = new_op(bp, OP_WINDOW_INTO, tid, &o, err)) != SD_OK) {
            return st;
        }
        SD_PL(WindowIntoPayload) *wp = PLF(window_into_payload__unpack)(
            NULL, t->spec->payload.len, t->spec->payload.data);
        if (wp == NULL) {
            return sd_err_set(err, SD_EPROTO, "transform %s: malformed WindowIntoPayload", tid);
        }
        st = parse_window_fn(wp->window_fn, &o->wf, err);
        PLF(window_into_payload__free_unpacked)(wp, NULL);
        if (st != SD_OK) {
            return sd_err_prefix(err, "transform %s: ", tid);
        }
        const char *out_id = t->outputs[0]->value;
        if ((st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK) {
            return st;
        }
        return set_outputs(bp, d, o, 1, &out_id, err);
    }
    if (strcmp(urn, SD_URN_TRANSFORM_FLATTEN) == 0) {
        if (t->n_outputs != 1) {
            return sd_err_set(err, SD_EPROTO, "transform %s: Flatten needs one output", tid);
        }
        if ((st = new_op(bp, OP_FLATTEN, tid, &o, err)) != SD_OK) {
            return st;
        }
        for (size_t i = 0; i < t->n_inputs; i++) {
            if ((st = connect_input(bp, d, o, t->inputs[i]->value, err)) != SD_OK) {
                return st;
            }
        }
        const char *out_id = t->outputs[0]->value;
        return set_outputs(bp, d, o, 1, &out_id, err);
    }
    for (size_t i = 0; i < sizeof(combines) / sizeof(combines[0]); i++) {
        if (strcmp(urn, combines[i].urn) == 0) {
            if ((st = new_op(bp, combines[i].kind, tid, &o, err)) != SD_OK) {
                return st;
            }
            return build_combine(bp, d, t, o, err);
        }
    }
    return sd_err_set(err, SD_EUNIMPL, "transform %s: URN %s is not supported by the C SDK worker",
                      tid, urn);
}

/* Depth-first post-order from the sources gives reverse topological order. */
static sd_status topo_visit(op *o, sd_vec *order)
{
    if (o->visited) {
        return SD_OK;
    }
    o->visited = true;
    for (size_t i = 0; i < o->n_outs; i++) {
        if (o->outs[i] == NULL) {
            continue;
        }
        for (size_t j = 0; j < o->outs[i]->consumers.len; j++) {
            sd_status st = topo_visit(*SD_VEC_AT(&o->outs[i]->consumers, op *, j), order);
            if (st != SD_OK) {
                return st;
            }
        }
    }
    return sd_vec_push(order, &o);
}

sd_status sd__proc_create(const pb_ProcessBundleDescriptor *d, sd__proc **out, sd_err *err)
{
    sd_status st = SD_OK;
    sd__proc *bp = sd_calloc(1, sizeof(*bp));
    if (bp == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_vec_init(&bp->pcs, sizeof(pcn *));
    sd_vec_init(&bp->ops, sizeof(op *));
    sd_vec_init(&bp->srcs, sizeof(op *));
    sd_vec_init(&bp->sinks, sizeof(op *));
    sd_map_init(&bp->side_cache, buf_free_value);
    sd_vec_init(&bp->residuals, sizeof(sd__residual_root));
    pthread_mutex_init(&bp->split_mu, NULL);
    bp->id = sd_strdup(d->id != NULL ? d->id : "");
    if (bp->id == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < d->n_transforms && st == SD_OK; i++) {
        const pb_PTransform *t = d->transforms[i]->value;
        if (t == NULL || t->n_subtransforms > 0 || t->spec == NULL || t->spec->urn == NULL ||
            t->spec->urn[0] == '\0') {
            continue;
        }
        st = build_op(bp, d, d->transforms[i]->key, t, err);
    }
    if (st == SD_OK && bp->srcs.len == 0 && bp->ops.len > 0) {
        /* A descriptor without a data source (e.g. only timers) is fine; one without any
         * operator is odd but harmless. */
    }
    /* Topological order (sources first), then every operator must be reachable. */
    if (st == SD_OK) {
        sd_vec order;
        sd_vec_init(&order, sizeof(op *));
        for (size_t i = 0; i < bp->srcs.len && st == SD_OK; i++) {
            st = topo_visit(*SD_VEC_AT(&bp->srcs, op *, i), &order);
        }
        for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
            st = topo_visit(*SD_VEC_AT(&bp->ops, op *, i), &order);
        }
        if (st == SD_OK && order.len == bp->ops.len) {
            for (size_t i = 0; i < order.len; i++) {
                *SD_VEC_AT(&bp->ops, op *, i) = *SD_VEC_AT(&order, op *, order.len - 1 - i);
            }
        } else if (st == SD_OK) {
            st = sd_err_set(err, SD_EINTERNAL, "descriptor %s: operator ordering failed", bp->id);
        } else {
            sd_err_set(err, st, "out of memory");
        }
        sd_vec_deinit(&order);
    }
    /* A splittable DoFn's residuals are encoded as its stage's data source encodes input. */
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        for (size_t k = 0; o->sdf_role == SDF_PROCESS && k < bp->srcs.len; k++) {
            op *src = *SD_VEC_AT(&bp->srcs, op *, k);
            if (src->outs[0] == o->in) {
                o->sdf_src = src;
                src->sdf_feeds = true;
            }
        }
    }
    /* Set up DoFns last, once the graph is known to be valid. */
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind != OP_PARDO) {
            continue;
        }
        if (o->fn->setup != NULL) {
            sd_err ue;
            sd_err_clear(&ue);
            st = o->fn->setup(o->pl.config, &o->state, &ue);
            if (st != SD_OK) {
                sd_err_set(err, st, "transform %s: DoFn \"%.*s\" setup failed: %s", o->tid,
                           (int)o->pl.name.len, (const char *)o->pl.name.ptr, sd_err_msg(&ue));
                break;
            }
        }
        o->setup_done = true;
    }
    if (st != SD_OK) {
        sd__proc_destroy(bp);
        return st;
    }
    *out = bp;
    return SD_OK;
}
