/*
 * Sundial: element manager time — watermark holds, timers, and TestStream events.
 *
 * Holds. A hold is a timestamp below which a stage's output watermark may not advance. The
 * engine keeps them per stage in a counted multiset (sd__tsbag): a hash map from timestamp to
 * count plus a min-heap of timestamps with lazy deletion, so add/remove are O(1) amortised and
 * the minimum is O(log n) amortised. Every stored timer owns exactly one hold (its hold
 * timestamp); a fired timer keeps it until the bundle that delivers it completes, so the
 * output watermark cannot pass a timer's hold before its firing has been processed.
 *
 * Timers. A stateful stage stores at most one timer per (family, window, key, tag): setting it
 * again replaces the earlier one (last write wins, within a bundle and across bundles), and a
 * clear removes it. Event-time timers become eligible when the stage's input watermark passes
 * their firing time (strictly; or when the input watermark is at the end of time), so all data
 * with timestamps up to the firing time has been processed first. Processing-time timers are
 * rebased on receipt onto the job clock (fire' = clock_now + (fire - wall_now)) and become
 * eligible when the job clock reaches them.
 *
 * Storage: the identity map owns the timers; each time domain also keeps an indexed min-heap
 * ordered by (due time, identity), each timer knowing its slot, so set/replace/clear/take are
 * O(log n) and "what fires next" (bundle building, the synthetic clock's next jump, the wall
 * clock's next wakeup) is the heap top, never a scan. The slots carry the due time beside the
 * pointer: sifting a heap of 100,000 timers then reads one compact array instead of chasing
 * pointers across the address space (measured: about twice as fast in bench_pt_timers).
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
 *
 * TestStream. Events are recorded before the job starts and applied one at a time, only when
 * the engine is quiescent (sd_em_next_bundle has nothing to hand out and nothing is in flight).
 * Trade-off: the synthetic clock does not jump while TestStream events remain — the
 * TestStream's processing-time events are the only way its clock moves — matching Prism.
 */
#include <assert.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* Timestamp multisets                                                                        */
/* ========================================================================================== */

static void ts_key(uint8_t k[8], sd_time t)
{
    uint64_t v = (uint64_t)t;
    for (int i = 7; i >= 0; i--) {
        k[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

static size_t tsbag_count(const sd__tsbag *b, sd_time t)
{
    uint8_t k[8];
    ts_key(k, t);
    return (size_t)(uintptr_t)sd_map_get(&b->counts, sd_bytes_make(k, 8));
}

static void heap_sift_up(sd_time *a, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (a[p] <= a[i]) {
            break;
        }
        sd_time t = a[p];
        a[p] = a[i];
        a[i] = t;
        i = p;
    }
}

static void heap_sift_down(sd_time *a, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && a[l] < a[m]) {
            m = l;
        }
        if (r < n && a[r] < a[m]) {
            m = r;
        }
        if (m == i) {
            return;
        }
        sd_time t = a[m];
        a[m] = a[i];
        a[i] = t;
        i = m;
    }
}

/* Rebuild the heap from the live timestamps when stale entries dominate. */
static void tsbag_compact(sd__tsbag *b)
{
    size_t it = 0, n = 0;
    sd_bytes k;
    sd_time *a = b->heap.items;
    if (b->heap.len < 2 * b->counts.len + 64) {
        return;
    }
    while (sd_map_next(&b->counts, &it, &k, NULL)) {
        uint64_t v = 0;
        for (size_t i = 0; i < 8; i++) {
            v = (v << 8) | k.ptr[i];
        }
        a[n++] = (sd_time)v;
    }
    b->heap.len = n;
    for (size_t i = n / 2 + 1; i-- > 0;) {
        heap_sift_down(a, n, i);
    }
}

void sd__tsbag_deinit(sd__tsbag *b)
{
    sd_map_deinit(&b->counts);
    sd_vec_deinit(&b->heap);
    b->total = 0;
}

sd_status sd__tsbag_add(sd__tsbag *b, sd_time t)
{
    uint8_t k[8];
    size_t c = tsbag_count(b, t);
    sd_status rc;
    ts_key(k, t);
    if (c == 0) {
        tsbag_compact(b);
        rc = sd_vec_push(&b->heap, &t);
        if (rc != SD_OK) {
            return rc;
        }
        heap_sift_up(b->heap.items, b->heap.len - 1);
    }
    rc = sd_map_put(&b->counts, sd_bytes_make(k, 8), (void *)(uintptr_t)(c + 1));
    if (rc != SD_OK) {
        return rc; /* the heap entry, if pushed, is stale and harmless */
    }
    b->total++;
    return SD_OK;
}

