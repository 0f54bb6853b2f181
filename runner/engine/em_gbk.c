/*
 * Sundial: the runner-side GroupByKey.
 *
 * A GBK stage keeps one group per (window, key): the nested value encodings that arrived, how
 * many, and their timestamp range. Values are copied into the group's buffer on arrival, so a
 * grouping costs one append per element (no per-element allocation) and the upstream slab can
 * be freed as soon as SDK consumers are done with it; a small group's values of 256 bytes and
 * more go to the stage's value pool instead (em_vpool.c), packed with no room kept per group.
 *
 * Sessions (merging windows): groups are kept per key in a list sorted by start; a new element
 * window [ts, ts + gap) is merged with every session it intersects (Beam's rule: half-open
 * intervals intersect when each starts before the other ends; touching ones do not merge), and
 * the merged session's window is the span of all of them. Merging also works across bundles:
 * with the default trigger nothing fires until the watermark passes the merged session's end;
 * with another trigger, the merged sessions' trigger states merge too (em_trigger.c), and a
 * session whose trigger finished stays closed when others join it (what they held is dropped
 * and counted as late).
 *
 * Firing (default trigger), with the upstream watermark W (the input PCollection's watermark):
 *
 *     window max ts  <  W   and new values           -> fire a pane with the new values
 *     max ts + allowed lateness  <  W                 -> drop the group (after firing)
 *     W == end of time                                 -> everything fires and is dropped
 *
 * That is the default trigger. A non-default trigger (em_trigger.c) decides instead when a
 * group fires: EARLY panes before the watermark passes the end of the window, then one ON_TIME
 * pane (emitted even when empty, as Beam's default on-time behaviour does), then LATE panes;
 * when the trigger finishes, the window is closed for that key and later values are dropped
 * and counted (Java's ReduceFnRunner: droppedDueToClosedWindow; Python's TriggerDriver: the
 * window's TOMBSTONE). In a streaming pipeline a trigger that counts elements is asked after
 * every arriving value, and a firing cuts its pane at once (cut_if_ready), so one pass may
 * emit several panes of a group; elsewhere the trigger is asked once per pass. When such a
 * cut finishes the trigger, the values that arrive after it in the same input epoch (until
 * the next TestStream event, the next move of the job clock, or the job's quiescence) are not
 * dropped: they were there together with the ones that made the trigger fire, and Java's and
 * Python's drivers, which ask the trigger once per batch, would have put them in that very
 * pane had they come in its bundle. They form the group's tail, which goes out as the window's
 * last pane when the watermark passes its end (with the values so far when accumulating). The
 * closing pane waits in the group until a tail joins (it then goes out, not last) or the epoch
 * ends (it goes out last, as Beam's drivers mark it), so its flags are right either way
 * (em_cut.c). The epoch, unlike a bundle, does not depend on how the input was cut into
 * bundles. So AfterCount(3) over A1..A5 of one Create gives {1,2,3} early and {4,5} on time,
 * as on Prism (its PrismRunnerTest test_after_count_trigger_streaming expects exactly that),
 * while values of a later TestStream event are dropped (Python's test_after_count_streaming:
 * "4 - 6 discarded because trigger finished"; Prism keeps those too). Non-merging windows
 * only: a session's tail would have to survive merges. A windowing with no_closing_tail (Beam's
 * Go SDK, whose suite expects it) has no tail: the finishing element closes the window at once. A
 * bounded pipeline in batch mode (sd_em_config.bounded and not streaming) asks its triggers nothing
 * until the GroupByKey's input is complete (the batch watermark then jumps to the end of time):
 * every value of a window is there when the trigger is first asked, as on Beam's batch runners,
 * so AfterCount(3) over five values fires one pane of five whatever the bundles were (Beam's
 * Python trigger tests expect exactly that), instead of a pane of whatever the first bundles
 * happened to bring and dropping the rest once it finished. At expiry, values
 * not yet emitted go out in a final pane; with the closing behaviour EMIT_ALWAYS that final pane
 * goes out even when nothing is new (empty when discarding, a repeat of the window's values when
 * accumulating), for the default trigger too.
 *
 * Pane: the first firing is ON_TIME (index 0), later ones LATE (index 1, 2, ...); the pane is
 * last when the group is dropped in the same pass. With zero lateness that is the single byte
 * 0x07: first, last, ON_TIME. A pass whose watermark jumped over both the end of a window that
 * had values before its end and, with allowed lateness, its clean-up time (a batch input's end,
 * a TestStream's big step) makes the two steps Beam's drivers make (Java's end-of-window timer,
 * then the clean-up timer it sets): the on-time pane, not last, then the closing pane as the
 * closing behaviour asks (EMIT_ALWAYS: empty, or a repeat when accumulating, LATE and last;
 * otherwise none) — the panes the two times passed one at a time give. An element whose window's
 * max ts + lateness is already behind W when it arrives is dropped and counted in the stage's
 * dropped_late. Output timestamp: END_OF_WINDOW = window max ts; EARLIEST/LATEST = min/max of the
 * fired values' timestamps, counting only values that were not behind the stage's output watermark
 * when they arrived (the end of the window when none was: see group_add). In accumulating mode a
 * late pane repeats every value so far.
 *
 * Dead letters: when the executor routed the GBK's late data (sd_em_set_late_output), the
 * elements it would drop — expired on arrival, or for a window its trigger closed — go to
 * that PCollection unchanged instead, and are still counted.
 *
 * Output element = key encoding (as received) + 4-byte big-endian count + the values' nested
 * encodings: KV<K, Iterable<V>> in nested context. Groups that fire in one pass are emitted in
 * (window max ts, window start, first arrival) order, a group's panes in firing order (those
 * cut on arrival first), and values in arrival order, so output
 * order never depends on hashing and follows the input's order (SDKs whose tests compare
 * iterables in order — the TypeScript SDK's programming guide does — see what a direct runner
 * would give them). Arrival order is deterministic because the executor commits bundles in the
 * order it handed them out.
 *
 * Cost: each pass that can fire something scans every group (O(groups)); passes that cannot
 * are skipped by comparing W to a cached minimum deadline.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

static void group_destroy(void *p)
{
    sd__group *g = p;
    if (g == NULL) {
        return;
    }
    sd_free(g->key);
    sd_free(g->trig);
    sd_buf_deinit(&g->values);
    sd__vchain_release(&g->pool);
    sd__gbk_tail_free(g);
    if (g->spilled != NULL) {
        sd_vec_deinit(g->spilled);
        sd_free(g->spilled);
    }
    sd_free(g);
}

static void session_list_destroy(void *p)
{
    sd_vec *list = p;
    if (list == NULL) {
        return;
    }
    for (size_t i = 0; i < list->len; i++) {
        group_destroy(*SD_VEC_AT(list, sd__group *, i));
    }
    sd_vec_deinit(list);
    sd_free(list);
}

void sd__gbk_init(sd__gbk *g)
{
    memset(g, 0, sizeof(*g));
    sd_map_init(&g->groups, group_destroy);
    sd_map_init(&g->global, group_destroy);
    sd_map_init(&g->sessions, session_list_destroy);
    g->min_ts = SD_TIME_MAX;
    g->min_deadline = SD_TIME_MAX;
    g->min_pt = SD_TIME_MAX;
    sd_vec_init(&g->ready, sizeof(sd__ready_pane));
    sd_buf_init(&g->ready_bytes, 0);
    g->merge_requests = SIZE_MAX;
    sd_map_init(&g->unmerged, NULL);
    sd_map_init(&g->merging, NULL);
}

void sd__gbk_deinit(sd__gbk *g)
{
    sd_map_deinit(&g->groups);
    sd_map_deinit(&g->global);
    sd_map_deinit(&g->sessions);
    sd_vec_deinit(&g->ready);
    sd_buf_deinit(&g->ready_bytes);
    sd_map_deinit(&g->unmerged);
    sd_map_deinit(&g->merging);
    sd__vpool_deinit(&g->pool); /* after the groups: they released their chains */
    g->n_ready = 0;
    g->n_groups = 0;
    g->n_values = 0;
}

