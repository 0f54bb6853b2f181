/*
 * Sundial: executor: scheduling, dispatching and committing bundles.
 *
 *     sd__exec_schedule()   while fewer than max_inflight bundles run (test mode: in waves,
 *                           see there): b = sd_em_next_bundle(); dispatch(b). Then: a wake-up
 *                           for the next processing-time event; done -> DONE; nothing in
 *                           flight and nothing runnable -> FAILED with the engine's dump
 *                           (stuck); bundles that keep running without progress fail the
 *                           same way after each commit (live-locked, check_livelock)
 *     dispatch(b)           an sd_exec_inflight record, the ProcessBundle instruction, the
 *                           input (exec_data.c), a test split (exec_progress.c), the tick
 *     on_bundle_response    residuals and metrics; the bundle is ready when its response and
 *                           every is_last (exec_data.c) arrived
 *     sd__exec_bundle_maybe_complete   commits ready bundles in dispatch order (so what
 *                           downstream sees never depends on which worker finished first),
 *                           then sends FinalizeBundle where the SDK asked for it
 *
 * Committing may fail the run, which frees it: every caller checks before touching r again.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/exec/exec_int.h"
#include "runner/urns/urns.h"

void sd__exec_inflight_destroy(sd_exec_inflight *f)
{
    if (f == NULL) {
        return;
    }
    if (f->split_timer_active) {
        ev_timer_stop(f->r->ex->loop, &f->split_timer);
    }
    if (f->checkpoint_timer_active) {
        ev_timer_stop(f->r->ex->loop, &f->checkpoint_timer);
    }
    for (size_t i = 0; i < f->n_asked; i++) {
        sd_buf_deinit(&f->asked[i].kept);
    }
    sd_buf_deinit(&f->subst_bytes);
    sd_free(f->instruction_id);
    sd_free(f);
}

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
    sd_exec_run *r = sd_map_get_str(&fc->ex->runs, fc->job_id);
    (void)resp;
    if (r != NULL) {
        r->finalizing--;
        if (error != NULL) {
            SD_WARN("exec", "job %s: finalizing bundle %s failed: %s", r->job_id, fc->iid, error);
            sd_job_message(r->job, SD_JOB_MSG_WARNING, "finalizing bundle %s failed: %s", fc->iid,
                           error);
        }
        sd__exec_run_kick(r);
    }
    sd_free(fc->job_id);
    sd_free(fc->iid);
    sd_free(fc);
}

static void send_finalize(sd_exec_run *r, sd_exec_inflight *f)
{
    pb_InstructionRequest req =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__INIT;
    SD_FN(FinalizeBundleRequest)
    fin = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__FINALIZE_BUNDLE_REQUEST__INIT;
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
        sd_job_message(r->job, SD_JOB_MSG_WARNING,
                       "bundle %s: could not request its "
                       "finalization (out of memory or worker gone)",
                       f->instruction_id);
        return;
    }
    fin.instruction_id = f->instruction_id;
    req.instruction_id = id;
    req.request_case =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__REQUEST_FINALIZE_BUNDLE;
    req.finalize_bundle = &fin;
    if (sd_fnapi_worker_instruct(f->env->worker, &req, on_finalize_response, fc) == SD_OK) {
        r->finalizing++;
    } else {
        sd_free(fc->job_id);
        sd_free(fc->iid);
        sd_free(fc);
        sd_job_message(r->job, SD_JOB_MSG_WARNING,
                       "bundle %s: could not send its "
                       "FinalizeBundle request",
                       f->instruction_id);
    }
    sd_free(id);
}

/*
 * After each commit: a job whose bundles keep running while nothing moves (an SDF resuming
 * without claiming, a timer re-arming itself without output) fails like a stuck one, with the
 * engine's per-stage dump, instead of spinning forever. Returns false when it failed.
 */
