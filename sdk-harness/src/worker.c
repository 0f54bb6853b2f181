/*
 * Sundial C SDK: the Fn API worker — a client of a runner's Control, Data, State and Logging
 * services that runs bundles with the bundle processor.
 *
 * Threads. Streams live on the runtime's loop thread; bundles run on their own threads (one
 * detached thread per ProcessBundle instruction), because a DoFn may block on the State API
 * and the state response arrives on the loop thread (running DoFns there would deadlock).
 *
 *   loop thread                                   bundle thread (one per instruction)
 *   -----------                                   ------------------------------------
 *   Control: ProcessBundle -> spawn ------------> fetch descriptor (unary via loop, wait)
 *   Data in: chunk -> inbox[instruction] -------> pop chunks, feed the processor
 *   State in: response -> waiter[id] ----------> state_get: send via loop, wait
 *   send tasks (FIFO) <------------------------- outputs, is_last, then the response
 *
 * Everything shared between the two sides sits under one mutex (w->mu) with one condition
 * variable broadcast on every change: inboxes, state waiters, the descriptor cache, idle
 * processors, the live-bundle count. Bundle threads never touch a stream; they queue send
 * tasks with sd_rpc_run_on_loop, which runs them in submission order, so a bundle's data and
 * is_last markers always precede its ProcessBundleResponse.
 *
 * Data may arrive before the ProcessBundle request that it belongs to (different streams):
 * chunks for an unknown instruction open its inbox, and the bundle thread finds them there.
 *
 * Shutdown: when the runner closes the control stream, or StopWorker arrives, the worker
 * cancels its streams, fails every state waiter and inbox (bundle threads end with an error
 * that nobody reads), and frees itself on the loop thread once the last stream has closed and
 * the last bundle thread has left.
 *
 * Other instructions: progress answers with no metrics, split answers with an empty split
 * (the runner then keeps the bundle whole), finalize and monitoring-info requests answer
 * empty, and anything unknown gets an error response naming the request.
 */
#include "sdk-harness/src/sdk_int.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/transport/rpc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/sdf_int.h"

#define FNF(x) org__apache__beam__model__fn_execution__v1__##x
#define FNE(x) ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__##x

typedef struct chunk {
    struct chunk *next;
    bool timer;
    bool is_last;
    char *tid;
    char *family;
    uint8_t *data;
    size_t len;
} chunk;

typedef struct inbox {
    chunk *head;
    chunk *tail;
} inbox;

typedef struct waiter {
    bool done;
    bool failed;
    char error[512];
    sd_buf data;
    sd_buf token;
} waiter;

typedef struct chan {
    char *url;
    sd_rpc_channel *ch;
    sd_rpc_stream *data;
    sd_rpc_stream *state;
} chan;

typedef struct idle_list {
    sd_vec procs; /* sd__proc * */
} idle_list;

struct sd__worker {
    sd__rt *rt;
    sd_rpc *rpc;
    char *id;
    char *control_url;
    char *logging_url;
    void (*on_done)(void *ctx, const char *why);
    void *done_ctx;
    /* Loop thread only. */
    sd_rpc_channel *ctl_ch;
    sd_rpc_stream *ctl;
    sd_rpc_channel *log_ch;
    sd_rpc_stream *log;
    sd_vec chans; /* chan * */
    int open_streams;
    bool stopping;
    bool finished;
    char why[512];
    /* Shared, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool dead;
    sd_map inboxes; /* instruction -> inbox * */
    sd_map waiters; /* state request id -> waiter * (borrowed: on the bundle's stack) */
    sd_map descs;   /* descriptor id -> ProcessBundleDescriptor * */
    sd_map idle;    /* descriptor id -> idle_list * */
    sd_map running; /* instruction -> sd__proc * of bundles in progress (borrowed) */
    long next_id;
    int live_bundles;
    int finish_tasks; /* finish_task()s queued on the loop and not yet run (under mu) */
};

static void maybe_finish(sd__worker *w);

/* ================================================================ small helpers */

static void chunk_free(chunk *c)
{
    if (c != NULL) {
        sd_free(c->tid);
        sd_free(c->family);
        sd_free(c->data);
        sd_free(c);
    }
}

static void inbox_free(void *v)
{
    inbox *ib = v;
    chunk *c = ib->head;
    while (c != NULL) {
        chunk *n = c->next;
        chunk_free(c);
        c = n;
    }
    sd_free(ib);
}

static void desc_free(void *v)
{
    FNF(process_bundle_descriptor__free_unpacked)(v, NULL);
}

static void idle_free(void *v)
{
    idle_list *l = v;
    for (size_t i = 0; i < l->procs.len; i++) {
        sd__proc_destroy(*SD_VEC_AT(&l->procs, sd__proc *, i));
    }
    sd_vec_deinit(&l->procs);
    sd_free(l);
}

static sd_status pack(const ProtobufCMessage *m, sd_buf *out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    sd_buf_reset(out);
    sd_status st = sd_buf_reserve(out, n > 0 ? n : 1);
    if (st == SD_OK) {
        out->len = protobuf_c_message_pack(m, out->data);
    }
    return st;
}

/* ================================================================ loop-side sending */

typedef enum send_kind { SEND_CONTROL, SEND_DATA, SEND_STATE, SEND_LOG } send_kind;

typedef struct send_task {
    sd__worker *w;
    send_kind kind;
    char *url;
    sd_buf bytes;
} send_task;

static void on_data_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx);
static void on_state_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx);
static void on_aux_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx);

static void worker_shutdown(sd__worker *w, const char *why);

