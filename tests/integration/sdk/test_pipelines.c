/*
 * Integration tests for the Sundial C SDK: real pipelines, run end to end on a Sundial runner
 * started for each test (test mode, loopback worker in this process), checked with the SDK's
 * own in-pipeline assertions. A failing assertion must fail the job with a readable diff.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sundial/sundial.h"

/* ---------------------------------------------------------------- DoFns */

static sd_status split_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes line;
    (void)state;
    if (sd_read_bytes(&r, &line) != SD_OK) {
        return sd_fail(c, "split: not a string");
    }
    size_t i = 0;
    while (i < line.len) {
        while (i < line.len && line.ptr[i] == ' ') {
            i++;
        }
        size_t start = i;
        while (i < line.len && line.ptr[i] != ' ') {
            i++;
        }
        if (i > start) {
            sd_counter_add(c, "words", 1);
            sd_status st = sd_emit_kv_str_int(c, (const char *)line.ptr + start, i - start, 1);
            if (st != SD_OK) {
                return st;
            }
        }
    }
    return SD_OK;
}

/* KV<string, varint> -> "word=count" */
static sd_status format_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes k;
    int64_t v;
    char buf[256];
    (void)state;
    if (sd_read_bytes(&r, &k) != SD_OK || sd_read_int(&r, &v) != SD_OK) {
        return sd_fail(c, "format: not KV<string, varint>");
    }
    int n = snprintf(buf, sizeof(buf), "%.*s=%lld", (int)k.len, (const char *)k.ptr, (long long)v);
    return sd_emit_str(c, buf, (size_t)n);
}

/* KV<string, Iterable<varint>> -> KV<string, varint> (sum) */
static sd_status sum_group_process(sd_ctx *c, void *state)
{
    sd_bytes key, v;
    sd_iter it;
    bool has;
    int64_t sum = 0;
    (void)state;
    if (sd_ctx_grouped(c, &key, &it) != SD_OK) {
        return sd_fail(c, "sum_group: not a grouped KV");
    }
    while (sd_iter_next(&it, &v, &has) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        int64_t x;
        if (sd_read_int(&r, &x) != SD_OK) {
            return sd_fail(c, "sum_group: value is not a varint");
        }
        sum += x;
    }
    sd_reader kr = sd_reader_make(key);
    sd_bytes ks;
    if (sd_read_bytes(&kr, &ks) != SD_OK) {
        return sd_fail(c, "sum_group: key is not a string");
    }
    return sd_emit_kv_str_int(c, (const char *)ks.ptr, ks.len, sum);
}

/* varint x -> x * (sum of the iterable side input 0) */
static sd_status scale_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    int64_t x, total = 0;
    sd_iter it;
    sd_bytes v;
    bool has;
    (void)state;
    if (sd_read_int(&r, &x) != SD_OK) {
        return sd_fail(c, "scale: not a varint");
    }
    if (sd_side_iterable(c, 0, &it) != SD_OK) {
        return sd_fail(c, "scale: cannot read the side input");
    }
    while (sd_iter_next(&it, &v, &has) == SD_OK && has) {
        sd_reader vr = sd_reader_make(v);
        int64_t y;
        if (sd_read_int(&vr, &y) != SD_OK) {
            return sd_fail(c, "scale: side value is not a varint");
        }
        total += y;
    }
    return sd_emit_int(c, x * total);
}

/* string k -> KV<string k, sum of multimap side input 0 values for k> */
static sd_status lookup_process(sd_ctx *c, void *state)
{
    sd_bytes elem = sd_ctx_element(c);
    sd_reader r = sd_reader_make(elem);
    sd_bytes k, v;
    sd_iter it;
    bool has;
    int64_t sum = 0;
    (void)state;
    if (sd_read_bytes(&r, &k) != SD_OK) {
        return sd_fail(c, "lookup: not a string");
    }
    if (sd_side_lookup(c, 0, elem, &it) != SD_OK) {
        return sd_fail(c, "lookup: cannot read the side input");
    }
    while (sd_iter_next(&it, &v, &has) == SD_OK && has) {
        sd_reader vr = sd_reader_make(v);
        int64_t y;
        if (sd_read_int(&vr, &y) != SD_OK) {
            return sd_fail(c, "lookup: side value is not a varint");
        }
        sum += y;
    }
    return sd_emit_kv_str_int(c, (const char *)k.ptr, k.len, sum);
}

