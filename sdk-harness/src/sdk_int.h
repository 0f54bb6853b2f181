/* Sundial C SDK: internals shared by the SDK's own .c files and its tests. */
#ifndef SD_SDK_HARNESS_SRC_SDK_INT_H
#define SD_SDK_HARNESS_SRC_SDK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/pb.h"
#include "runner/base/arena.h"
#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/map.h"
#include "runner/base/vec.h"
#include "runner/coder/coder.h"
#include "sundial/sundial.h"

typedef SD_FN(ProcessBundleDescriptor) pb_ProcessBundleDescriptor;

/* Deliberately ignore a must-check result (a (void) cast does not silence GCC). */
#define SD_IGNORE(expr) \
    do {                \
        if (expr) {     \
        }               \
    } while (0)

/* FunctionSpec URNs of C user code. */
#define SD_URN_DOFN_C      "beam:dofn:sundial_c:v1"
#define SD_URN_COMBINEFN_C "beam:combinefn:sundial_c:v1"

/* Names of the built-in DoFns the construction layer uses. */
#define SD_FN_CREATE            "sundial:create"
#define SD_FN_CREATE_REF        "sundial:create_ref"
#define SD_FN_DROP_KEY          "sundial:drop_key"
#define SD_FN_TIMESTAMP         "sundial:timestamp"
#define SD_FN_RESHUFFLE_KEY     "sundial:reshuffle_key"
#define SD_FN_RESHUFFLE_UNGROUP "sundial:reshuffle_ungroup"
#define SD_FN_ASSERT_KEY        "sundial:assert_key"
#define SD_FN_ASSERT_CHECK      "sundial:assert_check"
#define SD_FN_COMBINE_GROUPED   "sundial:combine_grouped"
#define SD_COMBINE_GLOBAL_WRAP  "sundial:global_wrap"

/* ---------------------------------------------------------------- arena (proto building) */

/* Proto trees are built in base arenas (runner/base/arena.h): everything freed at once. */
/* An initialised protobuf-c message of descriptor d, allocated in arena a (freed with it;
 * NULL when out of memory). Named _alloc, not _new or _create: nothing frees it alone. */
void *sd__pb_alloc(sd_arena *a, const ProtobufCMessageDescriptor *d);

/* ---------------------------------------------------------------- registry and payloads */

/* Register the built-in DoFns and CombineFns once (idempotent, thread-safe). */
void sd__register_builtins(void);

/*
 * A large Create's configuration kept in this process (builtins.c explains Create by
 * reference). Thread-safe. sd__created_create takes data (freed on failure) and returns the
 * first reference, or NULL when out of memory; sd__created_unref drops one (NULL: no-op), and
 * the last unregisters and frees it. The token (borrowed, valid while referenced) is what a
 * LOOPBACK run's proto carries as the SD_FN_CREATE_REF DoFn's configuration.
 */
typedef struct sd__created sd__created;
sd__created *sd__created_create(uint8_t *data, size_t len);
void sd__created_unref(sd__created *c);
sd_bytes sd__created_bytes(const sd__created *c);
const char *sd__created_token(const sd__created *c);
/* Creates whose configuration reaches this size go by reference (pipeline_composites.c). */
#define SD_CREATE_REF_MIN_BYTES (256u * 1024u)

const sd_dofn *sd__find_dofn(sd_bytes name);
const sd_combinefn *sd__find_combinefn(sd_bytes name);
sd_timestamp_fn sd__find_timestamp_fn(sd_bytes name);

/*
 * The payload of a beam:dofn:sundial_c:v1 FunctionSpec:
 *   lp(name) lp(config) varint(n_outputs) lp(tag)... varint(n_sides) lp(side local name)...
 * Decoded views borrow from the input; the arrays are owned (free with sd__dofn_payload_deinit).
 */
typedef struct sd__dofn_payload {
    sd_bytes name;
    sd_bytes config;
    size_t n_outputs;
    sd_bytes *outputs;
    size_t n_sides;
    sd_bytes *sides;
} sd__dofn_payload;

