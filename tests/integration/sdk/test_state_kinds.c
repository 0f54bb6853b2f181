/*
 * Integration tests for the C SDK's state kinds and timer tags on the embedded runner:
 * combining state (a built-in and a user CombineFn, compacted on read), map state (put, get,
 * remove, keys, clear), ordered-list state (add, range reads, range and whole clears), value
 * state rewritten and cleared, and dynamic timer tags (several
 * tags of one family per key, re-set and cleared, each firing once with its own output
 * timestamp). Every DoFn reports through an event-time timer at 100 s, after all input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/time.h"
#include "sundial/sundial.h"

#define FLUSH_AT 100000

/* ================================================================ helpers */

static sd_status emit_fmt(sd_ctx *c, const char *fmt, ...) SD_PRINTF(2, 3);

static sd_status emit_fmt(sd_ctx *c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof(buf)) {
        return sd_fail(c, "emit_fmt: output too long");
    }
    return sd_emit_str(c, buf, (size_t)len);
}

static sd_bytes key_str(sd_ctx *c)
{
    sd_reader r = sd_reader_make(sd_ctx_key(c));
    sd_bytes k = SD_BYTES_NULL;
    if (sd_read_bytes(&r, &k) != SD_OK) {
        return SD_BYTES_NULL;
    }
    return k;
}

static int64_t read_int(sd_bytes b)
{
    sd_reader r = sd_reader_make(b);
    int64_t v = 0;
    if (sd_read_int(&r, &v) != SD_OK) {
        return INT64_MIN;
    }
    return v;
}

static sd_status flush_timer(sd_ctx *c)
{
    return sd_timer_set(c, "flush", SD_BYTES_NULL, FLUSH_AT, FLUSH_AT);
}

/* ================================================================ combining */

/* A user CombineFn: the longest string seen (accumulator and output: string). */
static sd_status longest_create(sd_bytes config, sd_buf *out, sd_err *err)
{
    (void)config;
    (void)err;
    return sd_enc_str(out, "");
}

static sd_status longest_pick(sd_bytes a, sd_bytes b, sd_buf *out)
{
    sd_reader ra = sd_reader_make(a), rb = sd_reader_make(b);
    sd_bytes sa, sb;
    if (sd_read_bytes(&ra, &sa) != SD_OK || sd_read_bytes(&rb, &sb) != SD_OK) {
        return SD_EPROTO;
    }
    const sd_bytes *w =
        sb.len > sa.len || (sb.len == sa.len && memcmp(sb.ptr, sa.ptr, sa.len) > 0) ? &sb : &sa;
    return sd_enc_bytes(out, w->ptr, w->len);
}

static sd_status longest_add(sd_bytes config, sd_bytes acc, sd_bytes in, sd_buf *out, sd_err *err)
{
    (void)config;
    (void)err;
    return longest_pick(acc, in, out);
}

static sd_status longest_extract(sd_bytes config, sd_bytes acc, sd_buf *out, sd_err *err)
{
    (void)config;
    (void)err;
    return sd_buf_append_bytes(out, acc);
}

