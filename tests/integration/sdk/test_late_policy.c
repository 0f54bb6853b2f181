/*
 * Integration tests of the per-element late policy (sd_windowfn.drop_late_elements) on the
 * embedded Sundial runner, with YDB's hopping-window example: events at 40 s (a), 42 s (b),
 * 50 s (c, filtered out by `pass > 0` but still moving the watermark) and 40 s (d), the
 * source's watermark 5 s behind the latest event, windows of 10 s every 5 s. The window
 * ending at 45 s is exactly ["a", "b"] either way (d is behind its end: late by Beam's rule
 * too); under the per-element policy d, behind the watermark (45 s) on arrival, is dropped
 * from the window ending at 50 s as well, where Beam's rule keeps it.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sundial/sundial.h"

/* "name:pass" -> name, when pass > 0. */
static sd_status filter_pass(sd_ctx *c, void *state)
{
    (void)state;
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes s;
    if (sd_read_bytes(&r, &s) != SD_OK) {
        return sd_fail(c, "filter: not a string");
    }
    const uint8_t *colon = memchr(s.ptr, ':', s.len);
    if (colon == NULL) {
        return sd_fail(c, "filter: no pass field in \"%.*s\"", (int)s.len, (const char *)s.ptr);
    }
    size_t name_len = (size_t)(colon - s.ptr);
    if (colon[1] == '0') {
        return SD_OK;
    }
    return sd_emit_str(c, (const char *)s.ptr, name_len);
}

/* string -> KV<"k", string> */
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

/* A late KV<"k", name> -> "late:<name>@<window end s>" */
static sd_status format_late(sd_ctx *c, void *state)
{
    (void)state;
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes k, v;
    if (sd_read_bytes(&r, &k) != SD_OK || sd_read_bytes(&r, &v) != SD_OK) {
        return sd_fail(c, "format_late: not a KV of strings");
    }
    char out[64];
    int len = snprintf(out, sizeof(out), "late:%.*s@%lld", (int)v.len, (const char *)v.ptr,
                       (long long)(sd_ctx_window(c).end / 1000));
    return sd_emit_str(c, out, (size_t)len);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* KV<k, [names]> in window w -> "<end s>:<names sorted, comma-separated>" */
static sd_status format_window(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes key, v;
    sd_iter it;
    bool has;
    char names[16][16];
    size_t n = 0;
    sd_status st = sd_ctx_grouped(c, &key, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has && n < 16) {
        sd_reader r = sd_reader_make(v);
        sd_bytes s;
        if (sd_read_bytes(&r, &s) != SD_OK || s.len >= sizeof(names[0])) {
            return sd_fail(c, "format: bad value");
        }
        memcpy(names[n], s.ptr, s.len);
        names[n++][s.len] = '\0';
    }
    if (st != SD_OK) {
        return st;
    }
    qsort(names, n, sizeof(names[0]), cmp_name);
    char out[128];
    int len = snprintf(out, sizeof(out), "%lld:", (long long)(sd_ctx_window(c).end / 1000));
    for (size_t i = 0; i < n; i++) {
        len += snprintf(out + len, sizeof(out) - (size_t)len, "%s%s", i ? "," : "", names[i]);
    }
    return sd_emit_str(c, out, (size_t)len);
}

/* The late-data lines written under dir (every *.jsonl, concatenated; caller frees). */
static char *read_late_lines(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *all = calloc(1, 1);
    size_t len = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 6, ".jsonl") != 0) {
            continue;
        }
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
            all = realloc(all, len + got + 1);
            memcpy(all + len, buf, got);
            len += got;
            all[len] = '\0';
        }
        fclose(f);
        unlink(path);
    }
    closedir(d);
    return all;
}

