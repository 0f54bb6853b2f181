/*
 * Tests for runner/transport: a server and a client in one process on one libev loop, over
 * loopback with ephemeral ports. Every test arms a watchdog timer; the watchdog is ev_unref'd,
 * so the loop returns by itself once the transport holds nothing live, which the teardown
 * uses to check that every server, call and stream was released.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/time.h"
#include "runner/transport/rpc.h"

#define P_ECHO    "/sd.test.Svc/Echo"
#define P_LATER   "/sd.test.Svc/Later"
#define P_NEVER   "/sd.test.Svc/Never"
#define P_FAIL    "/sd.test.Svc/Fail"
#define P_SSTREAM "/sd.test.Svc/Feed"
#define P_BIDI    "/sd.test.Svc/Chat"
#define P_CSTREAM "/sd.test.Svc/Collect"

/* ---------------------------------------------------------------- fixture */

typedef struct fx {
    struct ev_loop *loop;
    sd_rpc *rpc;
    sd_rpc_server *srv;
    sd_rpc_channel *ch;
    int port;
    ev_timer watchdog;
    bool timed_out;
    bool server_done;

    /* server-side observations */
    int srv_opens;
    int srv_closes;
    int srv_cancelled;
    int srv_half_closes;
    int srv_msgs;
    long srv_bytes;
    bool srv_order_ok;
    char srv_worker[64];
    char srv_peer[64];
    char srv_method[64];
    sd_rpc_call *live_call;
    long pause_after; /* bidi: pause receiving after this many messages (0 = never) */
    bool srv_paused;  /* receiving is paused now */
    int msgs_while_paused;
    ev_timer resume;

    /* client-side observations */
    int unary_done;
    sd_rpc_code unary_code;
    char unary_msg[256];
    size_t unary_len;
    bool unary_match;
    int64_t unary_ms;
    int cli_msgs;
    bool cli_order_ok;
    int cli_closes;
    sd_rpc_code cli_code;
    char cli_msg[256];
    sd_rpc_stream *stream;
} fx;

static fx F;

static void on_watchdog(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    F.timed_out = true;
    ev_break(loop, EVBREAK_ALL);
}

/* Run the loop until *flag becomes true (or the watchdog fires, which fails the test). */
static void run_until(const bool *flag)
{
    while (!*flag && !F.timed_out) {
        ev_run(F.loop, EVRUN_ONCE);
    }
    assert_false(F.timed_out);
}

static void run_until_count(int *counter, int n)
{
    while (*counter < n && !F.timed_out) {
        ev_run(F.loop, EVRUN_ONCE);
    }
    assert_false(F.timed_out);
}

static void on_server_done(void *ctx)
{
    fx *f = ctx;
    f->server_done = true;
}

#ifndef SD_WATCHDOG_MULT
#define SD_WATCHDOG_MULT 1
#endif

/* Watchdog scale: the build's timeout multiplier, times SD_TEST_WATCHDOG_MULT (valgrind). */
static double watchdog_mult(void)
{
    const char *e = getenv("SD_TEST_WATCHDOG_MULT");
    double m = e != NULL ? strtod(e, NULL) : 1.0;
    return (m > 0 ? m : 1.0) * SD_WATCHDOG_MULT;
}

static void fx_start_loop(double watchdog_s)
{
    sd_err err = { 0 };
    watchdog_s *= watchdog_mult();
    memset(&F, 0, sizeof(F));
    F.srv_order_ok = true;
    F.cli_order_ok = true;
    F.cli_code = (sd_rpc_code)-1;
    F.unary_code = (sd_rpc_code)-1;
    F.loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(F.loop);
    ev_timer_init(&F.watchdog, on_watchdog, watchdog_s, 0.);
    ev_timer_start(F.loop, &F.watchdog);
    ev_unref(F.loop);
    assert_int_equal(sd_rpc_create(F.loop, &F.rpc, &err), SD_OK);
}

static void fx_stop_loop(void)
{
    /* Nothing live may remain: with only the unref'd watchdog, ev_run returns at once. */
    ev_run(F.loop, 0);
    assert_false(F.timed_out);
    sd_rpc_destroy(F.rpc);
    ev_ref(F.loop);
    ev_timer_stop(F.loop, &F.watchdog);
    ev_loop_destroy(F.loop);
}

static void fx_setup(const char *const *paths,
                     const sd_rpc_kind *kinds,
                     const sd_rpc_handler *handlers,
                     size_t n)
{
    sd_err err = { 0 };
    char target[64];
    fx_start_loop(20.0);
    assert_int_equal(sd_rpc_server_create(F.rpc, &F.srv, &err), SD_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(sd_rpc_server_add_method(F.srv, paths[i], kinds[i], &handlers[i]), SD_OK);
    }
    assert_int_equal(sd_rpc_server_listen(F.srv, "127.0.0.1:0", &F.port, &err), SD_OK);
    assert_true(F.port > 0);
    assert_int_equal(sd_rpc_server_start(F.srv, &err), SD_OK);
    snprintf(target, sizeof(target), "127.0.0.1:%d", F.port);
    assert_int_equal(sd_rpc_channel_create(F.rpc, target, &F.ch, &err), SD_OK);
}

static void fx_teardown(int grace_ms)
{
    sd_rpc_channel_destroy(F.ch);
    F.ch = NULL;
    sd_rpc_server_shutdown(F.srv, grace_ms, on_server_done, &F);
    run_until(&F.server_done);
    fx_stop_loop();
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src != NULL ? src : "(null)");
}

/* ---------------------------------------------------------------- server handlers */

static void srv_on_close(sd_rpc_call *call, bool cancelled, void *ctx)
{
    fx *f = ctx;
    (void)call;
    f->srv_closes++;
    if (cancelled) {
        f->srv_cancelled++;
    }
    if (f->live_call == call) {
        f->live_call = NULL;
    }
}

/* Unary echo: replies "echo:" + request, records metadata and peer. */
static void echo_on_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    fx *f = ctx;
    sd_buf b;
    f->srv_opens++;
    copy_str(f->srv_worker, sizeof(f->srv_worker), sd_rpc_call_metadata(call, "worker_id"));
    copy_str(f->srv_peer, sizeof(f->srv_peer), sd_rpc_call_peer(call));
    copy_str(f->srv_method, sizeof(f->srv_method), sd_rpc_call_method(call));
    sd_buf_init(&b, 0);
    assert_int_equal(sd_buf_append_str(&b, "echo:"), SD_OK);
    assert_int_equal(sd_buf_append_bytes(&b, req), SD_OK);
    sd_rpc_call_reply(call, sd_buf_bytes(&b));
    sd_buf_deinit(&b);
    assert_true(sd_rpc_call_is_closed(call));
    assert_int_equal(sd_rpc_call_send(call, sd_bytes_str("late")), SD_ESTATE);
}

