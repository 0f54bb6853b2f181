/* Sundial: a growable array of fixed-size items. */
#ifndef SD_RUNNER_BASE_VEC_H
#define SD_RUNNER_BASE_VEC_H

#include <stddef.h>

#include "runner/base/status.h"

/*
 * sd_vec stores items by value (memcpy), item_size fixed at init. Pointers returned by
 * sd_vec_at are invalidated by any push (the storage may move). A zeroed sd_vec with
 * item_size set by sd_vec_init is empty.
 */
typedef struct sd_vec {
    void *items;
    size_t len;
    size_t cap;
    size_t item_size;
} sd_vec;

void sd_vec_init(sd_vec *v, size_t item_size);
void sd_vec_deinit(sd_vec *v);
void sd_vec_reset(sd_vec *v);
/* Append a copy of *item. */
SD_MUST_CHECK sd_status sd_vec_push(sd_vec *v, const void *item);
/* Append a zeroed item; OUT: slot (borrowed until the next push). */
SD_MUST_CHECK sd_status sd_vec_push_zero(sd_vec *v, void **slot);
SD_MUST_CHECK sd_status sd_vec_reserve(sd_vec *v, size_t n);
/* Remove item i, shifting the rest down (order kept). */
void sd_vec_remove(sd_vec *v, size_t i);

static inline void *sd_vec_at(const sd_vec *v, size_t i)
{
    return (char *)v->items + i * v->item_size;
}

#define SD_VEC_AT(v, type, i) ((type *)sd_vec_at((v), (i)))

#endif
