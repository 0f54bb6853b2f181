/* Sundial: the engine's time trace — every move of a job's time, recorded as it happens. */
#ifndef SD_RUNNER_ENGINE_EM_TRACE_H
#define SD_RUNNER_ENGINE_EM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sundial/time.h>
#include <sundial/window.h>

/*
 * The engine records what happens to a job's time while it runs: each move of the job clock
 * and why, each change of a stage's input and output watermark and of its earliest hold, each
 * timer set, cleared and fired, each pane a GroupByKey emits, each TestStream event played,
 * each element treated as late, and each time the pause gate stopped the job or was asked for
 * a step (the control records: a paused-and-stepped run's other records are the unpaused
 * run's). Records are appended in the order things happen, numbered from
 * 0, and carry the job clock (deterministic: a synthetic run of the same job under the same
 * seed gives the same records) and the wall clock (not deterministic; left out of diffs).
 *
 * Memory is bounded by sd_em_config.trace_cap records; when the cap is reached the last record
 * kept is SD_TRACE_CUT and nothing more is recorded. Everything returned is borrowed from the
 * engine and valid until sd_em_destroy() (copy what you keep). Pure C, base types only.
 */

typedef struct sd_em sd_em;

typedef enum sd_trace_kind {
    SD_TRACE_CLOCK = 0,   /* the job clock moved: t = new clock, t2 = old;
                           * cause = sd_trace_clock_cause */
    SD_TRACE_WM_IN,       /* a stage's input watermark changed: t = new, t2 = old */
    SD_TRACE_WM_OUT,      /* a stage's output watermark changed: t = new, t2 = old */
    SD_TRACE_HOLD,        /* a stage's earliest hold changed: t = new (SD_TIME_MAX: none),
                           * t2 = old; cause = the source of the new minimum (sd_trace_hold) */
    SD_TRACE_TIMER_SET,   /* name = family; window; key = digest; t = fire time, t2 = hold;
                           * cause = 0 event time, 1 processing time */
    SD_TRACE_TIMER_CLEAR, /* same fields */
    SD_TRACE_TIMER_FIRE,  /* same fields: handed to an SDK bundle (or fired runner-side) */
    SD_TRACE_PANE,        /* a GroupByKey emitted a pane: window; key; cause = timing
                           * (0 EARLY, 1 ON_TIME, 2 LATE, 3 UNKNOWN); index = pane index;
                           * count = values; t = the pane's timestamp */
    SD_TRACE_TESTSTREAM,  /* a TestStream event was played: cause = 0 elements, 1 watermark,
                           * 2 processing time; index = event number; count = elements;
                           * t = the watermark (1) or the clock after (2) */
    SD_TRACE_LATE,        /* an element dropped or routed as late: pcoll; window; t = its
                           * timestamp; t2 = the watermark; cause = sd_late_reason; count = 1
                           * when routed to a dead-letter PCollection, else 0; index = elements
                           * the record stands for: 1, or the values a closed session held when
                           * an open one merged into it (t = their earliest) */
    SD_TRACE_CUT,         /* the cap was reached: nothing after it is recorded; the last record
                           * (count = its seq; index = how many records were left out since) */
    SD_TRACE_PAUSE,       /* the pause gate stopped the job: quiescent, at rest before a time
                           * step (em_pause.h); cause = why (sd_trace_pause_cause); t = the
                           * clock the held time step would take the job to; t2 = the pause
                           * time (at_time only, else SD_TIME_MAX); count = 1 when the held
                           * step is a TestStream event (index = its number), 0 for a clock
                           * jump */
    SD_TRACE_STEP,        /* a step was asked of the closed gate, or the gate was opened for
                           * good: cause = sd_trace_step_cause; events: count = N; for: t = the
                           * clock the step may reach, t2 = the step's clock it starts from,
                           * count = its duration (ms); watermark: pcoll, t = the target, t2 =
                           * the PCollection's watermark when asked; resume: nothing more */
    SD_TRACE_KINDS
} sd_trace_kind;

typedef enum sd_trace_clock_cause {
    SD_CLOCK_CAUSE_TESTSTREAM = 0, /* a TestStream processing-time event */
    SD_CLOCK_CAUSE_TIMER,          /* jumped to the earliest due processing-time timer (or
                                    * trigger deadline, or parked residual) */
    SD_CLOCK_CAUSE_IDLE,           /* an idle jump (nothing else could happen) not to a timer */
    SD_CLOCK_CAUSE_WALL,           /* followed the wall clock (consecutive moves with nothing
                                    * recorded between them are one record) */
    SD_CLOCK_CAUSE_STEP,           /* moved by a test or a person (a debugger's step) */
    SD_CLOCK_CAUSES
} sd_trace_clock_cause;

