/*
 * Sundial: executor: the pipeline options it reads.
 *
 * Every option the executor looks at is read here, so what a job can ask of the runner is in
 * one table (names as the SDKs send them; sd_job_option_* also accepts the short form):
 *
 *   beam:option:sundial_clock:v1          "wall" | "synthetic"; default: the server's
 *                                         --wall-clock (sd_exec_config.wall_clock)
 *   beam:option:sundial_bundle_shape:v1   greedy | one_key | one_element (schedule
 *                                         exploration); anything else fails the job
 *   beam:option:sundial_schedule_seed:v1  shuffles the engine's choices (0 = none)
 *   beam:option:sundial_record_schedule:v1 FILE: record the run's schedule there (read by
 *                                         exec_schedule.c, with the server's flags)
 *   beam:option:sundial_replay_schedule:v1 FILE: replay that schedule (exec_schedule.c)
 *   beam:option:sundial_livelock_rounds:v1 SDK bundles in a row without progress before the
 *                                         job fails as live-locked (0 = never); default: the
 *                                         server's --livelock-rounds (sd_exec_config)
 *   beam:option:sundial_memory_limit:v1   the job's memory budget: a size (4096, 512MiB, 2G;
 *                                         0 = none); default: the server's --memory_limit
 *   beam:option:sundial_spill_dir:v1      DIR: where that job spills; default: the server's
 *                                         --spill_dir, else $TMPDIR, else /tmp
 *   beam:option:streaming:v1              streaming trigger evaluation over bounded sources
 *   beam:option:sundial_lift_combiners:v1 false runs combines unlifted; true also lifts what
 *                                         a known SDK defect would make wrong
 *   beam:option:direct_test_splits:v1     runner-initiated splits at given times (parsed by
 *                                         sd__exec_parse_test_splits, xplan.c)
 *   beam:option:sundial_embed_input:v1    false sends every bundle's input over the data
 *                                         stream, even to workers that take it embedded in
 *                                         the ProcessBundleRequest; default true
 *   beam:option:sundial_cache_tokens:v1   false sends no user-state cache token (the SDK then
 *                                         keeps no user state from one bundle to the next);
 *                                         default true
 *
 * The engine runs bounded (the batch watermark model) when the plan has no TestStream and
 * every PCollection is bounded; that is the plan's to say, not an option, but it is decided
 * here with the rest of the engine's configuration.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/exec/exec_int.h"

bool sd__exec_synthetic_clock(const sd_exec *ex, const sd_job *job)
{
    const char *clock = sd_job_option_string(job, "beam:option:sundial_clock:v1");
    if (clock != NULL && strcmp(clock, "wall") == 0) {
        return false;
    }
    if (clock != NULL && strcmp(clock, "synthetic") == 0) {
        return true;
    }
    return !ex->cfg.wall_clock;
}

bool sd__exec_embed_input(const sd_exec_run *r)
{
    return sd_job_option_bool(r->job, "sundial_embed_input", true);
}

bool sd__exec_cache_tokens(const sd_exec_run *r)
{
    return sd_job_option_bool(r->job, "sundial_cache_tokens", true);
}

/*
 * The live-lock bound (sd_em_check_livelock): the job's beam:option:sundial_livelock_rounds:v1
 * (a number or a numeric string; 0 = never), else the server's. Anything else fails the job:
 * a typo must not silently leave a spinning job running.
 */
static sd_status livelock_rounds(const sd_exec_run *r, uint64_t *out, sd_err *err)
{
    const Google__Protobuf__Value *v = sd_job_option(r->job, "sundial_livelock_rounds");
    int64_t n = r->ex->cfg.livelock_rounds;
    if (v != NULL && v->kind_case != GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE) {
        if (!sd_job_option_int(r->job, "sundial_livelock_rounds", &n) || n < 0) {
            const char *got = sd_job_option_string(r->job, "sundial_livelock_rounds");
            return sd_err_set(err, SD_EINVAL,
                              "pipeline option beam:option:sundial_livelock_rounds:v1: expected "
                              "a number of bundles >= 0 (0 = never), got %s%s%s",
                              got != NULL ? "\"" : "", got != NULL ? got : "a non-integer",
                              got != NULL ? "\"" : "");
        }
        *out = (uint64_t)n; /* 0: the engine does not check */
        return SD_OK;
    }
    *out = n == 0 ? SD_EM_LIVELOCK_ROUNDS_DEFAULT : n < 0 ? 0 : (uint64_t)n;
    return SD_OK;
}

