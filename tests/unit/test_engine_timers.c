/*
 * Engine tests, timers concern: stateful stages with user state, event-time and
 * processing-time timers, and delayed residuals.
 *
 * The keyed pipeline (build_keyed, driven by a timer_plan) sets a timer per element and sums
 * the key's state when it fires; it checks looping timers, that user state is tentative until
 * the bundle commits, that a split stateful bundle keeps its keys locked, processing-time
 * timers under the synthetic and the injected wall clock (fake_wall), and that an event-time
 * timer waits for the input watermark. fn_keyed, fn_keyed_timer, fn_resume and fn_seed are
 * shared with the TestStream, state, trigger and OOM tests.
 */
#include "engine_harness.h"

/* ========================================================================================== */
/* Stateful stages: user state and event-time timers                                         */
/* ========================================================================================== */

sd_time fake_wall_now = 1000000000000LL;
static sd_time pt_origin = 1000000000000LL; /* processing times are recorded relative to it */

sd_time fake_wall(void *ctx)
{
    (void)ctx;
    return fake_wall_now;
}

static sd_status set_timer(harness *h,
                           sd_bundle *b,
                           const char *family,
                           sd_bytes key,
                           sd_time fire,
                           sd_time hold,
                           const sd_coder *timer_coder)
{
    sd_timer t;
    sd_buf buf;
    sd_window w = sd_window_global();
    sd_timer_init(&t);
    sd_buf_init(&buf, 0);
    t.key = key;
    t.tag = SD_BYTES_NULL;
    sd_status rc = sd_windows_set(&t.windows, &w, 1);
    t.fire = fire;
    t.hold = hold;
    t.pane = SD_PANE_NO_FIRING;
    if (rc == SD_OK) {
        rc = sd_timer_encode(timer_coder, &t, &buf, &h->err);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_timers(h->em, b, "T", family, sd_buf_bytes(&buf), &h->err);
    }
    sd_timer_deinit(&t);
    sd_buf_deinit(&buf);
    return rc;
}

/* Element: KV<key, v>. Append v to bag state "buf" of the key; set a timer (twice: the first
 * setting is superseded, last write wins). */
sd_status fn_keyed(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    timer_plan *plan = ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes user_key;
    uint64_t v;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    uint8_t vb[10];
    sd_buf vbuf = { .data = vb, .cap = sizeof(vb) };
    sd_status rc = sd_buf_put_varint(&vbuf, v);
    if (rc == SD_OK) {
        rc = sd_em_user_state_append(h->em, b, H_STATE("T", "buf", SD_BYTES_NULL, key), NULL,
                                     sd_bytes_make(vb, vbuf.len), &h->err);
    }
    sd_time base = plan->processing_time ? fake_wall_now - plan->sdk_lag : 0;
    if (plan->report_base != 0) {
        sd_em_bundle_set_processing_time_base(b, base);
        plan->report_base -= plan->report_base > 0;
    }
    if (rc == SD_OK) {
        rc = set_timer(h, b, plan->family, key, base + plan->delay / 2, e->ts, c_timer_g);
    }
    if (rc == SD_OK) {
        rc = set_timer(h, b, plan->family, key, base + plan->delay, e->ts, c_timer_g);
    }
    return rc;
}

