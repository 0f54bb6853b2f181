/*
 * Sundial: graph registration and validation.
 *
 * The executor describes the pipeline before it runs: sd_em_add_pcollection (an id, a
 * windowed-value coder, a windowing strategy whose trigger is compiled here), sd_em_add_stage
 * (a kind, inputs, outputs, side inputs, timer families, stateful and time-sorted flags),
 * sd_em_set_late_output (a GBK's dead-letter PCollection) and sd_em_start, which sorts the
 * stages topologically and seeds the watermarks. Every check happens here, before anything
 * runs, and fails with SD_EINVAL (SD_ENOTFOUND for an unknown id) and a message naming the
 * object and the expectation (an input listed twice, a keyed input without a KV coder, a
 * wrong number of inputs for the stage kind, a time-sorted input on a stateless stage, a
 * cycle, ...). Nothing may be registered after sd_em_start. A failed sd_em_add_stage leaves
 * no half-added stage: every slot the links need is reserved before the first link is made.
 *
 * Once started, the graph is fixed: em.c delivers and schedules over the stage and
 * PCollection records built here (em_int.h), in the order topo_sort chose.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* Graph                                                                                      */
/* ========================================================================================== */

static sd_status check_windowing(const char *id, const sd_windowing *ws, sd_err *err)
{
    if (ws->allowed_lateness_ms < 0) {
        return sd_err_set(err, SD_EINVAL,
                          "pcollection \"%s\": allowed lateness must be >= 0, got %lld", id,
                          (long long)ws->allowed_lateness_ms);
    }
    switch (ws->kind) {
    case SD_WINDOWFN_GLOBAL:
    case SD_WINDOWFN_CUSTOM:
        break;
    case SD_WINDOWFN_FIXED:
    case SD_WINDOWFN_SLIDING:
        if (ws->size_ms <= 0 || (ws->kind == SD_WINDOWFN_SLIDING && ws->period_ms <= 0)) {
            return sd_err_set(err, SD_EINVAL,
                              "pcollection \"%s\": window size and period must be > 0", id);
        }
        break;
    case SD_WINDOWFN_SESSIONS:
        if (ws->gap_ms <= 0) {
            return sd_err_set(err, SD_EINVAL, "pcollection \"%s\": session gap must be > 0", id);
        }
        break;
    default:
        return sd_err_set(err, SD_EINVAL, "pcollection \"%s\": unknown window function %d", id,
                          (int)ws->kind);
    }
    if (ws->output_time != SD_OUTPUT_TIME_END_OF_WINDOW &&
        ws->output_time != SD_OUTPUT_TIME_EARLIEST && ws->output_time != SD_OUTPUT_TIME_LATEST) {
        return sd_err_set(err, SD_EINVAL, "pcollection \"%s\": unknown output time %d", id,
                          (int)ws->output_time);
    }
    return SD_OK;
}

