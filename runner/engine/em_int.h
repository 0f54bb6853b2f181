/*
 * Sundial: element manager internals, shared by the engine sources and its tests only.
 *
 * The records the engine keeps (slabs and element records, PCollections, stages, timers,
 * GBK groups, user state, bundles, the engine itself), each field commented with what it
 * holds and who owns it, and the sd__ functions one engine file offers the others. Which file
 * implements what is in em.c's essay ("Where the rest lives") and in README.md. Nothing
 * outside runner/engine and its unit tests may include this header.
 */
#ifndef SD_RUNNER_ENGINE_EM_INT_H
#define SD_RUNNER_ENGINE_EM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "runner/base/vec.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"

#define SD__EM_MAGIC 0x53454d31u /* "SEM1" */

/* Ask for the cache line at p ahead of its use, and mark a branch rarely taken (hints; nothing
 * where the compiler lacks them). */
#if defined(__GNUC__)
#define SD__PREFETCH(p) __builtin_prefetch(p)
#define SD__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SD__PREFETCH(p) ((void)(p))
#define SD__UNLIKELY(x) (x)
#endif
#define SD__BUNDLE_MAGIC 0x5342444cu /* "SBDL" */

/* ------------------------------------------------------------------------------------------ */
/* Byte slabs and element records                                                             */
/* ------------------------------------------------------------------------------------------ */

/*
 * A slab is one block of encoded bytes (a bundle's output for one PCollection, a GBK firing,
 * a residual, a TestStream event) that many element records point into. It is freed when the
 * last record referring to it goes. This keeps per-element cost at one fixed-size record.
 */
typedef struct sd__slab {
    size_t refs;
    uint8_t *data;
    size_t len;
} sd__slab;

/* A window as the engine keeps it: interval [start, end), global, or custom (interned). */
typedef struct sd__win {
    sd_time start;
    sd_time end;
    bool global;
    bool custom; /* start is INT64_MIN + the interned id (sd__win_intern_custom) */
} sd__win;

/* One element in one window, pending or in flight at an SDK stage. */
typedef struct sd__elem {
    sd_time ts;
    uint64_t seq; /* arrival order; ties on ts keep it */
    sd__win win;
    sd_pane pane;
    sd__slab *slab; /* one reference */
    size_t off;     /* element bytes = slab->data[off, off + len) */
    size_t len;
    size_t key_len; /* key = the first key_len element bytes (KV key, nested) when keyed */
} sd__elem;

/* An element on its way into the graph (borrowed bytes; slab may be NULL for copies). */
typedef struct sd__incoming {
    sd_time ts;
    sd__win win;
    sd_pane pane;
    sd_bytes elem;
    sd__slab *slab;
} sd__incoming;

/* A multiset of timestamps with a min query (watermark holds). */
typedef struct sd__tscount {
    sd_time ts;
    size_t count; /* 0: empty slot */
} sd__tscount;

typedef struct sd__tsbag {
    /* Distinct timestamps and their counts: open addressing with linear probing, deletion by
     * backward shift (a table of its own: every timer set, replaced or fired adds or removes
     * its hold, and an sd_map costs a key encoding, a byte hash and a key copy each time). */
    sd__tscount *slots;
    size_t cap; /* power of two or 0 */
    size_t distinct;
    sd_vec heap; /* sd_time min-heap; entries whose count is 0 are stale */
    size_t total;
    /* The minimum, while known (min_known): the watermark pass asks for it for every stage on
     * every pass, far more often than holds change. */
    bool min_known;
    sd_time min;
} sd__tsbag;

/* ------------------------------------------------------------------------------------------ */
/* Triggers (em_trigger.c)                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* One node of a compiled trigger tree; children are kids[kid_off .. kid_off + n_kids). */
typedef struct sd__trig {
    sd_trigger_kind kind;
    int64_t count;
    int64_t delay_ms;
    sd_time_transform tt[SD_TRIGGER_MAX_TIME_TRANSFORMS];
    uint32_t n_tt;
    int32_t early, late; /* AFTER_END_OF_WINDOW children, or -1 */
    uint32_t kid_off;
    uint32_t n_kids;
} sd__trig;

/* A compiled trigger: nodes in preorder, node 0 is the root. NULL means the default. */
typedef struct sd__trigger {
    sd__trig *nodes;
    size_t n_nodes;
    uint32_t *kids;
    size_t n_kids;
    bool uses_processing_time;
    /* The tree counts elements (AFTER_COUNT or ALWAYS somewhere): in a streaming pipeline the
     * GBK evaluates it as each element arrives (sd__gbk_add), not once per scheduling pass. */
    bool per_element;
} sd__trigger;

/* Per group, per node. */
typedef struct sd__trig_state {
    bool done;
    uint8_t phase;    /* AFTER_END_OF_WINDOW: 0 early, 1 late */
    uint32_t cur;     /* AFTER_EACH: current child */
    int64_t count;    /* ALWAYS, AFTER_COUNT: elements since the last firing */
    sd_time deadline; /* AFTER_PROCESSING_TIME: job-clock time it fires; MAX = unset */
} sd__trig_state;

typedef struct sd__trig_ctx {
    bool past_end; /* the watermark passed the window's max timestamp */
    sd_time clock; /* the job clock */
} sd__trig_ctx;

SD_MUST_CHECK sd_status sd__trig_compile(const sd_trigger *t, sd__trigger **out, sd_err *err);
void sd__trig_destroy(sd__trigger *t);
void sd__trig_init_state(const sd__trigger *t, sd__trig_state *s);
void sd__trig_on_element(const sd__trigger *t, sd__trig_state *s, sd_time clock);
bool sd__trig_should_fire(const sd__trigger *t, const sd__trig_state *s, const sd__trig_ctx *c);
void sd__trig_on_fire(const sd__trigger *t, sd__trig_state *s, const sd__trig_ctx *c);
bool sd__trig_finished(const sd__trig_state *s);
sd_time sd__trig_next_deadline(const sd__trigger *t, const sd__trig_state *s);
/* Session merging: fold `from` into `into` for every merging session, then settle the result
 * for the merged window (past_end: the watermark passed its max timestamp). */
void sd__trig_merge(const sd__trigger *t, sd__trig_state *into, const sd__trig_state *from);
void sd__trig_merge_end(const sd__trigger *t, sd__trig_state *s, bool past_end);

/* ------------------------------------------------------------------------------------------ */
/* PCollections                                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef struct sd__side_ref {
    size_t stage;
    size_t side;
} sd__side_ref;

typedef struct sd__pcoll {
    char *id;
    size_t index;
    sd_coder *wv_coder;           /* own reference */
    const sd_coder *elem_coder;   /* borrowed from wv_coder */
    const sd_coder *window_coder; /* borrowed from wv_coder */
    bool param_wv;                /* PARAM_WINDOWED_VALUE: the header is not on the wire */
    bool is_kv;
    bool needs_key;        /* some consumer groups or locks by key */
    sd_windowing ws;       /* ws.trigger is always NULL: see trigger */
    sd__trigger *trigger;  /* compiled; NULL = the default trigger */
    size_t producer;       /* stage index or SIZE_MAX */
    bool drop_behind_wm;   /* sd_em_set_drop_behind_watermark_output: emitted behind wm = late */
    sd_vec consumers;      /* size_t stage indices */
    sd_vec side_consumers; /* sd__side_ref */
    sd_time wm;
    /* The results PCollection of GBK stage merge_gbk's SDK window merges (elements delivered
     * here go to that GBK: sd__gbk_merge_apply), else SIZE_MAX. */
    size_t merge_gbk;
    /* What has been delivered into it so far (sd__em_deliver, when a bundle commits or the
     * runner makes output): windowed values, one per window an element is in, and the bytes
     * of their element encodings (no windowing header), with the smallest and largest. For
     * progress metrics (sd_em_pcollection_info); never read by the scheduler. */
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t min_bytes; /* meaningful once n_elements > 0 */
    uint64_t max_bytes;
} sd__pcoll;

/* ------------------------------------------------------------------------------------------ */
/* Stages                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct sd__side_window {
    sd__win win;
    sd_buf all;    /* concatenated element encodings */
    sd_map by_key; /* key encoding -> sd_buf * of value encodings (multimap only) */
    int64_t pane;  /* triggered side inputs: the pane index of what it holds */
} sd__side_window;

/* A triggered side input's element delivered while a reading bundle was in flight: applied
 * once the stage has none (sd__side_flush), so a bundle reads one version of the view. */
typedef struct sd__side_staged {
    sd__win win;
    int64_t pane;
    uint8_t *bytes; /* owned copy of the element encoding */
    size_t len;
} sd__side_staged;

typedef struct sd__side {
    char *transform_id;
    char *local_id;
    size_t pcoll;
    sd_side_kind kind;
    bool rewindowed;    /* sd_side_input_spec.main_windowing was set: */
    sd_windowing main;  /* a copy without its trigger */
    sd_map windows;     /* sd__win bytes -> sd__side_window * */
    sd_time min_expire; /* lower bound of the stored windows' max timestamps */
    bool triggered;     /* the side PCollection has a non-default trigger */
    sd_vec staged;      /* sd__side_staged, in delivery order (triggered only) */
} sd__side;

typedef struct sd__family {
    char *transform_id;
    char *family_id;
    bool processing_time;
    bool window_expiration; /* the stage's OnWindowExpiration family */
    sd_coder *timer_coder;  /* own reference */
    int32_t trace_name;     /* its family_id as a trace name (sd__trace_intern) */
} sd__family;

/* One live timer of a stateful stage; unique per (family, window, key, tag). One allocation
 * (sd__timer_create): the key and tag bytes follow the record, the tag right after the key
 * (sd__timer_tag). */