/*
 * The job's trace cap (sd_em_config.trace_cap): beam:option:sundial_trace_cap:v1 (records, at
 * least 2), else the engine's default on the synthetic clock, sized for test jobs, and
 * SD_EXEC_TRACE_CAP_WALL on the wall clock: a job in production mode records about a thousand
 * records a second under load, and would otherwise grow by the default's 10 MB over its first
 * minutes (its trace then holds its start, then the cut mark).
 */
#define SD_EXEC_TRACE_CAP_WALL 20000

static sd_status trace_cap(const sd_exec_run *r, sd_em_config *cfg, sd_err *err)
{
    const Google__Protobuf__Value *v = sd_job_option(r->job, "sundial_trace_cap");
    int64_t n = 0;
    if (v == NULL || v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE) {
        cfg->trace_cap = cfg->clock == SD_CLOCK_WALL ? SD_EXEC_TRACE_CAP_WALL : 0;
        return SD_OK;
    }
    if (!sd_job_option_int(r->job, "sundial_trace_cap", &n) || n < 2 ||
        (uint64_t)n > SD_EM_TRACE_CAP_MAX) {
        const char *got = sd_job_option_string(r->job, "sundial_trace_cap");
        return sd_err_set(err, SD_EINVAL,
                          "pipeline option beam:option:sundial_trace_cap:v1: expected a number "
                          "of records from 2 to %llu, got %s%s%s",
                          (unsigned long long)SD_EM_TRACE_CAP_MAX, got != NULL ? "\"" : "",
                          got != NULL ? got : "a non-integer", got != NULL ? "\"" : "");
    }
    cfg->trace_cap = (size_t)n;
    return SD_OK;
}

/* The job's memory budget (sd_em_config.memory_limit): its option, else the server's. A
 * number is read from its JSON text ("268435456"), as a string would be. */
static sd_status memory_limit(const sd_exec_run *r, size_t *out, sd_err *err)
{
    const char *opt = "sundial_memory_limit";
    const Google__Protobuf__Value *v = sd_job_option(r->job, opt);
    uint64_t n;
    if (v == NULL || v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE) {
        *out = r->ex->cfg.memory_limit < 0 ? 0 : (size_t)r->ex->cfg.memory_limit;
        return SD_OK;
    }
    const char *s = sd_job_option_string(r->job, opt);
    if (s == NULL || !sd_size_parse(s, &n)) {
        return sd_err_set(err, SD_EINVAL,
                          "pipeline option beam:option:sundial_memory_limit:v1: expected a size "
                          "in bytes (such as 268435456, 512MiB or 2G; 0 = no limit), got \"%s\"",
                          s != NULL ? s : "?");
    }
    *out = n > SIZE_MAX ? SIZE_MAX : (size_t)n;
    return SD_OK;
}

sd_status sd__exec_engine_config(const sd_exec_run *r, sd_em_config *cfg, sd_err *err)
{
    cfg->clock = sd__exec_synthetic_clock(r->ex, r->job) ? SD_CLOCK_SYNTHETIC : SD_CLOCK_WALL;
    cfg->max_bundle_bytes = r->ex->cfg.max_bundle_bytes;
    /* Schedule exploration: beam:option:sundial_bundle_shape:v1 (greedy | one_key |
     * one_element) and beam:option:sundial_schedule_seed:v1 (0 = no shuffling). */
    const char *shape = sd_job_option_string(r->job, "sundial_bundle_shape");
    if (shape != NULL && shape[0] != '\0') {
        if (strcmp(shape, "greedy") == 0) {
            cfg->bundle_shape = SD_SHAPE_GREEDY;
        } else if (strcmp(shape, "one_key") == 0) {
            cfg->bundle_shape = SD_SHAPE_ONE_KEY;
        } else if (strcmp(shape, "one_element") == 0) {
            cfg->bundle_shape = SD_SHAPE_ONE_ELEMENT;
        } else {
            return sd_err_set(err, SD_EINVAL,
                              "pipeline option beam:option:sundial_bundle_shape:v1: expected "
                              "greedy, one_key or one_element, got \"%s\"",
                              shape);
        }
    }
    int64_t seed = 0;
    if (sd_job_option_int(r->job, "sundial_schedule_seed", &seed)) {
        cfg->schedule_seed = (uint64_t)seed;
    }
    sd_status rc = livelock_rounds(r, &cfg->livelock_rounds, err);
    if (rc == SD_OK) {
        rc = memory_limit(r, &cfg->memory_limit, err);
    }
    if (rc == SD_OK) {
        rc = trace_cap(r, cfg, err);
    }
    if (rc != SD_OK) {
        return rc;
    }
    const char *spill_dir = sd_job_option_string(r->job, "sundial_spill_dir");
    cfg->spill_dir = spill_dir != NULL && spill_dir[0] != '\0' ? spill_dir : r->ex->cfg.spill_dir;
    cfg->bounded = r->plan->teststream_stage == SD_PLAN_NONE;
    for (size_t i = 0; i < r->plan->n_pcollections; i++) {
        if (!r->plan->pcollections[i].bounded) {
            cfg->bounded = false;
        }
    }
    /* Beam's --streaming (the SDKs send beam:option:streaming:v1) asks for streaming trigger
     * evaluation even over bounded sources; the watermark model stays the batch one there. */
    cfg->streaming = !cfg->bounded || sd_job_option_bool(r->job, "streaming", false);
    return SD_OK;
}

