/*
 * Engine tests, TestStream concern: scripted elements, watermarks and clock advances.
 *
 * add_ts_steps turns a list of ts_step rows into TestStream events (shared with the trigger and
 * state tests), played by the TestStream driver (teststream/ts_drive.c) through the engine's
 * source hook. The TS_CASES table drives TestStream -> assign -> GBK -> collect through the
 * case driver; time-sorted input (a stateful stage that sees its input in timestamp order)
 * runs its own table; the TestStream clock drives processing time; and two TestStreams in one
 * pipeline keep one clock.
 */
#include "engine_harness.h"

/* ========================================================================================== */
/* TestStream                                                                                 */
/* ========================================================================================== */

/* The script of stage, handed to the driver (created on first use) the first time. */
static sd_status h_ts_stream(harness *h, const char *stage, const char *pc, sd_ts_stream **out)
{
    sd_status rc = SD_OK;
    if (h->tsd == NULL) {
        rc = sd_ts_driver_create(h->em, &h->tsd, &h->err);
    }
    if (rc != SD_OK || (*out = sd_ts_driver_stream(h->tsd, stage)) != NULL) {
        return rc;
    }
    sd_ts_stream *s = NULL;
    rc = sd_ts_stream_create(stage, &pc, 1, &s, &h->err);
    if (rc == SD_OK) {
        rc = sd_ts_driver_add(h->tsd, stage, s, &pc, &h->err);
    }
    *out = rc == SD_OK ? sd_ts_driver_stream(h->tsd, stage) : NULL;
    return rc;
}

sd_status h_ts_elements(harness *h,
                        const char *stage,
                        const char *pc,
                        const sd_bytes *elements,
                        const sd_time *timestamps,
                        size_t n)
{
    sd_ts_stream *s;
    sd_status rc = h_ts_stream(h, stage, pc, &s);
    return rc == SD_OK ? sd_ts_stream_add_elements(s, 0, elements, timestamps, n, &h->err) : rc;
}

sd_status h_ts_watermark(harness *h, const char *stage, const char *pc, sd_time wm)
{
    sd_ts_stream *s;
    sd_status rc = h_ts_stream(h, stage, pc, &s);
    return rc == SD_OK ? sd_ts_stream_advance_watermark(s, 0, wm, &h->err) : rc;
}

sd_status h_ts_clock(harness *h, const char *stage, const char *pc, int64_t advance_ms)
{
    sd_ts_stream *s;
    sd_status rc = h_ts_stream(h, stage, pc, &s);
    return rc == SD_OK ? sd_ts_stream_advance_clock(s, advance_ms, &h->err) : rc;
}

sd_status add_ts_steps(harness *h, const ts_case *tc)
{
    sd_status rc = SD_OK;
    for (size_t i = 0; rc == SD_OK && i < tc->n_steps; i++) {
        const ts_step *st = &tc->steps[i];
        if (st->kind == 'b') {
            /* One TestStream event with several elements: they reach the GBK in one pass. */
            sd_buf kvs[20];
            sd_bytes els[20];
            sd_time tss[20];
            size_t n = 0;
            for (; i < tc->n_steps && tc->steps[i].kind == 'b' && n < 20; i++, n++) {
                sd_buf_init(&kvs[n], 0);
                if (rc == SD_OK) {
                    rc = kv_bytes(&kvs[n], tc->steps[i].key, tc->steps[i].v);
                }
                els[n] = sd_buf_bytes(&kvs[n]);
                tss[n] = tc->steps[i].t;
            }
            i--;
            if (rc == SD_OK) {
                rc = h_ts_elements(h, "ts", "tsout", els, tss, n);
            }
            for (size_t k = 0; k < n; k++) {
                sd_buf_deinit(&kvs[k]);
            }
        } else if (st->kind == 'e') {
            sd_buf kv;
            sd_buf_init(&kv, 0);
            rc = kv_bytes(&kv, st->key, st->v);
            sd_bytes el = sd_buf_bytes(&kv);
            if (rc == SD_OK) {
                rc = h_ts_elements(h, "ts", "tsout", &el, &st->t, 1);
            }
            sd_buf_deinit(&kv);
        } else if (st->kind == 'w') {
            rc = h_ts_watermark(h, "ts", "tsout", st->t);
        } else {
            rc = h_ts_clock(h, "ts", "tsout", st->t);
        }
    }
    if (!h->oom) {
        assert_int_equal(rc, SD_OK);
    }
    return rc;
}

