/*
 * The engine test harness: a fake executor that drives the element manager as runner/exec
 * would, shared by the test_engine_*.c files (one per engine concern) that make up the
 * test_engine binary.
 *
 * A harness registers PCollections and stages, pulls bundles, decodes their input with the
 * coder library, runs fake DoFns (C callbacks, h_fn for elements and h_tfn for timers) that emit
 * outputs, state and timers through the engine API, and completes the bundles, checking the
 * engine's invariants (sd__em_check, including watermark monotonicity) after every mutation.
 * Each pipeline case runs under every bundle shape in SHAPES (greedy, one element per bundle, a
 * byte cap, several bundles in flight completed out of order, one key, seeded schedules) and
 * must give the same answer; h_run_cases is the one driver for tables of such cases.
 *
 * The second half of this header declares the pipelines, fake DoFns and case tables that one
 * concern's file defines and another's reuses (the OOM loop and the schedule tests reuse most),
 * and the test entry points that test_engine.c lists.
 */
#ifndef SD_TESTS_UNIT_ENGINE_HARNESS_H
#define SD_TESTS_UNIT_ENGINE_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"
#include "teststream/ts_drive.h"

/* ========================================================================================== */
/* Coders (built once by coders_setup for the whole group)                                    */
/* ========================================================================================== */

extern sd_coder *c_bytes, *c_varint, *c_gw, *c_iw, *c_kv, *c_iter, *c_grouped;
extern sd_coder *wv_bytes_g, *wv_varint_g, *wv_kv_g, *wv_kv_i, *wv_grouped_g, *wv_grouped_i;
extern sd_coder *c_timer_g, *c_timer_i;

int coders_setup(void **state);
int coders_teardown(void **state);

/* ========================================================================================== */
/* The fake executor                                                                          */
/* ========================================================================================== */

typedef struct harness harness;

typedef struct h_elem {
    sd_time ts;
    sd_window win;
    sd_pane pane;
    sd_bytes elem;
} h_elem;

typedef sd_status (*h_fn)(harness *h, sd_bundle *b, const h_elem *e, void *ctx);
typedef sd_status (
    *h_tfn)(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx);

typedef struct h_shape {
    const char *name;
    size_t max_elems;
    size_t max_bytes;
    size_t max_inflight;
    bool lifo;
    int bundle_shape;    /* SD_SHAPE_* */
    uint64_t seed;       /* sd_em_config.schedule_seed */
    size_t memory_limit; /* sd_em_config.memory_limit: 1 = spill everything it can */
} h_shape;

/* Every pipeline case runs under each of these and must give the same answer. */
#define N_SHAPES ((size_t)12)
extern const h_shape SHAPES[N_SHAPES];

/* The live-lock bound h_init gives an engine whose config leaves it 0 (UINT64_MAX: off). */
#define H_LIVELOCK_ROUNDS ((uint64_t)8)

#define H_MAX_RESULTS 512
#define H_RESULT_LEN  160

struct harness {
    sd_em *em;
    sd_err err;
    h_shape shape;
    bool oom; /* report errors instead of asserting */

    struct {
        const char *id;
        const sd_coder *wv;
    } pcs[24];

    size_t n_pcs;

    struct {
        const char *stage;
        h_fn fn;
        h_tfn tfn;
        void *ctx;
        const sd_coder *timer_coder;
    } fns[16];

    size_t n_fns;
    sd_time prev[64];
    char results[H_MAX_RESULTS][H_RESULT_LEN];
    size_t n_results;
    size_t n_bundles;
    size_t max_input;
    uint64_t sched_hash; /* FNV-1a over every bundle handed out: stage, input, timers */
    int64_t engine_ns;   /* time spent inside next_bundle and complete_bundle */
    size_t peak_mem;     /* the largest memory estimate h_check saw (sd__em_mem_estimate) */
    bool fake_clock;     /* the config's wall_now is a test's: it reads fake_wall_now */
    size_t n_naps;       /* times h_run waited for sd_em_next_wakeup */
    int64_t nap_ms;      /* the wall-clock time those waits covered */
    sd_buf dump;
    sd_ts_driver *tsd; /* the engine's TestStream driver once a test scripted one (h_ts_*) */
};

void h_check(harness *h);
sd_status h_init(harness *h, const h_shape *shape, const sd_em_config *base, bool oom);
void h_deinit(harness *h);
sd_status h_pcoll(harness *h, const char *id, const sd_coder *wv, const sd_windowing *ws);
const sd_coder *h_coder(const harness *h, const char *id);
sd_status h_add(harness *h, const sd_stage_spec *spec, h_fn fn, h_tfn tfn, void *ctx);
/* Shorthand for a stage with at most one input and a list of outputs. */
sd_status h_stage(harness *h,
                  const char *id,
                  sd_stage_kind kind,
                  const char *input,
                  const char *const *outputs,
                  size_t n_outputs,
                  h_fn fn,
                  void *ctx);
