/*
 * watermarks: three stream processors' documented watermark and timeout rules, each run on
 * the embedded runner's synthetic clock and checked against its documented output below (the
 * program prints what it got and exits 0 only when every line matches).
 *
 *   watermarks [--endpoint HOST:PORT] [--process] [--no-processing-time] [--dir DIR]
 *              [--record-schedule FILE]
 *   watermarks --tail MS [--endpoint HOST:PORT] [--dir DIR]
 *
 * (a flag's value follows it or an '=': --tail 3000 or --tail=3000)
 *
 * The partition files are written under DIR/watermarks-data (default: a new temporary
 * directory) and removed at the end. --record-schedule writes the schedule of every job the
 * program runs (one after another) to FILE; with a fixed DIR two runs record the same file.
 *
 * --process asks the job server to start this program as its worker (default: a loopback
 * worker in this process). --no-processing-time leaves out 3., which needs TestStream's
 * processing-time control (Beam's Flink runner refuses it), and its two documented lines.
 *
 * With --tail the program instead tails two growing partition files on the wall clock for MS
 * ms (idle timeout 1 s, granularity 100 ms) and prints the records it read: a job to watch
 * with `sundialctl metrics JOB`, which shows each partition's watermark while it runs.
 *
 * 1. YDB's idle partitions: a topic of two partitions (files of "WRITE_TIME PAYLOAD"
 *    records), a watermark 2 s behind each partition's latest write time, idle timeout 5 s,
 *    granularity 1 s (sd_read_partitioned). p0 writes every second from 0 s to 8 s; p1 writes
 *    at 0 s and 1 s, falls silent, and writes again at 9 s. Until 6 s p1 holds the source's
 *    watermark at -1 s; at 6 s it has been silent for 5 s, is idle, and the watermark follows
 *    p0 alone (4 s, 5 s, 6 s) — so the 4 s window [0 s, 4 s) closes at 6 s instead of
 *    waiting for p1; at 9 s p1 produces again and is included again (the minimum is p0's
 *    6 s, the watermark never goes back). The history lines are the source's watermark
 *    output, one per step in which something changed.
 * 2. Flink's WATERMARK FOR rt AS rt - INTERVAL '1' MONTH: 2024-03-30 23:00 and 2024-03-31
 *    00:00 both map to the end of February (day clamped: 2024 is a leap year, Feb 29), at
 *    23:00 and 00:00; each record's candidate is taken before the max, so the first
 *    candidate (Feb 29 23:00) wins. 2023 (not leap) gives Feb 28. The month-long gap between
 *    the years is skipped, not stepped through second by second.
 * 3. Spark's mapGroupsWithState with a processing-time timeout of one hour
 *    (sd_map_groups_with_state): clicks of "a" at 0 and 30 min and 70 min, of "b" at 0 min,
 *    on a scripted processing-time clock. The timeout resets on every call, so "a"'s session
 *    (reset at 30 min) is still open at 70 min and ends at 130 min with 3 clicks; "b" times
 *    out at 60 min. On timeout the function is called with no value and the timed-out flag.
 *    The hours pass at once on the synthetic clock.
 *
 * Documented output:
 *
 *     ydb T+0 source=-2000 p0=-2000 p1=-2000
 *     ydb T+1000 source=-1000 p0=-1000 p1=-1000
 *     ydb T+2000 source=-1000 p0=0 p1=-1000
 *     ydb T+3000 source=-1000 p0=1000 p1=-1000
 *     ydb T+4000 source=-1000 p0=2000 p1=-1000
 *     ydb T+5000 source=-1000 p0=3000 p1=-1000
 *     ydb T+6000 source=4000 p0=4000 p1=-1000 idle
 *     ydb T+7000 source=5000 p0=5000 p1=-1000 idle
 *     ydb T+8000 source=6000 p0=6000 p1=-1000 idle
 *     ydb T+9000 source=6000 p0=6000 p1=7000
 *     ydb window 0-4 s: a0,a1,a2,a3,b0,b1
 *     ydb window 4-8 s: a4,a5,a6,a7
 *     ydb window 8-12 s: a8,b9
 *     flink 2023-03-30T23:00:00Z -> watermark 2023-02-28T23:00:00Z
 *     flink 2023-03-31T00:00:00Z -> watermark 2023-02-28T23:00:00Z
 *     flink 2024-03-30T23:00:00Z -> watermark 2024-02-29T23:00:00Z
 *     flink 2024-03-31T00:00:00Z -> watermark 2024-02-29T23:00:00Z
 *     spark a: 3 clicks, timed out
 *     spark b: 1 clicks, timed out
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sundial/sundial.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SEC    1000LL
#define MINUTE (60LL * SEC)

static const char *const want[] = {
    "ydb T+0 source=-2000 p0=-2000 p1=-2000",
    "ydb T+1000 source=-1000 p0=-1000 p1=-1000",
    "ydb T+2000 source=-1000 p0=0 p1=-1000",
    "ydb T+3000 source=-1000 p0=1000 p1=-1000",
    "ydb T+4000 source=-1000 p0=2000 p1=-1000",
    "ydb T+5000 source=-1000 p0=3000 p1=-1000",
    "ydb T+6000 source=4000 p0=4000 p1=-1000 idle",
    "ydb T+7000 source=5000 p0=5000 p1=-1000 idle",
    "ydb T+8000 source=6000 p0=6000 p1=-1000 idle",
    "ydb T+9000 source=6000 p0=6000 p1=7000",
    "ydb window 0-4 s: a0,a1,a2,a3,b0,b1",
    "ydb window 4-8 s: a4,a5,a6,a7",
    "ydb window 8-12 s: a8,b9",
    "flink 2023-03-30T23:00:00Z -> watermark 2023-02-28T23:00:00Z",
    "flink 2023-03-31T00:00:00Z -> watermark 2023-02-28T23:00:00Z",
    "flink 2024-03-30T23:00:00Z -> watermark 2024-02-29T23:00:00Z",
    "flink 2024-03-31T00:00:00Z -> watermark 2024-02-29T23:00:00Z",
    "spark a: 3 clicks, timed out",
    "spark b: 1 clicks, timed out",
};
#define N_WANT (sizeof(want) / sizeof(want[0]))

static char got[64][128];
static size_t n_got;

static void out(const char *line)
{
    printf("%s\n", line);
    if (n_got < 64) {
        snprintf(got[n_got++], sizeof(got[0]), "%s", line);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* ================================================================ functions */

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

