/*
 * Sundial: executor: Run, from a prepared job to a running one.
 *
 *     hook_start (exec.c)    a run record; the job is STARTING
 *     sd__exec_plan_submit   packs the pipeline into a task, plans it on the background pool
 *     plan_work (pool)       unpacks and plans (sd_plan_build)
 *     plan_done (loop)       hands the plan to the run, or drops it when the run is gone
 *     start_planned          the SDK-stage index (sd_exec_plan_init), descriptor ids on the
 *                            wire, the engine (options from exec_options.c), test splits,
 *                            one worker per environment (exec_env.c); the job is RUNNING and
 *                            the first scheduling pass is kicked
 *
 * Any failure on the way fails the job through sd__exec_run_fail(), so the message reaches
 * the client.
 */
#include <string.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/bg.h"
#include "runner/base/log.h"
#include "runner/base/rand.h"
#include "runner/exec/exec_int.h"

/* Create the run's engine as the job's options ask, and register the plan with it. */
static sd_status engine_setup(sd_exec_run *r, sd_err *err)
{
    sd_em_config cfg = { 0 };
    sd_status st = sd__exec_engine_config(r, &cfg, err);
    if (st != SD_OK) {
        return st;
    }
    st = sd__exec_schedule_setup(r, &cfg, err);
    if (st != SD_OK) {
        return st;
    }
    r->waves = cfg.clock == SD_CLOCK_SYNTHETIC;
    r->cache_tokens = sd__exec_cache_tokens(r);
    r->wave_patience = r->waves && r->sched == NULL && r->explore.total == 0 &&
                       cfg.schedule_seed == 0 && cfg.bundle_shape == SD_SHAPE_GREEDY;
    r->streaming = cfg.streaming;
    r->memory_limit = cfg.memory_limit;
    st = sd__exec_late_policy(r, err);
    if (st == SD_OK) {
        st = sd__exec_late_setup(r, &cfg, err);
    }
    if (st != SD_OK) {
        return st;
    }
    st = sd_em_create(&cfg, &r->em);
    if (st != SD_OK) {
        return sd_err_set(err, st, "out of memory");
    }
    return sd_exec_plan_to_engine_ts(&r->xp, r->em, &r->ts_driver, err);
}

/* r->wire_ids: one "STAGE.JOB.TOKEN" descriptor id per SDK stage, and r->drain_wire_ids one
 * "STAGE-drain.JOB.TOKEN" per splittable stage (see struct sd_exec_run). */
