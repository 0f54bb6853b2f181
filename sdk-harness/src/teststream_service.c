/*
 * Sundial C SDK: a TestStreamService served from the test's process
 * (<sundial/teststream_service.h>).
 *
 * What it is. The server side of a live TestStream: Beam's TestStreamService.Events (a
 * server-streaming call: one EventsRequest, then TestStreamPayload.Event messages until the
 * status) on 127.0.0.1 at a free port, fed by the test thread. The runner's side is
 * runner/exec/exec_live.c; the wire form is teststream/ts_pb.c's, the same code that writes
 * and reads scripted payloads, so a pushed event and a scripted one are the same bytes.
 *
 * The stream. Every push appends to one event model (teststream/ts.h, an sd_ts_stream whose
 * outputs are the tags), which does the checks a script gets (timestamps, watermarks that
 * never go back, clock advances >= 0); elements are turned from nested into outer encodings
 * first, by the builder's own helper (sd__teststream_outer). The model is the service's log:
 * each Events call keeps the index of the next event it has to send, so a call opened late
 * gets the whole stream from the start, and an ended stream finishes every call once its
 * events are queued. A call's EventsRequest picks the outputs it wants (ts_pb.c reads it);
 * processing-time events belong to every output.
 *
 * Threads. Everything the service owns is touched on the SDK runtime's loop thread only
 * (runtime.c: one libev loop and gRPC hub per process, where the workers' streams live too):
 * a public call packs its arguments and runs its body there with sd__rt_call, which waits
 * for it. So pushes from several threads are serialised by the loop, and no callback ever
 * races a push. The one exception is what a waiting thread reads — the readers count, the
 * events count, the server being down — kept under a mutex and signalled.
 *
 * Trade-off: each call encodes each event again when it sends it (no cache of encoded
 * events). Tests push tens of events to one or two calls; the model already holds the bytes.
 */
#include "sundial/teststream_service.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/transport/rpc.h"
#include "sdk-harness/src/sdk_int.h"
#include "teststream/ts.h"
#include "teststream/ts_pb.h"

#define SVC_MAGIC        0x53445453u /* "SDTS" */
#define SVC_MAGIC_DEAD   0x44454144u
#define SD_PATH_TS_EVENT "/org.apache.beam.model.interactive.v1.TestStreamService/Events"

/* One open Events call. */
typedef struct reader {
    sd_teststream_service *svc;
    sd_rpc_call *call;
    size_t next;   /* the next event of the log it has to consider */
    bool finished; /* sd_rpc_call_finish was called */
    bool *want;    /* per output: asked for */
} reader;

struct sd_teststream_service {
    uint32_t magic;
    sd__rt *rt;
    sd_rpc *rpc;
    sd_rpc_server *srv;
    sd_coder *coder;     /* own reference */
    sd_ts_stream *log;   /* every event pushed, elements in the outer context */
    sd_time *wms;        /* per output: its watermark so far (all-or-none checks) */
    sd_vec readers;      /* reader *: the open Events calls */
    sd_buf scratch;      /* one encoded event */
    bool ended;          /* sd_teststream_service_end */
    char endpoint[64];   /* "127.0.0.1:PORT" */
    pthread_mutex_t mu;  /* guards the fields below, read by waiting threads */
    pthread_cond_t cv;   /* signalled when one of them changes */
    uint64_t n_opened;   /* Events calls opened so far */
    uint64_t n_events;   /* events in the log */
    bool down;           /* the server has shut down */
    bool free_when_down; /* stopped from the loop itself: the shutdown callback frees */
};

/* ================================================================ the stream, on the loop */

