/*
 * Sundial tests: panes, windows, windowed values (plain and param_windowed_value), timers and
 * the iterable reader (window.c and the coder headers the runner reads).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/coder/coder.h"
#include "runner/coder/coder_int.h"
#include "runner/coder/schema.h"
#include "runner/coder/value.h"
#include "test_coder_harness.h"

/* ------------------------------------------------------------------------------------------ */
/* Panes and windows                                                                          */
/* ------------------------------------------------------------------------------------------ */

static void test_panes(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        sd_pane pane;
        const char *bytes;
        sd_pane decoded; /* what decoding the bytes gives (differs when the form drops data) */
    } rows[] = {
        { "no firing", SD_PANE_NO_FIRING_INIT, "0f", SD_PANE_NO_FIRING_INIT },
        { "on time only", SD_PANE_ON_TIME_AND_ONLY_FIRING_INIT, "07",
          SD_PANE_ON_TIME_AND_ONLY_FIRING_INIT },
        { "vector 30/40",
          { false, true, SD_PANE_ON_TIME, 30, 40 },
          "26 1e 28",
          { false, true, SD_PANE_ON_TIME, 30, 40 } },
        { "early -1",
          { true, false, SD_PANE_EARLY, 0, -1 },
          "11 00",
          { true, false, SD_PANE_EARLY, 0, -1 } },
        { "early 3",
          { false, false, SD_PANE_EARLY, 3, -1 },
          "10 03",
          { false, false, SD_PANE_EARLY, 3, -1 } },
        { "late equal",
          { false, true, SD_PANE_LATE, 5, 5 },
          "1a 05",
          { false, true, SD_PANE_LATE, 5, 5 } },
        { "late two",
          { false, false, SD_PANE_LATE, 300, 2 },
          "28 ac 02 02",
          { false, false, SD_PANE_LATE, 300, 2 } },
        { "unknown drops indices",
          { true, true, SD_PANE_UNKNOWN, 7, 7 },
          "0f",
          SD_PANE_NO_FIRING_INIT },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t want[16];
        size_t n = hex(rows[i].bytes, want, sizeof(want));
        sd_buf b = { 0 };
        assert_int_equal(sd_pane_encode(&rows[i].pane, &b), SD_OK);
        if (b.len != n || memcmp(b.data, want, n) != 0) {
            fail_msg("%s: wrong encoding", rows[i].name);
        }
        sd_reader r = sd_reader_make(sd_bytes_make(want, n));
        sd_pane p;
        assert_int_equal(sd_pane_decode(&r, &p, NULL), SD_OK);
        assert_true(sd_reader_done(&r));
        if (!sd_pane_equal(&p, &rows[i].decoded)) {
            fail_msg("%s: wrong decoding", rows[i].name);
        }
        sd_buf_deinit(&b);
    }
    static const char *bad[] = { "", "3f", "10", "20 01", "40", "f0" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t buf[8];
        size_t n = hex(bad[i], buf, sizeof(buf));
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_pane p;
        sd_err err;
        sd_err_clear(&err);
        assert_int_equal(sd_pane_decode(&r, &p, &err), SD_EPROTO);
        assert_ptr_equal(r.p, buf);
        assert_true(contains(sd_err_msg(&err), "pane info"));
    }
    sd_pane invalid = { .timing = 9 };
    sd_buf b = { 0 };
    assert_int_equal(sd_pane_encode(&invalid, &b), SD_EINVAL);
    sd_buf_deinit(&b);
}