static chan *get_chan(sd__worker *w, const char *url, sd_err *err)
{
    if (url == NULL || url[0] == '\0') {
        url = w->control_url;
    }
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
    sd_rpc_metadata md = { "worker_id", w->id };
    sd_rpc_stream_handler dh = { on_data_msg, on_aux_close, w };
    sd_rpc_stream_handler sh = { on_state_msg, on_aux_close, w };
    if (sd_rpc_channel_create(w->rpc, url, &c->ch, err) != SD_OK) {
        sd_free(c->url);
        sd_free(c);
        return NULL;
    }
    if (sd_rpc_stream_open(c->ch, SD_PATH_DATA, &md, 1, &dh, &c->data, err) == SD_OK) {
        w->open_streams++;
    }
    if (sd_rpc_stream_open(c->ch, SD_PATH_STATE, &md, 1, &sh, &c->state, err) == SD_OK) {
        w->open_streams++;
    }
    if (sd_vec_push(&w->chans, &c) != SD_OK) {
        sd_rpc_channel_destroy(c->ch);
        sd_free(c->url);
        sd_free(c);
        sd_err_set(err, SD_ENOMEM, "out of memory");
        return NULL;
    }
    return c;
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
            chan *c = get_chan(w, t->url, &err);
            if (c != NULL) {
                s = t->kind == SEND_DATA ? c->data : c->state;
            }
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
static sd_status queue_send(sd__worker *w, send_kind kind, const char *url, sd_buf *bytes)
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
    sd_status st = sd_rpc_run_on_loop(w->rpc, send_task_run, t);
    if (st != SD_OK) {
        sd_buf_deinit(&t->bytes);
        sd_free(t->url);
        sd_free(t);
    }
    return st;
}

/* ================================================================ inbound data and state */

static void on_data_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    sd__worker *w = ctx;
    (void)s;
    pb_Elements *el = FNF(elements__unpack)(NULL, msg.len, msg.ptr);
    if (el == NULL) {
        SD_WARN("sdk", "worker %s: malformed Elements message ignored", w->id);
        return;
    }
    pthread_mutex_lock(&w->mu);
    size_t total = el->n_data + el->n_timers;
    for (size_t i = 0; i < total; i++) {
        bool timer = i >= el->n_data;
        const char *instr = timer ? el->timers[i - el->n_data]->instruction_id
                                  : el->data[i]->instruction_id;
        inbox *ib = sd_map_get_str(&w->inboxes, instr);
        if (ib == NULL) {
            ib = sd_calloc(1, sizeof(*ib));
            if (ib == NULL || sd_map_put_str(&w->inboxes, instr, ib) != SD_OK) {
                sd_free(ib);
                continue;
            }
        }
        chunk *c = sd_calloc(1, sizeof(*c));
        if (c == NULL) {
            continue;
        }
        c->timer = timer;
        if (timer) {
            const pb_Elements_Timers *t = el->timers[i - el->n_data];
            c->tid = sd_strdup(t->transform_id);
            c->family = sd_strdup(t->timer_family_id);
            c->is_last = t->is_last;
            c->data = sd_memdup(t->timers.data, t->timers.len);
            c->len = t->timers.len;
        } else {
            const pb_Elements_Data *d = el->data[i];
            c->tid = sd_strdup(d->transform_id);
            c->is_last = d->is_last;
            c->data = sd_memdup(d->data.data, d->data.len);
            c->len = d->data.len;
        }
        if (c->tid == NULL || (c->len > 0 && c->data == NULL)) {
            chunk_free(c);
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

static void on_aux_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    sd__worker *w = ctx;
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
        snprintf(why, sizeof(why), "a data/state stream closed: %s", message);
        worker_shutdown(w, why);
    }
    maybe_finish(w);
}

/* ================================================================ bundle-side I/O */

typedef struct bundle {
    sd__worker *w;
    char *instruction;
    char *desc_id;
    char *data_url;
    char *state_url;
} bundle;