SD_MUST_CHECK sd_status sd__dofn_payload_encode(sd_buf *out,
                                                const char *name,
                                                sd_bytes config,
                                                const char *const *tags,
                                                size_t n_tags,
                                                const char *const *sides,
                                                size_t n_sides);
SD_MUST_CHECK sd_status sd__dofn_payload_decode(sd_bytes in, sd__dofn_payload *out, sd_err *err);
void sd__dofn_payload_deinit(sd__dofn_payload *p);

/* CombineFn payload: lp(name) lp(config). */
SD_MUST_CHECK sd_status sd__combinefn_payload_encode(sd_buf *out,
                                                     const char *name,
                                                     sd_bytes config);
SD_MUST_CHECK sd_status sd__combinefn_payload_decode(sd_bytes in,
                                                     sd_bytes *name,
                                                     sd_bytes *config,
                                                     sd_err *err);

/*
 * A coder tree serialized for DoFn configs (the assertion checker renders elements with it):
 * lp(urn) lp(payload) varint(n) child...
 */
SD_MUST_CHECK sd_status sd__coder_serialize(const sd_coder *c, sd_buf *out);
SD_MUST_CHECK sd_status sd__coder_deserialize(sd_reader *r, sd_coder **out, sd_err *err);

/* Append a readable rendering of one nested-encoded value of coder c (best effort). */
SD_MUST_CHECK sd_status sd__render_value(const sd_coder *c, sd_bytes value, sd_buf *out);

/* ---------------------------------------------------------------- bundle processor */

/*
 * What a bundle processor needs from the outside world. The worker implements it over the
 * Fn API; unit tests implement it in memory. All calls are made on the bundle's thread and
 * may block.
 */
typedef struct sd__bundle_io {
    /* Fetch the whole value of a state key (all continuation pages concatenated). */
    sd_status (*state_get)(void *ctx, const pb_StateKey *key, sd_buf *out, sd_err *err);
    sd_status (*state_append)(void *ctx, const pb_StateKey *key, sd_bytes data, sd_err *err);
    sd_status (*state_clear)(void *ctx, const pb_StateKey *key, sd_err *err);
    /* Output bytes for a data sink transform; is_last ends that sink's stream. */
    sd_status (
        *data)(void *ctx, const char *transform_id, sd_bytes data, bool is_last, sd_err *err);
    /* Log a line from user code. Optional. */
    void (*log)(void *ctx, const char *transform_id, const char *msg);
    void *ctx;
    /* Timers set for (transform, family); is_last ends that family's stream. */
    sd_status (*timers)(void *ctx,
                        const char *transform_id,
                        const char *family,
                        sd_bytes data,
                        bool is_last,
                        sd_err *err);
} sd__bundle_io;

typedef struct sd__counter {
    char *transform;
    char *name;
    int64_t value;
    bool partition_wm; /* a partition's watermark (name: the partition), not a user counter */
} sd__counter;

/*
 * A partitioned source's partition watermark, reported with the bundle as a Sundial
 * monitoring info (latest_int64: varint wall ms, varint watermark ms; labels PTRANSFORM and
 * SUNDIAL_PARTITION): beam:metric:sundial:partition_watermark:v1. Kept in the DoFn's counter
 * map under SD__GAUGE_PREFIX + partition, set rather than added.
 */
#define SD_URN_METRIC_PARTITION_WM "beam:metric:sundial:partition_watermark:v1"
#define SD_LABEL_SUNDIAL_PARTITION "SUNDIAL_PARTITION"
#define SD__GAUGE_PREFIX           "\x01wm:"
void sd__ctx_partition_wm(sd_ctx *c, const char *partition, sd_time wm);

/* A splittable DoFn's residual (checkpoint or split rest) for ProcessBundleResponse. */
typedef struct sd__residual_root {
    char *transform; /* the process transform's id */
    char *input;     /* its main input's local name */
    sd_buf element;  /* one windowed value, encoded as the input port encodes it */
    int64_t delay_ms;
    bool has_watermark; /* output_watermarks: every output at `watermark` */
    sd_time watermark;
    size_t n_outputs;
    char **outputs; /* the transform's output local names */
} sd__residual_root;