void sd__tsbag_remove(sd__tsbag *b, sd_time t)
{
    uint8_t k[8];
    size_t c = tsbag_count(b, t);
    ts_key(k, t);
    assert(c > 0);
    if (c == 0) {
        return;
    }
    if (c == 1) {
        sd_map_remove(&b->counts, sd_bytes_make(k, 8));
    } else {
        /* Replacing an existing key's value never allocates. */
        sd_status rc = sd_map_put(&b->counts, sd_bytes_make(k, 8), (void *)(uintptr_t)(c - 1));
        assert(rc == SD_OK);
        (void)rc;
    }
    b->total--;
}

sd_time sd__tsbag_min(sd__tsbag *b)
{
    sd_time *a = b->heap.items;
    while (b->heap.len > 0) {
        if (tsbag_count(b, a[0]) > 0) {
            return a[0];
        }
        a[0] = a[--b->heap.len];
        heap_sift_down(a, b->heap.len, 0);
    }
    return SD_TIME_MAX;
}

/* ========================================================================================== */
/* Timers                                                                                     */
/* ========================================================================================== */

void sd__timer_destroy(void *p)
{
    sd__timer *t = p;
    if (t == NULL) {
        return;
    }
    sd_free(t->key);
    sd_free(t->tag);
    sd_free(t);
}

sd_status
sd__timer_identity(sd_buf *out, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag)
{
    sd_status rc = sd_buf_put_be32(out, (uint32_t)family);
    if (rc == SD_OK) {
        rc = sd__win_put(out, w);
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_lp(out, key);
    }
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(out, tag);
    }
    return rc;
}

/* ---- the per-domain timer heaps ---------------------------------------------------------- */

static int cmp_bytes(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c != 0 || an == bn) {
        return c;
    }
    return an < bn ? -1 : 1;
}

int sd__timer_cmp(const sd__timer *a, const sd__timer *b)
{
    if (a->due != b->due) {
        return a->due < b->due ? -1 : 1;
    }
    if (a->family != b->family) {
        return a->family < b->family ? -1 : 1;
    }
    if (a->win.global != b->win.global) {
        return a->win.global ? 1 : -1;
    }
    if (a->win.start != b->win.start) {
        return a->win.start < b->win.start ? -1 : 1;
    }
    if (a->win.end != b->win.end) {
        return a->win.end < b->win.end ? -1 : 1;
    }
    int c = cmp_bytes(a->key, a->key_len, b->key, b->key_len);
    return c != 0 ? c : cmp_bytes(a->tag, a->tag_len, b->tag, b->tag_len);
}

static int slot_cmp(const sd__tslot *a, const sd__tslot *b)
{
    if (a->due != b->due) {
        return a->due < b->due ? -1 : 1;
    }
    return sd__timer_cmp(a->t, b->t);
}

static void theap_place(sd__theap *h, size_t i, sd__tslot s)
{
    h->items[i] = s;
    s.t->hpos = i;
}

static void theap_up(sd__theap *h, size_t i)
{
    sd__tslot s = h->items[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (slot_cmp(&h->items[p], &s) <= 0) {
            break;
        }
        theap_place(h, i, h->items[p]);
        i = p;
    }
    theap_place(h, i, s);
}

static void theap_down(sd__theap *h, size_t i)
{
    sd__tslot s = h->items[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const sd__tslot *best = &s;
        if (l < h->len && slot_cmp(&h->items[l], best) < 0) {
            m = l;
            best = &h->items[l];
        }
        if (r < h->len && slot_cmp(&h->items[r], best) < 0) {
            m = r;
        }
        if (m == i) {
            break;
        }
        theap_place(h, i, h->items[m]);
        i = m;
    }
    theap_place(h, i, s);
}

sd_status sd__theap_reserve(sd__theap *h, size_t n)
{
    if (h->len + n <= h->cap) {
        return SD_OK;
    }
    size_t cap = h->cap < 16 ? 16 : h->cap;
    while (cap < h->len + n) {
        cap *= 2;
    }
    sd__tslot *items = sd_realloc(h->items, cap * sizeof(*items));
    if (items == NULL) {
        return SD_ENOMEM;
    }
    h->items = items;
    h->cap = cap;
    return SD_OK;
}

void sd__theap_push(sd__theap *h, sd__timer *t)
{
    assert(h->len < h->cap);
    theap_place(h, h->len++, (sd__tslot){ .due = t->due, .t = t });
    theap_up(h, h->len - 1);
}

void sd__theap_remove(sd__theap *h, sd__timer *t)
{
    size_t i = t->hpos;
    assert(i < h->len && h->items[i].t == t);
    t->hpos = SIZE_MAX;
    sd__tslot last = h->items[--h->len];
    if (i == h->len) {
        return;
    }
    theap_place(h, i, last);
    theap_down(h, i);
    theap_up(h, last.t->hpos);
}

void sd__theap_deinit(sd__theap *h)
{
    sd_free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}

