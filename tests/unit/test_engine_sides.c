/*
 * Engine tests, triggered side inputs (a side PCollection whose windowing has a non-default
 * trigger).
 *
 * One TestStream feeds "route", which sends key "s" to a GroupByKey with a repeated trigger
 * (its output "view" is the side input) and key "m" to "reader", which reads "view" in its
 * element's window and records what it saw. A main element waits only until the side window it
 * reads holds a firing, not until the side watermark passes the window's end; each later
 * firing replaces the view (discarding: only its own values; accumulating: everything so far),
 * and each main element sees the latest firing that had arrived when it was processed — on the
 * TestStream's schedule, so the same under every bundle shape. test_triggered_side_in_flight
 * checks that a firing arriving while a reader bundle is in flight waits for it to finish;
 * test_side_window_waits_for_lateness that an empty side window waits out its allowed lateness.
 */
#include "engine_harness.h"

typedef struct tsi_case {
    const char *name;
    sd_windowfn_kind kind; /* FIXED (size 10) or GLOBAL */
    const sd_trigger *trigger;
    bool accumulating;
    ts_case steps;
    const char *want[6];
    size_t n_want;
} tsi_case;

static const sd_trigger T_COUNT1 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 1 };
static const sd_trigger *const SUBS_COUNT1[] = { &T_COUNT1 };
static const sd_trigger T_REPEAT_COUNT1 = { .kind = SD_TRIGGER_REPEAT,
                                            .subs = SUBS_COUNT1,
                                            .n_subs = 1 };
static const sd_trigger T_PT1000 = { .kind = SD_TRIGGER_AFTER_PROCESSING_TIME, .delay_ms = 1000 };
static const sd_trigger *const SUBS_PT[] = { &T_PT1000 };
static const sd_trigger T_REPEAT_PT = { .kind = SD_TRIGGER_REPEAT, .subs = SUBS_PT, .n_subs = 1 };

/* Side values 1, 2, 3 each fire (count 1); main 100 comes before any firing and waits. */
#define COUNT_STEPS                                                                \
    {                                                                              \
        .steps = { { 'e', "m", 100, 1 }, { 'e', "s", 1, 2 }, { 'e', "m", 101, 3 }, \
                   { 'e', "s", 2, 4 },   { 'e', "s", 3, 5 }, { 'e', "m", 102, 6 }, \
                   { 'w', NULL, 0, 10 } },                                         \
        .n_steps = 7                                                               \
    }

static const tsi_case CASES[] = {
    { "fixed, count, discarding",
      SD_WINDOWFN_FIXED,
      &T_REPEAT_COUNT1,
      false,
      COUNT_STEPS,
      { "m=100 saw s:1", "m=101 saw s:1", "m=102 saw s:3" },
      3 },
    { "fixed, count, accumulating",
      SD_WINDOWFN_FIXED,
      &T_REPEAT_COUNT1,
      true,
      COUNT_STEPS,
      { "m=100 saw s:1", "m=101 saw s:1", "m=102 saw s:1,2,3" },
      3 },
    { "global, count, discarding",
      SD_WINDOWFN_GLOBAL,
      &T_REPEAT_COUNT1,
      false,
      COUNT_STEPS,
      { "m=100 saw s:1", "m=101 saw s:1", "m=102 saw s:3" },
      3 },
    /* Processing time: 3 and 4 arrive but fire only when the clock moves 1 s on, so main 101
     * still sees the first firing and 102 the second. */
    { "global, processing time, discarding",
      SD_WINDOWFN_GLOBAL,
      &T_REPEAT_PT,
      false,
      { .steps = { { 'e', "s", 2, 1 },
                   { 'c', NULL, 0, 1000 },
                   { 'e', "m", 100, 2 },
                   { 'b', "s", 3, 3 },
                   { 'b', "s", 4, 3 },
                   { 'e', "m", 101, 4 },
                   { 'c', NULL, 0, 1000 },
                   { 'e', "m", 102, 5 } },
        .n_steps = 8 },
      { "m=100 saw s:2", "m=101 saw s:2", "m=102 saw s:3,4" },
      3 },
};

typedef struct tsi_ctx {
    sd_windowing ws; /* the case's side and main windowing (with the trigger) */
} tsi_ctx;