static sd__group *group_create(sd__gbk *gbk, const sd__win *w, sd_bytes key)
{
    sd__group *g = sd_calloc(1, sizeof(*g));
    if (g == NULL) {
        return NULL;
    }
    g->first_seq = gbk->next_seq++;
    g->win = *w;
    g->key = sd_memdup(key.ptr, key.len);
    g->key_len = key.len;
    if (g->key == NULL) {
        sd_free(g);
        return NULL;
    }
    sd_buf_init(&g->values, 0);
    g->min_ts = SD_TIME_MAX;
    g->max_ts = SD_TIME_MIN;
    return g;
}

/* Give a new group its trigger state when the input has a non-default trigger. */
static bool group_trigger(sd__group *g, const sd__trigger *t)
{
    if (t == NULL) {
        return true;
    }
    g->trig = sd_calloc(t->n_nodes, sizeof(sd__trig_state));
    if (g->trig == NULL) {
        return false;
    }
    sd__trig_init_state(t, g->trig);
    return true;
}

/*
 * Append a value that is not a short one going into room there is (out of line: the short
 * values' path stays lean). A value that is not tiny, of a small group without a buffer, goes
 * to the pool; a pooled group that outgrows it or gets a tiny value moves its pooled values to
 * a buffer of its own (past the pool's bound, one large enough for the server to map it on its
 * own), where the value goes.
 */
__attribute__((noinline)) static sd_status group_append(sd__gbk *gbk, sd__group *g, sd_bytes value)
{
    sd_buf *v = &g->values;
    if (value.len >= SD__VPOOL_MIN_VALUE && v->cap == 0 &&
        value.len <= SD__VPOOL_MAX_GROUP - g->pool.len) {
        return sd__vpool_append(&gbk->pool, &g->pool, value);
    }
    sd_status rc = g->pool.head != NULL ? sd__vchain_to_buf(&g->pool, v, value.len) : SD_OK;
    return rc == SD_OK ? sd_buf_append_bytes(v, value) : rc;
}

/*
 * Add a value. Its timestamp counts toward the pane's EARLIEST/LATEST output time (the hold)
 * only when it is not behind the stage's output watermark on arrival (`out_wm`): a hold there
 * could not be honoured, so Beam drops it (Java's WatermarkHold: "too late to effect output
 * watermark"). A pane none of whose values could hold goes out at the end of its window.
 */
static sd_status
group_add(sd__gbk *gbk, sd__group *g, sd_time ts, sd_time out_wm, sd_time up, sd_bytes value)
{
    if (sd__win_max_ts(&g->win) >= up) {
        g->before_end = true;
    }
    sd_buf *v = &g->values;
    if (value.len <= 16 && v->cap - v->len >= value.len) {
        /* A short value into room there is: copied here, once per element (values are often
         * a few bytes; the general append's calls cost more than the copy). */
        for (size_t i = 0; i < value.len; i++) {
            v->data[v->len + i] = value.ptr[i];
        }
        v->len += value.len;
    } else {
        sd_status rc = group_append(gbk, g, value);
        if (rc != SD_OK) {
            return rc;
        }
    }
    gbk->bytes += value.len;
    g->count++;
    g->fresh++;
    if (ts >= out_wm) {
        g->min_ts = SD_MIN(g->min_ts, ts);
        g->max_ts = SD_MAX(g->max_ts, ts);
    }
    gbk->n_values++;
    gbk->min_ts = SD_MIN(gbk->min_ts, ts);
    gbk->min_deadline = SD_MIN(gbk->min_deadline, sd__win_max_ts(&g->win));
    return SD_OK;
}

static const sd__pcoll *gbk_input(const sd_em *em, const sd__stage *st)
{
    return *SD_VEC_AT(&em->pcolls, sd__pcoll *, st->inputs[0]);
}

static bool intersects(const sd__win *a, const sd__win *b)
{
    return a->start < b->end && b->start < a->end;
}

/* Drop what a closed group holds (merged into it from an open session): counted as late. */
static void discard_closed(sd_em *em, sd__stage *st, sd__group *g)
{
    st->gbk.n_values -= g->fresh;
    st->dropped_late += g->fresh;
    if (g->fresh > 0) {
        sd__trace_late_values(em, st, gbk_input(em, st), &g->win, g->min_ts, g->fresh);
    }
    g->fresh = 0;
    g->count = 0;
    sd__gbk_values_clear(em, &st->gbk, g);
    g->min_ts = SD_TIME_MAX;
    g->max_ts = SD_TIME_MIN;
}

