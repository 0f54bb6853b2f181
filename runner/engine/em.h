/* Sundial: the element manager — stages, pending elements, watermarks, bundles, state, time. */
#ifndef SD_RUNNER_ENGINE_EM_H
#define SD_RUNNER_ENGINE_EM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"
#include "runner/base/time.h"
#include "runner/coder/coder.h"

/*
 * The element manager ("em") is the runner's scheduler for one job. It is pure C: it speaks
 * bytes, timestamps, windows, keys and stage ids, never protos. The executor (runner/exec)
 * registers PCollections and stages, calls sd_em_start(), then loops:
 *
 *     while (!sd_em_done(em)) {
 *         sd_em_next_bundle(em, &b, err)      runner-side stages run inside; b = SDK work or NULL
 *         b != NULL: send b's input + timers to the SDK; as results stream back call
 *                    sd_em_bundle_output / _timers / _residual / _split, and serve the state API;
 *                    then sd_em_complete_bundle (or sd_em_fail_bundle), then
 *                    sd_em_check_livelock() -> fail the job (bundles run, nothing moves)
 *         b == NULL, sd_em_in_progress(em) == 0 and no sd_em_next_wakeup(): sd_em_check_stuck()
 *                    -> fail the job
 *         b == NULL otherwise: wait for a bundle to finish, or until sd_em_next_wakeup()
 *     }
 *
 * Threads: everything here runs on one thread (the libev loop thread). No locks; the only
 * callbacks are the late-data observer and the source driver (sd_em_set_source).
 * Every bundle-related id string returned is borrowed and valid until the bundle is completed
 * or failed; stage and PCollection ids are valid until sd_em_destroy().
 *
 * Encodings: every element, window and key handed in or out is in Beam's nested context.
 * Windows are decoded with the window coder of the relevant PCollection (global, interval;
 * custom windows are rejected when the PCollection is added).
 */

typedef struct sd_em sd_em;
typedef struct sd_bundle sd_bundle; /* owned by the engine */

#include "runner/engine/em_trace.h" /* the time trace: records and their readers */

/* ------------------------------------------------------------------------------------------ */
/* Configuration                                                                              */
/* ------------------------------------------------------------------------------------------ */

typedef enum sd_clock_mode {
    /* Processing time is synthetic: it starts at the wall clock when the engine is created and
     * jumps to the earliest pending processing-time event only when nothing else can happen. */
    SD_CLOCK_SYNTHETIC = 0,
    /* Processing time is the wall clock; the executor wakes the engine at sd_em_next_wakeup(). */
    SD_CLOCK_WALL = 1
} sd_clock_mode;

/* Returns the wall clock in ms since the epoch. Injected so tests can control it. */
typedef sd_time (*sd_em_wall_fn)(void *ctx);

/*
 * Bundle shapes, for schedule exploration (sd_em_config.bundle_shape). Beam promises user code
 * no particular bundling or order; these shapes make a job run under deliberately different
 * ones so order- or bundling-dependent code shows itself in tests.
 */
enum {
    SD_SHAPE_GREEDY = 0,  /* everything ready, up to the caps (the default) */
    SD_SHAPE_ONE_KEY,     /* each SDK bundle holds elements and timers of a single key */
    SD_SHAPE_ONE_ELEMENT, /* each SDK bundle holds one element or one timer */
};

/* Why the engine treated an element as late (sd_em_late_fn). */
typedef enum sd_late_reason {
    SD_LATE_WINDOW_EXPIRED = 0, /* Beam's rule: its window's max timestamp + allowed lateness
                                 * is behind the GroupByKey's input watermark */
    SD_LATE_WINDOW_CLOSED,      /* its window's trigger finished for the key */
    SD_LATE_BEHIND_WATERMARK,   /* the per-element policy (sd_em_set_drop_behind_watermark) */
    SD_LATE_SORTED_EXPIRED      /* time-sorted input: ts + allowed lateness behind in_wm */
} sd_late_reason;

/* "window expired", "window closed", "behind the watermark", "time-sorted input expired". */
const char *sd_late_reason_name(sd_late_reason r);

/* One late element, as the engine saw it (everything borrowed for the call). */
typedef struct sd_em_late {
    const char *stage_id;    /* the stage that found it late */
    const char *pcollection; /* the PCollection it arrived on */
    sd_bytes element;        /* its nested encoding with that PCollection's element coder */
    sd_time timestamp;
    sd_window window;
    sd_time watermark; /* that PCollection's watermark then */
    sd_late_reason reason;
    bool routed; /* delivered to the GBK's dead-letter PCollection (else dropped) */
} sd_em_late;

/*
 * Late data observer: called for every element the engine treats as late, before it is
 * dropped or routed (counted in the stage's dropped_late either way), so nothing late is lost
 * silently. It must not call back into the engine. (What a closed session held when a later
 * element merged into it is counted but not observed: those values are already grouped.)
 */
typedef void (*sd_em_late_fn)(void *ctx, const sd_em_late *late);

/*
 * Schedule decisions (sd_em_config.on_decision): every choice that shapes a run, in the order
 * it is made, so a run can be recorded and replayed (sd_em_sched below). The engine reports
 * BUNDLE, TESTSTREAM, CLOCK, COMMIT and FAIL; SPLIT comes from the executor, which asks SDKs
 * for splits (sd_em_decide). Everything is borrowed for the call.
 */
typedef enum sd_em_decision_kind {
    SD_DECISION_BUNDLE = 0, /* an SDK bundle was handed out */
    SD_DECISION_TESTSTREAM, /* a TestStream event was played */
    SD_DECISION_CLOCK,      /* the synthetic clock jumped to the next processing-time event */
    SD_DECISION_SPLIT,      /* a runner-initiated split: the fraction asked, what the SDK said */
    SD_DECISION_COMMIT,     /* a bundle's results were committed */
    SD_DECISION_FAIL        /* a bundle was failed: its input and timers went back to pending */
} sd_em_decision_kind;

typedef struct sd_em_decision {
    sd_em_decision_kind kind;
    const char *bundle; /* BUNDLE, SPLIT, COMMIT, FAIL: the bundle id */
    const char *stage;  /* BUNDLE: its stage */
    uint64_t elements;  /* BUNDLE: input elements; COMMIT: those the SDK processed (primary) */
    uint64_t count;     /* BUNDLE: timers fired; COMMIT: residuals handed back */
    /* BUNDLE: FNV-1a of the input bytes and of the event-time timers' bytes (processing-time
     * timers count by family only: their firing times are on a clock that starts at the wall
     * time the job started); COMMIT: of the output bytes per output and the residuals. */
    uint64_t digest;
    /* TESTSTREAM, CLOCK: the job clock after it, in ms since the engine was created
     * (SD_TIME_MAX: the end of time). */
    int64_t clock;
    double fraction;     /* SPLIT: the fraction of the remainder asked for */
    int64_t first_split; /* SPLIT: the first residual element the SDK answered; -1 = none */
    /* SPLIT: the SDK's whole answer as the executor keeps it (opaque to the engine: the
     * packed ProcessBundleSplitResponse, roots and all), so a replay can apply it without
     * asking the SDK; empty: no answer to keep. */
    sd_bytes answer;
} sd_em_decision;

/*
 * The decision hook: called at each decision. A non-OK return (err set) makes the engine call
 * in which the decision was made fail with that error (a replay that diverged); for FAIL and
 * SPLIT it is only remembered by the hook.
 */
typedef sd_status (*sd_em_decision_fn)(void *ctx, const sd_em_decision *d, sd_err *err);

