/*
 * Sundial: the element manager core — lifecycle, delivery, scheduling.
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
 *     per stage:  the watermark rule, in em_time.c (sd__wm_update), from the upstream
 *                 watermark and the stage's holds by source (sd__holds_read): see README.md
 *                 "The rule of time"
 *
 * Elements are kept compactly: a bundle's output for one PCollection becomes one refcounted
 * slab, and each pending element is a fixed-size record pointing into it (sd__elem); a GBK
 * copies just the value bytes into its group's buffer, so a slab dies as soon as the SDK
 * consumers are done with it.
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
 * sequence of engine calls, so a failing seed replays exactly (synthetic clock); a call that
 * ends waiting (the closed pause gate, a live source with nothing yet) draws nothing, so a
 * paused or live run does not depend on how often the engine was asked while it waited.
 *
 * Where the rest lives. This file holds the engine's lifecycle (create/destroy), slabs and
 * windows, delivery into the graph, the refresh pass (runner-side work and watermarks until
 * nothing moves) and the scheduler (sd_em_next_bundle, which plays the source driver's steps).
 * The time rule itself (clock, holds, watermarks) is em_time.c's; README.md has the table of
 * every file.
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

sd__slab *sd__slab_create(uint8_t *data, size_t len)
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

sd_status sd__win_intern_custom(sd_em *em, const sd_window *w, sd__win *out, sd_err *err)
{
    uintptr_t id = (uintptr_t)sd_map_get(&em->cwin_ids, w->custom_bytes);
    if (id == 0) {
        if (em->cwin_bytes.len >= SD__WIN_CUSTOM_MAX_IDS) {
            return sd_err_set(err, SD_ETOOBIG, "more than %llu distinct custom windows",
                              (unsigned long long)SD__WIN_CUSTOM_MAX_IDS);
        }
        uint8_t *copy = sd_malloc(w->custom_bytes.len + 1);
        sd_bytes b = sd_bytes_make(copy, w->custom_bytes.len);
        if (copy == NULL || sd_vec_push(&em->cwin_bytes, &b) != SD_OK) {
            sd_free(copy);
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        if (w->custom_bytes.len > 0) {
            memcpy(copy, w->custom_bytes.ptr, w->custom_bytes.len);
        }
        id = (uintptr_t)em->cwin_bytes.len;
        if (sd_map_put(&em->cwin_ids, b, (void *)id) != SD_OK) {
            em->cwin_bytes.len--;
            sd_free(copy);
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    *out = (sd__win){ .start = (sd_time)((uint64_t)INT64_MIN + id), .end = w->end, .custom = true };
    return SD_OK;
}

sd_window sd__win_to(const sd_em *em, const sd__win *w)
{
    if (sd__win_is_custom(w)) {
        size_t id = (size_t)((uint64_t)w->start - (uint64_t)INT64_MIN);
        sd_window c = sd_window_interval(SD_TIME_MIN, w->end);
        c.custom = true;
        if (id >= 1 && id <= em->cwin_bytes.len) {
            c.custom_bytes = *SD_VEC_AT(&em->cwin_bytes, sd_bytes, id - 1);
        }
        return c;
    }
    return w->global ? sd_window_global() : sd_window_interval(w->start, w->end);
}

sd_status sd__win_put(sd_buf *out, const sd__win *w)
{
    sd_status st = sd_buf_append_byte(out, (uint8_t)((w->global ? 1 : 0) | (w->custom ? 2 : 0)));
    if (st == SD_OK) {
        st = sd_buf_put_be64(out, (uint64_t)w->start);
    }
    if (st == SD_OK) {
        st = sd_buf_put_be64(out, (uint64_t)w->end);
    }
    return st;
}

sd_status
sd__win_decode(sd_em *em, const sd_coder *window_coder, sd_bytes bytes, sd__win *out, sd_err *err)
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
    return sd__win_intern(em, &w, out, err);
}

sd_status sd__em_poison(sd_em *em, sd_status st)
{
    if (st == SD_ENOMEM || st == SD_EINTERNAL) {
        em->poisoned = true;
    }
    return st;
}

/* ========================================================================================== */
/* Create / destroy                                                                           */
/* ========================================================================================== */

