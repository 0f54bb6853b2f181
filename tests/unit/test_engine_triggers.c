/*
 * Engine tests, triggers concern: when a GBK fires panes.
 *
 * TRIGGER_CASES and SESSION_TRIGGER_CASES (count, processing-time, repeat, OrFinally, AfterEach,
 * AfterAll, end-of-window with early and late firings, Never, synchronized processing time,
 * accumulating and discarding) run TestStream -> assign -> GBK(trigger) -> collect through the
 * case driver under every bundle shape; the pane each firing carries is spelled out by
 * fn_collect_panes. Also here: a processing-time trigger without a TestStream, and late data
 * routed to a dead-letter output (LATE_CASES) with its spec errors.
 */
#include "engine_harness.h"

static sd_status fn_collect_panes(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    static const char *const timing[] = { "E", "O", "L", "U" };
    sd_bytes key;
    uint64_t vals[64];
    char line[H_RESULT_LEN];
    (void)b;
    (void)ctx;
    size_t n = get_grouped(e->elem, &key, vals, 64);
    int off = snprintf(line, sizeof(line), "v=");
    for (size_t i = 0; i < n; i++) {
        off += snprintf(line + off, sizeof(line) - (size_t)off, i ? ",%llu" : "%llu",
                        (unsigned long long)vals[i]);
    }
    snprintf(line + off, sizeof(line) - (size_t)off, " %s#%lld/%lld%s%s ts=%lld",
             timing[e->pane.timing], (long long)e->pane.index, (long long)e->pane.nonspec_index,
             e->pane.first ? " first" : "", e->pane.last ? " last" : "", (long long)e->ts);
    h_record(h, "%s", line);
    return SD_OK;
}

/* The same with the window: "w=[1,26) v=1,16,8 E#0/-1 first ts=25" (values in arrival
 * order). */
static sd_status fn_collect_session_panes(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    size_t before = h->n_results;
    sd_status rc = fn_collect_panes(h, b, e, ctx);
    if (rc == SD_OK && h->n_results > before) {
        char line[2 * H_RESULT_LEN];
        snprintf(line, sizeof(line), "w=[%lld,%lld) %s", (long long)e->win.start,
                 (long long)e->win.end, h->results[before]);
        memcpy(h->results[before], line, H_RESULT_LEN - 1);
        h->results[before][H_RESULT_LEN - 1] = 0;
    }
    return rc;
}

/* "k=a n=3 E#0/-1 first last ts=9": key, value count and pane, for panes whose values depend
 * on arrival order (several elements in one TestStream event: the schedule seeds shuffle
 * them). */
static sd_status fn_collect_pane_counts(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    static const char *const timing[] = { "E", "O", "L", "U" };
    sd_bytes key;
    uint64_t vals[64];
    (void)b;
    (void)ctx;
    size_t n = get_grouped(e->elem, &key, vals, 64);
    h_record(h, "k=%.*s n=%zu %s#%lld/%lld%s%s ts=%lld", (int)key.len, (const char *)key.ptr, n,
             timing[e->pane.timing], (long long)e->pane.index, (long long)e->pane.nonspec_index,
             e->pane.first ? " first" : "", e->pane.last ? " last" : "", (long long)e->ts);
    return SD_OK;
}

static const sd_trigger T_COUNT1 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 1 };
static const sd_trigger T_COUNT2 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 2 };
static const sd_trigger T_COUNT3 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 3 };
static const sd_trigger T_PT1000 = { .kind = SD_TRIGGER_AFTER_PROCESSING_TIME, .delay_ms = 1000 };
static const sd_trigger T_ALWAYS = { .kind = SD_TRIGGER_ALWAYS };
static const sd_trigger *const SUBS_COUNT2[] = { &T_COUNT2 };
static const sd_trigger *const SUBS_COUNT1[] = { &T_COUNT1 };
static const sd_trigger *const SUBS_PT[] = { &T_PT1000 };
static const sd_trigger T_REPEAT_COUNT2 = { .kind = SD_TRIGGER_REPEAT,
                                            .subs = SUBS_COUNT2,
                                            .n_subs = 1 };
static const sd_trigger T_REPEAT_COUNT1 = { .kind = SD_TRIGGER_REPEAT,
                                            .subs = SUBS_COUNT1,
                                            .n_subs = 1 };
static const sd_trigger T_REPEAT_PT = { .kind = SD_TRIGGER_REPEAT, .subs = SUBS_PT, .n_subs = 1 };
/* Aligned to 1000 ms with offset INT64_MIN (which is 192 mod 1000): a client may send any
 * int64 offset, and t - offset once overflowed here. */
static const sd_time_transform TT_ALIGN_MIN[] = {
    { .align = true, .period_ms = 1000, .offset_ms = INT64_MIN },
};
static const sd_trigger T_PT_ALIGN_MIN = { .kind = SD_TRIGGER_AFTER_PROCESSING_TIME,
                                           .time_transforms = TT_ALIGN_MIN,
                                           .n_time_transforms = 1 };
