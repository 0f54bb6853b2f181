/*
 * Sundial: the generic value model and full decode/encode for every standard coder.
 *
 * The runner itself mostly skips values (skip.c) and reads headers (window.c). Full decoding
 * is for the C SDK, which hands user code real values, and for the tests, which check every
 * cross-SDK vector in standard_coders.yaml both ways. One struct (sd_value) serves every kind;
 * value.h lists which fields each kind uses. The cost is memory (every value carries all
 * fields) and an allocation per node; the benefit is that construction, comparison, printing
 * and destruction are each one short function, which matters more for test and SDK code than
 * speed does.
 *
 * Decoding copies bytes out of the input, so a value never borrows from a buffer that may die.
 * Every read is bounds-checked through sd_reader; list counts are checked against the bytes
 * left (each element takes at least one byte unless its encoding is empty, in which case the
 * count is capped at SD_CODER_MAX_EMPTY_ITEMS) so garbage cannot make us allocate gigabytes.
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
 * text form lives in decimal.c.
 *
 * A state-backed iterable that ends in a continuation token decodes, by default, to the
 * elements before the token plus the token itself: the coder layer has no state API. A caller
 * that has one passes sd_decode_opts.state_read and gets the whole iterable instead.
 */
#include "runner/coder/value.h"

#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/coder/coder_int.h"
#include "runner/coder/schema.h"

/* ------------------------------------------------------------------------------------------ */
/* Construction and destruction                                                               */
/* ------------------------------------------------------------------------------------------ */

static sd_value *value_new(sd_value_kind kind)
{
    sd_value *v = sd_calloc(1, sizeof(*v));
    if (v != NULL) {
        v->kind = kind;
    }
    return v;
}

/* Copy n bytes (plus a NUL) into v->bytes. */
static sd_status set_bytes(sd_value *v, const void *p, size_t n)
{
    uint8_t *copy = sd_malloc(n + 1);
    if (copy == NULL) {
        return SD_ENOMEM;
    }
    if (n > 0) {
        memcpy(copy, p, n);
    }
    copy[n] = '\0';
    sd_free(v->bytes);
    v->bytes = copy;
    v->len = n;
    return SD_OK;
}

void sd_value_destroy(sd_value *v)
{
    if (v == NULL) {
        return;
    }
    for (size_t i = 0; i < v->n_items; i++) {
        sd_value_destroy(v->items[i]);
    }
    sd_free(v->items);
    sd_free(v->bytes);
    sd_free(v);
}

sd_value *sd_value_null(void)
{
    return value_new(SD_VALUE_NULL);
}

sd_value *sd_value_bool(bool b)
{
    sd_value *v = value_new(SD_VALUE_BOOL);
    if (v != NULL) {
        v->b = b;
    }
    return v;
}

sd_value *sd_value_int(int64_t i)
{
    sd_value *v = value_new(SD_VALUE_INT);
    if (v != NULL) {
        v->i = i;
    }
    return v;
}

sd_value *sd_value_double(double d)
{
    sd_value *v = value_new(SD_VALUE_DOUBLE);
    if (v != NULL) {
        v->d = d;
    }
    return v;
}

static sd_value *bytes_value(sd_value_kind kind, const void *p, size_t n)
{
    sd_value *v = value_new(kind);
    if (v != NULL && set_bytes(v, p, n) != SD_OK) {
        sd_value_destroy(v);
        return NULL;
    }
    return v;
}

sd_value *sd_value_bytes(const void *p, size_t n)
{
    return bytes_value(SD_VALUE_BYTES, p, n);
}

sd_value *sd_value_string(const char *s, size_t n)
{
    return bytes_value(SD_VALUE_STRING, s, n);
}

static sd_status add_item(sd_value *parent, sd_value *item)
{
    if (item == NULL) {
        return SD_ENOMEM;
    }
    if (parent->n_items == parent->cap_items) {
        size_t cap = parent->cap_items ? parent->cap_items * 2 : 4;
        sd_value **items = sd_realloc(parent->items, cap * sizeof(*items));
        if (items == NULL) {
            sd_value_destroy(item);
            return SD_ENOMEM;
        }
        parent->items = items;
        parent->cap_items = cap;
    }
    parent->items[parent->n_items++] = item;
    return SD_OK;
}

sd_status sd_value_push(sd_value *parent, sd_value *item)
{
    if (item == NULL) {
        return SD_EINVAL;
    }
    if (parent == NULL || (parent->kind != SD_VALUE_LIST && parent->kind != SD_VALUE_MAP &&
                           parent->kind != SD_VALUE_ROW)) {
        sd_value_destroy(item);
        return SD_EINVAL;
    }
    return add_item(parent, item);
}

/* A node of kind with the given children (ownership taken; all freed on failure). */
static sd_value *with_items(sd_value_kind kind, sd_value *a, sd_value *b)
{
    sd_value *v = value_new(kind);
    if (v == NULL || a == NULL || (kind != SD_VALUE_SHARDED_KEY && b == NULL)) {
        sd_value_destroy(v);
        sd_value_destroy(a);
        sd_value_destroy(b);
        return NULL;
    }
    if (add_item(v, a) != SD_OK) {
        sd_value_destroy(v);
        sd_value_destroy(b);
        return NULL;
    }
    if (b != NULL && add_item(v, b) != SD_OK) {
        sd_value_destroy(v);
        return NULL;
    }
    return v;
}

