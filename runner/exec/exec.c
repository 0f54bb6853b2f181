/*
 * Sundial: job executor.
 *
 * What it does
 * ------------
 * The job service calls start() with a prepared pipeline. The executor plans it (runner/plan),
 * registers the plan's PCollections and stages with a fresh engine (runner/engine), starts one
 * SDK worker per environment, then drives the loop below until the engine says it is done:
 *
 *     sd__exec_schedule():  while fewer than max_inflight bundles run:
 *                      b = sd_em_next_bundle()            runner-side stages run inside
 *                      dispatch(b): ProcessBundle instruction + the bundle's input as Elements
 *                                   messages of whole elements, with every is_last marker
 *                  nothing in flight: done -> DONE; stuck -> FAILED with the engine's dump;
 *                                     waiting on the wall clock -> ev_timer
 *     worker data:     Elements -> sd_em_bundle_output/_timers; is_last counts down
 *     worker control:  ProcessBundleResponse -> residuals, metrics
 *     both arrived:    sd_em_complete_bundle(); sd__exec_schedule()
 *     state requests:  side inputs and user state from the engine, paged by continuation token
 *
 * Why whole elements per Data message: the TypeScript SDK worker loses data when an element
 * spans several messages and rejects messages over 4 MB (research note §10), so bundles are
 * capped in bytes by the engine and their input is sent in pieces of whole elements.
 *
 * Instruction ids are "<job>/<bundle>" so they are unique across jobs sharing a worker server.
 * Everything runs on the libev loop thread.
 *
 * Failure policy: any worker error, lost worker, malformed data, or engine error fails the job
 * with a message naming the stage/bundle/worker and the cause; the runner keeps serving other
 * jobs. There are no retries (as in Prism): a local runner should surface the first failure.
 *
 * Where things are
 * ----------------
 *   exec.c          this file: the executor object, the job-service hooks (validate, start,
 *                   cancel) and a run's lifecycle (sd__exec_run_finish / _fail free the run)
 *   exec_start.c    Run: planning off the loop thread, engine setup, starting the workers
 *   exec_options.c  every pipeline option the executor reads, in one place
 *   exec_env.c      environments: launching and stopping SDK workers (EXTERNAL, PROCESS)
 *   exec_bundle.c   scheduling, dispatch and the in-order commit of bundles, finalization
 *   exec_data.c     the data plane: a bundle's input out, its output and timers in
 *   exec_progress.c progress requests, hang and stall detection, runner-initiated splits
 *   exec_state.c    the State API: side inputs and user state served from the engine
 *   exec_metrics.c  monitoring infos: the SDK's, collected per bundle, and the runner's own
 *   exec_web.c      what the web UI shows of a job (view and watermark timeline)
 *   xplan.c         the plan -> engine translation and the index of SDK stages
 *   exec_int.h      the types all of these share (sd_exec, sd_exec_run, sd_exec_env, ...)
 */
#include "runner/exec/exec.h"

#include <string.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "runner/base/vec.h"
#include "runner/engine/em.h"
#include "runner/exec/exec_int.h"
#include "runner/plan/plan.h"

#define DEFAULT_MAX_BUNDLE_BYTES (256 * 1024)
#define DEFAULT_MEMORY_LIMIT     ((int64_t)1 << 30) /* per job: 1 GiB */
#define DEFAULT_MAX_INFLIGHT     4
#define DEFAULT_STALL_TIMEOUT_S  600

/* ================================================================ run lifecycle */

static void run_kick_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    sd_exec_run *r = w->data;
    (void)loop;
    (void)revents;
    r->kick_active = false;
    sd__exec_schedule(r);
}

/*
 * Schedule later from the loop (never re-enter sd__exec_schedule() from engine callbacks):
 * the kick watcher is never started, only fed, so it runs once right after the callbacks of
 * the current batch (on the loop thread, or on the transport's pump when it dispatches while
 * the loop waits), without another wake-up of the loop. ev_idle_stop() takes it back.
 */