static bool check_livelock(sd_exec_run *r)
{
    if (sd_em_check_livelock(r->em, NULL) == SD_OK) {
        return true;
    }
    sd_buf dump;
    sd_buf_init(&dump, 1 << 20);
    if (sd_em_check_livelock(r->em, &dump) == SD_ENOMEM) {
        sd_buf_reset(&dump); /* the message goes out without the dump */
    }
    if (sd_buf_append_byte(&dump, '\0') != SD_OK && dump.len > 0) {
        dump.data[dump.len - 1] = '\0';
    }
    sd__exec_run_fail(r,
                      "the job is live-locked: %llu bundles in a row ran without progress (no "
                      "watermark moved, no element was output or finished, no timer or user "
                      "state changed); the bound is the pipeline option sundial_livelock_rounds "
                      "or sundial serve --livelock-rounds (0 = never). Per-stage state:\n%s",
                      (unsigned long long)sd_em_idle_bundles(r->em),
                      dump.data != NULL ? (char *)dump.data : "");
    sd_buf_deinit(&dump);
    return false;
}

/* Commit one finished bundle. Returns false when the job failed (r is then freed). */
static bool bundle_commit(sd_exec_run *r, sd_exec_inflight *f)
{
    sd_err err;
    sd_status st;
    sd_err_clear(&err);
    sd_map_take(&r->inflight, sd_bytes_str(f->instruction_id));
    st = sd__exec_schedule_splits(r, f, &err);
    if (st != SD_OK) {
        sd_err_failed(&err, st, "scheduling the bundle's splits");
        sd_em_fail_bundle(r->em, f->b);
        char *iid = sd_strdup(f->instruction_id);
        sd__exec_inflight_destroy(f);
        sd__exec_run_fail(r, "bundle %s: %s", iid != NULL ? iid : "?", sd_err_msg(&err));
        sd_free(iid);
        return false;
    }
    if (f->has_split) {
        st = sd_em_bundle_split(r->em, f->b, f->first_residual, &err);
        if (st != SD_OK) {
            sd_err_failed(&err, st, "the engine's split");
            sd_em_fail_bundle(r->em, f->b);
            char *sid = sd_strdup(f->st->id);
            sd__exec_inflight_destroy(f);
            sd__exec_run_fail(r, "stage %s: channel split: %s", sid != NULL ? sid : "?",
                              sd_err_msg(&err));
            sd_free(sid);
            return false;
        }
    }
    char *bid = sd_strdup(sd_em_bundle_id(f->b));
    const char *stage_id = f->st->id;
    const char *worker_id = f->env->worker_id;
    if (f->response_received) {
        int64_t now = sd_mono_now_ms();
        SD_DEBUG("exec",
                 "bundle %s: answered in %lld ms (%u state gets, %u writes), committed "
                 "%lld ms later",
                 f->instruction_id, (long long)(f->response_ms - f->started_ms), f->state_gets,
                 f->state_writes, (long long)(now - f->response_ms));
    }
    st = sd_em_complete_bundle(r->em, f->b, &err);
    if (st == SD_OK && f->requires_finalization) {
        send_finalize(r, f);
    }
    sd__exec_inflight_destroy(f);
    r->bundles_done++;
    if (st != SD_OK) {
        sd_err_failed(&err, st, "the engine's bundle completion");
        /* The engine's message usually starts with "bundle <id>:" already. */
        const char *msg = sd_err_msg(&err);
        bool named = bid != NULL && strncmp(msg, "bundle ", 7) == 0 &&
                     strncmp(msg + 7, bid, strlen(bid)) == 0;
        sd__exec_run_fail(r, "stage %s, output of SDK worker %s: %s%s%s%s", stage_id, worker_id,
                          named ? "" : "bundle ", named ? "" : (bid != NULL ? bid : "?"),
                          named ? "" : ": ", msg);
        sd_free(bid);
        return false;
    }
    sd_free(bid);
    return check_livelock(r);
}

/*
 * A bundle is done when its ProcessBundleResponse and every is_last marker have arrived.
 * Bundles commit in the order they were handed out, so what downstream stages receive — and
 * therefore GroupByKey value order — does not depend on which worker thread finished first.
 */
