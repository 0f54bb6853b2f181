/* Sundial: one runner instance — Job API, artifact services, Fn API and executor on one port. */
#ifndef SD_RUNNER_SERVER_SERVER_H
#define SD_RUNNER_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/err.h"

struct ev_loop;

typedef struct sd_server sd_server;

/* The zero value is the default: 127.0.0.1, port 8099... except port 0 means "pick one". */
typedef struct sd_server_config {
    const char *host;         /* NULL = "127.0.0.1" */
    int port;                 /* 0 = a free port */
    bool wall_clock;          /* default clock for jobs: false = synthetic (test mode) */
    size_t max_bundle_bytes;  /* 0 = executor default */
    const char *artifact_dir; /* NULL = a private mkdtemp $TMPDIR/sundial-XXXXXX, removed at
                                 destroy; given: must be ours alone (checked), kept */
    bool own_artifact_dir;    /* artifact_dir is a private directory the caller made for this
                                 server: not checked, removed at destroy */
    int job_history;          /* finished jobs kept (0 = SD_JOB_HISTORY_DEFAULT, 100) */
    double job_history_ttl_s; /* finished jobs forgotten after (0 = a day; < 0 = never) */
    int hang_timeout_s;       /* 0 = executor default (60 s) */
    int stall_timeout_s;      /* 0 = executor default (600 s); negative = never */
    int64_t livelock_rounds;  /* 0 = executor default (1000 bundles); negative = never */
    int64_t memory_limit;     /* per job, bytes: 0 = executor default (1 GiB); < 0 = none */
    const char *spill_dir;    /* where jobs over it spill (NULL: $TMPDIR); borrowed */
    /* Schedules for jobs whose options do not choose (sd_exec_config); borrowed. */
    const char *record_schedule_dir;
    const char *replay_schedule;
    /* Prepare limits (sd_jobsvc_set_limits): 0 = the defaults, SIZE_MAX = none. */
    size_t max_pipeline_bytes;
    size_t max_pipeline_transforms;
    /* The web UI (runner/web) on host:web_port (0 = a free port), when serve_http. If it
     * cannot start, create fails, unless web_optional: then a warning and no web UI. */
    bool serve_http;
    int web_port;
    bool web_optional;
    /* A socket already listening on host:port (sd_rpc_listen_early), whose connections the
     * server serves instead of binding its own; port is then the port it is bound to. The
     * server owns it from create on (also when create fails). */
    bool have_listen_fd;
    int listen_fd;
} sd_server_config;

/*
 * Create the whole runner on `loop` (which the caller runs; PROCESS environments need libev's
 * default loop to reap children, other loops poll for them), bind, and start serving.
 * OUT: out (caller owns; shut down with sd_server_shutdown, then sd_server_destroy).
 * Errors name the address on bind failures.
 */
SD_MUST_CHECK sd_status sd_server_create(struct ev_loop *loop,
                                         const sd_server_config *cfg,
                                         sd_server **out,
                                         sd_err *err);

/* "host:port" that clients and SDK workers use. Borrowed. */
const char *sd_server_endpoint(const sd_server *s);

/* "http://HOST:PORT/" of the web UI, or NULL when it is not served. Borrowed. */
const char *sd_server_web_url(const sd_server *s);

/*
 * Stop the web UI, cancel running jobs (workers are stopped gracefully), stop accepting calls,
 * give open calls grace_ms, then call done(ctx) on the loop thread. Call once, on the loop
 * thread.
 */
void sd_server_shutdown(sd_server *s, int grace_ms, void (*done)(void *ctx), void *ctx);

/*
 * How many jobs were prepared on this server (OUT: out_total) and how many of them are not
 * yet terminal (OUT: out_active). Either pointer may be NULL. Loop thread.
 */
void sd_server_job_counts(const sd_server *s, size_t *out_total, size_t *out_active);

/* Free everything; after done() ran (or if the loop is no longer running). NULL: no-op. */
void sd_server_destroy(sd_server *s);

#endif
