/*
 * Sundial: the element manager core — graph, delivery, watermarks, scheduling, bundles.
 *
 * What it is. One sd_em per job. It owns every element between stages: pending elements of
 * SDK stages, GBK groups, side-input stores, user state, timers and parked residuals. The
 * executor pulls SDK bundles out of it and pushes results back; runner-side stages (impulse,
 * GBK, flatten, TestStream) run inside sd_em_next_bundle. Single-threaded: the executor calls
 * it from the libev loop thread only, so there are no locks.
 *
 * Data flow and the watermark rules (DESIGN.md "Execution model", Prism's ElementManager):
 *
 *     bundle output bytes --decode (wv coder), explode per window--> sd__incoming
 *        |                                                      |
 *        | sd__em_deliver(pcoll)                                 +--> side-input store of every
 *        v                                                           side consumer (per window)
 *     consumer stage:  SDK      -> pending heap (ts, seq)  -> bundles -> SDK -> outputs ...
 *                      GBK      -> groups (window, key)    -> fired when upstream wm passes
 *                      FLATTEN  -> delivered on to its output at once
 *
 *     per stage:  upstream = min over input PCollections of their watermark
 *                 in'  = max(in, min(upstream, oldest pending / in-flight / parked element))
 *                 out' = max(out, min(in' (or the estimated output wm when it is ahead of out),
 *                                     oldest hold))
 *                 watermark of each output PCollection = out
 *
 * Elements are kept compactly: a bundle's output for one PCollection becomes one refcounted
 * slab, and each pending element is a fixed-size record pointing into it (sd__elem); a GBK
 * copies just the value bytes into its group's buffer, so a slab dies as soon as the SDK
 * consumers are done with it.
 *
 * Commit protocol. sd_em_complete_bundle first decodes everything the SDK sent (outputs,
 * timers, residuals) into a staging list without touching engine state; bad bytes fail the
 * bundle as a whole. Only then does it apply. An allocation failure while applying would leave
 * the accounting half-done, so it poisons the engine (the job must fail) instead of pretending
 * to roll back. The same holds for runner-side work inside sd_em_next_bundle.
 *
 * Trade-offs, with their known costs:
 * - Watermarks are recomputed for every stage in topological order on each scheduling pass,
 *   until nothing moves. Jobs have tens of stages, so this is cheaper than tracking precise
 *   change sets; GBK scans and timer scans are skipped unless a cached lower bound is passed.
 * - Stateful stages take elements in timestamp order and skip keys held by another in-flight
 *   bundle; with a hot key in flight the skipped elements are popped and pushed back each pass.
 * - Determinism: anything taken from a hash map is sorted before it affects output order.
 *
 * Schedule exploration (sd_em_config.bundle_shape, schedule_seed). Beam promises user code no
 * bundling and no order; tests should not silently depend on the runner's habits. The one-key
 * shape cuts a stateful stage's bundles to one key (elements and timers), the one-element
 * shape to one element or timer. A non-zero seed feeds a splitmix64 generator that picks the
 * stage order of each scheduling pass, takes pending elements at random positions of the
 * heap instead of oldest first, and draws timers from a few more eligible candidates than a
 * bundle has room for, in random order. All of it is a pure function of the seed and the
 * sequence of engine calls, so a failing seed replays exactly (synthetic clock).
 */
#include "runner/engine/em.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* Slabs, windows, heaps                                                                      */
/* ========================================================================================== */

sd__slab *sd__slab_new(uint8_t *data, size_t len)
{
    sd__slab *s = sd_malloc(sizeof(*s));
    if (s == NULL) {
        sd_free(data);
        return NULL;
    }
    s->refs = 1;
    s->data = data;
    s->len = len;
    return s;
}

void sd__slab_unref(sd__slab *s)
{
    if (s == NULL) {
        return;
    }
    assert(s->refs > 0);
    if (--s->refs == 0) {
        sd_free(s->data);
        sd_free(s);
    }
}

sd__win sd__win_from(const sd_window *w)
{
    if (w->global) {
        return (sd__win){ .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true };
    }
    return (sd__win){ .start = w->start, .end = w->end, .global = false };
}

sd_window sd__win_to(const sd__win *w)
{
    return w->global ? sd_window_global() : sd_window_interval(w->start, w->end);
}

sd_time sd__win_max_ts(const sd__win *w)
{
    return w->global ? SD_TIME_GLOBAL_MAX : w->end - 1;
}

sd_status sd__win_put(sd_buf *out, const sd__win *w)
{
    sd_status st = sd_buf_append_byte(out, w->global ? 1 : 0);
    if (st == SD_OK) {
        st = sd_buf_put_be64(out, (uint64_t)w->start);
    }
    if (st == SD_OK) {
        st = sd_buf_put_be64(out, (uint64_t)w->end);
    }
    return st;
}

sd_status sd__win_decode(const sd_coder *window_coder, sd_bytes bytes, sd__win *out, sd_err *err)
{
    sd_reader r = sd_reader_make(bytes);
    sd_window w;
    sd_status st = sd_window_decode(window_coder, &r, &w, err);
    if (st != SD_OK) {
        return st;
    }
    if (!sd_reader_done(&r)) {
        return sd_err_set(err, SD_EPROTO, "window: %zu trailing bytes after the encoded window",
                          sd_reader_left(&r));
    }
    if (w.custom) {
        return sd_err_set(err, SD_EUNIMPL, "window: custom windows are not supported");
    }
    *out = sd__win_from(&w);
    return SD_OK;
}

static bool elem_less(const sd__elem *a, const sd__elem *b)
{
    return a->ts < b->ts || (a->ts == b->ts && a->seq < b->seq);
}

static sd_status heap_push(sd_vec *h, const sd__elem *e)
{
    sd_status st = sd_vec_push(h, e);
    if (st != SD_OK) {
        return st;
    }
    sd__elem *a = h->items;
    size_t i = h->len - 1;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!elem_less(&a[i], &a[p])) {
            break;
        }
        sd__elem t = a[i];
        a[i] = a[p];
        a[p] = t;
        i = p;
    }
    return SD_OK;
}

/* Remove the element at index at (0 = the oldest) into *out, keeping the heap order. */
static void heap_take(sd_vec *h, size_t at, sd__elem *out)
{
    sd__elem *a = h->items;
    assert(at < h->len);
    *out = a[at];
    h->len--;
    if (at == h->len) {
        return;
    }
    a[at] = a[h->len];
    /* The moved element may belong above or below `at`: sift up first, then down. */
    size_t i = at;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!elem_less(&a[i], &a[p])) {
            break;
        }
        sd__elem t = a[i];
        a[i] = a[p];
        a[p] = t;
        i = p;
    }
    size_t n = h->len;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && elem_less(&a[l], &a[m])) {
            m = l;
        }
        if (r < n && elem_less(&a[r], &a[m])) {
            m = r;
        }
        if (m == i) {
            break;
        }
        sd__elem t = a[i];
        a[i] = a[m];
        a[m] = t;
        i = m;
    }
}

static inline sd__pcoll *pcoll_at(const sd_em *em, size_t i)
{
    return *SD_VEC_AT(&em->pcolls, sd__pcoll *, i);
}

static inline sd__stage *stage_at(const sd_em *em, size_t i)
{
    return *SD_VEC_AT(&em->stages, sd__stage *, i);
}

static sd__pcoll *find_pcoll(const sd_em *em, const char *id)
{
    return id == NULL ? NULL : sd_map_get_str(&em->pcoll_by_id, id);
}

static sd__stage *find_stage(const sd_em *em, const char *id)
{
    return id == NULL ? NULL : sd_map_get_str(&em->stage_by_id, id);
}

static sd_status poison(sd_em *em, sd_status st)
{
    if (st == SD_ENOMEM || st == SD_EINTERNAL) {
        em->poisoned = true;
    }
    return st;
}

/* ========================================================================================== */
/* Create / destroy                                                                           */
/* ========================================================================================== */

sd_time sd__em_wall(const sd_em *em)
{
    return em->cfg.wall_now != NULL ? em->cfg.wall_now(em->cfg.wall_ctx) : sd_wall_now_ms();
}

sd_status sd_em_create(const sd_em_config *cfg, sd_em **out)
{
    sd_em *em = sd_calloc(1, sizeof(*em));
    *out = NULL;
    if (em == NULL) {
        return SD_ENOMEM;
    }
    em->magic = SD__EM_MAGIC;
    if (cfg != NULL) {
        em->cfg = *cfg;
    }
    em->rng = em->cfg.schedule_seed;
    sd_vec_init(&em->pcolls, sizeof(sd__pcoll *));
    sd_vec_init(&em->stages, sizeof(sd__stage *));
    sd_map_init(&em->pcoll_by_id, NULL);
    sd_map_init(&em->stage_by_id, NULL);
    sd_buf_init(&em->scratch, 0);
    sd_wv_header_init(&em->hdr);
    sd_timer_init(&em->timer);
    em->teststream = SIZE_MAX;
    em->clock_now = sd__em_wall(em);
    *out = em;
    return SD_OK;
}

static void bundle_free(sd_bundle *b);

static void pcoll_free(sd__pcoll *pc)
{
    if (pc == NULL) {
        return;
    }
    sd_free(pc->id);
    sd__trig_free(pc->trigger);
    sd_coder_destroy(pc->wv_coder);
    sd_vec_deinit(&pc->consumers);
    sd_vec_deinit(&pc->side_consumers);
    sd_free(pc);
}

static void stage_free(sd__stage *st)
{
    if (st == NULL) {
        return;
    }
    while (st->inflight != NULL) {
        sd_bundle *b = st->inflight;
        st->inflight = b->next;
        /* In-flight inputs are still referenced by the bundle; release them with it. */
        for (size_t i = 0; i < b->n_primary; i++) {
            sd__slab_unref(SD_VEC_AT(&b->elems, sd__elem, i)->slab);
        }
        for (size_t i = 0; i < b->fired.len; i++) {
            sd__timer_free(*SD_VEC_AT(&b->fired, sd__timer *, i));
        }
        bundle_free(b);
    }
    for (size_t i = 0; i < st->pending.len; i++) {
        sd__slab_unref(SD_VEC_AT(&st->pending, sd__elem, i)->slab);
    }
    sd_vec_deinit(&st->pending);
    for (size_t i = 0; i < st->sorted.len; i++) {
        sd__slab_unref(SD_VEC_AT(&st->sorted, sd__elem, i)->slab);
    }
    sd_vec_deinit(&st->sorted);
    for (size_t i = 0; i < st->parked.len; i++) {
        sd__slab_unref(SD_VEC_AT(&st->parked, sd__parked, i)->elem.slab);
    }
    sd_vec_deinit(&st->parked);
    sd_map_deinit(&st->key_locks);
    sd_map_deinit(&st->timers);
    sd__theap_deinit(&st->et_heap);
    sd__theap_deinit(&st->pt_heap);
    sd__tsbag_deinit(&st->holds);
    sd_map_deinit(&st->state);
    sd__gbk_deinit(&st->gbk);
    for (size_t i = 0; i < st->n_sides; i++) {
        sd__side_deinit(&st->sides[i]);
    }
    sd_free(st->sides);
    for (size_t i = 0; i < st->n_families; i++) {
        sd_free(st->families[i].transform_id);
        sd_free(st->families[i].family_id);
        sd_coder_destroy(st->families[i].timer_coder);
    }
    sd_free(st->families);
    for (size_t i = 0; i < st->ts_events.len; i++) {
        sd__ts_event *ev = SD_VEC_AT(&st->ts_events, sd__ts_event, i);
        sd__slab_unref(ev->slab);
        sd_free(ev->offs);
        sd_free(ev->lens);
        sd_free(ev->times);
    }
    sd_vec_deinit(&st->ts_events);
    sd_free(st->inputs);
    sd_free(st->outputs);
    sd_free(st->id);
    sd_free(st);
}

