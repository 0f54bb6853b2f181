/*
 * Engine tests, GroupByKey concern: windowing and grouping.
 *
 * The window table (gen -> assign -> GBK -> collect) runs each WINDOW_CASES row, fixed,
 * sliding, session and global windows with and without lateness, under every bundle shape
 * through the case driver h_run_cases; the million-element GBK checks the grouping tables at
 * scale. WINDOW_CASES and build_windowed are shared with the OOM loop
 * (test_engine_robustness.c).
 */
#include "engine_harness.h"

/* ========================================================================================== */
/* Windowing: gen -> assign (SDK, assigns windows) -> GBK -> collect                           */
/* ========================================================================================== */

sd_status fn_gen_rows(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const window_case *wc = ctx;
    sd_status rc = SD_OK;
    (void)e;
    for (size_t i = 0; rc == SD_OK && i < wc->n_rows; i++) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, wc->rows[i].key, wc->rows[i].value);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "raw", wc->rows[i].ts, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    return rc;
}

/* WindowInto, SDK-side: fixed, sliding or session windows for each element. */
sd_status fn_assign(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const window_case *wc = ctx;
    const sd_windowing *ws = &wc->ws;
    sd_window wins[8];
    size_t n = 0;
    sd_pane p = SD_PANE_NO_FIRING;
    switch (ws->kind) {
    case SD_WINDOWFN_FIXED: {
        sd_time start = e->ts - ((e->ts - ws->offset_ms) % ws->size_ms + ws->size_ms) % ws->size_ms;
        wins[n++] = sd_window_interval(start, start + ws->size_ms);
        break;
    }
    case SD_WINDOWFN_SLIDING: {
        sd_time last =
            e->ts - ((e->ts - ws->offset_ms) % ws->period_ms + ws->period_ms) % ws->period_ms;
        for (sd_time s = last; s > e->ts - ws->size_ms && n < 8; s -= ws->period_ms) {
            wins[n++] = sd_window_interval(s, s + ws->size_ms);
        }
        break;
    }
    case SD_WINDOWFN_SESSIONS:
        wins[n++] = sd_window_interval(e->ts, e->ts + ws->gap_ms);
        break;
    default:
        wins[n++] = sd_window_global();
        break;
    }
    return h_emit(h, b, "windowed", e->ts, wins, n, &p, e->elem);
}

sd_status build_windowed(harness *h, window_case *wc)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "raw", wv_kv_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_rows, wc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "raw", windowed, 1, fn_assign, wc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

window_case WINDOW_CASES[] = {
    { .name = "fixed-10",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 },
      .rows = { { "a", 1, 1 }, { "a", 5, 5 }, { "a", 12, 12 }, { "b", 3, 3 } },
      .n_rows = 4,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=1,5", "k=a w=[10,20) ts=19 pane=07 v=12",
                "k=b w=[0,10) ts=9 pane=07 v=3" },
      .n_want = 3 },
    { .name = "fixed-10-negative-times",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 },
      .rows = { { "a", 1, -1 }, { "a", 2, -10 }, { "a", 3, -11 } },
      .n_rows = 3,
      .want = { "k=a w=[-10,0) ts=-1 pane=07 v=1,2", "k=a w=[-20,-10) ts=-11 pane=07 v=3" },
      .n_want = 2 },
    /* The minimum timestamp's fixed window starts before it (as Beam's FixedWindows puts
     * it): an interval window, not the engine's interned custom ones. */
    { .name = "fixed-10-minimum-timestamp",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 },
      .rows = { { "a", 1, SD_TIME_MIN }, { "a", 2, SD_TIME_MIN + 4 } },
      .n_rows = 2,
      .want = { "k=a w=[-9223372036854780,-9223372036854770) ts=-9223372036854771 pane=07 v=1,2" },
      .n_want = 1 },
    { .name = "sliding-10-every-5",
      .ws = { .kind = SD_WINDOWFN_SLIDING, .size_ms = 10, .period_ms = 5 },
      .rows = { { "a", 7, 7 }, { "a", 2, 2 } },
      .n_rows = 2,
      .want = { "k=a w=[-5,5) ts=4 pane=07 v=2", "k=a w=[0,10) ts=9 pane=07 v=2,7",
                "k=a w=[5,15) ts=14 pane=07 v=7" },
      .n_want = 3 },
    { .name = "sessions-gap-10",
      .ws = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 10 },
      .rows = { { "a", 1, 1 }, { "a", 5, 5 }, { "a", 30, 30 }, { "b", 2, 2 } },
      .n_rows = 4,
      .want = { "k=a w=[1,15) ts=14 pane=07 v=1,5", "k=a w=[30,40) ts=39 pane=07 v=30",
                "k=b w=[2,12) ts=11 pane=07 v=2" },
      .n_want = 3 },
    { .name = "sessions-bridge-merges-three",
      .ws = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 10 },
      .rows = { { "a", 1, 1 }, { "a", 15, 15 }, { "a", 8, 8 }, { "a", 40, 40 } },
      .n_rows = 4,
      .want = { "k=a w=[1,25) ts=24 pane=07 v=1,8,15", "k=a w=[40,50) ts=49 pane=07 v=40" },
      .n_want = 2 },
    { .name = "sessions-touching-do-not-merge",
      .ws = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 10 },
      .rows = { { "a", 1, 0 }, { "a", 2, 10 } },
      .n_rows = 2,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=1", "k=a w=[10,20) ts=19 pane=07 v=2" },
      .n_want = 2 },
    { .name = "fixed-earliest",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10, .output_time = SD_OUTPUT_TIME_EARLIEST },
      .rows = { { "a", 1, 4 }, { "a", 2, 2 }, { "a", 3, 8 } },
      .n_rows = 3,
      .want = { "k=a w=[0,10) ts=2 pane=07 v=1,2,3" },
      .n_want = 1 },
    { .name = "fixed-latest",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10, .output_time = SD_OUTPUT_TIME_LATEST },
      .rows = { { "a", 1, 4 }, { "a", 2, 2 }, { "a", 3, 8 } },
      .n_rows = 3,
      .want = { "k=a w=[0,10) ts=8 pane=07 v=1,2,3" },
      .n_want = 1 },
    { .name = "sessions-earliest",
      .ws = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 5, .output_time = SD_OUTPUT_TIME_EARLIEST },
      .rows = { { "a", 1, 7 }, { "a", 2, 3 } },
      .n_rows = 2,
      .want = { "k=a w=[3,12) ts=3 pane=07 v=1,2" },
      .n_want = 1 },
    /* The batch watermark jumps over the window's end and its clean-up time at once: the
     * on-time pane is not the last (the end-of-window step comes before the clean-up, which
     * has nothing new to emit with the default closing behaviour). */
    { .name = "fixed-with-lateness-batch",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10, .allowed_lateness_ms = 1000 },
      .rows = { { "a", 1, 1 } },
      .n_rows = 1,
      .want = { "k=a w=[0,10) ts=9 pane=05 v=1" },
      .n_want = 1 },
};

