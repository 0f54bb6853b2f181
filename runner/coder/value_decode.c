/*
 * Sundial: full decoding of every standard coder into sd_value trees (value.c).
 *
 * Decoding copies bytes out of the input, so a value never borrows from a buffer that may die.
 * Every read is bounds-checked through sd_reader; list counts are checked against the bytes
 * left (each element takes at least one byte unless its encoding is empty, in which case the
 * count is capped at SD_CODER_MAX_EMPTY_ITEMS) so garbage cannot make us allocate gigabytes.
 * On error the public entry points restore the reader and return no value.
 *
 * Rows follow the schema in the coder payload (schema.c): varint(field count), the null
 * bitmap as nested bytes, then each non-null field in encoding order. Atomic field encodings
 * follow the Java SDK's choices: BYTE one byte, INT16 two bytes big-endian, INT32 and INT64
 * varints (INT32 negatives written as 32-bit varints, and read back from either width), FLOAT
 * four bytes, DOUBLE eight, STRING/BYTES length-prefixed, BOOLEAN one byte. Nullable elements
 * of arrays and nullable map keys/values carry the nullable coder's 00/01 prefix; top-level
 * nullable fields use the bitmap instead. Logical types are written as their representation,
 * except millis_instant (an 8-byte sign-flipped timestamp, as Java's InstantCoder writes it)
 * and decimal (varint scale + unscaled two's complement bytes, Java's BigDecimalCoder), whose
 * text form lives in decimal.c. value_encode.c writes the same formats.
 *
 * A state-backed iterable that ends in a continuation token decodes, by default, to the
 * elements before the token plus the token itself: the coder layer has no state API. A caller
 * that has one passes sd_decode_opts.state_read and gets the whole iterable instead.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/coder/coder_int.h"
#include "runner/coder/schema.h"
#include "runner/coder/value.h"

static sd_status oom(sd_err *err, const sd_coder *c)
{
    return sd__coder_fail(err, c, SD_ENOMEM, "out of memory while decoding");
}

static sd_status short_input(sd_err *err, const sd_coder *c, const char *what)
{
    return sd__coder_fail(err, c, SD_EPROTO, "truncated input: expected %s", what);
}

/* Reject a count that cannot fit in what is left of the input. */
static sd_status
check_count(const sd_coder *c, uint64_t n, long elem_fixed, size_t left, sd_err *err)
{
    if (elem_fixed == 0) {
        if (n > SD_CODER_MAX_EMPTY_ITEMS) {
            return sd__coder_fail(err, c, SD_ETOOBIG, "%llu empty elements (limit %d)",
                                  (unsigned long long)n, SD_CODER_MAX_EMPTY_ITEMS);
        }
        return SD_OK;
    }
    if (n > left) {
        return sd__coder_fail(err, c, SD_EPROTO, "claims %llu elements but only %zu bytes are left",
                              (unsigned long long)n, left);
    }
    return SD_OK;
}

static sd_status decode(const sd_decode_opts *o,
                        const sd_coder *c,
                        sd_reader *r,
                        bool nested,
                        sd_value **out,
                        sd_err *err);

/*
 * A state-backed iterable ended in a continuation token and the caller can read state: fetch
 * the remaining elements (a stream of nested encodings, as the StateGetResponse chunks for
 * StateKey.runner{key = token} would carry them joined) and append them to list. An element
 * that takes no bytes cannot be counted in such a stream, so one is refused there.
 */
static sd_status read_state_suffix(const sd_decode_opts *o,
                                   const sd_coder *c,
                                   sd_bytes token,
                                   sd_value *list,
                                   sd_err *err)
{
    const sd_coder *elem = c->components[0];
    sd_buf stream = { 0 };
    sd_status st = o->state_read(o->state_ctx, token, &stream, err);
    if (st != SD_OK) {
        sd_buf_deinit(&stream);
        return st;
    }
    sd_reader sr = sd_reader_make(sd_buf_bytes(&stream));
    while (st == SD_OK && !sd_reader_done(&sr)) {
        const uint8_t *before = sr.p;
        sd_value *item = NULL;
        if ((st = decode(o, elem, &sr, true, &item, err)) != SD_OK) {
            sd_err_prefix(err, "state for continuation token: ");
        } else if (sd__coder_value_add_item(list, item) != SD_OK) {
            st = oom(err, c);
        } else if (sr.p == before) {
            st = sd__coder_fail(err, c, SD_EPROTO,
                                "elements of zero encoded size in a state stream");
        }
    }
    sd_buf_deinit(&stream);
    return st;
}