/* ========================================================================================== */
/* Time-sorted input (RequiresTimeSortedInput)                                                */
/* ========================================================================================== */

typedef struct sorted_log {
    char by_key[2][128]; /* values of keys "a" and "b", in the order the stage got them */
    size_t n_grouped;    /* values the downstream GroupByKey grouped */
} sorted_log;

static sd_status fn_log_sorted(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sorted_log *log = ctx;
    sd_bytes key;
    uint64_t v;
    get_kv(e->elem, &key, &v);
    char *line = log->by_key[key.len == 1 && key.ptr[0] == 'b' ? 1 : 0];
    size_t used = strlen(line);
    snprintf(line + used, 128 - used, "%s%llu", used > 0 ? "," : "", (unsigned long long)v);
    return h_emit_global(h, b, "so", e->ts, e->elem);
}

static size_t csv_count(const char *s)
{
    size_t n = s[0] != '\0';
    for (; *s != '\0'; s++) {
        n += *s == ',';
    }
    return n;
}

static sd_status fn_count_grouped(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sorted_log *log = ctx;
    sd_bytes key;
    uint64_t vals[64];
    (void)h;
    (void)b;
    log->n_grouped += get_grouped(e->elem, &key, vals, 64);
    return SD_OK;
}

typedef struct sorted_case {
    const char *name;
    int64_t lateness;
    ts_step steps[16];
    size_t n_steps;
    const char *want_a, *want_b;
    uint64_t dropped;
} sorted_case;

static const sorted_case SORTED_CASES[] = {
    /* Out-of-order values wait until the watermark passes them, then go in timestamp order;
     * those already behind the watermark on arrival are dropped (1, 2 and 6). */
    { .name = "sorted-no-lateness",
      .steps = { { 'e', "a", 5, 5 },
                 { 'e', "a", 3, 3 },
                 { 'e', "b", 4, 4 },
                 { 'w', NULL, 0, 3 },
                 { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 4, 4 },
                 { 'e', "b", 3, 3 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 6, 6 },
                 { 'e', "b", 12, 12 },
                 { 'e', "b", 11, 11 } },
      .n_steps = 12,
      .want_a = "3,4,5",
      .want_b = "3,4,11,12",
      .dropped = 3 },
    /* Allowed lateness 5: a value is kept while ts + 5 is not behind the watermark, and goes
     * out once the watermark passes ts + 5 (0 is dropped: 0 + 5 < 7). */
    { .name = "sorted-allowed-lateness",
      .lateness = 5,
      .steps = { { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 3 },
                 { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 7 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 0, 0 },
                 { 'e', "b", 4, 4 },
                 { 'e', "b", 3, 3 },
                 { 'w', NULL, 0, 20 } },
      .n_steps = 9,
      .want_a = "1,2,5",
      .want_b = "3,4",
      .dropped = 1 },
};

/*
 * TestStream -> time-sorted stateful stage (records its input, re-emits it) -> GroupByKey in
 * the global window -> count. The stage gets its elements behind its input watermark, so they
 * must hold its output watermark until processed: else the GroupByKey's window would close
 * first and drop them all.
 */
