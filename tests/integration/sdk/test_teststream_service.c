/*
 * The C SDK's TestStreamService (<sundial/teststream_service.h>), on loopback with ephemeral
 * ports:
 *   - on the wire, read by a raw gRPC client of the transport: pushed events arrive in order
 *     and intact (elements in the outer context), pushes made while a call is open arrive
 *     live, the end ends the call with OK, a late call gets the whole stream, a request
 *     picks its outputs, a request naming an unknown output is refused naming it, and a
 *     service stopped mid-stream ends the call with an error;
 *   - every misuse gets a clear error and changes nothing;
 *   - with a job on the embedded runner: a live TestStream reads what the test pushes, the
 *     job waits while the stream is open and ends DONE with the exact output once the stream
 *     ends; a service stopped mid-stream fails the job with a message naming the TestStream
 *     and the endpoint.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <ev.h>

#include "runner/transport/rpc.h"
#include "sundial/sundial.h"
#include "teststream/ts.h"
#include "teststream/ts_pb.h"

#define EVENTS "/org.apache.beam.model.interactive.v1.TestStreamService/Events"

static const char *const TAGS[] = { "main", "side" };

/* A nested string encoding (what SDK code hands over). */
static sd_bytes nested(sd_buf *b, const char *s)
{
    sd_buf_reset(b);
    assert_int_equal(sd_enc_str(b, s), SD_OK);
    return sd_buf_bytes(b);
}

/* ---------------------------------------------------------------- a raw Events client */

typedef struct client {
    sd_ts_stream *got; /* the events received, elements as the wire carries them */
    size_t n;
    sd_err err; /* the first event that did not decode */
    bool closed;
    sd_rpc_code code;
    char msg[512];
    pthread_mutex_t mu;
    pthread_cond_t cv;
} client;

static void on_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    client *c = ctx;
    (void)s;
    sd_status st = sd_ts_decode_event(c->got, msg, c->n, NULL, NULL, &c->err);
    if (st != SD_OK && c->err.code == SD_OK) {
        sd_err_set(&c->err, st, "event %zu did not decode", c->n);
    }
    pthread_mutex_lock(&c->mu);
    c->n++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void on_end(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    client *c = ctx;
    (void)s;
    c->closed = true;
    c->code = code;
    snprintf(c->msg, sizeof(c->msg), "%s", message != NULL ? message : "");
}

static void client_init(client *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    assert_int_equal(sd_ts_stream_create("client", TAGS, 2, &c->got, NULL), SD_OK);
}

static void client_deinit(client *c)
{
    sd_ts_stream_destroy(c->got);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* Wait until c received n events (pusher threads use it). */
static void client_wait(client *c, size_t n)
{
    pthread_mutex_lock(&c->mu);
    while (c->n < n) {
        pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
}

/* One Events call to endpoint asking for want[0..n_want) (NULL, 0: everything), read on a
 * loop and hub of its own in this thread until the call ends. */
static void client_read(client *c, const char *endpoint, const char *const *want, size_t n_want)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(loop);
    sd_rpc *rpc = NULL;
    sd_rpc_channel *ch = NULL;
    sd_rpc_stream *s = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_rpc_create(loop, &rpc, &err), SD_OK);
    assert_int_equal(sd_rpc_channel_create(rpc, endpoint, &ch, &err), SD_OK);
    sd_rpc_stream_handler h = { .on_message = on_msg, .on_close = on_end, .ctx = c };
    assert_int_equal(sd_rpc_stream_open(ch, EVENTS, NULL, 0, &h, &s, &err), SD_OK);
    sd_buf req;
    sd_buf_init(&req, 0);
    assert_int_equal(sd_ts_encode_events_request(want, n_want, &req, &err), SD_OK);
    assert_int_equal(sd_rpc_stream_send(s, sd_buf_bytes(&req)), SD_OK);
    sd_rpc_stream_half_close(s);
    sd_buf_deinit(&req);
    ev_run(loop, 0); /* returns once the call is over: it held the loop */
    assert_true(c->closed);
    sd_rpc_channel_destroy(ch);
    sd_rpc_destroy(rpc);
    ev_loop_destroy(loop);
}

