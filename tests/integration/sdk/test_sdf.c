/*
 * Integration tests for splittable C DoFns on the embedded Sundial runner: an offset-range
 * reader that checkpoints itself every chunk (exact output, exact number of process calls),
 * restriction splitting, a poller that resumes every 3 s of processing time (four polls, in
 * well under a second of real time on the test clock), an SDF that forgets to claim its
 * restriction, one that resumes forever without claiming (failed as live-locked), and each
 * watermark estimator seen through a downstream event-time GroupByKey: an element emitted after the
 * estimate has passed its window is late and dropped.
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

#define N_RECORDS 1000

/* ================================================================ DoFns */

/* Config: varint chunk size. Reads records [0, N_RECORDS) of its element, chunk at a time,
 * checkpointing (resume, no delay) after each chunk; emits "<element>:<i>" at ts i ms. */
static int64_t config_int(sd_ctx *c, int64_t dflt)
{
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    int64_t v;
    return sd_read_int(&r, &v) == SD_OK ? v : dflt;
}

static sd_status range_initial(sd_ctx *c, void *state, sd_offset_range *out)
{
    (void)c;
    (void)state;
    out->from = 0;
    out->to = N_RECORDS;
    return SD_OK;
}

static sd_status range_split4(sd_ctx *c, void *state, sd_offset_range r)
{
    (void)state;
    int64_t step = (r.to - r.from + 3) / 4;
    for (int64_t at = r.from; at < r.to; at += step) {
        sd_offset_range part = { at, at + step < r.to ? at + step : r.to };
        sd_status st = sd_restriction_emit(c, part);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

static sd_status range_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t chunk = config_int(c, 100);
    sd_bytes name;
    sd_reader er = sd_reader_make(sd_ctx_element(c));
    if (sd_read_bytes(&er, &name) != SD_OK) {
        return sd_fail(c, "range: element is not a string");
    }
    sd_counter_add(c, "process_calls", 1);
    int64_t pos = sd_ctx_restriction(c).from;
    for (int64_t n = 0; n < chunk; n++, pos++) {
        if (!sd_try_claim(c, pos)) {
            return SD_OK;
        }
        char buf[64];
        int len = snprintf(buf, sizeof(buf), "%.*s:%lld", (int)name.len, (const char *)name.ptr,
                           (long long)pos);
        sd_buf b;
        sd_buf_init(&b, 0);
        sd_status st = sd_enc_bytes(&b, buf, (size_t)len);
        if (st == SD_OK) {
            st = sd_emit_ts(c, 0, sd_buf_bytes(&b), pos);
        }
        sd_buf_deinit(&b);
        if (st != SD_OK) {
            return st;
        }
    }
    return sd_resume(c, 0);
}

/* Polls every 3 s of processing time for 9 s: the restriction is [0, 9001) ms since the
 * start; a poll claims the next multiple of 3000 and resumes 3 s later. */
#define POLL_EVERY_MS 3000
#define POLL_FOR_MS   9000

static sd_status poll_initial(sd_ctx *c, void *state, sd_offset_range *out)
{
    (void)c;
    (void)state;
    out->from = 0;
    out->to = POLL_FOR_MS + 1;
    return SD_OK;
}

static sd_status poll_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t from = sd_ctx_restriction(c).from;
    int64_t at = (from + POLL_EVERY_MS - 1) / POLL_EVERY_MS * POLL_EVERY_MS;
    sd_counter_add(c, "polls", 1);
    if (!sd_try_claim(c, at)) {
        return SD_OK;
    }
    sd_status st = sd_emit_int(c, at);
    return st != SD_OK ? st : sd_resume(c, POLL_EVERY_MS);
}

/* Reads [0, 300) of its element, a millisecond per record, never checkpointing itself: only
 * a runner split request can cut it. Counts calls that start past 0 (split residuals). */
static sd_status slow_initial(sd_ctx *c, void *state, sd_offset_range *out)
{
    (void)c;
    (void)state;
    out->from = 0;
    out->to = 300;
    return SD_OK;
}

