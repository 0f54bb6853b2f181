/*
 * Sundial C SDK: the bundle processor — executes one ProcessBundleDescriptor.
 *
 * A descriptor is a small graph of fused transforms between data sources and data sinks. The
 * processor turns it into operators connected through PCollection nodes and pushes elements
 * through them depth-first: a source decodes windowed values from its byte stream and hands
 * each to the consumers of its output PCollection, which process it and emit to theirs, until
 * a sink appends the encoded value to its outgoing buffer.
 *
 *     data stream --> [source] --pc--> [pardo] --pc--> [precombine] ... --pc--> [sink] --> out
 *                                         \--pc--> [window_into] --pc--> [sink] --> out
 *
 * No element is ever copied between operators: a windowed value travels as a borrowed view
 * (timestamp, windows, pane, element bytes). Operators that must keep data beyond one call
 * (precombine tables, sink buffers, DoFn emits built in scratch buffers) copy it.
 *
 * Operators (by transform URN):
 *   beam:runner:source:v1 / sink:v1        decode / encode with the RemoteGrpcPort's coder;
 *                                         a port coder of length_prefix(C) around a
 *                                         PCollection coder C is unwrapped / wrapped.
 *   beam:transform:pardo:v1                a registered C DoFn (beam:dofn:sundial_c:v1),
 *                                         called once per element and window.
 *   beam:transform:window_into:v1          global, fixed, sliding, sessions.
 *   beam:transform:flatten:v1              forwards every input to its output.
 *   combine components                     precombine (a per-bundle table, flushed at the end
 *                                         in key order), merge_accumulators, extract_outputs,
 *                                         convert_to_accumulators, combine_grouped_values.
 * Anything else fails processor creation with a message naming the transform and URN.
 *
 * Order: start_bundle runs consumers-first and finish_bundle producers-first (topological
 * order from the sources), so everything a finishing operator emits still finds its consumers
 * active; sinks flush last and send is_last.
 *
 * Failure: the first error of a bundle (a DoFn's sd_fail message, or the status of whatever
 * failed) ends the bundle. A processor whose bundle failed is destroyed, never reused, since
 * user state after a failure is unknown.
 *
 * Files: this one runs bundles (start, the data and timer streams, finish) and destroys the
 * processor; proc_graph.c builds it from the descriptor (proc_pardo.c its ParDo operators),
 * proc_ops.c holds the operators and proc_ctx.c the DoFn context API user code calls. Their
 * shared types are in proc_int.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/proc_int.h"

/* ================================================================ errors */

/* Record the bundle's first error and copy it to err. */
sd_status sd__proc_fail(sd__proc *bp, sd_err *err, sd_status code, const char *fmt, ...)
{
    if (bp->err.code == SD_OK) {
        va_list ap;
        va_start(ap, fmt);
        sd_err_vset(&bp->err, code, fmt, ap);
        va_end(ap);
    }
    bp->broken = true;
    return sd_err_set(err, bp->err.code, "%s", bp->err.msg);
}

void sd__residual_root_deinit(sd__residual_root *r)
{
    sd_free(r->transform);
    sd_free(r->input);
    sd_buf_deinit(&r->element);
    for (size_t i = 0; i < r->n_outputs; i++) {
        sd_free(r->outputs[i]);
    }
    sd_free(r->outputs);
}

static void residuals_clear(sd_vec *v)
{
    for (size_t i = 0; i < v->len; i++) {
        sd__residual_root_deinit(SD_VEC_AT(v, sd__residual_root, i));
    }
    sd_vec_reset(v);
}

void sd__proc_destroy(sd__proc *bp)
{
    if (bp == NULL) {
        return;
    }
    for (size_t i = 0; i < bp->ops.len; i++) {
        sd__proc_op_destroy(*SD_VEC_AT(&bp->ops, op *, i));
    }
    for (size_t i = 0; i < bp->pcs.len; i++) {
        pcn *pc = *SD_VEC_AT(&bp->pcs, pcn *, i);
        sd_free(pc->id);
        sd_coder_destroy(pc->coder);
        sd_coder_destroy(pc->window_coder);
        sd_vec_deinit(&pc->consumers);
        sd_free(pc);
    }
    sd_vec_deinit(&bp->ops);
    sd_vec_deinit(&bp->pcs);
    sd_vec_deinit(&bp->srcs);
    sd_vec_deinit(&bp->sinks);
    sd_map_deinit(&bp->side_cache);
    residuals_clear(&bp->residuals);
    sd_vec_deinit(&bp->residuals);
    pthread_mutex_destroy(&bp->split_mu);
    sd_free(bp->instruction);
    sd_free(bp->id);
    sd_free(bp);
}

