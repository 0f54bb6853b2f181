/*
 * Unit tests for runner/plan: windowing translation. Every window fn (through run_plan_cases:
 * one table of window fns, one of payload durations and timestamps that overflow milliseconds,
 * one of closing behaviors), trigger trees and Java's synchronized processing time trigger.
 * Each planned pipeline is windowed_gbk: impulse -> kv -> (lifted) GBK under strategy "win".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "google/protobuf/duration.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/err.h"
#include "runner/plan/plan.h"
#include "runner/urns/urns.h"
#include "test_plan_harness.h"

/*
 * Keyed pipeline with a windowing strategy "win": impulse -> kv -> gbk -> out, the GBK inside a
 * combine_per_key "sum" when lift. payload(b, row) builds the window fn's payload from the
 * table row being planned.
 */
static pb_pipeline *windowed_gbk(const char *fn,
                                 ProtobufCBinaryData (*payload)(tb *, const void *row),
                                 const void *row,
                                 bool lift)
{
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_ws(&b, "win", fn, payload(&b, row), strcmp(fn, SD_URN_WINDOW_FN_GLOBAL) == 0 ? "gw" : "iw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "win");
    tb_pcoll(&b, "p_g", "kv_str_varint", "win");
    tb_pcoll(&b, "p_out", "kv_str_varint", "win");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "window", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_kv", NULL);
    if (lift) {
        tb_transform(&b, "sum", SD_URN_TRANSFORM_COMBINE_PER_KEY, tb_combine(&b, "varint"), "js",
                     "in=p_kv", "out=p_out", "sum/gbk,sum/fn");
        tb_transform(&b, "sum/gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv",
                     "out=p_g", NULL);
        tb_transform(&b, "sum/fn", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_g",
                     "out=p_out", NULL);
        tb_root(&b, "sum");
    } else {
        tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                     NULL);
        tb_root(&b, "gbk");
    }
    tb_root(&b, "impulse");
    tb_root(&b, "window");
    return tb_finish(&b);
}

static ProtobufCBinaryData pay_none(tb *b, const void *row)
{
    (void)b;
    (void)row;
    return NO_PAYLOAD;
}

static ProtobufCBinaryData pay_fixed(tb *b, const void *row)
{
    (void)row;
    return tb_fixed(b, 60000, 1500);
}

static ProtobufCBinaryData pay_sliding(tb *b, const void *row)
{
    (void)row;
    return tb_sliding(b, 60000, 10000);
}

static ProtobufCBinaryData pay_sessions(tb *b, const void *row)
{
    (void)row;
    return tb_sessions(b, 30500);
}

/* Window fns: each translated, and the combine lifted unless its windows merge. */
typedef struct window_fn_row {
    plan_case head;
    const char *fn;
    ProtobufCBinaryData (*payload)(tb *, const void *row);
    sd_plan_window_kind kind;
    int64_t size, period, offset, gap;
    sd_plan_merge merge;
    bool lifted;
} window_fn_row;

static pb_pipeline *window_fn_pipeline(const void *row)
{
    const window_fn_row *r = row;
    return windowed_gbk(r->fn, r->payload, row, true);
}

static void window_fn_check(const sd_plan *plan, const pb_pipeline *p, const void *row)
{
    (void)p;
    const window_fn_row *r = row;
    const sd_plan_windowing *w = sd_plan_find_windowing(plan, "win");
    assert_non_null(w);
    assert_int_equal(w->kind, r->kind);
    assert_int_equal(w->size_ms, r->size);
    assert_int_equal(w->period_ms, r->period);
    assert_int_equal(w->offset_ms, r->offset);
    assert_int_equal(w->gap_ms, r->gap);
    assert_int_equal(w->merge, r->merge);
    assert_int_equal(w->output_time, SD_PLAN_OUTPUT_END_OF_WINDOW);
    assert_int_equal(w->accumulation, SD_PLAN_DISCARDING);
    assert_int_equal(w->closing, SD_PLAN_EMIT_ALWAYS);
    assert_null(w->trigger);
    assert_int_equal(w->interval_windows, strcmp(r->fn, SD_URN_WINDOW_FN_GLOBAL) != 0);
    /* Sessions merge: the combine is not lifted, its GBK runs in the runner. */
    const sd_plan_stage *g = &plan->stages[2];
    assert_int_equal(g->kind, SD_PLAN_STAGE_GBK);
    assert_string_equal(g->transforms[0], r->lifted ? "sum/Group" : "sum/gbk");
    assert_string_equal(g->windowing_strategy_id, "win");
    const sd_plan_pcollection *in = sd_plan_find_pcollection(plan, g->inputs[0]);
    assert_string_equal(in->window_coder_id,
                        strcmp(r->fn, SD_URN_WINDOW_FN_GLOBAL) == 0 ? "gw" : "iw");
}

