/*
 * Sundial C SDK: the DoFns and CombineFns the construction layer itself uses.
 *
 * Create, timestamp assignment, global combining, Reshuffle's portable expansion and the
 * assertions are all ordinary ParDos over built-in DoFns, so they run unchanged on any Beam
 * runner that can run a C worker. Their configuration blobs are small self-describing byte
 * strings (varints and length-prefixed fields) written by pipeline.c (its composites and
 * assertions).
 *
 * The tagged-value convention: the assertion and global-combine paths key every element with
 * the empty bytes key and wrap it as bytes(0x01 ++ element); a sentinel bytes(0x00) is flattened
 * in from a global-window Create so the group exists even when the PCollection is empty (the
 * assertions first select their window and panes, then rewindow into the global window). That is
 * how "assert empty" and "combine of nothing" get observed without any runner-specific support.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/map.h"
#include "runner/base/rand.h"
#include "runner/base/time.h"
#include "sdk-harness/src/sdk_int.h"

/* ================================================================ create */

/* Emit the elements of a Create configuration (pipeline_composites.c writes it). */
static sd_status emit_created(sd_ctx *c, sd_bytes config)
{
    sd_reader r = sd_reader_make(config);
    uint64_t n;
    sd_window g = sd_window_global();
    if (sd_reader_varint(&r, &n) != SD_OK) {
        return sd_fail(c, "Create: malformed configuration");
    }
    for (uint64_t i = 0; i < n; i++) {
        sd_bytes e;
        uint8_t has_ts;
        sd_time ts = SD_TIME_MIN;
        if (sd_reader_lp(&r, &e) != SD_OK || sd_reader_byte(&r, &has_ts) != SD_OK ||
            (has_ts && sd_coder_get_ts(&r, &ts) != SD_OK)) {
            return sd_fail(c, "Create: malformed configuration at element %llu",
                           (unsigned long long)i);
        }
        sd_status st = sd_emit_windowed(c, 0, e, ts, &g, 1, NULL);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

static sd_status create_process(sd_ctx *c, void *state)
{
    (void)state;
    return emit_created(c, sd_ctx_config(c));
}

/*
 * Create by reference. A large Create keeps its configuration (the encoded elements) in this
 * process as an sd__created: refcounted, registered under a token that holds a random nonce of
 * this process. A run whose workers are this process (the LOOPBACK environment) carries only
 * the token in the pipeline proto, under SD_FN_CREATE_REF; every other run and
 * sd_pipeline_to_proto carry the elements inline under SD_FN_CREATE (pipeline_proto.c). So
 * the elements are not copied through the Pipeline and ProcessBundleDescriptor protos (packed,
 * sent, unpacked and copied again about fifteen times for one run). A DoFn instance holds a
 * reference for its life, so a bundle still running when the pipeline is destroyed reads
 * valid memory; a token that is not registered here (another process's) fails the bundle.
 */
struct sd__created {
    size_t refs; /* under g_created_lock */
    uint8_t *data;
    size_t len;
    char token[SD_TOKEN_HEX + 24];
};

static pthread_mutex_t g_created_lock = PTHREAD_MUTEX_INITIALIZER;
static sd_map g_created; /* token -> sd__created * (borrowed; removed at its last reference) */
static bool g_created_ready;
static char g_created_nonce[SD_TOKEN_HEX];
static uint64_t g_created_seq;

sd__created *sd__created_create(uint8_t *data, size_t len)
{
    sd__created *c = sd_calloc(1, sizeof(*c));
    if (c == NULL) {
        sd_free(data);
        return NULL;
    }
    c->refs = 1;
    c->data = data;
    c->len = len;
    pthread_mutex_lock(&g_created_lock);
    if (!g_created_ready) {
        sd_map_init(&g_created, NULL);
        if (sd_token_hex(g_created_nonce) != SD_OK) {
            /* No kernel randomness: this process's id and start time still tell it apart. */
            snprintf(g_created_nonce, sizeof(g_created_nonce), "p%ld-%lld", (long)getpid(),
                     (long long)sd_mono_now_ns());
        }
        g_created_ready = true;
    }
    snprintf(c->token, sizeof(c->token), "%s-%llu", g_created_nonce,
             (unsigned long long)++g_created_seq);
    sd_status st = sd_map_put(&g_created, sd_bytes_str(c->token), c);
    pthread_mutex_unlock(&g_created_lock);
    if (st != SD_OK) {
        sd_free(c->data);
        sd_free(c);
        return NULL;
    }
    return c;
}

void sd__created_unref(sd__created *c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&g_created_lock);
    bool last = --c->refs == 0;
    if (last) {
        (void)sd_map_remove(&g_created, sd_bytes_str(c->token));
    }
    pthread_mutex_unlock(&g_created_lock);
    if (last) {
        sd_free(c->data);
        sd_free(c);
    }
}

sd_bytes sd__created_bytes(const sd__created *c)
{
    return sd_bytes_make(c->data, c->len);
}

const char *sd__created_token(const sd__created *c)
{
    return c->token;
}

static sd_status create_ref_setup(sd_bytes config, void **state, sd_err *err)
{
    sd__created *c = NULL;
    pthread_mutex_lock(&g_created_lock);
    if (g_created_ready) {
        c = sd_map_get(&g_created, config);
        if (c != NULL) {
            c->refs++;
        }
    }
    pthread_mutex_unlock(&g_created_lock);
    if (c == NULL) {
        return sd_err_set(err, SD_ENOTFOUND,
                          "Create: its elements (reference \"%.*s\") are not in this process: "
                          "a Create by reference runs only in the process that built it",
                          (int)SD_MIN(config.len, (size_t)64), (const char *)config.ptr);
    }
    *state = c;
    return SD_OK;
}

static sd_status create_ref_process(sd_ctx *c, void *state)
{
    return emit_created(c, sd__created_bytes(state));
}

static void create_ref_teardown(void *state)
{
    sd__created_unref(state);
}

/* ================================================================ keys */

/* element -> KV<bytes "", bytes(0x01 ++ element)> */
static sd_status tag_key_process(sd_ctx *c, void *state)
{
    sd_buf *b = state;
    sd_bytes e = sd_ctx_element(c);
    sd_status st;
    sd_buf_reset(b);
    if ((st = sd_buf_append_byte(b, 0x00)) != SD_OK ||
        (st = sd_buf_put_varint(b, e.len + 1)) != SD_OK ||
        (st = sd_buf_append_byte(b, 0x01)) != SD_OK || (st = sd_buf_append_bytes(b, e)) != SD_OK) {
        return st;
    }
    return sd_emit(c, 0, sd_buf_bytes(b));
}

sd_status sd__buf_state_setup(sd_bytes config, void **state, sd_err *err)
{
    sd_buf *b = sd_calloc(1, sizeof(*b));
    (void)config;
    if (b == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_buf_init(b, 0);
    *state = b;
    return SD_OK;
}

void sd__buf_state_teardown(void *state)
{
    sd_buf *b = state;
    if (b != NULL) {
        sd_buf_deinit(b);
        sd_free(b);
    }
}

static sd_status drop_key_process(sd_ctx *c, void *state)
{
    sd_bytes k, v;
    sd_status st = sd_ctx_kv(c, &k, &v);
    (void)state;
    if (st != SD_OK) {
        return sd_fail(c, "drop key: the input is not a KV");
    }
    return sd_emit(c, 0, v);
}

/* ================================================================ timestamps */

typedef struct ts_state {
    sd_timestamp_fn fn;
    sd_bytes config;
} ts_state;

static sd_status ts_setup(sd_bytes config, void **state, sd_err *err)
{
    sd_reader r = sd_reader_make(config);
    sd_bytes name, cfg;
    if (sd_reader_lp(&r, &name) != SD_OK || sd_reader_lp(&r, &cfg) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "WithTimestamps: malformed configuration");
    }
    sd_timestamp_fn fn = sd__find_timestamp_fn(name);
    if (fn == NULL) {
        return sd_err_set(err, SD_ENOTFOUND,
                          "WithTimestamps: no timestamp function registered as \"%.*s\"",
                          (int)name.len, (const char *)name.ptr);
    }
    ts_state *s = sd_calloc(1, sizeof(*s));
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    s->fn = fn;
    s->config = cfg; /* borrowed from the processor's copy of the payload */
    *state = s;
    return SD_OK;
}

static sd_status ts_process(sd_ctx *c, void *state)
{
    ts_state *s = state;
    sd_err err;
    sd_time ts;
    sd_err_clear(&err);
    sd_status st = s->fn(sd_ctx_element(c), s->config, &ts, &err);
    if (st == SD_OK) {
        return sd_emit_ts(c, 0, sd_ctx_element(c), ts);
    }
    sd_buf shown;
    sd_buf_init(&shown, 0);
    const sd_coder *coder = sd_ctx_input_coder(c);
    if (coder == NULL || sd__render_value(coder, sd_ctx_element(c), &shown) != SD_OK ||
        sd_buf_append_byte(&shown, '\0') != SD_OK) {
        sd_buf_reset(&shown);
        SD_IGNORE(sd_buf_append_str(&shown, "(unprintable)"));
        SD_IGNORE(sd_buf_append_byte(&shown, '\0'));
    }
    const char *el = shown.data != NULL ? (const char *)shown.data : "(unprintable)";
    if (st == SD_ENOTFOUND) {
        st = sd_fail(c, "WithTimestamps %s: element %s has no event time%s%s", sd_ctx_transform(c),
                     el, sd_err_msg(&err)[0] != '\0' ? ": " : "", sd_err_msg(&err));
    } else {
        st = sd_fail(c, "WithTimestamps %s: the timestamp function failed on element %s: %s",
                     sd_ctx_transform(c), el, sd_err_msg(&err));
    }
    sd_buf_deinit(&shown);
    return st;
}

static void free_teardown(void *state)
{
    sd_free(state);
}

/* ================================================================ reshuffle expansion */

static sd_status reshuffle_key_process(sd_ctx *c, void *state)
{
    sd_buf *b = state;
    sd_status st;
    /* A deterministic spread: the element's hash picks one of 64 keys. */
    uint64_t k = sd_hash_bytes(sd_ctx_element(c)) & 63u;
    sd_buf_reset(b);
    if ((st = sd_buf_put_varint(b, k)) != SD_OK ||
        (st = sd_buf_append_bytes(b, sd_ctx_element(c))) != SD_OK) {
        return st;
    }
    return sd_emit(c, 0, sd_buf_bytes(b));
}

static sd_status ungroup_process(sd_ctx *c, void *state)
{
    sd_bytes key, v;
    sd_iter it;
    bool has;
    sd_status st = sd_ctx_grouped(c, &key, &it);
    (void)state;
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        st = sd_emit(c, 0, v);
    }
    return st;
}

