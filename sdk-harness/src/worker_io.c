/*
 * Sundial C SDK: the worker's data and state streams, and the I/O a bundle runs over.
 *
 * Sending. Every outgoing message is packed by its producer (a bundle thread or the loop) and
 * queued as a send task with sd_rpc_run_on_loop; the loop runs tasks in submission order, so a
 * bundle's data, timers and is_last markers precede its ProcessBundleResponse. Data and state
 * streams are opened per runner URL, each on its first use (sd__worker_get_stream), and kept:
 * the data stream when a bundle that reads or writes it starts, the state stream with the
 * first state request, each on the endpoint its descriptor names.
 *
 * Receiving (loop thread). Data and timer chunks go to the inbox of their instruction, opened
 * on sight if the ProcessBundle request has not arrived yet; state responses complete the
 * waiter of their request id. Both happen under w->mu with a broadcast on w->cv.
 *
 * Bundle side (bundle thread). sd__worker_bundle_io gives the processor its sd__bundle_io:
 * state get sends a StateRequest and waits on a waiter on the bundle's own stack (it follows
 * continuation tokens until the value is whole; bag user state it read is kept for the bundle
 * with the writes since, so a second read costs no round trip); append and clear go out
 * without waiting, settled before the next read that goes to the runner and before the
 * bundle answers (sd__worker_state_settle); data and timers become
 * Elements on the data stream, and logs go to the logging stream.
 *
 * A data, state or logging stream that fails while the worker is not stopping shuts the
 * worker down; sd__worker_on_aux_close also counts every close, since the worker is freed
 * only once its last stream has closed.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/transport/rpc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/sdf_int.h"
#include "sdk-harness/src/worker_int.h"

/* ================================================================ loop-side sending */

typedef struct send_task {
    sd__worker *w;
    send_kind kind;
    char *url;
    sd_buf bytes;
} send_task;

static void on_data_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx);
static void on_state_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx);

/* The chan of a runner URL, made on first use (no stream open yet). Loop thread. */
static chan *chan_for(sd__worker *w, const char *url, sd_err *err)
{
    for (size_t i = 0; i < w->chans.len; i++) {
        chan *c = *SD_VEC_AT(&w->chans, chan *, i);
        if (strcmp(c->url, url) == 0) {
            return c;
        }
    }
    chan *c = sd_calloc(1, sizeof(*c));
    if (c == NULL || (c->url = sd_strdup(url)) == NULL) {
        sd_free(c);
        sd_err_set(err, SD_ENOMEM, "out of memory");
        return NULL;
    }
    /* The runner's data and state often share the control endpoint: one channel (one
     * connection, no second handshake) carries every stream then. */
    c->borrowed = w->ctl_ch != NULL && w->control_url != NULL && strcmp(url, w->control_url) == 0;
    if (c->borrowed) {
        c->ch = w->ctl_ch;
    } else if (sd__rt_channel_take(w->rt, url, &c->ch, err) != SD_OK) {
        sd_free(c->url);
        sd_free(c);
        return NULL;
    }
    if (sd_vec_push(&w->chans, &c) != SD_OK) {
        if (!c->borrowed) {
            sd_rpc_channel_destroy(c->ch);
        }
        sd_free(c->url);
        sd_free(c);
        sd_err_set(err, SD_ENOMEM, "out of memory");
        return NULL;
    }
    return c;
}

/*
 * The data (kind SEND_DATA) or state (SEND_STATE) stream to url ("" or NULL: the control
 * endpoint), opened on first use. Only the stream asked for is opened: a runner may serve Data
 * and State on different servers (Beam's Java runners do), and a server that does not serve a
 * service refuses its stream, which would shut the worker down. Loop thread.
 */
sd_rpc_stream *sd__worker_get_stream(sd__worker *w, const char *url, send_kind kind, sd_err *err)
{
    if (url == NULL || url[0] == '\0') {
        url = w->control_url;
    }
    chan *c = chan_for(w, url, err);
    if (c == NULL) {
        return NULL;
    }
    bool data = kind == SEND_DATA;
    sd_rpc_stream **slot = data ? &c->data : &c->state;
    if (*slot == NULL) {
        sd_rpc_metadata md = { "worker_id", w->id };
        sd_rpc_stream_handler h = { data ? on_data_msg : on_state_msg, sd__worker_on_aux_close, w };
        if (sd_rpc_stream_open(c->ch, data ? SD_PATH_DATA : SD_PATH_STATE, &md, 1, &h, slot, err) !=
            SD_OK) {
            *slot = NULL;
            return NULL;
        }
        w->open_streams++;
    }
    return *slot;
}