sd_status sd_em_create(const sd_em_config *cfg, sd_em **out)
{
    sd_em *em = sd_calloc(1, sizeof(*em));
    *out = NULL;
    if (em == NULL) {
        return SD_ENOMEM;
    }
    em->magic = SD__EM_MAGIC;
    em->spill_fd = -1;
    if (cfg != NULL) {
        em->cfg = *cfg;
    }
    em->rng = em->cfg.schedule_seed;
    sd_vec_init(&em->pcolls, sizeof(sd__pcoll *));
    sd_vec_init(&em->stages, sizeof(sd__stage *));
    sd_map_init(&em->pcoll_by_id, NULL);
    sd_map_init(&em->stage_by_id, NULL);
    sd_map_init(&em->cwin_ids, NULL);
    sd_vec_init(&em->cwin_bytes, sizeof(sd_bytes));
    sd_buf_init(&em->scratch, 0);
    sd_wv_header_init(&em->hdr);
    sd_timer_init(&em->timer);
    sd_timer_init(&em->timer_enc);
    sd_vec_init(&em->timer_cands, sizeof(sd__timer *));
    sd_vec_init(&em->timer_skipped, sizeof(sd__timer *));
    em->teststream = SIZE_MAX;
    em->idle_wait_until = SD_TIME_MIN;
    em->nap_until = SD_TIME_MIN;
    em->nap_end = SD_TIME_MIN;
    em->clock_now = sd__em_wall(em);
    em->clock_start = em->clock_now;
    if (sd__trace_init(&em->trace, em->cfg.trace_cap) != SD_OK) {
        sd_em_destroy(em);
        return SD_ENOMEM;
    }
    *out = em;
    return SD_OK;
}

void sd__pcoll_destroy(sd__pcoll *pc)
{
    if (pc == NULL) {
        return;
    }
    sd_free(pc->id);
    sd__trig_destroy(pc->trigger);
    sd_coder_destroy(pc->wv_coder);
    sd_vec_deinit(&pc->consumers);
    sd_vec_deinit(&pc->side_consumers);
    sd_free(pc);
}

void sd__stage_destroy(sd__stage *st)
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
            sd__timer_destroy(&st->tpool, *SD_VEC_AT(&b->fired, sd__timer *, i));
        }
        sd__bundle_destroy(b);
    }
    sd__bundle_destroy(st->spare);
    for (size_t i = 0; i < st->pending.len; i++) {
        sd__slab_unref(SD_VEC_AT(&st->pending, sd__elem, i)->slab);
    }
    sd_vec_deinit(&st->pending);
    sd__pending_spill_deinit(st);
    for (size_t i = 0; i < st->sorted.len; i++) {
        sd__slab_unref(SD_VEC_AT(&st->sorted, sd__elem, i)->slab);
    }
    sd_vec_deinit(&st->sorted);
    for (size_t i = 0; i < st->parked.len; i++) {
        sd__slab_unref(SD_VEC_AT(&st->parked, sd__parked, i)->elem.slab);
    }
    sd_vec_deinit(&st->parked);
    sd__residual_holds_deinit(st);
    sd__klocks_deinit(&st->key_locks);
    /* The heaps first: they free the dropped timers they still hold and read the state of
     * the live ones, which the table owns and frees after. */
    sd__theap_deinit(&st->et_heap);
    sd__theap_deinit(&st->pt_heap);
    sd__timers_deinit(&st->timers);
    sd__tpool_deinit(&st->tpool); /* last: the heaps and the table give their timers back */
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
    sd__em_pause_destroy(em);
    if (em->source.destroy != NULL) {
        em->source.destroy(em->source_ctx);
    }
    for (size_t i = 0; i < em->stages.len; i++) {
        sd__stage_destroy(sd__em_stage_at(em, i));
    }
    for (size_t i = 0; i < em->pcolls.len; i++) {
        sd__pcoll_destroy(sd__em_pcoll_at(em, i));
    }
    sd_vec_deinit(&em->stages);
    sd_vec_deinit(&em->pcolls);
    sd_map_deinit(&em->pcoll_by_id);
    sd_map_deinit(&em->stage_by_id);
    sd_map_deinit(&em->cwin_ids);
    for (size_t i = 0; i < em->cwin_bytes.len; i++) {
        sd_free((void *)SD_VEC_AT(&em->cwin_bytes, sd_bytes, i)->ptr);
    }
    sd_vec_deinit(&em->cwin_bytes);
    sd_buf_deinit(&em->scratch);
    sd_wv_header_deinit(&em->hdr);
    sd_timer_deinit(&em->timer);
    sd_timer_deinit(&em->timer_enc);
    sd_vec_deinit(&em->timer_cands);
    sd_vec_deinit(&em->timer_skipped);
    sd_free(em->topo);
    sd_free(em->perm);
    sd__spill_close(em);
    sd__trace_deinit(&em->trace);
    em->magic = 0;
    sd_free(em);
}

