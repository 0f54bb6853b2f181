/*
 * Engine tests: live-lock detection (sd_em_check_livelock). A job whose bundles keep running
 * while nothing observable moves must be reported once the bound is reached, with the
 * per-stage dump; a job that loops but moves something each time (an output, a claimed
 * restriction, state, an event-time timer going forward, real time on the wall clock) must
 * not — nor a source on the synthetic clock that waits for real time, spinning until it comes.
 * The harness runs every engine test with a bound of H_LIVELOCK_ROUNDS, so the other files are
 * the wider check that legitimate pipelines are never reported.
 *
 * A resume delay or a processing-time timer lets the bundles spin (on the synthetic clock)
 * until that much real time has passed; these tests run on a wall clock that ticks 10 ms a
 * call (ticking_wall), so such waits end after a few hundred bundles.
 */
#include "engine_harness.h"
#include "runner/base/time.h"

static sd_time ticking_wall(void *ctx)
{
    (void)ctx;
    return fake_wall_now += 10;
}

/* ========================================================================================== */
/* Splittable DoFns that checkpoint                                                            */
/* ========================================================================================== */

typedef struct ckpt_plan {
    int64_t delay_ms; /* the residual's resume delay */
    int rounds;       /* stop after this many checkpoints (0 = never) */
    bool emit;        /* emit one element per round */
    bool claim;       /* the residual moves on (v + 1), as after a claim */
    int done;
} ckpt_plan;

/* An SDF's process: hand the element back as a residual — unchanged, or moved on. */
static sd_status fn_checkpoint(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    ckpt_plan *p = ctx;
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_status rc = SD_OK;
    if (p->emit) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, "k", v);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "outs", e->ts, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    if (rc != SD_OK || (p->rounds > 0 && p->done >= p->rounds)) {
        return rc;
    }
    p->done++;
    sd_buf res;
    sd_buf_init(&res, 0);
    rc = sd_wv_encode_header(&res, c_gw, e->ts, &e->win, 1, &e->pane, NULL);
    if (rc == SD_OK) {
        rc = sd_buf_put_varint(&res, p->claim ? v + 1 : v);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_residual(h->em, b, sd_buf_bytes(&res), p->delay_ms, false, 0, &h->err);
    }
    sd_buf_deinit(&res);
    return rc;
}

/* A sink that only counts (the harness records at most H_MAX_RESULTS lines). */
static sd_status fn_count(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)h;
    (void)b;
    (void)e;
    (*(size_t *)ctx)++;
    return SD_OK;
}

static size_t sunk;

static void build_sdf(harness *h, ckpt_plan *p)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" };
    assert_int_equal(h_pcoll(h, "imp", wv_bytes_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(h, "seeds", wv_varint_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(h, "outs", wv_kv_g, NULL), SD_OK);
    assert_int_equal(h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL), SD_OK);
    assert_int_equal(h_stage(h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_seed, NULL), SD_OK);
    assert_int_equal(h_stage(h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_checkpoint, p), SD_OK);
    sunk = 0;
    assert_int_equal(h_stage(h, "sink", SD_STAGE_SDK, "outs", NULL, 0, fn_count, &sunk), SD_OK);
    assert_int_equal(sd_em_start(h->em, &h->err), SD_OK);
}

/* h_run ended in a live-lock report: the first line names it and the bound, then the dump. */
static void expect_livelock(harness *h, sd_status rc, uint64_t bound, const char *stage)
{
    char want[64];
    if (rc != SD_ESTATE) {
        fail_msg("shape %s: expected a live-lock, got %s", h->shape.name, sd_status_name(rc));
    }
    assert_true(sd_em_idle_bundles(h->em) >= bound);
    assert_int_equal(sd_buf_append_byte(&h->dump, '\0'), SD_OK);
    const char *d = (const char *)h->dump.data;
    assert_non_null(strstr(d, "engine live-locked: "));
    snprintf(want, sizeof(want), "(bound %llu)", (unsigned long long)bound);
    assert_non_null(strstr(d, want));
    snprintf(want, sizeof(want), "  stage %s (sdk):", stage);
    assert_non_null(strstr(d, want));
    snprintf(want, sizeof(want), "), the last in stage %s;", stage);
    assert_non_null(strstr(d, want));
}

