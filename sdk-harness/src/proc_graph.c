/*
 * Sundial C SDK: descriptor -> operator graph — how the bundle processor is built.
 *
 * sd__proc_create reads a ProcessBundleDescriptor once and copies everything it needs:
 *
 *   1. one operator per leaf transform (build_op, by URN). It creates the PCollection nodes
 *      (pcn) it reads or writes on first sight, with their coders and window fns, and joins
 *      the consumers of its input nodes. Data ports get their RemoteGrpcPort coder (a
 *      length_prefix around the PCollection coder is unwrapped), ParDos their DoFn payload,
 *      side inputs, state and timer specs and splittable role (proc_pardo.c), combines their
 *      CombineFn and accumulator coder; an unknown URN fails with the transform's name
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
 * Siblings: proc_pardo.c builds the ParDo operators, proc_ops.c runs the operators built
 * here, proc_ctx.c is their DoFns' context, proc.c runs bundles and destroys the processor;
 * their shared types are in proc_int.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/proc_int.h"

#define FNF(x) org__apache__beam__model__fn_execution__v1__##x

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

static bool coder_lookup(void *ctx,
                         const char *id,
                         const char **urn,
                         sd_bytes *payload,
                         const char *const **component_ids,
                         size_t *n_components)
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

static const SD_PL(WindowingStrategy) * find_windowing(const pb_PBD *d, const char *id)
{
    for (size_t i = 0; i < d->n_windowing_strategies; i++) {
        if (strcmp(d->windowing_strategies[i]->key, id) == 0) {
            return d->windowing_strategies[i]->value;
        }
    }
    return NULL;
}

static const SD_PL(PCollection) * find_pcoll(const pb_PBD *d, const char *id)
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
        SD_PL(FixedWindowsPayload) *m =
            PLF(fixed_windows_payload__unpack)(NULL, fs->payload.len, fs->payload.data);
        if (m == NULL) {
            return sd_err_set(err, SD_EPROTO, "window fn %s: malformed payload", fs->urn);
        }
        out->kind = SD_WINDOW_FIXED;
        out->size = duration_ms(m->size);
        out->offset = timestamp_ms(m->offset);
        PLF(fixed_windows_payload__free_unpacked)(m, NULL);
    } else if (strcmp(fs->urn, SD_URN_WINDOW_FN_SLIDING) == 0) {
        SD_PL(SlidingWindowsPayload) *m =
            PLF(sliding_windows_payload__unpack)(NULL, fs->payload.len, fs->payload.data);
        if (m == NULL) {
            return sd_err_set(err, SD_EPROTO, "window fn %s: malformed payload", fs->urn);
        }
        out->kind = SD_WINDOW_SLIDING;
        out->size = duration_ms(m->size);
        out->period = duration_ms(m->period);
        out->offset = timestamp_ms(m->offset);
        PLF(sliding_windows_payload__free_unpacked)(m, NULL);
    } else if (strcmp(fs->urn, SD_URN_WINDOW_FN_SESSION) == 0) {
        SD_PL(SessionWindowsPayload) *m =
            PLF(session_windows_payload__unpack)(NULL, fs->payload.len, fs->payload.data);
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
        return sd_err_set(err, SD_EPROTO,
                          "PCollection %s: windowing strategy %s is not in the "
                          "descriptor",
                          id, m->windowing_strategy_id);
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

static sd_status
connect_input(sd__proc *bp, const pb_PBD *d, op *o, const char *pcoll_id, sd_err *err)
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

static sd_status
set_outputs(sd__proc *bp, const pb_PBD *d, op *o, size_t n, const char **ids, sd_err *err)
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
        return sd_err_set(err, SD_EPROTO,
                          "transform %s: port coder %s is not a windowed value "
                          "coder",
                          o->tid, o->port_coder->urn);
    }
    o->param_wv = o->port_coder->kind == SD_CODER_PARAM_WINDOWED_VALUE;
    const sd_coder *wc = sd_wv_window_coder(o->port_coder);
    o->global_wc = wc != NULL && wc->kind == SD_CODER_GLOBAL_WINDOW;
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
                      "coder %s",
                      o->tid, ec->urn, pc->id, pc->coder->urn);
}

static sd_status
build_port(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o, sd_err *err)
{
    SD_FN(RemoteGrpcPort) *port =
        FNF(remote_grpc_port__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
    if (port == NULL) {
        return sd_err_set(err, SD_EPROTO, "transform %s: malformed RemoteGrpcPort", o->tid);
    }
    sd_status st = build_coder(d, port->coder_id, &o->port_coder, err);
    FNF(remote_grpc_port__free_unpacked)(port, NULL);
    (void)bp;
    return st != SD_OK ? sd_err_prefix(err, "transform %s: ", o->tid) : SD_OK;
}

/* ================================================================ for proc_pardo.c */

