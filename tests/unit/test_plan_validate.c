/*
 * Unit tests for runner/plan: validation and robustness. Rejections (Docker environments,
 * every problem in one error, malformed pipelines as a table through run_plan_cases), pass-
 * through composites and custom non-merging window fns that must be accepted, damaged
 * pipelines (each component removed in turn: OK, EINVAL or EUNIMPL, never a crash), the OOM
 * loop over pipelines with every synthesized part, and NULL arguments.
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
/* Rejections                                                                                 */
/* ----------------------------------------------------------------------------------------- */

static void test_docker_rejected(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_env(&b, "dock", SD_URN_ENV_DOCKER);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "bytes", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "dock", "in=p_imp", "out=p_a",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    const char *needles[] = { "(1 problem)", "environment \"dock\"", "Docker", SD_URN_ENV_EXTERNAL,
                              NULL };
    expect_rejected(p, SD_EUNIMPL, needles);
    free_pipeline(p);
}

/* A Docker environment from Beam's Java expansion service (its image names the Java SDK) is
 * refused with the way to a process environment for Java transforms. */
static void test_docker_java_hint(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    pb_env *dock = tb_env(&b, "java_env", SD_URN_ENV_DOCKER);
    Org__Apache__Beam__Model__Pipeline__V1__DockerPayload dp =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__DOCKER_PAYLOAD__INIT;
    dp.container_image = "apache/beam_java17_sdk:2.73.0";
    uint8_t buf[64];
    dock->payload.len = protobuf_c_message_pack(&dp.base, buf);
    dock->payload.data = buf;
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "bytes", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "java_env", "in=p_imp",
                 "out=p_a", NULL);
    pb_pipeline *p = tb_finish(&b);
    const char *needles[] = { "environment \"java_env\" is Docker",
                              "image \"apache/beam_java17_sdk:2.73.0\"",
                              "tools/expansion_service.sh", "--defaultEnvironmentType=PROCESS",
                              NULL };
    expect_rejected(p, SD_EUNIMPL, needles);
    free_pipeline(p);
}

/* sd_plan_options.env_check: asked once per environment an SDK stage runs in (here "js", used
 * by three transforms; never for the runner's Impulse), its problem reported with the others
 * and its "invalid" verdict deciding the code. */
typedef struct env_check_seen {
    int calls;
    bool refuse;
    bool invalid;
} env_check_seen;

static char *fake_env_check(void *ctx, const char *env_id, const pb_env *env, bool *invalid)
{
    env_check_seen *seen = ctx;
    seen->calls++;
    assert_string_equal(env_id, "js");
    assert_string_equal(env->urn, SD_URN_ENV_EXTERNAL);
    if (!seen->refuse) {
        return NULL;
    }
    *invalid = seen->invalid;
    return sd_asprintf("environment \"%s\": no worker today", env_id);
}

static void test_env_check_hook(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++) {
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_a", "bytes", "global");
        tb_pcoll(&b, "p_b", "bytes", "global");
        tb_pcoll(&b, "p_c", "bytes", "global");
        pardo_opts none = { 0 };
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_a", NULL);
        tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_a", "out=p_b",
                     NULL);
        tb_transform(&b, "c", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_c", NULL);
        pb_pipeline *p = tb_finish(&b);
        env_check_seen seen = { .refuse = round > 0, .invalid = round == 2 };
        sd_plan_options opt = SD_PLAN_OPTIONS_INIT;
        opt.env_check = fake_env_check;
        opt.env_check_ctx = &seen;
        sd_err err = { 0 };
        sd_status want = round == 0 ? SD_OK : round == 1 ? SD_EUNIMPL : SD_EINVAL;
        assert_int_equal(sd_plan_validate_ex(p, &opt, NULL, &err), want);
        assert_int_equal(seen.calls, 1);
        if (round > 0) {
            assert_non_null(strstr(sd_err_msg(&err), "environment \"js\": no worker today"));
        }
        free_pipeline(p);
    }
}

/* A composite with no URN and no subtransforms that returns its input (Java's identity and
 * tuple projection transforms) has nothing to run; one that makes a new PCollection is refused. */
