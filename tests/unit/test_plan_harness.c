/*
 * Sundial tests: the shared harness of the planner tests (test_plan*.c).
 *
 * A small protobuf-c pipeline builder (tb_*), which packs and unpacks the pipeline again so
 * the planner sees exactly what it would see from the wire; plan helpers that build a plan
 * and check its invariants (build_ok), find stages and descriptor entries; the TypeScript
 * word-count pipeline several files use; expect_rejected; and run_plan_cases, the one driver
 * of the table-driven tests. test_plan_harness.h documents each.
 */
#include "test_plan_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/err.h"
#include "runner/urns/urns.h"

/* ----------------------------------------------------------------------------------------- */
/* Pipeline builder                                                                           */
/* ----------------------------------------------------------------------------------------- */

void *tb_alloc(tb *b, size_t n)
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

char *tb_str(tb *b, const char *s)
{
    char *d = tb_alloc(b, strlen(s) + 1);
    memcpy(d, s, strlen(s) + 1);
    return d;
}

void tb_push(tb *b, void ***arr, size_t *n, void *item)
{
    void **na = tb_alloc(b, sizeof(void *) * (*n + 1));
    if (*n > 0) {
        memcpy(na, *arr, sizeof(void *) * *n);
    }
    na[*n] = item;
    *arr = na;
    (*n)++;
}

void tb_init(tb *b)
{
    memset(b, 0, sizeof(*b));
    org__apache__beam__model__pipeline__v1__components__init(&b->comps);
    org__apache__beam__model__pipeline__v1__pipeline__init(&b->pipe);
    b->pipe.components = &b->comps;
}

pb_spec *tb_spec(tb *b, const char *urn, ProtobufCBinaryData payload)
{
    pb_spec *s = tb_alloc(b, sizeof(*s));
    org__apache__beam__model__pipeline__v1__function_spec__init(s);
    s->urn = tb_str(b, urn);
    s->payload = payload;
    return s;
}

const ProtobufCBinaryData NO_PAYLOAD = { 0, NULL };

/* comps: comma-separated component ids ("" for none). */
pb_coder *tb_coder(tb *b, const char *id, const char *urn, const char *comps)
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

pb_pcoll *tb_pcoll(tb *b, const char *id, const char *coder, const char *ws)
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

