/*
 * Unit tests of the C SDK's time features, without a runner:
 *   - the TestStream transform in the produced Pipeline proto (payload coder id, events in
 *     order with explicit tags, elements in the outer context, unbounded outputs and
 *     downstream PCollections);
 *   - every trigger builder, as the Trigger tree in the WindowingStrategy (table-driven, with
 *     accumulation mode, output time and allowed lateness);
 *   - the per-pane assertion composite (pane selection before the global rewindow);
 *   - the bundle processor reassembling timers cut anywhere across data messages (a real
 *     descriptor from the planner, a stream cut at every byte offset);
 *   - out of memory at every allocation while building a TestStream and triggers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/plan/plan.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/sdk_int.h"

#define PLF(x) org__apache__beam__model__pipeline__v1__##x
typedef SD_PL(Pipeline) pb_Pl;
typedef SD_PL(PTransform) pb_PT;
typedef SD_PL(Trigger) pb_Trig;

/* ---------------------------------------------------------------- proto helpers */

static pb_Pl *to_proto(sd_pipeline *p)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_to_proto(p, NULL, SD_BYTES_NULL, &bytes, &len, &err);
    if (st != SD_OK) {
        fail_msg("to_proto: %s", sd_err_msg(&err));
    }
    pb_Pl *pl = PLF(pipeline__unpack)(NULL, len, bytes);
    sd_free(bytes);
    assert_non_null(pl);
    return pl;
}

static const pb_PT *find_transform(const pb_Pl *pl, const char *id)
{
    for (size_t i = 0; i < pl->components->n_transforms; i++) {
        if (strcmp(pl->components->transforms[i]->key, id) == 0) {
            return pl->components->transforms[i]->value;
        }
    }
    fail_msg("no transform %s", id);
    return NULL;
}

static const SD_PL(PCollection) * find_pcoll(const pb_Pl *pl, const char *id)
{
    for (size_t i = 0; i < pl->components->n_pcollections; i++) {
        if (strcmp(pl->components->pcollections[i]->key, id) == 0) {
            return pl->components->pcollections[i]->value;
        }
    }
    fail_msg("no PCollection %s", id);
    return NULL;
}

static const SD_PL(WindowingStrategy) * find_ws(const pb_Pl *pl, const char *id)
{
    for (size_t i = 0; i < pl->components->n_windowing_strategies; i++) {
        if (strcmp(pl->components->windowing_strategies[i]->key, id) == 0) {
            return pl->components->windowing_strategies[i]->value;
        }
    }
    fail_msg("no windowing strategy %s", id);
    return NULL;
}

static const char *output_of(const pb_PT *t, const char *local)
{
    for (size_t i = 0; i < t->n_outputs; i++) {
        if (strcmp(t->outputs[i]->key, local) == 0) {
            return t->outputs[i]->value;
        }
    }
    fail_msg("transform %s has no output %s", t->unique_name, local);
    return NULL;
}

/* ---------------------------------------------------------------- TestStream proto */

static sd_status noop_process(sd_ctx *c, void *state)
{
    (void)state;
    return sd_emit(c, 0, sd_ctx_element(c));
}

static int setup_group(void **state)
{
    static const sd_dofn noop = { .process = noop_process };
    (void)state;
    return sd_register_dofn("u:noop", &noop) == SD_OK ? 0 : -1;
}

