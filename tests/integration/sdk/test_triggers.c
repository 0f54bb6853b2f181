/*
 * Integration tests of triggers set from the C SDK (sd_windowfn.trigger, accumulation mode,
 * output time, allowed lateness), run end to end on the embedded Sundial runner.
 *
 * Table-driven: each row scripts a TestStream (elements, watermark advances, processing-time
 * advances; every event is applied when the pipeline is quiescent, so the panes are exact),
 * windows it with a trigger and groups it, renders every pane as "key:values [window)
 * TIMING#index/nonspec first last @timestamp" and asserts the exact set of panes, plus the
 * number of late elements the runner dropped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "time_common.h"

#define WIN_MS (10 * MIN_MS)

typedef struct step {
    char op; /* 'e' element, 'w' watermark, 'p' processing time; 0 ends the script */
    int64_t value;
    sd_time ts;
} step;

typedef const sd_trigger_spec *(*trigger_fn)(sd_pipeline *p);

typedef struct row {
    const char *name;
    trigger_fn trigger;
    bool global;
    sd_accumulation_mode accumulation;
    sd_output_timestamp output_time;
    int64_t lateness_ms;
    sd_closing_behavior closing;
    step steps[16];
    const char *expected[8]; /* NULL-terminated */
    int64_t dropped;
} row;

/* ---------------------------------------------------------------- trigger trees */

static const sd_trigger_spec *t_early_pt(sd_pipeline *p)
{
    return sd_trigger_after_watermark(p, sd_trigger_after_processing_time(p, MIN_MS), NULL);
}

/* Early firings at the next whole hour of processing time (AlignTo), not per element. */
static const sd_trigger_spec *t_early_aligned(sd_pipeline *p)
{
    return sd_trigger_after_watermark(
        p, sd_trigger_after_processing_time_aligned(p, 0, 60 * MIN_MS, 0), NULL);
}

static const sd_trigger_spec *t_count3(sd_pipeline *p)
{
    return sd_trigger_after_count(p, 3);
}

static const sd_trigger_spec *t_repeat_count2(sd_pipeline *p)
{
    return sd_trigger_repeatedly(p, sd_trigger_after_count(p, 2));
}

static const sd_trigger_spec *t_each(sd_pipeline *p)
{
    const sd_trigger_spec *subs[2] = { sd_trigger_after_count(p, 2), sd_trigger_after_count(p, 1) };
    return sd_trigger_after_each(p, subs, 2);
}

static const sd_trigger_spec *t_or_finally(sd_pipeline *p)
{
    return sd_trigger_or_finally(p, sd_trigger_repeatedly(p, sd_trigger_after_count(p, 1)),
                                 sd_trigger_after_count(p, 3));
}

static const sd_trigger_spec *t_any_repeated(sd_pipeline *p)
{
    const sd_trigger_spec *subs[2] = { sd_trigger_after_count(p, 3),
                                       sd_trigger_after_processing_time(p, MIN_MS) };
    return sd_trigger_repeatedly(p, sd_trigger_after_any(p, subs, 2));
}

static const sd_trigger_spec *t_all(sd_pipeline *p)
{
    const sd_trigger_spec *subs[2] = { sd_trigger_after_count(p, 2),
                                       sd_trigger_after_processing_time(p, MIN_MS) };
    return sd_trigger_after_all(p, subs, 2);
}

static const sd_trigger_spec *t_early_late(sd_pipeline *p)
{
    return sd_trigger_after_watermark(p, sd_trigger_after_count(p, 1),
                                      sd_trigger_after_count(p, 2));
}

static const sd_trigger_spec *t_never(sd_pipeline *p)
{
    return sd_trigger_never(p);
}

static const sd_trigger_spec *t_always(sd_pipeline *p)
{
    return sd_trigger_always(p);
}

static const sd_trigger_spec *t_default(sd_pipeline *p)
{
    return sd_trigger_default(p);
}