/* The zero value is the default configuration. */
typedef struct sd_em_config {
    sd_clock_mode clock;
    /* Cap on the encoded input bytes of one SDK bundle (0 = no cap). A single element larger
     * than the cap still travels alone in its own bundle. */
    size_t max_bundle_bytes;
    /* Cap on input elements per SDK bundle (0 = no cap; 1 = one element per bundle). */
    size_t max_bundle_elements;
    /* The memory budget in bytes (0 = none): beyond it pending elements, GroupByKey values and
     * bundle outputs go to a spill file in spill_dir (NULL: $TMPDIR, else /tmp). */
    size_t memory_limit;
    const char *spill_dir;
    /* The pipeline is bounded (no unbounded PCollection, no TestStream): watermarks follow
     * Beam's batch model — a stage's watermarks jump from the start to the end of time when
     * everything upstream of it is complete and it has nothing left to do — so no element is
     * ever late. Unbounded pipelines use streaming watermarks (the default). */
    bool bounded;
    /* The pipeline runs as a stream (unbounded, or Beam's --streaming option): triggers that
     * count elements are asked after each element (em_gbk.c), whatever the watermark model. */
    bool streaming;
    /* Wall clock source; NULL = sd_wall_now_ms(). */
    sd_em_wall_fn wall_now;
    void *wall_ctx;
    /* Late data observer (NULL: none). */
    sd_em_late_fn on_late;
    void *late_ctx;
    /* SD_SHAPE_*: how SDK bundles are cut (combines with the caps above). */
    int bundle_shape;
    /* 0: no shuffling — stages round-robin, elements oldest first, timers earliest first.
     * Otherwise the seed of a deterministic generator that picks which ready stage, element
     * and timer goes next (and so which key leads a one-key bundle). The same job, inputs,
     * shape and seed give the same bundle schedule and output (synthetic clock). */
    uint64_t schedule_seed;
    /* Live-lock bound (sd_em_check_livelock): this many SDK bundles completed in a row without
     * progress mean the job spins forever; 0 = no check. The executor's default is
     * SD_EM_LIVELOCK_ROUNDS_DEFAULT. */
    uint64_t livelock_rounds;
    /* Schedule decisions (NULL: none): see sd_em_decision_fn; sd_em_sched_decide records or
     * replays them. */
    sd_em_decision_fn on_decision;
    void *decision_ctx;
    /* The most time-trace records kept (em_trace.h): 0 = SD_EM_TRACE_CAP_DEFAULT; above
     * SD_EM_TRACE_CAP_MAX (SIZE_MAX included: a trace is never unbounded) that maximum. */
    size_t trace_cap;
} sd_em_config;

/* Bundles in a row without progress that fail a job unless it chooses otherwise: far more than
 * any legitimate job makes (a bundle without progress only re-arms a timer or hands back its
 * input unchanged; Beam's Python suites pass with 3), and a spinning job reaches it in under
 * a second with the C SDK, in a few seconds with Python's (~150 bundles a second). */
#define SD_EM_LIVELOCK_ROUNDS_DEFAULT 1000

/* Napping (sd_em_next_bundle, synthetic clock): idle bundles asking to be resumed at wall
 * times this close to the first one's wait for the same time. */
#define SD_EM_NAP_SLACK_MS 20
/* ... and nap at most this long at a time (a source that polls on the synthetic clock without
 * waiting for real time loses at most this much per streak of idle bundles). */
#define SD_EM_NAP_MAX_MS 1000

/* ------------------------------------------------------------------------------------------ */
/* Windowing strategies                                                                       */
/* ------------------------------------------------------------------------------------------ */

typedef enum sd_windowfn_kind {
    SD_WINDOWFN_GLOBAL = 0,
    SD_WINDOWFN_FIXED,
    SD_WINDOWFN_SLIDING,
    SD_WINDOWFN_SESSIONS,
    /* Assigned by the SDK: windows come with the elements. They never merge, unless the GBK
     * reading the PCollection has the SDK merge them (sd_em_set_merge_windows). */
    SD_WINDOWFN_CUSTOM
} sd_windowfn_kind;

typedef enum sd_output_time {
    SD_OUTPUT_TIME_END_OF_WINDOW = 0,
    SD_OUTPUT_TIME_EARLIEST,
    SD_OUTPUT_TIME_LATEST
} sd_output_time;

/*
 * Trigger tree, executed by the runner-side GBK with Beam's trigger state machines (see
 * runner/engine/em_trigger.c for each kind's rule). DEFAULT inside a tree means
 * Repeat(AfterEndOfWindow). Panes: EARLY before the watermark passes the window's end, one
 * ON_TIME pane (emitted even when empty), then LATE; a finished trigger closes the window for
 * that key (later values are dropped and counted in dropped_late). With session windows the
 * trigger states of merging sessions merge by Beam's rules (em_trigger.c). AFTER_PROCESSING_TIME
 * delays and alignments (Beam's TimestampTransforms) run on the job clock (synthetic or wall).
 */
typedef enum sd_trigger_kind {
    SD_TRIGGER_DEFAULT = 0,
    SD_TRIGGER_NEVER,
    SD_TRIGGER_ALWAYS,
    SD_TRIGGER_AFTER_COUNT,           /* count */
    SD_TRIGGER_AFTER_END_OF_WINDOW,   /* early, late (either may be NULL) */
    SD_TRIGGER_AFTER_PROCESSING_TIME, /* delay_ms */
    SD_TRIGGER_AFTER_ALL,             /* subs */
    SD_TRIGGER_AFTER_ANY,             /* subs */
    SD_TRIGGER_AFTER_EACH,            /* subs */
    SD_TRIGGER_REPEAT,                /* subs[0] */
    SD_TRIGGER_OR_FINALLY,            /* subs[0] main, subs[1] finally */
    /* Fires once the job clock is strictly past the first element's arrival; then finished
     * (Beam's AfterSynchronizedProcessingTime: one process has one processing time). */
    SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME
} sd_trigger_kind;

/*
 * One of Beam's TimestampTransforms for AFTER_PROCESSING_TIME, applied in order to the
 * processing time of the pane's first element: a delay adds delay_ms; an alignment rounds up to
 * the next instant t with (t - offset_ms) a multiple of period_ms (unchanged when aligned).
 */
typedef struct sd_time_transform {
    bool align;
    int64_t delay_ms;
    int64_t period_ms;
    int64_t offset_ms;
} sd_time_transform;

#define SD_TRIGGER_MAX_TIME_TRANSFORMS 8

typedef struct sd_trigger {
    sd_trigger_kind kind;
    int64_t count;
    int64_t delay_ms; /* AFTER_PROCESSING_TIME: applied before time_transforms */
    const sd_time_transform *time_transforms; /* AFTER_PROCESSING_TIME; copied */
    size_t n_time_transforms;                 /* at most SD_TRIGGER_MAX_TIME_TRANSFORMS */
    const struct sd_trigger *early;
    const struct sd_trigger *late;
    const struct sd_trigger *const *subs;
    size_t n_subs;
} sd_trigger;

/*
 * The windowing strategy of a PCollection. Only the GBK reads it (grouping, merging, output
 * time, lateness); the zero value is the global window with the default trigger.
 * FIXED: size_ms, offset_ms. SLIDING: size_ms, period_ms, offset_ms. SESSIONS: gap_ms.
 * allowed_lateness_ms >= 0; elements whose window's max timestamp + lateness is behind the
 * GBK's input watermark on arrival are dropped and counted.
 */