sd_status fn_keyed_timer(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx)
{
    timer_plan *plan = ctx;
    sd_buf bag;
    sd_bytes window = SD_BYTES_NULL;
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
    if (rc == SD_OK) {
        rc = sd_em_user_state_clear(h->em, b, H_STATE("T", "buf", window, t->key), NULL, &h->err);
    }
    sd_reader kr = sd_reader_make(t->key);
    sd_bytes user_key;
    assert_int_equal(sd_reader_lp(&kr, &user_key), SD_OK);
    if (!plan->processing_time) {
        /* An event-time timer never fires before the input watermark passed it. */
        assert_true(sd_em_bundle_watermark(b) > t->fire);
    }
    sd_time rel = plan->processing_time ? sd_em_clock_now(h->em) - pt_origin : t->fire;
    h_record(h, "%s k=%.*s sum=%llu n=%llu at=%lld", family, (int)user_key.len,
             (const char *)user_key.ptr, (unsigned long long)sum, (unsigned long long)n,
             (long long)rel);
    if (rc == SD_OK && plan->emit_windowed) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = sd_buf_append_bytes(&kv, t->key);
        if (rc == SD_OK) {
            rc = sd_buf_put_varint(&kv, sum);
        }
        sd_window w = sd_window_interval(t->fire, t->fire + 10);
        sd_pane p = SD_PANE_NO_FIRING;
        if (rc == SD_OK) {
            rc = h_emit(h, b, "out", t->fire, &w, 1, &p, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    if (rc == SD_OK && plan->loop_once > 0) {
        plan->loop_once--;
        sd_time base = plan->processing_time ? fake_wall_now : 0;
        rc = set_timer(h, b, family, t->key, base + plan->delay * 2, t->hold, c_timer_g);
    }
    sd_buf_deinit(&bag);
    return rc;
}

sd_status build_keyed(harness *h, window_case *wc, timer_plan *plan)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *out[] = { "out" },
                      *grouped[] = { "grouped" };
    static sd_windowing fixed10 = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 };
    sd_timer_family_spec fam = { "T", plan->family, plan->processing_time, c_timer_g };
    const char *ins[] = { "raw" };
    sd_stage_spec keyed = { .id = "keyed",
                            .kind = SD_STAGE_SDK,
                            .inputs = ins,
                            .n_inputs = 1,
                            .outputs = out,
                            .n_outputs = 1,
                            .stateful = true,
                            .timer_families = &fam,
                            .n_timer_families = 1 };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "raw", wv_kv_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "out", wv_kv_i, &fixed10);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_i, &fixed10);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_rows, wc);
    }
    if (rc == SD_OK) {
        rc = h_add(h, &keyed, fn_keyed, fn_keyed_timer, plan);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "out", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    if (!h->oom) {
        assert_int_equal(rc, SD_OK);
    }
    return rc;
}

void test_event_time_timers_and_state(void **state)
{
    static window_case rows = {
        .rows = { { "a", 1, 1 }, { "b", 10, 2 }, { "a", 2, 3 }, { "a", 4, 4 }, { "b", 20, 5 } },
        .n_rows = 5
    };
    /* One firing per key at 1000 (the setting at 500 was superseded); the firing's output is
     * on time downstream because the timer's hold kept the stage's output watermark back. */
    static const char *const want[] = { "flush k=a sum=7 n=3 at=1000",
                                        "flush k=b sum=30 n=2 at=1000",
                                        "k=a w=[1000,1010) ts=1009 pane=07 v=7",
                                        "k=b w=[1000,1010) ts=1009 pane=07 v=30" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        timer_plan plan = { .family = "flush", .delay = 1000, .emit_windowed = true };
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, 4);
        sd_em_stage_stats st;
        sd_em_stage_info(h.em, 3, &st);
        assert_string_equal(st.id, "gbk");
        assert_int_equal(st.dropped_late, 0);
        h_deinit(&h);
    }
}

void test_looping_timer(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 } }, .n_rows = 1 };
    static const char *const want[] = { "flush k=a sum=1 n=1 at=100", "flush k=a sum=0 n=0 at=200",
                                        "k=a w=[100,110) ts=109 pane=07 v=1",
                                        "k=a w=[200,210) ts=209 pane=07 v=0" };
    (void)state;
    harness h;
    timer_plan plan = { .family = "flush", .delay = 100, .emit_windowed = true, .loop_once = 1 };
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 4);
    h_deinit(&h);
}

