/*
 * Sundial: completing and failing SDK bundles.
 *
 * Commit protocol. sd_em_complete_bundle first decodes and checks everything the SDK sent
 * (outputs, timers, residuals) without touching engine state; bad bytes fail the bundle as a
 * whole. Only then does it apply. An allocation failure while applying would leave
 * the accounting half-done, so it poisons the engine (the job must fail) instead of pretending
 * to roll back. The same holds for runner-side work inside sd_em_next_bundle.
 *
 * Here that is sd_em_complete_bundle: sd__em_check_values, walk_values and walk_timers decode
 * and check what the SDK sent (outputs only as far as they were not checked on arrival: see
 * sd__outstream in em_int.h; residuals into a staging list of staged_elem), then the apply
 * steps deliver the outputs chunk by chunk (sd__em_deliver), set and clear timers, park or
 * requeue residuals, commit user state (sd__state_commit) and release the bundle's keys and
 * inputs; the finished bundle is recycled as its stage's spare (sd__bundle_recycle, em_bundle.c)
 * when it is small. Building, failing and recycling bundles is em_bundle.c's, the output
 * streams em_outstream.c's: this file calls them, never the other way. What completion changes
 * is picked up by the next watermark pass (em_time.c, sd__wm_update).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

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
    uint64_t key_hash, hash; /* of its key and identity (when applying) */
} staged_timer;

