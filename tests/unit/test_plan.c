/*
 * Unit tests for runner/plan: validation, composite expansion, combiner lifting, Reshuffle
 * elision, SDF expansion, greedy fusion, the length-prefix rule, descriptors, windowing
 * translation, determinism, real TypeScript SDK pipelines (the .pb fixtures in tests/data/plan) and
 * an OOM loop.
 *
 * Pipelines are built with protobuf-c through a small builder (tb_*), then packed and unpacked
 * again so the planner sees exactly what it would see from the wire.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "google/protobuf/duration.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/err.h"
#include "runner/plan/plan.h"
#include "runner/urns/urns.h"

typedef Org__Apache__Beam__Model__Pipeline__V1__Pipeline pb_pipeline;
typedef Org__Apache__Beam__Model__Pipeline__V1__Components pb_components;
typedef Org__Apache__Beam__Model__Pipeline__V1__PTransform pb_transform;
typedef Org__Apache__Beam__Model__Pipeline__V1__PCollection pb_pcoll;
typedef Org__Apache__Beam__Model__Pipeline__V1__Coder pb_coder;
typedef Org__Apache__Beam__Model__Pipeline__V1__WindowingStrategy pb_wstrat;
typedef Org__Apache__Beam__Model__Pipeline__V1__Environment pb_env;
typedef Org__Apache__Beam__Model__Pipeline__V1__FunctionSpec pb_spec;
typedef Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload pb_pardo;
typedef Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor pb_pbd;

#define GEN     "beam:coder:genericobjectjs:v1"
#define JS_DOFN "beam:dofn:serialized_js_dofn_info:v1"

/* ----------------------------------------------------------------------------------------- */
/* Pipeline builder                                                                           */
/* ----------------------------------------------------------------------------------------- */

typedef struct tb {
    void **allocs;
    size_t n_allocs;
    size_t cap;
    pb_components comps;
    pb_pipeline pipe;
} tb;

static void *tb_alloc(tb *b, size_t n)
{
    void *p = sd_calloc(1, n == 0 ? 1 : n);
    assert_non_null(p);
    if (b->n_allocs == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->allocs = sd_realloc(b->allocs, sizeof(void *) * b->cap);
        assert_non_null(b->allocs);
    }
    b->allocs[b->n_allocs++] = p;
    return p;
}

static char *tb_str(tb *b, const char *s)
{
    char *d = tb_alloc(b, strlen(s) + 1);
    memcpy(d, s, strlen(s) + 1);
    return d;
}

static void tb_push(tb *b, void ***arr, size_t *n, void *item)
{
    void **na = tb_alloc(b, sizeof(void *) * (*n + 1));
    if (*n > 0) {
        memcpy(na, *arr, sizeof(void *) * *n);
    }
    na[*n] = item;
    *arr = na;
    (*n)++;
}

static void tb_init(tb *b)
{
    memset(b, 0, sizeof(*b));
    org__apache__beam__model__pipeline__v1__components__init(&b->comps);
    org__apache__beam__model__pipeline__v1__pipeline__init(&b->pipe);
    b->pipe.components = &b->comps;
}

static pb_spec *tb_spec(tb *b, const char *urn, ProtobufCBinaryData payload)
{
    pb_spec *s = tb_alloc(b, sizeof(*s));
    org__apache__beam__model__pipeline__v1__function_spec__init(s);
    s->urn = tb_str(b, urn);
    s->payload = payload;
    return s;
}

static const ProtobufCBinaryData NO_PAYLOAD = { 0, NULL };

/* comps: comma-separated component ids ("" for none). */
static pb_coder *tb_coder(tb *b, const char *id, const char *urn, const char *comps)
{
    pb_coder *k = tb_alloc(b, sizeof(*k));
    org__apache__beam__model__pipeline__v1__coder__init(k);
    k->spec = tb_spec(b, urn, NO_PAYLOAD);
    const char *p = comps;
    while (p != NULL && *p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char *cid = tb_alloc(b, len + 1);
        memcpy(cid, p, len);
        tb_push(b, (void ***)&k->component_coder_ids, &k->n_component_coder_ids, cid);
        p = comma ? comma + 1 : NULL;
    }
    Org__Apache__Beam__Model__Pipeline__V1__Components__CodersEntry *e = tb_alloc(b, sizeof(*e));
    org__apache__beam__model__pipeline__v1__components__coders_entry__init(e);
    e->key = tb_str(b, id);
    e->value = k;
    tb_push(b, (void ***)&b->comps.coders, &b->comps.n_coders, e);
    return k;
}

static pb_pcoll *tb_pcoll(tb *b, const char *id, const char *coder, const char *ws)
{
    pb_pcoll *p = tb_alloc(b, sizeof(*p));
    org__apache__beam__model__pipeline__v1__pcollection__init(p);
    p->unique_name = tb_str(b, id);
    p->coder_id = tb_str(b, coder);
    p->windowing_strategy_id = tb_str(b, ws);
    p->is_bounded = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__BOUNDED;
    Org__Apache__Beam__Model__Pipeline__V1__Components__PcollectionsEntry *e =
        tb_alloc(b, sizeof(*e));
    org__apache__beam__model__pipeline__v1__components__pcollections_entry__init(e);
    e->key = tb_str(b, id);
    e->value = p;
    tb_push(b, (void ***)&b->comps.pcollections, &b->comps.n_pcollections, e);
    return p;
}

static pb_wstrat *tb_ws(tb *b,
                        const char *id,
                        const char *fn_urn,
                        ProtobufCBinaryData fn_payload,
                        const char *window_coder)
{
    pb_wstrat *w = tb_alloc(b, sizeof(*w));
    org__apache__beam__model__pipeline__v1__windowing_strategy__init(w);
    w->window_fn = tb_spec(b, fn_urn, fn_payload);
    w->window_coder_id = tb_str(b, window_coder);
    w->merge_status = strcmp(fn_urn, SD_URN_WINDOW_FN_SESSION) == 0
                          ? ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NEEDS_MERGE
                          : ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NON_MERGING;
    w->output_time = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW;
    w->accumulation_mode =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__DISCARDING;
    w->closing_behavior =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_ALWAYS;
    w->on_time_behavior =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ON_TIME_BEHAVIOR__ENUM__FIRE_ALWAYS;
    w->environment_id = tb_str(b, "js");
    Org__Apache__Beam__Model__Pipeline__V1__Components__WindowingStrategiesEntry *e =
        tb_alloc(b, sizeof(*e));
    org__apache__beam__model__pipeline__v1__components__windowing_strategies_entry__init(e);
    e->key = tb_str(b, id);
    e->value = w;
    tb_push(b, (void ***)&b->comps.windowing_strategies, &b->comps.n_windowing_strategies, e);
    return w;
}

static pb_env *tb_env(tb *b, const char *id, const char *urn)
{
    pb_env *v = tb_alloc(b, sizeof(*v));
    org__apache__beam__model__pipeline__v1__environment__init(v);
    v->urn = tb_str(b, urn);
    Org__Apache__Beam__Model__Pipeline__V1__Components__EnvironmentsEntry *e =
        tb_alloc(b, sizeof(*e));
    org__apache__beam__model__pipeline__v1__components__environments_entry__init(e);
    e->key = tb_str(b, id);
    e->value = v;
    tb_push(b, (void ***)&b->comps.environments, &b->comps.n_environments, e);
    return v;
}

/* "k=v,k2=v2" into a string map (inputs or outputs; same layout). */
static void tb_map(tb *b, void ***arr, size_t *n, const char *spec, bool inputs)
{
    const char *p = spec;
    while (p != NULL && *p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char *item = tb_alloc(b, len + 1);
        memcpy(item, p, len);
        char *eq = strchr(item, '=');
        assert_non_null(eq);
        *eq = '\0';
        if (inputs) {
            Org__Apache__Beam__Model__Pipeline__V1__PTransform__InputsEntry *e =
                tb_alloc(b, sizeof(*e));
            org__apache__beam__model__pipeline__v1__ptransform__inputs_entry__init(e);
            e->key = item;
            e->value = eq + 1;
            tb_push(b, arr, n, e);
        } else {
            Org__Apache__Beam__Model__Pipeline__V1__PTransform__OutputsEntry *e =
                tb_alloc(b, sizeof(*e));
            org__apache__beam__model__pipeline__v1__ptransform__outputs_entry__init(e);
            e->key = item;
            e->value = eq + 1;
            tb_push(b, arr, n, e);
        }
        p = comma ? comma + 1 : NULL;
    }
}

static pb_transform *tb_transform(tb *b,
                                  const char *id,
                                  const char *urn,
                                  ProtobufCBinaryData payload,
                                  const char *env,
                                  const char *inputs,
                                  const char *outputs,
                                  const char *subs)
{
    pb_transform *t = tb_alloc(b, sizeof(*t));
    org__apache__beam__model__pipeline__v1__ptransform__init(t);
    t->unique_name = tb_str(b, id);
    if (urn != NULL) {
        t->spec = tb_spec(b, urn, payload);
    }
    t->environment_id = tb_str(b, env);
    tb_map(b, (void ***)&t->inputs, &t->n_inputs, inputs, true);
    tb_map(b, (void ***)&t->outputs, &t->n_outputs, outputs, false);
    const char *p = subs;
    while (p != NULL && *p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char *sid = tb_alloc(b, len + 1);
        memcpy(sid, p, len);
        tb_push(b, (void ***)&t->subtransforms, &t->n_subtransforms, sid);
        p = comma ? comma + 1 : NULL;
    }
    Org__Apache__Beam__Model__Pipeline__V1__Components__TransformsEntry *e =
        tb_alloc(b, sizeof(*e));
    org__apache__beam__model__pipeline__v1__components__transforms_entry__init(e);
    e->key = tb_str(b, id);
    e->value = t;
    tb_push(b, (void ***)&b->comps.transforms, &b->comps.n_transforms, e);
    return t;
}

static void tb_root(tb *b, const char *id)
{
    tb_push(b, (void ***)&b->pipe.root_transform_ids, &b->pipe.n_root_transform_ids, tb_str(b, id));
}

static void tb_require(tb *b, const char *urn)
{
    tb_push(b, (void ***)&b->pipe.requirements, &b->pipe.n_requirements, tb_str(b, urn));
}

static ProtobufCBinaryData tb_pack(tb *b, const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = tb_alloc(b, len);
    protobuf_c_message_pack(m, buf);
    return (ProtobufCBinaryData){ len, buf };
}

typedef struct pardo_opts {
    const char *sides; /* "local:iterable,local2:multimap" */
    const char *state; /* bag state element coder id, or NULL */
    const char *timer_coder;
    const char *restriction_coder;
    bool time_sorted; /* requires_time_sorted_input */
} pardo_opts;

static ProtobufCBinaryData tb_pardo(tb *b, pardo_opts o)
{
    pb_pardo pd;
    org__apache__beam__model__pipeline__v1__par_do_payload__init(&pd);
    pd.do_fn = tb_spec(b, JS_DOFN, NO_PAYLOAD);
    const char *p = o.sides;
    while (p != NULL && *p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char *item = tb_alloc(b, len + 1);
        memcpy(item, p, len);
        char *colon = strchr(item, ':');
        *colon = '\0';
        Org__Apache__Beam__Model__Pipeline__V1__SideInput *si = tb_alloc(b, sizeof(*si));
        org__apache__beam__model__pipeline__v1__side_input__init(si);
        si->access_pattern =
            tb_spec(b,
                    strcmp(colon + 1, "multimap") == 0   ? SD_URN_SIDE_INPUT_MULTIMAP
                    : strcmp(colon + 1, "iterable") == 0 ? SD_URN_SIDE_INPUT_ITERABLE
                                                         : colon + 1,
                    NO_PAYLOAD);
        si->window_mapping_fn = tb_spec(b, SD_URN_WINDOW_MAPPING_GLOBAL, NO_PAYLOAD);
        Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload__SideInputsEntry *e =
            tb_alloc(b, sizeof(*e));
        org__apache__beam__model__pipeline__v1__par_do_payload__side_inputs_entry__init(e);
        e->key = item;
        e->value = si;
        tb_push(b, (void ***)&pd.side_inputs, &pd.n_side_inputs, e);
        p = comma ? comma + 1 : NULL;
    }
    if (o.state != NULL) {
        Org__Apache__Beam__Model__Pipeline__V1__BagStateSpec *bag = tb_alloc(b, sizeof(*bag));
        org__apache__beam__model__pipeline__v1__bag_state_spec__init(bag);
        bag->element_coder_id = tb_str(b, o.state);
        Org__Apache__Beam__Model__Pipeline__V1__StateSpec *ss = tb_alloc(b, sizeof(*ss));
        org__apache__beam__model__pipeline__v1__state_spec__init(ss);
        ss->spec_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_BAG_SPEC;
        ss->bag_spec = bag;
        ss->protocol = tb_spec(b, SD_URN_USER_STATE_BAG, NO_PAYLOAD);
        Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload__StateSpecsEntry *e =
            tb_alloc(b, sizeof(*e));
        org__apache__beam__model__pipeline__v1__par_do_payload__state_specs_entry__init(e);
        e->key = tb_str(b, "buffer");
        e->value = ss;
        tb_push(b, (void ***)&pd.state_specs, &pd.n_state_specs, e);
    }
    pd.requires_time_sorted_input = o.time_sorted;
    if (o.timer_coder != NULL) {
        Org__Apache__Beam__Model__Pipeline__V1__TimerFamilySpec *tf = tb_alloc(b, sizeof(*tf));
        org__apache__beam__model__pipeline__v1__timer_family_spec__init(tf);
        tf->time_domain =
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIME_DOMAIN__ENUM__PROCESSING_TIME;
        tf->timer_family_coder_id = tb_str(b, o.timer_coder);
        Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload__TimerFamilySpecsEntry *e =
            tb_alloc(b, sizeof(*e));
        org__apache__beam__model__pipeline__v1__par_do_payload__timer_family_specs_entry__init(e);
        e->key = tb_str(b, "flush");
        e->value = tf;
        tb_push(b, (void ***)&pd.timer_family_specs, &pd.n_timer_family_specs, e);
    }
    if (o.restriction_coder != NULL) {
        pd.restriction_coder_id = tb_str(b, o.restriction_coder);
    }
    return tb_pack(b, &pd.base);
}

static ProtobufCBinaryData tb_combine(tb *b, const char *acc)
{
    Org__Apache__Beam__Model__Pipeline__V1__CombinePayload cp;
    org__apache__beam__model__pipeline__v1__combine_payload__init(&cp);
    cp.combine_fn = tb_spec(b, "beam:dofn:serialized_js_combinefn_info:v1", NO_PAYLOAD);
    cp.accumulator_coder_id = tb_str(b, acc);
    return tb_pack(b, &cp.base);
}

