/*
 * Unit tests for the pure part of the C SDK's partitioned sources (sdk-harness/src/partwm.c):
 * the strict ISO 8601 duration parser (a table of accepted texts with their values, a table
 * of refused ones with the words their messages must hold, overflow at the limits), and the
 * per-partition watermark rules stepped on a synthetic source clock — the minimum over
 * active partitions, idleness and coming back, granularity, monotonicity, a partition that
 * never produces, calendar-month delays (Flink's rt - INTERVAL '1' MONTH) — plus an OOM loop.
 * Everything is deterministic: no clock is read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "sdk-harness/src/partwm_int.h"

#define SEC 1000LL

/* ================================================================ durations */

typedef struct dur_ok {
    const char *text;
    int32_t months;
    int64_t ms;
} dur_ok;

static const dur_ok ok_rows[] = {
    { "PT5S", 0, 5000 },
    { "PT0S", 0, 0 },
    { "PT1M", 0, 60000 },
    { "PT1H", 0, 3600000 },
    { "PT36H", 0, 129600000 },
    { "P1D", 0, 86400000 },
    { "P1W", 0, 604800000 },
    { "P1M", 1, 0 },
    { "P2Y", 24, 0 },
    { "P1Y2M", 14, 0 },
    { "P1M1D", 1, 86400000 },
    { "PT0.5S", 0, 500 },
    { "PT1.25S", 0, 1250 },
    { "PT1,5S", 0, 1500 },
    { "PT0.001S", 0, 1 },
    { "P1DT2H3M4.005S", 0, 86400000 + 7200000 + 180000 + 4005 },
    { "P1Y1M1DT1H1M1S", 13, 86400000 + 3600000 + 60000 + 1000 },
    { "PT9223372036854775.807S", 0, INT64_MAX },
    { "P178956970Y7M", INT32_MAX, 0 },
    { "P106751991167D", 0, 106751991167LL * 86400000LL },
};

typedef struct dur_bad {
    const char *text;
    const char *words; /* a part of the message */
} dur_bad;

static const dur_bad bad_rows[] = {
    { "", "\"P\"" },
    { "5S", "\"P\"" },
    { "p1d", "\"P\"" },
    { "-PT5S", "\"P\"" },
    { "P", "at least one" },
    { "PT", "after \"T\"" },
    { "P1", "a date designator" },
    { "PT5", "a time designator" },
    { "PT-5S", "without a sign" },
    { "P1S", "a date designator" },
    { "PT1D", "a time designator" },
    { "P1M1Y", "in the order" },
    { "PT1S1M", "in the order" },
    { "PT1H1H", "in the order" },
    { "P1DT1HT1M", "one \"T\"" },
    { "P1W1D", "weeks alone" },
    { "P1WT1H", "weeks alone" },
    { "PT1.2345S", "at most 3 fraction digits" },
    { "PT1.5M", "a fraction on seconds only" },
    { "P1.5D", "a fraction on seconds only" },
    { "PT.5S", "a number" },
    { "P1DT", "after \"T\"" },
    { "PT5S ", "a number at offset 4" },
    { "P9223372036854775808D", "expected a number that fits in 64 bits" },
    { "P106751991168D", "9223372036854775807 ms" },
    { "PT9223372036854775.808S", "9223372036854775807 ms" },
    { "P2147483648M", "2147483647 months" },
    { "P178956971Y", "2147483647 months" },
    { "P178956970Y8M", "2147483647 months" },
};

static void test_duration_accepts(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(ok_rows) / sizeof(ok_rows[0]); i++) {
        sd_interval iv = { -1, -1 };
        sd_err err;
        sd_err_clear(&err);
        if (sd_duration_parse(ok_rows[i].text, &iv, &err) != SD_OK) {
            fail_msg("%s: %s", ok_rows[i].text, sd_err_msg(&err));
        }
        if (iv.months != ok_rows[i].months || iv.ms != ok_rows[i].ms) {
            fail_msg("%s: got %d months %lld ms", ok_rows[i].text, (int)iv.months,
                     (long long)iv.ms);
        }
    }
}

