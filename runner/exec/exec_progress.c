/*
 * Sundial: executor: watching running bundles (progress, hangs, stalls) and splitting them.
 *
 * Liveness runs on a real-time tick (r->tick, 1 s) in both clock modes, because it is about
 * the worker, not about pipeline time. A bundle running longer than PROGRESS_EVERY_MS gets a
 * ProcessBundleProgressRequest; any answer proves the worker alive, and only a report that
 * differs from the last (a digest of its monitoring infos and data) proves the bundle moves.
 *
 *   hung     a progress request unanswered for hang_timeout_s, or a ProcessBundle response
 *            whose output streams never end (no is_last) for as long
 *   stalled  the worker answers, but the bundle consumed and produced nothing for
 *            stall_timeout_s (the job fails with the engine's per-stage dump)
 *
 * Runner-initiated splits come from beam:option:direct_test_splits:v1 (exec_options.c): the
 * first bundle of a named stage gets ProcessBundleSplitRequests at the given times; channel
 * splits move its first residual element, sub-element residuals become new work.
 *
 * Callbacks here may outlive their bundle, so they find it again by instruction id.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/exec/exec_int.h"

/* A bundle that has run this long gets a progress request every PROGRESS_EVERY_MS. */
#define PROGRESS_EVERY_MS 2000

typedef struct progress_ctx {
    sd_exec *ex;
    char *iid;
    uint64_t seq;
} progress_ctx;

/* Find an in-flight bundle from "<job>/<bundle>" (callbacks may outlive the bundle). */
static sd_exec_inflight *inflight_by_id(sd_exec *ex, const char *iid)
{
    const char *slash = strchr(iid, '/');
    char job[128];
    sd_exec_run *r;
    if (slash == NULL || (size_t)(slash - iid) >= sizeof(job)) {
        return NULL;
    }
    memcpy(job, iid, (size_t)(slash - iid));
    job[slash - iid] = '\0';
    r = sd_map_get_str(&ex->runs, job);
    return r == NULL ? NULL : sd_map_get_str(&r->inflight, iid);
}

static void on_split_response(void *ctx, const pb_InstructionResponse *resp, const char *error)
{
    progress_ctx *pc = ctx;
    sd_exec_inflight *f = inflight_by_id(pc->ex, pc->iid);
    size_t asked = (size_t)pc->seq; /* 1 + its index in f->asked; 0: not remembered */
    (void)error;
    if (f != NULL && f->splits_outstanding > 0) {
        f->splits_outstanding--;
    }
    if (f != NULL && resp != NULL && resp->process_bundle_split != NULL &&
        resp->response_case ==
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT) {
        const pb_ProcessBundleSplitResponse *sr = resp->process_bundle_split;
        sd_err err = { 0 };
        /* Sub-element splits: the residuals are new work (re-pended when the bundle commits);
         * the primaries stay with the running bundle. */
        if (!sd__exec_add_residuals(f, sr->residual_roots, sr->n_residual_roots, &err)) {
            sd__exec_run_fail(f->r, "stage %s: bundle %s: split residual: %s", f->st->id,
                              f->instruction_id, sd_err_msg(&err));
            sd_free(pc->iid);
            sd_free(pc);
            return;
        }
        /* Remembered for the schedule: the first residual element, and the whole answer
         * (what a replay applies in its place). */
        bool answered =
            sr->n_channel_splits > 0 || sr->n_residual_roots > 0 || sr->n_primary_roots > 0;
        if (asked > 0 && asked <= f->n_asked && answered) {
            if (sr->n_channel_splits > 0) {
                f->asked[asked - 1].answer = sr->channel_splits[0]->first_residual_element;
            }
            if (sd_fnapi_pb_pack(&sr->base, &f->asked[asked - 1].kept) != SD_OK) {
                sd__exec_run_fail(f->r, "stage %s: bundle %s: out of memory keeping a split answer",
                                  f->st->id, f->instruction_id);
                sd_free(pc->iid);
                sd_free(pc);
                return;
            }
        }
        for (size_t i = 0; i < sr->n_channel_splits; i++) {
            int64_t fr = sr->channel_splits[i]->first_residual_element;
            if (fr >= 0 && (size_t)fr <= sd_em_bundle_input_count(f->b) &&
                (!f->has_split || (size_t)fr < f->first_residual)) {
                f->has_split = true;
                f->first_residual = (size_t)fr;
                SD_DEBUG("exec", "bundle %s split at element %lld", pc->iid, (long long)fr);
            }
        }
    }
    sd_free(pc->iid);
    sd_free(pc);
    if (f != NULL && f->splits_outstanding == 0 && f->response_received) {
        sd__exec_bundle_maybe_complete(f); /* it waited for this answer (may free the run) */
    }
}

