/*
 * Sundial: panes of a GroupByKey cut when an element arrives, and the tails of the windows
 * they close.
 *
 * In a streaming pipeline a trigger that counts elements is asked after every arriving value
 * (sd__gbk_cut_if_ready); when it fires, its pane is cut at once and goes out at the next
 * sd__gbk_fire. When such a cut finishes the trigger, the window is closed for the key, but
 * what else arrives in the same input epoch (sd_em.epoch: until the next TestStream event, or
 * quiescence with such a pane held; and the same job clock) still joins the group, as its
 * tail: see em_gbk.c's opening comment. The closing pane is held in the group (sd__tail) until
 * a tail joins (then it goes out not last, and the tail's pane, at the window's end, is the
 * last) or the epoch ends or the window's end passes (then it is the last).
 */
#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

/* The output timestamp of a pane of g's values as they are now. */
sd_time sd__gbk_pane_ts(const sd__pcoll *pc, const sd__group *g)
{
    switch (g->fresh == 0 ? SD_OUTPUT_TIME_END_OF_WINDOW : pc->ws.output_time) {
    case SD_OUTPUT_TIME_EARLIEST:
        return g->min_ts != SD_TIME_MAX ? g->min_ts : sd__win_max_ts(&g->win);
    case SD_OUTPUT_TIME_LATEST:
        return g->max_ts != SD_TIME_MIN ? g->max_ts : sd__win_max_ts(&g->win);
    default:
        return sd__win_max_ts(&g->win);
    }
}

/* Key, count and values (those on file read back first): the KV<K, Iterable<V>> output
 * element of a pane of g. */
sd_status
sd__gbk_encode_pane(sd_em *em, sd_buf *out, const sd__stage *st, const sd__group *g, sd_err *err)
{
    if (g->count > INT32_MAX) {
        return sd_err_set(err, SD_ETOOBIG, "gbk \"%s\": a group has more than 2^31 values", st->id);
    }
    sd_status rc = sd_buf_append(out, g->key, g->key_len);
    if (rc == SD_OK) {
        rc = sd_iterable_encode_begin(out, g->count);
    }
    if (rc == SD_OK) {
        rc = sd__gbk_read_spilled(em, g, out, err);
    }
    if (rc == SD_OK) {
        rc = sd__vchain_copy(&g->pool, out); /* (one of the two is empty) */
    }
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(out, sd_buf_bytes(&g->values));
    }
    return rc;
}

/* Whether values arriving now join g's tail: it was closed by a pane cut on arrival, and the job
 * is still in the input epoch it closed in (no TestStream event played, the clock not moved). */
bool sd__gbk_tail_open(const sd_em *em, const sd__group *g)
{
    return g->tail != NULL && g->tail->epoch == em->epoch && g->tail->clock == em->clock_now;
}

void sd__gbk_tail_free(sd__group *g)
{
    if (g->tail != NULL) {
        sd_buf_deinit(&g->tail->held);
        sd_free(g->tail);
        g->tail = NULL;
    }
}

/*
 * Per-element trigger evaluation. In a streaming pipeline a trigger that counts elements is
 * asked again after each value joins its group, and when it fires the pane is cut at once with
 * exactly the values so far (it goes out at the next sd__gbk_fire, in order, before any later
 * pane of the group). So AfterCount(3) fires with three values even when five reached the GBK
 * in one pass, and the panes do not depend on how the input was cut into bundles. This is
 * Prism's streaming behaviour (its element manager asks the trigger per element when
 * StreamingMode is set). Java's ReduceFnRunner.processElements asks once per batch of a key's
 * elements, and Python's GeneralTriggerDriver.process_elements once per window per bundle;
 * Beam only promises that a count trigger fires after at least n elements, so both are Beam
 * panes, and per element is the one that is the same for every bundling. Bounded pipelines
 * keep one evaluation per pass (batch: Prism asks once per key and window of each batch).
 */