static void test_windows(void **state)
{
    (void)state;
    sd_window g = sd_window_global();
    sd_window a = sd_window_interval(10, 20), b = sd_window_interval(0, 20);
    sd_window c = sd_window_interval(10, 30);
    assert_int_equal(sd_window_max_ts(&g), SD_TIME_GLOBAL_MAX);
    assert_int_equal(sd_window_max_ts(&a), 19);
    assert_true(sd_window_cmp(&g, &a) < 0);
    assert_true(sd_window_cmp(&b, &a) < 0);
    assert_true(sd_window_cmp(&a, &c) < 0);
    assert_true(sd_window_equal(&a, &a));
    assert_false(sd_window_equal(&a, &b));

    sd_coder *iw = mk("iw"), *gw = mk("gw"), *cw = mk("cw(bytes)");
    sd_buf out = { 0 };
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_window_encode(iw, &a, &out, &err), SD_OK);
    assert_int_equal(out.len, 9);
    sd_reader r = sd_reader_make(sd_buf_bytes(&out));
    sd_window back;
    assert_int_equal(sd_window_decode(iw, &r, &back, &err), SD_OK);
    assert_true(sd_window_equal(&back, &a));
    sd_window inverted = sd_window_interval(30, 20);
    assert_int_equal(sd_window_encode(iw, &inverted, &out, NULL), SD_EINVAL);
    assert_int_equal(sd_window_encode(gw, &a, &out, NULL), SD_EINVAL);
    assert_int_equal(sd_window_encode(iw, &g, &out, NULL), SD_EINVAL);

    /* A span reaching below INT64_MIN is refused. */
    uint8_t low[] = { 0x00, 0, 0, 0, 0, 0, 0, 0x05, 0x0a };
    r = sd_reader_make(sd_bytes_make(low, sizeof(low)));
    sd_err_clear(&err);
    assert_int_equal(sd_window_decode(iw, &r, &back, &err), SD_EPROTO);
    assert_true(contains(sd_err_msg(&err), "span"));

    /* Custom windows keep their component bytes. */
    sd_buf_reset(&out);
    sd_window cwin = {
        .start = SD_TIME_MIN, .end = 100, .custom = true, .custom_bytes = sd_bytes_make("\x02xy", 3)
    };
    assert_int_equal(sd_window_encode(cw, &cwin, &out, &err), SD_OK);
    r = sd_reader_make(sd_buf_bytes(&out));
    assert_int_equal(sd_window_decode(cw, &r, &back, &err), SD_OK);
    assert_true(back.custom);
    assert_int_equal(sd_window_max_ts(&back), 99);
    assert_true(sd_bytes_equal(back.custom_bytes, cwin.custom_bytes));
    assert_true(sd_window_equal(&back, &cwin));

    sd_coder *v = mk("varint"), *u = mk("unk");
    assert_int_equal(sd_window_decode(v, &r, &back, NULL), SD_EINVAL);
    assert_int_equal(sd_window_decode(u, &r, &back, NULL), SD_EUNIMPL);
    sd_buf_deinit(&out);
    sd_coder_destroy(iw);
    sd_coder_destroy(gw);
    sd_coder_destroy(cw);
    sd_coder_destroy(v);
    sd_coder_destroy(u);

    /* sd_windows: inline then heap, and reuse. */
    sd_windows ws;
    sd_windows_init(&ws);
    for (int i = 0; i < 11; i++) {
        sd_window w = sd_window_interval(i, i + 5);
        assert_int_equal(sd_windows_push(&ws, &w), SD_OK);
        assert_int_equal(ws.n, (size_t)i + 1);
        for (int j = 0; j <= i; j++) {
            assert_int_equal(sd_windows_items(&ws)[j].start, j);
        }
    }
    sd_window two[2] = { sd_window_interval(1, 2), sd_window_interval(3, 4) };
    assert_int_equal(sd_windows_set(&ws, two, 2), SD_OK);
    assert_int_equal(sd_windows_items(&ws)[1].end, 4);
    sd_windows_deinit(&ws);
}

/* ------------------------------------------------------------------------------------------ */
/* Windowed values, KVs, timers, iterables                                                    */
/* ------------------------------------------------------------------------------------------ */

