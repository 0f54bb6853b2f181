/*
 * Sundial planner: a bump arena.
 *
 * The planner creates thousands of small objects (strings, entry arrays, synthesized protobuf
 * messages) whose lifetimes are exactly two: the build call (scratch) and the plan (output).
 * Each lifetime gets one arena, so cleanup on any error path is a single call and the OOM test
 * can fail any allocation without leaking. Blocks come from sd_malloc, so injected failures
 * reach the planner. Memory is never reused inside an arena; the cost is some slack per block
 * (at most one block's tail), which is irrelevant at pipeline sizes.
 *
 * The arena also backs a ProtobufCAllocator, so descriptors unpacked into the plan need no
 * protobuf_c_message_free_unpacked: dropping the arena frees them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/plan/plan_int.h"

#define ARENA_BLOCK_MIN 16384

struct sd__plan_arena_block {
    sd__plan_arena_block *next;
    size_t cap;
    size_t used;
    max_align_t data[];
};

static size_t align_up(size_t n)
{
    size_t a = sizeof(max_align_t);
    return (n + a - 1) / a * a;
}

void *sd__plan_arena_alloc(sd__plan_arena *a, size_t n)
{
    size_t need = align_up(n == 0 ? 1 : n);
    sd__plan_arena_block *b = a->head;
    if (b == NULL || b->cap - b->used < need) {
        size_t cap = need > ARENA_BLOCK_MIN ? need : ARENA_BLOCK_MIN;
        b = sd_malloc(sizeof(*b) + cap);
        if (b == NULL) {
            a->failed = true;
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        /* A large one-off block goes behind the head so the head's free tail stays usable. */
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

char *sd__plan_arena_strdup(sd__plan_arena *a, const char *s)
{
    if (s == NULL) {
        s = "";
    }
    return sd__plan_arena_memdup(a, s, strlen(s) + 1);
}

void *sd__plan_arena_memdup(sd__plan_arena *a, const void *p, size_t n)
{
    void *q = sd__plan_arena_alloc(a, n);
    if (q != NULL && n > 0) {
        memcpy(q, p, n);
    }
    return q;
}

char *sd__plan_arena_printf(sd__plan_arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return NULL;
    }
    char *s = sd__plan_arena_alloc(a, (size_t)n + 1);
    if (s == NULL) {
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void sd__plan_arena_deinit(sd__plan_arena *a)
{
    sd__plan_arena_block *b = a->head;
    while (b != NULL) {
        sd__plan_arena_block *next = b->next;
        sd_free(b);
        b = next;
    }
    a->head = NULL;
    a->failed = false;
}

static void *pb_arena_alloc(void *data, size_t size)
{
    return sd__plan_arena_alloc(data, size);
}

static void pb_arena_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

ProtobufCAllocator sd__plan_arena_pb(sd__plan_arena *a)
{
    return (
        ProtobufCAllocator){ .alloc = pb_arena_alloc, .free = pb_arena_free, .allocator_data = a };
}
