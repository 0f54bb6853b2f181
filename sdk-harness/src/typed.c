/*
 * Sundial C SDK: typed helpers (Map, FlatMap, Filter) and collecting a PCollection in memory.
 *
 * Plain DoFns see every element as bytes in its coder's nested encoding. Most user code wants
 * a string, an integer, a double or a KV of those, so the helpers here do the decoding and
 * encoding around a small callback that receives an sd_elem and emits sd_values.
 *
 * How it runs. sd_apply_map / _flat_map / _filter are ordinary ParDos of one built-in DoFn,
 * SD_FN_TYPED, whose configuration names the user's function and carries the output coder:
 *
 *     byte(mode: 0 map, 1 flat map, 2 filter)  lp(function name)  coder(output)
 *
 * The function is found by name in the worker, so a worker started by a runner (a separate
 * process) finds it as long as it was registered before sd_sdk_main; SD_REGISTER does that
 * in a constructor. The input's shape comes from the DoFn's input coder at run time.
 *
 * sd_out and friends need the DoFn instance behind the sd_ctx they are given. The typed DoFn
 * keeps "the instance whose callback is running" in a thread-local pointer while it calls the
 * user's function, which is exact because one instance runs one bundle on one thread at a
 * time (see sundial.h, Threads). The cost is that sd_out called from a thread the function
 * started itself finds nothing and returns SD_ESTATE.
 *
 * Collections. sd_collect writes each element, as varint(len) + nested encoding, into a file
 * of its own per DoFn instance under a temporary directory made at construction; after a run
 * the first access reads every file back and decodes the elements. Files rather than memory,
 * because the worker that runs the DoFn may be another process (sundial serve --process, a
 * PROCESS environment) on the same machine. A run that fails leaves what it wrote, which is
 * why each access after a new run reads the directory again.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "sdk-harness/src/sdk_int.h"

/* ================================================================ the function registry */

typedef struct typed_fn {
    char *name;
    sd_elem_fn fn;
    sd_pred_fn pred;
} typed_fn;

static pthread_mutex_t g_fn_lock = PTHREAD_MUTEX_INITIALIZER;
static typed_fn *g_fns;
static size_t g_n_fns, g_cap_fns;
static unsigned long g_anon_seq;

/* Called with g_fn_lock held. */
static typed_fn *fn_by_name(const char *name, size_t len)
{
    for (size_t i = 0; i < g_n_fns; i++) {
        if (strlen(g_fns[i].name) == len && memcmp(g_fns[i].name, name, len) == 0) {
            return &g_fns[i];
        }
    }
    return NULL;
}

/* Called with g_fn_lock held. */
static sd_status fn_add(const char *name, sd_elem_fn fn, sd_pred_fn pred)
{
    typed_fn *old = fn_by_name(name, strlen(name));
    if (old != NULL) {
        return old->fn == fn && old->pred == pred ? SD_OK : SD_EEXIST;
    }
    if (g_n_fns == g_cap_fns) {
        size_t cap = g_cap_fns ? g_cap_fns * 2 : 16;
        typed_fn *grown = sd_realloc(g_fns, cap * sizeof(*grown));
        if (grown == NULL) {
            return SD_ENOMEM;
        }
        g_fns = grown;
        g_cap_fns = cap;
    }
    char *copy = sd_strdup(name);
    if (copy == NULL) {
        return SD_ENOMEM;
    }
    g_fns[g_n_fns++] = (typed_fn){ .name = copy, .fn = fn, .pred = pred };
    return SD_OK;
}

static sd_status fn_register(const char *name, sd_elem_fn fn, sd_pred_fn pred)
{
    if (name == NULL || name[0] == '\0' || (fn == NULL && pred == NULL)) {
        return SD_EINVAL;
    }
    pthread_mutex_lock(&g_fn_lock);
    sd_status st = fn_add(name, fn, pred);
    pthread_mutex_unlock(&g_fn_lock);
    return st;
}

sd_status sd_register_elem_fn(const char *name, sd_elem_fn fn)
{
    return fn_register(name, fn, NULL);
}

sd_status sd_register_pred_fn(const char *name, sd_pred_fn pred)
{
    return fn_register(name, NULL, pred);
}

/*
 * The name of fn or pred, registering it under a generated name when it has none. OUT: *name
 * (caller owns; sd_free).
 */
