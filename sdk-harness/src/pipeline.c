/*
 * Sundial C SDK: pipeline construction — the builder behind sd_pipeline and sd_pcoll.
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
 *
 * Files: this one holds the model (pipeline_int.h) and the primitives; pipeline_composites.c
 * builds the composites and assertions from them; pipeline_proto.c translates the model into
 * the Pipeline proto (sd__pipeline_build, sd_pipeline_to_proto); teststream.c and
 * windowing_opts.c extend the builder through the sd__pipeline_* hooks of sdk_int.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/pipeline_int.h"
#include "sdk-harness/src/sdf_int.h"

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
    sd_status st = sd_coder_create(&c, &p->err, kind, NULL);
    return keep_coder(p, st, c);
}

const sd_coder *sd_pcoder_bytes(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_BYTES);
}

const sd_coder *sd_pcoder_string(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_STRING_UTF8);
}

const sd_coder *sd_pcoder_varint(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_VARINT);
}

const sd_coder *sd_pcoder_double(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_DOUBLE);
}

const sd_coder *sd_pcoder_bool(sd_pipeline *p)
{
    return leaf_coder(p, SD_CODER_BOOL);
}

const sd_coder *sd_pcoder_kv(sd_pipeline *p, const sd_coder *key, const sd_coder *value)
{
    sd_coder *c = NULL;
    if (failed(p) || key == NULL || value == NULL) {
        return failed(p) ? NULL : fail(p, SD_EINVAL, "sd_pcoder_kv: NULL component");
    }
    sd_status st = sd_coder_create(&c, &p->err, SD_CODER_KV, key, value, NULL);
    return keep_coder(p, st, c);
}

const sd_coder *sd_pcoder_iterable(sd_pipeline *p, const sd_coder *element)
{
    sd_coder *c = NULL;
    if (failed(p) || element == NULL) {
        return failed(p) ? NULL : fail(p, SD_EINVAL, "sd_pcoder_iterable: NULL component");
    }
    sd_status st = sd_coder_create(&c, &p->err, SD_CODER_ITERABLE, element, NULL);
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

static sd_pcoll *add_output(sd_pipeline *p,
                            px_transform *t,
                            const char *local,
                            const sd_coder *coder,
                            size_t windowing)
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
    return add_output(p, t, "out", sd_pcoder_bytes(p), 0);
}

bool sd__pipeline_add_teststream(sd_pipeline *p,
                                 const char *name,
                                 const sd_coder *coder,
                                 const char *const *tags,
                                 size_t n_tags,
                                 const sd_teststream *ext,
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

/* Check a ParDo's spec before anything is recorded: the DoFn, side inputs, state, timers and
 * watermark estimator. Returns the DoFn, or NULL when the spec is refused (sticky error set).
 * OUT: whether it has OnWindowExpiration and whether it is splittable. */
static const sd_dofn *check_pardo_spec(sd_pipeline *p,
                                       const char *name,
                                       const sd_pcoll *input,
                                       const sd_pardo_spec *spec,
                                       bool *out_expiry,
                                       bool *out_splittable)
{
    if (spec == NULL || spec->dofn == NULL) {
        return fail(p, SD_EINVAL, "ParDo %s: no DoFn name", name != NULL ? name : "(null)");
    }
    if (sd__find_dofn(sd_bytes_str(spec->dofn)) == NULL) {
        return fail(p, SD_ENOTFOUND, "ParDo %s: no DoFn registered as \"%s\"", name, spec->dofn);
    }
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
    *out_expiry = expiry;
    if ((spec->n_states > 0 || spec->n_timers > 0 || expiry) && input->coder->kind != SD_CODER_KV) {
        return fail(p, SD_EINVAL, "ParDo %s: a stateful DoFn needs a KV input; %s is %s", name,
                    input->id, input->coder->urn);
    }
    for (size_t i = 0; i < spec->n_states; i++) {
        const sd_state_spec *ss = &spec->states[i];
        if (ss->id == NULL || ss->coder == NULL) {
            return fail(p, SD_EINVAL, "ParDo %s: state %zu needs an id and a coder", name, i);
        }
        sd_user_state_kind kind;
        if (!sd__state_kind_from_sdk(ss->kind, &kind)) {
            return fail(p, SD_EINVAL, "ParDo %s: state %s has unknown kind %d", name, ss->id,
                        (int)ss->kind);
        }
        if (sd_user_state_row_of(kind)->keyed && ss->key_coder == NULL) {
            return fail(p, SD_EINVAL, "ParDo %s: %s state %s needs a key_coder", name,
                        sd_user_state_name(kind), ss->id);
        }
        if (kind == SD_USER_STATE_COMBINING &&
            (ss->combinefn == NULL || sd__find_combinefn(sd_bytes_str(ss->combinefn)) == NULL)) {
            return fail(p, SD_ENOTFOUND,
                        "ParDo %s: combining state %s: no CombineFn registered "
                        "as \"%s\"",
                        name, ss->id, ss->combinefn != NULL ? ss->combinefn : "");
        }
    }
    const sd_dofn *fn = sd__find_dofn(sd_bytes_str(spec->dofn));
    bool splittable = fn != NULL && fn->initial_restriction != NULL;
    *out_splittable = splittable;
    if (splittable && (spec->n_states > 0 || spec->n_timers > 0)) {
        return fail(p, SD_EINVAL, "ParDo %s: a splittable DoFn cannot also use state or timers",
                    name);
    }
    if (spec->watermark.kind < SD_WM_NONE || spec->watermark.kind > SD_WM_BOUNDED_DELAY) {
        return fail(p, SD_EINVAL, "ParDo %s: unknown watermark estimator kind %d", name,
                    (int)spec->watermark.kind);
    }
    /* A negative delay would put the watermark ahead of the data it is computed from: every
     * element after the first would be late. Zero is allowed (the watermark is the latest
     * timestamp seen). */
    if (spec->watermark.kind == SD_WM_BOUNDED_DELAY &&
        (spec->watermark.delay.months < 0 || spec->watermark.delay.ms < 0)) {
        return fail(p, SD_EINVAL,
                    "ParDo %s: the bounded-delay watermark needs a delay of 0 or more (got %d "
                    "months and %lld ms): a negative delay puts the watermark ahead of the data",
                    name, (int)spec->watermark.delay.months, (long long)spec->watermark.delay.ms);
    }
    for (size_t i = 0; i < spec->n_timers; i++) {
        if (spec->timers[i].family == NULL || (spec->timers[i].domain != SD_EVENT_TIME &&
                                               spec->timers[i].domain != SD_PROCESSING_TIME)) {
            return fail(p, SD_EINVAL, "ParDo %s: timer %zu needs a family and a time domain", name,
                        i);
        }
    }
    return fn;
}

