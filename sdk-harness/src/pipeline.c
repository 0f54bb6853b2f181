/*
 * Sundial C SDK: pipeline construction and its translation into a Beam Pipeline proto.
 *
 * The builder keeps a small model of its own (transforms, PCollections, coders, windowing
 * strategies) and writes the proto only when asked (sd__pipeline_build), because the proto
 * needs facts known late: the environment (a loopback worker pool's port exists only at run
 * time) and the deduplicated coder table.
 *
 * Ids. A transform's id is its unique name: the user's name, prefixed by its composite
 * parent's ("Count/Group"); reusing a name is a construction error. A PCollection's id is
 * "<producer id>.<output tag>". Coders get "c0", "c1", ... after structural deduplication,
 * windowing strategies "w0" (global, always present), "w1", ...
 *
 * Composites. Create, combine_per_key, combine globally, Reshuffle and the assertions are
 * composites: a parent transform that lists its leaves as subtransforms and carries the
 * leaves' external inputs and outputs. combine_per_key and Reshuffle carry their standard URNs
 * (plus a CombinePayload for the combine), so runners that understand them (combiner lifting,
 * fusion breaks) can, and runners that do not expand the leaves, which are ordinary
 * GroupByKeys and ParDos. Plain groupings have no URN.
 *
 * Sticky errors: the first failure is kept in p->err and every later call that depends on a
 * NULL input returns NULL quietly, so user code checks once, at run time.
 */
#include "sdk-harness/src/sdk_int.h"
#include "sdk-harness/src/sdf_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "google/protobuf/duration.pb-c.h"
#include "google/protobuf/timestamp.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/urns/urns.h"

#define PX_MAGIC 0x53445049u

typedef enum px_kind {
    PX_COMPOSITE = 0,
    PX_IMPULSE,
    PX_PARDO,
    PX_GBK,
    PX_FLATTEN,
    PX_WINDOW_INTO,
    PX_COMBINE_PER_KEY, /* composite with a CombinePayload */
    PX_COMBINE_GROUPED,
    PX_RESHUFFLE, /* composite with the reshuffle URN */
    PX_TESTSTREAM /* root; payload from an sd_teststream (teststream.c) */
} px_kind;

typedef struct px_kv {
    char *local;
    char *pcoll;
} px_kv;

typedef struct px_side {
    char *local;
    sd_side_access access;
    size_t windowing; /* of the side PCollection */
} px_side;

typedef struct px_state {
    char *id;
    sd_state_kind kind;
    const sd_coder *coder;
    const sd_coder *key_coder; /* map state */
    sd_buf combine;            /* combining state: the CombineFn payload */
} px_state;

typedef struct px_timer {
    char *family;
    sd_time_domain domain;
} px_timer;

typedef struct px_transform {
    px_kind kind;
    char *id;
    sd_buf fn_payload;        /* DoFn or CombineFn payload */
    const sd_coder *acc_coder; /* combines */
    size_t windowing;         /* WINDOW_INTO: the new strategy */
    sd_vec inputs;            /* px_kv */
    sd_vec outputs;           /* px_kv */
    sd_vec subs;              /* char * ids */
    sd_vec sides;             /* px_side */
    sd_vec states;            /* px_state */
    sd_vec timers;            /* px_timer */
    const sd_coder *key_coder; /* stateful ParDos: the input's key coder */
    size_t in_windowing;      /* stateful ParDos: the input's windowing */
    bool splittable;          /* a splittable DoFn: restriction coder set */
    bool sdf_unbounded;       /* its DoFn is unbounded per element: outputs are unbounded */
    bool expiry;              /* OnWindowExpiration: timers include SD_EXPIRY_FAMILY */
    long parent;
    const sd_coder *elem_coder;     /* TESTSTREAM: the element coder */
    const sd_teststream *teststream; /* TESTSTREAM: the events (owned by the pipeline) */
} px_transform;

struct sd_pcoll {
    sd_pipeline *p;
    char *id;
    const sd_coder *coder;
    size_t windowing;
    bool unbounded; /* a TestStream output, or downstream of one */
};

/* An object whose lifetime is the pipeline's (sd__pipeline_own). */
typedef struct px_owned {
    void *obj;
    void (*free_fn)(void *);
} px_owned;

struct sd_pipeline {
    uint32_t magic;
    char *name;
    sd_err err;
    sd_vec coders;     /* sd_coder * (owned references) */
    sd_vec pcolls;     /* sd_pcoll * (owned) */
    sd_vec windowings; /* sd_windowfn */
    sd_vec transforms; /* px_transform * (owned) */
    long parent;       /* index of the composite being built, or -1 */
    sd_map ids;        /* transform and PCollection ids in use */
    sd_vec owned;      /* px_owned: trigger nodes, TestStream builders, collections */
    long runs;         /* sd_pipeline_run calls that ended SD_OK */
};

/* ================================================================ errors */

static bool failed(const sd_pipeline *p)
{
    return p == NULL || p->err.code != SD_OK;
}

static void *fail(sd_pipeline *p, sd_status code, const char *fmt, ...) SD_PRINTF(3, 4);

static void *fail(sd_pipeline *p, sd_status code, const char *fmt, ...)
{
    if (p != NULL && p->err.code == SD_OK) {
        va_list ap;
        va_start(ap, fmt);
        sd_err_vset(&p->err, code, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

static void *oom(sd_pipeline *p)
{
    return fail(p, SD_ENOMEM, "out of memory while building pipeline");
}

const sd_err *sd_pipeline_error(const sd_pipeline *p)
{
    return p != NULL && p->err.code != SD_OK ? &p->err : NULL;
}

bool sd__pipeline_failed(const sd_pipeline *p)
{
    return failed(p);
}

void *sd__pipeline_fail(sd_pipeline *p, sd_status code, const char *fmt, ...)
{
    if (p != NULL && p->err.code == SD_OK) {
        va_list ap;
        va_start(ap, fmt);
        sd_err_vset(&p->err, code, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

bool sd__pipeline_own(sd_pipeline *p, void *obj, void (*free_fn)(void *))
{
    px_owned o = { obj, free_fn };
    if (p == NULL || sd_vec_push(&p->owned, &o) != SD_OK) {
        free_fn(obj);
        oom(p);
        return false;
    }
    return true;
}

/* ================================================================ lifecycle */

sd_pipeline *sd_pipeline_create(const char *name)
{
    sd_pipeline *p = sd_calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    p->magic = PX_MAGIC;
    p->name = sd_strdup(name != NULL ? name : "pipeline");
    sd_vec_init(&p->coders, sizeof(sd_coder *));
    sd_vec_init(&p->pcolls, sizeof(sd_pcoll *));
    sd_vec_init(&p->windowings, sizeof(sd_windowfn));
    sd_vec_init(&p->transforms, sizeof(px_transform *));
    sd_vec_init(&p->owned, sizeof(px_owned));
    sd_map_init(&p->ids, NULL);
    p->parent = -1;
    sd_windowfn global = { .kind = SD_WINDOW_GLOBAL };
    if (p->name == NULL || sd_vec_push(&p->windowings, &global) != SD_OK) {
        sd_pipeline_destroy(p);
        return NULL;
    }
    sd__register_builtins();
    return p;
}

static void free_kvs(sd_vec *v)
{
    for (size_t i = 0; i < v->len; i++) {
        px_kv *kv = sd_vec_at(v, i);
        sd_free(kv->local);
        sd_free(kv->pcoll);
    }
    sd_vec_deinit(v);
}

void sd_pipeline_destroy(sd_pipeline *p)
{
    if (p == NULL) {
        return;
    }
    for (size_t i = 0; i < p->coders.len; i++) {
        sd_coder_destroy(*SD_VEC_AT(&p->coders, sd_coder *, i));
    }
    for (size_t i = 0; i < p->pcolls.len; i++) {
        sd_pcoll *pc = *SD_VEC_AT(&p->pcolls, sd_pcoll *, i);
        sd_free(pc->id);
        sd_free(pc);
    }
    for (size_t i = 0; i < p->transforms.len; i++) {
        px_transform *t = *SD_VEC_AT(&p->transforms, px_transform *, i);
        sd_free(t->id);
        sd_buf_deinit(&t->fn_payload);
        free_kvs(&t->inputs);
        free_kvs(&t->outputs);
        for (size_t j = 0; j < t->subs.len; j++) {
            sd_free(*SD_VEC_AT(&t->subs, char *, j));
        }
        sd_vec_deinit(&t->subs);
        for (size_t j = 0; j < t->sides.len; j++) {
            sd_free(SD_VEC_AT(&t->sides, px_side, j)->local);
        }
        sd_vec_deinit(&t->sides);
        for (size_t j = 0; j < t->states.len; j++) {
            sd_free(SD_VEC_AT(&t->states, px_state, j)->id);
            sd_buf_deinit(&SD_VEC_AT(&t->states, px_state, j)->combine);
        }
        sd_vec_deinit(&t->states);
        for (size_t j = 0; j < t->timers.len; j++) {
            sd_free(SD_VEC_AT(&t->timers, px_timer, j)->family);
        }
        sd_vec_deinit(&t->timers);
        sd_free(t);
    }
    sd_vec_deinit(&p->coders);
    sd_vec_deinit(&p->pcolls);
    sd_vec_deinit(&p->windowings);
    sd_vec_deinit(&p->transforms);
    for (size_t i = 0; i < p->owned.len; i++) {
        px_owned *o = sd_vec_at(&p->owned, i);
        o->free_fn(o->obj);
    }
    sd_vec_deinit(&p->owned);
    sd_map_deinit(&p->ids);
    sd_free(p->name);
    p->magic = 0;
    sd_free(p);
}

const sd_coder *sd_pcoll_coder(const sd_pcoll *pc)
{
    return pc != NULL ? pc->coder : NULL;
}

const char *sd_pcoll_id(const sd_pcoll *pc)
{
    return pc != NULL ? pc->id : NULL;
}

/* ================================================================ coders */

static const sd_coder *keep_coder(sd_pipeline *p, sd_status st, sd_coder *c)
{
    if (st != SD_OK) {
        return NULL;
    }
    if (sd_vec_push(&p->coders, &c) != SD_OK) {
        sd_coder_destroy(c);
        return oom(p);
    }
    return c;
}

static const sd_coder *leaf_coder(sd_pipeline *p, sd_coder_kind kind)
{
    sd_coder *c = NULL;
    if (failed(p)) {
        return NULL;
    }
    sd_status st = sd_coder_new(&c, &p->err, kind, NULL);
    return keep_coder(p, st, c);
}

const sd_coder *sd_coder_bytes(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_BYTES);
}

const sd_coder *sd_coder_string(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_STRING_UTF8);
}

const sd_coder *sd_coder_varint(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_VARINT);
}

const sd_coder *sd_coder_double(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_DOUBLE);
}

const sd_coder *sd_coder_bool(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_BOOL);
}

const sd_coder *sd_coder_kv(sd_pipeline *p, const sd_coder *key, const sd_coder *value)
{
    sd_coder *c = NULL;
    if (failed(p) || key == NULL || value == NULL) {
        return failed(p) ? NULL : fail(p, SD_EINVAL, "sd_coder_kv: NULL component");
    }
    sd_status st = sd_coder_new(&c, &p->err, SD_CODER_KV, key, value, NULL);
    return keep_coder(p, st, c);
}

const sd_coder *sd_coder_iterable(sd_pipeline *p, const sd_coder *element)
{
    sd_coder *c = NULL;
    if (failed(p) || element == NULL) {
        return failed(p) ? NULL : fail(p, SD_EINVAL, "sd_coder_iterable: NULL component");
    }
    sd_status st = sd_coder_new(&c, &p->err, SD_CODER_ITERABLE, element, NULL);
    return keep_coder(p, st, c);
}

/* ================================================================ model helpers */

static bool check_inputs(sd_pipeline *p, const char *what, sd_pcoll *const *in, size_t n)
{
    if (failed(p)) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (in[i] == NULL) {
            fail(p, SD_EINVAL, "%s: input %zu is NULL", what, i);
            return false;
        }
        if (in[i]->p != p) {
            fail(p, SD_EINVAL, "%s: input %s belongs to another pipeline", what, in[i]->id);
            return false;
        }
    }
    return true;
}