sd_status sd_em_add_pcollection(sd_em *em,
                                const char *id,
                                const sd_coder *wv_coder,
                                const sd_windowing *ws,
                                sd_err *err)
{
    sd_windowing def = { 0 };
    sd__pcoll *pc;
    sd_status st;
    if (em == NULL || id == NULL || wv_coder == NULL) {
        return sd_err_set(err, SD_EINVAL, "add_pcollection: em, id and coder are required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "pcollection \"%s\": engine already started", id);
    }
    if (sd__em_find_pcoll(em, id) != NULL) {
        return sd_err_set(err, SD_EEXIST, "pcollection \"%s\": already added", id);
    }
    if (wv_coder->kind != SD_CODER_WINDOWED_VALUE &&
        wv_coder->kind != SD_CODER_PARAM_WINDOWED_VALUE) {
        return sd_err_set(err, SD_EINVAL,
                          "pcollection \"%s\": expected a windowed_value coder, got %s", id,
                          sd_coder_kind_name(wv_coder->kind));
    }
    const sd_coder *elem = sd_wv_element_coder(wv_coder);
    const sd_coder *win = sd_wv_window_coder(wv_coder);
    if (elem == NULL || win == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "pcollection \"%s\": windowed_value coder lacks "
                          "components",
                          id);
    }
    if (win->kind != SD_CODER_GLOBAL_WINDOW && win->kind != SD_CODER_INTERVAL_WINDOW &&
        win->kind != SD_CODER_CUSTOM_WINDOW) {
        return sd_err_set(err, SD_EINVAL,
                          "pcollection \"%s\": expected a global, interval or custom window "
                          "coder, got %s",
                          id, sd_coder_kind_name(win->kind));
    }
    if (ws == NULL) {
        ws = &def;
    }
    if (win->kind == SD_CODER_CUSTOM_WINDOW && ws->kind != SD_WINDOWFN_CUSTOM) {
        /* The engine assigns the standard window fns' windows itself, as intervals. */
        return sd_err_set(err, SD_EINVAL,
                          "pcollection \"%s\": custom windows need a window fn of the SDK's "
                          "(custom), not one the runner assigns",
                          id);
    }
    st = check_windowing(id, ws, err);
    if (st != SD_OK) {
        return st;
    }
    pc = sd_calloc(1, sizeof(*pc));
    if (pc == NULL) {
        return SD_ENOMEM;
    }
    sd_vec_init(&pc->consumers, sizeof(size_t));
    sd_vec_init(&pc->side_consumers, sizeof(sd__side_ref));
    pc->id = sd_strdup(id);
    pc->index = em->pcolls.len;
    pc->wv_coder = sd_coder_ref((sd_coder *)wv_coder);
    pc->elem_coder = elem;
    pc->window_coder = win;
    pc->param_wv = wv_coder->kind == SD_CODER_PARAM_WINDOWED_VALUE;
    pc->is_kv = elem->kind == SD_CODER_KV;
    pc->ws = *ws;
    pc->ws.trigger = NULL;
    pc->producer = SIZE_MAX;
    pc->merge_gbk = SIZE_MAX;
    pc->wm = SD_TIME_MIN;
    if (pc->id == NULL) {
        sd__pcoll_destroy(pc);
        return SD_ENOMEM;
    }
    st = sd__trig_compile(ws->trigger, &pc->trigger, err);
    if (st != SD_OK) {
        sd__pcoll_destroy(pc);
        if (st != SD_ENOMEM) {
            (void)sd_err_prefix(err, "pcollection \"%s\": ", id);
        }
        return st;
    }
    st = sd_vec_push(&em->pcolls, &pc);
    if (st != SD_OK) {
        sd__pcoll_destroy(pc);
        return st;
    }
    st = sd_map_put_str(&em->pcoll_by_id, id, pc);
    if (st != SD_OK) {
        em->pcolls.len--;
        sd__pcoll_destroy(pc);
        return st;
    }
    return SD_OK;
}