void sd__exec_run_kick(sd_exec_run *r)
{
    if (!r->kick_active && !r->finishing) {
        r->kick_active = true;
        ev_feed_event(r->ex->loop, &r->kick, EV_IDLE);
    }
}

static void run_destroy(sd_exec_run *r)
{
    sd_exec *ex = r->ex;
    ev_timer_stop(ex->loop, &r->wake);
    ev_timer_stop(ex->loop, &r->connect_timer);
    ev_timer_stop(ex->loop, &r->tick);
    ev_idle_stop(ex->loop, &r->kick);
    for (size_t i = 0; i < r->envs.len; i++) {
        sd_exec_env *e = *SD_VEC_AT(&r->envs, sd_exec_env *, i);
        sd__exec_env_stop(e);
        sd__exec_env_destroy(e);
    }
    sd_vec_deinit(&r->envs);
    {
        size_t it = 0;
        void *v;
        while (sd_map_next(&r->inflight, &it, NULL, &v)) {
            sd__exec_inflight_destroy(v);
        }
    }
    sd_map_deinit(&r->inflight);
    sd_vec_deinit(&r->order);
    sd_map_deinit(&r->pages);
    for (size_t i = 0; i < r->metrics.len; i++) {
        sd_buf_deinit(SD_VEC_AT(&r->metrics, sd_buf, i));
    }
    sd_vec_deinit(&r->metrics);
    sd_map_deinit(&r->gauges);
    for (size_t i = 0; i < r->splits.len; i++) {
        sd_free(SD_VEC_AT(&r->splits, sd_exec_split, i)->stage_id);
    }
    sd_vec_deinit(&r->splits);
    sd__exec_names_deinit(&r->names);
    sd__exec_late_close(r);
    sd__exec_schedule_close(r);
    sd_free(r->explore.dir);
    sd__exec_live_stop(r);
    sd_em_destroy(r->em);
    for (size_t i = 0; r->wire_ids != NULL && i < r->xp.n_stages; i++) {
        sd_free(r->wire_ids[i]);
    }
    sd_free(r->wire_ids);
    for (size_t i = 0; r->drain_wire_ids != NULL && i < r->xp.n_stages; i++) {
        sd_free(r->drain_wire_ids[i]);
    }
    sd_free(r->drain_wire_ids);
    sd_exec_plan_deinit(&r->xp);
    if (!r->plan_borrowed) {
        sd_plan_destroy(r->plan);
    }
    if (r->planning != NULL) {
        sd__exec_plan_task_detach(r->planning); /* its plan is dropped when it arrives */
    }
    sd_job_set_user(r->job, NULL);
    sd_free(r->job_id);
    sd_free(r);
}

static sd_status run_create(sd_exec *ex, sd_job *job, sd_exec_explore *explore, sd_err *err);
static void reap_cb(struct ev_loop *loop, ev_timer *t, int revents);

/*
 * How long an ended run's workers outlive its terminal state (see sd__exec_run_finish). Their
 * teardown (streams ended, StopWorker, the SDK's threads waking) would otherwise compete with
 * the final state and the client's GetJobMetrics: about 0.3 ms of a one-element job's median
 * on 2 cores. A client may tear its worker pool down meanwhile (Beam Python's LOOPBACK pool
 * goes once it hears the end): the late StopWorker then fails, which marks the pool broken,
 * and a StartWorker on a reused pool channel that fails UNAVAILABLE is tried once afresh.
 */
#define REAP_DELAY_S 0.005