static px_transform *new_transform(sd_pipeline *p, const char *name, px_kind kind)
{
    if (failed(p)) {
        return NULL;
    }
    if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL) {
        return fail(p, SD_EINVAL, "transform name \"%s\" must be non-empty and contain no '/'",
                    name != NULL ? name : "(null)");
    }
    char *id;
    if (p->parent >= 0) {
        px_transform *parent = *SD_VEC_AT(&p->transforms, px_transform *, (size_t)p->parent);
        id = sd_asprintf("%s/%s", parent->id, name);
    } else {
        id = sd_strdup(name);
    }
    if (id == NULL) {
        return oom(p);
    }
    if (sd_map_get_str(&p->ids, id) != NULL) {
        fail(p, SD_EEXIST, "transform name \"%s\" is used twice", id);
        sd_free(id);
        return NULL;
    }
    px_transform *t = sd_calloc(1, sizeof(*t));
    if (t == NULL) {
        sd_free(id);
        return oom(p);
    }
    t->kind = kind;
    t->id = id;
    t->parent = p->parent;
    sd_buf_init(&t->fn_payload, 0);
    sd_vec_init(&t->inputs, sizeof(px_kv));
    sd_vec_init(&t->outputs, sizeof(px_kv));
    sd_vec_init(&t->subs, sizeof(char *));
    sd_vec_init(&t->sides, sizeof(px_side));
    sd_vec_init(&t->states, sizeof(px_state));
    sd_vec_init(&t->timers, sizeof(px_timer));
    if (sd_vec_push(&p->transforms, &t) != SD_OK) {
        sd_free(id);
        sd_free(t);
        return oom(p);
    }
    if (sd_map_put_str(&p->ids, id, t) != SD_OK) {
        return oom(p);
    }
    if (t->parent >= 0) {
        px_transform *parent = *SD_VEC_AT(&p->transforms, px_transform *, (size_t)t->parent);
        char *sub = sd_strdup(id);
        if (sub == NULL || sd_vec_push(&parent->subs, &sub) != SD_OK) {
            sd_free(sub);
            return oom(p);
        }
    }
    return t;
}

static bool add_kv(sd_pipeline *p, sd_vec *v, const char *local, const char *pcoll)
{
    px_kv kv = { sd_strdup(local), sd_strdup(pcoll) };
    if (kv.local == NULL || kv.pcoll == NULL || sd_vec_push(v, &kv) != SD_OK) {
        sd_free(kv.local);
        sd_free(kv.pcoll);
        oom(p);
        return false;
    }
    return true;
}

static bool add_input(sd_pipeline *p, px_transform *t, const char *local, const sd_pcoll *in)
{
    return add_kv(p, &t->inputs, local, in->id);
}

static sd_pcoll *add_output(sd_pipeline *p, px_transform *t, const char *local,
                            const sd_coder *coder, size_t windowing)
{
    if (failed(p)) {
        return NULL;
    }
    if (coder == NULL) {
        return fail(p, SD_EINVAL, "transform %s: output %s has no coder", t->id, local);
    }
    sd_pcoll *pc = sd_calloc(1, sizeof(*pc));
    if (pc == NULL) {
        return oom(p);
    }
    pc->p = p;
    pc->coder = coder;
    pc->windowing = windowing;
    pc->unbounded = t->kind == PX_TESTSTREAM || t->sdf_unbounded;
    /* Beam's rule: a transform with an unbounded input has unbounded outputs. */
    for (size_t i = 0; i < t->inputs.len && !pc->unbounded; i++) {
        const px_kv *in = sd_vec_at(&t->inputs, i);
        for (size_t j = 0; j < p->pcolls.len; j++) {
            const sd_pcoll *q = *SD_VEC_AT(&p->pcolls, sd_pcoll *, j);
            if (q->unbounded && strcmp(q->id, in->pcoll) == 0) {
                pc->unbounded = true;
                break;
            }
        }
    }
    pc->id = sd_asprintf("%s.%s", t->id, local);
    if (pc->id == NULL || sd_vec_push(&p->pcolls, &pc) != SD_OK) {
        sd_free(pc->id);
        sd_free(pc);
        return oom(p);
    }
    if (!add_kv(p, &t->outputs, local, pc->id)) {
        return NULL;
    }
    return pc;
}

/* Composite scope: leaves created until end_composite become its subtransforms. */
static long begin_composite(sd_pipeline *p, px_transform *t)
{
    long saved = p->parent;
    for (size_t i = 0; i < p->transforms.len; i++) {
        if (*SD_VEC_AT(&p->transforms, px_transform *, i) == t) {
            p->parent = (long)i;
        }
    }
    return saved;
}

static void end_composite(sd_pipeline *p, px_transform *t, long saved, sd_pcoll *out)
{
    p->parent = saved;
    if (!failed(p) && out != NULL) {
        add_kv(p, &t->outputs, "out", out->id);
    }
}

/* Hooks for the builder's other files (text I/O, typed helpers, collections): a named
 * composite scope, and the pipeline's name. */
long sd__pipeline_begin_composite(sd_pipeline *p, const char *name)
{
    px_transform *t = new_transform(p, name, PX_COMPOSITE);
    return t == NULL ? SD__NO_COMPOSITE : begin_composite(p, t);
}

void sd__pipeline_end_composite(sd_pipeline *p, long saved, sd_pcoll *out)
{
    if (saved == SD__NO_COMPOSITE || failed(p) || p->parent < 0) {
        return;
    }
    px_transform *t = *SD_VEC_AT(&p->transforms, px_transform *, (size_t)p->parent);
    end_composite(p, t, saved, out);
}

long sd__pipeline_runs(const sd_pipeline *p)
{
    return p != NULL ? p->runs : 0;
}

void sd__pipeline_count_run(sd_pipeline *p)
{
    if (p != NULL) {
        p->runs++;
    }
}

const char *sd__pipeline_name(const sd_pipeline *p)
{
    return p != NULL && p->name != NULL ? p->name : "";
}

/* ================================================================ primitives */

sd_pcoll *sd_impulse(sd_pipeline *p, const char *name)
{
    px_transform *t = new_transform(p, name, PX_IMPULSE);
    if (t == NULL) {
        return NULL;
    }
    return add_output(p, t, "out", sd_coder_bytes(p), 0);
}

bool sd__pipeline_add_teststream(sd_pipeline *p, const char *name, const sd_coder *coder,
                                 const char *const *tags, size_t n_tags, const sd_teststream *ext,
                                 sd_pcoll **outs)
{
    px_transform *t = new_transform(p, name, PX_TESTSTREAM);
    if (t == NULL) {
        return false;
    }
    t->elem_coder = coder;
    t->teststream = ext;
    for (size_t i = 0; i < n_tags; i++) {
        if ((outs[i] = add_output(p, t, tags[i], coder, 0)) == NULL) {
            return false;
        }
    }
    return true;
}