sd__theap *sd__timer_heap(sd__stage *st, const sd__timer *t)
{
    return st->families[t->family].processing_time ? &st->pt_heap : &st->et_heap;
}

/* When t becomes eligible (see sd__timer.due). */
static sd_time timer_due(const sd_em *em, const sd__stage *st, const sd__timer *t)
{
    const sd__family *f = &st->families[t->family];
    if (!f->window_expiration) {
        return t->fire;
    }
    const sd__pcoll *in = *SD_VEC_AT(&em->pcolls, sd__pcoll *, st->inputs[0]);
    return sd_time_add(sd__win_max_ts(&t->win), in->ws.allowed_lateness_ms);
}

sd_status sd__timer_set(sd_em *em, sd__stage *st, sd__timer *t)
{
    sd_buf *id = &em->scratch;
    sd_status rc;
    sd__theap *h = sd__timer_heap(st, t);
    t->due = timer_due(em, st, t);
    t->hpos = SIZE_MAX;
    sd_buf_reset(id);
    rc = sd__timer_identity(id, t->family, &t->win, sd_bytes_make(t->key, t->key_len),
                            sd_bytes_make(t->tag, t->tag_len));
    if (rc == SD_OK) {
        rc = sd__theap_reserve(h, 1);
    }
    if (rc == SD_OK) {
        rc = sd__tsbag_add(&st->holds, t->hold);
    }
    if (rc != SD_OK) {
        sd__timer_destroy(t);
        return rc;
    }
    sd__timer *old = sd_map_take(&st->timers, sd_buf_bytes(id));
    rc = sd_map_put(&st->timers, sd_buf_bytes(id), t);
    if (old != NULL) {
        sd__tsbag_remove(&st->holds, old->hold);
        sd__theap_remove(sd__timer_heap(st, old), old);
        sd__timer_destroy(old);
    }
    if (rc != SD_OK) {
        sd__tsbag_remove(&st->holds, t->hold);
        sd__timer_destroy(t);
        return rc;
    }
    sd__theap_push(h, t);
    return SD_OK;
}

