/*
 * Sundial: hash map.
 *
 * Linear probing keeps the table one flat array (cache friendly, one allocation). The table
 * doubles when live entries plus tombstones pass 70% of the capacity, which also clears the
 * tombstones. Keys are copied so that callers may pass slices of short-lived buffers (RPC
 * messages, bundle data). Cost: one allocation per key; acceptable since maps here hold stages,
 * PCollections, keys of a bundle, not individual elements in hot loops.
 *
 * Hashing. The map hashes with sd_hash_words, a word-at-a-time multiply-xorshift hash: FNV-1a
 * takes one multiply per byte in a dependent chain, which made hashing a 40-byte key the
 * largest single cost of the engine's GroupByKey (measured with perf in bench_engine); eight
 * bytes per multiply with a final avalanche is as good for linear probing and several times
 * faster on keys longer than a few bytes.
 */
#include "runner/base/map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"

static uint8_t tombstone_byte;
#define SD_MAP_TOMBSTONE (&tombstone_byte)

size_t sd_hash_bytes(sd_bytes key)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < key.len; i++) {
        h ^= key.ptr[i];
        h *= 1099511628211ULL;
    }
    return (size_t)h;
}

/* Multipliers: odd 64-bit constants with well-spread bits (the golden ratio's and two of
 * splitmix64's / MurmurHash3's finaliser). */
#define HASH_K1 0x9e3779b97f4a7c15ULL
#define HASH_K2 0xbf58476d1ce4e5b9ULL
#define HASH_K3 0x94d049bb133111ebULL

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

uint64_t sd_hash_words(const void *data, size_t n, uint64_t seed)
{
    const uint8_t *p = data;
    uint64_t h = (seed ^ HASH_K1) + (uint64_t)n * HASH_K2;
    while (n >= 8) {
        h = (h ^ load64(p)) * HASH_K3;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    if (n > 0) {
        /* The last 1..7 bytes, little end first: one word that depends on all of them. */
        uint64_t v = 0;
        for (size_t i = n; i-- > 0;) {
            v = (v << 8) | p[i];
        }
        h = (h ^ v) * HASH_K3;
        h ^= h >> 31;
    }
    /* Avalanche (splitmix64's finaliser), so the low bits the table masks depend on every
     * input bit. */
    h = (h ^ (h >> 30)) * HASH_K2;
    h = (h ^ (h >> 27)) * HASH_K3;
    return h ^ (h >> 31);
}

static inline size_t map_hash(sd_bytes key)
{
    return (size_t)sd_hash_words(key.ptr, key.len, 0);
}

void sd_map_init(sd_map *m, void (*value_free)(void *value))
{
    memset(m, 0, sizeof(*m));
    m->value_free = value_free;
}

void sd_map_deinit(sd_map *m)
{
    for (size_t i = 0; i < m->cap; i++) {
        sd_map_entry *e = &m->slots[i];
        if (e->key != NULL && e->key != SD_MAP_TOMBSTONE) {
            if (m->value_free != NULL) {
                m->value_free(e->value);
            }
            sd_free(e->key);
        }
    }
    sd_free(m->slots);
    m->slots = NULL;
    m->cap = m->len = m->used = 0;
}

static sd_map_entry *find(const sd_map *m, sd_bytes key, size_t hash)
{
    if (m->cap == 0) {
        return NULL;
    }
    size_t mask = m->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        sd_map_entry *e = &m->slots[i];
        if (e->key == NULL) {
            return NULL;
        }
        if (e->key != SD_MAP_TOMBSTONE && e->hash == hash && e->key_len == key.len &&
            (key.len == 0 || memcmp(e->key, key.ptr, key.len) == 0)) {
            return e;
        }
    }
}

void *sd_map_get(const sd_map *m, sd_bytes key)
{
    sd_map_entry *e = find(m, key, map_hash(key));
    return e == NULL ? NULL : e->value;
}

void *sd_map_get_str(const sd_map *m, const char *key)
{
    return sd_map_get(m, sd_bytes_str(key));
}

void **sd_map_value_ref(const sd_map *m, sd_bytes key)
{
    sd_map_entry *e = find(m, key, map_hash(key));
    return e == NULL ? NULL : &e->value;
}

bool sd_map_has(const sd_map *m, sd_bytes key)
{
    return find(m, key, map_hash(key)) != NULL;
}

