/*
 * The C SDK's run result carries the job's time trace (sd_run_options.trace): a TestStream
 * into fixed windows and a GroupByKey on the embedded runner. The trace has the TestStream's
 * events, the GroupByKey's output watermark steps and its two on-time panes, in record order;
 * and two runs of the same job give the same trace once the wall times are left out (the
 * trace is deterministic on the test clock).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "time_common.h"

static sd_pipeline *windowed_job(void)
{
    sd_pipeline *p = sd_pipeline_create("trace-fixed");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    const char *k1[] = { "a", "b", "a" };
    const int64_t v1[] = { 1, 2, 3 };
    const sd_time t1[] = { 1000, 2000, 5000 };
    tc_add_kvs(ts, NULL, k1, v1, t1, 3);
    sd_teststream_advance_watermark(ts, NULL, 10000);
    tc_add_kv(ts, NULL, "b", 20, 15000);
    sd_teststream_advance_watermark(ts, NULL, 20000);
    sd_windowfn wf = { .kind = SD_WINDOW_FIXED, .size_ms = 10000 };
    (void)tc_group_render(p, "P", sd_teststream_output(ts, NULL), &wf, "tc:panes");
    return p;
}

/* Run the job with its trace asked for; the trace (owned by the caller). */
static char *run_traced(void)
{
    sd_pipeline *p = windowed_job();
    sd_run_options opts = { .timeout_ms = 60000, .trace = true };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "job failed: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    assert_non_null(res.trace);
    assert_int_equal(strlen(res.trace), res.trace_len);
    char *trace = res.trace;
    res.trace = NULL;
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    return trace;
}

static size_t count(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) {
        n++;
    }
    return n;
}

/* Each line without its ,"wall":N field. */
static void strip_wall(char *text)
{
    char *w;
    while ((w = strstr(text, ",\"wall\":")) != NULL) {
        char *end = w + 8;
        while (*end == '-' || (*end >= '0' && *end <= '9')) {
            end++;
        }
        memmove(w, end, strlen(end) + 1);
    }
}

static void test_run_result_has_the_trace(void **state)
{
    (void)state;
    char *trace = run_traced();
    if (getenv("TRACE_DUMP") != NULL) {
        fputs(trace, stderr);
    }
    size_t lines = count(trace, "\n");
    assert_true(lines > 5);
    assert_int_equal(count(trace, "{\"seq\":"), lines); /* one record a line */
    assert_true(count(trace, "\"wall\":") == lines);
    /* the TestStream's four events (elements, watermark, elements, watermark) and its end
     * (the watermark to +inf) */
    assert_int_equal(count(trace, "\"kind\":\"teststream\""), 5);
    assert_int_equal(count(trace, "\"cause\":\"watermark\",\"t\":\"+inf\""), 1);
    /* two on-time panes per window's key: a and b in [0,10000), b in [10000,20000) */
    assert_int_equal(count(trace, "\"kind\":\"pane\""), 3);
    assert_int_equal(count(trace, "\"cause\":\"on_time\""), 3);
    assert_true(count(trace, "\"kind\":\"wm_out\"") >= 3);
    assert_non_null(strstr(trace, "\"window\":{\"start\":0,\"end\":10000}"));
    assert_int_equal(count(trace, "\"t\":9999,\"window\":{\"start\":0,\"end\":10000}"), 2);
    assert_int_equal(count(trace, "\"t\":19999,\"window\":{\"start\":10000,\"end\":20000}"), 1);
    sd_free(trace);
}

static void test_two_runs_give_the_same_trace(void **state)
{
    (void)state;
    char *a = run_traced();
    char *b = run_traced();
    strip_wall(a);
    strip_wall(b);
    assert_string_equal(a, b);
    sd_free(a);
    sd_free(b);
}

int main(int argc, char **argv)
{
    int code = 0;
    if (!tc_register()) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_run_result_has_the_trace),
                                        cmocka_unit_test(test_two_runs_give_the_same_trace) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