static sd_status
decode_list(const sd_decode_opts *o, const sd_coder *c, sd_reader *r, sd_value **out, sd_err *err)
{
    const sd_coder *elem = c->components[0];
    int64_t count;
    bool unknown;
    sd_status st = sd__coder_iterable_count(c, r, &count, &unknown, err);
    if (st != SD_OK) {
        return st;
    }
    sd_value *list = sd_value_list();
    if (list == NULL) {
        return oom(err, c);
    }
    long fixed = sd__coder_fixed_size(elem);
    for (;;) {
        uint64_t n = (uint64_t)count;
        if (unknown) {
            if (sd_reader_varint(r, &n) != SD_OK) {
                st = short_input(err, c, "an iterable block size (varint)");
                break;
            }
            if (n == 0) {
                break;
            }
            if (n == UINT64_MAX) {
                sd_bytes token;
                if (c->kind != SD_CODER_STATE_BACKED_ITERABLE) {
                    st = sd__coder_fail(err, c, SD_EPROTO,
                                        "block size -1 (a state token) in a plain iterable");
                } else if (sd_reader_lp(r, &token) != SD_OK) {
                    st = short_input(err, c, "a state continuation token");
                } else if (o->state_read != NULL) {
                    st = read_state_suffix(o, c, token, list, err);
                } else if (sd__coder_value_set_bytes(list, token.ptr, token.len) != SD_OK) {
                    st = oom(err, c);
                } else {
                    list->has_token = true;
                }
                break;
            }
        }
        if ((st = check_count(c, n + list->n_items, fixed, sd_reader_left(r) + list->n_items,
                              err)) != SD_OK) {
            break;
        }
        for (uint64_t i = 0; i < n && st == SD_OK; i++) {
            sd_value *item = NULL;
            st = decode(o, elem, r, true, &item, err);
            if (st == SD_OK && sd__coder_value_add_item(list, item) != SD_OK) {
                st = oom(err, c);
            }
        }
        if (st != SD_OK || !unknown) {
            break;
        }
    }
    if (st != SD_OK) {
        sd_value_destroy(list);
        return st;
    }
    *out = list;
    return SD_OK;
}

static sd_status windows_value(const sd_coder *c, const sd_windows *ws, sd_value **out, sd_err *err)
{
    sd_value *list = sd_value_list();
    if (list == NULL) {
        return oom(err, c);
    }
    const sd_window *items = sd_windows_items(ws);
    for (size_t i = 0; i < ws->n; i++) {
        if (sd__coder_value_add_item(list, sd_value_window(&items[i])) != SD_OK) {
            sd_value_destroy(list);
            return oom(err, c);
        }
    }
    *out = list;
    return SD_OK;
}

/* Field values of rows ------------------------------------------------------------------- */

/*
 * A decimal field: varint(scale), then the unscaled value as nested bytes. The scale is read
 * from a 32-bit varint (Java) or a sign-extended 64-bit one (Python), as INT32 fields are.
 * The value is BYTES holding the number's text (decimal.c).
 */