static sd_status grow(sd_map *m)
{
    /* Double only when live entries need it; when tombstones filled the table, rehash at the
     * same size. Otherwise a map with steady put/remove churn (key locks, timers) would double
     * forever while holding few entries. */
    size_t cap = m->cap == 0 ? 16 : (m->len + 1) * 2 > m->cap ? m->cap * 2 : m->cap;
    sd_map_entry *slots = sd_calloc(cap, sizeof(*slots));
    if (slots == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        sd_map_entry *e = &m->slots[i];
        if (e->key == NULL || e->key == SD_MAP_TOMBSTONE) {
            continue;
        }
        size_t j = e->hash & (cap - 1);
        while (slots[j].key != NULL) {
            j = (j + 1) & (cap - 1);
        }
        slots[j] = *e;
    }
    sd_free(m->slots);
    m->slots = slots;
    m->cap = cap;
    m->used = m->len;
    return SD_OK;
}

sd_status sd_map_put(sd_map *m, sd_bytes key, void *value)
{
    size_t hash = map_hash(key);
    sd_map_entry *e = find(m, key, hash);
    if (e != NULL) {
        if (m->value_free != NULL && e->value != value) {
            m->value_free(e->value);
        }
        e->value = value;
        return SD_OK;
    }
    if ((m->used + 1) * 10 > m->cap * 7) {
        sd_status st = grow(m);
        if (st != SD_OK) {
            return st;
        }
    }
    uint8_t *copy = sd_malloc(key.len + 1);
    if (copy == NULL) {
        return SD_ENOMEM;
    }
    if (key.len > 0) {
        memcpy(copy, key.ptr, key.len);
    }
    copy[key.len] = '\0';
    size_t mask = m->cap - 1;
    size_t i = hash & mask;
    while (m->slots[i].key != NULL && m->slots[i].key != SD_MAP_TOMBSTONE) {
        i = (i + 1) & mask;
    }
    if (m->slots[i].key == NULL) {
        m->used++;
    }
    m->slots[i] = (sd_map_entry){ .key = copy, .key_len = key.len, .hash = hash, .value = value };
    m->len++;
    return SD_OK;
}

sd_status sd_map_put_str(sd_map *m, const char *key, void *value)
{
    return sd_map_put(m, sd_bytes_str(key), value);
}

void *sd_map_take(sd_map *m, sd_bytes key)
{
    sd_map_entry *e = find(m, key, map_hash(key));
    void *v;
    if (e == NULL) {
        return NULL;
    }
    v = e->value;
    sd_free(e->key);
    e->key = SD_MAP_TOMBSTONE;
    e->value = NULL;
    m->len--;
    return v;
}

bool sd_map_remove(sd_map *m, sd_bytes key)
{
    sd_map_entry *e = find(m, key, map_hash(key));
    if (e == NULL) {
        return false;
    }
    if (m->value_free != NULL) {
        m->value_free(e->value);
    }
    sd_free(e->key);
    e->key = SD_MAP_TOMBSTONE;
    e->value = NULL;
    m->len--;
    return true;
}

bool sd_map_next(const sd_map *m, size_t *it, sd_bytes *key, void **value)
{
    while (*it < m->cap) {
        sd_map_entry *e = &m->slots[(*it)++];
        if (e->key != NULL && e->key != SD_MAP_TOMBSTONE) {
            if (key != NULL) {
                *key = sd_bytes_make(e->key, e->key_len);
            }
            if (value != NULL) {
                *value = e->value;
            }
            return true;
        }
    }
    return false;
}

static int cmp_bytes(const void *a, const void *b)
{
    return sd_bytes_cmp(*(const sd_bytes *)a, *(const sd_bytes *)b);
}

sd_bytes *sd_map_sorted_keys(const sd_map *m, size_t *n)
{
    sd_bytes *keys;
    size_t it = 0, i = 0;
    *n = m->len;
    if (m->len == 0) {
        return NULL;
    }
    keys = sd_malloc(m->len * sizeof(*keys));
    if (keys == NULL) {
        return NULL;
    }
    while (sd_map_next(m, &it, &keys[i], NULL)) {
        i++;
    }
    qsort(keys, i, sizeof(*keys), cmp_bytes);
    return keys;
}
