/*
 * Sundial unit tests: the executor's plan-to-engine translation (runner/exec/xplan.c).
 *
 * Regression tests for what fuzz_teststream found. A TestStream whose payload coder encodes
 * every element to no bytes (a window coder, here beam:coder:global_window:v1, which a client
 * may name) left the re-encoded element buffer unallocated, and the element ranges were then
 * computed as NULL + 0: undefined behaviour that clang's UBSan reports ("applying zero offset
 * to null pointer"), so these tests fail under a clang ASan+UBSan build before the fix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/exec/exec_int.h"
#include "runner/plan/plan.h"
#include "runner/urns/urns.h"

typedef Org__Apache__Beam__Model__Pipeline__V1__Pipeline pb_pipeline;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload pb_ts;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload__Event pb_ts_event;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload__Event__AddElements pb_ts_add;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload__TimestampedElement pb_ts_elem;

#define PL(x) org__apache__beam__model__pipeline__v1__##x

/*
 * Plan and set up an engine for: TestStream "ts" -> PCollection "p" (coder and payload coder
 * `coder`, global windows), whose payload has one element event of n_elements empty encodings
 * (and none when n_elements is 0). Returns the status of sd_exec_plan_to_engine.
 */
static sd_status teststream_to_engine(const char *coder_urn, size_t n_elements)
{
    /* The TestStreamPayload. */
    pb_ts_elem elems[4];
    pb_ts_elem *elem_ptrs[4];
    assert_true(n_elements <= 4);
    for (size_t i = 0; i < n_elements; i++) {
        PL(test_stream_payload__timestamped_element__init)(&elems[i]);
        elems[i].timestamp = (int64_t)i + 1;
        elem_ptrs[i] = &elems[i];
    }
    pb_ts_add add;
    PL(test_stream_payload__event__add_elements__init)(&add);
    add.tag = (char *)"out";
    add.n_elements = n_elements;
    add.elements = elem_ptrs;
    pb_ts_event ev;
    PL(test_stream_payload__event__init)(&ev);
    ev.event_case =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__EVENT__EVENT_ELEMENT_EVENT;
    ev.element_event = &add;
    pb_ts_event *events[1] = { &ev };
    pb_ts ts;
    PL(test_stream_payload__init)(&ts);
    ts.coder_id = (char *)"c";
    ts.n_events = n_elements > 0 ? 1 : 0;
    ts.events = events;
    uint8_t payload[256];
    assert_true(PL(test_stream_payload__get_packed_size)(&ts) <= sizeof(payload));
    size_t payload_len = PL(test_stream_payload__pack)(&ts, payload);

    /* Coders: "c" (the element coder) and "gw" (the window coder). */
    Org__Apache__Beam__Model__Pipeline__V1__FunctionSpec c_spec, gw_spec, ts_spec, wfn;
    PL(function_spec__init)(&c_spec);
    PL(function_spec__init)(&gw_spec);
    PL(function_spec__init)(&ts_spec);
    PL(function_spec__init)(&wfn);
    c_spec.urn = (char *)coder_urn;
    gw_spec.urn = (char *)SD_URN_CODER_GLOBAL_WINDOW;
    ts_spec.urn = (char *)SD_URN_TRANSFORM_TEST_STREAM;
    ts_spec.payload.data = payload;
    ts_spec.payload.len = payload_len;
    wfn.urn = (char *)SD_URN_WINDOW_FN_GLOBAL;
    Org__Apache__Beam__Model__Pipeline__V1__Coder c, gw;
    PL(coder__init)(&c);
    PL(coder__init)(&gw);
    c.spec = &c_spec;
    gw.spec = &gw_spec;
    Org__Apache__Beam__Model__Pipeline__V1__Components__CodersEntry ce[2];
    PL(components__coders_entry__init)(&ce[0]);
    PL(components__coders_entry__init)(&ce[1]);
    ce[0].key = (char *)"c";
    ce[0].value = &c;
    ce[1].key = (char *)"gw";
    ce[1].value = &gw;
    Org__Apache__Beam__Model__Pipeline__V1__Components__CodersEntry *ces[2] = { &ce[0], &ce[1] };

    /* Windowing: global windows. */
    Org__Apache__Beam__Model__Pipeline__V1__WindowingStrategy ws;
    PL(windowing_strategy__init)(&ws);
    ws.window_fn = &wfn;
    ws.window_coder_id = (char *)"gw";
    ws.merge_status = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NON_MERGING;
    ws.output_time = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW;
    ws.accumulation_mode =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__DISCARDING;
    ws.closing_behavior =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_ALWAYS;
    ws.on_time_behavior =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ON_TIME_BEHAVIOR__ENUM__FIRE_ALWAYS;
    Org__Apache__Beam__Model__Pipeline__V1__Components__WindowingStrategiesEntry wse;
    PL(components__windowing_strategies_entry__init)(&wse);
    wse.key = (char *)"global";
    wse.value = &ws;
    Org__Apache__Beam__Model__Pipeline__V1__Components__WindowingStrategiesEntry *wses[1] = {
        &wse
    };

    /* The PCollection and the TestStream transform. */
    Org__Apache__Beam__Model__Pipeline__V1__PCollection pc;
    PL(pcollection__init)(&pc);
    pc.unique_name = (char *)"p";
    pc.coder_id = (char *)"c";
    pc.windowing_strategy_id = (char *)"global";
    pc.is_bounded = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__UNBOUNDED;
    Org__Apache__Beam__Model__Pipeline__V1__Components__PcollectionsEntry pce;
    PL(components__pcollections_entry__init)(&pce);
    pce.key = (char *)"p";
    pce.value = &pc;
    Org__Apache__Beam__Model__Pipeline__V1__Components__PcollectionsEntry *pces[1] = { &pce };
    Org__Apache__Beam__Model__Pipeline__V1__PTransform__OutputsEntry out;
    PL(ptransform__outputs_entry__init)(&out);
    out.key = (char *)"out";
    out.value = (char *)"p";
    Org__Apache__Beam__Model__Pipeline__V1__PTransform__OutputsEntry *outs[1] = { &out };
    Org__Apache__Beam__Model__Pipeline__V1__PTransform t;
    PL(ptransform__init)(&t);
    t.unique_name = (char *)"ts";
    t.spec = &ts_spec;
    t.n_outputs = 1;
    t.outputs = outs;
    Org__Apache__Beam__Model__Pipeline__V1__Components__TransformsEntry te;
    PL(components__transforms_entry__init)(&te);
    te.key = (char *)"ts";
    te.value = &t;
    Org__Apache__Beam__Model__Pipeline__V1__Components__TransformsEntry *tes[1] = { &te };

    Org__Apache__Beam__Model__Pipeline__V1__Components comps;
    PL(components__init)(&comps);
    comps.n_coders = 2;
    comps.coders = ces;
    comps.n_windowing_strategies = 1;
    comps.windowing_strategies = wses;
    comps.n_pcollections = 1;
    comps.pcollections = pces;
    comps.n_transforms = 1;
    comps.transforms = tes;
    char *roots[1] = { (char *)"ts" };
    pb_pipeline p;
    PL(pipeline__init)(&p);
    p.components = &comps;
    p.n_root_transform_ids = 1;
    p.root_transform_ids = roots;

    sd_plan_options opt = { .data_url = "localhost:1", .state_url = "localhost:1" };
    sd_plan *plan = NULL;
    sd_err err = { 0 };
    sd_status st = sd_plan_build(&p, &opt, &plan, &err);
    if (st != SD_OK) {
        fail_msg("plan: %s: %s", sd_status_name(st), sd_err_msg(&err));
    }
    sd_exec_plan xp;
    assert_int_equal(sd_exec_plan_init(plan, &xp, &err), SD_OK);
    sd_em_config cfg = { 0 };
    cfg.clock = SD_CLOCK_SYNTHETIC;
    cfg.streaming = true;
    sd_em *em = NULL;
    assert_int_equal(sd_em_create(&cfg, &em), SD_OK);
    st = sd_exec_plan_to_engine(&xp, em, &err);
    sd_em_destroy(em);
    sd_exec_plan_deinit(&xp);
    sd_plan_destroy(plan);
    return st;
}

