/*
 * Sundial: executor internals shared by the executor's files (exec*.c, xplan.c) and by unit
 * tests and fuzz targets.
 *
 * Two groups. The plan index (sd_exec_plan and its stages, built by xplan.c) says what the
 * executor needs of each SDK stage; it borrows from the plan and is read-only once built. The
 * run-time types (sd_exec, sd_exec_run, sd_exec_env, sd_exec_inflight) are the state of the
 * executor and its running jobs; they are touched only on the loop thread, and an
 * sd_exec_run is freed by sd__exec_run_finish() or sd__exec_run_fail(), so a caller that may
 * have failed the run must not touch it afterwards (see sd__exec_bundle_maybe_complete).
 */
#ifndef SD_RUNNER_EXEC_EXEC_INT_H
#define SD_RUNNER_EXEC_EXEC_INT_H

/* A splittable stage's bundle in a streaming job is asked to checkpoint after this long
 * (wall ms) and again as often, until it ends (exec_progress.c). */
#define SD_EXEC_CHECKPOINT_MS 1000

/* A PROCESS worker whose stream ended gets this long (s) for its exit status to be reaped, so
 * the job's error names its pid and signal or exit code (exec_env.c on_worker_lost). */
#define SD_EXEC_LOST_GRACE_S 0.25

/* Split requests per bundle a schedule remembers; later ones are asked for but unrecorded. */
#define SD_EXEC_MAX_ASKED 32

/* The last bytes a PROCESS worker wrote to its stderr that are kept for the job's error when it
 * exits or never connects (exec_env.c); everything it writes also goes to the server's stderr. */
#define SD_EXEC_STDERR_TAIL 4096

/* Bundles of spread stages in flight beyond max_inflight (sd_em_next_spread_bundle). */
#define SD_EXEC_MAX_SPREAD 128

/* The least input a spread bundle of a stage after a Reshuffle takes (sd_stage_spec). */
#define SD_EXEC_SPREAD_MIN_BYTES 2048

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <ev.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/map.h"
#include "runner/base/vec.h"
#include "runner/engine/em.h"
#include "runner/engine/em_pause.h"
#include "runner/exec/exec.h"
#include "runner/fnapi/fnapi.h"
#include "runner/jobservice/jobservice.h"
#include "runner/plan/plan.h"
#include "runner/transport/rpc.h"
#include "teststream/ts_drive.h"

/* ================================================================ the plan index (xplan.c) */

/* What the executor needs of one SDK stage, borrowed from the plan. */
typedef struct sd_exec_sink {
    const char *transform_id;
    const char *pcollection;
} sd_exec_sink;

typedef struct sd_exec_timer {
    const char *transform_id;
    const char *family_id;
} sd_exec_timer;

typedef struct sd_exec_stage {
    const char *id;
    const char *env_id;
    sd_bytes descriptor;
    sd_bytes drain_descriptor;    /* empty unless the stage is splittable */
    const char *source_transform; /* NULL when the stage has no main input */
    sd_exec_sink *sinks;
    size_t n_sinks;
    sd_exec_timer *timer_families;
    size_t n_timer_families;
    const sd_plan_stage *ps;
} sd_exec_stage;

typedef struct sd_exec_plan {
    const sd_plan *plan;
    sd_exec_stage *stages; /* SDK stages only */
    size_t n_stages;
    const char **env_ids; /* environments used by SDK stages, sorted */
    size_t n_envs;
    /* Stage ids (borrowed from plan) that get the per-element late policy
     * (sd_em_set_drop_behind_watermark), set before sd_exec_plan_to_engine. */
    const char **drop_late;
    size_t n_drop_late;
    /* PCollection ids (borrowed from plan) that get it on output: a stage's outputs downstream
     * of a named transform fused after its producer (sd_em_set_drop_behind_watermark_output). */
    const char **drop_late_out;
    size_t n_drop_late_out;
} sd_exec_plan;

/* Index the plan's SDK stages (borrowing from plan, which must outlive xp). */
SD_MUST_CHECK sd_status sd_exec_plan_init(const sd_plan *plan, sd_exec_plan *xp, sd_err *err);
void sd_exec_plan_deinit(sd_exec_plan *xp);

/* The plan's coder id as an sd_coder tree. OUT: out (caller owns: sd_coder_destroy). */
SD_MUST_CHECK sd_status sd__exec_plan_coder(const sd_plan *plan,
                                            const char *id,
                                            sd_coder **out,
                                            sd_err *err);