static void test_pass_through_composite(void **state)
{
    (void)state;
    for (int bad = 0; bad < 2; bad++) {
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_new", "bytes", "global");
        tb_pcoll(&b, "p_out", "bytes", "global");
        pardo_opts none = { 0 };
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        tb_transform(&b, "identity", "", NO_PAYLOAD, "", "in=p_imp",
                     bad ? "out=p_new" : "out=p_imp", NULL);
        tb_transform(&b, "after", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_out", NULL);
        pb_pipeline *p = tb_finish(&b);
        if (bad) {
            const char *needles[] = { "no URN and no subtransforms", NULL };
            expect_rejected(p, SD_EINVAL, needles);
        } else {
            sd_plan *plan = build_ok(p, &OPTS);
            sd_plan_destroy(plan);
        }
        free_pipeline(p);
    }
}

/* A window fn the runner does not know but whose windows never merge (Java's IdentityWindowFn
 * behind PAssert) is assigned by the SDK: the plan groups by the elements' own windows. */
static void test_custom_non_merging_window_fn(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_ws(&b, "identity", "beam:window_fn:serialized_java:v1", NO_PAYLOAD, "gw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_gen", "identity");
    tb_pcoll(&b, "p_g", "kv_gen_iter_gen", "identity");
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    pardo_opts none = { 0 };
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    bool seen = false;
    for (size_t i = 0; i < plan->n_windowings; i++) {
        if (strcmp(plan->windowings[i].id, "identity") == 0) {
            assert_int_equal(plan->windowings[i].kind, SD_PLAN_WINDOW_CUSTOM);
            assert_int_equal(plan->windowings[i].merge, SD_PLAN_MERGE_NON_MERGING);
            seen = true;
        }
    }
    assert_true(seen);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * A GroupByKey over a custom window fn that merges gets a merge_windows stage (merge.c): the
 * requests are a new output of the GroupByKey, the SDK stage runs beam:transform:merge_windows:v1
 * with the window fn's FunctionSpec as payload, its results are a stage output nobody in the
 * graph consumes, and both PCollections are in the global windowing strategy with the coders of
 * Beam's contract. With an opaque window coder it is refused, naming the coder and its user.
 */
static void test_custom_merging_window_fn(void **state)
{
    (void)state;
    /* 0: interval windows; 1: an opaque Java coder; 2: beam:coder:custom_window:v1. All three
     * plan (the SDK merges; the runner reads the max timestamp the custom_window coder adds). */
    for (int opaque = 0; opaque < 3; opaque++) {
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_coder(&b, "cw", opaque == 2 ? SD_URN_CODER_CUSTOM_WINDOW : "beam:coders:javasdk:0.1",
                 opaque == 2 ? "gen" : "");
        pb_wstrat *ws = tb_ws(&b, "merging", "beam:window_fn:serialized_java:v1", NO_PAYLOAD,
                              opaque ? "cw" : "iw");
        ws->merge_status = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NEEDS_MERGE;
        ws->environment_id = "js";
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_kv", "kv_gen", "merging");
        tb_pcoll(&b, "p_g", "kv_gen_iter_gen", "merging");
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        pardo_opts none = { 0 };
        tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_kv", NULL);
        tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                     NULL);
        pb_pipeline *p = tb_finish(&b);
        sd_plan *plan = build_ok(p, &OPTS);
        /* The window coder: interval_window as it is; an opaque one wrapped as
         * custom_window(length_prefix(cw)); an SDK's custom_window over an unknown component
         * keeps its URN, the component length-prefixed. */
        const sd_plan_pcollection *kv = sd_plan_find_pcollection(plan, "p_kv");
        assert_non_null(kv);
        const char *win = kv->window_coder_id;
        if (opaque) {
            const sd_plan_coder *cw = sd_plan_find_coder(plan, win);
            assert_non_null(cw);
            assert_string_equal(cw->urn, SD_URN_CODER_CUSTOM_WINDOW);
            assert_int_equal(cw->n_components, 1);
            const sd_plan_coder *lp = sd_plan_find_coder(plan, cw->components[0]);
            assert_string_equal(lp->urn, SD_URN_CODER_LENGTH_PREFIX);
            assert_string_equal(lp->components[0], opaque == 1 ? "cw" : "gen");
            /* The port coder names it too: the SDK writes each window's max timestamp. */
            const sd_plan_coder *port = sd_plan_find_coder(plan, kv->port_coder_id);
            assert_string_equal(port->components[1], win);
        } else {
            assert_string_equal(win, "iw");
        }
        const sd_plan_stage *g = NULL, *m = NULL;
        for (size_t i = 0; i < plan->n_stages; i++) {
            const sd_plan_stage *s = &plan->stages[i];
            if (s->kind == SD_PLAN_STAGE_GBK) {
                g = s;
            }
            if (s->kind == SD_PLAN_STAGE_SDK && s->n_transforms == 1 &&
                strcmp(s->transforms[0], "gbk/MergeWindows") == 0) {
                m = s;
                assert_true(i > 0 && plan->stages[i - 1].kind == SD_PLAN_STAGE_GBK);
            }
        }
        assert_non_null(g);
        assert_non_null(m);
        assert_string_equal(g->merge_requests, "gbk/merge/requests");
        assert_string_equal(g->merge_results, "gbk/merge/results");
        assert_int_equal(g->n_outputs, 2);
        assert_string_equal(m->inputs[0], "gbk/merge/requests");
        assert_int_equal(m->n_outputs, 1);
        assert_string_equal(m->outputs[0].pcollection, "gbk/merge/results");
        assert_non_null(m->outputs[0].sink_transform);
        assert_string_equal(m->environment_id, "js");
        const sd_plan_pcollection *rq = sd_plan_find_pcollection(plan, "gbk/merge/requests");
        const sd_plan_pcollection *rs = sd_plan_find_pcollection(plan, "gbk/merge/results");
        assert_non_null(rq);
        assert_non_null(rs);
        assert_string_equal(rq->windowing_strategy_id, "global");
        assert_string_equal(rs->windowing_strategy_id, "global");
        /* kv(bytes, iterable(iw)) and kv(bytes, kv(iterable(iw), iterable(kv(iw, ...)))). */
        const sd_plan_coder *rc = sd_plan_find_coder(plan, rq->wire_coder_id);
        assert_string_equal(rc->urn, SD_URN_CODER_KV);
        assert_string_equal(sd_plan_find_coder(plan, rc->components[0])->urn, SD_URN_CODER_BYTES);
        const sd_plan_coder *it = sd_plan_find_coder(plan, rc->components[1]);
        assert_string_equal(it->urn, SD_URN_CODER_ITERABLE);
        assert_string_equal(it->components[0], win);
        const sd_plan_coder *sc = sd_plan_find_coder(plan, rs->wire_coder_id);
        const sd_plan_coder *body = sd_plan_find_coder(plan, sc->components[1]);
        assert_string_equal(body->urn, SD_URN_CODER_KV);
        assert_string_equal(body->components[0], rc->components[1]);
        /* The descriptor runs merge_windows with the window fn's FunctionSpec. */
        bool found = false;
        for (size_t i = 0; i < m->descriptor->n_transforms; i++) {
            const Org__Apache__Beam__Model__Pipeline__V1__PTransform *t =
                m->descriptor->transforms[i]->value;
            if (t->spec != NULL && strcmp(t->spec->urn, SD_URN_TRANSFORM_MERGE_WINDOWS) == 0) {
                Org__Apache__Beam__Model__Pipeline__V1__FunctionSpec *fs =
                    org__apache__beam__model__pipeline__v1__function_spec__unpack(
                        NULL, t->spec->payload.len, t->spec->payload.data);
                assert_non_null(fs);
                assert_string_equal(fs->urn, "beam:window_fn:serialized_java:v1");
                org__apache__beam__model__pipeline__v1__function_spec__free_unpacked(fs, NULL);
                found = true;
            }
        }
        assert_true(found);
        sd_plan_destroy(plan);
        free_pipeline(p);
    }
}

static void test_many_problems_one_error(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_env(&b, "dock", SD_URN_ENV_DOCKER);
    /* A custom window fn that does not say whether its windows merge: refused. */
    tb_ws(&b, "custom", "beam:window_fn:my_custom:v1", NO_PAYLOAD, "gw")->merge_status =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__UNSPECIFIED;
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "bytes", "global");
    tb_pcoll(&b, "p_b", "bytes", "custom");
    tb_pcoll(&b, "p_c", "bytes", "global");
    pardo_opts bad_side = { .sides = "s:beam:side_input:weird:v1" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "x1", "beam:transform:frobnicate:v1", NO_PAYLOAD, "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "x2", "beam:transform:defrobnicate:v1", NO_PAYLOAD, "js", "in=p_a", "out=p_b",
                 NULL);
    tb_transform(&b, "d", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, bad_side), "dock",
                 "in=p_imp,s=p_imp", "out=p_c", NULL);
    /* Time-sorted input needs keys: a ParDo with no state or timers cannot have it. */
    pardo_opts sorted_stateless = { .time_sorted = true };
    tb_pcoll(&b, "p_d", "bytes", "global");
    tb_transform(&b, "sorted", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sorted_stateless), "js",
                 "in=p_imp", "out=p_d", NULL);
    tb_require(&b, "beam:requirement:pardo:teleport:v1");
    tb_require(&b, SD_URN_REQUIREMENT_TIME_SORTED_INPUT);
    pb_pipeline *p = tb_finish(&b);
    const char *needles[] = { "(7 problems)",
                              "beam:transform:frobnicate:v1",
                              "beam:transform:defrobnicate:v1",
                              "Docker",
                              "beam:requirement:pardo:teleport:v1",
                              "time_sorted_input",
                              "beam:window_fn:my_custom:v1",
                              "beam:side_input:weird:v1",
                              NULL };
    expect_rejected(p, SD_EUNIMPL, needles);

    /* The full report has one line per problem. */
    char *report = NULL;
    sd_err err = { 0 };
    assert_int_equal(sd_plan_validate_ex(p, NULL, &report, &err), SD_EUNIMPL);
    assert_non_null(report);
    size_t lines = 0;
    for (const char *q = report; *q; q++) {
        lines += *q == '\n';
    }
    assert_int_equal(lines, 7);
    sd_free(report);
    free_pipeline(p);
}

