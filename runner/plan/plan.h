/*
 * Sundial: the planner. It turns a Beam Pipeline proto into validated, fused stages with
 * ready-to-serve ProcessBundleDescriptors, and describes everything an executor needs in plain
 * C structs (stages, PCollections, coders, windowing strategies).
 *
 * What the planner does, in order:
 *   1. Validate. Every unsupported or malformed thing is collected into ONE error that lists
 *      them all (see sd_plan_validate for the list of checks and accepted features).
 *   2. Expand composites into leaves. A transform with subtransforms is a composite and is
 *      replaced by its subtransforms, unless it is one the planner handles natively:
 *        - beam:transform:combine_per_key:v1 is lifted (see "Combiner lifting");
 *        - beam:transform:reshuffle:v1 (and redistribute_arbitrarily / redistribute_by_key)
 *          is elided: its consumers read its input directly and become stage roots (but for
 *          a Python Create's own Reshuffle, Create/MaybeReshuffle/Reshuffle, whose consumers
 *          fuse with the values' producer: it spreads work over workers, which one LOOPBACK
 *          worker does not have);
 *        - Impulse, GroupByKey, Flatten and TestStream are runner-side leaves; the second and
 *          later Impulses are the first one again (every Impulse emits the same element), so
 *          their outputs become aliases of the first's (unless separate_siblings);
 *        - a leaf with a URN nothing runs whose outputs are all among its inputs (an identity
 *          placeholder, e.g. Python's streaming Create/MaybeReshuffle) is dropped; any other
 *          unknown leaf is refused.
 *   3. Expand splittable DoFns (a ParDo whose ParDoPayload.restriction_coder_id is set) into
 *      sdf_pair_with_restriction -> sdf_split_and_size_restrictions ->
 *      sdf_process_sized_element_and_restrictions. The process transform keeps the ParDo's id
 *      (so user metrics keep their PTRANSFORM label) and is a forced stage root.
 *   4. Fuse greedily (see "Fusion").
 *   5. Choose wire coders (see "Length-prefix rule") and build one ProcessBundleDescriptor per
 *      SDK stage.
 *
 * Combiner lifting (sd_plan_options.lift_combiners, on by default): a combine_per_key composite
 * with a CombinePayload, exactly one input and one output, a KV input coder, and an input
 * windowing strategy that is non-merging with output time END_OF_WINDOW (the TypeScript worker
 * requires both) becomes
 *     <id>/Precombine   beam:transform:combine_per_key_precombine:v1        KV<K,I> -> KV<K,A>
 *     <id>/Group        beam:transform:group_by_key:v1 (runner)   KV<K,A> -> KV<K,Iterable<A>>
 *     <id>/Merge        beam:transform:combine_per_key_merge_accumulators:v1 -> KV<K,A>
 *     <id>/Extract      beam:transform:combine_per_key_extract_outputs:v1   -> the composite's
 *                                                                            output
 * with PCollections <id>/lifted, <id>/grouped, <id>/merged (input's windowing and
 * boundedness) and coders <id>/acc_iter = iterable(A), <id>/kv_acc = kv(K,A),
 * <id>/kv_acc_iter = kv(K, iterable(A)). All four carry the composite's CombinePayload and
 * (the GBK excepted) its environment. Synthesized ids that collide with existing ones get a
 * numeric suffix. Otherwise the composite's subtransforms run as ordinary leaves.
 *
 * Fusion: leaves are visited in a deterministic topological order (Kahn's algorithm, ties
 * broken by transform id in natural order, i.e. digit runs compare as numbers). A leaf joins
 * the SDK stage that produces its main input unless
 *   - the producer is runner-side (Impulse, GBK, Flatten, TestStream), or the leaf is,
 *   - the environments differ,
 *   - the leaf is a forced root: a stateful ParDo (state_specs or timer_family_specs), an SDF
 *     process transform, or a consumer of an elided Reshuffle,
 *   - it reads as a side input a PCollection produced in that stage or in a stage that
 *     (transitively) depends on it (fusing would create a cycle between stages).
 * A leaf whose main input comes from a runner-side stage joins, under the same conditions,
 * the first stage that reads that PCollection from it in the same environment (siblings:
 * the readers of one Impulse, of one GroupByKey's output), unless separate_siblings: on a
 * LOOPBACK worker separate stages buy no parallelism and cost the SDK a bundle processor each.
 * Otherwise it roots a new stage. Stage ids are "stage-001", "stage-002", ... in the order
 * their roots appear in the topological order.
 *
 * Length-prefix (LP) rule. The runner fully parses exactly these coder URNs ("known"):
 *     bytes, string_utf8, varint, double, bool, kv, iterable, nullable, length_prefix,
 *     global_window, interval_window, windowed_value, timer.
 * The wire form W(c) of a coder c is:
 *     - c itself when c is a known leaf (bytes, string_utf8, varint, double, bool,
 *       global_window, interval_window) or a length_prefix (its inner bytes stay opaque);
 *     - for kv, iterable, nullable, windowed_value and timer: the same URN and payload over
 *       W(component) for each component; c itself when no component changed, otherwise a new
 *       coder "<c>_lp";
 *     - for every other URN (genericobjectjs, row, sharded_key, custom coders, ...):
 *       length_prefix(c) with the new id "<c>_lp".
 *   ("<c>_lp" gets a numeric suffix if the pipeline already uses that id.) So
 *   kv(genericobjectjs, genericobjectjs) becomes kv(lp(g), lp(g)) and kv(string, g) becomes
 *   kv(string, lp(g)). Every PCollection in the PCollection table (those that cross a stage
 *   boundary: stage inputs, stage outputs, side inputs, everything runner-side) uses W(coder)
 *   as its coder in EVERY descriptor that mentions it, not only on the ports: the TypeScript
 *   SDK's length-prefixed genericobjectjs is not its nested encoding, so the runner must
 *   never strip a prefix and the SDK must decode what the runner stores with the same coder.
 *   Ports use windowed_value(W(element coder), window coder) ("port coder"). Timer family
 *   coders are rewritten to W(timer coder) in the descriptor's copy of the ParDoPayload.
 *   A runner-side Flatten concatenates its inputs' bytes, so each input must arrive in the
 *   output's coder. An input whose coder differs (structurally) from the output's is
 *   re-encoded by an SDK-side beam:transform:flatten:v1 "<flatten>/Transcode/<local>" (in the
 *   input producer's environment, else the Flatten's, so it usually fuses into the producer's
 *   stage) into a new PCollection "<flatten>/transcoded/<local>" with the output's coder; the
 *   input keeps its own coder for every other consumer (a GroupByKey, a side input). An input
 *   listed again (the same PCollection twice, or two Reshuffles of one) gets a runner-side
 *   copy, a one-input Flatten "<flatten>/Copy/<local>" -> "<flatten>/copy/<local>", so each
 *   listing contributes every element (the engine reads a stage input once). Only when the
 *   pipeline has no SDK environment at all does a differing input take the output's wire
 *   coder instead.
 *   A runner-side TestStream's elements arrive in the outer encoding of the payload's coder C
 *   and are stored in one coder S: C itself when W(C) = C (re-encoded by the runner), else
 *   W(C) when C is opaque (the bytes length-prefixed), else (a known structural coder over
 *   opaque parts) a new length_prefix(C) "<C>_raw". An output whose coder differs
 *   (structurally) from C, or every output when S is "<C>_raw", is rerouted: the TestStream
 *   writes "<ts>/raw/<tag>" (coder S) and an SDK-side beam:transform:flatten:v1
 *   "<ts>/Transcode/<tag>", in the environment of the output's first SDK consumer, decodes it
 *   and writes the output PCollection in its wire coder, so every consumer (GroupByKey,
 *   stateful ParDo, side input) reads what it expects. Python's TestStream needs this: it
 *   encodes with FastPrimitivesCoder and types its output kv(DeterministicFastPrimitives,
 *   FastPrimitives). The stage's teststream_wire_coder_id is S.
 *
 * Ownership: an sd_plan owns every string, array and message it points to; all of it is valid
 * until sd_plan_destroy(). The plan never points into the Pipeline it was built from.
 * Thread: the planner keeps no global state; distinct calls may run on distinct threads.
 */