/* Register every PCollection and stage of the plan with the engine and start it. */
SD_MUST_CHECK sd_status sd_exec_plan_to_engine(const sd_exec_plan *xp, sd_em *em, sd_err *err);
/* The same; OUT: drv = the engine's TestStream driver (NULL when the job has no TestStream). */
SD_MUST_CHECK sd_status sd_exec_plan_to_engine_ts(const sd_exec_plan *xp,
                                                  sd_em *em,
                                                  sd_ts_driver **drv,
                                                  sd_err *err);

/* How a TestStream's elements become what the engine keeps (xplan.c): the payload coder
 * (NULL: the wire coder length-prefixes it) and the form the elements come in. */
typedef struct sd__exec_ts_recoder {
    sd_coder *coder;
    sd_plan_ts_form form;
} sd__exec_ts_recoder;

/* The recoder of TestStream stage ps (sd__exec_ts_recoder_deinit frees it). */
SD_MUST_CHECK sd_status sd__exec_ts_recoder_init(const sd_plan *plan,
                                                 const sd_plan_stage *ps,
                                                 sd__exec_ts_recoder *out,
                                                 sd_err *err);
void sd__exec_ts_recoder_deinit(sd__exec_ts_recoder *rc);
/* An sd_ts_recode_fn over an sd__exec_ts_recoder. */
SD_MUST_CHECK sd_status sd__exec_ts_recode(void *ctx, sd_bytes in, sd_buf *out, sd_err *err);
/* The engine's windowing for a plan windowing strategy (zeroed for NULL). A trigger is built
 * into pool (an sd_vec of allocations the caller frees with sd_free each, then deinits);
 * sessions already merged map to SD_WINDOWFN_CUSTOM (grouped by their windows as they are). */
void sd__exec_windowing_from_plan(const sd_plan_windowing *pw, sd_windowing *ws, sd_vec *pool);
/* Does a worker's log text carry an echo of a log of one of job_id's workers ("[worker
 * <job_id>-...]", what on_worker_log makes of it)? Such a text is a job message the worker's
 * process logged back (exec_env.c), not news. */
bool sd__exec_log_is_echo(const char *job_id, const char *text);

/*
 * One TestStream element as its payload carries it (in form) -> what the engine stores (the
 * nested encoding of the stage's wire coder), appended to out. coder: the payload's coder when
 * the runner knows it and stores it as it is; NULL when it is stored length-prefixed. Errors
 * (SD_EINVAL/SD_EPROTO naming the problem) fail the TestStream's decode.
 */
SD_MUST_CHECK sd_status sd__exec_teststream_recode(const sd_coder *coder,
                                                   sd_plan_ts_form form,
                                                   sd_bytes in,
                                                   sd_buf *out,
                                                   sd_err *err);

/*
 * The value coder of multimap-like user state state_id of ParDo transform_id in stage xs (a
 * MultimapStateSpec's or MapStateSpec's value coder), which the runner needs to count a map
 * key's values when it serves MultimapEntriesUserState. OUT: *out, caller owns; free with
 * sd_coder_destroy(). SD_ENOTFOUND when the stage has no such ParDo or state, SD_EINVAL when
 * the state is of another kind, SD_EUNIMPL when the coder cannot be built (one that builds but
 * whose bytes the runner cannot split, an SDK-specific coder, makes sd_em_user_state_entries
 * fail with SD_EPROTO instead).
 */
SD_MUST_CHECK sd_status sd__exec_plan_multimap_value_coder(const sd_exec_plan *xp,
                                                           const sd_exec_stage *xs,
                                                           const char *transform_id,
                                                           const char *state_id,
                                                           sd_coder **out,
                                                           sd_err *err);
/* As sd__exec_plan_multimap_value_coder, for any state kind: the coder of the values a get
 * returns (the VALUE_CODER of runner/urns/state_kinds.h: a bag's, set's or ordered list's
 * element coder, a value state's coder, a combining state's accumulator coder, a map's or
 * multimap's value coder), or with keys the key coder of a map or multimap. */
SD_MUST_CHECK sd_status sd__exec_plan_state_coder(const sd_exec_plan *xp,
                                                  const sd_exec_stage *xs,
                                                  const char *transform_id,
                                                  const char *state_id,
                                                  bool keys,
                                                  sd_coder **out,
                                                  sd_err *err);