static void test_teststream_proto(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("ts-proto");
    const char *const tags[] = { "left", "right" };
    sd_teststream *ts = sd_teststream_create(p, "Stream", sd_pcoder_string(p), tags, 2);
    const char *const strs[] = { "ab", "" };
    const sd_time tss[] = { 5, -7 };
    sd_teststream_add_strings(ts, "right", strs, tss, 2);
    sd_teststream_advance_watermark(ts, "left", 100);
    sd_teststream_advance_processing_time(ts, 2500);
    sd_teststream_advance_watermark(ts, NULL, 200);    /* one event per tag */
    sd_teststream_add_strings(ts, NULL, strs, tss, 1); /* NULL = the first tag */
    sd_teststream_advance_watermark_to_infinity(ts);
    sd_pcoll *right = sd_teststream_output(ts, "right");
    sd_pcoll *after = sd_apply(p, "After", right, "u:noop", SD_BYTES_NULL, NULL);
    sd_pcoll *bounded = sd_create_strings(p, "Bounded", strs, 1);
    assert_null(sd_pipeline_error(p));

    pb_Pl *pl = to_proto(p);
    const pb_PT *t = find_transform(pl, "Stream");
    assert_string_equal(t->spec->urn, SD_URN_TRANSFORM_TEST_STREAM);
    assert_int_equal(t->n_inputs, 0);
    assert_int_equal(t->n_outputs, 2);
    assert_string_equal(output_of(t, "right"), sd_pcoll_id(right));
    const SD_PL(PCollection) *rpc = find_pcoll(pl, sd_pcoll_id(right));
    assert_int_equal(rpc->is_bounded,
                     ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__UNBOUNDED);
    assert_int_equal(find_pcoll(pl, sd_pcoll_id(after))->is_bounded,
                     ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__UNBOUNDED);
    assert_int_equal(find_pcoll(pl, sd_pcoll_id(bounded))->is_bounded,
                     ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__BOUNDED);

    SD_PL(TestStreamPayload) *tp =
        PLF(test_stream_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
    assert_non_null(tp);
    assert_string_equal(tp->coder_id, rpc->coder_id);
    /* elements(right), wm(left), pt, wm(left), wm(right), elements(left), wm x2 */
    assert_int_equal(tp->n_events, 8);
    const SD_PL(TestStreamPayload__Event) *const *ev =
        (const SD_PL(TestStreamPayload__Event) *const *)tp->events;
#define EV(x) ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__EVENT__EVENT_##x
    assert_int_equal(ev[0]->event_case, EV(ELEMENT_EVENT));
    assert_string_equal(ev[0]->element_event->tag, "right");
    assert_int_equal(ev[0]->element_event->n_elements, 2);
    /* Outer context: a string is its bytes, without the length prefix. */
    assert_int_equal(ev[0]->element_event->elements[0]->encoded_element.len, 2);
    assert_memory_equal(ev[0]->element_event->elements[0]->encoded_element.data, "ab", 2);
    assert_int_equal(ev[0]->element_event->elements[0]->timestamp, 5);
    assert_int_equal(ev[0]->element_event->elements[1]->encoded_element.len, 0);
    assert_int_equal(ev[0]->element_event->elements[1]->timestamp, -7);
    assert_int_equal(ev[1]->event_case, EV(WATERMARK_EVENT));
    assert_string_equal(ev[1]->watermark_event->tag, "left");
    assert_int_equal(ev[1]->watermark_event->new_watermark, 100);
    assert_int_equal(ev[2]->event_case, EV(PROCESSING_TIME_EVENT));
    assert_int_equal(ev[2]->processing_time_event->advance_duration, 2500);
    assert_string_equal(ev[3]->watermark_event->tag, "left");
    assert_string_equal(ev[4]->watermark_event->tag, "right");
    assert_int_equal(ev[4]->watermark_event->new_watermark, 200);
    assert_string_equal(ev[5]->element_event->tag, "left");
    assert_int_equal(ev[6]->watermark_event->new_watermark, SD_TIME_MAX);
    assert_int_equal(ev[7]->watermark_event->new_watermark, SD_TIME_MAX);
#undef EV
    PLF(test_stream_payload__free_unpacked)(tp, NULL);
    PLF(pipeline__free_unpacked)(pl, NULL);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- trigger protos */

/* A compact rendering of a Trigger tree. */
static void render_trigger(const pb_Trig *t, sd_buf *out)
{
#define TC(x) ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_##x
    const char *name = "?";
    size_t n = 0;
    pb_Trig *const *subs = NULL;
    switch (t->trigger_case) {
    case TC(DEFAULT):
        assert_int_equal(sd_buf_append_str(out, "Default"), SD_OK);
        return;
    case TC(NEVER):
        assert_int_equal(sd_buf_append_str(out, "Never"), SD_OK);
        return;
    case TC(ALWAYS):
        assert_int_equal(sd_buf_append_str(out, "Always"), SD_OK);
        return;
    case TC(ELEMENT_COUNT):
        assert_int_equal(sd_buf_printf(out, "Count(%d)", (int)t->element_count->element_count),
                         SD_OK);
        return;
    case TC(AFTER_PROCESSING_TIME): {
        assert_int_equal(sd_buf_append_str(out, "ProcessingTime("), SD_OK);
        for (size_t i = 0; i < t->after_processing_time->n_timestamp_transforms; i++) {
            const SD_PL(TimestampTransform) *tt = t->after_processing_time->timestamp_transforms[i];
            if (tt->timestamp_transform_case ==
                ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIMESTAMP_TRANSFORM__TIMESTAMP_TRANSFORM_DELAY) {
                assert_int_equal(sd_buf_printf(out, "%sdelay %lld", i > 0 ? "," : "",
                                               (long long)tt->delay->delay_millis),
                                 SD_OK);
            } else {
                assert_int_equal(sd_buf_printf(out, "%salign %lld+%lld", i > 0 ? "," : "",
                                               (long long)tt->align_to->period,
                                               (long long)tt->align_to->offset),
                                 SD_OK);
            }
        }
        assert_int_equal(sd_buf_append_str(out, ")"), SD_OK);
        return;
    }
    case TC(AFTER_END_OF_WINDOW):
        assert_int_equal(sd_buf_append_str(out, "Watermark("), SD_OK);
        if (t->after_end_of_window->early_firings != NULL) {
            assert_int_equal(sd_buf_append_str(out, "early="), SD_OK);
            render_trigger(t->after_end_of_window->early_firings, out);
        }
        if (t->after_end_of_window->late_firings != NULL) {
            assert_int_equal(sd_buf_append_str(out, ";late="), SD_OK);
            render_trigger(t->after_end_of_window->late_firings, out);
        }
        assert_int_equal(sd_buf_append_str(out, ")"), SD_OK);
        return;
    case TC(REPEAT):
        assert_int_equal(sd_buf_append_str(out, "Repeat("), SD_OK);
        render_trigger(t->repeat->subtrigger, out);
        assert_int_equal(sd_buf_append_str(out, ")"), SD_OK);
        return;
    case TC(OR_FINALLY):
        assert_int_equal(sd_buf_append_str(out, "OrFinally("), SD_OK);
        render_trigger(t->or_finally->main, out);
        assert_int_equal(sd_buf_append_str(out, ","), SD_OK);
        render_trigger(t->or_finally->finally, out);
        assert_int_equal(sd_buf_append_str(out, ")"), SD_OK);
        return;
    case TC(AFTER_ALL):
        name = "All";
        n = t->after_all->n_subtriggers;
        subs = t->after_all->subtriggers;
        break;
    case TC(AFTER_ANY):
        name = "Any";
        n = t->after_any->n_subtriggers;
        subs = t->after_any->subtriggers;
        break;
    case TC(AFTER_EACH):
        name = "Each";
        n = t->after_each->n_subtriggers;
        subs = t->after_each->subtriggers;
        break;
    default:
        fail_msg("unexpected trigger case %d", (int)t->trigger_case);
    }
#undef TC
    assert_int_equal(sd_buf_printf(out, "%s(", name), SD_OK);
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            assert_int_equal(sd_buf_append_str(out, ","), SD_OK);
        }
        render_trigger(subs[i], out);
    }
    assert_int_equal(sd_buf_append_str(out, ")"), SD_OK);
}

