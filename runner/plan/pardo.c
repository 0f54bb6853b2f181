/*
 * Sundial planner: ParDo nodes, their payload checks and the splittable DoFn expansion.
 *
 * graph.c decodes each ParDoPayload once, while it walks the transform tree, and hands the
 * node here. sd__plan_check_pardo checks what the payload alone decides, in a fixed order so
 * problems read the same on every run: the time-sorted and splittable-with-state refusals,
 * side input access patterns (iterable and multimap only), state specs (protocol and coders),
 * timer families (time domain, a beam:coder:timer:v1 coder) and the restriction coder. It then
 * records the node's flags (stateful, forced root, finalization, time sorted, window
 * expiration) that fusion and assembly read. A stateful ParDo is a forced root: the runner
 * keys its input, so it always starts a stage.
 *
 * A ParDo with a restriction coder is splittable: sd__plan_expand_sdf replaces it by three
 * nodes (PairWithRestriction -> SplitAndSizeRestrictions -> ProcessSizedElementsAndRestrictions)
 * with synthesized coders and PCollections; the process node keeps the ParDo's id, user name
 * and annotations, and starts a stage of its own. Checks that depend on the graph (which input
 * is the main one, whether side inputs exist) are graph.c's finish pass.
 */
#include <string.h>

#include "proto/state_spec.h"
#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

static bool streq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* Is input `local` a side input of the payload (NULL: no payload, no sides)? */
bool sd__plan_pardo_has_side(const pb_pardo *pd, const char *local)
{
    for (size_t i = 0; pd != NULL && i < pd->n_side_inputs; i++) {
        if (streq(pd->side_inputs[i]->key, local)) {
            return true;
        }
    }
    return false;
}

/* Side inputs: each needs an access pattern, and only iterable and multimap are served. */
static sd_status check_side_patterns(pl_ctx *c, const char *tn, const pb_pardo *pd)
{
    for (size_t i = 0; i < pd->n_side_inputs; i++) {
        const char *local = pd->side_inputs[i]->key;
        const Org__Apache__Beam__Model__Pipeline__V1__SideInput *si = pd->side_inputs[i]->value;
        if (si == NULL || si->access_pattern == NULL) {
            PL_TRY(sd__plan_problem(c, true, "%s: side input \"%s\" has no access pattern", tn,
                                    local));
            continue;
        }
        const char *ap = si->access_pattern->urn;
        if (!streq(ap, SD_URN_SIDE_INPUT_ITERABLE) && !streq(ap, SD_URN_SIDE_INPUT_MULTIMAP)) {
            PL_TRY(sd__plan_problem(c, false,
                                    "%s: side input \"%s\" has unsupported access pattern "
                                    "\"%s\" (only iterable, multimap)",
                                    tn, local, ap));
        }
    }
    return SD_OK;
}

/* State specs: a spec each, a supported protocol, and valid coders. */
static sd_status check_state_specs(pl_ctx *c, const char *tn, const pb_pardo *pd)
{
    for (size_t i = 0; i < pd->n_state_specs; i++) {
        const char *sid = pd->state_specs[i]->key;
        const Org__Apache__Beam__Model__Pipeline__V1__StateSpec *ss = pd->state_specs[i]->value;
        if (ss == NULL) {
            PL_TRY(sd__plan_problem(c, true, "%s: state \"%s\" has no spec", tn, sid));
            continue;
        }
        if (ss->protocol != NULL && ss->protocol->urn[0] != '\0') {
            const char *pu = ss->protocol->urn;
            if (!sd_user_state_protocol_known(pu)) {
                PL_TRY(sd__plan_problem(
                    c, false, "%s: state \"%s\" uses unsupported protocol \"%s\"", tn, sid, pu));
            }
        }
        const char *coders[2];
        sd_pb_state_coder_ids(ss, coders);
        for (size_t j = 0; j < 2; j++) {
            if (coders[j] != NULL && coders[j][0] != '\0') {
                char *who = sd_arena_printf(&c->scratch, "%s state \"%s\"", tn, sid);
                if (who == NULL) {
                    return SD_ENOMEM;
                }
                PL_TRY(sd__plan_check_coder(c, coders[j], who));
            }
        }
    }
    return SD_OK;
}

/*
 * Timer families: a spec each, a supported time domain, and a timer coder. OUT: timers (scratch,
 * one per family, NULL when there are none).
 */
