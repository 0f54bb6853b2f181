/*
 * Integration tests of the time rules a C pipeline can express, on the embedded Sundial
 * runner (test mode: the synthetic processing-time clock):
 *
 *   - processing-time timers are rewritten onto the job clock, which a TestStream drives: a
 *     timer ten minutes out fires after eleven minutes of AdvanceProcessingTime, not before,
 *     and not at the end of the stream;
 *   - an hour-long session timeout per key (timers reset by each element) runs in well under a
 *     second of wall time;
 *   - event-time timers never fire before the input watermark passes them, whatever the
 *     processing time does;
 *   - timers that wait 30 days (a daily processing-time timer re-armed 30 times over 30
 *     TestStream day steps, and an event-time timer 30 days ahead) finish in test time;
 *   - continuations (a splittable DoFn resuming after a delay) wait on the TestStream's clock:
 *     TestStream events that come before the delay has passed are processed first;
 *   - a TestStream whose watermark moves backwards fails the job with a message saying so;
 *   - real time counts while a bundle runs slowly: a 1 ms processing-time trigger fires early
 *     while an upstream timer callback sleeps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "sdk-harness/src/sdk_int.h" /* sd__teststream_allow_backwards */
#include "time_common.h"

/* ---------------------------------------------------------------- small helpers */

static int64_t kv_value(sd_ctx *c)
{
    sd_bytes k, v;
    int64_t x = -1;
    if (sd_ctx_kv(c, &k, &v) == SD_OK) {
        sd_reader r = sd_reader_make(v);
        if (sd_read_int(&r, &x) != SD_OK) {
            x = -1;
        }
    }
    return x;
}

static sd_status emitf(sd_ctx *c, const char *fmt, ...) SD_PRINTF(2, 3);

static sd_status emitf(sd_ctx *c, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return sd_emit_str(c, buf, (size_t)n);
}

static sd_status read_int_state(sd_ctx *c, const char *id, int64_t *out, bool *found)
{
    sd_iter it;
    sd_bytes v;
    bool has = false;
    *found = false;
    sd_status st = sd_state_read(c, id, &it);
    if (st == SD_OK) {
        st = sd_iter_next(&it, &v, &has);
    }
    if (st == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        if (sd_read_int(&r, out) != SD_OK) {
            return sd_fail(c, "state %s does not hold a varint", id);
        }
        *found = true;
    }
    return st;
}

