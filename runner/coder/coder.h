/* Sundial: Beam's standard coders — coder trees, skipping, windows, panes, windowed values. */
#ifndef SD_RUNNER_CODER_CODER_H
#define SD_RUNNER_CODER_CODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"
#include "runner/base/time.h"

/* The opaque coder handle, windows and panes are the C SDK's public vocabulary: the installed
 * headers define them, and the definitions below complete them for the runner. */
#include <sundial/coder.h>
#include <sundial/window.h>

/*
 * Pure C: no protobuf-c, gRPC or libev. Everything here speaks bytes (sd_bytes / sd_reader /
 * sd_buf) and int64 millisecond timestamps. The runner (engine, planner, Fn API) and the C SDK
 * share it. Every decoder is bounds-checked: garbage input yields SD_EPROTO with a message
 * naming the coder URN and the expectation, never an out-of-bounds read.
 *
 * Threads: a built sd_coder is immutable; it may be read (skip/decode/encode) from any number
 * of threads at once. Reference counting (sd_coder_ref/sd_coder_destroy) is atomic.
 */

/* ------------------------------------------------------------------------------------------ */
/* Coder kinds and trees                                                                      */
/* ------------------------------------------------------------------------------------------ */

/*
 * The coder kinds the runner knows, one row each: the kind (SD_CODER_<KIND>), its URN (a
 * macro of runner/urns/urns.h, expanded only in coder.c), its short name, its number of
 * components (-1: any), and WIRE: 1 when the planner sends it to SDKs as it is and finds
 * element boundaries through it (runner/plan/coders.c), 0 when the planner wraps it in
 * length_prefix like any coder it does not know. The enum, sd_coder_kind_urn/_name/
 * _from_urn/_components/_wire and the component check of sd_coder_create all come from this
 * table; the codecs (skip.c, value_decode.c, value_encode.c, window.c) switch over the kind.
 */
/* clang-format off */
/*  KIND                     URN                                  NAME                   COMPONENTS, WIRE */
#define SD_CODER_KINDS(X) \
    X(BYTES,                 SD_URN_CODER_BYTES,                  "bytes",                  0, 1) \
    X(STRING_UTF8,           SD_URN_CODER_STRING_UTF8,            "string_utf8",            0, 1) \
    X(VARINT,                SD_URN_CODER_VARINT,                 "varint",                 0, 1) \
    X(DOUBLE,                SD_URN_CODER_DOUBLE,                 "double",                 0, 1) \
    X(BOOL,                  SD_URN_CODER_BOOL,                   "bool",                   0, 1) \
    X(KV,                    SD_URN_CODER_KV,                     "kv",                     2, 1) \
    X(ITERABLE,              SD_URN_CODER_ITERABLE,               "iterable",               1, 1) \
    X(STATE_BACKED_ITERABLE, SD_URN_CODER_STATE_BACKED_ITERABLE,  "state_backed_iterable",  1, 0) \
    X(NULLABLE,              SD_URN_CODER_NULLABLE,               "nullable",               1, 1) \
    X(LENGTH_PREFIX,         SD_URN_CODER_LENGTH_PREFIX,          "length_prefix",          1, 1) \
    X(GLOBAL_WINDOW,         SD_URN_CODER_GLOBAL_WINDOW,          "global_window",          0, 1) \
    X(INTERVAL_WINDOW,       SD_URN_CODER_INTERVAL_WINDOW,        "interval_window",        0, 1) \
    X(CUSTOM_WINDOW,         SD_URN_CODER_CUSTOM_WINDOW,          "custom_window",          1, 1) \
    X(WINDOWED_VALUE,        SD_URN_CODER_WINDOWED_VALUE,         "windowed_value",         2, 1) \
    X(PARAM_WINDOWED_VALUE,  SD_URN_CODER_PARAM_WINDOWED_VALUE,   "param_windowed_value",   2, 0) \
    X(TIMER,                 SD_URN_CODER_TIMER,                  "timer",                  2, 1) \
    X(ROW,                   SD_URN_CODER_ROW,                    "row",                    0, 0) \
    X(SHARDED_KEY,           SD_URN_CODER_SHARDED_KEY,            "sharded_key",            1, 0)
/* clang-format on */

#define SD__CODER_KIND_ENUM(KIND, URN, NAME, N, WIRE) SD_CODER_##KIND,

