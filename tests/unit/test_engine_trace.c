/*
 * The engine's time trace (em_trace.h) as pipelines write it: a TestStream feeding a GroupByKey
 * whose trigger fires early, on time and late, with a late element dropped, and a stateful
 * stage with processing-time timers on the synthetic clock. Each trace is asserted record by
 * record, is the same on a second run, and its shape-independent part (everything but holds,
 * watermarks and clears, which follow how bundles are cut; what happens at one instant in any
 * order) is the same under every bundle shape.
 * Also: the cap cuts a real job's trace, and the job's results do not change.
 */
#include "engine_harness.h"
#include "runner/base/map.h"

/* ========================================================================================== */
/* Records as text                                                                            */
/* ========================================================================================== */

static void put_time(char *out, size_t n, sd_time t)
{
    if (t <= SD_TIME_MIN) {
        snprintf(out, n, "-inf");
    } else if (t >= SD_TIME_MAX) {
        snprintf(out, n, "+inf");
    } else if (t == SD_TIME_GLOBAL_MAX) {
        snprintf(out, n, "gmax");
    } else {
        snprintf(out, n, "%lld", (long long)t);
    }
}

/* One record, without seq and wall: "clock=C kind stage=S pc=P cause t=T t2=T2 ...". Keys
 * are shown as "k" + the digest's low 16 bits. */
static void rec_text(const sd_em *em, const sd_trace_rec *r, char *out, size_t n)
{
    char t[32], t2[32], w[80] = "";
    put_time(t, sizeof(t), r->t);
    put_time(t2, sizeof(t2), r->t2);
    if (r->has_window) {
        if (r->window.global) {
            snprintf(w, sizeof(w), " w=G");
        } else {
            snprintf(w, sizeof(w), " w=[%lld,%lld)", (long long)r->window.start,
                     (long long)r->window.end);
        }
    }
    const char *name = sd_em_trace_name(em, r->name);
    int len = snprintf(out, n, "@%lld %s s%d", (long long)r->clock,
                       sd_trace_kind_name((sd_trace_kind)r->kind), r->stage);
    if (len < 0 || (size_t)len >= n) {
        return;
    }
    size_t at = (size_t)len;
    switch ((sd_trace_kind)r->kind) {
    case SD_TRACE_CLOCK:
        snprintf(out + at, n - at, " %s %s<-%s", sd_trace_cause_name(SD_TRACE_CLOCK, r->cause), t,
                 t2);
        break;
    case SD_TRACE_WM_IN:
    case SD_TRACE_WM_OUT:
        snprintf(out + at, n - at, " %s<-%s", t, t2);
        break;
    case SD_TRACE_HOLD:
        snprintf(out + at, n - at, " %s %s<-%s", sd_trace_cause_name(SD_TRACE_HOLD, r->cause), t,
                 t2);
        break;
    case SD_TRACE_TIMER_SET:
    case SD_TRACE_TIMER_CLEAR:
    case SD_TRACE_TIMER_FIRE:
        snprintf(out + at, n - at, " %s %s%s k%04llx fire=%s hold=%s", name ? name : "?",
                 r->cause ? "pt" : "et", w, (unsigned long long)(r->key & 0xffff), t, t2);
        break;
    case SD_TRACE_PANE:
        snprintf(out + at, n - at, " pc%d%s k%04llx %s #%lld n=%lld ts=%s", r->pcoll, w,
                 (unsigned long long)(r->key & 0xffff),
                 sd_trace_cause_name(SD_TRACE_PANE, r->cause), (long long)r->index,
                 (long long)r->count, t);
        break;
    case SD_TRACE_TESTSTREAM:
        snprintf(out + at, n - at, " pc%d %s ev=%lld n=%lld t=%s", r->pcoll,
                 sd_trace_cause_name(SD_TRACE_TESTSTREAM, r->cause), (long long)r->index,
                 (long long)r->count, t);
        break;
    case SD_TRACE_LATE:
        snprintf(out + at, n - at, " pc%d%s ts=%s wm=%s %s%s", r->pcoll, w, t, t2,
                 sd_trace_cause_name(SD_TRACE_LATE, r->cause), r->count ? " routed" : "");
        break;
    case SD_TRACE_CUT:
        snprintf(out + at, n - at, " at=%lld left=%lld", (long long)r->count, (long long)r->index);
        break;
    case SD_TRACE_PAUSE: /* the pause gate's records: test_engine_pause.c asserts them */
    case SD_TRACE_STEP:
        snprintf(out + at, n - at, " %s", sd_trace_cause_name((sd_trace_kind)r->kind, r->cause));
        break;
    case SD_TRACE_KINDS:
        break;
    }
}

