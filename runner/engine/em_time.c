/*
 * Sundial: element manager time — watermark holds, timers, and the source hook.
 *
 * Holds. A hold is a timestamp below which a stage's output watermark may not advance. The
 * engine keeps them per stage in a counted multiset (sd__tsbag): a hash table from timestamp
 * to count plus a min-heap of timestamps with lazy deletion, so add/remove are O(1) amortised and
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
 * eligible when the job clock reaches them; on the synthetic clock wall_now is the processing
 * time the SDK reported it used for the bundle, when it reported one (the C SDK does), so the
 * delay it meant is kept exactly instead of less the bundle's remaining run time.
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
 *
 * The identity table (sd__ttable) is intrusive: a timer is one allocation with its key and
 * tag, carries the hash of its identity, and the table's slots hold (hash, pointer). Taking a
 * timer that is known by pointer (firing it) costs no hashing and no comparison, and setting
 * one compares fields, not an encoded identity. It replaced a byte-keyed sd_map whose every
 * operation re-encoded the identity and copied it into a key of its own (measured: the map's
 * lookups were a quarter of bench_pt_timers' time).
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
 *
 * The source hook. The engine knows TESTSTREAM stages only as runner-side stages whose outputs
 * someone else feeds: the driver installed with sd_em_set_source (teststream/ts_drive.c, the
 * TestStream driver) plays one step at a time, only when the engine is quiescent
 * (sd_em_next_bundle has nothing to hand out and nothing is in flight), through the
 * sd_em_source_* calls below. Trade-off: the synthetic clock does not jump while the driver
 * has steps left — its processing-time events are the only way the clock moves then —
 * matching Prism.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* Timestamp multisets                                                                        */
/* ========================================================================================== */

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

/* ========================================================================================== */
/* Timers                                                                                     */
/* ========================================================================================== */

/* Ask for the cache line at p ahead of its use (a hint; nothing where the compiler lacks it). */
#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define PREFETCH(p) ((void)(p))
#define UNLIKELY(x) (x)
#endif

/* ---- timer memory ------------------------------------------------------------------------ */
/*
 * A stage's timers come from its pool (sd__tpool): blocks in 16-byte size classes carved from
 * 64 KB chunks, a free list per class. Freeing a timer that fired is then a push onto a list
 * (the block is in cache: the firing just read it), where malloc's free of a block set long
 * ago merged it with its neighbours, each a cache miss (measured with perf: a seventh of
 * bench_pt_timers' time at a million timers). Freed blocks are reused by later timers of the
 * stage; when the last timer of the stage goes, every chunk but the newest is returned, so a
 * stage keeps at most 64 KB once it has no timers. Under AddressSanitizer every timer is its
 * own allocation, so misuse is still caught.
 */
#define TPOOL_CHUNK (64u * 1024u)

#if defined(__SANITIZE_ADDRESS__)
#define TPOOL_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TPOOL_OFF 1
#endif
#endif
#ifndef TPOOL_OFF
#define TPOOL_OFF 0
#endif

/* Start carving chunk (fresh, or emptied by tpool_trim) at its first 64-byte boundary past
 * the link: see tpool_alloc. */
static void tpool_restart(sd__tpool *p, uint8_t *chunk)
{
    uintptr_t first = ((uintptr_t)chunk + 16 + 63) & ~(uintptr_t)63;
    p->bump = chunk + (first - (uintptr_t)chunk);
    p->left = TPOOL_CHUNK - (size_t)(p->bump - chunk);
}

static size_t tpool_class(size_t size)
{
    size_t cls = (size + 15) / 16;
    return TPOOL_OFF || cls > SD__TPOOL_CLASSES ? 0 : cls; /* 0: sd_malloc */
}