static ProtobufCBinaryData tb_fixed(tb *b, int64_t size_ms, int64_t offset_ms)
{
    Org__Apache__Beam__Model__Pipeline__V1__FixedWindowsPayload f;
    org__apache__beam__model__pipeline__v1__fixed_windows_payload__init(&f);
    Google__Protobuf__Duration *d = tb_alloc(b, sizeof(*d));
    google__protobuf__duration__init(d);
    d->seconds = size_ms / 1000;
    d->nanos = (int32_t)(size_ms % 1000) * 1000000;
    f.size = d;
    Google__Protobuf__Timestamp *t = tb_alloc(b, sizeof(*t));
    google__protobuf__timestamp__init(t);
    t->seconds = offset_ms / 1000;
    t->nanos = (int32_t)(offset_ms % 1000) * 1000000;
    f.offset = t;
    return tb_pack(b, &f.base);
}

static ProtobufCBinaryData tb_sliding(tb *b, int64_t size_ms, int64_t period_ms)
{
    Org__Apache__Beam__Model__Pipeline__V1__SlidingWindowsPayload s;
    org__apache__beam__model__pipeline__v1__sliding_windows_payload__init(&s);
    Google__Protobuf__Duration *d = tb_alloc(b, sizeof(*d));
    google__protobuf__duration__init(d);
    d->seconds = size_ms / 1000;
    Google__Protobuf__Duration *p = tb_alloc(b, sizeof(*p));
    google__protobuf__duration__init(p);
    p->seconds = period_ms / 1000;
    s.size = d;
    s.period = p;
    return tb_pack(b, &s.base);
}

static ProtobufCBinaryData tb_sessions(tb *b, int64_t gap_ms)
{
    Org__Apache__Beam__Model__Pipeline__V1__SessionWindowsPayload s;
    org__apache__beam__model__pipeline__v1__session_windows_payload__init(&s);
    Google__Protobuf__Duration *d = tb_alloc(b, sizeof(*d));
    google__protobuf__duration__init(d);
    d->seconds = gap_ms / 1000;
    d->nanos = (int32_t)(gap_ms % 1000) * 1000000;
    s.gap_size = d;
    return tb_pack(b, &s.base);
}

/* Standard pieces most tests share: coders, global windowing, an external environment. */
static void tb_std(tb *b)
{
    tb_coder(b, "bytes", SD_URN_CODER_BYTES, "");
    tb_coder(b, "str", SD_URN_CODER_STRING_UTF8, "");
    tb_coder(b, "varint", SD_URN_CODER_VARINT, "");
    tb_coder(b, "gw", SD_URN_CODER_GLOBAL_WINDOW, "");
    tb_coder(b, "iw", SD_URN_CODER_INTERVAL_WINDOW, "");
    tb_coder(b, "gen", GEN, "");
    tb_coder(b, "kv_gen", SD_URN_CODER_KV, "gen,gen");
    tb_coder(b, "kv_str_gen", SD_URN_CODER_KV, "str,gen");
    tb_coder(b, "kv_str_varint", SD_URN_CODER_KV, "str,varint");
    tb_coder(b, "iter_gen", SD_URN_CODER_ITERABLE, "gen");
    tb_coder(b, "kv_gen_iter_gen", SD_URN_CODER_KV, "gen,iter_gen");
    tb_ws(b, "global", SD_URN_WINDOW_FN_GLOBAL, NO_PAYLOAD, "gw");
    tb_env(b, "js", SD_URN_ENV_EXTERNAL);
}

/* Pack and unpack (system allocator: unaffected by allocation failure injection). */
static pb_pipeline *tb_finish(tb *b)
{
    size_t len = protobuf_c_message_get_packed_size(&b->pipe.base);
    uint8_t *buf = sd_malloc(len);
    assert_non_null(buf);
    protobuf_c_message_pack(&b->pipe.base, buf);
    pb_pipeline *p = org__apache__beam__model__pipeline__v1__pipeline__unpack(NULL, len, buf);
    assert_non_null(p);
    sd_free(buf);
    for (size_t i = 0; i < b->n_allocs; i++) {
        sd_free(b->allocs[i]);
    }
    sd_free(b->allocs);
    return p;
}

static void free_pipeline(pb_pipeline *p)
{
    org__apache__beam__model__pipeline__v1__pipeline__free_unpacked(p, NULL);
}

/* ----------------------------------------------------------------------------------------- */
/* Plan helpers                                                                               */
/* ----------------------------------------------------------------------------------------- */

static const sd_plan_options OPTS = { .data_url = "localhost:1111",
                                      .state_url = "localhost:2222",
                                      .lift_combiners = true };

static sd_plan *build_ok(const pb_pipeline *p, const sd_plan_options *opt)
{
    sd_plan *plan = NULL;
    sd_err err = { 0 };
    sd_status st = sd_plan_build(p, opt, &plan, &err);
    if (st != SD_OK) {
        fail_msg("build failed: %s: %s", sd_status_name(st), sd_err_msg(&err));
    }
    const char *broken = sd__plan_check(plan);
    if (broken != NULL) {
        fail_msg("plan invariant broken: %s", broken);
    }
    return plan;
}

static const sd_plan_stage *stage_with(const sd_plan *plan, const char *tid)
{
    for (size_t i = 0; i < plan->n_stages; i++) {
        for (size_t j = 0; j < plan->stages[i].n_transforms; j++) {
            if (strcmp(plan->stages[i].transforms[j], tid) == 0) {
                return &plan->stages[i];
            }
        }
    }
    fail_msg("no stage holds transform %s", tid);
    return NULL;
}

static size_t stage_index(const sd_plan *plan, const sd_plan_stage *s)
{
    return (size_t)(s - plan->stages);
}

static const pb_transform *desc_transform(const pb_pbd *d, const char *id)
{
    for (size_t i = 0; i < d->n_transforms; i++) {
        if (strcmp(d->transforms[i]->key, id) == 0) {
            return d->transforms[i]->value;
        }
    }
    return NULL;
}

static const pb_pcoll *desc_pcoll(const pb_pbd *d, const char *id)
{
    for (size_t i = 0; i < d->n_pcollections; i++) {
        if (strcmp(d->pcollections[i]->key, id) == 0) {
            return d->pcollections[i]->value;
        }
    }
    return NULL;
}

static const pb_coder *desc_coder(const pb_pbd *d, const char *id)
{
    for (size_t i = 0; i < d->n_coders; i++) {
        if (strcmp(d->coders[i]->key, id) == 0) {
            return d->coders[i]->value;
        }
    }
    return NULL;
}

/* The descriptor's coder id must have this URN and these components ("a,b"). */
static void assert_desc_coder(const pb_pbd *d, const char *id, const char *urn, const char *comps)
{
    const pb_coder *k = desc_coder(d, id);
    if (k == NULL) {
        fail_msg("descriptor %s lacks coder %s", d->id, id);
    }
    assert_string_equal(k->spec->urn, urn);
    char joined[512] = "";
    for (size_t i = 0; i < k->n_component_coder_ids; i++) {
        strcat(joined, i ? "," : "");
        strcat(joined, k->component_coder_ids[i]);
    }
    assert_string_equal(joined, comps);
}

static const char *port_coder_of(const pb_transform *t)
{
    static char buf[256];
    Org__Apache__Beam__Model__FnExecution__V1__RemoteGrpcPort *rp =
        org__apache__beam__model__fn_execution__v1__remote_grpc_port__unpack(
            NULL, t->spec->payload.len, t->spec->payload.data);
    assert_non_null(rp);
    assert_string_equal(rp->api_service_descriptor->url, "localhost:1111");
    snprintf(buf, sizeof(buf), "%s", rp->coder_id);
    org__apache__beam__model__fn_execution__v1__remote_grpc_port__free_unpacked(rp, NULL);
    return buf;
}

/* ----------------------------------------------------------------------------------------- */
/* Pipelines                                                                                  */
/* ----------------------------------------------------------------------------------------- */

/*
 * The TypeScript word-count shape: impulse -> create (flatMap) -> split -> pair (KV) ->
 * combine_per_key composite [gbk, combine map] -> format.
 */
static pb_pipeline *wordcount(void)
{
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_lines", "gen", "global");
    tb_pcoll(&b, "p_words", "gen", "global");
    tb_pcoll(&b, "p_kv", "kv_gen", "global");
    tb_pcoll(&b, "p_grouped", "kv_gen_iter_gen", "global");
    tb_pcoll(&b, "p_counts", "kv_gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "create", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_lines", NULL);
    tb_transform(&b, "split", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_lines",
                 "out=p_words", NULL);
    tb_transform(&b, "pair", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_words",
                 "out=p_kv", NULL);
    tb_transform(&b, "count", SD_URN_TRANSFORM_COMBINE_PER_KEY, tb_combine(&b, "gen"), "js",
                 "in=p_kv", "out=p_counts", "count/gbk,count/combine");
    tb_transform(&b, "count/gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv",
                 "out=p_grouped", NULL);
    tb_transform(&b, "count/combine", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                 "in=p_grouped", "out=p_counts", NULL);
    tb_transform(&b, "format", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_counts",
                 "out=p_out", NULL);
    tb_transform(&b, "root", NULL, NO_PAYLOAD, "js", "", "",
                 "impulse,create,split,pair,count,format");
    tb_root(&b, "root");
    return tb_finish(&b);
}

/* ----------------------------------------------------------------------------------------- */
/* Tests                                                                                      */
/* ----------------------------------------------------------------------------------------- */