/*
 * Walk the windowed values of one output chunk or residual, already checked. With slab:
 * deliver each exploded element to pc's consumers. Without: stage each exploded element into
 * out. Outputs are decoded twice (checked on arrival or in phase 1, then delivered) rather
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
    /* The element is decoded straight into in: copied from a local, its two fields (stored
     * apart by the decoder) were reloaded as one 16-byte value, which the CPU cannot forward
     * from the two stores (a stall per element, a tenth of this walk in bench_engine). */
    sd__incoming in = { .slab = slab };
    while (!sd_reader_done(&r)) {
        rc = sd_wv_decode(pc->wv_coder, &r, &em->hdr, &in.elem, err);
        if (rc != SD_OK) {
            (void)sd_err_prefix(err, "pcollection \"%s\" element %zu: ", pc->id, n);
            return rc;
        }
        in.ts = em->hdr.ts;
        in.pane = em->hdr.pane;
        const sd_window *ws = sd_windows_items(&em->hdr.windows);
        if (slab != NULL && pc->drop_behind_wm && sd__is_behind(in.ts, pc->wm) &&
            em->hdr.windows.n > 0) {
            /* The per-element late policy on an output (sd_em_set_drop_behind_watermark_output):
             * behind the producer's watermark, so dropped in every window, counted once. */
            rc = sd__win_intern(em, &ws[0], &in.win, err);
            if (rc != SD_OK) {
                (void)sd_err_prefix(err, "pcollection \"%s\" element %zu: ", pc->id, n);
                return rc;
            }
            sd__em_note_late(em, sd__em_stage_at(em, pc->producer), pc, &in,
                             SD_LATE_BEHIND_WATERMARK, false);
            n++;
            continue;
        }
        for (size_t w = 0; w < em->hdr.windows.n; w++) {
            rc = sd__win_intern(em, &ws[w], &in.win, err);
            if (rc != SD_OK) {
                (void)sd_err_prefix(err, "pcollection \"%s\" element %zu: ", pc->id, n);
                return rc;
            }
            if (slab != NULL) {
                rc = sd__em_deliver(em, pc, &in, err);
            } else {
                staged_elem s = {
                    .pcoll = SIZE_MAX, .source = source, .delay_ms = delay_ms, .in = in
                };
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

/*
 * Live-lock progress of one bundle's timers (sd_em_check_livelock): timers_before is the
 * stage's stored timers plus the ones the bundle fired, et_fired_max the latest event-time
 * timer it fired (has_et_fired: any), pt_wake the latest wall-clock time a processing-time
 * timer it set asked for (SD_TIME_MIN: none). A processing-time timer set again relative to
 * the clock is no progress on the synthetic clock — the clock only jumps to it.
 */
typedef struct timer_progress {
    size_t timers_before;
    bool has_et_fired;
    sd_time et_fired_max;
    sd_time pt_wake;
    bool moved;
} timer_progress;

static sd_status
apply_timer(sd_em *em, sd__stage *st, const staged_timer *s, sd_time wall, timer_progress *tp);

/*
 * Walk the timers the SDK set, family by family. Without tp: decode and check only, and
 * count them (one per window) per time domain into n_pt, n_et. With tp (apply): set or clear
 * each, in order, noting the live-lock progress in tp.
 * Like outputs, timers are walked twice rather than staged: a staged copy of a million timers
 * was 88 MB and more time than decoding them again.
 */
static sd_status walk_timers(sd_em *em,
                             sd__stage *st,
                             sd_bundle *b,
                             timer_progress *tp,
                             sd_time wall,
                             size_t *n_pt,
                             size_t *n_et,
                             sd_err *err)
{
    /* Applying runs APPLY_BEHIND timers behind decoding: each timer's slot in the identity
     * table is asked for when it is decoded and used that many timers later. With a million
     * new timers each lookup is otherwise a cache miss (and a TLB miss); one timer ahead hid
     * only part of it (measured in bench_pt_timers: the bundle setting 100,000 timers completed
     * in 20 ms instead of 22.5, a million in 225 instead of 250; 4 and 16 ahead were no better).
     * The ring holds decoded timers, whose key and tag point into the bundle's bytes, not into
     * em->timer. */
    enum { APPLY_BEHIND = 8 };

    staged_timer ring[APPLY_BEHIND];
    size_t head = 0, held = 0;
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
                sd__win win;
                rc = sd__win_intern(em, &ws[w], &win, err);
                if (rc != SD_OK) {
                    (void)sd_err_prefix(err, "timer family \"%s\": ", st->families[f].family_id);
                    return rc;
                }
                staged_timer t = { .family = f,
                                   .win = win,
                                   .key = em->timer.key,
                                   .tag = em->timer.tag,
                                   .clear = em->timer.clear,
                                   .fire = em->timer.fire,
                                   .hold = em->timer.hold,
                                   .pane = em->timer.pane };
                if (tp != NULL) {
                    t.key_hash = sd_hash_words(t.key.ptr, t.key.len, 0);
                    t.hash = sd__timer_hash(t.family, &t.win, t.key_hash, t.tag);
                    sd__timers_prefetch_id(&st->timers, t.hash);
                    if (held == APPLY_BEHIND) {
                        rc = apply_timer(em, st, &ring[head], wall, tp);
                        if (rc != SD_OK) {
                            return rc;
                        }
                        ring[head] = t;
                        head = (head + 1) % APPLY_BEHIND;
                    } else {
                        ring[(head + held++) % APPLY_BEHIND] = t;
                    }
                } else if (st->families[f].processing_time) {
                    (*n_pt)++;
                } else {
                    (*n_et)++;
                }
            }
            n++;
        }
    }
    for (; held > 0; held--, head = (head + 1) % APPLY_BEHIND) {
        sd_status rc = apply_timer(em, st, &ring[head], wall, tp);
        if (rc != SD_OK) {
            return rc;
        }
    }
    return SD_OK;
}

void sd_em_bundle_set_processing_time_base(sd_bundle *b, sd_time base)
{
    b->has_pt_base = true;
    b->pt_base = sd_time_clamp(base); /* an SDK's value: never negated out of range */
}

/* Phase 2, timers: room for every timer set first (one allocation per structure, however
 * many), then apply them in order, noting their live-lock progress in tp. */