static sd_status
check_timer_families(pl_ctx *c, const char *tn, const pb_pardo *pd, pl_timer **out_timers)
{
    *out_timers = NULL;
    pl_timer *timers = NULL;
    if (pd->n_timer_family_specs > 0) {
        timers = sd_arena_alloc(&c->scratch, sizeof(*timers) * pd->n_timer_family_specs);
        if (timers == NULL) {
            return SD_ENOMEM;
        }
    }
    for (size_t i = 0; i < pd->n_timer_family_specs; i++) {
        const char *fid = pd->timer_family_specs[i]->key;
        const Org__Apache__Beam__Model__Pipeline__V1__TimerFamilySpec *tf =
            pd->timer_family_specs[i]->value;
        timers[i].family = fid;
        timers[i].coder = tf != NULL ? tf->timer_family_coder_id : "";
        if (tf == NULL) {
            PL_TRY(sd__plan_problem(c, true, "%s: timer family \"%s\" has no spec", tn, fid));
            continue;
        }
        if (tf->time_domain ==
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIME_DOMAIN__ENUM__EVENT_TIME) {
            timers[i].domain = SD_PLAN_EVENT_TIME;
        } else if (tf->time_domain ==
                   ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIME_DOMAIN__ENUM__PROCESSING_TIME) {
            timers[i].domain = SD_PLAN_PROCESSING_TIME;
        } else {
            PL_TRY(sd__plan_problem(c, false,
                                    "%s: timer family \"%s\" has unsupported time domain %d", tn,
                                    fid, (int)tf->time_domain));
        }
        char *who = sd_arena_printf(&c->scratch, "%s timer family \"%s\"", tn, fid);
        if (who == NULL) {
            return SD_ENOMEM;
        }
        const char *urn = sd__plan_coder_urn(c, tf->timer_family_coder_id);
        PL_TRY(sd__plan_check_coder(c, tf->timer_family_coder_id, who));
        if (urn != NULL && !streq(urn, SD_URN_CODER_TIMER)) {
            PL_TRY(sd__plan_problem(c, true, "%s: coder \"%s\" is \"%s\", expected %s", who,
                                    tf->timer_family_coder_id, urn, SD_URN_CODER_TIMER));
        }
    }
    *out_timers = timers;
    return SD_OK;
}

/* Check the ParDoPayload parts that do not depend on the graph; fill node flags. */
sd_status sd__plan_check_pardo(pl_ctx *c, size_t idx)
{
    pl_node *n = sd__plan_node(c, idx);
    const pb_pardo *pd = n->pardo;
    const char *tn = sd__plan_tname(c, n->id);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    bool stateful = pd->n_state_specs > 0 || pd->n_timer_family_specs > 0;
    /* Beam sorts by timestamp per key, so only a stateful (keyed) ParDo can ask for it. */
    if (pd->requires_time_sorted_input && !stateful) {
        PL_TRY(sd__plan_problem(c, false,
                                "%s: requires_time_sorted_input on a ParDo without state or "
                                "timers is not supported",
                                tn));
    }
    if (stateful && pd->restriction_coder_id[0] != '\0') {
        PL_TRY(sd__plan_problem(c, false,
                                "%s: a splittable DoFn with state or timers is not supported", tn));
    }
    PL_TRY(check_side_patterns(c, tn, pd));
    PL_TRY(check_state_specs(c, tn, pd));
    pl_timer *timers;
    PL_TRY(check_timer_families(c, tn, pd, &timers));
    if (pd->restriction_coder_id[0] != '\0') {
        char *who = sd_arena_printf(&c->scratch, "%s restriction", tn);
        if (who == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd__plan_check_coder(c, pd->restriction_coder_id, who));
    }
    n = sd__plan_node(c, idx);
    n->timers = timers;
    n->n_timers = pd->n_timer_family_specs;
    n->stateful = stateful;
    n->forced_root = n->forced_root || stateful;
    n->finalization = pd->requests_finalization;
    n->time_sorted = pd->requires_time_sorted_input && stateful;
    n->window_expiration = pd->on_window_expiration_timer_family_spec[0] != '\0';
    n->expiration_family = NULL;
    if (n->window_expiration) {
        n->expiration_family =
            sd_arena_strdup(&c->scratch, pd->on_window_expiration_timer_family_spec);
        if (n->expiration_family == NULL) {
            return SD_ENOMEM;
        }
    }
    return SD_OK;
}

/* The one main input of t given its ParDoPayload; NULL (and *count) when not exactly one. */
static const char *pardo_main_local(const pb_transform *t, const pb_pardo *pd, size_t *count)
{
    const char *local = NULL;
    *count = 0;
    for (size_t i = 0; i < t->n_inputs; i++) {
        if (!sd__plan_pardo_has_side(pd, t->inputs[i]->key)) {
            local = t->inputs[i]->key;
            (*count)++;
        }
    }
    return *count == 1 ? local : NULL;
}

/*
 * A splittable DoFn: three nodes; the process node keeps the ParDo's id. The DoFn's side
 * inputs go to all three, since its restriction methods (GetInitialRestriction, SplitRestriction,
 * GetSize) may read them as ProcessElement does: the SDK looks each one up among the inputs of
 * the transform it is running.
 */
