/*
 * Sundial tests: the planner tests' shared harness (test_plan_harness.c).
 *
 * test_plan is one executable built from test_plan.c (main, end-to-end shapes, the LP rule,
 * the TypeScript fixtures), test_plan_windowing.c, test_plan_graph.c and
 * test_plan_validate.c; each file's tests stay static and run as one cmocka group through its
 * test_plan_run_* function. Everything here allocates with sd_malloc, so the OOM loop counts
 * the builder's allocations out (tb_finish frees them before the planner runs).
 */
#ifndef SD_TESTS_UNIT_TEST_PLAN_HARNESS_H
#define SD_TESTS_UNIT_TEST_PLAN_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "org/apache/beam/model/fn_execution/v1/beam_fn_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/beam_runner_api.pb-c.h"
#include "runner/plan/plan.h"

typedef Org__Apache__Beam__Model__Pipeline__V1__Pipeline pb_pipeline;
typedef Org__Apache__Beam__Model__Pipeline__V1__Components pb_components;
typedef Org__Apache__Beam__Model__Pipeline__V1__PTransform pb_transform;
typedef Org__Apache__Beam__Model__Pipeline__V1__PCollection pb_pcoll;
typedef Org__Apache__Beam__Model__Pipeline__V1__Coder pb_coder;
typedef Org__Apache__Beam__Model__Pipeline__V1__WindowingStrategy pb_wstrat;
typedef Org__Apache__Beam__Model__Pipeline__V1__Environment pb_env;
typedef Org__Apache__Beam__Model__Pipeline__V1__FunctionSpec pb_spec;
typedef Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload pb_pardo;
typedef Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor pb_pbd;

#define GEN     "beam:coder:genericobjectjs:v1"
#define JS_DOFN "beam:dofn:serialized_js_dofn_info:v1"

/* ----------------------------------------------------------------------------------------- */
/* Pipeline builder                                                                           */
/* ----------------------------------------------------------------------------------------- */

/* A pipeline under construction: every piece is allocated in allocs, freed by tb_finish. */
typedef struct tb {
    void **allocs;
    size_t n_allocs;
    size_t cap;
    pb_components comps;
    pb_pipeline pipe;
} tb;

typedef struct pardo_opts {
    const char *sides; /* "local:iterable,local2:multimap" */
    const char *state; /* bag state element coder id, or NULL */
    const char *timer_coder;
    const char *restriction_coder;
    bool time_sorted; /* requires_time_sorted_input */
} pardo_opts;

/* An empty payload. */
extern const ProtobufCBinaryData NO_PAYLOAD;

/* Plan options of most tests: data and state URLs, combiner lifting on. */
extern const sd_plan_options OPTS;

/* n zeroed bytes owned by b (freed by tb_finish); never NULL. */
void *tb_alloc(tb *b, size_t n);

/* A copy of s owned by b. */
char *tb_str(tb *b, const char *s);

/* Append item to a protobuf-c pointer array. */
void tb_push(tb *b, void ***arr, size_t *n, void *item);

/* An empty pipeline with empty components. */
void tb_init(tb *b);

/* A FunctionSpec {urn, payload}. */
pb_spec *tb_spec(tb *b, const char *urn, ProtobufCBinaryData payload);

/* comps: comma-separated component ids ("" for none). */
pb_coder *tb_coder(tb *b, const char *id, const char *urn, const char *comps);

/* Add PCollection id (coder, windowing strategy ws; bounded). */
pb_pcoll *tb_pcoll(tb *b, const char *id, const char *coder, const char *ws);

/* Add windowing strategy id with window fn fn_urn(fn_payload) and window_coder. */
pb_wstrat *tb_ws(tb *b,
                 const char *id,
                 const char *fn_urn,
                 ProtobufCBinaryData fn_payload,
                 const char *window_coder);

/* Add environment id with urn. */
pb_env *tb_env(tb *b, const char *id, const char *urn);

/* "k=v,k2=v2" into a string map (inputs or outputs; same layout). */
void tb_map(tb *b, void ***arr, size_t *n, const char *spec, bool inputs);

/*
 * Add transform id: urn (NULL: a composite without spec), payload, env, inputs and outputs as
 * "local=pcoll,..." and subs as "id,..." (NULL: none).
 */
pb_transform *tb_transform(tb *b,
                           const char *id,
                           const char *urn,
                           ProtobufCBinaryData payload,
                           const char *env,
                           const char *inputs,
                           const char *outputs,
                           const char *subs);

/* List id among the root transforms. */
void tb_root(tb *b, const char *id);

/* Add a pipeline requirement. */
void tb_require(tb *b, const char *urn);

/* m packed into bytes owned by b. */
ProtobufCBinaryData tb_pack(tb *b, const ProtobufCMessage *m);

