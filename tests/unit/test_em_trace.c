/*
 * Unit tests for the engine's time trace store (runner/engine/em_trace.c): appending records,
 * the cap and its CUT record, recording without allocating, interned names, kind and cause
 * names.
 * The records the engine emits while running a pipeline are tested in test_engine.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

static sd_time test_wall = 1700000000000LL;

static sd_time wall_fn(void *ctx)
{
    (void)ctx;
    return test_wall;
}

static sd_em *make_em(size_t cap)
{
    sd_em_config cfg = { .wall_now = wall_fn, .trace_cap = cap };
    sd_em *em = NULL;
    assert_int_equal(sd_em_create(&cfg, &em), SD_OK);
    return em;
}

/* Append a WM_IN record for stage with t = t. */
static void add_wm(sd_em *em, int32_t stage, sd_time t)
{
    sd_trace_rec r = sd__trace_rec(SD_TRACE_WM_IN, 0, stage);
    r.t = t;
    r.t2 = SD_TIME_MIN;
    sd__trace_add(em, &r);
}

static void test_append_and_read(void **state)
{
    (void)state;
    sd_em *em = make_em(0);
    assert_int_equal(em->trace.cap, SD_EM_TRACE_CAP_DEFAULT);
    assert_int_equal(sd_em_trace_len(em), 0);
    assert_null(sd_em_trace_at(em, 0));
    for (int i = 0; i < 200; i++) {
        em->clock_now = em->clock_start + i * 10;
        test_wall = 1700000000000LL + i;
        (void)sd__em_wall(em); /* the engine read the wall clock */
        add_wm(em, i % 3, i * 1000);
    }
    assert_int_equal(sd_em_trace_len(em), 200);
    assert_false(sd_em_trace_was_cut(em));
    for (size_t i = 0; i < 200; i++) {
        const sd_trace_rec *r = sd_em_trace_at(em, i);
        assert_non_null(r);
        assert_int_equal(r->seq, i);
        assert_int_equal(r->kind, SD_TRACE_WM_IN);
        assert_int_equal(r->stage, (int32_t)(i % 3));
        assert_int_equal(r->pcoll, -1);
        assert_int_equal(r->name, -1);
        assert_int_equal(r->t, (sd_time)i * 1000);
        assert_int_equal(r->t2, SD_TIME_MIN);
        assert_int_equal(r->clock, (int64_t)i * 10); /* ms since the engine was created */
        assert_int_equal(r->wall, 1700000000000LL + (sd_time)i);
    }
    assert_null(sd_em_trace_at(em, 200));
    sd_em_destroy(em);
}

static void test_cap_and_cut(void **state)
{
    (void)state;
    sd_em *em = make_em(5);
    for (int i = 0; i < 4; i++) {
        add_wm(em, 0, i);
    }
    assert_false(sd_em_trace_was_cut(em));
    assert_int_equal(sd_em_trace_len(em), 4);
    em->clock_now = em->clock_start + 77;
    add_wm(em, 0, 4); /* the fifth: the cap's last slot takes the CUT record instead */
    assert_true(sd_em_trace_was_cut(em));
    assert_int_equal(sd_em_trace_len(em), 5);
    const sd_trace_rec *cut = sd_em_trace_at(em, 4);
    assert_int_equal(cut->kind, SD_TRACE_CUT);
    assert_int_equal(cut->seq, 4);
    assert_int_equal(cut->count, 4); /* the seq at which recording stopped */
    assert_int_equal(cut->index, 1); /* records left out */
    assert_int_equal(cut->clock, 77);
    assert_int_equal(cut->stage, -1);
    for (int i = 0; i < 10; i++) {
        add_wm(em, 0, 100 + i);
    }
    assert_int_equal(sd_em_trace_len(em), 5);
    assert_int_equal(sd_em_trace_at(em, 4)->kind, SD_TRACE_CUT);
    assert_int_equal(sd_em_trace_at(em, 4)->index, 11);
    assert_int_equal(sd_em_trace_at(em, 3)->t, 3); /* what came before is intact */
    sd_em_destroy(em);

    /* A cap of one keeps only the CUT record. */
    em = make_em(1);
    add_wm(em, 0, 1);
    assert_int_equal(sd_em_trace_len(em), 1);
    assert_int_equal(sd_em_trace_at(em, 0)->kind, SD_TRACE_CUT);
    assert_int_equal(sd_em_trace_at(em, 0)->count, 0);
    sd_em_destroy(em);

    /* Never unbounded: SIZE_MAX means the maximum. */
    em = make_em(SIZE_MAX);
    assert_int_equal(em->trace.cap, SD_EM_TRACE_CAP_MAX);
    sd_em_destroy(em);
}