static const sd_trigger_spec *tr_none(sd_pipeline *p)
{
    (void)p;
    return NULL;
}

static const sd_trigger_spec *tr_early_late(sd_pipeline *p)
{
    return sd_trigger_after_watermark(p, sd_trigger_after_processing_time(p, 60000),
                                      sd_trigger_after_count(p, 2));
}

static const sd_trigger_spec *tr_late_only(sd_pipeline *p)
{
    return sd_trigger_after_watermark(p, NULL, sd_trigger_always(p));
}

static const sd_trigger_spec *tr_aligned(sd_pipeline *p)
{
    return sd_trigger_after_processing_time_aligned(p, 10, 1000, 7);
}

static const sd_trigger_spec *tr_composites(sd_pipeline *p)
{
    const sd_trigger_spec *shared = sd_trigger_after_count(p, 3);
    const sd_trigger_spec *each[2] = { shared, sd_trigger_never(p) };
    const sd_trigger_spec *any[2] = { sd_trigger_after_each(p, each, 2), shared };
    const sd_trigger_spec *all[1] = { sd_trigger_after_any(p, any, 2) };
    return sd_trigger_or_finally(p, sd_trigger_repeatedly(p, sd_trigger_after_all(p, all, 1)),
                                 sd_trigger_default(p));
}

