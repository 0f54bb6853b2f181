/*
 * Sundial tests: skipping values without decoding them (skip.c), as the runner does.
 *
 * A table of encodings each coder must skip exactly; valid nested encodings cut at every
 * offset (each prefix must fail with SD_EPROTO and leave the reader where it was); and
 * deterministic pseudo-random garbage through every entry point (no crash, no overread under
 * ASan/UBSan).
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
/* Skipping                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void test_skip_table(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        const char *spec;
        const char *bytes;
        bool nested;
        sd_status want;
        size_t consumed;
    } rows[] = {
        { "bytes nested", "bytes", "03 61 62 63 ff", true, SD_OK, 4 },
        { "bytes outer takes all", "bytes", "03 61 62 63 ff", false, SD_OK, 5 },
        { "bytes nested short", "bytes", "04 61 62 63", true, SD_EPROTO, 0 },
        { "varint 10 bytes", "varint", "ff ff ff ff ff ff ff ff ff 01 07", true, SD_OK, 10 },
        { "varint 11 bytes", "varint", "ff ff ff ff ff ff ff ff ff 81 01", true, SD_EPROTO, 0 },
        { "double", "double", "3f b9 99 99 99 99 99 9a", true, SD_OK, 8 },
        { "kv outer value takes all", "kv(str,bytes)", "01 61 62 63", false, SD_OK, 4 },
        { "kv nested", "kv(str,bytes)", "01 61 01 62 63", true, SD_OK, 4 },
        { "iterable", "iter(varint)", "00 00 00 02 01 c8 01 09", true, SD_OK, 7 },
        { "iterable negative", "iter(varint)", "ff ff ff fe 00", true, SD_EPROTO, 0 },
        { "iterable too many", "iter(varint)", "00 00 01 00 01 02", true, SD_EPROTO, 0 },
        { "iterable blocks", "iter(bytes)", "ff ff ff ff 01 01 61 02 00 00 00 09", true, SD_OK,
          11 },
        { "iterable token refused", "iter(bytes)",
          "ff ff ff ff ff ff ff ff ff ff ff ff ff 01 01 74", true, SD_EPROTO, 0 },
        { "state token", "sbi(bytes)",
          "ff ff ff ff 01 01 61 ff ff ff ff ff ff ff ff ff 01 02 74 74", true, SD_OK, 20 },
        { "2^31-1 global windows are O(1)", "iter(gw)", "7f ff ff ff", true, SD_OK, 4 },
        { "fixed-size overflow", "iter(bool)", "7f ff ff ff 01", true, SD_EPROTO, 0 },
        { "nullable null", "null(varint)", "00 05", true, SD_OK, 1 },
        { "nullable value", "null(varint)", "01 05", true, SD_OK, 2 },
        { "nullable bad flag", "null(varint)", "02 05", true, SD_EPROTO, 0 },
        { "lp unknown", "lp(unk)", "02 aa bb cc", true, SD_OK, 3 },
        { "unknown refused", "unk", "02 aa bb", true, SD_EUNIMPL, 0 },
        { "kv unknown value outer", "kv(str,unk)", "01 61 62", false, SD_EUNIMPL, 0 },
        { "interval window", "iw", "80 00 01 52 9a a4 9b 68 80 dd db 01", true, SD_OK, 12 },
        { "custom window", "cw(bytes)", "80 00 00 00 00 00 00 05 02 61 62", true, SD_OK, 11 },
        { "wv global", "wv(varint,gw)", "80 00 01 52 9a a4 9b 68 00 00 00 01 0f 02", true, SD_OK,
          14 },
        { "wv bad pane form", "wv(varint,gw)", "80 00 01 52 9a a4 9b 68 00 00 00 01 3f 02", true,
          SD_EPROTO, 0 },
        { "timer cleared", "timer(str,gw)", "03 6b 65 79 03 74 61 67 00 00 00 01 01", true, SD_OK,
          13 },
        { "timer bad clear", "timer(str,gw)", "03 6b 65 79 03 74 61 67 00 00 00 01 02", true,
          SD_EPROTO, 0 },
        { "sharded key", "sk(str)", "02 00 01 03 61 62 63", true, SD_OK, 7 },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t buf[64];
        size_t n = hex(rows[i].bytes, buf, sizeof(buf));
        sd_coder *c = mk(rows[i].spec);
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_coder_skip(c, &r, rows[i].nested, &err);
        size_t consumed = (size_t)(r.p - buf);
        if (st != rows[i].want || consumed != rows[i].consumed) {
            fail_msg("%s: got %s after %zu bytes (%s)", rows[i].name, sd_status_name(st), consumed,
                     sd_err_msg(&err));
        }
        if (st != SD_OK && !contains(sd_err_msg(&err), "coder beam:coder:")) {
            fail_msg("%s: error does not name the coder: %s", rows[i].name, sd_err_msg(&err));
        }
        sd_coder_destroy(c);
    }
}

/* Valid nested encodings, cut at every offset: each prefix must fail cleanly. */
static const struct {
    const char *spec;
    const char *bytes;
} VALID[] = {
    { "kv(bytes,varint)", "04 61 62 00 63 0a" },
    { "iter(varint)", "00 00 00 04 01 0a c8 01 e8 07" },
    { "iter(bytes)", "ff ff ff ff 02 04 61 62 00 63 04 64 65 00 66 00" },
    { "sbi(bytes)", "ff ff ff ff 01 01 61 ff ff ff ff ff ff ff ff ff 01 02 74 74" },
    { "wv(varint,iw)", "7f ff ff ff ff ff ff 9c 00 00 00 02 80 00 01 52 9a a4 9b 68 80 dd db 01 7f "
                       "df 3b 64 5a 1c ad 76 ed 02 0f 02" },
    { "wv(kv(str,lp(unk)),gw)", "80 00 00 00 00 00 00 01 00 00 00 01 26 1e 28 01 6b 02 aa bb" },
    { "timer(str,gw)", "03 6b 65 79 03 74 61 67 00 00 00 01 00 80 00 00 00 00 00 04 d2 80 00 00 00 "
                       "00 00 16 2e 0f" },
    { "timer(bytes,iw)", "01 6b 00 00 00 00 01 80 00 00 00 00 00 00 14 0a 00 80 00 00 00 00 00 00 "
                         "15 80 00 00 00 00 00 00 0a 2b 03 01" },
    { "null(double)", "01 7f f8 00 00 00 00 00 00" },
    { "sk(bytes)", "02 00 01 03 61 62 63" },
    { "cw(bytes)", "80 00 00 00 00 00 00 05 02 61 62" },
    { "lp(unk)", "03 01 02 03" },
};

