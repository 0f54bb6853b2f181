/*
 * Engine tests, window merging by the SDK (em_merge.c): a GroupByKey whose input has a custom
 * window fn that merges sends its keys' windows to a merge stage (sd_em_set_merge_windows),
 * whose fake DoFn plays the SDK's beam:transform:merge_windows:v1 with one of two merge
 * functions, and the engine merges the groups as the answers come back.
 *
 *   gen -> assign (window [ts, ts + size)) -> windowed (CUSTOM) -> gbk -> collect
 *                                                                   |  ^
 *                                              merge_req -> merger -+  merge_res
 *
 * Merge functions: "overlap" merges overlapping intervals into their span (what Java's
 * MergeOverlappingIntervalWindows does: sessions, decided by the SDK), so its answers must equal
 * the native session merging's; "parity" merges every window of a key whose start is odd into
 * one spanning window, and likewise the even ones ("parity into first": into the window that
 * starts first, which the answer does not list as consumed) (Java's
 * WindowOddEvenMergingBuckets-like: windows that do not touch merge, and windows between them stay
 * apart). Every case runs under every bundle shape, bounded and streaming, with the default trigger
 * and with an AfterWatermark trigger (trigger states merge), and must give exactly the expected
 * panes. Bad merge answers (a window the key does not hold, one named twice, an unknown nonce) fail
 * the merge bundle with a message.
 */
#include "engine_harness.h"

static sd_coder *c_witer, *c_req, *c_pair, *c_pairs, *c_body, *c_res, *wv_req_g, *wv_res_g;

typedef enum merge_fn { MERGE_OVERLAP = 0, MERGE_PARITY, MERGE_PARITY_INTO_FIRST } merge_fn;

typedef struct merge_case {
    const char *name;
    merge_fn fn;
    int64_t size_ms; /* assign: [ts, ts + size) */
    bool bounded;
    bool trigger; /* AfterWatermark instead of the default trigger */
    bool accumulating;
    row rows[12];
    size_t n_rows;
    const char *want[12];
    size_t n_want;
} merge_case;

static sd_coder *mk2(sd_coder_kind k, const sd_coder *a, const sd_coder *b)
{
    sd_coder *c = NULL;
    sd_status rc = b != NULL ? sd_coder_create(&c, NULL, k, a, b, NULL)
                             : sd_coder_create(&c, NULL, k, a, NULL);
    assert_int_equal(rc, SD_OK);
    return c;
}

static int merge_coders_setup(void)
{
    c_witer = mk2(SD_CODER_ITERABLE, c_iw, NULL);
    c_req = mk2(SD_CODER_KV, c_bytes, c_witer);
    c_pair = mk2(SD_CODER_KV, c_iw, c_witer);
    c_pairs = mk2(SD_CODER_ITERABLE, c_pair, NULL);
    c_body = mk2(SD_CODER_KV, c_witer, c_pairs);
    c_res = mk2(SD_CODER_KV, c_bytes, c_body);
    wv_req_g = mk2(SD_CODER_WINDOWED_VALUE, c_req, c_gw);
    wv_res_g = mk2(SD_CODER_WINDOWED_VALUE, c_res, c_gw);
    return 0;
}

static void merge_coders_teardown(void)
{
    sd_coder *all[] = { c_witer, c_req, c_pair, c_pairs, c_body, c_res, wv_req_g, wv_res_g };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sd_coder_destroy(all[i]);
    }
}

/* WindowInto with a custom window fn (SDK-side): [ts, ts + size). */
static sd_status fn_assign_custom(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const merge_case *mc = ctx;
    sd_window w = sd_window_interval(e->ts, e->ts + mc->size_ms);
    sd_pane p = SD_PANE_NO_FIRING;
    return h_emit(h, b, "windowed", e->ts, &w, 1, &p, e->elem);
}

static sd_status fn_gen_merge_rows(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const merge_case *mc = ctx;
    sd_status rc = SD_OK;
    (void)e;
    for (size_t i = 0; rc == SD_OK && i < mc->n_rows; i++) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, mc->rows[i].key, mc->rows[i].value);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "raw", mc->rows[i].ts, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    return rc;
}

#define MAX_WINS 32