typedef enum sd_coder_kind {
    SD_CODER_KINDS(SD__CODER_KIND_ENUM) /* the rows, in order */
    SD_CODER_UNKNOWN                    /* any other URN: kept opaque */
} sd_coder_kind;

#undef SD__CODER_KIND_ENUM

#define SD_CODER_KIND_COUNT ((int)SD_CODER_UNKNOWN + 1)

struct sd_schema;    /* row schema, parsed from the row coder payload (runner/coder/schema.h) */
struct sd_wv_header; /* fixed header of a param_windowed_value coder */

/*
 * A coder tree. Built by sd_coder_build / sd_coder_create / sd_coder_from_urn and immutable
 * afterwards: treat every field as read-only. Nodes are reference counted and may be shared
 * (a component id used twice in one pipeline is one node). Free with sd_coder_destroy().
 *
 * Component order follows Beam: KV = (key, value); ITERABLE, STATE_BACKED_ITERABLE, NULLABLE,
 * LENGTH_PREFIX, CUSTOM_WINDOW, SHARDED_KEY = (element/inner); WINDOWED_VALUE,
 * PARAM_WINDOWED_VALUE = (element, window); TIMER = (key, window). An UNKNOWN coder keeps
 * whatever components it was given, unparsed.
 */
typedef struct sd_coder {
    sd_coder_kind kind;
    char *urn;                    /* owned, never NULL */
    char *id;                     /* owned; the pipeline component id, or NULL */
    sd_bytes payload;             /* owned copy of FunctionSpec.payload (may be empty) */
    struct sd_coder **components; /* owned references */
    size_t n_components;
    bool known;     /* the runner can decode values fully (this and all components known) */
    bool skippable; /* the runner can find value boundaries in nested context */
    /* Derived from the payload at build time (private; use the accessors). */
    struct sd_schema *schema;   /* ROW */
    struct sd_wv_header *param; /* PARAM_WINDOWED_VALUE */
    int depth;                  /* private: height of the tree (1 for a leaf) */
    long fixed_size;            /* private: see sd__coder_fixed_size (computed at build) */
    long refs;                  /* private: atomic reference count */
} sd_coder;

/* The standard URN of a kind ("beam:coder:kv:v1"); "" for SD_CODER_UNKNOWN. Never NULL. */
const char *sd_coder_kind_urn(sd_coder_kind kind);

/* Short name of a kind ("kv", "windowed_value", "unknown"). Never NULL. */
const char *sd_coder_kind_name(sd_coder_kind kind);

/* The number of components of a kind (-1: any, as for SD_CODER_UNKNOWN). */
int sd_coder_kind_components(sd_coder_kind kind);

/* The WIRE column: the planner sends coders of this kind as they are (false for UNKNOWN). */
bool sd_coder_kind_wire(sd_coder_kind kind);

/* The kind for a URN; SD_CODER_UNKNOWN for anything that is not a standard coder URN. */
sd_coder_kind sd_coder_kind_from_urn(const char *urn);

/* True when urn is one of Beam's standard coder URNs listed in sd_coder_kind. */
bool sd_coder_urn_is_standard(const char *urn);

/*
 * Pipeline-components lookup, injected by the caller (the planner adapts protobuf-c
 * Components to it). lookup returns false when id is not a coder of the pipeline; otherwise it
 * sets urn, payload and the component ids, all borrowed and valid for the duration of the
 * sd_coder_build call.
 */
typedef struct sd_coder_table {
    bool (*lookup)(void *ctx,
                   const char *id,
                   const char **urn,
                   sd_bytes *payload,
                   const char *const **component_ids,
                   size_t *n_components);
    void *ctx;
} sd_coder_table;

/*
 * Build the coder tree for coder_id, resolving components through table. Shared component ids
 * become shared nodes. Checks component counts per kind, parses payloads (row schema,
 * param_windowed_value header) and detects cycles.
 * OUT: out (caller owns; free with sd_coder_destroy). Returns SD_OK, SD_ENOTFOUND (an id is
 * missing), SD_EPROTO (cycle, bad component count, bad payload) or SD_ENOMEM. Errors read like
 * `coder c5 (beam:coder:kv:v1): expected 2 components, got 1`.
 */