void test_time_sorted_input(void **state)
{
    static const char *tsout[] = { "tsout" }, *so[] = { "so" }, *grouped[] = { "grouped" };
    (void)state;
    for (size_t c = 0; c < sizeof(SORTED_CASES) / sizeof(SORTED_CASES[0]); c++) {
        const sorted_case *tc = &SORTED_CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            sorted_log log;
            memset(&log, 0, sizeof(log));
            sd_windowing ws = { .allowed_lateness_ms = tc->lateness };
            ts_case steps = { .n_steps = tc->n_steps };
            memcpy(steps.steps, tc->steps, sizeof(tc->steps));
            assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
            assert_int_equal(h_pcoll(&h, "tsout", wv_kv_g, &ws), SD_OK);
            assert_int_equal(h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL),
                             SD_OK);
            const char *ins[1] = { "tsout" };
            assert_int_equal(h_pcoll(&h, "so", wv_kv_g, &ws), SD_OK);
            assert_int_equal(h_pcoll(&h, "grouped", wv_grouped_g, &ws), SD_OK);
            sd_stage_spec sorted = { .id = "sorted",
                                     .kind = SD_STAGE_SDK,
                                     .inputs = ins,
                                     .n_inputs = 1,
                                     .outputs = so,
                                     .n_outputs = 1,
                                     .stateful = true,
                                     .time_sorted_input = true };
            assert_int_equal(h_add(&h, &sorted, fn_log_sorted, NULL, &log), SD_OK);
            assert_int_equal(h_stage(&h, "gbk", SD_STAGE_GBK, "so", grouped, 1, NULL, NULL), SD_OK);
            assert_int_equal(
                h_stage(&h, "count", SD_STAGE_SDK, "grouped", NULL, 0, fn_count_grouped, &log),
                SD_OK);
            assert_int_equal(add_ts_steps(&h, &steps), SD_OK);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            if (strcmp(log.by_key[0], tc->want_a) != 0 || strcmp(log.by_key[1], tc->want_b) != 0) {
                fail_msg("%s, shape %s: a got \"%s\" want \"%s\"; b got \"%s\" want \"%s\"",
                         tc->name, SHAPES[s].name, log.by_key[0], tc->want_a, log.by_key[1],
                         tc->want_b);
            }
            sd_em_stage_stats st;
            sd_em_stage_info(h.em, 1, &st);
            assert_string_equal(st.id, "sorted");
            assert_int_equal(st.dropped_late, tc->dropped);
            sd_em_stage_info(h.em, 2, &st);
            assert_string_equal(st.id, "gbk");
            assert_int_equal(st.dropped_late, 0);
            assert_int_equal(log.n_grouped, csv_count(tc->want_a) + csv_count(tc->want_b));
            h_deinit(&h);
        }
    }
    /* Only a stateful SDK stage can sort its input. */
    harness h;
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    assert_int_equal(h_pcoll(&h, "tsout", wv_kv_g, NULL), SD_OK);
    const char *ins[1] = { "tsout" };
    sd_stage_spec bad = {
        .id = "bad", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .time_sorted_input = true
    };
    assert_int_equal(sd_em_add_stage(h.em, &bad, &h.err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&h.err), "time-sorted input needs a stateful SDK stage"));
    h_deinit(&h);
}

static const ts_case TS_CASES[] = {
    { .name = "on-time-and-late-dropped",
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 12, 12 },
                 { 'w', NULL, 0, 20 },
                 { 'e', "a", 25, 25 } },
      .n_steps = 7,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=1,5", "k=a w=[10,20) ts=19 pane=07 v=12",
                "k=a w=[20,30) ts=29 pane=07 v=25" },
      .n_want = 3,
      .dropped = 1 },
    { .name = "allowed-lateness-late-pane",
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 14 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 15 },
                 { 'e', "a", 6, 6 } },
      .n_steps = 8,
      /* on time (first, not last), late pane 1 for 3, late pane 2 for 4 (at 14 the window
       * is still inside its lateness), and 6 arrives after it expired (dropped). */
      .want = { "k=a w=[0,10) ts=9 pane=05 v=1,5", "k=a w=[0,10) ts=9 pane=18 v=3",
                "k=a w=[0,10) ts=9 pane=18 v=4" },
      .n_want = 3,
      .dropped = 1 },
    /* Beam's trigger transcripts known_late_data_watermark and
     * known_late_data_no_watermark_hold_possible: with OUTPUT_AT_EARLIEST, values behind the
     * GroupByKey's output watermark on arrival cannot hold it, so they do not set the pane's
     * timestamp; with none that could, the pane goes out at the end of its window. */
    { .name = "earliest-ignores-values-behind-the-watermark",
      .output_time = SD_OUTPUT_TIME_EARLIEST,
      .steps = { { 'w', NULL, 0, 5 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 7, 7 },
                 { 'e', "a", 8, 8 },
                 { 'w', NULL, 0, 11 } },
      .n_steps = 6,
      .want = { "k=a w=[0,10) ts=7 pane=07 v=2,3,7,8" },
      .n_want = 1 },
    { .name = "earliest-with-no-holdable-value-is-end-of-window",
      .output_time = SD_OUTPUT_TIME_EARLIEST,
      .steps = { { 'w', NULL, 0, 8 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 7, 7 },
                 { 'w', NULL, 0, 11 } },
      .n_steps = 5,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=2,3,7" },
      .n_want = 1 },
};