static sd_status fn_route(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const tsi_ctx *tc = ctx;
    sd_bytes key;
    uint64_t v;
    get_kv(e->elem, &key, &v);
    sd_window w = sd_window_global();
    if (tc->ws.kind == SD_WINDOWFN_FIXED) {
        sd_time start = e->ts - (e->ts % tc->ws.size_ms + tc->ws.size_ms) % tc->ws.size_ms;
        w = sd_window_interval(start, start + tc->ws.size_ms);
    }
    sd_pane p = SD_PANE_NO_FIRING;
    bool side = key.len == 1 && key.ptr[0] == 's';
    return h_emit(h, b, side ? "sidekv" : "mainw", e->ts, &w, 1, &p, e->elem);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* "s:1,2;" per grouped element of the view (key, values sorted: a pane's values come in
 * arrival order, which the schedule seeds shuffle), or "-" for an empty view. */
static void fmt_view(sd_bytes view, char *out, size_t cap)
{
    sd_reader r = sd_reader_make(view);
    size_t off = 0;
    out[0] = 0;
    while (!sd_reader_done(&r)) {
        sd_bytes key;
        uint32_t n;
        assert_int_equal(sd_reader_lp(&r, &key), SD_OK);
        assert_int_equal(sd_reader_be32(&r, &n), SD_OK);
        off += (size_t)snprintf(out + off, cap - off, "%s%.*s:", off > 0 ? ";" : "", (int)key.len,
                                (const char *)key.ptr);
        uint64_t vals[16];
        assert_true(n <= 16);
        for (uint32_t i = 0; i < n; i++) {
            assert_int_equal(sd_reader_varint(&r, &vals[i]), SD_OK);
        }
        qsort(vals, n, sizeof(vals[0]), cmp_u64);
        for (uint32_t i = 0; i < n; i++) {
            off += (size_t)snprintf(out + off, cap - off, i > 0 ? ",%llu" : "%llu",
                                    (unsigned long long)vals[i]);
        }
        assert_true(off < cap);
    }
    if (off == 0) {
        snprintf(out, cap, "-");
    }
}

static sd_status fn_reader(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t v;
    sd_buf wbytes, view;
    char seen[96];
    (void)ctx;
    get_kv(e->elem, &key, &v);
    sd_buf_init(&wbytes, 0);
    sd_buf_init(&view, 0);
    const sd_coder *wc = e->win.global ? c_gw : c_iw;
    assert_int_equal(sd_window_encode(wc, &e->win, &wbytes, &h->err), SD_OK);
    sd_status rc = sd_em_side_input_get(h->em, b, H_SIDE("T", "v", sd_buf_bytes(&wbytes)), NULL,
                                        &view, &h->err);
    assert_int_equal(rc, SD_OK);
    fmt_view(sd_buf_bytes(&view), seen, sizeof(seen));
    h_record(h, "m=%llu saw %s", (unsigned long long)v, seen);
    sd_buf_deinit(&wbytes);
    sd_buf_deinit(&view);
    return SD_OK;
}

static void build_tsi(harness *h, tsi_ctx *ctx)
{
    static const char *tsout[] = { "tsout" }, *routed[] = { "sidekv", "mainw" },
                      *view[] = { "view" }, *mains[] = { "mainw" };
    bool global = ctx->ws.kind == SD_WINDOWFN_GLOBAL;
    sd_windowing main_ws = ctx->ws;
    main_ws.trigger = NULL;
    h_pcoll(h, "tsout", wv_kv_g, NULL);
    h_pcoll(h, "sidekv", global ? wv_kv_g : wv_kv_i, &ctx->ws);
    h_pcoll(h, "mainw", global ? wv_kv_g : wv_kv_i, &main_ws);
    h_pcoll(h, "view", global ? wv_grouped_g : wv_grouped_i, &ctx->ws);
    h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    h_stage(h, "route", SD_STAGE_SDK, "tsout", routed, 2, fn_route, ctx);
    h_stage(h, "gbk", SD_STAGE_GBK, "sidekv", view, 1, NULL, NULL);
    sd_side_input_spec sides[] = { { "T", "v", "view", SD_SIDE_ITERABLE, NULL } };
    sd_stage_spec reader = { .id = "reader",
                             .kind = SD_STAGE_SDK,
                             .inputs = mains,
                             .n_inputs = 1,
                             .side_inputs = sides,
                             .n_side_inputs = 1 };
    h_add(h, &reader, fn_reader, NULL, NULL);
}

void test_triggered_side_inputs(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(CASES) / sizeof(CASES[0]); c++) {
        const tsi_case *tc = &CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            tsi_ctx ctx = { .ws = { .kind = tc->kind,
                                    .size_ms = 10,
                                    .accumulating = tc->accumulating,
                                    .trigger = tc->trigger } };
            assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
            build_tsi(&h, &ctx);
            assert_int_equal(add_ts_steps(&h, &tc->steps), SD_OK);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            h_expect(&h, tc->want, tc->n_want);
            h_deinit(&h);
        }
    }
}