static sd_status check_stage_spec(sd_em *em, const sd_stage_spec *s, sd_err *err)
{
    const char *id = s->id;
    size_t min_in = 0, max_in = 0, min_out = 0, max_out = SIZE_MAX;
    switch (s->kind) {
    case SD_STAGE_SDK:
        min_in = max_in = 1;
        break;
    case SD_STAGE_IMPULSE:
        min_out = max_out = 1;
        break;
    case SD_STAGE_GBK:
        min_in = max_in = 1;
        min_out = max_out = 1;
        break;
    case SD_STAGE_FLATTEN:
        /* Beam's Flatten of an empty PCollectionList is an empty PCollection: with no inputs
         * nothing is ever pending and the upstream watermark is the end of time. */
        min_in = 0;
        max_in = SIZE_MAX;
        min_out = max_out = 1;
        break;
    case SD_STAGE_TESTSTREAM:
        min_out = 1;
        break;
    default:
        return sd_err_set(err, SD_EINVAL, "stage \"%s\": unknown stage kind %d", id, (int)s->kind);
    }
    if (s->n_inputs < min_in || s->n_inputs > max_in) {
        return sd_err_set(err, SD_EINVAL, "stage \"%s\": wrong number of inputs (%zu)", id,
                          s->n_inputs);
    }
    if (s->n_outputs < min_out || s->n_outputs > max_out) {
        return sd_err_set(err, SD_EINVAL, "stage \"%s\": wrong number of outputs (%zu)", id,
                          s->n_outputs);
    }
    if (s->time_sorted_input && (s->kind != SD_STAGE_SDK || !s->stateful)) {
        return sd_err_set(err, SD_EINVAL,
                          "stage \"%s\": time-sorted input needs a stateful SDK stage", id);
    }
    if (s->kind != SD_STAGE_SDK &&
        (s->n_side_inputs > 0 || s->n_timer_families > 0 || s->stateful)) {
        return sd_err_set(err, SD_EINVAL,
                          "stage \"%s\": side inputs, state and timers need an SDK stage", id);
    }
    for (size_t i = 0; i < s->n_inputs; i++) {
        sd__pcoll *pc = sd__em_find_pcoll(em, s->inputs[i]);
        if (pc == NULL) {
            return sd_err_set(err, SD_ENOTFOUND, "stage \"%s\": unknown input pcollection \"%s\"",
                              id, s->inputs[i] ? s->inputs[i] : "(null)");
        }
        if ((s->kind == SD_STAGE_GBK || s->stateful || s->n_timer_families > 0) && !pc->is_kv) {
            return sd_err_set(err, SD_EINVAL,
                              "stage \"%s\": input \"%s\" must have a KV element coder, got %s", id,
                              pc->id, sd_coder_kind_name(pc->elem_coder->kind));
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(s->inputs[i], s->inputs[j]) == 0) {
                return sd_err_set(err, SD_EINVAL, "stage \"%s\": input \"%s\" listed twice", id,
                                  pc->id);
            }
        }
    }
    for (size_t i = 0; i < s->n_outputs; i++) {
        sd__pcoll *pc = sd__em_find_pcoll(em, s->outputs[i]);
        if (pc == NULL) {
            return sd_err_set(err, SD_ENOTFOUND, "stage \"%s\": unknown output pcollection \"%s\"",
                              id, s->outputs[i] ? s->outputs[i] : "(null)");
        }
        if (pc->producer != SIZE_MAX) {
            return sd_err_set(err, SD_EEXIST,
                              "stage \"%s\": pcollection \"%s\" already has producer \"%s\"", id,
                              pc->id, sd__em_stage_at(em, pc->producer)->id);
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(s->outputs[i], s->outputs[j]) == 0) {
                return sd_err_set(err, SD_EINVAL, "stage \"%s\": output \"%s\" listed twice", id,
                                  pc->id);
            }
        }
    }
    for (size_t i = 0; i < s->n_side_inputs; i++) {
        const sd_side_input_spec *si = &s->side_inputs[i];
        sd__pcoll *pc = sd__em_find_pcoll(em, si->pcollection);
        if (si->transform_id == NULL || si->local_id == NULL) {
            return sd_err_set(err, SD_EINVAL, "stage \"%s\": side input %zu lacks ids", id, i);
        }
        if (pc == NULL) {
            return sd_err_set(err, SD_ENOTFOUND,
                              "stage \"%s\": side input \"%s\" reads unknown pcollection \"%s\"",
                              id, si->local_id, si->pcollection ? si->pcollection : "(null)");
        }
        if (si->kind == SD_SIDE_MULTIMAP && !pc->is_kv) {
            return sd_err_set(err, SD_EINVAL,
                              "stage \"%s\": multimap side input \"%s\" needs a KV pcollection", id,
                              si->local_id);
        }
        if (si->kind != SD_SIDE_MULTIMAP && si->kind != SD_SIDE_ITERABLE) {
            return sd_err_set(err, SD_EINVAL, "stage \"%s\": side input \"%s\": unknown kind", id,
                              si->local_id);
        }
    }
    for (size_t i = 0; i < s->n_timer_families; i++) {
        const sd_timer_family_spec *f = &s->timer_families[i];
        if (f->transform_id == NULL || f->family_id == NULL || f->timer_coder == NULL) {
            return sd_err_set(err, SD_EINVAL, "stage \"%s\": timer family %zu lacks ids or coder",
                              id, i);
        }
        if (f->timer_coder->kind != SD_CODER_TIMER) {
            return sd_err_set(err, SD_EINVAL,
                              "stage \"%s\": timer family \"%s\": expected a timer coder, got %s",
                              id, f->family_id, sd_coder_kind_name(f->timer_coder->kind));
        }
    }
    if ((s->expiration_transform_id == NULL) != (s->expiration_family_id == NULL)) {
        return sd_err_set(err, SD_EINVAL,
                          "stage \"%s\": window expiration needs both a transform and a family",
                          id);
    }
    if (s->expiration_family_id != NULL) {
        const sd_timer_family_spec *found = NULL;
        for (size_t i = 0; i < s->n_timer_families; i++) {
            const sd_timer_family_spec *f = &s->timer_families[i];
            if (strcmp(f->transform_id, s->expiration_transform_id) == 0 &&
                strcmp(f->family_id, s->expiration_family_id) == 0) {
                found = f;
            }
        }
        if (found == NULL) {
            return sd_err_set(err, SD_ENOTFOUND,
                              "stage \"%s\": window expiration family \"%s\" of \"%s\" is not "
                              "one of its timer families",
                              id, s->expiration_family_id, s->expiration_transform_id);
        }
        if (found->processing_time) {
            return sd_err_set(err, SD_EINVAL,
                              "stage \"%s\": window expiration family \"%s\" must be an "
                              "event-time family",
                              id, s->expiration_family_id);
        }
    }
    return SD_OK;
}