static void send_task_run(void *arg)
{
    send_task *t = arg;
    sd__worker *w = t->w;
    sd_err err;
    sd_err_clear(&err);
    if (!w->stopping) {
        sd_rpc_stream *s = NULL;
        if (t->kind == SEND_CONTROL) {
            s = w->ctl;
        } else if (t->kind == SEND_LOG) {
            s = w->log;
        } else {
            s = sd__worker_get_stream(w, t->url, t->kind, &err);
        }
        if (s == NULL || sd_rpc_stream_send(s, sd_buf_bytes(&t->bytes)) != SD_OK) {
            if (t->kind != SEND_LOG) {
                SD_WARN("sdk", "worker %s: cannot send on a %s stream%s%s", w->id,
                        t->kind == SEND_CONTROL ? "control"
                        : t->kind == SEND_DATA  ? "data"
                                                : "state",
                        err.code != SD_OK ? ": " : "", err.code != SD_OK ? sd_err_msg(&err) : "");
            }
        }
    }
    sd_buf_deinit(&t->bytes);
    sd_free(t->url);
    sd_free(t);
}

/* Queue bytes (taken) for sending on the loop. From any thread. */
sd_status sd__worker_queue_send(sd__worker *w, send_kind kind, const char *url, sd_buf *bytes)
{
    send_task *t = sd_calloc(1, sizeof(*t));
    if (t == NULL) {
        return SD_ENOMEM;
    }
    t->w = w;
    t->kind = kind;
    t->url = url != NULL ? sd_strdup(url) : NULL;
    t->bytes = *bytes;
    sd_buf_init(bytes, 0);
    /* A bundle's response is sent by its thread itself when the loop is idle (run_soon): the
     * bundle thread holds no lock then. Data, state and log sends may come from code that
     * does, so they always go through the loop. */
    sd_status st = kind == SEND_CONTROL ? sd_rpc_run_soon(w->rpc, send_task_run, t)
                                        : sd_rpc_run_on_loop(w->rpc, send_task_run, t);
    if (st != SD_OK) {
        sd_buf_deinit(&t->bytes);
        sd_free(t->url);
        sd_free(t);
    }
    return st;
}

/* ================================================================ inbound data and state */