/* Malformed pipelines: one builder, variant v breaks one thing (the row names it). */
typedef struct malformed_row {
    plan_case head;
    int variant;
} malformed_row;

static pb_pipeline *malformed_pipeline(const void *row)
{
    int v = ((const malformed_row *)row)->variant;
    tb b;
    tb_init(&b);
    tb_std(&b);
    pardo_opts none = { 0 };
    tb_coder(&b, "self", SD_URN_CODER_KV, "self,bytes");
    tb_coder(&b, "kv1", SD_URN_CODER_KV, "bytes");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a",
             v == 0   ? "nope"
             : v == 7 ? "kv1"
             : v == 8 ? "self"
                      : "bytes",
             v == 2 ? "ws_ghost" : "global");
    tb_pcoll(&b, "p_b", "bytes", "global");
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    const char *ain = v == 1   ? "in=p_ghost"
                      : v == 4 ? "in=p_b"
                      : v == 5 ? "x=p_imp,y=p_b"
                               : "in=p_imp";
    ProtobufCBinaryData junk = { 3, (uint8_t *)"\xff\xff\xff" };
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, v == 11 ? junk : tb_pardo(&b, none),
                 v == 6 ? "ghost" : "js", ain, "out=p_a", NULL);
    if (v == 10) {
        tb_transform(&b, "b", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_a", "out=p_b",
                     NULL);
    } else {
        tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_a",
                     v == 3 ? "out=p_a" : "out=p_b", NULL);
    }
    tb_root(&b, "impulse");
    tb_root(&b, "a");
    tb_root(&b, "b");
    if (v == 9) {
        tb_transform(&b, "comp", NULL, NO_PAYLOAD, "js", "", "", "nowhere");
        tb_root(&b, "comp");
    }
    return tb_finish(&b);
}