/* ================================================================ combine grouped values */

/*
 * CombinePerKey's unlifted expansion (pipeline_composites.c): KV<K, Iterable<V>> ->
 * KV<K, extract(add(...add(create(), v1)..., vn))>, a ParDo any Beam runner runs. Its config is
 * the composite's CombineFn payload, lp(name) lp(config).
 */
typedef struct grouped_state {
    const sd_combinefn *fn;
    sd_buf cfg;      /* the CombineFn's own config (a copy) */
    sd_buf acc, nxt; /* the accumulator and the next one */
    sd_buf out;      /* key ++ extracted output */
} grouped_state;

static void grouped_teardown(void *state)
{
    grouped_state *s = state;
    if (s != NULL) {
        sd_buf_deinit(&s->cfg);
        sd_buf_deinit(&s->acc);
        sd_buf_deinit(&s->nxt);
        sd_buf_deinit(&s->out);
        sd_free(s);
    }
}

static sd_status grouped_setup(sd_bytes config, void **state, sd_err *err)
{
    sd_bytes name, cfg;
    sd_status st = sd__combinefn_payload_decode(config, &name, &cfg, err);
    if (st != SD_OK) {
        return st;
    }
    const sd_combinefn *fn = sd__find_combinefn(name);
    if (fn == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "%s: no CombineFn registered as \"%.*s\"",
                          SD_FN_COMBINE_GROUPED, (int)name.len, (const char *)name.ptr);
    }
    grouped_state *s = sd_calloc(1, sizeof(*s));
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    s->fn = fn;
    sd_buf_init(&s->cfg, 0);
    sd_buf_init(&s->acc, 0);
    sd_buf_init(&s->nxt, 0);
    sd_buf_init(&s->out, 0);
    if (sd_buf_append_bytes(&s->cfg, cfg) != SD_OK) {
        grouped_teardown(s);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    *state = s;
    return SD_OK;
}

