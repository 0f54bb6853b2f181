/*
 * Sundial: the job's time — the clock, the holds, the watermarks.
 *
 * Everything that decides *when* in the engine meets here (README.md "The rule of time" has
 * it on one screen; the predicates are inline in em_int.h).
 *
 * The clock. The job clock only moves forward, and only through sd__clock_advance, which
 * names the cause of each move (a TestStream processing-time event, a synthetic jump to the
 * next processing-time event, following the wall clock) and records it in the time trace. The
 * scheduler decides when to jump (em.c, sd_em_next_bundle, at quiescence); this file says what
 * the next processing-time event is (sd__em_next_pt_event).
 *
 * The holds. What keeps a stage's watermarks back is read in one place, sd__holds_read, by
 * named source (sd_trace_hold): on the input side the elements still to process — pending,
 * spilled, in bundles in flight, parked residuals, values in a GroupByKey and its held closing
 * panes; on the output side the timers' holds, the residuals' estimates and a time-sorted
 * stage's buffer. The structures behind the sources are their owners' (the element heaps,
 * em_spill.c, em_gbk.c and em_cut.c, em_tsbag.c for timer and residual holds, written by
 * em_timer.c and below); only this file turns them into watermarks.
 *
 * The watermarks. sd__wm_update applies the rule to one stage (the refresh pass in em.c runs
 * it over the stages in topological order until nothing moves) and records every move of an
 * input or output watermark, and of the earliest hold, in the time trace.
 *
 * Residual holds. A residual (an SDF checkpoint or split remainder the SDK hands back) is
 * input not yet processed, but what it will output is bounded by the output watermark the SDK
 * estimated with it, not by its element's timestamp (a source rooted at an impulse keeps the
 * impulse's, in 1970, forever). So each outstanding residual — parked, pending again, or the
 * input of a bundle in flight — holds the stage's output watermark at its own estimate, or at
 * its timestamp when the SDK reported none; while any is outstanding, the output watermark's
 * basis is the minimum of those holds, of the upstream watermark (input still to come) and of
 * the stage's other unprocessed elements, instead of the input watermark (which residuals keep
 * at their timestamps). A bundle's completion retires the holds of the residuals it consumed
 * and adds those it hands back. Residuals are known by their element's sequence number, in a
 * map beside a counted multiset of the holds; the other elements are scanned only when the
 * counts say some element is not a residual (O(pending) a watermark pass then).
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* The job clock                                                                              */
/* ========================================================================================== */

sd_time sd__em_wall(sd_em *em)
{
    em->wall_last =
        em->cfg.wall_now != NULL ? em->cfg.wall_now(em->cfg.wall_ctx) : sd_wall_now_ms();
    return em->wall_last;
}

bool sd__clock_advance(sd_em *em, sd_time t, sd_trace_clock_cause cause)
{
    if (t <= em->clock_now) {
        return false;
    }
    if (cause == SD_CLOCK_CAUSE_WALL && !sd__em_pause_lets_real_time_in(em)) {
        return false; /* a pausable job's clock moves by its own events only (em_pause.c) */
    }
    sd_time old = em->clock_now;
    em->clock_now = t;
    sd__trace_clock_moved(em, old, cause);
    return true;
}

bool sd_em_clock_follow(sd_em *em, sd_time clock_ms)
{
    if (em == NULL || em->cfg.clock != SD_CLOCK_SYNTHETIC || sd__em_source_pending(em) ||
        !sd__em_pause_lets_real_time_in(em)) {
        return false;
    }
    (void)sd__clock_advance(em, clock_ms, SD_CLOCK_CAUSE_WALL);
    return true;
}

/* Earliest processing-time event (PT timers, trigger deadlines, parked residuals), whether or
 * not it is after now; false if none. */
bool sd__em_next_pt_event(const sd_em *em, sd_time *out)
{
    bool any = false;
    sd_time best = SD_TIME_MAX;
    for (size_t i = 0; i < em->stages.len; i++) {
        const sd__stage *st = sd__em_stage_at(em, i);
        for (size_t p = 0; p < st->parked.len; p++) {
            best = SD_MIN(best, SD_VEC_AT(&st->parked, sd__parked, p)->release_at);
            any = true;
        }
        if (st->kind == SD_STAGE_GBK && st->gbk.n_groups > 0 && st->gbk.min_pt < SD_TIME_MAX) {
            best = SD_MIN(best, st->gbk.min_pt);
            any = true;
        }
        if (st->pt_heap.live > 0) {
            best = SD_MIN(best, st->pt_heap.items[0].due); /* the top is live */
            any = true;
        }
    }
    *out = best;
    return any;
}

/* ========================================================================================== */
/* The hold tracker                                                                           */
/* ========================================================================================== */

/* Inline here: the watermark pass reads every stage's holds on every scheduling pass (a call
 * and a loop over the sources cost bench_pt_timers 5% more instructions). */
