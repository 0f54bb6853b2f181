/*
 * Engine tests, state concern: user state's lifetime and its richer kinds.
 *
 * The state of expired windows is garbage-collected; OnWindowExpiration callbacks (OWE_CASES,
 * run by the case driver) see a window's state once, hold the output watermark until their
 * bundle completes, and reject bad specs; OrderedListState (OL_CASES) adds, reads ranges and
 * clears ranges, checked against a model.
 */
#include "engine_harness.h"

static sd_status fn_bag_count(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes user_key;
    uint64_t v;
    sd_reader r = sd_reader_make(e->elem);
    uint8_t wmem[32];
    sd_buf wbuf = { .data = wmem, .cap = sizeof(wmem) };
    sd_buf bag;
    (void)ctx;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    assert_int_equal(sd_window_encode(c_iw, &e->win, &wbuf, &h->err), SD_OK);
    sd_bytes window = sd_bytes_make(wmem, wbuf.len);
    sd_buf_init(&bag, 0);
    sd_status rc =
        sd_em_user_state_get(h->em, b, H_STATE("T", "bag", window, key), NULL, &bag, &h->err);
    h_record(h, "v=%llu w=[%lld,%lld) held=%zu", (unsigned long long)v, (long long)e->win.start,
             (long long)e->win.end, bag.len);
    if (rc == SD_OK) {
        rc = sd_em_user_state_append(h->em, b, H_STATE("T", "bag", window, key), NULL,
                                     sd_bytes_make("\x01", 1), &h->err);
    }
    sd_buf_deinit(&bag);
    return rc;
}

void test_state_of_expired_windows_is_dropped(void **state)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" };
    static const char *const want[] = { "v=1 w=[0,10) held=0", "v=2 w=[0,10) held=1",
                                        "v=12 w=[10,20) held=0", "v=15 w=[10,20) held=1" };
    harness h;
    (void)state;
    window_case wc = { .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 } };
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    h_pcoll(&h, "tsout", wv_kv_g, NULL);
    h_pcoll(&h, "windowed", wv_kv_i, &wc.ws);
    h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    h_stage(&h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, &wc);
    const char *ins[] = { "windowed" };
    sd_stage_spec st = {
        .id = "bags", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .stateful = true
    };
    h_add(&h, &st, fn_bag_count, NULL, NULL);
    /* The late element 3 arrives after the watermark passed [0,10): its window's state was
     * dropped when the stage's output watermark passed the window, and the element itself is
     * dropped as late (STATEFUL_LATE_CASES below). */
    ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                              { 'e', "a", 2, 2 },
                              { 'w', NULL, 0, 10 },
                              { 'e', "a", 3, 3 },
                              { 'e', "a", 12, 12 },
                              { 'e', "a", 15, 15 } },
                   .n_steps = 6 };
    add_ts_steps(&h, &tc);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 4);
    sd__stage *bags = sd_map_get_str(&h.em->stage_by_id, "bags");
    assert_int_equal(bags->state.len, 0);
    assert_int_equal(bags->dropped_late, 1);
    h_deinit(&h);
}

/* fn_bag_count, noting the stage's user-state epoch (the executor's cache token) too. */
static sd_status fn_bag_epoch(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    h_record(h, "epoch=%llu", (unsigned long long)sd_em_bundle_state_epoch(b));
    return fn_bag_count(h, b, e, ctx);
}

static void build_bags(harness *h, const ts_case *tc, window_case *wc)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" }, *ins[] = { "windowed" };
    wc->ws.kind = SD_WINDOWFN_FIXED;
    wc->ws.size_ms = 10;
    h_pcoll(h, "tsout", wv_kv_g, NULL);
    h_pcoll(h, "windowed", wv_kv_i, &wc->ws);
    h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    h_stage(h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, wc);
    sd_stage_spec st = {
        .id = "bags", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .stateful = true
    };
    h_add(h, &st, fn_bag_epoch, NULL, NULL);
    add_ts_steps(h, tc);
}

/*
 * The stage's user-state epoch stays the same while only its bundles' own commits change its
 * state (an SDK may keep that state across bundles), and changes when the runner drops state
 * itself: here the state of [0,10) once the watermark passes it.
 */