typedef struct sd_windowing {
    sd_windowfn_kind kind;
    int64_t size_ms;
    int64_t period_ms;
    int64_t offset_ms;
    int64_t gap_ms;
    sd_output_time output_time;
    int64_t allowed_lateness_ms;
    bool accumulating;
    /* OnTimeBehavior FIRE_IF_NONEMPTY: a triggered window's on-time pane is skipped when it
     * would be empty (the zero value is Beam's default, FIRE_ALWAYS). */
    bool on_time_if_nonempty;
    /* ClosingBehavior EMIT_ALWAYS: when a window expires (is garbage-collected) and its
     * trigger has not finished, a final pane (last) goes out even with nothing new since the
     * last firing: empty when discarding, every value so far when accumulating; ON_TIME if no
     * on-time pane went out yet, else LATE. The zero value is FIRE_IF_NONEMPTY (Java's
     * default): no final pane unless something new is left to emit. */
    bool closing_emit_always;
    /* A trigger finished by a pane cut on arrival (streaming, per-element evaluation) closes
     * the window for the key at once: what arrives after it, even in the same input epoch, is
     * dropped as late, instead of joining the window's tail (em_gbk.c). Beam's Go SDK: its
     * suite's trigger tests expect exactly per-element evaluation with nothing kept after the
     * finishing element (TestTriggerElementCount, TestTriggerOrFinally), as Java's
     * ReduceFnRunner gives when each element is its own batch. */
    bool no_closing_tail;
    const sd_trigger *trigger; /* NULL = default; copied by sd_em_add_pcollection */
} sd_windowing;

/* ------------------------------------------------------------------------------------------ */
/* Building the graph                                                                         */
/* ------------------------------------------------------------------------------------------ */

/*
 * Create an engine. cfg may be NULL (defaults).
 * OUT: out (caller owns; free with sd_em_destroy). Returns SD_OK or SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_em_create(const sd_em_config *cfg, sd_em **out);

/* Free the engine, every pending element and every outstanding bundle. NULL is a no-op. */
void sd_em_destroy(sd_em *em);

/*
 * Register a PCollection. wv_coder is the windowed-value coder of its elements as they travel
 * on the data plane (WINDOWED_VALUE or PARAM_WINDOWED_VALUE with a global or interval window
 * coder); the engine takes its own reference. ws may be NULL (global, default trigger); it is
 * copied (the trigger tree too). Returns SD_EEXIST for a duplicate id, SD_EINVAL for a bad
 * coder, strategy or trigger tree, SD_EUNIMPL for a custom window coder, SD_ESTATE after start.
 */
SD_MUST_CHECK sd_status sd_em_add_pcollection(sd_em *em,
                                              const char *id,
                                              const sd_coder *wv_coder,
                                              const sd_windowing *ws,
                                              sd_err *err);

typedef enum sd_stage_kind {
    SD_STAGE_SDK = 0,   /* fused user code, executed by an SDK worker */
    SD_STAGE_IMPULSE,   /* runner-side: one element, empty bytes (nested: the single byte 0x00),
                           at SD_TIME_MIN, global window, no-firing pane; then output wm MAX */
    SD_STAGE_GBK,       /* runner-side GroupByKey: one input, one output, KV input */
    SD_STAGE_FLATTEN,   /* runner-side: any number of inputs, one output */
    SD_STAGE_TESTSTREAM /* runner-side: outputs fed by the source driver (sd_em_set_source) */
} sd_stage_kind;

typedef enum sd_side_kind {
    SD_SIDE_ITERABLE = 0, /* beam:side_input:iterable:v1 */
    SD_SIDE_MULTIMAP      /* beam:side_input:multimap:v1 (the PCollection's elements are KVs) */
} sd_side_kind;

typedef struct sd_side_input_spec {
    const char *transform_id; /* the consuming PTransform inside the stage */
    const char *local_id;     /* its side-input tag */
    const char *pcollection;  /* the side PCollection */
    sd_side_kind kind;
    /* NULL, or when the stage's input is in the global window and the consuming transform's
     * main input is not: that main input's windowing. Its elements get their windows inside
     * the stage, and the engine works out from their timestamps which side windows they will
     * read (em_bundle.c, side-input readiness). Its trigger is ignored. */
    const sd_windowing *main_windowing;
} sd_side_input_spec;

typedef struct sd_timer_family_spec {
    const char *transform_id;
    const char *family_id;
    bool processing_time;        /* time domain PROCESSING_TIME (else EVENT_TIME) */
    const sd_coder *timer_coder; /* beam:coder:timer:v1 (key coder, window coder); ref taken */
} sd_timer_family_spec;

/*
 * A stage. All strings and arrays are copied. inputs: the main-input PCollections (SDK: at
 * most one; GBK: exactly one; FLATTEN: one or more; IMPULSE/TESTSTREAM: none). outputs: the
 * PCollections the stage produces. stateful: the stage holds user state or timers; it gets at
 * most one in-progress bundle per key and its input PCollection must be KV.
 */
typedef struct sd_stage_spec {
    const char *id;
    sd_stage_kind kind;
    const char *const *inputs;
    size_t n_inputs;
    const char *const *outputs;
    size_t n_outputs;
    const sd_side_input_spec *side_inputs;
    size_t n_side_inputs;
    bool stateful;
    const sd_timer_family_spec *timer_families;
    size_t n_timer_families;
    /*
     * OnWindowExpiration (ParDoPayload.on_window_expiration_timer_family_spec): the transform
     * and timer family to notify when a window expires, or both NULL. They must name one of
     * timer_families, an event-time one. For every (key, window) the stage has seen — an
     * input element or committed user state — the engine keeps a timer in that family with
     * fire = hold = the window's max timestamp and an empty tag; it fires when the stage's
     * input watermark passes the window's max timestamp + the input's allowed lateness, in a
     * bundle of its own key (so after all the window's data), before the window's state is
     * garbage-collected, and its hold keeps the stage's output watermark at or before the
     * window's max timestamp until that bundle completes. A (key, window) seen again after
     * its window expired gets no new timer.
     */
    const char *expiration_transform_id;
    const char *expiration_family_id;
    /*
     * Time-sorted input (ParDoPayload.requires_time_sorted_input, Beam's
     * @RequiresTimeSortedInput; a stateful SDK stage only). Each element is buffered until the
     * stage's input watermark passes its timestamp + the input's allowed lateness — after that
     * no element with an earlier timestamp can still arrive — and the stage then gets it, so
     * every key sees its elements in timestamp order (equal timestamps in arrival order).
     * Buffered elements hold the output watermark at the oldest one. An element whose
     * timestamp + allowed lateness is already behind the input watermark when it arrives is
     * dropped and counted in dropped_late, as Beam's StatefulDoFnRunner does.
     */
    bool time_sorted_input;
    /*
     * Keep each bundle's output under this many bytes (0 = no cap; an SDK stage only). The
     * engine learns how many output bytes an input element makes (em_bundle.c) and takes no
     * more elements than fit; a stage's first bundle has one element.
     */
    size_t max_output_bytes;
    /*
     * The SDK's data sink may resend (an SDK stage only; the executor sets it for the
     * TypeScript SDK 2.49). That sink encodes outputs into a buffer and, when an output takes
     * the buffer past 1,000,000 bytes, sends the whole buffer, replacing it only once the send
     * has been awaited; an input element's outputs are emitted synchronously, so every further
     * output of the same element to that sink sends the whole buffer again, its last output
     * included: a run of data pieces, each the one before it plus more. No piece of a sound
     * stream extends the one before it (a sink that started over with those bytes would have
     * flushed at the same output, at the same length), so for such a stage a piece on an
     * output that begins with all of the previous piece's bytes, and is longer, replaces it
     * (sd_em_bundle_output): the bundle's output is what the SDK meant to send, whatever the
     * sizes of its elements.
     */
    bool sink_resends;
    /*
     * Spread the stage's ready input over up to SD_EM_SPREAD_BUNDLES bundles that may run at
     * once (an SDK stage only; the executor sets it for a splittable DoFn's process stage,
     * whose elements are restrictions, and for a stage reading a Reshuffle's output, not for
     * stateful ones: each element may be long work, and a bundle's output reaches its
     * consumers only when the bundle commits). A bundle made while none of the
     * stage's bundles is in flight fixes the stage's share: ceil(pending elements /
     * SD_EM_SPREAD_BUNDLES), with the caps above still applying; the next bundles take as many
     * until one is made with none in flight again. sd_em_next_spread_bundle hands them out
     * beyond the executor's usual bundles in flight.
     */
    bool spread;
    /* With spread: the least encoded input a spread bundle takes (0: none), judged from the
     * ready elements' average size. The planner sets it for a stage after a Reshuffle, whose
     * elements may be cheap values (Python's Create reshuffles its values), not for
     * restrictions. */
    size_t spread_min_bytes;
} sd_stage_spec;