static sd_status write_int_state(sd_ctx *c, const char *id, int64_t v)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = sd_enc_int(&b, v);
    if (st == SD_OK) {
        st = sd_state_write(c, id, sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    return st;
}

static sd_status append_int_state(sd_ctx *c, const char *id, int64_t v)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = sd_enc_int(&b, v);
    if (st == SD_OK) {
        st = sd_state_append(c, id, sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    return st;
}

/* "1,2,3": the bag's varints, sorted. */
static sd_status
render_bag(sd_ctx *c, const char *id, char *out, size_t len, int64_t *n_out, int64_t *sum_out)
{
    sd_iter it;
    sd_bytes v;
    bool has;
    int64_t vals[128];
    size_t n = 0;
    int64_t sum = 0;
    sd_status st = sd_state_read(c, id, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        if (n == 128 || sd_read_int(&r, &vals[n]) != SD_OK) {
            return sd_fail(c, "bag %s: too many values or not a varint", id);
        }
        sum += vals[n++];
    }
    if (st != SD_OK) {
        return st;
    }
    qsort(vals, n, sizeof(vals[0]), tc_cmp_i64);
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && at < len; i++) {
        at += (size_t)snprintf(out + at, len - at, "%s%lld", i > 0 ? "," : "", (long long)vals[i]);
    }
    if (n_out != NULL) {
        *n_out = (int64_t)n;
    }
    if (sum_out != NULL) {
        *sum_out = sum;
    }
    return SD_OK;
}

static const char *key_str(sd_ctx *c, char *buf, size_t len)
{
    sd_reader r = sd_reader_make(sd_ctx_key(c));
    sd_bytes k;
    if (sd_read_bytes(&r, &k) != SD_OK) {
        return "?";
    }
    snprintf(buf, len, "%.*s", (int)k.len, (const char *)k.ptr);
    return buf;
}

static sd_pcoll *stateful(sd_pipeline *p,
                          const char *name,
                          sd_pcoll *in,
                          const char *dofn,
                          const sd_state_spec *states,
                          size_t n_states,
                          const sd_timer_spec *timers,
                          size_t n_timers)
{
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = { .dofn = dofn,
                           .n_outputs = 1,
                           .output_coders = outc,
                           .n_states = n_states,
                           .states = states,
                           .n_timers = n_timers,
                           .timers = timers };
    return sd_pardo(p, name, in, &spec, NULL);
}

static void expect_run_ok(sd_pipeline *p, int64_t max_wall_ms)
{
    char msg[2048];
    int64_t wall = 0;
    sd_status st = tc_run(p, &wall, NULL, msg, sizeof(msg));
    if (st != SD_OK) {
        fprintf(stderr, "job failed: %s\n", msg);
    }
    assert_int_equal(st, SD_OK);
    if (wall > max_wall_ms) {
        fail_msg("the job took %lld ms of wall time (limit %lld)", (long long)wall,
                 (long long)max_wall_ms);
    }
}

/* ---------------------------------------------------------------- processing-time rewriting */

/*
 * KV<string, varint>: value 0 arms a processing-time timer 10 minutes out (on the SDK's clock;
 * the runner rewrites it onto the job clock); any other value reports whether it fired yet.
 */
static sd_status pt_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t v = kv_value(c);
    if (v == 0) {
        sd_status st = sd_timer_set(c, "t", SD_BYTES_NULL, sd_ctx_processing_time(c) + 10 * MIN_MS,
                                    sd_ctx_timestamp(c));
        return st != SD_OK ? st : emitf(c, "armed");
    }
    int64_t fired = 0;
    bool found;
    sd_status st = read_int_state(c, "fired", &fired, &found);
    if (st != SD_OK) {
        return st;
    }
    return emitf(c, "v%lld:%s", (long long)v, found && fired ? "fired" : "waiting");
}

static sd_status pt_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    (void)tag;
    sd_status st = write_int_state(c, "fired", 1);
    return st != SD_OK ? st : emitf(c, "timer");
}

static void test_processing_time_timer_on_teststream_clock(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("pt-rewrite");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "k", 0, 1000);
    sd_teststream_advance_processing_time(ts, 5 * MIN_MS);
    tc_add_kv(ts, NULL, "k", 1, 2000); /* 5 of 10 minutes passed: still waiting */
    sd_teststream_advance_processing_time(ts, 6 * MIN_MS);
    tc_add_kv(ts, NULL, "k", 2, 3000); /* 11 minutes: the timer fired before this event */
    sd_state_spec fired = { .id = "fired", .kind = SD_STATE_VALUE, .coder = sd_pcoder_varint(p) };
    sd_timer_spec t = { "t", SD_PROCESSING_TIME };
    sd_pcoll *out = stateful(p, "Timer", sd_teststream_output(ts, NULL), "t:pt", &fired, 1, &t, 1);
    const char *const want[] = { "armed", "v1:waiting", "timer", "v2:fired" };
    sd_assert_strings(p, "Check", out, want, 4);
    expect_run_ok(p, 10000);
    sd_pipeline_destroy(p);
}

/*
 * Timers are unique per (key, family, tag, window) and the last write wins: value 0 sets tag x
 * at +10 min; value 1 moves x to +30 min, sets y at +5 min and z at +1 min then (same call)
 * at +40 min; value 2 clears y; value 9 reports how many timers fired so far.
 */