/* Complete b after running its DoFn. */
static void finish(harness *h, sd_bundle *b)
{
    assert_int_equal(h_process(h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h->em, b, &h->err), SD_OK);
    h_check(h);
}

/*
 * A firing that arrives while a reader bundle is in flight: one TestStream event holds main 100
 * and side 2, cut into two route bundles. The first completes and the reader's bundle for 100
 * is handed out; then the second completes and the GBK fires [2], but the reader is not
 * processed yet. It must still read the view it started with ([1]); the next main element
 * reads [2].
 */
void test_triggered_side_in_flight(void **state)
{
    static const char *const want[] = { "m=100 saw s:1", "m=101 saw s:2" };
    static const ts_case steps = { .steps = { { 'e', "s", 1, 1 },
                                              { 'b', "m", 100, 2 },
                                              { 'b', "s", 2, 3 },
                                              { 'e', "m", 101, 4 } },
                                   .n_steps = 4 };
    harness h;
    (void)state;
    h_shape shape = { "manual", 1, 0, 8, false, SD_SHAPE_GREEDY, 0, 0 };
    tsi_ctx ctx = { .ws = { .kind = SD_WINDOWFN_GLOBAL, .trigger = &T_REPEAT_COUNT1 } };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_tsi(&h, &ctx);
    assert_int_equal(add_ts_steps(&h, &steps), SD_OK);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    finish(&h, pull(&h, "route")); /* side 1: the GBK fires [1] */
    sd_bundle *r1 = pull(&h, "route");
    sd_bundle *r2 = pull(&h, "route");
    finish(&h, r1); /* main 100 */
    sd_bundle *reader = pull(&h, "reader");
    finish(&h, r2); /* side 2 */
    sd_bundle *none = NULL;
    assert_int_equal(sd_em_next_bundle(h.em, &none, &h.err), SD_OK); /* the GBK fires [2] */
    h_check(&h);
    assert_null(none);
    finish(&h, reader);
    h_run_ok(&h);
    h_expect(&h, want, 2);
    h_deinit(&h);
}

/*
 * An empty side window is not complete while its allowed lateness lets late data in (no
 * trigger: the default one). Main 100 (window [10, 20)) reads the side window [10, 20), empty
 * when the watermark passes 20; side 7 comes late (at 12, within the lateness of 20) and fires
 * a late pane. Main 100 must see it: it waits for the window to hold something or to expire
 * (at 39 + 20). Main 101 (window [30, 40)) reads a window that stays empty and is released
 * once it expires (the watermark to 60), seeing nothing. Under every bundle shape.
 */
void test_side_window_waits_for_lateness(void **state)
{
    static const char *const want[] = { "m=100 saw s:7", "m=101 saw -" };
    static const ts_case steps = { .steps = { { 'e', "m", 100, 15 },
                                              { 'w', NULL, 0, 25 },
                                              { 'e', "s", 7, 12 },
                                              { 'e', "m", 101, 35 },
                                              { 'w', NULL, 0, 60 } },
                                   .n_steps = 5 };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        tsi_ctx ctx = { .ws = {
                            .kind = SD_WINDOWFN_FIXED, .size_ms = 10, .allowed_lateness_ms = 20 } };
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        build_tsi(&h, &ctx);
        assert_int_equal(add_ts_steps(&h, &steps), SD_OK);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, 2);
        h_deinit(&h);
    }
}