/* ========================================================================================== */
/* Delivery                                                                                   */
/* ========================================================================================== */

static int64_t sorted_lateness(const sd_em *em, const sd__stage *st)
{
    return sd__em_pcoll_at(em, st->inputs[0])->ws.allowed_lateness_ms;
}

/* A time-sorted element may go to the stage once the input watermark is past ts + lateness. */
bool sd__em_sorted_releasable(const sd_em *em, const sd__stage *st, sd_time ts)
{
    return sd__sorted_is_releasable(ts, sorted_lateness(em, st), st->in_wm);
}

sd_status sd__em_push_elem(sd_em *em,
                           sd__stage *st,
                           const sd__incoming *in,
                           size_t key_len,
                           bool spill,
                           sd_err *err)
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
        if (sd__sorted_is_late(in->ts, sorted_lateness(em, st), st->in_wm)) {
            sd__em_note_late(em, st, sd__em_pcoll_at(em, st->inputs[0]), in, SD_LATE_SORTED_EXPIRED,
                             false);
            return SD_OK;
        }
        into = &st->sorted;
    } else if (spill && sd__em_spilling(em)) {
        /* Over the memory budget: the element waits in the spill file (em_spill.c). */
        return sd__pending_spill(em, st, &e, in->elem, err);
    }
    sd_status rc = sd__elem_heap_push(into, &e);
    if (rc == SD_OK) {
        in->slab->refs++;
    }
    return rc;
}

const char *sd_late_reason_name(sd_late_reason r)
{
    switch (r) {
    case SD_LATE_WINDOW_EXPIRED:
        return "window expired";
    case SD_LATE_WINDOW_CLOSED:
        return "window closed";
    case SD_LATE_BEHIND_WATERMARK:
        return "behind the watermark";
    case SD_LATE_SORTED_EXPIRED:
        return "time-sorted input expired";
    }
    return "late";
}

void sd__em_note_late(sd_em *em,
                      sd__stage *st,
                      const sd__pcoll *pc,
                      const sd__incoming *in,
                      sd_late_reason why,
                      bool routed)
{
    st->dropped_late++;
    sd__trace_late(em, st, pc, in, why, routed);
    if (em->cfg.on_late == NULL) {
        return;
    }
    sd_em_late l = { .stage_id = st->id,
                     .pcollection = pc->id,
                     .element = in->elem,
                     .timestamp = in->ts,
                     .window = sd__win_to(em, &in->win),
                     .watermark = pc->wm,
                     .reason = why,
                     .routed = routed };
    em->cfg.on_late(em->cfg.late_ctx, &l);
}

/*
 * A stateful stage (user state or timers) takes no element whose window's clean-up time
 * (max timestamp + allowed lateness) is behind the watermark of the PCollection it arrives on:
 * Java's stateful ParDo runner drops such an element (its state may already be collected, so
 * the DoFn would see the dead window with fresh state), and a GroupByKey here applies the same
 * rule (em_gbk.c). A stateless stage still gets it, as in Beam.
 */

