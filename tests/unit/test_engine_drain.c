/*
 * Engine tests, drain concern (sd_em_drain, JobService.Drain): the sources stop, what was
 * read finishes, and time runs to its end.
 *
 * Each test calls sd_em_drain from inside a fake DoFn, as the executor does when a Drain
 * request arrives between two messages of a running bundle, and runs under every bundle
 * shape: a TestStream drops the events it has not played and ends, so the windows of what it
 * did play fire once, complete and on time; a stateful stage's event-time timer beyond the
 * stream's last watermark fires; a self-checkpointing DoFn's delayed residuals run at once
 * instead of waiting for the clock; and a drain before the start behaves the same.
 */
#include "engine_harness.h"

/* ========================================================================================== */
/* Fake DoFns                                                                                 */
/* ========================================================================================== */

/* Pass KV<key, v> through; drain the job on the element whose value is ctx's (a uint64_t). */
static sd_status fn_drain_on(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t v;
    get_kv(e->elem, &key, &v);
    if (v == *(const uint64_t *)ctx) {
        sd_em_drain(h->em);
        sd_em_drain(h->em); /* idempotent */
        assert_true(sd_em_draining(h->em));
    }
    return h_emit_global(h, b, "passed", e->ts, e->elem);
}

/* A stateful stage (fn_keyed's timers) that drains the job on its first element. */
static sd_status fn_keyed_drain(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_em_drain(h->em);
    return fn_keyed(h, b, e, ctx);
}

/* The self-checkpointing DoFn's seed stage, draining the job as it runs. */
static sd_status fn_seed_drain(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_em_drain(h->em);
    return fn_seed(h, b, e, ctx);
}

/* ========================================================================================== */
/* Tests                                                                                      */
/* ========================================================================================== */

/*
 * TestStream -> pass (drains on value 2) -> GBK (global window) -> collect. The stream's
 * events after the one carrying value 2 (a watermark move and value 99) are never played;
 * the group fires once at the end of time with 1 and 2, on time.
 */
void test_drain_stops_the_teststream(void **state)
{
    static const char *tsout[] = { "tsout" }, *passed[] = { "passed" }, *grouped[] = { "grouped" };
    static const char *const want[] = { "k=a w=G ts=GMAX pane=07 v=1,2" };
    static const uint64_t trigger = 2;
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        h_pcoll(&h, "tsout", wv_kv_g, NULL);
        h_pcoll(&h, "passed", wv_kv_g, NULL);
        h_pcoll(&h, "grouped", wv_grouped_g, NULL);
        h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
        h_stage(&h, "pass", SD_STAGE_SDK, "tsout", passed, 1, fn_drain_on, (void *)&trigger);
        h_stage(&h, "gbk", SD_STAGE_GBK, "passed", grouped, 1, NULL, NULL);
        h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
        ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                                  { 'w', NULL, 0, 40 },
                                  { 'e', "a", 2, 45 },
                                  { 'c', NULL, 0, 3600 * 1000 },
                                  { 'w', NULL, 0, 100 },
                                  { 'e', "a", 99, 101 } },
                       .n_steps = 6 };
        add_ts_steps(&h, &tc);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        assert_false(sd_em_draining(h.em));
        sd_time start = sd_em_clock_now(h.em);
        h_run_ok(&h);
        h_expect(&h, want, 1);
        assert_true(sd_em_done(h.em));
        /* The dropped clock event never moved the job clock. */
        assert_true(sd_em_clock_now(h.em) - start < 3600 * 1000);
        h_deinit(&h);
    }
}

/*
 * A stateful stage sets an event-time timer at 50; the stream would hold the watermark at
 * 40 and then add more data, but the stage drains the job on its first element: the timer
 * fires (the watermark goes to the end of time) with only the element that was read.
 */
void test_drain_fires_event_time_timers(void **state)
{
    static const char *tsout[] = { "tsout" };
    static const char *const want[] = { "flush k=a sum=1 n=1 at=50" };
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
        h_add(&h, &keyed, fn_keyed_drain, fn_keyed_timer, &plan);
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

/*
 * The self-checkpointing DoFn of test_delayed_residuals asks to resume each second; once the
 * job drains, its residuals are not parked: every resumption runs at once (the clock stays
 * at 0 on the synthetic clock and the fake wall clock never moves), nothing is lost, and the
 * GroupByKey fires once with every value.
 */
void test_drain_releases_delayed_residuals(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" },
                      *grouped[] = { "grouped" };
    static const char *const want[] = { "v=0 at=0", "v=1 at=0", "v=2 at=0", "v=3 at=0",
                                        "k=k w=G ts=GMAX pane=07 v=0,1,2,3" };
    (void)state;
    for (int clock = 0; clock < 2; clock++) {
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            sd_em_config cfg = { .wall_now = fake_wall,
                                 .clock = clock == 0 ? SD_CLOCK_SYNTHETIC : SD_CLOCK_WALL };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            h_pcoll(&h, "imp", wv_bytes_g, NULL);
            h_pcoll(&h, "seeds", wv_varint_g, NULL);
            h_pcoll(&h, "outs", wv_kv_g, NULL);
            h_pcoll(&h, "grouped", wv_grouped_g, NULL);
            h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
            h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_seed_drain, NULL);
            h_stage(&h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_resume, NULL);
            h_stage(&h, "gbk", SD_STAGE_GBK, "outs", grouped, 1, NULL, NULL);
            h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            h_expect(&h, want, 5);
            h_deinit(&h);
        }
    }
}

/* A drain requested before the start (the job was still being planned) applies from the
 * first step: the stream plays nothing, the job is done at once with no output. */
void test_drain_before_start(void **state)
{
    static const char *tsout[] = { "tsout" }, *passed[] = { "passed" }, *grouped[] = { "grouped" };
    static const uint64_t never = 1000;
    (void)state;
    harness h;
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    h_pcoll(&h, "tsout", wv_kv_g, NULL);
    h_pcoll(&h, "passed", wv_kv_g, NULL);
    h_pcoll(&h, "grouped", wv_grouped_g, NULL);
    h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    h_stage(&h, "pass", SD_STAGE_SDK, "tsout", passed, 1, fn_drain_on, (void *)&never);
    h_stage(&h, "gbk", SD_STAGE_GBK, "passed", grouped, 1, NULL, NULL);
    h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    ts_case tc = { .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 40 } }, .n_steps = 2 };
    add_ts_steps(&h, &tc);
    sd_em_drain(h.em);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    h_run_ok(&h);
    h_expect(&h, NULL, 0);
    assert_true(sd_em_done(h.em));
    h_deinit(&h);
}