sd_status sd__plan_expand_sdf(pl_ctx *c, const char *tid, const pb_transform *t, pb_pardo *pd)
{
    const char *tn = sd__plan_tname(c, tid);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    size_t count;
    const char *local = pardo_main_local(t, pd, &count);
    if (local == NULL) {
        return sd__plan_problem(c, true, "%s: a ParDo needs exactly one main input, found %zu", tn,
                                count);
    }
    const char *in_pc = NULL;
    for (size_t i = 0; i < t->n_inputs; i++) {
        if (streq(t->inputs[i]->key, local)) {
            in_pc = t->inputs[i]->value;
        }
    }
    const pb_pcoll *in = sd__plan_pcoll_get(c, in_pc);
    if (in == NULL) {
        return sd__plan_problem(c, true, "%s: input PCollection \"%s\" does not exist", tn, in_pc);
    }
    if (sd__plan_coder_get(c, pd->restriction_coder_id) == NULL) {
        return SD_OK; /* reported by sd__plan_check_pardo */
    }
    char *b1 = sd_arena_printf(&c->scratch, "%s/sdf_kv_elem_restr", tid);
    char *b2 = sd_arena_printf(&c->scratch, "%s/sdf_size", tid);
    char *b3 = sd_arena_printf(&c->scratch, "%s/sdf_kv_elem_restr_size", tid);
    char *p1 = sd_arena_printf(&c->scratch, "%s/pair_with_restriction", tid);
    char *p2 = sd_arena_printf(&c->scratch, "%s/split_and_size", tid);
    if (b1 == NULL || b2 == NULL || b3 == NULL || p1 == NULL || p2 == NULL) {
        return SD_ENOMEM;
    }
    const char *ker, *size, *kers, *pwr, *sns;
    const char *c1[2] = { in->coder_id, pd->restriction_coder_id };
    PL_TRY(sd__plan_new_coder(c, b1, SD_URN_CODER_KV, 2, c1, &ker));
    PL_TRY(sd__plan_new_coder(c, b2, SD_URN_CODER_DOUBLE, 0, NULL, &size));
    const char *c3[2] = { ker, size };
    PL_TRY(sd__plan_new_coder(c, b3, SD_URN_CODER_KV, 2, c3, &kers));
    PL_TRY(sd__plan_new_pcoll(c, p1, ker, in, &pwr));
    PL_TRY(sd__plan_new_pcoll(c, p2, kers, in, &sns));

    const char *id_pair = sd__plan_new_transform_id(c, tid, "PairWithRestriction");
    const char *id_split = sd__plan_new_transform_id(c, tid, "SplitAndSizeRestrictions");
    if (id_pair == NULL || id_split == NULL) {
        return SD_ENOMEM;
    }
    ProtobufCBinaryData payload = t->spec->payload;
    /* Each transform: the ParDo's inputs with the main input replaced by the one it reads. */
    pl_io *pins = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (t->n_inputs + 1));
    pl_io *sins = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (t->n_inputs + 1));
    pl_io *ins = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (t->n_inputs + 1));
    pl_io *outs = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (t->n_outputs + 1));
    if (pins == NULL || sins == NULL || ins == NULL || outs == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < t->n_inputs; i++) {
        bool main = streq(t->inputs[i]->key, local);
        pins[i].local = sins[i].local = ins[i].local = t->inputs[i]->key;
        pins[i].pcoll = main ? in_pc : t->inputs[i]->value;
        sins[i].pcoll = main ? pwr : t->inputs[i]->value;
        ins[i].pcoll = main ? sns : t->inputs[i]->value;
    }
    pl_io pout = { "out", pwr };
    pb_transform *tp =
        sd__plan_synth_transform(c, id_pair, SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION, payload,
                                 t->environment_id, t->n_inputs, pins, 1, &pout);
    pl_io sout = { "out", sns };
    pb_transform *ts =
        sd__plan_synth_transform(c, id_split, SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS,
                                 payload, t->environment_id, t->n_inputs, sins, 1, &sout);
    if (tp == NULL || ts == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < t->n_outputs; i++) {
        outs[i].local = t->outputs[i]->key;
        outs[i].pcoll = t->outputs[i]->value;
    }
    pb_transform *tproc = sd__plan_synth_transform(
        c, tid, SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS, payload,
        t->environment_id, t->n_inputs, ins, t->n_outputs, outs);
    if (tproc == NULL) {
        return SD_ENOMEM;
    }
    /* Keep the user's name and annotations/display data on the transform running the DoFn. */
    tproc->unique_name = t->unique_name;
    tproc->n_display_data = t->n_display_data;
    tproc->display_data = t->display_data;
    tproc->n_annotations = t->n_annotations;
    tproc->annotations = t->annotations;
    tproc->base.n_unknown_fields = t->base.n_unknown_fields;
    tproc->base.unknown_fields = t->base.unknown_fields;

    size_t i1, i2, i3;
    PL_TRY(sd__plan_add_node(c, id_pair, PL_SDK, t->environment_id, tp, &i1));
    PL_TRY(sd__plan_add_node(c, id_split, PL_SDK, t->environment_id, ts, &i2));
    PL_TRY(sd__plan_add_node(c, tid, PL_SDK, t->environment_id, tproc, &i3));
    /* Their side inputs are the ParDo's (the payload says which inputs are sides). */
    sd__plan_node(c, i1)->pardo = pd;
    sd__plan_node(c, i2)->pardo = pd;
    pl_node *n = sd__plan_node(c, i3);
    n->pardo = pd;
    n->splittable = true;
    n->forced_root = true;
    return sd__plan_check_pardo(c, i3);
}