/* KV<string, varint>: sum and count per key, plus the longest decimal rendering. */
static sd_status comb_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes k, v;
    char digits[32];
    sd_buf b;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "comb: not a KV");
    }
    sd_status st = sd_state_add(c, "sum", v);
    if (st == SD_OK) {
        st = sd_state_add(c, "count", v);
    }
    int len = snprintf(digits, sizeof(digits), "%lld", (long long)read_int(v));
    sd_buf_init(&b, 0);
    if (st == SD_OK) {
        st = sd_enc_bytes(&b, digits, (size_t)len);
    }
    if (st == SD_OK) {
        st = sd_state_add(c, "longest", sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    /* Read midway for key "u" once, so compaction (clear + merged append) runs too. */
    if (st == SD_OK && read_int(v) == 3) {
        sd_bytes sum;
        st = sd_state_combined(c, "sum", &sum);
        if (st == SD_OK) {
            sd_counter_add(c, "midway_sum", read_int(sum));
        }
    }
    return st == SD_OK ? flush_timer(c) : st;
}

static sd_status comb_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    (void)tag;
    sd_bytes sum, count, longest;
    sd_status st = sd_state_combined(c, "sum", &sum);
    if (st == SD_OK) {
        st = sd_state_combined(c, "count", &count);
    }
    if (st == SD_OK) {
        st = sd_state_combined(c, "longest", &longest);
    }
    if (st != SD_OK) {
        return st;
    }
    sd_reader lr = sd_reader_make(longest);
    sd_bytes ls;
    if (sd_read_bytes(&lr, &ls) != SD_OK) {
        return sd_fail(c, "comb: longest is not a string");
    }
    sd_bytes k = key_str(c);
    st = emit_fmt(c, "%.*s sum=%lld count=%lld longest=%.*s", (int)k.len, (const char *)k.ptr,
                  (long long)read_int(sum), (long long)read_int(count), (int)ls.len,
                  (const char *)ls.ptr);
    /* After a clear the state combines to extract(create()). */
    if (st == SD_OK) {
        st = sd_state_clear(c, "sum");
    }
    if (st == SD_OK && (st = sd_state_combined(c, "sum", &sum)) == SD_OK && read_int(sum) != 0) {
        return sd_fail(c, "comb: sum after clear is %lld", (long long)read_int(sum));
    }
    return st;
}

/* ================================================================ map */

/* KV<string user, string word>: word -> count in map state; "-w" removes word w; "!" clears. */
static sd_status map_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes k, v, word;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "map: not a KV");
    }
    sd_reader r = sd_reader_make(v);
    if (sd_read_bytes(&r, &word) != SD_OK) {
        return sd_fail(c, "map: value is not a string");
    }
    sd_status st = SD_OK;
    sd_buf kb;
    sd_buf_init(&kb, 0);
    if (word.len == 1 && word.ptr[0] == '!') {
        st = sd_state_clear(c, "words");
    } else if (word.len > 0 && word.ptr[0] == '-') {
        st = sd_enc_bytes(&kb, word.ptr + 1, word.len - 1);
        if (st == SD_OK) {
            st = sd_state_map_remove(c, "words", sd_buf_bytes(&kb));
        }
    } else {
        sd_bytes old;
        bool found;
        st = sd_state_map_get(c, "words", v, &old, &found);
        int64_t n = st == SD_OK && found ? read_int(old) : 0;
        if (st == SD_OK) {
            st = sd_enc_int(&kb, n + 1);
        }
        if (st == SD_OK) {
            st = sd_state_map_put(c, "words", v, sd_buf_bytes(&kb));
        }
    }
    sd_buf_deinit(&kb);
    return st == SD_OK ? flush_timer(c) : st;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

static sd_status map_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    (void)tag;
    sd_iter keys;
    sd_bytes mk;
    bool has;
    char items[32][64];
    size_t n = 0;
    char out[512];
    size_t off = 0;
    sd_status st = sd_state_map_keys(c, "words", &keys);
    while (st == SD_OK && (st = sd_iter_next(&keys, &mk, &has)) == SD_OK && has && n < 32) {
        sd_bytes val, w;
        bool found;
        sd_reader r = sd_reader_make(mk);
        if ((st = sd_state_map_get(c, "words", mk, &val, &found)) != SD_OK) {
            break;
        }
        if (sd_read_bytes(&r, &w) != SD_OK || !found) {
            st = sd_fail(c, "map: key without a value");
            break;
        }
        snprintf(items[n], sizeof(items[n]), "%.*s=%lld", (int)w.len, (const char *)w.ptr,
                 (long long)read_int(val));
        n++;
    }
    if (st == SD_OK) {
        qsort(items, n, sizeof(items[0]), cmp_str);
        sd_bytes k = key_str(c);
        off = (size_t)snprintf(out, sizeof(out), "%.*s:", (int)k.len, (const char *)k.ptr);
        for (size_t i = 0; i < n && off < sizeof(out); i++) {
            off +=
                (size_t)snprintf(out + off, sizeof(out) - off, "%s%s", i > 0 ? "," : "", items[i]);
        }
        st = sd_emit_str(c, out, off < sizeof(out) ? off : sizeof(out) - 1);
    }
    return st;
}