static sd_status bundle_state(bundle *b, pb_StateRequest *req, waiter *wt, sd_err *err)
{
    sd__worker *w = b->w;
    sd_buf bytes;
    char id[64];
    pthread_mutex_lock(&w->mu);
    snprintf(id, sizeof(id), "s%ld", ++w->next_id);
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
    st = pack(&req->base, &bytes);
    if (st == SD_OK) {
        st = queue_send(w, SEND_STATE, b->state_url, &bytes);
    }
    sd_buf_deinit(&bytes);
    pthread_mutex_lock(&w->mu);
    if (st != SD_OK) {
        sd_map_take(&w->waiters, sd_bytes_str(id));
    } else {
        while (!wt->done && !w->dead) {
            pthread_cond_wait(&w->cv, &w->mu);
        }
        if (!wt->done) {
            sd_map_take(&w->waiters, sd_bytes_str(id));
            wt->failed = true;
            snprintf(wt->error, sizeof(wt->error), "worker shut down");
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (st != SD_OK) {
        return sd_err_set(err, st, "state request: cannot queue it");
    }
    if (wt->failed) {
        return sd_err_set(err, SD_EIO, "state request failed: %s", wt->error);
    }
    return SD_OK;
}

static sd_status io_state_get(void *ctx, const pb_StateKey *key, sd_buf *out, sd_err *err)
{
    bundle *b = ctx;
    sd_buf token;
    sd_status st = SD_OK;
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
    return st;
}

static sd_status io_state_append(void *ctx, const pb_StateKey *key, sd_bytes data, sd_err *err)
{
    bundle *b = ctx;
    pb_StateRequest req = FNE(STATE_REQUEST__INIT);
    SD_FN(StateAppendRequest) app = FNE(STATE_APPEND_REQUEST__INIT);
    waiter wt;
    memset(&wt, 0, sizeof(wt));
    app.data.data = (uint8_t *)data.ptr;
    app.data.len = data.len;
    req.state_key = (pb_StateKey *)key;
    req.request_case = FNE(STATE_REQUEST__REQUEST_APPEND);
    req.append = &app;
    sd_status st = bundle_state(b, &req, &wt, err);
    sd_buf_deinit(&wt.data);
    sd_buf_deinit(&wt.token);
    return st;
}

static sd_status io_state_clear(void *ctx, const pb_StateKey *key, sd_err *err)
{
    bundle *b = ctx;
    pb_StateRequest req = FNE(STATE_REQUEST__INIT);
    SD_FN(StateClearRequest) clr = FNE(STATE_CLEAR_REQUEST__INIT);
    waiter wt;
    memset(&wt, 0, sizeof(wt));
    req.state_key = (pb_StateKey *)key;
    req.request_case = FNE(STATE_REQUEST__REQUEST_CLEAR);
    req.clear = &clr;
    sd_status st = bundle_state(b, &req, &wt, err);
    sd_buf_deinit(&wt.data);
    sd_buf_deinit(&wt.token);
    return st;
}

static sd_status io_data(void *ctx, const char *transform_id, sd_bytes data, bool is_last,
                         sd_err *err)
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
    sd_status st = pack(&el.base, &bytes);
    if (st == SD_OK) {
        st = queue_send(b->w, SEND_DATA, b->data_url, &bytes);
    }
    sd_buf_deinit(&bytes);
    return st != SD_OK ? sd_err_set(err, st, "data for %s: cannot queue it", transform_id) : SD_OK;
}

static sd_status io_timers(void *ctx, const char *transform_id, const char *family,
                           sd_bytes data, bool is_last, sd_err *err)
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
    sd_status st = pack(&el.base, &bytes);
    if (st == SD_OK) {
        st = queue_send(b->w, SEND_DATA, b->data_url, &bytes);
    }
    sd_buf_deinit(&bytes);
    return st != SD_OK ? sd_err_set(err, st, "timers for %s/%s: cannot queue them", transform_id,
                                    family)
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
    if (pack(&l.base, &bytes) == SD_OK) {
        (void)queue_send(b->w, SEND_LOG, NULL, &bytes);
    }
    sd_buf_deinit(&bytes);
}

/* ================================================================ descriptors */

typedef struct desc_fetch {
    sd__worker *w;
    char *id;
    bool done;
    char error[512];
} desc_fetch;