/* One entry of beam:option:direct_test_splits:v1. */
typedef struct sd_exec_split {
    char *stage_id;
    double timings[16];
    double fractions[16];
    size_t n;
    bool used;
} sd_exec_split;

/*
 * Parse {"<transform name>": {"timings": [s...], "fractions": [f...]}, ...} and append one
 * sd_exec_split per named transform found in an SDK stage of xp (matched by transform id or unique
 * name, or a unique name ending in "/<name>"). pipeline supplies unique names. Malformed JSON
 * adds nothing.
 */
void sd__exec_parse_test_splits(const char *json,
                                const sd_exec_plan *xp,
                                const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *pipeline,
                                sd_vec *out);

/*
 * Test seam (the fuzz targets): start every environment by calling start(ctx, worker_id,
 * env_id, err) instead of spawning a process or asking a worker pool. The worker is still
 * registered with the Fn API under worker_id (with its descriptors) before the call, so the
 * caller can play the SDK through sd__fnapi_worker_deliver(). An error fails the job as a failed
 * start does. NULL restores the real start. Loop thread; before jobs start.
 */
typedef sd_status (*sd__exec_env_starter)(void *ctx,
                                          const char *worker_id,
                                          const char *env_id,
                                          sd_err *err);
void sd__exec_set_env_starter(sd_exec *ex, sd__exec_env_starter start, void *ctx);

/*
 * Test seam (fuzz_fnapi): where a run's plan comes from. When set, Run first asks
 * source(ctx, job, popt) for the plan of the job's pipeline built with popt, the options the
 * executor would plan it with. A non-NULL answer becomes the run's plan, borrowed: the run
 * never frees it, and the caller keeps it alive while any run of the executor may use it.
 * NULL: the run plans the pipeline itself, as without the seam. The executor only reads a
 * plan, so one plan can serve run after run of the same pipeline: fuzz_fnapi plans each of
 * its fixed pipelines once instead of once per input. Loop thread; before jobs start.
 */
typedef sd_plan *(*sd__exec_plan_source)(void *ctx, const sd_job *job, const sd_plan_options *popt);
void sd__exec_set_plan_source(sd_exec *ex, sd__exec_plan_source source, void *ctx);

/* ================================================================ run-time types */

typedef struct sd_exec_run sd_exec_run;

/* How an environment's worker was started (and so how it is stopped). */
typedef enum env_kind { ENV_EXTERNAL, ENV_PROCESS } env_kind;

/* One environment of a run: its SDK worker (exec_env.c). Owned by the run (r->envs). */
typedef struct sd_exec_env {
    sd_exec_run *r;
    char *env_id;
    env_kind kind;
    char *worker_id;
    sd_fnapi_worker *worker;
    /* EXTERNAL */
    char *pool_url;
    sd_rpc_channel *pool;          /* borrowed from pool_ref */
    struct sd_exec_pool *pool_ref; /* the executor's channel to pool_url, one use of it */
    /* PROCESS */
    pid_t pid;
    ev_child child;
    ev_timer child_poll; /* used instead of ev_child on a non-default loop */
    bool child_active;
    bool poll_active;
    bool exited;
    ev_timer lost_grace; /* its stream ended: a moment for its exit status (on_worker_lost) */
    bool lost_active;
    char *lost_why;
    int err_fd;   /* read end of a PROCESS worker's stderr pipe; -1 when closed */
    ev_io err_io; /* forwards what it writes to the server's stderr, keeps the tail */
    bool err_active;
    size_t err_len;                     /* bytes in err_tail */
    char err_tail[SD_EXEC_STDERR_TAIL]; /* the last bytes it wrote to stderr */
    struct sd_exec_start_call *start;   /* the StartWorker call in flight, if any */
    bool embed;                         /* small bundles' input goes in the ProcessBundleRequest */
} sd_exec_env;

/*
 * Context of a StartWorker call. The pool may answer after the job already ended (a worker
 * that fails its first bundle before the pool replies), so the call does not point at the
 * sd_exec_env directly: sd__exec_env_destroy() clears `e` and the callback then only frees this.
 */
typedef struct sd_exec_start_call {
    sd_exec_env *e; /* NULL once the environment is gone */
    bool reused;    /* on a pool channel an earlier job used (retried once afresh if it fails) */
} sd_exec_start_call;

/*
 * A bundle handed to an SDK worker and not yet committed (exec_bundle.c), in r->inflight by
 * instruction id and in r->order by dispatch time. Owned by the run.
 */