sd_pcoll *sd_pardo(sd_pipeline *p, const char *name, sd_pcoll *input, const sd_pardo_spec *spec,
                   sd_pcoll **outputs)
{
    if (!check_inputs(p, "ParDo", &input, 1)) {
        return NULL;
    }
    if (spec == NULL || spec->dofn == NULL) {
        return fail(p, SD_EINVAL, "ParDo %s: no DoFn name", name != NULL ? name : "(null)");
    }
    if (sd__find_dofn(sd_bytes_str(spec->dofn)) == NULL) {
        return fail(p, SD_ENOTFOUND, "ParDo %s: no DoFn registered as \"%s\"", name,
                    spec->dofn);
    }
    size_t n_out = spec->n_outputs == 0 ? 1 : spec->n_outputs;
    for (size_t i = 0; i < spec->n_side_inputs; i++) {
        if (!check_inputs(p, "ParDo side input", &spec->side_inputs[i].pcoll, 1)) {
            return NULL;
        }
        if (spec->side_inputs[i].access == SD_SIDE_AS_MULTIMAP &&
            spec->side_inputs[i].pcoll->coder->kind != SD_CODER_KV) {
            return fail(p, SD_EINVAL, "ParDo %s: multimap side input %zu is not a KV PCollection",
                        name, i);
        }
    }
    const sd_dofn *wfn = sd__find_dofn(sd_bytes_str(spec->dofn));
    bool expiry = wfn != NULL && wfn->on_window_expiration != NULL;
    if ((spec->n_states > 0 || spec->n_timers > 0 || expiry) &&
        input->coder->kind != SD_CODER_KV) {
        return fail(p, SD_EINVAL, "ParDo %s: a stateful DoFn needs a KV input; %s is %s", name,
                    input->id, input->coder->urn);
    }
    for (size_t i = 0; i < spec->n_states; i++) {
        const sd_state_spec *ss = &spec->states[i];
        if (ss->id == NULL || ss->coder == NULL) {
            return fail(p, SD_EINVAL, "ParDo %s: state %zu needs an id and a coder", name, i);
        }
        if (ss->kind == SD_STATE_MAP && ss->key_coder == NULL) {
            return fail(p, SD_EINVAL, "ParDo %s: map state %s needs a key_coder", name, ss->id);
        }
        if (ss->kind == SD_STATE_COMBINING &&
            (ss->combinefn == NULL || sd__find_combinefn(sd_bytes_str(ss->combinefn)) == NULL)) {
            return fail(p, SD_ENOTFOUND, "ParDo %s: combining state %s: no CombineFn registered "
                        "as \"%s\"", name, ss->id, ss->combinefn != NULL ? ss->combinefn : "");
        }
        if (ss->kind < SD_STATE_BAG || ss->kind > SD_STATE_ORDERED_LIST) {
            return fail(p, SD_EINVAL, "ParDo %s: state %s has unknown kind %d", name, ss->id,
                        (int)ss->kind);
        }
    }
    const sd_dofn *fn = sd__find_dofn(sd_bytes_str(spec->dofn));
    bool splittable = fn != NULL && fn->initial_restriction != NULL;
    if (splittable && (spec->n_states > 0 || spec->n_timers > 0)) {
        return fail(p, SD_EINVAL, "ParDo %s: a splittable DoFn cannot also use state or timers",
                    name);
    }
    if (spec->watermark.kind < SD_WM_NONE || spec->watermark.kind > SD_WM_BOUNDED_DELAY) {
        return fail(p, SD_EINVAL, "ParDo %s: unknown watermark estimator kind %d", name,
                    (int)spec->watermark.kind);
    }
    for (size_t i = 0; i < spec->n_timers; i++) {
        if (spec->timers[i].family == NULL || (spec->timers[i].domain != SD_EVENT_TIME &&
                                               spec->timers[i].domain != SD_PROCESSING_TIME)) {
            return fail(p, SD_EINVAL, "ParDo %s: timer %zu needs a family and a time domain",
                        name, i);
        }
    }
    px_transform *t = new_transform(p, name, PX_PARDO);
    if (t == NULL || !add_input(p, t, "main", input)) {
        return NULL;
    }
    for (size_t i = 0; i < spec->n_states && !failed(p); i++) {
        const sd_state_spec *ss = &spec->states[i];
        px_state ps = { sd_strdup(ss->id), ss->kind, ss->coder, ss->key_coder, { 0 } };
        sd_buf_init(&ps.combine, 0);
        if (ps.id == NULL ||
            (ss->kind == SD_STATE_COMBINING &&
             sd__combinefn_payload_encode(&ps.combine, ss->combinefn, ss->combine_config) !=
                 SD_OK) ||
            sd_vec_push(&t->states, &ps) != SD_OK) {
            sd_free(ps.id);
            sd_buf_deinit(&ps.combine);
            return oom(p);
        }
    }
    t->splittable = splittable;
    t->sdf_unbounded = splittable && fn->unbounded_per_element;
    if (expiry) {
        /* OnWindowExpiration runs as firings of a timer family of its own. */
        px_timer pt = { sd_strdup(SD_EXPIRY_FAMILY), SD_EVENT_TIME };
        if (pt.family == NULL || sd_vec_push(&t->timers, &pt) != SD_OK) {
            sd_free(pt.family);
            return oom(p);
        }
        t->expiry = true;
    }
    for (size_t i = 0; i < spec->n_timers && !failed(p); i++) {
        px_timer pt = { sd_strdup(spec->timers[i].family), spec->timers[i].domain };
        if (pt.family == NULL || sd_vec_push(&t->timers, &pt) != SD_OK) {
            sd_free(pt.family);
            return oom(p);
        }
    }
    if (spec->n_states > 0 || spec->n_timers > 0 || expiry) {
        t->key_coder = input->coder->components[0];
        t->in_windowing = input->windowing;
    }
    char tagbuf[32];
    const char *tags[64];
    char *tag_store[64] = { 0 };
    const char *sides[64];
    char *side_store[64] = { 0 };
    if (n_out > 64 || spec->n_side_inputs > 64) {
        return fail(p, SD_EINVAL, "ParDo %s: at most 64 outputs and 64 side inputs", name);
    }
    sd_pcoll *main_out = NULL;
    for (size_t i = 0; i < n_out && !failed(p); i++) {
        if (spec->output_tags != NULL && spec->output_tags[i] != NULL) {
            tags[i] = spec->output_tags[i];
        } else {
            snprintf(tagbuf, sizeof(tagbuf), "out%zu", i);
            tag_store[i] = sd_strdup(tagbuf);
            tags[i] = tag_store[i];
            if (tags[i] == NULL) {
                oom(p);
                break;
            }
        }
        const sd_coder *c = spec->output_coders != NULL && spec->output_coders[i] != NULL
                                ? spec->output_coders[i]
                                : input->coder;
        sd_pcoll *o = add_output(p, t, tags[i], c, input->windowing);
        if (i == 0) {
            main_out = o;
        }
        if (outputs != NULL) {
            outputs[i] = o;
        }
    }
    for (size_t i = 0; i < spec->n_side_inputs && !failed(p); i++) {
        snprintf(tagbuf, sizeof(tagbuf), "side%zu", i);
        side_store[i] = sd_strdup(tagbuf);
        sides[i] = side_store[i];
        px_side s = { sd_strdup(tagbuf), spec->side_inputs[i].access,
                      spec->side_inputs[i].pcoll->windowing };
        if (sides[i] == NULL || s.local == NULL || sd_vec_push(&t->sides, &s) != SD_OK) {
            sd_free(s.local);
            oom(p);
            break;
        }
        add_input(p, t, tagbuf, spec->side_inputs[i].pcoll);
    }
    if (!failed(p) && sd__dofn_payload_encode(&t->fn_payload, spec->dofn, spec->config, tags,
                                              n_out, sides, spec->n_side_inputs) != SD_OK) {
        oom(p);
    }
    if (!failed(p) && splittable && sd__sdf_payload_append(&t->fn_payload, &spec->watermark) !=
                                        SD_OK) {
        oom(p);
    }
    for (size_t i = 0; i < 64; i++) {
        sd_free(tag_store[i]);
        sd_free(side_store[i]);
    }
    return failed(p) ? NULL : main_out;
}

sd_pcoll *sd_apply(sd_pipeline *p, const char *name, sd_pcoll *input, const char *dofn,
                   sd_bytes config, const sd_coder *output_coder)
{
    const sd_coder *coders[1] = { output_coder };
    sd_pardo_spec spec = { .dofn = dofn, .config = config, .n_outputs = 1,
                           .output_coders = coders };
    return sd_pardo(p, name, input, &spec, NULL);
}

/* A ParDo of a built-in DoFn inside the current scope. */
static sd_pcoll *builtin_pardo(sd_pipeline *p, const char *name, sd_pcoll *input,
                               const char *dofn, sd_bytes config, const sd_coder *out)
{
    return sd_apply(p, name, input, dofn, config, out);
}

sd_pcoll *sd_group_by_key(sd_pipeline *p, const char *name, sd_pcoll *input)
{
    if (!check_inputs(p, "GroupByKey", &input, 1)) {
        return NULL;
    }
    if (input->coder->kind != SD_CODER_KV) {
        return fail(p, SD_EINVAL, "GroupByKey %s: input %s must have a KV coder", name,
                    input->id);
    }
    const sd_coder *vals = sd_coder_iterable(p, input->coder->components[1]);
    const sd_coder *out = sd_coder_kv(p, input->coder->components[0], vals);
    px_transform *t = new_transform(p, name, PX_GBK);
    if (t == NULL || !add_input(p, t, "in", input)) {
        return NULL;
    }
    return add_output(p, t, "out", out, input->windowing);
}

sd_pcoll *sd_flatten(sd_pipeline *p, const char *name, sd_pcoll *const *inputs, size_t n)
{
    char local[32];
    if (n == 0) {
        return fail(p, SD_EINVAL, "Flatten %s: no inputs", name != NULL ? name : "(null)");
    }
    if (!check_inputs(p, "Flatten", inputs, n)) {
        return NULL;
    }
    for (size_t i = 1; i < n; i++) {
        if (!sd_coder_equal(inputs[i]->coder, inputs[0]->coder)) {
            return fail(p, SD_EINVAL, "Flatten %s: input %s has a different coder than %s", name,
                        inputs[i]->id, inputs[0]->id);
        }
    }
    px_transform *t = new_transform(p, name, PX_FLATTEN);
    for (size_t i = 0; t != NULL && i < n; i++) {
        snprintf(local, sizeof(local), "in%zu", i);
        if (!add_input(p, t, local, inputs[i])) {
            return NULL;
        }
    }
    return t == NULL ? NULL : add_output(p, t, "out", inputs[0]->coder, inputs[0]->windowing);
}

