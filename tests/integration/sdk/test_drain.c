/*
 * Integration tests for draining C pipelines on the embedded Sundial runner
 * (sd_run_options.drain_after_ms: JobService.Drain once the time is up):
 *   - a reader without end (restriction [0, INT64_MAX), a record every 20 ms of wall time)
 *     stops at its next checkpoint through the default truncation; the run ends DRAINED and
 *     the GroupByKey after it fires once with every record the reader emitted;
 *   - a bounded reader is kept whole by the default truncation (nothing read is cut short),
 *     and a DoFn's own truncate_restriction decides how much is left (here: two records);
 *   - a TestStream stops playing: the elements it played are all grouped, the rest never
 *     come;
 *   - a job that ends before the drain is due ends DONE, as without the option.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "runner/base/time.h"
#include "sundial/sundial.h"

/* ================================================================ DoFns */

/* Readers: one record per claim, emitted as its offset, then a checkpoint 20 ms later. The
 * restriction's end is the DoFn's config (0 = without end). */
static int64_t config_int(sd_ctx *c, int64_t dflt)
{
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    int64_t v;
    return sd_read_int(&r, &v) == SD_OK ? v : dflt;
}

static sd_status reader_initial(sd_ctx *c, void *state, sd_offset_range *out)
{
    (void)state;
    int64_t end = config_int(c, 0);
    out->from = 0;
    out->to = end > 0 ? end : INT64_MAX;
    return SD_OK;
}

static sd_status reader_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t pos = sd_ctx_restriction(c).from;
    if (!sd_try_claim(c, pos)) {
        return SD_OK;
    }
    sd_counter_add(c, "emitted", 1);
    sd_status st = sd_emit_int(c, pos);
    return st != SD_OK ? st : sd_resume(c, 20);
}

/* On drain, finish two more records of whatever is left. */
static sd_status
reader_truncate_two(sd_ctx *c, void *state, sd_offset_range r, sd_offset_range *out, bool *keep)
{
    (void)state;
    sd_counter_add(c, "truncated", 1);
    out->from = r.from;
    out->to = r.to - r.from > 2 ? r.from + 2 : r.to;
    *keep = true;
    return SD_OK;
}

/* A slow pass-through (25 ms a record), so a TestStream is still playing when it drains. */
static sd_status slow_pass(sd_ctx *c, void *state)
{
    (void)state;
    struct timespec ts = { 0, 25 * 1000000L };
    nanosleep(&ts, NULL);
    sd_counter_add(c, "passed", 1);
    return sd_emit(c, 0, sd_ctx_element(c));
}

