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

/* Run Create(1..n) -> fn on endpoint; OUT: the sorted results in got (n of them). */
static sd_status run_ints(const char *endpoint, sd_elem_fn fn, int64_t n, int64_t *got, sd_err *err)
{
    int64_t in[8];
    for (int64_t i = 0; i < n; i++) {
        in[i] = i + 1;
    }
    sd_pipeline *p = sd_pipeline_create("local-runner");
    sd_pcoll *out =
        sd_apply_map(p, "Fn", sd_create_ints(p, "Ints", in, (size_t)n), fn, sd_pcoder_varint(p));
    sd_collection *col = sd_collect(p, "Collect", out);
    sd_run_options o = { .endpoint = endpoint, .timeout_ms = 60000 };
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
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