/* The graph helpers above, for the ParDo operators built in proc_pardo.c. */
const char *sd__proc_string_map(size_t n, void **entries, const char *key)
{
    return pbd_string_map(n, entries, key);
}

sd_status sd__proc_build_coder(const pb_PBD *d, const char *id, sd_coder **out, sd_err *err)
{
    return build_coder(d, id, out, err);
}

sd_status sd__proc_add_pcn(sd__proc *bp, const pb_PBD *d, const char *id, pcn **out, sd_err *err)
{
    return add_pcn(bp, d, id, out, err);
}

sd_status
sd__proc_connect_input(sd__proc *bp, const pb_PBD *d, op *o, const char *pcoll_id, sd_err *err)
{
    return connect_input(bp, d, o, pcoll_id, err);
}

sd_status
sd__proc_set_outputs(sd__proc *bp, const pb_PBD *d, op *o, size_t n, const char **ids, sd_err *err)
{
    return set_outputs(bp, d, o, n, ids, err);
}

/* ================================================================ operators by URN */

static sd_status
build_combine(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o, sd_err *err)
{
    sd_status st;
    sd_bytes name;
    SD_PL(CombinePayload) *cp =
        PLF(combine_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
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
        return sd_err_set(err, SD_EPROTO,
                          "transform %s: a combine component needs one input and "
                          "one output",
                          o->tid);
    }
    if ((st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK) {
        return st;
    }
    if (o->in->coder->kind != SD_CODER_KV) {
        return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not a KV", o->tid, o->in->id);
    }
    if ((o->kind == OP_MERGE || o->kind == OP_COMBINE_GROUPED) &&
        o->in->coder->components[1]->kind != SD_CODER_ITERABLE) {
        return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not KV<K, Iterable<V>>",
                          o->tid, o->in->id);
    }
    const char *out_id = t->outputs[0]->value;
    return set_outputs(bp, d, o, 1, &out_id, err);
}

static sd_status
build_op(sd__proc *bp, const pb_PBD *d, const char *tid, const pb_PTransform *t, sd_err *err)
{
    const char *urn = t->spec->urn;
    op *o;
    sd_status st;

    static const struct {
        const char *urn;
        op_kind kind;
    } combines[] = {

#define COMBINE_OP(name, urn) { urn, OP_##name },
        SD_URN_COMBINE_COMPONENTS(COMBINE_OP)
#undef COMBINE_OP
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
        return sd__proc_build_pardo(bp, d, t, o, err);
    }

    static const struct {
        const char *urn;
        int role;
    } sdfs[] = {

#define SDF_ROLE(name, urn) { urn, SDF_##name },
        SD_URN_SDF_COMPONENTS(SDF_ROLE)
#undef SDF_ROLE
    };

    for (size_t i = 0; i < sizeof(sdfs) / sizeof(sdfs[0]); i++) {
        if (strcmp(urn, sdfs[i].urn) == 0) {
            if ((st = new_op(bp, OP_PARDO, tid, &o, err)) != SD_OK) {
                return st;
            }
            o->sdf_role = sdfs[i].role;
            return sd__proc_build_pardo(bp, d, t, o, err);
        }
    }
    if (strcmp(urn, SD_URN_TRANSFORM_WINDOW_INTO) == 0) {
        if (t->n_inputs != 1 || t->n_outputs != 1) {
            return sd_err_set(err, SD_EPROTO,
                              "transform %s: WindowInto needs one input and one "
                              "output",
                              tid);
        }
        if ((st = new_op(bp, OP_WINDOW_INTO, tid, &o, err)) != SD_OK) {
            return st;
        }
        SD_PL(WindowIntoPayload) *wp =
            PLF(window_into_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
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
    /* A splittable DoFn's residuals are encoded as its stage's data source encodes input
     * (through a drain's truncation too: it keeps the source's coder). */
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        const pcn *in = o->in;
        for (size_t k = 0; o->sdf_role == SDF_PROCESS && k < bp->ops.len; k++) {
            const op *t = *SD_VEC_AT(&bp->ops, op *, k);
            if (t->sdf_role == SDF_TRUNCATE && t->n_outs == 1 && t->outs[0] == o->in) {
                in = t->in;
            }
        }
        for (size_t k = 0; o->sdf_role == SDF_PROCESS && k < bp->srcs.len; k++) {
            op *src = *SD_VEC_AT(&bp->srcs, op *, k);
            if (src->outs[0] == in) {
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
