/* Unit tests for the C SDK's pipeline construction: the Beam Pipeline proto it produces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "proto/state_spec.h"
#include "runner/base/alloc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/sdf_int.h"
#include "sdk-harness/src/sdk_int.h"

#define PLF(x) org__apache__beam__model__pipeline__v1__##x

static sd_status noop_process(sd_ctx *c, void *state)
{
    (void)c;
    (void)state;
    return SD_OK;
}

static int setup_group(void **state)
{
    static const sd_dofn noop = { .process = noop_process };
    (void)state;
    return sd_register_dofn("u:noop", &noop) == SD_OK ? 0 : -1;
}

static const SD_PL(PTransform) * find_transform(const pb_Pipeline *pl, const char *id)
{
    for (size_t i = 0; i < pl->components->n_transforms; i++) {
        if (strcmp(pl->components->transforms[i]->key, id) == 0) {
            return pl->components->transforms[i]->value;
        }
    }
    return NULL;
}

static const SD_PL(Coder) * find_coder(const pb_Pipeline *pl, const char *id)
{
    for (size_t i = 0; i < pl->components->n_coders; i++) {
        if (strcmp(pl->components->coders[i]->key, id) == 0) {
            return pl->components->coders[i]->value;
        }
    }
    return NULL;
}

static const SD_PL(PCollection) * find_pcoll(const pb_Pipeline *pl, const char *id)
{
    for (size_t i = 0; i < pl->components->n_pcollections; i++) {
        if (strcmp(pl->components->pcollections[i]->key, id) == 0) {
            return pl->components->pcollections[i]->value;
        }
    }
    return NULL;
}

static pb_Pipeline *to_proto(sd_pipeline *p)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(
        sd_pipeline_to_proto(p, SD_URN_ENV_EXTERNAL, sd_bytes_str("x"), &bytes, &len, &err), SD_OK);
    pb_Pipeline *pl = PLF(pipeline__unpack)(NULL, len, bytes);
    sd_free(bytes);
    assert_non_null(pl);
    return pl;
}

static void test_wordcount_shape(void **state)
{
    (void)state;
    const char *const lines[] = { "a b", "c" };
    sd_pipeline *p = sd_pipeline_create("wc");
    sd_pcoll *text = sd_create_strings(p, "Lines", lines, 2);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *words = sd_apply(p, "Split", text, "u:noop", sd_bytes_str("cfg"), kv);
    sd_pcoll *counts = sd_count_per_key(p, "Count", words);
    assert_non_null(counts);
    assert_null(sd_pipeline_error(p));
    pb_Pipeline *pl = to_proto(p);

    /* Roots are the top-level transforms only. */
    assert_int_equal(pl->n_root_transform_ids, 3);
    assert_string_equal(pl->root_transform_ids[0], "Lines");
    assert_string_equal(pl->root_transform_ids[1], "Split");
    assert_string_equal(pl->root_transform_ids[2], "Count");

    /* Create is a composite of Impulse + a ParDo. */
    const SD_PL(PTransform) *create = find_transform(pl, "Lines");
    assert_non_null(create);
    assert_int_equal(create->n_subtransforms, 2);
    assert_string_equal(create->subtransforms[0], "Lines/Impulse");
    assert_string_equal(find_transform(pl, "Lines/Impulse")->spec->urn, SD_URN_TRANSFORM_IMPULSE);

    /* The ParDo carries the C DoFn by name and config. */
    const SD_PL(PTransform) *split = find_transform(pl, "Split");
    assert_string_equal(split->spec->urn, SD_URN_TRANSFORM_PARDO);
    assert_string_equal(split->environment_id, "env");
    SD_PL(ParDoPayload) *pp =
        PLF(par_do_payload__unpack)(NULL, split->spec->payload.len, split->spec->payload.data);
    assert_non_null(pp);
    assert_string_equal(pp->do_fn->urn, SD_URN_DOFN_C);
    sd__dofn_payload dp;
    assert_int_equal(sd__dofn_payload_decode(
                         sd_bytes_make(pp->do_fn->payload.data, pp->do_fn->payload.len), &dp, NULL),
                     SD_OK);
    assert_true(sd_bytes_equal(dp.name, sd_bytes_str("u:noop")));
    assert_true(sd_bytes_equal(dp.config, sd_bytes_str("cfg")));
    assert_int_equal(dp.n_outputs, 1);
    assert_true(sd_bytes_equal(dp.outputs[0], sd_bytes_str("out0")));
    sd__dofn_payload_deinit(&dp);
    PLF(par_do_payload__free_unpacked)(pp, NULL);

    /* The output PCollection has a KV<string, varint> coder. */
    const SD_PL(PCollection) *wp = find_pcoll(pl, "Split.out0");
    assert_non_null(wp);
    const SD_PL(Coder) *c = find_coder(pl, wp->coder_id);
    assert_string_equal(c->spec->urn, SD_URN_CODER_KV);
    assert_int_equal(c->n_component_coder_ids, 2);
    assert_string_equal(find_coder(pl, c->component_coder_ids[0])->spec->urn,
                        SD_URN_CODER_STRING_UTF8);
    assert_string_equal(find_coder(pl, c->component_coder_ids[1])->spec->urn, SD_URN_CODER_VARINT);
    assert_string_equal(wp->windowing_strategy_id, "w0");

    /* combine_per_key with a CombinePayload and GBK + ParDo leaves. */
    const SD_PL(PTransform) *count = find_transform(pl, "Count");
    assert_string_equal(count->spec->urn, SD_URN_TRANSFORM_COMBINE_PER_KEY);
    assert_int_equal(count->n_subtransforms, 2);
    assert_string_equal(count->subtransforms[0], "Count/Group");
    assert_string_equal(count->subtransforms[1], "Count/Combine");
    SD_PL(CombinePayload) *cp =
        PLF(combine_payload__unpack)(NULL, count->spec->payload.len, count->spec->payload.data);
    assert_non_null(cp);
    assert_string_equal(cp->combine_fn->urn, SD_URN_COMBINEFN_C);
    assert_string_equal(find_coder(pl, cp->accumulator_coder_id)->spec->urn, SD_URN_CODER_VARINT);
    PLF(combine_payload__free_unpacked)(cp, NULL);
    assert_string_equal(find_transform(pl, "Count/Group")->spec->urn,
                        SD_URN_TRANSFORM_GROUP_BY_KEY);
    /* The combining leaf is a primitive every Beam runner knows (a ParDo); Java runners'
     * fusers drop a leaf combine_grouped_values. */
    const SD_PL(PTransform) *comb = find_transform(pl, "Count/Combine");
    assert_string_equal(comb->spec->urn, SD_URN_TRANSFORM_PARDO);
    assert_int_equal(comb->n_subtransforms, 0);
    SD_PL(ParDoPayload) *pd =
        PLF(par_do_payload__unpack)(NULL, comb->spec->payload.len, comb->spec->payload.data);
    assert_non_null(pd);
    assert_string_equal(pd->do_fn->urn, SD_URN_DOFN_C);
    PLF(par_do_payload__free_unpacked)(pd, NULL);

    /* One external environment with the given payload and the capabilities. */
    assert_int_equal(pl->components->n_environments, 1);
    const pb_Environment *env = pl->components->environments[0]->value;
    assert_string_equal(env->urn, SD_URN_ENV_EXTERNAL);
    assert_int_equal(env->payload.len, 1);
    assert_true(env->n_capabilities > 5);

    PLF(pipeline__free_unpacked)(pl, NULL);
    sd_pipeline_destroy(p);
}