sd_pcoll *sd_window_into(sd_pipeline *p, const char *name, sd_pcoll *input, const sd_windowfn *fn)
{
    if (!check_inputs(p, "WindowInto", &input, 1)) {
        return NULL;
    }
    if (fn == NULL ||
        (fn->kind == SD_WINDOW_FIXED && fn->size_ms <= 0) ||
        (fn->kind == SD_WINDOW_SLIDING && (fn->size_ms <= 0 || fn->period_ms <= 0)) ||
        (fn->kind == SD_WINDOW_SESSIONS && fn->gap_ms <= 0) || fn->kind > SD_WINDOW_SESSIONS ||
        fn->allowed_lateness_ms < 0) {
        return fail(p, SD_EINVAL,
                    "WindowInto %s: invalid window fn (sizes, periods and gaps must be > 0)",
                    name != NULL ? name : "(null)");
    }
    if (fn->trigger != NULL && !sd__trigger_belongs(fn->trigger, p)) {
        return fail(p, SD_EINVAL, "WindowInto %s: the trigger was built for another pipeline",
                    name != NULL ? name : "(null)");
    }
    if ((unsigned)fn->accumulation > SD_ACCUMULATING_PANES ||
        (unsigned)fn->output_time > SD_OUTPUT_AT_LATEST ||
        (unsigned)fn->closing > SD_CLOSING_FIRE_ALWAYS) {
        return fail(p, SD_EINVAL,
                    "WindowInto %s: accumulation mode %d, output time %d or closing behavior %d "
                    "is not one of the sd_accumulation_mode / sd_output_timestamp / "
                    "sd_closing_behavior values",
                    name != NULL ? name : "(null)", (int)fn->accumulation, (int)fn->output_time,
                    (int)fn->closing);
    }
    /* fn may point into p->windowings itself, which the push can move. */
    sd_windowfn copy = *fn;
    size_t w = p->windowings.len;
    if (sd_vec_push(&p->windowings, &copy) != SD_OK) {
        return oom(p);
    }
    px_transform *t = new_transform(p, name, PX_WINDOW_INTO);
    if (t == NULL || !add_input(p, t, "in", input)) {
        return NULL;
    }
    t->windowing = w;
    return add_output(p, t, "out", input->coder, w);
}

/* ================================================================ composites */

static sd_status put_create_config(sd_buf *b, const sd_bytes *elements, size_t n,
                                   const sd_time *timestamps)
{
    sd_status st = sd_buf_put_varint(b, n);
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        if ((st = sd_buf_put_lp(b, elements[i])) == SD_OK) {
            st = sd_buf_append_byte(b, timestamps != NULL ? 1 : 0);
        }
        if (st == SD_OK && timestamps != NULL) {
            st = sd_coder_put_ts(b, timestamps[i]);
        }
    }
    return st;
}

sd_pcoll *sd_create(sd_pipeline *p, const char *name, const sd_coder *coder,
                    const sd_bytes *elements, size_t n, const sd_time *timestamps)
{
    sd_buf cfg;
    if (failed(p)) {
        return NULL;
    }
    if (coder == NULL || (n > 0 && elements == NULL)) {
        return fail(p, SD_EINVAL, "Create %s: NULL coder or elements",
                    name != NULL ? name : "(null)");
    }
    /* Check every element decodes with the coder now, not in the worker. */
    for (size_t i = 0; i < n; i++) {
        sd_reader r = sd_reader_make(elements[i]);
        sd_err e;
        sd_err_clear(&e);
        if (sd_coder_skip(coder, &r, true, &e) != SD_OK || !sd_reader_done(&r)) {
            return fail(p, SD_EINVAL, "Create %s: element %zu is not one nested value of %s%s%s",
                        name, i, coder->urn, e.code != SD_OK ? ": " : "",
                        e.code != SD_OK ? sd_err_msg(&e) : "");
        }
    }
    px_transform *t = new_transform(p, name, PX_COMPOSITE);
    if (t == NULL) {
        return NULL;
    }
    long saved = begin_composite(p, t);
    sd_pcoll *imp = sd_impulse(p, "Impulse");
    sd_buf_init(&cfg, 0);
    if (put_create_config(&cfg, elements, n, timestamps) != SD_OK) {
        oom(p);
    }
    sd_pcoll *out = builtin_pardo(p, "Elements", imp, SD_FN_CREATE, sd_buf_bytes(&cfg), coder);
    sd_buf_deinit(&cfg);
    end_composite(p, t, saved, out);
    return failed(p) ? NULL : out;
}

/*
 * Create of n scalars (strings or varints, selected by `strings`): encode them into one buffer,
 * slice it into elements and hand them to sd_create.
 */
static sd_pcoll *create_scalars(sd_pipeline *p, const char *name, bool strings,
                                const char *const *svals, const int64_t *ivals, size_t n)
{
    sd_buf all;
    sd_bytes *items;
    size_t *offs;
    sd_pcoll *out = NULL;
    if (failed(p)) {
        return NULL;
    }
    items = sd_calloc(n + 1, sizeof(sd_bytes));
    offs = sd_calloc(n + 1, sizeof(size_t));
    sd_buf_init(&all, 0);
    bool ok = items != NULL && offs != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        offs[i] = all.len;
        ok = (strings ? sd_enc_str(&all, svals[i] != NULL ? svals[i] : "")
                      : sd_enc_int(&all, ivals[i])) == SD_OK;
    }
    if (ok) {
        offs[n] = all.len;
        for (size_t i = 0; i < n; i++) {
            items[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
        }
        out = sd_create(p, name, strings ? sd_coder_string(p) : sd_coder_varint(p), items, n,
                        NULL);
    } else {
        oom(p);
    }
    sd_buf_deinit(&all);
    sd_free(items);
    sd_free(offs);
    return out;
}

sd_pcoll *sd_create_strings(sd_pipeline *p, const char *name, const char *const *strings, size_t n)
{
    return create_scalars(p, name, true, strings, NULL, n);
}

sd_pcoll *sd_create_ints(sd_pipeline *p, const char *name, const int64_t *values, size_t n)
{
    return create_scalars(p, name, false, NULL, values, n);
}

sd_pcoll *sd_combine_per_key(sd_pipeline *p, const char *name, sd_pcoll *input,
                             const char *combinefn, sd_bytes config,
                             const sd_coder *accumulator_coder, const sd_coder *output_coder)
{
    if (!check_inputs(p, "CombinePerKey", &input, 1)) {
        return NULL;
    }
    if (input->coder->kind != SD_CODER_KV) {
        return fail(p, SD_EINVAL, "CombinePerKey %s: input %s must have a KV coder", name,
                    input->id);
    }
    if (combinefn == NULL || sd__find_combinefn(sd_bytes_str(combinefn)) == NULL) {
        return fail(p, SD_ENOTFOUND, "CombinePerKey %s: no CombineFn registered as \"%s\"", name,
                    combinefn != NULL ? combinefn : "(null)");
    }
    if (accumulator_coder == NULL || output_coder == NULL) {
        return fail(p, SD_EINVAL, "CombinePerKey %s: accumulator and output coders are required",
                    name);
    }
    const sd_coder *out_coder = sd_coder_kv(p, input->coder->components[0], output_coder);
    px_transform *t = new_transform(p, name, PX_COMBINE_PER_KEY);
    if (t == NULL || !add_input(p, t, "in", input)) {
        return NULL;
    }
    t->acc_coder = accumulator_coder;
    if (sd__combinefn_payload_encode(&t->fn_payload, combinefn, config) != SD_OK) {
        return oom(p);
    }
    long saved = begin_composite(p, t);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", input);
    px_transform *c = new_transform(p, "Combine", PX_COMBINE_GROUPED);
    sd_pcoll *out = NULL;
    if (c != NULL && grouped != NULL && add_input(p, c, "in", grouped)) {
        c->acc_coder = accumulator_coder;
        if (sd_buf_append_bytes(&c->fn_payload, sd_buf_bytes(&t->fn_payload)) != SD_OK) {
            oom(p);
        }
        out = add_output(p, c, "out", out_coder, input->windowing);
    }
    end_composite(p, t, saved, out);
    return failed(p) ? NULL : out;
}

sd_pcoll *sd_count_per_key(sd_pipeline *p, const char *name, sd_pcoll *input)
{
    const sd_coder *v = sd_coder_varint(p);
    return sd_combine_per_key(p, name, input, SD_COMBINE_COUNT, SD_BYTES_NULL, v, v);
}

/* KV<bytes "", bytes(0x01 ++ element)>, plus a sentinel in the global window when the input is
 * globally windowed (so the group exists even for an empty input), all in the current scope. */
static sd_pcoll *tag_and_sentinel(sd_pipeline *p, sd_pcoll *input)
{
    const sd_coder *b = sd_coder_bytes(p);
    const sd_coder *kvc = sd_coder_kv(p, b, b);
    sd_pcoll *keyed = builtin_pardo(p, "Tag", input, SD_FN_ASSERT_KEY, SD_BYTES_NULL, kvc);
    if (failed(p)) {
        return NULL;
    }
    const sd_windowfn *wf = sd_vec_at(&p->windowings, keyed->windowing);
    if (wf->kind != SD_WINDOW_GLOBAL) {
        return keyed;
    }
    static const uint8_t sentinel[] = { 0x00, 0x01, 0x00 };
    sd_bytes e = sd_bytes_make(sentinel, sizeof(sentinel));
    sd_pcoll *s = sd_create(p, "Sentinel", kvc, &e, 1, NULL);
    sd_pcoll *both[2] = { keyed, s };
    return sd_flatten(p, "WithSentinel", both, 2);
}

sd_pcoll *sd_combine_globally(sd_pipeline *p, const char *name, sd_pcoll *input,
                              const char *combinefn, sd_bytes config,
                              const sd_coder *accumulator_coder, const sd_coder *output_coder)
{
    sd_buf cfg;
    if (!check_inputs(p, "CombineGlobally", &input, 1)) {
        return NULL;
    }
    if (combinefn == NULL || sd__find_combinefn(sd_bytes_str(combinefn)) == NULL) {
        return fail(p, SD_ENOTFOUND, "CombineGlobally %s: no CombineFn registered as \"%s\"",
                    name != NULL ? name : "(null)", combinefn != NULL ? combinefn : "(null)");
    }
    px_transform *t = new_transform(p, name, PX_COMPOSITE);
    if (t == NULL || !add_input(p, t, "in", input)) {
        return NULL;
    }
    long saved = begin_composite(p, t);
    sd_pcoll *tagged = tag_and_sentinel(p, input);
    sd_buf_init(&cfg, 0);
    if (sd_buf_put_lp(&cfg, sd_bytes_str(combinefn)) != SD_OK ||
        sd_buf_put_lp(&cfg, config) != SD_OK) {
        oom(p);
    }
    sd_pcoll *combined = sd_combine_per_key(p, "CombinePerKey", tagged, SD_COMBINE_GLOBAL_WRAP,
                                            sd_buf_bytes(&cfg), accumulator_coder, output_coder);
    sd_buf_deinit(&cfg);
    sd_pcoll *out = builtin_pardo(p, "Unkey", combined, SD_FN_DROP_KEY, SD_BYTES_NULL,
                                  output_coder);
    end_composite(p, t, saved, out);
    return failed(p) ? NULL : out;
}