void sd__worker_inbox_add(sd__worker *w, const pb_Elements *el, const char *instruction)
{
    pthread_mutex_lock(&w->mu);
    /* A message's timers go before its data (as Beam's Python SDK files them): the runner
     * fired them before the data that travels with them arrived, so a timer must see its key's
     * state before those elements, and must not fire after one of them reset it. */
    size_t total = el->n_data + el->n_timers;
    for (size_t i = 0; i < total; i++) {
        bool timer = i < el->n_timers;
        const char *instr = instruction != NULL ? instruction
                            : timer             ? el->timers[i]->instruction_id
                                                : el->data[i - el->n_timers]->instruction_id;
        inbox *ib = sd_map_get_str(&w->inboxes, instr);
        if (ib == NULL) {
            ib = sd_calloc(1, sizeof(*ib));
            if (ib == NULL || sd_map_put_str(&w->inboxes, instr, ib) != SD_OK) {
                sd_free(ib);
                /* Nowhere to note the loss for this instruction: the worker's bundles fail. */
                SD_WARN("sdk", "worker %s: out of memory filing data for %s", w->id, instr);
                w->inbox_lost = true;
                continue;
            }
        }
        chunk *c = sd_calloc(1, sizeof(*c));
        if (c == NULL) {
            ib->lost = true;
            continue;
        }
        c->timer = timer;
        if (timer) {
            const pb_Elements_Timers *t = el->timers[i];
            c->tid = sd_strdup(t->transform_id);
            c->family = sd_strdup(t->timer_family_id);
            c->is_last = t->is_last;
            c->data = sd_memdup(t->timers.data, t->timers.len);
            c->len = t->timers.len;
        } else {
            const pb_Elements_Data *d = el->data[i - el->n_timers];
            c->tid = sd_strdup(d->transform_id);
            c->is_last = d->is_last;
            c->data = sd_memdup(d->data.data, d->data.len);
            c->len = d->data.len;
        }
        if (c->tid == NULL || (timer && c->family == NULL) || (c->len > 0 && c->data == NULL)) {
            sd__worker_chunk_destroy(c);
            ib->lost = true;
            continue;
        }
        if (ib->tail != NULL) {
            ib->tail->next = c;
        } else {
            ib->head = c;
        }
        ib->tail = c;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void on_data_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    sd__worker *w = ctx;
    (void)s;
    pb_Elements *el = FNF(elements__unpack)(NULL, msg.len, msg.ptr);
    if (el == NULL) {
        SD_WARN("sdk", "worker %s: malformed Elements message ignored", w->id);
        return;
    }
    sd__worker_inbox_add(w, el, NULL);
    FNF(elements__free_unpacked)(el, NULL);
}

static void on_state_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    sd__worker *w = ctx;
    (void)s;
    pb_StateResponse *r = FNF(state_response__unpack)(NULL, msg.len, msg.ptr);
    if (r == NULL) {
        SD_WARN("sdk", "worker %s: malformed StateResponse ignored", w->id);
        return;
    }
    pthread_mutex_lock(&w->mu);
    waiter *wt = sd_map_take(&w->waiters, sd_bytes_str(r->id));
    if (wt != NULL) {
        if (r->error != NULL && r->error[0] != '\0') {
            wt->failed = true;
            snprintf(wt->error, sizeof(wt->error), "%s", r->error);
        } else if (r->response_case == FNE(STATE_RESPONSE__RESPONSE_GET) && r->get != NULL) {
            if (sd_buf_append(&wt->data, r->get->data.data, r->get->data.len) != SD_OK ||
                sd_buf_append(&wt->token, r->get->continuation_token.data,
                              r->get->continuation_token.len) != SD_OK) {
                wt->failed = true;
                snprintf(wt->error, sizeof(wt->error), "out of memory");
            }
        }
        wt->done = true;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    FNF(state_response__free_unpacked)(r, NULL);
}

void sd__worker_on_aux_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    sd__worker *w = ctx;
    const char *which = w->log == s ? "logging" : "data/state";
    for (size_t i = 0; i < w->chans.len; i++) {
        chan *c = *SD_VEC_AT(&w->chans, chan *, i);
        which = c->data == s ? "data" : c->state == s ? "state" : which;
    }
    for (size_t i = 0; i < w->chans.len; i++) {
        chan *c = *SD_VEC_AT(&w->chans, chan *, i);
        if (c->data == s) {
            c->data = NULL;
        }
        if (c->state == s) {
            c->state = NULL;
        }
    }
    if (w->log == s) {
        w->log = NULL;
    }
    w->open_streams--;
    if (!w->stopping && code != SD_RPC_OK) {
        char why[512];
        snprintf(why, sizeof(why), "a %s stream closed: %s", which, message);
        sd__worker_shutdown(w, why);
    }
    sd__worker_maybe_finish(w);
}

/* ================================================================ bundle-side I/O */

/* Send req with wt as its waiter (registered under id, which must outlive the answer). */
static sd_status
state_send(bundle *b, pb_StateRequest *req, waiter *wt, char *id, size_t id_size, sd_err *err)
{
    sd__worker *w = b->w;
    sd_buf bytes;
    pthread_mutex_lock(&w->mu);
    snprintf(id, id_size, "s%ld", ++w->next_id);
    bool dead = w->dead;
    sd_status st = dead ? SD_ECANCELED : sd_map_put_str(&w->waiters, id, wt);
    pthread_mutex_unlock(&w->mu);
    if (st != SD_OK) {
        return sd_err_set(err, st, "state request: worker %s is %s", w->id,
                          dead ? "shutting down" : "out of memory");
    }
    req->id = id;
    req->instruction_id = b->instruction;
    sd_buf_init(&bytes, 0);
    st = sd__worker_pack(&req->base, &bytes);
    if (st == SD_OK) {
        st = sd__worker_queue_send(w, SEND_STATE, b->state_url, &bytes);
    }
    sd_buf_deinit(&bytes);
    if (st != SD_OK) {
        pthread_mutex_lock(&w->mu);
        sd_map_take(&w->waiters, sd_bytes_str(id));
        pthread_mutex_unlock(&w->mu);
        return sd_err_set(err, st, "state request: cannot queue it");
    }
    return SD_OK;
}