static sd_status slow_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes name;
    sd_reader er = sd_reader_make(sd_ctx_element(c));
    if (sd_read_bytes(&er, &name) != SD_OK) {
        return sd_fail(c, "slow: element is not a string");
    }
    int64_t pos = sd_ctx_restriction(c).from;
    sd_counter_add(c, "slow_calls", 1);
    if (pos > 0) {
        sd_counter_add(c, "split_residual_calls", 1);
    }
    for (; sd_try_claim(c, pos); pos++) {
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
        char buf[64];
        int len = snprintf(buf, sizeof(buf), "%.*s:%lld", (int)name.len, (const char *)name.ptr,
                           (long long)pos);
        sd_status st = sd_emit_str(c, buf, (size_t)len);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* Returns without claiming anything and without resuming: a DoFn bug. */
static sd_status lazy_process(sd_ctx *c, void *state)
{
    (void)c;
    (void)state;
    return SD_OK;
}

/* Resumes without claiming anything, after the config's varint delay (ms): a live-lock — the
 * restriction never moves, nothing is output, the job would spin forever. */
static sd_status spin_process(sd_ctx *c, void *state)
{
    (void)state;
    return sd_resume(c, config_int(c, 0));
}

/*
 * Watermark estimators. Two chunks of [0, 2): chunk 0 emits "a" and "b" at 10 s and 11 s and
 * checkpoints for 1 s; chunk 1 emits "late?" at 2 s and "future" at the config's varint
 * timestamp (when non-zero). With a manual estimator, chunk 0 sets the watermark to 20 s.
 */
static sd_status wm_initial(sd_ctx *c, void *state, sd_offset_range *out)
{
    (void)c;
    (void)state;
    out->from = 0;
    out->to = 2;
    return SD_OK;
}

static sd_status emit_str_at(sd_ctx *c, const char *s, sd_time ts)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = sd_enc_str(&b, s);
    if (st == SD_OK) {
        st = sd_emit_ts(c, 0, sd_buf_bytes(&b), ts);
    }
    sd_buf_deinit(&b);
    return st;
}

static sd_status wm_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t pos = sd_ctx_restriction(c).from;
    sd_status st = SD_OK;
    if (!sd_try_claim(c, pos)) {
        return SD_OK;
    }
    if (pos == 0) {
        if ((st = emit_str_at(c, "a", 10000)) == SD_OK &&
            (st = emit_str_at(c, "b", 11000)) == SD_OK &&
            (st = sd_watermark_set(c, 20000)) == SD_OK) {
            st = sd_resume(c, 1000);
        }
        return st;
    }
    if ((st = emit_str_at(c, "late?", 2000)) != SD_OK) {
        return st;
    }
    int64_t future = config_int(c, 0);
    if (future != 0) {
        st = emit_str_at(c, "future", future);
    }
    return st;
}

/* KV<string, string> -> "window start:value count" */
static sd_status fmt_group(sd_ctx *c, void *state)
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
    if (st != SD_OK) {
        return st;
    }
    char buf[64];
    sd_window w = sd_ctx_window(c);
    int len = snprintf(buf, sizeof(buf), "%lld:%lld", (long long)(w.start / 1000), (long long)n);
    return sd_emit_str(c, buf, (size_t)len);
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

/* ================================================================ helpers */

static sd_status run(sd_pipeline *p, sd_run_result *res, sd_err *err)
{
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err_clear(err);
    sd_status st = sd_pipeline_run(p, &opts, res, err);
    if (st != SD_OK) {
        fprintf(stderr, "run failed: %s\n", sd_err_msg(err));
    }
    return st;
}

static sd_pcoll *names(sd_pipeline *p, const char *const *ns, size_t n)
{
    return sd_create_strings(p, "Names", ns, n);
}

/* ================================================================ tests */

