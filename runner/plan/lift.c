/*
 * Sundial planner: combiner lifting.
 *
 * A combine_per_key composite (Combine.perKey) is lifted when it can be: instead of running its
 * subtransforms (GroupByKey then CombineGroupedValues), the planner replaces it by four nodes
 *
 *   Precombine (SDK)          KV<K, V>           -> KV<K, A>
 *   GroupByKey (runner)       KV<K, A>           -> KV<K, Iterable<A>>
 *   MergeAccumulators (SDK)   KV<K, Iterable<A>> -> KV<K, A>
 *   ExtractOutputs (SDK)      KV<K, A>           -> the composite's output
 *
 * so each bundle combines its values before the shuffle and the GroupByKey moves one
 * accumulator per key and bundle. The new coders and PCollections are synthesized with ids
 * derived from the composite's ("<tid>/kv_acc", "<tid>/lifted", ...). Lifting is refused, with
 * the reason logged by graph.c, which then expands the subtransforms instead, when the
 * composite's shape, payload, input coder or windowing does not allow it: merging windows, an
 * output time other than END_OF_WINDOW, or a trigger that counts elements (trigger_liftable,
 * Beam's rule). For the TypeScript SDK 2.49 (recognised by its environment's capabilities,
 * sd__plan_env_is_typescript) an integer accumulator is either carried as a double or not
 * lifted at all, because that SDK's varint keeps 32 bits (lift_typescript_acc).
 */
#include <string.h>

#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

static bool streq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* The environment of a composite: its own, else that of its first descendant that has one. */
static const char *composite_env(const pl_ctx *c, const pb_transform *t, unsigned depth)
{
    if (t->environment_id != NULL && t->environment_id[0] != '\0') {
        return t->environment_id;
    }
    for (size_t i = 0; depth < 16 && i < t->n_subtransforms; i++) {
        const pb_transform *s = sd_map_get_str(&c->transforms, t->subtransforms[i]);
        if (s != NULL) {
            const char *e = composite_env(c, s, depth + 1);
            if (e[0] != '\0') {
                return e;
            }
        }
    }
    return "";
}

/*
 * Whether a trigger still sees what it needs when a combine is lifted. Lifting precombines
 * in the SDK, so the GroupByKey sees one accumulator where several elements were: a trigger
 * that counts elements (AfterCount(n > 1), and whatever contains one) would fire late or
 * never. Beam's own rule (Python's is_compatible_with_combiner_lifting): time- and
 * watermark-based triggers lift, count-based ones do not, unknown shapes do not.
 */
static bool trigger_liftable(const pb_trigger *t, unsigned depth)
{
    if (t == NULL) {
        return true;
    }
    if (depth > 64) {
        return false;
    }
    switch (t->trigger_case) {
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER__NOT_SET:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_DEFAULT:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_NEVER:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_PROCESSING_TIME:
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        return true;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_ELEMENT_COUNT:
        return t->element_count != NULL && t->element_count->element_count <= 1;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_END_OF_WINDOW:
        return t->after_end_of_window == NULL ||
               (trigger_liftable(t->after_end_of_window->early_firings, depth + 1) &&
                trigger_liftable(t->after_end_of_window->late_firings, depth + 1));
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_ANY:
        for (size_t i = 0; t->after_any != NULL && i < t->after_any->n_subtriggers; i++) {
            if (!trigger_liftable(t->after_any->subtriggers[i], depth + 1)) {
                return false;
            }
        }
        return true;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_REPEAT:
        return t->repeat == NULL || trigger_liftable(t->repeat->subtrigger, depth + 1);
    default:
        return false;
    }
}

/*
 * The Beam TypeScript SDK (2.49) announces exactly these two capabilities on its environments
 * and nothing else, which no other SDK does: the one way a runner can know it faces that SDK.
 */