static const char *window_case_name(const void *r)
{
    return ((const window_case *)r)->name;
}

/* The row is its own fn_assign context, so the driver's scratch goes unused. */
static sd_status build_window_case(harness *h, const void *r, window_case *wc)
{
    (void)wc;
    return build_windowed(h, (window_case *)r);
}

static void check_window_case(harness *h, const void *r)
{
    const window_case *wc = r;
    h_expect(h, wc->want, wc->n_want);
    assert_int_equal(sd__em_gbk_groups(h->em, "gbk"), 0);
}

void test_windows_table(void **state)
{
    const h_case_table t = { .rows = WINDOW_CASES,
                             .n_rows = sizeof(WINDOW_CASES) / sizeof(WINDOW_CASES[0]),
                             .row_size = sizeof(window_case),
                             .name = window_case_name,
                             .build = build_window_case,
                             .check = check_window_case };
    (void)state;
    h_run_cases(&t);
}

/* ========================================================================================== */
/* Scale                                                                                      */
/* ========================================================================================== */

static sd_status fn_gen_many(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    size_t n = (size_t)(uintptr_t)ctx;
    sd_buf out;
    sd_status rc = SD_OK;
    (void)e;
    sd_buf_init(&out, 0);
    /* Encode directly (one output call per 64 KiB) to keep the harness out of the timing. */
    sd_window w = sd_window_global();
    sd_pane p = SD_PANE_NO_FIRING;
    for (size_t i = 0; rc == SD_OK && i < n; i++) {
        char key[16];
        snprintf(key, sizeof(key), "key%04zu", i % 1000);
        rc = sd_wv_encode_header(&out, c_gw, (sd_time)i, &w, 1, &p, NULL);
        if (rc == SD_OK) {
            rc = kv_bytes(&out, key, i & 0x7f);
        }
        if (rc == SD_OK && out.len > 65536) {
            rc = sd_em_bundle_output(h->em, b, "words", sd_buf_bytes(&out), &h->err);
            sd_buf_reset(&out);
        }
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_output(h->em, b, "words", sd_buf_bytes(&out), &h->err);
    }
    sd_buf_deinit(&out);
    return rc;
}

static sd_status fn_count_groups(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    size_t *total = ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes key;
    uint32_t n;
    (void)h;
    (void)b;
    assert_int_equal(sd_reader_lp(&r, &key), SD_OK);
    assert_int_equal(sd_reader_be32(&r, &n), SD_OK);
    assert_int_equal(sd_reader_left(&r), n); /* values 0..127 are one byte each */
    total[0] += n;
    total[1]++;
    return SD_OK;
}