/* Unary "later": answers from a timer 20 ms after the call opened. */
typedef struct later_reply {
    ev_timer t;
    sd_rpc_call *call;
    sd_buf body;
} later_reply;

static void later_fire(struct ev_loop *loop, ev_timer *w, int revents)
{
    later_reply *lr = (later_reply *)w;
    (void)loop;
    (void)revents;
    sd_rpc_call_reply(lr->call, sd_buf_bytes(&lr->body));
    sd_buf_deinit(&lr->body);
    sd_free(lr);
}

static void later_on_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    fx *f = ctx;
    later_reply *lr = sd_calloc(1, sizeof(*lr));
    assert_non_null(lr);
    f->srv_opens++;
    lr->call = call;
    sd_buf_init(&lr->body, 0);
    assert_int_equal(sd_buf_append_bytes(&lr->body, req), SD_OK);
    ev_timer_init(&lr->t, later_fire, 0.02, 0.);
    ev_timer_start(f->loop, &lr->t);
}

/* Unary "never": keeps the call open; the test ends it by deadline or shutdown. */
static void never_on_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    fx *f = ctx;
    (void)req;
    f->srv_opens++;
    f->live_call = call;
}

/* Unary "fail": finishes with INVALID_ARGUMENT and no message. */
static void fail_on_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    fx *f = ctx;
    (void)req;
    f->srv_opens++;
    /* A unary call takes one message; a response sent before an error status is dropped. */
    assert_int_equal(sd_rpc_call_send(call, sd_bytes_str("partial")), SD_OK);
    assert_int_equal(sd_rpc_call_send(call, sd_bytes_str("second")), SD_ESTATE);
    sd_rpc_call_finish(call, SD_RPC_INVALID_ARGUMENT, "bad request: missing field");
    sd_rpc_call_finish(call, SD_RPC_OK, NULL); /* a second finish is a no-op */
}

/* Server stream: the request is a decimal count; sends that many numbered messages. */
static void feed_on_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    fx *f = ctx;
    char num[32];
    long n;
    f->srv_opens++;
    snprintf(num, sizeof(num), "%.*s", (int)req.len, (const char *)req.ptr);
    n = strtol(num, NULL, 10);
    for (long i = 0; i < n; i++) {
        uint8_t m[4] = { (uint8_t)(i >> 24), (uint8_t)(i >> 16), (uint8_t)(i >> 8), (uint8_t)i };
        assert_int_equal(sd_rpc_call_send(call, sd_bytes_make(m, sizeof(m))), SD_OK);
    }
    sd_rpc_call_finish(call, SD_RPC_OK, "fed");
}

static uint32_t get_be32(sd_bytes b)
{
    return ((uint32_t)b.ptr[0] << 24) | ((uint32_t)b.ptr[1] << 16) | ((uint32_t)b.ptr[2] << 8) |
           (uint32_t)b.ptr[3];
}

/* Bidi chat: echoes every message; on half-close sends "bye" and finishes OK. */
static void chat_on_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    fx *f = ctx;
    assert_int_equal(req.len, 0);
    f->srv_opens++;
    f->live_call = call;
    copy_str(f->srv_worker, sizeof(f->srv_worker), sd_rpc_call_metadata(call, "worker_id"));
}

static void on_resume(struct ev_loop *loop, ev_timer *w, int revents)
{
    fx *f = w->data;
    (void)loop;
    (void)revents;
    if (f->live_call != NULL) {
        f->srv_paused = false;
        sd_rpc_call_resume_recv(f->live_call);
    }
}

static void chat_on_message(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    fx *f = ctx;
    if (msg.len >= 4 && get_be32(msg) != (uint32_t)f->srv_msgs) {
        f->srv_order_ok = false;
    }
    if (f->srv_paused) {
        f->msgs_while_paused++;
    }
    f->srv_msgs++;
    f->srv_bytes += (long)msg.len;
    assert_int_equal(sd_rpc_call_send(call, msg), SD_OK);
    if (f->pause_after > 0 && f->srv_msgs == f->pause_after) {
        sd_rpc_call_pause_recv(call);
        f->srv_paused = true;
        ev_timer_init(&f->resume, on_resume, 0.1, 0.);
        f->resume.data = f;
        ev_timer_start(f->loop, &f->resume);
    }
}

static void chat_on_half_close(sd_rpc_call *call, void *ctx)
{
    fx *f = ctx;
    f->srv_half_closes++;
    assert_int_equal(sd_rpc_call_send(call, sd_bytes_str("bye")), SD_OK);
    sd_rpc_call_finish(call, SD_RPC_OK, NULL);
}

/* Client stream: counts messages; on half-close replies with the count. */
static void collect_on_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    fx *f = ctx;
    (void)call;
    (void)req;
    f->srv_opens++;
}

static void collect_on_message(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    fx *f = ctx;
    (void)call;
    f->srv_msgs++;
    f->srv_bytes += (long)msg.len;
}

static void collect_on_half_close(sd_rpc_call *call, void *ctx)
{
    fx *f = ctx;
    char num[32];
    f->srv_half_closes++;
    snprintf(num, sizeof(num), "%d", f->srv_msgs);
    sd_rpc_call_reply(call, sd_bytes_str(num));
}

static const char *const all_paths[] = { P_ECHO,    P_LATER, P_NEVER,  P_FAIL,
                                         P_SSTREAM, P_BIDI,  P_CSTREAM };
static const sd_rpc_kind all_kinds[] = { SD_RPC_KIND_UNARY,         SD_RPC_KIND_UNARY,
                                         SD_RPC_KIND_UNARY,         SD_RPC_KIND_UNARY,
                                         SD_RPC_KIND_SERVER_STREAM, SD_RPC_KIND_BIDI,
                                         SD_RPC_KIND_CLIENT_STREAM };