static sd_status lww_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t v = kv_value(c);
    sd_time now = sd_ctx_processing_time(c), ts = sd_ctx_timestamp(c);
    sd_status st = SD_OK;
    if (v == 0) {
        st = sd_timer_set(c, "t", sd_bytes_str("x"), now + 10 * MIN_MS, ts);
    } else if (v == 1) {
        st = sd_timer_set(c, "t", sd_bytes_str("x"), now + 30 * MIN_MS, ts);
        if (st == SD_OK) {
            st = sd_timer_set(c, "t", sd_bytes_str("y"), now + 5 * MIN_MS, ts);
        }
        if (st == SD_OK) {
            st = sd_timer_set(c, "t", sd_bytes_str("z"), now + MIN_MS, ts);
        }
        if (st == SD_OK) {
            st = sd_timer_set(c, "t", sd_bytes_str("z"), now + 40 * MIN_MS, ts);
        }
    } else if (v == 2) {
        st = sd_timer_clear(c, "t", sd_bytes_str("y"));
    } else {
        int64_t n = 0;
        bool found;
        st = read_int_state(c, "fired", &n, &found);
        if (st == SD_OK) {
            st = emitf(c, "m%lld", (long long)n);
        }
    }
    return st;
}

static sd_status lww_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    int64_t n = 0;
    bool found;
    sd_status st = read_int_state(c, "fired", &n, &found);
    if (st == SD_OK) {
        st = write_int_state(c, "fired", n + 1);
    }
    return st != SD_OK ? st : emitf(c, "fired:%.*s", (int)tag.len, (const char *)tag.ptr);
}

static void test_processing_time_timers_last_write_wins(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("pt-last-write");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "k", 0, 1000);
    tc_add_kv(ts, NULL, "k", 1, 2000);
    tc_add_kv(ts, NULL, "k", 2, 3000);
    sd_teststream_advance_processing_time(ts, 15 * MIN_MS);
    tc_add_kv(ts, NULL, "k", 9, 4000); /* x moved, y cleared, z moved: nothing fired */
    sd_teststream_advance_processing_time(ts, 20 * MIN_MS);
    tc_add_kv(ts, NULL, "k", 9, 5000); /* 35 minutes: x fired; z (40) not yet */
    sd_state_spec fired = { .id = "fired", .kind = SD_STATE_VALUE, .coder = sd_pcoder_varint(p) };
    sd_timer_spec t = { "t", SD_PROCESSING_TIME };
    sd_pcoll *out =
        stateful(p, "Timers", sd_teststream_output(ts, NULL), "t:lww", &fired, 1, &t, 1);
    const char *const want[] = { "m0", "fired:x", "m1", "fired:z" };
    sd_assert_strings(p, "Check", out, want, 4);
    expect_run_ok(p, 10000);
    sd_pipeline_destroy(p);
}

/*
 * A processing-time timer holds its output watermark at its hold timestamp (the element's):
 * although the stream's watermark passes the window long before the timer fires, what the timer
 * emits at that timestamp is still on time downstream.
 */
static sd_status hold_process(sd_ctx *c, void *state)
{
    (void)state;
    return sd_timer_set(c, "t", SD_BYTES_NULL, sd_ctx_processing_time(c) + 10 * MIN_MS,
                        sd_ctx_timestamp(c));
}

static sd_status hold_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    (void)tag;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = sd_buf_append_bytes(&b, sd_ctx_key(c));
    if (st == SD_OK) {
        st = sd_enc_int(&b, 42);
    }
    if (st == SD_OK) {
        st = sd_emit(c, 0, sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    return st;
}

static void test_timer_hold_keeps_window_on_time(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("timer-hold");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "k", 1, 1000);
    sd_teststream_advance_watermark(ts, NULL, 60000); /* far past [0,10s) */
    sd_teststream_advance_processing_time(ts, 15 * MIN_MS);
    const sd_pcoder *outc[1] = { tc_kv_coder(p) };
    sd_timer_spec t = { "t", SD_PROCESSING_TIME };
    sd_pardo_spec spec = {
        .dofn = "t:hold", .n_outputs = 1, .output_coders = outc, .n_timers = 1, .timers = &t
    };
    sd_pcoll *emitted = sd_pardo(p, "Hold", sd_teststream_output(ts, NULL), &spec, NULL);
    sd_windowfn wf = { .kind = SD_WINDOW_FIXED, .size_ms = 10000 };
    sd_pcoll *panes = tc_group_render(p, "", emitted, &wf, "tc:panes");
    const char *const want[] = { "k:42 [0,10000) ON_TIME#0/0 first last @9999" };
    sd_assert_strings(p, "Check", panes, want, 1);
    sd_run_result res;
    memset(&res, 0, sizeof(res));
    char msg[2048];
    sd_status st = tc_run(p, NULL, &res, msg, sizeof(msg));
    if (st != SD_OK) {
        fail_msg("job failed: %s", msg);
    }
    assert_int_equal(sd_run_result_counter(&res, SD_RUN_DROPPED_LATE), 0);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- hour-long session timeouts */

/* Each element extends its key's session by an hour of processing time; on timeout the
 * session "key=count/sum" is emitted and forgotten. */
static sd_status session_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_status st = append_int_state(c, "seen", kv_value(c));
    if (st == SD_OK) {
        st = sd_timer_set(c, "timeout", SD_BYTES_NULL, sd_ctx_processing_time(c) + HOUR_MS,
                          sd_ctx_timestamp(c));
    }
    return st;
}