void test_state_epoch_changes_when_the_runner_drops_state(void **state)
{
    static const char *const want[] = { "epoch=1", "v=1 w=[0,10) held=0",
                                        "epoch=1", "v=2 w=[0,10) held=1",
                                        "epoch=1", "v=12 w=[10,20) held=0",
                                        "epoch=2", "v=13 w=[10,20) held=1",
                                        "epoch=2", "v=15 w=[10,20) held=2" };
    harness h;
    window_case wc = { 0 };
    (void)state;
    /* Key b's cell of [10,20) lives on through the first watermark step: only [0,10) goes. */
    ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                              { 'e', "a", 2, 2 },
                              { 'e', "a", 12, 12 },
                              { 'w', NULL, 0, 10 },
                              { 'e', "a", 13, 13 },
                              { 'e', "a", 15, 15 } },
                   .n_steps = 6 };
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    build_bags(&h, &tc, &wc);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 10);
    h_deinit(&h);
}

/* A failed bundle changes the epoch (its SDK may have cached writes that were never
 * committed); a completed one does not. */
void test_state_epoch_changes_when_a_bundle_fails(void **state)
{
    harness h;
    window_case wc = { 0 };
    h_shape shape = { "epoch-manual", 0, 0, 8, false, SD_SHAPE_GREEDY, 0, 0 };
    (void)state;
    ts_case tc = { .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 } }, .n_steps = 2 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_bags(&h, &tc, &wc);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    sd_bundle *b = pull(&h, "assign");
    assert_int_equal(sd_em_bundle_state_epoch(b), 0); /* not a stateful stage */
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    b = pull(&h, "bags");
    uint64_t e0 = sd_em_bundle_state_epoch(b);
    assert_true(e0 != 0);
    assert_int_equal(h_process(&h, b), SD_OK);
    sd_em_fail_bundle(h.em, b);
    b = pull(&h, "bags");
    uint64_t e1 = sd_em_bundle_state_epoch(b);
    assert_true(e1 != e0);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_run_ok(&h);
    static const char *const want[] = { "epoch=1", "v=1 w=[0,10) held=0",
                                        "epoch=2", "v=1 w=[0,10) held=0",
                                        "epoch=2", "v=2 w=[0,10) held=1" };
    h_expect(&h, want, 6);
    h_deinit(&h);
}

/*
 * A stateful stage drops an element whose window's clean-up time (max timestamp + allowed
 * lateness) is behind its input's watermark on arrival, counted as late, as Java's stateful
 * ParDo runner does (and the GroupByKey here): its window's state is gone, and the DoFn would
 * otherwise see it with fresh state. A stateless stage reading the same PCollection still gets
 * it. Issue 33: fixed windows of 10 s, an element at 1 s, the watermark to 15 s, then one at
 * 2 s.
 */
typedef struct stateful_late_case {
    const char *name;
    int64_t lateness;
    ts_step steps[8];
    size_t n_steps;
    const char *want[8]; /* the stateful stage's records, then the stateless one's */
    size_t n_want;
    uint64_t dropped;
} stateful_late_case;

static const stateful_late_case STATEFUL_LATE_CASES[] = {
    { .name = "expired-window-dropped",
      .steps = { { 'e', "a", 1, 1000 }, { 'w', NULL, 0, 15000 }, { 'e', "a", 2, 2000 } },
      .n_steps = 3,
      .want = { "v=1 w=[0,10000) held=0", "plain v=1", "plain v=2" },
      .n_want = 3,
      .dropped = 1 },
    { .name = "within-allowed-lateness-kept-with-its-state",
      .lateness = 10000,
      .steps = { { 'e', "a", 1, 1000 }, { 'w', NULL, 0, 15000 }, { 'e', "a", 2, 2000 } },
      .n_steps = 3,
      .want = { "v=1 w=[0,10000) held=0", "v=2 w=[0,10000) held=1", "plain v=1", "plain v=2" },
      .n_want = 4 },
    { .name = "past-allowed-lateness-dropped",
      .lateness = 5000,
      .steps = { { 'e', "a", 1, 1000 }, { 'w', NULL, 0, 15000 }, { 'e', "a", 2, 2000 } },
      .n_steps = 3,
      .want = { "v=1 w=[0,10000) held=0", "plain v=1", "plain v=2" },
      .n_want = 3,
      .dropped = 1 },
    { .name = "at-the-clean-up-time-kept",
      .steps = { { 'e', "a", 1, 1000 }, { 'w', NULL, 0, 9999 }, { 'e', "a", 2, 2000 } },
      .n_steps = 3,
      .want = { "v=1 w=[0,10000) held=0", "v=2 w=[0,10000) held=1", "plain v=1", "plain v=2" },
      .n_want = 4 },
};

