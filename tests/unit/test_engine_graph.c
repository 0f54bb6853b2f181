/*
 * Engine tests, graph concern: what a pipeline's shape does to the flow of elements.
 *
 * WordCount end to end (every stage's watermarks reach the end of time), Flatten with and
 * without inputs, side inputs (a reader waits for its producer), and the bundle-level
 * mechanics a graph relies on: channel splits, failed and retried bundles, bad output bytes,
 * the byte cap, the bundle output cap, the stuck dump, and the errors sd_em_add_stage and
 * sd_em_start report for a malformed graph. Each case uses the fake executor of
 * engine_harness.h and, where it says so, runs under every bundle shape in SHAPES.
 */
#include "engine_harness.h"

/* ========================================================================================== */
/* Wordcount: impulse -> split (SDK) -> GBK -> count (SDK)                                    */
/* ========================================================================================== */

static const char *const LINES[] = {
    "the quick brown fox",
    "jumps over the lazy dog",
    "the dog barks",
};

static sd_status fn_split(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_status rc = SD_OK;
    (void)ctx;
    /* The impulse element: empty bytes, nested (one zero byte), at the minimum timestamp. */
    assert_int_equal(e->elem.len, 1);
    assert_int_equal(e->elem.ptr[0], 0);
    assert_true(e->ts == SD_TIME_MIN);
    assert_true(e->win.global);
    assert_int_equal(pane_byte(&e->pane), 0x0f);
    for (size_t i = 0; rc == SD_OK && i < sizeof(LINES) / sizeof(LINES[0]); i++) {
        const char *p = LINES[i];
        while (rc == SD_OK && *p) {
            const char *s = p;
            while (*p && *p != ' ') {
                p++;
            }
            sd_buf kv;
            sd_buf_init(&kv, 0);
            rc = sd_buf_put_lp(&kv, sd_bytes_make(s, (size_t)(p - s)));
            if (rc == SD_OK) {
                rc = sd_buf_put_varint(&kv, 1);
            }
            if (rc == SD_OK) {
                rc = h_emit_global(h, b, "words", e->ts, sd_buf_bytes(&kv));
            }
            sd_buf_deinit(&kv);
            while (*p == ' ') {
                p++;
            }
        }
    }
    return rc;
}

static sd_status fn_count(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t vals[16];
    (void)b;
    (void)ctx;
    size_t n = get_grouped(e->elem, &key, vals, 16);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += vals[i];
    }
    assert_true(e->win.global);
    assert_true(e->ts == SD_TIME_GLOBAL_MAX);
    assert_int_equal(pane_byte(&e->pane), 0x07);
    if (!h->oom) {
        h_record(h, "%.*s=%llu", (int)key.len, (const char *)key.ptr, (unsigned long long)sum);
    }
    return SD_OK;
}

sd_status build_wordcount(harness *h)
{
    static const char *imp[] = { "imp" }, *words[] = { "words" }, *grouped[] = { "grouped" };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "words", wv_kv_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "split", SD_STAGE_SDK, "imp", words, 1, fn_split, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "words", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "count", SD_STAGE_SDK, "grouped", NULL, 0, fn_count, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

void test_wordcount(void **state)
{
    static const char *const want[] = { "the=3",  "quick=1", "brown=1", "fox=1",  "jumps=1",
                                        "over=1", "lazy=1",  "dog=2",   "barks=1" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        assert_int_equal(build_wordcount(&h), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, sizeof(want) / sizeof(want[0]));
        sd_em_stage_stats stats;
        for (size_t i = 0; i < sd_em_n_stages(h.em); i++) {
            sd_em_stage_info(h.em, i, &stats);
            assert_true(stats.input_wm == SD_TIME_MAX);
            assert_true(stats.output_wm == SD_TIME_MAX);
            assert_int_equal(stats.pending, 0);
        }
        /* Progress counts: what reached each PCollection, whatever the bundling. "words" has
         * 12 KV<word, 1> of 2 + len(word) bytes (46 letters); "grouped" one per distinct word. */
        size_t seen = 0;
        for (size_t i = 0; i < sd_em_n_pcollections(h.em); i++) {
            sd_em_pcoll_stats ps;
            sd_em_pcollection_info(h.em, i, &ps);
            assert_true(ps.watermark == SD_TIME_MAX);
            if (strcmp(ps.id, "imp") == 0) {
                assert_int_equal(ps.elements, 1);
                assert_int_equal(ps.bytes, 1);
                seen++;
            } else if (strcmp(ps.id, "words") == 0) {
                assert_int_equal(ps.elements, 12);
                assert_int_equal(ps.bytes, 12 * 2 + 46);
                assert_int_equal(ps.min_bytes, 5);
                assert_int_equal(ps.max_bytes, 7);
                seen++;
            } else if (strcmp(ps.id, "grouped") == 0) {
                assert_int_equal(ps.elements, 9);
                seen++;
            }
        }
        assert_int_equal(seen, 3);
        h_deinit(&h);
    }
}

/* ========================================================================================== */
/* Flatten                                                                                    */
/* ========================================================================================== */

sd_status fn_emit_values(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const uint64_t *vals = ctx; /* vals[0] = count, then (output index, value) */
    static const char *outs[] = { "pa", "pb" };
    sd_status rc = SD_OK;
    (void)e;
    for (uint64_t i = 0; rc == SD_OK && i < vals[0]; i++) {
        uint8_t v[10];
        sd_buf buf = { .data = v, .cap = sizeof(v) };
        rc = sd_buf_put_varint(&buf, vals[2 + 2 * i]);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, outs[vals[1 + 2 * i]], (sd_time)vals[2 + 2 * i],
                               sd_bytes_make(v, buf.len));
        }
    }
    return rc;
}