/* How many bundles a spread stage's ready input is cut into at most (sd_stage_spec.spread). */
#define SD_EM_SPREAD_BUNDLES 64

/* Turn every stage's spreading (sd_stage_spec.spread) off, for good: the executor does for a
 * job whose bundles a test splits, which must get their input in one bundle as the
 * reference runner gives it (a recorded schedule says so: sd_em_sched_header.no_spread). */
void sd_em_disable_spread(sd_em *em);

/*
 * Change an SDK stage's output cap (sd_stage_spec.max_output_bytes; 0 = none); it applies to
 * the bundles made from then on. SD_ENOTFOUND for an unknown stage.
 */
SD_MUST_CHECK sd_status sd_em_set_output_cap(sd_em *em, const char *stage, size_t max_bytes);

/*
 * Register a stage. PCollections it names must already be added. Returns SD_EEXIST (duplicate
 * id, or a second producer of a PCollection), SD_ENOTFOUND (unknown PCollection), SD_EINVAL
 * (wrong input/output counts for the kind, GBK or stateful over a non-KV coder), SD_ESTATE
 * after start.
 */
SD_MUST_CHECK sd_status sd_em_add_stage(sd_em *em, const sd_stage_spec *spec, sd_err *err);

/*
 * Dead-letter routing for late data: elements GBK stage gbk_id would drop as late (behind the
 * window's max timestamp + allowed lateness on arrival, or arriving after the window's trigger
 * finished) are delivered to pcollection instead, unchanged (the GBK input's KV element, its
 * timestamp, window and pane), and still counted in dropped_late. pcollection must be
 * registered, produced by no stage, and have the GBK input's element and window coders; the
 * GBK becomes its producer, so its watermark is the GBK's output watermark (its elements are
 * behind it: consumers that group or keep timers will see them as late too). Call before
 * sd_em_start, at most once per GBK. SD_ENOTFOUND (unknown stage or PCollection), SD_EINVAL
 * (not a GBK, coders differ, already routed), SD_EEXIST (the PCollection has a producer),
 * SD_ESTATE (started).
 */
SD_MUST_CHECK sd_status sd_em_set_late_output(sd_em *em,
                                              const char *gbk_id,
                                              const char *pcollection,
                                              sd_err *err);

/*
 * Window merging by the SDK, for a GBK stage gbk_id whose input's window fn is CUSTOM and
 * merges (Beam's MergeStatus NEEDS_MERGE: the runner cannot interpret the windows, the SDK's
 * beam:transform:merge_windows:v1 merges them). requests and results are registered
 * PCollections:
 *   requests: KV<bytes, iterable<W>> in the global window, W the GBK input's window coder. The
 *     GBK becomes its producer (its watermark is the GBK's output watermark); the SDK stage
 *     that reads it runs merge_windows. One element per key with windows not yet merged: the
 *     nonce (the key's nested encoding, as bytes) and every window the key holds now.
 *   results: KV<bytes, KV<iterable<W>, iterable<KV<W, iterable<W>>>>>, what merge_windows
 *     answers (the nonce, the windows left unmerged, and each merged window with the windows
 *     it consumed); delivered to it, the engine merges the key's groups (values, trigger state,
 *     pane counters) into each merged window, as it merges sessions. It must have no consumer
 *     stage (its producer, the merge stage, is registered later).
 * A key fires nothing while a merge of its windows is pending or in flight (so a merged window
 * fires once, with all its values); its values hold the GBK's input watermark meanwhile. A
 * result that is malformed, names an unknown nonce, or a window the key does not hold fails the
 * bundle that produced it. Call before sd_em_start, at most once per GBK. SD_ENOTFOUND,
 * SD_EINVAL (not a GBK, input not CUSTOM, coders not of those shapes), SD_EEXIST (requests has
 * a producer, or results a consumer), SD_ESTATE (started).
 */
SD_MUST_CHECK sd_status sd_em_set_merge_windows(sd_em *em,
                                                const char *gbk_id,
                                                const char *requests,
                                                const char *results,
                                                sd_err *err);

/*
 * The per-element late policy (YDB's, and Spark's state eviction) for stage stage_id, besides
 * Beam's rule (data is late when its window expired): every element whose timestamp is behind
 * the watermark of the PCollection it arrives on is late, even while its window is open. Late
 * elements are counted in the stage's dropped_late and dropped (a GBK routes them to its
 * dead-letter PCollection, when it has one). Only elements that arrive behind their
 * producer's watermark qualify: those a source (a TestStream, a splittable DoFn with a
 * watermark estimate) emits after its watermark passed them, or whose timestamps a DoFn moved
 * back; in batch (sd_em_config.bounded) watermarks stay at the start until the data is
 * complete, so nothing is. Call before sd_em_start. SD_ENOTFOUND (unknown stage), SD_EINVAL
 * (a stage that consumes no elements: impulse, TestStream), SD_ESTATE (started).
 */
SD_MUST_CHECK sd_status sd_em_set_drop_behind_watermark(sd_em *em,
                                                        const char *stage_id,
                                                        sd_err *err);
/*
 * The same policy where the transform it names is fused after the element's producer (a
 * splittable source's records windowed in its own stage): every element an SDK stage emits
 * into PCollection pcollection with a timestamp behind that PCollection's watermark (its
 * producer's output watermark before the bundle commits: a record behind the source's own
 * watermark estimate) is dropped whole, in every window, and counted in the producer's
 * dropped_late (once per windowed value it was emitted as) — what the policy does to it at
 * the entry of a stage of its own. Call before
 * sd_em_start. SD_ENOTFOUND (unknown PCollection), SD_EINVAL (not produced by an SDK stage),
 * SD_ESTATE (started).
 */
SD_MUST_CHECK sd_status sd_em_set_drop_behind_watermark_output(sd_em *em,
                                                               const char *pcollection,
                                                               sd_err *err);

/*
 * Validate the wiring (every consumed PCollection has a producer, no cycles) and prime the
 * impulses. After this no stage or PCollection may be added.
 */
SD_MUST_CHECK sd_status sd_em_start(sd_em *em, sd_err *err);

/* ------------------------------------------------------------------------------------------ */
/* The source hook: a driver for the TESTSTREAM stages (teststream/ts_drive.h is the one)     */
/* ------------------------------------------------------------------------------------------ */

/*
 * The engine knows a TESTSTREAM stage only as a runner-side stage whose outputs are held at the
 * minimum until a driver says otherwise. The driver (TestStream's event model and its rules for
 * several streams live in teststream/, not here) is called on the engine's thread:
 *   pending(ctx): the driver has a step left (while it has, the job is not done, not stuck,
 *                 and the synthetic clock does not jump);
 *   step(ctx, em, err): play one step. Called only at quiescence (nothing in flight, no SDK
 *                 bundle ready, due processing-time work done), and only while pending; every
 *                 step counts as progress (sd_em_check_livelock). Inside it, and only there,
 *                 the driver may call sd_em_source_deliver / _watermark / _finish /
 *                 _advance_clock. An error fails sd_em_next_bundle and poisons the engine.
 *   drain(ctx):   sd_em_drain was called: drop what was not read yet (may be NULL);
 *   destroy(ctx): at sd_em_destroy (may be NULL).
 */