static sd_status fn_plain(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t v;
    (void)b;
    (void)ctx;
    get_kv(e->elem, &key, &v);
    h_record(h, "plain v=%llu", (unsigned long long)v);
    return SD_OK;
}

static const char *stateful_late_name(const void *r)
{
    return ((const stateful_late_case *)r)->name;
}

static sd_status build_stateful_late(harness *h, const void *r, window_case *wc)
{
    const stateful_late_case *c = r;
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" };
    static const char *ins[] = { "windowed" };
    wc->ws = (sd_windowing){ .kind = SD_WINDOWFN_FIXED,
                             .size_ms = 10000,
                             .allowed_lateness_ms = c->lateness };
    ts_case tc = { .n_steps = c->n_steps };
    memcpy(tc.steps, c->steps, c->n_steps * sizeof(ts_step));
    sd_stage_spec st = {
        .id = "bags", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .stateful = true
    };
    sd_status rc = h_pcoll(h, "tsout", wv_kv_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, wc);
    }
    if (rc == SD_OK) {
        rc = h_add(h, &st, fn_bag_count, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "plain", SD_STAGE_SDK, "windowed", NULL, 0, fn_plain, NULL);
    }
    if (rc == SD_OK) {
        rc = add_ts_steps(h, &tc);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

static void check_stateful_late(harness *h, const void *r)
{
    const stateful_late_case *c = r;
    h_expect(h, c->want, c->n_want);
    sd__stage *bags = sd_map_get_str(&h->em->stage_by_id, "bags");
    sd__stage *plain = sd_map_get_str(&h->em->stage_by_id, "plain");
    assert_int_equal(bags->dropped_late, c->dropped);
    assert_int_equal(plain->dropped_late, 0);
}

void test_stateful_drops_expired_windows(void **state)
{
    const h_case_table t = { .rows = STATEFUL_LATE_CASES,
                             .n_rows = sizeof(STATEFUL_LATE_CASES) / sizeof(STATEFUL_LATE_CASES[0]),
                             .row_size = sizeof(stateful_late_case),
                             .name = stateful_late_name,
                             .build = build_stateful_late,
                             .check = check_stateful_late };
    (void)state;
    h_run_cases(&t);
}

/* ========================================================================================== */
/* OnWindowExpiration                                                                         */
/* ========================================================================================== */

static const owe_case *owe_current;

static void owe_window(const sd_window *w, uint8_t *mem, size_t cap, sd_bytes *out)
{
    sd_buf wb = { .data = mem, .cap = cap };
    assert_int_equal(sd_window_encode(w->global ? c_gw : c_iw, w, &wb, NULL), SD_OK);
    *out = sd_bytes_make(mem, wb.len);
}

/* Element KV<k, v>: append v to the bag "buf" of (k, window). */
static sd_status fn_owe_elem(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes user_key, window;
    uint64_t v;
    uint8_t wmem[32], vb[10];
    (void)ctx;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    owe_window(&e->win, wmem, sizeof(wmem), &window);
    sd_buf vbuf = { .data = vb, .cap = sizeof(vb) };
    sd_status rc = sd_buf_put_varint(&vbuf, v);
    if (rc == SD_OK) {
        rc = sd_em_user_state_append(h->em, b, H_STATE("T", "buf", window, key), NULL,
                                     sd_bytes_make(vb, vbuf.len), &h->err);
    }
    return rc;
}

/* The expiration callback: sum the window's bag, emit KV<k, sum> at the window's max
 * timestamp (on time downstream only if the output watermark was held), clear the bag. */
static sd_status
fn_owe_timer(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx)
{
    const owe_case *oc = owe_current;
    const sd_window *w = &sd_windows_items(&t->windows)[0];
    uint8_t wmem[32];
    sd_bytes window, user_key;
    sd_buf bag;
    (void)ctx;
    assert_string_equal(family, "exp");
    assert_int_equal(t->windows.n, 1);
    assert_int_equal(t->tag.len, 0);
    assert_true(t->fire == (w->global ? SD_TIME_GLOBAL_MAX : w->end - 1));
    assert_true(t->hold == t->fire);
    /* Fired only once the input watermark passed the window's end plus the lateness. */
    assert_true(sd_em_bundle_watermark(b) > sd_time_add(t->fire, oc->lateness) ||
                sd_em_bundle_watermark(b) == SD_TIME_MAX);
    owe_window(w, wmem, sizeof(wmem), &window);
    sd_buf_init(&bag, 0);
    sd_status rc =
        sd_em_user_state_get(h->em, b, H_STATE("T", "buf", window, t->key), NULL, &bag, &h->err);
    uint64_t sum = 0, n = 0;
    sd_reader r = sd_reader_make(sd_buf_bytes(&bag));
    while (rc == SD_OK && !sd_reader_done(&r)) {
        uint64_t v;
        assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
        sum += v;
        n++;
    }
    sd_reader kr = sd_reader_make(t->key);
    assert_int_equal(sd_reader_lp(&kr, &user_key), SD_OK);
    if (w->global) {
        h_record(h, "exp k=%.*s w=G sum=%llu n=%llu", (int)user_key.len, (const char *)user_key.ptr,
                 (unsigned long long)sum, (unsigned long long)n);
    } else {
        h_record(h, "exp k=%.*s w=[%lld,%lld) sum=%llu n=%llu", (int)user_key.len,
                 (const char *)user_key.ptr, (long long)w->start, (long long)w->end,
                 (unsigned long long)sum, (unsigned long long)n);
    }
    if (rc == SD_OK) {
        rc = sd_em_user_state_clear(h->em, b, H_STATE("T", "buf", window, t->key), NULL, &h->err);
    }
    sd_buf kv;
    sd_buf_init(&kv, 0);
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(&kv, t->key);
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_varint(&kv, sum);
    }
    sd_pane p = SD_PANE_NO_FIRING;
    if (rc == SD_OK) {
        rc = h_emit(h, b, "out", t->fire, w, 1, &p, sd_buf_bytes(&kv));
    }
    sd_buf_deinit(&kv);
    sd_buf_deinit(&bag);
    return rc;
}

