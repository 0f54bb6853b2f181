/*
 * Sundial: building SDK bundles, and the accessors the executor reads them through.
 *
 * sd__em_make_bundle (called by the scheduler in em.c) cuts one bundle for one SDK stage: it
 * takes pending elements (oldest first, or at seeded random positions), skipping keys another
 * in-flight bundle holds on a stateful stage and locking the keys it takes; it takes eligible
 * timers (take_timers) and encodes them per family; it honours the element and byte caps, the
 * bundle shape (one key, one element) and the stage's own cap (em_size.c: its output cap and
 * its spread share). A bundle in flight holds its stage's input watermark at its oldest
 * element.
 *
 * The second half is the bundle API of em.h that the executor uses while the SDK runs:
 * the id, stage, input bytes and pieces, timer inputs and watermark, and the calls that
 * collect results (outputs, timers, residuals, channel splits) into the bundle for
 * em_complete.c to decode and apply.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* Bundles                                                                                    */
/* ========================================================================================== */

void sd__bundle_destroy(sd_bundle *b)
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
    sd_vec_deinit(&b->timer_inputs);
    sd_buf_deinit(&b->timer_bytes);
    sd_vec_deinit(&b->fired);
    if (b->outputs != NULL) {
        for (size_t i = 0; i < st->n_outputs; i++) {
            sd__outstream_deinit(&b->outputs[i]);
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

/* ---- key locks --------------------------------------------------------------------------- */
/*
 * A table of its own rather than an sd_map: locking and unlocking the key of every bundle (on
 * the synthetic clock, of every processing-time timer firing) cost an sd_map four lookups, a
 * copy of the key and its free; here a key is hashed once a lock and once an unlock, and never
 * copied again (measured with callgrind in bench_pt_timers: a seventh of the engine's
 * instructions).
 */

static bool klock_is(const sd__klock *l, uint64_t hash, sd_bytes key)
{
    return l->hash == hash && l->len == key.len &&
           (key.len == 0 || memcmp(l->owner->locked.data + l->off, key.ptr, key.len) == 0);
}

static sd_bundle *klock_find(const sd__klocks *kl, sd_bytes key, uint64_t hash)
{
    if (kl->len == 0) {
        return NULL;
    }
    size_t mask = kl->cap - 1;
    for (size_t i = (size_t)hash & mask; kl->slots[i].owner != NULL; i = (i + 1) & mask) {
        if (klock_is(&kl->slots[i], hash, key)) {
            return kl->slots[i].owner;
        }
    }
    return NULL;
}

sd_bundle *sd__key_owner(const sd__klocks *kl, sd_bytes key)
{
    return klock_find(kl, key, sd_hash_words(key.ptr, key.len, 0));
}

static void klock_place(sd__klock *slots, size_t cap, const sd__klock *l)
{
    size_t i = (size_t)l->hash & (cap - 1);
    while (slots[i].owner != NULL) {
        i = (i + 1) & (cap - 1);
    }
    slots[i] = *l;
}

/* Add a lock (its key is not locked), keeping the table at most half full. */
static sd_status klock_add(sd__klocks *kl, const sd__klock *l)
{
    if ((kl->len + 1) * 2 > kl->cap) {
        size_t cap = kl->cap < 16 ? 16 : kl->cap * 2;
        sd__klock *slots = sd_calloc(cap, sizeof(*slots));
        if (slots == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < kl->cap; i++) {
            if (kl->slots[i].owner != NULL) {
                klock_place(slots, cap, &kl->slots[i]);
            }
        }
        sd_free(kl->slots);
        kl->slots = slots;
        kl->cap = cap;
    }
    klock_place(kl->slots, kl->cap, l);
    kl->len++;
    return SD_OK;
}

/* Remove b's lock on the key at off in b->locked, if b holds it. */
static void klock_remove(sd__klocks *kl, uint64_t hash, const sd_bundle *b, size_t off)
{
    if (kl->len == 0) {
        return;
    }
    size_t mask = kl->cap - 1, i = (size_t)hash & mask;
    while (kl->slots[i].owner != NULL &&
           !(kl->slots[i].owner == b && kl->slots[i].off == off && kl->slots[i].hash == hash)) {
        i = (i + 1) & mask;
    }
    if (kl->slots[i].owner == NULL) {
        return;
    }
    /* Backward shift, as in the timer table (em_ttable.c). */
    for (size_t j = (i + 1) & mask; kl->slots[j].owner != NULL; j = (j + 1) & mask) {
        size_t home = (size_t)kl->slots[j].hash & mask;
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            kl->slots[i] = kl->slots[j];
            i = j;
        }
    }
    kl->slots[i].owner = NULL;
    kl->len--;
}

bool sd__klocks_next(const sd__klocks *kl, size_t *it, const sd__klock **l)
{
    while (*it < kl->cap) {
        const sd__klock *x = &kl->slots[(*it)++];
        if (x->owner != NULL) {
            *l = x;
            return true;
        }
    }
    return false;
}

void sd__klocks_deinit(sd__klocks *kl)
{
    sd_free(kl->slots);
    kl->slots = NULL;
    kl->cap = kl->len = 0;
}

/* key (hash: sd_hash_words(key, 0)) is held by a bundle other than self. */
static bool
key_locked_by_other(const sd__stage *st, sd_bytes key, uint64_t hash, const sd_bundle *self)
{
    sd_bundle *owner = klock_find(&st->key_locks, key, hash);
    return owner != NULL && owner != self;
}

/* Lock key (hash: sd_hash_words(key, 0)) for b (no other bundle holds it: the callers
 * checked); the bundle keeps its own copy of every key it locked, with its hash, in b->locked
 * (the hash's 8 bytes, then the key length-prefixed), which the lock refers to. */
static sd_status lock_key(sd__stage *st, sd_bytes key, uint64_t hash, sd_bundle *b)
{
    sd_bundle *owner = klock_find(&st->key_locks, key, hash);
    if (owner != NULL) {
        assert(owner == b);
        return owner == b ? SD_OK : SD_EINTERNAL;
    }
    size_t before = b->locked.len;
    sd_status rc = sd_buf_append(&b->locked, &hash, sizeof(hash));
    if (rc == SD_OK) {
        rc = sd_buf_put_lp(&b->locked, key);
    }
    if (rc == SD_OK) {
        sd__klock l = { .hash = hash, .owner = b, .off = b->locked.len - key.len, .len = key.len };
        rc = klock_add(&st->key_locks, &l);
    }
    if (rc != SD_OK) {
        b->locked.len = before;
    }
    return rc;
}

/*
 * Side-input readiness. A main-input element may go into a bundle only when every side input is
 * complete for the side window the SDK will read for it: the side window fn's window for the
 * main window's max timestamp (Beam's default window mappings: the fixed window containing it,
 * the sliding window starting last that contains it, the global window), complete once the
 * side input's watermark has passed its max timestamp. The global window's is passed only by a
 * finished side input; windows the runner cannot interpret map to themselves.
 *
 * The main window is the element's, except when the stage's input is in the global window and
 * the consuming transform's main input is not (sd__side.rewindowed): then the windows are
 * assigned inside the stage by a WindowInto fused before the ParDo that reads the side input
 * (Java's Wait.on over a TestStream, a Python WindowInto then a side-input Map), and the main
 * window is the one the consumer's window fn gives the element's timestamp (element-wise
 * transforms in between keep timestamps). Without this such a stage would wait for its side
 * inputs to finish, and a window a test expects released before the next TestStream event
 * would be released only at the end.
 *
 * Triggered side inputs (the side PCollection's windowing has a non-default trigger, as
 * Beam's programming guide puts it: "if the side input has multiple trigger firings, Beam uses
 * the value from the latest trigger firing"): the side window is also ready as soon as it holds
 * a firing, before the watermark passes its end (a global-window side input before it
 * finishes). The store keeps only the latest firing per window (sd__side_add). A firing that
 * arrives while bundles of the reading stage are in flight is staged, and the stage takes no new
 * bundle until they finish and the firing is applied: a bundle reads the view as it was when
 * cut, and an element cut after a firing sees it, whatever the overlap of bundles.
 *
 * A side window that is still empty when the watermark passes its end is not complete while
 * the side input's allowed lateness lets late data in: it is ready once something arrives in
 * it, or once the watermark passes its end plus the allowed lateness (when the window
 * expires). Beam's direct runner reads side inputs the same way (a window with contents, or
 * an expired one). Java's Wait.on depends on it: its signal view fires only at expiry
 * (Never.ever()), and a main window released at the end of an empty signal window would see
 * late signal panes of earlier windows arrive after it.
 */

/* The latest max timestamp of the windows ws assigns an element at ts (for sessions, the
 * element's own extent: merging only widens it); SD_TIME_MAX when it cannot be known. */
static sd_time assigned_max_ts(const sd_windowing *ws, sd_time ts)
{
    int64_t period = ws->kind == SD_WINDOWFN_SLIDING ? ws->period_ms : ws->size_ms;
    switch (ws->kind) {
    case SD_WINDOWFN_GLOBAL:
        return SD_TIME_GLOBAL_MAX;
    case SD_WINDOWFN_FIXED:
    case SD_WINDOWFN_SLIDING: {
        if (period <= 0 || ws->size_ms <= 0) {
            return SD_TIME_MAX;
        }
        /* The last window starting at or before ts: start = ts - ((ts - offset) mod period). */
        int64_t r = ts % period - ws->offset_ms % period;
        while (r < 0) {
            r += period;
        }
        sd_time end = sd_time_add(sd_time_add(ts, -r), ws->size_ms);
        return end >= SD_TIME_MAX ? SD_TIME_MAX : end - 1;
    }
    case SD_WINDOWFN_SESSIONS: {
        sd_time end = sd_time_add(ts, ws->gap_ms);
        return end >= SD_TIME_MAX ? SD_TIME_MAX : end - 1;
    }
    case SD_WINDOWFN_CUSTOM:
        break;
    }
    return SD_TIME_MAX;
}

/* The fixed or sliding side window of pc whose max timestamp is side_max (< the global max). */
static sd__win interval_side_window(const sd__pcoll *pc, sd_time side_max)
{
    return (sd__win){ .start = sd_time_add(side_max + 1, -pc->ws.size_ms), .end = side_max + 1 };
}

/* A triggered side input (s->triggered) is also ready for e once the side window the SDK will
 * read, side_max being its max timestamp, holds a firing (the rule above). */
static bool
triggered_ready(const sd__side *s, const sd__pcoll *pc, const sd__elem *e, sd_time side_max)
{
    sd__win w = { .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true };
    switch (pc->ws.kind) {
    case SD_WINDOWFN_GLOBAL:
        break;
    case SD_WINDOWFN_FIXED:
    case SD_WINDOWFN_SLIDING:
        if (side_max >= SD_TIME_GLOBAL_MAX) {
            return false;
        }
        w = interval_side_window(pc, side_max);
        break;
    default:
        if (s->rewindowed) {
            return false;
        }
        w = e->win;
        break;
    }
    return sd__side_has_window(s, &w);
}

/* A fixed or sliding side window (max timestamp side_max) whose watermark has passed but
 * which holds nothing yet, while late data may still fill it: the side input's allowed
 * lateness has not passed (the rule above). */
static bool empty_until_expiry(const sd__side *s, const sd__pcoll *pc, sd_time side_max)
{
    if ((pc->ws.kind != SD_WINDOWFN_FIXED && pc->ws.kind != SD_WINDOWFN_SLIDING) ||
        side_max >= SD_TIME_GLOBAL_MAX) {
        return false;
    }
    sd__win w = interval_side_window(pc, side_max);
    if (sd__win_is_expired(&w, pc->ws.allowed_lateness_ms, pc->wm)) {
        return false; /* expired: empty for good */
    }
    return !sd__side_has_window(s, &w);
}

/* Every side input of st is complete for e (the rule above). */
static bool elem_sides_ready(const sd_em *em, const sd__stage *st, const sd__elem *e)
{
    for (size_t i = 0; i < st->n_sides; i++) {
        const sd__side *s = &st->sides[i];
        const sd__pcoll *pc = sd__em_pcoll_at(em, s->pcoll);
        if (pc->wm >= SD_TIME_MAX) {
            continue;
        }
        sd_time main_max =
            s->rewindowed ? assigned_max_ts(&s->main, e->ts) : sd__win_max_ts(&e->win);
        sd_time need = main_max;
        switch (pc->ws.kind) {
        case SD_WINDOWFN_GLOBAL:
            need = SD_TIME_MAX;
            break;
        case SD_WINDOWFN_FIXED:
        case SD_WINDOWFN_SLIDING:
            need =
                main_max >= SD_TIME_GLOBAL_MAX ? SD_TIME_MAX : assigned_max_ts(&pc->ws, main_max);
            break;
        default:
            break;
        }
        if (need >= pc->wm && !(s->triggered && triggered_ready(s, pc, e, need))) {
            return false;
        }
        if (need < pc->wm && pc->ws.allowed_lateness_ms > 0 && empty_until_expiry(s, pc, need)) {
            return false;
        }
    }
    return true;
}

/* Every side input of st is finished. */
static bool sides_finished(const sd_em *em, const sd__stage *st)
{
    for (size_t i = 0; i < st->n_sides; i++) {
        if (sd__em_pcoll_at(em, st->sides[i].pcoll)->wm < SD_TIME_MAX) {
            return false;
        }
    }
    return true;
}

/* Timers (whose windows the engine does not map) wait for the older, whole-stage rule: every
 * side input caught up with the stage's main input. */
static bool sides_ready(const sd_em *em, const sd__stage *st)
{
    sd_time up = sd__em_upstream_wm(em, st);
    for (size_t i = 0; i < st->n_sides; i++) {
        if (sd__em_pcoll_at(em, st->sides[i].pcoll)->wm < up) {
            return false;
        }
    }
    return true;
}

static sd_status
encode_elem(const sd_em *em, const sd__pcoll *pc, const sd__elem *e, sd_buf *out, sd_err *err)
{
    sd_status rc = SD_OK;
    if (!pc->param_wv) {
        sd_window w = sd__win_to(em, &e->win);
        rc = sd_wv_encode_header(out, pc->window_coder, e->ts, &w, 1, &e->pane, err);
        if (rc != SD_OK) {
            sd_err_prefix(err, "pcollection \"%s\": an element's header: ", pc->id);
            return rc;
        }
    }
    rc = sd_buf_append(out, e->slab->data + e->off, e->len);
    if (rc != SD_OK) {
        return sd_err_set(err, rc, "pcollection \"%s\": out of memory for a bundle's input",
                          pc->id);
    }
    return SD_OK;
}

static bool timers_ready(const sd_em *em, const sd__stage *st)
{
    return sd__timers_ready(em, st);
}

/* The next eligible timer: the earlier of the two domains' eligible tops, or NULL. */
static sd__timer *next_eligible(const sd_em *em, const sd__stage *st)
{
    sd__timer *a = sd__timer_top_eligible(em, st, true);
    sd__timer *e = sd__timer_top_eligible(em, st, false);
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

size_t sd__em_rng_below(sd_em *em, size_t n)
{
    return n <= 1 ? 0 : (size_t)(rng_next(em) % n);
}

static void shuffle_ptrs(sd_em *em, void **a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = sd__em_rng_below(em, i);
        void *t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/*
 * Per key and time domain, the first candidate take_timers took: a key's later timers wait
 * for a later bundle. Few candidates (the common case: the synthetic clock hands out one due
 * timer at a time) are searched in place; past FIRST_SCAN_MAX the map takes over, so a
 * watermark releasing 100,000 timers at once stays linear.
 */
#define FIRST_SCAN_MAX 16

typedef struct first_index {
    sd_map map;   /* domain byte + key -> first sd__timer * (once cands passed the bound) */
    bool mapped;  /* every candidate so far is in map */
    sd_buf kbuf;  /* scratch: the map's key */
    sd_status rc; /* the first allocation failure */
} first_index;

static bool same_slot(const sd__stage *st, const sd__timer *a, const sd__timer *b)
{
    return st->families[a->family].processing_time == st->families[b->family].processing_time &&
           sd_bytes_equal(sd_bytes_make(a->key, a->key_len), sd_bytes_make(b->key, b->key_len));
}

static sd_bytes first_key(const sd__stage *st, first_index *fi, const sd__timer *t)
{
    sd_buf_reset(&fi->kbuf);
    sd_status rc = sd_buf_append_byte(&fi->kbuf, st->families[t->family].processing_time ? 1 : 0);
    if (rc == SD_OK) {
        rc = sd_buf_append(&fi->kbuf, t->key, t->key_len);
    }
    fi->rc = rc;
    return sd_buf_bytes(&fi->kbuf);
}

/* The first candidate of t's key and domain among cands[0, n), or NULL. */
static sd__timer *
first_of(const sd__stage *st, first_index *fi, sd__timer *const *cands, size_t n, sd__timer *t)
{
    if (fi->mapped) {
        sd_bytes k = first_key(st, fi, t);
        return fi->rc == SD_OK ? sd_map_get(&fi->map, k) : NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (same_slot(st, cands[i], t)) {
            return cands[i];
        }
    }
    return NULL;
}

/* cands[n - 1] was just taken: note it as its key's first unless one came earlier. */
static sd_status note_first(const sd__stage *st, first_index *fi, sd__timer *const *cands, size_t n)
{
    if (!fi->mapped && n <= FIRST_SCAN_MAX) {
        return SD_OK;
    }
    size_t from = fi->mapped ? n - 1 : 0;
    fi->mapped = true;
    for (size_t i = from; i < n; i++) {
        sd_bytes k = first_key(st, fi, cands[i]);
        if (fi->rc == SD_OK && sd_map_get(&fi->map, k) == NULL) {
            fi->rc = sd_map_put(&fi->map, k, cands[i]);
        }
        if (fi->rc != SD_OK) {
            return fi->rc;
        }
    }
    return SD_OK;
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
    if (st->timers.len == 0 || room == 0 || !timers_ready(em, st)) {
        return SD_OK;
    }
    /* The engine's scratch vectors: no allocation per bundle once they have grown. */
    sd_vec *skipped = &em->timer_skipped, *cands = &em->timer_cands;
    skipped->len = 0;
    cands->len = 0;
    /* Per key and time domain, the first candidate taken: a key's later timers wait for a
     * later bundle, so a key's timers fire in time order whatever their families (the SDK
     * runs each family's timers as one stream), and an earlier timer's callback can still
     * clear or move a later one before it fires (Python's clearing-timer tests). */
    first_index fi = { .mapped = false, .rc = SD_OK };
    sd_map_init(&fi.map, NULL);
    sd_buf_init(&fi.kbuf, 0);
    size_t limit = room;
    if (em->cfg.schedule_seed != 0 && room < SIZE_MAX / 8) {
        limit = room * 4 + 4;
    }
    sd__timer *t;
    while (cands->len < limit && (t = next_eligible(em, st)) != NULL) {
        sd__theap *h = sd__timer_heap(st, t);
        sd__theap_pop(h);                    /* t: next_eligible gives a heap's top */
        sd__timers_prefetch(&st->timers, t); /* taken below, if it is taken */
        sd__timers_prefetch_ahead(&st->timers, h);
        sd_bytes tk = sd_bytes_make(t->key, t->key_len);
        bool other_key = one_key && key->ptr != NULL && !sd_bytes_equal(tk, *key);
        bool later = false;
        if (!other_key) {
            sd__timer *first = first_of(st, &fi, cands->items, cands->len, t);
            rc = fi.rc;
            later = first != NULL && first->due < t->due;
        }
        if (rc != SD_OK) {
            sd__theap_push(sd__timer_heap(st, t), t);
            break;
        }
        if (later || other_key || key_locked_by_other(st, tk, t->key_hash, b)) {
            rc = sd_vec_push(skipped, &t);
            if (rc != SD_OK || skipped->len >= 4096) {
                if (rc != SD_OK) {
                    sd__theap_push(sd__timer_heap(st, t), t);
                }
                break;
            }
            continue;
        }
        rc = sd_vec_push(cands, &t);
        if (rc == SD_OK) {
            rc = note_first(st, &fi, cands->items, cands->len);
            if (rc != SD_OK) {
                cands->len--;
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
    sd__timer **c = cands->items;
    if (em->cfg.schedule_seed != 0) {
        shuffle_ptrs(em, (void **)c, cands->len);
    }
    size_t take = SD_MIN(room, cands->len), i = 0;
    if (rc == SD_OK) {
        rc = sd_vec_reserve(&b->fired, b->fired.len + take);
    }
    for (; rc == SD_OK && i < take; i++) {
        t = c[i];
        rc = lock_key(st, sd_bytes_make(t->key, t->key_len), t->key_hash, b);
        if (rc != SD_OK) {
            break;
        }
        /* The hold stays in the stage's bag until the bundle completes. */
        sd__timers_remove(&st->timers, t);
        rc = sd_vec_push(&b->fired, &t);
        assert(rc == SD_OK);
        sd__trace_timer(em, st, SD_TRACE_TIMER_FIRE, t);
    }
    for (; i < cands->len; i++) {
        sd__theap_push(sd__timer_heap(st, c[i]), c[i]);
    }
    for (size_t j = 0; j < skipped->len; j++) {
        t = *SD_VEC_AT(skipped, sd__timer *, j);
        sd__theap_push(sd__timer_heap(st, t), t);
    }
    skipped->len = 0;
    cands->len = 0;
    sd_map_deinit(&fi.map);
    sd_buf_deinit(&fi.kbuf);
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
                ti->off = b->timer_bytes.len;
            }
            sd_window w = sd__win_to(em, &t->win);
            sd_timer *enc = &em->timer_enc; /* scratch: one window never needs its heap */
            enc->key = sd_bytes_make(t->key, t->key_len);
            enc->tag = sd__timer_tag(t);
            rc = sd_windows_set(&enc->windows, &w, 1);
            enc->clear = false;
            enc->fire = t->fire;
            enc->hold = t->hold;
            enc->pane = t->pane;
            if (rc == SD_OK) {
                rc = sd_timer_encode(st->families[f].timer_coder, enc, &b->timer_bytes, err);
            }
            ti->len = b->timer_bytes.len - ti->off;
        }
    }
    return rc;
}

/* Give back what a bundle took: inputs [from, n_primary) and (when all) its fired timers. */
sd_status sd__bundle_return_inputs(sd__stage *st, sd_bundle *b, size_t from)
{
    sd_status rc = SD_OK;
    for (size_t i = from; i < b->n_primary; i++) {
        sd__elem *e = SD_VEC_AT(&b->elems, sd__elem, i);
        if (rc == SD_OK) {
            rc = sd__elem_heap_push(&st->pending, e);
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

void sd__bundle_unlock_keys(sd__stage *st, sd_bundle *b)
{
    sd_reader r = sd_reader_make(sd_buf_bytes(&b->locked));
    sd_bytes h, key;
    while (sd_reader_take(&r, sizeof(uint64_t), &h) == SD_OK && sd_reader_lp(&r, &key) == SD_OK) {
        uint64_t hash;
        memcpy(&hash, h.ptr, sizeof(hash));
        klock_remove(&st->key_locks, hash, b, (size_t)(key.ptr - b->locked.data));
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

void sd__bundle_unlink(sd_em *em, sd__stage *st, sd_bundle *b)
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

/* Count st's bundles up (bundle_seq and its decimal digits) and write "<stage>-<seq>" into
 * name (room for any seq: strlen(stage) + 22 bytes). By hand, and the digits counted up in
 * place rather than divided out: printf cost more than the rest of a one-timer bundle, and
 * the divisions were still the costliest line of making one. */
static void bundle_name(char *name, sd__stage *st)
{
    char *d = st->seq_digits;
    size_t i = st->seq_len;
    st->bundle_seq++;
    while (i > 0 && d[i - 1] == '9') {
        d[--i] = '0';
    }
    if (i > 0) {
        d[i - 1]++;
    } else { /* all nines (or the first bundle): one digit more */
        memmove(d + 1, d, st->seq_len);
        d[0] = '1';
        st->seq_len++;
    }
    size_t len = strlen(st->id);
    memcpy(name, st->id, len);
    name[len] = '-';
    memcpy(name + len + 1, d, st->seq_len);
    name[len + 1 + st->seq_len] = 0;
}

/* What one bundle may take, worked out once by sd__em_make_bundle. */
typedef struct bundle_plan {
    size_t max_elems; /* input elements (and timers) at most; 0: no limit */
    size_t max_bytes; /* encoded input bytes at most (past the first element); 0: no limit */
    bool one_key;     /* the one-key shape: every element and timer of one key */
    bool seeded;      /* take elements at random heap positions (schedule seed) */
    bool sides_done;  /* every side input is finished */
    sd_bytes key;     /* one-key shape: the key of this bundle, once known */
} bundle_plan;

/* The side inputs of st are complete for e (elem_sides_ready). */
static bool
elem_ready(const sd_em *em, const sd__stage *st, const bundle_plan *p, const sd__elem *e)
{
    return p->sides_done || elem_sides_ready(em, st, e);
}

/* An empty bundle of st, reading in_pc (the stage's spare, if it has one); NULL when out of
 * memory. */
static sd_bundle *bundle_alloc(sd__stage *st, const sd__pcoll *in_pc)
{
    sd_bundle *b = st->spare;
    if (b != NULL) {
        st->spare = NULL;
    } else {
        b = sd_calloc(1, sizeof(*b));
        if (b == NULL) {
            return NULL;
        }
        sd_vec_init(&b->elems, sizeof(sd__elem));
        sd_vec_init(&b->input_ends, sizeof(size_t));
        sd_vec_init(&b->timer_inputs, sizeof(sd__timer_input));
        sd_vec_init(&b->fired, sizeof(sd__timer *));
        sd_vec_init(&b->residuals, sizeof(sd__residual));
        sd_map_init(&b->deltas, sd__state_delta_destroy);
        sd_buf_init(&b->input, 0);
        sd_buf_init(&b->timer_bytes, 0);
        sd_buf_init(&b->locked, 0);
    }
    b->magic = SD__BUNDLE_MAGIC;
    b->stage = st;
    b->input_pcoll = in_pc->id;
    b->min_ts = SD_TIME_MAX;
    b->watermark = st->in_wm;
    return b;
}

/*
 * Move pending elements into b: oldest first (with a schedule seed: in random order).
 * Stateful stages skip keys another bundle holds; the one-key shape skips keys other than the
 * bundle's. Skipped elements go back to the pending heap before this returns.
 */
static sd_status take_elements(sd_em *em,
                               sd__stage *st,
                               sd_bundle *b,
                               const sd__pcoll *in_pc,
                               bundle_plan *p,
                               sd_err *err)
{
    sd_status rc = SD_OK;
    sd_vec skipped;
    sd_vec_init(&skipped, sizeof(sd__elem));
    while (rc == SD_OK && st->pending.len > 0) {
        if (p->max_elems > 0 && b->elems.len >= p->max_elems) {
            break;
        }
        /* Bound the work per pass when hot keys are in flight (or, one-key shape, other keys
         * are pending): the rest waits for a later pass, so progress is kept. */
        if (skipped.len >= 4096) {
            break;
        }
        sd__elem e;
        size_t at = p->seeded ? sd__em_rng_below(em, st->pending.len) : 0;
        bool ready = elem_ready(em, st, p, SD_VEC_AT(&st->pending, sd__elem, at));
        if (!ready && !p->seeded) {
            break; /* the oldest element's side windows are not complete yet */
        }
        sd__elem_heap_take(&st->pending, at, &e);
        sd_bytes key = sd_bytes_make(e.slab->data + e.off, e.key_len);
        uint64_t kh = st->stateful ? sd_hash_words(key.ptr, key.len, 0) : 0;
        if (!ready || (st->stateful && key_locked_by_other(st, key, kh, b)) ||
            (p->one_key && p->key.ptr != NULL && !sd_bytes_equal(key, p->key))) {
            rc = sd_vec_push(&skipped, &e);
            if (rc != SD_OK) {
                rc = sd__elem_heap_push(&st->pending, &e) == SD_OK ? SD_ENOMEM : SD_EINTERNAL;
            }
            continue;
        }
        size_t before = b->input.len;
        rc = encode_elem(em, in_pc, &e, &b->input, err);
        if (rc == SD_OK && p->max_bytes > 0 && b->input.len > p->max_bytes && b->elems.len > 0) {
            b->input.len = before;
            rc = sd__elem_heap_push(&st->pending, &e);
            break;
        }
        if (rc == SD_OK && st->stateful) {
            rc = lock_key(st, key, kh, b);
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
            if (sd__elem_heap_push(&st->pending, &e) != SD_OK) {
                sd__slab_unref(e.slab);
            }
            break;
        }
        if (p->one_key && p->key.ptr == NULL) {
            p->key = key; /* points into the element's slab, which the bundle holds */
        }
        b->min_ts = SD_MIN(b->min_ts, e.ts);
    }
    for (size_t i = 0; i < skipped.len; i++) {
        sd__elem *e = SD_VEC_AT(&skipped, sd__elem, i);
        if (sd__elem_heap_push(&st->pending, e) != SD_OK) {
            sd__slab_unref(e->slab);
            rc = SD_EINTERNAL;
        }
    }
    sd_vec_deinit(&skipped);
    return rc;
}

/* Give a bundle that took work its output buffers and its name (a recycled bundle has them
 * already). */
static sd_status name_and_equip(sd__stage *st, sd_bundle *b)
{
    if (st->n_outputs > 0 && b->outputs == NULL) {
        b->outputs = sd_calloc(st->n_outputs, sizeof(*b->outputs));
        if (b->outputs == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < st->n_outputs; i++) {
            sd_vec_init(&b->outputs[i].chunks, sizeof(sd__chunk));
        }
    }
    if (st->n_families > 0 && b->timer_out == NULL) {
        b->timer_out = sd_calloc(st->n_families, sizeof(sd_buf));
        if (b->timer_out == NULL) {
            return SD_ENOMEM;
        }
    }
    if (b->id == NULL) {
        b->id = sd_malloc(strlen(st->id) + 22);
        if (b->id == NULL) {
            return SD_ENOMEM;
        }
    }
    bundle_name(b->id, st);
    return SD_OK;
}

/*
 * Build the next bundle of an SDK stage, or leave *out NULL when the stage has nothing ready.
 * On failure everything taken is given back (or the engine is poisoned on ENOMEM).
 */
sd_status sd__em_make_bundle(sd_em *em, sd__stage *st, sd_bundle **out, sd_err *err)
{
    sd_status rc = SD_OK;
    bundle_plan p = { .max_elems = em->cfg.max_bundle_elements,
                      .max_bytes = em->cfg.max_bundle_bytes,
                      .one_key = em->cfg.bundle_shape == SD_SHAPE_ONE_KEY,
                      /* A time-sorted stage takes its elements in timestamp order even when
                       * exploring schedules. */
                      .seeded = em->cfg.schedule_seed != 0 && !st->time_sorted,
                      .key = SD_BYTES_NULL };
    const sd__pcoll *in_pc = sd__em_pcoll_at(em, st->inputs[0]);
    *out = NULL;
    if (em->cfg.bundle_shape == SD_SHAPE_ONE_ELEMENT) {
        p.max_elems = 1;
    }
    size_t stage_cap = sd__stage_bundle_cap(st);
    if (stage_cap > 0 && (p.max_elems == 0 || stage_cap < p.max_elems)) {
        p.max_elems = stage_cap;
    }
    if (st->pending.len == 0 && st->n_spilled > 0) {
        rc = sd__pending_load(em, st, err); /* the oldest spilled run comes back */
        if (rc != SD_OK) {
            return rc;
        }
    }
    if (st->pending.len == 0 && !timers_ready(em, st)) {
        return SD_OK;
    }
    if (sd__side_has_staged(st)) {
        /* A triggered side input fired while bundles of st ran: let them finish reading the
         * version they started with, then apply the firing before the next bundle. */
        if (st->n_inflight > 0) {
            return SD_OK;
        }
        rc = sd__side_flush(em, st, err);
        if (rc != SD_OK) {
            return rc;
        }
    }
    p.sides_done = sides_finished(em, st);
    if (!p.sides_done && st->pending.len > 0 &&
        !elem_ready(em, st, &p, SD_VEC_AT(&st->pending, sd__elem, 0)) && !sides_ready(em, st)) {
        return SD_OK;
    }
    sd_bundle *b = bundle_alloc(st, in_pc);
    if (b == NULL) {
        return SD_ENOMEM;
    }
    bool timers_ok = st->n_families > 0 && (p.sides_done || sides_ready(em, st));
    /* On the wall clock, timers that are due go out on their own: a bundle runs as long as
     * the SDK takes over all its elements (a Beam Python stateful stage: hundreds of ms), and
     * a due timer put behind them would fire that much later. The elements follow in the next
     * bundle, beside it (other keys) or after it (the same keys). The synthetic clock keeps
     * its schedule. */
    bool timers_alone = timers_ok && em->cfg.clock == SD_CLOCK_WALL && timers_ready(em, st);
    if (timers_alone) {
        rc = take_timers(em, st, b, p.max_elems == 0 ? SIZE_MAX : p.max_elems, p.one_key, &p.key);
    }
    if (rc == SD_OK && b->fired.len == 0) {
        rc = take_elements(em, st, b, in_pc, &p, err);
    }
    b->n_primary = b->elems.len;
    b->n_input = b->elems.len;
    if (rc == SD_OK && timers_ok && !timers_alone) {
        size_t room = p.max_elems == 0 ? SIZE_MAX : p.max_elems - SD_MIN(p.max_elems, b->elems.len);
        rc = take_timers(em, st, b, room, p.one_key, &p.key);
    }
    if (rc == SD_OK && timers_ok) {
        rc = encode_timers(em, st, b, err);
    }
    if (rc == SD_OK && b->elems.len == 0 && b->fired.len == 0) {
        sd__bundle_recycle(b);
        return SD_OK;
    }
    if (rc == SD_OK) {
        rc = name_and_equip(st, b);
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
/* Bundle accessors and results                                                               */
/* ========================================================================================== */

const char *sd_em_bundle_id(const sd_bundle *b)
{
    return b->id;
}

const char *sd_em_bundle_stage(const sd_bundle *b)
{
    return b->stage->id;
}

uint64_t sd_em_bundle_state_epoch(const sd_bundle *b)
{
    return b->stage->stateful ? b->stage->state_epoch : 0;
}

const char *sd_em_bundle_input_pcollection(const sd_bundle *b)
{
    return b->input_pcoll;
}

sd_bytes sd_em_bundle_input(const sd_bundle *b)
{
    return sd_buf_bytes(&b->input);
}

bool sd_em_bundle_input_piece(const sd_bundle *b,
                              size_t *next,
                              size_t upto,
                              size_t max_bytes,
                              sd_bytes *piece)
{
    size_t n = SD_MIN(b->input_ends.len, upto);
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

size_t sd_em_bundle_input_count(const sd_bundle *b)
{
    return b->n_input;
}

size_t sd_em_bundle_n_timer_inputs(const sd_bundle *b)
{
    return b->timer_inputs.len;
}

void sd_em_bundle_timer_input(const sd_bundle *b,
                              size_t i,
                              const char **transform_id,
                              const char **family_id,
                              sd_bytes *timers)
{
    const sd__timer_input *ti = SD_VEC_AT(&b->timer_inputs, sd__timer_input, i);
    const sd__family *f = &b->stage->families[ti->family];
    *transform_id = f->transform_id;
    *family_id = f->family_id;
    *timers = sd_bytes_make(b->timer_bytes.data + ti->off, ti->len);
}

sd_time sd_em_bundle_watermark(const sd_bundle *b)
{
    return b->watermark;
}

sd_status sd__bundle_check(const sd_em *em, const sd_bundle *b, sd_err *err)
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

/*
 * A data piece of a stage whose SDK may resend (sd_stage_spec.sink_resends): a piece that
 * extends the held one (all its bytes, then more) is the same buffer sent again and replaces
 * it; any other piece lets the held one through and is held in turn.
 */
static sd_status outstream_offer(sd_em *em,
                                 sd__stage *st,
                                 const sd__pcoll *pc,
                                 sd__outstream *os,
                                 sd_bytes data,
                                 sd_err *err)
{
    sd_buf *h = &os->held;
    bool resent = h->len > 0 && data.len > h->len && memcmp(data.ptr, h->data, h->len) == 0;
    if (resent) {
        st->resent_pieces++;
    } else if (h->len > 0) {
        sd_status rc = sd__outstream_append(em, pc, os, sd_buf_bytes(h), err);
        if (rc != SD_OK) {
            return rc;
        }
    }
    sd_buf_reset(h);
    if (sd_buf_append_bytes(h, data) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "pcollection \"%s\": out of memory holding %zu bytes",
                          pc->id, data.len);
    }
    return SD_OK;
}

sd_status
sd_em_bundle_output(sd_em *em, sd_bundle *b, const char *pcollection, sd_bytes data, sd_err *err)
{
    sd_status rc = sd__bundle_check(em, b, err);
    if (rc != SD_OK) {
        return rc;
    }
    sd__stage *st = b->stage;
    for (size_t i = 0; i < st->n_outputs; i++) {
        const sd__pcoll *pc = sd__em_pcoll_at(em, st->outputs[i]);
        if (strcmp(pc->id, pcollection) == 0) {
            if (st->sink_resends) {
                return outstream_offer(em, st, pc, &b->outputs[i], data, err);
            }
            return sd__outstream_append(em, pc, &b->outputs[i], data, err);
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
    sd_status rc = sd__bundle_check(em, b, err);
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
    sd_status rc = sd__bundle_check(em, b, err);
    if (rc != SD_OK) {
        return rc;
    }
    sd__residual r = { .bytes = sd_memdup(wv_element.ptr, wv_element.len),
                       .len = wv_element.len,
                       .delay_ms = delay_ms,
                       .has_wm = has_output_watermark,
                       .wm = has_output_watermark ? sd_time_clamp(output_watermark) : 0 };
    if (r.bytes == NULL) {
        return SD_ENOMEM;
    }
    rc = sd_vec_push(&b->residuals, &r);
    if (rc != SD_OK) {
        sd_free(r.bytes);
        return rc;
    }
    return SD_OK;
}

sd_status sd_em_bundle_split(sd_em *em, sd_bundle *b, size_t first_residual_element, sd_err *err)
{
    sd_status rc = sd__bundle_check(em, b, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (first_residual_element > b->n_primary) {
        return sd_err_set(err, SD_EINVAL,
                          "bundle %s: split at element %zu, but only %zu remain in the primary",
                          b->id, first_residual_element, b->n_primary);
    }
    rc = sd__bundle_return_inputs(b->stage, b, first_residual_element);
    return sd__em_poison(em, rc);
}

/* ========================================================================================== */
/* Failing and recycling                                                                      */
/* ========================================================================================== */

/*
 * Recycling. A stage keeps one finished bundle (its spare) with its buffers, vectors and name
 * storage, and the next bundle of the stage reuses it: on the synthetic clock every firing of
 * a processing-time timer is a bundle of its own, and allocating and freeing a dozen small
 * blocks per bundle was a fifth of bench_pt_timers' time. Only a small bundle is kept, so a
 * spare never pins more than SPARE_MAX_BYTES. A spare has magic 0 until reused, so a stale
 * handle is refused as before (unless a new bundle reused the memory: as with freed memory,
 * handles must not outlive completion).
 */
#define SPARE_MAX_BYTES (64u * 1024u)

static size_t bundle_footprint(const sd_bundle *b)
{
    const sd__stage *st = b->stage;
    size_t n = b->input.cap + b->timer_bytes.cap + b->locked.cap;
    n += b->elems.cap * b->elems.item_size + b->input_ends.cap * b->input_ends.item_size;
    n += b->fired.cap * b->fired.item_size + b->timer_inputs.cap * b->timer_inputs.item_size;
    n += b->residuals.cap * b->residuals.item_size;
    for (size_t i = 0; b->outputs != NULL && i < st->n_outputs; i++) {
        n += sd__outstream_footprint(&b->outputs[i]);
    }
    for (size_t i = 0; b->timer_out != NULL && i < st->n_families; i++) {
        n += b->timer_out[i].cap;
    }
    return n;
}

void sd__bundle_recycle(sd_bundle *b)
{
    if (b == NULL) {
        return;
    }
    sd__stage *st = b->stage;
    if (st->spare != NULL || b->deltas.cap > 0 || bundle_footprint(b) > SPARE_MAX_BYTES) {
        sd__bundle_destroy(b);
        return;
    }
    /* Back to what bundle_alloc and name_and_equip make, keeping the capacity. */
    b->magic = 0;
    b->prev = b->next = NULL;
    b->elems.len = 0;
    b->n_primary = b->n_input = 0;
    sd_buf_reset(&b->input);
    b->input_ends.len = 0;
    b->timer_inputs.len = 0;
    sd_buf_reset(&b->timer_bytes);
    b->fired.len = 0;
    for (size_t i = 0; i < b->residuals.len; i++) {
        sd_free(SD_VEC_AT(&b->residuals, sd__residual, i)->bytes);
    }
    b->residuals.len = 0;
    for (size_t i = 0; b->outputs != NULL && i < st->n_outputs; i++) {
        sd__outstream_reset(&b->outputs[i]);
    }
    for (size_t i = 0; b->timer_out != NULL && i < st->n_families; i++) {
        sd_buf_reset(&b->timer_out[i]);
    }
    sd_buf_reset(&b->locked);
    b->has_pt_base = false;
    st->spare = b;
}

void sd_em_fail_bundle(sd_em *em, sd_bundle *b)
{
    if (em == NULL || b == NULL || b->magic != SD__BUNDLE_MAGIC) {
        return;
    }
    sd__em_decide_fail(em, b);
    sd__stage *st = b->stage;
    /* Nothing of the bundle is committed, but its SDK may have cached its writes. */
    st->state_epoch++;
    sd__bundle_unlock_keys(st, b);
    if (sd__bundle_return_inputs(st, b, 0) != SD_OK) {
        em->poisoned = true;
    }
    /* Fired timers go back as they were; their holds never left the stage's bag. */
    for (size_t i = 0; i < b->fired.len; i++) {
        sd__timer *t = *SD_VEC_AT(&b->fired, sd__timer *, i);
        sd_status rc = SD_OK;
        if (sd__timers_find(&st->timers, t->family, &t->win, sd_bytes_make(t->key, t->key_len),
                            sd__timer_tag(t)) == NULL) {
            rc = sd__theap_reserve(sd__timer_heap(st, t), 1);
            if (rc == SD_OK) {
                rc = sd__timers_reserve(&st->timers, 1);
            }
            if (rc == SD_OK) {
                sd__timers_insert(&st->timers, t);
                sd__theap_push(sd__timer_heap(st, t), t);
                continue;
            }
        }
        sd__timer_retire(st, t);
        if (rc != SD_OK) {
            em->poisoned = true;
        }
    }
    sd__bundle_unlink(em, st, b);
    sd__bundle_recycle(b);
}