/* Wait for wt's answer (SD_EIO when it failed or the worker went away first). */
static sd_status state_wait(bundle *b, waiter *wt, const char *id, sd_err *err)
{
    sd__worker *w = b->w;
    pthread_mutex_lock(&w->mu);
    while (!wt->done && !w->dead) {
        pthread_cond_wait(&w->cv, &w->mu);
    }
    if (!wt->done) {
        sd_map_take(&w->waiters, sd_bytes_str(id));
        wt->failed = true;
        snprintf(wt->error, sizeof(wt->error), "worker shut down");
    }
    pthread_mutex_unlock(&w->mu);
    if (wt->failed) {
        return sd_err_set(err, SD_EIO, "state request failed: %s", wt->error);
    }
    return SD_OK;
}

static sd_status bundle_state(bundle *b, pb_StateRequest *req, waiter *wt, sd_err *err)
{
    char id[64];
    sd_status st = state_send(b, req, wt, id, sizeof(id), err);
    return st == SD_OK ? state_wait(b, wt, id, err) : st;
}

/* A write in flight: its waiter and the id it is registered under. */
typedef struct sd__state_write {
    waiter wt;
    char id[64];
} sd__state_write;

static void cached_free(void *v)
{
    sd_buf *value = v;
    sd_buf_deinit(value);
    sd_free(value);
}

void sd__worker_state_init(bundle *b)
{
    sd_vec_init(&b->writes, sizeof(sd__state_write *));
    sd_map_init(&b->state_cache, cached_free);
    sd_buf_init(&b->token, 0);
}

void sd__worker_state_deinit(bundle *b)
{
    sd_vec_deinit(&b->writes);
    sd_map_deinit(&b->state_cache);
    sd_buf_deinit(&b->token);
}

static _Atomic uint64_t g_state_gets;

uint64_t sd__worker_state_gets_total(void)
{
    return g_state_gets;
}

sd_status sd__worker_state_settle(bundle *b, sd_err *err)
{
    sd_status st = SD_OK;
    for (size_t i = 0; i < b->writes.len; i++) {
        sd__state_write *sw = *SD_VEC_AT(&b->writes, sd__state_write *, i);
        sd_err e;
        sd_err_clear(&e);
        sd_status one = state_wait(b, &sw->wt, sw->id, &e);
        if (one != SD_OK && st == SD_OK) {
            st = sd_err_set(err, one, "%s", sd_err_msg(&e));
        }
        sd_buf_deinit(&sw->wt.data);
        sd_buf_deinit(&sw->wt.token);
        sd_free(sw);
    }
    b->writes.len = 0;
    return st;
}

/* Send a write without waiting for its answer (settled later: see bundle). */
static sd_status state_write(bundle *b, pb_StateRequest *req, sd_err *err)
{
    if (b->writes.len >= SD_WORKER_WRITES_MAX) {
        sd_status st = sd__worker_state_settle(b, err);
        if (st != SD_OK) {
            return st;
        }
    }
    sd__state_write *sw = sd_calloc(1, sizeof(*sw));
    if (sw == NULL || sd_vec_reserve(&b->writes, b->writes.len + 1) != SD_OK) {
        sd_free(sw);
        return sd_err_set(err, SD_ENOMEM, "state request: out of memory");
    }
    sd_status st = state_send(b, req, &sw->wt, sw->id, sizeof(sw->id), err);
    if (st != SD_OK) {
        sd_free(sw);
        return st;
    }
    return sd_vec_push(&b->writes, &sw); /* room reserved above */
}

/* Whether key is bag user state (value, bag and combining state: the kinds kept per bundle);
 * then packed holds its bytes, the cache's key. */
static bool cacheable(const pb_StateKey *key, sd_buf *packed)
{
    return key->type_case == FNE(STATE_KEY__TYPE_BAG_USER_STATE) &&
           sd__worker_pack(&key->base, packed) == SD_OK;
}

