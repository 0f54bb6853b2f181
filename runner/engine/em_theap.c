/*
 * Sundial: the per-domain timer heaps (sd__theap): what fires next in each time domain.
 *
 * Storage: the identity table owns the stored timers; each time domain also keeps a min-heap
 * ordered by (due time, identity), so set/replace/clear/take are O(log n) amortised and "what fires
 * next" (bundle building, the synthetic clock's next jump, the wall clock's next wakeup) is the
 * heap top, never a scan. The slots carry the due time beside the pointer: sifting a heap of
 * 100,000 timers then reads one compact array instead of chasing pointers across the address space
 * (measured: about twice as fast in bench_pt_timers). The heap is 4-ary (half the depth of a binary
 * heap; the four children share a cache line) and not indexed: a timer that is replaced or cleared
 * is only marked dropped, and freed when it reaches the top (the top is always live) or when
 * dropped entries outnumber live ones and the heap is rebuilt. An indexed heap must rewrite the
 * slot index of every timer it moves, a cache miss per level in a large heap, on every firing; that
 * was the largest single cost of bench_pt_timers once the identity map was gone. Identity order is
 * total among live timers (no two share an identity), so the order timers come out in does not
 * depend on the heap's shape or on the dropped entries.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

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
    return c != 0 ? c : cmp_bytes(a->key + a->key_len, a->tag_len, b->key + b->key_len, b->tag_len);
}

static int slot_cmp(const sd__tslot *a, const sd__tslot *b)
{
    if (a->due != b->due) {
        return a->due < b->due ? -1 : 1;
    }
    return sd__timer_cmp(a->t, b->t);
}

static void theap_up(sd__theap *h, size_t i)
{
    sd__tslot s = h->items[i];
    while (i > 0) {
        size_t p = (i - 1) / SD__THEAP_ARITY;
        if (slot_cmp(&h->items[p], &s) <= 0) {
            break;
        }
        h->items[i] = h->items[p];
        i = p;
    }
    h->items[i] = s;
}

/* a < b in heap order (due, then identity), comparing the timers only on equal due times. */
static inline bool slot_less(const sd__tslot *a, const sd__tslot *b)
{
    return a->due < b->due || (a->due == b->due && sd__timer_cmp(a->t, b->t) < 0);
}

/* Of the slots at a and b (a < b), the one first in heap order; a on a tie (a dropped timer
 * beside its live successor). Written so that the due times decide without a branch: which
 * child is least is a coin toss, and a branch on it was mispredicted about every other level.
 * Equal due times are rare; only they read the timers. */
static inline size_t slot_min(const sd__tslot *items, size_t a, size_t b)
{
    sd_time da = items[a].due, db = items[b].due;
    if (SD__UNLIKELY(da == db)) {
        return sd__timer_cmp(items[b].t, items[a].t) < 0 ? b : a;
    }
    return db < da ? b : a;
}

static void theap_down(sd__theap *h, size_t i)
{
    sd__tslot s = h->items[i];
    size_t n = h->len;
    for (;;) {
        size_t first = SD__THEAP_ARITY * i + 1;
        if (first >= n) {
            break;
        }
        /* Whichever child wins, its children are one of these four lines (each node's children
         * share a line): in a heap larger than the cache, fetch them while this level is
         * compared, or each level is a miss in turn. */
        size_t grand = SD__THEAP_ARITY * first + 1;
        if (n > 4096 && grand < n) {
            for (size_t g = 0; g < SD__THEAP_ARITY; g++) {
                SD__PREFETCH(&h->items[grand + g * SD__THEAP_ARITY]);
            }
        }
        size_t m = first;
        if (first + SD__THEAP_ARITY <= n) {
            m = slot_min(h->items, slot_min(h->items, first, first + 1),
                         slot_min(h->items, first + 2, first + 3));
        } else {
            for (size_t c = first + 1; c < n; c++) {
                m = slot_min(h->items, m, c);
            }
        }
        if (!slot_less(&h->items[m], &s)) {
            break;
        }
        h->items[i] = h->items[m];
        i = m;
    }
    h->items[i] = s;
}

