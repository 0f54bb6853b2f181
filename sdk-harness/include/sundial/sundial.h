/*
 * Sundial C SDK: write Beam pipelines and their tests in C.
 *
 * A program builds a pipeline with the sd_* construction calls below, then runs it with
 * sd_pipeline_run(): by default on an embedded Sundial runner started inside the process (test
 * mode, synthetic clock, loopback worker, a free port), or on any Beam job server given by
 * endpoint. User code is plain C: DoFns and CombineFns are structs of callbacks registered by
 * name at start-up, and a pipeline refers to them by that name plus a configuration blob, so the
 * same binary can also serve as the SDK worker a runner starts (see sd_sdk_main).
 *
 * Elements are bytes. Every PCollection has a coder (one of Beam's standard coders; user types
 * travel as bytes); DoFns see each element as its *nested* encoding with that coder and emit
 * nested encodings. The sd_read_* / sd_enc_* helpers cover the scalar coders; a KV is its key's
 * nested encoding followed by its value's. The typed helpers (sd_apply_map, sd_apply_flat_map,
 * sd_apply_filter, sd_read_text, sd_write_text, sd_collect) do that decoding for strings,
 * integers, doubles, bools, bytes and KVs of them, so most programs never touch bytes.
 *
 * This header and the ones it includes (<sundial/...>: status and errors, bytes and buffers,
 * time, windows and panes, coder handles) are the whole public interface; they include
 * nothing but each other and the C library. Link libsundial (CMake Sundial::sundial,
 * pkg-config sundial) and, to run pipelines in-process, the embedded runner
 * (Sundial::embedded, sundial-embedded; see <sundial/embedded.h>).
 *
 * Stateful DoFns (a KV input plus state and timer specs in sd_pardo_spec) keep bag, value,
 * combining, map, set or ordered-list state per key and window through the runner's State
 * API, set event- or processing-time timers with dynamic tags and output timestamps, and may
 * ask to be told when a window expires (sd_dofn.on_window_expiration); on Sundial's test-mode
 * clock an hour-long processing-time timer fires at once.
 *
 * Splittable DoFns (sd_dofn.initial_restriction) read an offset range piecewise, claim offsets
 * with sd_try_claim, checkpoint themselves with sd_resume(delay), and report an output
 * watermark from a watermark estimator (sd_pardo_spec.watermark); see "Splittable DoFns".
 *
 * Time: windowing strategies carry Beam's whole trigger tree (sd_trigger_*), accumulation mode,
 * output time and allowed lateness; DoFns see each element's pane (sd_ctx_pane). A TestStream
 * (sd_teststream_*) scripts elements, watermarks and processing time, and the per-pane
 * assertions (sd_assert_in_pane) check what each firing of a window produced, so streaming
 * behaviour is tested deterministically on the embedded runner's synthetic clock.
 *
 * Construction errors are sticky: a failing call records the first error on the pipeline and
 * returns NULL, later calls given NULL inputs return NULL too, and sd_pipeline_run() (or
 * sd_pipeline_error()) reports the first error. So pipelines are written straight through and
 * checked once.
 *
 * Threads: build a pipeline on one thread. DoFn callbacks run on SDK worker threads; one DoFn
 * instance (one setup() state) is used by one bundle at a time, but distinct instances of the
 * same DoFn may run at once. Registration functions are thread-safe.
 */
#ifndef SD_SUNDIAL_SUNDIAL_H
#define SD_SUNDIAL_SUNDIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sundial/bytes.h>
#include <sundial/coder.h>
#include <sundial/err.h>
#include <sundial/export.h>
#include <sundial/memory.h>
#include <sundial/status.h>
#include <sundial/time.h>
#include <sundial/version.h>
#include <sundial/window.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_pipeline sd_pipeline;
typedef struct sd_pcoll sd_pcoll; /* a PCollection handle, owned by its pipeline */
typedef struct sd_ctx sd_ctx;     /* the context of one DoFn callback */

/* ========================================================================================= */
/* Coders                                                                                     */
/* ========================================================================================= */

/*
 * Coder handles owned by the pipeline (valid until sd_pipeline_destroy). NULL on error (sticky).
 * Elements of a bytes or string coder are length-prefixed when nested; varint is Beam's signed
 * 64-bit varint; double is 8 bytes big-endian; bool one byte.
 */
SD_API const sd_pcoder *sd_pcoder_bytes(sd_pipeline *p);
SD_API const sd_pcoder *sd_pcoder_string(sd_pipeline *p);
SD_API const sd_pcoder *sd_pcoder_varint(sd_pipeline *p);
SD_API const sd_pcoder *sd_pcoder_double(sd_pipeline *p);
SD_API const sd_pcoder *sd_pcoder_bool(sd_pipeline *p);
SD_API const sd_pcoder *sd_pcoder_kv(sd_pipeline *p, const sd_pcoder *key, const sd_pcoder *value);
SD_API const sd_pcoder *sd_pcoder_iterable(sd_pipeline *p, const sd_pcoder *element);

/* ========================================================================================= */
/* Encoding helpers (nested context)                                                          */
/* ========================================================================================= */

SD_API SD_MUST_CHECK sd_status sd_enc_bytes(sd_buf *out, const void *p, size_t n);
SD_API SD_MUST_CHECK sd_status sd_enc_str(sd_buf *out, const char *s); /* NUL-terminated */
SD_API SD_MUST_CHECK sd_status sd_enc_int(sd_buf *out, int64_t v);
SD_API SD_MUST_CHECK sd_status sd_enc_double(sd_buf *out, double v);
SD_API SD_MUST_CHECK sd_status sd_enc_bool(sd_buf *out, bool v);

/* Decoders advance r; on a short or bad input they return SD_EPROTO and leave r unchanged.
 * sd_read_bytes also reads strings; out borrows from r's input. */
SD_API SD_MUST_CHECK sd_status sd_read_bytes(sd_reader *r, sd_bytes *out);
SD_API SD_MUST_CHECK sd_status sd_read_int(sd_reader *r, int64_t *out);
SD_API SD_MUST_CHECK sd_status sd_read_double(sd_reader *r, double *out);
SD_API SD_MUST_CHECK sd_status sd_read_bool(sd_reader *r, bool *out);

/* ========================================================================================= */
/* DoFns                                                                                      */
/* ========================================================================================= */

/* A half-open range of offsets [from, to): the restriction of a splittable DoFn. */
typedef struct sd_offset_range {
    int64_t from;
    int64_t to;
} sd_offset_range;

/*
 * A DoFn. Every callback is optional except process. Each returns SD_OK or an error status,
 * ideally made with sd_fail() so the bundle (and the job) fails with a readable message.
 *   setup:         once per instance before its first bundle; config is the blob given at
 *                  construction (borrowed for the call). OUT: *state, the instance's pointer,
 *                  passed to every other callback.
 *   start_bundle:  before a bundle's first element.
 *   process:       once per element and window (multi-window elements are exploded).
 *   finish_bundle: after a bundle's last element; emit here with sd_emit_windowed().
 *   teardown:      when the instance is discarded; frees state.
 */
