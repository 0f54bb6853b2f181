/*
 * Engine tests, schedule concern: recording a run's decisions and replaying them.
 *
 * Under every harness shape (caps, bundles in flight completed out of order, one key, one
 * element, seeds) two pipelines — keyed processing-time timers on the synthetic clock (clock
 * jumps) and a TestStream into a triggered GroupByKey (TestStream steps) — are recorded; the
 * recording replays to the same decisions and the same results in the same order. A tampered
 * recording (another element set, a shortened run, a broken file) fails with a message that
 * names the step and what differed, and a replay over other input never completes silently.
 */
#include "engine_harness.h"

typedef struct sched_run {
    char results[H_MAX_RESULTS][H_RESULT_LEN];
    size_t n_results;
    uint64_t steps;
    sd_buf text;
} sched_run;

enum { P_TIMERS = 0, P_TESTSTREAM = 1 };

static window_case timer_rows = {
    .rows = { { "a", 1, 1 }, { "b", 2, 2 }, { "c", 3, 3 }, { "a", 4, 4 }, { "d", 5, 5 } },
    .n_rows = 5
};
static window_case other_rows = {
    .rows = { { "a", 1, 1 }, { "b", 2, 2 }, { "c", 3, 3 }, { "a", 40, 4 }, { "d", 5, 5 } },
    .n_rows = 5
};

/* The trigger case with TestStream clock steps (repeat-processing-time). */
static const trigger_case *pt_trigger_case(void)
{
    for (size_t i = 0; i < N_TRIGGER_CASES; i++) {
        if (strcmp(TRIGGER_CASES[i].name, "repeat-processing-time") == 0) {
            return &TRIGGER_CASES[i];
        }
    }
    fail_msg("no trigger case repeat-processing-time");
    return NULL;
}

static sd_status build(harness *h, int pipeline, window_case *rows)
{
    static timer_plan plan = { .family = "pt", .processing_time = true, .delay = 3600000 };
    static window_case wc; /* the harness's DoFns keep a pointer to it while the run lasts */
    if (pipeline == P_TIMERS) {
        return build_keyed(h, rows, &plan);
    }
    memset(&wc, 0, sizeof(wc));
    return build_trigger_pipeline(h, pt_trigger_case(), &wc, false);
}

static sd_em_sched_header header_of(const h_shape *shape)
{
    sd_em_sched_header hd = { .seed = shape->seed,
                              .shape = shape->bundle_shape,
                              .max_bundle_elements = shape->max_elems,
                              .max_bundle_bytes = shape->max_bytes,
                              .max_inflight = shape->max_inflight };
    return hd;
}

/* Run pipeline under shape with schedule s as the engine's hook. rc: what h_run returned. */
static sd_status run_with(const h_shape *shape,
                          int pipeline,
                          window_case *rows,
                          sd_em_sched *s,
                          sched_run *out,
                          bool tolerate,
                          sd_err *err)
{
    harness h;
    sd_em_config cfg = { .clock = SD_CLOCK_SYNTHETIC,
                         .wall_now = fake_wall,
                         .on_decision = sd_em_sched_decide,
                         .decision_ctx = s };
    assert_int_equal(h_init(&h, shape, &cfg, false), SD_OK);
    assert_int_equal(build(&h, pipeline, rows), SD_OK);
    h.oom = tolerate; /* a tampered replay fails: report it instead of asserting */
    sd_status rc = h_run(&h);
    if (rc == SD_OK) {
        assert_true(sd_em_done(h.em));
    }
    memcpy(out->results, h.results, sizeof(h.results));
    out->n_results = h.n_results;
    out->steps = sd_em_sched_steps(s);
    *err = h.err;
    if (rc == SD_OK) {
        rc = sd_em_sched_finish(s, sd_em_sched_replaying(s) ? NULL : &out->text, err);
    }
    h_deinit(&h);
    return rc;
}

static void record(const h_shape *shape, int pipeline, window_case *rows, sched_run *out)
{
    sd_em_sched *rec = NULL;
    sd_em_sched_header hd = header_of(shape);
    sd_err err = { 0 };
    sd_buf_init(&out->text, 0);
    assert_int_equal(sd_em_sched_record(&hd, &rec), SD_OK);
    sd_status rc = run_with(shape, pipeline, rows, rec, out, false, &err);
    if (rc != SD_OK) {
        fail_msg("shape %s: recording: %s", shape->name, sd_err_msg(&err));
    }
    sd_em_sched_destroy(rec);
    assert_int_equal(sd_buf_append_byte(&out->text, '\0'), SD_OK);
    out->text.len--;
}

