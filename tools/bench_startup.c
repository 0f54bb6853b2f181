/*
 * bench_startup: how soon a freshly started runner answers, measured as Beam's launchers see
 * it. Python's PrismRunner (and Java's) start the binary with `--job_port N --serve_http False`
 * and connect a few milliseconds later; a connection refused then costs the client gRPC's
 * reconnect backoff, a whole second. For each round this tool picks a free loopback port,
 * starts BIN with that command line, and from the exec on:
 *
 *   accept   tries a TCP connect to 127.0.0.1:N every 100 us until the kernel accepts one
 *            (the moment a client's connect would first succeed);
 *   call     on that connection speaks HTTP/2 itself (preface, SETTINGS, one HEADERS + DATA:
 *            JobService/GetJobs with an empty request) until the response message arrives —
 *            the first successful Job API call, with no client library's own backoff in it.
 *
 * Then it stops the runner (SIGTERM, waits for it) and prints one line a round and the min,
 * median and max of both figures, in milliseconds from the exec.
 *
 *   bench_startup [--rounds N] [--max-accept-ms M] [--max-call-ms C] BIN [extra args...]
 *
 * With --max-accept-ms (and --max-call-ms) it exits 1 when the median exceeds the bound
 * (ctest's startup_check); any round that fails to answer within 10 s exits 1 too. Several
 * runners can be compared in one run by calling it once per binary, interleaved (bench scripts).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define GIVE_UP_MS 10000.0
#define MAX_ROUNDS 1000

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_startup: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* A port the kernel says is free now (bound to 0, read back, closed). */
static int free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        die("free port");
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* One connect attempt: the connected fd, or -1 when refused (or not yet accepted). */
static int try_connect(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        die("socket");
    }
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
    }
    close(fd);
    return -1;
}

static void put_frame_header(uint8_t *p, size_t len, uint8_t type, uint8_t flags, uint32_t stream)
{
    p[0] = (uint8_t)(len >> 16);
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)len;
    p[3] = type;
    p[4] = flags;
    p[5] = (uint8_t)(stream >> 24);
    p[6] = (uint8_t)(stream >> 16);
    p[7] = (uint8_t)(stream >> 8);
    p[8] = (uint8_t)stream;
}

/* An HPACK literal without indexing, the name by static-table index (<15) or literal (0). */
static size_t hpack_literal(uint8_t *p, int name_index, const char *name, const char *value)
{
    size_t n = 0;
    p[n++] = (uint8_t)name_index;
    if (name_index == 0) {
        p[n++] = (uint8_t)strlen(name);
        memcpy(p + n, name, strlen(name));
        n += strlen(name);
    }
    p[n++] = (uint8_t)strlen(value);
    memcpy(p + n, value, strlen(value));
    return n + strlen(value);
}

/* The client's side of a GetJobs call on a fresh HTTP/2 connection, as one write. */
static size_t build_get_jobs(uint8_t *out, int port)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    char authority[32];
    uint8_t hdr[256];
    size_t n = 0, h = 0;

    snprintf(authority, sizeof(authority), "127.0.0.1:%d", port);
    memcpy(out, preface, sizeof(preface) - 1);
    n = sizeof(preface) - 1;
    put_frame_header(out + n, 0, 0x4 /* SETTINGS */, 0, 0);
    n += 9;
    hdr[h++] = 0x83; /* :method POST */
    hdr[h++] = 0x86; /* :scheme http */
    h += hpack_literal(hdr + h, 4, NULL,
                       "/org.apache.beam.model.job_management.v1.JobService/GetJobs");
    h += hpack_literal(hdr + h, 1, NULL, authority);
    h += hpack_literal(hdr + h, 0, "content-type", "application/grpc");
    h += hpack_literal(hdr + h, 0, "te", "trailers");
    put_frame_header(out + n, h, 0x1 /* HEADERS */, 0x4 /* END_HEADERS */, 1);
    n += 9;
    memcpy(out + n, hdr, h);
    n += h;
    put_frame_header(out + n, 5, 0x0 /* DATA */, 0x1 /* END_STREAM */, 1);
    n += 9;
    memset(out + n, 0, 5); /* uncompressed, an empty GetJobsRequest */
    return n + 5;
}

/*
 * Send the call and read frames until a DATA frame on stream 1 (the response message): true.
 * False when the connection closes, the stream ends without a message, or time runs out.
 */