/* The events as text: "E0[a@5,bc@6] W1@100 C60000 ..." (elements' bytes shown raw). */
static void render(const sd_ts_stream *s, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sd_ts_stream_n_events(s) && n < cap; i++) {
        sd_ts_event ev;
        sd_ts_stream_event(s, i, &ev);
        if (ev.kind == SD_TS_ELEMENTS) {
            n += (size_t)snprintf(out + n, cap - n, "E%zu[", ev.output);
            for (size_t k = 0; k < ev.n && n < cap; k++) {
                sd_bytes b;
                sd_time t;
                sd_ts_stream_element(s, i, k, &b, &t);
                n += (size_t)snprintf(out + n, cap - n, "%s%.*s@%lld", k > 0 ? "," : "", (int)b.len,
                                      b.len > 0 ? (const char *)b.ptr : "", (long long)t);
            }
            n += (size_t)snprintf(out + n, cap - n, "] ");
        } else if (ev.kind == SD_TS_WATERMARK) {
            n += (size_t)snprintf(out + n, cap - n, "W%zu@%lld ", ev.output, (long long)ev.wm);
        } else {
            n += (size_t)snprintf(out + n, cap - n, "C%lld ", (long long)ev.advance_ms);
        }
    }
}

static sd_teststream_service *start_service(void)
{
    sd_pipeline *p = sd_pipeline_create("coders");
    sd_teststream_service *svc = NULL;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_teststream_service_start(sd_pcoder_string(p), TAGS, 2, &svc, &err);
    if (st != SD_OK) {
        fail_msg("start: %s", sd_err_msg(&err));
    }
    sd_pipeline_destroy(p); /* the service keeps its own reference to the coder */
    assert_int_equal(strncmp(sd_teststream_service_endpoint(svc), "127.0.0.1:", 10), 0);
    return svc;
}

#define OK(call)                                        \
    do {                                                \
        sd_err e_;                                      \
        sd_err_clear(&e_);                              \
        sd_status st_ = (call);                         \
        if (st_ != SD_OK) {                             \
            fail_msg("%s: %s", #call, sd_err_msg(&e_)); \
        }                                               \
    } while (0)

/* A push that must succeed, in a thread where cmocka cannot fail the test: the first error
 * goes to *failed (the test checks it after the join). */
#define PUSH(failed, call)                                                        \
    do {                                                                          \
        sd_err e_;                                                                \
        sd_err_clear(&e_);                                                        \
        if ((failed)[0] == '\0' && (call) != SD_OK) {                             \
            snprintf((failed), sizeof(failed), "%s: %s", #call, sd_err_msg(&e_)); \
        }                                                                         \
    } while (0)

/* The script both wire tests push: every kind of event, an "every tag" watermark. With live,
 * each part waits until the open call has what was pushed before. */
static void push_script(sd_teststream_service *svc, client *live, char (*failed)[256])
{
    sd_buf b1, b2;
    sd_buf_init(&b1, 0);
    sd_buf_init(&b2, 0);
    sd_bytes els[2];
    els[0] = nested(&b1, "a");
    els[1] = nested(&b2, "bc");
    sd_time ts[2] = { 5, 6 };
    PUSH(*failed, sd_teststream_service_add_elements(svc, NULL, els, ts, 2, &e_));
    if (live != NULL && (*failed)[0] == '\0') {
        client_wait(live, 1); /* the first event reached the open call before the next push */
    }
    PUSH(*failed, sd_teststream_service_advance_watermark(svc, "side", 100, &e_));
    PUSH(*failed, sd_teststream_service_advance_processing_time(svc, 60000, &e_));
    els[0] = nested(&b1, "");
    sd_time min = SD_TIME_MIN;
    PUSH(*failed, sd_teststream_service_add_elements(svc, "side", els, &min, 1, &e_));
    PUSH(*failed, sd_teststream_service_advance_watermark(svc, NULL, 200, &e_));
    if (sd_teststream_service_n_events(svc) != 6 && (*failed)[0] == '\0') {
        snprintf(*failed, sizeof(*failed), "%llu events pushed, not 6",
                 (unsigned long long)sd_teststream_service_n_events(svc));
    }
    if (live != NULL && (*failed)[0] == '\0') {
        client_wait(live, 6);
    }
    PUSH(*failed, sd_teststream_service_end(svc, &e_));
    sd_buf_deinit(&b1);
    sd_buf_deinit(&b2);
}

#define SCRIPT_TEXT "E0[a@5,bc@6] W1@100 C60000 E1[@-9223372036854775] W0@200 W1@200 "

typedef struct pusher {
    sd_teststream_service *svc;
    client *live;
    char failed[256];
} pusher;

static void *push_thread(void *arg)
{
    pusher *p = arg;
    PUSH(p->failed, sd_teststream_service_wait_readers(p->svc, 1, 30000, &e_));
    if (p->failed[0] == '\0') {
        push_script(p->svc, p->live, &p->failed);
    } else {
        /* No call came: end the stream so that nothing waits for it. */
        sd_err err;
        sd_err_clear(&err);
        if (sd_teststream_service_end(p->svc, &err) != SD_OK) {
            fprintf(stderr, "%s\n", sd_err_msg(&err));
        }
    }
    return NULL;
}

/* Pushes made while the call is open arrive live, in order and intact; the end ends it OK. A
 * call opened after the end gets the whole stream. */
static void test_wire_live_in_order(void **state)
{
    (void)state;
    sd_teststream_service *svc = start_service();
    client c;
    client_init(&c);
    pusher p = { .svc = svc, .live = &c, .failed = "" };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, push_thread, &p), 0);
    client_read(&c, sd_teststream_service_endpoint(svc), NULL, 0);
    pthread_join(th, NULL);
    if (p.failed[0] != '\0') {
        fail_msg("%s", p.failed);
    }
    assert_int_equal(c.code, SD_RPC_OK);
    assert_int_equal(c.err.code, SD_OK);
    char text[512];
    render(c.got, text, sizeof(text));
    assert_string_equal(text, SCRIPT_TEXT);
    client_deinit(&c);

    client late;
    client_init(&late);
    client_read(&late, sd_teststream_service_endpoint(svc), NULL, 0);
    assert_int_equal(late.code, SD_RPC_OK);
    render(late.got, text, sizeof(text));
    assert_string_equal(text, SCRIPT_TEXT);
    client_deinit(&late);
    sd_teststream_service_stop(svc);
}