typedef struct sd__timer {
    /* First the fields a firing reads (due, hashes, key, family: one cache line), then the
     * rest; lengths and family in 32 bits: a million timers are 16 MB smaller. No pointer to
     * the tag: 112 bytes leave a key and tag of up to 16 bytes in two cache lines (the
     * timer pool's 128-byte blocks), where 120 took a third line for most keys. */
    /* When it becomes eligible: processing time, the job clock reaching `due`; event time, the
     * input watermark passing `due` (= fire, or for a window-expiration timer the window's
     * max timestamp + allowed lateness). */
    sd_time due;
    uint64_t hash;     /* of its identity (sd__timer_hash), fixed at creation */
    uint64_t key_hash; /* of its key alone (sd_hash_words, seed 0): what the key locks hash */
    uint8_t *key;      /* into the same allocation; the tag follows it */
    uint32_t family;
    uint32_t key_len;
    uint32_t tag_len;
    /* SD__TIMER_LIVE while stored (in the identity table and its domain's heap); DROPPED once
     * replaced or cleared while its heap entry remains (the heap then owns and frees it); OUT
     * otherwise (being built, fired into a bundle, passed over by take_timers). */
    uint8_t heap_state;
    sd_time fire; /* event time, or (processing time) the job clock time it is due */
    sd_time hold;
    sd__win win;
    sd_pane pane;
} sd__timer;

enum { SD__TIMER_OUT = 0, SD__TIMER_LIVE = 1, SD__TIMER_DROPPED = 2 };

/*
 * Where a stage's timers live: blocks of 16-byte size classes carved from 64 KB chunks, with a
 * free list per class (em_tpool.c). Larger timers, and every timer under
 * AddressSanitizer, come from sd_malloc.
 */
#define SD__TPOOL_CLASSES 32 /* blocks of up to 512 bytes */

typedef struct sd__tpool {
    void *free[SD__TPOOL_CLASSES + 1]; /* per class, linked through each block's first word */
    void *chunks;                      /* linked through each chunk's first word */
    uint8_t *bump;                     /* the newest chunk's unused tail */
    size_t left;
    size_t live; /* blocks handed out */
} sd__tpool;

/* A min-heap of stored timers of one time domain, by (due, identity), four children a node,
 * with lazy deletion: entries of dropped timers stay until they reach the top, which is always
 * live. The due time is kept next to the pointer so sifting compares without touching the
 * timers (a heap of 100,000 timers spread over the address space otherwise spends its time in
 * cache misses). */
typedef struct sd__tslot {
    sd_time due;
    sd__timer *t;
} sd__tslot;

typedef struct sd__theap {
    sd__tpool *pool; /* where its dropped timers go back (the stage's) */
    void *mem;       /* the allocation; items lies in it, aligned (sd__theap_reserve) */
    sd__tslot *items;
    size_t len; /* entries, live and dropped */
    size_t cap;
    size_t live; /* stored timers */
} sd__theap;

#define SD__THEAP_ARITY 4

/* The earliest stored timer, or NULL. */
static inline sd__timer *sd__theap_top(const sd__theap *h)
{
    return h->live > 0 ? h->items[0].t : NULL;
}

/* The stored timers of a stage by identity: open addressing with linear probing over
 * (hash, timer) slots, deletion by backward shift (no tombstones). Intrusive: the timers are
 * the entries (no key copies), and a timer known by pointer is removed without rehashing or
 * comparing its identity. Owns the timers. */
typedef struct sd__tref {
    uint64_t hash;
    sd__timer *t; /* NULL: empty slot */
} sd__tref;

typedef struct sd__ttable {
    sd__tpool *pool; /* where its timers go back when it is destroyed (the stage's) */
    sd__tref *slots;
    size_t cap; /* power of two or 0 */
    size_t len; /* stored timers */
} sd__ttable;

/* The keys in-flight bundles of a stateful stage hold: open addressing with linear probing,
 * deletion by backward shift. A key's bytes are not copied: they are the owner's own copy in
 * its `locked` buffer, found by offset (the buffer may move as it grows). */
typedef struct sd__klock {
    uint64_t hash;
    struct sd_bundle *owner; /* NULL: empty slot */
    size_t off, len;         /* the key: owner->locked.data[off, off + len) */
} sd__klock;

typedef struct sd__klocks {
    sd__klock *slots;
    size_t cap; /* power of two or 0 */
    size_t len;
} sd__klocks;

/* GBK values of one group written to the spill file (em_spill.c). */
typedef struct sd__gext {
    uint64_t off;
    size_t len;
} sd__gext;

/*
 * The GroupByKey's value pool (em_vpool.c): values that are not tiny, packed one after another
 * in shared blocks. A group's pooled values are a chain of segments (a header, then the bytes of
 * one or more consecutive values); a segment is appended to in place while it is the last thing
 * in the pool's current block. A block goes back to the allocator when its last segment goes.
 */
typedef struct sd__vpool sd__vpool;

typedef struct sd__vblock {
    sd__vpool *pool;
    size_t size;     /* bytes of data[] */
    size_t used;     /* data[0, used) holds segments, live or dead (multiples of 8) */
    size_t live;     /* bytes of live segments, their headers included */
    uint32_t *pages; /* bytes of live segments on each memory page data[] spans (NULL: not
                      * counted); a page inside data[] that empties goes back to the system */
    uint64_t data[];
} sd__vblock;

typedef struct sd__vseg {
    struct sd__vseg *next;
    sd__vblock *block;
    size_t len; /* bytes of values after this header */
} sd__vseg;

/* One group's pooled values, in order. */
typedef struct sd__vchain {
    sd__vseg *head, *tail;
    size_t len; /* bytes of values */
} sd__vchain;

struct sd__vpool {
    sd__vblock *cur;     /* the block segments are cut from (NULL before the first) */
    size_t held;         /* bytes of blocks allocated */
    size_t live;         /* bytes of live segments, their headers included */
    unsigned page_shift; /* log2 of the memory page size (set with the first block) */
    size_t compactions;  /* times compacted (sd__vpool_compact_begin) */
};

/* GBK: the values of one key in one window (or one session). */
typedef struct sd__group {
    sd__win win;
    uint8_t *key;
    size_t key_len;
    sd_buf values;   /* nested value encodings not yet emitted (discarding) or all (accumulating);
                      * over the memory budget the older ones are on file: */
    sd__vchain pool; /* or, for a small group of values that are not tiny, in the GBK's pool
                      * (em_vpool.c): never both (values.len == 0 while the chain is not empty) */
    sd_vec *spilled; /* sd__gext: values written to the spill file, in order, before `values`
                      * (NULL when none) */
    uint32_t count;  /* values in `values` */
    uint32_t fresh;  /* values that arrived since the last firing */
    sd_time min_ts;  /* of fresh values (SD_TIME_MAX when none) */
    sd_time max_ts;  /* of fresh values */
    sd_time all_min_ts, all_max_ts; /* of every value in `values` */
    int64_t panes;                  /* firings so far */
    int64_t nonspec;                /* non-early firings so far */
    uint64_t first_seq;             /* when the group's first value arrived (firing order) */
    bool closed;           /* the trigger finished: later values for this group are dropped */
    bool before_end;       /* a value came before its end: the end-of-window step is to come */
    struct sd__tail *tail; /* closed by a pane cut on arrival, while a tail may join */
    sd__trig_state *trig;  /* per trigger node, when the input has a non-default trigger */
} sd__group;

/*
 * A group closed by a pane cut on arrival (cut_if_ready): what arrives while the job is still in
 * the input epoch it closed in (sd_em.epoch and the job clock) joins the group as a tail, which
 * goes out in the window's last pane when the watermark passes its end (em_gbk.c). The closing
 * pane is held (encoded in held) until the epoch ends, then last, or a tail joins, then not.
 */
typedef struct sd__tail {
    uint64_t epoch;
    sd_time clock;
    bool holding;
    uint32_t held_n;     /* fresh values in the held pane */
    uint32_t held_count; /* values encoded in it (all of the group's when accumulating) */
    sd_time held_ts;     /* the held pane's output timestamp */
    sd_time held_min_ts; /* its values' earliest timestamp (holds the watermark) */
    sd_pane held_pane;
    sd_buf held;
} sd__tail;

/*
 * A pane cut when an element arrived (per-element trigger evaluation): its output element
 * (key, count, values) is already encoded at [off, off + len) of sd__gbk.ready_bytes, and it
 * goes out at the next sd__gbk_fire, before any later pane of its group. Self-contained: the
 * group may merge away or be dropped before that.
 */
typedef struct sd__ready_pane {
    sd__win win;
    sd_time ts;
    sd_pane pane;
    size_t off, len;
    uint32_t n_fresh;   /* values of this pane counted in sd__gbk.n_values until emitted */
    uint32_t count;     /* values encoded in it (the time trace) */
    uint64_t key;       /* its key's digest (the time trace: sd_hash_bytes) */
    uint64_t first_seq; /* of its group (firing order) */
    uint64_t seq;       /* cut order */
} sd__ready_pane;

