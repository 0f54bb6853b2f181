/*
 * Sundial: the GroupByKey's value pool.
 *
 * A group's values used to live in a buffer of its own that grew by doubling. For many small
 * groups of values that are not tiny (10,000 keys of 6 or 7 values of 1 KiB: 64 MiB) that cost
 * more than twice the data on the server (tools/bench_memory.sh): each buffer carries up to
 * half again its bytes (8 KiB for 6 or 7 KiB), and every buffer it outgrew leaves a hole in
 * the allocator's heap, resident while the same values take new memory.
 *
 * So a small group's values of SD__VPOOL_MIN_VALUE bytes or more go to the GroupByKey's pool
 * instead: blocks of about 1 MiB in which every value is written once, where it lands, with no
 * room kept for its group's next values. A group's pooled values are a chain of segments (a
 * 24-byte header, then the bytes); a value extends its group's last segment in place when that
 * segment is the last thing written in the current block (a key's values that arrive
 * together), and otherwise starts a new segment there. Smaller values do not come here (a
 * header for each could cost more than the doubling), nor a group's values past
 * SD__VPOOL_MAX_GROUP bytes: such a group moves its pooled values to a buffer of its own
 * (em_gbk.c, group_add), past the bound one the server maps on its own, whose unused room is
 * never touched.
 *
 * A block counts the bytes of its live segments, in all and per memory page: a page that
 * empties goes back to the system at once (see pages_sub), and the block goes back to the
 * allocator when its last segment goes (values fire, are dropped, spilled or move to a group's
 * buffer); the current block is kept and reused from its start. When the segments that stay pin
 * blocks nonetheless (dead bytes in the blocks outnumber live ones by more than two blocks),
 * the GroupByKey compacts the pool: each group's chain is copied, as one segment, into fresh
 * blocks, and the old blocks go as they empty.
 *
 * Under AddressSanitizer every segment is a block of its own (no room after it), so a write
 * past a segment is still caught.
 */
#include <assert.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

#if defined(__SANITIZE_ADDRESS__)
#define VPOOL_EXACT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VPOOL_EXACT 1
#endif
#endif

#ifdef VPOOL_EXACT
#define SD__VPOOL_BLOCK ((size_t)0)
#else
#define SD__VPOOL_BLOCK ((size_t)1024 * 1024 - 64) /* with malloc's header, within 1 MiB */
#endif

#define HDR sizeof(sd__vseg)

/* The bytes a segment of len bytes of values takes in its block (a multiple of 8). */
static size_t seg_size(size_t len)
{
    return (HDR + len + 7) & ~(size_t)7;
}

static uint8_t *seg_data(sd__vseg *s)
{
    return (uint8_t *)(s + 1);
}

static size_t seg_off(const sd__vseg *s)
{
    return (size_t)((const uint8_t *)s - (const uint8_t *)s->block->data);
}

static size_t block_total(const sd__vblock *b)
{
    return sizeof(sd__vblock) + b->size;
}

/* ---- pages: a block's pages that empty go back to the system -------------------------- */
/*
 * Firing goes key by key, and a block holds values of many keys (round robin: each of its
 * pages a few consecutive keys' values of one round), so a block empties only when every key
 * in it has fired: at the end of a pass that fires every key, all the values would still be
 * resident beside all their panes. So each block counts the live bytes on each memory page it
 * spans, and a page that empties (wholly inside the block, and below where the current block
 * is written next) is given back at once: what is resident follows what is live to within a
 * few keys' values.
 */
static uintptr_t page_no(const sd__vblock *b, uintptr_t a)
{
    return a >> b->pool->page_shift;
}

static void pages_add(sd__vblock *b, size_t from, size_t to)
{
    if (b->pages == NULL) {
        return;
    }
    uintptr_t base = (uintptr_t)b->data, a = base + from, z = base + to;
    while (a < z) {
        uintptr_t next = (page_no(b, a) + 1) << b->pool->page_shift;
        uintptr_t e = next < z ? next : z;
        b->pages[page_no(b, a) - page_no(b, base)] += (uint32_t)(e - a);
        a = e;
    }
}