/* ================================================================ set */

/* KV<string user, string word>: the user's distinct words in set state; "-w" removes w. The
 * timer emits "user:w1,w2" sorted, and "dup" counts words added twice. */
static sd_status set_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes k, v, word;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "set: not a KV");
    }
    sd_reader r = sd_reader_make(v);
    if (sd_read_bytes(&r, &word) != SD_OK) {
        return sd_fail(c, "set: value is not a string");
    }
    sd_status st = SD_OK;
    sd_buf kb;
    sd_buf_init(&kb, 0);
    if (word.len > 0 && word.ptr[0] == '-') {
        st = sd_enc_bytes(&kb, word.ptr + 1, word.len - 1);
        if (st == SD_OK) {
            st = sd_state_set_remove(c, "words", sd_buf_bytes(&kb));
        }
    } else {
        bool found = false;
        st = sd_state_set_contains(c, "words", v, &found);
        if (st == SD_OK && found) {
            sd_counter_add(c, "dup", 1);
        }
        if (st == SD_OK) {
            st = sd_state_set_add(c, "words", v);
        }
    }
    sd_buf_deinit(&kb);
    return st == SD_OK ? flush_timer(c) : st;
}

static sd_status set_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    (void)tag;
    sd_iter words;
    sd_bytes w;
    bool has;
    char items[32][64];
    size_t n = 0;
    char out[512];
    sd_status st = sd_state_set_read(c, "words", &words);
    while (st == SD_OK && (st = sd_iter_next(&words, &w, &has)) == SD_OK && has && n < 32) {
        sd_bytes s;
        sd_reader r = sd_reader_make(w);
        if (sd_read_bytes(&r, &s) != SD_OK) {
            return sd_fail(c, "set: a value that is not a string");
        }
        snprintf(items[n++], sizeof(items[0]), "%.*s", (int)s.len, (const char *)s.ptr);
    }
    if (st == SD_OK) {
        qsort(items, n, sizeof(items[0]), cmp_str);
        sd_bytes k = key_str(c);
        size_t off = (size_t)snprintf(out, sizeof(out), "%.*s:", (int)k.len, (const char *)k.ptr);
        for (size_t i = 0; i < n && off < sizeof(out); i++) {
            off +=
                (size_t)snprintf(out + off, sizeof(out) - off, "%s%s", i > 0 ? "," : "", items[i]);
        }
        st = sd_emit_str(c, out, off < sizeof(out) ? off : sizeof(out) - 1);
    }
    return st;
}

/* ================================================================ value */

/* KV<string, varint>: value state holds the latest value; 0 clears it. */
static sd_status value_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes k, v;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "value: not a KV");
    }
    sd_status st = read_int(v) == 0 ? sd_state_clear(c, "last") : sd_state_write(c, "last", v);
    return st == SD_OK ? flush_timer(c) : st;
}

static sd_status value_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    (void)tag;
    sd_iter it;
    sd_bytes v;
    bool has = false;
    int64_t n = 0, last = -1;
    sd_status st = sd_state_read(c, "last", &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        n++;
        last = read_int(v);
    }
    if (st != SD_OK) {
        return st;
    }
    sd_bytes k = key_str(c);
    return emit_fmt(c, "%.*s:%lld/%lld", (int)k.len, (const char *)k.ptr, (long long)n,
                    (long long)last);
}

/* ================================================================ dynamic timer tags */

/*
 * KV<string, varint v>: v > 0 sets the timer tagged "t<v>" of family "tags" to fire at
 * v * 1000 with output timestamp v * 1000 - 1; v < 0 clears tag "t<-v>". on_timer emits
 * "key/tag@fire~ts".
 */