static sd_status copy_ids(sd_em *em, const char *const *names, size_t n, size_t **out)
{
    *out = NULL;
    if (n == 0) {
        return SD_OK;
    }
    *out = sd_calloc(n, sizeof(size_t));
    if (*out == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        (*out)[i] = sd__em_find_pcoll(em, names[i])->index;
    }
    return SD_OK;
}

sd_status sd_em_add_stage(sd_em *em, const sd_stage_spec *spec, sd_err *err)
{
    sd__stage *st;
    sd_status rc;
    if (em == NULL || spec == NULL || spec->id == NULL) {
        return sd_err_set(err, SD_EINVAL, "add_stage: em, spec and id are required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "stage \"%s\": engine already started", spec->id);
    }
    if (sd__em_find_stage(em, spec->id) != NULL) {
        return sd_err_set(err, SD_EEXIST, "stage \"%s\": already added", spec->id);
    }
    rc = check_stage_spec(em, spec, err);
    if (rc != SD_OK) {
        return rc;
    }
    st = sd_calloc(1, sizeof(*st));
    if (st == NULL) {
        return SD_ENOMEM;
    }
    st->index = em->stages.len;
    st->kind = spec->kind;
    st->stateful = spec->stateful || spec->n_timer_families > 0;
    st->max_out_bytes = spec->kind == SD_STAGE_SDK ? spec->max_output_bytes : 0;
    st->spread = spec->kind == SD_STAGE_SDK && spec->spread;
    st->sink_resends = spec->kind == SD_STAGE_SDK && spec->sink_resends;
    st->spread_min_bytes = spec->spread_min_bytes;
    st->in_wm = SD_TIME_MIN;
    st->out_wm = SD_TIME_MIN;
    st->expiration_family = SIZE_MAX;
    st->late_output = SIZE_MAX;
    st->state_min_expire = SD_TIME_MAX;
    st->state_epoch = 1;
    sd_vec_init(&st->pending, sizeof(sd__elem));
    sd_vec_init(&st->spill_runs, sizeof(sd__run));
    sd_buf_init(&st->spill_tail, 0);
    st->spill_tail_min = SD_TIME_MAX;
    st->spill_min = SD_TIME_MAX;
    st->gbk.tail_min_ts = SD_TIME_MAX;
    st->trace_hold = SD_TIME_MAX;
    sd_vec_init(&st->sorted, sizeof(sd__elem));
    st->time_sorted = spec->time_sorted_input;
    sd_vec_init(&st->parked, sizeof(sd__parked));
    st->wall_wait_until = SD_TIME_MIN;
    sd_vec_init(&st->res_holds.heap, sizeof(sd_time));
    sd_map_init(&st->res_by_seq, sd_free);
    sd_vec_init(&st->holds.heap, sizeof(sd_time));
    sd_map_init(&st->state, sd__state_cell_destroy);
    st->timers.pool = &st->tpool;
    st->et_heap.pool = &st->tpool;
    st->pt_heap.pool = &st->tpool;
    sd__gbk_init(&st->gbk);
    st->id = sd_strdup(spec->id);
    rc = st->id == NULL ? SD_ENOMEM : SD_OK;
    if (rc == SD_OK) {
        st->n_inputs = spec->n_inputs;
        rc = copy_ids(em, spec->inputs, spec->n_inputs, &st->inputs);
    }
    if (rc == SD_OK) {
        st->n_outputs = spec->n_outputs;
        rc = copy_ids(em, spec->outputs, spec->n_outputs, &st->outputs);
    }
    if (rc == SD_OK && spec->n_side_inputs > 0) {
        st->sides = sd_calloc(spec->n_side_inputs, sizeof(sd__side));
        rc = st->sides == NULL ? SD_ENOMEM : SD_OK;
        for (size_t i = 0; rc == SD_OK && i < spec->n_side_inputs; i++) {
            const sd_side_input_spec *si = &spec->side_inputs[i];
            sd__side *s = &st->sides[i];
            st->n_sides++;
            sd__side_init(s);
            s->kind = si->kind;
            if (si->main_windowing != NULL) {
                s->rewindowed = true;
                s->main = *si->main_windowing;
                s->main.trigger = NULL;
            }
            const sd__pcoll *spc = sd__em_find_pcoll(em, si->pcollection);
            s->pcoll = spc->index;
            s->triggered = spc->trigger != NULL;
            s->transform_id = sd_strdup(si->transform_id);
            s->local_id = sd_strdup(si->local_id);
            if (s->transform_id == NULL || s->local_id == NULL) {
                rc = SD_ENOMEM;
            }
        }
    }
    if (rc == SD_OK && spec->n_timer_families > 0) {
        st->families = sd_calloc(spec->n_timer_families, sizeof(sd__family));
        rc = st->families == NULL ? SD_ENOMEM : SD_OK;
        for (size_t i = 0; rc == SD_OK && i < spec->n_timer_families; i++) {
            const sd_timer_family_spec *f = &spec->timer_families[i];
            sd__family *fam = &st->families[i];
            st->n_families++;
            fam->processing_time = f->processing_time;
            if (spec->expiration_family_id != NULL &&
                strcmp(f->transform_id, spec->expiration_transform_id) == 0 &&
                strcmp(f->family_id, spec->expiration_family_id) == 0) {
                fam->window_expiration = true;
                st->expiration_family = i;
            }
            fam->timer_coder = sd_coder_ref((sd_coder *)f->timer_coder);
            fam->transform_id = sd_strdup(f->transform_id);
            fam->family_id = sd_strdup(f->family_id);
            if (fam->transform_id == NULL || fam->family_id == NULL) {
                rc = SD_ENOMEM;
            } else {
                fam->trace_name = sd__trace_intern(em, sd_bytes_str(fam->family_id));
                rc = fam->trace_name < 0 ? SD_ENOMEM : SD_OK;
            }
        }
    }
    /* Reserve every slot the links need, so linking below cannot fail half-way. */
    for (size_t i = 0; rc == SD_OK && i < st->n_inputs; i++) {
        sd__pcoll *pc = sd__em_pcoll_at(em, st->inputs[i]);
        rc = sd_vec_reserve(&pc->consumers, pc->consumers.len + 1);
    }
    for (size_t i = 0; rc == SD_OK && i < st->n_sides; i++) {
        sd__pcoll *pc = sd__em_pcoll_at(em, st->sides[i].pcoll);
        rc = sd_vec_reserve(&pc->side_consumers, pc->side_consumers.len + st->n_sides);
    }
    if (rc == SD_OK) {
        rc = sd_vec_reserve(&em->stages, em->stages.len + 1);
    }
    if (rc == SD_OK) {
        rc = sd_map_put_str(&em->stage_by_id, st->id, st);
    }
    if (rc != SD_OK) {
        sd__stage_destroy(st);
        return rc;
    }
    rc = sd_vec_push(&em->stages, &st);
    assert(rc == SD_OK);
    for (size_t i = 0; i < st->n_inputs; i++) {
        rc = sd_vec_push(&sd__em_pcoll_at(em, st->inputs[i])->consumers, &st->index);
        assert(rc == SD_OK);
    }
    for (size_t i = 0; i < st->n_sides; i++) {
        sd__side_ref ref = { .stage = st->index, .side = i };
        rc = sd_vec_push(&sd__em_pcoll_at(em, st->sides[i].pcoll)->side_consumers, &ref);
        assert(rc == SD_OK);
    }
    for (size_t i = 0; i < st->n_outputs; i++) {
        sd__em_pcoll_at(em, st->outputs[i])->producer = st->index;
    }
    if (st->kind == SD_STAGE_TESTSTREAM && em->teststream == SIZE_MAX) {
        em->teststream = st->index;
    }
    (void)rc;
    return SD_OK;
}