static void test_wordcount_lifted(void **state)
{
    (void)state;
    pb_pipeline *p = wordcount();
    sd_plan *plan = build_ok(p, &OPTS);

    assert_int_equal(plan->n_stages, 4);
    assert_int_equal(plan->stages[0].kind, SD_PLAN_STAGE_IMPULSE);
    assert_int_equal(plan->stages[1].kind, SD_PLAN_STAGE_SDK);
    assert_int_equal(plan->stages[2].kind, SD_PLAN_STAGE_GBK);
    assert_int_equal(plan->stages[3].kind, SD_PLAN_STAGE_SDK);
    assert_string_equal(plan->stages[0].id, "stage-001");
    assert_string_equal(plan->stages[3].id, "stage-004");
    assert_int_equal(plan->teststream_stage, SD_PLAN_NONE);

    const sd_plan_stage *s1 = &plan->stages[1];
    assert_int_equal(s1->n_transforms, 4);
    assert_string_equal(s1->transforms[0], "create");
    assert_string_equal(s1->transforms[1], "split");
    assert_string_equal(s1->transforms[2], "pair");
    assert_string_equal(s1->transforms[3], "count/Precombine");
    assert_string_equal(s1->environment_id, "js");
    assert_string_equal(s1->inputs[0], "p_imp");
    assert_int_equal(s1->n_outputs, 1);
    assert_string_equal(s1->outputs[0].pcollection, "count/lifted");
    assert_int_equal(s1->n_upstream, 1);
    assert_int_equal(s1->upstream[0], 0);

    const sd_plan_stage *gbk = &plan->stages[2];
    assert_string_equal(gbk->transforms[0], "count/Group");
    assert_string_equal(gbk->inputs[0], "count/lifted");
    assert_string_equal(gbk->outputs[0].pcollection, "count/grouped");
    assert_null(gbk->outputs[0].sink_transform);
    assert_string_equal(gbk->windowing_strategy_id, "global");
    assert_string_equal(gbk->key_coder_id, "gen_lp");
    assert_string_equal(gbk->value_coder_id, "gen_lp");
    assert_string_equal(gbk->environment_id, "");

    const sd_plan_stage *s3 = &plan->stages[3];
    assert_int_equal(s3->n_transforms, 3);
    assert_string_equal(s3->transforms[0], "count/Merge");
    assert_string_equal(s3->transforms[1], "count/Extract");
    assert_string_equal(s3->transforms[2], "format");
    assert_int_equal(s3->n_outputs, 0); /* the leaf output has no consumer: no sink */

    /* The PCollection table: only boundary PCollections, with wire and port coders. */
    assert_int_equal(plan->n_pcollections, 3);
    const sd_plan_pcollection *imp = sd_plan_find_pcollection(plan, "p_imp");
    assert_non_null(imp);
    assert_string_equal(imp->wire_coder_id, "bytes");
    assert_string_equal(imp->port_coder_id, "wv:bytes:gw");
    assert_int_equal(imp->producer_stage, 0);
    assert_int_equal(imp->n_consumers, 1);
    assert_int_equal(imp->consumers[0].stage, 1);
    assert_false(imp->consumers[0].side_input);
    assert_null(sd_plan_find_pcollection(plan, "p_words"));
    const sd_plan_pcollection *lifted = sd_plan_find_pcollection(plan, "count/lifted");
    assert_string_equal(lifted->coder_id, "count/kv_acc");
    assert_string_equal(lifted->wire_coder_id, "count/kv_acc_lp");
    assert_string_equal(lifted->windowing->id, "global");
    assert_int_equal(lifted->windowing->kind, SD_PLAN_WINDOW_GLOBAL);
    assert_true(lifted->bounded);
    const sd_plan_pcollection *grouped = sd_plan_find_pcollection(plan, "count/grouped");
    assert_string_equal(grouped->wire_coder_id, "count/kv_acc_iter_lp");

    /* The coder table holds the synthesized coders. */
    const sd_plan_coder *kia = sd_plan_find_coder(plan, "count/kv_acc_iter_lp");
    assert_non_null(kia);
    assert_string_equal(kia->urn, SD_URN_CODER_KV);
    assert_int_equal(kia->n_components, 2);
    assert_string_equal(kia->components[0], "gen_lp");
    assert_string_equal(kia->components[1], "count/acc_iter_lp");
    const sd_plan_coder *lp = sd_plan_find_coder(plan, "gen_lp");
    assert_string_equal(lp->urn, SD_URN_CODER_LENGTH_PREFIX);
    assert_string_equal(lp->components[0], "gen");

    /* Descriptor of stage 2: source, fused transforms, one sink. */
    const pb_pbd *d = s1->descriptor;
    assert_string_equal(d->id, "stage-002");
    assert_int_equal(d->n_transforms, 6);
    const pb_transform *src = desc_transform(d, s1->source_transform);
    assert_non_null(src);
    assert_string_equal(src->spec->urn, SD_URN_RUNNER_SOURCE);
    assert_string_equal(src->outputs[0]->value, "p_imp");
    assert_string_equal(port_coder_of(src), "wv:bytes:gw");
    const pb_transform *sink = desc_transform(d, s1->outputs[0].sink_transform);
    assert_non_null(sink);
    assert_string_equal(sink->spec->urn, SD_URN_RUNNER_SINK);
    assert_string_equal(sink->inputs[0]->value, "count/lifted");
    assert_string_equal(port_coder_of(sink), "wv:count/kv_acc_lp:gw");
    const pb_transform *pre = desc_transform(d, "count/Precombine");
    assert_string_equal(pre->spec->urn, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE);
    assert_string_equal(pre->environment_id, "js");
    /* The descriptor's boundary PCollection carries the wire coder; internal ones do not. */
    assert_string_equal(desc_pcoll(d, "count/lifted")->coder_id, "count/kv_acc_lp");
    assert_string_equal(desc_pcoll(d, "p_words")->coder_id, "gen");
    assert_desc_coder(d, "count/kv_acc_lp", SD_URN_CODER_KV, "gen_lp,gen_lp");
    assert_desc_coder(d, "gen_lp", SD_URN_CODER_LENGTH_PREFIX, "gen");
    assert_desc_coder(d, "wv:count/kv_acc_lp:gw", SD_URN_CODER_WINDOWED_VALUE,
                      "count/kv_acc_lp,gw");
    assert_non_null(d->state_api_service_descriptor);
    assert_string_equal(d->state_api_service_descriptor->url, "localhost:2222");
    assert_null(d->timer_api_service_descriptor);
    assert_int_equal(d->n_environments, 1);
    assert_string_equal(d->environments[0]->key, "js");
    assert_int_equal(d->n_windowing_strategies, 1);

    /* Packed bytes and message agree. */
    pb_pbd *again = org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__unpack(
        NULL, s1->descriptor_bytes.len, s1->descriptor_bytes.ptr);
    assert_non_null(again);
    assert_string_equal(again->id, "stage-002");
    org__apache__beam__model__fn_execution__v1__process_bundle_descriptor__free_unpacked(again,
                                                                                         NULL);

    assert_int_equal(plan->n_environments, 1);
    assert_string_equal(plan->environments[0].urn, SD_URN_ENV_EXTERNAL);

    sd_buf text;
    sd_buf_init(&text, 0);
    assert_int_equal(sd_plan_describe(plan, &text), SD_OK);
    assert_int_equal(sd_buf_append_byte(&text, 0), SD_OK);
    const char *expect_first = "stage-001 impulse [impulse] in= out=p_imp\n"
                               "stage-002 sdk env=js [create, split, pair, count/Precombine] "
                               "in=p_imp out=count/lifted\n";
    assert_memory_equal(text.data, expect_first, strlen(expect_first));
    assert_non_null(strstr((const char *)text.data,
                           "pcollection count/lifted coder=count/kv_acc wire=count/kv_acc_lp"));
    sd_buf_deinit(&text);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_wordcount_unlifted(void **state)
{
    (void)state;
    pb_pipeline *p = wordcount();
    sd_plan_options o = OPTS;
    o.lift_combiners = false;
    sd_plan *plan = build_ok(p, &o);
    assert_int_equal(plan->n_stages, 4);
    assert_int_equal(plan->stages[2].kind, SD_PLAN_STAGE_GBK);
    assert_string_equal(plan->stages[2].transforms[0], "count/gbk");
    assert_int_equal(plan->stages[1].n_transforms, 3);
    assert_string_equal(plan->stages[1].transforms[2], "pair");
    assert_string_equal(plan->stages[3].transforms[0], "count/combine");
    const sd_plan_pcollection *kv = sd_plan_find_pcollection(plan, "p_kv");
    assert_string_equal(kv->wire_coder_id, "kv_gen_lp");
    const sd_plan_pcollection *g = sd_plan_find_pcollection(plan, "p_grouped");
    assert_string_equal(g->wire_coder_id, "kv_gen_iter_gen_lp");
    const sd_plan_coder *k = sd_plan_find_coder(plan, "kv_gen_iter_gen_lp");
    assert_string_equal(k->components[0], "gen_lp");
    assert_string_equal(k->components[1], "iter_gen_lp");
    const sd_plan_coder *it = sd_plan_find_coder(plan, "iter_gen_lp");
    assert_string_equal(it->urn, SD_URN_CODER_ITERABLE);
    assert_string_equal(it->components[0], "gen_lp");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* Deterministic: two builds give identical descriptor bytes. */
static void test_deterministic(void **state)
{
    (void)state;
    pb_pipeline *p = wordcount();
    sd_plan *a = build_ok(p, &OPTS);
    sd_plan *b = build_ok(p, &OPTS);
    assert_int_equal(a->n_stages, b->n_stages);
    for (size_t i = 0; i < a->n_stages; i++) {
        assert_string_equal(a->stages[i].id, b->stages[i].id);
        assert_int_equal(a->stages[i].descriptor_bytes.len, b->stages[i].descriptor_bytes.len);
        if (a->stages[i].descriptor_bytes.len > 0) {
            assert_memory_equal(a->stages[i].descriptor_bytes.ptr,
                                b->stages[i].descriptor_bytes.ptr,
                                a->stages[i].descriptor_bytes.len);
        }
    }
    sd_plan_destroy(a);
    sd_plan_destroy(b);
    free_pipeline(p);
}

/* Keyed pipeline with a windowing strategy: impulse -> kv -> gbk -> out. */
static pb_pipeline *windowed_gbk(const char *fn, ProtobufCBinaryData (*payload)(tb *), bool lift)
{
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_ws(&b, "win", fn, payload(&b), strcmp(fn, SD_URN_WINDOW_FN_GLOBAL) == 0 ? "gw" : "iw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "win");
    tb_pcoll(&b, "p_g", "kv_str_varint", "win");
    tb_pcoll(&b, "p_out", "kv_str_varint", "win");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "window", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_kv", NULL);
    if (lift) {
        tb_transform(&b, "sum", SD_URN_TRANSFORM_COMBINE_PER_KEY, tb_combine(&b, "varint"), "js",
                     "in=p_kv", "out=p_out", "sum/gbk,sum/fn");
        tb_transform(&b, "sum/gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv",
                     "out=p_g", NULL);
        tb_transform(&b, "sum/fn", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_g",
                     "out=p_out", NULL);
        tb_root(&b, "sum");
    } else {
        tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                     NULL);
        tb_root(&b, "gbk");
    }
    tb_root(&b, "impulse");
    tb_root(&b, "window");
    return tb_finish(&b);
}

static ProtobufCBinaryData pay_none(tb *b)
{
    (void)b;
    return NO_PAYLOAD;
}

static ProtobufCBinaryData pay_fixed(tb *b)
{
    return tb_fixed(b, 60000, 1500);
}

static ProtobufCBinaryData pay_sliding(tb *b)
{
    return tb_sliding(b, 60000, 10000);
}

static ProtobufCBinaryData pay_sessions(tb *b)
{
    return tb_sessions(b, 30500);
}

static void test_windowing_table(void **state)
{
    static const struct {
        const char *name;
        const char *fn;
        ProtobufCBinaryData (*payload)(tb *);
        sd_plan_window_kind kind;
        int64_t size, period, offset, gap;
        sd_plan_merge merge;
        bool lifted;
    } rows[] = {
        { "global", SD_URN_WINDOW_FN_GLOBAL, pay_none, SD_PLAN_WINDOW_GLOBAL, 0, 0, 0, 0,
          SD_PLAN_MERGE_NON_MERGING, true },
        { "fixed", SD_URN_WINDOW_FN_FIXED, pay_fixed, SD_PLAN_WINDOW_FIXED, 60000, 0, 1500, 0,
          SD_PLAN_MERGE_NON_MERGING, true },
        { "sliding", SD_URN_WINDOW_FN_SLIDING, pay_sliding, SD_PLAN_WINDOW_SLIDING, 60000, 10000, 0,
          0, SD_PLAN_MERGE_NON_MERGING, true },
        { "sessions", SD_URN_WINDOW_FN_SESSION, pay_sessions, SD_PLAN_WINDOW_SESSIONS, 0, 0, 0,
          30500, SD_PLAN_MERGE_NEEDS_MERGE, false },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        print_message("row %s\n", rows[i].name);
        pb_pipeline *p = windowed_gbk(rows[i].fn, rows[i].payload, true);
        sd_plan *plan = build_ok(p, &OPTS);
        const sd_plan_windowing *w = sd_plan_find_windowing(plan, "win");
        assert_non_null(w);
        assert_int_equal(w->kind, rows[i].kind);
        assert_int_equal(w->size_ms, rows[i].size);
        assert_int_equal(w->period_ms, rows[i].period);
        assert_int_equal(w->offset_ms, rows[i].offset);
        assert_int_equal(w->gap_ms, rows[i].gap);
        assert_int_equal(w->merge, rows[i].merge);
        assert_int_equal(w->output_time, SD_PLAN_OUTPUT_END_OF_WINDOW);
        assert_int_equal(w->accumulation, SD_PLAN_DISCARDING);
        assert_int_equal(w->closing, SD_PLAN_EMIT_ALWAYS);
        assert_null(w->trigger);
        assert_int_equal(w->interval_windows, strcmp(rows[i].fn, SD_URN_WINDOW_FN_GLOBAL) != 0);
        /* Sessions merge: the combine is not lifted, its GBK runs in the runner. */
        const sd_plan_stage *g = &plan->stages[2];
        assert_int_equal(g->kind, SD_PLAN_STAGE_GBK);
        assert_string_equal(g->transforms[0], rows[i].lifted ? "sum/Group" : "sum/gbk");
        assert_string_equal(g->windowing_strategy_id, "win");
        const sd_plan_pcollection *in = sd_plan_find_pcollection(plan, g->inputs[0]);
        assert_string_equal(in->window_coder_id,
                            strcmp(rows[i].fn, SD_URN_WINDOW_FN_GLOBAL) == 0 ? "gw" : "iw");
        sd_plan_destroy(plan);
        free_pipeline(p);
    }
}

/*
 * Window fn payloads whose Duration/Timestamp fields are raw client values. The payload
 * callback of windowed_gbk() takes only the builder, so the row being built is passed in
 * raw_row (the tests are single-threaded).
 */
typedef struct raw_window {
    const char *name;
    const char *fn;
    int64_t seconds[3]; /* fixed: size, offset; sliding: size, period, offset; sessions: gap */
    int32_t nanos[3];
    const char *needle;
} raw_window;

static const raw_window *raw_row;

static void expect_rejected(pb_pipeline *p, sd_status code, const char *const *needles);

static Google__Protobuf__Duration *raw_duration(tb *b, int k)
{
    Google__Protobuf__Duration *d = tb_alloc(b, sizeof(*d));
    google__protobuf__duration__init(d);
    d->seconds = raw_row->seconds[k];
    d->nanos = raw_row->nanos[k];
    return d;
}

static Google__Protobuf__Timestamp *raw_timestamp(tb *b, int k)
{
    Google__Protobuf__Timestamp *t = tb_alloc(b, sizeof(*t));
    google__protobuf__timestamp__init(t);
    t->seconds = raw_row->seconds[k];
    t->nanos = raw_row->nanos[k];
    return t;
}

static ProtobufCBinaryData pay_raw(tb *b)
{
    if (strcmp(raw_row->fn, SD_URN_WINDOW_FN_FIXED) == 0) {
        Org__Apache__Beam__Model__Pipeline__V1__FixedWindowsPayload f;
        org__apache__beam__model__pipeline__v1__fixed_windows_payload__init(&f);
        f.size = raw_duration(b, 0);
        f.offset = raw_timestamp(b, 1);
        return tb_pack(b, &f.base);
    }
    if (strcmp(raw_row->fn, SD_URN_WINDOW_FN_SLIDING) == 0) {
        Org__Apache__Beam__Model__Pipeline__V1__SlidingWindowsPayload s;
        org__apache__beam__model__pipeline__v1__sliding_windows_payload__init(&s);
        s.size = raw_duration(b, 0);
        s.period = raw_duration(b, 1);
        s.offset = raw_timestamp(b, 2);
        return tb_pack(b, &s.base);
    }
    Org__Apache__Beam__Model__Pipeline__V1__SessionWindowsPayload g;
    org__apache__beam__model__pipeline__v1__session_windows_payload__init(&g);
    g.gap_size = raw_duration(b, 0);
    return tb_pack(b, &g.base);
}

/*
 * Durations and timestamps that do not fit in int64 milliseconds are rejected with a message
 * naming the field; converting them once was signed overflow (a UBSan abort). The last rows
 * are the largest values that fit, which must still be accepted.
 */
static void test_windowing_overflow(void **state)
{
    static const raw_window rows[] = {
        { "fixed size INT64_MAX s", SD_URN_WINDOW_FN_FIXED, { INT64_MAX, 0 }, { 0 },
          "windowing strategy \"win\" has a fixed window size of 9223372036854775807 seconds, "
          "which overflows milliseconds" },
        { "fixed size INT64_MIN s", SD_URN_WINDOW_FN_FIXED, { INT64_MIN, 0 }, { 0 },
          "fixed window size of -9223372036854775808 seconds, which overflows milliseconds" },
        { "fixed size: the nanos overflow", SD_URN_WINDOW_FN_FIXED, { INT64_MAX / 1000, 0 },
          { 999999999, 0 }, "fixed window size of 9223372036854775 seconds" },
        { "fixed offset INT64_MAX s", SD_URN_WINDOW_FN_FIXED, { 60, INT64_MAX }, { 0 },
          "fixed window offset of 9223372036854775807 seconds, which overflows milliseconds" },
        { "fixed offset -INT64_MAX s", SD_URN_WINDOW_FN_FIXED, { 60, -INT64_MAX }, { 0 },
          "fixed window offset of -9223372036854775807 seconds" },
        { "sliding size", SD_URN_WINDOW_FN_SLIDING, { INT64_MAX, 10, 0 }, { 0 },
          "sliding window size of 9223372036854775807 seconds" },
        { "sliding period", SD_URN_WINDOW_FN_SLIDING, { 60, -INT64_MAX, 0 }, { 0 },
          "sliding window period of -9223372036854775807 seconds" },
        { "sliding offset", SD_URN_WINDOW_FN_SLIDING, { 60, 10, INT64_MIN }, { 0 },
          "sliding window offset of -9223372036854775808 seconds" },
        { "sliding offset: the nanos underflow", SD_URN_WINDOW_FN_SLIDING,
          { 60, 10, INT64_MIN / 1000 }, { 0, 0, -999999999 },
          "sliding window offset of -9223372036854775 seconds" },
        { "session gap", SD_URN_WINDOW_FN_SESSION, { INT64_MAX }, { 0 },
          "session gap of 9223372036854775807 seconds, which overflows milliseconds" },
        { "largest fixed size that fits", SD_URN_WINDOW_FN_FIXED, { INT64_MAX / 1000, 0 },
          { 807000000, 0 }, NULL },
        { "smallest sliding offset that fits", SD_URN_WINDOW_FN_SLIDING,
          { 60, 10, INT64_MIN / 1000 }, { 0, 0, -808000000 }, NULL },
    };
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        print_message("row %s\n", rows[i].name);
        raw_row = &rows[i];
        pb_pipeline *p = windowed_gbk(rows[i].fn, pay_raw, false);
        if (rows[i].needle != NULL) {
            const char *needles[] = { rows[i].needle, NULL };
            expect_rejected(p, SD_EINVAL, needles);
        } else {
            sd_plan *plan = build_ok(p, &OPTS);
            const sd_plan_windowing *w = sd_plan_find_windowing(plan, "win");
            assert_non_null(w);
            if (w->kind == SD_PLAN_WINDOW_FIXED) {
                assert_true(w->size_ms == INT64_MAX);
            } else {
                assert_true(w->offset_ms == INT64_MIN);
            }
            sd_plan_destroy(plan);
        }
        free_pipeline(p);
    }
    raw_row = NULL;
}

/* ClosingBehavior: EMIT_ALWAYS and EMIT_IF_NONEMPTY as given; UNSPECIFIED is Java's default,
 * FIRE_IF_NON_EMPTY. */
static void test_closing_behavior(void **state)
{
    static const struct {
        Org__Apache__Beam__Model__Pipeline__V1__ClosingBehavior__Enum in;
        sd_plan_closing want;
    } rows[] = {
        { ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_ALWAYS,
          SD_PLAN_EMIT_ALWAYS },
        { ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_IF_NONEMPTY,
          SD_PLAN_EMIT_IF_NONEMPTY },
        { ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__UNSPECIFIED,
          SD_PLAN_EMIT_IF_NONEMPTY },
    };
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        pb_pipeline *p = windowed_gbk(SD_URN_WINDOW_FN_FIXED, pay_fixed, false);
        for (size_t k = 0; k < p->components->n_windowing_strategies; k++) {
            if (strcmp(p->components->windowing_strategies[k]->key, "win") == 0) {
                p->components->windowing_strategies[k]->value->closing_behavior = rows[i].in;
            }
        }
        sd_plan *plan = build_ok(p, &OPTS);
        const sd_plan_windowing *w = sd_plan_find_windowing(plan, "win");
        assert_non_null(w);
        assert_int_equal(w->closing, rows[i].want);
        sd_plan_destroy(plan);
        free_pipeline(p);
    }
}

