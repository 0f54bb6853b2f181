/*
 * Integration tests of keyed state with timeouts (sd_map_groups_with_state: Spark's
 * mapGroupsWithState and transformWithState's timers) on the embedded Sundial runner, test
 * clock:
 *   - Spark's session example: per user a running click count, and a one-hour processing-time
 *     timeout that each event resets; the timeout fires once per user, after the last event,
 *     with no values and the timed-out flag, and the user's total; a user whose last call set
 *     no timeout never times out; an hour of timeouts takes no real time;
 *   - an event-time timeout fires when the watermark passes it;
 *   - registered timers stay until they fire or are deleted, and are listed sorted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/time.h"
#include "sundial/sundial.h"

#define MINUTE (60LL * 1000LL)
#define HOUR   (60LL * MINUTE)

/* The key as a string (the input is KV<string, varint>). */
static int key_str(sd_ctx *c, char *out, size_t n)
{
    sd_reader r = sd_reader_make(sd_ctx_key(c));
    sd_bytes k;
    if (sd_read_bytes(&r, &k) != SD_OK) {
        return snprintf(out, n, "?");
    }
    return snprintf(out, n, "%.*s", (int)k.len, (const char *)k.ptr);
}

static int64_t read_int(sd_bytes b)
{
    sd_reader r = sd_reader_make(b);
    int64_t v = 0;
    return sd_read_int(&r, &v) == SD_OK ? v : -1;
}

/* "<key> <what> <v>" */
static sd_status emit_line(sd_ctx *c, const char *what, int64_t v)
{
    char key[32], line[96];
    key_str(c, key, sizeof(key));
    int len = snprintf(line, sizeof(line), "%s %s %lld", key, what, (long long)v);
    return sd_emit_str(c, line, (size_t)len);
}

/* Sessions: value v > 0 adds v clicks and resets the one-hour timeout; v == 0 adds nothing and
 * sets no timeout (the session then never times out). On timeout: "<user> timed out: N". */
static sd_status sessions(sd_ctx *c, sd_group_state *gs, const sd_bytes *value)
{
    sd_bytes cur;
    bool exists;
    sd_status st = sd_group_get(gs, &cur, &exists);
    int64_t total = st == SD_OK && exists ? read_int(cur) : 0;
    if (st != SD_OK) {
        return st;
    }
    if (value == NULL) {
        if (!sd_group_timed_out(gs)) {
            return sd_fail(c, "sessions: called without a value and not timed out");
        }
        st = emit_line(c, "timed out:", total);
        return st != SD_OK ? st : sd_group_remove(gs);
    }
    int64_t v = read_int(*value);
    if (v == 0) {
        return SD_OK; /* no timeout set: the previous one is gone */
    }
    uint8_t buf[10];
    sd_buf b = { .data = buf, .cap = sizeof(buf) };
    if ((st = sd_enc_int(&b, total + v)) != SD_OK ||
        (st = sd_group_update(gs, sd_buf_bytes(&b))) != SD_OK) {
        return st;
    }
    return sd_group_set_timeout_ms(gs, HOUR);
}

/* Event-time timeout: each element sets it to its timestamp + 10 s. */
static sd_status event_timeout(sd_ctx *c, sd_group_state *gs, const sd_bytes *value)
{
    if (value == NULL) {
        return emit_line(c, "timed out at", sd_ctx_fire_time(c));
    }
    return sd_group_set_timeout_at(gs, sd_ctx_timestamp(c) + 10000);
}

/* Timers: the first element registers timers 1 h and 2 h ahead (processing time) and an
 * event-time one at 5 s; the second lists them and deletes the 2 h one. Firings print. */
static sd_status timers(sd_ctx *c, sd_group_state *gs, const sd_bytes *value)
{
    sd_group_timer t;
    if (sd_group_timer_fired(gs, &t)) {
        return emit_line(c, t.domain == SD_EVENT_TIME ? "event timer at" : "processing timer",
                         t.domain == SD_EVENT_TIME ? t.at : 1);
    }
    if (value == NULL) {
        return sd_fail(c, "timers: no value and no timer");
    }
    sd_bytes cur;
    bool second;
    sd_status st = sd_group_get(gs, &cur, &second);
    if (st != SD_OK) {
        return st;
    }
    sd_time now = sd_ctx_processing_time(c);
    if (!second) {
        uint8_t one[1] = { 1 };
        sd_group_timer a = { SD_PROCESSING_TIME, now + HOUR },
                       b = { SD_PROCESSING_TIME, now + 2 * HOUR }, e = { SD_EVENT_TIME, 5000 };
        if ((st = sd_group_update(gs, sd_bytes_make(one, 1))) != SD_OK ||
            (st = sd_group_timer_register(gs, b)) != SD_OK ||
            (st = sd_group_timer_register(gs, a)) != SD_OK ||
            (st = sd_group_timer_register(gs, e)) != SD_OK) {
            return st;
        }
        return SD_OK;
    }
    sd_group_timer list[4];
    size_t n;
    if ((st = sd_group_timer_list(gs, list, 4, &n)) != SD_OK) {
        return st;
    }
    /* Sorted: event time first (domain 1), then the two processing-time ones by time. */
    if (n != 3 || list[0].domain != SD_EVENT_TIME || list[0].at != 5000 ||
        list[1].domain != SD_PROCESSING_TIME || list[2].at - list[1].at != HOUR) {
        return sd_fail(c, "timers: listed %zu timers, not the three registered", n);
    }
    st = emit_line(c, "listed", (int64_t)n);
    return st != SD_OK ? st : sd_group_timer_delete(gs, list[2]);
}