static void desc_fetched(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    desc_fetch *f = ctx;
    sd__worker *w = f->w;
    pb_ProcessBundleDescriptor *d = NULL;
    if (code != SD_RPC_OK) {
        snprintf(f->error, sizeof(f->error), "GetProcessBundleDescriptor %s: %s", f->id, message);
    } else if ((d = FNF(process_bundle_descriptor__unpack)(NULL, response.len, response.ptr)) ==
               NULL) {
        snprintf(f->error, sizeof(f->error), "GetProcessBundleDescriptor %s: malformed response",
                 f->id);
    }
    pthread_mutex_lock(&w->mu);
    if (d != NULL) {
        if (sd_map_get_str(&w->descs, f->id) == NULL) {
            if (sd_map_put_str(&w->descs, f->id, d) != SD_OK) {
                desc_free(d);
                snprintf(f->error, sizeof(f->error), "out of memory");
            }
        } else {
            desc_free(d);
        }
    }
    f->done = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void desc_fetch_start(void *arg)
{
    desc_fetch *f = arg;
    sd__worker *w = f->w;
    sd_err err;
    sd_buf bytes;
    SD_FN(GetProcessBundleDescriptorRequest) req = FNE(GET_PROCESS_BUNDLE_DESCRIPTOR_REQUEST__INIT);
    sd_rpc_metadata md = { "worker_id", w->id };
    sd_err_clear(&err);
    sd_buf_init(&bytes, 0);
    req.process_bundle_descriptor_id = f->id;
    sd_status st = w->stopping ? SD_ECANCELED : pack(&req.base, &bytes);
    if (st == SD_OK) {
        st = sd_rpc_unary(w->ctl_ch, SD_PATH_GET_PBD, sd_buf_bytes(&bytes), &md, 1, 60000,
                          desc_fetched, f, &err);
    }
    sd_buf_deinit(&bytes);
    if (st != SD_OK) {
        pthread_mutex_lock(&w->mu);
        snprintf(f->error, sizeof(f->error), "GetProcessBundleDescriptor %s: %s", f->id,
                 err.code != SD_OK ? sd_err_msg(&err) : sd_status_str(st));
        f->done = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

/* The descriptor (borrowed; cached for the worker's life). Blocks on a fetch when needed. */
static const pb_ProcessBundleDescriptor *get_desc(sd__worker *w, const char *id, sd_err *err)
{
    pthread_mutex_lock(&w->mu);
    const pb_ProcessBundleDescriptor *d = sd_map_get_str(&w->descs, id);
    pthread_mutex_unlock(&w->mu);
    if (d != NULL) {
        return d;
    }
    desc_fetch f = { .w = w, .id = (char *)id };
    if (sd_rpc_run_on_loop(w->rpc, desc_fetch_start, &f) != SD_OK) {
        sd_err_set(err, SD_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&w->mu);
    while (!f.done) {
        /* The fetch always completes (the unary callback runs even on shutdown). */
        pthread_cond_wait(&w->cv, &w->mu);
    }
    d = sd_map_get_str(&w->descs, id);
    pthread_mutex_unlock(&w->mu);
    if (d == NULL) {
        sd_err_set(err, SD_EIO, "%s", f.error[0] ? f.error : "descriptor unavailable");
    }
    return d;
}

/* The data and state URLs a descriptor names (the first port's; "" = the control URL). */
static void desc_urls(const pb_ProcessBundleDescriptor *d, const char **data, const char **state)
{
    *data = "";
    *state = d->state_api_service_descriptor != NULL ? d->state_api_service_descriptor->url : "";
    for (size_t i = 0; i < d->n_transforms; i++) {
        const SD_PL(PTransform) *t = d->transforms[i]->value;
        if (t == NULL || t->spec == NULL || t->spec->urn == NULL) {
            continue;
        }
        if (strcmp(t->spec->urn, SD_URN_RUNNER_SOURCE) == 0 ||
            strcmp(t->spec->urn, SD_URN_RUNNER_SINK) == 0) {
            SD_FN(RemoteGrpcPort) *p =
                FNF(remote_grpc_port__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
            if (p != NULL) {
                static _Thread_local char url[256];
                if (p->api_service_descriptor != NULL && p->api_service_descriptor->url != NULL) {
                    snprintf(url, sizeof(url), "%s", p->api_service_descriptor->url);
                    *data = url;
                }
                FNF(remote_grpc_port__free_unpacked)(p, NULL);
                if ((*data)[0] != '\0') {
                    return;
                }
            }
        }
    }
}

/* ================================================================ bundles */

/*
 * DelayedBundleApplications for a bundle's residual roots (splittable DoFn checkpoints and
 * split rests): the element, the requested delay, and the estimator's watermark for every
 * output. One allocation (*mem) holds every message; the pointers borrow from res. NULL when
 * out of memory (the residuals are then not reported and the response carries an error).
 */
static pb_DelayedBundleApplication **residual_roots(const sd__bundle_result *res, void **mem)
{
    typedef SD_FN(BundleApplication) pb_BundleApplication;
    typedef SD_FN(BundleApplication__OutputWatermarksEntry) pb_WmEntry;
    typedef Google__Protobuf__Duration pb_Duration;
    typedef Google__Protobuf__Timestamp pb_Timestamp;
    size_t n = res->residuals.len, n_out = 0;
    for (size_t i = 0; i < n; i++) {
        n_out += ((const sd__residual_root *)sd_vec_at(&res->residuals, i))->n_outputs;
    }
    size_t per = sizeof(pb_DelayedBundleApplication *) + sizeof(pb_DelayedBundleApplication) +
                 sizeof(pb_BundleApplication) + sizeof(pb_Duration) + sizeof(pb_Timestamp);
    uint8_t *m = sd_calloc(1, n * per + n_out * (sizeof(pb_WmEntry) + sizeof(pb_WmEntry *)) + 64);
    if (m == NULL) {
        return NULL;
    }
    *mem = m;
    pb_DelayedBundleApplication **ptrs = sd_calloc(n, sizeof(*ptrs));
    if (ptrs == NULL) {
        return NULL;
    }
    pb_DelayedBundleApplication *dba = (void *)m;
    pb_BundleApplication *ba = (void *)(dba + n);
    pb_Duration *du = (void *)(ba + n);
    pb_Timestamp *ts = (void *)(du + n);
    pb_WmEntry *we = (void *)(ts + n);
    pb_WmEntry **wp = (void *)(we + n_out);
    for (size_t i = 0; i < n; i++) {
        const sd__residual_root *rr = sd_vec_at(&res->residuals, i);
        pb_DelayedBundleApplication d0 = FNE(DELAYED_BUNDLE_APPLICATION__INIT);
        pb_BundleApplication b0 = FNE(BUNDLE_APPLICATION__INIT);
        pb_Duration du0 = GOOGLE__PROTOBUF__DURATION__INIT;
        pb_Timestamp ts0 = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
        dba[i] = d0;
        ba[i] = b0;
        du[i] = du0;
        ts[i] = ts0;
        ba[i].transform_id = rr->transform;
        ba[i].input_id = rr->input;
        ba[i].element.data = rr->element.data;
        ba[i].element.len = rr->element.len;
        if (rr->has_watermark) {
            /* Floor division keeps nanos in [0, 1e9) for times before the epoch. */
            int64_t sec = rr->watermark / 1000, rem = rr->watermark % 1000;
            if (rem < 0) {
                sec--;
                rem += 1000;
            }
            ts[i].seconds = sec;
            ts[i].nanos = (int32_t)(rem * 1000000);
            ba[i].n_output_watermarks = rr->n_outputs;
            ba[i].output_watermarks = wp;
            for (size_t k = 0; k < rr->n_outputs; k++) {
                pb_WmEntry e0 = FNE(BUNDLE_APPLICATION__OUTPUT_WATERMARKS_ENTRY__INIT);
                *we = e0;
                we->key = rr->outputs[k];
                we->value = &ts[i];
                *wp++ = we++;
            }
        }
        if (rr->delay_ms > 0) {
            du[i].seconds = rr->delay_ms / 1000;
            du[i].nanos = (int32_t)((rr->delay_ms % 1000) * 1000000);
            dba[i].requested_time_delay = &du[i];
        }
        dba[i].application = &ba[i];
        ptrs[i] = &dba[i];
    }
    return ptrs;
}

static void respond(sd__worker *w, const char *instruction, const char *error,
                    const sd__bundle_result *res)
{
    pb_InstructionResponse r = FNE(INSTRUCTION_RESPONSE__INIT);
    pb_ProcessBundleResponse pr = FNE(PROCESS_BUNDLE_RESPONSE__INIT);
    pb_MonitoringInfo **mis = NULL;
    pb_MonitoringInfo *mi = NULL;
    SD_PL(MonitoringInfo__LabelsEntry) *labels = NULL;
    SD_PL(MonitoringInfo__LabelsEntry) **lptr = NULL;
    uint8_t *payloads = NULL;
    pb_DelayedBundleApplication **roots = NULL;
    void *roots_mem = NULL;
    sd_buf bytes;
    r.instruction_id = (char *)instruction;
    if (error != NULL) {
        r.error = (char *)error;
    } else {
        size_t n = res != NULL ? res->counters.len : 0;
        if (n > 0) {
            mis = sd_calloc(n, sizeof(*mis));
            mi = sd_calloc(n, sizeof(*mi));
            labels = sd_calloc(3 * n, sizeof(*labels));
            lptr = sd_calloc(3 * n, sizeof(*lptr));
            payloads = sd_calloc(n, 10);
            if (mis == NULL || mi == NULL || labels == NULL || lptr == NULL || payloads == NULL) {
                n = 0;
            }
        }
        for (size_t i = 0; i < n; i++) {
            const sd__counter *c = sd_vec_at(&res->counters, i);
            pb_MonitoringInfo init = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__INIT;
            SD_PL(MonitoringInfo__LabelsEntry) linit =
                ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__LABELS_ENTRY__INIT;
            mi[i] = init;
            mi[i].urn = SD_URN_METRIC_USER_SUM_INT64;
            mi[i].type = SD_URN_METRIC_TYPE_SUM_INT64;
            /* varint payload */
            uint64_t v = (uint64_t)c->value;
            size_t len = 0;
            uint8_t *p = payloads + 10 * i;
            do {
                uint8_t byte = v & 0x7f;
                v >>= 7;
                p[len++] = (uint8_t)(byte | (v ? 0x80 : 0));
            } while (v && len < 10);
            mi[i].payload.data = p;
            mi[i].payload.len = len;
            for (int k = 0; k < 3; k++) {
                labels[3 * i + k] = linit;
                lptr[3 * i + k] = &labels[3 * i + k];
            }
            labels[3 * i].key = SD_LABEL_PTRANSFORM;
            labels[3 * i].value = c->transform;
            labels[3 * i + 1].key = SD_LABEL_NAMESPACE;
            labels[3 * i + 1].value = "sundial";
            labels[3 * i + 2].key = SD_LABEL_NAME;
            labels[3 * i + 2].value = c->name;
            mi[i].n_labels = 3;
            mi[i].labels = &lptr[3 * i];
            mis[i] = &mi[i];
        }
        pr.n_monitoring_infos = n;
        pr.monitoring_infos = mis;
        if (res != NULL && res->residuals.len > 0) {
            roots = residual_roots(res, &roots_mem);
            if (roots != NULL) {
                pr.n_residual_roots = res->residuals.len;
                pr.residual_roots = roots;
            } else {
                /* Never drop a residual silently: fail the bundle instead. */
                r.error = "out of memory while reporting residual roots";
            }
        }
        r.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
        r.process_bundle = &pr;
    }
    sd_buf_init(&bytes, 0);
    if (pack(&r.base, &bytes) == SD_OK) {
        (void)queue_send(w, SEND_CONTROL, NULL, &bytes);
    }
    sd_buf_deinit(&bytes);
    sd_free(mis);
    sd_free(mi);
    sd_free(labels);
    sd_free(lptr);
    sd_free(payloads);
    sd_free(roots);
    sd_free(roots_mem);
}

static sd__proc *take_proc(sd__worker *w, const char *desc_id)
{
    sd__proc *p = NULL;
    pthread_mutex_lock(&w->mu);
    idle_list *l = sd_map_get_str(&w->idle, desc_id);
    if (l != NULL && l->procs.len > 0) {
        p = *SD_VEC_AT(&l->procs, sd__proc *, l->procs.len - 1);
        l->procs.len--;
    }
    pthread_mutex_unlock(&w->mu);
    return p;
}

static void give_proc(sd__worker *w, const char *desc_id, sd__proc *p)
{
    pthread_mutex_lock(&w->mu);
    idle_list *l = sd_map_get_str(&w->idle, desc_id);
    if (l == NULL && !w->dead) {
        l = sd_calloc(1, sizeof(*l));
        if (l != NULL) {
            sd_vec_init(&l->procs, sizeof(sd__proc *));
            if (sd_map_put_str(&w->idle, desc_id, l) != SD_OK) {
                sd_free(l);
                l = NULL;
            }
        }
    }
    if (l != NULL && !w->dead && sd_vec_push(&l->procs, &p) == SD_OK) {
        p = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    sd__proc_destroy(p);
}

/* Pop the next chunk of the bundle's inbox, waiting for it. NULL when the worker died. */
static chunk *next_chunk(sd__worker *w, const char *instruction)
{
    chunk *c = NULL;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        inbox *ib = sd_map_get_str(&w->inboxes, instruction);
        if (ib != NULL && ib->head != NULL) {
            c = ib->head;
            ib->head = c->next;
            if (ib->head == NULL) {
                ib->tail = NULL;
            }
            break;
        }
        if (w->dead) {
            break;
        }
        pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return c;
}

typedef struct ensure_chan_t {
    sd__worker *w;
    const char *data_url;
    const char *state_url;
    sd_status st;
} ensure_chan_t;

static void ensure_chan(void *arg)
{
    ensure_chan_t *e = arg;
    sd_err err;
    sd_err_clear(&err);
    if (e->w->stopping) {
        e->st = SD_ECANCELED;
        return;
    }
    if (get_chan(e->w, e->data_url, &err) == NULL || get_chan(e->w, e->state_url, &err) == NULL) {
        e->st = err.code != SD_OK ? err.code : SD_EUNAVAIL;
    }
}

static sd_status run_bundle(bundle *b, sd__bundle_result *res, sd_err *err)
{
    sd__worker *w = b->w;
    sd_status st;
    const pb_ProcessBundleDescriptor *d = get_desc(w, b->desc_id, err);
    if (d == NULL) {
        return err != NULL ? err->code : SD_EIO;
    }
    const char *du, *su;
    desc_urls(d, &du, &su);
    b->data_url = sd_strdup(du);
    b->state_url = sd_strdup(su);
    if (b->data_url == NULL || b->state_url == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    /* Open the data/state streams now: the runner holds the bundle's input until they exist. */
    ensure_chan_t ec = { w, b->data_url, b->state_url, SD_OK };
    if (sd__rt_call(w->rt, ensure_chan, &ec) != SD_OK || ec.st != SD_OK) {
        return sd_err_set(err, SD_EUNAVAIL, "worker %s: cannot open data/state streams to %s",
                          w->id, b->data_url);
    }
    sd__proc *p = take_proc(w, b->desc_id);
    if (p == NULL && (st = sd__proc_create(d, &p, err)) != SD_OK) {
        return st;
    }
    sd__bundle_io io = { io_state_get, io_state_append, io_state_clear, io_data, io_log, b,
                         io_timers };
    /* Visible to split requests (loop thread) while it runs. */
    pthread_mutex_lock(&w->mu);
    bool registered = sd_map_put_str(&w->running, b->instruction, p) == SD_OK;
    pthread_mutex_unlock(&w->mu);
    st = sd__proc_start(p, b->instruction, &io, err);
    while (st == SD_OK && !sd__proc_inputs_done(p)) {
        chunk *c = next_chunk(w, b->instruction);
        if (c == NULL) {
            st = sd_err_set(err, SD_ECANCELED, "worker %s shut down during bundle %s", w->id,
                            b->instruction);
            break;
        }
        if (c->timer) {
            st = sd__proc_timers(p, c->tid, c->family, sd_bytes_make(c->data, c->len),
                                 c->is_last, err);
        } else {
            st = sd__proc_data(p, c->tid, sd_bytes_make(c->data, c->len), c->is_last, err);
        }
        chunk_free(c);
    }
    if (st == SD_OK) {
        st = sd__proc_finish(p, res, err);
    }
    if (registered) {
        pthread_mutex_lock(&w->mu);
        sd_map_remove(&w->running, sd_bytes_str(b->instruction));
        pthread_mutex_unlock(&w->mu);
    }
    if (st == SD_OK) {
        give_proc(w, b->desc_id, p);
    } else {
        sd__proc_destroy(p);
    }
    return st;
}

static void finish_task(void *arg)
{
    sd__worker *w = arg;
    pthread_mutex_lock(&w->mu);
    w->finish_tasks--;
    pthread_mutex_unlock(&w->mu);
    maybe_finish(w);
}

static void *bundle_main(void *arg)
{
    bundle *b = arg;
    sd__worker *w = b->w;
    sd__bundle_result res;
    sd_err err;
    sd_err_clear(&err);
    sd__bundle_result_init(&res);
    sd_status st = run_bundle(b, &res, &err);
    if (st != SD_OK) {
        SD_INFO("sdk", "worker %s: bundle %s failed: %s", w->id, b->instruction,
                sd_err_msg(&err));
    }
    respond(w, b->instruction, st == SD_OK ? NULL : sd_err_msg(&err), &res);
    sd__bundle_result_deinit(&res);
    pthread_mutex_lock(&w->mu);
    sd_map_remove(&w->inboxes, sd_bytes_str(b->instruction));
    w->live_bundles--;
    bool last = w->live_bundles == 0 && w->dead;
    if (last) {
        /* Counted before it is queued, so the loop cannot free the worker under it. */
        w->finish_tasks++;
    }
    pthread_mutex_unlock(&w->mu);
    sd_free(b->instruction);
    sd_free(b->desc_id);
    sd_free(b->data_url);
    sd_free(b->state_url);
    sd_free(b);
    if (last) {
        /* Queued after this bundle's sends, so it runs after them. */
        if (sd_rpc_run_on_loop(w->rpc, finish_task, w) != SD_OK) {
            pthread_mutex_lock(&w->mu);
            w->finish_tasks--;
            pthread_mutex_unlock(&w->mu);
        }
    }
    return NULL;
}

static sd_status start_bundle(sd__worker *w, const char *instruction, const char *desc_id,
                              sd_err *err)
{
    pthread_t t;
    pthread_attr_t attr;
    bundle *b = sd_calloc(1, sizeof(*b));
    if (b == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    b->w = w;
    b->instruction = sd_strdup(instruction);
    b->desc_id = sd_strdup(desc_id);
    if (b->instruction == NULL || b->desc_id == NULL) {
        sd_free(b->instruction);
        sd_free(b->desc_id);
        sd_free(b);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&w->mu);
    if (sd_map_get_str(&w->inboxes, instruction) == NULL) {
        inbox *ib = sd_calloc(1, sizeof(*ib));
        if (ib == NULL || sd_map_put_str(&w->inboxes, instruction, ib) != SD_OK) {
            sd_free(ib);
        }
    }
    w->live_bundles++;
    pthread_mutex_unlock(&w->mu);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, bundle_main, b);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&w->mu);
        w->live_bundles--;
        sd_map_remove(&w->inboxes, sd_bytes_str(instruction));
        pthread_mutex_unlock(&w->mu);
        sd_free(b->instruction);
        sd_free(b->desc_id);
        sd_free(b);
        return sd_err_set(err, SD_EIO, "cannot start a bundle thread");
    }
    return SD_OK;
}

/* ================================================================ control */

static void reply_simple(sd__worker *w, const char *instruction, int kind, const char *error)
{
    pb_InstructionResponse r = FNE(INSTRUCTION_RESPONSE__INIT);
    SD_FN(ProcessBundleProgressResponse) prog = FNE(PROCESS_BUNDLE_PROGRESS_RESPONSE__INIT);
    pb_ProcessBundleSplitResponse split = FNE(PROCESS_BUNDLE_SPLIT_RESPONSE__INIT);
    SD_FN(FinalizeBundleResponse) fin = FNE(FINALIZE_BUNDLE_RESPONSE__INIT);
    SD_FN(MonitoringInfosMetadataResponse) mon = FNE(MONITORING_INFOS_METADATA_RESPONSE__INIT);
    SD_FN(HarnessMonitoringInfosResponse) hm = FNE(HARNESS_MONITORING_INFOS_RESPONSE__INIT);
    sd_buf bytes;
    r.instruction_id = (char *)instruction;
    if (error != NULL) {
        r.error = (char *)error;
    } else {
        r.response_case = (SD_FN(InstructionResponse__ResponseCase))kind;
        switch (kind) {
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS):
            r.process_bundle_progress = &prog;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT):
            r.process_bundle_split = &split;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_FINALIZE_BUNDLE):
            r.finalize_bundle = &fin;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_MONITORING_INFOS):
            r.monitoring_infos = &mon;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_HARNESS_MONITORING_INFOS):
            r.harness_monitoring_infos = &hm;
            break;
        default:
            r.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE__NOT_SET);
            break;
        }
    }
    sd_buf_init(&bytes, 0);
    if (pack(&r.base, &bytes) == SD_OK && w->ctl != NULL) {
        SD_IGNORE(sd_rpc_stream_send(w->ctl, sd_buf_bytes(&bytes)));
    }
    sd_buf_deinit(&bytes);
}