SD_MUST_CHECK sd_status sd_coder_build(const sd_coder_table *table,
                                       const char *coder_id,
                                       sd_coder **out,
                                       sd_err *err);

/*
 * Build a standard coder of kind from components, which are borrowed (the new node takes its
 * own references). The list is terminated by NULL: sd_coder_create(&c, err, SD_CODER_KV, k, v,
 * NULL). Kinds that need a payload (ROW, PARAM_WINDOWED_VALUE) and SD_CODER_UNKNOWN are
 * rejected with SD_EINVAL; use sd_coder_from_urn. OUT: out (caller owns).
 */
SD_MUST_CHECK sd_status sd_coder_create(sd_coder **out, sd_err *err, sd_coder_kind kind, ...);

/*
 * Build a coder from a URN, a payload (copied) and components (borrowed; the node takes its own
 * references). Unknown URNs give an SD_CODER_UNKNOWN node. Same checks as sd_coder_build.
 * OUT: out (caller owns).
 */
SD_MUST_CHECK sd_status sd_coder_from_urn(const char *urn,
                                          sd_bytes payload,
                                          sd_coder *const *components,
                                          size_t n_components,
                                          sd_coder **out,
                                          sd_err *err);

/* Add a reference; returns c. Thread-safe. */
sd_coder *sd_coder_ref(sd_coder *c);

/* Drop a reference; frees the tree when the last one goes. NULL is a no-op. Thread-safe. */
void sd_coder_destroy(sd_coder *c);

/* Component i (borrowed), or NULL when out of range. */
const sd_coder *sd_coder_component(const sd_coder *c, size_t i);

/* The runner can decode this coder's values fully: its kind and every component are known. */
bool sd_coder_is_known(const sd_coder *c);

/*
 * The runner can find the end of one nested-context value without understanding all of it:
 * true for known coders and for any LENGTH_PREFIX, and for composites of skippable parts.
 */
bool sd_coder_is_skippable(const sd_coder *c);

/*
 * Human-readable tree, e.g. "windowed_value(kv(bytes, length_prefix(unknown<beam:coder:x>)),
 * global_window)", appended to out.
 */
SD_MUST_CHECK sd_status sd_coder_describe(const sd_coder *c, sd_buf *out);

/*
 * Structural equality: same kinds, URNs, payloads and components (ids are ignored).
 */
bool sd_coder_equal(const sd_coder *a, const sd_coder *b);

/* ------------------------------------------------------------------------------------------ */
/* Skipping                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/*
 * Advance r past one value encoded with c. nested = false means the value owns the rest of the
 * input (outer context): for bytes/string it consumes everything left. On error r is unchanged.
 * Returns SD_OK, SD_EPROTO (malformed/truncated), or SD_EUNIMPL when c (or a component the
 * boundary depends on) is SD_CODER_UNKNOWN and not inside a LENGTH_PREFIX.
 */
SD_MUST_CHECK sd_status sd_coder_skip(const sd_coder *c, sd_reader *r, bool nested, sd_err *err);