static void setup_all(void)
{
    const sd_rpc_handler hs[] = {
        { .on_open = echo_on_open, .on_close = srv_on_close, .ctx = &F },
        { .on_open = later_on_open, .on_close = srv_on_close, .ctx = &F },
        { .on_open = never_on_open, .on_close = srv_on_close, .ctx = &F },
        { .on_open = fail_on_open, .on_close = srv_on_close, .ctx = &F },
        { .on_open = feed_on_open, .on_close = srv_on_close, .ctx = &F },
        { .on_open = chat_on_open,
          .on_message = chat_on_message,
          .on_half_close = chat_on_half_close,
          .on_close = srv_on_close,
          .ctx = &F },
        { .on_open = collect_on_open,
          .on_message = collect_on_message,
          .on_half_close = collect_on_half_close,
          .on_close = srv_on_close,
          .ctx = &F },
    };
    fx_setup(all_paths, all_kinds, hs, sizeof(hs) / sizeof(hs[0]));
}

/* ---------------------------------------------------------------- client callbacks */

static sd_bytes expect_resp;

static void unary_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    fx *f = ctx;
    f->unary_done++;
    f->unary_code = code;
    copy_str(f->unary_msg, sizeof(f->unary_msg), message);
    f->unary_len = response.len;
    f->unary_match = expect_resp.ptr != NULL && sd_bytes_equal(response, expect_resp);
}

static void cli_on_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fx *f = ctx;
    (void)s;
    if (msg.len == 4 && get_be32(msg) != (uint32_t)f->cli_msgs) {
        f->cli_order_ok = false;
    }
    f->cli_msgs++;
}

static bool cli_closed;

static void cli_on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    fx *f = ctx;
    (void)s;
    f->cli_closes++;
    f->cli_code = code;
    copy_str(f->cli_msg, sizeof(f->cli_msg), message);
    if (f->stream == s) {
        f->stream = NULL;
    }
    cli_closed = true;
}

static bool unary_finished;

static void unary_done_flag(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    unary_done(ctx, code, message, response);
    unary_finished = true;
}

static void
start_unary(const char *path, sd_bytes req, const sd_rpc_metadata *md, size_t n_md, int timeout_ms)
{
    sd_err err = { 0 };
    unary_finished = false;
    assert_int_equal(sd_rpc_unary(F.ch, path, req, md, n_md, timeout_ms, unary_done_flag, &F, &err),
                     SD_OK);
}

static sd_rpc_stream *open_stream(const char *path, const sd_rpc_metadata *md, size_t n_md)
{
    sd_err err = { 0 };
    sd_rpc_stream *s = NULL;
    const sd_rpc_stream_handler h = { .on_message = cli_on_message,
                                      .on_close = cli_on_close,
                                      .ctx = &F };
    cli_closed = false;
    assert_int_equal(sd_rpc_stream_open(F.ch, path, md, n_md, &h, &s, &err), SD_OK);
    assert_non_null(s);
    F.stream = s;
    return s;
}

/* ---------------------------------------------------------------- tests */

static void test_unary_roundtrip_metadata(void **state)
{
    const sd_rpc_metadata md[] = { { "worker_id", "worker-7" }, { "x-extra", "1" } };
    (void)state;
    setup_all();
    expect_resp = sd_bytes_str("echo:hello");
    start_unary(P_ECHO, sd_bytes_str("hello"), md, 2, 5000);
    run_until(&unary_finished);
    assert_int_equal(F.unary_code, SD_RPC_OK);
    assert_true(F.unary_match);
    assert_string_equal(F.srv_worker, "worker-7");
    assert_string_equal(F.srv_method, P_ECHO);
    assert_true(strncmp(F.srv_peer, "ipv4:127.0.0.1:", 15) == 0);
    run_until_count(&F.srv_closes, 1); /* the server may learn of the end after the client */
    assert_int_equal(F.srv_cancelled, 0);

    /* An empty request and an asynchronous reply. */
    expect_resp = sd_bytes_str("");
    start_unary(P_LATER, sd_bytes_str(""), NULL, 0, 5000);
    run_until(&unary_finished);
    assert_int_equal(F.unary_code, SD_RPC_OK);
    assert_int_equal(F.unary_len, 0);
    run_until_count(&F.srv_closes, 2);
    assert_int_equal(F.srv_cancelled, 0);
    fx_teardown(1000);
}

static void test_unary_error_status(void **state)
{
    (void)state;
    setup_all();
    expect_resp = SD_BYTES_NULL;
    start_unary(P_FAIL, sd_bytes_str("x"), NULL, 0, 5000);
    run_until(&unary_finished);
    assert_int_equal(F.unary_code, SD_RPC_INVALID_ARGUMENT);
    assert_string_equal(F.unary_msg, "bad request: missing field");
    assert_int_equal(F.unary_len, 0);
    run_until_count(&F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 0); /* our own error status is not a cancellation */
    fx_teardown(1000);
}

static void test_bad_client_metadata(void **state)
{
    const sd_rpc_metadata upper[] = { { "Worker_ID", "w" } };
    const sd_rpc_metadata ctl[] = { { "worker_id", "a\nb" } };
    sd_err err = { 0 };
    sd_rpc_stream *s = NULL;
    const sd_rpc_stream_handler h = { .on_close = cli_on_close, .ctx = &F };
    (void)state;
    setup_all();
    assert_int_equal(
        sd_rpc_unary(F.ch, P_ECHO, sd_bytes_str("x"), upper, 1, 0, unary_done, &F, &err),
        SD_EINVAL);
    assert_non_null(strstr(err.msg, "Worker_ID"));
    assert_int_equal(sd_rpc_stream_open(F.ch, P_BIDI, ctl, 1, &h, &s, NULL), SD_EINVAL);
    assert_null(s);
    assert_int_equal(
        sd_rpc_unary(F.ch, "no-slash", sd_bytes_str("x"), NULL, 0, 0, unary_done, &F, NULL),
        SD_EINVAL);
    assert_int_equal(F.unary_done, 0); /* an error return never runs the callback */
    fx_teardown(1000);
}

static void test_large_messages(void **state)
{
    const size_t n = 6u << 20;
    uint8_t *big = sd_malloc(n + 5);
    (void)state;
    assert_non_null(big);
    memcpy(big, "echo:", 5);
    for (size_t i = 0; i < n; i++) {
        big[5 + i] = (uint8_t)(i * 31u + (i >> 12));
    }
    setup_all();
    expect_resp = sd_bytes_make(big, n + 5);
    start_unary(P_ECHO, sd_bytes_make(big + 5, n), NULL, 0, 20000);
    run_until(&unary_finished);
    assert_int_equal(F.unary_code, SD_RPC_OK);
    assert_int_equal(F.unary_len, n + 5);
    assert_true(F.unary_match);
    fx_teardown(1000);
    sd_free(big);
}