static void *tpool_alloc(sd__tpool *p, size_t size)
{
    size_t cls = tpool_class(size);
    if (cls == 0) {
        return sd_malloc(size);
    }
    void *b = p->free[cls];
    if (b != NULL) {
        memcpy(&p->free[cls], b, sizeof(void *));
    } else {
        /* Blocks of a whole number of cache lines start on a line (the chunk is carved from
         * its first boundary, and only a stage mixing classes ever skips bytes here): a
         * 128-byte timer is then two lines to fetch when it fires, not three. */
        size_t bytes = cls * 16;
        size_t skip = bytes % 64 == 0 ? (size_t)(-(uintptr_t)p->bump & 63) : 0;
        if (p->left < skip + bytes) {
            uint8_t *chunk = sd_malloc(TPOOL_CHUNK);
            if (chunk == NULL) {
                return NULL;
            }
            memcpy(chunk, &p->chunks, sizeof(void *));
            p->chunks = chunk;
            tpool_restart(p, chunk);
            skip = 0;
        }
        b = p->bump + skip;
        p->bump += skip + bytes;
        p->left -= skip + bytes;
    }
    p->live++;
    return b;
}

/* Every chunk but the newest back to the system (no block is in use). */
static void tpool_trim(sd__tpool *p)
{
    void *keep = p->chunks, *c = NULL;
    if (keep == NULL) {
        return;
    }
    memcpy(&c, keep, sizeof(void *));
    while (c != NULL) {
        void *next;
        memcpy(&next, c, sizeof(void *));
        sd_free(c);
        c = next;
    }
    c = NULL;
    memcpy(keep, &c, sizeof(void *));
    memset(p->free, 0, sizeof(p->free));
    tpool_restart(p, keep);
}

static void tpool_free(sd__tpool *p, void *b, size_t size)
{
    size_t cls = tpool_class(size);
    if (cls == 0) {
        sd_free(b);
        return;
    }
    memcpy(b, &p->free[cls], sizeof(void *));
    p->free[cls] = b;
    if (--p->live == 0) {
        tpool_trim(p);
    }
}

void sd__tpool_deinit(sd__tpool *p)
{
    assert(p->live == 0);
    tpool_trim(p);
    sd_free(p->chunks);
    memset(p, 0, sizeof(*p));
}

sd__timer *
sd__timer_create(sd__tpool *pool, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag)
{
    uint64_t kh = sd_hash_words(key.ptr, key.len, 0);
    return sd__timer_create_hashed(pool, family, w, key, tag, kh,
                                   sd__timer_hash(family, w, kh, tag));
}

sd__timer *sd__timer_create_hashed(sd__tpool *pool,
                                   size_t family,
                                   const sd__win *w,
                                   sd_bytes key,
                                   sd_bytes tag,
                                   uint64_t key_hash,
                                   uint64_t hash)
{
    if (key.len > UINT32_MAX || tag.len > UINT32_MAX || family > UINT32_MAX) {
        return NULL; /* cannot be stored (no bundle carries 4 GB keys) */
    }
    sd__timer *t = tpool_alloc(pool, sizeof(*t) + key.len + tag.len);
    if (t == NULL) {
        return NULL;
    }
    memset(t, 0, sizeof(*t));
    t->family = (uint32_t)family;
    t->win = *w;
    t->key = (uint8_t *)(t + 1);
    t->key_len = (uint32_t)key.len;
    t->tag_len = (uint32_t)tag.len;
    if (key.len > 0) {
        memcpy(t->key, key.ptr, key.len);
    }
    if (tag.len > 0) {
        memcpy(t->key + key.len, tag.ptr, tag.len);
    }
    t->heap_state = SD__TIMER_OUT;
    t->key_hash = key_hash;
    t->hash = hash;
    return t;
}

void sd__timer_destroy(sd__tpool *pool, sd__timer *t)
{
    if (t != NULL) {
        tpool_free(pool, t, sizeof(*t) + t->key_len + t->tag_len);
    }
}

/* ---- the identity table ------------------------------------------------------------------ */

uint64_t sd__timer_hash(size_t family, const sd__win *w, uint64_t key_hash, sd_bytes tag)
{
    uint64_t win = w->global ? 0x5bd1e995u : (uint64_t)w->start * 31u ^ (uint64_t)w->end;
    return sd_hash_words(tag.ptr, tag.len, key_hash ^ ((uint64_t)family << 40) ^ win);
}