void test_livelock_self_checkpoint(void **state)
{
    (void)state;
    sd_time wall0 = fake_wall_now;
    /* Resuming at once, and after a delay the synthetic clock jumps over: both spin. */
    const int64_t delays[] = { 0, 1000 };
    for (size_t d = 0; d < 2; d++) {
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            ckpt_plan p = { .delay_ms = delays[d] };
            sd_em_config cfg = { .wall_now = ticking_wall };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            build_sdf(&h, &p);
            expect_livelock(&h, h_run(&h), H_LIVELOCK_ROUNDS, "sdf");
            h_deinit(&h);
        }
    }
    /* The executor's default bound: how long the engine takes to see it (engine only). */
    harness h;
    ckpt_plan p = { 0 };
    sd_em_config cfg = { .livelock_rounds = SD_EM_LIVELOCK_ROUNDS_DEFAULT };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    build_sdf(&h, &p);
    int64_t t0 = sd_mono_now_ns();
    expect_livelock(&h, h_run(&h), SD_EM_LIVELOCK_ROUNDS_DEFAULT, "sdf");
    print_message("live-lock of %d bundles seen after %.1f ms (engine and harness)\n",
                  SD_EM_LIVELOCK_ROUNDS_DEFAULT, (double)(sd_mono_now_ns() - t0) / 1e6);
    h_deinit(&h);
    fake_wall_now = wall0;
}

void test_livelock_checkpoints_that_emit(void **state)
{
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        /* 1000 checkpoints of the same element, each with an output: progress every time. */
        harness h;
        ckpt_plan p = { .rounds = 1000, .emit = true };
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        build_sdf(&h, &p);
        h_run_ok(&h);
        assert_int_equal(p.done, 1000);
        assert_int_equal(sunk, 1001);
        h_deinit(&h);
        /* 1000 checkpoints without output whose restriction moves on (a claim each time). */
        ckpt_plan q = { .rounds = 1000, .claim = true };
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        build_sdf(&h, &q);
        h_run_ok(&h);
        assert_int_equal(q.done, 1000);
        h_deinit(&h);
    }
    /* Disabled (UINT64_MAX stands for "never" here; the executor's 0 means that): 5000 spins
     * without a report, then the SDF stops. */
    harness h;
    ckpt_plan p = { .rounds = 5000 };
    sd_em_config cfg = { .livelock_rounds = UINT64_MAX };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    build_sdf(&h, &p);
    h_run_ok(&h);
    assert_int_equal(p.done, 5000);
    h_deinit(&h);
}

/*
 * A source that waits for real time, as Python's PeriodicImpulse does: it compares the wall
 * clock with its next tick and resumes with the time left, unchanged, until the tick comes;
 * then it emits. It is waiting, not live-locked. Its resumes are not jumped over: the job clock
 * stands still while it waits (it moves only for the delay after each tick, 2 s), or
 * processing-time timers set from the same wall clock would fire ahead of its ticks (Beam's Go
 * TestTimers_ProcessingTime_Unbounded; before, each idle resume moved the clock by the time
 * left, hundreds of times). Nor does it spin: its stage hands out nothing until the wall clock
 * reaches the resume it asked for (at most SD_EM_NAP_MAX_MS at a time), so it costs a few
 * bundles a tick instead of hundreds (Python's PeriodicImpulse ran ~3,900 in 14 s).
 */
typedef struct tick_plan {
    sd_time next; /* wall-clock time of the next tick */
    int ticks;    /* left to emit */
    int calls;
} tick_plan;

static sd_status fn_ticks(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    tick_plan *p = ctx;
    sd_time now = fake_wall_now;
    sd_status rc = SD_OK;
    p->calls++;
    if (now >= p->next) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, "tick", (uint64_t)p->ticks);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "outs", e->ts, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
        p->next = now + 2000;
        if (rc != SD_OK || --p->ticks == 0) {
            return rc;
        }
    }
    sd_buf res;
    sd_buf_init(&res, 0);
    rc = sd_wv_encode_header(&res, c_gw, e->ts, &e->win, 1, &e->pane, NULL);
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(&res, e->elem);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_residual(h->em, b, sd_buf_bytes(&res), p->next - now, false, 0, &h->err);
    }
    sd_buf_deinit(&res);
    return rc;
}

