/*
 * Sundial planner: the deterministic topological order of the leaf nodes.
 *
 * Kahn's algorithm over the producer index (graph.c's finish pass fills c->producer), always
 * taking the smallest ready node id in natural order (digit runs compare as numbers), so the
 * order, and therefore the stage numbering fusion derives from it, never depends on hashing or
 * map iteration order, and follows the order in which SDKs number their transforms. A cycle is
 * a problem naming up to six of the transforms involved. Cost: O((nodes + edges) log nodes),
 * with the edges laid out once as compressed rows.
 */
#include <stdint.h>
#include <string.h>

#include "runner/plan/plan_int.h"

/*
 * Natural order: digit runs compare as numbers ("transform_5" < "transform_23"), so stage
 * numbers follow the order in which SDKs number their transforms. Ties (e.g. "a01" vs "a1")
 * fall back to plain strcmp, keeping the order total.
 */
static int natural_cmp(const char *a, const char *b)
{
    const char *x = a;
    const char *y = b;
    while (*x != '\0' && *y != '\0') {
        bool dx = *x >= '0' && *x <= '9';
        bool dy = *y >= '0' && *y <= '9';
        if (dx && dy) {
            while (*x == '0') {
                x++;
            }
            while (*y == '0') {
                y++;
            }
            size_t nx = 0;
            size_t ny = 0;
            while (x[nx] >= '0' && x[nx] <= '9') {
                nx++;
            }
            while (y[ny] >= '0' && y[ny] <= '9') {
                ny++;
            }
            if (nx != ny) {
                return nx < ny ? -1 : 1;
            }
            int r = strncmp(x, y, nx);
            if (r != 0) {
                return r;
            }
            x += nx;
            y += ny;
            continue;
        }
        if (*x != *y) {
            return (unsigned char)*x < (unsigned char)*y ? -1 : 1;
        }
        x++;
        y++;
    }
    if (*x != *y) {
        return *x == '\0' ? -1 : 1;
    }
    return strcmp(a, b);
}

/* The ready set of sd__plan_topo_sort: a binary min-heap of node indices by natural id order. */
static bool ready_less(const pl_ctx *c, size_t a, size_t b)
{
    return natural_cmp(sd__plan_node(c, a)->id, sd__plan_node(c, b)->id) < 0;
}

static void ready_push(const pl_ctx *c, size_t *heap, size_t *len, size_t v)
{
    size_t i = (*len)++;
    heap[i] = v;
    while (i > 0 && ready_less(c, heap[i], heap[(i - 1) / 2])) {
        size_t parent = (i - 1) / 2, t = heap[i];
        heap[i] = heap[parent];
        heap[parent] = t;
        i = parent;
    }
}

static size_t ready_pop(const pl_ctx *c, size_t *heap, size_t *len)
{
    size_t top = heap[0];
    heap[0] = heap[--*len];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *len && ready_less(c, heap[l], heap[m])) {
            m = l;
        }
        if (r < *len && ready_less(c, heap[r], heap[m])) {
            m = r;
        }
        if (m == i) {
            break;
        }
        size_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
    return top;
}

/*
 * Kahn's algorithm, always taking the smallest ready id (natural order), so the order and the
 * stage numbering never depend on hashing: O((nodes + edges) log nodes). The edges come from
 * the producer index (one per consumed input that some node produces), laid out once as
 * compressed rows, so a pipeline of a million transforms sorts in well under a second.
 */
sd_status sd__plan_topo_sort(pl_ctx *c)
{
    size_t n = c->nodes.len;
    size_t n_edges = 0;
    for (size_t i = 0; i < n; i++) {
        n_edges += sd__plan_node(c, i)->n_inputs;
    }
    c->topo = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    size_t *indeg = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    bool *done = sd_arena_alloc(&c->scratch, sizeof(bool) * (n + 1));
    size_t *first = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 2)); /* row starts */
    size_t *fill = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    size_t *to = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n_edges + 1));
    size_t *heap = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    if (c->topo == NULL || indeg == NULL || done == NULL || first == NULL || fill == NULL ||
        to == NULL || heap == NULL) {
        return SD_ENOMEM;
    }
    memset(indeg, 0, sizeof(size_t) * (n + 1));
    memset(done, 0, sizeof(bool) * (n + 1));
    memset(first, 0, sizeof(size_t) * (n + 2));
    /* Count each producer's out-edges, then place them (first[p] .. first[p + 1]). */
    for (size_t i = 0; i < n; i++) {
        pl_node *nd = sd__plan_node(c, i);
        for (size_t j = 0; j < nd->n_inputs; j++) {
            uintptr_t v = (uintptr_t)sd_map_get_str(&c->producer, nd->inputs[j].pcoll);
            if (v != 0) {
                first[v]++; /* producer index v - 1, counted at v: prefix sums shift it */
                indeg[i]++;
            }
        }
    }
    for (size_t p = 1; p <= n + 1 && p < n + 2; p++) {
        first[p] += first[p - 1];
    }
    memcpy(fill, first, sizeof(size_t) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        pl_node *nd = sd__plan_node(c, i);
        for (size_t j = 0; j < nd->n_inputs; j++) {
            uintptr_t v = (uintptr_t)sd_map_get_str(&c->producer, nd->inputs[j].pcoll);
            if (v != 0) {
                to[fill[v - 1]++] = i;
            }
        }
    }
    size_t n_ready = 0;
    for (size_t i = 0; i < n; i++) {
        if (indeg[i] == 0) {
            ready_push(c, heap, &n_ready, i);
        }
    }
    c->n_topo = 0;
    while (n_ready > 0) {
        size_t best = ready_pop(c, heap, &n_ready);
        done[best] = true;
        c->topo[c->n_topo++] = best;
        for (size_t e = first[best]; e < first[best + 1]; e++) {
            if (--indeg[to[e]] == 0) {
                ready_push(c, heap, &n_ready, to[e]);
            }
        }
    }
    if (c->n_topo == n) {
        return SD_OK;
    }
    sd_buf names;
    sd_buf_init(&names, 0);
    size_t listed = 0;
    sd_status st = SD_OK;
    for (size_t i = 0; st == SD_OK && i < n && listed < 6; i++) {
        if (!done[i]) {
            st = sd_buf_printf(&names, "%s\"%s\"", listed ? ", " : "", sd__plan_node(c, i)->id);
            listed++;
        }
    }
    if (st == SD_OK) {
        st = sd_buf_append_byte(&names, 0);
    }
    if (st == SD_OK) {
        st = sd__plan_problem(c, true, "the transforms form a cycle (involving %s%s)",
                              (const char *)names.data, n - c->n_topo > listed ? ", ..." : "");
    }
    sd_buf_deinit(&names);
    return st;
}
