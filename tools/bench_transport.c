/*
 * Sundial: bench_transport — single-stream throughput of runner/transport over loopback.
 *
 * One process, one libev loop, one server and one client (so both sides share the loop thread
 * and the machine's cores, as the runner and an in-process SDK harness would). A bidi stream
 * carries N messages of SIZE bytes with at most WINDOW of them unanswered:
 *
 *   echo  the server returns every message; the client counts the echoes
 *   sink  the server only counts, and answers once when the client half-closes
 *
 * Usage: bench_transport [-n N] [-s SIZE] [-w WINDOW] [-m echo|sink|both]
 * Prints one line per mode: messages/s and payload MB/s (10^6 bytes, one direction).
 * Not a test: numbers vary with the machine and its load.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/time.h"
#include "runner/transport/rpc.h"

#define P_ECHO "/sd.bench.Svc/Echo"
#define P_SINK "/sd.bench.Svc/Sink"

typedef struct bench {
    struct ev_loop *loop;
    sd_rpc *rpc;
    sd_rpc_channel *ch;
    sd_rpc_stream *s;
    uint8_t *payload;
    long n;
    size_t size;
    long window;
    bool echo;
    long sent;
    long answered;
    long srv_count;
    bool closed;
    bool server_done;
    sd_rpc_code code;
    ev_prepare refill;
} bench;

static void srv_open(sd_call *call, sd_bytes req, void *ctx)
{
    (void)call;
    (void)req;
    (void)ctx;
}

static void srv_echo(sd_call *call, sd_bytes msg, void *ctx)
{
    (void)ctx;
    if (sd_call_send(call, msg) != SD_OK) {
        sd_call_cancel(call);
    }
}

static void srv_sink(sd_call *call, sd_bytes msg, void *ctx)
{
    bench *b = ctx;
    (void)call;
    (void)msg;
    b->srv_count++;
}

static void srv_half_close(sd_call *call, void *ctx)
{
    bench *b = ctx;
    char num[32];
    snprintf(num, sizeof(num), "%ld", b->srv_count);
    if (sd_call_send(call, sd_bytes_make(num, strlen(num))) != SD_OK) {
        sd_call_cancel(call);
        return;
    }
    sd_call_finish(call, SD_RPC_OK, NULL);
}

static void pump_sends(bench *b)
{
    if (b->s == NULL) {
        return;
    }
    while (b->sent < b->n &&
           (b->echo ? b->sent - b->answered < b->window
                    : sd_rpc_stream_send_queue_len(b->s) < (size_t)b->window)) {
        if (sd_rpc_stream_send(b->s, sd_bytes_make(b->payload, b->size)) != SD_OK) {
            sd_rpc_stream_cancel(b->s);
            return;
        }
        b->sent++;
    }
    if (b->sent == b->n) {
        sd_rpc_stream_half_close(b->s);
        b->sent++; /* half-close once */
    }
}

/* Sink mode refills the send queue whenever the loop is about to block. */
static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
    bench *b = w->data;
    (void)loop;
    (void)revents;
    if (!b->echo && !b->closed && b->sent <= b->n) {
        pump_sends(b);
    }
}

static void cli_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    bench *b = ctx;
    (void)s;
    (void)msg;
    if (b->echo) {
        b->answered++;
        pump_sends(b);
    }
}

static void cli_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    bench *b = ctx;
    (void)s;
    if (code != SD_RPC_OK) {
        fprintf(stderr, "bench_transport: stream ended with %d: %s\n", (int)code, message);
    }
    b->code = code;
    b->closed = true;
    b->s = NULL;
}

static void on_server_done(void *ctx)
{
    bench *b = ctx;
    b->server_done = true;
}