static void test_trigger_tree(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    /* Repeat(AfterEndOfWindow(early = ElementCount(3))) with ACCUMULATING. */
    Org__Apache__Beam__Model__Pipeline__V1__Trigger count, eow, rep;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__ElementCount ec;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__AfterEndOfWindow ae;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__Repeat rp;
    org__apache__beam__model__pipeline__v1__trigger__init(&count);
    org__apache__beam__model__pipeline__v1__trigger__init(&eow);
    org__apache__beam__model__pipeline__v1__trigger__init(&rep);
    org__apache__beam__model__pipeline__v1__trigger__element_count__init(&ec);
    org__apache__beam__model__pipeline__v1__trigger__after_end_of_window__init(&ae);
    org__apache__beam__model__pipeline__v1__trigger__repeat__init(&rp);
    ec.element_count = 3;
    count.trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_ELEMENT_COUNT;
    count.element_count = &ec;
    ae.early_firings = &count;
    eow.trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_END_OF_WINDOW;
    eow.after_end_of_window = &ae;
    rp.subtrigger = &eow;
    rep.trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_REPEAT;
    rep.repeat = &rp;
    pb_wstrat *w = tb_ws(&b, "trig", SD_URN_WINDOW_FN_FIXED, tb_fixed(&b, 1000, 0), "iw");
    w->trigger = &rep;
    w->accumulation_mode =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__ACCUMULATING;
    w->allowed_lateness = 5000;
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "trig");
    tb_pcoll(&b, "p_g", "kv_str_varint", "trig");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_windowing *win = sd_plan_find_windowing(plan, "trig");
    assert_non_null(win->trigger);
    assert_int_equal(win->trigger->kind, SD_PLAN_TRIGGER_REPEAT);
    assert_int_equal(win->trigger->n_subtriggers, 1);
    const sd_plan_trigger *e = &win->trigger->subtriggers[0];
    assert_int_equal(e->kind, SD_PLAN_TRIGGER_AFTER_END_OF_WINDOW);
    assert_non_null(e->early);
    assert_null(e->late);
    assert_int_equal(e->early->kind, SD_PLAN_TRIGGER_ELEMENT_COUNT);
    assert_int_equal(e->early->element_count, 3);
    assert_int_equal(win->accumulation, SD_PLAN_ACCUMULATING);
    assert_int_equal(win->allowed_lateness_ms, 5000);
    sd_plan_destroy(plan);

    /* default_trigger_only rejects it. */
    sd_plan_options o = OPTS;
    o.default_trigger_only = true;
    sd_err err = { 0 };
    assert_int_equal(sd_plan_validate_ex(p, &o, NULL, &err), SD_EUNIMPL);
    assert_non_null(strstr(sd_err_msg(&err), "non-default trigger"));
    free_pipeline(p);
}

/* Java's continuation of AfterProcessingTime (the trigger of a GroupByKey downstream of one
 * triggered by processing time): accepted, and translated for the engine. */