/* Move g, at index at of a list sorted by window start (then end) but for g, to its place. */
static void resort(sd_vec *list, size_t at)
{
    sd__group **items = SD_VEC_AT(list, sd__group *, 0);
    sd__group *g = items[at];
    while (at > 0 &&
           (items[at - 1]->win.start > g->win.start ||
            (items[at - 1]->win.start == g->win.start && items[at - 1]->win.end > g->win.end))) {
        items[at] = items[at - 1];
        items[--at] = g;
    }
    while (at + 1 < list->len &&
           (items[at + 1]->win.start < g->win.start ||
            (items[at + 1]->win.start == g->win.start && items[at + 1]->win.end < g->win.end))) {
        items[at] = items[at + 1];
        items[++at] = g;
    }
}

sd_status sd__gbk_fold(sd_em *em,
                       sd__stage *st,
                       sd_vec *list,
                       const size_t *idx,
                       size_t n,
                       const sd__win *merged,
                       sd__group **kept,
                       sd_err *err)
{
    sd__gbk *gbk = &st->gbk;
    const sd__pcoll *pc = gbk_input(em, st);
    const sd__trigger *trig = pc->trigger;
    sd__group *keep = *SD_VEC_AT(list, sd__group *, idx[0]);
    /*
     * Pane numbering is not carried across a merge (Beam's trigger drivers clear the pane
     * state of every window merged away): the merged window continues the panes of the
     * window it equals, if any, and otherwise is a new window whose first pane is number 0,
     * EARLY or ON_TIME again by the watermark.
     */
    int64_t panes = 0, nonspec = 0;
    for (size_t i = 0; i < n; i++) {
        const sd__group *g = *SD_VEC_AT(list, sd__group *, idx[i]);
        if (g->win.start == merged->start && g->win.end == merged->end &&
            g->win.global == merged->global) {
            panes = g->panes;
            nonspec = g->nonspec;
        }
    }
    /* The values in order: keep's, then each folded group's. When any of them is partly on
     * file, all of them go to file first and their extents are concatenated. */
    bool on_file = false;
    for (size_t i = 0; i < n; i++) {
        on_file = on_file || (*SD_VEC_AT(list, sd__group *, idx[i]))->spilled != NULL;
    }
    for (size_t i = 0; i < n && on_file; i++) {
        sd_status rc = sd__gbk_spill_all_of(em, gbk, *SD_VEC_AT(list, sd__group *, idx[i]), err);
        if (rc != SD_OK) {
            return rc;
        }
    }
    /* Pooled values join buffers of their own first (so keep's buffer can take the rest). */
    for (size_t i = 0; i < n; i++) {
        sd__group *g = *SD_VEC_AT(list, sd__group *, idx[i]);
        sd_status rc = g->pool.head != NULL ? sd__vchain_to_buf(&g->pool, &g->values, 0) : SD_OK;
        if (rc != SD_OK) {
            return rc;
        }
    }
    for (size_t i = 1; i < n; i++) {
        sd__group *g = *SD_VEC_AT(list, sd__group *, idx[i]);
        sd_status rc = sd_buf_append_bytes(&keep->values, sd_buf_bytes(&g->values));
        if (rc != SD_OK) {
            return rc;
        }
        if (g->spilled == NULL) {
            continue;
        }
        if (keep->spilled == NULL) {
            keep->spilled = g->spilled;
            g->spilled = NULL;
            continue;
        }
        for (size_t j = 0; j < g->spilled->len; j++) {
            if (sd_vec_push(keep->spilled, SD_VEC_AT(g->spilled, sd__gext, j)) != SD_OK) {
                return SD_ENOMEM;
            }
        }
        g->spilled->len = 0; /* keep owns those extents now */
    }
    for (size_t i = 1; i < n; i++) {
        sd__group *g = *SD_VEC_AT(list, sd__group *, idx[i]);
        keep->count += g->count;
        keep->fresh += g->fresh;
        keep->min_ts = SD_MIN(keep->min_ts, g->min_ts);
        keep->max_ts = SD_MAX(keep->max_ts, g->max_ts);
        keep->first_seq = SD_MIN(keep->first_seq, g->first_seq);
        keep->closed = keep->closed || g->closed;
        keep->before_end = keep->before_end || g->before_end;
        if (trig != NULL) {
            sd__trig_merge(trig, keep->trig, g->trig);
        }
        group_destroy(g);
        *SD_VEC_AT(list, sd__group *, idx[i]) = NULL;
        gbk->n_groups--;
    }
    size_t w = 0;
    for (size_t i = 0; i < list->len; i++) {
        sd__group *g = *SD_VEC_AT(list, sd__group *, i);
        if (g != NULL) {
            *SD_VEC_AT(list, sd__group *, w++) = g;
        }
    }
    list->len = w;
    keep->win = *merged;
    keep->panes = panes;
    keep->nonspec = nonspec;
    resort(list, idx[0]); /* the groups removed all came after it */
    if (trig != NULL && n > 1) {
        sd_time max_ts = sd__win_max_ts(&keep->win);
        sd__trig_merge_end(trig, keep->trig, max_ts < pc->wm || pc->wm >= SD_TIME_MAX);
        keep->closed = keep->closed || sd__trig_finished(keep->trig);
    }
    gbk->min_deadline = SD_MIN(gbk->min_deadline, sd__win_max_ts(&keep->win));
    if (keep->closed) {
        discard_closed(em, st, keep);
        gbk->dirty = true;
    }
    *kept = keep;
    return SD_OK;
}

/* The key's windows (sessions, or SDK-merged windows), sorted by start: created empty when the
 * key has none yet. */
static sd_status key_windows(sd__gbk *gbk, sd_bytes key, sd_vec **out)
{
    sd_vec *list = sd_map_get(&gbk->sessions, key);
    if (list == NULL) {
        list = sd_malloc(sizeof(*list));
        if (list == NULL) {
            return SD_ENOMEM;
        }
        sd_vec_init(list, sizeof(sd__group *));
        sd_status rc = sd_map_put(&gbk->sessions, key, list);
        if (rc != SD_OK) {
            sd_free(list);
            return rc;
        }
    }
    *out = list;
    return SD_OK;
}

/* A new group of window w and key, with trig's state, inserted at pos of the key's list. */
static sd_status insert_group(sd__gbk *gbk,
                              sd_vec *list,
                              size_t pos,
                              const sd__win *w,
                              sd_bytes key,
                              const sd__trigger *trig,
                              sd__group **out)
{
    sd__group *g = group_create(gbk, w, key);
    if (g == NULL || !group_trigger(g, trig)) {
        group_destroy(g);
        return SD_ENOMEM;
    }
    sd_status rc = sd_vec_push(list, &g);
    if (rc != SD_OK) {
        group_destroy(g);
        return rc;
    }
    memmove(SD_VEC_AT(list, sd__group *, pos + 1), SD_VEC_AT(list, sd__group *, pos),
            (list->len - 1 - pos) * sizeof(sd__group *));
    *SD_VEC_AT(list, sd__group *, pos) = g;
    gbk->n_groups++;
    *out = g;
    return SD_OK;
}

