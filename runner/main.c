/*
 * Sundial: the `sundial` command.
 *
 *   sundial serve [--port N] [--host ADDR] [--clock synthetic|wall] [--max-bundle-bytes N]
 *                 [--worker-hang-timeout SECONDS]
 *   sundial version
 *
 * `serve` runs a Beam job server: the Job API, artifact staging/retrieval and the Fn API on
 * one gRPC port, with one event loop. When the port accepts connections it prints exactly
 * `listening on HOST:PORT` as the first line on stdout, so scripts and tests can start it with
 * --port 0 and read the port. SIGINT/SIGTERM stop it: running jobs are cancelled, workers
 * stopped, then calls are given a short grace period before the server closes.
 *
 * Out of memory during start-up is fatal here (and only here): there is nothing to serve yet.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "runner/base/err.h"
#include "runner/base/log.h"
#include "runner/server/server.h"

typedef struct serve_state {
    sd_server *server;
    bool stopping;
    ev_signal sigint;
    ev_signal sigterm;
} serve_state;

static void usage(FILE *f)
{
    fprintf(f, "usage:\n"
               "  sundial serve [--port N] [--host ADDR] [--clock synthetic|wall]\n"
               "                [--max-bundle-bytes N] [--worker-hang-timeout SECONDS]\n"
               "      Run a Beam job server (Job API + Fn API on one port). --port 0 picks a\n"
               "      free port; the first stdout line is 'listening on HOST:PORT'.\n"
               "      Default port 8099, host 127.0.0.1, clock synthetic.\n"
               "  sundial version\n");
}

static void server_closed(void *ctx)
{
    (void)ctx;
    ev_break(EV_DEFAULT, EVBREAK_ALL);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    serve_state *s = w->data;
    (void)loop;
    (void)revents;
    if (s->stopping) {
        return;
    }
    s->stopping = true;
    SD_INFO("main", "signal %d: shutting down", w->signum);
    sd_server_shutdown(s->server, 1000, server_closed, s);
}

static int parse_int(const char *s, const char *what, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0) {
        fprintf(stderr, "sundial: %s must be a non-negative integer, got \"%s\"\n", what, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int serve(int argc, char **argv)
{
    long port = 8099;
    long max_bundle = 0;
    long hang = 0;
    const char *host = "127.0.0.1";
    bool wall = false;
    serve_state s;
    sd_err err;

    memset(&s, 0, sizeof(s));
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--port") == 0 && v != NULL) {
            if (parse_int(v, "--port", &port) != 0 || port > 65535) {
                return 2;
            }
            i++;
        } else if (strncmp(a, "--port=", 7) == 0) {
            if (parse_int(a + 7, "--port", &port) != 0 || port > 65535) {
                return 2;
            }
        } else if (strcmp(a, "--host") == 0 && v != NULL) {
            host = v;
            i++;
        } else if (strcmp(a, "--clock") == 0 && v != NULL) {
            if (strcmp(v, "wall") == 0) {
                wall = true;
            } else if (strcmp(v, "synthetic") != 0) {
                fprintf(stderr, "sundial: --clock must be 'synthetic' or 'wall', got \"%s\"\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--worker-hang-timeout") == 0 && v != NULL) {
            if (parse_int(v, "--worker-hang-timeout", &hang) != 0 || hang > 86400) {
                return 2;
            }
            i++;
        } else if (strcmp(a, "--max-bundle-bytes") == 0 && v != NULL) {
            if (parse_int(v, "--max-bundle-bytes", &max_bundle) != 0) {
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "sundial serve: unknown argument \"%s\"\n", a);
            usage(stderr);
            return 2;
        }
    }

    signal(SIGPIPE, SIG_IGN);
    struct ev_loop *loop = EV_DEFAULT;
    sd_server_config cfg = { 0 };
    cfg.host = host;
    cfg.port = (int)port;
    cfg.wall_clock = wall;
    cfg.max_bundle_bytes = (size_t)max_bundle;
    cfg.hang_timeout_s = (int)hang;
    sd_err_clear(&err);
    if (sd_server_create(loop, &cfg, &s.server, &err) != SD_OK) {
        fprintf(stderr, "sundial: %s\n", sd_err_msg(&err));
        return 1;
    }
    ev_signal_init(&s.sigint, on_signal, SIGINT);
    ev_signal_init(&s.sigterm, on_signal, SIGTERM);
    s.sigint.data = &s;
    s.sigterm.data = &s;
    ev_signal_start(loop, &s.sigint);
    ev_signal_start(loop, &s.sigterm);

    printf("listening on %s\n", sd_server_endpoint(s.server));
    fflush(stdout);
    SD_INFO("main", "Sundial job server on %s (clock %s)", sd_server_endpoint(s.server),
            wall ? "wall" : "synthetic");

    ev_run(loop, 0);

    ev_signal_stop(loop, &s.sigint);
    ev_signal_stop(loop, &s.sigterm);
    sd_server_destroy(s.server);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "serve") == 0) {
        return serve(argc - 2, argv + 2);
    }
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("sundial 0.1.0\n");
        return 0;
    }
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "sundial: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
