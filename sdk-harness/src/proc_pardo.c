/*
 * Sundial C SDK: descriptor -> ParDo operator — the bundle processor's largest builder.
 *
 * sd__proc_build_pardo turns one ParDo transform of a ProcessBundleDescriptor into an
 * operator (proc_graph.c calls it from build_op for beam:transform:pardo:v1 and the SDF
 * component URNs, with o->sdf_role set), in steps:
 *
 *   payload      the ParDoPayload must name a C DoFn (beam:dofn:sundial_c:v1) that this
 *                worker registered; a splittable ParDo must arrive expanded; the DoFn
 *                payload (outputs, side inputs, config) is copied and decoded, and a
 *                splittable DoFn's watermark estimator read
 *   state        every state spec (bag, value, combining, map, ordered list) with its coders
 *                and every timer family with its timer coder; any of them makes it stateful
 *   inputs       an SDF pair/split component has one input and one output; otherwise the
 *                inputs named in the DoFn payload are side inputs (multimap or iterable, as
 *                the ParDoPayload says) and the remaining one is the main input
 *   outputs      in the DoFn payload's tag order (the index sd_emit takes)
 *   SDF locals   an SDF process component records the local names its residual roots carry
 *
 * Errors name the transform and what is wrong.
 */
#include <stdio.h>
#include <string.h>

#include "proto/state_spec.h"
#include "runner/base/alloc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/proc_int.h"