void sd__exec_run_finish(sd_exec_run *r, sd_job_state final_state)
{
    sd_exec *ex = r->ex;
    if (r->finishing) {
        return;
    }
    if (final_state == SD_JOB_DONE && !sd__exec_schedule_check_end(r)) {
        return; /* a replay that ended before its recording failed the job */
    }
    r->finishing = true;
    if (final_state == SD_JOB_DONE && r->drain_requested) {
        final_state = SD_JOB_DRAINED;
    }
    sd__exec_observe(r, true);
    sd__exec_publish_metrics(r);
    double ms = (double)(sd_mono_now_ns() - r->started_ns) / 1e6;
    SD_INFO("exec", "job %s %s: Run to end in %.2f ms, %llu bundles", r->job_id,
            sd_job_state_name(final_state), ms, (unsigned long long)r->bundles_done);
    sd_job_message(r->job, 2, "job %s: Run to %s in %.2f ms, %llu SDK bundles", r->job_id,
                   sd_job_state_name(final_state), ms, (unsigned long long)r->bundles_done);
    uint64_t spilled = 0, spill_peak = 0;
    if (r->em != NULL) {
        sd_em_spill_stats(r->em, &spilled, &spill_peak);
    }
    if (spilled > 0) {
        sd_job_message(r->job, 3,
                       "job %s went over its memory limit (%zu bytes): %.1f MiB went through the "
                       "spill file, at most %.1f MiB at once",
                       r->job_id, r->memory_limit, (double)spilled / 1048576.0,
                       (double)spill_peak / 1048576.0);
    }
    for (size_t i = 0; r->em != NULL && i < sd_em_n_stages(r->em); i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        if (ss.dropped_late > 0) {
            sd_job_message(r->job, 4, "stage %s dropped %llu late elements", ss.id,
                           (unsigned long long)ss.dropped_late);
        }
        char in_wm[48], out_wm[48];
        SD_DEBUG("exec", "job %s: %s in_wm=%s out_wm=%s pending=%zu dropped_late=%llu bundles=%llu",
                 r->job_id, ss.id, sd_time_format(ss.input_wm, in_wm, sizeof(in_wm)),
                 sd_time_format(ss.output_wm, out_wm, sizeof(out_wm)), ss.pending,
                 (unsigned long long)ss.dropped_late, (unsigned long long)ss.bundles);
    }
    /* An exploring job that passed this run goes on with the next seed or shape, forgetting
     * the passed run's schedule; the last one passed ends it DONE. */
    bool again = false;
    char *passed_file = NULL;
    sd_exec_explore next = { 0 };
    if (final_state == SD_JOB_DONE && r->explore.total > 0) {
        again = sd__exec_explore_passed(r);
        passed_file = r->record_path != NULL ? sd_strdup(r->record_path) : NULL;
        if (again) {
            next = r->explore;
            next.run++;
            r->explore.dir = NULL; /* moves on */
        }
    }
    sd_map_remove(&ex->runs, sd_bytes_str(r->job_id));
    sd_job *job = r->job;
    if (r->explore.total == 0 && sd_vec_push(&ex->ended, &r) == SD_OK) {
        /* The client hears of the end first; the workers are stopped and the run freed a
         * little later (reap_cb, REAP_DELAY_S), once the state and what a client asks right
         * after it (the metrics) have travelled. What the client may read once the job has
         * ended (late data, the recorded schedule) is written now. */
        sd__exec_late_close(r);
        sd__exec_schedule_close(r);
        sd_job_set_state(job, final_state);
        if (!ev_is_active(&ex->reap)) { /* else the pending reap takes this run too */
            ev_timer_set(&ex->reap, REAP_DELAY_S, 0.);
            ev_timer_start(ex->loop, &ex->reap);
        }
        return;
    }
    run_destroy(r); /* writes the run's schedule */
    if (passed_file != NULL) {
        (void)remove(passed_file);
        sd_free(passed_file);
    }
    if (again) {
        sd_err err;
        sd_err_clear(&err);
        sd_status st = run_create(ex, job, &next, &err);
        if (st != SD_OK) {
            sd_err_failed(&err, st, "creating the run");
            sd_job_fail(job, "schedule exploration: cannot start run %llu: %s",
                        (unsigned long long)next.run, sd_err_msg(&err));
        }
        return;
    }
    sd_job_set_state(job, final_state);
}

/* sd__exec_run_fail with the engine's per-stage dump appended to the message. */
void sd__exec_run_fail_dump(sd_exec_run *r, const char *fmt, ...)
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
    sd__exec_run_fail(r, "%s. Per-stage state:\n%s", msg != NULL ? msg : fmt,
                      dump.len > 0 ? (char *)dump.data : "");
    sd_free(msg);
    sd_buf_deinit(&dump);
}

