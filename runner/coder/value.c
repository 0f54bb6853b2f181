/*
 * Sundial: the generic value model for every standard coder (construction, comparison, text).
 *
 * The runner itself mostly skips values (skip.c) and reads headers (window.c). Full decoding
 * (value_decode.c) and encoding (value_encode.c) are for the C SDK, which hands user code real
 * values, and for the tests, which check every cross-SDK vector in standard_coders.yaml both
 * ways. One struct (sd_value) serves every kind; value.h lists which fields each kind uses.
 * The cost is memory (every value carries all fields) and an allocation per node; the benefit
 * is that construction, comparison, printing and destruction are each one short function,
 * which matters more for test and SDK code than speed does. This file holds those functions;
 * the three helpers the decoder shares (sd__coder_value_set_bytes, sd__coder_value_bytes_of,
 * sd__coder_value_add_item) are declared in coder_int.h.
 *
 * A value owns its children and its bytes (always NUL-terminated, so text prints directly):
 * every constructor that takes children takes ownership of them, and frees them when it fails.
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

static sd_value *value_create(sd_value_kind kind)
{
    sd_value *v = sd_calloc(1, sizeof(*v));
    if (v != NULL) {
        v->kind = kind;
    }
    return v;
}

/* Copy n bytes (plus a NUL) into v->bytes, replacing what it held. */
sd_status sd__coder_value_set_bytes(sd_value *v, const void *p, size_t n)
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
    return value_create(SD_VALUE_NULL);
}

sd_value *sd_value_bool(bool b)
{
    sd_value *v = value_create(SD_VALUE_BOOL);
    if (v != NULL) {
        v->b = b;
    }
    return v;
}

sd_value *sd_value_int(int64_t i)
{
    sd_value *v = value_create(SD_VALUE_INT);
    if (v != NULL) {
        v->i = i;
    }
    return v;
}

sd_value *sd_value_double(double d)
{
    sd_value *v = value_create(SD_VALUE_DOUBLE);
    if (v != NULL) {
        v->d = d;
    }
    return v;
}

sd_value *sd__coder_value_bytes_of(sd_value_kind kind, const void *p, size_t n)
{
    sd_value *v = value_create(kind);
    if (v != NULL && sd__coder_value_set_bytes(v, p, n) != SD_OK) {
        sd_value_destroy(v);
        return NULL;
    }
    return v;
}

sd_value *sd_value_bytes(const void *p, size_t n)
{
    return sd__coder_value_bytes_of(SD_VALUE_BYTES, p, n);
}

sd_value *sd_value_string(const char *s, size_t n)
{
    return sd__coder_value_bytes_of(SD_VALUE_STRING, s, n);
}

sd_status sd__coder_value_add_item(sd_value *parent, sd_value *item)
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
    return sd__coder_value_add_item(parent, item);
}

/* A node of kind with the given children (ownership taken; all freed on failure). */
static sd_value *with_items(sd_value_kind kind, sd_value *a, sd_value *b)
{
    sd_value *v = value_create(kind);
    if (v == NULL || a == NULL || (kind != SD_VALUE_SHARDED_KEY && b == NULL)) {
        sd_value_destroy(v);
        sd_value_destroy(a);
        sd_value_destroy(b);
        return NULL;
    }
    if (sd__coder_value_add_item(v, a) != SD_OK) {
        sd_value_destroy(v);
        sd_value_destroy(b);
        return NULL;
    }
    if (b != NULL && sd__coder_value_add_item(v, b) != SD_OK) {
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
    return value_create(SD_VALUE_LIST);
}

sd_value *sd_value_map(void)
{
    return value_create(SD_VALUE_MAP);
}

sd_value *sd_value_row(void)
{
    return value_create(SD_VALUE_ROW);
}

sd_value *sd_value_window(const sd_window *w)
{
    sd_value *v = value_create(SD_VALUE_WINDOW);
    if (v == NULL) {
        return NULL;
    }
    v->window = *w;
    v->window.custom_bytes = SD_BYTES_NULL;
    if (w->custom) {
        if (sd__coder_value_set_bytes(v, w->custom_bytes.ptr, w->custom_bytes.len) != SD_OK) {
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
    if (sd__coder_value_set_bytes(v, tag, tag_len) != SD_OK) {
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
    if (v != NULL && sd__coder_value_set_bytes(v, shard, shard_len) != SD_OK) {
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