/* A request picks its outputs (clock advances go to all); an unknown output is refused. */
static void test_wire_request_outputs(void **state)
{
    (void)state;
    sd_teststream_service *svc = start_service();
    char failed[256] = "";
    push_script(svc, NULL, &failed);
    if (failed[0] != '\0') {
        fail_msg("%s", failed);
    }
    static const char *const side[] = { "side" }, *const nope[] = { "main", "nope" };
    client c;
    client_init(&c);
    client_read(&c, sd_teststream_service_endpoint(svc), side, 1);
    assert_int_equal(c.code, SD_RPC_OK);
    char text[512];
    render(c.got, text, sizeof(text));
    assert_string_equal(text, "W1@100 C60000 E1[@-9223372036854775] W1@200 ");
    client_deinit(&c);

    client_init(&c);
    client_read(&c, sd_teststream_service_endpoint(svc), nope, 2);
    assert_int_equal(c.code, SD_RPC_INVALID_ARGUMENT);
    assert_int_equal(c.n, 0);
    if (strstr(c.msg, "asks for output \"nope\"") == NULL || strstr(c.msg, "\"side\"") == NULL) {
        fail_msg("refusal: %s", c.msg);
    }
    client_deinit(&c);
    sd_teststream_service_stop(svc);
}

typedef struct stopper {
    sd_teststream_service *svc;
    client *c;
    char failed[256];
} stopper;

static void *stop_thread(void *arg)
{
    stopper *s = arg;
    uint8_t x[] = { 0x01, 'x' }; /* "x", nested */
    sd_bytes e = sd_bytes_make(x, sizeof(x));
    sd_time t = 1;
    PUSH(s->failed, sd_teststream_service_wait_readers(s->svc, 1, 30000, &e_));
    PUSH(s->failed, sd_teststream_service_add_elements(s->svc, NULL, &e, &t, 1, &e_));
    if (s->failed[0] == '\0') {
        client_wait(s->c, 1);
    }
    sd_teststream_service_stop(s->svc); /* the call is open: it ends with an error */
    return NULL;
}