static sd_status grouped_process(sd_ctx *c, void *state)
{
    grouped_state *s = state;
    sd_bytes key, v;
    sd_iter it;
    bool has;
    sd_err err = { .code = SD_OK };
    sd_bytes cfg = sd_buf_bytes(&s->cfg);
    sd_status st = sd_ctx_grouped(c, &key, &it);
    if (st != SD_OK) {
        return sd_fail(c, "%s: the input is not a grouped KV", SD_FN_COMBINE_GROUPED);
    }
    sd_buf_reset(&s->acc);
    if (s->fn->create(cfg, &s->acc, &err) != SD_OK) {
        return sd_fail(c, "%s: create: %s", SD_FN_COMBINE_GROUPED, sd_err_msg(&err));
    }
    while ((st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_buf_reset(&s->nxt);
        if (s->fn->add(cfg, sd_buf_bytes(&s->acc), v, &s->nxt, &err) != SD_OK) {
            return sd_fail(c, "%s: add: %s", SD_FN_COMBINE_GROUPED, sd_err_msg(&err));
        }
        sd_buf tmp = s->acc;
        s->acc = s->nxt;
        s->nxt = tmp;
    }
    if (st != SD_OK) {
        return st;
    }
    sd_buf_reset(&s->out);
    if (sd_buf_append_bytes(&s->out, key) != SD_OK) {
        return sd_fail(c, "%s: out of memory", SD_FN_COMBINE_GROUPED);
    }
    if (s->fn->extract(cfg, sd_buf_bytes(&s->acc), &s->out, &err) != SD_OK) {
        return sd_fail(c, "%s: extract: %s", SD_FN_COMBINE_GROUPED, sd_err_msg(&err));
    }
    return sd_emit(c, 0, sd_buf_bytes(&s->out));
}

/* ================================================================ assertion checker */

typedef struct check_state {
    int mode; /* 0 exact contents, 1 count */
    sd_bytes name;
    sd_coder *coder;
    bool has_window;
    sd_window window;
    int64_t count;
    size_t n_expected;
    sd_bytes *expected; /* sorted */
} check_state;

static int bytes_qcmp(const void *a, const void *b)
{
    return sd_bytes_cmp(*(const sd_bytes *)a, *(const sd_bytes *)b);
}

static void check_teardown(void *state)
{
    check_state *s = state;
    if (s != NULL) {
        sd_coder_destroy(s->coder);
        sd_free(s->expected);
        sd_free(s);
    }
}

static sd_status check_setup(sd_bytes config, void **state, sd_err *err)
{
    sd_reader r = sd_reader_make(config);
    uint64_t mode, n;
    uint8_t hw;
    check_state *s = sd_calloc(1, sizeof(*s));
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (sd_reader_varint(&r, &mode) != SD_OK || sd_reader_lp(&r, &s->name) != SD_OK ||
        sd__coder_deserialize(&r, &s->coder, err) != SD_OK || sd_reader_byte(&r, &hw) != SD_OK ||
        (hw && (sd_coder_get_ts(&r, &s->window.start) != SD_OK ||
                sd_coder_get_ts(&r, &s->window.end) != SD_OK)) ||
        sd_reader_varint(&r, &n) != SD_OK) {
        check_teardown(s);
        return sd_err_set(err, SD_EPROTO, "assertion: malformed checker configuration");
    }
    s->mode = (int)mode;
    s->has_window = hw != 0;
    if (s->mode == 1) {
        s->count = (int64_t)n;
    } else {
        if (n > sd_reader_left(&r)) {
            check_teardown(s);
            return sd_err_set(err, SD_EPROTO, "assertion: malformed expected list");
        }
        s->n_expected = (size_t)n;
        s->expected = n > 0 ? sd_calloc((size_t)n, sizeof(sd_bytes)) : NULL;
        if (n > 0 && s->expected == NULL) {
            check_teardown(s);
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
            if (sd_reader_lp(&r, &s->expected[i]) != SD_OK) {
                check_teardown(s);
                return sd_err_set(err, SD_EPROTO, "assertion: malformed expected element");
            }
        }
        if (s->n_expected > 1) {
            qsort(s->expected, s->n_expected, sizeof(sd_bytes), bytes_qcmp);
        }
    }
    *state = s;
    return SD_OK;
}

/* Append up to 20 rendered elements as "[a, b, ...]". */
static sd_status render_list(const check_state *s, const sd_bytes *items, size_t n, sd_buf *out)
{
    sd_status st = sd_buf_append_byte(out, '[');
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        if (i == 20) {
            st = sd_buf_printf(out, ", ... %zu more", n - 20);
            break;
        }
        if (i > 0) {
            st = sd_buf_append_str(out, ", ");
        }
        if (st == SD_OK) {
            st = sd__render_value(s->coder, items[i], out);
        }
    }
    return st != SD_OK ? st : sd_buf_append_byte(out, ']');
}