static sd_status decode_decimal(const sd_coder *c, sd_reader *r, sd_value **out, sd_err *err)
{
    uint64_t u;
    sd_bytes unscaled;
    if (sd_reader_varint(r, &u) != SD_OK) {
        return short_input(err, c, "a decimal scale (varint)");
    }
    if (u > UINT32_MAX && ((int64_t)u < INT32_MIN || (int64_t)u >= 0)) {
        return sd__coder_fail(err, c, SD_EPROTO, "decimal scale %llu out of range",
                              (unsigned long long)u);
    }
    int32_t scale = u <= UINT32_MAX ? (int32_t)(uint32_t)u : (int32_t)(int64_t)u;
    if (sd_reader_lp(r, &unscaled) != SD_OK) {
        return short_input(err, c, "a decimal's unscaled value (varint length + bytes)");
    }
    sd_buf text = { 0 };
    sd_status st = sd__coder_decimal_format(scale, unscaled, &text);
    if (st == SD_ETOOBIG) {
        st = sd__coder_fail(err, c, SD_ETOOBIG, "decimal of %zu bytes (limit %d)", unscaled.len,
                            SD_CODER_MAX_DECIMAL_BYTES);
    } else if (st != SD_OK) {
        st = oom(err, c);
    } else if ((*out = sd_value_bytes(text.data, text.len)) == NULL) {
        st = oom(err, c);
    }
    sd_buf_deinit(&text);
    return st;
}

static sd_status decode_row(const sd_coder *c,
                            const sd_schema *s,
                            sd_reader *r,
                            int depth,
                            sd_value **out,
                            sd_err *err);
static sd_status decode_field(const sd_coder *c,
                              const sd_field_type *t,
                              sd_reader *r,
                              bool wrapped_nullable,
                              int depth,
                              sd_value **out,
                              sd_err *err);

/*
 * One atomic field (Java's encodings: see the file comment). OUT: v (NULL when out of memory:
 * the caller reports it).
 */
static sd_status decode_atomic_field(const sd_coder *c,
                                     const sd_field_type *t,
                                     sd_reader *r,
                                     sd_value **v,
                                     sd_err *err)
{
    uint8_t b;
    uint64_t u;
    sd_bytes bytes;
    *v = NULL;
    switch (t->atomic) {
    case SD_ATOMIC_BYTE:
        if (sd_reader_byte(r, &b) != SD_OK) {
            return short_input(err, c, "a 1-byte field");
        }
        *v = sd_value_int((int8_t)b);
        break;
    case SD_ATOMIC_INT16:
        if (sd_reader_take(r, 2, &bytes) != SD_OK) {
            return short_input(err, c, "a 2-byte int16 field");
        }
        *v = sd_value_int((int16_t)(uint16_t)((bytes.ptr[0] << 8) | bytes.ptr[1]));
        break;
    case SD_ATOMIC_INT32:
        if (sd_reader_varint(r, &u) != SD_OK) {
            return short_input(err, c, "an int32 field (varint)");
        }
        if (u <= UINT32_MAX) {
            *v = sd_value_int((int32_t)(uint32_t)u);
        } else if ((int64_t)u >= INT32_MIN && (int64_t)u < 0) {
            *v = sd_value_int((int64_t)u);
        } else {
            return sd__coder_fail(err, c, SD_EPROTO, "int32 field value %llu out of range",
                                  (unsigned long long)u);
        }
        break;
    case SD_ATOMIC_INT64:
        if (sd_reader_varint(r, &u) != SD_OK) {
            return short_input(err, c, "an int64 field (varint)");
        }
        *v = sd_value_int((int64_t)u);
        break;
    case SD_ATOMIC_FLOAT: {
        uint32_t raw;
        float f;
        if (sd_reader_be32(r, &raw) != SD_OK) {
            return short_input(err, c, "a 4-byte float field");
        }
        memcpy(&f, &raw, sizeof(f));
        *v = sd_value_double((double)f);
        break;
    }
    case SD_ATOMIC_DOUBLE: {
        uint64_t raw;
        double d;
        if (sd_reader_be64(r, &raw) != SD_OK) {
            return short_input(err, c, "an 8-byte double field");
        }
        memcpy(&d, &raw, sizeof(d));
        *v = sd_value_double(d);
        break;
    }
    case SD_ATOMIC_STRING:
    case SD_ATOMIC_BYTES:
        if (sd_reader_lp(r, &bytes) != SD_OK) {
            return short_input(err, c, "a string/bytes field (varint length + bytes)");
        }
        *v = sd__coder_value_bytes_of(
            t->atomic == SD_ATOMIC_STRING ? SD_VALUE_STRING : SD_VALUE_BYTES, bytes.ptr, bytes.len);
        break;
    case SD_ATOMIC_BOOLEAN:
        if (sd_reader_byte(r, &b) != SD_OK) {
            return short_input(err, c, "a boolean field");
        }
        if (b > 1) {
            return sd__coder_fail(err, c, SD_EPROTO, "boolean byte %u (expected 0 or 1)", b);
        }
        *v = sd_value_bool(b == 1);
        break;
    default:
        return sd__coder_fail(err, c, SD_EPROTO, "unsupported atomic type %d", (int)t->atomic);
    }
    return SD_OK;
}

