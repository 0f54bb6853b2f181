/*
 * Sundial: full encoding of sd_value trees with every standard coder.
 *
 * The inverse of value_decode.c, in the same formats (that file's comment describes rows and
 * their fields). A value of the wrong kind for its coder is SD_EINVAL naming the coder and
 * both kinds; a failed append to the output is reported with the sd_buf status (SD_ENOMEM,
 * SD_ETOOBIG, ...). Nothing is rolled back: on error the output may hold a partial encoding
 * beyond its original length, which callers truncate if they need to (value.h).
 */
#include <string.h>

#include "runner/coder/coder_int.h"
#include "runner/coder/schema.h"
#include "runner/coder/value.h"

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
    sd_status st =
        sd__coder_decimal_parse(sd_bytes_make(v->bytes, v->len), &scale, &unscaled, &sub);
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
        case SD_LOGICAL_OPAQUE:
            return sd__coder_opaque_field(err, c, t);
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
    /*
     * Fields a row does not carry (schema evolution: written before they were added) decode
     * as null whatever their nullability, so such a row encodes with as few fields: when a
     * non-nullable field is null and so is every field after it in encoding order, the count
     * stops before that null tail. Any other null in a non-nullable field is refused below.
     */
    size_t n_vals = s->n_fields;
    bool tail_needed = false;
    while (n_vals > 0 && v->items[s->order[n_vals - 1]]->kind == SD_VALUE_NULL) {
        tail_needed = tail_needed || !s->fields[s->order[n_vals - 1]].type->nullable;
        n_vals--;
    }
    if (!tail_needed) {
        n_vals = s->n_fields;
    }
    if ((st = sd_buf_put_varint(out, n_vals)) != SD_OK) {
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
    for (size_t j = 0; j < n_vals; j++) {
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
