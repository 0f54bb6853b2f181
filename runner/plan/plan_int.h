/*
 * Sundial: planner internals, shared by the planner sources and its unit tests only.
 *
 * The planner works on a build context (pl_ctx) in phases:
 *   index    maps from component ids to the pipeline's (borrowed) messages (graph.c);
 *   expand   composites into leaf nodes (pl_node), lifting combines (lift.c), expanding SDFs
 *            and checking ParDos (pardo.c) and recording Reshuffle aliases (graph.c);
 *   finish   resolve aliases, classify main and side inputs, check references (graph.c),
 *            then reroute TestStream outputs and Flatten inputs (rewrite.c);
 *   topo     deterministic topological order (cycle check; topo.c);
 *   fuse     greedy fusion into pl_stage;
 *   assemble the public sd_plan (tables, stages, descriptors) in the plan's own arena.
 * Validation is the first four phases; problems are collected, never fatal, until the end.
 */
#ifndef SD_RUNNER_PLAN_PLAN_INT_H
#define SD_RUNNER_PLAN_PLAN_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "org/apache/beam/model/fn_execution/v1/beam_fn_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/beam_runner_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/arena.h"
#include "runner/base/buf.h"
#include "runner/base/map.h"
#include "runner/base/vec.h"
#include "runner/plan/plan.h"

/* Short names for the generated types (module-internal only). */
typedef Org__Apache__Beam__Model__Pipeline__V1__Pipeline pb_pipeline;
typedef Org__Apache__Beam__Model__Pipeline__V1__Components pb_components;
typedef Org__Apache__Beam__Model__Pipeline__V1__PTransform pb_transform;
typedef Org__Apache__Beam__Model__Pipeline__V1__PTransform__InputsEntry pb_io_entry;
typedef Org__Apache__Beam__Model__Pipeline__V1__PTransform__OutputsEntry pb_out_entry;
typedef Org__Apache__Beam__Model__Pipeline__V1__PCollection pb_pcoll;
typedef Org__Apache__Beam__Model__Pipeline__V1__Coder pb_coder;
typedef Org__Apache__Beam__Model__Pipeline__V1__WindowingStrategy pb_wstrat;
typedef Org__Apache__Beam__Model__Pipeline__V1__Environment pb_env;
typedef Org__Apache__Beam__Model__Pipeline__V1__DockerPayload pb_docker;
typedef Org__Apache__Beam__Model__Pipeline__V1__FunctionSpec pb_spec;
typedef Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload pb_pardo;
typedef Org__Apache__Beam__Model__Pipeline__V1__CombinePayload pb_combine;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload pb_teststream;
typedef Org__Apache__Beam__Model__Pipeline__V1__Trigger pb_trigger;
typedef Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor pb_pbd;

/* ----------------------------------------------------------------------------------------- */
/* Arena: bump allocation in sd_malloc'd blocks, freed all at once.                          */
/* ----------------------------------------------------------------------------------------- */

/* The planner's arenas are base arenas (runner/base/arena.h). */
/* A protobuf-c allocator that allocates from a (free is a no-op). */
ProtobufCAllocator sd__plan_arena_pb(sd_arena *a);

/* ----------------------------------------------------------------------------------------- */
/* Build context                                                                              */
/* ----------------------------------------------------------------------------------------- */

typedef struct pl_io {
    const char *local;
    const char *pcoll;
} pl_io;

typedef enum pl_kind { PL_SDK = 0, PL_IMPULSE, PL_GBK, PL_FLATTEN, PL_TESTSTREAM } pl_kind;

typedef struct pl_side {
    const char *local;
    const char *pcoll;
    sd_plan_side_access access;
    const char *mapping;
} pl_side;

typedef struct pl_timer {
    const char *family;
    sd_plan_time_domain domain;
    const char *coder; /* as in the pipeline; the wire form is chosen at assembly */
} pl_timer;

typedef struct pl_node {
    const char *id;
    pl_kind kind;
    const char *urn;
    const char *env;
    pb_transform *msg; /* for descriptors: the original (never written) or a scratch copy */
    size_t n_inputs;
    pl_io *inputs; /* sorted by local name, after alias resolution */
    size_t n_outputs;
    pl_io *outputs; /* sorted by local name */
    const char *main_input;
    size_t n_sides;
    pl_side *sides;
    pb_pardo *pardo;       /* decoded ParDoPayload when the node runs a DoFn with it */
    const char *acc_coder; /* combine components: accumulator coder id */
    pb_teststream *teststream;
    /* TestStream with outputs that rewrite.c rerouted through SDK transcoders: the coder its
     * elements are stored in (teststream_stored_coder); NULL: W(payload coder). */
    const char *teststream_raw_coder;
    size_t n_timers;
    pl_timer *timers;
    bool forced_root;
    bool after_reshuffle; /* its main input is an elided Reshuffle's output */
    bool stateful;
    bool splittable;
    bool finalization;
    bool time_sorted; /* ParDoPayload.requires_time_sorted_input (a stateful ParDo) */
    bool window_expiration;
    const char *expiration_family; /* ParDoPayload.on_window_expiration_timer_family_spec */
    size_t stage;
} pl_node;