static sd_status fn_name_of(sd_elem_fn fn, sd_pred_fn pred, char **name)
{
    sd_status st = SD_OK;
    *name = NULL;
    pthread_mutex_lock(&g_fn_lock);
    for (size_t i = 0; i < g_n_fns && *name == NULL; i++) {
        if ((fn != NULL && g_fns[i].fn == fn) || (pred != NULL && g_fns[i].pred == pred)) {
            *name = sd_strdup(g_fns[i].name);
            st = *name != NULL ? SD_OK : SD_ENOMEM;
            pthread_mutex_unlock(&g_fn_lock);
            return st;
        }
    }
    char *gen = sd_asprintf("sundial:unnamed-fn-%lu", ++g_anon_seq);
    if (gen == NULL || (st = fn_add(gen, fn, pred)) != SD_OK) {
        sd_free(gen);
        pthread_mutex_unlock(&g_fn_lock);
        return st != SD_OK ? st : SD_ENOMEM;
    }
    pthread_mutex_unlock(&g_fn_lock);
    *name = gen;
    return SD_OK;
}

static bool fn_lookup(sd_bytes name, sd_elem_fn *fn, sd_pred_fn *pred)
{
    pthread_mutex_lock(&g_fn_lock);
    typed_fn *f = fn_by_name((const char *)name.ptr, name.len);
    if (f != NULL) {
        *fn = f->fn;
        *pred = f->pred;
    }
    pthread_mutex_unlock(&g_fn_lock);
    return f != NULL;
}

/* ================================================================ types and coders */