typedef struct sd_exec_inflight {
    sd_exec_run *r;
    sd_bundle *b;
    char *instruction_id;
    const sd_exec_stage *st;
    sd_exec_env *env;
    int lasts_remaining;
    bool response_received;
    int64_t response_ms;   /* when the ProcessBundle response arrived */
    unsigned state_gets;   /* State API requests of the bundle: gets (first pages) */
    unsigned state_writes; /* appends and clears */
    bool failed;
    bool ready; /* response and every is_last arrived; waiting for its turn to commit */
    /* channel splits */
    bool has_split;
    size_t first_residual;
    ev_timer split_timer;
    bool split_timer_active;
    const sd_exec_split *splits;
    size_t next_split;

    /* runner-initiated split requests (test splits, checkpoints, a replay's) and the SDK's
     * answers, reported as schedule decisions at the commit (exec_schedule.c) */
    struct {
        double fraction;
        int64_t answer; /* first residual element of its channel split; -1: none (yet) */
        sd_buf kept;    /* the SDK's answer, the packed ProcessBundleSplitResponse (empty if
                         * it split nothing): what a replay applies in its place */
    } asked[SD_EXEC_MAX_ASKED];

    size_t n_asked;
    /* Replaying a schedule, the splits it recorded for this bundle are applied at dispatch
     * instead of being asked for (exec_progress.c): the input stops before element `cut`
     * (SIZE_MAX: whole), and element `subst` (SIZE_MAX: none) goes as subst_bytes, the primary
     * roots the SDK answered for it, concatenated. */
    size_t cut;
    size_t subst;
    sd_buf subst_bytes;
    unsigned splits_outstanding; /* split requests not answered yet: the commit waits */
    /* runner-initiated checkpoints of a splittable stage's bundle (exec_progress.c) */
    ev_timer checkpoint_timer;
    bool checkpoint_timer_active;
    unsigned checkpoints; /* checkpoint requests sent */
    int64_t started_ms;
    /* hang detection: progress requests on a real-time tick */
    int64_t progress_sent_ms; /* 0 = none outstanding */
    int64_t last_progress_ms;
    uint64_t progress_seq;
    /* stall detection: the last time the bundle visibly moved (output arrived, or a progress
     * report differed from the one before), and a digest of that report */
    int64_t active_ms;
    uint64_t progress_digest;
    bool requires_finalization; /* the SDK asked for a FinalizeBundle after the commit */
} sd_exec_inflight;

/* The rest of a paged state answer, under its continuation token in r->pages (exec_state.c). */
typedef struct sd_exec_page {
    sd_buf data;
    size_t offset;
    sd_coder *coder; /* the values' coder (a reference of the page's own), or NULL */
} sd_exec_page;

/* Planning off the loop thread (exec_start.c). */
typedef struct sd_exec_plan_task sd_exec_plan_task;

/* One job the executor runs, from Run until its final state (ex->runs by job id). */
/* The user's names for ids, from the job's pipeline (exec_names.c); zeroed = not built yet. */
typedef struct sd_exec_names {
    bool ready;
    sd_map pnames;   /* PCollection id -> unique name (borrowed from the pipeline) */
    sd_map tnames;   /* transform id -> unique name (borrowed) */
    sd_map composed; /* id -> a composed name (owned through `owned`) */
    sd_vec owned;    /* char *: the composed names */
} sd_exec_names;

/*
 * Schedule exploration (beam:option:sundial_explore_seeds:v1 = K, exec_schedule.c): the job
 * runs up to 3K times inside its one Job API job, under seeds 1..K with each bundle shape,
 * each run recorded, and ends at the first run that fails. Carried from run to run.
 */
typedef struct sd_exec_explore {
    uint64_t total; /* runs asked for (3K); 0: not exploring */
    uint64_t run;   /* this run, from 1 */
    char *dir;      /* where the runs' schedules go (owned) */
} sd_exec_explore;