/* Why the gate stopped the job (SD_TRACE_PAUSE's cause). */
typedef enum sd_trace_pause_cause {
    SD_PAUSE_CAUSE_START = 0,    /* started paused (sundial_pause=start) */
    SD_PAUSE_CAUSE_BY_HAND,      /* paused by a person or a test (sd_em_pause) */
    SD_PAUSE_CAUSE_AT_TIME,      /* the next time step would take the clock past the pause time */
    SD_PAUSE_CAUSE_BEFORE_EVENT, /* the next time step was a TestStream event */
    SD_PAUSE_CAUSE_STEP_DONE,    /* the step asked ran out: quiescent again */
    SD_PAUSE_CAUSES
} sd_trace_pause_cause;

/* What was asked of the gate (SD_TRACE_STEP's cause). */
typedef enum sd_trace_step_cause {
    SD_STEP_CAUSE_EVENTS = 0, /* the next N time steps */
    SD_STEP_CAUSE_FOR,        /* the time steps within a processing-time duration */
    SD_STEP_CAUSE_WATERMARK,  /* the time steps while a PCollection's watermark is behind */
    SD_STEP_CAUSE_RESUME,     /* the gate opened for good */
    SD_STEP_CAUSES
} sd_trace_step_cause;

/* The sources of a stage's holds (SD_TRACE_HOLD's cause): what keeps its output watermark back. */
typedef enum sd_trace_hold {
    SD_HOLD_NONE = 0,  /* nothing holds the stage */
    SD_HOLD_PENDING,   /* input elements waiting for a bundle */
    SD_HOLD_SPILL,     /* input elements waiting on the spill file */
    SD_HOLD_IN_FLIGHT, /* input elements of bundles in flight */
    SD_HOLD_PARKED,    /* residuals parked until the job clock reaches their resume time */
    SD_HOLD_GBK,       /* values waiting in a GroupByKey's groups */
    SD_HOLD_CUT_TAIL,  /* a GroupByKey's closing pane held until its input epoch ends */
    SD_HOLD_TIMER,     /* a timer's output-timestamp hold */
    SD_HOLD_RESIDUAL,  /* a residual's estimated output watermark */
    SD_HOLD_SORTED,    /* time-sorted input buffered until the watermark passes it */
    SD_HOLD_SOURCES
} sd_trace_hold;

typedef struct sd_trace_rec {
    uint64_t seq;  /* 0, 1, 2, ... in record order */
    int64_t clock; /* the job clock when recorded, in ms since the engine was created
                    * (deterministic: synthetic runs of the same job give the same values) */
    sd_time wall;  /* the wall clock when recorded, ms since the epoch (not deterministic:
                    * excluded from diffs) */
    uint8_t kind;  /* sd_trace_kind */
    uint8_t cause; /* per kind, see sd_trace_cause_name */
    bool has_window;
    int32_t stage;    /* stage index as in sd_em_stage_info, -1 = none */
    int32_t pcoll;    /* PCollection index as in sd_em_pcollection_info, -1 = none */
    int32_t name;     /* interned string (timer family), -1 = none: sd_em_trace_name */
    sd_time t, t2;    /* per kind; processing times (CLOCK, processing-time timers, PAUSE, a
                       * STEP for a duration) are in ms since the engine was created like
                       * `clock`; event times absolute */
    sd_window window; /* a custom window's bytes are the engine's (valid until destroy) */
    uint64_t key;     /* 64-bit FNV-1a (runner/base/map.h) of the encoded key; 0 = none */
    int64_t index, count;
} sd_trace_rec;

/* Records kept when sd_em_config.trace_cap is 0. */
#define SD_EM_TRACE_CAP_DEFAULT 100000
/* The most records a trace keeps: a larger trace_cap (SIZE_MAX included) means this many. */
#define SD_EM_TRACE_CAP_MAX 4000000

/* Records kept so far (the CUT record included). */
size_t sd_em_trace_len(const sd_em *em);
/* Record i (i < sd_em_trace_len), borrowed; NULL when out of range. */
const sd_trace_rec *sd_em_trace_at(const sd_em *em, size_t i);
/* The cap was reached: the last record is SD_TRACE_CUT. */
bool sd_em_trace_was_cut(const sd_em *em);
/* An interned name (a record's `name`), borrowed; NULL for -1 or out of range. */
const char *sd_em_trace_name(const sd_em *em, int32_t name);

/* "clock", "wm_in", "wm_out", "hold", "timer_set", "timer_clear", "timer_fire", "pane",
 * "teststream", "late", "cut", "pause", "step"; "?" out of range. */
const char *sd_trace_kind_name(sd_trace_kind k);
/* A record's cause by kind: clock causes "teststream", "timer", "idle", "wall", "step"; pause
 * causes "start", "by_hand", "at_time", "before_event", "step_done"; step causes "events",
 * "for", "watermark", "resume"; hold
 * sources "none", "pending", "spill", "in_flight", "parked", "gbk", "cut_tail", "timer",
 * "residual", "sorted"; timer domains "event_time", "processing_time"; pane timings "early",
 * "on_time", "late", "unknown"; TestStream events "elements", "watermark", "processing_time";
 * late reasons as sd_late_reason_name; "" for kinds without a cause; "?" out of range.
 * Never NULL. */
const char *sd_trace_cause_name(sd_trace_kind k, int cause);

#endif
