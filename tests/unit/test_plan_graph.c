/*
 * Unit tests for runner/plan: graph shapes. Flatten (transcoding inputs into the output's coder,
 * repeated inputs, Flatten of Flatten as a side input), identity placeholders, side inputs,
 * fusion (stage cycles, stateful roots), Reshuffle elision, splittable DoFn expansion,
 * time-sorted input and TestStream (its stored coder and transcoded outputs).
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

/* The options of the tests below written before sibling fusion: each SDK transform reading a
 * runner stage's output in a stage of its own (what they check does not depend on it). */
static sd_plan_options SEPARATE;

static void test_flatten(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "gen", "global");
    tb_pcoll(&b, "p_b", "str", "global");
    tb_pcoll(&b, "p_all", "gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_b",
                 NULL);
    tb_transform(&b, "flat", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "", "x=p_a,y=p_b", "out=p_all",
                 NULL);
    tb_transform(&b, "use", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_all",
                 "out=p_out", NULL);
    pb_pipeline *p = tb_finish(&b); /* no roots: derived from the tree */
    sd_plan *plan = build_ok(p, &SEPARATE);
    /* impulse, a, b, flatten, use: a and b each read the runner's impulse output. */
    assert_int_equal(plan->n_stages, 5);
    const sd_plan_stage *f = stage_with(plan, "flat");
    assert_int_equal(f->kind, SD_PLAN_STAGE_FLATTEN);
    assert_int_equal(f->n_inputs, 2);
    assert_string_equal(f->inputs[0], "p_a");
    /* p_b (str) differs from the output (gen): an SDK-side Flatten in b's stage re-encodes it
     * into a PCollection of its own; p_a has the output's coder and is read directly. */
    assert_string_equal(f->inputs[1], "flat/transcoded/y");
    assert_string_equal(f->outputs[0].pcollection, "p_all");
    assert_int_equal(f->n_upstream, 2);
    /* Every input arrives in the output's wire coder so bytes concatenate. */
    assert_string_equal(sd_plan_find_pcollection(plan, "p_all")->wire_coder_id, "gen_lp");
    assert_string_equal(sd_plan_find_pcollection(plan, "p_a")->wire_coder_id, "gen_lp");
    assert_string_equal(sd_plan_find_pcollection(plan, "flat/transcoded/y")->wire_coder_id,
                        "gen_lp");
    assert_null(sd_plan_find_pcollection(plan, "p_b")); /* stage-internal now */
    const sd_plan_stage *sb = stage_with(plan, "b");
    assert_ptr_equal(sb, stage_with(plan, "flat/Transcode/y"));
    assert_int_equal(sb->n_outputs, 1);
    assert_string_equal(sb->outputs[0].pcollection, "flat/transcoded/y");
    assert_string_equal(sb->outputs[0].port_coder_id, "wv:gen_lp:gw");
    assert_string_equal(desc_pcoll(sb->descriptor, "p_b")->coder_id, "str");
    assert_string_equal(desc_pcoll(sb->descriptor, "flat/transcoded/y")->coder_id, "gen_lp");
    const pb_transform *tt = desc_transform(sb->descriptor, "flat/Transcode/y");
    assert_non_null(tt);
    assert_string_equal(tt->spec->urn, SD_URN_TRANSFORM_FLATTEN);
    assert_string_equal(tt->environment_id, "js");
    assert_true(stage_index(plan, f) > stage_index(plan, sb));
    assert_true(stage_index(plan, stage_with(plan, "use")) > stage_index(plan, f));
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's test_flatten_and_gbk shape: p_kv (a KV) feeds both a GroupByKey and a Flatten whose
 * output coder is another (gen). The GBK must still see a KV coder; only the Flatten's side is
 * re-encoded (Python's Flatten carries its environment: the transcoders use the producers').
 */
static void test_flatten_transcode_keeps_gbk_coder(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "kv_str_iter_varint", SD_URN_CODER_KV, "str,iter_varint");
    tb_coder(&b, "iter_varint", SD_URN_CODER_ITERABLE, "varint");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "global");
    tb_pcoll(&b, "p_s", "str", "global");
    tb_pcoll(&b, "p_all", "gen", "global");
    tb_pcoll(&b, "p_g", "kv_str_iter_varint", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_s",
                 NULL);
    tb_transform(&b, "flat", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=p_kv,1=p_s",
                 "out=p_all", NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &SEPARATE);
    const sd_plan_pcollection *kv = sd_plan_find_pcollection(plan, "p_kv");
    assert_non_null(kv);
    assert_string_equal(kv->wire_coder_id, "kv_str_varint");
    assert_string_equal(kv->port_coder_id, "wv:kv_str_varint:gw");
    const sd_plan_stage *g = stage_with(plan, "gbk");
    assert_string_equal(g->inputs[0], "p_kv");
    assert_string_equal(g->key_coder_id, "str");
    assert_string_equal(g->value_coder_id, "varint");
    const sd_plan_stage *f = stage_with(plan, "flat");
    assert_int_equal(f->n_inputs, 2);
    assert_string_equal(f->inputs[0], "flat/transcoded/0");
    assert_string_equal(f->inputs[1], "flat/transcoded/1");
    for (size_t i = 0; i < 2; i++) {
        const sd_plan_pcollection *in = sd_plan_find_pcollection(plan, f->inputs[i]);
        assert_non_null(in);
        assert_string_equal(in->wire_coder_id, "gen_lp");
        assert_string_equal(in->port_coder_id, "wv:gen_lp:gw");
    }
    /* a's stage writes p_kv twice: as itself (for the GBK) and re-encoded (for the Flatten). */
    const sd_plan_stage *sa = stage_with(plan, "a");
    assert_ptr_equal(sa, stage_with(plan, "flat/Transcode/0"));
    assert_int_equal(sa->n_outputs, 2);
    assert_string_equal(sa->outputs[0].pcollection, "flat/transcoded/0");
    assert_string_equal(sa->outputs[0].port_coder_id, "wv:gen_lp:gw");
    assert_string_equal(sa->outputs[1].pcollection, "p_kv");
    assert_string_equal(sa->outputs[1].port_coder_id, "wv:kv_str_varint:gw");
    assert_string_equal(desc_pcoll(sa->descriptor, "p_kv")->coder_id, "kv_str_varint");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's test_flattened_side_input shape: side = Flatten(p1, p2) is read as a side input
 * and flattened again with p3 into another coder. side keeps its own coder for the side input;
 * the second Flatten gets side re-encoded by an SDK stage of its own (side's producer is the
 * runner), whose source reads side in side's coder.
 */
