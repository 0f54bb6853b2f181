/*
 * Sundial: bench_transport — single-stream throughput of runner/transport over loopback,
 * against raw gRPC C core on the same stream.
 *
 * One process, one libev loop, one server and one client (so both sides share the loop thread
 * and the machine's cores, as the runner and an in-process SDK harness would). A bidi stream
 * carries N messages of SIZE bytes with at most WINDOW of them unanswered; message i holds its
 * number and a byte derived from it (sd_rpc_rawbench_fill), so every echo is checked:
 *
 *   echo  the server returns every message; the client checks each echo's bytes and order
 *   sink  the server only counts, and answers once when the client half-closes
 *
 * Default (echo, one process): ROUNDS interleaved rounds (the order alternating) of
 *   transport  the echo stream through Sundial's transport (hub, pump thread, libev loop)
 *   raw        the same stream written straight against gRPC C core on one thread
 *              (runner/transport/rpc_rawbench.c: no libev, no hub, no thread hop)
 * each round with its own server, channel and hub or completion queue. Prints each round,
 * min / median / max msg/s of each side, and last `ratio transport/raw X`: the median
 * transport throughput over the median raw one (higher is better for Sundial). Wall time:
 * both sides use gRPC's threads and the transport its pump thread too; the process CPU
 * seconds are printed beside it. Numbers vary with the machine and its load.
 *
 * Usage: bench_transport [-p] [-n N] [-s SIZE] [-w WINDOW] [-r ROUNDS] [-m echo|sink|both]
 * -p (server in a forked child process, as the runner and an SDK worker would be) and the
 * sink mode are single transport-only probes (one line per mode: msg/s and MB/s), no ratio.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/time.h"
#include "runner/transport/rpc.h"
#include "runner/transport/rpc_rawbench.h"

#define P_ECHO "/sd.bench.Svc/Echo"
#define P_SINK "/sd.bench.Svc/Sink"

typedef struct bench {
    struct ev_loop *loop;
    sd_rpc *rpc;
    sd_rpc_channel *ch;
    sd_rpc_stream *s;
    uint8_t *payload; /* the message being sent, refilled for each */
    long n;
    size_t size;
    long window;
    bool echo;
    long sent;
    long answered;
    long srv_count;
    bool closed;
    bool corrupt; /* an echo differed from its message */
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

static void srv_echo_half_close(sd_rpc_call *call, void *ctx)
{
    (void)ctx;
    sd_rpc_call_finish(call, SD_RPC_OK, NULL);
}