typedef struct sd_dofn {
    sd_status (*setup)(sd_bytes config, void **state, sd_err *err);
    sd_status (*start_bundle)(sd_ctx *c, void *state);
    sd_status (*process)(sd_ctx *c, void *state);
    sd_status (*finish_bundle)(sd_ctx *c, void *state);
    void (*teardown)(void *state);
    /*
     * Stateful DoFns: a timer of `family` with dynamic tag `tag` fired for the current key and
     * window (sd_ctx_key, sd_ctx_window); sd_ctx_timestamp is the timer's output (hold)
     * timestamp and sd_ctx_fire_time its firing time. Emit with sd_emit. Optional.
     */
    sd_status (*on_timer)(sd_ctx *c, void *state, const char *family, sd_bytes tag);
    /*
     * Splittable DoFns (see "Splittable DoFns" below). A DoFn with initial_restriction is
     * splittable: process then runs once per (element, restriction) with an offset-range
     * tracker (sd_try_claim) and may checkpoint itself (sd_resume).
     *   initial_restriction:  OUT: the whole restriction of the current element.
     *   split_restriction:    optional; cut r into parts with sd_restriction_emit (default:
     *                         r whole).
     *   restriction_size:     optional; OUT: the work left in r (default: r.to - r.from).
     */
    sd_status (*initial_restriction)(sd_ctx *c, void *state, sd_offset_range *out);
    sd_status (*split_restriction)(sd_ctx *c, void *state, sd_offset_range r);
    sd_status (*restriction_size)(sd_ctx *c, void *state, sd_offset_range r, double *out);
    /*
     * Beam's @UnboundedPerElement: the SDF may read without end (polling, tailing), so its
     * outputs are unbounded PCollections and the job runs with streaming watermarks, where
     * the watermark estimator decides when downstream windows close and late data is dropped.
     * False: a bounded reader; the job keeps batch watermarks (nothing is ever late).
     */
    bool unbounded_per_element;
    /*
     * Stateful DoFns: Beam's OnWindowExpiration. Called once per (key, window) the DoFn saw,
     * after the window's last data and timers, when the input watermark passes the window's
     * end plus allowed lateness, with the window's state still readable (sd_ctx_key,
     * sd_ctx_window; emit with sd_emit at the window's max timestamp). Optional; needs a
     * runner that supports beam:requirement:pardo:on_window_expiration:v1.
     */
    sd_status (*on_window_expiration)(sd_ctx *c, void *state);
    /*
     * Splittable DoFns, when the job drains (JobService.Drain; sd_run_options.drain_after_ms):
     * the part of restriction r that must still be processed. OUT: *out, and *keep (false:
     * nothing of r is processed). Optional; by default (Beam's rule) a bounded restriction is
     * kept whole and an unbounded one — to == INT64_MAX, what a reader without end claims
     * from — is dropped, so draining a tailing reader ends it at its next checkpoint.
     */
    sd_status (*truncate_restriction)(sd_ctx *c,
                                      void *state,
                                      sd_offset_range r,
                                      sd_offset_range *out,
                                      bool *keep);
} sd_dofn;

/*
 * Register a DoFn under a name (copied; fn is copied). Call before building or running
 * pipelines, and before sd_sdk_main() in a program that may be started as a worker.
 * Returns SD_EEXIST for a name registered with different callbacks, SD_EINVAL for a NULL name
 * or process. Thread-safe.
 */
SD_API SD_MUST_CHECK sd_status sd_register_dofn(const char *name, const sd_dofn *fn);

/*
 * The element being processed: its nested encoding with the input coder. Borrowed for the
 * callback. Empty in start_bundle / finish_bundle.
 */
SD_API sd_bytes sd_ctx_element(const sd_ctx *c);
/*
 * Its timestamp, window (the single window of this call) and pane. The pane tells which firing
 * of an upstream GroupByKey's trigger produced the element: timing SD_PANE_EARLY / ON_TIME /
 * LATE (SD_PANE_UNKNOWN when no trigger fired it), index (0, 1, ... per window and key),
 * nonspec_index (the index among non-early panes, -1 for early ones), first and last.
 */
SD_API sd_time sd_ctx_timestamp(const sd_ctx *c);
SD_API sd_window sd_ctx_window(const sd_ctx *c);
SD_API sd_pane sd_ctx_pane(const sd_ctx *c);
/* "EARLY", "ON_TIME", "LATE" or "UNKNOWN" for a pane timing. Static string. */
SD_API const char *sd_pane_timing_name(int timing);
/* The DoFn's configuration blob. Borrowed for the callback. */
SD_API sd_bytes sd_ctx_config(const sd_ctx *c);
/* The transform id (the ParDo's unique name) this DoFn runs as. */
SD_API const char *sd_ctx_transform(const sd_ctx *c);
/* The input coder tree (borrowed), e.g. to split KVs of unusual coders. */
SD_API const sd_pcoder *sd_ctx_input_coder(const sd_ctx *c);

/* Split a KV element into the key's and the value's encodings (both borrowed). */
SD_API SD_MUST_CHECK sd_status sd_ctx_kv(sd_ctx *c, sd_bytes *key, sd_bytes *value);

/*
 * Values of a grouped element KV<K, Iterable<V>> (the output of sd_group_by_key).
 * sd_ctx_grouped sets key and starts it; sd_iter_next gives each value's nested encoding
 * (borrowed) and sets *has = false at the end.
 */
typedef struct sd_iter {
    sd_reader r;           /* private */
    const sd_pcoder *elem; /* private: element coder */
    bool stream;           /* private: a plain concatenation (state API) */

    union {
        void *align_ptr;
        uint64_t align_u64;
        unsigned char bytes[96];
    } reader; /* private: the SDK's iterable reader lives here */
} sd_iter;

SD_API SD_MUST_CHECK sd_status sd_ctx_grouped(sd_ctx *c, sd_bytes *key, sd_iter *values);
SD_API SD_MUST_CHECK sd_status sd_iter_next(sd_iter *it, sd_bytes *value, bool *has);

/*
 * Emit an element (nested encoding with output `output`'s coder; copied) to output index
 * `output` (0 = main). sd_emit keeps the input's timestamp, window and pane; sd_emit_ts sets a
 * new timestamp (same window); sd_emit_windowed sets everything (pane NULL = no firing), and is
 * the only form valid in finish_bundle.
 */
SD_API SD_MUST_CHECK sd_status sd_emit(sd_ctx *c, size_t output, sd_bytes element);
SD_API SD_MUST_CHECK sd_status sd_emit_ts(sd_ctx *c, size_t output, sd_bytes element, sd_time ts);
SD_API SD_MUST_CHECK sd_status sd_emit_windowed(sd_ctx *c,
                                                size_t output,
                                                sd_bytes element,
                                                sd_time ts,
                                                const sd_window *windows,
                                                size_t n_windows,
                                                const sd_pane *pane);
/* Shorthands: emit a string / an int / KV<string, int> to output 0. */
SD_API SD_MUST_CHECK sd_status sd_emit_str(sd_ctx *c, const char *s, size_t len);
SD_API SD_MUST_CHECK sd_status sd_emit_int(sd_ctx *c, int64_t v);
SD_API SD_MUST_CHECK sd_status sd_emit_kv_str_int(sd_ctx *c, const char *k, size_t klen, int64_t v);

/*
 * Record a failure message for the bundle (the first one wins) and return SD_EINTERNAL, so a
 * callback ends with `return sd_fail(c, "line %d: expected a number", n);`.
 */
SD_API sd_status sd_fail(sd_ctx *c, const char *fmt, ...) SD_PRINTF(2, 3);