/* ================================================================ bundles */

sd_status
sd__proc_start(sd__proc *bp, const char *instruction_id, const sd__bundle_io *io, sd_err *err)
{
    if (bp->broken) {
        return sd_err_set(err, SD_ESTATE, "descriptor %s: processor is broken", bp->id);
    }
    sd_free(bp->instruction);
    bp->instruction = sd_strdup(instruction_id != NULL ? instruction_id : "");
    if (bp->instruction == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    bp->io = io;
    bp->now = sd_wall_now_ms();
    sd_err_clear(&bp->err);
    residuals_clear(&bp->residuals);
    pthread_mutex_lock(&bp->split_mu);
    for (size_t i = 0; i < bp->srcs.len; i++) {
        op *src = *SD_VEC_AT(&bp->srcs, op *, i);
        src->n_emitted = 0;
        src->stop_at = SIZE_MAX;
    }
    pthread_mutex_unlock(&bp->split_mu);
    for (size_t i = 0; i < bp->ops.len; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        o->done = false;
        sd_buf_reset(&o->pending);
        for (size_t k = 0; k < o->n_fams; k++) {
            o->fams[k].done = false;
            sd_buf_reset(&o->fams[k].out);
            sd_buf_reset(&o->fams[k].in_pending);
        }
    }
    /* Consumers first. */
    for (size_t i = bp->ops.len; i-- > 0;) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind == OP_PARDO && o->fn->start_bundle != NULL) {
            o->ctx.in = NULL;
            sd_status st = o->fn->start_bundle(&o->ctx, o->state);
            if (st != SD_OK) {
                return bp->err.code != SD_OK
                           ? sd__proc_fail(bp, err, bp->err.code, "%s", bp->err.msg)
                           : sd__proc_fail(bp, err, st, "transform %s: start_bundle failed: %s",
                                           o->tid, sd_status_str(st));
            }
        }
    }
    return SD_OK;
}

static op *find_source(sd__proc *bp, const char *tid)
{
    for (size_t i = 0; i < bp->srcs.len; i++) {
        op *o = *SD_VEC_AT(&bp->srcs, op *, i);
        if (strcmp(o->tid, tid) == 0) {
            return o;
        }
    }
    return NULL;
}