static const sd_trigger *const SUBS_PT_ALIGN_MIN[] = { &T_PT_ALIGN_MIN };
static const sd_trigger T_REPEAT_PT_ALIGN_MIN = { .kind = SD_TRIGGER_REPEAT,
                                                  .subs = SUBS_PT_ALIGN_MIN,
                                                  .n_subs = 1 };
static const sd_trigger *const SUBS_OR[] = { &T_REPEAT_COUNT1, &T_COUNT3 };
static const sd_trigger T_OR_FINALLY = { .kind = SD_TRIGGER_OR_FINALLY,
                                         .subs = SUBS_OR,
                                         .n_subs = 2 };
static const sd_trigger *const SUBS_EACH[] = { &T_COUNT2, &T_COUNT1 };
static const sd_trigger T_EACH = { .kind = SD_TRIGGER_AFTER_EACH, .subs = SUBS_EACH, .n_subs = 2 };
static const sd_trigger *const SUBS_ALL[] = { &T_COUNT2, &T_PT1000 };
static const sd_trigger T_ALL = { .kind = SD_TRIGGER_AFTER_ALL, .subs = SUBS_ALL, .n_subs = 2 };
static const sd_trigger T_EOW_EARLY_LATE = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW,
                                             .early = &T_COUNT1,
                                             .late = &T_ALWAYS };
static const sd_trigger T_NEVER = { .kind = SD_TRIGGER_NEVER };
static const sd_trigger T_SYNC_PT = { .kind = SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME };
static const sd_trigger *const SUBS_SYNC_PT[] = { &T_SYNC_PT };
static const sd_trigger T_REPEAT_SYNC_PT = { .kind = SD_TRIGGER_REPEAT,
                                             .subs = SUBS_SYNC_PT,
                                             .n_subs = 1 };