static int run_mode(bench *b, bool echo)
{
    const sd_rpc_stream_handler h = { .on_message = cli_message, .on_close = cli_close, .ctx = b };
    sd_err err = { 0 };
    int64_t t0;
    double secs;

    b->echo = echo;
    b->sent = b->answered = b->srv_count = 0;
    b->closed = false;
    t0 = sd_mono_now_ns();
    if (sd_rpc_stream_open(b->ch, echo ? P_ECHO : P_SINK, NULL, 0, &h, &b->s, &err) != SD_OK) {
        fprintf(stderr, "bench_transport: %s\n", sd_err_msg(&err));
        return 1;
    }
    pump_sends(b);
    ev_prepare_start(b->loop, &b->refill);
    while (!b->closed) {
        ev_run(b->loop, EVRUN_ONCE);
    }
    ev_prepare_stop(b->loop, &b->refill);
    secs = (double)(sd_mono_now_ns() - t0) / 1e9;
    if (b->code != SD_RPC_OK) {
        return 1;
    }
    printf("%-4s n=%ld size=%zu window=%ld: %.0f msg/s, %.1f MB/s (%.3f s)\n",
           echo ? "echo" : "sink", b->n, b->size, b->window, (double)b->n / secs,
           (double)b->n * (double)b->size / secs / 1e6, secs);
    return 0;
}

int main(int argc, char **argv)
{
    bench b;
    sd_rpc_server *srv = NULL;
    sd_err err = { 0 };
    char target[64];
    const char *mode = "both";
    int port = 0;
    int rc = 0;

    memset(&b, 0, sizeof(b));
    b.n = 100000;
    b.size = 1024;
    b.window = 256;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-n") == 0) {
            b.n = strtol(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-s") == 0) {
            b.size = (size_t)strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-w") == 0) {
            b.window = strtol(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-m") == 0) {
            mode = argv[i + 1];
        } else {
            fprintf(stderr, "usage: %s [-n N] [-s SIZE] [-w WINDOW] [-m echo|sink|both]\n",
                    argv[0]);
            return 2;
        }
    }
    if (b.n <= 0 || b.size == 0 || b.window <= 0) {
        fprintf(stderr, "bench_transport: n, size and window must be positive\n");
        return 2;
    }
    b.payload = sd_malloc(b.size);
    if (b.payload == NULL) {
        return 1;
    }
    memset(b.payload, 0x5a, b.size);
    b.loop = ev_loop_new(EVFLAG_AUTO);
    ev_prepare_init(&b.refill, on_prepare);
    b.refill.data = &b;

    const sd_rpc_handler echo_h = {
        .on_open = srv_open, .on_message = srv_echo, .on_half_close = srv_half_close, .ctx = &b
    };
    const sd_rpc_handler sink_h = {
        .on_open = srv_open, .on_message = srv_sink, .on_half_close = srv_half_close, .ctx = &b
    };
    if (sd_rpc_create(b.loop, &b.rpc, &err) != SD_OK ||
        sd_rpc_server_create(b.rpc, &srv, &err) != SD_OK ||
        sd_rpc_server_add_method(srv, P_ECHO, SD_RPC_KIND_BIDI, &echo_h) != SD_OK ||
        sd_rpc_server_add_method(srv, P_SINK, SD_RPC_KIND_BIDI, &sink_h) != SD_OK ||
        sd_rpc_server_listen(srv, "127.0.0.1:0", &port, &err) != SD_OK ||
        sd_rpc_server_start(srv, &err) != SD_OK) {
        fprintf(stderr, "bench_transport: setup failed: %s\n", sd_err_msg(&err));
        return 1;
    }
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    if (sd_rpc_channel_create(b.rpc, target, &b.ch, &err) != SD_OK) {
        fprintf(stderr, "bench_transport: %s\n", sd_err_msg(&err));
        return 1;
    }
    if (strcmp(mode, "echo") == 0 || strcmp(mode, "both") == 0) {
        rc |= run_mode(&b, true);
    }
    if (strcmp(mode, "sink") == 0 || strcmp(mode, "both") == 0) {
        rc |= run_mode(&b, false);
    }
    sd_rpc_channel_destroy(b.ch);
    sd_rpc_server_shutdown(srv, 0, on_server_done, &b);
    while (!b.server_done) {
        ev_run(b.loop, EVRUN_ONCE);
    }
    sd_rpc_destroy(b.rpc);
    ev_loop_destroy(b.loop);
    sd_free(b.payload);
    return rc;
}