/* ---------------------------------------------------------------- the table */

#define E(v, t)       \
    {                 \
        'e', (v), (t) \
    }
/* B: an element of the same TestStream event as the B steps next to it. */
#define B(v, t)       \
    {                 \
        'b', (v), (t) \
    }
#define WM(t)       \
    {               \
        'w', 0, (t) \
    }
#define PT(ms)       \
    {                \
        'p', (ms), 0 \
    }
#define W0   " [0,600000) "
#define GW   " [global) "
#define GMAX "@9223371950454775"

static const row g_rows[] = {
    { .name = "early firings on processing time, discarding",
      .trigger = t_early_pt,
      .steps = { E(1, 1000), PT(2 * MIN_MS), E(2, 2000), PT(2 * MIN_MS), E(3, 3000), WM(WIN_MS) },
      .expected = { "a:1" W0 "EARLY#0/-1 first @599999", "a:2" W0 "EARLY#1/-1 @599999",
                    "a:3" W0 "ON_TIME#2/0 last @599999" } },
    { .name = "early firings on processing time, accumulating",
      .trigger = t_early_pt,
      .accumulation = SD_ACCUMULATING_PANES,
      .steps = { E(1, 1000), PT(2 * MIN_MS), E(2, 2000), PT(2 * MIN_MS), E(3, 3000), WM(WIN_MS) },
      .expected = { "a:1" W0 "EARLY#0/-1 first @599999", "a:1,2" W0 "EARLY#1/-1 @599999",
                    "a:1,2,3" W0 "ON_TIME#2/0 last @599999" } },
    { .name = "early firing aligned to the hour gathers both elements",
      .trigger = t_early_aligned,
      .steps = { E(1, 1000), E(2, 2000), PT(61 * MIN_MS), WM(WIN_MS) },
      .expected = { "a:1,2" W0 "EARLY#0/-1 first @599999", "a:" W0 "ON_TIME#1/0 last @599999" } },
    { .name = "no processing-time firing before its delay",
      .trigger = t_early_pt,
      .steps = { E(1, 1000), PT(30 * SEC_MS), E(2, 2000), PT(20 * SEC_MS), WM(WIN_MS) },
      .expected = { "a:1,2" W0 "ON_TIME#0/0 first last @599999" } },
    { .name = "repeated element count in the global window",
      .trigger = t_repeat_count2,
      .global = true,
      .steps = { E(1, 1), E(2, 2), E(3, 3), E(4, 4), E(5, 5) },
      .expected = { "a:1,2" GW "EARLY#0/-1 first " GMAX, "a:3,4" GW "EARLY#1/-1 " GMAX,
                    "a:5" GW "ON_TIME#2/0 last " GMAX } },
    { .name = "repeated element count, accumulating",
      .trigger = t_repeat_count2,
      .global = true,
      .accumulation = SD_ACCUMULATING_PANES,
      .steps = { E(1, 1), E(2, 2), E(3, 3), E(4, 4) },
      /* No final pane: nothing arrived after the last firing (FIRE_IF_NON_EMPTY closing). */
      .expected = { "a:1,2" GW "EARLY#0/-1 first " GMAX, "a:1,2,3,4" GW "EARLY#1/-1 " GMAX } },
    { .name = "closing fire-always: an empty final pane at window close",
      .trigger = t_repeat_count2,
      .global = true,
      .closing = SD_CLOSING_FIRE_ALWAYS,
      .steps = { E(1, 1), E(2, 2), E(3, 3), E(4, 4) },
      .expected = { "a:1,2" GW "EARLY#0/-1 first " GMAX, "a:3,4" GW "EARLY#1/-1 " GMAX,
                    "a:" GW "ON_TIME#2/0 last " GMAX } },
    { .name = "closing fire-always, accumulating: the final pane repeats the window",
      .trigger = t_repeat_count2,
      .global = true,
      .accumulation = SD_ACCUMULATING_PANES,
      .closing = SD_CLOSING_FIRE_ALWAYS,
      .steps = { E(1, 1), E(2, 2), E(3, 3), E(4, 4) },
      .expected = { "a:1,2" GW "EARLY#0/-1 first " GMAX, "a:1,2,3,4" GW "EARLY#1/-1 " GMAX,
                    "a:1,2,3,4" GW "ON_TIME#2/0 last " GMAX } },
    { .name = "closing fire-always with lateness: the final pane is LATE after ON_TIME",
      .trigger = t_always,
      .lateness_ms = HOUR_MS,
      .closing = SD_CLOSING_FIRE_ALWAYS,
      .steps = { E(1, 1000), WM(WIN_MS), E(2, 2000), WM(WIN_MS + 2 * HOUR_MS) },
      /* The first pane past the end of the window is ON_TIME; the closing one is LATE. */
      .expected = { "a:1" W0 "EARLY#0/-1 first @599999", "a:2" W0 "ON_TIME#1/0 @599999",
                    "a:" W0 "LATE#2/1 last @599999" } },
    { .name = "after each: two elements, then one; then the window is closed",
      .trigger = t_each,
      .steps = { E(1, 1000), E(2, 2000), E(3, 3000), E(4, 4000), WM(WIN_MS) },
      .expected = { "a:1,2" W0 "EARLY#0/-1 first @599999", "a:3" W0 "EARLY#1/-1 last @599999" },
      .dropped = 1 },
    /* The trigger finishes at the third element of one event: the fourth came with it (Java's
     * and Python's drivers, asking once per bundle, would have put it in that pane), so it goes
     * out as the window's last pane at its end; a later event finds the window closed. */
    { .name = "after count: the rest of the closing event is the window's last pane",
      .trigger = t_count3,
      .steps = { B(1, 1000), B(2, 2000), B(3, 3000), B(4, 4000), E(5, 5000), WM(WIN_MS) },
      .expected = { "a:1,2,3" W0 "EARLY#0/-1 first @599999", "a:4" W0 "ON_TIME#1/0 last @599999" },
      .dropped = 1 },
    { .name = "after count: with nothing more in its event, the closing pane is the last",
      .trigger = t_count3,
      .steps = { B(1, 1000), B(2, 2000), B(3, 3000), E(4, 4000), WM(WIN_MS) },
      .expected = { "a:1,2,3" W0 "EARLY#0/-1 first last @599999" },
      .dropped = 1 },
    { .name = "or finally: every element until the third",
      .trigger = t_or_finally,
      .steps = { E(1, 1000), E(2, 2000), E(3, 3000), E(4, 4000) },
      .expected = { "a:1" W0 "EARLY#0/-1 first @599999", "a:2" W0 "EARLY#1/-1 @599999",
                    "a:3" W0 "EARLY#2/-1 last @599999" },
      .dropped = 1 },
    { .name = "repeated after any: processing time or three elements",
      .trigger = t_any_repeated,
      .steps = { E(1, 1000), E(2, 2000), PT(2 * MIN_MS), E(3, 3000), E(4, 4000), E(5, 5000),
                 E(6, 6000), WM(WIN_MS) },
      .expected = { "a:1,2" W0 "EARLY#0/-1 first @599999", "a:3,4,5" W0 "EARLY#1/-1 @599999",
                    "a:6" W0 "ON_TIME#2/0 last @599999" } },
    { .name = "after all: two elements and a minute",
      .trigger = t_all,
      .steps = { E(1, 1000), E(2, 2000), PT(30 * SEC_MS), E(3, 3000), PT(2 * MIN_MS), E(4, 4000) },
      .expected = { "a:1,2,3" W0 "EARLY#0/-1 first last @599999" },
      .dropped = 1 },
    { .name = "early and late firings with allowed lateness",
      .trigger = t_early_late,
      .lateness_ms = HOUR_MS,
      .steps = { E(1, 1000), E(2, 2000), E(3, 3000), WM(WIN_MS), E(4, 4000), E(5, 5000),
                 E(6, 6000) },
      /* The ON_TIME pane fires even when empty (Beam's default OnTimeBehavior FIRE_ALWAYS). */
      .expected = { "a:1" W0 "EARLY#0/-1 first @599999", "a:2" W0 "EARLY#1/-1 @599999",
                    "a:3" W0 "EARLY#2/-1 @599999", "a:" W0 "ON_TIME#3/0 @599999",
                    "a:4,5" W0 "LATE#4/1 @599999", "a:6" W0 "LATE#5/2 last @599999" } },
    { .name = "never: only the final pane at window close",
      .trigger = t_never,
      .steps = { E(1, 1000), PT(5 * MIN_MS), E(2, 2000), WM(WIN_MS) },
      .expected = { "a:1,2" W0 "ON_TIME#0/0 first last @599999" } },
    { .name = "always: a pane per element event",
      .trigger = t_always,
      .steps = { E(1, 1000), E(2, 2000), WM(WIN_MS) },
      .expected = { "a:1" W0 "EARLY#0/-1 first @599999", "a:2" W0 "EARLY#1/-1 @599999" } },
    { .name = "output time: earliest in pane",
      .trigger = t_default,
      .output_time = SD_OUTPUT_AT_EARLIEST,
      .steps = { E(1, 5000), E(2, 3000), E(3, 7000), WM(WIN_MS) },
      .expected = { "a:1,2,3" W0 "ON_TIME#0/0 first last @3000" } },
    { .name = "output time: latest in pane",
      .trigger = t_default,
      .output_time = SD_OUTPUT_AT_LATEST,
      .steps = { E(1, 5000), E(2, 3000), E(3, 7000), WM(WIN_MS) },
      .expected = { "a:1,2,3" W0 "ON_TIME#0/0 first last @7000" } },
};