/* Replay text under shape over rows: SD_OK, or the error (its message in err). */
static sd_status replay(const h_shape *shape,
                        int pipeline,
                        window_case *rows,
                        const char *text,
                        sched_run *out,
                        bool tolerate,
                        sd_err *err)
{
    sd_em_sched *rep = NULL;
    sd_err_clear(err);
    sd_status rc = sd_em_sched_replay(sd_bytes_str(text), &rep, err);
    if (rc != SD_OK) {
        return rc;
    }
    /* The header is what configures the engine for the replay. */
    const sd_em_sched_header *hd = sd_em_sched_header_get(rep);
    h_shape sh = *shape;
    sh.seed = hd->seed;
    sh.bundle_shape = hd->shape;
    sh.max_elems = hd->max_bundle_elements;
    sh.max_bytes = hd->max_bundle_bytes;
    sh.max_inflight = hd->max_inflight;
    sd_buf_init(&out->text, 0);
    rc = run_with(&sh, pipeline, rows, rep, out, tolerate, err);
    sd_em_sched_destroy(rep);
    return rc;
}

void test_schedule_record_replay(void **state)
{
    (void)state;
    for (int pipeline = P_TIMERS; pipeline <= P_TESTSTREAM; pipeline++) {
        for (size_t s = 0; s < N_SHAPES; s++) {
            static sched_run a, b;
            sd_err err = { 0 };
            record(&SHAPES[s], pipeline, &timer_rows, &a);
            const char *text = (const char *)a.text.data;
            /* A real schedule: every kind of decision this pipeline makes is there. */
            assert_non_null(strstr(text, "sundial-schedule v1\n"));
            assert_non_null(strstr(text, "\nstep 1 "));
            assert_non_null(strstr(text, " bundle "));
            assert_non_null(strstr(text, " commit "));
            assert_non_null(strstr(text, pipeline == P_TIMERS ? " clock +3600000\n"
                                                              : " teststream clock=+500\n"));
            assert_true(a.steps > 4);
            assert_true(a.n_results > 0);
            sd_status rc = replay(&SHAPES[s], pipeline, &timer_rows, text, &b, false, &err);
            if (rc != SD_OK) {
                fail_msg("shape %s pipeline %d: replay: %s\n%s", SHAPES[s].name, pipeline,
                         sd_err_msg(&err), text);
            }
            /* The same decisions, and the same results in the same order. */
            assert_int_equal(b.steps, a.steps);
            assert_int_equal(b.n_results, a.n_results);
            for (size_t i = 0; i < a.n_results; i++) {
                assert_string_equal(b.results[i], a.results[i]);
            }
            /* Recording twice gives the same file byte for byte. */
            record(&SHAPES[s], pipeline, &timer_rows, &b);
            assert_string_equal((const char *)b.text.data, text);
            sd_buf_deinit(&a.text);
            sd_buf_deinit(&b.text);
        }
    }
}

/* The step number of the first line of text containing what (0: none). */
static uint64_t step_of(const char *text, const char *what)
{
    const char *at = strstr(text, what);
    if (at == NULL) {
        return 0;
    }
    while (at > text && at[-1] != '\n') {
        at--;
    }
    return strncmp(at, "step ", 5) == 0 ? strtoull(at + 5, NULL, 10) : 0;
}

static char *dup_text(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    assert_non_null(d);
    memcpy(d, s, n);
    return d;
}