struct sd_exec_run {
    sd_exec *ex;
    sd_job *job;
    char *job_id;
    sd_exec_plan_task *planning; /* the plan being built off the loop thread (Run), or NULL */
    sd_plan *plan;
    bool plan_borrowed; /* plan came from the test seam sd__exec_set_plan_source: not ours */
    sd_exec_plan xp;
    sd_em *em;
    size_t memory_limit; /* the engine's (sd_em_config.memory_limit), for the end message */
    sd_vec envs;         /* sd_exec_env* */
    sd_map inflight;     /* instruction id -> sd_exec_inflight* */
    sd_vec order;        /* sd_exec_inflight* in dispatch order: bundles commit in this order */
    sd_map pages;        /* continuation token -> sd_exec_page* */
    uint64_t next_token;
    sd_vec metrics;          /* sd_buf: packed MonitoringInfo */
    size_t metrics_merge_at; /* merge r->metrics when it holds this many (exec_metrics.c) */
    bool metrics_merged;     /* it was: passed-through types keep their latest report */
    sd_map gauges; /* urn + labels -> sd_buf* (packed): the latest SDK latest_int64 of each */
    sd_vec splits; /* sd_exec_split */
    /* The ProcessBundleDescriptor id of xp.stages[i] on the wire: "STAGE.JOB.TOKEN", unique
     * for the server's life and unguessable (TOKEN: 128 random bits per job), so a request
     * that names a descriptor can only be one this job's workers were told about. */
    char **wire_ids;
    /* The same for xp.stages[i]'s drain descriptor (sd_plan_stage.drain_descriptor):
     * "STAGE-drain.JOB.TOKEN", or NULL when the stage has none. */
    char **drain_wire_ids;
    ev_timer wake;
    ev_timer connect_timer;
    ev_timer tick; /* real-time progress/hang tick while bundles run */
    ev_idle kick;
    bool kick_active;
    bool finishing;
    bool cancelled;
    bool drain_requested; /* JobService.Drain: the engine drains (now, or once it exists) */
    bool scheduling;
    uint64_t bundles_done;
    size_t finalizing;       /* FinalizeBundle requests sent and not yet answered */
    int64_t started_ns;      /* when Run handed the job over (monotonic) */
    int64_t observed_ms;     /* when runner metrics were last published */
    bool waves;              /* test mode: dispatch in waves (see sd__exec_schedule) */
    bool cache_tokens;       /* stateful stages' bundles carry a user-state cache token */
    bool wave_patience;      /* waves may turn slow: not when a schedule is recorded, replayed
                              * or explored (those must not depend on real time) */
    bool wave_slow;          /* the wave in flight outlasted SD_EXEC_WAVE_PATIENCE_MS */
    int64_t wave_mono_ms;    /* when the wave in flight went out (monotonic ms) */
    sd_time wave_clock_ms;   /* the job clock then */
    bool streaming;          /* a streaming job: unbounded PCollections, or Beam's --streaming */
    char *late_dir;          /* beam:option:sundial_late_data_dir:v1, or NULL (exec_late.c) */
    sd_map late_files;       /* stage id -> FILE * of its late-data lines */
    sd_map late_coders;      /* PCollection id -> sd_coder * of its elements */
    int64_t checkpoint_ms;   /* checkpoint SDF bundles after this long (0: never; exec_options.c) */
    sd_exec_names names;     /* the user's names for stages and PCollections (exec_names.c) */
    int max_inflight;        /* bundles in flight (the server's, or a replayed schedule's) */
    sd_em_sched *sched;      /* the schedule recorded or replayed (exec_schedule.c), or NULL */
    char *record_path;       /* where the recorded schedule goes at the end, or NULL */
    sd_exec_explore explore; /* schedule exploration: which run of how many this is */
    sd_ts_driver *ts_driver; /* the engine's TestStream driver (owned by the engine), or NULL */
    sd_vec lives;            /* sd__exec_live *: live TestStreams (exec_live.c) */
    bool pausable;           /* test mode: the job may pause (exec_pause.c) */
};

/* The executor (exec.c). */
struct sd_exec {
    sd_rpc *rpc;
    struct ev_loop *loop;
    sd_fnapi *fn;
    char *endpoint;
    sd_exec_config cfg;
    sd_map runs; /* job id -> sd_exec_run* */
    /* Channels to external worker pools, kept across jobs (exec_env.c): a job whose pool was
     * used before starts its worker without a new connection. url -> sd_exec_pool *. */
    sd_map pools;
    uint64_t pool_seq;
    uint64_t worker_seq;
    sd__exec_env_starter env_starter; /* test seam (exec_int.h); NULL = the real start */
    void *env_starter_ctx;
    sd__exec_plan_source plan_source; /* test seam (exec_int.h); NULL = plan every run */
    void *plan_source_ctx;
    /* Runs that ended (their jobs have their final state) whose workers are stopped and
     * memory freed on the next loop iteration, once the state has gone out (exec.c). */
    sd_vec ended; /* sd_exec_run * */
    ev_timer reap;
};

