/*
 * Sundial: executor: recording and replaying a job's schedule (the engine's sd_em_sched).
 *
 *   beam:option:sundial_record_schedule:v1 = FILE   write the run's schedule to FILE when the
 *                                                   job ends (DONE or FAILED alike: a failing
 *                                                   run is the one worth keeping)
 *   beam:option:sundial_replay_schedule:v1 = FILE   replay FILE: the seed, bundle shape, caps
 *                                                   and bundles in flight come from it, every
 *                                                   decision is checked against it, and the job
 *                                                   fails at the first step that differs
 *   sundial serve --record-schedule-dir DIR         every job without the option records to
 *                                                   DIR/<job id>.schedule
 *   sundial serve --replay-schedule FILE            every job without the option replays FILE
 *   beam:option:sundial_explore_seeds:v1 = K        run the job up to 3K times (seeds 1..K,
 *   beam:option:sundial_explore_dir:v1 = DIR        each bundle shape), each run recorded to
 *                                                   DIR, ending at the first failing run
 *                                                   (exec.c starts the next run when one
 *                                                   passes; only the failing run's file stays)
 *
 * Both need the synthetic clock: on the wall clock the schedule follows real time and cannot
 * repeat. The engine reports its own decisions; this file adds the one it cannot see, the
 * runner-initiated splits (exec_progress.c asks for them on real-time timers): each request
 * is remembered on its bundle with the SDK's answer — the first residual element and the
 * whole ProcessBundleSplitResponse, primary and residual roots included — and reported when
 * the bundle commits, in commit order, which is the dispatch order, so the step numbers do not
 * depend on when the answers came. A replay asks for no split at all (an SDK's answer depends
 * on how far it got when asked, which no recording fixes): it applies each recorded answer to
 * its bundle at dispatch (exec_progress.c), so the SDK does exactly the recorded work and the
 * commit is checked against the recorded outputs and residuals.
 */
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/fs.h"
#include "runner/base/log.h"
#include "runner/exec/exec_int.h"

/* Read a whole file (at most 256 MiB) into out. */
static sd_status read_file(const char *path, sd_buf *out, sd_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return sd_err_set(err, SD_EIO, "cannot open \"%s\" for reading", path);
    }
    sd_status rc = SD_OK;
    uint8_t chunk[8192];
    size_t n;
    while (rc == SD_OK && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = out->len + n > ((size_t)256 << 20) ? SD_EINVAL : sd_buf_append(out, chunk, n);
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (rc == SD_EINVAL) {
        return sd_err_set(err, rc, "\"%s\" is larger than 256 MiB: not a schedule", path);
    }
    if (rc != SD_OK || bad) {
        return sd_err_set(err, rc != SD_OK ? rc : SD_EIO, "cannot read \"%s\"", path);
    }
    return SD_OK;
}

static sd_status replay_setup(sd_exec_run *r, sd_em_config *cfg, const char *path, sd_err *err)
{
    sd_buf text;
    sd_buf_init(&text, 0);
    sd_status rc = read_file(path, &text, err);
    if (rc == SD_OK) {
        rc = sd_em_sched_replay(sd_buf_bytes(&text), &r->sched, err);
    }
    sd_buf_deinit(&text);
    if (rc != SD_OK) {
        return rc;
    }
    const sd_em_sched_header *h = sd_em_sched_header_get(r->sched);
    if ((cfg->schedule_seed != 0 && cfg->schedule_seed != h->seed) ||
        (cfg->bundle_shape != SD_SHAPE_GREEDY && cfg->bundle_shape != h->shape)) {
        sd_job_message(r->job, SD_JOB_MSG_WARNING,
                       "replaying schedule %s: its seed %llu and shape %s replace the job's "
                       "sundial_schedule_seed / sundial_bundle_shape",
                       path, (unsigned long long)h->seed, sd_em_shape_name(h->shape));
    }
    cfg->schedule_seed = h->seed;
    cfg->bundle_shape = h->shape;
    cfg->max_bundle_elements = (size_t)h->max_bundle_elements;
    cfg->max_bundle_bytes = (size_t)h->max_bundle_bytes;
    cfg->memory_limit = h->memory_limit > SIZE_MAX ? SIZE_MAX : (size_t)h->memory_limit;
    if (h->max_inflight > 0 && h->max_inflight <= 1024) {
        r->max_inflight = (int)h->max_inflight;
    }
    return SD_OK;
}