static void test_wv_roundtrip(void **state)
{
    (void)state;
    sd_coder *c = mk("wv(kv(str,lp(unk)),iw)");
    const sd_coder *wc = sd_wv_window_coder(c);
    assert_int_equal(wc->kind, SD_CODER_INTERVAL_WINDOW);
    assert_int_equal(sd_wv_element_coder(c)->kind, SD_CODER_KV);
    sd_window wins[6];
    for (int i = 0; i < 6; i++) {
        wins[i] = sd_window_interval(i * 10, i * 10 + 10);
    }
    sd_pane pane = { false, false, SD_PANE_LATE, 4, 1 };
    /* Two elements back to back, as on the data plane. */
    sd_buf stream = { 0 };
    for (int k = 0; k < 2; k++) {
        assert_int_equal(
            sd_wv_encode_header(&stream, wc, -5 + k, wins, 6 - (size_t)k * 5, &pane, NULL), SD_OK);
        assert_int_equal(sd_buf_append(&stream, "\x01k\x02\xaa\xbb", 5), SD_OK);
    }
    sd_reader r = sd_reader_make(sd_buf_bytes(&stream));
    sd_wv_header h;
    sd_wv_header_init(&h);
    for (int k = 0; k < 2; k++) {
        sd_bytes elem, key, value;
        sd_err err;
        sd_err_clear(&err);
        assert_int_equal(sd_wv_decode(c, &r, &h, &elem, &err), SD_OK);
        assert_int_equal(h.ts, -5 + k);
        assert_int_equal(h.windows.n, 6 - (size_t)k * 5);
        for (size_t i = 0; i < h.windows.n; i++) {
            assert_true(sd_window_equal(&sd_windows_items(&h.windows)[i], &wins[i]));
        }
        assert_true(sd_pane_equal(&h.pane, &pane));
        assert_int_equal(elem.len, 5);
        assert_int_equal(sd_kv_split(sd_wv_element_coder(c), elem, &key, &value, &err), SD_OK);
        assert_true(sd_bytes_equal(key, sd_bytes_make("\x01k", 2)));
        assert_true(sd_bytes_equal(value, sd_bytes_make("\x02\xaa\xbb", 3)));
        /* Re-encoding reproduces the element exactly. */
        sd_buf again = { 0 };
        assert_int_equal(sd_wv_encode(c, &h, elem, &again, &err), SD_OK);
        sd_buf_deinit(&again);
    }
    assert_true(sd_reader_done(&r));
    sd_wv_header_deinit(&h);
    sd_buf_deinit(&stream);

    /* Wrong coder kinds are EINVAL; unknown element coders EUNIMPL. */
    sd_coder *kv = mk("kv(str,str)"), *wu = mk("wv(unk,gw)");
    uint8_t bytes[] = { 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x0f, 0x01 };
    r = sd_reader_make(sd_bytes_make(bytes, sizeof(bytes)));
    sd_bytes elem;
    sd_wv_header_init(&h);
    assert_int_equal(sd_wv_decode(kv, &r, &h, &elem, NULL), SD_EINVAL);
    assert_int_equal(sd_wv_decode(wu, &r, &h, &elem, NULL), SD_EUNIMPL);
    assert_ptr_equal(r.p, bytes);
    sd_bytes k, v;
    assert_int_equal(sd_kv_split(wu, sd_bytes_make(bytes, 2), &k, &v, NULL), SD_EINVAL);
    sd_wv_header_deinit(&h);
    sd_coder_destroy(kv);
    sd_coder_destroy(wu);
    sd_coder_destroy(c);

    /* Too many windows. */
    sd_coder *g = mk("wv(varint,gw)");
    uint8_t many[] = { 0x80, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0x0f, 0x01 };
    r = sd_reader_make(sd_bytes_make(many, sizeof(many)));
    sd_err err;
    sd_err_clear(&err);
    sd_wv_header_init(&h);
    assert_int_equal(sd_wv_decode(g, &r, &h, &elem, &err), SD_EPROTO);
    assert_true(contains(sd_err_msg(&err), "windows"));
    sd_wv_header_deinit(&h);
    sd_coder_destroy(g);
}