static sd_status tags_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes k, v;
    char tag[32];
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "tags: not a KV");
    }
    int64_t x = read_int(v);
    int len = snprintf(tag, sizeof(tag), "t%lld", (long long)(x < 0 ? -x : x));
    sd_bytes t = sd_bytes_make(tag, (size_t)len);
    if (x < 0) {
        return sd_timer_clear(c, "tags", t);
    }
    return sd_timer_set(c, "tags", t, x * 1000, x * 1000 - 1);
}

static sd_status tags_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    if (strcmp(family, "tags") != 0) {
        return sd_fail(c, "tags: unexpected family %s", family);
    }
    sd_bytes k = key_str(c);
    return emit_fmt(c, "%.*s/%.*s@%lld~%lld", (int)k.len, (const char *)k.ptr, (int)tag.len,
                    (const char *)tag.ptr, (long long)sd_ctx_fire_time(c),
                    (long long)sd_ctx_timestamp(c));
}

/* ================================================================ window expiration */

/* KV<string, varint>: a bag per key and window; when the window expires emit its sum. */
static sd_status expiry_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes k, v;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "expiry: not a KV");
    }
    return sd_state_append(c, "vals", v);
}

static sd_status expiry_fire(sd_ctx *c, void *state)
{
    (void)state;
    sd_iter it;
    sd_bytes v;
    bool has;
    int64_t sum = 0;
    sd_status st = sd_state_read(c, "vals", &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sum += read_int(v);
    }
    if (st != SD_OK) {
        return st;
    }
    sd_counter_add(c, "expirations", 1);
    sd_bytes k = key_str(c);
    sd_window w = sd_ctx_window(c);
    return emit_fmt(c, "%.*s@%lld:%lld", (int)k.len, (const char *)k.ptr,
                    (long long)(w.start / 1000), (long long)sum);
}

/* ================================================================ ordered list */

/*
 * KV<string, string command>: "a K NAME" adds NAME at sort key K, "c S E" clears [S, E), "x"
 * clears the whole list. The timer reports "key:<all entries>|<entries in [0, 30)>".
 */
static sd_status olist_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes k, v, cmd;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "olist: not a KV");
    }
    sd_reader r = sd_reader_make(v);
    if (sd_read_bytes(&r, &cmd) != SD_OK || cmd.len >= 64) {
        return sd_fail(c, "olist: value is not a short string");
    }
    char line[64], name[64];
    long long a = 0, b = 0;
    memcpy(line, cmd.ptr, cmd.len);
    line[cmd.len] = 0;
    sd_status st;
    if (sscanf(line, "a %lld %63s", &a, name) == 2) {
        sd_buf nb;
        sd_buf_init(&nb, 0);
        st = sd_enc_str(&nb, name);
        if (st == SD_OK) {
            st = sd_state_ordered_add(c, "events", a, sd_buf_bytes(&nb));
        }
        sd_buf_deinit(&nb);
    } else if (sscanf(line, "c %lld %lld", &a, &b) == 2) {
        st = sd_state_ordered_clear_range(c, "events", a, b);
    } else if (strcmp(line, "x") == 0) {
        st = sd_state_clear(c, "events");
    } else {
        return sd_fail(c, "olist: bad command \"%s\"", line);
    }
    return st == SD_OK ? flush_timer(c) : st;
}