/* Send rd what the log holds beyond rd->next, and the end when the stream has ended. */
static void reader_flush(reader *rd)
{
    sd_teststream_service *svc = rd->svc;
    if (rd->finished) {
        return;
    }
    size_t n = sd_ts_stream_n_events(svc->log);
    for (; rd->next < n; rd->next++) {
        sd_ts_event ev;
        sd_ts_stream_event(svc->log, rd->next, &ev);
        if (ev.kind != SD_TS_CLOCK && !rd->want[ev.output]) {
            continue;
        }
        sd_err err;
        sd_err_clear(&err);
        sd_buf_reset(&svc->scratch);
        if (sd_ts_encode_event(svc->log, rd->next, &svc->scratch, &err) != SD_OK) {
            rd->finished = true;
            sd_rpc_call_finish(rd->call, SD_RPC_RESOURCE_EXHAUSTED, sd_err_msg(&err));
            return;
        }
        if (sd_rpc_call_send(rd->call, sd_buf_bytes(&svc->scratch)) != SD_OK) {
            return; /* the call is over: its on_close follows and forgets it */
        }
    }
    if (svc->ended) {
        rd->finished = true;
        sd_rpc_call_finish(rd->call, SD_RPC_OK, NULL);
    }
}

static void flush_all(sd_teststream_service *svc)
{
    for (size_t i = 0; i < svc->readers.len; i++) {
        reader_flush(*SD_VEC_AT(&svc->readers, reader *, i));
    }
    pthread_mutex_lock(&svc->mu);
    svc->n_events = sd_ts_stream_n_events(svc->log);
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
}

static void on_events_open(sd_rpc_call *call, sd_bytes request, void *ctx)
{
    sd_teststream_service *svc = ctx;
    size_t n_outputs = sd_ts_stream_n_outputs(svc->log);
    pthread_mutex_lock(&svc->mu);
    svc->n_opened++;
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
    reader *rd = sd_calloc(1, sizeof(*rd));
    bool *want = sd_calloc(n_outputs, sizeof(bool));
    if (rd == NULL || want == NULL || sd_vec_push(&svc->readers, &rd) != SD_OK) {
        sd_free(rd);
        sd_free(want);
        sd_rpc_call_finish(call, SD_RPC_RESOURCE_EXHAUSTED,
                           "TestStreamService: out of memory for a new Events call");
        return;
    }
    rd->svc = svc;
    rd->call = call;
    rd->want = want;
    sd_rpc_call_set_data(call, rd);
    sd_err err;
    sd_err_clear(&err);
    if (sd_ts_decode_events_request(svc->log, request, want, &err) != SD_OK) {
        SD_WARN("sdk", "TestStreamService at %s: refused an Events call from %s: %s", svc->endpoint,
                sd_rpc_call_peer(call), sd_err_msg(&err));
        rd->finished = true;
        sd_rpc_call_finish(call, SD_RPC_INVALID_ARGUMENT, sd_err_msg(&err));
        return;
    }
    SD_DEBUG("sdk", "TestStreamService at %s: Events call from %s", svc->endpoint,
             sd_rpc_call_peer(call));
    reader_flush(rd);
}

static void on_events_close(sd_rpc_call *call, bool cancelled, void *ctx)
{
    sd_teststream_service *svc = ctx;
    reader *rd = sd_rpc_call_data(call);
    (void)cancelled;
    if (rd == NULL) {
        return;
    }
    for (size_t i = 0; i < svc->readers.len; i++) {
        if (*SD_VEC_AT(&svc->readers, reader *, i) == rd) {
            sd_vec_remove(&svc->readers, i);
            break;
        }
    }
    sd_free(rd->want);
    sd_free(rd);
}

/* ================================================================ lifecycle */

static void svc_free(sd_teststream_service *svc)
{
    svc->magic = SVC_MAGIC_DEAD;
    sd_ts_stream_destroy(svc->log);
    sd_coder_destroy(svc->coder);
    sd_free(svc->wms);
    sd_vec_deinit(&svc->readers);
    sd_buf_deinit(&svc->scratch);
    pthread_mutex_destroy(&svc->mu);
    pthread_cond_destroy(&svc->cv);
    sd_free(svc);
}

