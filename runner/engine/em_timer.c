/*
 * Sundial: timers — setting, replacing and clearing a stage's timers, and the
 * OnWindowExpiration timers.
 *
 * Timers. A stateful stage stores at most one timer per (family, window, key, tag): setting it
 * again replaces the earlier one (last write wins, within a bundle and across bundles), and a
 * clear removes it. Event-time timers become eligible when the stage's input watermark passes
 * their firing time (strictly; or when the input watermark is at the end of time), so all data
 * with timestamps up to the firing time has been processed first. Processing-time timers are
 * rebased on receipt onto the job clock (fire' = clock_now + (fire - wall_now)) and become
 * eligible when the job clock reaches them; on the synthetic clock wall_now is the processing
 * time the SDK reported it used for the bundle, when it reported one (the C SDK does), so the
 * delay it meant is kept exactly instead of less the bundle's remaining run time.
 *
 * OnWindowExpiration. A stage naming an expiration family gets, for every (key, window) it
 * sees — an input element or newly committed user state — one timer in that family: empty
 * tag, fire = hold = the window's max timestamp, due (event time) at max timestamp + allowed
 * lateness. It is an ordinary timer from then on: it fires in a bundle that locks its key,
 * after the window's last data (the input watermark passed its due time), and its hold keeps
 * the stage's output watermark at or before the window's end until that bundle completes —
 * which is also what keeps the window's state from being collected before the callback reads
 * it (state is dropped only when the output watermark passes max timestamp + lateness). No
 * timer is created for a window that already expired at the input watermark, so the
 * callback's own state writes cannot re-arm it. Prism instead builds side-channel bundles
 * when the output watermark would pass the window; keeping them as timers reuses the key
 * locks, failure handling and hold accounting unchanged.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

sd__theap *sd__timer_heap(sd__stage *st, const sd__timer *t)
{
    return st->families[t->family].processing_time ? &st->pt_heap : &st->et_heap;
}

/* Unstore and drop the stored timer `old` (replaced or cleared). */
static void timer_unstore(sd__stage *st, sd__timer *old)
{
    sd__tsbag_remove(&st->holds, old->hold);
    sd__timers_remove(&st->timers, old);
    sd__theap_drop(sd__timer_heap(st, old), old); /* the heap frees it */
}

void sd__timer_retire(sd__stage *st, sd__timer *t)
{
    sd__tsbag_remove(&st->holds, t->hold);
    sd__timer_destroy(&st->tpool, t);
}

/* When t becomes eligible (see sd__timer.due). */
static sd_time timer_due(const sd_em *em, const sd__stage *st, const sd__timer *t)
{
    const sd__family *f = &st->families[t->family];
    if (!f->window_expiration) {
        return t->fire;
    }
    const sd__pcoll *in = *SD_VEC_AT(&em->pcolls, sd__pcoll *, st->inputs[0]);
    return sd__win_expiry(&t->win, in->ws.allowed_lateness_ms);
}

sd_status sd__timer_set(sd_em *em, sd__stage *st, sd__timer *t, sd_time *old_fire)
{
    sd__theap *h = sd__timer_heap(st, t);
    t->due = timer_due(em, st, t);
    sd_status rc = sd__theap_reserve(h, 1);
    if (rc == SD_OK) {
        rc = sd__timers_reserve(&st->timers, 1);
    }
    if (rc == SD_OK) {
        rc = sd__tsbag_add(&st->holds, t->hold);
    }
    if (rc != SD_OK) {
        sd__timer_destroy(&st->tpool, t);
        return rc;
    }
    sd__timer *old =
        st->timers.len == 0
            ? NULL
            : sd__timers_find_hashed(&st->timers, t->hash, t->family, &t->win,
                                     sd_bytes_make(t->key, t->key_len), sd__timer_tag(t));
    if (old != NULL) {
        if (old_fire != NULL) {
            *old_fire = old->fire;
        }
        timer_unstore(st, old);
    }
    sd__timers_insert(&st->timers, t);
    sd__theap_push(h, t);
    sd__trace_timer(em, st, SD_TRACE_TIMER_SET, t);
    return SD_OK;
}

void sd__timer_clear(sd_em *em,
                     sd__stage *st,
                     size_t family,
                     const sd__win *w,
                     sd_bytes key,
                     sd_bytes tag)
{
    sd__timer *old = sd__timers_find(&st->timers, family, w, key, tag);
    if (old != NULL) {
        sd__trace_timer(em, st, SD_TRACE_TIMER_CLEAR, old);
        timer_unstore(st, old);
    }
}

/* ---- OnWindowExpiration ------------------------------------------------------------------ */

sd_status sd__expiry_note(sd_em *em, sd__stage *st, const sd__win *w, sd_bytes key)
{
    if (st->expiration_family == SIZE_MAX) {
        return SD_OK;
    }
    const sd__pcoll *in = *SD_VEC_AT(&em->pcolls, sd__pcoll *, st->inputs[0]);
    sd_time max_ts = sd__win_max_ts(w);
    if (sd__wm_passed(sd__win_expiry(w, in->ws.allowed_lateness_ms), st->in_wm)) {
        return SD_OK; /* already expired (its timer, if any, fired): no second notification */
    }
    if (sd__timers_find(&st->timers, st->expiration_family, w, key, SD_BYTES_NULL) != NULL) {
        return SD_OK;
    }
    sd__timer *t = sd__timer_create(&st->tpool, st->expiration_family, w, key, SD_BYTES_NULL);
    if (t == NULL) {
        return SD_ENOMEM;
    }
    t->fire = max_ts;
    t->hold = max_ts;
    t->pane = SD_PANE_NO_FIRING;
    return sd__timer_set(em, st, t, NULL);
}