#define TRACE_MAX  400
#define TRACE_TEXT 160

typedef struct trace_text {
    char lines[TRACE_MAX][TRACE_TEXT];
    size_t n;
} trace_text;

static int cmp_line(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Order each job-clock instant's records (a line starts with "@clock "; the clock never goes
 * back): bundle shapes may order what happens at one instant differently (two timers due
 * together fire in one bundle or in two, one after the other's output). */
static void sort_instants(trace_text *t)
{
    size_t from = 0;
    for (size_t i = 1; i <= t->n; i++) {
        if (i == t->n || strncmp(t->lines[i], t->lines[from], strcspn(t->lines[from], " ")) != 0 ||
            t->lines[i][strcspn(t->lines[from], " ")] != ' ') {
            qsort(t->lines[from], i - from, TRACE_TEXT, cmp_line);
            from = i;
        }
    }
}

/* The engine's trace as text; with shape_free, only the kinds that do not depend on how
 * bundles are cut (clock moves, timers set and fired, panes, TestStream events, late data),
 * each instant's records in a canonical order. */
static void take_trace(const sd_em *em, bool shape_free, trace_text *out)
{
    out->n = 0;
    for (size_t i = 0; i < sd_em_trace_len(em); i++) {
        const sd_trace_rec *r = sd_em_trace_at(em, i);
        assert_int_equal(r->seq, i);
        if (shape_free && (r->kind == SD_TRACE_WM_IN || r->kind == SD_TRACE_WM_OUT ||
                           r->kind == SD_TRACE_HOLD || r->kind == SD_TRACE_TIMER_CLEAR)) {
            continue;
        }
        assert_true(out->n < TRACE_MAX);
        rec_text(em, r, out->lines[out->n++], TRACE_TEXT);
    }
    if (shape_free) {
        sort_instants(out);
    }
}

static void print_trace(const char *title, const trace_text *t)
{
    fprintf(stderr, "%s (%zu records):\n", title, t->n);
    for (size_t i = 0; i < t->n; i++) {
        fprintf(stderr, "    \"%s\",\n", t->lines[i]);
    }
}

static void expect_trace(const trace_text *got, const char *const *want, size_t n)
{
    bool same = got->n == n;
    for (size_t i = 0; same && i < n; i++) {
        same = strcmp(got->lines[i], want[i]) == 0;
    }
    if (!same) {
        print_trace("trace", got);
        for (size_t i = 0; i < n && i < got->n; i++) {
            if (strcmp(got->lines[i], want[i]) != 0) {
                fprintf(stderr, "first difference at %zu:\n  got  %s\n  want %s\n", i,
                        got->lines[i], want[i]);
                break;
            }
        }
        fail_msg("the trace differs (%zu records, %zu expected)", got->n, n);
    }
}

static void expect_same(const trace_text *a, const trace_text *b, const char *what)
{
    bool same = a->n == b->n;
    for (size_t i = 0; same && i < a->n; i++) {
        same = strcmp(a->lines[i], b->lines[i]) == 0;
    }
    if (!same) {
        print_trace("first", a);
        print_trace(what, b);
        fail_msg("the trace differs: %s", what);
    }
}

/* ========================================================================================== */
/* A TestStream into a GroupByKey: early, on-time and late panes, a late element dropped      */
/* ========================================================================================== */

static const sd_trigger T_COUNT1 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 1 };
static const sd_trigger T_ALWAYS = { .kind = SD_TRIGGER_ALWAYS };
static const sd_trigger T_EOW_EARLY_LATE = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW,
                                             .early = &T_COUNT1,
                                             .late = &T_ALWAYS };

/* Fixed windows of 10, lateness 5: a@1 and a@2 fire early; the watermark to 10 fires the
 * empty on-time pane; a@3 is late and fires a late pane; the clock moves 1 s; the watermark
 * to 20 expires the window; a@4 is dropped as late. */