/* Fail the job with the whole message (SDK errors carry tracebacks: nothing is cut). */
void sd__exec_run_fail(sd_exec_run *r, const char *fmt, ...)
{
    va_list ap;
    if (r->finishing) {
        return;
    }
    va_start(ap, fmt);
    char *body = sd_vasprintf(fmt, ap);
    va_end(ap);
    char *prefix = sd__exec_explore_failure(r);
    char *msg = body != NULL && prefix != NULL ? sd_asprintf("%s%s", prefix, body) : NULL;
    sd_free(prefix);
    sd_free(body);
    const char *text = msg != NULL ? msg : "the job failed (out of memory formatting why)";
    SD_WARN("exec", "job %s failed: %s", r->job_id, text);
    r->finishing = true;
    sd__exec_observe(r, true);
    sd__exec_publish_metrics(r);
    sd_map_remove(&r->ex->runs, sd_bytes_str(r->job_id));
    sd_job *job = r->job;
    run_destroy(r);
    sd_job_fail(job, "%s", text);
    sd_free(msg);
}

/* ================================================================ job hooks */

static sd_status hook_validate(void *ctx,
                               const pb_Pipeline *pipeline,
                               const Google__Protobuf__Struct *options,
                               sd_err *err)
{
    (void)ctx;
    (void)options;
    /* Every environment Sundial would start is checked now, with the pipeline's other
     * problems, rather than when its worker fails to start. */
    sd_plan_options opt = SD_PLAN_OPTIONS_INIT;
    opt.env_check = sd__exec_env_check;
    return sd_plan_validate_ex(pipeline, &opt, NULL, err);
}

/* A run of job: planned off the loop thread, then started (exec_start.c). explore: carried
 * over from the job's previous run when it explores schedules (taken), else NULL. */