typedef struct empty_case {
    const char *name;
    const char *coder_urn;
    size_t n_elements;
} empty_case;

/* Named rows: element coders whose encodings are empty, and the count of such elements. */
static const empty_case EMPTY_CASES[] = {
    { "global window coder, one element", SD_URN_CODER_GLOBAL_WINDOW, 1 },
    { "global window coder, four elements", SD_URN_CODER_GLOBAL_WINDOW, 4 },
    { "global window coder, no element event", SD_URN_CODER_GLOBAL_WINDOW, 0 },
};

static void test_teststream_empty_encodings(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(EMPTY_CASES) / sizeof(EMPTY_CASES[0]); i++) {
        const empty_case *c = &EMPTY_CASES[i];
        sd_status st = teststream_to_engine(c->coder_urn, c->n_elements);
        if (st != SD_OK) {
            fail_msg("%s: %s", c->name, sd_status_name(st));
        }
    }
}

/*
 * TestStream elements in the forms payloads carry them (issue 35). Beam's Go SDK writes each
 * element as its element encoder does: the nested encoding of the payload's coder, and for its
 * own coders (beam:go:coder:custom:v1, e.g. a Go int) varint(length) + the bytes, which already
 * is what the runner stores for them (length_prefix(custom)). Before, the runner prefixed those
 * once more, and the Go SDK read 0x02 0x01 0x54 as a custom encoding of 0x01 0x54: -1, not 42.
 */