void test_gbk_million(void **state)
{
    static const char *imp[] = { "imp" }, *words[] = { "words" }, *grouped[] = { "grouped" };
    size_t n = 1000000, total[2] = { 0, 0 };
    const char *env = getenv("SD_ENGINE_BENCH_N");
    harness h;
    (void)state;
    if (env != NULL) {
        n = (size_t)strtoull(env, NULL, 10);
    }
    h_shape shape = { "million", 0, 4 << 20, 1, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    h_pcoll(&h, "imp", wv_bytes_g, NULL);
    h_pcoll(&h, "words", wv_kv_g, NULL);
    h_pcoll(&h, "grouped", wv_grouped_g, NULL);
    h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(&h, "gen", SD_STAGE_SDK, "imp", words, 1, fn_gen_many, (void *)(uintptr_t)n);
    h_stage(&h, "gbk", SD_STAGE_GBK, "words", grouped, 1, NULL, NULL);
    h_stage(&h, "count", SD_STAGE_SDK, "grouped", NULL, 0, fn_count_groups, total);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    int64_t t0 = sd_mono_now_ns();
    h_run_ok(&h);
    int64_t ns = sd_mono_now_ns() - t0;
    assert_int_equal(total[0], n);
    assert_int_equal(total[1], n < 1000 ? n : 1000);
    fprintf(stderr,
            "gbk of %zu elements over 1000 keys: %.1f ms in all, %.1f ms in the engine "
            "(%.0f ns/element)\n",
            n, (double)ns / 1e6, (double)h.engine_ns / 1e6,
            (double)h.engine_ns / (double)(n ? n : 1));
    h_deinit(&h);
}

/* Passes each element on unchanged ("words" -> "words2"), in one output call per element. */
static sd_status fn_pass(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)ctx;
    return h_emit(h, b, "words2", e->ts, &e->win, 1, &e->pane, e->elem);
}

/*
 * The memory budget (em_spill.c): 300,000 elements made in one bundle (about 4.5 MiB of
 * output), through a ParDo and a GroupByKey of 1000 keys, under a 256 KiB budget. The output
 * chunks, the ParDo's pending elements and the GroupByKey's values go through the spill file;
 * the result is the same as without a budget, the engine's estimate of what it holds stays
 * near the budget (the unbudgeted run's peak is reported beside it), and every byte on file is
 * given back by the end.
 */
