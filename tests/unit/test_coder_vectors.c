/*
 * Sundial tests: every example of Beam's cross-SDK coder vectors (standard_coders.yaml).
 *
 * For each document the coder spec is turned into a pipeline-style coder table and built with
 * sd_coder_build. For each example, in the context(s) the document names (both when `nested`
 * is missing): decode the bytes and compare with the expected value built from the YAML,
 * check that sd_coder_skip consumes exactly the example's bytes, and re-encode and compare
 * bytes unless the coder is marked non_deterministic. Windowed values, timers and KVs are also
 * run through the runner-side helpers (sd_wv_decode, sd_timer_decode, sd_kv_split). The number
 * of examples is counted a second way, by scanning the raw text, and the two counts must
 * agree, so a construct the YAML reader mis-parses cannot silently drop examples.
 *
 * Expected values follow the Python SDK's reading of the YAML (standard_coders_test.py):
 * FLOAT row fields are float32 values; a millis_instant field's YAML number is the wire word
 * with its sign bit flipped (our value is the milliseconds); a decimal field's YAML text is its
 * BYTES value; a custom window's YAML is its component window; and a state-backed iterable's
 * continuation tokens are resolved through the coder spec's `state` map, as a runner's state
 * API would serve them, so the expected value is the whole iterable.
 *
 * Where the vectors come from: Beam's Python SDK ships the file as
 * apache_beam/portability/api/standard_coders.yaml, and tools/setup.sh installs the pinned
 * SDK into a venv in the build directory. The path is, in order: the environment variable
 * SD_CODER_VECTORS (a file), else the one match of
 * SD_PY_VENV_DIR/lib/python3.x/site-packages/apache_beam/portability/api/standard_coders.yaml
 * (SD_PY_VENV_DIR is BUILD_DIR/py, compiled in by CMake). Without either the test fails and
 * says to run tools/setup.sh: it never passes without having read the vectors.
 */
#include <errno.h>
#include <glob.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/coder/coder.h"
#include "runner/coder/schema.h"
#include "runner/coder/value.h"
#include "test_coder_yaml.h"

#ifndef SD_PY_VENV_DIR
#error "SD_PY_VENV_DIR (the build directory's Python venv) must be defined by CMake"
#endif
#define VECTORS_IN_VENV \
    SD_PY_VENV_DIR "/lib/python3*/site-packages/apache_beam/portability/api/standard_coders.yaml"

/* ------------------------------------------------------------------------------------------ */
/* File loading and the independent example count                                            */
/* ------------------------------------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = sd_malloc(cap);
    for (;;) {
        if (buf == NULL) {
            fclose(f);
            return NULL;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            break;
        }
        if (n + 1 == cap) {
            cap *= 2;
            char *nb = sd_realloc(buf, cap);
            if (nb == NULL) {
                sd_free(buf);
                buf = NULL;
            } else {
                buf = nb;
            }
        }
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/*
 * Count example entries by scanning lines: inside an "examples:" block, a line whose first
 * character (after indentation) is a double quote and whose quoted string is followed by ':'.
 */
static size_t count_examples_in_text(const char *s)
{
    size_t count = 0;
    bool in_examples = false;
    const char *line = s;
    while (*line != '\0') {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (len >= 3 && strncmp(line, "---", 3) == 0) {
            in_examples = false;
        } else if (len >= 9 && strncmp(line, "examples:", 9) == 0) {
            in_examples = true;
        } else if (in_examples && len > 0 && line[0] != ' ' && line[0] != '#') {
            in_examples = false;
        } else if (in_examples) {
            size_t i = 0;
            while (i < len && line[i] == ' ') {
                i++;
            }
            if (i < len && line[i] == '"') {
                for (i++; i < len && line[i] != '"'; i++) {
                    if (line[i] == '\\') {
                        i++;
                    }
                }
                i++;
                while (i < len && line[i] == ' ') {
                    i++;
                }
                if (i < len && line[i] == ':') {
                    count++;
                }
            }
        }
        line = eol ? eol + 1 : line + len;
    }
    return count;
}

/* ------------------------------------------------------------------------------------------ */
/* Coder specs -> a coder table -> sd_coder_build                                             */
/* ------------------------------------------------------------------------------------------ */

#define MAX_SPECS 32

