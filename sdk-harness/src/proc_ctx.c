/*
 * Sundial C SDK: the DoFn context API — what user code calls while the processor runs it.
 *
 * Every callback of a DoFn (process, on_timer, on_window_expiration, start/finish_bundle and
 * the splittable DoFn methods) gets an sd_ctx: the operator's own context, pointed at the
 * windowed value being processed (c->in, NULL outside process and on_timer), its current
 * window, key and firing time. This file implements the public calls over it:
 *
 *   element     sd_ctx_element/timestamp/window/pane/config/key, sd_ctx_kv, sd_ctx_grouped
 *   output      sd_emit* build a windowed value (the input's timestamp and pane and the window
 *               being processed, unless told otherwise) and push it through sd__proc_emit to
 *               the output's consumers
 *   metrics     sd_counter_add, sd_ctx_log, sd_fail (the bundle's first error)
 *   state       bag/value state over the bundle's State API (sd__bundle_io), keyed by the
 *               current key and window; the richer kinds (state_kinds.c) and splittable
 *               DoFns (sdf.c) reach it through the sd__ctx_* calls of sdf_int.h
 *   timers      sd_timer_set/clear encode into the family's outgoing buffer
 *   side inputs iterable and multimap views fetched through the State API, cached per bundle
 *
 * State reads stay valid until the callback returns: each is kept in c->reads and freed by
 * sd__proc_drop_reads after the call. Errors go through sd_fail, which keeps the bundle's
 * first error, the one reported.
 *
 * Siblings: proc_ops.c calls the DoFns, proc_graph.c builds the operators and their state and
 * timer specs, proc.c runs bundles; their shared types are in proc_int.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/proc_int.h"

/* ================================================================ windows */

/* The side input window for a main-input window (Beam's getSideInputWindow). */
static sd_window side_window(const winfn *f, const sd_window *main)
{
    sd_time ts = sd_window_max_ts(main);
    switch (f->kind) {
    case SD_WINDOW_FIXED: {
        sd_time start = ts - pos_mod(ts - f->offset, f->size);
        return sd_window_interval(start, sd_time_add(start, f->size));
    }
    case SD_WINDOW_SLIDING: {
        sd_time last = ts - pos_mod(ts - f->offset, f->period);
        return sd_window_interval(last, sd_time_add(last, f->size));
    }
    case SD_WINDOW_SESSIONS:
        return *main;
    default:
        return sd_window_global();
    }
}

/* ================================================================ emission */

/* ================================================================ DoFn context API */

sd_bytes sd_ctx_element(const sd_ctx *c)
{
    return c->in != NULL ? c->in->elem : SD_BYTES_NULL;
}

sd_time sd_ctx_timestamp(const sd_ctx *c)
{
    return c->in != NULL ? c->in->ts : SD_TIME_MIN;
}

sd_window sd_ctx_window(const sd_ctx *c)
{
    return c->in != NULL ? c->win : sd_window_global();
}

sd_pane sd_ctx_pane(const sd_ctx *c)
{
    return c->in != NULL ? c->in->pane : SD_PANE_NO_FIRING;
}

sd_bytes sd_ctx_config(const sd_ctx *c)
{
    return c->op->pl.config;
}

const char *sd_ctx_transform(const sd_ctx *c)
{
    return c->op->tid;
}

const sd_coder *sd_ctx_input_coder(const sd_ctx *c)
{
    const op *o = c->op;
    if (o->in == NULL) {
        return NULL;
    }
    /* Splittable DoFns see their element, not the KV(s) the runner wraps it in. */
    if (o->sdf_role == SDF_SPLIT) {
        return o->in->coder->components[0];
    }
    if (o->sdf_role == SDF_PROCESS || o->sdf_role == SDF_TRUNCATE) {
        return o->in->coder->components[0]->components[0];
    }
    return o->in->coder;
}