static void test_trigger_protos(void **state)
{
    (void)state;

    struct {
        const char *name;
        const sd_trigger_spec *(*build)(sd_pipeline *p);
        sd_accumulation_mode acc;
        sd_output_timestamp ot;
        int64_t lateness;
        const char *want;
        int want_acc;
        int want_ot;
    } rows[] = {
        { "default when unset", tr_none, SD_DISCARDING_PANES, SD_OUTPUT_AT_END_OF_WINDOW, 0,
          "Default", ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__DISCARDING,
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW },
        { "early and late", tr_early_late, SD_ACCUMULATING_PANES, SD_OUTPUT_AT_EARLIEST, 3600000,
          "Watermark(early=ProcessingTime(delay 60000);late=Count(2))",
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__ACCUMULATING,
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__EARLIEST_IN_PANE },
        { "late only", tr_late_only, SD_DISCARDING_PANES, SD_OUTPUT_AT_LATEST, 1,
          "Watermark(;late=Always)",
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__DISCARDING,
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__LATEST_IN_PANE },
        { "aligned processing time", tr_aligned, SD_DISCARDING_PANES, SD_OUTPUT_AT_END_OF_WINDOW, 0,
          "ProcessingTime(delay 10,align 1000+7)",
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__DISCARDING,
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW },
        { "composites with a shared node", tr_composites, SD_DISCARDING_PANES,
          SD_OUTPUT_AT_END_OF_WINDOW, 0,
          "OrFinally(Repeat(All(Any(Each(Count(3),Never),Count(3)))),Default)",
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__DISCARDING,
          ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_pipeline *p = sd_pipeline_create("triggers");
        sd_pcoll *in = sd_create_ints(p, "In", (const int64_t[]){ 1 }, 1);
        sd_windowfn wf = { .kind = SD_WINDOW_FIXED,
                           .size_ms = 1000,
                           .allowed_lateness_ms = rows[i].lateness,
                           .trigger = rows[i].build(p),
                           .accumulation = rows[i].acc,
                           .output_time = rows[i].ot };
        sd_pcoll *w = sd_window_into(p, "Window", in, &wf);
        if (sd_pipeline_error(p) != NULL) {
            fail_msg("row %s: %s", rows[i].name, sd_err_msg(sd_pipeline_error(p)));
        }
        pb_Pl *pl = to_proto(p);
        const SD_PL(WindowingStrategy) *ws =
            find_ws(pl, find_pcoll(pl, sd_pcoll_id(w))->windowing_strategy_id);
        sd_buf got;
        sd_buf_init(&got, 0);
        render_trigger(ws->trigger, &got);
        assert_int_equal(sd_buf_append_byte(&got, 0), SD_OK);
        if (strcmp((const char *)got.data, rows[i].want) != 0) {
            fail_msg("row %s: trigger %s, want %s", rows[i].name, (const char *)got.data,
                     rows[i].want);
        }
        assert_int_equal(ws->accumulation_mode, rows[i].want_acc);
        assert_int_equal(ws->output_time, rows[i].want_ot);
        assert_int_equal(ws->allowed_lateness, rows[i].lateness);
        assert_int_equal(
            ws->on_time_behavior,
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ON_TIME_BEHAVIOR__ENUM__FIRE_ALWAYS);
        /* The input keeps the plain global strategy with the default trigger. */
        const SD_PL(WindowingStrategy) *ws0 =
            find_ws(pl, find_pcoll(pl, sd_pcoll_id(in))->windowing_strategy_id);
        assert_int_equal(ws0->trigger->trigger_case,
                         ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_DEFAULT);
        sd_buf_deinit(&got);
        PLF(pipeline__free_unpacked)(pl, NULL);
        sd_pipeline_destroy(p);
    }
}

/* ---------------------------------------------------------------- assertion composite */

static void test_pane_assertion_shape(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("assert-shape");
    sd_teststream *ts = sd_teststream_create(p, "S", sd_pcoder_string(p), NULL, 0);
    sd_windowfn wf = { .kind = SD_WINDOW_FIXED, .size_ms = 1000 };
    sd_pcoll *w = sd_window_into(p, "W", sd_teststream_output(ts, NULL), &wf);
    sd_window win = sd_window_interval(0, 1000);
    const char *const want[] = { "x" };
    sd_assert_strings_in_pane(p, "A", w, &win, SD_PANES_LATE, want, 1);
    sd_assert_strings(p, "B", w, want, 1);
    assert_null(sd_pipeline_error(p));
    pb_Pl *pl = to_proto(p);
    /* A: select (with the window and filter) -> rewindow -> tag/sentinel -> gather -> check. */
    const pb_PT *a = find_transform(pl, "A");
    const char *subs[] = { "A/Select",       "A/Rewindow", "A/Tag",  "A/Sentinel",
                           "A/WithSentinel", "A/Gather",   "A/Check" };
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        bool found = false;
        for (size_t k = 0; k < a->n_subtransforms; k++) {
            found = found || strcmp(a->subtransforms[k], subs[i]) == 0;
        }
        if (!found) {
            fail_msg("assertion A has no subtransform %s", subs[i]);
        }
    }
    /* B selects nothing (every window, every pane) but still leaves pc's windowing. */
    const pb_PT *b = find_transform(pl, "B");
    for (size_t k = 0; k < b->n_subtransforms; k++) {
        assert_string_not_equal(b->subtransforms[k], "B/Select");
    }
    const pb_PT *gather = find_transform(pl, "A/Gather");
    const SD_PL(WindowingStrategy) *gws =
        find_ws(pl, find_pcoll(pl, gather->inputs[0]->value)->windowing_strategy_id);
    assert_int_equal(gws->trigger->trigger_case,
                     ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_DEFAULT);
    assert_string_equal(gws->window_fn->urn, SD_URN_WINDOW_FN_GLOBAL);
    PLF(pipeline__free_unpacked)(pl, NULL);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- timers across chunks */

static char g_fired[64][32];
static size_t g_n_fired;

static sd_status timer_process(sd_ctx *c, void *state)
{
    (void)c;
    (void)state;
    return SD_OK;
}

static sd_status timer_fired(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)c;
    (void)state;
    if (g_n_fired < 64) {
        snprintf(g_fired[g_n_fired++], sizeof(g_fired[0]), "%s/%.*s@%lld", family, (int)tag.len,
                 (const char *)tag.ptr, (long long)sd_ctx_fire_time(c));
    }
    return SD_OK;
}