typedef struct spec_entry {
    char id[16];
    const char *urn;
    unsigned char payload[1024];
    size_t payload_len;
    const char *comp_ids[4];
    size_t n_comps;
} spec_entry;

typedef struct spec_table {
    spec_entry entries[MAX_SPECS];
    size_t n;
} spec_table;

static bool table_lookup(void *ctx,
                         const char *id,
                         const char **urn,
                         sd_bytes *payload,
                         const char *const **component_ids,
                         size_t *n_components)
{
    spec_table *t = ctx;
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->entries[i].id, id) == 0) {
            *urn = t->entries[i].urn;
            *payload = sd_bytes_make(t->entries[i].payload, t->entries[i].payload_len);
            *component_ids = t->entries[i].comp_ids;
            *n_components = t->entries[i].n_comps;
            return true;
        }
    }
    return false;
}

/* Add spec (a map with urn, components, payload) and its components; returns its index. */
static int add_spec(spec_table *t, const ty_node *spec)
{
    const ty_node *urn = ty_get(spec, "urn");
    const ty_node *comps = ty_get(spec, "components");
    const ty_node *payload = ty_get(spec, "payload");
    if (urn == NULL || t->n == MAX_SPECS) {
        return -1;
    }
    int idx = (int)t->n++;
    spec_entry *e = &t->entries[idx];
    snprintf(e->id, sizeof(e->id), "c%d", idx);
    e->urn = urn->text;
    if (payload != NULL && (payload->len > sizeof(e->payload) ||
                            !ty_latin1(payload->text, payload->len, e->payload, &e->payload_len))) {
        return -1;
    }
    if (comps != NULL) {
        if (comps->kind != TY_SEQ || comps->n > 4) {
            return -1;
        }
        for (size_t i = 0; i < comps->n; i++) {
            int ci = add_spec(t, comps->values[i]);
            if (ci < 0) {
                return -1;
            }
            /* entries never move (fixed array), so the id pointer stays valid */
            t->entries[idx].comp_ids[t->entries[idx].n_comps++] = t->entries[ci].id;
        }
    }
    return idx;
}

/* ------------------------------------------------------------------------------------------ */
/* Expected values from YAML                                                                  */
/* ------------------------------------------------------------------------------------------ */

static bool is_null(const ty_node *y)
{
    return y == NULL || (y->kind == TY_PLAIN && (ty_is(y, "null") || ty_is(y, "~")));
}

static bool parse_int(const ty_node *y, int64_t *out)
{
    if (y == NULL || (y->kind != TY_PLAIN && y->kind != TY_QUOTED)) {
        return false;
    }
    char *end;
    errno = 0;
    long long v = strtoll(y->text, &end, 10);
    if (errno != 0 || end == y->text || *end != '\0') {
        return false;
    }
    *out = v;
    return true;
}

static bool parse_bool(const ty_node *y, bool *out)
{
    if (ty_is(y, "True") || ty_is(y, "true")) {
        *out = true;
        return true;
    }
    if (ty_is(y, "False") || ty_is(y, "false")) {
        *out = false;
        return true;
    }
    return false;
}

static bool parse_double(const ty_node *y, double *out)
{
    if (y == NULL || (y->kind != TY_PLAIN && y->kind != TY_QUOTED)) {
        return false;
    }
    char *end;
    *out = strtod(y->text, &end);
    return end != y->text && *end == '\0';
}

static bool parse_pane(const ty_node *y, sd_pane *p)
{
    static const char *const timings[] = { "EARLY", "ON_TIME", "LATE", "UNKNOWN" };
    const ty_node *timing = ty_get(y, "timing");
    if (y == NULL || y->kind != TY_MAP || !parse_bool(ty_get(y, "is_first"), &p->first) ||
        !parse_bool(ty_get(y, "is_last"), &p->last) || !parse_int(ty_get(y, "index"), &p->index) ||
        !parse_int(ty_get(y, "on_time_index"), &p->nonspec_index)) {
        return false;
    }
    for (int i = 0; i < 4; i++) {
        if (ty_is(timing, timings[i])) {
            p->timing = i;
            return true;
        }
    }
    return false;
}

static sd_value *expected_from_field(const sd_field_type *t, const ty_node *y);