static sd_status apply_timers(sd_em *em,
                              sd__stage *st,
                              sd_bundle *b,
                              size_t n_pt,
                              size_t n_et,
                              timer_progress *tp,
                              sd_err *err)
{
    sd_status rc = sd__theap_reserve(&st->pt_heap, n_pt);
    if (rc == SD_OK) {
        rc = sd__theap_reserve(&st->et_heap, n_et);
    }
    if (rc == SD_OK) {
        rc = sd__timers_reserve(&st->timers, n_pt + n_et);
    }
    sd_time wall = sd__em_wall(em);
    if (em->cfg.clock == SD_CLOCK_WALL) {
        (void)sd__clock_advance(em, wall, SD_CLOCK_CAUSE_WALL);
    } else if (b->has_pt_base) {
        wall = b->pt_base; /* the SDK's "now": the timers' delays exactly, not less the latency */
    }
    if (rc == SD_OK) {
        rc = walk_timers(em, st, b, tp, wall, NULL, NULL, err);
    }
    return rc;
}

static timer_progress timers_before(const sd__stage *st, const sd_bundle *b)
{
    timer_progress tp = { .timers_before = st->timers.len + b->fired.len,
                          .et_fired_max = SD_TIME_MIN,
                          .pt_wake = SD_TIME_MIN };
    for (size_t i = 0; i < b->fired.len; i++) {
        const sd__timer *t = *SD_VEC_AT(&b->fired, sd__timer *, i);
        if (!st->families[t->family].processing_time) {
            tp.et_fired_max = tp.has_et_fired ? SD_MAX(tp.et_fired_max, t->fire) : t->fire;
            tp.has_et_fired = true;
        }
    }
    return tp;
}

/* Set or clear one timer the SDK sent (phase 2), noting its live-lock progress in tp. */
static sd_status
apply_timer(sd_em *em, sd__stage *st, const staged_timer *s, sd_time wall, timer_progress *tp)
{
    /* A processing-time timer is kept even when its window has expired (its max timestamp plus
     * allowed lateness is behind the input watermark: anything once a bounded input is
     * finished), and fires when the job clock reaches it, so a callback that re-arms its timer
     * a bounded number of times runs every time, as on Prism (Beam's Go suite,
     * TestTimers_ProcessingTime_*: five firings a key after the input ended). A loop that
     * re-arms forever runs forever, as on Prism; one that makes no progress meanwhile is
     * reported as live-locked (sd_em_check_livelock). */
    bool pt = st->families[s->family].processing_time;
    if (pt && !s->clear) {
        tp->pt_wake = SD_MAX(tp->pt_wake, s->fire); /* the SDK's absolute wall-clock time */
    }
    if (s->clear) {
        sd__timer_clear(em, st, s->family, &s->win, s->key, s->tag);
        return SD_OK;
    }
    sd__timer *t = sd__timer_create_hashed(&st->tpool, s->family, &s->win, s->key, s->tag,
                                           s->key_hash, s->hash);
    if (t == NULL) {
        return SD_ENOMEM;
    }
    t->fire = s->fire;
    t->hold = s->hold;
    t->pane = s->pane;
    if (pt) {
        /* The SDK's absolute wall-clock firing time, moved onto the job's clock. */
        t->fire = sd_time_clamp(sd_time_add(em->clock_now, sd_time_add(s->fire, -wall)));
        /* On the wall clock a timer in the future makes the job sleep, not spin. */
        tp->moved |= em->cfg.clock == SD_CLOCK_WALL && t->fire > em->clock_now;
        return sd__timer_set(em, st, t, NULL);
    }
    /* An event-time timer set to a new time is progress: for its identity, or (new or just
     * fired) after every event-time timer this bundle fired — event time only goes forward. */
    sd_time fire = t->fire, old_fire = fire;
    size_t n = st->timers.len;
    sd_status rc = sd__timer_set(em, st, t, &old_fire);
    if (rc == SD_OK && st->timers.len == n) {
        tp->moved |= old_fire != fire;
    } else if (rc == SD_OK) {
        tp->moved |= !tp->has_et_fired || fire > tp->et_fired_max;
    }
    return rc;
}