static void on_down(void *ctx)
{
    sd_teststream_service *svc = ctx;
    if (svc->free_when_down) {
        svc_free(svc);
        return;
    }
    pthread_mutex_lock(&svc->mu);
    svc->down = true;
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
}

typedef struct start_args {
    sd_teststream_service *svc;
    const char *const *tags;
    size_t n_tags;
    sd_status st;
    sd_err *err;
} start_args;

/* Create, bind and start the server, and the log named by the endpoint it got. */
static void start_on_loop(void *ctx)
{
    start_args *a = ctx;
    sd_teststream_service *svc = a->svc;
    sd_rpc_handler h = { .on_open = on_events_open, .on_close = on_events_close, .ctx = svc };
    int port = 0;
    sd_status st = sd_rpc_server_create(svc->rpc, &svc->srv, a->err);
    if (st == SD_OK) {
        st = sd_rpc_server_add_method(svc->srv, SD_PATH_TS_EVENT, SD_RPC_KIND_SERVER_STREAM, &h);
        if (st != SD_OK) {
            sd_err_set(a->err, st, "registering TestStreamService.Events");
        }
    }
    if (st == SD_OK) {
        st = sd_rpc_server_listen(svc->srv, "127.0.0.1:0", &port, a->err);
    }
    if (st == SD_OK) {
        char name[96];
        snprintf(svc->endpoint, sizeof(svc->endpoint), "127.0.0.1:%d", port);
        snprintf(name, sizeof(name), "served at %s", svc->endpoint);
        /* The model's errors name the stream: "TestStream served at 127.0.0.1:PORT: ...". */
        st = sd_ts_stream_create(name, a->tags, a->n_tags, &svc->log, a->err);
    }
    if (st == SD_OK) {
        st = sd_rpc_server_start(svc->srv, a->err);
    }
    if (st != SD_OK && svc->srv != NULL) {
        /* A server that never started still goes through shutdown; it frees itself and
         * calls nothing of ours. */
        sd_rpc_server_shutdown(svc->srv, 0, NULL, NULL);
        svc->srv = NULL;
    }
    a->st = st;
}

