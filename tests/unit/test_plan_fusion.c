/*
 * Unit tests for runner/plan: the fusion that saves SDK stages. Impulses merge and the
 * transforms reading them fuse side by side (as do other readers of one runner stage's output
 * in one environment), unless a side input or another environment forbids it; a Python
 * Create's own Reshuffle fuses through, a user's Reshuffle keeps its fusion break.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/plan/plan.h"
#include "runner/urns/urns.h"
#include "test_plan_harness.h"

static size_t count_kind(const sd_plan *plan, sd_plan_stage_kind kind)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->n_stages; i++) {
        n += plan->stages[i].kind == kind;
    }
    return n;
}

/*
 * Two Impulses (each read by a ParDo: two Creates), a third ParDo in another environment
 * reading the second Impulse, a GroupByKey and two readers of its output.
 */
static pb_pipeline *siblings_pipeline(void)
{
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_env(&b, "py", SD_URN_ENV_PROCESS);
    tb_pcoll(&b, "p_i1", "bytes", "global");
    tb_pcoll(&b, "p_i2", "bytes", "global");
    tb_pcoll(&b, "p_a", "kv_gen", "global");
    tb_pcoll(&b, "p_b", "gen", "global");
    tb_pcoll(&b, "p_c", "gen", "global");
    tb_pcoll(&b, "p_g", "kv_gen_iter_gen", "global");
    tb_pcoll(&b, "p_x", "gen", "global");
    tb_pcoll(&b, "p_y", "gen", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "i1", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_i1", NULL);
    tb_transform(&b, "i2", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_i2", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_i1", "out=p_a",
                 NULL);
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_i2", "out=p_b",
                 NULL);
    tb_transform(&b, "c", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "py", "in=p_i2", "out=p_c",
                 NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_a", "out=p_g",
                 NULL);
    tb_transform(&b, "x", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_g", "out=p_x",
                 NULL);
    tb_transform(&b, "y", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_g", "out=p_y",
                 NULL);
    return tb_finish(&b);
}

static void test_impulses_merge_and_siblings_fuse(void **state)
{
    (void)state;
    pb_pipeline *p = siblings_pipeline();
    sd_plan *plan = build_ok(p, &OPTS);
    /* One Impulse stage; a and b in one stage (c is in another environment); x and y too. */
    assert_int_equal(count_kind(plan, SD_PLAN_STAGE_IMPULSE), 1);
    assert_int_equal(count_kind(plan, SD_PLAN_STAGE_SDK), 3);
    const sd_plan_stage *sa = stage_with(plan, "a");
    assert_ptr_equal(sa, stage_with(plan, "b"));
    assert_ptr_not_equal(sa, stage_with(plan, "c"));
    assert_string_equal(sa->inputs[0], "p_i1");
    assert_string_equal(stage_with(plan, "c")->inputs[0], "p_i1"); /* the merged Impulse's */
    assert_int_equal(sa->n_transforms, 2);
    assert_ptr_equal(stage_with(plan, "x"), stage_with(plan, "y"));
    assert_true(stage_index(plan, stage_with(plan, "x")) > stage_index(plan, sa));
    /* Both readers hang off the one data source of the stage's descriptor. */
    const pb_transform *ta = desc_transform(sa->descriptor, "a");
    const pb_transform *tb_ = desc_transform(sa->descriptor, "b");
    assert_non_null(ta);
    assert_non_null(tb_);
    assert_string_equal(ta->inputs[0]->value, "p_i1");
    assert_string_equal(tb_->inputs[0]->value, "p_i1");
    sd_plan_destroy(plan);

    /* The option that keeps the old shape: two Impulses, a stage per reader. */
    sd_plan_options sep = OPTS;
    sep.separate_siblings = true;
    plan = build_ok(p, &sep);
    assert_int_equal(count_kind(plan, SD_PLAN_STAGE_IMPULSE), 2);
    assert_int_equal(count_kind(plan, SD_PLAN_STAGE_SDK), 5);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * A sibling whose side input comes from the shared stage cannot join it (the stage would read
 * its own output): s (the side) fuses beside a; m reads a's output with s as a side input and
 * gets a stage of its own after it, as does z, another reader of the Impulse with that side.
 */
static void test_sibling_with_own_side_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "gen", "global");
    tb_pcoll(&b, "p_s", "gen", "global");
    tb_pcoll(&b, "p_m", "gen", "global");
    tb_pcoll(&b, "p_z", "gen", "global");
    pardo_opts none = { 0 };
    pardo_opts sides = { .sides = "s:iterable" };
    tb_transform(&b, "imp", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "s", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_s",
                 NULL);
    tb_transform(&b, "m", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sides), "js", "in=p_a,s=p_s",
                 "out=p_m", NULL);
    tb_transform(&b, "z", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sides), "js", "in=p_imp,s=p_s",
                 "out=p_z", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *sa = stage_with(plan, "a");
    assert_ptr_equal(sa, stage_with(plan, "s"));
    const sd_plan_stage *sm = stage_with(plan, "m");
    const sd_plan_stage *sz = stage_with(plan, "z");
    assert_ptr_not_equal(sa, sm);
    assert_ptr_not_equal(sa, sz);
    assert_true(stage_index(plan, sm) > stage_index(plan, sa));
    assert_true(stage_index(plan, sz) > stage_index(plan, sa));
    assert_int_equal(sm->n_side_inputs, 1);
    assert_string_equal(sm->side_inputs[0].pcollection, "p_s");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's Create(["x", "y"]) | Map | Reshuffle | Map, with the names the SDK gives: the
 * Create's own Reshuffle (Create/MaybeReshuffle/Reshuffle over the values of
 * Create/FlatMap(<lambda at core.py:N>)) and a user's Reshuffle. With users_name set, the
 * Create's composites carry another name ("Mine/MaybeReshuffle" over a values PCollection not
 * named after the Create's FlatMap): a user's Reshuffle in disguise, which keeps its break.
 */