static bool get_jobs(int fd, int port, double deadline)
{
    uint8_t req[512];
    uint8_t buf[16384];
    size_t have = 0;
    static const uint8_t settings_ack[9] = { 0, 0, 0, 0x4, 0x1, 0, 0, 0, 0 };

    size_t len = build_get_jobs(req, port);
    if (write(fd, req, len) != (ssize_t)len) {
        return false;
    }
    for (;;) {
        while (have >= 9) {
            size_t flen = ((size_t)buf[0] << 16) | ((size_t)buf[1] << 8) | buf[2];
            uint8_t type = buf[3], flags = buf[4];
            uint32_t stream = ((uint32_t)(buf[5] & 0x7f) << 24) | ((uint32_t)buf[6] << 16) |
                              ((uint32_t)buf[7] << 8) | buf[8];
            if (flen > sizeof(buf) - 9) {
                return false;
            }
            if (have < 9 + flen) {
                break;
            }
            if (type == 0x4 && !(flags & 0x1) &&
                write(fd, settings_ack, sizeof(settings_ack)) != sizeof(settings_ack)) {
                return false;
            }
            if (stream == 1 && type == 0x0 && flen >= 5) {
                return true;
            }
            if (stream == 1 && (flags & 0x1)) {
                return false; /* trailers only: the call failed */
            }
            if (type == 0x7 /* GOAWAY */) {
                return false;
            }
            memmove(buf, buf + 9 + flen, have - 9 - flen);
            have -= 9 + flen;
        }
        int left = (int)(deadline - now_ms());
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (left <= 0 || poll(&p, 1, left) <= 0) {
            return false;
        }
        ssize_t r = read(fd, buf + have, sizeof(buf) - have);
        if (r <= 0) {
            return false;
        }
        have += (size_t)r;
    }
}

typedef struct round_result {
    double accept_ms;
    double call_ms;
} round_result;

static bool accept_only; /* --accept-only: no GetJobs (a floor: any program that listens) */

static bool one_round(char **argv_bin, int n_extra, char **extra, round_result *out)
{
    int port = free_port();
    char port_s[16];
    char *args[64];
    int n = 0;
    snprintf(port_s, sizeof(port_s), "%d", port);
    args[n++] = argv_bin[0];
    args[n++] = "--job_port";
    args[n++] = port_s;
    args[n++] = "--serve_http";
    args[n++] = "False";
    for (int i = 0; i < n_extra && n < 63; i++) {
        args[n++] = extra[i];
    }
    args[n] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    double t0 = now_ms();
    if (posix_spawn(&pid, args[0], &fa, NULL, args, environ) != 0) {
        die(args[0]);
    }
    posix_spawn_file_actions_destroy(&fa);

    bool ok = false;
    int fd = -1;
    while (fd < 0 && now_ms() - t0 < GIVE_UP_MS) {
        fd = try_connect(port);
        if (fd < 0) {
            struct timespec ts = { 0, 100 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    if (fd >= 0) {
        out->accept_ms = now_ms() - t0;
        ok = accept_only || get_jobs(fd, port, t0 + GIVE_UP_MS);
        out->call_ms = now_ms() - t0;
        close(fd);
    }
    kill(pid, SIGTERM);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return ok;
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), dbl_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    int rounds = 20;
    double max_accept = -1, max_call = -1;
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--accept-only") == 0) {
            accept_only = true;
            i--;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_startup: %s expects a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--rounds") == 0) {
            rounds = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--max-accept-ms") == 0) {
            max_accept = atof(argv[i + 1]);
        } else if (strcmp(argv[i], "--max-call-ms") == 0) {
            max_call = atof(argv[i + 1]);
        } else {
            fprintf(stderr, "bench_startup: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (i >= argc || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: bench_startup [--rounds 1..%d] [--max-accept-ms M] "
                "[--max-call-ms C] BIN [extra args...]\n",
                MAX_ROUNDS);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    static double acc[MAX_ROUNDS], call[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        round_result res = { 0 };
        if (!one_round(argv + i, argc - i - 1, argv + i + 1, &res)) {
            fprintf(stderr, "bench_startup: round %d: %s never answered GetJobs\n", r + 1, argv[i]);
            return 1;
        }
        acc[r] = res.accept_ms;
        call[r] = res.call_ms;
        printf("round %2d: accept %7.2f ms  first GetJobs %7.2f ms\n", r + 1, acc[r], call[r]);
        fflush(stdout);
    }
    double ma = median(acc, rounds), mc = median(call, rounds);
    printf("%s: exec->accept min %.2f median %.2f max %.2f ms; exec->first GetJobs min %.2f "
           "median %.2f max %.2f ms (%d rounds)\n",
           argv[i], acc[0], ma, acc[rounds - 1], call[0], mc, call[rounds - 1], rounds);
    if ((max_accept >= 0 && ma > max_accept) || (max_call >= 0 && mc > max_call)) {
        printf("bench_startup: FAILED: median accept %.2f ms (bound %.2f), median first call "
               "%.2f ms (bound %.2f)\n",
               ma, max_accept, mc, max_call);
        return 1;
    }
    return 0;
}