/* DIR/NAME, with any '/' in NAME written as '_' (a job id may hold one). Caller frees. */
static char *file_in(const char *dir, const char *name)
{
    char *p = sd_asprintf("%s/%s", dir, name);
    if (p != NULL) {
        for (char *c = p + strlen(dir) + 1; *c != '\0'; c++) {
            *c = *c == '/' ? '_' : *c;
        }
    }
    return p;
}

/* Record this run's schedule (to r->record_path, set by the caller) with cfg's seed, shape and
 * caps, and make the recorder the engine's decision hook. */
static sd_status start_recording(sd_exec_run *r, sd_em_config *cfg, sd_err *err)
{
    sd_em_sched_header h = { .seed = cfg->schedule_seed,
                             .shape = cfg->bundle_shape,
                             .max_bundle_elements = cfg->max_bundle_elements,
                             .max_bundle_bytes = cfg->max_bundle_bytes,
                             .max_inflight = (uint64_t)r->max_inflight,
                             .memory_limit = cfg->memory_limit };
    if (r->record_path == NULL || sd_em_sched_record(&h, &r->sched) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    cfg->on_decision = sd_em_sched_decide;
    cfg->decision_ctx = r->sched;
    return SD_OK;
}

/* ---- schedule exploration ----------------------------------------------------------------- */

#define EXPLORE_MAX_SEEDS 1000

static const int explore_shapes[3] = { SD_SHAPE_GREEDY, SD_SHAPE_ONE_KEY, SD_SHAPE_ONE_ELEMENT };

uint64_t sd__exec_explore_seed(uint64_t n)
{
    return (n - 1) / 3 + 1;
}

int sd__exec_explore_shape(uint64_t n)
{
    return explore_shapes[(n - 1) % 3];
}

/* The first run of an exploring job: read beam:option:sundial_explore_seeds:v1 (and
 * sundial_explore_dir) into r->explore; nothing when the option is absent. */
static sd_status explore_begin(sd_exec_run *r, const sd_em_config *cfg, sd_err *err)
{
    const char *opt = "pipeline option beam:option:sundial_explore_seeds:v1";
    const char *raw = sd_job_option_string(r->job, "sundial_explore_seeds");
    int64_t k = 0;
    if (!sd_job_option_int(r->job, "sundial_explore_seeds", &k) &&
        (raw == NULL || raw[0] == '\0')) {
        return SD_OK;
    }
    if (k < 1 || k > EXPLORE_MAX_SEEDS) {
        return sd_err_set(err, SD_EINVAL, "%s: expected a number of seeds from 1 to %d, got %s%s%s",
                          opt, EXPLORE_MAX_SEEDS, raw != NULL ? "\"" : "",
                          raw != NULL ? raw : "a non-integer", raw != NULL ? "\"" : "");
    }
    if (sd_job_option_string(r->job, "sundial_record_schedule") != NULL ||
        sd_job_option_string(r->job, "sundial_replay_schedule") != NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "%s: an exploring job records each of its runs itself; it takes "
                          "neither sundial_record_schedule nor sundial_replay_schedule",
                          opt);
    }
    if (cfg->clock != SD_CLOCK_SYNTHETIC) {
        return sd_err_set(err, SD_EINVAL,
                          "%s: exploring schedules needs the synthetic (test-mode) clock; on "
                          "the wall clock a run's schedule follows real time",
                          opt);
    }
    const char *dir = sd_job_option_string(r->job, "sundial_explore_dir");
    dir = dir != NULL && dir[0] != '\0' ? dir : r->ex->cfg.record_schedule_dir;
    if (dir != NULL) {
        r->explore.dir = sd_strdup(dir);
        if (r->explore.dir == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    } else if (sd_private_tmpdir("sundial-explore", &r->explore.dir, err) != SD_OK) {
        return sd_err_prefix(err, "%s: ", opt);
    }
    r->explore.total = 3 * (uint64_t)k;
    r->explore.run = 1;
    sd_job_message(r->job, SD_JOB_MSG_BASIC,
                   "schedule exploration: up to %llu runs (seeds 1..%lld, each with the greedy, "
                   "one_key and one_element bundle shapes), schedules in %s",
                   (unsigned long long)r->explore.total, (long long)k, r->explore.dir);
    return SD_OK;
}

/* This run's seed and shape, and its schedule recorded to the exploration's directory. */
static sd_status explore_setup(sd_exec_run *r, sd_em_config *cfg, sd_err *err)
{
    uint64_t n = r->explore.run;
    cfg->schedule_seed = sd__exec_explore_seed(n);
    cfg->bundle_shape = sd__exec_explore_shape(n);
    char *name =
        sd_asprintf("%s-run%llu-seed%llu-%s.schedule", r->job_id, (unsigned long long)n,
                    (unsigned long long)cfg->schedule_seed, sd_em_shape_name(cfg->bundle_shape));
    r->record_path = name != NULL ? file_in(r->explore.dir, name) : NULL;
    sd_free(name);
    return start_recording(r, cfg, err);
}

char *sd__exec_explore_failure(const sd_exec_run *r)
{
    if (r->explore.total == 0) {
        return sd_strdup("");
    }
    uint64_t n = r->explore.run;
    return sd_asprintf("schedule exploration: run %llu of %llu (seed %llu, bundle shape %s) "
                       "failed; its schedule is recorded in %s (replay it with the pipeline "
                       "option beam:option:sundial_replay_schedule:v1=%s): ",
                       (unsigned long long)n, (unsigned long long)r->explore.total,
                       (unsigned long long)sd__exec_explore_seed(n),
                       sd_em_shape_name(sd__exec_explore_shape(n)),
                       r->record_path != NULL ? r->record_path : "(not recorded)",
                       r->record_path != NULL ? r->record_path : "FILE");
}

bool sd__exec_explore_passed(sd_exec_run *r)
{
    uint64_t n = r->explore.run;
    bool more = n < r->explore.total;
    if (!more) {
        sd_job_message(r->job, SD_JOB_MSG_BASIC,
                       "schedule exploration: all %llu runs passed (seeds 1..%llu, three bundle "
                       "shapes each)",
                       (unsigned long long)r->explore.total,
                       (unsigned long long)(r->explore.total / 3));
    }
    return more;
}

sd_status sd__exec_schedule_setup(sd_exec_run *r, sd_em_config *cfg, sd_err *err)
{
    r->max_inflight = r->ex->cfg.max_inflight;
    if (r->explore.total == 0) {
        sd_status rc = explore_begin(r, cfg, err);
        if (rc != SD_OK) {
            return rc;
        }
    }
    if (r->explore.total > 0) {
        return explore_setup(r, cfg, err);
    }
    const char *rec = sd_job_option_string(r->job, "sundial_record_schedule");
    const char *rep = sd_job_option_string(r->job, "sundial_replay_schedule");
    rec = rec != NULL && rec[0] != '\0' ? rec : NULL;
    rep = rep != NULL && rep[0] != '\0' ? rep : NULL;
    const char *what = rep != NULL   ? "pipeline option beam:option:sundial_replay_schedule:v1"
                       : rec != NULL ? "pipeline option beam:option:sundial_record_schedule:v1"
                                     : NULL;
    if (rec == NULL && rep == NULL && r->ex->cfg.replay_schedule != NULL) {
        rep = r->ex->cfg.replay_schedule;
        what = "sundial serve --replay-schedule";
    }
    r->max_inflight = r->ex->cfg.max_inflight;
    if (rec != NULL && rep != NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "pipeline options beam:option:sundial_record_schedule:v1 and "
                          "beam:option:sundial_replay_schedule:v1: a job records or replays a "
                          "schedule, not both (a replay that passes is the recording itself)");
    }
    bool want_record = rec != NULL || (rep == NULL && r->ex->cfg.record_schedule_dir != NULL);
    if (want_record && rec == NULL && cfg->clock != SD_CLOCK_SYNTHETIC) {
        /* The server records what can be recorded; a wall-clock job still runs. */
        sd_job_message(r->job, SD_JOB_MSG_WARNING,
                       "sundial serve --record-schedule-dir: this job runs on the wall clock, "
                       "whose schedule cannot repeat; it is not recorded");
        return SD_OK;
    }
    if ((rep != NULL || want_record) && cfg->clock != SD_CLOCK_SYNTHETIC) {
        return sd_err_set(err, SD_EINVAL,
                          "%s: recording or replaying a schedule needs the synthetic (test-mode) "
                          "clock; on the wall clock the schedule follows real time",
                          what != NULL ? what : "sundial serve --record-schedule-dir");
    }
    if (rep != NULL) {
        if (replay_setup(r, cfg, rep, err) != SD_OK) {
            return sd_err_prefix(err, "%s: ", what);
        }
        cfg->on_decision = sd_em_sched_decide;
        cfg->decision_ctx = r->sched;
        return SD_OK;
    }
    if (!want_record) {
        return SD_OK;
    }
    /* The option's file, or the server's --record-schedule-dir/<job id>.schedule. */
    char *name = rec == NULL ? sd_asprintf("%s.schedule", r->job_id) : NULL;
    r->record_path = rec != NULL    ? sd_strdup(rec)
                     : name != NULL ? file_in(r->ex->cfg.record_schedule_dir, name)
                                    : NULL;
    sd_free(name);
    return start_recording(r, cfg, err);
}