/* A window's group -> "<start>-<end> s: v1,v2" (sorted). */
static sd_status format_window(sd_ctx *c, void *state)
{
    sd_bytes key, v;
    sd_iter it;
    bool has;
    char vals[32][16];
    size_t n = 0;
    (void)state;
    sd_status st = sd_ctx_grouped(c, &key, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has && n < 32) {
        sd_reader r = sd_reader_make(v);
        sd_bytes s;
        if (sd_read_bytes(&r, &s) != SD_OK || s.len >= sizeof(vals[0])) {
            return sd_fail(c, "format: bad value");
        }
        memcpy(vals[n], s.ptr, s.len);
        vals[n++][s.len] = '\0';
    }
    if (st != SD_OK) {
        return st;
    }
    qsort(vals, n, sizeof(vals[0]), cmp_str);
    sd_window w = sd_ctx_window(c);
    char line[512];
    int len = snprintf(line, sizeof(line), "%lld-%lld s: ", (long long)(w.start / SEC),
                       (long long)(w.end / SEC));
    for (size_t i = 0; i < n; i++) {
        len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s", i ? "," : "", vals[i]);
    }
    return sd_emit_str(c, line, (size_t)len);
}

/* Spark: state = clicks so far; every call resets the one-hour timeout (set it again). */
static sd_status sessions(sd_ctx *c, sd_group_state *gs, const sd_bytes *value)
{
    sd_bytes cur;
    bool exists;
    int64_t total = 0;
    sd_status st = sd_group_get(gs, &cur, &exists);
    if (st == SD_OK && exists) {
        sd_reader r = sd_reader_make(cur);
        st = sd_read_int(&r, &total);
    }
    if (st != SD_OK) {
        return st;
    }
    sd_bytes key = sd_ctx_key(c);
    sd_reader kr = sd_reader_make(key);
    sd_bytes user;
    if (sd_read_bytes(&kr, &user) != SD_OK) {
        return sd_fail(c, "sessions: the key is not a string");
    }
    if (value == NULL) {
        if (!sd_group_timed_out(gs)) {
            return sd_fail(c, "sessions: called with no value but not timed out");
        }
        char line[128];
        int len = snprintf(line, sizeof(line), "%.*s: %lld clicks, timed out", (int)user.len,
                           (const char *)user.ptr, (long long)total);
        st = sd_emit_str(c, line, (size_t)len);
        return st != SD_OK ? st : sd_group_remove(gs);
    }
    uint8_t buf[10];
    sd_buf b = { .data = buf, .cap = sizeof(buf) };
    if ((st = sd_enc_int(&b, total + 1)) != SD_OK ||
        (st = sd_group_update(gs, sd_buf_bytes(&b))) != SD_OK) {
        return st;
    }
    return sd_group_set_timeout_ms(gs, 60 * MINUTE);
}

