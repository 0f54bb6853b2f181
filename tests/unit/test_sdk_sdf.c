/*
 * Unit tests for the C SDK's splittable-DoFn machinery (sdk-harness/src/sdf.c): calendar
 * arithmetic of bounded-delay watermarks (table tests with leap years and month-end clamps,
 * computed independently), civil-day round trips, the offset-range tracker (claims,
 * checkpoints, fractional splits), the four watermark estimators, the restriction codec and
 * the DoFn payload's estimator trailer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "sdk-harness/src/sdf_int.h"

/* ================================================================ calendar */

typedef struct month_row {
    const char *name;
    int64_t t;
    int64_t months;
    int64_t want;
} month_row;

/* Expected values from an independent date library (UTC). */
static const month_row month_rows[] = {
    { "epoch minus one month", 0LL, 1, -2678400000LL },
    { "leap year clamps to Feb 29", 1711886400000LL, 1, 1709208000000LL },
    { "common year clamps to Feb 28", 1680264000000LL, 1, 1677585600000LL },
    { "year 2000 is leap", 954460800000LL, 1, 951782400000LL },
    { "year 1900 is not leap", -2201299200000LL, 1, -2203977600000LL },
    { "31st to a 30-day month", 1717137000000LL, 1, 1714458600000LL },
    { "over a year boundary", 1705276800000LL, 13, 1671062400000LL },
    { "negative months go forward", 1735603200000LL, -2, 1740700800000LL },
    { "before the epoch keeps time of day", -23760000001LL, 1, -26438400001LL },
    { "twelve months from Feb 29", 1709164800000LL, 12, 1677542400000LL },
    { "four years from Feb 29", 1709164800000LL, 48, 1582934400000LL },
    { "zero months", 1625360523004LL, 0, 1625360523004LL },
    { "year 1 January", -62127907200000LL, 2, -62133004800000LL },
    { "the minimum stays the minimum", SD_TIME_MIN, 1, SD_TIME_MIN },
    { "far past clamps to the minimum", 0, 12LL * 400000, SD_TIME_MIN },
};

static void test_minus_months_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(month_rows) / sizeof(month_rows[0]); i++) {
        const month_row *r = &month_rows[i];
        int64_t got = sd__time_minus_months(r->t, r->months);
        if (got != r->want) {
            fail_msg("%s: %lld - %lld months = %lld, want %lld", r->name, (long long)r->t,
                     (long long)r->months, (long long)got, (long long)r->want);
        }
    }
}

typedef struct interval_row {
    const char *name;
    int64_t t;
    sd_interval iv;
    int64_t want;
} interval_row;

static void test_minus_interval_table(void **state)
{
    (void)state;
    static const interval_row rows[] = {
        { "day-time only", 10000, { 0, 2500 }, 7500 },
        { "negative day-time moves forward", 10000, { 0, -500 }, 10500 },
        /* 2024-03-31T00:00:01 - (1 month, 1 s) = 2024-02-29T00:00:00 */
        { "months then ms", 1711843201000LL, { 1, 1000 }, 1709164800000LL },
        { "saturates at the minimum", SD_TIME_MIN + 5, { 0, 100 }, SD_TIME_MIN },
        { "zero interval", 42, { 0, 0 }, 42 },
        /* Chained subtractions keep their order: (2024-03-31 - 1 month) - 1 day = Feb 28,
         * where (2024-03-31 - 1 day) - 1 month would be Feb 29 (checked below). */
        { "months before days", 1711843200000LL, { 1, 86400000 }, 1709078400000LL },
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t got = sd_time_minus_interval(rows[i].t, rows[i].iv);
        if (got != rows[i].want) {
            fail_msg("%s: got %lld, want %lld", rows[i].name, (long long)got,
                     (long long)rows[i].want);
        }
    }
    sd_time days_first = sd_time_minus_interval(
        sd_time_minus_interval(1711843200000LL, (sd_interval){ 0, 86400000 }),
        (sd_interval){ 1, 0 });
    assert_int_equal(days_first, 1709164800000LL);
}