static sd_status make_wire_ids(sd_exec_run *r, sd_err *err)
{
    char token[SD_TOKEN_HEX];
    if (sd_token_hex(token) != SD_OK) {
        return sd_err_set(err, SD_EIO, "job %s: no random bytes for descriptor ids", r->job_id);
    }
    size_t n = r->xp.n_stages == 0 ? 1 : r->xp.n_stages;
    r->wire_ids = sd_calloc(n, sizeof(char *));
    r->drain_wire_ids = sd_calloc(n, sizeof(char *));
    if (r->wire_ids == NULL || r->drain_wire_ids == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->xp.n_stages; i++) {
        const sd_exec_stage *s = &r->xp.stages[i];
        r->wire_ids[i] = sd_asprintf("%s.%s.%s", s->id, r->job_id, token);
        if (r->wire_ids[i] == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        if (s->drain_descriptor.len > 0) {
            r->drain_wire_ids[i] = sd_asprintf("%s-drain.%s.%s", s->id, r->job_id, token);
            if (r->drain_wire_ids[i] == NULL) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
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
struct sd_exec_plan_task {
    sd_exec_run *r; /* loop side: NULL once detached */
    uint8_t *bytes;
    size_t len;
    char *url;
    sd_plan_options popt;
    sd_plan *plan;
    sd_status st;
    sd_err err;
};

void sd__exec_plan_task_detach(sd_exec_plan_task *t)
{
    t->r->planning = NULL;
    t->r = NULL;
}

static void plan_task_destroy(sd_exec_plan_task *t)
{
    sd_plan_destroy(t->plan);
    sd_free(t->bytes);
    sd_free(t->url);
    sd_free(t);
}

static void plan_work(void *arg)
{
    sd_exec_plan_task *t = arg;
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
static void start_planned(sd_exec_run *r)
{
    sd_err errbuf = { 0 };
    sd_err *err = &errbuf;
    sd_status st = sd_exec_plan_init(r->plan, &r->xp, err);
    if (st == SD_OK) {
        st = make_wire_ids(r, err);
    }
    if (st == SD_OK) {
        size_t n_sdk = 0;
        for (size_t i = 0; i < r->plan->n_stages; i++) {
            n_sdk += r->plan->stages[i].kind == SD_PLAN_STAGE_SDK;
        }
        SD_INFO("exec", "job %s RUNNING: %zu stages, %zu of them SDK stages", r->job_id,
                r->plan->n_stages, n_sdk);
    }
    if (st == SD_OK && sd_log_get_level() <= SD_LOG_DEBUG) {
        for (size_t i = 0; i < r->plan->n_stages; i++) {
            const sd_plan_stage *ps = &r->plan->stages[i];
            SD_DEBUG("exec", "job %s: %s %s: %zu transforms, in [%s%s], out [%s%s]", r->job_id,
                     ps->id, sd_plan_stage_kind_name(ps->kind), ps->n_transforms,
                     ps->n_inputs > 0 ? ps->inputs[0] : "", ps->n_inputs > 1 ? ",..." : "",
                     ps->n_outputs > 0 ? ps->outputs[0].pcollection : "",
                     ps->n_outputs > 1 ? ",..." : "");
        }
    }
    if (st == SD_OK) {
        st = engine_setup(r, err);
    }
    if (st == SD_OK && r->drain_requested) {
        sd_em_drain(r->em); /* Drain arrived while the job was being planned */
    }
    if (st == SD_OK) {
        st = sd__exec_pause_setup(r, err);
    }
    if (st == SD_OK) {
        st = sd__exec_live_start(r, err);
    }
    if (st == SD_OK) {
        sd__exec_read_test_splits(r);
        /* A stage the pipeline asks to split at given times gets its input as the reference
         * runner gives it, in one bundle: no output cap and no spreading (none in the job, so
         * a replay without the option, told by the recording, cuts the same bundles). */
        bool replaying = sd_em_sched_replaying(r->sched);
        if (r->splits.len > 0 || (replaying && sd_em_sched_header_get(r->sched)->no_spread != 0)) {
            sd_em_disable_spread(r->em);
            if (r->sched != NULL && !replaying) {
                sd_em_sched_set_no_spread(r->sched);
            }
        }
        for (size_t i = 0; i < r->splits.len; i++) {
            const char *sid = SD_VEC_AT(&r->splits, sd_exec_split, i)->stage_id;
            if (sd_em_set_output_cap(r->em, sid, 0) != SD_OK) {
                SD_WARN("exec", "job %s: test splits name an unknown stage", r->job_id);
            }
        }
        for (size_t i = 0; i < r->xp.n_envs && st == SD_OK; i++) {
            st = sd__exec_env_start(r, r->xp.env_ids[i], err);
        }
    }
    if (st != SD_OK) {
        /* Fail through the job so the message reaches the client. */
        sd_err_failed(err, st, "starting the job");
        sd__exec_run_fail(r, "%s", sd_err_msg(err));
        return;
    }
    sd_job_set_state(r->job, SD_JOB_RUNNING);
    if (r->xp.n_envs > 0) {
        ev_timer_start(r->ex->loop, &r->connect_timer);
    }
    sd__exec_run_kick(r);
}

static void plan_done(void *arg, bool abandoned)
{
    sd_exec_plan_task *t = arg;
    sd_exec_run *r = abandoned ? NULL : t->r;
    if (r == NULL) {
        plan_task_destroy(t); /* abandoned (maybe on a pool thread) or detached */
        return;
    }
    r->planning = NULL;
    if (t->st != SD_OK) {
        sd_err_failed(&t->err, t->st, "planning the job");
        sd__exec_run_fail(r, "%s", sd_err_msg(&t->err));
        plan_task_destroy(t);
        return;
    }
    r->plan = t->plan;
    t->plan = NULL;
    plan_task_destroy(t);
    start_planned(r);
}

/* A pipeline this small is planned on the loop thread: it takes less than the two thread
 * hand-overs it would otherwise cost (a one-element job's submit-to-DONE is a few ms). */
#define INLINE_PLAN_BYTES (64u * 1024u)

/* Plan the job's pipeline: here when it is small or there is no pool; else packed into a task
 * for the pool (which must not read the job). */
sd_status sd__exec_plan_submit(sd_exec_run *r, sd_err *err)
{
    sd_exec *ex = r->ex;
    sd_job *job = r->job;
    const pb_Pipeline *p = sd_job_pipeline(job);
    if (ex->plan_source != NULL) {
        /* Test seam: a plan built before, borrowed (see sd__exec_set_plan_source). */
        sd_plan_options popt = { .data_url = ex->endpoint, .state_url = ex->endpoint };
        sd__exec_plan_options(job, &popt);
        r->plan = ex->plan_source(ex->plan_source_ctx, job, &popt);
        if (r->plan != NULL) {
            r->plan_borrowed = true;
            start_planned(r);
            return SD_OK;
        }
    }
    sd_exec_plan_task *t = sd_calloc(1, sizeof(*t));
    if (t == NULL || (t->url = sd_strdup(ex->endpoint)) == NULL) {
        sd_free(t);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    t->popt.data_url = t->url;
    t->popt.state_url = t->url;
    sd__exec_plan_options(job, &t->popt);
    t->r = r;
    r->planning = t;
    t->len = protobuf_c_message_get_packed_size(&p->base);
    if (ex->cfg.bg == NULL || t->len <= INLINE_PLAN_BYTES) {
        /* Planned here, from the job's own pipeline: no copy for another thread. */
        t->st = sd_plan_build(p, &t->popt, &t->plan, &t->err);
        plan_done(t, false);
        return SD_OK;
    }
    t->bytes = sd_malloc(t->len > 0 ? t->len : 1);
    if (t->bytes == NULL) {
        r->planning = NULL;
        plan_task_destroy(t);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    (void)protobuf_c_message_pack(&p->base, t->bytes);
    sd_status st = sd_bg_submit(ex->cfg.bg, plan_work, plan_done, t);
    if (st != SD_OK) {
        r->planning = NULL;
        plan_task_destroy(t);
        return sd_err_set(err, st, "cannot schedule planning (%s)", sd_status_name(st));
    }
    return SD_OK;
}