void sd__exec_bundle_maybe_complete(sd_exec_inflight *f)
{
    sd_exec_run *r = f->r;
    if (!f->response_received || f->lasts_remaining > 0 || f->failed || f->splits_outstanding > 0) {
        return;
    }
    f->ready = true;
    /* The ready bundles at the front of the dispatch order; beside a slow wave (see
     * slow_wave_clock) every ready one, so a quick bundle need not wait for a slow one. */
    sd_exec_inflight **batch = sd_malloc(r->order.len * sizeof(*batch));
    if (batch == NULL) {
        sd__exec_run_fail(r, "out of memory committing bundles");
        return;
    }
    size_t n = 0, kept = 0;
    for (size_t i = 0; i < r->order.len; i++) {
        sd_exec_inflight *g = *SD_VEC_AT(&r->order, sd_exec_inflight *, i);
        if (g->ready && (kept == 0 || r->wave_slow)) {
            batch[n++] = g;
        } else {
            *SD_VEC_AT(&r->order, sd_exec_inflight *, kept++) = g;
        }
    }
    r->order.len = kept;
    if (n == 0) {
        sd_free(batch);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!bundle_commit(r, batch[i])) {
            /* The run is gone; the rest of the batch was freed with it. */
            sd_free(batch);
            return;
        }
    }
    sd_free(batch);
    if (sd_mono_now_ms() - r->observed_ms >= 100) {
        sd__exec_observe(r, false);
    }
    sd__exec_run_kick(r);
}

/*
 * Hand residual roots (SDF checkpoints, or the split-off part of a runner-requested split) to
 * the engine: the element, the requested resume delay, and the output watermark estimate
 * (the minimum over the application's output_watermarks; with none the engine holds the
 * residual at its own timestamp).
 */
bool sd__exec_add_residuals(sd_exec_inflight *f,
                            pb_DelayedBundleApplication *const *roots,
                            size_t n,
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
            delay =
                d->requested_time_delay->seconds * 1000 + d->requested_time_delay->nanos / 1000000;
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
        if (sd_em_bundle_residual(
                f->r->em, f->b,
                sd_bytes_make(d->application->element.data, d->application->element.len), delay,
                has_wm, wm, err) != SD_OK) {
            return false;
        }
    }
    return true;
}

static void on_bundle_response(void *ctx, const pb_InstructionResponse *resp, const char *error)
{
    sd_exec_inflight *f = ctx;
    sd_exec_run *r = f->r;
    sd_err err;
    if (r->finishing) {
        return;
    }
    /* No response at all: the worker is gone. A worker process's exit status says more than
     * the stream's end (which may come first): the job fails from there. */
    if (resp == NULL && f->env->kind == ENV_PROCESS && f->env->pid > 0 && !f->env->exited &&
        sd__exec_env_lost(f->env, error != NULL ? error : "no response")) {
        return;
    }
    if (resp == NULL || error != NULL) {
        sd__exec_run_fail(r, "stage %s: bundle %s failed in SDK worker %s: %s", f->st->id,
                          f->instruction_id, f->env->worker_id,
                          error != NULL ? error : "no response");
        return;
    }
    if (resp->response_case !=
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE ||
        resp->process_bundle == NULL) {
        sd__exec_run_fail(r,
                          "stage %s: bundle %s: SDK worker %s answered ProcessBundle with another "
                          "response kind (%d)",
                          f->st->id, f->instruction_id, f->env->worker_id,
                          (int)resp->response_case);
        return;
    }
    const pb_ProcessBundleResponse *pb = resp->process_bundle;
    sd_err_clear(&err);
    if (!sd__exec_add_residuals(f, pb->residual_roots, pb->n_residual_roots, &err)) {
        sd__exec_run_fail(r, "stage %s: bundle %s: residual root: %s", f->st->id, f->instruction_id,
                          sd_err_msg(&err));
        return;
    }
    for (size_t i = 0; i < pb->n_monitoring_infos; i++) {
        const pb_MonitoringInfo *mi = pb->monitoring_infos[i];
        uint64_t wall, base;
        if (mi->urn != NULL && strcmp(mi->urn, SD_URN_METRIC_SUNDIAL_PROCESSING_TIME_BASE) == 0) {
            sd_reader rd = sd_reader_make(sd_bytes_make(mi->payload.data, mi->payload.len));
            if (sd_reader_varint(&rd, &wall) == SD_OK && sd_reader_varint(&rd, &base) == SD_OK &&
                base <= (uint64_t)INT64_MAX) {
                sd_em_bundle_set_processing_time_base(f->b, (sd_time)base);
            }
            continue; /* the runner's, not the job's */
        }
        sd__exec_metrics_add(r, mi);
    }
    f->requires_finalization = pb->requires_finalization != 0;
    SD_DEBUG("exec", "job %s: bundle %s: ProcessBundleResponse", r->job_id, f->instruction_id);
    f->response_received = true;
    f->response_ms = sd_mono_now_ms();
    sd__exec_bundle_maybe_complete(f);
}