sd_value *sd_value_kv(sd_value *key, sd_value *value)
{
    return with_items(SD_VALUE_KV, key, value);
}

sd_value *sd_value_list(void)
{
    return value_new(SD_VALUE_LIST);
}

sd_value *sd_value_map(void)
{
    return value_new(SD_VALUE_MAP);
}

sd_value *sd_value_row(void)
{
    return value_new(SD_VALUE_ROW);
}

sd_value *sd_value_window(const sd_window *w)
{
    sd_value *v = value_new(SD_VALUE_WINDOW);
    if (v == NULL) {
        return NULL;
    }
    v->window = *w;
    v->window.custom_bytes = SD_BYTES_NULL;
    if (w->custom) {
        if (set_bytes(v, w->custom_bytes.ptr, w->custom_bytes.len) != SD_OK) {
            sd_value_destroy(v);
            return NULL;
        }
        v->window.custom_bytes = sd_bytes_make(v->bytes, v->len);
    }
    return v;
}

sd_value *sd_value_wv(sd_time ts, sd_value *windows, const sd_pane *pane, sd_value *value)
{
    sd_value *v = with_items(SD_VALUE_WV, value, windows);
    if (v != NULL) {
        v->ts = ts;
        v->pane = *pane;
    }
    return v;
}

sd_value *sd_value_timer(sd_value *key,
                         const char *tag,
                         size_t tag_len,
                         sd_value *windows,
                         bool clear,
                         sd_time fire,
                         sd_time hold,
                         const sd_pane *pane)
{
    sd_value *v = with_items(SD_VALUE_TIMER, key, windows);
    if (v == NULL) {
        return NULL;
    }
    if (set_bytes(v, tag, tag_len) != SD_OK) {
        sd_value_destroy(v);
        return NULL;
    }
    v->b = clear;
    if (clear) {
        v->pane = SD_PANE_NO_FIRING;
    } else {
        v->ts = fire;
        v->hold = hold;
        v->pane = *pane;
    }
    return v;
}

sd_value *sd_value_sharded_key(const void *shard, size_t shard_len, sd_value *key)
{
    sd_value *v = with_items(SD_VALUE_SHARDED_KEY, key, NULL);
    if (v != NULL && set_bytes(v, shard, shard_len) != SD_OK) {
        sd_value_destroy(v);
        return NULL;
    }
    return v;
}

/* ------------------------------------------------------------------------------------------ */
/* Equality and description                                                                   */
/* ------------------------------------------------------------------------------------------ */

static const char *const VALUE_KIND_NAMES[] = {
    "null", "bool", "int", "double", "bytes",          "string", "kv",
    "list", "map",  "row", "window", "windowed_value", "timer",  "sharded_key",
};

const char *sd_value_kind_name(sd_value_kind kind)
{
    if ((int)kind < 0 || (size_t)kind >= sizeof(VALUE_KIND_NAMES) / sizeof(VALUE_KIND_NAMES[0])) {
        return "invalid";
    }
    return VALUE_KIND_NAMES[kind];
}

bool sd_value_equal(const sd_value *a, const sd_value *b)
{
    if (a == b) {
        return true;
    }
    if (a == NULL || b == NULL || a->kind != b->kind || a->n_items != b->n_items) {
        return false;
    }
    switch (a->kind) {
    case SD_VALUE_BOOL:
        if (a->b != b->b) {
            return false;
        }
        break;
    case SD_VALUE_INT:
        if (a->i != b->i) {
            return false;
        }
        break;
    case SD_VALUE_DOUBLE:
        if (memcmp(&a->d, &b->d, sizeof(double)) != 0) {
            return false;
        }
        break;
    case SD_VALUE_BYTES:
    case SD_VALUE_STRING:
    case SD_VALUE_SHARDED_KEY:
        if (!sd_bytes_equal(sd_bytes_make(a->bytes, a->len), sd_bytes_make(b->bytes, b->len))) {
            return false;
        }
        break;
    case SD_VALUE_LIST:
        if (a->has_token != b->has_token ||
            (a->has_token &&
             !sd_bytes_equal(sd_bytes_make(a->bytes, a->len), sd_bytes_make(b->bytes, b->len)))) {
            return false;
        }
        break;
    case SD_VALUE_WINDOW:
        if (!sd_window_equal(&a->window, &b->window)) {
            return false;
        }
        break;
    case SD_VALUE_WV:
        if (a->ts != b->ts || !sd_pane_equal(&a->pane, &b->pane)) {
            return false;
        }
        break;
    case SD_VALUE_TIMER:
        if (a->b != b->b ||
            !sd_bytes_equal(sd_bytes_make(a->bytes, a->len), sd_bytes_make(b->bytes, b->len))) {
            return false;
        }
        if (!a->b && (a->ts != b->ts || a->hold != b->hold || !sd_pane_equal(&a->pane, &b->pane))) {
            return false;
        }
        break;
    default:
        break;
    }
    for (size_t i = 0; i < a->n_items; i++) {
        if (!sd_value_equal(a->items[i], b->items[i])) {
            return false;
        }
    }
    return true;
}