typedef struct recode_case {
    const char *name;
    sd_coder_kind kind; /* the payload's coder; SD_CODER_UNKNOWN: stored length-prefixed */
    sd_plan_ts_form form;
    const char *in;
    size_t in_len;
    sd_status want_status;
    const char *want;
    size_t want_len;
} recode_case;

static const recode_case RECODE_CASES[] = {
    { "Go int 42 (custom coder)", SD_CODER_UNKNOWN, SD_PLAN_TS_STORED, "\x01\x54", 2, SD_OK,
      "\x01\x54", 2 },
    { "Go string \"abc\" (nested)", SD_CODER_STRING_UTF8, SD_PLAN_TS_NESTED,
      "\x03"
      "abc",
      4, SD_OK,
      "\x03"
      "abc",
      4 },
    { "Go []byte{42} (nested)", SD_CODER_BYTES, SD_PLAN_TS_NESTED, "\x01\x2a", 2, SD_OK, "\x01\x2a",
      2 },
    { "Go int64 300 (nested varint)", SD_CODER_VARINT, SD_PLAN_TS_NESTED, "\xac\x02", 2, SD_OK,
      "\xac\x02", 2 },
    { "Go row (unknown to the runner, nested)", SD_CODER_UNKNOWN, SD_PLAN_TS_NESTED, "\x01\x02", 2,
      SD_OK, "\x02\x01\x02", 3 },
    { "Beam's outer string \"abc\"", SD_CODER_STRING_UTF8, SD_PLAN_TS_OUTER, "abc", 3, SD_OK,
      "\x03"
      "abc",
      4 },
    { "Beam's outer opaque element", SD_CODER_UNKNOWN, SD_PLAN_TS_OUTER, "\x01\x54", 2, SD_OK,
      "\x02\x01\x54", 3 },
    { "custom element shorter than its length", SD_CODER_UNKNOWN, SD_PLAN_TS_STORED, "\x05\x01", 2,
      SD_EINVAL, NULL, 0 },
    { "custom element longer than its length", SD_CODER_UNKNOWN, SD_PLAN_TS_STORED, "\x01\x01\x01",
      3, SD_EINVAL, NULL, 0 },
    { "empty custom element", SD_CODER_UNKNOWN, SD_PLAN_TS_STORED, "", 0, SD_EINVAL, NULL, 0 },
    { "nested string with bytes after it", SD_CODER_STRING_UTF8, SD_PLAN_TS_NESTED,
      "\x01"
      "ax",
      3, SD_EINVAL, NULL, 0 },
};

static void test_teststream_recode_forms(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(RECODE_CASES) / sizeof(RECODE_CASES[0]); i++) {
        const recode_case *c = &RECODE_CASES[i];
        sd_coder *coder = NULL;
        sd_err err = { 0 };
        if (c->kind != SD_CODER_UNKNOWN) {
            assert_int_equal(sd_coder_create(&coder, &err, c->kind, NULL), SD_OK);
        }
        sd_buf out;
        sd_buf_init(&out, 0);
        sd_status st = sd__exec_teststream_recode(
            coder, c->form, sd_bytes_make((const uint8_t *)c->in, c->in_len), &out, &err);
        if (st != c->want_status) {
            fail_msg("%s: got %s (%s), want %s", c->name, sd_status_name(st), sd_err_msg(&err),
                     sd_status_name(c->want_status));
        }
        if (st == SD_OK) {
            if (out.len != c->want_len || memcmp(out.data, c->want, c->want_len) != 0) {
                fail_msg("%s: stored %zu bytes, want %zu", c->name, out.len, c->want_len);
            }
        } else {
            assert_true(strlen(sd_err_msg(&err)) > 0);
        }
        sd_buf_deinit(&out);
        sd_coder_destroy(coder);
    }
}

/*
 * A worker log that carries an echo of one of its job's worker logs is a job message the
 * worker's process logged back (Beam's Go SDK under LOOPBACK logs every job message through
 * its worker's logger): echoing it again looped for as long as the job ran (issue 35).
 */
static void test_worker_log_echo(void **state)
{
    (void)state;

    static const struct {
        const char *text;
        bool echo;
    } rows[] = {
        { "(time=2026-12-07T17:57:41.757Z)(id=9471)[worker job-042-go-w42-2a22] hello", true },
        { "[worker job-042-go-w42-2a22] ERROR: boom", true },
        { "(time=T)(id=1)[worker job-0421-go-w1-aa] another job's worker", false },
        { "(time=T)(id=1)[worker job-041-go-w1-aa] another job's worker", false },
        { "[worker job-042] no worker id after the job id", false },
        { "Claimed position: 3", false },
        { "", false },
        { NULL, false },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (sd__exec_log_is_echo("job-042", rows[i].text) != rows[i].echo) {
            fail_msg("row %zu (%s): want %s", i, rows[i].text != NULL ? rows[i].text : "NULL",
                     rows[i].echo ? "an echo" : "not an echo");
        }
    }
}

