/*
 * Sundial: observation, stuck detection, dumps and the invariant checker.
 *
 * Observation: sd_em_done, sd_em_in_progress, the job clock and next wakeup, per-stage
 * statistics (sd_em_stage_info) and PCollection watermarks, for the executor and its web view.
 *
 * Stuck detection: when no bundle can be made and nothing is in flight but work remains (a
 * side input never ready, a watermark held forever), sd_em_check_stuck returns SD_ESTATE and
 * sd_em_dump writes every stage's watermarks, pending counts and holds, so the failure names
 * the stage that waits. Live-lock detection is its running twin: bundles keep coming but none
 * moves anything (em.h lists what counts as progress; em_complete.c judges each bundle, and
 * delivery, watermark moves and TestStream steps in em.c reset the count);
 * sd_em_check_livelock reports it with the same dump once the configured bound is reached.
 *
 * The invariant checker sd__em_check (em_int.h) is what the unit tests run after every
 * mutation: heap orders, timer index positions, hold and pending accounting, key locks, state
 * bounds and watermark monotonicity. It returns a static string naming the first broken
 * invariant, or NULL. It only reads; it is cheap enough for tests, not for production paths.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* Observation, termination, stuck detection                                                  */
/* ========================================================================================== */

static size_t stage_pending(const sd__stage *st)
{
    return sd__pending_n(st) + st->sorted.len + st->gbk.n_values + st->timers.len + st->parked.len;
}

size_t sd__em_pending(const sd_em *em)
{
    size_t n = 0;
    for (size_t i = 0; i < em->stages.len; i++) {
        n += stage_pending(sd__em_stage_at(em, i));
    }
    return n;
}

