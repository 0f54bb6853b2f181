/*
 * Sundial C SDK: running a pipeline — sd_pipeline_run, its options and its result. Part of
 * <sundial/sundial.h>, which includes it; it may also be included alone.
 */
#ifndef SD_SUNDIAL_RUN_H
#define SD_SUNDIAL_RUN_H

#include <sundial/sundial.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================================= */
/* Running                                                                                    */
/* ========================================================================================= */

typedef enum sd_env_kind {
    SD_ENV_LOOPBACK = 0, /* beam:env:external:v1 served by this process's worker pool */
    SD_ENV_PROCESS = 1   /* beam:env:process:v1: the runner starts this program as a worker */
} sd_env_kind;

typedef struct sd_run_options {
    const char *endpoint; /* job server "host:port"; NULL = embedded runner */
    const char *job_name; /* NULL = the pipeline's name */
    bool wall_clock;      /* production mode clock; default synthetic (test mode) */
    int timeout_ms;       /* give up (cancel) after this long; 0 = no limit */
    sd_env_kind environment;
    const char *process_command; /* SD_ENV_PROCESS: default the running program's path */
    /* Extra pipeline options with string values (e.g. "beam:option:direct_test_splits:v1"),
     * n_options names and values. */
    size_t n_options;
    const char *const *option_names;
    const char *const *option_values;
    /* Drain the job (JobService.Drain) this long after it was submitted, if it is still
     * running: its sources stop (TestStreams drop the events not played, splittable DoFns
     * truncate their restrictions: see sd_dofn.truncate_restriction), what was read is
     * processed, every window fires, and the run ends DRAINED. 0 = never. */
    int drain_after_ms;
    /* Record the run's schedule — its bundles and their order, clock jumps, runner-initiated
     * splits and the SDK's answers, the seed — to this file when the job ends (a Sundial
     * runner on its test-mode clock; the pipeline option
     * beam:option:sundial_record_schedule:v1). NULL: no recording. */
    const char *record_schedule;
    /* Replay a recorded schedule: the same seed, bundle shape and caps, and every decision
     * checked against the file; the job fails at the first step that differs, naming it
     * (beam:option:sundial_replay_schedule:v1). NULL: no replay. */
    const char *replay_schedule;
    /* Schedule exploration: run the pipeline explore_seeds times 3 times, under seeds 1..K
     * and each bundle shape (greedy, one key, one element per bundle), recording each run's
     * schedule, and stop at the first run that fails: the result then names its seed, its
     * shape and its recorded schedule, which replay_schedule reproduces. 0: one run. */
    int explore_seeds;
    /* Where exploration writes its schedule files (NULL: $TMPDIR, else /tmp): "<dir>/<job
     * name>-seed<K>-<shape>.schedule". Only the failing run's file is kept. */
    const char *explore_dir;
    /* Fetch the job's time trace when it ends into sd_run_result.trace (a Sundial runner:
     * the job artifact sundial:artifact:trace:v1; docs/trace.md). */
    bool trace;
} sd_run_options;

/* Beam JobState numbers of the terminal states. */
typedef enum sd_run_state {
    SD_RUN_UNKNOWN = 0,
    SD_RUN_DONE = 3,
    SD_RUN_FAILED = 4,
    SD_RUN_CANCELLED = 5,
    SD_RUN_DRAINED = 8
} sd_run_state;

typedef struct sd_run_metric {
    char *transform; /* PTRANSFORM label */
    char *name;      /* NAME label */
    int64_t value;
} sd_run_metric;

/*
 * A watermark the runner or a source reported, as the job ended:
 *   stage watermarks    id = the runner's stage id, name = its readable name (the transforms
 *                       it runs), input and output = the stage's input and output watermarks
 *                       (Sundial's beam:metric:sundial:input_watermark:v1 / output_...);
 *   partition watermarks  id = the partitioned source's transform, name = "p0", "p1", ... or
 *                       "source" (the minimum over active partitions), output = its last
 *                       watermark, input = SD_TIME_MIN (beam:metric:sundial:
 *                       partition_watermark:v1, reported by the source with every step).
 * Watermarks are ms since the epoch (SD_TIME_MIN before any data, SD_TIME_MAX at the end).
 */
typedef struct sd_run_watermark {
    char *id;
    char *name;
    sd_time input;
    sd_time output;
} sd_run_watermark;

typedef struct sd_run_result {
    sd_run_state state;
    char *job_id;
    char *error; /* failure message (job messages of error importance), or NULL */
    sd_run_metric *metrics;
    size_t n_metrics;
    /* Schedule exploration (sd_run_options.explore_seeds): the runs made, and of the run
     * that failed (explore_seed 0: none failed) its seed, its bundle shape ("greedy",
     * "one_key", "one_element"; static) and its recorded schedule file (owned). */
    int explore_runs;
    uint64_t explore_seed;
    const char *explore_shape;
    char *schedule_file;
    sd_run_watermark *stage_watermarks; /* from a Sundial runner; none from others */
    size_t n_stage_watermarks;
    sd_run_watermark *partition_watermarks;
    size_t n_partition_watermarks;
    /* With sd_run_options.trace: the job's time trace as JSON lines, one record a line
     * (docs/trace.md), NUL-terminated, trace_len bytes before the NUL; owned. NULL when not
     * asked for or the runner keeps none (a warning is logged); sd_run_result_deinit frees it
     * (or take it and free it with sd_free). */
    char *trace;
    size_t trace_len;
} sd_run_result;

/*
 * Run the pipeline to completion. opts may be NULL (all defaults). OUT: result (may be NULL;
 * free with sd_run_result_deinit). Returns SD_OK when the job finished DONE (or DRAINED, after
 * opts->drain_after_ms); a construction
 * error's code; SD_EUNAVAIL when the runner could not be reached or started; SD_ETIMEOUT; or
 * SD_ESTATE when the job ended FAILED or CANCELLED (err holds the failure message).
 */
SD_API SD_MUST_CHECK sd_status sd_pipeline_run(sd_pipeline *p,
                                               const sd_run_options *opts,
                                               sd_run_result *result,
                                               sd_err *err);
SD_API void sd_run_result_deinit(sd_run_result *r);
/* The artifact type of a Sundial job's time trace (type_payload: the job id). */
#define SD_RUN_TRACE_ARTIFACT "sundial:artifact:trace:v1"
/* Sum of user counter `name` over all transforms (0 when absent). */
SD_API int64_t sd_run_result_counter(const sd_run_result *r, const char *name);
/* The counter name under which a Sundial runner reports late elements it dropped (summed over
 * its GroupByKeys): sd_run_result_counter(r, SD_RUN_DROPPED_LATE). */
#define SD_RUN_DROPPED_LATE "beam:metric:sundial:dropped_late_elements:v1"
/* The watermark of partition `partition` ("p0", ..., or "source") of the partitioned source
 * whose transform id contains `source` (NULL: any); SD_TIME_MIN when not reported. */
SD_API sd_time sd_run_result_partition_watermark(const sd_run_result *r,
                                                 const char *source,
                                                 const char *partition);

#ifdef __cplusplus
}
#endif

#endif