/* Append the entries of [start, end) as "K=NAME,..." to out at *off. */
static sd_status
olist_render(sd_ctx *c, int64_t start, int64_t end, char *out, size_t cap, size_t *off)
{
    sd_ordered_iter it;
    bool has;
    int64_t key;
    sd_bytes val, name;
    size_t n = 0;
    sd_status st = sd_state_ordered_read(c, "events", start, end, &it);
    while (st == SD_OK && (st = sd_ordered_next(&it, &key, &val, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(val);
        if (sd_read_bytes(&r, &name) != SD_OK) {
            return sd_fail(c, "olist: entry is not a string");
        }
        if (*off < cap) {
            *off += (size_t)snprintf(out + *off, cap - *off, "%s%lld=%.*s", n > 0 ? "," : "",
                                     (long long)key, (int)name.len, (const char *)name.ptr);
        }
        n++;
    }
    return st;
}

static sd_status olist_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    (void)tag;
    char out[512];
    sd_bytes k = key_str(c);
    size_t off = (size_t)snprintf(out, sizeof(out), "%.*s:", (int)k.len, (const char *)k.ptr);
    sd_status st = olist_render(c, INT64_MIN, INT64_MAX, out, sizeof(out), &off);
    if (st == SD_OK && off < sizeof(out)) {
        off += (size_t)snprintf(out + off, sizeof(out) - off, "|");
        st = olist_render(c, 0, 30, out, sizeof(out), &off);
    }
    if (st == SD_OK) {
        st = sd_emit_str(c, out, off < sizeof(out) ? off : sizeof(out) - 1);
    }
    return st;
}

/* ================================================================ pipelines */

typedef struct kv_in {
    const char *k;
    int64_t v;      /* varint values */
    const char *sv; /* string values (when not NULL) */
} kv_in;

static sd_pcoll *create_kvs(sd_pipeline *p, sd_buf *b, const kv_in *in, size_t n, bool strings)
{
    size_t offs[64];
    sd_bytes items[64];
    sd_time ts[64];
    for (size_t i = 0; i < n; i++) {
        offs[i] = b->len;
        assert_int_equal(sd_enc_str(b, in[i].k), SD_OK);
        if (strings) {
            assert_int_equal(sd_enc_str(b, in[i].sv), SD_OK);
        } else {
            assert_int_equal(sd_enc_int(b, in[i].v), SD_OK);
        }
        ts[i] = (sd_time)i; /* input order is timestamp order */
    }
    offs[n] = b->len;
    for (size_t i = 0; i < n; i++) {
        items[i] = sd_bytes_make(b->data + offs[i], offs[i + 1] - offs[i]);
    }
    const sd_pcoder *vc = strings ? sd_pcoder_string(p) : sd_pcoder_varint(p);
    return sd_create(p, "Input", sd_pcoder_kv(p, sd_pcoder_string(p), vc), items, n, ts);
}

static void run_ok(sd_pipeline *p, sd_run_result *res)
{
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "run failed: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(st, SD_OK);
}

static sd_pcoll *stateful(sd_pipeline *p,
                          sd_pcoll *in,
                          const char *dofn,
                          const sd_state_spec *states,
                          size_t n_states,
                          const sd_timer_spec *tm)
{
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = { .dofn = dofn,
                           .n_outputs = 1,
                           .output_coders = outc,
                           .n_states = n_states,
                           .states = states,
                           .n_timers = 1,
                           .timers = tm };
    return sd_pardo(p, "Stateful", in, &spec, NULL);
}

static void test_combining_state(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("combining-state");
    static const kv_in in[] = { { "u", 1, NULL }, { "v", 10, NULL }, { "u", 2, NULL },
                                { "u", 3, NULL }, { "v", 5, NULL },  { "u", 100, NULL },
                                { "w", -7, NULL } };
    sd_pcoll *kvs = create_kvs(p, &b, in, 7, false);
    const sd_state_spec states[3] = {
        { .id = "sum",
          .kind = SD_STATE_COMBINING,
          .coder = sd_pcoder_varint(p),
          .combinefn = SD_COMBINE_SUM },
        { .id = "count",
          .kind = SD_STATE_COMBINING,
          .coder = sd_pcoder_varint(p),
          .combinefn = SD_COMBINE_COUNT },
        { .id = "longest",
          .kind = SD_STATE_COMBINING,
          .coder = sd_pcoder_string(p),
          .combinefn = "t:longest" },
    };
    sd_timer_spec flush = { "flush", SD_EVENT_TIME };
    sd_pcoll *out = stateful(p, kvs, "t:comb", states, 3, &flush);
    const char *const want[] = { "u sum=106 count=4 longest=100", "v sum=15 count=2 longest=10",
                                 "w sum=-7 count=1 longest=-7" };
    sd_assert_strings(p, "Check", out, want, 3);
    sd_run_result res;
    run_ok(p, &res);
    assert_int_equal(sd_run_result_counter(&res, "midway_sum"), 6);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

static void test_map_state(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("map-state");
    static const kv_in in[] = {
        { "ann", 0, "apple" }, { "bob", 0, "pear" }, { "ann", 0, "fig" },   { "ann", 0, "apple" },
        { "bob", 0, "kiwi" },  { "ann", 0, "-fig" }, { "cat", 0, "plum" },  { "cat", 0, "!" },
        { "cat", 0, "lime" },  { "bob", 0, "pear" }, { "ann", 0, "-none" }, { "ann", 0, "apple" },
    };
    sd_pcoll *kvs = create_kvs(p, &b, in, sizeof(in) / sizeof(in[0]), true);
    const sd_state_spec words = { .id = "words",
                                  .kind = SD_STATE_MAP,
                                  .coder = sd_pcoder_varint(p),
                                  .key_coder = sd_pcoder_string(p) };
    sd_timer_spec flush = { "flush", SD_EVENT_TIME };
    sd_pcoll *out = stateful(p, kvs, "t:map", &words, 1, &flush);
    const char *const want[] = { "ann:apple=3", "bob:kiwi=1,pear=2", "cat:lime=1" };
    sd_assert_strings(p, "Check", out, want, 3);
    run_ok(p, NULL);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

static void test_set_state(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("set-state");
    static const kv_in in[] = {
        { "ann", 0, "apple" }, { "bob", 0, "pear" },  { "ann", 0, "fig" },  { "ann", 0, "apple" },
        { "bob", 0, "kiwi" },  { "ann", 0, "-fig" },  { "cat", 0, "plum" }, { "cat", 0, "-plum" },
        { "bob", 0, "pear" },  { "ann", 0, "-none" },
    };
    sd_pcoll *kvs = create_kvs(p, &b, in, sizeof(in) / sizeof(in[0]), true);
    const sd_state_spec words = { .id = "words",
                                  .kind = SD_STATE_SET,
                                  .coder = sd_pcoder_string(p) };
    sd_timer_spec flush = { "flush", SD_EVENT_TIME };
    sd_pcoll *out = stateful(p, kvs, "t:set", &words, 1, &flush);
    const char *const want[] = { "ann:apple", "bob:kiwi,pear", "cat:" };
    sd_assert_strings(p, "Check", out, want, 3);
    sd_run_result res;
    run_ok(p, &res);
    assert_int_equal(sd_run_result_counter(&res, "dup"), 2);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

static void test_ordered_list_state(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("ordered-list-state");
    static const kv_in in[] = {
        { "u", 0, "a 30 thirty" }, { "u", 0, "a 10 ten" }, { "u", 0, "a -5 minus5" },
        { "u", 0, "a 20 twenty" }, { "v", 0, "a 1 one" },  { "u", 0, "a 10 ten2" },
        { "u", 0, "c 15 25" },     { "v", 0, "x" },        { "v", 0, "a 2 two" },
        { "w", 0, "a 7 seven" },   { "w", 0, "c 0 7" },    { "w", 0, "c 8 100" },
    };
    sd_pcoll *kvs = create_kvs(p, &b, in, sizeof(in) / sizeof(in[0]), true);
    const sd_state_spec events = { .id = "events",
                                   .kind = SD_STATE_ORDERED_LIST,
                                   .coder = sd_pcoder_string(p) };
    sd_timer_spec flush = { "flush", SD_EVENT_TIME };
    sd_pcoll *out = stateful(p, kvs, "t:olist", &events, 1, &flush);
    /* Sort-key order; equal keys in the order they were added; clears by range and whole. */
    const char *const want[] = { "u:-5=minus5,10=ten,10=ten2,30=thirty|10=ten,10=ten2",
                                 "v:2=two|2=two", "w:7=seven|7=seven" };
    sd_assert_strings(p, "Check", out, want, 3);
    run_ok(p, NULL);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

static void test_value_state(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("value-state");
    static const kv_in in[] = { { "a", 5, NULL }, { "a", 9, NULL }, { "b", 4, NULL },
                                { "b", 0, NULL }, { "c", 1, NULL }, { "c", 0, NULL },
                                { "c", 2, NULL } };
    sd_pcoll *kvs = create_kvs(p, &b, in, 7, false);
    const sd_state_spec last = { .id = "last",
                                 .kind = SD_STATE_VALUE,
                                 .coder = sd_pcoder_varint(p) };
    sd_timer_spec flush = { "flush", SD_EVENT_TIME };
    sd_pcoll *out = stateful(p, kvs, "t:value", &last, 1, &flush);
    const char *const want[] = { "a:1/9", "b:0/-1", "c:1/2" };
    sd_assert_strings(p, "Check", out, want, 3);
    run_ok(p, NULL);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

static void test_dynamic_timer_tags(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("timer-tags");
    /* u: tags t5, t7 (t7 set twice: once fires), t9 cleared; v: t5 only. */
    static const kv_in in[] = { { "u", 5, NULL }, { "u", 7, NULL }, { "u", 9, NULL },
                                { "v", 5, NULL }, { "u", 7, NULL }, { "u", -9, NULL } };
    sd_pcoll *kvs = create_kvs(p, &b, in, 6, false);
    sd_timer_spec tags = { "tags", SD_EVENT_TIME };
    sd_pcoll *out = stateful(p, kvs, "t:tags", NULL, 0, &tags);
    const char *const want[] = { "u/t5@5000~4999", "u/t7@7000~6999", "v/t5@5000~4999" };
    sd_assert_strings(p, "Check", out, want, 3);
    run_ok(p, NULL);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

static void test_on_window_expiration(void **state)
{
    (void)state;
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_pipeline *p = sd_pipeline_create("window-expiration");
    static const kv_in in[] = {
        { "a", 1, NULL }, { "a", 2, NULL }, { "b", 5, NULL }, { "a", 10, NULL }
    };
    static const sd_time ts[] = { 1000, 2000, 3000, 15000 };
    size_t offs[5];
    sd_bytes items[4];
    for (size_t i = 0; i < 4; i++) {
        offs[i] = b.len;
        assert_int_equal(sd_enc_str(&b, in[i].k), SD_OK);
        assert_int_equal(sd_enc_int(&b, in[i].v), SD_OK);
    }
    offs[4] = b.len;
    for (size_t i = 0; i < 4; i++) {
        items[i] = sd_bytes_make(b.data + offs[i], offs[i + 1] - offs[i]);
    }
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *kvs = sd_create(p, "Input", kv, items, 4, ts);
    sd_windowfn fixed = { .kind = SD_WINDOW_FIXED, .size_ms = 10000 };
    sd_pcoll *w = sd_window_into(p, "Window", kvs, &fixed);
    const sd_state_spec vals = { .id = "vals", .kind = SD_STATE_BAG, .coder = sd_pcoder_varint(p) };
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = {
        .dofn = "t:expiry", .n_outputs = 1, .output_coders = outc, .n_states = 1, .states = &vals
    };
    sd_pcoll *out = sd_pardo(p, "Expiry", w, &spec, NULL);
    const char *const want[] = { "a@0:3", "b@0:5", "a@10:10" };
    sd_assert_strings(p, "Check", out, want, 3);
    sd_run_result res;
    run_ok(p, &res);
    assert_int_equal(sd_run_result_counter(&res, "expirations"), 3);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

static void test_state_kind_misuse_fails(void **state)
{
    (void)state;
    sd_pipeline *p = sd_pipeline_create("state-misuse");
    const sd_state_spec bad = { .id = "m", .kind = SD_STATE_MAP, .coder = sd_pcoder_varint(p) };
    sd_timer_spec flush = { "flush", SD_EVENT_TIME };
    sd_buf b;
    sd_buf_init(&b, 0);
    static const kv_in in[] = { { "a", 1, NULL } };
    sd_pcoll *kvs = create_kvs(p, &b, in, 1, false);
    assert_null(stateful(p, kvs, "t:value", &bad, 1, &flush)); /* no key_coder */
    assert_non_null(strstr(sd_err_msg(sd_pipeline_error(p)), "key_coder"));
    sd_pipeline_destroy(p);
    p = sd_pipeline_create("state-misuse-2");
    sd_buf_reset(&b);
    kvs = create_kvs(p, &b, in, 1, false);
    const sd_state_spec nocfn = {
        .id = "s", .kind = SD_STATE_COMBINING, .coder = sd_pcoder_varint(p), .combinefn = "t:nope"
    };
    assert_null(stateful(p, kvs, "t:value", &nocfn, 1, &flush));
    assert_non_null(strstr(sd_err_msg(sd_pipeline_error(p)), "t:nope"));
    sd_pipeline_destroy(p);
    /* Using value-state calls on map state fails the job with a message naming the state. */
    p = sd_pipeline_create("state-misuse-3");
    sd_buf_reset(&b);
    kvs = create_kvs(p, &b, in, 1, false);
    const sd_state_spec map = { .id = "last",
                                .kind = SD_STATE_MAP,
                                .coder = sd_pcoder_varint(p),
                                .key_coder = sd_pcoder_string(p) };
    stateful(p, kvs, "t:value", &map, 1, &flush);
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_pipeline_run(p, &opts, NULL, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "map state"));
    sd_pipeline_destroy(p);
    /* The same for ordered-list state. */
    p = sd_pipeline_create("state-misuse-4");
    sd_buf_reset(&b);
    kvs = create_kvs(p, &b, in, 1, false);
    const sd_state_spec olist = { .id = "last",
                                  .kind = SD_STATE_ORDERED_LIST,
                                  .coder = sd_pcoder_varint(p) };
    stateful(p, kvs, "t:value", &olist, 1, &flush);
    sd_err_clear(&err);
    assert_int_equal(sd_pipeline_run(p, &opts, NULL, &err), SD_ESTATE);
    assert_non_null(strstr(sd_err_msg(&err), "ordered-list state"));
    sd_pipeline_destroy(p);
    sd_buf_deinit(&b);
}

int main(int argc, char **argv)
{
    int code;
    static const sd_combinefn longest = { longest_create, longest_add, longest_add,
                                          longest_extract };
    static const sd_dofn comb = { .process = comb_process, .on_timer = comb_timer };
    static const sd_dofn map = { .process = map_process, .on_timer = map_timer };
    static const sd_dofn set = { .process = set_process, .on_timer = set_timer };
    static const sd_dofn olist = { .process = olist_process, .on_timer = olist_timer };
    static const sd_dofn value = { .process = value_process, .on_timer = value_timer };
    static const sd_dofn tags = { .process = tags_process, .on_timer = tags_timer };
    static const sd_dofn expiry = { .process = expiry_process,
                                    .on_window_expiration = expiry_fire };
    if (sd_register_combinefn("t:longest", &longest) != SD_OK ||
        sd_register_dofn("t:comb", &comb) != SD_OK || sd_register_dofn("t:map", &map) != SD_OK ||
        sd_register_dofn("t:set", &set) != SD_OK || sd_register_dofn("t:value", &value) != SD_OK ||
        sd_register_dofn("t:olist", &olist) != SD_OK ||
        sd_register_dofn("t:tags", &tags) != SD_OK ||
        sd_register_dofn("t:expiry", &expiry) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_combining_state),      cmocka_unit_test(test_map_state),
        cmocka_unit_test(test_value_state),          cmocka_unit_test(test_dynamic_timer_tags),
        cmocka_unit_test(test_on_window_expiration), cmocka_unit_test(test_state_kind_misuse_fails),
        cmocka_unit_test(test_ordered_list_state),   cmocka_unit_test(test_set_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