static void test_trigger_synchronized_processing_time(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    Org__Apache__Beam__Model__Pipeline__V1__Trigger sync, rep;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__AfterSynchronizedProcessingTime sp;
    Org__Apache__Beam__Model__Pipeline__V1__Trigger__Repeat rp;
    org__apache__beam__model__pipeline__v1__trigger__init(&sync);
    org__apache__beam__model__pipeline__v1__trigger__init(&rep);
    org__apache__beam__model__pipeline__v1__trigger__after_synchronized_processing_time__init(&sp);
    org__apache__beam__model__pipeline__v1__trigger__repeat__init(&rp);
    sync.trigger_case =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME;
    sync.after_synchronized_processing_time = &sp;
    rp.subtrigger = &sync;
    rep.trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_REPEAT;
    rep.repeat = &rp;
    pb_wstrat *w = tb_ws(&b, "trig", SD_URN_WINDOW_FN_GLOBAL, NO_PAYLOAD, "gw");
    w->trigger = &rep;
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "trig");
    tb_pcoll(&b, "p_g", "kv_str_varint", "trig");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_windowing *win = sd_plan_find_windowing(plan, "trig");
    assert_non_null(win->trigger);
    assert_int_equal(win->trigger->kind, SD_PLAN_TRIGGER_REPEAT);
    assert_int_equal(win->trigger->n_subtriggers, 1);
    assert_int_equal(win->trigger->subtriggers[0].kind,
                     SD_PLAN_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_flatten(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "gen", "global");
    tb_pcoll(&b, "p_b", "str", "global");
    tb_pcoll(&b, "p_all", "gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_b",
                 NULL);
    tb_transform(&b, "flat", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "", "x=p_a,y=p_b", "out=p_all",
                 NULL);
    tb_transform(&b, "use", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_all",
                 "out=p_out", NULL);
    pb_pipeline *p = tb_finish(&b); /* no roots: derived from the tree */
    sd_plan *plan = build_ok(p, &OPTS);
    /* impulse, a, b, flatten, use: a and b each read the runner's impulse output. */
    assert_int_equal(plan->n_stages, 5);
    const sd_plan_stage *f = stage_with(plan, "flat");
    assert_int_equal(f->kind, SD_PLAN_STAGE_FLATTEN);
    assert_int_equal(f->n_inputs, 2);
    assert_string_equal(f->inputs[0], "p_a");
    /* p_b (str) differs from the output (gen): an SDK-side Flatten in b's stage re-encodes it
     * into a PCollection of its own; p_a has the output's coder and is read directly. */
    assert_string_equal(f->inputs[1], "flat/transcoded/y");
    assert_string_equal(f->outputs[0].pcollection, "p_all");
    assert_int_equal(f->n_upstream, 2);
    /* Every input arrives in the output's wire coder so bytes concatenate. */
    assert_string_equal(sd_plan_find_pcollection(plan, "p_all")->wire_coder_id, "gen_lp");
    assert_string_equal(sd_plan_find_pcollection(plan, "p_a")->wire_coder_id, "gen_lp");
    assert_string_equal(sd_plan_find_pcollection(plan, "flat/transcoded/y")->wire_coder_id,
                        "gen_lp");
    assert_null(sd_plan_find_pcollection(plan, "p_b")); /* stage-internal now */
    const sd_plan_stage *sb = stage_with(plan, "b");
    assert_ptr_equal(sb, stage_with(plan, "flat/Transcode/y"));
    assert_int_equal(sb->n_outputs, 1);
    assert_string_equal(sb->outputs[0].pcollection, "flat/transcoded/y");
    assert_string_equal(sb->outputs[0].port_coder_id, "wv:gen_lp:gw");
    assert_string_equal(desc_pcoll(sb->descriptor, "p_b")->coder_id, "str");
    assert_string_equal(desc_pcoll(sb->descriptor, "flat/transcoded/y")->coder_id, "gen_lp");
    const pb_transform *tt = desc_transform(sb->descriptor, "flat/Transcode/y");
    assert_non_null(tt);
    assert_string_equal(tt->spec->urn, SD_URN_TRANSFORM_FLATTEN);
    assert_string_equal(tt->environment_id, "js");
    assert_true(stage_index(plan, f) > stage_index(plan, sb));
    assert_true(stage_index(plan, stage_with(plan, "use")) > stage_index(plan, f));
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's test_flatten_and_gbk shape: p_kv (a KV) feeds both a GroupByKey and a Flatten whose
 * output coder is another (gen). The GBK must still see a KV coder; only the Flatten's side is
 * re-encoded (Python's Flatten carries its environment: the transcoders use the producers').
 */
static void test_flatten_transcode_keeps_gbk_coder(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "kv_str_iter_varint", SD_URN_CODER_KV, "str,iter_varint");
    tb_coder(&b, "iter_varint", SD_URN_CODER_ITERABLE, "varint");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "global");
    tb_pcoll(&b, "p_s", "str", "global");
    tb_pcoll(&b, "p_all", "gen", "global");
    tb_pcoll(&b, "p_g", "kv_str_iter_varint", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_s",
                 NULL);
    tb_transform(&b, "flat", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=p_kv,1=p_s",
                 "out=p_all", NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_pcollection *kv = sd_plan_find_pcollection(plan, "p_kv");
    assert_non_null(kv);
    assert_string_equal(kv->wire_coder_id, "kv_str_varint");
    assert_string_equal(kv->port_coder_id, "wv:kv_str_varint:gw");
    const sd_plan_stage *g = stage_with(plan, "gbk");
    assert_string_equal(g->inputs[0], "p_kv");
    assert_string_equal(g->key_coder_id, "str");
    assert_string_equal(g->value_coder_id, "varint");
    const sd_plan_stage *f = stage_with(plan, "flat");
    assert_int_equal(f->n_inputs, 2);
    assert_string_equal(f->inputs[0], "flat/transcoded/0");
    assert_string_equal(f->inputs[1], "flat/transcoded/1");
    for (size_t i = 0; i < 2; i++) {
        const sd_plan_pcollection *in = sd_plan_find_pcollection(plan, f->inputs[i]);
        assert_non_null(in);
        assert_string_equal(in->wire_coder_id, "gen_lp");
        assert_string_equal(in->port_coder_id, "wv:gen_lp:gw");
    }
    /* a's stage writes p_kv twice: as itself (for the GBK) and re-encoded (for the Flatten). */
    const sd_plan_stage *sa = stage_with(plan, "a");
    assert_ptr_equal(sa, stage_with(plan, "flat/Transcode/0"));
    assert_int_equal(sa->n_outputs, 2);
    assert_string_equal(sa->outputs[0].pcollection, "flat/transcoded/0");
    assert_string_equal(sa->outputs[0].port_coder_id, "wv:gen_lp:gw");
    assert_string_equal(sa->outputs[1].pcollection, "p_kv");
    assert_string_equal(sa->outputs[1].port_coder_id, "wv:kv_str_varint:gw");
    assert_string_equal(desc_pcoll(sa->descriptor, "p_kv")->coder_id, "kv_str_varint");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's test_flattened_side_input shape: side = Flatten(p1, p2) is read as a side input
 * and flattened again with p3 into another coder. side keeps its own coder for the side input;
 * the second Flatten gets side re-encoded by an SDK stage of its own (side's producer is the
 * runner), whose source reads side in side's coder.
 */
static void test_flatten_of_flatten_side_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p1", "kv_str_varint", "global");
    tb_pcoll(&b, "p2", "kv_str_varint", "global");
    tb_pcoll(&b, "p3", "str", "global");
    tb_pcoll(&b, "side", "kv_str_varint", "global");
    tb_pcoll(&b, "p_main", "bytes", "global");
    tb_pcoll(&b, "p_use", "gen", "global");
    tb_pcoll(&b, "after", "gen", "global");
    pardo_opts none = { 0 };
    pardo_opts sides = { .sides = "s:multimap" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "c1", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p1",
                 NULL);
    tb_transform(&b, "c2", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p2",
                 NULL);
    tb_transform(&b, "c3", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p3",
                 NULL);
    tb_transform(&b, "main", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_main", NULL);
    tb_transform(&b, "flat1", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=p1,1=p2", "out=side",
                 NULL);
    tb_transform(&b, "use", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sides), "js", "in=p_main,s=side",
                 "out=p_use", NULL);
    tb_transform(&b, "flat2", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=side,1=p3",
                 "out=after", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    /* flat1's inputs already have its output's coder: read as they are. */
    const sd_plan_stage *f1 = stage_with(plan, "flat1");
    assert_string_equal(f1->inputs[0], "p1");
    assert_string_equal(f1->inputs[1], "p2");
    const sd_plan_pcollection *side = sd_plan_find_pcollection(plan, "side");
    assert_string_equal(side->wire_coder_id, "kv_str_varint");
    assert_string_equal(sd_plan_find_pcollection(plan, "p1")->wire_coder_id, "kv_str_varint");
    assert_string_equal(desc_pcoll(stage_with(plan, "use")->descriptor, "side")->coder_id,
                        "kv_str_varint");
    const sd_plan_stage *f2 = stage_with(plan, "flat2");
    assert_string_equal(f2->inputs[0], "flat2/transcoded/0");
    assert_string_equal(f2->inputs[1], "flat2/transcoded/1");
    const sd_plan_stage *t0 = stage_with(plan, "flat2/Transcode/0");
    assert_int_equal(t0->kind, SD_PLAN_STAGE_SDK);
    assert_int_equal(t0->n_transforms, 1);
    assert_string_equal(t0->inputs[0], "side");
    assert_string_equal(t0->source_port_coder_id, "wv:kv_str_varint:gw");
    assert_string_equal(t0->outputs[0].pcollection, "flat2/transcoded/0");
    assert_string_equal(t0->outputs[0].port_coder_id, "wv:gen_lp:gw");
    assert_true(stage_index(plan, t0) > stage_index(plan, f1));
    assert_true(stage_index(plan, f2) > stage_index(plan, t0));
    /* side is consumed by the side-input reader and by the transcoding stage. */
    assert_int_equal(side->n_consumers, 2);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's test_flatten_same_pcollections: Flatten(pc, pc, pc) must yield every element three
 * times. The engine reads each input PCollection once, so each repeated listing gets its own
 * runner-side copy (a one-input Flatten); coders match, so nothing is transcoded.
 */
static void test_flatten_repeated_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "str", "global");
    tb_pcoll(&b, "p_all", "str", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "flat", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=p_a,1=p_a,2=p_a",
                 "out=p_all", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *f = stage_with(plan, "flat");
    assert_int_equal(f->n_inputs, 3);
    assert_string_equal(f->inputs[0], "p_a");
    assert_string_equal(f->inputs[1], "flat/copy/1");
    assert_string_equal(f->inputs[2], "flat/copy/2");
    for (size_t i = 1; i < 3; i++) {
        char tid[64];
        snprintf(tid, sizeof(tid), "flat/Copy/%zu", i);
        const sd_plan_stage *cp = stage_with(plan, tid);
        assert_int_equal(cp->kind, SD_PLAN_STAGE_FLATTEN);
        assert_int_equal(cp->n_inputs, 1);
        assert_string_equal(cp->inputs[0], "p_a");
        assert_string_equal(cp->outputs[0].pcollection, f->inputs[i]);
        assert_string_equal(sd_plan_find_pcollection(plan, f->inputs[i])->wire_coder_id, "str");
        assert_true(stage_index(plan, f) > stage_index(plan, cp));
    }
    /* p_a feeds the Flatten and both copies. */
    assert_int_equal(sd_plan_find_pcollection(plan, "p_a")->n_consumers, 3);
    assert_int_equal(plan->n_stages, 5); /* impulse, a, two copies, the Flatten */
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * Python's streaming Create of one element: assert_that/Create/MaybeReshuffle arrives as a leaf
 * with an SDK-private URN, a payload, no subtransforms, and its input as its output. It has
 * nothing to run and is dropped; an unknown URN that would produce something is still refused.
 */
static void test_identity_placeholder(void **state)
{
    (void)state;
    static const uint8_t pickled[] = { 0x80, 0x04, 0x95 };
    ProtobufCBinaryData payload = { sizeof(pickled), (uint8_t *)pickled };
    for (int variant = 0; variant < 3; variant++) {
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_a", "bytes", "global");
        tb_pcoll(&b, "p_b", "str", "global");
        pardo_opts none = { 0 };
        tb_transform(&b, "create", NULL, NO_PAYLOAD, "js", "", "out=p_b",
                     "create/impulse,create/flatmap,create/maybe,create/decode");
        tb_transform(&b, "create/impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "",
                     "out=p_imp", NULL);
        tb_transform(&b, "create/flatmap", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                     "in=p_imp", "out=p_a", NULL);
        const char *outs = variant == 0 ? "out=p_a" : variant == 1 ? "out=p_x" : "";
        if (variant == 1) {
            tb_pcoll(&b, "p_x", "bytes", "global");
        }
        tb_transform(&b, "create/maybe", "beam:transform:pickled_python:v1", payload, "js",
                     "in=p_a", outs, NULL);
        tb_transform(&b, "create/decode", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                     "in=p_a", "out=p_b", NULL);
        tb_root(&b, "create");
        pb_pipeline *p = tb_finish(&b);
        if (variant == 0) {
            sd_plan *plan = build_ok(p, &OPTS);
            for (size_t i = 0; i < plan->n_stages; i++) {
                for (size_t j = 0; j < plan->stages[i].n_transforms; j++) {
                    assert_string_not_equal(plan->stages[i].transforms[j], "create/maybe");
                }
            }
            const sd_plan_stage *s = stage_with(plan, "create/flatmap");
            assert_ptr_equal(s, stage_with(plan, "create/decode"));
            assert_int_equal(plan->n_stages, 2);
            sd_plan_destroy(plan);
        } else {
            /* A new output (variant 1) or none (2, a sink) means it would have to run. */
            const char *needles[] = { "unknown transform URN",
                                      "\"beam:transform:pickled_python:v1\"", "create/maybe",
                                      NULL };
            expect_rejected(p, SD_EUNIMPL, needles);
        }
        free_pipeline(p);
    }
}

/*
 * Side inputs: impulse -> a -> b; c reads a's output (main), b's output (iterable side) and
 * d's output (multimap side). b is fused with a; c must not be (its side input comes from its
 * would-be stage).
 */
static void test_side_inputs(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "gen", "global");
    tb_pcoll(&b, "p_b", "gen", "global");
    tb_pcoll(&b, "p_d", "kv_str_gen", "global");
    tb_pcoll(&b, "p_c", "gen", "global");
    pardo_opts none = { 0 };
    pardo_opts sides = { .sides = "s1:iterable,s2:multimap" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_a", "out=p_b",
                 NULL);
    tb_transform(&b, "d", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_d",
                 NULL);
    tb_transform(&b, "c", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sides), "js", "in=p_a,s1=p_b,s2=p_d",
                 "out=p_c", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *sa = stage_with(plan, "a");
    assert_ptr_equal(sa, stage_with(plan, "b"));
    const sd_plan_stage *sc = stage_with(plan, "c");
    assert_ptr_not_equal(sa, sc);
    assert_int_equal(sc->n_transforms, 1);
    assert_string_equal(sc->inputs[0], "p_a");
    assert_int_equal(sc->n_side_inputs, 2);
    assert_string_equal(sc->side_inputs[0].transform, "c");
    assert_string_equal(sc->side_inputs[0].local_id, "s1");
    assert_string_equal(sc->side_inputs[0].pcollection, "p_b");
    assert_int_equal(sc->side_inputs[0].access, SD_PLAN_SIDE_ITERABLE);
    assert_string_equal(sc->side_inputs[0].window_mapping_urn, SD_URN_WINDOW_MAPPING_GLOBAL);
    assert_string_equal(sc->side_inputs[1].local_id, "s2");
    assert_int_equal(sc->side_inputs[1].access, SD_PLAN_SIDE_MULTIMAP);
    /* Stage a materializes both p_a (c's main input) and p_b (c's side input). */
    assert_int_equal(sa->n_outputs, 2);
    assert_string_equal(sa->outputs[0].pcollection, "p_a");
    assert_string_equal(sa->outputs[1].pcollection, "p_b");
    const sd_plan_pcollection *pb = sd_plan_find_pcollection(plan, "p_b");
    assert_int_equal(pb->n_consumers, 1);
    assert_true(pb->consumers[0].side_input);
    assert_int_equal(pb->consumers[0].stage, stage_index(plan, sc));
    const sd_plan_pcollection *pd = sd_plan_find_pcollection(plan, "p_d");
    assert_string_equal(pd->wire_coder_id, "kv_str_gen_lp");
    /* The consumer's descriptor names side inputs with their wire coders, no source for them. */
    const pb_pbd *d = sc->descriptor;
    assert_string_equal(desc_pcoll(d, "p_b")->coder_id, "gen_lp");
    assert_string_equal(desc_pcoll(d, "p_d")->coder_id, "kv_str_gen_lp");
    assert_desc_coder(d, "kv_str_gen_lp", SD_URN_CODER_KV, "str,gen_lp");
    assert_int_equal(d->n_transforms, 2); /* c and its source; p_c has no consumer */
    assert_string_equal(d->state_api_service_descriptor->url, "localhost:2222");
    /* Stage order is topological. */
    assert_true(stage_index(plan, sc) > stage_index(plan, stage_with(plan, "d")));
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * A stage that grows after its first member must not create a stage cycle:
 * x (stage A) -> y fused into A; z reads y in another env (stage B);
 * w reads x (main) and z (side): z depends on A, so w must start its own stage.
 */
static void test_fusion_stage_cycle(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_env(&b, "py", SD_URN_ENV_PROCESS);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_x", "bytes", "global");
    tb_pcoll(&b, "p_y", "bytes", "global");
    tb_pcoll(&b, "p_z", "bytes", "global");
    tb_pcoll(&b, "p_w", "bytes", "global");
    pardo_opts none = { 0 };
    pardo_opts side = { .sides = "s:iterable" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "x", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_x",
                 NULL);
    tb_transform(&b, "y", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_x", "out=p_y",
                 NULL);
    tb_transform(&b, "z", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "py", "in=p_y", "out=p_z",
                 NULL);
    tb_transform(&b, "w", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, side), "js", "in=p_x,s=p_z",
                 "out=p_w", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *sx = stage_with(plan, "x");
    assert_ptr_equal(sx, stage_with(plan, "y"));
    const sd_plan_stage *sz = stage_with(plan, "z");
    const sd_plan_stage *sw = stage_with(plan, "w");
    assert_ptr_not_equal(sx, sz);
    assert_ptr_not_equal(sx, sw);
    assert_string_equal(sz->environment_id, "py");
    assert_true(stage_index(plan, sx) < stage_index(plan, sz));
    assert_true(stage_index(plan, sz) < stage_index(plan, sw));
    assert_int_equal(plan->n_environments, 2);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* A stateful ParDo with a timer starts a stage; its successor fuses into it. */
static void test_stateful_root(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "timer_gen", SD_URN_CODER_TIMER, "gen,gw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_gen", "global");
    tb_pcoll(&b, "p_s", "gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    pardo_opts st = { .state = "gen", .timer_coder = "timer_gen" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "stateful", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, st), "js", "in=p_kv",
                 "out=p_s", NULL);
    tb_transform(&b, "after", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_s",
                 "out=p_out", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_STATEFUL_PROCESSING);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_int_equal(plan->n_stages, 3);
    const sd_plan_stage *s = stage_with(plan, "stateful");
    assert_ptr_not_equal(s, stage_with(plan, "kv"));
    assert_ptr_equal(s, stage_with(plan, "after"));
    assert_string_equal(s->transforms[0], "stateful");
    assert_true(s->stateful);
    assert_string_equal(s->key_coder_id, "gen_lp");
    assert_int_equal(s->n_timer_families, 1);
    assert_string_equal(s->timer_families[0].transform, "stateful");
    assert_string_equal(s->timer_families[0].family, "flush");
    assert_int_equal(s->timer_families[0].domain, SD_PLAN_PROCESSING_TIME);
    assert_string_equal(s->timer_families[0].timer_coder_id, "timer_gen_lp");
    assert_false(stage_with(plan, "kv")->stateful);
    /* The descriptor's ParDoPayload names the wire timer coder; timers use the data url. */
    const pb_pbd *d = s->descriptor;
    assert_non_null(d->timer_api_service_descriptor);
    assert_string_equal(d->timer_api_service_descriptor->url, "localhost:1111");
    assert_desc_coder(d, "timer_gen_lp", SD_URN_CODER_TIMER, "gen_lp,gw");
    assert_non_null(desc_coder(d, "gen")); /* the bag state coder */
    const pb_transform *t = desc_transform(d, "stateful");
    pb_pardo *pd = org__apache__beam__model__pipeline__v1__par_do_payload__unpack(
        NULL, t->spec->payload.len, t->spec->payload.data);
    assert_non_null(pd);
    assert_string_equal(pd->timer_family_specs[0]->value->timer_family_coder_id, "timer_gen_lp");
    assert_int_equal(pd->n_state_specs, 1);
    org__apache__beam__model__pipeline__v1__par_do_payload__free_unpacked(pd, NULL);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* Reshuffle is elided; its consumer reads the input and starts a stage. */
static void test_reshuffle_elided(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "gen", "global");
    tb_pcoll(&b, "p_keyed", "kv_gen", "global");
    tb_pcoll(&b, "p_grouped", "kv_gen_iter_gen", "global");
    tb_pcoll(&b, "p_r", "gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "rs", SD_URN_TRANSFORM_RESHUFFLE, NO_PAYLOAD, "js", "in=p_a", "out=p_r",
                 "rs/key,rs/gbk,rs/unkey");
    tb_transform(&b, "rs/key", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_a",
                 "out=p_keyed", NULL);
    tb_transform(&b, "rs/gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_keyed",
                 "out=p_grouped", NULL);
    tb_transform(&b, "rs/unkey", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_grouped",
                 "out=p_r", NULL);
    tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_r", "out=p_out",
                 NULL);
    tb_root(&b, "impulse");
    tb_root(&b, "a");
    tb_root(&b, "rs");
    tb_root(&b, "b");
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_int_equal(plan->n_stages, 3);
    for (size_t i = 0; i < plan->n_stages; i++) {
        assert_int_not_equal(plan->stages[i].kind, SD_PLAN_STAGE_GBK);
    }
    const sd_plan_stage *sb = stage_with(plan, "b");
    assert_ptr_not_equal(sb, stage_with(plan, "a"));
    assert_string_equal(sb->inputs[0], "p_a");
    const pb_transform *t = desc_transform(sb->descriptor, "b");
    assert_string_equal(t->inputs[0]->value, "p_a");
    assert_null(desc_pcoll(sb->descriptor, "p_r"));
    assert_null(sd_plan_find_pcollection(plan, "p_r"));
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_sdf_expansion(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "restr", "beam:coder:offset_range:v1", "");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_files", "str", "global");
    tb_pcoll(&b, "p_lines", "str", "global");
    pardo_opts none = { 0 };
    pardo_opts sdf = { .restriction_coder = "restr" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "files", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_files", NULL);
    tb_transform(&b, "read", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sdf), "js", "in=p_files",
                 "out=p_lines", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_SPLITTABLE_DOFN);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_int_equal(plan->n_stages, 3);
    const sd_plan_stage *s1 = stage_with(plan, "files");
    assert_int_equal(s1->n_transforms, 3);
    assert_string_equal(s1->transforms[1], "read/PairWithRestriction");
    assert_string_equal(s1->transforms[2], "read/SplitAndSizeRestrictions");
    const sd_plan_stage *s2 = stage_with(plan, "read");
    assert_true(s2->splittable);
    assert_string_equal(s2->inputs[0], "read/split_and_size");
    const sd_plan_pcollection *sns = sd_plan_find_pcollection(plan, "read/split_and_size");
    assert_string_equal(sns->coder_id, "read/sdf_kv_elem_restr_size");
    assert_string_equal(sns->wire_coder_id, "read/sdf_kv_elem_restr_size_lp");
    const sd_plan_coder *k = sd_plan_find_coder(plan, "read/sdf_kv_elem_restr_lp");
    assert_string_equal(k->components[0], "str");
    assert_string_equal(k->components[1], "restr_lp");
    const pb_transform *t = desc_transform(s2->descriptor, "read");
    assert_string_equal(t->spec->urn, SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS);
    assert_string_equal(t->unique_name, "read");
    assert_non_null(desc_coder(s2->descriptor, "restr"));
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* An SDF with a side input: its restriction methods may read it, so all three transforms list
 * it among their inputs and each is a side input of its stage. */
static void test_sdf_side_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "restr", "beam:coder:offset_range:v1", "");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_files", "str", "global");
    tb_pcoll(&b, "p_side", "str", "global");
    tb_pcoll(&b, "p_lines", "str", "global");
    pardo_opts none = { 0 };
    pardo_opts sdf = { .restriction_coder = "restr", .sides = "s:iterable" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "files", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_files", NULL);
    tb_transform(&b, "side", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_side", NULL);
    tb_transform(&b, "read", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sdf), "js",
                 "in=p_files,s=p_side", "out=p_lines", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_SPLITTABLE_DOFN);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *s1 = stage_with(plan, "read/SplitAndSizeRestrictions");
    const sd_plan_stage *s2 = stage_with(plan, "read");
    static const char *const ids[] = { "read/PairWithRestriction",
                                       "read/SplitAndSizeRestrictions" };
    for (size_t i = 0; i < 2; i++) {
        const pb_transform *t = desc_transform(s1->descriptor, ids[i]);
        assert_non_null(t);
        bool has_side = false;
        for (size_t k = 0; k < t->n_inputs; k++) {
            has_side = has_side || (strcmp(t->inputs[k]->key, "s") == 0 &&
                                    strcmp(t->inputs[k]->value, "p_side") == 0);
        }
        assert_true(has_side);
        bool listed = false;
        for (size_t k = 0; k < s1->n_side_inputs; k++) {
            listed = listed || (strcmp(s1->side_inputs[k].transform, ids[i]) == 0 &&
                                strcmp(s1->side_inputs[k].local_id, "s") == 0);
        }
        assert_true(listed);
    }
    assert_int_equal(s2->n_side_inputs, 1);
    assert_string_equal(s2->side_inputs[0].transform, "read");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* RequiresTimeSortedInput on a stateful ParDo: accepted, and its stage says so (the engine
 * sorts the stage's input by timestamp). */
static void test_time_sorted_input(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_str_varint", "global");
    tb_pcoll(&b, "p_out", "kv_str_varint", "global");
    pardo_opts none = { 0 };
    pardo_opts sorted = { .state = "varint", .time_sorted = true };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", "out=p_kv",
                 NULL);
    tb_transform(&b, "sorted", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sorted), "js", "in=p_kv",
                 "out=p_out", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_STATEFUL_PROCESSING);
    tb_require(&b, SD_URN_REQUIREMENT_TIME_SORTED_INPUT);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_true(stage_with(plan, "sorted")->time_sorted_input);
    assert_false(stage_with(plan, "kv")->time_sorted_input);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_teststream(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload ts;
    org__apache__beam__model__pipeline__v1__test_stream_payload__init(&ts);
    ts.coder_id = "gen";
    ProtobufCBinaryData payload = tb_pack(&b, &ts.base);
    tb_pcoll(&b, "p_ts", "gen", "global");
    tb_pcoll(&b, "p_late", "gen", "global");
    tb_pcoll(&b, "p_out", "gen", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "ts", SD_URN_TRANSFORM_TEST_STREAM, payload, "", "", "main=p_ts,late=p_late",
                 NULL);
    tb_transform(&b, "use", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_ts",
                 "out=p_out", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    assert_int_equal(plan->teststream_stage, 0);
    const sd_plan_stage *s = &plan->stages[0];
    assert_int_equal(s->kind, SD_PLAN_STAGE_TESTSTREAM);
    assert_string_equal(s->teststream_coder_id, "gen");
    assert_string_equal(s->teststream_wire_coder_id, "gen_lp");
    assert_int_equal(s->teststream_payload.len, payload.len);
    assert_int_equal(s->n_teststream_outputs, 2);
    assert_string_equal(s->teststream_outputs[0].tag, "late");
    assert_string_equal(s->teststream_outputs[0].pcollection, "p_late");
    assert_string_equal(s->teststream_outputs[1].tag, "main");
    assert_int_equal(s->n_outputs, 2);
    assert_string_equal(sd_plan_find_pcollection(plan, "p_ts")->port_coder_id, "wv:gen_lp:gw");
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * A TestStream as Python submits it: the payload's coder is FastPrimitivesCoder ("fast",
 * pickled_python), in which the elements arrive, while the main output has the element type's
 * coder kv(dfast, fast) (DeterministicFastPrimitivesCoder keys: other bytes than fast's), and
 * feeds a stateful ParDo, a GroupByKey, a plain ParDo and a side input. The late output keeps
 * the payload's coder and is read by a plain ParDo.
 */
static pb_pipeline *py_teststream(const char *payload_coder, const char *late_coder)
{
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_coder(&b, "fast", "beam:coder:pickled_python:v1", "");
    tb_coder(&b, "dfast", "beam:coder:pickled_python:v1", "");
    tb_coder(&b, "kv_pk", SD_URN_CODER_KV, "dfast,fast");
    tb_coder(&b, "iter_pk", SD_URN_CODER_ITERABLE, "fast");
    tb_coder(&b, "kv_pk_iter_pk", SD_URN_CODER_KV, "dfast,iter_pk");
    tb_env(&b, "py", SD_URN_ENV_EXTERNAL);
    Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload ts;
    org__apache__beam__model__pipeline__v1__test_stream_payload__init(&ts);
    ts.coder_id = (char *)payload_coder;
    tb_pcoll(&b, "p_ts", "kv_pk", "global");
    tb_pcoll(&b, "p_late", late_coder, "global");
    tb_pcoll(&b, "p_st", "fast", "global");
    tb_pcoll(&b, "p_g", "kv_pk_iter_pk", "global");
    tb_pcoll(&b, "p_use", "fast", "global");
    tb_pcoll(&b, "p_side", "fast", "global");
    tb_pcoll(&b, "p_ul", "fast", "global");
    pardo_opts none = { 0 };
    pardo_opts bag = { .state = "fast" };
    pardo_opts side = { .sides = "si:iterable" };
    tb_transform(&b, "ts", SD_URN_TRANSFORM_TEST_STREAM, tb_pack(&b, &ts.base), "", "",
                 "main=p_ts,late=p_late", NULL);
    tb_transform(&b, "stateful", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, bag), "py", "in=p_ts",
                 "out=p_st", NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_ts", "out=p_g",
                 NULL);
    tb_transform(&b, "use", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "py", "in=p_ts",
                 "out=p_use", NULL);
    tb_transform(&b, "side", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, side), "py", "in=p_use,si=p_ts",
                 "out=p_side", NULL);
    tb_transform(&b, "use_late", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "py", "in=p_late",
                 "out=p_ul", NULL);
    tb_require(&b, SD_URN_REQUIREMENT_STATEFUL_PROCESSING);
    return tb_finish(&b);
}

/*
 * The runner stores the elements length-prefixed as they came (fast_lp) in a PCollection of
 * their own, ts/raw/main, and an SDK-side Flatten in the consumers' environment re-encodes them
 * into p_ts in its wire coder kv(lp(dfast), lp(fast)), which every consumer reads: before, the
 * runner stored fast_lp bytes under p_ts and the consumers misread them as a KV (Python's
 * userstate_test got (('a', 1), None) for ('a', 1)). p_late has the payload's coder: its
 * consumer reads the runner's bytes directly.
 */
static void test_teststream_transcodes_python_kv(void **state)
{
    (void)state;
    pb_pipeline *p = py_teststream("fast", "fast");
    sd_plan *plan = build_ok(p, &OPTS);

    const sd_plan_stage *s = &plan->stages[plan->teststream_stage];
    assert_int_equal(s->kind, SD_PLAN_STAGE_TESTSTREAM);
    assert_string_equal(s->teststream_coder_id, "fast");
    assert_string_equal(s->teststream_wire_coder_id, "fast_lp");
    assert_int_equal(s->n_teststream_outputs, 2);
    assert_string_equal(s->teststream_outputs[0].tag, "late");
    assert_string_equal(s->teststream_outputs[0].pcollection, "p_late");
    assert_string_equal(s->teststream_outputs[1].tag, "main");
    assert_string_equal(s->teststream_outputs[1].pcollection, "ts/raw/main");
    assert_int_equal(s->n_outputs, 2);
    const sd_plan_pcollection *rp = sd_plan_find_pcollection(plan, "ts/raw/main");
    assert_non_null(rp);
    assert_string_equal(rp->coder_id, "fast_lp");
    assert_string_equal(rp->wire_coder_id, "fast_lp");
    assert_string_equal(rp->port_coder_id, "wv:fast_lp:gw");
    assert_int_equal(rp->producer_stage, plan->teststream_stage);
    assert_string_equal(sd_plan_find_pcollection(plan, "p_late")->wire_coder_id, "fast_lp");
    for (size_t i = 0; i < plan->n_stages; i++) {
        for (size_t j = 0; j < plan->stages[i].n_transforms; j++) {
            assert_string_not_equal(plan->stages[i].transforms[j], "ts/Transcode/late");
        }
    }

    /* The transcoder roots a stage in the consumers' environment; the plain ParDo fuses. */
    const sd_plan_stage *t = stage_with(plan, "ts/Transcode/main");
    assert_non_null(t);
    assert_int_equal(t->kind, SD_PLAN_STAGE_SDK);
    assert_string_equal(t->environment_id, "py");
    assert_ptr_equal(t, stage_with(plan, "use"));
    assert_string_equal(t->inputs[0], "ts/raw/main");
    assert_string_equal(t->source_port_coder_id, "wv:fast_lp:gw");
    const pb_transform *tt = desc_transform(t->descriptor, "ts/Transcode/main");
    assert_non_null(tt);
    assert_string_equal(tt->spec->urn, SD_URN_TRANSFORM_FLATTEN);
    assert_string_equal(tt->environment_id, "py");
    assert_string_equal(tt->inputs[0]->value, "ts/raw/main");
    assert_string_equal(tt->outputs[0]->value, "p_ts");
    assert_string_equal(desc_pcoll(t->descriptor, "ts/raw/main")->coder_id, "fast_lp");
    assert_string_equal(desc_pcoll(t->descriptor, "p_ts")->coder_id, "kv_pk_lp");
    assert_string_equal(desc_transform(t->descriptor, "use")->inputs[0]->value, "p_ts");
    assert_true(stage_index(plan, t) > plan->teststream_stage);

    /* Every other consumer reads p_ts in its wire coder, from the transcoding stage. */
    const sd_plan_pcollection *pts = sd_plan_find_pcollection(plan, "p_ts");
    assert_non_null(pts);
    assert_string_equal(pts->coder_id, "kv_pk");
    assert_string_equal(pts->wire_coder_id, "kv_pk_lp");
    assert_int_equal(pts->producer_stage, stage_index(plan, t));
    const sd_plan_coder *wire = sd_plan_find_coder(plan, "kv_pk_lp");
    assert_string_equal(wire->components[0], "dfast_lp");
    assert_string_equal(wire->components[1], "fast_lp");
    const sd_plan_stage *st = stage_with(plan, "stateful");
    assert_ptr_not_equal(st, t);
    assert_true(st->stateful);
    assert_string_equal(st->inputs[0], "p_ts");
    assert_string_equal(st->key_coder_id, "dfast_lp");
    const sd_plan_stage *g = stage_with(plan, "gbk");
    assert_string_equal(g->inputs[0], "p_ts");
    assert_string_equal(g->key_coder_id, "dfast_lp");
    const sd_plan_stage *sd = stage_with(plan, "side");
    assert_int_equal(sd->n_side_inputs, 1);
    assert_string_equal(sd->side_inputs[0].pcollection, "p_ts");
    const sd_plan_stage *ul = stage_with(plan, "use_late");
    assert_string_equal(ul->inputs[0], "p_late");
    assert_int_equal(ul->upstream[0], plan->teststream_stage);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/*
 * A payload coder that is a KV over opaque parts cannot be re-encoded by the runner at all, nor
 * length-prefixed per part: every output is stored length-prefixed whole (kv_pk_raw =
 * length_prefix(kv_pk)) and transcoded, even one whose coder is the payload's. A TestStream
 * whose coder the runner parses (the C SDK's kv(str, varint)) is left as it is.
 */
static void test_teststream_transcode_opaque_kv_payload(void **state)
{
    (void)state;
    pb_pipeline *p = py_teststream("kv_pk", "kv_pk");
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *s = &plan->stages[plan->teststream_stage];
    assert_string_equal(s->teststream_coder_id, "kv_pk");
    assert_string_equal(s->teststream_wire_coder_id, "kv_pk_raw");
    assert_string_equal(s->teststream_outputs[0].pcollection, "ts/raw/late");
    assert_string_equal(s->teststream_outputs[1].pcollection, "ts/raw/main");
    const sd_plan_coder *raw = sd_plan_find_coder(plan, "kv_pk_raw");
    assert_non_null(raw);
    assert_string_equal(raw->urn, SD_URN_CODER_LENGTH_PREFIX);
    assert_int_equal(raw->n_components, 1);
    assert_string_equal(raw->components[0], "kv_pk");
    for (size_t i = 0; i < 2; i++) {
        const sd_plan_pcollection *rp =
            sd_plan_find_pcollection(plan, s->teststream_outputs[i].pcollection);
        assert_non_null(rp);
        assert_string_equal(rp->wire_coder_id, "kv_pk_raw");
        assert_string_equal(rp->port_coder_id, "wv:kv_pk_raw:gw");
    }
    const sd_plan_stage *tl = stage_with(plan, "ts/Transcode/late");
    assert_string_equal(tl->inputs[0], "ts/raw/late");
    assert_ptr_equal(tl, stage_with(plan, "use_late"));
    assert_null(sd_plan_find_pcollection(plan, "p_late")); /* stage-internal now */
    assert_string_equal(desc_pcoll(tl->descriptor, "p_late")->coder_id, "kv_pk");
    assert_string_equal(stage_with(plan, "stateful")->key_coder_id, "dfast_lp");
    sd_plan_destroy(plan);
    free_pipeline(p);

    tb b;
    tb_init(&b);
    tb_std(&b);
    Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload ts;
    org__apache__beam__model__pipeline__v1__test_stream_payload__init(&ts);
    ts.coder_id = "kv_str_varint";
    tb_pcoll(&b, "p_ts", "kv_str_varint", "global");
    tb_pcoll(&b, "p_st", "str", "global");
    pardo_opts bag = { .state = "str" };
    tb_transform(&b, "ts", SD_URN_TRANSFORM_TEST_STREAM, tb_pack(&b, &ts.base), "", "", "main=p_ts",
                 NULL);
    tb_transform(&b, "stateful", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, bag), "js", "in=p_ts",
                 "out=p_st", NULL);
    p = tb_finish(&b);
    plan = build_ok(p, &OPTS);
    assert_int_equal(plan->n_stages, 2);
    s = &plan->stages[plan->teststream_stage];
    assert_string_equal(s->teststream_wire_coder_id, "kv_str_varint");
    assert_string_equal(s->teststream_outputs[0].pcollection, "p_ts");
    const sd_plan_stage *st = stage_with(plan, "stateful");
    assert_string_equal(st->inputs[0], "p_ts");
    assert_string_equal(st->key_coder_id, "str");
    assert_null(sd_plan_find_pcollection(plan, "ts/raw/main"));
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* ----------------------------------------------------------------------------------------- */
/* Rejections                                                                                 */
/* ----------------------------------------------------------------------------------------- */

static void expect_rejected(pb_pipeline *p, sd_status code, const char *const *needles)
{
    sd_err err = { 0 };
    assert_int_equal(sd_plan_validate(p, &err), code);
    for (size_t i = 0; needles[i] != NULL; i++) {
        if (strstr(sd_err_msg(&err), needles[i]) == NULL) {
            fail_msg("error lacks \"%s\": %s", needles[i], sd_err_msg(&err));
        }
    }
    sd_plan sentinel;
    sd_plan *plan = &sentinel; /* must be reset to NULL */
    sd_err err2 = { 0 };
    assert_int_equal(sd_plan_build(p, &OPTS, &plan, &err2), code);
    assert_null(plan);
    assert_string_equal(sd_err_msg(&err), sd_err_msg(&err2));
}

static void test_docker_rejected(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_env(&b, "dock", SD_URN_ENV_DOCKER);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "bytes", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "dock", "in=p_imp", "out=p_a",
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    const char *needles[] = { "(1 problem)", "environment \"dock\"", "Docker", SD_URN_ENV_EXTERNAL,
                              NULL };
    expect_rejected(p, SD_EUNIMPL, needles);
    free_pipeline(p);
}

/* A composite with no URN and no subtransforms that returns its input (Java's identity and
 * tuple projection transforms) has nothing to run; one that makes a new PCollection is refused. */
static void test_pass_through_composite(void **state)
{
    (void)state;
    for (int bad = 0; bad < 2; bad++) {
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_new", "bytes", "global");
        tb_pcoll(&b, "p_out", "bytes", "global");
        pardo_opts none = { 0 };
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        tb_transform(&b, "identity", "", NO_PAYLOAD, "", "in=p_imp",
                     bad ? "out=p_new" : "out=p_imp", NULL);
        tb_transform(&b, "after", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_out", NULL);
        pb_pipeline *p = tb_finish(&b);
        if (bad) {
            const char *needles[] = { "no URN and no subtransforms", NULL };
            expect_rejected(p, SD_EINVAL, needles);
        } else {
            sd_plan *plan = build_ok(p, &OPTS);
            sd_plan_destroy(plan);
        }
        free_pipeline(p);
    }
}

/* A window fn the runner does not know but whose windows never merge (Java's IdentityWindowFn
 * behind PAssert) is assigned by the SDK: the plan groups by the elements' own windows. */
static void test_custom_non_merging_window_fn(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_ws(&b, "identity", "beam:window_fn:serialized_java:v1", NO_PAYLOAD, "gw");
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_kv", "kv_gen", "identity");
    tb_pcoll(&b, "p_g", "kv_gen_iter_gen", "identity");
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    pardo_opts none = { 0 };
    tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                 "out=p_kv", NULL);
    tb_transform(&b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_kv", "out=p_g", NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    bool seen = false;
    for (size_t i = 0; i < plan->n_windowings; i++) {
        if (strcmp(plan->windowings[i].id, "identity") == 0) {
            assert_int_equal(plan->windowings[i].kind, SD_PLAN_WINDOW_CUSTOM);
            assert_int_equal(plan->windowings[i].merge, SD_PLAN_MERGE_NON_MERGING);
            seen = true;
        }
    }
    assert_true(seen);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_many_problems_one_error(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_env(&b, "dock", SD_URN_ENV_DOCKER);
    /* A custom window fn whose windows merge needs the SDK's merge_windows: refused. */
    tb_ws(&b, "custom", "beam:window_fn:my_custom:v1", NO_PAYLOAD, "gw")->merge_status =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NEEDS_MERGE;
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "bytes", "global");
    tb_pcoll(&b, "p_b", "bytes", "custom");
    tb_pcoll(&b, "p_c", "bytes", "global");
    pardo_opts bad_side = { .sides = "s:beam:side_input:weird:v1" };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    tb_transform(&b, "x1", "beam:transform:frobnicate:v1", NO_PAYLOAD, "js", "in=p_imp", "out=p_a",
                 NULL);
    tb_transform(&b, "x2", "beam:transform:defrobnicate:v1", NO_PAYLOAD, "js", "in=p_a", "out=p_b",
                 NULL);
    tb_transform(&b, "d", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, bad_side), "dock",
                 "in=p_imp,s=p_imp", "out=p_c", NULL);
    /* Time-sorted input needs keys: a ParDo with no state or timers cannot have it. */
    pardo_opts sorted_stateless = { .time_sorted = true };
    tb_pcoll(&b, "p_d", "bytes", "global");
    tb_transform(&b, "sorted", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, sorted_stateless), "js",
                 "in=p_imp", "out=p_d", NULL);
    tb_require(&b, "beam:requirement:pardo:teleport:v1");
    tb_require(&b, SD_URN_REQUIREMENT_TIME_SORTED_INPUT);
    pb_pipeline *p = tb_finish(&b);
    const char *needles[] = { "(7 problems)",
                              "beam:transform:frobnicate:v1",
                              "beam:transform:defrobnicate:v1",
                              "Docker",
                              "beam:requirement:pardo:teleport:v1",
                              "time_sorted_input",
                              "beam:window_fn:my_custom:v1",
                              "beam:side_input:weird:v1",
                              NULL };
    expect_rejected(p, SD_EUNIMPL, needles);

    /* The full report has one line per problem. */
    char *report = NULL;
    sd_err err = { 0 };
    assert_int_equal(sd_plan_validate_ex(p, NULL, &report, &err), SD_EUNIMPL);
    assert_non_null(report);
    size_t lines = 0;
    for (const char *q = report; *q; q++) {
        lines += *q == '\n';
    }
    assert_int_equal(lines, 7);
    sd_free(report);
    free_pipeline(p);
}

static void test_malformed(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        int variant;
        const char *needle;
    } rows[] = {
        { "missing coder", 0, "coder \"nope\" (used by PCollection \"p_a\") does not exist" },
        { "missing pcollection", 1, "PCollection \"p_ghost\"" },
        { "missing windowing", 2, "windowing strategy \"ws_ghost\"" },
        { "two producers", 3, "is produced by both" },
        { "cycle", 4, "cycle" },
        { "two main inputs", 5, "exactly one main input" },
        { "missing env", 6, "environment \"ghost\"" },
        { "kv arity", 7, "needs 2 components" },
        { "coder cycle", 8, "contains itself" },
        { "missing subtransform", 9, "subtransform \"nowhere\"" },
        { "gbk non-kv", 10, "must have a KV coder" },
        { "undecodable pardo", 11, "does not decode as ParDoPayload" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        print_message("row %s\n", rows[i].name);
        int v = rows[i].variant;
        tb b;
        tb_init(&b);
        tb_std(&b);
        pardo_opts none = { 0 };
        tb_coder(&b, "self", SD_URN_CODER_KV, "self,bytes");
        tb_coder(&b, "kv1", SD_URN_CODER_KV, "bytes");
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_a",
                 v == 0   ? "nope"
                 : v == 7 ? "kv1"
                 : v == 8 ? "self"
                          : "bytes",
                 v == 2 ? "ws_ghost" : "global");
        tb_pcoll(&b, "p_b", "bytes", "global");
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        const char *ain = v == 1   ? "in=p_ghost"
                          : v == 4 ? "in=p_b"
                          : v == 5 ? "x=p_imp,y=p_b"
                                   : "in=p_imp";
        ProtobufCBinaryData junk = { 3, (uint8_t *)"\xff\xff\xff" };
        tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, v == 11 ? junk : tb_pardo(&b, none),
                     v == 6 ? "ghost" : "js", ain, "out=p_a", NULL);
        if (v == 10) {
            tb_transform(&b, "b", SD_URN_TRANSFORM_GROUP_BY_KEY, NO_PAYLOAD, "", "in=p_a",
                         "out=p_b", NULL);
        } else {
            tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_a",
                         v == 3 ? "out=p_a" : "out=p_b", NULL);
        }
        tb_root(&b, "impulse");
        tb_root(&b, "a");
        tb_root(&b, "b");
        if (v == 9) {
            tb_transform(&b, "comp", NULL, NO_PAYLOAD, "js", "", "", "nowhere");
            tb_root(&b, "comp");
        }
        pb_pipeline *p = tb_finish(&b);
        const char *needles[] = { rows[i].needle, NULL };
        expect_rejected(p, SD_EINVAL, needles);
        free_pipeline(p);
    }
}

