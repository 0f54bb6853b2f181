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
 * Usage: bench_transport [-p] [-n N] [-s SIZE] [-w WINDOW] [-m echo|sink|both]
 * -p puts the server in a forked child process (as the runner and an SDK worker would be).
 * Prints one line per mode: messages/s and payload MB/s (10^6 bytes, one direction).
 * Not a test: numbers vary with the machine and its load.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void srv_open(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    (void)call;
    (void)req;
    (void)ctx;
}

static void srv_echo(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    (void)ctx;
    if (sd_rpc_call_send(call, msg) != SD_OK) {
        sd_rpc_call_cancel(call);
    }
}

static void srv_sink(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    bench *b = ctx;
    (void)call;
    (void)msg;
    b->srv_count++;
}

static void srv_half_close(sd_rpc_call *call, void *ctx)
{
    bench *b = ctx;
    char num[32];
    snprintf(num, sizeof(num), "%ld", b->srv_count);
    if (sd_rpc_call_send(call, sd_bytes_make(num, strlen(num))) != SD_OK) {
        sd_rpc_call_cancel(call);
        return;
    }
    sd_rpc_call_finish(call, SD_RPC_OK, NULL);
}

static void pump_sends(bench *b)
{
    if (b->s == NULL) {
        return;
    }
    while (b->sent < b->n && (b->echo ? b->sent - b->answered < b->window
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

static int start_server(bench *b, sd_rpc *rpc, sd_rpc_server **srv, int *port)
{
    sd_err err = { 0 };
    const sd_rpc_handler echo_h = {
        .on_open = srv_open, .on_message = srv_echo, .on_half_close = srv_half_close, .ctx = b
    };
    const sd_rpc_handler sink_h = {
        .on_open = srv_open, .on_message = srv_sink, .on_half_close = srv_half_close, .ctx = b
    };
    if (sd_rpc_server_create(rpc, srv, &err) != SD_OK ||
        sd_rpc_server_add_method(*srv, P_ECHO, SD_RPC_KIND_BIDI, &echo_h) != SD_OK ||
        sd_rpc_server_add_method(*srv, P_SINK, SD_RPC_KIND_BIDI, &sink_h) != SD_OK ||
        sd_rpc_server_listen(*srv, "127.0.0.1:0", port, &err) != SD_OK ||
        sd_rpc_server_start(*srv, &err) != SD_OK) {
        fprintf(stderr, "bench_transport: server setup failed: %s\n", sd_err_msg(&err));
        return 1;
    }
    return 0;
}

/* Two-process mode: the server child exits when the parent closes its end of the pipe. */
static sd_rpc_server *child_srv;

static void child_on_parent_gone(struct ev_loop *loop, ev_io *w, int revents)
{
    bench *b = w->data;
    (void)revents;
    ev_io_stop(loop, w);
    sd_rpc_server_shutdown(child_srv, 0, on_server_done, b);
}

static int run_server_child(bench *b, int cmd_fd, int port_fd)
{
    ev_io gone;
    int port = 0;
    if (sd_rpc_create(b->loop, &b->rpc, NULL) != SD_OK ||
        start_server(b, b->rpc, &child_srv, &port) != 0) {
        return 1;
    }
    if (write(port_fd, &port, sizeof(port)) != (ssize_t)sizeof(port)) {
        return 1;
    }
    close(port_fd);
    ev_io_init(&gone, child_on_parent_gone, cmd_fd, EV_READ);
    gone.data = b;
    ev_io_start(b->loop, &gone);
    while (!b->server_done) {
        ev_run(b->loop, EVRUN_ONCE);
    }
    sd_rpc_destroy(b->rpc);
    return 0;
}

int main(int argc, char **argv)
{
    bench b;
    sd_rpc_server *srv = NULL;
    sd_err err = { 0 };
    char target[64];
    const char *mode = "both";
    bool two_procs = false;
    pid_t child = -1;
    int cmd_pipe[2] = { -1, -1 };
    int port = 0;
    int rc = 0;

    memset(&b, 0, sizeof(b));
    b.n = 100000;
    b.size = 1024;
    b.window = 256;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-p") == 0) {
            two_procs = true;
        } else if (i + 1 < argc && strcmp(argv[i], "-n") == 0) {
            b.n = strtol(argv[++i], NULL, 10);
        } else if (i + 1 < argc && strcmp(argv[i], "-s") == 0) {
            b.size = (size_t)strtoul(argv[++i], NULL, 10);
        } else if (i + 1 < argc && strcmp(argv[i], "-w") == 0) {
            b.window = strtol(argv[++i], NULL, 10);
        } else if (i + 1 < argc && strcmp(argv[i], "-m") == 0) {
            mode = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [-p] [-n N] [-s SIZE] [-w WINDOW] [-m echo|sink|both]\n",
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

    if (two_procs) {
        /* Fork before any gRPC state exists, so the child starts clean. */
        int port_pipe[2];
        if (pipe(cmd_pipe) != 0 || pipe(port_pipe) != 0) {
            perror("pipe");
            return 1;
        }
        child = fork();
        if (child < 0) {
            perror("fork");
            return 1;
        }
        if (child == 0) {
            close(cmd_pipe[1]);
            close(port_pipe[0]);
            b.loop = ev_loop_new(EVFLAG_AUTO);
            rc = run_server_child(&b, cmd_pipe[0], port_pipe[1]);
            ev_loop_destroy(b.loop);
            sd_free(b.payload);
            _exit(rc);
        }
        close(cmd_pipe[0]);
        close(port_pipe[1]);
        if (read(port_pipe[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
            fprintf(stderr, "bench_transport: the server child failed\n");
            return 1;
        }
        close(port_pipe[0]);
    }

    b.loop = ev_loop_new(EVFLAG_AUTO);
    ev_prepare_init(&b.refill, on_prepare);
    b.refill.data = &b;
    if (sd_rpc_create(b.loop, &b.rpc, &err) != SD_OK) {
        fprintf(stderr, "bench_transport: %s\n", sd_err_msg(&err));
        return 1;
    }
    if (!two_procs && start_server(&b, b.rpc, &srv, &port) != 0) {
        return 1;
    }
    printf("%s\n", two_procs ? "client and server in two processes"
                             : "client and server in one process, one loop");
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
    if (srv != NULL) {
        sd_rpc_server_shutdown(srv, 0, on_server_done, &b);
        while (!b.server_done) {
            ev_run(b.loop, EVRUN_ONCE);
        }
    }
    sd_rpc_destroy(b.rpc);
    ev_loop_destroy(b.loop);
    if (two_procs) {
        int wst = 0;
        close(cmd_pipe[1]);
        waitpid(child, &wst, 0);
        if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
            rc = 1;
        }
    }
    sd_free(b.payload);
    return rc;
}