static void test_windowing_table(void **state)
{
    static const window_fn_row rows[] = {
        { { "global", NULL },
          SD_URN_WINDOW_FN_GLOBAL,
          pay_none,
          SD_PLAN_WINDOW_GLOBAL,
          0,
          0,
          0,
          0,
          SD_PLAN_MERGE_NON_MERGING,
          true },
        { { "fixed", NULL },
          SD_URN_WINDOW_FN_FIXED,
          pay_fixed,
          SD_PLAN_WINDOW_FIXED,
          60000,
          0,
          1500,
          0,
          SD_PLAN_MERGE_NON_MERGING,
          true },
        { { "sliding", NULL },
          SD_URN_WINDOW_FN_SLIDING,
          pay_sliding,
          SD_PLAN_WINDOW_SLIDING,
          60000,
          10000,
          0,
          0,
          SD_PLAN_MERGE_NON_MERGING,
          true },
        { { "sessions", NULL },
          SD_URN_WINDOW_FN_SESSION,
          pay_sessions,
          SD_PLAN_WINDOW_SESSIONS,
          0,
          0,
          0,
          30500,
          SD_PLAN_MERGE_NEEDS_MERGE,
          false },
    };
    (void)state;
    RUN_PLAN_CASES(rows, window_fn_pipeline, SD_OK, window_fn_check);
}

/* Window fn payloads whose Duration/Timestamp fields are raw client values. */
typedef struct raw_window {
    plan_case head; /* needle: the rejection; NULL: the largest value that fits */
    const char *fn;
    int64_t seconds[3]; /* fixed: size, offset; sliding: size, period, offset; sessions: gap */
    int32_t nanos[3];
} raw_window;

static Google__Protobuf__Duration *raw_duration(tb *b, const raw_window *r, int k)
{
    Google__Protobuf__Duration *d = tb_alloc(b, sizeof(*d));
    google__protobuf__duration__init(d);
    d->seconds = r->seconds[k];
    d->nanos = r->nanos[k];
    return d;
}

static Google__Protobuf__Timestamp *raw_timestamp(tb *b, const raw_window *r, int k)
{
    Google__Protobuf__Timestamp *t = tb_alloc(b, sizeof(*t));
    google__protobuf__timestamp__init(t);
    t->seconds = r->seconds[k];
    t->nanos = r->nanos[k];
    return t;
}

static ProtobufCBinaryData pay_raw(tb *b, const void *row)
{
    const raw_window *r = row;
    if (strcmp(r->fn, SD_URN_WINDOW_FN_FIXED) == 0) {
        Org__Apache__Beam__Model__Pipeline__V1__FixedWindowsPayload f;
        org__apache__beam__model__pipeline__v1__fixed_windows_payload__init(&f);
        f.size = raw_duration(b, r, 0);
        f.offset = raw_timestamp(b, r, 1);
        return tb_pack(b, &f.base);
    }
    if (strcmp(r->fn, SD_URN_WINDOW_FN_SLIDING) == 0) {
        Org__Apache__Beam__Model__Pipeline__V1__SlidingWindowsPayload s;
        org__apache__beam__model__pipeline__v1__sliding_windows_payload__init(&s);
        s.size = raw_duration(b, r, 0);
        s.period = raw_duration(b, r, 1);
        s.offset = raw_timestamp(b, r, 2);
        return tb_pack(b, &s.base);
    }
    Org__Apache__Beam__Model__Pipeline__V1__SessionWindowsPayload g;
    org__apache__beam__model__pipeline__v1__session_windows_payload__init(&g);
    g.gap_size = raw_duration(b, r, 0);
    return tb_pack(b, &g.base);
}

static pb_pipeline *raw_window_pipeline(const void *row)
{
    return windowed_gbk(((const raw_window *)row)->fn, pay_raw, row, false);
}

static void raw_window_check(const sd_plan *plan, const pb_pipeline *p, const void *row)
{
    (void)p;
    (void)row;
    const sd_plan_windowing *w = sd_plan_find_windowing(plan, "win");
    assert_non_null(w);
    if (w->kind == SD_PLAN_WINDOW_FIXED) {
        assert_true(w->size_ms == INT64_MAX);
    } else {
        assert_true(w->offset_ms == INT64_MIN);
    }
}

/*
 * Durations and timestamps that do not fit in int64 milliseconds are rejected with a message
 * naming the field; converting them once was signed overflow (a UBSan abort). The last rows
 * are the largest values that fit, which must still be accepted.
 */
