/*
 * Integration tests of partitioned sources (sd_read_partitioned) on the embedded Sundial
 * runner: two partitions replayed on the synthetic clock — the exact records, the exact
 * watermark history (p1 goes idle, the watermark follows p0 alone, p1 comes back and is
 * included again), windows closing on that watermark with an out-of-order record dropped as
 * late (and routed to the late output); a calendar-month delay over an hour-long quiet
 * stretch (Flink's rt - INTERVAL '1' MONTH); tailing growing files on the wall clock; three
 * generated partitions (exact history and run-result watermarks, the same when the runner
 * checkpoints a slow step, a generator's error); records without a write time, in files and
 * from a generator; and
 * the errors (bad durations at construction, a missing file and a malformed line at run time).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sundial/sundial.h"

#define SEC 1000LL

static char dir[64];

/* ================================================================ helpers */

static void write_file(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static sd_status key_all(sd_ctx *c, void *state)
{
    sd_buf b;
    (void)state;
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

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* KV<k, Iterable<string>> -> "<start s>-<end s>:v1,v2" (values sorted). */
static sd_status fmt_group(sd_ctx *c, void *state)
{
    sd_bytes key, v;
    sd_iter it;
    bool has;
    char vals[16][16];
    size_t n = 0;
    (void)state;
    sd_status st = sd_ctx_grouped(c, &key, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has && n < 16) {
        sd_reader r = sd_reader_make(v);
        sd_bytes s;
        if (sd_read_bytes(&r, &s) != SD_OK || s.len >= sizeof(vals[0])) {
            return sd_fail(c, "fmt: bad value");
        }
        memcpy(vals[n], s.ptr, s.len);
        vals[n++][s.len] = '\0';
    }
    if (st != SD_OK) {
        return st;
    }
    qsort(vals, n, sizeof(vals[0]), cmp_str);
    sd_window w = sd_ctx_window(c);
    char out[256];
    int len = snprintf(out, sizeof(out), "%lld-%lld:", (long long)(w.start / SEC),
                       (long long)(w.end / SEC));
    for (size_t i = 0; i < n; i++) {
        len += snprintf(out + len, sizeof(out) - (size_t)len, "%s%s", i ? "," : "", vals[i]);
    }
    return sd_emit_str(c, out, (size_t)len);
}

/* A late KV<k, v> -> "late <start s>-<end s>:v" */
static sd_status fmt_late(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes k, v;
    (void)state;
    if (sd_read_bytes(&r, &k) != SD_OK || sd_read_bytes(&r, &v) != SD_OK) {
        return sd_fail(c, "late: not a KV of strings");
    }
    sd_window w = sd_ctx_window(c);
    char out[128];
    int len = snprintf(out, sizeof(out), "late %lld-%lld:%.*s", (long long)(w.start / SEC),
                       (long long)(w.end / SEC), (int)v.len, (const char *)v.ptr);
    return sd_emit_str(c, out, (size_t)len);
}

static sd_status run(sd_pipeline *p, bool wall, sd_run_result *res, sd_err *err)
{
    sd_run_options opts = { .timeout_ms = 60000, .wall_clock = wall };
    sd_err_clear(err);
    return sd_pipeline_run(p, &opts, res, err);
}

/* The history's T+ number, for sorting (a collection has no order). */
static long long history_t(const sd_elem *e)
{
    return strtoll(e->value.str + 2, NULL, 10);
}

static int cmp_history(const void *a, const void *b)
{
    long long x = history_t(*(const sd_elem *const *)a), y = history_t(*(const sd_elem *const *)b);
    return x < y ? -1 : x > y;
}

/* The collection's strings in T+ order must be exactly want. */
static void check_history(sd_collection *col, const char *const *want, size_t n)
{
    long len = sd_collection_len(col);
    const sd_elem *got[64];
    assert_true(len >= 0 && len <= 64);
    for (long i = 0; i < len; i++) {
        got[i] = sd_collection_at(col, (size_t)i);
    }
    qsort(got, (size_t)len, sizeof(got[0]), cmp_history);
    for (long i = 0; i < len; i++) {
        fprintf(stderr, "  history: %s\n", got[i]->value.str);
    }
    assert_int_equal(len, (long)n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(got[i]->value.str, want[i]);
    }
}

/* ================================================================ tests */

/*
 * p0 writes a0..a10 at 0 s..10 s; p1 writes b0, b1 at 0 s and 1 s, falls silent, then b9 at
 * 9 s, "late" (an out-of-order record written for 2.5 s) and b12 at 12 s. Delay 2 s, idle
 * timeout 5 s and granularity 1 s (the defaults but the delay).
 */
static void test_replay_idle_partition(void **state)
{
    (void)state;
    char p0[128], p1[128];
    write_file("p0.txt",
               "0 a0\n1000 a1\n2000 a2\n3000 a3\n4000 a4\n5000 a5\n6000 a6\n7000 a7\n8000 a8\n"
               "9000 a9\n10000 a10\n",
               p0, sizeof(p0));
    write_file("p1.txt", "0 b0\n1000 b1\n9000 b9\n2500 late\n12000 b12", p1, sizeof(p1));
    const char *files[2] = { p0, p1 };
    sd_pipeline *p = sd_pipeline_create("partitioned-replay");
    sd_partitioned_spec spec = { .n_partitions = 2, .files = files, .delay = "PT2S" };
    sd_pcoll *hist = NULL;
    sd_pcoll *recs = sd_read_partitioned(p, "Topic", &spec, &hist);
    sd_collection *all = sd_collect(p, "AllRecords", recs);
    sd_collection *history = sd_collect(p, "History", hist);
    sd_windowfn fixed = { .kind = SD_WINDOW_FIXED, .size_ms = 2 * SEC };
    sd_pcoll *w = sd_window_into(p, "Window", recs, &fixed);
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_string(p));
    sd_pcoll *keyed = sd_apply(p, "Key", w, "t:key_all", SD_BYTES_NULL, kvc);
    sd_pcoll *late = NULL;
    sd_pcoll *g = sd_group_by_key_late(p, "Group", keyed, &late);
    sd_pcoll *f = sd_apply(p, "Format", g, "t:fmt_group", SD_BYTES_NULL, sd_pcoder_string(p));
    sd_pcoll *lf =
        sd_apply(p, "FormatLate", late, "t:fmt_late", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want_windows[] = { "0-2:a0,a1,b0,b1", "2-4:a2,a3", "4-6:a4,a5", "6-8:a6,a7",
                                         "8-10:a8,a9,b9",   "10-12:a10", "12-14:b12" };
    sd_assert_strings(p, "Windows", f, want_windows, 7);
    const char *const want_late[] = { "late 2-4:late" };
    sd_assert_strings(p, "Late", lf, want_late, 1);
    sd_run_result res;
    sd_err err;
    int64_t t0 = sd_mono_now_ms();
    sd_status st = run(p, false, &res, &err);
    if (st != SD_OK) {
        fail_msg("run: %s", sd_err_msg(&err));
    }
    fprintf(stderr, "replay run: %lld ms\n", (long long)(sd_mono_now_ms() - t0));
    assert_int_equal(sd_run_result_counter(&res, SD_RUN_DROPPED_LATE), 1);
    assert_int_equal(sd_collection_len(all), 16);
    sd_collection_sort(all);
    const char *const want_recs[] = { "a0", "a1", "a10", "a2", "a3", "a4",  "a5", "a6",
                                      "a7", "a8", "a9",  "b0", "b1", "b12", "b9", "late" };
    for (size_t i = 0; i < 16; i++) {
        assert_string_equal(sd_collection_at(all, i)->value.str, want_recs[i]);
    }
    /* Step by step (one step per second of the replay clock; a line when something moved):
     * p1 is idle at 6 s (5 s after its last record), the watermark then follows p0 alone;
     * b9 makes p1 active again at 9 s and the minimum includes it; "late" does not move p1
     * (its candidate 0.5 s is behind p1's 7 s); at 11 s nothing changes (no line). */
    const char *const want_hist[] = {
        "T+0 source=-2000 p0=-2000 p1=-2000",       "T+1000 source=-1000 p0=-1000 p1=-1000",
        "T+2000 source=-1000 p0=0 p1=-1000",        "T+3000 source=-1000 p0=1000 p1=-1000",
        "T+4000 source=-1000 p0=2000 p1=-1000",     "T+5000 source=-1000 p0=3000 p1=-1000",
        "T+6000 source=4000 p0=4000 p1=-1000 idle", "T+7000 source=5000 p0=5000 p1=-1000 idle",
        "T+8000 source=6000 p0=6000 p1=-1000 idle", "T+9000 source=7000 p0=7000 p1=7000",
        "T+10000 source=7000 p0=8000 p1=7000",      "T+12000 source=8000 p0=8000 p1=10000",
    };
    check_history(history, want_hist, sizeof(want_hist) / sizeof(want_hist[0]));
    /* The same last watermarks in the run result (the runner's metrics), and the stages'. */
    assert_int_equal(sd_run_result_partition_watermark(&res, "Topic", "p0"), 8000);
    assert_int_equal(sd_run_result_partition_watermark(&res, "Topic", "p1"), 10000);
    assert_int_equal(sd_run_result_partition_watermark(&res, NULL, "source"), 8000);
    assert_int_equal(sd_run_result_partition_watermark(&res, "Topic", "p2"), SD_TIME_MIN);
    assert_int_equal(res.n_partition_watermarks, 3);
    assert_true(res.n_stage_watermarks >= 2);
    for (size_t i = 0; i < res.n_stage_watermarks; i++) {
        fprintf(stderr, "  stage %s (%s): in %lld out %lld\n", res.stage_watermarks[i].id,
                res.stage_watermarks[i].name, (long long)res.stage_watermarks[i].input,
                (long long)res.stage_watermarks[i].output);
        /* Everything ran to the end: every watermark is at the end of time. */
        assert_int_equal(res.stage_watermarks[i].input, SD_TIME_MAX);
        assert_int_equal(res.stage_watermarks[i].output, SD_TIME_MAX);
    }
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

/*
 * Flink's WATERMARK FOR rt AS rt - INTERVAL '1' MONTH on one partition, granularity 1 s:
 * 2024-03-30 23:00 and, an hour later, 2024-03-31 00:00 (leap year), then 2023's. Each
 * record's candidate is taken first: Mar 30 23:00 -> Feb 29 23:00, Mar 31 00:00 -> Feb 29
 * 00:00, so the watermark stays at Feb 29 23:00 (the first candidate wins); the same in 2023
 * with Feb 28. The hour-long quiet stretch between records is skipped, not stepped through.
 */
static void test_replay_month_delay(void **state)
{
    (void)state;
    char p0[128];
    write_file("flink.txt",
               "1680217200000 y2023a\n1680220800000 y2023b\n1711839600000 y2024a\n"
               "1711843200000 y2024b\n",
               p0, sizeof(p0));
    const char *files[1] = { p0 };
    sd_pipeline *p = sd_pipeline_create("partitioned-month");
    sd_partitioned_spec spec = {
        .n_partitions = 1, .files = files, .delay = "P1M", .idle_timeout = "PT0S"
    };
    sd_pcoll *hist = NULL;
    sd_pcoll *recs = sd_read_partitioned(p, "Flink", &spec, &hist);
    sd_assert_count(p, "Records", recs, 4);
    sd_collection *history = sd_collect(p, "History", hist);
    sd_run_result res;
    sd_err err;
    sd_status st = run(p, false, &res, &err);
    if (st != SD_OK) {
        fail_msg("run: %s", sd_err_msg(&err));
    }
    /* 2023-03-30T23:00Z = 1680217200000 is the replay clock's start. */
    const char *const want_hist[] = {
        "T+0 source=1677625200000 p0=1677625200000",
        "T+31622400000 source=1709247600000 p0=1709247600000",
    };
    check_history(history, want_hist, 2);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

typedef struct appender {
    char path[128];
} appender;

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void *append_later(void *arg)
{
    appender *a = arg;
    sleep_ms(1200);
    FILE *f = fopen(a->path, "a");
    if (f != NULL) {
        fprintf(f, "%lld b-late", (long long)sd_wall_now_ms());
        fflush(f);
        sleep_ms(300); /* the line is incomplete for a while: not read yet */
        fputs("r\n", f);
        fclose(f);
    }
    return NULL;
}

/* Wall clock: p1's file grows while the source tails it; p1 goes idle (0.5 s) meanwhile. */
static void test_tail_wall_clock(void **state)
{
    (void)state;
    char p0[128];
    appender a;
    char text[128];
    long long now = (long long)sd_wall_now_ms();
    snprintf(text, sizeof(text), "%lld a0\n%lld a1\n", now, now + 1);
    write_file("tail0.txt", text, p0, sizeof(p0));
    snprintf(text, sizeof(text), "%lld b0\n", now);
    write_file("tail1.txt", text, a.path, sizeof(a.path));
    const char *files[2] = { p0, a.path };
    sd_pipeline *p = sd_pipeline_create("partitioned-tail");
    sd_partitioned_spec spec = { .n_partitions = 2,
                                 .files = files,
                                 .idle_timeout = "PT0.5S",
                                 .granularity = "PT0.1S",
                                 .tail = true,
                                 .run_for = "PT2.5S" };
    sd_pcoll *hist = NULL;
    sd_pcoll *recs = sd_read_partitioned(p, "Tail", &spec, &hist);
    const char *const want[] = { "a0", "a1", "b0", "b-later" };
    sd_assert_strings(p, "Records", recs, want, 4);
    sd_collection *history = sd_collect(p, "History", hist);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, append_later, &a), 0);
    sd_run_result res;
    sd_err err;
    int64_t t0 = sd_mono_now_ms();
    sd_status st = run(p, true, &res, &err);
    pthread_join(th, NULL);
    if (st != SD_OK) {
        fail_msg("run: %s", sd_err_msg(&err));
    }
    int64_t took = sd_mono_now_ms() - t0;
    fprintf(stderr, "tail run: %lld ms\n", (long long)took);
    assert_true(took >= 2500);
    /* Both partitions went idle (no data for 0.5 s), p1 came back with b-later. */
    long n = sd_collection_len(history);
    bool p1_idle = false, p1_back = false;
    for (long i = 0; i < n; i++) {
        const char *h = sd_collection_at(history, (size_t)i)->value.str;
        if (strstr(h, "p1=") != NULL && strstr(strstr(h, "p1="), " idle") != NULL) {
            p1_idle = true;
        }
        if (strstr(h, "p1=-inf") == NULL && strstr(h, "p1=") != NULL &&
            strstr(strstr(h, "p1="), " idle") == NULL &&
            history_t(sd_collection_at(history, (size_t)i)) >= 1000) {
            p1_back = true;
        }
    }
    assert_true(p1_idle);
    assert_true(p1_back);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

/* Partition i's record k (k < 4) is "g<i>-<k>" written at k * (i + 1) s; config "fail" makes
 * partition 1's record 2 an error. */
static sd_status gen(size_t partition,
                     int64_t index,
                     sd_bytes config,
                     sd_buf *payload,
                     sd_time *write_time,
                     bool *end,
                     sd_err *err)
{
    if (index >= 4) {
        *end = true;
        return SD_OK;
    }
    if (config.len == 4 && memcmp(config.ptr, "fail", 4) == 0 && partition == 1 && index == 2) {
        return sd_err_set(err, SD_EINVAL, "boom");
    }
    if (config.len == 4 && memcmp(config.ptr, "slow", 4) == 0 && partition == 0 && index == 2) {
        sleep_ms(1200); /* the runner checkpoints the step meanwhile */
    }
    *write_time = index * (int64_t)(partition + 1) * SEC;
    return sd_buf_printf(payload, "g%zu-%lld", partition, (long long)index);
}

/* Three generated partitions: exact records, history and the run result's watermarks. At 9 s
 * p0 (last record at 3 s) is idle, so the source's watermark is min(p1 6 s, p2 9 s). */
static void check_generated(bool slow)
{
    sd_pipeline *p = sd_pipeline_create("partitioned-gen");
    sd_partitioned_spec spec = { .n_partitions = 3, .generator = "t:gen" };
    if (slow) {
        spec.generator_config = sd_bytes_str("slow");
    }
    sd_pcoll *hist = NULL;
    sd_pcoll *recs = sd_read_partitioned(p, "Gen", &spec, &hist);
    const char *const want[] = { "g0-0", "g0-1", "g0-2", "g0-3", "g1-0", "g1-1",
                                 "g1-2", "g1-3", "g2-0", "g2-1", "g2-2", "g2-3" };
    sd_assert_strings(p, "Records", recs, want, 12);
    sd_collection *history = sd_collect(p, "History", hist);
    sd_run_result res;
    sd_err err;
    const char *names[1] = { "beam:option:sundial_sdf_checkpoint_ms:v1" };
    const char *values[1] = { "200" };
    sd_run_options opts = { .timeout_ms = 60000,
                            .n_options = slow ? 1 : 0,
                            .option_names = names,
                            .option_values = values };
    sd_err_clear(&err);
    if (sd_pipeline_run(p, &opts, &res, &err) != SD_OK) {
        fail_msg("run: %s", sd_err_msg(&err));
    }
    const char *const want_hist[] = {
        "T+0 source=0 p0=0 p1=0 p2=0",
        "T+1000 source=0 p0=1000 p1=0 p2=0",
        "T+2000 source=0 p0=2000 p1=2000 p2=0",
        "T+3000 source=2000 p0=3000 p1=2000 p2=3000",
        "T+4000 source=3000 p0=3000 p1=4000 p2=3000",
        "T+6000 source=3000 p0=3000 p1=6000 p2=6000",
        "T+8000 source=6000 p0=3000 idle p1=6000 p2=6000",
        "T+9000 source=6000 p0=3000 idle p1=6000 p2=9000",
    };
    check_history(history, want_hist, sizeof(want_hist) / sizeof(want_hist[0]));
    assert_int_equal(sd_run_result_partition_watermark(&res, "Gen", "p0"), 3000);
    assert_int_equal(sd_run_result_partition_watermark(&res, "Gen", "p1"), 6000);
    assert_int_equal(sd_run_result_partition_watermark(&res, "Gen", "p2"), 9000);
    assert_int_equal(sd_run_result_partition_watermark(&res, "Gen", "source"), 6000);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

/* The same with a step that takes 1.2 s while the runner checkpoints SDF bundles after
 * 200 ms: the read goes on at the runner's residual, with the same exact history. */
static void test_generator(void **state)
{
    (void)state;
    check_generated(false);
    int64_t t0 = sd_mono_now_ms();
    check_generated(true);
    assert_true(sd_mono_now_ms() - t0 >= 1200);
    sd_partitioned_spec spec = { .n_partitions = 3, .generator = "t:gen" };
    sd_err err;
    sd_pipeline *p = sd_pipeline_create("partitioned-gen-fail");
    spec.generator_config = sd_bytes_str("fail");
    sd_read_partitioned(p, "Gen", &spec, NULL);
    assert_int_equal(run(p, false, NULL, &err), SD_ESTATE);
    if (strstr(sd_err_msg(&err), "generator t:gen, partition 1, record 2: boom") == NULL) {
        fail_msg("message: %s", sd_err_msg(&err));
    }
    sd_pipeline_destroy(p);
}

/* A string record -> "payload@ts" ("min" for the minimum timestamp). */
static sd_status stamp(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes v;
    (void)state;
    if (sd_read_bytes(&r, &v) != SD_OK) {
        return sd_fail(c, "stamp: not a string");
    }
    sd_time ts = sd_ctx_timestamp(c);
    char out[128];
    int len = ts == SD_TIME_MIN
                  ? snprintf(out, sizeof(out), "%.*s@min", (int)v.len, (const char *)v.ptr)
                  : snprintf(out, sizeof(out), "%.*s@%lld", (int)v.len, (const char *)v.ptr,
                             (long long)ts);
    return sd_emit_str(c, out, (size_t)len);
}

/* Partition 0: 1000 g0, 3000 g1, n0 without a write time; partition 1: n1 without a write
 * time, 1000 g2, 3000 g3. */
static sd_status gen_untimed(size_t partition,
                             int64_t index,
                             sd_bytes config,
                             sd_buf *payload,
                             sd_time *write_time,
                             bool *end,
                             sd_err *err)
{
    (void)config;
    (void)err;
    if (index > 2) {
        *end = true;
        return SD_OK;
    }
    int64_t timed = partition == 0 ? index : index - 1; /* 0, 1: a record with a time */
    if (timed < 0 || timed > 1) {
        *write_time = SD_NO_WRITE_TIME;
        return sd_buf_printf(payload, "n%zu", partition);
    }
    *write_time = timed == 0 ? 1000 : 3000;
    return sd_buf_printf(payload, "g%zu", 2 * partition + (size_t)timed);
}

/*
 * Records without a write time (issue 33; Flink's sources take rows whose rowtime is NULL):
 * in files (an empty write time or NULL) and from a generator (SD_NO_WRITE_TIME) they come out
 * with the minimum timestamp right after the record before them, take no part in the
 * watermarks (the exact history is the one their timed records alone give; the replay clock
 * starts at the first write time there is), and a windowed GroupByKey, whose watermark has
 * moved by then, finds them late (routed to its late output, counted). One that comes before
 * any watermark (the generator's n1, partition 1's first record) is on time in the window
 * that holds the minimum timestamp, as any Beam element with that timestamp would be.
 */
static void check_untimed(bool generated)
{
    char p0[128], p1[128];
    const char *files[2] = { p0, p1 };
    sd_pipeline *p = sd_pipeline_create("partitioned-untimed");
    sd_partitioned_spec spec = { .n_partitions = 2, .idle_timeout = "PT0S" };
    if (generated) {
        spec.generator = "t:gen_untimed";
    } else {
        write_file("u0.txt", "1000 a\n3000 b\n c\nNULL d\n", p0, sizeof(p0));
        write_file("u1.txt", "1000 x\n3000 y\nNULL z\n", p1, sizeof(p1));
        spec.files = files;
    }
    sd_pcoll *hist = NULL;
    sd_pcoll *recs = sd_read_partitioned(p, "Topic", &spec, &hist);
    sd_pcoll *stamped = sd_apply(p, "Stamp", recs, "t:stamp", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want_files[] = { "a@1000", "b@3000", "c@min", "d@min",
                                       "x@1000", "y@3000", "z@min" };
    const char *const want_gen[] = {
        "g0@1000", "g1@3000", "g2@1000", "g3@3000", "n0@min", "n1@min"
    };
    sd_assert_strings(p, "Stamped", stamped, generated ? want_gen : want_files, generated ? 6 : 7);
    sd_windowfn fixed = { .kind = SD_WINDOW_FIXED, .size_ms = 2 * SEC };
    sd_pcoll *w = sd_window_into(p, "Window", recs, &fixed);
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_string(p));
    sd_pcoll *keyed = sd_apply(p, "Key", w, "t:key_all", SD_BYTES_NULL, kvc);
    sd_pcoll *late = NULL;
    sd_pcoll *g = sd_group_by_key_late(p, "Group", keyed, &late);
    sd_pcoll *f = sd_apply(p, "Format", g, "t:fmt_group", SD_BYTES_NULL, sd_pcoder_string(p));
    const char *const want_windows_files[] = { "0-2:a,x", "2-4:b,y" };
    const char *const want_windows_gen[] = { "0-2:g0,g2", "2-4:g1,g3",
                                             "-9223372036856--9223372036854:n1" };
    sd_assert_strings(p, "Windows", f, generated ? want_windows_gen : want_windows_files,
                      generated ? 3 : 2);
    sd_assert_count(p, "Late", late, generated ? 1 : 3);
    sd_collection *history = sd_collect(p, "History", hist);
    sd_run_result res;
    sd_err err;
    sd_status st = run(p, false, &res, &err);
    if (st != SD_OK) {
        fail_msg("run: %s", sd_err_msg(&err));
    }
    const char *const want_hist[] = {
        "T+0 source=1000 p0=1000 p1=1000",
        "T+2000 source=3000 p0=3000 p1=3000",
    };
    check_history(history, want_hist, 2);
    assert_int_equal(sd_run_result_counter(&res, SD_RUN_DROPPED_LATE), generated ? 1 : 3);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

static void test_untimed_records(void **state)
{
    (void)state;
    check_untimed(false);
    check_untimed(true);
}

static void expect_construction_error(sd_partitioned_spec spec, const char *words)
{
    sd_pipeline *p = sd_pipeline_create("partitioned-bad");
    assert_null(sd_read_partitioned(p, "Bad", &spec, NULL));
    const sd_err *e = sd_pipeline_error(p);
    assert_non_null(e);
    if (strstr(sd_err_msg(e), words) == NULL) {
        fail_msg("message \"%s\" lacks \"%s\"", sd_err_msg(e), words);
    }
    sd_pipeline_destroy(p);
}

static void expect_run_error(const char *file, const char *words)
{
    const char *files[1] = { file };
    sd_pipeline *p = sd_pipeline_create("partitioned-bad-run");
    sd_partitioned_spec spec = { .n_partitions = 1, .files = files };
    sd_read_partitioned(p, "Src", &spec, NULL);
    sd_err err;
    assert_int_equal(run(p, false, NULL, &err), SD_ESTATE);
    if (strstr(sd_err_msg(&err), words) == NULL) {
        fail_msg("message \"%s\" lacks \"%s\"", sd_err_msg(&err), words);
    }
    sd_pipeline_destroy(p);
}

static void test_errors(void **state)
{
    (void)state;
    const char *files[1] = { "x" };
    sd_partitioned_spec s = { .n_partitions = 1, .files = files, .delay = "5s" };
    expect_construction_error(s, "ReadPartitioned \"Bad\": duration \"5s\": expected \"P\"");
    s.delay = "PT-5S";
    expect_construction_error(s, "without a sign (durations are never negative)");
    s.delay = NULL;
    s.granularity = "PT0S";
    expect_construction_error(s, "ReadPartitioned \"Bad\": the granularity must be more than 0");
    s.granularity = NULL;
    s.idle_timeout = "P1M";
    expect_construction_error(s, "need a fixed length (no years or months)");
    s.idle_timeout = NULL;
    s.n_partitions = 0;
    expect_construction_error(s, "expected 1 to 256 partitions");
    const char *nofile[2] = { "x", "" };
    sd_partitioned_spec s2 = { .n_partitions = 2, .files = nofile };
    expect_construction_error(s2, "partition 1 has no file name");
    sd_partitioned_spec s3 = { .n_partitions = 1, .generator = "t:nope" };
    expect_construction_error(s3, "no partition generator \"t:nope\" is registered");
    s3.files = files;
    s3.generator = "t:gen";
    expect_construction_error(s3, "not both");

    char missing[128], bad[128];
    snprintf(missing, sizeof(missing), "%s/does-not-exist.txt", dir);
    expect_run_error(missing, "does-not-exist.txt: No such file");
    write_file("bad.txt", "1000 ok\nnot-a-time x\n", bad, sizeof(bad));
    expect_run_error(bad, "bad.txt line 2: expected \"WRITE_TIME PAYLOAD\"");
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn key = { .process = key_all };
    static const sd_dofn fmt = { .process = fmt_group };
    static const sd_dofn late = { .process = fmt_late };
    static const sd_dofn stamper = { .process = stamp };
    if (sd_register_dofn("t:key_all", &key) != SD_OK ||
        sd_register_dofn("t:fmt_group", &fmt) != SD_OK ||
        sd_register_dofn("t:fmt_late", &late) != SD_OK ||
        sd_register_dofn("t:stamp", &stamper) != SD_OK ||
        sd_register_partition_gen("t:gen_untimed", gen_untimed) != SD_OK ||
        sd_register_partition_gen("t:gen", gen) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    snprintf(dir, sizeof(dir), "partitioned-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_idle_partition), cmocka_unit_test(test_replay_month_delay),
        cmocka_unit_test(test_tail_wall_clock),       cmocka_unit_test(test_generator),
        cmocka_unit_test(test_untimed_records),       cmocka_unit_test(test_errors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
    }
    return rc;
}
