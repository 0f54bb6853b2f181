/* Sundial: Beam's Job API, artifact staging and artifact retrieval services. */
#ifndef SD_RUNNER_JOBSERVICE_JOBSERVICE_H
#define SD_RUNNER_JOBSERVICE_JOBSERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "google/protobuf/struct.pb-c.h"
#include "org/apache/beam/model/job_management/v1/beam_job_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/beam_runner_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/metrics.pb-c.h"
#include "runner/base/err.h"
#include "runner/base/status.h"
#include "runner/base/time.h"
#include "runner/transport/rpc.h"

/*
 * Overview
 * --------
 * sd_jobsvc serves three gRPC services on an sd_rpc_server:
 *   org.apache.beam.model.job_management.v1.JobService               (Prepare, Run, GetState, ...)
 *   org.apache.beam.model.job_management.v1.ArtifactStagingService   (ReverseArtifactRetrieval)
 *   org.apache.beam.model.job_management.v1.ArtifactRetrievalService (Resolve, GetArtifact)
 * It owns the job objects (sd_job). It does not run pipelines: the executor injects hooks
 * (validate, start, cancel) and reports progress through the sd_job_* calls below.
 *
 * Threads: every function here runs on the libev loop thread of the sd_rpc hub (the same
 * thread that runs the transport's callbacks). Nothing is locked.
 *
 * Job lifecycle (Beam JobState numbers):
 *
 *   Prepare -> STOPPED --Run--> STARTING --executor--> RUNNING --> DONE | FAILED | CANCELLED
 *                 |                 \______ Cancel ______> CANCELLING --executor--> CANCELLED
 *                 \--Cancel (never run)--> CANCELLED
 *
 * Terminal states (DONE, FAILED, CANCELLED, UPDATED, DRAINED) are never left.
 *
 * Per-job history: one ring of at most SD_JOB_HISTORY_MAX entries holds the job's messages and
 * state changes in order. When it is full the oldest entry is dropped; GetMessageStream replays
 * what is left and then follows the job live.
 *
 * Jobs live until sd_jobsvc_destroy(). Staged artifacts are files under
 * <artifact_dir>/<job id>/ named dep-NNN-<sanitized basename>; destroy removes them.
 */

#define SD_JOB_HISTORY_MAX 1000

/* Largest chunk GetArtifact sends (bytes). */
#define SD_JOBSVC_CHUNK_MAX (1024 * 1024)

/* Pipeline options Sundial understands (DescribePipelineOptions lists them, bare names). */
#define SD_JOB_OPTION_CLOCK       "beam:option:sundial_clock:v1"      /* synthetic|wall */
#define SD_JOB_OPTION_TEST_SPLITS "beam:option:direct_test_splits:v1" /* JSON object */

typedef struct sd_jobsvc sd_jobsvc;
typedef struct sd_job sd_job;

/* Beam JobState.Enum numbers. */
typedef enum sd_job_state {
    SD_JOB_UNSPECIFIED = 0,
    SD_JOB_STOPPED = 1,
    SD_JOB_RUNNING = 2,
    SD_JOB_DONE = 3,
    SD_JOB_FAILED = 4,
    SD_JOB_CANCELLED = 5,
    SD_JOB_UPDATED = 6,
    SD_JOB_DRAINING = 7,
    SD_JOB_DRAINED = 8,
    SD_JOB_STARTING = 9,
    SD_JOB_CANCELLING = 10,
    SD_JOB_UPDATING = 11
} sd_job_state;

/* Beam JobMessage.MessageImportance numbers. */
typedef enum sd_job_importance {
    SD_JOB_MSG_DEBUG = 1,
    SD_JOB_MSG_DETAILED = 2,
    SD_JOB_MSG_BASIC = 3,
    SD_JOB_MSG_WARNING = 4,
    SD_JOB_MSG_ERROR = 5
} sd_job_importance;

/*
 * A job's time trace as an artifact (ArtifactRetrievalService.GetArtifact on the job port):
 * type_urn this, type_payload the job id (UTF-8). The data is the trace as JSON lines, one
 * record a line (docs/trace.md). Not a metric: no SDK ever receives it unasked.
 */