static sd_status describe_bytes(sd_buf *out, const uint8_t *p, size_t n)
{
    sd_status st = sd_buf_append_byte(out, '"');
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        if (p[i] == '"' || p[i] == '\\') {
            st = sd_buf_printf(out, "\\%c", p[i]);
        } else if (p[i] < 0x20 || p[i] >= 0x7f) {
            st = sd_buf_printf(out, "\\x%02x", p[i]);
        } else {
            st = sd_buf_append_byte(out, p[i]);
        }
    }
    return st == SD_OK ? sd_buf_append_byte(out, '"') : st;
}

static sd_status describe_items(const sd_value *v, sd_buf *out, size_t from, const char *sep)
{
    sd_status st = SD_OK;
    for (size_t i = from; i < v->n_items && st == SD_OK; i++) {
        if (i > from) {
            st = sd_buf_append_str(out, sep);
        }
        if (st == SD_OK) {
            st = sd_value_describe(v->items[i], out);
        }
    }
    return st;
}

static sd_status describe_pane(const sd_pane *p, sd_buf *out)
{
    static const char *const timing[] = { "EARLY", "ON_TIME", "LATE", "UNKNOWN" };
    return sd_buf_printf(out, "{first: %s, last: %s, timing: %s, index: %lld, nonspec: %lld}",
                         p->first ? "true" : "false", p->last ? "true" : "false",
                         p->timing >= 0 && p->timing <= 3 ? timing[p->timing] : "?",
                         (long long)p->index, (long long)p->nonspec_index);
}