/* Phase 1: decode and validate everything the SDK sent: residuals staged into elems, timers
 * counted per time domain; nothing in the engine changes yet. */
static sd_status decode_results(sd_em *em,
                                const sd__stage *st,
                                sd__pcoll *in_pc,
                                sd_bundle *b,
                                sd_vec *elems,
                                size_t *n_pt,
                                size_t *n_et,
                                sd_err *err)
{
    sd_status rc = SD_OK;
    for (size_t o = 0; o < st->n_outputs && rc == SD_OK; o++) {
        /* What arrived checked already is not checked again. */
        sd__outstream *os = &b->outputs[o];
        size_t pos = os->checked, n = os->n_checked;
        rc = sd__em_check_values(em, sd__em_pcoll_at(em, st->outputs[o]), sd_buf_bytes(&os->tail),
                                 &pos, &n, err);
    }
    for (size_t i = 0; i < b->residuals.len && rc == SD_OK; i++) {
        const sd__residual *r = SD_VEC_AT(&b->residuals, sd__residual, i);
        size_t before = elems->len;
        rc = walk_values(em, in_pc, sd_bytes_make(r->bytes, r->len), NULL, elems, i, r->delay_ms,
                         err);
        if (rc == SD_OK && elems->len != before + 1) {
            rc = sd_err_set(err, SD_EPROTO,
                            "residual %zu: expected one windowed value in one window", i);
        }
    }
    if (rc == SD_OK) {
        rc = walk_timers(em, (sd__stage *)st, b, NULL, 0, n_pt, n_et, err);
    }
    return rc;
}

/* Phase 2, outputs: each chunk of each output stream, then its tail, becomes a slab,
 * delivered to the output PCollection's consumers (which take their own references). */
static sd_status deliver_outputs(sd_em *em, const sd__stage *st, sd_bundle *b, sd_err *err)
{
    sd_status rc = SD_OK;
    for (size_t o = 0; o < st->n_outputs && rc == SD_OK; o++) {
        sd__outstream *os = &b->outputs[o];
        sd__pcoll *pc = sd__em_pcoll_at(em, st->outputs[o]);
        for (size_t c = 0; c <= os->chunks.len && rc == SD_OK; c++) {
            size_t len;
            uint8_t *data;
            if (c < os->chunks.len) {
                sd__chunk *ch = SD_VEC_AT(&os->chunks, sd__chunk, c);
                data = ch->data;
                len = ch->len;
                ch->data = NULL;
                if (ch->on_file) { /* read back now, one chunk at a time */
                    data = sd_malloc(len > 0 ? len : 1);
                    rc = data == NULL ? sd_err_set(err, SD_ENOMEM, "out of memory")
                                      : sd__spill_read(em, ch->off, data, len, err);
                    if (rc != SD_OK) {
                        sd_free(data);
                        break;
                    }
                    sd__spill_free(em, ch->off, len);
                    ch->on_file = false;
                    os->spilled -= len;
                }
            } else {
                data = sd_buf_take(&os->tail, &len);
            }
            if (data == NULL) {
                continue;
            }
            sd__slab *slab = sd__slab_create(data, len);
            rc = slab == NULL
                     ? SD_ENOMEM
                     : walk_values(em, pc, sd_bytes_make(data, len), slab, NULL, o, 0, err);
            sd__slab_unref(slab);
            sd__em_churn(em, len); /* consumers that copy (GroupByKey values) grew buffers */
        }
    }
    return rc;
}

/* Phase 2, residuals: each residual becomes one slab (res_slabs[i]); its staged element is
 * pending again now, or parked until the clock says (never while draining). */
