/*
 * Unit tests for runner/plan: the test_plan executable's main and its end-to-end cases.
 *
 * This file holds word count lifted and unlifted (stages, descriptors, coders), determinism,
 * the length-prefix rule table, unknown fields surviving into descriptors, and the real
 * TypeScript SDK pipelines (the .pb fixtures in tests/data/plan). The other concerns have a
 * file each, run as one cmocka group per file: windowing translation (test_plan_windowing.c),
 * graph shapes and fusion (test_plan_graph.c), validation, damaged pipelines and the OOM loop
 * (test_plan_validate.c). Pipelines are built with the harness of test_plan_harness.h.
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

/* ----------------------------------------------------------------------------------------- */
/* Word count and determinism                                                                 */
/* ----------------------------------------------------------------------------------------- */

static void test_wordcount_lifted(void **state)
{
    (void)state;
    pb_pipeline *p = wordcount();
    sd_plan *plan = build_ok(p, &OPTS);

    assert_int_equal(plan->n_stages, 4);
    assert_int_equal(plan->stages[0].kind, SD_PLAN_STAGE_IMPULSE);
    assert_int_equal(plan->stages[1].kind, SD_PLAN_STAGE_SDK);
    assert_int_equal(plan->stages[2].kind, SD_PLAN_STAGE_GBK);
    assert_int_equal(plan->stages[3].kind, SD_PLAN_STAGE_SDK);
    assert_string_equal(plan->stages[0].id, "stage-001");
    assert_string_equal(plan->stages[3].id, "stage-004");
    assert_int_equal(plan->teststream_stage, SD_PLAN_NONE);

    const sd_plan_stage *s1 = &plan->stages[1];
    assert_int_equal(s1->n_transforms, 4);
    assert_string_equal(s1->transforms[0], "create");
    assert_string_equal(s1->transforms[1], "split");
    assert_string_equal(s1->transforms[2], "pair");
    assert_string_equal(s1->transforms[3], "count/Precombine");
    assert_string_equal(s1->environment_id, "js");
    assert_string_equal(s1->inputs[0], "p_imp");
    assert_int_equal(s1->n_outputs, 1);
    assert_string_equal(s1->outputs[0].pcollection, "count/lifted");
    assert_int_equal(s1->n_upstream, 1);
    assert_int_equal(s1->upstream[0], 0);

    const sd_plan_stage *gbk = &plan->stages[2];
    assert_string_equal(gbk->transforms[0], "count/Group");
    assert_string_equal(gbk->inputs[0], "count/lifted");
    assert_string_equal(gbk->outputs[0].pcollection, "count/grouped");
    assert_null(gbk->outputs[0].sink_transform);
    assert_string_equal(gbk->windowing_strategy_id, "global");
    assert_string_equal(gbk->key_coder_id, "gen_lp");
    assert_string_equal(gbk->value_coder_id, "gen_lp");
    assert_string_equal(gbk->environment_id, "");

    const sd_plan_stage *s3 = &plan->stages[3];
    assert_int_equal(s3->n_transforms, 3);
    assert_string_equal(s3->transforms[0], "count/Merge");
    assert_string_equal(s3->transforms[1], "count/Extract");
    assert_string_equal(s3->transforms[2], "format");
    assert_int_equal(s3->n_outputs, 0); /* the leaf output has no consumer: no sink */

    /* The PCollection table: only boundary PCollections, with wire and port coders. */
    assert_int_equal(plan->n_pcollections, 3);
    const sd_plan_pcollection *imp = sd_plan_find_pcollection(plan, "p_imp");
    assert_non_null(imp);
    assert_string_equal(imp->wire_coder_id, "bytes");
    assert_string_equal(imp->port_coder_id, "wv:bytes:gw");
    assert_int_equal(imp->producer_stage, 0);
    assert_int_equal(imp->n_consumers, 1);
    assert_int_equal(imp->consumers[0].stage, 1);
    assert_false(imp->consumers[0].side_input);
    assert_null(sd_plan_find_pcollection(plan, "p_words"));
    const sd_plan_pcollection *lifted = sd_plan_find_pcollection(plan, "count/lifted");
    assert_string_equal(lifted->coder_id, "count/kv_acc");
    assert_string_equal(lifted->wire_coder_id, "count/kv_acc_lp");
    assert_string_equal(lifted->windowing->id, "global");
    assert_int_equal(lifted->windowing->kind, SD_PLAN_WINDOW_GLOBAL);
    assert_true(lifted->bounded);
    const sd_plan_pcollection *grouped = sd_plan_find_pcollection(plan, "count/grouped");
    assert_string_equal(grouped->wire_coder_id, "count/kv_acc_iter_lp");

    /* The coder table holds the synthesized coders. */
    const sd_plan_coder *kia = sd_plan_find_coder(plan, "count/kv_acc_iter_lp");
    assert_non_null(kia);
    assert_string_equal(kia->urn, SD_URN_CODER_KV);
    assert_int_equal(kia->n_components, 2);
    assert_string_equal(kia->components[0], "gen_lp");
    assert_string_equal(kia->components[1], "count/acc_iter_lp");
    const sd_plan_coder *lp = sd_plan_find_coder(plan, "gen_lp");
    assert_string_equal(lp->urn, SD_URN_CODER_LENGTH_PREFIX);
    assert_string_equal(lp->components[0], "gen");

    /* Descriptor of stage 2: source, fused transforms, one sink. */
    const pb_pbd *d = s1->descriptor;
    assert_string_equal(d->id, "stage-002");
    assert_int_equal(d->n_transforms, 6);
    const pb_transform *src = desc_transform(d, s1->source_transform);
    assert_non_null(src);
    assert_string_equal(src->spec->urn, SD_URN_RUNNER_SOURCE);
    assert_string_equal(src->outputs[0]->value, "p_imp");
    assert_string_equal(port_coder_of(src), "wv:bytes:gw");
    const pb_transform *sink = desc_transform(d, s1->outputs[0].sink_transform);
    assert_non_null(sink);
    assert_string_equal(sink->spec->urn, SD_URN_RUNNER_SINK);
    assert_string_equal(sink->inputs[0]->value, "count/lifted");
    assert_string_equal(port_coder_of(sink), "wv:count/kv_acc_lp:gw");
    const pb_transform *pre = desc_transform(d, "count/Precombine");
    assert_string_equal(pre->spec->urn, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE);
    assert_string_equal(pre->environment_id, "js");
    /* The descriptor's boundary PCollection carries the wire coder; internal ones do not. */
    assert_string_equal(desc_pcoll(d, "count/lifted")->coder_id, "count/kv_acc_lp");
    assert_string_equal(desc_pcoll(d, "p_words")->coder_id, "gen");
    assert_desc_coder(d, "count/kv_acc_lp", SD_URN_CODER_KV, "gen_lp,gen_lp");
    assert_desc_coder(d, "gen_lp", SD_URN_CODER_LENGTH_PREFIX, "gen");
    assert_desc_coder(d, "wv:count/kv_acc_lp:gw", SD_URN_CODER_WINDOWED_VALUE,
                      "count/kv_acc_lp,gw");
    assert_non_null(d->state_api_service_descriptor);
    assert_string_equal(d->state_api_service_descriptor->url, "localhost:2222");
    assert_null(d->timer_api_service_descriptor);
    assert_int_equal(d->n_environments, 1);
    assert_string_equal(d->environments[0]->key, "js");
    assert_int_equal(d->n_windowing_strategies, 1);

    /* Packed bytes and message agree. */
    pb_pbd *again = org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__unpack(
        NULL, s1->descriptor_bytes.len, s1->descriptor_bytes.ptr);
    assert_non_null(again);
    assert_string_equal(again->id, "stage-002");
    org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__free_unpacked(again,
                                                                                         NULL);

    assert_int_equal(plan->n_environments, 1);
    assert_string_equal(plan->environments[0].urn, SD_URN_ENV_EXTERNAL);

    sd_buf text;
    sd_buf_init(&text, 0);
    assert_int_equal(sd_plan_describe(plan, &text), SD_OK);
    assert_int_equal(sd_buf_append_byte(&text, 0), SD_OK);
    const char *expect_first = "stage-001 impulse [impulse] in= out=p_imp\n"
                               "stage-002 sdk env=js [create, split, pair, count/Precombine] "
                               "in=p_imp out=count/lifted\n";
    assert_memory_equal(text.data, expect_first, strlen(expect_first));
    assert_non_null(strstr((const char *)text.data,
                           "pcollection count/lifted coder=count/kv_acc wire=count/kv_acc_lp"));
    sd_buf_deinit(&text);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_wordcount_unlifted(void **state)
{
    (void)state;
    pb_pipeline *p = wordcount();
    sd_plan_options o = OPTS;
    o.lift_combiners = false;
    sd_plan *plan = build_ok(p, &o);
    assert_int_equal(plan->n_stages, 4);
    assert_int_equal(plan->stages[2].kind, SD_PLAN_STAGE_GBK);
    assert_string_equal(plan->stages[2].transforms[0], "count/gbk");
    assert_int_equal(plan->stages[1].n_transforms, 3);
    assert_string_equal(plan->stages[1].transforms[2], "pair");
    assert_string_equal(plan->stages[3].transforms[0], "count/combine");
    const sd_plan_pcollection *kv = sd_plan_find_pcollection(plan, "p_kv");
    assert_string_equal(kv->wire_coder_id, "kv_gen_lp");
    const sd_plan_pcollection *g = sd_plan_find_pcollection(plan, "p_grouped");
    assert_string_equal(g->wire_coder_id, "kv_gen_iter_gen_lp");
    const sd_plan_coder *k = sd_plan_find_coder(plan, "kv_gen_iter_gen_lp");
    assert_string_equal(k->components[0], "gen_lp");
    assert_string_equal(k->components[1], "iter_gen_lp");
    const sd_plan_coder *it = sd_plan_find_coder(plan, "iter_gen_lp");
    assert_string_equal(it->urn, SD_URN_CODER_ITERABLE);
    assert_string_equal(it->components[0], "gen_lp");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* Deterministic: two builds give identical descriptor bytes. */
static void test_deterministic(void **state)
{
    (void)state;
    pb_pipeline *p = wordcount();
    sd_plan *a = build_ok(p, &OPTS);
    sd_plan *b = build_ok(p, &OPTS);
    assert_int_equal(a->n_stages, b->n_stages);
    for (size_t i = 0; i < a->n_stages; i++) {
        assert_string_equal(a->stages[i].id, b->stages[i].id);
        assert_int_equal(a->stages[i].descriptor_bytes.len, b->stages[i].descriptor_bytes.len);
        if (a->stages[i].descriptor_bytes.len > 0) {
            assert_memory_equal(a->stages[i].descriptor_bytes.ptr,
                                b->stages[i].descriptor_bytes.ptr,
                                a->stages[i].descriptor_bytes.len);
        }
    }
    sd_plan_destroy(a);
    sd_plan_destroy(b);
    free_pipeline(p);
}

/* ----------------------------------------------------------------------------------------- */
/* LP exactness and unknown fields                                                            */
/* ----------------------------------------------------------------------------------------- */

static void test_lp_rule_table(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    /* Rows: PCollection coder -> expected wire coder id, its URN and components. */
    tb_coder(&b, "row", SD_URN_CODER_ROW, "");
    tb_coder(&b, "lp_gen", SD_URN_CODER_LENGTH_PREFIX, "gen");
    tb_coder(&b, "null_gen", SD_URN_CODER_NULLABLE, "gen");
    tb_coder(&b, "kv_varint_iter_str", SD_URN_CODER_KV, "varint,iter_str");
    tb_coder(&b, "iter_str", SD_URN_CODER_ITERABLE, "str");
    tb_coder(&b, "kv_row_kv", SD_URN_CODER_KV, "row,kv_str_gen");
    tb_coder(&b, "gen_lp", SD_URN_CODER_BYTES, ""); /* a taken id forces a suffix */
    /* Elements that are windowed values themselves (Java's Create.windowedValues): the whole
     * coder is length-prefixed, or the Java SDK harness would use its value coder; nested
     * deeper it stays structural. */
    tb_coder(&b, "wv_str", SD_URN_CODER_WINDOWED_VALUE, "str,gw");
    tb_coder(&b, "kv_str_wv", SD_URN_CODER_KV, "str,wv_str");

    static const struct {
        const char *coder, *wire, *urn, *comps;
    } rows[] = {
        { "str", "str", SD_URN_CODER_STRING_UTF8, "" },
        { "gen", "gen_lp_2", SD_URN_CODER_LENGTH_PREFIX, "gen" },
        { "row", "row_lp", SD_URN_CODER_LENGTH_PREFIX, "row" },
        { "lp_gen", "lp_gen", SD_URN_CODER_LENGTH_PREFIX, "gen" },
        { "null_gen", "null_gen_lp", SD_URN_CODER_NULLABLE, "gen_lp_2" },
        { "kv_varint_iter_str", "kv_varint_iter_str", SD_URN_CODER_KV, "varint,iter_str" },
        { "kv_str_gen", "kv_str_gen_lp", SD_URN_CODER_KV, "str,gen_lp_2" },
        { "kv_row_kv", "kv_row_kv_lp", SD_URN_CODER_KV, "row_lp,kv_str_gen_lp" },
        { "wv_str", "wv_str_lp", SD_URN_CODER_LENGTH_PREFIX, "wv_str" },
        { "kv_str_wv", "kv_str_wv", SD_URN_CODER_KV, "str,wv_str" },
    };

    size_t n = sizeof(rows) / sizeof(rows[0]);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    /* One producer with n outputs, each consumed by a separate (env-split) consumer. */
    tb_env(&b, "other", SD_URN_ENV_PROCESS);
    char outs[1024] = "";
    for (size_t i = 0; i < n; i++) {
        char pc[32], tid[32], in[64], o[64];
        snprintf(pc, sizeof(pc), "p%zu", i);
        tb_pcoll(&b, pc, rows[i].coder, "global");
        snprintf(o, sizeof(o), "%so%zu=%s", i ? "," : "", i, pc);
        strcat(outs, o);
        snprintf(tid, sizeof(tid), "c%zu", i);
        snprintf(in, sizeof(in), "in=%s", pc);
        char out[64];
        snprintf(out, sizeof(out), "out=q%zu", i);
        char q[32];
        snprintf(q, sizeof(q), "q%zu", i);
        tb_pcoll(&b, q, "bytes", "global");
        tb_transform(&b, tid, SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "other", in, out, NULL);
    }
    tb_transform(&b, "multi", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", outs,
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *s = stage_with(plan, "multi");
    assert_int_equal(s->n_outputs, n);
    for (size_t i = 0; i < n; i++) {
        char pc[32];
        snprintf(pc, sizeof(pc), "p%zu", i);
        print_message("row %s\n", rows[i].coder);
        const sd_plan_pcollection *pp = sd_plan_find_pcollection(plan, pc);
        assert_non_null(pp);
        assert_string_equal(pp->coder_id, rows[i].coder);
        assert_string_equal(pp->wire_coder_id, rows[i].wire);
        /* The producer's descriptor and the consumer's both use the wire coder. */
        assert_desc_coder(s->descriptor, rows[i].wire, rows[i].urn, rows[i].comps);
        assert_string_equal(desc_pcoll(s->descriptor, pc)->coder_id, rows[i].wire);
        char tid[32];
        snprintf(tid, sizeof(tid), "c%zu", i);
        const pb_pbd *cd = stage_with(plan, tid)->descriptor;
        assert_string_equal(desc_pcoll(cd, pc)->coder_id, rows[i].wire);
        assert_desc_coder(cd, rows[i].wire, rows[i].urn, rows[i].comps);
    }
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* Inside a stage too, a PCollection of windowed values is named with the length-prefixed coder,
 * and a PCollection of any other coder keeps the SDK's own. */
static void test_windowed_value_elements_inside_stage(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "wv_str", SD_URN_CODER_WINDOWED_VALUE, "str,gw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_wv", "wv_str", "global");
    tb_pcoll(&b, "p_gen", "gen", "global");
    tb_pcoll(&b, "p_out", "str", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "read", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_wv", NULL);
    tb_transform(&b, "convert", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_wv",
                 "out=p_gen", NULL);
    tb_transform(&b, "last", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_gen",
                 "out=p_out", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *s = stage_with(plan, "read");
    assert_ptr_equal(s, stage_with(plan, "convert"));
    assert_ptr_equal(s, stage_with(plan, "last"));
    assert_null(sd_plan_find_pcollection(plan, "p_wv")); /* not a boundary */
    assert_string_equal(desc_pcoll(s->descriptor, "p_wv")->coder_id, "wv_str_lp");
    assert_desc_coder(s->descriptor, "wv_str_lp", SD_URN_CODER_LENGTH_PREFIX, "wv_str");
    assert_desc_coder(s->descriptor, "wv_str", SD_URN_CODER_WINDOWED_VALUE, "str,gw");
    assert_string_equal(desc_pcoll(s->descriptor, "p_gen")->coder_id, "gen");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_unknown_fields_survive(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "bytes", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    pb_transform *a = tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                                   "in=p_imp", "out=p_a", NULL);
    /* A length-delimited field 99: the stored data holds varint(len) and the bytes. */
    static uint8_t data[] = { 0x02, 'h', 'i' };
    ProtobufCMessageUnknownField *uf = tb_alloc(&b, sizeof(*uf));
    uf->tag = 99;
    uf->wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
    uf->len = 3;
    uf->data = data;
    a->base.n_unknown_fields = 1;
    a->base.unknown_fields = uf;
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const pb_transform *t = desc_transform(stage_with(plan, "a")->descriptor, "a");
    assert_int_equal(t->base.n_unknown_fields, 1);
    assert_int_equal(t->base.unknown_fields[0].tag, 99);
    assert_int_equal(t->base.unknown_fields[0].len, 3);
    assert_memory_equal(t->base.unknown_fields[0].data, data, 3);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* ----------------------------------------------------------------------------------------- */
/* TypeScript SDK fixtures                                                                    */
/* ----------------------------------------------------------------------------------------- */

static bool has_transform_urn(const sd_plan *plan, const char *urn)
{
    for (size_t i = 0; i < plan->n_stages; i++) {
        const pb_pbd *d = plan->stages[i].descriptor;
        for (size_t j = 0; d != NULL && j < d->n_transforms; j++) {
            if (strcmp(d->transforms[j]->value->spec->urn, urn) == 0) {
                return true;
            }
        }
    }
    return false;
}

/* The TypeScript SDK's pipelines (tests/data/plan/make_fixtures.js wrote them). */
typedef struct ts_fixture_row {
    plan_case head; /* name: the fixture file */
    size_t min_stages;
    bool lifted; /* by default: never for the TS SDK's integer accumulators */
    bool side_input;
    bool sessions;
    bool lifted_when_forced; /* with force_lift (sundial_lift_combiners=true) */
} ts_fixture_row;

static pb_pipeline *ts_fixture_pipeline(const void *row)
{
    const char *file = ((const ts_fixture_row *)row)->head.name;
    pb_pipeline *p = load_fixture(file);
    if (p == NULL) {
        fail_msg("fixture %s missing (run tests/data/plan/make_fixtures.js)", file);
    }
    return p;
}

static void ts_fixture_check(const sd_plan *plan, const pb_pipeline *p, const void *row)
{
    const ts_fixture_row *r = row;
    assert_true(plan->n_stages >= r->min_stages);
    assert_int_equal(plan->stages[0].kind, SD_PLAN_STAGE_IMPULSE);
    assert_int_equal(has_transform_urn(plan, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE),
                     r->lifted);
    {
        /* The TypeScript SDK's count is lifted only when the pipeline forces it. */
        sd_plan_options forced = OPTS;
        forced.force_lift = true;
        sd_plan *fp = build_ok(p, &forced);
        assert_int_equal(has_transform_urn(fp, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE),
                         r->lifted_when_forced);
        sd_plan_destroy(fp);
    }
    bool any_side = false;
    bool sessions = false;
    for (size_t s = 0; s < plan->n_stages; s++) {
        const sd_plan_stage *st = &plan->stages[s];
        any_side = any_side || st->n_side_inputs > 0;
        if (st->kind == SD_PLAN_STAGE_SDK) {
            assert_string_equal(st->descriptor->state_api_service_descriptor->url,
                                "localhost:2222");
        }
        if (st->kind == SD_PLAN_STAGE_GBK) {
            const sd_plan_windowing *w = sd_plan_find_windowing(plan, st->windowing_strategy_id);
            sessions = sessions || w->kind == SD_PLAN_WINDOW_SESSIONS;
        }
    }
    assert_int_equal(any_side, r->side_input);
    assert_int_equal(sessions, r->sessions);
    /* Every genericobjectjs PCollection on a boundary is length-prefixed. */
    for (size_t j = 0; j < plan->n_pcollections; j++) {
        const sd_plan_coder *w = sd_plan_find_coder(plan, plan->pcollections[j].wire_coder_id);
        assert_non_null(w);
        assert_string_not_equal(w->urn, GEN);
    }
}

static void test_ts_fixtures(void **state)
{
    static const ts_fixture_row rows[] = {
        { { "ts_wordcount.pb", NULL }, 4, false, false, false, true },
        { { "ts_windowed_gbk.pb", NULL }, 4, false, false, false, false },
        { { "ts_side_input.pb", NULL }, 3, false, true, false, false },
        { { "ts_sessions_combine.pb", NULL }, 4, false, false, true, false },
        { { "ts_flatten.pb", NULL }, 4, false, false, false, false },
    };
    (void)state;
    RUN_PLAN_CASES(rows, ts_fixture_pipeline, SD_OK, ts_fixture_check);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wordcount_lifted),
        cmocka_unit_test(test_wordcount_unlifted),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_lp_rule_table),
        cmocka_unit_test(test_windowed_value_elements_inside_stage),
        cmocka_unit_test(test_unknown_fields_survive),
        cmocka_unit_test(test_ts_fixtures),
    };
    int failed = cmocka_run_group_tests_name("plan", tests, NULL, NULL);
    failed += test_plan_run_windowing();
    failed += test_plan_run_graph();
    failed += test_plan_run_fusion();
    failed += test_plan_run_validate();
    return failed;
}