sd_val sd_val_str(const char *s)
{
    return sd_val_strn(s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

static const char *type_name(sd_type t)
{
    switch (t) {
    case SD_TYPE_BYTES:
        return "bytes";
    case SD_TYPE_STR:
        return "string";
    case SD_TYPE_INT:
        return "int";
    case SD_TYPE_DOUBLE:
        return "double";
    case SD_TYPE_BOOL:
        return "bool";
    }
    return "?";
}

static bool scalar_type(const sd_coder *c, sd_type *t)
{
    switch (c->kind) {
    case SD_CODER_BYTES:
        *t = SD_TYPE_BYTES;
        return true;
    case SD_CODER_STRING_UTF8:
        *t = SD_TYPE_STR;
        return true;
    case SD_CODER_VARINT:
        *t = SD_TYPE_INT;
        return true;
    case SD_CODER_DOUBLE:
        *t = SD_TYPE_DOUBLE;
        return true;
    case SD_CODER_BOOL:
        *t = SD_TYPE_BOOL;
        return true;
    default:
        return false;
    }
}

/* The shape of a typed PCollection's elements. */
typedef struct shape {
    bool kv;
    sd_type key;
    sd_type value;
} shape;

static bool coder_shape(const sd_coder *c, shape *out)
{
    memset(out, 0, sizeof(*out));
    if (c == NULL) {
        return false;
    }
    if (c->kind == SD_CODER_KV) {
        out->kv = true;
        return scalar_type(c->components[0], &out->key) &&
               scalar_type(c->components[1], &out->value);
    }
    return scalar_type(c, &out->value);
}

/* Decode one scalar of type t; strings are copied NUL-terminated into scratch. */
static sd_status decode_value(sd_type t, sd_reader *r, sd_buf *scratch, sd_val *v)
{
    sd_status st;
    memset(v, 0, sizeof(*v));
    v->type = t;
    switch (t) {
    case SD_TYPE_BYTES:
    case SD_TYPE_STR: {
        sd_bytes b;
        if ((st = sd_read_bytes(r, &b)) != SD_OK) {
            return st;
        }
        sd_buf_reset(scratch);
        if ((st = sd_buf_append_bytes(scratch, b)) != SD_OK ||
            (st = sd_buf_append_byte(scratch, 0)) != SD_OK) {
            return st;
        }
        v->str = (const char *)scratch->data;
        v->len = b.len;
        return SD_OK;
    }
    case SD_TYPE_INT:
        return sd_read_int(r, &v->i);
    case SD_TYPE_DOUBLE:
        return sd_read_double(r, &v->d);
    case SD_TYPE_BOOL: {
        bool b;
        if ((st = sd_read_bool(r, &b)) == SD_OK) {
            v->i = b ? 1 : 0;
        }
        return st;
    }
    }
    return SD_EINVAL;
}

static sd_status
decode_elem(const shape *sh, sd_bytes e, sd_buf *kscratch, sd_buf *vscratch, sd_elem *out)
{
    sd_reader r = sd_reader_make(e);
    sd_status st;
    memset(out, 0, sizeof(*out));
    out->is_kv = sh->kv;
    if (sh->kv && (st = decode_value(sh->key, &r, kscratch, &out->key)) != SD_OK) {
        return st;
    }
    if ((st = decode_value(sh->value, &r, vscratch, &out->value)) != SD_OK) {
        return st;
    }
    return sd_reader_done(&r) ? SD_OK : SD_EPROTO;
}

/* Encode v as a value of type t. SD_EINVAL when the types differ. */
static sd_status encode_value(sd_type t, const sd_val *v, sd_buf *out)
{
    bool textual = v->type == SD_TYPE_STR || v->type == SD_TYPE_BYTES;
    switch (t) {
    case SD_TYPE_BYTES:
    case SD_TYPE_STR:
        return textual ? sd_enc_bytes(out, v->str, v->len) : SD_EINVAL;
    case SD_TYPE_INT:
        return v->type == SD_TYPE_INT ? sd_enc_int(out, v->i) : SD_EINVAL;
    case SD_TYPE_DOUBLE:
        return v->type == SD_TYPE_DOUBLE ? sd_enc_double(out, v->d) : SD_EINVAL;
    case SD_TYPE_BOOL:
        return v->type == SD_TYPE_BOOL ? sd_enc_bool(out, v->i != 0) : SD_EINVAL;
    }
    return SD_EINVAL;
}

/* ================================================================ the typed DoFn */

enum { MODE_MAP = 0, MODE_FLAT_MAP = 1, MODE_FILTER = 2 };

static const char *const mode_names[] = { "Map", "FlatMap", "Filter" };

typedef struct typed_state {
    int mode;
    sd_elem_fn fn;
    sd_pred_fn pred;
    sd_coder *out_coder;
    shape out;
    bool have_in;
    shape in;
    sd_buf kbuf, vbuf, obuf, fbuf;
    sd_ctx *ctx;  /* the callback running on this thread, or NULL */
    size_t n_out; /* emitted for the current element */
} typed_state;

static _Thread_local typed_state *t_current;

static void typed_teardown(void *state)
{
    typed_state *s = state;
    if (s == NULL) {
        return;
    }
    sd_coder_destroy(s->out_coder);
    sd_buf_deinit(&s->kbuf);
    sd_buf_deinit(&s->vbuf);
    sd_buf_deinit(&s->obuf);
    sd_buf_deinit(&s->fbuf);
    sd_free(s);
}

static sd_status typed_setup(sd_bytes config, void **state, sd_err *err)
{
    sd_reader r = sd_reader_make(config);
    uint8_t mode;
    sd_bytes name;
    typed_state *s = sd_calloc(1, sizeof(*s));
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_buf_init(&s->kbuf, 0);
    sd_buf_init(&s->vbuf, 0);
    sd_buf_init(&s->obuf, 0);
    sd_buf_init(&s->fbuf, 0);
    if (sd_reader_byte(&r, &mode) != SD_OK || mode > MODE_FILTER ||
        sd_reader_lp(&r, &name) != SD_OK ||
        sd__coder_deserialize(&r, &s->out_coder, err) != SD_OK) {
        typed_teardown(s);
        return sd_err_set(err, SD_EPROTO, "typed helper: malformed configuration");
    }
    s->mode = mode;
    if (!fn_lookup(name, &s->fn, &s->pred) || (mode == MODE_FILTER) != (s->pred != NULL)) {
        typed_teardown(s);
        return sd_err_set(err, SD_ENOTFOUND,
                          "%s: no %s function registered as \"%.*s\" in this worker (register "
                          "it before sd_sdk_main, e.g. with SD_REGISTER)",
                          mode_names[mode], mode == MODE_FILTER ? "predicate" : "element",
                          (int)name.len, (const char *)name.ptr);
    }
    if (!coder_shape(s->out_coder, &s->out)) {
        typed_teardown(s);
        return sd_err_set(err, SD_EINVAL, "%s: the output coder is not a typed helpers' type",
                          mode_names[mode]);
    }
    *state = s;
    return SD_OK;
}

static sd_status typed_process(sd_ctx *c, void *state)
{
    typed_state *s = state;
    sd_elem in;
    if (!s->have_in) {
        if (!coder_shape(sd_ctx_input_coder(c), &s->in)) {
            return sd_fail(c,
                           "%s: the input is not strings, ints, doubles, bools, bytes or KVs "
                           "of them",
                           mode_names[s->mode]);
        }
        s->have_in = true;
    }
    if (decode_elem(&s->in, sd_ctx_element(c), &s->kbuf, &s->vbuf, &in) != SD_OK) {
        return sd_fail(c, "%s: an element does not decode as its coder says", mode_names[s->mode]);
    }
    if (s->mode == MODE_FILTER) {
        return s->pred(&in) ? sd_emit(c, 0, sd_ctx_element(c)) : SD_OK;
    }
    typed_state *outer = t_current;
    s->ctx = c;
    s->n_out = 0;
    t_current = s;
    sd_status st = s->fn(c, &in);
    t_current = outer;
    s->ctx = NULL;
    if (st == SD_OK && s->mode == MODE_MAP && s->n_out != 1) {
        return sd_fail(c,
                       "Map: the function emitted %zu elements for one input (a Map emits "
                       "exactly one; use sd_apply_flat_map)",
                       s->n_out);
    }
    return st;
}

static typed_state *current_for(sd_ctx *c)
{
    typed_state *s = t_current;
    return s != NULL && s->ctx == c ? s : NULL;
}

static sd_status out_emit(sd_ctx *c, typed_state *s, const sd_val *key, const sd_val *v)
{
    sd_status st;
    if (s->out.kv != (key != NULL)) {
        return sd_fail(c, "%s: %s to an output that is %s", mode_names[s->mode],
                       key != NULL ? "sd_out_kv" : "sd_out",
                       s->out.kv ? "a KV (use sd_out_kv)" : "not a KV (use sd_out)");
    }
    sd_buf_reset(&s->obuf);
    if (key != NULL && (st = encode_value(s->out.key, key, &s->obuf)) != SD_OK) {
        return st == SD_EINVAL
                   ? sd_fail(c, "%s: emitted a %s key, but the output's keys are %s",
                             mode_names[s->mode], type_name(key->type), type_name(s->out.key))
                   : st;
    }
    if ((st = encode_value(s->out.value, v, &s->obuf)) != SD_OK) {
        return st == SD_EINVAL
                   ? sd_fail(c, "%s: emitted a %s, but the output holds %s", mode_names[s->mode],
                             type_name(v->type), type_name(s->out.value))
                   : st;
    }
    s->n_out++;
    return sd_emit(c, 0, sd_buf_bytes(&s->obuf));
}

sd_status sd_out(sd_ctx *c, sd_val v)
{
    typed_state *s = current_for(c);
    return s != NULL ? out_emit(c, s, NULL, &v) : SD_ESTATE;
}

sd_status sd_out_kv(sd_ctx *c, sd_val key, sd_val value)
{
    typed_state *s = current_for(c);
    return s != NULL ? out_emit(c, s, &key, &value) : SD_ESTATE;
}

sd_status sd_out_strf(sd_ctx *c, const char *fmt, ...)
{
    typed_state *s = current_for(c);
    if (s == NULL) {
        return SD_ESTATE;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    sd_buf_reset(&s->fbuf);
    sd_status st = n < 0 ? SD_EINVAL : sd_buf_reserve(&s->fbuf, (size_t)n + 1);
    if (st != SD_OK) {
        return st;
    }
    va_start(ap, fmt);
    vsnprintf((char *)s->fbuf.data, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return out_emit(
        c, s, NULL,
        &(sd_val){ .type = SD_TYPE_STR, .str = (const char *)s->fbuf.data, .len = (size_t)n });
}

/* ================================================================ construction */

static sd_pcoll *typed_apply(sd_pipeline *p,
                             const char *name,
                             sd_pcoll *input,
                             int mode,
                             sd_elem_fn fn,
                             sd_pred_fn pred,
                             const sd_coder *output_coder)
{
    shape sh;
    char *fn_name = NULL;
    sd_buf cfg;
    if (sd__pipeline_failed(p) || input == NULL) {
        return NULL;
    }
    const char *what = mode_names[mode];
    if (fn == NULL && pred == NULL) {
        return sd__pipeline_fail(p, SD_EINVAL, "%s \"%s\": no function", what,
                                 name != NULL ? name : "(null)");
    }
    if (!coder_shape(sd_pcoll_coder(input), &sh)) {
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "%s \"%s\": the input %s is not strings, ints, doubles, bools, "
                                 "bytes or KVs of them (use sd_pardo)",
                                 what, name != NULL ? name : "(null)", sd_pcoll_id(input));
    }
    if (output_coder == NULL) {
        output_coder = sd_pcoll_coder(input);
    }
    if (!coder_shape(output_coder, &sh)) {
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "%s \"%s\": the output coder is not a string, int, double, "
                                 "bool, bytes or KV of them",
                                 what, name != NULL ? name : "(null)");
    }
    sd_status st = fn_name_of(fn, pred, &fn_name);
    if (st != SD_OK) {
        return sd__pipeline_fail(p, st, "%s \"%s\": cannot register its function", what,
                                 name != NULL ? name : "(null)");
    }
    sd_buf_init(&cfg, 0);
    if ((st = sd_buf_append_byte(&cfg, (uint8_t)mode)) != SD_OK ||
        (st = sd_buf_put_lp(&cfg, sd_bytes_str(fn_name))) != SD_OK ||
        (st = sd__coder_serialize(output_coder, &cfg)) != SD_OK) {
        sd_buf_deinit(&cfg);
        sd_free(fn_name);
        return sd__pipeline_fail(p, st, "out of memory");
    }
    sd_pcoll *out = sd_apply(p, name, input, SD_FN_TYPED, sd_buf_bytes(&cfg), output_coder);
    sd_buf_deinit(&cfg);
    sd_free(fn_name);
    return out;
}

sd_pcoll *sd_apply_map(sd_pipeline *p,
                       const char *name,
                       sd_pcoll *input,
                       sd_elem_fn fn,
                       const sd_coder *output_coder)
{
    return typed_apply(p, name, input, MODE_MAP, fn, NULL, output_coder);
}

sd_pcoll *sd_apply_flat_map(sd_pipeline *p,
                            const char *name,
                            sd_pcoll *input,
                            sd_elem_fn fn,
                            const sd_coder *output_coder)
{
    return typed_apply(p, name, input, MODE_FLAT_MAP, fn, NULL, output_coder);
}

sd_pcoll *sd_apply_filter(sd_pipeline *p, const char *name, sd_pcoll *input, sd_pred_fn pred)
{
    return typed_apply(p, name, input, MODE_FILTER, NULL, pred, NULL);
}

/* ================================================================ collections */

/* The collecting DoFn: config lp(directory). One file per instance. */
static sd_status collect_setup(sd_bytes config, void **state, sd_err *err)
{
    static unsigned long seq;
    static pthread_mutex_t seq_lock = PTHREAD_MUTEX_INITIALIZER;
    sd_reader r = sd_reader_make(config);
    sd_bytes dir;
    if (sd_reader_lp(&r, &dir) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "Collect: malformed configuration");
    }
    pthread_mutex_lock(&seq_lock);
    unsigned long n = ++seq;
    pthread_mutex_unlock(&seq_lock);
    char *path =
        sd_asprintf("%.*s/part-%ld-%lu", (int)dir.len, (const char *)dir.ptr, (long)getpid(), n);
    if (path == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        sd_err_set(err, SD_EIO, "Collect: cannot create %s: %s", path, strerror(errno));
        sd_free(path);
        return SD_EIO;
    }
    sd_free(path);
    *state = f;
    return SD_OK;
}

static sd_status collect_process(sd_ctx *c, void *state)
{
    sd_bytes e = sd_ctx_element(c);
    uint8_t len[10];
    size_t n = 0;
    for (uint64_t v = e.len; n == 0 || v != 0; v >>= 7) {
        len[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    }
    if (fwrite(len, 1, n, state) != n || fwrite(e.ptr, 1, e.len, state) != e.len) {
        return sd_fail(c, "Collect: cannot write a result file: %s", strerror(errno));
    }
    return SD_OK;
}

static sd_status collect_finish(sd_ctx *c, void *state)
{
    if (fflush(state) != 0) {
        return sd_fail(c, "Collect: cannot write a result file: %s", strerror(errno));
    }
    return SD_OK;
}

static void collect_teardown(void *state)
{
    if (state != NULL) {
        fclose(state);
    }
}

struct sd_collection {
    sd_pipeline *p;
    char *name;
    char *dir;
    const sd_coder *coder;
    shape sh;
    long loaded_run; /* the sd__pipeline_runs() count when loaded; -1 never */
    sd_elem *elems;
    char **strings; /* one owned block per element: its strings, NUL-terminated */
    size_t n;
};

static void collection_clear(sd_collection *col)
{
    for (size_t i = 0; i < col->n; i++) {
        sd_free(col->strings[i]);
    }
    sd_free(col->strings);
    sd_free(col->elems);
    col->strings = NULL;
    col->elems = NULL;
    col->n = 0;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
            continue;
        }
        char *path = sd_asprintf("%s/%s", dir, de->d_name);
        if (path != NULL) {
            unlink(path);
            sd_free(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    rmdir(dir);
}

static void collection_free(void *obj)
{
    sd_collection *col = obj;
    collection_clear(col);
    if (col->dir != NULL) {
        remove_dir(col->dir);
    }
    sd_free(col->dir);
    sd_free(col->name);
    sd_free(col);
}

sd_collection *sd_collect(sd_pipeline *p, const char *name, sd_pcoll *input)
{
    if (sd__pipeline_failed(p) || input == NULL) {
        return NULL;
    }
    sd_collection *col = sd_calloc(1, sizeof(*col));
    if (col == NULL) {
        return sd__pipeline_fail(p, SD_ENOMEM, "out of memory");
    }
    col->p = p;
    col->loaded_run = -1;
    col->coder = sd_pcoll_coder(input);
    col->name = sd_strdup(name != NULL ? name : "(null)");
    const char *tmp = getenv("TMPDIR");
    col->dir = sd_asprintf("%s/sundial-collect-XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    if (col->name == NULL || col->dir == NULL) {
        collection_free(col);
        return sd__pipeline_fail(p, SD_ENOMEM, "out of memory");
    }
    if (!coder_shape(col->coder, &col->sh)) {
        collection_free(col);
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "Collect \"%s\": the input %s is not strings, ints, doubles, "
                                 "bools, bytes or KVs of them",
                                 name, sd_pcoll_id(input));
    }
    if (mkdtemp(col->dir) == NULL) {
        int e = errno;
        sd_free(col->dir);
        col->dir = NULL;
        collection_free(col);
        return sd__pipeline_fail(p, SD_EIO, "Collect \"%s\": cannot make a directory: %s", name,
                                 strerror(e));
    }
    if (!sd__pipeline_own(p, col, collection_free)) {
        return NULL;
    }
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    if (sd_buf_put_lp(&cfg, sd_bytes_str(col->dir)) != SD_OK) {
        sd_buf_deinit(&cfg);
        return sd__pipeline_fail(p, SD_ENOMEM, "out of memory");
    }
    sd_apply(p, name, input, SD_FN_COLLECT, sd_buf_bytes(&cfg), NULL);
    sd_buf_deinit(&cfg);
    return sd__pipeline_failed(p) ? NULL : col;
}

/* Decode one record's element into col->elems[col->n], owning its strings. */
static sd_status collection_add(sd_collection *col, sd_bytes e, sd_buf *kb, sd_buf *vb)
{
    sd_elem el;
    sd_status st = decode_elem(&col->sh, e, kb, vb, &el);
    if (st != SD_OK) {
        return st;
    }
    size_t klen = el.key.str != NULL ? el.key.len + 1 : 0;
    size_t vlen = el.value.str != NULL ? el.value.len + 1 : 0;
    char *block = NULL;
    if (klen + vlen > 0) {
        block = sd_malloc(klen + vlen);
        if (block == NULL) {
            return SD_ENOMEM;
        }
        if (klen > 0) {
            memcpy(block, el.key.str, klen);
            el.key.str = block;
        }
        if (vlen > 0) {
            memcpy(block + klen, el.value.str, vlen);
            el.value.str = block + klen;
        }
    }
    col->elems[col->n] = el;
    col->strings[col->n] = block;
    col->n++;
    return SD_OK;
}

static sd_status grow(sd_collection *col, size_t *cap)
{
    if (col->n < *cap) {
        return SD_OK;
    }
    size_t ncap = *cap ? *cap * 2 : 64;
    sd_elem *e = sd_realloc(col->elems, ncap * sizeof(*e));
    if (e == NULL) {
        return SD_ENOMEM;
    }
    col->elems = e;
    char **s = sd_realloc(col->strings, ncap * sizeof(*s));
    if (s == NULL) {
        return SD_ENOMEM;
    }
    col->strings = s;
    *cap = ncap;
    return SD_OK;
}

static sd_status load_file(sd_collection *col, const char *path, size_t *cap)
{
    FILE *f = fopen(path, "rb");
    sd_buf data, kb, vb;
    sd_status st = SD_OK;
    uint8_t chunk[65536];
    size_t got;
    if (f == NULL) {
        return SD_EIO;
    }
    sd_buf_init(&data, 0);
    while (st == SD_OK && (got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        st = sd_buf_append(&data, chunk, got);
    }
    fclose(f);
    sd_buf_init(&kb, 0);
    sd_buf_init(&vb, 0);
    sd_reader r = sd_reader_make(sd_buf_bytes(&data));
    while (st == SD_OK && !sd_reader_done(&r)) {
        sd_bytes e;
        if ((st = sd_reader_lp(&r, &e)) == SD_OK && (st = grow(col, cap)) == SD_OK) {
            st = collection_add(col, e, &kb, &vb);
        }
    }
    sd_buf_deinit(&kb);
    sd_buf_deinit(&vb);
    sd_buf_deinit(&data);
    return st;
}

static sd_status collection_load(sd_collection *col)
{
    long runs = sd__pipeline_runs(col->p);
    if (runs == 0) {
        return SD_ESTATE;
    }
    if (col->loaded_run == runs) {
        return SD_OK;
    }
    collection_clear(col);
    DIR *d = opendir(col->dir);
    if (d == NULL) {
        return SD_EIO;
    }
    size_t cap = 0;
    sd_status st = SD_OK;
    struct dirent *de;
    while (st == SD_OK && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "part-", 5) != 0) {
            continue;
        }
        char *path = sd_asprintf("%s/%s", col->dir, de->d_name);
        st = path != NULL ? load_file(col, path, &cap) : SD_ENOMEM;
        sd_free(path);
    }
    closedir(d);
    if (st != SD_OK) {
        collection_clear(col);
        sd__pipeline_fail(col->p, st, "Collect \"%s\": cannot read the results in %s: %s",
                          col->name, col->dir, sd_status_str(st));
        return st;
    }
    col->loaded_run = runs;
    return SD_OK;
}

long sd_collection_len(sd_collection *col)
{
    if (col == NULL || collection_load(col) != SD_OK) {
        return -1;
    }
    return (long)col->n;
}

const sd_elem *sd_collection_at(sd_collection *col, size_t i)
{
    if (col == NULL || collection_load(col) != SD_OK || i >= col->n) {
        return NULL;
    }
    return &col->elems[i];
}

static int value_cmp(const sd_val *a, const sd_val *b)
{
    switch (a->type) {
    case SD_TYPE_BYTES:
    case SD_TYPE_STR:
        return sd_bytes_cmp(sd_bytes_make(a->str, a->len), sd_bytes_make(b->str, b->len));
    case SD_TYPE_INT:
    case SD_TYPE_BOOL:
        return a->i < b->i ? -1 : a->i > b->i;
    case SD_TYPE_DOUBLE:
        return a->d < b->d ? -1 : a->d > b->d;
    }
    return 0;
}

static int elem_qcmp(const void *x, const void *y)
{
    const sd_elem *a = x, *b = y;
    int k = a->is_kv ? value_cmp(&a->key, &b->key) : 0;
    return k != 0 ? k : value_cmp(&a->value, &b->value);
}

void sd_collection_sort(sd_collection *col)
{
    if (col == NULL || collection_load(col) != SD_OK || col->n < 2) {
        return;
    }
    /* The string blocks travel with their elements' pointers, so only elems is sorted; the
     * blocks array stays a list of what to free. */
    qsort(col->elems, col->n, sizeof(sd_elem), elem_qcmp);
}

/* ================================================================ registration */

void sd__register_typed_builtins(void)
{
    static const sd_dofn typed = { .setup = typed_setup,
                                   .process = typed_process,
                                   .teardown = typed_teardown };
    static const sd_dofn collect = { .setup = collect_setup,
                                     .process = collect_process,
                                     .finish_bundle = collect_finish,
                                     .teardown = collect_teardown };
    if (sd_register_dofn(SD_FN_TYPED, &typed) != SD_OK ||
        sd_register_dofn(SD_FN_COLLECT, &collect) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
    sd__register_textio_builtins();
    sd__register_partitioned_builtins();
}