static void test_unknown_method(void **state)
{
    int64_t t0;
    (void)state;
    setup_all();
    expect_resp = SD_BYTES_NULL;
    t0 = sd_mono_now_ms();
    start_unary("/sd.test.Svc/Nope", sd_bytes_str("x"), NULL, 0, 10000);
    run_until(&unary_finished);
    assert_int_equal(F.unary_code, SD_RPC_UNIMPLEMENTED);
    assert_non_null(strstr(F.unary_msg, "/sd.test.Svc/Nope"));
    assert_true(sd_mono_now_ms() - t0 < 2000);

    /* A stream to an unknown method ends the same way. */
    open_stream("/sd.other.Svc/Stream", NULL, 0);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_UNIMPLEMENTED);
    assert_int_equal(F.srv_opens, 0);
    fx_teardown(1000);
}

static void test_server_stream(void **state)
{
    sd_rpc_stream *s;
    (void)state;
    setup_all();
    s = open_stream(P_SSTREAM, NULL, 0);
    assert_int_equal(sd_rpc_stream_send(s, sd_bytes_str("2500")), SD_OK);
    sd_rpc_stream_half_close(s);
    assert_int_equal(sd_rpc_stream_send(s, sd_bytes_str("more")), SD_ESTATE);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_OK);
    assert_string_equal(F.cli_msg, "fed");
    assert_int_equal(F.cli_msgs, 2500);
    assert_true(F.cli_order_ok);
    assert_int_equal(F.cli_closes, 1);
    run_until_count(&F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 0);
    fx_teardown(1000);
}

static void send_numbered(sd_rpc_stream *s, long n, size_t size)
{
    uint8_t buf[1024];
    assert_true(size >= 4 && size <= sizeof(buf));
    memset(buf, 0xab, sizeof(buf));
    for (long i = 0; i < n; i++) {
        buf[0] = (uint8_t)(i >> 24);
        buf[1] = (uint8_t)(i >> 16);
        buf[2] = (uint8_t)(i >> 8);
        buf[3] = (uint8_t)i;
        assert_int_equal(sd_rpc_stream_send(s, sd_bytes_make(buf, size)), SD_OK);
    }
}

static void cli_on_message_count(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fx *f = ctx;
    (void)s;
    if (msg.len == 3 && memcmp(msg.ptr, "bye", 3) == 0) {
        return;
    }
    if (msg.len < 4 || get_be32(msg) != (uint32_t)f->cli_msgs) {
        f->cli_order_ok = false;
    }
    f->cli_msgs++;
}

static void test_bidi_echo_10000(void **state)
{
    const sd_rpc_metadata md[] = { { "worker_id", "w-bidi" } };
    const sd_rpc_stream_handler h = { .on_message = cli_on_message_count,
                                      .on_close = cli_on_close,
                                      .ctx = &F };
    sd_rpc_stream *s = NULL;
    sd_err err = { 0 };
    (void)state;
    setup_all();
    cli_closed = false;
    assert_int_equal(sd_rpc_stream_open(F.ch, P_BIDI, md, 1, &h, &s, &err), SD_OK);
    send_numbered(s, 10000, 100);
    sd_rpc_stream_half_close(s);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_OK);
    assert_int_equal(F.cli_msgs, 10000);
    assert_true(F.cli_order_ok);
    assert_int_equal(F.srv_msgs, 10000);
    assert_true(F.srv_order_ok);
    assert_int_equal(F.srv_half_closes, 1);
    assert_string_equal(F.srv_worker, "w-bidi");
    run_until_count(&F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 0);
    fx_teardown(1000);
}

static void test_bidi_backpressure(void **state)
{
    const sd_rpc_stream_handler h = { .on_message = cli_on_message_count,
                                      .on_close = cli_on_close,
                                      .ctx = &F };
    sd_rpc_stream *s = NULL;
    int64_t t0;
    (void)state;
    setup_all();
    F.pause_after = 10;
    cli_closed = false;
    t0 = sd_mono_now_ms();
    assert_int_equal(sd_rpc_stream_open(F.ch, P_BIDI, NULL, 0, &h, &s, NULL), SD_OK);
    send_numbered(s, 200, 1024);
    sd_rpc_stream_half_close(s);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_OK);
    assert_int_equal(F.cli_msgs, 200);
    assert_int_equal(F.srv_msgs, 200);
    assert_true(F.cli_order_ok);
    assert_true(F.srv_order_ok);
    /* Messages received ahead of the pause wait for the resume: none arrive while paused. */
    assert_int_equal(F.msgs_while_paused, 0);
    assert_true(sd_mono_now_ms() - t0 >= 90); /* the server paused for 100 ms */
    fx_teardown(1000);
}

/* Eight bidi streams and 200 unary calls in flight together on one channel. */
static int conc_closed;
static int conc_ok;
static int conc_unary;
static int conc_unary_ok;

static void conc_on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    (void)s;
    (void)message;
    (void)ctx;
    conc_closed++;
    if (code == SD_RPC_OK) {
        conc_ok++;
    }
}

static void conc_on_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    (void)s;
    (void)msg;
    (*(int *)ctx)++;
}

static void conc_unary_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    (void)message;
    conc_unary++;
    if (code == SD_RPC_OK && response.len == 5 + strlen((const char *)ctx)) {
        conc_unary_ok++;
    }
}

static void test_concurrent_streams_and_unary(void **state)
{
    static const char req[] = "concurrent";
    int got[8] = { 0 };
    (void)state;
    setup_all();
    conc_closed = conc_ok = conc_unary = conc_unary_ok = 0;
    for (int i = 0; i < 8; i++) {
        sd_rpc_stream *s = NULL;
        const sd_rpc_stream_handler h = { .on_message = conc_on_message,
                                          .on_close = conc_on_close,
                                          .ctx = &got[i] };
        assert_int_equal(sd_rpc_stream_open(F.ch, P_BIDI, NULL, 0, &h, &s, NULL), SD_OK);
        send_numbered(s, 500, 256);
        sd_rpc_stream_half_close(s);
    }
    for (int i = 0; i < 200; i++) {
        assert_int_equal(sd_rpc_unary(F.ch, P_ECHO, sd_bytes_str(req), NULL, 0, 10000,
                                      conc_unary_done, (void *)req, NULL),
                         SD_OK);
    }
    run_until_count(&conc_closed, 8);
    run_until_count(&conc_unary, 200);
    assert_int_equal(conc_ok, 8);
    assert_int_equal(conc_unary_ok, 200);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(got[i], 501); /* 500 echoes + "bye" */
    }
    assert_int_equal(F.srv_msgs, 8 * 500);
    assert_int_equal(F.srv_half_closes, 8);
    run_until_count(&F.srv_closes, 208);
    assert_int_equal(F.srv_cancelled, 0);
    fx_teardown(1000);
}