static void check_range(int64_t chunk, bool split, int64_t want_calls)
{
    sd_buf cfg, all;
    sd_buf_init(&cfg, 0);
    sd_buf_init(&all, 0);
    assert_int_equal(sd_enc_int(&cfg, chunk), SD_OK);
    sd_pipeline *p = sd_pipeline_create("sdf-range");
    const char *const ns[] = { "x", "y" };
    sd_pcoll *in = names(p, ns, 2);
    sd_pardo_spec spec = { .dofn = split ? "t:range4" : "t:range", .config = sd_buf_bytes(&cfg) };
    sd_pcoll *out = sd_pardo(p, "Read", in, &spec, NULL);
    static size_t offs[2 * N_RECORDS + 1];
    sd_bytes want[2 * N_RECORDS];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < N_RECORDS; i++) {
            char buf[32];
            snprintf(buf, sizeof(buf), "%s:%d", ns[k], i);
            offs[k * N_RECORDS + i] = all.len;
            assert_int_equal(sd_enc_str(&all, buf), SD_OK);
        }
    }
    offs[2 * N_RECORDS] = all.len;
    for (int i = 0; i < 2 * N_RECORDS; i++) {
        want[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_assert_contains_exactly(p, "Check", out, want, 2 * N_RECORDS);
    sd_assert_count(p, "Count", out, 2 * N_RECORDS);
    sd_run_result res;
    sd_err err;
    assert_int_equal(run(p, &res, &err), SD_OK);
    assert_int_equal(sd_run_result_counter(&res, "process_calls"), want_calls);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
    sd_buf_deinit(&all);
}

/* 1000 records per element in chunks of 100: ten process calls each, exact output. */
static void test_offset_range_self_checkpoints(void **state)
{
    (void)state;
    check_range(100, false, 2 * 10);
}

/* Split into 4 parts of 250, chunks of 100: 3 calls per part (100, 100, 50). */
static void test_split_restriction(void **state)
{
    (void)state;
    check_range(100, true, 2 * 4 * 3);
}

/* Chunks of 7: ceil(1000 / 7) = 143 calls per element. */
static void test_small_chunks(void **state)
{
    (void)state;
    check_range(7, false, 2 * 143);
}

static void test_polling_resume_delay(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("sdf-poll");
    const char *const ns[] = { "poller" };
    sd_pcoll *in = names(p, ns, 1);
    const sd_pcoder *outc[1] = { sd_pcoder_varint(p) };
    sd_pardo_spec spec = { .dofn = "t:poll", .n_outputs = 1, .output_coders = outc };
    sd_pcoll *out = sd_pardo(p, "Poll", in, &spec, NULL);
    const int64_t want_v[] = { 0, 3000, 6000, 9000 };
    sd_buf all;
    sd_buf_init(&all, 0);
    sd_bytes want[4];
    size_t offs[5];
    for (int i = 0; i < 4; i++) {
        offs[i] = all.len;
        assert_int_equal(sd_enc_int(&all, want_v[i]), SD_OK);
    }
    offs[4] = all.len;
    for (int i = 0; i < 4; i++) {
        want[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_assert_contains_exactly(p, "Check", out, want, 4);
    sd_run_result res;
    sd_err err;
    int64_t t0 = sd_mono_now_ms();
    assert_int_equal(run(p, &res, &err), SD_OK);
    int64_t elapsed = sd_mono_now_ms() - t0;
    /* Four polls (t = 0, 3, 6, 9 s), not thousands; 9 s of test clock in well under 1 s. */
    assert_int_equal(sd_run_result_counter(&res, "polls"), 4);
    fprintf(stderr, "polling SDF: 9 s of processing time in %lld ms\n", (long long)elapsed);
    assert_true(elapsed < 1000);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&all);
}

/* The runner asks for a split 100 ms into each bundle (direct_test_splits): the element in
 * process keeps the first part of its restriction, the rest comes back as a residual, and the
 * elements after it return to the runner (a channel split). Nothing is lost or repeated. */
static void test_runner_split_request(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("sdf-split");
    const char *const ns[] = { "x", "y" };
    sd_pcoll *in = names(p, ns, 2);
    sd_pardo_spec spec = { .dofn = "t:slow" };
    sd_pcoll *out = sd_pardo(p, "Slow", in, &spec, NULL);
    sd_buf all;
    sd_buf_init(&all, 0);
    static size_t offs[601];
    sd_bytes want[600];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 300; i++) {
            char buf[32];
            snprintf(buf, sizeof(buf), "%s:%d", ns[k], i);
            offs[k * 300 + i] = all.len;
            assert_int_equal(sd_enc_str(&all, buf), SD_OK);
        }
    }
    offs[600] = all.len;
    for (int i = 0; i < 600; i++) {
        want[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_assert_contains_exactly(p, "Check", out, want, 600);
    const char *names_[1] = { "beam:option:direct_test_splits:v1" };
    const char *values[1] = { "{\"Slow\": {\"timings\": [0.1], \"fractions\": [0.5]}}" };
    sd_run_options opts = {
        .timeout_ms = 60000, .n_options = 1, .option_names = names_, .option_values = values
    };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run failed: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    fprintf(stderr, "split SDF: %lld process calls, %lld on split residuals\n",
            (long long)sd_run_result_counter(&res, "slow_calls"),
            (long long)sd_run_result_counter(&res, "split_residual_calls"));
    assert_true(sd_run_result_counter(&res, "split_residual_calls") >= 1);
    assert_true(sd_run_result_counter(&res, "slow_calls") >= 3);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&all);
}

/* The split SDF pipeline: x and y through t:slow, its 600 outputs checked exactly. */
static sd_pipeline *slow_pipeline(const char *name, sd_buf *all)
{
    sd_pipeline *p = sd_pipeline_create(name);
    const char *const ns[] = { "x", "y" };
    sd_pardo_spec spec = { .dofn = "t:slow" };
    sd_pcoll *out = sd_pardo(p, "Slow", names(p, ns, 2), &spec, NULL);
    size_t offs[601];
    sd_bytes want[600];
    sd_buf_reset(all);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 300; i++) {
            char buf[32];
            snprintf(buf, sizeof(buf), "%s:%d", ns[k], i);
            offs[k * 300 + i] = all->len;
            assert_int_equal(sd_enc_str(all, buf), SD_OK);
        }
    }
    offs[600] = all->len;
    for (int i = 0; i < 600; i++) {
        want[i] = sd_bytes_make(all->data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_assert_contains_exactly(p, "Check", out, want, 600);
    return p;
}

/* Replace the first " answer=" value of the schedule at path with `hex`. */
static void tamper_answer(const char *path, const char *to, const char *hex)
{
    FILE *f = fopen(path, "r");
    FILE *g = fopen(to, "w");
    assert_non_null(f);
    assert_non_null(g);
    char line[65536];
    bool done = false;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *a = strstr(line, " answer=");
        if (a != NULL && !done) {
            fprintf(g, "%.*s answer=%s\n", (int)(a - line), line, hex);
            done = true;
        } else {
            fputs(line, g);
        }
    }
    fclose(f);
    fclose(g);
    assert_true(done);
}