static bool
timer_is(const sd__timer *t, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag)
{
    return t->family == family && t->win.global == w->global && t->win.start == w->start &&
           t->win.end == w->end && t->key_len == key.len && t->tag_len == tag.len &&
           (key.len == 0 || memcmp(t->key, key.ptr, key.len) == 0) &&
           (tag.len == 0 || memcmp(t->key + t->key_len, tag.ptr, tag.len) == 0);
}

static sd__timer *timers_find_hashed(const sd__ttable *tt,
                                     uint64_t hash,
                                     size_t family,
                                     const sd__win *w,
                                     sd_bytes key,
                                     sd_bytes tag)
{
    size_t mask = tt->cap - 1;
    for (size_t i = (size_t)hash & mask; tt->slots[i].t != NULL; i = (i + 1) & mask) {
        if (tt->slots[i].hash == hash && timer_is(tt->slots[i].t, family, w, key, tag)) {
            return tt->slots[i].t;
        }
    }
    return NULL;
}

sd__timer *
sd__timers_find(const sd__ttable *tt, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag)
{
    if (tt->len == 0) {
        return NULL;
    }
    uint64_t hash = sd__timer_hash(family, w, sd_hash_words(key.ptr, key.len, 0), tag);
    return timers_find_hashed(tt, hash, family, w, key, tag);
}

/* Unstore and drop the stored timer `old` (replaced or cleared). */
static void timer_unstore(sd__stage *st, sd__timer *old)
{
    sd__tsbag_remove(&st->holds, old->hold);
    sd__timers_remove(&st->timers, old);
    sd__theap_drop(sd__timer_heap(st, old), old); /* the heap frees it */
}

static void ttable_place(sd__tref *slots, size_t cap, sd__timer *t)
{
    size_t i = (size_t)t->hash & (cap - 1);
    while (slots[i].t != NULL) {
        i = (i + 1) & (cap - 1);
    }
    slots[i] = (sd__tref){ .hash = t->hash, .t = t };
}

/* At most 3/4 full: linear probing stays short, and a million timers take 32 MB of slots. */
sd_status sd__timers_reserve(sd__ttable *tt, size_t n)
{
    if ((tt->len + n) * 4 <= tt->cap * 3) {
        return SD_OK;
    }
    size_t cap = tt->cap < 16 ? 16 : tt->cap;
    while ((tt->len + n) * 4 > cap * 3) {
        cap *= 2;
    }
    sd__tref *slots = sd_calloc(cap, sizeof(*slots));
    if (slots == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < tt->cap; i++) {
        if (tt->slots[i].t != NULL) {
            ttable_place(slots, cap, tt->slots[i].t);
        }
    }
    sd_free(tt->slots);
    tt->slots = slots;
    tt->cap = cap;
    return SD_OK;
}

void sd__timers_insert(sd__ttable *tt, sd__timer *t)
{
    assert((tt->len + 1) * 4 <= tt->cap * 3);
    ttable_place(tt->slots, tt->cap, t);
    tt->len++;
}

void sd__timers_remove(sd__ttable *tt, sd__timer *t)
{
    size_t mask = tt->cap - 1, i = (size_t)t->hash & mask;
    while (tt->slots[i].t != t) {
        assert(tt->slots[i].t != NULL);
        i = (i + 1) & mask;
    }
    /* Backward shift: pull later entries of the probe run into the hole unless their home
     * slot lies cyclically in (hole, j], where they must stay to be found. */
    for (size_t j = (i + 1) & mask; tt->slots[j].t != NULL; j = (j + 1) & mask) {
        size_t home = (size_t)tt->slots[j].hash & mask;
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            tt->slots[i] = tt->slots[j];
            i = j;
        }
    }
    tt->slots[i].t = NULL;
    tt->len--;
}

void sd__timers_prefetch(const sd__ttable *tt, const sd__timer *t)
{
    sd__timers_prefetch_id(tt, t->hash);
}