SD_PRINTF(2, 3) void h_record(harness *h, const char *fmt, ...);
/* Sort the recorded results and compare them with `want` (in any order). */
void h_expect(harness *h, const char *const *want, size_t n);
/* Emit one windowed value to an output, split over two calls so elements straddle. */
sd_status h_emit(harness *h,
                 sd_bundle *b,
                 const char *pcoll,
                 sd_time ts,
                 const sd_window *wins,
                 size_t n_wins,
                 const sd_pane *pane,
                 sd_bytes elem);
sd_status h_emit_global(harness *h, sd_bundle *b, const char *pcoll, sd_time ts, sd_bytes elem);
sd_status kv_bytes(sd_buf *out, const char *key, uint64_t v);
/* Run the fake DoFn of b's stage over its first `limit` input elements and its timers
 * (outputs are not committed yet). */
sd_status h_process_n(harness *h, sd_bundle *b, size_t limit);
sd_status h_process(harness *h, sd_bundle *b);
/* Pull, process and complete bundles until the engine is done (or stuck). When nothing is in
 * flight and a synthetic-clock engine naps (sd_em_next_wakeup), wait for the wall-clock time
 * it asks for: move fake_wall_now there under a test's wall clock, else sleep. (A wall-clock
 * engine's waits are left to the test, as before.) */
sd_status h_run(harness *h);
void h_run_ok(harness *h);

/* The State API's address of user state / a side input, for a call's argument list. */
#define H_STATE(transform_, state_, window_, key_) \
    (&(const sd_em_state_ref){                     \
        .transform_id = (transform_), .state_id = (state_), .window = (window_), .key = (key_) })
#define H_SIDE(transform_, side_, window_) \
    (&(const sd_em_side_ref){              \
        .transform_id = (transform_), .side_input_id = (side_), .window = (window_) })

/* ========================================================================================== */
/* Decoding helpers for fake DoFns                                                            */
/* ========================================================================================== */

/* A KV<bytes, varint> element. */
void get_kv(sd_bytes elem, sd_bytes *key, uint64_t *v);
/* A grouped element: key, count, varint values. */
size_t get_grouped(sd_bytes elem, sd_bytes *key, uint64_t *vals, size_t cap);
uint8_t pane_byte(const sd_pane *p);
/* Record a grouped element: "k=a w=[0,10) ts=9 pane=07 v=1,5" (values sorted). */
sd_status fn_collect_grouped(harness *h, sd_bundle *b, const h_elem *e, void *ctx);

/* ========================================================================================== */
/* Case tables: shapes x cases x invariant checks                                             */
/* ========================================================================================== */

typedef struct row {
    const char *key;
    uint64_t value;
    sd_time ts;
} row;

typedef struct window_case {
    const char *name;
    sd_windowing ws;
    row rows[12];
    size_t n_rows;
    const char *want[12];
    size_t n_want;
} window_case;

/*
 * One table of pipeline cases for h_run_cases. For each row and each shape in SHAPES the
 * driver makes a harness (over `cfg`, which may be NULL), names it after the row (when `name`
 * is set), lets `build` register and start the row's pipeline (with `wc` as scratch that lives
 * until the run ends, e.g. as fn_assign's context), runs it to completion (h_run_ok, which
 * checks the invariants after every mutation), and hands it to `check` for the row's
 * expectations before destroying it.
 */
typedef struct h_case_table {
    const void *rows; /* the first row */
    size_t n_rows;    /* number of rows */
    size_t row_size;  /* sizeof one row */
    const sd_em_config *cfg;
    const char *(*name)(const void *r);
    sd_status (*build)(harness *h, const void *r, window_case *wc);
    void (*check)(harness *h, const void *r);
} h_case_table;

void h_run_cases(const h_case_table *t);

/* ========================================================================================== */
/* Pipelines and fake DoFns shared between concerns                                           */
/* ========================================================================================== */

/* test_engine_graph.c */
sd_status build_wordcount(harness *h);
sd_status fn_emit_values(harness *h, sd_bundle *b, const h_elem *e, void *ctx);
sd_status fn_record_varint(harness *h, sd_bundle *b, const h_elem *e, void *ctx);
sd_bundle *pull(harness *h, const char *stage);

/* test_engine_gbk.c */
extern window_case WINDOW_CASES[];
sd_status fn_gen_rows(harness *h, sd_bundle *b, const h_elem *e, void *ctx);
sd_status fn_assign(harness *h, sd_bundle *b, const h_elem *e, void *ctx);
sd_status build_windowed(harness *h, window_case *wc);