void test_user_state_is_tentative(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "a", 2, 2 } }, .n_rows = 2 };
    static const char *const want[] = { "flush k=a sum=3 n=2 at=1000" };
    harness h;
    (void)state;
    timer_plan plan = { .family = "flush", .delay = 1000 };
    assert_int_equal(h_init(&h, &SHAPES[1], NULL, false), SD_OK); /* one element per bundle */
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    /* The first keyed bundle appends state and sets timers, then fails: none of it stays. */
    sd_bundle *b = pull(&h, "keyed");
    assert_int_equal(h_process(&h, b), SD_OK);
    sd_buf got;
    sd_buf_init(&got, 0);
    sd_bytes key = sd_bytes_make("\x01"
                                 "a",
                                 2);
    assert_int_equal(
        sd_em_user_state_get(h.em, b, H_STATE("T", "buf", SD_BYTES_NULL, key), NULL, &got, &h.err),
        SD_OK);
    assert_int_equal(got.len, 1); /* the bundle sees its own append */
    /* Key "a" is locked while this bundle runs: its second element must wait. */
    sd_bundle *other = NULL;
    assert_int_equal(sd_em_next_bundle(h.em, &other, &h.err), SD_OK);
    assert_null(other);
    sd_em_fail_bundle(h.em, b);
    h_check(&h);
    b = pull(&h, "keyed");
    sd_buf_reset(&got);
    assert_int_equal(
        sd_em_user_state_get(h.em, b, H_STATE("T", "buf", SD_BYTES_NULL, key), NULL, &got, &h.err),
        SD_OK);
    assert_int_equal(got.len, 0);
    /* Multimap state: append, clear one key, list keys — all tentative until commit. */
    sd_bytes m1 = sd_bytes_make("\x02m1", 3), m2 = sd_bytes_make("\x02m2", 3);
    assert_int_equal(sd_em_user_state_append(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), &m2,
                                             sd_bytes_make("\x05", 1), &h.err),
                     SD_OK);
    assert_int_equal(sd_em_user_state_append(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), &m1,
                                             sd_bytes_make("\x07", 1), &h.err),
                     SD_OK);
    /* A value of zero bytes (Java's SetState: a multimap with VoidCoder values) still makes
     * its key present, before and after commit. */
    sd_bytes m3 = sd_bytes_make("\x02m3", 3);
    assert_int_equal(sd_em_user_state_append(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), &m3,
                                             SD_BYTES_NULL, &h.err),
                     SD_OK);
    assert_int_equal(
        sd_em_user_state_keys(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), &got, &h.err),
        SD_OK);
    assert_int_equal(got.len, 9);
    assert_memory_equal(got.data, "\x02m1\x02m2\x02m3", 9);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_check(&h);
    b = pull(&h, "keyed");
    sd_buf_reset(&got);
    assert_int_equal(
        sd_em_user_state_get(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), &m1, &got, &h.err),
        SD_OK);
    assert_int_equal(got.len, 1);
    assert_int_equal(got.data[0], 7);
    /* Entries (MultimapEntriesUserState): each key, then its values as an IterableCoder writes
     * them (a big-endian count, then the values), committed and tentative alike. */
    assert_int_equal(sd_em_user_state_append(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), &m2,
                                             sd_bytes_make("\x09\x81\x01", 3), &h.err),
                     SD_OK);
    sd_buf_reset(&got);
    assert_int_equal(sd_em_user_state_entries(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key),
                                              c_varint, &got, &h.err),
                     SD_OK);
    static const uint8_t want_entries[] = { 2, 'm', '1', 0, 0,    0, 1, 7,   2,   'm', '2', 0, 0,
                                            0, 3,   5,   9, 0x81, 1, 2, 'm', '3', 0,   0,   0, 0 };
    assert_int_equal(got.len, sizeof(want_entries));
    assert_memory_equal(got.data, want_entries, sizeof(want_entries));
    /* Values that do not split with the value coder are the SDK's error, not a crash. */
    assert_int_equal(sd_em_user_state_entries(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), c_gw,
                                              &got, &h.err),
                     SD_EPROTO);
    assert_non_null(strstr(sd_err_msg(&h.err), "multimap entries of state \"mm\""));
    assert_int_equal(
        sd_em_user_state_clear(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), &m1, &h.err),
        SD_OK);
    sd_buf_reset(&got);
    assert_int_equal(sd_em_user_state_entries(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key),
                                              c_varint, &got, &h.err),
                     SD_OK);
    assert_int_equal(got.len, sizeof(want_entries) - 8);
    assert_memory_equal(got.data, want_entries + 8, sizeof(want_entries) - 8);
    sd_buf_reset(&got);
    assert_int_equal(
        sd_em_user_state_keys(h.em, b, H_STATE("T", "mm", SD_BYTES_NULL, key), &got, &h.err),
        SD_OK);
    assert_int_equal(got.len, 6);
    assert_memory_equal(got.data, "\x02m2\x02m3", 6);
    /* A window that does not decode with the input's window coder is an error. */
    assert_int_equal(sd_em_user_state_get(h.em, b, H_STATE("T", "buf", sd_bytes_make("zz", 2), key),
                                          NULL, &got, &h.err),
                     SD_EPROTO);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    sd_buf_deinit(&got);
    h_run_ok(&h);
    h_expect(&h, want, 1);
    h_deinit(&h);
}