/* TestStream -> assign -> stateful "owe" (expiration family T/exp) -> GBK -> collect. */
sd_status build_owe(harness *h, const owe_case *oc, window_case *wc)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" }, *out[] = { "out" },
                      *grouped[] = { "grouped" };
    bool global = oc->kind == SD_WINDOWFN_GLOBAL;
    memset(wc, 0, sizeof(*wc));
    wc->ws = (sd_windowing){ .kind = oc->kind,
                             .size_ms = global ? 0 : 10,
                             .allowed_lateness_ms = oc->lateness };
    owe_current = oc;
    sd_timer_family_spec fam = { "T", "exp", false, global ? c_timer_g : c_timer_i };
    const char *ins[] = { "windowed" };
    sd_stage_spec owe = { .id = "owe",
                          .kind = SD_STAGE_SDK,
                          .inputs = ins,
                          .n_inputs = 1,
                          .outputs = out,
                          .n_outputs = 1,
                          .stateful = true,
                          .timer_families = &fam,
                          .n_timer_families = 1,
                          .expiration_transform_id = "T",
                          .expiration_family_id = "exp" };
    ts_case steps = { .n_steps = oc->n_steps };
    memcpy(steps.steps, oc->steps, sizeof(oc->steps));
    sd_status rc = h_pcoll(h, "tsout", wv_kv_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", global ? wv_kv_g : wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "out", global ? wv_kv_g : wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", global ? wv_grouped_g : wv_grouped_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, wc);
    }
    if (rc == SD_OK) {
        rc = h_add(h, &owe, fn_owe_elem, fn_owe_timer, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "out", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    }
    if (rc == SD_OK) {
        rc = add_ts_steps(h, &steps);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    if (!h->oom) {
        assert_int_equal(rc, SD_OK);
    }
    return rc;
}

const owe_case OWE_CASES[] = {
    { .name = "fixed windows, two keys, watermark by watermark",
      .kind = SD_WINDOWFN_FIXED,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 5, 5 },
                 { 'e', "b", 3, 3 },
                 { 'e', "a", 12, 12 },
                 { 'w', NULL, 0, 10 },
                 { 'w', NULL, 0, 20 } },
      .n_steps = 6,
      .want = { "exp k=a w=[0,10) sum=6 n=2", "exp k=b w=[0,10) sum=3 n=1",
                "exp k=a w=[10,20) sum=12 n=1", "k=a w=[0,10) ts=9 pane=07 v=6",
                "k=b w=[0,10) ts=9 pane=07 v=3", "k=a w=[10,20) ts=19 pane=07 v=12" },
      .n_want = 6 },
    { .name = "allowed lateness: late data within it is in the state",
      .kind = SD_WINDOWFN_FIXED,
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 14 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 30 } },
      .n_steps = 6,
      /* The GBK's watermark jumps over the window's end and clean-up time: on time, not
       * last. */
      .want = { "exp k=a w=[0,10) sum=8 n=3", "k=a w=[0,10) ts=9 pane=05 v=8" },
      .n_want = 2 },
    { .name = "global window expires at the end of the input",
      .kind = SD_WINDOWFN_GLOBAL,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "b", 2, 2 }, { 'e', "a", 3, 3 } },
      .n_steps = 3,
      .want = { "exp k=a w=G sum=4 n=2", "exp k=b w=G sum=2 n=1", "k=a w=G ts=GMAX pane=07 v=4",
                "k=b w=G ts=GMAX pane=07 v=2" },
      .n_want = 4 },
    { .name = "data after expiry gets no second notification",
      .kind = SD_WINDOWFN_FIXED,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'e', "a", 3, 3 } },
      .n_steps = 3,
      .want = { "exp k=a w=[0,10) sum=1 n=1", "k=a w=[0,10) ts=9 pane=07 v=1" },
      .n_want = 2 },
};
const size_t N_OWE_CASES = sizeof(OWE_CASES) / sizeof(OWE_CASES[0]);

