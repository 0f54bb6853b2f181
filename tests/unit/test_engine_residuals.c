/*
 * Engine tests, residual concern: every outstanding residual holds its stage's output
 * watermark at its own estimate (em_time.c "Residual holds"), under every bundle shape, with
 * delayed (parked) and immediate residuals.
 *
 * Two restrictions of one splittable DoFn, as an unbounded source over two partitions: A
 * outputs at 5000.. and estimates ahead of its outputs; B starts empty (a residual with no
 * estimate, held at its element's timestamp), then outputs at 1000 and 1500. Downstream, a
 * GroupByKey in fixed 1 s windows with no allowed lateness drops whatever arrives behind its
 * watermark. A runner that keeps one estimate per stage (the last bundle's) lets A's estimate
 * carry the watermark past B's data whenever A's bundle completes last, and B's window is
 * lost; one that holds at the minimum never lets the watermark move while a source is live.
 */
#include "engine_harness.h"

typedef struct res_plan {
    int64_t delay_ms;
} res_plan;

/* The residual: value v at the input's timestamp and window, with an estimate or none. */
static sd_status residual(harness *h,
                          sd_bundle *b,
                          const h_elem *e,
                          uint64_t v,
                          bool has_wm,
                          sd_time wm,
                          const res_plan *plan)
{
    sd_buf res;
    sd_buf_init(&res, 0);
    sd_status rc = sd_wv_encode_header(&res, c_gw, e->ts, &e->win, 1, &e->pane, NULL);
    if (rc == SD_OK) {
        rc = sd_buf_put_varint(&res, v);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_residual(h->em, b, sd_buf_bytes(&res), plan->delay_ms, has_wm, wm,
                                   &h->err);
    }
    sd_buf_deinit(&res);
    return rc;
}

/* KV<key, v> at ts, in its fixed 1 s window. */
static sd_status emit(harness *h, sd_bundle *b, const char *key, uint64_t v, sd_time ts)
{
    sd_buf kv;
    sd_buf_init(&kv, 0);
    sd_window w = sd_window_interval(ts - ts % 1000, ts - ts % 1000 + 1000);
    sd_pane p = SD_PANE_NO_FIRING;
    sd_status rc = kv_bytes(&kv, key, v);
    if (rc == SD_OK) {
        rc = h_emit(h, b, "outs", ts, &w, 1, &p, sd_buf_bytes(&kv));
    }
    sd_buf_deinit(&kv);
    return rc;
}

/*
 * The source. A: v = 0..3 outputs ("a", v) at 5000 + 100 v and defers with the estimate
 * 5000 + 100 (v + 1) until v = 3. B: v = 100 outputs nothing and defers with no estimate;
 * v = 101 checks the watermark, outputs ("b", 1) at 1000 and defers estimating 1500; v = 102
 * outputs ("b", 2) at 1500 and ends.
 */
static sd_status fn_partitions(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const res_plan *plan = ctx;
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    if (v < 100) {
        sd_status rc = emit(h, b, "a", v, 5000 + (sd_time)v * 100);
        if (rc == SD_OK && v < 3) {
            rc = residual(h, b, e, v + 1, true, 5000 + (sd_time)(v + 1) * 100, plan);
        }
        return rc;
    }
    if (v == 100) {
        return residual(h, b, e, v + 1, false, 0, plan);
    }
    if (v == 101) {
        /* B's data at 1000 is still to come: the watermark must not be past it (A's estimate
         * alone would put it at 5100 or more), nor held at the minimum (the residual had no
         * estimate: its own timestamp, 200, and A's elements at 100 hold it). */
        sd_time wm = SD_TIME_MIN;
        assert_int_equal(sd_em_pcollection_watermark(h->em, "outs", &wm), SD_OK);
        if (wm >= 100 && wm <= 200) {
            h_record(h, "b1 watermark in [100, 200]");
        } else {
            h_record(h, "b1 watermark %lld", (long long)wm);
        }
        sd_status rc = emit(h, b, "b", 1, 1000);
        return rc == SD_OK ? residual(h, b, e, v + 1, true, 1500, plan) : rc;
    }
    return emit(h, b, "b", 2, 1500);
}

/* Two partitions: A's element at 100, B's at 200. */
static sd_status fn_two_seeds(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)e;
    (void)ctx;
    sd_status rc = h_emit_global(h, b, "seeds", 100, sd_bytes_make("\x00", 1));
    return rc == SD_OK ? h_emit_global(h, b, "seeds", 200, sd_bytes_make("\x64", 1)) : rc;
}