static void test_flatten_of_flatten_side_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p1", "kv_str_varint", "global");
    tb_pcoll(&b, "p2", "kv_str_varint", "global");
    tb_pcoll(&b, "p3", "str", "global");
    tb_pcoll(&b, "side", "kv_str_varint", "global");
    tb_pcoll(&b, "p_main", "bytes", "global");
    tb_pcoll(&b, "p_use", "gen", "global");
    tb_pcoll(&b, "after", "gen", "global");
    pardo_opts none = { 0 };
    pardo_opts sides = { .sides = "s:multimap" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "c1", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p1",
                 NULL);
    tb_transform(&b, "c2", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p2",
                 NULL);
    tb_transform(&b, "c3", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p3",
                 NULL);
    tb_transform(&b, "main", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_main", NULL);
    tb_transform(&b, "flat1", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=p1,1=p2", "out=side",
                 NULL);
    tb_transform(&b, "use", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sides), "js", "in=p_main,s=side",
                 "out=p_use", NULL);
    tb_transform(&b, "flat2", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=side,1=p3",
                 "out=after", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    /* flat1's inputs already have its output's coder: read as they are. */
    const sd_plan_stage *f1 = stage_with(plan, "flat1");
    assert_string_equal(f1->inputs[0], "p1");
    assert_string_equal(f1->inputs[1], "p2");
    const sd_plan_pcollection *side = sd_plan_find_pcollection(plan, "side");
    assert_string_equal(side->wire_coder_id, "kv_str_varint");
    assert_string_equal(sd_plan_find_pcollection(plan, "p1")->wire_coder_id, "kv_str_varint");
    assert_string_equal(desc_pcoll(stage_with(plan, "use")->descriptor, "side")->coder_id,
                        "kv_str_varint");
    const sd_plan_stage *f2 = stage_with(plan, "flat2");
    assert_string_equal(f2->inputs[0], "flat2/transcoded/0");
    assert_string_equal(f2->inputs[1], "flat2/transcoded/1");
    const sd_plan_stage *t0 = stage_with(plan, "flat2/Transcode/0");
    assert_int_equal(t0->kind, SD_PLAN_STAGE_SDK);
    assert_int_equal(t0->n_transforms, 1);
    assert_string_equal(t0->inputs[0], "side");
    assert_string_equal(t0->source_port_coder_id, "wv:kv_str_varint:gw");
    assert_string_equal(t0->outputs[0].pcollection, "flat2/transcoded/0");
    assert_string_equal(t0->outputs[0].port_coder_id, "wv:gen_lp:gw");
    assert_true(stage_index(plan, t0) > stage_index(plan, f1));
    assert_true(stage_index(plan, f2) > stage_index(plan, t0));
    /* side is consumed by the side-input reader and by the transcoding stage. */
    assert_int_equal(side->n_consumers, 2);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's test_flatten_same_pcollections: Flatten(pc, pc, pc) must yield every element three
 * times. The engine reads each input PCollection once, so each repeated listing gets its own
 * runner-side copy (a one-input Flatten); coders match, so nothing is transcoded.
 */
static void test_flatten_repeated_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "str", "global");
    tb_pcoll(&b, "p_all", "str", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "flat", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=p_a,1=p_a,2=p_a",
                 "out=p_all", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *f = stage_with(plan, "flat");
    assert_int_equal(f->n_inputs, 3);
    assert_string_equal(f->inputs[0], "p_a");
    assert_string_equal(f->inputs[1], "flat/copy/1");
    assert_string_equal(f->inputs[2], "flat/copy/2");
    for (size_t i = 1; i < 3; i++) {
        char tid[64];
        snprintf(tid, sizeof(tid), "flat/Copy/%zu", i);
        const sd_plan_stage *cp = stage_with(plan, tid);
        assert_int_equal(cp->kind, SD_PLAN_STAGE_FLATTEN);
        assert_int_equal(cp->n_inputs, 1);
        assert_string_equal(cp->inputs[0], "p_a");
        assert_string_equal(cp->outputs[0].pcollection, f->inputs[i]);
        assert_string_equal(sd_plan_find_pcollection(plan, f->inputs[i])->wire_coder_id, "str");
        assert_true(stage_index(plan, f) > stage_index(plan, cp));
    }
    /* p_a feeds the Flatten and both copies. */
    assert_int_equal(sd_plan_find_pcollection(plan, "p_a")->n_consumers, 3);
    assert_int_equal(plan->n_stages, 5); /* impulse, a, two copies, the Flatten */
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's streaming Create of one element: assert_that/Create/MaybeReshuffle arrives as a leaf
 * with an SDK-private URN, a payload, no subtransforms, and its input as its output. It has
 * nothing to run and is dropped; an unknown URN that would produce something is still refused.
 */
static void test_identity_placeholder(void **state)
{
    (void)state;
    static const uint8_t pickled[] = { 0x80, 0x04, 0x95 };
    ProtobufCBinaryData payload = { sizeof(pickled), (uint8_t *)pickled };
    for (int variant = 0; variant < 3; variant++) {
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_a", "bytes", "global");
        tb_pcoll(&b, "p_b", "str", "global");
        pardo_opts none = { 0 };
        tb_transform(&b, "create", NULL, NO_PAYLOAD, "js", "", "out=p_b",
                     "create/impulse,create/flatmap,create/maybe,create/decode");
        tb_transform(&b, "create/impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "",
                     "out=p_imp", NULL);
        tb_transform(&b, "create/flatmap", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                     "in=p_imp", "out=p_a", NULL);
        const char *outs = variant == 0 ? "out=p_a" : variant == 1 ? "out=p_x" : "";
        if (variant == 1) {
            tb_pcoll(&b, "p_x", "bytes", "global");
        }
        tb_transform(&b, "create/maybe", "beam:transform:pickled_python:v1", payload, "js",
                     "in=p_a", outs, NULL);
        tb_transform(&b, "create/decode", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                     "in=p_a", "out=p_b", NULL);
        tb_root(&b, "create");
        pb_pipeline *p = tb_finish(&b);
        if (variant == 0) {
            sd_plan *plan = build_ok(p, &OPTS);
            for (size_t i = 0; i < plan->n_stages; i++) {
                for (size_t j = 0; j < plan->stages[i].n_transforms; j++) {
                    assert_string_not_equal(plan->stages[i].transforms[j], "create/maybe");
                }
            }
            const sd_plan_stage *s = stage_with(plan, "create/flatmap");
            assert_ptr_equal(s, stage_with(plan, "create/decode"));
            assert_int_equal(plan->n_stages, 2);
            sd_plan_destroy(plan);
        } else {
            /* A new output (variant 1) or none (2, a sink) means it would have to run. */
            const char *needles[] = { "unknown transform URN",
                                      "\"beam:transform:pickled_python:v1\"", "create/maybe",
                                      NULL };
            expect_rejected(p, SD_EUNIMPL, needles);
        }
        free_pipeline(p);
    }
}

/*
 * Side inputs: impulse -> a -> b; c reads a's output (main), b's output (iterable side) and
 * d's output (multimap side). b is fused with a; c must not be (its side input comes from its
 * would-be stage).
 */
static void test_side_inputs(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "gen", "global");
    tb_pcoll(&b, "p_b", "gen", "global");
    tb_pcoll(&b, "p_d", "kv_str_gen", "global");
    tb_pcoll(&b, "p_c", "gen", "global");
    pardo_opts none = { 0 };
    pardo_opts sides = { .sides = "s1:iterable,s2:multimap" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_a", "out=p_b",
                 NULL);
    tb_transform(&b, "d", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_d",
                 NULL);
    tb_transform(&b, "c", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sides), "js", "in=p_a,s1=p_b,s2=p_d",
                 "out=p_c", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &SEPARATE);
    const sd_plan_stage *sa = stage_with(plan, "a");
    assert_ptr_equal(sa, stage_with(plan, "b"));
    const sd_plan_stage *sc = stage_with(plan, "c");
    assert_ptr_not_equal(sa, sc);
    assert_int_equal(sc->n_transforms, 1);
    assert_string_equal(sc->inputs[0], "p_a");
    assert_int_equal(sc->n_side_inputs, 2);
    assert_string_equal(sc->side_inputs[0].transform, "c");
    assert_string_equal(sc->side_inputs[0].local_id, "s1");
    assert_string_equal(sc->side_inputs[0].pcollection, "p_b");
    assert_int_equal(sc->side_inputs[0].access, SD_PLAN_SIDE_ITERABLE);
    assert_string_equal(sc->side_inputs[0].window_mapping_urn, SD_URN_WINDOW_MAPPING_GLOBAL);
    assert_string_equal(sc->side_inputs[1].local_id, "s2");
    assert_int_equal(sc->side_inputs[1].access, SD_PLAN_SIDE_MULTIMAP);
    /* Stage a materializes both p_a (c's main input) and p_b (c's side input). */
    assert_int_equal(sa->n_outputs, 2);
    assert_string_equal(sa->outputs[0].pcollection, "p_a");
    assert_string_equal(sa->outputs[1].pcollection, "p_b");
    const sd_plan_pcollection *pb = sd_plan_find_pcollection(plan, "p_b");
    assert_int_equal(pb->n_consumers, 1);
    assert_true(pb->consumers[0].side_input);
    assert_int_equal(pb->consumers[0].stage, stage_index(plan, sc));
    const sd_plan_pcollection *pd = sd_plan_find_pcollection(plan, "p_d");
    assert_string_equal(pd->wire_coder_id, "kv_str_gen_lp");
    /* The consumer's descriptor names side inputs with their wire coders, no source for them. */
    const pb_pbd *d = sc->descriptor;
    assert_string_equal(desc_pcoll(d, "p_b")->coder_id, "gen_lp");
    assert_string_equal(desc_pcoll(d, "p_d")->coder_id, "kv_str_gen_lp");
    assert_desc_coder(d, "kv_str_gen_lp", SD_URN_CODER_KV, "str,gen_lp");
    assert_int_equal(d->n_transforms, 2); /* c and its source; p_c has no consumer */
    assert_string_equal(d->state_api_service_descriptor->url, "localhost:2222");
    /* Stage order is topological. */
    assert_true(stage_index(plan, sc) > stage_index(plan, stage_with(plan, "d")));
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* A WindowInto transform's payload: FixedWindows(size_ms). */
static ProtobufCBinaryData window_into_fixed(tb *b, int64_t size_ms)
{
    Org__Apache__Beam__Model__Pipeline__V1__WindowIntoPayload w;
    org__apache__beam__model__pipeline__v1__window_into_payload__init(&w);
    w.window_fn = tb_spec(b, SD_URN_WINDOW_FN_FIXED, tb_fixed(b, size_ms, 0));
    return tb_pack(b, &w.base);
}