sd_status fn_record_varint(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    (void)b;
    (void)ctx;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    h_record(h, "v=%llu ts=%lld", (unsigned long long)v, (long long)e->ts);
    return SD_OK;
}

void test_flatten(void **state)
{
    static const uint64_t a_vals[] = { 2, 0, 1, 0, 2 };
    static const uint64_t b_vals[] = { 1, 1, 3 };
    static const char *imp[] = { "imp" }, *pa[] = { "pa" }, *pb[] = { "pb" }, *pf[] = { "pf" },
                      *both[] = { "pa", "pb" };
    static const char *const want[] = { "v=1 ts=1", "v=2 ts=2", "v=3 ts=3" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "pa", wv_varint_g, NULL);
        h_pcoll(&h, "pb", wv_varint_g, NULL);
        h_pcoll(&h, "pf", wv_varint_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "a", SD_STAGE_SDK, "imp", pa, 1, fn_emit_values, (void *)a_vals);
        h_stage(&h, "b", SD_STAGE_SDK, "imp", pb, 1, fn_emit_values, (void *)b_vals);
        sd_stage_spec flat = { .id = "flatten",
                               .kind = SD_STAGE_FLATTEN,
                               .inputs = both,
                               .n_inputs = 2,
                               .outputs = pf,
                               .n_outputs = 1 };
        h_add(&h, &flat, NULL, NULL, NULL);
        h_stage(&h, "sink", SD_STAGE_SDK, "pf", NULL, 0, fn_record_varint, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, 3);
        h_deinit(&h);
    }
}

/*
 * A Flatten with no inputs (Beam's Flatten of an empty PCollectionList) is an empty PCollection
 * that is complete at once: its consumer sees no elements and the job ends.
 */
void test_flatten_no_inputs(void **state)
{
    static const char *imp[] = { "imp" }, *pf[] = { "pf" }, *pm[] = { "pm" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "pf", wv_varint_g, NULL);
        h_pcoll(&h, "pm", wv_varint_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        sd_stage_spec flat = {
            .id = "flatten", .kind = SD_STAGE_FLATTEN, .outputs = pf, .n_outputs = 1
        };
        h_add(&h, &flat, NULL, NULL, NULL);
        h_stage(&h, "sink", SD_STAGE_SDK, "pf", pm, 1, fn_record_varint, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, NULL, 0);
        sd_time wm = 0;
        assert_int_equal(sd_em_pcollection_watermark(h.em, "pf", &wm), SD_OK);
        assert_true(wm == SD_TIME_MAX);
        h_deinit(&h);
    }
}

/* ========================================================================================== */
/* Side inputs                                                                                */
/* ========================================================================================== */

static sd_status fn_side_producer(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    static const char *const keys[] = { "k1", "k2", "k1" };
    sd_status rc = SD_OK;
    (void)e;
    (void)ctx;
    for (size_t i = 0; rc == SD_OK && i < 3; i++) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, keys[i], 10 + i);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "side", 0, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    return rc;
}

static void fmt_varints(sd_bytes data, char *out, size_t cap)
{
    sd_reader r = sd_reader_make(data);
    size_t off = 0;
    out[0] = 0;
    while (!sd_reader_done(&r)) {
        uint64_t v;
        assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
        off +=
            (size_t)snprintf(out + off, cap - off, off ? ",%llu" : "%llu", (unsigned long long)v);
    }
}

static sd_status fn_side_reader(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_buf out;
    char a[64], c[64], d[64];
    sd_bytes gw = SD_BYTES_NULL; /* the global window encodes to nothing */
    sd_bytes k1 = sd_bytes_make("\x02k1", 3), k9 = sd_bytes_make("\x02k9", 3);
    (void)e;
    (void)ctx;
    sd_buf_init(&out, 0);
    /* Multimap access by key, and the keys. */
    assert_int_equal(sd_em_side_input_get(h->em, b, H_SIDE("T", "mm", gw), &k1, &out, &h->err),
                     SD_OK);
    fmt_varints(sd_buf_bytes(&out), a, sizeof(a));
    sd_buf_reset(&out);
    assert_int_equal(sd_em_side_input_get(h->em, b, H_SIDE("T", "mm", gw), &k9, &out, &h->err),
                     SD_OK);
    assert_int_equal(out.len, 0);
    assert_int_equal(sd_em_side_input_keys(h->em, b, H_SIDE("T", "mm", gw), &out, &h->err), SD_OK);
    assert_int_equal(out.len, 6);
    assert_memory_equal(out.data, "\x02k1\x02k2", 6);
    sd_buf_reset(&out);
    /* Iterable access: the KV element encodings. */
    assert_int_equal(sd_em_side_input_get(h->em, b, H_SIDE("T", "it", gw), NULL, &out, &h->err),
                     SD_OK);
    snprintf(c, sizeof(c), "%zu", out.len);
    sd_buf_reset(&out);
    /* Wrong access kinds and unknown ids are errors, not crashes. */
    assert_int_equal(sd_em_side_input_get(h->em, b, H_SIDE("T", "it", gw), &k1, &out, &h->err),
                     SD_EINVAL);
    assert_int_equal(sd_em_side_input_get(h->em, b, H_SIDE("T", "mm", gw), NULL, &out, &h->err),
                     SD_EINVAL);
    assert_int_equal(sd_em_side_input_get(h->em, b, H_SIDE("T", "nope", gw), NULL, &out, &h->err),
                     SD_ENOTFOUND);
    assert_int_equal(sd_em_side_input_get(h->em, b, H_SIDE("T", "it", sd_bytes_make("x", 1)), NULL,
                                          &out, &h->err),
                     SD_EPROTO);
    snprintf(d, sizeof(d), "%zu", out.len);
    h_record(h, "mm[k1]=%s it_bytes=%s after_errors=%s", a, c, d);
    sd_buf_deinit(&out);
    return SD_OK;
}