static sd_exec_env *env_for(sd_exec_run *r, const char *env_id)
{
    for (size_t i = 0; i < r->envs.len; i++) {
        sd_exec_env *e = *SD_VEC_AT(&r->envs, sd_exec_env *, i);
        if (strcmp(e->env_id, env_id) == 0) {
            return e;
        }
    }
    return NULL;
}

static const sd_exec_stage *find_stage(sd_exec_run *r, const char *id)
{
    for (size_t i = 0; i < r->xp.n_stages; i++) {
        if (strcmp(r->xp.stages[i].id, id) == 0) {
            return &r->xp.stages[i];
        }
    }
    return NULL;
}

static bool dispatch(sd_exec_run *r, sd_bundle *b)
{
    const sd_exec_stage *st = find_stage(r, sd_em_bundle_stage(b));
    sd_exec_env *e;
    sd_exec_inflight *f;
    if (st == NULL || st->env_id == NULL || (e = env_for(r, st->env_id)) == NULL ||
        e->worker == NULL) {
        sd_em_fail_bundle(r->em, b);
        sd__exec_run_fail(r, "internal: no SDK worker for stage %s", sd_em_bundle_stage(b));
        return false;
    }
    f = sd_calloc(1, sizeof(*f));
    if (f == NULL) {
        sd_em_fail_bundle(r->em, b);
        sd__exec_run_fail(r, "out of memory dispatching a bundle");
        return false;
    }
    f->r = r;
    f->b = b;
    f->st = st;
    f->env = e;
    f->instruction_id = sd_asprintf("%s/%s", r->job_id, sd_em_bundle_id(b));
    f->lasts_remaining = (int)st->n_sinks + (int)st->n_timer_families;
    f->started_ms = sd_mono_now_ms();
    f->active_ms = f->started_ms;
    f->cut = SIZE_MAX;
    f->subst = SIZE_MAX;
    if (f->instruction_id == NULL || sd_vec_push(&r->order, &f) != SD_OK) {
        sd_em_fail_bundle(r->em, b);
        sd__exec_inflight_destroy(f);
        sd__exec_run_fail(r, "out of memory dispatching a bundle");
        return false;
    }
    if (sd_map_put_str(&r->inflight, f->instruction_id, f) != SD_OK) {
        r->order.len--;
        sd_em_fail_bundle(r->em, b);
        sd__exec_inflight_destroy(f);
        sd__exec_run_fail(r, "out of memory dispatching a bundle");
        return false;
    }

    pb_InstructionRequest req =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__INIT;
    pb_ProcessBundleRequest pbr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_REQUEST__INIT;
    /* A draining job runs a splittable stage through its truncating descriptor. */
    size_t si = (size_t)(st - r->xp.stages);
    pbr.process_bundle_descriptor_id = r->wire_ids[si];
    if (sd_em_draining(r->em) && r->drain_wire_ids[si] != NULL) {
        pbr.process_bundle_descriptor_id = r->drain_wire_ids[si];
    }
    req.instruction_id = f->instruction_id;
    req.request_case =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE;
    req.process_bundle = &pbr;
    /* A stateful stage's bundles carry a user-state cache token: the SDK may keep the stage's
     * user state from one bundle to the next while the token stays the same. It names the
     * worker (a new worker, a new token), the stage and the engine's state epoch of the stage,
     * which changes whenever the runner itself changes or drops that state or a bundle of the
     * stage fails (sd_em_bundle_state_epoch). */
    SD_FN(ProcessBundleRequest__CacheToken)
    ct = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_REQUEST__CACHE_TOKEN__INIT;
    SD_FN(ProcessBundleRequest__CacheToken__UserState)
    ct_user =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_REQUEST__CACHE_TOKEN__USER_STATE__INIT;
    SD_FN(ProcessBundleRequest__CacheToken) *ctp = &ct;
    uint64_t epoch = sd_em_bundle_state_epoch(b);
    char *token = epoch != 0 && r->cache_tokens
                      ? sd_asprintf("%s/%zu/%llu", e->worker_id, si, (unsigned long long)epoch)
                      : NULL;
    if (token != NULL) {
        ct.type_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_REQUEST__CACHE_TOKEN__TYPE_USER_STATE;
        ct.user_state = &ct_user;
        ct.token.data = (uint8_t *)token;
        ct.token.len = strlen(token);
        pbr.n_cache_tokens = 1;
        pbr.cache_tokens = &ctp;
    }
    /* A replay applies the recorded splits; it asks for none (the SDK's answer would depend
     * on how far it got, which no recording can fix). Its input goes over the data stream,
     * cut where the recording says. */
    bool replaying = sd_em_sched_replaying(r->sched);
    sd_exec_input in;
    bool embedded = !replaying && sd__exec_input_embed(r, f, &in);
    pbr.elements = embedded ? &in.msg : NULL;
    sd_status sent = sd_fnapi_worker_instruct(e->worker, &req, on_bundle_response, f);
    sd_free(token);
    if (embedded) {
        sd__exec_input_deinit(&in);
    }
    if (sent != SD_OK) {
        sd_map_take(&r->inflight, sd_bytes_str(f->instruction_id));
        r->order.len--;
        sd_em_fail_bundle(r->em, b);
        sd__exec_inflight_destroy(f);
        sd__exec_run_fail(r, "stage %s: could not send ProcessBundle to worker %s", st->id,
                          e->worker_id);
        return false;
    }

    if (replaying && !sd__exec_replay_splits(r, f)) {
        return false;
    }
    if (!embedded && sd__exec_send_bundle_input(r, f, e) != SD_OK) {
        return false;
    }
    if (!replaying) {
        sd__exec_arm_test_split(r, f);
        sd__exec_arm_checkpoint(r, f);
    }
    if (!ev_is_active(&r->tick)) {
        ev_timer_again(r->ex->loop, &r->tick);
    }
    return true;
}