void test_livelock_waiting_for_real_time(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" };
    (void)state;
    sd_time wall0 = fake_wall_now;
    harness h;
    tick_plan p = { .next = fake_wall_now + 2000, .ticks = 3 };
    sd_em_config cfg = { .wall_now = ticking_wall };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    assert_int_equal(h_pcoll(&h, "imp", wv_bytes_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(&h, "seeds", wv_varint_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(&h, "outs", wv_kv_g, NULL), SD_OK);
    assert_int_equal(h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL), SD_OK);
    assert_int_equal(h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_seed, NULL), SD_OK);
    assert_int_equal(h_stage(&h, "ticks", SD_STAGE_SDK, "seeds", outs, 1, fn_ticks, &p), SD_OK);
    sunk = 0;
    assert_int_equal(h_stage(&h, "sink", SD_STAGE_SDK, "outs", NULL, 0, fn_count, &sunk), SD_OK);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    sd_time clock0 = sd_em_clock_now(h.em);
    h_run_ok(&h);
    assert_int_equal(sunk, 3);
    /* Three ticks 2 s apart, each waited for in one nap: a call per tick and one at the start
     * (the first resume asks for 2 s, capped at SD_EM_NAP_MAX_MS: two naps a tick at most). */
    if (p.calls > 3 * (2000 / SD_EM_NAP_MAX_MS + 2)) {
        fail_msg("the source ran %d times for 3 ticks: it spun instead of waiting", p.calls);
    }
    assert_true(h.n_naps >= 3);
    if (sd_em_clock_now(h.em) - clock0 > 3 * 2000) {
        fail_msg("the job clock moved %lld ms while the source waited for 3 ticks 2 s apart",
                 (long long)(sd_em_clock_now(h.em) - clock0));
    }
    h_deinit(&h);
    fake_wall_now = wall0;
}

/* ========================================================================================== */
/* Looping timers                                                                             */
/* ========================================================================================== */

typedef struct loop_plan {
    bool processing_time;
    int rounds;   /* firings that set the timer again (0 = forever) */
    int64_t step; /* PT: fire = wall + step; ET: fire = the fired time + step */
    bool emit;    /* each firing emits KV<key, n> */
    int state;    /* 0: none; 1: append to a bag (it grows); 2: rewrite the same value */
    int fired;
} loop_plan;

static sd_status loop_set(harness *h, sd_bundle *b, sd_bytes key, sd_time fire)
{
    sd_timer t;
    sd_buf buf;
    sd_window w = sd_window_global();
    sd_timer_init(&t);
    sd_buf_init(&buf, 0);
    t.key = key;
    t.fire = fire;
    t.hold = 0; /* a fixed output timestamp: the hold never moves the watermark */
    t.pane = SD_PANE_NO_FIRING;
    sd_status rc = sd_windows_set(&t.windows, &w, 1);
    if (rc == SD_OK) {
        rc = sd_timer_encode(c_timer_g, &t, &buf, &h->err);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_timers(h->em, b, "T", "loop", sd_buf_bytes(&buf), &h->err);
    }
    sd_timer_deinit(&t);
    sd_buf_deinit(&buf);
    return rc;
}

static sd_status fn_loop_start(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const loop_plan *p = ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes user_key;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    return loop_set(h, b, key, p->processing_time ? fake_wall_now + p->step : 10);
}

static sd_status
fn_loop_fire(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx)
{
    loop_plan *p = ctx;
    sd_status rc = SD_OK;
    (void)family;
    p->fired++;
    if (p->emit) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = sd_buf_append_bytes(&kv, t->key);
        if (rc == SD_OK) {
            rc = sd_buf_put_varint(&kv, (uint64_t)p->fired);
        }
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "out", 0, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    uint8_t one = 1;
    if (rc == SD_OK && p->state == 2) {
        rc = sd_em_user_state_clear(h->em, b, H_STATE("T", "s", SD_BYTES_NULL, t->key), NULL,
                                    &h->err);
    }
    if (rc == SD_OK && p->state != 0) {
        rc = sd_em_user_state_append(h->em, b, H_STATE("T", "s", SD_BYTES_NULL, t->key), NULL,
                                     sd_bytes_make(&one, 1), &h->err);
    }
    if (rc == SD_OK && (p->rounds == 0 || p->fired < p->rounds)) {
        rc = loop_set(h, b, t->key,
                      p->processing_time ? fake_wall_now + p->step : t->fire + p->step);
    }
    return rc;
}