static sd_status check_process(sd_ctx *c, void *state)
{
    check_state *s = state;
    sd_bytes key, v;
    sd_iter it;
    bool has;
    sd_vec actual;
    sd_buf msg;
    sd_status st;
    if (s->has_window) {
        sd_window w = sd_ctx_window(c);
        if (w.global || w.start != s->window.start || w.end != s->window.end) {
            return SD_OK;
        }
    }
    sd_vec_init(&actual, sizeof(sd_bytes));
    sd_buf_init(&msg, 0);
    st = sd_ctx_grouped(c, &key, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        sd_bytes tagged;
        if (sd_reader_lp(&r, &tagged) != SD_OK || tagged.len < 1) {
            st = sd_fail(c, "assertion %.*s: malformed gathered element", (int)s->name.len,
                         (const char *)s->name.ptr);
            break;
        }
        if (tagged.ptr[0] == 0x01) {
            sd_bytes e = sd_bytes_make(tagged.ptr + 1, tagged.len - 1);
            st = sd_vec_push(&actual, &e);
        }
    }
    if (st != SD_OK) {
        sd_vec_deinit(&actual);
        sd_buf_deinit(&msg);
        return st;
    }
    sd_bytes *got = actual.items;
    size_t n_got = actual.len;
    if (n_got > 1) {
        qsort(got, n_got, sizeof(sd_bytes), bytes_qcmp);
    }
    if (s->mode == 1) {
        if ((int64_t)n_got != s->count) {
            st = sd_buf_printf(
                &msg, "assertion %.*s failed: expected %lld elements, got %zu: ", (int)s->name.len,
                (const char *)s->name.ptr, (long long)s->count, n_got);
            if (st == SD_OK) {
                st = render_list(s, got, n_got, &msg);
            }
            if (st == SD_OK && sd_buf_append_byte(&msg, 0) == SD_OK) {
                st = sd_fail(c, "%s", (const char *)msg.data);
            }
        }
    } else {
        /* Merge the two sorted lists into missing (expected only) and unexpected (actual only). */
        sd_vec missing, extra;
        sd_vec_init(&missing, sizeof(sd_bytes));
        sd_vec_init(&extra, sizeof(sd_bytes));
        size_t i = 0, j = 0;
        while (st == SD_OK && (i < s->n_expected || j < n_got)) {
            int cmp = i == s->n_expected ? 1
                      : j == n_got       ? -1
                                         : sd_bytes_cmp(s->expected[i], got[j]);
            if (cmp == 0) {
                i++;
                j++;
            } else if (cmp < 0) {
                st = sd_vec_push(&missing, &s->expected[i++]);
            } else {
                st = sd_vec_push(&extra, &got[j++]);
            }
        }
        if (st == SD_OK && (missing.len > 0 || extra.len > 0)) {
            st = sd_buf_printf(&msg,
                               "assertion %.*s failed: expected %zu elements, got %zu; "
                               "missing %zu: ",
                               (int)s->name.len, (const char *)s->name.ptr, s->n_expected, n_got,
                               missing.len);
            if (st == SD_OK) {
                st = render_list(s, missing.items, missing.len, &msg);
            }
            if (st == SD_OK) {
                st = sd_buf_printf(&msg, "; unexpected %zu: ", extra.len);
            }
            if (st == SD_OK) {
                st = render_list(s, extra.items, extra.len, &msg);
            }
            if (st == SD_OK && sd_buf_append_byte(&msg, 0) == SD_OK) {
                st = sd_fail(c, "%s", (const char *)msg.data);
            }
        }
        sd_vec_deinit(&missing);
        sd_vec_deinit(&extra);
    }
    sd_vec_deinit(&actual);
    sd_buf_deinit(&msg);
    return st;
}