/* (Re)start r->wake to fire in_ms from now (at least 1 ms). */
static void arm_wake(sd_exec_run *r, int64_t in_ms)
{
    ev_timer_stop(r->ex->loop, &r->wake);
    ev_timer_set(&r->wake, in_ms > 0 ? (double)in_ms / 1000.0 : 0.001, 0.);
    ev_timer_start(r->ex->loop, &r->wake);
}

/*
 * Slow waves (test mode). Waves keep the bundle schedule the same every run, and the
 * synthetic clock jumps only when nothing runs, so processing time does not pass while a
 * bundle runs. A bundle that really takes long (a DoFn that sleeps, a slow external call) is
 * different: on any real runner processing-time events shorter than it happen during it, and
 * Beam's tests count on that (GroupByKeyTest's continuation trigger: an upstream timer sleeps
 * 500 ms while a 1 ms processing-time trigger must fire early downstream). So a wave in
 * flight longer than SD_EXEC_WAVE_PATIENCE_MS turns slow: until everything in flight has
 * committed, the job clock runs at least at the real time since the wave went out
 * (sd_em_clock_follow), what becomes due runs, and ready bundles go out beside the wave.
 * A job whose bundles are all quicker than the patience keeps the jump-only clock and the
 * same schedule every run.
 */
static void slow_wave_clock(sd_exec_run *r, bool idle)
{
    if (idle) {
        r->wave_slow = false; /* the wave is over: the next one starts patient again */
        return;
    }
    if (!r->wave_patience) {
        return;
    }
    int64_t ran = sd_mono_now_ms() - r->wave_mono_ms;
    if (r->wave_slow || ran >= SD_EXEC_WAVE_PATIENCE_MS) {
        r->wave_slow = sd_em_clock_follow(r->em, sd_time_add(r->wave_clock_ms, ran));
    }
}

/* While a wave is in flight: wake when it turns slow, or (slow) when the next
 * processing-time event comes due at the real rate (one due already waits for a commit). A
 * wave past its patience that is not slow (a TestStream still has events) waits for its
 * commits: waking it would only spin. */
