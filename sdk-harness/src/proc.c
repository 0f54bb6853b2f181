/*
 * Sundial C SDK: the bundle processor — executes one ProcessBundleDescriptor.
 *
 * A descriptor is a small graph of fused transforms between data sources and data sinks. The
 * processor turns it into operators connected through PCollection nodes and pushes elements
 * through them depth-first: a source decodes windowed values from its byte stream and hands
 * each to the consumers of its output PCollection, which process it and emit to theirs, until
 * a sink appends the encoded value to its outgoing buffer.
 *
 *     data stream --> [source] --pc--> [pardo] --pc--> [precombine] ... --pc--> [sink] --> out
 *                                         \--pc--> [window_into] --pc--> [sink] --> out
 *
 * No element is ever copied between operators: a windowed value travels as a borrowed view
 * (timestamp, windows, pane, element bytes). Operators that must keep data beyond one call
 * (precombine tables, sink buffers, DoFn emits built in scratch buffers) copy it.
 *
 * Operators (by transform URN):
 *   beam:runner:source:v1 / sink:v1        decode / encode with the RemoteGrpcPort's coder;
 *                                         a port coder of length_prefix(C) around a
 *                                         PCollection coder C is unwrapped / wrapped.
 *   beam:transform:pardo:v1                a registered C DoFn (beam:dofn:sundial_c:v1),
 *                                         called once per element and window.
 *   beam:transform:window_into:v1          global, fixed, sliding, sessions.
 *   beam:transform:flatten:v1              forwards every input to its output.
 *   combine components                     precombine (a per-bundle table, flushed at the end
 *                                         in key order), merge_accumulators, extract_outputs,
 *                                         convert_to_accumulators, combine_grouped_values.
 * Anything else fails processor creation with a message naming the transform and URN.
 *
 * Order: start_bundle runs consumers-first and finish_bundle producers-first (topological
 * order from the sources), so everything a finishing operator emits still finds its consumers
 * active; sinks flush last and send is_last.
 *
 * Failure: the first error of a bundle (a DoFn's sd_fail message, or the status of whatever
 * failed) ends the bundle. A processor whose bundle failed is destroyed, never reused, since
 * user state after a failure is unknown.
 */
#include "sdk-harness/src/sdk_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/sdf_int.h"

#define SINK_FLUSH_BYTES (1u << 20)
#define PRECOMBINE_MAX_KEYS 10000

#define PLF(x) org__apache__beam__model__pipeline__v1__##x
#define FNF(x) org__apache__beam__model__fn_execution__v1__##x

typedef SD_FN(ProcessBundleDescriptor) pb_PBD;
typedef SD_PL(PTransform) pb_PTransform;
typedef SD_PL(FunctionSpec) pb_FunctionSpec;

/* ================================================================ types */

typedef struct winfn {
    sd_window_kind kind;
    int64_t size;
    int64_t period;
    int64_t offset;
    int64_t gap;
} winfn;

typedef struct op op;

typedef struct pcn {
    char *id;
    sd_coder *coder;
    sd_coder *window_coder;
    winfn wf;
    sd_vec consumers; /* op * */
} pcn;

typedef struct wv {
    sd_time ts;
    const sd_window *windows;
    size_t n_windows;
    sd_pane pane;
    sd_bytes elem;
} wv;

typedef enum op_kind {
    OP_SOURCE,
    OP_SINK,
    OP_PARDO,
    OP_WINDOW_INTO,
    OP_FLATTEN,
    OP_PRECOMBINE,
    OP_MERGE,
    OP_EXTRACT,
    OP_CONVERT,
    OP_COMBINE_GROUPED
} op_kind;

typedef struct side {
    char *local;
    pcn *pc;
    bool multimap;
} side;

struct sd_ctx {
    op *op;
    const wv *in; /* NULL outside process and on_timer */
    sd_window win;
    sd_buf scratch;
    sd_bytes key;  /* stateful: the current key */
    sd_time fire;  /* on_timer: the firing time */
    sd_vec reads;  /* sd_buf * holding state reads until the callback returns */
    sd__sdf_call *sdf; /* splittable DoFns: the running SDF callback's tracker etc. */
};

typedef struct tfam {
    char *family;
    sd_coder *coder;
    sd_buf out;
    sd_buf in_pending; /* the incomplete tail of an incoming timer chunk */
    bool done;
} tfam;

typedef struct acc_entry {
    sd_window w;
    sd_time min_ts;
    sd_buf key;
    sd_buf acc;
} acc_entry;

struct op {
    op_kind kind;
    char *tid;
    sd__proc *bp;
    pcn *in;
    pcn **outs;
    size_t n_outs;
    bool visited;
    /* source / sink */
    sd_coder *port_coder;
    bool lp_wrap;
    bool param_wv;
    sd_buf pending;
    bool done;
    sd_wv_header hdr;
    /* pardo */
    const sd_dofn *fn;
    void *state;
    bool setup_done;
    uint8_t *payload;
    sd__dofn_payload pl;
    sd_ctx ctx;
    side *sides;
    size_t n_sides;
    bool stateful;
    char **state_ids;
    sd_coder **state_coders;
    sd__state_info *state_infos; /* kind, coders and CombineFn of each state */
    sd_coder **state_key_coders; /* map state keys */
    uint8_t **state_cfgs;        /* combining state: CombineFn payload copies */
    size_t n_states;
    size_t n_state_slots; /* allocated entries of the arrays above (>= n_states) */
    tfam *fams;
    size_t n_fams;
    sd_timer timer; /* scratch for encoding and decoding */
    sd_map counters; /* name -> int64_t * */
    /* splittable DoFns (sdf_role: 0 none, else an SDF_* role) */
    int sdf_role;
    sd_wm_spec wm_spec;
    bool sdf_feeds;     /* source: its output is an SDF process op's input */
    size_t n_emitted;   /* source: elements emitted in this bundle */
    size_t stop_at;     /* source: emit no element with index >= this (split; SIZE_MAX) */
    op *sdf_src;        /* process: the data source of its input (the residual encoding) */
    char *main_local;   /* process: the main input's local name */
    char **out_locals;  /* process: output local names */
    size_t n_out_locals;
    /* window_into */
    winfn wf;
    /* combines */
    const sd_combinefn *cfn;
    uint8_t *cpayload;
    sd_bytes ccfg;
    sd_coder *acc_coder;
    sd_map accs; /* window+key -> acc_entry * */
    sd_buf b1, b2, b3;
};

struct sd__proc {
    char *id;
    sd_vec pcs;   /* pcn * */
    sd_vec ops;   /* op *, topological order after create */
    sd_vec srcs;  /* op * */
    sd_vec sinks; /* op * */
    const sd__bundle_io *io;
    char *instruction;
    sd_err err;
    sd_map side_cache; /* key -> sd_buf * */
    bool broken;
    sd_vec residuals;       /* sd__residual_root of the running bundle */
    pthread_mutex_t split_mu; /* guards sdf_active and its tracker against split requests */
    sd__sdf_call *sdf_active; /* the SDF call now in process, or NULL */
    op *sdf_active_op;
    sd_vec *sdf_splits;       /* sd_offset_range residuals split off sdf_active */
    size_t sdf_active_index; /* its element's index in the bundle's input */
};

enum { SDF_PAIR = 1, SDF_SPLIT = 2, SDF_PROCESS = 3 };

/* ================================================================ small helpers */

static sd_status perr(sd__proc *bp, sd_err *err, sd_status code, const char *fmt, ...)
    SD_PRINTF(4, 5);

/* Record the bundle's first error and copy it to err. */
static sd_status perr(sd__proc *bp, sd_err *err, sd_status code, const char *fmt, ...)
{
    if (bp->err.code == SD_OK) {
        va_list ap;
        va_start(ap, fmt);
        sd_err_vset(&bp->err, code, fmt, ap);
        va_end(ap);
    }
    bp->broken = true;
    return sd_err_set(err, bp->err.code, "%s", bp->err.msg);
}

static int64_t pos_mod(int64_t a, int64_t m)
{
    int64_t r = a % m;
    return r < 0 ? r + m : r;
}

static void buf_free_value(void *v)
{
    sd_buf *b = v;
    sd_buf_deinit(b);
    sd_free(b);
}

static void acc_free(void *v)
{
    acc_entry *e = v;
    sd_buf_deinit(&e->key);
    sd_buf_deinit(&e->acc);
    sd_free(e);
}

static const char *pbd_string_map(size_t n, void **entries, const char *key)
{
    for (size_t i = 0; i < n; i++) {
        SD_PL(PTransform__InputsEntry) *e = entries[i];
        if (strcmp(e->key, key) == 0) {
            return e->value;
        }
    }
    return NULL;
}

/* ================================================================ descriptor lookups */

typedef struct pbd_table {
    const pb_PBD *d;
} pbd_table;

static bool coder_lookup(void *ctx, const char *id, const char **urn, sd_bytes *payload,
                         const char *const **component_ids, size_t *n_components)
{
    const pb_PBD *d = ctx;
    for (size_t i = 0; i < d->n_coders; i++) {
        if (strcmp(d->coders[i]->key, id) == 0) {
            const SD_PL(Coder) *c = d->coders[i]->value;
            if (c == NULL || c->spec == NULL) {
                return false;
            }
            *urn = c->spec->urn;
            *payload = sd_bytes_make(c->spec->payload.data, c->spec->payload.len);
            *component_ids = (const char *const *)c->component_coder_ids;
            *n_components = c->n_component_coder_ids;
            return true;
        }
    }
    return false;
}

static sd_status build_coder(const pb_PBD *d, const char *id, sd_coder **out, sd_err *err)
{
    sd_coder_table t = { coder_lookup, (void *)d };
    return sd_coder_build(&t, id, out, err);
}

static const SD_PL(WindowingStrategy) *find_windowing(const pb_PBD *d, const char *id)
{
    for (size_t i = 0; i < d->n_windowing_strategies; i++) {
        if (strcmp(d->windowing_strategies[i]->key, id) == 0) {
            return d->windowing_strategies[i]->value;
        }
    }
    return NULL;
}

static const SD_PL(PCollection) *find_pcoll(const pb_PBD *d, const char *id)
{
    for (size_t i = 0; i < d->n_pcollections; i++) {
        if (strcmp(d->pcollections[i]->key, id) == 0) {
            return d->pcollections[i]->value;
        }
    }
    return NULL;
}

static int64_t duration_ms(const Google__Protobuf__Duration *d)
{
    return d == NULL ? 0 : d->seconds * 1000 + d->nanos / 1000000;
}

static int64_t timestamp_ms(const Google__Protobuf__Timestamp *t)
{
    return t == NULL ? 0 : t->seconds * 1000 + t->nanos / 1000000;
}

static sd_status parse_window_fn(const pb_FunctionSpec *fs, winfn *out, sd_err *err)
{
    memset(out, 0, sizeof(*out));
    if (fs == NULL || fs->urn == NULL || strcmp(fs->urn, SD_URN_WINDOW_FN_GLOBAL) == 0) {
        out->kind = SD_WINDOW_GLOBAL;
        return SD_OK;
    }
    if (strcmp(fs->urn, SD_URN_WINDOW_FN_FIXED) == 0) {
        SD_PL(FixedWindowsPayload) *m = PLF(fixed_windows_payload__unpack)(
            NULL, fs->payload.len, fs->payload.data);
        if (m == NULL) {
            return sd_err_set(err, SD_EPROTO, "window fn %s: malformed payload", fs->urn);
        }
        out->kind = SD_WINDOW_FIXED;
        out->size = duration_ms(m->size);
        out->offset = timestamp_ms(m->offset);
        PLF(fixed_windows_payload__free_unpacked)(m, NULL);
    } else if (strcmp(fs->urn, SD_URN_WINDOW_FN_SLIDING) == 0) {
        SD_PL(SlidingWindowsPayload) *m = PLF(sliding_windows_payload__unpack)(
            NULL, fs->payload.len, fs->payload.data);
        if (m == NULL) {
            return sd_err_set(err, SD_EPROTO, "window fn %s: malformed payload", fs->urn);
        }
        out->kind = SD_WINDOW_SLIDING;
        out->size = duration_ms(m->size);
        out->period = duration_ms(m->period);
        out->offset = timestamp_ms(m->offset);
        PLF(sliding_windows_payload__free_unpacked)(m, NULL);
    } else if (strcmp(fs->urn, SD_URN_WINDOW_FN_SESSION) == 0) {
        SD_PL(SessionWindowsPayload) *m = PLF(session_windows_payload__unpack)(
            NULL, fs->payload.len, fs->payload.data);
        if (m == NULL) {
            return sd_err_set(err, SD_EPROTO, "window fn %s: malformed payload", fs->urn);
        }
        out->kind = SD_WINDOW_SESSIONS;
        out->gap = duration_ms(m->gap_size);
        PLF(session_windows_payload__free_unpacked)(m, NULL);
    } else {
        return sd_err_set(err, SD_EUNIMPL, "window fn %s is not supported by the C SDK", fs->urn);
    }
    if ((out->kind == SD_WINDOW_FIXED && out->size <= 0) ||
        (out->kind == SD_WINDOW_SLIDING && (out->size <= 0 || out->period <= 0)) ||
        (out->kind == SD_WINDOW_SESSIONS && out->gap <= 0)) {
        return sd_err_set(err, SD_EPROTO, "window fn %s: sizes, periods and gaps must be > 0",
                          fs->urn);
    }
    return SD_OK;
}

/* Assign windows for ts. OUT: ws (reset first). */
static sd_status assign_windows(const winfn *f, sd_time ts, sd_windows *ws)
{
    sd_status st = SD_OK;
    ws->n = 0;
    switch (f->kind) {
    case SD_WINDOW_GLOBAL: {
        sd_window g = sd_window_global();
        return sd_windows_push(ws, &g);
    }
    case SD_WINDOW_FIXED: {
        sd_time start = ts - pos_mod(ts - f->offset, f->size);
        sd_window w = sd_window_interval(start, sd_time_add(start, f->size));
        return sd_windows_push(ws, &w);
    }
    case SD_WINDOW_SLIDING: {
        sd_time last = ts - pos_mod(ts - f->offset, f->period);
        for (sd_time start = last; start > ts - f->size && st == SD_OK; start -= f->period) {
            sd_window w = sd_window_interval(start, sd_time_add(start, f->size));
            st = sd_windows_push(ws, &w);
        }
        return st;
    }
    case SD_WINDOW_SESSIONS: {
        sd_window w = sd_window_interval(ts, sd_time_add(ts, f->gap));
        return sd_windows_push(ws, &w);
    }
    }
    return SD_EINVAL;
}