void test_gbk_memory_budget(void **state)
{
    static const char *imp[] = { "imp" }, *words[] = { "words" }, *words2[] = { "words2" },
                      *grouped[] = { "grouped" };
    const size_t n = 300000, limit = 256 * 1024;
    size_t peak[2], total[2][2] = { { 0, 0 }, { 0, 0 } };
    uint64_t spilled[2], live[2];
    (void)state;
    for (int run = 0; run < 2; run++) {
        harness h;
        sd_em_config cfg = { .memory_limit = run == 0 ? 0 : limit };
        h_shape shape = { "budget", 0, 64 * 1024, 1, false, SD_SHAPE_GREEDY, 0, 0 };
        assert_int_equal(h_init(&h, &shape, &cfg, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "words", wv_kv_g, NULL);
        h_pcoll(&h, "words2", wv_kv_g, NULL);
        h_pcoll(&h, "grouped", wv_grouped_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "gen", SD_STAGE_SDK, "imp", words, 1, fn_gen_many, (void *)(uintptr_t)n);
        h_stage(&h, "pass", SD_STAGE_SDK, "words", words2, 1, fn_pass, NULL);
        h_stage(&h, "gbk", SD_STAGE_GBK, "words2", grouped, 1, NULL, NULL);
        h_stage(&h, "count", SD_STAGE_SDK, "grouped", NULL, 0, fn_count_groups, total[run]);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        peak[run] = h.peak_mem;
        spilled[run] = h.em->spill_total;
        live[run] = h.em->spill_live;
        h_deinit(&h);
    }
    fprintf(stderr,
            "memory budget: peak estimate %zu KiB without a budget, %zu KiB with %zu KiB "
            "(%llu KiB spilled)\n",
            peak[0] / 1024, peak[1] / 1024, limit / 1024, (unsigned long long)spilled[1] / 1024);
    for (int run = 0; run < 2; run++) {
        assert_int_equal(total[run][0], n);
        assert_int_equal(total[run][1], 1000);
    }
    assert_int_equal(spilled[0], 0);
    assert_true(spilled[1] > 4 * 1024 * 1024); /* most of the data went through the file */
    assert_int_equal(live[1], 0);              /* and all of it was given back */
    assert_true(peak[0] > 8 * limit);
    /* The budget, plus what is never spilled: the 1000 groups' records and keys, one bundle's
     * input (64 KiB, in a buffer of up to twice that), an output chunk being filled. */
    assert_true(peak[1] < 2 * limit);
}

/* ========================================================================================== */
/* The per-element late policy (YDB's hopping-window example)                                 */
/* ========================================================================================== */

/* KV<pass, name>: drops pass "0" (a filter), puts the rest in hopping windows of 10 s every
 * 5 s. The filtered event still moved the source's watermark. */
static sd_status fn_filter_hop(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t v;
    (void)ctx;
    get_kv(e->elem, &key, &v);
    if (key.len == 1 && key.ptr[0] == '0') {
        return SD_OK;
    }
    sd_time start = e->ts / 5000 * 5000;
    sd_window wins[2] = { sd_window_interval(start - 5000, start + 5000),
                          sd_window_interval(start, start + 10000) };
    sd_pane p = SD_PANE_NO_FIRING;
    return h_emit(h, b, "hopped", e->ts, wins, 2, &p, e->elem);
}

/* The late-data observer's view: "stage reason ts window wm routed" of the last one. */
typedef struct late_seen {
    int n;
    char last[128];
} late_seen;

static void on_late(void *ctx, const sd_em_late *l)
{
    late_seen *ls = ctx;
    ls->n++;
    char w[48];
    if (l->window.global) {
        snprintf(w, sizeof(w), "G");
    } else {
        snprintf(w, sizeof(w), "[%lld,%lld)", (long long)l->window.start, (long long)l->window.end);
    }
    snprintf(ls->last, sizeof(ls->last), "%s %s ts=%lld w=%s wm=%lld %s", l->stage_id,
             sd_late_reason_name(l->reason), (long long)l->timestamp, w, (long long)l->watermark,
             l->routed ? "routed" : "dropped");
}

/*
 * Events a@40 s, b@42 s, c@50 s (filtered out), d@40 s, the source's watermark 5 s behind the
 * latest event. Beam's rule drops d from the window [35 s, 45 s), which has closed, but keeps
 * it in [40 s, 50 s); under the per-element policy (on the first transform, the filter) d is
 * dropped outright, behind the watermark (45 s) on arrival, and counted there.
 */
void test_late_policy_per_element(void **state)
{
    static const char *tsout[] = { "tsout" }, *hopped[] = { "hopped" }, *grouped[] = { "grouped" };
    static const char *const want_beam[] = { "k=1 w=[35000,45000) ts=44999 pane=07 v=1,2",
                                             "k=1 w=[40000,50000) ts=49999 pane=07 v=1,2,4" };
    static const char *const want_policy[] = { "k=1 w=[35000,45000) ts=44999 pane=07 v=1,2",
                                               "k=1 w=[40000,50000) ts=49999 pane=07 v=1,2" };
    (void)state;
    for (int policy = 0; policy < 2; policy++) {
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            sd_windowing hop = { .kind = SD_WINDOWFN_SLIDING, .size_ms = 10000, .period_ms = 5000 };
            late_seen seen = { 0, "" };
            sd_em_config cfg = { .on_late = on_late, .late_ctx = &seen };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            h_pcoll(&h, "tsout", wv_kv_g, NULL);
            h_pcoll(&h, "hopped", wv_kv_i, &hop);
            h_pcoll(&h, "grouped", wv_grouped_i, &hop);
            h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
            h_stage(&h, "filter", SD_STAGE_SDK, "tsout", hopped, 1, fn_filter_hop, NULL);
            h_stage(&h, "gbk", SD_STAGE_GBK, "hopped", grouped, 1, NULL, NULL);
            h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
            if (policy) {
                assert_int_equal(sd_em_set_drop_behind_watermark(h.em, "filter", &h.err), SD_OK);
            }
            ts_case tc = { .steps = { { 'e', "1", 1, 40000 },
                                      { 'w', NULL, 0, 35000 },
                                      { 'e', "1", 2, 42000 },
                                      { 'w', NULL, 0, 37000 },
                                      { 'e', "0", 3, 50000 },
                                      { 'w', NULL, 0, 45000 },
                                      { 'e', "1", 4, 40000 } },
                           .n_steps = 7 };
            add_ts_steps(&h, &tc);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            h_expect(&h, policy ? want_policy : want_beam, 2);
            sd_em_stage_stats filter, gbk;
            sd_em_stage_info(h.em, 1, &filter);
            sd_em_stage_info(h.em, 2, &gbk);
            assert_int_equal(filter.dropped_late, policy ? 1 : 0);
            assert_int_equal(gbk.dropped_late, policy ? 0 : 1);
            /* The observer saw it, with why, where and the watermark then. */
            assert_int_equal(seen.n, 1);
            assert_string_equal(seen.last,
                                policy ? "filter behind the watermark ts=40000 w=G wm=45000 dropped"
                                       : "gbk window expired ts=40000 w=[35000,45000) wm=45000 "
                                         "dropped");
            h_deinit(&h);
        }
    }
    /* Stages that consume nothing cannot take the policy; unknown ones are named. */
    harness h;
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    h_pcoll(&h, "tsout", wv_kv_g, NULL);
    h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    assert_int_equal(sd_em_set_drop_behind_watermark(h.em, "ts", &h.err), SD_EINVAL);
    sd_err_clear(&h.err);
    assert_int_equal(sd_em_set_drop_behind_watermark(h.em, "nope", &h.err), SD_ENOTFOUND);
    assert_non_null(strstr(sd_err_msg(&h.err), "nope"));
    h_deinit(&h);
}