static void test_civil_days(void **state)
{
    (void)state;
    assert_int_equal(sd__days_from_civil(1970, 1, 1), 0);
    assert_int_equal(sd__days_from_civil(1969, 12, 31), -1);
    assert_int_equal(sd__days_from_civil(2000, 3, 1), 11017);
    assert_int_equal(sd__days_in_month(2024, 2), 29);
    assert_int_equal(sd__days_in_month(2100, 2), 28);
    assert_int_equal(sd__days_in_month(2400, 2), 29);
    assert_int_equal(sd__days_in_month(2023, 4), 30);
    assert_int_equal(sd__days_in_month(2023, 13), 0);
    /* Round trips across Beam's whole range, and consecutive days are consecutive dates. */
    int64_t lo = SD_TIME_MIN / 86400000 - 1, hi = SD_TIME_MAX / 86400000 + 1;
    for (int64_t d = lo; d <= hi; d += 9973) {
        int64_t y, y2;
        int m, dd, m2, dd2;
        sd__civil_from_days(d, &y, &m, &dd);
        assert_true(m >= 1 && m <= 12 && dd >= 1 && dd <= sd__days_in_month(y, m));
        assert_int_equal(sd__days_from_civil(y, m, dd), d);
        sd__civil_from_days(d + 1, &y2, &m2, &dd2);
        bool next = (y2 == y && m2 == m && dd2 == dd + 1) ||
                    (y2 == y && m2 == m + 1 && dd2 == 1 && dd == sd__days_in_month(y, m)) ||
                    (y2 == y + 1 && m2 == 1 && dd2 == 1 && m == 12 && dd == 31);
        assert_true(next);
    }
}

/* ================================================================ tracker */

static void test_tracker_claims(void **state)
{
    (void)state;
    sd__tracker t;
    sd__tracker_init(&t, (sd_offset_range){ 10, 13 });
    assert_int_equal(sd__tracker_next(&t), 10);
    assert_int_equal(sd__tracker_claim(&t, 9), -1); /* below the range */
    assert_int_equal(sd__tracker_claim(&t, 10), 1);
    assert_int_equal(sd__tracker_claim(&t, 10), -1); /* not increasing */
    assert_int_equal(sd__tracker_claim(&t, 12), 1);  /* gaps are allowed */
    assert_true(sd__tracker_done(&t));               /* 12 was the last offset */
    assert_int_equal(sd__tracker_claim(&t, 13), 0);
    assert_true(t.exhausted);
    sd_offset_range res;
    assert_false(sd__tracker_split(&t, 0, &res));
    /* An empty restriction is done at once; a backwards one is empty. */
    sd__tracker_init(&t, (sd_offset_range){ 5, 3 });
    assert_true(sd__tracker_done(&t));
    assert_int_equal(t.r.to, 5);
}

typedef struct split_row {
    const char *name;
    sd_offset_range r;
    int n_claims; /* claims from r.from, consecutive */
    double fraction;
    bool ok;
    sd_offset_range primary, residual;
} split_row;

static void test_tracker_split_table(void **state)
{
    (void)state;
    static const split_row rows[] = {
        { "checkpoint with nothing claimed", { 0, 100 }, 0, 0.0, true, { 0, 0 }, { 0, 100 } },
        { "checkpoint after 10 claims", { 0, 100 }, 10, 0.0, true, { 0, 10 }, { 10, 100 } },
        { "half of the rest", { 0, 100 }, 10, 0.5, true, { 0, 55 }, { 55, 100 } },
        { "never before the claim in progress",
          { 0, 100 },
          10,
          0.001,
          true,
          { 0, 10 },
          { 10, 100 } },
        { "fraction 1 keeps everything", { 0, 100 }, 10, 1.0, false, { 0, 100 }, { 0, 0 } },
        { "all claimed", { 0, 3 }, 3, 0.0, false, { 0, 3 }, { 0, 0 } },
        { "negative fraction is a checkpoint", { 5, 9 }, 1, -2.0, true, { 5, 6 }, { 6, 9 } },
        { "huge range",
          { 0, INT64_MAX },
          1,
          0.5,
          true,
          { 0, 4611686018427387905LL },
          { 4611686018427387905LL, INT64_MAX } },
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const split_row *row = &rows[i];
        sd__tracker t;
        sd__tracker_init(&t, row->r);
        for (int k = 0; k < row->n_claims; k++) {
            assert_int_equal(sd__tracker_claim(&t, row->r.from + k), 1);
        }
        sd_offset_range res = { 0, 0 };
        bool ok = sd__tracker_split(&t, row->fraction, &res);
        if (ok != row->ok || t.r.from != row->primary.from || t.r.to != row->primary.to ||
            (ok && (res.from != row->residual.from || res.to != row->residual.to))) {
            fail_msg("%s: ok=%d primary [%lld,%lld) residual [%lld,%lld)", row->name, (int)ok,
                     (long long)t.r.from, (long long)t.r.to, (long long)res.from,
                     (long long)res.to);
        }
        /* After a split the primary's end is the limit of claims. */
        if (ok) {
            assert_int_equal(sd__tracker_claim(&t, row->primary.to), 0);
        }
    }
}

