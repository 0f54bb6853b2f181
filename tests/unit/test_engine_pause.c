/*
 * Engine tests, pause concern (em_pause.c): the gate at quiescence, steps, a live source that
 * makes the engine wait, and the reads of a resting job (timers, user state, the tap).
 *
 * The pipeline: a TestStream of keyed elements, watermarks and clock advances into a stateful
 * stage that keeps a bag per key and sets a processing-time timer 2 s ahead on each element
 * (fn_keyed, test_engine_timers.c). Unpaused, it gives one answer under every shape; paused
 * and stepped — one event at a time, by durations, before each event — it must give the same.
 */
#include "engine_harness.h"
#include "runner/engine/em_pause.h"

static const char *const tsout[] = { "tsout" };

static void build(harness *h, timer_plan *plan, const h_shape *shape)
{
    sd_em_config cfg = { .wall_now = fake_wall };
    assert_int_equal(h_init(h, shape, &cfg, false), SD_OK);
    h_pcoll(h, "tsout", wv_kv_g, NULL);
    h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    sd_timer_family_spec fam = { "T", "pt", true, c_timer_g };
    const char *ins[] = { "tsout" };
    sd_stage_spec keyed = { .id = "keyed",
                            .kind = SD_STAGE_SDK,
                            .inputs = ins,
                            .n_inputs = 1,
                            .stateful = true,
                            .timer_families = &fam,
                            .n_timer_families = 1 };
    h_add(h, &keyed, fn_keyed, fn_keyed_timer, plan);
    ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                              { 'e', "b", 5, 2 },
                              { 'w', NULL, 0, 100 },
                              { 'c', NULL, 0, 5000 },
                              { 'e', "a", 2, 200 },
                              { 'c', NULL, 0, 1000 },
                              { 'e', "b", 7, 250 },
                              { 'w', NULL, 0, 300 } },
                   .n_steps = 8 };
    add_ts_steps(h, &tc);
}

typedef enum how { UNPAUSED, BY_EVENT, BY_DURATION, BEFORE_EVENTS } how;

/* Run the pipeline under shape, paused and stepped as how says; OUT: the sorted results. */
static size_t run_one(const h_shape *shape, how mode, char (*out)[H_RESULT_LEN])
{
    harness h;
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 2000 };
    build(&h, &plan, shape);
    if (mode == BY_EVENT || mode == BY_DURATION) {
        assert_int_equal(sd_em_pause(h.em, &h.err), SD_OK);
    }
    if (mode == BY_EVENT || mode == BY_DURATION) {
        assert_int_equal(sd_em_tap_all(h.em, 100, &h.err), SD_OK);
    }
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    size_t rounds = 0;
    for (;;) {
        if (mode == BEFORE_EVENTS) {
            assert_int_equal(sd_em_pause_before_event(h.em, &h.err), SD_OK);
        }
        assert_int_equal(h_run(&h), SD_OK);
        if (sd_em_done(h.em)) {
            break;
        }
        /* Resting: nothing moves until a step. */
        sd_em_pause_info pi;
        sd_em_pause_info_get(h.em, &pi);
        assert_true(pi.at_rest);
        assert_true(sd_em_waiting(h.em));
        if (++rounds >= 100) {
            fail_msg("mode %d shape %s: still resting after 100 steps (reason %d, done %d)",
                     (int)mode, shape->name, (int)pi.reason, (int)sd_em_done(h.em));
        }
        if (mode == BY_EVENT) {
            assert_int_equal(sd_em_step_events(h.em, 1, &h.err), SD_OK);
        } else if (mode == BY_DURATION) {
            assert_int_equal(sd_em_step_for(h.em, 700, &h.err), SD_OK);
            if (rounds > 40) {
                sd_em_resume(h.em); /* the TestStream's own events do not move the step clock */
            }
        } else {
            assert_int_equal(pi.reason, SD_PAUSE_BEFORE_EVENT);
            sd_em_resume(h.em);
        }
    }
    if (mode != UNPAUSED) {
        assert_true(rounds > 0);
    }
    qsort(h.results, h.n_results, H_RESULT_LEN, (int (*)(const void *, const void *))strcmp);
    size_t n = h.n_results;
    memcpy(out, h.results, sizeof(h.results[0]) * n);
    h_deinit(&h);
    return n;
}