/* Ask the SDK to split bundle f at fraction of its remaining work (0: checkpoint now); the
 * request's instruction id is "<bundle>-<what><n>". */
static void send_split(sd_exec_inflight *f, double fraction, const char *what, size_t n)
{
    pb_InstructionRequest req =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__INIT;
    pb_ProcessBundleSplitRequest sr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_SPLIT_REQUEST__INIT;
    pb_DesiredSplit ds =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_SPLIT_REQUEST__DESIRED_SPLIT__INIT;
    pb_DesiredSplitsEntry entry =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_SPLIT_REQUEST__DESIRED_SPLITS_ENTRY__INIT;
    pb_DesiredSplitsEntry *entries[1] = { &entry };
    char *split_id = sd_asprintf("%s-%s%zu", f->instruction_id, what, n);
    progress_ctx *pc = sd_calloc(1, sizeof(*pc));
    if (split_id == NULL || pc == NULL || (pc->iid = sd_strdup(f->instruction_id)) == NULL) {
        sd_free(split_id);
        sd_free(pc);
        return;
    }
    pc->ex = f->r->ex;
    ds.fraction_of_remainder = fraction;
    ds.estimated_input_elements = (int64_t)sd_em_bundle_input_count(f->b);
    entry.key = (char *)f->st->source_transform;
    entry.value = &ds;
    sr.instruction_id = f->instruction_id;
    sr.n_desired_splits = 1;
    sr.desired_splits = entries;
    req.instruction_id = split_id;
    req.request_case =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_SPLIT;
    req.process_bundle_split = &sr;
    if (f->n_asked < SD_EXEC_MAX_ASKED) {
        f->asked[f->n_asked].fraction = fraction;
        f->asked[f->n_asked].answer = -1;
        pc->seq = ++f->n_asked;
    }
    if (sd_fnapi_worker_instruct(f->env->worker, &req, on_split_response, pc) != SD_OK) {
        if (pc->seq > 0) {
            f->n_asked--; /* never asked */
        }
        sd_free(pc->iid);
        sd_free(pc);
    } else {
        f->splits_outstanding++;
    }
    sd_free(split_id);
}

static void split_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    sd_exec_inflight *f = t->data;
    sd_exec_run *r = f->r;
    (void)revents;
    ev_timer_stop(loop, t);
    f->split_timer_active = false;
    if (f->next_split >= f->splits->n || r->finishing) {
        return;
    }
    double fraction = f->splits->fractions[f->next_split++];
    send_split(f, fraction, "split", f->next_split);
    if (f->next_split < f->splits->n) {
        double now = (double)(sd_mono_now_ms() - f->started_ms) / 1000.0;
        double at = f->splits->timings[f->next_split] - now;
        ev_timer_set(&f->split_timer, at > 0 ? at : 0.001, 0.);
        ev_timer_start(loop, &f->split_timer);
        f->split_timer_active = true;
    }
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
    sd_exec_inflight *f = inflight_by_id(pc->ex, pc->iid);
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