sd_status sd_value_describe(const sd_value *v, sd_buf *out)
{
    sd_status st;
    if (v == NULL) {
        return sd_buf_append_str(out, "(none)");
    }
    switch (v->kind) {
    case SD_VALUE_NULL:
        return sd_buf_append_str(out, "null");
    case SD_VALUE_BOOL:
        return sd_buf_append_str(out, v->b ? "true" : "false");
    case SD_VALUE_INT:
        return sd_buf_printf(out, "%lld", (long long)v->i);
    case SD_VALUE_DOUBLE:
        return sd_buf_printf(out, "%.17g", v->d);
    case SD_VALUE_BYTES:
        if ((st = sd_buf_append_byte(out, 'b')) != SD_OK) {
            return st;
        }
        return describe_bytes(out, v->bytes, v->len);
    case SD_VALUE_STRING:
        return describe_bytes(out, v->bytes, v->len);
    case SD_VALUE_KV:
        if ((st = sd_buf_append_str(out, "{key: ")) != SD_OK ||
            (st = sd_value_describe(v->items[0], out)) != SD_OK ||
            (st = sd_buf_append_str(out, ", value: ")) != SD_OK ||
            (st = sd_value_describe(v->items[1], out)) != SD_OK) {
            return st;
        }
        return sd_buf_append_byte(out, '}');
    case SD_VALUE_LIST:
    case SD_VALUE_ROW:
        if ((st = sd_buf_append_str(out, v->kind == SD_VALUE_ROW ? "row(" : "[")) != SD_OK ||
            (st = describe_items(v, out, 0, ", ")) != SD_OK) {
            return st;
        }
        if (v->has_token) {
            if ((st = sd_buf_append_str(out, " + token ")) != SD_OK ||
                (st = describe_bytes(out, v->bytes, v->len)) != SD_OK) {
                return st;
            }
        }
        return sd_buf_append_str(out, v->kind == SD_VALUE_ROW ? ")" : "]");
    case SD_VALUE_MAP:
        if ((st = sd_buf_append_byte(out, '{')) != SD_OK) {
            return st;
        }
        for (size_t i = 0; i + 1 < v->n_items; i += 2) {
            if ((i > 0 && (st = sd_buf_append_str(out, ", ")) != SD_OK) ||
                (st = sd_value_describe(v->items[i], out)) != SD_OK ||
                (st = sd_buf_append_str(out, ": ")) != SD_OK ||
                (st = sd_value_describe(v->items[i + 1], out)) != SD_OK) {
                return st;
            }
        }
        return sd_buf_append_byte(out, '}');
    case SD_VALUE_WINDOW:
        if (v->window.global) {
            return sd_buf_append_str(out, "global");
        }
        if (v->window.custom) {
            if ((st = sd_buf_printf(out, "custom(max %lld, ",
                                    (long long)sd_window_max_ts(&v->window))) != SD_OK ||
                (st = describe_bytes(out, v->bytes, v->len)) != SD_OK) {
                return st;
            }
            return sd_buf_append_byte(out, ')');
        }
        return sd_buf_printf(out, "[%lld, %lld)", (long long)v->window.start,
                             (long long)v->window.end);
    case SD_VALUE_WV:
        if ((st = sd_buf_printf(out, "wv{ts: %lld, windows: ", (long long)v->ts)) != SD_OK ||
            (st = sd_value_describe(v->items[1], out)) != SD_OK ||
            (st = sd_buf_append_str(out, ", pane: ")) != SD_OK ||
            (st = describe_pane(&v->pane, out)) != SD_OK ||
            (st = sd_buf_append_str(out, ", value: ")) != SD_OK ||
            (st = sd_value_describe(v->items[0], out)) != SD_OK) {
            return st;
        }
        return sd_buf_append_byte(out, '}');
    case SD_VALUE_TIMER:
        if ((st = sd_buf_append_str(out, "timer{key: ")) != SD_OK ||
            (st = sd_value_describe(v->items[0], out)) != SD_OK ||
            (st = sd_buf_append_str(out, ", tag: ")) != SD_OK ||
            (st = describe_bytes(out, v->bytes, v->len)) != SD_OK ||
            (st = sd_buf_append_str(out, ", windows: ")) != SD_OK ||
            (st = sd_value_describe(v->items[1], out)) != SD_OK) {
            return st;
        }
        if (v->b) {
            return sd_buf_append_str(out, ", clear}");
        }
        if ((st = sd_buf_printf(out, ", fire: %lld, hold: %lld, pane: ", (long long)v->ts,
                                (long long)v->hold)) != SD_OK ||
            (st = describe_pane(&v->pane, out)) != SD_OK) {
            return st;
        }
        return sd_buf_append_byte(out, '}');
    case SD_VALUE_SHARDED_KEY:
        if ((st = sd_buf_append_str(out, "sharded{shard: ")) != SD_OK ||
            (st = describe_bytes(out, v->bytes, v->len)) != SD_OK ||
            (st = sd_buf_append_str(out, ", key: ")) != SD_OK ||
            (st = sd_value_describe(v->items[0], out)) != SD_OK) {
            return st;
        }
        return sd_buf_append_byte(out, '}');
    default:
        return sd_buf_append_str(out, "?");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                   */
/* ------------------------------------------------------------------------------------------ */

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
        } else if (add_item(list, item) != SD_OK) {
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
    sd_status st = sd__iterable_count(c, r, &count, &unknown, err);
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
                } else if (set_bytes(list, token.ptr, token.len) != SD_OK) {
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
            if (st == SD_OK && add_item(list, item) != SD_OK) {
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
        if (add_item(list, sd_value_window(&items[i])) != SD_OK) {
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
    sd_status st = sd__decimal_format(scale, unscaled, &text);
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
                              sd_err *err)
{
    uint8_t b;
    uint64_t u;
    sd_bytes bytes;
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
        switch (t->atomic) {
        case SD_ATOMIC_BYTE:
            if (sd_reader_byte(r, &b) != SD_OK) {
                return short_input(err, c, "a 1-byte field");
            }
            v = sd_value_int((int8_t)b);
            break;
        case SD_ATOMIC_INT16:
            if (sd_reader_take(r, 2, &bytes) != SD_OK) {
                return short_input(err, c, "a 2-byte int16 field");
            }
            v = sd_value_int((int16_t)(uint16_t)((bytes.ptr[0] << 8) | bytes.ptr[1]));
            break;
        case SD_ATOMIC_INT32:
            if (sd_reader_varint(r, &u) != SD_OK) {
                return short_input(err, c, "an int32 field (varint)");
            }
            if (u <= UINT32_MAX) {
                v = sd_value_int((int32_t)(uint32_t)u);
            } else if ((int64_t)u >= INT32_MIN && (int64_t)u < 0) {
                v = sd_value_int((int64_t)u);
            } else {
                return sd__coder_fail(err, c, SD_EPROTO, "int32 field value %llu out of range",
                                      (unsigned long long)u);
            }
            break;
        case SD_ATOMIC_INT64:
            if (sd_reader_varint(r, &u) != SD_OK) {
                return short_input(err, c, "an int64 field (varint)");
            }
            v = sd_value_int((int64_t)u);
            break;
        case SD_ATOMIC_FLOAT: {
            uint32_t raw;
            float f;
            if (sd_reader_be32(r, &raw) != SD_OK) {
                return short_input(err, c, "a 4-byte float field");
            }
            memcpy(&f, &raw, sizeof(f));
            v = sd_value_double((double)f);
            break;
        }
        case SD_ATOMIC_DOUBLE: {
            uint64_t raw;
            double d;
            if (sd_reader_be64(r, &raw) != SD_OK) {
                return short_input(err, c, "an 8-byte double field");
            }
            memcpy(&d, &raw, sizeof(d));
            v = sd_value_double(d);
            break;
        }
        case SD_ATOMIC_STRING:
        case SD_ATOMIC_BYTES:
            if (sd_reader_lp(r, &bytes) != SD_OK) {
                return short_input(err, c, "a string/bytes field (varint length + bytes)");
            }
            v = bytes_value(t->atomic == SD_ATOMIC_STRING ? SD_VALUE_STRING : SD_VALUE_BYTES,
                            bytes.ptr, bytes.len);
            break;
        case SD_ATOMIC_BOOLEAN:
            if (sd_reader_byte(r, &b) != SD_OK) {
                return short_input(err, c, "a boolean field");
            }
            if (b > 1) {
                return sd__coder_fail(err, c, SD_EPROTO, "boolean byte %u (expected 0 or 1)", b);
            }
            v = sd_value_bool(b == 1);
            break;
        default:
            return sd__coder_fail(err, c, SD_EPROTO, "unsupported atomic type %d", (int)t->atomic);
        }
        break;
    case SD_FIELD_ARRAY:
    case SD_FIELD_ITERABLE:
    case SD_FIELD_MAP: {
        bool is_map = t->kind == SD_FIELD_MAP;
        int64_t count;
        bool unknown;
        if ((st = sd__iterable_count(c, r, &count, &unknown, err)) != SD_OK) {
            return st;
        }
        if (unknown && is_map) {
            return sd__coder_fail(err, c, SD_EPROTO, "map field with count -1");
        }
        v = is_map ? sd_value_map() : sd_value_list();
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
                    st = decode_field(c, part == 0 ? t->element : t->value, r, true, depth, &item,
                                      err);
                    if (st == SD_OK && add_item(v, item) != SD_OK) {
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
        if (add_item(row, sd_value_null()) != SD_OK) {
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
        v = bytes_value(c->kind == SD_CODER_BYTES ? SD_VALUE_BYTES : SD_VALUE_STRING, bytes.ptr,
                        bytes.len);
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
    case SD_CODER_LENGTH_PREFIX: {
        if (sd_reader_lp(r, &bytes) != SD_OK) {
            return short_input(err, c, "a length-prefixed value");
        }
        if (!c->components[0]->known) {
            v = sd_value_bytes(bytes.ptr, bytes.len);
            break;
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
    case SD_CODER_PARAM_WINDOWED_VALUE: {
        sd_wv_header hdr;
        sd_value *windows = NULL, *elem = NULL;
        sd_wv_header_init(&hdr);
        if (c->kind == SD_CODER_PARAM_WINDOWED_VALUE) {
            hdr.ts = c->param->ts;
            hdr.pane = c->param->pane;
            st = sd_windows_set(&hdr.windows, sd_windows_items(&c->param->windows),
                                c->param->windows.n);
            if (st != SD_OK) {
                st = oom(err, c);
            }
        } else {
            if (sd_coder_get_ts(r, &hdr.ts) != SD_OK) {
                st = short_input(err, c, "an 8-byte timestamp");
            } else if ((st = sd__windows_decode(c, c->components[1], r, &hdr.windows, err)) ==
                       SD_OK) {
                sd_err sub;
                sd_err_clear(&sub);
                if (sd_pane_decode(r, &hdr.pane, &sub) != SD_OK) {
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
        v = sd_value_wv(ts, windows, &pane, elem);
        break;
    }
    case SD_CODER_TIMER: {
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
        v = sd_value_timer(key, (const char *)t.tag.ptr, t.tag.len, windows, t.clear, t.fire,
                           t.hold, &t.pane);
        sd_timer_deinit(&t);
        break;
    }
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

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static sd_status wrong_kind(sd_err *err, const sd_coder *c, const sd_value *v, const char *want)
{
    return sd__coder_fail(err, c, SD_EINVAL, "cannot encode a %s value (expected %s)",
                          v ? sd_value_kind_name(v->kind) : "missing", want);
}

static sd_status put_failed(sd_err *err, const sd_coder *c, sd_status st)
{
    return sd__coder_fail(err, c, st, "cannot append to the output (%s)", sd_status_name(st));
}

static sd_status
encode(const sd_coder *c, const sd_value *v, bool nested, sd_buf *out, sd_err *err);

static sd_status encode_windows(const sd_coder *c,
                                const sd_coder *window_coder,
                                const sd_value *list,
                                sd_buf *out,
                                sd_err *err)
{
    if (list == NULL || list->kind != SD_VALUE_LIST) {
        return wrong_kind(err, c, list, "a list of windows");
    }
    sd_status st = sd_iterable_encode_begin(out, list->n_items);
    if (st != SD_OK) {
        return put_failed(err, c, st);
    }
    for (size_t i = 0; i < list->n_items; i++) {
        const sd_value *w = list->items[i];
        if (w->kind != SD_VALUE_WINDOW) {
            return wrong_kind(err, c, w, "a window");
        }
        if ((st = sd_window_encode(window_coder, &w->window, out, err)) != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

static sd_status encode_row(const sd_coder *c,
                            const sd_schema *s,
                            const sd_value *v,
                            int depth,
                            sd_buf *out,
                            sd_err *err);

/* A decimal field from its text (see decode_decimal); the scale as a 32-bit varint (Java). */
static sd_status encode_decimal(const sd_coder *c, const sd_value *v, sd_buf *out, sd_err *err)
{
    if (v->kind != SD_VALUE_BYTES && v->kind != SD_VALUE_STRING) {
        return wrong_kind(err, c, v, "bytes or a string holding a decimal");
    }
    sd_buf unscaled = { 0 };
    sd_err sub;
    int32_t scale = 0;
    sd_err_clear(&sub);
    sd_status st = sd__decimal_parse(sd_bytes_make(v->bytes, v->len), &scale, &unscaled, &sub);
    if (st != SD_OK) {
        st = sd__coder_fail(err, c, st, "%s", sd_err_msg(&sub));
    } else if ((st = sd_buf_put_varint(out, (uint32_t)scale)) != SD_OK ||
               (st = sd_buf_put_lp(out, sd_buf_bytes(&unscaled))) != SD_OK) {
        st = put_failed(err, c, st);
    }
    sd_buf_deinit(&unscaled);
    return st;
}

static sd_status encode_field(const sd_coder *c,
                              const sd_field_type *t,
                              const sd_value *v,
                              bool wrapped_nullable,
                              int depth,
                              sd_buf *out,
                              sd_err *err)
{
    sd_status st;
    if (wrapped_nullable && t->nullable) {
        if (v->kind == SD_VALUE_NULL) {
            st = sd_buf_append_byte(out, 0);
            return st == SD_OK ? SD_OK : put_failed(err, c, st);
        }
        if ((st = sd_buf_append_byte(out, 1)) != SD_OK) {
            return put_failed(err, c, st);
        }
    } else if (v->kind == SD_VALUE_NULL) {
        return sd__coder_fail(err, c, SD_EINVAL, "null value for a non-nullable type");
    }
    switch (t->kind) {
    case SD_FIELD_ATOMIC:
        switch (t->atomic) {
        case SD_ATOMIC_BYTE:
        case SD_ATOMIC_INT16:
        case SD_ATOMIC_INT32:
        case SD_ATOMIC_INT64: {
            if (v->kind != SD_VALUE_INT) {
                return wrong_kind(err, c, v, "an int");
            }
            int64_t lo = t->atomic == SD_ATOMIC_BYTE    ? INT8_MIN
                         : t->atomic == SD_ATOMIC_INT16 ? INT16_MIN
                         : t->atomic == SD_ATOMIC_INT32 ? INT32_MIN
                                                        : INT64_MIN;
            int64_t hi = t->atomic == SD_ATOMIC_BYTE    ? INT8_MAX
                         : t->atomic == SD_ATOMIC_INT16 ? INT16_MAX
                         : t->atomic == SD_ATOMIC_INT32 ? INT32_MAX
                                                        : INT64_MAX;
            if (v->i < lo || v->i > hi) {
                return sd__coder_fail(err, c, SD_EINVAL,
                                      "integer %lld out of range for the "
                                      "field type",
                                      (long long)v->i);
            }
            if (t->atomic == SD_ATOMIC_BYTE) {
                st = sd_buf_append_byte(out, (uint8_t)(int8_t)v->i);
            } else if (t->atomic == SD_ATOMIC_INT16) {
                uint16_t u = (uint16_t)(int16_t)v->i;
                uint8_t two[2] = { (uint8_t)(u >> 8), (uint8_t)u };
                st = sd_buf_append(out, two, 2);
            } else if (t->atomic == SD_ATOMIC_INT32) {
                st = sd_buf_put_varint(out, (uint32_t)(int32_t)v->i);
            } else {
                st = sd_buf_put_varint(out, (uint64_t)v->i);
            }
            break;
        }
        case SD_ATOMIC_FLOAT: {
            if (v->kind != SD_VALUE_DOUBLE) {
                return wrong_kind(err, c, v, "a double");
            }
            float f = (float)v->d;
            uint32_t raw;
            memcpy(&raw, &f, sizeof(raw));
            st = sd_buf_put_be32(out, raw);
            break;
        }
        case SD_ATOMIC_DOUBLE: {
            if (v->kind != SD_VALUE_DOUBLE) {
                return wrong_kind(err, c, v, "a double");
            }
            uint64_t raw;
            memcpy(&raw, &v->d, sizeof(raw));
            st = sd_buf_put_be64(out, raw);
            break;
        }
        case SD_ATOMIC_STRING:
        case SD_ATOMIC_BYTES:
            if (v->kind != SD_VALUE_STRING && v->kind != SD_VALUE_BYTES) {
                return wrong_kind(err, c, v, "a string or bytes");
            }
            st = sd_buf_put_lp(out, sd_bytes_make(v->bytes, v->len));
            break;
        case SD_ATOMIC_BOOLEAN:
            if (v->kind != SD_VALUE_BOOL) {
                return wrong_kind(err, c, v, "a bool");
            }
            st = sd_buf_append_byte(out, v->b ? 1 : 0);
            break;
        default:
            return sd__coder_fail(err, c, SD_EPROTO, "unsupported atomic type %d", (int)t->atomic);
        }
        return st == SD_OK ? SD_OK : put_failed(err, c, st);
    case SD_FIELD_ARRAY:
    case SD_FIELD_ITERABLE:
    case SD_FIELD_MAP: {
        bool is_map = t->kind == SD_FIELD_MAP;
        if (v->kind != (is_map ? SD_VALUE_MAP : SD_VALUE_LIST) || (is_map && v->n_items % 2 != 0)) {
            return wrong_kind(err, c, v, is_map ? "a map" : "a list");
        }
        size_t n = is_map ? v->n_items / 2 : v->n_items;
        if ((st = sd_iterable_encode_begin(out, n)) != SD_OK) {
            return put_failed(err, c, st);
        }
        for (size_t i = 0; i < v->n_items; i++) {
            const sd_field_type *et = is_map && i % 2 == 1 ? t->value : t->element;
            if ((st = encode_field(c, et, v->items[i], true, depth, out, err)) != SD_OK) {
                return st;
            }
        }
        return SD_OK;
    }
    case SD_FIELD_ROW:
        return encode_row(c, t->row, v, depth + 1, out, err);
    case SD_FIELD_LOGICAL:
        switch (t->logical) {
        case SD_LOGICAL_MILLIS_INSTANT:
            if (v->kind != SD_VALUE_INT) {
                return wrong_kind(err, c, v, "an int (millis_instant: ms since the epoch)");
            }
            st = sd_coder_put_ts(out, v->i);
            return st == SD_OK ? SD_OK : put_failed(err, c, st);
        case SD_LOGICAL_DECIMAL:
            return encode_decimal(c, v, out, err);
        case SD_LOGICAL_AS_REPR:
        default:
            return encode_field(c, t->repr, v, false, depth, out, err);
        }
    default:
        return sd__coder_fail(err, c, SD_EPROTO, "field type without a type");
    }
}

static sd_status encode_row(const sd_coder *c,
                            const sd_schema *s,
                            const sd_value *v,
                            int depth,
                            sd_buf *out,
                            sd_err *err)
{
    sd_status st;
    if (depth > 64) {
        return sd__coder_fail(err, c, SD_EINVAL, "rows nested too deeply");
    }
    if (v->kind != SD_VALUE_ROW || v->n_items != s->n_fields) {
        if (v->kind == SD_VALUE_ROW) {
            return sd__coder_fail(err, c, SD_EINVAL, "row value has %zu fields, schema %s has %zu",
                                  v->n_items, s->id, s->n_fields);
        }
        return wrong_kind(err, c, v, "a row");
    }
    if ((st = sd_buf_put_varint(out, s->n_fields)) != SD_OK) {
        return put_failed(err, c, st);
    }
    size_t mask_len = (s->n_fields + 7) / 8;
    bool any_null = false;
    for (size_t i = 0; i < s->n_fields; i++) {
        any_null = any_null || v->items[i]->kind == SD_VALUE_NULL;
    }
    if (!any_null) {
        st = sd_buf_append_byte(out, 0);
    } else {
        st = sd_buf_put_varint(out, mask_len);
        for (size_t k = 0; k < mask_len && st == SD_OK; k++) {
            uint8_t bits = 0;
            for (size_t i = k * 8; i < s->n_fields && i < k * 8 + 8; i++) {
                if (v->items[i]->kind == SD_VALUE_NULL) {
                    bits |= (uint8_t)(1u << (i & 7));
                }
            }
            st = sd_buf_append_byte(out, bits);
        }
    }
    if (st != SD_OK) {
        return put_failed(err, c, st);
    }
    for (size_t j = 0; j < s->n_fields; j++) {
        size_t i = s->order[j];
        const sd_value *fv = v->items[i];
        if (fv->kind == SD_VALUE_NULL) {
            if (!s->fields[i].type->nullable) {
                return sd__coder_fail(err, c, SD_EINVAL, "null for non-nullable field \"%s\"",
                                      s->fields[i].name);
            }
            continue;
        }
        if ((st = encode_field(c, s->fields[i].type, fv, false, depth, out, err)) != SD_OK) {
            sd_err_prefix(err, "field \"%s\": ", s->fields[i].name);
            return st;
        }
    }
    return SD_OK;
}

static sd_status encode_list(const sd_coder *c, const sd_value *v, sd_buf *out, sd_err *err)
{
    sd_status st;
    if (v->kind != SD_VALUE_LIST) {
        return wrong_kind(err, c, v, "a list");
    }
    if (v->has_token) {
        if (c->kind != SD_CODER_STATE_BACKED_ITERABLE) {
            return sd__coder_fail(err, c, SD_EINVAL,
                                  "only a state-backed iterable can carry a "
                                  "continuation token");
        }
        /* Unknown-length form: one block with the elements, then -1 and the token. */
        if ((st = sd_buf_put_be32(out, UINT32_MAX)) != SD_OK ||
            (v->n_items > 0 && (st = sd_buf_put_varint(out, v->n_items)) != SD_OK)) {
            return put_failed(err, c, st);
        }
    } else if ((st = sd_iterable_encode_begin(out, v->n_items)) != SD_OK) {
        return put_failed(err, c, st);
    }
    for (size_t i = 0; i < v->n_items; i++) {
        if ((st = encode(c->components[0], v->items[i], true, out, err)) != SD_OK) {
            return st;
        }
    }
    if (v->has_token) {
        if ((st = sd_buf_put_varint(out, UINT64_MAX)) != SD_OK ||
            (st = sd_buf_put_lp(out, sd_bytes_make(v->bytes, v->len))) != SD_OK) {
            return put_failed(err, c, st);
        }
    }
    return SD_OK;
}

static sd_status encode(const sd_coder *c, const sd_value *v, bool nested, sd_buf *out, sd_err *err)
{
    sd_status st;
    if (v == NULL) {
        return sd__coder_fail(err, c, SD_EINVAL, "missing value");
    }
    switch (c->kind) {
    case SD_CODER_BYTES:
    case SD_CODER_STRING_UTF8:
        if (v->kind != SD_VALUE_BYTES && v->kind != SD_VALUE_STRING) {
            return wrong_kind(err, c, v, "bytes or string");
        }
        st = nested ? sd_buf_put_lp(out, sd_bytes_make(v->bytes, v->len))
                    : sd_buf_append(out, v->bytes, v->len);
        break;
    case SD_CODER_VARINT:
        if (v->kind != SD_VALUE_INT) {
            return wrong_kind(err, c, v, "an int");
        }
        st = sd_buf_put_varint(out, (uint64_t)v->i);
        break;
    case SD_CODER_DOUBLE: {
        uint64_t raw;
        if (v->kind != SD_VALUE_DOUBLE) {
            return wrong_kind(err, c, v, "a double");
        }
        memcpy(&raw, &v->d, sizeof(raw));
        st = sd_buf_put_be64(out, raw);
        break;
    }
    case SD_CODER_BOOL:
        if (v->kind != SD_VALUE_BOOL) {
            return wrong_kind(err, c, v, "a bool");
        }
        st = sd_buf_append_byte(out, v->b ? 1 : 0);
        break;
    case SD_CODER_KV:
        if (v->kind != SD_VALUE_KV) {
            return wrong_kind(err, c, v, "a kv");
        }
        if ((st = encode(c->components[0], v->items[0], true, out, err)) != SD_OK) {
            return st;
        }
        return encode(c->components[1], v->items[1], nested, out, err);
    case SD_CODER_ITERABLE:
    case SD_CODER_STATE_BACKED_ITERABLE:
        return encode_list(c, v, out, err);
    case SD_CODER_NULLABLE:
        if (v->kind == SD_VALUE_NULL) {
            st = sd_buf_append_byte(out, 0);
            break;
        }
        if ((st = sd_buf_append_byte(out, 1)) != SD_OK) {
            return put_failed(err, c, st);
        }
        return encode(c->components[0], v, nested, out, err);
    case SD_CODER_LENGTH_PREFIX: {
        if (!c->components[0]->known) {
            if (v->kind != SD_VALUE_BYTES) {
                return wrong_kind(err, c, v, "bytes (the component coder is unknown)");
            }
            st = sd_buf_put_lp(out, sd_bytes_make(v->bytes, v->len));
            break;
        }
        sd_buf inner;
        sd_buf_init(&inner, out->max_size);
        if ((st = encode(c->components[0], v, false, &inner, err)) == SD_OK &&
            (st = sd_buf_put_lp(out, sd_buf_bytes(&inner))) != SD_OK) {
            st = put_failed(err, c, st);
        }
        sd_buf_deinit(&inner);
        return st;
    }
    case SD_CODER_GLOBAL_WINDOW:
    case SD_CODER_INTERVAL_WINDOW:
    case SD_CODER_CUSTOM_WINDOW:
        if (v->kind != SD_VALUE_WINDOW) {
            return wrong_kind(err, c, v, "a window");
        }
        return sd_window_encode(c, &v->window, out, err);
    case SD_CODER_WINDOWED_VALUE:
    case SD_CODER_PARAM_WINDOWED_VALUE:
        if (v->kind != SD_VALUE_WV) {
            return wrong_kind(err, c, v, "a windowed value");
        }
        if (c->kind == SD_CODER_WINDOWED_VALUE) {
            if ((st = sd_coder_put_ts(out, v->ts)) != SD_OK) {
                return put_failed(err, c, st);
            }
            if ((st = encode_windows(c, c->components[1], v->items[1], out, err)) != SD_OK) {
                return st;
            }
            if ((st = sd_pane_encode(&v->pane, out)) != SD_OK) {
                return sd__coder_fail(err, c, st, "cannot encode the pane");
            }
        }
        return encode(c->components[0], v->items[0], nested, out, err);
    case SD_CODER_TIMER:
        if (v->kind != SD_VALUE_TIMER) {
            return wrong_kind(err, c, v, "a timer");
        }
        if ((st = encode(c->components[0], v->items[0], true, out, err)) != SD_OK) {
            return st;
        }
        if ((st = sd_buf_put_lp(out, sd_bytes_make(v->bytes, v->len))) != SD_OK) {
            return put_failed(err, c, st);
        }
        if ((st = encode_windows(c, c->components[1], v->items[1], out, err)) != SD_OK) {
            return st;
        }
        if ((st = sd_buf_append_byte(out, v->b ? 1 : 0)) != SD_OK) {
            return put_failed(err, c, st);
        }
        if (v->b) {
            return SD_OK;
        }
        if ((st = sd_coder_put_ts(out, v->ts)) != SD_OK ||
            (st = sd_coder_put_ts(out, v->hold)) != SD_OK) {
            return put_failed(err, c, st);
        }
        st = sd_pane_encode(&v->pane, out);
        break;
    case SD_CODER_ROW:
        return encode_row(c, c->schema, v, 0, out, err);
    case SD_CODER_SHARDED_KEY:
        if (v->kind != SD_VALUE_SHARDED_KEY) {
            return wrong_kind(err, c, v, "a sharded key");
        }
        if ((st = sd_buf_put_lp(out, sd_bytes_make(v->bytes, v->len))) != SD_OK) {
            return put_failed(err, c, st);
        }
        /* The key is nested in either context (Java and Python both write it so). */
        return encode(c->components[0], v->items[0], true, out, err);
    case SD_CODER_UNKNOWN:
    default:
        return sd__coder_fail(err, c, SD_EUNIMPL, "cannot encode values of an unknown coder");
    }
    return st == SD_OK ? SD_OK : put_failed(err, c, st);
}

sd_status
sd_coder_encode(const sd_coder *coder, const sd_value *v, bool nested, sd_buf *out, sd_err *err)
{
    if (coder == NULL) {
        return sd_err_set(err, SD_EINVAL, "sd_coder_encode: NULL coder");
    }
    return encode(coder, v, nested, out, err);
}