/*
 * An array, iterable or map field: a count (or -1 and blocks of counted elements, ended by a
 * zero block, for arrays and iterables), then the elements, each with the nullable prefix.
 */
static sd_status decode_collection_field(const sd_coder *c,
                                         const sd_field_type *t,
                                         sd_reader *r,
                                         int depth,
                                         sd_value **out,
                                         sd_err *err)
{
    sd_status st;
    bool is_map = t->kind == SD_FIELD_MAP;
    int64_t count;
    bool unknown;
    if ((st = sd__coder_iterable_count(c, r, &count, &unknown, err)) != SD_OK) {
        return st;
    }
    if (unknown && is_map) {
        return sd__coder_fail(err, c, SD_EPROTO, "map field with count -1");
    }
    sd_value *v = is_map ? sd_value_map() : sd_value_list();
    if (v == NULL) {
        return oom(err, c);
    }
    for (;;) {
        uint64_t n = (uint64_t)count;
        if (unknown) {
            if (sd_reader_varint(r, &n) != SD_OK) {
                sd_value_destroy(v);
                return short_input(err, c, "an array block size (varint)");
            }
            if (n == 0) {
                break;
            }
        }
        if (n > sd_reader_left(r)) {
            sd_value_destroy(v);
            return sd__coder_fail(err, c, SD_EPROTO,
                                  "row field claims %llu elements but only %zu bytes are "
                                  "left",
                                  (unsigned long long)n, sd_reader_left(r));
        }
        for (uint64_t i = 0; i < n; i++) {
            for (int part = 0; part < (is_map ? 2 : 1); part++) {
                sd_value *item = NULL;
                st = decode_field(c, part == 0 ? t->element : t->value, r, true, depth, &item, err);
                if (st == SD_OK && sd__coder_value_add_item(v, item) != SD_OK) {
                    st = oom(err, c);
                }
                if (st != SD_OK) {
                    sd_value_destroy(v);
                    return st;
                }
            }
        }
        if (!unknown) {
            break;
        }
    }
    *out = v;
    return SD_OK;
}

/* One row field of type t; wrapped_nullable: t's nullability is the 00/01 prefix (see above). */
static sd_status decode_field(const sd_coder *c,
                              const sd_field_type *t,
                              sd_reader *r,
                              bool wrapped_nullable,
                              int depth,
                              sd_value **out,
                              sd_err *err)
{
    uint8_t b;
    sd_status st;
    if (wrapped_nullable && t->nullable) {
        if (sd_reader_byte(r, &b) != SD_OK) {
            return short_input(err, c, "a null indicator byte");
        }
        if (b == 0) {
            *out = sd_value_null();
            return *out ? SD_OK : oom(err, c);
        }
        if (b != 1) {
            return sd__coder_fail(err, c, SD_EPROTO, "null indicator %u (expected 0 or 1)", b);
        }
    }
    sd_value *v = NULL;
    switch (t->kind) {
    case SD_FIELD_ATOMIC:
        if ((st = decode_atomic_field(c, t, r, &v, err)) != SD_OK) {
            return st;
        }
        break;
    case SD_FIELD_ARRAY:
    case SD_FIELD_ITERABLE:
    case SD_FIELD_MAP:
        return decode_collection_field(c, t, r, depth, out, err);
    case SD_FIELD_ROW:
        return decode_row(c, t->row, r, depth + 1, out, err);
    case SD_FIELD_LOGICAL:
        switch (t->logical) {
        case SD_LOGICAL_MILLIS_INSTANT: {
            sd_time ms;
            if (sd_coder_get_ts(r, &ms) != SD_OK) {
                return short_input(err, c, "an 8-byte millis_instant field");
            }
            v = sd_value_int(ms);
            break;
        }
        case SD_LOGICAL_DECIMAL:
            return decode_decimal(c, r, out, err);
        case SD_LOGICAL_OPAQUE:
            return sd__coder_opaque_field(err, c, t);
        case SD_LOGICAL_AS_REPR:
        default:
            return decode_field(c, t->repr, r, false, depth, out, err);
        }
        break;
    default:
        return sd__coder_fail(err, c, SD_EPROTO, "field type without a type");
    }
    if (v == NULL) {
        return oom(err, c);
    }
    *out = v;
    return SD_OK;
}