static sd_status requeue_residuals(sd_em *em,
                                   sd__stage *st,
                                   const sd__pcoll *in_pc,
                                   sd_bundle *b,
                                   sd_vec *elems,
                                   sd__slab **res_slabs,
                                   bool waits_for_wall,
                                   sd_err *err)
{
    sd_status rc = SD_OK;
    for (size_t i = 0; i < b->residuals.len && rc == SD_OK; i++) {
        sd__residual *r = SD_VEC_AT(&b->residuals, sd__residual, i);
        res_slabs[i] = sd__slab_create(r->bytes, r->len);
        r->bytes = NULL;
        rc = res_slabs[i] == NULL ? SD_ENOMEM : SD_OK;
    }
    for (size_t i = 0; i < elems->len && rc == SD_OK; i++) {
        staged_elem *s = SD_VEC_AT(elems, staged_elem, i);
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
        /* Its hold: the estimate the SDK reported with it, else its own timestamp. */
        const sd__residual *res = SD_VEC_AT(&b->residuals, sd__residual, s->source);
        sd_time hold = res->has_wm ? res->wm : s->in.ts;
        if (s->delay_ms <= 0 || em->draining || waits_for_wall) {
            uint64_t seq = em->seq; /* the one sd__em_push_elem gives it */
            rc = sd__em_push_elem(em, st, &s->in, key_len, false, err);
            if (rc == SD_OK && !st->time_sorted) { /* (a time-sorted stage may drop it) */
                rc = sd__residual_hold_add(st, seq, hold);
            }
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
                rc = sd__residual_hold_add(st, p.elem.seq, hold);
            }
        }
    }
    return rc;
}

/*
 * After an idle bundle of an SDK waiting for real time (waits_for_wall): its residuals, pending
 * again at once, go out again when the wall clock reaches the resume they asked for, or after
 * SD_EM_NAP_MAX_MS, not at once (a round trip through the SDK each time, thousands a second,
 * that only finds it is not time yet). Only while that time stays put round after round
 * (note_nap: Python's PeriodicImpulse asks for its next tick each time); a delay that moves on
 * each round (a fixed delay, deferred forever) waits once, then spins into the live-lock
 * bound as before.
 */
static void wait_for_wall(sd_em *em, sd__stage *st)
{
    sd_time wall = sd__em_wall(em);
    if (em->nap_ok && !em->draining && em->nap_wake > wall) {
        st->wall_wait_until = SD_MIN(em->nap_wake, sd_time_add(wall, SD_EM_NAP_MAX_MS));
        st->wall_wait_n = sd__pending_n(st);
    }
}

/*
 * Live-lock progress of a bundle's inputs: did it finish one? Yes when it hands back fewer
 * residuals than it processed elements, more (it split), or a residual that is not its input
 * element unchanged (timestamp, window, bytes — a claim moves the restriction). Residual i is
 * compared with input i, the order SDKs process and checkpoint in; another order only counts
 * as progress. On the wall clock a residual that asks for a delay makes the job sleep, not
 * spin. Costs one compare per residual.
 */
static bool inputs_progress(const sd_em *em, const sd_bundle *b, const sd_vec *residuals)
{
    if (residuals->len != b->n_primary) {
        return true;
    }
    for (size_t i = 0; i < residuals->len; i++) {
        const staged_elem *s = SD_VEC_AT(residuals, staged_elem, i);
        const sd__elem *e = SD_VEC_AT(&b->elems, sd__elem, i);
        if ((s->delay_ms > 0 && em->cfg.clock == SD_CLOCK_WALL) || s->in.ts != e->ts ||
            s->in.win.global != e->win.global || s->in.win.start != e->win.start ||
            s->in.win.end != e->win.end || s->in.elem.len != e->len ||
            (e->len > 0 && memcmp(s->in.elem.ptr, e->slab->data + e->off, e->len) != 0)) {
            return true;
        }
    }
    return false;
}