static void build_side(harness *h)
{
    static const char *imp[] = { "imp" }, *side[] = { "side" };
    h_pcoll(h, "imp", wv_bytes_g, NULL);
    h_pcoll(h, "side", wv_kv_g, NULL);
    h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(h, "producer", SD_STAGE_SDK, "imp", side, 1, fn_side_producer, NULL);
    sd_side_input_spec sides[] = { { "T", "mm", "side", SD_SIDE_MULTIMAP, NULL },
                                   { "T", "it", "side", SD_SIDE_ITERABLE, NULL } };
    const char *ins[] = { "imp" };
    sd_stage_spec reader = { .id = "reader",
                             .kind = SD_STAGE_SDK,
                             .inputs = ins,
                             .n_inputs = 1,
                             .side_inputs = sides,
                             .n_side_inputs = 2 };
    h_add(h, &reader, fn_side_reader, NULL, NULL);
    assert_int_equal(sd_em_start(h->em, &h->err), SD_OK);
}

void test_side_inputs(void **state)
{
    /* 3 KV elements of 4 bytes each (02 'k' 'n' varint). */
    static const char *const want[] = { "mm[k1]=10,12 it_bytes=12 after_errors=0" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        build_side(&h);
        h_run_ok(&h);
        h_expect(&h, want, 1);
        h_deinit(&h);
    }
}

void test_side_input_waits_for_producer(void **state)
{
    harness h;
    sd_bundle *p = NULL, *b = NULL;
    (void)state;
    h_shape shape = { "manual", 0, 0, 8, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_side(&h);
    assert_int_equal(sd_em_next_bundle(h.em, &p, &h.err), SD_OK);
    assert_non_null(p);
    assert_string_equal(sd_em_bundle_stage(p), "producer");
    assert_int_equal(h_process(&h, p), SD_OK);
    /* The reader's side input is not complete while the producer runs: nothing is ready. */
    assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
    assert_null(b);
    assert_int_equal(sd_em_in_progress(h.em), 1);
    assert_int_equal(sd_em_check_stuck(h.em, NULL), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, p, &h.err), SD_OK);
    h_check(&h);
    assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
    assert_non_null(b);
    assert_string_equal(sd_em_bundle_stage(b), "reader");
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_run_ok(&h);
    h_deinit(&h);
}

/*
 * Side-input readiness through window mapping. "signal" puts the TestStream's elements in fixed
 * windows (sig_size) as the side input "sigw"; "main" reads them with that side input, either
 * straight from the TestStream's global-window output while its consumer windows them inside
 * the stage (consumer: the case's windowing), or after "assign" put them in fixed windows of
 * main_size. Each main element records how many elements the signal stage had seen by then:
 * an element goes as soon as the side window the SDK will read for it is complete, before the
 * next TestStream event, and not before.
 */
typedef struct rewin_case {
    const char *name;
    int64_t sig_size;
    int64_t main_size;     /* 0: main reads the TestStream's output (re-windowed) */
    sd_windowing consumer; /* re-windowed: the consumer's main-input windowing */
    ts_case steps;
    const char *want[4];
    size_t n_want;
} rewin_case;

typedef struct rewin_ctx {
    const rewin_case *c;
    size_t signals; /* elements the signal stage has processed */
} rewin_ctx;

static sd_status
emit_fixed(harness *h, sd_bundle *b, const char *pcoll, int64_t size, const h_elem *e)
{
    sd_time start = e->ts - (e->ts % size + size) % size;
    sd_window w = sd_window_interval(start, start + size);
    sd_pane p = SD_PANE_NO_FIRING;
    return h_emit(h, b, pcoll, e->ts, &w, 1, &p, e->elem);
}

static sd_status fn_rewin_signal(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    rewin_ctx *rc = ctx;
    rc->signals++;
    return emit_fixed(h, b, "sigw", rc->c->sig_size, e);
}

static sd_status fn_rewin_assign(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const rewin_ctx *rc = ctx;
    return emit_fixed(h, b, "mainw", rc->c->main_size, e);
}