static inline void holds_read(sd__stage *st, sd__holds *h)
{
    h->at[SD_HOLD_NONE] = SD_TIME_MAX;
    h->at[SD_HOLD_PENDING] =
        st->pending.len > 0 ? SD_VEC_AT(&st->pending, sd__elem, 0)->ts : SD_TIME_MAX;
    h->at[SD_HOLD_SPILL] = st->spill_min;
    sd_time m = SD_TIME_MAX;
    for (const sd_bundle *b = st->inflight; b != NULL; b = b->next) {
        m = SD_MIN(m, b->min_ts);
    }
    h->at[SD_HOLD_IN_FLIGHT] = m;
    m = SD_TIME_MAX;
    for (size_t i = 0; i < st->parked.len; i++) {
        m = SD_MIN(m, SD_VEC_AT(&st->parked, sd__parked, i)->elem.ts);
    }
    h->at[SD_HOLD_PARKED] = m;
    bool gbk = st->gbk.n_values > 0;
    h->at[SD_HOLD_GBK] = gbk ? st->gbk.min_ts : SD_TIME_MAX;
    h->at[SD_HOLD_CUT_TAIL] = gbk ? st->gbk.tail_min_ts : SD_TIME_MAX;
    h->at[SD_HOLD_TIMER] = st->holds.total > 0 ? sd__tsbag_min(&st->holds) : SD_TIME_MAX;
    h->residuals = sd_map_len(&st->res_by_seq) > 0;
    h->at[SD_HOLD_RESIDUAL] = h->residuals ? sd__tsbag_min(&st->res_holds) : SD_TIME_MAX;
    h->at[SD_HOLD_SORTED] =
        st->sorted.len > 0 ? SD_VEC_AT(&st->sorted, sd__elem, 0)->ts : SD_TIME_MAX;
    h->input = SD_MIN(SD_MIN(SD_MIN(h->at[SD_HOLD_PENDING], h->at[SD_HOLD_SPILL]),
                             SD_MIN(h->at[SD_HOLD_IN_FLIGHT], h->at[SD_HOLD_PARKED])),
                      SD_MIN(h->at[SD_HOLD_GBK], h->at[SD_HOLD_CUT_TAIL]));
    h->min = SD_MIN(SD_MIN(h->input, h->at[SD_HOLD_TIMER]),
                    SD_MIN(h->at[SD_HOLD_RESIDUAL], h->at[SD_HOLD_SORTED]));
}

void sd__holds_read(const sd_em *em, sd__stage *st, sd__holds *h)
{
    (void)em;
    holds_read(st, h);
}

sd_time sd__holds_min(const sd__holds *h, unsigned mask, sd_trace_hold *source)
{
    sd_time m = SD_TIME_MAX;
    sd_trace_hold src = SD_HOLD_NONE;
    for (int i = 1; i < SD_HOLD_SOURCES; i++) {
        if ((mask & SD__HOLD_BIT(i)) != 0 && h->at[i] < m) {
            m = h->at[i];
            src = (sd_trace_hold)i;
        }
    }
    if (source != NULL) {
        *source = src;
    }
    return m;
}

/* ========================================================================================== */
/* Watermarks                                                                                 */
/* ========================================================================================== */

sd_time sd__em_upstream_wm(const sd_em *em, const sd__stage *st)
{
    sd_time up = SD_TIME_MAX;
    if (st->kind == SD_STAGE_TESTSTREAM) {
        for (size_t i = 0; i < st->n_outputs; i++) {
            up = SD_MIN(up, sd__em_pcoll_at(em, st->outputs[i])->wm);
        }
        return up;
    }
    for (size_t i = 0; i < st->n_inputs; i++) {
        up = SD_MIN(up, sd__em_pcoll_at(em, st->inputs[i])->wm);
    }
    return up;
}

static void set_in_wm(sd_em *em, sd__stage *st, sd_time wm, bool *changed)
{
    sd__trace_wm(em, st, SD_TRACE_WM_IN, wm, st->in_wm);
    st->in_wm = wm;
    *changed = true;
}