/*
 * A side-input reader after a WindowInto fuses with it only when the engine can tell the side
 * windows it reads from the stage's input elements: impulse -> stamp (a DoFn that may set
 * timestamps, as Java's Create.timestamped does) -> window (WindowInto) -> use (reads side):
 * use starts a stage of its own, whose input carries the windows it reads in; impulse ->
 * window2 -> use2: use2 stays with window2, and the engine re-windows that stage's input
 * (main_windowing_strategy_id).
 */
static void test_side_input_after_retimestamping(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_ws(&b, "fixed", SD_URN_WINDOW_FN_FIXED, tb_fixed(&b, 2, 0), "iw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_stamped", "gen", "global");
    tb_pcoll(&b, "p_win", "gen", "fixed");
    tb_pcoll(&b, "p_win2", "gen", "fixed");
    tb_pcoll(&b, "p_side", "gen", "fixed");
    tb_pcoll(&b, "p_out", "gen", "fixed");
    tb_pcoll(&b, "p_out2", "gen", "fixed");
    pardo_opts none = { 0 };
    pardo_opts sides = { .sides = "s:iterable" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "stamp", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_stamped", NULL);
    tb_transform(&b, "window", SD_URN_TRANSFORM_WINDOW_INTO, window_into_fixed(&b, 2), "js",
                 "in=p_stamped", "out=p_win", NULL);
    tb_transform(&b, "side", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_side", NULL);
    tb_transform(&b, "use", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sides), "js", "in=p_win,s=p_side",
                 "out=p_out", NULL);
    tb_transform(&b, "window2", SD_URN_TRANSFORM_WINDOW_INTO, window_into_fixed(&b, 2), "js",
                 "in=p_imp", "out=p_win2", NULL);
    tb_transform(&b, "use2", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sides), "js",
                 "in=p_win2,s=p_side", "out=p_out2", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &SEPARATE);
    const sd_plan_stage *su = stage_with(plan, "use");
    assert_ptr_equal(stage_with(plan, "stamp"), stage_with(plan, "window"));
    assert_ptr_not_equal(stage_with(plan, "window"), su);
    assert_int_equal(su->n_transforms, 1);
    assert_string_equal(su->inputs[0], "p_win");
    assert_int_equal(su->n_side_inputs, 1);
    assert_null(su->side_inputs[0].main_windowing_strategy_id);
    const sd_plan_stage *su2 = stage_with(plan, "use2");
    assert_ptr_equal(stage_with(plan, "window2"), su2);
    assert_int_equal(su2->n_side_inputs, 1);
    assert_string_equal(su2->side_inputs[0].main_windowing_strategy_id, "fixed");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * A stage that grows after its first member must not create a stage cycle:
 * x (stage A) -> y fused into A; z reads y in another env (stage B);
 * w reads x (main) and z (side): z depends on A, so w must start its own stage.
 */
static void test_fusion_stage_cycle(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_env(&b, "py", SD_URN_ENV_PROCESS);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_x", "bytes", "global");
    tb_pcoll(&b, "p_y", "bytes", "global");
    tb_pcoll(&b, "p_z", "bytes", "global");
    tb_pcoll(&b, "p_w", "bytes", "global");
    pardo_opts none = { 0 };
    pardo_opts side = { .sides = "s:iterable" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "x", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_x",
                 NULL);
    tb_transform(&b, "y", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_x", "out=p_y",
                 NULL);
    tb_transform(&b, "z", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "py", "in=p_y", "out=p_z",
                 NULL);
    tb_transform(&b, "w", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, side), "js", "in=p_x,s=p_z",
                 "out=p_w", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *sx = stage_with(plan, "x");
    assert_ptr_equal(sx, stage_with(plan, "y"));
    const sd_plan_stage *sz = stage_with(plan, "z");
    const sd_plan_stage *sw = stage_with(plan, "w");
    assert_ptr_not_equal(sx, sz);
    assert_ptr_not_equal(sx, sw);
    assert_string_equal(sz->environment_id, "py");
    assert_true(stage_index(plan, sx) < stage_index(plan, sz));
    assert_true(stage_index(plan, sz) < stage_index(plan, sw));
    assert_int_equal(plan->n_environments, 2);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* A stateful ParDo with a timer starts a stage; its successor fuses into it. */
static void test_stateful_root(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "timer_gen", SD_URN_CODER_TIMER, "gen,gw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_gen", "global");
    tb_pcoll(&b, "p_s", "gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    pardo_opts st = { .state = "gen", .timer_coder = "timer_gen" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "stateful", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, st), "js", "in=p_kv",
                 "out=p_s", NULL);
    tb_transform(&b, "after", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_s",
                 "out=p_out", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_STATEFUL_PROCESSING);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_int_equal(plan->n_stages, 3);
    const sd_plan_stage *s = stage_with(plan, "stateful");
    assert_ptr_not_equal(s, stage_with(plan, "kv"));
    assert_ptr_equal(s, stage_with(plan, "after"));
    assert_string_equal(s->transforms[0], "stateful");
    assert_true(s->stateful);
    assert_string_equal(s->key_coder_id, "gen_lp");
    assert_int_equal(s->n_timer_families, 1);
    assert_string_equal(s->timer_families[0].transform, "stateful");
    assert_string_equal(s->timer_families[0].family, "flush");
    assert_int_equal(s->timer_families[0].domain, SD_PLAN_PROCESSING_TIME);
    assert_string_equal(s->timer_families[0].timer_coder_id, "timer_gen_lp");
    assert_false(stage_with(plan, "kv")->stateful);
    /* The descriptor's ParDoPayload names the wire timer coder; timers use the data url. */
    const pb_pbd *d = s->descriptor;
    assert_non_null(d->timer_api_service_descriptor);
    assert_string_equal(d->timer_api_service_descriptor->url, "localhost:1111");
    assert_desc_coder(d, "timer_gen_lp", SD_URN_CODER_TIMER, "gen_lp,gw");
    assert_non_null(desc_coder(d, "gen")); /* the bag state coder */
    const pb_transform *t = desc_transform(d, "stateful");
    pb_pardo *pd = org__apache__beam__model__pipeline__v1__par_do_payload__unpack(
        NULL, t->spec->payload.len, t->spec->payload.data);
    assert_non_null(pd);
    assert_string_equal(pd->timer_family_specs[0]->value->timer_family_coder_id, "timer_gen_lp");
    assert_int_equal(pd->n_state_specs, 1);
    org__apache__beam__model__pipeline__v1__par_do_payload__free_unpacked(pd, NULL);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* impulse -> a -> Reshuffle (p_a -> p_r, coder and windowing of p_r given) -> b; the
 * Reshuffle has its composite's subtransforms (key, GroupByKey, unkey) unless leaf. */
static pb_pipeline *reshuffle_pipeline(const char *r_coder, const char *r_ws, bool leaf)
{
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "gen_again", GEN, ""); /* equal to "gen" in all but id */
    tb_ws(&b, "global_again", SD_URN_WINDOW_FN_GLOBAL, NO_PAYLOAD, "gw");
    tb_ws(&b, "fixed", SD_URN_WINDOW_FN_FIXED, tb_fixed(&b, 2, 0), "iw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "gen", "global");
    tb_pcoll(&b, "p_keyed", "kv_gen", "global");
    tb_pcoll(&b, "p_grouped", "kv_gen_iter_gen", "global");
    tb_pcoll(&b, "p_r", r_coder, r_ws);
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "rs", SD_URN_TRANSFORM_RESHUFFLE, NO_PAYLOAD, "js", "in=p_a", "out=p_r",
                 leaf ? NULL : "rs/key,rs/gbk,rs/unkey");
    if (!leaf) {
        tb_transform(&b, "rs/key", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_a",
                     "out=p_keyed", NULL);
        tb_transform(&b, "rs/gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_keyed",
                     "out=p_grouped", NULL);
        tb_transform(&b, "rs/unkey", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                     "in=p_grouped", "out=p_r", NULL);
    }
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_r", "out=p_out",
                 NULL);
    tb_root(&b, "impulse");
    tb_root(&b, "a");
    tb_root(&b, "rs");
    tb_root(&b, "b");
    return tb_finish(&b);
}