static void test_client_stream(void **state)
{
    sd_rpc_stream *s;
    (void)state;
    setup_all();
    s = open_stream(P_CSTREAM, NULL, 0);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(sd_rpc_stream_send(s, sd_bytes_str("abc")), SD_OK);
    }
    sd_rpc_stream_half_close(s);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_OK);
    assert_int_equal(F.cli_msgs, 1);
    assert_int_equal(F.srv_msgs, 7);
    assert_int_equal(F.srv_bytes, 21);
    assert_int_equal(F.srv_half_closes, 1);
    fx_teardown(1000);
}

static void test_client_cancel(void **state)
{
    sd_rpc_stream *s;
    (void)state;
    setup_all();
    s = open_stream(P_BIDI, NULL, 0);
    send_numbered(s, 1, 4);
    run_until_count(&F.cli_msgs, 1); /* the echo arrived: the server call is live */
    sd_rpc_stream_cancel(s);
    assert_int_equal(sd_rpc_stream_send(s, sd_bytes_str("x")), SD_ESTATE);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_CANCELLED);
    run_until_count(&F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 1);
    assert_int_equal(F.srv_half_closes, 0);
    fx_teardown(1000);
}

/* The client cancels while the server is paused with messages received ahead of it: the call
 * ends (cancelled), nothing is delivered while paused, and the held buffers are freed. */
static sd_rpc_stream *cancel_target;

static void on_cancel_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    if (cancel_target != NULL && !cli_closed) {
        sd_rpc_stream_cancel(cancel_target);
    }
}

static void test_cancel_while_paused(void **state)
{
    ev_timer cancel;
    (void)state;
    setup_all();
    F.pause_after = 5;
    cancel_target = open_stream(P_BIDI, NULL, 0);
    send_numbered(cancel_target, 100, 1024);
    run_until_count(&F.srv_msgs, 5); /* paused now; the resume is 100 ms away */
    ev_timer_init(&cancel, on_cancel_timer, 0.02, 0.);
    ev_timer_start(F.loop, &cancel);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_CANCELLED);
    run_until_count(&F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 1);
    assert_int_equal(F.msgs_while_paused, 0);
    assert_true(F.srv_msgs <= 100);
    ev_timer_stop(F.loop, &cancel);
    ev_timer_stop(F.loop, &F.resume);
    cancel_target = NULL;
    fx_teardown(1000);
}

static void test_server_cancel(void **state)
{
    sd_rpc_stream *s;
    (void)state;
    setup_all();
    s = open_stream(P_BIDI, NULL, 0);
    send_numbered(s, 1, 4);
    run_until_count(&F.cli_msgs, 1);
    assert_non_null(F.live_call);
    sd_rpc_call_cancel(F.live_call);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_CANCELLED);
    run_until_count(&F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 1);
    fx_teardown(1000);
}

static void test_shutdown_with_live_stream(void **state)
{
    sd_rpc_stream *s;
    int64_t t0;
    int64_t took;
    (void)state;
    setup_all();
    s = open_stream(P_BIDI, NULL, 0);
    send_numbered(s, 3, 4);
    run_until_count(&F.cli_msgs, 3);
    t0 = sd_mono_now_ms();
    sd_rpc_server_shutdown(F.srv, 300, on_server_done, &F);
    run_until(&F.server_done);
    took = sd_mono_now_ms() - t0;
    assert_true(took >= 250);
    assert_true(took < 5000);
    assert_int_equal(F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 1);
    run_until(&cli_closed);
    assert_true(F.cli_code == SD_RPC_UNAVAILABLE || F.cli_code == SD_RPC_CANCELLED);
    sd_rpc_channel_destroy(F.ch);
    fx_stop_loop();
}

static void test_unary_deadline(void **state)
{
    int64_t t0;
    (void)state;
    setup_all();
    expect_resp = SD_BYTES_NULL;
    t0 = sd_mono_now_ms();
    start_unary(P_NEVER, sd_bytes_str("x"), NULL, 0, 200);
    run_until(&unary_finished);
    assert_int_equal(F.unary_code, SD_RPC_DEADLINE_EXCEEDED);
    assert_true(sd_mono_now_ms() - t0 >= 150);
    run_until_count(&F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 1);
    fx_teardown(1000);
}

static void test_channel_destroy_cancels(void **state)
{
    (void)state;
    setup_all();
    expect_resp = SD_BYTES_NULL;
    start_unary(P_NEVER, sd_bytes_str("x"), NULL, 0, 0);
    open_stream(P_BIDI, NULL, 0);
    run_until_count(&F.srv_opens, 2);
    sd_rpc_channel_destroy(F.ch);
    F.ch = NULL;
    run_until(&unary_finished);
    assert_int_equal(F.unary_code, SD_RPC_CANCELLED);
    run_until(&cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_CANCELLED);
    run_until_count(&F.srv_closes, 2);
    assert_int_equal(F.srv_cancelled, 2);
    sd_rpc_server_shutdown(F.srv, 0, on_server_done, &F);
    run_until(&F.server_done);
    fx_stop_loop();
}