sd_status sd_em_set_drop_behind_watermark(sd_em *em, const char *stage_id, sd_err *err)
{
    if (em == NULL || stage_id == NULL) {
        return sd_err_set(err, SD_EINVAL, "set_drop_behind_watermark: em and stage required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "stage \"%s\": late policy after start", stage_id);
    }
    sd__stage *st = sd__em_find_stage(em, stage_id);
    if (st == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "late policy: unknown stage \"%s\"", stage_id);
    }
    if (st->kind == SD_STAGE_IMPULSE || st->kind == SD_STAGE_TESTSTREAM) {
        return sd_err_set(err, SD_EINVAL, "stage \"%s\" (%s) consumes no elements: no late policy",
                          stage_id, sd_em_stage_kind_name(st->kind));
    }
    st->drop_behind_wm = true;
    return SD_OK;
}

sd_status sd_em_set_drop_behind_watermark_output(sd_em *em, const char *pcollection, sd_err *err)
{
    if (em == NULL || pcollection == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "set_drop_behind_watermark_output: em and pcollection required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "pcollection \"%s\": late policy after start",
                          pcollection);
    }
    sd__pcoll *pc = sd__em_find_pcoll(em, pcollection);
    if (pc == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "late policy: unknown pcollection \"%s\"",
                          pcollection);
    }
    if (pc->producer == SIZE_MAX || sd__em_stage_at(em, pc->producer)->kind != SD_STAGE_SDK) {
        return sd_err_set(err, SD_EINVAL,
                          "pcollection \"%s\": the late policy on output needs an SDK stage "
                          "producing it",
                          pcollection);
    }
    pc->drop_behind_wm = true;
    return SD_OK;
}