/* Which merged group window i belongs to (its lowest member's index), by the merge fn. */
static void merge_classes(merge_fn fn, const sd_window *w, size_t n, size_t *cls)
{
    for (size_t i = 0; i < n; i++) {
        cls[i] = i;
    }
    bool moved = true;
    while (moved) { /* union until stable: overlap is transitive through the span */
        moved = false;
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < n; j++) {
                bool same = fn != MERGE_OVERLAP
                                ? ((w[i].start % 2 + 2) % 2) == ((w[j].start % 2 + 2) % 2)
                                : w[i].start < w[j].end && w[j].start < w[i].end;
                size_t ci = cls[i], cj = cls[j];
                if (same && ci != cj) {
                    size_t lo = ci < cj ? ci : cj;
                    for (size_t k = 0; k < n; k++) {
                        if (cls[k] == ci || cls[k] == cj) {
                            cls[k] = lo;
                        }
                    }
                    moved = true;
                }
            }
        }
    }
}

/*
 * The fake SDK merge_windows. For overlap, a class's windows overlap pairwise only through
 * chains, so classes are computed on spans by repeating the union until stable.
 */
static sd_status fn_merger(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const merge_case *mc = ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes nonce;
    uint32_t n32;
    assert_int_equal(sd_reader_lp(&r, &nonce), SD_OK);
    assert_int_equal(sd_reader_be32(&r, &n32), SD_OK);
    assert_true(n32 <= MAX_WINS);
    sd_window w[MAX_WINS];
    size_t cls[MAX_WINS], n = n32;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(sd_window_decode(c_iw, &r, &w[i], NULL), SD_OK);
    }
    assert_true(sd_reader_done(&r));
    merge_classes(mc->fn, w, n, cls);
    sd_buf out;
    sd_buf_init(&out, 0);
    sd_status rc = sd_buf_put_lp(&out, nonce);
    size_t n_single = 0, n_merged = 0;
    for (size_t i = 0; i < n; i++) {
        size_t members = 0;
        for (size_t j = 0; j < n; j++) {
            members += cls[j] == cls[i] ? 1 : 0;
        }
        n_single += members == 1 ? 1 : 0;
        n_merged += members > 1 && cls[i] == i ? 1 : 0;
    }
    if (rc == SD_OK) {
        rc = sd_iterable_encode_begin(&out, n_single);
    }
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        size_t members = 0;
        for (size_t j = 0; j < n; j++) {
            members += cls[j] == cls[i] ? 1 : 0;
        }
        if (members == 1) {
            rc = sd_window_encode(c_iw, &w[i], &out, NULL);
        }
    }
    if (rc == SD_OK) {
        rc = sd_iterable_encode_begin(&out, n_merged);
    }
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        size_t members = 0;
        sd_window span = w[i];
        for (size_t j = 0; j < n; j++) {
            if (cls[j] == cls[i]) {
                members++;
                span.start = SD_MIN(span.start, w[j].start);
                span.end = SD_MAX(span.end, w[j].end);
            }
        }
        if (members < 2 || cls[i] != i) {
            continue;
        }
        /* Into first: the merged window is the member that starts first, and the answer does
         * not list it among the consumed (the engine must fold it in all the same). */
        size_t first = SIZE_MAX;
        for (size_t j = 0; mc->fn == MERGE_PARITY_INTO_FIRST && j < n; j++) {
            if (cls[j] == cls[i] && (first == SIZE_MAX || w[j].start < w[first].start)) {
                first = j;
            }
        }
        if (first != SIZE_MAX) {
            span = w[first];
            members--;
        }
        rc = sd_window_encode(c_iw, &span, &out, NULL);
        if (rc == SD_OK) {
            rc = sd_iterable_encode_begin(&out, members);
        }
        for (size_t j = n; j-- > 0 && rc == SD_OK;) { /* reversed: order must not matter */
            if (cls[j] == cls[i] && j != first) {
                rc = sd_window_encode(c_iw, &w[j], &out, NULL);
            }
        }
    }
    if (rc == SD_OK) {
        sd_window g = sd_window_global();
        sd_pane p = SD_PANE_NO_FIRING;
        rc = h_emit(h, b, "merge_res", SD_TIME_MIN, &g, 1, &p, sd_buf_bytes(&out));
    }
    sd_buf_deinit(&out);
    return rc;
}

static const sd_trigger AFTER_WATERMARK = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW };

static sd_status build_merge(harness *h, const merge_case *mc)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" }, *res[] = { "merge_res" };
    sd_windowing ws = { .kind = SD_WINDOWFN_CUSTOM,
                        .accumulating = mc->accumulating,
                        .trigger = mc->trigger ? &AFTER_WATERMARK : NULL };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "raw", wv_kv_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", wv_kv_i, &ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_i, &ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "merge_req", wv_req_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "merge_res", wv_res_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_merge_rows, (void *)mc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "raw", windowed, 1, fn_assign_custom, (void *)mc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_set_merge_windows(h->em, "gbk", "merge_req", "merge_res", &h->err);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "merger", SD_STAGE_SDK, "merge_req", res, 1, fn_merger, (void *)mc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

