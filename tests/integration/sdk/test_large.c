/*
 * Integration tests: large data through the runner with the C SDK (issue: large elements hang).
 *
 * Each pipeline makes its big values inside a DoFn (so the pipeline proto stays small), sends
 * them across a fusion break (Reshuffle or GroupByKey: runner -> worker over the Data stream),
 * and checks every byte on the far side against the same deterministic pattern. What is
 * covered:
 *
 *   - one 64 MiB element through a Reshuffle;
 *   - 20 values of 1 MiB under one GroupByKey key (one 20 MiB grouped element);
 *   - one input whose bundle emits 256 MiB (256 values of 1 MiB) into a GroupByKey;
 *   - the memory budget (beam:option:sundial_memory_limit:v1): 64 values of 1 MiB under an
 *     8 MiB budget give the same groups, and the job really spills (pointed at a spill
 *     directory that does not exist it fails naming it; without a budget it never looks).
 *
 * A test that hangs here is a failure: every run has a deadline well below ctest's timeout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sundial/sundial.h"

#define MIB ((size_t)1 << 20)

/* Byte j of value `seed`: cheap, position dependent, different for every seed. */
static uint8_t pattern(uint64_t seed, size_t j)
{
    return (uint8_t)(seed * 131u + j * 7u + (j >> 13) * 3u);
}

static sd_status fill(sd_buf *b, uint64_t seed, size_t n)
{
    sd_status st = sd_buf_reserve(b, b->len + n);
    if (st != SD_OK) {
        return st;
    }
    for (size_t j = 0; j < n; j++) {
        b->data[b->len + j] = pattern(seed, j);
    }
    b->len += n;
    return SD_OK;
}

static bool check(sd_bytes v, uint64_t seed, size_t n)
{
    if (v.len != n) {
        return false;
    }
    for (size_t j = 0; j < n; j++) {
        if (v.ptr[j] != pattern(seed, j)) {
            return false;
        }
    }
    return true;
}

/* Config: varint count, varint size in bytes. */
static sd_status read_config(sd_ctx *c, int64_t *count, int64_t *size)
{
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    if (sd_read_int(&r, count) != SD_OK || sd_read_int(&r, size) != SD_OK || *count < 0 ||
        *size < 0) {
        return sd_fail(c, "config: want two varints (count, size)");
    }
    return SD_OK;
}

/* Any input -> `count` bytes values of `size` bytes (seed = index). */
static sd_status make_values_process(sd_ctx *c, void *state)
{
    int64_t count, size;
    sd_status st = read_config(c, &count, &size);
    (void)state;
    for (int64_t i = 0; st == SD_OK && i < count; i++) {
        /* The nested encoding of a bytes value: length prefix, then the bytes. */
        sd_buf v, b;
        sd_buf_init(&v, 0);
        sd_buf_init(&b, 0);
        st = fill(&v, (uint64_t)i, (size_t)size);
        if (st == SD_OK) {
            st = sd_enc_bytes(&b, v.data, v.len);
        }
        if (st == SD_OK) {
            st = sd_emit(c, 0, sd_buf_bytes(&b));
        }
        sd_buf_deinit(&v);
        sd_buf_deinit(&b);
    }
    return st;
}

/* Any input -> `count` KV<varint key, bytes> values of `size` bytes, key = index % keys. */
static sd_status make_kvs_process(sd_ctx *c, void *state)
{
    int64_t count, size;
    sd_status st = read_config(c, &count, &size);
    (void)state;
    int64_t keys = count >= 20 && count != 20 ? count : 1; /* 20 values: one key */
    for (int64_t i = 0; st == SD_OK && i < count; i++) {
        sd_buf b;
        sd_buf_init(&b, 0);
        st = sd_enc_int(&b, i % keys);
        if (st == SD_OK) {
            /* The value: bytes coder, nested (length prefix) inside the KV. */
            sd_buf v;
            sd_buf_init(&v, 0);
            st = fill(&v, (uint64_t)i, (size_t)size);
            if (st == SD_OK) {
                st = sd_enc_bytes(&b, v.data, v.len);
            }
            sd_buf_deinit(&v);
        }
        if (st == SD_OK) {
            st = sd_emit(c, 0, sd_buf_bytes(&b));
        }
        sd_buf_deinit(&b);
    }
    return st;
}