void test_stateful_split_keeps_keys_locked(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "b", 2, 2 }, { "c", 3, 3 } },
                                .n_rows = 3 };
    static const char *const want[] = { "flush k=a sum=1 n=1 at=1000",
                                        "flush k=b sum=2 n=1 at=1000",
                                        "flush k=c sum=3 n=1 at=1000" };
    harness h;
    (void)state;
    timer_plan plan = { .family = "flush", .delay = 1000 };
    h_shape shape = { "stateful-split", 0, 0, 4, false, SD_SHAPE_GREEDY, 0, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    sd_bundle *b = pull(&h, "keyed");
    assert_int_equal(sd_em_bundle_input_count(b), 3);
    /* The SDK only got to "a" (it processes element 0 below) and split off "b" and "c". */
    assert_int_equal(sd_em_bundle_split(h.em, b, 1, &h.err), SD_OK);
    h_check(&h);
    assert_int_equal(sd_em_bundle_input_count(b), 3); /* the input as sent does not change */
    /* The split-off keys stay locked by the running bundle until it ends. */
    sd_bundle *other = NULL;
    assert_int_equal(sd_em_next_bundle(h.em, &other, &h.err), SD_OK);
    assert_null(other);
    assert_int_equal(h_process_n(&h, b, 1), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_check(&h);
    other = pull(&h, "keyed");
    assert_int_equal(sd_em_bundle_input_count(other), 2);
    assert_int_equal(h_process(&h, other), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, other, &h.err), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 3);
    h_deinit(&h);
}

/* ========================================================================================== */
/* Processing time: synthetic clock, wall clock, delayed residuals                            */
/* ========================================================================================== */

void test_processing_time_timer_synthetic_clock(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "b", 2, 2 } }, .n_rows = 2 };
    /* An hour-long timer fires at once in wall time, at +1h on the job's clock. It re-arms
     * itself (+2h from the SDK's point of view, which still reads the unchanged wall clock)
     * when the input is finished and the global window has expired; that timer still fires,
     * at +3h on the job clock (rebased against the clock at receipt), as Prism fires it (the
     * Go SDK's TestTimers_ProcessingTime_* expect every re-armed firing). */
    static const char *const want[] = { "pt k=a sum=1 n=1 at=3600000",
                                        "pt k=b sum=2 n=1 at=3600000",
                                        "pt k=a sum=0 n=0 at=10800000" };
    (void)state;
    harness h;
    sd_em_config cfg = { .clock = SD_CLOCK_SYNTHETIC, .wall_now = fake_wall };
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 3600000, .loop_once = 1 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    assert_true(sd_em_clock_now(h.em) == fake_wall_now);
    h_run_ok(&h);
    h_expect(&h, want, 3);
    assert_true(sd_em_clock_now(h.em) == fake_wall_now + 10800000);
    h_deinit(&h);
}

/*
 * The SDK's "now" lags the wall clock at completion by the time the bundle still ran (here 7
 * ms): rebased from the completion's wall time, an hour-long timer fires 7 ms early on the job
 * clock, by an amount that varies from run to run; rebased from the processing-time base the
 * SDK reported with the bundle, exactly one hour later, under every bundle shape.
 */
