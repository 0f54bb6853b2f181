/*
 * The unit test the README shows C SDK users ("Testing with a TestStream and a timer"), kept
 * here so that the README's code is built and passes: a stateful DoFn sums each user's clicks
 * and reports them once the user has been idle for 30 minutes of processing time. A TestStream
 * plays clicks and moves the synthetic processing-time clock; the test collects the reports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sundial/sundial.h>

#include <cmocka.h>

/* README begin */
#define IDLE_MS (30 * 60 * 1000)

/* KV<user, clicks>: add the clicks to the user's bag and (re)arm the idle timer. */
static sd_status on_click(sd_ctx *c, void *state)
{
    sd_bytes user, clicks;
    (void)state;
    sd_status st = sd_ctx_kv(c, &user, &clicks);
    if (st == SD_OK) {
        st = sd_state_append(c, "clicks", clicks);
    }
    if (st == SD_OK) {
        st = sd_timer_set(c, "idle", SD_BYTES_NULL, sd_ctx_processing_time(c) + IDLE_MS,
                          sd_ctx_timestamp(c));
    }
    return st;
}

/* The user was idle: emit KV<user, total clicks> and forget them. */
static sd_status on_idle(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    sd_iter it;
    sd_bytes v;
    bool has;
    int64_t total = 0, n;
    sd_buf out = { 0 };
    (void)state, (void)family, (void)tag;
    sd_status st = sd_state_read(c, "clicks", &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        if ((st = sd_read_int(&r, &n)) == SD_OK) {
            total += n;
        }
    }
    if (st == SD_OK && (st = sd_buf_append_bytes(&out, sd_ctx_key(c))) == SD_OK &&
        (st = sd_enc_int(&out, total)) == SD_OK) {
        st = sd_emit(c, 0, sd_buf_bytes(&out)); /* KV<string, varint>, like the input */
    }
    if (st == SD_OK) {
        st = sd_state_clear(c, "clicks");
    }
    sd_buf_deinit(&out);
    return st;
}

/* One KV<string, varint> element, encoded into b (which must outlive its use). */
static sd_bytes click(sd_buf *b, const char *user, int64_t n)
{
    sd_buf_init(b, 0);
    return sd_enc_str(b, user) == SD_OK && sd_enc_int(b, n) == SD_OK ? sd_buf_bytes(b)
                                                                     : SD_BYTES_NULL;
}

static void test_idle_users_are_reported(void **state)
{
    (void)state;
    static const sd_dofn idle = { .process = on_click, .on_timer = on_idle };
    assert_int_equal(sd_register_dofn("readme:idle", &idle), SD_OK);

    sd_pipeline *p = sd_pipeline_create("idle-users");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_teststream *ts = sd_teststream_create(p, "Clicks", kv, NULL, 0);
    sd_buf b[3];
    sd_bytes first[2] = { click(&b[0], "ada", 3), click(&b[1], "bob", 1) };
    sd_bytes later = click(&b[2], "ada", 4);
    sd_time at[2] = { 0, 0 };
    sd_teststream_add_elements(ts, NULL, first, at, 2);
    sd_teststream_advance_processing_time(ts, 10 * 60 * 1000); /* ada clicks again at 10 min */
    sd_teststream_add_elements(ts, NULL, &later, at, 1);
    sd_teststream_advance_processing_time(ts, 60 * 60 * 1000); /* bob idle at 30, ada at 40 */
    sd_teststream_advance_watermark_to_infinity(ts);

    sd_state_spec bag = { .id = "clicks", .kind = SD_STATE_BAG, .coder = sd_pcoder_varint(p) };
    sd_timer_spec timer = { .family = "idle", .domain = SD_PROCESSING_TIME };
    sd_pardo_spec spec = {
        .dofn = "readme:idle", .n_states = 1, .states = &bag, .n_timers = 1, .timers = &timer
    };
    sd_collection *reports =
        sd_collect(p, "Collect", sd_pardo(p, "Idle", sd_teststream_output(ts, NULL), &spec, NULL));

    sd_err err = { .code = SD_OK };
    assert_int_equal(sd_pipeline_run(p, NULL, NULL, &err), SD_OK); /* embedded, test clock */
    sd_collection_sort(reports);
    assert_int_equal(sd_collection_len(reports), 2);
    assert_string_equal(sd_collection_at(reports, 0)->key.str, "ada");
    assert_int_equal(sd_collection_at(reports, 0)->value.i, 7);
    assert_string_equal(sd_collection_at(reports, 1)->key.str, "bob");
    assert_int_equal(sd_collection_at(reports, 1)->value.i, 1);
    sd_pipeline_destroy(p);
    for (int i = 0; i < 3; i++) {
        sd_buf_deinit(&b[i]);
    }
}

/* README end */

int main(int argc, char **argv)
{
    int code = 0;
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_idle_users_are_reported) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