typedef struct sd_em_source {
    bool (*pending)(void *ctx);
    sd_status (*step)(void *ctx, sd_em *em, sd_err *err);
    void (*drain)(void *ctx);
    void (*destroy)(void *ctx);
    /* May be NULL (always ready). A live source (events from a service) has a step left but
     * may not have it yet: false makes the engine wait at quiescence (sd_em_waiting: neither
     * done nor stuck, and the clock does not jump); the executor calls sd_em_next_bundle
     * again when the source has something. */
    bool (*ready)(void *ctx);
    /* May be NULL. true when the next step moves the job clock, by *advance_ms (SD_TIME_MAX:
     * to the end of time): the pause gate (em_pause.h) judges the step by it. */
    bool (*peek_clock)(void *ctx, int64_t *advance_ms);
} sd_em_source;

/*
 * Install the source driver: at most one, before sd_em_start. ops is copied. On SD_OK the
 * engine owns ctx (ops->destroy(ctx) at sd_em_destroy); on error it does not. SD_EINVAL (NULL
 * em or ops, or no pending/step), SD_EEXIST (a driver is installed), SD_ESTATE (started).
 */
SD_MUST_CHECK sd_status sd_em_set_source(sd_em *em,
                                         const sd_em_source *ops,
                                         void *ctx,
                                         sd_err *err);

/*
 * Resolve pcollection, an output of the TESTSTREAM stage stage_id. OUT: out_stage = the
 * stage's index, out_pcoll = the PCollection's index (registration order, as sd_em_stage_info
 * and sd_em_pcollection_info count), the handles of the calls below. SD_ENOTFOUND naming the
 * unknown stage or output, SD_EINVAL for NULL arguments.
 */
SD_MUST_CHECK sd_status sd_em_source_output(const sd_em *em,
                                            const char *stage_id,
                                            const char *pcollection,
                                            size_t *out_stage,
                                            size_t *out_pcoll,
                                            sd_err *err);

/*
 * During step: deliver elements[i] (nested encodings with the PCollection's element coder) at
 * timestamps[i] (in Beam's range), global window, no-firing pane, into PCollection pcoll (an
 * index from sd_em_source_output). Copies the bytes. SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_em_source_deliver(sd_em *em,
                                             size_t pcoll,
                                             const sd_bytes *elements,
                                             const sd_time *timestamps,
                                             size_t n,
                                             sd_err *err);

/* During step: PCollection pcoll's watermark becomes the larger of it and wm. */
void sd_em_source_watermark(sd_em *em, size_t pcoll, sd_time wm);

/* During step: every output of stage (an index from sd_em_source_output) goes to the end of
 * time: the source is over. */
void sd_em_source_finish(sd_em *em, size_t stage);

/* During step: the job clock moves forward by ms >= 0 (SD_TIME_MAX or more: to the end of
 * time), in either clock mode. */
void sd_em_source_advance_clock(sd_em *em, int64_t ms);

/* ------------------------------------------------------------------------------------------ */
/* Scheduling                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/*
 * Run runner-side stages (impulse, GBK incl. session merging, flatten, the source driver's steps
 * at quiescence, synthetic clock jumps) until nothing changes, then hand out the next ready SDK
 * bundle. Stages are tried round-robin in registration order, starting after the stage that
 * got the last bundle; with a non-zero sd_em_config.schedule_seed the seeded generator
 * shuffles that order anew on every scheduling pass.
 * OUT: out = a bundle (engine-owned; valid until sd_em_complete_bundle/sd_em_fail_bundle), or
 * NULL when nothing is ready now. Returns SD_OK, SD_ENOMEM, or SD_ESTATE when not started or
 * the engine was poisoned by an earlier SD_ENOMEM during a commit.
 */
SD_MUST_CHECK sd_status sd_em_next_bundle(sd_em *em, sd_bundle **out, sd_err *err);

/*
 * A further bundle of a stage that spreads its input (sd_stage_spec.spread), or NULL: for the
 * executor once its usual bundles in flight are out, so such a stage's elements run side by
 * side. Runs nothing runner-side (call sd_em_next_bundle first); same returns.
 */
SD_MUST_CHECK sd_status sd_em_next_spread_bundle(sd_em *em, sd_bundle **out, sd_err *err);

/* Bundle id ("<stage>-<n>"), stage id, and the main input PCollection id (every SDK stage
 * has exactly one main input, so never NULL, even for a bundle of timers only). Borrowed. */
const char *sd_em_bundle_id(const sd_bundle *b);
const char *sd_em_bundle_stage(const sd_bundle *b);
const char *sd_em_bundle_input_pcollection(const sd_bundle *b);

/*
 * The user-state epoch of the bundle's stage, 0 when the stage is not stateful. It changes
 * whenever the stage's committed user state changes other than by the commit of a bundle's
 * own writes: the state of expired windows dropped (sd__state_gc, also as a drain moves the
 * watermarks), a bundle of the stage failed (an SDK may have cached writes that were never
 * committed); it stays the same otherwise. So while it stays the same, an SDK that kept the
 * stage's user state from earlier bundles (the executor's Fn API cache token) holds exactly
 * what the engine holds.
 */
uint64_t sd_em_bundle_state_epoch(const sd_bundle *b);

/*
 * The SDK's processing-time base for this bundle: the wall-clock ms its DoFns saw as "now"
 * (an SDK that holds processing time still for a bundle reports it with the bundle's
 * response). On the synthetic clock the processing-time timers the bundle sets are rebased
 * from it (fire' = clock_now + (fire - base)) instead of from the wall time at completion, so
 * a timer set "one hour from now" fires exactly one hour later on the job clock, every run.
 * Ignored on the wall clock. Call before sd_em_complete_bundle.
 */
void sd_em_bundle_set_processing_time_base(sd_bundle *b, sd_time base);

/*
 * The main input: concatenated windowed values (one window each), encoded with the input
 * PCollection's wv coder, in timestamp order. Borrowed; may be empty (timer-only bundle).
 * sd_em_bundle_input_count is the number of values in it (a later split does not change either).
 */
sd_bytes sd_em_bundle_input(const sd_bundle *b);
/*
 * The input's elements [*next, upto) in pieces of whole elements, for transports that bound a
 * message's size: each piece is at most max_bytes unless one element alone is larger (then it
 * is a piece of its own). Start with *next = 0; returns false when no piece is left. With
 * upto = SIZE_MAX the pieces, in order, are exactly sd_em_bundle_input().
 */
bool sd_em_bundle_input_piece(const sd_bundle *b,
                              size_t *next,
                              size_t upto,
                              size_t max_bytes,
                              sd_bytes *piece);
size_t sd_em_bundle_input_count(const sd_bundle *b);

/*
 * Timers to deliver, grouped per (transform, family), each group's bytes encoded with that
 * family's timer coder. OUT parameters are borrowed.
 */
size_t sd_em_bundle_n_timer_inputs(const sd_bundle *b);
void sd_em_bundle_timer_input(const sd_bundle *b,
                              size_t i,
                              const char **transform_id,
                              const char **family_id,
                              sd_bytes *timers);

/* The stage's input watermark when the bundle was made. */
sd_time sd_em_bundle_watermark(const sd_bundle *b);

/* ------------------------------------------------------------------------------------------ */
/* Bundle results (callable incrementally while the bundle runs)                              */
/* ------------------------------------------------------------------------------------------ */

/*
 * Data the SDK wrote to one of the stage's outputs: a slice of the stream of windowed values
 * encoded with the PCollection's wv coder (an element may straddle calls). Buffered, and
 * checked as far as it decodes whole (bad bytes are reported by the completion, as if checked
 * only there); applied at completion. Returns SD_ENOTFOUND when pcollection is not an output of
 * the bundle's stage (SD_ENOMEM when out of memory).
 */
SD_MUST_CHECK sd_status
sd_em_bundle_output(sd_em *em, sd_bundle *b, const char *pcollection, sd_bytes data, sd_err *err);

