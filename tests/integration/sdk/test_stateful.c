/*
 * Integration tests for stateful C DoFns on a Sundial runner: bag and value state, event-time
 * timers, and processing-time timers an hour long that must complete in test time (the
 * runner's synthetic clock jumps to the next timer when nothing else can happen).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/time.h"
#include "sundial/sundial.h"

#define HOUR_MS (3600LL * 1000LL)

/* KV<string, varint>: remember values in a bag; a processing-time timer an hour after the
 * key's latest element emits "key=count/sum" and clears the bag (a session timeout). */
static sd_status session_process(sd_ctx *c, void *state)
{
    sd_bytes k, v;
    (void)state;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "session: not a KV");
    }
    sd_status st = sd_state_append(c, "seen", v);
    if (st == SD_OK) {
        st = sd_timer_set(c, "timeout", SD_BYTES_NULL, sd_ctx_processing_time(c) + HOUR_MS,
                          sd_ctx_timestamp(c));
    }
    return st;
}

static sd_status session_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    sd_iter it;
    sd_bytes v;
    bool has;
    int64_t n = 0, sum = 0;
    char buf[128];
    (void)state;
    (void)tag;
    if (strcmp(family, "timeout") != 0) {
        return sd_fail(c, "session: unexpected timer family %s", family);
    }
    sd_status st = sd_state_read(c, "seen", &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        int64_t x;
        if (sd_read_int(&r, &x) != SD_OK) {
            return sd_fail(c, "session: bad bag value");
        }
        n++;
        sum += x;
    }
    if (st != SD_OK) {
        return st;
    }
    sd_reader kr = sd_reader_make(sd_ctx_key(c));
    sd_bytes key;
    if (sd_read_bytes(&kr, &key) != SD_OK) {
        return sd_fail(c, "session: key is not a string");
    }
    int len = snprintf(buf, sizeof(buf), "%.*s=%lld/%lld", (int)key.len, (const char *)key.ptr,
                       (long long)n, (long long)sum);
    if ((st = sd_state_clear(c, "seen")) != SD_OK) {
        return st;
    }
    return sd_emit_str(c, buf, (size_t)len);
}

/* KV<string, varint>: value state keeps the maximum; an event-time timer at the end of the
 * global window... too far: at the element timestamp + 10 s emits "key:max". */
static sd_status max_process(sd_ctx *c, void *state)
{
    sd_bytes k, v;
    sd_iter it;
    sd_bytes old;
    bool has;
    (void)state;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "max: not a KV");
    }
    sd_reader vr = sd_reader_make(v);
    int64_t x, best;
    if (sd_read_int(&vr, &x) != SD_OK) {
        return sd_fail(c, "max: value is not a varint");
    }
    best = x;
    sd_status st = sd_state_read(c, "max", &it);
    if (st == SD_OK && (st = sd_iter_next(&it, &old, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(old);
        int64_t y;
        if (sd_read_int(&r, &y) == SD_OK && y > best) {
            best = y;
        }
    }
    if (st != SD_OK) {
        return st;
    }
    sd_buf b;
    sd_buf_init(&b, 0);
    st = sd_enc_int(&b, best);
    if (st == SD_OK) {
        st = sd_state_write(c, "max", sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    if (st == SD_OK) {
        st = sd_timer_set(c, "flush", SD_BYTES_NULL, 100000, 100000);
    }
    return st;
}

static sd_status max_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    sd_iter it;
    sd_bytes v;
    bool has = false;
    char buf[128];
    (void)state;
    (void)family;
    (void)tag;
    sd_status st = sd_state_read(c, "max", &it);
    if (st == SD_OK) {
        st = sd_iter_next(&it, &v, &has);
    }
    if (st != SD_OK || !has) {
        return st != SD_OK ? st : sd_fail(c, "max: timer fired with empty state");
    }
    sd_reader r = sd_reader_make(v);
    int64_t x;
    sd_reader kr = sd_reader_make(sd_ctx_key(c));
    sd_bytes key;
    if (sd_read_int(&r, &x) != SD_OK || sd_read_bytes(&kr, &key) != SD_OK) {
        return sd_fail(c, "max: bad state");
    }
    int len = snprintf(buf, sizeof(buf), "%.*s:%lld@%lld", (int)key.len, (const char *)key.ptr,
                       (long long)x, (long long)sd_ctx_fire_time(c));
    return sd_emit_str(c, buf, (size_t)len);
}

static sd_bytes kv_elem(sd_buf *b, const char *k, int64_t v)
{
    size_t start = b->len;
    assert_int_equal(sd_enc_str(b, k), SD_OK);
    assert_int_equal(sd_enc_int(b, v), SD_OK);
    return sd_bytes_make((const uint8_t *)(uintptr_t)start, b->len - start);
}

/* Turn offsets (stored in ptr) into pointers once the buffer stops moving. */
static void fix(sd_buf *b, sd_bytes *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        items[i].ptr = b->data + (uintptr_t)items[i].ptr;
    }
}

static sd_pcoll *keyed_input(sd_pipeline *p, sd_buf *b)
{
    sd_bytes items[5];
    const sd_time ts[5] = { 1000, 2000, 3000, 4000, 5000 };
    items[0] = kv_elem(b, "u", 1);
    items[1] = kv_elem(b, "v", 10);
    items[2] = kv_elem(b, "u", 2);
    items[3] = kv_elem(b, "u", 4);
    items[4] = kv_elem(b, "v", 3);
    fix(b, items, 5);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    return sd_create(p, "Events", kv, items, 5, ts);
}

static void test_processing_time_session_timeout(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("session-timeout");
    sd_pcoll *in = keyed_input(p, &b);
    sd_state_spec seen = { .id = "seen", .kind = SD_STATE_BAG, .coder = sd_pcoder_varint(p) };
    sd_timer_spec timeout = { "timeout", SD_PROCESSING_TIME };
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = { .dofn = "t:session",
                           .n_outputs = 1,
                           .output_coders = outc,
                           .n_states = 1,
                           .states = &seen,
                           .n_timers = 1,
                           .timers = &timeout };
    sd_pcoll *out = sd_pardo(p, "Session", in, &spec, NULL);
    const char *const want[] = { "u=3/7", "v=2/13" };
    sd_assert_strings(p, "Check", out, want, 2);
    int64_t t0 = sd_mono_now_ms();
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run failed: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    /* An hour of processing time in (much) less than a minute of real time. */
    assert_true(sd_mono_now_ms() - t0 < 30000);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

static void test_event_time_timer_value_state(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("event-timer");
    sd_pcoll *in = keyed_input(p, &b);
    sd_state_spec maxs = { .id = "max", .kind = SD_STATE_VALUE, .coder = sd_pcoder_varint(p) };
    sd_timer_spec flush = { "flush", SD_EVENT_TIME };
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = { .dofn = "t:max",
                           .n_outputs = 1,
                           .output_coders = outc,
                           .n_states = 1,
                           .states = &maxs,
                           .n_timers = 1,
                           .timers = &flush };
    sd_pcoll *out = sd_pardo(p, "Max", in, &spec, NULL);
    const char *const want[] = { "u:4@100000", "v:10@100000" };
    sd_assert_strings(p, "Check", out, want, 2);
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, NULL, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run failed: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn session = { .process = session_process, .on_timer = session_timer };
    static const sd_dofn maxfn = { .process = max_process, .on_timer = max_timer };
    if (sd_register_dofn("t:session", &session) != SD_OK ||
        sd_register_dofn("t:max", &maxfn) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processing_time_session_timeout),
        cmocka_unit_test(test_event_time_timer_value_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