typedef struct sd__gbk {
    sd_map groups;   /* non-merging, interval windows: sd__win bytes + key -> sd__group * */
    sd_map global;   /* the global window: key -> sd__group * (no window bytes to add per
                      * element: the key is looked up as it lies in the element) */
    sd_map sessions; /* merging: key -> sd_vec * of sd__group * sorted by start */
    size_t n_groups;
    size_t n_values;      /* fresh values held (pending count) */
    size_t bytes;         /* bytes of values held in memory (the groups' `values`) */
    sd_time min_ts;       /* min fresh ts over groups (cached; exact after a scan) */
    sd_time tail_min_ts;  /* min ts of the values of held closing panes (at the last scan) */
    sd_time min_deadline; /* min firing deadline over groups (cached lower bound) */
    sd_time min_pt;       /* min processing-time trigger deadline (exact after a scan) */
    bool dirty;           /* values arrived since the last scan (non-default triggers) */
    uint64_t next_seq;    /* arrival counter for sd__group.first_seq */
    sd_vec ready;         /* sd__ready_pane: panes cut on arrival, not yet emitted */
    sd_buf ready_bytes;   /* their encoded output elements */
    size_t n_ready;       /* values in ready panes (part of n_values) */
    size_t n_held;        /* values in held closing panes (part of n_values) */
    size_t n_holding;     /* groups holding a closing pane (sd__group.holding) */
    uint64_t hold_epoch;  /* while n_holding > 0: no hold is older than this epoch and clock */
    sd_time hold_clock;   /* (a scan is needed to release them only once either moved) */
    /* Window merging by the SDK (sd_em_set_merge_windows): the requests PCollection, or
     * SIZE_MAX. Groups are then kept per key in `sessions`, one per window the key holds. */
    size_t merge_requests;
    sd_map unmerged; /* key -> present: windows arrived since its last merge request */
    sd_map merging;  /* key -> present: a merge request is in flight (one per key) */
    sd__vpool pool;  /* small groups' values (sd__group.pool) */
} sd__gbk;

/* A run of spilled pending elements in the spill file (em_spill.c). */
typedef struct sd__run {
    uint64_t off;
    size_t len;
    size_t n;
    sd_time min_ts;
} sd__run;

/* A residual waiting for the clock. */
typedef struct sd__parked {
    sd_time release_at;
    sd__elem elem;
} sd__parked;

/* One ordered-list state entry: a sort key and its value (the bytes inside the LP). */
typedef struct sd__ol_entry {
    int64_t sort_key;
    uint8_t *value; /* owned */
    size_t len;
} sd__ol_entry;

/* Ordered-list entries sorted by sort key (equal keys in insertion order), live in
 * items[head, len): clearing a prefix only moves head. */
typedef struct sd__olist {
    sd__ol_entry *items;
    size_t head, len, cap;
} sd__olist;

/* Committed user state of one (transform, state id, window, key). */
typedef struct sd__state_cell {
    sd__win win;
    sd_buf bag;
    sd_map mm;    /* map key -> sd_buf * */
    sd__olist ol; /* beam:user_state:ordered_list:v1 */
} sd__state_cell;

/*
 * One stage of the job graph, as the element manager keeps it. Created by sd_em_add_stage
 * (em_graph.c), owned by sd_em.stages, freed by sd__stage_destroy with the engine. Every
 * time is event time in milliseconds (sd_time) unless a field says "job clock".
 *
 * The record has a common part, which every kind uses, and one part per stage kind (C11
 * anonymous structs, so the fields are still reached as st->pending, st->gbk, ...). The parts
 * are not a union: the watermark pass, the stuck dump and the invariant checker read every
 * part of every stage (an IMPULSE stage simply has empty SDK and GBK parts), and a GBK or a
 * time-sorted SDK stage both count dropped_late. Which kind writes which part:
 *
 *     kind        SDK part (elements, keys, timers, state)   GBK part
 *     SDK         yes                                         -
 *     GBK         - (empty)                                   yes
 *     IMPULSE, FLATTEN, TESTSTREAM: the common part only (impulse and flatten run inside
 *     sd_em_next_bundle; a TestStream's outputs are fed by the source driver, em_source.c)
 */
typedef struct sd__stage {
    /* ---- Common part ------------------------------------------------------------------ */
    char *id;           /* the executor's stage id (owned, NUL-terminated); key of stage_by_id */
    size_t index;       /* position in sd_em.stages; stable for the engine's life */
    sd_stage_kind kind; /* fixed at registration; says which kind part below is live */
    size_t *inputs;     /* PCollection indices (owned array); inputs[0] is the main input */
    size_t n_inputs;    /* 1 for SDK and GBK, 0 for IMPULSE and TESTSTREAM, >= 0 for FLATTEN */
    size_t *outputs;    /* PCollection indices (owned array) this stage produces */
    size_t n_outputs;

    /*
     * The watermarks (em_time.c sd__wm_update; the rule is in README.md). Both start at
     * SD_TIME_MIN, never decrease (sd__em_check verifies it after every mutation), and reach
     * SD_TIME_MAX when the stage is done.
     */
    sd_time in_wm;      /* input watermark: the upstream watermark, held back by the stage's own
                         * unprocessed elements (pending, in flight, parked, in a GBK group) */
    sd_time out_wm;     /* output watermark: no output older than this will be produced; copied to
                         * the wm of every output PCollection whenever it moves */
    bool has_est;       /* the stage has handed back residuals: out_wm may then advance ahead of
                         * in_wm, to its residuals' holds (em_time.c "Residual holds"), still
                         * bounded by the holds below */
    sd__tsbag holds;    /* output watermark holds: one entry per stored or fired timer, at the
                         * timer's hold timestamp; out_wm stays at or below their minimum */
    sd_time trace_hold; /* the earliest hold last recorded in the trace (MAX: none) */
    uint64_t dropped_late; /* elements dropped as late: by a GBK or a stateful SDK stage past
                            * allowed lateness, by a time-sorted SDK stage behind in_wm +
                            * lateness, or under the per-element policy (drop_behind_wm) */
    bool drop_behind_wm;   /* sd_em_set_drop_behind_watermark: every element whose timestamp is
                            * behind the watermark of the PCollection it arrives on is late */

    /* ---- SDK part: elements, key locks, timers, user state, side inputs, bundles -------- */
    struct {
        sd__side *sides; /* side inputs (owned array), each with its store of windows */
        size_t n_sides;
        bool stateful;        /* keyed user state or timers: bundles lock keys, see key_locks */
        sd__family *families; /* timer families (owned array), as registered */
        size_t n_families;
        size_t expiration_family; /* OnWindowExpiration family index, or SIZE_MAX */

        sd_vec pending; /* sd__elem min-heap by (ts, seq): elements ready for a bundle; each
                         * holds one reference to its slab */
        /* Pending elements written out while the engine is over its memory budget
         * (em_spill.c): runs on file, oldest first, then the open run still in memory. They
         * count as pending everywhere (sd__pending_n) and hold the input watermark at
         * spill_min; a stage loads its oldest run back when its heap is empty. */
        sd_vec spill_runs;      /* sd__run */
        sd_buf spill_tail;      /* the open run's encoded elements */
        size_t spill_tail_n;    /* elements in it */
        sd_time spill_tail_min; /* their oldest timestamp */
        size_t n_spilled;       /* elements in the runs and the open run */
        sd_time spill_min;      /* their oldest timestamp (SD_TIME_MAX when none) */
        /* Time-sorted input (Beam's RequiresTimeSortedInput): elements wait here, a min-heap
         * by (ts, seq), until the input watermark passes ts + allowed lateness, when no element
         * with an earlier timestamp can arrive any more; then they move to pending in
         * timestamp order. They hold the output watermark at their oldest timestamp meanwhile.
         */
        bool time_sorted;
        sd_vec sorted;
        sd__klocks key_locks;       /* the keys in-flight bundles hold (stateful stages only): a
                                     * key is in at most one in-flight bundle */
        sd__tpool tpool;            /* the memory of all its timers */
        sd__ttable timers;          /* the stored timers by identity (owns them), not those fired
                                     * into an in-flight bundle */
        sd__theap et_heap, pt_heap; /* the stored timers, per time domain, by due time; every
                                     * stored timer is live in exactly one */
        sd_vec parked; /* sd__parked: residuals waiting for the job clock (delayed resume) */
        /* Residuals of an SDK that waits for real time (em_complete.c, waits_for_wall) are
         * pending at once, the job clock standing still, but the stage hands out no bundle
         * before this wall-clock time (SD_TIME_MIN: none) while its pending elements are
         * exactly those wall_wait_n and no timer is ready (sd__stage_waits_for_wall). */
        sd_time wall_wait_until;
        size_t wall_wait_n;
        /* The residuals outstanding (parked, pending again or in a bundle in flight), each
         * holding the output watermark at its own estimate (em_time.c "Residual holds"). */
        sd__tsbag res_holds; /* their holds */
        sd_map res_by_seq;   /* sd__elem.seq (8 bytes) -> sd_time * (owned): which are they */
        sd_map state;        /* state identity -> sd__state_cell *: committed user state (owned) */
        sd_time state_min_expire;   /* lower bound of the cells' expiry (window max timestamp +
                                     * allowed lateness); SD_TIME_MAX when none: lets
                                     * sd__state_gc skip its scan */
        uint64_t state_epoch;       /* changes whenever committed user state changes other
                                     * than by a bundle's own commit (sd_em_bundle_state_epoch) */
        struct sd_bundle *inflight; /* doubly linked list of this stage's bundles in flight */
        struct sd_bundle *spare;    /* a finished bundle kept for the next (sd__bundle_recycle) */
        size_t n_inflight;          /* length of that list */
        size_t max_out_bytes;       /* sd_stage_spec.max_output_bytes (0: no output cap) */
        size_t out_per_elem;        /* output bytes per input element, learned from completed
                                     * bundles (sd__stage_learn_output_size) to honour the cap */
        bool out_learned;           /* a bundle with input has completed: out_per_elem is usable */
        bool spread;                /* sd_stage_spec.spread */
        bool sink_resends;          /* sd_stage_spec.sink_resends */
        uint64_t resent_pieces;     /* pieces dropped as resends of the next (counter) */
        size_t spread_min_bytes;    /* sd_stage_spec.spread_min_bytes */
        size_t spread_share;        /* elements per bundle while spreading (em_bundle.c) */
        uint64_t bundle_seq;        /* bundles made so far; numbers the bundle ids */
        char seq_digits[24];        /* bundle_seq in decimal, counted up in place (no division
                                     * per bundle); seq_len of them ("" before the first) */
        size_t seq_len;
    };

    /* ---- GBK part ----------------------------------------------------------------------- */
    struct {
        sd__gbk gbk;        /* groups by (window, key), their triggers and ready panes */
        size_t late_output; /* dead-letter PCollection index (also the last of outputs), or
                             * SIZE_MAX: late data is then dropped and counted */
    };
} sd__stage;