void sd__exec_plan_options(const sd_job *job, sd_plan_options *popt)
{
    /* beam:option:sundial_lift_combiners:v1 = false runs combines unlifted (one reason: the
     * TypeScript SDK 2.49.0 truncates varint accumulators to 32 bits when they are encoded). */
    popt->lift_combiners = sd_job_option_bool(job, "sundial_lift_combiners", true);
    /* Asked for explicitly (true): lift also what a known SDK defect would make wrong. */
    popt->force_lift = sd_job_option_string(job, "sundial_lift_combiners") != NULL &&
                       sd_job_option_bool(job, "sundial_lift_combiners", false);
}

/*
 * beam:option:sundial_sdf_checkpoint_ms:v1 (see exec_progress.c): default
 * SD_EXEC_CHECKPOINT_MS, 0 = never; anything but milliseconds >= 0 keeps the default, with a
 * warning in the job's messages.
 */
static void read_checkpoint_ms(sd_exec_run *r)
{
    int64_t ms = 0;
    bool parsed = sd_job_option_int(r->job, "sundial_sdf_checkpoint_ms", &ms);
    r->checkpoint_ms = parsed && ms >= 0 ? ms : SD_EXEC_CHECKPOINT_MS;
    if (!(parsed && ms >= 0) &&
        (parsed || sd_job_option_string(r->job, "sundial_sdf_checkpoint_ms") != NULL)) {
        sd_job_message(r->job, SD_JOB_MSG_WARNING,
                       "pipeline option beam:option:sundial_sdf_checkpoint_ms:v1: expected "
                       "milliseconds >= 0 (0 = never); using %d",
                       SD_EXEC_CHECKPOINT_MS);
    }
}

/* The runner's split and checkpoint requests: sundial_sdf_checkpoint_ms, and
 * beam:option:direct_test_splits:v1 = {"name": {"timings": [..], "fractions": [..]}}. */
void sd__exec_read_test_splits(sd_exec_run *r)
{
    read_checkpoint_ms(r);
    const char *json = sd_job_option_string(r->job, "beam:option:direct_test_splits:v1");
    if (json == NULL || json[0] == '\0') {
        return;
    }
    sd__exec_parse_test_splits(json, &r->xp, sd_job_pipeline(r->job), &r->splits);
}

/* Does `name` (one entry of the option's list) name transform unique name u or a composite
 * around it ("Sum" names "Sum" and "Sum/GroupByKey", not "Summary")? */
static bool names_transform(const char *name, size_t len, const char *u)
{
    return u != NULL && strncmp(u, name, len) == 0 && (u[len] == '\0' || u[len] == '/');
}

typedef Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor pb_descriptor;

static const SD_PL(PTransform) * descriptor_transform(const pb_descriptor *pbd, const char *id)
{
    for (size_t i = 0; pbd != NULL && i < pbd->n_transforms; i++) {
        if (strcmp(pbd->transforms[i]->key, id) == 0) {
            return pbd->transforms[i]->value;
        }
    }
    return NULL;
}

static bool in_set(const sd_map *set, const char *id)
{
    return sd_map_has(set, sd_bytes_str(id));
}

static sd_status add_outputs(sd_map *set, const SD_PL(PTransform) * t)
{
    sd_status st = SD_OK;
    for (size_t o = 0; o < t->n_outputs && st == SD_OK; o++) {
        st = sd_map_put(set, sd_bytes_str(t->outputs[o]->value), (void *)1);
    }
    return st;
}

/*
 * A transform the policy names that is fused after the producer of its input (a splittable
 * source's records windowed in the source's own stage) never sees its elements enter a stage:
 * the stage outputs downstream of it get the policy on output instead
 * (sd_em_set_drop_behind_watermark_output), so an element behind the producer's watermark is
 * dropped whole there, as it would be at the entry of a stage of its own.
 */