/* Sessions a GroupByKey already merged (Java's alreadyMerged output) are grouped again by the
 * windows they carry: a later GroupByKey must not merge sessions of different keys that share
 * its key (GroupByKeyTest$WindowTests#testWindowFnPostMerging: 5, 9, 3, not 8, 9). */
static void test_windowing_already_merged(void **state)
{
    (void)state;

    static const struct {
        sd_plan_merge merge;
        sd_windowfn_kind want;
    } rows[] = {
        { SD_PLAN_MERGE_NEEDS_MERGE, SD_WINDOWFN_SESSIONS },
        { SD_PLAN_MERGE_ALREADY_MERGED, SD_WINDOWFN_CUSTOM },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_plan_windowing pw;
        memset(&pw, 0, sizeof(pw));
        pw.kind = SD_PLAN_WINDOW_SESSIONS;
        pw.gap_ms = 4;
        pw.merge = rows[i].merge;
        sd_windowing ws;
        sd_vec pool;
        sd_vec_init(&pool, sizeof(void *));
        sd__exec_windowing_from_plan(&pw, &ws, &pool);
        assert_int_equal(ws.kind, rows[i].want);
        assert_int_equal(ws.gap_ms, 4);
        assert_int_equal(pool.len, 0);
        sd_vec_deinit(&pool);
    }
}

/* Beam's direct_test_splits option: the splits of a named transform go to its stage; malformed
 * or misshapen values are ignored (with a warning), never half-read. */
static void test_parse_test_splits(void **state)
{
    (void)state;
    static const char *const t0[] = { "read", "map" };
    static const char *const t1[] = { "count" };
    sd_plan_stage ps[2];
    memset(ps, 0, sizeof(ps));
    ps[0].id = "s0";
    ps[0].transforms = t0;
    ps[0].n_transforms = 2;
    ps[1].id = "s1";
    ps[1].transforms = t1;
    ps[1].n_transforms = 1;
    sd_exec_stage st[2];
    memset(st, 0, sizeof(st));
    st[0].ps = &ps[0];
    st[1].ps = &ps[1];
    sd_exec_plan xp = { .stages = st, .n_stages = 2 };

    static const struct {
        const char *json;
        size_t n_splits; /* entries kept */
        const char *stage;
        size_t n; /* splits of the first entry */
        double timing0, fraction1;
    } cases[] = {
        { "{\"map\": {\"timings\": [0, 0.5], \"fractions\": [0.5, 0.25]}}", 1, "s0", 2, 0, 0.25 },
        { " { \"count\" : { \"fractions\" : [0.1, 0.2, 0.3], \"timings\" : [1, 2] } } ", 1, "s1", 2,
          1, 0.2 },
        { "{\"nobody\": {\"timings\": [0], \"fractions\": [0.5]}}", 0, NULL, 0, 0, 0 },
        { "{\"map\": {\"timings\": [0, \"x\"], \"fractions\": [0.5, 0.5]}}", 0, NULL, 0, 0, 0 },
        { "{\"map\": [1, 2]}", 0, NULL, 0, 0, 0 },
        { "{\"map\": {\"timings\": [0], \"fractions\": [0.5]", 0, NULL, 0, 0, 0 },
        { "[]", 0, NULL, 0, 0, 0 },
        { "", 0, NULL, 0, 0, 0 },
    };

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        sd_vec out;
        sd_vec_init(&out, sizeof(sd_exec_split));
        sd__exec_parse_test_splits(cases[c].json, &xp, NULL, &out);
        assert_int_equal(out.len, cases[c].n_splits);
        if (cases[c].n_splits > 0) {
            const sd_exec_split *sp = sd_vec_at(&out, 0);
            assert_string_equal(sp->stage_id, cases[c].stage);
            assert_int_equal(sp->n, cases[c].n);
            assert_true(sp->timings[0] == cases[c].timing0);
            assert_true(sp->fractions[1] == cases[c].fraction1);
        }
        for (size_t i = 0; i < out.len; i++) {
            sd_free(((sd_exec_split *)sd_vec_at(&out, i))->stage_id);
        }
        sd_vec_deinit(&out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_teststream_empty_encodings),
        cmocka_unit_test(test_teststream_recode_forms),
        cmocka_unit_test(test_worker_log_echo),
        cmocka_unit_test(test_windowing_already_merged),
        cmocka_unit_test(test_parse_test_splits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