#ifndef SD_RUNNER_PLAN_PLAN_H
#define SD_RUNNER_PLAN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "org/apache/beam/model/fn_execution/v1/beam_fn_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/beam_runner_api.pb-c.h"
#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"

/* "No such index" for size_t indexes below (e.g. a PCollection without a producer stage). */
#define SD_PLAN_NONE ((size_t)-1)

/* ----------------------------------------------------------------------------------------- */
/* Options                                                                                    */
/* ----------------------------------------------------------------------------------------- */

typedef struct sd_plan_options {
    /* URL put in every RemoteGrpcPort (data sources and sinks). NULL = "". */
    const char *data_url;
    /* URL put in every descriptor's state_api_service_descriptor. NULL = "". */
    const char *state_url;
    /* Lift combine_per_key composites. Default TRUE (use SD_PLAN_OPTIONS_INIT). */
    bool lift_combiners;
    /* Lift even where a known SDK defect makes a lifted combine wrong (the TypeScript SDK
     * 2.49's 32-bit varint accumulators). Default false. */
    bool force_lift;
    /* Reject every non-default trigger at validation. Default false (triggers accepted). */
    bool default_trigger_only;
    /* Keep every Impulse, and give each SDK transform reading a runner stage's output a stage
     * of its own unless its producer's stage takes it (the fusion before sibling fusion, kept
     * for tests of other rules). Default false: siblings fuse, Impulses merge (graph.c). */
    bool separate_siblings;
} sd_plan_options;