typedef struct reshuffle_row {
    plan_case head;
    const char *r_coder, *r_ws;
    bool leaf;
    bool elided; /* else its subtransforms run: a GroupByKey stage, b reads p_r */
} reshuffle_row;

static pb_pipeline *reshuffle_row_pipeline(const void *row)
{
    const reshuffle_row *r = row;
    return reshuffle_pipeline(r->r_coder, r->r_ws, r->leaf);
}

static void reshuffle_row_check(const sd_plan *plan, const pb_pipeline *p, const void *row)
{
    const reshuffle_row *r = row;
    size_t gbk_stages = 0;
    (void)p;
    for (size_t i = 0; i < plan->n_stages; i++) {
        gbk_stages += plan->stages[i].kind == SD_PLAN_STAGE_GBK;
    }
    const sd_plan_stage *sb = stage_with(plan, "b");
    assert_ptr_not_equal(sb, stage_with(plan, "a"));
    const pb_transform *t = desc_transform(sb->descriptor, "b");
    if (r->elided) {
        /* Its consumer reads the input and starts a stage. */
        assert_int_equal(plan->n_stages, 3);
        assert_int_equal(gbk_stages, 0);
        assert_string_equal(sb->inputs[0], "p_a");
        assert_string_equal(t->inputs[0]->value, "p_a");
        assert_null(desc_pcoll(sb->descriptor, "p_r"));
        assert_null(sd_plan_find_pcollection(plan, "p_r"));
        assert_true(sb->after_reshuffle); /* its input may be spread (xplan.c) */
    } else {
        /* Its consumer reads the bytes the composite's last ParDo wrote in p_r's coder. */
        assert_int_equal(gbk_stages, 1);
        assert_ptr_equal(sb, stage_with(plan, "rs/unkey"));
        assert_string_equal(t->inputs[0]->value, "p_r");
        assert_non_null(desc_pcoll(sb->descriptor, "p_r"));
        assert_false(sb->after_reshuffle);
        assert_true(stage_with(plan, "rs/key")->after_reshuffle == false);
    }
}