static sd_status run_create(sd_exec *ex, sd_job *job, sd_exec_explore *explore, sd_err *err)
{
    sd_exec_run *r = sd_calloc(1, sizeof(*r));
    if (r == NULL) {
        if (explore != NULL) {
            sd_free(explore->dir);
        }
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (explore != NULL) {
        r->explore = *explore;
    }
    r->ex = ex;
    r->job = job;
    r->started_ns = sd_mono_now_ns();
    r->job_id = sd_strdup(sd_job_id(job));
    sd_vec_init(&r->envs, sizeof(sd_exec_env *));
    sd_vec_init(&r->lives, sizeof(sd__exec_live *));
    sd_vec_init(&r->metrics, sizeof(sd_buf));
    sd_map_init(&r->gauges, sd__exec_gauge_free);
    sd_vec_init(&r->splits, sizeof(sd_exec_split));
    sd_map_init(&r->inflight, NULL);
    sd_vec_init(&r->order, sizeof(sd_exec_inflight *));
    sd_map_init(&r->pages, sd__exec_page_destroy);
    sd_map_init(&r->late_files, NULL);
    sd_map_init(&r->late_coders, NULL);
    ev_timer_init(&r->wake, sd__exec_wake_cb, 0., 0.);
    r->wake.data = r;
    ev_timer_init(&r->connect_timer, sd__exec_connect_timeout_cb, ex->cfg.worker_connect_timeout_s,
                  0.);
    r->connect_timer.data = r;
    ev_idle_init(&r->kick, run_kick_cb);
    r->kick.data = r;
    ev_init(&r->tick, sd__exec_tick_cb);
    r->tick.repeat = 1.0;
    r->tick.data = r;
    if (r->job_id == NULL || sd_map_put_str(&ex->runs, r->job_id, r) != SD_OK) {
        sd_free(r->job_id);
        sd_free(r->explore.dir);
        sd_free(r);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_job_set_user(job, r);
    sd_status st = sd__exec_plan_submit(r, err);
    if (st != SD_OK) {
        /* Fail through the job so the message reaches the client. */
        sd_err_failed(err, st, "submitting the job's plan");
        sd__exec_run_fail(r, "%s", sd_err_msg(err));
    }
    return SD_OK;
}

static sd_status hook_start(void *ctx, sd_job *job, sd_err *err)
{
    return run_create(ctx, job, NULL, err);
}

/*
 * Drain requested on a STARTING or RUNNING job, which is now DRAINING: the engine stops the
 * job's sources (sd_em_drain) now, or as soon as it exists if the job is still being planned,
 * and the job ends DRAINED when everything read has been processed (sd__exec_run_finish).
 */
static void hook_drain(void *ctx, sd_job *job)
{
    sd_exec *ex = ctx;
    sd_exec_run *r = sd_map_get_str(&ex->runs, sd_job_id(job));
    if (r == NULL || r->finishing) {
        return;
    }
    r->drain_requested = true;
    if (r->em != NULL) {
        sd_em_drain(r->em);
        sd_em_resume(r->em); /* a paused job drains too: its gate opens */
        sd__exec_run_kick(r);
    }
}

static void hook_cancel(void *ctx, sd_job *job)
{
    sd_exec *ex = ctx;
    sd_exec_run *r = sd_map_get_str(&ex->runs, sd_job_id(job));
    if (r == NULL) {
        sd_job_set_state(job, SD_JOB_CANCELLED);
        return;
    }
    r->cancelled = true;
    sd__exec_run_finish(r, SD_JOB_CANCELLED);
}

/* The whole trace, with wall times, as the job artifact SD_URN_ARTIFACT_SUNDIAL_TRACE. */
static sd_status hook_trace(void *ctx, sd_job *job, sd_buf *out, sd_err *err)
{
    sd_exec_trace_query q = { .wall = true };
    sd_exec_trace_info info;
    return sd_exec_trace_get(ctx, job, &q, out, &info, err);
}

sd_job_hooks sd_exec_job_hooks(sd_exec *ex)
{
    sd_job_hooks h = {
        .validate = hook_validate,
        .start = hook_start,
        .cancel = hook_cancel,
        .drain = hook_drain,
        .trace = hook_trace,
        .ctx = ex,
    };
    return h;
}

/* ================================================================ create/destroy */

sd_status
sd_exec_create(sd_rpc *rpc, sd_fnapi *fn, const sd_exec_config *cfg, sd_exec **out, sd_err *err)
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
    if (ex->cfg.memory_limit == 0) {
        ex->cfg.memory_limit = DEFAULT_MEMORY_LIMIT;
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
    sd_map_init(&ex->pools, NULL);
    sd_vec_init(&ex->ended, sizeof(sd_exec_run *));
    ev_timer_init(&ex->reap, reap_cb, REAP_DELAY_S, 0.);
    ex->reap.data = ex;
    if (ex->endpoint == NULL) {
        sd_free(ex);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    ex->cfg.endpoint = ex->endpoint;
    *out = ex;
    return SD_OK;
}

static void reap_all(sd_exec *ex)
{
    ev_timer_stop(ex->loop, &ex->reap);
    while (ex->ended.len > 0) {
        sd_exec_run *r = *SD_VEC_AT(&ex->ended, sd_exec_run *, ex->ended.len - 1);
        ex->ended.len--;
        run_destroy(r);
    }
}

static void reap_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    reap_all(t->data);
}

void sd__exec_set_env_starter(sd_exec *ex, sd__exec_env_starter start, void *ctx)
{
    ex->env_starter = start;
    ex->env_starter_ctx = ctx;
}

void sd__exec_set_plan_source(sd_exec *ex, sd__exec_plan_source source, void *ctx)
{
    ex->plan_source = source;
    ex->plan_source_ctx = ctx;
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
        sd__exec_run_finish(v, SD_JOB_CANCELLED);
    }
    sd_map_deinit(&ex->runs);
    reap_all(ex);
    sd_vec_deinit(&ex->ended);
    sd__exec_pools_close(ex);
    sd_free(ex->endpoint);
    sd_free(ex);
}
