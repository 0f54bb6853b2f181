/*
 * Integration tests of the C SDK's TestStream on the embedded Sundial runner: timestamped
 * elements and watermark advances into fixed windows (exact per-window output and pane info),
 * late data dropped and counted, late data within the allowed lateness as a LATE pane, several
 * output tags with their own watermarks, and a TestStream output used as a side input.
 *
 * Each test renders grouped panes as strings ("key:values [start,end) TIMING#index/nonspec
 * first last @timestamp", see time_common.h) and checks them with the SDK's assertions, which
 * run inside the job; a failed assertion fails the job and the message shows the difference.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "time_common.h"

static sd_windowfn fixed(int64_t size_ms, int64_t lateness_ms)
{
    sd_windowfn wf = { .kind = SD_WINDOW_FIXED,
                       .size_ms = size_ms,
                       .allowed_lateness_ms = lateness_ms };
    return wf;
}

static void run_and_expect_ok(sd_pipeline *p, sd_run_result *res)
{
    char msg[2048];
    int64_t wall = 0;
    sd_status st = tc_run(p, &wall, res, msg, sizeof(msg));
    if (st != SD_OK) {
        fprintf(stderr, "job failed: %s\n", msg);
    }
    assert_int_equal(st, SD_OK);
    assert_true(wall < 20000);
}

/* Elements and watermark advances -> fixed windows -> GroupByKey: exact output per window. */
static void test_fixed_windows_exact(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-fixed");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    const char *k1[] = { "a", "b", "a" };
    const int64_t v1[] = { 1, 2, 3 };
    const sd_time t1[] = { 1000, 2000, 5000 };
    tc_add_kvs(ts, NULL, k1, v1, t1, 3);
    tc_add_kv(ts, NULL, "a", 10, 12000);
    sd_teststream_advance_watermark(ts, NULL, 10000);
    const char *k2[] = { "b", "a" };
    const int64_t v2[] = { 20, 5 };
    const sd_time t2[] = { 15000, 19999 };
    tc_add_kvs(ts, NULL, k2, v2, t2, 2);
    sd_teststream_advance_watermark(ts, NULL, 20000);
    sd_windowfn wf = fixed(10000, 0);
    sd_pcoll *in = sd_teststream_output(ts, NULL);
    sd_pcoll *values = tc_group_render(p, "V", in, &wf, "tc:values");
    sd_pcoll *panes = tc_group_render(p, "P", in, &wf, "tc:panes");

    sd_window w0 = sd_window_interval(0, 10000), w1 = sd_window_interval(10000, 20000);
    const char *const on_time0[] = { "a:1,3", "b:2" };
    sd_assert_strings_in_pane(p, "OnTime0", values, &w0, SD_PANES_ON_TIME, on_time0, 2);
    const char *const all1[] = { "a:5,10", "b:20" };
    sd_assert_strings_in_pane(p, "All1", values, &w1, SD_PANES_ALL, all1, 2);
    sd_assert_count_in_pane(p, "NoEarly", values, NULL, SD_PANES_EARLY, 0);
    sd_assert_count_in_pane(p, "NoLate", values, NULL, SD_PANES_LATE, 0);
    const char *const exact[] = {
        "a:1,3 [0,10000) ON_TIME#0/0 first last @9999",
        "b:2 [0,10000) ON_TIME#0/0 first last @9999",
        "a:5,10 [10000,20000) ON_TIME#0/0 first last @19999",
        "b:20 [10000,20000) ON_TIME#0/0 first last @19999",
    };
    sd_assert_strings(p, "ExactPanes", panes, exact, 4);
    run_and_expect_ok(p, NULL);
    sd_pipeline_destroy(p);
}