/* ================================================================ estimators */

static void test_estimators(void **state)
{
    (void)state;
    sd__wm_est e;
    sd_wm_spec none = { .kind = SD_WM_NONE };
    sd__wm_init(&e, &none, SD_TIME_MIN);
    sd__wm_observe(&e, 100);
    assert_false(sd__wm_reports(&e));
    assert_int_equal(sd__wm_current(&e, 5), SD_TIME_MIN);

    sd_wm_spec mono = { .kind = SD_WM_MONOTONIC };
    sd__wm_init(&e, &mono, 50);
    sd__wm_observe(&e, 10); /* behind the state: no change */
    assert_int_equal(sd__wm_current(&e, 0), 50);
    sd__wm_observe(&e, 90);
    sd__wm_observe(&e, 70);
    assert_int_equal(sd__wm_current(&e, 0), 90);
    sd__wm_set(&e, 5); /* ignored: not manual */
    assert_int_equal(sd__wm_current(&e, 0), 90);

    sd_wm_spec manual = { .kind = SD_WM_MANUAL };
    sd__wm_init(&e, &manual, SD_TIME_MIN);
    sd__wm_observe(&e, 1000); /* outputs do not move a manual estimate */
    assert_int_equal(sd__wm_current(&e, 0), SD_TIME_MIN);
    sd__wm_set(&e, 700);
    assert_int_equal(sd__wm_current(&e, 0), 700);

    sd_wm_spec wall = { .kind = SD_WM_WALL_TIME };
    sd__wm_init(&e, &wall, SD_TIME_MIN);
    assert_int_equal(sd__wm_current(&e, 12345), 12345);
    assert_int_equal(sd__wm_current(&e, 12000), 12345); /* never backwards */

    /* Bounded delay: each element's candidate is its timestamp minus the delay. */
    sd_wm_spec bd = { .kind = SD_WM_BOUNDED_DELAY, .delay = { 0, 1000 } };
    sd__wm_init(&e, &bd, SD_TIME_MIN);
    const int64_t ts[] = { 5000, 3000, 9000, 8000 };
    const int64_t want[] = { 4000, 4000, 8000, 8000 };
    for (size_t i = 0; i < 4; i++) {
        sd__wm_observe(&e, ts[i]);
        assert_int_equal(sd__wm_current(&e, 0), want[i]);
    }
    sd_wm_spec bm = { .kind = SD_WM_BOUNDED_DELAY, .delay = { 1, 0 } };
    sd__wm_init(&e, &bm, SD_TIME_MIN);
    sd__wm_observe(&e, 1711886400000LL); /* 2024-03-31T12:00 */
    sd__wm_observe(&e, 1711800000000LL); /* 2024-03-30T12:00, also Feb 29 after clamping */
    assert_int_equal(sd__wm_current(&e, 0), 1709208000000LL);
}

/* ================================================================ codecs */