/*
 * The loop's source: emits KV<"a", 1> and then polls once a day, twice, so its input
 * watermark — and the looping stage's — stays back meanwhile. (Behind a finished input a
 * processing-time timer's window has expired and the engine drops it: no loop.)
 */
static sd_status fn_daily_source(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    int *polls = ctx;
    sd_status rc = SD_OK;
    if (*polls == 0) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, "a", 1);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "raw", e->ts, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    if (rc != SD_OK || (*polls)++ >= 2) {
        return rc;
    }
    sd_buf res;
    sd_buf_init(&res, 0);
    rc = sd_wv_encode_header(&res, c_gw, e->ts, &e->win, 1, &e->pane, NULL);
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(&res, e->elem);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_residual(h->em, b, sd_buf_bytes(&res), 86400000, false, 0, &h->err);
    }
    sd_buf_deinit(&res);
    return rc;
}

static int source_polls;

static void build_loop(harness *h, loop_plan *p)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *out[] = { "out" };
    sd_timer_family_spec fam = { "T", "loop", p->processing_time, c_timer_g };
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
    assert_int_equal(h_pcoll(h, "imp", wv_bytes_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(h, "raw", wv_kv_g, NULL), SD_OK);
    assert_int_equal(h_pcoll(h, "out", wv_kv_g, NULL), SD_OK);
    assert_int_equal(h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL), SD_OK);
    source_polls = 0;
    assert_int_equal(h_stage(h, "src", SD_STAGE_SDK, "imp", raw, 1, fn_daily_source, &source_polls),
                     SD_OK);
    assert_int_equal(h_add(h, &keyed, fn_loop_start, fn_loop_fire, p), SD_OK);
    assert_int_equal(sd_em_start(h->em, &h->err), SD_OK);
}

void test_livelock_looping_timer(void **state)
{
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        sd_em_config cfg = { .wall_now = ticking_wall };
        /* A processing-time timer that re-arms itself 100 ms on, forever, with no output:
         * the synthetic clock keeps jumping, nothing else moves. */
        loop_plan p = { .processing_time = true, .step = 100 };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        build_loop(&h, &p);
        expect_livelock(&h, h_run(&h), H_LIVELOCK_ROUNDS, "keyed");
        h_deinit(&h);
        /* The same loop with an output each firing, 200 rounds: progress; it ends. */
        loop_plan q = { .processing_time = true, .step = 100, .rounds = 200, .emit = true };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        build_loop(&h, &q);
        h_run_ok(&h);
        assert_int_equal(q.fired, 200);
        h_deinit(&h);
    }
}

void test_livelock_state_and_event_time(void **state)
{
    (void)state;
    sd_em_config cfg = { .wall_now = ticking_wall };
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        /* Growing user state each firing is progress (200 rounds, no output). */
        loop_plan grow = { .processing_time = true, .step = 100, .rounds = 200, .state = 1 };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        build_loop(&h, &grow);
        h_run_ok(&h);
        assert_int_equal(grow.fired, 200);
        h_deinit(&h);
        /* Rewriting the same value is not. */
        loop_plan same = { .processing_time = true, .step = 100, .state = 2 };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        build_loop(&h, &same);
        expect_livelock(&h, h_run(&h), H_LIVELOCK_ROUNDS, "keyed");
        h_deinit(&h);
        /* An event-time timer stepping forward each firing (Beam's looping-timer pattern,
         * here behind a watermark at the end of time and with a fixed hold): progress. */
        loop_plan fwd = { .step = 10, .rounds = 200 };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        build_loop(&h, &fwd);
        h_run_ok(&h);
        assert_int_equal(fwd.fired, 200);
        h_deinit(&h);
        /* Set again at the time it fired: it fires again and again. */
        loop_plan again = { .step = 0 };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        build_loop(&h, &again);
        expect_livelock(&h, h_run(&h), H_LIVELOCK_ROUNDS, "keyed");
        h_deinit(&h);
    }
}

/* ========================================================================================== */
/* The wall clock: waiting for real time is not spinning                                      */
/* ========================================================================================== */

/* Drive the engine by hand on the fake wall clock: each time nothing is ready, a millisecond
 * passes. Returns the live-lock check after `bundles` bundles (or when done). */