static void run_example(bool drop_late,
                        const char *const *want,
                        size_t n_want,
                        const char *const *want_late,
                        size_t n_late)
{
    sd_pipeline *p = sd_pipeline_create(drop_late ? "ydb-per-element" : "ydb-beam-rule");
    sd_teststream *ts = sd_teststream_create(p, "Events", sd_pcoder_string(p), NULL, 0);

    static const struct {
        const char *ev;
        sd_time t;
    } evs[] = { { "a:1", 40000 }, { "b:1", 42000 }, { "c:0", 50000 }, { "d:1", 40000 } };

    sd_time max_seen = SD_TIME_MIN;
    for (size_t i = 0; i < 4; i++) {
        sd_teststream_add_strings(ts, NULL, &evs[i].ev, &evs[i].t, 1);
        /* The source's watermark: 5 s behind the latest event so far (never back). */
        if (evs[i].t > max_seen) {
            max_seen = evs[i].t;
            sd_teststream_advance_watermark(ts, NULL, max_seen - 5000);
        }
    }
    sd_teststream_advance_watermark_to_infinity(ts);
    sd_pcoll *passed =
        sd_apply(p, "Filter", sd_teststream_output(ts, NULL), "t:filter", SD_BYTES_NULL, NULL);
    sd_windowfn hop = { .kind = SD_WINDOW_SLIDING,
                        .size_ms = 10000,
                        .period_ms = 5000,
                        .drop_late_elements = drop_late };
    sd_pcoll *win = sd_window_into(p, "Hop", passed, &hop);
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_string(p));
    sd_pcoll *keyed = sd_apply(p, "Key", win, "t:key_all", SD_BYTES_NULL, kvc);
    sd_pcoll *late = NULL;
    sd_pcoll *g = want_late != NULL ? sd_group_by_key_late(p, "Group", keyed, &late)
                                    : sd_group_by_key(p, "Group", keyed);
    sd_pcoll *out = sd_apply(p, "Format", g, "t:format", SD_BYTES_NULL, sd_pcoder_string(p));
    sd_assert_strings(p, "Check", out, want, n_want);
    if (late != NULL) {
        sd_pcoll *shown =
            sd_apply(p, "FormatLate", late, "t:format_late", SD_BYTES_NULL, sd_pcoder_string(p));
        sd_assert_strings(p, "CheckLate", shown, want_late, n_late);
    }
    /* Late data kept for inspection, as JSON lines per transform. */
    char dir[] = "/tmp/sundial-late-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *names[] = { "beam:option:sundial_late_data_dir:v1" };
    const char *values[] = { dir };
    sd_run_options opts = {
        .timeout_ms = 60000, .n_options = 1, .option_names = names, .option_values = values
    };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    /* d is dropped once either way: from [35 s, 45 s) by Beam's rule, or outright. */
    assert_int_equal(sd_run_result_counter(&res, SD_RUN_DROPPED_LATE), 1);
    char *lines = read_late_lines(dir);
    fprintf(stderr, "late data: %s", lines);
    assert_int_equal(rmdir(dir), 0);
    /* One line: d, why, where, and the watermark then. */
    assert_non_null(strstr(lines, want_late != NULL ? "\"routed\":true" : "\"routed\":false"));
    assert_non_null(strstr(lines, "\"timestamp_ms\":40000"));
    assert_non_null(strstr(lines, "\"watermark_ms\":45000"));
    assert_non_null(strstr(lines, drop_late ? "\"reason\":\"behind the watermark\""
                                            : "\"reason\":\"window expired\""));
    assert_non_null(
        strstr(lines, drop_late ? "\"transform\":\"Filter" : "\"transform\":\"Group\""));
    assert_non_null(strstr(lines, drop_late ? "\"element\":\"\\\"d:1\\\"\""
                                            : "\"window\":\"[1970-01-01T00:00:35.000Z, "));
    assert_null(strchr(strchr(lines, '\n') + 1, '\n')); /* exactly one line */
    free(lines);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

static void test_beam_rule(void **state)
{
    (void)state;
    /* Windows ending at 45, 50 and 55 s (c is filtered out: no window of its own). */
    const char *const want[] = { "45:a,b", "50:a,b,d" };
    run_example(false, want, 2, NULL, 0);
}

/* The same with a late-data output: d, late for the window ending at 45 s, comes out there
 * with that window, instead of being dropped. */
static void test_late_output(void **state)
{
    (void)state;
    const char *const want[] = { "45:a,b", "50:a,b,d" };
    const char *const late[] = { "late:d@45" };
    run_example(false, want, 2, late, 1);
}

static void test_per_element_policy(void **state)
{
    (void)state;
    const char *const want[] = { "45:a,b", "50:a,b" };
    run_example(true, want, 2, NULL, 0);
}

/*
 * Issue 33: a splittable source that emits a record behind its own watermark estimate, with
 * the hopping WindowInto fused into the source's stage (or behind a Reshuffle). One partition
 * replayed with a 5 s delay: a at 40 s, b at 42 s, c at 50 s, then e at 51 s and d at 40 s
 * (written after e: they appear together, after the watermark went to 45 s with c). Beam's
 * rule drops d from [35 s, 45 s) only and keeps it in [40 s, 50 s); the per-element policy
 * drops d whole, fused or not.
 */