#define SD_URN_ARTIFACT_SUNDIAL_TRACE "sundial:artifact:trace:v1"

/* Hooks injected by the executor. ctx is passed back to each. */
typedef struct sd_job_hooks {
    /*
     * Check that the pipeline can run (called in Prepare, before the job exists). It may run
     * on a background thread (sd_jobsvc_set_background), even after the executor is gone: it
     * must only read its arguments and must not use ctx's state. On failure
     * fill err with ONE message listing every problem and return the code: SD_EUNIMPL becomes
     * gRPC UNIMPLEMENTED, SD_ENOMEM RESOURCE_EXHAUSTED, anything else INVALID_ARGUMENT; the
     * client sees err's message unchanged. pipeline and options are borrowed
     * for the call; options is never NULL (an empty Struct when the client sent none).
     * NULL hook: every pipeline is accepted.
     */
    sd_status (*validate)(void *ctx,
                          const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *pipeline,
                          const Google__Protobuf__Struct *options,
                          sd_err *err);
    /*
     * Start running the job (Run). Must return quickly; progress is reported later through
     * sd_job_set_state() and friends on the loop thread. On error the job becomes FAILED with
     * err's message and Run fails with it. NULL hook: Run fails the job ("no executor").
     */
    sd_status (*start)(void *ctx, sd_job *job, sd_err *err);
    /*
     * Cancel requested on a STARTING or RUNNING job, which is now CANCELLING. The executor
     * later calls sd_job_set_state(job, SD_JOB_CANCELLED) (it may do so from inside the hook).
     * NULL hook: the job is marked CANCELLED at once.
     */
    void (*cancel)(void *ctx, sd_job *job);
    /*
     * Drain requested on a STARTING or RUNNING job, which is now DRAINING: the executor stops
     * the job's sources, lets what was read finish, and ends the job DRAINED (or FAILED, or
     * CANCELLED when a Cancel follows). NULL hook: Drain is refused (UNIMPLEMENTED).
     */
    void (*drain)(void *ctx, sd_job *job);
    /*
     * The job's time trace as JSON lines into out (appended), for GetArtifact of
     * SD_URN_ARTIFACT_SUNDIAL_TRACE. SD_ENOTFOUND (err naming why) when the job has none (it
     * never ran). NULL hook: no job has a trace.
     */
    sd_status (*trace)(void *ctx, sd_job *job, sd_buf *out, sd_err *err);
    void *ctx;
} sd_job_hooks;

/* ---------------------------------------------------------------- service */

/*
 * Create the service. hooks is copied. artifact_dir may be NULL: then no staging endpoint is
 * ever offered (dependencies stay as the client sent them). Otherwise it is created if missing
 * (mode 0700) and each job stages into <artifact_dir>/<job id>/; the directory should be
 * private to this service (two services sharing it would both use job-001).
 * rpc may be NULL when the service is driven without the transport (tests).
 * OUT: out. Caller owns; free with sd_jobsvc_destroy(). Errors: SD_ENOMEM, SD_EIO (directory).
 */
SD_MUST_CHECK sd_status sd_jobsvc_create(sd_rpc *rpc,
                                         const sd_job_hooks *hooks,
                                         const char *artifact_dir,
                                         sd_jobsvc **out,
                                         sd_err *err);

/*
 * Register every method of the three services on srv (before sd_rpc_server_start()).
 * self_endpoint ("host:port", copied, may be NULL) is what Prepare hands out as the
 * artifact staging endpoint; when the port is only known after sd_rpc_server_listen(), pass
 * NULL here and call sd_jobsvc_set_endpoint() later. Errors: SD_ENOMEM, SD_ESTATE (registered
 * twice, or rpc was NULL at create), or whatever sd_rpc_server_add_method returns.
 */
SD_MUST_CHECK sd_status sd_jobsvc_register(sd_jobsvc *svc,
                                           sd_rpc_server *srv,
                                           const char *self_endpoint);

/* Set or replace the endpoint offered for artifact staging (copied; NULL = offer none). */
SD_MUST_CHECK sd_status sd_jobsvc_set_endpoint(sd_jobsvc *svc, const char *self_endpoint);