static sd_status io_state_get(void *ctx, const pb_StateKey *key, sd_buf *out, sd_err *err)
{
    bundle *b = ctx;
    sd_buf token, packed;
    sd_buf_init(&packed, 0);
    bool cache = cacheable(key, &packed);
    if (cache && b->shared) {
        if (sd__scache_get(b->w->scache, b->desc_id, sd_buf_bytes(&b->token), sd_buf_bytes(&packed),
                           out)) {
            sd_buf_deinit(&packed);
            return SD_OK;
        }
    } else if (cache) {
        sd_buf *hit = sd_map_get(&b->state_cache, sd_buf_bytes(&packed));
        if (hit != NULL) {
            sd_buf_deinit(&packed);
            return sd_buf_append_bytes(out, sd_buf_bytes(hit));
        }
    }
    /* A read goes to the runner after every write before it has been answered. */
    sd_status st = sd__worker_state_settle(b, err);
    size_t start = out->len;
    sd_buf_init(&token, 0);
    for (int page = 0; st == SD_OK; page++) {
        pb_StateRequest req = FNE(STATE_REQUEST__INIT);
        SD_FN(StateGetRequest) get = FNE(STATE_GET_REQUEST__INIT);
        waiter wt;
        memset(&wt, 0, sizeof(wt));
        sd_buf_init(&wt.data, 0);
        sd_buf_init(&wt.token, 0);
        get.continuation_token.data = token.data;
        get.continuation_token.len = token.len;
        req.state_key = (pb_StateKey *)key;
        req.request_case = FNE(STATE_REQUEST__REQUEST_GET);
        req.get = &get;
        g_state_gets++;
        st = bundle_state(b, &req, &wt, err);
        if (st == SD_OK) {
            st = sd_buf_append_bytes(out, sd_buf_bytes(&wt.data));
            sd_buf_reset(&token);
            if (st == SD_OK) {
                st = sd_buf_append_bytes(&token, sd_buf_bytes(&wt.token));
            }
        }
        sd_buf_deinit(&wt.data);
        sd_buf_deinit(&wt.token);
        if (st == SD_OK && token.len == 0) {
            break;
        }
    }
    sd_buf_deinit(&token);
    if (st == SD_OK && cache && b->shared) {
        sd__scache_update(
            b->w->scache, b->desc_id, sd_buf_bytes(&b->token), sd_buf_bytes(&packed), SD_SCACHE_PUT,
            sd_bytes_make(out->len > start ? out->data + start : NULL, out->len - start));
    } else if (st == SD_OK && cache) {
        /* Kept for the bundle; without memory for it the next read asks again. */
        sd_buf *value = sd_calloc(1, sizeof(*value));
        if (value != NULL) {
            sd_buf_init(value, 0);
            if (sd_buf_append(value, out->data + start, out->len - start) != SD_OK ||
                sd_map_put(&b->state_cache, sd_buf_bytes(&packed), value) != SD_OK) {
                cached_free(value);
            }
        }
    }
    sd_buf_deinit(&packed);
    return st;
}

/* After a write to key: the cached value follows it (append: data added; clear: empty), or
 * is dropped when it cannot. */
static void cache_follow(bundle *b, const pb_StateKey *key, const sd_bytes *append)
{
    sd_buf packed;
    sd_buf_init(&packed, 0);
    if (b->shared && cacheable(key, &packed)) {
        sd__scache_update(b->w->scache, b->desc_id, sd_buf_bytes(&b->token), sd_buf_bytes(&packed),
                          append != NULL ? SD_SCACHE_APPEND : SD_SCACHE_CLEAR,
                          append != NULL ? *append : SD_BYTES_NULL);
    } else if (cacheable(key, &packed)) {
        sd_buf *value = sd_map_get(&b->state_cache, sd_buf_bytes(&packed));
        if (append == NULL && value == NULL) {
            /* Cleared: known empty from now on. */
            value = sd_calloc(1, sizeof(*value));
            if (value != NULL) {
                sd_buf_init(value, 0);
                if (sd_map_put(&b->state_cache, sd_buf_bytes(&packed), value) != SD_OK) {
                    cached_free(value);
                }
            }
        } else if (value != NULL) {
            if (append == NULL) {
                sd_buf_reset(value);
            } else if (sd_buf_append_bytes(value, *append) != SD_OK) {
                sd_map_remove(&b->state_cache, sd_buf_bytes(&packed));
            }
        }
    }
    sd_buf_deinit(&packed);
}

static sd_status io_state_append(void *ctx, const pb_StateKey *key, sd_bytes data, sd_err *err)
{
    bundle *b = ctx;
    pb_StateRequest req = FNE(STATE_REQUEST__INIT);
    SD_FN(StateAppendRequest) app = FNE(STATE_APPEND_REQUEST__INIT);
    app.data.data = (uint8_t *)data.ptr;
    app.data.len = data.len;
    req.state_key = (pb_StateKey *)key;
    req.request_case = FNE(STATE_REQUEST__REQUEST_APPEND);
    req.append = &app;
    sd_status st = state_write(b, &req, err);
    if (st == SD_OK) {
        cache_follow(b, key, &data);
    }
    return st;
}

