/*
 * Sundial: timer memory — a stage's pool of timer blocks (sd__tpool) and timer records
 * (sd__timer_create, sd__timer_destroy).
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

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