/* A service stopped while a call is open ends it with an error, after what it had sent. */
static void test_wire_stopped_mid_stream(void **state)
{
    (void)state;
    sd_teststream_service *svc = start_service();
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "%s", sd_teststream_service_endpoint(svc));
    client c;
    client_init(&c);
    stopper s = { .svc = svc, .c = &c, .failed = "" };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, stop_thread, &s), 0);
    client_read(&c, endpoint, NULL, 0);
    pthread_join(th, NULL);
    if (s.failed[0] != '\0') {
        fail_msg("%s", s.failed);
    }
    assert_int_not_equal(c.code, SD_RPC_OK);
    char text[128];
    render(c.got, text, sizeof(text));
    assert_string_equal(text, "E0[x@1] ");
    client_deinit(&c);
}

/* Every misuse: a clear error, and nothing pushed. */
static void test_misuse(void **state)
{
    (void)state;
    sd_err err;
    sd_err_clear(&err);
    sd_teststream_service *svc = NULL;
    static const char *const bad[] = { "a/b" };
    sd_pipeline *p = sd_pipeline_create("coders");
    assert_int_equal(sd_teststream_service_start(NULL, NULL, 0, &svc, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "the coder is NULL"));
    sd_err_clear(&err);
    assert_int_equal(sd_teststream_service_start(sd_pcoder_string(p), bad, 1, &svc, &err),
                     SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "tag 0 must be non-empty and contain no '/'"));
    assert_null(svc);
    sd_pipeline_destroy(p);
    sd_err_clear(&err);
    assert_int_equal(sd_teststream_service_end(NULL, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "NULL is not a running TestStreamService"));

    svc = start_service();
    const char *ep = sd_teststream_service_endpoint(svc);
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_bytes good = nested(&b, "ok");
    sd_time t = 3, out_of_range = SD_TIME_MAX + 1;
    static const uint8_t truncated[] = { 0x05, 'a' }; /* says 5 bytes, has 1 */
    sd_bytes cut = sd_bytes_make(truncated, sizeof(truncated));

    struct {
        const char *name;
        sd_status st;
        sd_status want;
        const char *msg;
    } rows[4];

    size_t nr = 0;
    sd_err_clear(&err);
    rows[nr].name = "unknown tag";
    rows[nr].st = sd_teststream_service_add_elements(svc, "zz", &good, &t, 1, &err);
    rows[nr].want = SD_EINVAL;
    rows[nr++].msg = "unknown tag \"zz\" (its tags: \"main\", \"side\")";
    assert_non_null(strstr(sd_err_msg(&err), rows[nr - 1].msg));
    assert_non_null(strstr(sd_err_msg(&err), ep));
    sd_err_clear(&err);
    rows[nr].name = "not a value of the coder";
    rows[nr].st = sd_teststream_service_add_elements(svc, "main", &cut, &t, 1, &err);
    rows[nr].want = SD_EINVAL;
    rows[nr++].msg = "element 0 of tag main is not one nested value of beam:coder:string_utf8:v1";
    assert_non_null(strstr(sd_err_msg(&err), rows[nr - 1].msg));
    sd_err_clear(&err);
    rows[nr].name = "timestamp out of range";
    rows[nr].st = sd_teststream_service_add_elements(svc, NULL, &good, &out_of_range, 1, &err);
    rows[nr].want = SD_EINVAL;
    rows[nr++].msg = "outside Beam's range";
    assert_non_null(strstr(sd_err_msg(&err), rows[nr - 1].msg));
    sd_err_clear(&err);
    rows[nr].name = "clock backwards";
    rows[nr].st = sd_teststream_service_advance_processing_time(svc, -1, &err);
    rows[nr].want = SD_EINVAL;
    rows[nr++].msg = "processing time cannot move backwards";
    assert_non_null(strstr(sd_err_msg(&err), rows[nr - 1].msg));
    for (size_t r = 0; r < nr; r++) {
        if (rows[r].st != rows[r].want) {
            fail_msg("%s: %s", rows[r].name, sd_status_name(rows[r].st));
        }
    }
    assert_int_equal(sd_teststream_service_n_events(svc), 0);

    /* Watermarks: backwards refused naming both values; "every tag" is all or none. */
    OK(sd_teststream_service_advance_watermark(svc, "side", 50, &e_));
    sd_err_clear(&err);
    assert_int_equal(sd_teststream_service_advance_watermark(svc, "side", 40, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "the watermark of side would move backwards, from 50 "
                                             "to 40"));
    sd_err_clear(&err);
    assert_int_equal(sd_teststream_service_advance_watermark(svc, NULL, 45, &err), SD_EINVAL);
    assert_int_equal(sd_teststream_service_n_events(svc), 1); /* main did not move either */
    OK(sd_teststream_service_advance_watermark(svc, NULL, 50, &e_));
    assert_int_equal(sd_teststream_service_n_events(svc), 3);

    /* No reader came: waiting says so. */
    sd_err_clear(&err);
    assert_int_equal(sd_teststream_service_wait_readers(svc, 1, 50, &err), SD_EIO);
    assert_non_null(strstr(sd_err_msg(&err), "0 Events calls in 50 ms"));

    /* After the end: pushes refused, a second end harmless. */
    OK(sd_teststream_service_end(svc, &e_));
    OK(sd_teststream_service_end(svc, &e_));
    sd_err_clear(&err);
    assert_int_equal(sd_teststream_service_add_elements(svc, NULL, &good, &t, 1, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "the stream has ended (after 3 events)"));
    sd_err_clear(&err);
    assert_int_equal(sd_teststream_service_advance_processing_time(svc, 1, &err), SD_ESTATE);
    assert_int_equal(sd_teststream_service_n_events(svc), 3);
    sd_buf_deinit(&b);
    sd_teststream_service_stop(svc);
    sd_teststream_service_stop(NULL);
}

