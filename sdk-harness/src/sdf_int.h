/*
 * Sundial C SDK: internals of splittable DoFns (sdf.c) and of the richer state kinds
 * (state_kinds.c), shared with the bundle processor (proc*.c) and their unit tests.
 *
 * The pure parts — the offset-range tracker, the watermark estimators, the calendar
 * arithmetic, the restriction codec — take no locks and touch no processor; the processor's
 * operators (proc_ops.c) own the per-call context (sd__sdf_call) and guard a tracker with its
 * own mutex while a split request may touch it.
 */
#ifndef SD_SDK_HARNESS_SRC_SDF_INT_H
#define SD_SDK_HARNESS_SRC_SDF_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/vec.h"
#include "runner/urns/state_kinds.h"
#include "sdk-harness/src/sdk_int.h"
#include "sundial/sundial.h"

/* ---------------------------------------------------------------- offset-range tracker */

typedef struct sd__tracker {
    sd_offset_range r; /* the restriction now owned (to shrinks on checkpoints and splits) */
    int64_t last;      /* the last claimed offset, valid when claimed */
    bool claimed;
    bool exhausted; /* a claim past r.to was refused */
} sd__tracker;

void sd__tracker_init(sd__tracker *t, sd_offset_range r);

/* 1: claimed; 0: pos >= r.to (the tracker is exhausted); -1: pos is below r.from or not above
 * the last claim (a DoFn bug). */
int sd__tracker_claim(sd__tracker *t, int64_t pos);

/* True when no offset of the restriction is left unclaimed. */
bool sd__tracker_done(const sd__tracker *t);

/* The first offset not yet claimed. */
int64_t sd__tracker_next(const sd__tracker *t);

/*
 * Split off the unclaimed rest at fraction (0 = everything unclaimed, a checkpoint; 0.5 =
 * about half of it) of the remaining work. The tracker keeps the primary [r.from, split);
 * OUT: residual [split, old r.to). False (nothing changes) when the residual would be empty.
 */
bool sd__tracker_split(sd__tracker *t, double fraction, sd_offset_range *residual);

/* ---------------------------------------------------------------- watermark estimators */

typedef struct sd__wm_est {
    sd_wm_spec spec;
    sd_time wm; /* the estimate so far (its state) */
} sd__wm_est;

/* Start from the state a residual carried (or the element's timestamp at first). */
void sd__wm_init(sd__wm_est *e, const sd_wm_spec *spec, sd_time state);
/* An output with timestamp ts was emitted. */
void sd__wm_observe(sd__wm_est *e, sd_time ts);
/* SD_WM_MANUAL: the DoFn's own estimate. */
void sd__wm_set(sd__wm_est *e, sd_time wm);
/* The estimate now (wall_now: the SDK's wall clock, read by SD_WM_WALL_TIME). */
sd_time sd__wm_current(sd__wm_est *e, sd_time wall_now);
/* False for SD_WM_NONE: no output watermark is reported. */
bool sd__wm_reports(const sd__wm_est *e);

/* ---------------------------------------------------------------- calendar arithmetic */

/* Days since 1970-01-01 of a proleptic Gregorian date (month 1..12) and back. */
int64_t sd__days_from_civil(int64_t y, int m, int d);
void sd__civil_from_days(int64_t days, int64_t *y, int *m, int *d);
int sd__days_in_month(int64_t y, int m);
/* t moved back by `months` calendar months (negative: forward), the day clamped to the
 * target month's length, time of day kept; clamped to Beam's timestamp range. */
sd_time sd__time_minus_months(sd_time t, int64_t months);

/* ---------------------------------------------------------------- restriction codec */

/*
 * A restriction as the runner carries it (ParDoPayload.restriction_coder_id is
 * KV<KV<varint, varint>, varint>): varint(from) varint(to) varint(estimator state).
 */
SD_MUST_CHECK sd_status sd__restriction_encode(sd_buf *out, sd_offset_range r, sd_time wm_state);
SD_MUST_CHECK sd_status sd__restriction_decode(sd_reader *in,
                                               sd_offset_range *r,
                                               sd_time *wm_state);

/*
 * The SDF trailer of a beam:dofn:sundial_c:v1 payload (after the side-input list):
 * 'S' varint(kind) varint(months) varint(ms). A payload without it has no estimator.
 */
SD_MUST_CHECK sd_status sd__sdf_payload_append(sd_buf *payload, const sd_wm_spec *wm);
SD_MUST_CHECK sd_status sd__sdf_payload_wm(sd_bytes payload, sd_wm_spec *wm, sd_err *err);

/* ---------------------------------------------------------------- one SDF callback */

/* What a splittable DoFn's callbacks reach through sd_ctx (set by proc_ops.c for the call). */
typedef struct sd__sdf_call {
    sd__tracker tracker;
    sd__wm_est wm; /* guarded by lock too: a split reads the estimate for its residual */
    bool in_process;
    bool resume;
    int64_t delay_ms;
    sd_vec *parts; /* split_restriction: sd_offset_range parts emitted so far, else NULL */
    void *lock;    /* pthread_mutex_t * guarding tracker against a split request, or NULL */
    /* process only: the input element the call works on, for the roots of a split (borrowed
     * for the call): its timestamp, pane, every window it is in and the one in process, the
     * element bytes, and the restriction and watermark state it came with */
    sd_time ts;
    sd_pane pane;
    const sd_window *windows;
    size_t n_windows;
    size_t window;
    sd_bytes elem;
    sd_offset_range r0;
    sd_time wm_state;
    bool split; /* a split request was answered: process no later window of the element */
} sd__sdf_call;

/* proc_ctx.c: the SDF call of the callback c runs, or NULL. */
sd__sdf_call *sd__ctx_sdf(const sd_ctx *c);