void test_schedule_tampered_fails(void **state)
{
    const h_shape *shape = &SHAPES[7]; /* seed 42, one key, two in flight */
    static sched_run a, b;
    sd_err err = { 0 };
    char want[96];
    (void)state;
    record(shape, P_TIMERS, &timer_rows, &a);
    const char *text = (const char *)a.text.data;

    /* 1. A changed digest in the third bundle: the element set differs at that step. */
    char *t = dup_text(text);
    char *line = t;
    for (int k = 0; k < 3; k++) {
        line = strstr(line + 1, " bundle ");
        assert_non_null(line);
    }
    char *dg = strstr(line, "digest=") + 7;
    dg[15] = dg[15] == '0' ? '1' : '0';
    uint64_t n = step_of(t, line + 1);
    assert_true(n > 0);
    assert_int_equal(replay(shape, P_TIMERS, &timer_rows, t, &b, true, &err), SD_ESTATE);
    snprintf(want, sizeof(want), "schedule replay diverged at step %llu (", (unsigned long long)n);
    assert_non_null(strstr(sd_err_msg(&err), want));
    assert_non_null(strstr(sd_err_msg(&err), "the bundle holds other elements or timers"));
    free(t);

    /* 2. The same recording over other input: it diverges where the element set differs,
     * naming the step, and never completes. */
    assert_int_equal(replay(shape, P_TIMERS, &other_rows, text, &b, true, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "schedule replay diverged at step "));
    assert_non_null(strstr(sd_err_msg(&err), "the recording has \""));

    /* 3. A recording cut short (steps removed, end renumbered): the run goes on past it. */
    t = dup_text(text);
    char *last = strstr(t, "\nend ");
    *last = '\0';
    last = strrchr(t, '\n');
    uint64_t kept = strtoull(last + 6, NULL, 10) - 1;
    snprintf(last, 32, "\nend %llu\n", (unsigned long long)kept);
    assert_int_equal(replay(shape, P_TIMERS, &timer_rows, t, &b, true, &err), SD_ESTATE);
    snprintf(want, sizeof(want), "diverged at step %llu: the recording ended after step %llu",
             (unsigned long long)kept + 1, (unsigned long long)kept);
    assert_non_null(strstr(sd_err_msg(&err), want));
    free(t);

    /* 4. Another seed in the header: the engine's choices differ, and the replay says where. */
    t = dup_text(text);
    char *seed = strstr(t, "seed 42");
    seed[6] = '3';
    assert_int_equal(replay(shape, P_TIMERS, &timer_rows, t, &b, true, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "schedule replay diverged at step "));
    free(t);
    sd_buf_deinit(&a.text);
}