/* ---------------------------------------------------------------- jobs */

typedef struct run_arg {
    sd_pipeline *p;
    sd_status st;
    sd_err err;
    bool done;
} run_arg;

static void *run_thread(void *arg)
{
    run_arg *a = arg;
    sd_run_options o = { .timeout_ms = 60000 };
    sd_err_clear(&a->err);
    a->st = sd_pipeline_run(a->p, &o, NULL, &a->err);
    __atomic_store_n(&a->done, true, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Elements the "t:seen" DoFn processed (the SDK's workers run in this process). */
static int g_seen;

static sd_status seen_process(sd_ctx *c, void *state)
{
    (void)c;
    (void)state;
    __atomic_add_fetch(&g_seen, 1, __ATOMIC_SEQ_CST);
    return SD_OK;
}

/* A pipeline whose TestStream "Words" reads svc; its output must be want[0..n) (NULL: it
 * goes to "t:seen" instead). */
static sd_pipeline *
live_pipeline(const char *name, sd_teststream_service *svc, const char *const *want, size_t n)
{
    sd_pipeline *p = sd_pipeline_create(name);
    sd_teststream *ts = sd_teststream_create(p, "Words", sd_pcoder_string(p), NULL, 0);
    sd_teststream_set_endpoint(ts, sd_teststream_service_endpoint(svc));
    if (want != NULL) {
        sd_assert_strings(p, "Check", sd_teststream_output(ts, NULL), want, n);
    } else {
        sd_pardo_spec spec = { .dofn = "t:seen" };
        assert_non_null(sd_pardo(p, "Seen", sd_teststream_output(ts, NULL), &spec, NULL));
    }
    assert_null(sd_pipeline_error(p));
    return p;
}

/* A job reads the service live: it waits while the stream is open, and ends DONE with the
 * exact output once the test ends the stream. */
static void test_job_reads_live(void **state)
{
    (void)state;
    sd_pipeline *cp = sd_pipeline_create("coders");
    sd_teststream_service *svc = NULL;
    OK(sd_teststream_service_start(sd_pcoder_string(cp), NULL, 0, &svc, &e_));
    static const char *const want[] = { "ann", "bo", "cy" };
    run_arg a = { .p = live_pipeline("live-job", svc, want, 3) };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_thread, &a), 0);
    OK(sd_teststream_service_wait_readers(svc, 1, 60000, &e_));
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_bytes e = nested(&b, "bo");
    sd_time t = 2000;
    OK(sd_teststream_service_add_elements(svc, NULL, &e, &t, 1, &e_));
    OK(sd_teststream_service_advance_watermark(svc, NULL, 1000, &e_));
    OK(sd_teststream_service_advance_processing_time(svc, 60000, &e_));
    e = nested(&b, "ann");
    OK(sd_teststream_service_add_elements(svc, NULL, &e, &t, 1, &e_));
    e = nested(&b, "cy");
    OK(sd_teststream_service_add_elements(svc, NULL, &e, &t, 1, &e_));
    /* Everything is pushed but the stream is open: the job waits for it. */
    struct timespec rest = { .tv_sec = 0, .tv_nsec = 300 * 1000000L };
    while (nanosleep(&rest, &rest) != 0) {
    }
    assert_false(__atomic_load_n(&a.done, __ATOMIC_SEQ_CST));
    OK(sd_teststream_service_end(svc, &e_));
    pthread_join(th, NULL);
    if (a.st != SD_OK) {
        fail_msg("live job: %s", sd_err_msg(&a.err));
    }
    sd_pipeline_destroy(a.p);
    sd_pipeline_destroy(cp);
    sd_buf_deinit(&b);
    sd_teststream_service_stop(svc);
}

/* The service stopped mid-stream: the job fails, its error naming the TestStream and the
 * endpoint (runner/exec/exec_live.c's message). */
static void test_job_service_gone(void **state)
{
    (void)state;
    sd_pipeline *cp = sd_pipeline_create("coders");
    sd_teststream_service *svc = NULL;
    OK(sd_teststream_service_start(sd_pcoder_string(cp), NULL, 0, &svc, &e_));
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "%s", sd_teststream_service_endpoint(svc));
    run_arg a = { .p = live_pipeline("gone-job", svc, NULL, 0) };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_thread, &a), 0);
    OK(sd_teststream_service_wait_readers(svc, 1, 60000, &e_));
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_bytes e = nested(&b, "only");
    sd_time t = 1;
    __atomic_store_n(&g_seen, 0, __ATOMIC_SEQ_CST);
    OK(sd_teststream_service_add_elements(svc, NULL, &e, &t, 1, &e_));
    /* The job has read and processed the event: the stream is open, mid-way. */
    struct timespec tick = { .tv_sec = 0, .tv_nsec = 5 * 1000000L };
    for (int i = 0; i < 12000 && __atomic_load_n(&g_seen, __ATOMIC_SEQ_CST) < 1; i++) {
        nanosleep(&tick, NULL);
    }
    assert_int_equal(__atomic_load_n(&g_seen, __ATOMIC_SEQ_CST), 1);
    sd_teststream_service_stop(svc);
    pthread_join(th, NULL);
    assert_int_not_equal(a.st, SD_OK);
    const char *msg = sd_err_msg(&a.err);
    if (strstr(msg, "TestStream") == NULL || strstr(msg, "Words") == NULL ||
        strstr(msg, endpoint) == NULL ||
        strstr(msg, "went away before the stream ended (after 1 events") == NULL) {
        fail_msg("the job's error does not name the TestStream and %s: %s", endpoint, msg);
    }
    sd_pipeline_destroy(a.p);
    sd_pipeline_destroy(cp);
    sd_buf_deinit(&b);
}