/*
 * A bundle without progress: count it, and note when (wall clock) it asked to be woken — the
 * latest of its residuals' resume delays and its processing-time timers (pt_wake, noted by
 * apply_timer while setting them: no second walk over the timers). The synthetic clock
 * jumps to such a time at once, so an SDK that waits for real time (Python's PeriodicImpulse
 * compares with the wall clock) spins until that time really comes; the first bound's worth
 * of bundles in a row set how long that may take (later ones would push it on forever). Only
 * bundles completed after it count towards the bound: one that started just before the time
 * came and ends just after it saw nothing to do yet.
 */
/*
 * Napping (see next_bundle in em.c): an idle bundle on the synthetic clock whose residuals
 * asked for a delay and which set no timer keeps the streak napping as long as the time it
 * asks for is the time the streak's first idle bundle asked for (a source waiting for a
 * wall-clock target asks for the same time again, within the slack; one deferring by a fixed
 * delay asks for a later time each round, and then spins into the live-lock bound as before).
 */
static void note_nap(sd_em *em, const sd_vec *residuals, sd_time wall, sd_time pt_wake)
{
    sd_time wake = SD_TIME_MIN;
    for (size_t i = 0; i < residuals->len; i++) {
        const staged_elem *s = SD_VEC_AT(residuals, staged_elem, i);
        if (s->delay_ms > 0) {
            wake = SD_MAX(wake, sd_time_add(wall, s->delay_ms));
        }
    }
    em->nap_end = SD_TIME_MIN;
    if (em->cfg.clock != SD_CLOCK_SYNTHETIC || wake == SD_TIME_MIN || pt_wake != SD_TIME_MIN) {
        em->nap_ok = false;
        return;
    }
    if (em->idle_bundles == 1) {
        em->nap_target = wake;
        em->nap_ok = true;
    } else {
        em->nap_ok = em->nap_ok && wake <= sd_time_add(em->nap_target, SD_EM_NAP_SLACK_MS);
    }
    em->nap_wake = wake;
}

static void note_idle(sd_em *em, const sd__stage *st, const sd_vec *residuals, sd_time pt_wake)
{
    sd_time wall = sd__em_wall(em), until = em->idle_wait_until;
    em->idle_bundles++;
    em->idle_stage = st->id;
    note_nap(em, residuals, wall, pt_wake);
    if (em->cfg.clock != SD_CLOCK_SYNTHETIC || em->idle_bundles > em->cfg.livelock_rounds) {
        em->idle_after_wait += wall >= until;
        return;
    }
    until = SD_MAX(until, pt_wake);
    for (size_t i = 0; i < residuals->len; i++) {
        const staged_elem *s = SD_VEC_AT(residuals, staged_elem, i);
        if (s->delay_ms > 0) {
            until = SD_MAX(until, sd_time_add(wall, s->delay_ms));
        }
    }
    em->idle_wait_until = until;
    em->idle_after_wait += wall >= until;
}

/* Release the bundle's inputs, key locks and the holds of the timers it fired; free it. */
static void release_bundle(sd_em *em, sd__stage *st, sd_bundle *b)
{
    sd__bundle_unlock_keys(st, b);
    for (size_t i = 0; i < b->n_primary; i++) {
        sd__slab_unref(SD_VEC_AT(&b->elems, sd__elem, i)->slab);
    }
    for (size_t i = 0; i < b->fired.len; i++) {
        sd__timer_retire(st, *SD_VEC_AT(&b->fired, sd__timer *, i));
    }
    sd__bundle_unlink(em, st, b);
    sd__bundle_recycle(b);
}

