/*
 * fault_job: one C SDK job against a Sundial job server, for the fault and load tests
 * (faults.sh). It is both the job client and, with --process, the SDK worker the runner starts
 * (sd_sdk_main), so the tests need no other program.
 *
 *   fault_job --endpoint=HOST:PORT [--process] slow PID_FILE
 *   fault_job --endpoint=HOST:PORT [--process] [--hold=FILE] count N TAG
 *
 * slow: Create(1..4) -> Slow. The Slow DoFn writes the pid of the process running it to
 *   PID_FILE (written beside it and renamed, so a reader never sees half a number), then sleeps
 *   for up to SLOW_MS per element in short naps. With --process that pid is the worker the
 *   runner started, so the test can kill, stop or look for exactly that process while the
 *   bundle is in progress. The job would end DONE after about 4 * SLOW_MS; a test that sees
 *   that has failed.
 *
 * count: Create(1..N) -> Square ("TAG:i:i*i", counter "squares") -> assert the exact strings,
 *   and Square -> KV<"kI%5", 1> -> CountPerKey (a GroupByKey through the runner) -> Format
 *   "kR=count" -> assert the exact counts. The in-pipeline assertions fail the job on a wrong
 *   answer; on top of that the client checks the "squares" counter the runner reports.
 *   With --hold=FILE a Hold DoFn before Square waits (up to HOLD_MS) for FILE to exist, so a
 *   test can keep many jobs running at once and release them together.
 *
 * Output on stdout, one line each, after the run returns:
 *   JOB <job id> <DONE|FAILED|CANCELLED|UNKNOWN>
 *   ENDED_NS <CLOCK_REALTIME in ns when the run returned>   (the tests compare it with the
 *                                                            moment they sent a signal)
 *   ERROR <failure message on one line>                     (when there is one)
 * Exit status: 0 DONE with the right counter; 1 the job did not end DONE or the run failed;
 * 2 usage; 3 DONE but the counter was wrong.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sundial/sundial.h>
#include <time.h>
#include <unistd.h>

/* How long Slow sleeps per element: far longer than any test waits for a fault to show. */
#define SLOW_MS   30000
#define NAP_MS    20
#define MAX_COUNT 1000
#define N_KEYS    5
#define HOLD_MS   60000

/* ---------------------------------------------------------------- DoFns */

static void nap_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Write our pid to the file named by the config, atomically (tmp file, then rename). */
static sd_status slow_start(sd_ctx *c, void *state)
{
    sd_bytes cfg = sd_ctx_config(c);
    char path[4096];
    char tmp[4200];
    (void)state;
    if (cfg.len == 0 || cfg.len >= sizeof(path)) {
        return sd_fail(c, "Slow: the config must be a pid file path");
    }
    memcpy(path, cfg.ptr, cfg.len);
    path[cfg.len] = '\0';
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        return sd_fail(c, "Slow: cannot write %s", tmp);
    }
    fprintf(f, "%ld\n", (long)getpid());
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        return sd_fail(c, "Slow: cannot write %s", path);
    }
    return SD_OK;
}

static sd_status slow_process(sd_ctx *c, void *state)
{
    (void)state;
    for (long slept = 0; slept < SLOW_MS; slept += NAP_MS) {
        nap_ms(NAP_MS);
    }
    return sd_emit(c, 0, sd_ctx_element(c));
}

/* Wait for the file named by the config to exist, then pass the elements through. */
static sd_status hold_start(sd_ctx *c, void *state)
{
    sd_bytes cfg = sd_ctx_config(c);
    char path[4096];
    (void)state;
    if (cfg.len == 0 || cfg.len >= sizeof(path)) {
        return sd_fail(c, "Hold: the config must be a file path");
    }
    memcpy(path, cfg.ptr, cfg.len);
    path[cfg.len] = '\0';
    for (long waited = 0; access(path, F_OK) != 0; waited += NAP_MS) {
        if (waited >= HOLD_MS) {
            return sd_fail(c, "Hold: %s did not appear within %d ms", path, HOLD_MS);
        }
        nap_ms(NAP_MS);
    }
    return SD_OK;
}

static sd_status hold_process(sd_ctx *c, void *state)
{
    (void)state;
    return sd_emit(c, 0, sd_ctx_element(c));
}