/* Record a ParDo's state specs (copies; a combining state's CombineFn payload encoded). */
static bool record_states(sd_pipeline *p, px_transform *t, const sd_pardo_spec *spec)
{
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
            oom(p);
            return false;
        }
    }
    return true;
}

/* Record a ParDo's timer families, OnWindowExpiration's own family first. */
static bool record_timers(sd_pipeline *p, px_transform *t, const sd_pardo_spec *spec, bool expiry)
{
    if (expiry) {
        /* OnWindowExpiration runs as firings of a timer family of its own. */
        px_timer pt = { sd_strdup(SD_EXPIRY_FAMILY), SD_EVENT_TIME };
        if (pt.family == NULL || sd_vec_push(&t->timers, &pt) != SD_OK) {
            sd_free(pt.family);
            oom(p);
            return false;
        }
        t->expiry = true;
    }
    for (size_t i = 0; i < spec->n_timers && !failed(p); i++) {
        px_timer pt = { sd_strdup(spec->timers[i].family), spec->timers[i].domain };
        if (pt.family == NULL || sd_vec_push(&t->timers, &pt) != SD_OK) {
            sd_free(pt.family);
            oom(p);
            return false;
        }
    }
    return true;
}

/* Add a ParDo's outputs, tagged by the spec or "out<i>" (tags[i], owned copies in
 * tag_store[i]). OUT: outputs[i] when outputs is not NULL. Returns the main output. */
static sd_pcoll *add_pardo_outputs(sd_pipeline *p,
                                   px_transform *t,
                                   const sd_pcoll *input,
                                   const sd_pardo_spec *spec,
                                   size_t n_out,
                                   const char **tags,
                                   char **tag_store,
                                   sd_pcoll **outputs)
{
    char tagbuf[32];
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
    return main_out;
}

/* Add a ParDo's side inputs as inputs "side<i>" (sides[i], owned copies in side_store[i]). */
static void add_pardo_sides(sd_pipeline *p,
                            px_transform *t,
                            const sd_pardo_spec *spec,
                            const char **sides,
                            char **side_store)
{
    char tagbuf[32];
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
}

sd_pcoll *sd_pardo(sd_pipeline *p,
                   const char *name,
                   sd_pcoll *input,
                   const sd_pardo_spec *spec,
                   sd_pcoll **outputs)
{
    if (!check_inputs(p, "ParDo", &input, 1)) {
        return NULL;
    }
    bool expiry = false, splittable = false;
    const sd_dofn *fn = check_pardo_spec(p, name, input, spec, &expiry, &splittable);
    if (fn == NULL) {
        return NULL;
    }
    size_t n_out = spec->n_outputs == 0 ? 1 : spec->n_outputs;
    px_transform *t = new_transform(p, name, PX_PARDO);
    if (t == NULL || !add_input(p, t, "main", input)) {
        return NULL;
    }
    if (!record_states(p, t, spec)) {
        return NULL;
    }
    t->splittable = splittable;
    t->sdf_unbounded = splittable && fn->unbounded_per_element;
    if (!record_timers(p, t, spec, expiry)) {
        return NULL;
    }
    if (spec->n_states > 0 || spec->n_timers > 0 || expiry) {
        t->key_coder = input->coder->components[0];
        t->in_windowing = input->windowing;
    }
    const char *tags[64];
    char *tag_store[64] = { 0 };
    const char *sides[64];
    char *side_store[64] = { 0 };
    if (n_out > 64 || spec->n_side_inputs > 64) {
        return fail(p, SD_EINVAL, "ParDo %s: at most 64 outputs and 64 side inputs", name);
    }
    sd_pcoll *main_out = add_pardo_outputs(p, t, input, spec, n_out, tags, tag_store, outputs);
    add_pardo_sides(p, t, spec, sides, side_store);
    if (!failed(p) && sd__dofn_payload_encode(&t->fn_payload, spec->dofn, spec->config, tags, n_out,
                                              sides, spec->n_side_inputs) != SD_OK) {
        oom(p);
    }
    if (!failed(p) && splittable &&
        sd__sdf_payload_append(&t->fn_payload, &spec->watermark) != SD_OK) {
        oom(p);
    }
    for (size_t i = 0; i < 64; i++) {
        sd_free(tag_store[i]);
        sd_free(side_store[i]);
    }
    return failed(p) ? NULL : main_out;
}