void sd_em_destroy(sd_em *em)
{
    if (em == NULL) {
        return;
    }
    assert(em->magic == SD__EM_MAGIC);
    for (size_t i = 0; i < em->stages.len; i++) {
        stage_free(stage_at(em, i));
    }
    for (size_t i = 0; i < em->pcolls.len; i++) {
        pcoll_free(pcoll_at(em, i));
    }
    sd_vec_deinit(&em->stages);
    sd_vec_deinit(&em->pcolls);
    sd_map_deinit(&em->pcoll_by_id);
    sd_map_deinit(&em->stage_by_id);
    sd_buf_deinit(&em->scratch);
    sd_wv_header_deinit(&em->hdr);
    sd_timer_deinit(&em->timer);
    sd_free(em->topo);
    sd_free(em->perm);
    em->magic = 0;
    sd_free(em);
}

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
    if (find_pcoll(em, id) != NULL) {
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
    if (win->kind == SD_CODER_CUSTOM_WINDOW) {
        return sd_err_set(err, SD_EUNIMPL, "pcollection \"%s\": custom windows are not supported",
                          id);
    }
    if (win->kind != SD_CODER_GLOBAL_WINDOW && win->kind != SD_CODER_INTERVAL_WINDOW) {
        return sd_err_set(err, SD_EINVAL,
                          "pcollection \"%s\": expected a global or interval window coder, got %s",
                          id, sd_coder_kind_name(win->kind));
    }
    if (ws == NULL) {
        ws = &def;
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
    pc->wm = SD_TIME_MIN;
    if (pc->id == NULL) {
        pcoll_free(pc);
        return SD_ENOMEM;
    }
    st = sd__trig_compile(ws->trigger, &pc->trigger, err);
    if (st != SD_OK) {
        pcoll_free(pc);
        if (st != SD_ENOMEM) {
            (void)sd_err_prefix(err, "pcollection \"%s\": ", id);
        }
        return st;
    }
    st = sd_vec_push(&em->pcolls, &pc);
    if (st != SD_OK) {
        pcoll_free(pc);
        return st;
    }
    st = sd_map_put_str(&em->pcoll_by_id, id, pc);
    if (st != SD_OK) {
        em->pcolls.len--;
        pcoll_free(pc);
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
        return sd_err_set(err, SD_EINVAL, "stage \"%s\": time-sorted input needs a stateful SDK stage",
                          id);
    }
    if (s->kind != SD_STAGE_SDK &&
        (s->n_side_inputs > 0 || s->n_timer_families > 0 || s->stateful)) {
        return sd_err_set(err, SD_EINVAL,
                          "stage \"%s\": side inputs, state and timers need an SDK stage", id);
    }
    for (size_t i = 0; i < s->n_inputs; i++) {
        sd__pcoll *pc = find_pcoll(em, s->inputs[i]);
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
        sd__pcoll *pc = find_pcoll(em, s->outputs[i]);
        if (pc == NULL) {
            return sd_err_set(err, SD_ENOTFOUND, "stage \"%s\": unknown output pcollection \"%s\"",
                              id, s->outputs[i] ? s->outputs[i] : "(null)");
        }
        if (pc->producer != SIZE_MAX) {
            return sd_err_set(err, SD_EEXIST,
                              "stage \"%s\": pcollection \"%s\" already has producer \"%s\"", id,
                              pc->id, stage_at(em, pc->producer)->id);
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
        sd__pcoll *pc = find_pcoll(em, si->pcollection);
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
        (*out)[i] = find_pcoll(em, names[i])->index;
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
    if (find_stage(em, spec->id) != NULL) {
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
    st->in_wm = SD_TIME_MIN;
    st->out_wm = SD_TIME_MIN;
    st->est_out = SD_TIME_MIN;
    st->expiration_family = SIZE_MAX;
    st->late_output = SIZE_MAX;
    st->state_min_expire = SD_TIME_MAX;
    sd_vec_init(&st->pending, sizeof(sd__elem));
    sd_vec_init(&st->sorted, sizeof(sd__elem));
    st->time_sorted = spec->time_sorted_input;
    sd_vec_init(&st->parked, sizeof(sd__parked));
    sd_vec_init(&st->ts_events, sizeof(sd__ts_event));
    sd_vec_init(&st->holds.heap, sizeof(sd_time));
    sd_map_init(&st->holds.counts, NULL);
    sd_map_init(&st->key_locks, NULL);
    sd_map_init(&st->timers, sd__timer_free);
    sd_map_init(&st->state, sd__state_cell_free);
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
            s->pcoll = find_pcoll(em, si->pcollection)->index;
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
            }
        }
    }
    /* Reserve every slot the links need, so linking below cannot fail half-way. */
    for (size_t i = 0; rc == SD_OK && i < st->n_inputs; i++) {
        sd__pcoll *pc = pcoll_at(em, st->inputs[i]);
        rc = sd_vec_reserve(&pc->consumers, pc->consumers.len + 1);
    }
    for (size_t i = 0; rc == SD_OK && i < st->n_sides; i++) {
        sd__pcoll *pc = pcoll_at(em, st->sides[i].pcoll);
        rc = sd_vec_reserve(&pc->side_consumers, pc->side_consumers.len + st->n_sides);
    }
    if (rc == SD_OK) {
        rc = sd_vec_reserve(&em->stages, em->stages.len + 1);
    }
    if (rc == SD_OK) {
        rc = sd_map_put_str(&em->stage_by_id, st->id, st);
    }
    if (rc != SD_OK) {
        stage_free(st);
        return rc;
    }
    rc = sd_vec_push(&em->stages, &st);
    assert(rc == SD_OK);
    for (size_t i = 0; i < st->n_inputs; i++) {
        rc = sd_vec_push(&pcoll_at(em, st->inputs[i])->consumers, &st->index);
        assert(rc == SD_OK);
    }
    for (size_t i = 0; i < st->n_sides; i++) {
        sd__side_ref ref = { .stage = st->index, .side = i };
        rc = sd_vec_push(&pcoll_at(em, st->sides[i].pcoll)->side_consumers, &ref);
        assert(rc == SD_OK);
    }
    for (size_t i = 0; i < st->n_outputs; i++) {
        pcoll_at(em, st->outputs[i])->producer = st->index;
    }
    if (st->kind == SD_STAGE_TESTSTREAM && em->teststream == SIZE_MAX) {
        em->teststream = st->index;
    }
    (void)rc;
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
    sd__stage *st = find_stage(em, gbk_id);
    sd__pcoll *pc = find_pcoll(em, pcollection);
    if (st == NULL || pc == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "late output: unknown %s \"%s\"",
                          st == NULL ? "stage" : "pcollection", st == NULL ? gbk_id : pcollection);
    }
    if (st->kind != SD_STAGE_GBK) {
        return sd_err_set(err, SD_EINVAL, "stage \"%s\": late output needs a GBK stage", gbk_id);
    }
    if (st->late_output != SIZE_MAX) {
        return sd_err_set(err, SD_EINVAL, "gbk \"%s\": late output already set to \"%s\"", gbk_id,
                          pcoll_at(em, st->late_output)->id);
    }
    if (pc->producer != SIZE_MAX) {
        return sd_err_set(err, SD_EEXIST, "pcollection \"%s\": already produced by \"%s\"", pc->id,
                          stage_at(em, pc->producer)->id);
    }
    const sd__pcoll *in = pcoll_at(em, st->inputs[0]);
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
        sd__stage *st = stage_at(em, i);
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
        sd__stage *st = stage_at(em, pick);
        for (size_t o = 0; o < st->n_outputs; o++) {
            sd__pcoll *pc = pcoll_at(em, st->outputs[o]);
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
        sd__pcoll *pc = pcoll_at(em, i);
        if (pc->producer == SIZE_MAX && (pc->consumers.len > 0 || pc->side_consumers.len > 0)) {
            return sd_err_set(err, SD_EINVAL, "pcollection \"%s\": consumed but never produced",
                              pc->id);
        }
        pc->needs_key = false;
        for (size_t c = 0; c < pc->consumers.len; c++) {
            sd__stage *cs = stage_at(em, *SD_VEC_AT(&pc->consumers, size_t, c));
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
        sd__stage *s = stage_at(em, i);
        if (s->kind != SD_STAGE_IMPULSE) {
            continue;
        }
        uint8_t *zero = sd_malloc(1);
        if (zero == NULL) {
            return poison(em, SD_ENOMEM);
        }
        zero[0] = 0;
        sd__slab *slab = sd__slab_new(zero, 1);
        if (slab == NULL) {
            return poison(em, SD_ENOMEM);
        }
        sd__incoming in = {
            .ts = SD_TIME_MIN,
            .win = { .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true },
            .pane = SD_PANE_NO_FIRING,
            .elem = sd_bytes_make(slab->data, 1),
            .slab = slab
        };
        st = sd__em_deliver(em, pcoll_at(em, s->outputs[0]), &in, err);
        sd__slab_unref(slab);
        if (st != SD_OK) {
            return poison(em, st);
        }
        s->in_wm = s->out_wm = SD_TIME_MAX;
        pcoll_at(em, s->outputs[0])->wm = SD_TIME_MAX;
    }
    for (size_t i = 0; em->teststream != SIZE_MAX && i < em->stages.len; i++) {
        /* A TestStream holds its outputs at the minimum until its events say otherwise. */
        sd__stage *ts = stage_at(em, i);
        for (size_t o = 0; ts->kind == SD_STAGE_TESTSTREAM && o < ts->n_outputs; o++) {
            pcoll_at(em, ts->outputs[o])->wm = SD_TIME_MIN;
        }
    }
    return SD_OK;
}

/* ========================================================================================== */
/* Delivery                                                                                   */
/* ========================================================================================== */

static int64_t sorted_lateness(const sd_em *em, const sd__stage *st)
{
    return pcoll_at(em, st->inputs[0])->ws.allowed_lateness_ms;
}

/* A time-sorted element may go to the stage once the input watermark is past ts + lateness. */
static bool sorted_releasable(const sd_em *em, const sd__stage *st, sd_time ts)
{
    return st->in_wm >= SD_TIME_MAX || sd_time_add(ts, sorted_lateness(em, st)) < st->in_wm;
}

static sd_status push_elem(sd_em *em, sd__stage *st, const sd__incoming *in, size_t key_len)
{
    sd__elem e = { .ts = in->ts,
                   .seq = em->seq++,
                   .win = in->win,
                   .pane = in->pane,
                   .slab = in->slab,
                   .off = (size_t)(in->elem.ptr - in->slab->data),
                   .len = in->elem.len,
                   .key_len = key_len };
    sd_vec *into = &st->pending;
    if (st->time_sorted) {
        /* Beam drops it when the input watermark is after ts + allowed lateness. */
        if (st->in_wm < SD_TIME_MAX && sd_time_add(in->ts, sorted_lateness(em, st)) < st->in_wm) {
            st->dropped_late++;
            return SD_OK;
        }
        into = &st->sorted;
    }
    sd_status rc = heap_push(into, &e);
    if (rc == SD_OK) {
        in->slab->refs++;
    }
    return rc;
}

sd_status sd__em_deliver(sd_em *em, sd__pcoll *pc, const sd__incoming *in, sd_err *err)
{
    sd_bytes key = SD_BYTES_NULL, value = in->elem;
    sd_status rc;
    assert(in->slab != NULL);
    if (pc->needs_key) {
        rc = sd_kv_split(pc->elem_coder, in->elem, &key, &value, err);
        if (rc != SD_OK) {
            (void)sd_err_prefix(err, "pcollection \"%s\": ", pc->id);
            return rc;
        }
    }
    for (size_t c = 0; c < pc->consumers.len; c++) {
        sd__stage *st = stage_at(em, *SD_VEC_AT(&pc->consumers, size_t, c));
        switch (st->kind) {
        case SD_STAGE_SDK:
            rc = push_elem(em, st, in, key.len);
            if (rc == SD_OK) {
                rc = sd__expiry_note(em, st, &in->win, key);
            }
            break;
        case SD_STAGE_GBK:
            rc = sd__gbk_add(em, st, in, key, value, err);
            break;
        case SD_STAGE_FLATTEN:
            rc = sd__em_deliver(em, pcoll_at(em, st->outputs[0]), in, err);
            break;
        default:
            rc = sd_err_set(err, SD_EINTERNAL, "stage \"%s\" cannot consume elements", st->id);
            break;
        }
        if (rc != SD_OK) {
            return rc;
        }
    }
    for (size_t c = 0; c < pc->side_consumers.len; c++) {
        const sd__side_ref *ref = SD_VEC_AT(&pc->side_consumers, sd__side_ref, c);
        rc = sd__side_add(em, &stage_at(em, ref->stage)->sides[ref->side], in, err);
        if (rc != SD_OK) {
            return rc;
        }
    }
    return SD_OK;
}

/* ========================================================================================== */
/* Watermarks                                                                                 */
/* ========================================================================================== */

static sd_time upstream_wm(const sd_em *em, const sd__stage *st)
{
    sd_time up = SD_TIME_MAX;
    if (st->kind == SD_STAGE_TESTSTREAM) {
        for (size_t i = 0; i < st->n_outputs; i++) {
            up = SD_MIN(up, pcoll_at(em, st->outputs[i])->wm);
        }
        return up;
    }
    for (size_t i = 0; i < st->n_inputs; i++) {
        up = SD_MIN(up, pcoll_at(em, st->inputs[i])->wm);
    }
    return up;
}

static sd_time min_pending_ts(const sd__stage *st)
{
    sd_time m = SD_TIME_MAX;
    if (st->pending.len > 0) {
        m = SD_VEC_AT(&st->pending, sd__elem, 0)->ts;
    }
    for (const sd_bundle *b = st->inflight; b != NULL; b = b->next) {
        m = SD_MIN(m, b->min_ts);
    }
    for (size_t i = 0; i < st->parked.len; i++) {
        m = SD_MIN(m, SD_VEC_AT(&st->parked, sd__parked, i)->elem.ts);
    }
    if (st->gbk.n_values > 0) {
        m = SD_MIN(m, st->gbk.min_ts);
    }
    return m;
}

/*
 * Bounded pipelines (sd_em_config.bounded) follow Beam's batch model: a stage's input watermark
 * stays at its start until every upstream PCollection is complete and the stage has no data
 * left (pending, in flight, parked, or waiting in a GBK); then it jumps to the end of time.
 * The output watermark follows once the stage's timers and holds are gone too. So nothing a
 * stage outputs is ever behind its consumers' watermark — even when user code moves timestamps
 * backwards, as the TypeScript SDK's Create (reshuffle) followed by assignTimestamps does —
 * and every window fires once, complete, as on Beam's batch runners.
 */
static void update_watermarks_bounded(sd_em *em, sd__stage *st, sd_time up, bool *changed)
{
    bool data_idle = st->pending.len == 0 && st->inflight == NULL && st->parked.len == 0 &&
                     st->gbk.n_values == 0;
    if (up >= SD_TIME_MAX && data_idle && st->in_wm < SD_TIME_MAX) {
        st->in_wm = SD_TIME_MAX;
        *changed = true;
    }
    bool done = st->in_wm >= SD_TIME_MAX && st->inflight == NULL && st->timers.len == 0 &&
                sd__tsbag_min(&st->holds) >= SD_TIME_MAX && data_idle && st->sorted.len == 0;
    if (done && st->out_wm < SD_TIME_MAX) {
        st->out_wm = SD_TIME_MAX;
        *changed = true;
        for (size_t i = 0; i < st->n_outputs; i++) {
            pcoll_at(em, st->outputs[i])->wm = SD_TIME_MAX;
        }
        sd__state_gc(em, st);
    }
}

/* Recompute one stage's watermarks. OUT: changed when either moved. */
static void update_watermarks(sd_em *em, sd__stage *st, bool *changed)
{
    if (st->kind == SD_STAGE_IMPULSE) {
        return;
    }
    sd_time up = upstream_wm(em, st);
    if (st->kind == SD_STAGE_TESTSTREAM) {
        if (up > st->in_wm) {
            st->in_wm = up;
            *changed = true;
        }
        if (up > st->out_wm) {
            st->out_wm = up;
            *changed = true;
        }
        return;
    }
    if (em->cfg.bounded) {
        update_watermarks_bounded(em, st, up, changed);
        return;
    }
    sd_time in = SD_MAX(st->in_wm, SD_MIN(up, min_pending_ts(st)));
    if (in != st->in_wm) {
        st->in_wm = in;
        *changed = true;
    }
    sd_time basis = in;
    if (st->has_est && st->est_out > st->out_wm) {
        basis = st->est_out;
    }
    sd_time cand = SD_MIN(basis, sd__tsbag_min(&st->holds));
    if (st->time_sorted) {
        /* Its elements reach the stage behind the input watermark (that is the point), so
         * they hold the output watermark themselves: buffered, pending or in flight. */
        cand = SD_MIN(cand, min_pending_ts(st));
        if (st->sorted.len > 0) {
            cand = SD_MIN(cand, SD_VEC_AT(&st->sorted, sd__elem, 0)->ts);
        }
    }
    if (cand > st->out_wm) {
        st->out_wm = cand;
        *changed = true;
        for (size_t i = 0; i < st->n_outputs; i++) {
            pcoll_at(em, st->outputs[i])->wm = cand;
        }
        sd__state_gc(em, st);
    }
}

/* Move the time-sorted elements the input watermark has passed to pending, oldest first. */
static sd_status release_sorted(sd_em *em, sd__stage *st, bool *changed)
{
    while (st->sorted.len > 0 &&
           sorted_releasable(em, st, SD_VEC_AT(&st->sorted, sd__elem, 0)->ts)) {
        sd__elem e;
        heap_take(&st->sorted, 0, &e);
        sd_status rc = heap_push(&st->pending, &e);
        if (rc != SD_OK) {
            if (heap_push(&st->sorted, &e) != SD_OK) {
                sd__slab_unref(e.slab);
            }
            return rc;
        }
        *changed = true;
    }
    return SD_OK;
}

static sd_status release_parked(sd_em *em, sd__stage *st, bool *changed)
{
    size_t w = 0;
    sd_status rc = SD_OK;
    for (size_t i = 0; i < st->parked.len; i++) {
        sd__parked *p = SD_VEC_AT(&st->parked, sd__parked, i);
        if (rc == SD_OK && p->release_at <= em->clock_now) {
            rc = heap_push(&st->pending, &p->elem);
            if (rc == SD_OK) {
                *changed = true;
                continue;
            }
        }
        *SD_VEC_AT(&st->parked, sd__parked, w++) = *p;
    }
    st->parked.len = w;
    return rc;
}

/* Run runner-side work and recompute watermarks until nothing moves. */
static sd_status refresh(sd_em *em, sd_err *err)
{
    bool changed;
    do {
        changed = false;
        for (size_t k = 0; k < em->stages.len; k++) {
            sd__stage *st = stage_at(em, em->topo[k]);
            sd_status rc = SD_OK;
            if (st->parked.len > 0) {
                rc = release_parked(em, st, &changed);
            }
            if (rc == SD_OK && st->kind == SD_STAGE_GBK) {
                rc = sd__gbk_fire(em, st, upstream_wm(em, st), &changed, err);
            }
            if (rc != SD_OK) {
                return poison(em, rc);
            }
            update_watermarks(em, st, &changed);
            if (st->sorted.len > 0) {
                rc = release_sorted(em, st, &changed);
                if (rc != SD_OK) {
                    return poison(em, rc);
                }
            }
        }
    } while (changed);
    return SD_OK;
}

/* ========================================================================================== */
/* Bundles                                                                                    */
/* ========================================================================================== */

static void bundle_free(sd_bundle *b)
{
    if (b == NULL) {
        return;
    }
    sd__stage *st = b->stage;
    sd_free(b->id);
    sd_vec_deinit(&b->elems);
    sd_buf_deinit(&b->input);
    sd_vec_deinit(&b->input_ends);
    sd_buf_deinit(&b->locked);
    for (size_t i = 0; i < b->timer_inputs.len; i++) {
        sd_buf_deinit(&SD_VEC_AT(&b->timer_inputs, sd__timer_input, i)->bytes);
    }
    sd_vec_deinit(&b->timer_inputs);
    sd_vec_deinit(&b->fired);
    if (b->outputs != NULL) {
        for (size_t i = 0; i < st->n_outputs; i++) {
            sd_buf_deinit(&b->outputs[i]);
        }
        sd_free(b->outputs);
    }
    if (b->timer_out != NULL) {
        for (size_t i = 0; i < st->n_families; i++) {
            sd_buf_deinit(&b->timer_out[i]);
        }
        sd_free(b->timer_out);
    }
    for (size_t i = 0; i < b->residuals.len; i++) {
        sd_free(SD_VEC_AT(&b->residuals, sd__residual, i)->bytes);
    }
    sd_vec_deinit(&b->residuals);
    sd_map_deinit(&b->deltas);
    b->magic = 0;
    sd_free(b);
}

static bool key_locked_by_other(const sd__stage *st, sd_bytes key, const sd_bundle *self)
{
    sd_bundle *owner = sd_map_get(&st->key_locks, key);
    return owner != NULL && owner != self;
}

/* Lock key for b; the bundle keeps its own copy of every key it locked (b->locked). */
static sd_status lock_key(sd__stage *st, sd_bytes key, sd_bundle *b)
{
    if (sd_map_get(&st->key_locks, key) == b) {
        return SD_OK;
    }
    size_t before = b->locked.len;
    sd_status rc = sd_buf_put_lp(&b->locked, key);
    if (rc == SD_OK) {
        rc = sd_map_put(&st->key_locks, key, b);
    }
    if (rc != SD_OK) {
        b->locked.len = before;
    }
    return rc;
}

/*
 * Side-input readiness. A main-input element may go into a bundle only when every side input's
 * watermark has passed the end of the element's window (the side window the SDK will ask for is
 * that window under identity mapping, or the global window, whose end only a finished side
 * input passes). OUT: limit — elements whose window max ts is below it are ready (SD_TIME_MAX
 * with *all_done when every side input is complete).
 */
static void side_limit(const sd_em *em, const sd__stage *st, sd_time *limit, bool *all_done)
{
    *limit = SD_TIME_MAX;
    *all_done = true;
    for (size_t i = 0; i < st->n_sides; i++) {
        const sd__pcoll *pc = pcoll_at(em, st->sides[i].pcoll);
        if (pc->wm >= SD_TIME_MAX) {
            continue;
        }
        *all_done = false;
        *limit = SD_MIN(*limit, pc->ws.kind == SD_WINDOWFN_GLOBAL ? SD_TIME_MIN : pc->wm);
    }
}

/* Timers (whose windows the engine does not map) wait for the older, whole-stage rule: every
 * side input caught up with the stage's main input. */
static bool sides_ready(const sd_em *em, const sd__stage *st)
{
    sd_time up = upstream_wm(em, st);
    for (size_t i = 0; i < st->n_sides; i++) {
        if (pcoll_at(em, st->sides[i].pcoll)->wm < up) {
            return false;
        }
    }
    return true;
}

static sd_status encode_elem(const sd__pcoll *pc, const sd__elem *e, sd_buf *out)
{
    sd_status rc = SD_OK;
    if (!pc->param_wv) {
        sd_window w = sd__win_to(&e->win);
        rc = sd_wv_encode_header(out, pc->window_coder, e->ts, &w, 1, &e->pane);
    }
    if (rc == SD_OK) {
        rc = sd_buf_append(out, e->slab->data + e->off, e->len);
    }
    return rc;
}

static bool timer_eligible(const sd_em *em, const sd__stage *st, const sd__timer *t)
{
    if (st->families[t->family].processing_time) {
        return t->due <= em->clock_now;
    }
    return t->due < st->in_wm || st->in_wm >= SD_TIME_MAX;
}

/* Exact: the heaps' tops are the earliest timers of each domain. */
static bool timers_ready(const sd_em *em, const sd__stage *st)
{
    return (st->pt_heap.len > 0 && timer_eligible(em, st, sd__theap_top(&st->pt_heap))) ||
           (st->et_heap.len > 0 && timer_eligible(em, st, sd__theap_top(&st->et_heap)));
}

/* The next eligible timer: the earlier of the two domains' eligible tops, or NULL. */
static sd__timer *next_eligible(const sd_em *em, const sd__stage *st)
{
    sd__timer *a = sd__theap_top(&st->pt_heap);
    sd__timer *e = sd__theap_top(&st->et_heap);
    if (a != NULL && !timer_eligible(em, st, a)) {
        a = NULL;
    }
    if (e != NULL && !timer_eligible(em, st, e)) {
        e = NULL;
    }
    if (a != NULL && e != NULL) {
        return sd__timer_cmp(a, e) <= 0 ? a : e;
    }
    return a != NULL ? a : e;
}

static uint64_t rng_next(sd_em *em)
{
    /* splitmix64: a full-period 64-bit generator; the state is the only input. */
    uint64_t z = (em->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static size_t rng_below(sd_em *em, size_t n)
{
    return n <= 1 ? 0 : (size_t)(rng_next(em) % n);
}

static void shuffle_ptrs(sd_em *em, void **a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_below(em, i);
        void *t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/*
 * Move eligible timers of unlocked keys into b (at most `room` of them), earliest first. With
 * the one-key shape only timers of *key (set from the first timer taken when still NULL) are
 * taken; with a schedule seed, a few more candidates than room are drawn and a random choice
 * of them is taken, in random order. Timers passed over go back into their heaps, which cannot
 * fail: their slots were just freed.
 */
static sd_status
take_timers(sd_em *em, sd__stage *st, sd_bundle *b, size_t room, bool one_key, sd_bytes *key)
{
    sd_status rc = SD_OK;
    sd_vec skipped, cands;
    if (st->timers.len == 0 || room == 0 || !timers_ready(em, st)) {
        return SD_OK;
    }
    sd_vec_init(&skipped, sizeof(sd__timer *));
    sd_vec_init(&cands, sizeof(sd__timer *));
    /* Per key and time domain, the first candidate taken: a key's later timers wait for a
     * later bundle, so a key's timers fire in time order whatever their families (the SDK
     * runs each family's timers as one stream), and an earlier timer's callback can still
     * clear or move a later one before it fires (Python's clearing-timer tests). */
    sd_map first_of_key;
    sd_map_init(&first_of_key, NULL);
    sd_buf kbuf; /* domain byte + key: first_of_key's key */
    sd_buf_init(&kbuf, 0);
    size_t limit = room;
    if (em->cfg.schedule_seed != 0 && room < SIZE_MAX / 8) {
        limit = room * 4 + 4;
    }
    sd__timer *t;
    while (cands.len < limit && (t = next_eligible(em, st)) != NULL) {
        sd__theap_remove(sd__timer_heap(st, t), t);
        sd_bytes tk = sd_bytes_make(t->key, t->key_len);
        bool other_key = one_key && key->ptr != NULL && !sd_bytes_equal(tk, *key);
        bool later = false;
        sd_buf_reset(&kbuf);
        rc = sd_buf_append_byte(&kbuf, st->families[t->family].processing_time ? 1 : 0);
        if (rc == SD_OK) {
            rc = sd_buf_append_bytes(&kbuf, tk);
        }
        if (rc != SD_OK) {
            sd__theap_push(sd__timer_heap(st, t), t);
            break;
        }
        if (!other_key) {
            sd__timer *first = sd_map_get(&first_of_key, sd_buf_bytes(&kbuf));
            later = first != NULL && first->due < t->due;
        }
        if (later || other_key || key_locked_by_other(st, tk, b)) {
            rc = sd_vec_push(&skipped, &t);
            if (rc != SD_OK || skipped.len >= 4096) {
                if (rc != SD_OK) {
                    sd__theap_push(sd__timer_heap(st, t), t);
                }
                break;
            }
            continue;
        }
        rc = sd_vec_push(&cands, &t);
        if (rc == SD_OK && sd_map_get(&first_of_key, sd_buf_bytes(&kbuf)) == NULL) {
            rc = sd_map_put(&first_of_key, sd_buf_bytes(&kbuf), t);
            if (rc != SD_OK) {
                cands.len--;
            }
        }
        if (rc != SD_OK) {
            sd__theap_push(sd__timer_heap(st, t), t);
            break;
        }
        if (one_key && key->ptr == NULL) {
            *key = tk; /* the timer lives on in the bundle's fired list */
        }
    }
    sd__timer **c = cands.items;
    if (em->cfg.schedule_seed != 0) {
        shuffle_ptrs(em, (void **)c, cands.len);
    }
    size_t take = SD_MIN(room, cands.len), i = 0;
    if (rc == SD_OK) {
        rc = sd_vec_reserve(&b->fired, b->fired.len + take);
    }
    for (; rc == SD_OK && i < take; i++) {
        t = c[i];
        rc = lock_key(st, sd_bytes_make(t->key, t->key_len), b);
        if (rc == SD_OK) {
            sd_buf_reset(&em->scratch);
            rc = sd__timer_identity(&em->scratch, t->family, &t->win,
                                    sd_bytes_make(t->key, t->key_len),
                                    sd_bytes_make(t->tag, t->tag_len));
        }
        if (rc != SD_OK) {
            break;
        }
        /* The hold stays in the stage's bag until the bundle completes. */
        void *taken = sd_map_take(&st->timers, sd_buf_bytes(&em->scratch));
        assert(taken == t);
        (void)taken;
        rc = sd_vec_push(&b->fired, &t);
        assert(rc == SD_OK);
    }
    for (; i < cands.len; i++) {
        sd__theap_push(sd__timer_heap(st, c[i]), c[i]);
    }
    for (size_t j = 0; j < skipped.len; j++) {
        t = *SD_VEC_AT(&skipped, sd__timer *, j);
        sd__theap_push(sd__timer_heap(st, t), t);
    }
    sd_vec_deinit(&skipped);
    sd_vec_deinit(&cands);
    sd_map_deinit(&first_of_key);
    sd_buf_deinit(&kbuf);
    return rc;
}

static sd_status encode_timers(sd_em *em, sd__stage *st, sd_bundle *b, sd_err *err)
{
    sd_status rc = SD_OK;
    for (size_t f = 0; f < st->n_families && rc == SD_OK; f++) {
        sd__timer_input *ti = NULL;
        for (size_t i = 0; i < b->fired.len && rc == SD_OK; i++) {
            sd__timer *t = *SD_VEC_AT(&b->fired, sd__timer *, i);
            if (t->family != f) {
                continue;
            }
            if (ti == NULL) {
                rc = sd_vec_push_zero(&b->timer_inputs, (void **)&ti);
                if (rc != SD_OK) {
                    break;
                }
                ti->family = f;
                sd_buf_init(&ti->bytes, 0);
            }
            sd_window w = sd__win_to(&t->win);
            sd_timer enc;
            sd_timer_init(&enc);
            enc.key = sd_bytes_make(t->key, t->key_len);
            enc.tag = sd_bytes_make(t->tag, t->tag_len);
            rc = sd_windows_set(&enc.windows, &w, 1);
            enc.clear = false;
            enc.fire = t->fire;
            enc.hold = t->hold;
            enc.pane = t->pane;
            if (rc == SD_OK) {
                rc = sd_timer_encode(st->families[f].timer_coder, &enc, &ti->bytes, err);
            }
            sd_timer_deinit(&enc);
        }
    }
    (void)em;
    return rc;
}

/* Give back what a bundle took: inputs [from, n_primary) and (when all) its fired timers. */
static sd_status return_inputs(sd__stage *st, sd_bundle *b, size_t from)
{
    sd_status rc = SD_OK;
    for (size_t i = from; i < b->n_primary; i++) {
        sd__elem *e = SD_VEC_AT(&b->elems, sd__elem, i);
        if (rc == SD_OK) {
            rc = heap_push(&st->pending, e);
        }
        if (rc != SD_OK) {
            sd__slab_unref(e->slab);
        }
    }
    /* The returned elements now belong to the pending heap (their slab references too);
     * the bundle forgets them. Their keys stay locked until the bundle ends. */
    b->n_primary = from;
    b->elems.len = from;
    return rc;
}

static void unlock_keys(sd__stage *st, sd_bundle *b)
{
    sd_reader r = sd_reader_make(sd_buf_bytes(&b->locked));
    sd_bytes key;
    while (sd_reader_lp(&r, &key) == SD_OK) {
        if (sd_map_get(&st->key_locks, key) == b) {
            sd_map_remove(&st->key_locks, key);
        }
    }
    sd_buf_reset(&b->locked);
}

static void link_bundle(sd_em *em, sd__stage *st, sd_bundle *b)
{
    b->prev = NULL;
    b->next = st->inflight;
    if (st->inflight != NULL) {
        st->inflight->prev = b;
    }
    st->inflight = b;
    st->n_inflight++;
    em->n_inflight++;
}

static void unlink_bundle(sd_em *em, sd__stage *st, sd_bundle *b)
{
    if (b->prev != NULL) {
        b->prev->next = b->next;
    } else {
        st->inflight = b->next;
    }
    if (b->next != NULL) {
        b->next->prev = b->prev;
    }
    st->n_inflight--;
    em->n_inflight--;
}

/* "<stage>-<seq>", formatted by hand: printf costs more than the rest of a one-timer bundle. */
static char *bundle_name(const char *stage, uint64_t seq)
{
    char digits[24];
    size_t n = 0, len = strlen(stage);
    do {
        digits[n++] = (char)('0' + seq % 10);
        seq /= 10;
    } while (seq > 0);
    char *name = sd_malloc(len + 1 + n + 1);
    if (name == NULL) {
        return NULL;
    }
    memcpy(name, stage, len);
    name[len] = '-';
    for (size_t i = 0; i < n; i++) {
        name[len + 1 + i] = digits[n - 1 - i];
    }
    name[len + 1 + n] = 0;
    return name;
}

/*
 * Bundle sizing. A bundle is cut at the first of: max_bundle_elements input elements,
 * max_bundle_bytes of encoded input (a larger single element still goes alone), and — for a
 * stage with an output cap (sd_stage_spec.max_output_bytes; the planner sets one for the
 * TypeScript SDK, whose data sink duplicates output once a bundle's output passes 1 MB) — as
 * many elements as are expected to make at most that much output. The expectation is learned
 * per stage from completed bundles: output bytes per input element, rising at once to the
 * latest bundle's figure and decaying by half per bundle otherwise, so a fan-out stage (one
 * seed making 100 KB) gets small bundles and a 1:1 stage keeps large ones. Until a bundle has
 * completed, a capped stage takes one element at a time. Returns 0 for "no cap".
 */
static size_t output_capped_elements(const sd__stage *st)
{
    if (st->max_out_bytes == 0) {
        return 0;
    }
    if (!st->out_learned) {
        return 1;
    }
    size_t per = st->out_per_elem > 0 ? st->out_per_elem : 1;
    size_t n = st->max_out_bytes / per;
    return n > 0 ? n : 1;
}

sd_status sd_em_set_output_cap(sd_em *em, const char *stage, size_t max_bytes)
{
    sd__stage *st = em != NULL && stage != NULL ? find_stage(em, stage) : NULL;
    if (st == NULL) {
        return SD_ENOTFOUND;
    }
    st->max_out_bytes = st->kind == SD_STAGE_SDK ? max_bytes : 0;
    return SD_OK;
}

/* After a bundle with input completed: update the stage's output bytes per input element. */
static void learn_output_size(sd__stage *st, const sd_bundle *b)
{
    if (st->max_out_bytes == 0 || b->n_primary == 0) {
        return;
    }
    size_t out = 0;
    for (size_t o = 0; o < st->n_outputs; o++) {
        out += b->outputs[o].len;
    }
    size_t per = out / b->n_primary + (out % b->n_primary != 0);
    st->out_per_elem = SD_MAX(per, st->out_per_elem / 2);
    st->out_learned = true;
}

/*
 * Build the next bundle of an SDK stage, or leave *out NULL when the stage has nothing ready.
 * On failure everything taken is given back (or the engine is poisoned on ENOMEM).
 */
static sd_status make_bundle(sd_em *em, sd__stage *st, sd_bundle **out, sd_err *err)
{
    sd_bundle *b;
    sd_status rc = SD_OK;
    size_t max_elems = em->cfg.max_bundle_elements;
    size_t max_bytes = em->cfg.max_bundle_bytes;
    bool one_key = em->cfg.bundle_shape == SD_SHAPE_ONE_KEY;
    /* A time-sorted stage takes its elements in timestamp order even when exploring schedules. */
    bool seeded = em->cfg.schedule_seed != 0 && !st->time_sorted;
    sd_bytes bundle_key = SD_BYTES_NULL; /* one-key shape: the key of this bundle, once known */
    const sd__pcoll *in_pc = pcoll_at(em, st->inputs[0]);
    *out = NULL;
    if (em->cfg.bundle_shape == SD_SHAPE_ONE_ELEMENT) {
        max_elems = 1;
    }
    size_t out_cap = output_capped_elements(st);
    if (out_cap > 0 && (max_elems == 0 || out_cap < max_elems)) {
        max_elems = out_cap;
    }
    if (st->pending.len == 0 && !timers_ready(em, st)) {
        return SD_OK;
    }
    sd_time limit;
    bool sides_done;
    side_limit(em, st, &limit, &sides_done);
    if (!sides_done && st->pending.len > 0 &&
        sd__win_max_ts(&SD_VEC_AT(&st->pending, sd__elem, 0)->win) >= limit &&
        !sides_ready(em, st)) {
        return SD_OK;
    }
    b = sd_calloc(1, sizeof(*b));
    if (b == NULL) {
        return SD_ENOMEM;
    }
    b->magic = SD__BUNDLE_MAGIC;
    b->stage = st;
    b->input_pcoll = in_pc->id;
    b->min_ts = SD_TIME_MAX;
    b->watermark = st->in_wm;
    sd_vec_init(&b->elems, sizeof(sd__elem));
    sd_vec_init(&b->input_ends, sizeof(size_t));
    sd_vec_init(&b->timer_inputs, sizeof(sd__timer_input));
    sd_vec_init(&b->fired, sizeof(sd__timer *));
    sd_vec_init(&b->residuals, sizeof(sd__residual));
    sd_map_init(&b->deltas, sd__state_delta_free);
    sd_buf_init(&b->input, 0);
    sd_buf_init(&b->locked, 0);

    /* Data, oldest first (with a schedule seed: in random order). Stateful stages skip keys
     * another bundle holds; the one-key shape skips keys other than the bundle's. */
    sd_vec skipped;
    sd_vec_init(&skipped, sizeof(sd__elem));
    while (rc == SD_OK && st->pending.len > 0) {
        if (max_elems > 0 && b->elems.len >= max_elems) {
            break;
        }
        /* Bound the work per pass when hot keys are in flight (or, one-key shape, other keys
         * are pending): the rest waits for a later pass, so progress is kept. */
        if (skipped.len >= 4096) {
            break;
        }
        sd__elem e;
        size_t at = seeded ? rng_below(em, st->pending.len) : 0;
        bool ready =
            sides_done || sd__win_max_ts(&SD_VEC_AT(&st->pending, sd__elem, at)->win) < limit;
        if (!ready && !seeded) {
            break; /* the oldest element's side windows are not complete yet */
        }
        heap_take(&st->pending, at, &e);
        sd_bytes key = sd_bytes_make(e.slab->data + e.off, e.key_len);
        if (!ready || (st->stateful && key_locked_by_other(st, key, b)) ||
            (one_key && bundle_key.ptr != NULL && !sd_bytes_equal(key, bundle_key))) {
            rc = sd_vec_push(&skipped, &e);
            if (rc != SD_OK) {
                rc = heap_push(&st->pending, &e) == SD_OK ? SD_ENOMEM : SD_EINTERNAL;
            }
            continue;
        }
        size_t before = b->input.len;
        rc = encode_elem(in_pc, &e, &b->input);
        if (rc == SD_OK && max_bytes > 0 && b->input.len > max_bytes && b->elems.len > 0) {
            b->input.len = before;
            rc = heap_push(&st->pending, &e);
            break;
        }
        if (rc == SD_OK && st->stateful) {
            rc = lock_key(st, key, b);
        }
        if (rc == SD_OK) {
            rc = sd_vec_push(&b->input_ends, &b->input.len);
        }
        if (rc == SD_OK) {
            rc = sd_vec_push(&b->elems, &e);
            if (rc != SD_OK) {
                b->input_ends.len--;
            }
        }
        if (rc != SD_OK) {
            b->input.len = before;
            if (heap_push(&st->pending, &e) != SD_OK) {
                sd__slab_unref(e.slab);
            }
            break;
        }
        if (one_key && bundle_key.ptr == NULL) {
            bundle_key = key; /* points into the element's slab, which the bundle holds */
        }
        b->min_ts = SD_MIN(b->min_ts, e.ts);
    }
    for (size_t i = 0; i < skipped.len; i++) {
        sd__elem *e = SD_VEC_AT(&skipped, sd__elem, i);
        if (heap_push(&st->pending, e) != SD_OK) {
            sd__slab_unref(e->slab);
            rc = SD_EINTERNAL;
        }
    }
    sd_vec_deinit(&skipped);
    b->n_primary = b->elems.len;
    b->n_input = b->elems.len;

    if (rc == SD_OK && st->n_families > 0 && (sides_done || sides_ready(em, st))) {
        size_t room = max_elems == 0 ? SIZE_MAX : max_elems - SD_MIN(max_elems, b->elems.len);
        rc = take_timers(em, st, b, room, one_key, &bundle_key);
        if (rc == SD_OK) {
            rc = encode_timers(em, st, b, err);
        }
    }
    if (rc == SD_OK && b->elems.len == 0 && b->fired.len == 0) {
        bundle_free(b);
        return SD_OK;
    }
    if (rc == SD_OK && st->n_outputs > 0) {
        b->outputs = sd_calloc(st->n_outputs, sizeof(sd_buf));
        rc = b->outputs == NULL ? SD_ENOMEM : SD_OK;
    }
    if (rc == SD_OK && st->n_families > 0) {
        b->timer_out = sd_calloc(st->n_families, sizeof(sd_buf));
        rc = b->timer_out == NULL ? SD_ENOMEM : SD_OK;
    }
    if (rc == SD_OK) {
        b->id = bundle_name(st->id, ++st->bundle_seq);
        rc = b->id == NULL ? SD_ENOMEM : SD_OK;
    }
    link_bundle(em, st, b);
    if (rc != SD_OK) {
        sd_em_fail_bundle(em, b);
        return rc;
    }
    *out = b;
    return SD_OK;
}

/* ========================================================================================== */
/* Scheduling                                                                                 */
/* ========================================================================================== */

/* Earliest processing-time event after now (PT timers, parked residuals); false if none. */
static bool next_pt_event(const sd_em *em, sd_time *out)
{
    bool any = false;
    sd_time best = SD_TIME_MAX;
    for (size_t i = 0; i < em->stages.len; i++) {
        const sd__stage *st = stage_at(em, i);
        for (size_t p = 0; p < st->parked.len; p++) {
            best = SD_MIN(best, SD_VEC_AT(&st->parked, sd__parked, p)->release_at);
            any = true;
        }
        if (st->kind == SD_STAGE_GBK && st->gbk.n_groups > 0 && st->gbk.min_pt < SD_TIME_MAX) {
            best = SD_MIN(best, st->gbk.min_pt);
            any = true;
        }
        if (st->pt_heap.len > 0) {
            best = SD_MIN(best, st->pt_heap.items[0].due);
            any = true;
        }
    }
    *out = best;
    return any;
}

/*
 * Several TestStreams (Beam allows any number) share the job's one processing-time clock. Each
 * stream is a timeline: its element and watermark events happen at the processing time its
 * own clock events have reached (ts_pos, from the job's start). At quiescence the stream whose
 * timeline is furthest behind takes its next step (ties: the stream registered first), and the
 * job clock follows the slowest stream with events left, so the streams' processing-time
 * events merge in time order and each watermark event applies to its own stream's outputs
 * only. One stream gives exactly its own order: each clock event moves the job clock by its
 * amount.
 */
static sd__stage *teststream_next(const sd_em *em)
{
    sd__stage *best = NULL;
    for (size_t i = 0; em->teststream != SIZE_MAX && i < em->stages.len; i++) {
        sd__stage *st = stage_at(em, i);
        if (st->kind == SD_STAGE_TESTSTREAM && st->ts_next <= st->ts_events.len &&
            (best == NULL || st->ts_pos < best->ts_pos)) {
            best = st;
        }
    }
    return best;
}

static bool teststream_pending(const sd_em *em)
{
    return teststream_next(em) != NULL;
}

/* The processing time the slowest stream with events left has reached (MAX: none left). */
static sd_time teststreams_pos(const sd_em *em)
{
    const sd__stage *st = teststream_next(em);
    return st != NULL ? st->ts_pos : SD_TIME_MAX;
}

/* Apply the next TestStream event (or, after a stream's last one, release its outputs). */
static sd_status teststream_step(sd_em *em, sd_err *err)
{
    sd__stage *ts = teststream_next(em);
    sd_status rc = SD_OK;
    sd_time before = teststreams_pos(em);
    if (ts->ts_next == ts->ts_events.len) {
        for (size_t o = 0; o < ts->n_outputs; o++) {
            pcoll_at(em, ts->outputs[o])->wm = SD_TIME_MAX;
        }
        ts->ts_next++;
        ts->ts_pos = SD_TIME_MAX;
        /* The streams left may be ahead of this one: the clock moves to the slowest. */
        sd_time after = teststreams_pos(em);
        if (after != SD_TIME_MAX && after > before) {
            em->clock_now = sd_time_add(em->clock_now, after - before);
        }
        return SD_OK;
    }
    sd__ts_event *ev = SD_VEC_AT(&ts->ts_events, sd__ts_event, ts->ts_next++);
    sd__pcoll *pc = ev->kind == SD__TS_CLOCK ? NULL : pcoll_at(em, ev->pcoll);
    switch (ev->kind) {
    case SD__TS_ELEMENTS:
        for (size_t i = 0; i < ev->n && rc == SD_OK; i++) {
            sd__incoming in = {
                .ts = ev->times[i],
                .win = { .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true },
                .pane = SD_PANE_NO_FIRING,
                .elem = sd_bytes_make(ev->slab->data + ev->offs[i], ev->lens[i]),
                .slab = ev->slab
            };
            rc = sd__em_deliver(em, pc, &in, err);
        }
        break;
    case SD__TS_WATERMARK:
        pc->wm = SD_MAX(pc->wm, ev->wm);
        break;
    case SD__TS_CLOCK: {
        ts->ts_pos = ev->advance_ms >= SD_TIME_MAX ? SD_TIME_MAX
                                                   : sd_time_add(ts->ts_pos, ev->advance_ms);
        sd_time after = teststreams_pos(em);
        if (after == SD_TIME_MAX) {
            em->clock_now = SD_TIME_MAX; /* every stream advanced to the end of time */
        } else if (after > before) {
            em->clock_now = sd_time_add(em->clock_now, after - before);
        }
        break;
    }
    }
    return rc;
}

sd_status sd_em_next_bundle(sd_em *em, sd_bundle **out, sd_err *err)
{
    sd_status rc;
    *out = NULL;
    if (em == NULL || !em->started) {
        return sd_err_set(err, SD_ESTATE, "next_bundle: engine not started");
    }
    if (em->poisoned) {
        return sd_err_set(err, SD_ESTATE, "next_bundle: engine failed earlier (out of memory)");
    }
    for (;;) {
        if (em->cfg.clock == SD_CLOCK_WALL) {
            em->clock_now = SD_MAX(em->clock_now, sd__em_wall(em));
        }
        rc = refresh(em, err);
        if (rc != SD_OK) {
            return rc;
        }
        size_t n = em->stages.len;
        for (size_t k = 0; k < n; k++) {
            em->perm[k] = (em->rr + k) % n;
        }
        if (em->cfg.schedule_seed != 0) {
            for (size_t k = n; k > 1; k--) {
                size_t j = rng_below(em, k), t = em->perm[k - 1];
                em->perm[k - 1] = em->perm[j];
                em->perm[j] = t;
            }
        }
        for (size_t k = 0; k < n; k++) {
            size_t idx = em->perm[k];
            sd__stage *st = stage_at(em, idx);
            sd_bundle *b = NULL;
            if (st->kind != SD_STAGE_SDK) {
                continue;
            }
            rc = make_bundle(em, st, &b, err);
            if (rc != SD_OK) {
                return poison(em, rc);
            }
            if (b != NULL) {
                em->rr = (idx + 1) % n;
                *out = b;
                return SD_OK;
            }
        }
        if (em->n_inflight > 0) {
            return SD_OK;
        }
        /* Quiescent: due processing-time work was handled above; now TestStream, then time. */
        if (teststream_pending(em)) {
            rc = teststream_step(em, err);
            if (rc != SD_OK) {
                return poison(em, rc);
            }
            continue;
        }
        sd_time t;
        if (em->cfg.clock == SD_CLOCK_SYNTHETIC && next_pt_event(em, &t) && t > em->clock_now) {
            em->clock_now = t;
            continue;
        }
        return SD_OK;
    }
}

/* ========================================================================================== */
/* Bundle accessors and results                                                               */
/* ========================================================================================== */

const char *sd_bundle_id(const sd_bundle *b)
{
    return b->id;
}

const char *sd_bundle_stage(const sd_bundle *b)
{
    return b->stage->id;
}

const char *sd_bundle_input_pcollection(const sd_bundle *b)
{
    return b->input_pcoll;
}

sd_bytes sd_bundle_input(const sd_bundle *b)
{
    return sd_buf_bytes(&b->input);
}

bool sd_bundle_input_piece(const sd_bundle *b, size_t *next, size_t max_bytes, sd_bytes *piece)
{
    size_t n = b->input_ends.len;
    size_t i = *next;
    if (i >= n) {
        return false;
    }
    size_t start = i == 0 ? 0 : *SD_VEC_AT(&b->input_ends, size_t, i - 1);
    size_t end = *SD_VEC_AT(&b->input_ends, size_t, i);
    for (i++; i < n; i++) {
        size_t e = *SD_VEC_AT(&b->input_ends, size_t, i);
        if (e - start > max_bytes) {
            break;
        }
        end = e;
    }
    *next = i;
    *piece = sd_bytes_make(b->input.data + start, end - start);
    return true;
}

size_t sd_bundle_input_count(const sd_bundle *b)
{
    return b->n_input;
}

size_t sd_bundle_n_timer_inputs(const sd_bundle *b)
{
    return b->timer_inputs.len;
}

void sd_bundle_timer_input(const sd_bundle *b,
                           size_t i,
                           const char **transform_id,
                           const char **family_id,
                           sd_bytes *timers)
{
    const sd__timer_input *ti = SD_VEC_AT(&b->timer_inputs, sd__timer_input, i);
    const sd__family *f = &b->stage->families[ti->family];
    *transform_id = f->transform_id;
    *family_id = f->family_id;
    *timers = sd_buf_bytes(&ti->bytes);
}

sd_time sd_bundle_watermark(const sd_bundle *b)
{
    return b->watermark;
}

static sd_status check_bundle(const sd_em *em, const sd_bundle *b, sd_err *err)
{
    if (em == NULL || b == NULL || b->magic != SD__BUNDLE_MAGIC) {
        return sd_err_set(err, SD_EINVAL, "bundle: not a live bundle");
    }
    if (em->poisoned) {
        return sd_err_set(err, SD_ESTATE, "bundle %s: engine failed earlier (out of memory)",
                          b->id);
    }
    return SD_OK;
}

sd_status
sd_em_bundle_output(sd_em *em, sd_bundle *b, const char *pcollection, sd_bytes data, sd_err *err)
{
    sd_status rc = check_bundle(em, b, err);
    if (rc != SD_OK) {
        return rc;
    }
    const sd__stage *st = b->stage;
    for (size_t i = 0; i < st->n_outputs; i++) {
        if (strcmp(pcoll_at(em, st->outputs[i])->id, pcollection) == 0) {
            return sd_buf_append_bytes(&b->outputs[i], data);
        }
    }
    return sd_err_set(err, SD_ENOTFOUND, "bundle %s: \"%s\" is not an output of stage \"%s\"",
                      b->id, pcollection, st->id);
}

sd_status sd_em_bundle_timers(sd_em *em,
                              sd_bundle *b,
                              const char *transform_id,
                              const char *family_id,
                              sd_bytes data,
                              sd_err *err)
{
    sd_status rc = check_bundle(em, b, err);
    if (rc != SD_OK) {
        return rc;
    }
    const sd__stage *st = b->stage;
    for (size_t i = 0; i < st->n_families; i++) {
        if (strcmp(st->families[i].transform_id, transform_id) == 0 &&
            strcmp(st->families[i].family_id, family_id) == 0) {
            return sd_buf_append_bytes(&b->timer_out[i], data);
        }
    }
    return sd_err_set(err, SD_ENOTFOUND,
                      "bundle %s: stage \"%s\" declares no timer family \"%s\" of \"%s\"", b->id,
                      st->id, family_id, transform_id);
}

sd_status sd_em_bundle_residual(sd_em *em,
                                sd_bundle *b,
                                sd_bytes wv_element,
                                int64_t delay_ms,
                                bool has_output_watermark,
                                sd_time output_watermark,
                                sd_err *err)
{
    sd_status rc = check_bundle(em, b, err);
    if (rc != SD_OK) {
        return rc;
    }
    sd__residual r = { .bytes = sd_memdup(wv_element.ptr, wv_element.len),
                       .len = wv_element.len,
                       .delay_ms = delay_ms };
    if (r.bytes == NULL) {
        return SD_ENOMEM;
    }
    rc = sd_vec_push(&b->residuals, &r);
    if (rc != SD_OK) {
        sd_free(r.bytes);
        return rc;
    }
    sd_time est = has_output_watermark ? output_watermark : SD_TIME_MIN;
    b->est = b->has_est ? SD_MIN(b->est, est) : est;
    b->has_est = true;
    return SD_OK;
}

sd_status sd_em_bundle_split(sd_em *em, sd_bundle *b, size_t first_residual_element, sd_err *err)
{
    sd_status rc = check_bundle(em, b, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (first_residual_element > b->n_primary) {
        return sd_err_set(err, SD_EINVAL,
                          "bundle %s: split at element %zu, but only %zu remain in the primary",
                          b->id, first_residual_element, b->n_primary);
    }
    rc = return_inputs(b->stage, b, first_residual_element);
    return poison(em, rc);
}

/* ========================================================================================== */
/* Completion                                                                                 */
/* ========================================================================================== */

typedef struct staged_elem {
    size_t pcoll;  /* SIZE_MAX: a residual of the bundle's own stage */
    size_t source; /* output index, or residual index */
    int64_t delay_ms;
    sd__incoming in;
} staged_elem;

typedef struct staged_timer {
    size_t family;
    sd__win win;
    sd_bytes key;
    sd_bytes tag;
    bool clear;
    sd_time fire;
    sd_time hold;
    sd_pane pane;
} staged_timer;

/*
 * Walk the windowed values of one output (or residual) stream. Without slab: decode and check
 * only, and (when out is given) stage each exploded element into out. With slab: deliver each
 * exploded element to pc's consumers. Outputs are walked twice (check, then deliver) rather
 * than staged: a staged copy of a million elements costs more than decoding them again.
 */
static sd_status walk_values(sd_em *em,
                             sd__pcoll *pc,
                             sd_bytes data,
                             sd__slab *slab,
                             sd_vec *out,
                             size_t source,
                             int64_t delay_ms,
                             sd_err *err)
{
    sd_reader r = sd_reader_make(data);
    sd_status rc = SD_OK;
    size_t n = 0;
    while (!sd_reader_done(&r)) {
        sd_bytes elem;
        rc = sd_wv_decode(pc->wv_coder, &r, &em->hdr, &elem, err);
        if (rc != SD_OK) {
            (void)sd_err_prefix(err, "pcollection \"%s\" element %zu: ", pc->id, n);
            return rc;
        }
        /* No separate key check: decoding skipped the element with its KV coder, which skips
         * the key with the same key coder sd_kv_split uses, so the split cannot fail later. */
        const sd_window *ws = sd_windows_items(&em->hdr.windows);
        for (size_t w = 0; w < em->hdr.windows.n; w++) {
            if (ws[w].custom) {
                return sd_err_set(err, SD_EUNIMPL, "pcollection \"%s\": custom window", pc->id);
            }
            staged_elem s = { .pcoll = SIZE_MAX,
                              .source = source,
                              .delay_ms = delay_ms,
                              .in = { .ts = em->hdr.ts,
                                      .win = sd__win_from(&ws[w]),
                                      .pane = em->hdr.pane,
                                      .elem = elem,
                                      .slab = slab } };
            if (slab != NULL) {
                rc = sd__em_deliver(em, pc, &s.in, err);
            } else if (out != NULL) {
                rc = sd_vec_push(out, &s);
            }
            if (rc != SD_OK) {
                return rc;
            }
        }
        n++;
    }
    return SD_OK;
}

static sd_status
stage_timers(sd_em *em, const sd__stage *st, sd_bundle *b, sd_vec *out, sd_err *err)
{
    for (size_t f = 0; f < st->n_families; f++) {
        sd_reader r = sd_reader_make(sd_buf_bytes(&b->timer_out[f]));
        size_t n = 0;
        while (!sd_reader_done(&r)) {
            sd_status rc = sd_timer_decode(st->families[f].timer_coder, &r, &em->timer, err);
            if (rc != SD_OK) {
                (void)sd_err_prefix(
                    err, "timer family \"%s\" timer %zu: ", st->families[f].family_id, n);
                return rc;
            }
            const sd_window *ws = sd_windows_items(&em->timer.windows);
            for (size_t w = 0; w < em->timer.windows.n; w++) {
                if (ws[w].custom) {
                    return sd_err_set(err, SD_EUNIMPL, "timer family \"%s\": custom window",
                                      st->families[f].family_id);
                }
                staged_timer t = { .family = f,
                                   .win = sd__win_from(&ws[w]),
                                   .key = em->timer.key,
                                   .tag = em->timer.tag,
                                   .clear = em->timer.clear,
                                   .fire = em->timer.fire,
                                   .hold = em->timer.hold,
                                   .pane = em->timer.pane };
                rc = sd_vec_push(out, &t);
                if (rc != SD_OK) {
                    return rc;
                }
            }
            n++;
        }
    }
    return SD_OK;
}

static sd_status apply_timer(sd_em *em, sd__stage *st, const staged_timer *s, sd_time wall)
{
    sd__timer *t = sd_calloc(1, sizeof(*t));
    if (t == NULL) {
        return SD_ENOMEM;
    }
    t->family = s->family;
    t->win = s->win;
    t->key = sd_memdup(s->key.ptr, s->key.len);
    t->key_len = s->key.len;
    t->tag = sd_memdup(s->tag.ptr, s->tag.len);
    t->tag_len = s->tag.len;
    if (t->key == NULL || t->tag == NULL) {
        sd__timer_free(t);
        return SD_ENOMEM;
    }
    /* A processing-time timer set for a window that has already expired (its max timestamp
     * plus allowed lateness is behind the input watermark, e.g. anything once the input is
     * finished) acts as a clear: it could never be useful, and a self-re-arming one would
     * otherwise keep a bounded job alive forever on the synthetic clock. Event-time timers
     * are kept: they fire at the latest when the input watermark reaches the end of time. */
    bool pt = st->families[s->family].processing_time;
    sd_time expire =
        sd_time_add(sd__win_max_ts(&s->win), pcoll_at(em, st->inputs[0])->ws.allowed_lateness_ms);
    if (s->clear || (pt && expire < st->in_wm)) {
        if (!s->clear) {
            st->dropped_timers++;
        }
        sd__timer_remove(em, st, t);
        sd__timer_free(t);
        return SD_OK;
    }
    t->fire = s->fire;
    t->hold = s->hold;
    t->pane = s->pane;
    if (pt) {
        /* The SDK's absolute wall-clock firing time, moved onto the job's clock. */
        t->fire = sd_time_clamp(sd_time_add(em->clock_now, sd_time_add(s->fire, -wall)));
    }
    return sd__timer_set(em, st, t);
}

sd_status sd_em_complete_bundle(sd_em *em, sd_bundle *b, sd_err *err)
{
    sd_status rc = check_bundle(em, b, err);
    sd_vec elems, timers;
    if (rc != SD_OK) {
        return rc;
    }
    sd__stage *st = b->stage;
    sd__pcoll *in_pc = pcoll_at(em, st->inputs[0]);
    sd_vec_init(&elems, sizeof(staged_elem));
    sd_vec_init(&timers, sizeof(staged_timer));

    if (em->cfg.clock == SD_CLOCK_WALL) {
        em->clock_now = SD_MAX(em->clock_now, sd__em_wall(em)); /* arrival time for triggers */
    }

    learn_output_size(st, b);
    /* Phase 1: decode and validate everything; nothing in the engine changes yet. */
    for (size_t o = 0; o < st->n_outputs && rc == SD_OK; o++) {
        sd__pcoll *pc = pcoll_at(em, st->outputs[o]);
        rc = walk_values(em, pc, sd_buf_bytes(&b->outputs[o]), NULL, NULL, o, 0, err);
    }
    for (size_t i = 0; i < b->residuals.len && rc == SD_OK; i++) {
        const sd__residual *r = SD_VEC_AT(&b->residuals, sd__residual, i);
        size_t before = elems.len;
        rc = walk_values(em, in_pc, sd_bytes_make(r->bytes, r->len), NULL, &elems, i, r->delay_ms,
                         err);
        if (rc == SD_OK && elems.len != before + 1) {
            rc = sd_err_set(err, SD_EPROTO,
                            "residual %zu: expected one windowed value in one window", i);
        }
    }
    if (rc == SD_OK) {
        rc = stage_timers(em, st, b, &timers, err);
    }
    if (rc != SD_OK) {
        sd_vec_deinit(&elems);
        sd_vec_deinit(&timers);
        if (rc != SD_ENOMEM) {
            sd_err_prefix(err, "bundle %s: ", b->id);
        }
        sd_em_fail_bundle(em, b);
        return rc;
    }

    /* Phase 2: apply. From here an allocation failure poisons the engine. */
    sd__slab **out_slabs = NULL, **res_slabs = NULL;
    if (st->n_outputs > 0) {
        out_slabs = sd_calloc(st->n_outputs, sizeof(*out_slabs));
        rc = out_slabs == NULL ? SD_ENOMEM : SD_OK;
    }
    if (rc == SD_OK && b->residuals.len > 0) {
        res_slabs = sd_calloc(b->residuals.len, sizeof(*res_slabs));
        rc = res_slabs == NULL ? SD_ENOMEM : SD_OK;
    }
    for (size_t o = 0; o < st->n_outputs && rc == SD_OK; o++) {
        size_t len;
        uint8_t *data = sd_buf_take(&b->outputs[o], &len);
        if (data != NULL) {
            out_slabs[o] = sd__slab_new(data, len);
            rc = out_slabs[o] == NULL ? SD_ENOMEM : SD_OK;
        }
        if (rc == SD_OK && data != NULL) {
            rc = walk_values(em, pcoll_at(em, st->outputs[o]), sd_bytes_make(data, len),
                             out_slabs[o], NULL, o, 0, err);
        }
    }
    for (size_t i = 0; i < b->residuals.len && rc == SD_OK; i++) {
        sd__residual *r = SD_VEC_AT(&b->residuals, sd__residual, i);
        res_slabs[i] = sd__slab_new(r->bytes, r->len);
        r->bytes = NULL;
        rc = res_slabs[i] == NULL ? SD_ENOMEM : SD_OK;
    }
    for (size_t i = 0; i < elems.len && rc == SD_OK; i++) {
        staged_elem *s = SD_VEC_AT(&elems, staged_elem, i);
        /* A residual of this stage: pending again now, or parked until the clock says. */
        s->in.slab = res_slabs[s->source];
        size_t key_len = 0;
        if (in_pc->needs_key) {
            sd_bytes k, v;
            rc = sd_kv_split(in_pc->elem_coder, s->in.elem, &k, &v, err);
            key_len = k.len;
        }
        if (rc != SD_OK) {
            break;
        }
        if (s->delay_ms <= 0) {
            rc = push_elem(em, st, &s->in, key_len);
        } else {
            sd__parked p = { .release_at = sd_time_add(em->clock_now, s->delay_ms),
                             .elem = { .ts = s->in.ts,
                                       .seq = em->seq++,
                                       .win = s->in.win,
                                       .pane = s->in.pane,
                                       .slab = s->in.slab,
                                       .off = (size_t)(s->in.elem.ptr - s->in.slab->data),
                                       .len = s->in.elem.len,
                                       .key_len = key_len } };
            rc = sd_vec_push(&st->parked, &p);
            if (rc == SD_OK) {
                s->in.slab->refs++;
            }
        }
    }
    if (rc == SD_OK && b->residuals.len > 0) {
        st->est_out = b->est;
        st->has_est = true;
    }
    if (rc == SD_OK && timers.len > 0) {
        sd_time wall = sd__em_wall(em);
        if (em->cfg.clock == SD_CLOCK_WALL) {
            em->clock_now = SD_MAX(em->clock_now, wall);
        }
        for (size_t i = 0; i < timers.len && rc == SD_OK; i++) {
            rc = apply_timer(em, st, SD_VEC_AT(&timers, staged_timer, i), wall);
        }
    }
    if (rc == SD_OK) {
        rc = sd__state_commit(em, st, b);
    }
    for (size_t o = 0; out_slabs != NULL && o < st->n_outputs; o++) {
        sd__slab_unref(out_slabs[o]);
    }
    for (size_t i = 0; res_slabs != NULL && i < b->residuals.len; i++) {
        sd__slab_unref(res_slabs[i]);
    }
    sd_free(out_slabs);
    sd_free(res_slabs);
    sd_vec_deinit(&elems);
    sd_vec_deinit(&timers);

    /* Release the bundle's inputs, key locks and the holds of the timers it fired. */
    unlock_keys(st, b);
    for (size_t i = 0; i < b->n_primary; i++) {
        sd__slab_unref(SD_VEC_AT(&b->elems, sd__elem, i)->slab);
    }
    for (size_t i = 0; i < b->fired.len; i++) {
        sd__timer *t = *SD_VEC_AT(&b->fired, sd__timer *, i);
        sd__tsbag_remove(&st->holds, t->hold);
        sd__timer_free(t);
    }
    unlink_bundle(em, st, b);
    bundle_free(b);
    if (rc != SD_OK) {
        return poison(em, rc == SD_ENOMEM ? rc : SD_EINTERNAL);
    }
    return SD_OK;
}

void sd_em_fail_bundle(sd_em *em, sd_bundle *b)
{
    if (em == NULL || b == NULL || b->magic != SD__BUNDLE_MAGIC) {
        return;
    }
    sd__stage *st = b->stage;
    unlock_keys(st, b);
    if (return_inputs(st, b, 0) != SD_OK) {
        em->poisoned = true;
    }
    /* Fired timers go back as they were; their holds never left the stage's bag. */
    for (size_t i = 0; i < b->fired.len; i++) {
        sd__timer *t = *SD_VEC_AT(&b->fired, sd__timer *, i);
        sd_buf *id = &em->scratch;
        sd_buf_reset(id);
        sd_status rc = sd__timer_identity(id, t->family, &t->win, sd_bytes_make(t->key, t->key_len),
                                          sd_bytes_make(t->tag, t->tag_len));
        if (rc == SD_OK && sd_map_get(&st->timers, sd_buf_bytes(id)) == NULL) {
            rc = sd__theap_reserve(sd__timer_heap(st, t), 1);
            if (rc == SD_OK) {
                rc = sd_map_put(&st->timers, sd_buf_bytes(id), t);
            }
            if (rc == SD_OK) {
                sd__theap_push(sd__timer_heap(st, t), t);
                continue;
            }
        }
        sd__tsbag_remove(&st->holds, t->hold);
        sd__timer_free(t);
        if (rc != SD_OK) {
            em->poisoned = true;
        }
    }
    unlink_bundle(em, st, b);
    bundle_free(b);
}

/* ========================================================================================== */
/* Observation, termination, stuck detection                                                  */
/* ========================================================================================== */

static size_t stage_pending(const sd__stage *st)
{
    return st->pending.len + st->sorted.len + st->gbk.n_values + st->timers.len +
           st->parked.len;
}

size_t sd__em_pending(const sd_em *em)
{
    size_t n = 0;
    for (size_t i = 0; i < em->stages.len; i++) {
        n += stage_pending(stage_at(em, i));
    }
    return n;
}

bool sd_em_done(const sd_em *em)
{
    return em != NULL && em->started && em->n_inflight == 0 && !teststream_pending(em) &&
           sd__em_pending(em) == 0;
}

size_t sd_em_in_progress(const sd_em *em)
{
    return em == NULL ? 0 : em->n_inflight;
}

sd_time sd_em_clock_now(const sd_em *em)
{
    return em->clock_now;
}

bool sd_em_next_wakeup(const sd_em *em, sd_time *wall_ms)
{
    sd_time t;
    if (em->cfg.clock != SD_CLOCK_WALL || !next_pt_event(em, &t)) {
        return false;
    }
    *wall_ms = t;
    return true;
}

size_t sd_em_n_stages(const sd_em *em)
{
    return em->stages.len;
}

void sd_em_stage_info(const sd_em *em, size_t i, sd_em_stage_stats *out)
{
    const sd__stage *st = stage_at(em, i);
    out->id = st->id;
    out->kind = st->kind;
    out->input_wm = st->in_wm;
    out->output_wm = st->out_wm;
    out->pending = stage_pending(st);
    out->in_progress = st->n_inflight;
    out->dropped_late = st->dropped_late;
    out->dropped_timers = st->dropped_timers;
    out->bundles = st->bundle_seq;
    out->hold = sd__tsbag_min(&((sd__stage *)st)->holds);
    out->et_timers = st->et_heap.len;
    out->pt_timers = st->pt_heap.len;
}

sd_status sd_em_pcollection_watermark(const sd_em *em, const char *id, sd_time *out)
{
    const sd__pcoll *pc = find_pcoll(em, id);
    if (pc == NULL) {
        return SD_ENOTFOUND;
    }
    *out = pc->wm;
    return SD_OK;
}

const char *sd_stage_kind_name(sd_stage_kind k)
{
    switch (k) {
    case SD_STAGE_SDK:
        return "sdk";
    case SD_STAGE_IMPULSE:
        return "impulse";
    case SD_STAGE_GBK:
        return "gbk";
    case SD_STAGE_FLATTEN:
        return "flatten";
    case SD_STAGE_TESTSTREAM:
        return "teststream";
    }
    return "?";
}

static sd_status dump_time(sd_buf *out, const char *label, sd_time t)
{
    if (t <= SD_TIME_MIN) {
        return sd_buf_printf(out, " %s=MIN", label);
    }
    if (t >= SD_TIME_MAX) {
        return sd_buf_printf(out, " %s=MAX", label);
    }
    return sd_buf_printf(out, " %s=%lld", label, (long long)t);
}

sd_status sd_em_check_stuck(const sd_em *em, sd_buf *dump)
{
    sd_time t;
    sd_status rc = SD_OK;
    if (em == NULL || !em->started || em->n_inflight > 0 || sd_em_done(em)) {
        return SD_OK;
    }
    if (teststream_pending(em)) {
        return SD_OK;
    }
    if (next_pt_event(em, &t) && t > em->clock_now) {
        return SD_OK; /* only waiting for time */
    }
    if (dump == NULL) {
        return SD_ESTATE;
    }
    rc = sd_buf_printf(
        dump, "engine stuck: nothing in progress, nothing ready, %zu pending; clock=%lld\n",
        sd__em_pending(em), (long long)em->clock_now);
    if (rc == SD_OK) {
        rc = sd_em_dump(em, dump);
    }
    return rc == SD_OK ? SD_ESTATE : rc;
}

sd_status sd_em_dump(const sd_em *em, sd_buf *dump)
{
    sd_status rc = SD_OK;
    if (em == NULL || !em->started) {
        return sd_buf_printf(dump, "  (the engine has not started)\n");
    }
    for (size_t k = 0; k < em->stages.len && rc == SD_OK; k++) {
        sd__stage *st = stage_at(em, em->topo[k]);
        rc = sd_buf_printf(dump, "  stage %s (%s):", st->id, sd_stage_kind_name(st->kind));
        if (rc == SD_OK) {
            rc = dump_time(dump, "upstream", upstream_wm(em, st));
        }
        if (rc == SD_OK) {
            rc = dump_time(dump, "in", st->in_wm);
        }
        if (rc == SD_OK) {
            rc = dump_time(dump, "out", st->out_wm);
        }
        if (rc == SD_OK) {
            rc = dump_time(dump, "hold", sd__tsbag_min(&((sd__stage *)st)->holds));
        }
        if (rc == SD_OK) {
            rc = sd_buf_printf(dump,
                               " pending=%zu gbk_values=%zu gbk_groups=%zu et_timers=%zu "
                               "pt_timers=%zu parked=%zu holds=%zu in_flight=%zu",
                               st->pending.len, st->gbk.n_values, st->gbk.n_groups, st->et_heap.len,
                               st->pt_heap.len, st->parked.len, st->holds.total, st->n_inflight);
        }
        for (size_t s = 0; s < st->n_sides && rc == SD_OK; s++) {
            const sd__pcoll *pc = pcoll_at(em, st->sides[s].pcoll);
            rc = sd_buf_printf(dump, " side[%s<-%s]", st->sides[s].local_id, pc->id);
            if (rc == SD_OK) {
                rc = dump_time(dump, "wm", pc->wm);
            }
        }
        if (rc == SD_OK) {
            rc = sd_buf_append_byte(dump, '\n');
        }
    }
    return rc;
}

/* ========================================================================================== */
/* Invariant checker                                                                          */
/* ========================================================================================== */

size_t sd__em_gbk_groups(const sd_em *em, const char *stage_id)
{
    const sd__stage *st = find_stage(em, stage_id);
    return st == NULL ? 0 : st->gbk.n_groups;
}

static bool heap_ok(const sd_vec *h)
{
    const sd__elem *a = h->items;
    for (size_t i = 1; i < h->len; i++) {
        if (elem_less(&a[i], &a[(i - 1) / 2])) {
            return false;
        }
    }
    return true;
}

static const char *check_theap(const sd__stage *st, const sd__theap *h, bool pt)
{
    for (size_t i = 0; i < h->len; i++) {
        const sd__timer *t = h->items[i].t;
        if (h->items[i].due != t->due) {
            return "timer heap slot due time";
        }
        if (t->hpos != i) {
            return "timer heap position";
        }
        if (st->families[t->family].processing_time != pt) {
            return "timer in the wrong domain's heap";
        }
        if (i > 0 && sd__timer_cmp(h->items[(i - 1) / 2].t, t) > 0) {
            return "timer heap order";
        }
    }
    return NULL;
}

/* User state: ordered lists sorted; with an expiration family, every cell whose window has not
 * expired at the input watermark has its expiration timer stored or in flight. */
static const char *check_state(const sd_em *em, const sd__stage *st)
{
    size_t it = 0;
    sd_bytes id;
    void *v;
    const sd__pcoll *in = st->n_inputs > 0 ? pcoll_at(em, st->inputs[0]) : NULL;
    while (sd_map_next(&st->state, &it, &id, &v)) {
        const sd__state_cell *c = v;
        const sd__olist *ol = &c->ol;
        if (ol->head > ol->len || ol->len > ol->cap) {
            return "ordered list bounds";
        }
        for (size_t i = ol->head + 1; i < ol->len; i++) {
            if (ol->items[i - 1].sort_key > ol->items[i].sort_key) {
                return "ordered list order";
            }
        }
        if (st->expiration_family == SIZE_MAX) {
            continue;
        }
        sd_time due = sd_time_add(sd__win_max_ts(&c->win), in->ws.allowed_lateness_ms);
        if (due < st->in_wm || st->in_wm >= SD_TIME_MAX) {
            continue;
        }
        sd_bytes key = sd__state_cell_key(id);
        sd_buf tid;
        uint8_t mem[256];
        sd_buf_init(&tid, 0);
        tid.data = mem; /* fixed storage: the checker must not allocate (OOM loop) */
        tid.cap = sizeof(mem);
        if (key.len + 64 > sizeof(mem) ||
            sd__timer_identity(&tid, st->expiration_family, &c->win, key, SD_BYTES_NULL) != SD_OK) {
            continue; /* too long to check without allocating */
        }
        bool found = sd_map_get(&st->timers, sd_buf_bytes(&tid)) != NULL;
        for (const sd_bundle *b = st->inflight; b != NULL && !found; b = b->next) {
            for (size_t f = 0; f < b->fired.len && !found; f++) {
                const sd__timer *t = *SD_VEC_AT(&b->fired, sd__timer *, f);
                found = t->family == st->expiration_family &&
                        sd_bytes_equal(sd_bytes_make(t->key, t->key_len), key) &&
                        t->win.global == c->win.global && t->win.start == c->win.start &&
                        t->win.end == c->win.end;
            }
        }
        if (!found) {
            return "state cell without its window-expiration timer";
        }
    }
    return NULL;
}

static const char *check_timer_heaps(const sd__stage *st)
{
    const char *bad = check_theap(st, &st->et_heap, false);
    if (bad == NULL) {
        bad = check_theap(st, &st->pt_heap, true);
    }
    if (bad == NULL && st->et_heap.len + st->pt_heap.len != st->timers.len) {
        bad = "timer heaps != stored timers";
    }
    size_t it = 0;
    void *v;
    while (bad == NULL && sd_map_next(&st->timers, &it, NULL, &v)) {
        const sd__timer *t = v;
        const sd__theap *h = st->families[t->family].processing_time ? &st->pt_heap : &st->et_heap;
        if (t->hpos >= h->len || h->items[t->hpos].t != t) {
            bad = "stored timer missing from its heap";
        }
    }
    return bad;
}

const char *sd__em_check(const sd_em *em, sd_time *prev)
{
    size_t inflight = 0;
    if (em == NULL || em->magic != SD__EM_MAGIC) {
        return "engine magic";
    }
    for (size_t i = 0; i < em->stages.len; i++) {
        const sd__stage *st = stage_at(em, i);
        size_t n = 0, fired = 0;
        for (const sd_bundle *b = st->inflight; b != NULL; b = b->next) {
            if (b->magic != SD__BUNDLE_MAGIC || b->stage != st) {
                return "in-flight bundle list";
            }
            if (b->n_primary > b->elems.len) {
                return "bundle primary count";
            }
            n++;
            fired += b->fired.len;
        }
        if (n != st->n_inflight) {
            return "stage in-flight count";
        }
        inflight += n;
        if (!heap_ok(&st->pending)) {
            return "pending heap order";
        }
        for (size_t p = 0; p < st->pending.len; p++) {
            const sd__elem *e = SD_VEC_AT(&st->pending, sd__elem, p);
            if (e->slab == NULL || e->slab->refs == 0 || e->off + e->len > e->slab->len) {
                return "pending element slab";
            }
        }
        if (!heap_ok(&st->sorted)) {
            return "time-sorted buffer heap order";
        }
        if (st->sorted.len > 0 && !st->time_sorted) {
            return "time-sorted buffer in a stage without time-sorted input";
        }
        /* Whatever the watermark has passed must have moved on to pending. */
        if (st->sorted.len > 0 &&
            sorted_releasable(em, st, SD_VEC_AT(&st->sorted, sd__elem, 0)->ts) &&
            !em->poisoned) {
            return "time-sorted element behind the watermark still buffered";
        }
        if (st->holds.total != st->timers.len + fired) {
            return "holds != stored + fired timers";
        }
        const char *th = check_timer_heaps(st);
        if (th == NULL) {
            th = check_state(em, st);
        }
        if (th != NULL) {
            return th;
        }
        if (st->kind != SD_STAGE_IMPULSE && st->kind != SD_STAGE_TESTSTREAM && em->started) {
            if (st->in_wm > upstream_wm(em, st)) {
                return "input watermark ahead of upstream";
            }
            if (!st->has_est && st->out_wm > st->in_wm) {
                return "output watermark ahead of input";
            }
            for (size_t o = 0; o < st->n_outputs; o++) {
                if (pcoll_at(em, st->outputs[o])->wm != st->out_wm) {
                    return "pcollection watermark != producer output";
                }
            }
        }
        if (prev != NULL) {
            if (st->in_wm < prev[2 * i] || st->out_wm < prev[2 * i + 1]) {
                return "watermark moved backwards";
            }
            prev[2 * i] = st->in_wm;
            prev[2 * i + 1] = st->out_wm;
        }
        size_t it = 0;
        void *v;
        while (sd_map_next(&st->key_locks, &it, NULL, &v)) {
            const sd_bundle *owner = v;
            bool found = false;
            for (const sd_bundle *b = st->inflight; b != NULL; b = b->next) {
                found = found || b == owner;
            }
            if (!found) {
                return "key lock held by a finished bundle";
            }
        }
        const char *g = NULL;
        if (st->kind == SD_STAGE_GBK) {
            size_t values = 0, groups = 0;
            it = 0;
            while (sd_map_next(&st->gbk.groups, &it, NULL, &v)) {
                const sd__group *gr = v;
                values += gr->fresh;
                groups++;
                if (gr->fresh > 0 && gr->min_ts < st->gbk.min_ts) {
                    g = "gbk min timestamp cache";
                }
            }
            it = 0;
            while (sd_map_next(&st->gbk.sessions, &it, NULL, &v)) {
                const sd_vec *list = v;
                for (size_t s = 0; s < list->len; s++) {
                    const sd__group *gr = *SD_VEC_AT(list, sd__group *, s);
                    values += gr->fresh;
                    groups++;
                    if (gr->fresh > 0 && gr->min_ts < st->gbk.min_ts) {
                        g = "gbk min timestamp cache";
                    }
                    if (s > 0) {
                        const sd__group *pg = *SD_VEC_AT(list, sd__group *, s - 1);
                        if (pg->win.end > gr->win.start) {
                            g = "gbk sessions overlap";
                        }
                    }
                }
            }
            if (values + st->gbk.n_ready != st->gbk.n_values || groups != st->gbk.n_groups) {
                g = "gbk value/group counts";
            }
        }
        if (g != NULL) {
            return g;
        }
    }
    if (inflight != em->n_inflight) {
        return "engine in-flight count";
    }
    return NULL;
}