void test_schedule_file_errors(void **state)
{
    static const struct {
        const char *name;
        const char *text;
        const char *want;
    } rows[] = {
        { "not a schedule", "hello\n", "line 1: expected \"sundial-schedule v1\"" },
        { "version 2", "sundial-schedule v2\n", "line 1: expected \"sundial-schedule v1\"" },
        { "bad shape", "sundial-schedule v1\nseed 1\nshape round\n",
          "line 3: shape must be greedy, one_key or one_element" },
        { "bad number", "sundial-schedule v1\nseed x\n", "line 2: seed must be a number >= 0" },
        { "header only", "sundial-schedule v1\nseed 1\nshape greedy\n",
          "the file ends in its header" },
        { "gap in steps",
          "sundial-schedule v1\nseed 0\nshape greedy\nmax_bundle_elements 0\n"
          "max_bundle_bytes 0\nmax_inflight 1\nstep 1 clock +5\nstep 3 clock +6\nend 2\n",
          "line 8: expected step 2, got step \"3\"" },
        { "unknown decision",
          "sundial-schedule v1\nseed 0\nshape greedy\nmax_bundle_elements 0\n"
          "max_bundle_bytes 0\nmax_inflight 1\nstep 1 jump +5\nend 1\n",
          "line 7 (step 1): unknown decision \"jump +5\"" },
        { "truncated",
          "sundial-schedule v1\nseed 0\nshape greedy\nmax_bundle_elements 0\n"
          "max_bundle_bytes 0\nmax_inflight 1\nstep 1 clock +5\n",
          "without its \"end\" line: the recording is truncated" },
        { "wrong end",
          "sundial-schedule v1\nseed 0\nshape greedy\nmax_bundle_elements 0\n"
          "max_bundle_bytes 0\nmax_inflight 1\nstep 1 clock +5\nend 2\n",
          "line 8: \"end 2\" does not match the 1 steps before it" },
        { "after end",
          "sundial-schedule v1\nseed 0\nshape greedy\nmax_bundle_elements 0\n"
          "max_bundle_bytes 0\nmax_inflight 1\nend 0\nstep 1 clock +5\n",
          "line 8: nothing may follow the \"end\" line" },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_em_sched *s = NULL;
        sd_err err = { 0 };
        assert_int_equal(sd_em_sched_replay(sd_bytes_str(rows[i].text), &s, &err), SD_EPROTO);
        assert_null(s);
        if (strstr(sd_err_msg(&err), rows[i].want) == NULL) {
            fail_msg("%s: got \"%s\", want \"%s\"", rows[i].name, sd_err_msg(&err), rows[i].want);
        }
    }
    /* A recorded split is asked for again; a run that ends early is named at finish. */
    const char *ok =
        "# a comment\nsundial-schedule v1\nseed 0\nshape one_key\n"
        "max_bundle_elements 2\nmax_bundle_bytes 0\nmax_inflight 3\n"
        "step 1 bundle s%20x-1 stage=s%20x elements=1 timers=0 digest=0000000000000000\n"
        "step 2 split s%20x-1 asked=0.25 answered=none\n"
        "step 3 split s%20x-1 asked=0.5 answered=3 answer=0aff\nend 3\n";
    sd_em_sched *s = NULL;
    sd_err err = { 0 };
    sd_em_sched_split fr[4];
    size_t nfr = 0;
    assert_int_equal(sd_em_sched_replay(sd_bytes_str(ok), &s, &err), SD_OK);
    assert_int_equal(sd_em_sched_header_get(s)->shape, SD_SHAPE_ONE_KEY);
    assert_int_equal(sd_em_sched_header_get(s)->max_inflight, 3);
    assert_int_equal(sd_em_sched_splits_for(s, "s x-1", fr, 4, &nfr, &err), SD_OK);
    assert_int_equal(nfr, 2);
    assert_true(fr[0].fraction == 0.25 && fr[1].fraction == 0.5);
    assert_true(fr[0].first_split == -1 && fr[1].first_split == 3);
    assert_int_equal(fr[0].answer.len, 0);
    assert_int_equal(fr[1].answer.len, 2);
    assert_true(fr[1].answer.data[0] == 0x0a && fr[1].answer.data[1] == 0xff);
    for (size_t i = 0; i < 4; i++) {
        sd_buf_deinit(&fr[i].answer);
    }
    assert_int_equal(sd_em_sched_splits_for(s, "s x-2", fr, 4, &nfr, &err), SD_OK);
    assert_int_equal(nfr, 0);
    for (size_t i = 0; i < 4; i++) {
        sd_buf_deinit(&fr[i].answer);
    }
    sd_em_decision d = {
        .kind = SD_DECISION_BUNDLE, .bundle = "s x-1", .stage = "s x", .elements = 1, .digest = 0
    };
    assert_int_equal(sd_em_sched_decide(s, &d, &err), SD_OK);
    assert_int_equal(sd_em_sched_finish(s, NULL, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "diverged at step 2: this run ended after 1 steps, "
                                             "but the recording goes on with \"split s%20x-1"));
    /* After a divergence every decision fails with the same message. */
    sd_em_decision sp = {
        .kind = SD_DECISION_SPLIT, .bundle = "s x-1", .fraction = 0.25, .first_split = 1
    };
    sd_err_clear(&err);
    assert_int_equal(sd_em_sched_decide(s, &sp, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "(the SDK answered the split differently)"));
    sd_err_clear(&err);
    assert_int_equal(sd_em_sched_decide(s, &d, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "answered the split differently"));
    assert_string_equal(sd_em_sched_diverged(s), sd_err_msg(&err));
    sd_em_sched_destroy(s);

    /* A bundle of another stage where the recording has one of s x. */
    assert_int_equal(sd_em_sched_replay(sd_bytes_str(ok), &s, &err), SD_OK);
    sd_em_decision other = {
        .kind = SD_DECISION_BUNDLE, .bundle = "t-1", .stage = "t", .elements = 1
    };
    sd_err_clear(&err);
    assert_int_equal(sd_em_sched_decide(s, &other, &err), SD_ESTATE);
    assert_string_equal(sd_err_msg(&err),
                        "schedule replay diverged at step 1 (another stage had work ready "
                        "first): the recording has \"bundle s%20x-1 stage=s%20x elements=1 "
                        "timers=0 digest=0000000000000000\", this run has \"bundle t-1 "
                        "stage=t elements=1 timers=0 digest=0000000000000000\"");
    sd_em_sched_destroy(s);
}

