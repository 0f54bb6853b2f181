/*
 * Sundial: the element heaps — a stage's pending elements (and a time-sorted stage's held
 * ones), a min-heap by (timestamp, arrival sequence) in an sd_vec of sd__elem.
 *
 * Four children a node (SD__ELEM_HEAP_ARITY), sifted with a hole: the moving element is held
 * aside and each level moves one record, not a swap of three. An sd__elem is about a hundred
 * bytes, so the copies, not the comparisons, were the cost: an element in many windows (a
 * sliding window with a short period) is that many records, all pushed and taken one by one.
 * With four children a heap is half as deep, so a take moves half as many records for the
 * same number of comparisons.
 *
 * The sequence numbers are unique in a heap, so the order is total and the take order does not
 * depend on the heap's shape.
 *
 * The fuzz build leaves this file without comparison tracing (tests/fuzz/coverage_ignore.txt):
 * which child is least says nothing about the input, and tracing each comparison was most of
 * the time of an input whose elements are in many windows.
 */
#include <assert.h>

#include "runner/engine/em_int.h"

bool sd__elem_less(const sd__elem *a, const sd__elem *b)
{
    return a->ts < b->ts || (a->ts == b->ts && a->seq < b->seq);
}

/* Put e into the hole at i and move it up while it is less than its parent. */
static void sift_up(sd__elem *a, size_t i, const sd__elem *e)
{
    while (i > 0) {
        size_t p = (i - 1) / SD__ELEM_HEAP_ARITY;
        if (!sd__elem_less(e, &a[p])) {
            break;
        }
        a[i] = a[p];
        i = p;
    }
    a[i] = *e;
}

/* Put e into the hole at i of a heap of n records and move it down below its least child
 * while that child is less. */
static void sift_down(sd__elem *a, size_t n, size_t i, const sd__elem *e)
{
    for (;;) {
        size_t first = SD__ELEM_HEAP_ARITY * i + 1;
        if (first >= n) {
            break;
        }
        size_t end = first + SD__ELEM_HEAP_ARITY < n ? first + SD__ELEM_HEAP_ARITY : n;
        size_t m = first;
        for (size_t c = first + 1; c < end; c++) {
            if (sd__elem_less(&a[c], &a[m])) {
                m = c;
            }
        }
        if (!sd__elem_less(&a[m], e)) {
            break;
        }
        a[i] = a[m];
        i = m;
    }
    a[i] = *e;
}

sd_status sd__elem_heap_push(sd_vec *h, const sd__elem *e)
{
    sd__elem copy = *e; /* e may point into h, which growing it may move */
    sd_status st = sd_vec_reserve(h, h->len + 1);
    if (st != SD_OK) {
        return st;
    }
    /* The new last slot is the hole: e is written once, where it ends up. */
    sift_up(h->items, h->len++, &copy);
    return SD_OK;
}

void sd__elem_heap_take(sd_vec *h, size_t at, sd__elem *out)
{
    sd__elem *a = h->items;
    assert(at < h->len);
    *out = a[at];
    h->len--;
    if (at == h->len) {
        return;
    }
    /* The last record fills the hole: it belongs above `at` or at or below it. */
    sd__elem last = a[h->len];
    if (at > 0 && sd__elem_less(&last, &a[(at - 1) / SD__ELEM_HEAP_ARITY])) {
        sift_up(a, at, &last);
    } else {
        sift_down(a, h->len, at, &last);
    }
}

bool sd__elem_heap_ok(const sd_vec *h)
{
    const sd__elem *a = h->items;
    for (size_t i = 1; i < h->len; i++) {
        if (sd__elem_less(&a[i], &a[(i - 1) / SD__ELEM_HEAP_ARITY])) {
            return false;
        }
    }
    return true;
}
