/*
 * Integration tests of schedule recording, replay and exploration with the C SDK, on the
 * embedded Sundial runner (test mode):
 *
 *   - a run recorded under a seed and a bundle shape replays to byte-identical output (every
 *     bundle's output bytes, digested at its commit step, and the collected elements), and
 *     recording the same job twice gives byte-identical schedule files;
 *   - a tampered recording, a truncated one, or the recording replayed over other input fails
 *     the job with a message naming the step that diverged;
 *   - exploration (sd_run_options.explore_seeds) finds a DoFn that depends on the order of its
 *     input, reports the failing run's seed, shape and schedule file (only that file is kept),
 *     and replaying that file fails the same way, every time.
 *
 * Files go to a directory made under the test's working directory (the build tree).
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "time_common.h"

static char dir[64];

/* ---------------------------------------------------------------- DoFns */

/* "<key>#<n>:<value>": the n-th element of the key, so the output shows the delivery order. */
/* Calls of number_process in this process (the loopback worker runs here). */
static atomic_long number_calls;

static sd_status number_process(sd_ctx *c, void *state)
{
    atomic_fetch_add(&number_calls, 1);
    sd_bytes k, v;
    sd_iter it;
    sd_bytes got;
    bool has = false;
    int64_t n = 0, x = 0;
    char line[128];
    (void)state;
    sd_status st = sd_ctx_kv(c, &k, &v);
    sd_reader kr = sd_reader_make(k), vr = sd_reader_make(v);
    sd_bytes key;
    if (st != SD_OK || sd_read_bytes(&kr, &key) != SD_OK || sd_read_int(&vr, &x) != SD_OK) {
        return sd_fail(c, "expected KV<string, varint>");
    }
    st = sd_state_read(c, "n", &it);
    if (st == SD_OK) {
        st = sd_iter_next(&it, &got, &has);
    }
    if (st == SD_OK && has) {
        sd_reader r = sd_reader_make(got);
        if (sd_read_int(&r, &n) != SD_OK) {
            return sd_fail(c, "state n is not a varint");
        }
    }
    sd_buf b;
    sd_buf_init(&b, 0);
    st = st == SD_OK ? sd_enc_int(&b, n + 1) : st;
    st = st == SD_OK ? sd_state_write(c, "n", sd_buf_bytes(&b)) : st;
    sd_buf_deinit(&b);
    int len = snprintf(line, sizeof(line), "%.*s#%lld:%lld", (int)key.len, (const char *)key.ptr,
                       (long long)n, (long long)x);
    return st == SD_OK ? sd_emit_str(c, line, (size_t)len) : st;
}

/* The bug: "the first value seen is the smallest", true only in timestamp order. It emits
 * "first <key>=<value>" for the first element of each key. */
static sd_status first_process(sd_ctx *c, void *state)
{
    sd_bytes k, v, got;
    sd_iter it;
    bool has = false;
    int64_t x = 0;
    char line[128];
    (void)state;
    sd_status st = sd_ctx_kv(c, &k, &v);
    sd_reader kr = sd_reader_make(k), vr = sd_reader_make(v);
    sd_bytes key;
    if (st != SD_OK || sd_read_bytes(&kr, &key) != SD_OK || sd_read_int(&vr, &x) != SD_OK) {
        return sd_fail(c, "expected KV<string, varint>");
    }
    st = sd_state_read(c, "seen", &it);
    if (st == SD_OK) {
        st = sd_iter_next(&it, &got, &has);
    }
    if (st != SD_OK || has) {
        return st;
    }
    st = sd_state_write(c, "seen", sd_bytes_make("\x01", 1));
    int len = snprintf(line, sizeof(line), "first %.*s=%lld", (int)key.len, (const char *)key.ptr,
                       (long long)x);
    return st == SD_OK ? sd_emit_str(c, line, (size_t)len) : st;
}

/* ---------------------------------------------------------------- pipelines */

static sd_pcoll *
keyed(sd_pipeline *p, const char *name, sd_pcoll *in, const char *dofn, const char *state_id)
{
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_state_spec s = { .id = state_id, .kind = SD_STATE_VALUE, .coder = sd_pcoder_varint(p) };
    sd_pardo_spec spec = {
        .dofn = dofn, .n_outputs = 1, .output_coders = outc, .n_states = 1, .states = &s
    };
    return sd_pardo(p, name, in, &spec, NULL);
}