static void test_malformed(void **state)
{
    static const malformed_row rows[] = {
        { { "missing coder", "coder \"nope\" (used by PCollection \"p_a\") does not exist" }, 0 },
        { { "missing pcollection", "PCollection \"p_ghost\"" }, 1 },
        { { "missing windowing", "windowing strategy \"ws_ghost\"" }, 2 },
        { { "two producers", "is produced by both" }, 3 },
        { { "cycle", "cycle" }, 4 },
        { { "two main inputs", "exactly one main input" }, 5 },
        { { "missing env", "environment \"ghost\"" }, 6 },
        { { "kv arity", "needs 2 components" }, 7 },
        { { "coder cycle", "contains itself" }, 8 },
        { { "missing subtransform", "subtransform \"nowhere\"" }, 9 },
        { { "gbk non-kv", "must have a KV coder" }, 10 },
        { { "undecodable pardo", "does not decode as ParDoPayload" }, 11 },
    };
    (void)state;
    RUN_PLAN_CASES(rows, malformed_pipeline, SD_EINVAL, NULL);
}

/* ----------------------------------------------------------------------------------------- */
/* Damaged pipelines                                                                          */
/* ----------------------------------------------------------------------------------------- */

/* Build must answer OK (with a consistent plan), EINVAL or EUNIMPL; never crash. */
static void build_any(const pb_pipeline *p)
{
    sd_plan *plan = NULL;
    sd_err err = { 0 };
    sd_status st = sd_plan_build(p, &OPTS, &plan, &err);
    if (st == SD_OK) {
        const char *broken = sd__plan_check(plan);
        if (broken != NULL) {
            fail_msg("plan invariant broken: %s", broken);
        }
        sd_plan_destroy(plan);
        return;
    }
    if (st != SD_EINVAL && st != SD_EUNIMPL) {
        fail_msg("unexpected %s: %s", sd_status_name(st), sd_err_msg(&err));
    }
    assert_null(plan);
    assert_true(strlen(sd_err_msg(&err)) > 0);
}