/*
 * A split decision keeps the SDK's whole answer (opaque bytes) as lowercase hex, and a replay
 * gets it back byte for byte; a split line that does not parse (bad hex, odd length, a
 * missing answered=) is an error naming the step, never a split applied half.
 */
void test_schedule_split_answers(void **state)
{
    (void)state;
    sd_em_sched_header hd = { .seed = 7, .shape = SD_SHAPE_GREEDY };
    sd_em_sched *rec = NULL;
    sd_err err = { 0 };
    const uint8_t answer[] = { 0x00, 0x0a, 0xff, 0x7f };
    assert_int_equal(sd_em_sched_record(&hd, &rec), SD_OK);
    sd_em_decision sp = { .kind = SD_DECISION_SPLIT,
                          .bundle = "s-1",
                          .fraction = 0.5,
                          .first_split = 2,
                          .answer = sd_bytes_make(answer, sizeof(answer)) };
    sd_em_decision none = {
        .kind = SD_DECISION_SPLIT, .bundle = "s-1", .fraction = 0, .first_split = -1
    };
    assert_int_equal(sd_em_sched_decide(rec, &sp, &err), SD_OK);
    assert_int_equal(sd_em_sched_decide(rec, &none, &err), SD_OK);
    sd_buf text;
    sd_buf_init(&text, 0);
    assert_int_equal(sd_em_sched_finish(rec, &text, &err), SD_OK);
    assert_int_equal(sd_buf_append_byte(&text, '\0'), SD_OK);
    assert_non_null(strstr((char *)text.data, "step 1 split s-1 asked=0.5 answered=2 "
                                              "answer=000aff7f\nstep 2 split s-1 asked=0 "
                                              "answered=none\nend 2\n"));
    sd_em_sched_destroy(rec);

    sd_em_sched *rep = NULL;
    assert_int_equal(sd_em_sched_replay(sd_bytes_make(text.data, text.len - 1), &rep, &err), SD_OK);
    sd_em_sched_split got[1];
    size_t n = 0;
    assert_int_equal(sd_em_sched_splits_for(rep, "s-1", got, 1, &n, &err), SD_OK);
    assert_int_equal(n, 2); /* both counted, the first max returned */
    assert_int_equal(got[0].first_split, 2);
    assert_int_equal(got[0].answer.len, sizeof(answer));
    assert_memory_equal(got[0].answer.data, answer, sizeof(answer));
    sd_buf_deinit(&got[0].answer);
    /* The replay's own split decision, from the same answer, matches the recording. */
    assert_int_equal(sd_em_sched_decide(rep, &sp, &err), SD_OK);
    assert_int_equal(sd_em_sched_decide(rep, &none, &err), SD_OK);
    assert_int_equal(sd_em_sched_finish(rep, NULL, &err), SD_OK);
    sd_em_sched_destroy(rep);
    sd_buf_deinit(&text);

    static const char *const bad[] = { "asked=0.5 answered=2 answer=0g",
                                       "asked=0.5 answered=2 answer=abc",
                                       "asked=0.5 answered=2 answer=",
                                       "asked=0.5 answered=-3",
                                       "asked=x answered=2",
                                       "asked=0.5 answer=00",
                                       "asked=0.5 answered=2 trailing" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char file[512];
        snprintf(file, sizeof(file),
                 "sundial-schedule v1\nseed 0\nshape greedy\nmax_bundle_elements 0\n"
                 "max_bundle_bytes 0\nmax_inflight 1\nstep 1 split b-1 %s\nend 1\n",
                 bad[i]);
        assert_int_equal(sd_em_sched_replay(sd_bytes_str(file), &rep, &err), SD_OK);
        sd_err_clear(&err);
        assert_int_equal(sd_em_sched_splits_for(rep, "b-1", got, 1, &n, &err), SD_EPROTO);
        sd_buf_deinit(&got[0].answer);
        if (strstr(sd_err_msg(&err), "schedule step 1: a split is \"split <bundle> asked=") ==
            NULL) {
            fail_msg("%s: %s", bad[i], sd_err_msg(&err));
        }
        sd_em_sched_destroy(rep);
    }
}