sd_status sd__em_deliver(sd_em *em, sd__pcoll *pc, const sd__incoming *in, sd_err *err)
{
    sd_bytes key = SD_BYTES_NULL, value = in->elem;
    sd_status rc;
    assert(in->slab != NULL);
    sd__em_progressed(em);
    uint64_t len = (uint64_t)in->elem.len;
    pc->min_bytes = pc->n_elements == 0 ? len : SD_MIN(pc->min_bytes, len);
    pc->max_bytes = SD_MAX(pc->max_bytes, len);
    pc->n_elements++;
    pc->n_bytes += len;
    if (em->tap != NULL && sd__em_tap_note(em, pc, in) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (pc->merge_gbk != SIZE_MAX) {
        /* A window merge the SDK made for a GBK (em_merge.c): checked when its bundle was. */
        return sd__gbk_merge_result(em, pc, in->elem, true, err);
    }
    if (pc->needs_key) {
        rc = sd_kv_split(pc->elem_coder, in->elem, &key, &value, err);
        if (rc != SD_OK) {
            (void)sd_err_prefix(err, "pcollection \"%s\": ", pc->id);
            return rc;
        }
    }
    for (size_t c = 0; c < pc->consumers.len; c++) {
        sd__stage *st = sd__em_stage_at(em, *SD_VEC_AT(&pc->consumers, size_t, c));
        if (st->drop_behind_wm && sd__is_behind(in->ts, pc->wm)) {
            /* The per-element late policy: behind the watermark on arrival, whatever its
             * window (a GBK routes it to its dead letters, if any). */
            rc = SD_OK;
            if (st->kind == SD_STAGE_GBK) {
                rc = sd__gbk_late(em, st, in, SD_LATE_BEHIND_WATERMARK, err);
            } else {
                sd__em_note_late(em, st, pc, in, SD_LATE_BEHIND_WATERMARK, false);
            }
            if (rc != SD_OK) {
                return rc;
            }
            continue;
        }
        if (st->kind == SD_STAGE_SDK && st->stateful && sd__is_late(pc, &in->win)) {
            /* Its window's state is gone (or going): the DoFn would see it with fresh
             * state. Dropped and counted, as a GroupByKey drops it. */
            sd__em_note_late(em, st, pc, in, SD_LATE_WINDOW_EXPIRED, false);
            continue;
        }
        switch (st->kind) {
        case SD_STAGE_SDK:
            rc = sd__em_push_elem(em, st, in, key.len, true, err);
            if (rc == SD_OK) {
                rc = sd__expiry_note(em, st, &in->win, key);
            }
            break;
        case SD_STAGE_GBK:
            rc = sd__gbk_add(em, st, in, key, value, err);
            break;
        case SD_STAGE_FLATTEN:
            rc = sd__em_deliver(em, sd__em_pcoll_at(em, st->outputs[0]), in, err);
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
        sd__stage *reader = sd__em_stage_at(em, ref->stage);
        rc = sd__side_add(em, &reader->sides[ref->side], in, reader->n_inflight > 0, err);
        if (rc != SD_OK) {
            return rc;
        }
    }
    return SD_OK;
}

/* ========================================================================================== */
/* Watermarks                                                                                 */
/* ========================================================================================== */

/* Move the time-sorted elements the input watermark has passed to pending, oldest first. */
static sd_status release_sorted(sd_em *em, sd__stage *st, bool *changed)
{
    while (st->sorted.len > 0 &&
           sd__em_sorted_releasable(em, st, SD_VEC_AT(&st->sorted, sd__elem, 0)->ts)) {
        sd__elem e;
        sd__elem_heap_take(&st->sorted, 0, &e);
        sd_status rc = sd__elem_heap_push(&st->pending, &e);
        if (rc != SD_OK) {
            if (sd__elem_heap_push(&st->sorted, &e) != SD_OK) {
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
        if (rc == SD_OK && (p->release_at <= em->clock_now || em->draining)) {
            rc = sd__elem_heap_push(&st->pending, &p->elem);
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

/* Whether a GroupByKey holds a closing pane until its input epoch ends (em_gbk.c). */
static bool panes_held(const sd_em *em)
{
    for (size_t i = 0; i < em->stages.len; i++) {
        const sd__stage *st = sd__em_stage_at(em, i);
        if (st->kind == SD_STAGE_GBK && st->gbk.n_holding > 0) {
            return true;
        }
    }
    return false;
}

/* Run runner-side work and recompute watermarks until nothing moves. */
static sd_status refresh(sd_em *em, sd_err *err)
{
    bool changed;
    do {
        changed = false;
        for (size_t k = 0; k < em->stages.len; k++) {
            sd__stage *st = sd__em_stage_at(em, em->topo[k]);
            sd_status rc = SD_OK;
            if (st->parked.len > 0) {
                rc = release_parked(em, st, &changed);
            }
            if (rc == SD_OK && st->kind == SD_STAGE_GBK) {
                rc = sd__gbk_fire(em, st, sd__em_upstream_wm(em, st), &changed, err);
            }
            if (rc != SD_OK) {
                return sd__em_poison(em, rc);
            }
            bool moved = false;
            sd__wm_update(em, st, &moved);
            if (moved) {
                sd__em_progressed(em); /* a watermark moved (live-lock detection) */
                changed = true;
            }
            if (st->sorted.len > 0) {
                rc = release_sorted(em, st, &changed);
                if (rc != SD_OK) {
                    return sd__em_poison(em, rc);
                }
            }
        }
    } while (changed);
    return SD_OK;
}

/* ========================================================================================== */
/* Scheduling                                                                                 */
/* ========================================================================================== */

/*
 * Whether moving the job clock can change what refresh computes: only parked residuals (their
 * release time) and GBK groups (processing-time triggers) read the clock there; watermarks do
 * not. When neither exists, the fixpoint refresh reached before a synthetic jump still holds
 * after it, and the scheduler skips the pass (on the synthetic clock every processing-time
 * timer firing is a jump; the pass was a tenth of bench_pt_timers' engine instructions).
 */
static bool clock_moves_refresh(const sd_em *em)
{
    for (size_t i = 0; i < em->stages.len; i++) {
        const sd__stage *st = sd__em_stage_at(em, i);
        if (st->parked.len > 0 ||
            (st->kind == SD_STAGE_GBK && (st->gbk.n_groups > 0 || st->gbk.ready.len > 0))) {
            return true;
        }
    }
    return false;
}

void sd_em_drain(sd_em *em)
{
    if (em == NULL || em->draining) {
        return;
    }
    em->draining = true;
    sd__em_progressed(em);
    /* What the source driver has not played yet is input not read yet: it drops it. */
    if (em->source.drain != NULL) {
        em->source.drain(em->source_ctx);
    }
}

bool sd_em_draining(const sd_em *em)
{
    return em != NULL && em->draining;
}

/*
 * One pass over the SDK stages in this pass's order (round-robin from em->rr, shuffled when
 * seeded): the first bundle one of them makes goes to *out (NULL: none). spread_only passes
 * over the stages that do not spread their input, in round-robin order (it draws nothing
 * from the seeded generator, so schedules without spread stages stay as they were).
 */
/*
 * Whether st holds back what it has pending until the wall clock reaches its wall_wait_until
 * (set by em_complete.c for a source waiting for real time); the wait ends early when anything
 * else becomes pending there or a timer is ready, or the job drains. A waiting stage keeps the
 * engine from being quiescent: no TestStream event, no clock jump meanwhile (its element comes
 * first in any real run); sd_em_next_wakeup tells the executor when to ask again.
 */
static bool stage_waits_for_wall(sd_em *em, sd__stage *st)
{
    if (st->wall_wait_until == SD_TIME_MIN) {
        return false;
    }
    if (em->draining || sd__pending_n(st) != st->wall_wait_n || sd__timers_ready(em, st) ||
        sd__em_wall(em) >= st->wall_wait_until) {
        st->wall_wait_until = SD_TIME_MIN;
        return false;
    }
    em->wall_wait_min = SD_MIN(em->wall_wait_min, st->wall_wait_until);
    return true;
}

static sd_status take_bundle(sd_em *em, bool spread_only, sd_bundle **out, sd_err *err)
{
    sd_status rc;
    size_t n = em->stages.len;
    *out = NULL;
    em->wall_wait_min = SD_TIME_MAX;
    for (size_t k = 0, idx = em->rr < n ? em->rr : 0; k < n; k++) {
        em->perm[k] = idx; /* (rr + k) % n, rr < n */
        idx = idx + 1 == n ? 0 : idx + 1;
    }
    if (em->cfg.schedule_seed != 0 && !spread_only) {
        for (size_t k = n; k > 1; k--) {
            size_t j = sd__em_rng_below(em, k), t = em->perm[k - 1];
            em->perm[k - 1] = em->perm[j];
            em->perm[j] = t;
        }
    }
    for (size_t k = 0; k < n; k++) {
        size_t idx = em->perm[k];
        sd__stage *st = sd__em_stage_at(em, idx);
        sd_bundle *b = NULL;
        if (st->kind != SD_STAGE_SDK || (spread_only && !st->spread) ||
            (sd__pending_n(st) == 0 && !sd__timers_ready(em, st))) {
            continue; /* as sd__em_make_bundle would find, without the call */
        }
        if (stage_waits_for_wall(em, st)) {
            continue;
        }
        rc = sd__em_make_bundle(em, st, &b, err);
        if (rc != SD_OK) {
            return sd__em_poison(em, rc);
        }
        if (b != NULL) {
            em->rr = (idx + 1) % n;
            rc = sd__em_decide_bundle(em, b, err);
            if (rc != SD_OK) {
                sd_em_fail_bundle(em, b);
                return rc;
            }
            *out = b;
            return SD_OK;
        }
    }
    return SD_OK;
}

sd_status sd_em_next_spread_bundle(sd_em *em, sd_bundle **out, sd_err *err)
{
    *out = NULL;
    if (em == NULL || !em->started) {
        return sd_err_set(err, SD_ESTATE, "next_spread_bundle: engine not started");
    }
    if (em->poisoned) {
        return sd_err_set(err, SD_ESTATE,
                          "next_spread_bundle: engine failed earlier (out of memory)");
    }
    return take_bundle(em, true, out, err);
}

/*
 * Napping. On the synthetic clock a resume delay is jumped over at once, so a source that
 * waits for real time (Python's PeriodicImpulse defers, unchanged, until the wall clock
 * reaches its next tick) ran thousands of bundles a tick, each an idle round trip through the
 * SDK. When the job is otherwise quiet — nothing ready, nothing in flight, and the next event
 * the clock would jump to is a parked residual, not a timer — and the last bundles were idle
 * ones asking, each, to be resumed at the same wall-clock time (note_nap, em_complete.c),
 * the engine does not jump yet: it hands out nothing until that time comes, or for at most
 * SD_EM_NAP_MAX_MS (sd_em_next_wakeup tells the executor when), then jumps as before. The
 * job's results and its clock are those of the spinning run; only the empty rounds are gone.
 * A delay that moves on each round (a fixed delay, deferred forever) ends the napping after
 * one nap: that spins into the live-lock bound as before. The cap bounds what a source that
 * does not wait for real time (one that polls a few times a day, on the synthetic clock) can
 * lose: one nap of at most a second per streak of idle bundles.
 */
static bool nap(sd_em *em, sd_time t)
{
    if (!em->nap_ok || em->idle_bundles == 0 || em->draining) {
        return false;
    }
    for (size_t i = 0; i < em->stages.len; i++) {
        const sd__stage *st = sd__em_stage_at(em, i);
        if ((st->pt_heap.live > 0 && st->pt_heap.items[0].due <= t) ||
            (st->kind == SD_STAGE_GBK && st->gbk.n_groups > 0 && st->gbk.min_pt <= t)) {
            return false; /* a timer or a trigger comes due first: jump to it */
        }
    }
    sd_time wall = sd__em_wall(em);
    if (em->nap_end == SD_TIME_MIN) { /* the first nap since the last idle bundle */
        if (wall >= em->nap_wake) {
            return false;
        }
        em->nap_end = SD_MIN(em->nap_wake, sd_time_add(wall, SD_EM_NAP_MAX_MS));
    }
    if (wall >= em->nap_end) {
        return false;
    }
    em->nap_until = em->nap_end;
    return true;
}

sd_status sd_em_next_bundle(sd_em *em, sd_bundle **out, sd_err *err)
{
    sd_status rc;
    *out = NULL;
    if (em != NULL) {
        em->nap_until = SD_TIME_MIN;
        em->waiting = false;
        em->source_waiting = false;
    }
    if (em == NULL || !em->started) {
        return sd_err_set(err, SD_ESTATE, "next_bundle: engine not started");
    }
    if (em->poisoned) {
        return sd_err_set(err, SD_ESTATE, "next_bundle: engine failed earlier (out of memory)");
    }
    bool settled = false; /* the last refresh's fixpoint holds: only the clock moved since */
    for (;;) {
        if (em->cfg.clock == SD_CLOCK_WALL) {
            (void)sd__clock_advance(em, sd__em_wall(em), SD_CLOCK_CAUSE_WALL);
        }
        if (!settled) {
            rc = refresh(em, err);
            if (rc != SD_OK) {
                return rc;
            }
        }
        settled = false;
        /* A pass that ends waiting for someone outside the engine (the closed pause gate, a
         * live source with nothing yet) leaves the seeded generator as it found it: the
         * caller asks again after the step (or the event), that pass draws the same stage
         * order, and the schedule is the one of the run that never waited — whatever the
         * number of calls made while it rested. */
        uint64_t rng_before = em->rng;
        rc = take_bundle(em, false, out, err);
        if (rc != SD_OK || *out != NULL) {
            return rc;
        }
        if (em->n_inflight > 0) {
            return SD_OK;
        }
        if (em->wall_wait_min != SD_TIME_MAX) {
            em->nap_until = em->wall_wait_min; /* a stage waits for real time */
            return SD_OK;
        }
        if (panes_held(em)) {
            /* Quiescent: nothing more arrives in this input epoch, so the closing panes held
             * for a tail go out now, as their windows' last. */
            em->epoch++;
            continue;
        }
        /* Quiescent: due processing-time work was handled above; now TestStream, then time. */
        if (sd__em_source_pending(em)) {
            if (!sd__em_source_ready(em) || !sd__em_gate(em, true, sd__em_source_target(em))) {
                em->rng = rng_before;
                return SD_OK; /* waiting: for the live source, or at the closed gate */
            }
            rc = sd__em_source_step(em, err);
            if (rc != SD_OK) {
                return sd__em_poison(em, rc);
            }
            rc = sd__em_decide_clock(em, SD_DECISION_TESTSTREAM, err);
            if (rc != SD_OK) {
                return rc;
            }
            continue;
        }
        sd_time t;
        if (em->cfg.clock == SD_CLOCK_SYNTHETIC && sd__em_next_pt_event(em, &t) &&
            t > em->clock_now) {
            if (!sd__em_gate(em, false, t)) {
                em->rng = rng_before;
                return SD_OK; /* resting at the closed gate (em_pause.c) */
            }
            if (nap(em, t)) {
                return SD_OK;
            }
            (void)sd__clock_advance(em, t, SD_CLOCK_CAUSE_TIMER);
            rc = sd__em_decide_clock(em, SD_DECISION_CLOCK, err);
            if (rc != SD_OK) {
                return rc;
            }
            settled = !clock_moves_refresh(em);
            continue;
        }
        return SD_OK;
    }
}