const trigger_case TRIGGER_CASES[] = {
    { .name = "repeat-count-2",
      .trigger = &T_REPEAT_COUNT2,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'w', NULL, 0, 10 } },
      .n_steps = 4,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "early-late-on-time-even-when-empty",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 20 } },
      .n_steps = 5,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v= O#2/0 ts=9", "v=3 L#3/1 ts=9" },
      .n_want = 4 },
    { .name = "on-time-pane-skipped-when-empty-if-nonempty",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .on_time_if_nonempty = true,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 20 } },
      .n_steps = 5,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v=3 O#2/0 ts=9" },
      .n_want = 3 },
    /* ClosingBehavior: with FIRE_IF_NONEMPTY (the zero value) nothing new at expiry means no
     * final pane; EMIT_ALWAYS emits one anyway (empty, or a repeat when accumulating). */
    { .name = "no-final-pane-at-expiry-if-nonempty",
      .trigger = &T_REPEAT_COUNT2,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1,2 E#0/-1 first ts=9" },
      .n_want = 1 },
    { .name = "closing-emit-always-empty-on-time-final-pane",
      .trigger = &T_REPEAT_COUNT2,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1,2 E#0/-1 first ts=9", "v= O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "closing-emit-always-accumulating-repeats-values",
      .trigger = &T_REPEAT_COUNT2,
      .accumulating = true,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=1,2 O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "closing-emit-always-late-final-pane-after-on-time",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 E#0/-1 first ts=9", "v= O#1/0 ts=9", "v= L#2/1 last ts=9" },
      .n_want = 3 },
    { .name = "closing-emit-always-accumulating-late-final-pane",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .accumulating = true,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 E#0/-1 first ts=9", "v=1 O#1/0 ts=9", "v=1 L#2/1 last ts=9" },
      .n_want = 3 },
    { .name = "closing-emit-always-default-trigger-late-final-pane",
      .lateness = 5,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 O#0/0 first ts=9", "v= L#1/1 last ts=9" },
      .n_want = 2 },
    { .name = "default-trigger-no-final-pane-if-nonempty",
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 O#0/0 first ts=9" },
      .n_want = 1 },
    /* The watermark jumps over the window's end and its clean-up time at once (issue 33):
     * the same panes as when it passes them one at a time (the four cases above) — the on-time
     * pane is not the last, and the closing pane follows as the closing behaviour asks
     * (Java's ReduceFnRunner fires its end-of-window timer, then its clean-up timer). */
    { .name = "closing-emit-always-default-trigger-jump-past-expiry",
      .lateness = 5,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 20 } },
      .n_steps = 2,
      .want = { "v=1 O#0/0 first ts=9", "v= L#1/1 last ts=9" },
      .n_want = 2 },
    { .name = "closing-emit-always-default-trigger-jump-to-end-of-time",
      .lateness = 5,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 } },
      .n_steps = 1,
      .want = { "v=1 O#0/0 first ts=9", "v= L#1/1 last ts=9" },
      .n_want = 2 },
    { .name = "closing-emit-always-accumulating-jump-repeats-values",
      .lateness = 5,
      .accumulating = true,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1,2 O#0/0 first ts=9", "v=1,2 L#1/1 last ts=9" },
      .n_want = 2 },
    { .name = "default-trigger-jump-past-expiry-if-nonempty",
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 20 } },
      .n_steps = 2,
      .want = { "v=1 O#0/0 first ts=9" },
      .n_want = 1 },
    { .name = "default-trigger-jump-no-lateness-one-last-pane",
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 20 } },
      .n_steps = 2,
      .want = { "v=1 O#0/0 first last ts=9" },
      .n_want = 1 },
    { .name = "closing-emit-always-late-final-pane-after-on-time-jump",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 20 } },
      .n_steps = 2,
      .want = { "v=1 E#0/-1 first ts=9", "v= O#1/0 ts=9", "v= L#2/1 last ts=9" },
      .n_want = 3 },
    { .name = "early-late-jump-past-expiry-if-nonempty",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v= O#2/0 ts=9" },
      .n_want = 3 },
    { .name = "closing-emit-always-not-after-the-trigger-finished",
      .trigger = &T_OR_FINALLY,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'w', NULL, 0, 10 } },
      .n_steps = 4,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v=3 E#2/-1 last ts=9" },
      .n_want = 3 },
    { .name = "or-finally-closes-the-window",
      .trigger = &T_OR_FINALLY,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'e', "a", 4, 4 } },
      .n_steps = 4,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v=3 E#2/-1 last ts=9" },
      .n_want = 3,
      .dropped = 1 },
    { .name = "after-each",
      .trigger = &T_EACH,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'e', "a", 4, 4 } },
      .n_steps = 4,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 E#1/-1 last ts=9" },
      .n_want = 2,
      .dropped = 1 },
    { .name = "after-all-count-and-processing-time",
      .trigger = &T_ALL,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'c', NULL, 0, 999 },
                 { 'c', NULL, 0, 1 },
                 { 'e', "a", 3, 3 } },
      .n_steps = 5,
      .want = { "v=1,2 E#0/-1 first last ts=9" },
      .n_want = 1,
      .dropped = 1 },
    { .name = "repeat-processing-time",
      .trigger = &T_REPEAT_PT,
      .steps = { { 'e', "a", 1, 1 },
                 { 'c', NULL, 0, 500 },
                 { 'e', "a", 2, 2 },
                 { 'c', NULL, 0, 600 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 6,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "repeat-processing-time-aligned-to-offset-int64-min",
      .trigger = &T_REPEAT_PT_ALIGN_MIN,
      /* The deadline of the first pane is 192; the element at 193 waits for 1192. */
      .steps = { { 'e', "a", 1, 1 },
                 { 'c', NULL, 0, 191 },
                 { 'e', "a", 2, 2 },
                 { 'c', NULL, 0, 1 },
                 { 'c', NULL, 0, 1 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 7,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "accumulating-repeat-count-1",
      .trigger = &T_REPEAT_COUNT1,
      .accumulating = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1 E#0/-1 first ts=9", "v=1,2 E#1/-1 ts=9" },
      .n_want = 2 },
    /* Beam's Python prism_runner_test test_after_count_trigger_streaming: Create([1, 2, 3, 4,
     * 5, 10, 11]) | FlatMap(A t, B t + 5) | FixedWindows(10), AfterCount(3), discarding. All
     * fourteen elements come in one input epoch (one TestStream event here), in whatever
     * bundles; the trigger is asked per element, so each firing pane holds exactly three
     * values, and the trigger finishes. A 4, 5 and B 9 came with the values that made it fire:
     * they are the window's tail, its last pane, on time when the watermark passes the end (the
     * cut pane, held until the epoch ends or a tail joins, is then not last). A [10,20) never
     * reaches three values and goes out at expiry. What the test expects. */
    { .name = "after-count-3-one-event-per-element-panes",
      .trigger = &T_COUNT3,
      .counts_only = true,
      .steps = { { 'b', "A", 1, 1 },
                 { 'b', "B", 6, 6 },
                 { 'b', "A", 2, 2 },
                 { 'b', "B", 7, 7 },
                 { 'b', "A", 3, 3 },
                 { 'b', "B", 8, 8 },
                 { 'b', "A", 4, 4 },
                 { 'b', "B", 9, 9 },
                 { 'b', "A", 5, 5 },
                 { 'b', "B", 10, 10 },
                 { 'b', "A", 10, 10 },
                 { 'b', "B", 15, 15 },
                 { 'b', "A", 11, 11 },
                 { 'b', "B", 16, 16 },
                 { 'w', NULL, 0, 100 } },
      .n_steps = 15,
      .want = { "k=A n=3 E#0/-1 first ts=9", "k=A n=2 O#1/0 last ts=9", "k=B n=3 E#0/-1 first ts=9",
                "k=B n=1 O#1/0 last ts=9", "k=A n=2 O#0/0 first last ts=19",
                "k=B n=3 E#0/-1 first last ts=19" },
      .n_want = 6 },
    /* A later delivery finds the window closed: its values are dropped and counted (Python's
     * test_after_count_streaming, "4 - 6 discarded because trigger finished"). The tail of the
     * closing delivery (A 4) still goes out. */
    { .name = "after-count-3-later-event-dropped",
      .trigger = &T_COUNT3,
      .counts_only = true,
      .steps = { { 'b', "A", 1, 1 },
                 { 'b', "A", 2, 2 },
                 { 'b', "A", 3, 3 },
                 { 'b', "A", 4, 4 },
                 { 'e', "A", 5, 5 },
                 { 'e', "A", 6, 6 },
                 { 'w', NULL, 0, 100 } },
      .n_steps = 7,
      .want = { "k=A n=3 E#0/-1 first ts=9", "k=A n=1 O#1/0 last ts=9" },
      .n_want = 2,
      .dropped = 2 },
    /* Accumulating: the tail's pane repeats the values so far. */
    { .name = "after-count-3-accumulating-tail",
      .trigger = &T_COUNT3,
      .accumulating = true,
      .counts_only = true,
      .steps = { { 'b', "a", 1, 1 },
                 { 'b', "a", 2, 2 },
                 { 'b', "a", 3, 3 },
                 { 'b', "a", 4, 4 },
                 { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 100 } },
      .n_steps = 6,
      .want = { "k=a n=3 E#0/-1 first ts=9", "k=a n=4 O#1/0 last ts=9" },
      .n_want = 2,
      .dropped = 1 },
    /* Accumulating, no tail: the closing pane is the last, and nothing of the window stays. */
    { .name = "after-count-3-accumulating-no-tail",
      .trigger = &T_COUNT3,
      .accumulating = true,
      .counts_only = true,
      .steps = { { 'b', "a", 1, 1 },
                 { 'b', "a", 2, 2 },
                 { 'b', "a", 3, 3 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 100 } },
      .n_steps = 5,
      .want = { "k=a n=3 E#0/-1 first last ts=9" },
      .n_want = 1,
      .dropped = 1 },
    /* Beam's Go SDK (no_closing_tail): its TestTriggerElementCount, AfterCount(2) over 1, 2, 3
     * of one TestStream event, then 4, 5 of a later one, then 10 in a later window: the
     * finishing element closes the window at once, so 3 is dropped with 4 and 5, and the
     * suite's two panes go out ([1,2] and [10] at expiry). The same steps with the tail give
     * three panes (3 as the window's last). */
    { .name = "after-count-2-no-closing-tail",
      .trigger = &T_COUNT2,
      .no_closing_tail = true,
      .counts_only = true,
      .steps = { { 'b', "k", 1, 1 },
                 { 'b', "k", 2, 2 },
                 { 'b', "k", 3, 3 },
                 { 'w', NULL, 0, 2 },
                 { 'b', "k", 4, 6 },
                 { 'b', "k", 5, 6 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "k", 10, 52 },
                 { 'w', NULL, 0, 100 } },
      .n_steps = 9,
      .want = { "k=k n=2 E#0/-1 first last ts=9", "k=k n=1 O#0/0 first last ts=59" },
      .n_want = 2,
      .dropped = 3 },
    { .name = "after-count-2-closing-tail",
      .trigger = &T_COUNT2,
      .counts_only = true,
      .steps = { { 'b', "k", 1, 1 },
                 { 'b', "k", 2, 2 },
                 { 'b', "k", 3, 3 },
                 { 'w', NULL, 0, 2 },
                 { 'b', "k", 4, 6 },
                 { 'b', "k", 5, 6 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "k", 10, 52 },
                 { 'w', NULL, 0, 100 } },
      .n_steps = 9,
      .want = { "k=k n=2 E#0/-1 first ts=9", "k=k n=1 O#1/0 last ts=9",
                "k=k n=1 O#0/0 first last ts=59" },
      .n_want = 3,
      .dropped = 2 },
    /* Several panes of one group cut in one pass go out in firing order. */
    { .name = "repeat-count-2-one-event-several-panes",
      .trigger = &T_REPEAT_COUNT2,
      .counts_only = true,
      .steps = { { 'b', "a", 1, 1 },
                 { 'b', "a", 2, 2 },
                 { 'b', "a", 3, 3 },
                 { 'b', "a", 4, 4 },
                 { 'b', "a", 5, 5 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 6,
      .want = { "k=a n=2 E#0/-1 first ts=9", "k=a n=2 E#1/-1 ts=9", "k=a n=1 O#2/0 last ts=9" },
      .n_want = 3 },
    { .name = "accumulating-repeat-count-2-one-event-several-panes",
      .trigger = &T_REPEAT_COUNT2,
      .accumulating = true,
      .counts_only = true,
      .steps = { { 'b', "a", 1, 1 },
                 { 'b', "a", 2, 2 },
                 { 'b', "a", 3, 3 },
                 { 'b', "a", 4, 4 },
                 { 'b', "a", 5, 5 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 6,
      .want = { "k=a n=2 E#0/-1 first ts=9", "k=a n=4 E#1/-1 ts=9", "k=a n=5 O#2/0 last ts=9" },
      .n_want = 3 },
    /* Java's continuation trigger downstream of AfterProcessingTime: a pane fires once the
     * clock is past its first element's arrival, never at the arrival itself; values that
     * arrive with no clock tick before the window's end go out in the on-time pane. */
    { .name = "repeat-synchronized-processing-time",
      .trigger = &T_REPEAT_SYNC_PT,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'c', NULL, 0, 1 },
                 { 'e', "a", 3, 3 },
                 { 'c', NULL, 0, 5 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 7,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 E#1/-1 ts=9", "v=4 O#2/0 last ts=9" },
      .n_want = 3 },
    { .name = "never-fires-at-expiry",
      .trigger = &T_NEVER,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1,2 O#0/0 first last ts=9" },
      .n_want = 1 },
};
const size_t N_TRIGGER_CASES = sizeof(TRIGGER_CASES) / sizeof(TRIGGER_CASES[0]);

static const sd_trigger *const SUBS_COUNT3[] = { &T_COUNT3 };
static const sd_trigger T_REPEAT_COUNT3 = { .kind = SD_TRIGGER_REPEAT,
                                            .subs = SUBS_COUNT3,
                                            .n_subs = 1 };
static const sd_trigger T_EOW_EARLY2_LATE3 = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW,
                                               .early = &T_REPEAT_COUNT2,
                                               .late = &T_REPEAT_COUNT3 };
static const sd_trigger T_EOW_EARLY_NEVER_LATE = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW,
                                                   .early = &T_COUNT1,
                                                   .late = &T_NEVER };

/* Session windows (gap 10) with triggers: the merging sessions' trigger states merge. */
const trigger_case SESSION_TRIGGER_CASES[] = {
    { .name = "counts add up when sessions merge",
      .sessions = true,
      .trigger = &T_REPEAT_COUNT3,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 16, 16 },
                 { 'e', "a", 8, 8 },
                 { 'e', "a", 9, 9 },
                 { 'w', NULL, 0, 40 } },
      .n_steps = 5,
      .want = { "w=[1,26) v=1,16,8 E#0/-1 first ts=25", "w=[1,26) v=9 O#1/0 last ts=25" },
      .n_want = 2 },
    /* The bridged session [1,24) is a new window: early again, and its panes are numbered
     * from 0 (Beam's drivers clear the pane state of windows merged away). The watermark
     * then jumps over its end and its clean-up time: the on-time pane is not the last (the
     * late trigger never finished), and no closing pane follows (nothing new). */
    { .name = "a late session joined by an early one is a new window, early again",
      .sessions = true,
      .trigger = &T_EOW_EARLY_NEVER_LATE,
      .lateness = 100,
      .steps = { { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 12 },
                 { 'e', "a", 14, 14 },
                 { 'e', "a", 10, 10 },
                 { 'w', NULL, 0, 200 } },
      .n_steps = 5,
      .want = { "w=[1,11) v=1 E#0/-1 first ts=10", "w=[1,11) v= O#1/0 ts=10",
                "w=[14,24) v=14 E#0/-1 first ts=23", "w=[1,24) v=10 E#0/-1 first ts=23",
                "w=[1,24) v= O#1/0 ts=23" },
      .n_want = 5 },
    /* Beam's trigger transcript early_late_sessions (trigger_transcripts.yaml): a session that
     * grows is a new window (its early pane is number 0 again); late data falling inside an
     * existing session keeps that session's numbering (L#1/1). */
    { .name = "panes renumber when a session grows, not when data falls inside it",
      .sessions = true,
      .trigger = &T_EOW_EARLY2_LATE3,
      .accumulating = true,
      .lateness = 100,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 4, 4 },
                 { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 100 },
                 { 'e', "a", 1, 1 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 300 } },
      .n_steps = 10,
      .want = { "w=[1,12) v=1,2 E#0/-1 first ts=11", "w=[1,14) v=1,2,3,4 E#0/-1 first ts=13",
                "w=[1,15) v=1,2,3,4,5 O#0/0 first ts=14",
                "w=[1,15) v=1,2,3,4,5,1,3,4 L#1/1 ts=14" },
      .n_want = 4 },
    { .name = "a finished session stays closed when others join it",
      .sessions = true,
      .trigger = &T_COUNT2,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 20, 20 },
                 { 'e', "a", 12, 12 },
                 { 'w', NULL, 0, 50 } },
      .n_steps = 5,
      .want = { "w=[1,13) v=1,3 E#0/-1 first last ts=12" },
      .n_want = 1,
      .dropped = 2 },
    { .name = "the earliest processing-time deadline wins",
      .sessions = true,
      .trigger = &T_REPEAT_PT,
      .steps = { { 'e', "a", 16, 16 },
                 { 'c', NULL, 0, 500 },
                 { 'e', "a", 1, 1 },
                 { 'c', NULL, 0, 100 },
                 { 'e', "a", 8, 8 },
                 { 'c', NULL, 0, 400 },
                 { 'w', NULL, 0, 40 } },
      .n_steps = 7,
      .want = { "w=[1,26) v=1,16,8 E#0/-1 first ts=25" },
      .n_want = 1 },
    { .name = "keys merge independently",
      .sessions = true,
      .trigger = &T_REPEAT_COUNT3,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "b", 2, 16 },
                 { 'e', "a", 16, 16 },
                 { 'e', "b", 3, 1 },
                 { 'e', "a", 8, 8 },
                 { 'w', NULL, 0, 40 } },
      .n_steps = 6,
      .want = { "w=[1,26) v=1,16,8 E#0/-1 first ts=25", "w=[1,11) v=3 O#0/0 first last ts=10",
                "w=[16,26) v=2 O#0/0 first last ts=25" },
      .n_want = 3 },
};
const size_t N_SESSION_TRIGGER_CASES =
    sizeof(SESSION_TRIGGER_CASES) / sizeof(SESSION_TRIGGER_CASES[0]);