sd_status sd_fail(sd_ctx *c, const char *fmt, ...)
{
    sd__proc *bp = c->op->bp;
    if (bp->err.code == SD_OK) {
        char msg[SD_ERR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        /* The runner reports a failed bundle by its stage; name the user's transform too,
         * unless the message already does. */
        if (strstr(msg, c->op->tid) == NULL) {
            sd_err_set(&bp->err, SD_EINTERNAL, "transform \"%s\": %s", c->op->tid, msg);
        } else {
            sd_err_set(&bp->err, SD_EINTERNAL, "%s", msg);
        }
    }
    bp->broken = true;
    return SD_EINTERNAL;
}

sd_status sd_ctx_kv(sd_ctx *c, sd_bytes *key, sd_bytes *value)
{
    const sd_coder *ic = sd_ctx_input_coder(c);
    if (c->in == NULL || ic == NULL) {
        return SD_ESTATE;
    }
    return sd_kv_split(ic, c->in->elem, key, value, NULL);
}

/*
 * The public sd_iter keeps the iterable reader in opaque storage so that <sundial/sundial.h>
 * need not show the coder internals; this is the one place that looks inside.
 */
_Static_assert(sizeof(((sd_iter *)0)->reader) >= sizeof(sd_iterable_reader),
               "sd_iter.reader is too small for sd_iterable_reader");
_Static_assert(_Alignof(sd_iterable_reader) <= _Alignof(uint64_t) &&
                   _Alignof(sd_iterable_reader) <= _Alignof(void *),
               "sd_iter.reader is not aligned enough for sd_iterable_reader");

static sd_iterable_reader *iter_reader(sd_iter *it)
{
    return (sd_iterable_reader *)(void *)it->reader.bytes;
}

sd_status sd_ctx_grouped(sd_ctx *c, sd_bytes *key, sd_iter *values)
{
    sd_bytes v;
    const sd_coder *ic = sd_ctx_input_coder(c);
    sd_status st = sd_ctx_kv(c, key, &v);
    if (st != SD_OK) {
        return st;
    }
    const sd_coder *vc = ic->components[1];
    if (vc->kind != SD_CODER_ITERABLE && vc->kind != SD_CODER_STATE_BACKED_ITERABLE) {
        return SD_EINVAL;
    }
    memset(values, 0, sizeof(*values));
    values->r = sd_reader_make(v);
    values->elem = vc->components[0];
    values->stream = false;
    return sd_iterable_begin(iter_reader(values), vc, &values->r, NULL);
}

sd_status sd_iter_next(sd_iter *it, sd_bytes *value, bool *has)
{
    if (it->stream) {
        if (sd_reader_done(&it->r)) {
            *has = false;
            return SD_OK;
        }
        *has = true;
        return sd_coder_slice(it->elem, &it->r, true, value, NULL);
    }
    sd_iterable_reader *ir = iter_reader(it);
    sd_status st = sd_iterable_next(ir, value, has, NULL);
    if (st == SD_OK && !*has && ir->has_token) {
        /* Large groups paged through the state API are not supported yet. */
        return SD_EUNIMPL;
    }
    return st;
}

static sd_status do_emit(sd_ctx *c, size_t output, const wv *v)
{
    op *o = c->op;
    if (output >= o->n_outs || o->outs[output] == NULL) {
        return sd_fail(c, "transform %s: emit to output %zu, but the ParDo has %zu outputs", o->tid,
                       output, o->n_outs);
    }
    sd_err e;
    sd_err_clear(&e);
    if (c->sdf != NULL && c->sdf->in_process) {
        sd__sdf_observe(c->sdf, v->ts);
    }
    sd_status st = sd__proc_emit(o->outs[output], v, &e);
    if (st != SD_OK) {
        o->bp->broken = true;
        if (o->bp->err.code == SD_OK) {
            sd_err_set(&o->bp->err, st, "%s", sd_err_msg(&e));
        }
    }
    return st;
}

sd_status sd_emit(sd_ctx *c, size_t output, sd_bytes element)
{
    if (c->in == NULL) {
        return sd_fail(c, "transform %s: sd_emit outside process(); use sd_emit_windowed",
                       c->op->tid);
    }
    wv v = { c->in->ts, &c->win, 1, c->in->pane, element };
    return do_emit(c, output, &v);
}

sd_status sd_emit_ts(sd_ctx *c, size_t output, sd_bytes element, sd_time ts)
{
    if (c->in == NULL) {
        return sd_fail(c, "transform %s: sd_emit_ts outside process(); use sd_emit_windowed",
                       c->op->tid);
    }
    wv v = { sd_time_clamp(ts), &c->win, 1, c->in->pane, element };
    return do_emit(c, output, &v);
}

sd_status sd_emit_windowed(sd_ctx *c,
                           size_t output,
                           sd_bytes element,
                           sd_time ts,
                           const sd_window *windows,
                           size_t n_windows,
                           const sd_pane *pane)
{
    if (windows == NULL || n_windows == 0) {
        return sd_fail(c, "transform %s: sd_emit_windowed needs at least one window", c->op->tid);
    }
    wv v = { sd_time_clamp(ts), windows, n_windows, pane != NULL ? *pane : SD_PANE_NO_FIRING,
             element };
    return do_emit(c, output, &v);
}

sd_status sd_emit_str(sd_ctx *c, const char *s, size_t len)
{
    sd_buf_reset(&c->scratch);
    sd_status st = sd_enc_bytes(&c->scratch, s, len);
    return st != SD_OK ? st : sd_emit(c, 0, sd_buf_bytes(&c->scratch));
}

sd_status sd_emit_int(sd_ctx *c, int64_t v)
{
    sd_buf_reset(&c->scratch);
    sd_status st = sd_enc_int(&c->scratch, v);
    return st != SD_OK ? st : sd_emit(c, 0, sd_buf_bytes(&c->scratch));
}

sd_status sd_emit_kv_str_int(sd_ctx *c, const char *k, size_t klen, int64_t v)
{
    sd_buf_reset(&c->scratch);
    sd_status st = sd_enc_bytes(&c->scratch, k, klen);
    if (st == SD_OK) {
        st = sd_enc_int(&c->scratch, v);
    }
    return st != SD_OK ? st : sd_emit(c, 0, sd_buf_bytes(&c->scratch));
}

void sd__ctx_partition_wm(sd_ctx *c, const char *partition, sd_time wm)
{
    char key[96];
    snprintf(key, sizeof(key), "%s%s", SD__GAUGE_PREFIX, partition);
    int64_t *v = sd_map_get_str(&c->op->counters, key);
    if (v == NULL) {
        v = sd_calloc(1, sizeof(*v));
        if (v == NULL || sd_map_put_str(&c->op->counters, key, v) != SD_OK) {
            sd_free(v);
            return;
        }
    }
    *v = wm;
}

void sd_counter_add(sd_ctx *c, const char *name, int64_t n)
{
    int64_t *v = sd_map_get_str(&c->op->counters, name);
    if (v == NULL) {
        v = sd_calloc(1, sizeof(*v));
        if (v == NULL || sd_map_put_str(&c->op->counters, name, v) != SD_OK) {
            sd_free(v);
            return;
        }
    }
    *v += n;
}

void sd_ctx_log(sd_ctx *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    SD_INFO("dofn", "%s: %s", c->op->tid, msg);
    const sd__bundle_io *io = c->op->bp->io;
    if (io != NULL && io->log != NULL) {
        io->log(io->ctx, c->op->tid, msg);
    }
}

/* ---- state and timers ------------------------------------------------------------------ */

sd_bytes sd_ctx_key(const sd_ctx *c)
{
    return c->key;
}

sd_time sd_ctx_fire_time(const sd_ctx *c)
{
    return c->fire;
}

/*
 * Processing time stands still for a bundle: every call sees the wall time at which the bundle
 * started, and the bundle's response reports it, so on the synthetic clock the runner rebases
 * "now + 1 hour" to exactly one hour after the job clock (sd__proc_finish).
 */
sd_time sd_ctx_processing_time(const sd_ctx *c)
{
    return c != NULL && c->op != NULL && c->op->bp != NULL ? c->op->bp->now : sd_wall_now_ms();
}

/* The state key of (transform, state id, current window, current key). wenc receives the
 * window encoding the key points into. OUT: coder of the state's values (borrowed). */
static sd_status state_key(sd_ctx *c,
                           const char *state_id,
                           sd_buf *wenc,
                           pb_StateKey *sk,
                           SD_FN(StateKey__BagUserState) * bag,
                           const sd_coder **coder)
{
    op *o = c->op;
    size_t i;
    if (!o->stateful || c->key.ptr == NULL) {
        return sd_fail(c, "transform %s: state %s used outside a stateful process/on_timer call",
                       o->tid, state_id);
    }
    for (i = 0; i < o->n_states; i++) {
        if (strcmp(o->state_ids[i], state_id) == 0) {
            break;
        }
    }
    if (i == o->n_states) {
        return sd_fail(c, "transform %s: no state \"%s\" was declared in sd_pardo_spec", o->tid,
                       state_id);
    }
    *coder = o->state_coders[i];
    if (sd_window_encode(o->in->window_coder, &c->win, wenc, NULL) != SD_OK) {
        return sd_fail(c, "transform %s: cannot encode the window for state %s", o->tid, state_id);
    }
    bag->transform_id = o->tid;
    bag->user_state_id = (char *)state_id;
    bag->window.data = wenc->data;
    bag->window.len = wenc->len;
    bag->key.data = (uint8_t *)c->key.ptr;
    bag->key.len = c->key.len;
    sk->type_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_BAG_USER_STATE;
    sk->bag_user_state = bag;
    return SD_OK;
}

/* The key family state_id's values travel on (runner/urns/state_kinds.h); SD_STATE_KEY_BAG
 * for a state o does not declare (the callers report that). */
static sd_state_key_family key_family(const op *o, const char *state_id)
{
    for (size_t i = 0; i < o->n_states; i++) {
        if (strcmp(o->state_ids[i], state_id) == 0) {
            return sd_user_state_row_of(o->state_infos[i].kind)->key;
        }
    }
    return SD_STATE_KEY_BAG;
}

/* State that is not a bag (map, ordered list: another key family) takes no bag call; only
 * sd_state_clear (everything) applies to it. */
static sd_status refuse_map(sd_ctx *c, const char *state_id, const char *what)
{
    for (size_t i = 0; i < c->op->n_states; i++) {
        if (strcmp(c->op->state_ids[i], state_id) != 0) {
            continue;
        }
        sd_user_state_kind kind = c->op->state_infos[i].kind;
        if (sd_user_state_row_of(kind)->key != SD_STATE_KEY_BAG) {
            return sd_fail(c,
                           "transform %s: state %s is %s state; %s does not apply (use the "
                           "%s state calls of <sundial/sundial.h>)",
                           c->op->tid, state_id, sd_user_state_name(kind), what,
                           sd_user_state_name(kind));
        }
    }
    return SD_OK;
}

/* Whether state_id is not a bag (cleared through sd__ctx_state_call: its whole map or list). */
static bool is_map_state(const op *o, const char *state_id)
{
    return key_family(o, state_id) != SD_STATE_KEY_BAG;
}

sd_status sd_state_read(sd_ctx *c, const char *state_id, sd_iter *values)
{
    if (refuse_map(c, state_id, "sd_state_read") != SD_OK) {
        return SD_EINTERNAL;
    }
    pb_StateKey sk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
    SD_FN(StateKey__BagUserState)
    bag = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
    const sd_coder *coder;
    sd_buf wenc;
    const sd__bundle_io *io = c->op->bp->io;
    sd_buf_init(&wenc, 0);
    sd_status st = state_key(c, state_id, &wenc, &sk, &bag, &coder);
    sd_buf *data = st == SD_OK ? sd_calloc(1, sizeof(*data)) : NULL;
    if (st == SD_OK && (data == NULL || sd_vec_push(&c->reads, &data) != SD_OK)) {
        sd_free(data);
        st = SD_ENOMEM;
    }
    if (st == SD_OK) {
        sd_err e;
        sd_err_clear(&e);
        sd_buf_init(data, 0);
        st =
            io == NULL || io->state_get == NULL ? SD_ESTATE : io->state_get(io->ctx, &sk, data, &e);
        if (st != SD_OK) {
            st = sd_fail(c, "transform %s: reading state %s: %s", c->op->tid, state_id,
                         sd_err_msg(&e));
        } else {
            memset(values, 0, sizeof(*values));
            values->r = sd_reader_make(sd_buf_bytes(data));
            values->stream = true;
            values->elem = coder;
        }
    }
    sd_buf_deinit(&wenc);
    return st;
}

static sd_status state_modify(sd_ctx *c, const char *state_id, bool clear, const sd_bytes *value)
{
    pb_StateKey sk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
    SD_FN(StateKey__BagUserState)
    bag = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
    const sd_coder *coder;
    sd_buf wenc;
    sd_err e;
    const sd__bundle_io *io = c->op->bp->io;
    sd_err_clear(&e);
    sd_buf_init(&wenc, 0);
    sd_status st = state_key(c, state_id, &wenc, &sk, &bag, &coder);
    if (st == SD_OK && clear) {
        st = io == NULL || io->state_clear == NULL ? SD_ESTATE : io->state_clear(io->ctx, &sk, &e);
    }
    if (st == SD_OK && value != NULL) {
        sd_reader r = sd_reader_make(*value);
        if (sd_coder_skip(coder, &r, true, NULL) != SD_OK || !sd_reader_done(&r)) {
            st = sd_fail(c, "transform %s: value for state %s is not one nested %s value",
                         c->op->tid, state_id, coder->urn);
        } else {
            st = io == NULL || io->state_append == NULL
                     ? SD_ESTATE
                     : io->state_append(io->ctx, &sk, *value, &e);
        }
    }
    if (st != SD_OK && c->op->bp->err.code == SD_OK) {
        st = sd_fail(c, "transform %s: writing state %s: %s", c->op->tid, state_id,
                     e.code != SD_OK ? sd_err_msg(&e) : sd_status_str(st));
    }
    sd_buf_deinit(&wenc);
    return st;
}

sd_status sd_state_append(sd_ctx *c, const char *state_id, sd_bytes value)
{
    if (refuse_map(c, state_id, "sd_state_append") != SD_OK) {
        return SD_EINTERNAL;
    }
    return state_modify(c, state_id, false, &value);
}

sd_status sd_state_clear(sd_ctx *c, const char *state_id)
{
    if (is_map_state(c->op, state_id)) {
        /* Map state: the multimap-keys key; ordered list: the whole list (no range). */
        return sd__ctx_state_call(c, state_id, SD__STATE_CLEAR, NULL, true, SD_BYTES_NULL, NULL);
    }
    return state_modify(c, state_id, true, NULL);
}

sd_status sd_state_write(sd_ctx *c, const char *state_id, sd_bytes value)
{
    if (refuse_map(c, state_id, "sd_state_write") != SD_OK) {
        return SD_EINTERNAL;
    }
    return state_modify(c, state_id, true, &value);
}

/* ---- internals for state_kinds.c and sdf.c ------------------------------------------- */

sd__sdf_call *sd__ctx_sdf(const sd_ctx *c)
{
    return c != NULL ? c->sdf : NULL;
}

sd_buf *sd__ctx_temp_buf(sd_ctx *c)
{
    sd_buf *b = sd_calloc(1, sizeof(*b));
    if (b == NULL || sd_vec_push(&c->reads, &b) != SD_OK) {
        sd_free(b);
        return NULL;
    }
    sd_buf_init(b, 0);
    return b;
}

sd_status sd__ctx_state_info(sd_ctx *c, const char *state_id, const sd__state_info **out)
{
    op *o = c->op;
    if (!o->stateful || c->key.ptr == NULL) {
        return sd_fail(c, "transform %s: state %s used outside a stateful process/on_timer call",
                       o->tid, state_id);
    }
    for (size_t i = 0; i < o->n_states; i++) {
        if (strcmp(o->state_ids[i], state_id) == 0) {
            *out = &o->state_infos[i];
            return SD_OK;
        }
    }
    return sd_fail(c, "transform %s: no state \"%s\" was declared in sd_pardo_spec", o->tid,
                   state_id);
}

/* One State API call; range is the ordered-list range (NULL = the whole list). */
static sd_status state_call(sd_ctx *c,
                            const char *state_id,
                            sd__state_op what,
                            const sd_bytes *map_key,
                            bool keys,
                            const int64_t *range,
                            sd_bytes data,
                            sd_bytes *out)
{
    op *o = c->op;
    const sd__state_info *info;
    const sd__bundle_io *io = o->bp->io;
    pb_StateKey sk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
    SD_FN(StateKey__BagUserState)
    bag = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
    SD_FN(StateKey__MultimapUserState)
    mm = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__MULTIMAP_USER_STATE__INIT;
    SD_FN(StateKey__MultimapKeysUserState)
    mk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__MULTIMAP_KEYS_USER_STATE__INIT;
    SD_FN(StateKey__OrderedListUserState)
    ol = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__ORDERED_LIST_USER_STATE__INIT;
    SD_FN(OrderedListRange)
    olr = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ORDERED_LIST_RANGE__INIT;
    sd_buf wenc;
    sd_err e;
    sd_status st = sd__ctx_state_info(c, state_id, &info);
    if (st != SD_OK) {
        return st;
    }
    sd_buf_init(&wenc, 0);
    if (sd_window_encode(o->in->window_coder, &c->win, &wenc, NULL) != SD_OK) {
        sd_buf_deinit(&wenc);
        return sd_fail(c, "transform %s: cannot encode the window for state %s", o->tid, state_id);
    }
    ProtobufCBinaryData win = { wenc.len, wenc.data };
    ProtobufCBinaryData key = { c->key.len, (uint8_t *)c->key.ptr };
    if (sd_user_state_row_of(info->kind)->key == SD_STATE_KEY_ORDERED_LIST) {
        ol.transform_id = o->tid;
        ol.user_state_id = (char *)state_id;
        ol.window = win;
        ol.key = key;
        if (range != NULL) {
            olr.start = range[0];
            olr.end = range[1];
            ol.range = &olr;
        }
        sk.type_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ORDERED_LIST_USER_STATE;
        sk.ordered_list_user_state = &ol;
    } else if (keys) {
        mk.transform_id = o->tid;
        mk.user_state_id = (char *)state_id;
        mk.window = win;
        mk.key = key;
        sk.type_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_KEYS_USER_STATE;
        sk.multimap_keys_user_state = &mk;
    } else if (map_key != NULL) {
        mm.transform_id = o->tid;
        mm.user_state_id = (char *)state_id;
        mm.window = win;
        mm.key = key;
        mm.map_key.data = (uint8_t *)map_key->ptr;
        mm.map_key.len = map_key->len;
        sk.type_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_USER_STATE;
        sk.multimap_user_state = &mm;
    } else {
        bag.transform_id = o->tid;
        bag.user_state_id = (char *)state_id;
        bag.window = win;
        bag.key = key;
        sk.type_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_BAG_USER_STATE;
        sk.bag_user_state = &bag;
    }
    sd_err_clear(&e);
    if (io == NULL || io->state_get == NULL || io->state_append == NULL ||
        io->state_clear == NULL) {
        st = sd_err_set(&e, SD_ESTATE, "no State API channel in this bundle");
    } else if (what == SD__STATE_GET) {
        sd_buf *b = sd__ctx_temp_buf(c);
        st = b == NULL ? sd_err_set(&e, SD_ENOMEM, "out of memory")
                       : io->state_get(io->ctx, &sk, b, &e);
        if (st == SD_OK && out != NULL) {
            *out = sd_buf_bytes(b);
        }
    } else if (what == SD__STATE_APPEND) {
        st = io->state_append(io->ctx, &sk, data, &e);
    } else {
        st = io->state_clear(io->ctx, &sk, &e);
    }
    sd_buf_deinit(&wenc);
    if (st != SD_OK) {
        return sd_fail(c, "transform %s: state %s: %s", o->tid, state_id, sd_err_msg(&e));
    }
    return SD_OK;
}

sd_status sd__ctx_state_call(sd_ctx *c,
                             const char *state_id,
                             sd__state_op what,
                             const sd_bytes *map_key,
                             bool keys,
                             sd_bytes data,
                             sd_bytes *out)
{
    return state_call(c, state_id, what, map_key, keys, NULL, data, out);
}

sd_status sd__ctx_state_call_range(sd_ctx *c,
                                   const char *state_id,
                                   sd__state_op what,
                                   int64_t start,
                                   int64_t end,
                                   sd_bytes data,
                                   sd_bytes *out)
{
    int64_t range[2] = { start, end };
    return state_call(c, state_id, what, NULL, false, range, data, out);
}

tfam *sd__proc_find_family(op *o, const char *family)
{
    for (size_t i = 0; i < o->n_fams; i++) {
        if (strcmp(o->fams[i].family, family) == 0) {
            return &o->fams[i];
        }
    }
    return NULL;
}

static sd_status
timer_put(sd_ctx *c, const char *family, sd_bytes tag, bool clear, sd_time fire, sd_time hold)
{
    op *o = c->op;
    tfam *f = sd__proc_find_family(o, family);
    if (f == NULL) {
        return sd_fail(c, "transform %s: no timer family \"%s\" was declared in sd_pardo_spec",
                       o->tid, family);
    }
    if (c->key.ptr == NULL) {
        return sd_fail(c, "transform %s: timer %s set outside a keyed process/on_timer call",
                       o->tid, family);
    }
    sd_timer *t = &o->timer;
    t->key = c->key;
    t->tag = tag;
    t->clear = clear;
    t->fire = sd_time_clamp(fire);
    t->hold = sd_time_clamp(hold);
    t->pane = SD_PANE_NO_FIRING;
    sd_status st = sd_windows_set(&t->windows, &c->win, 1);
    if (st == SD_OK) {
        st = sd_timer_encode(f->coder, t, &f->out, NULL);
    }
    if (st != SD_OK) {
        return sd_fail(c, "transform %s: cannot encode timer %s: %s", o->tid, family,
                       sd_status_str(st));
    }
    return SD_OK;
}

sd_status sd_timer_set(sd_ctx *c, const char *family, sd_bytes tag, sd_time fire, sd_time hold)
{
    return timer_put(c, family, tag, false, fire, hold);
}

sd_status sd_timer_clear(sd_ctx *c, const char *family, sd_bytes tag)
{
    return timer_put(c, family, tag, true, 0, 0);
}

/* ---- side inputs ----------------------------------------------------------------------- */

static sd_status side_fetch(sd_ctx *c, size_t index, const sd_bytes *key, sd_iter *values)
{
    op *o = c->op;
    sd__proc *bp = o->bp;
    sd_buf wenc, ck;
    sd_status st;
    if (index >= o->n_sides) {
        return sd_fail(c, "transform %s: side input %zu does not exist (%zu declared)", o->tid,
                       index, o->n_sides);
    }
    side *s = &o->sides[index];
    if (s->multimap != (key != NULL)) {
        return sd_fail(c, "transform %s: side input %zu is %s; use %s", o->tid, index,
                       s->multimap ? "a multimap" : "an iterable",
                       s->multimap ? "sd_side_lookup" : "sd_side_iterable");
    }
    sd_window mw = c->in != NULL ? c->win : sd_window_global();
    sd_window sw = side_window(&s->pc->wf, &mw);
    sd_buf_init(&wenc, 0);
    sd_buf_init(&ck, 0);
    st = sd_window_encode(s->pc->window_coder, &sw, &wenc, NULL);
    if (st == SD_OK) {
        st = sd_buf_printf(&ck, "%s|%zu|", o->tid, index);
    }
    if (st == SD_OK) {
        st = sd_buf_put_lp(&ck, sd_buf_bytes(&wenc));
    }
    if (st == SD_OK && key != NULL) {
        st = sd_buf_append_bytes(&ck, *key);
    }
    sd_buf *data = st == SD_OK ? sd_map_get(&bp->side_cache, sd_buf_bytes(&ck)) : NULL;
    if (st == SD_OK && data == NULL) {
        SD_FN(StateKey) sk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
        SD_FN(StateKey__IterableSideInput)
        it = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__ITERABLE_SIDE_INPUT__INIT;
        SD_FN(StateKey__MultimapSideInput)
        mm = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__MULTIMAP_SIDE_INPUT__INIT;
        if (key != NULL) {
            mm.transform_id = o->tid;
            mm.side_input_id = s->local;
            mm.window.data = wenc.data;
            mm.window.len = wenc.len;
            mm.key.data = (uint8_t *)key->ptr;
            mm.key.len = key->len;
            sk.type_case =
                ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_SIDE_INPUT;
            sk.multimap_side_input = &mm;
        } else {
            it.transform_id = o->tid;
            it.side_input_id = s->local;
            it.window.data = wenc.data;
            it.window.len = wenc.len;
            sk.type_case =
                ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ITERABLE_SIDE_INPUT;
            sk.iterable_side_input = &it;
        }
        data = sd_calloc(1, sizeof(*data));
        if (data == NULL) {
            st = SD_ENOMEM;
        } else if (bp->io == NULL || bp->io->state_get == NULL) {
            sd_free(data);
            data = NULL;
            st = sd_fail(c,
                         "transform %s: side inputs need the state API, which this bundle "
                         "does not have",
                         o->tid);
        } else {
            sd_err e;
            sd_err_clear(&e);
            sd_buf_init(data, 0);
            st = bp->io->state_get(bp->io->ctx, &sk, data, &e);
            if (st != SD_OK) {
                buf_free_value(data);
                data = NULL;
                st = sd_fail(c, "transform %s: reading side input %s: %s", o->tid, s->local,
                             sd_err_msg(&e));
            } else if ((st = sd_map_put(&bp->side_cache, sd_buf_bytes(&ck), data)) != SD_OK) {
                buf_free_value(data);
                data = NULL;
            }
        }
    }
    sd_buf_deinit(&wenc);
    sd_buf_deinit(&ck);
    if (st != SD_OK) {
        return st;
    }
    memset(values, 0, sizeof(*values));
    values->r = sd_reader_make(sd_buf_bytes(data));
    values->stream = true;
    values->elem = s->multimap ? s->pc->coder->components[1] : s->pc->coder;
    return SD_OK;
}

sd_status sd_side_iterable(sd_ctx *c, size_t index, sd_iter *values)
{
    return side_fetch(c, index, NULL, values);
}

sd_status sd_side_lookup(sd_ctx *c, size_t index, sd_bytes key, sd_iter *values)
{
    return side_fetch(c, index, &key, values);
}

void sd__proc_drop_reads(sd_ctx *c)
{
    for (size_t i = 0; i < c->reads.len; i++) {
        buf_free_value(*SD_VEC_AT(&c->reads, sd_buf *, i));
    }
    sd_vec_reset(&c->reads);
}
