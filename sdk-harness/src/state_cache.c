/*
 * Sundial C SDK: the worker's user-state cache across bundles (see state_cache.h).
 *
 * Entries are keyed by (token, packed StateKey): a 4-byte token length, the token, the key.
 * Each holds the whole value (the concatenated encodings the runner would answer) and sits in
 * one LRU list, most recently used first; the bytes counted per entry are its key, its value's
 * capacity and a fixed overhead, and the least recently used entries go while the total is
 * over the budget. Every descriptor (a stage of the job) remembers the token its last bundle
 * came with: a bundle with another token drops the old token's entries, since the runner
 * changes the token exactly when what it holds may differ from them. A failed bundle drops its
 * token's entries and marks the token dead: its writes were sent but are not committed, so
 * nothing is kept under it any more, whatever later bundles bring it.
 */
#include "sdk-harness/src/state_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/map.h"

/* Bytes counted per entry beyond its key and value: the entry, the map slot, allocator
 * headers (an estimate). */
#define ENTRY_OVERHEAD 96

typedef struct entry {
    struct entry *prev, *next; /* LRU list: head most recently used */
    sd_buf key;                /* token length (4 bytes), token, packed StateKey */
    sd_buf value;
    size_t cost;
} entry;

typedef struct desc_token {
    sd_buf token;
    bool dead; /* a bundle with this token failed: nothing is kept under it */
} desc_token;

struct sd__scache {
    pthread_mutex_t mu;
    size_t budget;
    size_t used;
    sd_map entries; /* key -> entry * (owned) */
    sd_map descs;   /* descriptor id -> desc_token * (owned) */
    entry *head, *tail;
    sd__scache_stats stats;
};

static void entry_free(void *p)
{
    entry *e = p;
    if (e != NULL) {
        sd_buf_deinit(&e->key);
        sd_buf_deinit(&e->value);
        sd_free(e);
    }
}

static void desc_token_free(void *p)
{
    desc_token *d = p;
    if (d != NULL) {
        sd_buf_deinit(&d->token);
        sd_free(d);
    }
}

size_t sd__scache_default_budget(void)
{
    const char *s = getenv("SUNDIAL_STATE_CACHE_MB");
    if (s != NULL && s[0] != '\0') {
        char *end = NULL;
        unsigned long long mb = strtoull(s, &end, 10);
        if (end != NULL && *end == '\0' && s[0] != '-' && mb <= (SIZE_MAX >> 20)) {
            return (size_t)mb << 20;
        }
    }
    return (size_t)SD_SCACHE_DEFAULT_MB << 20;
}

sd__scache *sd__scache_new(size_t budget)
{
    sd__scache *c = sd_calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->budget = budget;
    sd_map_init(&c->entries, entry_free);
    sd_map_init(&c->descs, desc_token_free);
    return c;
}

void sd__scache_free(sd__scache *c)
{
    if (c == NULL) {
        return;
    }
    sd_map_deinit(&c->entries);
    sd_map_deinit(&c->descs);
    pthread_mutex_destroy(&c->mu);
    sd_free(c);
}

static void lru_unlink(sd__scache *c, entry *e)
{
    if (e->prev != NULL) {
        e->prev->next = e->next;
    } else {
        c->head = e->next;
    }
    if (e->next != NULL) {
        e->next->prev = e->prev;
    } else {
        c->tail = e->prev;
    }
    e->prev = e->next = NULL;
}

static void lru_front(sd__scache *c, entry *e)
{
    e->next = c->head;
    e->prev = NULL;
    if (c->head != NULL) {
        c->head->prev = e;
    }
    c->head = e;
    if (c->tail == NULL) {
        c->tail = e;
    }
}

static void entry_drop(sd__scache *c, entry *e)
{
    lru_unlink(c, e);
    c->used -= e->cost;
    sd_map_remove(&c->entries, sd_buf_bytes(&e->key));
}

/* Recount e's cost after its value changed; evict from the LRU end while over budget (never
 * keep: an entry alone over budget goes too). */
static void recost(sd__scache *c, entry *e)
{
    c->used -= e->cost;
    e->cost = ENTRY_OVERHEAD + e->key.len + e->value.cap;
    c->used += e->cost;
    while (c->used > c->budget && c->tail != NULL) {
        c->stats.evictions++;
        entry_drop(c, c->tail);
    }
}

static sd_status make_key(sd_buf *out, sd_bytes token, sd_bytes key)
{
    uint8_t len[4] = { (uint8_t)(token.len >> 24), (uint8_t)(token.len >> 16),
                       (uint8_t)(token.len >> 8), (uint8_t)token.len };
    sd_buf_reset(out);
    if (token.len > UINT32_MAX) {
        return SD_EINVAL;
    }
    sd_status st = sd_buf_append(out, len, sizeof(len));
    if (st == SD_OK) {
        st = sd_buf_append_bytes(out, token);
    }
    if (st == SD_OK) {
        st = sd_buf_append_bytes(out, key);
    }
    return st;
}

static bool has_token(const entry *e, sd_bytes token)
{
    return e->key.len >= 4 + token.len &&
           (((size_t)e->key.data[0] << 24) | ((size_t)e->key.data[1] << 16) |
            ((size_t)e->key.data[2] << 8) | e->key.data[3]) == token.len &&
           (token.len == 0 || memcmp(e->key.data + 4, token.ptr, token.len) == 0);
}