static sd_status fn_rewin_main(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const rewin_ctx *rc = ctx;
    sd_bytes key;
    uint64_t v;
    (void)b;
    get_kv(e->elem, &key, &v);
    h_record(h, "main %llu after %zu signals", (unsigned long long)v, rc->signals);
    return SD_OK;
}

static const rewin_case REWIN_CASES[] = {
    /* Consumer in sliding windows 10 every 5, side in fixed 10: ts 1 lies in [-5,5) and
     * [0,10), whose side window [0,10) completes at watermark 10; ts 5's latest window
     * [5,15) maps to side window [10,20), complete at 20. */
    { "rewindowed sliding consumer",
      10,
      0,
      { .kind = SD_WINDOWFN_SLIDING, .size_ms = 10, .period_ms = 5 },
      { .steps = { { 'e', "a", 1, 1 },
                   { 'e', "a", 5, 5 },
                   { 'w', NULL, 0, 10 },
                   { 'e', "a", 12, 12 },
                   { 'w', NULL, 0, 20 } },
        .n_steps = 5 },
      { "main 1 after 2 signals", "main 5 after 3 signals", "main 12 after 3 signals" },
      3 },
    /* Main in fixed 15, side in fixed 7 (Java's Wait over different windows): main window
     * [0,15) reads side window [14,21), complete only at watermark 21, not at 15. */
    { "main 15, side 7",
      7,
      15,
      { .kind = SD_WINDOWFN_GLOBAL },
      { .steps = { { 'e', "a", 1, 1 },
                   { 'w', NULL, 0, 15 },
                   { 'e', "a", 16, 16 },
                   { 'w', NULL, 0, 21 },
                   { 'e', "a", 17, 17 } },
        .n_steps = 5 },
      { "main 1 after 2 signals", "main 16 after 3 signals", "main 17 after 3 signals" },
      3 },
};

void test_side_input_window_mapping(void **state)
{
    static const char *tsout[] = { "tsout" }, *sigw[] = { "sigw" }, *mainw[] = { "mainw" };
    (void)state;
    for (size_t c = 0; c < sizeof(REWIN_CASES) / sizeof(REWIN_CASES[0]); c++) {
        const rewin_case *rcase = &REWIN_CASES[c];
        sd_windowing sig_ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = rcase->sig_size };
        sd_windowing main_ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = rcase->main_size };
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            rewin_ctx rc = { .c = rcase };
            assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
            h_pcoll(&h, "tsout", wv_kv_g, NULL);
            h_pcoll(&h, "sigw", wv_kv_i, &sig_ws);
            h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
            h_stage(&h, "signal", SD_STAGE_SDK, "tsout", sigw, 1, fn_rewin_signal, &rc);
            const char *ins[] = { "tsout" };
            if (rcase->main_size > 0) {
                h_pcoll(&h, "mainw", wv_kv_i, &main_ws);
                h_stage(&h, "assign", SD_STAGE_SDK, "tsout", mainw, 1, fn_rewin_assign, &rc);
                ins[0] = "mainw";
            }
            sd_side_input_spec sides[] = { { "T", "sig", "sigw", SD_SIDE_ITERABLE,
                                             rcase->main_size > 0 ? NULL : &rcase->consumer } };
            sd_stage_spec reader = { .id = "main",
                                     .kind = SD_STAGE_SDK,
                                     .inputs = ins,
                                     .n_inputs = 1,
                                     .side_inputs = sides,
                                     .n_side_inputs = 1 };
            h_add(&h, &reader, fn_rewin_main, NULL, &rc);
            assert_int_equal(add_ts_steps(&h, &rcase->steps), SD_OK);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            h_expect(&h, rcase->want, rcase->n_want);
            h_deinit(&h);
        }
    }
}

/* ========================================================================================== */
/* Splits, failures, caps, stuck detection                                                    */
/* ========================================================================================== */

static sd_status fn_gen_n(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    size_t n = (size_t)(uintptr_t)ctx;
    sd_status rc = SD_OK;
    (void)e;
    for (size_t i = 0; rc == SD_OK && i < n; i++) {
        uint8_t v[10];
        sd_buf buf = { .data = v, .cap = sizeof(v) };
        rc = sd_buf_put_varint(&buf, i);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "nums", (sd_time)i, sd_bytes_make(v, buf.len));
        }
    }
    return rc;
}

static void build_gen_sink(harness *h, size_t n)
{
    static const char *imp[] = { "imp" }, *nums[] = { "nums" };
    h_pcoll(h, "imp", wv_bytes_g, NULL);
    h_pcoll(h, "nums", wv_varint_g, NULL);
    h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(h, "gen", SD_STAGE_SDK, "imp", nums, 1, fn_gen_n, (void *)(uintptr_t)n);
    h_stage(h, "sink", SD_STAGE_SDK, "nums", NULL, 0, fn_record_varint, NULL);
    assert_int_equal(sd_em_start(h->em, &h->err), SD_OK);
}

sd_bundle *pull(harness *h, const char *stage)
{
    sd_bundle *b = NULL;
    assert_int_equal(sd_em_next_bundle(h->em, &b, &h->err), SD_OK);
    h_check(h);
    assert_non_null(b);
    assert_string_equal(sd_em_bundle_stage(b), stage);
    return b;
}