/*
 * Window merging by the SDK: a value joins the group of exactly its window (a new window is a
 * new group, and the key is marked unmerged until the SDK's merge_windows has seen it). No pane
 * is cut on arrival: the windows may merge first.
 */
static sd_status custom_add(sd_em *em,
                            sd__stage *st,
                            const sd__incoming *in,
                            sd_bytes key,
                            sd_bytes value,
                            sd_err *err)
{
    sd__gbk *gbk = &st->gbk;
    const sd__pcoll *pc = gbk_input(em, st);
    sd_vec *list;
    sd_status rc = key_windows(gbk, key, &list);
    if (rc != SD_OK) {
        return rc;
    }
    sd__group *g = NULL;
    size_t pos = 0;
    for (; pos < list->len; pos++) {
        sd__group *h = *SD_VEC_AT(list, sd__group *, pos);
        if (h->win.start == in->win.start && h->win.end == in->win.end &&
            h->win.global == in->win.global) {
            g = h;
            break;
        }
        if (h->win.start > in->win.start ||
            (h->win.start == in->win.start && h->win.end > in->win.end)) {
            break;
        }
    }
    if (g == NULL) {
        if (!sd_map_has(&gbk->unmerged, key)) {
            rc = sd_map_put(&gbk->unmerged, key, (void *)1);
            if (rc != SD_OK) {
                return rc;
            }
        }
        rc = insert_group(gbk, list, pos, &in->win, key, pc->trigger, &g);
        if (rc != SD_OK) {
            return rc;
        }
    }
    if (g->closed) {
        return sd__gbk_late(em, st, in, SD_LATE_WINDOW_CLOSED, err);
    }
    rc = group_add(gbk, g, in->ts, st->out_wm, pc->wm, value);
    if (rc == SD_OK && pc->trigger != NULL) {
        sd__trig_on_element(pc->trigger, g->trig, em->clock_now);
        gbk->dirty = true;
        gbk->min_pt = SD_MIN(gbk->min_pt, sd__trig_next_deadline(pc->trigger, g->trig));
    }
    return rc;
}

/*
 * Merge session windows: fold every session of the key intersecting the element's window into
 * one (values, counts, pane counters, trigger state), then add the element to it.
 */
static sd_status session_add(sd_em *em,
                             sd__stage *st,
                             const sd__incoming *in,
                             sd_bytes key,
                             sd_bytes value,
                             sd_err *err)
{
    sd__gbk *gbk = &st->gbk;
    const sd__pcoll *pc = gbk_input(em, st);
    const sd__trigger *trig = pc->trigger;
    sd_vec *list;
    sd_status rc = key_windows(gbk, key, &list);
    if (rc != SD_OK) {
        return rc;
    }
    sd__win w = in->win;
    size_t first = SIZE_MAX, n_hit = 0;
    for (size_t i = 0; i < list->len; i++) {
        sd__group *g = *SD_VEC_AT(list, sd__group *, i);
        if (intersects(&g->win, &w)) {
            if (first == SIZE_MAX) {
                first = i;
            }
            n_hit++;
        }
    }
    sd__group *keep;
    if (n_hit == 0) {
        size_t pos = 0;
        while (pos < list->len && (*SD_VEC_AT(list, sd__group *, pos))->win.start < w.start) {
            pos++;
        }
        rc = insert_group(gbk, list, pos, &w, key, trig, &keep);
        if (rc != SD_OK) {
            return rc;
        }
    } else {
        /* The list is sorted and sessions are disjoint, so the hits are contiguous. */
        sd__win merged = w;
        size_t small[8], *idx = n_hit <= 8 ? small : sd_calloc(n_hit, sizeof(size_t));
        if (idx == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < n_hit; i++) {
            const sd__group *g = *SD_VEC_AT(list, sd__group *, first + i);
            merged.start = SD_MIN(merged.start, g->win.start);
            merged.end = SD_MAX(merged.end, g->win.end);
            idx[i] = first + i;
        }
        rc = sd__gbk_fold(em, st, list, idx, n_hit, &merged, &keep, err);
        if (idx != small) {
            sd_free(idx);
        }
        if (rc != SD_OK) {
            return rc;
        }
        if (keep->closed) {
            return sd__gbk_late(em, st, in, SD_LATE_WINDOW_CLOSED, err);
        }
    }
    rc = group_add(gbk, keep, in->ts, st->out_wm, pc->wm, value);
    if (rc == SD_OK && trig != NULL) {
        sd__trig_on_element(trig, keep->trig, em->clock_now);
        rc = sd__gbk_cut_if_ready(em, st, pc, keep, false, err);
        gbk->dirty = true;
        gbk->min_pt = SD_MIN(gbk->min_pt, sd__trig_next_deadline(trig, keep->trig));
    }
    return rc;
}

/* Late data: counted, and delivered to the dead-letter PCollection when there is one. */
sd_status
sd__gbk_late(sd_em *em, sd__stage *st, const sd__incoming *in, sd_late_reason why, sd_err *err)
{
    sd__em_note_late(em, st, gbk_input(em, st), in, why, st->late_output != SIZE_MAX);
    if (st->late_output == SIZE_MAX) {
        return SD_OK;
    }
    return sd__em_deliver(em, *SD_VEC_AT(&em->pcolls, sd__pcoll *, st->late_output), in, err);
}

/* Where a non-merging group of window w and key is: its map, and its key there (the key
 * itself in sd__gbk.global; window bytes + key in sd__gbk.groups, built in id). */
static sd_status
group_slot(sd__gbk *gbk, sd_buf *id, const sd__win *w, sd_bytes key, sd_map **map, sd_bytes *k)
{
    if (w->global) {
        *map = &gbk->global;
        *k = key;
        return SD_OK;
    }
    sd_buf_reset(id);
    sd_status rc = sd__win_put(id, w);
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(id, key);
    }
    *map = &gbk->groups;
    *k = sd_buf_bytes(id);
    return rc;
}