/* Drop every entry of token. Under mu. */
static void drop_token(sd__scache *c, sd_bytes token)
{
    entry *e = c->head;
    while (e != NULL) {
        entry *next = e->next;
        if (has_token(e, token)) {
            c->stats.dropped++;
            entry_drop(c, e);
        }
        e = next;
    }
}

bool sd__scache_begin(sd__scache *c, const char *desc_id, sd_bytes token)
{
    if (c == NULL || c->budget == 0 || token.len == 0 || desc_id == NULL) {
        return false;
    }
    bool use = false;
    pthread_mutex_lock(&c->mu);
    desc_token *d = sd_map_get_str(&c->descs, desc_id);
    if (d != NULL && sd_bytes_equal(sd_buf_bytes(&d->token), token)) {
        use = !d->dead;
    } else {
        if (d != NULL) {
            c->stats.token_changes++;
            drop_token(c, sd_buf_bytes(&d->token));
            sd_buf_reset(&d->token);
            d->dead = false;
        } else if ((d = sd_calloc(1, sizeof(*d))) != NULL) {
            sd_buf_init(&d->token, 0);
            if (sd_map_put_str(&c->descs, desc_id, d) != SD_OK) {
                desc_token_free(d);
                d = NULL;
            }
        }
        if (d != NULL) {
            if (sd_buf_append_bytes(&d->token, token) == SD_OK) {
                use = true;
            } else {
                sd_map_remove(&c->descs, sd_bytes_str(desc_id));
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    return use;
}

void sd__scache_fail(sd__scache *c, const char *desc_id, sd_bytes token)
{
    if (c == NULL || token.len == 0) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    drop_token(c, token);
    desc_token *d = desc_id != NULL ? sd_map_get_str(&c->descs, desc_id) : NULL;
    if (d != NULL && sd_bytes_equal(sd_buf_bytes(&d->token), token)) {
        d->dead = true;
    }
    pthread_mutex_unlock(&c->mu);
}

/* Whether bundles with token may still use the cache (not dead). Under mu. */
static bool token_live(const sd__scache *c, const char *desc_id, sd_bytes token)
{
    const desc_token *d = sd_map_get_str(&c->descs, desc_id);
    return d != NULL && !d->dead && sd_bytes_equal(sd_buf_bytes(&d->token), token);
}

bool sd__scache_get(sd__scache *c, const char *desc_id, sd_bytes token, sd_bytes key, sd_buf *out)
{
    sd_buf k;
    sd_buf_init(&k, 0);
    bool hit = false;
    if (make_key(&k, token, key) == SD_OK) {
        pthread_mutex_lock(&c->mu);
        entry *e = token_live(c, desc_id, token) ? sd_map_get(&c->entries, sd_buf_bytes(&k)) : NULL;
        if (e != NULL && sd_buf_append_bytes(out, sd_buf_bytes(&e->value)) == SD_OK) {
            lru_unlink(c, e);
            lru_front(c, e);
            hit = true;
            c->stats.hits++;
        } else {
            c->stats.misses++;
        }
        pthread_mutex_unlock(&c->mu);
    }
    sd_buf_deinit(&k);
    return hit;
}

/* The entry of k, made (empty) when absent and make is set; NULL when absent or out of
 * memory. Under mu. */
static entry *entry_for(sd__scache *c, const sd_buf *k, bool make)
{
    entry *e = sd_map_get(&c->entries, sd_buf_bytes(k));
    if (e != NULL || !make) {
        return e;
    }
    e = sd_calloc(1, sizeof(*e));
    if (e == NULL) {
        return NULL;
    }
    sd_buf_init(&e->key, 0);
    sd_buf_init(&e->value, 0);
    if (sd_buf_append_bytes(&e->key, sd_buf_bytes(k)) != SD_OK ||
        sd_map_put(&c->entries, sd_buf_bytes(k), e) != SD_OK) {
        entry_free(e);
        return NULL;
    }
    lru_front(c, e);
    return e;
}

void sd__scache_update(sd__scache *c,
                       const char *desc_id,
                       sd_bytes token,
                       sd_bytes key,
                       sd__scache_op op,
                       sd_bytes data)
{
    sd_buf k;
    sd_buf_init(&k, 0);
    if (make_key(&k, token, key) != SD_OK) {
        sd_buf_deinit(&k);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (op == SD_SCACHE_PUT && ENTRY_OVERHEAD + k.len + data.len > c->budget) {
        /* Never kept (it would go at once): not even copied. */
        entry *e = sd_map_get(&c->entries, sd_buf_bytes(&k));
        if (e != NULL) {
            entry_drop(c, e);
        }
    } else if (token_live(c, desc_id, token)) {
        /* An append to a value not held stays unknown: the whole value is not known here. */
        entry *e = entry_for(c, &k, op != SD_SCACHE_APPEND);
        if (e != NULL) {
            sd_status st = SD_OK;
            if (op != SD_SCACHE_APPEND) {
                sd_buf_reset(&e->value);
            }
            if (op != SD_SCACHE_CLEAR) {
                st = sd_buf_append_bytes(&e->value, data);
            }
            if (st != SD_OK) {
                entry_drop(c, e);
            } else {
                lru_unlink(c, e);
                lru_front(c, e);
                recost(c, e);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    sd_buf_deinit(&k);
}

sd__scache_stats sd__scache_stats_get(sd__scache *c)
{
    pthread_mutex_lock(&c->mu);
    sd__scache_stats s = c->stats;
    s.bytes = c->used;
    s.entries = sd_map_len(&c->entries);
    pthread_mutex_unlock(&c->mu);
    return s;
}