/* ----------------------------------------------------------------------------------------- */
/* LP exactness and unknown fields                                                            */
/* ----------------------------------------------------------------------------------------- */

static void test_lp_rule_table(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    /* Rows: PCollection coder -> expected wire coder id, its URN and components. */
    tb_coder(&b, "row", SD_URN_CODER_ROW, "");
    tb_coder(&b, "lp_gen", SD_URN_CODER_LENGTH_PREFIX, "gen");
    tb_coder(&b, "null_gen", SD_URN_CODER_NULLABLE, "gen");
    tb_coder(&b, "kv_varint_iter_str", SD_URN_CODER_KV, "varint,iter_str");
    tb_coder(&b, "iter_str", SD_URN_CODER_ITERABLE, "str");
    tb_coder(&b, "kv_row_kv", SD_URN_CODER_KV, "row,kv_str_gen");
    tb_coder(&b, "gen_lp", SD_URN_CODER_BYTES, ""); /* a taken id forces a suffix */

    static const struct {
        const char *coder, *wire, *urn, *comps;
    } rows[] = {
        { "str", "str", SD_URN_CODER_STRING_UTF8, "" },
        { "gen", "gen_lp_2", SD_URN_CODER_LENGTH_PREFIX, "gen" },
        { "row", "row_lp", SD_URN_CODER_LENGTH_PREFIX, "row" },
        { "lp_gen", "lp_gen", SD_URN_CODER_LENGTH_PREFIX, "gen" },
        { "null_gen", "null_gen_lp", SD_URN_CODER_NULLABLE, "gen_lp_2" },
        { "kv_varint_iter_str", "kv_varint_iter_str", SD_URN_CODER_KV, "varint,iter_str" },
        { "kv_str_gen", "kv_str_gen_lp", SD_URN_CODER_KV, "str,gen_lp_2" },
        { "kv_row_kv", "kv_row_kv_lp", SD_URN_CODER_KV, "row_lp,kv_str_gen_lp" },
    };

    size_t n = sizeof(rows) / sizeof(rows[0]);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    /* One producer with n outputs, each consumed by a separate (env-split) consumer. */
    tb_env(&b, "other", SD_URN_ENV_PROCESS);
    char outs[1024] = "";
    for (size_t i = 0; i < n; i++) {
        char pc[32], tid[32], in[64], o[64];
        snprintf(pc, sizeof(pc), "p%zu", i);
        tb_pcoll(&b, pc, rows[i].coder, "global");
        snprintf(o, sizeof(o), "%so%zu=%s", i ? "," : "", i, pc);
        strcat(outs, o);
        snprintf(tid, sizeof(tid), "c%zu", i);
        snprintf(in, sizeof(in), "in=%s", pc);
        char out[64];
        snprintf(out, sizeof(out), "out=q%zu", i);
        char q[32];
        snprintf(q, sizeof(q), "q%zu", i);
        tb_pcoll(&b, q, "bytes", "global");
        tb_transform(&b, tid, SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "other", in, out, NULL);
    }
    tb_transform(&b, "multi", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp", outs,
                 NULL);
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const sd_plan_stage *s = stage_with(plan, "multi");
    assert_int_equal(s->n_outputs, n);
    for (size_t i = 0; i < n; i++) {
        char pc[32];
        snprintf(pc, sizeof(pc), "p%zu", i);
        print_message("row %s\n", rows[i].coder);
        const sd_plan_pcollection *pp = sd_plan_find_pcollection(plan, pc);
        assert_non_null(pp);
        assert_string_equal(pp->coder_id, rows[i].coder);
        assert_string_equal(pp->wire_coder_id, rows[i].wire);
        /* The producer's descriptor and the consumer's both use the wire coder. */
        assert_desc_coder(s->descriptor, rows[i].wire, rows[i].urn, rows[i].comps);
        assert_string_equal(desc_pcoll(s->descriptor, pc)->coder_id, rows[i].wire);
        char tid[32];
        snprintf(tid, sizeof(tid), "c%zu", i);
        const pb_pbd *cd = stage_with(plan, tid)->descriptor;
        assert_string_equal(desc_pcoll(cd, pc)->coder_id, rows[i].wire);
        assert_desc_coder(cd, rows[i].wire, rows[i].urn, rows[i].comps);
    }
    sd_plan_destroy(plan);
    free_pipeline(p);
}