void test_channel_split(void **state)
{
    static const char *const want[] = { "v=0 ts=0", "v=1 ts=1", "v=2 ts=2", "v=3 ts=3",
                                        "v=4 ts=4" };
    harness h;
    (void)state;
    h_shape shape = { "split", 0, 0, 1, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 5);
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    h_check(&h);

    sd_bundle *b = pull(&h, "sink");
    assert_int_equal(sd_em_bundle_input_count(b), 5);
    /* The SDK processed the first two, then accepted a split at element 2. */
    assert_int_equal(sd_em_bundle_split(h.em, b, 6, &h.err), SD_EINVAL);
    assert_int_equal(sd_em_bundle_split(h.em, b, 2, &h.err), SD_OK);
    h_check(&h);
    assert_int_equal(sd_em_bundle_split(h.em, b, 3, &h.err), SD_EINVAL);
    h_record(&h, "v=0 ts=0");
    h_record(&h, "v=1 ts=1");
    /* The remainder is pending again and may run while the primary is still in flight. */
    sd_bundle *r = pull(&h, "sink");
    assert_int_equal(sd_em_bundle_input_count(r), 3);
    assert_int_equal(h_process(&h, r), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, r, &h.err), SD_OK);
    h_check(&h);
    assert_false(sd_em_done(h.em));
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_check(&h);
    h_run_ok(&h);
    h_expect(&h, want, 5);
    h_deinit(&h);
}

void test_fail_bundle_retries_cleanly(void **state)
{
    static const char *const want[] = { "v=0 ts=0", "v=1 ts=1", "v=2 ts=2" };
    harness h;
    (void)state;
    h_shape shape = { "fail", 0, 0, 1, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 3);
    /* The first attempt of the generator emits output, then fails: nothing may leak out. */
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    sd_em_fail_bundle(h.em, g);
    h_check(&h);
    h.n_results = 0;
    g = pull(&h, "gen");
    assert_int_equal(sd_em_bundle_input_count(g), 1);
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    h_check(&h);
    /* A sink bundle fails once too. */
    sd_bundle *b = pull(&h, "sink");
    assert_int_equal(sd_em_bundle_input_count(b), 3);
    sd_em_fail_bundle(h.em, b);
    h_check(&h);
    h_run_ok(&h);
    h_expect(&h, want, 3);
    h_deinit(&h);
}

void test_bad_output_bytes_fail_the_bundle(void **state)
{
    harness h;
    (void)state;
    h_shape shape = { "bad", 0, 0, 1, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 2);
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    /* A truncated windowed value at the end of the stream. */
    assert_int_equal(sd_em_bundle_output(h.em, g, "nums", sd_bytes_make("\x80\x00", 2), &h.err),
                     SD_OK);
    assert_int_equal(sd_em_bundle_output(h.em, g, "nope", sd_bytes_make("x", 1), &h.err),
                     SD_ENOTFOUND);
    sd_err err = { 0 };
    assert_int_equal(sd_em_complete_bundle(h.em, g, &err), SD_EPROTO);
    assert_non_null(strstr(sd_err_msg(&err), "nums"));
    h_check(&h);
    /* Nothing of it was committed: the generator's input is pending again. */
    assert_int_equal(sd_em_in_progress(h.em), 0);
    g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    h_run_ok(&h);
    assert_int_equal(h.n_results, 2);
    h_deinit(&h);
}

/* n windowed values of varints 0..n-1 (timestamp i, global window), as one stream.
 * OUT: *mark, where value n * 3 / 4 starts. */
static void varint_stream(sd_buf *out, size_t n, size_t *mark)
{
    sd_window w = sd_window_global();
    sd_pane p = SD_PANE_NO_FIRING;
    for (size_t i = 0; i < n; i++) {
        if (i == n * 3 / 4) {
            *mark = out->len;
        }
        assert_int_equal(
            sd_wv_encode_header(out, sd_wv_window_coder(wv_varint_g), (sd_time)i, &w, 1, &p, NULL),
            SD_OK);
        assert_int_equal(sd_buf_put_varint(out, i), SD_OK);
    }
}

/*
 * Hand stream to one gen bundle as its output in pieces of 1..max_piece bytes (drawn from
 * seed; max_piece 0: in one piece), complete it, then run every sink bundle. OUT: the sink
 * bundles' inputs, concatenated in order, and on failure the error message. Returns what
 * completing the gen bundle returned.
 */
static sd_status feed_pieces(sd_bytes stream,
                             size_t max_piece,
                             uint64_t seed,
                             sd_buf *sink_in,
                             char *msg,
                             size_t msg_size)
{
    harness h;
    h_shape shape = { "pieces", 0, 0, 1, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 0);
    sd_bundle *g = pull(&h, "gen");
    for (size_t off = 0; off < stream.len;) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t k = max_piece == 0 ? stream.len : 1 + (size_t)(seed >> 33) % max_piece;
        k = SD_MIN(k, stream.len - off);
        assert_int_equal(
            sd_em_bundle_output(h.em, g, "nums", sd_bytes_make(stream.ptr + off, k), &h.err),
            SD_OK);
        off += k;
    }
    sd_err err = { 0 };
    sd_status rc = sd_em_complete_bundle(h.em, g, &err);
    h_check(&h);
    snprintf(msg, msg_size, "%s", rc == SD_OK ? "" : sd_err_msg(&err));
    for (sd_bundle *b = NULL; rc == SD_OK; b = NULL) {
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        if (b == NULL) {
            break;
        }
        assert_string_equal(sd_em_bundle_stage(b), "sink");
        assert_int_equal(sd_buf_append_bytes(sink_in, sd_em_bundle_input(b)), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
        h_check(&h);
    }
    h_deinit(&h);
    return rc;
}