/* Rows a:1@1 a:12@12 a:9@9 a:6@6 a:3@3 b:3@3 b:30@30: under overlap with size 4 the five
 * windows of a chain into [1, 16) (each merging round may see only some of them). */
#define SESSION_ROWS                                                         \
    .rows = { { "a", 1, 1 }, { "a", 12, 12 }, { "a", 9, 9 },  { "a", 6, 6 }, \
              { "a", 3, 3 }, { "b", 3, 3 },   { "b", 30, 30 } },             \
    .n_rows = 7
#define SESSION_WANT                                                                     \
    .want = { "k=a w=[1,16) ts=15 pane=07 v=1,3,6,9,12", "k=b w=[3,7) ts=6 pane=07 v=3", \
              "k=b w=[30,34) ts=33 pane=07 v=30" },                                      \
    .n_want = 3
/* Rows a:1@1 a:2@2 a:3@3 a:5@5 a:8@8 b:4@4, windows [ts, ts + 100): they all overlap, but
 * only those of one parity merge. (With windows that end before later elements arrive the
 * streaming answer depends on when the watermark passes them, as in Beam: not for this table.) */
#define PARITY_ROWS                                          \
    .rows = { { "a", 1, 1 }, { "a", 2, 2 }, { "a", 3, 3 },   \
              { "a", 5, 5 }, { "a", 8, 8 }, { "b", 4, 4 } }, \
    .n_rows = 6
#define PARITY_WANT                                                                         \
    .want = { "k=a w=[1,105) ts=104 pane=07 v=1,3,5", "k=a w=[2,108) ts=107 pane=07 v=2,8", \
              "k=b w=[4,104) ts=103 pane=07 v=4" },                                         \
    .n_want = 3

static const merge_case MERGE_CASES[] = {
    { .name = "overlap-streaming", .fn = MERGE_OVERLAP, .size_ms = 4, SESSION_ROWS, SESSION_WANT },
    { .name = "overlap-bounded",
      .fn = MERGE_OVERLAP,
      .size_ms = 4,
      .bounded = true,
      SESSION_ROWS,
      SESSION_WANT },
    { .name = "overlap-after-watermark",
      .fn = MERGE_OVERLAP,
      .size_ms = 4,
      .trigger = true,
      SESSION_ROWS,
      SESSION_WANT },
    { .name = "parity-streaming", .fn = MERGE_PARITY, .size_ms = 100, PARITY_ROWS, PARITY_WANT },
    { .name = "parity-bounded",
      .fn = MERGE_PARITY,
      .size_ms = 100,
      .bounded = true,
      PARITY_ROWS,
      PARITY_WANT },
    { .name = "parity-after-watermark-accumulating",
      .fn = MERGE_PARITY,
      .size_ms = 100,
      .trigger = true,
      .accumulating = true,
      PARITY_ROWS,
      PARITY_WANT },
    { .name = "parity-into-an-existing-window",
      .fn = MERGE_PARITY_INTO_FIRST,
      .size_ms = 100,
      PARITY_ROWS,
      .want = { "k=a w=[1,101) ts=100 pane=07 v=1,3,5", "k=a w=[2,102) ts=101 pane=07 v=2,8",
                "k=b w=[4,104) ts=103 pane=07 v=4" },
      .n_want = 3 },
    { .name = "no-merges",
      .fn = MERGE_OVERLAP,
      .size_ms = 2,
      .rows = { { "a", 1, 1 }, { "a", 4, 4 } },
      .n_rows = 2,
      .want = { "k=a w=[1,3) ts=2 pane=07 v=1", "k=a w=[4,6) ts=5 pane=07 v=4" },
      .n_want = 2 },
};

static const char *merge_case_name(const void *r)
{
    return ((const merge_case *)r)->name;
}

static sd_status merge_case_build(harness *h, const void *r, window_case *wc)
{
    (void)wc;
    return build_merge(h, r);
}

static void merge_case_check(harness *h, const void *r)
{
    const merge_case *mc = r;
    h_expect(h, mc->want, mc->n_want);
    assert_int_equal(sd__em_gbk_groups(h->em, "gbk"), 0);
}