static sd_status session_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    char vals[512], key[64];
    int64_t n = 0, sum = 0;
    (void)state;
    (void)family;
    (void)tag;
    sd_status st = render_bag(c, "seen", vals, sizeof(vals), &n, &sum);
    if (st == SD_OK) {
        st = sd_state_clear(c, "seen");
    }
    return st != SD_OK ? st
                       : emitf(c, "%s=%lld/%lld", key_str(c, key, sizeof(key)), (long long)n,
                               (long long)sum);
}

static void test_hour_long_session_timeouts(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("sessions");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    const char *k1[] = { "u", "v" };
    const int64_t v1[] = { 1, 10 };
    const sd_time t1[] = { 1000, 1000 };
    tc_add_kvs(ts, NULL, k1, v1, t1, 2);
    sd_teststream_advance_processing_time(ts, 30 * MIN_MS);
    tc_add_kv(ts, NULL, "u", 2, 2000); /* u's session now ends at 1h30 */
    sd_teststream_advance_processing_time(ts, 45 * MIN_MS);
    /* 1h15: v timed out at 1h; this starts a new session for v (ends at 2h15). */
    tc_add_kv(ts, NULL, "v", 3, 3000);
    sd_state_spec seen = { .id = "seen", .kind = SD_STATE_BAG, .coder = sd_pcoder_varint(p) };
    sd_timer_spec timeout = { "timeout", SD_PROCESSING_TIME };
    sd_pcoll *out =
        stateful(p, "Session", sd_teststream_output(ts, NULL), "t:session", &seen, 1, &timeout, 1);
    const char *const want[] = { "v=1/10", "u=2/3", "v=1/3" };
    sd_assert_strings(p, "Check", out, want, 3);
    expect_run_ok(p, 1000);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- event-time timers */

/* Collect values; an event-time timer at 10 s (20 s for elements from 10 s on) emits them. */
static sd_status et_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_time fire = sd_ctx_timestamp(c) < 10000 ? 10000 : 20000;
    sd_status st = append_int_state(c, "seen", kv_value(c));
    return st != SD_OK ? st : sd_timer_set(c, "flush", SD_BYTES_NULL, fire, fire);
}

static sd_status et_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    char vals[512], key[64];
    (void)state;
    (void)family;
    (void)tag;
    sd_status st = render_bag(c, "seen", vals, sizeof(vals), NULL, NULL);
    if (st == SD_OK) {
        st = sd_state_clear(c, "seen");
    }
    return st != SD_OK ? st
                       : emitf(c, "%s:%s@%lld ts=%lld", key_str(c, key, sizeof(key)), vals,
                               (long long)sd_ctx_fire_time(c), (long long)sd_ctx_timestamp(c));
}