/* bytes (seed 0) -> "ok LEN" when every byte matches, else fail. */
static sd_status check_value_process(sd_ctx *c, void *state)
{
    int64_t count, size;
    sd_status st = read_config(c, &count, &size);
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes v;
    char out[64];
    (void)state;
    if (st != SD_OK) {
        return st;
    }
    if (sd_read_bytes(&r, &v) != SD_OK) {
        return sd_fail(c, "check: not a bytes element");
    }
    if (!check(v, 0, (size_t)size)) {
        return sd_fail(c, "check: element of %zu bytes does not match the pattern", v.len);
    }
    int n = snprintf(out, sizeof(out), "ok %zu", v.len);
    return sd_emit_str(c, out, (size_t)n);
}

/* KV<varint, Iterable<bytes>> -> "key K: N values, B bytes" after checking every value. */
static sd_status check_group_process(sd_ctx *c, void *state)
{
    int64_t count, size;
    sd_status st = read_config(c, &count, &size);
    sd_bytes key, v;
    sd_iter it;
    bool has;
    size_t n = 0, bytes = 0;
    char out[96];
    (void)state;
    if (st != SD_OK) {
        return st;
    }
    if (sd_ctx_grouped(c, &key, &it) != SD_OK) {
        return sd_fail(c, "check_group: not a grouped KV");
    }
    sd_reader kr = sd_reader_make(key);
    int64_t k;
    if (sd_read_int(&kr, &k) != SD_OK) {
        return sd_fail(c, "check_group: key is not a varint");
    }
    /* A value's seed is found from its first byte (131 is odd: a bijection mod 256). */
    while ((st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader vr = sd_reader_make(v);
        sd_bytes payload;
        if (sd_read_bytes(&vr, &payload) != SD_OK) {
            return sd_fail(c, "check_group: value is not bytes");
        }
        bool ok = false;
        for (int64_t seed = 0; seed < count && !ok; seed++) {
            if (payload.len > 0 && payload.ptr[0] == pattern((uint64_t)seed, 0) &&
                check(payload, (uint64_t)seed, (size_t)size)) {
                ok = true;
            }
        }
        if (!ok) {
            return sd_fail(c, "check_group: key %lld: a value of %zu bytes matches no seed",
                           (long long)k, payload.len);
        }
        n++;
        bytes += payload.len;
    }
    if (st != SD_OK) {
        return sd_fail(c, "check_group: reading values failed");
    }
    int len = snprintf(out, sizeof(out), "key %lld: %zu values, %zu bytes", (long long)k, n, bytes);
    return sd_emit_str(c, out, (size_t)len);
}

static void register_all(void)
{
    static const sd_dofn make_values = { .process = make_values_process };
    static const sd_dofn make_kvs = { .process = make_kvs_process };
    static const sd_dofn check_value = { .process = check_value_process };
    static const sd_dofn check_group = { .process = check_group_process };
    assert_int_equal(sd_register_dofn("large:make_values", &make_values), SD_OK);
    assert_int_equal(sd_register_dofn("large:make_kvs", &make_kvs), SD_OK);
    assert_int_equal(sd_register_dofn("large:check_value", &check_value), SD_OK);
    assert_int_equal(sd_register_dofn("large:check_group", &check_group), SD_OK);
}

static void run_done(sd_pipeline *p)
{
    sd_run_options opts = { .timeout_ms = 90000 };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run failed: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    assert_int_equal(res.state, SD_RUN_DONE);
    sd_run_result_deinit(&res);
}

static sd_bytes config(sd_buf *b, int64_t count, int64_t size)
{
    sd_buf_reset(b);
    assert_int_equal(sd_enc_int(b, count), SD_OK);
    assert_int_equal(sd_enc_int(b, size), SD_OK);
    return sd_buf_bytes(b);
}

static int64_t big_size(void)
{
    const char *e = getenv("SD_TEST_BIG");
    return e != NULL ? (int64_t)atoll(e) : (int64_t)(64 * MIB);
}

static void test_64mib_element_through_reshuffle(void **state)
{
    (void)state;
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    sd_pipeline *p = sd_pipeline_create("large-element");
    sd_pcoll *seed = sd_impulse(p, "Seed");
    sd_pcoll *big = sd_apply(p, "MakeBig", seed, "large:make_values", config(&cfg, 1, big_size()),
                             sd_pcoder_bytes(p));
    sd_pcoll *moved = sd_reshuffle(p, "Reshuffle", big);
    sd_pcoll *out = sd_apply(p, "CheckBig", moved, "large:check_value", config(&cfg, 1, big_size()),
                             sd_pcoder_string(p));
    const char *const want[] = { "ok 67108864" };
    sd_assert_strings(p, "Check", out, want, 1);
    run_done(p);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
}

static void test_20_mib_under_one_key(void **state)
{
    (void)state;
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    sd_pipeline *p = sd_pipeline_create("large-group");
    sd_pcoll *seed = sd_impulse(p, "Seed");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_varint(p), sd_pcoder_bytes(p));
    sd_pcoll *kvs =
        sd_apply(p, "MakeValues", seed, "large:make_kvs", config(&cfg, 20, (int64_t)MIB), kv);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", kvs);
    sd_pcoll *out = sd_apply(p, "CheckGroup", grouped, "large:check_group",
                             config(&cfg, 20, (int64_t)MIB), sd_pcoder_string(p));
    const char *const want[] = { "key 0: 20 values, 20971520 bytes" };
    sd_assert_strings(p, "Check", out, want, 1);
    run_done(p);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
}