static void test_listen_errors_and_unstarted_shutdown(void **state)
{
    sd_rpc_server *other = NULL;
    sd_err err = { 0 };
    char addr[64];
    int port = 0;
    const sd_rpc_handler h = { .on_open = echo_on_open, .ctx = &F };
    (void)state;
    setup_all();
    assert_int_equal(sd_rpc_server_create(F.rpc, &other, &err), SD_OK);
    assert_int_equal(sd_rpc_server_add_method(other, P_ECHO, SD_RPC_KIND_UNARY, &h), SD_OK);
    assert_int_equal(sd_rpc_server_add_method(other, P_ECHO, SD_RPC_KIND_UNARY, &h), SD_EEXIST);
    assert_int_equal(sd_rpc_server_add_method(other, "Echo", SD_RPC_KIND_UNARY, &h), SD_EINVAL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", F.port);
    assert_int_equal(sd_rpc_server_listen(other, addr, &port, &err), SD_EIO);
    assert_non_null(strstr(err.msg, addr));
    /* A server that never started still shuts down cleanly. */
    F.server_done = false;
    sd_rpc_server_shutdown(other, 0, on_server_done, &F);
    run_until(&F.server_done);
    F.server_done = false;
    fx_teardown(1000);
}

static void test_destroy_ends_leftovers(void **state)
{
    sd_rpc_server *other = NULL;
    sd_err err = { 0 };
    int port = 0;
    const sd_rpc_handler h = { .on_open = echo_on_open, .ctx = &F };
    (void)state;

    /* A bound, never started server, shut down and the hub destroyed at once (no loop run). */
    fx_start_loop(20.0);
    assert_int_equal(sd_rpc_server_create(F.rpc, &other, &err), SD_OK);
    assert_int_equal(sd_rpc_server_add_method(other, P_ECHO, SD_RPC_KIND_UNARY, &h), SD_OK);
    assert_int_equal(sd_rpc_server_listen(other, "127.0.0.1:0", &port, &err), SD_OK);
    sd_rpc_server_shutdown(other, 0, on_server_done, &F);
    sd_rpc_destroy(F.rpc);
    assert_true(F.server_done);
    F.rpc = NULL;
    ev_ref(F.loop);
    ev_timer_stop(F.loop, &F.watchdog);
    ev_run(F.loop, 0); /* returns at once: the hub left no reference behind */
    ev_loop_destroy(F.loop);

    /* A live server and a live stream, destroyed without shutting down first. */
    setup_all();
    open_stream(P_BIDI, NULL, 0);
    run_until_count(&F.srv_opens, 1);
    sd_rpc_channel_destroy(F.ch);
    sd_rpc_destroy(F.rpc);
    assert_true(cli_closed);
    assert_int_equal(F.cli_code, SD_RPC_CANCELLED);
    assert_int_equal(F.srv_closes, 1);
    assert_int_equal(F.srv_cancelled, 1);
    ev_ref(F.loop);
    ev_timer_stop(F.loop, &F.watchdog);
    ev_run(F.loop, 0);
    ev_loop_destroy(F.loop);
}

/* A plain connect to 127.0.0.1:port: true when the kernel accepted it. */
static bool raw_connect(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* A socket listening before any hub or server exists (what `sundial` binds first thing):
 * connects succeed at once, and a call made before the server started is served once the
 * server adopts the socket and starts. Its shutdown closes the socket. */
static void test_early_listener(void **state)
{
    sd_err err = { 0 };
    int fd = -1, port = 0, fd2 = -1, port2 = 0;
    char target[64];
    const sd_rpc_handler h = { .on_open = echo_on_open, .on_close = srv_on_close, .ctx = &F };
    (void)state;
    assert_int_equal(sd_rpc_listen_early("127.0.0.1", 0, &fd, &port, &err), SD_OK);
    assert_true(fd >= 0 && port > 0);
    assert_true(raw_connect(port)); /* accepted by the kernel, closed before anyone reads it */
    /* The port is taken now; a name is left to gRPC (nothing bound); a bad port is refused. */
    assert_int_equal(sd_rpc_listen_early("127.0.0.1", port, &fd2, &port2, &err), SD_EIO);
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    assert_non_null(strstr(err.msg, target));
    assert_int_equal(fd2, -1);
    assert_int_equal(sd_rpc_listen_early("localhost", 0, &fd2, &port2, &err), SD_OK);
    assert_int_equal(fd2, -1);
    assert_int_equal(sd_rpc_listen_early("127.0.0.1", 70000, &fd2, &port2, &err), SD_EINVAL);

    fx_start_loop(20.0);
    assert_int_equal(sd_rpc_server_create(F.rpc, &F.srv, &err), SD_OK);
    assert_int_equal(sd_rpc_server_add_method(F.srv, P_ECHO, SD_RPC_KIND_UNARY, &h), SD_OK);
    assert_int_equal(sd_rpc_server_adopt(F.srv, fd, &err), SD_OK);
    /* The client connects and sends its call before the server runs. */
    assert_int_equal(sd_rpc_channel_create(F.rpc, target, &F.ch, &err), SD_OK);
    expect_resp = sd_bytes_str("echo:early");
    start_unary(P_ECHO, sd_bytes_str("early"), NULL, 0, 5000);
    for (int i = 0; i < 20; i++) {
        ev_run(F.loop, EVRUN_NOWAIT);
    }
    assert_false(unary_finished);
    assert_int_equal(sd_rpc_server_start(F.srv, &err), SD_OK);
    run_until(&unary_finished);
    assert_int_equal(F.unary_code, SD_RPC_OK);
    assert_true(F.unary_match);
    run_until_count(&F.srv_closes, 1);
    fx_teardown(1000);
    assert_false(raw_connect(port)); /* closed at shutdown */
}

/* ---------------------------------------------------------------- run_on_loop */

#define N_THREADS 4
#define N_TASKS   2000

static pthread_t loop_thread;
static int tasks_run;
static bool tasks_wrong_thread;

static void task_fn(void *ctx)
{
    (void)ctx;
    if (!pthread_equal(pthread_self(), loop_thread)) {
        tasks_wrong_thread = true;
    }
    tasks_run++;
}

static void *poster(void *arg)
{
    sd_rpc *rpc = arg;
    for (int i = 0; i < N_TASKS; i++) {
        while (sd_rpc_run_on_loop(rpc, task_fn, NULL) != SD_OK) {
        }
    }
    return NULL;
}

static void test_run_on_loop_threads(void **state)
{
    pthread_t th[N_THREADS];
    ev_timer keep;
    (void)state;
    fx_start_loop(20.0);
    loop_thread = pthread_self();
    tasks_run = 0;
    tasks_wrong_thread = false;
    ev_timer_init(&keep, on_watchdog, 30.0, 0.); /* keeps the loop blocking, never fires */
    ev_timer_start(F.loop, &keep);
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, poster, F.rpc), 0);
    }
    run_until_count(&tasks_run, N_THREADS * N_TASKS);
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
    }
    assert_int_equal(tasks_run, N_THREADS * N_TASKS);
    assert_false(tasks_wrong_thread);
    ev_timer_stop(F.loop, &keep);
    fx_stop_loop();
}

/* ---------------------------------------------------------------- two loops, three threads */