static sd_status
gbk_add(sd_em *em, sd__stage *st, const sd__incoming *in, sd_bytes key, sd_bytes value, sd_err *err)
{
    const sd__pcoll *pc = gbk_input(em, st);
    sd__gbk *gbk = &st->gbk;
    if (sd__is_late(pc, &in->win)) {
        return sd__gbk_late(em, st, in, SD_LATE_WINDOW_EXPIRED, err);
    }
    if (pc->ws.kind == SD_WINDOWFN_SESSIONS && !in->win.global) {
        return session_add(em, st, in, key, value, err);
    }
    if (gbk->merge_requests != SIZE_MAX) {
        return custom_add(em, st, in, key, value, err);
    }
    sd_map *map;
    sd_bytes gk;
    sd_status rc = group_slot(gbk, &em->scratch, &in->win, key, &map, &gk);
    if (rc != SD_OK) {
        return rc;
    }
    sd__group *g = sd_map_get(map, gk);
    if (g == NULL) {
        g = group_create(&st->gbk, &in->win, key);
        if (g == NULL || !group_trigger(g, pc->trigger)) {
            group_destroy(g);
            return SD_ENOMEM;
        }
        rc = sd_map_put(map, gk, g);
        if (rc != SD_OK) {
            group_destroy(g);
            return rc;
        }
        gbk->n_groups++;
    }
    if (g->closed) {
        if (!sd__gbk_tail_open(em, g)) {
            return sd__gbk_late(em, st, in, SD_LATE_WINDOW_CLOSED,
                                err); /* its trigger finished: the window is closed for it */
        }
        gbk->dirty = true; /* a tail (see the top of this file) */
        return group_add(gbk, g, in->ts, st->out_wm, pc->wm, value);
    }
    rc = group_add(gbk, g, in->ts, st->out_wm, pc->wm, value);
    if (rc == SD_OK && pc->trigger != NULL) {
        sd__trig_on_element(pc->trigger, g->trig, em->clock_now);
        rc = sd__gbk_cut_if_ready(em, st, pc, g, !pc->ws.no_closing_tail, err);
        gbk->dirty = true;
        gbk->min_pt = SD_MIN(gbk->min_pt, sd__trig_next_deadline(pc->trigger, g->trig));
    }
    return rc;
}

sd_status sd__gbk_add(sd_em *em,
                      sd__stage *st,
                      const sd__incoming *in,
                      sd_bytes key,
                      sd_bytes value,
                      sd_err *err)
{
    sd_status rc = gbk_add(em, st, in, key, value, err);
    return rc == SD_OK ? sd__gbk_maybe_spill(em, st, err) : rc;
}

/* A group picked for firing or dropping in this pass. */
typedef struct pick {
    sd__group *g;
    sd_vec *list;  /* sessions: the key's list; NULL for non-merging */
    bool fire;     /* emit a pane */
    bool drop;     /* the window expired: remove the group */
    bool last;     /* the pane is the group's last */
    bool close;    /* the trigger finished */
    bool closing;  /* the clean-up step that follows the group's end-of-window step in this
                    * same pass (the second of its two picks; see consider) */
    uint8_t prior; /* 1 when that end-of-window step fires a pane (it comes first) */
    int timing;    /* SD_PANE_EARLY / ON_TIME / LATE */
} pick;

static int cmp_pick(const void *pa, const void *pb)
{
    const pick *a = pa, *b = pb;
    sd_time ma = sd__win_max_ts(&a->g->win), mb = sd__win_max_ts(&b->g->win);
    if (ma != mb) {
        return ma < mb ? -1 : 1;
    }
    if (a->g->win.start != b->g->win.start) {
        return a->g->win.start < b->g->win.start ? -1 : 1;
    }
    if (a->g->first_seq != b->g->first_seq) {
        return a->g->first_seq < b->g->first_seq ? -1 : 1;
    }
    return (int)a->closing - (int)b->closing; /* a group's end-of-window pick first */
}

typedef struct scan {
    sd_em *em;
    sd__gbk *gbk;
    const sd__pcoll *pc;
    sd_time up;
    sd_time clock;
    sd_vec *picks;
    sd_status rc;
    sd_time min_ts, tail_min_ts, min_deadline, min_pt;
} scan;

static void consider(scan *sc, sd__group *g, sd_vec *list)
{
    const sd__trigger *trig = sc->pc->trigger;
    sd_time max_ts = sd__win_max_ts(&g->win);
    sd_time expire = sd__win_expiry(&g->win, sc->pc->ws.allowed_lateness_ms);
    bool past_end = sd__wm_passed(max_ts, sc->up);
    pick p = { .g = g, .list = list, .drop = sd__wm_passed(expire, sc->up) };
    bool trig_fired = false;
    if (g->tail != NULL && g->tail->holding) {
        if (g->fresh > 0 || past_end || !sd__gbk_tail_open(sc->em, g)) {
            sd_status rc = sd__gbk_release_held(sc->gbk, g);
            sc->rc = sc->rc == SD_OK ? rc : sc->rc;
        } else {
            sc->tail_min_ts = SD_MIN(sc->tail_min_ts, g->tail->held_min_ts); /* a hold */
        }
    }
    if (trig == NULL) {
        /* The default trigger: on time when the watermark passes the end, late per arrival. */
        p.fire = (g->fresh > 0 && past_end) || (p.drop && sc->pc->ws.closing_emit_always);
        p.timing = g->panes == 0 ? SD_PANE_ON_TIME : SD_PANE_LATE;
        p.last = p.drop;
    } else if (!g->closed) {
        /* The state machine advances even when there is nothing to emit. */
        sd__trig_ctx ctx = { .past_end = past_end, .clock = sc->clock };
        bool trig_fire = sd__trig_should_fire(trig, g->trig, &ctx);
        trig_fired = trig_fire;
        if (trig_fire) {
            sd__trig_on_fire(trig, g->trig, &ctx);
            p.close = sd__trig_finished(g->trig);
        }
        p.timing = g->nonspec > 0 ? SD_PANE_LATE : past_end ? SD_PANE_ON_TIME : SD_PANE_EARLY;
        /* Emit when there is something new; the on-time firing is emitted even when empty
         * (Beam's default on-time behaviour, FIRE_ALWAYS) unless the strategy says
         * FIRE_IF_NONEMPTY; at expiry of a window whose trigger is still open, a final pane
         * goes out even when empty if the closing behaviour is EMIT_ALWAYS. */
        p.fire = (g->fresh > 0 && (trig_fire || p.drop)) ||
                 (trig_fire && p.timing == SD_PANE_ON_TIME && !sc->pc->ws.on_time_if_nonempty) ||
                 (p.drop && sc->pc->ws.closing_emit_always);
        p.last = p.drop || p.close;
        if (!p.drop && !p.close) {
            sc->min_pt = SD_MIN(sc->min_pt, sd__trig_next_deadline(trig, g->trig));
        }
    } else if (g->fresh > 0) {
        /* A tail: the window's last pane, once the watermark passes its end. */
        p.fire = past_end || p.drop;
        p.timing = g->nonspec > 0 ? SD_PANE_LATE : past_end ? SD_PANE_ON_TIME : SD_PANE_EARLY;
        p.last = true;
    } else if (g->count > 0 && !sd__gbk_tail_open(sc->em, g)) {
        /* Closed on arrival while accumulating, and no tail came: nothing of it is needed. */
        sd__gbk_values_clear(sc->em, sc->gbk, g);
        g->count = 0;
    }
    bool eow_step = past_end && g->before_end;
    if (past_end) {
        g->before_end = false;
    }
    if (eow_step && p.drop && !p.close && expire > max_ts && p.timing == SD_PANE_ON_TIME &&
        (trig == NULL || trig_fired)) {
        /* The watermark jumped over the window's end and its clean-up time at once. Beam's
         * drivers see two steps (Java's ReduceFnRunner fires the end-of-window timer, which
         * sets the clean-up timer, which fires next): the on-time pane, not the last, then
         * the clean-up with its closing pane if the closing behaviour asks for one — the
         * panes the watermark gives passing the two times one at a time. Two picks. */
        pick closing = p;
        p.drop = false;
        p.last = false;
        if (trig == NULL) {
            p.fire = g->fresh > 0;
        } else {
            p.fire = g->fresh > 0 || !sc->pc->ws.on_time_if_nonempty;
        }
        closing.closing = true;
        closing.prior = p.fire ? 1 : 0;
        closing.fire = sc->pc->ws.closing_emit_always;
        closing.timing = g->nonspec + closing.prior > 0 ? SD_PANE_LATE : SD_PANE_ON_TIME;
        closing.last = true;
        if (p.fire && sc->rc == SD_OK) {
            sc->rc = sd_vec_push(sc->picks, &p);
        }
        if (sc->rc == SD_OK) {
            sc->rc = sd_vec_push(sc->picks, &closing);
        }
        return;
    }
    if (p.fire || p.drop || p.close) {
        if (sc->rc == SD_OK) {
            sc->rc = sd_vec_push(sc->picks, &p);
        }
    }
    if (!p.drop) {
        if (!p.fire && g->fresh > 0) {
            sc->min_ts = SD_MIN(sc->min_ts, g->min_ts);
        }
        sc->min_deadline = SD_MIN(sc->min_deadline, past_end ? expire : max_ts);
    }
}