/* ========================================================================================== */
/* Values in the GroupByKey's pool (em_vpool.c)                                               */
/* ========================================================================================== */

/*
 * Value i of the pooled-values pipeline: its key, event time and size. Most values are 256 to
 * 1,255 bytes over 23 keys (small groups, pooled); key "big" takes every tenth value, 4,000
 * bytes each (280 KB in the global window: past the pool's bound, the group moves to a buffer
 * of its own); key "mix" every thirteenth, 700 bytes or 9 (a tiny value moves the group's
 * pooled values to its own buffer).
 */
#define POOL_N 700

static void pool_value_of(size_t i, char *key, size_t key_cap, sd_time *ts, size_t *size)
{
    *ts = (sd_time)(i * 7 % 3001);
    if (i % 10 == 0) {
        snprintf(key, key_cap, "big");
        *size = 4000;
    } else if (i % 13 == 0) {
        snprintf(key, key_cap, "mix");
        *size = i % 2 ? 9 : 700;
    } else {
        snprintf(key, key_cap, "p%02zu", i % 23);
        *size = 256 + i * 37 % 1000;
    }
}

/* Its bytes: the index (4 bytes, little endian), the size (4), then a pattern of both. */
static void pool_value_bytes(size_t i, size_t size, uint8_t *out)
{
    for (size_t j = 0; j < 4; j++) {
        out[j] = (uint8_t)(i >> (8 * j));
        out[4 + j] = (uint8_t)(size >> (8 * j));
    }
    for (size_t j = 8; j < size; j++) {
        out[j] = (uint8_t)(i * 31 + j * 7);
    }
}