sd_status sd_em_set_late_output(sd_em *em, const char *gbk_id, const char *pcollection, sd_err *err)
{
    if (em == NULL || gbk_id == NULL || pcollection == NULL) {
        return sd_err_set(err, SD_EINVAL, "set_late_output: em, stage and pcollection required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "gbk \"%s\": late output after start", gbk_id);
    }
    sd__stage *st = sd__em_find_stage(em, gbk_id);
    sd__pcoll *pc = sd__em_find_pcoll(em, pcollection);
    if (st == NULL || pc == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "late output: unknown %s \"%s\"",
                          st == NULL ? "stage" : "pcollection", st == NULL ? gbk_id : pcollection);
    }
    if (st->kind != SD_STAGE_GBK) {
        return sd_err_set(err, SD_EINVAL, "stage \"%s\": late output needs a GBK stage", gbk_id);
    }
    if (st->late_output != SIZE_MAX) {
        return sd_err_set(err, SD_EINVAL, "gbk \"%s\": late output already set to \"%s\"", gbk_id,
                          sd__em_pcoll_at(em, st->late_output)->id);
    }
    if (pc->producer != SIZE_MAX) {
        return sd_err_set(err, SD_EEXIST, "pcollection \"%s\": already produced by \"%s\"", pc->id,
                          sd__em_stage_at(em, pc->producer)->id);
    }
    const sd__pcoll *in = sd__em_pcoll_at(em, st->inputs[0]);
    if (!sd_coder_equal(pc->elem_coder, in->elem_coder) ||
        !sd_coder_equal(pc->window_coder, in->window_coder)) {
        return sd_err_set(err, SD_EINVAL,
                          "gbk \"%s\": late output \"%s\" must have the element and window "
                          "coders of its input \"%s\"",
                          gbk_id, pc->id, in->id);
    }
    size_t *outs = sd_realloc(st->outputs, (st->n_outputs + 1) * sizeof(size_t));
    if (outs == NULL) {
        return SD_ENOMEM;
    }
    st->outputs = outs;
    st->outputs[st->n_outputs++] = pc->index;
    st->late_output = pc->index;
    pc->producer = st->index;
    return SD_OK;
}

/* Is c of kind k, with (when given) components of kinds k0 and k1? */
static bool
coder_shape(const sd_coder *c, sd_coder_kind k, const sd_coder **c0, const sd_coder **c1)
{
    if (c == NULL || c->kind != k) {
        return false;
    }
    *c0 = sd_coder_component(c, 0);
    if (c1 != NULL) {
        *c1 = sd_coder_component(c, 1);
    }
    return *c0 != NULL && (c1 == NULL || *c1 != NULL);
}

/* KV<bytes, iterable<W>> (requests) or KV<bytes, KV<iterable<W>, iterable<KV<W,
 * iterable<W>>>>> (results), W equal to win. */