typedef struct pl_stage {
    sd_plan_stage_kind kind;
    const char *env;
    sd_vec members; /* size_t node indexes, topological order */
    sd_vec deps;    /* size_t stage indexes (may repeat) */
    const char *main_input;
} pl_stage;

typedef struct pl_ctx {
    const pb_pipeline *p;
    sd_plan_options opt;
    sd_arena scratch; /* lives for one call */
    sd_arena *out;    /* the plan's arena (NULL while only validating) */

    /* Component indexes: id -> borrowed message from the pipeline. */
    sd_map transforms, pcolls, coders, wstrats, envs;
    /* Synthesized components: id -> scratch message. */
    sd_map new_coders, new_pcolls;
    /* Ids of every transform, original or synthesized (for unique naming). */
    sd_map transform_ids;
    /* Reshuffle elision: output PCollection -> input PCollection. */
    sd_map alias;
    /* The aliases whose consumers may fuse with the input's producer (no fusion break): a
     * Python Create's own Reshuffle and every Impulse after the first (graph.c). */
    sd_map fuse_alias;
    const char *first_impulse; /* the output of the first Impulse expanded, NULL before */
    /* Fusion: PCollection -> (index + 1) of the stage that reads it as its main input from a
     * runner stage, which later readers of it may join (fuse.c). */
    sd_map sibling_stage;
    /* Dedupe of checks and problems: "c:<coder>", "w:<ws>", "e:<env>", ... */
    sd_map seen;
    /* Composite expansion: in progress / done. */
    sd_map visiting, expanded;
    /* Windowing strategies used by the graph. */
    sd_map used_ws;

    sd_vec nodes;      /* pl_node */
    sd_map node_index; /* node id -> (index + 1) */
    sd_map producer;   /* pcoll id -> (node index + 1) */
    size_t *topo;      /* node indexes in topological order (scratch) */
    size_t n_topo;
    sd_vec stages; /* pl_stage */

    /* LP rule memo: coder id -> wire coder id; "elem\x1fwin" -> port coder id. */
    sd_map wire, port;
    /* PCollection table under construction: pcoll id -> wire coder id. */
    sd_map boundary;
    /* Once stages are fixed: pcoll id -> pl_span (scratch), the lowest and highest stage
     * index of a node consuming it (see fuse.c, consumed_outside). */
    sd_map consumers;
    /* GroupByKeys over custom merging window fns (merge.c): requests PCollection -> results
     * PCollection, and the results PCollections (kept as merge-stage outputs). */
    sd_map merge_pairs, merge_results;

    sd_buf problems; /* one problem per line */
    size_t n_problems;
    bool malformed;
    size_t n_teststreams;
} pl_ctx;

#define PL_TRY(expr)                  \
    do {                              \
        sd_status pl_try_s_ = (expr); \
        if (pl_try_s_ != SD_OK)       \
            return pl_try_s_;         \
    } while (0)

/* Map values for "present" when only the key matters. */
#define PL_PRESENT ((void *)1)

/* --- plan.c ------------------------------------------------------------------------------- */

/*
 * Record one problem (a sentence without a trailing period). malformed selects SD_EINVAL over
 * SD_EUNIMPL for the final status. Returns SD_OK or SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd__plan_problem(pl_ctx *c, bool malformed, const char *fmt, ...)
    SD_PRINTF(3, 4);
/* "transform \"id\" (\"unique name\")" or "transform \"id\"" in scratch; NULL on OOM. */
const char *sd__plan_tname(pl_ctx *c, const char *tid);
/* Is env_id an environment of the Beam TypeScript SDK (lift.c; by its capabilities)? */
bool sd__plan_env_is_typescript(const pl_ctx *c, const char *env_id);
/* Does any environment of the pipeline belong to Beam's Go SDK (lift.c; by its capabilities)? */
bool sd__plan_has_go_env(const pl_ctx *c);
/* strcmp for qsort over const char * elements. */
int sd__plan_strptr_cmp(const void *a, const void *b);

