/*
 * Sundial C SDK: translation of the builder's model into a Beam Pipeline proto.
 *
 * sd__pipeline_build writes the whole proto into an arena in one pass over the model
 * (pipeline_int.h), because the proto needs facts known only at run time: the environment
 * (a loopback worker pool's port) and the deduplicated coder table.
 *
 *   coders        structurally deduplicated on first sight (coder_id), ids "c0", "c1", ...;
 *                 window coders and an SDF's restriction coder join the same table
 *   windowing     "w<i>" for strategy i of the model ("w0" is the global one)
 *   transforms    one PTransform per model transform with its URN and payload (ParDoPayload
 *                 with side inputs, state and timer specs; CombinePayload; WindowIntoPayload;
 *                 TestStreamPayload), composites listing their parts as subtransforms
 *   requirements  stateful processing, splittable DoFns and OnWindowExpiration add the
 *                 Beam requirement URNs the runner must understand; the environment lists
 *                 the URNs the C worker executes as capabilities
 *
 * Arena allocation failures set the arena's failed flag, which the steps check as they end, so a
 * failed translation returns SD_ENOMEM and leaves nothing to free but the arena.
 *
 * Sibling: pipeline.c is the builder that fills the model.
 */
#include <stdio.h>
#include <string.h>

#include "google/protobuf/duration.pb-c.h"
#include "google/protobuf/timestamp.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "proto/state_spec.h"
#include "runner/base/alloc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/pipeline_int.h"
#include "sdk-harness/src/sdf_int.h"

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
    sd_vec coder_ids;            /* const sd_coder * in id order: "c<i>" */
    pb_Pipeline *pl;
    bool by_reference; /* large Creates carry only their token (sd__pipeline_build) */
} build_ctx;

#define PBNEW(bc, type, desc) ((type *)sd__pb_alloc((bc)->a, &(desc)))
#define PL_DESC(x)            org__apache__beam__model__pipeline__v1__##x##__descriptor

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
        SD_PL(FixedWindowsPayload)
        m = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__FIXED_WINDOWS_PAYLOAD__INIT;
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
        SD_PL(SlidingWindowsPayload)
        m = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__SLIDING_WINDOWS_PAYLOAD__INIT;
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
        SD_PL(SessionWindowsPayload)
        m = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__SESSION_WINDOWS_PAYLOAD__INIT;
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
                   : (SD_PL(PTransform__InputsEntry) *)PBNEW(bc, SD_PL(PTransform__OutputsEntry),
                                                             PL_DESC(ptransform__outputs_entry));
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