static const char *owe_case_name(const void *r)
{
    return ((const owe_case *)r)->name;
}

static sd_status build_owe_case(harness *h, const void *r, window_case *wc)
{
    return build_owe(h, r, wc);
}

static void check_owe_case(harness *h, const void *r)
{
    const owe_case *oc = r;
    h_expect(h, oc->want, oc->n_want);
    sd__stage *st = sd_map_get_str(&h->em->stage_by_id, "owe");
    assert_int_equal(st->state.len, 0);  /* garbage-collected after the callbacks */
    assert_int_equal(st->timers.len, 0); /* nothing left to notify */
    sd_em_stage_stats gs;
    sd_em_stage_info(h->em, 3, &gs);
    assert_string_equal(gs.id, "gbk");
    assert_int_equal(gs.dropped_late, 0); /* the callbacks' output was on time */
}

void test_on_window_expiration(void **state)
{
    const h_case_table t = { .rows = OWE_CASES,
                             .n_rows = N_OWE_CASES,
                             .row_size = sizeof(owe_case),
                             .name = owe_case_name,
                             .build = build_owe_case,
                             .check = check_owe_case };
    (void)state;
    h_run_cases(&t);
}

/* Step by step: the expiration bundle holds the output watermark until it completes. */
void test_on_window_expiration_holds_output(void **state)
{
    static const owe_case oc = { .kind = SD_WINDOWFN_FIXED,
                                 .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 50 } },
                                 .n_steps = 2 };
    harness h;
    window_case wc;
    sd_time wm;
    (void)state;
    h_shape shape = { "owe-manual", 0, 0, 8, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    assert_int_equal(build_owe(&h, &oc, &wc), SD_OK);
    sd_bundle *b = pull(&h, "assign");
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    b = pull(&h, "owe");
    assert_int_equal(sd_em_bundle_n_timer_inputs(b), 0);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    /* The watermark moves to 50 at quiescence; the expiration timer of [0,10) fires. */
    b = pull(&h, "owe");
    assert_int_equal(sd_em_bundle_input_count(b), 0);
    assert_int_equal(sd_em_bundle_n_timer_inputs(b), 1);
    assert_int_equal(sd_em_pcollection_watermark(h.em, "out", &wm), SD_OK);
    assert_true(wm <= 9);
    sd__stage *st = sd_map_get_str(&h.em->stage_by_id, "owe");
    assert_int_equal(st->state.len, 1); /* not collected while the callback runs */
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_check(&h);
    /* Watermarks move at the next scheduling pass: the GBK fires the callback's output. */
    b = pull(&h, "collect");
    assert_int_equal(sd_em_pcollection_watermark(h.em, "out", &wm), SD_OK);
    assert_true(wm >= 50);
    assert_int_equal(st->state.len, 0);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_run_ok(&h);
    static const char *const want[] = { "exp k=a w=[0,10) sum=1 n=1",
                                        "k=a w=[0,10) ts=9 pane=07 v=1" };
    h_expect(&h, want, 2);
    h_deinit(&h);
}