static void test_windowing_overflow(void **state)
{
    static const raw_window rows[] = {
        { { "fixed size INT64_MAX s",
            "windowing strategy \"win\" has a fixed window size of 9223372036854775807 seconds, "
            "which overflows milliseconds" },
          SD_URN_WINDOW_FN_FIXED,
          { INT64_MAX, 0 },
          { 0 } },
        { { "fixed size INT64_MIN s",
            "fixed window size of -9223372036854775808 seconds, which overflows milliseconds" },
          SD_URN_WINDOW_FN_FIXED,
          { INT64_MIN, 0 },
          { 0 } },
        { { "fixed size: the nanos overflow", "fixed window size of 9223372036854775 seconds" },
          SD_URN_WINDOW_FN_FIXED,
          { INT64_MAX / 1000, 0 },
          { 999999999, 0 } },
        { { "fixed offset INT64_MAX s",
            "fixed window offset of 9223372036854775807 seconds, which overflows milliseconds" },
          SD_URN_WINDOW_FN_FIXED,
          { 60, INT64_MAX },
          { 0 } },
        { { "fixed offset -INT64_MAX s", "fixed window offset of -9223372036854775807 seconds" },
          SD_URN_WINDOW_FN_FIXED,
          { 60, -INT64_MAX },
          { 0 } },
        { { "sliding size", "sliding window size of 9223372036854775807 seconds" },
          SD_URN_WINDOW_FN_SLIDING,
          { INT64_MAX, 10, 0 },
          { 0 } },
        { { "sliding period", "sliding window period of -9223372036854775807 seconds" },
          SD_URN_WINDOW_FN_SLIDING,
          { 60, -INT64_MAX, 0 },
          { 0 } },
        { { "sliding offset", "sliding window offset of -9223372036854775808 seconds" },
          SD_URN_WINDOW_FN_SLIDING,
          { 60, 10, INT64_MIN },
          { 0 } },
        { { "sliding offset: the nanos underflow",
            "sliding window offset of -9223372036854775 seconds" },
          SD_URN_WINDOW_FN_SLIDING,
          { 60, 10, INT64_MIN / 1000 },
          { 0, 0, -999999999 } },
        { { "session gap",
            "session gap of 9223372036854775807 seconds, which overflows milliseconds" },
          SD_URN_WINDOW_FN_SESSION,
          { INT64_MAX },
          { 0 } },
        { { "largest fixed size that fits", NULL },
          SD_URN_WINDOW_FN_FIXED,
          { INT64_MAX / 1000, 0 },
          { 807000000, 0 } },
        { { "smallest sliding offset that fits", NULL },
          SD_URN_WINDOW_FN_SLIDING,
          { 60, 10, INT64_MIN / 1000 },
          { 0, 0, -808000000 } },
    };
    (void)state;
    RUN_PLAN_CASES(rows, raw_window_pipeline, SD_EINVAL, raw_window_check);
}

/* ClosingBehavior: EMIT_ALWAYS and EMIT_IF_NONEMPTY as given; UNSPECIFIED is Java's default,
 * FIRE_IF_NON_EMPTY. */
typedef struct closing_row {
    plan_case head;
    Org__Apache__Beam__Model__Pipeline__V1__ClosingBehavior__Enum in;
    sd_plan_closing want;
} closing_row;

static pb_pipeline *closing_pipeline(const void *row)
{
    pb_pipeline *p = windowed_gbk(SD_URN_WINDOW_FN_FIXED, pay_fixed, row, false);
    for (size_t k = 0; k < p->components->n_windowing_strategies; k++) {
        if (strcmp(p->components->windowing_strategies[k]->key, "win") == 0) {
            p->components->windowing_strategies[k]->value->closing_behavior =
                ((const closing_row *)row)->in;
        }
    }
    return p;
}

static void closing_check(const sd_plan *plan, const pb_pipeline *p, const void *row)
{
    (void)p;
    const sd_plan_windowing *w = sd_plan_find_windowing(plan, "win");
    assert_non_null(w);
    assert_int_equal(w->closing, ((const closing_row *)row)->want);
}

static void test_closing_behavior(void **state)
{
    static const closing_row rows[] = {
        { { "EMIT_ALWAYS", NULL },
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_ALWAYS,
          SD_PLAN_EMIT_ALWAYS },
        { { "EMIT_IF_NONEMPTY", NULL },
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_IF_NONEMPTY,
          SD_PLAN_EMIT_IF_NONEMPTY },
        { { "UNSPECIFIED", NULL },
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__UNSPECIFIED,
          SD_PLAN_EMIT_IF_NONEMPTY },
    };
    (void)state;
    RUN_PLAN_CASES(rows, closing_pipeline, SD_OK, closing_check);
}