/* Node i of c->nodes. Nodes live by value in a vector: hold indexes across pushes, never this
 * pointer. */
static inline pl_node *sd__plan_node(const pl_ctx *c, size_t i)
{
    return SD_VEC_AT(&c->nodes, pl_node, i);
}

/* --- graph.c ------------------------------------------------------------------------------ */

/* Index, expand, finish and sort (the validation phases). Problems go to c->problems. */
SD_MUST_CHECK sd_status sd__plan_analyze(pl_ctx *c);
/* The pipeline's or a synthesized PCollection; NULL when absent. */
const pb_pcoll *sd__plan_pcoll_get(const pl_ctx *c, const char *id);
/* Producer node of a PCollection or NULL. */
pl_node *sd__plan_producer(const pl_ctx *c, const char *pcoll);
/* A fresh id "<base>", else "<base>_2", "<base>_3", ... not present in map; in scratch. */
const char *
sd__plan_unique_id(pl_ctx *c, const sd_map *taken, const sd_map *taken2, const char *base);

/* A synthesized PTransform (scratch) with the given spec, environment and maps; NULL on OOM. */
pb_transform *sd__plan_synth_transform(pl_ctx *c,
                                       const char *id,
                                       const char *urn,
                                       ProtobufCBinaryData payload,
                                       const char *env,
                                       size_t n_in,
                                       const pl_io *in,
                                       size_t n_out,
                                       const pl_io *out);

/* Add a node for transform message t (kind, env as given; inputs and outputs copied sorted).
 * OUT: idx. */
SD_MUST_CHECK sd_status sd__plan_add_node(pl_ctx *c,
                                          const char *id,
                                          pl_kind kind,
                                          const char *env,
                                          pb_transform *t,
                                          size_t *idx);
/* A synthesized PCollection like `like` (windowing, boundedness) with coder. OUT: id. */
SD_MUST_CHECK sd_status sd__plan_new_pcoll(pl_ctx *c,
                                           const char *base,
                                           const char *coder,
                                           const pb_pcoll *like,
                                           const char **id);
/* A fresh transform id "<tid>/<suffix>" (made unique); in scratch, NULL on OOM. */
const char *sd__plan_new_transform_id(pl_ctx *c, const char *tid, const char *suffix);
/*
 * Point n->msg at a scratch copy whose inputs (outputs = false) or outputs (true) are n's
 * current ones, after they were rewired.
 */
SD_MUST_CHECK sd_status sd__plan_sync_msg_io(pl_ctx *c, pl_node *n, bool outputs);
/* The finish pass for node idx: aliases, main and side inputs, references, producer, keys. */
SD_MUST_CHECK sd_status sd__plan_finish_node(pl_ctx *c, size_t idx);

/* --- pardo.c ------------------------------------------------------------------------------ */

/* Does the ParDoPayload (may be NULL) list input `local` as a side input? */
bool sd__plan_pardo_has_side(const pb_pardo *pd, const char *local);
/* Check the ParDoPayload parts of node idx that do not depend on the graph; fill its flags. */
SD_MUST_CHECK sd_status sd__plan_check_pardo(pl_ctx *c, size_t idx);
/* Expand a splittable ParDo into PairWithRestriction, SplitAndSize and Process nodes. */
SD_MUST_CHECK sd_status sd__plan_expand_sdf(pl_ctx *c,
                                            const char *tid,
                                            const pb_transform *t,
                                            pb_pardo *pd);

/* --- lift.c ------------------------------------------------------------------------------- */

/*
 * Lift a combine_per_key composite if possible into Precombine, GBK, Merge and Extract nodes.
 * OUT: lifted; why (when not lifted: the reason, a static or scratch string).
 */
SD_MUST_CHECK sd_status sd__plan_try_lift(pl_ctx *c,
                                          const char *tid,
                                          const pb_transform *t,
                                          bool *lifted,
                                          const char **why);

/* --- rewrite.c ---------------------------------------------------------------------------- */

/* Reroute TestStream outputs whose consumers' coder the runner cannot store (after finish). */
SD_MUST_CHECK sd_status sd__plan_rewrite_teststreams(pl_ctx *c);
/* Make every Flatten's inputs concatenable: transcode other coders, copy repeated inputs. */
SD_MUST_CHECK sd_status sd__plan_rewrite_flattens(pl_ctx *c);

/* --- merge.c ----------------------------------------------------------------------------- */

