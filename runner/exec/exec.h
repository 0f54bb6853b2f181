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
    /* SDK bundles in a row without progress (sd_em_check_livelock) before a job fails as
     * live-locked, unless the job's beam:option:sundial_livelock_rounds:v1 says otherwise.
     * 0 = default (SD_EM_LIVELOCK_ROUNDS_DEFAULT); negative = never. */
    int64_t livelock_rounds;
    /* Each job's memory budget in bytes (sd_em_config.memory_limit: beyond it pending
     * elements, GroupByKey values and bundle outputs spill to a file in spill_dir), unless the
     * job's beam:option:sundial_memory_limit:v1 says otherwise. 0 = default (1 GiB);
     * negative = none. spill_dir: NULL = $TMPDIR, else /tmp; borrowed. */
    int64_t memory_limit;
    const char *spill_dir;
    /* Schedules (exec_schedule.c), for jobs that do not choose with their options: record
     * each job's to DIR/<job id>.schedule, or replay this file in every job. NULL: neither.
     * Borrowed; must outlive the executor. */
    const char *record_schedule_dir;
    const char *replay_schedule;
} sd_exec_config;

/*
 * Create the executor. rpc and fn are borrowed and must outlive it. The loop must be libev's
 * default loop (PROCESS environments are reaped with ev_child).
 */
SD_MUST_CHECK sd_status
sd_exec_create(sd_rpc *rpc, sd_fnapi *fn, const sd_exec_config *cfg, sd_exec **out, sd_err *err);

/* Cancel every running job (their workers are stopped) and free. NULL is a no-op. */
void sd_exec_destroy(sd_exec *ex);

/* The job-service hooks that validate, start and cancel jobs on this executor. */
sd_job_hooks sd_exec_job_hooks(sd_exec *ex);

/* Number of jobs currently running. */
size_t sd_exec_running(const sd_exec *ex);

/* ------------------------------------------------------------ web view (exec_web.c) */

/*
 * What the web UI shows of a job the executor runs or ran: its stages with watermarks, holds,
 * pending work and element counts, the job clock, and a watermark timeline. The executor
 * records it while the job runs (where it already observes the engine) and leaves the last
 * state on the job (sd_job_set_view) when the run ends, so a finished job still shows it.
 * Loop thread. Every pointer below is borrowed: valid until control returns to the loop.
 */

typedef struct sd_exec_view_pcoll {
    const char *id;   /* PCollection id */
    const char *name; /* its unique name in the pipeline (the id when it has none) */
    /* Measured by the runner: the elements (windowed values) and their encoded bytes that
     * crossed the data plane into this PCollection in committed bundles (or that a runner
     * stage produced), whatever the SDK. Only PCollections between stages are measured; one
     * fused inside a stage never leaves its SDK worker. */
    bool measured;
    uint64_t measured_elements;
    uint64_t measured_bytes;
    bool has_count;   /* the SDK reported an element count (beam:metric:element_count:v1) */
    int64_t elements; /* the sum of those reports over committed bundles */
} sd_exec_view_pcoll;

typedef struct sd_exec_view_stage {
    const char *id;
    const char *kind;              /* "sdk", "impulse", "gbk", "flatten" or "teststream" */
    const char *const *transforms; /* unique names of the user transforms fused in */
    size_t n_transforms;
    const size_t *inputs; /* indexes into sd_exec_view.pcolls */
    size_t n_inputs;
    const size_t *outputs;
    size_t n_outputs;
    sd_time input_wm;
    sd_time output_wm;
    sd_time hold;       /* the earliest watermark hold; SD_TIME_MAX = none */
    size_t pending;     /* elements, event-time timers and parked residuals */
    size_t in_progress; /* bundles in flight */
    size_t et_timers;   /* pending event-time timers */
    size_t pt_timers;   /* pending processing-time timers */
    uint64_t dropped_late;
} sd_exec_view_stage;

typedef struct sd_exec_view {
    bool live;          /* running now; false: as it was when its run ended */
    bool synthetic;     /* the job clock: synthetic (test mode) or the wall clock */
    sd_time clock_ms;   /* the job's processing time */
    int64_t elapsed_ms; /* wall time since Run handed the job over (to its end, once ended) */
    uint64_t bundles_done;
    size_t n_stages; /* in the engine's registration order */
    const sd_exec_view_stage *stages;
    size_t n_pcolls;
    const sd_exec_view_pcoll *pcolls;
} sd_exec_view;

/*
 * The view of job. ex may be NULL (the executor is gone: only a recorded view is found).
 * OUT: out. SD_ENOTFOUND when there is none yet (not run, still planning, or failed before
 * its engine started).
 */
SD_MUST_CHECK sd_status sd_exec_view_get(sd_exec *ex, sd_job *job, sd_exec_view *out);

/* A request's parameter by name (NULL when absent); for sd_exec_control. */
typedef const char *(*sd_exec_param_fn)(void *ctx, const char *name);