bool sd_em_done(const sd_em *em)
{
    return em != NULL && em->started && em->n_inflight == 0 && !sd__em_source_pending(em) &&
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

bool sd_em_next_pt_due(const sd_em *em, sd_time *clock_ms)
{
    return em != NULL && sd__em_next_pt_event(em, clock_ms);
}

bool sd_em_next_wakeup(const sd_em *em, sd_time *wall_ms)
{
    if (em->cfg.clock == SD_CLOCK_SYNTHETIC) {
        *wall_ms = em->nap_until;
        return em->nap_until != SD_TIME_MIN;
    }
    return sd_em_next_pt_due(em, wall_ms);
}

size_t sd_em_n_stages(const sd_em *em)
{
    return em->stages.len;
}

void sd_em_stage_info(const sd_em *em, size_t i, sd_em_stage_stats *out)
{
    const sd__stage *st = sd__em_stage_at(em, i);
    out->id = st->id;
    out->kind = st->kind;
    out->input_wm = st->in_wm;
    out->output_wm = st->out_wm;
    out->pending = stage_pending(st);
    out->in_progress = st->n_inflight;
    out->dropped_late = st->dropped_late;
    out->resent_pieces = st->resent_pieces;
    out->bundles = st->bundle_seq;
    out->hold = sd__tsbag_min(&((sd__stage *)st)->holds);
    out->et_timers = st->et_heap.live;
    out->pt_timers = st->pt_heap.live;
}

sd_status sd_em_pcollection_watermark(const sd_em *em, const char *id, sd_time *out)
{
    const sd__pcoll *pc = sd__em_find_pcoll(em, id);
    if (pc == NULL) {
        return SD_ENOTFOUND;
    }
    *out = pc->wm;
    return SD_OK;
}

size_t sd_em_n_pcollections(const sd_em *em)
{
    return em->pcolls.len;
}

void sd_em_pcollection_info(const sd_em *em, size_t i, sd_em_pcoll_stats *out)
{
    const sd__pcoll *pc = sd__em_pcoll_at(em, i);
    *out = (sd_em_pcoll_stats){ .id = pc->id,
                                .elements = pc->n_elements,
                                .bytes = pc->n_bytes,
                                .min_bytes = pc->n_elements > 0 ? pc->min_bytes : 0,
                                .max_bytes = pc->max_bytes,
                                .watermark = pc->wm };
}

const char *sd_em_stage_kind_name(sd_stage_kind k)
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
    if (sd__em_source_pending(em)) {
        return SD_OK;
    }
    if (sd__em_next_pt_event(em, &t) && t > em->clock_now) {
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

uint64_t sd_em_idle_bundles(const sd_em *em)
{
    return em == NULL ? 0 : em->idle_bundles;
}

sd_status sd_em_check_livelock(const sd_em *em, sd_buf *dump)
{
    if (em == NULL || !em->started || em->cfg.livelock_rounds == 0 ||
        em->idle_after_wait < em->cfg.livelock_rounds) {
        return SD_OK;
    }
    if (dump == NULL) {
        return SD_ESTATE;
    }
    sd_status rc = sd_buf_printf(
        dump,
        "engine live-locked: %llu bundles in a row completed without progress (bound %llu), the "
        "last in stage %s; %zu pending, %zu in progress; clock=%lld\n",
        (unsigned long long)em->idle_bundles, (unsigned long long)em->cfg.livelock_rounds,
        em->idle_stage != NULL ? em->idle_stage : "?", sd__em_pending(em), em->n_inflight,
        (long long)em->clock_now);
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
        sd__stage *st = sd__em_stage_at(em, em->topo[k]);
        rc = sd_buf_printf(dump, "  stage %s (%s):", st->id, sd_em_stage_kind_name(st->kind));
        if (rc == SD_OK) {
            rc = dump_time(dump, "upstream", sd__em_upstream_wm(em, st));
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
                               "pt_timers=%zu parked=%zu holds=%zu in_flight=%zu bundles=%llu",
                               sd__pending_n(st), st->gbk.n_values, st->gbk.n_groups,
                               st->et_heap.live, st->pt_heap.live, st->parked.len, st->holds.total,
                               st->n_inflight, (unsigned long long)st->bundle_seq);
        }
        if (rc == SD_OK && st->gbk.merge_requests != SIZE_MAX) {
            /* Keys waiting for the SDK's window merge (em_merge.c). */
            rc = sd_buf_printf(dump, " unmerged_keys=%zu merging_keys=%zu",
                               sd_map_len(&st->gbk.unmerged), sd_map_len(&st->gbk.merging));
        }
        for (size_t s = 0; s < st->n_sides && rc == SD_OK; s++) {
            const sd__pcoll *pc = sd__em_pcoll_at(em, st->sides[s].pcoll);
            rc = sd_buf_printf(dump, " side[%s<-%s]", st->sides[s].local_id, pc->id);
            if (rc == SD_OK) {
                rc = dump_time(dump, "wm", pc->wm);
            }
            if (rc == SD_OK && st->sides[s].triggered) {
                rc = sd_buf_printf(dump, " triggered staged=%zu", st->sides[s].staged.len);
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
    const sd__stage *st = sd__em_find_stage(em, stage_id);
    return st == NULL ? 0 : st->gbk.n_groups;
}

/* A hold bag: its counts add up, and the cached minimum, when known, is its least timestamp. */
static bool holds_ok(const sd__tsbag *b)
{
    size_t total = 0, distinct = 0;
    bool any = false;
    sd_time m = SD_TIME_MAX;
    for (size_t i = 0; i < b->cap; i++) {
        const sd__tscount *e = &b->slots[i];
        if (e->count == 0) {
            continue;
        }
        total += e->count;
        distinct++;
        /* Not SD_MIN with SD_TIME_MAX: an SDK may send holds outside the sd_time range. */
        m = any ? SD_MIN(m, e->ts) : e->ts;
        any = true;
    }
    return total == b->total && distinct == b->distinct && (!b->min_known || (any && m == b->min));
}

static const char *check_theap(const sd__stage *st, const sd__theap *h, bool pt)
{
    size_t live = 0;
    for (size_t i = 0; i < h->len; i++) {
        const sd__timer *t = h->items[i].t;
        sd_bytes key = sd_bytes_make(t->key, t->key_len), tag = sd__timer_tag(t);
        const sd__timer *stored = sd__timers_find(&st->timers, t->family, &t->win, key, tag);
        if (h->items[i].due != t->due) {
            return "timer heap slot due time";
        }
        if (st->families[t->family].processing_time != pt) {
            return "timer in the wrong domain's heap";
        }
        if (t->heap_state == SD__TIMER_LIVE) {
            live++;
            if (stored != t) {
                return "live timer heap entry not stored";
            }
        } else if (t->heap_state != SD__TIMER_DROPPED || stored == t) {
            return "timer heap entry neither live nor dropped";
        }
        if (i > 0 && sd__timer_cmp(h->items[(i - 1) / SD__THEAP_ARITY].t, t) > 0) {
            return "timer heap order";
        }
    }
    if (live != h->live) {
        return "timer heap live count";
    }
    if (h->len > 0 && h->items[0].t->heap_state != SD__TIMER_LIVE) {
        return "dropped timer at the top of its heap";
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
    const sd__pcoll *in = st->n_inputs > 0 ? sd__em_pcoll_at(em, st->inputs[0]) : NULL;
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
        if (sd__wm_passed(sd__win_expiry(&c->win, in->ws.allowed_lateness_ms), st->in_wm)) {
            continue;
        }
        sd_bytes key = sd__state_cell_key(id);
        bool found = sd__timers_find(&st->timers, st->expiration_family, &c->win, key,
                                     SD_BYTES_NULL) != NULL;
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

/* The timer holds, and the residual holds (one per residual the map knows). */
static const char *check_holds(const sd__stage *st)
{
    if (!holds_ok(&st->holds)) {
        return "hold counts or cached minimum";
    }
    if (!holds_ok(&st->res_holds) || st->res_holds.total != sd_map_len(&st->res_by_seq)) {
        return "residual hold counts";
    }
    return NULL;
}

static const char *check_timer_heaps(const sd__stage *st)
{
    const char *bad = check_theap(st, &st->et_heap, false);
    if (bad == NULL) {
        bad = check_theap(st, &st->pt_heap, true);
    }
    if (bad == NULL && st->et_heap.live + st->pt_heap.live != st->timers.len) {
        bad = "timer heaps != stored timers";
    }
    size_t it = 0, n = 0;
    sd__timer *t;
    while (bad == NULL && sd__timers_next(&st->timers, &it, &t)) {
        sd_bytes key = sd_bytes_make(t->key, t->key_len), tag = sd__timer_tag(t);
        n++;
        /* With the heaps' live entries all stored and as many as the stored timers, every
         * stored timer is live in a heap. */
        if (t->heap_state != SD__TIMER_LIVE) {
            bad = "stored timer not live in its heap";
        } else if (t->key_hash != sd_hash_words(key.ptr, key.len, 0) ||
                   t->hash != sd__timer_hash(t->family, &t->win, t->key_hash, tag) ||
                   sd__timers_find(&st->timers, t->family, &t->win, key, tag) != t) {
            bad = "stored timer not found by its identity";
        }
    }
    if (bad == NULL && n != st->timers.len) {
        bad = "timer table count";
    }
    return bad;
}

/* A GBK stage's groups: counts, the cached minimum, each map's windows, a key's order. */
static const char *check_gbk(const sd__stage *st)
{
    const char *g = NULL;
    size_t it = 0;
    void *v;
    size_t values = 0, groups = 0, bytes = 0, held = 0, holding = 0, pooled = 0;
    it = 0;
    for (int m = 0; m < 2; m++) {
        const sd_map *map = m == 0 ? &st->gbk.groups : &st->gbk.global;
        it = 0;
        while (sd_map_next(map, &it, NULL, &v)) {
            const sd__group *gr = v;
            values += gr->fresh;
            bytes += gr->values.len + gr->pool.len;
            size_t fp = sd__vchain_footprint(&gr->pool);
            pooled = pooled == SIZE_MAX || fp == SIZE_MAX ? SIZE_MAX : pooled + fp;
            if (gr->pool.head != NULL && gr->values.len > 0) {
                g = "gbk group with values both pooled and in its buffer";
            }
            groups++;
            if (gr->fresh > 0 && gr->min_ts < st->gbk.min_ts) {
                g = "gbk min timestamp cache";
            }
            if (gr->win.global != (m == 1)) {
                g = "gbk group in the wrong map";
            }
            if (gr->tail != NULL && gr->tail->holding) {
                held += gr->tail->held_n;
                holding++;
                if (!gr->closed) {
                    g = "gbk open group holding a closing pane";
                }
            }
        }
    }
    it = 0;
    while (sd_map_next(&st->gbk.sessions, &it, NULL, &v)) {
        const sd_vec *list = v;
        for (size_t s = 0; s < list->len; s++) {
            const sd__group *gr = *SD_VEC_AT(list, sd__group *, s);
            values += gr->fresh;
            bytes += gr->values.len + gr->pool.len;
            size_t fp = sd__vchain_footprint(&gr->pool);
            pooled = pooled == SIZE_MAX || fp == SIZE_MAX ? SIZE_MAX : pooled + fp;
            if (gr->pool.head != NULL && gr->values.len > 0) {
                g = "gbk group with values both pooled and in its buffer";
            }
            groups++;
            if (gr->fresh > 0 && gr->min_ts < st->gbk.min_ts) {
                g = "gbk min timestamp cache";
            }
            if (s > 0) {
                const sd__group *pg = *SD_VEC_AT(list, sd__group *, s - 1);
                bool sdk_merged = st->gbk.merge_requests != SIZE_MAX;
                /* Windows the SDK merges may overlap (until merged, or for good): the
                 * list is sorted by (start, end) and holds each window once. */
                if (!sdk_merged && pg->win.end > gr->win.start) {
                    g = "gbk sessions overlap";
                }
                if (sdk_merged &&
                    (pg->win.start > gr->win.start ||
                     (pg->win.start == gr->win.start && pg->win.end >= gr->win.end))) {
                    g = "gbk windows of a key out of order or repeated";
                }
            }
        }
    }
    if (values + st->gbk.n_ready + st->gbk.n_held != st->gbk.n_values ||
        groups != st->gbk.n_groups || held != st->gbk.n_held || holding != st->gbk.n_holding) {
        g = "gbk value/group counts";
    }
    if (bytes != st->gbk.bytes) {
        g = "gbk bytes held in memory";
    }
    if (pooled != st->gbk.pool.live) {
        g = "gbk pooled values: chains against the pool's live bytes";
    }
    return g;
}

/* Only a triggered side input stages firings (sd__side_add). */
static bool sides_ok(const sd__stage *st)
{
    for (size_t s = 0; s < st->n_sides; s++) {
        if (st->sides[s].staged.len > 0 && !st->sides[s].triggered) {
            return false;
        }
    }
    return true;
}

const char *sd__em_check(const sd_em *em, sd_time *prev)
{
    size_t inflight = 0;
    if (em == NULL || em->magic != SD__EM_MAGIC) {
        return "engine magic";
    }
    for (size_t i = 0; i < em->stages.len; i++) {
        const sd__stage *st = sd__em_stage_at(em, i);
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
        if (n != st->n_inflight || !sides_ok(st)) {
            return n != st->n_inflight ? "stage in-flight count" : "staged untriggered side input";
        }
        inflight += n;
        if (!sd__elem_heap_ok(&st->pending)) {
            return "pending heap order";
        }
        for (size_t p = 0; p < st->pending.len; p++) {
            const sd__elem *e = SD_VEC_AT(&st->pending, sd__elem, p);
            if (e->slab == NULL || e->slab->refs == 0 || e->off + e->len > e->slab->len) {
                return "pending element slab";
            }
        }
        size_t spilled = st->spill_tail_n;
        sd_time spilled_min = st->spill_tail_n > 0 ? st->spill_tail_min : SD_TIME_MAX;
        for (size_t r = 0; r < st->spill_runs.len; r++) {
            const sd__run *run = SD_VEC_AT(&st->spill_runs, sd__run, r);
            spilled += run->n;
            spilled_min = SD_MIN(spilled_min, run->min_ts);
        }
        if (spilled != st->n_spilled || spilled_min != st->spill_min) {
            return "spilled pending elements: count or oldest timestamp";
        }
        if (st->n_spilled > 0 && em->cfg.memory_limit == 0) {
            return "spilled pending elements without a memory limit";
        }
        if (!sd__elem_heap_ok(&st->sorted)) {
            return "time-sorted buffer heap order";
        }
        if (st->sorted.len > 0 && !st->time_sorted) {
            return "time-sorted buffer in a stage without time-sorted input";
        }
        /* Whatever the watermark has passed must have moved on to pending. */
        if (st->sorted.len > 0 &&
            sd__em_sorted_releasable(em, st, SD_VEC_AT(&st->sorted, sd__elem, 0)->ts) &&
            !em->poisoned) {
            return "time-sorted element behind the watermark still buffered";
        }
        if (st->holds.total != st->timers.len + fired) {
            return "holds != stored + fired timers";
        }
        const char *th = check_holds(st);
        if (th == NULL) {
            th = check_timer_heaps(st);
        }
        if (th == NULL) {
            th = check_state(em, st);
        }
        if (th != NULL) {
            return th;
        }
        if (st->kind != SD_STAGE_IMPULSE && st->kind != SD_STAGE_TESTSTREAM && em->started) {
            if (st->in_wm > sd__em_upstream_wm(em, st)) {
                return "input watermark ahead of upstream";
            }
            if (!st->has_est && st->out_wm > st->in_wm) {
                return "output watermark ahead of input";
            }
            for (size_t o = 0; o < st->n_outputs; o++) {
                if (sd__em_pcoll_at(em, st->outputs[o])->wm != st->out_wm) {
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
        const sd__klock *l;
        size_t locks = 0;
        while (sd__klocks_next(&st->key_locks, &it, &l)) {
            const sd_bundle *owner = l->owner;
            bool found = false;
            for (const sd_bundle *b = st->inflight; b != NULL; b = b->next) {
                found = found || b == owner;
            }
            if (!found) {
                return "key lock held by a finished bundle";
            }
            if (l->off + l->len > owner->locked.len ||
                sd__key_owner(&st->key_locks, sd_bytes_make(owner->locked.data + l->off, l->len)) !=
                    owner) {
                return "key lock not found by its key";
            }
            locks++;
        }
        if (locks != st->key_locks.len) {
            return "key lock count";
        }
        const char *g = st->kind == SD_STAGE_GBK ? check_gbk(st) : NULL;
        if (g != NULL) {
            return g;
        }
    }
    if (inflight != em->n_inflight) {
        return "engine in-flight count";
    }
    return NULL;
}