void test_residual_holds(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" },
                      *grouped[] = { "grouped" };
    static const char *const want[] = { "b1 watermark in [100, 200]",
                                        "k=a w=[5000,6000) ts=5999 pane=07 v=0,1,2,3",
                                        "k=b w=[1000,2000) ts=1999 pane=07 v=1,2" };
    (void)state;
    for (size_t d = 0; d < 2; d++) {
        res_plan plan = { .delay_ms = d == 0 ? 1000 : 0 };
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            sd_em_config cfg = { .wall_now = fake_wall };
            sd_windowing fixed = { .kind = SD_WINDOWFN_FIXED, .size_ms = 1000 };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            h_pcoll(&h, "imp", wv_bytes_g, NULL);
            h_pcoll(&h, "seeds", wv_varint_g, NULL);
            h_pcoll(&h, "outs", wv_kv_i, &fixed);
            h_pcoll(&h, "grouped", wv_grouped_i, &fixed);
            h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
            h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_two_seeds, NULL);
            h_stage(&h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_partitions, &plan);
            h_stage(&h, "gbk", SD_STAGE_GBK, "outs", grouped, 1, NULL, NULL);
            h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            h_expect(&h, want, 3);
            sd_em_stage_stats st;
            sd_em_stage_info(h.em, 3, &st);
            assert_string_equal(st.id, "gbk");
            if (st.dropped_late != 0) {
                fail_msg("%s residuals, shape %s: %llu elements late at the GroupByKey",
                         d == 0 ? "delayed" : "immediate", SHAPES[s].name,
                         (unsigned long long)st.dropped_late);
            }
            assert_true(sd_em_done(h.em));
            h_deinit(&h);
        }
    }
}

/*
 * Without an estimate a residual holds at its own timestamp. Two restrictions: A at 100
 * defers three times estimating 9000, B at 3000 defers twice reporting nothing, one second
 * each (parked). At B's last step (clock +2 s) A's residual is still outstanding: the
 * watermark is B's timestamp, 3000 — not A's input timestamp 100 (what a missing estimate
 * holding at the minimum gives), not A's estimate 9000. (Immediate residuals would let a
 * seeded shape run B's steps before A's first, so only parked ones make this exact.)
 */
static sd_status fn_fallback(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const res_plan *plan = ctx;
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    if (v < 3) {
        return residual(h, b, e, v + 1, true, 9000, plan);
    }
    if (v == 3) {
        return SD_OK; /* A is done */
    }
    if (v < 102) {
        return residual(h, b, e, v + 1, false, 0, plan);
    }
    sd_time wm = SD_TIME_MIN;
    assert_int_equal(sd_em_pcollection_watermark(h->em, "outs", &wm), SD_OK);
    h_record(h, "B's last step: watermark %lld", (long long)wm);
    return SD_OK;
}

static sd_status fn_fallback_seeds(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)e;
    (void)ctx;
    sd_status rc = h_emit_global(h, b, "seeds", 100, sd_bytes_make("\x00", 1));
    return rc == SD_OK ? h_emit_global(h, b, "seeds", 3000, sd_bytes_make("\x64", 1)) : rc;
}

void test_residual_without_estimate(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" };
    static const char *const want[] = { "B's last step: watermark 3000" };
    (void)state;
    res_plan plan = { .delay_ms = 1000 };
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        sd_em_config cfg = { .wall_now = fake_wall };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "seeds", wv_varint_g, NULL);
        h_pcoll(&h, "outs", wv_kv_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_fallback_seeds, NULL);
        h_stage(&h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_fallback, &plan);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, 1);
        assert_true(sd_em_done(h.em));
        h_deinit(&h);
    }
}

/*
 * The per-element late policy on a splittable DoFn's output (issue 33: the WindowInto it names
 * is fused into the source's stage, sd_em_set_drop_behind_watermark_output). One restriction:
 * step 0 emits a at 40000 in its two sliding windows and defers estimating 45000; step 1
 * emits d at 40000 (behind that estimate) and e at 46000, each in its two windows. With the
 * policy d is dropped in both windows at the source (counted there, once per windowed value);
 * without it the GroupByKey drops d only from the window that expired, [35000, 45000).
 */