/* A TestStream reads its script or a service, never both: a sticky error either way. */
static void test_endpoint_and_script(void **state)
{
    (void)state;
    sd_time t = 1;
    sd_pipeline *p = sd_pipeline_create("both");
    sd_teststream *ts = sd_teststream_create(p, "Words", sd_pcoder_string(p), NULL, 0);
    sd_teststream_set_endpoint(ts, "127.0.0.1:1");
    const char *s = "x";
    sd_teststream_add_strings(ts, NULL, &s, &t, 1);
    const sd_err *e = sd_pipeline_error(p);
    assert_non_null(e);
    assert_non_null(strstr(sd_err_msg(e), "TestStream Words reads its events from the "
                                          "TestStreamService at 127.0.0.1:1"));
    sd_pipeline_destroy(p);

    p = sd_pipeline_create("both2");
    ts = sd_teststream_create(p, "Words", sd_pcoder_string(p), NULL, 0);
    sd_teststream_add_strings(ts, NULL, &s, &t, 1);
    sd_teststream_set_endpoint(ts, "127.0.0.1:1");
    e = sd_pipeline_error(p);
    assert_non_null(e);
    assert_non_null(strstr(sd_err_msg(e), "already scripts 1 events"));
    sd_pipeline_destroy(p);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn seen = { .process = seen_process };
    if (sd_register_dofn("t:seen", &seen) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_live_in_order),      cmocka_unit_test(test_wire_request_outputs),
        cmocka_unit_test(test_wire_stopped_mid_stream), cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_job_reads_live),          cmocka_unit_test(test_job_service_gone),
        cmocka_unit_test(test_endpoint_and_script),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