/* sdf.c: the watermark estimator of call s saw an output at ts (under s's lock). */
void sd__sdf_observe(sd__sdf_call *s, sd_time ts);

/*
 * A split of a running bundle, answered as Beam's ProcessBundleSplitResponse: the element in
 * process (index last_primary + 1) is replaced by its primary roots — each window before the
 * one in process with its whole restriction, and that one with the part [from, split) it keeps
 * — and its residual roots — the part [split, to) and each later window whole — while the
 * elements after it (from first_residual on) go back to the runner unprocessed. The roots are
 * windowed values as the data source encodes its input, so a runner can send a primary root
 * as input in place of the element (a replayed schedule does) and a residual as new work.
 */
typedef struct sd__split {
    bool split;             /* false: nothing to split (answer with an empty split) */
    const char *source;     /* the data source transform (borrowed from the processor) */
    int64_t last_primary;   /* the element before the one in process (-1: none) */
    int64_t first_residual; /* the element after it: it and later ones return to the runner */
    sd_vec primaries;       /* sd__residual_root (delay 0) */
    sd_vec residuals;       /* sd__residual_root */
} sd__split;

/* Free what sd__proc_split put in s. */
void sd__split_deinit(sd__split *s);

/*
 * Split the bundle running on processor bp at `fraction` of the unclaimed rest of the
 * splittable DoFn element now in process (transform_id: the data source the request names,
 * or NULL for any): see sd__split. The element's restriction size in its roots is to - from
 * (restriction_size, user code, is not called from the split request's thread while process
 * runs). At most one split per bundle. Callable from any thread while the bundle runs.
 * OUT: out (initialized here; sd__split_deinit it whatever the result). SD_ENOMEM only.
 */
SD_MUST_CHECK sd_status sd__proc_split(sd__proc *bp,
                                       const char *transform_id,
                                       double fraction,
                                       sd__split *out);

/* A split's answer could not be sent (lost = true; the bundle must fail rather than lose the
 * element's rest), or, at the bundle's end (lost = false), clear it. Returns the flag as it
 * was. The caller holds the worker's mutex, which guards it. */
bool sd__proc_set_split_lost(sd__proc *bp, bool lost);

/* The timer family a DoFn with on_window_expiration gets (named in its ParDoPayload's
 * on_window_expiration_timer_family_spec); its firings call on_window_expiration. */
#define SD_EXPIRY_FAMILY "sundial:on_window_expiration"

/* ---------------------------------------------------------------- state kinds (proc_ctx.c) */

/*
 * The kind of the state kinds table (runner/urns/state_kinds.h) for a public sd_state_kind
 * (its SDK column). False when the table has no row for k (the C SDK does not offer it).
 */
static inline bool sd__state_kind_from_sdk(sd_state_kind k, sd_user_state_kind *out)
{
#define SD__STATE_FROM_SDK(ID, NAME, SPEC, CASE, VC, KC, PROTOCOL, KEY, SDK) \
    if ((int)(SDK) >= 0 && (int)k == (int)(SDK)) {                           \
        *out = SD_USER_STATE_##ID;                                           \
        return true;                                                         \
    }
    SD_STATE_KINDS(SD__STATE_FROM_SDK)
#undef SD__STATE_FROM_SDK
    return false;
}

/* Whether the C SDK offers the table's kind k (its SDK column is not -1). */
static inline bool sd__state_kind_in_sdk(sd_user_state_kind k)
{
#define SD__STATE_IN_SDK(ID, NAME, SPEC, CASE, VC, KC, PROTOCOL, KEY, SDK) \
    if (k == SD_USER_STATE_##ID) {                                         \
        return (int)(SDK) >= 0;                                            \
    }
    SD_STATE_KINDS(SD__STATE_IN_SDK)
#undef SD__STATE_IN_SDK
    return false;
}

typedef struct sd__state_info {
    sd_user_state_kind kind;   /* the table's kind (the C SDK's kinds have SDK != -1) */
    const sd_coder *coder;     /* values; combining: accumulators */
    const sd_coder *key_coder; /* map keys */
    const sd_combinefn *cfn;   /* combining */
    sd_bytes config;           /* combining: the CombineFn's config */
} sd__state_info;

typedef enum sd__state_op { SD__STATE_GET, SD__STATE_APPEND, SD__STATE_CLEAR } sd__state_op;

/* The declared state state_id of the current (keyed) call; fails the bundle when missing. */
SD_MUST_CHECK sd_status sd__ctx_state_info(sd_ctx *c,
                                           const char *state_id,
                                           const sd__state_info **out);

/*
 * One State API call on state_id of the current key and window: bag user state when map_key
 * is NULL and !keys, multimap user state under *map_key, multimap keys state when keys; for
 * ordered-list state, ordered-list user state over the whole list (see
 * sd__ctx_state_call_range). GET sets *out (borrowed until the callback returns); APPEND
 * sends data. Fails the bundle with a message on error.
 */
SD_MUST_CHECK sd_status sd__ctx_state_call(sd_ctx *c,
                                           const char *state_id,
                                           sd__state_op op,
                                           const sd_bytes *map_key,
                                           bool keys,
                                           sd_bytes data,
                                           sd_bytes *out);

/* The same on ordered-list state, with the OrderedListRange [start, end) (GET, CLEAR). */
SD_MUST_CHECK sd_status sd__ctx_state_call_range(sd_ctx *c,
                                                 const char *state_id,
                                                 sd__state_op op,
                                                 int64_t start,
                                                 int64_t end,
                                                 sd_bytes data,
                                                 sd_bytes *out);

/* A scratch buffer that lives until the callback returns (NULL when out of memory). */
sd_buf *sd__ctx_temp_buf(sd_ctx *c);

#endif
