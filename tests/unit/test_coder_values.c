/*
 * Sundial tests: the value model and full decode/encode (value.c, value_decode.c,
 * value_encode.c): round trips per coder, rows and schemas, decimal text, logical types with
 * their own wire form, state-backed iterables read through a state callback, and the decode
 * OOM loop.
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
/* Values                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void roundtrip_value(const char *spec, sd_value *v, bool nested, const char *want_hex)
{
    sd_coder *c = mk(spec);
    sd_buf out = { 0 };
    sd_err err;
    sd_err_clear(&err);
    if (sd_coder_encode(c, v, nested, &out, &err) != SD_OK) {
        fail_msg("%s: encode: %s", spec, sd_err_msg(&err));
    }
    if (want_hex != NULL) {
        uint8_t want[128];
        size_t n = hex(want_hex, want, sizeof(want));
        if (out.len != n || memcmp(out.data, want, n) != 0) {
            fail_msg("%s: unexpected bytes", spec);
        }
    }
    sd_reader r = sd_reader_make(sd_buf_bytes(&out));
    sd_value *back = NULL;
    assert_int_equal(sd_coder_decode(c, &r, nested, &back, &err), SD_OK);
    assert_true(sd_reader_done(&r));
    if (!sd_value_equal(back, v)) {
        sd_buf d = { 0 };
        assert_int_equal(sd_value_describe(back, &d), SD_OK);
        assert_int_equal(sd_buf_append_byte(&d, 0), SD_OK);
        fail_msg("%s: round trip gave %s", spec, (char *)d.data);
    }
    sd_value_destroy(back);
    sd_value_destroy(v);
    sd_buf_deinit(&out);
    sd_coder_destroy(c);
}

static void test_values(void **state)
{
    (void)state;
    double nan_value = __builtin_nan("");
    roundtrip_value("double", sd_value_double(nan_value), true, "7f f8 00 00 00 00 00 00");
    roundtrip_value("double", sd_value_double(-0.0), true, "80 00 00 00 00 00 00 00");
    roundtrip_value("double", sd_value_double(__builtin_inf()), true, "7f f0 00 00 00 00 00 00");
    roundtrip_value("double", sd_value_double(-__builtin_inf()), true, "ff f0 00 00 00 00 00 00");
    roundtrip_value("null(varint)", sd_value_null(), true, "00");
    roundtrip_value("null(str)", sd_value_string("ab", 2), false, "01 61 62");
    roundtrip_value("null(str)", sd_value_string("ab", 2), true, "01 02 61 62");
    roundtrip_value("lp(unk)", sd_value_bytes("\xaa", 1), true, "01 aa");
    roundtrip_value("lp(varint)", sd_value_int(300), true, "02 ac 02");
    roundtrip_value("lp(str)", sd_value_string("hi", 2), true, "02 68 69");
    /* The user key is nested even in the outer context (Beam's vectors, document 33). */
    roundtrip_value("sk(str)", sd_value_sharded_key("\x01", 1, sd_value_string("k", 1)), false,
                    "01 01 01 6b");
    roundtrip_value("sk(str)", sd_value_sharded_key("", 0, sd_value_string("k", 1)), true,
                    "00 01 6b");
    sd_window cwin = {
        .start = SD_TIME_MIN, .end = 1, .custom = true, .custom_bytes = sd_bytes_make("\x03", 1)
    };
    roundtrip_value("cw(varint)", sd_value_window(&cwin), true, "80 00 00 00 00 00 00 00 03");

    sd_value *sbi = sd_value_list();
    assert_int_equal(sd_value_push(sbi, sd_value_int(1)), SD_OK);
    assert_int_equal(sd_value_push(sbi, sd_value_int(2)), SD_OK);
    sbi->has_token = true;
    sbi->bytes = sd_malloc(3);
    memcpy(sbi->bytes, "ab", 3);
    sbi->len = 2;
    roundtrip_value("sbi(varint)", sbi, true,
                    "ff ff ff ff 02 01 02 ff ff ff ff ff ff ff ff ff 01 02 61 62");

    sd_value *wins = sd_value_list();
    sd_window w = sd_window_interval(0, 10);
    assert_int_equal(sd_value_push(wins, sd_value_window(&w)), SD_OK);
    sd_pane pane = SD_PANE_ON_TIME_AND_ONLY_FIRING;
    roundtrip_value("timer(varint,iw)",
                    sd_value_timer(sd_value_int(7), "t", 1, wins, false, 9, 3, &pane), true, NULL);

    /* Kind mismatches name the coder and both kinds. */
    sd_coder *kv = mk("kv(str,varint)");
    sd_value *bad = sd_value_kv(sd_value_string("a", 1), sd_value_string("b", 1));
    sd_buf out = { 0 };
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_coder_encode(kv, bad, true, &out, &err), SD_EINVAL);
    assert_string_equal(
        sd_err_msg(&err),
        "coder beam:coder:varint:v1: cannot encode a string value (expected an int)");
    sd_value_destroy(bad);
    sd_buf_deinit(&out);
    sd_coder_destroy(kv);

    /* Bad bools and unknown coders. */
    sd_coder *bl = mk("bool"), *u = mk("unk");
    uint8_t two = 2;
    sd_reader r = sd_reader_make(sd_bytes_make(&two, 1));
    sd_value *v = NULL;
    assert_int_equal(sd_coder_decode(bl, &r, true, &v, NULL), SD_EPROTO);
    assert_int_equal(sd_coder_decode(u, &r, true, &v, NULL), SD_EUNIMPL);
    sd_coder_destroy(bl);
    sd_coder_destroy(u);

    /* A length prefix must hold exactly one value. */
    sd_coder *lpv = mk("lp(varint)");
    uint8_t extra[] = { 0x02, 0x01, 0x01 };
    r = sd_reader_make(sd_bytes_make(extra, 3));
    sd_err_clear(&err);
    assert_int_equal(sd_coder_decode(lpv, &r, true, &v, &err), SD_EPROTO);
    assert_true(contains(sd_err_msg(&err), "left inside the length prefix"));
    sd_coder_destroy(lpv);

    /* Millions of empty elements are refused when decoding values. */
    sd_coder *ig = mk("iter(gw)");
    uint8_t big[] = { 0x7f, 0xff, 0xff, 0xff };
    r = sd_reader_make(sd_bytes_make(big, 4));
    assert_int_equal(sd_coder_decode(ig, &r, true, &v, NULL), SD_ETOOBIG);
    sd_coder_destroy(ig);
}