static void pump_sends(bench *b)
{
    if (b->s == NULL) {
        return;
    }
    while (b->sent < b->n && (b->echo ? b->sent - b->answered < b->window
                                      : sd_rpc_stream_send_queue_len(b->s) < (size_t)b->window)) {
        sd_rpc_rawbench_fill(b->payload, b->size, (uint64_t)b->sent);
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
    if (b->echo) {
        if (!sd_rpc_rawbench_check(msg, b->size, (uint64_t)b->answered)) {
            if (!b->corrupt) {
                fprintf(stderr, "bench_transport: echo %ld differs from the message sent\n",
                        b->answered);
            }
            b->corrupt = true;
            sd_rpc_stream_cancel(s);
            return;
        }
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

/* One stream in mode echo or sink. OUT: ns, its wall time; prints a line if `print`. */
static int run_mode(bench *b, bool echo, bool print, int64_t *ns)
{
    const sd_rpc_stream_handler h = { .on_message = cli_message, .on_close = cli_close, .ctx = b };
    sd_err err = { 0 };
    int64_t t0;
    double secs;

    b->echo = echo;
    b->sent = b->answered = b->srv_count = 0;
    b->closed = false;
    b->corrupt = false;
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
    *ns = sd_mono_now_ns() - t0;
    secs = (double)*ns / 1e9;
    if (b->code != SD_RPC_OK || b->corrupt || (echo && b->answered != b->n)) {
        fprintf(stderr, "bench_transport: %s stream failed (%ld of %ld echoes)\n",
                echo ? "echo" : "sink", b->answered, b->n);
        return 1;
    }
    if (print) {
        printf("%-4s n=%ld size=%zu window=%ld: %.0f msg/s, %.1f MB/s (%.3f s)\n",
               echo ? "echo" : "sink", b->n, b->size, b->window, (double)b->n / secs,
               (double)b->n * (double)b->size / secs / 1e6, secs);
    }
    return 0;
}

static int start_server(bench *b, sd_rpc *rpc, sd_rpc_server **srv, int *port)
{
    sd_err err = { 0 };
    const sd_rpc_handler echo_h = {
        .on_open = srv_open, .on_message = srv_echo, .on_half_close = srv_echo_half_close, .ctx = b
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

/*
 * One transport session in this process's loop: a hub, a channel to `port` (0: start a server
 * here first), the streams of the modes asked for, then everything torn down (outside the
 * timing). OUT: echo_ns, the echo stream's wall time.
 */
static int session(bench *b, int port, bool echo, bool sink, bool print, int64_t *echo_ns)
{
    sd_rpc_server *srv = NULL;
    sd_err err = { 0 };
    char target[64];
    int64_t ns = 0;
    int rc = 0;

    *echo_ns = 0;
    if (sd_rpc_create(b->loop, &b->rpc, &err) != SD_OK) {
        fprintf(stderr, "bench_transport: %s\n", sd_err_msg(&err));
        return 1;
    }
    if (port == 0 && start_server(b, b->rpc, &srv, &port) != 0) {
        sd_rpc_destroy(b->rpc);
        return 1;
    }
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    if (sd_rpc_channel_create(b->rpc, target, &b->ch, &err) != SD_OK) {
        fprintf(stderr, "bench_transport: %s\n", sd_err_msg(&err));
        rc = 1;
    }
    if (rc == 0 && echo) {
        rc |= run_mode(b, true, print, echo_ns);
    }
    if (rc == 0 && sink) {
        rc |= run_mode(b, false, print, &ns);
    }
    sd_rpc_channel_destroy(b->ch);
    b->ch = NULL;
    if (srv != NULL) {
        b->server_done = false;
        sd_rpc_server_shutdown(srv, 0, on_server_done, b);
        while (!b->server_done) {
            ev_run(b->loop, EVRUN_ONCE);
        }
    }
    sd_rpc_destroy(b->rpc);
    b->rpc = NULL;
    return rc;
}

static double process_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) {
        return 0;
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return a < c ? -1 : a > c;
}

/* Sorts v[0..n) and prints its min, median and max. Returns the median. */
static double summarise(const char *name, double *v, int n)
{
    double med;
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    med = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    printf("%-9s msg/s  min %8.0f  median %8.0f  max %8.0f\n", name, v[0], med, v[n - 1]);
    return med;
}

/* ROUNDS interleaved rounds of transport and raw echo streams; ends with the ratio line. */
static int compare(bench *b, int rounds)
{
    sd_rpc_rawbench *rb = NULL;
    sd_err err = { 0 };
    double tr[64], raw[64];
    int rc = 0;

    if (sd_rpc_rawbench_create(&rb, &err) != SD_OK) {
        fprintf(stderr, "bench_transport: %s\n", sd_err_msg(&err));
        return 1;
    }
    printf("echo n=%ld size=%zu window=%ld, %d interleaved rounds (wall time; process CPU)\n", b->n,
           b->size, b->window, rounds);
    for (int r = 0; r < rounds && rc == 0; r++) {
        int64_t tns = 0, rns = 0;
        double tcpu = 0, rcpu = 0;
        for (int k = 0; k < 2 && rc == 0; k++) {
            bool transport_now = (k == 0) == (r % 2 == 0);
            double c0 = process_cpu_s();
            if (transport_now) {
                rc = session(b, 0, true, false, false, &tns);
                tcpu = process_cpu_s() - c0;
            } else {
                sd_status st = sd_rpc_rawbench_echo(rb, b->n, b->size, b->window, &rns, &err);
                rcpu = process_cpu_s() - c0;
                if (st != SD_OK) {
                    fprintf(stderr, "bench_transport: %s\n", sd_err_msg(&err));
                    rc = 1;
                }
            }
        }
        if (rc != 0) {
            break;
        }
        tr[r] = (double)b->n / ((double)tns / 1e9);
        raw[r] = (double)b->n / ((double)rns / 1e9);
        printf("round %d: transport %8.0f msg/s (%.3f s, cpu %.3f s)  raw %8.0f msg/s "
               "(%.3f s, cpu %.3f s)  ratio %.2f\n",
               r + 1, tr[r], (double)tns / 1e9, tcpu, raw[r], (double)rns / 1e9, rcpu,
               tr[r] / raw[r]);
        fflush(stdout);
    }
    if (rc == 0) {
        double tmed = summarise("transport", tr, rounds);
        double rmed = summarise("raw", raw, rounds);
        printf("ratio transport/raw %.2f\n", tmed / rmed);
    }
    sd_rpc_rawbench_destroy(rb);
    return rc;
}

/* Two-process probe: fork the server child before any gRPC state exists, so it starts clean. */
static int probe_two_procs(bench *b, bool echo, bool sink)
{
    int cmd_pipe[2], port_pipe[2];
    int port = 0, rc = 0, wst = 0;
    int64_t ns;
    pid_t child;

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
        b->loop = ev_loop_new(EVFLAG_AUTO);
        rc = run_server_child(b, cmd_pipe[0], port_pipe[1]);
        ev_loop_destroy(b->loop);
        sd_free(b->payload);
        _exit(rc);
    }
    close(cmd_pipe[0]);
    close(port_pipe[1]);
    if (read(port_pipe[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
        fprintf(stderr, "bench_transport: the server child failed\n");
        return 1;
    }
    close(port_pipe[0]);
    b->loop = ev_loop_new(EVFLAG_AUTO);
    ev_prepare_init(&b->refill, on_prepare);
    b->refill.data = b;
    printf("client and server in two processes\n");
    rc = session(b, port, echo, sink, true, &ns);
    close(cmd_pipe[1]);
    waitpid(child, &wst, 0);
    if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        rc = 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    bench b;
    const char *mode = "echo";
    bool two_procs = false, echo, sink;
    int rounds = 5;
    int64_t ns;
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
        } else if (i + 1 < argc && strcmp(argv[i], "-r") == 0) {
            rounds = (int)strtol(argv[++i], NULL, 10);
        } else if (i + 1 < argc && strcmp(argv[i], "-m") == 0) {
            mode = argv[++i];
        } else {
            fprintf(stderr,
                    "usage: %s [-p] [-n N] [-s SIZE] [-w WINDOW] [-r ROUNDS] [-m echo|sink|both]\n",
                    argv[0]);
            return 2;
        }
    }
    echo = strcmp(mode, "echo") == 0 || strcmp(mode, "both") == 0;
    sink = strcmp(mode, "sink") == 0 || strcmp(mode, "both") == 0;
    if (b.n <= 0 || b.size == 0 || b.window <= 0 || rounds < 1 || rounds > 64 || !(echo || sink)) {
        fprintf(stderr, "bench_transport: n, size and window must be positive, rounds 1..64, "
                        "mode echo, sink or both\n");
        return 2;
    }
    b.payload = sd_malloc(b.size);
    if (b.payload == NULL) {
        return 1;
    }
    if (two_procs) {
        rc = probe_two_procs(&b, echo, sink);
    } else {
        b.loop = ev_loop_new(EVFLAG_AUTO);
        ev_prepare_init(&b.refill, on_prepare);
        b.refill.data = &b;
        if (sink) {
            printf("client and server in one process, one loop\n");
            rc = session(&b, 0, echo, sink, true, &ns);
        } else {
            rc = compare(&b, rounds);
        }
    }
    if (b.loop != NULL) {
        ev_loop_destroy(b.loop);
    }
    sd_free(b.payload);
    return rc;
}