/* The case driver's view of a trigger_case table (TRIGGER_CASES, SESSION_TRIGGER_CASES,
 * LATE_CASES): the processing-time triggers read the injected wall clock. */
static const sd_em_config TRIGGER_CFG = { .wall_now = fake_wall };

static const char *trigger_case_name(const void *r)
{
    return ((const trigger_case *)r)->name;
}

static sd_status build_trigger_case(harness *h, const void *r, window_case *wc)
{
    return build_trigger_pipeline(h, r, wc, false);
}

/* The panes are the row's, the GBK (stage 2) counted the row's late drops, and it holds no
 * groups once the run is over. */
static void check_trigger_case(harness *h, const void *r)
{
    const trigger_case *tc = r;
    h_expect(h, tc->want, tc->n_want);
    sd_em_stage_stats st;
    sd_em_stage_info(h->em, 2, &st);
    assert_int_equal(st.dropped_late, tc->dropped);
    assert_int_equal(sd__em_gbk_groups(h->em, "gbk"), 0);
}

void test_session_triggers(void **state)
{
    const h_case_table t = { .rows = SESSION_TRIGGER_CASES,
                             .n_rows = N_SESSION_TRIGGER_CASES,
                             .row_size = sizeof(trigger_case),
                             .cfg = &TRIGGER_CFG,
                             .name = trigger_case_name,
                             .build = build_trigger_case,
                             .check = check_trigger_case };
    (void)state;
    h_run_cases(&t);
}