static void set_out_wm(sd_em *em, sd__stage *st, sd_time wm, bool *changed)
{
    sd__trace_wm(em, st, SD_TRACE_WM_OUT, wm, st->out_wm);
    st->out_wm = wm;
    *changed = true;
    for (size_t i = 0; i < st->n_outputs; i++) {
        sd__em_pcoll_at(em, st->outputs[i])->wm = wm;
    }
    sd__state_gc(em, st);
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
static void update_bounded(sd_em *em, sd__stage *st, const sd__holds *h, sd_time up, bool *changed)
{
    bool data_idle = sd__pending_n(st) == 0 && st->inflight == NULL && st->parked.len == 0 &&
                     st->gbk.n_values == 0;
    if (up >= SD_TIME_MAX && data_idle && st->in_wm < SD_TIME_MAX) {
        set_in_wm(em, st, SD_TIME_MAX, changed);
    }
    bool done = st->in_wm >= SD_TIME_MAX && st->inflight == NULL && st->timers.len == 0 &&
                h->at[SD_HOLD_TIMER] >= SD_TIME_MAX && data_idle && st->sorted.len == 0;
    if (done && st->out_wm < SD_TIME_MAX) {
        set_out_wm(em, st, SD_TIME_MAX, changed);
    }
}

static sd_time fresh_min(const sd__stage *st);

/*
 * The streaming rule. The input watermark is the upstream watermark held back by the stage's
 * unprocessed input (SD__HOLDS_INPUT), and never goes back. The output watermark is the input
 * watermark — or, while residuals are outstanding, the residual basis (em_time.c "Residual
 * holds") — held back by the timers' holds; a time-sorted stage's input reaches it behind the
 * input watermark (that is the point), so its unprocessed and buffered elements hold the
 * output watermark themselves. A TestStream stage's watermarks are its outputs' (the source
 * driver sets them).
 */
void sd__wm_update(sd_em *em, sd__stage *st, bool *changed)
{
    if (st->kind == SD_STAGE_IMPULSE) {
        return;
    }
    sd_time up = sd__em_upstream_wm(em, st);
    if (st->kind == SD_STAGE_TESTSTREAM) {
        if (up > st->in_wm) {
            set_in_wm(em, st, up, changed);
        }
        if (up > st->out_wm) {
            sd__trace_wm(em, st, SD_TRACE_WM_OUT, up, st->out_wm);
            st->out_wm = up;
            *changed = true;
        }
        return;
    }
    sd__holds h;
    holds_read(st, &h);
    if (h.min != st->trace_hold) {
        sd_trace_hold source;
        (void)sd__holds_min(&h, SD__HOLDS_ALL, &source);
        sd__trace_hold(em, st, h.min, source);
    }
    if (em->cfg.bounded) {
        update_bounded(em, st, &h, up, changed);
        return;
    }
    sd_time input = h.input;
    sd_time in = SD_MAX(st->in_wm, SD_MIN(up, input));
    if (in != st->in_wm) {
        set_in_wm(em, st, in, changed);
    }
    sd_time basis = in;
    if (h.residuals) {
        sd_time m = SD_MIN(h.at[SD_HOLD_RESIDUAL], SD_MIN(up, fresh_min(st)));
        basis = SD_MAX(in, m);
    }
    sd_time cand = SD_MIN(basis, h.at[SD_HOLD_TIMER]);
    if (st->time_sorted) {
        cand = SD_MIN(cand, SD_MIN(input, h.at[SD_HOLD_SORTED]));
    }
    if (cand > st->out_wm) {
        set_out_wm(em, st, cand, changed);
    }
}

/* ========================================================================================== */
/* Residual holds                                                                             */
/* ========================================================================================== */

static sd_bytes seq_key(const uint64_t *seq)
{
    return sd_bytes_make((const uint8_t *)seq, sizeof(*seq));
}

sd_status sd__residual_hold_add(sd__stage *st, uint64_t seq, sd_time hold)
{
    sd_time *h = sd_malloc(sizeof(*h));
    if (h == NULL) {
        return SD_ENOMEM;
    }
    *h = hold;
    sd_status rc = sd__tsbag_add(&st->res_holds, hold);
    if (rc == SD_OK) {
        rc = sd_map_put(&st->res_by_seq, seq_key(&seq), h);
        if (rc != SD_OK) {
            sd__tsbag_remove(&st->res_holds, hold);
        }
    }
    if (rc != SD_OK) {
        sd_free(h);
    }
    return rc;
}

void sd__residual_holds_retire(sd__stage *st, const sd_bundle *b)
{
    for (size_t i = 0; sd_map_len(&st->res_by_seq) > 0 && i < b->n_primary; i++) {
        const sd__elem *e = SD_VEC_AT(&b->elems, sd__elem, i);
        sd_time *h = sd_map_take(&st->res_by_seq, seq_key(&e->seq));
        if (h != NULL) {
            sd__tsbag_remove(&st->res_holds, *h);
            sd_free(h);
        }
    }
}

/* The oldest timestamp among st's unprocessed elements that are not residuals, or MAX. Only
 * scanned when some element is not a residual (counts say so without a lookup). */
static sd_time fresh_min(const sd__stage *st)
{
    size_t n = sd__pending_n(st) + st->parked.len;
    for (const sd_bundle *b = st->inflight; b != NULL; b = b->next) {
        n += b->n_primary;
    }
    sd_time m = SD_TIME_MAX;
    if (n == sd_map_len(&st->res_by_seq)) {
        return m; /* every one is a residual (parked ones always are) */
    }
    m = st->spill_min; /* spilled ones never are */
    for (size_t i = 0; i < st->pending.len; i++) {
        const sd__elem *e = SD_VEC_AT(&st->pending, sd__elem, i);
        if (e->ts < m && !sd_map_has(&st->res_by_seq, seq_key(&e->seq))) {
            m = e->ts;
        }
    }
    for (const sd_bundle *b = st->inflight; b != NULL; b = b->next) {
        for (size_t i = 0; i < b->n_primary; i++) {
            const sd__elem *e = SD_VEC_AT(&b->elems, sd__elem, i);
            if (e->ts < m && !sd_map_has(&st->res_by_seq, seq_key(&e->seq))) {
                m = e->ts;
            }
        }
    }
    return m;
}

void sd__residual_holds_deinit(sd__stage *st)
{
    sd__tsbag_deinit(&st->res_holds);
    sd_map_deinit(&st->res_by_seq);
}