sd_pcoll *sd_reshuffle(sd_pipeline *p, const char *name, sd_pcoll *input)
{
    if (!check_inputs(p, "Reshuffle", &input, 1)) {
        return NULL;
    }
    px_transform *t = new_transform(p, name, PX_RESHUFFLE);
    if (t == NULL || !add_input(p, t, "in", input)) {
        return NULL;
    }
    long saved = begin_composite(p, t);
    const sd_coder *kvc = sd_coder_kv(p, sd_coder_varint(p), input->coder);
    sd_pcoll *keyed = builtin_pardo(p, "Key", input, SD_FN_RESHUFFLE_KEY, SD_BYTES_NULL, kvc);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", keyed);
    sd_pcoll *out = builtin_pardo(p, "Ungroup", grouped, SD_FN_RESHUFFLE_UNGROUP, SD_BYTES_NULL,
                                  input->coder);
    end_composite(p, t, saved, out);
    return failed(p) ? NULL : out;
}

sd_pcoll *sd_with_timestamps(sd_pipeline *p, const char *name, sd_pcoll *input,
                             const char *timestamp_fn, sd_bytes config)
{
    sd_buf cfg;
    if (failed(p)) {
        return NULL;
    }
    if (timestamp_fn == NULL || sd__find_timestamp_fn(sd_bytes_str(timestamp_fn)) == NULL) {
        return fail(p, SD_ENOTFOUND, "WithTimestamps %s: no timestamp function registered as "
                    "\"%s\"", name != NULL ? name : "(null)",
                    timestamp_fn != NULL ? timestamp_fn : "(null)");
    }
    sd_buf_init(&cfg, 0);
    if (sd_buf_put_lp(&cfg, sd_bytes_str(timestamp_fn)) != SD_OK ||
        sd_buf_put_lp(&cfg, config) != SD_OK) {
        sd_buf_deinit(&cfg);
        return oom(p);
    }
    sd_pcoll *out = builtin_pardo(p, name, input, SD_FN_TIMESTAMP, sd_buf_bytes(&cfg), NULL);
    sd_buf_deinit(&cfg);
    return out;
}

/* ================================================================ assertions */

/*
 * An assertion composite: [Select: the window and panes asked for] -> [Rewindow: into the plain
 * global window, so the gathering GroupByKey fires once, after all input, whatever pc's
 * trigger] -> Tag + Sentinel -> Gather -> Check. mode 0 compares contents, mode 1 the count.
 */
static void add_assertion(sd_pipeline *p, const char *name, sd_pcoll *pc, int mode,
                          const sd_window *window, sd_pane_filter panes,
                          const sd_bytes *expected, size_t n, int64_t count)
{
    sd_buf cfg;
    if (!check_inputs(p, "assertion", &pc, 1)) {
        return;
    }
    if ((unsigned)panes > SD_PANES_FINAL) {
        fail(p, SD_EINVAL, "assertion %s: pane filter %d is not an sd_pane_filter value",
             name != NULL ? name : "(null)", (int)panes);
        return;
    }
    px_transform *t = new_transform(p, name, PX_COMPOSITE);
    if (t == NULL || !add_input(p, t, "in", pc)) {
        return;
    }
    long saved = begin_composite(p, t);
    sd_pcoll *in = pc;
    sd_buf_init(&cfg, 0);
    if ((window != NULL && !window->global) || panes != SD_PANES_ALL) {
        if (sd__pane_select_config(&cfg, window != NULL && !window->global ? window : NULL,
                                   panes) != SD_OK) {
            oom(p);
        }
        in = builtin_pardo(p, "Select", in, SD_FN_ASSERT_PANES, sd_buf_bytes(&cfg), NULL);
        sd_buf_reset(&cfg);
    }
    if (in != NULL && in->windowing != 0) {
        sd_windowfn g = { .kind = SD_WINDOW_GLOBAL };
        in = sd_window_into(p, "Rewindow", in, &g);
    }
    sd_pcoll *tagged = tag_and_sentinel(p, in);
    sd_pcoll *grouped = sd_group_by_key(p, "Gather", tagged);
    sd_status st = sd_buf_put_varint(&cfg, (uint64_t)mode);
    if (st == SD_OK) {
        st = sd_buf_put_lp(&cfg, sd_bytes_str(t->id));
    }
    if (st == SD_OK) {
        st = sd__coder_serialize(pc->coder, &cfg);
    }
    if (st == SD_OK) {
        /* The selection already happened upstream: the checker sees one global window. */
        st = sd_buf_append_byte(&cfg, 0);
    }
    if (st == SD_OK) {
        st = sd_buf_put_varint(&cfg, mode == 1 ? (uint64_t)count : n);
    }
    for (size_t i = 0; mode == 0 && i < n && st == SD_OK; i++) {
        st = sd_buf_put_lp(&cfg, expected[i]);
    }
    if (st != SD_OK) {
        oom(p);
    }
    builtin_pardo(p, "Check", grouped, SD_FN_ASSERT_CHECK, sd_buf_bytes(&cfg),
                  sd_coder_bytes(p));
    sd_buf_deinit(&cfg);
    p->parent = saved;
}

void sd_assert_contains_exactly(sd_pipeline *p, const char *name, sd_pcoll *pc,
                                const sd_bytes *expected, size_t n)
{
    add_assertion(p, name, pc, 0, NULL, SD_PANES_ALL, expected, n, 0);
}

void sd_assert_in_window(sd_pipeline *p, const char *name, sd_pcoll *pc, const sd_window *w,
                         const sd_bytes *expected, size_t n)
{
    add_assertion(p, name, pc, 0, w, SD_PANES_ALL, expected, n, 0);
}

void sd_assert_in_pane(sd_pipeline *p, const char *name, sd_pcoll *pc, const sd_window *w,
                       sd_pane_filter panes, const sd_bytes *expected, size_t n)
{
    add_assertion(p, name, pc, 0, w, panes, expected, n, 0);
}

void sd_assert_count(sd_pipeline *p, const char *name, sd_pcoll *pc, int64_t n)
{
    add_assertion(p, name, pc, 1, NULL, SD_PANES_ALL, NULL, 0, n);
}

void sd_assert_count_in_pane(sd_pipeline *p, const char *name, sd_pcoll *pc, const sd_window *w,
                             sd_pane_filter panes, int64_t n)
{
    add_assertion(p, name, pc, 1, w, panes, NULL, 0, n);
}

void sd_assert_empty(sd_pipeline *p, const char *name, sd_pcoll *pc)
{
    add_assertion(p, name, pc, 1, NULL, SD_PANES_ALL, NULL, 0, 0);
}

void sd_assert_strings(sd_pipeline *p, const char *name, sd_pcoll *pc, const char *const *expected,
                       size_t n)
{
    sd_assert_strings_in_pane(p, name, pc, NULL, SD_PANES_ALL, expected, n);
}

void sd_assert_strings_in_pane(sd_pipeline *p, const char *name, sd_pcoll *pc, const sd_window *w,
                               sd_pane_filter panes, const char *const *expected, size_t n)
{
    sd_buf all;
    size_t *offs = sd_calloc(n + 1, sizeof(size_t));
    sd_bytes *items = sd_calloc(n + 1, sizeof(sd_bytes));
    sd_buf_init(&all, 0);
    bool ok = offs != NULL && items != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        offs[i] = all.len;
        ok = sd_enc_str(&all, expected[i]) == SD_OK;
    }
    if (ok) {
        offs[n] = all.len;
        for (size_t i = 0; i < n; i++) {
            items[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
        }
        add_assertion(p, name, pc, 0, w, panes, items, n, 0);
    } else {
        oom(p);
    }
    sd_buf_deinit(&all);
    sd_free(offs);
    sd_free(items);
}

/* ================================================================ proto translation */

typedef struct build_ctx {
    sd_pipeline *p;
    sd_arena *a;
    sd_coder *gw; /* window coders */
    sd_coder *iw;
    sd_vec temps; /* sd_coder * built during translation, freed at the end */
    bool stateful;
    bool splittable;
    bool expiry;
    const sd_coder *restriction; /* the SDF restriction coder (coder_id dedups by value) */
    sd_vec coder_ids; /* const sd_coder * in id order: "c<i>" */
    pb_Pipeline *pl;
} build_ctx;

#define PBNEW(bc, type, desc) ((type *)sd__pb_new((bc)->a, &(desc)))
#define PL_DESC(x) org__apache__beam__model__pipeline__v1__##x##__descriptor

typedef SD_PL(FunctionSpec) pb_FunctionSpec;
typedef SD_PL(Components) pb_Components;
typedef SD_PL(PTransform) pb_PTransform;
typedef SD_PL(PCollection) pb_PCollection;
typedef SD_PL(Coder) pb_Coder;
typedef SD_PL(WindowingStrategy) pb_WindowingStrategy;

/* The id of a coder, registering it (and its components) on first sight. */
static const char *coder_id_at(build_ctx *bc, const sd_coder *c)
{
    for (size_t i = 0; i < bc->coder_ids.len; i++) {
        if (sd_coder_equal(*SD_VEC_AT(&bc->coder_ids, const sd_coder *, i), c)) {
            return sd_arena_printf(bc->a, "c%zu", i);
        }
    }
    const char **kids = NULL;
    if (c->n_components > 0) {
        kids = sd_arena_alloc(bc->a, c->n_components * sizeof(char *));
        if (kids == NULL) {
            return NULL;
        }
        for (size_t i = 0; i < c->n_components; i++) {
            if ((kids[i] = coder_id_at(bc, c->components[i])) == NULL) {
                return NULL;
            }
        }
    }
    size_t idx = bc->coder_ids.len;
    if (sd_vec_push(&bc->coder_ids, &c) != SD_OK) {
        return NULL;
    }
    char *id = sd_arena_printf(bc->a, "c%zu", idx);
    pb_Coder *pc = PBNEW(bc, pb_Coder, PL_DESC(coder));
    pb_FunctionSpec *fs = PBNEW(bc, pb_FunctionSpec, PL_DESC(function_spec));
    SD_PL(Components__CodersEntry) *e =
        PBNEW(bc, SD_PL(Components__CodersEntry), PL_DESC(components__coders_entry));
    if (id == NULL || pc == NULL || fs == NULL || e == NULL) {
        return NULL;
    }
    fs->urn = sd_arena_strdup(bc->a, c->urn);
    fs->payload.len = c->payload.len;
    fs->payload.data = sd_arena_memdup(bc->a, c->payload.ptr, c->payload.len);
    pc->spec = fs;
    pc->n_component_coder_ids = c->n_components;
    pc->component_coder_ids = (char **)kids;
    e->key = id;
    e->value = pc;
    pb_Components *comp = bc->pl->components;
    SD_PL(Components__CodersEntry) **grown =
        sd_arena_alloc(bc->a, (comp->n_coders + 1) * sizeof(*grown));
    if (grown == NULL) {
        return NULL;
    }
    if (comp->n_coders > 0) {
        memcpy(grown, comp->coders, comp->n_coders * sizeof(*grown));
    }
    grown[comp->n_coders++] = e;
    comp->coders = grown;
    return id;
}