/* TestStream -> assign (fixed 10) -> GBK with tc's trigger -> collect panes; with dead_letter,
 * the GBK's late data goes to "late" -> record_late. */
static sd_status fn_record_late(harness *h, sd_bundle *b, const h_elem *e, void *ctx);

sd_status
build_trigger_pipeline(harness *h, const trigger_case *tc, window_case *wc, bool dead_letter)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    memset(wc, 0, sizeof(*wc));
    wc->ws = (sd_windowing){ .kind = tc->sessions ? SD_WINDOWFN_SESSIONS : SD_WINDOWFN_FIXED,
                             .size_ms = 10,
                             .gap_ms = 10,
                             .allowed_lateness_ms = tc->lateness,
                             .accumulating = tc->accumulating,
                             .on_time_if_nonempty = tc->on_time_if_nonempty,
                             .closing_emit_always = tc->closing_emit_always,
                             .no_closing_tail = tc->no_closing_tail,
                             .trigger = tc->trigger };
    ts_case steps = { .n_steps = tc->n_steps };
    memcpy(steps.steps, tc->steps, sizeof(tc->steps));
    sd_status rc = h_pcoll(h, "tsout", wv_kv_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, wc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0,
                     tc->counts_only ? fn_collect_pane_counts
                     : tc->sessions  ? fn_collect_session_panes
                                     : fn_collect_panes,
                     NULL);
    }
    if (rc == SD_OK && dead_letter) {
        rc = h_pcoll(h, "late", wv_kv_i, &wc->ws);
        if (rc == SD_OK) {
            rc = sd_em_set_late_output(h->em, "gbk", "late", &h->err);
        }
        if (rc == SD_OK) {
            rc = h_stage(h, "dead", SD_STAGE_SDK, "late", NULL, 0, fn_record_late, NULL);
        }
    }
    if (rc == SD_OK) {
        rc = add_ts_steps(h, &steps);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

void test_triggers(void **state)
{
    const h_case_table t = { .rows = TRIGGER_CASES,
                             .n_rows = N_TRIGGER_CASES,
                             .row_size = sizeof(trigger_case),
                             .cfg = &TRIGGER_CFG,
                             .name = trigger_case_name,
                             .build = build_trigger_case,
                             .check = check_trigger_case };
    (void)state;
    h_run_cases(&t);
}

/* From the impulse: Beam's A t and B t + 5 for t in 1, 2, 3, 4, 5, 10, 11, at those times. */
static sd_status fn_gen_after_count(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    static const uint64_t ts[] = { 1, 2, 3, 4, 5, 10, 11 };
    sd_window g = sd_window_global();
    sd_pane p = SD_PANE_NO_FIRING;
    sd_buf kv;
    sd_status rc = SD_OK;
    (void)e;
    (void)ctx;
    sd_buf_init(&kv, 0);
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]) && rc == SD_OK; i++) {
        for (int k = 0; k < 2 && rc == SD_OK; k++) {
            uint64_t t = ts[i] + (k == 0 ? 0 : 5);
            sd_buf_reset(&kv);
            rc = kv_bytes(&kv, k == 0 ? "A" : "B", t);
            if (rc == SD_OK) {
                rc = h_emit(h, b, "raw", (sd_time)t, &g, 1, &p, sd_buf_bytes(&kv));
            }
        }
    }
    sd_buf_deinit(&kv);
    return rc;
}