/*
 * Free every job, staged file and open-call record. Shut the server down first (its calls
 * must have closed) and stop the executor: sd_job pointers are invalid afterwards.
 * NULL is a no-op.
 */
void sd_jobsvc_destroy(sd_jobsvc *svc);

/* Look a job up by id; NULL when unknown. Borrowed (valid until sd_jobsvc_destroy). */
sd_job *sd_jobsvc_find(sd_jobsvc *svc, const char *job_id);

/* Number of jobs prepared so far (also those the history bound made it forget). */
size_t sd_jobsvc_job_count(const sd_jobsvc *svc);

/*
 * Keep at most this many finished jobs (with their messages, metrics and pipeline); older
 * ones are forgotten when a new job is prepared, unless a call still streams from them.
 * Running jobs are never forgotten. Default SD_JOB_HISTORY_DEFAULT.
 */
#define SD_JOB_HISTORY_DEFAULT 100
void sd_jobsvc_set_history(sd_jobsvc *svc, size_t max_finished);

/*
 * Also forget a finished job ttl_ms after it ended (checked when a job is prepared and when
 * jobs are listed). 0 = never. Default SD_JOB_HISTORY_TTL_DEFAULT_MS (a day).
 */
#define SD_JOB_HISTORY_TTL_DEFAULT_MS ((sd_time)24 * 3600 * 1000)
void sd_jobsvc_set_history_ttl(sd_jobsvc *svc, sd_time ttl_ms);

/*
 * Refuse a PrepareJobRequest larger than max_request_bytes (checked before it is decoded) or
 * whose pipeline lists more than max_transforms transforms (counted on the wire, before it is
 * decoded), with RESOURCE_EXHAUSTED naming the limit. 0 = no limit. Defaults: below.
 */
#define SD_MAX_PIPELINE_BYTES_DEFAULT      ((size_t)512 << 20)
#define SD_MAX_PIPELINE_TRANSFORMS_DEFAULT ((size_t)200000)
void sd_jobsvc_set_limits(sd_jobsvc *svc, size_t max_request_bytes, size_t max_transforms);

/*
 * Check Prepare requests (decode, count, validate) on bg's threads instead of the loop thread,
 * so a large pipeline does not stall other clients; a request of at most 64 KiB is still
 * checked inline (it is quick, and the thread hand-overs would cost a small job more than the
 * check). bg is borrowed: close it only after sd_jobsvc_close or sd_jobsvc_destroy. NULL (the
 * default) checks everything inline.
 */
struct sd_bg;
void sd_jobsvc_set_background(sd_jobsvc *svc, struct sd_bg *bg);

/*
 * The server is stopping: Prepares in progress are answered UNAVAILABLE and new ones refused.
 * Everything else keeps working until sd_jobsvc_destroy. NULL is a no-op.
 */
void sd_jobsvc_close(sd_jobsvc *svc);

/*
 * Number of jobs not yet in a terminal state: prepared but not run, starting, running,
 * cancelling. The idle-shutdown timer of `sundial --idle_shutdown_timeout` counts these, as
 * Prism counts jobs prepared minus jobs terminated. Loop thread.
 */
size_t sd_jobsvc_active_count(const sd_jobsvc *svc);

/* ---------------------------------------------------------------- job accessors */

/* The job id ("job-001"), also its preparation id and staging token. Borrowed. */
const char *sd_job_id(const sd_job *job);

/* The job name the client gave (may be ""). Borrowed. */
const char *sd_job_name(const sd_job *job);

/*
 * The pipeline as prepared, with environment dependencies rewritten to the staged files
 * (type beam:artifact:type:file:v1, path under sd_job_artifact_dir) once staging finished.
 * Borrowed, valid while the job lives. Never NULL.
 */
const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *sd_job_pipeline(const sd_job *job);

/* The pipeline options Struct. Borrowed. Never NULL (empty when the client sent none). */
const Google__Protobuf__Struct *sd_job_options(const sd_job *job);

