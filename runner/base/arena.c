/*
 * Sundial: bump arena.
 *
 * For objects whose lifetimes are the same — a plan, a proto tree being built, one call's
 * scratch space — so cleanup on any error path is a single call and an OOM test can fail any
 * allocation without leaking. Memory is never reused inside an arena; the cost is some slack
 * per block (at most one block's tail). Blocks are at least 16 KiB; a larger one-off request
 * gets its own block, placed behind the head so the head's free tail stays usable.
 */
#include "runner/base/arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"

#define ARENA_BLOCK_MIN 16384

struct sd_arena_block {
    sd_arena_block *next;
    size_t cap;
    size_t used;
    max_align_t data[];
};

static size_t align_up(size_t n)
{
    size_t a = sizeof(max_align_t);
    return (n + a - 1) / a * a;
}

void *sd_arena_alloc(sd_arena *a, size_t n)
{
    size_t need = align_up(n == 0 ? 1 : n);
    sd_arena_block *b = a->head;
    if (b == NULL || b->cap - b->used < need) {
        size_t cap = need > ARENA_BLOCK_MIN ? need : ARENA_BLOCK_MIN;
        b = sd_malloc(sizeof(*b) + cap);
        if (b == NULL) {
            a->failed = true;
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        if (a->head != NULL && need > ARENA_BLOCK_MIN) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = (char *)b->data + b->used;
    b->used += need;
    memset(p, 0, need);
    return p;
}

char *sd_arena_strdup(sd_arena *a, const char *s)
{
    if (s == NULL) {
        s = "";
    }
    return sd_arena_memdup(a, s, strlen(s) + 1);
}

void *sd_arena_memdup(sd_arena *a, const void *p, size_t n)
{
    void *q = sd_arena_alloc(a, n);
    if (q != NULL && n > 0) {
        memcpy(q, p, n);
    }
    return q;
}

char *sd_arena_printf(sd_arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        a->failed = true;
        return NULL;
    }
    char *s = sd_arena_alloc(a, (size_t)n + 1);
    if (s == NULL) {
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void sd_arena_deinit(sd_arena *a)
{
    sd_arena_block *b = a->head;
    while (b != NULL) {
        sd_arena_block *next = b->next;
        sd_free(b);
        b = next;
    }
    a->head = NULL;
    a->failed = false;
}
