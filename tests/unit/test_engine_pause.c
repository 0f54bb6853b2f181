/*
 * Engine tests, pause concern (em_pause.c): the gate at quiescence, steps, a live source that
 * makes the engine wait, and the reads of a resting job (timers, user state, the tap).
 *
 * The pipeline: a TestStream of keyed elements, watermarks and clock advances into a stateful
 * stage that keeps a bag per key and sets a processing-time timer 2 s ahead on each element
 * (fn_keyed, test_engine_timers.c). Unpaused, it gives one answer under every shape; paused
 * and stepped — one event at a time, by durations, before each event — it must give the same
 * output and the same time trace but for the gate's own records (pause, step), which are
 * asserted record by record.
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

static bool is_control(const sd_trace_rec *r)
{
    return r->kind == SD_TRACE_PAUSE || r->kind == SD_TRACE_STEP;
}

/* Every record of em's trace but the gate's (pause, step), a line each with every field but
 * seq and wall, appended to out (NULL: not kept): what a stepped run shares with the unpaused
 * run. Returns the number of the gate's records. */
static size_t trace_sans_control(const sd_em *em, sd_buf *out)
{
    size_t control = 0;
    for (size_t i = 0; i < sd_em_trace_len(em); i++) {
        const sd_trace_rec *r = sd_em_trace_at(em, i);
        if (is_control(r)) {
            control++;
            continue;
        }
        if (out == NULL) {
            continue;
        }
        const sd_window *w = &r->window;
        assert_int_equal(
            sd_buf_printf(out,
                          "@%lld %s/%d s%d pc%d n%d t=%lld t2=%lld w%d%d%d[%lld,%lld) "
                          "k%016llx i%lld c%lld\n",
                          (long long)r->clock, sd_trace_kind_name((sd_trace_kind)r->kind), r->cause,
                          r->stage, r->pcoll, r->name, (long long)r->t, (long long)r->t2,
                          r->has_window, w->global, w->custom, (long long)w->start,
                          (long long)w->end, (unsigned long long)r->key, (long long)r->index,
                          (long long)r->count),
            SD_OK);
    }
    return control;
}

/* The first line where a and b differ, for a failure's message. */
static void first_difference(const sd_buf *a, const sd_buf *b, char *out, size_t n)
{
    size_t i = 0, line = 1, from = 0;
    while (i < a->len && i < b->len && a->data[i] == b->data[i]) {
        if (a->data[i] == '\n') {
            line++;
            from = i + 1;
        }
        i++;
    }
    const char *pa = a->len > from ? (const char *)a->data + from : "(end)";
    const char *pb = b->len > from ? (const char *)b->data + from : "(end)";
    snprintf(out, n, "line %zu: \"%.*s\" vs \"%.*s\"", line, (int)strcspn(pa, "\n"), pa,
             (int)strcspn(pb, "\n"), pb);
}

static void expect_same_trace(const sd_buf *want, const sd_buf *got, const char *what)
{
    if (want->len != got->len || (want->len > 0 && memcmp(want->data, got->data, want->len) != 0)) {
        char diff[512];
        first_difference(want, got, diff, sizeof(diff));
        fail_msg("%s: the trace without pause and step records differs from the unpaused "
                 "run's at %s",
                 what, diff);
    }
}

/*
 * Run the pipeline under shape, paused and stepped as how says; OUT: the sorted results, and
 * (trace != NULL) the trace without the gate's records (trace_sans_control), *control = how
 * many of those there were.
 */
static size_t
run_one(const h_shape *shape, how mode, char (*out)[H_RESULT_LEN], sd_buf *trace, size_t *control)
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
    size_t n_control = trace_sans_control(h.em, trace);
    if (control != NULL) {
        *control = n_control;
    }
    qsort(h.results, h.n_results, H_RESULT_LEN, (int (*)(const void *, const void *))strcmp);
    size_t n = h.n_results;
    memcpy(out, h.results, sizeof(h.results[0]) * n);
    h_deinit(&h);
    return n;
}

/* A paused-and-stepped run equals the unpaused run, under every shape: its output, and its
 * time trace once the gate's own records are left out. */