static void test_256mib_bundle(void **state)
{
    (void)state;
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    sd_pipeline *p = sd_pipeline_create("large-bundle");
    sd_pcoll *seed = sd_impulse(p, "Seed");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_varint(p), sd_pcoder_bytes(p));
    /* 256 values of 1 MiB from one input element: one bundle's output is 256 MiB. */
    sd_pcoll *kvs =
        sd_apply(p, "MakeValues", seed, "large:make_kvs", config(&cfg, 256, (int64_t)MIB), kv);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", kvs);
    sd_pcoll *out = sd_apply(p, "CheckGroup", grouped, "large:check_group",
                             config(&cfg, 256, (int64_t)MIB), sd_pcoder_string(p));
    sd_assert_count(p, "CheckCount", out, 256);
    run_done(p);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
}

/* The 64 x 1 MiB GroupByKey pipeline with the job options given; its state and error. */
static sd_run_state run_budget(const char *limit, const char *spill_dir, char *error, size_t n)
{
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    sd_pipeline *p = sd_pipeline_create("large-budget");
    sd_pcoll *seed = sd_impulse(p, "Seed");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_varint(p), sd_pcoder_bytes(p));
    sd_pcoll *kvs =
        sd_apply(p, "MakeValues", seed, "large:make_kvs", config(&cfg, 64, (int64_t)MIB), kv);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", kvs);
    sd_pcoll *out = sd_apply(p, "CheckGroup", grouped, "large:check_group",
                             config(&cfg, 64, (int64_t)MIB), sd_pcoder_string(p));
    sd_assert_count(p, "CheckCount", out, 64);
    const char *names[] = { "beam:option:sundial_memory_limit:v1",
                            "beam:option:sundial_spill_dir:v1" };
    const char *values[] = { limit, spill_dir };
    sd_run_options opts = {
        .timeout_ms = 90000, .n_options = 2, .option_names = names, .option_values = values
    };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    sd_run_state state = res.state;
    snprintf(error, n, "%s", st == SD_OK ? "" : sd_err_msg(&err));
    if (st == SD_OK || res.state != SD_RUN_UNKNOWN) {
        sd_run_result_deinit(&res);
    }
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
    return state;
}

static void test_memory_limit_spills(void **state)
{
    (void)state;
    char dir[] = "/tmp/sundial-test-spill-XXXXXX", missing[64], error[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(missing, sizeof(missing), "%s/missing", dir);
    /* Over an 8 MiB budget: the same 64 groups, through the spill file. */
    assert_int_equal(run_budget("8MiB", dir, error, sizeof(error)), SD_RUN_DONE);
    /* It did spill: where no spill file can be made, the job fails and says where. */
    assert_int_equal(run_budget("8MiB", missing, error, sizeof(error)), SD_RUN_FAILED);
    if (strstr(error, "cannot create a spill file in") == NULL || strstr(error, missing) == NULL) {
        fail_msg("the failure does not name the spill directory: %s", error);
    }
    /* No budget: nothing is spilled, so the missing directory is never looked at. */
    assert_int_equal(run_budget("0", missing, error, sizeof(error)), SD_RUN_DONE);
    /* A budget that is not a size is refused by name. */
    assert_int_equal(run_budget("lots", dir, error, sizeof(error)), SD_RUN_FAILED);
    if (strstr(error, "sundial_memory_limit") == NULL || strstr(error, "\"lots\"") == NULL) {
        fail_msg("the failure does not name the option and its value: %s", error);
    }
    assert_int_equal(rmdir(dir), 0); /* the spill file was unlinked at once: nothing left */
}

int main(void)
{
    register_all();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_64mib_element_through_reshuffle),
        cmocka_unit_test(test_20_mib_under_one_key),
        cmocka_unit_test(test_256mib_bundle),
        cmocka_unit_test(test_memory_limit_spills),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