static const trigger_case GBK_CASE = { .name = "trace-gbk",
                                       .trigger = &T_EOW_EARLY_LATE,
                                       .lateness = 5,
                                       .steps = { { 'e', "a", 1, 1 },
                                                  { 'e', "a", 2, 2 },
                                                  { 'w', NULL, 0, 10 },
                                                  { 'e', "a", 3, 3 },
                                                  { 'c', NULL, 0, 1000 },
                                                  { 'w', NULL, 0, 20 },
                                                  { 'e', "a", 4, 4 } },
                                       .n_steps = 7 };

static void run_gbk(const h_shape *shape, bool shape_free, trace_text *out)
{
    harness h;
    window_case wc;
    sd_em_config cfg = { .wall_now = fake_wall };
    assert_int_equal(h_init(&h, shape, &cfg, false), SD_OK);
    assert_int_equal(build_trigger_pipeline(&h, &GBK_CASE, &wc, false), SD_OK);
    h_run_ok(&h);
    static const char *const panes[] = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9",
                                         "v= O#2/0 ts=9", "v=3 L#3/1 ts=9" };
    h_expect(&h, panes, 4);
    take_trace(h.em, shape_free, out);
    h_deinit(&h);
}

static trace_text trace_a, trace_b;

void test_trace_teststream_gbk(void **state)
{
    (void)state;
    /* Stages: 0 ts, 1 assign, 2 gbk, 3 collect; PCollections: 0 tsout, 1 windowed, 2 grouped.
     * Key "a" is k3465 (the low bits of its encoding's digest). Each element is held at its
     * timestamp while pending at assign, then fires an early pane (its one value); the
     * watermark to 10 fires the empty on-time pane; a@3 is within the lateness (expiry 14) and
     * fires a late pane; the clock event moves the job clock 1 s; after the watermark to 20
     * a@4 is dropped as late at the GroupByKey; the stream's end takes everything to +inf. */
    static const char *const want[] = {
        "@0 teststream s0 pc0 elements ev=0 n=1 t=-inf",
        "@0 hold s1 pending 1<-+inf",
        "@0 hold s1 none +inf<-1",
        "@0 pane s2 pc2 w=[0,10) k3465 early #0 n=1 ts=9",
        "@0 hold s3 pending 9<-+inf",
        "@0 hold s3 none +inf<-9",
        "@0 teststream s0 pc0 elements ev=1 n=1 t=-inf",
        "@0 hold s1 pending 2<-+inf",
        "@0 hold s1 none +inf<-2",
        "@0 pane s2 pc2 w=[0,10) k3465 early #1 n=1 ts=9",
        "@0 hold s3 pending 9<-+inf",
        "@0 hold s3 none +inf<-9",
        "@0 teststream s0 pc0 watermark ev=2 n=0 t=10",
        "@0 wm_in s0 10<--inf",
        "@0 wm_out s0 10<--inf",
        "@0 wm_in s1 10<--inf",
        "@0 wm_out s1 10<--inf",
        "@0 pane s2 pc2 w=[0,10) k3465 on_time #2 n=0 ts=9",
        "@0 wm_in s2 10<--inf",
        "@0 wm_out s2 10<--inf",
        "@0 hold s3 pending 9<-+inf",
        "@0 wm_in s3 9<--inf",
        "@0 wm_out s3 9<--inf",
        "@0 hold s3 none +inf<-9",
        "@0 wm_in s3 10<-9",
        "@0 wm_out s3 10<-9",
        "@0 teststream s0 pc0 elements ev=3 n=1 t=-inf",
        "@0 hold s1 pending 3<-+inf",
        "@0 hold s1 none +inf<-3",
        "@0 pane s2 pc2 w=[0,10) k3465 late #3 n=1 ts=9",
        "@0 hold s3 pending 9<-+inf",
        "@0 hold s3 none +inf<-9",
        "@0 teststream s0 pc-1 processing_time ev=4 n=0 t=1000",
        "@1000 clock s-1 teststream 1000<-0",
        "@1000 teststream s0 pc0 watermark ev=5 n=0 t=20",
        "@1000 wm_in s0 20<-10",
        "@1000 wm_out s0 20<-10",
        "@1000 wm_in s1 20<-10",
        "@1000 wm_out s1 20<-10",
        "@1000 wm_in s2 20<-10",
        "@1000 wm_out s2 20<-10",
        "@1000 wm_in s3 20<-10",
        "@1000 wm_out s3 20<-10",
        "@1000 teststream s0 pc0 elements ev=6 n=1 t=-inf",
        "@1000 hold s1 pending 4<-+inf",
        "@1000 late s2 pc1 w=[0,10) ts=4 wm=20 window expired",
        "@1000 hold s1 none +inf<-4",
        "@1000 teststream s0 pc0 watermark ev=7 n=0 t=+inf",
        "@1000 wm_in s0 +inf<-20",
        "@1000 wm_out s0 +inf<-20",
        "@1000 wm_in s1 +inf<-20",
        "@1000 wm_out s1 +inf<-20",
        "@1000 wm_in s2 +inf<-20",
        "@1000 wm_out s2 +inf<-20",
        "@1000 wm_in s3 +inf<-20",
        "@1000 wm_out s3 +inf<-20",
    };
    run_gbk(&SHAPES[0], false, &trace_a);
    expect_trace(&trace_a, want, sizeof(want) / sizeof(want[0]));
    /* A second run gives the same records. */
    run_gbk(&SHAPES[0], false, &trace_b);
    expect_same(&trace_a, &trace_b, "second run");
    /* Every bundle shape gives the same clock moves, panes, TestStream events and late data
     * (holds and watermarks follow how the bundles were cut). */
    run_gbk(&SHAPES[0], true, &trace_a);
    for (size_t s = 1; s < N_SHAPES; s++) {
        run_gbk(&SHAPES[s], true, &trace_b);
        expect_same(&trace_a, &trace_b, SHAPES[s].name);
    }
}