/* Twelve KVs over two keys, a clock step, one more element, the watermark: numbered per key.
 * shift changes one value (other input). OUT: *col, the collected output. */
static sd_pipeline *orders_pipeline(int64_t shift, sd_collection **col)
{
    sd_pipeline *p = sd_pipeline_create("orders");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    const char *ks[12];
    int64_t vs[12];
    sd_time tss[12];
    for (int i = 0; i < 12; i++) {
        ks[i] = i % 3 == 0 ? "x" : "k";
        vs[i] = i == 5 ? i + shift : i;
        tss[i] = 1000 + i;
    }
    tc_add_kvs(ts, NULL, ks, vs, tss, 12);
    sd_teststream_advance_processing_time(ts, 2 * MIN_MS);
    tc_add_kv(ts, NULL, "k", 100, 5000);
    sd_teststream_advance_watermark(ts, NULL, 10 * MIN_MS);
    sd_pcoll *out = keyed(p, "Number", sd_teststream_output(ts, NULL), "s:number", "n");
    *col = sd_collect(p, "Collect", out);
    return p;
}

static sd_pipeline *order_bug_pipeline(void)
{
    sd_pipeline *p = sd_pipeline_create("order-bug");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    const char *ks[6] = { "a", "a", "a", "a", "a", "a" };
    int64_t vs[6] = { 1, 2, 3, 4, 5, 6 };
    sd_time tss[6] = { 1, 2, 3, 4, 5, 6 };
    tc_add_kvs(ts, NULL, ks, vs, tss, 6);
    sd_teststream_advance_watermark(ts, NULL, 10 * MIN_MS);
    sd_pcoll *out = keyed(p, "First", sd_teststream_output(ts, NULL), "s:first", "seen");
    const char *const want[] = { "first a=1" };
    sd_assert_strings(p, "FirstIsSmallest", out, want, 1);
    return p;
}

/* ---------------------------------------------------------------- helpers */