/* ------------------------------------------------------------------------------------------ */
/* Bundles                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* One family's fired timers, encoded at [off, off + len) of sd_bundle.timer_bytes. */
typedef struct sd__timer_input {
    size_t family;
    size_t off, len;
} sd__timer_input;

typedef struct sd__residual {
    uint8_t *bytes;
    size_t len;
    int64_t delay_ms;
    bool has_wm; /* the SDK reported an output watermark estimate with it: wm */
    sd_time wm;
} sd__residual;

/* Tentative state of one cell in one bundle. */
typedef struct sd__state_delta {
    sd__win win;
    bool cleared;    /* bag (and the whole multimap) cleared first */
    sd_buf appended; /* bag appends */
    sd_map mm;       /* map key -> sd__mm_delta * */
    /* Ordered list: ranges cleared from the committed entries (int64 start, end pairs), and
     * the entries appended in this bundle (later clears already applied to them). */
    sd_vec ol_cleared;
    sd__olist ol_added;
} sd__state_delta;

typedef struct sd__mm_delta {
    bool cleared;
    /* Some append arrived since the last clear, perhaps of zero bytes: a map key whose values
     * encode in zero bytes (Java's SetState is a multimap with VoidCoder values) is present. */
    bool appended_any;
    sd_buf appended;
} sd__mm_delta;

/*
 * One output stream of a bundle: the bytes the SDK sent for one output PCollection, in
 * arrival order, as sealed chunks followed by an open tail.
 *
 *     chunks[0] .. chunks[k-1]   tail
 *     [whole, checked values]    [checked values | not yet checked: a partial value or bad bytes]
 *                                 0           checked                                     tail.len
 *
 * Each piece is checked (decoded, as commit's first phase would) when it arrives, if it can
 * be: Data messages may cut a value anywhere, so a tail that does not decode to its end waits
 * for more bytes (tried again once it has doubled past the failure, so a value spread over
 * many messages is not decoded over and over), and commit checks whatever is left and reports
 * an error exactly as if nothing had been checked before. Once the checked part of the tail
 * reaches SD__OUT_CHUNK bytes it is sealed: it becomes a chunk and the unchecked rest starts a
 * new tail. At commit each chunk and the tail become a slab of their own, delivered in order.
 * So no buffer of a whole bundle's output is grown (and copied) by realloc, and the decoding
 * that checked it happened while the SDK was still producing. A stream feeding a GBK whose
 * windows the SDK merges is checked only at commit (its check reads engine state).
 */
#define SD__OUT_CHUNK (256u * 1024u)

typedef struct sd__chunk {
    uint8_t *data; /* owned; len whole checked values; NULL when on file or delivered */
    size_t len;
    bool on_file; /* over the memory budget it was written to the spill file, at off */
    uint64_t off;
} sd__chunk;

typedef struct sd__outstream {
    sd_vec chunks;    /* sd__chunk */
    sd_buf tail;      /* the open chunk */
    size_t checked;   /* bytes at the start of tail that are whole, checked values */
    size_t n_checked; /* values checked so far, in chunks and tail (for error messages) */
    size_t len;       /* bytes in chunks and tail */
    size_t retry_at;  /* after a failed check: tail length at which to try again */
    size_t spilled;   /* bytes of chunks on file */
    sd_em *em;        /* the engine whose spill file holds them (set by the first append) */
    sd_buf held;      /* sink_resends: the last piece, until the next shows it was not resent */
} sd__outstream;

struct sd_bundle {
    uint32_t magic;
    char *id;
    sd__stage *stage;
    const char *input_pcoll; /* borrowed from the engine */
    struct sd_bundle *prev, *next;
    sd_vec elems;     /* sd__elem, the main input in order */
    size_t n_primary; /* elements the SDK processes (after a channel split) */
    size_t n_input;   /* elements encoded in `input` (unchanged by splits) */
    sd_buf input;
    sd_vec input_ends;   /* size_t: where each element's encoding ends in `input` */
    sd_vec timer_inputs; /* sd__timer_input */
    sd_buf timer_bytes;  /* the fired timers, encoded, family after family */
    sd_vec fired;        /* sd__timer * taken out of the stage store */
    sd_time watermark;
    sd_time min_ts;         /* min input element ts (holds the input watermark while in flight) */
    sd__outstream *outputs; /* one per stage output */
    sd_buf *timer_out;      /* one per stage timer family */
    sd_vec residuals;       /* sd__residual */
    sd_map deltas;          /* state identity -> sd__state_delta * */
    sd_buf locked;          /* varint-length-prefixed keys this bundle locked (stateful) */
    bool has_pt_base;       /* the SDK reported its processing-time base (pt_base) */
    sd_time pt_base;
};

/* ------------------------------------------------------------------------------------------ */
/* The time trace (em_trace.c)                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct sd__trace {
    sd_trace_rec *recs;
    size_t len;      /* records kept (CUT included) */
    size_t cap;      /* the most records kept */
    bool cut;        /* the last record is CUT: nothing more is recorded */
    sd_vec names;    /* char * (owned): interned names, by id */
    sd_map name_ids; /* name -> (uintptr_t)(id + 1) */
} sd__trace;

/* ------------------------------------------------------------------------------------------ */
/* The engine                                                                                 */
/* ------------------------------------------------------------------------------------------ */

struct sd_em {
    uint32_t magic;
    sd_em_config cfg;
    sd_map cwin_ids;   /* custom window bytes -> (uintptr_t)id (sd__win_intern) */
    sd_vec cwin_bytes; /* sd_bytes owned: custom window id - 1 -> its component encoding */
    bool started;
    bool poisoned;
    bool draining; /* sd_em_drain: sources stopped, residuals no longer parked */
    sd_vec pcolls; /* sd__pcoll * */
    sd_vec stages; /* sd__stage * */
    sd_map pcoll_by_id;
    sd_map stage_by_id;
    size_t *topo; /* stage indices in topological order */
    size_t rr;    /* round-robin cursor: the stage after the one that got the last bundle, where
                   * the next scheduling pass starts (before the seed's shuffle, if any) */
    size_t *perm; /* scratch: the stage order of one scheduling pass (schedule seed) */
    uint64_t rng; /* the schedule generator's state (splitmix64) */
    uint64_t seq;
    size_t n_inflight;
    sd_time clock_now;
    sd_time clock_start;    /* the job clock when the engine was created (schedule records) */
    sd_time wall_last;      /* the wall clock as the engine last read it (sd__em_wall) */
    sd__trace trace;        /* the time trace (em_trace.c) */
    uint64_t progress;      /* bumped on every observable change (sd_em_check_livelock) */
    uint64_t epoch;         /* input epochs: a new one at each TestStream event played and
                             * each quiescence with closing panes held (sd__group.holding) */
    uint64_t idle_bundles;  /* SDK bundles completed in a row without progress */
    const char *idle_stage; /* the stage of the last of them (for the report) */
    /* The latest wall-clock time the first livelock_rounds of those bundles asked to be
     * woken at (resume delays, processing-time timers): on the synthetic clock a source
     * waiting for real time spins until then, and is not live-locked before it. */
    sd_time idle_wait_until;
    uint64_t idle_after_wait; /* those of them completed once that time had passed */
    /* Napping (em.c, nap): the time the streak's first idle bundle asked for, whether each
     * since asked for it, the latest asked, the nap's end and its wake-up (SD_TIME_MIN: none) */
    sd_time nap_target;
    bool nap_ok;
    sd_time nap_wake, nap_end, nap_until;
    sd_time wall_wait_min; /* the earliest wall_wait_until a stage skipped in take_bundle */
    size_t teststream;     /* the first TestStream stage's index, or SIZE_MAX */
    sd_em_source source;   /* the driver of the TESTSTREAM stages (sd_em_set_source), or
                            * all NULL */
    void *source_ctx;
    bool in_source_step;   /* inside source.step: the sd_em_source_* calls are allowed */
    uint64_t source_steps; /* steps the source driver played (TestStream event numbers) */
    /* Pausing and the tap (em_pause.c): NULL until first used. */
    struct sd__pause *pause;
    struct sd__tap *tap;
    bool waiting;        /* the last sd_em_next_bundle stopped for the gate or the source */
    bool source_waiting; /* ... for a live source with nothing to play yet */
    sd_buf scratch;
    sd_wv_header hdr;   /* decoding scratch */
    sd_timer timer;     /* decoding scratch */
    sd_timer timer_enc; /* encoding scratch (fired timers) */
    sd_vec timer_cands; /* take_timers scratch: sd__timer * taken / passed over */
    sd_vec timer_skipped;
    size_t churn; /* bytes moved in bulk since the last sd_mem_trim (sd__em_churn) */
    /* The memory budget (em_spill.c). */
    int spill_fd;         /* the spill file, or -1 before the first spill */
    uint64_t spill_end;   /* its length */
    uint64_t spill_live;  /* bytes on file still needed */
    uint64_t spill_total; /* bytes ever written (statistics) */
    uint64_t spill_peak;  /* the most spill_live has been */
    bool over_budget;     /* the last estimate was over the limit */
    uint32_t spill_ticks; /* sd__em_spilling calls since that estimate */
};

/* ------------------------------------------------------------------------------------------ */
/* The rule of time: holds and predicates (em_time.c computes the watermarks from them)       */
/* ------------------------------------------------------------------------------------------ */