static sd_value *expected_row(const sd_schema *s, const ty_node *y)
{
    if (y == NULL || y->kind != TY_MAP) {
        return NULL;
    }
    sd_value *row = sd_value_row();
    for (size_t i = 0; row != NULL && i < s->n_fields; i++) {
        sd_value *fv = expected_from_field(s->fields[i].type, ty_get(y, s->fields[i].name));
        if (sd_value_push(row, fv) != SD_OK) {
            sd_value_destroy(row);
            row = NULL;
        }
    }
    return row;
}

static sd_value *expected_from_field(const sd_field_type *t, const ty_node *y)
{
    int64_t i;
    double d;
    bool b;
    if (is_null(y)) {
        return sd_value_null();
    }
    switch (t->kind) {
    case SD_FIELD_ATOMIC:
        switch (t->atomic) {
        case SD_ATOMIC_BYTE:
        case SD_ATOMIC_INT16:
        case SD_ATOMIC_INT32:
        case SD_ATOMIC_INT64:
            return parse_int(y, &i) ? sd_value_int(i) : NULL;
        case SD_ATOMIC_FLOAT:
            /* The value is a float32 (Python parses it with np.float32), held as a double. */
            return parse_double(y, &d) ? sd_value_double((double)(float)d) : NULL;
        case SD_ATOMIC_DOUBLE:
            return parse_double(y, &d) ? sd_value_double(d) : NULL;
        case SD_ATOMIC_STRING:
            return sd_value_string(y->text, y->len);
        case SD_ATOMIC_BYTES:
            return sd_value_bytes(y->text, y->len);
        case SD_ATOMIC_BOOLEAN:
            return parse_bool(y, &b) ? sd_value_bool(b) : NULL;
        default:
            return NULL;
        }
    case SD_FIELD_ARRAY:
    case SD_FIELD_ITERABLE: {
        if (y->kind != TY_SEQ) {
            return NULL;
        }
        sd_value *list = sd_value_list();
        for (size_t k = 0; list != NULL && k < y->n; k++) {
            if (sd_value_push(list, expected_from_field(t->element, y->values[k])) != SD_OK) {
                sd_value_destroy(list);
                list = NULL;
            }
        }
        return list;
    }
    case SD_FIELD_MAP: {
        if (y->kind != TY_MAP) {
            return NULL;
        }
        sd_value *map = sd_value_map();
        for (size_t k = 0; map != NULL && k < y->n; k++) {
            if (sd_value_push(map, expected_from_field(t->element, y->keys[k])) != SD_OK ||
                sd_value_push(map, expected_from_field(t->value, y->values[k])) != SD_OK) {
                sd_value_destroy(map);
                map = NULL;
            }
        }
        return map;
    }
    case SD_FIELD_ROW:
        return expected_row(t->row, y);
    case SD_FIELD_LOGICAL:
        if (t->logical == SD_LOGICAL_MILLIS_INSTANT) {
            /*
             * The YAML gives this representation as the 8-byte word read as a signed integer,
             * i.e. with the sign bit still flipped (Python's MillisInstant.to_language_type
             * flips it back). Our value is the milliseconds themselves, so flip it here.
             */
            return parse_int(y, &i) ? sd_value_int((int64_t)((uint64_t)i ^ (UINT64_C(1) << 63)))
                                    : NULL;
        }
        /* Decimals: the YAML text is the BYTES value itself, as in Python's representation. */
        return expected_from_field(t->repr, y);
    default:
        return NULL;
    }
}

static sd_value *expected(const sd_coder *c, const ty_node *y);

static sd_value *expected_windows(const sd_coder *wc, const ty_node *y)
{
    if (y == NULL || y->kind != TY_SEQ) {
        return NULL;
    }
    sd_value *list = sd_value_list();
    for (size_t k = 0; list != NULL && k < y->n; k++) {
        if (sd_value_push(list, expected(wc, y->values[k])) != SD_OK) {
            sd_value_destroy(list);
            list = NULL;
        }
    }
    return list;
}

/*
 * A custom window's YAML is its component window. Our value is the custom window the wire
 * carries: that window's max timestamp and its encoding with the component coder.
 */
static sd_value *expected_custom_window(const sd_coder *c, const ty_node *y)
{
    sd_value *inner = expected(c->components[0], y);
    if (inner == NULL || inner->kind != SD_VALUE_WINDOW) {
        sd_value_destroy(inner);
        return NULL;
    }
    sd_buf enc = { 0 };
    sd_value *v = NULL;
    if (sd_window_encode(c->components[0], &inner->window, &enc, NULL) == SD_OK) {
        sd_window w = { .start = SD_TIME_MIN,
                        .end = sd_window_max_ts(&inner->window) + 1,
                        .custom = true,
                        .custom_bytes = sd_buf_bytes(&enc) };
        v = sd_value_window(&w);
    }
    sd_buf_deinit(&enc);
    sd_value_destroy(inner);
    return v;
}