static sd_status run(sd_pipeline *p,
                     const char *seed,
                     const char *shape,
                     const char *record,
                     const char *replay,
                     sd_run_result *res,
                     sd_err *err)
{
    const char *names[2] = { "beam:option:sundial_schedule_seed:v1",
                             "beam:option:sundial_bundle_shape:v1" };
    const char *values[2] = { seed, shape };
    sd_run_options o = { .timeout_ms = 60000,
                         .n_options = seed != NULL ? 2 : 0,
                         .option_names = names,
                         .option_values = values,
                         .record_schedule = record,
                         .replay_schedule = replay };
    sd_err_clear(err);
    return sd_pipeline_run(p, &o, res, err);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fail_msg("cannot open %s", path);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc(1, (size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    if (len != NULL) {
        *len = (size_t)n;
    }
    return s;
}

static void spit(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(s, 1, strlen(s), f), strlen(s));
    fclose(f);
}

/* The collection's elements, sorted (sd_collect promises no order: it reads the results
 * back from files), one a line. The order of the output within and across bundles is what
 * the replay checks itself: each bundle's commit step holds a digest of its output bytes.
 * Caller frees. */
static char *render(sd_collection *col)
{
    long n = sd_collection_len(col);
    sd_collection_sort(col);
    assert_true(n > 0);
    sd_buf b;
    sd_buf_init(&b, 0);
    for (long i = 0; i < n; i++) {
        const sd_elem *e = sd_collection_at(col, (size_t)i);
        assert_int_equal(sd_buf_append(&b, e->value.str, e->value.len), SD_OK);
        assert_int_equal(sd_buf_append_byte(&b, '\n'), SD_OK);
    }
    assert_int_equal(sd_buf_append_byte(&b, 0), SD_OK);
    size_t len;
    return (char *)sd_buf_take(&b, &len);
}

static void path_in(char *out, size_t n, const char *file)
{
    snprintf(out, n, "%s/%s", dir, file);
}

/* ---------------------------------------------------------------- tests */

static void test_record_replay_is_byte_identical(void **state)
{
    char a[128], b[128], t[128];
    sd_err err;
    sd_collection *col;
    (void)state;
    path_in(a, sizeof(a), "orders-a.schedule");
    path_in(b, sizeof(b), "orders-b.schedule");
    path_in(t, sizeof(t), "orders-tampered.schedule");

    sd_pipeline *p = orders_pipeline(0, &col);
    sd_status st = run(p, "7", "one_element", a, NULL, NULL, &err);
    if (st != SD_OK) {
        fail_msg("recording: %s", sd_err_msg(&err));
    }
    char *out_a = render(col);
    assert_non_null(strstr(out_a, "k#0:"));
    assert_non_null(strstr(out_a, "k#8:100\n")); /* after the clock step, last of k */
    sd_pipeline_destroy(p);
    size_t len_a;
    char *sched_a = slurp(a, &len_a);
    assert_non_null(strstr(sched_a, "sundial-schedule v1\nseed 7\nshape one_element\n"));
    assert_non_null(strstr(sched_a, " teststream clock=+120000\n"));
    assert_non_null(strstr(sched_a, " bundle "));
    assert_non_null(strstr(sched_a, " commit "));

    /* Replay: the same output, byte for byte (the replay itself checks each bundle's). */
    p = orders_pipeline(0, &col);
    st = run(p, NULL, NULL, NULL, a, NULL, &err);
    if (st != SD_OK) {
        fail_msg("replay: %s", sd_err_msg(&err));
    }
    char *out_r = render(col);
    assert_string_equal(out_r, out_a);
    sd_pipeline_destroy(p);

    /* Recording again: the same schedule file, byte for byte. */
    p = orders_pipeline(0, &col);
    assert_int_equal(run(p, "7", "one_element", b, NULL, NULL, &err), SD_OK);
    char *out_b = render(col);
    assert_string_equal(out_b, out_a);
    sd_pipeline_destroy(p);
    size_t len_b;
    char *sched_b = slurp(b, &len_b);
    assert_int_equal(len_b, len_a);
    assert_memory_equal(sched_b, sched_a, len_a);

    /* Tampered: another digest in the third bundle. The job fails naming that step. */
    char *tam = calloc(1, len_a + 1);
    assert_non_null(tam);
    memcpy(tam, sched_a, len_a);
    char *line = tam;
    for (int k = 0; k < 3; k++) {
        line = strstr(line + 1, " bundle ");
        assert_non_null(line);
    }
    char *dg = strstr(line, "digest=") + 7;
    dg[0] = dg[0] == 'f' ? 'e' : 'f';
    char *ls = line;
    while (ls > tam && ls[-1] != '\n') {
        ls--;
    }
    long step = strtol(ls + 5, NULL, 10);
    spit(t, tam);
    p = orders_pipeline(0, &col);
    assert_int_equal(run(p, NULL, NULL, NULL, t, NULL, &err), SD_ESTATE);
    char want[96];
    snprintf(want, sizeof(want), "schedule replay diverged at step %ld (", step);
    if (strstr(sd_err_msg(&err), want) == NULL ||
        strstr(sd_err_msg(&err), "the bundle holds other elements or timers") == NULL) {
        fail_msg("unclear divergence message: %s", sd_err_msg(&err));
    }
    sd_pipeline_destroy(p);

    /* Other input: the replay diverges where the element set differs. */
    p = orders_pipeline(1000, &col);
    assert_int_equal(run(p, NULL, NULL, NULL, a, NULL, &err), SD_ESTATE);
    if (strstr(sd_err_msg(&err), "schedule replay diverged at step ") == NULL ||
        strstr(sd_err_msg(&err), "the recording has \"") == NULL) {
        fail_msg("unclear divergence message: %s", sd_err_msg(&err));
    }
    sd_pipeline_destroy(p);

    /* Truncated: refused before the job runs anything, naming the file's problem. */
    memcpy(tam, sched_a, len_a + 1);
    *strstr(tam, "\nend ") = '\0';
    spit(t, tam);
    p = orders_pipeline(0, &col);
    assert_int_equal(run(p, NULL, NULL, NULL, t, NULL, &err), SD_ESTATE);
    if (strstr(sd_err_msg(&err), "sundial_replay_schedule:v1: schedule: the file ends at line") ==
            NULL ||
        strstr(sd_err_msg(&err), "truncated") == NULL) {
        fail_msg("unclear message for a truncated schedule: %s", sd_err_msg(&err));
    }
    sd_pipeline_destroy(p);

    free(tam);
    free(out_a);
    free(out_r);
    free(out_b);
    free(sched_a);
    free(sched_b);
    unlink(a);
    unlink(b);
    unlink(t);
}

static size_t files_in(const char *d)
{
    DIR *dp = opendir(d);
    size_t n = 0;
    assert_non_null(dp);
    for (struct dirent *e; (e = readdir(dp)) != NULL;) {
        n += e->d_name[0] != '.' ? 1 : 0;
    }
    closedir(dp);
    return n;
}

static void test_exploration_finds_order_bug(void **state)
{
    sd_err err;
    sd_run_result res;
    char edir[128];
    (void)state;
    path_in(edir, sizeof(edir), "explore");
    assert_int_equal(mkdir(edir, 0700), 0);

    /* The default schedule hides the bug: elements go oldest first. */
    sd_pipeline *p = order_bug_pipeline();
    assert_int_equal(run(p, NULL, NULL, NULL, NULL, NULL, &err), SD_OK);
    sd_pipeline_destroy(p);

    p = order_bug_pipeline();
    sd_run_options o = { .timeout_ms = 60000, .explore_seeds = 8, .explore_dir = edir };
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &o, &res, &err);
    sd_pipeline_destroy(p);
    assert_int_equal(st, SD_ESTATE);
    assert_int_equal(res.state, SD_RUN_FAILED);
    assert_true(res.explore_seed >= 1 && res.explore_seed <= 8);
    assert_non_null(res.explore_shape);
    assert_non_null(res.schedule_file);
    assert_true(res.explore_runs >= 1 && res.explore_runs <= 24);
    char want[256];
    snprintf(want, sizeof(want),
             "(seed %llu, bundle shape %s) failed; its schedule is recorded "
             "in %s",
             (unsigned long long)res.explore_seed, res.explore_shape, res.schedule_file);
    if (strstr(sd_err_msg(&err), want) == NULL || strstr(sd_err_msg(&err), "first a=") == NULL) {
        fail_msg("exploration message: %s", sd_err_msg(&err));
    }
    /* Only the failing run's schedule is kept, and it is a schedule of that seed and shape. */
    assert_int_equal(files_in(edir), 1);
    char *sched = slurp(res.schedule_file, NULL);
    char head[96];
    snprintf(head, sizeof(head), "sundial-schedule v1\nseed %llu\nshape %s\n",
             (unsigned long long)res.explore_seed, res.explore_shape);
    assert_non_null(strstr(sched, head));
    free(sched);

    /* Reproduced for good: replaying the file fails the same way, every time. */
    for (int i = 0; i < 3; i++) {
        sd_run_result again;
        p = order_bug_pipeline();
        assert_int_equal(run(p, NULL, NULL, NULL, res.schedule_file, &again, &err), SD_ESTATE);
        assert_int_equal(again.state, SD_RUN_FAILED);
        assert_non_null(again.error);
        assert_non_null(res.error);
        if (strstr(again.error, "schedule replay diverged") != NULL) {
            fail_msg("the replay diverged instead of reproducing the bug: %s", again.error);
        }
        /* The same failing assertion (the same wrong first value). */
        const char *wa = strstr(again.error, "first a="), *wr = strstr(res.error, "first a=");
        assert_non_null(wa);
        assert_non_null(wr);
        assert_memory_equal(wa, wr, 9);
        sd_run_result_deinit(&again);
        sd_pipeline_destroy(p);
    }
    unlink(res.schedule_file);
    sd_run_result_deinit(&res);
    rmdir(edir);
}