/* Like sd_coder_skip, and OUT: value = the bytes skipped (borrowed from r's input). */
SD_MUST_CHECK sd_status
sd_coder_slice(const sd_coder *c, sd_reader *r, bool nested, sd_bytes *value, sd_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Windows                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* sd_window and its helpers (sd_window_global, _interval, _max_ts, _cmp, _equal): see
 * <sundial/window.h>. */

/*
 * Encode / decode one window with a window coder (GLOBAL_WINDOW, INTERVAL_WINDOW or
 * CUSTOM_WINDOW; anything else is SD_EINVAL). Decoded custom_bytes borrow from r's input.
 */
SD_MUST_CHECK sd_status sd_window_encode(const sd_coder *window_coder,
                                         const sd_window *w,
                                         sd_buf *out,
                                         sd_err *err);
SD_MUST_CHECK sd_status sd_window_decode(const sd_coder *window_coder,
                                         sd_reader *r,
                                         sd_window *w,
                                         sd_err *err);

/*
 * A small list of windows that needs no allocation for up to SD_WINDOWS_INLINE windows.
 * Zero-initialise (or sd_windows_init), read through sd_windows_items(), free with
 * sd_windows_deinit(). Decoders reuse the heap storage across calls. Do not copy it by value
 * while it holds heap storage (n > SD_WINDOWS_INLINE): use sd_windows_set.
 */
#define SD_WINDOWS_INLINE 4

typedef struct sd_windows {
    size_t n;
    sd_window small[SD_WINDOWS_INLINE];
    sd_window *heap;
    size_t heap_cap;
} sd_windows;

void sd_windows_init(sd_windows *ws);
void sd_windows_deinit(sd_windows *ws);

static inline const sd_window *sd_windows_items(const sd_windows *ws)
{
    return ws->n > SD_WINDOWS_INLINE ? ws->heap : ws->small;
}

/* Replace the contents with a copy of windows[0..n). */
SD_MUST_CHECK sd_status sd_windows_set(sd_windows *ws, const sd_window *windows, size_t n);

/* Append one window. */
SD_MUST_CHECK sd_status sd_windows_push(sd_windows *ws, const sd_window *w);

/* ------------------------------------------------------------------------------------------ */
/* Pane info                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* sd_pane, SD_PANE_* and sd_pane_equal: see <sundial/window.h>. */

/*
 * Encode a pane in the shortest form the Beam writers use: the byte alone when index and
 * nonspec_index are 0 or timing is UNKNOWN; byte + varint(index) when index == nonspec_index
 * or timing is EARLY; otherwise byte + varint(index) + varint(nonspec_index).
 */
SD_MUST_CHECK sd_status sd_pane_encode(const sd_pane *p, sd_buf *out);

/* Decode a pane. SD_EPROTO on truncation or an unknown form (high nibble > 2). */
SD_MUST_CHECK sd_status sd_pane_decode(sd_reader *r, sd_pane *p, sd_err *err);

/*
 * Decode the pane of a windowed value, and the element metadata that may follow it: Beam Java
 * (since 2.6x, when its WindowedValueCoder's metadata support is on) sets bit 0x80 of the pane
 * byte and writes a BeamFnApi Elements.ElementMetadata message (the drain mode, ...) as varint
 * length + bytes between the pane and the value. OUT: metadata = those bytes (borrowed from
 * r's input; empty when there are none). The runner reads past them and does not carry them
 * on: what it encodes again has none, which Beam's decoders accept.
 */
SD_MUST_CHECK sd_status sd__wv_pane_decode(sd_reader *r,
                                           sd_pane *p,
                                           sd_bytes *metadata,
                                           sd_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Windowed values                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Timestamp, windows and pane of one windowed value. Zero-init; sd_wv_header_deinit after. */
typedef struct sd_wv_header {
    sd_time ts;
    sd_windows windows;
    sd_pane pane;
} sd_wv_header;

void sd_wv_header_init(sd_wv_header *h);
void sd_wv_header_deinit(sd_wv_header *h);

/*
 * Decode one nested-context windowed value with wv_coder (WINDOWED_VALUE or
 * PARAM_WINDOWED_VALUE; for the latter the header comes from the coder's payload).
 * OUT: hdr (reuses its window storage), element = the raw nested-context element bytes,
 * found by skipping with the element coder (borrowed from r's input). Returns SD_EPROTO on bad
 * bytes, SD_EUNIMPL when the element coder is not skippable, SD_EINVAL for a non-wv coder.
 */
SD_MUST_CHECK sd_status sd_wv_decode(const sd_coder *wv_coder,
                                     sd_reader *r,
                                     sd_wv_header *hdr,
                                     sd_bytes *element,
                                     sd_err *err);

/*
 * Append the header of a windowed value (timestamp, windows as a counted iterable, pane) using
 * window_coder for each window; the caller appends the element bytes after it. A failure says
 * why in err (which may be NULL).
 */
SD_MUST_CHECK sd_status sd_wv_encode_header(sd_buf *out,
                                            const sd_coder *window_coder,
                                            sd_time ts,
                                            const sd_window *windows,
                                            size_t n,
                                            const sd_pane *pane,
                                            sd_err *err);

/*
 * Append a whole windowed value with wv_coder: the header (nothing for PARAM_WINDOWED_VALUE)
 * followed by element, which must already be encoded with the element coder.
 */
SD_MUST_CHECK sd_status sd_wv_encode(const sd_coder *wv_coder,
                                     const sd_wv_header *hdr,
                                     sd_bytes element,
                                     sd_buf *out,
                                     sd_err *err);

/* The element coder (component 0) and window coder (component 1) of a wv coder; NULL if c is
 * not a windowed value coder. Borrowed. */
const sd_coder *sd_wv_element_coder(const sd_coder *wv_coder);
const sd_coder *sd_wv_window_coder(const sd_coder *wv_coder);

/* ------------------------------------------------------------------------------------------ */
/* KV                                                                                         */
/* ------------------------------------------------------------------------------------------ */

/*
 * Split an encoded KV into its key (the nested key encoding, found by skipping with the key
 * coder) and value (the rest). Both borrow from element. SD_EINVAL if kv_coder is not KV,
 * SD_EUNIMPL if the key coder is not skippable, SD_EPROTO on bad bytes.
 */
SD_MUST_CHECK sd_status sd_kv_split(const sd_coder *kv_coder,
                                    sd_bytes element,
                                    sd_bytes *key,
                                    sd_bytes *value,
                                    sd_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Timers (beam:coder:timer:v1)                                                               */
/* ------------------------------------------------------------------------------------------ */

/*
 * One timer. key = the raw nested key encoding (with the key coder); tag = the dynamic timer
 * tag's UTF-8 bytes (without length). When clear is true fire/hold/pane are not on the wire.
 * Decoded bytes borrow from the input. Zero-init; sd_timer_deinit frees the window storage.
 */
typedef struct sd_timer {
    sd_bytes key;
    sd_bytes tag;
    sd_windows windows;
    bool clear;
    sd_time fire;
    sd_time hold;
    sd_pane pane;
} sd_timer;

void sd_timer_init(sd_timer *t);
void sd_timer_deinit(sd_timer *t);

/* Decode one timer with a TIMER coder (components: key coder, window coder). */
SD_MUST_CHECK sd_status sd_timer_decode(const sd_coder *timer_coder,
                                        sd_reader *r,
                                        sd_timer *t,
                                        sd_err *err);

/* Append one timer. t->key must already be the nested key encoding. */
SD_MUST_CHECK sd_status sd_timer_encode(const sd_coder *timer_coder,
                                        const sd_timer *t,
                                        sd_buf *out,
                                        sd_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Iterables                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Append the known-length iterable prefix (4-byte big-endian count); elements follow, nested. */
SD_MUST_CHECK sd_status sd_iterable_encode_begin(sd_buf *out, size_t count);

/*
 * Reads an iterable (ITERABLE or STATE_BACKED_ITERABLE) element by element, accepting the
 * known-length form and the unknown-length (-1 + blocks) form. For a state-backed iterable that
 * ends in a continuation token, token is set when sd_iterable_next reports the end.
 */
typedef struct sd_iterable_reader {
    const sd_coder *owner; /* the iterable coder */
    const sd_coder *elem;  /* its element coder */
    sd_reader *r;
    bool unknown_length;
    bool done;
    bool has_token; /* a state-backed iterable ended with a continuation token */
    uint64_t left_in_block;
    sd_bytes token; /* borrowed; set when has_token */
    size_t index;   /* elements returned so far */
} sd_iterable_reader;

/*
 * Start reading the iterable at r with iterable_coder: consumes the 4-byte count (r is
 * unchanged on error). The reader borrows r, which must outlive it. An element that fails to
 * parse in sd_iterable_next leaves r just after the previous element.
 */
SD_MUST_CHECK sd_status sd_iterable_begin(sd_iterable_reader *it,
                                          const sd_coder *iterable_coder,
                                          sd_reader *r,
                                          sd_err *err);

/*
 * Next element. OUT: elem = its raw nested encoding (borrowed), has = false at the end (then
 * r is just past the iterable). SD_EUNIMPL if the element coder is not skippable.
 */
SD_MUST_CHECK sd_status sd_iterable_next(sd_iterable_reader *it,
                                         sd_bytes *elem,
                                         bool *has,
                                         sd_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Small helpers shared by the coders and their callers                                       */
/* ------------------------------------------------------------------------------------------ */

/* 8-byte sign-flipped big-endian timestamp. */
SD_MUST_CHECK sd_status sd_coder_put_ts(sd_buf *out, sd_time t);
SD_MUST_CHECK sd_status sd_coder_get_ts(sd_reader *r, sd_time *t);

#endif