/* ================================================================ the three examples */

/* --record-schedule: job n records to "<FILE>.<n>"; main joins them into FILE at the end. */
static const char *record_base;
static int n_recorded;
/* --process: the job server starts this program as its worker (else a loopback worker). */
static sd_env_kind environment;

static sd_status run(sd_pipeline *p, const char *endpoint, sd_run_result *res)
{
    char part[512];
    /* A job server elsewhere (Flink, Spark) may take longer than Sundial to start a job. */
    sd_run_options opts = { .endpoint = endpoint,
                            .environment = environment,
                            .timeout_ms = endpoint != NULL ? 600000 : 60000 };
    if (record_base != NULL) {
        snprintf(part, sizeof(part), "%s.%d", record_base, n_recorded++);
        opts.record_schedule = part;
    }
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "watermarks: %s: %s\n", sd_pipeline_error(p) != NULL ? "build" : "run",
                sd_err_msg(&err));
    }
    return st;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0) {
        if (f != NULL) {
            fclose(f);
        }
        fprintf(stderr, "watermarks: cannot write %s\n", path);
        return -1;
    }
    return fclose(f);
}

/* The history's T+ number, to order a collection. */
static int cmp_history(const void *a, const void *b)
{
    long long x = strtoll((*(const sd_elem *const *)a)->value.str + 2, NULL, 10);
    long long y = strtoll((*(const sd_elem *const *)b)->value.str + 2, NULL, 10);
    return x < y ? -1 : x > y;
}

static void print_history(const char *prefix, sd_collection *col)
{
    const sd_elem *lines[64];
    long n = sd_collection_len(col);
    for (long i = 0; i < n && i < 64; i++) {
        lines[i] = sd_collection_at(col, (size_t)i);
    }
    qsort(lines, (size_t)(n < 64 ? n : 64), sizeof(lines[0]), cmp_history);
    for (long i = 0; i < n && i < 64; i++) {
        char line[128];
        snprintf(line, sizeof(line), "%s %s", prefix, lines[i]->value.str);
        out(line);
    }
}

static int ydb_idle(const char *dir, const char *endpoint)
{
    char p0[320], p1[320];
    snprintf(p0, sizeof(p0), "%s/ydb-p0.txt", dir);
    snprintf(p1, sizeof(p1), "%s/ydb-p1.txt", dir);
    if (write_file(p0, "0 a0\n1000 a1\n2000 a2\n3000 a3\n4000 a4\n5000 a5\n6000 a6\n7000 a7\n"
                       "8000 a8\n") != 0 ||
        write_file(p1, "0 b0\n1000 b1\n9000 b9\n") != 0) {
        return 1;
    }
    const char *files[2] = { p0, p1 };
    sd_pipeline *p = sd_pipeline_create("ydb-idle");
    sd_partitioned_spec spec = { .n_partitions = 2,
                                 .files = files,
                                 .delay = "PT2S",
                                 .idle_timeout = "PT5S",
                                 .granularity = "PT1S" };
    sd_pcoll *history = NULL;
    sd_pcoll *events = sd_read_partitioned(p, "Topic", &spec, &history);
    sd_windowfn tumble = { .kind = SD_WINDOW_FIXED, .size_ms = 4 * SEC };
    sd_pcoll *w = sd_window_into(p, "Tumble", events, &tumble);
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_string(p));
    sd_pcoll *keyed = sd_apply(p, "Key", w, "wm:key_all", SD_BYTES_NULL, kvc);
    sd_pcoll *g = sd_group_by_key(p, "Group", keyed);
    sd_pcoll *f = sd_apply(p, "Format", g, "wm:format", SD_BYTES_NULL, sd_pcoder_string(p));
    sd_collection *hist = sd_collect(p, "History", history);
    sd_collection *wins = sd_collect(p, "Windows", f);
    sd_run_result res;
    int rc = run(p, endpoint, &res) == SD_OK ? 0 : 1;
    if (rc == 0) {
        print_history("ydb", hist);
        sd_collection_sort(wins);
        /* Sorted as strings: "0-4", "4-8", "8-12". */
        for (long i = 0; i < sd_collection_len(wins); i++) {
            char line[128];
            snprintf(line, sizeof(line), "ydb window %s",
                     sd_collection_at(wins, (size_t)i)->value.str);
            out(line);
        }
    }
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    return rc;
}