/* Free what a residual root owns (proc.c). */
void sd__residual_root_deinit(sd__residual_root *r);

/* What a finished bundle reports. Free with sd__bundle_result_deinit. */
typedef struct sd__bundle_result {
    sd_vec counters;  /* sd__counter */
    sd_vec residuals; /* sd__residual_root */
    bool has_pt_base; /* pt_base: the processing time the bundle's DoFns saw */
    sd_time pt_base;
} sd__bundle_result;

void sd__bundle_result_init(sd__bundle_result *r);
void sd__bundle_result_deinit(sd__bundle_result *r);

typedef struct sd__proc sd__proc;

/*
 * Build a processor for a ProcessBundleDescriptor (borrowed for the call; everything needed
 * is copied) and set up its DoFns. Errors name the transform and what is wrong.
 */
SD_MUST_CHECK sd_status sd__proc_create(const pb_ProcessBundleDescriptor *d,
                                        sd__proc **out,
                                        sd_err *err);
/* Start a bundle: io is borrowed until sd__proc_finish/abort. */
SD_MUST_CHECK sd_status sd__proc_start(sd__proc *p,
                                       const char *instruction_id,
                                       const sd__bundle_io *io,
                                       sd_err *err);
/* Feed a chunk of a data source's stream; is_last ends it. */
SD_MUST_CHECK sd_status
sd__proc_data(sd__proc *p, const char *transform_id, sd_bytes chunk, bool is_last, sd_err *err);
/* Timers for (transform, family); is_last ends that stream. */
SD_MUST_CHECK sd_status sd__proc_timers(sd__proc *p,
                                        const char *transform_id,
                                        const char *family,
                                        sd_bytes chunk,
                                        bool is_last,
                                        sd_err *err);
/* True when every data source and timer stream has seen is_last. */
bool sd__proc_inputs_done(const sd__proc *p);
/* Finish the bundle: finish_bundle callbacks, flush sinks with is_last. OUT: res. */
SD_MUST_CHECK sd_status sd__proc_finish(sd__proc *p, sd__bundle_result *res, sd_err *err);
/* Teardown every DoFn and free. NULL is a no-op. A processor whose bundle failed must be
 * destroyed, not reused. */
void sd__proc_destroy(sd__proc *p);

/* Timer streams the processor expects for a bundle (transform, family) pairs. */
size_t sd__proc_n_timer_streams(const sd__proc *p);
void sd__proc_timer_stream(const sd__proc *p,
                           size_t i,
                           const char **transform,
                           const char **family);

/* ------------------------------------------------------- time: TestStream, triggers, panes */

/*
 * Construction hooks for the modules that extend the pipeline builder (teststream.c,
 * windowing_opts.c): the sticky error and pipeline-owned objects.
 */
bool sd__pipeline_failed(const sd_pipeline *p);
void *sd__pipeline_fail(sd_pipeline *p, sd_status code, const char *fmt, ...) SD_PRINTF(3, 4);
/* Hand obj to the pipeline: free_fn(obj) runs at sd_pipeline_destroy. When that cannot be
 * recorded, free_fn(obj) runs at once, the pipeline fails (sticky) and false is returned. */
bool sd__pipeline_own(sd_pipeline *p, void *obj, void (*free_fn)(void *));
/* A root TestStream transform with one unbounded, globally windowed output per tag, whose
 * payload comes from ext at build time (borrowed; own it with sd__pipeline_own).
 * OUT: outs[i] for tags[i]. False on error (sticky). */
bool sd__pipeline_add_teststream(sd_pipeline *p,
                                 const char *name,
                                 const sd_coder *coder,
                                 const char *const *tags,
                                 size_t n_tags,
                                 const sd_teststream *ext,
                                 sd_pcoll **outs);

/*
 * A named composite scope: transforms created until sd__pipeline_end_composite become its
 * parts ("Read/Glob"). begin returns the scope to restore, or SD__NO_COMPOSITE when it failed
 * (sticky); end records out as the composite's output and is a no-op after a failure.
 */