/* Remove element i of a protobuf-c pointer array (for the duration of one build). */
#define WITHOUT(arr, n, i, body)         \
    do {                                 \
        void *saved_ = (void *)(arr)[i]; \
        size_t n_ = (n);                 \
        (arr)[i] = (arr)[n_ - 1];        \
        (n) = n_ - 1;                    \
        body;                            \
        (n) = n_;                        \
        (arr)[n_ - 1] = (arr)[i];        \
        (arr)[i] = saved_;               \
    } while (0)

static void damage(pb_pipeline *p, int rounds)
{
    pb_components *k = p->components;
    for (size_t i = 0; i < k->n_transforms; i++) {
        WITHOUT(k->transforms, k->n_transforms, i, build_any(p));
    }
    for (size_t i = 0; i < k->n_pcollections; i++) {
        WITHOUT(k->pcollections, k->n_pcollections, i, build_any(p));
    }
    for (size_t i = 0; i < k->n_coders; i++) {
        WITHOUT(k->coders, k->n_coders, i, build_any(p));
    }
    for (size_t i = 0; i < k->n_windowing_strategies; i++) {
        WITHOUT(k->windowing_strategies, k->n_windowing_strategies, i, build_any(p));
    }
    for (size_t i = 0; i < k->n_environments; i++) {
        WITHOUT(k->environments, k->n_environments, i, build_any(p));
    }
    /* Byte flips in the serialized pipeline (deterministic xorshift). */
    size_t len = protobuf_c_message_get_packed_size(&p->base);
    uint8_t *buf = sd_malloc(len);
    assert_non_null(buf);
    protobuf_c_message_pack(&p->base, buf);
    uint32_t x = 2463534242u;
    size_t decoded = 0;
    for (int round = 0; round < rounds; round++) {
        uint8_t *m = sd_memdup(buf, len);
        assert_non_null(m);
        for (int f = 0; f < 1 + round % 3; f++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            m[x % len] ^= (uint8_t)(1u << ((x >> 8) % 8));
        }
        pb_pipeline *q = org__apache__beam__model__pipeline__v1__pipeline__unpack(NULL, len, m);
        if (q != NULL) {
            decoded++;
            build_any(q);
            free_pipeline(q);
        }
        sd_free(m);
    }
    assert_true(decoded > (size_t)rounds / 30);
    sd_free(buf);
}

static void test_damaged_pipelines(void **state)
{
    (void)state;
    pb_pipeline *p = wordcount();
    damage(p, 3000);
    free_pipeline(p);
    p = load_fixture("ts_wordcount.pb");
    assert_non_null(p);
    damage(p, 600);
    free_pipeline(p);
}

/* ----------------------------------------------------------------------------------------- */
/* OOM                                                                                        */
/* ----------------------------------------------------------------------------------------- */