/* ================================================================ shared steps */

/* exec_pause.c: the pause options (sundial_pause, sundial_pause_at, sundial_tap), once the
 * engine exists. SD_EINVAL naming the option (a wall-clock job refuses, saying why). */
SD_MUST_CHECK sd_status sd__exec_pause_setup(sd_exec_run *r, sd_err *err);

/* exec_live.c: live TestStreams (a payload naming a TestStreamService). */
typedef struct sd__exec_live sd__exec_live;
/* Open a stream to the service of every live TestStream of r (after the engine exists). */
SD_MUST_CHECK sd_status sd__exec_live_start(sd_exec_run *r, sd_err *err);
/* The run is going: cancel the streams still open (their callbacks then free them). */
void sd__exec_live_stop(sd_exec_run *r);

/* exec.c: a run's lifecycle. Each frees r (and stops its workers); the job gets its state. */
void sd__exec_run_finish(sd_exec_run *r, sd_job_state final_state);
/* Fail the job with the whole message (SDK errors carry tracebacks: nothing is cut). */
void sd__exec_run_fail(sd_exec_run *r, const char *fmt, ...) SD_PRINTF(2, 3);
/* sd__exec_run_fail with the engine's per-stage dump appended to the message. */
void sd__exec_run_fail_dump(sd_exec_run *r, const char *fmt, ...) SD_PRINTF(2, 3);
/* Schedule later from the loop (never re-enter sd__exec_schedule() from engine callbacks). */
void sd__exec_run_kick(sd_exec_run *r);

/* exec_names.c: the user's name for a PCollection or stage id (borrowed, valid for the run's
 * life), or NULL when it has none (an id of the runner's own). */
const char *sd__exec_pcoll_name(sd_exec_run *r, const char *id);
const char *sd__exec_stage_name(sd_exec_run *r, const char *stage_id);
const char *sd__exec_transform_name(sd_exec_run *r, const char *transform_id);
/* exec_late.c: late data to JSON-lines files, one per stage (beam:option:
 * sundial_late_data_dir:v1). setup: read the option and make the directory (err names it);
 * on_late: the engine's observer (ctx = r); close: close the files and free the coders. */
SD_MUST_CHECK sd_status sd__exec_late_setup(sd_exec_run *r, sd_em_config *cfg, sd_err *err);
void sd__exec_on_late(void *ctx, const sd_em_late *late);
void sd__exec_late_close(sd_exec_run *r);
/* exec_options.c: beam:option:sundial_drop_late_elements:v1 into r->xp.drop_late. */
SD_MUST_CHECK sd_status sd__exec_late_policy(sd_exec_run *r, sd_err *err);
void sd__exec_names_deinit(sd_exec_names *n);

/* exec_start.c: pack the job's pipeline and plan it (on the pool, or inline without one). */
SD_MUST_CHECK sd_status sd__exec_plan_submit(sd_exec_run *r, sd_err *err);
/* Forget the run of a task still planning: its plan is dropped when it arrives. */
void sd__exec_plan_task_detach(sd_exec_plan_task *t);

/* exec_options.c: the pipeline options the executor reads (see the file's table). */
/* The engine configuration the job asks for (clock, bundle shape, schedule seed, streaming). */
SD_MUST_CHECK sd_status sd__exec_engine_config(const sd_exec_run *r,
                                               sd_em_config *cfg,
                                               sd_err *err);
/* True when the job runs on the synthetic clock (the executor's default or its option). */
bool sd__exec_synthetic_clock(const sd_exec *ex, const sd_job *job);
/* beam:option:sundial_embed_input:v1 (default true): may small bundles' input go in the
 * ProcessBundleRequest of workers that declare they take it there? */
bool sd__exec_embed_input(const sd_exec_run *r);
/* beam:option:sundial_cache_tokens:v1 (default true): do a stateful stage's bundles carry a
 * user-state cache token (exec_bundle.c, dispatch)? */
bool sd__exec_cache_tokens(const sd_exec_run *r);
/* The planner options the job asks for (combiner lifting). Leaves the URLs alone. */
void sd__exec_plan_options(const sd_job *job, sd_plan_options *popt);
/* Append r->splits from beam:option:direct_test_splits:v1 (nothing when absent). */
void sd__exec_read_test_splits(sd_exec_run *r);