static sd_status fn_gen_pooled(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const sd_windowing *ws = ctx;
    sd_status rc = SD_OK;
    uint8_t value[4096];
    (void)e;
    for (size_t i = 0; rc == SD_OK && i < POOL_N; i++) {
        char key[8];
        sd_time ts;
        size_t size;
        pool_value_of(i, key, sizeof(key), &ts, &size);
        pool_value_bytes(i, size, value);
        sd_window w = sd_window_global();
        if (ws->kind == SD_WINDOWFN_FIXED) {
            w = sd_window_interval(ts - ts % ws->size_ms, ts - ts % ws->size_ms + ws->size_ms);
        } else if (ws->kind == SD_WINDOWFN_SESSIONS) {
            w = sd_window_interval(ts, ts + ws->gap_ms);
        }
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = sd_buf_put_lp(&kv, sd_bytes_str(key));
        if (rc == SD_OK) {
            rc = sd_buf_put_lp(&kv, sd_bytes_make(value, size));
        }
        sd_pane p = SD_PANE_NO_FIRING;
        if (rc == SD_OK) {
            rc = h_emit(h, b, "kv", ts, &w, 1, &p, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    return rc;
}

/* "k=KEY w=[s,e) n=N ids=SUM bytes=B", each value's bytes checked against its index. */
static sd_status fn_collect_pooled(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes key, v;
    uint32_t n;
    uint64_t ids = 0, bytes = 0;
    uint8_t want[4096];
    (void)b;
    (void)ctx;
    assert_int_equal(sd_reader_lp(&r, &key), SD_OK);
    assert_int_equal(sd_reader_be32(&r, &n), SD_OK);
    for (uint32_t k = 0; k < n; k++) {
        assert_int_equal(sd_reader_lp(&r, &v), SD_OK);
        assert_true(v.len >= 8 && v.len <= sizeof(want));
        size_t i = 0, size = 0;
        for (size_t j = 0; j < 4; j++) {
            i |= (size_t)v.ptr[j] << (8 * j);
            size |= (size_t)v.ptr[4 + j] << (8 * j);
        }
        assert_true(i < 100000);
        assert_int_equal(size, v.len);
        pool_value_bytes(i, size, want);
        assert_memory_equal(v.ptr, want, v.len);
        ids += i;
        bytes += v.len;
    }
    assert_true(sd_reader_done(&r));
    if (e->win.global) {
        h_record(h, "k=%.*s w=G n=%u ids=%llu bytes=%llu", (int)key.len, (const char *)key.ptr, n,
                 (unsigned long long)ids, (unsigned long long)bytes);
    } else {
        h_record(h, "k=%.*s w=[%lld,%lld) n=%u ids=%llu bytes=%llu", (int)key.len,
                 (const char *)key.ptr, (long long)e->win.start, (long long)e->win.end, n,
                 (unsigned long long)ids, (unsigned long long)bytes);
    }
    return SD_OK;
}

/* What the pipeline must give, worked out here: one pane a key and window (sessions: the
 * key's event times sorted, a session ending where the next one is a gap or more after). */
static size_t pooled_expected(const sd_windowing *ws, char (*want)[H_RESULT_LEN], size_t cap)
{
    size_t n = 0;
    static const char *const fixed_keys[] = { "big", "mix" };
    for (size_t k = 0; k < 25; k++) {
        char key[8];
        if (k < 2) {
            snprintf(key, sizeof(key), "%s", fixed_keys[k]);
        } else {
            snprintf(key, sizeof(key), "p%02zu", k - 2);
        }
        /* The key's values in event-time order (insertion sort: a few dozen). */
        sd_time ts[POOL_N];
        size_t idx[POOL_N], m = 0;
        for (size_t i = 0; i < POOL_N; i++) {
            char ki[8];
            sd_time t;
            size_t size;
            pool_value_of(i, ki, sizeof(ki), &t, &size);
            if (strcmp(ki, key) != 0) {
                continue;
            }
            size_t at = m++;
            while (at > 0 && ts[at - 1] > t) {
                ts[at] = ts[at - 1];
                idx[at] = idx[at - 1];
                at--;
            }
            ts[at] = t;
            idx[at] = i;
        }
        for (size_t a = 0; a < m;) {
            sd_time start, end;
            size_t z = a + 1;
            if (ws->kind == SD_WINDOWFN_FIXED) {
                start = ts[a] - ts[a] % ws->size_ms;
                end = start + ws->size_ms;
                while (z < m && ts[z] < end) {
                    z++;
                }
            } else if (ws->kind == SD_WINDOWFN_SESSIONS) {
                start = ts[a];
                end = ts[a] + ws->gap_ms;
                while (z < m && ts[z] < end) {
                    end = SD_MAX(end, ts[z] + ws->gap_ms);
                    z++;
                }
            } else {
                start = end = 0;
                z = m;
            }
            uint64_t ids = 0, bytes = 0;
            for (size_t q = a; q < z; q++) {
                char ki[8];
                sd_time t;
                size_t size;
                pool_value_of(idx[q], ki, sizeof(ki), &t, &size);
                ids += idx[q];
                bytes += size;
            }
            assert_true(n < cap);
            if (ws->kind == SD_WINDOWFN_GLOBAL) {
                snprintf(want[n++], H_RESULT_LEN, "k=%s w=G n=%zu ids=%llu bytes=%llu", key, z - a,
                         (unsigned long long)ids, (unsigned long long)bytes);
            } else {
                snprintf(want[n++], H_RESULT_LEN, "k=%s w=[%lld,%lld) n=%zu ids=%llu bytes=%llu",
                         key, (long long)start, (long long)end, z - a, (unsigned long long)ids,
                         (unsigned long long)bytes);
            }
            a = z;
        }
    }
    return n;
}

/*
 * Values of 256 bytes and more go through the GroupByKey's pool: global, fixed and session
 * windows (sessions merge, moving pooled values into one group's buffer), a group that
 * outgrows the pool and one that gets a tiny value, under every bundle shape (two of which
 * spill every group's values to file).
 * Every value comes out whole, in its group; the engine's invariant check (after every step)
 * checks the pool's accounting against the groups' chains.
 */
void test_gbk_pooled_values(void **state)
{
    static const char *imp[] = { "imp" }, *kv[] = { "kv" }, *grouped[] = { "grouped" };
    static char want[H_MAX_RESULTS][H_RESULT_LEN];
    const char *want_p[H_MAX_RESULTS];
    sd_coder *c_kvb = NULL, *c_iterb = NULL, *c_groupedb = NULL, *wv_kvb = NULL,
             *wv_groupedb = NULL;
    sd_err err = { 0 };
    (void)state;
    assert_int_equal(sd_coder_create(&c_kvb, &err, SD_CODER_KV, c_bytes, c_bytes, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&c_iterb, &err, SD_CODER_ITERABLE, c_bytes, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&c_groupedb, &err, SD_CODER_KV, c_bytes, c_iterb, NULL),
                     SD_OK);
    const sd_windowing cases[] = { { .kind = SD_WINDOWFN_GLOBAL },
                                   { .kind = SD_WINDOWFN_FIXED, .size_ms = 1000 },
                                   { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 400 } };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const sd_windowing *ws = &cases[c];
        sd_coder *wc = ws->kind == SD_WINDOWFN_GLOBAL ? c_gw : c_iw;
        assert_int_equal(sd_coder_create(&wv_kvb, &err, SD_CODER_WINDOWED_VALUE, c_kvb, wc, NULL),
                         SD_OK);
        assert_int_equal(
            sd_coder_create(&wv_groupedb, &err, SD_CODER_WINDOWED_VALUE, c_groupedb, wc, NULL),
            SD_OK);
        size_t n_want = pooled_expected(ws, want, H_MAX_RESULTS);
        for (size_t i = 0; i < n_want; i++) {
            want_p[i] = want[i];
        }
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
            h_pcoll(&h, "imp", wv_bytes_g, NULL);
            h_pcoll(&h, "kv", wv_kvb, ws);
            h_pcoll(&h, "grouped", wv_groupedb, ws);
            h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
            h_stage(&h, "gen", SD_STAGE_SDK, "imp", kv, 1, fn_gen_pooled, (void *)ws);
            h_stage(&h, "gbk", SD_STAGE_GBK, "kv", grouped, 1, NULL, NULL);
            h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_pooled, NULL);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            h_expect(&h, want_p, n_want);
            const sd__stage *gbk = sd__em_stage_at(h.em, 2);
            assert_int_equal(gbk->gbk.pool.live, 0); /* every value went */
            h_deinit(&h);
        }
        sd_coder_destroy(wv_kvb);
        sd_coder_destroy(wv_groupedb);
    }
    sd_coder_destroy(c_groupedb);
    sd_coder_destroy(c_iterb);
    sd_coder_destroy(c_kvb);
}