/* ========================================================================================== */
/* Processing-time timers on the synthetic clock                                              */
/* ========================================================================================== */

static void run_pt(const h_shape *shape, bool shape_free, trace_text *out)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "b", 2, 2 } }, .n_rows = 2 };
    static const char *const want[] = { "pt k=a sum=1 n=1 at=3600000",
                                        "pt k=b sum=2 n=1 at=3600000",
                                        "pt k=a sum=0 n=0 at=10800000" };
    harness h;
    sd_em_config cfg = { .clock = SD_CLOCK_SYNTHETIC, .wall_now = fake_wall };
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 3600000, .loop_once = 1 };
    fake_wall_now = 1000000000000LL; /* the wall clock build_keyed's timers are recorded from */
    assert_int_equal(h_init(&h, shape, &cfg, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 3);
    take_trace(h.em, shape_free, out);
    h_deinit(&h);
}

void test_trace_processing_time_timers(void **state)
{
    (void)state;
    /* Stages: 0 impulse, 1 gen, 2 keyed (family "pt"), 3 gbk, 4 collect. Keys a (k3465) and b
     * (k2f4c) each set their timer twice (the first setting superseded), both fire at +1 h,
     * a re-arms for +3 h; the timers' holds keep keyed's output watermark at 1 until the last
     * firing. */
    static const char *const want[] = {
        "@0 hold s1 pending -inf<-+inf",
        "@0 hold s1 none +inf<--inf",
        "@0 wm_in s1 +inf<--inf",
        "@0 wm_out s1 +inf<--inf",
        "@0 hold s2 pending 1<-+inf",
        "@0 wm_in s2 1<--inf",
        "@0 wm_out s2 1<--inf",
        "@0 wm_in s3 1<--inf",
        "@0 wm_out s3 1<--inf",
        "@0 wm_in s4 1<--inf",
        "@0 wm_out s4 1<--inf",
        "@0 timer_set s2 pt pt w=G k3465 fire=1800000 hold=1",
        "@0 timer_set s2 pt pt w=G k3465 fire=3600000 hold=1",
        "@0 timer_set s2 pt pt w=G k2f4c fire=1800000 hold=2",
        "@0 timer_set s2 pt pt w=G k2f4c fire=3600000 hold=2",
        "@0 wm_in s2 +inf<-1",
        "@3600000 clock s-1 timer 3600000<-0",
        "@3600000 timer_fire s2 pt pt w=G k3465 fire=3600000 hold=1",
        "@3600000 timer_fire s2 pt pt w=G k2f4c fire=3600000 hold=2",
        "@3600000 timer_set s2 pt pt w=G k3465 fire=10800000 hold=1",
        "@10800000 clock s-1 timer 10800000<-3600000",
        "@10800000 timer_fire s2 pt pt w=G k3465 fire=10800000 hold=1",
        "@10800000 hold s2 none +inf<-1",
        "@10800000 wm_out s2 +inf<-1",
        "@10800000 wm_in s3 +inf<-1",
        "@10800000 wm_out s3 +inf<-1",
        "@10800000 wm_in s4 +inf<-1",
        "@10800000 wm_out s4 +inf<-1",
    };
    run_pt(&SHAPES[0], false, &trace_a);
    expect_trace(&trace_a, want, sizeof(want) / sizeof(want[0]));
    run_pt(&SHAPES[0], false, &trace_b);
    expect_same(&trace_a, &trace_b, "second run");
    run_pt(&SHAPES[0], true, &trace_a);
    for (size_t s = 1; s < N_SHAPES; s++) {
        run_pt(&SHAPES[s], true, &trace_b);
        expect_same(&trace_a, &trace_b, SHAPES[s].name);
    }
}