/*
 * Runner-initiated splits in a schedule: recorded with the fraction asked, the SDK's answer
 * and the whole answer (its primary and residual roots). A replay asks for no split: it
 * applies the recorded one at dispatch — cuts the input, sends the split element as its
 * primary root, adds the recorded residual — so it reproduces every step and the same outputs
 * however fast the SDK runs, with the job's split option or without it. A recording whose
 * answer was damaged fails the replay with a message naming it.
 */
static void test_runner_split_in_schedule(void **state)
{
    (void)state;
    const char *path = "sdf-split.schedule";
    const char *bad = "sdf-split-bad.schedule";
    int64_t calls = 0, residual_calls = 0;
    sd_buf all;
    sd_buf_init(&all, 0);
    /* 0: record; 1: replay with the job's options; 2 and 3: replay alone; 4: damaged. */
    for (int run = 0; run < 5; run++) {
        sd_pipeline *p = slow_pipeline("sdf-split-schedule", &all);
        const char *names_[1] = { "beam:option:direct_test_splits:v1" };
        const char *values[1] = { "{\"Slow\": {\"timings\": [0.1], \"fractions\": [0.5]}}" };
        sd_run_options opts = { .timeout_ms = 60000,
                                .n_options = run < 2 ? 1 : 0,
                                .option_names = names_,
                                .option_values = values,
                                .record_schedule = run == 0 ? path : NULL,
                                .replay_schedule = run == 0   ? NULL
                                                   : run == 4 ? bad
                                                              : path };
        sd_run_result res;
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_pipeline_run(p, &opts, &res, &err);
        sd_pipeline_destroy(p);
        if (run == 4) {
            sd_run_result_deinit(&res);
            assert_int_not_equal(st, SD_OK);
            if (strstr(sd_err_msg(&err), "replaying its recorded split: ") == NULL) {
                fail_msg("damaged answer: %s", sd_err_msg(&err));
            }
            continue;
        }
        if (st != SD_OK) {
            fail_msg("run %d: %s", run, sd_err_msg(&err));
        }
        int64_t c = sd_run_result_counter(&res, "slow_calls");
        int64_t rc = sd_run_result_counter(&res, "split_residual_calls");
        sd_run_result_deinit(&res);
        if (run == 0) {
            calls = c;
            residual_calls = rc;
            FILE *f = fopen(path, "r");
            assert_non_null(f);
            char line[65536];
            bool split = false;
            while (fgets(line, sizeof(line), f) != NULL) {
                split |= strstr(line, " split ") != NULL &&
                         strstr(line, " asked=0.5 answered=1 answer=") != NULL;
            }
            fclose(f);
            assert_true(split);
            assert_true(residual_calls >= 1);
            tamper_answer(path, bad, "0a");
        } else {
            /* The same SDK calls: the split element's primary, its residual, the other one. */
            assert_int_equal(c, calls);
            assert_int_equal(rc, residual_calls);
        }
    }
    fprintf(stderr,
            "runner-initiated split: 3 of 3 replays reproduced every step (%lld process "
            "calls, %lld on split residuals)\n",
            (long long)calls, (long long)residual_calls);
    sd_buf_deinit(&all);
    remove(path);
    remove(bad);
}

