/* Sundial: pausing a test-mode job, stepping its time, and reading its state while it rests. */
#ifndef SD_RUNNER_ENGINE_EM_PAUSE_H
#define SD_RUNNER_ENGINE_EM_PAUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"
#include "runner/base/time.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"
#include "runner/engine/em_trace.h"

/*
 * The pause gate (em_pause.c). A job's time moves only in time steps, each taken at
 * quiescence (nothing in flight, nothing ready): a source step (a TestStream event, live or
 * scripted) or a jump of the synthetic clock to the next processing-time event. The gate is
 * consulted before each. While it is open the job runs as it always does. Closed, the job
 * runs to quiescence and stops there — no event, no clock move — until a step opens it for a
 * while: one time step (the next event), the time steps that keep the clock at or before a
 * target (a processing-time duration), or the time steps taken while a PCollection's
 * watermark is behind a target. Resume opens it for good.
 *
 * Determinism: the gate only delays time steps; it never reorders them and never moves the
 * clock itself, so a paused-and-stepped run takes exactly the steps the same run takes
 * unpaused (same seed and shape: the same bundles and output). A duration step remembers its
 * end (the step's clock): a later duration step starts from there, so two steps of 30
 * minutes reach a timer due in an hour even though no event happened at the half-hour.
 *
 * The time trace (em_trace.h) gets the gate's story from here alone: a SD_TRACE_PAUSE record
 * each time the gate stops the job (why, and the time step it holds back), a SD_TRACE_STEP
 * record for each step asked and for a resume. Nothing else in the trace changes: without
 * those records a stepped run's trace is the unpaused run's.
 *
 * Only the synthetic clock can be held: every call that closes the gate or steps returns
 * SD_EINVAL on the wall clock, saying why. Engine thread only, like everything in em.h.
 */

/* Why the gate closed (sd_em_pause_info.reason). */
typedef enum sd_em_pause_reason {
    SD_PAUSE_NONE = 0,     /* open */
    SD_PAUSE_BY_HAND,      /* sd_em_pause (from the start, or a person or test asked) */
    SD_PAUSE_AT_TIME,      /* the next time step would take the clock past sd_em_pause_at's */
    SD_PAUSE_BEFORE_EVENT, /* sd_em_pause_before_event: the next step was a source event */
    SD_PAUSE_STEP_DONE,    /* a step's allowance ran out */
    SD_PAUSE_START         /* sd_em_pause_start: the job was started paused */
} sd_em_pause_reason;

/* "running", "paused", "pause at time", "before event", "step done", "paused from the start"
 * (static). */
const char *sd_em_pause_reason_name(sd_em_pause_reason r);

/* Close the gate now (the job stops at its next quiescence). SD_EINVAL on the wall clock. */
SD_MUST_CHECK sd_status sd_em_pause(sd_em *em, sd_err *err);

/* sd_em_pause for a job started paused (sundial_pause=start): the reason and the trace say
 * so. SD_EINVAL on the wall clock. */
SD_MUST_CHECK sd_status sd_em_pause_start(sd_em *em, sd_err *err);

/* Close the gate before the first time step that would take the job clock past clock_ms
 * (ms since the epoch on the job clock); once. SD_EINVAL on the wall clock. */
SD_MUST_CHECK sd_status sd_em_pause_at(sd_em *em, sd_time clock_ms, sd_err *err);

/* Close the gate before the next source event (TestStream); once. SD_EINVAL on the wall
 * clock. */
SD_MUST_CHECK sd_status sd_em_pause_before_event(sd_em *em, sd_err *err);

/*
 * Steps, for a closed gate (SD_ESTATE when it is open; SD_EINVAL on the wall clock or for a
 * bad argument; a new step replaces one not finished). Each returns at once: the engine takes
 * the step at its next sd_em_next_bundle calls, and is at rest again (sd_em_pause_info) when
 * the allowance ran out or nothing is left to do.
 *   events: the next n time steps (n >= 1);
 *   for:    the time steps that keep the clock at or before the step's clock + ms (ms >= 0;
 *           the step's clock: the end of the last duration step, or the clock, the later);
 *   to_watermark: the time steps taken while PCollection pcoll's watermark is behind wm
 *           (SD_ENOTFOUND for an unknown PCollection).
 */
SD_MUST_CHECK sd_status sd_em_step_events(sd_em *em, uint64_t n, sd_err *err);
SD_MUST_CHECK sd_status sd_em_step_for(sd_em *em, int64_t ms, sd_err *err);
SD_MUST_CHECK sd_status sd_em_step_to_watermark(sd_em *em,
                                                const char *pcoll,
                                                sd_time wm,
                                                sd_err *err);

/* Open the gate for good (pending pause_at / before_event requests are dropped too; the trace
 * gets a resume record when the gate was closed or a pause armed). */
void sd_em_resume(sd_em *em);