void test_on_window_expiration_spec_errors(void **state)
{
    static const struct {
        const char *name;
        const char *transform;
        const char *family;
        bool processing_time;
        sd_status want;
    } rows[] = {
        { "family of another transform", "U", "exp", false, SD_ENOTFOUND },
        { "undeclared family", "T", "nope", false, SD_ENOTFOUND },
        { "transform without family", "T", NULL, false, SD_EINVAL },
        { "processing-time family", "T", "exp", true, SD_EINVAL },
        { "event-time family", "T", "exp", false, SD_OK },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_em *em;
        sd_err err = { 0 };
        static const char *imp[] = { "imp" }, *kv[] = { "kv" };
        assert_int_equal(sd_em_create(NULL, &em), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "kv", wv_kv_g, NULL, &err), SD_OK);
        sd_stage_spec s1 = { .id = "i", .kind = SD_STAGE_IMPULSE, .outputs = kv, .n_outputs = 1 };
        assert_int_equal(sd_em_add_stage(em, &s1, &err), SD_OK);
        sd_timer_family_spec fam = { "T", "exp", rows[i].processing_time, c_timer_g };
        sd_stage_spec s = { .id = "s",
                            .kind = SD_STAGE_SDK,
                            .inputs = kv,
                            .n_inputs = 1,
                            .stateful = true,
                            .timer_families = &fam,
                            .n_timer_families = 1,
                            .expiration_transform_id = rows[i].transform,
                            .expiration_family_id = rows[i].family };
        sd_status rc = sd_em_add_stage(em, &s, &err);
        if (rc != rows[i].want) {
            fail_msg("%s: got %s (%s)", rows[i].name, sd_status_name(rc), sd_err_msg(&err));
        }
        (void)imp;
        sd_em_destroy(em);
    }
}

/* ========================================================================================== */
/* Ordered-list user state                                                                    */
/* ========================================================================================== */

typedef struct ol_op {
    char op; /* a: append (a, value)  A: append raw bytes `value` (bad: must fail)
                c: clear [a, b)  g: get [a, b) == want  n: get [a, b) has `a`.. count in want
                r: append sort keys b-1 down to a  |: complete the bundle  x: fail it */
    int64_t a, b;
    const char *value;
    const char *want;
} ol_op;

typedef struct ol_case {
    const char *name;
    ol_op ops[24];
} ol_case;

#define OL_MIN INT64_MIN
#define OL_MAX INT64_MAX