static bool merge_coder_ok(const sd_coder *c, const sd_coder *win, bool results)
{
    const sd_coder *nonce, *body, *it, *pairs, *pair, *w, *consumed, *cw;
    if (!coder_shape(c, SD_CODER_KV, &nonce, &body) || nonce->kind != SD_CODER_BYTES) {
        return false;
    }
    if (!results) {
        return coder_shape(body, SD_CODER_ITERABLE, &w, NULL) && sd_coder_equal(w, win);
    }
    return coder_shape(body, SD_CODER_KV, &it, &pairs) &&
           coder_shape(it, SD_CODER_ITERABLE, &w, NULL) && sd_coder_equal(w, win) &&
           coder_shape(pairs, SD_CODER_ITERABLE, &pair, NULL) &&
           coder_shape(pair, SD_CODER_KV, &w, &consumed) && sd_coder_equal(w, win) &&
           coder_shape(consumed, SD_CODER_ITERABLE, &cw, NULL) && sd_coder_equal(cw, win);
}

sd_status sd_em_set_merge_windows(sd_em *em,
                                  const char *gbk_id,
                                  const char *requests,
                                  const char *results,
                                  sd_err *err)
{
    if (em == NULL || gbk_id == NULL || requests == NULL || results == NULL) {
        return sd_err_set(err, SD_EINVAL, "set_merge_windows: em, stage and pcollections required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "gbk \"%s\": window merging after start", gbk_id);
    }
    sd__stage *st = sd__em_find_stage(em, gbk_id);
    sd__pcoll *req = sd__em_find_pcoll(em, requests);
    sd__pcoll *res = sd__em_find_pcoll(em, results);
    if (st == NULL || req == NULL || res == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "window merging: unknown %s \"%s\"",
                          st == NULL ? "stage" : "pcollection",
                          st == NULL    ? gbk_id
                          : req == NULL ? requests
                                        : results);
    }
    if (st->kind != SD_STAGE_GBK) {
        return sd_err_set(err, SD_EINVAL, "stage \"%s\": window merging needs a GBK stage", gbk_id);
    }
    const sd__pcoll *in = sd__em_pcoll_at(em, st->inputs[0]);
    if (in->ws.kind != SD_WINDOWFN_CUSTOM || st->gbk.merge_requests != SIZE_MAX) {
        return sd_err_set(err, SD_EINVAL,
                          "gbk \"%s\": SDK window merging needs a custom window fn on its input "
                          "\"%s\", set once",
                          gbk_id, in->id);
    }
    if (req->producer != SIZE_MAX || res->consumers.len > 0 || res->merge_gbk != SIZE_MAX ||
        req == res) {
        return sd_err_set(err, SD_EEXIST,
                          "gbk \"%s\": merge requests \"%s\" must have no producer and results "
                          "\"%s\" no consumer",
                          gbk_id, req->id, res->id);
    }
    if (!merge_coder_ok(req->elem_coder, in->window_coder, false) ||
        !merge_coder_ok(res->elem_coder, in->window_coder, true)) {
        return sd_err_set(err, SD_EINVAL,
                          "gbk \"%s\": merge requests \"%s\" must be KV<bytes, iterable<W>> and "
                          "results \"%s\" KV<bytes, KV<iterable<W>, iterable<KV<W, "
                          "iterable<W>>>>>, W the window coder of \"%s\"",
                          gbk_id, req->id, res->id, in->id);
    }
    size_t *outs = sd_realloc(st->outputs, (st->n_outputs + 1) * sizeof(size_t));
    if (outs == NULL) {
        return SD_ENOMEM;
    }
    st->outputs = outs;
    st->outputs[st->n_outputs++] = req->index;
    req->producer = st->index;
    st->gbk.merge_requests = req->index;
    res->merge_gbk = st->index;
    return SD_OK;
}