static pb_pipeline *create_pipeline(bool users_name)
{
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    pb_pcoll *values = tb_pcoll(&b, "p_values", "bytes", "global");
    values->unique_name =
        tb_str(&b, users_name ? "20Mine/FlatMap(split).None"
                              : "40Create/FlatMap(<lambda at core.py:4094>).None");
    tb_pcoll(&b, "p_shuffled", "bytes", "global");
    tb_pcoll(&b, "p_decoded", "gen", "global");
    tb_pcoll(&b, "p_mapped", "gen", "global");
    tb_pcoll(&b, "p_user_shuffled", "gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    const char *maybe = users_name ? "Mine/MaybeReshuffle" : "Create/MaybeReshuffle";
    char rs[64];
    snprintf(rs, sizeof(rs), "%s/Reshuffle", maybe);
    tb_transform(&b, "Create", NULL, NO_PAYLOAD, "", "", "out=p_decoded",
                 "Create/Impulse,Create/FlatMap,Create/MaybeReshuffle,Create/Map(decode)");
    tb_transform(&b, "Create/Impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                 NULL);
    tb_transform(&b, "Create/FlatMap", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_values", NULL);
    tb_transform(&b, "Create/MaybeReshuffle", NULL, NO_PAYLOAD, "", "in=p_values", "out=p_shuffled",
                 "Create/MaybeReshuffle/Reshuffle")
        ->unique_name = tb_str(&b, maybe);
    tb_transform(&b, "Create/MaybeReshuffle/Reshuffle", SD_URN_TRANSFORM_RESHUFFLE, NO_PAYLOAD,
                 "js", "in=p_values", "out=p_shuffled", NULL)
        ->unique_name = tb_str(&b, rs);
    tb_transform(&b, "Create/Map(decode)", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                 "in=p_shuffled", "out=p_decoded", NULL);
    tb_transform(&b, "Map", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_decoded",
                 "out=p_mapped", NULL);
    tb_transform(&b, "Reshuffle", SD_URN_TRANSFORM_RESHUFFLE, NO_PAYLOAD, "js", "in=p_mapped",
                 "out=p_user_shuffled", NULL);
    tb_transform(&b, "After", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                 "in=p_user_shuffled", "out=p_out", NULL);
    tb_root(&b, "Create");
    tb_root(&b, "Map");
    tb_root(&b, "Reshuffle");
    tb_root(&b, "After");
    return tb_finish(&b);
}

static void test_create_reshuffle_fuses(void **state)
{
    (void)state;
    pb_pipeline *p = create_pipeline(false);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *s = stage_with(plan, "Create/FlatMap");
    assert_ptr_equal(s, stage_with(plan, "Create/Map(decode)"));
    assert_ptr_equal(s, stage_with(plan, "Map"));
    assert_false(s->after_reshuffle);
    const sd_plan_stage *after = stage_with(plan, "After"); /* the user's Reshuffle: a break */
    assert_ptr_not_equal(s, after);
    assert_true(after->after_reshuffle);
    assert_string_equal(after->inputs[0], "p_mapped");
    assert_int_equal(count_kind(plan, SD_PLAN_STAGE_SDK), 2);
    sd_plan_destroy(plan);
    free_pipeline(p);

    p = create_pipeline(true);
    plan = build_ok(p, &OPTS);
    s = stage_with(plan, "Create/FlatMap");
    const sd_plan_stage *decode = stage_with(plan, "Create/Map(decode)");
    assert_ptr_not_equal(s, decode);
    assert_true(decode->after_reshuffle);
    assert_int_equal(count_kind(plan, SD_PLAN_STAGE_SDK), 3);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

int test_plan_run_fusion(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_impulses_merge_and_siblings_fuse),
        cmocka_unit_test(test_sibling_with_own_side_input),
        cmocka_unit_test(test_create_reshuffle_fuses),
    };
    return cmocka_run_group_tests_name("plan_fusion", tests, NULL, NULL);
}