/* What holds a stage back, by source (sd_trace_hold): each source's earliest timestamp,
 * SD_TIME_MAX when it holds nothing. Read whole by sd__holds_read; every watermark
 * computation takes its holds from here. */
typedef struct sd__holds {
    sd_time at[SD_HOLD_SOURCES];
    sd_time input;  /* the earliest of the input side (SD__HOLDS_INPUT) */
    sd_time min;    /* the earliest of all */
    bool residuals; /* residuals are outstanding (their holds may be at the end of time) */
} sd__holds;

#define SD__HOLD_BIT(src) (1u << (unsigned)(src))
/* The sources that are input not yet processed: they hold the input watermark. */
#define SD__HOLDS_INPUT                                                                           \
    (SD__HOLD_BIT(SD_HOLD_PENDING) | SD__HOLD_BIT(SD_HOLD_SPILL) |                                \
     SD__HOLD_BIT(SD_HOLD_IN_FLIGHT) | SD__HOLD_BIT(SD_HOLD_PARKED) | SD__HOLD_BIT(SD_HOLD_GBK) | \
     SD__HOLD_BIT(SD_HOLD_CUT_TAIL))
#define SD__HOLDS_ALL ((1u << SD_HOLD_SOURCES) - 2u) /* every source but NONE */

/* Read every hold source of st. */
void sd__holds_read(const sd_em *em, sd__stage *st, sd__holds *h);
/* The earliest hold among the sources in mask (SD__HOLD_BIT), and (source, may be NULL)
 * which one; SD_TIME_MAX and SD_HOLD_NONE when none holds. */
sd_time sd__holds_min(const sd__holds *h, unsigned mask, sd_trace_hold *source);

/* The watermark wm has passed event time t: t is strictly behind it, or wm is the end of time
 * (everything has passed). The rule for event-time timers, expiry timers and time-sorted
 * input. */
static inline bool sd__wm_passed(sd_time t, sd_time wm)
{
    return t < wm || wm >= SD_TIME_MAX;
}

/* A timer due at `due` is eligible: processing time, the job clock reached it; event time, the
 * stage's input watermark passed it. The one rule of timer eligibility. */
static inline bool
sd__timer_is_eligible(const sd_em *em, const sd__stage *st, bool processing_time, sd_time due)
{
    return processing_time ? due <= em->clock_now : sd__wm_passed(due, st->in_wm);
}

/* The top of a domain's heap if it is eligible, else NULL: the heaps' tops are the earliest of
 * each domain, and their slots carry the due time, so no timer is read (a cache miss each,
 * and the scheduler asks for every SDK stage on every pass). */
static inline sd__timer *
sd__timer_top_eligible(const sd_em *em, const sd__stage *st, bool processing_time)
{
    const sd__theap *h = processing_time ? &st->pt_heap : &st->et_heap;
    return h->live > 0 && sd__timer_is_eligible(em, st, processing_time, h->items[0].due)
               ? h->items[0].t
               : NULL;
}