void test_pause_steps_deterministic(void **state)
{
    (void)state;
    static char want[H_MAX_RESULTS][H_RESULT_LEN], got[H_MAX_RESULTS][H_RESULT_LEN];
    for (size_t s = 0; s < N_SHAPES; s++) {
        sd_buf tw;
        size_t cw = 0;
        sd_buf_init(&tw, 0);
        size_t nw = run_one(&SHAPES[s], UNPAUSED, want, &tw, &cw);
        assert_true(nw >= 4);
        assert_int_equal(cw, 0); /* never paused: no pause or step record */
        for (how m = BY_EVENT; m <= BEFORE_EVENTS; m++) {
            sd_buf tg;
            size_t cg = 0;
            sd_buf_init(&tg, 0);
            size_t ng = run_one(&SHAPES[s], m, got, &tg, &cg);
            char what[96];
            snprintf(what, sizeof(what), "shape %s, mode %d", SHAPES[s].name, (int)m);
            assert_true(cg >= 3); /* at least a pause, a step and a pause again */
            expect_same_trace(&tw, &tg, what);
            sd_buf_deinit(&tg);
            assert_int_equal(ng, nw);
            for (size_t i = 0; i < nw; i++) {
                if (strcmp(got[i], want[i]) != 0) {
                    fail_msg("shape %s, mode %d: result %zu: got \"%s\", want \"%s\"",
                             SHAPES[s].name, (int)m, i, got[i], want[i]);
                }
            }
        }
        sd_buf_deinit(&tw);
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
    size_t nw = run_one(&SHAPES[0], UNPAUSED, want, NULL, NULL);
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

/* ========================================================================================== */
/* The gate in the time trace                                                                 */
/* ========================================================================================== */

static void put_t(char *out, size_t n, sd_time t)
{
    if (t >= SD_TIME_MAX) {
        snprintf(out, n, "+inf");
    } else {
        snprintf(out, n, "%lld", (long long)t);
    }
}

/* The gate's records of em's trace as text, one a line: "@CLOCK pause CAUSE t=T t2=T2
 * ev=COUNT/INDEX" and "@CLOCK step CAUSE [n=COUNT] [pcP] [t=T t2=T2]". */
static size_t control_lines(const sd_em *em, char (*out)[96], size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < sd_em_trace_len(em); i++) {
        const sd_trace_rec *r = sd_em_trace_at(em, i);
        if (!is_control(r)) {
            continue;
        }
        assert_true(n < max);
        assert_int_equal(r->stage, -1);
        char t[32], t2[32];
        put_t(t, sizeof(t), r->t);
        put_t(t2, sizeof(t2), r->t2);
        const char *cause = sd_trace_cause_name((sd_trace_kind)r->kind, r->cause);
        if (r->kind == SD_TRACE_PAUSE) {
            snprintf(out[n], 96, "@%lld pause %s t=%s t2=%s ev=%lld/%lld", (long long)r->clock,
                     cause, t, t2, (long long)r->count, (long long)r->index);
        } else if (r->cause == SD_STEP_CAUSE_EVENTS) {
            snprintf(out[n], 96, "@%lld step %s n=%lld", (long long)r->clock, cause,
                     (long long)r->count);
        } else if (r->cause == SD_STEP_CAUSE_FOR) {
            snprintf(out[n], 96, "@%lld step %s n=%lld t=%s t2=%s", (long long)r->clock, cause,
                     (long long)r->count, t, t2);
        } else if (r->cause == SD_STEP_CAUSE_WATERMARK) {
            snprintf(out[n], 96, "@%lld step %s pc%d t=%s t2=%s", (long long)r->clock, cause,
                     r->pcoll, t, t2);
        } else {
            snprintf(out[n], 96, "@%lld step %s", (long long)r->clock, cause);
        }
        n++;
    }
    return n;
}

static void expect_control(const sd_em *em, const char *const *want, size_t n_want)
{
    char got[32][96];
    size_t n = control_lines(em, got, 32);
    for (size_t i = 0; i < n || i < n_want; i++) {
        const char *g = i < n ? got[i] : "(none)";
        const char *w = i < n_want ? want[i] : "(none)";
        if (strcmp(g, w) != 0) {
            for (size_t k = 0; k < n; k++) {
                print_message("  got %zu: %s\n", k, got[k]);
            }
            fail_msg("the gate's record %zu: got \"%s\", want \"%s\"", i, g, w);
        }
    }
}

/* Run until the job rests; it must rest for why. */
static void rest_for(harness *h, sd_em_pause_reason why)
{
    assert_int_equal(h_run(h), SD_OK);
    sd_em_pause_info pi;
    sd_em_pause_info_get(h->em, &pi);
    assert_true(pi.at_rest);
    assert_int_equal(pi.reason, why);
}

/* Resume to the end; the gate's records must be want[0..n), the others the unpaused run's. */
static void finish(harness *h, const char *const *want, size_t n, const sd_buf *unpaused)
{
    sd_em_resume(h->em);
    h_run_ok(h);
    assert_true(sd_em_done(h->em));
    expect_control(h->em, want, n);
    sd_buf got;
    sd_buf_init(&got, 0);
    assert_int_equal(trace_sans_control(h->em, &got), n);
    expect_same_trace(unpaused, &got, want[0]);
    sd_buf_deinit(&got);
    h_deinit(h);
}

/*
 * The gate's story in the trace, record by record. The TestStream (build): events #0 a@1, #1
 * b@5, #2 watermark 100, #3 clock +5 s, #4 a@200, #5 clock +1 s, #6 b@250, #7 watermark 300,
 * then the stream's end step (#8: its output to the end of time); each element sets a
 * processing-time timer 2 s ahead. Two runs:
 *   1. started paused: rests before event #0; two events; a step of 700 ms plays event #2
 *      and rests before the 5 s advance; to tsout's watermark 250: up to event #7 (the
 *      watermark 300), resting before the end step; resumed.
 *   2. pause at +3 s: rests before the 5 s advance (event #3); resumed with a pause before
 *      the next event armed: rests before event #3 again (not played yet); one event: rests
 *      before event #4; resumed and paused by hand at once: rests there again; resumed.
 * Both runs' other records are the unpaused run's.
 */
void test_pause_trace_records(void **state)
{
    (void)state;
    static char results[H_MAX_RESULTS][H_RESULT_LEN];
    sd_buf unpaused;
    sd_buf_init(&unpaused, 0);
    (void)run_one(&SHAPES[0], UNPAUSED, results, &unpaused, NULL);
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 2000 };

    harness h;
    build(&h, &plan, &SHAPES[0]);
    sd_time clock0 = sd_em_clock_now(h.em);
    assert_int_equal(sd_em_pause_start(h.em, &h.err), SD_OK);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    rest_for(&h, SD_PAUSE_START);
    assert_string_equal(sd_em_pause_reason_name(SD_PAUSE_START), "paused from the start");
    assert_int_equal(sd_em_step_events(h.em, 2, &h.err), SD_OK);
    rest_for(&h, SD_PAUSE_STEP_DONE);
    assert_int_equal(sd_em_step_for(h.em, 700, &h.err), SD_OK);
    rest_for(&h, SD_PAUSE_STEP_DONE);
    assert_int_equal(sd_em_clock_now(h.em), clock0); /* the 5 s advance is past 700 ms */
    assert_int_equal(sd_em_step_to_watermark(h.em, "tsout", 250, &h.err), SD_OK);
    rest_for(&h, SD_PAUSE_STEP_DONE);
    static const char *const want1[] = {
        "@0 pause start t=0 t2=+inf ev=1/0",           "@0 step events n=2",
        "@0 pause step_done t=0 t2=+inf ev=1/2",       "@0 step for n=700 t=700 t2=0",
        "@0 pause step_done t=5000 t2=+inf ev=1/3",    "@0 step watermark pc0 t=250 t2=100",
        "@6000 pause step_done t=6000 t2=+inf ev=1/8", "@6000 step resume",
    };
    finish(&h, want1, sizeof(want1) / sizeof(want1[0]), &unpaused);

    build(&h, &plan, &SHAPES[0]);
    clock0 = sd_em_clock_now(h.em);
    assert_int_equal(sd_em_pause_at(h.em, clock0 + 3000, &h.err), SD_OK);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    rest_for(&h, SD_PAUSE_AT_TIME);
    sd_em_resume(h.em);
    assert_int_equal(sd_em_pause_before_event(h.em, &h.err), SD_OK);
    rest_for(&h, SD_PAUSE_BEFORE_EVENT);
    assert_int_equal(sd_em_clock_now(h.em), clock0); /* event #3 is still to come */
    assert_int_equal(sd_em_step_events(h.em, 1, &h.err), SD_OK);
    rest_for(&h, SD_PAUSE_STEP_DONE);
    assert_int_equal(sd_em_clock_now(h.em), clock0 + 5000); /* event #3 went */
    sd_em_resume(h.em);
    assert_int_equal(sd_em_pause(h.em, &h.err), SD_OK); /* at quiescence: rests there */
    rest_for(&h, SD_PAUSE_BY_HAND);
    static const char *const want2[] = {
        "@0 pause at_time t=5000 t2=3000 ev=1/3",      "@0 step resume",
        "@0 pause before_event t=5000 t2=+inf ev=1/3", "@0 step events n=1",
        "@5000 pause step_done t=5000 t2=+inf ev=1/4", "@5000 step resume",
        "@5000 pause by_hand t=5000 t2=+inf ev=1/4",   "@5000 step resume",
    };
    finish(&h, want2, sizeof(want2) / sizeof(want2[0]), &unpaused);
    sd_buf_deinit(&unpaused);
}