/* A group of a key whose windows the SDK is merging: it may not fire yet, but it still holds
 * the watermark and keeps the next deadline (sd__gbk_merge_result marks the GBK dirty). */
static void hold(scan *sc, const sd__group *g)
{
    if (g->fresh > 0) {
        sc->min_ts = SD_MIN(sc->min_ts, g->min_ts);
    }
    sc->min_deadline = SD_MIN(sc->min_deadline, sd__win_max_ts(&g->win));
}

/* One pane to deliver in this pass: cut on arrival (ready) or fired by the scan (pick). */
typedef struct out_pane {
    sd_time max_ts, start;
    uint64_t first_seq, seq; /* seq: cut order; UINT64_MAX for the scan's pane (it is later) */
    size_t pick;             /* index of the pick it fires, or SIZE_MAX for a ready pane */
    size_t off, len;         /* a pick's pane: where it is encoded in the current batch */
    sd__incoming inc;
    uint64_t key;  /* the key's digest (the time trace) */
    int64_t count; /* values in the pane (the time trace) */
} out_pane;

static int cmp_out(const void *pa, const void *pb)
{
    const out_pane *a = pa, *b = pb;
    if (a->max_ts != b->max_ts) {
        return a->max_ts < b->max_ts ? -1 : 1;
    }
    if (a->start != b->start) {
        return a->start < b->start ? -1 : 1;
    }
    if (a->first_seq != b->first_seq) {
        return a->first_seq < b->first_seq ? -1 : 1;
    }
    if (a->seq != b->seq) {
        return a->seq < b->seq ? -1 : 1;
    }
    return (a->pick > b->pick) - (a->pick < b->pick); /* a group's two picks in firing order */
}

/*
 * Memory: a pane is a copy of its group's values, so a group that fires holds its data twice
 * until its pane is delivered. When the group keeps nothing of them afterwards (discarding
 * mode, a closing trigger, an expiring window: sd__gbk_fire empties or drops it), its values
 * are released as soon as its pane is encoded (a small in-memory buffer of a group that stays
 * keeps its capacity for the group's next values), and the allocator is asked to give freed
 * memory back every few megabytes (sd__em_churn). Panes are encoded and delivered in batches of
 * about EMIT_BATCH bytes, in output order, so firing every key of a big GroupByKey at once (the end
 * of a bounded input) needs its data about once, and with a memory budget the consumers spill
 * what they receive batch by batch. An error after this point fails the job, so nothing
 * released is needed again.
 */
#define RELEASE_VALUES_MIN_CAP (64 * 1024)
#define EMIT_BATCH             (1024u * 1024u)

static size_t release_fired_values(sd_em *em, sd__gbk *gbk, pick *p, const sd__pcoll *in_pc)
{
    bool emptied = !in_pc->ws.accumulating || p->close || p->drop || p->g->closed;
    if (!p->fire || !emptied) {
        return 0;
    }
    size_t pooled = p->g->pool.len;
    if (pooled > 0) { /* pooled values go at once, whatever becomes of the group */
        sd__gbk_values_clear(em, gbk, p->g);
        return pooled;
    }
    size_t cap = p->g->values.cap;
    /* A group the pass drops (its window expired: every key at the end of a bounded input)
     * has no next values, whatever its size: thousands of small groups hold as much. */
    bool big = cap >= RELEASE_VALUES_MIN_CAP || (p->drop && cap > 0);
    if (big || p->g->spilled != NULL) {
        sd__gbk_values_clear(em, gbk, p->g); /* and its extents' file space goes back */
    }
    if (big) {
        sd_buf_deinit(&p->g->values);
    }
    return big ? cap : 0;
}

