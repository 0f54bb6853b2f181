/* Sundial: executor internals shared by exec.c and xplan.c (and unit tests). */
#ifndef SD_RUNNER_EXEC_EXEC_INT_H
#define SD_RUNNER_EXEC_EXEC_INT_H

#include "runner/base/err.h"
#include "runner/base/vec.h"
#include "runner/engine/em.h"
#include "runner/exec/exec.h"
#include "runner/plan/plan.h"

/* What the executor needs of one SDK stage, borrowed from the plan. */
typedef struct sd_xsink {
    const char *transform_id;
    const char *pcollection;
} sd_xsink;

typedef struct sd_xtimer {
    const char *transform_id;
    const char *family_id;
} sd_xtimer;

typedef struct sd_xstage {
    const char *id;
    const char *env_id;
    sd_bytes descriptor;
    const char *source_transform; /* NULL when the stage has no main input */
    sd_xsink *sinks;
    size_t n_sinks;
    sd_xtimer *timer_families;
    size_t n_timer_families;
    const sd_plan_stage *ps;
} sd_xstage;

typedef struct sd_xplan {
    const sd_plan *plan;
    sd_xstage *stages; /* SDK stages only */
    size_t n_stages;
    const char **env_ids; /* environments used by SDK stages, sorted */
    size_t n_envs;
} sd_xplan;

/* Index the plan's SDK stages (borrowing from plan, which must outlive xp). */
SD_MUST_CHECK sd_status sd_xplan_from_plan(const sd_plan *plan, sd_xplan *xp, sd_err *err);
void sd_xplan_deinit(sd_xplan *xp);

/* Register every PCollection and stage of the plan with the engine and start it. */
SD_MUST_CHECK sd_status sd_xplan_to_engine(const sd_xplan *xp, sd_em *em, sd_err *err);

/*
 * The value coder of multimap-like user state state_id of ParDo transform_id in stage xs (a
 * MultimapStateSpec's or MapStateSpec's value coder), which the runner needs to count a map
 * key's values when it serves MultimapEntriesUserState. OUT: *out, caller owns; free with
 * sd_coder_destroy(). SD_ENOTFOUND when the stage has no such ParDo or state, SD_EINVAL when
 * the state is of another kind, SD_EUNIMPL when the coder cannot be built (one that builds but
 * whose bytes the runner cannot split, an SDK-specific coder, makes sd_em_user_state_entries
 * fail with SD_EPROTO instead).
 */
SD_MUST_CHECK sd_status sd__xplan_multimap_value_coder(const sd_xplan *xp,
                                                       const sd_xstage *xs,
                                                       const char *transform_id,
                                                       const char *state_id,
                                                       sd_coder **out,
                                                       sd_err *err);

/* One entry of beam:option:direct_test_splits:v1. */
typedef struct split_plan {
    char *stage_id;
    double timings[16];
    double fractions[16];
    size_t n;
    bool used;
} split_plan;

/*
 * Parse {"<transform name>": {"timings": [s...], "fractions": [f...]}, ...} and append one
 * split_plan per named transform found in an SDK stage of xp (matched by transform id or unique
 * name, or a unique name ending in "/<name>"). pipeline supplies unique names. Malformed JSON
 * adds nothing.
 */
void sd__parse_test_splits(const char *json, const sd_xplan *xp,
                           const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *pipeline,
                           sd_vec *out);

/*
 * Test seam (the fuzz targets): start every environment by calling start(ctx, worker_id,
 * env_id, err) instead of spawning a process or asking a worker pool. The worker is still
 * registered with the Fn API under worker_id (with its descriptors) before the call, so the
 * caller can play the SDK through sd__worker_deliver(). An error fails the job as a failed
 * start does. NULL restores the real start. Loop thread; before jobs start.
 */
typedef sd_status (*sd__exec_env_starter)(void *ctx, const char *worker_id, const char *env_id,
                                          sd_err *err);
void sd__exec_set_env_starter(sd_exec *ex, sd__exec_env_starter start, void *ctx);

#endif