static void test_event_time_timers_wait_for_watermark(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("event-timers");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    tc_add_kv(ts, NULL, "k", 1, 1000);
    sd_teststream_advance_watermark(ts, NULL, 5000);
    sd_teststream_advance_processing_time(ts, DAY_MS); /* processing time fires nothing here */
    tc_add_kv(ts, NULL, "k", 2, 6000);
    sd_teststream_advance_watermark(ts, NULL, 9999);
    tc_add_kv(ts, NULL, "k", 3, 9500); /* still before the timer: it must see this one */
    sd_teststream_advance_watermark(ts, NULL, 15000);
    tc_add_kv(ts, NULL, "k", 4, 15500);
    sd_state_spec seen = { .id = "seen", .kind = SD_STATE_BAG, .coder = sd_pcoder_varint(p) };
    sd_timer_spec flush = { "flush", SD_EVENT_TIME };
    sd_pcoll *out =
        stateful(p, "Flush", sd_teststream_output(ts, NULL), "t:et", &seen, 1, &flush, 1);
    const char *const want[] = { "k:1,2,3@10000 ts=10000", "k:4@20000 ts=20000" };
    sd_assert_strings(p, "Check", out, want, 2);
    expect_run_ok(p, 10000);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- 30 days */

/* Value n arms a daily processing-time timer that re-arms itself until n days passed, and an
 * event-time timer n days after the element. */
static sd_status month_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t n = kv_value(c);
    sd_status st = write_int_state(c, "left", n);
    if (st == SD_OK) {
        st = sd_timer_set(c, "daily", SD_BYTES_NULL, sd_ctx_processing_time(c) + DAY_MS,
                          sd_ctx_timestamp(c));
    }
    if (st == SD_OK) {
        sd_time at = sd_ctx_timestamp(c) + n * DAY_MS;
        st = sd_timer_set(c, "deadline", SD_BYTES_NULL, at, at);
    }
    return st;
}

static sd_status month_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    char key[64];
    (void)state;
    (void)tag;
    if (strcmp(family, "deadline") == 0) {
        return emitf(c, "%s:deadline@%lld", key_str(c, key, sizeof(key)),
                     (long long)sd_ctx_fire_time(c));
    }
    int64_t left = 0;
    bool found;
    sd_status st = read_int_state(c, "left", &left, &found);
    if (st != SD_OK || !found) {
        return st != SD_OK ? st : sd_fail(c, "month: no state");
    }
    left--;
    if ((st = write_int_state(c, "left", left)) != SD_OK) {
        return st;
    }
    if (left > 0) {
        /* Re-arm on the SDK's clock (sd_ctx_fire_time is on the runner's job clock). */
        return sd_timer_set(c, "daily", SD_BYTES_NULL, sd_ctx_processing_time(c) + DAY_MS,
                            sd_ctx_timestamp(c));
    }
    return emitf(c, "%s:days done", key_str(c, key, sizeof(key)));
}