/* ---------------------------------------------------------------- running a row */

static bool run_row(const row *r, char *why, size_t why_len)
{
    sd_pipeline *p = sd_pipeline_create("triggers");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    for (size_t i = 0; i < 16 && r->steps[i].op != 0; i++) {
        const step *s = &r->steps[i];
        if (s->op == 'b') {
            const char *keys[16];
            int64_t vals[16];
            sd_time tss[16];
            size_t n = 0;
            for (; i < 16 && r->steps[i].op == 'b'; i++, n++) {
                keys[n] = "a";
                vals[n] = r->steps[i].value;
                tss[n] = r->steps[i].ts;
            }
            i--;
            tc_add_kvs(ts, NULL, keys, vals, tss, n);
        } else if (s->op == 'e') {
            tc_add_kv(ts, NULL, "a", s->value, s->ts);
        } else if (s->op == 'w') {
            sd_teststream_advance_watermark(ts, NULL, s->ts);
        } else {
            sd_teststream_advance_processing_time(ts, s->value);
        }
    }
    sd_windowfn wf = { .kind = r->global ? SD_WINDOW_GLOBAL : SD_WINDOW_FIXED,
                       .size_ms = r->global ? 0 : WIN_MS,
                       .allowed_lateness_ms = r->lateness_ms,
                       .trigger = r->trigger(p),
                       .accumulation = r->accumulation,
                       .output_time = r->output_time,
                       .closing = r->closing };
    sd_pcoll *panes = tc_group_render(p, "", sd_teststream_output(ts, NULL), &wf, "tc:panes");
    size_t n = 0;
    while (n < 8 && r->expected[n] != NULL) {
        n++;
    }
    sd_assert_strings(p, "Panes", panes, r->expected, n);
    sd_run_result res;
    memset(&res, 0, sizeof(res));
    int64_t wall = 0;
    sd_status st = tc_run(p, &wall, &res, why, why_len);
    bool ok = st == SD_OK;
    int64_t dropped = sd_run_result_counter(&res, SD_RUN_DROPPED_LATE);
    if (ok && dropped != r->dropped) {
        snprintf(why, why_len, "dropped %lld late elements, expected %lld", (long long)dropped,
                 (long long)r->dropped);
        ok = false;
    }
    if (ok && wall > 10000) {
        snprintf(why, why_len, "took %lld ms of wall time", (long long)wall);
        ok = false;
    }
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    return ok;
}