/*
 * Reshuffle runs as nothing only when its input and output agree on coder and windowing
 * (Python's Reshuffle before a GroupByKey writes DeterministicFastPrimitivesCoderV2 where it
 * read FastPrimitivesCoder: its consumers must get the composite's bytes, not its input's).
 */
static void test_reshuffle_elided(void **state)
{
    (void)state;
    static const reshuffle_row rows[] = {
        { { "same coder and windowing", NULL }, "gen", "global", false, true },
        { { "equal coder and windowing by another id", NULL },
          "gen_again",
          "global_again",
          false,
          true },
        { { "leaf, same coder", NULL }, "gen", "global", true, true },
        { { "another coder", NULL }, "str", "global", false, false },
        { { "another windowing", NULL }, "gen", "fixed", false, false },
        { { "leaf, another coder", "changes its elements' coder or windowing strategy" },
          "str",
          "global",
          true,
          false },
    };
    RUN_PLAN_CASES(rows, reshuffle_row_pipeline, SD_EUNIMPL, reshuffle_row_check);
}

static void test_sdf_expansion(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "restr", "beam:coder:offset_range:v1", "");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_files", "str", "global");
    tb_pcoll(&b, "p_lines", "str", "global");
    pardo_opts none = { 0 };
    pardo_opts sdf = { .restriction_coder = "restr" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "files", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_files", NULL);
    tb_transform(&b, "read", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sdf), "js", "in=p_files",
                 "out=p_lines", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_SPLITTABLE_DOFN);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_int_equal(plan->n_stages, 3);
    const sd_plan_stage *s1 = stage_with(plan, "files");
    assert_int_equal(s1->n_transforms, 3);
    assert_string_equal(s1->transforms[1], "read/PairWithRestriction");
    assert_string_equal(s1->transforms[2], "read/SplitAndSizeRestrictions");
    const sd_plan_stage *s2 = stage_with(plan, "read");
    assert_true(s2->splittable);
    assert_string_equal(s2->inputs[0], "read/split_and_size");
    const sd_plan_pcollection *sns = sd_plan_find_pcollection(plan, "read/split_and_size");
    assert_string_equal(sns->coder_id, "read/sdf_kv_elem_restr_size");
    assert_string_equal(sns->wire_coder_id, "read/sdf_kv_elem_restr_size_lp");
    const sd_plan_coder *k = sd_plan_find_coder(plan, "read/sdf_kv_elem_restr_lp");
    assert_string_equal(k->components[0], "str");
    assert_string_equal(k->components[1], "restr_lp");
    const pb_transform *t = desc_transform(s2->descriptor, "read");
    assert_string_equal(t->spec->urn, SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS);
    assert_string_equal(t->unique_name, "read");
    assert_non_null(desc_coder(s2->descriptor, "restr"));
    assert_null(desc_transform(s2->descriptor, "read/TruncateSizedRestrictions"));
    /* The drain variant: the same stage with a truncation in front of the process transform. */
    assert_string_equal(s2->drain_descriptor->id, "stage-003-drain");
    assert_string_equal(s2->drain_truncate, "read/TruncateSizedRestrictions");
    assert_string_equal(s2->drain_process, "read");
    assert_int_equal(s2->drain_descriptor->n_transforms, s2->descriptor->n_transforms + 1);
    const pb_transform *tr = desc_transform(s2->drain_descriptor, s2->drain_truncate);
    assert_string_equal(tr->spec->urn, SD_URN_TRANSFORM_SDF_TRUNCATE_SIZED_RESTRICTIONS);
    assert_string_equal(tr->environment_id, "js");
    assert_int_equal(tr->n_inputs, 1);
    assert_string_equal(tr->inputs[0]->value, "read/split_and_size");
    assert_int_equal(tr->n_outputs, 1);
    assert_string_equal(tr->outputs[0]->value, "read/split_and_size/truncated");
    assert_memory_equal(tr->spec->payload.data, t->spec->payload.data, t->spec->payload.len);
    const pb_transform *tp = desc_transform(s2->drain_descriptor, "read");
    assert_string_equal(tp->inputs[0]->value, "read/split_and_size/truncated");
    assert_string_equal(tp->outputs[0]->value, "p_lines");
    const pb_pcoll *trunc = desc_pcoll(s2->drain_descriptor, "read/split_and_size/truncated");
    assert_string_equal(trunc->coder_id, "read/sdf_kv_elem_restr_size_lp");
    /* Other stages have none. */
    assert_null(s1->drain_descriptor);
    assert_int_equal(s1->drain_descriptor_bytes.len, 0);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* A GroupByKey with a late-data output ("sundial_late"): the stage lists it among its outputs
 * and names it; any other second output is refused, naming the tag that is allowed. */