static void iso(char *buf, size_t cap, sd_time ms)
{
    time_t s = (time_t)(ms / SEC);
    struct tm *tm = gmtime(&s);
    if (tm == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", tm) == 0) {
        snprintf(buf, cap, "%lld", (long long)ms);
    }
}

static int flink_month(const char *dir, const char *endpoint)
{
    /* Mar 30 23:00 and Mar 31 00:00 UTC of 2023 and of 2024. */
    static const sd_time rt[4] = { 1680217200000LL, 1680220800000LL, 1711839600000LL,
                                   1711843200000LL };
    /* One record per run, so the watermark after each record is the run's partition p0. */
    sd_time wm_after[4];
    for (int i = 0; i < 4; i++) {
        char one[320];
        snprintf(one, sizeof(one), "%s/flink-%d.txt", dir, i);
        FILE *f = fopen(one, "w");
        if (f == NULL) {
            return 1;
        }
        for (int k = 0; k <= i; k++) {
            fprintf(f, "%lld r%d\n", (long long)rt[k], k);
        }
        fclose(f);
        const char *files[1] = { one };
        sd_pipeline *p = sd_pipeline_create("flink-month");
        sd_partitioned_spec spec = { .n_partitions = 1, .files = files, .delay = "P1M" };
        sd_read_partitioned(p, "Rt", &spec, NULL);
        sd_run_result res;
        if (run(p, endpoint, &res) != SD_OK) {
            sd_pipeline_destroy(p);
            return 1;
        }
        wm_after[i] = sd_run_result_partition_watermark(&res, "Rt", "p0");
        sd_run_result_deinit(&res);
        sd_pipeline_destroy(p);
    }
    for (int i = 0; i < 4; i++) {
        char a[32], b[32], line[128];
        iso(a, sizeof(a), rt[i]);
        iso(b, sizeof(b), wm_after[i]);
        snprintf(line, sizeof(line), "flink %s -> watermark %s", a, b);
        out(line);
    }
    return 0;
}

static int spark_timeout(const char *endpoint)
{
    sd_pipeline *p = sd_pipeline_create("spark-timeout");
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_teststream *ts = sd_teststream_create(p, "Clicks", kvc, NULL, 0);

    /* (user, processing time of the click in minutes) */
    static const struct {
        const char *user;
        int64_t minute;
    } clicks[] = { { "a", 0 }, { "b", 0 }, { "a", 30 }, { "a", 70 } };

    int64_t clock = 0;
    for (size_t i = 0; i < 4; i++) {
        if (clicks[i].minute > clock) {
            sd_teststream_advance_processing_time(ts, (clicks[i].minute - clock) * MINUTE);
            clock = clicks[i].minute;
        }
        sd_buf b;
        sd_buf_init(&b, 0);
        if (sd_enc_str(&b, clicks[i].user) != SD_OK || sd_enc_int(&b, 1) != SD_OK) {
            sd_buf_deinit(&b);
            return 1;
        }
        sd_bytes e = sd_buf_bytes(&b);
        sd_time t = clicks[i].minute * MINUTE;
        sd_teststream_add_elements(ts, NULL, &e, &t, 1);
        sd_buf_deinit(&b);
    }
    sd_teststream_advance_watermark_to_infinity(ts);
    sd_pcoll *in = sd_teststream_output(ts, NULL);
    sd_pcoll *ended = sd_map_groups_with_state(p, "Sessions", in, "wm:sessions", SD_BYTES_NULL,
                                               sd_pcoder_varint(p), sd_pcoder_string(p));
    sd_collection *col = sd_collect(p, "Ended", ended);
    int rc = run(p, endpoint, NULL) == SD_OK ? 0 : 1;
    if (rc == 0) {
        sd_collection_sort(col);
        for (long i = 0; i < sd_collection_len(col); i++) {
            char line[128];
            snprintf(line, sizeof(line), "spark %s", sd_collection_at(col, (size_t)i)->value.str);
            out(line);
        }
    }
    sd_pipeline_destroy(p);
    return rc;
}