/* Take the top slot out (whatever its state) and restore the heap order. */
static sd__timer *theap_pop_slot(sd__theap *h)
{
    sd__timer *t = h->items[0].t;
    h->items[0] = h->items[--h->len];
    if (h->len > 0) {
        theap_down(h, 0);
    }
    return t;
}

/* Keep the top live: free the dropped timers that reached it. With none dropped, the top's
 * timer is not even read (in a large heap that read is a cache miss per firing). */
static void theap_purge(sd__theap *h)
{
    while (h->len > h->live && h->items[0].t->heap_state == SD__TIMER_DROPPED) {
        sd__timer_destroy(h->pool, theap_pop_slot(h));
    }
}

/* Rebuild from the live entries once dropped ones outnumber them: memory stays bounded. */
static void theap_compact(sd__theap *h)
{
    size_t n = 0;
    for (size_t i = 0; i < h->len; i++) {
        if (h->items[i].t->heap_state == SD__TIMER_DROPPED) {
            sd__timer_destroy(h->pool, h->items[i].t);
        } else {
            h->items[n++] = h->items[i];
        }
    }
    h->len = n;
    for (size_t i = n / SD__THEAP_ARITY + 1; i-- > 0;) {
        if (i < n) {
            theap_down(h, i);
        }
    }
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
    /* Placed so that every node's four children share one 64-byte cache line: items[1] (the
     * first child of the root) starts a line. sd_malloc's 16-byte alignment leaves at most 48
     * bytes before the first boundary, then items[0] takes the 16 bytes before it. */
    uint8_t *mem = sd_malloc(cap * sizeof(sd__tslot) + 128);
    if (mem == NULL) {
        return SD_ENOMEM;
    }
    uintptr_t line = ((uintptr_t)mem + 63) & ~(uintptr_t)63;
    sd__tslot *items = (sd__tslot *)(line + 64 - sizeof(sd__tslot));
    if (h->len > 0) {
        memcpy(items, h->items, h->len * sizeof(*items));
    }
    sd_free(h->mem);
    h->mem = mem;
    h->items = items;
    h->cap = cap;
    return SD_OK;
}

void sd__theap_push(sd__theap *h, sd__timer *t)
{
    assert(h->len < h->cap && t->heap_state == SD__TIMER_OUT);
    t->heap_state = SD__TIMER_LIVE;
    h->live++;
    h->items[h->len++] = (sd__tslot){ .due = t->due, .t = t };
    theap_up(h, h->len - 1);
}

sd__timer *sd__theap_pop(sd__theap *h)
{
    assert(h->live > 0 && h->items[0].t->heap_state == SD__TIMER_LIVE);
    sd__timer *t = theap_pop_slot(h);
    t->heap_state = SD__TIMER_OUT;
    h->live--;
    theap_purge(h);
    if (h->len > 0) {
        /* The next timer to fire: on the synthetic clock its bundle is the next one, after a
         * whole round trip, so its record (set long ago, anywhere in memory) can arrive in
         * the cache meanwhile. */
        const char *next = (const char *)h->items[0].t;
        SD__PREFETCH(next);
        SD__PREFETCH(next + 64);
        SD__PREFETCH(next + sizeof(sd__timer)); /* its key, which may start a third line */
    }
    return t;
}

void sd__theap_drop(sd__theap *h, sd__timer *t)
{
    assert(t->heap_state == SD__TIMER_LIVE && h->live > 0);
    t->heap_state = SD__TIMER_DROPPED;
    h->live--;
    theap_purge(h);
    if (h->len - h->live > h->live + 64) {
        theap_compact(h);
    }
}

void sd__theap_deinit(sd__theap *h)
{
    for (size_t i = 0; i < h->len; i++) {
        if (h->items[i].t->heap_state == SD__TIMER_DROPPED) {
            sd__timer_destroy(h->pool, h->items[i].t);
        }
    }
    sd_free(h->mem);
    h->mem = NULL;
    h->items = NULL;
    h->len = h->cap = h->live = 0;
}