/* Any failure marks the arena, so the build reports SD_ENOMEM at the end. */
static const char *coder_id(build_ctx *bc, const sd_coder *c)
{
    const char *id = coder_id_at(bc, c);
    if (id == NULL) {
        bc->a->failed = true;
    }
    return id;
}

static pb_FunctionSpec *spec(build_ctx *bc, const char *urn, sd_bytes payload)
{
    pb_FunctionSpec *fs = PBNEW(bc, pb_FunctionSpec, PL_DESC(function_spec));
    if (fs != NULL) {
        fs->urn = sd_arena_strdup(bc->a, urn);
        fs->payload.len = payload.len;
        fs->payload.data = sd_arena_memdup(bc->a, payload.ptr, payload.len);
    }
    return fs;
}

static Google__Protobuf__Duration *duration(build_ctx *bc, int64_t ms)
{
    Google__Protobuf__Duration *d =
        PBNEW(bc, Google__Protobuf__Duration, google__protobuf__duration__descriptor);
    if (d != NULL) {
        d->seconds = ms / 1000;
        d->nanos = (int32_t)((ms % 1000) * 1000000);
    }
    return d;
}

static Google__Protobuf__Timestamp *timestamp(build_ctx *bc, int64_t ms)
{
    Google__Protobuf__Timestamp *t =
        PBNEW(bc, Google__Protobuf__Timestamp, google__protobuf__timestamp__descriptor);
    if (t != NULL) {
        t->seconds = ms / 1000;
        t->nanos = (int32_t)((ms % 1000) * 1000000);
    }
    return t;
}

/* The window fn as a FunctionSpec with its standard payload. */
static pb_FunctionSpec *window_fn_spec(build_ctx *bc, const sd_windowfn *wf)
{
    sd_buf packed;
    pb_FunctionSpec *fs = NULL;
    size_t n;
    sd_buf_init(&packed, 0);
    switch (wf->kind) {
    case SD_WINDOW_FIXED: {
        SD_PL(FixedWindowsPayload) m = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__FIXED_WINDOWS_PAYLOAD__INIT;
        m.size = duration(bc, wf->size_ms);
        m.offset = timestamp(bc, wf->offset_ms);
        n = protobuf_c_message_get_packed_size(&m.base);
        if (sd_buf_reserve(&packed, n) == SD_OK) {
            packed.len = protobuf_c_message_pack(&m.base, packed.data);
            fs = spec(bc, SD_URN_WINDOW_FN_FIXED, sd_buf_bytes(&packed));
        }
        break;
    }
    case SD_WINDOW_SLIDING: {
        SD_PL(SlidingWindowsPayload) m =
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__SLIDING_WINDOWS_PAYLOAD__INIT;
        m.size = duration(bc, wf->size_ms);
        m.period = duration(bc, wf->period_ms);
        m.offset = timestamp(bc, wf->offset_ms);
        n = protobuf_c_message_get_packed_size(&m.base);
        if (sd_buf_reserve(&packed, n) == SD_OK) {
            packed.len = protobuf_c_message_pack(&m.base, packed.data);
            fs = spec(bc, SD_URN_WINDOW_FN_SLIDING, sd_buf_bytes(&packed));
        }
        break;
    }
    case SD_WINDOW_SESSIONS: {
        SD_PL(SessionWindowsPayload) m =
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__SESSION_WINDOWS_PAYLOAD__INIT;
        m.gap_size = duration(bc, wf->gap_ms);
        n = protobuf_c_message_get_packed_size(&m.base);
        if (sd_buf_reserve(&packed, n) == SD_OK) {
            packed.len = protobuf_c_message_pack(&m.base, packed.data);
            fs = spec(bc, SD_URN_WINDOW_FN_SESSION, sd_buf_bytes(&packed));
        }
        break;
    }
    default:
        fs = spec(bc, SD_URN_WINDOW_FN_GLOBAL, SD_BYTES_NULL);
        break;
    }
    sd_buf_deinit(&packed);
    if (fs == NULL) {
        /* Callers store the result unchecked; the build then fails as out of memory. */
        bc->a->failed = true;
    }
    return fs;
}

/* Pack a message into the arena as bytes. */
static bool pack_into(build_ctx *bc, const ProtobufCMessage *m, ProtobufCBinaryData *out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    out->data = sd_arena_alloc(bc->a, n);
    if (out->data == NULL) {
        return false;
    }
    out->len = protobuf_c_message_pack(m, out->data);
    return true;
}

static bool fill_kvs(build_ctx *bc, const sd_vec *kvs, size_t *n_out, void ***out, bool inputs)
{
    *n_out = kvs->len;
    if (kvs->len == 0) {
        *out = NULL;
        return true;
    }
    void **arr = sd_arena_alloc(bc->a, kvs->len * sizeof(void *));
    if (arr == NULL) {
        return false;
    }
    for (size_t i = 0; i < kvs->len; i++) {
        const px_kv *kv = sd_vec_at(kvs, i);
        SD_PL(PTransform__InputsEntry) *e =
            inputs ? PBNEW(bc, SD_PL(PTransform__InputsEntry), PL_DESC(ptransform__inputs_entry))
                   : (SD_PL(PTransform__InputsEntry) *)PBNEW(
                         bc, SD_PL(PTransform__OutputsEntry), PL_DESC(ptransform__outputs_entry));
        if (e == NULL) {
            return false;
        }
        e->key = sd_arena_strdup(bc->a, kv->local);
        e->value = sd_arena_strdup(bc->a, kv->pcoll);
        arr[i] = e;
    }
    *out = arr;
    return true;
}