/* One wait on svc->cv (holding svc->mu) of at most left_ms. */
static void timed_wait(sd_teststream_service *svc, int64_t left_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = (int64_t)ts.tv_nsec + (left_ms % 1000) * 1000000;
    ts.tv_sec += (time_t)(left_ms / 1000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    (void)pthread_cond_timedwait(&svc->cv, &svc->mu, &ts);
}

sd_status sd_teststream_service_start(const sd_pcoder *coder,
                                      const char *const *tags,
                                      size_t n_tags,
                                      sd_teststream_service **out,
                                      sd_err *err)
{
    static const char *const default_tags[] = { "out" };
    if (out == NULL || coder == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "sd_teststream_service_start: %s is NULL (it needs the TestStream's "
                          "coder and a place for the service)",
                          coder == NULL ? "the coder" : "out");
    }
    *out = NULL;
    if (n_tags == 0) {
        tags = default_tags;
        n_tags = 1;
    } else if (tags == NULL) {
        return sd_err_set(err, SD_EINVAL, "sd_teststream_service_start: %zu tags but a NULL array",
                          n_tags);
    }
    for (size_t i = 0; i < n_tags; i++) {
        if (tags[i] == NULL || tags[i][0] == '\0' || strchr(tags[i], '/') != NULL) {
            return sd_err_set(err, SD_EINVAL,
                              "sd_teststream_service_start: tag %zu must be non-empty and "
                              "contain no '/'",
                              i);
        }
    }
    sd__rt *rt = NULL;
    sd_status st = sd__rt_get(&rt, err);
    if (st != SD_OK) {
        return st;
    }
    sd_teststream_service *svc = sd_calloc(1, sizeof(*svc));
    if (svc == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    svc->magic = SVC_MAGIC;
    svc->rt = rt;
    svc->rpc = sd__rt_rpc(rt);
    svc->coder = sd_coder_ref((sd_coder *)coder);
    sd_vec_init(&svc->readers, sizeof(reader *));
    sd_buf_init(&svc->scratch, 0);
    pthread_mutex_init(&svc->mu, NULL);
    pthread_cond_init(&svc->cv, NULL);
    if ((svc->wms = sd_calloc(n_tags, sizeof(sd_time))) == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; st == SD_OK && i < n_tags; i++) {
        svc->wms[i] = SD_TIME_MIN;
    }
    start_args a = { .svc = svc, .tags = tags, .n_tags = n_tags, .st = SD_OK, .err = err };
    if (st == SD_OK) {
        st = sd__rt_call(rt, start_on_loop, &a);
        st = st == SD_OK ? a.st : sd_err_set(err, st, "the SDK's event loop cannot take work");
    }
    if (st != SD_OK) {
        sd_err_prefix(err, "starting a TestStreamService: ");
        svc_free(svc);
        return st;
    }
    SD_INFO("sdk", "TestStreamService serving on %s", svc->endpoint);
    *out = svc;
    return SD_OK;
}

const char *sd_teststream_service_endpoint(const sd_teststream_service *svc)
{
    return svc != NULL && svc->magic == SVC_MAGIC ? svc->endpoint : "";
}

/* ================================================================ pushes */

typedef enum push_kind { PUSH_ELEMENTS, PUSH_WATERMARK, PUSH_CLOCK, PUSH_END } push_kind;

typedef struct push_args {
    sd_teststream_service *svc;
    push_kind kind;
    const char *tag;
    const sd_bytes *elements;
    const sd_time *timestamps;
    size_t n;
    sd_time wm;
    int64_t ms;
    sd_status st;
    sd_err *err;
} push_args;

/* The output tag names (NULL: the first). SD_EINVAL naming the tags it has. */
static sd_status find_tag(sd_teststream_service *svc, const char *tag, size_t *out, sd_err *err)
{
    if (tag == NULL) {
        *out = 0;
        return SD_OK;
    }
    if (sd_ts_stream_find_output(svc->log, tag, out)) {
        return SD_OK;
    }
    sd_buf names;
    sd_buf_init(&names, 0);
    for (size_t o = 0; o < sd_ts_stream_n_outputs(svc->log); o++) {
        if (sd_buf_printf(&names, "%s\"%s\"", o > 0 ? ", " : "",
                          sd_ts_stream_outputs(svc->log)[o]) != SD_OK) {
            break;
        }
    }
    sd_status st = sd_err_set(
        err, SD_EINVAL, "TestStreamService at %s: unknown tag \"%s\" (its tags: %.*s)",
        svc->endpoint, tag, (int)names.len, names.data != NULL ? (const char *)names.data : "");
    sd_buf_deinit(&names);
    return st;
}

static sd_status push_elements(push_args *a)
{
    sd_teststream_service *svc = a->svc;
    size_t t;
    sd_status st = find_tag(svc, a->tag, &t, a->err);
    if (st != SD_OK) {
        return st;
    }
    if (a->n > 0 && (a->elements == NULL || a->timestamps == NULL)) {
        return sd_err_set(a->err, SD_EINVAL,
                          "TestStreamService at %s: %zu elements but NULL elements or timestamps",
                          svc->endpoint, a->n);
    }
    sd_buf outer;
    sd_buf_init(&outer, 0);
    sd_bytes *items = sd_calloc(a->n + 1, sizeof(sd_bytes));
    size_t bad = 0;
    sd_err e;
    sd_err_clear(&e);
    st = items == NULL
             ? SD_ENOMEM
             : sd__teststream_outer(svc->coder, a->elements, a->n, &outer, items, &bad, &e);
    if (st == SD_ENOMEM) {
        st = sd_err_set(a->err, SD_ENOMEM, "out of memory");
    } else if (st != SD_OK) {
        st = sd_err_set(a->err, SD_EINVAL,
                        "TestStreamService at %s: element %zu of tag %s is not one nested value "
                        "of %s: %s",
                        svc->endpoint, bad, sd_ts_stream_outputs(svc->log)[t], svc->coder->urn,
                        sd_err_msg(&e));
    }
    if (st == SD_OK) {
        st = sd_ts_stream_add_elements(svc->log, t, items, a->timestamps, a->n, a->err);
    }
    sd_buf_deinit(&outer);
    sd_free(items);
    return st;
}

static sd_status push_watermark(push_args *a)
{
    sd_teststream_service *svc = a->svc;
    size_t first = 0, last = sd_ts_stream_n_outputs(svc->log);
    sd_time wm = sd_time_clamp(a->wm);
    if (a->tag != NULL) {
        sd_status st = find_tag(svc, a->tag, &first, a->err);
        if (st != SD_OK) {
            return st;
        }
        last = first + 1;
    }
    /* All or none: check every tag before the first event goes in. */
    for (size_t t = first; t < last; t++) {
        if (wm < svc->wms[t]) {
            return sd_err_set(a->err, SD_EINVAL,
                              "TestStreamService at %s: the watermark of %s would move "
                              "backwards, from %lld to %lld",
                              svc->endpoint, sd_ts_stream_outputs(svc->log)[t],
                              (long long)svc->wms[t], (long long)wm);
        }
    }
    for (size_t t = first; t < last; t++) {
        sd_status st = sd_ts_stream_advance_watermark(svc->log, t, wm, a->err);
        if (st != SD_OK) {
            return st;
        }
        svc->wms[t] = wm;
    }
    return SD_OK;
}

static void push_on_loop(void *ctx)
{
    push_args *a = ctx;
    sd_teststream_service *svc = a->svc;
    if (svc->ended) {
        a->st = a->kind == PUSH_END
                    ? SD_OK
                    : sd_err_set(a->err, SD_ESTATE,
                                 "TestStreamService at %s: the stream has ended (after %zu "
                                 "events); nothing can be pushed after its end",
                                 svc->endpoint, sd_ts_stream_n_events(svc->log));
        return;
    }
    switch (a->kind) {
    case PUSH_ELEMENTS:
        a->st = push_elements(a);
        break;
    case PUSH_WATERMARK:
        a->st = push_watermark(a);
        break;
    case PUSH_CLOCK:
        a->st = sd_ts_stream_advance_clock(svc->log, a->ms, a->err);
        break;
    case PUSH_END:
        svc->ended = true;
        a->st = SD_OK;
        SD_DEBUG("sdk", "TestStreamService at %s: the stream ends after %zu events", svc->endpoint,
                 sd_ts_stream_n_events(svc->log));
        break;
    }
    if (a->st == SD_OK) {
        flush_all(svc);
    }
}

static sd_status push(push_args *a, const char *what)
{
    sd_teststream_service *svc = a->svc;
    if (svc == NULL || svc->magic != SVC_MAGIC) {
        return sd_err_set(a->err, SD_EINVAL, "%s: %s is not a running TestStreamService", what,
                          svc == NULL ? "NULL" : "the handle");
    }
    a->st = SD_OK;
    sd_status st = sd__rt_call(svc->rt, push_on_loop, a);
    if (st != SD_OK) {
        return sd_err_set(a->err, st, "%s: the SDK's event loop cannot take work", what);
    }
    return a->st;
}

sd_status sd_teststream_service_add_elements(sd_teststream_service *svc,
                                             const char *tag,
                                             const sd_bytes *elements,
                                             const sd_time *timestamps,
                                             size_t n,
                                             sd_err *err)
{
    push_args a = { .svc = svc,
                    .kind = PUSH_ELEMENTS,
                    .tag = tag,
                    .elements = elements,
                    .timestamps = timestamps,
                    .n = n,
                    .err = err };
    return push(&a, "sd_teststream_service_add_elements");
}

sd_status sd_teststream_service_advance_watermark(sd_teststream_service *svc,
                                                  const char *tag,
                                                  sd_time wm,
                                                  sd_err *err)
{
    push_args a = { .svc = svc, .kind = PUSH_WATERMARK, .tag = tag, .wm = wm, .err = err };
    return push(&a, "sd_teststream_service_advance_watermark");
}

sd_status
sd_teststream_service_advance_processing_time(sd_teststream_service *svc, int64_t ms, sd_err *err)
{
    push_args a = { .svc = svc, .kind = PUSH_CLOCK, .ms = ms, .err = err };
    return push(&a, "sd_teststream_service_advance_processing_time");
}

sd_status sd_teststream_service_end(sd_teststream_service *svc, sd_err *err)
{
    push_args a = { .svc = svc, .kind = PUSH_END, .err = err };
    return push(&a, "sd_teststream_service_end");
}

/* ================================================================ waiting and stopping */

sd_status sd_teststream_service_wait_readers(sd_teststream_service *svc,
                                             uint64_t n_readers,
                                             int timeout_ms,
                                             sd_err *err)
{
    if (svc == NULL || svc->magic != SVC_MAGIC) {
        return sd_err_set(err, SD_EINVAL,
                          "sd_teststream_service_wait_readers: not a running TestStreamService");
    }
    int64_t deadline = sd_mono_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&svc->mu);
    while (svc->n_opened < n_readers) {
        int64_t left = deadline - sd_mono_now_ms();
        if (left <= 0) {
            break;
        }
        timed_wait(svc, left);
    }
    uint64_t got = svc->n_opened;
    pthread_mutex_unlock(&svc->mu);
    if (got < n_readers) {
        return sd_err_set(err, SD_EIO,
                          "TestStreamService at %s: %llu Events calls in %d ms, not the %llu "
                          "waited for (is the job running, and its TestStream's endpoint this "
                          "one?)",
                          svc->endpoint, (unsigned long long)got, timeout_ms,
                          (unsigned long long)n_readers);
    }
    return SD_OK;
}