/* The defaults; passing NULL options anywhere means exactly this. */
#define SD_PLAN_OPTIONS_INIT                                                                       \
    {                                                                                              \
        .data_url = NULL, .state_url = NULL, .lift_combiners = true, .default_trigger_only = false \
    }

/* ----------------------------------------------------------------------------------------- */
/* Coders                                                                                     */
/* ----------------------------------------------------------------------------------------- */

/* One coder of the final table (the pipeline's coders plus every synthesized one). */
typedef struct sd_plan_coder {
    const char *id;
    const char *urn;
    sd_bytes payload; /* FunctionSpec.payload; empty when none */
    size_t n_components;
    const char *const *components; /* component coder ids, in order */
} sd_plan_coder;

/* ----------------------------------------------------------------------------------------- */
/* Windowing strategies                                                                       */
/* ----------------------------------------------------------------------------------------- */

typedef enum sd_plan_window_kind {
    SD_PLAN_WINDOW_GLOBAL = 0,
    SD_PLAN_WINDOW_FIXED,    /* size_ms, offset_ms */
    SD_PLAN_WINDOW_SLIDING,  /* size_ms, period_ms, offset_ms */
    SD_PLAN_WINDOW_SESSIONS, /* gap_ms */
    SD_PLAN_WINDOW_CUSTOM    /* assigned by the SDK (another URN), never merging */
} sd_plan_window_kind;

/* UNSPECIFIED in the proto is translated: merge status from the window fn (sessions need a
 * merge), output time END_OF_WINDOW, DISCARDING, EMIT_ALWAYS, FIRE_ALWAYS. */
typedef enum sd_plan_merge {
    SD_PLAN_MERGE_NON_MERGING = 0,
    SD_PLAN_MERGE_NEEDS_MERGE,
    SD_PLAN_MERGE_ALREADY_MERGED
} sd_plan_merge;

typedef enum sd_plan_output_time {
    SD_PLAN_OUTPUT_END_OF_WINDOW = 0,
    SD_PLAN_OUTPUT_LATEST_IN_PANE,
    SD_PLAN_OUTPUT_EARLIEST_IN_PANE
} sd_plan_output_time;