/* After the watermark passed a window, its data is late: dropped and counted. */
static void test_late_data_dropped(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-late-dropped");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "a", 1, 1000);
    sd_teststream_advance_watermark(ts, NULL, 10000);
    tc_add_kv(ts, NULL, "a", 2, 2000); /* late: [0,10000) closed at watermark 10000 */
    tc_add_kv(ts, NULL, "a", 3, 15000);
    sd_windowfn wf = fixed(10000, 0);
    sd_pcoll *panes = tc_group_render(p, "P", sd_teststream_output(ts, NULL), &wf, "tc:panes");
    const char *const exact[] = {
        "a:1 [0,10000) ON_TIME#0/0 first last @9999",
        "a:3 [10000,20000) ON_TIME#0/0 first last @19999",
    };
    sd_assert_strings(p, "Exact", panes, exact, 2);
    sd_run_result res;
    run_and_expect_ok(p, &res);
    assert_int_equal(sd_run_result_counter(&res, SD_RUN_DROPPED_LATE), 1);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

/* Within the allowed lateness, late data makes a LATE pane after the ON_TIME one. */
static void test_late_data_allowed_lateness(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-late-pane");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "a", 1, 1000);
    sd_teststream_advance_watermark(ts, NULL, 10000);
    tc_add_kv(ts, NULL, "a", 2, 2000); /* late but within the hour of allowed lateness */
    sd_teststream_advance_watermark(ts, NULL, 20000);
    tc_add_kv(ts, NULL, "a", 4, 3000); /* a second LATE pane */
    sd_teststream_advance_watermark(ts, NULL, 10000 + HOUR_MS);
    tc_add_kv(ts, NULL, "a", 8, 4000); /* beyond the lateness: dropped */
    sd_windowfn wf = fixed(10000, HOUR_MS);
    sd_pcoll *in = sd_teststream_output(ts, NULL);
    sd_pcoll *values = tc_group_render(p, "V", in, &wf, "tc:values");
    sd_pcoll *panes = tc_group_render(p, "P", in, &wf, "tc:panes");
    sd_window w0 = sd_window_interval(0, 10000);
    const char *const on_time[] = { "a:1" };
    sd_assert_strings_in_pane(p, "OnTime", values, &w0, SD_PANES_ON_TIME, on_time, 1);
    const char *const late[] = { "a:2", "a:4" };
    sd_assert_strings_in_pane(p, "Late", values, &w0, SD_PANES_LATE, late, 2);
    const char *const exact[] = {
        "a:1 [0,10000) ON_TIME#0/0 first @9999",
        "a:2 [0,10000) LATE#1/1 @9999",
        "a:4 [0,10000) LATE#2/2 @9999",
    };
    sd_assert_strings(p, "Exact", panes, exact, 3);
    sd_run_result res;
    run_and_expect_ok(p, &res);
    /* a=8 is dropped by each of the two GroupByKeys reading the stream. */
    assert_int_equal(sd_run_result_counter(&res, SD_RUN_DROPPED_LATE), 2);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

/* A pane assertion that does not hold fails the job, and the message shows the difference. */
static void test_pane_assertion_fails_job(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-assert-fails");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "a", 1, 1000);
    sd_teststream_advance_watermark(ts, NULL, 10000);
    tc_add_kv(ts, NULL, "a", 2, 2000);
    sd_windowfn wf = fixed(10000, HOUR_MS);
    sd_pcoll *values = tc_group_render(p, "V", sd_teststream_output(ts, NULL), &wf, "tc:values");
    sd_window w0 = sd_window_interval(0, 10000);
    /* Wrong on purpose: a:2 came in the LATE pane, not the ON_TIME one. */
    const char *const wrong[] = { "a:1", "a:2" };
    sd_assert_strings_in_pane(p, "WrongOnTime", values, &w0, SD_PANES_ON_TIME, wrong, 2);
    char msg[2048];
    sd_status st = tc_run(p, NULL, NULL, msg, sizeof(msg));
    assert_int_equal(st, SD_ESTATE);
    if (strstr(msg, "WrongOnTime") == NULL || strstr(msg, "missing 1: [\"a:2\"]") == NULL) {
        fail_msg("unexpected failure message: %s", msg);
    }
    sd_pipeline_destroy(p);
}

/*
 * Two tags with their own watermarks: tag b's element is on time while b's watermark lags, even
 * though a's watermark is far ahead; a's later element is late once both moved on.
 */
static void test_several_tags(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-tags");
    const char *const tags[] = { "a", "b" };
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), tags, 2);
    tc_add_kv(ts, "a", "k", 1, 1000);
    tc_add_kv(ts, "b", "k", 2, 2000);
    sd_teststream_advance_watermark(ts, "a", 30000);
    tc_add_kv(ts, "b", "k", 3, 3000); /* on time: b's watermark is still at the start */
    sd_teststream_advance_watermark(ts, "b", 30000);
    tc_add_kv(ts, "a", "k", 4, 4000); /* late on both */
    sd_pcoll *outs[2] = { sd_teststream_output(ts, "a"), sd_teststream_output(ts, "b") };
    sd_pcoll *both = sd_flatten(p, "Both", outs, 2);
    sd_windowfn wf = fixed(10000, 0);
    sd_pcoll *panes = tc_group_render(p, "P", both, &wf, "tc:panes");
    const char *const exact[] = { "k:1,2,3 [0,10000) ON_TIME#0/0 first last @9999" };
    sd_assert_strings(p, "Exact", panes, exact, 1);
    sd_assert_count(p, "CountA", outs[0], 2);
    sd_assert_count(p, "CountB", outs[1], 2);
    sd_run_result res;
    run_and_expect_ok(p, &res);
    assert_int_equal(sd_run_result_counter(&res, SD_RUN_DROPPED_LATE), 1);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

/* Session windows merge per key as elements arrive; a closed session is not reopened. */
static void test_session_windows(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-sessions");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    const char *k1[] = { "a", "a", "b", "a" };
    const int64_t v1[] = { 1, 2, 5, 3 };
    const sd_time t1[] = { 1000, 3000, 4000, 20000 };
    tc_add_kvs(ts, NULL, k1, v1, t1, 4);
    sd_teststream_advance_watermark(ts, NULL, 10000); /* closes a's [1000,8000), b's [4000,9000) */
    tc_add_kv(ts, NULL, "a", 4, 22000);               /* extends [20000,25000) to 27000 */
    tc_add_kv(ts, NULL, "b", 6, 9500);                /* a new session for b, on time */
    sd_windowfn wf = { .kind = SD_WINDOW_SESSIONS, .gap_ms = 5000 };
    sd_pcoll *panes = tc_group_render(p, "P", sd_teststream_output(ts, NULL), &wf, "tc:panes");
    const char *const exact[] = {
        "a:1,2 [1000,8000) ON_TIME#0/0 first last @7999",
        "b:5 [4000,9000) ON_TIME#0/0 first last @8999",
        "a:3,4 [20000,27000) ON_TIME#0/0 first last @26999",
        "b:6 [9500,14500) ON_TIME#0/0 first last @14499",
    };
    sd_assert_strings(p, "Exact", panes, exact, 4);
    run_and_expect_ok(p, NULL);
    sd_pipeline_destroy(p);
}

/* Sliding windows: an element lands in every window that covers it. */
static void test_sliding_windows(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-sliding");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "a", 1, 7000);
    sd_teststream_advance_watermark(ts, NULL, 10000); /* [0,10000) fires */
    tc_add_kv(ts, NULL, "a", 2, 12000);
    sd_windowfn wf = { .kind = SD_WINDOW_SLIDING, .size_ms = 10000, .period_ms = 5000 };
    sd_pcoll *panes = tc_group_render(p, "P", sd_teststream_output(ts, NULL), &wf, "tc:panes");
    const char *const exact[] = {
        "a:1 [0,10000) ON_TIME#0/0 first last @9999",
        "a:1,2 [5000,15000) ON_TIME#0/0 first last @14999",
        "a:2 [10000,20000) ON_TIME#0/0 first last @19999",
    };
    sd_assert_strings(p, "Exact", panes, exact, 3);
    run_and_expect_ok(p, NULL);
    sd_pipeline_destroy(p);
}

/* main KV<string, varint> + windowed side input of KV<string, varint> -> "key:sum of side". */
static sd_status side_sum_process(sd_ctx *c, void *state)
{
    sd_bytes k, v;
    sd_iter it;
    bool has;
    int64_t sum = 0;
    char buf[128];
    (void)state;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "side_sum: not a KV");
    }
    sd_status st = sd_side_iterable(c, 0, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        sd_bytes sk;
        int64_t x;
        if (sd_read_bytes(&r, &sk) != SD_OK || sd_read_int(&r, &x) != SD_OK) {
            return sd_fail(c, "side_sum: side element is not KV<string, varint>");
        }
        sum += x;
    }
    if (st != SD_OK) {
        return st;
    }
    sd_reader kr = sd_reader_make(k);
    sd_bytes key;
    if (sd_read_bytes(&kr, &key) != SD_OK) {
        return sd_fail(c, "side_sum: key is not a string");
    }
    int n = snprintf(buf, sizeof(buf), "%.*s:%lld", (int)key.len, (const char *)key.ptr,
                     (long long)sum);
    return sd_emit_str(c, buf, (size_t)n);
}