/*
 * The C SDK's State API path, on two hubs: a server and a client each on a loop of its own,
 * run by sd_rpc_loop_run on a thread of its own (so either pump may run callbacks while its
 * loop polls), and requests from a third thread through sd_rpc_run_on_loop or
 * sd_rpc_run_soon, each answer awaited on a condition variable. A wake-up lost anywhere on
 * the way (a hand-over, the pump's inline dispatch, a send or receive left to the other
 * thread) leaves a request unanswered with both loops idle: the test waits 5 s for each.
 */
#define XL_ROUNDS 3000

typedef struct xl_side {
    struct ev_loop *loop;
    sd_rpc *rpc;
    ev_async keep; /* holds the loop until the test ends */
    pthread_t th;
    bool ready;
} xl_side;

static struct {
    xl_side srv_side, cli_side;
    sd_rpc_server *srv;
    sd_rpc_channel *ch;
    sd_rpc_stream *s;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long answered;
    bool bad_answer;
    bool cli_closed;
    sd_rpc_code cli_code;
    bool ended; /* the test's last sd_rpc_run_on_loop calls have returned */
} XL;

static void xl_signal(void)
{
    pthread_cond_broadcast(&XL.cv);
}

static void xl_keep_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

static void xl_srv_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    (void)call;
    (void)req;
    (void)ctx;
}

static void xl_srv_msg(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    (void)ctx;
    if (sd_rpc_call_send(call, msg) != SD_OK) {
        sd_rpc_call_cancel(call);
    }
}

static void xl_srv_half_close(sd_rpc_call *call, void *ctx)
{
    (void)ctx;
    sd_rpc_call_finish(call, SD_RPC_OK, NULL);
}

static void xl_cli_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    long want;
    (void)s;
    (void)ctx;
    pthread_mutex_lock(&XL.mu);
    want = XL.answered;
    if (msg.len != sizeof(want) || memcmp(msg.ptr, &want, sizeof(want)) != 0) {
        XL.bad_answer = true;
    }
    XL.answered++;
    xl_signal();
    pthread_mutex_unlock(&XL.mu);
}

static void xl_cli_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    (void)s;
    (void)message;
    (void)ctx;
    pthread_mutex_lock(&XL.mu);
    XL.cli_closed = true;
    XL.cli_code = code;
    xl_signal();
    pthread_mutex_unlock(&XL.mu);
}

/* A loop thread: its hub, then (the server side) the server; the loop runs until the test
 * has stopped the keep-alive and everything on the hub has ended. */
static void *xl_loop_main(void *arg)
{
    xl_side *side = arg;
    sd_err err = { 0 };
    bool ok = sd_rpc_create(side->loop, &side->rpc, &err) == SD_OK;
    if (ok && side == &XL.srv_side) {
        static const sd_rpc_handler h = { .on_open = xl_srv_open,
                                          .on_message = xl_srv_msg,
                                          .on_half_close = xl_srv_half_close };
        ok = sd_rpc_server_create(side->rpc, &XL.srv, &err) == SD_OK &&
             sd_rpc_server_add_method(XL.srv, P_BIDI, SD_RPC_KIND_BIDI, &h) == SD_OK &&
             sd_rpc_server_listen(XL.srv, "127.0.0.1:0", &XL.port, &err) == SD_OK &&
             sd_rpc_server_start(XL.srv, &err) == SD_OK;
    }
    ev_async_init(&side->keep, xl_keep_cb);
    ev_async_start(side->loop, &side->keep);
    pthread_mutex_lock(&XL.mu);
    side->ready = ok;
    xl_signal();
    pthread_mutex_unlock(&XL.mu);
    if (ok) {
        sd_rpc_loop_run(side->loop);
    }
    /* A task does not hold the loop: the hub must outlive the call that posted it. */
    pthread_mutex_lock(&XL.mu);
    while (!XL.ended) {
        pthread_cond_wait(&XL.cv, &XL.mu);
    }
    pthread_mutex_unlock(&XL.mu);
    sd_rpc_destroy(side->rpc);
    return NULL;
}

static void xl_open_task(void *ctx)
{
    static const sd_rpc_stream_handler h = { .on_message = xl_cli_msg, .on_close = xl_cli_close };
    char target[64];
    sd_err err = { 0 };
    (void)ctx;
    snprintf(target, sizeof(target), "127.0.0.1:%d", XL.port);
    if (sd_rpc_channel_create(XL.cli_side.rpc, target, &XL.ch, &err) != SD_OK ||
        sd_rpc_stream_open(XL.ch, P_BIDI, NULL, 0, &h, &XL.s, &err) != SD_OK) {
        xl_cli_close(NULL, SD_RPC_INTERNAL, "open", NULL);
    }
}

static void xl_send_task(void *ctx)
{
    long i = (long)(intptr_t)ctx;
    if (sd_rpc_stream_send(XL.s, sd_bytes_make(&i, sizeof(i))) != SD_OK) {
        sd_rpc_stream_cancel(XL.s);
    }
}

static void xl_half_close_task(void *ctx)
{
    (void)ctx;
    sd_rpc_stream_half_close(XL.s);
}

static void xl_cli_end_task(void *ctx)
{
    (void)ctx;
    sd_rpc_channel_destroy(XL.ch);
    ev_async_stop(XL.cli_side.loop, &XL.cli_side.keep);
}

static void xl_srv_end_task(void *ctx)
{
    (void)ctx;
    sd_rpc_server_shutdown(XL.srv, 0, NULL, NULL);
    ev_async_stop(XL.srv_side.loop, &XL.srv_side.keep);
}

/* Wait until *flag (under XL.mu) or the deadline; false on the deadline. */
static bool xl_wait(const bool *flag, const long *count, long want, double secs)
{
    struct timespec until;
    bool ok = true;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(secs * watchdog_mult());
    pthread_mutex_lock(&XL.mu);
    while (ok && !(flag != NULL ? *flag : *count >= want)) {
        ok = pthread_cond_timedwait(&XL.cv, &XL.mu, &until) == 0 ||
             (flag != NULL ? *flag : *count >= want);
    }
    pthread_mutex_unlock(&XL.mu);
    return ok;
}