/*
 * A bundle's output may arrive cut anywhere (the Fn API splits the byte stream freely); the
 * engine checks what arrives whole and seals large streams into chunks as they come
 * (sd__outstream). Whatever the cut, the committed elements and their order are the same as
 * for the stream in one piece, and a bad stream fails with the same error and message.
 */
void test_output_cut_anywhere(void **state)
{
    static const struct {
        size_t n, max_piece;
    } cuts[] = { { 2000, 1 }, { 2000, 3 }, { 100000, 7 }, { 100000, 70000 }, { 100000, 300000 } };

    (void)state;
    for (int bad = 0; bad < 3; bad++) {
        for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
            sd_buf stream, want, got;
            char want_msg[512], got_msg[512];
            sd_buf_init(&stream, 0);
            sd_buf_init(&want, 0);
            sd_buf_init(&got, 0);
            size_t mark = 0;
            varint_stream(&stream, cuts[c].n, &mark);
            if (bad == 1) {
                /* A pane byte no encoding has, in an element past the first chunks. */
                stream.data[mark + 12] = 0xf0; /* after ts (8) and the window count (4) */
            } else if (bad == 2) {
                stream.len -= 2; /* the last element truncated */
            }
            sd_status want_rc =
                feed_pieces(sd_buf_bytes(&stream), 0, 1, &want, want_msg, sizeof(want_msg));
            sd_status got_rc = feed_pieces(sd_buf_bytes(&stream), cuts[c].max_piece, c + 1, &got,
                                           got_msg, sizeof(got_msg));
            assert_int_equal(got_rc, want_rc);
            assert_int_equal(want_rc, bad == 0 ? SD_OK : SD_EPROTO);
            assert_string_equal(got_msg, want_msg);
            if (bad > 0) {
                char where[64];
                snprintf(where, sizeof(where),
                         "\"nums\" element %zu:", bad == 1 ? cuts[c].n * 3 / 4 : cuts[c].n - 1);
                assert_non_null(strstr(want_msg, where));
            }
            assert_int_equal(got.len, want.len);
            assert_memory_equal(got.data, want.data, got.len);
            if (bad == 0) {
                /* Every element reached the sink: 14 bytes each below 128, 15 from there. */
                assert_int_equal(want.len, stream.len);
            }
            sd_buf_deinit(&stream);
            sd_buf_deinit(&want);
            sd_buf_deinit(&got);
        }
    }
}

void test_byte_cap(void **state)
{
    harness h;
    (void)state;
    h_shape shape = { "cap-30", 0, 30, 1, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 20);
    h_run_ok(&h);
    assert_int_equal(h.n_results, 20);
    /* 1 gen bundle + sink bundles of at most 30 bytes (each element is 8+4+1+1 = 14 bytes). */
    assert_true(h.max_input <= 30);
    assert_int_equal(h.n_bundles, 1 + 10);
    h_deinit(&h);
}