static sd_status
null_data(void *ctx, const char *transform_id, sd_bytes data, bool is_last, sd_err *err)
{
    (void)ctx;
    (void)transform_id;
    (void)data;
    (void)is_last;
    (void)err;
    return SD_OK;
}

static sd_status null_timers(void *ctx,
                             const char *transform_id,
                             const char *family,
                             sd_bytes data,
                             bool is_last,
                             sd_err *err)
{
    (void)ctx;
    (void)transform_id;
    (void)family;
    (void)data;
    (void)is_last;
    (void)err;
    return SD_OK;
}

static void test_timers_cut_anywhere(void **state)
{
    (void)state;
    static const sd_dofn tdofn = { .process = timer_process, .on_timer = timer_fired };
    assert_int_equal(sd_register_dofn("u:timers", &tdofn), SD_OK);

    /* Create(KV<string, varint>) -> a ParDo with one event-time timer family. */
    sd_pipeline *p = sd_pipeline_create("timers");
    sd_buf e;
    sd_buf_init(&e, 0);
    assert_int_equal(sd_enc_str(&e, "k"), SD_OK);
    assert_int_equal(sd_enc_int(&e, 1), SD_OK);
    sd_bytes item = sd_buf_bytes(&e);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *in = sd_create(p, "In", kv, &item, 1, NULL);
    sd_timer_spec fam = { "fam", SD_EVENT_TIME };
    sd_pardo_spec spec = { .dofn = "u:timers", .n_timers = 1, .timers = &fam };
    sd_pardo(p, "Timed", in, &spec, NULL);
    assert_null(sd_pipeline_error(p));

    sd_arena a = { 0 };
    pb_Pipeline *pl = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd__pipeline_build(p, &a, NULL, SD_BYTES_NULL, false, &pl, &err), SD_OK);
    sd_plan *plan = NULL;
    if (sd_plan_build(pl, NULL, &plan, &err) != SD_OK) {
        fail_msg("plan: %s", sd_err_msg(&err));
    }
    const sd_plan_stage *stage = NULL;
    for (size_t i = 0; i < plan->n_stages; i++) {
        if (plan->stages[i].n_timer_families > 0) {
            stage = &plan->stages[i];
        }
    }
    assert_non_null(stage);
    const sd_plan_timer_family *tf = &stage->timer_families[0];

    /* Three timers with different tags, encoded back to back. */
    sd_coder *str = NULL, *gw = NULL, *tc = NULL;
    assert_int_equal(sd_coder_create(&str, NULL, SD_CODER_STRING_UTF8, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&gw, NULL, SD_CODER_GLOBAL_WINDOW, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&tc, NULL, SD_CODER_TIMER, str, gw, NULL), SD_OK);
    sd_buf stream, key;
    sd_buf_init(&stream, 0);
    sd_buf_init(&key, 0);
    assert_int_equal(sd_enc_str(&key, "k"), SD_OK);
    const char *tags[3] = { "t1", "second", "" };
    for (int i = 0; i < 3; i++) {
        sd_timer t;
        sd_timer_init(&t);
        sd_window g = sd_window_global();
        t.key = sd_buf_bytes(&key);
        t.tag = sd_bytes_str(tags[i]);
        assert_int_equal(sd_windows_set(&t.windows, &g, 1), SD_OK);
        t.fire = 1000 * (i + 1);
        t.hold = t.fire;
        t.pane = SD_PANE_NO_FIRING;
        assert_int_equal(sd_timer_encode(tc, &t, &stream, NULL), SD_OK);
        t.key = SD_BYTES_NULL;
        t.tag = SD_BYTES_NULL;
        sd_timer_deinit(&t);
    }

    sd__bundle_io io = { .data = null_data, .timers = null_timers };
    for (size_t cut = 0; cut <= stream.len; cut++) {
        sd__proc *proc = NULL;
        if (sd__proc_create(stage->descriptor, &proc, &err) != SD_OK) {
            fail_msg("proc: %s", sd_err_msg(&err));
        }
        g_n_fired = 0;
        assert_int_equal(sd__proc_start(proc, "i1", &io, &err), SD_OK);
        assert_int_equal(sd__proc_data(proc, stage->source_transform, SD_BYTES_NULL, true, &err),
                         SD_OK);
        sd_bytes first = sd_bytes_make(stream.data, cut);
        sd_bytes rest = sd_bytes_make(stream.data + cut, stream.len - cut);
        if (sd__proc_timers(proc, tf->transform, tf->family, first, false, &err) != SD_OK ||
            sd__proc_timers(proc, tf->transform, tf->family, rest, true, &err) != SD_OK) {
            fail_msg("cut at %zu: %s", cut, sd_err_msg(&err));
        }
        assert_true(sd__proc_inputs_done(proc));
        sd__bundle_result res;
        sd__bundle_result_init(&res);
        assert_int_equal(sd__proc_finish(proc, &res, &err), SD_OK);
        sd__bundle_result_deinit(&res);
        sd__proc_destroy(proc);
        if (g_n_fired != 3 || strcmp(g_fired[0], "fam/t1@1000") != 0 ||
            strcmp(g_fired[1], "fam/second@2000") != 0 || strcmp(g_fired[2], "fam/@3000") != 0) {
            fail_msg("cut at %zu: fired %zu timers", cut, g_n_fired);
        }
    }

    /* A stream that ends inside a timer is an error naming the family. */
    sd__proc *proc = NULL;
    assert_int_equal(sd__proc_create(stage->descriptor, &proc, &err), SD_OK);
    assert_int_equal(sd__proc_start(proc, "i2", &io, &err), SD_OK);
    assert_int_equal(sd__proc_timers(proc, tf->transform, tf->family, sd_bytes_make(stream.data, 5),
                                     false, &err),
                     SD_OK);
    sd_err_clear(&err);
    assert_int_not_equal(
        sd__proc_timers(proc, tf->transform, tf->family, SD_BYTES_NULL, true, &err), SD_OK);
    assert_non_null(strstr(sd_err_msg(&err), "undecodable timer in family fam"));
    sd__proc_destroy(proc);

    sd_buf_deinit(&stream);
    sd_buf_deinit(&key);
    sd_coder_destroy(tc);
    sd_coder_destroy(gw);
    sd_coder_destroy(str);
    sd_plan_destroy(plan);
    sd_arena_deinit(&a);
    sd_buf_deinit(&e);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- out of memory */