static void test_duration_refuses(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_rows) / sizeof(bad_rows[0]); i++) {
        sd_interval iv = { 7, 7 };
        sd_err err;
        sd_err_clear(&err);
        if (sd_duration_parse(bad_rows[i].text, &iv, &err) != SD_EINVAL) {
            fail_msg("\"%s\" was accepted", bad_rows[i].text);
        }
        char want[64];
        snprintf(want, sizeof(want), "duration \"%s\": ", bad_rows[i].text);
        if (strstr(sd_err_msg(&err), want) == NULL ||
            strstr(sd_err_msg(&err), bad_rows[i].words) == NULL) {
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", bad_rows[i].text, sd_err_msg(&err),
                     bad_rows[i].words);
        }
        assert_int_equal(iv.months, 7); /* untouched on error */
        assert_int_equal(iv.ms, 7);
    }
    sd_err err;
    sd_err_clear(&err);
    sd_interval iv;
    assert_int_equal(sd_duration_parse(NULL, &iv, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "(null)"));
}

static void test_duration_fixed_length(void **state)
{
    (void)state;
    int64_t ms = -1;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_duration_parse_ms("PT1M30S", &ms, &err), SD_OK);
    assert_int_equal(ms, 90000);
    assert_int_equal(sd_duration_parse_ms("P1M", &ms, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "duration \"P1M\": years and months have no fixed"));
    assert_int_equal(ms, 90000);
}

/* ================================================================ partition watermarks */

/* One step of a scenario: records (partition, event time) seen at `now`, then advance. */
typedef struct obs {
    int part; /* -1 ends the list */
    sd_time ts;
} obs;

typedef struct step_row {
    const char *name;
    sd_time now;
    obs seen[4];
    sd_time want_wm;
    const char *want_idle; /* one char per partition: '.' active, 'i' idle */
    bool want_changed;
} step_row;

static void run_steps(sd__partwm *w, const step_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const step_row *r = &rows[i];
        for (size_t k = 0; k < 4 && r->seen[k].part >= 0; k++) {
            sd__partwm_observe(w, (size_t)r->seen[k].part, r->seen[k].ts, r->now);
        }
        bool changed = sd__partwm_advance(w, r->now);
        char idle[8] = { 0 };
        for (size_t p = 0; p < w->n && p < 7; p++) {
            idle[p] = w->parts[p].idle ? 'i' : '.';
        }
        if (w->wm != r->want_wm || strcmp(idle, r->want_idle) != 0 || changed != r->want_changed) {
            fail_msg("step \"%s\" (now %lld): wm %lld idle %s changed %d; want %lld %s %d", r->name,
                     (long long)r->now, (long long)w->wm, idle, changed, (long long)r->want_wm,
                     r->want_idle, r->want_changed);
        }
    }
}

#define END   \
    {         \
        -1, 0 \
    }

/*
 * YDB's idle-partition rule with two partitions, delay 2 s, idle timeout 5 s, granularity 1 s:
 * p1 produces at 0 s and 1 s, falls silent, is idle at 6 s (5 s of silence), the watermark
 * then follows p0 alone; p1 comes back at 9 s with an old record (3 s): it is active again,
 * holds the watermark where it was (never back), and the watermark moves again when p1 passes.
 */
static void test_idle_partition_excluded_and_back(void **state)
{
    (void)state;
    sd__partwm w;
    sd_interval delay = { 0, 2 * SEC };
    assert_int_equal(sd__partwm_init(&w, 2, delay, 5 * SEC, SEC, 0), SD_OK);
    const step_row rows[] = {
        { "both start", 0, { { 0, 0 }, { 1, 0 }, END }, -2 * SEC, "..", true },
        { "both at 1 s", SEC, { { 0, SEC }, { 1, SEC }, END }, -SEC, "..", true },
        { "p1 silent", 2 * SEC, { { 0, 2 * SEC }, END }, -SEC, "..", false },
        { "p1 holds back", 5 * SEC, { { 0, 5 * SEC }, END }, -SEC, "..", false },
        { "p1 idle after 5 s", 6 * SEC, { { 0, 6 * SEC }, END }, 4 * SEC, ".i", true },
        { "p0 alone", 8 * SEC, { { 0, 8 * SEC }, END }, 6 * SEC, ".i", true },
        { "p1 back, behind",
          9 * SEC,
          { { 0, 9 * SEC }, { 1, 3 * SEC }, END },
          6 * SEC,
          "..",
          false },
        { "p1 catching up",
          10 * SEC,
          { { 0, 10 * SEC }, { 1, 9 * SEC }, END },
          7 * SEC,
          "..",
          true },
        { "p0 silent too", 16 * SEC, { END }, 7 * SEC, "ii", true },
        { "all idle: stays", 20 * SEC, { END }, 7 * SEC, "ii", false },
    };
    run_steps(&w, rows, sizeof(rows) / sizeof(rows[0]));
    sd__partwm_deinit(&w);
}