/* varint i -> "TAG:i:i*i" (the tag is the config) */
static sd_status square_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes tag = sd_ctx_config(c);
    int64_t i;
    char line[256];
    (void)state;
    if (sd_read_int(&r, &i) != SD_OK) {
        return sd_fail(c, "Square: element is not a varint");
    }
    int n = snprintf(line, sizeof(line), "%.*s:%lld:%lld", (int)tag.len, (const char *)tag.ptr,
                     (long long)i, (long long)(i * i));
    sd_counter_add(c, "squares", 1);
    return sd_emit_str(c, line, (size_t)n);
}

/* "TAG:i:sq" -> KV<"k<i % N_KEYS>", 1> */
static sd_status key_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes s;
    char text[256];
    char key[16];
    long long i = 0;
    (void)state;
    if (sd_read_bytes(&r, &s) != SD_OK || s.len >= sizeof(text)) {
        return sd_fail(c, "Key: element is not a short string");
    }
    memcpy(text, s.ptr, s.len);
    text[s.len] = '\0';
    const char *colon = strchr(text, ':');
    if (colon == NULL || sscanf(colon + 1, "%lld", &i) != 1) {
        return sd_fail(c, "Key: \"%s\" is not TAG:i:sq", text);
    }
    int n = snprintf(key, sizeof(key), "k%lld", i % N_KEYS);
    return sd_emit_kv_str_int(c, key, (size_t)n, 1);
}

/* KV<string, varint> -> "key=count" */
static sd_status format_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes k;
    int64_t v;
    char line[128];
    (void)state;
    if (sd_read_bytes(&r, &k) != SD_OK || sd_read_int(&r, &v) != SD_OK) {
        return sd_fail(c, "Format: element is not KV<string, varint>");
    }
    int n =
        snprintf(line, sizeof(line), "%.*s=%lld", (int)k.len, (const char *)k.ptr, (long long)v);
    return sd_emit_str(c, line, (size_t)n);
}