/*
 * The pause, step and inspection API of a test-mode job (exec_pause.c lists the actions:
 * pause, step, resume, timers, state, elements; their parameters come from param). post: the
 * request changes the job (the caller has checked it is allowed to). OUT: json = the answer
 * (free with sd_free), code = its HTTP status. SD_ENOTFOUND when action is none of them (json
 * stays NULL); otherwise SD_OK, errors being answers with a 4xx code and {"error": ...}.
 */
SD_MUST_CHECK sd_status sd_exec_control(sd_exec *ex,
                                        sd_job *job,
                                        const char *action,
                                        bool post,
                                        sd_exec_param_fn param,
                                        void *ctx,
                                        char **json,
                                        int *code);

/* Most timeline samples kept per job (fewer for very wide pipelines, see exec_web.c). */
#define SD_EXEC_TIMELINE_MAX 2000
/* Most marks kept per job (the oldest go first). */
#define SD_EXEC_MARKS_MAX 256

/* One timeline sample; its stages' output watermarks are a row of sd_exec_timeline.wms. */
typedef struct sd_exec_sample {
    uint64_t seq;     /* increases with every sample the job records */
    int64_t wall_ms;  /* wall ms since Run handed the job over */
    sd_time clock_ms; /* the job's processing time */
} sd_exec_sample;

typedef enum sd_exec_mark_kind {
    SD_EXEC_MARK_TS_WATERMARK = 0, /* a TestStream watermark event (to = the new watermark) */
    SD_EXEC_MARK_TS_CLOCK,         /* a TestStream processing-time event (to = the new clock) */
    SD_EXEC_MARK_TS_END,           /* the TestStream's last event went by (outputs at +inf) */
    SD_EXEC_MARK_CLOCK_JUMP        /* the synthetic clock jumped to a due processing-time event */
} sd_exec_mark_kind;

typedef struct sd_exec_mark {
    uint64_t seq;
    sd_exec_mark_kind kind;
    int64_t wall_ms;
    sd_time clock_ms; /* processing time after the event */
    sd_time from;
    sd_time to;
} sd_exec_mark;

typedef struct sd_exec_timeline {
    /* Changes whenever samples are thinned out (when the buffer is full every other old one
     * goes), so a reader that fetches only samples newer than a seq knows to start again. */
    uint64_t generation;
    size_t n_stages;  /* the view's stages, same order */
    size_t n_samples; /* oldest first */
    const sd_exec_sample *samples;
    const sd_time *wms; /* n_samples rows of n_stages output watermarks */
    bool has_head;      /* the latest observation, when not yet kept as a sample */
    sd_exec_sample head;
    const sd_time *head_wms; /* n_stages */
    size_t n_marks;          /* oldest first */
    const sd_exec_mark *marks;
} sd_exec_timeline;

/* The job's timeline. ex may be NULL. OUT: out. SD_ENOTFOUND as for sd_exec_view_get. */
SD_MUST_CHECK sd_status sd_exec_timeline_get(sd_exec *ex, sd_job *job, sd_exec_timeline *out);

/* ------------------------------------------------------------ time trace (exec_trace.c) */

/* The most bytes of trace records kept for finished jobs, all jobs together (the oldest go
 * first). One job's trace is at most about 12 MB (the engine's default cap). */
#define SD_EXEC_TRACE_KEEP_BYTES ((size_t)256 << 20)

/* Which of a job's trace records to write. A zeroed query: all of them, without wall times. */
typedef struct sd_exec_trace_query {
    const char *stage; /* only this stage's records (its id); NULL = every record */
    uint32_t kinds;    /* bit 1 << sd_trace_kind for each kind wanted; 0 = every kind */
    bool has_after;    /* only records whose seq is greater than after */
    uint64_t after;
    bool wall; /* include each record's wall time ("wall"; not deterministic) */
} sd_exec_trace_query;

typedef struct sd_exec_trace_info {
    bool live;    /* read from the running engine (it may grow); false: the copy kept at the end */
    bool cut;     /* the engine's cap was reached (the last record is a "cut") */
    size_t total; /* records in the trace */
    size_t n;     /* records written */
} sd_exec_trace_info;

/*
 * Append job's time trace records that q selects to out as JSON lines, one record a line in
 * record order (docs/trace.md has the fields). ex may be NULL (only a kept copy is found).
 * OUT: info. SD_ENOTFOUND when the job has no trace (never ran, or failed before its engine
 * started); SD_ENOMEM. Loop thread.
 */
SD_MUST_CHECK sd_status sd_exec_trace_get(sd_exec *ex,
                                          sd_job *job,
                                          const sd_exec_trace_query *q,
                                          sd_buf *out,
                                          sd_exec_trace_info *info,
                                          sd_err *err);

/* Parse a comma-separated list of trace kind names ("wm_out,pane") into query bits. NULL or ""
 * = 0 (every kind). SD_EINVAL naming an unknown kind. */
SD_MUST_CHECK sd_status sd_exec_trace_kinds(const char *list, uint32_t *out, sd_err *err);

#endif