/* Recording never allocates (the array is whole from the start): with every allocation
 * failing, a full trace is still recorded and cut at its cap. */
static void test_no_allocation_while_recording(void **state)
{
    (void)state;
    sd_em *em = make_em(300);
    sd_alloc_fail_after(1, 1);
    for (int i = 0; i < 400; i++) {
        add_wm(em, 0, i);
    }
    long failed = sd_alloc_injected_failures();
    sd_alloc_fail_after(0, 0);
    assert_int_equal(failed, 0);
    assert_true(sd_em_trace_was_cut(em));
    assert_int_equal(sd_em_trace_len(em), 300);
    assert_int_equal(sd_em_trace_at(em, 299)->count, 299);
    assert_int_equal(sd_em_trace_at(em, 299)->index, 101);
    sd_em_destroy(em);

    /* Creating an engine with no memory for its trace fails cleanly. */
    for (long n = 1; n < 40; n++) {
        sd_em *e = NULL;
        sd_em_config cfg = { .wall_now = wall_fn };
        sd_alloc_fail_after(n, 0);
        sd_status rc = sd_em_create(&cfg, &e);
        sd_alloc_fail_after(0, 0);
        if (rc == SD_OK) {
            sd_em_destroy(e);
            break;
        }
        assert_int_equal(rc, SD_ENOMEM);
        assert_null(e);
    }
}

/* Wall-clock moves with nothing between them are one record; a cause other than the wall, or
 * a record between, starts a new one. */
static void test_wall_moves_coalesce(void **state)
{
    (void)state;
    sd_em *em = make_em(0);
    sd_time t0 = em->clock_start;
    for (int i = 1; i <= 50; i++) {
        test_wall = 1700000000000LL + i;
        (void)sd__em_wall(em);
        assert_true(sd__clock_advance(em, t0 + i, SD_CLOCK_CAUSE_WALL));
    }
    assert_false(sd__clock_advance(em, t0 + 50, SD_CLOCK_CAUSE_WALL)); /* not forward */
    assert_int_equal(sd_em_trace_len(em), 1);
    const sd_trace_rec *r = sd_em_trace_at(em, 0);
    assert_int_equal(r->kind, SD_TRACE_CLOCK);
    assert_int_equal(r->cause, SD_CLOCK_CAUSE_WALL);
    assert_int_equal(r->t2, 0);
    assert_int_equal(r->t, 50);
    assert_int_equal(r->clock, 50);
    assert_int_equal(r->wall, 1700000000050LL);
    add_wm(em, 0, 7);
    assert_true(sd__clock_advance(em, t0 + 60, SD_CLOCK_CAUSE_WALL));
    assert_true(sd__clock_advance(em, t0 + 70, SD_CLOCK_CAUSE_WALL));
    assert_true(sd__clock_advance(em, t0 + 100, SD_CLOCK_CAUSE_TIMER));
    assert_true(sd__clock_advance(em, t0 + 110, SD_CLOCK_CAUSE_TIMER));
    assert_int_equal(sd_em_trace_len(em), 5);
    r = sd_em_trace_at(em, 2);
    assert_int_equal(r->kind, SD_TRACE_CLOCK);
    assert_int_equal(r->t2, 50);
    assert_int_equal(r->t, 70);
    assert_int_equal(sd_em_trace_at(em, 3)->t, 100); /* other causes: a record each */
    assert_int_equal(sd_em_trace_at(em, 4)->t2, 100);
    sd_em_destroy(em);
}