void test_processing_time_base(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "b", 2, 2 } }, .n_rows = 2 };
    static const char *const lagged[] = { "pt k=a sum=1 n=1 at=3599993",
                                          "pt k=b sum=2 n=1 at=3599993" };
    static const char *const exact[] = { "pt k=a sum=1 n=1 at=3600000",
                                         "pt k=b sum=2 n=1 at=3600000" };
    (void)state;
    for (int report = 0; report < 2; report++) {
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            sd_em_config cfg = { .clock = SD_CLOCK_SYNTHETIC, .wall_now = fake_wall };
            timer_plan plan = { .family = "pt",
                                .processing_time = true,
                                .delay = 3600000,
                                .sdk_lag = 7,
                                .report_base = report ? -1 : 0 };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
            h_run_ok(&h);
            h_expect(&h, report ? exact : lagged, 2);
            h_deinit(&h);
        }
    }
    /* One element per bundle, only the first reports: the second bundle is rebased from the
     * wall time again. */
    static const char *const mixed[] = { "pt k=a sum=1 n=1 at=3600000",
                                         "pt k=b sum=2 n=1 at=3599993" };
    harness h;
    sd_em_config cfg = { .clock = SD_CLOCK_SYNTHETIC, .wall_now = fake_wall };
    timer_plan plan = {
        .family = "pt", .processing_time = true, .delay = 3600000, .sdk_lag = 7, .report_base = 1
    };
    assert_int_equal(h_init(&h, &SHAPES[1], &cfg, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    h_run_ok(&h);
    h_expect(&h, mixed, 2);
    h_deinit(&h);
}

void test_processing_time_timer_wall_clock(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 } }, .n_rows = 1 };
    harness h;
    sd_bundle *b = NULL;
    sd_time wake;
    (void)state;
    sd_em_config cfg = { .clock = SD_CLOCK_WALL, .wall_now = fake_wall };
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 500 };
    sd_time start = fake_wall_now;
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    for (;;) {
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        if (b == NULL) {
            break;
        }
        assert_int_equal(h_process(&h, b), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
        h_check(&h);
    }
    /* Waiting for time is not being stuck; the executor is told when to come back. */
    assert_false(sd_em_done(h.em));
    assert_int_equal(sd_em_check_stuck(h.em, NULL), SD_OK);
    assert_true(sd_em_next_wakeup(h.em, &wake));
    assert_true(wake == start + 500);
    fake_wall_now = start + 499;
    assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
    assert_null(b);
    fake_wall_now = start + 500;
    h_run_ok(&h);
    assert_int_equal(h.n_results, 1);
    assert_non_null(strstr(h.results[0], "pt k=a sum=1 n=1 at=500"));
    fake_wall_now = start;
    h_deinit(&h);
}

/*
 * On the wall clock a due timer does not wait in a bundle behind elements (the SDK answers a
 * bundle once it ran all of them): with one element a bundle, "a" sets a timer due at +500; at
 * +500 the stage's next bundle is that firing alone, and "b" comes in the one after. (The
 * synthetic clock keeps its schedule: the other timer tests.)
 */
void test_wall_clock_due_timers_go_alone(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "b", 2, 2 } }, .n_rows = 2 };
    static const char *const want[] = { "pt k=a sum=1 n=1 at=500", "pt k=b sum=2 n=1 at=1000" };
    harness h;
    sd_bundle *b = NULL;
    (void)state;
    sd_em_config cfg = { .clock = SD_CLOCK_WALL, .wall_now = fake_wall };
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 500 };
    sd_time start = fake_wall_now;
    assert_int_equal(h_init(&h, &SHAPES[1], &cfg, false), SD_OK); /* one element a bundle */
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    for (bool keyed = false; !keyed;) { /* up to the keyed stage's first bundle: "a" */
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        assert_non_null(b);
        keyed = strcmp(sd_em_bundle_stage(b), "keyed") == 0;
        if (keyed) {
            assert_int_equal(sd_em_bundle_input_count(b), 1);
            assert_int_equal(sd_em_bundle_n_timer_inputs(b), 0);
        }
        assert_int_equal(h_process(&h, b), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    }
    fake_wall_now = start + 500; /* a's timer is due, "b" waits */
    assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
    assert_non_null(b);
    assert_string_equal(sd_em_bundle_stage(b), "keyed");
    assert_int_equal(sd_em_bundle_input_count(b), 0);
    assert_int_equal(sd_em_bundle_n_timer_inputs(b), 1);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
    assert_non_null(b);
    assert_string_equal(sd_em_bundle_stage(b), "keyed");
    assert_int_equal(sd_em_bundle_input_count(b), 1);
    assert_int_equal(sd_em_bundle_n_timer_inputs(b), 0);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    fake_wall_now = start + 1000; /* b's timer */
    h_run_ok(&h);
    h_expect(&h, want, 2);
    fake_wall_now = start;
    h_deinit(&h);
}