/* A paused-and-stepped run equals the unpaused run, under every shape. */
void test_pause_steps_deterministic(void **state)
{
    (void)state;
    static char want[H_MAX_RESULTS][H_RESULT_LEN], got[H_MAX_RESULTS][H_RESULT_LEN];
    for (size_t s = 0; s < N_SHAPES; s++) {
        size_t nw = run_one(&SHAPES[s], UNPAUSED, want);
        assert_true(nw >= 4);
        for (how m = BY_EVENT; m <= BEFORE_EVENTS; m++) {
            size_t ng = run_one(&SHAPES[s], m, got);
            assert_int_equal(ng, nw);
            for (size_t i = 0; i < nw; i++) {
                if (strcmp(got[i], want[i]) != 0) {
                    fail_msg("shape %s, mode %d: result %zu: got \"%s\", want \"%s\"",
                             SHAPES[s].name, (int)m, i, got[i], want[i]);
                }
            }
        }
    }
}

static void count_timer(void *ctx, const sd_em_timer_view *t)
{
    size_t *n = ctx;
    assert_string_equal(t->family_id, "pt");
    assert_true(t->processing_time);
    (*n)++;
}

typedef struct cells {
    size_t n;
    size_t bag_bytes;
} cells;

static void count_cell(void *ctx, const sd_em_state_view *s)
{
    cells *c = ctx;
    c->n++;
    c->bag_bytes += s->bag.len;
}

static void count_tapped(void *ctx, const sd_em_tapped_view *v)
{
    (void)v;
    (*(size_t *)ctx)++;
}

/* Paused from the start, nothing is played; one event at a time, the state, timers and the
 * tap show what happened so far; wall-clock engines refuse. */
void test_pause_inspect(void **state)
{
    (void)state;
    harness h;
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 2000 };
    build(&h, &plan, &SHAPES[0]);
    assert_int_equal(sd_em_step_events(h.em, 1, &h.err), SD_ESTATE); /* not paused */
    assert_int_equal(sd_em_pause(h.em, &h.err), SD_OK);
    assert_int_equal(sd_em_tap_all(h.em, 100, &h.err), SD_OK);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    assert_int_equal(h_run(&h), SD_OK);
    assert_false(sd_em_done(h.em));
    assert_int_equal(h.n_results, 0);
    size_t keyed = 1, n = 0;
    size_t tapped = 0;
    assert_int_equal(sd_em_tapped(h.em, "tsout", count_tapped, &tapped, NULL, &h.err), SD_OK);
    assert_int_equal(tapped, 0);
    /* Two events: a=1 then b=5 reach the stage; each sets its timer. */
    assert_int_equal(sd_em_step_events(h.em, 2, &h.err), SD_OK);
    assert_int_equal(h_run(&h), SD_OK);
    assert_int_equal(sd_em_tapped(h.em, "tsout", count_tapped, &tapped, NULL, &h.err), SD_OK);
    assert_int_equal(tapped, 2);
    assert_int_equal(sd_em_timers_list(h.em, keyed, count_timer, &n, &h.err), SD_OK);
    assert_int_equal(n, 2);
    sd_time holds[SD_HOLD_SOURCES];
    assert_true(sd_em_stage_holds(h.em, keyed, holds));
    assert_int_equal(holds[SD_HOLD_TIMER], 1); /* the timers hold at their elements' times */
    assert_int_equal(holds[SD_HOLD_PENDING], SD_TIME_MAX);
    assert_false(sd_em_stage_holds(h.em, 99, holds));
    cells c = { 0 };
    assert_int_equal(sd_em_state_list(h.em, keyed, SD_BYTES_NULL, count_cell, &c, &h.err), SD_OK);
    assert_int_equal(c.n, 2);
    /* One key only, by its nested encoding (length-prefixed "a"). */
    static const uint8_t key_a[] = { 1, 'a' };
    c = (cells){ 0 };
    assert_int_equal(sd_em_state_list(h.em, keyed, sd_bytes_make(key_a, 2), count_cell, &c, &h.err),
                     SD_OK);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.bag_bytes, 1);
    assert_int_equal(h.n_results, 0);
    sd_em_resume(h.em);
    h_run_ok(&h);
    assert_true(sd_em_done(h.em));
    h_deinit(&h);

    sd_em_config wall = { .clock = SD_CLOCK_WALL };
    sd_em *em = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_em_create(&wall, &em), SD_OK);
    assert_int_equal(sd_em_pause(em, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "wall clock"));
    sd_em_destroy(em);
}

/* A live stream with nothing yet makes the engine wait (neither done nor stuck, the clock
 * still); events appended later are played; its end ends the job. */