static void pages_sub(sd__vblock *b, size_t from, size_t to)
{
    if (b->pages == NULL) {
        return;
    }
    size_t page = (size_t)1 << b->pool->page_shift;
    uintptr_t base = (uintptr_t)b->data, a = base + from, z = base + to;
    uintptr_t limit = base + (b == b->pool->cur ? b->used : b->size);
    uintptr_t lo = 0, hi = 0; /* the run of emptied pages to give back */
    while (a < z) {
        uintptr_t pg = page_no(b, a) << b->pool->page_shift, next = pg + page;
        uintptr_t e = next < z ? next : z;
        uint32_t *n = &b->pages[page_no(b, a) - page_no(b, base)];
        assert(*n >= e - a);
        *n -= (uint32_t)(e - a);
        if (*n == 0 && pg >= base && next <= limit) {
            if (hi != pg) {
                if (hi > lo) {
                    sd_mem_discard((void *)lo, hi - lo);
                }
                lo = pg;
            }
            hi = next;
        }
        a = e;
    }
    if (hi > lo) {
        sd_mem_discard((void *)lo, hi - lo);
    }
}

/* ---- blocks ------------------------------------------------------------------------------ */

static void block_free(sd__vblock *b)
{
    b->pool->held -= block_total(b);
    sd_free(b->pages);
    sd_free(b);
}

/* A new current block with room for a segment of `need` bytes; the old one stays until it
 * empties (it goes now when it is empty already). */
static sd_status block_new(sd__vpool *p, size_t need)
{
    size_t room = SD__VPOOL_BLOCK > sizeof(sd__vblock) ? SD__VPOOL_BLOCK - sizeof(sd__vblock) : 0;
    size_t data = SD_MAX(room, need);
    if (data > SIZE_MAX - sizeof(sd__vblock)) {
        return SD_ETOOBIG;
    }
    if (p->page_shift == 0) {
        size_t page = sd_mem_page_size();
        while (((size_t)1 << p->page_shift) < page) {
            p->page_shift++;
        }
    }
    sd__vblock *b = sd_malloc(sizeof(sd__vblock) + data);
    if (b == NULL) {
        return SD_ENOMEM;
    }
    *b = (sd__vblock){ .pool = p, .size = data };
#ifndef VPOOL_EXACT
    uintptr_t base = (uintptr_t)b->data;
    size_t n_pages = (size_t)(page_no(b, base + data - 1) - page_no(b, base) + 1);
    b->pages = sd_calloc(n_pages, sizeof(uint32_t));
    if (b->pages == NULL) {
        sd_free(b);
        return SD_ENOMEM;
    }
#endif
    p->held += block_total(b);
    if (p->cur != NULL && p->cur->live == 0) {
        block_free(p->cur);
    }
    p->cur = b;
    return SD_OK;
}

/* Whether s is the last segment of the current block (so it may grow in place). */
static bool seg_at_end(const sd__vpool *p, const sd__vseg *s)
{
    const sd__vblock *b = p->cur;
    return b != NULL && s->block == b && seg_off(s) + seg_size(s->len) == b->used;
}

/* A new segment of len bytes (uninitialised) at the end of the current block. */
static sd_status seg_new(sd__vpool *p, size_t len, sd__vseg **out)
{
    if (len > SIZE_MAX / 2) {
        return SD_ETOOBIG;
    }
    size_t need = seg_size(len);
    if (p->cur == NULL || p->cur->size - p->cur->used < need) {
        sd_status rc = block_new(p, need);
        if (rc != SD_OK) {
            return rc;
        }
    }
    sd__vblock *b = p->cur;
    sd__vseg *s = (void *)((uint8_t *)b->data + b->used); /* 8-aligned: used is a multiple of 8 */
    *s = (sd__vseg){ .next = NULL, .block = b, .len = len };
    pages_add(b, b->used, b->used + need);
    b->used += need;
    b->live += need;
    p->live += need;
    *out = s;
    return SD_OK;
}