/*
 * A TestStream output as a windowed side input: the main element of [0,10s) waits until the
 * side's watermark passes that window, so it sees every side element of the window, including
 * one added after the main element arrived.
 */
static void test_side_input_from_teststream(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-side");
    const char *const tags[] = { "main", "side" };
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), tags, 2);
    const char *ks[] = { "s", "s" };
    const int64_t vs[] = { 1, 2 };
    const sd_time tss[] = { 1000, 3000 };
    tc_add_kvs(ts, "side", ks, vs, tss, 2);
    tc_add_kv(ts, "main", "x", 0, 5000);
    tc_add_kv(ts, "side", "s", 4, 8000);
    sd_teststream_advance_watermark(ts, "side", 10000);
    sd_teststream_advance_watermark(ts, "main", 10000);
    tc_add_kv(ts, "main", "y", 0, 15000);
    tc_add_kv(ts, "side", "s", 100, 12000);
    sd_windowfn wf = fixed(10000, 0);
    sd_pcoll *mainw = sd_window_into(p, "MainWindow", sd_teststream_output(ts, "main"), &wf);
    sd_pcoll *sidew = sd_window_into(p, "SideWindow", sd_teststream_output(ts, "side"), &wf);
    sd_side_input side = { sidew, SD_SIDE_AS_ITERABLE };
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = { .dofn = "t:side_sum",
                           .n_outputs = 1,
                           .output_coders = outc,
                           .n_side_inputs = 1,
                           .side_inputs = &side };
    sd_pcoll *out = sd_pardo(p, "Join", mainw, &spec, NULL);
    const char *const want[] = { "x:7", "y:100" };
    sd_assert_strings(p, "Check", out, want, 2);
    run_and_expect_ok(p, NULL);
    sd_pipeline_destroy(p);
}