/* Add n to the user counter `name` (namespace "sundial") of this transform. */
SD_API void sd_counter_add(sd_ctx *c, const char *name, int64_t n);

/* Log a line through the runner (job messages) and stderr at SUNDIAL_LOG level info. */
SD_API void sd_ctx_log(sd_ctx *c, const char *fmt, ...) SD_PRINTF(2, 3);

/* ---- state and timers (stateful DoFns: KV input, specs in sd_pardo_spec) ---------------- */

typedef enum sd_state_kind {
    SD_STATE_BAG = 0,          /* an unordered bag of values */
    SD_STATE_VALUE = 1,        /* at most one value (read gives 0 or 1 values) */
    SD_STATE_COMBINING = 2,    /* inputs folded by a CombineFn; coder = its accumulator coder */
    SD_STATE_MAP = 3,          /* key -> value (key_coder -> coder); one value per key */
    SD_STATE_ORDERED_LIST = 4, /* values sorted by an int64 sort key (sd_state_ordered_*) */
    SD_STATE_SET = 5           /* distinct values (sd_state_set_*) */
} sd_state_kind;

typedef struct sd_state_spec {
    const char *id;
    sd_state_kind kind;
    const sd_pcoder *coder;     /* the values' coder (combining: the accumulator coder) */
    const sd_pcoder *key_coder; /* SD_STATE_MAP: the map keys' coder */
    const char *combinefn;      /* SD_STATE_COMBINING: a registered CombineFn */
    sd_bytes combine_config;    /* SD_STATE_COMBINING: that CombineFn's config (copied) */
} sd_state_spec;

typedef enum sd_time_domain {
    SD_EVENT_TIME = 1,     /* fires when the input watermark passes the firing time */
    SD_PROCESSING_TIME = 2 /* fires on the runner's (synthetic in test mode) clock */
} sd_time_domain;

typedef struct sd_timer_spec {
    const char *family;
    sd_time_domain domain;
} sd_timer_spec;

/* The current key (nested encoding with the input's key coder). */
SD_API sd_bytes sd_ctx_key(const sd_ctx *c);
/*
 * In on_timer: the firing time. Elsewhere: the element timestamp. For a processing-time timer
 * this is on the runner's job clock (synthetic in test mode, rewritten from the SDK's clock on
 * receipt), so re-arm such timers from sd_ctx_processing_time(), not from this value.
 */
SD_API sd_time sd_ctx_fire_time(const sd_ctx *c);
/*
 * The SDK's processing-time clock (wall clock ms): base processing-time timers on it. It stands
 * still for a bundle (the wall time at which the bundle started), and the runner rebases the
 * bundle's processing-time timers from that same time, so on the synthetic clock a timer set
 * to sd_ctx_processing_time(c) + 3600000 fires exactly one hour later on the job clock.
 */
SD_API sd_time sd_ctx_processing_time(const sd_ctx *c);

/*
 * User state of the current key and window. Values are nested encodings with the state's
 * coder. sd_state_read's iterator and bytes stay valid until the callback returns.
 * sd_state_write replaces the contents with one value (value state).
 */
SD_API SD_MUST_CHECK sd_status sd_state_read(sd_ctx *c, const char *state_id, sd_iter *values);
SD_API SD_MUST_CHECK sd_status sd_state_append(sd_ctx *c, const char *state_id, sd_bytes value);
SD_API SD_MUST_CHECK sd_status sd_state_clear(sd_ctx *c, const char *state_id);
SD_API SD_MUST_CHECK sd_status sd_state_write(sd_ctx *c, const char *state_id, sd_bytes value);

/*
 * Combining state (travels as bag state of accumulators; Beam's combining StateSpec).
 * sd_state_add folds one input (nested, the CombineFn's input coder) in; sd_state_combined
 * gives extract(merge of every accumulator) (OUT: borrowed until the callback returns; for an
 * empty state extract(create())). sd_state_clear empties it; sd_state_read yields the stored
 * accumulators.
 */
SD_API SD_MUST_CHECK sd_status sd_state_add(sd_ctx *c, const char *state_id, sd_bytes input);
SD_API SD_MUST_CHECK sd_status sd_state_combined(sd_ctx *c, const char *state_id, sd_bytes *out);

/*
 * Map state (travels as Beam multimap user state). Keys and values are nested encodings with
 * the spec's key_coder and coder. put replaces the key's value; get sets *found and, when
 * found, *value (borrowed until the callback returns); keys iterates the present keys (each a
 * nested key encoding, in no promised order). sd_state_clear empties the whole map.
 */
SD_API SD_MUST_CHECK sd_status sd_state_map_put(sd_ctx *c,
                                                const char *state_id,
                                                sd_bytes key,
                                                sd_bytes value);
SD_API SD_MUST_CHECK sd_status
sd_state_map_get(sd_ctx *c, const char *state_id, sd_bytes key, sd_bytes *value, bool *found);
SD_API SD_MUST_CHECK sd_status sd_state_map_remove(sd_ctx *c, const char *state_id, sd_bytes key);
SD_API SD_MUST_CHECK sd_status sd_state_map_keys(sd_ctx *c, const char *state_id, sd_iter *keys);

/*
 * Set state (Beam's SetState, travels as multimap user state keyed by the element): values are
 * nested encodings with the spec's coder. add puts a value in, remove takes it out, contains
 * sets *found; read iterates the values (in no promised order). sd_state_clear empties it.
 */
SD_API SD_MUST_CHECK sd_status sd_state_set_add(sd_ctx *c, const char *state_id, sd_bytes value);
SD_API SD_MUST_CHECK sd_status sd_state_set_remove(sd_ctx *c, const char *state_id, sd_bytes value);
SD_API SD_MUST_CHECK sd_status sd_state_set_contains(sd_ctx *c,
                                                     const char *state_id,
                                                     sd_bytes value,
                                                     bool *found);
SD_API SD_MUST_CHECK sd_status sd_state_set_read(sd_ctx *c, const char *state_id, sd_iter *values);

/*
 * Ordered-list state (Beam's OrderedListState, beam:user_state:ordered_list:v1): values
 * (nested encodings with the spec's coder) kept sorted by an int64 sort key; several values
 * may share a sort key (they come back in the order they were added). add inserts one value;
 * read yields the entries with start <= sort_key < end in sort-key order, stepped with
 * sd_ordered_next (the bytes stay valid until the callback returns); clear_range removes that
 * range. sd_state_clear empties the whole list; sd_state_read, sd_state_append and
 * sd_state_write do not apply to it.
 */
typedef struct sd_ordered_iter {
    sd_reader r;           /* private */
    const sd_pcoder *elem; /* private: the values' coder */
} sd_ordered_iter;

SD_API SD_MUST_CHECK sd_status sd_state_ordered_add(sd_ctx *c,
                                                    const char *state_id,
                                                    int64_t sort_key,
                                                    sd_bytes value);
SD_API SD_MUST_CHECK sd_status sd_state_ordered_read(sd_ctx *c,
                                                     const char *state_id,
                                                     int64_t start,
                                                     int64_t end,
                                                     sd_ordered_iter *entries);
SD_API SD_MUST_CHECK sd_status sd_state_ordered_clear_range(sd_ctx *c,
                                                            const char *state_id,
                                                            int64_t start,
                                                            int64_t end);
/* The next entry: *has false at the end; SD_EPROTO when the runner sent malformed entries. */
SD_API SD_MUST_CHECK sd_status sd_ordered_next(sd_ordered_iter *it,
                                               int64_t *sort_key,
                                               sd_bytes *value,
                                               bool *has);