static void test_restriction_codec(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    const sd_offset_range rs[] = { { 0, 1000 }, { -5, INT64_MAX }, { 7, 7 } };
    const sd_time wms[] = { SD_TIME_MIN, 12345, SD_TIME_MAX };
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(sd__restriction_encode(&b, rs[i], wms[i]), SD_OK);
    }
    sd_reader r = sd_reader_make(sd_buf_bytes(&b));
    for (size_t i = 0; i < 3; i++) {
        sd_offset_range got;
        sd_time wm;
        assert_int_equal(sd__restriction_decode(&r, &got, &wm), SD_OK);
        assert_int_equal(got.from, rs[i].from);
        assert_int_equal(got.to, rs[i].to);
        assert_int_equal(wm, wms[i]);
    }
    assert_true(sd_reader_done(&r));
    /* A truncated restriction is refused and the cursor stays put. */
    sd_reader t = sd_reader_make(sd_bytes_make(b.data, 2));
    sd_offset_range got;
    sd_time wm;
    assert_int_equal(sd__restriction_decode(&t, &got, &wm), SD_EPROTO);
    assert_int_equal(sd_reader_left(&t), 2);
    sd_buf_deinit(&b);
}

static void test_payload_trailer(void **state)
{
    (void)state;
    sd_buf b;
    sd_err err;
    sd_wm_spec wm;
    sd_buf_init(&b, 0);
    const char *tags[] = { "out0" };
    const char *sides[] = { "side0" };
    assert_int_equal(sd__dofn_payload_encode(&b, "t:fn", sd_bytes_str("cfg"), tags, 1, sides, 1),
                     SD_OK);
    /* No trailer: no estimator. */
    assert_int_equal(sd__sdf_payload_wm(sd_buf_bytes(&b), &wm, &err), SD_OK);
    assert_int_equal(wm.kind, SD_WM_NONE);
    sd_wm_spec in = { .kind = SD_WM_BOUNDED_DELAY, .delay = { -3, 86400000 } };
    assert_int_equal(sd__sdf_payload_append(&b, &in), SD_OK);
    assert_int_equal(sd__sdf_payload_wm(sd_buf_bytes(&b), &wm, &err), SD_OK);
    assert_int_equal(wm.kind, SD_WM_BOUNDED_DELAY);
    assert_int_equal(wm.delay.months, -3);
    assert_int_equal(wm.delay.ms, 86400000);
    /* The ordinary decoder still reads the payload. */
    sd__dofn_payload pl;
    assert_int_equal(sd__dofn_payload_decode(sd_buf_bytes(&b), &pl, &err), SD_OK);
    assert_int_equal(pl.n_outputs, 1);
    assert_int_equal(pl.n_sides, 1);
    sd__dofn_payload_deinit(&pl);
    /* Damaged trailers are errors, never crashes. */
    for (size_t cut = 1; cut < 4; cut++) {
        sd_status st = sd__sdf_payload_wm(sd_bytes_make(b.data, b.len - cut), &wm, &err);
        assert_true(st == SD_EPROTO || st == SD_OK);
    }
    sd_buf_reset(&b);
    assert_int_equal(sd__dofn_payload_encode(&b, "t:fn", SD_BYTES_NULL, NULL, 0, NULL, 0), SD_OK);
    assert_int_equal(sd_buf_append(&b, "Z", 1), SD_OK);
    assert_int_equal(sd__sdf_payload_wm(sd_buf_bytes(&b), &wm, &err), SD_EPROTO);
    sd_buf_reset(&b);
    assert_int_equal(sd__dofn_payload_encode(&b, "t:fn", SD_BYTES_NULL, NULL, 0, NULL, 0), SD_OK);
    in.kind = (sd_wm_kind)99;
    assert_int_equal(sd__sdf_payload_append(&b, &in), SD_OK);
    assert_int_equal(sd__sdf_payload_wm(sd_buf_bytes(&b), &wm, &err), SD_EPROTO);
    sd_buf_deinit(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minus_months_table),  cmocka_unit_test(test_minus_interval_table),
        cmocka_unit_test(test_civil_days),          cmocka_unit_test(test_tracker_claims),
        cmocka_unit_test(test_tracker_split_table), cmocka_unit_test(test_estimators),
        cmocka_unit_test(test_restriction_codec),   cmocka_unit_test(test_payload_trailer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