/*
 * Timers the SDK set or cleared: a slice of the family's timer stream. Buffered; decoded at
 * completion, where the last write per (key, family, tag, window) wins. Processing-time firing
 * times (absolute on the SDK's wall clock) are moved onto the job clock on receipt:
 * fire' = clock_now + (fire - wall_now). A processing-time timer set for a window that has
 * already expired at the stage's input watermark is dropped (and counted), so a self-re-arming
 * one cannot keep a finished job alive. SD_ENOTFOUND for a family the stage did not declare.
 */
SD_MUST_CHECK sd_status sd_em_bundle_timers(sd_em *em,
                                            sd_bundle *b,
                                            const char *transform_id,
                                            const char *family_id,
                                            sd_bytes data,
                                            sd_err *err);

/*
 * A residual root (SDF checkpoint / ProcessContinuation): wv_element is one windowed value
 * encoded with the bundle's input PCollection wv coder (copied). delay_ms > 0 parks it until
 * the job clock reaches now + delay; parked residuals hold the stage's input watermark. When
 * the residual holds the stage's output watermark at output_watermark when
 * has_output_watermark, else at its own timestamp, until a bundle that processed it completes:
 * while residuals are outstanding the output watermark follows the minimum of their holds, of
 * the upstream watermark and of the stage's other unprocessed elements, not the input
 * watermark the residuals' timestamps keep back (em_time.c "Residual holds").
 */
SD_MUST_CHECK sd_status sd_em_bundle_residual(sd_em *em,
                                              sd_bundle *b,
                                              sd_bytes wv_element,
                                              int64_t delay_ms,
                                              bool has_output_watermark,
                                              sd_time output_watermark,
                                              sd_err *err);

/*
 * Channel split: input elements from index first_residual_element on were not and will not be
 * processed by the SDK; they go back to pending now (in a stateful stage their keys stay
 * locked until this bundle ends). SD_EINVAL when the index is past the input, or above an
 * earlier split's index (splits only shrink the primary).
 */
SD_MUST_CHECK sd_status sd_em_bundle_split(sd_em *em,
                                           sd_bundle *b,
                                           size_t first_residual_element,
                                           sd_err *err);

/*
 * Commit the bundle: decode outputs and timers, re-pend residuals, apply user state, release
 * the bundle's inputs and holds, update watermarks. Frees the bundle in every case.
 * Bad SDK bytes: SD_EPROTO, and the bundle is failed as by sd_em_fail_bundle (nothing of it is
 * committed; the job should fail). SD_ENOMEM during the commit poisons the engine (every later
 * call fails with SD_ESTATE; destroy it).
 */
SD_MUST_CHECK sd_status sd_em_complete_bundle(sd_em *em, sd_bundle *b, sd_err *err);

/* Drop the bundle's tentative results; its input elements and fired timers go back to pending.
 * Frees the bundle. */
void sd_em_fail_bundle(sd_em *em, sd_bundle *b);

/* ------------------------------------------------------------------------------------------ */
/* State API, during a bundle                                                                 */
/* ------------------------------------------------------------------------------------------ */

/*
 * What a State API call addresses, as the SDK's StateKey names it. Borrowed for the call: the
 * engine copies what it keeps. The byte fields are the encodings the SDK sends, untouched.
 */
typedef struct sd_em_side_ref {
    const char *transform_id;  /* the transform that reads the side input */
    const char *side_input_id; /* its local name for the side input */
    sd_bytes window;           /* nested window encoding (the side PCollection's window coder) */
} sd_em_side_ref;

typedef struct sd_em_state_ref {
    const char *transform_id; /* the stateful transform */
    const char *state_id;     /* its user state id */
    sd_bytes window;          /* nested window encoding (the main input's window coder) */
    sd_bytes key;             /* nested key encoding, as the SDK sends it */
} sd_em_state_ref;

/*
 * Side input ref->side_input_id of ref->transform_id for the bundle's stage, in ref->window.
 * key NULL: iterable side input — the concatenated element encodings in that window. key
 * non-NULL: multimap — the concatenated value encodings of elements whose key encoding equals
 * *key. Appends to out. SD_ENOTFOUND for an unknown (transform, side input), SD_EINVAL when
 * the access does not match the side input's kind, SD_EPROTO for bad window bytes.
 */
/*
 * The coder of the values sd_em_side_input_get returns for side input side_input_id of
 * transform_id at the bundle's stage: the side PCollection's element coder (iterable), its
 * value coder (multimap, keyed), or with keys its key coder (sd_em_side_input_keys). Borrowed;
 * NULL when there is no such side input or the element coder is not a KV for a multimap.
 */
const sd_coder *sd_em_side_input_coder(const sd_em *em,
                                       const sd_bundle *b,
                                       const char *transform_id,
                                       const char *side_input_id,
                                       bool keyed,
                                       bool keys);

SD_MUST_CHECK sd_status sd_em_side_input_get(sd_em *em,
                                             const sd_bundle *b,
                                             const sd_em_side_ref *ref,
                                             const sd_bytes *key,
                                             sd_buf *out,
                                             sd_err *err);

/* Multimap side input keys in ref->window: the distinct key encodings, sorted bytewise,
 * concatenated into out. */
SD_MUST_CHECK sd_status sd_em_side_input_keys(sd_em *em,
                                              const sd_bundle *b,
                                              const sd_em_side_ref *ref,
                                              sd_buf *out,
                                              sd_err *err);

/*
 * User state of ref (transform, state id, window, key) as the bundle sees it (committed plus
 * the bundle's own tentative changes). map_key NULL: bag state (or all values of a multimap);
 * non-NULL: the values under that multimap key. Appends the concatenated values to out.
 * SD_ESTATE if the bundle's stage is not stateful, SD_EPROTO for bad window bytes. Writes
 * become visible to other bundles only when this one completes.
 */
SD_MUST_CHECK sd_status sd_em_user_state_get(sd_em *em,
                                             sd_bundle *b,
                                             const sd_em_state_ref *ref,
                                             const sd_bytes *map_key,
                                             sd_buf *out,
                                             sd_err *err);

/* Append data (concatenated nested values) to bag state, or under *map_key of a multimap. */
SD_MUST_CHECK sd_status sd_em_user_state_append(sd_em *em,
                                                sd_bundle *b,
                                                const sd_em_state_ref *ref,
                                                const sd_bytes *map_key,
                                                sd_bytes data,
                                                sd_err *err);

/* Clear bag state / the whole multimap (map_key NULL) or one multimap key. */
SD_MUST_CHECK sd_status sd_em_user_state_clear(sd_em *em,
                                               sd_bundle *b,
                                               const sd_em_state_ref *ref,
                                               const sd_bytes *map_key,
                                               sd_err *err);

/*
 * Multimap user state keys: the keys with at least one value, sorted bytewise, concatenated. A
 * key to which a value was appended is present even when that value encoded in zero bytes.
 */
SD_MUST_CHECK sd_status sd_em_user_state_keys(sd_em *em,
                                              sd_bundle *b,
                                              const sd_em_state_ref *ref,
                                              sd_buf *out,
                                              sd_err *err);

/*
 * Multimap user state entries (the State API's MultimapEntriesUserState): for every map key
 * with at least one value, sorted bytewise, appends to out the key bytes as the SDK sent them
 * (its nested encoding) followed by the values as Beam's IterableCoder writes them: a 4-byte
 * big-endian count, then the values' nested encodings in append order. value_coder (borrowed)
 * splits the stored bytes into values; SD_EPROTO when they do not decode with it or it
 * encodes a value in zero bytes (then the count is unknowable). Errors as for
 * sd_em_user_state_get.
 */