/* A record without an event time (sd__partwm_activity) keeps its partition active but gives
 * no candidate: p1 stays at 1 s and holds the watermark there past the idle timeout its
 * silence would have reached; an out-of-range partition is ignored. */
static void test_activity_without_candidate(void **state)
{
    (void)state;
    sd__partwm w;
    sd_interval delay = { 0, 0 };
    assert_int_equal(sd__partwm_init(&w, 2, delay, 5 * SEC, SEC, 0), SD_OK);
    sd__partwm_observe(&w, 0, SEC, SEC);
    sd__partwm_observe(&w, 1, SEC, SEC);
    (void)sd__partwm_advance(&w, SEC);
    assert_int_equal(w.wm, SEC);
    sd__partwm_observe(&w, 0, 4 * SEC, 4 * SEC);
    sd__partwm_activity(&w, 1, 4 * SEC);
    sd__partwm_activity(&w, 7, 4 * SEC);
    sd__partwm_observe(&w, 0, 8 * SEC, 8 * SEC);
    (void)sd__partwm_advance(&w, 8 * SEC);
    assert_false(w.parts[1].idle);
    assert_int_equal(w.parts[1].est.wm, SEC);
    assert_int_equal(w.wm, SEC);
    (void)sd__partwm_advance(&w, 9 * SEC);
    assert_true(w.parts[1].idle); /* 5 s after its last activity */
    assert_int_equal(w.wm, 8 * SEC);
    sd__partwm_deinit(&w);
}

/* A partition that never produces holds the watermark at the start until its idle timeout. */
static void test_silent_partition_holds_until_idle(void **state)
{
    (void)state;
    sd__partwm w;
    sd_interval delay = { 0, 0 };
    assert_int_equal(sd__partwm_init(&w, 3, delay, 3 * SEC, SEC, 10 * SEC), SD_OK);
    const step_row rows[] = {
        { "p0 and p1 only",
          10 * SEC,
          { { 0, 10 * SEC }, { 1, 11 * SEC }, END },
          SD_TIME_MIN,
          "...",
          false },
        { "p2 still active",
          12 * SEC,
          { { 0, 12 * SEC }, { 1, 12 * SEC }, END },
          SD_TIME_MIN,
          "...",
          false },
        { "p2 idle", 13 * SEC, { { 0, 13 * SEC }, { 1, 14 * SEC }, END }, 13 * SEC, "..i", true },
    };
    run_steps(&w, rows, sizeof(rows) / sizeof(rows[0]));
    sd__partwm_deinit(&w);
}

/* Granularity 1 s with steps every 250 ms: the watermark moves only at whole seconds. */
static void test_granularity(void **state)
{
    (void)state;
    sd__partwm w;
    sd_interval delay = { 0, 0 };
    assert_int_equal(sd__partwm_init(&w, 1, delay, 0, SEC, 0), SD_OK);
    const step_row rows[] = {
        { "0 ms", 0, { { 0, 100 }, END }, 100, ".", true },
        { "250 ms", 250, { { 0, 250 }, END }, 100, ".", false },
        { "500 ms", 500, { { 0, 500 }, END }, 100, ".", false },
        { "999 ms", 999, { { 0, 999 }, END }, 100, ".", false },
        { "1000 ms", 1000, { { 0, 1000 }, END }, 1000, ".", true },
        { "1250 ms", 1250, { { 0, 1250 }, END }, 1000, ".", false },
        { "skipped to 3100 ms", 3100, { { 0, 3100 }, END }, 3100, ".", true },
        { "3999 ms", 3999, { { 0, 3999 }, END }, 3100, ".", false },
        { "4000 ms", 4000, { END }, 3999, ".", true },
        { "never idle (0)", 100000, { END }, 3999, ".", false },
    };
    run_steps(&w, rows, sizeof(rows) / sizeof(rows[0]));
    sd__partwm_deinit(&w);
}