static sd_status late_outputs(sd_exec_run *r, const sd_plan_stage *ps, const char *name, size_t len)
{
    const pb_descriptor *pbd = ps->descriptor;
    if (ps->kind != SD_PLAN_STAGE_SDK || pbd == NULL) {
        return SD_OK;
    }
    sd_map produced, fed; /* PCollection ids made in the stage; those downstream of a hit */
    sd_map_init(&produced, NULL);
    sd_map_init(&fed, NULL);
    sd_status st = SD_OK;
    for (size_t k = 0; k < ps->n_transforms && st == SD_OK; k++) {
        const SD_PL(PTransform) *t = descriptor_transform(pbd, ps->transforms[k]);
        if (t == NULL) {
            continue;
        }
        bool internal = false, downstream = false;
        for (size_t i = 0; i < t->n_inputs; i++) {
            internal = internal || in_set(&produced, t->inputs[i]->value);
            downstream = downstream || in_set(&fed, t->inputs[i]->value);
        }
        if (downstream ||
            (internal &&
             names_transform(name, len, sd__exec_transform_name(r, ps->transforms[k])))) {
            st = add_outputs(&fed, t);
        }
        if (st == SD_OK) {
            st = add_outputs(&produced, t);
        }
    }
    for (size_t o = 0; o < ps->n_outputs && st == SD_OK; o++) {
        const char *pc = ps->outputs[o].pcollection;
        bool listed = false;
        for (size_t i = 0; i < r->xp.n_drop_late_out; i++) {
            listed = listed || strcmp(r->xp.drop_late_out[i], pc) == 0;
        }
        if (listed || !in_set(&fed, pc)) {
            continue;
        }
        const char **grown =
            sd_realloc(r->xp.drop_late_out, (r->xp.n_drop_late_out + 1) * sizeof(char *));
        if (grown == NULL) {
            st = SD_ENOMEM;
            break;
        }
        r->xp.drop_late_out = grown;
        r->xp.drop_late_out[r->xp.n_drop_late_out++] = pc;
    }
    sd_map_deinit(&produced);
    sd_map_deinit(&fed);
    return st;
}

/*
 * beam:option:sundial_drop_late_elements:v1 = "Name, Other/Name": the per-element late policy
 * (sd_em_set_drop_behind_watermark: an element behind its input's watermark on arrival is
 * dropped and counted, even while its window is open) for every stage that runs a transform
 * so named, or one inside a composite so named; elements are checked where they enter that
 * stage, or, for a transform fused after the producer of its input, where its elements leave
 * the stage (late_outputs). The C SDK sets it for sd_windowfn.drop_late_elements. A name that
 * matches no
 * transform fails the job, naming it.
 */
sd_status sd__exec_late_policy(sd_exec_run *r, sd_err *err)
{
    const char *list = sd_job_option_string(r->job, "sundial_drop_late_elements");
    if (list == NULL || list[0] == '\0') {
        return SD_OK;
    }
    const sd_plan *plan = r->plan;
    r->xp.drop_late = sd_calloc(plan->n_stages + 1, sizeof(char *));
    if (r->xp.drop_late == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (const char *p = list; *p != '\0';) {
        while (*p == ' ' || *p == ',') {
            p++;
        }
        size_t len = strcspn(p, ",");
        while (len > 0 && p[len - 1] == ' ') {
            len--;
        }
        if (len == 0) {
            break;
        }
        bool found = false;
        for (size_t s = 0; s < plan->n_stages; s++) {
            const sd_plan_stage *ps = &plan->stages[s];
            bool hit = false;
            for (size_t k = 0; k < ps->n_transforms && !hit; k++) {
                hit = names_transform(p, len, sd__exec_transform_name(r, ps->transforms[k]));
            }
            if (!hit) {
                continue;
            }
            if (ps->kind == SD_PLAN_STAGE_IMPULSE || ps->kind == SD_PLAN_STAGE_TESTSTREAM) {
                return sd_err_set(err, SD_EINVAL,
                                  "pipeline option beam:option:sundial_drop_late_elements:v1: "
                                  "\"%.*s\" is a source; name the transform that reads it",
                                  (int)len, p);
            }
            found = true;
            bool listed = false;
            for (size_t i = 0; i < r->xp.n_drop_late; i++) {
                listed = listed || strcmp(r->xp.drop_late[i], ps->id) == 0;
            }
            if (!listed) {
                r->xp.drop_late[r->xp.n_drop_late++] = ps->id;
            }
            if (late_outputs(r, ps, p, len) != SD_OK) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
        }
        if (!found) {
            return sd_err_set(err, SD_EINVAL,
                              "pipeline option beam:option:sundial_drop_late_elements:v1: no "
                              "transform named \"%.*s\" (expected comma-separated unique names "
                              "of transforms or composites)",
                              (int)len, p);
        }
        p += strcspn(p, ",");
    }
    return SD_OK;
}