/*
 * Element metadata after a windowed value's pane (Beam Java's WindowedValueCoder with metadata
 * support on: pane byte | 0x80, then an Elements.ElementMetadata message as varint length +
 * bytes, then the value): the header, the skip and the value decoder read past it; a pane on
 * its own or in a timer has no such flag.
 */
static void test_wv_element_metadata(void **state)
{
    (void)state;
    sd_coder *c = mk("wv(varint,gw)");

    static const struct {
        const char *name;
        const char *hex; /* ts 7, 1 global window, pane, metadata, value 5 */
        int64_t index;
        bool ok;
    } rows[] = {
        { "first form, drain metadata", "80 00 00 00 00 00 00 07 00 00 00 01 8f 02 08 01 05", 0,
          true },
        { "one-index form, empty metadata", "80 00 00 00 00 00 00 07 00 00 00 01 9a 03 00 05", 3,
          true },
        { "two-index form", "80 00 00 00 00 00 00 07 00 00 00 01 a8 04 01 03 08 01 10 05", 4,
          true },
        /* The flag with no message after it, or a shorter one than its length says. */
        { "no message", "80 00 00 00 00 00 00 07 00 00 00 01 8f", 0, false },
        { "short message", "80 00 00 00 00 00 00 07 00 00 00 01 8f 05 08 01", 0, false },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t buf[32];
        size_t n = hex(rows[i].hex, buf, sizeof(buf));
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_wv_header h;
        sd_bytes elem;
        sd_err err;
        sd_err_clear(&err);
        sd_wv_header_init(&h);
        sd_status st = sd_wv_decode(c, &r, &h, &elem, &err);
        int64_t ts = h.ts, index = h.pane.index;
        sd_wv_header_deinit(&h);
        if (!rows[i].ok) {
            assert_int_equal(st, SD_EPROTO);
            assert_true(contains(sd_err_msg(&err), "element metadata"));
            assert_ptr_equal(r.p, buf);
            continue;
        }
        if (st != SD_OK) {
            fail_msg("%s: %s", rows[i].name, sd_err_msg(&err));
        }
        assert_true(sd_reader_done(&r));
        assert_int_equal(ts, 7);
        assert_int_equal(index, rows[i].index);
        assert_true(sd_bytes_equal(elem, sd_bytes_make("\x05", 1)));
        r = sd_reader_make(sd_bytes_make(buf, n));
        assert_int_equal(sd_coder_skip(c, &r, true, &err), SD_OK);
        assert_true(sd_reader_done(&r));
        r = sd_reader_make(sd_bytes_make(buf, n));
        sd_value *v = NULL;
        assert_int_equal(sd_coder_decode(c, &r, true, &v, &err), SD_OK);
        assert_true(sd_reader_done(&r));
        sd_value_destroy(v);
    }
    sd_coder_destroy(c);

    /* A pane alone, and a timer's, keep the strict forms. */
    uint8_t flagged[] = { 0x8f };
    sd_reader r = sd_reader_make(sd_bytes_make(flagged, 1));
    sd_pane p;
    assert_int_equal(sd_pane_decode(&r, &p, NULL), SD_EPROTO);
    sd_coder *tc = mk("timer(bytes,gw)");
    uint8_t timer[64];
    size_t tn = hex("01 6b 00 00 00 00 01 00 80 00 00 00 00 00 00 01 80 00 00 00 00 00 00 01 8f",
                    timer, sizeof(timer));
    r = sd_reader_make(sd_bytes_make(timer, tn));
    sd_timer t;
    sd_timer_init(&t);
    assert_int_equal(sd_timer_decode(tc, &r, &t, NULL), SD_EPROTO);
    r = sd_reader_make(sd_bytes_make(timer, tn));
    assert_int_equal(sd_coder_skip(tc, &r, true, NULL), SD_EPROTO);
    assert_int_equal(tn, 25);
    timer[24] = 0x0f; /* the same timer without the flag decodes */
    r = sd_reader_make(sd_bytes_make(timer, tn));
    assert_int_equal(sd_timer_decode(tc, &r, &t, NULL), SD_OK);
    assert_true(sd_reader_done(&r));
    sd_timer_deinit(&t);
    sd_coder_destroy(tc);
}