void test_live_source_waits(void **state)
{
    (void)state;
    harness h;
    sd_em_config cfg = { .wall_now = fake_wall };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    h_pcoll(&h, "tsout", wv_varint_g, NULL);
    h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    h_stage(&h, "sink", SD_STAGE_SDK, "tsout", NULL, 0, fn_record_varint, NULL);
    assert_int_equal(sd_ts_driver_create(h.em, &h.tsd, &h.err), SD_OK);
    sd_ts_stream *s = NULL;
    const char *pc = "tsout";
    assert_int_equal(sd_ts_stream_create("ts", &pc, 1, &s, &h.err), SD_OK);
    assert_int_equal(sd_ts_driver_add(h.tsd, "ts", s, &pc, &h.err), SD_OK);
    assert_int_equal(sd_ts_driver_set_live(h.tsd, "ts", true, &h.err), SD_OK);
    assert_int_equal(sd_ts_driver_set_live(h.tsd, "nope", true, &h.err), SD_ENOTFOUND);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    sd_time clock0 = sd_em_clock_now(h.em);
    assert_int_equal(h_run(&h), SD_OK);
    assert_false(sd_em_done(h.em));
    assert_true(sd_em_waiting(h.em));
    sd_em_pause_info pi;
    sd_em_pause_info_get(h.em, &pi);
    assert_true(pi.source_waiting);
    sd_buf dump;
    sd_buf_init(&dump, 0);
    assert_int_equal(sd_em_check_stuck(h.em, &dump), SD_OK);
    sd_buf_deinit(&dump);
    uint8_t v = 7;
    sd_bytes e = sd_bytes_make(&v, 1);
    sd_time ts = 5;
    s = sd_ts_driver_stream(h.tsd, "ts");
    assert_int_equal(sd_ts_stream_add_elements(s, 0, &e, &ts, 1, &h.err), SD_OK);
    assert_int_equal(sd_ts_stream_advance_clock(s, 60000, &h.err), SD_OK);
    assert_int_equal(h_run(&h), SD_OK);
    assert_int_equal(h.n_results, 1);
    assert_false(sd_em_done(h.em));
    assert_int_equal(sd_em_clock_now(h.em), clock0 + 60000);
    assert_int_equal(sd_ts_driver_set_live(h.tsd, "ts", false, &h.err), SD_OK);
    h_run_ok(&h);
    assert_true(sd_em_done(h.em));
    h_deinit(&h);
}

/* Pause at a time: the job stops before the step that would take its clock past it (the
 * TestStream's 5 s advance), not at a moment of its own; step to a watermark stops once the
 * PCollection's watermark reached it; both resume to the unpaused answer. */
void test_pause_at_and_watermark_step(void **state)
{
    (void)state;
    static char want[H_MAX_RESULTS][H_RESULT_LEN];
    size_t nw = run_one(&SHAPES[0], UNPAUSED, want);
    harness h;
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 2000 };
    build(&h, &plan, &SHAPES[0]);
    sd_time clock0 = sd_em_clock_now(h.em);
    assert_int_equal(sd_em_pause_at(h.em, clock0 + 3000, &h.err), SD_OK);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    assert_int_equal(h_run(&h), SD_OK);
    sd_em_pause_info pi;
    sd_em_pause_info_get(h.em, &pi);
    assert_true(pi.at_rest);
    assert_int_equal(pi.reason, SD_PAUSE_AT_TIME);
    assert_int_equal(sd_em_clock_now(h.em), clock0); /* the 5 s advance has not happened */
    sd_time wm;
    assert_int_equal(sd_em_pcollection_watermark(h.em, "tsout", &wm), SD_OK);
    assert_int_equal(wm, 100);
    /* To the watermark 250: the steps while tsout is behind it (the advance, a=2, the timers
     * that come due, then the 1 s advance, b=7, the watermark 300). */
    assert_int_equal(sd_em_step_to_watermark(h.em, "nope", 250, &h.err), SD_ENOTFOUND);
    assert_int_equal(sd_em_step_to_watermark(h.em, "tsout", 250, &h.err), SD_OK);
    assert_int_equal(h_run(&h), SD_OK);
    assert_int_equal(sd_em_pcollection_watermark(h.em, "tsout", &wm), SD_OK);
    assert_true(wm >= 250);
    sd_em_pause_info_get(h.em, &pi);
    assert_true(sd_em_done(h.em) || (pi.at_rest && pi.reason == SD_PAUSE_STEP_DONE));
    sd_em_resume(h.em);
    h_run_ok(&h);
    assert_true(sd_em_done(h.em));
    qsort(h.results, h.n_results, H_RESULT_LEN, (int (*)(const void *, const void *))strcmp);
    assert_int_equal(h.n_results, nw);
    for (size_t i = 0; i < nw; i++) {
        assert_string_equal(h.results[i], want[i]);
    }
    h_deinit(&h);
    assert_int_equal(sd_em_step_for(NULL, 1, &h.err), SD_EINVAL);
}