/* Does the strategy's window fn merge in the SDK (an unknown URN with NEEDS_MERGE)? */
bool sd__plan_ws_sdk_merges(const pb_wstrat *ws);
/* Give every GroupByKey over such a window fn its merge_windows transform (after finish). */
SD_MUST_CHECK sd_status sd__plan_rewrite_merging_gbks(pl_ctx *c);

/* --- topo.c ------------------------------------------------------------------------------- */

/* Deterministic topological order of c->nodes into c->topo (a cycle is a problem). */
SD_MUST_CHECK sd_status sd__plan_topo_sort(pl_ctx *c);

/* --- coders.c ----------------------------------------------------------------------------- */

/* The pipeline's or a synthesized coder; NULL when absent. */
const pb_coder *sd__plan_coder_get(const pl_ctx *c, const char *id);
/* URN of a coder ("" when it has no spec); NULL when the coder is absent. */
const char *sd__plan_coder_urn(const pl_ctx *c, const char *id);
/*
 * Check a coder tree once: existence, cycles and arity of runner-parsed URNs. who names the
 * referrer for messages. Problems are recorded; returns SD_OK or SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd__plan_check_coder(pl_ctx *c, const char *id, const char *who);
/* Synthesize a coder with a unique id derived from base. OUT: id (scratch). */
SD_MUST_CHECK sd_status sd__plan_new_coder(pl_ctx *c,
                                           const char *base,
                                           const char *urn,
                                           size_t n_components,
                                           const char *const *components,
                                           const char **id);
/* The wire form of a coder under the LP rule (plan.h). OUT: wire (id; may equal id). */
SD_MUST_CHECK sd_status sd__plan_wire_coder(pl_ctx *c, const char *id, const char **wire);
/* The coder to name for a PCollection whose element coder is id, in descriptors and on the
 * data plane: the wire form, except that a windowed_value element coder is length-prefixed
 * whole (coders.c says why). OUT: coder (id; may equal id). */
SD_MUST_CHECK sd_status sd__plan_pcoll_coder(pl_ctx *c, const char *id, const char **coder);
/* The coder a window position names (coders.c says when it is a synthesized
 * custom_window(length_prefix(id))). OUT: out (id; may equal id). */
SD_MUST_CHECK sd_status sd__plan_window_coder(pl_ctx *c, const char *id, const char **out);
/* Point every windowing strategy whose window coder the runner cannot read at its
 * custom_window replacement (copies in c->wstrats; the pipeline is not changed). */
SD_MUST_CHECK sd_status sd__plan_custom_window_coders(pl_ctx *c);
/* windowed_value(elem, win), synthesized once per pair. OUT: port coder id. */
SD_MUST_CHECK sd_status sd__plan_port_coder(pl_ctx *c,
                                            const char *elem,
                                            const char *win,
                                            const char **port);
/* True when the runner parses this URN fully (the "known" list of the LP rule). */
bool sd__plan_coder_known(const char *urn);
/* Structurally equal coders (same id, or same URN, payload and equal components). */
bool sd__plan_coders_equal(const pl_ctx *c, const char *a, const char *b);

/* --- windowing.c -------------------------------------------------------------------------- */

/* Check a windowing strategy once (window fn, payload, coder, trigger, modes). */
SD_MUST_CHECK sd_status sd__plan_check_windowing(pl_ctx *c, const char *id, const char *who);
/* Translate into plain C; everything allocated from a. */
SD_MUST_CHECK sd_status sd__plan_translate_windowing(pl_ctx *c,
                                                     sd_arena *a,
                                                     const char *id,
                                                     const pb_wstrat *ws,
                                                     sd_plan_windowing *out);
/* True when the windowing strategy does not merge windows. */
bool sd__plan_ws_non_merging(const pl_ctx *c, const pb_wstrat *ws);

/* --- fuse.c ------------------------------------------------------------------------------- */

/* Greedy fusion of c->topo into c->stages. */
SD_MUST_CHECK sd_status sd__plan_fuse(pl_ctx *c);
/* Build the public plan from c->stages. */
SD_MUST_CHECK sd_status sd__plan_assemble(pl_ctx *c, sd_plan *plan);

/* --- descriptor.c ------------------------------------------------------------------------- */

/* Build, pack and unpack stage st's ProcessBundleDescriptor into ps. */
SD_MUST_CHECK sd_status sd__plan_descriptor(pl_ctx *c, const pl_stage *st, sd_plan_stage *ps);

/* Private part of sd_plan. */
struct sd__plan_mem {
    sd_arena arena;
};

#endif