/* A self-checkpointing DoFn: element v emits KV<"k", v> and, while v < 3, a residual v + 1
 * delayed by one second (a ProcessContinuation). */
sd_status fn_resume(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    (void)ctx;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    h_record(h, "v=%llu at=%lld", (unsigned long long)v,
             (long long)(sd_em_clock_now(h->em) - fake_wall_now));
    sd_buf kv;
    sd_buf_init(&kv, 0);
    sd_status rc = kv_bytes(&kv, "k", v);
    if (rc == SD_OK) {
        rc = h_emit_global(h, b, "outs", e->ts, sd_buf_bytes(&kv));
    }
    if (rc == SD_OK && v < 3) {
        sd_buf res;
        sd_buf_init(&res, 0);
        rc = sd_wv_encode_header(&res, c_gw, e->ts, &e->win, 1, &e->pane, NULL);
        if (rc == SD_OK) {
            rc = sd_buf_put_varint(&res, v + 1);
        }
        if (rc == SD_OK) {
            rc = sd_em_bundle_residual(h->em, b, sd_buf_bytes(&res), 1000, false, 0, &h->err);
        }
        sd_buf_deinit(&res);
    }
    sd_buf_deinit(&kv);
    return rc;
}

sd_status fn_seed(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)ctx;
    return h_emit_global(h, b, "seeds", e->ts, sd_bytes_make("\x00", 1));
}

void test_delayed_residuals(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" },
                      *grouped[] = { "grouped" };
    static const char *const want[] = { "v=0 at=0", "v=1 at=1000", "v=2 at=2000", "v=3 at=3000",
                                        "k=k w=G ts=GMAX pane=07 v=0,1,2,3" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        sd_em_config cfg = { .wall_now = fake_wall };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "seeds", wv_varint_g, NULL);
        h_pcoll(&h, "outs", wv_kv_g, NULL);
        h_pcoll(&h, "grouped", wv_grouped_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_seed, NULL);
        h_stage(&h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_resume, NULL);
        h_stage(&h, "gbk", SD_STAGE_GBK, "outs", grouped, 1, NULL, NULL);
        h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        /* The parked residual holds the stage's input watermark: the global-window GBK fires
         * once, with every value, and only after the last resumption. */
        h_run_ok(&h);
        h_expect(&h, want, 5);
        h_deinit(&h);
    }
}

void test_event_time_timer_waits_for_the_watermark(void **state)
{
    static const char *tsout[] = { "tsout" };
    static const char *const want[] = { "flush k=a sum=46 n=2 at=50" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        timer_plan plan = { .family = "flush", .delay = 50 };
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        h_pcoll(&h, "tsout", wv_kv_g, NULL);
        h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
        sd_timer_family_spec fam = { "T", "flush", false, c_timer_g };
        const char *ins[] = { "tsout" };
        sd_stage_spec keyed = { .id = "keyed",
                                .kind = SD_STAGE_SDK,
                                .inputs = ins,
                                .n_inputs = 1,
                                .stateful = true,
                                .timer_families = &fam,
                                .n_timer_families = 1 };
        h_add(&h, &keyed, fn_keyed, fn_keyed_timer, &plan);
        /* The timer (at 50) is set at once; the watermark stops at 40, then data at 45 comes:
         * it must be in the state when the timer fires, after the watermark passes 50. */
        ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                                  { 'w', NULL, 0, 40 },
                                  { 'e', "a", 45, 45 },
                                  { 'w', NULL, 0, 60 } },
                       .n_steps = 4 };
        add_ts_steps(&h, &tc);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, 1);
        h_deinit(&h);
    }
}