/* State ids with their coders and timer families with their timer coders. */
static sd_status
build_state_specs(const pb_PBD *d, const SD_PL(ParDoPayload) * pp, op *o, sd_err *err)
{
    sd_status st;
    o->stateful = pp->n_state_specs > 0 || pp->n_timer_family_specs > 0;
    if (pp->n_state_specs > 0) {
        o->state_ids = sd_calloc(pp->n_state_specs, sizeof(char *));
        o->state_coders = sd_calloc(pp->n_state_specs, sizeof(sd_coder *));
        o->state_infos = sd_calloc(pp->n_state_specs, sizeof(sd__state_info));
        o->state_key_coders = sd_calloc(pp->n_state_specs, sizeof(sd_coder *));
        o->state_cfgs = sd_calloc(pp->n_state_specs, sizeof(uint8_t *));
        o->n_state_slots = o->state_ids != NULL && o->state_coders != NULL ? pp->n_state_specs : 0;
        if (o->state_ids == NULL || o->state_coders == NULL || o->state_infos == NULL ||
            o->state_key_coders == NULL || o->state_cfgs == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < pp->n_state_specs; i++) {
        const SD_PL(StateSpec) *ss = pp->state_specs[i]->value;
        const char *sid = pp->state_specs[i]->key;
        sd__state_info *info = &o->state_infos[o->n_states];
        sd_pb_state_view v;
        if (ss == NULL || !sd_pb_state_view_of(ss, &v)) {
            return sd_err_set(err, SD_EUNIMPL,
                              "transform %s: state %s: no spec, or a kind Sundial does not know",
                              o->tid, sid);
        }
        if (!sd__state_kind_in_sdk(v.kind)) {
            return sd_err_set(err, SD_EUNIMPL,
                              "transform %s: state %s: %s state is not supported by the C SDK",
                              o->tid, sid, sd_user_state_name(v.kind));
        }
        const char *cid = *v.value_coder_id;
        info->kind = v.kind;
        if (v.kind == SD_USER_STATE_COMBINING) {
            sd_bytes name;
            const SD_PL(FunctionSpec) *cf = ss->combining_spec->combine_fn;
            if (cf == NULL || strcmp(cf->urn, SD_URN_COMBINEFN_C) != 0) {
                return sd_err_set(err, SD_EUNIMPL,
                                  "transform %s: combining state %s: the "
                                  "CombineFn is not a C CombineFn (%s)",
                                  o->tid, sid, SD_URN_COMBINEFN_C);
            }
            o->state_cfgs[o->n_states] = sd_memdup(cf->payload.data, cf->payload.len);
            if (o->state_cfgs[o->n_states] == NULL && cf->payload.len > 0) {
                return sd_err_set(err, SD_ENOMEM, "out of memory");
            }
            if ((st = sd__combinefn_payload_decode(
                     sd_bytes_make(o->state_cfgs[o->n_states], cf->payload.len), &name,
                     &info->config, err)) != SD_OK) {
                return sd_err_prefix(err, "transform %s: combining state %s: ", o->tid, sid);
            }
            info->cfn = sd__find_combinefn(name);
            if (info->cfn == NULL) {
                return sd_err_set(err, SD_ENOTFOUND,
                                  "transform %s: combining state %s: no "
                                  "CombineFn registered as \"%.*s\" in this worker",
                                  o->tid, sid, (int)name.len, (const char *)name.ptr);
            }
        }
        if (v.key_coder_id != NULL) {
            if ((st = sd__proc_build_coder(d, *v.key_coder_id, &o->state_key_coders[o->n_states],
                                           err)) != SD_OK) {
                return sd_err_prefix(err, "transform %s: %s state %s keys: ", o->tid,
                                     sd_user_state_name(v.kind), sid);
            }
            info->key_coder = o->state_key_coders[o->n_states];
        }
        o->state_ids[o->n_states] = sd_strdup(pp->state_specs[i]->key);
        if (o->state_ids[o->n_states] == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        st = sd__proc_build_coder(d, cid, &o->state_coders[o->n_states], err);
        info->coder = o->state_coders[o->n_states];
        o->n_states++;
        if (st != SD_OK) {
            return sd_err_prefix(err, "transform %s: state %s: ", o->tid, pp->state_specs[i]->key);
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
        if ((st = sd__proc_build_coder(d, ts->timer_family_coder_id, &f->coder, err)) != SD_OK) {
            return sd_err_prefix(err, "transform %s: timer family %s: ", o->tid, f->family);
        }
        if (f->coder->kind != SD_CODER_TIMER) {
            return sd_err_set(err, SD_EPROTO,
                              "transform %s: timer family %s: coder %s is not a "
                              "timer coder",
                              o->tid, f->family, f->coder->urn);
        }
    }
    return SD_OK;
}

/* A ParDo's payload: checks, state specs, the DoFn payload copied and decoded, the DoFn looked
 * up, and a splittable DoFn's watermark estimator. */
static sd_status read_pardo_payload(const pb_PBD *d, const pb_PTransform *t, op *o, sd_err *err)
{
    sd_status st;
    SD_PL(ParDoPayload) *pp =
        PLF(par_do_payload__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
    if (pp == NULL || pp->do_fn == NULL) {
        if (pp != NULL) {
            PLF(par_do_payload__free_unpacked)(pp, NULL);
        }
        return sd_err_set(err, SD_EPROTO, "transform %s: malformed ParDoPayload", o->tid);
    }
    if (strcmp(pp->do_fn->urn, SD_URN_DOFN_C) != 0) {
        st = sd_err_set(err, SD_EUNIMPL, "transform %s: DoFn URN %s is not a C DoFn (%s)", o->tid,
                        pp->do_fn->urn, SD_URN_DOFN_C);
        PLF(par_do_payload__free_unpacked)(pp, NULL);
        return st;
    }
    if (pp->restriction_coder_id != NULL && pp->restriction_coder_id[0] != '\0' &&
        o->sdf_role == 0) {
        st = sd_err_set(err, SD_EPROTO,
                        "transform %s: a splittable ParDo reached the SDK "
                        "unexpanded (the runner must expand it into the SDF components)",
                        o->tid);
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
                          "it before sd_sdk_main)",
                          o->tid, (int)o->pl.name.len, (const char *)o->pl.name.ptr);
    }
    if (o->sdf_role != 0) {
        if (o->fn->initial_restriction == NULL) {
            return sd_err_set(err, SD_EINVAL,
                              "transform %s: DoFn \"%.*s\" runs as a splittable "
                              "DoFn but has no initial_restriction",
                              o->tid, (int)o->pl.name.len, (const char *)o->pl.name.ptr);
        }
        if ((st = sd__sdf_payload_wm(sd_bytes_make(o->payload, plen), &o->wm_spec, err)) != SD_OK) {
            return sd_err_prefix(err, "transform %s: ", o->tid);
        }
    }
    return SD_OK;
}

/* The pair-with-restriction, split-and-size and (drain) truncate components of a splittable
 * DoFn. */
static sd_status
connect_sdf_component(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o, sd_err *err)
{
    sd_status st;
    /* One input, one output "out"; side inputs belong to the process transform. */
    if (t->n_inputs != 1 || t->n_outputs != 1) {
        return sd_err_set(err, SD_EPROTO,
                          "transform %s: an SDF component needs one input "
                          "and one output",
                          o->tid);
    }
    if ((st = sd__proc_connect_input(bp, d, o, t->inputs[0]->value, err)) != SD_OK) {
        return st;
    }
    const sd_coder *ic = o->in->coder;
    if (o->sdf_role == SDF_SPLIT &&
        (ic->kind != SD_CODER_KV || ic->components[1]->kind != SD_CODER_KV)) {
        return sd_err_set(err, SD_EPROTO,
                          "transform %s: input %s is not KV(element, "
                          "restriction)",
                          o->tid, o->in->id);
    }
    if (o->sdf_role == SDF_TRUNCATE &&
        (ic->kind != SD_CODER_KV || ic->components[0]->kind != SD_CODER_KV)) {
        return sd_err_set(err, SD_EPROTO,
                          "transform %s: input %s is not KV(KV(element, restriction), size)",
                          o->tid, o->in->id);
    }
    const char *out_id = t->outputs[0]->value;
    return sd__proc_set_outputs(bp, d, o, 1, &out_id, err);
}

/* A ParDo's side inputs by local name (their access patterns from the ParDoPayload). OUT:
 * main_in, the input that is not a side input (NULL when there is none). */
static sd_status connect_sides(sd__proc *bp,
                               const pb_PBD *d,
                               const pb_PTransform *t,
                               op *o,
                               const char **main_in_out,
                               sd_err *err)
{
    sd_status st;
    SD_PL(ParDoPayload) * pp;
    const char *main_in = NULL;
    /* Side inputs by local name, main input = the other one. */
    o->n_sides = o->pl.n_sides;
    o->sides = o->n_sides > 0 ? sd_calloc(o->n_sides, sizeof(side)) : NULL;
    if (o->n_sides > 0 && o->sides == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < t->n_inputs; i++) {
        bool is_side = false;
        for (size_t j = 0; j < o->pl.n_sides; j++) {
            sd_bytes s = o->pl.sides[j];
            if (strlen(t->inputs[i]->key) == s.len &&
                memcmp(t->inputs[i]->key, s.ptr, s.len) == 0) {
                is_side = true;
                o->sides[j].local = sd_strdup(t->inputs[i]->key);
                if (o->sides[j].local == NULL) {
                    return sd_err_set(err, SD_ENOMEM, "out of memory");
                }
                st = sd__proc_add_pcn(bp, d, t->inputs[i]->value, &o->sides[j].pc, err);
                if (st != SD_OK) {
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
                o->sides[k].multimap = strcmp(pp->side_inputs[j]->value->access_pattern->urn,
                                              SD_URN_SIDE_INPUT_MULTIMAP) == 0;
                if (o->sides[k].multimap && o->sides[k].pc->coder->kind != SD_CODER_KV) {
                    PLF(par_do_payload__free_unpacked)(pp, NULL);
                    return sd_err_set(err, SD_EPROTO,
                                      "transform %s: multimap side input %s is "
                                      "not a KV PCollection",
                                      o->tid, o->sides[k].local);
                }
            }
        }
    }
    if (pp != NULL) {
        PLF(par_do_payload__free_unpacked)(pp, NULL);
    }
    *main_in_out = main_in;
    return SD_OK;
}

/* A ParDo's outputs in the DoFn payload's tag order. */
static sd_status
connect_pardo_outputs(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o, sd_err *err)
{
    sd_status st;
    const char **ids = sd_calloc(o->pl.n_outputs + 1, sizeof(char *));
    if (ids == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < o->pl.n_outputs; i++) {
        char tag[256];
        snprintf(tag, sizeof(tag), "%.*s", (int)o->pl.outputs[i].len,
                 (const char *)o->pl.outputs[i].ptr);
        ids[i] = sd__proc_string_map(t->n_outputs, (void **)t->outputs, tag);
    }
    st = sd__proc_set_outputs(bp, d, o, o->pl.n_outputs, ids, err);
    sd_free(ids);
    return st;
}

/* A splittable DoFn's process component: the local names its residual roots carry. */
static sd_status record_sdf_locals(const pb_PTransform *t, op *o, sd_err *err)
{
    /* Residual roots name the main input and every output by local name. */
    const sd_coder *ic = o->in->coder;
    if (ic->kind != SD_CODER_KV || ic->components[0]->kind != SD_CODER_KV) {
        return sd_err_set(err, SD_EPROTO,
                          "transform %s: input %s is not KV(KV(element, "
                          "restriction), size)",
                          o->tid, o->in->id);
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
    return SD_OK;
}

/* A ParDo operator: its payload and DoFn, then its inputs (main and side) and outputs. */
sd_status
sd__proc_build_pardo(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o, sd_err *err)
{
    sd_status st = read_pardo_payload(d, t, o, err);
    if (st != SD_OK) {
        return st;
    }
    if (o->sdf_role == SDF_PAIR || o->sdf_role == SDF_SPLIT || o->sdf_role == SDF_TRUNCATE) {
        return connect_sdf_component(bp, d, t, o, err);
    }
    const char *main_in = NULL;
    if ((st = connect_sides(bp, d, t, o, &main_in, err)) != SD_OK) {
        return st;
    }
    if (main_in == NULL) {
        return sd_err_set(err, SD_EPROTO, "transform %s: no main input", o->tid);
    }
    if ((st = sd__proc_connect_input(bp, d, o, main_in, err)) != SD_OK) {
        return st;
    }
    if (o->stateful && o->in->coder->kind != SD_CODER_KV) {
        return sd_err_set(err, SD_EPROTO, "transform %s: stateful DoFn input %s is not a KV",
                          o->tid, o->in->id);
    }
    st = connect_pardo_outputs(bp, d, t, o, err);
    if (st == SD_OK && o->sdf_role == SDF_PROCESS) {
        st = record_sdf_locals(t, o, err);
    }
    return st;
}
