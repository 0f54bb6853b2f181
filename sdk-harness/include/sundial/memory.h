/*
 * Sundial C SDK: memory the SDK hands to its caller.
 *
 * Whatever a call documents as "caller owns; free with sd_free" came from Sundial's allocator
 * and goes back to it here (tests may replace that allocator, so plain free() is wrong).
 */
#ifndef SD_SUNDIAL_MEMORY_H
#define SD_SUNDIAL_MEMORY_H

#include <stddef.h>
#include <sundial/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Allocate / free through Sundial's allocator. sd_malloc returns NULL when out of memory;
 * sd_free(NULL) does nothing. */
SD_API void *sd_malloc(size_t size);
SD_API void sd_free(void *ptr);

#ifdef __cplusplus
}
#endif

#endif