static const ol_case OL_CASES[] = {
    { "append out of order, read back sorted",
      { { 'a', 5, 0, "e", NULL },
        { 'a', 1, 0, "a", NULL },
        { 'a', 3, 0, "c", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a 3:c 5:e" },
        { '|', 0, 0, NULL, NULL },
        { 'g', 2, 5, NULL, "3:c" },
        { 'g', 1, 2, NULL, "1:a" },
        { '|', 0, 0, NULL, NULL } } },
    { "equal sort keys keep their append order across bundles",
      { { 'a', 2, 0, "x", NULL },
        { '|', 0, 0, NULL, NULL },
        { 'a', 2, 0, "y", NULL },
        { 'a', 1, 0, "w", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:w 2:x 2:y" },
        { '|', 0, 0, NULL, NULL },
        { 'g', 2, 3, NULL, "2:x 2:y" },
        { '|', 0, 0, NULL, NULL } } },
    { "a clear hides committed and earlier entries, not later appends",
      { { 'a', 1, 0, "a", NULL },
        { 'a', 2, 0, "b", NULL },
        { 'a', 3, 0, "c", NULL },
        { '|', 0, 0, NULL, NULL },
        { 'a', 2, 0, "d", NULL },
        { 'c', 2, 3, NULL, NULL },
        { 'a', 2, 0, "e", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a 2:e 3:c" },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a 2:e 3:c" },
        { 'c', OL_MIN, 2, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "2:e 3:c" },
        { '|', 0, 0, NULL, NULL } } },
    { "a failed bundle leaves no trace",
      { { 'a', 1, 0, "a", NULL },
        { '|', 0, 0, NULL, NULL },
        { 'c', OL_MIN, OL_MAX, NULL, NULL },
        { 'a', 9, 0, "z", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "9:z" },
        { 'x', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a" },
        { '|', 0, 0, NULL, NULL } } },
    { "negative sort keys, empty and inverted ranges",
      { { 'a', -5, 0, "m", NULL },
        { 'a', 0, 0, "z", NULL },
        { 'a', -1, 0, "n", NULL },
        { 'g', -5, 0, NULL, "-5:m -1:n" },
        { 'g', 3, 3, NULL, "" },
        { 'c', 4, 1, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "-5:m -1:n 0:z" },
        { 'c', -1, 1, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "-5:m" },
        { '|', 0, 0, NULL, NULL } } },
    { "bad entry bytes add nothing",
      { { 'a', 1, 0, "a", NULL },
        { 'A', 0, 0,
          "\x05\x03"
          "ab",
          NULL },
        { 'A', 0, 0, "\x80", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a" },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a" },
        { '|', 0, 0, NULL, NULL } } },
    { "many entries merged into the middle, then a prefix cleared",
      { { 'a', 0, 0, "lo", NULL },
        { 'a', 1000, 0, "hi", NULL },
        { '|', 0, 0, NULL, NULL },
        { 'r', 1, 101, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'n', OL_MIN, OL_MAX, NULL, "102" },
        { 'g', 99, 101, NULL, "99:v 100:v" },
        { 'c', OL_MIN, 100, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "100:v 1000:hi" },
        { 'r', 200, 230, NULL, NULL },
        { 'c', 1000, 1001, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'n', OL_MIN, OL_MAX, NULL, "31" },
        { 'g', 228, OL_MAX, NULL, "228:v 229:v" },
        { '|', 0, 0, NULL, NULL } } },
};

static void ol_format(sd_bytes data, char *out, size_t cap)
{
    sd_reader r = sd_reader_make(data);
    size_t off = 0;
    out[0] = 0;
    while (!sd_reader_done(&r)) {
        uint64_t k;
        sd_bytes v;
        assert_int_equal(sd_reader_varint(&r, &k), SD_OK);
        assert_int_equal(sd_reader_lp(&r, &v), SD_OK);
        off += (size_t)snprintf(out + off, cap - off, "%s%lld:%.*s", off ? " " : "",
                                (long long)(int64_t)k, (int)v.len, (const char *)v.ptr);
        assert_true(off < cap);
    }
}

static size_t ol_count(sd_bytes data)
{
    sd_reader r = sd_reader_make(data);
    size_t n = 0;
    while (!sd_reader_done(&r)) {
        uint64_t k;
        sd_bytes v;
        assert_int_equal(sd_reader_varint(&r, &k), SD_OK);
        assert_int_equal(sd_reader_lp(&r, &v), SD_OK);
        n++;
    }
    return n;
}

static sd_status fn_ignore(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)h;
    (void)b;
    (void)e;
    (void)ctx;
    return SD_OK;
}

void test_ordered_list_state(void **state)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" };
    static window_case rows = { .rows = { { "a", 1, 1 },
                                          { "a", 2, 2 },
                                          { "a", 3, 3 },
                                          { "a", 4, 4 },
                                          { "a", 5, 5 },
                                          { "a", 6, 6 },
                                          { "a", 7, 7 },
                                          { "a", 8, 8 } },
                                .n_rows = 8 };
    const sd_bytes key = sd_bytes_make("\x01"
                                       "a",
                                       2),
                   gw = SD_BYTES_NULL;
    (void)state;
    for (size_t c = 0; c < sizeof(OL_CASES) / sizeof(OL_CASES[0]); c++) {
        const ol_case *oc = &OL_CASES[c];
        harness h;
        sd_buf buf, out;
        char got[2048];
        h_shape shape = { oc->name, 1, 0, 1, false, SD_SHAPE_GREEDY, 0, 0 };
        assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
        sd_buf_init(&buf, 0);
        sd_buf_init(&out, 0);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "raw", wv_kv_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_rows, &rows);
        const char *ins[] = { "raw" };
        sd_stage_spec ol = {
            .id = "ol", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .stateful = true
        };
        h_add(&h, &ol, fn_ignore, NULL, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        sd_bundle *g = pull(&h, "gen");
        assert_int_equal(h_process(&h, g), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
        sd_bundle *b = NULL;
        for (size_t i = 0; i < 24 && oc->ops[i].op != 0; i++) {
            const ol_op *op = &oc->ops[i];
            if (b == NULL) {
                b = pull(&h, "ol");
            }
            sd_buf_reset(&buf);
            sd_buf_reset(&out);
            switch (op->op) {
            case 'a':
                assert_int_equal(sd_buf_put_varint(&buf, (uint64_t)op->a), SD_OK);
                assert_int_equal(sd_buf_put_lp(&buf, sd_bytes_str(op->value)), SD_OK);
                assert_int_equal(sd_em_ordered_list_append(h.em, b, H_STATE("T", "ol", gw, key),
                                                           sd_buf_bytes(&buf), &h.err),
                                 SD_OK);
                break;
            case 'A':
                assert_int_equal(sd_em_ordered_list_append(h.em, b, H_STATE("T", "ol", gw, key),
                                                           sd_bytes_str(op->value), &h.err),
                                 SD_EPROTO);
                break;
            case 'r':
                /* One append call with many entries, in descending order. */
                for (int64_t k = op->b - 1; k >= op->a; k--) {
                    assert_int_equal(sd_buf_put_varint(&buf, (uint64_t)k), SD_OK);
                    assert_int_equal(sd_buf_put_lp(&buf, sd_bytes_str("v")), SD_OK);
                }
                assert_int_equal(sd_em_ordered_list_append(h.em, b, H_STATE("T", "ol", gw, key),
                                                           sd_buf_bytes(&buf), &h.err),
                                 SD_OK);
                break;
            case 'c':
                assert_int_equal(sd_em_ordered_list_clear(h.em, b, H_STATE("T", "ol", gw, key),
                                                          op->a, op->b, &h.err),
                                 SD_OK);
                break;
            case 'g':
            case 'n':
                assert_int_equal(sd_em_ordered_list_get(h.em, b, H_STATE("T", "ol", gw, key), op->a,
                                                        op->b, &out, &h.err),
                                 SD_OK);
                if (op->op == 'g') {
                    ol_format(sd_buf_bytes(&out), got, sizeof(got));
                } else {
                    snprintf(got, sizeof(got), "%zu", ol_count(sd_buf_bytes(&out)));
                }
                if (strcmp(got, op->want) != 0) {
                    fail_msg("%s: op %zu: got \"%s\", want \"%s\"", oc->name, i, got, op->want);
                }
                break;
            case '|':
                assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
                b = NULL;
                break;
            case 'x':
                sd_em_fail_bundle(h.em, b);
                b = NULL;
                break;
            default:
                fail_msg("bad op %c", op->op);
            }
            h_check(&h);
        }
        assert_null(b);
        h_run_ok(&h);
        /* The global window expired at the end: the cell was collected. */
        sd__stage *st = sd_map_get_str(&h.em->stage_by_id, "ol");
        assert_int_equal(st->state.len, 0);
        sd_buf_deinit(&buf);
        sd_buf_deinit(&out);
        h_deinit(&h);
    }
}