bool sd__plan_env_is_typescript(const pl_ctx *c, const char *env_id)
{
    const pb_env *e = sd_map_get_str(&c->envs, env_id);
    if (e == NULL || e->n_capabilities != 2) {
        return false;
    }
    bool window = false, siblings = false;
    for (size_t i = 0; i < e->n_capabilities; i++) {
        window = window || streq(e->capabilities[i], SD_URN_CODER_INTERVAL_WINDOW);
        siblings = siblings || streq(e->capabilities[i], SD_URN_PROTOCOL_SIBLING_WORKERS);
    }
    return window && siblings;
}

/*
 * Beam's Go SDK lists "beam:version:sdk_base:go:<its container image>" among the capabilities of
 * every environment it creates.
 */
bool sd__plan_has_go_env(const pl_ctx *c)
{
    static const char prefix[] = "beam:version:sdk_base:go:";
    size_t it = 0;
    sd_bytes k;
    void *v;
    while (sd_map_next(&c->envs, &it, &k, &v)) {
        const pb_env *e = v;
        for (size_t i = 0; e != NULL && i < e->n_capabilities; i++) {
            if (e->capabilities[i] != NULL &&
                strncmp(e->capabilities[i], prefix, sizeof(prefix) - 1) == 0) {
                return true;
            }
        }
    }
    return false;
}

static bool coder_has_urn(const pl_ctx *c, const char *coder_id, const char *urn, unsigned depth)
{
    const pb_coder *cd = sd__plan_coder_get(c, coder_id);
    if (cd == NULL || depth > 32) {
        return false;
    }
    if (cd->spec != NULL && cd->spec->urn != NULL && streq(cd->spec->urn, urn)) {
        return true;
    }
    for (size_t i = 0; i < cd->n_component_coder_ids; i++) {
        if (coder_has_urn(c, cd->component_coder_ids[i], urn, depth + 1)) {
            return true;
        }
    }
    return false;
}

/* What a liftable combine_per_key is lifted with, found by lift_preconditions. */
typedef struct lift_in {
    const char *acc;    /* accumulator coder id (lift_typescript_acc may replace it) */
    const char *in_pc;  /* the input PCollection id */
    const pb_pcoll *in; /* and its message */
    const pb_coder *kv; /* the input's KV coder */
    const char *env;    /* the composite's environment */
} lift_in;

/*
 * The conditions for lifting, in the order their reasons are reported: one input and one
 * output, a CombinePayload with an accumulator coder, a KV input in non-merging windows with
 * END_OF_WINDOW output time, a trigger that does not count elements, an environment. OUT: li;
 * why (set, and li incomplete, when the combine cannot be lifted).
 */
static sd_status
lift_preconditions(pl_ctx *c, const char *tid, const pb_transform *t, lift_in *li, const char **why)
{
    if (t->n_inputs != 1 || t->n_outputs != 1) {
        *why = "it needs exactly one input and one output";
        return SD_OK;
    }
    ProtobufCAllocator pa = sd__plan_arena_pb(&c->scratch);
    pb_combine *cp = NULL;
    if (t->spec != NULL) {
        cp = org__apache__beam__model__pipeline__v1__combine_payload__unpack(
            &pa, t->spec->payload.len, t->spec->payload.data);
    }
    if (cp == NULL) {
        if (c->scratch.failed) {
            return SD_ENOMEM;
        }
        *why = "its payload is not a CombinePayload";
        return SD_OK;
    }
    const char *acc = cp->accumulator_coder_id;
    if (acc[0] == '\0' || sd__plan_coder_get(c, acc) == NULL) {
        *why = "its accumulator coder is missing";
        return SD_OK;
    }
    const char *tn = sd__plan_tname(c, tid);
    char *who = tn == NULL ? NULL : sd_arena_printf(&c->scratch, "%s accumulator", tn);
    if (who == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd__plan_check_coder(c, acc, who));
    const char *in_pc = t->inputs[0]->value;
    const pb_pcoll *in = sd__plan_pcoll_get(c, in_pc);
    if (in == NULL) {
        *why = "its input PCollection is missing";
        return SD_OK;
    }
    const pb_coder *kv = sd__plan_coder_get(c, in->coder_id);
    if (kv == NULL || kv->spec == NULL || !streq(kv->spec->urn, SD_URN_CODER_KV) ||
        kv->n_component_coder_ids != 2) {
        *why = "its input coder is not a KV coder";
        return SD_OK;
    }
    const pb_wstrat *ws = sd_map_get_str(&c->wstrats, in->windowing_strategy_id);
    if (ws == NULL) {
        *why = "its input windowing strategy is missing";
        return SD_OK;
    }
    if (!sd__plan_ws_non_merging(c, ws)) {
        *why = "its input windows merge";
        return SD_OK;
    }
    if (ws->output_time !=
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW &&
        ws->output_time != ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__UNSPECIFIED) {
        *why = "its input output time is not END_OF_WINDOW";
        return SD_OK;
    }
    if (!trigger_liftable(ws->trigger, 0)) {
        *why = "its trigger counts elements, which precombining would hide";
        return SD_OK;
    }
    const char *env = composite_env(c, t, 0);
    if (env[0] == '\0') {
        *why = "it has no environment";
        return SD_OK;
    }
    li->acc = acc;
    li->in_pc = in_pc;
    li->in = in;
    li->kv = kv;
    li->env = env;
    return SD_OK;
}