/* exec_schedule.c: recording and replaying the schedule. setup: read the options and flags,
 * install the engine's decision hook (before sd_em_create). check_end: a replay that ended
 * before its recording fails the job (false: r is freed). close: write a recording, free.
 * splits: report the bundle's split requests and answers (at its commit). */
SD_MUST_CHECK sd_status sd__exec_schedule_setup(sd_exec_run *r, sd_em_config *cfg, sd_err *err);
bool sd__exec_schedule_check_end(sd_exec_run *r);
/* Exploring: the seed and bundle shape of run n (from 1). */
uint64_t sd__exec_explore_seed(uint64_t n);
int sd__exec_explore_shape(uint64_t n);
/* Exploring: the prefix a failing run's message gets (naming the run, its seed and shape and
 * its recorded schedule); "" when not exploring. Owned by the caller (sd_free). */
char *sd__exec_explore_failure(const sd_exec_run *r);
/* Exploring and run r passed: forget its schedule file and say so in the job's messages.
 * True when another run follows. */
bool sd__exec_explore_passed(sd_exec_run *r);
void sd__exec_schedule_close(sd_exec_run *r);
SD_MUST_CHECK sd_status sd__exec_schedule_splits(sd_exec_run *r, sd_exec_inflight *f, sd_err *err);

/* exec_env.c: environments. */
/* Start the worker of one environment (registered with the Fn API with its descriptors). */
SD_MUST_CHECK sd_status sd__exec_env_start(sd_exec_run *r, const char *env_id, sd_err *err);
/* Close the executor's idle worker-pool channels (sd_exec_destroy). */
void sd__exec_pools_close(sd_exec *ex);
/* Stop the worker (StopWorker on the pool; TERM, then KILL, and reap a process). */
void sd__exec_env_stop(sd_exec_env *e);
/* Free a stopped environment. */
void sd__exec_env_destroy(sd_exec_env *e);
/* The planner's environment check (sd_plan_options.env_check) at Prepare: can a worker be
 * started from env? NULL, or the problem naming environment env_id and what is wrong (a
 * PROCESS command that does not exist or cannot be executed, a payload without what its kind
 * needs; each also sets *invalid: the pipeline's own fault). ctx is unused. */
char *sd__exec_env_check(void *ctx, const char *env_id, const pb_Environment *env, bool *invalid);
/* The worker-connect timer (r->connect_timer): fails the job when a worker never connected. */
void sd__exec_connect_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents);

/* exec_bundle.c: scheduling, dispatch and commit. */
void sd__exec_schedule(sd_exec_run *r);
/* Test mode: how long (real ms) a wave of bundles may be in flight before it counts as slow:
 * from then on real time counts on the job clock and ready bundles go out beside the wave
 * (sd__exec_schedule). */
#define SD_EXEC_WAVE_PATIENCE_MS 200

/* The wake-up timer (r->wake): schedules again. */
void sd__exec_wake_cb(struct ev_loop *loop, ev_timer *t, int revents);
/* Commit every ready bundle at the head of the dispatch order. May free the run. */
void sd__exec_bundle_maybe_complete(sd_exec_inflight *f);
/* Hand residual roots to the engine. False (and err set) on failure. */
bool sd__exec_add_residuals(sd_exec_inflight *f,
                            pb_DelayedBundleApplication *const *roots,
                            size_t n,
                            sd_err *err);
/* Free an in-flight bundle's record (stops its split timer). NULL is a no-op. */
void sd__exec_inflight_destroy(sd_exec_inflight *f);

/* exec_data.c: the data plane. */
/* The most input (data and timers) a ProcessBundleRequest carries embedded. */
#define SD_EMBED_INPUT_BYTES (256 * 1024)

/* The last Elements message of a bundle's input, and what it points to. */
typedef struct sd_exec_input {
    pb_Elements msg;
    pb_Elements_Data data, end;
    pb_Elements_Data *datas[2];
    pb_Elements_Timers *timers;
    pb_Elements_Timers **tptrs;
} sd_exec_input;

/*
 * Can f's whole input go in its ProcessBundleRequest (the worker declared
 * beam:protocol:control_request_elements_embedding:v1, the input is small, no replayed split
 * cuts it)? Then true and in->msg is that input, every data input and timer family ended
 * (free with sd__exec_input_deinit once sent).
 */