/*
 * A split request for a bundle running a splittable DoFn: split the element in process (see
 * sd__proc_split) and answer with the channel split. True when a split was made and answered;
 * false: the caller answers with an empty split (the bundle stays whole). Loop thread.
 */
static bool reply_split(sd__worker *w, const char *instruction,
                        const pb_ProcessBundleSplitRequest *req)
{
    typedef SD_FN(ProcessBundleSplitResponse__ChannelSplit) pb_ChannelSplit;
    sd__split sp;
    char source[256];
    bool made = false;
    memset(&sp, 0, sizeof(sp));
    pthread_mutex_lock(&w->mu);
    sd__proc *p = req->instruction_id != NULL ? sd_map_get_str(&w->running, req->instruction_id)
                                              : NULL;
    for (size_t i = 0; p != NULL && i < req->n_desired_splits && !made; i++) {
        const pb_DesiredSplit *ds = req->desired_splits[i]->value;
        if (ds != NULL && sd__proc_split(p, req->desired_splits[i]->key,
                                         ds->fraction_of_remainder, &sp) == SD_OK &&
            sp.split) {
            snprintf(source, sizeof(source), "%s", sp.source);
            made = true;
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (!made) {
        return false;
    }
    pb_InstructionResponse r = FNE(INSTRUCTION_RESPONSE__INIT);
    pb_ProcessBundleSplitResponse split = FNE(PROCESS_BUNDLE_SPLIT_RESPONSE__INIT);
    pb_ChannelSplit cs = FNE(PROCESS_BUNDLE_SPLIT_RESPONSE__CHANNEL_SPLIT__INIT);
    pb_ChannelSplit *css[1] = { &cs };
    sd_buf bytes;
    cs.transform_id = source;
    cs.last_primary_element = sp.last_primary;
    cs.first_residual_element = sp.first_residual;
    split.n_channel_splits = 1;
    split.channel_splits = css;
    r.instruction_id = (char *)instruction;
    r.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT);
    r.process_bundle_split = &split;
    sd_buf_init(&bytes, 0);
    if (pack(&r.base, &bytes) == SD_OK && w->ctl != NULL) {
        SD_IGNORE(sd_rpc_stream_send(w->ctl, sd_buf_bytes(&bytes)));
    }
    sd_buf_deinit(&bytes);
    SD_DEBUG("sdk", "worker %s: bundle %s split: element %lld keeps [.., %lld), rest returned",
             w->id, req->instruction_id, (long long)sp.last_primary,
             (long long)sp.residual.from);
    return true;
}

static void on_control_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    sd__worker *w = ctx;
    sd_err err;
    char buf[256];
    (void)s;
    sd_err_clear(&err);
    pb_InstructionRequest *req = FNF(instruction_request__unpack)(NULL, msg.len, msg.ptr);
    if (req == NULL) {
        SD_WARN("sdk", "worker %s: malformed InstructionRequest ignored", w->id);
        return;
    }
    const char *id = req->instruction_id != NULL ? req->instruction_id : "";
    switch (req->request_case) {
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE):
        if (req->process_bundle == NULL ||
            start_bundle(w, id, req->process_bundle->process_bundle_descriptor_id, &err) != SD_OK) {
            reply_simple(w, id, 0, err.code != SD_OK ? sd_err_msg(&err) : "malformed request");
        }
        break;
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_SPLIT):
        if (req->process_bundle_split != NULL && reply_split(w, id, req->process_bundle_split)) {
            break;
        }
        reply_simple(w, id, (int)req->request_case, NULL);
        break;
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_PROGRESS):
    case FNE(INSTRUCTION_REQUEST__REQUEST_FINALIZE_BUNDLE):
    case FNE(INSTRUCTION_REQUEST__REQUEST_MONITORING_INFOS):
    case FNE(INSTRUCTION_REQUEST__REQUEST_HARNESS_MONITORING_INFOS):
        /* Request and response oneof numbers are the same. */
        reply_simple(w, id, (int)req->request_case, NULL);
        break;
    default:
        snprintf(buf, sizeof(buf), "the Sundial C SDK worker does not support instruction kind %d",
                 (int)req->request_case);
        reply_simple(w, id, 0, buf);
        break;
    }
    FNF(instruction_request__free_unpacked)(req, NULL);
}