static void emit_hop(harness *h, sd_bundle *b, const char *key, uint64_t v, sd_time ts)
{
    sd_buf kv;
    sd_buf_init(&kv, 0);
    sd_time last = ts - ts % 5000;
    sd_window w[2] = { sd_window_interval(last, last + 10000),
                       sd_window_interval(last - 5000, last + 5000) };
    sd_pane p = SD_PANE_NO_FIRING;
    assert_int_equal(kv_bytes(&kv, key, v), SD_OK);
    for (size_t i = 0; i < 2; i++) { /* exploded, as an SDK's WindowInto hands them over */
        assert_int_equal(h_emit(h, b, "outs", ts, &w[i], 1, &p, sd_buf_bytes(&kv)), SD_OK);
    }
    sd_buf_deinit(&kv);
}

static sd_status fn_behind_estimate(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const res_plan *plan = ctx;
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    if (v == 0) {
        emit_hop(h, b, "a", 0, 40000);
        return residual(h, b, e, 1, true, 45000, plan);
    }
    emit_hop(h, b, "d", 1, 40000);
    emit_hop(h, b, "e", 2, 46000);
    return SD_OK;
}

static sd_status fn_one_seed(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)e;
    (void)ctx;
    return h_emit_global(h, b, "seeds", 100, sd_bytes_make("\x00", 1));
}

void test_late_policy_on_output(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" },
                      *grouped[] = { "grouped" };
    static const char *const want_policy[] = { "k=a w=[35000,45000) ts=44999 pane=07 v=0",
                                               "k=a w=[40000,50000) ts=49999 pane=07 v=0",
                                               "k=e w=[40000,50000) ts=49999 pane=07 v=2",
                                               "k=e w=[45000,55000) ts=54999 pane=07 v=2" };
    static const char *const want_beam[] = { "k=a w=[35000,45000) ts=44999 pane=07 v=0",
                                             "k=a w=[40000,50000) ts=49999 pane=07 v=0",
                                             "k=d w=[40000,50000) ts=49999 pane=07 v=1",
                                             "k=e w=[40000,50000) ts=49999 pane=07 v=2",
                                             "k=e w=[45000,55000) ts=54999 pane=07 v=2" };
    (void)state;
    res_plan plan = { .delay_ms = 1000 };
    for (int policy = 0; policy < 2; policy++) {
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            sd_em_config cfg = { .wall_now = fake_wall };
            sd_windowing hop = { .kind = SD_WINDOWFN_SLIDING, .size_ms = 10000, .period_ms = 5000 };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            h_pcoll(&h, "imp", wv_bytes_g, NULL);
            h_pcoll(&h, "seeds", wv_varint_g, NULL);
            h_pcoll(&h, "outs", wv_kv_i, &hop);
            h_pcoll(&h, "grouped", wv_grouped_i, &hop);
            h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
            h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_one_seed, NULL);
            h_stage(&h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_behind_estimate, &plan);
            h_stage(&h, "gbk", SD_STAGE_GBK, "outs", grouped, 1, NULL, NULL);
            h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
            if (policy) {
                assert_int_equal(sd_em_set_drop_behind_watermark_output(h.em, "outs", &h.err),
                                 SD_OK);
            }
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            if (policy) {
                h_expect(&h, want_policy, 4);
            } else {
                h_expect(&h, want_beam, 5);
            }
            sd_em_stage_stats sdf, gbk;
            sd_em_stage_info(h.em, 2, &sdf);
            sd_em_stage_info(h.em, 3, &gbk);
            assert_int_equal(sdf.dropped_late, policy ? 2 : 0);
            assert_int_equal(gbk.dropped_late, policy ? 0 : 1);
            assert_true(sd_em_done(h.em));
            h_deinit(&h);
        }
    }
}

/* Its errors: an unknown PCollection, one no SDK stage produces, after the start. */
void test_late_policy_on_output_errors(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" };
    harness h;
    (void)state;
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    h_pcoll(&h, "imp", wv_bytes_g, NULL);
    h_pcoll(&h, "seeds", wv_varint_g, NULL);
    h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_one_seed, NULL);
    assert_int_equal(sd_em_set_drop_behind_watermark_output(h.em, "nope", &h.err), SD_ENOTFOUND);
    sd_err_clear(&h.err);
    assert_int_equal(sd_em_set_drop_behind_watermark_output(h.em, "imp", &h.err), SD_EINVAL);
    if (strstr(sd_err_msg(&h.err), "needs an SDK stage") == NULL) {
        fail_msg("message: %s", sd_err_msg(&h.err));
    }
    sd_err_clear(&h.err);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    assert_int_equal(sd_em_set_drop_behind_watermark_output(h.em, "seeds", &h.err), SD_ESTATE);
    sd_err_clear(&h.err);
    h_run_ok(&h);
    h_deinit(&h);
}