static void test_unclaimed_restriction_fails(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("sdf-lazy");
    const char *const ns[] = { "x" };
    sd_pcoll *in = names(p, ns, 1);
    sd_pardo_spec spec = { .dofn = "t:lazy" };
    sd_pardo(p, "Lazy", in, &spec, NULL);
    sd_err err;
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, NULL, &err);
    assert_int_equal(st, SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "unclaimed"));
    sd_pipeline_destroy(p);
}

/* An SDF resuming forever without claiming fails the job as live-locked (with the bound and
 * the per-stage dump) within seconds, instead of spinning; `rounds` is the job's
 * sundial_livelock_rounds option (NULL: the default bound). Returns the time it took. */
static int64_t check_spin(int64_t delay_ms, const char *rounds, const char *want_bound)
{
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    assert_int_equal(sd_enc_int(&cfg, delay_ms), SD_OK);
    sd_pipeline *p = sd_pipeline_create("sdf-spin");
    const char *const ns[] = { "x" };
    sd_pcoll *in = names(p, ns, 1);
    sd_pardo_spec spec = { .dofn = "t:spin", .config = sd_buf_bytes(&cfg) };
    sd_pardo(p, "Spin", in, &spec, NULL);
    const char *names_[1] = { "beam:option:sundial_livelock_rounds:v1" };
    const char *values[1] = { rounds };
    sd_run_options opts = { .timeout_ms = 60000,
                            .n_options = rounds != NULL ? 1 : 0,
                            .option_names = names_,
                            .option_values = values };
    sd_err err;
    sd_err_clear(&err);
    int64_t t0 = sd_mono_now_ms();
    sd_status st = sd_pipeline_run(p, &opts, NULL, &err);
    int64_t elapsed = sd_mono_now_ms() - t0;
    const char *msg = sd_err_msg(&err);
    if (st == SD_OK || strstr(msg, "the job is live-locked: ") == NULL ||
        strstr(msg, want_bound) == NULL || strstr(msg, "Per-stage state:\n") == NULL ||
        strstr(msg, "(sdk):") == NULL) {
        fail_msg("expected a live-lock failure with \"%s\", got %s: %s", want_bound,
                 sd_status_name(st), msg);
    }
    fprintf(stderr, "spinning SDF (resume delay %lld ms, bound %s): failed in %lld ms\n",
            (long long)delay_ms, rounds != NULL ? rounds : "default", (long long)elapsed);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
    return elapsed;
}

static void test_spinning_sdf_fails_as_livelocked(void **state)
{
    (void)state;
    /* Resuming at once, and after 1 s the synthetic clock jumps over at once: both spin. */
    assert_true(check_spin(0, NULL, "(bound 1000)") < 10000);
    assert_true(check_spin(1000, NULL, "(bound 1000)") < 10000);
    /* The job's option sets the bound. */
    check_spin(0, "50", "(bound 50)");
}