/* varint -> even to output 0, odd to output 1 */
static sd_status parity_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    int64_t x;
    (void)state;
    if (sd_read_int(&r, &x) != SD_OK) {
        return sd_fail(c, "parity: not a varint");
    }
    return sd_emit(c, (x % 2 == 0) ? 0 : 1, sd_ctx_element(c));
}

/* string -> KV<string, varint 1> (for keyed windowed counts) */
static sd_status key_one_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes s;
    (void)state;
    if (sd_read_bytes(&r, &s) != SD_OK) {
        return sd_fail(c, "key_one: not a string");
    }
    return sd_emit_kv_str_int(c, (const char *)s.ptr, s.len, 1);
}

/* KV<string, varint> -> "k=v@[start,end)" using the element's window */
static sd_status window_format_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes k;
    int64_t v;
    char buf[256];
    (void)state;
    if (sd_read_bytes(&r, &k) != SD_OK || sd_read_int(&r, &v) != SD_OK) {
        return sd_fail(c, "window_format: not KV<string, varint>");
    }
    sd_window w = sd_ctx_window(c);
    int n = snprintf(buf, sizeof(buf), "%.*s=%lld@[%lld,%lld)", (int)k.len, (const char *)k.ptr,
                     (long long)v, (long long)w.start, (long long)w.end);
    return sd_emit_str(c, buf, (size_t)n);
}

static sd_status ts_from_suffix(sd_bytes element, sd_bytes config, sd_time *out, sd_err *err)
{
    /* element: string "name@<ms>" */
    sd_reader r = sd_reader_make(element);
    sd_bytes s;
    (void)config;
    if (sd_read_bytes(&r, &s) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "not a string");
    }
    int64_t v = 0;
    size_t i = 0;
    while (i < s.len && s.ptr[i] != '@') {
        i++;
    }
    if (i == s.len) {
        return sd_err_set(err, SD_ENOTFOUND, "no @time field");
    }
    for (i++; i < s.len; i++) {
        v = v * 10 + (s.ptr[i] - '0');
    }
    *out = v;
    return SD_OK;
}

/* "name@ms" -> "name" */
static sd_status strip_ts_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes s;
    (void)state;
    if (sd_read_bytes(&r, &s) != SD_OK) {
        return sd_fail(c, "strip: not a string");
    }
    size_t n = 0;
    while (n < s.len && s.ptr[n] != '@') {
        n++;
    }
    return sd_emit_str(c, (const char *)s.ptr, n);
}

static void register_all(void)
{
    static const sd_dofn split = { .process = split_process };
    static const sd_dofn format = { .process = format_process };
    static const sd_dofn sum_group = { .process = sum_group_process };
    static const sd_dofn scale = { .process = scale_process };
    static const sd_dofn lookup = { .process = lookup_process };
    static const sd_dofn parity = { .process = parity_process };
    static const sd_dofn key_one = { .process = key_one_process };
    static const sd_dofn wformat = { .process = window_format_process };
    static const sd_dofn strip = { .process = strip_ts_process };
    assert_int_equal(sd_register_dofn("t:split", &split), SD_OK);
    assert_int_equal(sd_register_dofn("t:format", &format), SD_OK);
    assert_int_equal(sd_register_dofn("t:sum_group", &sum_group), SD_OK);
    assert_int_equal(sd_register_dofn("t:scale", &scale), SD_OK);
    assert_int_equal(sd_register_dofn("t:lookup", &lookup), SD_OK);
    assert_int_equal(sd_register_dofn("t:parity", &parity), SD_OK);
    assert_int_equal(sd_register_dofn("t:key_one", &key_one), SD_OK);
    assert_int_equal(sd_register_dofn("t:wformat", &wformat), SD_OK);
    assert_int_equal(sd_register_dofn("t:strip", &strip), SD_OK);
    assert_int_equal(sd_register_timestamp_fn("t:ts_suffix", ts_from_suffix), SD_OK);
}

/* Run p; expect DONE (or, when want_fail, FAILED with a message containing every needle). */
static void
run_expect(sd_pipeline *p, bool want_fail, const char *const *needles, size_t n, sd_env_kind env)
{
    sd_run_options opts = { .timeout_ms = 60000, .environment = env };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (!want_fail) {
        if (st != SD_OK) {
            fprintf(stderr, "run failed: %s\n", sd_err_msg(&err));
        }
        assert_int_equal(st, SD_OK);
        assert_int_equal(res.state, SD_RUN_DONE);
    } else {
        assert_int_equal(st, SD_ESTATE);
        assert_int_equal(res.state, SD_RUN_FAILED);
        assert_non_null(res.error);
        for (size_t i = 0; i < n; i++) {
            if (strstr(res.error, needles[i]) == NULL) {
                fprintf(stderr, "missing \"%s\" in failure message: %s\n", needles[i], res.error);
            }
            assert_non_null(strstr(res.error, needles[i]));
        }
    }
    sd_run_result_deinit(&res);
}