static void test_two_loops_request_answer(void **state)
{
    (void)state;
    memset(&XL, 0, sizeof(XL));
    pthread_mutex_init(&XL.mu, NULL);
    pthread_cond_init(&XL.cv, NULL);
    XL.srv_side.loop = ev_loop_new(EVFLAG_AUTO);
    XL.cli_side.loop = ev_loop_new(EVFLAG_AUTO);
    assert_int_equal(pthread_create(&XL.srv_side.th, NULL, xl_loop_main, &XL.srv_side), 0);
    assert_true(xl_wait(&XL.srv_side.ready, NULL, 0, 10.0));
    assert_int_equal(pthread_create(&XL.cli_side.th, NULL, xl_loop_main, &XL.cli_side), 0);
    assert_true(xl_wait(&XL.cli_side.ready, NULL, 0, 10.0));
    assert_int_equal(sd_rpc_run_on_loop(XL.cli_side.rpc, xl_open_task, NULL), SD_OK);
    for (long i = 0; i < XL_ROUNDS; i++) {
        /* Alternate the two hand-overs: queued for the loop, or run here if it is idle. */
        sd_status st = i % 2 == 0
                           ? sd_rpc_run_on_loop(XL.cli_side.rpc, xl_send_task, (void *)(intptr_t)i)
                           : sd_rpc_run_soon(XL.cli_side.rpc, xl_send_task, (void *)(intptr_t)i);
        assert_int_equal(st, SD_OK);
        if (!xl_wait(NULL, &XL.answered, i + 1, 5.0)) {
            fail_msg("request %ld of %d unanswered after 5 s (a lost wake-up)", i, XL_ROUNDS);
        }
    }
    assert_false(XL.bad_answer);
    assert_int_equal(sd_rpc_run_on_loop(XL.cli_side.rpc, xl_half_close_task, NULL), SD_OK);
    assert_true(xl_wait(&XL.cli_closed, NULL, 0, 10.0));
    assert_int_equal(XL.cli_code, SD_RPC_OK);
    assert_int_equal(sd_rpc_run_on_loop(XL.cli_side.rpc, xl_cli_end_task, NULL), SD_OK);
    assert_int_equal(sd_rpc_run_on_loop(XL.srv_side.rpc, xl_srv_end_task, NULL), SD_OK);
    pthread_mutex_lock(&XL.mu);
    XL.ended = true;
    xl_signal();
    pthread_mutex_unlock(&XL.mu);
    pthread_join(XL.cli_side.th, NULL);
    pthread_join(XL.srv_side.th, NULL);
    ev_loop_destroy(XL.cli_side.loop);
    ev_loop_destroy(XL.srv_side.loop);
    pthread_cond_destroy(&XL.cv);
    pthread_mutex_destroy(&XL.mu);
}

/* ---------------------------------------------------------------- OOM and misc */

static void test_oom_setup(void **state)
{
    (void)state;
    for (long n = 1;; n++) {
        sd_rpc_server *srv = NULL;
        sd_rpc_channel *ch = NULL;
        sd_err err = { 0 };
        sd_status st;
        const sd_rpc_handler h = { .on_open = echo_on_open, .ctx = &F };
        bool done = false;

        fx_start_loop(20.0);
        sd_alloc_fail_after(n, 0);
        st = sd_rpc_server_create(F.rpc, &srv, &err);
        if (st == SD_OK) {
            st = sd_rpc_server_add_method(srv, P_ECHO, SD_RPC_KIND_UNARY, &h);
        }
        if (st == SD_OK) {
            st = sd_rpc_channel_create(F.rpc, "127.0.0.1:1", &ch, &err);
        }
        sd_alloc_fail_after(0, 0);
        if (st != SD_OK) {
            assert_int_equal(st, SD_ENOMEM);
        }
        sd_rpc_channel_destroy(ch);
        if (srv != NULL) {
            F.server_done = false;
            sd_rpc_server_shutdown(srv, 0, on_server_done, &F);
            run_until(&F.server_done);
        }
        fx_stop_loop();
        done = st == SD_OK;
        if (done) {
            break;
        }
        assert_true(n < 50);
    }
}

static void test_code_from_status(void **state)
{
    static const struct {
        const char *name;
        sd_status st;
        sd_rpc_code code;
    } rows[] = {
        { "ok", SD_OK, SD_RPC_OK },
        { "einval", SD_EINVAL, SD_RPC_INVALID_ARGUMENT },
        { "eproto", SD_EPROTO, SD_RPC_INVALID_ARGUMENT },
        { "enotfound", SD_ENOTFOUND, SD_RPC_NOT_FOUND },
        { "estate", SD_ESTATE, SD_RPC_FAILED_PRECONDITION },
        { "eunimpl", SD_EUNIMPL, SD_RPC_UNIMPLEMENTED },
        { "ecanceled", SD_ECANCELED, SD_RPC_CANCELLED },
        { "enomem", SD_ENOMEM, SD_RPC_RESOURCE_EXHAUSTED },
        { "etimeout", SD_ETIMEOUT, SD_RPC_DEADLINE_EXCEEDED },
        { "eexist", SD_EEXIST, SD_RPC_ALREADY_EXISTS },
        { "eunavail", SD_EUNAVAIL, SD_RPC_UNAVAILABLE },
        { "einternal", SD_EINTERNAL, SD_RPC_INTERNAL },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (sd_rpc_code_from_status(rows[i].st) != rows[i].code) {
            fail_msg("row %s", rows[i].name);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_code_from_status),
        cmocka_unit_test(test_unary_roundtrip_metadata),
        cmocka_unit_test(test_unary_error_status),
        cmocka_unit_test(test_bad_client_metadata),
        cmocka_unit_test(test_large_messages),
        cmocka_unit_test(test_unknown_method),
        cmocka_unit_test(test_server_stream),
        cmocka_unit_test(test_bidi_echo_10000),
        cmocka_unit_test(test_bidi_backpressure),
        cmocka_unit_test(test_concurrent_streams_and_unary),
        cmocka_unit_test(test_client_stream),
        cmocka_unit_test(test_client_cancel),
        cmocka_unit_test(test_cancel_while_paused),
        cmocka_unit_test(test_server_cancel),
        cmocka_unit_test(test_shutdown_with_live_stream),
        cmocka_unit_test(test_unary_deadline),
        cmocka_unit_test(test_channel_destroy_cancels),
        cmocka_unit_test(test_listen_errors_and_unstarted_shutdown),
        cmocka_unit_test(test_destroy_ends_leftovers),
        cmocka_unit_test(test_early_listener),
        cmocka_unit_test(test_run_on_loop_threads),
        cmocka_unit_test(test_two_loops_request_answer),
        cmocka_unit_test(test_oom_setup),
    };
    if (getenv("SD_TEST_FILTER") != NULL) {
        cmocka_set_test_filter(getenv("SD_TEST_FILTER"));
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
