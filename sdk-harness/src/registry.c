/*
 * Sundial C SDK: the name registry for user code, the payload formats that carry those names
 * through a pipeline, the scalar encoding helpers, and protobuf-c messages in base arenas.
 *
 * A C function cannot travel inside a pipeline proto, so user code is registered by name at
 * start-up and the pipeline carries the name plus a configuration blob. The runner hands the
 * same payload back to the worker in a ProcessBundleDescriptor, and the worker, which is the
 * same program (loopback) or the same binary started again (process environment), looks the
 * name up here. The registry is one mutex-guarded map per kind; lookups happen once per
 * processor, never per element, so the lock costs nothing that matters.
 *
 * Registering the same name twice with identical callbacks is accepted (a test may register
 * in every test case); a different definition under a taken name is SD_EEXIST, because the
 * pipeline would silently run whichever came first otherwise.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "sdk-harness/src/sdk_int.h"

/* ================================================================ protos in arenas */

void *sd__pb_alloc(sd_arena *a, const ProtobufCMessageDescriptor *d)
{
    void *m = sd_arena_alloc(a, d->sizeof_message);
    if (m != NULL) {
        protobuf_c_message_init(d, m);
    }
    return m;
}

/* ================================================================ registry */

typedef struct reg_entry {
    int kind; /* 0 dofn, 1 combinefn, 2 timestamp fn */
    sd_dofn dofn;
    sd_combinefn combinefn;
    sd_timestamp_fn tsfn;
    sd_group_fn groupfn;
    sd_partition_gen_fn genfn;
} reg_entry;

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static sd_map g_reg[5];

static void reg_free(void *v)
{
    sd_free(v);
}

