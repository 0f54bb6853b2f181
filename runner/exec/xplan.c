/*
 * Sundial: translating a plan into engine calls.
 *
 * This is the one place where the planner's view of a pipeline (stages, PCollections, coder
 * ids, windowing strategies, the TestStream payload) becomes the engine's (sd_coder trees,
 * sd_windowing, sd_stage_spec; TestStream payloads go through teststream/ into its driver).
 * Everything the executor needs afterwards about SDK stages — descriptor bytes, the data-source
 * transform, sink transform to PCollection routes, timer families — is indexed once into an
 * sd_exec_plan that borrows from the plan.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "org/apache/beam/model/pipeline/v1/beam_runner_api.pb-c.h"
#include "proto/state_spec.h"
#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/coder/coder.h"
#include "runner/coder/value.h"
#include "runner/exec/exec_int.h"
#include "runner/urns/urns.h"
#include "teststream/ts_drive.h"
#include "teststream/ts_pb.h"

/* ---------------------------------------------------------------- xplan index */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

sd_status sd_exec_plan_init(const sd_plan *plan, sd_exec_plan *xp, sd_err *err)
{
    memset(xp, 0, sizeof(*xp));
    xp->plan = plan;
    xp->stages = sd_calloc(plan->n_stages + 1, sizeof(*xp->stages));
    xp->env_ids = sd_calloc(plan->n_stages + 1, sizeof(*xp->env_ids));
    if (xp->stages == NULL || xp->env_ids == NULL) {
        sd_exec_plan_deinit(xp);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < plan->n_stages; i++) {
        const sd_plan_stage *ps = &plan->stages[i];
        if (ps->kind != SD_PLAN_STAGE_SDK) {
            continue;
        }
        sd_exec_stage *x = &xp->stages[xp->n_stages++];
        x->ps = ps;
        x->id = ps->id;
        x->env_id = ps->environment_id;
        x->descriptor = ps->descriptor_bytes;
        x->drain_descriptor = ps->drain_descriptor_bytes;
        x->source_transform = ps->n_inputs > 0 ? ps->source_transform : NULL;
        x->sinks = sd_calloc(ps->n_outputs + 1, sizeof(*x->sinks));
        x->timer_families = sd_calloc(ps->n_timer_families + 1, sizeof(*x->timer_families));
        if (x->sinks == NULL || x->timer_families == NULL) {
            sd_exec_plan_deinit(xp);
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        for (size_t k = 0; k < ps->n_outputs; k++) {
            if (ps->outputs[k].sink_transform != NULL) {
                x->sinks[x->n_sinks].transform_id = ps->outputs[k].sink_transform;
                x->sinks[x->n_sinks].pcollection = ps->outputs[k].pcollection;
                x->n_sinks++;
            }
        }
        for (size_t k = 0; k < ps->n_timer_families; k++) {
            x->timer_families[k].transform_id = ps->timer_families[k].transform;
            x->timer_families[k].family_id = ps->timer_families[k].family;
        }
        x->n_timer_families = ps->n_timer_families;
        bool seen = false;
        for (size_t k = 0; k < xp->n_envs; k++) {
            seen = seen || strcmp(xp->env_ids[k], ps->environment_id) == 0;
        }
        if (!seen) {
            xp->env_ids[xp->n_envs++] = ps->environment_id;
        }
    }
    qsort(xp->env_ids, xp->n_envs, sizeof(*xp->env_ids), cmp_str);
    return SD_OK;
}

void sd_exec_plan_deinit(sd_exec_plan *xp)
{
    for (size_t i = 0; xp->stages != NULL && i < xp->n_stages; i++) {
        sd_free(xp->stages[i].sinks);
        sd_free(xp->stages[i].timer_families);
    }
    sd_free(xp->stages);
    sd_free(xp->env_ids);
    sd_free(xp->drop_late);
    sd_free(xp->drop_late_out);
    memset(xp, 0, sizeof(*xp));
}

/* ---------------------------------------------------------------- coders */

static bool plan_lookup(void *ctx,
                        const char *id,
                        const char **urn,
                        sd_bytes *payload,
                        const char *const **component_ids,
                        size_t *n_components)
{
    const sd_plan_coder *c = sd_plan_find_coder(ctx, id);
    if (c == NULL) {
        return false;
    }
    *urn = c->urn;
    *payload = c->payload;
    *component_ids = c->components;
    *n_components = c->n_components;
    return true;
}

static sd_status build_coder(const sd_plan *plan, const char *id, sd_coder **out, sd_err *err)
{
    sd_coder_table t = { .lookup = plan_lookup, .ctx = (void *)plan };
    return sd_coder_build(&t, id, out, err);
}

sd_status sd__exec_plan_coder(const sd_plan *plan, const char *id, sd_coder **out, sd_err *err)
{
    return build_coder(plan, id, out, err);
}

/* The state spec's coder: kind 0 a keyed kind's values (map, multimap), 1 any kind's values,
 * 2 a keyed kind's keys (the state kinds table, runner/urns/state_kinds.h). */
static sd_status state_spec_coder(const sd_exec_plan *xp,
                                  const sd_exec_stage *xs,
                                  const char *transform_id,
                                  const char *state_id,
                                  int kind,
                                  sd_coder **out,
                                  sd_err *err)
{
    const Org__Apache__Beam__Model__FnExecution__V1__ProcessBundleDescriptor *pbd =
        xs->ps->descriptor;
    const Org__Apache__Beam__Model__Pipeline__V1__PTransform *t = NULL;
    *out = NULL;
    for (size_t i = 0; pbd != NULL && i < pbd->n_transforms; i++) {
        if (strcmp(pbd->transforms[i]->key, transform_id) == 0) {
            t = pbd->transforms[i]->value;
        }
    }
    if (t == NULL || t->spec == NULL || t->spec->urn == NULL ||
        strcmp(t->spec->urn, SD_URN_TRANSFORM_PARDO) != 0) {
        return sd_err_set(err, SD_ENOTFOUND, "stage %s has no ParDo \"%s\"", xs->id, transform_id);
    }
    Org__Apache__Beam__Model__Pipeline__V1__ParDoPayload *pd =
        org__apache__beam__model__pipeline__v1__par_do_payload__unpack(NULL, t->spec->payload.len,
                                                                       t->spec->payload.data);
    if (pd == NULL) {
        return sd_err_set(err, SD_EPROTO, "ParDo \"%s\": payload does not decode", transform_id);
    }
    const char *coder_id = NULL;
    bool found = false;
    for (size_t i = 0; i < pd->n_state_specs; i++) {
        const Org__Apache__Beam__Model__Pipeline__V1__StateSpec *ss = pd->state_specs[i]->value;
        if (ss == NULL || strcmp(pd->state_specs[i]->key, state_id) != 0) {
            continue;
        }
        found = true;
        /* Keys and a multimap's entries: keyed kinds only; values: any kind's. */
        sd_pb_state_view v;
        if (sd_pb_state_view_of(ss, &v)) {
            if (kind == 1) {
                coder_id = *v.value_coder_id;
            } else if (v.key_coder_id != NULL) {
                coder_id = kind == 2 ? *v.key_coder_id : *v.value_coder_id;
            }
        }
    }
    sd_status st;
    if (!found) {
        st = sd_err_set(err, SD_ENOTFOUND, "ParDo \"%s\" has no state \"%s\"", transform_id,
                        state_id);
    } else if (coder_id == NULL) {
        st = sd_err_set(err, SD_EINVAL, "state \"%s\" of ParDo \"%s\" is not a multimap or map",
                        state_id, transform_id);
    } else {
        st = build_coder(xp->plan, coder_id, out, err);
        if (st != SD_OK && st != SD_ENOMEM) {
            st = SD_EUNIMPL;
            (void)sd_err_prefix(err, "the value coder of state \"%s\" of ParDo \"%s\": ", state_id,
                                transform_id);
        }
    }
    org__apache__beam__model__pipeline__v1__par_do_payload__free_unpacked(pd, NULL);
    return st;
}

sd_status sd__exec_plan_multimap_value_coder(const sd_exec_plan *xp,
                                             const sd_exec_stage *xs,
                                             const char *transform_id,
                                             const char *state_id,
                                             sd_coder **out,
                                             sd_err *err)
{
    return state_spec_coder(xp, xs, transform_id, state_id, 0, out, err);
}

sd_status sd__exec_plan_state_coder(const sd_exec_plan *xp,
                                    const sd_exec_stage *xs,
                                    const char *transform_id,
                                    const char *state_id,
                                    bool keys,
                                    sd_coder **out,
                                    sd_err *err)
{
    return state_spec_coder(xp, xs, transform_id, state_id, keys ? 2 : 1, out, err);
}

/* ---------------------------------------------------------------- windowing */

/* Translate a plan trigger into engine nodes allocated in `pool` (freed by the caller). */
static sd_trigger *trigger_from_plan(const sd_plan_trigger *pt, sd_vec *pool)
{
    sd_trigger *t;
    if (pt == NULL) {
        return NULL;
    }
    t = sd_calloc(1, sizeof(*t));
    if (t == NULL || sd_vec_push(pool, &t) != SD_OK) {
        sd_free(t);
        return NULL;
    }
    switch (pt->kind) {
    case SD_PLAN_TRIGGER_DEFAULT:
        t->kind = SD_TRIGGER_DEFAULT;
        break;
    case SD_PLAN_TRIGGER_NEVER:
        t->kind = SD_TRIGGER_NEVER;
        break;
    case SD_PLAN_TRIGGER_ALWAYS:
        t->kind = SD_TRIGGER_ALWAYS;
        break;
    case SD_PLAN_TRIGGER_AFTER_ALL:
        t->kind = SD_TRIGGER_AFTER_ALL;
        break;
    case SD_PLAN_TRIGGER_AFTER_ANY:
        t->kind = SD_TRIGGER_AFTER_ANY;
        break;
    case SD_PLAN_TRIGGER_AFTER_EACH:
        t->kind = SD_TRIGGER_AFTER_EACH;
        break;
    case SD_PLAN_TRIGGER_AFTER_END_OF_WINDOW:
        t->kind = SD_TRIGGER_AFTER_END_OF_WINDOW;
        t->early = trigger_from_plan(pt->early, pool);
        t->late = trigger_from_plan(pt->late, pool);
        break;
    case SD_PLAN_TRIGGER_AFTER_PROCESSING_TIME: {
        t->kind = SD_TRIGGER_AFTER_PROCESSING_TIME;
        size_t n = pt->n_timestamp_transforms;
        sd_time_transform *tt = sd_calloc(n + 1, sizeof(*tt));
        if (tt == NULL || sd_vec_push(pool, &tt) != SD_OK) {
            sd_free(tt);
            break;
        }
        /* Delays and alignments in Beam's order (the engine rejects more than it supports). */
        for (size_t i = 0; i < n; i++) {
            const sd_plan_timestamp_transform *x = &pt->timestamp_transforms[i];
            tt[i].align = x->kind == SD_PLAN_TT_ALIGN_TO;
            tt[i].delay_ms = x->delay_ms;
            tt[i].period_ms = x->period_ms;
            tt[i].offset_ms = x->offset_ms;
        }
        t->time_transforms = tt;
        t->n_time_transforms = n;
        break;
    }
    case SD_PLAN_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        t->kind = SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME;
        break;
    case SD_PLAN_TRIGGER_ELEMENT_COUNT:
        t->kind = SD_TRIGGER_AFTER_COUNT;
        t->count = pt->element_count;
        break;
    case SD_PLAN_TRIGGER_OR_FINALLY:
        t->kind = SD_TRIGGER_OR_FINALLY;
        break;
    case SD_PLAN_TRIGGER_REPEAT:
        t->kind = SD_TRIGGER_REPEAT;
        break;
    }
    if (pt->n_subtriggers > 0) {
        const sd_trigger **subs = sd_calloc(pt->n_subtriggers, sizeof(*subs));
        if (subs == NULL || sd_vec_push(pool, &subs) != SD_OK) {
            sd_free(subs);
            return t;
        }
        for (size_t i = 0; i < pt->n_subtriggers; i++) {
            subs[i] = trigger_from_plan(&pt->subtriggers[i], pool);
        }
        t->subs = subs;
        t->n_subs = pt->n_subtriggers;
    }
    return t;
}

void sd__exec_windowing_from_plan(const sd_plan_windowing *pw, sd_windowing *ws, sd_vec *pool)
{
    memset(ws, 0, sizeof(*ws));
    if (pw == NULL) {
        return;
    }
    switch (pw->kind) {
    case SD_PLAN_WINDOW_GLOBAL:
        ws->kind = SD_WINDOWFN_GLOBAL;
        break;
    case SD_PLAN_WINDOW_FIXED:
        ws->kind = SD_WINDOWFN_FIXED;
        break;
    case SD_PLAN_WINDOW_SLIDING:
        ws->kind = SD_WINDOWFN_SLIDING;
        break;
    case SD_PLAN_WINDOW_SESSIONS:
        /* Sessions already merged (Java marks a GroupByKey's output so): the windows the
         * elements carry are final, and a later GroupByKey groups by them as they are, as by
         * any window fn the runner does not apply (merging them again would join the sessions
         * of different keys once they share one key). */
        ws->kind =
            pw->merge == SD_PLAN_MERGE_ALREADY_MERGED ? SD_WINDOWFN_CUSTOM : SD_WINDOWFN_SESSIONS;
        break;
    case SD_PLAN_WINDOW_CUSTOM:
        ws->kind = SD_WINDOWFN_CUSTOM;
        break;
    }
    ws->size_ms = pw->size_ms;
    ws->period_ms = pw->period_ms;
    ws->offset_ms = pw->offset_ms;
    ws->gap_ms = pw->gap_ms;
    ws->output_time = pw->output_time == SD_PLAN_OUTPUT_LATEST_IN_PANE ? SD_OUTPUT_TIME_LATEST
                      : pw->output_time == SD_PLAN_OUTPUT_EARLIEST_IN_PANE
                          ? SD_OUTPUT_TIME_EARLIEST
                          : SD_OUTPUT_TIME_END_OF_WINDOW;
    ws->allowed_lateness_ms = pw->allowed_lateness_ms < 0 ? 0 : pw->allowed_lateness_ms;
    ws->accumulating = pw->accumulation == SD_PLAN_ACCUMULATING;
    ws->on_time_if_nonempty = pw->on_time == SD_PLAN_FIRE_IF_NONEMPTY;
    ws->closing_emit_always = pw->closing == SD_PLAN_EMIT_ALWAYS;
    ws->no_closing_tail = pw->no_closing_tail;
    if (pw->trigger != NULL && pw->trigger->kind != SD_PLAN_TRIGGER_DEFAULT) {
        ws->trigger = trigger_from_plan(pw->trigger, pool);
    }
}

static void pool_deinit(sd_vec *pool)
{
    for (size_t i = 0; i < pool->len; i++) {
        sd_free(*SD_VEC_AT(pool, void *, i));
    }
    sd_vec_deinit(pool);
}

/* ---------------------------------------------------------------- TestStream */

/* A Go custom coder's element: varint(n) then exactly n bytes, kept as it is. */
static sd_status teststream_stored(sd_bytes in, sd_buf *out, sd_err *err)
{
    sd_reader r = sd_reader_make(in);
    uint64_t n = 0;
    if (sd_reader_varint(&r, &n) != SD_OK || n != (uint64_t)(r.end - r.p)) {
        return sd_err_set(err, SD_EINVAL,
                          "an element of %zu bytes is not one length-prefixed encoding (the Go "
                          "SDK's beam:go:coder:custom:v1 writes varint(length) then the bytes)",
                          in.len);
    }
    return sd_buf_append_bytes(out, in);
}

/*
 * TestStream elements arrive in the payload coder's outer encoding (Beam's rule) or its nested
 * one (the Go SDK); the engine keeps nested encodings of the wire coder. Length-prefixed wire
 * coders take the bytes as they are (LP's nested form is varint(len) + the bytes, which an SDK
 * decodes in the context it encoded them in); known coders are re-encoded; the Go SDK's own
 * coders already wrote the stored form.
 */
sd_status sd__exec_teststream_recode(const sd_coder *coder,
                                     sd_plan_ts_form form,
                                     sd_bytes in,
                                     sd_buf *out,
                                     sd_err *err)
{
    if (form == SD_PLAN_TS_STORED) {
        return teststream_stored(in, out, err);
    }
    if (coder == NULL) {
        return sd_buf_put_lp(out, in);
    }
    bool nested = form == SD_PLAN_TS_NESTED;
    sd_reader r = sd_reader_make(in);
    sd_value *v = NULL;
    sd_status st = sd_coder_decode(coder, &r, nested, &v, err);
    if (st == SD_OK && nested && r.p != r.end) {
        st = sd_err_set(err, SD_EINVAL,
                        "an element's nested encoding (the Go SDK's form) ends %zu bytes before "
                        "its %zu bytes do",
                        (size_t)(r.end - r.p), in.len);
    }
    if (st == SD_OK) {
        st = sd_coder_encode(coder, v, true, out, err);
    }
    sd_value_destroy(v);
    return st;
}

sd_status sd__exec_ts_recode(void *ctx, sd_bytes in, sd_buf *out, sd_err *err)
{
    const sd__exec_ts_recoder *rc = ctx;
    return sd__exec_teststream_recode(rc->coder, rc->form, in, out, err);
}

sd_status sd__exec_ts_recoder_init(const sd_plan *plan,
                                   const sd_plan_stage *ps,
                                   sd__exec_ts_recoder *out,
                                   sd_err *err)
{
    out->coder = NULL;
    out->form = ps->teststream_form;
    bool lp = ps->teststream_wire_coder_id != NULL && ps->teststream_coder_id != NULL &&
              strcmp(ps->teststream_wire_coder_id, ps->teststream_coder_id) != 0;
    if (!lp && ps->teststream_form != SD_PLAN_TS_STORED) {
        return build_coder(plan, ps->teststream_coder_id, &out->coder, err);
    }
    return SD_OK;
}

void sd__exec_ts_recoder_deinit(sd__exec_ts_recoder *rc)
{
    sd_coder_destroy(rc->coder);
    rc->coder = NULL;
}

/* Decode the stage's TestStreamPayload (teststream/ts_pb.c) and give it to the driver. A
 * payload that names a TestStreamService gives an open, live stream (exec_live.c feeds it). */
static sd_status
teststream_events(const sd_plan *plan, const sd_plan_stage *ps, sd_ts_driver *drv, sd_err *err)
{
    sd__exec_ts_recoder rc = { NULL, ps->teststream_form };
    size_t n = ps->n_teststream_outputs;
    const char **tags = sd_calloc(n + 1, sizeof(*tags));
    const char **pcolls = sd_calloc(n + 1, sizeof(*pcolls));
    sd_ts_stream *stream = NULL;
    char *url = NULL;
    sd_status st =
        tags != NULL && pcolls != NULL ? SD_OK : sd_err_set(err, SD_ENOMEM, "out of memory");
    for (size_t i = 0; st == SD_OK && i < n; i++) {
        tags[i] = ps->teststream_outputs[i].tag;
        pcolls[i] = ps->teststream_outputs[i].pcollection;
    }
    if (st == SD_OK) {
        st = sd__exec_ts_recoder_init(plan, ps, &rc, err);
    }
    if (st == SD_OK) {
        st = sd_ts_payload_endpoint(ps->teststream_payload, ps->id, &url, err);
    }
    if (st == SD_OK) {
        st = sd_ts_decode(ps->teststream_payload, ps->id, tags, n, sd__exec_ts_recode, &rc, &stream,
                          err);
    }
    if (st == SD_OK) {
        st = sd_ts_driver_add(drv, ps->id, stream, pcolls, err);
    }
    if (st == SD_OK && url != NULL) {
        st = sd_ts_driver_set_live(drv, ps->id, true, err);
    }
    sd_free(url);
    sd__exec_ts_recoder_deinit(&rc);
    sd_free(tags);
    sd_free(pcolls);
    return st;
}

/* ---------------------------------------------------------------- engine */

static sd_stage_kind stage_kind(sd_plan_stage_kind k)
{
    switch (k) {
    case SD_PLAN_STAGE_IMPULSE:
        return SD_STAGE_IMPULSE;
    case SD_PLAN_STAGE_GBK:
        return SD_STAGE_GBK;
    case SD_PLAN_STAGE_FLATTEN:
        return SD_STAGE_FLATTEN;
    case SD_PLAN_STAGE_TESTSTREAM:
        return SD_STAGE_TESTSTREAM;
    case SD_PLAN_STAGE_SDK:
    default:
        return SD_STAGE_SDK;
    }
}

static sd_status
add_stage(const sd_plan *plan, const sd_plan_stage *ps, sd_em *em, sd_ts_driver *drv, sd_err *err)
{
    sd_stage_spec spec = { 0 };
    const char **outs = sd_calloc(ps->n_outputs + 1, sizeof(*outs));
    sd_side_input_spec *sides = sd_calloc(ps->n_side_inputs + 1, sizeof(*sides));
    sd_timer_family_spec *tfs = sd_calloc(ps->n_timer_families + 1, sizeof(*tfs));
    sd_coder **tcoders = sd_calloc(ps->n_timer_families + 1, sizeof(*tcoders));
    sd_windowing *mains = sd_calloc(ps->n_side_inputs + 1, sizeof(*mains));
    sd_status st = SD_OK;
    sd_vec pool; /* the main windowings' triggers (unused by the engine) */
    sd_vec_init(&pool, sizeof(void *));

    if (outs == NULL || sides == NULL || tfs == NULL || tcoders == NULL || mains == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
        goto done;
    }
    size_t n_outs = 0;
    for (size_t i = 0; i < ps->n_outputs; i++) {
        /* A GroupByKey's late-data output and merge requests are routed after the stage
         * exists. */
        const char *pc = ps->outputs[i].pcollection;
        if ((ps->late_pcollection == NULL || strcmp(pc, ps->late_pcollection) != 0) &&
            (ps->merge_requests == NULL || strcmp(pc, ps->merge_requests) != 0)) {
            outs[n_outs++] = pc;
        }
    }
    for (size_t i = 0; i < ps->n_side_inputs; i++) {
        sides[i].transform_id = ps->side_inputs[i].transform;
        sides[i].local_id = ps->side_inputs[i].local_id;
        sides[i].pcollection = ps->side_inputs[i].pcollection;
        const char *mws = ps->side_inputs[i].main_windowing_strategy_id;
        const sd_plan_windowing *pw = mws != NULL ? sd_plan_find_windowing(plan, mws) : NULL;
        if (pw != NULL) {
            sd__exec_windowing_from_plan(pw, &mains[i], &pool);
            sides[i].main_windowing = &mains[i];
        }
        sides[i].kind = ps->side_inputs[i].access == SD_PLAN_SIDE_MULTIMAP ? SD_SIDE_MULTIMAP
                                                                           : SD_SIDE_ITERABLE;
    }
    for (size_t i = 0; i < ps->n_timer_families && st == SD_OK; i++) {
        st = build_coder(plan, ps->timer_families[i].timer_coder_id, &tcoders[i], err);
        tfs[i].transform_id = ps->timer_families[i].transform;
        tfs[i].family_id = ps->timer_families[i].family;
        tfs[i].processing_time = ps->timer_families[i].domain == SD_PLAN_PROCESSING_TIME;
        tfs[i].timer_coder = tcoders[i];
    }
    if (st != SD_OK) {
        goto done;
    }
    spec.id = ps->id;
    spec.kind = stage_kind(ps->kind);
    spec.inputs = ps->inputs;
    spec.n_inputs = ps->n_inputs;
    spec.outputs = outs;
    spec.n_outputs = n_outs;
    spec.side_inputs = sides;
    spec.n_side_inputs = ps->n_side_inputs;
    spec.stateful = ps->stateful;
    spec.timer_families = tfs;
    spec.n_timer_families = ps->n_timer_families;
    spec.expiration_transform_id = ps->expiration_transform;
    spec.expiration_family_id = ps->expiration_family;
    spec.time_sorted_input = ps->time_sorted_input;
    spec.max_output_bytes = ps->max_output_bytes;
    spec.sink_resends = ps->sink_resends;
    /* Restrictions, and what a Reshuffle redistributes, run side by side (not a stateful
     * stage's: its keys go one bundle at a time anyway). */
    spec.spread = !ps->stateful && (ps->splittable || ps->after_reshuffle);
    spec.spread_min_bytes = ps->splittable ? 0 : SD_EXEC_SPREAD_MIN_BYTES;
    st = sd_em_add_stage(em, &spec, err);
    if (st == SD_OK && ps->late_pcollection != NULL) {
        st = sd_em_set_late_output(em, ps->id, ps->late_pcollection, err);
    }
    if (st == SD_OK && ps->merge_requests != NULL) {
        st = sd_em_set_merge_windows(em, ps->id, ps->merge_requests, ps->merge_results, err);
    }
    if (st == SD_OK && ps->kind == SD_PLAN_STAGE_TESTSTREAM) {
        st = teststream_events(plan, ps, drv, err);
    }
done:
    for (size_t i = 0; tcoders != NULL && i < ps->n_timer_families; i++) {
        sd_coder_destroy(tcoders[i]);
    }
    sd_free(tcoders);
    sd_free(tfs);
    sd_free(sides);
    sd_free(mains);
    pool_deinit(&pool);
    sd_free(outs);
    if (st != SD_OK) {
        sd_err_prefix(err, "stage %s: ", ps->id);
    }
    return st;
}

sd_status sd_exec_plan_to_engine(const sd_exec_plan *xp, sd_em *em, sd_err *err)
{
    sd_ts_driver *drv = NULL;
    return sd_exec_plan_to_engine_ts(xp, em, &drv, err);
}

sd_status
sd_exec_plan_to_engine_ts(const sd_exec_plan *xp, sd_em *em, sd_ts_driver **drv_out, sd_err *err)
{
    *drv_out = NULL;
    const sd_plan *plan = xp->plan;
    sd_status st = SD_OK;

    for (size_t i = 0; i < plan->n_pcollections && st == SD_OK; i++) {
        const sd_plan_pcollection *pc = &plan->pcollections[i];
        sd_coder *port = NULL;
        sd_windowing ws;
        sd_vec pool;
        sd_vec_init(&pool, sizeof(void *));
        st = build_coder(plan, pc->port_coder_id, &port, err);
        if (st == SD_OK) {
            sd__exec_windowing_from_plan(pc->windowing, &ws, &pool);
            st = sd_em_add_pcollection(em, pc->id, port, &ws, err);
        }
        sd_coder_destroy(port);
        pool_deinit(&pool);
        if (st != SD_OK) {
            sd_err_prefix(err, "PCollection %s: ", pc->id);
        }
    }
    /* Every TestStream stage is played by the one driver (teststream/ts_drive.c). */
    sd_ts_driver *drv = NULL;
    if (st == SD_OK && plan->teststream_stage != SD_PLAN_NONE) {
        st = sd_ts_driver_create(em, &drv, err);
    }
    for (size_t i = 0; i < plan->n_stages && st == SD_OK; i++) {
        st = add_stage(plan, &plan->stages[i], em, drv, err);
    }
    for (size_t i = 0; i < xp->n_drop_late && st == SD_OK; i++) {
        st = sd_em_set_drop_behind_watermark(em, xp->drop_late[i], err);
    }
    for (size_t i = 0; i < xp->n_drop_late_out && st == SD_OK; i++) {
        st = sd_em_set_drop_behind_watermark_output(em, xp->drop_late_out[i], err);
    }
    if (st == SD_OK) {
        st = sd_em_start(em, err);
    }
    *drv_out = drv;
    return st;
}

/* ---------------------------------------------------------------- test splits option */

/*
 * Beam's direct_test_splits option, a JSON object {"<transform name>": {"timings": [seconds...],
 * "fractions": [fractions...]}, ...}, read with jansson. At most 16 splits a transform are kept
 * (the engine's sd_exec_split holds 16). A value of another shape is named in a warning and
 * ignored, as Beam's own runners ignore test options they cannot use.
 */
#define SPLITS_MAX 16

/* The numbers of array `name` of obj into out (at most SPLITS_MAX); false if not all numbers. */
static bool json_numbers(const json_t *obj, const char *name, double *out, size_t *n)
{
    const json_t *arr = json_object_get(obj, name);
    size_t i;
    const json_t *v;
    *n = 0;
    if (arr == NULL) {
        return true;
    }
    if (!json_is_array(arr)) {
        return false;
    }
    json_array_foreach(arr, i, v)
    {
        if (!json_is_number(v)) {
            return false;
        }
        if (*n < SPLITS_MAX) {
            out[(*n)++] = json_number_value(v);
        }
    }
    return true;
}

static const char *unique_name(const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *p,
                               const char *id)
{
    if (p == NULL || p->components == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < p->components->n_transforms; i++) {
        if (strcmp(p->components->transforms[i]->key, id) == 0) {
            return p->components->transforms[i]->value->unique_name;
        }
    }
    return NULL;
}

static bool name_matches(const char *name, const char *want)
{
    size_t n, w;
    if (name == NULL) {
        return false;
    }
    if (strcmp(name, want) == 0) {
        return true;
    }
    n = strlen(name);
    w = strlen(want);
    return n > w && name[n - w - 1] == '/' && strcmp(name + n - w, want) == 0;
}

void sd__exec_parse_test_splits(const char *json,
                                const sd_exec_plan *xp,
                                const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *pipeline,
                                sd_vec *out)
{
    json_error_t jerr;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
    const char *name;
    json_t *spec;
    if (root == NULL || !json_is_object(root)) {
        SD_WARN("exec", "direct_test_splits: expected a JSON object of transform names, got %s",
                root == NULL ? jerr.text : "another JSON value");
        json_decref(root);
        return;
    }
    json_object_foreach(root, name, spec)
    {
        sd_exec_split sp;
        size_t n_t = 0, n_f = 0;
        memset(&sp, 0, sizeof(sp));
        if (!json_is_object(spec) || !json_numbers(spec, "timings", sp.timings, &n_t) ||
            !json_numbers(spec, "fractions", sp.fractions, &n_f)) {
            SD_WARN("exec",
                    "direct_test_splits: \"%s\" must be {\"timings\": [numbers], "
                    "\"fractions\": [numbers]}; ignored",
                    name);
            continue;
        }
        sp.n = n_t < n_f ? n_t : n_f;
        for (size_t s = 0; s < xp->n_stages && sp.stage_id == NULL; s++) {
            const sd_plan_stage *ps = xp->stages[s].ps;
            for (size_t t = 0; t < ps->n_transforms; t++) {
                if (name_matches(ps->transforms[t], name) ||
                    name_matches(unique_name(pipeline, ps->transforms[t]), name)) {
                    sp.stage_id = sd_strdup(ps->id);
                    break;
                }
            }
        }
        if (sp.stage_id != NULL) {
            if (sd_vec_push(out, &sp) != SD_OK) {
                sd_free(sp.stage_id);
            }
        } else {
            SD_WARN("exec", "direct_test_splits: no stage runs a transform named \"%s\"", name);
        }
    }
    json_decref(root);
}