/*
 * The pool on its own: values of a chain that arrive together share one segment; a group's
 * values come back in order; blocks whose segments all went are given back; and when the
 * chains that stay pin blocks most of whose bytes are dead, compaction moves them into fresh
 * blocks and the old ones go (under AddressSanitizer every segment is a block of its own:
 * nothing is pinned, and compaction is not asked for).
 */
void test_vpool_chains_and_compaction(void **state)
{
    enum { CHAINS = 400, ROUNDS = 16, SIZE = 1000 };

    static sd__vchain chains[CHAINS];
    sd__vpool p = { 0 };
    uint8_t v[SIZE];
    sd_buf out;
    (void)state;
    sd_buf_init(&out, 0);
    memset(chains, 0, sizeof(chains));
    /* Two values of chain 0 in a row: one segment. */
    memset(v, 0xab, SIZE);
    assert_int_equal(sd__vpool_append(&p, &chains[0], sd_bytes_make(v, 300)), SD_OK);
    assert_int_equal(sd__vpool_append(&p, &chains[0], sd_bytes_make(v, 300)), SD_OK);
#if !defined(__SANITIZE_ADDRESS__)
    assert_ptr_equal(chains[0].head, chains[0].tail);
#endif
    assert_int_equal(chains[0].len, 600);
    sd__vchain_release(&chains[0]);
    assert_int_equal(p.live, 0);
    /* Round robin over the chains (6.4 MB): a segment per value. */
    for (size_t r = 0; r < ROUNDS; r++) {
        for (size_t c = 0; c < CHAINS; c++) {
            memset(v, (int)(c * 7 + r), SIZE);
            assert_int_equal(sd__vpool_append(&p, &chains[c], sd_bytes_make(v, SIZE)), SD_OK);
        }
    }
    size_t full = p.held;
    assert_true(full >= (size_t)CHAINS * ROUNDS * SIZE);
    assert_true(full < (size_t)CHAINS * ROUNDS * SIZE * 11 / 10 + 1024 * 1024); /* + a block */
    /* Nine chains in ten go: the tenth pins every block. */
    for (size_t c = 0; c < CHAINS; c++) {
        assert_int_not_equal(sd__vchain_footprint(&chains[c]), SIZE_MAX);
        if (c % 10 != 0) {
            sd__vchain_release(&chains[c]);
        }
    }
#if !defined(__SANITIZE_ADDRESS__)
    assert_true(p.held > full / 2); /* pinned */
    assert_true(sd__vpool_wants_compact(&p));
#endif
    if (sd__vpool_wants_compact(&p)) {
        sd__vpool_compact_begin(&p);
        for (size_t c = 0; c < CHAINS; c += 10) {
            assert_int_equal(sd__vpool_move(&p, &chains[c]), SD_OK);
            assert_ptr_equal(chains[c].head, chains[c].tail); /* one segment now */
        }
    }
    assert_false(sd__vpool_wants_compact(&p));
    assert_true(p.held < full / 4);
    /* The values, in order. */
    for (size_t c = 0; c < CHAINS; c += 10) {
        sd_buf_reset(&out);
        assert_int_equal(sd__vchain_copy(&chains[c], &out), SD_OK);
        assert_int_equal(out.len, (size_t)ROUNDS * SIZE);
        for (size_t r = 0; r < ROUNDS; r++) {
            assert_int_equal(out.data[r * SIZE], (uint8_t)(c * 7 + r));
            assert_int_equal(out.data[r * SIZE + SIZE - 1], (uint8_t)(c * 7 + r));
        }
        /* Moved to a buffer of its own (what a group that outgrows the pool does). */
        sd_buf own;
        sd_buf_init(&own, 0);
        assert_int_equal(sd__vchain_to_buf(&chains[c], &own, 10), SD_OK);
        assert_int_equal(own.len, out.len);
        assert_memory_equal(own.data, out.data, out.len);
        assert_null(chains[c].head);
        sd_buf_deinit(&own);
    }
    assert_int_equal(p.live, 0);
    sd__vpool_deinit(&p);
    sd_buf_deinit(&out);
}

/*
 * Compaction in a pipeline: a TestStream plays 1,000 values of 1,000 bytes over 50 keys, event
 * times within the first second, into sliding windows of 8 s every second: each value joins
 * eight windows, so the pool holds each value eight times, side by side. The watermark then
 * passes the end of seven of the windows: their panes go and leave every block seven eighths
 * dead, pinned by the last window's values; the GroupByKey compacts its pool (those values move
 * to fresh blocks), and the last window's panes still come out whole when the stream ends.
 * Under AddressSanitizer (a block a segment) nothing is pinned.
 */