static void test_thirty_days_of_timers_finish_fast(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("month");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    const char *ks[] = { "a", "b" };
    const int64_t vs[] = { 30, 30 };
    const sd_time tss[] = { 0, 1000 };
    tc_add_kvs(ts, NULL, ks, vs, tss, 2);
    /*
     * A month of days, one TestStream step each. (Once the stream ends its watermark reaches
     * the end of time, the global window expires, and a processing-time timer set after that
     * is dropped, so a self-re-arming timer needs the stream to still be running.)
     */
    for (int d = 0; d < 30; d++) {
        sd_teststream_advance_processing_time(ts, DAY_MS);
    }
    sd_state_spec left = { .id = "left", .kind = SD_STATE_VALUE, .coder = sd_pcoder_varint(p) };
    sd_timer_spec timers[2] = { { "daily", SD_PROCESSING_TIME }, { "deadline", SD_EVENT_TIME } };
    sd_pcoll *out =
        stateful(p, "Month", sd_teststream_output(ts, NULL), "t:month", &left, 1, timers, 2);
    const char *const want[] = { "a:days done", "b:days done", "a:deadline@2592000000",
                                 "b:deadline@2592001000" };
    sd_assert_strings(p, "Check", out, want, 4);
    expect_run_ok(p, 3000);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- continuations */

/* SDF over KV<string, n>: one offset per call, emitting KV<"k", 100 + offset>, then resuming
 * ten minutes later. */
static sd_status cont_initial(sd_ctx *c, void *state, sd_offset_range *out)
{
    (void)state;
    out->from = 0;
    out->to = kv_value(c);
    return SD_OK;
}

static sd_status cont_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t pos = sd_ctx_restriction(c).from;
    if (!sd_try_claim(c, pos)) {
        return SD_OK;
    }
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = sd_enc_str(&b, "k");
    if (st == SD_OK) {
        st = sd_enc_int(&b, 100 + pos);
    }
    if (st == SD_OK) {
        st = sd_emit(c, 0, sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    return st != SD_OK ? st : sd_resume(c, 10 * MIN_MS);
}

/* Number the arrivals of a single key: "value#position". */
static sd_status seq_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t n = 0;
    bool found;
    sd_status st = read_int_state(c, "n", &n, &found);
    if (st == SD_OK) {
        st = write_int_state(c, "n", n + 1);
    }
    return st != SD_OK ? st : emitf(c, "%lld#%lld", (long long)kv_value(c), (long long)n);
}

static void test_continuation_delays_follow_teststream_clock(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("continuations");
    const char *const tags[] = { "work", "mark" };
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), tags, 2);
    tc_add_kv(ts, "work", "w", 3, 0); /* offset 0 now, then every 10 minutes */
    sd_teststream_advance_processing_time(ts, 5 * MIN_MS);
    tc_add_kv(ts, "mark", "k", 1001, 0); /* before offset 1 (due at 10 minutes) */
    sd_teststream_advance_processing_time(ts, 10 * MIN_MS);
    tc_add_kv(ts, "mark", "k", 1002, 0); /* offset 1 ran at 15; offset 2 due at 25 */
    const sd_pcoder *kvc = tc_kv_coder(p);
    const sd_pcoder *outc[1] = { kvc };
    sd_pardo_spec sdf = { .dofn = "t:cont", .n_outputs = 1, .output_coders = outc };
    sd_pcoll *produced = sd_pardo(p, "Produce", sd_teststream_output(ts, "work"), &sdf, NULL);
    sd_pcoll *both[2] = { produced, sd_teststream_output(ts, "mark") };
    sd_pcoll *merged = sd_flatten(p, "Merge", both, 2);
    sd_state_spec n = { .id = "n", .kind = SD_STATE_VALUE, .coder = sd_pcoder_varint(p) };
    sd_pcoll *out = stateful(p, "Sequence", merged, "t:seq", &n, 1, NULL, 0);
    const char *const want[] = { "100#0", "1001#1", "101#2", "1002#3", "102#4" };
    sd_assert_strings(p, "Order", out, want, 5);
    expect_run_ok(p, 10000);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- schedule seeds */

/* Number arrivals per key and add (position + 1) * (value + 1)^2 to counter "order": a
 * signature of the order in which the runner delivered the key's elements. */
static sd_status order_process(sd_ctx *c, void *state)
{
    (void)state;
    int64_t n = 0, v = kv_value(c);
    bool found;
    sd_status st = read_int_state(c, "n", &n, &found);
    if (st == SD_OK) {
        st = write_int_state(c, "n", n + 1);
    }
    sd_counter_add(c, "order", (n + 1) * (v + 1) * (v + 1));
    return st;
}

/*
 * One job under schedule exploration: OUT: *signature (the order counter). The panes of a
 * triggered window must not depend on the schedule, so they are asserted inside the job.
 */
static void run_with_schedule(const char *shape, const char *seed, int64_t *signature)
{
    sd_pipeline *p = sd_pipeline_create("schedules");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    const char *ks[12];
    int64_t vs[12];
    sd_time tss[12];
    for (int i = 0; i < 12; i++) {
        ks[i] = i % 3 == 0 ? "x" : "k";
        vs[i] = i;
        tss[i] = 1000 + i;
    }
    tc_add_kvs(ts, NULL, ks, vs, tss, 12);
    sd_teststream_advance_processing_time(ts, 2 * MIN_MS);
    tc_add_kv(ts, NULL, "k", 100, 5000);
    sd_teststream_advance_watermark(ts, NULL, 10 * MIN_MS);
    sd_pcoll *in = sd_teststream_output(ts, NULL);
    sd_state_spec n = { .id = "n", .kind = SD_STATE_VALUE, .coder = sd_pcoder_varint(p) };
    stateful(p, "Order", in, "t:order", &n, 1, NULL, 0);
    sd_windowfn wf = { .kind = SD_WINDOW_FIXED,
                       .size_ms = 10 * MIN_MS,
                       .trigger = sd_trigger_after_watermark(
                           p, sd_trigger_after_processing_time(p, MIN_MS), NULL) };
    sd_pcoll *panes = tc_group_render(p, "", in, &wf, "tc:panes");
    const char *const want[] = {
        "k:1,2,4,5,7,8,10,11 [0,600000) EARLY#0/-1 first @599999",
        "x:0,3,6,9 [0,600000) EARLY#0/-1 first @599999",
        "k:100 [0,600000) ON_TIME#1/0 last @599999",
        "x: [0,600000) ON_TIME#1/0 last @599999",
    };
    sd_assert_strings(p, "Panes", panes, want, 4);
    const char *names[2] = { "beam:option:sundial_bundle_shape:v1",
                             "beam:option:sundial_schedule_seed:v1" };
    const char *values[2] = { shape, seed };
    sd_run_options opts = {
        .timeout_ms = 60000, .n_options = 2, .option_names = names, .option_values = values
    };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (st != SD_OK) {
        fail_msg("shape %s seed %s: %s", shape, seed, sd_err_msg(&err));
    }
    *signature = sd_run_result_counter(&res, "order");
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
}