static sd_status decode_row(const sd_coder *c,
                            const sd_schema *s,
                            sd_reader *r,
                            int depth,
                            sd_value **out,
                            sd_err *err)
{
    uint64_t nvals;
    sd_bytes mask;
    if (depth > 64) {
        return sd__coder_fail(err, c, SD_EPROTO, "rows nested too deeply");
    }
    if (sd_reader_varint(r, &nvals) != SD_OK) {
        return short_input(err, c, "a row field count (varint)");
    }
    if (sd_reader_lp(r, &mask) != SD_OK) {
        return short_input(err, c, "a row null bitmap (varint length + bytes)");
    }
    if (nvals > s->n_fields) {
        return sd__coder_fail(err, c, SD_EPROTO, "row has %llu fields but schema %s has %zu",
                              (unsigned long long)nvals, s->id, s->n_fields);
    }
    sd_value *row = sd_value_row();
    if (row == NULL) {
        return oom(err, c);
    }
    /* Fill every field with null first, then decode the present ones into their slots. */
    sd_status st = SD_OK;
    for (size_t i = 0; i < s->n_fields && st == SD_OK; i++) {
        if (sd__coder_value_add_item(row, sd_value_null()) != SD_OK) {
            st = oom(err, c);
        }
    }
    for (size_t j = 0; j < nvals && st == SD_OK; j++) {
        size_t i = s->order[j];
        if ((i >> 3) < mask.len && (mask.ptr[i >> 3] & (1u << (i & 7))) != 0) {
            continue;
        }
        sd_value *fv = NULL;
        st = decode_field(c, s->fields[i].type, r, false, depth, &fv, err);
        if (st != SD_OK) {
            sd_err_prefix(err, "field \"%s\": ", s->fields[i].name);
            break;
        }
        sd_value_destroy(row->items[i]);
        row->items[i] = fv;
    }
    if (st != SD_OK) {
        sd_value_destroy(row);
        return st;
    }
    *out = row;
    return SD_OK;
}

/* The coder walk ------------------------------------------------------------------------- */

/*
 * A length_prefix value: the inner value decoded from exactly the prefixed bytes (outer
 * context), or the raw bytes when the runner does not know the inner coder.
 */
static sd_status decode_length_prefixed(const sd_decode_opts *o,
                                        const sd_coder *c,
                                        sd_reader *r,
                                        sd_value **out,
                                        sd_err *err)
{
    sd_status st;
    sd_bytes bytes;
    if (sd_reader_lp(r, &bytes) != SD_OK) {
        return short_input(err, c, "a length-prefixed value");
    }
    if (!c->components[0]->known) {
        *out = sd_value_bytes(bytes.ptr, bytes.len);
        return *out != NULL ? SD_OK : oom(err, c);
    }
    sd_reader inner = sd_reader_make(bytes);
    if ((st = decode(o, c->components[0], &inner, false, out, err)) != SD_OK) {
        return st;
    }
    if (!sd_reader_done(&inner)) {
        sd_value_destroy(*out);
        *out = NULL;
        return sd__coder_fail(err, c, SD_EPROTO, "%zu bytes left inside the length prefix",
                              sd_reader_left(&inner));
    }
    return SD_OK;
}

/*
 * A windowed value: the header (timestamp, windows, pane; taken from the coder's payload for
 * param_windowed_value) and the element. OUT: v (NULL when out of memory: the caller reports
 * it).
 */