/*
 * Set (or replace) the timer (family, tag) of the current key and window to fire at `fire`
 * (event time, or processing time on sd_ctx_processing_time's clock), holding the output
 * watermark at `hold` (its output timestamp). Clear removes it.
 */
SD_API SD_MUST_CHECK sd_status
sd_timer_set(sd_ctx *c, const char *family, sd_bytes tag, sd_time fire, sd_time hold);
SD_API SD_MUST_CHECK sd_status sd_timer_clear(sd_ctx *c, const char *family, sd_bytes tag);

/* ---- keyed state with timeouts: <sundial/group_state.h> (included at the end) ---------- */

/* ---- splittable DoFns -------------------------------------------------------------------- */

/*
 * A splittable DoFn (sd_dofn.initial_restriction set) reads its element piecewise: process
 * runs once per (element, restriction) and claims offsets in increasing order before doing
 * the work they stand for:
 *
 *     for (int64_t i = sd_ctx_restriction(c).from; sd_try_claim(c, i); i++) { ...emit... }
 *
 * To stop early and continue later (a self-checkpoint, Beam's ProcessContinuation.resume),
 * call sd_resume(c, delay_ms) and return: the unclaimed rest becomes a residual that the
 * runner runs again no sooner than delay_ms later (on Sundial's test clock the wait is
 * skipped when nothing else can happen). A process call that returns without sd_resume must
 * have claimed its whole restriction (a failed sd_try_claim ends it), or the bundle fails.
 * The restriction, its tracker's position and the watermark estimator's state travel with
 * every residual, so a DoFn needs no state of its own to continue.
 *
 * The SDF's output watermark comes from its watermark estimator (sd_pardo_spec.watermark),
 * reported with each residual; downstream event-time windows close when it passes them.
 */

/* The restriction the current process call owns (the tracker's, shrunk by splits). */
SD_API sd_offset_range sd_ctx_restriction(const sd_ctx *c);
/*
 * Claim offset pos (greater than the last claimed one). True: do its work. False: pos is past
 * the restriction (process must return without doing it); the restriction is then done.
 * Outside an SDF process call, or for a non-increasing pos, fails the bundle and returns false.
 */
SD_API bool sd_try_claim(sd_ctx *c, int64_t pos);
/* Checkpoint: after process returns, continue the unclaimed rest delay_ms (>= 0) later. */
SD_API SD_MUST_CHECK sd_status sd_resume(sd_ctx *c, int64_t delay_ms);
/* In split_restriction: one part of the restriction (parts should cover it exactly). */
SD_API SD_MUST_CHECK sd_status sd_restriction_emit(sd_ctx *c, sd_offset_range part);
/* SD_WM_MANUAL: set the output watermark estimate. Other estimators ignore it. */
SD_API SD_MUST_CHECK sd_status sd_watermark_set(sd_ctx *c, sd_time watermark);
/* The estimator's current watermark (SD_TIME_MIN outside an SDF process call). */
SD_API sd_time sd_ctx_watermark(const sd_ctx *c);

/*
 * A delay for the bounded-delay estimator: a year-month part (calendar months, applied to the
 * UTC date with the day clamped to the target month's end, leap years counted) and a day-time
 * part in milliseconds; t - delay = (t - months) - ms.
 */
typedef struct sd_interval {
    int32_t months;
    int64_t ms;
} sd_interval;

typedef enum sd_wm_kind {
    SD_WM_NONE = 0,         /* no estimate: the runner holds the SDF's output watermark back
                               while any residual of it is pending */
    SD_WM_MONOTONIC = 1,    /* max over output timestamps so far */
    SD_WM_MANUAL = 2,       /* whatever sd_watermark_set said last */
    SD_WM_WALL_TIME = 3,    /* the SDK's wall clock when reported */
    SD_WM_BOUNDED_DELAY = 4 /* max over outputs of (timestamp - delay); each output's candidate
                               is computed first, then the max is taken */
} sd_wm_kind;

typedef struct sd_wm_spec {
    sd_wm_kind kind;
    sd_interval delay; /* SD_WM_BOUNDED_DELAY */
} sd_wm_spec;

/* t - iv with calendar arithmetic (see sd_interval), clamped to Beam's timestamp range. */
SD_API sd_time sd_time_minus_interval(sd_time t, sd_interval iv);

/* ---- side inputs ----------------------------------------------------------------------- */

typedef enum sd_side_access {
    SD_SIDE_AS_ITERABLE = 0, /* all elements of the side input's window */
    SD_SIDE_AS_MULTIMAP = 1  /* KV<K,V> side input, looked up by key */
} sd_side_access;

typedef struct sd_side_input {
    sd_pcoll *pcoll;
    sd_side_access access;
} sd_side_input;

/*
 * Read side input `index` (in the order given at construction) in the window that matches the
 * current element's window. For SD_SIDE_AS_ITERABLE the values are the side elements; for
 * SD_SIDE_AS_MULTIMAP, key is the nested key encoding and the values are those of that key.
 * The iterator and the bytes it returns are valid until the callback returns.
 */
SD_API SD_MUST_CHECK sd_status sd_side_iterable(sd_ctx *c, size_t index, sd_iter *values);
SD_API SD_MUST_CHECK sd_status sd_side_lookup(sd_ctx *c,
                                              size_t index,
                                              sd_bytes key,
                                              sd_iter *values);

/* ========================================================================================= */
/* CombineFns                                                                                 */
/* ========================================================================================= */

/*
 * A CombineFn over nested encodings: inputs with the input value coder, accumulators with the
 * accumulator coder, outputs with the output coder. Each writes its result to out (empty on
 * entry). config is the blob given at construction. All four are required.
 */
typedef struct sd_combinefn {
    sd_status (*create)(sd_bytes config, sd_buf *out, sd_err *err);
    sd_status (*add)(sd_bytes config, sd_bytes acc, sd_bytes input, sd_buf *out, sd_err *err);
    sd_status (*merge)(sd_bytes config, sd_bytes a, sd_bytes b, sd_buf *out, sd_err *err);
    sd_status (*extract)(sd_bytes config, sd_bytes acc, sd_buf *out, sd_err *err);
} sd_combinefn;

/* Register a CombineFn by name (same rules as sd_register_dofn). */
SD_API SD_MUST_CHECK sd_status sd_register_combinefn(const char *name, const sd_combinefn *fn);

/*
 * Built-in CombineFns (registered automatically), over varint inputs:
 *   "sundial:sum"   sum of int64 (accumulator and output varint)
 *   "sundial:count" number of inputs of any coder (accumulator and output varint)
 *   "sundial:min", "sundial:max" (accumulator nullable-style: bool present + varint; output
 *                   varint, 0 for no input)
 */
#define SD_COMBINE_SUM   "sundial:sum"
#define SD_COMBINE_COUNT "sundial:count"
#define SD_COMBINE_MIN   "sundial:min"
#define SD_COMBINE_MAX   "sundial:max"

/* ========================================================================================= */
/* Pipelines                                                                                  */
/* ========================================================================================= */

/* A new empty pipeline. NULL only when out of memory. Free with sd_pipeline_destroy. */
SD_API sd_pipeline *sd_pipeline_create(const char *name);
SD_API void sd_pipeline_destroy(sd_pipeline *p);