/*
 * A triggered side input: the side is summed per key in fixed windows of 10 s under
 * Repeatedly(AfterCount(1)), so each side element fires a pane. A main element waits only for
 * the first firing of its window (w comes before any side element), then reads the latest
 * firing that had arrived: discarding, the last pane's sum (y after 2 and 3: 3); accumulating,
 * the sum so far (6). One value per read: the view holds the latest firing only.
 */
static void run_triggered_side(sd_accumulation_mode mode, const char *const *want)
{
    sd_pipeline *p = sd_pipeline_create("ts-triggered-side");
    const char *const tags[] = { "main", "side" };
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), tags, 2);
    tc_add_kv(ts, "main", "w", 0, 500);
    tc_add_kv(ts, "side", "s", 1, 1000);
    tc_add_kv(ts, "main", "x", 0, 2000);
    tc_add_kv(ts, "side", "s", 2, 3000);
    tc_add_kv(ts, "side", "s", 3, 4000);
    tc_add_kv(ts, "main", "y", 0, 5000);
    sd_windowfn mainwf = fixed(10000, 0);
    sd_windowfn sidewf = mainwf;
    sidewf.trigger = sd_trigger_repeatedly(p, sd_trigger_after_count(p, 1));
    sidewf.accumulation = mode;
    sd_pcoll *mainw = sd_window_into(p, "MainWindow", sd_teststream_output(ts, "main"), &mainwf);
    sd_pcoll *sidew = sd_window_into(p, "SideWindow", sd_teststream_output(ts, "side"), &sidewf);
    sd_pcoll *sums = sd_combine_per_key(p, "SideSum", sidew, SD_COMBINE_SUM, SD_BYTES_NULL,
                                        sd_pcoder_varint(p), sd_pcoder_varint(p));
    sd_side_input side = { sums, SD_SIDE_AS_ITERABLE };
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = { .dofn = "t:side_sum",
                           .n_outputs = 1,
                           .output_coders = outc,
                           .n_side_inputs = 1,
                           .side_inputs = &side };
    sd_pcoll *out = sd_pardo(p, "Join", mainw, &spec, NULL);
    sd_assert_strings(p, "Check", out, want, 3);
    run_and_expect_ok(p, NULL);
    sd_pipeline_destroy(p);
}

