/*
 * Sundial C SDK: the worker's user-state cache across bundles.
 *
 * A runner that sends a user-state cache token with a ProcessBundleRequest promises that
 * nothing but this worker's bundles changes that stage's user state while the token stays the
 * same. Bag user state (the C SDK's value, bag and combining state) read or written under a
 * token is kept here, whole values only, across bundles, until the token of that stage (its
 * descriptor) changes, a bundle with the token fails, or the least recently used entries go to
 * keep the cache within its byte budget. Writes still go to the runner (worker_io.c); the
 * cache only spares reads. Thread-safe: bundles of several stages use it at once.
 *
 * The budget: SUNDIAL_STATE_CACHE_MB in the worker's environment (MiB; 0 keeps nothing across
 * bundles), else SD_SCACHE_DEFAULT_MB.
 */
#ifndef SD_SDK_HARNESS_SRC_STATE_CACHE_H
#define SD_SDK_HARNESS_SRC_STATE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"

#define SD_SCACHE_DEFAULT_MB 64

typedef struct sd__scache sd__scache;

typedef struct sd__scache_stats {
    uint64_t hits, misses;  /* sd__scache_get */
    uint64_t evictions;     /* entries dropped for the budget */
    uint64_t dropped;       /* entries dropped with their token */
    uint64_t token_changes; /* a stage's bundle came with another token */
    size_t bytes, entries;  /* now */
} sd__scache_stats;

/* The budget from the environment (see above). */
size_t sd__scache_default_budget(void);
/* A cache of budget bytes (0: keeps nothing), or NULL when out of memory. */
sd__scache *sd__scache_new(size_t budget);
void sd__scache_free(sd__scache *c);

/* A bundle of descriptor desc_id starts with token (empty: none). Drops the entries of the
 * descriptor's previous token when it differs. Returns whether the bundle may use the cache
 * (a token, a budget, the token not dead). */
bool sd__scache_begin(sd__scache *c, const char *desc_id, sd_bytes token);
/* A bundle with token failed: drop the token's entries and keep nothing more under it. */
void sd__scache_fail(sd__scache *c, const char *desc_id, sd_bytes token);
/* Append the cached value of key under token to out; false (out untouched) when not held. */
bool sd__scache_get(sd__scache *c, const char *desc_id, sd_bytes token, sd_bytes key, sd_buf *out);

typedef enum sd__scache_op {
    SD_SCACHE_PUT,    /* the whole value is data (read from the runner) */
    SD_SCACHE_APPEND, /* data appended (kept only when the value is held) */
    SD_SCACHE_CLEAR,  /* cleared: known empty */
} sd__scache_op;

/* Follow what the bundle read or wrote for key under token. */
void sd__scache_update(sd__scache *c,
                       const char *desc_id,
                       sd_bytes token,
                       sd_bytes key,
                       sd__scache_op op,
                       sd_bytes data);

sd__scache_stats sd__scache_stats_get(sd__scache *c);

#endif