#define SD__NO_COMPOSITE (-2L)
long sd__pipeline_begin_composite(sd_pipeline *p, const char *name);
void sd__pipeline_end_composite(sd_pipeline *p, long saved, sd_pcoll *out);
/* The name given to sd_pipeline_create ("" for none). Borrowed. */
const char *sd__pipeline_name(const sd_pipeline *p);
/* registry.c: a registered group function (sd_register_group_fn), or NULL. */
sd_group_fn sd__find_group_fn(sd_bytes name);
sd_partition_gen_fn sd__find_partition_gen(sd_bytes name);
/* group_state.c: register the helper's DoFn (from sd__register_builtins). */
void sd__register_group_builtins(void);
/* The unique names of the WindowIntos with sd_windowfn.drop_late_elements, comma-separated
 * and NUL-terminated in out ("" when none). */
SD_MUST_CHECK sd_status sd__pipeline_drop_late_names(const sd_pipeline *p, sd_buf *out);
/* Register the built-in DoFns of typed.c (called by sd__register_builtins) and of textio.c
 * (called by typed.c's). */
void sd__register_typed_builtins(void);
void sd__register_textio_builtins(void);
/* partitioned.c: the partitioned source's DoFn. */
void sd__register_partitioned_builtins(void);
/* Successful sd_pipeline_run calls of p so far (collections reload after each). */
long sd__pipeline_runs(const sd_pipeline *p);
void sd__pipeline_count_run(sd_pipeline *p);

/* run.c: one run of the pipeline (sd_pipeline_run without exploration). */
SD_MUST_CHECK sd_status sd__pipeline_run_once(sd_pipeline *p,
                                              const sd_run_options *opts,
                                              sd_run_result *result,
                                              sd_err *err);
/* explore.c: sd_pipeline_run with opts->explore_seeds > 0. */
SD_MUST_CHECK sd_status sd__pipeline_explore(sd_pipeline *p,
                                             const sd_run_options *opts,
                                             sd_run_result *result,
                                             sd_err *err);

/* Built-in DoFns of the typed helpers and text I/O (typed.c, textio.c). */
#define SD_FN_TYPED      "sundial:typed"
#define SD_FN_COLLECT    "sundial:collect"
#define SD_FN_TEXT_GLOB  "sundial:text_glob"
#define SD_FN_TEXT_READ  "sundial:text_read"
#define SD_FN_TEXT_SHARD "sundial:text_shard"
#define SD_FN_TEXT_WRITE "sundial:text_write"

/* The TestStreamPayload of ts with coder_id, packed into arena a. OUT: out. */
SD_MUST_CHECK sd_status sd__teststream_payload(const sd_teststream *ts,
                                               const char *coder_id,
                                               sd_arena *a,
                                               ProtobufCBinaryData *out);
/*
 * Elements as a TestStreamPayload carries them: each of elements[0..n) (a nested encoding
 * with coder) decoded and encoded again in the outer context, appended to outer; OUT:
 * items[i] (borrowed from outer, valid until it changes), bad = the element an error is
 * about. SD_EINVAL (the coder's message) for an element that is not one nested value;
 * SD_ENOMEM. teststream.c's builder and teststream_service.c share it.
 */
SD_MUST_CHECK sd_status sd__teststream_outer(const sd_coder *coder,
                                             const sd_bytes *elements,
                                             size_t n,
                                             sd_buf *outer,
                                             sd_bytes *items,
                                             size_t *bad,
                                             sd_err *err);
/* Tests only: let watermark events go backwards, so the runner's own check can be exercised. */
void sd__teststream_allow_backwards(sd_teststream *ts, bool allow);

/* The Trigger proto of t (NULL = the default trigger) in arena a; NULL when out of memory. */
SD_PL(Trigger) * sd__trigger_proto(sd_arena *a, const sd_trigger_spec *t);
/* Whether t was built by pipeline p. */
bool sd__trigger_belongs(const sd_trigger_spec *t, const sd_pipeline *p);

/* The pane-selecting DoFn of the per-pane assertions (panes.c); its configuration is
 *   byte(has_window) [ts(start) ts(end)] varint(sd_pane_filter) */