pb_wstrat *tb_ws(tb *b,
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

pb_env *tb_env(tb *b, const char *id, const char *urn)
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
void tb_map(tb *b, void ***arr, size_t *n, const char *spec, bool inputs)
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

pb_transform *tb_transform(tb *b,
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

void tb_root(tb *b, const char *id)
{
    tb_push(b, (void ***)&b->pipe.root_transform_ids, &b->pipe.n_root_transform_ids, tb_str(b, id));
}

void tb_require(tb *b, const char *urn)
{
    tb_push(b, (void ***)&b->pipe.requirements, &b->pipe.n_requirements, tb_str(b, urn));
}

ProtobufCBinaryData tb_pack(tb *b, const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = tb_alloc(b, len);
    protobuf_c_message_pack(m, buf);
    return (ProtobufCBinaryData){ len, buf };
}

ProtobufCBinaryData tb_pardo(tb *b, pardo_opts o)
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

ProtobufCBinaryData tb_combine(tb *b, const char *acc)
{
    Org__Apache__Beam__Model__Pipeline__V1__CombinePayload cp;
    org__apache__beam__model__pipeline__v1__combine_payload__init(&cp);
    cp.combine_fn = tb_spec(b, "beam:dofn:serialized_js_combinefn_info:v1", NO_PAYLOAD);
    cp.accumulator_coder_id = tb_str(b, acc);
    return tb_pack(b, &cp.base);
}

ProtobufCBinaryData tb_fixed(tb *b, int64_t size_ms, int64_t offset_ms)
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

ProtobufCBinaryData tb_sliding(tb *b, int64_t size_ms, int64_t period_ms)
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

ProtobufCBinaryData tb_sessions(tb *b, int64_t gap_ms)
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
void tb_std(tb *b)
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
pb_pipeline *tb_finish(tb *b)
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

void free_pipeline(pb_pipeline *p)
{
    org__apache__beam__model__pipeline__v1__pipeline__free_unpacked(p, NULL);
}

/* ----------------------------------------------------------------------------------------- */
/* Plan helpers                                                                               */
/* ----------------------------------------------------------------------------------------- */

const sd_plan_options OPTS = { .data_url = "localhost:1111",
                               .state_url = "localhost:2222",
                               .lift_combiners = true };

sd_plan *build_ok(const pb_pipeline *p, const sd_plan_options *opt)
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

const sd_plan_stage *stage_with(const sd_plan *plan, const char *tid)
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

size_t stage_index(const sd_plan *plan, const sd_plan_stage *s)
{
    return (size_t)(s - plan->stages);
}

const pb_transform *desc_transform(const pb_pbd *d, const char *id)
{
    for (size_t i = 0; i < d->n_transforms; i++) {
        if (strcmp(d->transforms[i]->key, id) == 0) {
            return d->transforms[i]->value;
        }
    }
    return NULL;
}

const pb_pcoll *desc_pcoll(const pb_pbd *d, const char *id)
{
    for (size_t i = 0; i < d->n_pcollections; i++) {
        if (strcmp(d->pcollections[i]->key, id) == 0) {
            return d->pcollections[i]->value;
        }
    }
    return NULL;
}

const pb_coder *desc_coder(const pb_pbd *d, const char *id)
{
    for (size_t i = 0; i < d->n_coders; i++) {
        if (strcmp(d->coders[i]->key, id) == 0) {
            return d->coders[i]->value;
        }
    }
    return NULL;
}

/* The descriptor's coder id must have this URN and these components ("a,b"). */
void assert_desc_coder(const pb_pbd *d, const char *id, const char *urn, const char *comps)
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

const char *port_coder_of(const pb_transform *t)
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
pb_pipeline *wordcount(void)
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

void expect_rejected(pb_pipeline *p, sd_status code, const char *const *needles)
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

/*
 * A TestStream as Python submits it: the payload's coder is FastPrimitivesCoder ("fast",
 * pickled_python), in which the elements arrive, while the main output has the element type's
 * coder kv(dfast, fast) (DeterministicFastPrimitivesCoder keys: other bytes than fast's), and
 * feeds a stateful ParDo, a GroupByKey, a plain ParDo and a side input. The late output keeps
 * the payload's coder and is read by a plain ParDo.
 */
pb_pipeline *py_teststream(const char *payload_coder, const char *late_coder)
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

/* A TypeScript SDK pipeline fixture (tests/data/plan/<name>); NULL when absent. */
pb_pipeline *load_fixture(const char *name)
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

/* ----------------------------------------------------------------------------------------- */
/* The case driver                                                                            */
/* ----------------------------------------------------------------------------------------- */

void run_plan_cases(const void *rows,
                    size_t n_rows,
                    size_t row_size,
                    pb_pipeline *(*build)(const void *row),
                    sd_status reject_code,
                    void (*check)(const sd_plan *plan, const pb_pipeline *p, const void *row))
{
    for (size_t i = 0; i < n_rows; i++) {
        const void *row = (const char *)rows + i * row_size;
        const plan_case *head = row;
        print_message("row %s\n", head->name);
        pb_pipeline *p = build(row);
        if (head->needle != NULL) {
            const char *needles[] = { head->needle, NULL };
            expect_rejected(p, reject_code, needles);
        } else {
            sd_plan *plan = build_ok(p, &OPTS);
            if (check != NULL) {
                check(plan, p, row);
            }
            sd_plan_destroy(plan);
        }
        free_pipeline(p);
    }
}