/* Decode and push every complete windowed value in r. */
static sd_status source_drain(op *o, sd_reader *r, bool final, sd_err *err)
{
    while (!sd_reader_done(r)) {
        sd_reader save = *r;
        sd_bytes elem;
        sd_err de;
        sd_err_clear(&de);
        sd_status st = sd_wv_decode(o->port_coder, r, &o->hdr, &elem, &de);
        if (st == SD_EPROTO && !final) {
            *r = save; /* probably split across messages: wait for more */
            return SD_OK;
        }
        if (st != SD_OK) {
            return sd__proc_fail(o->bp, err, st, "data source %s: undecodable element: %s", o->tid,
                                 sd_err_msg(&de));
        }
        if (o->lp_wrap) {
            sd_reader er = sd_reader_make(elem);
            if (sd_reader_lp(&er, &elem) != SD_OK) {
                return sd__proc_fail(o->bp, err, SD_EPROTO, "data source %s: bad length prefix",
                                     o->tid);
            }
        }
        wv v = { o->hdr.ts, sd_windows_items(&o->hdr.windows), o->hdr.windows.n, o->hdr.pane,
                 elem };
        if (o->sdf_feeds) {
            /* A split request may have ended the primary: later elements are the runner's. */
            pthread_mutex_lock(&o->bp->split_mu);
            bool skip = o->n_emitted >= o->stop_at;
            pthread_mutex_unlock(&o->bp->split_mu);
            if (skip) {
                continue;
            }
        }
        o->n_emitted++;
        if ((st = sd__proc_emit(o->outs[0], &v, err)) != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

sd_status
sd__proc_data(sd__proc *bp, const char *transform_id, sd_bytes chunk, bool is_last, sd_err *err)
{
    op *o = find_source(bp, transform_id);
    sd_status st;
    if (bp->broken) {
        return sd_err_set(err, bp->err.code != SD_OK ? bp->err.code : SD_ESTATE, "%s",
                          bp->err.code != SD_OK ? bp->err.msg : "processor is broken");
    }
    if (o == NULL) {
        return sd__proc_fail(bp, err, SD_EPROTO,
                             "bundle %s: data for %s, which is not a data source of "
                             "descriptor %s",
                             bp->instruction, transform_id, bp->id);
    }
    if (o->done) {
        return sd__proc_fail(bp, err, SD_EPROTO, "bundle %s: data for %s after its is_last",
                             bp->instruction, transform_id);
    }
    if (o->pending.len == 0) {
        sd_reader r = sd_reader_make(chunk);
        if ((st = source_drain(o, &r, is_last, err)) != SD_OK) {
            return st;
        }
        if (!sd_reader_done(&r) && sd_buf_append(&o->pending, r.p, sd_reader_left(&r)) != SD_OK) {
            return sd__proc_fail(bp, err, SD_ENOMEM, "out of memory");
        }
    } else {
        if (sd_buf_append_bytes(&o->pending, chunk) != SD_OK) {
            return sd__proc_fail(bp, err, SD_ENOMEM, "out of memory");
        }
        sd_reader r = sd_reader_make(sd_buf_bytes(&o->pending));
        if ((st = source_drain(o, &r, is_last, err)) != SD_OK) {
            return st;
        }
        size_t left = sd_reader_left(&r);
        memmove(o->pending.data, r.p, left);
        o->pending.len = left;
    }
    if (is_last) {
        o->done = true;
    }
    return SD_OK;
}

sd_status sd__proc_timers(sd__proc *bp,
                          const char *transform_id,
                          const char *family,
                          sd_bytes chunk,
                          bool is_last,
                          sd_err *err)
{
    op *o = NULL;
    tfam *f = NULL;
    if (bp->broken) {
        return sd_err_set(err, bp->err.code != SD_OK ? bp->err.code : SD_ESTATE, "%s",
                          bp->err.code != SD_OK ? bp->err.msg : "processor is broken");
    }
    for (size_t i = 0; i < bp->ops.len && f == NULL; i++) {
        o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind == OP_PARDO && strcmp(o->tid, transform_id) == 0) {
            f = sd__proc_find_family(o, family);
        }
    }
    if (f == NULL) {
        return sd__proc_fail(bp, err, SD_EPROTO,
                             "bundle %s: timers for %s/%s, which is not a timer "
                             "family of descriptor %s",
                             bp->instruction, transform_id, family, bp->id);
    }
    bool expiry = o->fn->on_window_expiration != NULL && strcmp(family, SD_EXPIRY_FAMILY) == 0;
    if (o->fn->on_timer == NULL && !expiry && chunk.len > 0) {
        return sd__proc_fail(bp, err, SD_EINVAL,
                             "transform %s: timer %s fired but the DoFn has no "
                             "on_timer callback",
                             o->tid, family);
    }
    /*
     * A runner may cut a stream of timers anywhere, even inside one timer: an incomplete tail
     * waits in in_pending for the next chunk (as data sources do); only the final chunk must
     * end on a timer boundary.
     */
    bool from_pending = f->in_pending.len > 0;
    if (from_pending && sd_buf_append_bytes(&f->in_pending, chunk) != SD_OK) {
        return sd__proc_fail(bp, err, SD_ENOMEM, "out of memory");
    }
    sd_reader r = sd_reader_make(from_pending ? sd_buf_bytes(&f->in_pending) : chunk);
    sd_ctx *c = &o->ctx;
    char fam[256];
    snprintf(fam, sizeof(fam), "%s", family);
    while (!sd_reader_done(&r)) {
        sd_timer t;
        sd_err de;
        sd_err_clear(&de);
        sd_timer_init(&t);
        sd_reader save = r;
        sd_status st = sd_timer_decode(f->coder, &r, &t, &de);
        if (st == SD_EPROTO && !is_last) {
            sd_timer_deinit(&t);
            r = save;
            break;
        }
        if (st != SD_OK) {
            sd_timer_deinit(&t);
            return sd__proc_fail(bp, err, st, "transform %s: undecodable timer in family %s: %s",
                                 o->tid, family, sd_err_msg(&de));
        }
        for (size_t w = 0; !t.clear && w < t.windows.n && st == SD_OK; w++) {
            wv v = { t.hold, &sd_windows_items(&t.windows)[w], 1, t.pane, SD_BYTES_NULL };
            c->in = &v;
            c->win = sd_windows_items(&t.windows)[w];
            c->key = t.key;
            c->fire = t.fire;
            st = expiry ? o->fn->on_window_expiration(c, o->state)
                        : o->fn->on_timer(c, o->state, fam, t.tag);
            c->in = NULL;
            c->key = SD_BYTES_NULL;
            sd__proc_drop_reads(c);
            if (st != SD_OK) {
                st = bp->err.code != SD_OK
                         ? sd__proc_fail(bp, err, bp->err.code, "%s", bp->err.msg)
                         : sd__proc_fail(bp, err, st, "transform %s: on_timer(%s) failed: %s",
                                         o->tid, family, sd_status_str(st));
            }
        }
        sd_timer_deinit(&t);
        if (st != SD_OK) {
            return st;
        }
    }
    size_t left = sd_reader_left(&r);
    if (from_pending) {
        memmove(f->in_pending.data, r.p, left);
        f->in_pending.len = left;
    } else if (left > 0 && sd_buf_append(&f->in_pending, r.p, left) != SD_OK) {
        return sd__proc_fail(bp, err, SD_ENOMEM, "out of memory");
    }
    if (is_last) {
        f->done = true;
    }
    return SD_OK;
}

size_t sd__proc_n_timer_streams(const sd__proc *bp)
{
    size_t n = 0;
    for (size_t i = 0; i < bp->ops.len; i++) {
        n += (*SD_VEC_AT(&bp->ops, op *, i))->n_fams;
    }
    return n;
}

void sd__proc_timer_stream(const sd__proc *bp,
                           size_t k,
                           const char **transform,
                           const char **family)
{
    *transform = NULL;
    *family = NULL;
    for (size_t i = 0; i < bp->ops.len; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (k < o->n_fams) {
            *transform = o->tid;
            *family = o->fams[k].family;
            return;
        }
        k -= o->n_fams;
    }
}

bool sd__proc_inputs_done(const sd__proc *bp)
{
    for (size_t i = 0; i < bp->srcs.len; i++) {
        if (!(*SD_VEC_AT(&bp->srcs, op *, i))->done) {
            return false;
        }
    }
    for (size_t i = 0; i < bp->ops.len; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        for (size_t k = 0; k < o->n_fams; k++) {
            if (!o->fams[k].done) {
                return false;
            }
        }
    }
    return true;
}

void sd__bundle_result_init(sd__bundle_result *r)
{
    r->has_pt_base = false;
    r->pt_base = 0;
    sd_vec_init(&r->counters, sizeof(sd__counter));
    sd_vec_init(&r->residuals, sizeof(sd__residual_root));
}

void sd__bundle_result_deinit(sd__bundle_result *r)
{
    for (size_t i = 0; i < r->counters.len; i++) {
        sd__counter *c = sd_vec_at(&r->counters, i);
        sd_free(c->transform);
        sd_free(c->name);
    }
    sd_vec_deinit(&r->counters);
    residuals_clear(&r->residuals);
    sd_vec_deinit(&r->residuals);
}

static sd_status collect_counters(op *o, sd__bundle_result *res)
{
    size_t it = 0;
    sd_bytes k;
    void *v;
    const size_t gp = strlen(SD__GAUGE_PREFIX);
    while (sd_map_next(&o->counters, &it, &k, &v)) {
        bool wm = k.len >= gp && memcmp(k.ptr, SD__GAUGE_PREFIX, gp) == 0;
        size_t skip = wm ? gp : 0;
        sd__counter c = { sd_strdup(o->tid), sd_strndup((const char *)k.ptr + skip, k.len - skip),
                          *(int64_t *)v, wm };
        if (c.transform == NULL || c.name == NULL || sd_vec_push(&res->counters, &c) != SD_OK) {
            sd_free(c.transform);
            sd_free(c.name);
            return SD_ENOMEM;
        }
    }
    sd_map_deinit(&o->counters);
    sd_map_init(&o->counters, counter_free);
    return SD_OK;
}

sd_status sd__proc_finish(sd__proc *bp, sd__bundle_result *res, sd_err *err)
{
    sd_status st = SD_OK;
    if (bp->broken) {
        return sd_err_set(err, bp->err.code != SD_OK ? bp->err.code : SD_ESTATE, "%s",
                          bp->err.code != SD_OK ? bp->err.msg : "processor is broken");
    }
    for (size_t i = 0; i < bp->srcs.len; i++) {
        op *o = *SD_VEC_AT(&bp->srcs, op *, i);
        if (o->pending.len > 0) {
            return sd__proc_fail(bp, err, SD_EPROTO,
                                 "data source %s: %zu trailing bytes do not form an "
                                 "element",
                                 o->tid, o->pending.len);
        }
    }
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind == OP_PARDO && o->fn->finish_bundle != NULL) {
            o->ctx.in = NULL;
            st = o->fn->finish_bundle(&o->ctx, o->state);
            if (st != SD_OK) {
                st = bp->err.code != SD_OK
                         ? sd__proc_fail(bp, err, bp->err.code, "%s", bp->err.msg)
                         : sd__proc_fail(bp, err, st, "transform %s: finish_bundle failed: %s",
                                         o->tid, sd_status_str(st));
            }
        } else if (o->kind == OP_PRECOMBINE) {
            st = sd__proc_precombine_flush(o, err);
        }
    }
    for (size_t i = 0; i < bp->sinks.len && st == SD_OK; i++) {
        st = sd__proc_sink_flush(*SD_VEC_AT(&bp->sinks, op *, i), true, err);
    }
    /* Timers set during the bundle, then is_last for every family. */
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        for (size_t k = 0; k < o->n_fams && st == SD_OK; k++) {
            if (bp->io == NULL || bp->io->timers == NULL) {
                st = sd__proc_fail(bp, err, SD_ESTATE, "transform %s: no timer output channel",
                                   o->tid);
                break;
            }
            st = bp->io->timers(bp->io->ctx, o->tid, o->fams[k].family,
                                sd_buf_bytes(&o->fams[k].out), true, err);
            sd_buf_reset(&o->fams[k].out);
            if (st != SD_OK) {
                bp->broken = true;
            }
        }
    }
    for (size_t i = 0; i < bp->ops.len && st == SD_OK && res != NULL; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind == OP_PARDO && collect_counters(o, res) != SD_OK) {
            st = sd__proc_fail(bp, err, SD_ENOMEM, "out of memory");
        }
    }
    /* Residual roots go to the result (moved: the vectors swap their items). */
    if (st == SD_OK && res != NULL && bp->residuals.len > 0) {
        for (size_t i = 0; i < bp->residuals.len && st == SD_OK; i++) {
            st = sd_vec_push(&res->residuals, SD_VEC_AT(&bp->residuals, sd__residual_root, i));
            if (st != SD_OK) {
                st = sd__proc_fail(bp, err, SD_ENOMEM, "out of memory");
            } else {
                memset(SD_VEC_AT(&bp->residuals, sd__residual_root, i), 0,
                       sizeof(sd__residual_root));
            }
        }
    }
    residuals_clear(&bp->residuals);
    sd_map_deinit(&bp->side_cache);
    sd_map_init(&bp->side_cache, buf_free_value);
    bp->io = NULL;
    if (st == SD_OK && res != NULL) {
        res->has_pt_base = true;
        res->pt_base = bp->now;
    }
    return st;
}