typedef enum sd_plan_accumulation {
    SD_PLAN_DISCARDING = 0,
    SD_PLAN_ACCUMULATING
} sd_plan_accumulation;

/* ClosingBehavior; UNSPECIFIED reads as EMIT_IF_NONEMPTY (Java's default, FIRE_IF_NON_EMPTY). */
typedef enum sd_plan_closing { SD_PLAN_EMIT_IF_NONEMPTY = 0, SD_PLAN_EMIT_ALWAYS } sd_plan_closing;

typedef enum sd_plan_on_time { SD_PLAN_FIRE_ALWAYS = 0, SD_PLAN_FIRE_IF_NONEMPTY } sd_plan_on_time;

typedef enum sd_plan_trigger_kind {
    SD_PLAN_TRIGGER_DEFAULT = 0,
    SD_PLAN_TRIGGER_NEVER,
    SD_PLAN_TRIGGER_ALWAYS,
    SD_PLAN_TRIGGER_AFTER_ALL,             /* subtriggers */
    SD_PLAN_TRIGGER_AFTER_ANY,             /* subtriggers */
    SD_PLAN_TRIGGER_AFTER_EACH,            /* subtriggers */
    SD_PLAN_TRIGGER_AFTER_END_OF_WINDOW,   /* early, late (each may be NULL) */
    SD_PLAN_TRIGGER_AFTER_PROCESSING_TIME, /* timestamp_transforms */
    SD_PLAN_TRIGGER_ELEMENT_COUNT,         /* element_count */
    SD_PLAN_TRIGGER_OR_FINALLY,            /* subtriggers = [main, finally] */
    SD_PLAN_TRIGGER_REPEAT,                /* subtriggers = [subtrigger] */
    /* Java's continuation of AfterProcessingTime downstream of a GroupByKey: fires once the
     * job clock is past the processing time at which the pane's first element arrived. */
    SD_PLAN_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME
} sd_plan_trigger_kind;

typedef enum sd_plan_timestamp_transform_kind {
    SD_PLAN_TT_DELAY = 0, /* delay_ms */
    SD_PLAN_TT_ALIGN_TO   /* period_ms, offset_ms */
} sd_plan_timestamp_transform_kind;

typedef struct sd_plan_timestamp_transform {
    sd_plan_timestamp_transform_kind kind;
    int64_t delay_ms;
    int64_t period_ms;
    int64_t offset_ms;
} sd_plan_timestamp_transform;

typedef struct sd_plan_trigger sd_plan_trigger;

/* A trigger as a small tree. Fields not named by the kind are zero/NULL. */
struct sd_plan_trigger {
    sd_plan_trigger_kind kind;
    size_t n_subtriggers;
    const sd_plan_trigger *subtriggers; /* array of n_subtriggers */
    const sd_plan_trigger *early;       /* AFTER_END_OF_WINDOW early firings, or NULL */
    const sd_plan_trigger *late;        /* AFTER_END_OF_WINDOW late firings, or NULL */
    int64_t element_count;
    size_t n_timestamp_transforms;
    const sd_plan_timestamp_transform *timestamp_transforms;
};

typedef struct sd_plan_windowing {
    const char *id;
    sd_plan_window_kind kind;
    int64_t size_ms;   /* FIXED, SLIDING */
    int64_t period_ms; /* SLIDING */
    int64_t offset_ms; /* FIXED, SLIDING (from the payload's Timestamp offset) */
    int64_t gap_ms;    /* SESSIONS */
    sd_plan_merge merge;
    sd_plan_output_time output_time;
    sd_plan_accumulation accumulation;
    sd_plan_closing closing;
    sd_plan_on_time on_time;
    int64_t allowed_lateness_ms;
    const char *window_coder_id;
    bool interval_windows;          /* window coder is interval_window (else global_window) */
    const sd_plan_trigger *trigger; /* NULL for the default trigger */
    bool assigns_to_one_window;
    const char *environment_id; /* "" when none */
    /* A pipeline of Beam's Go SDK: a trigger finished by a pane cut on arrival closes its
     * window at once, with no tail (sd_windowing.no_closing_tail). */
    bool no_closing_tail;
} sd_plan_windowing;