/* ------------------------------------------------------------------------------------------ */
/* Rows and schemas                                                                           */
/* ------------------------------------------------------------------------------------------ */

static sd_coder *row_coder(const char *payload_hex, sd_status want)
{
    uint8_t payload[256];
    size_t n = hex(payload_hex, payload, sizeof(payload));
    sd_coder *c = NULL;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_coder_from_urn(ROW, sd_bytes_make(payload, n), NULL, 0, &c, &err);
    if (st != want) {
        fail_msg("row payload %s: %s %s", payload_hex, sd_status_name(st), sd_err_msg(&err));
    }
    return c;
}

/*
 * A schema with encoding positions: a: int16 (pos 2), b: float (pos 0), c: byte (pos 1),
 * d: map<string, array<nullable int64>> (pos 3), e: nullable row{x: bool} (pos 4).
 */
static const char SCHEMA2[] =
    "0a 09 0a 01 61 1a 02 10 02 28 02 0a 09 0a 01 62 1a 02 10 05 28 00 0a 09 0a 01 63 1a 02 "
    "10 01 28 01 0a 17 0a 01 64 1a 10 2a 0e 0a 02 10 07 12 08 1a 06 0a 04 08 01 10 04 28 03 "
    "0a 16 0a 01 65 1a 0f 08 01 32 0b 0a 09 0a 07 0a 01 78 1a 02 10 08 28 04 20 01";

/*
 * Fewer fields on the wire (schema evolution): the rest decode as null, even the non-nullable
 * "a"; such a row encodes as it came, with the short count (the null tail holds a non-nullable
 * field), and that encoding is canonical: decoded and encoded again, the same bytes.
 */
static void test_row_schema_evolution(void **state)
{
    (void)state;
    sd_coder *c = row_coder(SCHEMA2, SD_OK);
    sd_err err;
    sd_err_clear(&err);
    uint8_t old[] = { 0x01, 0x00, 0x40, 0x00, 0x00, 0x00 };
    sd_reader r = sd_reader_make(sd_bytes_make(old, sizeof(old)));
    sd_value *partial = NULL;
    assert_int_equal(sd_coder_decode(c, &r, true, &partial, &err), SD_OK);
    assert_int_equal(partial->items[1]->kind, SD_VALUE_DOUBLE);
    assert_int_equal(partial->items[0]->kind, SD_VALUE_NULL);
    sd_buf out = { 0 }, out2 = { 0 };
    assert_int_equal(sd_coder_encode(c, partial, true, &out, &err), SD_OK);
    assert_int_equal(out.data[0], 0x01);
    r = sd_reader_make(sd_buf_bytes(&out));
    sd_value *again = NULL;
    assert_int_equal(sd_coder_decode(c, &r, true, &again, &err), SD_OK);
    assert_true(sd_reader_done(&r));
    assert_true(sd_value_equal(again, partial));
    assert_int_equal(sd_coder_encode(c, again, true, &out2, &err), SD_OK);
    assert_true(sd_bytes_equal(sd_buf_bytes(&out), sd_buf_bytes(&out2)));
    sd_buf_deinit(&out);
    sd_buf_deinit(&out2);
    sd_value_destroy(again);
    sd_value_destroy(partial);
    sd_coder_destroy(c);
}