#define SD_FN_ASSERT_PANES "sundial:assert_panes"
SD_MUST_CHECK sd_status sd__pane_select_config(sd_buf *out,
                                               const sd_window *w,
                                               sd_pane_filter panes);
/* Register the built-in DoFns of panes.c (called by sd__register_builtins). */
void sd__register_time_builtins(void);

/* ---------------------------------------------------------------- pipeline -> proto */

/* Build the Pipeline message into arena a. by_reference: the workers are this process (the
 * LOOPBACK environment), so large Creates may carry only their token (builtins.c). */
SD_MUST_CHECK sd_status sd__pipeline_build(sd_pipeline *p,
                                           sd_arena *a,
                                           const char *env_urn,
                                           sd_bytes env_payload,
                                           bool by_reference,
                                           pb_Pipeline **out,
                                           sd_err *err);

/* ---------------------------------------------------------------- runtime (loop thread) */

typedef struct sd__rt sd__rt;
struct sd_rpc_channel;

/* The process-wide SDK runtime: a libev loop on its own thread with an sd_rpc hub. Started on
 * first use; never stopped before exit. */
SD_MUST_CHECK sd_status sd__rt_get(sd__rt **out, sd_err *err);
struct sd_rpc *sd__rt_rpc(sd__rt *rt);
/* Run fn(ctx) on the loop thread and wait for it to return. */
SD_MUST_CHECK sd_status sd__rt_call(sd__rt *rt, void (*fn)(void *ctx), void *ctx);

/*
 * Channels kept open between runs, so a program that runs one pipeline after another on the
 * same runner (a test suite) pays for a connection once, not per job and per worker. Loop
 * thread only. take: an idle channel to target, or a new one. give: ch back to the idle set
 * (at most one per target, a few targets, the least recently used closed first), or
 * destroyed when it still has calls. forget: close the idle channel to target (its server is
 * going away).
 */
SD_MUST_CHECK sd_status sd__rt_channel_take(sd__rt *rt,
                                            const char *target,
                                            struct sd_rpc_channel **out,
                                            sd_err *err);
void sd__rt_channel_give(sd__rt *rt, const char *target, struct sd_rpc_channel *ch);
void sd__rt_channel_forget(sd__rt *rt, const char *target);

/* The loopback worker pool of this process: started on first use. OUT: endpoint (borrowed). */
SD_MUST_CHECK sd_status sd__pool_endpoint(const char **endpoint, sd_err *err);

/* ---------------------------------------------------------------- worker */

typedef struct sd__worker sd__worker;

/*
 * Start a worker on the runtime's loop: connect to control_url with worker_id metadata and
 * serve instructions until the runner ends the control stream or sd__worker_stop().
 * on_done (optional) runs on the loop thread once the worker has shut down completely.
 * Call on the loop thread.
 */
SD_MUST_CHECK sd_status sd__worker_start(sd__rt *rt,
                                         const char *worker_id,
                                         const char *control_url,
                                         const char *logging_url,
                                         void (*on_done)(void *ctx, const char *why),
                                         void *ctx,
                                         sd__worker **out,
                                         sd_err *err);
/* Ask the worker to stop (loop thread). on_done follows. */
void sd__worker_stop(sd__worker *w);

/* ---------------------------------------------------------------- embedded runner */

/* Start / stop the embedded runner in-process: the program's own sd_embedded_runner_v1 or
 * libsundial_embedded.so beside this library (<sundial/embedded.h>); SD_EUNAVAIL with what to
 * link when neither is there. OUT: endpoint (owned by the handle). */
typedef struct sd__runner sd__runner;
SD_MUST_CHECK sd_status sd__runner_start(bool wall_clock,
                                         sd__runner **out,
                                         const char **endpoint,
                                         sd_err *err);
void sd__runner_stop(sd__runner *r);

/* DoFn setup/teardown for a DoFn whose state is one scratch sd_buf (builtins.c). */
sd_status sd__buf_state_setup(sd_bytes config, void **state, sd_err *err);
void sd__buf_state_teardown(void *state);

#endif