static const char *ts_case_name(const void *r)
{
    return ((const ts_case *)r)->name;
}

/* TestStream -> assign (fixed 10, the row's lateness and output time) -> GBK -> collect. */
static sd_status build_ts_case(harness *h, const void *r, window_case *wc)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    const ts_case *tc = r;
    wc->ws = (sd_windowing){ .kind = SD_WINDOWFN_FIXED,
                             .size_ms = 10,
                             .allowed_lateness_ms = tc->lateness,
                             .output_time = tc->output_time };
    h_pcoll(h, "tsout", wv_kv_g, NULL);
    h_pcoll(h, "windowed", wv_kv_i, &wc->ws);
    h_pcoll(h, "grouped", wv_grouped_i, &wc->ws);
    h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    h_stage(h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, wc);
    h_stage(h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
    h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    add_ts_steps(h, tc);
    return sd_em_start(h->em, &h->err);
}

static void check_ts_case(harness *h, const void *r)
{
    const ts_case *tc = r;
    h_expect(h, tc->want, tc->n_want);
    sd_em_stage_stats st;
    sd_em_stage_info(h->em, 2, &st);
    assert_string_equal(st.id, "gbk");
    assert_int_equal(st.dropped_late, tc->dropped);
}

void test_teststream(void **state)
{
    const h_case_table t = { .rows = TS_CASES,
                             .n_rows = sizeof(TS_CASES) / sizeof(TS_CASES[0]),
                             .row_size = sizeof(ts_case),
                             .name = ts_case_name,
                             .build = build_ts_case,
                             .check = check_ts_case };
    (void)state;
    h_run_cases(&t);
}

void test_teststream_clock_drives_processing_time(void **state)
{
    static const char *tsout[] = { "tsout" };
    harness h;
    (void)state;
    sd_em_config cfg = { .wall_now = fake_wall };
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 2000 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    h_pcoll(&h, "tsout", wv_kv_g, NULL);
    h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    sd_timer_family_spec fam = { "T", "pt", true, c_timer_g };
    const char *ins[] = { "tsout" };
    sd_stage_spec keyed = { .id = "keyed",
                            .kind = SD_STAGE_SDK,
                            .inputs = ins,
                            .n_inputs = 1,
                            .stateful = true,
                            .timer_families = &fam,
                            .n_timer_families = 1 };
    h_add(&h, &keyed, fn_keyed, fn_keyed_timer, &plan);
    /* While TestStream events remain, its events alone move the clock: the 2 s timer fires
     * at +5 s (after the advance), not by a synthetic jump to +2 s. */
    ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                              { 'w', NULL, 0, 100 },
                              { 'c', NULL, 0, 5000 },
                              { 'e', "a", 2, 200 } },
                   .n_steps = 4 };
    add_ts_steps(&h, &tc);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    h_run_ok(&h);
    static const char *const want[] = { "pt k=a sum=1 n=1 at=5000", "pt k=a sum=2 n=1 at=7000" };
    h_expect(&h, want, 2);
    h_deinit(&h);
}

/* ---------------------------------------------------------------- several TestStreams */

typedef struct clock_rec {
    sd_time start;
    char seen[16][32];
    size_t n;
} clock_rec;