/*
 * Right answers by default: the TypeScript SDK 2.49's VarIntCoder, which its generic
 * object coder uses for numbers too, keeps 32 bits, so a lifted sum (whose accumulator
 * crosses the wire) wraps where its direct runner, which never encodes accumulators, is
 * exact. An accumulator that is a bare varint (a JavaScript number: sum, count) crosses
 * the wire with that SDK's DoubleCoder instead, which carries every JavaScript number
 * exactly; the runner chooses the lifted PCollections' coders, and nothing else reads
 * them. Other accumulators holding integers are not lifted: the values are grouped and the
 * SDK combines them in memory (one grouped element per key, which the SDK must receive
 * in one message of at most 4 MiB). OUT: li->acc (replaced); why (set when not lifted).
 */
static sd_status lift_typescript_acc(pl_ctx *c, const char *tid, lift_in *li, const char **why)
{
    bool ts = !c->opt.force_lift && sd__plan_env_is_typescript(c, li->env);
    const pb_coder *acc_coder = sd__plan_coder_get(c, li->acc);
    if (ts && acc_coder != NULL && acc_coder->spec != NULL &&
        streq(acc_coder->spec->urn, SD_URN_CODER_VARINT)) {
        const char *base = sd_arena_printf(&c->scratch, "%s/acc_double", tid);
        if (base == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd__plan_new_coder(c, base, SD_URN_CODER_DOUBLE, 0, NULL, &li->acc));
    } else if (ts && (coder_has_urn(c, li->acc, SD_URN_CODER_VARINT, 0) ||
                      coder_has_urn(c, li->acc, SD_URN_CODER_TS_GENERIC_OBJECT, 0))) {
        *why = "the TypeScript SDK 2.49 encodes integers in accumulators with 32 bits (set "
               "beam:option:sundial_lift_combiners:v1 to true to lift it anyway)";
    }
    return SD_OK;
}

/*
 * The lifted form: coders iterable(A), kv(K, A), kv(K, iterable(A)); PCollections lifted,
 * grouped and merged (like the input); and the four nodes Precombine -> GroupByKey (a runner
 * node) -> Merge -> Extract, the last writing the composite's own output.
 */
