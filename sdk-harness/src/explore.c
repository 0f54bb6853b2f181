/*
 * Sundial C SDK: schedule exploration (sd_run_options.explore_seeds).
 *
 * Beam promises user code no bundling and no order, and a Sundial runner can make a job run
 * under deliberately different ones: a schedule seed shuffles which ready stage, element and
 * timer goes next, and a bundle shape cuts bundles greedily, one key or one element at a
 * time. Exploration runs the pipeline under seeds 1..K, each with the three shapes (3K runs,
 * seed by seed), every run recording its schedule, and stops at the first run that fails. Its
 * seed, shape and schedule file go into the result and the error message, so an order-
 * dependent bug found once is reproduced for good: run again with
 * sd_run_options.replay_schedule = that file (or with the seed and shape as pipeline
 * options). The files of passing runs are removed; the failing run's is kept.
 *
 * Only a job that FAILED counts as a finding; anything else that stops a run (a runner that
 * cannot be reached, a timeout, a construction error) is returned as it is, and the runs
 * before it are named in the result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "sdk-harness/src/sdk_int.h"

static const char *const shapes[3] = { "greedy", "one_key", "one_element" };

/* "<dir>/<name>-seed<K>-<shape>.schedule", the name's unusual bytes as '_'. Caller frees. */
static char *schedule_path(const sd_run_options *o, const sd_pipeline *p, int seed, int shape)
{
    const char *dir = o->explore_dir;
    if (dir == NULL || dir[0] == '\0') {
        dir = getenv("TMPDIR");
    }
    if (dir == NULL || dir[0] == '\0') {
        dir = "/tmp";
    }
    const char *name = o->job_name != NULL ? o->job_name : sd__pipeline_name(p);
    if (name == NULL || name[0] == '\0') {
        name = "sundial-c";
    }
    size_t dl = strlen(dir);
    char *path = sd_asprintf("%s/%s-seed%d-%s.schedule", dir, name, seed, shapes[shape]);
    for (char *c = path != NULL ? path + dl + 1 : NULL; c != NULL && *c != '\0'; c++) {
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.';
        *c = ok ? *c : '_';
    }
    return path;
}

sd_status
sd__pipeline_explore(sd_pipeline *p, const sd_run_options *opts, sd_run_result *result, sd_err *err)
{
    sd_run_result local;
    sd_run_result *res = result != NULL ? result : &local;
    memset(res, 0, sizeof(*res));
    if (opts->replay_schedule != NULL || opts->record_schedule != NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "sd_run_options: explore_seeds records a schedule per run itself; "
                          "leave record_schedule and replay_schedule NULL");
    }
    if (opts->wall_clock) {
        return sd_err_set(err, SD_EINVAL,
                          "sd_run_options: explore_seeds needs the test-mode clock (wall_clock "
                          "false): on the wall clock a schedule cannot repeat");
    }
    size_t n_user = opts->option_names != NULL && opts->option_values != NULL ? opts->n_options : 0;
    const char **names = sd_calloc(n_user + 2, sizeof(*names));
    const char **values = sd_calloc(n_user + 2, sizeof(*values));
    if (names == NULL || values == NULL) {
        sd_free(names);
        sd_free(values);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    /* The seed and shape go first: the runner reads the first of equal option names. */
    names[0] = "beam:option:sundial_schedule_seed:v1";
    names[1] = "beam:option:sundial_bundle_shape:v1";
    for (size_t i = 0; i < n_user; i++) {
        names[2 + i] = opts->option_names[i];
        values[2 + i] = opts->option_values[i];
    }
    sd_status st = SD_OK;
    for (int seed = 1; seed <= opts->explore_seeds && st == SD_OK; seed++) {
        for (int shape = 0; shape < 3 && st == SD_OK; shape++) {
            char seed_text[24];
            snprintf(seed_text, sizeof(seed_text), "%d", seed);
            values[0] = seed_text;
            values[1] = shapes[shape];
            sd_run_options o = *opts;
            o.explore_seeds = 0;
            o.option_names = names;
            o.option_values = values;
            o.n_options = n_user + 2;
            char *path = schedule_path(opts, p, seed, shape);
            if (path == NULL) {
                st = sd_err_set(err, SD_ENOMEM, "out of memory");
                break;
            }
            o.record_schedule = path;
            sd_run_result_deinit(res);
            sd_err run_err;
            sd_err_clear(&run_err);
            st = sd__pipeline_run_once(p, &o, res, &run_err);
            res->explore_runs = (seed - 1) * 3 + shape + 1;
            if (st == SD_OK) {
                unlink(path);
                sd_free(path);
                continue;
            }
            if (res->state == SD_RUN_FAILED) {
                res->explore_seed = (uint64_t)seed;
                res->explore_shape = shapes[shape];
                res->schedule_file = path;
                sd_err_set(err, st,
                           "schedule exploration: run %d (seed %d, bundle shape %s) failed; its "
                           "schedule is recorded in %s (replay it with "
                           "sd_run_options.replay_schedule): %s",
                           res->explore_runs, seed, shapes[shape], path, sd_err_msg(&run_err));
            } else {
                unlink(path);
                sd_free(path);
                sd_err_set(err, st, "schedule exploration: run %d (seed %d, bundle shape %s): %s",
                           res->explore_runs, seed, shapes[shape], sd_err_msg(&run_err));
            }
        }
    }
    sd_free(names);
    sd_free(values);
    if (result == NULL) {
        sd_run_result_deinit(&local);
    }
    return st;
}