/* --tail: p0 gets a record every 200 ms while the job runs, p1 one at the start. */
typedef struct feeder {
    char path[320];
    long ms;
} feeder;

static void *feed(void *arg)
{
    feeder *f = arg;
    for (long t = 0; t < f->ms; t += 200) {
        struct timespec d = { 0, 200L * 1000000L };
        nanosleep(&d, NULL);
        FILE *fp = fopen(f->path, "a");
        if (fp == NULL) {
            return NULL;
        }
        fprintf(fp, "%lld tick%ld\n", (long long)sd_wall_now_ms(), t / 200);
        fclose(fp);
    }
    return NULL;
}

static int tail_demo(const char *dir, const char *endpoint, long ms)
{
    feeder f;
    char p1[320], text[64], run_for[32];
    snprintf(f.path, sizeof(f.path), "%s/tail-p0.txt", dir);
    snprintf(p1, sizeof(p1), "%s/tail-p1.txt", dir);
    snprintf(text, sizeof(text), "%lld start\n", (long long)sd_wall_now_ms());
    if (write_file(f.path, "") != 0 || write_file(p1, text) != 0) {
        return 1;
    }
    f.ms = ms;
    snprintf(run_for, sizeof(run_for), "PT%ld.%03ldS", ms / 1000, ms % 1000);
    const char *files[2] = { f.path, p1 };
    sd_pipeline *p = sd_pipeline_create("tail-demo");
    sd_partitioned_spec spec = { .n_partitions = 2,
                                 .files = files,
                                 .idle_timeout = "PT1S",
                                 .granularity = "PT0.1S",
                                 .tail = true,
                                 .run_for = run_for };
    sd_pcoll *recs = sd_read_partitioned(p, "Topic", &spec, NULL);
    sd_collection *col = sd_collect(p, "Records", recs);
    pthread_t th;
    if (pthread_create(&th, NULL, feed, &f) != 0) {
        sd_pipeline_destroy(p);
        return 1;
    }
    sd_run_options opts = { .endpoint = endpoint, .wall_clock = true, .timeout_ms = 60000 };
    sd_err err;
    sd_err_clear(&err);
    sd_run_result res;
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    pthread_join(th, NULL);
    if (st != SD_OK) {
        fprintf(stderr, "watermarks: %s\n", sd_err_msg(&err));
    } else {
        printf("tail: %ld records; last watermarks p0=%lld p1=%lld\n", sd_collection_len(col),
               (long long)sd_run_result_partition_watermark(&res, "Topic", "p0"),
               (long long)sd_run_result_partition_watermark(&res, "Topic", "p1"));
    }
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    return st == SD_OK ? 0 : 1;
}

/* Remove the partition files this program wrote (only those) and their directory. */
static void remove_data(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1024];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strstr(e->d_name, ".txt") != NULL) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    if (rmdir(dir) != 0) {
        fprintf(stderr, "watermarks: could not remove %s: %s\n", dir, strerror(errno));
    }
}