bool sd__exec_schedule_check_end(sd_exec_run *r)
{
    sd_err err;
    sd_err_clear(&err);
    if (!sd_em_sched_replaying(r->sched)) {
        return true;
    }
    sd_status st = sd_em_sched_finish(r->sched, NULL, &err);
    if (st == SD_OK) {
        return true;
    }
    sd_err_failed(&err, st, "the schedule replay");
    sd__exec_run_fail(r, "%s", sd_err_msg(&err));
    return false;
}

void sd__exec_schedule_close(sd_exec_run *r)
{
    if (r->sched != NULL && r->record_path != NULL) {
        sd_buf text;
        sd_err err;
        sd_buf_init(&text, 0);
        sd_err_clear(&err);
        FILE *f = NULL;
        if (sd_em_sched_finish(r->sched, &text, &err) == SD_OK &&
            (f = fopen(r->record_path, "wb")) != NULL &&
            fwrite(text.data, 1, text.len, f) == text.len && fclose(f) == 0) {
            SD_INFO("exec", "job %s: schedule of %llu steps recorded to %s", r->job_id,
                    (unsigned long long)sd_em_sched_steps(r->sched), r->record_path);
        } else {
            if (f != NULL) {
                fclose(f);
            }
            sd_job_message(r->job, SD_JOB_MSG_WARNING, "could not write the schedule to %s",
                           r->record_path);
        }
        sd_buf_deinit(&text);
    }
    sd_em_sched_destroy(r->sched);
    r->sched = NULL;
    sd_free(r->record_path);
    r->record_path = NULL;
}

sd_status sd__exec_schedule_splits(sd_exec_run *r, sd_exec_inflight *f, sd_err *err)
{
    for (size_t i = 0; i < f->n_asked; i++) {
        sd_em_decision d = { .kind = SD_DECISION_SPLIT,
                             .bundle = sd_em_bundle_id(f->b),
                             .fraction = f->asked[i].fraction,
                             .first_split = f->asked[i].answer,
                             .answer = sd_buf_bytes(&f->asked[i].kept) };
        sd_status rc = sd_em_decide(r->em, &d, err);
        if (rc != SD_OK) {
            return rc;
        }
    }
    return SD_OK;
}