static const char *bounded_case_name(const void *r)
{
    return *(const char *const *)r;
}

/* Impulse -> gen -> assign (fixed 10) -> GBK (AfterCount(3), discarding) -> collect, bounded. */
static sd_status build_bounded_after_count(harness *h, const void *r, window_case *wc)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    (void)r;
    memset(wc, 0, sizeof(*wc));
    wc->ws = (sd_windowing){ .kind = SD_WINDOWFN_FIXED, .size_ms = 10, .trigger = &T_COUNT3 };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    rc = rc == SD_OK ? h_pcoll(h, "raw", wv_kv_g, NULL) : rc;
    rc = rc == SD_OK ? h_pcoll(h, "windowed", wv_kv_i, &wc->ws) : rc;
    rc = rc == SD_OK ? h_pcoll(h, "grouped", wv_grouped_i, &wc->ws) : rc;
    rc = rc == SD_OK ? h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL) : rc;
    rc =
        rc == SD_OK ? h_stage(h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_after_count, NULL) : rc;
    rc = rc == SD_OK ? h_stage(h, "assign", SD_STAGE_SDK, "raw", windowed, 1, fn_assign, wc) : rc;
    rc = rc == SD_OK ? h_stage(h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL) : rc;
    rc = rc == SD_OK
             ? h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_pane_counts, NULL)
             : rc;
    return rc == SD_OK ? sd_em_start(h->em, &h->err) : rc;
}