/* The first construction error, or NULL when there is none. Borrowed. */
SD_API const sd_err *sd_pipeline_error(const sd_pipeline *p);

/* The coder of a PCollection (borrowed), NULL for NULL. */
SD_API const sd_pcoder *sd_pcoll_coder(const sd_pcoll *pc);
/* The PCollection's id in the pipeline proto. */
SD_API const char *sd_pcoll_id(const sd_pcoll *pc);

/* ---- sources ----------------------------------------------------------------------------- */

/* beam:transform:impulse:v1: one empty bytes element in the global window. */
SD_API sd_pcoll *sd_impulse(sd_pipeline *p, const char *name);

/*
 * A PCollection of the given elements (nested encodings with coder; copied), in the global
 * window at the minimum timestamp, or at timestamps[i] when timestamps is not NULL. Large
 * ones (256 KiB of elements and more) stay in this process: a LOOPBACK run's pipeline proto
 * names them by a token its workers (this process) resolve, instead of carrying them; any
 * other run, and sd_pipeline_to_proto, carries them inline.
 */
SD_API sd_pcoll *sd_create(sd_pipeline *p,
                           const char *name,
                           const sd_pcoder *coder,
                           const sd_bytes *elements,
                           size_t n,
                           const sd_time *timestamps);
/* Shorthands for string and varint elements. */
SD_API sd_pcoll *
sd_create_strings(sd_pipeline *p, const char *name, const char *const *strings, size_t n);
SD_API sd_pcoll *sd_create_ints(sd_pipeline *p, const char *name, const int64_t *values, size_t n);

/* ---- TestStream ------------------------------------------------------------------------ */

/*
 * A TestStream (beam:transform:teststream:v1): a scripted, unbounded source for tests. Its
 * events replay in the order they were added:
 *   elements    appear on one output tag with the given event timestamps (global window);
 *   watermark   one tag's (or every tag's) event-time watermark moves forward;
 *   processing  the runner's processing-time clock moves forward (triggers and processing-time
 *               timers due by then fire).
 * After the last event every output's watermark goes to the end of time, so every window
 * closes. On Sundial each event is applied only when the pipeline is quiescent (everything the
 * previous events caused has been processed, including due timers and trigger firings), which
 * makes TestStream pipelines deterministic. Elements behind their output's watermark are late.
 *
 * The builder and its output PCollections are owned by the pipeline. Every output has the
 * stream's coder and global windowing, and is unbounded. Event calls that fail (unknown tag, a
 * watermark moving backwards, elements that do not decode, a negative clock advance) record
 * the pipeline's sticky error; calls on a NULL builder do nothing. A pipeline may hold one
 * TestStream on Sundial.
 */
typedef struct sd_teststream sd_teststream;

/*
 * A TestStream of elements of `coder` with outputs tags[0..n_tags) (n_tags == 0: one output
 * tagged "out"). Tags must be distinct, non-empty and contain no '/'. NULL on error (sticky).
 */
SD_API sd_teststream *sd_teststream_create(sd_pipeline *p,
                                           const char *name,
                                           const sd_pcoder *coder,
                                           const char *const *tags,
                                           size_t n_tags);
/* The output PCollection of tag (NULL = the first tag). NULL (sticky) for an unknown tag. */
SD_API sd_pcoll *sd_teststream_output(sd_teststream *ts, const char *tag);
/*
 * Add an element event on tag (NULL = the first tag): elements[i] (nested encodings with the
 * stream's coder; copied) at event time timestamps[i]. n == 0 adds nothing.
 */
SD_API void sd_teststream_add_elements(sd_teststream *ts,
                                       const char *tag,
                                       const sd_bytes *elements,
                                       const sd_time *timestamps,
                                       size_t n);
/* Shorthands for string / varint streams. */
SD_API void sd_teststream_add_strings(sd_teststream *ts,
                                      const char *tag,
                                      const char *const *strings,
                                      const sd_time *timestamps,
                                      size_t n);
SD_API void sd_teststream_add_ints(sd_teststream *ts,
                                   const char *tag,
                                   const int64_t *values,
                                   const sd_time *timestamps,
                                   size_t n);
/*
 * Advance the watermark of tag (NULL = every tag) to wm. It must not go back (a sticky
 * SD_EINVAL naming the tag and both values); equal is allowed.
 */
SD_API void sd_teststream_advance_watermark(sd_teststream *ts, const char *tag, sd_time wm);
/* Every tag's watermark to the end of time (SD_TIME_MAX). */
SD_API void sd_teststream_advance_watermark_to_infinity(sd_teststream *ts);
/* Move the processing-time clock forward by ms (>= 0). */
SD_API void sd_teststream_advance_processing_time(sd_teststream *ts, int64_t ms);
/*
 * A live TestStream: the runner reads its events, while the job runs, from the Beam
 * TestStreamService at endpoint ("host:port"; copied) instead of a script — the payload's
 * endpoint field. A test serves one with sd_teststream_service_start
 * (<sundial/teststream_service.h>) and pushes events to it; any Beam TestStreamService
 * (Python's TestStreamServiceController) serves too. The stream ends when the service ends
 * it. A TestStream with events already scripted, and scripting calls after this one, record
 * a sticky SD_EINVAL: a TestStream reads either its script or a service.
 */
SD_API void sd_teststream_set_endpoint(sd_teststream *ts, const char *endpoint);

/* ---- ParDo ------------------------------------------------------------------------------- */

typedef struct sd_pardo_spec {
    const char *dofn;                      /* registered name */
    sd_bytes config;                       /* passed to setup and sd_ctx_config; copied */
    size_t n_outputs;                      /* 0 means 1 */
    const sd_pcoder *const *output_coders; /* n_outputs coders; NULL = the input's coder */
    const char *const *output_tags;        /* NULL = "out0", "out1", ... */
    size_t n_side_inputs;
    const sd_side_input *side_inputs;
    size_t n_states; /* stateful DoFns: the input must be a KV */
    const sd_state_spec *states;
    size_t n_timers;
    const sd_timer_spec *timers;
    sd_wm_spec watermark; /* splittable DoFns: the watermark estimator (zero: none) */
} sd_pardo_spec;

/*
 * Apply a ParDo. Returns the main output (index 0); OUT: outputs[i] for every output when
 * outputs is not NULL (an array of spec->n_outputs, at least 1).
 */
SD_API sd_pcoll *sd_pardo(sd_pipeline *p,
                          const char *name,
                          sd_pcoll *input,
                          const sd_pardo_spec *spec,
                          sd_pcoll **outputs);

/* A one-output ParDo: dofn by name, config, output coder (NULL = the input's). */
SD_API sd_pcoll *sd_apply(sd_pipeline *p,
                          const char *name,
                          sd_pcoll *input,
                          const char *dofn,
                          sd_bytes config,
                          const sd_pcoder *output_coder);

/* ---- grouping and combining -------------------------------------------------------------- */

/* beam:transform:group_by_key:v1 on a KV<K,V> input: KV<K, Iterable<V>>. */
SD_API sd_pcoll *sd_group_by_key(sd_pipeline *p, const char *name, sd_pcoll *input);
/*
 * The same, with a late-data output: *late (KV<K,V>, like the input) receives every element
 * the GroupByKey finds late — its window expired, its window's trigger finished, or (with
 * sd_windowfn.drop_late_elements upstream) it arrived behind the watermark — unchanged, with
 * its timestamp and window, instead of dropping it (still counted in SD_RUN_DROPPED_LATE).
 * Its elements are behind the GroupByKey's watermark: what groups them sees them late too.
 * A Sundial feature (the GroupByKey gets a second output, which other runners refuse).
 */