sd_pcoll *sd_apply(sd_pipeline *p,
                   const char *name,
                   sd_pcoll *input,
                   const char *dofn,
                   sd_bytes config,
                   const sd_coder *output_coder)
{
    const sd_coder *coders[1] = { output_coder };
    sd_pardo_spec spec = {
        .dofn = dofn, .config = config, .n_outputs = 1, .output_coders = coders
    };
    return sd_pardo(p, name, input, &spec, NULL);
}

sd_pcoll *sd_group_by_key(sd_pipeline *p, const char *name, sd_pcoll *input)
{
    if (!check_inputs(p, "GroupByKey", &input, 1)) {
        return NULL;
    }
    if (input->coder->kind != SD_CODER_KV) {
        return fail(p, SD_EINVAL, "GroupByKey %s: input %s must have a KV coder", name, input->id);
    }
    const sd_coder *vals = sd_pcoder_iterable(p, input->coder->components[1]);
    const sd_coder *out = sd_pcoder_kv(p, input->coder->components[0], vals);
    px_transform *t = new_transform(p, name, PX_GBK);
    if (t == NULL || !add_input(p, t, "in", input)) {
        return NULL;
    }
    return add_output(p, t, "out", out, input->windowing);
}

sd_pcoll *sd_group_by_key_late(sd_pipeline *p, const char *name, sd_pcoll *input, sd_pcoll **late)
{
    if (late == NULL) {
        return fail(p, SD_EINVAL, "GroupByKey %s: late must not be NULL", name);
    }
    *late = NULL;
    sd_pcoll *grouped = sd_group_by_key(p, name, input);
    if (grouped == NULL) {
        return NULL;
    }
    px_transform *t = *SD_VEC_AT(&p->transforms, px_transform *, p->transforms.len - 1);
    *late = add_output(p, t, SD_GBK_LATE_OUTPUT_TAG, input->coder, input->windowing);
    return *late != NULL ? grouped : NULL;
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
    if (fn == NULL || (fn->kind == SD_WINDOW_FIXED && fn->size_ms <= 0) ||
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

/* The WindowIntos that asked for the per-element late policy, comma-separated (empty: none). */
sd_status sd__pipeline_drop_late_names(const sd_pipeline *p, sd_buf *out)
{
    for (size_t i = 0; i < p->transforms.len; i++) {
        const px_transform *t = *SD_VEC_AT(&p->transforms, px_transform *, i);
        if (t->kind != PX_WINDOW_INTO ||
            !SD_VEC_AT(&p->windowings, sd_windowfn, t->windowing)->drop_late_elements) {
            continue;
        }
        sd_status st = out->len > 0 ? sd_buf_append_byte(out, ',') : SD_OK;
        if (st == SD_OK) {
            st = sd_buf_append_str(out, t->id);
        }
        if (st != SD_OK) {
            return st;
        }
    }
    return sd_buf_append_byte(out, '\0');
}

/* ================================================================ for pipeline_composites.c */

/* The model helpers above, for the composites built in pipeline_composites.c. */
void *sd__pipeline_oom(sd_pipeline *p)
{
    return oom(p);
}

bool sd__pipeline_check_inputs(sd_pipeline *p, const char *what, sd_pcoll *const *in, size_t n)
{
    return check_inputs(p, what, in, n);
}

px_transform *sd__pipeline_new_transform(sd_pipeline *p, const char *name, px_kind kind)
{
    return new_transform(p, name, kind);
}

bool sd__pipeline_add_input(sd_pipeline *p, px_transform *t, const char *local, const sd_pcoll *in)
{
    return add_input(p, t, local, in);
}

sd_pcoll *sd__pipeline_add_output(sd_pipeline *p,
                                  px_transform *t,
                                  const char *local,
                                  const sd_coder *coder,
                                  size_t windowing)
{
    return add_output(p, t, local, coder, windowing);
}

long sd__pipeline_enter(sd_pipeline *p, px_transform *t)
{
    return begin_composite(p, t);
}

void sd__pipeline_leave(sd_pipeline *p, px_transform *t, long saved, sd_pcoll *out)
{
    end_composite(p, t, saved, out);
}