static void test_rows(void **state)
{
    (void)state;
    sd_coder *c = row_coder(SCHEMA2, SD_OK);
    assert_null(sd__coder_check(c));
    const sd_schema *s = c->schema;
    assert_true(s->encoding_positions_set);
    assert_int_equal(s->order[0], 1);
    assert_int_equal(s->order[1], 2);
    assert_int_equal(s->order[2], 0);
    assert_int_equal(s->fields[4].type->kind, SD_FIELD_ROW);
    assert_true(s->fields[4].type->nullable);
    sd_value *row = sd_value_row();
    assert_int_equal(sd_value_push(row, sd_value_int(-2)), SD_OK);
    assert_int_equal(sd_value_push(row, sd_value_double(1.5)), SD_OK);
    assert_int_equal(sd_value_push(row, sd_value_int(-1)), SD_OK);
    sd_value *map = sd_value_map();
    sd_value *arr = sd_value_list();
    assert_int_equal(sd_value_push(arr, sd_value_int(5)), SD_OK);
    assert_int_equal(sd_value_push(arr, sd_value_null()), SD_OK);
    assert_int_equal(sd_value_push(map, sd_value_string("k", 1)), SD_OK);
    assert_int_equal(sd_value_push(map, arr), SD_OK);
    assert_int_equal(sd_value_push(row, map), SD_OK);
    assert_int_equal(sd_value_push(row, sd_value_null()), SD_OK);
    /* 5 fields, bitmap {e null}, then b (float 1.5), c (byte -1), a (int16 -2), d. */
    {
        sd_buf out = { 0 };
        sd_err err;
        sd_err_clear(&err);
        assert_int_equal(sd_coder_encode(c, row, true, &out, &err), SD_OK);
        uint8_t want[64];
        size_t n = hex("05 01 10 3f c0 00 00 ff ff fe 00 00 00 01 01 6b 00 00 00 02 01 05 00", want,
                       sizeof(want));
        assert_int_equal(out.len, n);
        assert_memory_equal(out.data, want, n);
        sd_reader r = sd_reader_make(sd_buf_bytes(&out));
        sd_value *back = NULL;
        assert_int_equal(sd_coder_decode(c, &r, true, &back, &err), SD_OK);
        assert_true(sd_value_equal(back, row));
        r = sd_reader_make(sd_buf_bytes(&out));
        assert_int_equal(sd_coder_skip(c, &r, true, &err), SD_OK);
        assert_true(sd_reader_done(&r));
        /* More fields than the schema cannot be delimited. */
        uint8_t more[] = { 0x09, 0x00 };
        r = sd_reader_make(sd_bytes_make(more, sizeof(more)));
        assert_int_equal(sd_coder_skip(c, &r, true, NULL), SD_EPROTO);
        /* Null in a non-nullable field is refused. */
        sd_value_destroy(row->items[0]);
        row->items[0] = sd_value_null();
        sd_buf_reset(&out);
        sd_err_clear(&err);
        assert_int_equal(sd_coder_encode(c, row, true, &out, &err), SD_EINVAL);
        assert_true(contains(sd_err_msg(&err), "non-nullable field \"a\""));
        /* Out-of-range int16. */
        sd_value_destroy(row->items[0]);
        row->items[0] = sd_value_int(40000);
        sd_err_clear(&err);
        assert_int_equal(sd_coder_encode(c, row, true, &out, &err), SD_EINVAL);
        sd_value_destroy(back);
        sd_buf_deinit(&out);
    }
    sd_value_destroy(row);
    sd_coder_destroy(c);

    /* INT32 negatives: written as 32-bit varints, read from either width. */
    c = row_coder("0a 07 0a 01 69 1a 02 10 03", SD_OK);
    row = sd_value_row();
    assert_int_equal(sd_value_push(row, sd_value_int(-1)), SD_OK);
    sd_buf out = { 0 };
    assert_int_equal(sd_coder_encode(c, row, true, &out, NULL), SD_OK);
    uint8_t want32[] = { 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f };
    assert_int_equal(out.len, sizeof(want32));
    assert_memory_equal(out.data, want32, sizeof(want32));
    uint8_t wide[] = { 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
    sd_reader r = sd_reader_make(sd_bytes_make(wide, sizeof(wide)));
    sd_value *back = NULL;
    assert_int_equal(sd_coder_decode(c, &r, true, &back, NULL), SD_OK);
    assert_true(sd_value_equal(back, row));
    sd_value_destroy(back);
    sd_value_destroy(row);
    sd_buf_deinit(&out);
    sd_coder_destroy(c);

    /* Bad schemas. */
    static const char *bad[] = {
        "0a",                                     /* truncated length */
        "0a 03 0a 01",                            /* truncated field */
        "0b",                                     /* group wire type */
        "0a 05 0a 01 61 1a 00",                   /* type without type_info */
        "0a 07 0a 01 61 1a 02 10 0a",             /* atomic type 10 */
        "0a 09 0a 01 61 1a 02 10 02 28 01 20 01", /* position 1 of 1 field */
        "0a 05 0a 01 61 1a 02 1a 00",             /* truncated type */
        "0a 08 0a 01 61 1a 03 3a 01 0a",          /* logical type cut */
        "0a 07 0a 01 61 1a 02 2a 00",             /* map without key/value */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_null(row_coder(bad[i], SD_EPROTO));
    }
    /* Nesting: 30 levels of array<...> parse, 40 are refused (bounded recursion). */
    for (int levels = 30; levels <= 40; levels += 10) {
        sd_buf type = { 0 }, tmp = { 0 };
        assert_int_equal(sd_buf_append(&type, "\x10\x07", 2), SD_OK); /* atomic string */
        for (int level = 0; level < levels; level++) {
            /* FieldType{ array_type(3): ArrayType{ element_type(1): type } } */
            sd_buf_reset(&tmp);
            assert_int_equal(sd_buf_append_byte(&tmp, 0x0a), SD_OK);
            assert_int_equal(sd_buf_put_lp(&tmp, sd_buf_bytes(&type)), SD_OK);
            sd_buf_reset(&type);
            assert_int_equal(sd_buf_append_byte(&type, 0x1a), SD_OK);
            assert_int_equal(sd_buf_put_lp(&type, sd_buf_bytes(&tmp)), SD_OK);
        }
        sd_buf field = { 0 }, schema_buf = { 0 };
        assert_int_equal(sd_buf_append(&field, "\x0a\x01z\x1a", 4), SD_OK);
        assert_int_equal(sd_buf_put_lp(&field, sd_buf_bytes(&type)), SD_OK);
        assert_int_equal(sd_buf_append_byte(&schema_buf, 0x0a), SD_OK);
        assert_int_equal(sd_buf_put_lp(&schema_buf, sd_buf_bytes(&field)), SD_OK);
        sd_schema *sch = NULL;
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_schema_parse(sd_buf_bytes(&schema_buf), &sch, &err);
        assert_int_equal(st, levels == 30 ? SD_OK : SD_EPROTO);
        sd_schema_destroy(sch);
        sd_buf_deinit(&type);
        sd_buf_deinit(&tmp);
        sd_buf_deinit(&field);
        sd_buf_deinit(&schema_buf);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Logical types with their own wire form, and state-backed iterables read through state      */
/* ------------------------------------------------------------------------------------------ */

static void test_decimal_text(void **state)
{
    (void)state;

    /* Both directions: the wire form (scale, unscaled) prints as text and parses back. */
    static const struct {
        const char *name;
        int32_t scale;
        const char *unscaled;
        const char *text;
    } rows[] = {
        { "zero", 1, "00", "0.0" },
        { "zero, scale 0", 0, "00", "0" },
        { "one", 1, "0a", "1.0" },
        { "pi", 4, "7a b7", "3.1415" },
        { "negative", 3, "fe 78 e5", "-100.123" },
        { "127", 0, "7f", "127" },
        { "128 needs a sign byte", 0, "00 80", "128" },
        { "-128", 0, "80", "-128" },
        { "-129", 0, "ff 7f", "-129" },
        { "10^9 (one chunk)", 0, "3b 9a ca 00", "1000000000" },
        { "10^18", 0, "0d e0 b6 b3 a7 64 00 00", "1000000000000000000" },
        { "2^64", 0, "01 00 00 00 00 00 00 00 00", "18446744073709551616" },
        { "-2^64", 0, "ff 00 00 00 00 00 00 00 00", "-18446744073709551616" },
        { "negative scale", -2, "05", "5E+2" },
        { "zero, negative scale", -2, "00", "0E+2" },
        { "exponent keeps the digits", -3, "7b", "1.23E+5" },
        { "smallest plain", 6, "01", "0.000001" },
        { "too small for plain", 7, "01", "1E-7" },
        { "plain with leading zeros", 8, "30 39", "0.00012345" },
        { "long and small (Python's str)", 29, "fd 62 bd 49 b1 89 8e bd bb 35",
          "-1.2345678901234567890123E-7" },
        { "large scale", 30, "0c", "1.2E-29" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t want[32];
        size_t n = hex(rows[i].unscaled, want, sizeof(want));
        sd_buf text = { 0 }, unscaled = { 0 };
        assert_int_equal(sd__coder_decimal_format(rows[i].scale, sd_bytes_make(want, n), &text),
                         SD_OK);
        if (text.len != strlen(rows[i].text) || memcmp(text.data, rows[i].text, text.len) != 0) {
            fail_msg("%s: formatted as %.*s", rows[i].name, (int)text.len, (char *)text.data);
        }
        int32_t scale = 0;
        sd_err err;
        sd_err_clear(&err);
        assert_int_equal(sd__coder_decimal_parse(sd_bytes_make(rows[i].text, strlen(rows[i].text)),
                                                 &scale, &unscaled, &err),
                         SD_OK);
        if (scale != rows[i].scale || unscaled.len != n || memcmp(unscaled.data, want, n) != 0) {
            fail_msg("%s: parsed to scale %d and %zu bytes", rows[i].name, (int)scale,
                     unscaled.len);
        }
        sd_buf_deinit(&text);
        sd_buf_deinit(&unscaled);
    }

    /* Other spellings parse to the canonical wire form. */
    static const struct {
        const char *text;
        int32_t scale;
        const char *unscaled;
    } spellings[] = {
        { "+1.5", 1, "0f" },  { "1.5e1", 0, "0f" }, { "15E-1", 1, "0f" }, { "-0.0", 1, "00" },
        { "00012", 0, "0c" }, { ".5", 1, "05" },    { "5.", 0, "05" },    { "-0", 0, "00" },
    };

    for (size_t i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
        uint8_t want[8];
        size_t n = hex(spellings[i].unscaled, want, sizeof(want));
        sd_buf unscaled = { 0 };
        int32_t scale = 0;
        assert_int_equal(
            sd__coder_decimal_parse(sd_bytes_make(spellings[i].text, strlen(spellings[i].text)),
                                    &scale, &unscaled, NULL),
            SD_OK);
        if (scale != spellings[i].scale || unscaled.len != n ||
            memcmp(unscaled.data, want, n) != 0) {
            fail_msg("\"%s\": scale %d, %zu bytes", spellings[i].text, (int)scale, unscaled.len);
        }
        sd_buf_deinit(&unscaled);
    }

    /* Not decimals. */
    static const char *const bad[] = { "",    "-",   ".",    "1.2.3", "1e",     "1e+",
                                       "NaN", "Inf", " 1",   "1 ",    "0x10",   "1e99999999999",
                                       "--1", "1,5", "1e5.", "e5",    "1.5e-x", "1e2147483649" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sd_buf unscaled = { 0 };
        int32_t scale = 0;
        sd_err err;
        sd_err_clear(&err);
        sd_status st =
            sd__coder_decimal_parse(sd_bytes_make(bad[i], strlen(bad[i])), &scale, &unscaled, &err);
        if (st != SD_EINVAL) {
            fail_msg("\"%s\" gave %s", bad[i], sd_status_name(st));
        }
        assert_true(contains(sd_err_msg(&err), "decimal"));
        sd_buf_deinit(&unscaled);
    }

    /* Non-minimal and empty unscaled bytes still read; the size limit holds both ways. */
    sd_buf text = { 0 };
    assert_int_equal(sd__coder_decimal_format(0, sd_bytes_make("\x00\x00\x05", 3), &text), SD_OK);
    assert_int_equal(text.len, 1);
    assert_int_equal(text.data[0], '5');
    sd_buf_reset(&text);
    assert_int_equal(sd__coder_decimal_format(2, SD_BYTES_NULL, &text), SD_OK);
    assert_int_equal(text.len, 4);
    assert_memory_equal(text.data, "0.00", 4);
    sd_buf_deinit(&text);
    uint8_t *huge = sd_calloc(SD_CODER_MAX_DECIMAL_BYTES + 1, 1);
    assert_non_null(huge);
    huge[0] = 0x7f;
    assert_int_equal(
        sd__coder_decimal_format(0, sd_bytes_make(huge, SD_CODER_MAX_DECIMAL_BYTES), &text), SD_OK);
    /* The largest allowed value has about 8192 * 2.408 digits; it parses back to itself. */
    assert_true(text.len > 19700 && text.len < 19740);
    sd_buf back = { 0 };
    int32_t scale = 0;
    assert_int_equal(sd__coder_decimal_parse(sd_buf_bytes(&text), &scale, &back, NULL), SD_OK);
    assert_int_equal(back.len, SD_CODER_MAX_DECIMAL_BYTES);
    assert_memory_equal(back.data, huge, SD_CODER_MAX_DECIMAL_BYTES);
    assert_int_equal(sd_buf_append_byte(&text, '0'), SD_OK);
    sd_buf_reset(&back);
    assert_int_equal(sd__coder_decimal_parse(sd_buf_bytes(&text), &scale, &back, NULL), SD_ETOOBIG);
    sd_buf_deinit(&text);
    sd_buf_deinit(&back);
    assert_int_equal(
        sd__coder_decimal_format(0, sd_bytes_make(huge, SD_CODER_MAX_DECIMAL_BYTES + 1), &text),
        SD_ETOOBIG);
    sd_free(huge);
}

/* Row schema {t: millis_instant (INT64), d: nullable decimal (BYTES)}, from Beam's schema_pb2. */
#define LOGICAL_SCHEMA_HEX                                                                       \
    "0a 30 0a 01 74 1a 2b 3a 29 0a 23 62 65 61 6d 3a 6c 6f 67 69 63 61 6c 5f 74 79 70 65 3a 6d " \
    "69 6c 6c 69 73 5f 69 6e 73 74 61 6e 74 3a 76 31 1a 02 10 04 0a 2b 0a 01 64 1a 26 08 01 3a " \
    "22 0a 1c 62 65 61 6d 3a 6c 6f 67 69 63 61 6c 5f 74 79 70 65 3a 64 65 63 69 6d 61 6c 3a 76 " \
    "31 1a 02 10 09"

/* Python's encoding of {t: 1597328054123, d: -1.2345678901234567890123E-7}. */
#define LOGICAL_ROW_HEX "02 00 80 00 01 73 e8 2b d7 6b 1d 0a fd 62 bd 49 b1 89 8e bd bb 35"

/* Decode, skip and encode rows with both logical types (coder c of LOGICAL_SCHEMA_HEX). */
static void logical_roundtrips(const sd_coder *c)
{
    /*
     * Rows as Python's RowCoder writes them, and what we write back. Python writes a negative
     * scale as a 64-bit varint; Java's BigDecimalCoder (and we) write a 32-bit one.
     */
    static const struct {
        const char *name;
        int64_t millis;
        const char *decimal; /* NULL: a null field */
        const char *python;
        const char *ours; /* NULL: same as python */
    } rows[] = {
        { "before the epoch, negative scale", -5, "5E+2",
          "02 00 7f ff ff ff ff ff ff fb fe ff ff ff ff ff ff ff ff 01 01 05",
          "02 00 7f ff ff ff ff ff ff fb fe ff ff ff 0f 01 05" },
        { "2020, long decimal", 1597328054123, "-1.2345678901234567890123E-7", LOGICAL_ROW_HEX,
          NULL },
        { "epoch, null decimal", 0, NULL, "02 01 02 80 00 00 00 00 00 00 00", NULL },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t py[64], ours[64];
        size_t npy = hex(rows[i].python, py, sizeof(py));
        size_t nours = rows[i].ours ? hex(rows[i].ours, ours, sizeof(ours)) : npy;
        if (rows[i].ours == NULL) {
            memcpy(ours, py, npy);
        }
        sd_value *want = sd_value_row();
        assert_int_equal(sd_value_push(want, sd_value_int(rows[i].millis)), SD_OK);
        assert_int_equal(
            sd_value_push(want, rows[i].decimal
                                    ? sd_value_bytes(rows[i].decimal, strlen(rows[i].decimal))
                                    : sd_value_null()),
            SD_OK);
        sd_err err;
        sd_err_clear(&err);
        for (int form = 0; form < 2; form++) {
            sd_bytes b = form == 0 ? sd_bytes_make(py, npy) : sd_bytes_make(ours, nours);
            sd_reader r = sd_reader_make(b);
            sd_value *got = NULL;
            assert_int_equal(sd_coder_decode(c, &r, true, &got, &err), SD_OK);
            assert_true(sd_reader_done(&r));
            if (!sd_value_equal(got, want)) {
                fail_msg("%s: decoded value differs", rows[i].name);
            }
            sd_value_destroy(got);
            r = sd_reader_make(b);
            assert_int_equal(sd_coder_skip(c, &r, true, &err), SD_OK);
            assert_true(sd_reader_done(&r));
        }
        sd_buf out = { 0 };
        assert_int_equal(sd_coder_encode(c, want, true, &out, &err), SD_OK);
        if (out.len != nours || memcmp(out.data, ours, nours) != 0) {
            fail_msg("%s: unexpected encoding", rows[i].name);
        }
        sd_buf_deinit(&out);
        sd_value_destroy(want);
    }
}

/* Encoding: a STRING decimal, wrong kinds and bad text. */
static void logical_encode_errors(const sd_coder *c)
{
    /* A STRING decimal encodes too; wrong kinds and bad text are SD_EINVAL. */
    static const struct {
        const char *name;
        sd_value *t, *d;
        sd_status want;
    } enc[] = {
        { "string decimal", NULL, NULL, SD_OK },
        { "millis as a string", NULL, NULL, SD_EINVAL },
        { "decimal as an int", NULL, NULL, SD_EINVAL },
        { "decimal text", NULL, NULL, SD_EINVAL },
    };

    for (size_t i = 0; i < sizeof(enc) / sizeof(enc[0]); i++) {
        sd_value *row = sd_value_row();
        sd_value *t = i == 1 ? sd_value_string("1", 1) : sd_value_int(1);
        sd_value *d = i == 2   ? sd_value_int(1)
                      : i == 3 ? sd_value_bytes("1.5x", 4)
                               : sd_value_string("-1.50", 5);
        assert_int_equal(sd_value_push(row, t), SD_OK);
        assert_int_equal(sd_value_push(row, d), SD_OK);
        sd_buf out = { 0 };
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_coder_encode(c, row, true, &out, &err);
        if (st != enc[i].want) {
            fail_msg("%s: %s (%s)", enc[i].name, sd_status_name(st), sd_err_msg(&err));
        }
        if (i == 0) {
            uint8_t want[32];
            size_t n = hex("02 00 80 00 00 00 00 00 00 01 02 02 ff 6a", want, sizeof(want));
            assert_int_equal(out.len, n);
            assert_memory_equal(out.data, want, n);
        } else {
            assert_true(contains(sd_err_msg(&err), "field \""));
        }
        sd_buf_deinit(&out);
        sd_value_destroy(row);
    }
}

/* Decoding and skipping bad wire data. */
static void logical_bad_wire(const sd_coder *c)
{
    /* Bad wire data: truncated instant, scale beyond 32 bits, decimal beyond the limit. */
    static const char *const garbage[] = {
        "02 00 80 00 00",
        "02 00 80 00 00 00 00 00 00 00 80 80 80 80 10 01 00",
        "02 00 80 00 00 00 00 00 00 00 01",
    };
    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
        uint8_t b[64];
        size_t n = hex(garbage[i], b, sizeof(b));
        sd_reader r = sd_reader_make(sd_bytes_make(b, n));
        sd_value *v = NULL;
        assert_int_equal(sd_coder_decode(c, &r, true, &v, NULL), SD_EPROTO);
        assert_null(v);
        /* Skipping finds boundaries without checking values, so only truncation fails it. */
        r = sd_reader_make(sd_bytes_make(b, n));
        assert_int_equal(sd_coder_skip(c, &r, true, NULL), i == 1 ? SD_OK : SD_EPROTO);
    }
    sd_buf big = { 0 };
    assert_int_equal(sd_buf_append(&big, "\x02\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00", 11),
                     SD_OK);
    assert_int_equal(sd_buf_put_varint(&big, SD_CODER_MAX_DECIMAL_BYTES + 1), SD_OK);
    for (int k = 0; k <= SD_CODER_MAX_DECIMAL_BYTES; k++) {
        assert_int_equal(sd_buf_append_byte(&big, 0x11), SD_OK);
    }
    sd_reader r = sd_reader_make(sd_buf_bytes(&big));
    sd_value *v = NULL;
    assert_int_equal(sd_coder_decode(c, &r, true, &v, NULL), SD_ETOOBIG);
    r = sd_reader_make(sd_buf_bytes(&big));
    assert_int_equal(sd_coder_skip(c, &r, true, NULL), SD_OK);
    sd_buf_deinit(&big);
}

/* The OOM loop over a decode and an encode with a decimal. */
static void logical_oom(const sd_coder *c)
{
    uint8_t b[64];
    size_t n = hex(LOGICAL_ROW_HEX, b, sizeof(b));
    int k;
    for (k = 1; k < 1000; k++) {
        sd_reader rr = sd_reader_make(sd_bytes_make(b, n));
        sd_value *got = NULL;
        sd_buf out = { 0 };
        sd_alloc_fail_after(k, 1);
        sd_status st = sd_coder_decode(c, &rr, true, &got, NULL);
        if (st == SD_OK) {
            st = sd_coder_encode(c, got, true, &out, NULL);
        }
        sd_alloc_fail_after(0, 0);
        sd_value_destroy(got);
        sd_buf_deinit(&out);
        if (st == SD_OK) {
            break;
        }
        assert_int_equal(st, SD_ENOMEM);
    }
    assert_true(k > 1 && k < 1000);
}

static void test_row_logical_types(void **state)
{
    (void)state;
    sd_coder *c = row_coder(LOGICAL_SCHEMA_HEX, SD_OK);
    assert_null(sd__coder_check(c));
    assert_int_equal(c->schema->fields[0].type->logical, SD_LOGICAL_MILLIS_INSTANT);
    assert_int_equal(c->schema->fields[1].type->logical, SD_LOGICAL_DECIMAL);
    logical_roundtrips(c);
    logical_encode_errors(c);
    logical_bad_wire(c);
    logical_oom(c);
    sd_coder_destroy(c);

    /* millis_instant and decimal must have their Beam representations. */
    const char *wrong_repr = "0a 30 0a 01 74 1a 2b 3a 29 0a 23 62 65 61 6d 3a 6c 6f 67 69 63 61 6c "
                             "5f 74 79 70 65 3a 6d 69 6c 6c 69 73 5f 69 6e 73 74 61 6e 74 3a 76 "
                             "31 1a 02 10 07";
    assert_null(row_coder(wrong_repr, SD_EPROTO));
}

/*
 * A logical type without a representation (Python's pythonsdk_any, for a field typed Any,
 * written by its pickling coder): the schema parses, a null value reads, a present one is a
 * clear error naming the URN for decode, skip and encode alike (the planner length-prefixes
 * rows, so the runner never reads inside one).
 */
static void test_row_opaque_logical_type(void **state)
{
    (void)state;
    /* {a: nullable logical beam:logical:pythonsdk_any:v1, no representation} */
    sd_coder *c = row_coder("0a 28 0a 01 61 1a 23 08 01 3a 1f 0a 1d 62 65 61 6d 3a 6c 6f 67 69 "
                            "63 61 6c 3a 70 79 74 68 6f 6e 73 64 6b 5f 61 6e 79 3a 76 31",
                            SD_OK);
    assert_int_equal(c->schema->fields[0].type->logical, SD_LOGICAL_OPAQUE);
    uint8_t null_row[] = { 0x01, 0x01, 0x01 }, present[] = { 0x01, 0x00, 0x05 };
    sd_err err;
    sd_err_clear(&err);
    sd_reader r = sd_reader_make(sd_bytes_make(null_row, sizeof(null_row)));
    sd_value *v = NULL;
    assert_int_equal(sd_coder_decode(c, &r, true, &v, &err), SD_OK);
    assert_true(sd_reader_done(&r));
    sd_buf out = { 0 };
    assert_int_equal(sd_coder_encode(c, v, true, &out, &err), SD_OK);
    assert_memory_equal(out.data, null_row, sizeof(null_row));
    sd_buf_deinit(&out);
    sd_value_destroy(v);
    v = NULL;

    r = sd_reader_make(sd_bytes_make(present, sizeof(present)));
    assert_int_equal(sd_coder_decode(c, &r, true, &v, &err), SD_EUNIMPL);
    assert_non_null(strstr(sd_err_msg(&err), "beam:logical:pythonsdk_any:v1"));
    assert_null(v);
    sd_err_clear(&err);
    r = sd_reader_make(sd_bytes_make(present, sizeof(present)));
    assert_int_equal(sd_coder_skip(c, &r, true, &err), SD_EUNIMPL);
    assert_non_null(strstr(sd_err_msg(&err), "has no representation"));
    sd_coder_destroy(c);
}

/* The state behind the token "t": the varints 10 and 11. */
static sd_status read_t(void *ctx, sd_bytes token, sd_buf *out, sd_err *err)
{
    int *calls = ctx;
    (*calls)++;
    if (token.len == 1 && token.ptr[0] == 't') {
        return sd_buf_append(out, "\x0a\x0b", 2);
    }
    if (token.len == 1 && token.ptr[0] == 'g') {
        return sd_buf_append(out, "\x80", 1); /* a truncated varint */
    }
    return sd_err_set(err, SD_ENOTFOUND, "no state for the token");
}

static void test_state_backed_read(void **state)
{
    (void)state;
    sd_coder *c = mk("sbi(varint)");
    /* [5], then the token "t"; and the same with token "x" (unknown) and "g" (bad state). */
    uint8_t with_t[] = { 0xff, 0xff, 0xff, 0xff, 0x01, 0x05, 0xff, 0xff, 0xff,
                         0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 't' };
    int calls = 0;
    sd_decode_opts opts = { .state_read = read_t, .state_ctx = &calls };
    sd_err err;
    sd_err_clear(&err);

    /* Without a state reader the token stays in the value. */
    sd_reader r = sd_reader_make(sd_bytes_make(with_t, sizeof(with_t)));
    sd_value *v = NULL;
    assert_int_equal(sd_coder_decode_with(c, &r, true, NULL, &v, &err), SD_OK);
    assert_true(v->has_token);
    assert_int_equal(v->n_items, 1);
    assert_int_equal(v->len, 1);
    sd_value_destroy(v);

    /* With one, the list holds every element and no token. */
    r = sd_reader_make(sd_bytes_make(with_t, sizeof(with_t)));
    assert_int_equal(sd_coder_decode_with(c, &r, true, &opts, &v, &err), SD_OK);
    assert_true(sd_reader_done(&r));
    assert_int_equal(calls, 1);
    assert_false(v->has_token);
    assert_int_equal(v->n_items, 3);
    assert_int_equal(v->items[0]->i, 5);
    assert_int_equal(v->items[1]->i, 10);
    assert_int_equal(v->items[2]->i, 11);
    sd_value_destroy(v);

    /* The reader's errors and unparsable state fail the decode and leave r alone. */
    static const struct {
        char token;
        sd_status want;
    } fails[] = { { 'x', SD_ENOTFOUND }, { 'g', SD_EPROTO } };

    for (size_t i = 0; i < sizeof(fails) / sizeof(fails[0]); i++) {
        with_t[sizeof(with_t) - 1] = (uint8_t)fails[i].token;
        r = sd_reader_make(sd_bytes_make(with_t, sizeof(with_t)));
        sd_err_clear(&err);
        assert_int_equal(sd_coder_decode_with(c, &r, true, &opts, &v, &err), fails[i].want);
        assert_null(v);
        assert_ptr_equal(r.p, with_t);
    }
    with_t[sizeof(with_t) - 1] = 't';

    /* OOM loop with the reader. */
    int k;
    for (k = 1; k < 1000; k++) {
        r = sd_reader_make(sd_bytes_make(with_t, sizeof(with_t)));
        sd_alloc_fail_after(k, 1);
        sd_status st = sd_coder_decode_with(c, &r, true, &opts, &v, NULL);
        sd_alloc_fail_after(0, 0);
        if (st == SD_OK) {
            assert_int_equal(v->n_items, 3);
            sd_value_destroy(v);
            break;
        }
        assert_int_equal(st, SD_ENOMEM);
        assert_null(v);
    }
    assert_true(k > 1 && k < 1000);
    sd_coder_destroy(c);

    /* Elements of zero size cannot be counted in a state stream (the reader gives "\x0a"). */
    sd_coder *gw = mk("sbi(gw)");
    uint8_t gw_t[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                       0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 't' };
    r = sd_reader_make(sd_bytes_make(gw_t, sizeof(gw_t)));
    sd_err_clear(&err);
    assert_int_equal(sd_coder_decode_with(gw, &r, true, &opts, &v, &err), SD_EPROTO);
    assert_true(contains(sd_err_msg(&err), "zero encoded size"));
    sd_coder_destroy(gw);
}

static void test_decode_oom(void **state)
{
    (void)state;

    static const struct {
        const char *spec;
        const char *bytes;
    } rows[] = {
        { "wv(kv(str,iter(varint)),iw)",
          "80 00 00 00 00 00 00 05 00 00 00 01 80 00 00 00 00 00 00 0a 0a 0f 01 6b 00 00 00 02 "
          "01 02" },
        { "timer(str,gw)", "03 6b 65 79 03 74 61 67 00 00 00 01 00 80 00 00 00 00 00 04 d2 80 00 "
                           "00 00 00 00 16 2e 0f" },
        { "sbi(bytes)", "ff ff ff ff 01 01 61 ff ff ff ff ff ff ff ff ff 01 02 74 74" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t buf[128];
        size_t len = hex(rows[i].bytes, buf, sizeof(buf));
        sd_coder *c = mk(rows[i].spec);
        int n;
        for (n = 1; n < 1000; n++) {
            sd_reader r = sd_reader_make(sd_bytes_make(buf, len));
            sd_value *v = NULL;
            sd_alloc_fail_after(n, 1);
            sd_status st = sd_coder_decode(c, &r, true, &v, NULL);
            sd_alloc_fail_after(0, 0);
            if (st == SD_OK) {
                assert_true(sd_reader_done(&r));
                sd_value_destroy(v);
                break;
            }
            assert_int_equal(st, SD_ENOMEM);
            assert_null(v);
            assert_ptr_equal(r.p, buf);
        }
        assert_true(n > 1 && n < 1000);
        sd_coder_destroy(c);
    }
    /* Row decoding too, from the vectors' schema. */
    uint8_t payload[128];
    size_t pn = hex(ROW_SCHEMA_HEX, payload, sizeof(payload));
    uint8_t data[64];
    size_t dn = hex("04 00 03 66 6f 6f a9 46 3f b9 99 99 99 99 99 9a 00 00 00 02 01 61 01 62", data,
                    sizeof(data));
    for (int n = 1; n < 1000; n++) {
        sd_coder *c = NULL;
        sd_value *v = NULL;
        sd_alloc_fail_after(n, 1);
        sd_status st = sd_coder_from_urn(ROW, sd_bytes_make(payload, pn), NULL, 0, &c, NULL);
        if (st == SD_OK) {
            sd_reader r = sd_reader_make(sd_bytes_make(data, dn));
            st = sd_coder_decode(c, &r, true, &v, NULL);
        }
        sd_alloc_fail_after(0, 0);
        sd_value_destroy(v);
        sd_coder_destroy(c);
        if (st == SD_OK) {
            break;
        }
        assert_int_equal(st, SD_ENOMEM);
    }
}

int test_coder_run_values(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_row_schema_evolution),
        cmocka_unit_test(test_decode_oom),
        cmocka_unit_test(test_decimal_text),
        cmocka_unit_test(test_row_logical_types),
        cmocka_unit_test(test_row_opaque_logical_type),
        cmocka_unit_test(test_state_backed_read),
    };
    return cmocka_run_group_tests_name("coder_values", tests, NULL, NULL);
}