/* ================================================================ helpers */

static sd_pcoll *kv_stream(sd_pipeline *p,
                           const char *const *keys,
                           const int64_t *vals,
                           const sd_time *ts,
                           const int64_t *advance_ms,
                           size_t n)
{
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_teststream *s = sd_teststream_create(p, "Events", kvc, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        sd_buf b;
        sd_buf_init(&b, 0);
        assert_int_equal(sd_enc_str(&b, keys[i]), SD_OK);
        assert_int_equal(sd_enc_int(&b, vals[i]), SD_OK);
        sd_bytes e = sd_buf_bytes(&b);
        sd_teststream_add_elements(s, NULL, &e, &ts[i], 1);
        sd_buf_deinit(&b);
        if (advance_ms != NULL && advance_ms[i] > 0) {
            sd_teststream_advance_processing_time(s, advance_ms[i]);
        }
    }
    sd_teststream_advance_watermark_to_infinity(s);
    return sd_teststream_output(s, NULL);
}

static void
run_check(sd_pipeline *p, sd_pcoll *in, const char *fn, const char *const *want, size_t n)
{
    sd_pcoll *out = sd_map_groups_with_state(p, "Groups", in, fn, SD_BYTES_NULL,
                                             sd_pcoder_varint(p), sd_pcoder_string(p));
    assert_non_null(out);
    sd_assert_strings(p, "Check", out, want, n);
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err err;
    sd_err_clear(&err);
    int64_t t0 = sd_mono_now_ms();
    sd_status st = sd_pipeline_run(p, &opts, NULL, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    /* Hours of processing-time timeouts, on the test clock: no real wait. */
    assert_true(sd_mono_now_ms() - t0 < 10000);
    sd_pipeline_destroy(p);
}

/* ================================================================ tests */

static void test_processing_time_timeouts(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("group-sessions");
    /* u1 clicks at 0 and 40 min, u2 at 10 min, u3 at 20 min and then "stops" (v = 0). */
    const char *const keys[] = { "u1", "u2", "u3", "u1", "u3" };
    const int64_t vals[] = { 2, 5, 1, 3, 0 };
    const sd_time ts[] = { 1, 2, 3, 4, 5 };
    const int64_t adv[] = { 10 * MINUTE, 10 * MINUTE, 20 * MINUTE, 5 * MINUTE, 0 };
    sd_pcoll *in = kv_stream(p, keys, vals, ts, adv, 5);
    const char *const want[] = { "u1 timed out: 5", "u2 timed out: 5" };
    run_check(p, in, "t:sessions", want, 2);
}

static void test_event_time_timeout(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("group-event-timeout");
    const char *const keys[] = { "a", "a", "b" };
    const int64_t vals[] = { 1, 1, 1 };
    const sd_time ts[] = { 1000, 3000, 2000 };
    sd_pcoll *in = kv_stream(p, keys, vals, ts, NULL, 3);
    /* a's second element moved its timeout to 13 s; b's is at 12 s. */
    const char *const want[] = { "a timed out at 13000", "b timed out at 12000" };
    run_check(p, in, "t:event_timeout", want, 2);
}

static void test_registered_timers(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("group-timers");
    const char *const keys[] = { "k", "k" };
    const int64_t vals[] = { 1, 1 };
    const sd_time ts[] = { 1, 2 };
    sd_pcoll *in = kv_stream(p, keys, vals, ts, NULL, 2);
    const char *const want[] = { "k listed 3", "k event timer at 5000", "k processing timer 1" };
    run_check(p, in, "t:timers", want, 3);
}

static void test_errors(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("group-errors");
    const char *const keys[] = { "k" };
    const int64_t vals[] = { 1 };
    const sd_time ts[] = { 1 };
    sd_pcoll *in = kv_stream(p, keys, vals, ts, NULL, 1);
    sd_pcoll *out = sd_map_groups_with_state(p, "Groups", in, "t:not_registered", SD_BYTES_NULL,
                                             sd_pcoder_varint(p), sd_pcoder_string(p));
    assert_non_null(out);
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err err;
    sd_err_clear(&err);
    assert_int_not_equal(sd_pipeline_run(p, &opts, NULL, &err), SD_OK);
    assert_non_null(strstr(sd_err_msg(&err), "t:not_registered"));
    sd_pipeline_destroy(p);
    p = sd_pipeline_create("group-errors-2");
    assert_null(sd_map_groups_with_state(p, "G", NULL, NULL, SD_BYTES_NULL, NULL, NULL));
    assert_non_null(sd_pipeline_error(p));
    sd_pipeline_destroy(p);
}

int main(int argc, char **argv)
{
    int code;
    if (sd_register_group_fn("t:sessions", sessions) != SD_OK ||
        sd_register_group_fn("t:event_timeout", event_timeout) != SD_OK ||
        sd_register_group_fn("t:timers", timers) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processing_time_timeouts),
        cmocka_unit_test(test_event_time_timeout),
        cmocka_unit_test(test_registered_timers),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