static sd_status lift_build(pl_ctx *c, const char *tid, const pb_transform *t, const lift_in *li)
{
    const char *acc = li->acc;
    const char *k = li->kv->component_coder_ids[0];
    const char *b[6] = {
        sd_arena_printf(&c->scratch, "%s/acc_iter", tid),
        sd_arena_printf(&c->scratch, "%s/kv_acc", tid),
        sd_arena_printf(&c->scratch, "%s/kv_acc_iter", tid),
        sd_arena_printf(&c->scratch, "%s/lifted", tid),
        sd_arena_printf(&c->scratch, "%s/grouped", tid),
        sd_arena_printf(&c->scratch, "%s/merged", tid),
    };
    for (size_t i = 0; i < 6; i++) {
        if (b[i] == NULL) {
            return SD_ENOMEM;
        }
    }
    const char *iter_a, *kv_ka, *kv_kia, *lifted_pc, *grouped_pc, *merged_pc;
    PL_TRY(sd__plan_new_coder(c, b[0], SD_URN_CODER_ITERABLE, 1, &acc, &iter_a));
    const char *ka[2] = { k, acc };
    PL_TRY(sd__plan_new_coder(c, b[1], SD_URN_CODER_KV, 2, ka, &kv_ka));
    const char *kia[2] = { k, iter_a };
    PL_TRY(sd__plan_new_coder(c, b[2], SD_URN_CODER_KV, 2, kia, &kv_kia));
    PL_TRY(sd__plan_new_pcoll(c, b[3], kv_ka, li->in, &lifted_pc));
    PL_TRY(sd__plan_new_pcoll(c, b[4], kv_kia, li->in, &grouped_pc));
    PL_TRY(sd__plan_new_pcoll(c, b[5], kv_ka, li->in, &merged_pc));

    const char *ids[4] = {
        sd__plan_new_transform_id(c, tid, "Precombine"),
        sd__plan_new_transform_id(c, tid, "Group"),
        sd__plan_new_transform_id(c, tid, "Merge"),
        sd__plan_new_transform_id(c, tid, "Extract"),
    };
    for (size_t i = 0; i < 4; i++) {
        if (ids[i] == NULL) {
            return SD_ENOMEM;
        }
        /* Reserve each id before the next is chosen. */
        PL_TRY(sd_map_put_str(&c->transform_ids, ids[i], PL_PRESENT));
    }
    ProtobufCBinaryData payload = t->spec->payload;
    ProtobufCBinaryData none = { 0, NULL };
    const char *urns[4] = {
        SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE,
        SD_URN_TRANSFORM_GROUP_BY_KEY,
        SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS,
        SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS,
    };
    pl_io in_io[4] = {
        { t->inputs[0]->key, li->in_pc },
        { "in", lifted_pc },
        { "in", grouped_pc },
        { "in", merged_pc },
    };
    pl_io out_io[4] = {
        { "out", lifted_pc },
        { "out", grouped_pc },
        { "out", merged_pc },
        { t->outputs[0]->key, t->outputs[0]->value },
    };
    for (size_t i = 0; i < 4; i++) {
        bool gbk = i == 1;
        pb_transform *nt =
            sd__plan_synth_transform(c, ids[i], urns[i], gbk ? none : payload, gbk ? "" : li->env,
                                     1, &in_io[i], 1, &out_io[i]);
        if (nt == NULL) {
            return SD_ENOMEM;
        }
        size_t idx;
        PL_TRY(sd__plan_add_node(c, ids[i], gbk ? PL_GBK : PL_SDK, li->env, nt, &idx));
        if (!gbk) {
            sd__plan_node(c, idx)->acc_coder = acc;
        }
    }
    return SD_OK;
}

sd_status
sd__plan_try_lift(pl_ctx *c, const char *tid, const pb_transform *t, bool *lifted, const char **why)
{
    *lifted = false;
    *why = NULL;
    lift_in li = { 0 };
    PL_TRY(lift_preconditions(c, tid, t, &li, why));
    if (*why != NULL) {
        return SD_OK;
    }
    PL_TRY(lift_typescript_acc(c, tid, &li, why));
    if (*why != NULL) {
        return SD_OK;
    }
    PL_TRY(lift_build(c, tid, t, &li));
    *lifted = true;
    return SD_OK;
}
