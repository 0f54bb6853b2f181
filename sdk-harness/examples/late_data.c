/*
 * late_data: what stream processors call late data, the way they document it, on a scripted
 * stream (TestStream) — each example checks its own output with in-job assertions, so the
 * program exits 0 only if the runner produced exactly the documented results.
 *
 *   late_data [--endpoint HOST:PORT] [--record-schedule FILE]
 *
 * 1. YDB's hopping-window query: events (name, pass) at 40 s a/1, 42 s b/1, 50 s c/0 and
 *    40 s d/1; the watermark 5 s behind the latest event time; windows of 10 s every 5 s over
 *    the events with pass > 0, under YDB's per-element policy (an event behind the watermark
 *    when it arrives is late, even while its window is open: sd_windowfn.drop_late_elements).
 *    The window ending at 45 s is exactly ["a", "b"]; c is filtered out but still moved the
 *    watermark to 45 s, so d, arriving after that, is dropped (counted), and the window
 *    ending at 50 s is ["a", "b"] too.
 * 2. Spark's append mode: a word count over one-minute windows with the watermark five
 *    minutes behind the latest event. Each window is emitted once, complete, after the
 *    watermark passes its end; "late" (12:00:50) arrives after the watermark passed 12:01,
 *    so its window [12:00, 12:01) has closed and it is dropped and counted, while "w"
 *    (12:01:40) still makes it into [12:01, 12:02). Instead of dropping, the GroupByKey here
 *    routes late data to a second output (sd_group_by_key_late), where "late" shows up with
 *    its window.
 *
 * Each result is printed as EXAMPLE|WINDOW START-END (seconds)|VALUES, e.g.
 *
 *     ydb|35-45|a,b
 *     spark|43200-43260|x
 *     late|43200-43260|late
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sundial/sundial.h>

#define SEC    1000LL
#define MINUTE (60LL * SEC)
#define NOON   (12LL * 60LL * MINUTE)

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* "name:pass" -> name, when pass > 0 (YDB's WHERE pass > 0). */
static sd_status filter_pass(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes s;
    (void)state;
    if (sd_read_bytes(&r, &s) != SD_OK || s.len < 3 || s.ptr[s.len - 2] != ':') {
        return sd_fail(c, "filter: expected \"name:pass\"");
    }
    if (s.ptr[s.len - 1] == '0') {
        return SD_OK;
    }
    return sd_emit_str(c, (const char *)s.ptr, s.len - 2);
}