sd_status sd__gbk_cut_if_ready(sd_em *em,
                               sd__stage *st,
                               const sd__pcoll *pc,
                               sd__group *g,
                               bool tail_ok,
                               sd_err *err)
{
    const sd__trigger *trig = pc->trigger;
    sd__gbk *gbk = &st->gbk;
    if (trig == NULL || !trig->per_element || !(em->cfg.streaming || !em->cfg.bounded) ||
        g->closed || g->fresh == 0) {
        return SD_OK;
    }
    bool past_end = sd__win_max_ts(&g->win) < pc->wm || pc->wm >= SD_TIME_MAX;
    sd__trig_ctx ctx = { .past_end = past_end, .clock = em->clock_now };
    if (!sd__trig_should_fire(trig, g->trig, &ctx)) {
        return SD_OK;
    }
    size_t off = gbk->ready_bytes.len;
    sd_status rc = sd__gbk_encode_pane(em, &gbk->ready_bytes, st, g, err);
    sd__ready_pane *rp = NULL;
    if (rc == SD_OK) {
        rc = sd_vec_push_zero(&gbk->ready, (void **)&rp);
    }
    if (rc != SD_OK) {
        gbk->ready_bytes.len = off; /* drop a partial encoding */
        return rc;
    }
    sd__trig_on_fire(trig, g->trig, &ctx);
    bool close = sd__trig_finished(g->trig);
    int timing = g->nonspec > 0 ? SD_PANE_LATE : past_end ? SD_PANE_ON_TIME : SD_PANE_EARLY;
    *rp = (sd__ready_pane){ .win = g->win,
                            .ts = sd__gbk_pane_ts(pc, g),
                            .pane = { .first = g->panes == 0,
                                      .last = close,
                                      .timing = timing,
                                      .index = g->panes,
                                      .nonspec_index = timing == SD_PANE_EARLY ? -1 : g->nonspec },
                            .off = off,
                            .len = gbk->ready_bytes.len - off,
                            .n_fresh = g->fresh,
                            .count = g->count,
                            .key = sd_hash_bytes(sd_bytes_make(g->key, g->key_len)),
                            .first_seq = g->first_seq,
                            .seq = gbk->ready.len };
    bool hold = close && tail_ok;
    if (hold) {
        /* The closing pane waits in the group for the end of the epoch or a tail. */
        sd__tail *t = sd_calloc(1, sizeof(*t));
        if (t == NULL) {
            return SD_ENOMEM; /* after on_fire: the engine is poisoned */
        }
        sd_buf_init(&t->held, 0);
        g->tail = t;
        rc = sd_buf_append(&t->held, gbk->ready_bytes.data + off, rp->len);
        if (rc != SD_OK) {
            return rc;
        }
        t->epoch = em->epoch;
        t->clock = em->clock_now;
        t->holding = true;
        t->held_n = g->fresh;
        t->held_count = rp->count;
        t->held_ts = rp->ts;
        t->held_min_ts = g->min_ts;
        t->held_pane = rp->pane;
        gbk->ready_bytes.len = off;
        gbk->ready.len--;
        gbk->n_held += g->fresh;
        if (gbk->n_holding++ == 0) {
            gbk->hold_epoch = em->epoch;
            gbk->hold_clock = em->clock_now;
        }
    } else {
        /* The same accounting as a firing in sd__gbk_fire; the values stay in n_values until
         * the pane is emitted. */
        gbk->n_ready += g->fresh;
    }
    g->fresh = 0;
    g->panes++;
    if (timing != SD_PANE_EARLY) {
        g->nonspec++;
    }
    g->min_ts = SD_TIME_MAX;
    g->max_ts = SD_TIME_MIN;
    if (!pc->ws.accumulating) {
        sd__gbk_values_clear(em, gbk, g);
        g->count = 0;
    }
    /* Accumulated values stay while a tail may come, for its pane (consider). */
    g->closed = close;
    return SD_OK;
}

/* g's held closing pane goes out in this pass, as a pane cut on arrival: the last of its window
 * unless a tail joined (the tail's pane then follows it, and is the last). */
sd_status sd__gbk_release_held(sd__gbk *gbk, sd__group *g)
{
    sd__tail *t = g->tail;
    bool last = g->fresh == 0;
    size_t off = gbk->ready_bytes.len;
    sd__ready_pane *rp = NULL;
    sd_status rc = sd_buf_append_bytes(&gbk->ready_bytes, sd_buf_bytes(&t->held));
    if (rc == SD_OK) {
        rc = sd_vec_push_zero(&gbk->ready, (void **)&rp);
    }
    if (rc != SD_OK) {
        gbk->ready_bytes.len = off;
        return rc;
    }
    *rp = (sd__ready_pane){ .win = g->win,
                            .ts = t->held_ts,
                            .pane = t->held_pane,
                            .off = off,
                            .len = t->held.len,
                            .n_fresh = t->held_n,
                            .count = t->held_count,
                            .key = sd_hash_bytes(sd_bytes_make(g->key, g->key_len)),
                            .first_seq = g->first_seq,
                            .seq = gbk->ready.len };
    rp->pane.last = last;
    gbk->n_ready += t->held_n;
    gbk->n_held -= t->held_n;
    gbk->n_holding--;
    t->holding = false;
    t->held_n = 0;
    sd_buf_deinit(&t->held);
    if (last) {
        sd__gbk_tail_free(g); /* the window is closed for good: no tail after its last pane */
    }
    return SD_OK;
}