static void test_window_into_payloads(void **state)
{
    static const struct {
        const char *name;
        sd_windowfn fn;
        const char *urn;
        int merge;
    } rows[] = {
        { "fixed",
          { .kind = SD_WINDOW_FIXED, .size_ms = 10000, .offset_ms = 500 },
          SD_URN_WINDOW_FN_FIXED,
          1 },
        { "sliding",
          { .kind = SD_WINDOW_SLIDING, .size_ms = 10000, .period_ms = 2500 },
          SD_URN_WINDOW_FN_SLIDING,
          1 },
        { "sessions",
          { .kind = SD_WINDOW_SESSIONS, .gap_ms = 60000 },
          SD_URN_WINDOW_FN_SESSION,
          2 },
        { "global", { .kind = SD_WINDOW_GLOBAL }, SD_URN_WINDOW_FN_GLOBAL, 1 },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const int64_t xs[] = { 1 };
        sd_pipeline *p = sd_pipeline_create(rows[i].name);
        sd_pcoll *in = sd_create_ints(p, "In", xs, 1);
        sd_pcoll *w = sd_window_into(p, "Win", in, &rows[i].fn);
        assert_non_null(w);
        pb_Pipeline *pl = to_proto(p);
        const SD_PL(PTransform) *t = find_transform(pl, "Win");
        assert_string_equal(t->spec->urn, SD_URN_TRANSFORM_WINDOW_INTO);
        SD_PL(WindowIntoPayload) *wp =
            PLF(window_into_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
        assert_non_null(wp);
        assert_string_equal(wp->window_fn->urn, rows[i].urn);
        if (rows[i].fn.kind == SD_WINDOW_FIXED) {
            SD_PL(FixedWindowsPayload) *fp = PLF(fixed_windows_payload__unpack)(
                NULL, wp->window_fn->payload.len, wp->window_fn->payload.data);
            assert_non_null(fp);
            assert_int_equal(fp->size->seconds, 10);
            assert_int_equal(fp->offset->nanos, 500000000);
            PLF(fixed_windows_payload__free_unpacked)(fp, NULL);
        }
        PLF(window_into_payload__free_unpacked)(wp, NULL);
        const SD_PL(PCollection) *out = find_pcoll(pl, "Win.out");
        assert_string_equal(out->windowing_strategy_id, "w1");
        const SD_PL(WindowingStrategy) *ws = NULL;
        for (size_t k = 0; k < pl->components->n_windowing_strategies; k++) {
            if (strcmp(pl->components->windowing_strategies[k]->key, "w1") == 0) {
                ws = pl->components->windowing_strategies[k]->value;
            }
        }
        assert_non_null(ws);
        assert_int_equal((int)ws->merge_status, rows[i].merge);
        assert_string_equal(find_coder(pl, ws->window_coder_id)->spec->urn,
                            rows[i].fn.kind == SD_WINDOW_GLOBAL ? SD_URN_CODER_GLOBAL_WINDOW
                                                                : SD_URN_CODER_INTERVAL_WINDOW);
        PLF(pipeline__free_unpacked)(pl, NULL);
        sd_pipeline_destroy(p);
    }
}

static void test_side_inputs_and_outputs(void **state)
{
    (void)state;
    const int64_t xs[] = { 1, 2 };
    sd_pipeline *p = sd_pipeline_create("sides");
    sd_pcoll *in = sd_create_ints(p, "In", xs, 2);
    sd_pcoll *kvs = sd_apply(p, "Kv", in, "u:noop", SD_BYTES_NULL,
                             sd_pcoder_kv(p, sd_pcoder_varint(p), sd_pcoder_varint(p)));
    sd_side_input sides[2] = { { in, SD_SIDE_AS_ITERABLE }, { kvs, SD_SIDE_AS_MULTIMAP } };
    const char *const tags[] = { "evens", "odds" };
    sd_pcoll *outs[2];
    sd_pardo_spec spec = { .dofn = "u:noop",
                           .n_outputs = 2,
                           .output_tags = tags,
                           .n_side_inputs = 2,
                           .side_inputs = sides };
    assert_non_null(sd_pardo(p, "Split", in, &spec, outs));
    assert_string_equal(sd_pcoll_id(outs[1]), "Split.odds");
    pb_Pipeline *pl = to_proto(p);
    const SD_PL(PTransform) *t = find_transform(pl, "Split");
    assert_int_equal(t->n_inputs, 3);
    assert_int_equal(t->n_outputs, 2);
    SD_PL(ParDoPayload) *pp =
        PLF(par_do_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
    assert_int_equal(pp->n_side_inputs, 2);
    for (size_t i = 0; i < 2; i++) {
        const char *want = strcmp(pp->side_inputs[i]->key, "side0") == 0
                               ? SD_URN_SIDE_INPUT_ITERABLE
                               : SD_URN_SIDE_INPUT_MULTIMAP;
        assert_string_equal(pp->side_inputs[i]->value->access_pattern->urn, want);
        assert_string_equal(pp->side_inputs[i]->value->window_mapping_fn->urn,
                            SD_URN_WINDOW_MAPPING_GLOBAL);
    }
    PLF(par_do_payload__free_unpacked)(pp, NULL);
    PLF(pipeline__free_unpacked)(pl, NULL);
    sd_pipeline_destroy(p);
}

/*
 * Every state kind of the C SDK goes out as the state kinds table says: the row of its SDK
 * column, that row's protocol URN and StateSpec member, the value coder, and the key coder
 * exactly for keyed kinds. The public kinds are 0..n-1 with no gap, and they are exactly the
 * rows whose SDK column is set: a kind added to <sundial/sundial.h> and to the table is
 * covered here with no change to this test.
 */
static void test_state_specs(void **state)
{
    (void)state;

    enum { MAX = 16 };

    sd_user_state_kind want[MAX];
    char ids[MAX][8];
    size_t n = 0;
    while (n < MAX && sd__state_kind_from_sdk((sd_state_kind)n, &want[n])) {
        assert_true(sd__state_kind_in_sdk(want[n]));
        snprintf(ids[n], sizeof(ids[n]), "s%zu", n);
        n++;
    }
    assert_true(n >= 5 && n < MAX); /* bag, value, combining, map, ordered list at least */
    sd_user_state_kind k = SD_USER_STATE_KIND_COUNT;
    assert_false(sd__state_kind_from_sdk((sd_state_kind)-1, &k));
    size_t in_sdk = 0;
    for (int row = 0; row < (int)SD_USER_STATE_KIND_COUNT; row++) {
        in_sdk += sd__state_kind_in_sdk((sd_user_state_kind)row) ? 1 : 0;
    }
    assert_int_equal(in_sdk, n);

    const int64_t xs[] = { 1 };
    sd_pipeline *p = sd_pipeline_create("states");
    sd_pcoll *in = sd_create_ints(p, "In", xs, 1);
    sd_pcoll *kvs = sd_apply(p, "Kv", in, "u:noop", SD_BYTES_NULL,
                             sd_pcoder_kv(p, sd_pcoder_varint(p), sd_pcoder_varint(p)));
    sd_state_spec specs[MAX];
    for (size_t i = 0; i < n; i++) {
        specs[i] = (sd_state_spec){ .id = ids[i],
                                    .kind = (sd_state_kind)i,
                                    .coder = sd_pcoder_varint(p),
                                    .key_coder = sd_pcoder_string(p),
                                    .combinefn = SD_COMBINE_SUM };
    }
    sd_pardo_spec spec = { .dofn = "u:noop", .n_states = n, .states = specs };
    assert_non_null(sd_pardo(p, "Stateful", kvs, &spec, NULL));
    pb_Pipeline *pl = to_proto(p);
    const SD_PL(PTransform) *t = find_transform(pl, "Stateful");
    SD_PL(ParDoPayload) *pp =
        PLF(par_do_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
    assert_int_equal(pp->n_state_specs, n);
    for (size_t i = 0; i < n; i++) {
        const pb_StateSpec *ss = pp->state_specs[i]->value;
        assert_string_equal(pp->state_specs[i]->key, ids[i]);
        sd_pb_state_view v = { SD_USER_STATE_KIND_COUNT, NULL, NULL };
        assert_true(sd_pb_state_view_of(ss, &v));
        assert_int_equal(v.kind, want[i]);
        assert_int_equal((int)ss->spec_case, sd_pb_state_spec_case(want[i]));
        assert_string_equal(ss->protocol->urn, sd_user_state_row_of(v.kind)->protocol);
        assert_true(*v.value_coder_id != NULL && (*v.value_coder_id)[0] != '\0');
        if (sd_user_state_row_of(v.kind)->keyed) {
            assert_non_null(v.key_coder_id);
            assert_string_not_equal(*v.key_coder_id, *v.value_coder_id);
        } else {
            assert_null(v.key_coder_id);
        }
        if (v.kind == SD_USER_STATE_COMBINING) {
            assert_non_null(ss->combining_spec->combine_fn);
            assert_string_equal(ss->combining_spec->combine_fn->urn, SD_URN_COMBINEFN_C);
        }
    }
    PLF(par_do_payload__free_unpacked)(pp, NULL);
    PLF(pipeline__free_unpacked)(pl, NULL);
    sd_pipeline_destroy(p);
}

/* Sticky construction errors: the first one is kept and reported by name. */
static void test_sticky_errors(void **state)
{
    static const struct {
        const char *name;
        int what;
        sd_status code;
        const char *needle;
    } rows[] = {
        { "duplicate name", 0, SD_EEXIST, "used twice" },
        { "gbk on non-kv", 1, SD_EINVAL, "KV coder" },
        { "unknown dofn", 2, SD_ENOTFOUND, "u:missing" },
        { "flatten coder mismatch", 3, SD_EINVAL, "different coder" },
        { "bad window", 4, SD_EINVAL, "invalid window fn" },
        { "bad create element", 5, SD_EINVAL, "not one nested value" },
        { "negative delay", 6, SD_EINVAL,
          "ParDo Read: the bounded-delay watermark needs a delay of 0" },
        { "negative months", 7, SD_EINVAL, "got -1 months and 0 ms" },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const int64_t xs[] = { 1 };
        sd_pipeline *p = sd_pipeline_create(rows[i].name);
        sd_pcoll *a = sd_create_ints(p, "A", xs, 1);
        switch (rows[i].what) {
        case 0:
            sd_create_ints(p, "A", xs, 1);
            break;
        case 1:
            assert_null(sd_group_by_key(p, "G", a));
            break;
        case 2:
            assert_null(sd_apply(p, "M", a, "u:missing", SD_BYTES_NULL, NULL));
            break;
        case 3: {
            const char *const s[] = { "x" };
            sd_pcoll *b = sd_create_strings(p, "B", s, 1);
            sd_pcoll *both[2] = { a, b };
            assert_null(sd_flatten(p, "F", both, 2));
            break;
        }
        case 4: {
            sd_windowfn bad = { .kind = SD_WINDOW_FIXED, .size_ms = 0 };
            assert_null(sd_window_into(p, "W", a, &bad));
            break;
        }
        case 5: {
            const uint8_t junk[] = { 0x05, 'a' };
            sd_bytes e = sd_bytes_make(junk, sizeof(junk));
            assert_null(sd_create(p, "C", sd_pcoder_string(p), &e, 1, NULL));
            break;
        }
        case 6:
        case 7: {
            sd_pardo_spec spec = { .dofn = "u:noop",
                                   .watermark = { .kind = SD_WM_BOUNDED_DELAY,
                                                  .delay = rows[i].what == 6
                                                               ? (sd_interval){ 0, -5000 }
                                                               : (sd_interval){ -1, 0 } } };
            assert_null(sd_pardo(p, "Read", a, &spec, NULL));
            break;
        }
        }
        const sd_err *err = sd_pipeline_error(p);
        assert_non_null(err);
        assert_int_equal(err->code, rows[i].code);
        assert_non_null(strstr(err->msg, rows[i].needle));
        /* Later calls are no-ops returning NULL. */
        assert_null(sd_impulse(p, "Later"));
        uint8_t *bytes = NULL;
        size_t len;
        assert_int_equal(sd_pipeline_to_proto(p, NULL, SD_BYTES_NULL, &bytes, &len, NULL),
                         rows[i].code);
        sd_pipeline_destroy(p);
    }
}

/* Out of memory at every allocation: construction and translation fail cleanly. */
static void test_oom_loop(void **state)
{
    (void)state;
    for (long n = 1; n < 5000; n++) {
        const char *const lines[] = { "a b" };
        sd_pipeline *p = NULL;
        uint8_t *bytes = NULL;
        size_t len = 0;
        sd_alloc_fail_after(n, 0);
        p = sd_pipeline_create("oom");
        sd_status st = SD_ENOMEM;
        if (p != NULL) {
            sd_pcoll *text = sd_create_strings(p, "Lines", lines, 1);
            const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
            sd_pcoll *words = sd_apply(p, "Split", text, "u:noop", SD_BYTES_NULL, kv);
            sd_count_per_key(p, "Count", words);
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
        assert_int_not_equal(st, SD_OK);
    }
    fail_msg("construction never succeeded");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wordcount_shape),         cmocka_unit_test(test_window_into_payloads),
        cmocka_unit_test(test_side_inputs_and_outputs), cmocka_unit_test(test_state_specs),
        cmocka_unit_test(test_sticky_errors),           cmocka_unit_test(test_oom_loop),
    };
    return cmocka_run_group_tests(tests, setup_group, NULL);
}
