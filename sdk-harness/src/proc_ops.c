/*
 * Sundial C SDK: the bundle processor's operators — what each does with one windowed value.
 *
 * Elements travel depth-first: sd__proc_emit hands a borrowed windowed value (wv) to every
 * consumer of a PCollection node and op_process dispatches on the operator's kind:
 *
 *   sink                 encodes into the sink's pending buffer, flushed every
 *                        SINK_FLUSH_BYTES and at finish with is_last
 *   pardo                calls the DoFn's process once per window (stateful DoFns: with the
 *                        element's key); splittable DoFns run their pair / split / process
 *                        role, track claims and record residuals (sd__proc_split answers the
 *                        runner's split requests from another thread, under split_mu)
 *   window_into          assigns windows (global, fixed, sliding, sessions)
 *   flatten              forwards
 *   precombine           folds into a per-bundle table of window+key -> accumulator, flushed
 *                        at finish (or when it passes PRECOMBINE_MAX_KEYS) in key order
 *   merge / extract /    the other CombineFn phases, one grouped or keyed value at a time
 *   convert / grouped
 *
 * No element is copied between operators; what must outlive a call (tables, sink buffers) is
 * copied. A failure records the bundle's first error (sd__proc_fail) and returns it up the
 * chain, ending the bundle.
 *
 * Siblings: proc_ctx.c is what the DoFns call back, proc_graph.c builds these operators,
 * proc.c feeds the sources; their shared types are in proc_int.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/proc_int.h"

#define SINK_FLUSH_BYTES    (1u << 20)
#define PRECOMBINE_MAX_KEYS 10000

/* ================================================================ window assignment */

/* Assign windows for ts. OUT: ws (reset first). */
static sd_status assign_windows(const winfn *f, sd_time ts, sd_windows *ws)
{
    sd_status st = SD_OK;
    ws->n = 0;
    switch (f->kind) {
    case SD_WINDOW_GLOBAL: {
        sd_window g = sd_window_global();
        return sd_windows_push(ws, &g);
    }
    case SD_WINDOW_FIXED: {
        sd_time start = ts - pos_mod(ts - f->offset, f->size);
        sd_window w = sd_window_interval(start, sd_time_add(start, f->size));
        return sd_windows_push(ws, &w);
    }
    case SD_WINDOW_SLIDING: {
        sd_time last = ts - pos_mod(ts - f->offset, f->period);
        for (sd_time start = last; start > ts - f->size && st == SD_OK; start -= f->period) {
            sd_window w = sd_window_interval(start, sd_time_add(start, f->size));
            st = sd_windows_push(ws, &w);
        }
        return st;
    }
    case SD_WINDOW_SESSIONS: {
        sd_window w = sd_window_interval(ts, sd_time_add(ts, f->gap));
        return sd_windows_push(ws, &w);
    }
    }
    return SD_EINVAL;
}

/* The side input window for a main-input window (Beam's getSideInputWindow). */

/* ================================================================ emission */

static sd_status op_process(op *o, const wv *v, sd_err *err);