#define COMPACT_N    1000
#define COMPACT_KEYS 50

void test_gbk_pool_compacts(void **state)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    static char want[8 * COMPACT_KEYS][H_RESULT_LEN];
    static const char *want_p[8 * COMPACT_KEYS];
    static sd_buf kvs[COMPACT_N];
    static sd_bytes els[COMPACT_N];
    static sd_time tss[COMPACT_N];
    sd_coder *c_kvb = NULL, *c_iterb = NULL, *c_groupedb = NULL, *wv_kvb_g = NULL, *wv_kvb_i = NULL,
             *wv_groupedb = NULL;
    sd_err err = { 0 };
    uint8_t value[1000];
    (void)state;
    assert_int_equal(sd_coder_create(&c_kvb, &err, SD_CODER_KV, c_bytes, c_bytes, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&c_iterb, &err, SD_CODER_ITERABLE, c_bytes, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&c_groupedb, &err, SD_CODER_KV, c_bytes, c_iterb, NULL),
                     SD_OK);
    assert_int_equal(sd_coder_create(&wv_kvb_g, &err, SD_CODER_WINDOWED_VALUE, c_kvb, c_gw, NULL),
                     SD_OK);
    assert_int_equal(sd_coder_create(&wv_kvb_i, &err, SD_CODER_WINDOWED_VALUE, c_kvb, c_iw, NULL),
                     SD_OK);
    assert_int_equal(
        sd_coder_create(&wv_groupedb, &err, SD_CODER_WINDOWED_VALUE, c_groupedb, c_iw, NULL),
        SD_OK);
    /* The elements, and what each (key, window) must give: every key's values in each. */
    uint64_t ids[COMPACT_KEYS] = { 0 };
    size_t counts[COMPACT_KEYS] = { 0 };
    for (size_t i = 0; i < COMPACT_N; i++) {
        char key[8];
        snprintf(key, sizeof(key), "c%02zu", i % COMPACT_KEYS);
        tss[i] = (sd_time)(i * 7 % 1000);
        pool_value_bytes(i, sizeof(value), value);
        sd_buf_init(&kvs[i], 0);
        assert_int_equal(sd_buf_put_lp(&kvs[i], sd_bytes_str(key)), SD_OK);
        assert_int_equal(sd_buf_put_lp(&kvs[i], sd_bytes_make(value, sizeof(value))), SD_OK);
        els[i] = sd_buf_bytes(&kvs[i]);
        ids[i % COMPACT_KEYS] += i;
        counts[i % COMPACT_KEYS]++;
    }
    size_t n_want = 0;
    for (long long start = -7000; start <= 0; start += 1000) {
        for (size_t k = 0; k < COMPACT_KEYS; k++) {
            snprintf(want[n_want], H_RESULT_LEN, "k=c%02zu w=[%lld,%lld) n=%zu ids=%llu bytes=%zu",
                     k, start, start + 8000, counts[k], (unsigned long long)ids[k],
                     counts[k] * sizeof(value));
            want_p[n_want] = want[n_want];
            n_want++;
        }
    }
    window_case wc = { .name = "sliding-8s-every-1s",
                       .ws = { .kind = SD_WINDOWFN_SLIDING, .size_ms = 8000, .period_ms = 1000 } };
    const size_t shapes[] = { 0, 3, 6 }; /* greedy, three in flight, seeded */
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[shapes[s]], NULL, false), SD_OK);
        h_pcoll(&h, "tsout", wv_kvb_g, NULL);
        h_pcoll(&h, "windowed", wv_kvb_i, &wc.ws);
        h_pcoll(&h, "grouped", wv_groupedb, &wc.ws);
        h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
        h_stage(&h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, &wc);
        h_stage(&h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
        h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_pooled, NULL);
        assert_int_equal(h_ts_elements(&h, "ts", "tsout", els, tss, COMPACT_N), SD_OK);
        assert_int_equal(h_ts_watermark(&h, "ts", "tsout", 7000), SD_OK);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want_p, n_want);
        const sd__stage *gbk = sd__em_stage_at(h.em, 2);
        assert_int_equal(gbk->gbk.pool.live, 0);
#if !defined(__SANITIZE_ADDRESS__)
        assert_true(gbk->gbk.pool.compactions > 0);
#endif
        h_deinit(&h);
    }
    for (size_t i = 0; i < COMPACT_N; i++) {
        sd_buf_deinit(&kvs[i]);
    }
    sd_coder_destroy(wv_groupedb);
    sd_coder_destroy(wv_kvb_i);
    sd_coder_destroy(wv_kvb_g);
    sd_coder_destroy(c_groupedb);
    sd_coder_destroy(c_iterb);
    sd_coder_destroy(c_kvb);
}