uint64_t sd_teststream_service_n_events(const sd_teststream_service *svc)
{
    if (svc == NULL || svc->magic != SVC_MAGIC) {
        return 0;
    }
    sd_teststream_service *m = (sd_teststream_service *)svc; /* the mutex only */
    pthread_mutex_lock(&m->mu);
    uint64_t n = m->n_events;
    pthread_mutex_unlock(&m->mu);
    return n;
}

static void stop_on_loop(void *ctx)
{
    sd_teststream_service *svc = ctx;
    SD_DEBUG("sdk", "TestStreamService at %s: stopping (%zu calls open)", svc->endpoint,
             svc->readers.len);
    sd_rpc_server_shutdown(svc->srv, 0, on_down, svc);
}

void sd_teststream_service_stop(sd_teststream_service *svc)
{
    if (svc == NULL || svc->magic != SVC_MAGIC) {
        return;
    }
    svc->magic = SVC_MAGIC_DEAD; /* pushes from now on are refused */
    if (sd_rpc_on_loop(svc->rpc)) {
        /* On the loop itself nothing can wait for the shutdown: its callback frees. */
        svc->free_when_down = true;
        stop_on_loop(svc);
        return;
    }
    if (sd__rt_call(svc->rt, stop_on_loop, svc) != SD_OK) {
        SD_WARN("sdk",
                "TestStreamService at %s: the SDK's event loop cannot take work; the "
                "service is left running",
                svc->endpoint);
        return;
    }
    pthread_mutex_lock(&svc->mu);
    while (!svc->down) {
        pthread_cond_wait(&svc->cv, &svc->mu);
    }
    pthread_mutex_unlock(&svc->mu);
    svc_free(svc);
}
