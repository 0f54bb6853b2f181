/*
 * Sundial: job executor.
 *
 * What it does
 * ------------
 * The job service calls start() with a prepared pipeline. The executor plans it (runner/plan),
 * registers the plan's PCollections and stages with a fresh engine (runner/engine), starts one
 * SDK worker per environment, then drives the loop below until the engine says it is done:
 *
 *     schedule():  while fewer than max_inflight bundles run:
 *                      b = sd_em_next_bundle()            runner-side stages run inside
 *                      dispatch(b): ProcessBundle instruction + one Elements message carrying
 *                                   the whole input and every is_last marker
 *                  nothing in flight: done -> DONE; stuck -> FAILED with the engine's dump;
 *                                     waiting on the wall clock -> ev_timer
 *     worker data:     Elements -> sd_em_bundle_output/_timers; is_last counts down
 *     worker control:  ProcessBundleResponse -> residuals, metrics
 *     both arrived:    sd_em_complete_bundle(); schedule()
 *     state requests:  side inputs and user state from the engine, paged by continuation token
 *
 * Why one Elements message per bundle: the TypeScript SDK worker loses data when a bundle's
 * input spans several messages and rejects messages over 4 MB (research note §10), so bundles
 * are capped in bytes by the engine and sent whole.
 *
 * Instruction ids are "<job>/<bundle>" so they are unique across jobs sharing a worker server.
 * Everything runs on the libev loop thread.
 *
 * Failure policy: any worker error, lost worker, malformed data, or engine error fails the job
 * with a message naming the stage/bundle/worker and the cause; the runner keeps serving other
 * jobs. There are no retries (as in Prism): a local runner should surface the first failure.
 */
#include "runner/exec/exec.h"

#include <errno.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "org/apache/beam/model/job_management/v1/beam_job_api.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/bg.h"
#include "runner/base/log.h"
#include "runner/base/rand.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "runner/base/vec.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"
#include "runner/exec/exec_int.h"
#include "runner/plan/plan.h"
#include "runner/urns/urns.h"

#define DEFAULT_MAX_BUNDLE_BYTES (256 * 1024)
/* The most bundle input one Data message carries (whole elements; a larger one goes alone). */
#define SD_DATA_PIECE_BYTES (1024 * 1024)
#define DEFAULT_MAX_INFLIGHT 4
#define STATE_CHUNK_BYTES (1024 * 1024)
/* A bundle that has run this long gets a progress request every PROGRESS_EVERY_MS. */
#define PROGRESS_EVERY_MS 2000
#define DEFAULT_STALL_TIMEOUT_S 600

/* ================================================================ types */

typedef struct run run;

typedef enum env_kind { ENV_EXTERNAL, ENV_PROCESS } env_kind;

typedef struct env_run {
    run *r;
    char *env_id;
    env_kind kind;
    char *worker_id;
    sd_worker *worker;
    /* EXTERNAL */
    char *pool_url;
    sd_rpc_channel *pool;
    /* PROCESS */
    pid_t pid;
    ev_child child;
    ev_timer child_poll; /* used instead of ev_child on a non-default loop */
    bool child_active;
    bool poll_active;
    bool exited;
    struct start_call *start; /* the StartWorker call in flight, if any */
} env_run;

/*
 * Context of a StartWorker call. The pool may answer after the job already ended (a worker
 * that fails its first bundle before the pool replies), so the call does not point at the
 * env_run directly: env_free() clears `e` and the callback then only frees this.
 */
typedef struct start_call {
    env_run *e; /* NULL once the environment is gone */
} start_call;

typedef struct inflight {
    run *r;
    sd_bundle *b;
    char *instruction_id;
    const sd_xstage *st;
    env_run *env;
    int lasts_remaining;
    bool response_received;
    int64_t response_ms; /* when the ProcessBundle response arrived */
    bool failed;
    bool ready; /* response and every is_last arrived; waiting for its turn to commit */
    /* channel splits */
    bool has_split;
    size_t first_residual;
    ev_timer split_timer;
    bool split_timer_active;
    const split_plan *splits;
    size_t next_split;
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
} inflight;

typedef struct paged_state {
    sd_buf data;
    size_t offset;
} paged_state;

typedef struct plan_task plan_task;
static void plan_task_detach(plan_task *t);

struct run {
    sd_exec *ex;
    sd_job *job;
    char *job_id;
    plan_task *planning; /* the plan being built off the loop thread (Run), or NULL */
    sd_plan *plan;
    sd_xplan xp;
    sd_em *em;
    sd_vec envs; /* env_run* */
    sd_map inflight; /* instruction id -> inflight* */
    sd_vec order;    /* inflight* in dispatch order: bundles commit in this order */
    sd_map pages;    /* continuation token -> paged_state* */
    uint64_t next_token;
    sd_vec metrics; /* sd_buf: packed MonitoringInfo */
    sd_vec splits;  /* split_plan */
    /* The ProcessBundleDescriptor id of xp.stages[i] on the wire: "STAGE.JOB.TOKEN", unique
     * for the server's life and unguessable (TOKEN: 128 random bits per job), so a request
     * that names a descriptor can only be one this job's workers were told about. */
    char **wire_ids;
    ev_timer wake;
    ev_timer connect_timer;
    ev_timer tick; /* real-time progress/hang tick while bundles run */
    ev_idle kick;
    bool kick_active;
    bool finishing;
    bool cancelled;
    bool scheduling;
    uint64_t bundles_done;
    size_t finalizing; /* FinalizeBundle requests sent and not yet answered */
    int64_t started_ns; /* when Run handed the job over (monotonic) */
    int64_t observed_ms; /* when runner metrics were last published */
    bool waves;          /* test mode: dispatch in waves (see schedule) */
};

struct sd_exec {
    sd_rpc *rpc;
    struct ev_loop *loop;
    sd_fnapi *fn;
    char *endpoint;
    sd_exec_config cfg;
    sd_map runs; /* job id -> run* */
    uint64_t worker_seq;
    sd__exec_env_starter env_starter; /* test seam (exec_int.h); NULL = the real start */
    void *env_starter_ctx;
};

static void schedule(run *r);
typedef struct progress_ctx {
    sd_exec *ex;
    char *iid;
    uint64_t seq;
} progress_ctx;
static inflight *inflight_by_id(sd_exec *ex, const char *iid);
static void run_fail(run *r, const char *fmt, ...) SD_PRINTF(2, 3);
static void run_finish(run *r, sd_job_state final_state);

/* ================================================================ small helpers */

static void run_kick_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    run *r = w->data;
    (void)revents;
    ev_idle_stop(loop, w);
    r->kick_active = false;
    schedule(r);
}

/* Schedule later from the loop (never re-enter schedule() from inside engine callbacks). */
static void run_kick(run *r)
{
    if (!r->kick_active && !r->finishing) {
        r->kick_active = true;
        ev_idle_start(r->ex->loop, &r->kick);
    }
}

static void metrics_add(run *r, const pb_MonitoringInfo *mi)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    if (sd_pb_pack(&mi->base, &b) != SD_OK || sd_vec_push(&r->metrics, &b) != SD_OK) {
        sd_buf_deinit(&b);
    }
}

/*
 * Runner metrics, so watermarks and the clock are visible while a job runs (GetJobMetrics
 * .attempted, refreshed as bundles commit) and what the runner dropped is visible at the end:
 *   beam:metric:sundial:input_watermark:v1 / output_watermark:v1   latest_int64, PTRANSFORM =
 *       stage id (payload: varint wall ms, varint watermark ms)
 *   beam:metric:sundial:clock:v1                                    latest_int64, the job clock
 *   beam:metric:sundial:dropped_late_elements:v1                    sum_int64, PTRANSFORM = stage
 */
#define SD_METRIC_INPUT_WM "beam:metric:sundial:input_watermark:v1"
#define SD_METRIC_OUTPUT_WM "beam:metric:sundial:output_watermark:v1"
#define SD_METRIC_CLOCK "beam:metric:sundial:clock:v1"
#define SD_METRIC_DROPPED_LATE "beam:metric:sundial:dropped_late_elements:v1"

typedef struct runner_metrics {
    sd_vec infos;    /* pb_MonitoringInfo* (heap) */
    sd_vec payloads; /* sd_buf* */
} runner_metrics;

static void rm_add(runner_metrics *rm, const char *urn, const char *type, const char *stage,
                   int64_t a, int64_t b, bool two)
{
    pb_MonitoringInfo *mi = sd_calloc(1, sizeof(*mi));
    SD_PL(MonitoringInfo__LabelsEntry) *label = sd_calloc(1, sizeof(*label));
    SD_PL(MonitoringInfo__LabelsEntry) **labels = sd_calloc(1, sizeof(*labels));
    sd_buf *payload = sd_malloc(sizeof(*payload));
    if (mi == NULL || label == NULL || labels == NULL || payload == NULL) {
        goto fail;
    }
    org__apache__beam__model__pipeline__v1__monitoring_info__init(mi);
    org__apache__beam__model__pipeline__v1__monitoring_info__labels_entry__init(label);
    sd_buf_init(payload, 0);
    if (sd_buf_put_varint(payload, (uint64_t)a) != SD_OK ||
        (two && sd_buf_put_varint(payload, (uint64_t)b) != SD_OK) ||
        sd_vec_push(&rm->payloads, &payload) != SD_OK) {
        sd_buf_deinit(payload);
        goto fail;
    }
    mi->urn = (char *)urn;
    mi->type = (char *)type;
    mi->payload.data = payload->data;
    mi->payload.len = payload->len;
    if (stage != NULL) {
        label->key = SD_LABEL_PTRANSFORM;
        label->value = (char *)stage;
        labels[0] = label;
        mi->n_labels = 1;
        mi->labels = labels;
    } else {
        sd_free(label);
        sd_free(labels);
        label = NULL;
        labels = NULL;
    }
    if (sd_vec_push(&rm->infos, &mi) == SD_OK) {
        return;
    }
fail:
    sd_free(mi);
    sd_free(label);
    sd_free(labels);
    sd_free(payload);
}

static void rm_free(runner_metrics *rm)
{
    for (size_t i = 0; i < rm->infos.len; i++) {
        pb_MonitoringInfo *mi = *SD_VEC_AT(&rm->infos, pb_MonitoringInfo *, i);
        if (mi->n_labels > 0) {
            sd_free(mi->labels[0]);
            sd_free(mi->labels);
        }
        sd_free(mi);
    }
    for (size_t i = 0; i < rm->payloads.len; i++) {
        sd_buf *b = *SD_VEC_AT(&rm->payloads, sd_buf *, i);
        sd_buf_deinit(b);
        sd_free(b);
    }
    sd_vec_deinit(&rm->infos);
    sd_vec_deinit(&rm->payloads);
}

static void web_observe(run *r, bool final); /* the web view, at the end of this file */

/* Stage watermarks and the job clock (attempted); dropped-late counts (both). */
static void runner_observe(run *r, bool final)
{
    runner_metrics rm;
    int64_t now = sd_wall_now_ms();
    if (r->em == NULL) {
        return;
    }
    sd_vec_init(&rm.infos, sizeof(pb_MonitoringInfo *));
    sd_vec_init(&rm.payloads, sizeof(sd_buf *));
    for (size_t i = 0; i < sd_em_n_stages(r->em); i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        rm_add(&rm, SD_METRIC_INPUT_WM, SD_URN_METRIC_TYPE_LATEST_INT64, ss.id, now,
               ss.input_wm, true);
        rm_add(&rm, SD_METRIC_OUTPUT_WM, SD_URN_METRIC_TYPE_LATEST_INT64, ss.id, now,
               ss.output_wm, true);
        if (ss.dropped_late > 0) {
            rm_add(&rm, SD_METRIC_DROPPED_LATE, SD_URN_METRIC_TYPE_SUM_INT64, ss.id,
                   (int64_t)ss.dropped_late, 0, false);
        }
    }
    rm_add(&rm, SD_METRIC_CLOCK, SD_URN_METRIC_TYPE_LATEST_INT64, NULL, now,
           sd_em_clock_now(r->em), true);
    if (sd_job_set_attempted_metrics(r->job, (const pb_MonitoringInfo *const *)rm.infos.items,
                                     rm.infos.len) != SD_OK) {
        SD_WARN("exec", "job %s: could not record runner metrics", r->job_id);
    }
    if (final) {
        /* Dropped-late counts also go with the committed metrics. */
        for (size_t i = 0; i < rm.infos.len; i++) {
            pb_MonitoringInfo *mi = *SD_VEC_AT(&rm.infos, pb_MonitoringInfo *, i);
            if (strcmp(mi->urn, SD_METRIC_DROPPED_LATE) == 0) {
                metrics_add(r, mi);
            }
        }
    }
    rm_free(&rm);
    r->observed_ms = sd_mono_now_ms();
    web_observe(r, final);
}

/* Hand the collected monitoring infos to the job (payloads passed through unchanged). */
static void publish_metrics(run *r)
{
    size_t n = r->metrics.len;
    pb_MonitoringInfo **infos = sd_calloc(n == 0 ? 1 : n, sizeof(*infos));
    size_t k = 0;
    if (infos == NULL) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sd_buf *b = SD_VEC_AT(&r->metrics, sd_buf, i);
        pb_MonitoringInfo *mi = (pb_MonitoringInfo *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__monitoring_info__descriptor, NULL, b->len,
            b->data);
        if (mi != NULL) {
            infos[k++] = mi;
        }
    }
    if (sd_job_set_metrics(r->job, (const pb_MonitoringInfo *const *)infos, k) != SD_OK) {
        SD_WARN("exec", "job %s: could not record metrics", r->job_id);
    }
    for (size_t i = 0; i < k; i++) {
        protobuf_c_message_free_unpacked(&infos[i]->base, NULL);
    }
    sd_free(infos);
}

/* ================================================================ environments */

static void env_stop_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    sd_rpc_channel *ch = ctx;
    (void)response;
    if (code != SD_RPC_OK) {
        SD_DEBUG("exec", "StopWorker: %s", message);
    }
    sd_rpc_channel_destroy(ch);
}

static void child_exited(env_run *e, int status)
{
    e->exited = true;
    if (e->r != NULL && !e->r->finishing) {
        if (WIFEXITED(status)) {
            run_fail(e->r, "SDK worker process for environment %s (pid %d) exited with status %d",
                     e->env_id, (int)e->pid, WEXITSTATUS(status));
        } else if (WIFSIGNALED(status)) {
            run_fail(e->r, "SDK worker process for environment %s (pid %d) killed by signal %d",
                     e->env_id, (int)e->pid, WTERMSIG(status));
        }
    }
}