sd_status sd__proc_emit(pcn *pc, const wv *v, sd_err *err)
{
    for (size_t i = 0; i < pc->consumers.len; i++) {
        op *o = *SD_VEC_AT(&pc->consumers, op *, i);
        sd_status st = op_process(o, v, err);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* ================================================================ operators */

sd_status sd__proc_sink_flush(op *o, bool is_last, sd_err *err)
{
    const sd__bundle_io *io = o->bp->io;
    if (io == NULL || io->data == NULL) {
        return sd__proc_fail(o->bp, err, SD_ESTATE, "sink %s: no output channel", o->tid);
    }
    sd_status st = io->data(io->ctx, o->tid, sd_buf_bytes(&o->pending), is_last, err);
    sd_buf_reset(&o->pending);
    if (st != SD_OK) {
        o->bp->broken = true;
    }
    return st;
}

/*
 * The windowed-value header of the most common case, written in place: one window, the
 * global one, under the global window coder (which writes no bytes for it), and a pane of
 * index 0 (one byte). The same bytes sd_wv_encode_header writes; false when v is not that
 * case or the buffer has no room, and the general encoder runs.
 */
static bool put_global_header(op *o, const wv *v)
{
    const sd_pane *p = &v->pane;
    sd_buf *b = &o->pending;
    if (!o->global_wc || v->n_windows != 1 || !v->windows[0].global || p->index != 0 ||
        p->nonspec_index != 0 || p->timing < SD_PANE_EARLY || p->timing > SD_PANE_UNKNOWN ||
        b->cap - b->len < 13) {
        return false;
    }
    uint8_t *d = b->data + b->len;
    uint64_t t = sd_time_encode(v->ts);
    for (int i = 0; i < 8; i++) {
        d[i] = (uint8_t)(t >> (56 - 8 * i));
    }
    d[8] = d[9] = d[10] = 0;
    d[11] = 1; /* the window count, big-endian */
    d[12] = (uint8_t)((p->first ? 1 : 0) | (p->last ? 2 : 0) | (p->timing << 2));
    b->len += 13;
    return true;
}

static sd_status sink_process(op *o, const wv *v, sd_err *err)
{
    sd_status st = SD_OK;
    if (!o->param_wv && !put_global_header(o, v)) {
        st = sd_wv_encode_header(&o->pending, sd_wv_window_coder(o->port_coder), v->ts, v->windows,
                                 v->n_windows, &v->pane, NULL);
    }
    if (st == SD_OK && o->lp_wrap) {
        st = sd_buf_put_lp(&o->pending, v->elem);
    } else if (st == SD_OK) {
        st = sd_buf_append_bytes(&o->pending, v->elem);
    }
    if (st != SD_OK) {
        return sd__proc_fail(o->bp, err, st, "sink %s: encoding failed: %s", o->tid,
                             sd_status_str(st));
    }
    if (o->pending.len >= SINK_FLUSH_BYTES) {
        return sd__proc_sink_flush(o, false, err);
    }
    return SD_OK;
}

static sd_status sdf_op_process(op *o, const wv *v, sd_err *err);

static sd_status pardo_process(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    if (o->sdf_role != 0) {
        return sdf_op_process(o, v, err);
    }
    c->key = SD_BYTES_NULL;
    if (o->stateful) {
        sd_bytes value;
        sd_status st = sd_kv_split(o->in->coder, v->elem, &c->key, &value, err);
        if (st != SD_OK) {
            return sd__proc_fail(o->bp, err, st,
                                 "transform %s: stateful input is not a KV of its coder", o->tid);
        }
    }
    for (size_t i = 0; i < v->n_windows; i++) {
        c->in = v;
        c->win = v->windows[i];
        c->fire = v->ts;
        sd_status st = o->fn->process(c, o->state);
        c->in = NULL;
        sd__proc_drop_reads(c);
        if (st != SD_OK) {
            if (o->bp->err.code == SD_OK) {
                return sd__proc_fail(o->bp, err, st, "DoFn \"%.*s\" in transform %s failed: %s",
                                     (int)o->pl.name.len, (const char *)o->pl.name.ptr, o->tid,
                                     sd_status_str(st));
            }
            o->bp->broken = true;
            return sd_err_set(err, o->bp->err.code, "%s", o->bp->err.msg);
        }
    }
    return SD_OK;
}

/* ---- splittable DoFns ------------------------------------------------------------------ */

/* The error of a failed SDF callback (the DoFn's own message when it gave one). */
static sd_status sdf_fail(op *o, sd_err *err, sd_status st, const char *what)
{
    if (o->bp->err.code == SD_OK) {
        return sd__proc_fail(o->bp, err, st, "DoFn \"%.*s\" in transform %s: %s failed: %s",
                             (int)o->pl.name.len, (const char *)o->pl.name.ptr, o->tid, what,
                             sd_status_str(st));
    }
    o->bp->broken = true;
    return sd_err_set(err, o->bp->err.code, "%s", o->bp->err.msg);
}

static sd_status restriction_size(op *o, sd_offset_range r, double *size, sd_err *err)
{
    *size = (double)r.to - (double)r.from;
    if (o->fn->restriction_size == NULL) {
        return SD_OK;
    }
    sd_status st = o->fn->restriction_size(&o->ctx, o->state, r, size);
    return st != SD_OK ? sdf_fail(o, err, st, "restriction_size") : SD_OK;
}

/* KV(KV(elem, r with wm_state), size) into out (reset first). SD_ENOMEM only. */
static sd_status
encode_sized(sd_buf *out, sd_bytes elem, sd_offset_range r, sd_time wm_state, double size)
{
    sd_buf_reset(out);
    sd_status st = sd_buf_append_bytes(out, elem);
    st = st == SD_OK ? sd__restriction_encode(out, r, wm_state) : st;
    return st == SD_OK ? sd_enc_double(out, size) : st;
}

/* KV(KV(elem, restriction), size) into out (reset first), the size from the DoFn. */
static sd_status
sized_element(op *o, sd_buf *out, sd_bytes elem, sd_offset_range r, sd_time wm_state, sd_err *err)
{
    double size;
    sd_status st = restriction_size(o, r, &size, err);
    if (st != SD_OK) {
        return st;
    }
    if ((st = encode_sized(out, elem, r, wm_state, size)) != SD_OK) {
        return sd__proc_fail(o->bp, err, st, "transform %s: out of memory", o->tid);
    }
    return SD_OK;
}

/*
 * A root of this splittable DoFn (op o) into rr: the windowed value (ts, window w, pane) of
 * `sized` (KV(KV(element, restriction), size)) as the stage's data source encodes its input,
 * named by the process transform and its main input, with its resume delay and, when the
 * estimator reports one (has_wm), the output watermark `wm` for every output. rr is
 * initialized here and owns everything; on failure it is left empty. SD_ENOMEM only.
 */
static sd_status root_make(op *o,
                           sd_time ts,
                           const sd_window *w,
                           const sd_pane *pane,
                           sd_bytes sized,
                           int64_t delay_ms,
                           bool has_wm,
                           sd_time wm,
                           sd__residual_root *rr)
{
    op *src = o->sdf_src;
    memset(rr, 0, sizeof(*rr));
    sd_buf_init(&rr->element, 0);
    rr->transform = sd_strdup(o->tid);
    rr->input = sd_strdup(o->main_local != NULL ? o->main_local : "");
    rr->delay_ms = delay_ms;
    rr->has_watermark = has_wm;
    rr->watermark = wm;
    rr->outputs = o->n_out_locals > 0 ? sd_calloc(o->n_out_locals, sizeof(char *)) : NULL;
    sd_status st =
        rr->transform == NULL || rr->input == NULL || (o->n_out_locals > 0 && rr->outputs == NULL)
            ? SD_ENOMEM
            : SD_OK;
    for (size_t i = 0; st == SD_OK && i < o->n_out_locals; i++) {
        rr->outputs[i] = sd_strdup(o->out_locals[i]);
        rr->n_outputs++;
        st = rr->outputs[i] == NULL ? SD_ENOMEM : SD_OK;
    }
    if (st == SD_OK) {
        st = sd_wv_encode_header(&rr->element, sd_wv_window_coder(src->port_coder), ts, w, 1, pane,
                                 NULL);
    }
    if (st == SD_OK) {
        st = src->lp_wrap ? sd_buf_put_lp(&rr->element, sized)
                          : sd_buf_append_bytes(&rr->element, sized);
    }
    if (st != SD_OK) {
        sd__residual_root_deinit(rr);
        memset(rr, 0, sizeof(*rr));
    }
    return st;
}

/* Queue a residual root: r of elem in window w, resumed delay_ms later. */
static sd_status add_residual(op *o,
                              const wv *v,
                              const sd_window *w,
                              sd_bytes elem,
                              sd_offset_range r,
                              sd__wm_est *wm,
                              int64_t delay_ms,
                              sd_err *err)
{
    op *src = o->sdf_src;
    sd__proc *bp = o->bp;
    if (src == NULL || src->param_wv) {
        return sd__proc_fail(bp, err, SD_EPROTO,
                             "transform %s: a splittable DoFn must read its own "
                             "stage's data source to checkpoint",
                             o->tid);
    }
    sd_time est = sd__wm_current(wm, sd_wall_now_ms());
    sd_status st = sized_element(o, &o->b2, elem, r, est, err);
    if (st != SD_OK) {
        return st;
    }
    sd__residual_root rr;
    st = root_make(o, v->ts, w, &v->pane, sd_buf_bytes(&o->b2), delay_ms, sd__wm_reports(wm), est,
                   &rr);
    if (st == SD_OK && (st = sd_vec_push(&bp->residuals, &rr)) != SD_OK) {
        sd__residual_root_deinit(&rr);
    }
    if (st != SD_OK) {
        return sd__proc_fail(bp, err, st, "transform %s: cannot encode a residual: %s", o->tid,
                             sd_status_str(st));
    }
    return SD_OK;
}

static sd_status sdf_pair(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    sd_status st = SD_OK;
    for (size_t i = 0; i < v->n_windows && st == SD_OK; i++) {
        sd_offset_range r = { 0, 0 };
        c->in = v;
        c->win = v->windows[i];
        c->fire = v->ts;
        st = o->fn->initial_restriction(c, o->state, &r);
        c->in = NULL;
        sd__proc_drop_reads(c);
        if (st != SD_OK) {
            return sdf_fail(o, err, st, "initial_restriction");
        }
        if (r.to < r.from) {
            return sd__proc_fail(o->bp, err, SD_EINVAL,
                                 "transform %s: initial_restriction gave [%lld, "
                                 "%lld)",
                                 o->tid, (long long)r.from, (long long)r.to);
        }
        sd_buf_reset(&o->b1);
        /* The estimator starts at the element's timestamp. */
        if ((st = sd_buf_append_bytes(&o->b1, v->elem)) != SD_OK ||
            (st = sd__restriction_encode(&o->b1, r, v->ts)) != SD_OK) {
            return sd__proc_fail(o->bp, err, st, "transform %s: out of memory", o->tid);
        }
        wv out = { v->ts, &v->windows[i], 1, v->pane, sd_buf_bytes(&o->b1) };
        st = sd__proc_emit(o->outs[0], &out, err);
    }
    return st;
}

static sd_status sdf_split(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    sd_bytes elem, rb;
    sd_offset_range r;
    sd_time wm_state;
    sd_status st = sd_kv_split(o->in->coder, v->elem, &elem, &rb, err);
    sd_reader rr = sd_reader_make(rb);
    if (st != SD_OK || sd__restriction_decode(&rr, &r, &wm_state) != SD_OK) {
        return sd__proc_fail(o->bp, err, SD_EPROTO,
                             "transform %s: input is not KV(element, offset "
                             "range)",
                             o->tid);
    }
    sd_vec parts;
    sd_vec_init(&parts, sizeof(sd_offset_range));
    for (size_t i = 0; i < v->n_windows && st == SD_OK; i++) {
        wv in = { v->ts, &v->windows[i], 1, v->pane, elem };
        sd_vec_reset(&parts);
        if (o->fn->split_restriction == NULL) {
            st = sd_vec_push(&parts, &r);
        } else {
            sd__sdf_call call;
            memset(&call, 0, sizeof(call));
            call.parts = &parts;
            c->sdf = &call;
            c->in = &in;
            c->win = v->windows[i];
            c->fire = v->ts;
            st = o->fn->split_restriction(c, o->state, r);
            c->sdf = NULL;
            c->in = NULL;
            sd__proc_drop_reads(c);
            if (st != SD_OK) {
                st = sdf_fail(o, err, st, "split_restriction");
                break;
            }
        }
        for (size_t k = 0; k < parts.len && st == SD_OK; k++) {
            sd_offset_range part = *SD_VEC_AT(&parts, sd_offset_range, k);
            c->in = &in;
            st = sized_element(o, &o->b1, elem, part, wm_state, err);
            c->in = NULL;
            if (st == SD_OK) {
                wv out = { v->ts, &v->windows[i], 1, v->pane, sd_buf_bytes(&o->b1) };
                st = sd__proc_emit(o->outs[0], &out, err);
            }
        }
    }
    sd_vec_deinit(&parts);
    return st;
}

/*
 * The drain's truncation: KV(KV(elem, r), size) -> KV(KV(elem, truncated r), its size), or
 * nothing. Default (no truncate_restriction): keep a bounded r whole, drop an unbounded one
 * (to == INT64_MAX).
 */
static sd_status sdf_truncate(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    sd_bytes er, sz, elem;
    sd_bytes rb = SD_BYTES_NULL;
    sd_offset_range r;
    sd_time wm_state;
    sd_status st = sd_kv_split(o->in->coder, v->elem, &er, &sz, err);
    if (st == SD_OK) {
        st = sd_kv_split(o->in->coder->components[0], er, &elem, &rb, err);
    }
    sd_reader rr = sd_reader_make(rb);
    if (st != SD_OK || sd__restriction_decode(&rr, &r, &wm_state) != SD_OK) {
        return sd__proc_fail(o->bp, err, SD_EPROTO,
                             "transform %s: input is not KV(KV(element, offset range), size)",
                             o->tid);
    }
    for (size_t i = 0; i < v->n_windows && st == SD_OK; i++) {
        wv in = { v->ts, &v->windows[i], 1, v->pane, elem };
        sd_offset_range out = r;
        bool keep = r.to != INT64_MAX;
        if (o->fn->truncate_restriction != NULL) {
            c->in = &in;
            c->win = v->windows[i];
            c->fire = v->ts;
            st = o->fn->truncate_restriction(c, o->state, r, &out, &keep);
            c->in = NULL;
            sd__proc_drop_reads(c);
            if (st != SD_OK) {
                return sdf_fail(o, err, st, "truncate_restriction");
            }
            if (keep && (out.from < r.from || out.to > r.to || out.to < out.from)) {
                return sd__proc_fail(o->bp, err, SD_EINVAL,
                                     "transform %s: truncate_restriction gave [%lld, %lld), "
                                     "not inside [%lld, %lld)",
                                     o->tid, (long long)out.from, (long long)out.to,
                                     (long long)r.from, (long long)r.to);
            }
        }
        if (!keep) {
            continue;
        }
        c->in = &in;
        st = sized_element(o, &o->b1, elem, out, wm_state, err);
        c->in = NULL;
        if (st == SD_OK) {
            wv o_v = { v->ts, &v->windows[i], 1, v->pane, sd_buf_bytes(&o->b1) };
            st = sd__proc_emit(o->outs[0], &o_v, err);
        }
    }
    return st;
}

static sd_status sdf_run(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    sd__proc *bp = o->bp;
    sd_bytes er, sz, elem;
    sd_bytes rb = SD_BYTES_NULL; /* read by sd_reader_make even when a split failed */
    sd_offset_range r;
    sd_time wm_state;
    sd_status st = sd_kv_split(o->in->coder, v->elem, &er, &sz, err);
    if (st == SD_OK) {
        st = sd_kv_split(o->in->coder->components[0], er, &elem, &rb, err);
    }
    sd_reader rr = sd_reader_make(rb);
    if (st != SD_OK || sd__restriction_decode(&rr, &r, &wm_state) != SD_OK) {
        return sd__proc_fail(bp, err, SD_EPROTO,
                             "transform %s: input is not KV(KV(element, offset "
                             "range), size)",
                             o->tid);
    }
    bool split = false; /* a split request took the rest of the element's windows */
    for (size_t i = 0; i < v->n_windows && st == SD_OK && !split; i++) {
        sd__sdf_call call;
        memset(&call, 0, sizeof(call));
        sd__tracker_init(&call.tracker, r);
        sd__wm_init(&call.wm, &o->wm_spec, wm_state);
        call.in_process = true;
        call.lock = &bp->split_mu;
        call.parts = NULL;
        call.ts = v->ts;
        call.pane = v->pane;
        call.windows = v->windows;
        call.n_windows = v->n_windows;
        call.window = i;
        call.elem = elem;
        call.r0 = r;
        call.wm_state = wm_state;
        wv in = { v->ts, &v->windows[i], 1, v->pane, elem };
        pthread_mutex_lock(&bp->split_mu);
        bp->sdf_active = &call;
        bp->sdf_active_op = o;
        bp->sdf_active_index = o->sdf_src != NULL ? o->sdf_src->n_emitted - 1 : 0;
        pthread_mutex_unlock(&bp->split_mu);
        c->sdf = &call;
        c->in = &in;
        c->win = v->windows[i];
        c->fire = v->ts;
        c->key = SD_BYTES_NULL;
        st = o->fn->process(c, o->state);
        c->in = NULL;
        sd__proc_drop_reads(c);
        pthread_mutex_lock(&bp->split_mu);
        bp->sdf_active = NULL;
        bp->sdf_active_op = NULL;
        split = call.split;
        sd_offset_range rest;
        bool have_rest = false;
        if (st == SD_OK && call.resume) {
            have_rest = sd__tracker_split(&call.tracker, 0, &rest);
        }
        bool done = sd__tracker_done(&call.tracker);
        sd__tracker tr = call.tracker;
        pthread_mutex_unlock(&bp->split_mu);
        if (st != SD_OK) {
            st = sdf_fail(o, err, st, "process");
        } else if (!call.resume && !done) {
            st = sd__proc_fail(bp, err, SD_EINVAL,
                               "DoFn \"%.*s\" in transform %s: process returned "
                               "with [%lld, %lld) unclaimed and without sd_resume",
                               (int)o->pl.name.len, (const char *)o->pl.name.ptr, o->tid,
                               (long long)sd__tracker_next(&tr), (long long)tr.r.to);
        }
        if (st == SD_OK && have_rest) {
            c->in = &in;
            st = add_residual(o, v, &v->windows[i], elem, rest, &call.wm, call.delay_ms, err);
            c->in = NULL;
        }
        c->sdf = NULL;
    }
    return st;
}

void sd__split_deinit(sd__split *s)
{
    for (size_t i = 0; i < s->primaries.len; i++) {
        sd__residual_root_deinit(SD_VEC_AT(&s->primaries, sd__residual_root, i));
    }
    for (size_t i = 0; i < s->residuals.len; i++) {
        sd__residual_root_deinit(SD_VEC_AT(&s->residuals, sd__residual_root, i));
    }
    sd_vec_deinit(&s->primaries);
    sd_vec_deinit(&s->residuals);
}

/* One root of the split element into v: window k of call's element with restriction r, the
 * watermark state wm_state (also its reported watermark). Under split_mu. SD_ENOMEM only. */
static sd_status split_root(op *o,
                            const sd__sdf_call *call,
                            size_t k,
                            sd_offset_range r,
                            sd_time wm_state,
                            sd_vec *v)
{
    sd_buf sized;
    sd__residual_root rr;
    sd_buf_init(&sized, 0);
    sd_status st = encode_sized(&sized, call->elem, r, wm_state, (double)r.to - (double)r.from);
    st = st == SD_OK ? root_make(o, call->ts, &call->windows[k], &call->pane, sd_buf_bytes(&sized),
                                 0, sd__wm_reports(&call->wm), wm_state, &rr)
                     : st;
    sd_buf_deinit(&sized);
    if (st == SD_OK && (st = sd_vec_push(v, &rr)) != SD_OK) {
        sd__residual_root_deinit(&rr);
    }
    return st;
}

bool sd__proc_set_split_lost(sd__proc *bp, bool lost)
{
    bool was = bp->split_lost;
    bp->split_lost = lost;
    return was;
}

sd_status sd__proc_split(sd__proc *bp, const char *transform_id, double fraction, sd__split *out)
{
    memset(out, 0, sizeof(*out));
    sd_vec_init(&out->primaries, sizeof(sd__residual_root));
    sd_vec_init(&out->residuals, sizeof(sd__residual_root));
    pthread_mutex_lock(&bp->split_mu);
    sd__sdf_call *call = bp->sdf_active;
    op *o = bp->sdf_active_op;
    sd_status st = SD_OK;
    sd_offset_range res;
    sd_offset_range before = call != NULL ? call->tracker.r : (sd_offset_range){ 0, 0 };
    if (call != NULL && o->sdf_src != NULL && !o->sdf_src->param_wv &&
        (transform_id == NULL || strcmp(transform_id, o->sdf_src->tid) == 0) &&
        o->sdf_src->stop_at == SIZE_MAX && sd__tracker_split(&call->tracker, fraction, &res)) {
        /* Primaries: the windows before the one in process whole, and it with [from, split);
         * residuals: [split, to) of it, at the estimate so far, and the later windows whole. */
        sd_time est = sd__wm_current(&call->wm, sd_wall_now_ms());
        for (size_t k = 0; st == SD_OK && k < call->window; k++) {
            st = split_root(o, call, k, call->r0, call->wm_state, &out->primaries);
        }
        st = st == SD_OK ? split_root(o, call, call->window, call->tracker.r, call->wm_state,
                                      &out->primaries)
                         : st;
        st = st == SD_OK ? split_root(o, call, call->window, res, est, &out->residuals) : st;
        for (size_t k = call->window + 1; st == SD_OK && k < call->n_windows; k++) {
            st = split_root(o, call, k, call->r0, call->wm_state, &out->residuals);
        }
        if (st == SD_OK) {
            /* The element in process becomes its roots; the elements after it go back. */
            o->sdf_src->stop_at = bp->sdf_active_index + 1;
            call->split = true;
            out->split = true;
            out->source = o->sdf_src->tid;
            out->last_primary = (int64_t)bp->sdf_active_index - 1;
            out->first_residual = (int64_t)bp->sdf_active_index + 1;
        } else {
            call->tracker.r = before; /* undo: nothing was split */
        }
    }
    pthread_mutex_unlock(&bp->split_mu);
    return st;
}

static sd_status sdf_op_process(op *o, const wv *v, sd_err *err)
{
    switch (o->sdf_role) {
    case SDF_PAIR:
        return sdf_pair(o, v, err);
    case SDF_SPLIT:
        return sdf_split(o, v, err);
    case SDF_TRUNCATE:
        return sdf_truncate(o, v, err);
    default:
        return sdf_run(o, v, err);
    }
}

static sd_status window_into_process(op *o, const wv *v, sd_err *err)
{
    sd_windows ws;
    sd_windows_init(&ws);
    sd_status st = assign_windows(&o->wf, v->ts, &ws);
    if (st != SD_OK) {
        sd_windows_deinit(&ws);
        return sd__proc_fail(o->bp, err, st, "transform %s: assigning windows failed", o->tid);
    }
    wv out = *v;
    out.windows = sd_windows_items(&ws);
    out.n_windows = ws.n;
    st = sd__proc_emit(o->outs[0], &out, err);
    sd_windows_deinit(&ws);
    return st;
}

static sd_status combine_err(op *o, sd_err *err, sd_status st, const sd_err *ue, const char *what)
{
    return sd__proc_fail(o->bp, err, st, "CombineFn in transform %s: %s failed: %s", o->tid, what,
                         sd_err_msg(ue));
}

/* acc := add(acc or create(), input); result left in o->b2. */
static sd_status acc_add(op *o, sd_bytes acc, bool have_acc, sd_bytes input, sd_err *err)
{
    sd_err ue;
    sd_err_clear(&ue);
    sd_status st;
    if (!have_acc) {
        sd_buf_reset(&o->b1);
        if ((st = o->cfn->create(o->ccfg, &o->b1, &ue)) != SD_OK) {
            return combine_err(o, err, st, &ue, "create");
        }
        acc = sd_buf_bytes(&o->b1);
    }
    sd_buf_reset(&o->b2);
    if ((st = o->cfn->add(o->ccfg, acc, input, &o->b2, &ue)) != SD_OK) {
        return combine_err(o, err, st, &ue, "add");
    }
    return SD_OK;
}

static sd_status emit_kv(op *o, const wv *v, sd_bytes key, sd_bytes value, sd_err *err)
{
    sd_buf_reset(&o->b3);
    sd_status st = sd_buf_append_bytes(&o->b3, key);
    if (st == SD_OK) {
        st = sd_buf_append_bytes(&o->b3, value);
    }
    if (st != SD_OK) {
        return sd__proc_fail(o->bp, err, st, "transform %s: out of memory", o->tid);
    }
    wv out = *v;
    out.elem = sd_buf_bytes(&o->b3);
    return sd__proc_emit(o->outs[0], &out, err);
}

sd_status sd__proc_precombine_flush(op *o, sd_err *err)
{
    size_t n;
    sd_status st = SD_OK;
    if (sd_map_len(&o->accs) == 0) {
        return SD_OK;
    }
    sd_bytes *keys = sd_map_sorted_keys(&o->accs, &n);
    if (keys == NULL) {
        return sd__proc_fail(o->bp, err, SD_ENOMEM, "transform %s: out of memory", o->tid);
    }
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        acc_entry *e = sd_map_get(&o->accs, keys[i]);
        wv v = { e->min_ts, &e->w, 1, SD_PANE_NO_FIRING, SD_BYTES_NULL };
        st = emit_kv(o, &v, sd_buf_bytes(&e->key), sd_buf_bytes(&e->acc), err);
    }
    sd_free(keys);
    sd_map_deinit(&o->accs);
    sd_map_init(&o->accs, acc_free);
    return st;
}

static sd_status precombine_process(op *o, const wv *v, sd_err *err)
{
    sd_bytes key, value;
    sd_status st = sd_kv_split(o->in->coder, v->elem, &key, &value, err);
    if (st != SD_OK) {
        return sd__proc_fail(o->bp, err, st, "transform %s: input is not a KV of its coder",
                             o->tid);
    }
    for (size_t i = 0; i < v->n_windows; i++) {
        const sd_window *w = &v->windows[i];
        uint8_t wk[17];
        sd_buf mk;
        sd_buf_init(&mk, 0);
        for (int b = 0; b < 8; b++) {
            wk[b] = (uint8_t)((uint64_t)w->start >> (56 - 8 * b));
            wk[8 + b] = (uint8_t)((uint64_t)w->end >> (56 - 8 * b));
        }
        wk[16] = w->global ? 1 : 0;
        if (sd_buf_append(&mk, wk, sizeof(wk)) != SD_OK || sd_buf_append_bytes(&mk, key) != SD_OK) {
            sd_buf_deinit(&mk);
            return sd__proc_fail(o->bp, err, SD_ENOMEM, "transform %s: out of memory", o->tid);
        }
        acc_entry *e = sd_map_get(&o->accs, sd_buf_bytes(&mk));
        st = acc_add(o, e != NULL ? sd_buf_bytes(&e->acc) : SD_BYTES_NULL, e != NULL, value, err);
        if (st == SD_OK && e == NULL) {
            e = sd_calloc(1, sizeof(*e));
            if (e == NULL) {
                st = SD_ENOMEM;
            } else {
                e->w = *w;
                e->min_ts = v->ts;
                sd_buf_init(&e->key, 0);
                sd_buf_init(&e->acc, 0);
                if (sd_buf_append_bytes(&e->key, key) != SD_OK ||
                    sd_map_put(&o->accs, sd_buf_bytes(&mk), e) != SD_OK) {
                    acc_free(e);
                    st = SD_ENOMEM;
                }
            }
        }
        if (st == SD_OK) {
            e->min_ts = SD_MIN(e->min_ts, v->ts);
            sd_buf_reset(&e->acc);
            st = sd_buf_append_bytes(&e->acc, sd_buf_bytes(&o->b2));
        }
        sd_buf_deinit(&mk);
        if (st != SD_OK) {
            return o->bp->broken
                       ? st
                       : sd__proc_fail(o->bp, err, st, "transform %s: out of memory", o->tid);
        }
    }
    if (sd_map_len(&o->accs) > PRECOMBINE_MAX_KEYS) {
        return sd__proc_precombine_flush(o, err);
    }
    return SD_OK;
}

/* KV<K, Iterable<X>>: fold the values. add_inputs: X are inputs (else accumulators). The
 * result is left in o->b2 (an accumulator). */
static sd_status fold_grouped(op *o, const wv *v, sd_bytes *key, bool add_inputs, sd_err *err)
{
    sd_bytes value, x;
    sd_iterable_reader it;
    bool has;
    sd_err ue;
    sd_status st = sd_kv_split(o->in->coder, v->elem, key, &value, err);
    if (st != SD_OK) {
        return sd__proc_fail(o->bp, err, st, "transform %s: input is not a KV of its coder",
                             o->tid);
    }
    sd_reader r = sd_reader_make(value);
    if ((st = sd_iterable_begin(&it, o->in->coder->components[1], &r, err)) != SD_OK) {
        return sd__proc_fail(o->bp, err, st, "transform %s: grouped values are not an iterable",
                             o->tid);
    }
    sd_err_clear(&ue);
    sd_buf_reset(&o->b2);
    if ((st = o->cfn->create(o->ccfg, &o->b2, &ue)) != SD_OK) {
        return combine_err(o, err, st, &ue, "create");
    }
    for (;;) {
        if ((st = sd_iterable_next(&it, &x, &has, err)) != SD_OK) {
            return sd__proc_fail(o->bp, err, st, "transform %s: malformed grouped values", o->tid);
        }
        if (!has) {
            break;
        }
        /* b1 := f(b2, x); then swap. */
        sd_buf_reset(&o->b1);
        st = add_inputs ? o->cfn->add(o->ccfg, sd_buf_bytes(&o->b2), x, &o->b1, &ue)
                        : o->cfn->merge(o->ccfg, sd_buf_bytes(&o->b2), x, &o->b1, &ue);
        if (st != SD_OK) {
            return combine_err(o, err, st, &ue, add_inputs ? "add" : "merge");
        }
        sd_buf tmp = o->b2;
        o->b2 = o->b1;
        o->b1 = tmp;
    }
    return SD_OK;
}

static sd_status extract_to(op *o, sd_bytes acc, sd_err *err)
{
    sd_err ue;
    sd_err_clear(&ue);
    sd_buf_reset(&o->b1);
    sd_status st = o->cfn->extract(o->ccfg, acc, &o->b1, &ue);
    return st != SD_OK ? combine_err(o, err, st, &ue, "extract") : SD_OK;
}

static sd_status combine_op_process(op *o, const wv *v, sd_err *err)
{
    sd_bytes key, value;
    sd_status st;
    switch (o->kind) {
    case OP_MERGE:
        if ((st = fold_grouped(o, v, &key, false, err)) != SD_OK) {
            return st;
        }
        return emit_kv(o, v, key, sd_buf_bytes(&o->b2), err);
    case OP_COMBINE_GROUPED:
        if ((st = fold_grouped(o, v, &key, true, err)) != SD_OK ||
            (st = extract_to(o, sd_buf_bytes(&o->b2), err)) != SD_OK) {
            return st;
        }
        return emit_kv(o, v, key, sd_buf_bytes(&o->b1), err);
    case OP_EXTRACT:
        if ((st = sd_kv_split(o->in->coder, v->elem, &key, &value, err)) != SD_OK) {
            return sd__proc_fail(o->bp, err, st, "transform %s: input is not a KV of its coder",
                                 o->tid);
        }
        if ((st = extract_to(o, value, err)) != SD_OK) {
            return st;
        }
        return emit_kv(o, v, key, sd_buf_bytes(&o->b1), err);
    case OP_CONVERT:
        if ((st = sd_kv_split(o->in->coder, v->elem, &key, &value, err)) != SD_OK) {
            return sd__proc_fail(o->bp, err, st, "transform %s: input is not a KV of its coder",
                                 o->tid);
        }
        if ((st = acc_add(o, SD_BYTES_NULL, false, value, err)) != SD_OK) {
            return st;
        }
        return emit_kv(o, v, key, sd_buf_bytes(&o->b2), err);
    default:
        return SD_EINTERNAL;
    }
}

static sd_status op_process(op *o, const wv *v, sd_err *err)
{
    switch (o->kind) {
    case OP_SINK:
        return sink_process(o, v, err);
    case OP_PARDO:
        return pardo_process(o, v, err);
    case OP_WINDOW_INTO:
        return window_into_process(o, v, err);
    case OP_FLATTEN:
        return sd__proc_emit(o->outs[0], v, err);
    case OP_PRECOMBINE:
        return precombine_process(o, v, err);
    case OP_MERGE:
    case OP_EXTRACT:
    case OP_CONVERT:
    case OP_COMBINE_GROUPED:
        return combine_op_process(o, v, err);
    case OP_SOURCE:
        break;
    }
    return sd__proc_fail(o->bp, err, SD_EINTERNAL, "transform %s: unexpected input", o->tid);
}