bool sd__exec_input_embed(sd_exec_run *r, sd_exec_inflight *f, sd_exec_input *in);
void sd__exec_input_deinit(sd_exec_input *in);
/* Send a dispatched bundle's input. SD_OK, or the job has failed and the error is returned. */
SD_MUST_CHECK sd_status sd__exec_send_bundle_input(sd_exec_run *r,
                                                   sd_exec_inflight *f,
                                                   sd_exec_env *e);
/* exec_env.c: the worker of e is gone (its control stream ended: why). A PROCESS worker's
 * exit status is awaited (reaped now, or within a grace period) so the job's error names its
 * pid and signal: true then, and the job fails from there. Otherwise the job fails now with
 * why (false, unless the run is already ending). */
bool sd__exec_env_lost(sd_exec_env *e, const char *why);
/* The Fn API hook for Elements from a worker (hooks.ctx = its sd_exec_env). */
void sd__exec_on_worker_elements(sd_fnapi_worker *w, const pb_Elements *msg, void *ctx);

/* exec_progress.c: liveness and runner-initiated splits. */
/* The real-time tick (r->tick) while bundles run: progress requests, hang and stall checks. */
void sd__exec_tick_cb(struct ev_loop *loop, ev_timer *t, int revents);
/* Arm the test-split timer of a just-dispatched bundle when a split plan names its stage. */
void sd__exec_arm_test_split(sd_exec_run *r, sd_exec_inflight *f);
/* Start the checkpoint timer of a splittable stage's bundle in a streaming job. */
void sd__exec_arm_checkpoint(sd_exec_run *r, sd_exec_inflight *f);
/* Replaying a schedule: apply the splits it recorded for this bundle (before its input is
 * sent; no split is asked for while replaying). False when the job failed. */
bool sd__exec_replay_splits(sd_exec_run *r, sd_exec_inflight *f);

/* exec_state.c: the State API. */
/* The Fn API hook for a StateRequest from a worker (hooks.ctx = its sd_exec_env). */
void sd__exec_on_worker_state(sd_fnapi_worker *w, const pb_StateRequest *req, void *ctx);
/* Free a paged state reply (the value free function of r->pages). */
void sd__exec_page_destroy(void *p);

/* exec_metrics.c: monitoring infos. */
/* Keep one SDK monitoring info (packed) for the job's committed metrics. */
void sd__exec_metrics_add(sd_exec_run *r, const pb_MonitoringInfo *mi);

/* Duplicate reports of one metric merged (exec_metrics_merge.c): what to undo afterwards. */
typedef struct sd_exec_merged {
    size_t *keep;               /* scratch: the indices of the infos that stay */
    sd_buf *bufs;               /* the merged payloads, n of them */
    ProtobufCBinaryData *saved; /* the payload each merged info had */
    pb_MonitoringInfo **at;     /* the info each merged payload was put into */
    size_t n;
} sd_exec_merged;

/*
 * Merge the reports in infos[0, n) that name the same metric (type, URN, labels) by their
 * type's aggregation: infos is compacted in place to the *out_n that stay (first reports
 * carry the merged payloads); the others are left out, not freed. A type that is not merged
 * keeps every report, or with pass_latest only each metric's latest. Until
 * sd__exec_metrics_merged_release(m), the merged infos point into m's buffers.
 */
SD_MUST_CHECK sd_status sd__exec_metrics_merge(pb_MonitoringInfo **infos,
                                               size_t n,
                                               bool pass_latest,
                                               size_t *out_n,
                                               sd_exec_merged *m);
/* Put the merged infos' own payloads back and free m's buffers. */
void sd__exec_metrics_merged_release(sd_exec_merged *m);
/* The value destructor of sd_exec_run.gauges. */
void sd__exec_gauge_free(void *v);
/* Publish the runner's own metrics (and feed the web view); final at the run's end. */
void sd__exec_observe(sd_exec_run *r, bool final);
/* Hand the collected monitoring infos to the job. */
void sd__exec_publish_metrics(sd_exec_run *r);

/* exec_web.c: the web view's hook in sd__exec_observe(). */
void sd__exec_web_observe(sd_exec_run *r, bool final);
/* exec_web.c: r->metrics is about to be replaced by its n_after merged reports: count what the
 * view has not seen yet, and take the merged ones as seen. */
void sd__exec_web_metrics_merged(sd_exec_run *r, size_t n_after);

/* exec_trace.c: copy the engine's time trace onto the job (sd_job_set_trace), at the run's end
 * before its terminal state is set (the engine is destroyed after). */
void sd__exec_trace_keep(sd_exec_run *r);

#endif