/*
 * Schedule seeds: under every bundle shape and several seeds the panes are identical; one seed
 * replays the same schedule (same delivery order); different seeds explore different orders.
 */
static void test_schedule_seeds(void **state)
{
    (void)state;
    static const char *const shapes[] = { "greedy", "one_key", "one_element" };
    static const char *const seeds[] = { "0", "1", "2", "3", "4", "5" };
    int64_t sig[3][6];
    for (size_t s = 0; s < 3; s++) {
        for (size_t k = 0; k < 6; k++) {
            run_with_schedule(shapes[s], seeds[k], &sig[s][k]);
        }
    }
    int64_t again = 0;
    run_with_schedule("one_element", "3", &again);
    assert_int_equal(again, sig[2][3]);
    bool differ = false;
    for (size_t k = 2; k < 6; k++) {
        differ = differ || sig[2][k] != sig[2][1];
    }
    if (!differ) {
        fail_msg("seeds 1..5 all delivered in the same order (signature %lld): the seed is "
                 "not honoured",
                 (long long)sig[2][1]);
    }
}

/* ---------------------------------------------------------------- watermark going back */

static void test_backwards_watermark_fails_job(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("backwards");
    sd_teststream *ts = sd_teststream_create(p, "Events", tc_kv_coder(p), NULL, 0);
    /* The builder refuses this itself; let it through to check the runner refuses it too. */
    sd__teststream_allow_backwards(ts, true);
    tc_add_kv(ts, NULL, "k", 1, 1000);
    sd_teststream_advance_watermark(ts, NULL, 5000);
    sd_teststream_advance_watermark(ts, NULL, 4000);
    assert_null(sd_pipeline_error(p));
    sd_windowfn wf = { .kind = SD_WINDOW_FIXED, .size_ms = 1000 };
    sd_pcoll *out = tc_group_render(p, "", sd_teststream_output(ts, NULL), &wf, "tc:values");
    sd_assert_count(p, "Count", out, 1);
    char msg[2048];
    int64_t wall = 0;
    sd_status st = tc_run(p, &wall, NULL, msg, sizeof(msg));
    assert_int_not_equal(st, SD_OK);
    if (strstr(msg, "would move backwards, from 5000 to 4000") == NULL) {
        fail_msg("unclear failure message: %s", msg);
    }
    assert_true(wall < 10000);
    sd_pipeline_destroy(p);
}

/* ---------------------------------------------------------------- slow bundles */

/* Emit the element and hold the watermark with an event-time timer just before the end of the
 * global window; the timer's callback takes 600 ms of real time. */
static sd_status slow_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_time at = SD_TIME_GLOBAL_MAX - 10;
    sd_status st = sd_emit(c, 0, sd_ctx_element(c));
    return st != SD_OK ? st : sd_timer_set(c, "delay", SD_BYTES_NULL, at, at);
}

static sd_status slow_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    struct timespec pause = { .tv_sec = 0, .tv_nsec = 600 * 1000000L };
    (void)c;
    (void)state;
    (void)family;
    (void)tag;
    while (nanosleep(&pause, &pause) != 0) {
    }
    return SD_OK;
}

