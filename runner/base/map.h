/* Sundial: a hash map from byte-string keys to pointers. */
#ifndef SD_RUNNER_BASE_MAP_H
#define SD_RUNNER_BASE_MAP_H

#include <stdbool.h>
#include <stddef.h>

#include "runner/base/buf.h"

/*
 * Open addressing with linear probing and tombstones. The map owns a copy of each key; values
 * are borrowed pointers unless a value_free callback is given at init, in which case the map
 * frees values on remove, overwrite and deinit (Redis dictType style: ownership is declared once).
 * Iteration order is unspecified; use sd_map_sorted_keys() where determinism matters.
 */
typedef struct sd_map_entry {
    uint8_t *key; /* NULL = empty, SD_MAP_TOMBSTONE = deleted */
    size_t key_len;
    size_t hash;
    void *value;
} sd_map_entry;

typedef struct sd_map {
    sd_map_entry *slots;
    size_t cap;  /* power of two or 0 */
    size_t len;  /* live entries */
    size_t used; /* live + tombstones */
    void (*value_free)(void *value);
} sd_map;

/* Initialise in place. value_free may be NULL (values borrowed). A zeroed map is valid. */
void sd_map_init(sd_map *m, void (*value_free)(void *value));
/* Free keys (and values if value_free was given). Safe on a zeroed map. */
void sd_map_deinit(sd_map *m);

/* Borrowed value for key, or NULL when absent. */
void *sd_map_get(const sd_map *m, sd_bytes key);
void *sd_map_get_str(const sd_map *m, const char *key);
bool sd_map_has(const sd_map *m, sd_bytes key);
/* Where key's value is stored (to read or overwrite in place, with one lookup), or NULL when
 * absent. Valid until the map changes. */
void **sd_map_value_ref(const sd_map *m, sd_bytes key);

/*
 * Insert or replace. On replace, the old value is freed when value_free is set. The map
 * copies the key. On SD_ENOMEM nothing changed (the value is not freed: still the caller's).
 */
SD_MUST_CHECK sd_status sd_map_put(sd_map *m, sd_bytes key, void *value);
SD_MUST_CHECK sd_status sd_map_put_str(sd_map *m, const char *key, void *value);

/* Remove key; returns the value (NOT freed, even with value_free) or NULL when absent. */
void *sd_map_take(sd_map *m, sd_bytes key);
/* Remove key and free its value when value_free is set. Returns true if it was present. */
bool sd_map_remove(sd_map *m, sd_bytes key);

static inline size_t sd_map_len(const sd_map *m)
{
    return m->len;
}

/*
 * Iterate: `size_t it = 0; sd_bytes k; void *v; while (sd_map_next(m, &it, &k, &v)) {...}`.
 * The map must not be modified during iteration, except through sd_map_remove of the current key.
 */
bool sd_map_next(const sd_map *m, size_t *it, sd_bytes *key, void **value);

/*
 * The live keys sorted bytewise, as an array of borrowed slices (valid until the map changes).
 * Caller owns the array; free with sd_free. OUT: n. Returns NULL with *n = 0 for an empty map;
 * SD_ENOMEM is reported as NULL with *n != 0.
 */
sd_bytes *sd_map_sorted_keys(const sd_map *m, size_t *n);

/* 64-bit FNV-1a; exposed for callers that shard by key (its values are stable: builtins pick
 * Reshuffle keys with it). The map itself uses sd_hash_words. */
size_t sd_hash_bytes(sd_bytes key);

/*
 * A fast non-cryptographic hash of n bytes, eight at a time, for hash tables in this process
 * (the map, the engine's timer table): its values depend on the byte order of the machine and
 * may change between versions, so nothing may store them or let them decide an output order.
 * seed lets a caller chain several fields into one hash.
 */
uint64_t sd_hash_words(const void *p, size_t n, uint64_t seed);

#endif