/* test_engine_timers.c */
typedef struct timer_plan {
    const char *family;   /* the family to set on each element */
    bool processing_time; /* fire = wall + delay, else fire = delay (absolute event time) */
    int64_t delay;
    bool emit_windowed; /* on firing, emit KV<key, sum> in window [fire, fire + 10) */
    int loop_once;      /* the first firing sets one more timer, delay later */
    int64_t sdk_lag;    /* processing time: the SDK's "now" is this much behind the wall clock */
    int report_base;    /* ... and it reports that "now" with the next report_base bundles
                         * (-1: with every bundle) */
} timer_plan;

extern sd_time fake_wall_now;
sd_time fake_wall(void *ctx);
sd_status fn_keyed(harness *h, sd_bundle *b, const h_elem *e, void *ctx);
sd_status
fn_keyed_timer(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx);
sd_status build_keyed(harness *h, window_case *wc, timer_plan *plan);
sd_status fn_resume(harness *h, sd_bundle *b, const h_elem *e, void *ctx);
sd_status fn_seed(harness *h, sd_bundle *b, const h_elem *e, void *ctx);

/* test_engine_teststream.c */
typedef struct ts_step {
    char kind; /* 'e' element, 'b' element in one event with the adjacent 'b's, 'w' watermark,
                * 'c' clock */
    const char *key;
    uint64_t v;
    sd_time t; /* element timestamp, watermark, or clock advance */
} ts_step;

typedef struct ts_case {
    const char *name;
    int64_t lateness;
    sd_output_time output_time; /* 0: END_OF_WINDOW */
    ts_step steps[20];
    size_t n_steps;
    const char *want[8];
    size_t n_want;
    uint64_t dropped;
} ts_case;

sd_status add_ts_steps(harness *h, const ts_case *tc);
/* TestStream events for stage's output pc (teststream/ts_drive.h): the first call for a stage
 * hands it a one-output script; add events before sd_em_start. */
sd_status h_ts_elements(harness *h,
                        const char *stage,
                        const char *pc,
                        const sd_bytes *elements,
                        const sd_time *timestamps,
                        size_t n);
sd_status h_ts_watermark(harness *h, const char *stage, const char *pc, sd_time wm);
sd_status h_ts_clock(harness *h, const char *stage, const char *pc, int64_t advance_ms);

/* test_engine_triggers.c */
typedef struct trigger_case {
    const char *name;
    const sd_trigger *trigger;
    bool accumulating;
    int64_t lateness;
    ts_step steps[20];
    size_t n_steps;
    const char *want[8];
    size_t n_want;
    uint64_t dropped;
    bool sessions;            /* session windows (gap 10) instead of fixed windows of 10 */
    bool on_time_if_nonempty; /* OnTimeBehavior FIRE_IF_NONEMPTY */
    bool closing_emit_always; /* ClosingBehavior EMIT_ALWAYS */
    bool no_closing_tail;     /* sd_windowing.no_closing_tail (Beam's Go SDK) */
    bool counts_only;         /* record panes with fn_collect_pane_counts */
} trigger_case;

extern const trigger_case TRIGGER_CASES[];
extern const size_t N_TRIGGER_CASES;
extern const trigger_case SESSION_TRIGGER_CASES[];
extern const size_t N_SESSION_TRIGGER_CASES;
/* TestStream -> assign (fixed 10) -> GBK with tc's trigger -> collect panes; with dead_letter,
 * the GBK's late data goes to "late" -> record_late. */
sd_status
build_trigger_pipeline(harness *h, const trigger_case *tc, window_case *wc, bool dead_letter);

/* test_engine_state.c */
typedef struct owe_case {
    const char *name;
    sd_windowfn_kind kind; /* FIXED (size 10) or GLOBAL */
    int64_t lateness;
    ts_step steps[12];
    size_t n_steps;
    const char *want[12]; /* "exp ..." firings and the downstream GBK's panes */
    size_t n_want;
} owe_case;

extern const owe_case OWE_CASES[];
extern const size_t N_OWE_CASES;
sd_status build_owe(harness *h, const owe_case *oc, window_case *wc);

/* ========================================================================================== */
/* Test entry points (listed in test_engine.c)                                                */
/* ========================================================================================== */