/*
 * Beam's GroupByKeyTest#testAfterProcessingTimeContinuationTriggerUsingState in C: a bounded
 * pipeline whose one element goes to a Repeatedly(AfterProcessingTime(1 ms)) trigger while
 * the timer upstream sleeps 600 ms holding the watermark. On any real runner the trigger
 * fires an EARLY pane during the sleep; the jump-only synthetic clock never moved while the
 * bundle ran (and a batch GroupByKey asked its triggers only once its input was complete),
 * so the pane came ON_TIME only.
 */
static void test_slow_bundle_lets_processing_time_pass(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("slow-bundle");
    sd_buf b;
    sd_buf_init(&b, 0);
    assert_int_equal(sd_enc_str(&b, "k"), SD_OK);
    assert_int_equal(sd_enc_int(&b, 42), SD_OK);
    sd_bytes item = sd_bytes_make(b.data, b.len);
    sd_pcoll *in = sd_create(p, "Create", tc_kv_coder(p), &item, 1, NULL);
    sd_buf_deinit(&b);
    const sd_pcoder *outc[1] = { tc_kv_coder(p) };
    sd_timer_spec delay = { "delay", SD_EVENT_TIME };
    sd_pardo_spec spec = {
        .dofn = "t:slow", .n_outputs = 1, .output_coders = outc, .n_timers = 1, .timers = &delay
    };
    sd_pcoll *slow = sd_pardo(p, "OutputThenDelay", in, &spec, NULL);
    sd_windowfn wf = { .kind = SD_WINDOW_GLOBAL,
                       .trigger = sd_trigger_repeatedly(p, sd_trigger_after_processing_time(p, 1)),
                       .accumulation = SD_ACCUMULATING_PANES };
    sd_pcoll *values = tc_group_render(p, "", slow, &wf, "tc:values");
    const char *const want[] = { "k:42" };
    sd_assert_strings_in_pane(p, "Early", values, NULL, SD_PANES_EARLY, want, 1);
    expect_run_ok(p, 20000);
    sd_pipeline_destroy(p);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_dofn pt = { .process = pt_process, .on_timer = pt_timer };
    static const sd_dofn session = { .process = session_process, .on_timer = session_timer };
    static const sd_dofn et = { .process = et_process, .on_timer = et_timer };
    static const sd_dofn month = { .process = month_process, .on_timer = month_timer };
    static const sd_dofn cont = { .process = cont_process, .initial_restriction = cont_initial };
    static const sd_dofn seq = { .process = seq_process };
    static const sd_dofn order = { .process = order_process };
    static const sd_dofn lww = { .process = lww_process, .on_timer = lww_timer };
    static const sd_dofn hold = { .process = hold_process, .on_timer = hold_timer };
    static const sd_dofn slow = { .process = slow_process, .on_timer = slow_timer };
    if (!tc_register() || sd_register_dofn("t:pt", &pt) != SD_OK ||
        sd_register_dofn("t:session", &session) != SD_OK ||
        sd_register_dofn("t:et", &et) != SD_OK || sd_register_dofn("t:month", &month) != SD_OK ||
        sd_register_dofn("t:cont", &cont) != SD_OK || sd_register_dofn("t:seq", &seq) != SD_OK ||
        sd_register_dofn("t:order", &order) != SD_OK || sd_register_dofn("t:lww", &lww) != SD_OK ||
        sd_register_dofn("t:hold", &hold) != SD_OK || sd_register_dofn("t:slow", &slow) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processing_time_timer_on_teststream_clock),
        cmocka_unit_test(test_processing_time_timers_last_write_wins),
        cmocka_unit_test(test_timer_hold_keeps_window_on_time),
        cmocka_unit_test(test_hour_long_session_timeouts),
        cmocka_unit_test(test_event_time_timers_wait_for_watermark),
        cmocka_unit_test(test_thirty_days_of_timers_finish_fast),
        cmocka_unit_test(test_continuation_delays_follow_teststream_clock),
        cmocka_unit_test(test_backwards_watermark_fails_job),
        cmocka_unit_test(test_schedule_seeds),
        cmocka_unit_test(test_slow_bundle_lets_processing_time_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