/* ================================================================ combine fns */

static sd_status read_int_arg(sd_bytes b, int64_t *v, sd_err *err, const char *what)
{
    sd_reader r = sd_reader_make(b);
    if (sd_read_int(&r, v) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "%s: expected a varint", what);
    }
    return SD_OK;
}

static sd_status zero_create(sd_bytes config, sd_buf *out, sd_err *err)
{
    (void)config;
    (void)err;
    return sd_enc_int(out, 0);
}

static sd_status sum_add(sd_bytes config, sd_bytes acc, sd_bytes in, sd_buf *out, sd_err *err)
{
    int64_t a, b;
    (void)config;
    if (read_int_arg(acc, &a, err, SD_COMBINE_SUM) != SD_OK ||
        read_int_arg(in, &b, err, SD_COMBINE_SUM) != SD_OK) {
        return SD_EPROTO;
    }
    return sd_enc_int(out, (int64_t)((uint64_t)a + (uint64_t)b));
}

static sd_status sum_merge(sd_bytes config, sd_bytes x, sd_bytes y, sd_buf *out, sd_err *err)
{
    return sum_add(config, x, y, out, err);
}

static sd_status copy_extract(sd_bytes config, sd_bytes acc, sd_buf *out, sd_err *err)
{
    (void)config;
    (void)err;
    return sd_buf_append_bytes(out, acc);
}