static void seg_free(sd__vseg *s)
{
    sd__vblock *b = s->block;
    sd__vpool *p = b->pool;
    size_t size = seg_size(s->len), off = seg_off(s);
    assert(b->live >= size && p->live >= size);
    b->live -= size;
    p->live -= size;
    if (b->live > 0) {
        pages_sub(b, off, off + size);
        return;
    }
    if (b == p->cur) {
        pages_sub(b, off, off + size);
        b->used = 0; /* the current block is reused from its start */
    } else {
        block_free(b);
    }
}

sd_status sd__vpool_append(sd__vpool *p, sd__vchain *c, sd_bytes value)
{
    sd__vseg *t = c->tail;
    if (t != NULL && seg_at_end(p, t)) {
        sd__vblock *b = t->block;
        size_t before = seg_size(t->len), after = seg_size(t->len + value.len);
        if (value.len <= b->size && after - before <= b->size - b->used) {
            memcpy(seg_data(t) + t->len, value.ptr, value.len);
            t->len += value.len;
            pages_add(b, b->used, b->used + (after - before));
            b->used += after - before;
            b->live += after - before;
            p->live += after - before;
            c->len += value.len;
            return SD_OK;
        }
    }
    sd__vseg *s;
    sd_status rc = seg_new(p, value.len, &s);
    if (rc != SD_OK) {
        return rc;
    }
    if (value.len > 0) {
        memcpy(seg_data(s), value.ptr, value.len);
    }
    if (t != NULL) {
        t->next = s;
    } else {
        c->head = s;
    }
    c->tail = s;
    c->len += value.len;
    return SD_OK;
}

void sd__vchain_release(sd__vchain *c)
{
    sd__vseg *s = c->head;
    while (s != NULL) {
        sd__vseg *next = s->next;
        seg_free(s);
        s = next;
    }
    *c = (sd__vchain){ 0 };
}

sd_status sd__vchain_copy(const sd__vchain *c, sd_buf *out)
{
    sd_status rc = sd_buf_reserve(out, c->len);
    for (sd__vseg *s = c->head; s != NULL && rc == SD_OK; s = s->next) {
        rc = sd_buf_append(out, seg_data(s), s->len);
    }
    return rc;
}

sd_status sd__vchain_to_buf(sd__vchain *c, sd_buf *to, size_t extra)
{
    if (extra > SIZE_MAX - c->len) {
        return SD_ETOOBIG;
    }
    sd_status rc = sd_buf_reserve(to, c->len + extra);
    if (rc == SD_OK) {
        rc = sd__vchain_copy(c, to);
    }
    if (rc == SD_OK) {
        sd__vchain_release(c);
    }
    return rc;
}

bool sd__vpool_wants_compact(const sd__vpool *p)
{
    return p->held > 2 * p->live + 2 * (SD__VPOOL_BLOCK + sizeof(sd__vblock));
}

void sd__vpool_compact_begin(sd__vpool *p)
{
    p->compactions++;
    if (p->cur != NULL && p->cur->live == 0) {
        block_free(p->cur);
    }
    p->cur = NULL;
}

sd_status sd__vpool_move(sd__vpool *p, sd__vchain *c)
{
    if (c->head == NULL) {
        return SD_OK;
    }
    sd__vseg *s;
    sd_status rc = seg_new(p, c->len, &s);
    if (rc != SD_OK) {
        return rc;
    }
    size_t at = 0;
    for (sd__vseg *t = c->head; t != NULL; t = t->next) {
        memcpy(seg_data(s) + at, seg_data(t), t->len);
        at += t->len;
    }
    size_t len = c->len;
    sd__vchain_release(c);
    *c = (sd__vchain){ .head = s, .tail = s, .len = len };
    return SD_OK;
}

size_t sd__vchain_footprint(const sd__vchain *c)
{
    size_t total = 0, len = 0;
    const sd__vseg *last = NULL;
    for (const sd__vseg *s = c->head; s != NULL; s = s->next) {
        total += seg_size(s->len);
        len += s->len;
        last = s;
    }
    return len == c->len && last == c->tail ? total : SIZE_MAX;
}

void sd__vpool_deinit(sd__vpool *p)
{
    assert(p->live == 0);
    if (p->cur != NULL) {
        block_free(p->cur);
    }
    *p = (sd__vpool){ 0 };
}