static void on_control_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    sd__worker *w = ctx;
    char why[512];
    (void)s;
    w->ctl = NULL;
    w->open_streams--;
    snprintf(why, sizeof(why), "control stream closed (%d%s%s)", (int)code,
             message[0] ? ": " : "", message);
    worker_shutdown(w, why);
    maybe_finish(w);
}

/* ================================================================ lifecycle */

static void worker_shutdown(sd__worker *w, const char *why)
{
    if (w->stopping) {
        return;
    }
    w->stopping = true;
    snprintf(w->why, sizeof(w->why), "%s", why);
    pthread_mutex_lock(&w->mu);
    w->dead = true;
    /* Fail pending state requests; their owners see !done and give up. */
    size_t it = 0;
    sd_bytes k;
    void *v;
    while (sd_map_next(&w->waiters, &it, &k, &v)) {
        waiter *wt = v;
        wt->failed = true;
        snprintf(wt->error, sizeof(wt->error), "worker shut down: %s", why);
        wt->done = true;
    }
    sd_map_deinit(&w->waiters);
    sd_map_init(&w->waiters, NULL);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->ctl != NULL) {
        sd_rpc_stream_cancel(w->ctl);
    }
    if (w->log != NULL) {
        sd_rpc_stream_cancel(w->log);
    }
    for (size_t i = 0; i < w->chans.len; i++) {
        chan *c = *SD_VEC_AT(&w->chans, chan *, i);
        if (c->data != NULL) {
            sd_rpc_stream_cancel(c->data);
        }
        if (c->state != NULL) {
            sd_rpc_stream_cancel(c->state);
        }
    }
}