static sd_status build_transform(build_ctx *bc, const px_transform *t, pb_PTransform *pt,
                                 sd_err *err)
{
    sd_pipeline *p = bc->p;
    pt->unique_name = sd_arena_strdup(bc->a, t->id);
    if (!fill_kvs(bc, &t->inputs, &pt->n_inputs, (void ***)&pt->inputs, true) ||
        !fill_kvs(bc, &t->outputs, &pt->n_outputs, (void ***)&pt->outputs, false)) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (t->subs.len > 0) {
        pt->n_subtransforms = t->subs.len;
        pt->subtransforms = sd_arena_alloc(bc->a, t->subs.len * sizeof(char *));
        if (pt->subtransforms == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < t->subs.len; i++) {
            pt->subtransforms[i] = sd_arena_strdup(bc->a, *SD_VEC_AT(&t->subs, char *, i));
        }
    }
    switch (t->kind) {
    case PX_COMPOSITE:
        break;
    case PX_IMPULSE:
        pt->spec = spec(bc, SD_URN_TRANSFORM_IMPULSE, SD_BYTES_NULL);
        break;
    case PX_GBK:
        pt->spec = spec(bc, SD_URN_TRANSFORM_GROUP_BY_KEY, SD_BYTES_NULL);
        break;
    case PX_FLATTEN:
        pt->spec = spec(bc, SD_URN_TRANSFORM_FLATTEN, SD_BYTES_NULL);
        break;
    case PX_RESHUFFLE:
        pt->spec = spec(bc, SD_URN_TRANSFORM_RESHUFFLE, SD_BYTES_NULL);
        break;
    case PX_TESTSTREAM: {
        const char *cid = coder_id(bc, t->elem_coder);
        pt->spec = spec(bc, SD_URN_TRANSFORM_TEST_STREAM, SD_BYTES_NULL);
        if (cid == NULL || pt->spec == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        sd_status st = sd__teststream_payload(t->teststream, cid, bc->a, &pt->spec->payload);
        if (st != SD_OK) {
            return sd_err_set(err, st, "TestStream %s: cannot build its payload", t->id);
        }
        break;
    }
    case PX_WINDOW_INTO: {
        SD_PL(WindowIntoPayload) *m = PBNEW(bc, SD_PL(WindowIntoPayload),
                                            PL_DESC(window_into_payload));
        if (m == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        m->window_fn = window_fn_spec(bc, sd_vec_at(&p->windowings, t->windowing));
        pt->spec = spec(bc, SD_URN_TRANSFORM_WINDOW_INTO, SD_BYTES_NULL);
        if (pt->spec == NULL || !pack_into(bc, &m->base, &pt->spec->payload)) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        pt->environment_id = "env";
        break;
    }
    case PX_COMBINE_PER_KEY:
    case PX_COMBINE_GROUPED: {
        SD_PL(CombinePayload) *m = PBNEW(bc, SD_PL(CombinePayload), PL_DESC(combine_payload));
        if (m == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        m->combine_fn = spec(bc, SD_URN_COMBINEFN_C, sd_buf_bytes(&t->fn_payload));
        m->accumulator_coder_id = (char *)coder_id(bc, t->acc_coder);
        pt->spec = spec(bc, t->kind == PX_COMBINE_PER_KEY ? SD_URN_TRANSFORM_COMBINE_PER_KEY
                                                          : SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES,
                        SD_BYTES_NULL);
        if (m->combine_fn == NULL || m->accumulator_coder_id == NULL || pt->spec == NULL ||
            !pack_into(bc, &m->base, &pt->spec->payload)) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        pt->environment_id = "env";
        break;
    }
    case PX_PARDO: {
        SD_PL(ParDoPayload) *m = PBNEW(bc, SD_PL(ParDoPayload), PL_DESC(par_do_payload));
        if (m == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        m->do_fn = spec(bc, SD_URN_DOFN_C, sd_buf_bytes(&t->fn_payload));
        if (t->sides.len > 0) {
            m->n_side_inputs = t->sides.len;
            m->side_inputs = sd_arena_alloc(bc->a, t->sides.len * sizeof(void *));
            if (m->side_inputs == NULL) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
            for (size_t i = 0; i < t->sides.len; i++) {
                const px_side *s = sd_vec_at(&t->sides, i);
                const sd_windowfn *wf = sd_vec_at(&p->windowings, s->windowing);
                SD_PL(ParDoPayload__SideInputsEntry) *e = PBNEW(
                    bc, SD_PL(ParDoPayload__SideInputsEntry), PL_DESC(par_do_payload__side_inputs_entry));
                SD_PL(SideInput) *si = PBNEW(bc, SD_PL(SideInput), PL_DESC(side_input));
                if (e == NULL || si == NULL) {
                    return sd_err_set(err, SD_ENOMEM, "out of memory");
                }
                si->access_pattern =
                    spec(bc, s->access == SD_SIDE_AS_MULTIMAP ? SD_URN_SIDE_INPUT_MULTIMAP
                                                             : SD_URN_SIDE_INPUT_ITERABLE,
                         SD_BYTES_NULL);
                si->view_fn = spec(bc, "beam:view_fn:sundial_c:v1", SD_BYTES_NULL);
                si->window_mapping_fn =
                    spec(bc, wf->kind == SD_WINDOW_GLOBAL ? SD_URN_WINDOW_MAPPING_GLOBAL
                                                          : SD_URN_WINDOW_MAPPING_IDENTITY,
                         SD_BYTES_NULL);
                e->key = sd_arena_strdup(bc->a, s->local);
                e->value = si;
                m->side_inputs[i] = e;
            }
        }
        if (t->states.len > 0) {
            m->n_state_specs = t->states.len;
            m->state_specs = sd_arena_alloc(bc->a, t->states.len * sizeof(void *));
            if (m->state_specs == NULL) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
            for (size_t i = 0; i < t->states.len; i++) {
                const px_state *ps = sd_vec_at(&t->states, i);
                SD_PL(ParDoPayload__StateSpecsEntry) *e = PBNEW(
                    bc, SD_PL(ParDoPayload__StateSpecsEntry), PL_DESC(par_do_payload__state_specs_entry));
                SD_PL(StateSpec) *ss = PBNEW(bc, SD_PL(StateSpec), PL_DESC(state_spec));
                if (e == NULL || ss == NULL) {
                    return sd_err_set(err, SD_ENOMEM, "out of memory");
                }
                ss->protocol = spec(bc, ps->kind == SD_STATE_MAP ? SD_URN_USER_STATE_MULTIMAP
                                        : ps->kind == SD_STATE_ORDERED_LIST
                                            ? SD_URN_USER_STATE_ORDERED_LIST
                                            : SD_URN_USER_STATE_BAG,
                                    SD_BYTES_NULL);
                if (ps->kind == SD_STATE_COMBINING) {
                    SD_PL(CombiningStateSpec) *cs = PBNEW(
                        bc, SD_PL(CombiningStateSpec), PL_DESC(combining_state_spec));
                    if (cs == NULL) {
                        return sd_err_set(err, SD_ENOMEM, "out of memory");
                    }
                    cs->accumulator_coder_id = (char *)coder_id(bc, ps->coder);
                    cs->combine_fn = spec(bc, SD_URN_COMBINEFN_C, sd_buf_bytes(&ps->combine));
                    ss->spec_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_COMBINING_SPEC;
                    ss->combining_spec = cs;
                } else if (ps->kind == SD_STATE_MAP) {
                    SD_PL(MapStateSpec) *ms = PBNEW(bc, SD_PL(MapStateSpec), PL_DESC(map_state_spec));
                    if (ms == NULL) {
                        return sd_err_set(err, SD_ENOMEM, "out of memory");
                    }
                    ms->key_coder_id = (char *)coder_id(bc, ps->key_coder);
                    ms->value_coder_id = (char *)coder_id(bc, ps->coder);
                    ss->spec_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_MAP_SPEC;
                    ss->map_spec = ms;
                } else if (ps->kind == SD_STATE_ORDERED_LIST) {
                    SD_PL(OrderedListStateSpec) *ols = PBNEW(
                        bc, SD_PL(OrderedListStateSpec), PL_DESC(ordered_list_state_spec));
                    if (ols == NULL) {
                        return sd_err_set(err, SD_ENOMEM, "out of memory");
                    }
                    ols->element_coder_id = (char *)coder_id(bc, ps->coder);
                    ss->spec_case =
                        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_ORDERED_LIST_SPEC;
                    ss->ordered_list_spec = ols;
                } else if (ps->kind == SD_STATE_VALUE) {
                    SD_PL(ReadModifyWriteStateSpec) *rmw = PBNEW(
                        bc, SD_PL(ReadModifyWriteStateSpec), PL_DESC(read_modify_write_state_spec));
                    if (rmw == NULL) {
                        return sd_err_set(err, SD_ENOMEM, "out of memory");
                    }
                    rmw->coder_id = (char *)coder_id(bc, ps->coder);
                    ss->spec_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_READ_MODIFY_WRITE_SPEC;
                    ss->read_modify_write_spec = rmw;
                } else {
                    SD_PL(BagStateSpec) *bag = PBNEW(bc, SD_PL(BagStateSpec), PL_DESC(bag_state_spec));
                    if (bag == NULL) {
                        return sd_err_set(err, SD_ENOMEM, "out of memory");
                    }
                    bag->element_coder_id = (char *)coder_id(bc, ps->coder);
                    ss->spec_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_BAG_SPEC;
                    ss->bag_spec = bag;
                }
                e->key = sd_arena_strdup(bc->a, ps->id);
                e->value = ss;
                m->state_specs[i] = e;
            }
            bc->stateful = true;
        }
        if (t->timers.len > 0) {
            const sd_windowfn *wf = sd_vec_at(&p->windowings, t->in_windowing);
            sd_coder *tc = NULL;
            if (sd_coder_new(&tc, err, SD_CODER_TIMER, t->key_coder,
                             wf->kind == SD_WINDOW_GLOBAL ? bc->gw : bc->iw, NULL) != SD_OK) {
                return err != NULL ? err->code : SD_ENOMEM;
            }
            /* coder_id remembers the pointer for deduplication: keep tc until the end. */
            if (sd_vec_push(&bc->temps, &tc) != SD_OK) {
                sd_coder_destroy(tc);
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
            const char *tc_id = coder_id(bc, tc);
            m->n_timer_family_specs = t->timers.len;
            m->timer_family_specs = sd_arena_alloc(bc->a, t->timers.len * sizeof(void *));
            if (m->timer_family_specs == NULL || tc_id == NULL) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
            for (size_t i = 0; i < t->timers.len; i++) {
                const px_timer *tm = sd_vec_at(&t->timers, i);
                SD_PL(ParDoPayload__TimerFamilySpecsEntry) *e =
                    PBNEW(bc, SD_PL(ParDoPayload__TimerFamilySpecsEntry),
                          PL_DESC(par_do_payload__timer_family_specs_entry));
                SD_PL(TimerFamilySpec) *ts = PBNEW(bc, SD_PL(TimerFamilySpec),
                                                   PL_DESC(timer_family_spec));
                if (e == NULL || ts == NULL) {
                    return sd_err_set(err, SD_ENOMEM, "out of memory");
                }
                ts->time_domain = (SD_PL(TimeDomain__Enum))tm->domain;
                ts->timer_family_coder_id = (char *)tc_id;
                e->key = sd_arena_strdup(bc->a, tm->family);
                e->value = ts;
                m->timer_family_specs[i] = e;
            }
            bc->stateful = true;
        }
        if (t->expiry) {
            m->on_window_expiration_timer_family_spec = SD_EXPIRY_FAMILY;
            bc->expiry = true;
        }
        if (t->splittable) {
            /* KV<KV<varint from, varint to>, varint watermark state> (sdf_int.h). */
            if (bc->restriction == NULL) {
                sd_coder *v = NULL, *range = NULL, *r = NULL;
                sd_status rs = sd_coder_new(&v, err, SD_CODER_VARINT, NULL);
                if (rs == SD_OK) {
                    rs = sd_coder_new(&range, err, SD_CODER_KV, v, v, NULL);
                }
                if (rs == SD_OK) {
                    rs = sd_coder_new(&r, err, SD_CODER_KV, range, v, NULL);
                }
                sd_coder_destroy(v);
                sd_coder_destroy(range);
                if (rs == SD_OK && sd_vec_push(&bc->temps, &r) != SD_OK) {
                    sd_coder_destroy(r);
                    rs = sd_err_set(err, SD_ENOMEM, "out of memory");
                }
                if (rs != SD_OK) {
                    return rs;
                }
                bc->restriction = r;
            }
            m->restriction_coder_id = (char *)coder_id(bc, bc->restriction);
            bc->splittable = true;
        }
        pt->spec = spec(bc, SD_URN_TRANSFORM_PARDO, SD_BYTES_NULL);
        if (m->do_fn == NULL || pt->spec == NULL || !pack_into(bc, &m->base, &pt->spec->payload)) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        pt->environment_id = "env";
        break;
    }
    }
    if (bc->a->failed) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    return SD_OK;
}

static pb_WindowingStrategy *build_windowing(build_ctx *bc, const sd_windowfn *wf,
                                             const char *global_coder, const char *interval_coder)
{
    pb_WindowingStrategy *ws = PBNEW(bc, pb_WindowingStrategy, PL_DESC(windowing_strategy));
    SD_PL(Trigger) *tr = sd__trigger_proto(bc->a, wf->trigger);
    if (ws == NULL || tr == NULL) {
        return NULL;
    }
    ws->window_fn = window_fn_spec(bc, wf);
    ws->merge_status = wf->kind == SD_WINDOW_SESSIONS
                           ? ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NEEDS_MERGE
                           : ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NON_MERGING;
    ws->window_coder_id = (char *)(wf->kind == SD_WINDOW_GLOBAL ? global_coder : interval_coder);
    ws->trigger = tr;
    ws->accumulation_mode =
        wf->accumulation == SD_ACCUMULATING_PANES
            ? ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__ACCUMULATING
            : ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__DISCARDING;
    ws->output_time =
        wf->output_time == SD_OUTPUT_AT_EARLIEST
            ? ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__EARLIEST_IN_PANE
        : wf->output_time == SD_OUTPUT_AT_LATEST
            ? ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__LATEST_IN_PANE
            : ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW;
    /* Always explicit, so no runner has to guess what UNSPECIFIED means. */
    ws->closing_behavior =
        wf->closing == SD_CLOSING_FIRE_ALWAYS
            ? ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_ALWAYS
            : ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_IF_NONEMPTY;
    /* Beam's default, and what Sundial's engine does: the ON_TIME pane fires even if empty. */
    ws->on_time_behavior = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ON_TIME_BEHAVIOR__ENUM__FIRE_ALWAYS;
    ws->allowed_lateness = wf->allowed_lateness_ms;
    ws->assigns_to_one_window = wf->kind == SD_WINDOW_GLOBAL || wf->kind == SD_WINDOW_FIXED;
    return ws;
}

/* URNs the C worker executes or understands, listed as the environment's capabilities. */
static const char *const g_capabilities[] = {
    SD_URN_CODER_BYTES,
    SD_URN_CODER_STRING_UTF8,
    SD_URN_CODER_KV,
    SD_URN_CODER_BOOL,
    SD_URN_CODER_VARINT,
    SD_URN_CODER_DOUBLE,
    SD_URN_CODER_ITERABLE,
    SD_URN_CODER_TIMER,
    SD_URN_CODER_INTERVAL_WINDOW,
    SD_URN_CODER_LENGTH_PREFIX,
    SD_URN_CODER_GLOBAL_WINDOW,
    SD_URN_CODER_WINDOWED_VALUE,
    SD_URN_CODER_PARAM_WINDOWED_VALUE,
    SD_URN_CODER_NULLABLE,
    SD_URN_PROTOCOL_PROGRESS_REPORTING,
    SD_URN_PROTOCOL_WORKER_STATUS,
    SD_URN_TRANSFORM_WINDOW_INTO,
    SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE,
    SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS,
    SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS,
    SD_URN_TRANSFORM_COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS,
    SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES,
    SD_URN_TRANSFORM_FLATTEN,
};

sd_status sd__pipeline_build(sd_pipeline *p, sd_arena *a, const char *env_urn,
                             sd_bytes env_payload, pb_Pipeline **out, sd_err *err)
{
    build_ctx bc;
    sd_status st = SD_OK;
    if (p == NULL || p->magic != PX_MAGIC) {
        return sd_err_set(err, SD_EINVAL, "sd_pipeline: NULL or destroyed pipeline");
    }
    if (p->err.code != SD_OK) {
        return sd_err_set(err, p->err.code, "pipeline %s: %s", p->name, sd_err_msg(&p->err));
    }
    memset(&bc, 0, sizeof(bc));
    bc.p = p;
    bc.a = a;
    sd_vec_init(&bc.coder_ids, sizeof(const sd_coder *));
    sd_vec_init(&bc.temps, sizeof(sd_coder *));
    bc.pl = PBNEW(&bc, pb_Pipeline, PL_DESC(pipeline));
    pb_Components *comp = PBNEW(&bc, pb_Components, PL_DESC(components));
    if (bc.pl == NULL || comp == NULL) {
        sd_vec_deinit(&bc.coder_ids);
        sd_vec_deinit(&bc.temps);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    bc.pl->components = comp;

    /* Window coders first, so windowing strategies can name them. */
    sd_coder *gw = NULL, *iw = NULL;
    const char *gw_id = NULL, *iw_id = NULL;
    if (sd_coder_new(&gw, err, SD_CODER_GLOBAL_WINDOW, NULL) != SD_OK ||
        sd_coder_new(&iw, err, SD_CODER_INTERVAL_WINDOW, NULL) != SD_OK) {
        st = err != NULL ? err->code : SD_ENOMEM;
        goto done;
    }
    bc.gw = gw;
    bc.iw = iw;
    gw_id = coder_id(&bc, gw);
    iw_id = coder_id(&bc, iw);

    /* Transforms. */
    comp->n_transforms = p->transforms.len;
    comp->transforms = sd_arena_alloc(a, (p->transforms.len + 1) * sizeof(void *));
    size_t n_roots = 0;
    bc.pl->root_transform_ids = sd_arena_alloc(a, (p->transforms.len + 1) * sizeof(char *));
    if (comp->transforms == NULL || bc.pl->root_transform_ids == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p->transforms.len && st == SD_OK; i++) {
        const px_transform *t = *SD_VEC_AT(&p->transforms, px_transform *, i);
        SD_PL(Components__TransformsEntry) *e = PBNEW(&bc, SD_PL(Components__TransformsEntry),
                                                      PL_DESC(components__transforms_entry));
        pb_PTransform *pt = PBNEW(&bc, pb_PTransform, PL_DESC(ptransform));
        if (e == NULL || pt == NULL) {
            st = sd_err_set(err, SD_ENOMEM, "out of memory");
            break;
        }
        st = build_transform(&bc, t, pt, err);
        e->key = sd_arena_strdup(a, t->id);
        e->value = pt;
        comp->transforms[i] = e;
        if (t->parent < 0) {
            bc.pl->root_transform_ids[n_roots++] = e->key;
        }
    }
    bc.pl->n_root_transform_ids = n_roots;
    if (st != SD_OK) {
        goto done;
    }

    /* PCollections. */
    comp->n_pcollections = p->pcolls.len;
    comp->pcollections = sd_arena_alloc(a, (p->pcolls.len + 1) * sizeof(void *));
    if (comp->pcollections == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p->pcolls.len; i++) {
        const sd_pcoll *pc = *SD_VEC_AT(&p->pcolls, sd_pcoll *, i);
        SD_PL(Components__PcollectionsEntry) *e = PBNEW(
            &bc, SD_PL(Components__PcollectionsEntry), PL_DESC(components__pcollections_entry));
        pb_PCollection *m = PBNEW(&bc, pb_PCollection, PL_DESC(pcollection));
        if (e == NULL || m == NULL) {
            st = sd_err_set(err, SD_ENOMEM, "out of memory");
            goto done;
        }
        m->unique_name = sd_arena_strdup(a, pc->id);
        m->coder_id = (char *)coder_id(&bc, pc->coder);
        m->is_bounded = pc->unbounded
                            ? ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__UNBOUNDED
                            : ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__BOUNDED;
        m->windowing_strategy_id = sd_arena_printf(a, "w%zu", pc->windowing);
        e->key = m->unique_name;
        e->value = m;
        comp->pcollections[i] = e;
    }

    /* Windowing strategies. */
    comp->n_windowing_strategies = p->windowings.len;
    comp->windowing_strategies = sd_arena_alloc(a, p->windowings.len * sizeof(void *));
    if (comp->windowing_strategies == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p->windowings.len; i++) {
        SD_PL(Components__WindowingStrategiesEntry) *e =
            PBNEW(&bc, SD_PL(Components__WindowingStrategiesEntry),
                  PL_DESC(components__windowing_strategies_entry));
        if (e == NULL) {
            st = sd_err_set(err, SD_ENOMEM, "out of memory");
            goto done;
        }
        e->key = sd_arena_printf(a, "w%zu", i);
        e->value = build_windowing(&bc, sd_vec_at(&p->windowings, i), gw_id, iw_id);
        comp->windowing_strategies[i] = e;
    }

    /* The environment. */
    SD_PL(Components__EnvironmentsEntry) *ee = PBNEW(&bc, SD_PL(Components__EnvironmentsEntry),
                                                     PL_DESC(components__environments_entry));
    pb_Environment *env = PBNEW(&bc, pb_Environment, PL_DESC(environment));
    if (ee == NULL || env == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
        goto done;
    }
    env->urn = sd_arena_strdup(a, env_urn != NULL ? env_urn : SD_URN_ENV_EXTERNAL);
    env->payload.len = env_payload.len;
    env->payload.data = sd_arena_memdup(a, env_payload.ptr, env_payload.len);
    env->n_capabilities = sizeof(g_capabilities) / sizeof(g_capabilities[0]);
    env->capabilities = (char **)g_capabilities;
    ee->key = "env";
    ee->value = env;
    comp->n_environments = 1;
    comp->environments = sd_arena_alloc(a, sizeof(void *));
    if (comp->environments == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
        goto done;
    }
    comp->environments[0] = ee;
    char *reqs[3];
    size_t n_reqs = 0;
    if (bc.stateful) {
        reqs[n_reqs++] = SD_URN_REQUIREMENT_STATEFUL_PROCESSING;
    }
    if (bc.splittable) {
        reqs[n_reqs++] = SD_URN_REQUIREMENT_SPLITTABLE_DOFN;
    }
    if (bc.expiry) {
        reqs[n_reqs++] = SD_URN_REQUIREMENT_ON_WINDOW_EXPIRATION;
    }
    if (n_reqs > 0) {
        char **r = sd_arena_alloc(a, n_reqs * sizeof(char *));
        if (r != NULL) {
            memcpy(r, reqs, n_reqs * sizeof(char *));
            bc.pl->n_requirements = n_reqs;
            bc.pl->requirements = r;
        }
    }
    if (a->failed) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
done:
    sd_coder_destroy(gw);
    sd_coder_destroy(iw);
    for (size_t i = 0; i < bc.temps.len; i++) {
        sd_coder_destroy(*SD_VEC_AT(&bc.temps, sd_coder *, i));
    }
    sd_vec_deinit(&bc.temps);
    sd_vec_deinit(&bc.coder_ids);
    if (st == SD_OK) {
        *out = bc.pl;
    }
    return st;
}

sd_status sd_pipeline_to_proto(sd_pipeline *p, const char *env_urn, sd_bytes env_payload,
                               uint8_t **out, size_t *out_len, sd_err *err)
{
    sd_arena a = { 0 };
    pb_Pipeline *pl = NULL;
    sd_status st = sd__pipeline_build(p, &a, env_urn, env_payload, &pl, err);
    if (st == SD_OK) {
        size_t n = protobuf_c_message_get_packed_size(&pl->base);
        *out = sd_malloc(n > 0 ? n : 1);
        if (*out == NULL) {
            st = sd_err_set(err, SD_ENOMEM, "out of memory");
        } else {
            *out_len = protobuf_c_message_pack(&pl->base, *out);
        }
    }
    sd_arena_deinit(&a);
    return st;
}