static void test_param_wv(void **state)
{
    (void)state;
    uint8_t payload[64];
    size_t n = hex(PWV_PAYLOAD_HEX, payload, sizeof(payload));
    sd_coder *comps[2] = { mk("varint"), mk("iw") };
    sd_coder *c = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_coder_from_urn(PWV, sd_bytes_make(payload, n), comps, 2, &c, &err), SD_OK);
    assert_null(sd__coder_check(c));
    uint8_t two[] = { 0x02, 0x03 };
    sd_reader r = sd_reader_make(sd_bytes_make(two, 2));
    sd_wv_header h;
    sd_bytes elem;
    sd_wv_header_init(&h);
    assert_int_equal(sd_wv_decode(c, &r, &h, &elem, &err), SD_OK);
    assert_int_equal(h.ts, 1000);
    assert_int_equal(h.windows.n, 1);
    assert_int_equal(sd_windows_items(&h.windows)[0].end, 20);
    assert_int_equal(h.pane.index, 30);
    assert_int_equal(elem.len, 1);
    assert_int_equal(sd_reader_left(&r), 1);
    sd_buf out = { 0 };
    assert_int_equal(sd_wv_encode(c, &h, elem, &out, &err), SD_OK);
    assert_int_equal(out.len, 1);
    sd_buf_deinit(&out);
    sd_wv_header_deinit(&h);
    sd_coder_destroy(c);

    /* An unknown window coder cannot be read from the payload. */
    sd_coder *unk = mk("unk");
    sd_coder *comps2[2] = { comps[0], unk };
    sd_err_clear(&err);
    assert_int_equal(sd_coder_from_urn(PWV, sd_bytes_make(payload, n), comps2, 2, &c, &err),
                     SD_EUNIMPL);
    sd_coder_destroy(unk);
    sd_coder_destroy(comps[0]);
    sd_coder_destroy(comps[1]);
}

static void test_timers(void **state)
{
    (void)state;
    sd_coder *c = mk("timer(bytes,iw)");
    sd_timer t;
    sd_timer_init(&t);
    t.key = sd_bytes_make("\x01k", 2);
    t.tag = sd_bytes_make("tag", 3);
    sd_window w = sd_window_interval(0, 60000);
    assert_int_equal(sd_windows_push(&t.windows, &w), SD_OK);
    t.fire = 59999;
    t.hold = -1;
    t.pane = (sd_pane){ true, false, SD_PANE_EARLY, 2, -1 };
    sd_buf out = { 0 };
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_timer_encode(c, &t, &out, &err), SD_OK);
    t.clear = true;
    assert_int_equal(sd_timer_encode(c, &t, &out, &err), SD_OK);

    sd_reader r = sd_reader_make(sd_buf_bytes(&out));
    sd_timer d;
    sd_timer_init(&d);
    assert_int_equal(sd_timer_decode(c, &r, &d, &err), SD_OK);
    assert_false(d.clear);
    assert_true(sd_bytes_equal(d.key, t.key));
    assert_true(sd_bytes_equal(d.tag, t.tag));
    assert_int_equal(d.fire, 59999);
    assert_int_equal(d.hold, -1);
    assert_true(sd_pane_equal(&d.pane, &t.pane));
    assert_int_equal(d.windows.n, 1);
    assert_int_equal(sd_timer_decode(c, &r, &d, &err), SD_OK);
    assert_true(d.clear);
    assert_true(sd_reader_done(&r));
    sd_timer_deinit(&d);
    sd_timer_deinit(&t);
    sd_buf_deinit(&out);
    sd_coder *kv = mk("kv(bytes,bytes)");
    assert_int_equal(sd_timer_decode(kv, &r, &d, NULL), SD_EINVAL);
    assert_int_equal(sd_timer_encode(kv, &t, &out, NULL), SD_EINVAL);
    sd_coder_destroy(kv);
    sd_coder_destroy(c);
}