SD_API sd_pcoll *
sd_group_by_key_late(sd_pipeline *p, const char *name, sd_pcoll *input, sd_pcoll **late);

/*
 * Combine a KV<K,I> input per key with a registered CombineFn: KV<K,O>. Emitted as Beam's
 * combine_per_key composite with a CombinePayload (runners lift it into precombine / merge /
 * extract) whose subtransforms are a GroupByKey and combine_grouped_values.
 */
SD_API sd_pcoll *sd_combine_per_key(sd_pipeline *p,
                                    const char *name,
                                    sd_pcoll *input,
                                    const char *combinefn,
                                    sd_bytes config,
                                    const sd_pcoder *accumulator_coder,
                                    const sd_pcoder *output_coder);

/*
 * Combine all elements (per window) into one output. In the global window an empty input
 * yields extract(create()).
 */
SD_API sd_pcoll *sd_combine_globally(sd_pipeline *p,
                                     const char *name,
                                     sd_pcoll *input,
                                     const char *combinefn,
                                     sd_bytes config,
                                     const sd_pcoder *accumulator_coder,
                                     const sd_pcoder *output_coder);

/* Count elements per key: KV<K,V> -> KV<K, varint>. */
SD_API sd_pcoll *sd_count_per_key(sd_pipeline *p, const char *name, sd_pcoll *input);

/* beam:transform:flatten:v1. Inputs must share coder and windowing. */
SD_API sd_pcoll *sd_flatten(sd_pipeline *p, const char *name, sd_pcoll *const *inputs, size_t n);

/* beam:transform:reshuffle:v1 (a fusion break; elements and timestamps unchanged). */
SD_API sd_pcoll *sd_reshuffle(sd_pipeline *p, const char *name, sd_pcoll *input);

/* ---- windowing and timestamps ------------------------------------------------------------ */

typedef enum sd_window_kind {
    SD_WINDOW_GLOBAL = 0,
    SD_WINDOW_FIXED,   /* size, offset */
    SD_WINDOW_SLIDING, /* size, period, offset */
    SD_WINDOW_SESSIONS /* gap */
} sd_window_kind;

/*
 * Triggers: when a GroupByKey (or combine) emits a pane of a window. A trigger is a tree of
 * sd_trigger_spec nodes built with the calls below; nodes are owned by the pipeline (valid
 * until sd_pipeline_destroy), immutable, and may be shared between trees and strategies. Each
 * call returns NULL on error (sticky); a NULL sub-trigger makes its parent NULL too.
 *
 *   default                 Repeatedly(AfterWatermark): one ON_TIME pane, then one LATE
 *                           pane per late element (within the allowed lateness).
 *   never / always          never fire (only the final pane at window close) / fire per element.
 *   after_count(n)          once n elements have arrived in the pane.
 *   after_processing_time   once delay_ms of processing time have passed since the pane's first
 *                           element (on Sundial's test clock: TestStream processing-time events
 *                           or, when idle, a jump to the deadline); _aligned also rounds the
 *                           deadline up to a multiple of period_ms (+ offset_ms).
 *   after_watermark         when the watermark passes the end of the window (ON_TIME), with
 *                           optional early firings (before) and late firings (after; each a
 *                           trigger that is repeated), either may be NULL.
 *   after_all / after_any   when all / any of subs have fired.
 *   after_each              subs in sequence.
 *   repeatedly(sub)         sub, again and again.
 *   or_finally(main, fin)   main repeatedly until fin fires (then the window closes).
 * A trigger that finishes closes the window for its key: later elements are dropped as late.
 */
typedef struct sd_trigger_spec sd_trigger_spec;

SD_API const sd_trigger_spec *sd_trigger_default(sd_pipeline *p);
SD_API const sd_trigger_spec *sd_trigger_never(sd_pipeline *p);
SD_API const sd_trigger_spec *sd_trigger_always(sd_pipeline *p);
/* count >= 1. */
SD_API const sd_trigger_spec *sd_trigger_after_count(sd_pipeline *p, int64_t count);
/* delay_ms >= 0; period_ms > 0 for the aligned form. */
SD_API const sd_trigger_spec *sd_trigger_after_processing_time(sd_pipeline *p, int64_t delay_ms);
SD_API const sd_trigger_spec *sd_trigger_after_processing_time_aligned(sd_pipeline *p,
                                                                       int64_t delay_ms,
                                                                       int64_t period_ms,
                                                                       int64_t offset_ms);
SD_API const sd_trigger_spec *sd_trigger_after_watermark(sd_pipeline *p,
                                                         const sd_trigger_spec *early,
                                                         const sd_trigger_spec *late);
/* n >= 1 sub-triggers (the array is copied). */
SD_API const sd_trigger_spec *
sd_trigger_after_all(sd_pipeline *p, const sd_trigger_spec *const *subs, size_t n);
SD_API const sd_trigger_spec *
sd_trigger_after_any(sd_pipeline *p, const sd_trigger_spec *const *subs, size_t n);
SD_API const sd_trigger_spec *
sd_trigger_after_each(sd_pipeline *p, const sd_trigger_spec *const *subs, size_t n);
SD_API const sd_trigger_spec *sd_trigger_repeatedly(sd_pipeline *p, const sd_trigger_spec *sub);
SD_API const sd_trigger_spec *
sd_trigger_or_finally(sd_pipeline *p, const sd_trigger_spec *main, const sd_trigger_spec *finally);

/* Whether successive panes of a window repeat earlier panes' elements (Beam's AccumulationMode). */
typedef enum sd_accumulation_mode {
    SD_DISCARDING_PANES = 0,  /* each pane holds only the elements since the previous pane */
    SD_ACCUMULATING_PANES = 1 /* each pane holds every element of the window so far */
} sd_accumulation_mode;

/* The timestamp of a GroupByKey's output pane (Beam's TimestampCombiner / OutputTime). */
typedef enum sd_output_timestamp {
    SD_OUTPUT_AT_END_OF_WINDOW = 0, /* the window's max timestamp (end - 1 ms) */
    SD_OUTPUT_AT_EARLIEST = 1,      /* the earliest input timestamp in the pane */
    SD_OUTPUT_AT_LATEST = 2         /* the latest input timestamp in the pane */
} sd_output_timestamp;

/*
 * What happens when a window expires (Beam's ClosingBehavior): whether a final pane goes out
 * even when nothing arrived since the previous pane.
 */
typedef enum sd_closing_behavior {
    SD_CLOSING_FIRE_IF_NONEMPTY = 0, /* a final pane only with something new (Java's default) */
    SD_CLOSING_FIRE_ALWAYS = 1       /* always a final pane (unless the trigger finished):
                                        empty when discarding, a repeat when accumulating */
} sd_closing_behavior;

/*
 * A windowing strategy: the window fn plus how its panes fire. The zero value of every field
 * after `kind`'s parameters is Beam's (Java SDK's) default (default trigger, discarding, end of
 * window, no allowed lateness, no empty final pane). Elements arriving after the watermark
 * passed their window's end plus allowed_lateness_ms are dropped (and counted by the runner);
 * within the lateness they make LATE panes.
 */