void test_merge_windows_cases(void **state)
{
    (void)state;
    merge_coders_setup();
    for (int bounded = 0; bounded < 2; bounded++) {
        merge_case rows[sizeof(MERGE_CASES) / sizeof(MERGE_CASES[0])];
        size_t n = 0;
        for (size_t i = 0; i < sizeof(MERGE_CASES) / sizeof(MERGE_CASES[0]); i++) {
            if (MERGE_CASES[i].bounded == (bounded == 1)) {
                rows[n++] = MERGE_CASES[i];
            }
        }
        sd_em_config cfg = { .bounded = bounded == 1 };
        h_case_table t = { .rows = rows,
                           .n_rows = n,
                           .row_size = sizeof(merge_case),
                           .cfg = &cfg,
                           .name = merge_case_name,
                           .build = merge_case_build,
                           .check = merge_case_check };
        h_run_cases(&t);
    }
    merge_coders_teardown();
}

/* ========================================================================================== */
/* Bad answers and bad registrations                                                          */
/* ========================================================================================== */

typedef enum bad_kind { BAD_UNKNOWN_WINDOW = 0, BAD_TWICE, BAD_NONCE } bad_kind;

static bad_kind BAD;

/* Answers a merge request wrongly. */
static sd_status fn_bad_merger(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes nonce;
    uint32_t n;
    sd_window w;
    assert_int_equal(sd_reader_lp(&r, &nonce), SD_OK);
    assert_int_equal(sd_reader_be32(&r, &n), SD_OK);
    assert_int_equal(sd_window_decode(c_iw, &r, &w, NULL), SD_OK);
    sd_buf out;
    sd_buf_init(&out, 0);
    sd_window other = sd_window_interval(100, 200);
    assert_int_equal(sd_buf_put_lp(&out, BAD == BAD_NONCE ? sd_bytes_str("zz") : nonce), SD_OK);
    assert_int_equal(sd_iterable_encode_begin(&out, 0), SD_OK);
    assert_int_equal(sd_iterable_encode_begin(&out, 1), SD_OK);
    assert_int_equal(sd_window_encode(c_iw, &w, &out, NULL), SD_OK);
    assert_int_equal(sd_iterable_encode_begin(&out, 2), SD_OK);
    assert_int_equal(sd_window_encode(c_iw, &w, &out, NULL), SD_OK);
    assert_int_equal(sd_window_encode(c_iw, BAD == BAD_UNKNOWN_WINDOW ? &other : &w, &out, NULL),
                     SD_OK);
    sd_window g = sd_window_global();
    sd_pane p = SD_PANE_NO_FIRING;
    sd_status rc = h_emit(h, b, "merge_res", SD_TIME_MIN, &g, 1, &p, sd_buf_bytes(&out));
    sd_buf_deinit(&out);
    return rc;
}

void test_merge_windows_bad_answers(void **state)
{
    (void)state;
    merge_coders_setup();
    static const char *expect[] = { "which the key does not hold", "twice",
                                    "no request of gbk \"gbk\" is waiting for" };
    for (int k = 0; k < 3; k++) {
        BAD = (bad_kind)k;
        merge_case mc = { .name = "bad", .size_ms = 4, .rows = { { "a", 1, 1 } }, .n_rows = 1 };
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[0], NULL, true), SD_OK);
        assert_int_equal(build_merge(&h, &mc), SD_OK);
        for (size_t i = 0; i < h.n_fns; i++) {
            if (strcmp(h.fns[i].stage, "merger") == 0) {
                h.fns[i].fn = fn_bad_merger;
            }
        }
        sd_status rc = h_run(&h);
        assert_int_equal(rc, SD_EPROTO);
        if (strstr(sd_err_msg(&h.err), expect[k]) == NULL) {
            fail_msg("bad answer %d: %s", k, sd_err_msg(&h.err));
        }
        h_deinit(&h);
    }
    merge_coders_teardown();
}