static sd_status io_state_clear(void *ctx, const pb_StateKey *key, sd_err *err)
{
    bundle *b = ctx;
    pb_StateRequest req = FNE(STATE_REQUEST__INIT);
    SD_FN(StateClearRequest) clr = FNE(STATE_CLEAR_REQUEST__INIT);
    req.state_key = (pb_StateKey *)key;
    req.request_case = FNE(STATE_REQUEST__REQUEST_CLEAR);
    req.clear = &clr;
    sd_status st = state_write(b, &req, err);
    if (st == SD_OK) {
        cache_follow(b, key, NULL);
    }
    return st;
}

static sd_status
io_data(void *ctx, const char *transform_id, sd_bytes data, bool is_last, sd_err *err)
{
    bundle *b = ctx;
    pb_Elements el = FNE(ELEMENTS__INIT);
    pb_Elements_Data d = FNE(ELEMENTS__DATA__INIT);
    pb_Elements_Data *dp = &d;
    sd_buf bytes;
    if (data.len == 0 && !is_last) {
        return SD_OK;
    }
    d.instruction_id = b->instruction;
    d.transform_id = (char *)transform_id;
    d.data.data = (uint8_t *)data.ptr;
    d.data.len = data.len;
    d.is_last = is_last;
    el.n_data = 1;
    el.data = &dp;
    sd_buf_init(&bytes, 0);
    sd_status st = sd__worker_pack(&el.base, &bytes);
    if (st == SD_OK) {
        st = sd__worker_queue_send(b->w, SEND_DATA, b->data_url, &bytes);
    }
    sd_buf_deinit(&bytes);
    return st != SD_OK ? sd_err_set(err, st, "data for %s: cannot queue it", transform_id) : SD_OK;
}

static sd_status io_timers(void *ctx,
                           const char *transform_id,
                           const char *family,
                           sd_bytes data,
                           bool is_last,
                           sd_err *err)
{
    bundle *b = ctx;
    pb_Elements el = FNE(ELEMENTS__INIT);
    pb_Elements_Timers t = FNE(ELEMENTS__TIMERS__INIT);
    pb_Elements_Timers *tp = &t;
    sd_buf bytes;
    t.instruction_id = b->instruction;
    t.transform_id = (char *)transform_id;
    t.timer_family_id = (char *)family;
    t.timers.data = (uint8_t *)data.ptr;
    t.timers.len = data.len;
    t.is_last = is_last;
    el.n_timers = 1;
    el.timers = &tp;
    sd_buf_init(&bytes, 0);
    sd_status st = sd__worker_pack(&el.base, &bytes);
    if (st == SD_OK) {
        st = sd__worker_queue_send(b->w, SEND_DATA, b->data_url, &bytes);
    }
    sd_buf_deinit(&bytes);
    return st != SD_OK
               ? sd_err_set(err, st, "timers for %s/%s: cannot queue them", transform_id, family)
               : SD_OK;
}

static void io_log(void *ctx, const char *transform_id, const char *msg)
{
    bundle *b = ctx;
    pb_LogEntry e = FNE(LOG_ENTRY__INIT);
    pb_LogEntry_List l = FNE(LOG_ENTRY__LIST__INIT);
    pb_LogEntry *ep = &e;
    sd_buf bytes;
    e.severity = FNE(LOG_ENTRY__SEVERITY__ENUM__INFO);
    e.message = (char *)msg;
    e.instruction_id = b->instruction;
    e.transform_id = (char *)transform_id;
    l.n_log_entries = 1;
    l.log_entries = &ep;
    sd_buf_init(&bytes, 0);
    if (sd__worker_pack(&l.base, &bytes) == SD_OK) {
        (void)sd__worker_queue_send(b->w, SEND_LOG, NULL, &bytes);
    }
    sd_buf_deinit(&bytes);
}

sd__bundle_io sd__worker_bundle_io(bundle *b)
{
    sd__bundle_io io = { io_state_get, io_state_append, io_state_clear, io_data, io_log, b,
                         io_timers };
    return io;
}