/* ----------------------------------------------------------------------------------------- */
/* PCollections                                                                               */
/* ----------------------------------------------------------------------------------------- */

typedef struct sd_plan_consumer {
    size_t stage;    /* index into sd_plan.stages */
    bool side_input; /* read through the state API rather than a data port */
} sd_plan_consumer;

/*
 * A PCollection the executor handles: it crosses a stage boundary or is read/written by a
 * runner-side stage. Elements travel as port_coder_id = windowed_value(wire, window) bytes.
 */
typedef struct sd_plan_pcollection {
    const char *id;
    const char *coder_id;        /* the element coder as in the pipeline */
    const char *wire_coder_id;   /* the element coder after the LP rule */
    const char *window_coder_id; /* from the windowing strategy */
    const char *port_coder_id;   /* windowed_value(wire_coder_id, window_coder_id) */
    const char *windowing_strategy_id;
    const sd_plan_windowing *windowing;
    bool bounded;
    size_t producer_stage; /* SD_PLAN_NONE when nothing produces it */
    size_t n_consumers;
    const sd_plan_consumer *consumers; /* sorted by stage, main inputs first on ties */
} sd_plan_pcollection;

/* ----------------------------------------------------------------------------------------- */
/* Stages                                                                                     */
/* ----------------------------------------------------------------------------------------- */

typedef enum sd_plan_stage_kind {
    SD_PLAN_STAGE_SDK = 0,
    SD_PLAN_STAGE_IMPULSE,
    SD_PLAN_STAGE_GBK,
    SD_PLAN_STAGE_FLATTEN,
    SD_PLAN_STAGE_TESTSTREAM
} sd_plan_stage_kind;

typedef struct sd_plan_output {
    const char *pcollection;
    const char *sink_transform; /* SDK stages: the beam:runner:sink:v1 id; NULL otherwise */
    const char *port_coder_id;
} sd_plan_output;

typedef enum sd_plan_side_access {
    SD_PLAN_SIDE_ITERABLE = 0, /* beam:side_input:iterable:v1 */
    SD_PLAN_SIDE_MULTIMAP      /* beam:side_input:multimap:v1 */
} sd_plan_side_access;

typedef struct sd_plan_side_input {
    const char *transform;   /* the consuming transform id (StateKey transform_id) */
    const char *local_id;    /* its input name (StateKey side_input_id) */
    const char *pcollection; /* global PCollection id */
    sd_plan_side_access access;
    const char *window_mapping_urn; /* "" when unset */
    /* NULL, or when the stage's input is in the global window and the consuming transform's
     * main input is not (a WindowInto inside the stage assigns the windows the side input is
     * read in): that main input's windowing strategy id (in the plan's windowing table). */
    const char *main_windowing_strategy_id;
} sd_plan_side_input;

typedef enum sd_plan_time_domain {
    SD_PLAN_EVENT_TIME = 0,
    SD_PLAN_PROCESSING_TIME
} sd_plan_time_domain;

typedef struct sd_plan_timer_family {
    const char *transform; /* Elements.Timers transform_id */
    const char *family;    /* timer_family_id */
    sd_plan_time_domain domain;
    const char *timer_coder_id; /* wire form of the family's timer coder */
} sd_plan_timer_family;

/*
 * How a TestStreamPayload encodes its elements. Beam's rule is the outer encoding of the
 * payload's coder C. Beam's Go SDK (recognised by its environments' capabilities) writes what
 * its element encoders write, which is the nested encoding of C; and its own coders
 * (beam:go:coder:custom:v1) write their length before their bytes in every context, so such an
 * element already is the nested encoding of length_prefix(C), the wire coder it is stored in.
 */
