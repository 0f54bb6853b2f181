/* Sundial: the job executor — runs prepared pipelines on the engine and SDK workers. */
#ifndef SD_RUNNER_EXEC_EXEC_H
#define SD_RUNNER_EXEC_EXEC_H

#include "runner/base/err.h"
#include "runner/fnapi/fnapi.h"
#include "runner/jobservice/jobservice.h"
#include "runner/transport/rpc.h"

typedef struct sd_exec sd_exec;

struct sd_bg;

typedef struct sd_exec_config {
    /* Pool that plans pipelines off the loop thread at Run (borrowed; close it after
     * sd_exec_destroy). NULL: plans inline. */
    struct sd_bg *bg;
    /* Address SDK workers use to reach this process ("127.0.0.1:PORT"). Copied. */
    const char *endpoint;
    /* Default clock when the pipeline does not choose: false = synthetic, true = wall. */
    bool wall_clock;
    /* Cap on one SDK bundle's encoded input (0 = default 256 KiB). */
    size_t max_bundle_bytes;
    /* Bundles in flight per job (0 = default 4). */
    int max_inflight;
    /* Seconds a worker has to open its control stream (0 = default 60). */
    int worker_connect_timeout_s;
    /* Seconds a worker may leave a progress request for a running bundle unanswered before
     * it is declared hung and its job fails (0 = default 60). */
    int hang_timeout_s;
    /* Seconds a bundle may run while its worker answers progress requests but the bundle
     * consumes no input and produces no output (a stalled SDK, e.g. one that threw inside an
     * async callback) before its job fails with a per-stage dump. 0 = default (600);
     * negative = never. */
    int stall_timeout_s;
} sd_exec_config;

/*
 * Create the executor. rpc and fn are borrowed and must outlive it. The loop must be libev's
 * default loop (PROCESS environments are reaped with ev_child).
 */
SD_MUST_CHECK sd_status sd_exec_create(sd_rpc *rpc, sd_fnapi *fn, const sd_exec_config *cfg,
                                       sd_exec **out, sd_err *err);

/* Cancel every running job (their workers are stopped) and free. NULL is a no-op. */
void sd_exec_destroy(sd_exec *ex);

/* The job-service hooks that validate, start and cancel jobs on this executor. */
sd_job_hooks sd_exec_job_hooks(sd_exec *ex);

/* Number of jobs currently running. */
size_t sd_exec_running(const sd_exec *ex);

#endif