static int register_fns(void)
{
    static const sd_dofn slow = { .start_bundle = slow_start, .process = slow_process };
    static const sd_dofn hold = { .start_bundle = hold_start, .process = hold_process };
    static const sd_dofn square = { .process = square_process };
    static const sd_dofn key = { .process = key_process };
    static const sd_dofn format = { .process = format_process };
    if (sd_register_dofn("fault:slow", &slow) != SD_OK ||
        sd_register_dofn("fault:hold", &hold) != SD_OK ||
        sd_register_dofn("fault:square", &square) != SD_OK ||
        sd_register_dofn("fault:key", &key) != SD_OK ||
        sd_register_dofn("fault:format", &format) != SD_OK) {
        fprintf(stderr, "fault_job: cannot register DoFns\n");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- pipelines */

static void build_slow(sd_pipeline *p, const char *pid_file)
{
    static const int64_t values[] = { 1, 2, 3, 4 };
    sd_pcoll *in = sd_create_ints(p, "Values", values, 4);
    sd_apply(p, "Slow", in, "fault:slow", sd_bytes_str(pid_file), sd_pcoder_varint(p));
}

/*
 * The expected strings live in fixed-width rows of one static buffer (no allocation, and so
 * nothing of the runner's allocator is needed): rows 0..n-1 are the squares, the next ones the
 * per-key counts.
 */
#define ROW 64
static char rows[(MAX_COUNT + N_KEYS) * ROW];
static const char *want[MAX_COUNT + N_KEYS];
static int64_t values[MAX_COUNT];

static void build_count(sd_pipeline *p, int64_t n, const char *tag, const char *hold)
{
    for (int64_t i = 0; i < n; i++) {
        values[i] = i + 1;
        snprintf(rows + (size_t)i * ROW, ROW, "%s:%lld:%lld", tag, (long long)(i + 1),
                 (long long)((i + 1) * (i + 1)));
        want[i] = rows + (size_t)i * ROW;
    }
    size_t n_counts = 0;
    for (int k = 0; k < N_KEYS; k++) {
        /* Values 1..n with v % N_KEYS == k. */
        int64_t count = n / N_KEYS + (k != 0 && k <= n % N_KEYS ? 1 : 0);
        if (count == 0) {
            continue;
        }
        char *row = rows + (size_t)(n + (int64_t)n_counts) * ROW;
        snprintf(row, ROW, "k%d=%lld", k, (long long)count);
        want[n + (int64_t)n_counts] = row;
        n_counts++;
    }
    sd_pcoll *in = sd_create_ints(p, "Values", values, (size_t)n);
    if (hold != NULL) {
        in = sd_apply(p, "Hold", in, "fault:hold", sd_bytes_str(hold), sd_pcoder_varint(p));
    }
    sd_pcoll *sq =
        sd_apply(p, "Square", in, "fault:square", sd_bytes_str(tag), sd_pcoder_string(p));
    sd_assert_strings(p, "CheckSquares", sq, want, (size_t)n);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *keyed = sd_apply(p, "Key", sq, "fault:key", SD_BYTES_NULL, kv);
    sd_pcoll *counts = sd_count_per_key(p, "Count", keyed);
    sd_pcoll *lines =
        sd_apply(p, "Format", counts, "fault:format", SD_BYTES_NULL, sd_pcoder_string(p));
    sd_assert_strings(p, "CheckCounts", lines, want + n, n_counts);
}

/* ---------------------------------------------------------------- main */

static const char *state_name(sd_run_state s)
{
    switch (s) {
    case SD_RUN_DONE:
        return "DONE";
    case SD_RUN_FAILED:
        return "FAILED";
    case SD_RUN_CANCELLED:
        return "CANCELLED";
    default:
        return "UNKNOWN";
    }
}

static int usage(void)
{
    fprintf(stderr,
            "usage: fault_job --endpoint=HOST:PORT [--process] slow PID_FILE\n"
            "       fault_job --endpoint=HOST:PORT [--process] [--hold=FILE] count N TAG\n");
    return 2;
}

int main(int argc, char **argv)
{
    int code;
    const char *endpoint = NULL;
    bool process_env = false;
    const char *hold = NULL;
    const char *pos[3] = { NULL, NULL, NULL };
    int n_pos = 0;

    if (register_fns() != 0) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code; /* started by the runner as the job's SDK worker */
    }
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--endpoint=", 11) == 0) {
            endpoint = argv[i] + 11;
        } else if (strncmp(argv[i], "--hold=", 7) == 0 && argv[i][7] != '\0') {
            hold = argv[i] + 7;
        } else if (strcmp(argv[i], "--process") == 0) {
            process_env = true;
        } else if (argv[i][0] == '-' || n_pos == 3) {
            return usage();
        } else {
            pos[n_pos++] = argv[i];
        }
    }
    if (endpoint == NULL || n_pos < 2) {
        return usage();
    }
    bool slow = strcmp(pos[0], "slow") == 0;
    int64_t n = 0;
    if (!slow) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(pos[1], &end, 10);
        if (strcmp(pos[0], "count") != 0 || n_pos != 3 || errno != 0 || *end != '\0' || v < 1 ||
            v > MAX_COUNT || strlen(pos[2]) > 16) {
            return usage();
        }
        n = v;
    }

    sd_pipeline *p = sd_pipeline_create(slow ? "fault-slow" : "fault-count");
    if (slow) {
        build_slow(p, pos[1]);
    } else {
        build_count(p, n, pos[2], hold);
    }

    sd_run_options opts = { .endpoint = endpoint,
                            .timeout_ms = 120000,
                            .environment = process_env ? SD_ENV_PROCESS : SD_ENV_LOOPBACK };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);

    int rc = 0;
    printf("JOB %s %s\n", res.job_id != NULL ? res.job_id : "-", state_name(res.state));
    printf("ENDED_NS %lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
    const char *msg = res.error != NULL ? res.error : (st != SD_OK ? sd_err_msg(&err) : NULL);
    if (msg != NULL) {
        printf("ERROR ");
        for (const char *q = msg; *q != '\0'; q++) {
            putchar(*q == '\n' ? ' ' : *q);
        }
        putchar('\n');
    }
    if (st != SD_OK || res.state != SD_RUN_DONE) {
        rc = 1;
    } else if (!slow && sd_run_result_counter(&res, "squares") != n) {
        printf("WRONG squares counter %lld, want %lld\n",
               (long long)sd_run_result_counter(&res, "squares"), (long long)n);
        rc = 3;
    }
    fflush(stdout);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    return rc;
}