/* Join the jobs' schedules "<FILE>.<n>" into FILE, in the order the jobs ran. */
static int join_schedules(void)
{
    FILE *out = fopen(record_base, "w");
    int rc = out == NULL ? -1 : 0;
    for (int i = 0; i < n_recorded; i++) {
        char part[512], chunk[4096];
        snprintf(part, sizeof(part), "%s.%d", record_base, i);
        FILE *in = fopen(part, "r");
        size_t n;
        if (in == NULL) {
            rc = -1;
            continue;
        }
        while (out != NULL && (n = fread(chunk, 1, sizeof(chunk), in)) > 0) {
            rc |= fwrite(chunk, 1, n, out) == n ? 0 : -1;
        }
        fclose(in);
        remove(part);
    }
    if (out != NULL && fclose(out) != 0) {
        rc = -1;
    }
    if (rc != 0) {
        fprintf(stderr, "watermarks: cannot write the schedule %s\n", record_base);
    }
    return rc;
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn key = { .process = key_all };
    static const sd_dofn format = { .process = format_window };
    if (sd_register_dofn("wm:key_all", &key) != SD_OK ||
        sd_register_dofn("wm:format", &format) != SD_OK ||
        sd_register_group_fn("wm:sessions", sessions) != SD_OK) {
        fprintf(stderr, "watermarks: cannot register the functions\n");
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const char *endpoint = NULL;
    const char *parent = NULL;
    long tail_ms = 0;
    bool with_pt = true;
    /* getopt_long: a value follows its flag or an '=' (--tail=3000); it names a bad flag, and
     * the usage follows. */
    static const struct option flags[] = { { "endpoint", required_argument, NULL, 'e' },
                                           { "process", no_argument, NULL, 'p' },
                                           { "no-processing-time", no_argument, NULL, 'n' },
                                           { "dir", required_argument, NULL, 'd' },
                                           { "record-schedule", required_argument, NULL, 'r' },
                                           { "tail", required_argument, NULL, 't' },
                                           { "help", no_argument, NULL, 'h' },
                                           { NULL, 0, NULL, 0 } };
    const char *usage = "usage: watermarks [--tail MS] [--endpoint HOST:PORT] [--process] "
                        "[--no-processing-time] [--dir DIR] [--record-schedule FILE]\n";
    int c;
    while ((c = getopt_long(argc, argv, "h", flags, NULL)) != -1) {
        char *end = NULL;
        if (c == 'e') {
            endpoint = optarg;
        } else if (c == 'p') {
            environment = SD_ENV_PROCESS;
        } else if (c == 'n') {
            with_pt = false; /* leave out 3., which needs TestStream's processing time */
        } else if ((c == 'd' || c == 'r') && optarg[0] == '\0') {
            fprintf(stderr, "watermarks: --%s expects a path, got \"\"\n%s",
                    c == 'd' ? "dir" : "record-schedule", usage);
            return 2;
        } else if (c == 'd') {
            parent = optarg;
        } else if (c == 'r') {
            record_base = optarg;
        } else if (c == 't' && ((tail_ms = strtol(optarg, &end, 10)) <= 0 || tail_ms > 600000 ||
                                *end != '\0')) {
            fprintf(stderr, "watermarks: --tail expects 1..600000 milliseconds, got \"%s\"\n%s",
                    optarg, usage);
            return 2;
        } else if (c != 't') {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "watermarks: unexpected argument \"%s\"\n%s", argv[optind], usage);
        return 2;
    }
    char dir[256];
    if (parent != NULL) {
        if (snprintf(dir, sizeof(dir), "%s/watermarks-data", parent) >= (int)sizeof(dir)) {
            fprintf(stderr, "watermarks: --dir is longer than %zu bytes\n", sizeof(dir) - 20);
            return 2;
        }
        if ((mkdir(parent, 0700) != 0 && errno != EEXIST) ||
            (mkdir(dir, 0700) != 0 && errno != EEXIST)) {
            fprintf(stderr, "watermarks: cannot create %s: %s\n", dir, strerror(errno));
            return 1;
        }
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/sundial-watermarks-XXXXXX", tmp != NULL ? tmp : "/tmp");
        if (mkdtemp(dir) == NULL) {
            fprintf(stderr, "watermarks: cannot create %s: %s\n", dir, strerror(errno));
            return 1;
        }
    }
    int rc = tail_ms > 0 ? tail_demo(dir, endpoint, tail_ms)
                         : ydb_idle(dir, endpoint) || flink_month(dir, endpoint) ||
                               (with_pt && spark_timeout(endpoint));
    remove_data(dir);
    if (record_base != NULL && join_schedules() != 0) {
        rc = 1;
    }
    if (rc != 0 || tail_ms > 0) {
        return rc != 0 ? 1 : 0;
    }
    /* Exactly the documented output, line by line (without 3.'s two lines when left out). */
    size_t n_want = with_pt ? N_WANT : N_WANT - 2;
    bool same = n_got == n_want;
    for (size_t i = 0; i < n_want && i < n_got; i++) {
        if (strcmp(got[i], want[i]) != 0) {
            fprintf(stderr, "watermarks: line %zu is \"%s\", documented \"%s\"\n", i + 1, got[i],
                    want[i]);
            same = false;
        }
    }
    if (n_got != n_want) {
        fprintf(stderr, "watermarks: %zu lines, documented %zu\n", n_got, n_want);
    }
    return same ? 0 : 1;
}