sd_status sd_em_complete_bundle(sd_em *em, sd_bundle *b, sd_err *err)
{
    sd_status rc = sd__bundle_check(em, b, err);
    sd_vec elems;
    size_t n_pt = 0, n_et = 0;
    if (rc != SD_OK) {
        return rc;
    }
    rc = sd__em_decide_commit(em, b, err);
    if (rc != SD_OK) {
        sd_em_fail_bundle(em, b); /* a replay diverged: nothing of this run is committed */
        return rc;
    }
    sd__stage *st = b->stage;
    sd__pcoll *in_pc = sd__em_pcoll_at(em, st->inputs[0]);
    sd_vec_init(&elems, sizeof(staged_elem));

    if (em->cfg.clock == SD_CLOCK_WALL) {
        /* arrival time for triggers */
        (void)sd__clock_advance(em, sd__em_wall(em), SD_CLOCK_CAUSE_WALL);
    }

    rc = st->sink_resends ? sd__outstream_release_held(em, st, b, err) : SD_OK;
    if (rc == SD_OK) {
        sd__stage_learn_output_size(st, b);
        rc = decode_results(em, st, in_pc, b, &elems, &n_pt, &n_et, err);
    }
    if (rc != SD_OK) {
        sd_vec_deinit(&elems);
        if (rc != SD_ENOMEM) {
            sd_err_prefix(err, "bundle %s: ", b->id);
        }
        sd_em_fail_bundle(em, b);
        return rc;
    }

    /* Phase 2: apply. From here an allocation failure poisons the engine. */
    uint64_t progress0 = em->progress;
    bool progressed = inputs_progress(em, b, &elems);
    timer_progress tp = timers_before(st, b);
    sd__slab **res_slabs = NULL;
    bool waits_for_wall = false;
    if (b->residuals.len > 0) {
        res_slabs = sd_calloc(b->residuals.len, sizeof(*res_slabs));
        rc = res_slabs == NULL ? SD_ENOMEM : SD_OK;
    }
    if (rc == SD_OK) {
        rc = deliver_outputs(em, st, b, err);
    }
    if (rc == SD_OK) {
        /* The residuals it consumed are done; those it hands back hold in their place. An SDK
         * that reads the wall clock (it reported no processing-time base, as the C SDK does)
         * and hands back its input unchanged, having output nothing, waits for real time
         * (Go's periodic.Impulse, Python's PeriodicImpulse compare their next tick with it):
         * on the synthetic clock its residual is not parked for its delay, which would jump
         * the clock ahead of that source, so that processing-time timers set from the same
         * wall clock would fire before elements which in any real run come first (Beam's Go
         * TestTimers_ProcessingTime_Unbounded: a key's timer fired a sixth time). It is
         * pending again at once, the clock standing still, and goes out when real time may
         * have brought its element (wait_for_wall). */
        waits_for_wall = em->cfg.clock == SD_CLOCK_SYNTHETIC && !b->has_pt_base && !progressed &&
                         em->progress == progress0;
        sd__residual_holds_retire(st, b);
        rc = requeue_residuals(em, st, in_pc, b, &elems, res_slabs, waits_for_wall, err);
    }
    if (rc == SD_OK && b->residuals.len > 0) {
        st->has_est = true;
    }
    if (rc == SD_OK && n_pt + n_et > 0) {
        rc = apply_timers(em, st, b, n_pt, n_et, &tp, err);
    }
    progressed |= tp.moved || st->timers.len < tp.timers_before;
    if (rc == SD_OK) {
        rc = sd__state_commit(em, st, b, &progressed);
    }
    if (progressed || em->progress != progress0) {
        sd__em_progressed(em);
    } else {
        note_idle(em, st, &elems, tp.pt_wake);
        if (rc == SD_OK && waits_for_wall) {
            wait_for_wall(em, st);
        }
    }
    for (size_t i = 0; res_slabs != NULL && i < b->residuals.len; i++) {
        sd__slab_unref(res_slabs[i]);
    }
    sd_free(res_slabs);
    sd_vec_deinit(&elems);
    release_bundle(em, st, b);
    if (rc != SD_OK) {
        return sd__em_poison(em, rc == SD_ENOMEM ? rc : SD_EINTERNAL);
    }
    return SD_OK;
}