/*
 * One option's value, looked up by key. key is either the full URN-style key the SDKs send
 * ("beam:option:direct_test_splits:v1") or a bare name ("direct_test_splits"), which is tried
 * as given and then as "beam:option:<name>:v1". Borrowed; NULL when absent.
 */
const Google__Protobuf__Value *sd_job_option(const sd_job *job, const char *key);

/*
 * The option as text: a string value as it is; any other kind (object, list, number, bool,
 * null) rendered as JSON, e.g. direct_test_splits' object. Borrowed, valid while the job
 * lives (rendered text is cached on the job). NULL when absent or out of memory.
 */
const char *sd_job_option_string(const sd_job *job, const char *key);

/*
 * The option as a bool: a bool value, or a string "true"/"false" (any case). dflt when the
 * option is absent or of another kind.
 */
bool sd_job_option_bool(const sd_job *job, const char *key, bool dflt);

/*
 * The option as an integer: a number with no fraction, or a decimal string. Returns false
 * (and leaves *out alone) when absent or not an integer. OUT: out.
 */
bool sd_job_option_int(const sd_job *job, const char *key, int64_t *out);

/*
 * The option rendered as JSON text (objects, lists, numbers, strings, bools, null).
 * Caller owns; free with sd_free. NULL when absent or out of memory.
 */
char *sd_job_option_json(const sd_job *job, const char *key);

/*
 * Directory holding this job's staged artifacts (<artifact_dir>/<job id>), or NULL when the
 * service has no artifact_dir. Borrowed. Made (mode 0700) when first needed: by staging, or
 * by sd_job_make_artifact_dir; the job's end removes the staged files and the directory.
 */
const char *sd_job_artifact_dir(const sd_job *job);

/* Make the job's directory now if it has one (the executor hands it to a process worker as
 * --semi_persist_dir). An error names the directory. */
SD_MUST_CHECK sd_status sd_job_make_artifact_dir(sd_job *job, sd_err *err);

/* ---------------------------------------------------------------- progress (executor) */

/*
 * Move the job to state s and tell every state and message stream. Rules: a terminal state
 * (DONE, FAILED, CANCELLED, UPDATED, DRAINED) is never left; nothing goes back to STOPPED or
 * UNSPECIFIED; a CANCELLING job only moves to a terminal state; setting the current state is
 * a no-op. Rejected changes are ignored (logged at debug). Returns true if the state changed.
 * Cannot fail: history is kept in a fixed ring and a failed allocation only loses the entry.
 */
bool sd_job_set_state(sd_job *job, sd_job_state s);

/* The current state. */
sd_job_state sd_job_state_get(const sd_job *job);

/* True for DONE, FAILED, CANCELLED, UPDATED and DRAINED. */
bool sd_job_state_is_terminal(sd_job_state s);

/* Beam's name for a state ("RUNNING"); "UNKNOWN" for numbers outside the enum. */
const char *sd_job_state_name(sd_job_state s);

/*
 * Add a job message (printf-style) with a Beam importance (sd_job_importance). It goes into
 * the job's history ring and to every open message stream. Cannot fail (an out-of-memory
 * message is dropped).
 */
void sd_job_message(sd_job *job, int importance, const char *fmt, ...) SD_PRINTF(3, 4);

/*
 * Record the failure: an ERROR message with the text, then state FAILED. On a job that is
 * already terminal only the message is recorded. The first failure text is kept and
 * returned by sd_job_error().
 */
void sd_job_fail(sd_job *job, const char *fmt, ...) SD_PRINTF(2, 3);

/* The first failure text, or NULL. Borrowed. */
const char *sd_job_error(const sd_job *job);

/*
 * Replace the job's committed metrics with copies of infos[0..n) (payloads byte for byte, so
 * SDK-specific encodings pass through). GetJobMetrics returns them as MetricResults.committed.
 * infos is borrowed for the call. On SD_ENOMEM the previous metrics are kept.
 */
SD_MUST_CHECK sd_status
sd_job_set_metrics(sd_job *job,
                   const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *const *infos,
                   size_t n);

/* Same, for MetricResults.attempted (tentative values while the job runs). */
SD_MUST_CHECK sd_status sd_job_set_attempted_metrics(
    sd_job *job,
    const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *const *infos,
    size_t n);