/* The ParDo's side inputs: access pattern, view fn and window mapping of each. */
static sd_status
build_side_inputs(build_ctx *bc, const px_transform *t, SD_PL(ParDoPayload) * m, sd_err *err)
{
    sd_pipeline *p = bc->p;
    if (t->sides.len == 0) {
        return SD_OK;
    }
    m->n_side_inputs = t->sides.len;
    m->side_inputs = sd_arena_alloc(bc->a, t->sides.len * sizeof(void *));
    if (m->side_inputs == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < t->sides.len; i++) {
        const px_side *s = sd_vec_at(&t->sides, i);
        const sd_windowfn *wf = sd_vec_at(&p->windowings, s->windowing);
        SD_PL(ParDoPayload__SideInputsEntry) *e = PBNEW(bc, SD_PL(ParDoPayload__SideInputsEntry),
                                                        PL_DESC(par_do_payload__side_inputs_entry));
        SD_PL(SideInput) *si = PBNEW(bc, SD_PL(SideInput), PL_DESC(side_input));
        if (e == NULL || si == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        si->access_pattern = spec(bc,
                                  s->access == SD_SIDE_AS_MULTIMAP ? SD_URN_SIDE_INPUT_MULTIMAP
                                                                   : SD_URN_SIDE_INPUT_ITERABLE,
                                  SD_BYTES_NULL);
        si->view_fn = spec(bc, "beam:view_fn:sundial_c:v1", SD_BYTES_NULL);
        si->window_mapping_fn = spec(bc,
                                     wf->kind == SD_WINDOW_GLOBAL ? SD_URN_WINDOW_MAPPING_GLOBAL
                                                                  : SD_URN_WINDOW_MAPPING_IDENTITY,
                                     SD_BYTES_NULL);
        e->key = sd_arena_strdup(bc->a, s->local);
        e->value = si;
        m->side_inputs[i] = e;
    }
    return SD_OK;
}

/*
 * One state spec, from the state kinds table: the kind's protocol URN and its oneof member
 * (allocated through the member's descriptor) with its coders, map keys first; a combining
 * state's CombineFn. False when out of memory (or for a kind the table lacks, which
 * sd_pipeline_pardo refused already).
 */
static bool build_state_spec(build_ctx *bc, const px_state *ps, SD_PL(StateSpec) * ss)
{
    sd_user_state_kind kind;
    if (!sd__state_kind_from_sdk(ps->kind, &kind)) {
        return false;
    }
    ss->protocol = spec(bc, sd_user_state_row_of(kind)->protocol, SD_BYTES_NULL);
    int spec_case = sd_pb_state_spec_case(kind);
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(&PL_DESC(state_spec), (unsigned)spec_case);
    void *member = f != NULL ? sd__pb_alloc(bc->a, f->descriptor) : NULL;
    if (member == NULL) {
        return false;
    }
    memcpy((char *)ss + f->offset, &member, sizeof(member));
    ss->spec_case = (SD_PL(StateSpec__SpecCase))spec_case;
    sd_pb_state_view v;
    if (!sd_pb_state_view_of(ss, &v)) {
        return false;
    }
    if (v.key_coder_id != NULL) {
        *v.key_coder_id = (char *)coder_id(bc, ps->key_coder);
    }
    *v.value_coder_id = (char *)coder_id(bc, ps->coder);
    if (kind == SD_USER_STATE_COMBINING) {
        ss->combining_spec->combine_fn = spec(bc, SD_URN_COMBINEFN_C, sd_buf_bytes(&ps->combine));
    }
    return true;
}

/* The ParDo's state specs (a stateful DoFn). */
static sd_status
build_state_specs(build_ctx *bc, const px_transform *t, SD_PL(ParDoPayload) * m, sd_err *err)
{
    if (t->states.len == 0) {
        return SD_OK;
    }
    m->n_state_specs = t->states.len;
    m->state_specs = sd_arena_alloc(bc->a, t->states.len * sizeof(void *));
    if (m->state_specs == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < t->states.len; i++) {
        const px_state *ps = sd_vec_at(&t->states, i);
        SD_PL(ParDoPayload__StateSpecsEntry) *e = PBNEW(bc, SD_PL(ParDoPayload__StateSpecsEntry),
                                                        PL_DESC(par_do_payload__state_specs_entry));
        SD_PL(StateSpec) *ss = PBNEW(bc, SD_PL(StateSpec), PL_DESC(state_spec));
        if (e == NULL || ss == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        if (!build_state_spec(bc, ps, ss)) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        e->key = sd_arena_strdup(bc->a, ps->id);
        e->value = ss;
        m->state_specs[i] = e;
    }
    bc->stateful = true;
    return SD_OK;
}

/* The ParDo's timer family specs, all with one timer coder of the input's key and window. */
static sd_status
build_timer_specs(build_ctx *bc, const px_transform *t, SD_PL(ParDoPayload) * m, sd_err *err)
{
    sd_pipeline *p = bc->p;
    if (t->timers.len == 0) {
        return SD_OK;
    }
    const sd_windowfn *wf = sd_vec_at(&p->windowings, t->in_windowing);
    sd_coder *tc = NULL;
    if (sd_coder_create(&tc, err, SD_CODER_TIMER, t->key_coder,
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
        SD_PL(TimerFamilySpec) *ts = PBNEW(bc, SD_PL(TimerFamilySpec), PL_DESC(timer_family_spec));
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
    return SD_OK;
}

/* A splittable ParDo's restriction coder, shared by every splittable ParDo of the pipeline. */
static sd_status build_restriction(build_ctx *bc, SD_PL(ParDoPayload) * m, sd_err *err)
{
    /* KV<KV<varint from, varint to>, varint watermark state> (sdf_int.h). */
    if (bc->restriction == NULL) {
        sd_coder *v = NULL, *range = NULL, *r = NULL;
        sd_status rs = sd_coder_create(&v, err, SD_CODER_VARINT, NULL);
        if (rs == SD_OK) {
            rs = sd_coder_create(&range, err, SD_CODER_KV, v, v, NULL);
        }
        if (rs == SD_OK) {
            rs = sd_coder_create(&r, err, SD_CODER_KV, range, v, NULL);
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
    return SD_OK;
}

/*
 * The DoFn spec of a Create by reference when the run cannot use the reference: its payload
 * names SD_FN_CREATE and carries the elements inline; what follows name and configuration
 * (the tag lists) is kept as it is.
 */
static pb_FunctionSpec *inline_create(build_ctx *bc, const px_transform *t)
{
    sd_reader r = sd_reader_make(sd_buf_bytes(&t->fn_payload));
    sd_bytes name, ref;
    sd_buf b;
    pb_FunctionSpec *fs = NULL;
    if (sd_reader_lp(&r, &name) != SD_OK || sd_reader_lp(&r, &ref) != SD_OK) {
        return NULL; /* written by sd__dofn_payload_encode: cannot happen */
    }
    sd_buf_init(&b, 0);
    sd_bytes elements = sd__created_bytes(t->created);
    if (sd_buf_reserve(&b, elements.len + sd_reader_left(&r) + 32) == SD_OK &&
        sd_buf_put_lp(&b, sd_bytes_str(SD_FN_CREATE)) == SD_OK &&
        sd_buf_put_lp(&b, elements) == SD_OK &&
        sd_buf_append(&b, r.p, sd_reader_left(&r)) == SD_OK) {
        fs = spec(bc, SD_URN_DOFN_C, sd_buf_bytes(&b));
    }
    sd_buf_deinit(&b);
    return fs;
}

/* A ParDo: the ParDoPayload with the DoFn, side inputs, state, timers and restriction coder. */
static sd_status build_pardo(build_ctx *bc, const px_transform *t, pb_PTransform *pt, sd_err *err)
{
    SD_PL(ParDoPayload) *m = PBNEW(bc, SD_PL(ParDoPayload), PL_DESC(par_do_payload));
    if (m == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    m->do_fn = t->created != NULL && !bc->by_reference
                   ? inline_create(bc, t)
                   : spec(bc, SD_URN_DOFN_C, sd_buf_bytes(&t->fn_payload));
    if (m->do_fn == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_status st = build_side_inputs(bc, t, m, err);
    if (st == SD_OK) {
        st = build_state_specs(bc, t, m, err);
    }
    if (st == SD_OK) {
        st = build_timer_specs(bc, t, m, err);
    }
    if (st != SD_OK) {
        return st;
    }
    if (t->expiry) {
        m->on_window_expiration_timer_family_spec = SD_EXPIRY_FAMILY;
        bc->expiry = true;
    }
    if (t->splittable && (st = build_restriction(bc, m, err)) != SD_OK) {
        return st;
    }
    pt->spec = spec(bc, SD_URN_TRANSFORM_PARDO, SD_BYTES_NULL);
    if (m->do_fn == NULL || pt->spec == NULL || !pack_into(bc, &m->base, &pt->spec->payload)) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    pt->environment_id = "env";
    return SD_OK;
}

static sd_status
build_transform(build_ctx *bc, const px_transform *t, pb_PTransform *pt, sd_err *err)
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
        SD_PL(WindowIntoPayload) *m =
            PBNEW(bc, SD_PL(WindowIntoPayload), PL_DESC(window_into_payload));
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
    case PX_COMBINE_PER_KEY: {
        SD_PL(CombinePayload) *m = PBNEW(bc, SD_PL(CombinePayload), PL_DESC(combine_payload));
        if (m == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        m->combine_fn = spec(bc, SD_URN_COMBINEFN_C, sd_buf_bytes(&t->fn_payload));
        m->accumulator_coder_id = (char *)coder_id(bc, t->acc_coder);
        pt->spec = spec(bc, SD_URN_TRANSFORM_COMBINE_PER_KEY, SD_BYTES_NULL);
        if (m->combine_fn == NULL || m->accumulator_coder_id == NULL || pt->spec == NULL ||
            !pack_into(bc, &m->base, &pt->spec->payload)) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        pt->environment_id = "env";
        break;
    }
    case PX_PARDO: {
        sd_status st = build_pardo(bc, t, pt, err);
        if (st != SD_OK) {
            return st;
        }
        break;
    }
    }
    if (bc->a->failed) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    return SD_OK;
}

static pb_WindowingStrategy *build_windowing(build_ctx *bc,
                                             const sd_windowfn *wf,
                                             const char *global_coder,
                                             const char *interval_coder)
{
    pb_WindowingStrategy *ws = PBNEW(bc, pb_WindowingStrategy, PL_DESC(windowing_strategy));
    SD_PL(Trigger) *tr = sd__trigger_proto(bc->a, wf->trigger);
    if (ws == NULL || tr == NULL) {
        return NULL;
    }
    ws->window_fn = window_fn_spec(bc, wf);
    ws->merge_status =
        wf->kind == SD_WINDOW_SESSIONS
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
    ws->on_time_behavior =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ON_TIME_BEHAVIOR__ENUM__FIRE_ALWAYS;
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
    SD_URN_PROTOCOL_CONTROL_REQUEST_ELEMENTS_EMBEDDING,
    SD_URN_PROTOCOL_SUNDIAL_REGISTER_DESCRIPTORS,
    SD_URN_TRANSFORM_WINDOW_INTO,
#define CAPABILITY(name, urn) urn,
    SD_URN_COMBINE_COMPONENTS(CAPABILITY)
#undef CAPABILITY
        SD_URN_TRANSFORM_FLATTEN,
};

/* Every transform of the model, in creation order; those without a parent are the roots. */
static sd_status build_transforms(build_ctx *bc, pb_Components *comp, sd_err *err)
{
    sd_pipeline *p = bc->p;
    sd_arena *a = bc->a;
    sd_status st = SD_OK;
    comp->n_transforms = p->transforms.len;
    comp->transforms = sd_arena_alloc(a, (p->transforms.len + 1) * sizeof(void *));
    size_t n_roots = 0;
    bc->pl->root_transform_ids = sd_arena_alloc(a, (p->transforms.len + 1) * sizeof(char *));
    if (comp->transforms == NULL || bc->pl->root_transform_ids == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < p->transforms.len && st == SD_OK; i++) {
        const px_transform *t = *SD_VEC_AT(&p->transforms, px_transform *, i);
        SD_PL(Components__TransformsEntry) *e =
            PBNEW(bc, SD_PL(Components__TransformsEntry), PL_DESC(components__transforms_entry));
        pb_PTransform *pt = PBNEW(bc, pb_PTransform, PL_DESC(ptransform));
        if (e == NULL || pt == NULL) {
            st = sd_err_set(err, SD_ENOMEM, "out of memory");
            break;
        }
        st = build_transform(bc, t, pt, err);
        e->key = sd_arena_strdup(a, t->id);
        e->value = pt;
        comp->transforms[i] = e;
        if (t->parent < 0) {
            bc->pl->root_transform_ids[n_roots++] = e->key;
        }
    }
    bc->pl->n_root_transform_ids = n_roots;
    return st;
}

/* Every PCollection with its coder, boundedness and windowing strategy. */
static sd_status build_pcollections(build_ctx *bc, pb_Components *comp, sd_err *err)
{
    sd_pipeline *p = bc->p;
    sd_arena *a = bc->a;
    comp->n_pcollections = p->pcolls.len;
    comp->pcollections = sd_arena_alloc(a, (p->pcolls.len + 1) * sizeof(void *));
    if (comp->pcollections == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < p->pcolls.len; i++) {
        const sd_pcoll *pc = *SD_VEC_AT(&p->pcolls, sd_pcoll *, i);
        SD_PL(Components__PcollectionsEntry) *e = PBNEW(bc, SD_PL(Components__PcollectionsEntry),
                                                        PL_DESC(components__pcollections_entry));
        pb_PCollection *m = PBNEW(bc, pb_PCollection, PL_DESC(pcollection));
        if (e == NULL || m == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        m->unique_name = sd_arena_strdup(a, pc->id);
        m->coder_id = (char *)coder_id(bc, pc->coder);
        m->is_bounded = pc->unbounded
                            ? ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__UNBOUNDED
                            : ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__BOUNDED;
        m->windowing_strategy_id = sd_arena_printf(a, "w%zu", pc->windowing);
        e->key = m->unique_name;
        e->value = m;
        comp->pcollections[i] = e;
    }
    return SD_OK;
}

/* The windowing strategies "w<i>", naming the window coders gw_id and iw_id. */
static sd_status build_windowings(build_ctx *bc,
                                  pb_Components *comp,
                                  const char *gw_id,
                                  const char *iw_id,
                                  sd_err *err)
{
    sd_pipeline *p = bc->p;
    sd_arena *a = bc->a;
    comp->n_windowing_strategies = p->windowings.len;
    comp->windowing_strategies = sd_arena_alloc(a, p->windowings.len * sizeof(void *));
    if (comp->windowing_strategies == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < p->windowings.len; i++) {
        SD_PL(Components__WindowingStrategiesEntry) *e =
            PBNEW(bc, SD_PL(Components__WindowingStrategiesEntry),
                  PL_DESC(components__windowing_strategies_entry));
        if (e == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        e->key = sd_arena_printf(a, "w%zu", i);
        e->value = build_windowing(bc, sd_vec_at(&p->windowings, i), gw_id, iw_id);
        comp->windowing_strategies[i] = e;
    }
    return SD_OK;
}

/* The one environment "env" every ParDo, combine and WindowInto runs in, with the worker's
 * capabilities. */
static sd_status build_environment(build_ctx *bc,
                                   pb_Components *comp,
                                   const char *env_urn,
                                   sd_bytes env_payload,
                                   sd_err *err)
{
    sd_arena *a = bc->a;
    SD_PL(Components__EnvironmentsEntry) *ee =
        PBNEW(bc, SD_PL(Components__EnvironmentsEntry), PL_DESC(components__environments_entry));
    pb_Environment *env = PBNEW(bc, pb_Environment, PL_DESC(environment));
    if (ee == NULL || env == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
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
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    comp->environments[0] = ee;
    return SD_OK;
}

/* The requirements the transforms need the runner to understand (best effort: an arena
 * failure is caught by the caller's final check). */
static void add_requirements(build_ctx *bc)
{
    sd_arena *a = bc->a;
    char *reqs[3];
    size_t n_reqs = 0;
    if (bc->stateful) {
        reqs[n_reqs++] = SD_URN_REQUIREMENT_STATEFUL_PROCESSING;
    }
    if (bc->splittable) {
        reqs[n_reqs++] = SD_URN_REQUIREMENT_SPLITTABLE_DOFN;
    }
    if (bc->expiry) {
        reqs[n_reqs++] = SD_URN_REQUIREMENT_ON_WINDOW_EXPIRATION;
    }
    if (n_reqs > 0) {
        char **r = sd_arena_alloc(a, n_reqs * sizeof(char *));
        if (r != NULL) {
            memcpy(r, reqs, n_reqs * sizeof(char *));
            bc->pl->n_requirements = n_reqs;
            bc->pl->requirements = r;
        }
    }
}

sd_status sd__pipeline_build(sd_pipeline *p,
                             sd_arena *a,
                             const char *env_urn,
                             sd_bytes env_payload,
                             bool by_reference,
                             pb_Pipeline **out,
                             sd_err *err)
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
    bc.by_reference = by_reference;
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
    if (sd_coder_create(&gw, err, SD_CODER_GLOBAL_WINDOW, NULL) != SD_OK ||
        sd_coder_create(&iw, err, SD_CODER_INTERVAL_WINDOW, NULL) != SD_OK) {
        st = err != NULL ? err->code : SD_ENOMEM;
        goto done;
    }
    bc.gw = gw;
    bc.iw = iw;
    gw_id = coder_id(&bc, gw);
    iw_id = coder_id(&bc, iw);

    st = build_transforms(&bc, comp, err);
    if (st == SD_OK) {
        st = build_pcollections(&bc, comp, err);
    }
    if (st == SD_OK) {
        st = build_windowings(&bc, comp, gw_id, iw_id, err);
    }
    if (st == SD_OK) {
        st = build_environment(&bc, comp, env_urn, env_payload, err);
    }
    if (st != SD_OK) {
        goto done;
    }
    add_requirements(&bc);
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

sd_status sd_pipeline_to_proto(sd_pipeline *p,
                               const char *env_urn,
                               sd_bytes env_payload,
                               uint8_t **out,
                               size_t *out_len,
                               sd_err *err)
{
    sd_arena a = { 0 };
    pb_Pipeline *pl = NULL;
    sd_status st = sd__pipeline_build(p, &a, env_urn, env_payload, false, &pl, err);
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