static sd_status count_add(sd_bytes config, sd_bytes acc, sd_bytes in, sd_buf *out, sd_err *err)
{
    int64_t a;
    (void)config;
    (void)in;
    if (read_int_arg(acc, &a, err, SD_COMBINE_COUNT) != SD_OK) {
        return SD_EPROTO;
    }
    return sd_enc_int(out, a + 1);
}

/* min/max accumulator: bool present, then varint when present. */
static sd_status mm_read(sd_bytes acc, bool *has, int64_t *v, sd_err *err)
{
    sd_reader r = sd_reader_make(acc);
    *v = 0;
    if (sd_read_bool(&r, has) != SD_OK || (*has && sd_read_int(&r, v) != SD_OK)) {
        return sd_err_set(err, SD_EPROTO, "min/max accumulator: malformed");
    }
    return SD_OK;
}

static sd_status mm_write(sd_buf *out, bool has, int64_t v)
{
    sd_status st = sd_enc_bool(out, has);
    return (st != SD_OK || !has) ? st : sd_enc_int(out, v);
}

static sd_status mm_create(sd_bytes config, sd_buf *out, sd_err *err)
{
    (void)config;
    (void)err;
    return mm_write(out, false, 0);
}

static sd_status mm_combine(bool is_max, bool ha, int64_t a, bool hb, int64_t b, sd_buf *out)
{
    if (!ha) {
        return mm_write(out, hb, b);
    }
    if (!hb) {
        return mm_write(out, ha, a);
    }
    return mm_write(out, true, is_max ? SD_MAX(a, b) : SD_MIN(a, b));
}