static void test_livelock_option_errors(void **state)
{
    (void)state;
    const char *bad[] = { "many", "-1", "1.5" };
    for (size_t i = 0; i < 3; i++) {
        sd_pipeline *p = sd_pipeline_create("sdf-spin-option");
        const char *const ns[] = { "x" };
        sd_pcoll *in = names(p, ns, 1);
        sd_pardo_spec spec = { .dofn = "t:range" };
        sd_pardo(p, "Read", in, &spec, NULL);
        const char *names_[1] = { "beam:option:sundial_livelock_rounds:v1" };
        const char *values[1] = { bad[i] };
        sd_run_options opts = {
            .timeout_ms = 60000, .n_options = 1, .option_names = names_, .option_values = values
        };
        sd_err err;
        sd_err_clear(&err);
        assert_int_not_equal(sd_pipeline_run(p, &opts, NULL, &err), SD_OK);
        if (strstr(sd_err_msg(&err), "sundial_livelock_rounds:v1: expected a number of bundles >= "
                                     "0 (0 = never), got \"") == NULL) {
            fail_msg("option \"%s\": %s", bad[i], sd_err_msg(&err));
        }
        sd_pipeline_destroy(p);
    }
}

/* Through WindowInto(fixed 5 s) + GroupByKey: which windows' panes come out. */
static void check_estimator(sd_wm_spec wm, int64_t future, const char *const *want, size_t n)
{
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    assert_int_equal(sd_enc_int(&cfg, future), SD_OK);
    sd_pipeline *p = sd_pipeline_create("sdf-watermark");
    const char *const ns[] = { "src" };
    sd_pcoll *in = names(p, ns, 1);
    sd_pardo_spec spec = { .dofn = "t:wm", .config = sd_buf_bytes(&cfg), .watermark = wm };
    sd_pcoll *out = sd_pardo(p, "Read", in, &spec, NULL);
    sd_windowfn fixed = { .kind = SD_WINDOW_FIXED, .size_ms = 5000 };
    sd_pcoll *w = sd_window_into(p, "Window", out, &fixed);
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_string(p));
    sd_pcoll *keyed = sd_apply(p, "Key", w, "t:key_all", SD_BYTES_NULL, kvc);
    sd_pcoll *g = sd_group_by_key(p, "Group", keyed);
    sd_pcoll *f = sd_apply(p, "Format", g, "t:fmt_group", SD_BYTES_NULL, sd_pcoder_string(p));
    sd_assert_strings(p, "Check", f, want, n);
    sd_err err;
    assert_int_equal(run(p, NULL, &err), SD_OK);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
}

/* No estimator: the output watermark is held while the residual waits; nothing is late. */
static void test_estimator_none(void **state)
{
    (void)state;
    sd_wm_spec wm = { .kind = SD_WM_NONE };
    const char *const want[] = { "10:2", "0:1" };
    check_estimator(wm, 0, want, 2);
}

/* Monotonic: after chunk 0 the watermark is 11 s, so the 2 s element of chunk 1 is late. */
static void test_estimator_monotonic(void **state)
{
    (void)state;
    sd_wm_spec wm = { .kind = SD_WM_MONOTONIC };
    const char *const want[] = { "10:2" };
    check_estimator(wm, 0, want, 1);
}

/* Bounded delay 10 s: after chunk 0 the watermark is 1 s; window [0, 5 s) is still open. */
static void test_estimator_bounded_delay_keeps(void **state)
{
    (void)state;
    sd_wm_spec wm = { .kind = SD_WM_BOUNDED_DELAY, .delay = { .months = 0, .ms = 10000 } };
    const char *const want[] = { "10:2", "0:1" };
    check_estimator(wm, 0, want, 2);
}

/* Bounded delay 8 s: the watermark is 3 s, still before the window's end (5 s). 6 s: 5 s,
 * the window [0, 5 s) has closed and the element is late. */
