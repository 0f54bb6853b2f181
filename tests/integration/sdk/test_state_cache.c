/*
 * Integration test of the C SDK's user-state cache across bundles (issue 33), on the
 * embedded runner.
 *
 * Sundial sends a stateful stage's bundles a user-state cache token that stays the same while
 * only the stage's own bundles change its state. Under an unchanged token the worker keeps
 * what it read and wrote, so a later bundle on the same key makes no State API read; once the
 * runner changes the state itself (here: it drops the state of an expired window) the token
 * changes and the next bundle reads again. The DoFn counts the worker's State API reads
 * around its own read (one key at a time, so no other bundle's reads are counted).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sdk-harness/src/worker_int.h"
#include "sundial/sundial.h"

/* KV<string, varint>: value state "sum" adds the values; emits "key:sum=S gets=G", G the
 * State API reads its read of the state took. */
static sd_status sum_process(sd_ctx *c, void *state)
{
    sd_bytes k, v, old;
    sd_iter it;
    bool has = false;
    (void)state;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "sum: not a KV");
    }
    sd_reader vr = sd_reader_make(v), kr = sd_reader_make(k);
    sd_bytes key;
    int64_t x, sum = 0;
    if (sd_read_int(&vr, &x) != SD_OK || sd_read_bytes(&kr, &key) != SD_OK) {
        return sd_fail(c, "sum: not a KV<string, varint>");
    }
    uint64_t gets0 = sd__worker_state_gets_total();
    sd_status st = sd_state_read(c, "sum", &it);
    if (st == SD_OK && (st = sd_iter_next(&it, &old, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(old);
        if (sd_read_int(&r, &sum) != SD_OK) {
            return sd_fail(c, "sum: bad state");
        }
    }
    uint64_t gets = sd__worker_state_gets_total() - gets0;
    if (st != SD_OK) {
        return st;
    }
    sum += x;
    sd_buf b;
    sd_buf_init(&b, 0);
    st = sd_enc_int(&b, sum);
    if (st == SD_OK) {
        st = sd_state_write(c, "sum", sd_buf_bytes(&b));
    }
    sd_buf_reset(&b);
    if (st == SD_OK) {
        st = sd_buf_printf(&b, "%.*s:sum=%lld gets=%llu", (int)key.len, (const char *)key.ptr,
                           (long long)sum, (unsigned long long)gets);
    }
    if (st == SD_OK) {
        st = sd_emit_str(c, (const char *)b.data, b.len);
    }
    sd_buf_deinit(&b);
    return st;
}

static void add_kv(sd_teststream *ts, const char *k, int64_t v, sd_time t)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    assert_int_equal(sd_enc_str(&b, k), SD_OK);
    assert_int_equal(sd_enc_int(&b, v), SD_OK);
    sd_bytes e = sd_buf_bytes(&b);
    sd_teststream_add_elements(ts, NULL, &e, &t, 1);
    sd_buf_deinit(&b);
}

/*
 * Fixed 10 s windows. b in [0,10); a three times in [20,30), each in a bundle of its own (one
 * TestStream event each). The second bundle of a reads nothing (the token is unchanged); the
 * watermark then passes [0,10), the runner drops b's state and changes the token, and the
 * third bundle of a reads its state again — and finds the sum it left.
 */
static void run_case(bool tokens, const char *const want[4])
{
    sd_pipeline *p = sd_pipeline_create("state-cache");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_teststream *ts = sd_teststream_create(p, "Events", kv, NULL, 0);
    add_kv(ts, "b", 1, 1000);
    add_kv(ts, "a", 1, 21000);
    add_kv(ts, "a", 2, 22000);
    sd_teststream_advance_watermark(ts, NULL, 15000);
    add_kv(ts, "a", 3, 23000);
    sd_teststream_advance_watermark_to_infinity(ts);
    sd_windowfn fixed = { .kind = SD_WINDOW_FIXED, .size_ms = 10000 };
    sd_pcoll *win = sd_window_into(p, "Window", sd_teststream_output(ts, NULL), &fixed);
    sd_state_spec sum = { .id = "sum", .kind = SD_STATE_VALUE, .coder = sd_pcoder_varint(p) };
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = {
        .dofn = "t:sum", .n_outputs = 1, .output_coders = outc, .n_states = 1, .states = &sum
    };
    sd_pcoll *out = sd_pardo(p, "Sum", win, &spec, NULL);
    sd_assert_strings(p, "Check", out, want, 4);
    static const char *const names[] = { "beam:option:sundial_cache_tokens:v1" };
    static const char *const values[] = { "false" };
    sd_run_options opts = { .timeout_ms = 60000 };
    if (!tokens) {
        opts.n_options = 1;
        opts.option_names = names;
        opts.option_values = values;
    }
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, NULL, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run failed: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    sd_pipeline_destroy(p);
}

static void test_state_kept_while_the_token_stays(void **state)
{
    (void)state;
    const char *const want[] = { "b:sum=1 gets=1", "a:sum=1 gets=1", "a:sum=3 gets=0",
                                 "a:sum=6 gets=1" };
    run_case(true, want);
}

/* beam:option:sundial_cache_tokens:v1=false: no token, state kept per bundle only. */
static void test_no_tokens_when_the_option_says(void **state)
{
    (void)state;
    const char *const want[] = { "b:sum=1 gets=1", "a:sum=1 gets=1", "a:sum=3 gets=1",
                                 "a:sum=6 gets=1" };
    run_case(false, want);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn sumfn = { .process = sum_process };
    if (sd_register_dofn("t:sum", &sumfn) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_kept_while_the_token_stays),
        cmocka_unit_test(test_no_tokens_when_the_option_says),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