static sd_status decode_windowed(const sd_decode_opts *o,
                                 const sd_coder *c,
                                 sd_reader *r,
                                 bool nested,
                                 sd_value **v,
                                 sd_err *err)
{
    sd_status st = SD_OK;
    sd_wv_header hdr;
    sd_value *windows = NULL, *elem = NULL;
    sd_wv_header_init(&hdr);
    if (c->kind == SD_CODER_PARAM_WINDOWED_VALUE) {
        hdr.ts = c->param->ts;
        hdr.pane = c->param->pane;
        st =
            sd_windows_set(&hdr.windows, sd_windows_items(&c->param->windows), c->param->windows.n);
        if (st != SD_OK) {
            st = oom(err, c);
        }
    } else {
        if (sd_coder_get_ts(r, &hdr.ts) != SD_OK) {
            st = short_input(err, c, "an 8-byte timestamp");
        } else if ((st = sd__coder_windows_decode(c, c->components[1], r, &hdr.windows, err)) ==
                   SD_OK) {
            sd_err sub;
            sd_bytes metadata; /* read past: see sd__wv_pane_decode */
            sd_err_clear(&sub);
            if (sd__wv_pane_decode(r, &hdr.pane, &metadata, &sub) != SD_OK) {
                st = sd__coder_fail(err, c, SD_EPROTO, "%s", sd_err_msg(&sub));
            }
        }
    }
    if (st == SD_OK) {
        st = windows_value(c, &hdr.windows, &windows, err);
    }
    if (st == SD_OK) {
        st = decode(o, c->components[0], r, nested, &elem, err);
    }
    sd_pane pane = hdr.pane;
    sd_time ts = hdr.ts;
    sd_wv_header_deinit(&hdr);
    if (st != SD_OK) {
        sd_value_destroy(windows);
        return st;
    }
    *v = sd_value_wv(ts, windows, &pane, elem);
    return SD_OK;
}

/* A timer: its key decoded with the key coder, its windows as values. OUT: v (as above). */
static sd_status decode_timer_value(const sd_decode_opts *o,
                                    const sd_coder *c,
                                    sd_reader *r,
                                    sd_value **v,
                                    sd_err *err)
{
    sd_status st;
    sd_timer t;
    sd_value *key = NULL, *windows = NULL;
    sd_timer_init(&t);
    if ((st = sd_timer_decode(c, r, &t, err)) == SD_OK) {
        sd_reader kr = sd_reader_make(t.key);
        st = decode(o, c->components[0], &kr, true, &key, err);
    }
    if (st == SD_OK) {
        st = windows_value(c, &t.windows, &windows, err);
    }
    if (st != SD_OK) {
        sd_value_destroy(key);
        sd_timer_deinit(&t);
        return st;
    }
    *v = sd_value_timer(key, (const char *)t.tag.ptr, t.tag.len, windows, t.clear, t.fire, t.hold,
                        &t.pane);
    sd_timer_deinit(&t);
    return SD_OK;
}