static void test_names(void **state)
{
    (void)state;
    sd_em *em = make_em(0);
    int32_t a = sd__trace_intern(em, sd_bytes_str("ticks"));
    int32_t b = sd__trace_intern(em, sd_bytes_str("gc"));
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(sd__trace_intern(em, sd_bytes_str("ticks")), a);
    assert_string_equal(sd_em_trace_name(em, a), "ticks");
    assert_string_equal(sd_em_trace_name(em, b), "gc");
    assert_null(sd_em_trace_name(em, -1));
    assert_null(sd_em_trace_name(em, 2));
    assert_int_equal(sd__trace_intern(em, sd_bytes_make(NULL, 0)), 2);
    assert_string_equal(sd_em_trace_name(em, 2), "");
    sd_em_destroy(em);

    static const char *const kinds[] = { "clock",      "wm_in",       "wm_out",     "hold",
                                         "timer_set",  "timer_clear", "timer_fire", "pane",
                                         "teststream", "late",        "cut",        "pause",
                                         "step" };
    for (int k = 0; k < SD_TRACE_KINDS; k++) {
        assert_string_equal(sd_trace_kind_name((sd_trace_kind)k), kinds[k]);
    }
    assert_string_equal(sd_trace_kind_name(SD_TRACE_KINDS), "?");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_CLOCK, SD_CLOCK_CAUSE_TESTSTREAM),
                        "teststream");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_CLOCK, SD_CLOCK_CAUSE_TIMER), "timer");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_CLOCK, SD_CLOCK_CAUSE_IDLE), "idle");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_CLOCK, SD_CLOCK_CAUSE_WALL), "wall");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_CLOCK, SD_CLOCK_CAUSE_STEP), "step");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_CLOCK, 9), "?");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_HOLD, SD_HOLD_NONE), "none");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_HOLD, SD_HOLD_TIMER), "timer");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_HOLD, SD_HOLD_SORTED), "sorted");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_HOLD, SD_HOLD_SOURCES), "?");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_TIMER_SET, 0), "event_time");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_TIMER_FIRE, 1), "processing_time");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PANE, 0), "early");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PANE, 1), "on_time");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PANE, 2), "late");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PANE, 3), "unknown");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PANE, 4), "?");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_TESTSTREAM, 0), "elements");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_TESTSTREAM, 1), "watermark");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_TESTSTREAM, 2), "processing_time");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_LATE, SD_LATE_WINDOW_EXPIRED),
                        sd_late_reason_name(SD_LATE_WINDOW_EXPIRED));
    assert_string_equal(sd_trace_cause_name(SD_TRACE_LATE, SD_LATE_SORTED_EXPIRED),
                        sd_late_reason_name(SD_LATE_SORTED_EXPIRED));
    assert_string_equal(sd_trace_cause_name(SD_TRACE_LATE, 7), "?");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PAUSE, SD_PAUSE_CAUSE_START), "start");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PAUSE, SD_PAUSE_CAUSE_BY_HAND), "by_hand");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PAUSE, SD_PAUSE_CAUSE_AT_TIME), "at_time");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PAUSE, SD_PAUSE_CAUSE_BEFORE_EVENT),
                        "before_event");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PAUSE, SD_PAUSE_CAUSE_STEP_DONE), "step_done");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_PAUSE, SD_PAUSE_CAUSES), "?");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_STEP, SD_STEP_CAUSE_EVENTS), "events");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_STEP, SD_STEP_CAUSE_FOR), "for");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_STEP, SD_STEP_CAUSE_WATERMARK), "watermark");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_STEP, SD_STEP_CAUSE_RESUME), "resume");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_STEP, -1), "?");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_WM_OUT, 0), "");
    assert_string_equal(sd_trace_cause_name(SD_TRACE_KINDS, 0), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_read),
        cmocka_unit_test(test_cap_and_cut),
        cmocka_unit_test(test_no_allocation_while_recording),
        cmocka_unit_test(test_wall_moves_coalesce),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