static sd_value *expected(const sd_coder *c, const ty_node *y)
{
    int64_t i, j;
    double d;
    bool b;
    if (y == NULL) {
        return NULL;
    }
    switch (c->kind) {
    case SD_CODER_BYTES:
        return y->kind == TY_PLAIN || y->kind == TY_QUOTED ? sd_value_bytes(y->text, y->len) : NULL;
    case SD_CODER_STRING_UTF8:
        return y->kind == TY_PLAIN || y->kind == TY_QUOTED ? sd_value_string(y->text, y->len)
                                                           : NULL;
    case SD_CODER_VARINT:
        return parse_int(y, &i) ? sd_value_int(i) : NULL;
    case SD_CODER_BOOL:
        return parse_bool(y, &b) ? sd_value_bool(b) : NULL;
    case SD_CODER_DOUBLE:
        return parse_double(y, &d) ? sd_value_double(d) : NULL;
    case SD_CODER_KV:
        return sd_value_kv(expected(c->components[0], ty_get(y, "key")),
                           expected(c->components[1], ty_get(y, "value")));
    case SD_CODER_ITERABLE:
    case SD_CODER_STATE_BACKED_ITERABLE: {
        if (y->kind != TY_SEQ) {
            return NULL;
        }
        sd_value *list = sd_value_list();
        for (size_t k = 0; list != NULL && k < y->n; k++) {
            if (sd_value_push(list, expected(c->components[0], y->values[k])) != SD_OK) {
                sd_value_destroy(list);
                list = NULL;
            }
        }
        return list;
    }
    case SD_CODER_NULLABLE:
        return is_null(y) ? sd_value_null() : expected(c->components[0], y);
    case SD_CODER_LENGTH_PREFIX:
        return expected(c->components[0], y);
    case SD_CODER_GLOBAL_WINDOW: {
        sd_window w = sd_window_global();
        return sd_value_window(&w);
    }
    case SD_CODER_INTERVAL_WINDOW: {
        if (!parse_int(ty_get(y, "end"), &i) || !parse_int(ty_get(y, "span"), &j)) {
            return NULL;
        }
        sd_window w = sd_window_interval(i - j, i);
        return sd_value_window(&w);
    }
    case SD_CODER_WINDOWED_VALUE:
    case SD_CODER_PARAM_WINDOWED_VALUE: {
        sd_pane pane;
        if (!parse_int(ty_get(y, "timestamp"), &i) || !parse_pane(ty_get(y, "pane"), &pane)) {
            return NULL;
        }
        return sd_value_wv(i, expected_windows(c->components[1], ty_get(y, "windows")), &pane,
                           expected(c->components[0], ty_get(y, "value")));
    }
    case SD_CODER_TIMER: {
        const ty_node *tag = ty_get(y, "dynamicTimerTag");
        sd_pane pane = SD_PANE_NO_FIRING;
        bool clear;
        i = j = 0;
        if (tag == NULL || !parse_bool(ty_get(y, "clearBit"), &clear)) {
            return NULL;
        }
        if (!clear &&
            (!parse_int(ty_get(y, "fireTimestamp"), &i) ||
             !parse_int(ty_get(y, "holdTimestamp"), &j) || !parse_pane(ty_get(y, "pane"), &pane))) {
            return NULL;
        }
        return sd_value_timer(expected(c->components[0], ty_get(y, "userKey")), tag->text, tag->len,
                              expected_windows(c->components[1], ty_get(y, "windows")), clear, i, j,
                              &pane);
    }
    case SD_CODER_ROW:
        return expected_row(c->schema, y);
    case SD_CODER_SHARDED_KEY: {
        const ty_node *shard = ty_get(y, "shardId");
        if (shard == NULL || (shard->kind != TY_PLAIN && shard->kind != TY_QUOTED)) {
            return NULL;
        }
        return sd_value_sharded_key(shard->text, shard->len,
                                    expected(c->components[0], ty_get(y, "key")));
    }
    case SD_CODER_CUSTOM_WINDOW:
        return expected_custom_window(c, ty_get(y, "window"));
    default:
        return NULL;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Checks                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/*
 * The state a document's state-backed iterables refer to: the coder spec's "state" map from
 * continuation token to the encoded remaining elements, which is what a runner serves for
 * StateKey.runner{key = token}. A token that is not in the map is an error.
 */
static sd_status yaml_state_read(void *ctx, sd_bytes token, sd_buf *out, sd_err *err)
{
    const ty_node *map = ctx;
    for (size_t k = 0; k < map->n; k++) {
        const ty_node *key = map->keys[k];
        const ty_node *val = map->values[k];
        if (key->len != token.len || memcmp(key->text, token.ptr, token.len) != 0) {
            continue;
        }
        unsigned char *raw = sd_malloc(val->len + 1);
        size_t raw_len = 0;
        sd_status st = SD_ENOMEM;
        if (raw != NULL) {
            st = ty_latin1(val->text, val->len, raw, &raw_len)
                     ? sd_buf_append(out, raw, raw_len)
                     : sd_err_set(err, SD_EINVAL, "state for token %.*s is not latin-1",
                                  (int)token.len, (const char *)token.ptr);
        }
        sd_free(raw);
        return st;
    }
    return sd_err_set(err, SD_ENOTFOUND, "no state for continuation token \"%.*s\"", (int)token.len,
                      (const char *)token.ptr);
}

typedef struct totals {
    size_t examples;
    size_t checks; /* example x context */
    size_t reencoded;
    size_t failures;
} totals;

static void
report(totals *t, size_t doc, const char *urn, size_t ex, bool nested, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static void
report(totals *t, size_t doc, const char *urn, size_t ex, bool nested, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    print_error("document %zu (%s) example %zu (%s): %s\n", doc, urn, ex,
                nested ? "nested" : "outer", msg);
    t->failures++;
}

static const char *describe(const sd_value *v, sd_buf *b)
{
    sd_buf_reset(b);
    if (sd_value_describe(v, b) != SD_OK || sd_buf_append_byte(b, '\0') != SD_OK) {
        return "(describe failed)";
    }
    return (const char *)b->data;
}

/* Runner-side helpers must agree with the generic decode. */
static void check_helpers(totals *t,
                          size_t doc,
                          const sd_coder *c,
                          size_t ex,
                          bool nested,
                          sd_bytes bytes,
                          const sd_value *v)
{
    sd_err err;
    sd_err_clear(&err);
    if ((c->kind == SD_CODER_WINDOWED_VALUE || c->kind == SD_CODER_PARAM_WINDOWED_VALUE) &&
        nested) {
        sd_wv_header hdr;
        sd_bytes elem;
        sd_reader r = sd_reader_make(bytes);
        sd_wv_header_init(&hdr);
        if (sd_wv_decode(c, &r, &hdr, &elem, &err) != SD_OK) {
            report(t, doc, c->urn, ex, nested, "sd_wv_decode: %s", sd_err_msg(&err));
        } else {
            const sd_value *wins = v->items[1];
            bool ok = hdr.ts == v->ts && sd_pane_equal(&hdr.pane, &v->pane) &&
                      hdr.windows.n == wins->n_items && sd_reader_done(&r);
            for (size_t i = 0; ok && i < hdr.windows.n; i++) {
                ok = sd_window_equal(&sd_windows_items(&hdr.windows)[i], &wins->items[i]->window);
            }
            if (!ok) {
                report(t, doc, c->urn, ex, nested, "sd_wv_decode header differs");
            }
            sd_buf out = { 0 };
            if (sd_wv_encode(c, &hdr, elem, &out, &err) != SD_OK ||
                !sd_bytes_equal(sd_buf_bytes(&out), bytes)) {
                report(t, doc, c->urn, ex, nested, "sd_wv_encode does not reproduce the bytes");
            }
            sd_buf_deinit(&out);
        }
        sd_wv_header_deinit(&hdr);
    }
    if (c->kind == SD_CODER_TIMER) {
        sd_timer tm;
        sd_reader r = sd_reader_make(bytes);
        sd_timer_init(&tm);
        if (sd_timer_decode(c, &r, &tm, &err) != SD_OK) {
            report(t, doc, c->urn, ex, nested, "sd_timer_decode: %s", sd_err_msg(&err));
        } else {
            bool ok = tm.clear == v->b && sd_reader_done(&r) &&
                      sd_bytes_equal(tm.tag, sd_bytes_make(v->bytes, v->len)) &&
                      tm.windows.n == v->items[1]->n_items &&
                      (tm.clear || (tm.fire == v->ts && tm.hold == v->hold &&
                                    sd_pane_equal(&tm.pane, &v->pane)));
            if (!ok) {
                report(t, doc, c->urn, ex, nested, "sd_timer_decode fields differ");
            }
            sd_buf out = { 0 };
            if (sd_timer_encode(c, &tm, &out, &err) != SD_OK ||
                !sd_bytes_equal(sd_buf_bytes(&out), bytes)) {
                report(t, doc, c->urn, ex, nested, "sd_timer_encode does not reproduce the bytes");
            }
            sd_buf_deinit(&out);
        }
        sd_timer_deinit(&tm);
    }
    if (c->kind == SD_CODER_KV) {
        sd_bytes key, value;
        if (sd_kv_split(c, bytes, &key, &value, &err) != SD_OK) {
            report(t, doc, c->urn, ex, nested, "sd_kv_split: %s", sd_err_msg(&err));
        } else {
            sd_reader kr = sd_reader_make(key);
            sd_value *k = NULL;
            if (sd_coder_decode(c->components[0], &kr, true, &k, &err) != SD_OK ||
                !sd_value_equal(k, v->items[0]) || !sd_reader_done(&kr) ||
                key.len + value.len != bytes.len) {
                report(t, doc, c->urn, ex, nested, "sd_kv_split key differs");
            }
            sd_value_destroy(k);
        }
    }
}

static void check_example(totals *t,
                          size_t doc,
                          const sd_coder *c,
                          const sd_decode_opts *opts,
                          size_t ex,
                          bool nested,
                          bool deterministic,
                          sd_bytes bytes,
                          const sd_value *want)
{
    sd_err err;
    sd_buf d1 = { 0 }, d2 = { 0 };
    sd_value *got = NULL;
    sd_reader r = sd_reader_make(bytes);
    t->checks++;

    sd_err_clear(&err);
    if (sd_coder_decode_with(c, &r, nested, opts, &got, &err) != SD_OK) {
        report(t, doc, c->urn, ex, nested, "decode failed: %s", sd_err_msg(&err));
        return;
    }
    if (!sd_reader_done(&r)) {
        report(t, doc, c->urn, ex, nested, "decode left %zu bytes", sd_reader_left(&r));
    }
    if (!sd_value_equal(got, want)) {
        report(t, doc, c->urn, ex, nested, "decoded %s, expected %s", describe(got, &d1),
               describe(want, &d2));
    }

    /* Skipping consumes exactly the example (with trailing garbage after it when nested). */
    r = sd_reader_make(bytes);
    sd_err_clear(&err);
    if (sd_coder_skip(c, &r, nested, &err) != SD_OK || !sd_reader_done(&r)) {
        report(t, doc, c->urn, ex, nested, "skip did not consume exactly the bytes: %s",
               sd_err_msg(&err));
    }
    if (nested) {
        sd_buf padded = { 0 };
        sd_bytes sliced;
        if (sd_buf_append_bytes(&padded, bytes) != SD_OK ||
            sd_buf_append(&padded, "\x01\x02", 2) != SD_OK) {
            fail_msg("out of memory");
        }
        r = sd_reader_make(sd_buf_bytes(&padded));
        if (sd_coder_slice(c, &r, true, &sliced, &err) != SD_OK || !sd_bytes_equal(sliced, bytes) ||
            sd_reader_left(&r) != 2) {
            report(t, doc, c->urn, ex, nested, "slice with trailing bytes went wrong");
        }
        sd_buf_deinit(&padded);
    }

    if (deterministic) {
        sd_buf enc = { 0 };
        sd_err_clear(&err);
        if (sd_coder_encode(c, want, nested, &enc, &err) != SD_OK) {
            report(t, doc, c->urn, ex, nested, "encode failed: %s", sd_err_msg(&err));
        } else if (!sd_bytes_equal(sd_buf_bytes(&enc), bytes)) {
            report(t, doc, c->urn, ex, nested, "re-encoding gave %zu bytes, expected %zu", enc.len,
                   bytes.len);
        }
        t->reencoded++;
        sd_buf_deinit(&enc);
    } else {
        /* Still must round-trip through our own (deterministic) encoding. */
        sd_buf enc = { 0 };
        sd_value *again = NULL;
        sd_err_clear(&err);
        if (sd_coder_encode(c, got, nested, &enc, &err) != SD_OK) {
            report(t, doc, c->urn, ex, nested, "encode failed: %s", sd_err_msg(&err));
        } else {
            sd_reader rr = sd_reader_make(sd_buf_bytes(&enc));
            if (sd_coder_decode(c, &rr, nested, &again, &err) != SD_OK ||
                !sd_value_equal(again, got)) {
                report(t, doc, c->urn, ex, nested, "own encoding does not round-trip");
            }
        }
        sd_value_destroy(again);
        sd_buf_deinit(&enc);
    }
    check_helpers(t, doc, c, ex, nested, bytes, got);
    sd_value_destroy(got);
    sd_buf_deinit(&d1);
    sd_buf_deinit(&d2);
}

static void run_document(totals *t, size_t doc_index, const ty_node *doc)
{
    const ty_node *spec = ty_get(doc, "coder");
    const ty_node *nested_node = ty_get(doc, "nested");
    const ty_node *examples = ty_get(doc, "examples");
    assert_non_null(spec);
    assert_non_null(examples);
    assert_int_equal(examples->kind, TY_MAP);

    spec_table *table = sd_calloc(1, sizeof(*table));
    assert_non_null(table);
    assert_int_equal(add_spec(table, spec), 0);
    sd_coder_table ct = { .lookup = table_lookup, .ctx = table };
    sd_coder *c = NULL;
    sd_err err;
    sd_err_clear(&err);
    if (sd_coder_build(&ct, "c0", &c, &err) != SD_OK) {
        fail_msg("document %zu: build failed: %s", doc_index, sd_err_msg(&err));
    }
    assert_true(sd_coder_is_known(c));

    bool deterministic = true;
    const ty_node *nd = ty_get(spec, "non_deterministic");
    bool flag = false;
    if (nd != NULL && parse_bool(nd, &flag)) {
        deterministic = !flag;
    }
    sd_decode_opts opts = { 0 };
    const ty_node *state = ty_get(spec, "state");
    if (state != NULL) {
        assert_int_equal(state->kind, TY_MAP);
        opts.state_read = yaml_state_read;
        opts.state_ctx = (void *)state;
    }
    bool contexts[2];
    size_t n_contexts = 0;
    if (nested_node == NULL) {
        contexts[n_contexts++] = false;
        contexts[n_contexts++] = true;
    } else {
        assert_true(parse_bool(nested_node, &flag));
        contexts[n_contexts++] = flag;
    }

    for (size_t i = 0; i < examples->n; i++) {
        const ty_node *key = examples->keys[i];
        unsigned char *raw = sd_malloc(key->len + 1);
        size_t raw_len = 0;
        assert_non_null(raw);
        assert_true(ty_latin1(key->text, key->len, raw, &raw_len));
        sd_value *want = expected(c, examples->values[i]);
        if (want == NULL) {
            report(t, doc_index, c->urn, i, false, "cannot build the expected value from YAML");
        } else {
            for (size_t k = 0; k < n_contexts; k++) {
                check_example(t, doc_index, c, &opts, i, contexts[k], deterministic,
                              sd_bytes_make(raw, raw_len), want);
            }
        }
        t->examples++;
        sd_value_destroy(want);
        sd_free(raw);
    }
    sd_coder_destroy(c);
    sd_free(table);
}

/*
 * Find standard_coders.yaml (see the header). OUT: path (size bytes). On failure fills why
 * with a message that says how to fix it and returns false.
 */
static bool find_vectors(char *path, size_t size, char *why, size_t why_size)
{
    const char *env = getenv("SD_CODER_VECTORS");
    if (env != NULL && env[0] != '\0') {
        snprintf(path, size, "%s", env);
        return true;
    }
    glob_t g;
    int rc = glob(VECTORS_IN_VENV, 0, NULL, &g);
    if (rc != 0 || g.gl_pathc != 1) {
        snprintf(why, why_size,
                 "%s Beam's standard_coders.yaml in the Python venv (%s): run tools/setup.sh "
                 "BUILD_DIR to install apache-beam there, or set SD_CODER_VECTORS to the file",
                 rc == 0 ? "more than one" : "no", VECTORS_IN_VENV);
        if (rc == 0) {
            globfree(&g);
        }
        return false;
    }
    snprintf(path, size, "%s", g.gl_pathv[0]);
    globfree(&g);
    return true;
}

static void test_all_vectors(void **state)
{
    (void)state;
    size_t len = 0;
    char path[4096];
    char why[1024];
    if (!find_vectors(path, sizeof(path), why, sizeof(why))) {
        fail_msg("%s", why);
    }
    char *text = read_file(path, &len);
    if (text == NULL) {
        fail_msg("cannot read %s: %s", path, strerror(errno));
    }
    printf("coder vectors: %s\n", path);
    ty_node **docs = NULL;
    size_t n_docs = 0;
    char errbuf[512];
    if (!ty_parse_stream(text, len, &docs, &n_docs, errbuf, sizeof(errbuf))) {
        fail_msg("%s: %s", path, errbuf);
    }
    totals t = { 0 };
    for (size_t i = 0; i < n_docs; i++) {
        run_document(&t, i, docs[i]);
    }
    size_t text_count = count_examples_in_text(text);
    printf("standard_coders.yaml: %zu documents, %zu examples (text scan: %zu), %zu decode "
           "checks, %zu re-encoded byte-exact, %zu failures\n",
           n_docs, t.examples, text_count, t.checks, t.reencoded, t.failures);
    assert_int_equal(t.examples, text_count);
    assert_true(t.examples > 0);
    assert_int_equal(t.failures, 0);
    ty_free_docs(docs, n_docs);
    sd_free(text);
}

/* The reader (libyaml into ty_node trees): the constructs the vectors rely on. */
static void test_yaml_reader(void **state)
{
    (void)state;
    static const char text[] = "# comment\n"
                               "coder:\n"
                               "  urn: \"beam:coder:kv:v1\"\n"
                               "  components: [{urn: \"a\"},\n"
                               "               {urn: \"b\"}]\n"
                               "nested: false\n"
                               "examples:\n"
                               "  \"\\u00c8\\u0001x\\0\": {key: abc, value: 0}\n"
                               "  \"k2\":\n"
                               "    \"long value\"\n"
                               "  \"k3\": {\n"
                               "    a: [1, 2],\n"
                               "    m: {\"x\": null},\n"
                               "  }\n"
                               "---\n"
                               "coder:\n"
                               "  urn: \"z\"\n"
                               "examples:\n"
                               "  \"\": \"\"\n";
    ty_node **docs;
    size_t n;
    char err[256];
    assert_true(ty_parse_stream(text, sizeof(text) - 1, &docs, &n, err, sizeof(err)));
    assert_int_equal(n, 2);
    const ty_node *coder = ty_get(docs[0], "coder");
    assert_true(ty_is(ty_get(coder, "urn"), "beam:coder:kv:v1"));
    const ty_node *comps = ty_get(coder, "components");
    assert_int_equal(comps->kind, TY_SEQ);
    assert_int_equal(comps->n, 2);
    assert_true(ty_is(ty_get(comps->values[1], "urn"), "b"));
    assert_true(ty_is(ty_get(docs[0], "nested"), "false"));
    const ty_node *ex = ty_get(docs[0], "examples");
    assert_int_equal(ex->n, 3);
    unsigned char raw[16];
    size_t raw_len;
    assert_true(ty_latin1(ex->keys[0]->text, ex->keys[0]->len, raw, &raw_len));
    assert_int_equal(raw_len, 4);
    assert_memory_equal(raw, "\xc8\x01x\0", 4);
    assert_true(ty_is(ex->values[1], "long value"));
    assert_int_equal(ex->values[2]->kind, TY_MAP);
    assert_int_equal(ty_get(ex->values[2], "a")->n, 2);
    assert_true(is_null(ty_get(ty_get(ex->values[2], "m"), "x")));
    assert_int_equal(ty_get(docs[1], "examples")->n, 1);
    assert_int_equal(count_examples_in_text(text), 4);
    ty_free_docs(docs, n);

    static const char bad[] = "coder:\n  urn: \"unterminated\n";
    assert_false(ty_parse_stream(bad, sizeof(bad) - 1, &docs, &n, err, sizeof(err)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yaml_reader),
        cmocka_unit_test(test_all_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