SD_MUST_CHECK sd_status sd_em_user_state_entries(sd_em *em,
                                                 sd_bundle *b,
                                                 const sd_em_state_ref *ref,
                                                 const sd_coder *value_coder,
                                                 sd_buf *out,
                                                 sd_err *err);

/*
 * Ordered-list user state (beam:user_state:ordered_list:v1) of ref, as the bundle sees it;
 * tentative until the bundle completes, like bag state.
 * Entries travel as on the State API: each is kv(varint sort key, length_prefix(value)), the
 * sort key an int64 (two's complement in the varint, as Beam's VarLongCoder writes it).
 * Ranges are half-open sort-key ranges [start, end) (an OrderedListRange); start >= end is
 * empty.
 *
 * get: appends to out the entries with start <= sort key < end, in sort-key order (equal keys
 *      in the order they were appended).
 * append: data is a concatenation of entries; all are added, or none (SD_EPROTO for bytes
 *      that are not whole entries; after SD_ENOMEM some may be, so fail the bundle).
 * clear: removes the entries with start <= sort key < end.
 * Errors as for sd_em_user_state_get.
 */
SD_MUST_CHECK sd_status sd_em_ordered_list_get(sd_em *em,
                                               sd_bundle *b,
                                               const sd_em_state_ref *ref,
                                               int64_t start,
                                               int64_t end,
                                               sd_buf *out,
                                               sd_err *err);

SD_MUST_CHECK sd_status sd_em_ordered_list_append(sd_em *em,
                                                  sd_bundle *b,
                                                  const sd_em_state_ref *ref,
                                                  sd_bytes data,
                                                  sd_err *err);