static void test_unknown_fields_survive(void **state)
{
    (void)state;
    tb b;
    tb_init(&b);
    tb_std(&b);
    tb_pcoll(&b, "p_imp", "bytes", "global");
    tb_pcoll(&b, "p_a", "bytes", "global");
    pardo_opts none = { 0 };
    tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp", NULL);
    pb_transform *a = tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js",
                                   "in=p_imp", "out=p_a", NULL);
    /* A length-delimited field 99: the stored data holds varint(len) and the bytes. */
    static uint8_t data[] = { 0x02, 'h', 'i' };
    ProtobufCMessageUnknownField *uf = tb_alloc(&b, sizeof(*uf));
    uf->tag = 99;
    uf->wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
    uf->len = 3;
    uf->data = data;
    a->base.n_unknown_fields = 1;
    a->base.unknown_fields = uf;
    pb_pipeline *p = tb_finish(&b);
    sd_plan *plan = build_ok(p, &OPTS);
    const pb_transform *t = desc_transform(stage_with(plan, "a")->descriptor, "a");
    assert_int_equal(t->base.n_unknown_fields, 1);
    assert_int_equal(t->base.unknown_fields[0].tag, 99);
    assert_int_equal(t->base.unknown_fields[0].len, 3);
    assert_memory_equal(t->base.unknown_fields[0].data, data, 3);
    sd_plan_destroy(plan);
    free_pipeline(p);
}