static void test_gbk_late_output(void **state)
{
    (void)state;
    for (int bad = 0; bad < 2; bad++) {
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_coder(&b, "kv_str_iter_varint", SD_URN_CODER_KV, "str,iter_varint");
        tb_coder(&b, "iter_varint", SD_URN_CODER_ITERABLE, "varint");
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_kv", "kv_str_varint", "global");
        tb_pcoll(&b, "p_g", "kv_str_iter_varint", "global");
        tb_pcoll(&b, "p_late", "kv_str_varint", "global");
        tb_pcoll(&b, "p_out", "str", "global");
        pardo_opts none = { 0 };
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_kv", NULL);
        tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv",
                     bad ? "out=p_g,other=p_late" : "out=p_g,sundial_late=p_late", NULL);
        tb_transform(&b, "show", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_late",
                     "out=p_out", NULL);
        pb_pipeline *p = tb_finish(&b);
        if (bad) {
            static const char *const needles[] = { "gbk", "sundial_late", NULL };
            expect_rejected(p, SD_EINVAL, needles);
            free_pipeline(p);
            continue;
        }
        sd_plan *plan = build_ok(p, &OPTS);
        const sd_plan_stage *g = stage_with(plan, "gbk");
        assert_string_equal(g->late_pcollection, "p_late");
        assert_int_equal(g->n_outputs, 2);
        const sd_plan_stage *show = stage_with(plan, "show");
        assert_string_equal(show->inputs[0], "p_late");
        assert_ptr_not_equal(show, g);
        sd_plan_destroy(plan);
        free_pipeline(p);
    }
}

/* An SDF with a side input: its restriction methods may read it, so all three transforms list
 * it among their inputs and each is a side input of its stage. */