void sd__timer_remove(sd_em *em, sd__stage *st, sd__timer *probe)
{
    sd_buf *id = &em->scratch;
    sd_buf_reset(id);
    if (sd__timer_identity(id, probe->family, &probe->win,
                           sd_bytes_make(probe->key, probe->key_len),
                           sd_bytes_make(probe->tag, probe->tag_len)) != SD_OK) {
        /* Only an allocation can fail here; the identity cannot be built, so nothing matches
         * and the clear is lost. Poison rather than ignore it. */
        em->poisoned = true;
        return;
    }
    sd__timer *old = sd_map_take(&st->timers, sd_buf_bytes(id));
    if (old != NULL) {
        sd__tsbag_remove(&st->holds, old->hold);
        sd__theap_remove(sd__timer_heap(st, old), old);
        sd__timer_destroy(old);
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
    sd_time due = sd_time_add(max_ts, in->ws.allowed_lateness_ms);
    if (due < st->in_wm || st->in_wm >= SD_TIME_MAX) {
        return SD_OK; /* already expired (its timer, if any, fired): no second notification */
    }
    sd_buf *id = &em->scratch;
    sd_buf_reset(id);
    sd_status rc = sd__timer_identity(id, st->expiration_family, w, key, SD_BYTES_NULL);
    if (rc != SD_OK || sd_map_get(&st->timers, sd_buf_bytes(id)) != NULL) {
        return rc;
    }
    sd__timer *t = sd_calloc(1, sizeof(*t));
    if (t == NULL) {
        return SD_ENOMEM;
    }
    t->family = st->expiration_family;
    t->win = *w;
    t->key = sd_memdup(key.ptr, key.len);
    t->key_len = key.len;
    t->tag = sd_malloc(1);
    t->tag_len = 0;
    if (t->key == NULL || t->tag == NULL) {
        sd__timer_destroy(t);
        return SD_ENOMEM;
    }
    t->fire = max_ts;
    t->hold = max_ts;
    t->pane = SD_PANE_NO_FIRING;
    return sd__timer_set(em, st, t);
}

/* ========================================================================================== */
/* TestStream events                                                                          */
/* ========================================================================================== */

static sd_status ts_target(sd_em *em,
                           const char *stage_id,
                           const char *pcollection,
                           sd__stage **out_stage,
                           size_t *out_pcoll,
                           sd_err *err)
{
    if (em == NULL || stage_id == NULL) {
        return sd_err_set(err, SD_EINVAL, "teststream: em and stage id are required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "teststream \"%s\": events must be added before start",
                          stage_id);
    }
    sd__stage *st = sd_map_get_str(&em->stage_by_id, stage_id);
    if (st == NULL || st->kind != SD_STAGE_TESTSTREAM) {
        return sd_err_set(err, SD_ENOTFOUND, "teststream \"%s\": no such TestStream stage",
                          stage_id);
    }
    *out_stage = st;
    if (pcollection == NULL) {
        return SD_OK;
    }
    for (size_t i = 0; i < st->n_outputs; i++) {
        sd__pcoll *pc = *SD_VEC_AT(&em->pcolls, sd__pcoll *, st->outputs[i]);
        if (strcmp(pc->id, pcollection) == 0) {
            *out_pcoll = pc->index;
            return SD_OK;
        }
    }
    return sd_err_set(err, SD_ENOTFOUND, "teststream \"%s\": \"%s\" is not one of its outputs",
                      stage_id, pcollection);
}

sd_status sd_em_teststream_add_elements(sd_em *em,
                                        const char *stage_id,
                                        const char *pcollection,
                                        const sd_bytes *elements,
                                        const sd_time *timestamps,
                                        size_t n,
                                        sd_err *err)
{
    sd__stage *st = NULL;
    size_t pcoll = 0, total = 0;
    sd_status rc = ts_target(em, stage_id, pcollection, &st, &pcoll, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (pcollection == NULL) {
        return sd_err_set(err, SD_EINVAL, "teststream \"%s\": elements need an output", stage_id);
    }
    for (size_t i = 0; i < n; i++) {
        total += elements[i].len;
        if (timestamps[i] < SD_TIME_MIN || timestamps[i] > SD_TIME_MAX) {
            return sd_err_set(err, SD_EINVAL,
                              "teststream \"%s\": element %zu timestamp out of "
                              "range",
                              stage_id, i);
        }
    }
    sd__ts_event ev = { .kind = SD__TS_ELEMENTS, .pcoll = pcoll, .n = n };
    uint8_t *data = sd_malloc(total == 0 ? 1 : total);
    ev.offs = sd_calloc(n + 1, sizeof(size_t));
    ev.lens = sd_calloc(n + 1, sizeof(size_t));
    ev.times = sd_calloc(n + 1, sizeof(sd_time));
    if (data == NULL || ev.offs == NULL || ev.lens == NULL || ev.times == NULL) {
        sd_free(data);
        rc = SD_ENOMEM;
        goto fail;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (elements[i].len > 0) {
            memcpy(data + off, elements[i].ptr, elements[i].len);
        }
        ev.offs[i] = off;
        ev.lens[i] = elements[i].len;
        ev.times[i] = timestamps[i];
        off += elements[i].len;
    }
    ev.slab = sd__slab_create(data, total);
    if (ev.slab == NULL) {
        rc = SD_ENOMEM;
        goto fail;
    }
    rc = sd_vec_push(&st->ts_events, &ev);
    if (rc == SD_OK) {
        return SD_OK;
    }
fail:
    sd__slab_unref(ev.slab);
    sd_free(ev.offs);
    sd_free(ev.lens);
    sd_free(ev.times);
    return rc;
}

sd_status sd_em_teststream_advance_watermark(sd_em *em,
                                             const char *stage_id,
                                             const char *pcollection,
                                             sd_time wm,
                                             sd_err *err)
{
    sd__stage *st = NULL;
    size_t pcoll = 0;
    sd_status rc = ts_target(em, stage_id, pcollection, &st, &pcoll, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (pcollection == NULL) {
        return sd_err_set(err, SD_EINVAL, "teststream \"%s\": watermark needs an output", stage_id);
    }
    for (size_t i = 0; i < st->ts_events.len; i++) {
        const sd__ts_event *ev = SD_VEC_AT(&st->ts_events, sd__ts_event, i);
        if (ev->kind == SD__TS_WATERMARK && ev->pcoll == pcoll && ev->wm > wm) {
            return sd_err_set(err, SD_EINVAL,
                              "teststream \"%s\": watermark of \"%s\" would go back from %lld to "
                              "%lld",
                              stage_id, pcollection, (long long)ev->wm, (long long)wm);
        }
    }
    sd__ts_event ev = { .kind = SD__TS_WATERMARK, .pcoll = pcoll, .wm = sd_time_clamp(wm) };
    return sd_vec_push(&st->ts_events, &ev);
}

sd_status
sd_em_teststream_advance_clock(sd_em *em, const char *stage_id, int64_t advance_ms, sd_err *err)
{
    sd__stage *st = NULL;
    sd_status rc = ts_target(em, stage_id, NULL, &st, NULL, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (advance_ms < 0) {
        return sd_err_set(err, SD_EINVAL, "teststream \"%s\": clock cannot go back (%lld ms)",
                          stage_id, (long long)advance_ms);
    }
    sd__ts_event ev = { .kind = SD__TS_CLOCK, .advance_ms = advance_ms };
    return sd_vec_push(&st->ts_events, &ev);
}