/* Deliver the panes encoded in batch (outs[from, to) that are picks), then empty it. */
static sd_status flush_batch(sd_em *em,
                             sd__pcoll *out_pc,
                             sd_buf *batch,
                             out_pane *outs,
                             size_t from,
                             size_t to,
                             sd_err *err)
{
    if (batch->len == 0) {
        return SD_OK;
    }
    size_t total;
    uint8_t *data = sd_buf_take(batch, &total);
    sd__slab *slab = data == NULL ? NULL : sd__slab_create(data, total);
    if (slab == NULL) {
        return SD_ENOMEM;
    }
    sd_status rc = SD_OK;
    for (size_t i = from; i < to && rc == SD_OK; i++) {
        if (outs[i].pick == SIZE_MAX) {
            continue;
        }
        outs[i].inc.elem = sd_bytes_make(data + outs[i].off, outs[i].len);
        outs[i].inc.slab = slab;
        rc = sd__em_deliver(em, out_pc, &outs[i].inc, err);
    }
    sd__slab_unref(slab);
    return rc;
}

/*
 * Deliver the panes cut on arrival and the picks that fire, in (window max ts, window start,
 * first arrival) order and, within a group, in firing order. The ready panes are consumed.
 */
static sd_status
emit(sd_em *em, sd__stage *st, const sd__pcoll *in_pc, pick *picks, size_t n, sd_err *err)
{
    sd__gbk *gbk = &st->gbk;
    sd__pcoll *out_pc = *SD_VEC_AT(&em->pcolls, sd__pcoll *, st->outputs[0]);
    size_t n_ready = gbk->ready.len, n_fire = 0;
    for (size_t i = 0; i < n; i++) {
        n_fire += picks[i].fire ? 1 : 0;
    }
    if (n_fire == 0 && n_ready == 0) {
        return SD_OK;
    }
    sd_status rc = SD_OK;
    out_pane *outs = sd_calloc(n_fire + n_ready, sizeof(out_pane));
    sd__slab *ready_slab = NULL;
    if (outs == NULL) {
        rc = SD_ENOMEM;
    }
    if (rc == SD_OK && n_ready > 0) {
        size_t total;
        uint8_t *data = sd_buf_take(&gbk->ready_bytes, &total);
        ready_slab = data == NULL ? NULL : sd__slab_create(data, total);
        rc = ready_slab == NULL ? SD_ENOMEM : SD_OK;
    }
    size_t n_out = 0;
    for (size_t i = 0; i < n_ready && rc == SD_OK; i++) {
        const sd__ready_pane *rp = SD_VEC_AT(&gbk->ready, sd__ready_pane, i);
        outs[n_out++] = (out_pane){
            .max_ts = sd__win_max_ts(&rp->win),
            .start = rp->win.start,
            .first_seq = rp->first_seq,
            .seq = rp->seq,
            .pick = SIZE_MAX,
            .key = rp->key,
            .count = rp->count,
            .inc = { .ts = rp->ts,
                     .win = rp->win,
                     .pane = rp->pane,
                     .elem = sd_bytes_make(ready_slab->data + rp->off, rp->len),
                     .slab = ready_slab },
        };
    }
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        const sd__group *g = picks[i].g;
        if (!picks[i].fire) {
            continue;
        }
        int timing = picks[i].timing;
        int64_t index = g->panes + picks[i].prior, nonspec = g->nonspec + picks[i].prior;
        outs[n_out++] = (out_pane){
            .max_ts = sd__win_max_ts(&g->win),
            .start = g->win.start,
            .first_seq = g->first_seq,
            .seq = UINT64_MAX,
            .pick = i,
            .inc = { .ts = picks[i].closing ? sd__win_max_ts(&g->win) : sd__gbk_pane_ts(in_pc, g),
                     .win = g->win,
                     .pane = { .first = index == 0,
                               .last = picks[i].last,
                               .timing = timing,
                               .index = index,
                               .nonspec_index = timing == SD_PANE_EARLY ? -1 : nonspec } },
        };
    }
    if (rc == SD_OK && n_out > 1) {
        qsort(outs, n_out, sizeof(out_pane), cmp_out);
    }
    sd_buf batch;
    sd_buf_init(&batch, 0);
    size_t from = 0;
    for (size_t i = 0; i < n_out && rc == SD_OK; i++) {
        if (outs[i].pick == SIZE_MAX) {
            sd__trace_pane(em, st, &outs[i].inc.win, outs[i].key, &outs[i].inc.pane, outs[i].count,
                           outs[i].inc.ts);
            rc = flush_batch(em, out_pc, &batch, outs, from, i, err);
            if (rc == SD_OK) {
                rc = sd__em_deliver(em, out_pc, &outs[i].inc, err);
            }
            from = i + 1;
            continue;
        }
        pick *p = &picks[outs[i].pick];
        outs[i].off = batch.len;
        bool empty = p->closing && p->prior && !in_pc->ws.accumulating;
        sd__trace_pane(em, st, &outs[i].inc.win,
                       sd_hash_bytes(sd_bytes_make(p->g->key, p->g->key_len)), &outs[i].inc.pane,
                       empty ? 0 : (int64_t)p->g->count, outs[i].inc.ts);
        if (empty) {
            /* The closing pane after this pass's on-time pane: nothing new, so empty. */
            rc = sd_buf_append(&batch, p->g->key, p->g->key_len);
            if (rc == SD_OK) {
                rc = sd_iterable_encode_begin(&batch, 0);
            }
        } else {
            rc = sd__gbk_encode_pane(em, &batch, st, p->g, err);
        }
        outs[i].len = batch.len - outs[i].off;
        if (rc == SD_OK) {
            sd__em_churn(em, release_fired_values(em, gbk, p, in_pc));
        }
        if (rc == SD_OK && (batch.len >= EMIT_BATCH || i + 1 == n_out)) {
            rc = flush_batch(em, out_pc, &batch, outs, from, i + 1, err);
            from = i + 1;
        }
    }
    sd_buf_deinit(&batch);
    if (rc == SD_OK) {
        gbk->n_values -= gbk->n_ready;
        gbk->n_ready = 0;
        gbk->ready.len = 0;
        sd_buf_reset(&gbk->ready_bytes);
    }
    sd__slab_unref(ready_slab);
    sd_free(outs);
    return rc;
}

/*
 * When segments of groups that stay pin the pool's blocks after the others' values went (dead
 * bytes outnumber live ones), every pooled group is copied, as one segment, into fresh blocks
 * (em_vpool.c); the old blocks go as they empty. Best effort: out of memory, the groups not
 * moved yet stay where they are, as good as before.
 */