static sd_status mm_add(bool is_max, sd_bytes acc, sd_bytes in, sd_buf *out, sd_err *err)
{
    bool ha;
    int64_t a, b;
    if (mm_read(acc, &ha, &a, err) != SD_OK || read_int_arg(in, &b, err, "min/max") != SD_OK) {
        return SD_EPROTO;
    }
    return mm_combine(is_max, ha, a, true, b, out);
}

static sd_status mm_merge(bool is_max, sd_bytes x, sd_bytes y, sd_buf *out, sd_err *err)
{
    bool ha, hb;
    int64_t a, b;
    if (mm_read(x, &ha, &a, err) != SD_OK || mm_read(y, &hb, &b, err) != SD_OK) {
        return SD_EPROTO;
    }
    return mm_combine(is_max, ha, a, hb, b, out);
}

static sd_status min_add(sd_bytes c, sd_bytes acc, sd_bytes in, sd_buf *out, sd_err *err)
{
    (void)c;
    return mm_add(false, acc, in, out, err);
}

static sd_status max_add(sd_bytes c, sd_bytes acc, sd_bytes in, sd_buf *out, sd_err *err)
{
    (void)c;
    return mm_add(true, acc, in, out, err);
}

static sd_status min_merge(sd_bytes c, sd_bytes x, sd_bytes y, sd_buf *out, sd_err *err)
{
    (void)c;
    return mm_merge(false, x, y, out, err);
}

static sd_status max_merge(sd_bytes c, sd_bytes x, sd_bytes y, sd_buf *out, sd_err *err)
{
    (void)c;
    return mm_merge(true, x, y, out, err);
}

static sd_status mm_extract(sd_bytes config, sd_bytes acc, sd_buf *out, sd_err *err)
{
    bool has;
    int64_t v;
    (void)config;
    if (mm_read(acc, &has, &v, err) != SD_OK) {
        return SD_EPROTO;
    }
    return sd_enc_int(out, v);
}

/*
 * The global-combine wrapper: config lp(inner name) lp(inner config); inputs are
 * bytes(tag ++ element) where tag 0 marks the sentinel (ignored) and 1 a real element.
 */
static sd_status wrap_inner(sd_bytes config, const sd_combinefn **fn, sd_bytes *cfg, sd_err *err)
{
    sd_reader r = sd_reader_make(config);
    sd_bytes name;
    if (sd_reader_lp(&r, &name) != SD_OK || sd_reader_lp(&r, cfg) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "%s: malformed configuration", SD_COMBINE_GLOBAL_WRAP);
    }
    *fn = sd__find_combinefn(name);
    if (*fn == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "no CombineFn registered as \"%.*s\"", (int)name.len,
                          (const char *)name.ptr);
    }
    return SD_OK;
}

static sd_status wrap_create(sd_bytes config, sd_buf *out, sd_err *err)
{
    const sd_combinefn *fn;
    sd_bytes cfg;
    sd_status st = wrap_inner(config, &fn, &cfg, err);
    return st != SD_OK ? st : fn->create(cfg, out, err);
}