static void check_bounded_after_count(harness *h, const void *r)
{
    static const char *const want[] = { "k=A n=5 O#0/0 first last ts=9",
                                        "k=B n=4 O#0/0 first last ts=9",
                                        "k=A n=2 O#0/0 first last ts=19",
                                        "k=B n=3 O#0/0 first last ts=19" };
    (void)r;
    h_expect(h, want, 4);
    assert_int_equal(sd__em_gbk_groups(h->em, "gbk"), 0);
}

/*
 * Beam's Python test_after_count_trigger_batch (and trigger_test's batch AfterCount): in a
 * bounded pipeline the GroupByKey asks its trigger once its input is complete, so every window
 * fires one pane with all its values —, B-4, B-3 — whatever the bundles upstream were
 * (one element a bundle, seeds, everything spilled), not a pane of the first bundles' values
 * and the rest dropped once AfterCount(3) finished.
 */
void test_bounded_after_count(void **state)
{
    static const char *const rows[] = { "bounded AfterCount(3), discarding" };
    static const sd_em_config cfg = { .bounded = true };
    const h_case_table t = { .rows = rows,
                             .n_rows = 1,
                             .row_size = sizeof(rows[0]),
                             .cfg = &cfg,
                             .name = bounded_case_name,
                             .build = build_bounded_after_count,
                             .check = check_bounded_after_count };
    (void)state;
    h_run_cases(&t);
}

/*
 * Without a TestStream, a processing-time trigger fires by a synthetic clock jump: a
 * self-checkpointing source (resuming every second, holding the watermark meanwhile) feeds a
 * global-window GBK with early firings 300 ms after the first value of each pane. The same
 * in a bounded (batch) job: its GroupByKey asks its triggers once its input is complete or
 * once the clock passed one of their deadlines (it ignored the deadline before, so the clock
 * could not jump past it to the parked residual and the job was reported stuck).
 */
static void processing_time_trigger_synthetic(bool bounded)
{
    static const sd_trigger early = { .kind = SD_TRIGGER_AFTER_PROCESSING_TIME, .delay_ms = 300 };
    static const sd_trigger eow = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW, .early = &early };
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" },
                      *grouped[] = { "grouped" };
    static const char *const want[] = {
        "v=0 at=0",
        "v=1 at=1000",
        "v=2 at=2000",
        "v=3 at=3000",
        "v=0 E#0/-1 first ts=9223371950454775",
        "v=1 E#1/-1 ts=9223371950454775",
        "v=2 E#2/-1 ts=9223371950454775",
        "v=3 O#3/0 last ts=9223371950454775",
    };
    sd_windowing ws = { .trigger = &eow };
    harness h;
    sd_em_config cfg = { .wall_now = fake_wall, .bounded = bounded };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    h_pcoll(&h, "imp", wv_bytes_g, NULL);
    h_pcoll(&h, "seeds", wv_varint_g, NULL);
    h_pcoll(&h, "outs", wv_kv_g, &ws);
    h_pcoll(&h, "grouped", wv_grouped_g, &ws);
    h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_seed, NULL);
    h_stage(&h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_resume, NULL);
    h_stage(&h, "gbk", SD_STAGE_GBK, "outs", grouped, 1, NULL, NULL);
    h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_panes, NULL);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 8);
    assert_true(sd_em_clock_now(h.em) == fake_wall_now + 3000);
    h_deinit(&h);
}

void test_processing_time_trigger_synthetic(void **state)
{
    (void)state;
    processing_time_trigger_synthetic(false);
    processing_time_trigger_synthetic(true);
}

/* Stateful DoFn over interval windows: record how many values the bag held, then append. */

/* ========================================================================================== */
/* Late data: dead-letter routing                                                             */
/* ========================================================================================== */