typedef enum sd_plan_ts_form {
    SD_PLAN_TS_OUTER = 0, /* Beam's rule */
    SD_PLAN_TS_NESTED,    /* the Go SDK: nested encodings of C */
    SD_PLAN_TS_STORED,    /* the Go SDK's custom coder: the stored form itself */
} sd_plan_ts_form;

typedef struct sd_plan_teststream_output {
    const char *tag;         /* the TestStream event tag (the transform's output name) */
    const char *pcollection; /* global PCollection id */
} sd_plan_teststream_output;

/*
 * One stage. Runner-side stages have environment_id "" and exactly one transform.
 *   IMPULSE:    outputs[0] is the impulse PCollection.
 *   GBK:        inputs[0] -> outputs[0]; windowing_strategy_id is the input's; key_coder_id
 *               and value_coder_id are the (wire) components of the input KV coder.
 *   FLATTEN:    inputs (possibly empty, never repeated: see the LP rule) -> outputs[0].
 *   TESTSTREAM: teststream_* fields; outputs in the order of teststream_outputs.
 *   SDK:        inputs[0] is the main input, delivered to source_transform with
 *               source_port_coder_id; outputs are the PCollections consumed outside the stage,
 *               each read back from its sink_transform. descriptor / descriptor_bytes hold the
 *               ProcessBundleDescriptor whose id equals the stage id.
 */
/* sd_plan_stage.max_output_bytes for the TypeScript SDK: half its sink's 1 MB flush point. */
#define SD_PLAN_TS_MAX_OUTPUT_BYTES ((size_t)512 * 1024)

typedef struct sd_plan_stage {
    const char *id;
    sd_plan_stage_kind kind;
    const char *environment_id;
    size_t n_transforms;
    const char *const *transforms; /* fused transform ids, topological order */
    size_t n_inputs;
    const char *const *inputs;
    size_t n_outputs;
    const sd_plan_output *outputs; /* sorted by PCollection id (TESTSTREAM: by tag) */
    size_t n_upstream;
    const size_t *upstream; /* indexes of stages this one reads from (sorted, unique) */

    /* SDK stages. */
    const char *source_transform;
    const char *source_port_coder_id;
    size_t n_side_inputs;
    const sd_plan_side_input *side_inputs;
    bool stateful;            /* some fused ParDo has state or timers */
    const char *key_coder_id; /* stateful (and GBK): wire key coder of the input KV; or NULL */
    size_t n_timer_families;
    const sd_plan_timer_family *timer_families;
    bool on_window_expiration;        /* some ParDo set on_window_expiration_timer_family_spec */
    const char *expiration_transform; /* that ParDo (the first, if several), or NULL */
    const char *expiration_family;    /* its on_window_expiration_timer_family_spec, or NULL */
    bool requires_finalization;       /* some ParDo set requests_finalization */
    bool time_sorted_input;           /* the root ParDo set requires_time_sorted_input */
    bool splittable;                  /* the root is an SDF process transform */
    bool after_reshuffle;             /* the root reads an elided Reshuffle's output */
    /* Keep a bundle's output under this many bytes (0 = no cap): set for the TypeScript SDK
     * 2.49, whose data sink resends its whole buffer for each output of an element once the
     * buffer passed 1 MB (duplicated data); the engine sizes bundles to stay under it. */
    size_t max_output_bytes;
    /* The SDK's data sink may resend what it sent (the TypeScript SDK 2.49, see
     * sd_stage_spec.sink_resends): the engine keeps the last of a run of resends. */
    bool sink_resends;
    const Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor *descriptor;
    sd_bytes descriptor_bytes; /* the same descriptor, packed */
    /* Splittable stages: what a draining job runs the stage's work with (JobService.Drain).
     * The descriptor "<id>-drain" is the stage's own plus drain_truncate, a
     * beam:transform:sdf_truncate_sized_restrictions:v1 between the source and the SDF's
     * process transform drain_process (which reads "<input>/truncated" instead): the SDK
     * truncates every restriction before processing it, and an unbounded one (truncated to
     * nothing) ends. The truncate transform reads the SDF's side inputs under its own id;
     * the executor answers them as drain_process's. NULL / empty for other stages. */
    const char *drain_truncate;
    const char *drain_process;
    const Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor *drain_descriptor;
    sd_bytes drain_descriptor_bytes;

    /* GBK stages. */
    const char *windowing_strategy_id;
    const char *value_coder_id; /* wire value coder of the input KV */
    /* The GroupByKey's output tagged SD_GBK_LATE_OUTPUT_TAG (urns.h), or NULL: its late data goes
     * there (the input's KVs, unchanged) instead of being dropped. Also among outputs. */
    const char *late_pcollection;
    /* A GroupByKey over a custom merging window fn (the window fn's URN is not one the runner
     * knows, MergeStatus NEEDS_MERGE): its output tagged SD_GBK_MERGE_OUTPUT_TAG, the requests
     * read by the SDK stage running beam:transform:merge_windows:v1 "<gbk>/MergeWindows"
     * (among outputs), and that stage's output, the results, which the engine delivers back to
     * this GroupByKey (sd_em_set_merge_windows). NULL otherwise. */
    const char *merge_requests;
    const char *merge_results;

    /* TESTSTREAM stages. */
    sd_bytes teststream_payload;          /* the TestStreamPayload as given */
    const char *teststream_coder_id;      /* TestStreamPayload.coder_id */
    const char *teststream_wire_coder_id; /* its wire form: LP the encoded elements if differs */
    sd_plan_ts_form teststream_form;      /* how the payload encodes each element */
    size_t n_teststream_outputs;
    const sd_plan_teststream_output *teststream_outputs; /* sorted by tag */
} sd_plan_stage;