static void test_trigger_tree(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    /* Repeat(AfterEndOfWindow(early = ElementCount(3))) with ACCUMULATING. */
    Org__Apache__Beam__Model__Pipeline__V1__Trigger count, eow, rep;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__ElementCount ec;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__AfterEndOfWindow ae;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__Repeat rp;
    org__apache__beam__model__pipeline__v1__trigger__init(&count);
    org__apache__beam__model__pipeline__v1__trigger__init(&eow);
    org__apache__beam__model__pipeline__v1__trigger__init(&rep);
    org__apache__beam__model__pipeline__v1__trigger__element_count__init(&ec);
    org__apache__beam__model__pipeline__v1__trigger__after_end_of_window__init(&ae);
    org__apache__beam__model__pipeline__v1__trigger__repeat__init(&rp);
    ec.element_count = 3;
    count.trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_ELEMENT_COUNT;
    count.element_count = &ec;
    ae.early_firings = &count;
    eow.trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_END_OF_WINDOW;
    eow.after_end_of_window = &ae;
    rp.subtrigger = &eow;
    rep.trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_REPEAT;
    rep.repeat = &rp;
    pb_wstrat *w = tb_ws(&b, "trig", SD_URN_WINDOW_FN_FIXED, tb_fixed(&b, 1000, 0), "iw");
    w->trigger = &rep;
    w->accumulation_mode =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__ACCUMULATING;
    w->allowed_lateness = 5000;
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "trig");
    tb_pcoll(&b, "p_g", "kv_str_varint", "trig");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_windowing *win = sd_plan_find_windowing(plan, "trig");
    assert_non_null(win->trigger);
    assert_int_equal(win->trigger->kind, SD_PLAN_TRIGGER_REPEAT);
    assert_int_equal(win->trigger->n_subtriggers, 1);
    const sd_plan_trigger *e = &win->trigger->subtriggers[0];
    assert_int_equal(e->kind, SD_PLAN_TRIGGER_AFTER_END_OF_WINDOW);
    assert_non_null(e->early);
    assert_null(e->late);
    assert_int_equal(e->early->kind, SD_PLAN_TRIGGER_ELEMENT_COUNT);
    assert_int_equal(e->early->element_count, 3);
    assert_int_equal(win->accumulation, SD_PLAN_ACCUMULATING);
    assert_int_equal(win->allowed_lateness_ms, 5000);
    sd_plan_destroy(plan);

    /* default_trigger_only rejects it. */
    sd_plan_options o = OPTS;
    o.default_trigger_only = true;
    sd_err err = { 0 };
    assert_int_equal(sd_plan_validate_ex(p, &o, NULL, &err), SD_EUNIMPL);
    assert_non_null(strstr(sd_err_msg(&err), "non-default trigger"));
    free_pipeline(p);
}

/* Java's continuation of AfterProcessingTime (the trigger of a GroupByKey downstream of one
 * triggered by processing time): accepted, and translated for the engine. */
static void test_trigger_synchronized_processing_time(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    Org__Apache__Beam__Model__Pipeline__V1__Trigger sync, rep;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__AfterSynchronizedProcessingTime sp;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__Repeat rp;
    org__apache__beam__model__pipeline__v1__trigger__init(&sync);
    org__apache__beam__model__pipeline__v1__trigger__init(&rep);
    org__apache__beam__model__pipeline__v1__trigger__after_synchronized_processing_time__init(&sp);
    org__apache__beam__model__pipeline__v1__trigger__repeat__init(&rp);
    sync.trigger_case =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME;
    sync.after_synchronized_processing_time = &sp;
    rp.subtrigger = &sync;
    rep.trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_REPEAT;
    rep.repeat = &rp;
    pb_wstrat *w = tb_ws(&b, "trig", SD_URN_WINDOW_FN_GLOBAL, NO_PAYLOAD, "gw");
    w->trigger = &rep;
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "trig");
    tb_pcoll(&b, "p_g", "kv_str_varint", "trig");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_windowing *win = sd_plan_find_windowing(plan, "trig");
    assert_non_null(win->trigger);
    assert_int_equal(win->trigger->kind, SD_PLAN_TRIGGER_REPEAT);
    assert_int_equal(win->trigger->n_subtriggers, 1);
    assert_int_equal(win->trigger->subtriggers[0].kind,
                     SD_PLAN_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

int test_plan_run_windowing(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windowing_table),
        cmocka_unit_test(test_windowing_overflow),
        cmocka_unit_test(test_closing_behavior),
        cmocka_unit_test(test_trigger_tree),
        cmocka_unit_test(test_trigger_synchronized_processing_time),
    };
    return cmocka_run_group_tests_name("plan_windowing", tests, NULL, NULL);
}