static void test_truncation(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(VALID) / sizeof(VALID[0]); i++) {
        uint8_t buf[128];
        size_t n = hex(VALID[i].bytes, buf, sizeof(buf));
        sd_coder *c = mk(VALID[i].spec);
        sd_err err;

        /* The whole encoding is fine. */
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_err_clear(&err);
        if (sd_coder_skip(c, &r, true, &err) != SD_OK || !sd_reader_done(&r)) {
            fail_msg("%s: valid encoding rejected: %s", VALID[i].spec, sd_err_msg(&err));
        }
        for (size_t cut = 0; cut < n; cut++) {
            /* Copy to an exact-size heap block so ASan sees any overread. */
            uint8_t *p = sd_malloc(cut ? cut : 1);
            assert_non_null(p);
            memcpy(p, buf, cut);
            sd_bytes b = sd_bytes_make(p, cut);

            r = sd_reader_make(b);
            sd_err_clear(&err);
            sd_status st = sd_coder_skip(c, &r, true, &err);
            if (st != SD_EPROTO || r.p != p) {
                fail_msg("%s cut at %zu: skip gave %s", VALID[i].spec, cut, sd_status_name(st));
            }
            sd_value *v = NULL;
            r = sd_reader_make(b);
            st = sd_coder_decode(c, &r, true, &v, NULL);
            if (c->known && (st != SD_EPROTO || r.p != p || v != NULL)) {
                fail_msg("%s cut at %zu: decode gave %s", VALID[i].spec, cut, sd_status_name(st));
            }
            if (c->kind == SD_CODER_WINDOWED_VALUE) {
                sd_wv_header h;
                sd_bytes elem;
                sd_wv_header_init(&h);
                r = sd_reader_make(b);
                st = sd_wv_decode(c, &r, &h, &elem, NULL);
                assert_int_equal(st, SD_EPROTO);
                assert_ptr_equal(r.p, p);
                sd_wv_header_deinit(&h);
            }
            if (c->kind == SD_CODER_TIMER) {
                sd_timer t;
                sd_timer_init(&t);
                r = sd_reader_make(b);
                if (sd_timer_decode(c, &r, &t, NULL) != SD_EPROTO) {
                    fail_msg("%s cut at %zu: timer decode accepted a prefix", VALID[i].spec, cut);
                }
                assert_ptr_equal(r.p, p);
                sd_timer_deinit(&t);
            }
            sd_free(p);
        }
        sd_coder_destroy(c);
    }
}