static void maybe_finish(sd__worker *w)
{
    if (!w->stopping || w->finished || w->open_streams > 0) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    int live = w->live_bundles;
    int queued = w->finish_tasks;
    pthread_mutex_unlock(&w->mu);
    if (live > 0 || queued > 0) {
        return; /* a queued finish_task will call us again */
    }
    w->finished = true;
    for (size_t i = 0; i < w->chans.len; i++) {
        chan *c = *SD_VEC_AT(&w->chans, chan *, i);
        sd_rpc_channel_destroy(c->ch);
        sd_free(c->url);
        sd_free(c);
    }
    sd_vec_deinit(&w->chans);
    if (w->ctl_ch != NULL) {
        sd_rpc_channel_destroy(w->ctl_ch);
    }
    if (w->log_ch != NULL) {
        sd_rpc_channel_destroy(w->log_ch);
    }
    sd_map_deinit(&w->inboxes);
    sd_map_deinit(&w->waiters);
    sd_map_deinit(&w->descs);
    sd_map_deinit(&w->idle);
    sd_map_deinit(&w->running);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    if (w->on_done != NULL) {
        w->on_done(w->done_ctx, w->why);
    }
    sd_free(w->id);
    sd_free(w->control_url);
    sd_free(w->logging_url);
    sd_free(w);
}