/* The side input window for a main-input window (Beam's getSideInputWindow). */
static sd_window side_window(const winfn *f, const sd_window *main)
{
    sd_time ts = sd_window_max_ts(main);
    switch (f->kind) {
    case SD_WINDOW_FIXED: {
        sd_time start = ts - pos_mod(ts - f->offset, f->size);
        return sd_window_interval(start, sd_time_add(start, f->size));
    }
    case SD_WINDOW_SLIDING: {
        sd_time last = ts - pos_mod(ts - f->offset, f->period);
        return sd_window_interval(last, sd_time_add(last, f->size));
    }
    case SD_WINDOW_SESSIONS:
        return *main;
    default:
        return sd_window_global();
    }
}

/* ================================================================ emission */

static sd_status op_process(op *o, const wv *v, sd_err *err);

static sd_status emit_to(pcn *pc, const wv *v, sd_err *err)
{
    for (size_t i = 0; i < pc->consumers.len; i++) {
        op *o = *SD_VEC_AT(&pc->consumers, op *, i);
        sd_status st = op_process(o, v, err);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* ================================================================ DoFn context API */

sd_bytes sd_ctx_element(const sd_ctx *c)
{
    return c->in != NULL ? c->in->elem : SD_BYTES_NULL;
}

sd_time sd_ctx_timestamp(const sd_ctx *c)
{
    return c->in != NULL ? c->in->ts : SD_TIME_MIN;
}

sd_window sd_ctx_window(const sd_ctx *c)
{
    return c->in != NULL ? c->win : sd_window_global();
}

sd_pane sd_ctx_pane(const sd_ctx *c)
{
    return c->in != NULL ? c->in->pane : SD_PANE_NO_FIRING;
}

sd_bytes sd_ctx_config(const sd_ctx *c)
{
    return c->op->pl.config;
}

const char *sd_ctx_transform(const sd_ctx *c)
{
    return c->op->tid;
}

const sd_coder *sd_ctx_input_coder(const sd_ctx *c)
{
    const op *o = c->op;
    if (o->in == NULL) {
        return NULL;
    }
    /* Splittable DoFns see their element, not the KV(s) the runner wraps it in. */
    if (o->sdf_role == SDF_SPLIT) {
        return o->in->coder->components[0];
    }
    if (o->sdf_role == SDF_PROCESS) {
        return o->in->coder->components[0]->components[0];
    }
    return o->in->coder;
}

sd_status sd_fail(sd_ctx *c, const char *fmt, ...)
{
    sd__proc *bp = c->op->bp;
    if (bp->err.code == SD_OK) {
        char msg[SD_ERR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        /* The runner reports a failed bundle by its stage; name the user's transform too,
         * unless the message already does. */
        if (strstr(msg, c->op->tid) == NULL) {
            sd_err_set(&bp->err, SD_EINTERNAL, "transform \"%s\": %s", c->op->tid, msg);
        } else {
            sd_err_set(&bp->err, SD_EINTERNAL, "%s", msg);
        }
    }
    bp->broken = true;
    return SD_EINTERNAL;
}

sd_status sd_ctx_kv(sd_ctx *c, sd_bytes *key, sd_bytes *value)
{
    const sd_coder *ic = sd_ctx_input_coder(c);
    if (c->in == NULL || ic == NULL) {
        return SD_ESTATE;
    }
    return sd_kv_split(ic, c->in->elem, key, value, NULL);
}

/*
 * The public sd_iter keeps the iterable reader in opaque storage so that <sundial/sundial.h>
 * need not show the coder internals; this is the one place that looks inside.
 */
_Static_assert(sizeof(((sd_iter *)0)->reader) >= sizeof(sd_iterable_reader),
               "sd_iter.reader is too small for sd_iterable_reader");
_Static_assert(_Alignof(sd_iterable_reader) <= _Alignof(uint64_t) &&
                   _Alignof(sd_iterable_reader) <= _Alignof(void *),
               "sd_iter.reader is not aligned enough for sd_iterable_reader");

static sd_iterable_reader *iter_reader(sd_iter *it)
{
    return (sd_iterable_reader *)(void *)it->reader.bytes;
}

sd_status sd_ctx_grouped(sd_ctx *c, sd_bytes *key, sd_iter *values)
{
    sd_bytes v;
    const sd_coder *ic = sd_ctx_input_coder(c);
    sd_status st = sd_ctx_kv(c, key, &v);
    if (st != SD_OK) {
        return st;
    }
    const sd_coder *vc = ic->components[1];
    if (vc->kind != SD_CODER_ITERABLE && vc->kind != SD_CODER_STATE_BACKED_ITERABLE) {
        return SD_EINVAL;
    }
    memset(values, 0, sizeof(*values));
    values->r = sd_reader_make(v);
    values->elem = vc->components[0];
    values->stream = false;
    return sd_iterable_begin(iter_reader(values), vc, &values->r, NULL);
}

sd_status sd_iter_next(sd_iter *it, sd_bytes *value, bool *has)
{
    if (it->stream) {
        if (sd_reader_done(&it->r)) {
            *has = false;
            return SD_OK;
        }
        *has = true;
        return sd_coder_slice(it->elem, &it->r, true, value, NULL);
    }
    sd_iterable_reader *ir = iter_reader(it);
    sd_status st = sd_iterable_next(ir, value, has, NULL);
    if (st == SD_OK && !*has && ir->has_token) {
        /* Large groups paged through the state API are not supported yet. */
        return SD_EUNIMPL;
    }
    return st;
}

static sd_status do_emit(sd_ctx *c, size_t output, const wv *v)
{
    op *o = c->op;
    if (output >= o->n_outs || o->outs[output] == NULL) {
        return sd_fail(c, "transform %s: emit to output %zu, but the ParDo has %zu outputs",
                       o->tid, output, o->n_outs);
    }
    sd_err e;
    sd_err_clear(&e);
    if (c->sdf != NULL && c->sdf->in_process) {
        sd__wm_observe(&c->sdf->wm, v->ts);
    }
    sd_status st = emit_to(o->outs[output], v, &e);
    if (st != SD_OK) {
        o->bp->broken = true;
        if (o->bp->err.code == SD_OK) {
            sd_err_set(&o->bp->err, st, "%s", sd_err_msg(&e));
        }
    }
    return st;
}

sd_status sd_emit(sd_ctx *c, size_t output, sd_bytes element)
{
    if (c->in == NULL) {
        return sd_fail(c, "transform %s: sd_emit outside process(); use sd_emit_windowed",
                       c->op->tid);
    }
    wv v = { c->in->ts, &c->win, 1, c->in->pane, element };
    return do_emit(c, output, &v);
}

sd_status sd_emit_ts(sd_ctx *c, size_t output, sd_bytes element, sd_time ts)
{
    if (c->in == NULL) {
        return sd_fail(c, "transform %s: sd_emit_ts outside process(); use sd_emit_windowed",
                       c->op->tid);
    }
    wv v = { sd_time_clamp(ts), &c->win, 1, c->in->pane, element };
    return do_emit(c, output, &v);
}

sd_status sd_emit_windowed(sd_ctx *c, size_t output, sd_bytes element, sd_time ts,
                           const sd_window *windows, size_t n_windows, const sd_pane *pane)
{
    if (windows == NULL || n_windows == 0) {
        return sd_fail(c, "transform %s: sd_emit_windowed needs at least one window", c->op->tid);
    }
    wv v = { sd_time_clamp(ts), windows, n_windows, pane != NULL ? *pane : SD_PANE_NO_FIRING,
             element };
    return do_emit(c, output, &v);
}

sd_status sd_emit_str(sd_ctx *c, const char *s, size_t len)
{
    sd_buf_reset(&c->scratch);
    sd_status st = sd_enc_bytes(&c->scratch, s, len);
    return st != SD_OK ? st : sd_emit(c, 0, sd_buf_bytes(&c->scratch));
}

sd_status sd_emit_int(sd_ctx *c, int64_t v)
{
    sd_buf_reset(&c->scratch);
    sd_status st = sd_enc_int(&c->scratch, v);
    return st != SD_OK ? st : sd_emit(c, 0, sd_buf_bytes(&c->scratch));
}

sd_status sd_emit_kv_str_int(sd_ctx *c, const char *k, size_t klen, int64_t v)
{
    sd_buf_reset(&c->scratch);
    sd_status st = sd_enc_bytes(&c->scratch, k, klen);
    if (st == SD_OK) {
        st = sd_enc_int(&c->scratch, v);
    }
    return st != SD_OK ? st : sd_emit(c, 0, sd_buf_bytes(&c->scratch));
}

void sd_counter_add(sd_ctx *c, const char *name, int64_t n)
{
    int64_t *v = sd_map_get_str(&c->op->counters, name);
    if (v == NULL) {
        v = sd_calloc(1, sizeof(*v));
        if (v == NULL || sd_map_put_str(&c->op->counters, name, v) != SD_OK) {
            sd_free(v);
            return;
        }
    }
    *v += n;
}

void sd_ctx_log(sd_ctx *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    SD_INFO("dofn", "%s: %s", c->op->tid, msg);
    const sd__bundle_io *io = c->op->bp->io;
    if (io != NULL && io->log != NULL) {
        io->log(io->ctx, c->op->tid, msg);
    }
}

/* ---- state and timers ------------------------------------------------------------------ */

sd_bytes sd_ctx_key(const sd_ctx *c)
{
    return c->key;
}

sd_time sd_ctx_fire_time(const sd_ctx *c)
{
    return c->fire;
}

sd_time sd_ctx_processing_time(const sd_ctx *c)
{
    (void)c;
    return sd_wall_now_ms();
}

/* The state key of (transform, state id, current window, current key). wenc receives the
 * window encoding the key points into. OUT: coder of the state's values (borrowed). */
static sd_status state_key(sd_ctx *c, const char *state_id, sd_buf *wenc, pb_StateKey *sk,
                           SD_FN(StateKey__BagUserState) *bag, const sd_coder **coder)
{
    op *o = c->op;
    size_t i;
    if (!o->stateful || c->key.ptr == NULL) {
        return sd_fail(c, "transform %s: state %s used outside a stateful process/on_timer call",
                       o->tid, state_id);
    }
    for (i = 0; i < o->n_states; i++) {
        if (strcmp(o->state_ids[i], state_id) == 0) {
            break;
        }
    }
    if (i == o->n_states) {
        return sd_fail(c, "transform %s: no state \"%s\" was declared in sd_pardo_spec", o->tid,
                       state_id);
    }
    *coder = o->state_coders[i];
    if (sd_window_encode(o->in->window_coder, &c->win, wenc, NULL) != SD_OK) {
        return sd_fail(c, "transform %s: cannot encode the window for state %s", o->tid,
                       state_id);
    }
    bag->transform_id = o->tid;
    bag->user_state_id = (char *)state_id;
    bag->window.data = wenc->data;
    bag->window.len = wenc->len;
    bag->key.data = (uint8_t *)c->key.ptr;
    bag->key.len = c->key.len;
    sk->type_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_BAG_USER_STATE;
    sk->bag_user_state = bag;
    return SD_OK;
}

/* Map and ordered-list state are not bags: only sd_state_clear (everything) applies to them. */
static sd_status refuse_map(sd_ctx *c, const char *state_id, const char *what)
{
    for (size_t i = 0; i < c->op->n_states; i++) {
        if (strcmp(c->op->state_ids[i], state_id) != 0) {
            continue;
        }
        if (c->op->state_infos[i].kind == SD_STATE_MAP) {
            return sd_fail(c, "transform %s: state %s is map state; %s does not apply (use "
                           "sd_state_map_*)", c->op->tid, state_id, what);
        }
        if (c->op->state_infos[i].kind == SD_STATE_ORDERED_LIST) {
            return sd_fail(c, "transform %s: state %s is ordered-list state; %s does not apply "
                           "(use sd_state_ordered_*)", c->op->tid, state_id, what);
        }
    }
    return SD_OK;
}

/* Whether state_id is map or ordered-list state (cleared through sd__ctx_state_call). */
static bool is_map_state(const op *o, const char *state_id)
{
    for (size_t i = 0; i < o->n_states; i++) {
        if (strcmp(o->state_ids[i], state_id) == 0) {
            return o->state_infos[i].kind == SD_STATE_MAP ||
                   o->state_infos[i].kind == SD_STATE_ORDERED_LIST;
        }
    }
    return false;
}

sd_status sd_state_read(sd_ctx *c, const char *state_id, sd_iter *values)
{
    if (refuse_map(c, state_id, "sd_state_read") != SD_OK) {
        return SD_EINTERNAL;
    }
    pb_StateKey sk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
    SD_FN(StateKey__BagUserState) bag = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
    const sd_coder *coder;
    sd_buf wenc;
    const sd__bundle_io *io = c->op->bp->io;
    sd_buf_init(&wenc, 0);
    sd_status st = state_key(c, state_id, &wenc, &sk, &bag, &coder);
    sd_buf *data = st == SD_OK ? sd_calloc(1, sizeof(*data)) : NULL;
    if (st == SD_OK && (data == NULL || sd_vec_push(&c->reads, &data) != SD_OK)) {
        sd_free(data);
        st = SD_ENOMEM;
    }
    if (st == SD_OK) {
        sd_err e;
        sd_err_clear(&e);
        sd_buf_init(data, 0);
        st = io == NULL || io->state_get == NULL ? SD_ESTATE
                                                 : io->state_get(io->ctx, &sk, data, &e);
        if (st != SD_OK) {
            st = sd_fail(c, "transform %s: reading state %s: %s", c->op->tid, state_id,
                         sd_err_msg(&e));
        } else {
            memset(values, 0, sizeof(*values));
            values->r = sd_reader_make(sd_buf_bytes(data));
            values->stream = true;
            values->elem = coder;
        }
    }
    sd_buf_deinit(&wenc);
    return st;
}

static sd_status state_modify(sd_ctx *c, const char *state_id, bool clear, const sd_bytes *value)
{
    pb_StateKey sk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
    SD_FN(StateKey__BagUserState) bag = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
    const sd_coder *coder;
    sd_buf wenc;
    sd_err e;
    const sd__bundle_io *io = c->op->bp->io;
    sd_err_clear(&e);
    sd_buf_init(&wenc, 0);
    sd_status st = state_key(c, state_id, &wenc, &sk, &bag, &coder);
    if (st == SD_OK && clear) {
        st = io == NULL || io->state_clear == NULL ? SD_ESTATE
                                                   : io->state_clear(io->ctx, &sk, &e);
    }
    if (st == SD_OK && value != NULL) {
        sd_reader r = sd_reader_make(*value);
        if (sd_coder_skip(coder, &r, true, NULL) != SD_OK || !sd_reader_done(&r)) {
            st = sd_fail(c, "transform %s: value for state %s is not one nested %s value",
                         c->op->tid, state_id, coder->urn);
        } else {
            st = io == NULL || io->state_append == NULL
                     ? SD_ESTATE
                     : io->state_append(io->ctx, &sk, *value, &e);
        }
    }
    if (st != SD_OK && c->op->bp->err.code == SD_OK) {
        st = sd_fail(c, "transform %s: writing state %s: %s", c->op->tid, state_id,
                     e.code != SD_OK ? sd_err_msg(&e) : sd_status_str(st));
    }
    sd_buf_deinit(&wenc);
    return st;
}

sd_status sd_state_append(sd_ctx *c, const char *state_id, sd_bytes value)
{
    if (refuse_map(c, state_id, "sd_state_append") != SD_OK) {
        return SD_EINTERNAL;
    }
    return state_modify(c, state_id, false, &value);
}

sd_status sd_state_clear(sd_ctx *c, const char *state_id)
{
    if (is_map_state(c->op, state_id)) {
        /* Map state: the multimap-keys key; ordered list: the whole list (no range). */
        return sd__ctx_state_call(c, state_id, SD__STATE_CLEAR, NULL, true, SD_BYTES_NULL, NULL);
    }
    return state_modify(c, state_id, true, NULL);
}

sd_status sd_state_write(sd_ctx *c, const char *state_id, sd_bytes value)
{
    if (refuse_map(c, state_id, "sd_state_write") != SD_OK) {
        return SD_EINTERNAL;
    }
    return state_modify(c, state_id, true, &value);
}

/* ---- internals for state_kinds.c and sdf.c ------------------------------------------- */

sd__sdf_call *sd__ctx_sdf(const sd_ctx *c)
{
    return c != NULL ? c->sdf : NULL;
}

sd_buf *sd__ctx_temp_buf(sd_ctx *c)
{
    sd_buf *b = sd_calloc(1, sizeof(*b));
    if (b == NULL || sd_vec_push(&c->reads, &b) != SD_OK) {
        sd_free(b);
        return NULL;
    }
    sd_buf_init(b, 0);
    return b;
}

sd_status sd__ctx_state_info(sd_ctx *c, const char *state_id, const sd__state_info **out)
{
    op *o = c->op;
    if (!o->stateful || c->key.ptr == NULL) {
        return sd_fail(c, "transform %s: state %s used outside a stateful process/on_timer call",
                       o->tid, state_id);
    }
    for (size_t i = 0; i < o->n_states; i++) {
        if (strcmp(o->state_ids[i], state_id) == 0) {
            *out = &o->state_infos[i];
            return SD_OK;
        }
    }
    return sd_fail(c, "transform %s: no state \"%s\" was declared in sd_pardo_spec", o->tid,
                   state_id);
}

/* One State API call; range is the ordered-list range (NULL = the whole list). */
static sd_status state_call(sd_ctx *c, const char *state_id, sd__state_op what,
                            const sd_bytes *map_key, bool keys, const int64_t *range,
                            sd_bytes data, sd_bytes *out)
{
    op *o = c->op;
    const sd__state_info *info;
    const sd__bundle_io *io = o->bp->io;
    pb_StateKey sk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
    SD_FN(StateKey__BagUserState) bag =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
    SD_FN(StateKey__MultimapUserState) mm =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__MULTIMAP_USER_STATE__INIT;
    SD_FN(StateKey__MultimapKeysUserState) mk =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__MULTIMAP_KEYS_USER_STATE__INIT;
    SD_FN(StateKey__OrderedListUserState) ol =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__ORDERED_LIST_USER_STATE__INIT;
    SD_FN(OrderedListRange) olr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ORDERED_LIST_RANGE__INIT;
    sd_buf wenc;
    sd_err e;
    sd_status st = sd__ctx_state_info(c, state_id, &info);
    if (st != SD_OK) {
        return st;
    }
    sd_buf_init(&wenc, 0);
    if (sd_window_encode(o->in->window_coder, &c->win, &wenc, NULL) != SD_OK) {
        sd_buf_deinit(&wenc);
        return sd_fail(c, "transform %s: cannot encode the window for state %s", o->tid,
                       state_id);
    }
    ProtobufCBinaryData win = { wenc.len, wenc.data };
    ProtobufCBinaryData key = { c->key.len, (uint8_t *)c->key.ptr };
    if (info->kind == SD_STATE_ORDERED_LIST) {
        ol.transform_id = o->tid;
        ol.user_state_id = (char *)state_id;
        ol.window = win;
        ol.key = key;
        if (range != NULL) {
            olr.start = range[0];
            olr.end = range[1];
            ol.range = &olr;
        }
        sk.type_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ORDERED_LIST_USER_STATE;
        sk.ordered_list_user_state = &ol;
    } else if (keys) {
        mk.transform_id = o->tid;
        mk.user_state_id = (char *)state_id;
        mk.window = win;
        mk.key = key;
        sk.type_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_KEYS_USER_STATE;
        sk.multimap_keys_user_state = &mk;
    } else if (map_key != NULL) {
        mm.transform_id = o->tid;
        mm.user_state_id = (char *)state_id;
        mm.window = win;
        mm.key = key;
        mm.map_key.data = (uint8_t *)map_key->ptr;
        mm.map_key.len = map_key->len;
        sk.type_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_USER_STATE;
        sk.multimap_user_state = &mm;
    } else {
        bag.transform_id = o->tid;
        bag.user_state_id = (char *)state_id;
        bag.window = win;
        bag.key = key;
        sk.type_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_BAG_USER_STATE;
        sk.bag_user_state = &bag;
    }
    sd_err_clear(&e);
    if (io == NULL || io->state_get == NULL || io->state_append == NULL ||
        io->state_clear == NULL) {
        st = sd_err_set(&e, SD_ESTATE, "no State API channel in this bundle");
    } else if (what == SD__STATE_GET) {
        sd_buf *b = sd__ctx_temp_buf(c);
        st = b == NULL ? sd_err_set(&e, SD_ENOMEM, "out of memory")
                       : io->state_get(io->ctx, &sk, b, &e);
        if (st == SD_OK && out != NULL) {
            *out = sd_buf_bytes(b);
        }
    } else if (what == SD__STATE_APPEND) {
        st = io->state_append(io->ctx, &sk, data, &e);
    } else {
        st = io->state_clear(io->ctx, &sk, &e);
    }
    sd_buf_deinit(&wenc);
    if (st != SD_OK) {
        return sd_fail(c, "transform %s: state %s: %s", o->tid, state_id, sd_err_msg(&e));
    }
    return SD_OK;
}

sd_status sd__ctx_state_call(sd_ctx *c, const char *state_id, sd__state_op what,
                             const sd_bytes *map_key, bool keys, sd_bytes data, sd_bytes *out)
{
    return state_call(c, state_id, what, map_key, keys, NULL, data, out);
}

sd_status sd__ctx_state_call_range(sd_ctx *c, const char *state_id, sd__state_op what,
                                   int64_t start, int64_t end, sd_bytes data, sd_bytes *out)
{
    int64_t range[2] = { start, end };
    return state_call(c, state_id, what, NULL, false, range, data, out);
}

static tfam *find_family(op *o, const char *family)
{
    for (size_t i = 0; i < o->n_fams; i++) {
        if (strcmp(o->fams[i].family, family) == 0) {
            return &o->fams[i];
        }
    }
    return NULL;
}

static sd_status timer_put(sd_ctx *c, const char *family, sd_bytes tag, bool clear, sd_time fire,
                           sd_time hold)
{
    op *o = c->op;
    tfam *f = find_family(o, family);
    if (f == NULL) {
        return sd_fail(c, "transform %s: no timer family \"%s\" was declared in sd_pardo_spec",
                       o->tid, family);
    }
    if (c->key.ptr == NULL) {
        return sd_fail(c, "transform %s: timer %s set outside a keyed process/on_timer call",
                       o->tid, family);
    }
    sd_timer *t = &o->timer;
    t->key = c->key;
    t->tag = tag;
    t->clear = clear;
    t->fire = sd_time_clamp(fire);
    t->hold = sd_time_clamp(hold);
    t->pane = SD_PANE_NO_FIRING;
    sd_status st = sd_windows_set(&t->windows, &c->win, 1);
    if (st == SD_OK) {
        st = sd_timer_encode(f->coder, t, &f->out, NULL);
    }
    if (st != SD_OK) {
        return sd_fail(c, "transform %s: cannot encode timer %s: %s", o->tid, family,
                       sd_status_str(st));
    }
    return SD_OK;
}

sd_status sd_timer_set(sd_ctx *c, const char *family, sd_bytes tag, sd_time fire, sd_time hold)
{
    return timer_put(c, family, tag, false, fire, hold);
}

sd_status sd_timer_clear(sd_ctx *c, const char *family, sd_bytes tag)
{
    return timer_put(c, family, tag, true, 0, 0);
}

/* ---- side inputs ----------------------------------------------------------------------- */

static sd_status side_fetch(sd_ctx *c, size_t index, const sd_bytes *key, sd_iter *values)
{
    op *o = c->op;
    sd__proc *bp = o->bp;
    sd_buf wenc, ck;
    sd_status st;
    if (index >= o->n_sides) {
        return sd_fail(c, "transform %s: side input %zu does not exist (%zu declared)", o->tid,
                       index, o->n_sides);
    }
    side *s = &o->sides[index];
    if (s->multimap != (key != NULL)) {
        return sd_fail(c, "transform %s: side input %zu is %s; use %s", o->tid, index,
                       s->multimap ? "a multimap" : "an iterable",
                       s->multimap ? "sd_side_lookup" : "sd_side_iterable");
    }
    sd_window mw = c->in != NULL ? c->win : sd_window_global();
    sd_window sw = side_window(&s->pc->wf, &mw);
    sd_buf_init(&wenc, 0);
    sd_buf_init(&ck, 0);
    st = sd_window_encode(s->pc->window_coder, &sw, &wenc, NULL);
    if (st == SD_OK) {
        st = sd_buf_printf(&ck, "%s|%zu|", o->tid, index);
    }
    if (st == SD_OK) {
        st = sd_buf_put_lp(&ck, sd_buf_bytes(&wenc));
    }
    if (st == SD_OK && key != NULL) {
        st = sd_buf_append_bytes(&ck, *key);
    }
    sd_buf *data = st == SD_OK ? sd_map_get(&bp->side_cache, sd_buf_bytes(&ck)) : NULL;
    if (st == SD_OK && data == NULL) {
        SD_FN(StateKey) sk = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
        SD_FN(StateKey__IterableSideInput) it =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__ITERABLE_SIDE_INPUT__INIT;
        SD_FN(StateKey__MultimapSideInput) mm =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__MULTIMAP_SIDE_INPUT__INIT;
        if (key != NULL) {
            mm.transform_id = o->tid;
            mm.side_input_id = s->local;
            mm.window.data = wenc.data;
            mm.window.len = wenc.len;
            mm.key.data = (uint8_t *)key->ptr;
            mm.key.len = key->len;
            sk.type_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_SIDE_INPUT;
            sk.multimap_side_input = &mm;
        } else {
            it.transform_id = o->tid;
            it.side_input_id = s->local;
            it.window.data = wenc.data;
            it.window.len = wenc.len;
            sk.type_case = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ITERABLE_SIDE_INPUT;
            sk.iterable_side_input = &it;
        }
        data = sd_calloc(1, sizeof(*data));
        if (data == NULL) {
            st = SD_ENOMEM;
        } else if (bp->io == NULL || bp->io->state_get == NULL) {
            sd_free(data);
            data = NULL;
            st = sd_fail(c, "transform %s: side inputs need the state API, which this bundle "
                            "does not have", o->tid);
        } else {
            sd_err e;
            sd_err_clear(&e);
            sd_buf_init(data, 0);
            st = bp->io->state_get(bp->io->ctx, &sk, data, &e);
            if (st != SD_OK) {
                buf_free_value(data);
                data = NULL;
                st = sd_fail(c, "transform %s: reading side input %s: %s", o->tid, s->local,
                             sd_err_msg(&e));
            } else if ((st = sd_map_put(&bp->side_cache, sd_buf_bytes(&ck), data)) != SD_OK) {
                buf_free_value(data);
                data = NULL;
            }
        }
    }
    sd_buf_deinit(&wenc);
    sd_buf_deinit(&ck);
    if (st != SD_OK) {
        return st;
    }
    memset(values, 0, sizeof(*values));
    values->r = sd_reader_make(sd_buf_bytes(data));
    values->stream = true;
    values->elem = s->multimap ? s->pc->coder->components[1] : s->pc->coder;
    return SD_OK;
}

sd_status sd_side_iterable(sd_ctx *c, size_t index, sd_iter *values)
{
    return side_fetch(c, index, NULL, values);
}

sd_status sd_side_lookup(sd_ctx *c, size_t index, sd_bytes key, sd_iter *values)
{
    return side_fetch(c, index, &key, values);
}

/* ================================================================ operators */

static sd_status sink_flush(op *o, bool is_last, sd_err *err)
{
    const sd__bundle_io *io = o->bp->io;
    if (io == NULL || io->data == NULL) {
        return perr(o->bp, err, SD_ESTATE, "sink %s: no output channel", o->tid);
    }
    sd_status st = io->data(io->ctx, o->tid, sd_buf_bytes(&o->pending), is_last, err);
    sd_buf_reset(&o->pending);
    if (st != SD_OK) {
        o->bp->broken = true;
    }
    return st;
}

static sd_status sink_process(op *o, const wv *v, sd_err *err)
{
    sd_status st = SD_OK;
    if (!o->param_wv) {
        st = sd_wv_encode_header(&o->pending, sd_wv_window_coder(o->port_coder), v->ts,
                                 v->windows, v->n_windows, &v->pane);
    }
    if (st == SD_OK && o->lp_wrap) {
        st = sd_buf_put_lp(&o->pending, v->elem);
    } else if (st == SD_OK) {
        st = sd_buf_append_bytes(&o->pending, v->elem);
    }
    if (st != SD_OK) {
        return perr(o->bp, err, st, "sink %s: encoding failed: %s", o->tid, sd_status_str(st));
    }
    if (o->pending.len >= SINK_FLUSH_BYTES) {
        return sink_flush(o, false, err);
    }
    return SD_OK;
}

static void drop_reads(sd_ctx *c)
{
    for (size_t i = 0; i < c->reads.len; i++) {
        buf_free_value(*SD_VEC_AT(&c->reads, sd_buf *, i));
    }
    sd_vec_reset(&c->reads);
}

static sd_status sdf_op_process(op *o, const wv *v, sd_err *err);

static sd_status pardo_process(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    if (o->sdf_role != 0) {
        return sdf_op_process(o, v, err);
    }
    c->key = SD_BYTES_NULL;
    if (o->stateful) {
        sd_bytes value;
        sd_status st = sd_kv_split(o->in->coder, v->elem, &c->key, &value, err);
        if (st != SD_OK) {
            return perr(o->bp, err, st, "transform %s: stateful input is not a KV of its coder",
                        o->tid);
        }
    }
    for (size_t i = 0; i < v->n_windows; i++) {
        c->in = v;
        c->win = v->windows[i];
        c->fire = v->ts;
        sd_status st = o->fn->process(c, o->state);
        c->in = NULL;
        drop_reads(c);
        if (st != SD_OK) {
            if (o->bp->err.code == SD_OK) {
                return perr(o->bp, err, st, "DoFn \"%.*s\" in transform %s failed: %s",
                            (int)o->pl.name.len, (const char *)o->pl.name.ptr, o->tid,
                            sd_status_str(st));
            }
            o->bp->broken = true;
            return sd_err_set(err, o->bp->err.code, "%s", o->bp->err.msg);
        }
    }
    return SD_OK;
}

/* ---- splittable DoFns ------------------------------------------------------------------ */

/* The error of a failed SDF callback (the DoFn's own message when it gave one). */
static sd_status sdf_fail(op *o, sd_err *err, sd_status st, const char *what)
{
    if (o->bp->err.code == SD_OK) {
        return perr(o->bp, err, st, "DoFn \"%.*s\" in transform %s: %s failed: %s",
                    (int)o->pl.name.len, (const char *)o->pl.name.ptr, o->tid, what,
                    sd_status_str(st));
    }
    o->bp->broken = true;
    return sd_err_set(err, o->bp->err.code, "%s", o->bp->err.msg);
}

static sd_status restriction_size(op *o, sd_offset_range r, double *size, sd_err *err)
{
    *size = (double)r.to - (double)r.from;
    if (o->fn->restriction_size == NULL) {
        return SD_OK;
    }
    sd_status st = o->fn->restriction_size(&o->ctx, o->state, r, size);
    return st != SD_OK ? sdf_fail(o, err, st, "restriction_size") : SD_OK;
}

/* KV(KV(elem, restriction), size) into out (reset first). */
static sd_status sized_element(op *o, sd_buf *out, sd_bytes elem, sd_offset_range r,
                               sd_time wm_state, sd_err *err)
{
    double size;
    sd_status st = restriction_size(o, r, &size, err);
    if (st != SD_OK) {
        return st;
    }
    sd_buf_reset(out);
    if ((st = sd_buf_append_bytes(out, elem)) != SD_OK ||
        (st = sd__restriction_encode(out, r, wm_state)) != SD_OK ||
        (st = sd_enc_double(out, size)) != SD_OK) {
        return perr(o->bp, err, st, "transform %s: out of memory", o->tid);
    }
    return SD_OK;
}

/* Queue a residual root: r of elem in window w, resumed delay_ms later. */
static sd_status add_residual(op *o, const wv *v, const sd_window *w, sd_bytes elem,
                              sd_offset_range r, sd__wm_est *wm, int64_t delay_ms, sd_err *err)
{
    op *src = o->sdf_src;
    sd__proc *bp = o->bp;
    if (src == NULL || src->param_wv) {
        return perr(bp, err, SD_EPROTO, "transform %s: a splittable DoFn must read its own "
                    "stage's data source to checkpoint", o->tid);
    }
    sd_time est = sd__wm_current(wm, sd_wall_now_ms());
    sd_status st = sized_element(o, &o->b2, elem, r, est, err);
    if (st != SD_OK) {
        return st;
    }
    sd__residual_root rr;
    memset(&rr, 0, sizeof(rr));
    sd_buf_init(&rr.element, 0);
    rr.transform = sd_strdup(o->tid);
    rr.input = sd_strdup(o->main_local != NULL ? o->main_local : "");
    rr.delay_ms = delay_ms;
    rr.has_watermark = sd__wm_reports(wm);
    rr.watermark = est;
    rr.outputs = o->n_out_locals > 0 ? sd_calloc(o->n_out_locals, sizeof(char *)) : NULL;
    st = rr.transform == NULL || rr.input == NULL || (o->n_out_locals > 0 && rr.outputs == NULL)
             ? SD_ENOMEM
             : SD_OK;
    for (size_t i = 0; st == SD_OK && i < o->n_out_locals; i++) {
        rr.outputs[i] = sd_strdup(o->out_locals[i]);
        rr.n_outputs++;
        st = rr.outputs[i] == NULL ? SD_ENOMEM : SD_OK;
    }
    if (st == SD_OK) {
        st = sd_wv_encode_header(&rr.element, sd_wv_window_coder(src->port_coder), v->ts, w, 1,
                                 &v->pane);
    }
    if (st == SD_OK) {
        st = src->lp_wrap ? sd_buf_put_lp(&rr.element, sd_buf_bytes(&o->b2))
                          : sd_buf_append_bytes(&rr.element, sd_buf_bytes(&o->b2));
    }
    if (st == SD_OK) {
        st = sd_vec_push(&bp->residuals, &rr);
    }
    if (st != SD_OK) {
        sd_free(rr.transform);
        sd_free(rr.input);
        for (size_t i = 0; i < rr.n_outputs; i++) {
            sd_free(rr.outputs[i]);
        }
        sd_free(rr.outputs);
        sd_buf_deinit(&rr.element);
        return perr(bp, err, st, "transform %s: cannot encode a residual: %s", o->tid,
                    sd_status_str(st));
    }
    return SD_OK;
}

static sd_status sdf_pair(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    sd_status st = SD_OK;
    for (size_t i = 0; i < v->n_windows && st == SD_OK; i++) {
        sd_offset_range r = { 0, 0 };
        c->in = v;
        c->win = v->windows[i];
        c->fire = v->ts;
        st = o->fn->initial_restriction(c, o->state, &r);
        c->in = NULL;
        drop_reads(c);
        if (st != SD_OK) {
            return sdf_fail(o, err, st, "initial_restriction");
        }
        if (r.to < r.from) {
            return perr(o->bp, err, SD_EINVAL, "transform %s: initial_restriction gave [%lld, "
                        "%lld)", o->tid, (long long)r.from, (long long)r.to);
        }
        sd_buf_reset(&o->b1);
        /* The estimator starts at the element's timestamp. */
        if ((st = sd_buf_append_bytes(&o->b1, v->elem)) != SD_OK ||
            (st = sd__restriction_encode(&o->b1, r, v->ts)) != SD_OK) {
            return perr(o->bp, err, st, "transform %s: out of memory", o->tid);
        }
        wv out = { v->ts, &v->windows[i], 1, v->pane, sd_buf_bytes(&o->b1) };
        st = emit_to(o->outs[0], &out, err);
    }
    return st;
}

static sd_status sdf_split(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    sd_bytes elem, rb;
    sd_offset_range r;
    sd_time wm_state;
    sd_status st = sd_kv_split(o->in->coder, v->elem, &elem, &rb, err);
    sd_reader rr = sd_reader_make(rb);
    if (st != SD_OK || sd__restriction_decode(&rr, &r, &wm_state) != SD_OK) {
        return perr(o->bp, err, SD_EPROTO, "transform %s: input is not KV(element, offset "
                    "range)", o->tid);
    }
    sd_vec parts;
    sd_vec_init(&parts, sizeof(sd_offset_range));
    for (size_t i = 0; i < v->n_windows && st == SD_OK; i++) {
        wv in = { v->ts, &v->windows[i], 1, v->pane, elem };
        sd_vec_reset(&parts);
        if (o->fn->split_restriction == NULL) {
            st = sd_vec_push(&parts, &r);
        } else {
            sd__sdf_call call;
            memset(&call, 0, sizeof(call));
            call.parts = &parts;
            c->sdf = &call;
            c->in = &in;
            c->win = v->windows[i];
            c->fire = v->ts;
            st = o->fn->split_restriction(c, o->state, r);
            c->sdf = NULL;
            c->in = NULL;
            drop_reads(c);
            if (st != SD_OK) {
                st = sdf_fail(o, err, st, "split_restriction");
                break;
            }
        }
        for (size_t k = 0; k < parts.len && st == SD_OK; k++) {
            sd_offset_range part = *SD_VEC_AT(&parts, sd_offset_range, k);
            c->in = &in;
            st = sized_element(o, &o->b1, elem, part, wm_state, err);
            c->in = NULL;
            if (st == SD_OK) {
                wv out = { v->ts, &v->windows[i], 1, v->pane, sd_buf_bytes(&o->b1) };
                st = emit_to(o->outs[0], &out, err);
            }
        }
    }
    sd_vec_deinit(&parts);
    return st;
}

static sd_status sdf_run(op *o, const wv *v, sd_err *err)
{
    sd_ctx *c = &o->ctx;
    sd__proc *bp = o->bp;
    sd_bytes er, sz, elem;
    sd_bytes rb = SD_BYTES_NULL; /* read by sd_reader_make even when a split failed */
    sd_offset_range r;
    sd_time wm_state;
    sd_status st = sd_kv_split(o->in->coder, v->elem, &er, &sz, err);
    if (st == SD_OK) {
        st = sd_kv_split(o->in->coder->components[0], er, &elem, &rb, err);
    }
    sd_reader rr = sd_reader_make(rb);
    if (st != SD_OK || sd__restriction_decode(&rr, &r, &wm_state) != SD_OK) {
        return perr(bp, err, SD_EPROTO, "transform %s: input is not KV(KV(element, offset "
                    "range), size)", o->tid);
    }
    for (size_t i = 0; i < v->n_windows && st == SD_OK; i++) {
        sd__sdf_call call;
        sd_vec splits; /* sd_offset_range residuals of split requests */
        memset(&call, 0, sizeof(call));
        sd_vec_init(&splits, sizeof(sd_offset_range));
        sd__tracker_init(&call.tracker, r);
        sd__wm_init(&call.wm, &o->wm_spec, wm_state);
        call.in_process = true;
        call.lock = &bp->split_mu;
        call.parts = NULL;
        wv in = { v->ts, &v->windows[i], 1, v->pane, elem };
        pthread_mutex_lock(&bp->split_mu);
        bp->sdf_active = &call;
        bp->sdf_active_op = o;
        bp->sdf_splits = &splits;
        bp->sdf_active_index = o->sdf_src != NULL ? o->sdf_src->n_emitted - 1 : 0;
        pthread_mutex_unlock(&bp->split_mu);
        c->sdf = &call;
        c->in = &in;
        c->win = v->windows[i];
        c->fire = v->ts;
        c->key = SD_BYTES_NULL;
        st = o->fn->process(c, o->state);
        c->in = NULL;
        drop_reads(c);
        pthread_mutex_lock(&bp->split_mu);
        bp->sdf_active = NULL;
        bp->sdf_active_op = NULL;
        bp->sdf_splits = NULL;
        sd_offset_range rest;
        bool have_rest = false;
        if (st == SD_OK && call.resume) {
            have_rest = sd__tracker_split(&call.tracker, 0, &rest);
        }
        bool done = sd__tracker_done(&call.tracker);
        sd__tracker tr = call.tracker;
        pthread_mutex_unlock(&bp->split_mu);
        if (st != SD_OK) {
            st = sdf_fail(o, err, st, "process");
        } else if (!call.resume && !done) {
            st = perr(bp, err, SD_EINVAL, "DoFn \"%.*s\" in transform %s: process returned "
                      "with [%lld, %lld) unclaimed and without sd_resume", (int)o->pl.name.len,
                      (const char *)o->pl.name.ptr, o->tid,
                      (long long)sd__tracker_next(&tr), (long long)tr.r.to);
        }
        /* Split residuals first (they are earlier offsets than nothing: order is free). */
        for (size_t k = 0; k < splits.len && st == SD_OK; k++) {
            c->in = &in;
            st = add_residual(o, v, &v->windows[i], elem, *SD_VEC_AT(&splits, sd_offset_range, k),
                              &call.wm, 0, err);
            c->in = NULL;
        }
        if (st == SD_OK && have_rest) {
            c->in = &in;
            st = add_residual(o, v, &v->windows[i], elem, rest, &call.wm, call.delay_ms, err);
            c->in = NULL;
        }
        c->sdf = NULL;
        sd_vec_deinit(&splits);
    }
    return st;
}

sd_status sd__proc_split(sd__proc *bp, const char *transform_id, double fraction,
                         sd__split *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&bp->split_mu);
    sd__sdf_call *call = bp->sdf_active;
    op *o = bp->sdf_active_op;
    sd_status st = SD_OK;
    sd_offset_range res;
    if (call != NULL && o->sdf_src != NULL && bp->sdf_splits != NULL &&
        (transform_id == NULL || strcmp(transform_id, o->sdf_src->tid) == 0) &&
        o->sdf_src->stop_at == SIZE_MAX && sd__tracker_split(&call->tracker, fraction, &res)) {
        st = sd_vec_push(bp->sdf_splits, &res);
        if (st == SD_OK) {
            /* The element in process keeps the primary; the elements after it go back. */
            o->sdf_src->stop_at = bp->sdf_active_index + 1;
            out->split = true;
            out->source = o->sdf_src->tid;
            out->last_primary = (int64_t)bp->sdf_active_index;
            out->first_residual = (int64_t)bp->sdf_active_index + 1;
            out->residual = res;
        } else {
            call->tracker.r.to = res.to; /* undo: nothing was split */
        }
    }
    pthread_mutex_unlock(&bp->split_mu);
    return st;
}

static sd_status sdf_op_process(op *o, const wv *v, sd_err *err)
{
    switch (o->sdf_role) {
    case SDF_PAIR:
        return sdf_pair(o, v, err);
    case SDF_SPLIT:
        return sdf_split(o, v, err);
    default:
        return sdf_run(o, v, err);
    }
}

static sd_status window_into_process(op *o, const wv *v, sd_err *err)
{
    sd_windows ws;
    sd_windows_init(&ws);
    sd_status st = assign_windows(&o->wf, v->ts, &ws);
    if (st != SD_OK) {
        sd_windows_deinit(&ws);
        return perr(o->bp, err, st, "transform %s: assigning windows failed", o->tid);
    }
    wv out = *v;
    out.windows = sd_windows_items(&ws);
    out.n_windows = ws.n;
    st = emit_to(o->outs[0], &out, err);
    sd_windows_deinit(&ws);
    return st;
}

static sd_status combine_err(op *o, sd_err *err, sd_status st, const sd_err *ue, const char *what)
{
    return perr(o->bp, err, st, "CombineFn in transform %s: %s failed: %s", o->tid, what,
                sd_err_msg(ue));
}

/* acc := add(acc or create(), input); result left in o->b2. */
static sd_status acc_add(op *o, sd_bytes acc, bool have_acc, sd_bytes input, sd_err *err)
{
    sd_err ue;
    sd_err_clear(&ue);
    sd_status st;
    if (!have_acc) {
        sd_buf_reset(&o->b1);
        if ((st = o->cfn->create(o->ccfg, &o->b1, &ue)) != SD_OK) {
            return combine_err(o, err, st, &ue, "create");
        }
        acc = sd_buf_bytes(&o->b1);
    }
    sd_buf_reset(&o->b2);
    if ((st = o->cfn->add(o->ccfg, acc, input, &o->b2, &ue)) != SD_OK) {
        return combine_err(o, err, st, &ue, "add");
    }
    return SD_OK;
}

static sd_status emit_kv(op *o, const wv *v, sd_bytes key, sd_bytes value, sd_err *err)
{
    sd_buf_reset(&o->b3);
    sd_status st = sd_buf_append_bytes(&o->b3, key);
    if (st == SD_OK) {
        st = sd_buf_append_bytes(&o->b3, value);
    }
    if (st != SD_OK) {
        return perr(o->bp, err, st, "transform %s: out of memory", o->tid);
    }
    wv out = *v;
    out.elem = sd_buf_bytes(&o->b3);
    return emit_to(o->outs[0], &out, err);
}

static sd_status precombine_flush(op *o, sd_err *err)
{
    size_t n;
    sd_status st = SD_OK;
    if (sd_map_len(&o->accs) == 0) {
        return SD_OK;
    }
    sd_bytes *keys = sd_map_sorted_keys(&o->accs, &n);
    if (keys == NULL) {
        return perr(o->bp, err, SD_ENOMEM, "transform %s: out of memory", o->tid);
    }
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        acc_entry *e = sd_map_get(&o->accs, keys[i]);
        wv v = { e->min_ts, &e->w, 1, SD_PANE_NO_FIRING, SD_BYTES_NULL };
        st = emit_kv(o, &v, sd_buf_bytes(&e->key), sd_buf_bytes(&e->acc), err);
    }
    sd_free(keys);
    sd_map_deinit(&o->accs);
    sd_map_init(&o->accs, acc_free);
    return st;
}

static sd_status precombine_process(op *o, const wv *v, sd_err *err)
{
    sd_bytes key, value;
    sd_status st = sd_kv_split(o->in->coder, v->elem, &key, &value, err);
    if (st != SD_OK) {
        return perr(o->bp, err, st, "transform %s: input is not a KV of its coder", o->tid);
    }
    for (size_t i = 0; i < v->n_windows; i++) {
        const sd_window *w = &v->windows[i];
        uint8_t wk[17];
        sd_buf mk;
        sd_buf_init(&mk, 0);
        for (int b = 0; b < 8; b++) {
            wk[b] = (uint8_t)((uint64_t)w->start >> (56 - 8 * b));
            wk[8 + b] = (uint8_t)((uint64_t)w->end >> (56 - 8 * b));
        }
        wk[16] = w->global ? 1 : 0;
        if (sd_buf_append(&mk, wk, sizeof(wk)) != SD_OK ||
            sd_buf_append_bytes(&mk, key) != SD_OK) {
            sd_buf_deinit(&mk);
            return perr(o->bp, err, SD_ENOMEM, "transform %s: out of memory", o->tid);
        }
        acc_entry *e = sd_map_get(&o->accs, sd_buf_bytes(&mk));
        st = acc_add(o, e != NULL ? sd_buf_bytes(&e->acc) : SD_BYTES_NULL, e != NULL, value, err);
        if (st == SD_OK && e == NULL) {
            e = sd_calloc(1, sizeof(*e));
            if (e == NULL) {
                st = SD_ENOMEM;
            } else {
                e->w = *w;
                e->min_ts = v->ts;
                sd_buf_init(&e->key, 0);
                sd_buf_init(&e->acc, 0);
                if (sd_buf_append_bytes(&e->key, key) != SD_OK ||
                    sd_map_put(&o->accs, sd_buf_bytes(&mk), e) != SD_OK) {
                    acc_free(e);
                    st = SD_ENOMEM;
                }
            }
        }
        if (st == SD_OK) {
            e->min_ts = SD_MIN(e->min_ts, v->ts);
            sd_buf_reset(&e->acc);
            st = sd_buf_append_bytes(&e->acc, sd_buf_bytes(&o->b2));
        }
        sd_buf_deinit(&mk);
        if (st != SD_OK) {
            return o->bp->broken ? st
                                 : perr(o->bp, err, st, "transform %s: out of memory", o->tid);
        }
    }
    if (sd_map_len(&o->accs) > PRECOMBINE_MAX_KEYS) {
        return precombine_flush(o, err);
    }
    return SD_OK;
}

/* KV<K, Iterable<X>>: fold the values. add_inputs: X are inputs (else accumulators). The
 * result is left in o->b2 (an accumulator). */
static sd_status fold_grouped(op *o, const wv *v, sd_bytes *key, bool add_inputs, sd_err *err)
{
    sd_bytes value, x;
    sd_iterable_reader it;
    bool has;
    sd_err ue;
    sd_status st = sd_kv_split(o->in->coder, v->elem, key, &value, err);
    if (st != SD_OK) {
        return perr(o->bp, err, st, "transform %s: input is not a KV of its coder", o->tid);
    }
    sd_reader r = sd_reader_make(value);
    if ((st = sd_iterable_begin(&it, o->in->coder->components[1], &r, err)) != SD_OK) {
        return perr(o->bp, err, st, "transform %s: grouped values are not an iterable", o->tid);
    }
    sd_err_clear(&ue);
    sd_buf_reset(&o->b2);
    if ((st = o->cfn->create(o->ccfg, &o->b2, &ue)) != SD_OK) {
        return combine_err(o, err, st, &ue, "create");
    }
    for (;;) {
        if ((st = sd_iterable_next(&it, &x, &has, err)) != SD_OK) {
            return perr(o->bp, err, st, "transform %s: malformed grouped values", o->tid);
        }
        if (!has) {
            break;
        }
        /* b1 := f(b2, x); then swap. */
        sd_buf_reset(&o->b1);
        st = add_inputs ? o->cfn->add(o->ccfg, sd_buf_bytes(&o->b2), x, &o->b1, &ue)
                        : o->cfn->merge(o->ccfg, sd_buf_bytes(&o->b2), x, &o->b1, &ue);
        if (st != SD_OK) {
            return combine_err(o, err, st, &ue, add_inputs ? "add" : "merge");
        }
        sd_buf tmp = o->b2;
        o->b2 = o->b1;
        o->b1 = tmp;
    }
    return SD_OK;
}

static sd_status extract_to(op *o, sd_bytes acc, sd_err *err)
{
    sd_err ue;
    sd_err_clear(&ue);
    sd_buf_reset(&o->b1);
    sd_status st = o->cfn->extract(o->ccfg, acc, &o->b1, &ue);
    return st != SD_OK ? combine_err(o, err, st, &ue, "extract") : SD_OK;
}

static sd_status combine_op_process(op *o, const wv *v, sd_err *err)
{
    sd_bytes key, value;
    sd_status st;
    switch (o->kind) {
    case OP_MERGE:
        if ((st = fold_grouped(o, v, &key, false, err)) != SD_OK) {
            return st;
        }
        return emit_kv(o, v, key, sd_buf_bytes(&o->b2), err);
    case OP_COMBINE_GROUPED:
        if ((st = fold_grouped(o, v, &key, true, err)) != SD_OK ||
            (st = extract_to(o, sd_buf_bytes(&o->b2), err)) != SD_OK) {
            return st;
        }
        return emit_kv(o, v, key, sd_buf_bytes(&o->b1), err);
    case OP_EXTRACT:
        if ((st = sd_kv_split(o->in->coder, v->elem, &key, &value, err)) != SD_OK) {
            return perr(o->bp, err, st, "transform %s: input is not a KV of its coder", o->tid);
        }
        if ((st = extract_to(o, value, err)) != SD_OK) {
            return st;
        }
        return emit_kv(o, v, key, sd_buf_bytes(&o->b1), err);
    case OP_CONVERT:
        if ((st = sd_kv_split(o->in->coder, v->elem, &key, &value, err)) != SD_OK) {
            return perr(o->bp, err, st, "transform %s: input is not a KV of its coder", o->tid);
        }
        if ((st = acc_add(o, SD_BYTES_NULL, false, value, err)) != SD_OK) {
            return st;
        }
        return emit_kv(o, v, key, sd_buf_bytes(&o->b2), err);
    default:
        return SD_EINTERNAL;
    }
}

static sd_status op_process(op *o, const wv *v, sd_err *err)
{
    switch (o->kind) {
    case OP_SINK:
        return sink_process(o, v, err);
    case OP_PARDO:
        return pardo_process(o, v, err);
    case OP_WINDOW_INTO:
        return window_into_process(o, v, err);
    case OP_FLATTEN:
        return emit_to(o->outs[0], v, err);
    case OP_PRECOMBINE:
        return precombine_process(o, v, err);
    case OP_MERGE:
    case OP_EXTRACT:
    case OP_CONVERT:
    case OP_COMBINE_GROUPED:
        return combine_op_process(o, v, err);
    case OP_SOURCE:
        break;
    }
    return perr(o->bp, err, SD_EINTERNAL, "transform %s: unexpected input", o->tid);
}

/* ================================================================ construction */

static void op_free(op *o)
{
    if (o == NULL) {
        return;
    }
    if (o->kind == OP_PARDO && o->setup_done && o->fn->teardown != NULL) {
        o->fn->teardown(o->state);
    }
    sd_free(o->tid);
    sd_free(o->outs);
    sd_coder_destroy(o->port_coder);
    sd_buf_deinit(&o->pending);
    sd_wv_header_deinit(&o->hdr);
    sd_free(o->payload);
    sd__dofn_payload_deinit(&o->pl);
    sd_buf_deinit(&o->ctx.scratch);
    for (size_t i = 0; i < o->n_sides; i++) {
        sd_free(o->sides[i].local);
    }
    sd_free(o->sides);
    for (size_t i = 0; i < o->n_state_slots; i++) {
        sd_free(o->state_ids[i]);
        sd_coder_destroy(o->state_coders[i]);
        if (o->state_key_coders != NULL) {
            sd_coder_destroy(o->state_key_coders[i]);
        }
        if (o->state_cfgs != NULL) {
            sd_free(o->state_cfgs[i]);
        }
    }
    sd_free(o->state_ids);
    sd_free(o->state_coders);
    sd_free(o->state_infos);
    sd_free(o->state_key_coders);
    sd_free(o->state_cfgs);
    sd_free(o->main_local);
    for (size_t i = 0; i < o->n_out_locals; i++) {
        sd_free(o->out_locals[i]);
    }
    sd_free(o->out_locals);
    for (size_t i = 0; i < o->n_fams; i++) {
        sd_free(o->fams[i].family);
        sd_coder_destroy(o->fams[i].coder);
        sd_buf_deinit(&o->fams[i].out);
        sd_buf_deinit(&o->fams[i].in_pending);
    }
    sd_free(o->fams);
    sd_timer_deinit(&o->timer);
    for (size_t i = 0; i < o->ctx.reads.len; i++) {
        buf_free_value(*SD_VEC_AT(&o->ctx.reads, sd_buf *, i));
    }
    sd_vec_deinit(&o->ctx.reads);
    sd_map_deinit(&o->counters);
    sd_free(o->cpayload);
    sd_coder_destroy(o->acc_coder);
    sd_map_deinit(&o->accs);
    sd_buf_deinit(&o->b1);
    sd_buf_deinit(&o->b2);
    sd_buf_deinit(&o->b3);
    sd_free(o);
}

static void counter_free(void *v)
{
    sd_free(v);
}

static pcn *find_pcn(sd__proc *bp, const char *id)
{
    for (size_t i = 0; i < bp->pcs.len; i++) {
        pcn *pc = *SD_VEC_AT(&bp->pcs, pcn *, i);
        if (strcmp(pc->id, id) == 0) {
            return pc;
        }
    }
    return NULL;
}

static sd_status add_pcn(sd__proc *bp, const pb_PBD *d, const char *id, pcn **out, sd_err *err)
{
    pcn *pc = find_pcn(bp, id);
    if (pc != NULL) {
        *out = pc;
        return SD_OK;
    }
    const SD_PL(PCollection) *m = find_pcoll(d, id);
    if (m == NULL) {
        return sd_err_set(err, SD_EPROTO, "descriptor %s: PCollection %s is not in the descriptor",
                          d->id, id);
    }
    pc = sd_calloc(1, sizeof(*pc));
    if (pc == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_vec_init(&pc->consumers, sizeof(op *));
    pc->id = sd_strdup(id);
    if (pc->id == NULL || sd_vec_push(&bp->pcs, &pc) != SD_OK) {
        sd_free(pc->id);
        sd_free(pc);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_status st = build_coder(d, m->coder_id, &pc->coder, err);
    if (st != SD_OK) {
        return sd_err_prefix(err, "PCollection %s: ", id);
    }
    const SD_PL(WindowingStrategy) *ws = find_windowing(d, m->windowing_strategy_id);
    if (ws == NULL) {
        return sd_err_set(err, SD_EPROTO, "PCollection %s: windowing strategy %s is not in the "
                          "descriptor", id, m->windowing_strategy_id);
    }
    if ((st = parse_window_fn(ws->window_fn, &pc->wf, err)) != SD_OK ||
        (st = build_coder(d, ws->window_coder_id, &pc->window_coder, err)) != SD_OK) {
        return sd_err_prefix(err, "PCollection %s: ", id);
    }
    *out = pc;
    return SD_OK;
}

static sd_status new_op(sd__proc *bp, op_kind kind, const char *tid, op **out, sd_err *err)
{
    op *o = sd_calloc(1, sizeof(*o));
    if (o == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    o->kind = kind;
    o->bp = bp;
    o->tid = sd_strdup(tid);
    o->ctx.op = o;
    sd_vec_init(&o->ctx.reads, sizeof(sd_buf *));
    sd_timer_init(&o->timer);
    sd_buf_init(&o->pending, 0);
    sd_buf_init(&o->ctx.scratch, 0);
    sd_buf_init(&o->b1, 0);
    sd_buf_init(&o->b2, 0);
    sd_buf_init(&o->b3, 0);
    sd_wv_header_init(&o->hdr);
    sd_map_init(&o->counters, counter_free);
    sd_map_init(&o->accs, acc_free);
    if (o->tid == NULL || sd_vec_push(&bp->ops, &o) != SD_OK) {
        op_free(o);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    *out = o;
    return SD_OK;
}

static sd_status connect_input(sd__proc *bp, const pb_PBD *d, op *o, const char *pcoll_id,
                               sd_err *err)
{
    pcn *pc;
    sd_status st = add_pcn(bp, d, pcoll_id, &pc, err);
    if (st != SD_OK) {
        return st;
    }
    o->in = pc;
    return sd_vec_push(&pc->consumers, &o) == SD_OK ? SD_OK
                                                    : sd_err_set(err, SD_ENOMEM, "out of memory");
}

static sd_status set_outputs(sd__proc *bp, const pb_PBD *d, op *o, size_t n, const char **ids,
                             sd_err *err)
{
    o->n_outs = n;
    o->outs = sd_calloc(n > 0 ? n : 1, sizeof(pcn *));
    if (o->outs == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == NULL) {
            continue;
        }
        sd_status st = add_pcn(bp, d, ids[i], &o->outs[i], err);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* The element coder of the port coder vs the PCollection's: same, or LP around it. */
static sd_status port_mode(op *o, const pcn *pc, sd_err *err)
{
    if (o->port_coder->kind != SD_CODER_WINDOWED_VALUE &&
        o->port_coder->kind != SD_CODER_PARAM_WINDOWED_VALUE) {
        return sd_err_set(err, SD_EPROTO, "transform %s: port coder %s is not a windowed value "
                          "coder", o->tid, o->port_coder->urn);
    }
    o->param_wv = o->port_coder->kind == SD_CODER_PARAM_WINDOWED_VALUE;
    const sd_coder *ec = sd_wv_element_coder(o->port_coder);
    if (sd_coder_equal(ec, pc->coder)) {
        o->lp_wrap = false;
        return SD_OK;
    }
    if (ec->kind == SD_CODER_LENGTH_PREFIX && sd_coder_equal(ec->components[0], pc->coder)) {
        o->lp_wrap = true;
        return SD_OK;
    }
    return sd_err_set(err, SD_EPROTO,
                      "transform %s: port element coder %s does not match PCollection %s's "
                      "coder %s", o->tid, ec->urn, pc->id, pc->coder->urn);
}

static sd_status build_port(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o,
                            sd_err *err)
{
    SD_FN(RemoteGrpcPort) *port = FNF(remote_grpc_port__unpack)(NULL, t->spec->payload.len,
                                                                  t->spec->payload.data);
    if (port == NULL) {
        return sd_err_set(err, SD_EPROTO, "transform %s: malformed RemoteGrpcPort", o->tid);
    }
    sd_status st = build_coder(d, port->coder_id, &o->port_coder, err);
    FNF(remote_grpc_port__free_unpacked)(port, NULL);
    (void)bp;
    return st != SD_OK ? sd_err_prefix(err, "transform %s: ", o->tid) : SD_OK;
}

/* State ids with their coders and timer families with their timer coders. */
static sd_status build_state_specs(const pb_PBD *d, const SD_PL(ParDoPayload) *pp, op *o,
                                   sd_err *err)
{
    sd_status st;
    o->stateful = pp->n_state_specs > 0 || pp->n_timer_family_specs > 0;
    if (pp->n_state_specs > 0) {
        o->state_ids = sd_calloc(pp->n_state_specs, sizeof(char *));
        o->state_coders = sd_calloc(pp->n_state_specs, sizeof(sd_coder *));
        o->state_infos = sd_calloc(pp->n_state_specs, sizeof(sd__state_info));
        o->state_key_coders = sd_calloc(pp->n_state_specs, sizeof(sd_coder *));
        o->state_cfgs = sd_calloc(pp->n_state_specs, sizeof(uint8_t *));
        o->n_state_slots = o->state_ids != NULL && o->state_coders != NULL
                               ? pp->n_state_specs : 0;
        if (o->state_ids == NULL || o->state_coders == NULL || o->state_infos == NULL ||
            o->state_key_coders == NULL || o->state_cfgs == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < pp->n_state_specs; i++) {
        const SD_PL(StateSpec) *ss = pp->state_specs[i]->value;
        const char *cid = NULL;
        sd__state_info *info = &o->state_infos[o->n_states];
        if (ss != NULL &&
            ss->spec_case == ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_BAG_SPEC) {
            cid = ss->bag_spec->element_coder_id;
            info->kind = SD_STATE_BAG;
        } else if (ss != NULL &&
                   ss->spec_case ==
                       ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_READ_MODIFY_WRITE_SPEC) {
            cid = ss->read_modify_write_spec->coder_id;
            info->kind = SD_STATE_VALUE;
        } else if (ss != NULL &&
                   ss->spec_case ==
                       ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_COMBINING_SPEC) {
            sd_bytes name;
            const SD_PL(FunctionSpec) *cf = ss->combining_spec->combine_fn;
            cid = ss->combining_spec->accumulator_coder_id;
            info->kind = SD_STATE_COMBINING;
            if (cf == NULL || strcmp(cf->urn, SD_URN_COMBINEFN_C) != 0) {
                return sd_err_set(err, SD_EUNIMPL, "transform %s: combining state %s: the "
                                  "CombineFn is not a C CombineFn (%s)", o->tid,
                                  pp->state_specs[i]->key, SD_URN_COMBINEFN_C);
            }
            o->state_cfgs[o->n_states] = sd_memdup(cf->payload.data, cf->payload.len);
            if (o->state_cfgs[o->n_states] == NULL && cf->payload.len > 0) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
            if ((st = sd__combinefn_payload_decode(
                     sd_bytes_make(o->state_cfgs[o->n_states], cf->payload.len), &name,
                     &info->config, err)) != SD_OK) {
                return sd_err_prefix(err, "transform %s: combining state %s: ", o->tid,
                                     pp->state_specs[i]->key);
            }
            info->cfn = sd__find_combinefn(name);
            if (info->cfn == NULL) {
                return sd_err_set(err, SD_ENOTFOUND, "transform %s: combining state %s: no "
                                  "CombineFn registered as \"%.*s\" in this worker", o->tid,
                                  pp->state_specs[i]->key, (int)name.len,
                                  (const char *)name.ptr);
            }
        } else if (ss != NULL &&
                   ss->spec_case ==
                       ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_MAP_SPEC) {
            cid = ss->map_spec->value_coder_id;
            info->kind = SD_STATE_MAP;
            if ((st = build_coder(d, ss->map_spec->key_coder_id,
                                  &o->state_key_coders[o->n_states], err)) != SD_OK) {
                return sd_err_prefix(err, "transform %s: map state %s keys: ", o->tid,
                                     pp->state_specs[i]->key);
            }
            info->key_coder = o->state_key_coders[o->n_states];
        } else if (ss != NULL &&
                   ss->spec_case ==
                       ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_ORDERED_LIST_SPEC) {
            cid = ss->ordered_list_spec->element_coder_id;
            info->kind = SD_STATE_ORDERED_LIST;
        } else {
            return sd_err_set(err, SD_EUNIMPL, "transform %s: state %s: only bag, value, "
                              "combining, map and ordered-list state are supported", o->tid,
                              pp->state_specs[i]->key);
        }
        o->state_ids[o->n_states] = sd_strdup(pp->state_specs[i]->key);
        if (o->state_ids[o->n_states] == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        st = build_coder(d, cid, &o->state_coders[o->n_states], err);
        info->coder = o->state_coders[o->n_states];
        o->n_states++;
        if (st != SD_OK) {
            return sd_err_prefix(err, "transform %s: state %s: ", o->tid,
                                 pp->state_specs[i]->key);
        }
    }
    if (pp->n_timer_family_specs > 0) {
        o->fams = sd_calloc(pp->n_timer_family_specs, sizeof(tfam));
        if (o->fams == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < pp->n_timer_family_specs; i++) {
        const SD_PL(TimerFamilySpec) *ts = pp->timer_family_specs[i]->value;
        tfam *f = &o->fams[o->n_fams++];
        sd_buf_init(&f->out, 0);
        sd_buf_init(&f->in_pending, 0);
        f->family = sd_strdup(pp->timer_family_specs[i]->key);
        if (f->family == NULL || ts == NULL) {
            return sd_err_set(err, f->family == NULL ? SD_ENOMEM : SD_EPROTO,
                              "transform %s: bad timer family", o->tid);
        }
        if ((st = build_coder(d, ts->timer_family_coder_id, &f->coder, err)) != SD_OK) {
            return sd_err_prefix(err, "transform %s: timer family %s: ", o->tid, f->family);
        }
        if (f->coder->kind != SD_CODER_TIMER) {
            return sd_err_set(err, SD_EPROTO, "transform %s: timer family %s: coder %s is not a "
                              "timer coder", o->tid, f->family, f->coder->urn);
        }
    }
    return SD_OK;
}

static sd_status build_pardo(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o,
                             sd_err *err)
{
    sd_status st;
    SD_PL(ParDoPayload) *pp = PLF(par_do_payload__unpack)(NULL, t->spec->payload.len,
                                                            t->spec->payload.data);
    if (pp == NULL || pp->do_fn == NULL) {
        if (pp != NULL) {
            PLF(par_do_payload__free_unpacked)(pp, NULL);
        }
        return sd_err_set(err, SD_EPROTO, "transform %s: malformed ParDoPayload", o->tid);
    }
    if (strcmp(pp->do_fn->urn, SD_URN_DOFN_C) != 0) {
        st = sd_err_set(err, SD_EUNIMPL, "transform %s: DoFn URN %s is not a C DoFn (%s)",
                        o->tid, pp->do_fn->urn, SD_URN_DOFN_C);
        PLF(par_do_payload__free_unpacked)(pp, NULL);
        return st;
    }
    if (pp->restriction_coder_id != NULL && pp->restriction_coder_id[0] != '\0' &&
        o->sdf_role == 0) {
        st = sd_err_set(err, SD_EPROTO, "transform %s: a splittable ParDo reached the SDK "
                        "unexpanded (the runner must expand it into the SDF components)", o->tid);
        PLF(par_do_payload__free_unpacked)(pp, NULL);
        return st;
    }
    if ((st = build_state_specs(d, pp, o, err)) != SD_OK) {
        PLF(par_do_payload__free_unpacked)(pp, NULL);
        return st;
    }
    o->payload = sd_memdup(pp->do_fn->payload.data, pp->do_fn->payload.len);
    size_t plen = pp->do_fn->payload.len;
    PLF(par_do_payload__free_unpacked)(pp, NULL);
    if (o->payload == NULL && plen > 0) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if ((st = sd__dofn_payload_decode(sd_bytes_make(o->payload, plen), &o->pl, err)) != SD_OK) {
        return sd_err_prefix(err, "transform %s: ", o->tid);
    }
    o->fn = sd__find_dofn(o->pl.name);
    if (o->fn == NULL) {
        return sd_err_set(err, SD_ENOTFOUND,
                          "transform %s: no DoFn registered as \"%.*s\" in this worker (register "
                          "it before sd_sdk_main)", o->tid, (int)o->pl.name.len,
                          (const char *)o->pl.name.ptr);
    }
    if (o->sdf_role != 0) {
        if (o->fn->initial_restriction == NULL) {
            return sd_err_set(err, SD_EINVAL, "transform %s: DoFn \"%.*s\" runs as a splittable "
                              "DoFn but has no initial_restriction", o->tid,
                              (int)o->pl.name.len, (const char *)o->pl.name.ptr);
        }
        if ((st = sd__sdf_payload_wm(sd_bytes_make(o->payload, plen), &o->wm_spec, err)) !=
            SD_OK) {
            return sd_err_prefix(err, "transform %s: ", o->tid);
        }
    }
    if (o->sdf_role == SDF_PAIR || o->sdf_role == SDF_SPLIT) {
        /* One input, one output "out"; side inputs belong to the process transform. */
        if (t->n_inputs != 1 || t->n_outputs != 1) {
            return sd_err_set(err, SD_EPROTO, "transform %s: an SDF component needs one input "
                              "and one output", o->tid);
        }
        if ((st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK) {
            return st;
        }
        const sd_coder *ic = o->in->coder;
        if (o->sdf_role == SDF_SPLIT &&
            (ic->kind != SD_CODER_KV || ic->components[1]->kind != SD_CODER_KV)) {
            return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not KV(element, "
                              "restriction)", o->tid, o->in->id);
        }
        const char *out_id = t->outputs[0]->value;
        return set_outputs(bp, d, o, 1, &out_id, err);
    }
    /* Side inputs by local name, main input = the other one. */
    o->n_sides = o->pl.n_sides;
    o->sides = o->n_sides > 0 ? sd_calloc(o->n_sides, sizeof(side)) : NULL;
    if (o->n_sides > 0 && o->sides == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    const char *main_in = NULL;
    for (size_t i = 0; i < t->n_inputs; i++) {
        bool is_side = false;
        for (size_t j = 0; j < o->pl.n_sides; j++) {
            sd_bytes s = o->pl.sides[j];
            if (strlen(t->inputs[i]->key) == s.len && memcmp(t->inputs[i]->key, s.ptr, s.len) == 0) {
                is_side = true;
                o->sides[j].local = sd_strdup(t->inputs[i]->key);
                if (o->sides[j].local == NULL) {
                    return sd_err_set(err, SD_ENOMEM, "out of memory");
                }
                if ((st = add_pcn(bp, d, t->inputs[i]->value, &o->sides[j].pc, err)) != SD_OK) {
                    return st;
                }
            }
        }
        if (!is_side) {
            main_in = t->inputs[i]->value;
        }
    }
    for (size_t j = 0; j < o->n_sides; j++) {
        if (o->sides[j].pc == NULL) {
            return sd_err_set(err, SD_EPROTO, "transform %s: side input %.*s is not an input",
                              o->tid, (int)o->pl.sides[j].len, (const char *)o->pl.sides[j].ptr);
        }
    }
    /* Multimap-ness comes from the ParDoPayload; re-read it for the access patterns. */
    pp = PLF(par_do_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
    for (size_t j = 0; pp != NULL && j < pp->n_side_inputs; j++) {
        for (size_t k = 0; k < o->n_sides; k++) {
            if (strcmp(pp->side_inputs[j]->key, o->sides[k].local) == 0 &&
                pp->side_inputs[j]->value != NULL &&
                pp->side_inputs[j]->value->access_pattern != NULL) {
                o->sides[k].multimap =
                    strcmp(pp->side_inputs[j]->value->access_pattern->urn,
                           SD_URN_SIDE_INPUT_MULTIMAP) == 0;
                if (o->sides[k].multimap && o->sides[k].pc->coder->kind != SD_CODER_KV) {
                    PLF(par_do_payload__free_unpacked)(pp, NULL);
                    return sd_err_set(err, SD_EPROTO, "transform %s: multimap side input %s is "
                                      "not a KV PCollection", o->tid, o->sides[k].local);
                }
            }
        }
    }
    if (pp != NULL) {
        PLF(par_do_payload__free_unpacked)(pp, NULL);
    }
    if (main_in == NULL) {
        return sd_err_set(err, SD_EPROTO, "transform %s: no main input", o->tid);
    }
    if ((st = connect_input(bp, d, o, main_in, err)) != SD_OK) {
        return st;
    }
    if (o->stateful && o->in->coder->kind != SD_CODER_KV) {
        return sd_err_set(err, SD_EPROTO, "transform %s: stateful DoFn input %s is not a KV",
                          o->tid, o->in->id);
    }
    /* Outputs in tag order. */
    const char **ids = sd_calloc(o->pl.n_outputs + 1, sizeof(char *));
    if (ids == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < o->pl.n_outputs; i++) {
        char tag[256];
        snprintf(tag, sizeof(tag), "%.*s", (int)o->pl.outputs[i].len,
                 (const char *)o->pl.outputs[i].ptr);
        ids[i] = pbd_string_map(t->n_outputs, (void **)t->outputs, tag);
    }
    st = set_outputs(bp, d, o, o->pl.n_outputs, ids, err);
    sd_free(ids);
    if (st == SD_OK && o->sdf_role == SDF_PROCESS) {
        /* Residual roots name the main input and every output by local name. */
        const sd_coder *ic = o->in->coder;
        if (ic->kind != SD_CODER_KV || ic->components[0]->kind != SD_CODER_KV) {
            return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not KV(KV(element, "
                              "restriction), size)", o->tid, o->in->id);
        }
        for (size_t i = 0; i < t->n_inputs && o->main_local == NULL; i++) {
            if (strcmp(t->inputs[i]->value, o->in->id) == 0) {
                o->main_local = sd_strdup(t->inputs[i]->key);
                if (o->main_local == NULL) {
                    return sd_err_set(err, SD_ENOMEM, "out of memory");
                }
            }
        }
        o->out_locals = t->n_outputs > 0 ? sd_calloc(t->n_outputs, sizeof(char *)) : NULL;
        if (t->n_outputs > 0 && o->out_locals == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < t->n_outputs; i++) {
            o->out_locals[i] = sd_strdup(t->outputs[i]->key);
            if (o->out_locals[i] == NULL) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
            o->n_out_locals++;
        }
    }
    return st;
}

static sd_status build_combine(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o,
                               sd_err *err)
{
    sd_status st;
    sd_bytes name;
    SD_PL(CombinePayload) *cp = PLF(combine_payload__unpack)(NULL, t->spec->payload.len,
                                                               t->spec->payload.data);
    if (cp == NULL || cp->combine_fn == NULL) {
        if (cp != NULL) {
            PLF(combine_payload__free_unpacked)(cp, NULL);
        }
        return sd_err_set(err, SD_EPROTO, "transform %s: malformed CombinePayload", o->tid);
    }
    if (strcmp(cp->combine_fn->urn, SD_URN_COMBINEFN_C) != 0) {
        st = sd_err_set(err, SD_EUNIMPL, "transform %s: CombineFn URN %s is not a C CombineFn",
                        o->tid, cp->combine_fn->urn);
        PLF(combine_payload__free_unpacked)(cp, NULL);
        return st;
    }
    size_t plen = cp->combine_fn->payload.len;
    o->cpayload = sd_memdup(cp->combine_fn->payload.data, plen);
    st = build_coder(d, cp->accumulator_coder_id, &o->acc_coder, err);
    PLF(combine_payload__free_unpacked)(cp, NULL);
    if (st != SD_OK) {
        return sd_err_prefix(err, "transform %s: accumulator coder: ", o->tid);
    }
    if (o->cpayload == NULL && plen > 0) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if ((st = sd__combinefn_payload_decode(sd_bytes_make(o->cpayload, plen), &name, &o->ccfg,
                                           err)) != SD_OK) {
        return sd_err_prefix(err, "transform %s: ", o->tid);
    }
    o->cfn = sd__find_combinefn(name);
    if (o->cfn == NULL) {
        return sd_err_set(err, SD_ENOTFOUND,
                          "transform %s: no CombineFn registered as \"%.*s\" in this worker",
                          o->tid, (int)name.len, (const char *)name.ptr);
    }
    if (t->n_inputs != 1 || t->n_outputs != 1) {
        return sd_err_set(err, SD_EPROTO, "transform %s: a combine component needs one input and "
                          "one output", o->tid);
    }
    if ((st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK) {
        return st;
    }
    if (o->in->coder->kind != SD_CODER_KV) {
        return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not a KV", o->tid,
                          o->in->id);
    }
    if ((o->kind == OP_MERGE || o->kind == OP_COMBINE_GROUPED) &&
        o->in->coder->components[1]->kind != SD_CODER_ITERABLE) {
        return sd_err_set(err, SD_EPROTO, "transform %s: input %s is not KV<K, Iterable<V>>",
                          o->tid, o->in->id);
    }
    const char *out_id = t->outputs[0]->value;
    return set_outputs(bp, d, o, 1, &out_id, err);
}

static sd_status build_op(sd__proc *bp, const pb_PBD *d, const char *tid, const pb_PTransform *t,
                          sd_err *err)
{
    const char *urn = t->spec->urn;
    op *o;
    sd_status st;
    static const struct {
        const char *urn;
        op_kind kind;
    } combines[] = {
        { SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE, OP_PRECOMBINE },
        { SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS, OP_MERGE },
        { SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS, OP_EXTRACT },
        { SD_URN_TRANSFORM_COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS, OP_CONVERT },
        { SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES, OP_COMBINE_GROUPED },
    };
    if (strcmp(urn, SD_URN_RUNNER_SOURCE) == 0) {
        if (t->n_outputs != 1) {
            return sd_err_set(err, SD_EPROTO, "data source %s: expected one output", tid);
        }
        if ((st = new_op(bp, OP_SOURCE, tid, &o, err)) != SD_OK ||
            (st = build_port(bp, d, t, o, err)) != SD_OK) {
            return st;
        }
        const char *out_id = t->outputs[0]->value;
        if ((st = set_outputs(bp, d, o, 1, &out_id, err)) != SD_OK ||
            (st = port_mode(o, o->outs[0], err)) != SD_OK) {
            return st;
        }
        return sd_vec_push(&bp->srcs, &o) == SD_OK ? SD_OK
                                                   : sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (strcmp(urn, SD_URN_RUNNER_SINK) == 0) {
        if (t->n_inputs != 1) {
            return sd_err_set(err, SD_EPROTO, "data sink %s: expected one input", tid);
        }
        if ((st = new_op(bp, OP_SINK, tid, &o, err)) != SD_OK ||
            (st = build_port(bp, d, t, o, err)) != SD_OK ||
            (st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK ||
            (st = port_mode(o, o->in, err)) != SD_OK) {
            return st;
        }
        return sd_vec_push(&bp->sinks, &o) == SD_OK ? SD_OK
                                                    : sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (strcmp(urn, SD_URN_TRANSFORM_PARDO) == 0) {
        if ((st = new_op(bp, OP_PARDO, tid, &o, err)) != SD_OK) {
            return st;
        }
        return build_pardo(bp, d, t, o, err);
    }
    static const struct {
        const char *urn;
        int role;
    } sdfs[] = {
        { SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION, SDF_PAIR },
        { SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS, SDF_SPLIT },
        { SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS, SDF_PROCESS },
    };
    for (size_t i = 0; i < sizeof(sdfs) / sizeof(sdfs[0]); i++) {
        if (strcmp(urn, sdfs[i].urn) == 0) {
            if ((st = new_op(bp, OP_PARDO, tid, &o, err)) != SD_OK) {
                return st;
            }
            o->sdf_role = sdfs[i].role;
            return build_pardo(bp, d, t, o, err);
        }
    }
    if (strcmp(urn, SD_URN_TRANSFORM_WINDOW_INTO) == 0) {
        if (t->n_inputs != 1 || t->n_outputs != 1) {
            return sd_err_set(err, SD_EPROTO, "transform %s: WindowInto needs one input and one "
                              "output", tid);
        }
        if ((st = new_op(bp, OP_WINDOW_INTO, tid, &o, err)) != SD_OK) {
            return st;
        }
        SD_PL(WindowIntoPayload) *wp = PLF(window_into_payload__unpack)(
            NULL, t->spec->payload.len, t->spec->payload.data);
        if (wp == NULL) {
            return sd_err_set(err, SD_EPROTO, "transform %s: malformed WindowIntoPayload", tid);
        }
        st = parse_window_fn(wp->window_fn, &o->wf, err);
        PLF(window_into_payload__free_unpacked)(wp, NULL);
        if (st != SD_OK) {
            return sd_err_prefix(err, "transform %s: ", tid);
        }
        const char *out_id = t->outputs[0]->value;
        if ((st = connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK) {
            return st;
        }
        return set_outputs(bp, d, o, 1, &out_id, err);
    }
    if (strcmp(urn, SD_URN_TRANSFORM_FLATTEN) == 0) {
        if (t->n_outputs != 1) {
            return sd_err_set(err, SD_EPROTO, "transform %s: Flatten needs one output", tid);
        }
        if ((st = new_op(bp, OP_FLATTEN, tid, &o, err)) != SD_OK) {
            return st;
        }
        for (size_t i = 0; i < t->n_inputs; i++) {
            if ((st = connect_input(bp, d, o, t->inputs[i]->value, err)) != SD_OK) {
                return st;
            }
        }
        const char *out_id = t->outputs[0]->value;
        return set_outputs(bp, d, o, 1, &out_id, err);
    }
    for (size_t i = 0; i < sizeof(combines) / sizeof(combines[0]); i++) {
        if (strcmp(urn, combines[i].urn) == 0) {
            if ((st = new_op(bp, combines[i].kind, tid, &o, err)) != SD_OK) {
                return st;
            }
            return build_combine(bp, d, t, o, err);
        }
    }
    return sd_err_set(err, SD_EUNIMPL, "transform %s: URN %s is not supported by the C SDK worker",
                      tid, urn);
}

/* Depth-first post-order from the sources gives reverse topological order. */
static sd_status topo_visit(op *o, sd_vec *order)
{
    if (o->visited) {
        return SD_OK;
    }
    o->visited = true;
    for (size_t i = 0; i < o->n_outs; i++) {
        if (o->outs[i] == NULL) {
            continue;
        }
        for (size_t j = 0; j < o->outs[i]->consumers.len; j++) {
            sd_status st = topo_visit(*SD_VEC_AT(&o->outs[i]->consumers, op *, j), order);
            if (st != SD_OK) {
                return st;
            }
        }
    }
    return sd_vec_push(order, &o);
}

sd_status sd__proc_create(const pb_ProcessBundleDescriptor *d, sd__proc **out, sd_err *err)
{
    sd_status st = SD_OK;
    sd__proc *bp = sd_calloc(1, sizeof(*bp));
    if (bp == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_vec_init(&bp->pcs, sizeof(pcn *));
    sd_vec_init(&bp->ops, sizeof(op *));
    sd_vec_init(&bp->srcs, sizeof(op *));
    sd_vec_init(&bp->sinks, sizeof(op *));
    sd_map_init(&bp->side_cache, buf_free_value);
    sd_vec_init(&bp->residuals, sizeof(sd__residual_root));
    pthread_mutex_init(&bp->split_mu, NULL);
    bp->id = sd_strdup(d->id != NULL ? d->id : "");
    if (bp->id == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < d->n_transforms && st == SD_OK; i++) {
        const pb_PTransform *t = d->transforms[i]->value;
        if (t == NULL || t->n_subtransforms > 0 || t->spec == NULL || t->spec->urn == NULL ||
            t->spec->urn[0] == '\0') {
            continue;
        }
        st = build_op(bp, d, d->transforms[i]->key, t, err);
    }
    if (st == SD_OK && bp->srcs.len == 0 && bp->ops.len > 0) {
        /* A descriptor without a data source (e.g. only timers) is fine; one without any
         * operator is odd but harmless. */
    }
    /* Topological order (sources first), then every operator must be reachable. */
    if (st == SD_OK) {
        sd_vec order;
        sd_vec_init(&order, sizeof(op *));
        for (size_t i = 0; i < bp->srcs.len && st == SD_OK; i++) {
            st = topo_visit(*SD_VEC_AT(&bp->srcs, op *, i), &order);
        }
        for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
            st = topo_visit(*SD_VEC_AT(&bp->ops, op *, i), &order);
        }
        if (st == SD_OK && order.len == bp->ops.len) {
            for (size_t i = 0; i < order.len; i++) {
                *SD_VEC_AT(&bp->ops, op *, i) = *SD_VEC_AT(&order, op *, order.len - 1 - i);
            }
        } else if (st == SD_OK) {
            st = sd_err_set(err, SD_EINTERNAL, "descriptor %s: operator ordering failed", bp->id);
        } else {
            sd_err_set(err, st, "out of memory");
        }
        sd_vec_deinit(&order);
    }
    /* A splittable DoFn's residuals are encoded as its stage's data source encodes input. */
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        for (size_t k = 0; o->sdf_role == SDF_PROCESS && k < bp->srcs.len; k++) {
            op *src = *SD_VEC_AT(&bp->srcs, op *, k);
            if (src->outs[0] == o->in) {
                o->sdf_src = src;
                src->sdf_feeds = true;
            }
        }
    }
    /* Set up DoFns last, once the graph is known to be valid. */
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind != OP_PARDO) {
            continue;
        }
        if (o->fn->setup != NULL) {
            sd_err ue;
            sd_err_clear(&ue);
            st = o->fn->setup(o->pl.config, &o->state, &ue);
            if (st != SD_OK) {
                sd_err_set(err, st, "transform %s: DoFn \"%.*s\" setup failed: %s", o->tid,
                           (int)o->pl.name.len, (const char *)o->pl.name.ptr, sd_err_msg(&ue));
                break;
            }
        }
        o->setup_done = true;
    }
    if (st != SD_OK) {
        sd__proc_destroy(bp);
        return st;
    }
    *out = bp;
    return SD_OK;
}

static void residual_root_deinit(sd__residual_root *r)
{
    sd_free(r->transform);
    sd_free(r->input);
    sd_buf_deinit(&r->element);
    for (size_t i = 0; i < r->n_outputs; i++) {
        sd_free(r->outputs[i]);
    }
    sd_free(r->outputs);
}

static void residuals_clear(sd_vec *v)
{
    for (size_t i = 0; i < v->len; i++) {
        residual_root_deinit(SD_VEC_AT(v, sd__residual_root, i));
    }
    sd_vec_reset(v);
}

void sd__proc_destroy(sd__proc *bp)
{
    if (bp == NULL) {
        return;
    }
    for (size_t i = 0; i < bp->ops.len; i++) {
        op_free(*SD_VEC_AT(&bp->ops, op *, i));
    }
    for (size_t i = 0; i < bp->pcs.len; i++) {
        pcn *pc = *SD_VEC_AT(&bp->pcs, pcn *, i);
        sd_free(pc->id);
        sd_coder_destroy(pc->coder);
        sd_coder_destroy(pc->window_coder);
        sd_vec_deinit(&pc->consumers);
        sd_free(pc);
    }
    sd_vec_deinit(&bp->ops);
    sd_vec_deinit(&bp->pcs);
    sd_vec_deinit(&bp->srcs);
    sd_vec_deinit(&bp->sinks);
    sd_map_deinit(&bp->side_cache);
    residuals_clear(&bp->residuals);
    sd_vec_deinit(&bp->residuals);
    pthread_mutex_destroy(&bp->split_mu);
    sd_free(bp->instruction);
    sd_free(bp->id);
    sd_free(bp);
}

/* ================================================================ bundles */

sd_status sd__proc_start(sd__proc *bp, const char *instruction_id, const sd__bundle_io *io,
                         sd_err *err)
{
    if (bp->broken) {
        return sd_err_set(err, SD_ESTATE, "descriptor %s: processor is broken", bp->id);
    }
    sd_free(bp->instruction);
    bp->instruction = sd_strdup(instruction_id != NULL ? instruction_id : "");
    if (bp->instruction == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    bp->io = io;
    sd_err_clear(&bp->err);
    residuals_clear(&bp->residuals);
    pthread_mutex_lock(&bp->split_mu);
    for (size_t i = 0; i < bp->srcs.len; i++) {
        op *src = *SD_VEC_AT(&bp->srcs, op *, i);
        src->n_emitted = 0;
        src->stop_at = SIZE_MAX;
    }
    pthread_mutex_unlock(&bp->split_mu);
    for (size_t i = 0; i < bp->ops.len; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        o->done = false;
        sd_buf_reset(&o->pending);
        for (size_t k = 0; k < o->n_fams; k++) {
            o->fams[k].done = false;
            sd_buf_reset(&o->fams[k].out);
            sd_buf_reset(&o->fams[k].in_pending);
        }
    }
    /* Consumers first. */
    for (size_t i = bp->ops.len; i-- > 0;) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind == OP_PARDO && o->fn->start_bundle != NULL) {
            o->ctx.in = NULL;
            sd_status st = o->fn->start_bundle(&o->ctx, o->state);
            if (st != SD_OK) {
                return bp->err.code != SD_OK
                           ? perr(bp, err, bp->err.code, "%s", bp->err.msg)
                           : perr(bp, err, st, "transform %s: start_bundle failed: %s", o->tid,
                                  sd_status_str(st));
            }
        }
    }
    return SD_OK;
}

static op *find_source(sd__proc *bp, const char *tid)
{
    for (size_t i = 0; i < bp->srcs.len; i++) {
        op *o = *SD_VEC_AT(&bp->srcs, op *, i);
        if (strcmp(o->tid, tid) == 0) {
            return o;
        }
    }
    return NULL;
}

/* Decode and push every complete windowed value in r. */
static sd_status source_drain(op *o, sd_reader *r, bool final, sd_err *err)
{
    while (!sd_reader_done(r)) {
        sd_reader save = *r;
        sd_bytes elem;
        sd_err de;
        sd_err_clear(&de);
        sd_status st = sd_wv_decode(o->port_coder, r, &o->hdr, &elem, &de);
        if (st == SD_EPROTO && !final) {
            *r = save; /* probably split across messages: wait for more */
            return SD_OK;
        }
        if (st != SD_OK) {
            return perr(o->bp, err, st, "data source %s: undecodable element: %s", o->tid,
                        sd_err_msg(&de));
        }
        if (o->lp_wrap) {
            sd_reader er = sd_reader_make(elem);
            if (sd_reader_lp(&er, &elem) != SD_OK) {
                return perr(o->bp, err, SD_EPROTO, "data source %s: bad length prefix", o->tid);
            }
        }
        wv v = { o->hdr.ts, sd_windows_items(&o->hdr.windows), o->hdr.windows.n, o->hdr.pane,
                 elem };
        if (o->sdf_feeds) {
            /* A split request may have ended the primary: later elements are the runner's. */
            pthread_mutex_lock(&o->bp->split_mu);
            bool skip = o->n_emitted >= o->stop_at;
            pthread_mutex_unlock(&o->bp->split_mu);
            if (skip) {
                continue;
            }
        }
        o->n_emitted++;
        if ((st = emit_to(o->outs[0], &v, err)) != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

sd_status sd__proc_data(sd__proc *bp, const char *transform_id, sd_bytes chunk, bool is_last,
                        sd_err *err)
{
    op *o = find_source(bp, transform_id);
    sd_status st;
    if (bp->broken) {
        return sd_err_set(err, bp->err.code != SD_OK ? bp->err.code : SD_ESTATE, "%s",
                          bp->err.code != SD_OK ? bp->err.msg : "processor is broken");
    }
    if (o == NULL) {
        return perr(bp, err, SD_EPROTO, "bundle %s: data for %s, which is not a data source of "
                    "descriptor %s", bp->instruction, transform_id, bp->id);
    }
    if (o->done) {
        return perr(bp, err, SD_EPROTO, "bundle %s: data for %s after its is_last",
                    bp->instruction, transform_id);
    }
    if (o->pending.len == 0) {
        sd_reader r = sd_reader_make(chunk);
        if ((st = source_drain(o, &r, is_last, err)) != SD_OK) {
            return st;
        }
        if (!sd_reader_done(&r) && sd_buf_append(&o->pending, r.p, sd_reader_left(&r)) != SD_OK) {
            return perr(bp, err, SD_ENOMEM, "out of memory");
        }
    } else {
        if (sd_buf_append_bytes(&o->pending, chunk) != SD_OK) {
            return perr(bp, err, SD_ENOMEM, "out of memory");
        }
        sd_reader r = sd_reader_make(sd_buf_bytes(&o->pending));
        if ((st = source_drain(o, &r, is_last, err)) != SD_OK) {
            return st;
        }
        size_t left = sd_reader_left(&r);
        memmove(o->pending.data, r.p, left);
        o->pending.len = left;
    }
    if (is_last) {
        o->done = true;
    }
    return SD_OK;
}

sd_status sd__proc_timers(sd__proc *bp, const char *transform_id, const char *family,
                          sd_bytes chunk, bool is_last, sd_err *err)
{
    op *o = NULL;
    tfam *f = NULL;
    if (bp->broken) {
        return sd_err_set(err, bp->err.code != SD_OK ? bp->err.code : SD_ESTATE, "%s",
                          bp->err.code != SD_OK ? bp->err.msg : "processor is broken");
    }
    for (size_t i = 0; i < bp->ops.len && f == NULL; i++) {
        o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind == OP_PARDO && strcmp(o->tid, transform_id) == 0) {
            f = find_family(o, family);
        }
    }
    if (f == NULL) {
        return perr(bp, err, SD_EPROTO, "bundle %s: timers for %s/%s, which is not a timer "
                    "family of descriptor %s", bp->instruction, transform_id, family, bp->id);
    }
    bool expiry = o->fn->on_window_expiration != NULL && strcmp(family, SD_EXPIRY_FAMILY) == 0;
    if (o->fn->on_timer == NULL && !expiry && chunk.len > 0) {
        return perr(bp, err, SD_EINVAL, "transform %s: timer %s fired but the DoFn has no "
                    "on_timer callback", o->tid, family);
    }
    /*
     * A runner may cut a stream of timers anywhere, even inside one timer: an incomplete tail
     * waits in in_pending for the next chunk (as data sources do); only the final chunk must
     * end on a timer boundary.
     */
    bool from_pending = f->in_pending.len > 0;
    if (from_pending && sd_buf_append_bytes(&f->in_pending, chunk) != SD_OK) {
        return perr(bp, err, SD_ENOMEM, "out of memory");
    }
    sd_reader r = sd_reader_make(from_pending ? sd_buf_bytes(&f->in_pending) : chunk);
    sd_ctx *c = &o->ctx;
    char fam[256];
    snprintf(fam, sizeof(fam), "%s", family);
    while (!sd_reader_done(&r)) {
        sd_timer t;
        sd_err de;
        sd_err_clear(&de);
        sd_timer_init(&t);
        sd_reader save = r;
        sd_status st = sd_timer_decode(f->coder, &r, &t, &de);
        if (st == SD_EPROTO && !is_last) {
            sd_timer_deinit(&t);
            r = save;
            break;
        }
        if (st != SD_OK) {
            sd_timer_deinit(&t);
            return perr(bp, err, st, "transform %s: undecodable timer in family %s: %s", o->tid,
                        family, sd_err_msg(&de));
        }
        for (size_t w = 0; !t.clear && w < t.windows.n && st == SD_OK; w++) {
            wv v = { t.hold, &sd_windows_items(&t.windows)[w], 1, t.pane, SD_BYTES_NULL };
            c->in = &v;
            c->win = sd_windows_items(&t.windows)[w];
            c->key = t.key;
            c->fire = t.fire;
            st = expiry ? o->fn->on_window_expiration(c, o->state)
                        : o->fn->on_timer(c, o->state, fam, t.tag);
            c->in = NULL;
            c->key = SD_BYTES_NULL;
            drop_reads(c);
            if (st != SD_OK) {
                st = bp->err.code != SD_OK
                         ? perr(bp, err, bp->err.code, "%s", bp->err.msg)
                         : perr(bp, err, st, "transform %s: on_timer(%s) failed: %s", o->tid,
                                family, sd_status_str(st));
            }
        }
        sd_timer_deinit(&t);
        if (st != SD_OK) {
            return st;
        }
    }
    size_t left = sd_reader_left(&r);
    if (from_pending) {
        memmove(f->in_pending.data, r.p, left);
        f->in_pending.len = left;
    } else if (left > 0 && sd_buf_append(&f->in_pending, r.p, left) != SD_OK) {
        return perr(bp, err, SD_ENOMEM, "out of memory");
    }
    if (is_last) {
        f->done = true;
    }
    return SD_OK;
}

size_t sd__proc_n_timer_streams(const sd__proc *bp)
{
    size_t n = 0;
    for (size_t i = 0; i < bp->ops.len; i++) {
        n += (*SD_VEC_AT(&bp->ops, op *, i))->n_fams;
    }
    return n;
}

void sd__proc_timer_stream(const sd__proc *bp, size_t k, const char **transform,
                           const char **family)
{
    *transform = NULL;
    *family = NULL;
    for (size_t i = 0; i < bp->ops.len; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (k < o->n_fams) {
            *transform = o->tid;
            *family = o->fams[k].family;
            return;
        }
        k -= o->n_fams;
    }
}

bool sd__proc_inputs_done(const sd__proc *bp)
{
    for (size_t i = 0; i < bp->srcs.len; i++) {
        if (!(*SD_VEC_AT(&bp->srcs, op *, i))->done) {
            return false;
        }
    }
    for (size_t i = 0; i < bp->ops.len; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        for (size_t k = 0; k < o->n_fams; k++) {
            if (!o->fams[k].done) {
                return false;
            }
        }
    }
    return true;
}

void sd__bundle_result_init(sd__bundle_result *r)
{
    sd_vec_init(&r->counters, sizeof(sd__counter));
    sd_vec_init(&r->residuals, sizeof(sd__residual_root));
}

void sd__bundle_result_deinit(sd__bundle_result *r)
{
    for (size_t i = 0; i < r->counters.len; i++) {
        sd__counter *c = sd_vec_at(&r->counters, i);
        sd_free(c->transform);
        sd_free(c->name);
    }
    sd_vec_deinit(&r->counters);
    residuals_clear(&r->residuals);
    sd_vec_deinit(&r->residuals);
}

static sd_status collect_counters(op *o, sd__bundle_result *res)
{
    size_t it = 0;
    sd_bytes k;
    void *v;
    while (sd_map_next(&o->counters, &it, &k, &v)) {
        sd__counter c = { sd_strdup(o->tid), sd_strndup((const char *)k.ptr, k.len),
                          *(int64_t *)v };
        if (c.transform == NULL || c.name == NULL || sd_vec_push(&res->counters, &c) != SD_OK) {
            sd_free(c.transform);
            sd_free(c.name);
            return SD_ENOMEM;
        }
    }
    sd_map_deinit(&o->counters);
    sd_map_init(&o->counters, counter_free);
    return SD_OK;
}

sd_status sd__proc_finish(sd__proc *bp, sd__bundle_result *res, sd_err *err)
{
    sd_status st = SD_OK;
    if (bp->broken) {
        return sd_err_set(err, bp->err.code != SD_OK ? bp->err.code : SD_ESTATE, "%s",
                          bp->err.code != SD_OK ? bp->err.msg : "processor is broken");
    }
    for (size_t i = 0; i < bp->srcs.len; i++) {
        op *o = *SD_VEC_AT(&bp->srcs, op *, i);
        if (o->pending.len > 0) {
            return perr(bp, err, SD_EPROTO, "data source %s: %zu trailing bytes do not form an "
                        "element", o->tid, o->pending.len);
        }
    }
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind == OP_PARDO && o->fn->finish_bundle != NULL) {
            o->ctx.in = NULL;
            st = o->fn->finish_bundle(&o->ctx, o->state);
            if (st != SD_OK) {
                st = bp->err.code != SD_OK
                         ? perr(bp, err, bp->err.code, "%s", bp->err.msg)
                         : perr(bp, err, st, "transform %s: finish_bundle failed: %s", o->tid,
                                sd_status_str(st));
            }
        } else if (o->kind == OP_PRECOMBINE) {
            st = precombine_flush(o, err);
        }
    }
    for (size_t i = 0; i < bp->sinks.len && st == SD_OK; i++) {
        st = sink_flush(*SD_VEC_AT(&bp->sinks, op *, i), true, err);
    }
    /* Timers set during the bundle, then is_last for every family. */
    for (size_t i = 0; i < bp->ops.len && st == SD_OK; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        for (size_t k = 0; k < o->n_fams && st == SD_OK; k++) {
            if (bp->io == NULL || bp->io->timers == NULL) {
                st = perr(bp, err, SD_ESTATE, "transform %s: no timer output channel", o->tid);
                break;
            }
            st = bp->io->timers(bp->io->ctx, o->tid, o->fams[k].family,
                                sd_buf_bytes(&o->fams[k].out), true, err);
            sd_buf_reset(&o->fams[k].out);
            if (st != SD_OK) {
                bp->broken = true;
            }
        }
    }
    for (size_t i = 0; i < bp->ops.len && st == SD_OK && res != NULL; i++) {
        op *o = *SD_VEC_AT(&bp->ops, op *, i);
        if (o->kind == OP_PARDO && collect_counters(o, res) != SD_OK) {
            st = perr(bp, err, SD_ENOMEM, "out of memory");
        }
    }
    /* Residual roots go to the result (moved: the vectors swap their items). */
    if (st == SD_OK && res != NULL && bp->residuals.len > 0) {
        for (size_t i = 0; i < bp->residuals.len && st == SD_OK; i++) {
            st = sd_vec_push(&res->residuals, SD_VEC_AT(&bp->residuals, sd__residual_root, i));
            if (st != SD_OK) {
                st = perr(bp, err, SD_ENOMEM, "out of memory");
            } else {
                memset(SD_VEC_AT(&bp->residuals, sd__residual_root, i), 0,
                       sizeof(sd__residual_root));
            }
        }
    }
    residuals_clear(&bp->residuals);
    sd_map_deinit(&bp->side_cache);
    sd_map_init(&bp->side_cache, buf_free_value);
    bp->io = NULL;
    return st;
}