/* ========================================================================================== */
/* The cap                                                                                    */
/* ========================================================================================== */

void test_trace_cap(void **state)
{
    (void)state;
    /* The whole trace of the GBK job, then the same job with a cap of 10: its first 9 records
     * are the same, the 10th is CUT, and the job's panes are unchanged (run_gbk checks). */
    run_gbk(&SHAPES[0], false, &trace_a);
    assert_true(trace_a.n > 10);
    harness h;
    window_case wc;
    sd_em_config cfg = { .wall_now = fake_wall, .trace_cap = 10 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    assert_int_equal(build_trigger_pipeline(&h, &GBK_CASE, &wc, false), SD_OK);
    h_run_ok(&h);
    static const char *const panes[] = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9",
                                         "v= O#2/0 ts=9", "v=3 L#3/1 ts=9" };
    h_expect(&h, panes, 4);
    assert_true(sd_em_trace_was_cut(h.em));
    assert_int_equal(sd_em_trace_len(h.em), 10);
    take_trace(h.em, false, &trace_b);
    for (size_t i = 0; i < 9; i++) {
        assert_string_equal(trace_b.lines[i], trace_a.lines[i]);
    }
    const sd_trace_rec *cut = sd_em_trace_at(h.em, 9);
    assert_int_equal(cut->kind, SD_TRACE_CUT);
    assert_int_equal(cut->count, 9);
    assert_int_equal(cut->index, (int64_t)trace_a.n - 9); /* every record left out counted */
    h_deinit(&h);
}

/* ========================================================================================== */
/* Every late element is in the trace                                                         */
/* ========================================================================================== */

/* The trigger tables (fixed windows and sessions, with late and dropped data, closed windows
 * and sessions merging into closed ones): the LATE records stand for exactly the elements the
 * stages counted as dropped late. */
static void late_elements_recorded(const trigger_case *cases, size_t n, uint64_t *dropped)
{
    for (size_t c = 0; c < n; c++) {
        harness h;
        window_case wc;
        sd_em_config cfg = { .wall_now = fake_wall };
        assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
        assert_int_equal(build_trigger_pipeline(&h, &cases[c], &wc, false), SD_OK);
        h_run_ok(&h);
        uint64_t counted = 0, recorded = 0;
        for (size_t s = 0; s < sd_em_n_stages(h.em); s++) {
            sd_em_stage_stats st;
            sd_em_stage_info(h.em, s, &st);
            counted += st.dropped_late;
        }
        assert_false(sd_em_trace_was_cut(h.em));
        for (size_t i = 0; i < sd_em_trace_len(h.em); i++) {
            const sd_trace_rec *r = sd_em_trace_at(h.em, i);
            if (r->kind == SD_TRACE_LATE) {
                assert_true(r->index >= 1);
                recorded += (uint64_t)r->index;
            }
        }
        if (counted != recorded) {
            fail_msg("case %s: %llu dropped late, %llu in the trace", cases[c].name,
                     (unsigned long long)counted, (unsigned long long)recorded);
        }
        *dropped += counted;
        h_deinit(&h);
    }
}

void test_trace_every_late_element(void **state)
{
    (void)state;
    uint64_t dropped = 0, session_dropped = 0;
    late_elements_recorded(TRIGGER_CASES, N_TRIGGER_CASES, &dropped);
    late_elements_recorded(SESSION_TRIGGER_CASES, N_SESSION_TRIGGER_CASES, &session_dropped);
    assert_true(dropped > 0);
    assert_true(session_dropped > 0);
}