/* int -> KV<"k", int> */
static sd_status key_all(sd_ctx *c, void *state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = sd_enc_str(&b, "k");
    if (st == SD_OK) {
        st = sd_buf_append_bytes(&b, sd_ctx_element(c));
    }
    if (st == SD_OK) {
        st = sd_emit(c, 0, sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    return st;
}

/* A grouped element: counts the groups and the values in them. */
static sd_status count_group(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes key, v;
    sd_iter it;
    bool has;
    int64_t n = 0;
    sd_status st = sd_ctx_grouped(c, &key, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        n++;
    }
    if (st == SD_OK) {
        sd_counter_add(c, "groups", 1);
        sd_counter_add(c, "grouped_values", n);
    }
    return st;
}

/* ================================================================ helpers */

/* in -> Key -> GroupByKey -> Count (counters "groups", "grouped_values"). */
static void group_and_count(sd_pipeline *p, sd_pcoll *in)
{
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *keyed = sd_apply(p, "Key", in, "t:key_all", SD_BYTES_NULL, kvc);
    sd_pcoll *g = sd_group_by_key(p, "Group", keyed);
    sd_pardo_spec spec = { .dofn = "t:count_group" };
    sd_pardo(p, "Count", g, &spec, NULL);
}

/* A reader pipeline: Impulse-like Create of one element -> Read (dofn, end) -> count. */
static sd_pipeline *reader_pipeline(const char *dofn, int64_t end, sd_buf *cfg)
{
    sd_buf_init(cfg, 0);
    assert_int_equal(sd_enc_int(cfg, end), SD_OK);
    sd_pipeline *p = sd_pipeline_create("drain-reader");
    const char *const ns[] = { "source" };
    sd_pcoll *in = sd_create_strings(p, "Source", ns, 1);
    const sd_pcoder *outc[1] = { sd_pcoder_varint(p) };
    sd_pardo_spec spec = {
        .dofn = dofn, .config = sd_buf_bytes(cfg), .n_outputs = 1, .output_coders = outc
    };
    sd_pcoll *out = sd_pardo(p, "Read", in, &spec, NULL);
    group_and_count(p, out);
    return p;
}

/* Run with drain_after_ms on the wall clock. OUT: res. Returns the run's status. */
static sd_status run_drained(sd_pipeline *p, int drain_after_ms, sd_run_result *res, int64_t *ms)
{
    sd_run_options opts = { .timeout_ms = 60000,
                            .wall_clock = true,
                            .drain_after_ms = drain_after_ms };
    sd_err err;
    sd_err_clear(&err);
    int64_t t0 = sd_mono_now_ms();
    sd_status st = sd_pipeline_run(p, &opts, res, &err);
    *ms = sd_mono_now_ms() - t0;
    if (st != SD_OK) {
        fprintf(stderr, "run: %s\n", sd_err_msg(&err));
    }
    return st;
}

/* ================================================================ tests */

static void test_reader_without_end_is_truncated(void **state)
{
    (void)state;
    sd_buf cfg;
    sd_pipeline *p = reader_pipeline("t:reader", 0, &cfg);
    sd_run_result res;
    int64_t ms;
    assert_int_equal(run_drained(p, 1000, &res, &ms), SD_OK);
    assert_int_equal(res.state, SD_RUN_DRAINED);
    int64_t emitted = sd_run_result_counter(&res, "emitted");
    fprintf(stderr, "reader without end: drained after %lld ms, %lld records\n", (long long)ms,
            (long long)emitted);
    /* About one record per 20 ms for a second, then it stops at once. */
    assert_true(emitted >= 5);
    assert_true(ms < 10000);
    assert_int_equal(sd_run_result_counter(&res, "groups"), 1);
    assert_int_equal(sd_run_result_counter(&res, "grouped_values"), emitted);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
}

static void test_bounded_reader_is_kept_whole(void **state)
{
    (void)state;
    sd_buf cfg;
    sd_pipeline *p = reader_pipeline("t:reader", 60, &cfg); /* about 1.2 s of records */
    sd_run_result res;
    int64_t ms;
    assert_int_equal(run_drained(p, 300, &res, &ms), SD_OK);
    assert_int_equal(res.state, SD_RUN_DRAINED);
    assert_int_equal(sd_run_result_counter(&res, "emitted"), 60);
    assert_int_equal(sd_run_result_counter(&res, "grouped_values"), 60);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
}

static void test_custom_truncation(void **state)
{
    (void)state;
    sd_buf cfg;
    sd_pipeline *p = reader_pipeline("t:reader_two", 0, &cfg);
    sd_run_result res;
    int64_t ms;
    assert_int_equal(run_drained(p, 500, &res, &ms), SD_OK);
    assert_int_equal(res.state, SD_RUN_DRAINED);
    int64_t emitted = sd_run_result_counter(&res, "emitted");
    int64_t truncated = sd_run_result_counter(&res, "truncated");
    fprintf(stderr, "custom truncation: %lld records, %lld truncations\n", (long long)emitted,
            (long long)truncated);
    /* Every checkpoint after the drain is truncated to two records: the reader goes on for a
     * while, shrinking, and ends; nothing it emitted is lost. */
    assert_true(truncated >= 1);
    assert_true(emitted >= 3);
    assert_int_equal(sd_run_result_counter(&res, "grouped_values"), emitted);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
}

static void test_teststream_stops(void **state)
{
    (void)state;

    enum { N = 200 };

    sd_pipeline *p = sd_pipeline_create("drain-teststream");
    sd_teststream *ts = sd_teststream_create(p, "Events", sd_pcoder_varint(p), NULL, 0);
    for (int64_t i = 0; i < N; i++) {
        sd_time t = i;
        sd_teststream_add_ints(ts, NULL, &i, &t, 1);
        sd_teststream_advance_watermark(ts, NULL, i + 1);
    }
    sd_teststream_advance_watermark_to_infinity(ts);
    sd_pardo_spec spec = { .dofn = "t:slow_pass" };
    sd_pcoll *passed = sd_pardo(p, "Slow", sd_teststream_output(ts, NULL), &spec, NULL);
    group_and_count(p, passed);
    sd_run_result res;
    int64_t ms;
    assert_int_equal(run_drained(p, 500, &res, &ms), SD_OK);
    assert_int_equal(res.state, SD_RUN_DRAINED);
    int64_t n = sd_run_result_counter(&res, "passed");
    fprintf(stderr, "TestStream: drained after %lld of %d elements\n", (long long)n, N);
    assert_true(n > 0 && n < N);
    assert_int_equal(sd_run_result_counter(&res, "groups"), 1);
    assert_int_equal(sd_run_result_counter(&res, "grouped_values"), n);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

static void test_done_before_the_drain(void **state)
{
    (void)state;
    sd_buf cfg;
    sd_pipeline *p = reader_pipeline("t:reader", 3, &cfg);
    sd_run_result res;
    int64_t ms;
    assert_int_equal(run_drained(p, 20000, &res, &ms), SD_OK);
    assert_int_equal(res.state, SD_RUN_DONE);
    assert_true(ms < 20000);
    assert_int_equal(sd_run_result_counter(&res, "grouped_values"), 3);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn reader = { .process = reader_process,
                                    .initial_restriction = reader_initial,
                                    .unbounded_per_element = true };
    static const sd_dofn reader_two = { .process = reader_process,
                                        .initial_restriction = reader_initial,
                                        .unbounded_per_element = true,
                                        .truncate_restriction = reader_truncate_two };
    static const sd_dofn slow = { .process = slow_pass };
    static const sd_dofn key = { .process = key_all };
    static const sd_dofn count = { .process = count_group };
    if (sd_register_dofn("t:reader", &reader) != SD_OK ||
        sd_register_dofn("t:reader_two", &reader_two) != SD_OK ||
        sd_register_dofn("t:slow_pass", &slow) != SD_OK ||
        sd_register_dofn("t:key_all", &key) != SD_OK ||
        sd_register_dofn("t:count_group", &count) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_without_end_is_truncated),
        cmocka_unit_test(test_bounded_reader_is_kept_whole),
        cmocka_unit_test(test_custom_truncation),
        cmocka_unit_test(test_teststream_stops),
        cmocka_unit_test(test_done_before_the_drain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