/* ---------------------------------------------------------------- tests */

static const char *const text[] = { "a b c a", "b a", "c c c" };

static void test_wordcount_exact(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("wordcount");
    sd_pcoll *lines = sd_create_strings(p, "Lines", text, 3);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *words = sd_apply(p, "Split", lines, "t:split", SD_BYTES_NULL, kv);
    sd_pcoll *counts = sd_count_per_key(p, "Count", words);
    sd_pcoll *out = sd_apply(p, "Format", counts, "t:format", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want[] = { "a=3", "b=2", "c=4" };
    sd_assert_strings(p, "CheckCounts", out, want, 3);
    sd_assert_count(p, "CheckWordCount", words, 9);
    run_expect(p, false, NULL, 0, SD_ENV_LOOPBACK);
    sd_pipeline_destroy(p);
}

static void test_counters(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("counters");
    sd_pcoll *lines = sd_create_strings(p, "Lines", text, 3);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_apply(p, "Split", lines, "t:split", SD_BYTES_NULL, kv);
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_pipeline_run(p, NULL, &res, &err), SD_OK);
    assert_int_equal(sd_run_result_counter(&res, "words"), 9);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

static void test_group_by_key(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("gbk");
    sd_pcoll *lines = sd_create_strings(p, "Lines", text, 3);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *words = sd_apply(p, "Split", lines, "t:split", SD_BYTES_NULL, kv);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", words);
    sd_pcoll *sums = sd_apply(p, "Sum", grouped, "t:sum_group", SD_BYTES_NULL, kv);
    sd_pcoll *out = sd_apply(p, "Format", sums, "t:format", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want[] = { "a=3", "b=2", "c=4" };
    sd_assert_strings(p, "Check", out, want, 3);
    run_expect(p, false, NULL, 0, SD_ENV_LOOPBACK);
    sd_pipeline_destroy(p);
}

static void test_combine(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("combine");
    const int64_t nums[] = { 5, 1, 9, 3 };
    sd_pcoll *xs = sd_create_ints(p, "Numbers", nums, 4);
    const sd_pcoder *vi = sd_pcoder_varint(p);
    sd_pcoll *sum = sd_combine_globally(p, "Sum", xs, SD_COMBINE_SUM, SD_BYTES_NULL, vi, vi);
    sd_pcoll *mx =
        sd_combine_globally(p, "Max", xs, SD_COMBINE_MAX, SD_BYTES_NULL, sd_pcoder_bytes(p), vi);
    sd_pcoll *none = sd_create_ints(p, "Nothing", NULL, 0);
    sd_pcoll *empty_sum =
        sd_combine_globally(p, "EmptySum", none, SD_COMBINE_SUM, SD_BYTES_NULL, vi, vi);
    const int64_t want_sum = 18, want_max = 9, want_zero = 0;
    sd_buf b;
    sd_buf_init(&b, 0);
    assert_int_equal(sd_enc_int(&b, want_sum), SD_OK);
    size_t o1 = b.len;
    assert_int_equal(sd_enc_int(&b, want_max), SD_OK);
    size_t o2 = b.len;
    assert_int_equal(sd_enc_int(&b, want_zero), SD_OK);
    sd_bytes e_sum = sd_bytes_make(b.data, o1);
    sd_bytes e_max = sd_bytes_make(b.data + o1, o2 - o1);
    sd_bytes e_zero = sd_bytes_make(b.data + o2, b.len - o2);
    sd_assert_contains_exactly(p, "CheckSum", sum, &e_sum, 1);
    sd_assert_contains_exactly(p, "CheckMax", mx, &e_max, 1);
    sd_assert_contains_exactly(p, "CheckEmpty", empty_sum, &e_zero, 1);
    run_expect(p, false, NULL, 0, SD_ENV_LOOPBACK);
    sd_buf_deinit(&b);
    sd_pipeline_destroy(p);
}

static void test_side_inputs(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("sides");
    const int64_t nums[] = { 1, 2, 3 };
    const int64_t factors[] = { 2, 5 };
    sd_pcoll *xs = sd_create_ints(p, "Numbers", nums, 3);
    sd_pcoll *fs = sd_create_ints(p, "Factors", factors, 2);
    sd_side_input side = { fs, SD_SIDE_AS_ITERABLE };
    sd_pardo_spec spec = { .dofn = "t:scale", .n_side_inputs = 1, .side_inputs = &side };
    sd_pcoll *scaled = sd_pardo(p, "Scale", xs, &spec, NULL);
    const int64_t want[] = { 7, 14, 21 };
    sd_pcoll *expect = sd_create_ints(p, "Want", want, 3);
    (void)expect;
    sd_buf b;
    sd_buf_init(&b, 0);
    size_t offs[4] = { 0 };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sd_enc_int(&b, want[i]), SD_OK);
        offs[i + 1] = b.len;
    }
    sd_bytes items[3];
    for (int i = 0; i < 3; i++) {
        items[i] = sd_bytes_make(b.data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_assert_contains_exactly(p, "CheckScaled", scaled, items, 3);

    /* Multimap: KV<string, varint> looked up by key. */
    const char *const keys[] = { "a", "b", "z" };
    sd_pcoll *ks = sd_create_strings(p, "Keys", keys, 3);
    sd_pcoll *lines = sd_create_strings(p, "Lines", text, 3);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *words = sd_apply(p, "Split", lines, "t:split", SD_BYTES_NULL, kv);
    sd_side_input mside = { words, SD_SIDE_AS_MULTIMAP };
    const sd_pcoder *outc[1] = { kv };
    sd_pardo_spec mspec = { .dofn = "t:lookup",
                            .n_outputs = 1,
                            .output_coders = outc,
                            .n_side_inputs = 1,
                            .side_inputs = &mside };
    sd_pcoll *looked = sd_pardo(p, "Lookup", ks, &mspec, NULL);
    sd_pcoll *out = sd_apply(p, "Format", looked, "t:format", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const mwant[] = { "a=3", "b=2", "z=0" };
    sd_assert_strings(p, "CheckLookup", out, mwant, 3);
    run_expect(p, false, NULL, 0, SD_ENV_LOOPBACK);
    sd_buf_deinit(&b);
    sd_pipeline_destroy(p);
}

static void test_flatten_and_outputs(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("flatten");
    const int64_t nums[] = { 1, 2, 3, 4, 5 };
    sd_pcoll *xs = sd_create_ints(p, "Numbers", nums, 5);
    sd_pcoll *outs[2];
    sd_pardo_spec spec = { .dofn = "t:parity", .n_outputs = 2 };
    sd_pardo(p, "Parity", xs, &spec, outs);
    sd_assert_count(p, "CheckEven", outs[0], 2);
    sd_assert_count(p, "CheckOdd", outs[1], 3);
    sd_pcoll *both = sd_flatten(p, "Both", outs, 2);
    sd_assert_count(p, "CheckBoth", both, 5);
    sd_pcoll *shuffled = sd_reshuffle(p, "Shuffle", both);
    sd_assert_count(p, "CheckShuffled", shuffled, 5);
    sd_pcoll *none = sd_create_ints(p, "None", NULL, 0);
    sd_assert_empty(p, "CheckEmpty", none);
    run_expect(p, false, NULL, 0, SD_ENV_LOOPBACK);
    sd_pipeline_destroy(p);
}

static void test_fixed_windows(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("fixed");
    const char *const evs[] = { "a@1000", "a@2000", "b@3000", "a@12000", "b@19999", "b@20000" };
    sd_pcoll *raw = sd_create_strings(p, "Events", evs, 6);
    sd_pcoll *stamped = sd_with_timestamps(p, "Stamp", raw, "t:ts_suffix", SD_BYTES_NULL);
    sd_pcoll *names = sd_apply(p, "Strip", stamped, "t:strip", SD_BYTES_NULL, NULL);
    sd_windowfn fixed = { .kind = SD_WINDOW_FIXED, .size_ms = 10000 };
    sd_pcoll *win = sd_window_into(p, "Fixed10s", names, &fixed);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *keyed = sd_apply(p, "Key", win, "t:key_one", SD_BYTES_NULL, kv);
    sd_pcoll *counts = sd_combine_per_key(p, "Count", keyed, SD_COMBINE_SUM, SD_BYTES_NULL,
                                          sd_pcoder_varint(p), sd_pcoder_varint(p));
    sd_pcoll *out = sd_apply(p, "Format", counts, "t:wformat", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want[] = { "a=2@[0,10000)", "b=1@[0,10000)", "a=1@[10000,20000)",
                                 "b=1@[10000,20000)", "b=1@[20000,30000)" };
    sd_assert_strings(p, "Check", out, want, 5);
    /* Per-window: only the first window's elements. */
    sd_window w0 = sd_window_interval(0, 10000);
    sd_buf b;
    sd_buf_init(&b, 0);
    assert_int_equal(sd_enc_str(&b, "a=2@[0,10000)"), SD_OK);
    size_t o = b.len;
    assert_int_equal(sd_enc_str(&b, "b=1@[0,10000)"), SD_OK);
    sd_bytes items[2] = { sd_bytes_make(b.data, o), sd_bytes_make(b.data + o, b.len - o) };
    sd_assert_in_window(p, "CheckWindow0", out, &w0, items, 2);
    run_expect(p, false, NULL, 0, SD_ENV_LOOPBACK);
    sd_buf_deinit(&b);
    sd_pipeline_destroy(p);
}

/* An element without an event time (no "@" field: a NULL rowtime) fails the job, and the
 * message names the transform and the element. */
static void test_missing_event_time(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("missing-time");
    const char *const evs[] = { "a@1000", "rowtime-is-null" };
    sd_pcoll *raw = sd_create_strings(p, "Events", evs, 2);
    sd_pcoll *stamped = sd_with_timestamps(p, "Stamp", raw, "t:ts_suffix", SD_BYTES_NULL);
    sd_windowfn fixed = { .kind = SD_WINDOW_FIXED, .size_ms = 10000 };
    sd_window_into(p, "Fixed10s", stamped, &fixed);
    const char *const needles[] = { "WithTimestamps Stamp", "\"rowtime-is-null\"",
                                    "has no event time: no @time field" };
    run_expect(p, true, needles, 3, SD_ENV_LOOPBACK);
    sd_pipeline_destroy(p);
}

static void test_sessions(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("sessions");
    const char *const evs[] = { "u@0", "u@4000", "u@20000", "v@1000" };
    sd_pcoll *raw = sd_create_strings(p, "Events", evs, 4);
    sd_pcoll *stamped = sd_with_timestamps(p, "Stamp", raw, "t:ts_suffix", SD_BYTES_NULL);
    sd_pcoll *names = sd_apply(p, "Strip", stamped, "t:strip", SD_BYTES_NULL, NULL);
    sd_windowfn sess = { .kind = SD_WINDOW_SESSIONS, .gap_ms = 5000 };
    sd_pcoll *win = sd_window_into(p, "Sessions", names, &sess);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *keyed = sd_apply(p, "Key", win, "t:key_one", SD_BYTES_NULL, kv);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", keyed);
    sd_pcoll *sums = sd_apply(p, "Sum", grouped, "t:sum_group", SD_BYTES_NULL, kv);
    sd_pcoll *out = sd_apply(p, "Format", sums, "t:wformat", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want[] = { "u=2@[0,9000)", "u=1@[20000,25000)", "v=1@[1000,6000)" };
    sd_assert_strings(p, "Check", out, want, 3);
    run_expect(p, false, NULL, 0, SD_ENV_LOOPBACK);
    sd_pipeline_destroy(p);
}

static void test_assertion_failure_diff(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("failing");
    sd_pcoll *lines = sd_create_strings(p, "Lines", text, 3);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *words = sd_apply(p, "Split", lines, "t:split", SD_BYTES_NULL, kv);
    sd_pcoll *counts = sd_count_per_key(p, "Count", words);
    sd_pcoll *out = sd_apply(p, "Format", counts, "t:format", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want[] = { "a=3", "b=7", "d=1" };
    sd_assert_strings(p, "CheckCounts", out, want, 3);
    const char *const needles[] = { "CheckCounts",  "missing 2", "\"b=7\"", "\"d=1\"",
                                    "unexpected 2", "\"b=2\"",   "\"c=4\"" };
    run_expect(p, true, needles, sizeof(needles) / sizeof(needles[0]), SD_ENV_LOOPBACK);
    sd_pipeline_destroy(p);
}

static void test_construction_error(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("bad");
    sd_pcoll *lines = sd_create_strings(p, "Lines", text, 3);
    sd_pcoll *x = sd_apply(p, "Nope", lines, "t:not_registered", SD_BYTES_NULL, NULL);
    assert_null(x);
    assert_null(sd_group_by_key(p, "Group", x));
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_pipeline_run(p, NULL, NULL, &err), SD_ENOTFOUND);
    assert_non_null(strstr(sd_err_msg(&err), "t:not_registered"));
    sd_pipeline_destroy(p);
}

static void test_process_environment(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("process-env");
    sd_pcoll *lines = sd_create_strings(p, "Lines", text, 3);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *words = sd_apply(p, "Split", lines, "t:split", SD_BYTES_NULL, kv);
    sd_pcoll *counts = sd_count_per_key(p, "Count", words);
    sd_pcoll *out = sd_apply(p, "Format", counts, "t:format", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want[] = { "a=3", "b=2", "c=4" };
    sd_assert_strings(p, "CheckCounts", out, want, 3);
    run_expect(p, false, NULL, 0, SD_ENV_PROCESS);
    sd_pipeline_destroy(p);
}

/*
 * A Create large enough to go by reference (its elements stay in this process and a LOOPBACK
 * run's proto carries a token; builtins.c): the same results on the loopback worker and in a
 * process environment (where the elements travel inline), and the pipeline proto written
 * for inspection carries them inline.
 */
static sd_pipeline *large_create_pipeline(size_t n)
{
    sd_pipeline *p = sd_pipeline_create("large-create");
    int64_t *nums = sd_malloc(n * sizeof(int64_t));
    assert_non_null(nums);
    for (size_t i = 0; i < n; i++) {
        nums[i] = (int64_t)i;
    }
    sd_pcoll *xs = sd_create_ints(p, "Numbers", nums, n);
    sd_free(nums);
    const sd_pcoder *vi = sd_pcoder_varint(p);
    sd_pcoll *sum = sd_combine_globally(p, "Sum", xs, SD_COMBINE_SUM, SD_BYTES_NULL, vi, vi);
    sd_pcoll *count = sd_combine_globally(p, "Count", xs, SD_COMBINE_COUNT, SD_BYTES_NULL, vi, vi);
    sd_buf b;
    sd_buf_init(&b, 0);
    assert_int_equal(sd_enc_int(&b, (int64_t)(n * (n - 1) / 2)), SD_OK);
    size_t o1 = b.len;
    assert_int_equal(sd_enc_int(&b, (int64_t)n), SD_OK);
    sd_bytes e_sum = sd_bytes_make(b.data, o1), e_count = sd_bytes_make(b.data + o1, b.len - o1);
    sd_assert_contains_exactly(p, "CheckSum", sum, &e_sum, 1);
    sd_assert_contains_exactly(p, "CheckCount", count, &e_count, 1);
    sd_buf_deinit(&b);
    return p;
}

static void test_large_create(void **state)
{
    (void)state;
    const size_t n = 200000; /* about 1 MB of configuration: above the by-reference size */
    sd_pipeline *p = large_create_pipeline(n);
    run_expect(p, false, NULL, 0, SD_ENV_LOOPBACK);
    uint8_t *proto = NULL;
    size_t len = 0;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(
        sd_pipeline_to_proto(p, "beam:env:external:v1", SD_BYTES_NULL, &proto, &len, &err), SD_OK);
    assert_true(len > n * 4); /* every element inline */
    static const char ref[] = "sundial:create_ref";
    bool has_ref = false;
    for (size_t i = 0; i + sizeof(ref) - 1 <= len && !has_ref; i++) {
        has_ref = memcmp(proto + i, ref, sizeof(ref) - 1) == 0;
    }
    assert_false(has_ref);
    sd_free(proto);
    sd_pipeline_destroy(p);
    p = large_create_pipeline(n);
    run_expect(p, false, NULL, 0, SD_ENV_PROCESS);
    sd_pipeline_destroy(p);
}

int main(int argc, char **argv)
{
    int code;
    register_all();
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wordcount_exact),    cmocka_unit_test(test_counters),
        cmocka_unit_test(test_group_by_key),       cmocka_unit_test(test_combine),
        cmocka_unit_test(test_side_inputs),        cmocka_unit_test(test_flatten_and_outputs),
        cmocka_unit_test(test_fixed_windows),      cmocka_unit_test(test_sessions),
        cmocka_unit_test(test_missing_event_time), cmocka_unit_test(test_assertion_failure_diff),
        cmocka_unit_test(test_construction_error), cmocka_unit_test(test_process_environment),
        cmocka_unit_test(test_large_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
