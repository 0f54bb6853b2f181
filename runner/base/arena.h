/* Sundial: a bump arena — many small allocations with one lifetime, freed at once. */
#ifndef SD_RUNNER_BASE_ARENA_H
#define SD_RUNNER_BASE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "runner/base/status.h"

typedef struct sd_arena_block sd_arena_block;

/* A zeroed sd_arena is empty and ready. Blocks come from sd_malloc (failures injectable). */
typedef struct sd_arena {
    sd_arena_block *head;
    bool failed; /* some allocation failed (sticky until sd_arena_deinit) */
} sd_arena;

/* Zeroed, max_align_t-aligned memory valid until sd_arena_deinit; NULL (and failed) on
 * allocation failure. */
void *sd_arena_alloc(sd_arena *a, size_t n);
/* Copies into the arena; a NULL string copies as "". */
char *sd_arena_strdup(sd_arena *a, const char *s);
void *sd_arena_memdup(sd_arena *a, const void *p, size_t n);
char *sd_arena_printf(sd_arena *a, const char *fmt, ...) SD_PRINTF(2, 3);
/* Free every block. The arena is empty and reusable afterwards. Safe on a zeroed arena. */
void sd_arena_deinit(sd_arena *a);

#endif