typedef struct sd_em_pause_info {
    bool closed;               /* the gate is closed (a step may be under way) */
    bool at_rest;              /* closed, quiescent, and stopped at the gate */
    sd_em_pause_reason reason; /* why it closed */
    bool stepping;             /* a step's allowance is left */
    sd_time step_clock;        /* the end of the last duration step (SD_TIME_MIN: none) */
    sd_time pause_at;          /* sd_em_pause_at's time, SD_TIME_MAX: none */
    bool before_event;         /* sd_em_pause_before_event is armed */
    uint64_t steps_taken;      /* time steps the gate let through while closed */
    uint64_t time_steps;       /* every time step so far (source events and clock jumps) */
    bool source_waiting;       /* the last pass stopped for a live source with nothing yet */
} sd_em_pause_info;

void sd_em_pause_info_get(const sd_em *em, sd_em_pause_info *out);

/*
 * The last sd_em_next_bundle stopped at quiescence waiting for someone outside the engine: a
 * live source with no event yet, or the closed gate. Such a job is neither done nor stuck; the
 * executor waits for the source or for a step.
 */
bool sd_em_waiting(const sd_em *em);

/* ------------------------------------------------------------------------------------------ */
/* Inspection (reads only; meant for a job at rest, valid at any time on the engine thread)   */
/* ------------------------------------------------------------------------------------------ */

/* One stored timer (everything borrowed for the call). */
typedef struct sd_em_timer_view {
    const char *transform_id;
    const char *family_id;
    bool processing_time;
    sd_bytes key; /* nested key encoding */
    sd_bytes tag;
    sd_window window;
    sd_time fire; /* event time, or the job-clock time it fires (processing time) */
    sd_time hold;
} sd_em_timer_view;

typedef void (*sd_em_timer_fn)(void *ctx, const sd_em_timer_view *t);

/* Every timer stage i stores (not those fired into a bundle in flight), earliest due first.
 * SD_ENOTFOUND for a bad index, SD_ENOMEM. */
SD_MUST_CHECK sd_status
sd_em_timers_list(const sd_em *em, size_t stage, sd_em_timer_fn fn, void *ctx, sd_err *err);

/* One committed user state cell (everything borrowed for the call). */
typedef struct sd_em_state_view {
    sd_bytes transform_id; /* not NUL-terminated */
    sd_bytes state_id;
    sd_bytes window; /* nested window encoding, as the SDK sent it */
    sd_bytes key;    /* nested key encoding */
    sd_bytes bag;    /* bag (and value, combining) state: the concatenated value encodings */
    size_t map_keys; /* multimap state: how many map keys */
    size_t ordered;  /* ordered-list state: how many entries */
} sd_em_state_view;

typedef void (*sd_em_state_fn)(void *ctx, const sd_em_state_view *s);

/* Every committed user state cell of stage i, or only key's (key.ptr != NULL: its nested
 * encoding), in identity order. SD_ENOTFOUND for a bad index, SD_ENOMEM. */
SD_MUST_CHECK sd_status sd_em_state_list(const sd_em *em,
                                         size_t stage,
                                         sd_bytes key,
                                         sd_em_state_fn fn,
                                         void *ctx,
                                         sd_err *err);

/*
 * Keep a record of what is delivered into every PCollection from now on (sd_em_tapped), at
 * most max_per_pcoll windowed values each (the rest are counted, not kept). Call before
 * sd_em_start to see everything. SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_em_tap_all(sd_em *em, size_t max_per_pcoll, sd_err *err);

/* One windowed value delivered into a PCollection (borrowed for the call). */
typedef struct sd_em_tapped_view {
    sd_bytes element; /* nested encoding with the PCollection's element coder */
    sd_time timestamp;
    sd_window window;
} sd_em_tapped_view;

typedef void (*sd_em_tapped_fn)(void *ctx, const sd_em_tapped_view *v);

/* What the tap kept for PCollection pcoll, in delivery order. OUT: dropped (may be NULL) =
 * values delivered beyond the cap. SD_ENOTFOUND (unknown PCollection), SD_ESTATE (no tap). */
SD_MUST_CHECK sd_status sd_em_tapped(const sd_em *em,
                                     const char *pcoll,
                                     sd_em_tapped_fn fn,
                                     void *ctx,
                                     uint64_t *dropped,
                                     sd_err *err);

/* The earliest hold of each source on stage i, as the engine's hold tracker reads them: OUT
 * at[s] for s < SD_HOLD_SOURCES (SD_TIME_MAX: that source holds nothing), named by
 * sd_trace_cause_name(SD_TRACE_HOLD, s). false for a bad index. */
bool sd_em_stage_holds(const sd_em *em, size_t i, sd_time at[SD_HOLD_SOURCES]);

/* The element coder of PCollection id (borrowed until sd_em_destroy), or NULL. */
const sd_coder *sd_em_pcollection_elem_coder(const sd_em *em, const char *id);

/* The main input PCollection of stage i (borrowed), or NULL (none, or a bad index). */
const char *sd_em_stage_input(const sd_em *em, size_t i);

#endif