/* Deterministic pseudo-random garbage through every entry point: no crash, no overread. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)rng_state;
}

static void test_garbage(void **state)
{
    (void)state;
    const char *specs[] = { "wv(kv(str,iter(varint)),iw)", "timer(bytes,iw)",
                            "sbi(null(double))",           "kv(sk(str),lp(unk))",
                            "wv(cw(bytes),cw(varint))",    "iter(kv(gw,bool))" };
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        sd_coder *c = mk(specs[s]);
        for (int iter = 0; iter < 3000; iter++) {
            size_t n = rnd() % 48;
            uint8_t *p = sd_malloc(n ? n : 1);
            assert_non_null(p);
            for (size_t i = 0; i < n; i++) {
                /* Bias towards small and 0xff bytes, which make plausible counts. */
                uint32_t x = rnd();
                p[i] = (x & 3) == 0   ? 0xff
                       : (x & 3) == 1 ? (uint8_t)(x >> 8) % 4
                                      : (uint8_t)(x >> 8);
            }
            sd_bytes b = sd_bytes_make(p, n);
            for (int nested = 0; nested < 2; nested++) {
                sd_reader r = sd_reader_make(b);
                sd_status st = sd_coder_skip(c, &r, nested, NULL);
                assert_true(r.p >= p && r.p <= p + n);
                if (st != SD_OK) {
                    assert_ptr_equal(r.p, p);
                }
                sd_value *v = NULL;
                r = sd_reader_make(b);
                if (sd_coder_decode(c, &r, nested, &v, NULL) == SD_OK) {
                    /* Whatever decoded must encode, canonically: decoding and encoding the
                     * output again gives the same bytes. */
                    sd_buf out = { 0 }, out2 = { 0 };
                    sd_value *again = NULL;
                    assert_int_equal(sd_coder_encode(c, v, nested, &out, NULL), SD_OK);
                    sd_reader r2 = sd_reader_make(sd_buf_bytes(&out));
                    assert_int_equal(sd_coder_decode(c, &r2, nested, &again, NULL), SD_OK);
                    assert_true(sd_reader_done(&r2));
                    assert_int_equal(sd_coder_encode(c, again, nested, &out2, NULL), SD_OK);
                    assert_true(sd_bytes_equal(sd_buf_bytes(&out), sd_buf_bytes(&out2)));
                    sd_value_destroy(again);
                    sd_buf_deinit(&out);
                    sd_buf_deinit(&out2);
                }
                sd_value_destroy(v);
            }
            sd_wv_header h;
            sd_timer t;
            sd_bytes e;
            sd_wv_header_init(&h);
            sd_timer_init(&t);
            sd_reader r = sd_reader_make(b);
            sd_status st = SD_OK;
            if (c->kind == SD_CODER_WINDOWED_VALUE) {
                st = sd_wv_decode(c, &r, &h, &e, NULL);
            }
            if (c->kind == SD_CODER_TIMER) {
                st = sd_timer_decode(c, &r, &t, NULL);
            }
            if (c->kind == SD_CODER_KV) {
                sd_bytes k, v;
                st = sd_kv_split(c, b, &k, &v, NULL);
            }
            if (st != SD_OK) {
                assert_ptr_equal(r.p, p);
            }
            sd_wv_header_deinit(&h);
            sd_timer_deinit(&t);
            sd_free(p);
        }
        sd_coder_destroy(c);
    }
}

int test_coder_run_skip(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skip_table),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_garbage),
    };
    return cmocka_run_group_tests_name("coder_skip", tests, NULL, NULL);
}