/* An environment used by at least one SDK stage. */
typedef struct sd_plan_environment {
    const char *id;
    const char *urn;
    sd_bytes payload;
} sd_plan_environment;

typedef struct sd__plan_mem sd__plan_mem;

/*
 * The plan. Public so executors can walk it; treat every field as read-only.
 * Arrays are sorted by id except stages, which are in topological order (every stage's
 * upstream stages come before it).
 */
typedef struct sd_plan {
    size_t n_stages;
    const sd_plan_stage *stages;
    size_t n_pcollections;
    const sd_plan_pcollection *pcollections;
    size_t n_coders;
    const sd_plan_coder *coders;
    size_t n_windowings;
    const sd_plan_windowing *windowings;
    size_t n_environments;
    const sd_plan_environment *environments;
    size_t teststream_stage; /* index of the TestStream stage or SD_PLAN_NONE */
    sd__plan_mem *mem;       /* private: owns everything above */
} sd_plan;

/* ----------------------------------------------------------------------------------------- */
/* API                                                                                        */
/* ----------------------------------------------------------------------------------------- */

/*
 * Check that Sundial can run the pipeline with default options. Collects EVERY problem and
 * reports them all in one message in err ("pipeline cannot run on Sundial (N problems): [1]
 * ...; [2] ..."; if the list outgrows sd_err it ends with "... and K more", and
 * sd_plan_validate_ex returns the full text).
 *
 * Accepted:
 *   - leaves: Impulse, GroupByKey, Flatten, TestStreams (runner-side); in an SDK
 *     environment: pardo, window_into, map_windows, merge_windows, to_string, the combine
 *     components (precombine, merge_accumulators, extract_outputs, convert_to_accumulators,
 *     combine_grouped_values), the SDF components, and any URN the environment lists in its
 *     capabilities;
 *   - environments beam:env:external:v1 and beam:env:process:v1 (only those used by SDK
 *     transforms are checked); docker, default, anyof and others are rejected by name;
 *   - window fns global, fixed, sliding, sessions, and custom ones (assigned by the SDK) whose
 *     MergeStatus is NON_MERGING, ALREADY_MERGED or NEEDS_MERGE (a GroupByKey over a merging
 *     one gets an SDK stage running merge_windows: runner/plan/merge.c), with window coders
 *     global_window or interval_window (any other, beam:coder:custom_window:v1 included, is
 *     refused naming the coder and the PCollection); accumulation DISCARDING or ACCUMULATING;
 *     any trigger (or only Default when options.default_trigger_only);
 *   - requirements: pardo:stateful, pardo:splittable_dofn, pardo:on_window_expiration,
 *     pardo:finalization and pardo:stable_input (Sundial keeps every stage input it delivers
 *     and never replays a bundle from a source, so a ParDo's input is stable) and
 *     pardo:time_sorted_input (for stateful ParDos; the engine sorts their input by
 *     timestamp). Rejected: every unknown requirement;
 *   - side inputs with access pattern iterable or multimap;
 *   - stateful ParDos with a KV main input; splittable DoFns without state or timers.
 * Malformed (SD_EINVAL): references to missing transforms, PCollections, coders, windowing
 * strategies or environments; coder cycles; a PCollection with two producers or none; cycles
 * between transforms; a ParDo without exactly one main input; undecodable payloads; wrong
 * coder arity for kv/iterable/length_prefix/nullable/windowed_value/timer.
 *
 * Returns SD_OK; SD_EUNIMPL when only unsupported features were found; SD_EINVAL when anything
 * is malformed; SD_ENOMEM. p is borrowed for the duration of the call.
 */