SD_MUST_CHECK sd_status sd_em_ordered_list_clear(sd_em *em,
                                                 sd_bundle *b,
                                                 const sd_em_state_ref *ref,
                                                 int64_t start,
                                                 int64_t end,
                                                 sd_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Termination, time and observation                                                          */
/* ------------------------------------------------------------------------------------------ */

/*
 * Drain (JobService.Drain): stop reading the job's sources and let everything already read
 * finish. The source driver drops what it has not played yet (the TestStream driver ends every
 * stream: its outputs' watermarks go to the end of time at the next quiescence); parked
 * residuals are released at once and later residuals are not parked (a draining job does
 * not wait for a resume delay); the executor runs a splittable stage's work through the
 * SDK's truncation from now on (sd_em_draining), so an unbounded restriction ends at its
 * next checkpoint. Watermarks then advance as the remaining data completes: every window
 * and event-time timer fires, and nothing already read is lost. Processing-time timers keep
 * their meaning (the clock still runs). Idempotent; valid before sd_em_start too.
 */
void sd_em_drain(sd_em *em);

/* sd_em_drain was called. */
bool sd_em_draining(const sd_em *em);

/* Started, and nothing pending, parked, scheduled or in progress anywhere. */
bool sd_em_done(const sd_em *em);

/* Number of SDK bundles handed out and not yet completed or failed. */
size_t sd_em_in_progress(const sd_em *em);

/*
 * Call when sd_em_next_bundle returned NULL and nothing is in progress. If the engine is
 * quiescent (nothing in progress, nothing ready, no future clock event) but work is still
 * pending, returns SD_ESTATE and appends a per-stage dump (watermarks, pending counts, holds,
 * timers) to dump. Otherwise SD_OK (done, or only waiting on time).
 */
SD_MUST_CHECK sd_status sd_em_check_stuck(const sd_em *em, sd_buf *dump);

/*
 * Live-locks: bundles keep running but nothing observable moves (an SDF that resumes without
 * claiming, a processing-time timer that re-arms itself without output). The engine counts
 * the SDK bundles completed in a row without progress, where progress is any of:
 *   - a watermark moved (any stage's input or output watermark, hence any PCollection's);
 *   - an element was delivered to a PCollection (SDK output, GBK pane, flatten, TestStream);
 *   - a TestStream event was played, or the job started draining;
 *   - a bundle finished an input element: it handed back fewer residuals than it took
 *     elements, or a residual that differs from its input (timestamp, window or bytes: the
 *     restriction moved, a claim was made);
 *   - a bundle retired a timer: fewer stored timers after it than before plus those it fired
 *     (a timer fired and not set again, or a stored one cleared);
 *   - an event-time timer set to a different time (than the stored one of that identity, or
 *     after every event-time timer the bundle fired);
 *   - committed user state changed (bag bytes differ after a clear, anything appended, a
 *     multimap or ordered-list write);
 *   - wall clock only: a residual parked with a delay, or a processing-time timer set in the
 *     future (the job then sleeps until real time passes, it does not spin).
 * On the synthetic clock a resume delay or processing-time timer is jumped over at once, and
 * a residual an SDK without a processing-time base hands back unchanged, having output
 * nothing, runs again at once without moving the clock, so an SDK that waits for real time
 * (Python's PeriodicImpulse and Go's periodic.Impulse compare their next tick with the wall
 * clock and defer, unchanged, until then) spins until that time really comes. That is
 * waiting, not a live-lock: only bundles completed after the latest wall-clock time the first
 * cfg.livelock_rounds bundles of the run asked to be woken at count towards the bound.
 * Not progress: the synthetic clock jumping, a residual handed back unchanged (re-parked or
 * not), a processing-time timer re-armed relative to the clock, a bundle failed and retried.
 * Counting costs a few stores per delivered element and a compare per residual.
 *
 * Call after each completed bundle. When cfg.livelock_rounds > 0 and that many bundles in a
 * row made no progress after the wait they asked for was over (above), returns SD_ESTATE and
 * appends to dump (NULL: no text) a first line naming the count, the bound and the stage of
 * the last idle bundle, then the per-stage dump (sd_em_dump). Otherwise SD_OK.
 */
SD_MUST_CHECK sd_status sd_em_check_livelock(const sd_em *em, sd_buf *dump);

/* SDK bundles completed in a row without progress so far (see sd_em_check_livelock). */
uint64_t sd_em_idle_bundles(const sd_em *em);

/* Append the per-stage state (watermarks, holds, pending counts, timers, side inputs), one
 * line a stage in topological order, whatever the engine is doing. */
SD_MUST_CHECK sd_status sd_em_dump(const sd_em *em, sd_buf *dump);

/* "sdk", "impulse", "gbk", "flatten" or "teststream" (static). */
const char *sd_em_stage_kind_name(sd_stage_kind k);

/* The job's processing-time clock now. */
sd_time sd_em_clock_now(const sd_em *em);

/*
 * When to call sd_em_next_bundle again with nothing in flight. Wall-clock mode: OUT: wall_ms =
 * when the earliest pending processing-time event is due. Synthetic clock: when the last
 * sd_em_next_bundle napped (a source waiting for real time; em.c), the wall-clock time it
 * waits for. Returns false when there is no such time.
 */
bool sd_em_next_wakeup(const sd_em *em, sd_time *wall_ms);

/*
 * Synthetic clock: let real time count while bundles run slowly. Moves the job clock forward
 * to clock_ms (never back); what becomes due runs at the next sd_em_next_bundle. The executor
 * calls it while a wave of bundles has been in flight longer than its patience, so a
 * processing-time event shorter than the real time a slow bundle takes happens during that
 * bundle, as on a real runner, while fast pipelines keep the jump-only clock. Returns false,
 * moving nothing, on the wall clock and while a TestStream still has events (its clock is the
 * stream's alone).
 */
bool sd_em_clock_follow(sd_em *em, sd_time clock_ms);

/* OUT: clock_ms = the job-clock time of the earliest pending processing-time event (a
 * processing-time timer, a trigger's deadline, a parked residual), in either clock mode.
 * Returns false when there is none. */
bool sd_em_next_pt_due(const sd_em *em, sd_time *clock_ms);

typedef struct sd_em_stage_stats {
    const char *id; /* borrowed */
    sd_stage_kind kind;
    sd_time input_wm;
    sd_time output_wm;
    size_t pending;         /* elements waiting (data + event-time timers + parked residuals) */
    size_t in_progress;     /* bundles in flight */
    uint64_t dropped_late;  /* elements dropped as late (GBK, routed ones included; and
                             * time-sorted SDK stages) */
    uint64_t bundles;       /* SDK bundles made so far */
    uint64_t resent_pieces; /* data pieces an SDK sent again and the engine dropped
                             * (sd_stage_spec.sink_resends) */
    sd_time hold;           /* the earliest output watermark hold (SD_TIME_MAX: none) */
    size_t et_timers;       /* event-time timers stored */
    size_t pt_timers;       /* processing-time timers stored */
} sd_em_stage_stats;

size_t sd_em_n_stages(const sd_em *em);

/* The memory budget's spill file (em_spill.c): bytes ever written, and the most it held at
 * once. Both 0 when the job never went over its budget. */
void sd_em_spill_stats(const sd_em *em, uint64_t *written, uint64_t *peak);

/* Stats of stage i (registration order). */
void sd_em_stage_info(const sd_em *em, size_t i, sd_em_stage_stats *out);

/*
 * Progress of PCollection i (registration order), for metrics while a job runs: what the runner
 * has delivered into it so far — windowed values (an element in several windows counts once per
 * window) and the bytes of their element encodings. Only PCollections the runner sees (stage
 * inputs and outputs) are here; those inside a fused stage are the SDK's to count.
 */
typedef struct sd_em_pcoll_stats {
    const char *id; /* borrowed */
    uint64_t elements;
    uint64_t bytes;
    uint64_t min_bytes; /* 0 when elements == 0 */
    uint64_t max_bytes;
    sd_time watermark; /* its producer's output watermark */
} sd_em_pcoll_stats;

size_t sd_em_n_pcollections(const sd_em *em);
void sd_em_pcollection_info(const sd_em *em, size_t i, sd_em_pcoll_stats *out);

/* A PCollection's watermark (its producer's output watermark). SD_ENOTFOUND if unknown. */
SD_MUST_CHECK sd_status sd_em_pcollection_watermark(const sd_em *em, const char *id, sd_time *out);

/* ------------------------------------------------------------------------------------------ */
/* Recording and replaying a schedule                                                         */
/* ------------------------------------------------------------------------------------------ */

/*
 * Report a decision made outside the engine (the executor's SPLIT) to the engine's decision
 * hook, numbered in the same sequence as the engine's own. SD_OK without a hook; else what the
 * hook returned.
 */
SD_MUST_CHECK sd_status sd_em_decide(sd_em *em, const sd_em_decision *d, sd_err *err);

/*
 * A schedule: the decisions of one run, recorded, or loaded from a recording to be replayed.
 * Install it as the engine's hook (cfg.on_decision = sd_em_sched_decide, cfg.decision_ctx =
 * the schedule). Recording appends every decision; replaying checks each decision against the
 * recording's step of the same number and fails at the first that differs, naming the step,
 * the recorded decision and this run's. A replayed run reproduces the recording because the
 * engine is deterministic for the same job, inputs, seed, shape and caps (the header carries
 * them: configure the engine from sd_em_sched_header_get) and the same SDK answers; what
 * differs (another stage ready, another element set, an SDK split or output the recording
 * does not have) is a divergence, never followed silently.
 *
 * The file (text, one record a line; '#' lines are comments):
 *
 *     sundial-schedule v1
 *     seed 42                          sd_em_config.schedule_seed
 *     shape one_key                    greedy | one_key | one_element
 *     max_bundle_elements 0            the caps (0: none)
 *     max_bundle_bytes 262144
 *     max_inflight 4                   the executor's bundles in flight (0: not recorded)
 *     memory_limit 1073741824          sd_em_config.memory_limit (optional; absent: 0)
 *     no_spread 1                      the run disabled spreading (optional; absent: 0)
 *     step 1 bundle s2-1 stage=s2 elements=3 timers=0 digest=89abcdef01234567
 *     step 2 split s2-1 asked=0.5 answered=2 answer=0a1b...  (answered=none: the SDK declined;
 *                                      answer: sd_em_decision.answer in hex, when it has one)
 *     step 3 commit s2-1 primary=2 residuals=0 digest=0123456789abcdef
 *     step 4 teststream clock=+0
 *     step 5 clock +3600000            (+inf: the end of time)
 *     step 6 fail s3-2
 *     end 6
 *
 * Ids are written with bytes <= 0x20, '%' and 0x7f as %XX. Steps are numbered from 1 and must
 * follow each other; "end N" closes a complete recording.
 */
typedef struct sd_em_sched sd_em_sched;

typedef struct sd_em_sched_header {
    uint64_t seed;
    int shape; /* SD_SHAPE_* */
    uint64_t max_bundle_elements;
    uint64_t max_bundle_bytes;
    uint64_t max_inflight;
    uint64_t memory_limit; /* what is spilled decides which elements a bundle gets */
    uint64_t no_spread;    /* 1: the run disabled spreading (sd_em_disable_spread) */
} sd_em_sched_header;

/* Note in a recorder's header that the run disabled spreading. */
void sd_em_sched_set_no_spread(sd_em_sched *s);

/* "greedy", "one_key", "one_element" (static; "?" for anything else). */
const char *sd_em_shape_name(int shape);

/* A recorder with header h. OUT: out (free with sd_em_sched_destroy). SD_ENOMEM. */
SD_MUST_CHECK sd_status sd_em_sched_record(const sd_em_sched_header *h, sd_em_sched **out);

/*
 * A replayer of recording text (copied). SD_EPROTO with a message naming the line and what
 * was expected for a file that is not a complete version-1 recording. OUT: out.
 */
SD_MUST_CHECK sd_status sd_em_sched_replay(sd_bytes text, sd_em_sched **out, sd_err *err);

void sd_em_sched_destroy(sd_em_sched *s);

bool sd_em_sched_replaying(const sd_em_sched *s);
const sd_em_sched_header *sd_em_sched_header_get(const sd_em_sched *s);

/* Decisions recorded or replayed so far. */
uint64_t sd_em_sched_steps(const sd_em_sched *s);

/* The decision hook (ctx: the schedule). Replaying, SD_ESTATE at the first divergence, and
 * at every call after it, with the same message. */
SD_MUST_CHECK sd_status sd_em_sched_decide(void *ctx, const sd_em_decision *d, sd_err *err);

/* The first divergence's message (borrowed), or NULL. */
const char *sd_em_sched_diverged(const sd_em_sched *s);

/* A runner-initiated split as a recording has it (sd_em_sched_splits_for). */
typedef struct sd_em_sched_split {
    double fraction;     /* asked for */
    int64_t first_split; /* the first residual element answered; -1 = none */
    sd_buf answer;       /* the answer kept (sd_em_decision.answer), empty if none; owned */
} sd_em_sched_split;

/*
 * Replaying: the runner-initiated splits the recording has for bundle, in order, so the
 * executor applies the same splits to the same bundle. OUT: *n of them (0 when recording);
 * the first max in out (their answers owned: sd_buf_deinit each, also on failure). SD_EPROTO
 * (err names the step) for a split line that is not "split <id> asked=<fraction>
 * answered=<n>|none[ answer=<hex>]"; SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_em_sched_splits_for(const sd_em_sched *s,
                                               const char *bundle,
                                               sd_em_sched_split *out,
                                               size_t max,
                                               size_t *n,
                                               sd_err *err);

/*
 * The run ended. Replaying: SD_ESTATE (err names the step) when it diverged or ended before
 * the recording did. Recording: appends the file's text to out (NULL: none).
 */
SD_MUST_CHECK sd_status sd_em_sched_finish(sd_em_sched *s, sd_buf *out, sd_err *err);

#endif
