/*
 * Sundial: growable arrays. Doubling growth; items are plain memory copied with memcpy, so
 * ownership of anything an item points to stays with the code that uses the vector.
 */
#include "runner/base/vec.h"

#include <string.h>

#include "runner/base/alloc.h"

void sd_vec_init(sd_vec *v, size_t item_size)
{
    v->items = NULL;
    v->len = 0;
    v->cap = 0;
    v->item_size = item_size;
}

void sd_vec_deinit(sd_vec *v)
{
    sd_free(v->items);
    v->items = NULL;
    v->len = 0;
    v->cap = 0;
}

void sd_vec_reset(sd_vec *v)
{
    v->len = 0;
}

sd_status sd_vec_reserve(sd_vec *v, size_t n)
{
    size_t cap;
    void *p;
    if (n <= v->cap) {
        return SD_OK;
    }
    cap = v->cap == 0 ? 8 : v->cap;
    while (cap < n) {
        cap *= 2;
    }
    p = sd_realloc(v->items, cap * v->item_size);
    if (p == NULL) {
        return SD_ENOMEM;
    }
    v->items = p;
    v->cap = cap;
    return SD_OK;
}

sd_status sd_vec_push(sd_vec *v, const void *item)
{
    sd_status st = sd_vec_reserve(v, v->len + 1);
    if (st != SD_OK) {
        return st;
    }
    memcpy((char *)v->items + v->len * v->item_size, item, v->item_size);
    v->len++;
    return SD_OK;
}

sd_status sd_vec_push_zero(sd_vec *v, void **slot)
{
    sd_status st = sd_vec_reserve(v, v->len + 1);
    if (st != SD_OK) {
        return st;
    }
    *slot = (char *)v->items + v->len * v->item_size;
    memset(*slot, 0, v->item_size);
    v->len++;
    return SD_OK;
}

void sd_vec_remove(sd_vec *v, size_t i)
{
    if (i >= v->len) {
        return;
    }
    memmove((char *)v->items + i * v->item_size, (char *)v->items + (i + 1) * v->item_size,
            (v->len - i - 1) * v->item_size);
    v->len--;
}
