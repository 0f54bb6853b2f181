/*
 * Sundial: the timer identity table (sd__ttable): a stage's stored timers by (family, window,
 * key, tag).
 *
 * The identity table (sd__ttable) is intrusive: a timer is one allocation with its key and
 * tag, carries the hash of its identity, and the table's slots hold (hash, pointer). Taking a
 * timer that is known by pointer (firing it) costs no hashing and no comparison, and setting
 * one compares fields, not an encoded identity. It replaced a byte-keyed sd_map whose every
 * operation re-encoded the identity and copied it into a key of its own (measured: the map's
 * lookups were a quarter of bench_pt_timers' time).
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

uint64_t sd__timer_hash(size_t family, const sd__win *w, uint64_t key_hash, sd_bytes tag)
{
    uint64_t win = w->global ? 0x5bd1e995u : (uint64_t)w->start * 31u ^ (uint64_t)w->end;
    return sd_hash_words(tag.ptr, tag.len, key_hash ^ ((uint64_t)family << 40) ^ win);
}

sd__timer *
sd__timer_create(sd__tpool *pool, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag)
{
    uint64_t kh = sd_hash_words(key.ptr, key.len, 0);
    return sd__timer_create_hashed(pool, family, w, key, tag, kh,
                                   sd__timer_hash(family, w, kh, tag));
}

static bool
timer_is(const sd__timer *t, size_t family, const sd__win *w, sd_bytes key, sd_bytes tag)
{
    return t->family == family && t->win.global == w->global && t->win.start == w->start &&
           t->win.end == w->end && t->key_len == key.len && t->tag_len == tag.len &&
           (key.len == 0 || memcmp(t->key, key.ptr, key.len) == 0) &&
           (tag.len == 0 || memcmp(t->key + t->key_len, tag.ptr, tag.len) == 0);
}

sd__timer *sd__timers_find_hashed(const sd__ttable *tt,
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
    return sd__timers_find_hashed(tt, hash, family, w, key, tag);
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
        SD__PREFETCH(&tt->slots[(size_t)hash & (tt->cap - 1)]);
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
    SD__PREFETCH(&tt->slots[(size_t)h->items[0].t->hash & (tt->cap - 1)]);
    size_t last = SD_MIN(h->len, 1 + SD__THEAP_ARITY), m = 1;
    for (size_t c = 2; c < last; c++) {
        m = h->items[c].due < h->items[m].due ? c : m;
    }
    if (m < last) {
        SD__PREFETCH(h->items[m].t);
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