static void slow_wave_wake(sd_exec_run *r)
{
    int64_t ran = sd_mono_now_ms() - r->wave_mono_ms;
    sd_time due;
    if (!r->wave_slow) {
        if (ran < SD_EXEC_WAVE_PATIENCE_MS) {
            arm_wake(r, SD_EXEC_WAVE_PATIENCE_MS - ran);
        }
    } else if (sd_em_next_pt_due(r->em, &due) && due < SD_TIME_MAX &&
               due > sd_em_clock_now(r->em)) {
        arm_wake(r, due - sd_time_add(r->wave_clock_ms, ran));
    }
}

void sd__exec_wake_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    sd__exec_schedule(t->data);
}

void sd__exec_schedule(sd_exec_run *r)
{
    sd_err err;
    int max_inflight = r->max_inflight > 0 ? r->max_inflight : r->ex->cfg.max_inflight;
    if (r->finishing || r->scheduling) {
        return;
    }
    r->scheduling = true;
    sd_err_clear(&err);
    /*
     * Test mode dispatches in waves: up to max_inflight bundles (and the bundles of spread
     * stages below) go out together and the next wave is formed only after the
     * whole wave has committed (in order). Which elements make up
     * a bundle then never depends on which worker thread finished first, so the same job and
     * inputs give the same bundle schedule and output every run. Wall-clock mode refills
     * continuously instead.
     */
    bool was_idle = sd_map_len(&r->inflight) == 0;
    slow_wave_clock(r, was_idle);
    bool may_dispatch = !r->waves || was_idle || r->wave_slow;
    /* Beyond max_inflight, the bundles of spread stages (a splittable DoFn's restrictions,
     * what a Reshuffle redistributes: xplan.c) go out side by side, at most
     * SD_EM_SPREAD_BUNDLES a stage: each element may be long work (a source shard read for
     * seconds), and queued behind one another they would take the sum of their times. */
    for (int spread = 0; may_dispatch && spread < 2; spread++) {
        size_t cap = (size_t)max_inflight + (spread ? SD_EXEC_MAX_SPREAD : 0);
        while (sd_map_len(&r->inflight) < cap) {
            sd_bundle *b = NULL;
            sd_status st = spread ? sd_em_next_spread_bundle(r->em, &b, &err)
                                  : sd_em_next_bundle(r->em, &b, &err);
            if (st != SD_OK) {
                r->scheduling = false;
                sd_err_failed(&err, st, "the engine's scheduler");
                sd__exec_run_fail(r, "engine: %s", sd_err_msg(&err));
                return;
            }
            if (b == NULL) {
                break;
            }
            if (!dispatch(r, b)) {
                return; /* the job failed: r is gone */
            }
        }
    }
    r->scheduling = false;
    if (was_idle && sd_map_len(&r->inflight) > 0) {
        r->wave_mono_ms = sd_mono_now_ms(); /* a new wave went out */
        r->wave_clock_ms = sd_em_clock_now(r->em);
    }
    /* Wall-clock mode: wake when the next processing-time event is due, even while other
     * bundles run (their completion would otherwise be the only trigger). */
    sd_time due;
    bool waiting_on_time = sd_em_next_wakeup(r->em, &due);
    if (waiting_on_time) {
        arm_wake(r, due - sd_wall_now_ms());
    } else if (r->wave_patience && sd_map_len(&r->inflight) > 0) {
        slow_wave_wake(r);
    }
    if (sd_map_len(&r->inflight) > 0 || r->finalizing > 0) {
        return;
    }
    if (sd_em_done(r->em)) {
        sd__exec_run_finish(r, SD_JOB_DONE);
        return;
    }
    if (waiting_on_time || sd_em_waiting(r->em)) {
        return; /* for real time, a live TestStream's next event, or a step (paused) */
    }
    sd_buf dump;
    sd_buf_init(&dump, 1 << 20);
    if (sd_em_check_stuck(r->em, &dump) != SD_OK) {
        if (sd_buf_append_byte(&dump, '\0') != SD_OK && dump.len > 0) {
            dump.data[dump.len - 1] = '\0';
        }
        sd__exec_run_fail(r,
                          "the job is stuck: nothing in progress and nothing can run, but elements "
                          "are pending. Per-stage state:\n%s",
                          dump.data != NULL ? (char *)dump.data : "");
    } else {
        sd__exec_run_fail(r, "the job made no progress and the engine reports nothing pending: "
                             "internal scheduling error");
    }
    sd_buf_deinit(&dump);
}