static void test_oom_loop(void **state)
{
    (void)state;
    pb_pipeline *pipes[4] = { wordcount(), NULL, NULL, NULL };
    {
        /* Also a pipeline with every feature the planner synthesizes for. */
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_coder(&b, "timer_gen", SD_URN_CODER_TIMER, "gen,gw");
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_kv", "kv_gen", "global");
        tb_pcoll(&b, "p_s", "gen", "global");
        tb_pcoll(&b, "p_side", "gen", "global");
        pardo_opts none = { 0 };
        pardo_opts st = { .state = "gen", .timer_coder = "timer_gen", .sides = "si:iterable" };
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_kv", NULL);
        tb_transform(&b, "side", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_side", NULL);
        tb_transform(&b, "stateful", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, st), "js",
                     "in=p_kv,si=p_side", "out=p_s", NULL);
        pipes[1] = tb_finish(&b);
    }
    {
        /* A Flatten that transcodes one input and copies a repeated one. */
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_a", "gen", "global");
        tb_pcoll(&b, "p_b", "str", "global");
        tb_pcoll(&b, "p_all", "gen", "global");
        pardo_opts none = { 0 };
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_a", NULL);
        tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_b", NULL);
        tb_transform(&b, "flat", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=p_a,1=p_a,2=p_b",
                     "out=p_all", NULL);
        pipes[2] = tb_finish(&b);
    }
    /* A TestStream whose main output is transcoded (Python's shape). */
    pipes[3] = py_teststream("fast", "fast");
    for (size_t k = 0; k < 4; k++) {
        long n;
        for (n = 1; n < 100000; n++) {
            sd_plan *plan = NULL;
            sd_err err = { 0 };
            sd_alloc_fail_after(n, 0);
            sd_status st = sd_plan_build(pipes[k], &OPTS, &plan, &err);
            long injected = sd_alloc_injected_failures();
            sd_alloc_fail_after(0, 0);
            if (injected == 0) {
                assert_int_equal(st, SD_OK);
                assert_null(sd__plan_check(plan));
                sd_plan_destroy(plan);
                break;
            }
            if (st != SD_ENOMEM) {
                fail_msg("allocation %ld failed but build returned %s (%s)", n, sd_status_name(st),
                         sd_err_msg(&err));
            }
            assert_null(plan);
        }
        assert_true(n > 10);
        for (n = 1; n < 100000; n++) {
            sd_err err = { 0 };
            sd_alloc_fail_after(n, 0);
            sd_status st = sd_plan_validate(pipes[k], &err);
            long injected = sd_alloc_injected_failures();
            sd_alloc_fail_after(0, 0);
            if (injected == 0) {
                assert_int_equal(st, SD_OK);
                break;
            }
            assert_int_equal(st, SD_ENOMEM);
        }
        free_pipeline(pipes[k]);
    }
}

static void test_null_args(void **state)
{
    (void)state;
    sd_err err = { 0 };
    sd_plan *plan = NULL;
    assert_int_equal(sd_plan_validate(NULL, &err), SD_EINVAL);
    assert_int_equal(sd_plan_build(NULL, NULL, &plan, &err), SD_EINVAL);
    assert_null(plan);
    sd_plan_destroy(NULL);
    pb_pipeline empty;
    org__apache__beam__model__pipeline__v1__pipeline__init(&empty);
    err = (sd_err){ 0 };
    assert_int_equal(sd_plan_validate(&empty, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "no components"));

    /* Components but no transforms: valid, and the plan has nothing to run. */
    pb_pipeline nothing;
    Org__Apache__Beam__Model__Pipeline__V1__Components comps;
    org__apache__beam__model__pipeline__v1__pipeline__init(&nothing);
    org__apache__beam__model__pipeline__v1__components__init(&comps);
    nothing.components = &comps;
    err = (sd_err){ 0 };
    assert_int_equal(sd_plan_build(&nothing, NULL, &plan, &err), SD_OK);
    assert_non_null(plan);
    assert_int_equal(plan->n_stages, 0);
    sd_plan_destroy(plan);
    assert_string_equal(sd_plan_stage_kind_name(SD_PLAN_STAGE_GBK), "gbk");
}

int test_plan_run_validate(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_docker_rejected),
        cmocka_unit_test(test_docker_java_hint),
        cmocka_unit_test(test_env_check_hook),
        cmocka_unit_test(test_many_problems_one_error),
        cmocka_unit_test(test_custom_non_merging_window_fn),
        cmocka_unit_test(test_custom_merging_window_fn),
        cmocka_unit_test(test_pass_through_composite),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_damaged_pipelines),
        cmocka_unit_test(test_oom_loop),
        cmocka_unit_test(test_null_args),
    };
    return cmocka_run_group_tests_name("plan_validate", tests, NULL, NULL);
}