static void pool_compact(sd__gbk *gbk)
{
    if (!sd__vpool_wants_compact(&gbk->pool)) {
        return;
    }
    sd__vpool_compact_begin(&gbk->pool);
    sd_status rc = SD_OK;
    void *v;
    for (int m = 0; m < 2; m++) {
        size_t it = 0;
        sd_map *map = m == 0 ? &gbk->groups : &gbk->global;
        while (rc == SD_OK && sd_map_next(map, &it, NULL, &v)) {
            rc = sd__vpool_move(&gbk->pool, &((sd__group *)v)->pool);
        }
    }
    size_t it = 0;
    while (rc == SD_OK && sd_map_next(&gbk->sessions, &it, NULL, &v)) {
        const sd_vec *list = v;
        for (size_t i = 0; i < list->len && rc == SD_OK; i++) {
            rc = sd__vpool_move(&gbk->pool, &(*SD_VEC_AT(list, sd__group *, i))->pool);
        }
    }
}

sd_status sd__gbk_fire(sd_em *em, sd__stage *st, sd_time up, bool *changed, sd_err *err)
{
    sd__gbk *gbk = &st->gbk;
    const sd__pcoll *in_pc = gbk_input(em, st);
    sd_vec picks;
    size_t it = 0;
    void *v;
    sd_status rc = SD_OK;
    if (gbk->merge_requests != SIZE_MAX) {
        rc = sd__gbk_request_merges(em, st, changed, err);
        if (rc != SD_OK) {
            return rc;
        }
    }
    if (gbk->n_groups == 0 && gbk->ready.len == 0) {
        return SD_OK;
    }
    if (em->cfg.bounded && !em->cfg.streaming && up < SD_TIME_MAX && gbk->min_pt > em->clock_now) {
        /* Batch: the triggers are asked once the input is complete (above), or once
         * processing time has come for one of them (the job clock passed a deadline). */
        return SD_OK;
    }
    bool due =
        gbk->min_deadline < up || up >= SD_TIME_MAX || gbk->dirty || gbk->min_pt <= em->clock_now ||
        gbk->ready.len > 0 ||
        (gbk->n_holding > 0 && (gbk->hold_epoch != em->epoch || gbk->hold_clock != em->clock_now));
    if (!due) {
        return SD_OK;
    }
    sd_vec_init(&picks, sizeof(pick));
    scan sc = { .em = em,
                .gbk = gbk,
                .pc = in_pc,
                .up = up,
                .clock = em->clock_now,
                .picks = &picks,
                .rc = SD_OK,
                .min_ts = SD_TIME_MAX,
                .tail_min_ts = SD_TIME_MAX,
                .min_deadline = SD_TIME_MAX,
                .min_pt = SD_TIME_MAX };
    while (sd_map_next(&gbk->groups, &it, NULL, &v)) {
        consider(&sc, v, NULL);
    }
    it = 0;
    while (sd_map_next(&gbk->global, &it, NULL, &v)) {
        consider(&sc, v, NULL);
    }
    it = 0;
    sd_bytes k;
    while (sd_map_next(&gbk->sessions, &it, &k, &v)) {
        sd_vec *list = v;
        bool wait = sd__gbk_key_merging(gbk, k);
        for (size_t i = 0; i < list->len; i++) {
            if (wait) {
                hold(&sc, *SD_VEC_AT(list, sd__group *, i));
            } else {
                consider(&sc, *SD_VEC_AT(list, sd__group *, i), list);
            }
        }
    }
    rc = sc.rc;
    gbk->dirty = false;
    gbk->min_pt = sc.min_pt;
    gbk->hold_epoch = em->epoch; /* the holds this scan kept are all of the current epoch */
    gbk->hold_clock = em->clock_now;
    bool cut = gbk->ready.len > 0;
    if (rc == SD_OK && (picks.len > 0 || cut)) {
        if (picks.len > 1) { /* qsort may not be given NULL, even with no items */
            qsort(picks.items, picks.len, sizeof(pick), cmp_pick);
        }
        rc = emit(em, st, in_pc, picks.items, picks.len, err);
        *changed = *changed || cut;
    }
    if (rc != SD_OK) {
        sd_vec_deinit(&picks);
        return rc;
    }
    /* Account for the firings, then drop what expired. */
    sd_buf id;
    sd_buf_init(&id, 0);
    for (size_t i = 0; i < picks.len && rc == SD_OK; i++) {
        pick *p = SD_VEC_AT(&picks, pick, i);
        sd__group *g = p->g;
        if (p->fire) {
            gbk->n_values -= g->fresh;
            g->fresh = 0;
            g->panes++;
            if (p->timing != SD_PANE_EARLY) {
                g->nonspec++;
            }
            g->min_ts = SD_TIME_MAX;
            g->max_ts = SD_TIME_MIN;
            if (!in_pc->ws.accumulating || g->closed) {
                sd__gbk_values_clear(em, gbk, g);
                g->count = 0;
            }
            sd__gbk_tail_free(g); /* a tail's pane is the window's last: no tail after it */
            *changed = true;
        }
        if (p->close && !g->closed) {
            /* A closing firing emitted the fresh values; nothing of the window stays. */
            gbk->n_values -= g->fresh;
            g->fresh = 0;
            g->closed = true;
            sd__gbk_values_clear(em, gbk, g);
            g->count = 0;
            *changed = true;
        }
        if (!p->drop) {
            continue;
        }
        *changed = true;
        gbk->n_groups--;
        sd__gbk_values_clear(em, gbk, g);
        if (p->list == NULL) {
            sd_map *map;
            sd_bytes gk;
            rc = group_slot(gbk, &id, &g->win, sd_bytes_make(g->key, g->key_len), &map, &gk);
            if (rc == SD_OK) {
                bool removed = sd_map_remove(map, gk);
                assert(removed);
                (void)removed;
            }
            continue;
        }
        sd_vec *list = p->list;
        for (size_t j = 0; j < list->len; j++) {
            if (*SD_VEC_AT(list, sd__group *, j) == g) {
                sd_vec_remove(list, j);
                break;
            }
        }
        if (list->len == 0) {
            bool removed = sd_map_remove(&gbk->sessions, sd_bytes_make(g->key, g->key_len));
            assert(removed);
            (void)removed;
        }
        group_destroy(g); /* the list held only a pointer to it */
    }
    sd_buf_deinit(&id);
    sd_vec_deinit(&picks);
    gbk->min_ts = sc.min_ts;
    gbk->tail_min_ts = sc.tail_min_ts;
    gbk->min_deadline = sc.min_deadline;
    if (rc == SD_OK) {
        pool_compact(gbk);
    }
    return rc;
}