static void test_trigger_table(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof(g_rows) / sizeof(g_rows[0]); i++) {
        char why[2048];
        if (!run_row(&g_rows[i], why, sizeof(why))) {
            fprintf(stderr, "row \"%s\" failed: %s\n", g_rows[i].name, why);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* The trigger tree travels in the WindowingStrategy proto exactly as built. */
static void test_trigger_builder_errors(void **state)
{
    (void)state;

    struct {
        const char *name;
        int kind;
        const char *want;
    } rows[] = {
        { "zero count", 0, "count must be in 1.." },
        { "negative delay", 1, "delay must be >= 0" },
        { "empty composite", 2, "needs at least one sub-trigger" },
        { "NULL sub-trigger", 3, "sub-trigger 1 is NULL" },
        { "foreign trigger", 4, "built for another pipeline" },
        { "bad accumulation", 5, "is not one of the" },
        { "zero alignment period", 6, "period must be > 0" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_pipeline *p = sd_pipeline_create("trigger-errors");
        sd_pipeline *q = sd_pipeline_create("other");
        sd_pcoll *in = sd_create_ints(p, "In", (const int64_t[]){ 1 }, 1);
        sd_windowfn wf = { .kind = SD_WINDOW_FIXED, .size_ms = 1000 };
        switch (rows[i].kind) {
        case 0:
            sd_trigger_after_count(p, 0);
            break;
        case 1:
            sd_trigger_after_processing_time(p, -5);
            break;
        case 2:
            sd_trigger_after_any(p, NULL, 0);
            break;
        case 3: {
            const sd_trigger_spec *subs[2] = { sd_trigger_never(p), NULL };
            sd_trigger_after_all(p, subs, 2);
            break;
        }
        case 4:
            wf.trigger = sd_trigger_never(q);
            sd_window_into(p, "W", in, &wf);
            break;
        case 5:
            wf.accumulation = (sd_accumulation_mode)7;
            sd_window_into(p, "W", in, &wf);
            break;
        default:
            sd_trigger_after_processing_time_aligned(p, 0, 0, 0);
            break;
        }
        const sd_err *e = sd_pipeline_error(p);
        assert_non_null(e);
        if (strstr(sd_err_msg(e), rows[i].want) == NULL) {
            fail_msg("row %s: message \"%s\" lacks \"%s\"", rows[i].name, sd_err_msg(e),
                     rows[i].want);
        }
        sd_pipeline_destroy(q);
        sd_pipeline_destroy(p);
    }
}

/* KV<string, varint> -> "key=value TIMING#index[ last]". */
static sd_status kv_pane_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes k;
    int64_t v;
    char buf[256];
    (void)state;
    if (sd_read_bytes(&r, &k) != SD_OK || sd_read_int(&r, &v) != SD_OK) {
        return sd_fail(c, "kv_pane: not KV<string, varint>");
    }
    sd_pane pane = sd_ctx_pane(c);
    int n = snprintf(buf, sizeof(buf), "%.*s=%lld %s#%lld%s", (int)k.len, (const char *)k.ptr,
                     (long long)v, sd_pane_timing_name(pane.timing), (long long)pane.index,
                     pane.last ? " last" : "");
    return sd_emit_str(c, buf, (size_t)n);
}

/*
 * A lifted combine (count per key) under early firings: accumulating panes carry running
 * counts, discarding panes the count since the previous pane (0 for the empty ON_TIME pane).
 */
static void test_triggered_combine(void **state)
{
    (void)state;
    for (int accumulating = 0; accumulating < 2; accumulating++) {
        sd_pipeline *p = sd_pipeline_create("triggered-combine");
        sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
        for (int i = 0; i < 3; i++) {
            tc_add_kv(ts, NULL, "a", 7, 1000 * (i + 1));
        }
        sd_teststream_advance_watermark(ts, NULL, WIN_MS);
        sd_windowfn wf = { .kind = SD_WINDOW_FIXED,
                           .size_ms = WIN_MS,
                           .trigger =
                               sd_trigger_after_watermark(p, sd_trigger_after_count(p, 1), NULL),
                           .accumulation =
                               accumulating ? SD_ACCUMULATING_PANES : SD_DISCARDING_PANES };
        sd_pcoll *w = sd_window_into(p, "Window", sd_teststream_output(ts, NULL), &wf);
        sd_pcoll *counts = sd_count_per_key(p, "Count", w);
        sd_pcoll *out =
            sd_apply(p, "Render", counts, "t:kv_pane", SD_BYTES_NULL, sd_pcoder_string(p));
        const char *const acc[] = { "a=1 EARLY#0", "a=2 EARLY#1", "a=3 EARLY#2",
                                    "a=3 ON_TIME#3 last" };
        const char *const dis[] = { "a=1 EARLY#0", "a=1 EARLY#1", "a=1 EARLY#2",
                                    "a=0 ON_TIME#3 last" };
        sd_assert_strings(p, "Check", out, accumulating ? acc : dis, 4);
        char why[2048];
        sd_status st = tc_run(p, NULL, NULL, why, sizeof(why));
        if (st != SD_OK) {
            fail_msg("%s: %s", accumulating ? "accumulating" : "discarding", why);
        }
        sd_pipeline_destroy(p);
    }
}

/*
 * Early firings on merging windows: a session's early pane, then the session grows by merging
 * and the accumulated pane of the merged window fires early and on time.
 */
static void test_session_early_firings(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("session-triggers");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "a", 1, 1000);
    sd_teststream_advance_processing_time(ts, 2 * MIN_MS);
    tc_add_kv(ts, NULL, "a", 3, 3000); /* [1000,6000) + [3000,8000) = [1000,8000) */
    sd_teststream_advance_processing_time(ts, 2 * MIN_MS);
    sd_teststream_advance_watermark(ts, NULL, 10000);
    sd_windowfn wf = { .kind = SD_WINDOW_SESSIONS,
                       .gap_ms = 5000,
                       .trigger = sd_trigger_after_watermark(
                           p, sd_trigger_after_processing_time(p, MIN_MS), NULL),
                       .accumulation = SD_ACCUMULATING_PANES };
    sd_pcoll *values = tc_group_render(p, "", sd_teststream_output(ts, NULL), &wf, "tc:values");
    const char *const early[] = { "a:1", "a:1,3" };
    sd_assert_strings_in_pane(p, "Early", values, NULL, SD_PANES_EARLY, early, 2);
    sd_window merged = sd_window_interval(1000, 8000);
    const char *const on_time[] = { "a:1,3" };
    sd_assert_strings_in_pane(p, "OnTime", values, &merged, SD_PANES_ON_TIME, on_time, 1);
    sd_assert_count_in_pane(p, "Final", values, &merged, SD_PANES_FINAL, 1);
    char why[2048];
    if (tc_run(p, NULL, NULL, why, sizeof(why)) != SD_OK) {
        fail_msg("%s", why);
    }
    sd_pipeline_destroy(p);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn kv_pane = { .process = kv_pane_process };
    if (!tc_register() || sd_register_dofn("t:kv_pane", &kv_pane) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trigger_table),
        cmocka_unit_test(test_trigger_builder_errors),
        cmocka_unit_test(test_triggered_combine),
        cmocka_unit_test(test_session_early_firings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