typedef struct sd_windowfn {
    sd_window_kind kind;
    int64_t size_ms;
    int64_t period_ms;
    int64_t offset_ms;
    int64_t gap_ms;
    int64_t allowed_lateness_ms;
    const sd_trigger_spec *trigger; /* NULL = sd_trigger_default */
    sd_accumulation_mode accumulation;
    sd_output_timestamp output_time;
    sd_closing_behavior closing;
    /*
     * The per-element late policy (YDB's; Spark's state eviction), besides Beam's rule (data is
     * late when its window has expired): an element older than the watermark of its input when
     * it reaches this WindowInto is dropped and counted (SD_RUN_DROPPED_LATE), even while its
     * window is open. On Sundial (the pipeline option beam:option:sundial_drop_late_elements:v1
     * names the WindowInto); other runners ignore it.
     */
    bool drop_late_elements;
} sd_windowfn;

/* beam:transform:window_into:v1: assign windows from each element's timestamp. */
SD_API sd_pcoll *
sd_window_into(sd_pipeline *p, const char *name, sd_pcoll *input, const sd_windowfn *fn);

/*
 * Give each element a new timestamp computed by a registered timestamp function:
 * ts = fn(element, config). Register with sd_register_timestamp_fn. An element without an
 * event time (Flink's and YDB's NULL rowtime) is an error: fn returns SD_ENOTFOUND and the job
 * fails with a message naming the transform and the element (Beam has no element without a
 * timestamp, and making one up would move it into some window silently).
 */
typedef sd_status (*sd_timestamp_fn)(sd_bytes element, sd_bytes config, sd_time *out, sd_err *err);
SD_API SD_MUST_CHECK sd_status sd_register_timestamp_fn(const char *name, sd_timestamp_fn fn);
SD_API sd_pcoll *sd_with_timestamps(sd_pipeline *p,
                                    const char *name,
                                    sd_pcoll *input,
                                    const char *timestamp_fn,
                                    sd_bytes config);

/* ========================================================================================= */
/* Assertions (pipeline transforms; a failed check fails the job with a diff)                  */
/* ========================================================================================= */

/*
 * The PCollection holds exactly these elements (nested encodings with its coder), in any
 * order, across all windows. The check runs inside the pipeline on any runner: elements are
 * gathered under one key and compared by a checking DoFn, which fails its bundle with a
 * message listing the missing and the unexpected elements.
 */
SD_API void sd_assert_contains_exactly(sd_pipeline *p,
                                       const char *name,
                                       sd_pcoll *pc,
                                       const sd_bytes *expected,
                                       size_t n);
/* The same, only for the elements in window w (an interval window of pc's windowing). */
SD_API void sd_assert_in_window(sd_pipeline *p,
                                const char *name,
                                sd_pcoll *pc,
                                const sd_window *w,
                                const sd_bytes *expected,
                                size_t n);
/* The PCollection has exactly n elements / none. */
SD_API void sd_assert_count(sd_pipeline *p, const char *name, sd_pcoll *pc, int64_t n);
SD_API void sd_assert_empty(sd_pipeline *p, const char *name, sd_pcoll *pc);
/* Shorthand for a string PCollection. */
SD_API void sd_assert_strings(sd_pipeline *p,
                              const char *name,
                              sd_pcoll *pc,
                              const char *const *expected,
                              size_t n);

/*
 * Per-pane assertions: which panes' elements a check sees (Beam's PAssert inOnTimePane,
 * inEarlyPane, inLatePane, inFinalPane). Panes come from the triggers of an upstream
 * GroupByKey; elements that never went through one carry the no-firing pane (UNKNOWN timing,
 * first and last), which only SD_PANES_ALL and SD_PANES_FINAL select.
 */
typedef enum sd_pane_filter {
    SD_PANES_ALL = 0,     /* every pane */
    SD_PANES_ON_TIME = 1, /* the ON_TIME pane */
    SD_PANES_EARLY = 2,   /* every EARLY pane, together */
    SD_PANES_LATE = 3,    /* every LATE pane, together */
    SD_PANES_FINAL = 4    /* the last pane of the window (pane.last) */
} sd_pane_filter;

/*
 * The elements of pc in window w (NULL = every window) and in the panes `panes` are exactly
 * `expected` (nested encodings; any order; duplicates count). The selection runs first, in pc's
 * own windowing; the gathered elements are then compared in the global window after the
 * pipeline's input is exhausted (on a TestStream: after its watermark reached the end of time),
 * so an empty selection is checked too.
 */
SD_API void sd_assert_in_pane(sd_pipeline *p,
                              const char *name,
                              sd_pcoll *pc,
                              const sd_window *w,
                              sd_pane_filter panes,
                              const sd_bytes *expected,
                              size_t n);
/* The same selection has exactly n elements. */
SD_API void sd_assert_count_in_pane(sd_pipeline *p,
                                    const char *name,
                                    sd_pcoll *pc,
                                    const sd_window *w,
                                    sd_pane_filter panes,
                                    int64_t n);
/* sd_assert_in_pane for a string PCollection. */
SD_API void sd_assert_strings_in_pane(sd_pipeline *p,
                                      const char *name,
                                      sd_pcoll *pc,
                                      const sd_window *w,
                                      sd_pane_filter panes,
                                      const char *const *expected,
                                      size_t n);

/* ========================================================================================= */
/* Typed helpers: Map, FlatMap, Filter, text files, collecting results                        */
/* ========================================================================================= */

/*
 * The element types the typed helpers decode for you: a PCollection whose coder is bytes,
 * string, varint, double or bool, or a KV of two of those. (Anything else is a construction
 * error naming the transform; use sd_pardo and the sd_read_* decoders for it.) sd_apply_map,
 * sd_apply_flat_map and sd_apply_filter are Beam's Map, FlatMap and Filter.
 */
typedef enum sd_type {
    SD_TYPE_BYTES = 0,
    SD_TYPE_STR = 1,    /* beam:coder:string_utf8:v1 */
    SD_TYPE_INT = 2,    /* beam:coder:varint:v1 (int64) */
    SD_TYPE_DOUBLE = 3, /* beam:coder:double:v1 */
    SD_TYPE_BOOL = 4    /* beam:coder:bool:v1 */
} sd_type;

/*
 * One decoded scalar. The field of its type is set: str/len for BYTES and STR (a string is
 * also NUL-terminated), i for INT (and BOOL as 0 or 1), d for DOUBLE. Input values are borrowed
 * for the callback; values a program builds (sd_val_*) borrow what they point at.
 */
typedef struct sd_val {
    sd_type type;
    const char *str;
    size_t len;
    int64_t i;
    double d;
} sd_val;

/* A decoded element: value alone, or key and value of a KV (is_kv). */
typedef struct sd_elem {
    bool is_kv;
    sd_val key;
    sd_val value;
} sd_elem;

static inline sd_val sd_val_strn(const char *s, size_t n)
{
    sd_val v = { SD_TYPE_STR, s, n, 0, 0.0 };
    return v;
}

/* s is NUL-terminated; NULL is the empty string. */
SD_API sd_val sd_val_str(const char *s);

static inline sd_val sd_val_bytes(const void *p, size_t n)
{
    sd_val v = { SD_TYPE_BYTES, (const char *)p, n, 0, 0.0 };
    return v;
}

static inline sd_val sd_val_int(int64_t i)
{
    sd_val v = { SD_TYPE_INT, NULL, 0, i, 0.0 };
    return v;
}