/* The job's metrics as GetJobMetrics would report them. Borrowed; never NULL. */
const Org__Apache__Beam__Model__JobManagement__V1__MetricResults *sd_job_metrics(const sd_job *job);

/* Executor's per-job pointer (NULL initially). Not freed by the service. */
void sd_job_set_user(sd_job *job, void *user);
void *sd_job_user(const sd_job *job);

/* ---------------------------------------------------------------- views (jobview.c) */

/*
 * Read-only access for the web UI and other observers, and the Job API's Cancel and Drain for
 * callers that are not gRPC calls. Loop thread, like everything here.
 */

/*
 * The jobs the service keeps, in preparation order (oldest first). Finished jobs beyond the
 * history bound or TTL are forgotten first, as GetJobs does. OUT: out_jobs (borrowed array,
 * valid until a job is prepared or forgotten, i.e. until control returns to the loop).
 * Returns their number.
 */
size_t sd_jobsvc_jobs(sd_jobsvc *svc, sd_job *const **out_jobs);

/* Wall-clock ms since the epoch: when the job was prepared; when Run first moved it to
 * STARTING or RUNNING (0 = never run); when it reached a terminal state (0 = not yet). */
sd_time sd_job_created_ms(const sd_job *job);
sd_time sd_job_started_ms(const sd_job *job);
sd_time sd_job_ended_ms(const sd_job *job);

/* One entry of the job's history ring: a message or a state change. */
typedef struct sd_job_event {
    uint64_t seq;    /* 1, 2, ... per job, in order (GetMessageStream's message_id) */
    sd_time time_ms; /* wall clock */
    bool is_state;
    int value;        /* sd_job_state, or the message's sd_job_importance */
    const char *text; /* messages: borrowed (valid until the entry leaves the ring); states: "" */
} sd_job_event;

/* Entries in the history ring now (at most SD_JOB_HISTORY_MAX; the oldest go first). */
size_t sd_job_history_len(const sd_job *job);

/* Entry i of the ring, 0 = the oldest kept. OUT: out. i must be < sd_job_history_len. */
void sd_job_history_at(const sd_job *job, size_t i, sd_job_event *out);

/*
 * JobService.Cancel on job job_id, with the same rules (a job that never ran is CANCELLED at
 * once; a running one goes to CANCELLING and the executor is told; a terminal job is left
 * alone). OUT: out_state = the state afterwards. SD_ENOTFOUND (err names the id) when unknown.
 */
SD_MUST_CHECK sd_status sd_jobsvc_cancel_job(sd_jobsvc *svc,
                                             const char *job_id,
                                             sd_job_state *out_state,
                                             sd_err *err);

/*
 * JobService.Drain on job job_id: a STARTING or RUNNING job goes to DRAINING and the executor
 * is told (sd_job_hooks.drain); a job that never ran (STOPPED) is DRAINED at once (it read
 * nothing); a draining or drained job is left alone. OUT: out_state = the state afterwards.
 * Errors: SD_ENOTFOUND (unknown id), SD_ESTATE (the job is being cancelled or has ended
 * otherwise: err names its state), SD_EUNIMPL (no executor that can drain).
 */
SD_MUST_CHECK sd_status sd_jobsvc_drain_job(sd_jobsvc *svc,
                                            const char *job_id,
                                            sd_job_state *out_state,
                                            sd_err *err);

/*
 * Attach an observer's record to the job (the executor keeps its web view there, so it
 * outlives the run): the job frees it with free_fn(view) when it is forgotten or the service
 * is destroyed, and an earlier record is freed when replaced. view NULL detaches (and frees).
 */
void sd_job_set_view(sd_job *job, void *view, void (*free_fn)(void *view));

/* The record set with sd_job_set_view, or NULL. Borrowed. */
void *sd_job_view(const sd_job *job);

/* A second record of the same kind: the executor's copy of the job's time trace. */
void sd_job_set_trace(sd_job *job, void *trace, void (*free_fn)(void *trace));
void *sd_job_trace(const sd_job *job);

#endif