/* A ParDoPayload (TypeScript DoFn) with the side inputs, state, timers and SDF parts of o. */
ProtobufCBinaryData tb_pardo(tb *b, pardo_opts o);

/* A CombinePayload with accumulator coder acc. */
ProtobufCBinaryData tb_combine(tb *b, const char *acc);

/* Window fn payloads: fixed, sliding and session windows. */
ProtobufCBinaryData tb_fixed(tb *b, int64_t size_ms, int64_t offset_ms);

ProtobufCBinaryData tb_sliding(tb *b, int64_t size_ms, int64_t period_ms);

ProtobufCBinaryData tb_sessions(tb *b, int64_t gap_ms);

/* Standard pieces most tests share: coders, global windowing, an external environment. */
void tb_std(tb *b);

/* Pack and unpack (system allocator: unaffected by allocation failure injection). */
pb_pipeline *tb_finish(tb *b);

/* Free a pipeline of tb_finish or load_fixture. */
void free_pipeline(pb_pipeline *p);

/* Build with opt; fails the test unless it succeeds with every plan invariant holding. */
sd_plan *build_ok(const pb_pipeline *p, const sd_plan_options *opt);

/* The stage holding transform tid (fails the test when none does). */
const sd_plan_stage *stage_with(const sd_plan *plan, const char *tid);

/* The index of stage s in plan->stages. */
size_t stage_index(const sd_plan *plan, const sd_plan_stage *s);

/* Entries of a ProcessBundleDescriptor by id; NULL when absent. */
const pb_transform *desc_transform(const pb_pbd *d, const char *id);

const pb_pcoll *desc_pcoll(const pb_pbd *d, const char *id);

const pb_coder *desc_coder(const pb_pbd *d, const char *id);

/* The descriptor's coder id must have this URN and these components ("a,b"). */
void assert_desc_coder(const pb_pbd *d, const char *id, const char *urn, const char *comps);

/* The coder id of a source/sink port transform (a static buffer); checks the data URL. */
const char *port_coder_of(const pb_transform *t);

/*
 * The TypeScript word-count shape: impulse -> create (flatMap) -> split -> pair (KV) ->
 * combine_per_key composite [gbk, combine map] -> format.
 */
pb_pipeline *wordcount(void);

/*
 * Validation and build both fail with code and the same message, which contains every needle
 * (a NULL-terminated list); build leaves the plan NULL.
 */
void expect_rejected(pb_pipeline *p, sd_status code, const char *const *needles);

/*
 * A TestStream as Python submits it: the payload's coder is FastPrimitivesCoder ("fast",
 * pickled_python), in which the elements arrive, while the main output has the element type's
 * coder kv(dfast, fast) (DeterministicFastPrimitivesCoder keys: other bytes than fast's), and
 * feeds a stateful ParDo, a GroupByKey, a plain ParDo and a side input. The late output keeps
 * the payload's coder and is read by a plain ParDo.
 */
pb_pipeline *py_teststream(const char *payload_coder, const char *late_coder);

/* A TypeScript SDK pipeline fixture (tests/data/plan/<name>, unpacked with the system
 * allocator); NULL when the file is absent. */
pb_pipeline *load_fixture(const char *name);

/* ----------------------------------------------------------------------------------------- */
/* The case driver                                                                            */
/* ----------------------------------------------------------------------------------------- */

/* The head every row of a run_plan_cases table starts with. */
typedef struct plan_case {
    const char *name;   /* printed before the row runs */
    const char *needle; /* NULL: the pipeline must plan; else a fragment of its rejection */
} plan_case;

/*
 * The one driver of the table-driven planner tests: for each of n_rows rows (row_size bytes
 * apart, each starting with a plan_case), build its pipeline, then either expect it rejected
 * with reject_code and a message containing the row's needle, or plan it (build_ok) and hand
 * the plan (and its pipeline) to check (may be NULL). Frees the plan and the pipeline.
 */
void run_plan_cases(const void *rows,
                    size_t n_rows,
                    size_t row_size,
                    pb_pipeline *(*build)(const void *row),
                    sd_status reject_code,
                    void (*check)(const sd_plan *plan, const pb_pipeline *p, const void *row));

#define RUN_PLAN_CASES(rows, build, reject_code, check)                                  \
    run_plan_cases((rows), sizeof(rows) / sizeof((rows)[0]), sizeof((rows)[0]), (build), \
                   (reject_code), (check))

/* ----------------------------------------------------------------------------------------- */
/* The groups (one per file); each returns the number of failed tests                          */
/* ----------------------------------------------------------------------------------------- */

int test_plan_run_windowing(void);
int test_plan_run_graph(void);
int test_plan_run_fusion(void);
int test_plan_run_validate(void);

#endif