/* ----------------------------------------------------------------------------------------- */
/* TypeScript SDK fixtures                                                                    */
/* ----------------------------------------------------------------------------------------- */

static pb_pipeline *load_fixture(const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/data/plan/%s", SD_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    uint8_t *buf = sd_malloc(1 << 20);
    assert_non_null(buf);
    size_t len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    pb_pipeline *p = org__apache__beam__model__pipeline__v1__pipeline__unpack(NULL, len, buf);
    sd_free(buf);
    assert_non_null(p);
    return p;
}

static bool has_transform_urn(const sd_plan *plan, const char *urn)
{
    for (size_t i = 0; i < plan->n_stages; i++) {
        const pb_pbd *d = plan->stages[i].descriptor;
        for (size_t j = 0; d != NULL && j < d->n_transforms; j++) {
            if (strcmp(d->transforms[j]->value->spec->urn, urn) == 0) {
                return true;
            }
        }
    }
    return false;
}

static void test_ts_fixtures(void **state)
{
    (void)state;

    static const struct {
        const char *file;
        size_t min_stages;
        bool lifted; /* by default: never for the TS SDK's integer accumulators */
        bool side_input;
        bool sessions;
        bool lifted_when_forced; /* with force_lift (sundial_lift_combiners=true) */
    } rows[] = {
        { "ts_wordcount.pb", 4, false, false, false, true },
        { "ts_windowed_gbk.pb", 4, false, false, false, false },
        { "ts_side_input.pb", 3, false, true, false, false },
        { "ts_sessions_combine.pb", 4, false, false, true, false },
        { "ts_flatten.pb", 4, false, false, false, false },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        pb_pipeline *p = load_fixture(rows[i].file);
        if (p == NULL) {
            fail_msg("fixture %s missing (run tests/data/plan/make_fixtures.js)", rows[i].file);
        }
        print_message("fixture %s\n", rows[i].file);
        sd_plan *plan = build_ok(p, &OPTS);
        assert_true(plan->n_stages >= rows[i].min_stages);
        assert_int_equal(plan->stages[0].kind, SD_PLAN_STAGE_IMPULSE);
        assert_int_equal(has_transform_urn(plan, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE),
                         rows[i].lifted);
        {
            /* The TypeScript SDK's count is lifted only when the pipeline forces it. */
            sd_plan_options forced = OPTS;
            forced.force_lift = true;
            sd_plan *fp = build_ok(p, &forced);
            assert_int_equal(has_transform_urn(fp, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE),
                             rows[i].lifted_when_forced);
            sd_plan_destroy(fp);
        }
        bool any_side = false;
        bool sessions = false;
        for (size_t s = 0; s < plan->n_stages; s++) {
            const sd_plan_stage *st = &plan->stages[s];
            any_side = any_side || st->n_side_inputs > 0;
            if (st->kind == SD_PLAN_STAGE_SDK) {
                assert_string_equal(st->descriptor->state_api_service_descriptor->url,
                                    "localhost:2222");
            }
            if (st->kind == SD_PLAN_STAGE_GBK) {
                const sd_plan_windowing *w =
                    sd_plan_find_windowing(plan, st->windowing_strategy_id);
                sessions = sessions || w->kind == SD_PLAN_WINDOW_SESSIONS;
            }
        }
        assert_int_equal(any_side, rows[i].side_input);
        assert_int_equal(sessions, rows[i].sessions);
        /* Every genericobjectjs PCollection on a boundary is length-prefixed. */
        for (size_t j = 0; j < plan->n_pcollections; j++) {
            const sd_plan_coder *w = sd_plan_find_coder(plan, plan->pcollections[j].wire_coder_id);
            assert_non_null(w);
            assert_string_not_equal(w->urn, GEN);
        }
        sd_plan_destroy(plan);
        free_pipeline(p);
    }
}

/* ----------------------------------------------------------------------------------------- */
/* Damaged pipelines                                                                          */
/* ----------------------------------------------------------------------------------------- */

/* Build must answer OK (with a consistent plan), EINVAL or EUNIMPL; never crash. */
static void build_any(const pb_pipeline *p)
{
    sd_plan *plan = NULL;
    sd_err err = { 0 };
    sd_status st = sd_plan_build(p, &OPTS, &plan, &err);
    if (st == SD_OK) {
        const char *broken = sd__plan_check(plan);
        if (broken != NULL) {
            fail_msg("plan invariant broken: %s", broken);
        }
        sd_plan_destroy(plan);
        return;
    }
    if (st != SD_EINVAL && st != SD_EUNIMPL) {
        fail_msg("unexpected %s: %s", sd_status_name(st), sd_err_msg(&err));
    }
    assert_null(plan);
    assert_true(strlen(sd_err_msg(&err)) > 0);
}

/* Remove element i of a protobuf-c pointer array (for the duration of one build). */
#define WITHOUT(arr, n, i, body)         \
    do {                                 \
        void *saved_ = (void *)(arr)[i]; \
        size_t n_ = (n);                 \
        (arr)[i] = (arr)[n_ - 1];        \
        (n) = n_ - 1;                    \
        body;                            \
        (n) = n_;                        \
        (arr)[n_ - 1] = (arr)[i];        \
        (arr)[i] = saved_;               \
    } while (0)

static void damage(pb_pipeline *p, int rounds)
{
    pb_components *k = p->components;
    for (size_t i = 0; i < k->n_transforms; i++) {
        WITHOUT(k->transforms, k->n_transforms, i, build_any(p));
    }
    for (size_t i = 0; i < k->n_pcollections; i++) {
        WITHOUT(k->pcollections, k->n_pcollections, i, build_any(p));
    }
    for (size_t i = 0; i < k->n_coders; i++) {
        WITHOUT(k->coders, k->n_coders, i, build_any(p));
    }
    for (size_t i = 0; i < k->n_windowing_strategies; i++) {
        WITHOUT(k->windowing_strategies, k->n_windowing_strategies, i, build_any(p));
    }
    for (size_t i = 0; i < k->n_environments; i++) {
        WITHOUT(k->environments, k->n_environments, i, build_any(p));
    }
    /* Byte flips in the serialized pipeline (deterministic xorshift). */
    size_t len = protobuf_c_message_get_packed_size(&p->base);
    uint8_t *buf = sd_malloc(len);
    assert_non_null(buf);
    protobuf_c_message_pack(&p->base, buf);
    uint32_t x = 2463534242u;
    size_t decoded = 0;
    for (int round = 0; round < rounds; round++) {
        uint8_t *m = sd_memdup(buf, len);
        assert_non_null(m);
        for (int f = 0; f < 1 + round % 3; f++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            m[x % len] ^= (uint8_t)(1u << ((x >> 8) % 8));
        }
        pb_pipeline *q = org__apache__beam__model__pipeline__v1__pipeline__unpack(NULL, len, m);
        if (q != NULL) {
            decoded++;
            build_any(q);
            free_pipeline(q);
        }
        sd_free(m);
    }
    assert_true(decoded > (size_t)rounds / 30);
    sd_free(buf);
}

static void test_damaged_pipelines(void **state)
{
    (void)state;
    pb_pipeline *p = wordcount();
    damage(p, 3000);
    free_pipeline(p);
    p = load_fixture("ts_wordcount.pb");
    assert_non_null(p);
    damage(p, 600);
    free_pipeline(p);
}

/* ----------------------------------------------------------------------------------------- */
/* OOM                                                                                        */
/* ----------------------------------------------------------------------------------------- */

static void test_oom_loop(void **state)
{
    (void)state;
    pb_pipeline *pipes[4] = { wordcount(), NULL, NULL, NULL };
    {
        /* Also a pipeline with every feature the planner synthesizes for. */
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_coder(&b, "timer_gen", SD_URN_CODER_TIMER, "gen,gw");
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_kv", "kv_gen", "global");
        tb_pcoll(&b, "p_s", "gen", "global");
        tb_pcoll(&b, "p_side", "gen", "global");
        pardo_opts none = { 0 };
        pardo_opts st = { .state = "gen", .timer_coder = "timer_gen", .sides = "si:iterable" };
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        tb_transform(&b, "kv", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_kv", NULL);
        tb_transform(&b, "side", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_side", NULL);
        tb_transform(&b, "stateful", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, st), "js",
                     "in=p_kv,si=p_side", "out=p_s", NULL);
        pipes[1] = tb_finish(&b);
    }
    {
        /* A Flatten that transcodes one input and copies a repeated one. */
        tb b;
        tb_init(&b);
        tb_std(&b);
        tb_pcoll(&b, "p_imp", "bytes", "global");
        tb_pcoll(&b, "p_a", "gen", "global");
        tb_pcoll(&b, "p_b", "str", "global");
        tb_pcoll(&b, "p_all", "gen", "global");
        pardo_opts none = { 0 };
        tb_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NO_PAYLOAD, "", "", "out=p_imp",
                     NULL);
        tb_transform(&b, "a", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_a", NULL);
        tb_transform(&b, "b", SD_URN_TRANSFORM_PARDO, tb_pardo(&b, none), "js", "in=p_imp",
                     "out=p_b", NULL);
        tb_transform(&b, "flat", SD_URN_TRANSFORM_FLATTEN, NO_PAYLOAD, "js", "0=p_a,1=p_a,2=p_b",
                     "out=p_all", NULL);
        pipes[2] = tb_finish(&b);
    }
    /* A TestStream whose main output is transcoded (Python's shape). */
    pipes[3] = py_teststream("fast", "fast");
    for (size_t k = 0; k < 4; k++) {
        long n;
        for (n = 1; n < 100000; n++) {
            sd_plan *plan = NULL;
            sd_err err = { 0 };
            sd_alloc_fail_after(n, 0);
            sd_status st = sd_plan_build(pipes[k], &OPTS, &plan, &err);
            long injected = sd_alloc_injected_failures();
            sd_alloc_fail_after(0, 0);
            if (injected == 0) {
                assert_int_equal(st, SD_OK);
                assert_null(sd__plan_check(plan));
                sd_plan_destroy(plan);
                break;
            }
            if (st != SD_ENOMEM) {
                fail_msg("allocation %ld failed but build returned %s (%s)", n, sd_status_name(st),
                         sd_err_msg(&err));
            }
            assert_null(plan);
        }
        assert_true(n > 10);
        for (n = 1; n < 100000; n++) {
            sd_err err = { 0 };
            sd_alloc_fail_after(n, 0);
            sd_status st = sd_plan_validate(pipes[k], &err);
            long injected = sd_alloc_injected_failures();
            sd_alloc_fail_after(0, 0);
            if (injected == 0) {
                assert_int_equal(st, SD_OK);
                break;
            }
            assert_int_equal(st, SD_ENOMEM);
        }
        free_pipeline(pipes[k]);
    }
}

static void test_null_args(void **state)
{
    (void)state;
    sd_err err = { 0 };
    sd_plan *plan = NULL;
    assert_int_equal(sd_plan_validate(NULL, &err), SD_EINVAL);
    assert_int_equal(sd_plan_build(NULL, NULL, &plan, &err), SD_EINVAL);
    assert_null(plan);
    sd_plan_destroy(NULL);
    pb_pipeline empty;
    org__apache__beam__model__pipeline__v1__pipeline__init(&empty);
    err = (sd_err){ 0 };
    assert_int_equal(sd_plan_validate(&empty, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "no components"));

    /* Components but no transforms: valid, and the plan has nothing to run. */
    pb_pipeline nothing;
    Org__Apache__Beam__Model__Pipeline__V1__Components comps;
    org__apache__beam__model__pipeline__v1__pipeline__init(&nothing);
    org__apache__beam__model__pipeline__v1__components__init(&comps);
    nothing.components = &comps;
    err = (sd_err){ 0 };
    assert_int_equal(sd_plan_build(&nothing, NULL, &plan, &err), SD_OK);
    assert_non_null(plan);
    assert_int_equal(plan->n_stages, 0);
    sd_plan_destroy(plan);
    assert_string_equal(sd_plan_stage_kind_name(SD_PLAN_STAGE_GBK), "gbk");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wordcount_lifted),
        cmocka_unit_test(test_wordcount_unlifted),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_windowing_table),
        cmocka_unit_test(test_windowing_overflow),
        cmocka_unit_test(test_closing_behavior),
        cmocka_unit_test(test_trigger_tree),
        cmocka_unit_test(test_trigger_synchronized_processing_time),
        cmocka_unit_test(test_flatten),
        cmocka_unit_test(test_flatten_transcode_keeps_gbk_coder),
        cmocka_unit_test(test_flatten_of_flatten_side_input),
        cmocka_unit_test(test_flatten_repeated_input),
        cmocka_unit_test(test_identity_placeholder),
        cmocka_unit_test(test_side_inputs),
        cmocka_unit_test(test_fusion_stage_cycle),
        cmocka_unit_test(test_stateful_root),
        cmocka_unit_test(test_reshuffle_elided),
        cmocka_unit_test(test_sdf_expansion),
        cmocka_unit_test(test_sdf_side_input),
        cmocka_unit_test(test_time_sorted_input),
        cmocka_unit_test(test_teststream),
        cmocka_unit_test(test_teststream_transcodes_python_kv),
        cmocka_unit_test(test_teststream_transcode_opaque_kv_payload),
        cmocka_unit_test(test_docker_rejected),
        cmocka_unit_test(test_many_problems_one_error),
        cmocka_unit_test(test_custom_non_merging_window_fn),
        cmocka_unit_test(test_pass_through_composite),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_lp_rule_table),
        cmocka_unit_test(test_unknown_fields_survive),
        cmocka_unit_test(test_ts_fixtures),
        cmocka_unit_test(test_damaged_pipelines),
        cmocka_unit_test(test_oom_loop),
        cmocka_unit_test(test_null_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
