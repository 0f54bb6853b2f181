/*
 * Sundial: a counted multiset of timestamps (sd__tsbag), the store behind every hold kept as
 * a set of timestamps (timer holds, residual holds).
 *
 * Holds. A hold is a timestamp below which a stage's output watermark may not advance. The
 * engine keeps them per stage in a counted multiset (sd__tsbag): a hash table from timestamp
 * to count plus a min-heap of timestamps with lazy deletion, so add/remove are O(1) amortised and
 * the minimum is O(log n) amortised. Every stored timer owns exactly one hold (its hold
 * timestamp); a fired timer keeps it until the bundle that delivers it completes, so the
 * output watermark cannot pass a timer's hold before its firing has been processed.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

static size_t ts_home(sd_time t, size_t mask)
{
    uint64_t z = (uint64_t)t * 0x9e3779b97f4a7c15ULL;
    return (size_t)(z ^ (z >> 29)) & mask;
}

/* Where t's count is, or NULL when t is not in the bag. */
static size_t *tsbag_ref(const sd__tsbag *b, sd_time t)
{
    if (b->distinct == 0) {
        return NULL;
    }
    size_t mask = b->cap - 1;
    for (size_t i = ts_home(t, mask); b->slots[i].count > 0; i = (i + 1) & mask) {
        if (b->slots[i].ts == t) {
            return &b->slots[i].count;
        }
    }
    return NULL;
}

static size_t tsbag_count(const sd__tsbag *b, sd_time t)
{
    const size_t *c = tsbag_ref(b, t);
    return c == NULL ? 0 : *c;
}

static void tscount_place(sd__tscount *slots, size_t cap, sd__tscount e)
{
    size_t i = ts_home(e.ts, cap - 1);
    while (slots[i].count > 0) {
        i = (i + 1) & (cap - 1);
    }
    slots[i] = e;
}

/* Add t (not in the bag) with count 1, keeping the table at most half full. */
static sd_status tscount_insert(sd__tsbag *b, sd_time t)
{
    if ((b->distinct + 1) * 2 > b->cap) {
        size_t cap = b->cap < 16 ? 16 : b->cap * 2;
        sd__tscount *slots = sd_calloc(cap, sizeof(*slots));
        if (slots == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < b->cap; i++) {
            if (b->slots[i].count > 0) {
                tscount_place(slots, cap, b->slots[i]);
            }
        }
        sd_free(b->slots);
        b->slots = slots;
        b->cap = cap;
    }
    tscount_place(b->slots, b->cap, (sd__tscount){ .ts = t, .count = 1 });
    b->distinct++;
    return SD_OK;
}

/* Remove the slot at `count` (t's, count now 0), by backward shift. */
static void tscount_remove(sd__tsbag *b, size_t *count)
{
    size_t mask = b->cap - 1;
    /* The slot's index from its count field's address (through void *: the field is inside
     * a properly aligned slot, whatever -Wcast-align infers from the char arithmetic). */
    const sd__tscount *slot = (const void *)((char *)count - offsetof(sd__tscount, count));
    size_t i = (size_t)(slot - b->slots);
    for (size_t j = (i + 1) & mask; b->slots[j].count > 0; j = (j + 1) & mask) {
        size_t home = ts_home(b->slots[j].ts, mask);
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            b->slots[i] = b->slots[j];
            i = j;
        }
    }
    b->slots[i].count = 0;
    b->distinct--;
}

bool sd__tsbag_next(const sd__tsbag *b, size_t *it, sd_time *t)
{
    while (*it < b->cap) {
        const sd__tscount *e = &b->slots[(*it)++];
        if (e->count > 0) {
            *t = e->ts;
            return true;
        }
    }
    return false;
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
    sd_time t;
    sd_time *a = b->heap.items;
    if (b->heap.len < 2 * b->distinct + 64) {
        return;
    }
    while (sd__tsbag_next(b, &it, &t)) {
        a[n++] = t;
    }
    b->heap.len = n;
    for (size_t i = n / 2 + 1; i-- > 0;) {
        heap_sift_down(a, n, i);
    }
}

void sd__tsbag_deinit(sd__tsbag *b)
{
    sd_free(b->slots);
    b->slots = NULL;
    b->cap = b->distinct = 0;
    sd_vec_deinit(&b->heap);
    b->total = 0;
    b->min_known = false;
}

sd_status sd__tsbag_add(sd__tsbag *b, sd_time t)
{
    size_t *count = tsbag_ref(b, t);
    if (count != NULL) {
        (*count)++;
    } else {
        tsbag_compact(b);
        sd_status rc = sd_vec_push(&b->heap, &t);
        if (rc != SD_OK) {
            return rc;
        }
        heap_sift_up(b->heap.items, b->heap.len - 1);
        rc = tscount_insert(b, t);
        if (rc != SD_OK) {
            return rc; /* the heap entry is stale and harmless */
        }
    }
    if (b->total == 0 || (b->min_known && t < b->min)) {
        b->min = t;
        b->min_known = true;
    }
    b->total++;
    return SD_OK;
}

void sd__tsbag_remove(sd__tsbag *b, sd_time t)
{
    size_t *count = tsbag_ref(b, t);
    assert(count != NULL);
    if (count == NULL) {
        return;
    }
    if (--*count == 0) {
        tscount_remove(b, count);
        if (t == b->min) {
            b->min_known = false; /* the next minimum is found through the heap */
        }
    }
    b->total--;
}

sd_time sd__tsbag_min(sd__tsbag *b)
{
    if (b->min_known) {
        return b->min;
    }
    sd_time *a = b->heap.items;
    while (b->heap.len > 0) {
        if (tsbag_count(b, a[0]) > 0) {
            b->min = a[0];
            b->min_known = true;
            return a[0];
        }
        a[0] = a[--b->heap.len];
        heap_sift_down(a, b->heap.len, 0);
    }
    return SD_TIME_MAX;
}