void sd__timers_prefetch_id(const sd__ttable *tt, uint64_t hash)
{
    if (tt->cap > 0) {
        PREFETCH(&tt->slots[(size_t)hash & (tt->cap - 1)]);
    }
}

/*
 * Firing a timer removes it from the table: its slot, anywhere in a table of megabytes, was a
 * cache miss per firing (three quarters of the removal's time in perf), since the slot's
 * address needs the timer's hash, read from a record that itself has only just been fetched.
 * So the fetches run two timers ahead: after a pop, the new top's record has been in the
 * cache since the pop before (it was then the one after next), so its slot is asked for now,
 * a whole bundle before its own pop; and the one after it, the least of the top's children,
 * has its record asked for. When the guess is wrong (a timer set meanwhile comes between),
 * nothing is lost but the hint.
 */
void sd__timers_prefetch_ahead(const sd__ttable *tt, const sd__theap *h)
{
    if (h->len == 0 || tt->cap == 0) {
        return;
    }
    PREFETCH(&tt->slots[(size_t)h->items[0].t->hash & (tt->cap - 1)]);
    size_t last = SD_MIN(h->len, 1 + SD__THEAP_ARITY), m = 1;
    for (size_t c = 2; c < last; c++) {
        m = h->items[c].due < h->items[m].due ? c : m;
    }
    if (m < last) {
        PREFETCH(h->items[m].t);
    }
}

bool sd__timers_next(const sd__ttable *tt, size_t *it, sd__timer **t)
{
    while (*it < tt->cap) {
        sd__timer *x = tt->slots[(*it)++].t;
        if (x != NULL) {
            *t = x;
            return true;
        }
    }
    return false;
}