static void child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
    env_run *e = w->data;
    (void)revents;
    ev_child_stop(loop, w);
    e->child_active = false;
    child_exited(e, w->rstatus);
}

static void child_poll_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    env_run *e = w->data;
    int status = 0;
    (void)revents;
    if (waitpid(e->pid, &status, WNOHANG) == e->pid) {
        ev_timer_stop(loop, w);
        e->poll_active = false;
        child_exited(e, status);
    }
}

static void env_stop(env_run *e)
{
    sd_exec *ex = e->r->ex;
    if (e->worker != NULL) {
        sd_worker_destroy(e->worker);
        e->worker = NULL;
    }
    if (e->kind == ENV_EXTERNAL && e->pool != NULL) {
        /* StopWorker, then destroy the channel in the callback. */
        pb_StopWorkerRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STOP_WORKER_REQUEST__INIT;
        sd_buf packed;
        sd_buf_init(&packed, 0);
        req.worker_id = e->worker_id;
        if (sd_pb_pack(&req.base, &packed) == SD_OK &&
            sd_rpc_unary(e->pool, SD_PATH_STOP_WORKER, sd_buf_bytes(&packed), NULL, 0, 5000,
                         env_stop_done, e->pool, NULL) == SD_OK) {
            e->pool = NULL;
        } else {
            sd_rpc_channel_destroy(e->pool);
            e->pool = NULL;
        }
        sd_buf_deinit(&packed);
    }
    if (e->kind == ENV_PROCESS && e->pid > 0 && !e->exited) {
        kill(e->pid, SIGTERM);
        /* A stopped (SIGSTOP, hung) worker would keep the TERM pending and cost the whole
         * wait below, on the loop thread, once per worker: let it run so it can act on it. */
        kill(e->pid, SIGCONT);
        if (e->child_active) {
            ev_child_stop(ex->loop, &e->child);
            e->child_active = false;
        }
        if (e->poll_active) {
            ev_timer_stop(ex->loop, &e->child_poll);
            e->poll_active = false;
        }
        /* Reap without blocking the loop for long: give it a moment, then SIGKILL. */
        for (int i = 0; i < 50; i++) {
            if (waitpid(e->pid, NULL, WNOHANG) == e->pid) {
                e->exited = true;
                break;
            }
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        if (!e->exited) {
            kill(e->pid, SIGKILL);
            waitpid(e->pid, NULL, 0);
            e->exited = true;
        }
    }
}

static void env_free(env_run *e)
{
    if (e->start != NULL) {
        e->start->e = NULL;
    }
    sd_free(e->env_id);
    sd_free(e->worker_id);
    sd_free(e->pool_url);
    sd_free(e);
}

static void start_worker_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes resp)
{
    start_call *sc = ctx;
    env_run *e = sc->e;
    pb_StartWorkerResponse *r;
    sd_free(sc);
    if (e == NULL) {
        return; /* the job ended before the pool answered */
    }
    e->start = NULL;
    if (e->r == NULL || e->r->finishing) {
        return;
    }
    if (code != SD_RPC_OK) {
        run_fail(e->r, "environment %s: StartWorker on the worker pool at %s failed: %s",
                 e->env_id, e->pool_url, message);
        return;
    }
    r = (pb_StartWorkerResponse *)protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__start_worker_response__descriptor, NULL,
        resp.len, resp.ptr);
    if (r == NULL) {
        run_fail(e->r, "environment %s: malformed StartWorkerResponse from %s", e->env_id,
                 e->pool_url);
        return;
    }
    if (r->error != NULL && r->error[0] != '\0') {
        run_fail(e->r, "environment %s: the worker pool at %s refused StartWorker: %s",
                 e->env_id, e->pool_url, r->error);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* ---------------------------------------------------------------- worker hooks */

static void on_worker_lost(sd_worker *w, const char *why, void *ctx)
{
    env_run *e = ctx;
    (void)w;
    if (!e->r->finishing) {
        run_fail(e->r, "SDK worker %s (environment %s) lost: %s", e->worker_id, e->env_id, why);
    }
}

static void on_worker_log(sd_worker *w, const pb_LogEntry *entry, void *ctx)
{
    env_run *e = ctx;
    int importance = 3; /* JOB_MESSAGE_BASIC */
    bool error = entry->severity >= 6;
    (void)w;
    /* A worker's ERROR log becomes a WARNING job message, marked ERROR in its text:
     * JOB_MESSAGE_ERROR is the job's own failure, and Beam's clients (Java's PortableRunner)
     * report the first one as the cause, which must be the failure message that names the
     * stage and carries the SDK's error (an assertion's text), not a log line before it. */
    if (entry->severity >= 5) {
        importance = 4; /* WARNING */
    } else if (entry->severity <= 2 && entry->severity != 0) {
        importance = 1; /* DEBUG */
    }
    sd_job_message(e->r->job, importance, "[worker %s%s%s]%s %s", e->worker_id,
                   entry->transform_id != NULL && entry->transform_id[0] ? " " : "",
                   entry->transform_id != NULL ? entry->transform_id : "",
                   error ? " ERROR:" : "", entry->message != NULL ? entry->message : "");
}

static void on_worker_elements(sd_worker *w, const pb_Elements *msg, void *ctx);
static void on_worker_state(sd_worker *w, const pb_StateRequest *req, void *ctx);

static void connect_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    run *r = t->data;
    (void)loop;
    (void)revents;
    for (size_t i = 0; i < r->envs.len; i++) {
        env_run *e = *SD_VEC_AT(&r->envs, env_run *, i);
        if (e->worker != NULL && !sd_worker_is_connected(e->worker)) {
            run_fail(r, "SDK worker %s (environment %s) did not open its control stream within "
                        "%d s",
                     e->worker_id, e->env_id, r->ex->cfg.worker_connect_timeout_s);
            return;
        }
    }
}

/* Packed ProvisionInfo for a worker of this job. */
static sd_status provision_info(run *r, const char *worker_id, const pb_Environment *env,
                                sd_buf *out)
{
    pb_ProvisionInfo info = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROVISION_INFO__INIT;
    pb_ApiServiceDescriptor ep = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__API_SERVICE_DESCRIPTOR__INIT;
    SD_FN(ProvisionInfo__MetadataEntry) md[2] = {
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROVISION_INFO__METADATA_ENTRY__INIT,
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROVISION_INFO__METADATA_ENTRY__INIT
    };
    SD_FN(ProvisionInfo__MetadataEntry) *mdp[2] = { &md[0], &md[1] };
    (void)worker_id;
    ep.url = r->ex->endpoint;
    info.pipeline_options = (Google__Protobuf__Struct *)sd_job_options(r->job);
    info.retrieval_token = r->job_id;
    info.logging_endpoint = &ep;
    info.artifact_endpoint = &ep;
    info.control_endpoint = &ep;
    if (env != NULL) {
        info.n_dependencies = env->n_dependencies;
        info.dependencies = env->dependencies;
    }
    md[0].key = "runner";
    md[0].value = "sundial";
    md[1].key = "runner_version";
    md[1].value = "0.1.0";
    info.n_metadata = 2;
    info.metadata = mdp;
    return sd_pb_pack(&info.base, out);
}