static sd_status wrap_add(sd_bytes config, sd_bytes acc, sd_bytes in, sd_buf *out, sd_err *err)
{
    const sd_combinefn *fn;
    sd_bytes cfg, tagged;
    sd_reader r = sd_reader_make(in);
    sd_status st = wrap_inner(config, &fn, &cfg, err);
    if (st != SD_OK) {
        return st;
    }
    if (sd_reader_lp(&r, &tagged) != SD_OK || tagged.len < 1) {
        return sd_err_set(err, SD_EPROTO, "%s: malformed tagged input", SD_COMBINE_GLOBAL_WRAP);
    }
    if (tagged.ptr[0] == 0x00) {
        return sd_buf_append_bytes(out, acc);
    }
    return fn->add(cfg, acc, sd_bytes_make(tagged.ptr + 1, tagged.len - 1), out, err);
}

static sd_status wrap_merge(sd_bytes config, sd_bytes a, sd_bytes b, sd_buf *out, sd_err *err)
{
    const sd_combinefn *fn;
    sd_bytes cfg;
    sd_status st = wrap_inner(config, &fn, &cfg, err);
    return st != SD_OK ? st : fn->merge(cfg, a, b, out, err);
}

static sd_status wrap_extract(sd_bytes config, sd_bytes acc, sd_buf *out, sd_err *err)
{
    const sd_combinefn *fn;
    sd_bytes cfg;
    sd_status st = wrap_inner(config, &fn, &cfg, err);
    return st != SD_OK ? st : fn->extract(cfg, acc, out, err);
}

/* ================================================================ registration */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void register_all(void)
{
    static const sd_dofn create = { .process = create_process };
    static const sd_dofn create_ref = { .setup = create_ref_setup,
                                        .process = create_ref_process,
                                        .teardown = create_ref_teardown };
    static const sd_dofn tag_key = { .setup = sd__buf_state_setup,
                                     .process = tag_key_process,
                                     .teardown = sd__buf_state_teardown };
    static const sd_dofn drop_key = { .process = drop_key_process };
    static const sd_dofn ts = { .setup = ts_setup,
                                .process = ts_process,
                                .teardown = free_teardown };
    static const sd_dofn rkey = { .setup = sd__buf_state_setup,
                                  .process = reshuffle_key_process,
                                  .teardown = sd__buf_state_teardown };
    static const sd_dofn ungroup = { .process = ungroup_process };
    static const sd_dofn grouped = { .setup = grouped_setup,
                                     .process = grouped_process,
                                     .teardown = grouped_teardown };
    static const sd_dofn check = { .setup = check_setup,
                                   .process = check_process,
                                   .teardown = check_teardown };
    static const sd_combinefn sum = { zero_create, sum_add, sum_merge, copy_extract };
    static const sd_combinefn count = { zero_create, count_add, sum_merge, copy_extract };
    static const sd_combinefn min = { mm_create, min_add, min_merge, mm_extract };
    static const sd_combinefn max = { mm_create, max_add, max_merge, mm_extract };
    static const sd_combinefn wrap = { wrap_create, wrap_add, wrap_merge, wrap_extract };
    /* Failures here can only be out-of-memory at start-up; lookups then report the name. */
    if (sd_register_dofn(SD_FN_CREATE, &create) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_dofn(SD_FN_CREATE_REF, &create_ref) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_dofn(SD_FN_ASSERT_KEY, &tag_key) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_dofn(SD_FN_DROP_KEY, &drop_key) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_dofn(SD_FN_TIMESTAMP, &ts) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_dofn(SD_FN_RESHUFFLE_KEY, &rkey) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_dofn(SD_FN_RESHUFFLE_UNGROUP, &ungroup) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_dofn(SD_FN_COMBINE_GROUPED, &grouped) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_dofn(SD_FN_ASSERT_CHECK, &check) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_combinefn(SD_COMBINE_SUM, &sum) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_combinefn(SD_COMBINE_COUNT, &count) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_combinefn(SD_COMBINE_MIN, &min) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_combinefn(SD_COMBINE_MAX, &max) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    if (sd_register_combinefn(SD_COMBINE_GLOBAL_WRAP, &wrap) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    sd__register_time_builtins();
    sd__register_typed_builtins();
    sd__register_group_builtins();
}

void sd__register_builtins(void)
{
    pthread_once(&g_once, register_all);
}