static sd_status fn_record_late(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t v;
    (void)b;
    (void)ctx;
    get_kv(e->elem, &key, &v);
    h_record(h, "late k=%.*s v=%llu ts=%lld w=[%lld,%lld) pane=%02x", (int)key.len,
             (const char *)key.ptr, (unsigned long long)v, (long long)e->ts,
             (long long)e->win.start, (long long)e->win.end, pane_byte(&e->pane));
    return SD_OK;
}

static const trigger_case LATE_CASES[] = {
    { .name = "behind the watermark",
      .steps = { { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'e', "b", 4, 4 },
                 { 'e', "a", 12, 12 } },
      .n_steps = 5,
      .want = { "v=1 O#0/0 first last ts=9", "v=12 O#0/0 first last ts=19",
                "late k=a v=3 ts=3 w=[0,10) pane=0f", "late k=b v=4 ts=4 w=[0,10) pane=0f" },
      .n_want = 4,
      .dropped = 2 },
    { .name = "behind the allowed lateness",
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 12 },
                 { 'e', "a", 2, 2 },
                 { 'w', NULL, 0, 15 },
                 { 'e', "a", 3, 3 } },
      .n_steps = 5,
      .want = { "v=1 O#0/0 first ts=9", "v=2 L#1/1 ts=9", "late k=a v=3 ts=3 w=[0,10) pane=0f" },
      .n_want = 3,
      .dropped = 1 },
    { .name = "after the trigger finished",
      .trigger = &T_OR_FINALLY,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'e', "a", 4, 4 } },
      .n_steps = 4,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v=3 E#2/-1 last ts=9",
                "late k=a v=4 ts=4 w=[0,10) pane=0f" },
      .n_want = 4,
      .dropped = 1 },
};

static sd_status build_late_case(harness *h, const void *r, window_case *wc)
{
    return build_trigger_pipeline(h, r, wc, true);
}

static void check_late_case(harness *h, const void *r)
{
    const trigger_case *tc = r;
    h_expect(h, tc->want, tc->n_want);
    sd_em_stage_stats st;
    sd_em_stage_info(h->em, 2, &st);
    assert_string_equal(st.id, "gbk");
    assert_int_equal(st.dropped_late, tc->dropped); /* routed, still counted */
}

void test_late_data_dead_letter(void **state)
{
    const h_case_table t = { .rows = LATE_CASES,
                             .n_rows = sizeof(LATE_CASES) / sizeof(LATE_CASES[0]),
                             .row_size = sizeof(trigger_case),
                             .cfg = &TRIGGER_CFG,
                             .name = trigger_case_name,
                             .build = build_late_case,
                             .check = check_late_case };
    (void)state;
    h_run_cases(&t);
}

void test_late_output_errors(void **state)
{
    static const struct {
        const char *name;
        const char *stage;
        const char *pcoll;
        sd_status want;
    } rows[] = {
        { "unknown stage", "nope", "late", SD_ENOTFOUND },
        { "unknown pcollection", "gbk", "nope", SD_ENOTFOUND },
        { "not a GBK", "p", "late", SD_EINVAL },
        { "pcollection with a producer", "gbk", "g", SD_EEXIST },
        { "other element coder", "gbk", "bytes", SD_EINVAL },
        { "other window coder", "gbk", "late_g", SD_EINVAL },
        { "ok", "gbk", "late", SD_OK },
    };

    static const char *imp[] = { "imp" }, *kv[] = { "kv" }, *g[] = { "g" };
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_em *em;
        sd_err err = { 0 };
        assert_int_equal(sd_em_create(NULL, &em), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "kv", wv_kv_i, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "g", wv_grouped_i, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "late", wv_kv_i, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "late_g", wv_kv_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "bytes", wv_bytes_g, NULL, &err), SD_OK);
        sd_stage_spec s1 = { .id = "i", .kind = SD_STAGE_IMPULSE, .outputs = imp, .n_outputs = 1 };
        sd_stage_spec s2 = { .id = "p",
                             .kind = SD_STAGE_SDK,
                             .inputs = imp,
                             .n_inputs = 1,
                             .outputs = kv,
                             .n_outputs = 1 };
        sd_stage_spec s3 = { .id = "gbk",
                             .kind = SD_STAGE_GBK,
                             .inputs = kv,
                             .n_inputs = 1,
                             .outputs = g,
                             .n_outputs = 1 };
        assert_int_equal(sd_em_add_stage(em, &s1, &err), SD_OK);
        assert_int_equal(sd_em_add_stage(em, &s2, &err), SD_OK);
        assert_int_equal(sd_em_add_stage(em, &s3, &err), SD_OK);
        sd_status rc = sd_em_set_late_output(em, rows[i].stage, rows[i].pcoll, &err);
        if (rc != rows[i].want) {
            fail_msg("%s: got %s (%s)", rows[i].name, sd_status_name(rc), sd_err_msg(&err));
        }
        if (rc == SD_OK) {
            /* Only once per GBK, and never after start. */
            assert_int_equal(sd_em_set_late_output(em, "gbk", "late", &err), SD_EINVAL);
            assert_int_equal(sd_em_start(em, &err), SD_OK);
            assert_int_equal(sd_em_set_late_output(em, "gbk", "late_g", &err), SD_ESTATE);
        }
        sd_em_destroy(em);
    }
}