/* Run p with the pipeline options names[i] = values[i]. */
static sd_status run_opts(sd_pipeline *p,
                          const char *const *names,
                          const char *const *values,
                          size_t n,
                          sd_run_result *res,
                          sd_err *err)
{
    sd_run_options o = { .timeout_ms = 120000,
                         .n_options = n,
                         .option_names = (const char **)names,
                         .option_values = (const char **)values };
    sd_err_clear(err);
    return sd_pipeline_run(p, &o, res, err);
}

/*
 * Exploration as a pipeline option, for every SDK (beam:option:sundial_explore_seeds:v1): the
 * runner itself runs the job under seeds 1..K and the three bundle shapes inside its one Job
 * API job, ends it FAILED at the first run that fails, naming the run, its seed and shape and
 * its recorded schedule (only that one is kept), and the file replays the failure. A correct
 * pipeline ends DONE after all 3K runs; bad values are refused by name.
 */
static void test_exploration_option(void **state)
{
    (void)state;
    char edir[128];
    path_in(edir, sizeof(edir), "explore-option");
    assert_int_equal(mkdir(edir, 0700), 0);
    const char *names[2] = { "beam:option:sundial_explore_seeds:v1",
                             "beam:option:sundial_explore_dir:v1" };
    const char *values[2] = { "8", edir };
    sd_run_result res;
    sd_err err;

    sd_pipeline *p = order_bug_pipeline();
    sd_status st = run_opts(p, names, values, 2, &res, &err);
    sd_pipeline_destroy(p);
    assert_int_equal(st, SD_ESTATE);
    const char *msg = sd_err_msg(&err);
    const char *at = strstr(msg, "schedule exploration: run ");
    const char *rec = strstr(msg, "failed; its schedule is recorded in ");
    if (at == NULL || rec == NULL || strstr(msg, " of 24 (seed ") == NULL ||
        strstr(msg, "first a=") == NULL) {
        fail_msg("exploration message: %s", msg);
    }
    fprintf(stderr, "exploration option: %.300s\n", at);
    char file[256];
    const char *f0 = rec + strlen("failed; its schedule is recorded in ");
    size_t fl = strcspn(f0, " ");
    assert_true(fl > 0 && fl < sizeof(file));
    memcpy(file, f0, fl);
    file[fl] = '\0';
    assert_int_equal(strncmp(file, edir, strlen(edir)), 0);
    assert_int_equal(files_in(edir), 1); /* the passed runs' schedules are gone */
    sd_run_result_deinit(&res);

    /* The kept schedule replays the failure (the same wrong first value), not a divergence. */
    sd_run_result again;
    p = order_bug_pipeline();
    assert_int_equal(run(p, NULL, NULL, NULL, file, &again, &err), SD_ESTATE);
    sd_pipeline_destroy(p);
    assert_non_null(again.error);
    if (strstr(again.error, "schedule replay diverged") != NULL ||
        strstr(again.error, "first a=") == NULL) {
        fail_msg("the replay did not reproduce the bug: %s", again.error);
    }
    sd_run_result_deinit(&again);
    unlink(file);

    /* A pipeline without the bug passes every run: DONE after all six, nothing kept. */
    sd_collection *col = NULL;
    p = orders_pipeline(0, &col);
    values[0] = "2";
    atomic_store(&number_calls, 0);
    st = run_opts(p, names, values, 2, &res, &err);
    if (st != SD_OK) {
        fail_msg("exploring a correct pipeline: %s", sd_err_msg(&err));
    }
    assert_int_equal(res.state, SD_RUN_DONE);
    assert_int_equal(atomic_load(&number_calls), 6 * 13); /* 13 elements a run */
    assert_int_equal(files_in(edir), 0);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);

    /* Refused by name: out of range, not a number, with a replay. */
    static const char *const bad[] = { "0", "many", "1001" };
    for (size_t i = 0; i < 3; i++) {
        values[0] = bad[i];
        p = order_bug_pipeline();
        st = run_opts(p, names, values, 1, &res, &err);
        sd_pipeline_destroy(p);
        assert_int_not_equal(st, SD_OK);
        if (strstr(sd_err_msg(&err), "sundial_explore_seeds:v1: expected a number of seeds from "
                                     "1 to 1000") == NULL) {
            fail_msg("explore_seeds=%s: %s", bad[i], sd_err_msg(&err));
        }
        sd_run_result_deinit(&res);
    }
    rmdir(edir);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn number = { .process = number_process };
    static const sd_dofn first = { .process = first_process };
    if (!tc_register() || sd_register_dofn("s:number", &number) != SD_OK ||
        sd_register_dofn("s:first", &first) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    snprintf(dir, sizeof(dir), "schedule-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_replay_is_byte_identical),
        cmocka_unit_test(test_exploration_finds_order_bug),
        cmocka_unit_test(test_exploration_option),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(dir);
    return rc;
}