static void test_estimator_bounded_delay_edges(void **state)
{
    (void)state;
    sd_wm_spec keep = { .kind = SD_WM_BOUNDED_DELAY, .delay = { .months = 0, .ms = 8000 } };
    const char *const want_keep[] = { "10:2", "0:1" };
    check_estimator(keep, 0, want_keep, 2);
    sd_wm_spec drop = { .kind = SD_WM_BOUNDED_DELAY, .delay = { .months = 0, .ms = 6000 } };
    const char *const want_drop[] = { "10:2" };
    check_estimator(drop, 0, want_drop, 1);
}

/* Bounded delay of one month: nothing at 1970-01-01 can be late. */
static void test_estimator_bounded_delay_months(void **state)
{
    (void)state;
    sd_wm_spec wm = { .kind = SD_WM_BOUNDED_DELAY, .delay = { .months = 1, .ms = 0 } };
    const char *const want[] = { "10:2", "0:1" };
    check_estimator(wm, 0, want, 2);
}

/* Manual: the DoFn said 20 s after chunk 0. */
static void test_estimator_manual(void **state)
{
    (void)state;
    sd_wm_spec wm = { .kind = SD_WM_MANUAL };
    const char *const want[] = { "10:2" };
    check_estimator(wm, 0, want, 1);
}

/* Wall time: the estimate is today, so 1970 is late but an element a day ahead is not. */
static void test_estimator_wall_time(void **state)
{
    (void)state;
    sd_wm_spec wm = { .kind = SD_WM_WALL_TIME };
    int64_t future = (sd_wall_now_ms() / 5000 + 17280) * 5000; /* a day ahead, window-aligned */
    char future_pane[64];
    snprintf(future_pane, sizeof(future_pane), "%lld:1", (long long)(future / 1000));
    const char *const want[] = { "10:2", future_pane };
    check_estimator(wm, future, want, 2);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn range = { .process = range_process, .initial_restriction = range_initial };
    static const sd_dofn range4 = { .process = range_process,
                                    .initial_restriction = range_initial,
                                    .split_restriction = range_split4 };
    static const sd_dofn poll = { .process = poll_process,
                                  .initial_restriction = poll_initial,
                                  .unbounded_per_element = true };
    static const sd_dofn lazy = { .process = lazy_process, .initial_restriction = range_initial };
    static const sd_dofn spin = { .process = spin_process, .initial_restriction = range_initial };
    static const sd_dofn slow = { .process = slow_process, .initial_restriction = slow_initial };
    static const sd_dofn wmfn = { .process = wm_process,
                                  .initial_restriction = wm_initial,
                                  .unbounded_per_element = true };
    static const sd_dofn fmt = { .process = fmt_group };
    static const sd_dofn key = { .process = key_all };
    if (sd_register_dofn("t:range", &range) != SD_OK ||
        sd_register_dofn("t:range4", &range4) != SD_OK ||
        sd_register_dofn("t:poll", &poll) != SD_OK || sd_register_dofn("t:lazy", &lazy) != SD_OK ||
        sd_register_dofn("t:spin", &spin) != SD_OK || sd_register_dofn("t:wm", &wmfn) != SD_OK ||
        sd_register_dofn("t:slow", &slow) != SD_OK ||
        sd_register_dofn("t:fmt_group", &fmt) != SD_OK ||
        sd_register_dofn("t:key_all", &key) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offset_range_self_checkpoints),
        cmocka_unit_test(test_split_restriction),
        cmocka_unit_test(test_small_chunks),
        cmocka_unit_test(test_polling_resume_delay),
        cmocka_unit_test(test_runner_split_request),
        cmocka_unit_test(test_runner_split_in_schedule),
        cmocka_unit_test(test_unclaimed_restriction_fails),
        cmocka_unit_test(test_spinning_sdf_fails_as_livelocked),
        cmocka_unit_test(test_livelock_option_errors),
        cmocka_unit_test(test_estimator_none),
        cmocka_unit_test(test_estimator_monotonic),
        cmocka_unit_test(test_estimator_bounded_delay_keeps),
        cmocka_unit_test(test_estimator_bounded_delay_edges),
        cmocka_unit_test(test_estimator_bounded_delay_months),
        cmocka_unit_test(test_estimator_manual),
        cmocka_unit_test(test_estimator_wall_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
