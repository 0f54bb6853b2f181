/*
 * Sundial: finding value boundaries without decoding values.
 *
 * The runner's main need from coders is to cut a byte stream into elements: the data plane
 * concatenates nested-context encodings, GroupByKey needs the key bytes of each KV, and state
 * and timers carry keys and windows as encoded bytes. Skipping answers "where does this value
 * end?" with no allocation, and is the base of sd_wv_decode, sd_kv_split, sd_timer_decode and
 * the iterable reader.
 *
 * Context rules (Beam's): bytes and string_utf8 own the rest of the input in the outer
 * context and are varint-length-prefixed when nested. The key of a KV, elements of iterables,
 * the windows, the timer's key and tag, and row fields are always nested; the last part of a
 * composite (KV value, windowed-value element, nullable value, sharded-key key) inherits the
 * composite's context. Everything else is self-delimiting in both contexts.
 *
 * Cost guard: iterable counts are attacker-controlled 32-bit numbers. Elements with a
 * variable size consume at least one byte each, so a count larger than the bytes left is
 * rejected before looping; elements of a fixed size (a global window is zero bytes) are
 * skipped arithmetically in O(1), so a four-byte input can never make us loop 2^31 times.
 */
#include <string.h>

#include "runner/coder/coder.h"
#include "runner/coder/coder_int.h"
#include "runner/coder/schema.h"

/* ------------------------------------------------------------------------------------------ */
/* Building blocks                                                                            */
/* ------------------------------------------------------------------------------------------ */

sd_status sd_coder_put_ts(sd_buf *out, sd_time t)
{
    return sd_buf_put_be64(out, sd_time_encode(t));
}

sd_status sd_coder_get_ts(sd_reader *r, sd_time *t)
{
    uint64_t raw;
    sd_status st = sd_reader_be64(r, &raw);
    if (st == SD_OK) {
        *t = sd_time_decode(raw);
    }
    return st;
}

static sd_status truncated(sd_err *err, const sd_coder *c, const char *what)
{
    return sd__coder_fail(err, c, SD_EPROTO, "truncated input: expected %s", what);
}

static sd_status skip_n(const sd_coder *c, sd_reader *r, size_t n, const char *what, sd_err *err)
{
    if (sd_reader_left(r) < n) {
        return truncated(err, c, what);
    }
    r->p += n;
    return SD_OK;
}

static sd_status skip_varint(const sd_coder *c, sd_reader *r, const char *what, sd_err *err)
{
    uint64_t v;
    if (sd_reader_varint(r, &v) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO, "expected %s (a varint)", what);
    }
    return SD_OK;
}

static sd_status skip_lp(const sd_coder *c, sd_reader *r, const char *what, sd_err *err)
{
    sd_bytes b;
    if (sd_reader_lp(r, &b) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO, "expected %s (varint length + bytes)", what);
    }
    return SD_OK;
}

sd_status sd__coder_iterable_count(const sd_coder *c,
                                   sd_reader *r,
                                   int64_t *count,
                                   bool *unknown,
                                   sd_err *err)
{
    uint32_t raw;
    if (sd_reader_be32(r, &raw) != SD_OK) {
        return truncated(err, c, "a 4-byte iterable count");
    }
    int32_t n = (int32_t)raw;
    *unknown = n == -1;
    *count = n < 0 ? 0 : n;
    if (n < -1) {
        return sd__coder_fail(err, c, SD_EPROTO, "iterable count %d (expected >= 0, or -1)",
                              (int)n);
    }
    return SD_OK;
}

/*
 * Skip `count` nested elements of elem. Fixed-size elements are skipped arithmetically;
 * variable-size ones take at least one byte each, so a count above the bytes left is bad.
 */