/* Some stored timer of st is eligible. */
static inline bool sd__timers_ready(const sd_em *em, const sd__stage *st)
{
    return sd__timer_top_eligible(em, st, true) != NULL ||
           sd__timer_top_eligible(em, st, false) != NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Module-internal functions                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Something observable moved (sd_em_check_livelock): the live-lock count starts again. */
static inline void sd__em_progressed(sd_em *em)
{
    em->progress++;
    em->idle_bundles = 0;
    em->idle_wait_until = SD_TIME_MIN;
    em->idle_after_wait = 0;
    em->nap_ok = false;
    em->nap_until = em->nap_end = SD_TIME_MIN;
}

/* Slabs. */
sd__slab *sd__slab_create(uint8_t *data, size_t len); /* takes data (may be NULL with len 0) */
void sd__slab_unref(sd__slab *s);

/*
 * Windows. The engine keeps a window as [start, end) or the global window. A custom window
 * (beam:coder:custom_window:v1: a window only the SDK can interpret, written after its max
 * timestamp) is interned per engine: its component encoding gets an id k >= 1, and the window
 * is [INT64_MIN + k, max timestamp + 1) with the custom flag set (the flag, not the start,
 * tells: an SDK's interval window may start below SD_TIME_MIN too). A PCollection's windows
 * are all of one kind (its window coder's), so equality, hashing, identities and ordering
 * compare start and end: two custom windows are equal when their bytes are, and sort in the
 * order first seen. Only their end means anything (what the watermark is compared with); the
 * window fn that makes them is the SDK's, so the engine never assigns or merges them itself.
 * Interned windows live as long as the engine.
 */
#define SD__WIN_CUSTOM_MAX_IDS ((uint64_t)1 << 40)

static inline bool sd__win_is_custom(const sd__win *w)
{
    return w->custom;
}

static inline sd__win sd__win_from(const sd_window *w)
{
    if (w->global) {
        return (sd__win){ .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true };
    }
    return (sd__win){ .start = w->start, .end = w->end, .global = false };
}

/* sd__win_intern for a custom window (an id for its bytes, made on first sight). */
SD_MUST_CHECK sd_status sd__win_intern_custom(sd_em *em,
                                              const sd_window *w,
                                              sd__win *out,
                                              sd_err *err);

/* sd__win_from for any window, interning a custom one. Inline: it runs once per element and
 * window, and a call returning the window through memory stalled the caller's 16-byte reload
 * of it (a tenth of walk_values' time in bench_engine). */
SD_MUST_CHECK static inline sd_status
sd__win_intern(sd_em *em, const sd_window *w, sd__win *out, sd_err *err)
{
    if (!w->custom) {
        *out = sd__win_from(w);
        return SD_OK;
    }
    return sd__win_intern_custom(em, w, out, err);
}

/* The window as the coders see it (a custom window's bytes are the engine's, borrowed). */
sd_window sd__win_to(const sd_em *em, const sd__win *w);

static inline sd_time sd__win_max_ts(const sd__win *w)
{
    return w->global ? SD_TIME_GLOBAL_MAX : w->end - 1;
}

/* A window's clean-up time: its max timestamp plus the allowed lateness. */
static inline sd_time sd__win_expiry(const sd__win *w, int64_t allowed_lateness_ms)
{
    return sd_time_add(sd__win_max_ts(w), allowed_lateness_ms);
}

/* Expired: its clean-up time is behind the watermark wm (late data for it is dropped). */
static inline bool sd__win_is_expired(const sd__win *w, int64_t allowed_lateness_ms, sd_time wm)
{
    return sd__win_expiry(w, allowed_lateness_ms) < wm;
}

/* "Is late": an element in window w arriving on pc comes after its window expired at pc's
 * watermark (Beam's rule for a GroupByKey and a stateful stage: SD_LATE_WINDOW_EXPIRED). */
static inline bool sd__is_late(const sd__pcoll *pc, const sd__win *w)
{
    return sd__win_is_expired(w, pc->ws.allowed_lateness_ms, pc->wm);
}

/* Behind the watermark wm: the per-element late policy (SD_LATE_BEHIND_WATERMARK). */
static inline bool sd__is_behind(sd_time ts, sd_time wm)
{
    return ts < wm;
}

/* Time-sorted input at ts may go to its stage (input watermark in_wm, lateness ms): the
 * watermark passed ts + lateness. It is late (SD_LATE_SORTED_EXPIRED) when it arrives so,
 * unless the watermark is the end of time (then it is simply released). */
static inline bool sd__sorted_is_releasable(sd_time ts, int64_t lateness_ms, sd_time in_wm)
{
    return sd__wm_passed(sd_time_add(ts, lateness_ms), in_wm);
}

static inline bool sd__sorted_is_late(sd_time ts, int64_t lateness_ms, sd_time in_wm)
{
    return in_wm < SD_TIME_MAX && sd__sorted_is_releasable(ts, lateness_ms, in_wm);
}

/* 17-byte identity of a window (global flag, start, end) appended to out. */
SD_MUST_CHECK sd_status sd__win_put(sd_buf *out, const sd__win *w);
SD_MUST_CHECK sd_status
sd__win_decode(sd_em *em, const sd_coder *window_coder, sd_bytes bytes, sd__win *out, sd_err *err);

/* Timestamp multisets (em_tsbag.c). */
void sd__tsbag_deinit(sd__tsbag *b);
SD_MUST_CHECK sd_status sd__tsbag_add(sd__tsbag *b, sd_time t);
void sd__tsbag_remove(sd__tsbag *b, sd_time t);
sd_time sd__tsbag_min(sd__tsbag *b); /* SD_TIME_MAX when empty */
/* Iterate the distinct timestamps: `size_t it = 0; sd_time t; while (sd__tsbag_next(...))`. */
bool sd__tsbag_next(const sd__tsbag *b, size_t *it, sd_time *t);

/* Lookups by index and by id (NULL id or unknown id: NULL). */
static inline sd__pcoll *sd__em_pcoll_at(const sd_em *em, size_t i)
{
    return *SD_VEC_AT(&em->pcolls, sd__pcoll *, i);
}

static inline sd__stage *sd__em_stage_at(const sd_em *em, size_t i)
{
    return *SD_VEC_AT(&em->stages, sd__stage *, i);
}

static inline sd__pcoll *sd__em_find_pcoll(const sd_em *em, const char *id)
{
    return id == NULL ? NULL : sd_map_get_str(&em->pcoll_by_id, id);
}

static inline sd__stage *sd__em_find_stage(const sd_em *em, const char *id)
{
    return id == NULL ? NULL : sd_map_get_str(&em->stage_by_id, id);
}

/* Return st unchanged, marking the engine poisoned first when st is SD_ENOMEM or
 * SD_EINTERNAL (an apply step failed half-way: the job must fail). */
sd_status sd__em_poison(sd_em *em, sd_status st);

/* The memory budget and the spill file (em_spill.c). */
#define SD__SPILL_RUN         (1024u * 1024u) /* bytes of a run of spilled pending elements */
#define SD__SPILL_CHECK_EVERY 256u            /* deliveries between two estimates of what is held */
/* What the engine holds now, estimated (em_spill.c says how). */
size_t sd__em_mem_estimate(const sd_em *em);
/* Estimate now: true when over sd_em_config.memory_limit (never without one). */
bool sd__em_over_budget(sd_em *em);
/* Bytes moved in bulk (freed or grown): every SD__TRIM_AFTER of them, sd_mem_trim (em_spill.c). */
#define SD__TRIM_AFTER ((size_t)8 * 1024 * 1024)
void sd__em_churn(sd_em *em, size_t bytes);
/* The last estimate's answer, estimated again every SD__SPILL_CHECK_EVERY calls. */
bool sd__em_spilling(sd_em *em);
/* Append len bytes to the spill file (made on first use). OUT: off. SD_EIO names the cause. */
SD_MUST_CHECK sd_status
sd__spill_write(sd_em *em, const void *data, size_t len, uint64_t *off, sd_err *err);
SD_MUST_CHECK sd_status
sd__spill_read(sd_em *em, uint64_t off, void *data, size_t len, sd_err *err);
/* Those bytes are no longer needed: their disk space goes back where the file system can. */
void sd__spill_free(sd_em *em, uint64_t off, size_t len);
void sd__spill_close(sd_em *em);
/* Queue e (its bytes: elem) in st's open run of spilled pending elements. */
SD_MUST_CHECK sd_status
sd__pending_spill(sd_em *em, sd__stage *st, const sd__elem *e, sd_bytes elem, sd_err *err);
/* Move st's oldest spilled run (else its open run) into its pending heap. Poisons on error. */
SD_MUST_CHECK sd_status sd__pending_load(sd_em *em, sd__stage *st, sd_err *err);
void sd__pending_spill_deinit(sd__stage *st);
/*
 * The value pool (em_vpool.c). A value of at least SD__VPOOL_MIN_VALUE bytes goes to the pool
 * while its group has no buffer of its own and holds at most SD__VPOOL_MAX_GROUP bytes with it;
 * otherwise to the group's buffer, where the group's pooled values move first
 * (sd__vchain_to_buf).
 */
#define SD__VPOOL_MIN_VALUE 256u
#define SD__VPOOL_MAX_GROUP (256u * 1024u)
SD_MUST_CHECK sd_status sd__vpool_append(sd__vpool *p, sd__vchain *c, sd_bytes value);
/* Every segment of c goes back to its pool (c empty after). */
void sd__vchain_release(sd__vchain *c);
/* Append c's bytes to out. */
SD_MUST_CHECK sd_status sd__vchain_copy(const sd__vchain *c, sd_buf *out);
/* Move c's values to the end of `to` (room reserved for them and `extra` more); release c. */
SD_MUST_CHECK sd_status sd__vchain_to_buf(sd__vchain *c, sd_buf *to, size_t extra);
/* Compaction: whether dead segments hold more of the blocks than live ones (and over two
 * blocks); then begin (new segments go to fresh blocks) and move each chain (one segment, in
 * fresh blocks; the old blocks go as they empty). */
bool sd__vpool_wants_compact(const sd__vpool *p);
void sd__vpool_compact_begin(sd__vpool *p);
SD_MUST_CHECK sd_status sd__vpool_move(sd__vpool *p, sd__vchain *c);
/* The bytes c's segments take in their blocks (SIZE_MAX when c's length or tail is wrong). */
size_t sd__vchain_footprint(const sd__vchain *c);
/* Free the current block; every chain must have been released. */
void sd__vpool_deinit(sd__vpool *p);

/* GroupByKey values on file (em_spill.c). Forget every value of g, in memory and on file. */
void sd__gbk_values_clear(sd_em *em, sd__gbk *gbk, sd__group *g);

/* Panes cut on arrival and tails (em_cut.c). The output timestamp of a pane of g's values as
 * they are now; its output element (key, count, values) appended to out. */
sd_time sd__gbk_pane_ts(const sd__pcoll *pc, const sd__group *g);
SD_MUST_CHECK sd_status
sd__gbk_encode_pane(sd_em *em, sd_buf *out, const sd__stage *st, const sd__group *g, sd_err *err);
/* In a streaming pipeline, ask g's per-element trigger after a value joined it and cut a pane
 * when it fires; tail_ok: a closing cut lets the rest of the epoch join as a tail (non-merging
 * windows). */
SD_MUST_CHECK sd_status sd__gbk_cut_if_ready(sd_em *em,
                                             sd__stage *st,
                                             const sd__pcoll *pc,
                                             sd__group *g,
                                             bool tail_ok,
                                             sd_err *err);
/* Whether a value arriving now joins g's tail. */
bool sd__gbk_tail_open(const sd_em *em, const sd__group *g);
void sd__gbk_tail_free(sd__group *g);
/* Move g's held closing pane to the ready panes: last unless a tail joined. */
SD_MUST_CHECK sd_status sd__gbk_release_held(sd__gbk *gbk, sd__group *g);
/* Over the memory budget, write the values of every group of st's GroupByKey to the file
 * (once it holds a quarter of the budget, or sd__spill_unit(64 KiB) if that is more). A group's
 * values keep their order: its extents first, then what arrives next in `values`. */
SD_MUST_CHECK sd_status sd__gbk_maybe_spill(sd_em *em, sd__stage *st, sd_err *err);
/* Every value of g on file (its in-memory ones written as one more extent). */
SD_MUST_CHECK sd_status sd__gbk_spill_all_of(sd_em *em, sd__gbk *gbk, sd__group *g, sd_err *err);
/* Append g's values on file to out, in order. */
SD_MUST_CHECK sd_status sd__gbk_read_spilled(sd_em *em,
                                             const sd__group *g,
                                             sd_buf *out,
                                             sd_err *err);

/* A size that buffers something (a run, an output chunk) under the memory budget: never more
 * than an eighth of the budget, so several fit in it, and a tiny budget (the engine tests use
 * one byte) puts each piece on file. */
static inline size_t sd__spill_unit(const sd_em *em, size_t unit)
{
    size_t part = em->cfg.memory_limit / 8 > 0 ? em->cfg.memory_limit / 8 : 1;
    return em->cfg.memory_limit > 0 && part < unit ? part : unit;
}

/* st's pending elements: in the heap and spilled. */
static inline size_t sd__pending_n(const sd__stage *st)
{
    return st->pending.len + st->n_spilled;
}

/* Element heaps (em_heap.c): sd_vec of sd__elem, a min-heap by (ts, seq), four children a
 * node. */
#define SD__ELEM_HEAP_ARITY 4
bool sd__elem_less(const sd__elem *a, const sd__elem *b);
SD_MUST_CHECK sd_status sd__elem_heap_push(sd_vec *h, const sd__elem *e);
/* Remove the element at index at (0 = the oldest) into *out, keeping the heap order. */
void sd__elem_heap_take(sd_vec *h, size_t at, sd__elem *out);
/* Whether h is in heap order (em_check.c). */
bool sd__elem_heap_ok(const sd_vec *h);

/* Graph records (em.c; registration is em_graph.c). destroy(NULL) is a no-op; a stage's
 * in-flight bundles, pending elements, timers and state go with it. */
void sd__pcoll_destroy(sd__pcoll *pc);
void sd__stage_destroy(sd__stage *st);

/* Delivery into the graph (em.c). */
SD_MUST_CHECK sd_status sd__em_deliver(sd_em *em,
                                       sd__pcoll *pc,
                                       const sd__incoming *in,
                                       sd_err *err);
/* Queue one element at an SDK stage (its pending heap, or the time-sorted buffer, where a
 * too-late element is dropped and counted); takes a reference to in->slab. key_len: see
 * sd__elem. spill: over the memory budget it may go to the spill file instead (not for
 * residuals, whose holds are tracked by sequence number in the heap). */
SD_MUST_CHECK sd_status sd__em_push_elem(sd_em *em,
                                         sd__stage *st,
                                         const sd__incoming *in,
                                         size_t key_len,
                                         bool spill,
                                         sd_err *err);
/* A time-sorted element may go to the stage once the input watermark is past ts + lateness. */
bool sd__em_sorted_releasable(const sd_em *em, const sd__stage *st, sd_time ts);

/*
 * The job's time (em_time.c): the clock funnel, the hold tracker, the watermark rule.
 */
/* Move the job clock forward to t, saying why; false (nothing changes) unless t is after it.
 * Every move of the clock goes through here. */
bool sd__clock_advance(sd_em *em, sd_time t, sd_trace_clock_cause cause);
/* The wall clock (the injected one, if any), remembered in em->wall_last. */
sd_time sd__em_wall(sd_em *em);
/* Earliest processing-time event (PT timers, trigger deadlines, parked residuals), now or
 * later; false if none. */
bool sd__em_next_pt_event(const sd_em *em, sd_time *out);
/* The minimum over st's input PCollections of their watermark. */
sd_time sd__em_upstream_wm(const sd_em *em, const sd__stage *st);
/* Recompute st's input and output watermarks from its upstream watermark and its holds.
 * OUT: changed is set when either moved. */
void sd__wm_update(sd_em *em, sd__stage *st, bool *changed);
/* Residual holds (em_time.c). Record that the element with sequence number seq at stage st is
 * a residual holding st's output watermark at hold. SD_ENOMEM. */
SD_MUST_CHECK sd_status sd__residual_hold_add(sd__stage *st, uint64_t seq, sd_time hold);
/* The bundle is complete: the residuals among its processed inputs are done. */
void sd__residual_holds_retire(sd__stage *st, const struct sd_bundle *b);
void sd__residual_holds_deinit(sd__stage *st);

/* Pausing (em_pause.c). May a time step to target (the job clock after it; a source step's
 * from sd__em_source_target) be taken now? false: the job rests at the closed gate. */
bool sd__em_gate(sd_em *em, bool source, sd_time target);
/* The source driver can play its next step now (a live one may wait for its service). */
bool sd__em_source_ready(sd_em *em);
/* The job clock after the source driver's next step (the clock now if it does not tell). */
sd_time sd__em_source_target(const sd_em *em);
/* Keep what is delivered into pc (em->tap set). SD_ENOMEM. */
SD_MUST_CHECK sd_status sd__em_tap_note(sd_em *em, const sd__pcoll *pc, const sd__incoming *in);
/* Real time may move the synthetic clock (sd__clock_advance's WALL cause, slow waves): not
 * while the gate is closed or a pause at a time or before an event is armed, so a pausable
 * job's clock moves only by its own events and a stepped run equals an unpaused one. */
bool sd__em_pause_lets_real_time_in(const sd_em *em);
/* Free the pause state and the tap (sd_em_destroy). */
void sd__em_pause_destroy(sd_em *em);

/* The source driver has a step left to play (em_source.c). */
bool sd__em_source_pending(const sd_em *em);
/* Play the source driver's next step (em_source.c); counts as progress. */
SD_MUST_CHECK sd_status sd__em_source_step(sd_em *em, sd_err *err);

/* Bundles: building, failing and recycling (em_bundle.c; committing is em_complete.c). */
/*
 * Build the next bundle of an SDK stage, or leave *out NULL when the stage has nothing ready.
 * On failure everything taken is given back (or the engine is poisoned on ENOMEM).
 */
SD_MUST_CHECK sd_status sd__em_make_bundle(sd_em *em, sd__stage *st, sd_bundle **out, sd_err *err);
/* SD_EINVAL unless b is a live bundle; SD_ESTATE once the engine is poisoned. */
/* Schedule decisions (em_sched.c): report one to sd_em_config.on_decision (a no-op without
 * one). The clock decisions report em->clock_now. */
SD_MUST_CHECK sd_status sd__em_decide_bundle(sd_em *em, const sd_bundle *b, sd_err *err);
SD_MUST_CHECK sd_status sd__em_decide_clock(sd_em *em, sd_em_decision_kind kind, sd_err *err);
SD_MUST_CHECK sd_status sd__em_decide_commit(sd_em *em, const sd_bundle *b, sd_err *err);
void sd__em_decide_fail(sd_em *em, const sd_bundle *b);

SD_MUST_CHECK sd_status sd__bundle_check(const sd_em *em, const sd_bundle *b, sd_err *err);
/* Free the bundle's own memory (not the slab references of its inputs). NULL: no-op. */
void sd__bundle_destroy(sd_bundle *b);
/* The end of a bundle's life: like sd__bundle_destroy, but a small bundle is kept as its
 * stage's spare, buffers and all, for the next bundle to reuse. NULL: no-op. */
void sd__bundle_recycle(sd_bundle *b);
/* Give back what a bundle took: inputs [from, n_primary) and (when all) its fired timers. */
SD_MUST_CHECK sd_status sd__bundle_return_inputs(sd__stage *st, sd_bundle *b, size_t from);
/* Release the keys b locked (those still locked by b). */
void sd__bundle_unlock_keys(sd__stage *st, sd_bundle *b);
/* The bundle holding key, or NULL. */
struct sd_bundle *sd__key_owner(const sd__klocks *kl, sd_bytes key);
/* Iterate the locks: `size_t it = 0; const sd__klock *l; while (sd__klocks_next(...)) {}`. */
bool sd__klocks_next(const sd__klocks *kl, size_t *it, const sd__klock **l);
void sd__klocks_deinit(sd__klocks *kl);
/* Take b off its stage's in-flight list (and the engine's count). */
void sd__bundle_unlink(sd_em *em, sd__stage *st, sd_bundle *b);
/* After a bundle with input completed: update the stage's output bytes per input element. */
void sd__stage_learn_output_size(sd__stage *st, const sd_bundle *b);

/* em_size.c: the most input elements st's next bundle may take by its output cap and its
 * spread share (0: no limit of the stage's own). May fix the spread share (st is updated). */
size_t sd__stage_bundle_cap(sd__stage *st);
/* Output streams (em_outstream.c). */
void sd__outstream_reset(sd__outstream *os);
/* keeps the tail's capacity */
void sd__outstream_deinit(sd__outstream *os);
/* The bytes os holds (for the spare-bundle limit). */
size_t sd__outstream_footprint(const sd__outstream *os);
/* Append what the SDK sent for pc, checking what decodes whole (see sd__outstream). */
SD_MUST_CHECK sd_status
sd__outstream_append(sd_em *em, const sd__pcoll *pc, sd__outstream *os, sd_bytes data, sd_err *err);
/* Let every output's held piece through (b has ended: nothing resends it now; only a
 * sink_resends stage holds pieces). */
SD_MUST_CHECK sd_status sd__outstream_release_held(sd_em *em,
                                                   sd__stage *st,
                                                   sd_bundle *b,
                                                   sd_err *err);
/*
 * Check the windowed values of pc in data from *pos to the end, as commit's first phase does;
 * *pos and *n (values checked, for messages) advance past each whole value checked. Returns
 * SD_OK at the end of data, else the first error (with err set, naming element *n), leaving
 * *pos at the start of the value that failed.
 */
SD_MUST_CHECK sd_status
sd__em_check_values(sd_em *em, sd__pcoll *pc, sd_bytes data, size_t *pos, size_t *n, sd_err *err);
/* Uniform in [0, n) from the schedule generator (n > 0). */
size_t sd__em_rng_below(sd_em *em, size_t n);

/* GBK (em_gbk.c). */
void sd__gbk_init(sd__gbk *g);
void sd__gbk_deinit(sd__gbk *g);
/* Late data: counted in st->dropped_late and shown to the observer (sd_em_config.on_late);
 * pc is the PCollection it arrived on. */
void sd__em_note_late(sd_em *em,
                      sd__stage *st,
                      const sd__pcoll *pc,
                      const sd__incoming *in,
                      sd_late_reason why,
                      bool routed);
/* Late data at a GBK: noted, and delivered to its dead-letter PCollection if it has one. */
SD_MUST_CHECK sd_status
sd__gbk_late(sd_em *em, sd__stage *st, const sd__incoming *in, sd_late_reason why, sd_err *err);
SD_MUST_CHECK sd_status sd__gbk_add(sd_em *em,
                                    sd__stage *st,
                                    const sd__incoming *in,
                                    sd_bytes key,
                                    sd_bytes value,
                                    sd_err *err);
/*
 * Fold the groups at list[idx[0..n)] (n >= 1, idx ascending) into list[idx[0]], whose window
 * becomes merged: values, counts, pane counters (those of the group whose window equals merged,
 * else a new window's), trigger states (sd__trig_merge, then sd__trig_merge_end when n > 1).
 * The others are destroyed and leave the list, which stays sorted by window start. A result
 * whose trigger finished, or any of whose parts was closed, is closed and what it held is
 * dropped (counted as late). OUT: kept (the merged group).
 */
SD_MUST_CHECK sd_status sd__gbk_fold(sd_em *em,
                                     sd__stage *st,
                                     sd_vec *list,
                                     const size_t *idx,
                                     size_t n,
                                     const sd__win *merged,
                                     sd__group **kept,
                                     sd_err *err);
/* Send a merge request for every key with unmerged windows and none in flight (em_merge.c).
 * OUT: changed. */
SD_MUST_CHECK sd_status sd__gbk_request_merges(sd_em *em,
                                               sd__stage *st,
                                               bool *changed,
                                               sd_err *err);
/* A merge result delivered to pc (pc->merge_gbk set): check only (apply false: nothing
 * changes, bad bytes fail the bundle) or apply it to the GBK's groups. */
SD_MUST_CHECK sd_status
sd__gbk_merge_result(sd_em *em, const sd__pcoll *pc, sd_bytes elem, bool apply, sd_err *err);

/* A key of GBK g is waiting for an SDK merge of its windows (its groups may not fire). */
static inline bool sd__gbk_key_merging(const sd__gbk *g, sd_bytes key)
{
    return g->merge_requests != SIZE_MAX &&
           (sd_map_has(&g->unmerged, key) || sd_map_has(&g->merging, key));
}

/* Emit every group whose deadline the upstream watermark passed. OUT: changed. */
SD_MUST_CHECK sd_status
sd__gbk_fire(sd_em *em, sd__stage *st, sd_time upstream, bool *changed, sd_err *err);

/* Side inputs and user state (em_state.c). */
void sd__side_init(sd__side *s);
void sd__side_deinit(sd__side *s);
/* Store one delivered element in s; a triggered side input whose reading stage has a bundle
 * in flight (defer) stages a copy instead. */
SD_MUST_CHECK sd_status
sd__side_add(sd_em *em, sd__side *s, const sd__incoming *in, bool defer, sd_err *err);
/* Apply the staged elements of st's triggered side inputs (st has no bundle in flight). */
SD_MUST_CHECK sd_status sd__side_flush(sd_em *em, sd__stage *st, sd_err *err);
/* Some triggered side input of st has staged elements. */
bool sd__side_has_staged(const sd__stage *st);
/* s holds a window w (a triggered side input: some firing of w arrived). */
bool sd__side_has_window(const sd__side *s, const sd__win *w);
void sd__state_cell_destroy(void *cell);
/* The key part of a state identity: lp(transform) lp(state id) lp(window) key. */
sd_bytes sd__state_cell_key(sd_bytes id);
void sd__state_delta_destroy(void *delta);
/* Commit b's tentative state. OUT: changed is set when committed state differs afterwards
 * (live-lock progress; a clear of nothing or a bag rewritten with the same bytes is no change). */
SD_MUST_CHECK sd_status sd__state_commit(sd_em *em, sd__stage *st, sd_bundle *b, bool *changed);
/* Drop state and side-input windows whose max timestamp (+ lateness) is behind out_wm. */
void sd__state_gc(sd_em *em, sd__stage *st);

/* Timers: records and their pool (em_tpool.c), the identity table (em_ttable.c), the heaps
 * (em_theap.c), setting and clearing (em_timer.c). */
/* A timer of that identity with the other fields zero (heap_state OUT), from pool; NULL when
 * out of memory. Freed by sd__timer_destroy into the same pool (NULL t: no-op). */
sd__timer *
sd__timer_create(sd__tpool *pool, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag);
/* The same, its key's and identity's hashes known (sd_hash_words(key, 0), sd__timer_hash). */
sd__timer *sd__timer_create_hashed(sd__tpool *pool,
                                   size_t family,
                                   const sd__win *w,
                                   sd_bytes key,
                                   sd_bytes tag,
                                   uint64_t key_hash,
                                   uint64_t hash);
void sd__timer_destroy(sd__tpool *pool, sd__timer *t);
/* Free the pool's memory (every timer from it must be destroyed first). */
void sd__tpool_deinit(sd__tpool *pool);
/* The hash of a timer identity (family, window, key, tag), given its key's hash
 * (sd_hash_words(key, 0)). */
uint64_t sd__timer_hash(size_t family, const sd__win *w, uint64_t key_hash, sd_bytes tag);
/* The stored timer of that identity, or NULL. */
sd__timer *
sd__timers_find(const sd__ttable *tt, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag);
/* The same, its identity's hash known (sd__timer_hash); the table must not be empty. */
sd__timer *sd__timers_find_hashed(const sd__ttable *tt,
                                  uint64_t hash,
                                  size_t family,
                                  const sd__win *w,
                                  sd_bytes key,
                                  sd_bytes tag);
/* Make room for n more timers (so a later insert cannot fail). */
SD_MUST_CHECK sd_status sd__timers_reserve(sd__ttable *tt, size_t n);
/* Store t (room reserved; no timer of its identity stored) / unstore t (it must be stored). */
void sd__timers_insert(sd__ttable *tt, sd__timer *t);
void sd__timers_remove(sd__ttable *tt, sd__timer *t);
/* Hints: t (stored) will soon be removed / a timer of that identity hash looked up; its slot
 * may be fetched into the cache. */
void sd__timers_prefetch(const sd__ttable *tt, const sd__timer *t);
void sd__timers_prefetch_id(const sd__ttable *tt, uint64_t hash);
/* Hint, after a pop from h (a heap of tt's timers): the next two timers to fire will be taken
 * soon; the next one's slot and the one after's record may be fetched into the cache. */
void sd__timers_prefetch_ahead(const sd__ttable *tt, const sd__theap *h);
/* Iterate: `size_t it = 0; sd__timer *t; while (sd__timers_next(tt, &it, &t)) {...}`. */
bool sd__timers_next(const sd__ttable *tt, size_t *it, sd__timer **t);
/* Destroy every stored timer and the table. */
void sd__timers_deinit(sd__ttable *tt);
/* Store t (taking it; on failure it is destroyed), replacing the timer of its identity. OUT
 * (may be NULL): old_fire = the replaced timer's firing time, left alone when there was none
 * (live-lock progress; read from the lookup the replacement makes anyway). */
SD_MUST_CHECK sd_status sd__timer_set(sd_em *em, sd__stage *st, sd__timer *t, sd_time *old_fire);
/* A fired timer is done (its bundle completed, or it cannot go back): its hold goes, and it. The
 * timer holds are written only here, in sd__timer_set and where a timer is replaced or
 * cleared (em_timer.c). */
void sd__timer_retire(sd__stage *st, sd__timer *t);
/* Clear the stored timer of that identity, if any (recorded in the trace when there was one). */
void sd__timer_clear(sd_em *em,
                     sd__stage *st,
                     size_t family,
                     const sd__win *w,
                     sd_bytes key,
                     sd_bytes tag);
/*
 * OnWindowExpiration bookkeeping: st has seen key in window w (an input element, or committed
 * state). Sets the (key, w) expiration timer unless it exists or w already expired. No-op for
 * stages without an expiration family.
 */
SD_MUST_CHECK sd_status sd__expiry_note(sd_em *em, sd__stage *st, const sd__win *w, sd_bytes key);
/* The heap of t's time domain. */
sd__theap *sd__timer_heap(sd__stage *st, const sd__timer *t);
/* Make room for n more timers in the heap (so a later push cannot fail). */
SD_MUST_CHECK sd_status sd__theap_reserve(sd__theap *h, size_t n);
/* Push t (OUT; room must have been reserved): it is LIVE. */
void sd__theap_push(sd__theap *h, sd__timer *t);
/* Take the top (there must be one) out: it is OUT, the caller's. */
sd__timer *sd__theap_pop(sd__theap *h);
/* t (LIVE in h) is replaced or cleared: DROPPED, and h frees it in time. */
void sd__theap_drop(sd__theap *h, sd__timer *t);
/* Free the dropped timers left and the heap (the live ones belong to the identity table). */
void sd__theap_deinit(sd__theap *h);
/* Heap order: due, then identity (family, window, key, tag). */
int sd__timer_cmp(const sd__timer *a, const sd__timer *b);

/* t's tag (borrowed: valid while t lives). */
static inline sd_bytes sd__timer_tag(const sd__timer *t)
{
    return sd_bytes_make(t->key + t->key_len, t->tag_len);
}

/* The time trace (em_trace.c). cap 0: SD_EM_TRACE_CAP_DEFAULT. */
SD_MUST_CHECK sd_status sd__trace_init(sd__trace *tr, size_t cap);
void sd__trace_deinit(sd__trace *tr);
/* The next record, of kind with its cause and stage, numbered and stamped with the job and
 * wall clocks, the rest empty, for the caller to fill in; NULL once the trace is cut (the cap
 * was reached: the CUT record counts it). Never fails nor allocates. */
sd_trace_rec *sd__trace_slot(sd_em *em, sd_trace_kind kind, int cause, int32_t stage);
/* Append a copy of r (its seq, clock and wall are the store's), as sd__trace_slot. */
void sd__trace_add(sd_em *em, const sd_trace_rec *r);
/* The id of name in the trace's names (made on first sight); -1 when out of memory. */
int32_t sd__trace_intern(sd_em *em, sd_bytes name);
/* A job-clock time as records give it: ms since the engine was created. */
sd_time sd__trace_clock(const sd_em *em, sd_time clock);
/* The records, one function a kind, called where the engine does the thing (each does nothing
 * but count once the trace is cut). The clock moved from old to em->clock_now. */
void sd__trace_clock_moved(sd_em *em, sd_time old, sd_trace_clock_cause cause);
/* A stage's input (SD_TRACE_WM_IN) or output (SD_TRACE_WM_OUT) watermark moved. */
void sd__trace_wm(sd_em *em, const sd__stage *st, sd_trace_kind kind, sd_time now, sd_time old);
/* st's earliest hold is now `now`, from source (st->trace_hold is updated). */
void sd__trace_hold(sd_em *em, sd__stage *st, sd_time now, sd_trace_hold source);
/* Timer t of st was set, cleared or fired (kind). */
void sd__trace_timer(sd_em *em, const sd__stage *st, sd_trace_kind kind, const sd__timer *t);
/* GroupByKey st emitted a pane of count values in window w for the key with digest key. */
void sd__trace_pane(sd_em *em,
                    const sd__stage *st,
                    const sd__win *w,
                    uint64_t key,
                    const sd_pane *pane,
                    int64_t count,
                    sd_time ts);
/* The source driver played an event of stage on pcoll (-1: none; cause: 0 elements, 1
 * watermark, 2 processing time; count elements; t the watermark or the clock after, in trace
 * clock). */
void sd__trace_source(sd_em *em, int32_t stage, int32_t pcoll, int cause, int64_t count, sd_time t);
/* n values a GroupByKey held (the earliest at ts) were dropped as late with their window w, a
 * closed session an open one merged into (counted, not observed one by one). */
void sd__trace_late_values(sd_em *em,
                           const sd__stage *st,
                           const sd__pcoll *pc,
                           const sd__win *w,
                           sd_time ts,
                           uint64_t n);
/* An element was found late (as sd__em_note_late). */
void sd__trace_late(sd_em *em,
                    const sd__stage *st,
                    const sd__pcoll *pc,
                    const sd__incoming *in,
                    sd_late_reason why,
                    bool routed);

/* A record of kind with its cause and stage, everything else empty. */
static inline sd_trace_rec sd__trace_rec(sd_trace_kind kind, int cause, int32_t stage)
{
    return (sd_trace_rec){
        .kind = (uint8_t)kind, .cause = (uint8_t)cause, .stage = stage, .pcoll = -1, .name = -1
    };
}

/*
 * Invariant checker (em_check.c), run by the tests after every mutation: returns NULL when
 * every invariant holds, else a static string naming the broken one. Requires the previously
 * observed watermarks to check monotonicity: pass prev (2 * n_stages entries: stage i's input
 * watermark at [2i], its output watermark at [2i + 1]), updated in place; NULL to skip that
 * check.
 */
const char *sd__em_check(const sd_em *em, sd_time *prev);

/* Total pending work counted across the engine (for tests and sd_em_done). */
size_t sd__em_pending(const sd_em *em);

/* The number of groups a GBK stage holds (for tests). */
size_t sd__em_gbk_groups(const sd_em *em, const char *stage_id);

#endif