void test_stuck_dump(void **state)
{
    harness h;
    sd_bundle *b = NULL;
    (void)state;
    h_shape shape = { "stuck", 0, 0, 1, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    assert_int_equal(build_wordcount(&h), SD_OK);
    /* A hold that nothing will ever release pins the splitter's output watermark, so the
     * GBK (global window) can never fire: the job must be reported stuck, not hang. */
    sd__stage *split = sd_map_get_str(&h.em->stage_by_id, "split");
    assert_int_equal(sd__tsbag_add(&split->holds, 5), SD_OK);
    for (;;) {
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        if (b == NULL) {
            break;
        }
        assert_int_equal(h_process(&h, b), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    }
    assert_false(sd_em_done(h.em));
    sd_buf dump;
    sd_buf_init(&dump, 0);
    assert_int_equal(sd_em_check_stuck(h.em, &dump), SD_ESTATE);
    assert_int_equal(sd_buf_append_byte(&dump, 0), SD_OK);
    const char *d = (const char *)dump.data;
    assert_non_null(strstr(d, "engine stuck"));
    assert_non_null(strstr(d, "stage gbk (gbk)"));
    assert_non_null(strstr(d, "gbk_values=12"));
    assert_non_null(strstr(d, "stage split (sdk): upstream=MAX in=MAX out=5 hold=5"));
    sd_buf_deinit(&dump);
    sd__tsbag_remove(&split->holds, 5);
    h_run_ok(&h);
    assert_int_equal(h.n_results, 9);
    h_deinit(&h);
}

/* ========================================================================================== */
/* Graph validation                                                                           */
/* ========================================================================================== */

void test_graph_errors(void **state)
{
    static const struct {
        const char *name;
        sd_stage_kind kind;
        const char *in;
        const char *out;
        sd_status want;
    } rows[] = {
        { "gbk over a non-KV input", SD_STAGE_GBK, "imp", "g", SD_EINVAL },
        { "unknown input", SD_STAGE_SDK, "nope", NULL, SD_ENOTFOUND },
        { "second producer", SD_STAGE_SDK, "imp", "imp", SD_EEXIST },
        { "impulse with an input", SD_STAGE_IMPULSE, "imp", "g", SD_EINVAL },
        { "sdk stage without input", SD_STAGE_SDK, NULL, "g", SD_EINVAL },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_em *em;
        sd_err err = { 0 };
        static const char *imp[] = { "imp" };
        assert_int_equal(sd_em_create(NULL, &em), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "g", wv_grouped_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_EEXIST);
        sd_stage_spec imp_spec = {
            .id = "impulse", .kind = SD_STAGE_IMPULSE, .outputs = imp, .n_outputs = 1
        };
        assert_int_equal(sd_em_add_stage(em, &imp_spec, &err), SD_OK);
        const char *ins[] = { rows[i].in }, *outs[] = { rows[i].out };
        sd_stage_spec spec = { .id = "s",
                               .kind = rows[i].kind,
                               .inputs = ins,
                               .n_inputs = rows[i].in ? 1 : 0,
                               .outputs = outs,
                               .n_outputs = rows[i].out ? 1 : 0 };
        sd_err_clear(&err);
        sd_status rc = sd_em_add_stage(em, &spec, &err);
        if (rc != rows[i].want) {
            fail_msg("%s: got %s (%s)", rows[i].name, sd_status_name(rc), sd_err_msg(&err));
        }
        sd_em_destroy(em);
    }
    /* A consumed PCollection without a producer is rejected at start. */
    sd_em *em;
    sd_err err = { 0 };
    const char *ins[] = { "orphan" };
    assert_int_equal(sd_em_create(NULL, &em), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "orphan", wv_bytes_g, NULL, &err), SD_OK);
    sd_stage_spec s = { .id = "s", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1 };
    assert_int_equal(sd_em_add_stage(em, &s, &err), SD_OK);
    assert_int_equal(sd_em_start(em, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "orphan"));
    sd_em_destroy(em);
    /* Malformed triggers and non-windowed-value coders are refused. */
    assert_int_equal(sd_em_create(NULL, &em), SD_OK);
    sd_trigger bad = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 0 };
    sd_windowing ws = { .trigger = &bad };
    assert_int_equal(sd_em_add_pcollection(em, "t", wv_kv_g, &ws, &err), SD_EINVAL);
    sd_trigger lonely = { .kind = SD_TRIGGER_REPEAT };
    ws.trigger = &lonely;
    assert_int_equal(sd_em_add_pcollection(em, "t", wv_kv_g, &ws, &err), SD_EINVAL);
    assert_int_equal(sd_em_add_pcollection(em, "c", c_kv, NULL, &err), SD_EINVAL);
    sd_em_destroy(em);
    /* A trigger on session windows feeding a GBK is accepted (trigger state merges). */
    static const char *imp[] = { "imp" }, *kv[] = { "kv" }, *g[] = { "g" };
    sd_trigger count2 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 2 };
    sd_windowing sess = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 10, .trigger = &count2 };
    assert_int_equal(sd_em_create(NULL, &em), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "kv", wv_kv_i, &sess, &err), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "g", wv_grouped_i, &sess, &err), SD_OK);
    sd_stage_spec s1 = { .id = "i", .kind = SD_STAGE_IMPULSE, .outputs = imp, .n_outputs = 1 };
    sd_stage_spec s2 = {
        .id = "p", .kind = SD_STAGE_SDK, .inputs = imp, .n_inputs = 1, .outputs = kv, .n_outputs = 1
    };
    sd_stage_spec s3 = {
        .id = "gbk", .kind = SD_STAGE_GBK, .inputs = kv, .n_inputs = 1, .outputs = g, .n_outputs = 1
    };
    assert_int_equal(sd_em_add_stage(em, &s1, &err), SD_OK);
    assert_int_equal(sd_em_add_stage(em, &s2, &err), SD_OK);
    assert_int_equal(sd_em_add_stage(em, &s3, &err), SD_OK);
    assert_int_equal(sd_em_start(em, &err), SD_OK);
    sd_em_destroy(em);
}

/* ========================================================================================== */
/* Main                                                                                       */
/* ========================================================================================== */

/* ---------------------------------------------------------------- bundle output cap */

typedef struct fan_ctx {
    char last[64]; /* id of the bundle seen last (addresses are reused) */
    size_t bundles, first, max, elements;
} fan_ctx;

/* Impulse -> 40 seeds (one bundle). */
static sd_status fn_emit_40(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)e;
    (void)ctx;
    sd_status rc = SD_OK;
    for (uint64_t i = 0; rc == SD_OK && i < 40; i++) {
        uint8_t v[10];
        sd_buf buf = { .data = v, .cap = sizeof(v) };
        rc = sd_buf_put_varint(&buf, i);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "seeds", (sd_time)i, sd_bytes_make(v, buf.len));
        }
    }
    return rc;
}