/*
 * Flink's rt - INTERVAL '1' MONTH: March 30 23:00 maps to the end of February (day clamped)
 * at 23:00, March 31 00:00 to the end of February at 00:00 — earlier — so the first
 * candidate wins (each record's candidate first, then the max). Leap and common years.
 */
static void test_month_delay_first_candidate_wins(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        sd_time mar30_23, mar31_00, want;
    } years[] = {
        { "2024 (leap): Feb 29 23:00", 1711839600000LL, 1711843200000LL, 1709247600000LL },
        { "2023: Feb 28 23:00", 1680217200000LL, 1680220800000LL, 1677625200000LL },
    };

    for (size_t y = 0; y < 2; y++) {
        sd__partwm w;
        sd_interval delay = { 1, 0 };
        assert_int_equal(sd__partwm_init(&w, 1, delay, 0, SEC, 0), SD_OK);
        sd__partwm_observe(&w, 0, years[y].mar30_23, 0);
        sd__partwm_observe(&w, 0, years[y].mar31_00, 0);
        assert_true(sd__partwm_advance(&w, 0));
        if (w.wm != years[y].want) {
            fail_msg("%s: got %lld", years[y].name, (long long)w.wm);
        }
        /* Taking the max first would give Feb 29 (28) 00:00, 23 hours earlier. */
        assert_int_equal(w.wm - sd_time_minus_interval(years[y].mar31_00, delay), 23 * 3600 * SEC);
        sd__partwm_deinit(&w);
    }
}

static void test_init_errors_and_oom(void **state)
{
    (void)state;
    sd__partwm w;
    sd_interval ok = { 0, 0 }, neg = { 0, -1 }, negm = { -1, 0 };
    assert_int_equal(sd__partwm_init(&w, 0, ok, 0, SEC, 0), SD_EINVAL);
    assert_int_equal(sd__partwm_init(&w, 1, ok, 0, 0, 0), SD_EINVAL);
    assert_int_equal(sd__partwm_init(&w, 1, ok, -1, SEC, 0), SD_EINVAL);
    assert_int_equal(sd__partwm_init(&w, 1, neg, 0, SEC, 0), SD_EINVAL);
    assert_int_equal(sd__partwm_init(&w, 1, negm, 0, SEC, 0), SD_EINVAL);
    sd__partwm_deinit(&w); /* zeroed by the failed init: safe */
    for (long n = 1;; n++) {
        sd_alloc_fail_after(n, 0);
        sd_status st = sd__partwm_init(&w, 4, ok, 0, SEC, 0);
        sd_alloc_fail_after(0, 0);
        if (st == SD_OK) {
            sd__partwm_deinit(&w);
            break;
        }
        assert_int_equal(st, SD_ENOMEM);
        assert_true(n < 10);
    }
    /* Out-of-range partitions are ignored, and a clock at the end of time saturates. */
    assert_int_equal(sd__partwm_init(&w, 1, ok, 0, SEC, 0), SD_OK);
    sd__partwm_observe(&w, 5, 1000, 0);
    assert_false(sd__partwm_advance(&w, 0));
    sd__partwm_observe(&w, 0, SD_TIME_MAX, SD_TIME_MAX);
    assert_true(sd__partwm_advance(&w, SD_TIME_MAX));
    assert_int_equal(w.wm, SD_TIME_MAX);
    sd__partwm_deinit(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration_accepts),
        cmocka_unit_test(test_duration_refuses),
        cmocka_unit_test(test_duration_fixed_length),
        cmocka_unit_test(test_idle_partition_excluded_and_back),
        cmocka_unit_test(test_silent_partition_holds_until_idle),
        cmocka_unit_test(test_activity_without_candidate),
        cmocka_unit_test(test_granularity),
        cmocka_unit_test(test_month_delay_first_candidate_wins),
        cmocka_unit_test(test_init_errors_and_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