SD_MUST_CHECK sd_status sd_plan_validate(const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *p,
                                         sd_err *err);

/*
 * sd_plan_validate with options (NULL = defaults). OUT: report (may be NULL): on failure the
 * full problem list, one problem per line; caller owns it, free with sd_free. *report is NULL
 * on success.
 */
SD_MUST_CHECK sd_status
sd_plan_validate_ex(const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *p,
                    const sd_plan_options *opt,
                    char **report,
                    sd_err *err);

/*
 * Validate (as sd_plan_validate_ex) and build the plan. opt may be NULL (defaults).
 * OUT: out, the plan; caller owns it, free with sd_plan_destroy(). *out is NULL on error.
 * p is borrowed for the duration of the call only.
 */
SD_MUST_CHECK sd_status sd_plan_build(const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *p,
                                      const sd_plan_options *opt,
                                      sd_plan **out,
                                      sd_err *err);

/* Free the plan and everything it owns. NULL is a no-op. */
void sd_plan_destroy(sd_plan *plan);

/*
 * Lookups by id: binary search over the sorted tables, a linear scan over stages. Borrowed
 * results valid until sd_plan_destroy; NULL if absent.
 */
const sd_plan_stage *sd_plan_find_stage(const sd_plan *plan, const char *id);
const sd_plan_pcollection *sd_plan_find_pcollection(const sd_plan *plan, const char *id);
const sd_plan_coder *sd_plan_find_coder(const sd_plan *plan, const char *id);
const sd_plan_windowing *sd_plan_find_windowing(const sd_plan *plan, const char *id);

/*
 * Append a human-readable summary of the plan (one line per stage, then the boundary
 * PCollections with their coders) to out, for logs and debugging. Returns SD_OK, SD_ENOMEM or
 * SD_ETOOBIG (out's limit).
 */
SD_MUST_CHECK sd_status sd_plan_describe(const sd_plan *plan, sd_buf *out);

/* Human-readable names for logs ("sdk", "gbk", ...). Never NULL. */
const char *sd_plan_stage_kind_name(sd_plan_stage_kind kind);

/*
 * Invariant checker for tests and debug builds: NULL when the plan is consistent, else a static
 * string naming the broken invariant (e.g. a stage output missing from the PCollection table,
 * a coder id with no coder, a descriptor whose id differs from its stage).
 */
const char *sd__plan_check(const sd_plan *plan);

#endif