/* test_engine_graph.c */
void test_bundle_output_cap(void **state);
void test_spread_stage(void **state);
void test_wordcount(void **state);
void test_window_below_min(void **state);
void test_sink_resends(void **state);
void test_flatten(void **state);
void test_flatten_no_inputs(void **state);
void test_side_inputs(void **state);
void test_side_input_waits_for_producer(void **state);
void test_side_input_window_mapping(void **state);
/* test_engine_sides.c */
void test_triggered_side_inputs(void **state);
void test_triggered_side_in_flight(void **state);
void test_side_window_waits_for_lateness(void **state);
void test_channel_split(void **state);
void test_fail_bundle_retries_cleanly(void **state);
void test_bad_output_bytes_fail_the_bundle(void **state);
void test_output_cut_anywhere(void **state);
void test_byte_cap(void **state);
void test_stuck_dump(void **state);
void test_graph_errors(void **state);

/* test_engine_gbk.c */
void test_windows_table(void **state);

/* test_engine_timers.c */
void test_event_time_timers_and_state(void **state);
void test_looping_timer(void **state);
void test_user_state_is_tentative(void **state);
void test_stateful_split_keeps_keys_locked(void **state);
void test_processing_time_timer_synthetic_clock(void **state);
void test_processing_time_base(void **state);
void test_processing_time_timer_wall_clock(void **state);
void test_wall_clock_due_timers_go_alone(void **state);
void test_delayed_residuals(void **state);
void test_event_time_timer_waits_for_the_watermark(void **state);

/* test_engine_teststream.c */
void test_two_teststreams(void **state);
void test_pause_steps_deterministic(void **state);
void test_pause_inspect(void **state);
void test_live_source_waits(void **state);
void test_pause_at_and_watermark_step(void **state);
void test_pause_trace_records(void **state);
void test_time_sorted_input(void **state);
void test_teststream(void **state);
void test_teststream_clock_drives_processing_time(void **state);

/* test_engine_triggers.c */
void test_triggers(void **state);
void test_session_triggers(void **state);
void test_processing_time_trigger_synthetic(void **state);
void test_late_data_dead_letter(void **state);
void test_late_output_errors(void **state);

/* test_engine_state.c */
void test_state_of_expired_windows_is_dropped(void **state);
void test_state_epoch_changes_when_the_runner_drops_state(void **state);
void test_state_epoch_changes_when_a_bundle_fails(void **state);
void test_stateful_drops_expired_windows(void **state);
void test_on_window_expiration(void **state);
void test_on_window_expiration_holds_output(void **state);
void test_on_window_expiration_spec_errors(void **state);
void test_ordered_list_state(void **state);

/* test_engine_robustness.c */
void test_schedule_seed_is_deterministic(void **state);
void test_schedule_seed_catches_order_dependence(void **state);
void test_gbk_million(void **state);
void test_gbk_memory_budget(void **state);
void test_gbk_pooled_values(void **state);
void test_vpool_chains_and_compaction(void **state);
void test_gbk_pool_compacts(void **state);
void test_bounded_after_count(void **state);
void test_garbage_from_the_sdk(void **state);

void test_late_policy_per_element(void **state);

/* test_engine_livelock.c */
void test_livelock_self_checkpoint(void **state);
void test_livelock_checkpoints_that_emit(void **state);
void test_livelock_looping_timer(void **state);
void test_livelock_wall_clock_delays(void **state);
void test_livelock_waiting_for_real_time(void **state);
void test_livelock_timer_waiting_for_real_time(void **state);
void test_livelock_state_and_event_time(void **state);

/* test_engine_schedule.c */
void test_schedule_record_replay(void **state);
void test_schedule_tampered_fails(void **state);
void test_schedule_file_errors(void **state);
void test_schedule_split_answers(void **state);

/* test_engine_drain.c */
void test_drain_stops_the_teststream(void **state);
void test_drain_fires_event_time_timers(void **state);
void test_drain_releases_delayed_residuals(void **state);

/* test_engine_residuals.c */
void test_residual_holds(void **state);
void test_residual_without_estimate(void **state);
void test_late_policy_on_output(void **state);
void test_late_policy_on_output_errors(void **state);
void test_drain_before_start(void **state);
void test_oom_loop(void **state);
/* test_engine_merge.c */
void test_merge_windows_cases(void **state);
void test_merge_windows_bad_answers(void **state);
void test_merge_windows_registration(void **state);
void test_merge_windows_oom(void **state);
void test_merge_windows_unanswered_is_stuck(void **state);
/* test_engine_custom.c */
void test_custom_windows(void **state);
void test_custom_windows_need_custom_fn(void **state);

/* test_engine_trace.c */
void test_trace_teststream_gbk(void **state);
void test_trace_processing_time_timers(void **state);
void test_trace_cap(void **state);
void test_trace_every_late_element(void **state);

#endif /* SD_TESTS_UNIT_ENGINE_HARNESS_H */