static void test_oom_loop(void **state)
{
    (void)state;
    for (long n = 1; n < 20000; n++) {
        uint8_t *bytes = NULL;
        size_t len = 0;
        sd_alloc_fail_after(n, 0);
        sd_pipeline *p = sd_pipeline_create("oom");
        sd_status st = SD_ENOMEM;
        if (p != NULL) {
            const char *const tags[] = { "a", "b" };
            sd_teststream *ts = sd_teststream_create(p, "S", sd_pcoder_string(p), tags, 2);
            const char *const strs[] = { "x", "y" };
            const sd_time tss[] = { 1, 2 };
            sd_teststream_add_strings(ts, "a", strs, tss, 2);
            sd_teststream_advance_watermark(ts, NULL, 10);
            sd_teststream_advance_processing_time(ts, 5);
            const sd_trigger_spec *subs[2] = { sd_trigger_after_count(p, 2),
                                               sd_trigger_after_processing_time(p, 9) };
            sd_windowfn wf = { .kind = SD_WINDOW_FIXED,
                               .size_ms = 10,
                               .trigger = sd_trigger_after_watermark(
                                   p, sd_trigger_after_any(p, subs, 2), sd_trigger_never(p)) };
            sd_pcoll *w = sd_window_into(p, "W", sd_teststream_output(ts, "b"), &wf);
            sd_window win = sd_window_interval(0, 10);
            sd_assert_strings_in_pane(p, "A", w, &win, SD_PANES_EARLY, strs, 1);
            st = sd_pipeline_to_proto(p, NULL, SD_BYTES_NULL, &bytes, &len, NULL);
        }
        long injected = sd_alloc_injected_failures();
        sd_alloc_fail_after(0, 0);
        sd_free(bytes);
        sd_pipeline_destroy(p);
        if (injected == 0) {
            assert_int_equal(st, SD_OK);
            return;
        }
        if (st == SD_OK) {
            fail_msg("allocation %ld failed but the pipeline was built", n);
        }
    }
    fail_msg("construction never succeeded");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_teststream_proto),
        cmocka_unit_test(test_trigger_protos),
        cmocka_unit_test(test_pane_assertion_shape),
        cmocka_unit_test(test_timers_cut_anywhere),
        cmocka_unit_test(test_oom_loop),
    };
    return cmocka_run_group_tests(tests, setup_group, NULL);
}