static sd_status spawn_process(env_run *e, const pb_ProcessPayload *pp, sd_err *err)
{
    sd_exec *ex = e->r->ex;
    char *argv[8];
    char *args[6];
    pid_t pid;

    if (pp->command == NULL || pp->command[0] == '\0') {
        return sd_err_set(err, SD_EINVAL, "environment %s (beam:env:process:v1): empty command",
                          e->env_id);
    }
    args[0] = sd_asprintf("--id=%s", e->worker_id);
    args[1] = sd_asprintf("--provision_endpoint=%s", ex->endpoint);
    args[2] = sd_asprintf("--control_endpoint=%s", ex->endpoint);
    args[3] = sd_asprintf("--logging_endpoint=%s", ex->endpoint);
    args[4] = sd_asprintf("--artifact_endpoint=%s", ex->endpoint);
    args[5] = sd_asprintf("--semi_persist_dir=%s", sd_job_artifact_dir(e->r->job));
    for (int i = 0; i < 6; i++) {
        if (args[i] == NULL) {
            for (int j = 0; j < 6; j++) {
                sd_free(args[j]);
            }
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    argv[0] = pp->command;
    for (int i = 0; i < 6; i++) {
        argv[i + 1] = args[i];
    }
    argv[7] = NULL;
    pid = fork();
    if (pid < 0) {
        for (int j = 0; j < 6; j++) {
            sd_free(args[j]);
        }
        return sd_err_set(err, SD_EIO, "environment %s: fork failed: %s", e->env_id,
                          strerror(errno));
    }
    if (pid == 0) {
        /* Child: only async-signal-safe work until exec. */
        for (size_t i = 0; i < pp->n_env; i++) {
            setenv(pp->env[i]->key, pp->env[i]->value, 1);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    for (int j = 0; j < 6; j++) {
        sd_free(args[j]);
    }
    e->pid = pid;
    if (ev_is_default_loop(ex->loop)) {
        ev_child_init(&e->child, child_cb, pid, 0);
        e->child.data = e;
        ev_child_start(ex->loop, &e->child);
        e->child_active = true;
    } else {
        /* libev reaps children only on its default loop; poll elsewhere. */
        ev_timer_init(&e->child_poll, child_poll_cb, 0.1, 0.1);
        e->child_poll.data = e;
        ev_timer_start(ex->loop, &e->child_poll);
        e->poll_active = true;
    }
    SD_INFO("exec", "job %s: started worker process %s (pid %d) for environment %s",
            e->r->job_id, pp->command, (int)pid, e->env_id);
    return SD_OK;
}

/* Start the worker of one environment. */
static sd_status env_start(run *r, const char *env_id, sd_err *err)
{
    sd_exec *ex = r->ex;
    const pb_Pipeline *p = sd_job_pipeline(r->job);
    const pb_Environment *env = NULL;
    env_run *e;
    sd_buf prov;
    sd_status st;

    for (size_t i = 0; p->components != NULL && i < p->components->n_environments; i++) {
        if (strcmp(p->components->environments[i]->key, env_id) == 0) {
            env = p->components->environments[i]->value;
        }
    }
    if (env == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "environment %s: not in the pipeline", env_id);
    }
    e = sd_calloc(1, sizeof(*e));
    if (e == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    e->r = r;
    e->env_id = sd_strdup(env_id);
    char token[SD_TOKEN_HEX];
    if (sd_token_hex(token) != SD_OK) {
        sd_free(e);
        return sd_err_set(err, SD_EIO, "environment %s: no random bytes for a worker id",
                          env_id);
    }
    /* Readable for logs, unguessable for access: "JOB-ENV-wN-TOKEN". */
    e->worker_id = sd_asprintf("%s-%s-w%llu-%s", r->job_id, env_id,
                               (unsigned long long)++ex->worker_seq, token);
    if (e->env_id == NULL || e->worker_id == NULL || sd_vec_push(&r->envs, &e) != SD_OK) {
        env_free(e);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_worker_hooks hooks = {
        .on_elements = on_worker_elements,
        .on_state = on_worker_state,
        .on_log = on_worker_log,
        .on_lost = on_worker_lost,
        .ctx = e,
    };
    sd_buf_init(&prov, 0);
    st = provision_info(r, e->worker_id, env, &prov);
    if (st == SD_OK) {
        st = sd_fnapi_add_worker(ex->fn, e->worker_id, &hooks, sd_buf_bytes(&prov), &e->worker,
                                 err);
    }
    sd_buf_deinit(&prov);
    if (st != SD_OK) {
        return st;
    }
    /* Descriptors of the stages that run in this environment. */
    for (size_t i = 0; i < r->xp.n_stages; i++) {
        const sd_xstage *s = &r->xp.stages[i];
        if (s->env_id != NULL && strcmp(s->env_id, env_id) == 0) {
            st = sd_worker_add_descriptor(e->worker, r->wire_ids[i], s->descriptor);
            if (st != SD_OK) {
                return sd_err_set(err, st, "out of memory");
            }
        }
    }
    if (ex->env_starter != NULL) {
        /* Test seam: no process and no pool; env_stop then only destroys the worker. */
        e->kind = ENV_EXTERNAL;
        return ex->env_starter(ex->env_starter_ctx, e->worker_id, env_id, err);
    }
    if (env->urn != NULL && strcmp(env->urn, SD_URN_ENV_EXTERNAL) == 0) {
        pb_ExternalPayload *xp = (pb_ExternalPayload *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__external_payload__descriptor, NULL,
            env->payload.len, env->payload.data);
        if (xp == NULL) {
            return sd_err_set(err, SD_EINVAL,
                              "environment %s (beam:env:external:v1): malformed ExternalPayload "
                              "(%zu bytes)",
                              env_id, env->payload.len);
        }
        if (xp->endpoint == NULL || xp->endpoint->url == NULL || xp->endpoint->url[0] == '\0') {
            protobuf_c_message_free_unpacked(&xp->base, NULL);
            return sd_err_set(err, SD_EINVAL,
                              "environment %s (beam:env:external:v1): payload has no worker pool "
                              "endpoint url",
                              env_id);
        }
        e->kind = ENV_EXTERNAL;
        e->pool_url = sd_strdup(xp->endpoint->url);
        protobuf_c_message_free_unpacked(&xp->base, NULL);
        if (e->pool_url == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        st = sd_rpc_channel_create(ex->rpc, e->pool_url, &e->pool, err);
        if (st != SD_OK) {
            return st;
        }
        pb_StartWorkerRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__START_WORKER_REQUEST__INIT;
        pb_ApiServiceDescriptor ep = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__API_SERVICE_DESCRIPTOR__INIT;
        ep.url = ex->endpoint;
        req.worker_id = e->worker_id;
        req.control_endpoint = &ep;
        req.logging_endpoint = &ep;
        req.artifact_endpoint = &ep;
        req.provision_endpoint = &ep;
        sd_buf packed;
        sd_buf_init(&packed, 0);
        st = sd_pb_pack(&req.base, &packed);
        if (st == SD_OK) {
            e->start = sd_calloc(1, sizeof(*e->start));
            st = e->start == NULL ? sd_err_set(err, SD_ENOMEM, "out of memory") : SD_OK;
        }
        if (st == SD_OK) {
            e->start->e = e;
            st = sd_rpc_unary(e->pool, SD_PATH_START_WORKER, sd_buf_bytes(&packed), NULL, 0, 30000,
                              start_worker_done, e->start, err);
            if (st != SD_OK) {
                sd_free(e->start);
                e->start = NULL;
            }
        }
        sd_buf_deinit(&packed);
        return st;
    }
    if (env->urn != NULL && strcmp(env->urn, SD_URN_ENV_PROCESS) == 0) {
        pb_ProcessPayload *pp = (pb_ProcessPayload *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__process_payload__descriptor, NULL,
            env->payload.len, env->payload.data);
        if (pp == NULL) {
            return sd_err_set(err, SD_EINVAL,
                              "environment %s (beam:env:process:v1): malformed ProcessPayload",
                              env_id);
        }
        e->kind = ENV_PROCESS;
        st = spawn_process(e, pp, err);
        protobuf_c_message_free_unpacked(&pp->base, NULL);
        return st;
    }
    return sd_err_set(err, SD_EUNIMPL, "environment %s: unsupported urn %s", env_id,
                      env->urn == NULL ? "(none)" : env->urn);
}

/* ================================================================ run lifecycle */

static void inflight_free(inflight *f)
{
    if (f == NULL) {
        return;
    }
    if (f->split_timer_active) {
        ev_timer_stop(f->r->ex->loop, &f->split_timer);
    }
    sd_free(f->instruction_id);
    sd_free(f);
}

static void paged_free(void *p)
{
    paged_state *ps = p;
    sd_buf_deinit(&ps->data);
    sd_free(ps);
}

static void run_free(run *r)
{
    sd_exec *ex = r->ex;
    ev_timer_stop(ex->loop, &r->wake);
    ev_timer_stop(ex->loop, &r->connect_timer);
    ev_timer_stop(ex->loop, &r->tick);
    ev_idle_stop(ex->loop, &r->kick);
    for (size_t i = 0; i < r->envs.len; i++) {
        env_run *e = *SD_VEC_AT(&r->envs, env_run *, i);
        env_stop(e);
        env_free(e);
    }
    sd_vec_deinit(&r->envs);
    {
        size_t it = 0;
        void *v;
        while (sd_map_next(&r->inflight, &it, NULL, &v)) {
            inflight_free(v);
        }
    }
    sd_map_deinit(&r->inflight);
    sd_vec_deinit(&r->order);
    sd_map_deinit(&r->pages);
    for (size_t i = 0; i < r->metrics.len; i++) {
        sd_buf_deinit(SD_VEC_AT(&r->metrics, sd_buf, i));
    }
    sd_vec_deinit(&r->metrics);
    for (size_t i = 0; i < r->splits.len; i++) {
        sd_free(SD_VEC_AT(&r->splits, split_plan, i)->stage_id);
    }
    sd_vec_deinit(&r->splits);
    sd_em_destroy(r->em);
    for (size_t i = 0; r->wire_ids != NULL && i < r->xp.n_stages; i++) {
        sd_free(r->wire_ids[i]);
    }
    sd_free(r->wire_ids);
    sd_xplan_deinit(&r->xp);
    sd_plan_destroy(r->plan);
    if (r->planning != NULL) {
        plan_task_detach(r->planning); /* its plan is dropped when it arrives */
    }
    sd_job_set_user(r->job, NULL);
    sd_free(r->job_id);
    sd_free(r);
}

static void run_finish(run *r, sd_job_state final_state)
{
    sd_exec *ex = r->ex;
    if (r->finishing) {
        return;
    }
    r->finishing = true;
    runner_observe(r, true);
    publish_metrics(r);
    double ms = (double)(sd_mono_now_ns() - r->started_ns) / 1e6;
    SD_INFO("exec", "job %s %s: Run to end in %.2f ms, %llu bundles", r->job_id,
            sd_job_state_name(final_state), ms, (unsigned long long)r->bundles_done);
    sd_job_message(r->job, 2, "job %s: Run to %s in %.2f ms, %llu SDK bundles", r->job_id,
                   sd_job_state_name(final_state), ms, (unsigned long long)r->bundles_done);
    for (size_t i = 0; r->em != NULL && i < sd_em_n_stages(r->em); i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        if (ss.dropped_late > 0) {
            sd_job_message(r->job, 4, "stage %s dropped %llu late elements", ss.id,
                           (unsigned long long)ss.dropped_late);
        }
        SD_INFO("exec",
                "job %s: %s in_wm=%lld out_wm=%lld pending=%zu dropped_late=%llu bundles=%llu",
                r->job_id, ss.id, (long long)ss.input_wm, (long long)ss.output_wm, ss.pending,
                (unsigned long long)ss.dropped_late, (unsigned long long)ss.bundles);
    }
    sd_map_remove(&ex->runs, sd_bytes_str(r->job_id));
    sd_job *job = r->job;
    run_free(r);
    sd_job_set_state(job, final_state);
}

/* run_fail with the engine's per-stage dump appended to the message. */
static void run_fail_dump(run *r, const char *fmt, ...) SD_PRINTF(2, 3);
static void run_fail_dump(run *r, const char *fmt, ...)
{
    va_list ap;
    sd_buf dump;
    va_start(ap, fmt);
    char *msg = sd_vasprintf(fmt, ap);
    va_end(ap);
    sd_buf_init(&dump, 0);
    if (sd_em_dump(r->em, &dump) != SD_OK || sd_buf_append_byte(&dump, '\0') != SD_OK) {
        sd_buf_reset(&dump);
    }
    run_fail(r, "%s. Per-stage state:\n%s", msg != NULL ? msg : fmt,
             dump.len > 0 ? (char *)dump.data : "");
    sd_free(msg);
    sd_buf_deinit(&dump);
}

/* Fail the job with the whole message (SDK errors carry tracebacks: nothing is cut). */
static void run_fail(run *r, const char *fmt, ...)
{
    va_list ap;
    if (r->finishing) {
        return;
    }
    va_start(ap, fmt);
    char *msg = sd_vasprintf(fmt, ap);
    va_end(ap);
    const char *text = msg != NULL ? msg : "the job failed (out of memory formatting why)";
    SD_WARN("exec", "job %s failed: %s", r->job_id, text);
    r->finishing = true;
    runner_observe(r, true);
    publish_metrics(r);
    sd_map_remove(&r->ex->runs, sd_bytes_str(r->job_id));
    sd_job *job = r->job;
    run_free(r);
    sd_job_fail(job, "%s", text);
    sd_free(msg);
}

/* ================================================================ bundles */

/* Commit one finished bundle. Returns false when the job failed (r is then freed). */
/*
 * Bundle finalization (Beam's FinalizeBundle): a bundle whose response set
 * requires_finalization gets a FinalizeBundleRequest once its output is committed, so the
 * SDK can run its finalization callbacks (acknowledge messages, delete files). The job ends
 * only after every such request was answered; a failed finalization is reported as a warning
 * job message, since the bundle's output already stands.
 */
typedef struct finalize_ctx {
    sd_exec *ex;
    char *job_id;
    char *iid;
} finalize_ctx;

static void on_finalize_response(void *ctx, const pb_InstructionResponse *resp, const char *error)
{
    finalize_ctx *fc = ctx;
    run *r = sd_map_get_str(&fc->ex->runs, fc->job_id);
    (void)resp;
    if (r != NULL) {
        r->finalizing--;
        if (error != NULL) {
            SD_WARN("exec", "job %s: finalizing bundle %s failed: %s", r->job_id, fc->iid,
                    error);
            sd_job_message(r->job, SD_JOB_MSG_WARNING, "finalizing bundle %s failed: %s",
                           fc->iid, error);
        }
        run_kick(r);
    }
    sd_free(fc->job_id);
    sd_free(fc->iid);
    sd_free(fc);
}

static void send_finalize(run *r, inflight *f)
{
    pb_InstructionRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__INIT;
    SD_FN(FinalizeBundleRequest) fin =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__FINALIZE_BUNDLE_REQUEST__INIT;
    finalize_ctx *fc = sd_calloc(1, sizeof(*fc));
    char *id = sd_asprintf("%s-finalize", f->instruction_id);
    if (fc != NULL) {
        fc->ex = r->ex;
        fc->job_id = sd_strdup(r->job_id);
        fc->iid = sd_strdup(f->instruction_id);
    }
    if (fc == NULL || fc->job_id == NULL || fc->iid == NULL || id == NULL ||
        f->env->worker == NULL) {
        if (fc != NULL) {
            sd_free(fc->job_id);
            sd_free(fc->iid);
        }
        sd_free(fc);
        sd_free(id);
        sd_job_message(r->job, SD_JOB_MSG_WARNING, "bundle %s: could not request its "
                       "finalization (out of memory or worker gone)", f->instruction_id);
        return;
    }
    fin.instruction_id = f->instruction_id;
    req.instruction_id = id;
    req.request_case =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__REQUEST_FINALIZE_BUNDLE;
    req.finalize_bundle = &fin;
    if (sd_worker_instruct(f->env->worker, &req, on_finalize_response, fc) == SD_OK) {
        r->finalizing++;
    } else {
        sd_free(fc->job_id);
        sd_free(fc->iid);
        sd_free(fc);
        sd_job_message(r->job, SD_JOB_MSG_WARNING, "bundle %s: could not send its "
                       "FinalizeBundle request", f->instruction_id);
    }
    sd_free(id);
}

static bool bundle_commit(run *r, inflight *f)
{
    sd_err err;
    sd_status st;
    sd_err_clear(&err);
    sd_map_take(&r->inflight, sd_bytes_str(f->instruction_id));
    if (f->has_split) {
        st = sd_em_bundle_split(r->em, f->b, f->first_residual, &err);
        if (st != SD_OK) {
            sd_em_fail_bundle(r->em, f->b);
            char *sid = sd_strdup(f->st->id);
            inflight_free(f);
            run_fail(r, "stage %s: channel split: %s", sid != NULL ? sid : "?", sd_err_msg(&err));
            sd_free(sid);
            return false;
        }
    }
    char *bid = sd_strdup(sd_bundle_id(f->b));
    const char *stage_id = f->st->id;
    const char *worker_id = f->env->worker_id;
    st = sd_em_complete_bundle(r->em, f->b, &err);
    if (st == SD_OK && f->requires_finalization) {
        send_finalize(r, f);
    }
    inflight_free(f);
    r->bundles_done++;
    if (st != SD_OK) {
        /* The engine's message usually starts with "bundle <id>:" already. */
        const char *msg = sd_err_msg(&err);
        bool named = bid != NULL && strncmp(msg, "bundle ", 7) == 0 &&
                     strncmp(msg + 7, bid, strlen(bid)) == 0;
        run_fail(r, "stage %s, output of SDK worker %s: %s%s%s%s", stage_id, worker_id,
                 named ? "" : "bundle ", named ? "" : (bid != NULL ? bid : "?"),
                 named ? "" : ": ", msg);
        sd_free(bid);
        return false;
    }
    sd_free(bid);
    return true;
}

/*
 * A bundle is done when its ProcessBundleResponse and every is_last marker have arrived.
 * Bundles commit in the order they were handed out, so what downstream stages receive — and
 * therefore GroupByKey value order — does not depend on which worker thread finished first.
 */
static void bundle_maybe_complete(inflight *f)
{
    run *r = f->r;
    if (!f->response_received || f->lasts_remaining > 0 || f->failed) {
        return;
    }
    f->ready = true;
    size_t n = 0;
    while (n < r->order.len && (*SD_VEC_AT(&r->order, inflight *, n))->ready) {
        n++;
    }
    if (n == 0) {
        return;
    }
    inflight **batch = sd_malloc(n * sizeof(*batch));
    if (batch == NULL) {
        run_fail(r, "out of memory committing bundles");
        return;
    }
    memcpy(batch, r->order.items, n * sizeof(*batch));
    memmove(r->order.items, SD_VEC_AT(&r->order, inflight *, n),
            (r->order.len - n) * sizeof(inflight *));
    r->order.len -= n;
    for (size_t i = 0; i < n; i++) {
        if (!bundle_commit(r, batch[i])) {
            /* The run is gone; the rest of the batch was freed with it. */
            sd_free(batch);
            return;
        }
    }
    sd_free(batch);
    if (sd_mono_now_ms() - r->observed_ms >= 100) {
        runner_observe(r, false);
    }
    run_kick(r);
}

/*
 * Hand residual roots (SDF checkpoints, or the split-off part of a runner-requested split) to
 * the engine: the element, the requested resume delay, and the output watermark estimate
 * (the minimum over the application's output_watermarks; none reported holds the estimate).
 */
static bool add_residuals(inflight *f, pb_DelayedBundleApplication *const *roots, size_t n,
                          sd_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const pb_DelayedBundleApplication *d = roots[i];
        int64_t delay = 0;
        bool has_wm = false;
        sd_time wm = SD_TIME_MIN;
        if (d->application == NULL) {
            continue;
        }
        if (d->requested_time_delay != NULL) {
            delay = d->requested_time_delay->seconds * 1000 +
                    d->requested_time_delay->nanos / 1000000;
        }
        for (size_t k = 0; k < d->application->n_output_watermarks; k++) {
            const Google__Protobuf__Timestamp *ts = d->application->output_watermarks[k]->value;
            if (ts == NULL) {
                continue;
            }
            sd_time t = sd_time_clamp(ts->seconds * 1000 + ts->nanos / 1000000);
            wm = has_wm ? SD_MIN(wm, t) : t;
            has_wm = true;
        }
        if (sd_em_bundle_residual(f->r->em, f->b,
                                  sd_bytes_make(d->application->element.data,
                                                d->application->element.len),
                                  delay, has_wm, wm, err) != SD_OK) {
            return false;
        }
    }
    return true;
}

static void on_bundle_response(void *ctx, const pb_InstructionResponse *resp, const char *error)
{
    inflight *f = ctx;
    run *r = f->r;
    sd_err err;
    if (r->finishing) {
        return;
    }
    if (resp == NULL || error != NULL) {
        run_fail(r, "stage %s: bundle %s failed in SDK worker %s: %s", f->st->id,
                 f->instruction_id, f->env->worker_id, error != NULL ? error : "no response");
        return;
    }
    if (resp->response_case !=
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE ||
        resp->process_bundle == NULL) {
        run_fail(r, "stage %s: bundle %s: SDK worker %s answered ProcessBundle with another "
                    "response kind (%d)",
                 f->st->id, f->instruction_id, f->env->worker_id, (int)resp->response_case);
        return;
    }
    const pb_ProcessBundleResponse *pb = resp->process_bundle;
    sd_err_clear(&err);
    if (!add_residuals(f, pb->residual_roots, pb->n_residual_roots, &err)) {
        run_fail(r, "stage %s: bundle %s: residual root: %s", f->st->id, f->instruction_id,
                 sd_err_msg(&err));
        return;
    }
    for (size_t i = 0; i < pb->n_monitoring_infos; i++) {
        metrics_add(r, pb->monitoring_infos[i]);
    }
    f->requires_finalization = pb->requires_finalization != 0;
    f->response_received = true;
    f->response_ms = sd_mono_now_ms();
    bundle_maybe_complete(f);
}

static void on_split_response(void *ctx, const pb_InstructionResponse *resp, const char *error)
{
    progress_ctx *pc = ctx;
    inflight *f = inflight_by_id(pc->ex, pc->iid);
    (void)error;
    if (f != NULL && resp != NULL && resp->process_bundle_split != NULL &&
        resp->response_case ==
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT) {
        const pb_ProcessBundleSplitResponse *sr = resp->process_bundle_split;
        sd_err err = { 0 };
        /* Sub-element splits: the residuals are new work (re-pended when the bundle commits);
         * the primaries stay with the running bundle. */
        if (!add_residuals(f, sr->residual_roots, sr->n_residual_roots, &err)) {
            run_fail(f->r, "stage %s: bundle %s: split residual: %s", f->st->id,
                     f->instruction_id, sd_err_msg(&err));
            sd_free(pc->iid);
            sd_free(pc);
            return;
        }
        for (size_t i = 0; i < sr->n_channel_splits; i++) {
            int64_t fr = sr->channel_splits[i]->first_residual_element;
            if (fr >= 0 && (size_t)fr <= sd_bundle_input_count(f->b) &&
                (!f->has_split || (size_t)fr < f->first_residual)) {
                f->has_split = true;
                f->first_residual = (size_t)fr;
                SD_DEBUG("exec", "bundle %s split at element %lld", pc->iid, (long long)fr);
            }
        }
    }
    sd_free(pc->iid);
    sd_free(pc);
}


static void split_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    inflight *f = t->data;
    run *r = f->r;
    (void)revents;
    ev_timer_stop(loop, t);
    f->split_timer_active = false;
    if (f->next_split >= f->splits->n || r->finishing) {
        return;
    }
    double fraction = f->splits->fractions[f->next_split++];
    pb_InstructionRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__INIT;
    pb_ProcessBundleSplitRequest sr = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_SPLIT_REQUEST__INIT;
    pb_DesiredSplit ds = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_SPLIT_REQUEST__DESIRED_SPLIT__INIT;
    pb_DesiredSplitsEntry entry = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_SPLIT_REQUEST__DESIRED_SPLITS_ENTRY__INIT;
    pb_DesiredSplitsEntry *entries[1] = { &entry };
    char *split_id = sd_asprintf("%s-split%zu", f->instruction_id, f->next_split);
    progress_ctx *pc = sd_calloc(1, sizeof(*pc));
    if (split_id == NULL || pc == NULL || (pc->iid = sd_strdup(f->instruction_id)) == NULL) {
        sd_free(split_id);
        sd_free(pc);
        return;
    }
    pc->ex = f->r->ex;
    ds.fraction_of_remainder = fraction;
    ds.estimated_input_elements = (int64_t)sd_bundle_input_count(f->b);
    entry.key = (char *)f->st->source_transform;
    entry.value = &ds;
    sr.instruction_id = f->instruction_id;
    sr.n_desired_splits = 1;
    sr.desired_splits = entries;
    req.instruction_id = split_id;
    req.request_case =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_SPLIT;
    req.process_bundle_split = &sr;
    if (sd_worker_instruct(f->env->worker, &req, on_split_response, pc) != SD_OK) {
        sd_free(pc->iid);
        sd_free(pc);
    }
    sd_free(split_id);
    if (f->next_split < f->splits->n) {
        double now = (double)(sd_mono_now_ms() - f->started_ms) / 1000.0;
        double at = f->splits->timings[f->next_split] - now;
        ev_timer_set(&f->split_timer, at > 0 ? at : 0.001, 0.);
        ev_timer_start(loop, &f->split_timer);
        f->split_timer_active = true;
    }
}

/* Find an in-flight bundle from "<job>/<bundle>" (callbacks may outlive the bundle). */
static inflight *inflight_by_id(sd_exec *ex, const char *iid)
{
    const char *slash = strchr(iid, '/');
    char job[128];
    run *r;
    if (slash == NULL || (size_t)(slash - iid) >= sizeof(job)) {
        return NULL;
    }
    memcpy(job, iid, (size_t)(slash - iid));
    job[slash - iid] = '\0';
    r = sd_map_get_str(&ex->runs, job);
    return r == NULL ? NULL : sd_map_get_str(&r->inflight, iid);
}

/* FNV-1a over what a progress response reports: its monitoring infos and short-id data. */
static uint64_t fnv_bytes(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

static uint64_t progress_digest(const pb_InstructionResponse *resp)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const SD_FN(ProcessBundleProgressResponse) *pr = resp->process_bundle_progress;
    if (pr == NULL) {
        return h;
    }
    for (size_t i = 0; i < pr->n_monitoring_infos; i++) {
        const pb_MonitoringInfo *mi = pr->monitoring_infos[i];
        if (mi->urn != NULL) {
            h = fnv_bytes(h, (const uint8_t *)mi->urn, strlen(mi->urn));
        }
        h = fnv_bytes(h, mi->payload.data, mi->payload.len);
    }
    for (size_t i = 0; i < pr->n_monitoring_data; i++) {
        h = fnv_bytes(h, (const uint8_t *)pr->monitoring_data[i]->key,
                      strlen(pr->monitoring_data[i]->key));
        h = fnv_bytes(h, pr->monitoring_data[i]->value.data, pr->monitoring_data[i]->value.len);
    }
    return h;
}

static void on_progress_response(void *ctx, const pb_InstructionResponse *resp, const char *error)
{
    progress_ctx *pc = ctx;
    inflight *f = inflight_by_id(pc->ex, pc->iid);
    if (f != NULL && f->progress_seq == pc->seq) {
        /* Any answer, even an error about a bundle that just finished, proves liveness;
         * only a report that changed proves progress (element counts, read indexes). */
        f->progress_sent_ms = 0;
        f->last_progress_ms = sd_mono_now_ms();
        if (error == NULL && resp != NULL) {
            uint64_t digest = progress_digest(resp);
            if (digest != f->progress_digest) {
                f->progress_digest = digest;
                f->active_ms = f->last_progress_ms;
            }
        }
        if (error != NULL) {
            SD_DEBUG("exec", "progress for %s: %s", pc->iid, error);
        }
    }
    sd_free(pc->iid);
    sd_free(pc);
}

static void send_progress(inflight *f, int64_t now)
{
    pb_InstructionRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__INIT;
    SD_FN(ProcessBundleProgressRequest) pr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_PROGRESS_REQUEST__INIT;
    progress_ctx *pc = sd_calloc(1, sizeof(*pc));
    char *id;
    if (pc == NULL) {
        return;
    }
    pc->ex = f->r->ex;
    pc->seq = ++f->progress_seq;
    pc->iid = sd_strdup(f->instruction_id);
    id = sd_asprintf("%s-progress%llu", f->instruction_id, (unsigned long long)pc->seq);
    if (pc->iid == NULL || id == NULL) {
        sd_free(pc->iid);
        sd_free(pc);
        sd_free(id);
        return;
    }
    pr.instruction_id = f->instruction_id;
    req.instruction_id = id;
    req.request_case =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_PROGRESS;
    req.process_bundle_progress = &pr;
    if (sd_worker_instruct(f->env->worker, &req, on_progress_response, pc) == SD_OK) {
        f->progress_sent_ms = now;
    } else {
        sd_free(pc->iid);
        sd_free(pc);
    }
    sd_free(id);
}

/*
 * The real-time tick (1 s): bundles running longer than PROGRESS_EVERY_MS get a progress
 * request; a worker that leaves one unanswered for hang_timeout_s is declared hung and the
 * job fails naming the worker and the bundle. This loop uses the wall clock in both clock
 * modes: it is about the worker's liveness, not about pipeline time.
 */
static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    run *r = t->data;
    int64_t now = sd_mono_now_ms();
    int64_t hang_ms = (int64_t)r->ex->cfg.hang_timeout_s * 1000;
    int64_t stall_ms = (int64_t)r->ex->cfg.stall_timeout_s * 1000; /* <= 0: never */
    size_t it = 0;
    void *v;
    (void)revents;
    if (sd_map_len(&r->inflight) == 0) {
        ev_timer_stop(loop, t);
        return;
    }
    while (sd_map_next(&r->inflight, &it, NULL, &v)) {
        inflight *f = v;
        if (f->response_received) {
            /* Answered, but its data or timer streams never ended: nothing else completes the
             * bundle, so the worker is as stuck as one that never answers. */
            if (f->lasts_remaining > 0 && now - f->response_ms > hang_ms) {
                run_fail(r, "stage %s: bundle %s: SDK worker %s answered ProcessBundle %lld s "
                            "ago but %d of its output streams never ended (no is_last); the "
                            "worker seems hung",
                         f->st->id, f->instruction_id, f->env->worker_id,
                         (long long)(now - f->response_ms) / 1000, f->lasts_remaining);
                return;
            }
            continue;
        }
        if (f->env->worker == NULL || !sd_worker_is_connected(f->env->worker)) {
            continue;
        }
        if (f->progress_sent_ms != 0 && now - f->progress_sent_ms > hang_ms) {
            run_fail(r, "stage %s: bundle %s: SDK worker %s has not answered a progress "
                        "request for %lld s (the bundle started %lld s ago); the worker seems "
                        "hung",
                     f->st->id, f->instruction_id, f->env->worker_id,
                     (long long)(now - f->progress_sent_ms) / 1000,
                     (long long)(now - f->started_ms) / 1000);
            return;
        }
        if (stall_ms > 0 && now - f->active_ms > stall_ms) {
            run_fail_dump(r, "stage %s: bundle %s: SDK worker %s answers progress requests "
                             "but the bundle consumed no input and produced no output for "
                             "%lld s (it started %lld s ago); the SDK seems stalled (the "
                             "limit is --bundle-stall-timeout)",
                          f->st->id, f->instruction_id, f->env->worker_id,
                          (long long)(now - f->active_ms) / 1000,
                          (long long)(now - f->started_ms) / 1000);
            return;
        }
        int64_t since = f->last_progress_ms != 0 ? f->last_progress_ms : f->started_ms;
        if (f->progress_sent_ms == 0 && now - since >= PROGRESS_EVERY_MS) {
            send_progress(f, now);
        }
    }
}

static env_run *env_for(run *r, const char *env_id)
{
    for (size_t i = 0; i < r->envs.len; i++) {
        env_run *e = *SD_VEC_AT(&r->envs, env_run *, i);
        if (strcmp(e->env_id, env_id) == 0) {
            return e;
        }
    }
    return NULL;
}

static const sd_xstage *xstage(run *r, const char *id)
{
    for (size_t i = 0; i < r->xp.n_stages; i++) {
        if (strcmp(r->xp.stages[i].id, id) == 0) {
            return &r->xp.stages[i];
        }
    }
    return NULL;
}

/*
 * Send a dispatched bundle's input to its worker: the data in pieces of whole elements of at
 * most SD_DATA_PIECE_BYTES each (one Elements message a piece; a larger element travels
 * alone), is_last on the final piece, then every timer family's timers and is_last in one
 * more message. SDKs decode each Data message on its own, so a piece never splits an element;
 * and gRPC clients that keep the default 4 MiB receive limit (the TypeScript SDK) accept every
 * message of a bundle whose elements fit. Returns SD_OK, or fails the job and returns the error.
 */
static sd_status send_bundle_input(run *r, inflight *f, env_run *e)
{
    const sd_xstage *st = f->st;
    sd_bundle *b = f->b;
    pb_Elements msg = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
    pb_Elements_Data data = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    pb_Elements_Data end = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    pb_Elements_Data *datas[2] = { &data, &end };
    sd_status rc = SD_OK;

    if (st->source_transform != NULL) {
        size_t next = 0;
        sd_bytes piece, ahead;
        bool have = sd_bundle_input_piece(b, &next, SD_DATA_PIECE_BYTES, &piece);
        data.instruction_id = f->instruction_id;
        data.transform_id = (char *)st->source_transform;
        msg.n_data = 1;
        msg.data = datas;
        /* Every piece but the last goes alone... */
        while (rc == SD_OK && have &&
               sd_bundle_input_piece(b, &next, SD_DATA_PIECE_BYTES, &ahead)) {
            data.data.data = (uint8_t *)piece.ptr;
            data.data.len = piece.len;
            rc = sd_worker_send_elements(e->worker, &msg);
            piece = ahead;
        }
        /* ...and the last one travels with the end of the input, as two entries of one
         * message: the Python SDK drops the data of an entry that also says is_last, and the
         * TypeScript SDK handles the entries of one message in order but overlapping
         * messages concurrently (an is_last of its own could overtake the data). */
        data.data.data = have ? (uint8_t *)piece.ptr : NULL;
        data.data.len = have ? piece.len : 0;
        end.instruction_id = f->instruction_id;
        end.transform_id = (char *)st->source_transform;
        end.is_last = 1;
        msg.n_data = have ? 2 : 1;
        msg.data = have ? datas : &datas[1];
        SD_DEBUG("exec", "job %s: bundle %s: %zu input bytes", r->job_id, f->instruction_id,
                 sd_bundle_input(b).len);
    }

    size_t n_timer_in = sd_bundle_n_timer_inputs(b);
    size_t n_timers = n_timer_in + st->n_timer_families;
    pb_Elements_Timers *timers = NULL;
    pb_Elements_Timers **tptrs = NULL;
    if (rc == SD_OK && n_timers > 0) {
        timers = sd_calloc(n_timers, sizeof(*timers));
        tptrs = sd_calloc(n_timers, sizeof(*tptrs));
        if (timers == NULL || tptrs == NULL) {
            sd_free(timers);
            sd_free(tptrs);
            run_fail(r, "out of memory dispatching a bundle");
            return SD_ENOMEM;
        }
        size_t k = 0;
        for (size_t i = 0; i < n_timer_in; i++, k++) {
            const char *tid, *fam;
            sd_bytes tb;
            sd_bundle_timer_input(b, i, &tid, &fam, &tb);
            pb_Elements_Timers t = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__TIMERS__INIT;
            t.instruction_id = f->instruction_id;
            t.transform_id = (char *)tid;
            t.timer_family_id = (char *)fam;
            t.timers.data = (uint8_t *)tb.ptr;
            t.timers.len = tb.len;
            timers[k] = t;
            tptrs[k] = &timers[k];
        }
        for (size_t i = 0; i < st->n_timer_families; i++, k++) {
            pb_Elements_Timers t = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__TIMERS__INIT;
            t.instruction_id = f->instruction_id;
            t.transform_id = (char *)st->timer_families[i].transform_id;
            t.timer_family_id = (char *)st->timer_families[i].family_id;
            t.is_last = 1;
            timers[k] = t;
            tptrs[k] = &timers[k];
        }
        msg.n_timers = n_timers;
        msg.timers = tptrs;
    }
    if (rc == SD_OK && (msg.n_data > 0 || msg.n_timers > 0)) {
        rc = sd_worker_send_elements(e->worker, &msg);
    }
    sd_free(timers);
    sd_free(tptrs);
    if (rc != SD_OK) {
        run_fail(r, "stage %s: could not send bundle data to worker %s", st->id, e->worker_id);
    }
    return rc;
}

static void dispatch(run *r, sd_bundle *b)
{
    const sd_xstage *st = xstage(r, sd_bundle_stage(b));
    env_run *e;
    inflight *f;
    if (st == NULL || st->env_id == NULL || (e = env_for(r, st->env_id)) == NULL ||
        e->worker == NULL) {
        sd_em_fail_bundle(r->em, b);
        run_fail(r, "internal: no SDK worker for stage %s", sd_bundle_stage(b));
        return;
    }
    f = sd_calloc(1, sizeof(*f));
    if (f == NULL) {
        sd_em_fail_bundle(r->em, b);
        run_fail(r, "out of memory dispatching a bundle");
        return;
    }
    f->r = r;
    f->b = b;
    f->st = st;
    f->env = e;
    f->instruction_id = sd_asprintf("%s/%s", r->job_id, sd_bundle_id(b));
    f->lasts_remaining = (int)st->n_sinks + (int)st->n_timer_families;
    f->started_ms = sd_mono_now_ms();
    f->active_ms = f->started_ms;
    if (f->instruction_id == NULL || sd_vec_push(&r->order, &f) != SD_OK) {
        sd_em_fail_bundle(r->em, b);
        inflight_free(f);
        run_fail(r, "out of memory dispatching a bundle");
        return;
    }
    if (sd_map_put_str(&r->inflight, f->instruction_id, f) != SD_OK) {
        r->order.len--;
        sd_em_fail_bundle(r->em, b);
        inflight_free(f);
        run_fail(r, "out of memory dispatching a bundle");
        return;
    }

    pb_InstructionRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__INIT;
    pb_ProcessBundleRequest pbr = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_REQUEST__INIT;
    pbr.process_bundle_descriptor_id = r->wire_ids[st - r->xp.stages];
    req.instruction_id = f->instruction_id;
    req.request_case =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE;
    req.process_bundle = &pbr;
    if (sd_worker_instruct(e->worker, &req, on_bundle_response, f) != SD_OK) {
        sd_map_take(&r->inflight, sd_bytes_str(f->instruction_id));
        r->order.len--;
        sd_em_fail_bundle(r->em, b);
        inflight_free(f);
        run_fail(r, "stage %s: could not send ProcessBundle to worker %s", st->id, e->worker_id);
        return;
    }

    if (send_bundle_input(r, f, e) != SD_OK) {
        return;
    }

    /* Runner-initiated channel splits requested by the pipeline option (the TypeScript
     * SDK's "liquid sharding" test): only the first bundle of the named stage. */
    for (size_t i = 0; i < r->splits.len; i++) {
        split_plan *sp = SD_VEC_AT(&r->splits, split_plan, i);
        if (!sp->used && sp->n > 0 && strcmp(sp->stage_id, st->id) == 0 &&
            st->source_transform != NULL) {
            sp->used = true;
            f->splits = sp;
            ev_timer_init(&f->split_timer, split_timer_cb, sp->timings[0], 0.);
            f->split_timer.data = f;
            ev_timer_start(r->ex->loop, &f->split_timer);
            f->split_timer_active = true;
            break;
        }
    }
    if (!ev_is_active(&r->tick)) {
        ev_timer_again(r->ex->loop, &r->tick);
    }
}

static void wake_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    schedule(t->data);
}

static void schedule(run *r)
{
    sd_err err;
    int max_inflight = r->ex->cfg.max_inflight;
    if (r->finishing || r->scheduling) {
        return;
    }
    r->scheduling = true;
    sd_err_clear(&err);
    /*
     * Test mode dispatches in waves: up to max_inflight bundles go out together and the next
     * wave is formed only after the whole wave has committed (in order). Which elements make up
     * a bundle then never depends on which worker thread finished first, so the same job and
     * inputs give the same bundle schedule and output every run. Wall-clock mode refills
     * continuously instead.
     */
    bool may_dispatch = !r->waves || sd_map_len(&r->inflight) == 0;
    while (may_dispatch && sd_map_len(&r->inflight) < (size_t)max_inflight) {
        sd_bundle *b = NULL;
        sd_status st = sd_em_next_bundle(r->em, &b, &err);
        if (st != SD_OK) {
            r->scheduling = false;
            run_fail(r, "engine: %s", sd_err_msg(&err));
            return;
        }
        if (b == NULL) {
            break;
        }
        dispatch(r, b);
        if (r->finishing) {
            return;
        }
    }
    r->scheduling = false;
    /* Wall-clock mode: wake when the next processing-time event is due, even while other
     * bundles run (their completion would otherwise be the only trigger). */
    sd_time due;
    bool waiting_on_time = sd_em_next_wakeup(r->em, &due);
    if (waiting_on_time) {
        double delay = (double)(due - sd_wall_now_ms()) / 1000.0;
        ev_timer_stop(r->ex->loop, &r->wake);
        ev_timer_set(&r->wake, delay > 0 ? delay : 0.001, 0.);
        ev_timer_start(r->ex->loop, &r->wake);
    }
    if (sd_map_len(&r->inflight) > 0 || r->finalizing > 0) {
        return;
    }
    if (sd_em_done(r->em)) {
        run_finish(r, SD_JOB_DONE);
        return;
    }
    if (waiting_on_time) {
        return;
    }
    sd_buf dump;
    sd_buf_init(&dump, 1 << 20);
    if (sd_em_check_stuck(r->em, &dump) != SD_OK) {
        if (sd_buf_append_byte(&dump, '\0') != SD_OK && dump.len > 0) {
            dump.data[dump.len - 1] = '\0';
        }
        run_fail(r, "the job is stuck: nothing in progress and nothing can run, but elements "
                    "are pending. Per-stage state:\n%s",
                 dump.data != NULL ? (char *)dump.data : "");
    } else {
        run_fail(r, "the job made no progress and the engine reports nothing pending: "
                    "internal scheduling error");
    }
    sd_buf_deinit(&dump);
}

/* ================================================================ data plane */

/* True while the job's run exists: completing a bundle may fail the run and free it. */
static bool run_alive(sd_exec *ex, const char *job_id)
{
    return sd_map_get_str(&ex->runs, job_id) != NULL;
}

static void on_worker_elements(sd_worker *w, const pb_Elements *msg, void *ctx)
{
    env_run *e = ctx;
    run *r = e->r;
    sd_exec *ex = r->ex;
    char job_id[160];
    sd_err err;
    (void)w;
    sd_err_clear(&err);
    snprintf(job_id, sizeof(job_id), "%s", r->job_id);
    for (size_t i = 0; i < msg->n_data && !r->finishing; i++) {
        const pb_Elements_Data *d = msg->data[i];
        inflight *f = sd_map_get_str(&r->inflight, d->instruction_id);
        if (f == NULL) {
            SD_WARN("exec", "job %s: data for unknown instruction %s dropped", r->job_id,
                    d->instruction_id);
            continue;
        }
        const char *pcoll = NULL;
        for (size_t k = 0; k < f->st->n_sinks; k++) {
            if (strcmp(f->st->sinks[k].transform_id, d->transform_id) == 0) {
                pcoll = f->st->sinks[k].pcollection;
            }
        }
        if (pcoll == NULL) {
            run_fail(r, "stage %s: worker %s sent data for transform %s, which is not an output "
                        "of the stage",
                     f->st->id, e->worker_id, d->transform_id);
            return;
        }
        SD_DEBUG("exec", "job %s: bundle %s: %zu bytes of %s%s", r->job_id, d->instruction_id,
                 d->data.len, pcoll, d->is_last ? " (last)" : "");
        f->active_ms = sd_mono_now_ms();
        if (d->data.len > 0 &&
            sd_em_bundle_output(r->em, f->b, pcoll, sd_bytes_make(d->data.data, d->data.len),
                                &err) != SD_OK) {
            run_fail(r, "stage %s: output %s: %s", f->st->id, pcoll, sd_err_msg(&err));
            return;
        }
        if (d->is_last) {
            f->lasts_remaining--;
            bundle_maybe_complete(f);
            if (!run_alive(ex, job_id)) {
                return; /* r and e are freed */
            }
        }
    }
    for (size_t i = 0; i < msg->n_timers && !r->finishing; i++) {
        const pb_Elements_Timers *t = msg->timers[i];
        inflight *f = sd_map_get_str(&r->inflight, t->instruction_id);
        if (f == NULL) {
            continue;
        }
        f->active_ms = sd_mono_now_ms();
        if (t->timers.len > 0 &&
            sd_em_bundle_timers(r->em, f->b, t->transform_id, t->timer_family_id,
                                sd_bytes_make(t->timers.data, t->timers.len), &err) != SD_OK) {
            run_fail(r, "stage %s: timers %s/%s: %s", f->st->id, t->transform_id,
                     t->timer_family_id, sd_err_msg(&err));
            return;
        }
        if (t->is_last) {
            f->lasts_remaining--;
            bundle_maybe_complete(f);
            if (!run_alive(ex, job_id)) {
                return;
            }
        }
    }
}

/* ================================================================ state API */

static void state_reply(sd_worker *w, const char *id, const char *error, const sd_bytes *data,
                        const char *token, int kind)
{
    pb_StateResponse resp = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_RESPONSE__INIT;
    pb_StateGetResponse get = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_GET_RESPONSE__INIT;
    pb_StateAppendResponse app = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_APPEND_RESPONSE__INIT;
    pb_StateClearResponse clr = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_CLEAR_RESPONSE__INIT;
    resp.id = (char *)id;
    if (error != NULL) {
        resp.error = (char *)error;
    } else if (kind == 0) {
        resp.response_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_RESPONSE__RESPONSE_GET;
        resp.get = &get;
        if (data != NULL) {
            get.data.data = (uint8_t *)data->ptr;
            get.data.len = data->len;
        }
        if (token != NULL) {
            get.continuation_token.data = (uint8_t *)token;
            get.continuation_token.len = strlen(token);
        }
    } else if (kind == 1) {
        resp.response_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_RESPONSE__RESPONSE_APPEND;
        resp.append = &app;
    } else {
        resp.response_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_RESPONSE__RESPONSE_CLEAR;
        resp.clear = &clr;
    }
    if (sd_worker_state_reply(w, &resp) != SD_OK) {
        SD_WARN("exec", "could not answer state request %s", id);
    }
}

/* Answer a get with data, paging anything above STATE_CHUNK_BYTES by continuation token. */
static void state_reply_paged(run *r, sd_worker *w, const char *id, sd_buf *data)
{
    if (data->len <= STATE_CHUNK_BYTES) {
        sd_bytes all = sd_buf_bytes(data);
        state_reply(w, id, NULL, &all, NULL, 0);
        return;
    }
    paged_state *ps = sd_calloc(1, sizeof(*ps));
    char token[64];
    if (ps == NULL) {
        state_reply(w, id, "out of memory", NULL, NULL, 0);
        return;
    }
    ps->data = *data;
    sd_buf_init(data, 0);
    ps->offset = STATE_CHUNK_BYTES;
    snprintf(token, sizeof(token), "sundial-page-%llu", (unsigned long long)++r->next_token);
    if (sd_map_put_str(&r->pages, token, ps) != SD_OK) {
        paged_free(ps);
        state_reply(w, id, "out of memory", NULL, NULL, 0);
        return;
    }
    sd_bytes first = sd_bytes_make(ps->data.data, STATE_CHUNK_BYTES);
    state_reply(w, id, NULL, &first, token, 0);
}

static void state_continue(run *r, sd_worker *w, const char *id, sd_bytes token)
{
    paged_state *ps = sd_map_get(&r->pages, token);
    if (ps == NULL) {
        state_reply(w, id, "unknown continuation token", NULL, NULL, 0);
        return;
    }
    size_t left = ps->data.len - ps->offset;
    size_t n = left > STATE_CHUNK_BYTES ? STATE_CHUNK_BYTES : left;
    sd_bytes chunk = sd_bytes_make(ps->data.data + ps->offset, n);
    ps->offset += n;
    if (ps->offset < ps->data.len) {
        char tok[64];
        snprintf(tok, sizeof(tok), "%.*s", (int)token.len, (const char *)token.ptr);
        state_reply(w, id, NULL, &chunk, tok, 0);
    } else {
        state_reply(w, id, NULL, &chunk, NULL, 0);
        sd_map_remove(&r->pages, token);
    }
}

#define BYTES(pbd) sd_bytes_make((pbd).data, (pbd).len)

static void on_worker_state(sd_worker *w, const pb_StateRequest *req, void *ctx)
{
    env_run *e = ctx;
    run *r = e->r;
    const pb_StateKey *k = req->state_key;
    inflight *f = sd_map_get_str(&r->inflight, req->instruction_id);
    sd_err err;
    sd_buf out;
    sd_status st = SD_OK;
    int kind = 0;
    char msg[SD_ERR_MSG_MAX + 64];

    if (req->request_case ==
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__REQUEST_GET &&
        req->get != NULL && req->get->continuation_token.len > 0) {
        state_continue(r, w, req->id, BYTES(req->get->continuation_token));
        return;
    }
    if (f == NULL) {
        snprintf(msg, sizeof(msg), "state request %s names unknown or finished instruction %s",
                 req->id, req->instruction_id);
        state_reply(w, req->id, msg, NULL, NULL, 0);
        return;
    }
    if (k == NULL) {
        state_reply(w, req->id, "state request without a state_key", NULL, NULL, 0);
        return;
    }
    switch (req->request_case) {
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__REQUEST_GET:
        kind = 0;
        break;
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__REQUEST_APPEND:
        kind = 1;
        break;
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__REQUEST_CLEAR:
        kind = 2;
        break;
    default:
        state_reply(w, req->id, "state request has no get, append or clear", NULL, NULL, 0);
        return;
    }
    sd_err_clear(&err);
    sd_buf_init(&out, 0);
    switch (k->type_case) {
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ITERABLE_SIDE_INPUT: {
        const SD_FN(StateKey__IterableSideInput) *s = k->iterable_side_input;
        st = kind != 0 ? sd_err_set(&err, SD_EINVAL, "side inputs are read-only")
                       : sd_em_side_input_get(r->em, f->b, s->transform_id, s->side_input_id,
                                              BYTES(s->window), NULL, &out, &err);
        break;
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_SIDE_INPUT: {
        const SD_FN(StateKey__MultimapSideInput) *s = k->multimap_side_input;
        sd_bytes key = BYTES(s->key);
        st = kind != 0 ? sd_err_set(&err, SD_EINVAL, "side inputs are read-only")
                       : sd_em_side_input_get(r->em, f->b, s->transform_id, s->side_input_id,
                                              BYTES(s->window), &key, &out, &err);
        break;
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_KEYS_SIDE_INPUT: {
        const SD_FN(StateKey__MultimapKeysSideInput) *s = k->multimap_keys_side_input;
        st = kind != 0 ? sd_err_set(&err, SD_EINVAL, "side inputs are read-only")
                       : sd_em_side_input_keys(r->em, f->b, s->transform_id, s->side_input_id,
                                               BYTES(s->window), &out, &err);
        break;
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_BAG_USER_STATE: {
        const SD_FN(StateKey__BagUserState) *s = k->bag_user_state;
        if (kind == 0) {
            st = sd_em_user_state_get(r->em, f->b, s->transform_id, s->user_state_id,
                                      BYTES(s->window), BYTES(s->key), NULL, &out, &err);
        } else if (kind == 1) {
            st = sd_em_user_state_append(r->em, f->b, s->transform_id, s->user_state_id,
                                         BYTES(s->window), BYTES(s->key), NULL,
                                         BYTES(req->append->data), &err);
        } else {
            st = sd_em_user_state_clear(r->em, f->b, s->transform_id, s->user_state_id,
                                        BYTES(s->window), BYTES(s->key), NULL, &err);
        }
        break;
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_USER_STATE: {
        const SD_FN(StateKey__MultimapUserState) *s = k->multimap_user_state;
        sd_bytes mk = BYTES(s->map_key);
        if (kind == 0) {
            st = sd_em_user_state_get(r->em, f->b, s->transform_id, s->user_state_id,
                                      BYTES(s->window), BYTES(s->key), &mk, &out, &err);
        } else if (kind == 1) {
            st = sd_em_user_state_append(r->em, f->b, s->transform_id, s->user_state_id,
                                         BYTES(s->window), BYTES(s->key), &mk,
                                         BYTES(req->append->data), &err);
        } else {
            st = sd_em_user_state_clear(r->em, f->b, s->transform_id, s->user_state_id,
                                        BYTES(s->window), BYTES(s->key), &mk, &err);
        }
        break;
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_KEYS_USER_STATE: {
        const SD_FN(StateKey__MultimapKeysUserState) *s = k->multimap_keys_user_state;
        if (kind == 0) {
            st = sd_em_user_state_keys(r->em, f->b, s->transform_id, s->user_state_id,
                                       BYTES(s->window), BYTES(s->key), &out, &err);
        } else if (kind == 2) {
            st = sd_em_user_state_clear(r->em, f->b, s->transform_id, s->user_state_id,
                                        BYTES(s->window), BYTES(s->key), NULL, &err);
        } else {
            st = sd_err_set(&err, SD_EINVAL, "append to multimap keys state is not allowed");
        }
        break;
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_ENTRIES_USER_STATE: {
        const SD_FN(StateKey__MultimapEntriesUserState) *s = k->multimap_entries_user_state;
        if (kind == 0) {
            /* The runner splits the stored bytes into values with the state's value coder. */
            sd_coder *vc = NULL;
            st = sd__xplan_multimap_value_coder(&r->xp, f->st, s->transform_id, s->user_state_id,
                                                &vc, &err);
            if (st == SD_OK) {
                st = sd_em_user_state_entries(r->em, f->b, s->transform_id, s->user_state_id,
                                              BYTES(s->window), BYTES(s->key), vc, &out, &err);
            }
            sd_coder_destroy(vc);
        } else if (kind == 2) {
            st = sd_em_user_state_clear(r->em, f->b, s->transform_id, s->user_state_id,
                                        BYTES(s->window), BYTES(s->key), NULL, &err);
        } else {
            st = sd_err_set(&err, SD_EINVAL, "append to multimap entries state is not allowed");
        }
        break;
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ORDERED_LIST_USER_STATE: {
        const SD_FN(StateKey__OrderedListUserState) *s = k->ordered_list_user_state;
        /* No range means the whole list. */
        int64_t start = s->range != NULL ? s->range->start : INT64_MIN;
        int64_t end = s->range != NULL ? s->range->end : INT64_MAX;
        if (kind == 0) {
            st = sd_em_ordered_list_get(r->em, f->b, s->transform_id, s->user_state_id,
                                        BYTES(s->window), BYTES(s->key), start, end, &out, &err);
        } else if (kind == 1) {
            st = sd_em_ordered_list_append(r->em, f->b, s->transform_id, s->user_state_id,
                                           BYTES(s->window), BYTES(s->key),
                                           BYTES(req->append->data), &err);
        } else {
            st = sd_em_ordered_list_clear(r->em, f->b, s->transform_id, s->user_state_id,
                                          BYTES(s->window), BYTES(s->key), start, end, &err);
        }
        break;
    }
    default:
        st = sd_err_set(&err, SD_EUNIMPL, "state key type %d is not supported by Sundial",
                        (int)k->type_case);
        break;
    }
    if (st != SD_OK) {
        snprintf(msg, sizeof(msg), "state request %s (instruction %s): %s", req->id,
                 req->instruction_id, sd_err_msg(&err));
        state_reply(w, req->id, msg, NULL, NULL, kind);
    } else if (kind == 0) {
        state_reply_paged(r, w, req->id, &out);
    } else {
        state_reply(w, req->id, NULL, NULL, NULL, kind);
    }
    sd_buf_deinit(&out);
}

/* ================================================================ job hooks */

/* Parse beam:option:direct_test_splits:v1 = {"name": {"timings": [..], "fractions": [..]}}. */
static void parse_test_splits(run *r)
{
    const char *json = sd_job_option_string(r->job, "beam:option:direct_test_splits:v1");
    if (json == NULL || json[0] == '\0') {
        return;
    }
    sd__parse_test_splits(json, &r->xp, sd_job_pipeline(r->job), &r->splits);
}

static sd_status hook_validate(void *ctx, const pb_Pipeline *pipeline,
                               const Google__Protobuf__Struct *options, sd_err *err)
{
    (void)ctx;
    (void)options;
    return sd_plan_validate(pipeline, err);
}

static sd_status engine_setup(run *r, sd_err *err)
{
    sd_em_config cfg = { 0 };
    const char *clock = sd_job_option_string(r->job, "beam:option:sundial_clock:v1");
    cfg.clock = r->ex->cfg.wall_clock ? SD_CLOCK_WALL : SD_CLOCK_SYNTHETIC;
    if (clock != NULL && strcmp(clock, "wall") == 0) {
        cfg.clock = SD_CLOCK_WALL;
    } else if (clock != NULL && strcmp(clock, "synthetic") == 0) {
        cfg.clock = SD_CLOCK_SYNTHETIC;
    }
    cfg.max_bundle_bytes = r->ex->cfg.max_bundle_bytes;
    r->waves = cfg.clock == SD_CLOCK_SYNTHETIC;
    /* Schedule exploration: beam:option:sundial_bundle_shape:v1 (greedy | one_key |
     * one_element) and beam:option:sundial_schedule_seed:v1 (0 = no shuffling). */
    const char *shape = sd_job_option_string(r->job, "sundial_bundle_shape");
    if (shape != NULL && shape[0] != '\0') {
        if (strcmp(shape, "greedy") == 0) {
            cfg.bundle_shape = SD_SHAPE_GREEDY;
        } else if (strcmp(shape, "one_key") == 0) {
            cfg.bundle_shape = SD_SHAPE_ONE_KEY;
        } else if (strcmp(shape, "one_element") == 0) {
            cfg.bundle_shape = SD_SHAPE_ONE_ELEMENT;
        } else {
            return sd_err_set(err, SD_EINVAL,
                              "pipeline option beam:option:sundial_bundle_shape:v1: expected "
                              "greedy, one_key or one_element, got \"%s\"",
                              shape);
        }
    }
    int64_t seed = 0;
    if (sd_job_option_int(r->job, "sundial_schedule_seed", &seed)) {
        cfg.schedule_seed = (uint64_t)seed;
    }
    cfg.bounded = r->plan->teststream_stage == SD_PLAN_NONE;
    for (size_t i = 0; i < r->plan->n_pcollections; i++) {
        if (!r->plan->pcollections[i].bounded) {
            cfg.bounded = false;
        }
    }
    /* Beam's --streaming (the SDKs send beam:option:streaming:v1) asks for streaming trigger
     * evaluation even over bounded sources; the watermark model stays the batch one there. */
    cfg.streaming = !cfg.bounded || sd_job_option_bool(r->job, "streaming", false);
    sd_status st = sd_em_create(&cfg, &r->em);
    if (st != SD_OK) {
        return sd_err_set(err, st, "out of memory");
    }
    return sd_xplan_to_engine(&r->xp, r->em, err);
}

/* r->wire_ids: one "STAGE.JOB.TOKEN" descriptor id per SDK stage (see struct run). */
static sd_status make_wire_ids(run *r, sd_err *err)
{
    char token[SD_TOKEN_HEX];
    if (sd_token_hex(token) != SD_OK) {
        return sd_err_set(err, SD_EIO, "job %s: no random bytes for descriptor ids", r->job_id);
    }
    r->wire_ids = sd_calloc(r->xp.n_stages == 0 ? 1 : r->xp.n_stages, sizeof(char *));
    if (r->wire_ids == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->xp.n_stages; i++) {
        r->wire_ids[i] = sd_asprintf("%s.%s.%s", r->xp.stages[i].id, r->job_id, token);
        if (r->wire_ids[i] == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    return SD_OK;
}

/*
 * Run: planning off the loop thread. Building the plan costs time in proportion to the
 * pipeline (about 2 s for 100,000 transforms), so it runs on the server's background pool
 * (cfg.bg): the loop packs the job's pipeline (the pool thread must not read the job, which
 * the loop may free), the pool unpacks and plans it, and the loop then sets up the engine and
 * starts the workers. The job is STARTING meanwhile; a cancel or the executor's end frees the
 * run and detaches the task, whose plan is then dropped.
 */
struct plan_task {
    run *r; /* loop side: NULL once detached */
    uint8_t *bytes;
    size_t len;
    char *url;
    sd_plan_options popt;
    sd_plan *plan;
    sd_status st;
    sd_err err;
};

static void plan_task_detach(plan_task *t)
{
    t->r->planning = NULL;
    t->r = NULL;
}

static void plan_task_free(plan_task *t)
{
    sd_plan_destroy(t->plan);
    sd_free(t->bytes);
    sd_free(t->url);
    sd_free(t);
}

static void plan_work(void *arg)
{
    plan_task *t = arg;
    pb_Pipeline *p = (pb_Pipeline *)protobuf_c_message_unpack(
        &org__apache__beam__model__pipeline__v1__pipeline__descriptor, NULL, t->len, t->bytes);
    sd_free(t->bytes);
    t->bytes = NULL;
    if (p == NULL) {
        t->st = sd_err_set(&t->err, SD_ENOMEM, "out of memory decoding the job's pipeline");
        return;
    }
    t->st = sd_plan_build(p, &t->popt, &t->plan, &t->err);
    protobuf_c_message_free_unpacked(&p->base, NULL);
}

/* The rest of Run once the plan exists: engine, workers, RUNNING. */
static void start_planned(run *r)
{
    sd_err errbuf = { 0 };
    sd_err *err = &errbuf;
    sd_status st = sd_xplan_from_plan(r->plan, &r->xp, err);
    if (st == SD_OK) {
        st = make_wire_ids(r, err);
    }
    if (st == SD_OK && sd_log_get_level() <= SD_LOG_INFO) {
        for (size_t i = 0; i < r->plan->n_stages; i++) {
            const sd_plan_stage *ps = &r->plan->stages[i];
            SD_INFO("exec", "job %s: %s %s: %zu transforms, in [%s%s], out [%s%s]", r->job_id,
                    ps->id, sd_plan_stage_kind_name(ps->kind), ps->n_transforms,
                    ps->n_inputs > 0 ? ps->inputs[0] : "", ps->n_inputs > 1 ? ",..." : "",
                    ps->n_outputs > 0 ? ps->outputs[0].pcollection : "",
                    ps->n_outputs > 1 ? ",..." : "");
        }
    }
    if (st == SD_OK) {
        st = engine_setup(r, err);
    }
    if (st == SD_OK) {
        parse_test_splits(r);
        /* A stage the pipeline asks to split at given times gets its input as the reference
         * runner gives it, in one bundle: no output cap, which would cut it first. */
        for (size_t i = 0; i < r->splits.len; i++) {
            if (sd_em_set_output_cap(r->em, SD_VEC_AT(&r->splits, split_plan, i)->stage_id, 0) !=
                SD_OK) {
                SD_WARN("exec", "job %s: test splits name an unknown stage", r->job_id);
            }
        }
        for (size_t i = 0; i < r->xp.n_envs && st == SD_OK; i++) {
            st = env_start(r, r->xp.env_ids[i], err);
        }
    }
    if (st != SD_OK) {
        /* Fail through the job so the message reaches the client. */
        run_fail(r, "%s", sd_err_msg(err));
        return;
    }
    sd_job_set_state(r->job, SD_JOB_RUNNING);
    if (r->xp.n_envs > 0) {
        ev_timer_start(r->ex->loop, &r->connect_timer);
    }
    run_kick(r);
}

static void plan_done(void *arg, bool abandoned)
{
    plan_task *t = arg;
    run *r = abandoned ? NULL : t->r;
    if (r == NULL) {
        plan_task_free(t); /* abandoned (maybe on a pool thread) or detached */
        return;
    }
    r->planning = NULL;
    if (t->st != SD_OK) {
        run_fail(r, "%s", sd_err_msg(&t->err));
        plan_task_free(t);
        return;
    }
    r->plan = t->plan;
    t->plan = NULL;
    plan_task_free(t);
    start_planned(r);
}

/* Pack the job's pipeline into a task and plan it (on the pool, or here without one). */
static sd_status plan_submit(run *r, sd_err *err)
{
    sd_exec *ex = r->ex;
    sd_job *job = r->job;
    const pb_Pipeline *p = sd_job_pipeline(job);
    plan_task *t = sd_calloc(1, sizeof(*t));
    if (t == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    t->len = protobuf_c_message_get_packed_size(&p->base);
    t->bytes = sd_malloc(t->len > 0 ? t->len : 1);
    t->url = sd_strdup(ex->endpoint);
    if (t->bytes == NULL || t->url == NULL) {
        plan_task_free(t);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    (void)protobuf_c_message_pack(&p->base, t->bytes);
    t->popt.data_url = t->url;
    t->popt.state_url = t->url;
    /* beam:option:sundial_lift_combiners:v1 = false runs combines unlifted (one reason: the
     * TypeScript SDK 2.49.0 truncates varint accumulators to 32 bits when they are encoded). */
    t->popt.lift_combiners = sd_job_option_bool(job, "sundial_lift_combiners", true);
    /* Asked for explicitly (true): lift also what a known SDK defect would make wrong. */
    t->popt.force_lift = sd_job_option_string(job, "sundial_lift_combiners") != NULL &&
                         sd_job_option_bool(job, "sundial_lift_combiners", false);
    t->r = r;
    r->planning = t;
    if (ex->cfg.bg == NULL) {
        plan_work(t);
        plan_done(t, false);
        return SD_OK;
    }
    sd_status st = sd_bg_submit(ex->cfg.bg, plan_work, plan_done, t);
    if (st != SD_OK) {
        r->planning = NULL;
        plan_task_free(t);
        return sd_err_set(err, st, "cannot schedule planning (%s)", sd_status_name(st));
    }
    return SD_OK;
}

static sd_status hook_start(void *ctx, sd_job *job, sd_err *err)
{
    sd_exec *ex = ctx;
    run *r = sd_calloc(1, sizeof(*r));
    if (r == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    r->ex = ex;
    r->job = job;
    r->started_ns = sd_mono_now_ns();
    r->job_id = sd_strdup(sd_job_id(job));
    sd_vec_init(&r->envs, sizeof(env_run *));
    sd_vec_init(&r->metrics, sizeof(sd_buf));
    sd_vec_init(&r->splits, sizeof(split_plan));
    sd_map_init(&r->inflight, NULL);
    sd_vec_init(&r->order, sizeof(inflight *));
    sd_map_init(&r->pages, paged_free);
    ev_timer_init(&r->wake, wake_cb, 0., 0.);
    r->wake.data = r;
    ev_timer_init(&r->connect_timer, connect_timeout_cb, ex->cfg.worker_connect_timeout_s, 0.);
    r->connect_timer.data = r;
    ev_idle_init(&r->kick, run_kick_cb);
    r->kick.data = r;
    ev_init(&r->tick, tick_cb);
    r->tick.repeat = 1.0;
    r->tick.data = r;
    if (r->job_id == NULL || sd_map_put_str(&ex->runs, r->job_id, r) != SD_OK) {
        sd_free(r->job_id);
        sd_free(r);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_job_set_user(job, r);
    sd_status st = plan_submit(r, err);
    if (st != SD_OK) {
        /* Fail through the job so the message reaches the client. */
        run_fail(r, "%s", sd_err_msg(err));
    }
    return SD_OK;
}

static void hook_cancel(void *ctx, sd_job *job)
{
    sd_exec *ex = ctx;
    run *r = sd_map_get_str(&ex->runs, sd_job_id(job));
    if (r == NULL) {
        sd_job_set_state(job, SD_JOB_CANCELLED);
        return;
    }
    r->cancelled = true;
    run_finish(r, SD_JOB_CANCELLED);
}

sd_job_hooks sd_exec_job_hooks(sd_exec *ex)
{
    sd_job_hooks h = {
        .validate = hook_validate,
        .start = hook_start,
        .cancel = hook_cancel,
        .ctx = ex,
    };
    return h;
}

/* ================================================================ create/destroy */

sd_status sd_exec_create(sd_rpc *rpc, sd_fnapi *fn, const sd_exec_config *cfg, sd_exec **out,
                         sd_err *err)
{
    sd_exec *ex = sd_calloc(1, sizeof(*ex));
    if (ex == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    ex->rpc = rpc;
    ex->loop = sd_rpc_loop(rpc);
    ex->fn = fn;
    ex->cfg = *cfg;
    if (ex->cfg.stall_timeout_s == 0) {
        ex->cfg.stall_timeout_s = DEFAULT_STALL_TIMEOUT_S;
    }
    if (ex->cfg.max_bundle_bytes == 0) {
        ex->cfg.max_bundle_bytes = DEFAULT_MAX_BUNDLE_BYTES;
    }
    if (ex->cfg.max_inflight <= 0) {
        ex->cfg.max_inflight = DEFAULT_MAX_INFLIGHT;
    }
    if (ex->cfg.worker_connect_timeout_s <= 0) {
        ex->cfg.worker_connect_timeout_s = 60;
    }
    if (ex->cfg.hang_timeout_s <= 0) {
        ex->cfg.hang_timeout_s = 60;
    }
    ex->endpoint = sd_strdup(cfg->endpoint);
    sd_map_init(&ex->runs, NULL);
    if (ex->endpoint == NULL) {
        sd_free(ex);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    ex->cfg.endpoint = ex->endpoint;
    *out = ex;
    return SD_OK;
}

void sd__exec_set_env_starter(sd_exec *ex, sd__exec_env_starter start, void *ctx)
{
    ex->env_starter = start;
    ex->env_starter_ctx = ctx;
}

size_t sd_exec_running(const sd_exec *ex)
{
    return sd_map_len(&ex->runs);
}

void sd_exec_destroy(sd_exec *ex)
{
    if (ex == NULL) {
        return;
    }
    for (;;) {
        size_t it = 0;
        void *v;
        if (!sd_map_next(&ex->runs, &it, NULL, &v)) {
            break;
        }
        run_finish(v, SD_JOB_CANCELLED);
    }
    sd_map_deinit(&ex->runs);
    sd_free(ex->endpoint);
    sd_free(ex);
}

/* ================================================================ web view */

/*
 * What the web UI (runner/web) shows of a job, recorded here because only the executor sees
 * the engine, the plan and the pipeline together. Everything in this section is read-only
 * towards the rest of the executor; its one hook is web_observe() at the end of
 * runner_observe(), which already runs after bundles commit (at most every 100 ms) and when
 * a run ends. The web UI's own requests call it too, so a job whose bundles are slow still
 * gets a sample about once a second.
 *
 * The record (web_rec) hangs on the job (sd_job_set_view), not on the run: the run is freed
 * when the job ends, the job is kept in the job history, and its page should still show its
 * last stages and its whole timeline. So the record copies every name it shows into its own
 * allocations (web_alloc) and never points into the plan or the engine.
 *
 *   stage stats     sd_em_stage_info (watermarks, hold, pending, in flight, dropped, timer
 *                   counts); refreshed when a view is asked for and when the run ends
 *   element counts  the SDK's beam:metric:element_count:v1 per PCOLLECTION label, summed over
 *                   committed bundles (r->metrics, scanned incrementally); an SDK that does
 *                   not report them (the C SDK) leaves has_count false
 *   timeline        one sample (wall ms since Run, job clock, every stage's output
 *                   watermark) whenever something changed or a second went by; at most
 *                   `cap` samples: when full, every other old sample goes and the spacing
 *                   between kept samples doubles, so a long job keeps its whole history at a
 *                   coarser grain (generation tells readers that samples went away); the
 *                   newest observation inside the spacing waits as the "head"
 *   marks           changes seen between two observations: the TestStream stage's output
 *                   watermark moving (a watermark event, or its end), the clock moving while
 *                   the TestStream still has events (a processing-time event), or the
 *                   synthetic clock moving otherwise (a jump to a due timer). Element events
 *                   change neither and are not marked. A ring of SD_EXEC_MARKS_MAX.
 *
 * Memory: cap = min(SD_EXEC_TIMELINE_MAX, WEB_WM_BUDGET / stages) samples, so one job's
 * timeline costs at most about 2 MB of watermarks however wide its pipeline is.
 */

#define WEB_MAGIC        0x57454256u /* "WEBV" */
#define WEB_WM_BUDGET    262144      /* watermark slots per job (8 bytes each) */
#define WEB_MIN_SAMPLES  16
#define WEB_HEARTBEAT_MS 1000
#define WEB_FIRST_GAP_MS 50

typedef struct web_rec {
    uint32_t magic;
    sd_vec owned; /* void *: names and arrays (web_alloc), freed with the record */
    bool failed;  /* a web_alloc failed */
    bool synthetic;
    sd_time clock_ms;
    int64_t elapsed_ms;
    uint64_t bundles_done;
    size_t n_stages;
    sd_exec_view_stage *stages;
    sd_vec pcolls;      /* sd_exec_view_pcoll; names from web_alloc */
    sd_map pcoll_index; /* PCollection id -> (void *)(index + 1) */
    sd_map pnames;      /* PCollection id -> unique name, borrowed from the pipeline; run only */
    sd_map tnames;      /* transform id -> unique name, the same */
    size_t metrics_seen;
    size_t teststream; /* stage index, or SIZE_MAX */
    bool observed;
    sd_time last_ts_wm;
    sd_time last_clock;
    size_t cap;
    size_t n_samples;
    sd_exec_sample *samples;
    sd_time *wms;
    bool has_head;
    sd_exec_sample head;
    sd_time *head_wms;
    uint64_t next_seq;
    uint64_t generation;
    int64_t min_gap_ms;
    sd_exec_mark marks[SD_EXEC_MARKS_MAX];
    size_t n_marks;
    uint64_t next_mark_seq;
} web_rec;

static void web_rec_free(void *p)
{
    web_rec *w = p;
    if (w == NULL) {
        return;
    }
    for (size_t i = 0; i < w->owned.len; i++) {
        sd_free(*SD_VEC_AT(&w->owned, void *, i));
    }
    sd_vec_deinit(&w->owned);
    sd_vec_deinit(&w->pcolls);
    sd_map_deinit(&w->pcoll_index);
    sd_map_deinit(&w->pnames);
    sd_map_deinit(&w->tnames);
    sd_free(w->samples);
    sd_free(w->wms);
    sd_free(w->head_wms);
    w->magic = 0;
    sd_free(w);
}

/* Zeroed memory owned by the record. NULL (and w->failed) on out-of-memory. */
static void *web_alloc(web_rec *w, size_t n)
{
    void *p = sd_calloc(1, n == 0 ? 1 : n);
    if (p == NULL || sd_vec_push(&w->owned, &p) != SD_OK) {
        sd_free(p);
        w->failed = true;
        return NULL;
    }
    return p;
}

static char *web_strdup(web_rec *w, const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = web_alloc(w, n);
    if (copy != NULL) {
        memcpy(copy, s, n);
    }
    return copy;
}

/*
 * The user's name for a transform or PCollection id: its unique name in the pipeline, or, for
 * one the planner made from a user transform ("<transform id>/lifted", ".../grouped"), that
 * transform's unique name with the planner's suffix ("SumPerUser/grouped"). NULL when neither
 * (a name of the runner's own). Copied into the record; NULL also on out-of-memory.
 */
static const char *web_user_name(web_rec *w, const sd_map *names, const char *id)
{
    const char *name = sd_map_get_str(names, id);
    if (name != NULL && name[0] != '\0') {
        return web_strdup(w, name);
    }
    for (size_t n = strlen(id); n-- > 0;) {
        if (id[n] != '/') {
            continue;
        }
        const char *base = sd_map_get(&w->tnames, sd_bytes_make((const uint8_t *)id, n));
        if (base != NULL && base[0] != '\0') {
            size_t blen = strlen(base);
            size_t slen = strlen(id + n);
            char *full = web_alloc(w, blen + slen + 1);
            if (full != NULL) {
                memcpy(full, base, blen);
                memcpy(full + blen, id + n, slen + 1);
            }
            return full;
        }
    }
    return NULL;
}

/* The index of PCollection id in w->pcolls, added when new. SIZE_MAX on out-of-memory. */
static size_t web_pcoll_ref(web_rec *w, const char *id)
{
    void *v = sd_map_get_str(&w->pcoll_index, id);
    if (v != NULL) {
        return (size_t)(uintptr_t)v - 1;
    }
    const char *name = web_user_name(w, &w->pnames, id);
    sd_exec_view_pcoll pc = { 0 };
    pc.id = web_strdup(w, id);
    pc.name = name != NULL ? name : pc.id;
    if (pc.id == NULL || pc.name == NULL) {
        return SIZE_MAX;
    }
    size_t index = w->pcolls.len;
    if (sd_vec_push(&w->pcolls, &pc) != SD_OK) {
        return SIZE_MAX;
    }
    if (sd_map_put_str(&w->pcoll_index, id, (void *)(uintptr_t)(index + 1)) != SD_OK) {
        w->pcolls.len--;
        return SIZE_MAX;
    }
    return index;
}

/* Copy a list of PCollection references into the record. False on out-of-memory. */
static bool web_pcoll_list(web_rec *w, const char *const *ids, size_t n, const size_t **out)
{
    size_t *list = web_alloc(w, (n == 0 ? 1 : n) * sizeof(*list));
    if (list == NULL) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        list[i] = web_pcoll_ref(w, ids[i]);
        if (list[i] == SIZE_MAX) {
            return false;
        }
    }
    *out = list;
    return true;
}

/* The record for a run whose engine exists: names, stages and an empty timeline. */
static web_rec *web_rec_build(run *r)
{
    web_rec *w = sd_calloc(1, sizeof(*w));
    if (w == NULL) {
        return NULL;
    }
    w->magic = WEB_MAGIC;
    sd_vec_init(&w->owned, sizeof(void *));
    sd_vec_init(&w->pcolls, sizeof(sd_exec_view_pcoll));
    sd_map_init(&w->pcoll_index, NULL);
    sd_map_init(&w->pnames, NULL);
    sd_map_init(&w->tnames, NULL);
    w->teststream = SIZE_MAX;
    w->next_seq = 1;
    w->next_mark_seq = 1;

    /* The clock as engine_setup chose it. */
    const char *clock = sd_job_option_string(r->job, "beam:option:sundial_clock:v1");
    w->synthetic = !r->ex->cfg.wall_clock;
    if (clock != NULL && strcmp(clock, "wall") == 0) {
        w->synthetic = false;
    } else if (clock != NULL && strcmp(clock, "synthetic") == 0) {
        w->synthetic = true;
    }

    const pb_Pipeline *p = sd_job_pipeline(r->job);
    bool ok = true;
    if (p->components != NULL) {
        for (size_t i = 0; ok && i < p->components->n_transforms; i++) {
            const SD_PL(Components__TransformsEntry) *e = p->components->transforms[i];
            if (e->key != NULL && e->value != NULL && e->value->unique_name != NULL) {
                ok = sd_map_put_str(&w->tnames, e->key, e->value->unique_name) == SD_OK;
            }
        }
        for (size_t i = 0; ok && i < p->components->n_pcollections; i++) {
            const SD_PL(Components__PcollectionsEntry) *e = p->components->pcollections[i];
            if (e->key != NULL && e->value != NULL && e->value->unique_name != NULL) {
                ok = sd_map_put_str(&w->pnames, e->key, e->value->unique_name) == SD_OK;
            }
        }
    }
    w->n_stages = sd_em_n_stages(r->em);
    w->stages = web_alloc(w, (w->n_stages == 0 ? 1 : w->n_stages) * sizeof(*w->stages));
    ok = ok && w->stages != NULL;
    for (size_t i = 0; ok && i < w->n_stages; i++) {
        sd_em_stage_stats ss;
        sd_exec_view_stage *vs = &w->stages[i];
        sd_em_stage_info(r->em, i, &ss);
        vs->id = web_strdup(w, ss.id);
        vs->kind = sd_stage_kind_name(ss.kind);
        vs->hold = SD_TIME_MAX;
        if (ss.kind == SD_STAGE_TESTSTREAM) {
            w->teststream = i;
        }
        const sd_plan_stage *ps = sd_plan_find_stage(r->plan, ss.id);
        if (vs->id == NULL) {
            ok = false;
            break;
        }
        if (ps == NULL) {
            continue;
        }
        const char **names =
            web_alloc(w, (ps->n_transforms == 0 ? 1 : ps->n_transforms) * sizeof(*names));
        ok = names != NULL;
        for (size_t k = 0; ok && k < ps->n_transforms; k++) {
            /* Transforms of the runner's own (no user name) are left out; a name is listed
             * once (a planner-made transform may map back to one already listed). */
            const char *name = web_user_name(w, &w->tnames, ps->transforms[k]);
            bool seen = name == NULL;
            for (size_t m = 0; !seen && m < vs->n_transforms; m++) {
                seen = strcmp(names[m], name) == 0;
            }
            if (!seen) {
                names[vs->n_transforms++] = name;
            }
        }
        vs->transforms = names;
        const char **outs = web_alloc(w, (ps->n_outputs == 0 ? 1 : ps->n_outputs) * sizeof(*outs));
        ok = ok && outs != NULL;
        for (size_t k = 0; ok && k < ps->n_outputs; k++) {
            outs[k] = ps->outputs[k].pcollection;
        }
        ok = ok && web_pcoll_list(w, ps->inputs, ps->n_inputs, &vs->inputs) &&
             web_pcoll_list(w, outs, ps->n_outputs, &vs->outputs);
        vs->n_inputs = ps->n_inputs;
        vs->n_outputs = ps->n_outputs;
    }
    size_t per = w->n_stages == 0 ? 1 : w->n_stages;
    w->cap = WEB_WM_BUDGET / per;
    w->cap = w->cap > SD_EXEC_TIMELINE_MAX ? SD_EXEC_TIMELINE_MAX : w->cap;
    w->cap = w->cap < WEB_MIN_SAMPLES ? WEB_MIN_SAMPLES : w->cap;
    w->samples = sd_calloc(w->cap, sizeof(*w->samples));
    w->wms = sd_calloc(w->cap * per, sizeof(*w->wms));
    w->head_wms = sd_calloc(per, sizeof(*w->head_wms));
    if (!ok || w->failed || w->samples == NULL || w->wms == NULL || w->head_wms == NULL) {
        web_rec_free(w);
        return NULL;
    }
    return w;
}

/* Add the element counts of bundles committed since the last look. */
static void web_count_elements(run *r, web_rec *w)
{
    for (; w->metrics_seen < r->metrics.len; w->metrics_seen++) {
        const sd_buf *b = SD_VEC_AT(&r->metrics, sd_buf, w->metrics_seen);
        pb_MonitoringInfo *mi = (pb_MonitoringInfo *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__monitoring_info__descriptor, NULL, b->len,
            b->data);
        if (mi == NULL) {
            continue;
        }
        const char *pcoll = NULL;
        for (size_t k = 0; k < mi->n_labels; k++) {
            if (mi->labels[k]->key != NULL &&
                strcmp(mi->labels[k]->key, SD_LABEL_PCOLLECTION) == 0) {
                pcoll = mi->labels[k]->value;
            }
        }
        uint64_t v = 0;
        sd_reader rd = sd_reader_make(sd_bytes_make(mi->payload.data, mi->payload.len));
        if (mi->urn != NULL && strcmp(mi->urn, SD_URN_METRIC_ELEMENT_COUNT) == 0 && pcoll != NULL &&
            sd_reader_varint(&rd, &v) == SD_OK) {
            size_t index = web_pcoll_ref(w, pcoll);
            if (index != SIZE_MAX) {
                sd_exec_view_pcoll *pc = SD_VEC_AT(&w->pcolls, sd_exec_view_pcoll, index);
                pc->has_count = true;
                pc->elements += (int64_t)v;
            }
        }
        protobuf_c_message_free_unpacked(&mi->base, NULL);
    }
}

/* A "key=NUMBER" or "key=MIN|MAX" field of a dump line (NULL = absent). */
/* Stage stats, from sd_em_stage_info. */
static void web_refresh_stats(run *r, web_rec *w)
{
    size_t n = sd_em_n_stages(r->em);
    for (size_t i = 0; i < n && i < w->n_stages; i++) {
        sd_em_stage_stats ss;
        sd_exec_view_stage *vs = &w->stages[i];
        sd_em_stage_info(r->em, i, &ss);
        vs->input_wm = ss.input_wm;
        vs->output_wm = ss.output_wm;
        vs->pending = ss.pending;
        vs->in_progress = ss.in_progress;
        vs->dropped_late = ss.dropped_late;
        vs->hold = ss.hold;
        vs->et_timers = ss.et_timers;
        vs->pt_timers = ss.pt_timers;
    }
}

static void web_mark(web_rec *w, sd_exec_mark_kind kind, int64_t wall, sd_time from, sd_time to)
{
    if (w->n_marks == SD_EXEC_MARKS_MAX) {
        memmove(&w->marks[0], &w->marks[1], (SD_EXEC_MARKS_MAX - 1) * sizeof(w->marks[0]));
        w->n_marks--;
    }
    sd_exec_mark *m = &w->marks[w->n_marks++];
    m->seq = w->next_mark_seq++;
    m->kind = kind;
    m->wall_ms = wall;
    m->clock_ms = w->clock_ms;
    m->from = from;
    m->to = to;
}

/* Keep every other sample (the first and the last stay); the spacing doubles. */
static void web_thin(web_rec *w)
{
    size_t per = w->n_stages == 0 ? 1 : w->n_stages;
    size_t k = 0;
    for (size_t i = 0; i < w->n_samples; i++) {
        if (i % 2 == 0 || i + 1 == w->n_samples) {
            w->samples[k] = w->samples[i];
            memmove(&w->wms[k * per], &w->wms[i * per], per * sizeof(*w->wms));
            k++;
        }
    }
    w->n_samples = k;
    w->generation++;
    w->min_gap_ms = w->min_gap_ms == 0 ? WEB_FIRST_GAP_MS : w->min_gap_ms * 2;
}

/* Record what the engine shows now: marks, then a sample (or the head). */
static void web_sample(run *r, web_rec *w)
{
    size_t per = w->n_stages == 0 ? 1 : w->n_stages;
    int64_t wall = (sd_mono_now_ns() - r->started_ns) / 1000000;
    sd_time clock = sd_em_clock_now(r->em);
    bool changed = !w->observed || clock != w->clock_ms;
    w->clock_ms = clock;
    w->elapsed_ms = wall;
    w->bundles_done = r->bundles_done;
    for (size_t i = 0; i < w->n_stages; i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        changed = changed || ss.output_wm != w->stages[i].output_wm;
        w->stages[i].input_wm = ss.input_wm;
        w->stages[i].output_wm = ss.output_wm;
        w->stages[i].pending = ss.pending;
        w->stages[i].in_progress = ss.in_progress;
        w->stages[i].dropped_late = ss.dropped_late;
        w->head_wms[i] = ss.output_wm;
    }
    sd_time ts_wm = w->teststream != SIZE_MAX ? w->stages[w->teststream].output_wm : SD_TIME_MAX;
    if (w->observed) {
        bool ts_active = w->teststream != SIZE_MAX && w->last_ts_wm < SD_TIME_MAX;
        if (clock != w->last_clock) {
            if (ts_active) {
                web_mark(w, SD_EXEC_MARK_TS_CLOCK, wall, w->last_clock, clock);
            } else if (w->synthetic) {
                web_mark(w, SD_EXEC_MARK_CLOCK_JUMP, wall, w->last_clock, clock);
            }
        }
        if (ts_wm != w->last_ts_wm) {
            web_mark(w, ts_wm >= SD_TIME_MAX ? SD_EXEC_MARK_TS_END : SD_EXEC_MARK_TS_WATERMARK,
                     wall, w->last_ts_wm, ts_wm);
        }
    }
    w->observed = true;
    w->last_clock = clock;
    w->last_ts_wm = ts_wm;

    w->head.wall_ms = wall;
    w->head.clock_ms = clock;
    const sd_exec_sample *last = w->n_samples > 0 ? &w->samples[w->n_samples - 1] : NULL;
    int64_t since = last != NULL ? wall - last->wall_ms : INT64_MAX;
    if (!changed && !w->has_head && since < WEB_HEARTBEAT_MS) {
        return;
    }
    if (last != NULL && since < w->min_gap_ms) {
        w->has_head = true; /* kept once the spacing allows */
        return;
    }
    if (w->n_samples == w->cap) {
        web_thin(w);
    }
    w->head.seq = w->next_seq++;
    w->samples[w->n_samples] = w->head;
    memcpy(&w->wms[w->n_samples * per], w->head_wms, w->n_stages * sizeof(*w->wms));
    w->n_samples++;
    w->has_head = false;
}

/* The hook in runner_observe(): the record is made at the first look at a started engine. */
static void web_observe(run *r, bool final)
{
    if (r->em == NULL) {
        return;
    }
    web_rec *w = sd_job_view(r->job);
    if (w == NULL) {
        w = web_rec_build(r);
        if (w == NULL) {
            return; /* out of memory: the UI shows no stages for this job */
        }
        sd_job_set_view(r->job, w, web_rec_free);
    }
    if (w->magic != WEB_MAGIC) {
        return;
    }
    web_count_elements(r, w);
    web_sample(r, w);
    if (final) {
        web_refresh_stats(r, w);
        if (w->has_head) {
            /* The last observation is a sample of its own, whatever the spacing. */
            w->min_gap_ms = 0;
            web_sample(r, w);
        }
        /* No more reports come; the names were copied where they are shown. */
        sd_map_deinit(&w->pnames);
        sd_map_deinit(&w->tnames);
    }
}

/* The record of job, refreshed first when its run is live. OUT: live. */
static web_rec *web_find(sd_exec *ex, sd_job *job, bool *live)
{
    run *r = ex != NULL ? sd_map_get_str(&ex->runs, sd_job_id(job)) : NULL;
    *live = false;
    if (r != NULL && r->em != NULL && !r->finishing) {
        web_observe(r, false);
        web_rec *w = sd_job_view(job);
        if (w != NULL && w->magic == WEB_MAGIC) {
            web_refresh_stats(r, w);
            *live = true;
            return w;
        }
    }
    web_rec *w = sd_job_view(job);
    return w != NULL && w->magic == WEB_MAGIC ? w : NULL;
}

sd_status sd_exec_view_get(sd_exec *ex, sd_job *job, sd_exec_view *out)
{
    bool live;
    web_rec *w = web_find(ex, job, &live);
    memset(out, 0, sizeof(*out));
    if (w == NULL) {
        return SD_ENOTFOUND;
    }
    out->live = live;
    out->synthetic = w->synthetic;
    out->clock_ms = w->clock_ms;
    out->elapsed_ms = w->elapsed_ms;
    out->bundles_done = w->bundles_done;
    out->n_stages = w->n_stages;
    out->stages = w->stages;
    out->n_pcolls = w->pcolls.len;
    out->pcolls = w->pcolls.items;
    return SD_OK;
}

sd_status sd_exec_timeline_get(sd_exec *ex, sd_job *job, sd_exec_timeline *out)
{
    bool live;
    web_rec *w = web_find(ex, job, &live);
    memset(out, 0, sizeof(*out));
    if (w == NULL) {
        return SD_ENOTFOUND;
    }
    out->generation = w->generation;
    out->n_stages = w->n_stages;
    out->n_samples = w->n_samples;
    out->samples = w->samples;
    out->wms = w->wms;
    out->has_head = w->has_head;
    out->head = w->head;
    out->head_wms = w->head_wms;
    out->n_marks = w->n_marks;
    out->marks = w->marks;
    return SD_OK;
}