static void test_iterable_reader(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        const char *spec;
        const char *bytes;
        size_t n_elems;
        const char *token; /* NULL = none */
        sd_status want;
    } rows[] = {
        { "known", "iter(varint)", "00 00 00 03 01 c8 01 05", 3, NULL, SD_OK },
        { "empty", "iter(varint)", "00 00 00 00", 0, NULL, SD_OK },
        { "blocks", "iter(bytes)", "ff ff ff ff 02 01 61 01 62 01 01 63 00", 3, NULL, SD_OK },
        { "token", "sbi(bytes)", "ff ff ff ff 01 01 61 ff ff ff ff ff ff ff ff ff 01 02 74 75", 1,
          "tu", SD_OK },
        { "token only", "sbi(varint)", "ff ff ff ff ff ff ff ff ff ff ff ff ff 01 00", 0, "",
          SD_OK },
        { "token in plain iterable", "iter(bytes)", "ff ff ff ff ff ff ff ff ff ff ff ff ff 01 00",
          0, NULL, SD_EPROTO },
        { "truncated block", "iter(bytes)", "ff ff ff ff 02 01 61", 1, NULL, SD_EPROTO },
        { "count beyond input", "iter(varint)", "00 00 00 09 01", 0, NULL, SD_EPROTO },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t buf[64];
        size_t n = hex(rows[i].bytes, buf, sizeof(buf));
        sd_coder *c = mk(rows[i].spec);
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_iterable_reader it;
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_iterable_begin(&it, c, &r, &err);
        size_t count = 0;
        bool has = true;
        while (st == SD_OK && has) {
            sd_bytes e;
            st = sd_iterable_next(&it, &e, &has, &err);
            count += st == SD_OK && has;
        }
        if (st != rows[i].want || count != rows[i].n_elems) {
            fail_msg("%s: %s after %zu elements (%s)", rows[i].name, sd_status_name(st), count,
                     sd_err_msg(&err));
        }
        if (st == SD_OK) {
            assert_true(sd_reader_done(&r));
            assert_int_equal(it.has_token, rows[i].token != NULL);
            if (rows[i].token != NULL) {
                assert_true(sd_bytes_equal(it.token, sd_bytes_str(rows[i].token)));
            }
            /* The generic decoder agrees. */
            sd_value *v = NULL;
            r = sd_reader_make(sd_bytes_make(buf, n));
            assert_int_equal(sd_coder_decode(c, &r, true, &v, NULL), SD_OK);
            assert_int_equal(v->n_items, count);
            assert_int_equal(v->has_token, rows[i].token != NULL);
            sd_value_destroy(v);
        }
        sd_coder_destroy(c);
    }
    sd_buf b = { 0 };
    assert_int_equal(sd_iterable_encode_begin(&b, 258), SD_OK);
    assert_memory_equal(b.data, "\x00\x00\x01\x02", 4);
    assert_int_equal(sd_iterable_encode_begin(&b, (size_t)INT32_MAX + 1), SD_ETOOBIG);
    sd_buf_deinit(&b);
}

int test_coder_run_windows(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_panes),           cmocka_unit_test(test_windows),
        cmocka_unit_test(test_wv_roundtrip),    cmocka_unit_test(test_wv_element_metadata),
        cmocka_unit_test(test_param_wv),        cmocka_unit_test(test_timers),
        cmocka_unit_test(test_iterable_reader),
    };
    return cmocka_run_group_tests_name("coder_windows", tests, NULL, NULL);
}