static void send_progress(sd_exec_inflight *f, int64_t now)
{
    pb_InstructionRequest req =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__INIT;
    SD_FN(ProcessBundleProgressRequest)
    pr = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_PROGRESS_REQUEST__INIT;
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
    if (sd_fnapi_worker_instruct(f->env->worker, &req, on_progress_response, pc) == SD_OK) {
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
void sd__exec_tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    sd_exec_run *r = t->data;
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
        sd_exec_inflight *f = v;
        if (f->response_received) {
            /* Answered, but its data or timer streams never ended: nothing else completes the
             * bundle, so the worker is as stuck as one that never answers. */
            if (f->lasts_remaining > 0 && now - f->response_ms > hang_ms) {
                sd__exec_run_fail(
                    r,
                    "stage %s: bundle %s: SDK worker %s answered ProcessBundle %lld s "
                    "ago but %d of its output streams never ended (no is_last); the "
                    "worker seems hung",
                    f->st->id, f->instruction_id, f->env->worker_id,
                    (long long)(now - f->response_ms) / 1000, f->lasts_remaining);
                return;
            }
            continue;
        }
        if (f->env->worker == NULL || !sd_fnapi_worker_is_connected(f->env->worker)) {
            continue;
        }
        if (f->progress_sent_ms != 0 && now - f->progress_sent_ms > hang_ms) {
            sd__exec_run_fail(
                r,
                "stage %s: bundle %s: SDK worker %s has not answered a progress "
                "request for %lld s (the bundle started %lld s ago); the worker seems "
                "hung",
                f->st->id, f->instruction_id, f->env->worker_id,
                (long long)(now - f->progress_sent_ms) / 1000,
                (long long)(now - f->started_ms) / 1000);
            return;
        }
        if (stall_ms > 0 && now - f->active_ms > stall_ms) {
            sd__exec_run_fail_dump(r,
                                   "stage %s: bundle %s: SDK worker %s answers progress requests "
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

/* The checkpoint timer fired: ask the running SDF bundle to checkpoint (it repeats). */
static void checkpoint_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    sd_exec_inflight *f = t->data;
    (void)loop;
    (void)revents;
    if (f->r->finishing || f->response_received || f->env->worker == NULL ||
        !sd_fnapi_worker_is_connected(f->env->worker)) {
        return;
    }
    if (!f->r->streaming && (f->r->em == NULL || !sd_em_draining(f->r->em))) {
        return; /* a batch job's bundle: asked only once the job drains (below) */
    }
    f->checkpoints++;
    SD_DEBUG("exec", "bundle %s: checkpoint request %u", f->instruction_id, f->checkpoints);
    send_split(f, 0.0, "checkpoint", f->checkpoints);
}

/*
 * Unbounded sources never stall. A splittable DoFn may keep its bundle forever (a reader that
 * always has data claims on and never returns), and a bundle's output reaches its consumers
 * only when the bundle commits: downstream would see nothing, and a Flatten of two such
 * sources nothing from either. So in a streaming job every bundle of a splittable stage is
 * asked to checkpoint (a split at fraction 0 of the remainder: the SDK stops after the
 * current claim and hands back the rest as a residual) once it has run checkpoint_ms of wall
 * time, and again as often until it ends; the residual is new work of the same stage, and the
 * output so far commits. Batch jobs are left alone (their SDFs end by themselves, and their
 * output is complete only at the end anyway) until they drain: then a bundle that claims on
 * forever (Beam's Go TestDrain: an unbounded range in a batch pipeline) must hand back its
 * residual for the drain to truncate it, so the timer runs for them too and asks only then.
 * Bundles the test splits option drives are left alone.
 */
void sd__exec_arm_checkpoint(sd_exec_run *r, sd_exec_inflight *f)
{
    if (r->checkpoint_ms <= 0 || f->splits != NULL || !f->st->ps->splittable ||
        f->st->source_transform == NULL) {
        return;
    }
    double every = (double)r->checkpoint_ms / 1000.0;
    ev_timer_init(&f->checkpoint_timer, checkpoint_timer_cb, every, every);
    f->checkpoint_timer.data = f;
    ev_timer_start(r->ex->loop, &f->checkpoint_timer);
    f->checkpoint_timer_active = true;
}

/*
 * Runner-initiated channel splits requested by the pipeline option (the TypeScript SDK's
 * "liquid sharding" test): only the first bundle of the named stage.
 */
void sd__exec_arm_test_split(sd_exec_run *r, sd_exec_inflight *f)
{
    const sd_exec_stage *st = f->st;
    for (size_t i = 0; i < r->splits.len; i++) {
        sd_exec_split *sp = SD_VEC_AT(&r->splits, sd_exec_split, i);
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
}

/*
 * Replaying a schedule: the splits recorded for this bundle are applied, not asked for — an
 * SDK's answer depends on how far it got when the request came, which no recording fixes. Each
 * recorded answer (the SDK's ProcessBundleSplitResponse, kept whole) is applied in order as
 * if it had just arrived: its residual roots become new work, a channel split of the stage's
 * data source cuts the input, and the element it split (the one between last primary and
 * first residual) goes to the SDK as the primary roots it answered, so the SDK does exactly
 * the recorded primary's work and the commit carries the recorded outputs and residuals. The
 * requests go into f->asked as recorded, so the commit reports the same split decisions.
 */
static bool apply_answer(sd_exec_inflight *f, sd_bytes kept, sd_err *err)
{
    const char *src = f->st->source_transform;
    size_t n_in = sd_em_bundle_input_count(f->b);
    pb_ProcessBundleSplitResponse *sr = (pb_ProcessBundleSplitResponse *)protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__process_bundle_split_response__descriptor,
        NULL, kept.len, kept.ptr);
    if (sr == NULL) {
        sd_err_set(err, SD_EPROTO, "its recorded answer is not a ProcessBundleSplitResponse");
        return false;
    }
    bool ok = sd__exec_add_residuals(f, sr->residual_roots, sr->n_residual_roots, err);
    for (size_t i = 0; ok && i < sr->n_channel_splits; i++) {
        const SD_FN(ProcessBundleSplitResponse__ChannelSplit) *cs = sr->channel_splits[i];
        int64_t lp = cs->last_primary_element, fr = cs->first_residual_element;
        if (cs->transform_id == NULL || src == NULL || strcmp(cs->transform_id, src) != 0) {
            continue;
        }
        if (fr < 0 || (uint64_t)fr > n_in || lp < -1 || lp >= fr) {
            sd_err_set(err, SD_EPROTO,
                       "its recorded channel split (last primary %lld, first residual %lld) does "
                       "not fit the bundle's %zu elements",
                       (long long)lp, (long long)fr, n_in);
            ok = false;
            break;
        }
        if ((size_t)fr < f->cut) {
            f->cut = (size_t)fr;
        }
        if (fr - lp == 2 && sr->n_primary_roots > 0) {
            /* The element between them was split: it goes as its primary roots. */
            f->subst = (size_t)(lp + 1);
            sd_buf_reset(&f->subst_bytes);
            for (size_t k = 0; ok && k < sr->n_primary_roots; k++) {
                const SD_FN(BundleApplication) *ba = sr->primary_roots[k];
                ok = sd_buf_append(&f->subst_bytes, ba->element.data, ba->element.len) == SD_OK;
            }
            if (!ok) {
                sd_err_set(err, SD_ENOMEM, "out of memory");
            }
        }
    }
    protobuf_c_message_free_unpacked(&sr->base, NULL);
    return ok;
}

bool sd__exec_replay_splits(sd_exec_run *r, sd_exec_inflight *f)
{
    sd_em_sched_split rec[SD_EXEC_MAX_ASKED];
    size_t n = 0;
    sd_err err;
    sd_err_clear(&err);
    sd_status rc =
        sd_em_sched_splits_for(r->sched, sd_em_bundle_id(f->b), rec, SD_EXEC_MAX_ASKED, &n, &err);
    bool ok = rc == SD_OK;
    for (size_t i = 0; i < n && i < SD_EXEC_MAX_ASKED; i++) {
        if (ok) {
            f->asked[i].fraction = rec[i].fraction;
            f->asked[i].answer = rec[i].first_split;
            f->asked[i].kept = rec[i].answer; /* taken */
            sd_buf_init(&rec[i].answer, 0);
            f->n_asked = i + 1;
            ok =
                f->asked[i].kept.len == 0 || apply_answer(f, sd_buf_bytes(&f->asked[i].kept), &err);
        }
        sd_buf_deinit(&rec[i].answer);
    }
    for (size_t i = n; i < SD_EXEC_MAX_ASKED; i++) {
        sd_buf_deinit(&rec[i].answer);
    }
    if (ok && f->subst != SIZE_MAX && f->subst + 1 != f->cut) {
        f->subst = SIZE_MAX; /* a later split cut the input before the element it split */
    }
    if (ok && f->cut != SIZE_MAX) {
        f->has_split = true;
        f->first_residual = f->cut;
    }
    if (!ok) {
        sd__exec_run_fail(r, "bundle %s: replaying its recorded split: %s", f->instruction_id,
                          sd_err_msg(&err));
    }
    return ok;
}