static sd_status skip_elements(const sd_coder *owner,
                               const sd_coder *elem,
                               sd_reader *r,
                               uint64_t count,
                               sd_err *err)
{
    long fixed = sd__coder_fixed_size(elem);
    if (fixed >= 0) {
        if (fixed > 0 && count > sd_reader_left(r) / (uint64_t)fixed) {
            return truncated(err, owner, "more element bytes");
        }
        r->p += (size_t)count * (size_t)fixed;
        return SD_OK;
    }
    if (count > sd_reader_left(r)) {
        return sd__coder_fail(err, owner, SD_EPROTO,
                              "iterable claims %llu elements but only %zu bytes are left",
                              (unsigned long long)count, sd_reader_left(r));
    }
    for (uint64_t i = 0; i < count; i++) {
        sd_status st = sd__coder_skip(elem, r, true, err);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* Iterable or state-backed iterable, both length forms. */
static sd_status skip_iterable(const sd_coder *c, const sd_coder *elem, sd_reader *r, sd_err *err)
{
    int64_t count = 0;
    bool unknown = false;
    sd_status st = sd__coder_iterable_count(c, r, &count, &unknown, err);
    if (st != SD_OK) {
        return st;
    }
    if (!unknown) {
        return skip_elements(c, elem, r, (uint64_t)count, err);
    }
    for (;;) {
        uint64_t k;
        if (sd_reader_varint(r, &k) != SD_OK) {
            return truncated(err, c, "an iterable block size (varint)");
        }
        if (k == 0) {
            return SD_OK;
        }
        if (k == UINT64_MAX) {
            if (c->kind != SD_CODER_STATE_BACKED_ITERABLE) {
                return sd__coder_fail(err, c, SD_EPROTO,
                                      "block size -1 (a state token) in a plain iterable");
            }
            return skip_lp(c, r, "a state continuation token", err);
        }
        if ((st = skip_elements(c, elem, r, k, err)) != SD_OK) {
            return st;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Rows                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static sd_status skip_field_value(const sd_coder *c,
                                  const sd_field_type *t,
                                  sd_reader *r,
                                  bool wrapped_nullable,
                                  int depth,
                                  sd_err *err);

static sd_status skip_field_elements(const sd_coder *c,
                                     const sd_field_type *a,
                                     const sd_field_type *b,
                                     sd_reader *r,
                                     int depth,
                                     sd_err *err)
{
    int64_t count = 0;
    bool unknown = false;
    sd_status st = sd__coder_iterable_count(c, r, &count, &unknown, err);
    if (st != SD_OK) {
        return st;
    }
    if (unknown && b != NULL) {
        return sd__coder_fail(err, c, SD_EPROTO, "map field with count -1");
    }
    for (;;) {
        uint64_t n = (uint64_t)count;
        if (unknown) {
            if (sd_reader_varint(r, &n) != SD_OK) {
                return truncated(err, c, "an array block size (varint)");
            }
            if (n == 0) {
                return SD_OK;
            }
        }
        /* Every field value takes at least one byte. */
        if (n > sd_reader_left(r)) {
            return sd__coder_fail(err, c, SD_EPROTO,
                                  "row field claims %llu elements but only %zu bytes are left",
                                  (unsigned long long)n, sd_reader_left(r));
        }
        for (uint64_t i = 0; i < n; i++) {
            if ((st = skip_field_value(c, a, r, true, depth, err)) != SD_OK) {
                return st;
            }
            if (b != NULL && (st = skip_field_value(c, b, r, true, depth, err)) != SD_OK) {
                return st;
            }
        }
        if (!unknown) {
            return SD_OK;
        }
    }
}

static sd_status skip_field_value(const sd_coder *c,
                                  const sd_field_type *t,
                                  sd_reader *r,
                                  bool wrapped_nullable,
                                  int depth,
                                  sd_err *err)
{
    if (wrapped_nullable && t->nullable) {
        uint8_t flag;
        if (sd_reader_byte(r, &flag) != SD_OK) {
            return truncated(err, c, "a null indicator byte");
        }
        if (flag == 0) {
            return SD_OK;
        }
        if (flag != 1) {
            return sd__coder_fail(err, c, SD_EPROTO, "null indicator %u (expected 0 or 1)", flag);
        }
    }
    switch (t->kind) {
    case SD_FIELD_ATOMIC:
        switch (t->atomic) {
        case SD_ATOMIC_BYTE:
        case SD_ATOMIC_BOOLEAN:
            return skip_n(c, r, 1, "a 1-byte field", err);
        case SD_ATOMIC_INT16:
            return skip_n(c, r, 2, "a 2-byte int16 field", err);
        case SD_ATOMIC_FLOAT:
            return skip_n(c, r, 4, "a 4-byte float field", err);
        case SD_ATOMIC_DOUBLE:
            return skip_n(c, r, 8, "an 8-byte double field", err);
        case SD_ATOMIC_INT32:
        case SD_ATOMIC_INT64:
            return skip_varint(c, r, "an integer field", err);
        case SD_ATOMIC_STRING:
        case SD_ATOMIC_BYTES:
            return skip_lp(c, r, "a string/bytes field", err);
        default:
            return sd__coder_fail(err, c, SD_EPROTO, "unsupported atomic type %d", (int)t->atomic);
        }
    case SD_FIELD_ARRAY:
    case SD_FIELD_ITERABLE:
        return skip_field_elements(c, t->element, NULL, r, depth, err);
    case SD_FIELD_MAP:
        return skip_field_elements(c, t->element, t->value, r, depth, err);
    case SD_FIELD_ROW:
        return sd__coder_row_skip(c, t->row, r, depth + 1, err);
    case SD_FIELD_LOGICAL:
        switch (t->logical) {
        case SD_LOGICAL_MILLIS_INSTANT:
            return skip_n(c, r, 8, "an 8-byte millis_instant field", err);
        case SD_LOGICAL_DECIMAL: {
            sd_status st = skip_varint(c, r, "a decimal scale", err);
            return st != SD_OK ? st : skip_lp(c, r, "a decimal's unscaled value", err);
        }
        case SD_LOGICAL_OPAQUE:
            return sd__coder_opaque_field(err, c, t);
        case SD_LOGICAL_AS_REPR:
        default:
            return skip_field_value(c, t->repr, r, false, depth, err);
        }
    default:
        return sd__coder_fail(err, c, SD_EPROTO, "field type without a type");
    }
}

sd_status
sd__coder_row_skip(const sd_coder *c, const sd_schema *s, sd_reader *r, int depth, sd_err *err)
{
    uint64_t nvals;
    sd_bytes mask;
    if (depth > 64) {
        return sd__coder_fail(err, c, SD_EPROTO, "rows nested too deeply");
    }
    if (sd_reader_varint(r, &nvals) != SD_OK) {
        return truncated(err, c, "a row field count (varint)");
    }
    if (sd_reader_lp(r, &mask) != SD_OK) {
        return truncated(err, c, "a row null bitmap (varint length + bytes)");
    }
    if (nvals > s->n_fields) {
        return sd__coder_fail(err, c, SD_EPROTO, "row has %llu fields but schema %s has %zu",
                              (unsigned long long)nvals, s->id, s->n_fields);
    }
    for (size_t j = 0; j < nvals; j++) {
        size_t i = s->order[j];
        if ((i >> 3) < mask.len && (mask.ptr[i >> 3] & (1u << (i & 7))) != 0) {
            continue;
        }
        sd_status st = skip_field_value(c, s->fields[i].type, r, false, depth, err);
        if (st != SD_OK) {
            sd_err_prefix(err, "field \"%s\": ", s->fields[i].name);
            return st;
        }
    }
    return SD_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* The skipper                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* A pane; of a windowed value (wv), with any element metadata after it (sd__wv_pane_decode). */
static sd_status skip_pane(const sd_coder *c, sd_reader *r, bool wv, sd_err *err)
{
    sd_pane p;
    sd_bytes metadata;
    sd_err sub;
    sd_err_clear(&sub);
    if ((wv ? sd__wv_pane_decode(r, &p, &metadata, &sub) : sd_pane_decode(r, &p, &sub)) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO, "%s", sd_err_msg(&sub));
    }
    return SD_OK;
}

/*
 * The commonest skips without the calls: a nested byte string whose length is one varint byte
 * (below 128), a varint of up to eight bytes (found by its last byte; the general reader also
 * checks the 64-bit limit, which eight bytes cannot pass). Keys and values are skipped per
 * element on every delivery. False, consuming nothing, when the general path must decide.
 */
static inline bool skip_fast(const sd_coder *c, sd_reader *r, bool nested)
{
    switch (c->kind) {
    case SD_CODER_BYTES:
    case SD_CODER_STRING_UTF8:
        if (nested && r->p < r->end && *r->p < 0x80 && (size_t)*r->p < sd_reader_left(r)) {
            r->p += 1 + *r->p;
            return true;
        }
        return false;
    case SD_CODER_VARINT:
        for (size_t i = 0; i < 8 && r->p + i < r->end; i++) {
            if ((r->p[i] & 0x80) == 0) {
                r->p += i + 1;
                return true;
            }
        }
        return false;
    default:
        return false;
    }
}

sd_status sd__coder_skip(const sd_coder *c, sd_reader *r, bool nested, sd_err *err)
{
    sd_status st;
    uint8_t b;
    if (skip_fast(c, r, nested)) {
        return SD_OK;
    }
    switch (c->kind) {
    case SD_CODER_BYTES:
    case SD_CODER_STRING_UTF8:
        if (!nested) {
            r->p = r->end;
            return SD_OK;
        }
        return skip_lp(c, r, "a length-prefixed value", err);
    case SD_CODER_VARINT:
        return skip_varint(c, r, "the value", err);
    case SD_CODER_DOUBLE:
        return skip_n(c, r, 8, "8 bytes", err);
    case SD_CODER_BOOL:
        return skip_n(c, r, 1, "1 byte", err);
    case SD_CODER_KV:
        if (!skip_fast(c->components[0], r, true) &&
            (st = sd__coder_skip(c->components[0], r, true, err)) != SD_OK) {
            return st;
        }
        if (skip_fast(c->components[1], r, nested)) {
            return SD_OK;
        }
        return sd__coder_skip(c->components[1], r, nested, err);
    case SD_CODER_ITERABLE:
    case SD_CODER_STATE_BACKED_ITERABLE:
        return skip_iterable(c, c->components[0], r, err);
    case SD_CODER_NULLABLE:
        if (sd_reader_byte(r, &b) != SD_OK) {
            return truncated(err, c, "a null indicator byte");
        }
        if (b == 0) {
            return SD_OK;
        }
        if (b != 1) {
            return sd__coder_fail(err, c, SD_EPROTO, "null indicator %u (expected 0 or 1)", b);
        }
        return sd__coder_skip(c->components[0], r, nested, err);
    case SD_CODER_LENGTH_PREFIX:
        return skip_lp(c, r, "a length-prefixed value", err);
    case SD_CODER_GLOBAL_WINDOW:
        return SD_OK;
    case SD_CODER_INTERVAL_WINDOW:
        if ((st = skip_n(c, r, 8, "an 8-byte end timestamp", err)) != SD_OK) {
            return st;
        }
        return skip_varint(c, r, "the window span", err);
    case SD_CODER_CUSTOM_WINDOW:
        if ((st = skip_n(c, r, 8, "an 8-byte max timestamp", err)) != SD_OK) {
            return st;
        }
        return sd__coder_skip(c->components[0], r, true, err);
    case SD_CODER_WINDOWED_VALUE:
        if ((st = skip_n(c, r, 8, "an 8-byte timestamp", err)) != SD_OK) {
            return st;
        }
        if ((st = skip_iterable(c, c->components[1], r, err)) != SD_OK) {
            return st;
        }
        if ((st = skip_pane(c, r, true, err)) != SD_OK) {
            return st;
        }
        return sd__coder_skip(c->components[0], r, nested, err);
    case SD_CODER_PARAM_WINDOWED_VALUE:
        return sd__coder_skip(c->components[0], r, nested, err);
    case SD_CODER_TIMER:
        if ((st = sd__coder_skip(c->components[0], r, true, err)) != SD_OK) {
            return st;
        }
        if ((st = skip_lp(c, r, "the dynamic timer tag", err)) != SD_OK) {
            return st;
        }
        if ((st = skip_iterable(c, c->components[1], r, err)) != SD_OK) {
            return st;
        }
        if (sd_reader_byte(r, &b) != SD_OK) {
            return truncated(err, c, "the clear bit");
        }
        if (b > 1) {
            return sd__coder_fail(err, c, SD_EPROTO, "clear bit %u (expected 0 or 1)", b);
        }
        if (b == 1) {
            return SD_OK;
        }
        if ((st = skip_n(c, r, 16, "fire and hold timestamps (16 bytes)", err)) != SD_OK) {
            return st;
        }
        return skip_pane(c, r, false, err);
    case SD_CODER_ROW:
        return sd__coder_row_skip(c, c->schema, r, 0, err);
    case SD_CODER_SHARDED_KEY:
        if ((st = skip_lp(c, r, "the shard id", err)) != SD_OK) {
            return st;
        }
        /* The key is nested in either context (Java and Python both write it so). */
        return sd__coder_skip(c->components[0], r, true, err);
    case SD_CODER_UNKNOWN:
    default:
        return sd__coder_fail(err, c, SD_EUNIMPL,
                              "cannot find the end of a value of an unknown coder (it must be "
                              "wrapped in beam:coder:length_prefix:v1)");
    }
}

sd_status sd_coder_skip(const sd_coder *c, sd_reader *r, bool nested, sd_err *err)
{
    /* The commonest elements (a short byte string or varint, or a KV of them) without the
     * general skip's call: every delivered element is sliced this way. */
    if (skip_fast(c, r, nested)) {
        return SD_OK;
    }
    sd_reader save = *r;
    if (c->kind == SD_CODER_KV && skip_fast(c->components[0], r, true) &&
        skip_fast(c->components[1], r, nested)) {
        return SD_OK;
    }
    *r = save;
    sd_status st = sd__coder_skip(c, r, nested, err);
    if (st != SD_OK) {
        *r = save;
    }
    return st;
}

sd_status sd_coder_slice(const sd_coder *c, sd_reader *r, bool nested, sd_bytes *value, sd_err *err)
{
    const uint8_t *start = r->p;
    sd_status st = sd_coder_skip(c, r, nested, err);
    if (st == SD_OK) {
        *value = sd_bytes_make(start, (size_t)(r->p - start));
    }
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* KV and iterables                                                                           */
/* ------------------------------------------------------------------------------------------ */

sd_status
sd_kv_split(const sd_coder *kv_coder, sd_bytes element, sd_bytes *key, sd_bytes *value, sd_err *err)
{
    if (kv_coder == NULL || kv_coder->kind != SD_CODER_KV) {
        return sd__coder_fail(err, kv_coder, SD_EINVAL, "sd_kv_split needs a kv coder");
    }
    sd_reader r = sd_reader_make(element);
    if (skip_fast(kv_coder->components[0], &r, true)) {
        *key = sd_bytes_make(element.ptr, (size_t)(r.p - element.ptr));
        *value = sd_bytes_make(r.p, sd_reader_left(&r));
        return SD_OK;
    }
    sd_status st = sd_coder_slice(kv_coder->components[0], &r, true, key, err);
    if (st != SD_OK) {
        sd_err_prefix(err, "coder %s key: ", kv_coder->id ? kv_coder->id : kv_coder->urn);
        return st;
    }
    *value = sd_bytes_make(r.p, sd_reader_left(&r));
    return SD_OK;
}

sd_status sd_iterable_encode_begin(sd_buf *out, size_t count)
{
    if (count > INT32_MAX) {
        return SD_ETOOBIG;
    }
    return sd_buf_put_be32(out, (uint32_t)count);
}

sd_status
sd_iterable_begin(sd_iterable_reader *it, const sd_coder *iterable_coder, sd_reader *r, sd_err *err)
{
    memset(it, 0, sizeof(*it));
    if (iterable_coder == NULL || (iterable_coder->kind != SD_CODER_ITERABLE &&
                                   iterable_coder->kind != SD_CODER_STATE_BACKED_ITERABLE)) {
        return sd__coder_fail(err, iterable_coder, SD_EINVAL,
                              "sd_iterable_begin needs an iterable coder");
    }
    it->elem = iterable_coder->components[0];
    it->r = r;
    int64_t count = 0;
    sd_reader save = *r;
    sd_status st = sd__coder_iterable_count(iterable_coder, r, &count, &it->unknown_length, err);
    if (st != SD_OK) {
        *r = save;
        return st;
    }
    it->owner = iterable_coder;
    if (!it->unknown_length && sd__coder_fixed_size(it->elem) != 0 &&
        (uint64_t)count > sd_reader_left(r)) {
        *r = save;
        return sd__coder_fail(err, iterable_coder, SD_EPROTO,
                              "iterable claims %lld elements but only %zu bytes are left",
                              (long long)count, sd_reader_left(r));
    }
    it->left_in_block = (uint64_t)count;
    return SD_OK;
}

sd_status sd_iterable_next(sd_iterable_reader *it, sd_bytes *elem, bool *has, sd_err *err)
{
    *has = false;
    if (it->done) {
        return SD_OK;
    }
    while (it->left_in_block == 0) {
        if (!it->unknown_length) {
            it->done = true;
            return SD_OK;
        }
        uint64_t k;
        if (sd_reader_varint(it->r, &k) != SD_OK) {
            return truncated(err, it->owner, "an iterable block size (varint)");
        }
        if (k == 0) {
            it->done = true;
            return SD_OK;
        }
        if (k == UINT64_MAX) {
            if (it->owner->kind != SD_CODER_STATE_BACKED_ITERABLE) {
                return sd__coder_fail(err, it->owner, SD_EPROTO,
                                      "block size -1 (a state token) in a plain iterable");
            }
            if (sd_reader_lp(it->r, &it->token) != SD_OK) {
                return truncated(err, it->owner, "a state continuation token");
            }
            it->has_token = true;
            it->done = true;
            return SD_OK;
        }
        it->left_in_block = k;
    }
    sd_status st = sd_coder_slice(it->elem, it->r, true, elem, err);
    if (st != SD_OK) {
        return st;
    }
    it->left_in_block--;
    it->index++;
    *has = true;
    return SD_OK;
}