/* Each seed makes 1,000 bytes of output; records how many seeds each bundle carried. */
static sd_status fn_fan_1000(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    fan_ctx *f = ctx;
    static const uint8_t kb[1000];
    if (strcmp(f->last, sd_em_bundle_id(b)) != 0) {
        snprintf(f->last, sizeof(f->last), "%s", sd_em_bundle_id(b));
        size_t n = sd_em_bundle_input_count(b);
        f->first = f->bundles == 0 ? n : f->first;
        f->max = SD_MAX(f->max, f->bundles == 0 ? 0 : n);
        f->bundles++;
    }
    f->elements++;
    sd_buf buf;
    sd_buf_init(&buf, 0);
    sd_status rc = sd_buf_put_lp(&buf, sd_bytes_make(kb, sizeof(kb)));
    if (rc == SD_OK) {
        rc = h_emit_global(h, b, "big", e->ts, sd_buf_bytes(&buf));
    }
    sd_buf_deinit(&buf);
    return rc;
}

/*
 * A stage with an output cap (the planner sets one for the TypeScript SDK) takes one element
 * first, then as many as fit the cap by the output per element it learned: 4,000 bytes at
 * about 1,010 bytes an element is 3 a bundle. Without the cap the 40 seeds go in one bundle.
 */
void test_bundle_output_cap(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *big[] = { "big" };
    (void)state;
    for (int capped = 0; capped < 2; capped++) {
        harness h;
        fan_ctx f = { 0 };
        assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "seeds", wv_varint_g, NULL);
        h_pcoll(&h, "big", wv_bytes_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_emit_40, NULL);
        const char *ins[1] = { "seeds" };
        sd_stage_spec fan = { .id = "fan",
                              .kind = SD_STAGE_SDK,
                              .inputs = ins,
                              .n_inputs = 1,
                              .outputs = big,
                              .n_outputs = 1,
                              .max_output_bytes = capped ? 4000 : 0 };
        h_add(&h, &fan, fn_fan_1000, NULL, &f);
        h_stage(&h, "sink", SD_STAGE_SDK, "big", NULL, 0, NULL, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        assert_int_equal(f.elements, 40);
        if (capped) {
            assert_int_equal(f.first, 1);
            assert_int_equal(f.max, 3);
            assert_int_equal(f.bundles, 1 + 13); /* 1, then 39 in threes */
        } else {
            assert_int_equal(f.bundles, 1);
            assert_int_equal(f.first, 40);
        }
        h_deinit(&h);
    }
}

typedef struct spread_row {
    size_t seeds;
    bool spread;
    size_t min_bytes;
    size_t bundles; /* in flight at once after the seeds committed */
    size_t largest; /* input elements of the largest of them */
} spread_row;

/*
 * A spread stage (a splittable DoFn's restrictions, what a Reshuffle redistributes) has its
 * ready input cut into at most SD_EM_SPREAD_BUNDLES bundles of an even share, all handed out
 * at once (sd_em_next_bundle, then sd_em_next_spread_bundle until NULL); a least size in
 * bytes makes the share larger for small elements; a stage that does not spread keeps one
 * bundle and gets nothing from sd_em_next_spread_bundle. Every element runs exactly once.
 */
void test_spread_stage(void **state)
{
    static const char *imp[] = { "imp" }, *nums[] = { "nums" };
    static const spread_row rows[] = {
        { 40, false, 0, 1, 40 },     { 40, true, 0, 40, 1 },    { 64, true, 0, 64, 1 },
        { 65, true, 0, 33, 2 },      { 200, true, 0, 50, 4 },   { 1000, true, 0, 63, 16 },
        { 200, true, 2048, 1, 200 }, { 200, true, 20, 10, 20 },
    };
    (void)state;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        const spread_row *sr = &rows[r];
        harness h;
        size_t n = sr->seeds;
        sd_bundle *open[SD_EM_SPREAD_BUNDLES];
        size_t n_open = 0, largest = 0, total = 0;
        print_message("row %zu: %zu seeds%s\n", r, n, sr->spread ? ", spread" : "");
        assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "nums", wv_varint_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "seed", SD_STAGE_SDK, "imp", nums, 1, fn_gen_n, (void *)(uintptr_t)n);
        sd_stage_spec work = { .id = "work",
                               .kind = SD_STAGE_SDK,
                               .inputs = nums,
                               .n_inputs = 1,
                               .spread = sr->spread,
                               .spread_min_bytes = sr->min_bytes };
        h_add(&h, &work, NULL, NULL, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        sd_bundle *b = NULL;
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        assert_non_null(b);
        assert_string_equal(sd_em_bundle_stage(b), "seed");
        assert_int_equal(h_process(&h, b), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
        /* The wave: the usual next bundle, then every spread one. */
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        while (b != NULL) {
            assert_string_equal(sd_em_bundle_stage(b), "work");
            assert_true(n_open < SD_EM_SPREAD_BUNDLES);
            open[n_open++] = b;
            largest = SD_MAX(largest, sd_em_bundle_input_count(b));
            total += sd_em_bundle_input_count(b);
            assert_int_equal(sd_em_next_spread_bundle(h.em, &b, &h.err), SD_OK);
        }
        assert_int_equal(n_open, sr->bundles);
        assert_int_equal(largest, sr->largest);
        assert_int_equal(total, n);
        for (size_t i = 0; i < n_open; i++) {
            assert_int_equal(h_process(&h, open[i]), SD_OK);
            assert_int_equal(sd_em_complete_bundle(h.em, open[i], &h.err), SD_OK);
        }
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        assert_null(b);
        assert_true(sd_em_done(h.em));
        h_deinit(&h);
    }
}