void test_merge_windows_registration(void **state)
{
    (void)state;
    merge_coders_setup();
    static const char *imp[] = { "imp" }, *grouped[] = { "grouped" };
    harness h;
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, true), SD_OK);
    sd_windowing fixed = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 };
    assert_int_equal(h_pcoll(&h, "imp", wv_bytes_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(&h, "windowed", wv_kv_i, &fixed), SD_OK);
    assert_int_equal(h_pcoll(&h, "grouped", wv_grouped_i, &fixed), SD_OK);
    assert_int_equal(h_pcoll(&h, "merge_req", wv_req_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(&h, "merge_res", wv_res_g, NULL), SD_OK);
    assert_int_equal(h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL), SD_OK);
    assert_int_equal(h_stage(&h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL), SD_OK);
    /* Not a custom window fn. */
    assert_int_equal(sd_em_set_merge_windows(h.em, "gbk", "merge_req", "merge_res", &h.err),
                     SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&h.err), "custom window fn"));
    /* Not a GBK; unknown names. */
    assert_int_equal(sd_em_set_merge_windows(h.em, "impulse", "merge_req", "merge_res", &h.err),
                     SD_EINVAL);
    assert_int_equal(sd_em_set_merge_windows(h.em, "gbk", "nope", "merge_res", &h.err),
                     SD_ENOTFOUND);
    h_deinit(&h);
    /* Wrong coder shapes: the results PCollection given as the requests. */
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, true), SD_OK);
    sd_windowing custom = { .kind = SD_WINDOWFN_CUSTOM };
    assert_int_equal(h_pcoll(&h, "windowed", wv_kv_i, &custom), SD_OK);
    assert_int_equal(h_pcoll(&h, "grouped", wv_grouped_i, &custom), SD_OK);
    assert_int_equal(h_pcoll(&h, "merge_req", wv_req_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(&h, "merge_res", wv_res_g, NULL), SD_OK);
    assert_int_equal(h_stage(&h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL), SD_OK);
    assert_int_equal(sd_em_set_merge_windows(h.em, "gbk", "merge_res", "merge_req", &h.err),
                     SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&h.err), "KV<bytes, iterable<W>>"));
    assert_int_equal(sd_em_set_merge_windows(h.em, "gbk", "merge_req", "merge_res", &h.err), SD_OK);
    assert_int_equal(sd_em_set_merge_windows(h.em, "gbk", "merge_req", "merge_res", &h.err),
                     SD_EINVAL);
    h_deinit(&h);
    merge_coders_teardown();
}

/* ========================================================================================== */
/* Out of memory                                                                              */
/* ========================================================================================== */

/*
 * Fail allocation N = 1, 2, 3, ... of a merging pipeline (overlap and parity, one element per
 * bundle and several in flight): every failure surfaces as SD_ENOMEM (or the poisoned state),
 * nothing leaks (ASan), and the first run without a failure gives the answer.
 */
void test_merge_windows_oom(void **state)
{
    (void)state;
    merge_coders_setup();
    static const size_t cases[] = { 0, 4 }, shapes[] = { 1, 3 };
    for (size_t c = 0; c < 2; c++) {
        const merge_case *mc = &MERGE_CASES[cases[c]];
        long n;
        for (n = 1; n < 100000; n++) {
            harness h;
            sd_em_config cfg = { .bounded = mc->bounded };
            sd_alloc_fail_after(n, 1);
            sd_status rc = h_init(&h, &SHAPES[shapes[c]], &cfg, true);
            if (rc == SD_OK) {
                rc = build_merge(&h, mc);
            }
            if (rc == SD_OK) {
                rc = h_run(&h);
            }
            long injected = sd_alloc_injected_failures();
            sd_alloc_fail_after(0, 0);
            if (injected == 0) {
                if (rc != SD_OK) {
                    fail_msg("%s: clean run failed: %s (%s)", mc->name, sd_status_name(rc),
                             sd_err_msg(&h.err));
                }
                h_expect(&h, mc->want, mc->n_want);
                h_deinit(&h);
                break;
            }
            if (rc != SD_ENOMEM && rc != SD_ESTATE) {
                fail_msg("%s: allocation %ld: got %s (%s)", mc->name, n, sd_status_name(rc),
                         sd_err_msg(&h.err));
            }
            h_deinit(&h);
        }
        assert_true(n > 10);
    }
    merge_coders_teardown();
}

/* Answers nothing: the GBK waits for its merge; nothing else can happen. */
static sd_status fn_silent_merger(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)h;
    (void)b;
    (void)e;
    (void)ctx;
    return SD_OK;
}

/* A merge stage that never answers leaves the job stuck, not hanging; the dump says why. */
void test_merge_windows_unanswered_is_stuck(void **state)
{
    (void)state;
    merge_coders_setup();
    merge_case mc = { .name = "silent", .size_ms = 4, .rows = { { "a", 1, 1 } }, .n_rows = 1 };
    harness h;
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, true), SD_OK);
    assert_int_equal(build_merge(&h, &mc), SD_OK);
    for (size_t i = 0; i < h.n_fns; i++) {
        if (strcmp(h.fns[i].stage, "merger") == 0) {
            h.fns[i].fn = fn_silent_merger;
        }
    }
    assert_int_not_equal(h_run(&h), SD_OK);
    assert_int_equal(sd_buf_append_byte(&h.dump, 0), SD_OK); /* a C string from here */
    const char *dump = (const char *)sd_buf_bytes(&h.dump).ptr;
    assert_non_null(dump);
    if (strstr(dump, "merging_keys=1") == NULL) {
        fail_msg("dump lacks merging_keys=1: %.*s", (int)h.dump.len, dump);
    }
    h_deinit(&h);
    merge_coders_teardown();
}