/* Kahn's algorithm over stage -> consumer edges (main and side inputs), ties by index. */
static sd_status topo_sort(sd_em *em, sd_err *err)
{
    size_t n = em->stages.len, done = 0;
    size_t *indeg = sd_calloc(n + 1, sizeof(size_t));
    size_t *order = sd_calloc(n + 1, sizeof(size_t));
    bool *placed = sd_calloc(n + 1, sizeof(bool));
    if (indeg == NULL || order == NULL || placed == NULL) {
        sd_free(indeg);
        sd_free(order);
        sd_free(placed);
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        sd__stage *st = sd__em_stage_at(em, i);
        indeg[i] = st->n_inputs + st->n_sides;
    }
    while (done < n) {
        size_t pick = SIZE_MAX;
        for (size_t i = 0; i < n; i++) {
            if (!placed[i] && indeg[i] == 0) {
                pick = i;
                break;
            }
        }
        if (pick == SIZE_MAX) {
            break;
        }
        placed[pick] = true;
        order[done++] = pick;
        sd__stage *st = sd__em_stage_at(em, pick);
        for (size_t o = 0; o < st->n_outputs; o++) {
            sd__pcoll *pc = sd__em_pcoll_at(em, st->outputs[o]);
            for (size_t c = 0; c < pc->consumers.len; c++) {
                indeg[*SD_VEC_AT(&pc->consumers, size_t, c)]--;
            }
            for (size_t c = 0; c < pc->side_consumers.len; c++) {
                indeg[SD_VEC_AT(&pc->side_consumers, sd__side_ref, c)->stage]--;
            }
        }
    }
    sd_free(indeg);
    sd_free(placed);
    if (done < n) {
        sd_free(order);
        return sd_err_set(err, SD_EINVAL, "engine: the stage graph has a cycle");
    }
    em->topo = order;
    em->perm = sd_calloc(n + 1, sizeof(size_t));
    return em->perm == NULL ? SD_ENOMEM : SD_OK;
}

sd_status sd_em_start(sd_em *em, sd_err *err)
{
    sd_status st;
    if (em == NULL) {
        return sd_err_set(err, SD_EINVAL, "start: em is required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "engine: already started");
    }
    for (size_t i = 0; i < em->pcolls.len; i++) {
        sd__pcoll *pc = sd__em_pcoll_at(em, i);
        if (pc->producer == SIZE_MAX && (pc->consumers.len > 0 || pc->side_consumers.len > 0)) {
            return sd_err_set(err, SD_EINVAL, "pcollection \"%s\": consumed but never produced",
                              pc->id);
        }
        pc->needs_key = false;
        for (size_t c = 0; c < pc->consumers.len; c++) {
            sd__stage *cs = sd__em_stage_at(em, *SD_VEC_AT(&pc->consumers, size_t, c));
            if (cs->kind == SD_STAGE_GBK || cs->stateful) {
                pc->needs_key = true;
            }
        }
    }
    st = topo_sort(em, err);
    if (st != SD_OK) {
        return st;
    }
    em->started = true;
    /* Impulses: one empty-bytes element (nested: a zero length) at the minimum timestamp. */
    for (size_t i = 0; i < em->stages.len; i++) {
        sd__stage *s = sd__em_stage_at(em, i);
        if (s->kind != SD_STAGE_IMPULSE) {
            continue;
        }
        uint8_t *zero = sd_malloc(1);
        if (zero == NULL) {
            return sd__em_poison(em, SD_ENOMEM);
        }
        zero[0] = 0;
        sd__slab *slab = sd__slab_create(zero, 1);
        if (slab == NULL) {
            return sd__em_poison(em, SD_ENOMEM);
        }
        sd__incoming in = {
            .ts = SD_TIME_MIN,
            .win = { .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true },
            .pane = SD_PANE_NO_FIRING,
            .elem = sd_bytes_make(slab->data, 1),
            .slab = slab
        };
        st = sd__em_deliver(em, sd__em_pcoll_at(em, s->outputs[0]), &in, err);
        sd__slab_unref(slab);
        if (st != SD_OK) {
            return sd__em_poison(em, st);
        }
        s->in_wm = s->out_wm = SD_TIME_MAX;
        sd__em_pcoll_at(em, s->outputs[0])->wm = SD_TIME_MAX;
    }
    for (size_t i = 0; em->teststream != SIZE_MAX && i < em->stages.len; i++) {
        /* A TestStream holds its outputs at the minimum until its events say otherwise. */
        sd__stage *ts = sd__em_stage_at(em, i);
        for (size_t o = 0; ts->kind == SD_STAGE_TESTSTREAM && o < ts->n_outputs; o++) {
            sd__em_pcoll_at(em, ts->outputs[o])->wm = SD_TIME_MIN;
        }
    }
    return SD_OK;
}
