/*
 * Integration tests for sd_local_runner (<sundial/runner.h>): one embedded runner serving many
 * runs. Pipelines run one after another on it, each with its own correct result (an int
 * squared per element, collected and compared); a failing job does not disturb the next; a
 * runner's endpoint stays the same across runs; bad arguments are refused with a clear error,
 * and NULL is accepted where documented.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sundial/sundial.h>

#include <cmocka.h>

static sd_status square(sd_ctx *c, const sd_elem *in)
{
    return sd_out(c, sd_val_int(in->value.i * in->value.i));
}
SD_REGISTER(square)

static sd_status fail_on_three(sd_ctx *c, const sd_elem *in)
{
    if (in->value.i == 3) {
        return sd_fail(c, "local runner test: element 3 refused");
    }
    return sd_out(c, in->value);
}
SD_REGISTER(fail_on_three)

/* Run Create(1..n) -> fn on endpoint with the job's beam:option:sundial_embed_input:v1
 * (NULL: not given); OUT: the sorted results in got (n of them). */
static sd_status run_ints_embed(const char *endpoint,
                                sd_elem_fn fn,
                                int64_t n,
                                int64_t *got,
                                const char *embed,
                                sd_err *err)
{
    int64_t *in = test_malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        in[i] = i + 1;
    }
    sd_pipeline *p = sd_pipeline_create("local-runner");
    sd_pcoll *out =
        sd_apply_map(p, "Fn", sd_create_ints(p, "Ints", in, (size_t)n), fn, sd_pcoder_varint(p));
    test_free(in);
    sd_collection *col = sd_collect(p, "Collect", out);
    const char *names[] = { "beam:option:sundial_embed_input:v1" };
    const char *values[] = { embed };
    sd_run_options o = { .endpoint = endpoint, .timeout_ms = 60000 };
    if (embed != NULL) {
        o.n_options = 1;
        o.option_names = names;
        o.option_values = values;
    }
    sd_status st = sd_pipeline_run(p, &o, NULL, err);
    if (st == SD_OK) {
        sd_collection_sort(col);
        assert_int_equal(sd_collection_len(col), n);
        for (int64_t i = 0; i < n; i++) {
            got[i] = sd_collection_at(col, (size_t)i)->value.i;
        }
    }
    sd_pipeline_destroy(p);
    return st;
}

static sd_status run_ints(const char *endpoint, sd_elem_fn fn, int64_t n, int64_t *got, sd_err *err)
{
    return run_ints_embed(endpoint, fn, n, got, NULL, err);
}

static void test_many_runs_one_runner(void **state)
{
    (void)state;
    sd_err err;
    sd_err_clear(&err);
    sd_local_runner *r = NULL;
    assert_int_equal(sd_local_runner_start(false, &r, &err), SD_OK);
    const char *ep = sd_local_runner_endpoint(r);
    assert_non_null(ep);
    assert_int_equal(strncmp(ep, "127.0.0.1:", 10), 0);
    for (int64_t n = 1; n <= 6; n++) {
        int64_t got[8];
        assert_int_equal(run_ints(ep, square, n, got, &err), SD_OK);
        for (int64_t i = 0; i < n; i++) {
            assert_int_equal(got[i], (i + 1) * (i + 1));
        }
        assert_string_equal(sd_local_runner_endpoint(r), ep);
    }
    /* A failing job ends FAILED with its error; the runner serves the next one. */
    int64_t got[8];
    assert_int_equal(run_ints(ep, fail_on_three, 5, got, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "element 3 refused"));
    assert_int_equal(run_ints(ep, square, 3, got, &err), SD_OK);
    assert_int_equal(got[2], 9);
    sd_local_runner_stop(r);
}

/*
 * A small bundle's input goes in its ProcessBundleRequest (the C worker declares
 * beam:protocol:control_request_elements_embedding:v1), every bundle's of a job that says
 * sundial_embed_input=false over the data stream: the same results, for 1, 7 and 100,000
 * elements (sdk_it_test_large's bundles, over 256 KiB each, take the data stream anyway).
 */
static void test_input_embedded_or_streamed(void **state)
{
    (void)state;
    sd_err err;
    sd_err_clear(&err);
    sd_local_runner *r = NULL;
    assert_int_equal(sd_local_runner_start(false, &r, &err), SD_OK);
    const char *ep = sd_local_runner_endpoint(r);
    static const int64_t sizes[] = { 1, 7, 100000 };
    static const char *const embeds[] = { NULL, "true", "false" };
    int64_t *got = test_malloc(100000 * sizeof(int64_t));
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (size_t e = 0; e < sizeof(embeds) / sizeof(embeds[0]); e++) {
            int64_t n = sizes[k];
            assert_int_equal(run_ints_embed(ep, square, n, got, embeds[e], &err), SD_OK);
            for (int64_t i = 0; i < n; i++) {
                assert_int_equal(got[i], (i + 1) * (i + 1));
            }
        }
    }
    test_free(got);
    sd_local_runner_stop(r);
}

/*
 * Runs keep their connection to a reused runner between jobs; a runner stopped and another
 * started is still reached (nothing stale is used), and the stopped one's endpoint fails
 * quickly with a clear error instead of hanging.
 */
static void test_runner_replaced(void **state)
{
    (void)state;
    sd_err err;
    sd_err_clear(&err);
    int64_t got[8];
    char old_ep[64];
    sd_local_runner *a = NULL, *b = NULL;
    assert_int_equal(sd_local_runner_start(false, &a, &err), SD_OK);
    snprintf(old_ep, sizeof(old_ep), "%s", sd_local_runner_endpoint(a));
    assert_int_equal(run_ints(old_ep, square, 2, got, &err), SD_OK);
    assert_int_equal(run_ints(old_ep, square, 3, got, &err), SD_OK);
    sd_local_runner_stop(a);
    assert_int_equal(sd_local_runner_start(false, &b, &err), SD_OK);
    assert_int_equal(run_ints(sd_local_runner_endpoint(b), square, 4, got, &err), SD_OK);
    assert_int_equal(got[3], 16);
    if (strcmp(old_ep, sd_local_runner_endpoint(b)) != 0) {
        sd_status st = run_ints(old_ep, square, 2, got, &err);
        assert_int_not_equal(st, SD_OK);
        assert_non_null(strstr(sd_err_msg(&err), old_ep));
    }
    assert_int_equal(run_ints(sd_local_runner_endpoint(b), square, 5, got, &err), SD_OK);
    assert_int_equal(got[4], 25);
    sd_local_runner_stop(b);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_local_runner_start(false, NULL, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "NULL out"));
    assert_null(sd_local_runner_endpoint(NULL));
    sd_local_runner_stop(NULL);
}

int main(int argc, char **argv)
{
    int code = 0;
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_runs_one_runner),
        cmocka_unit_test(test_input_embedded_or_streamed),
        cmocka_unit_test(test_runner_replaced),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