static sd_status run_wall(harness *h, int bundles)
{
    for (int n = 0; n < bundles && !sd_em_done(h->em);) {
        sd_bundle *b = NULL;
        assert_int_equal(sd_em_next_bundle(h->em, &b, &h->err), SD_OK);
        if (b == NULL) {
            fake_wall_now += 1;
            continue;
        }
        assert_int_equal(h_process(h, b), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h->em, b, &h->err), SD_OK);
        h_check(h);
        n++;
        if (sd_em_check_livelock(h->em, NULL) != SD_OK) {
            break;
        }
    }
    sd_buf_reset(&h->dump);
    return sd_em_check_livelock(h->em, &h->dump);
}

void test_livelock_wall_clock_delays(void **state)
{
    (void)state;
    sd_time wall0 = fake_wall_now;
    sd_em_config cfg = { .clock = SD_CLOCK_WALL, .wall_now = fake_wall };
    harness h;
    /* An SDF that resumes after 5 ms, 200 times: a poll on real time, not a spin. */
    ckpt_plan poll = { .delay_ms = 5 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    build_sdf(&h, &poll);
    assert_int_equal(run_wall(&h, 200), SD_OK);
    assert_true(poll.done >= 199);
    h_deinit(&h);
    /* Resuming at once spins on the wall clock too. */
    ckpt_plan spin = { 0 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    build_sdf(&h, &spin);
    expect_livelock(&h, run_wall(&h, 200), H_LIVELOCK_ROUNDS, "sdf");
    h_deinit(&h);
    /* A processing-time timer 3 ms ahead each firing sleeps; one due now spins. */
    loop_plan tick = { .processing_time = true, .step = 3 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    build_loop(&h, &tick);
    assert_int_equal(run_wall(&h, 200), SD_OK);
    assert_true(tick.fired >= 190);
    h_deinit(&h);
    loop_plan now = { .processing_time = true, .step = 0 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    build_loop(&h, &now);
    expect_livelock(&h, run_wall(&h, 200), H_LIVELOCK_ROUNDS, "keyed");
    h_deinit(&h);
    fake_wall_now = wall0;
}

/*
 * The same wait with a processing-time timer (a polling DoFn that re-arms its timer for the
 * same real time until it comes): each firing is jumped to at once on the synthetic clock and
 * re-arms the timer unchanged, so it spins — but it waits for the time it asked for, and is
 * not live-locked before it.
 */
static sd_status fn_pt_tick_start(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const tick_plan *p = ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes user_key;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    return loop_set(h, b, key, p->next);
}

static sd_status
fn_pt_tick_fire(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx)
{
    tick_plan *p = ctx;
    sd_time now = fake_wall_now;
    sd_status rc = SD_OK;
    (void)family;
    p->calls++;
    if (now >= p->next) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = sd_buf_append_bytes(&kv, t->key);
        if (rc == SD_OK) {
            rc = sd_buf_put_varint(&kv, (uint64_t)p->ticks);
        }
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "out", 0, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
        p->next = now + 2000;
        if (rc != SD_OK || --p->ticks == 0) {
            return rc;
        }
    }
    return loop_set(h, b, t->key, p->next);
}

void test_livelock_timer_waiting_for_real_time(void **state)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *out[] = { "out" };
    (void)state;
    sd_time wall0 = fake_wall_now;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        tick_plan p = { .next = fake_wall_now + 2000, .ticks = 3 };
        sd_em_config cfg = { .wall_now = ticking_wall };
        sd_timer_family_spec fam = { "T", "loop", true, c_timer_g };
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
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        assert_int_equal(h_pcoll(&h, "imp", wv_bytes_g, NULL), SD_OK);
        assert_int_equal(h_pcoll(&h, "raw", wv_kv_g, NULL), SD_OK);
        assert_int_equal(h_pcoll(&h, "out", wv_kv_g, NULL), SD_OK);
        assert_int_equal(h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL), SD_OK);
        source_polls = 0;
        assert_int_equal(
            h_stage(&h, "src", SD_STAGE_SDK, "imp", raw, 1, fn_daily_source, &source_polls), SD_OK);
        assert_int_equal(h_add(&h, &keyed, fn_pt_tick_start, fn_pt_tick_fire, &p), SD_OK);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        assert_int_equal(p.ticks, 0);
        assert_true(p.calls > 20 * (int)H_LIVELOCK_ROUNDS); /* it did spin, far past the bound */
        h_deinit(&h);
    }
    fake_wall_now = wall0;
}