/* string -> KV<"all", string> */
static sd_status key_all(sd_ctx *c, void *state)
{
    sd_buf b;
    (void)state;
    sd_buf_init(&b, 0);
    sd_status st = sd_enc_str(&b, "all");
    if (st == SD_OK) {
        st = sd_buf_append_bytes(&b, sd_ctx_element(c));
    }
    if (st == SD_OK) {
        st = sd_emit(c, 0, sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    return st;
}

/* A window's group -> "<prefix>|<window>|<names sorted>"; the config is the prefix. */
static sd_status format_group(sd_ctx *c, void *state)
{
    sd_bytes key, v;
    sd_iter it;
    bool has;
    char names[32][32];
    size_t n = 0;
    (void)state;
    sd_status st = sd_ctx_grouped(c, &key, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has && n < 32) {
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
    qsort(names, n, sizeof(names[0]), cmp_str);
    sd_window w = sd_ctx_window(c);
    sd_bytes prefix = sd_ctx_config(c);
    char out[512];
    int len =
        snprintf(out, sizeof(out), "%.*s|%lld-%lld|", (int)prefix.len, (const char *)prefix.ptr,
                 (long long)(w.start / SEC), (long long)(w.end / SEC));
    for (size_t i = 0; i < n && len < (int)sizeof(out); i++) {
        len += snprintf(out + len, sizeof(out) - (size_t)len, "%s%s", i ? "," : "", names[i]);
    }
    if (len >= (int)sizeof(out)) {
        return sd_fail(c, "format: too many names");
    }
    printf("%s\n", out);
    fflush(stdout);
    return sd_emit_str(c, out, (size_t)len);
}

/* A late KV<"all", word> -> "late|<window>|<word>" */
static sd_status format_late(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes k, v;
    (void)state;
    if (sd_read_bytes(&r, &k) != SD_OK || sd_read_bytes(&r, &v) != SD_OK) {
        return sd_fail(c, "late: not a KV of strings");
    }
    sd_window w = sd_ctx_window(c);
    char out[128];
    int len = snprintf(out, sizeof(out), "late|%lld-%lld|%.*s", (long long)(w.start / SEC),
                       (long long)(w.end / SEC), (int)v.len, (const char *)v.ptr);
    printf("%s\n", out);
    fflush(stdout);
    return sd_emit_str(c, out, (size_t)len);
}

/* A TestStream of strings whose watermark trails the latest event time by delay_ms. */
static sd_pcoll *events(sd_pipeline *p,
                        const char *name,
                        const char *const *evs,
                        const sd_time *times,
                        size_t n,
                        int64_t delay_ms)
{
    sd_teststream *ts = sd_teststream_create(p, name, sd_pcoder_string(p), NULL, 0);
    sd_time latest = SD_TIME_MIN;
    for (size_t i = 0; i < n; i++) {
        sd_teststream_add_strings(ts, NULL, &evs[i], &times[i], 1);
        if (times[i] > latest) {
            latest = times[i];
            sd_teststream_advance_watermark(ts, NULL, latest - delay_ms);
        }
    }
    sd_teststream_advance_watermark_to_infinity(ts);
    return sd_teststream_output(ts, NULL);
}

static sd_pcoll *grouped(sd_pipeline *p, const char *name, sd_pcoll *in, sd_pcoll **late)
{
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_string(p));
    char key_name[64];
    snprintf(key_name, sizeof(key_name), "%sKey", name);
    sd_pcoll *keyed = sd_apply(p, key_name, in, "late:key_all", SD_BYTES_NULL, kvc);
    return late != NULL ? sd_group_by_key_late(p, name, keyed, late)
                        : sd_group_by_key(p, name, keyed);
}

static void ydb_hopping(sd_pipeline *p)
{
    const char *const evs[] = { "a:1", "b:1", "c:0", "d:1" };
    const sd_time times[] = { 40 * SEC, 42 * SEC, 50 * SEC, 40 * SEC };
    sd_pcoll *in = events(p, "YdbEvents", evs, times, 4, 5 * SEC);
    sd_pcoll *passed = sd_apply(p, "WherePass", in, "late:filter", SD_BYTES_NULL, NULL);
    sd_windowfn hop = { .kind = SD_WINDOW_SLIDING,
                        .size_ms = 10 * SEC,
                        .period_ms = 5 * SEC,
                        .drop_late_elements = true };
    sd_pcoll *win = sd_window_into(p, "Hop", passed, &hop);
    sd_pcoll *g = grouped(p, "YdbGroup", win, NULL);
    sd_pcoll *out =
        sd_apply(p, "YdbFormat", g, "late:format", sd_bytes_str("ydb"), sd_pcoder_string(p));
    const char *const want[] = { "ydb|35-45|a,b", "ydb|40-50|a,b" };
    sd_assert_strings(p, "YdbCheck", out, want, 2);
}

static void spark_append(sd_pipeline *p)
{
    const char *const evs[] = { "x", "y", "z", "late", "w" };
    const sd_time times[] = { NOON + 30 * SEC, NOON + 70 * SEC, NOON + 6 * MINUTE, NOON + 50 * SEC,
                              NOON + 100 * SEC };
    sd_pcoll *in = events(p, "SparkEvents", evs, times, 5, 5 * MINUTE);
    sd_windowfn minute = { .kind = SD_WINDOW_FIXED, .size_ms = MINUTE };
    sd_pcoll *win = sd_window_into(p, "PerMinute", in, &minute);
    sd_pcoll *late = NULL;
    sd_pcoll *g = grouped(p, "SparkGroup", win, &late);
    sd_pcoll *out =
        sd_apply(p, "SparkFormat", g, "late:format", sd_bytes_str("spark"), sd_pcoder_string(p));
    const char *const want[] = { "spark|43200-43260|x", "spark|43260-43320|w,y",
                                 "spark|43560-43620|z" };
    sd_assert_strings(p, "SparkCheck", out, want, 3);
    sd_pcoll *shown =
        sd_apply(p, "SparkLate", late, "late:format_late", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want_late[] = { "late|43200-43260|late" };
    sd_assert_strings(p, "SparkLateCheck", shown, want_late, 1);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn filter = { .process = filter_pass };
    static const sd_dofn key = { .process = key_all };
    static const sd_dofn format = { .process = format_group };
    static const sd_dofn late = { .process = format_late };
    if (sd_register_dofn("late:filter", &filter) != SD_OK ||
        sd_register_dofn("late:key_all", &key) != SD_OK ||
        sd_register_dofn("late:format", &format) != SD_OK ||
        sd_register_dofn("late:format_late", &late) != SD_OK) {
        fprintf(stderr, "late_data: cannot register the DoFns\n");
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const char *endpoint = NULL, *record = NULL;
    /* getopt_long: a value follows its flag or an '=' (--endpoint=HOST:PORT); it names a bad
     * flag, and the usage follows. */
    static const struct option flags[] = { { "endpoint", required_argument, NULL, 'e' },
                                           { "record-schedule", required_argument, NULL, 'r' },
                                           { "help", no_argument, NULL, 'h' },
                                           { NULL, 0, NULL, 0 } };
    const char *usage = "usage: late_data [--endpoint HOST:PORT] [--record-schedule FILE]\n";
    int c;
    while ((c = getopt_long(argc, argv, "h", flags, NULL)) != -1) {
        if (c == 'e') {
            endpoint = optarg;
        } else if (c == 'r') {
            record = optarg; /* the run's schedule, to replay or compare */
        } else {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "late_data: unexpected argument \"%s\"\n%s", argv[optind], usage);
        return 2;
    }
    sd_pipeline *p = sd_pipeline_create("late-data");
    ydb_hopping(p);
    spark_append(p);
    sd_run_options opts = { .endpoint = endpoint, .timeout_ms = 60000, .record_schedule = record };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    int rc = 0;
    if (st != SD_OK) {
        fprintf(stderr, "late_data: %s\n", sd_err_msg(&err));
        rc = 1;
    } else {
        /* d (per-element policy) and "late" (routed: still counted). */
        int64_t dropped = sd_run_result_counter(&res, SD_RUN_DROPPED_LATE);
        printf("late elements counted: %lld\n", (long long)dropped);
        rc = dropped == 2 ? 0 : 1;
        if (rc != 0) {
            fprintf(stderr, "late_data: expected 2 late elements, the runner counted %lld\n",
                    (long long)dropped);
        }
    }
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    return rc;
}