static sd_status reg_put(int kind, const char *name, const reg_entry *e)
{
    sd_status st = SD_OK;
    if (name == NULL || name[0] == '\0') {
        return SD_EINVAL;
    }
    pthread_mutex_lock(&g_reg_lock);
    if (g_reg[kind].value_free == NULL) {
        sd_map_init(&g_reg[kind], reg_free);
    }
    reg_entry *old = sd_map_get_str(&g_reg[kind], name);
    if (old != NULL) {
        st = memcmp(old, e, sizeof(*e)) == 0 ? SD_OK : SD_EEXIST;
    } else {
        reg_entry *n = sd_memdup(e, sizeof(*e));
        if (n == NULL) {
            st = SD_ENOMEM;
        } else if ((st = sd_map_put_str(&g_reg[kind], name, n)) != SD_OK) {
            sd_free(n);
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
    return st;
}

static const reg_entry *reg_get(int kind, sd_bytes name)
{
    sd__register_builtins();
    pthread_mutex_lock(&g_reg_lock);
    const reg_entry *e = sd_map_get(&g_reg[kind], name);
    pthread_mutex_unlock(&g_reg_lock);
    return e;
}

sd_status sd_register_dofn(const char *name, const sd_dofn *fn)
{
    reg_entry e;
    if (fn == NULL || fn->process == NULL) {
        return SD_EINVAL;
    }
    memset(&e, 0, sizeof(e));
    e.kind = 0;
    e.dofn = *fn;
    return reg_put(0, name, &e);
}

sd_status sd_register_combinefn(const char *name, const sd_combinefn *fn)
{
    reg_entry e;
    if (fn == NULL || fn->create == NULL || fn->add == NULL || fn->merge == NULL ||
        fn->extract == NULL) {
        return SD_EINVAL;
    }
    memset(&e, 0, sizeof(e));
    e.kind = 1;
    e.combinefn = *fn;
    return reg_put(1, name, &e);
}

sd_status sd_register_timestamp_fn(const char *name, sd_timestamp_fn fn)
{
    reg_entry e;
    if (fn == NULL) {
        return SD_EINVAL;
    }
    memset(&e, 0, sizeof(e));
    e.kind = 2;
    e.tsfn = fn;
    return reg_put(2, name, &e);
}

const sd_dofn *sd__find_dofn(sd_bytes name)
{
    const reg_entry *e = reg_get(0, name);
    return e != NULL ? &e->dofn : NULL;
}

const sd_combinefn *sd__find_combinefn(sd_bytes name)
{
    const reg_entry *e = reg_get(1, name);
    return e != NULL ? &e->combinefn : NULL;
}

sd_timestamp_fn sd__find_timestamp_fn(sd_bytes name)
{
    const reg_entry *e = reg_get(2, name);
    return e != NULL ? e->tsfn : NULL;
}

sd_status sd_register_group_fn(const char *name, sd_group_fn fn)
{
    reg_entry e;
    if (fn == NULL) {
        return SD_EINVAL;
    }
    memset(&e, 0, sizeof(e));
    e.kind = 3;
    e.groupfn = fn;
    return reg_put(3, name, &e);
}

sd_group_fn sd__find_group_fn(sd_bytes name)
{
    const reg_entry *e = reg_get(3, name);
    return e != NULL ? e->groupfn : NULL;
}

sd_status sd_register_partition_gen(const char *name, sd_partition_gen_fn fn)
{
    reg_entry e;
    if (fn == NULL) {
        return SD_EINVAL;
    }
    memset(&e, 0, sizeof(e));
    e.kind = 4;
    e.genfn = fn;
    return reg_put(4, name, &e);
}

sd_partition_gen_fn sd__find_partition_gen(sd_bytes name)
{
    const reg_entry *e = reg_get(4, name);
    return e != NULL ? e->genfn : NULL;
}

/* ================================================================ payloads */

sd_status sd__dofn_payload_encode(sd_buf *out,
                                  const char *name,
                                  sd_bytes config,
                                  const char *const *tags,
                                  size_t n_tags,
                                  const char *const *sides,
                                  size_t n_sides)
{
    sd_status st;
    if ((st = sd_buf_put_lp(out, sd_bytes_str(name))) != SD_OK ||
        (st = sd_buf_put_lp(out, config)) != SD_OK ||
        (st = sd_buf_put_varint(out, n_tags)) != SD_OK) {
        return st;
    }
    for (size_t i = 0; i < n_tags; i++) {
        if ((st = sd_buf_put_lp(out, sd_bytes_str(tags[i]))) != SD_OK) {
            return st;
        }
    }
    if ((st = sd_buf_put_varint(out, n_sides)) != SD_OK) {
        return st;
    }
    for (size_t i = 0; i < n_sides; i++) {
        if ((st = sd_buf_put_lp(out, sd_bytes_str(sides[i]))) != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

static sd_status read_lp_list(sd_reader *r, size_t *n, sd_bytes **items)
{
    uint64_t count;
    if (sd_reader_varint(r, &count) != SD_OK || count > sd_reader_left(r)) {
        return SD_EPROTO;
    }
    *n = (size_t)count;
    *items = NULL;
    if (count == 0) {
        return SD_OK;
    }
    *items = sd_calloc((size_t)count, sizeof(sd_bytes));
    if (*items == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        if (sd_reader_lp(r, &(*items)[i]) != SD_OK) {
            return SD_EPROTO;
        }
    }
    return SD_OK;
}

sd_status sd__dofn_payload_decode(sd_bytes in, sd__dofn_payload *out, sd_err *err)
{
    sd_reader r = sd_reader_make(in);
    sd_status st;
    memset(out, 0, sizeof(*out));
    if (sd_reader_lp(&r, &out->name) != SD_OK || sd_reader_lp(&r, &out->config) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "%s payload: expected lp(name) lp(config)",
                          SD_URN_DOFN_C);
    }
    if ((st = read_lp_list(&r, &out->n_outputs, &out->outputs)) != SD_OK ||
        (st = read_lp_list(&r, &out->n_sides, &out->sides)) != SD_OK) {
        sd__dofn_payload_deinit(out);
        return sd_err_set(err, st, "%s payload of DoFn \"%.*s\": malformed tag lists",
                          SD_URN_DOFN_C, (int)out->name.len, (const char *)out->name.ptr);
    }
    return SD_OK;
}

void sd__dofn_payload_deinit(sd__dofn_payload *p)
{
    sd_free(p->outputs);
    sd_free(p->sides);
    p->outputs = NULL;
    p->sides = NULL;
}

sd_status sd__combinefn_payload_encode(sd_buf *out, const char *name, sd_bytes config)
{
    sd_status st = sd_buf_put_lp(out, sd_bytes_str(name));
    return st != SD_OK ? st : sd_buf_put_lp(out, config);
}

sd_status sd__combinefn_payload_decode(sd_bytes in, sd_bytes *name, sd_bytes *config, sd_err *err)
{
    sd_reader r = sd_reader_make(in);
    if (sd_reader_lp(&r, name) != SD_OK || sd_reader_lp(&r, config) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "%s payload: expected lp(name) lp(config)",
                          SD_URN_COMBINEFN_C);
    }
    return SD_OK;
}

/* ================================================================ coder trees as bytes */

sd_status sd__coder_serialize(const sd_coder *c, sd_buf *out)
{
    sd_status st;
    if ((st = sd_buf_put_lp(out, sd_bytes_str(c->urn))) != SD_OK ||
        (st = sd_buf_put_lp(out, c->payload)) != SD_OK ||
        (st = sd_buf_put_varint(out, c->n_components)) != SD_OK) {
        return st;
    }
    for (size_t i = 0; i < c->n_components; i++) {
        if ((st = sd__coder_serialize(c->components[i], out)) != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

static sd_status coder_deser(sd_reader *r, int depth, sd_coder **out, sd_err *err)
{
    sd_bytes urn, payload;
    uint64_t n;
    sd_coder *kids[8] = { 0 };
    sd_status st = SD_OK;
    if (depth > 32 || sd_reader_lp(r, &urn) != SD_OK || sd_reader_lp(r, &payload) != SD_OK ||
        sd_reader_varint(r, &n) != SD_OK || n > 8) {
        return sd_err_set(err, SD_EPROTO, "serialized coder: malformed");
    }
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        st = coder_deser(r, depth + 1, &kids[i], err);
    }
    char *u = st == SD_OK ? sd_strndup((const char *)urn.ptr, urn.len) : NULL;
    if (st == SD_OK && u == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (st == SD_OK) {
        st = sd_coder_from_urn(u, payload, kids, (size_t)n, out, err);
    }
    sd_free(u);
    for (size_t i = 0; i < n; i++) {
        sd_coder_destroy(kids[i]);
    }
    return st;
}

sd_status sd__coder_deserialize(sd_reader *r, sd_coder **out, sd_err *err)
{
    return coder_deser(r, 0, out, err);
}

/* ================================================================ rendering */

static sd_status render_string(sd_bytes s, sd_buf *out)
{
    sd_status st = sd_buf_append_byte(out, '"');
    for (size_t i = 0; i < s.len && st == SD_OK; i++) {
        uint8_t ch = s.ptr[i];
        if (ch == '"' || ch == '\\') {
            st = sd_buf_printf(out, "\\%c", ch);
        } else if (ch < 0x20 || ch == 0x7f) {
            st = sd_buf_printf(out, "\\x%02x", ch);
        } else {
            st = sd_buf_append_byte(out, ch);
        }
    }
    return st != SD_OK ? st : sd_buf_append_byte(out, '"');
}

static sd_status render_hex(sd_bytes s, sd_buf *out)
{
    sd_status st = sd_buf_append_str(out, "0x");
    for (size_t i = 0; i < s.len && st == SD_OK; i++) {
        st = sd_buf_printf(out, "%02x", s.ptr[i]);
    }
    return st;
}

static sd_status render_at(const sd_coder *c, sd_reader *r, sd_buf *out, int depth)
{
    sd_status st;
    sd_bytes b;
    uint64_t u;
    if (depth > 16) {
        return SD_EPROTO;
    }
    switch (c->kind) {
    case SD_CODER_STRING_UTF8:
        if ((st = sd_reader_lp(r, &b)) != SD_OK) {
            return st;
        }
        return render_string(b, out);
    case SD_CODER_BYTES: {
        if ((st = sd_reader_lp(r, &b)) != SD_OK) {
            return st;
        }
        bool printable = true;
        for (size_t i = 0; i < b.len; i++) {
            printable = printable && b.ptr[i] >= 0x20 && b.ptr[i] < 0x7f;
        }
        return printable ? render_string(b, out) : render_hex(b, out);
    }
    case SD_CODER_VARINT:
        if ((st = sd_reader_varint(r, &u)) != SD_OK) {
            return st;
        }
        return sd_buf_printf(out, "%lld", (long long)(int64_t)u);
    case SD_CODER_DOUBLE: {
        double d;
        if ((st = sd_read_double(r, &d)) != SD_OK) {
            return st;
        }
        return sd_buf_printf(out, "%.17g", d);
    }
    case SD_CODER_BOOL: {
        bool v;
        if ((st = sd_read_bool(r, &v)) != SD_OK) {
            return st;
        }
        return sd_buf_append_str(out, v ? "true" : "false");
    }
    case SD_CODER_KV:
        if ((st = sd_buf_append_byte(out, '(')) != SD_OK ||
            (st = render_at(c->components[0], r, out, depth + 1)) != SD_OK ||
            (st = sd_buf_append_str(out, ", ")) != SD_OK ||
            (st = render_at(c->components[1], r, out, depth + 1)) != SD_OK) {
            return st;
        }
        return sd_buf_append_byte(out, ')');
    case SD_CODER_ITERABLE: {
        sd_iterable_reader it;
        bool has = true;
        if (sd_iterable_begin(&it, c, r, NULL) != SD_OK) {
            return SD_EPROTO;
        }
        st = sd_buf_append_byte(out, '[');
        for (size_t i = 0; st == SD_OK; i++) {
            sd_bytes e;
            if (sd_iterable_next(&it, &e, &has, NULL) != SD_OK) {
                return SD_EPROTO;
            }
            if (!has) {
                break;
            }
            sd_reader er = sd_reader_make(e);
            if (i > 0) {
                st = sd_buf_append_str(out, ", ");
            }
            if (st == SD_OK) {
                st = render_at(c->components[0], &er, out, depth + 1);
            }
        }
        return st != SD_OK ? st : sd_buf_append_byte(out, ']');
    }
    default: {
        const uint8_t *start = r->p;
        if ((st = sd_coder_skip(c, r, true, NULL)) != SD_OK) {
            return st;
        }
        return render_hex(sd_bytes_make(start, (size_t)(r->p - start)), out);
    }
    }
}

sd_status sd__render_value(const sd_coder *c, sd_bytes value, sd_buf *out)
{
    sd_reader r = sd_reader_make(value);
    size_t mark = out->len;
    sd_status st = c != NULL ? render_at(c, &r, out, 0) : SD_EPROTO;
    if (st == SD_ENOMEM || st == SD_ETOOBIG) {
        return st;
    }
    if (st != SD_OK || !sd_reader_done(&r)) {
        out->len = mark;
        return render_hex(value, out);
    }
    return SD_OK;
}

/* ================================================================ scalar helpers */

sd_status sd_enc_bytes(sd_buf *out, const void *p, size_t n)
{
    return sd_buf_put_lp(out, sd_bytes_make(p, n));
}

sd_status sd_enc_str(sd_buf *out, const char *s)
{
    return sd_buf_put_lp(out, sd_bytes_str(s));
}

sd_status sd_enc_int(sd_buf *out, int64_t v)
{
    return sd_buf_put_varint(out, (uint64_t)v);
}

sd_status sd_enc_double(sd_buf *out, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return sd_buf_put_be64(out, bits);
}

sd_status sd_enc_bool(sd_buf *out, bool v)
{
    return sd_buf_append_byte(out, v ? 1 : 0);
}

sd_status sd_read_bytes(sd_reader *r, sd_bytes *out)
{
    return sd_reader_lp(r, out);
}

sd_status sd_read_int(sd_reader *r, int64_t *out)
{
    uint64_t u;
    sd_status st = sd_reader_varint(r, &u);
    if (st == SD_OK) {
        *out = (int64_t)u;
    }
    return st;
}

sd_status sd_read_double(sd_reader *r, double *out)
{
    uint64_t bits;
    sd_status st = sd_reader_be64(r, &bits);
    if (st == SD_OK) {
        memcpy(out, &bits, sizeof(bits));
    }
    return st;
}

sd_status sd_read_bool(sd_reader *r, bool *out)
{
    uint8_t b;
    if (sd_reader_left(r) < 1 || r->p[0] > 1) {
        return SD_EPROTO;
    }
    sd_status st = sd_reader_byte(r, &b);
    if (st == SD_OK) {
        *out = b != 0;
    }
    return st;
}