static void test_sdf_side_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "restr", "beam:coder:offset_range:v1", "");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_files", "str", "global");
    tb_pcoll(&b, "p_side", "str", "global");
    tb_pcoll(&b, "p_lines", "str", "global");
    pardo_opts none = { 0 };
    pardo_opts sdf = { .restriction_coder = "restr", .sides = "s:iterable" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "files", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_files", NULL);
    tb_transform(&b, "side", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_side", NULL);
    tb_transform(&b, "read", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sdf), "js", "in=p_files,s=p_side",
                 "out=p_lines", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_SPLITTABLE_DOFN);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *s1 = stage_with(plan, "read/SplitAndSizeRestrictions");
    const sd_plan_stage *s2 = stage_with(plan, "read");
    static const char *const ids[] = { "read/PairWithRestriction",
                                       "read/SplitAndSizeRestrictions" };
    for (size_t i = 0; i < 2; i++) {
        const pb_transform *t = desc_transform(s1->descriptor, ids[i]);
        assert_non_null(t);
        bool has_side = false;
        for (size_t k = 0; k < t->n_inputs; k++) {
            has_side = has_side || (strcmp(t->inputs[k]->key, "s") == 0 &&
                                    strcmp(t->inputs[k]->value, "p_side") == 0);
        }
        assert_true(has_side);
        bool listed = false;
        for (size_t k = 0; k < s1->n_side_inputs; k++) {
            listed = listed || (strcmp(s1->side_inputs[k].transform, ids[i]) == 0 &&
                                strcmp(s1->side_inputs[k].local_id, "s") == 0);
        }
        assert_true(listed);
    }
    assert_int_equal(s2->n_side_inputs, 1);
    assert_string_equal(s2->side_inputs[0].transform, "read");
    /* The drain truncation reads the side input too (served as the process transform's). */
    const pb_transform *tr = desc_transform(s2->drain_descriptor, s2->drain_truncate);
    assert_int_equal(tr->n_inputs, 2);
    const pb_transform *tp = desc_transform(s2->drain_descriptor, "read");
    for (size_t k = 0; k < tp->n_inputs; k++) {
        bool side = strcmp(tp->inputs[k]->key, "s") == 0;
        assert_string_equal(tp->inputs[k]->value,
                            side ? "p_side" : "read/split_and_size/truncated");
        assert_string_equal(tr->inputs[k]->value, side ? "p_side" : "read/split_and_size");
    }
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* RequiresTimeSortedInput on a stateful ParDo: accepted, and its stage says so (the engine
 * sorts the stage's input by timestamp). */
static void test_time_sorted_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "global");
    tb_pcoll(&b, "p_out", "kv_str_varint", "global");
    pardo_opts none = { 0 };
    pardo_opts sorted = { .state = "varint", .time_sorted = true };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "sorted", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sorted), "js", "in=p_kv",
                 "out=p_out", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_STATEFUL_PROCESSING);
    tb_require(&b, SD_URN_REQUIREMENT_TIME_SORTED_INPUT);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_true(stage_with(plan, "sorted")->time_sorted_input);
    assert_false(stage_with(plan, "kv")->time_sorted_input);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_teststream(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload ts;
    org__apache__beam__model__pipeline__v1__test_stream_payload__init(&ts);
    ts.coder_id = "gen";
    ProtobufCBinaryData payload = tb_pack(&b, &ts.base);
    tb_pcoll(&b, "p_ts", "gen", "global");
    tb_pcoll(&b, "p_late", "gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "ts", SD_URN_TRANSFORM_TEST_STREAM, payload, "", "", "main=p_ts,late=p_late",
                 NULL);
    tb_transform(&b, "use", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_ts",
                 "out=p_out", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_int_equal(plan->teststream_stage, 0);
    const sd_plan_stage *s = &plan->stages[0];
    assert_int_equal(s->kind, SD_PLAN_STAGE_TESTSTREAM);
    assert_string_equal(s->teststream_coder_id, "gen");
    assert_string_equal(s->teststream_wire_coder_id, "gen_lp");
    assert_int_equal(s->teststream_payload.len, payload.len);
    assert_int_equal(s->n_teststream_outputs, 2);
    assert_string_equal(s->teststream_outputs[0].tag, "late");
    assert_string_equal(s->teststream_outputs[0].pcollection, "p_late");
    assert_string_equal(s->teststream_outputs[1].tag, "main");
    assert_int_equal(s->n_outputs, 2);
    assert_string_equal(sd_plan_find_pcollection(plan, "p_ts")->port_coder_id, "wv:gen_lp:gw");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * The runner stores the elements length-prefixed as they came (fast_lp) in a PCollection of
 * their own, ts/raw/main, and an SDK-side Flatten in the consumers' environment re-encodes them
 * into p_ts in its wire coder kv(lp(dfast), lp(fast)), which every consumer reads: before, the
 * runner stored fast_lp bytes under p_ts and the consumers misread them as a KV (Python's
 * userstate_test got (('a', 1), None) for ('a', 1)). p_late has the payload's coder: its
 * consumer reads the runner's bytes directly.
 */
static void test_teststream_transcodes_python_kv(void **state)
{
    (void)state;
    pb_pipeline *p = py_teststream("fast", "fast");
    sd_plan *plan = build_ok(p, &OPTS);

    const sd_plan_stage *s = &plan->stages[plan->teststream_stage];
    assert_int_equal(s->kind, SD_PLAN_STAGE_TESTSTREAM);
    assert_string_equal(s->teststream_coder_id, "fast");
    assert_string_equal(s->teststream_wire_coder_id, "fast_lp");
    assert_int_equal(s->n_teststream_outputs, 2);
    assert_string_equal(s->teststream_outputs[0].tag, "late");
    assert_string_equal(s->teststream_outputs[0].pcollection, "p_late");
    assert_string_equal(s->teststream_outputs[1].tag, "main");
    assert_string_equal(s->teststream_outputs[1].pcollection, "ts/raw/main");
    assert_int_equal(s->n_outputs, 2);
    const sd_plan_pcollection *rp = sd_plan_find_pcollection(plan, "ts/raw/main");
    assert_non_null(rp);
    assert_string_equal(rp->coder_id, "fast_lp");
    assert_string_equal(rp->wire_coder_id, "fast_lp");
    assert_string_equal(rp->port_coder_id, "wv:fast_lp:gw");
    assert_int_equal(rp->producer_stage, plan->teststream_stage);
    assert_string_equal(sd_plan_find_pcollection(plan, "p_late")->wire_coder_id, "fast_lp");
    for (size_t i = 0; i < plan->n_stages; i++) {
        for (size_t j = 0; j < plan->stages[i].n_transforms; j++) {
            assert_string_not_equal(plan->stages[i].transforms[j], "ts/Transcode/late");
        }
    }

    /* The transcoder roots a stage in the consumers' environment; the plain ParDo fuses. */
    const sd_plan_stage *t = stage_with(plan, "ts/Transcode/main");
    assert_non_null(t);
    assert_int_equal(t->kind, SD_PLAN_STAGE_SDK);
    assert_string_equal(t->environment_id, "py");
    assert_ptr_equal(t, stage_with(plan, "use"));
    assert_string_equal(t->inputs[0], "ts/raw/main");
    assert_string_equal(t->source_port_coder_id, "wv:fast_lp:gw");
    const pb_transform *tt = desc_transform(t->descriptor, "ts/Transcode/main");
    assert_non_null(tt);
    assert_string_equal(tt->spec->urn, SD_URN_TRANSFORM_FLATTEN);
    assert_string_equal(tt->environment_id, "py");
    assert_string_equal(tt->inputs[0]->value, "ts/raw/main");
    assert_string_equal(tt->outputs[0]->value, "p_ts");
    assert_string_equal(desc_pcoll(t->descriptor, "ts/raw/main")->coder_id, "fast_lp");
    assert_string_equal(desc_pcoll(t->descriptor, "p_ts")->coder_id, "kv_pk_lp");
    assert_string_equal(desc_transform(t->descriptor, "use")->inputs[0]->value, "p_ts");
    assert_true(stage_index(plan, t) > plan->teststream_stage);

    /* Every other consumer reads p_ts in its wire coder, from the transcoding stage. */
    const sd_plan_pcollection *pts = sd_plan_find_pcollection(plan, "p_ts");
    assert_non_null(pts);
    assert_string_equal(pts->coder_id, "kv_pk");
    assert_string_equal(pts->wire_coder_id, "kv_pk_lp");
    assert_int_equal(pts->producer_stage, stage_index(plan, t));
    const sd_plan_coder *wire = sd_plan_find_coder(plan, "kv_pk_lp");
    assert_string_equal(wire->components[0], "dfast_lp");
    assert_string_equal(wire->components[1], "fast_lp");
    const sd_plan_stage *st = stage_with(plan, "stateful");
    assert_ptr_not_equal(st, t);
    assert_true(st->stateful);
    assert_string_equal(st->inputs[0], "p_ts");
    assert_string_equal(st->key_coder_id, "dfast_lp");
    const sd_plan_stage *g = stage_with(plan, "gbk");
    assert_string_equal(g->inputs[0], "p_ts");
    assert_string_equal(g->key_coder_id, "dfast_lp");
    const sd_plan_stage *sd = stage_with(plan, "side");
    assert_int_equal(sd->n_side_inputs, 1);
    assert_string_equal(sd->side_inputs[0].pcollection, "p_ts");
    const sd_plan_stage *ul = stage_with(plan, "use_late");
    assert_string_equal(ul->inputs[0], "p_late");
    assert_int_equal(ul->upstream[0], plan->teststream_stage);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * A payload coder that is a KV over opaque parts cannot be re-encoded by the runner at all, nor
 * length-prefixed per part: every output is stored length-prefixed whole (kv_pk_raw =
 * length_prefix(kv_pk)) and transcoded, even one whose coder is the payload's. A TestStream
 * whose coder the runner parses (the C SDK's kv(str, varint)) is left as it is.
 */
static void test_teststream_transcode_opaque_kv_payload(void **state)
{
    (void)state;
    pb_pipeline *p = py_teststream("kv_pk", "kv_pk");
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *s = &plan->stages[plan->teststream_stage];
    assert_string_equal(s->teststream_coder_id, "kv_pk");
    assert_string_equal(s->teststream_wire_coder_id, "kv_pk_raw");
    assert_string_equal(s->teststream_outputs[0].pcollection, "ts/raw/late");
    assert_string_equal(s->teststream_outputs[1].pcollection, "ts/raw/main");
    const sd_plan_coder *raw = sd_plan_find_coder(plan, "kv_pk_raw");
    assert_non_null(raw);
    assert_string_equal(raw->urn, SD_URN_CODER_LENGTH_PREFIX);
    assert_int_equal(raw->n_components, 1);
    assert_string_equal(raw->components[0], "kv_pk");
    for (size_t i = 0; i < 2; i++) {
        const sd_plan_pcollection *rp =
            sd_plan_find_pcollection(plan, s->teststream_outputs[i].pcollection);
        assert_non_null(rp);
        assert_string_equal(rp->wire_coder_id, "kv_pk_raw");
        assert_string_equal(rp->port_coder_id, "wv:kv_pk_raw:gw");
    }
    const sd_plan_stage *tl = stage_with(plan, "ts/Transcode/late");
    assert_string_equal(tl->inputs[0], "ts/raw/late");
    assert_ptr_equal(tl, stage_with(plan, "use_late"));
    assert_null(sd_plan_find_pcollection(plan, "p_late")); /* stage-internal now */
    assert_string_equal(desc_pcoll(tl->descriptor, "p_late")->coder_id, "kv_pk");
    assert_string_equal(stage_with(plan, "stateful")->key_coder_id, "dfast_lp");
    sd_plan_destroy(plan);
    free_pipeline(p);

    tb b;
    tb_init(&b);
    tb_std(&b);
    Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload ts;
    org__apache__beam__model__pipeline__v1__test_stream_payload__init(&ts);
    ts.coder_id = "kv_str_varint";
    tb_pcoll(&b, "p_ts", "kv_str_varint", "global");
    tb_pcoll(&b, "p_st", "str", "global");
    pardo_opts bag = { .state = "str" };
    tb_transform(&b, "ts", SD_URN_TRANSFORM_TEST_STREAM, tb_pack(&b, &ts.base), "", "", "main=p_ts",
                 NULL);
    tb_transform(&b, "stateful", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, bag), "js", "in=p_ts",
                 "out=p_st", NULL);
    p = tb_finish(&b);
    plan = build_ok(p, &OPTS);
    assert_int_equal(plan->n_stages, 2);
    s = &plan->stages[plan->teststream_stage];
    assert_string_equal(s->teststream_wire_coder_id, "kv_str_varint");
    assert_string_equal(s->teststream_outputs[0].pcollection, "p_ts");
    const sd_plan_stage *st = stage_with(plan, "stateful");
    assert_string_equal(st->inputs[0], "p_ts");
    assert_string_equal(st->key_coder_id, "str");
    assert_null(sd_plan_find_pcollection(plan, "ts/raw/main"));
    sd_plan_destroy(plan);
    free_pipeline(p);
}

int test_plan_run_graph(void)
{
    SEPARATE = OPTS;
    SEPARATE.separate_siblings = true;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flatten),
        cmocka_unit_test(test_flatten_transcode_keeps_gbk_coder),
        cmocka_unit_test(test_flatten_of_flatten_side_input),
        cmocka_unit_test(test_flatten_repeated_input),
        cmocka_unit_test(test_identity_placeholder),
        cmocka_unit_test(test_side_inputs),
        cmocka_unit_test(test_side_input_after_retimestamping),
        cmocka_unit_test(test_fusion_stage_cycle),
        cmocka_unit_test(test_stateful_root),
        cmocka_unit_test(test_reshuffle_elided),
        cmocka_unit_test(test_sdf_expansion),
        cmocka_unit_test(test_sdf_side_input),
        cmocka_unit_test(test_gbk_late_output),
        cmocka_unit_test(test_time_sorted_input),
        cmocka_unit_test(test_teststream),
        cmocka_unit_test(test_teststream_transcodes_python_kv),
        cmocka_unit_test(test_teststream_transcode_opaque_kv_payload),
    };
    return cmocka_run_group_tests_name("plan_graph", tests, NULL, NULL);
}