static inline sd_val sd_val_double(double d)
{
    sd_val v = { SD_TYPE_DOUBLE, NULL, 0, 0, d };
    return v;
}

static inline sd_val sd_val_bool(bool b)
{
    sd_val v = { SD_TYPE_BOOL, NULL, 0, b ? 1 : 0, 0.0 };
    return v;
}

/*
 * A typed element function: called once per element (and window) with the decoded element;
 * it emits with sd_out / sd_out_kv / sd_out_strf and returns SD_OK, or fails the bundle with
 * sd_fail. A Map must emit exactly one element per input; a FlatMap any number.
 */
typedef sd_status (*sd_elem_fn)(sd_ctx *c, const sd_elem *in);
/* A predicate for sd_apply_filter: true keeps the element. */
typedef bool (*sd_pred_fn)(const sd_elem *in);

/*
 * Register a typed function under a name (same rules as sd_register_dofn: the same name with
 * another function is SD_EEXIST; thread-safe). A runner that starts this program as a worker
 * (a PROCESS environment, Flink, sundial serve --process) finds functions by name, so they
 * must be registered in every process before sd_sdk_main: SD_REGISTER(fn), written once
 * after the function at file scope, does that before main() runs (GCC and Clang).
 */
SD_API SD_MUST_CHECK sd_status sd_register_elem_fn(const char *name, sd_elem_fn fn);
SD_API SD_MUST_CHECK sd_status sd_register_pred_fn(const char *name, sd_pred_fn fn);

#if defined(__GNUC__) && !defined(__cplusplus)
/* Register fn under its own name before main() runs. fn is an sd_elem_fn or an sd_pred_fn. */
#define SD_REGISTER(fn)                                                                 \
    __attribute__((constructor)) static void sd__register_##fn(void)                    \
    {                                                                                   \
        sd_status sd__st = _Generic((fn), sd_elem_fn                                    \
                                    : sd_register_elem_fn, sd_pred_fn                   \
                                    : sd_register_pred_fn)(#fn, (fn));                  \
        (void)sd__st; /* a clash shows later: the transform cannot find its function */ \
    }
#endif

/*
 * Apply a typed function to every element of input. output_coder is
 * the output's coder (NULL = the input's); it must be one of the typed helpers' types too.
 * A function given by pointer that has no name yet is registered under a generated one, which
 * is enough when the worker is this process (the embedded runner, a loopback worker).
 * Elements keep their timestamps and windows.
 */
SD_API sd_pcoll *sd_apply_map(sd_pipeline *p,
                              const char *name,
                              sd_pcoll *input,
                              sd_elem_fn fn,
                              const sd_pcoder *output_coder);
SD_API sd_pcoll *sd_apply_flat_map(sd_pipeline *p,
                                   const char *name,
                                   sd_pcoll *input,
                                   sd_elem_fn fn,
                                   const sd_pcoder *output_coder);
SD_API sd_pcoll *sd_apply_filter(sd_pipeline *p, const char *name, sd_pcoll *input, sd_pred_fn fn);

/*
 * Emit from a typed function to its output: v must match the output's type (a STR into a
 * bytes output and BYTES into a string output are accepted); sd_out_kv for a KV output;
 * sd_out_strf formats a string output printf-style. Outside a typed function: SD_ESTATE.
 */
SD_API SD_MUST_CHECK sd_status sd_out(sd_ctx *c, sd_val v);
SD_API SD_MUST_CHECK sd_status sd_out_kv(sd_ctx *c, sd_val key, sd_val value);
SD_API SD_MUST_CHECK sd_status sd_out_strf(sd_ctx *c, const char *fmt, ...) SD_PRINTF(2, 3);

/*
 * The lines of every file matching the glob pattern (POSIX glob(3): *, ?, [...]; a relative
 * pattern is taken from the current directory at construction), as strings without their
 * line ends ("\n" or "\r\n"), in the global window. The pattern is expanded when the
 * pipeline runs, in the worker; no match fails the job with a message naming the transform
 * and the pattern. Files are read in parallel when the runner splits the work.
 */
SD_API sd_pcoll *sd_read_text(sd_pipeline *p, const char *name, const char *pattern);

/*
 * Write a PCollection of strings (or bytes) as text, one element per line, into n_shards
 * files (0 means 1) named PREFIX-SSSSS-of-NNNNN (SSSSS from 00000); every shard is written,
 * empty ones too. Each file appears whole (written aside, then renamed). Elements go to a
 * shard by a hash of their bytes; the order of lines within a shard is not promised. A
 * relative prefix is taken from the current directory at construction. The input is
 * rewindowed into the global window, so every shard is written once, when the input ends.
 */
SD_API void
sd_write_text(sd_pipeline *p, const char *name, sd_pcoll *input, const char *prefix, int n_shards);

/*
 * Collect a PCollection into memory for a test's assertions: after sd_pipeline_run returned
 * SD_OK, the collection holds every element (in no promised order until sorted). Works with
 * any runner on this machine (the elements travel through a temporary directory that the
 * pipeline removes when destroyed). The element type must be a typed helpers' type.
 * Owned by the pipeline; NULL on error (sticky).
 */
typedef struct sd_collection sd_collection;
SD_API sd_collection *sd_collect(sd_pipeline *p, const char *name, sd_pcoll *input);
/*
 * The number of elements collected, or -1 before the pipeline ran (or when reading the
 * results failed: see sd_pipeline_error).
 */
SD_API long sd_collection_len(sd_collection *col);
/* Element i (0 <= i < len), borrowed until sd_pipeline_destroy; NULL when out of range. */
SD_API const sd_elem *sd_collection_at(sd_collection *col, size_t i);
/*
 * Sort the elements: KVs by key, then value; strings and bytes by memcmp, shorter first;
 * numbers by value.
 */
SD_API void sd_collection_sort(sd_collection *col);

/*
 * The Pipeline proto the pipeline would submit (packed bytes), with environment `env_urn` and
 * payload. Caller owns *out; free with sd_free. For inspection and tests.
 */
SD_API SD_MUST_CHECK sd_status sd_pipeline_to_proto(sd_pipeline *p,
                                                    const char *env_urn,
                                                    sd_bytes env_payload,
                                                    uint8_t **out,
                                                    size_t *out_len,
                                                    sd_err *err);

/*
 * Worker entry point. Call at the top of main(), after registering DoFns. When argv holds the
 * standard Beam boot flags (--id=..., --control_endpoint=... or --provision_endpoint=...), the
 * process becomes an SDK worker: this serves the runner until it ends the worker, sets
 * *exit_code and returns true (main should return it). Otherwise it returns false at once.
 */
SD_API bool sd_sdk_main(int argc, char **argv, int *exit_code);

/*
 * Serve as an external worker pool on addr ("127.0.0.1:0" picks a port) until the process is
 * stopped (the beam:env:external:v1 boot). OUT: bound port printed on stdout. Blocks.
 */
SD_API SD_MUST_CHECK sd_status sd_worker_pool_serve(const char *addr, sd_err *err);

#ifdef __cplusplus
}
#endif

/* The parts of the API in headers of their own (each needs the declarations above). */
#include <sundial/control.h>
#include <sundial/group_state.h>
#include <sundial/partitioned.h>
#include <sundial/run.h>
#include <sundial/runner.h>
#include <sundial/teststream_service.h>

#endif