/* Records "v@s": the value and the job clock (seconds since the start) when it arrived. */
static sd_status fn_record_clock(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    clock_rec *c = ctx;
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    (void)b;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    assert_true(c->n < 16);
    if (v == 4) {
        /* A's watermark event has moved its own output only: B's is still at the minimum. */
        sd_time wa, wb;
        assert_int_equal(sd_em_pcollection_watermark(h->em, "ta", &wa), SD_OK);
        assert_int_equal(sd_em_pcollection_watermark(h->em, "tb", &wb), SD_OK);
        assert_int_equal(wa, 100);
        assert_int_equal(wb, SD_TIME_MIN);
    }
    snprintf(c->seen[c->n++], sizeof(c->seen[0]), "%llu@%lld", (unsigned long long)v,
             (long long)((sd_em_clock_now(h->em) - c->start) / 1000));
    return SD_OK;
}

static sd_status ts_add(harness *h, const char *stage, const char *pc, uint64_t v, sd_time ts)
{
    uint8_t buf[10];
    sd_buf b = { .data = buf, .cap = sizeof(buf) };
    sd_status rc = sd_buf_put_varint(&b, v);
    sd_bytes e = sd_bytes_make(buf, b.len);
    return rc == SD_OK ? h_ts_elements(h, stage, pc, &e, &ts, 1) : rc;
}

/*
 * Two TestStreams share the job clock: their processing-time events merge in time order (A
 * waits 10 s, B 5 s then 10 s more), each one's watermark events move only its own output, and
 * the job ends once both are done. Beam allows any number of TestStreams (Java's
 * testMultipleStreams); Prism refuses more than one.
 */
void test_two_teststreams(void **state)
{
    static const char *ta[] = { "ta" }, *tb[] = { "tb" }, *both[] = { "ta", "tb" },
                      *all[] = { "all" };
    static const char *const want[] = { "1@0", "2@0", "3@5", "4@10", "5@15" };
    (void)state;
    harness h;
    clock_rec rec = { 0 };
    sd_em_config cfg = { .wall_now = fake_wall };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    h_pcoll(&h, "ta", wv_varint_g, NULL);
    h_pcoll(&h, "tb", wv_varint_g, NULL);
    h_pcoll(&h, "all", wv_varint_g, NULL);
    h_stage(&h, "A", SD_STAGE_TESTSTREAM, NULL, ta, 1, NULL, NULL);
    h_stage(&h, "B", SD_STAGE_TESTSTREAM, NULL, tb, 1, NULL, NULL);
    sd_stage_spec flat = { .id = "flatten",
                           .kind = SD_STAGE_FLATTEN,
                           .inputs = both,
                           .n_inputs = 2,
                           .outputs = all,
                           .n_outputs = 1 };
    h_add(&h, &flat, NULL, NULL, NULL);
    h_stage(&h, "sink", SD_STAGE_SDK, "all", NULL, 0, fn_record_clock, &rec);
    assert_int_equal(ts_add(&h, "A", "ta", 1, 1), SD_OK);
    assert_int_equal(h_ts_clock(&h, "A", "ta", 10000), SD_OK);
    assert_int_equal(h_ts_watermark(&h, "A", "ta", 100), SD_OK);
    assert_int_equal(ts_add(&h, "A", "ta", 4, 200), SD_OK);
    assert_int_equal(ts_add(&h, "B", "tb", 2, 2), SD_OK);
    assert_int_equal(h_ts_clock(&h, "B", "tb", 5000), SD_OK);
    assert_int_equal(ts_add(&h, "B", "tb", 3, 3), SD_OK);
    assert_int_equal(h_ts_clock(&h, "B", "tb", 10000), SD_OK);
    assert_int_equal(ts_add(&h, "B", "tb", 5, 5), SD_OK);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    rec.start = sd_em_clock_now(h.em);
    h_run_ok(&h);
    assert_int_equal(rec.n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(rec.seen[i], want[i]);
    }
    assert_true(sd_em_done(h.em));
    h_deinit(&h);
}