void sd__worker_stop(sd__worker *w)
{
    if (w != NULL) {
        worker_shutdown(w, "stopped");
        maybe_finish(w);
    }
}

sd_status sd__worker_start(sd__rt *rt, const char *worker_id, const char *control_url,
                           const char *logging_url, void (*on_done)(void *ctx, const char *why),
                           void *ctx, sd__worker **out, sd_err *err)
{
    sd__worker *w = sd_calloc(1, sizeof(*w));
    if (w == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    w->rt = rt;
    w->rpc = sd__rt_rpc(rt);
    w->id = sd_strdup(worker_id);
    w->control_url = sd_strdup(control_url);
    w->logging_url = logging_url != NULL && logging_url[0] ? sd_strdup(logging_url) : NULL;
    w->on_done = on_done;
    w->done_ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    sd_vec_init(&w->chans, sizeof(chan *));
    sd_map_init(&w->inboxes, inbox_free);
    sd_map_init(&w->waiters, NULL);
    sd_map_init(&w->descs, desc_free);
    sd_map_init(&w->idle, idle_free);
    sd_map_init(&w->running, NULL);
    sd_rpc_metadata md = { "worker_id", w->id };
    sd_rpc_stream_handler ch = { on_control_msg, on_control_close, w };
    sd_status st = SD_OK;
    if (w->id == NULL || w->control_url == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (st == SD_OK) {
        st = sd_rpc_channel_create(w->rpc, control_url, &w->ctl_ch, err);
    }
    if (st == SD_OK) {
        st = sd_rpc_stream_open(w->ctl_ch, SD_PATH_CONTROL, &md, 1, &ch, &w->ctl, err);
    }
    if (st != SD_OK) {
        if (w->ctl_ch != NULL) {
            sd_rpc_channel_destroy(w->ctl_ch);
        }
        sd_map_deinit(&w->inboxes);
        sd_map_deinit(&w->descs);
        sd_map_deinit(&w->idle);
        sd_map_deinit(&w->running);
        sd_vec_deinit(&w->chans);
        sd_free(w->id);
        sd_free(w->control_url);
        sd_free(w->logging_url);
        sd_free(w);
        return st;
    }
    w->open_streams = 1;
    if (w->logging_url != NULL) {
        sd_rpc_stream_handler lh = { NULL, on_aux_close, w };
        sd_err lerr;
        sd_err_clear(&lerr);
        if (sd_rpc_channel_create(w->rpc, w->logging_url, &w->log_ch, &lerr) == SD_OK &&
            sd_rpc_stream_open(w->log_ch, SD_PATH_LOGGING, &md, 1, &lh, &w->log, &lerr) == SD_OK) {
            w->open_streams++;
        }
    }
    *out = w;
    return SD_OK;
}