static sd_status decode(const sd_decode_opts *o,
                        const sd_coder *c,
                        sd_reader *r,
                        bool nested,
                        sd_value **out,
                        sd_err *err)
{
    sd_status st;
    sd_bytes bytes;
    uint64_t u;
    uint8_t b;
    sd_value *v = NULL;
    *out = NULL;
    switch (c->kind) {
    case SD_CODER_BYTES:
    case SD_CODER_STRING_UTF8:
        if (nested) {
            if (sd_reader_lp(r, &bytes) != SD_OK) {
                return short_input(err, c, "a length-prefixed value");
            }
        } else {
            bytes = sd_bytes_make(r->p, sd_reader_left(r));
            r->p = r->end;
        }
        v = sd__coder_value_bytes_of(c->kind == SD_CODER_BYTES ? SD_VALUE_BYTES : SD_VALUE_STRING,
                                     bytes.ptr, bytes.len);
        break;
    case SD_CODER_VARINT:
        if (sd_reader_varint(r, &u) != SD_OK) {
            return sd__coder_fail(err, c, SD_EPROTO, "expected a varint of at most 10 bytes");
        }
        v = sd_value_int((int64_t)u);
        break;
    case SD_CODER_DOUBLE: {
        double d;
        if (sd_reader_be64(r, &u) != SD_OK) {
            return short_input(err, c, "8 bytes");
        }
        memcpy(&d, &u, sizeof(d));
        v = sd_value_double(d);
        break;
    }
    case SD_CODER_BOOL:
        if (sd_reader_byte(r, &b) != SD_OK) {
            return short_input(err, c, "1 byte");
        }
        if (b > 1) {
            return sd__coder_fail(err, c, SD_EPROTO, "byte %u (expected 0 or 1)", b);
        }
        v = sd_value_bool(b == 1);
        break;
    case SD_CODER_KV: {
        sd_value *key = NULL, *val = NULL;
        if ((st = decode(o, c->components[0], r, true, &key, err)) != SD_OK) {
            return st;
        }
        if ((st = decode(o, c->components[1], r, nested, &val, err)) != SD_OK) {
            sd_value_destroy(key);
            return st;
        }
        v = sd_value_kv(key, val);
        break;
    }
    case SD_CODER_ITERABLE:
    case SD_CODER_STATE_BACKED_ITERABLE:
        return decode_list(o, c, r, out, err);
    case SD_CODER_NULLABLE:
        if (sd_reader_byte(r, &b) != SD_OK) {
            return short_input(err, c, "a null indicator byte");
        }
        if (b == 0) {
            v = sd_value_null();
            break;
        }
        if (b != 1) {
            return sd__coder_fail(err, c, SD_EPROTO, "null indicator %u (expected 0 or 1)", b);
        }
        return decode(o, c->components[0], r, nested, out, err);
    case SD_CODER_LENGTH_PREFIX:
        return decode_length_prefixed(o, c, r, out, err);
    case SD_CODER_GLOBAL_WINDOW:
    case SD_CODER_INTERVAL_WINDOW:
    case SD_CODER_CUSTOM_WINDOW: {
        sd_window w;
        if ((st = sd_window_decode(c, r, &w, err)) != SD_OK) {
            return st;
        }
        v = sd_value_window(&w);
        break;
    }
    case SD_CODER_WINDOWED_VALUE:
    case SD_CODER_PARAM_WINDOWED_VALUE:
        if ((st = decode_windowed(o, c, r, nested, &v, err)) != SD_OK) {
            return st;
        }
        break;
    case SD_CODER_TIMER:
        if ((st = decode_timer_value(o, c, r, &v, err)) != SD_OK) {
            return st;
        }
        break;
    case SD_CODER_ROW:
        return decode_row(c, c->schema, r, 0, out, err);
    case SD_CODER_SHARDED_KEY: {
        sd_value *key = NULL;
        if (sd_reader_lp(r, &bytes) != SD_OK) {
            return short_input(err, c, "the shard id (varint length + bytes)");
        }
        /* The key is nested in either context (Java and Python both write it so). */
        if ((st = decode(o, c->components[0], r, true, &key, err)) != SD_OK) {
            return st;
        }
        v = sd_value_sharded_key(bytes.ptr, bytes.len, key);
        break;
    }
    case SD_CODER_UNKNOWN:
    default:
        return sd__coder_fail(err, c, SD_EUNIMPL, "cannot decode values of an unknown coder");
    }
    if (v == NULL) {
        return oom(err, c);
    }
    *out = v;
    return SD_OK;
}

sd_status
sd_coder_decode(const sd_coder *coder, sd_reader *r, bool nested, sd_value **out, sd_err *err)
{
    return sd_coder_decode_with(coder, r, nested, NULL, out, err);
}

sd_status sd_coder_decode_with(const sd_coder *coder,
                               sd_reader *r,
                               bool nested,
                               const sd_decode_opts *opts,
                               sd_value **out,
                               sd_err *err)
{
    static const sd_decode_opts no_opts = { 0 };
    const sd_decode_opts *o = opts != NULL ? opts : &no_opts;
    sd_reader save = *r;
    *out = NULL;
    if (coder == NULL) {
        return sd_err_set(err, SD_EINVAL, "sd_coder_decode: NULL coder");
    }
    sd_status st = decode(o, coder, r, nested, out, err);
    if (st != SD_OK) {
        *r = save;
        *out = NULL;
    }
    return st;
}