static void run_source(bool drop_late, bool reshuffle, const char *const *want, size_t n_want)
{
    char dir[] = "/tmp/sundial-late-src-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/topic.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("40000 a\n42000 b\n50000 c\n51000 e\n40000 d\n", f);
    fclose(f);
    const char *files[1] = { path };
    sd_pipeline *p = sd_pipeline_create(drop_late ? "late-source-per-element" : "late-source");
    sd_partitioned_spec spec = {
        .n_partitions = 1, .files = files, .delay = "PT5S", .idle_timeout = "PT0S"
    };
    sd_pcoll *recs = sd_read_partitioned(p, "Topic", &spec, NULL);
    if (reshuffle) {
        recs = sd_reshuffle(p, "Reshuffle", recs);
    }
    sd_windowfn hop = { .kind = SD_WINDOW_SLIDING,
                        .size_ms = 10000,
                        .period_ms = 5000,
                        .drop_late_elements = drop_late };
    sd_pcoll *win = sd_window_into(p, "Hop", recs, &hop);
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_string(p));
    sd_pcoll *keyed = sd_apply(p, "Key", win, "t:key_all", SD_BYTES_NULL, kvc);
    sd_pcoll *g = sd_group_by_key(p, "Group", keyed);
    sd_pcoll *out = sd_apply(p, "Format", g, "t:format", SD_BYTES_NULL, sd_pcoder_string(p));
    sd_assert_strings(p, "Check", out, want, n_want);
    const char *names[] = { "beam:option:sundial_late_data_dir:v1" };
    const char *values[] = { dir };
    sd_run_options opts = {
        .timeout_ms = 60000, .n_options = 1, .option_names = names, .option_values = values
    };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    unlink(path);
    char *lines = read_late_lines(dir);
    fprintf(stderr, "late data: %s", lines);
    /* d is dropped from [35 s, 45 s) by Beam's rule, or whole: once when the policy meets it
     * before its WindowInto (behind the Reshuffle), once per window when the WindowInto is
     * fused with the source (the SDK hands it over exploded, one value per window). */
    uint64_t drops = drop_late && !reshuffle ? 2 : 1;
    assert_int_equal(sd_run_result_counter(&res, SD_RUN_DROPPED_LATE), drops);
    assert_int_equal(rmdir(dir), 0);
    assert_non_null(strstr(lines, "\"timestamp_ms\":40000"));
    assert_non_null(strstr(lines, "\"watermark_ms\":45000"));
    assert_non_null(strstr(lines, drop_late ? "\"reason\":\"behind the watermark\""
                                            : "\"reason\":\"window expired\""));
    const char *nl = strchr(lines, '\n'); /* one line per drop */
    for (uint64_t i = 1; i < drops; i++) {
        nl = strchr(nl + 1, '\n');
    }
    assert_null(strchr(nl + 1, '\n'));
    free(lines);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

static void test_source_beam_rule(void **state)
{
    (void)state;
    const char *const want[] = { "45:a,b", "50:a,b,d", "55:c,e", "60:c,e" };
    run_source(false, false, want, 4);
}

static void test_source_per_element_policy_fused(void **state)
{
    (void)state;
    const char *const want[] = { "45:a,b", "50:a,b", "55:c,e", "60:c,e" };
    run_source(true, false, want, 4);
}

static void test_source_per_element_policy_reshuffled(void **state)
{
    (void)state;
    const char *const want[] = { "45:a,b", "50:a,b", "55:c,e", "60:c,e" };
    run_source(true, true, want, 4);
}

/* A name the runner cannot find is an error: through the option, as any SDK would pass it. */
static void test_unknown_name_is_an_error(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("late-policy-unknown");
    const char *const xs[] = { "a:1" };
    sd_pcoll *in = sd_create_strings(p, "In", xs, 1);
    sd_apply(p, "Filter", in, "t:filter", SD_BYTES_NULL, NULL);
    const char *names[] = { "beam:option:sundial_drop_late_elements:v1" };
    const char *values[] = { "Filter, NoSuchStep" };
    sd_run_options opts = {
        .timeout_ms = 60000, .n_options = 1, .option_names = names, .option_values = values
    };
    sd_err err;
    sd_err_clear(&err);
    assert_int_not_equal(sd_pipeline_run(p, &opts, NULL, &err), SD_OK);
    assert_non_null(strstr(sd_err_msg(&err), "no transform named \"NoSuchStep\""));
    sd_pipeline_destroy(p);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn filter = { .process = filter_pass };
    static const sd_dofn key = { .process = key_all };
    static const sd_dofn format = { .process = format_window };
    static const sd_dofn format_l = { .process = format_late };
    if (sd_register_dofn("t:filter", &filter) != SD_OK ||
        sd_register_dofn("t:key_all", &key) != SD_OK ||
        sd_register_dofn("t:format", &format) != SD_OK ||
        sd_register_dofn("t:format_late", &format_l) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beam_rule),
        cmocka_unit_test(test_per_element_policy),
        cmocka_unit_test(test_late_output),
        cmocka_unit_test(test_source_beam_rule),
        cmocka_unit_test(test_source_per_element_policy_fused),
        cmocka_unit_test(test_source_per_element_policy_reshuffled),
        cmocka_unit_test(test_unknown_name_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