void sd__timers_deinit(sd__ttable *tt)
{
    for (size_t i = 0; i < tt->cap; i++) {
        sd__timer_destroy(tt->pool, tt->slots[i].t);
    }
    sd_free(tt->slots);
    tt->slots = NULL;
    tt->cap = tt->len = 0;
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
    if (UNLIKELY(da == db)) {
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
                PREFETCH(&h->items[grand + g * SD__THEAP_ARITY]);
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
        PREFETCH(next);
        PREFETCH(next + 64);
        PREFETCH(next + sizeof(sd__timer)); /* its key, which may start a third line */
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
    sd__timer *old = st->timers.len == 0
                         ? NULL
                         : timers_find_hashed(&st->timers, t->hash, t->family, &t->win,
                                              sd_bytes_make(t->key, t->key_len), sd__timer_tag(t));
    if (old != NULL) {
        if (old_fire != NULL) {
            *old_fire = old->fire;
        }
        timer_unstore(st, old);
    }
    sd__timers_insert(&st->timers, t);
    sd__theap_push(h, t);
    return SD_OK;
}

void sd__timer_clear(sd__stage *st, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag)
{
    sd__timer *old = sd__timers_find(&st->timers, family, w, key, tag);
    if (old != NULL) {
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
    sd_time due = sd_time_add(max_ts, in->ws.allowed_lateness_ms);
    if (due < st->in_wm || st->in_wm >= SD_TIME_MAX) {
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

sd_time sd__residual_basis(sd__stage *st, sd_time up, sd_time in)
{
    if (sd_map_len(&st->res_by_seq) == 0) {
        return in;
    }
    sd_time m = sd__tsbag_min(&st->res_holds);
    m = SD_MIN(m, SD_MIN(up, fresh_min(st)));
    return SD_MAX(in, m);
}

void sd__residual_holds_deinit(sd__stage *st)
{
    sd__tsbag_deinit(&st->res_holds);
    sd_map_deinit(&st->res_by_seq);
}

/* ========================================================================================== */
/* The source hook (runner-side scripted sources: teststream/ drives TESTSTREAM stages)       */
/* ========================================================================================== */

sd_status sd_em_set_source(sd_em *em, const sd_em_source *ops, void *ctx, sd_err *err)
{
    if (em == NULL || ops == NULL || ops->pending == NULL || ops->step == NULL) {
        return sd_err_set(err, SD_EINVAL, "set_source: em, pending and step are required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "set_source: the engine has started");
    }
    if (em->source.step != NULL) {
        return sd_err_set(err, SD_EEXIST, "set_source: a source driver is installed already");
    }
    em->source = *ops;
    em->source_ctx = ctx;
    return SD_OK;
}

sd_status sd_em_source_output(const sd_em *em,
                              const char *stage_id,
                              const char *pcollection,
                              size_t *out_stage,
                              size_t *out_pcoll,
                              sd_err *err)
{
    if (em == NULL || stage_id == NULL || pcollection == NULL) {
        return sd_err_set(err, SD_EINVAL, "teststream: em, stage and PCollection are required");
    }
    const sd__stage *st = sd_map_get_str(&em->stage_by_id, stage_id);
    if (st == NULL || st->kind != SD_STAGE_TESTSTREAM) {
        return sd_err_set(err, SD_ENOTFOUND, "teststream \"%s\": no such TestStream stage",
                          stage_id);
    }
    for (size_t i = 0; i < st->n_outputs; i++) {
        const sd__pcoll *pc = sd__em_pcoll_at(em, st->outputs[i]);
        if (strcmp(pc->id, pcollection) == 0) {
            *out_stage = st->index;
            *out_pcoll = pc->index;
            return SD_OK;
        }
    }
    return sd_err_set(err, SD_ENOTFOUND, "teststream \"%s\": \"%s\" is not one of its outputs",
                      stage_id, pcollection);
}

bool sd__em_source_pending(const sd_em *em)
{
    return em->source.pending != NULL && em->source.pending(em->source_ctx);
}

sd_status sd__em_source_step(sd_em *em, sd_err *err)
{
    sd__em_progressed(em); /* a scripted event is played: progress, whatever it holds */
    em->epoch++;
    em->in_source_step = true;
    sd_status rc = em->source.step(em->source_ctx, em, err);
    em->in_source_step = false;
    return rc;
}

sd_status sd_em_source_deliver(sd_em *em,
                               size_t pcoll,
                               const sd_bytes *elements,
                               const sd_time *timestamps,
                               size_t n,
                               sd_err *err)
{
    assert(em->in_source_step && pcoll < em->pcolls.len);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += elements[i].len;
    }
    /* One slab for the event's elements: every pending record points into it. */
    uint8_t *data = sd_malloc(total == 0 ? 1 : total);
    sd__slab *slab = data != NULL ? sd__slab_create(data, total) : NULL; /* frees data on failure */
    if (slab == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (elements[i].len > 0) {
            memcpy(data + off, elements[i].ptr, elements[i].len);
        }
        off += elements[i].len;
    }
    sd__pcoll *pc = sd__em_pcoll_at(em, pcoll);
    sd_status rc = SD_OK;
    off = 0;
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        sd__incoming in = {
            .ts = timestamps[i],
            .win = { .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true },
            .pane = SD_PANE_NO_FIRING,
            .elem = sd_bytes_make(data + off, elements[i].len),
            .slab = slab
        };
        off += elements[i].len;
        rc = sd__em_deliver(em, pc, &in, err);
    }
    sd__slab_unref(slab);
    return rc;
}

void sd_em_source_watermark(sd_em *em, size_t pcoll, sd_time wm)
{
    assert(em->in_source_step && pcoll < em->pcolls.len);
    sd__pcoll *pc = sd__em_pcoll_at(em, pcoll);
    pc->wm = SD_MAX(pc->wm, wm);
}

void sd_em_source_finish(sd_em *em, size_t stage)
{
    assert(em->in_source_step && stage < em->stages.len);
    const sd__stage *st = sd__em_stage_at(em, stage);
    for (size_t o = 0; o < st->n_outputs; o++) {
        sd__em_pcoll_at(em, st->outputs[o])->wm = SD_TIME_MAX;
    }
}

void sd_em_source_advance_clock(sd_em *em, int64_t ms)
{
    assert(em->in_source_step && ms >= 0);
    em->clock_now = ms >= SD_TIME_MAX ? SD_TIME_MAX : sd_time_add(em->clock_now, ms);
}