static void test_triggered_side_input(void **state)
{
    static const char *const discarding[] = { "w:1", "x:1", "y:3" };
    static const char *const accumulating[] = { "w:1", "x:1", "y:6" };
    (void)state;
    run_triggered_side(SD_DISCARDING_PANES, discarding);
    run_triggered_side(SD_ACCUMULATING_PANES, accumulating);
}

/* Construction errors are sticky and name the problem. */
static void test_builder_errors(void **state)
{
    (void)state;

    struct {
        const char *name;
        int kind;
        const char *want;
    } rows[] = {
        { "unknown tag", 0, "unknown tag \"zz\"" },
        { "watermark backwards", 1, "would move backwards, from 5000 to 4000" },
        { "not a value of the coder", 2, "is not one nested value" },
        { "clock backwards", 3, "processing time cannot move backwards" },
        { "duplicate tag", 4, "tag \"a\" is used twice" },
        { "wrong shorthand", 5, "needs a varint stream" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_pipeline *p = sd_pipeline_create("ts-errors");
        const char *const dup[] = { "a", "a" };
        sd_teststream *ts =
            sd_teststream_create(p, "Events", sd_pcoder_string(p), rows[i].kind == 4 ? dup : NULL,
                                 rows[i].kind == 4 ? 2 : 0);
        static const uint8_t bad[] = { 0x05, 'a' };
        sd_bytes b = sd_bytes_make(bad, sizeof(bad));
        sd_time t = 0;
        const int64_t one = 1;
        switch (rows[i].kind) {
        case 0:
            sd_teststream_advance_watermark(ts, "zz", 1);
            break;
        case 1:
            sd_teststream_advance_watermark(ts, NULL, 5000);
            sd_teststream_advance_watermark(ts, NULL, 4000);
            break;
        case 2:
            sd_teststream_add_elements(ts, NULL, &b, &t, 1);
            break;
        case 3:
            sd_teststream_advance_processing_time(ts, -1);
            break;
        case 5:
            sd_teststream_add_ints(ts, NULL, &one, &t, 1);
            break;
        default:
            break;
        }
        const sd_err *e = sd_pipeline_error(p);
        assert_non_null(e);
        if (strstr(sd_err_msg(e), rows[i].want) == NULL) {
            fail_msg("row %s: message \"%s\" lacks \"%s\"", rows[i].name, sd_err_msg(e),
                     rows[i].want);
        }
        sd_pipeline_destroy(p);
    }
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn side_sum = { .process = side_sum_process };
    if (!tc_register() || sd_register_dofn("t:side_sum", &side_sum) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_windows_exact),
        cmocka_unit_test(test_late_data_dropped),
        cmocka_unit_test(test_late_data_allowed_lateness),
        cmocka_unit_test(test_pane_assertion_fails_job),
        cmocka_unit_test(test_several_tags),
        cmocka_unit_test(test_session_windows),
        cmocka_unit_test(test_sliding_windows),
        cmocka_unit_test(test_side_input_from_teststream),
        cmocka_unit_test(test_triggered_side_input),
        cmocka_unit_test(test_builder_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
