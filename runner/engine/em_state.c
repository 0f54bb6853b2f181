/*
 * Sundial: element manager state — side-input stores and user state.
 *
 * Side inputs. Every (consuming stage, side input) has its own store, filled as the side
 * PCollection's elements are delivered: per window (decoded with the side PCollection's window
 * coder), an iterable side input keeps the concatenated element encodings, and a multimap side
 * input keeps, per key encoding, the concatenated value encodings. A main element goes into a
 * bundle only once the side window it will read is complete (em_bundle.c, side-input
 * readiness: the side watermark has passed that window's max timestamp, under Beam's window
 * mapping), so in batch a side input is complete before its first reader runs; timers still
 * wait for every side watermark to reach the stage's upstream watermark. Windows whose max
 * timestamp is behind the consuming stage's output watermark can no longer be read and are
 * dropped.
 *
 * Triggered side inputs (a non-default trigger on the side PCollection) hold, per window, the
 * elements of the latest firing only: each element carries the pane of the GroupByKey firing
 * that made it; a higher pane index than the window holds replaces the window's contents, an
 * equal one adds to them (other keys fired in the same pane index), a lower one is stale and
 * dropped. So a Combine.globally over a repeated trigger reads as a singleton whatever the
 * accumulation mode (discarding: that firing's values; accumulating: all so far). Known limit:
 * with several keys firing independently, a key's newer pane also hides other keys' older
 * panes in that window. Elements that arrive while the reading stage has bundles in flight are
 * staged (copied) and applied once it has none (sd__side_flush, from sd__em_make_bundle).
 *
 * User state. Committed state lives per stateful stage, keyed by (transform, state id,
 * window, key) — all as the SDK encodes them — with the window decoded once so expired windows
 * can be dropped (max ts + allowed lateness behind the output watermark; the output watermark
 * is held by pending timers' holds, so an end-of-window timer still sees its state). A bundle
 * never writes committed state directly: its changes are deltas (a clear flag plus appended
 * bytes, per multimap key too) applied at commit, so a failed bundle leaves no trace. Reads
 * merge committed state and the bundle's deltas. Stateful stages run at most one bundle per
 * key, so deltas of concurrent bundles never touch the same cell.
 *
 * Ordered-list state lives in the same cells: entries (int64 sort key, value bytes) sorted by
 * sort key, equal keys in append order, in an array whose live part starts at `head` — the
 * usual pattern (append in time order, read and clear a prefix up to the watermark) costs
 * O(1) per append and per cleared entry. A bundle's delta records the ranges it cleared (they
 * hide committed entries) and its own appended entries (later clears already applied); reads
 * merge the two, and commit clears the ranges then merges the entries in (one backward merge
 * when many land inside the list). Known cost: an append inside a large list memmoves.
 */
#include <assert.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

static void buf_destroy(void *p)
{
    sd_buf *b = p;
    if (b != NULL) {
        sd_buf_deinit(b);
        sd_free(b);
    }
}

static void side_window_destroy(void *p)
{
    sd__side_window *sw = p;
    if (sw != NULL) {
        sd_buf_deinit(&sw->all);
        sd_map_deinit(&sw->by_key);
        sd_free(sw);
    }
}

void sd__side_init(sd__side *s)
{
    sd_map_init(&s->windows, side_window_destroy);
    sd_vec_init(&s->staged, sizeof(sd__side_staged));
    s->min_expire = SD_TIME_MAX;
}

static void staged_clear(sd__side *s);

void sd__side_deinit(sd__side *s)
{
    staged_clear(s);
    sd_vec_deinit(&s->staged);
    sd_map_deinit(&s->windows);
    sd_free(s->transform_id);
    sd_free(s->local_id);
}

static void win_key(uint8_t k[17], const sd__win *w)
{
    uint64_t a = (uint64_t)w->start, b = (uint64_t)w->end;
    k[0] = w->global ? 1 : 0;
    for (int i = 7; i >= 0; i--) {
        k[1 + i] = (uint8_t)(a & 0xff);
        k[9 + i] = (uint8_t)(b & 0xff);
        a >>= 8;
        b >>= 8;
    }
}

static sd__pcoll *pcoll_of(const sd_em *em, size_t i)
{
    return *SD_VEC_AT(&em->pcolls, sd__pcoll *, i);
}

/* Append bytes to the sd_buf stored under key in m, creating it. */
static sd_status map_buf_append(sd_map *m, sd_bytes key, sd_bytes data)
{
    sd_buf *b = sd_map_get(m, key);
    if (b == NULL) {
        b = sd_malloc(sizeof(*b));
        if (b == NULL) {
            return SD_ENOMEM;
        }
        sd_buf_init(b, 0);
        sd_status rc = sd_map_put(m, key, b);
        if (rc != SD_OK) {
            sd_free(b);
            return rc;
        }
    }
    return sd_buf_append_bytes(b, data);
}

/* Store elem (in window w, of pane index pane) in s. A triggered side input keeps per window
 * only the latest firing: a higher pane index replaces what the window held, a lower one is
 * stale and dropped, an equal one (another key of the same firing) is added. */
static sd_status
side_store(sd_em *em, sd__side *s, const sd__win *w, int64_t pane, sd_bytes elem, sd_err *err)
{
    uint8_t k[17];
    sd_status rc;
    win_key(k, w);
    sd__side_window *sw = sd_map_get(&s->windows, sd_bytes_make(k, 17));
    if (sw == NULL) {
        sw = sd_calloc(1, sizeof(*sw));
        if (sw == NULL) {
            return SD_ENOMEM;
        }
        sw->win = *w;
        sw->pane = pane;
        s->min_expire = SD_MIN(s->min_expire, sd__win_max_ts(w));
        sd_buf_init(&sw->all, 0);
        sd_map_init(&sw->by_key, buf_destroy);
        rc = sd_map_put(&s->windows, sd_bytes_make(k, 17), sw);
        if (rc != SD_OK) {
            sd_free(sw);
            return rc;
        }
    }
    if (s->triggered && pane < sw->pane) {
        return SD_OK;
    }
    if (s->triggered && pane > sw->pane) {
        sw->pane = pane;
        sd_buf_reset(&sw->all);
        sd_map_deinit(&sw->by_key);
        sd_map_init(&sw->by_key, buf_destroy);
    }
    if (s->kind == SD_SIDE_ITERABLE) {
        return sd_buf_append_bytes(&sw->all, elem);
    }
    sd_bytes key, value;
    rc = sd_kv_split(pcoll_of(em, s->pcoll)->elem_coder, elem, &key, &value, err);
    if (rc != SD_OK) {
        (void)sd_err_prefix(err, "multimap side input \"%s\": ", s->local_id);
        return rc;
    }
    return map_buf_append(&sw->by_key, key, value);
}

sd_status sd__side_add(sd_em *em, sd__side *s, const sd__incoming *in, bool defer, sd_err *err)
{
    if (!s->triggered || !defer) {
        return side_store(em, s, &in->win, in->pane.index, in->elem, err);
    }
    sd__side_staged sg = { .win = in->win, .pane = in->pane.index, .len = in->elem.len };
    sg.bytes = sd_malloc(in->elem.len > 0 ? in->elem.len : 1);
    if (sg.bytes == NULL) {
        return SD_ENOMEM;
    }
    if (in->elem.len > 0) {
        memcpy(sg.bytes, in->elem.ptr, in->elem.len);
    }
    sd_status rc = sd_vec_push(&s->staged, &sg);
    if (rc != SD_OK) {
        sd_free(sg.bytes);
    }
    return rc;
}

static void staged_clear(sd__side *s)
{
    for (size_t i = 0; i < s->staged.len; i++) {
        sd_free(SD_VEC_AT(&s->staged, sd__side_staged, i)->bytes);
    }
    sd_vec_reset(&s->staged);
}

bool sd__side_has_window(const sd__side *s, const sd__win *w)
{
    uint8_t k[17];
    win_key(k, w);
    return sd_map_has(&s->windows, sd_bytes_make(k, 17));
}

bool sd__side_has_staged(const sd__stage *st)
{
    for (size_t i = 0; i < st->n_sides; i++) {
        if (st->sides[i].staged.len > 0) {
            return true;
        }
    }
    return false;
}

sd_status sd__side_flush(sd_em *em, sd__stage *st, sd_err *err)
{
    assert(st->n_inflight == 0);
    for (size_t i = 0; i < st->n_sides; i++) {
        sd__side *s = &st->sides[i];
        for (size_t j = 0; j < s->staged.len; j++) {
            const sd__side_staged *sg = SD_VEC_AT(&s->staged, sd__side_staged, j);
            sd_status rc =
                side_store(em, s, &sg->win, sg->pane, sd_bytes_make(sg->bytes, sg->len), err);
            if (rc != SD_OK) {
                return rc;
            }
        }
        staged_clear(s);
    }
    return SD_OK;
}

static sd_status find_side(sd_em *em,
                           const sd_bundle *b,
                           const sd_em_side_ref *ref,
                           sd__side **out_side,
                           sd__side_window **out_sw,
                           sd_err *err)
{
    if (em == NULL || b == NULL || b->magic != SD__BUNDLE_MAGIC) {
        return sd_err_set(err, SD_EINVAL, "side input: not a live bundle");
    }
    const sd__stage *st = b->stage;
    for (size_t i = 0; i < st->n_sides; i++) {
        sd__side *s = &st->sides[i];
        if (strcmp(s->transform_id, ref->transform_id) != 0 ||
            strcmp(s->local_id, ref->side_input_id) != 0) {
            continue;
        }
        sd__win w;
        sd_status rc =
            sd__win_decode(em, pcoll_of(em, s->pcoll)->window_coder, ref->window, &w, err);
        if (rc != SD_OK) {
            (void)sd_err_prefix(err, "side input \"%s\" of \"%s\": ", ref->side_input_id,
                                ref->transform_id);
            return rc;
        }
        uint8_t k[17];
        win_key(k, &w);
        *out_side = s;
        *out_sw = sd_map_get(&s->windows, sd_bytes_make(k, 17));
        return SD_OK;
    }
    return sd_err_set(err, SD_ENOTFOUND, "stage \"%s\": no side input \"%s\" of transform \"%s\"",
                      st->id, ref->side_input_id, ref->transform_id);
}

const sd_coder *sd_em_side_input_coder(const sd_em *em,
                                       const sd_bundle *b,
                                       const char *transform_id,
                                       const char *side_input_id,
                                       bool keyed,
                                       bool keys)
{
    if (em == NULL || b == NULL || b->magic != SD__BUNDLE_MAGIC || transform_id == NULL ||
        side_input_id == NULL) {
        return NULL;
    }
    const sd__stage *st = b->stage;
    for (size_t i = 0; i < st->n_sides; i++) {
        const sd__side *s = &st->sides[i];
        if (strcmp(s->transform_id, transform_id) != 0 || strcmp(s->local_id, side_input_id) != 0) {
            continue;
        }
        const sd_coder *elem = sd_wv_element_coder(sd__em_pcoll_at(em, s->pcoll)->wv_coder);
        if (!keyed && !keys) {
            return elem;
        }
        return elem != NULL && elem->kind == SD_CODER_KV ? sd_coder_component(elem, keys ? 0 : 1)
                                                         : NULL;
    }
    return NULL;
}

sd_status sd_em_side_input_get(sd_em *em,
                               const sd_bundle *b,
                               const sd_em_side_ref *ref,
                               const sd_bytes *key,
                               sd_buf *out,
                               sd_err *err)
{
    sd__side *s = NULL;
    sd__side_window *sw = NULL;
    sd_status rc = find_side(em, b, ref, &s, &sw, err);
    if (rc != SD_OK) {
        return rc;
    }
    if ((key == NULL) != (s->kind == SD_SIDE_ITERABLE)) {
        return sd_err_set(err, SD_EINVAL, "side input \"%s\": %s access to a %s side input",
                          ref->side_input_id, key == NULL ? "iterable" : "multimap",
                          s->kind == SD_SIDE_ITERABLE ? "iterable" : "multimap");
    }
    if (sw == NULL) {
        return SD_OK;
    }
    if (key == NULL) {
        return sd_buf_append_bytes(out, sd_buf_bytes(&sw->all));
    }
    const sd_buf *vals = sd_map_get(&sw->by_key, *key);
    return vals == NULL ? SD_OK : sd_buf_append_bytes(out, sd_buf_bytes(vals));
}

static sd_status append_sorted_keys(const sd_map *m, sd_buf *out, bool skip_empty)
{
    size_t n;
    sd_bytes *keys = sd_map_sorted_keys(m, &n);
    sd_status rc = SD_OK;
    if (keys == NULL) {
        return n == 0 ? SD_OK : SD_ENOMEM;
    }
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        const sd_buf *v = sd_map_get(m, keys[i]);
        if (skip_empty && (v == NULL || v->len == 0)) {
            continue;
        }
        rc = sd_buf_append_bytes(out, keys[i]);
    }
    sd_free(keys);
    return rc;
}

sd_status sd_em_side_input_keys(sd_em *em,
                                const sd_bundle *b,
                                const sd_em_side_ref *ref,
                                sd_buf *out,
                                sd_err *err)
{
    sd__side *s = NULL;
    sd__side_window *sw = NULL;
    sd_status rc = find_side(em, b, ref, &s, &sw, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (s->kind != SD_SIDE_MULTIMAP) {
        return sd_err_set(err, SD_EINVAL, "side input \"%s\": keys of an iterable side input",
                          ref->side_input_id);
    }
    return sw == NULL ? SD_OK : append_sorted_keys(&sw->by_key, out, false);
}

/* ========================================================================================== */
/* User state                                                                                 */
/* ========================================================================================== */

/* ---- ordered lists ----------------------------------------------------------------------- */

static void ol_deinit(sd__olist *ol)
{
    for (size_t i = ol->head; i < ol->len; i++) {
        sd_free(ol->items[i].value);
    }
    sd_free(ol->items);
    memset(ol, 0, sizeof(*ol));
}

/* First index in [head, len) whose sort key is >= k (upper: > k). */
static size_t ol_bound(const sd__olist *ol, int64_t k, bool upper)
{
    size_t lo = ol->head, hi = ol->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int64_t m = ol->items[mid].sort_key;
        if (m < k || (upper && m == k)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* Room for n more entries at the end (a free prefix is reclaimed first). */
static sd_status ol_reserve(sd__olist *ol, size_t n)
{
    if (ol->len + n <= ol->cap) {
        return SD_OK;
    }
    if (ol->head > 0) {
        memmove(ol->items, ol->items + ol->head, (ol->len - ol->head) * sizeof(*ol->items));
        ol->len -= ol->head;
        ol->head = 0;
        if (ol->len + n <= ol->cap) {
            return SD_OK;
        }
    }
    size_t cap = ol->cap < 8 ? 8 : ol->cap;
    while (cap < ol->len + n) {
        cap *= 2;
    }
    sd__ol_entry *items = sd_realloc(ol->items, cap * sizeof(*items));
    if (items == NULL) {
        return SD_ENOMEM;
    }
    ol->items = items;
    ol->cap = cap;
    return SD_OK;
}

/* Insert e after every entry with a sort key <= its own (room must be reserved). Appends in
 * sort-key order, the common case, cost O(1). */
static void ol_insert(sd__olist *ol, sd__ol_entry e)
{
    size_t at = ol->len;
    if (ol->len > ol->head && ol->items[ol->len - 1].sort_key > e.sort_key) {
        at = ol_bound(ol, e.sort_key, true);
        memmove(ol->items + at + 1, ol->items + at, (ol->len - at) * sizeof(*ol->items));
    }
    ol->items[at] = e;
    ol->len++;
}

static void ol_clear_range(sd__olist *ol, int64_t start, int64_t end)
{
    if (start >= end || ol->len == ol->head) {
        return;
    }
    size_t lo = ol_bound(ol, start, false), hi = ol_bound(ol, end, false);
    for (size_t i = lo; i < hi; i++) {
        sd_free(ol->items[i].value);
    }
    if (lo == ol->head) {
        ol->head = hi;
    } else {
        memmove(ol->items + lo, ol->items + hi, (ol->len - hi) * sizeof(*ol->items));
        ol->len -= hi - lo;
    }
    if (ol->head == ol->len) {
        ol->head = ol->len = 0;
    }
}

void sd__state_cell_destroy(void *p)
{
    sd__state_cell *c = p;
    if (c != NULL) {
        sd_buf_deinit(&c->bag);
        sd_map_deinit(&c->mm);
        ol_deinit(&c->ol);
        sd_free(c);
    }
}

static void mm_delta_destroy(void *p)
{
    sd__mm_delta *d = p;
    if (d != NULL) {
        sd_buf_deinit(&d->appended);
        sd_free(d);
    }
}

void sd__state_delta_destroy(void *p)
{
    sd__state_delta *d = p;
    if (d != NULL) {
        sd_buf_deinit(&d->appended);
        sd_map_deinit(&d->mm);
        sd_vec_deinit(&d->ol_cleared);
        ol_deinit(&d->ol_added);
        sd_free(d);
    }
}

/* Resolve the cell identity and its window; checks the bundle and the stage. */
static sd_status
resolve_ref(sd_em *em, const sd_bundle *b, const sd_em_state_ref *ref, sd__win *w, sd_err *err)
{
    if (em == NULL || b == NULL || b->magic != SD__BUNDLE_MAGIC) {
        return sd_err_set(err, SD_EINVAL, "user state: not a live bundle");
    }
    if (em->poisoned) {
        return sd_err_set(err, SD_ESTATE, "user state: engine failed earlier (out of memory)");
    }
    const sd__stage *st = b->stage;
    if (!st->stateful) {
        return sd_err_set(err, SD_ESTATE, "stage \"%s\" is not stateful; state \"%s\" of \"%s\"",
                          st->id, ref->state_id, ref->transform_id);
    }
    sd_status rc =
        sd__win_decode(em, pcoll_of(em, st->inputs[0])->window_coder, ref->window, w, err);
    if (rc != SD_OK) {
        (void)sd_err_prefix(err, "user state \"%s\" of \"%s\": ", ref->state_id, ref->transform_id);
        return rc;
    }
    sd_buf *id = &em->scratch;
    sd_buf_reset(id);
    rc = sd_buf_put_lp(id, sd_bytes_str(ref->transform_id));
    if (rc == SD_OK) {
        rc = sd_buf_put_lp(id, sd_bytes_str(ref->state_id));
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_lp(id, ref->window);
    }
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(id, ref->key);
    }
    return rc;
}

static sd_status delta_for(sd_em *em, sd_bundle *b, const sd__win *w, sd__state_delta **out)
{
    sd_bytes id = sd_buf_bytes(&em->scratch);
    sd__state_delta *d = sd_map_get(&b->deltas, id);
    if (d == NULL) {
        d = sd_calloc(1, sizeof(*d));
        if (d == NULL) {
            return SD_ENOMEM;
        }
        d->win = *w;
        sd_buf_init(&d->appended, 0);
        sd_map_init(&d->mm, mm_delta_destroy);
        sd_vec_init(&d->ol_cleared, 2 * sizeof(int64_t));
        sd_status rc = sd_map_put(&b->deltas, id, d);
        if (rc != SD_OK) {
            sd_free(d);
            return rc;
        }
    }
    *out = d;
    return SD_OK;
}

static sd_status mm_delta_for(sd__state_delta *d, sd_bytes map_key, sd__mm_delta **out)
{
    sd__mm_delta *m = sd_map_get(&d->mm, map_key);
    if (m == NULL) {
        m = sd_calloc(1, sizeof(*m));
        if (m == NULL) {
            return SD_ENOMEM;
        }
        sd_buf_init(&m->appended, 0);
        sd_status rc = sd_map_put(&d->mm, map_key, m);
        if (rc != SD_OK) {
            sd_free(m);
            return rc;
        }
    }
    *out = m;
    return SD_OK;
}

sd_status sd_em_user_state_get(sd_em *em,
                               sd_bundle *b,
                               const sd_em_state_ref *ref,
                               const sd_bytes *map_key,
                               sd_buf *out,
                               sd_err *err)
{
    sd__win w;
    sd_status rc = resolve_ref(em, b, ref, &w, err);
    if (rc != SD_OK) {
        return rc;
    }
    sd_bytes id = sd_buf_bytes(&em->scratch);
    const sd__state_cell *cell = sd_map_get(&b->stage->state, id);
    const sd__state_delta *d = sd_map_get(&b->deltas, id);
    bool cleared = d != NULL && d->cleared;
    if (map_key == NULL) {
        if (!cleared && cell != NULL) {
            rc = sd_buf_append_bytes(out, sd_buf_bytes(&cell->bag));
        }
        if (rc == SD_OK && d != NULL) {
            rc = sd_buf_append_bytes(out, sd_buf_bytes(&d->appended));
        }
        return rc;
    }
    const sd__mm_delta *md = d == NULL ? NULL : sd_map_get(&d->mm, *map_key);
    if (!cleared && !(md != NULL && md->cleared) && cell != NULL) {
        const sd_buf *v = sd_map_get(&cell->mm, *map_key);
        if (v != NULL) {
            rc = sd_buf_append_bytes(out, sd_buf_bytes(v));
        }
    }
    if (rc == SD_OK && md != NULL) {
        rc = sd_buf_append_bytes(out, sd_buf_bytes(&md->appended));
    }
    return rc;
}

/* The bundle's tentative delta for the state cell named by the request (created on first write). */
static sd_status writable_delta(sd_em *em,
                                sd_bundle *b,
                                const sd_em_state_ref *ref,
                                sd__state_delta **out,
                                sd_err *err)
{
    sd__win w;
    sd_status rc = resolve_ref(em, b, ref, &w, err);
    if (rc == SD_OK) {
        rc = delta_for(em, b, &w, out);
    }
    return rc;
}

sd_status sd_em_user_state_append(sd_em *em,
                                  sd_bundle *b,
                                  const sd_em_state_ref *ref,
                                  const sd_bytes *map_key,
                                  sd_bytes data,
                                  sd_err *err)
{
    sd__state_delta *d;
    sd_status rc = writable_delta(em, b, ref, &d, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (map_key == NULL) {
        return sd_buf_append_bytes(&d->appended, data);
    }
    sd__mm_delta *md;
    rc = mm_delta_for(d, *map_key, &md);
    if (rc == SD_OK) {
        md->appended_any = true;
        rc = sd_buf_append_bytes(&md->appended, data);
    }
    return rc;
}

sd_status sd_em_user_state_clear(sd_em *em,
                                 sd_bundle *b,
                                 const sd_em_state_ref *ref,
                                 const sd_bytes *map_key,
                                 sd_err *err)
{
    sd__state_delta *d;
    sd_status rc = writable_delta(em, b, ref, &d, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (map_key == NULL) {
        d->cleared = true;
        sd_buf_reset(&d->appended);
        sd_map_deinit(&d->mm);
        sd_map_init(&d->mm, mm_delta_destroy);
        return SD_OK;
    }
    sd__mm_delta *md;
    rc = mm_delta_for(d, *map_key, &md);
    if (rc == SD_OK) {
        md->cleared = true;
        md->appended_any = false;
        sd_buf_reset(&md->appended);
    }
    return rc;
}

/*
 * The map keys of a multimap cell with at least one value as the bundle sees it (committed
 * unless cleared, plus the bundle's appends). A value may encode in zero bytes, so a key is
 * present when a value was appended to it, whatever the byte count. OUT: *keys, sorted bytewise
 * (caller frees the array with sd_free, then deinits live, which owns the key bytes), and *n.
 */
static sd_status live_map_keys(const sd__state_cell *cell,
                               const sd__state_delta *d,
                               sd_map *live,
                               sd_bytes **keys,
                               size_t *n)
{
    sd_status rc = SD_OK;
    size_t it = 0;
    sd_bytes k;
    void *v;
    sd_map_init(live, NULL); /* key -> non-NULL marker */
    *keys = NULL;
    *n = 0;
    if (cell != NULL && !(d != NULL && d->cleared)) {
        while (rc == SD_OK && sd_map_next(&cell->mm, &it, &k, &v)) {
            const sd__mm_delta *md = d == NULL ? NULL : sd_map_get(&d->mm, k);
            if (!(md != NULL && md->cleared)) {
                rc = sd_map_put(live, k, (void *)1);
            }
        }
    }
    it = 0;
    while (rc == SD_OK && d != NULL && sd_map_next(&d->mm, &it, &k, &v)) {
        if (((const sd__mm_delta *)v)->appended_any) {
            rc = sd_map_put(live, k, (void *)1);
        }
    }
    if (rc == SD_OK) {
        *keys = sd_map_sorted_keys(live, n);
        if (*keys == NULL && *n > 0) {
            *n = 0;
            rc = SD_ENOMEM;
        }
    }
    return rc;
}

sd_status
sd_em_user_state_keys(sd_em *em, sd_bundle *b, const sd_em_state_ref *ref, sd_buf *out, sd_err *err)
{
    sd__win w;
    sd_status rc = resolve_ref(em, b, ref, &w, err);
    if (rc != SD_OK) {
        return rc;
    }
    sd_bytes id = sd_buf_bytes(&em->scratch);
    const sd__state_cell *cell = sd_map_get(&b->stage->state, id);
    const sd__state_delta *d = sd_map_get(&b->deltas, id);
    size_t n;
    sd_bytes *keys;
    sd_map live;
    rc = live_map_keys(cell, d, &live, &keys, &n);
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        rc = sd_buf_append_bytes(out, keys[i]);
    }
    sd_free(keys);
    sd_map_deinit(&live);
    return rc;
}

sd_status sd_em_user_state_entries(sd_em *em,
                                   sd_bundle *b,
                                   const sd_em_state_ref *ref,
                                   const sd_coder *value_coder,
                                   sd_buf *out,
                                   sd_err *err)
{
    sd__win w;
    if (value_coder == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "multimap entries of state \"%s\" of \"%s\": no value coder",
                          ref->state_id, ref->transform_id);
    }
    sd_status rc = resolve_ref(em, b, ref, &w, err);
    if (rc != SD_OK) {
        return rc;
    }
    sd_bytes id = sd_buf_bytes(&em->scratch);
    const sd__state_cell *cell = sd_map_get(&b->stage->state, id);
    const sd__state_delta *d = sd_map_get(&b->deltas, id);
    bool cleared = d != NULL && d->cleared;
    size_t n;
    sd_bytes *keys;
    sd_map live;
    rc = live_map_keys(cell, d, &live, &keys, &n);
    sd_buf vals;
    sd_buf_init(&vals, 0);
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        const sd__mm_delta *md = d == NULL ? NULL : sd_map_get(&d->mm, keys[i]);
        sd_buf_reset(&vals);
        if (!cleared && !(md != NULL && md->cleared) && cell != NULL) {
            const sd_buf *v = sd_map_get(&cell->mm, keys[i]);
            if (v != NULL) {
                rc = sd_buf_append_bytes(&vals, sd_buf_bytes(v));
            }
        }
        if (rc == SD_OK && md != NULL) {
            rc = sd_buf_append_bytes(&vals, sd_buf_bytes(&md->appended));
        }
        /* Count the values: IterableCoder's length prefix is their number, not their size. */
        sd_reader r = sd_reader_make(sd_buf_bytes(&vals));
        uint64_t count = 0;
        while (rc == SD_OK && sd_reader_left(&r) > 0) {
            size_t before = sd_reader_left(&r);
            rc = sd_coder_skip(value_coder, &r, true, err);
            if (rc == SD_OK && sd_reader_left(&r) == before) {
                rc = sd_err_set(err, SD_EPROTO, "its value coder encodes a value in zero bytes");
            }
            count++;
        }
        if (rc == SD_OK && count > INT32_MAX) {
            rc = sd_err_set(err, SD_EPROTO, "more than 2^31 values under one key");
        }
        if (rc != SD_OK) {
            if (rc != SD_ENOMEM) {
                rc = SD_EPROTO;
            }
            (void)sd_err_prefix(err, "multimap entries of state \"%s\" of \"%s\": ", ref->state_id,
                                ref->transform_id);
            break;
        }
        uint8_t be[4] = { (uint8_t)(count >> 24), (uint8_t)(count >> 16), (uint8_t)(count >> 8),
                          (uint8_t)count };
        rc = sd_buf_append_bytes(out, keys[i]);
        if (rc == SD_OK) {
            rc = sd_buf_append_bytes(out, sd_bytes_make(be, sizeof(be)));
        }
        if (rc == SD_OK) {
            rc = sd_buf_append_bytes(out, sd_buf_bytes(&vals));
        }
    }
    sd_buf_deinit(&vals);
    sd_free(keys);
    sd_map_deinit(&live);
    return rc;
}

sd_bytes sd__state_cell_key(sd_bytes id)
{
    sd_reader r = sd_reader_make(id);
    sd_bytes part;
    for (int i = 0; i < 3; i++) {
        if (sd_reader_lp(&r, &part) != SD_OK) {
            return SD_BYTES_NULL; /* cannot happen: state_ref built it */
        }
    }
    return sd_bytes_make(id.ptr + (id.len - sd_reader_left(&r)), sd_reader_left(&r));
}

static bool cell_empty(const sd__state_cell *c)
{
    return c->bag.len == 0 && c->mm.len == 0 && c->ol.len == c->ol.head;
}

static bool ol_cleared_by(const sd__state_delta *d, int64_t k)
{
    for (size_t i = 0; d != NULL && i < d->ol_cleared.len; i++) {
        const int64_t *r = SD_VEC_AT(&d->ol_cleared, int64_t, 0) + 2 * i;
        if (r[0] <= k && k < r[1]) {
            return true;
        }
    }
    return false;
}

static sd_status ol_put(sd_buf *out, const sd__ol_entry *e)
{
    sd_status rc = sd_buf_put_varint(out, (uint64_t)e->sort_key);
    return rc == SD_OK ? sd_buf_put_lp(out, sd_bytes_make(e->value, e->len)) : rc;
}

sd_status sd_em_ordered_list_get(sd_em *em,
                                 sd_bundle *b,
                                 const sd_em_state_ref *ref,
                                 int64_t start,
                                 int64_t end,
                                 sd_buf *out,
                                 sd_err *err)
{
    sd__win w;
    sd_status rc = resolve_ref(em, b, ref, &w, err);
    if (rc != SD_OK || start >= end) {
        return rc;
    }
    sd_bytes id = sd_buf_bytes(&em->scratch);
    const sd__state_cell *cell = sd_map_get(&b->stage->state, id);
    const sd__state_delta *d = sd_map_get(&b->deltas, id);
    /* Merge the committed entries (minus the bundle's cleared ranges) with the bundle's own,
     * committed first on equal sort keys: they were appended earlier. */
    size_t i = 0, n = 0, j = 0, m = 0;
    if (cell != NULL) {
        i = ol_bound(&cell->ol, start, false);
        n = ol_bound(&cell->ol, end, false);
    }
    if (d != NULL) {
        j = ol_bound(&d->ol_added, start, false);
        m = ol_bound(&d->ol_added, end, false);
    }
    while (rc == SD_OK && (i < n || j < m)) {
        if (i < n && (j >= m || cell->ol.items[i].sort_key <= d->ol_added.items[j].sort_key)) {
            const sd__ol_entry *e = &cell->ol.items[i++];
            if (!ol_cleared_by(d, e->sort_key)) {
                rc = ol_put(out, e);
            }
        } else {
            rc = ol_put(out, &d->ol_added.items[j++]);
        }
    }
    return rc;
}

sd_status sd_em_ordered_list_append(sd_em *em,
                                    sd_bundle *b,
                                    const sd_em_state_ref *ref,
                                    sd_bytes data,
                                    sd_err *err)
{
    sd__win w;
    sd__state_delta *d;
    sd_status rc = resolve_ref(em, b, ref, &w, err);
    if (rc != SD_OK) {
        return rc;
    }
    /* Check every entry first, so a bad stream adds nothing. */
    sd_reader r = sd_reader_make(data);
    size_t n = 0;
    while (!sd_reader_done(&r)) {
        uint64_t k;
        sd_bytes v;
        if (sd_reader_varint(&r, &k) != SD_OK || sd_reader_lp(&r, &v) != SD_OK) {
            return sd_err_set(err, SD_EPROTO,
                              "ordered list \"%s\" of \"%s\": entry %zu is not kv(varint, "
                              "length-prefixed bytes)",
                              ref->state_id, ref->transform_id, n);
        }
        n++;
    }
    rc = delta_for(em, b, &w, &d);
    if (rc == SD_OK) {
        rc = ol_reserve(&d->ol_added, n);
    }
    r = sd_reader_make(data);
    for (size_t i = 0; rc == SD_OK && i < n; i++) {
        uint64_t k;
        sd_bytes v;
        if (sd_reader_varint(&r, &k) != SD_OK || sd_reader_lp(&r, &v) != SD_OK) {
            return sd_err_set(err, SD_EINTERNAL, "ordered list: entry %zu changed", i);
        }
        sd__ol_entry e = { .sort_key = (int64_t)k, .value = sd_memdup(v.ptr, v.len), .len = v.len };
        if (e.value == NULL) {
            rc = SD_ENOMEM; /* the entries before it stay: the bundle will fail anyway */
            break;
        }
        ol_insert(&d->ol_added, e);
    }
    return rc;
}

sd_status sd_em_ordered_list_clear(sd_em *em,
                                   sd_bundle *b,
                                   const sd_em_state_ref *ref,
                                   int64_t start,
                                   int64_t end,
                                   sd_err *err)
{
    sd__win w;
    sd__state_delta *d;
    sd_status rc = resolve_ref(em, b, ref, &w, err);
    if (rc != SD_OK || start >= end) {
        return rc;
    }
    rc = delta_for(em, b, &w, &d);
    if (rc == SD_OK) {
        int64_t range[2] = { start, end };
        rc = sd_vec_push(&d->ol_cleared, range);
    }
    if (rc == SD_OK) {
        ol_clear_range(&d->ol_added, start, end);
    }
    return rc;
}

/* Apply a bundle's ordered-list changes to the committed cell; moves the added entries. */
static sd_status ol_commit(sd__olist *ol, sd__state_delta *d)
{
    for (size_t i = 0; i < d->ol_cleared.len; i++) {
        const int64_t *r = SD_VEC_AT(&d->ol_cleared, int64_t, 0) + 2 * i;
        ol_clear_range(ol, r[0], r[1]);
    }
    sd__olist *add = &d->ol_added;
    size_t m = add->len - add->head;
    if (m == 0) {
        return SD_OK;
    }
    sd_status rc = ol_reserve(ol, m);
    if (rc != SD_OK) {
        return rc;
    }
    if (m > 16 && ol->len > ol->head &&
        ol->items[ol->len - 1].sort_key > add->items[add->head].sort_key) {
        /* Many entries landing inside the list: one backward merge instead of m inserts. */
        size_t i = ol->len, j = add->len, k = ol->len + m;
        while (j > add->head) {
            if (i > ol->head && ol->items[i - 1].sort_key > add->items[j - 1].sort_key) {
                ol->items[--k] = ol->items[--i];
            } else {
                ol->items[--k] = add->items[--j];
            }
        }
        ol->len += m;
    } else {
        for (size_t j = add->head; j < add->len; j++) {
            ol_insert(ol, add->items[j]);
        }
    }
    add->head = add->len = 0; /* the values moved into the committed list */
    return SD_OK;
}

/*
 * Would committing d change what cell (NULL: none yet) holds? For live-lock detection: a timer
 * that re-arms itself while rewriting the same value makes no progress, one that counts does.
 * A bag rewritten after a clear is compared byte for byte (the cost of the copy the commit
 * makes anyway); multimap and ordered-list writes count as changes unless they only clear
 * what is already empty.
 */
static bool delta_changes(const sd__state_cell *cell, const sd__state_delta *d)
{
    bool has_mm = cell != NULL && cell->mm.len > 0;
    bool has_ol = cell != NULL && cell->ol.len > cell->ol.head;
    if (d->cleared) {
        size_t old_len = cell != NULL ? cell->bag.len : 0;
        if (has_mm || old_len != d->appended.len ||
            (old_len > 0 && memcmp(cell->bag.data, d->appended.data, old_len) != 0)) {
            return true;
        }
    } else if (d->appended.len > 0) {
        return true;
    }
    size_t it = 0;
    void *v;
    while (sd_map_next(&d->mm, &it, NULL, &v)) {
        const sd__mm_delta *md = v;
        if (md->appended_any || (md->cleared && has_mm)) {
            return true;
        }
    }
    return d->ol_added.len > d->ol_added.head || (d->ol_cleared.len > 0 && has_ol);
}

sd_status sd__state_commit(sd_em *em, sd__stage *st, sd_bundle *b, bool *changed)
{
    size_t it = 0;
    sd_bytes id;
    void *v;
    while (sd_map_next(&b->deltas, &it, &id, &v)) {
        const sd__state_delta *d = v;
        sd__state_cell *cell = sd_map_get(&st->state, id);
        sd_status rc;
        if (!*changed) {
            *changed = delta_changes(cell, d);
        }
        if (cell == NULL) {
            cell = sd_calloc(1, sizeof(*cell));
            if (cell == NULL) {
                return SD_ENOMEM;
            }
            cell->win = d->win;
            st->state_min_expire = SD_MIN(
                st->state_min_expire,
                sd__win_expiry(&d->win, pcoll_of(em, st->inputs[0])->ws.allowed_lateness_ms));
            sd_buf_init(&cell->bag, 0);
            sd_map_init(&cell->mm, buf_destroy);
            rc = sd_map_put(&st->state, id, cell);
            if (rc != SD_OK) {
                sd__state_cell_destroy(cell);
                return rc;
            }
            rc = sd__expiry_note(em, st, &d->win, sd__state_cell_key(id));
            if (rc != SD_OK) {
                return rc;
            }
        }
        if (d->cleared) {
            sd_buf_reset(&cell->bag);
            sd_map_deinit(&cell->mm);
            sd_map_init(&cell->mm, buf_destroy);
        }
        rc = sd_buf_append_bytes(&cell->bag, sd_buf_bytes(&d->appended));
        size_t mit = 0;
        sd_bytes mk;
        void *mv;
        while (rc == SD_OK && sd_map_next(&d->mm, &mit, &mk, &mv)) {
            const sd__mm_delta *md = mv;
            if (md->cleared) {
                sd_map_remove(&cell->mm, mk);
            }
            if (md->appended_any) {
                rc = map_buf_append(&cell->mm, mk, sd_buf_bytes(&md->appended));
            }
        }
        if (rc == SD_OK) {
            rc = ol_commit(&cell->ol, (sd__state_delta *)d);
        }
        if (rc != SD_OK) {
            return rc;
        }
        if (cell_empty(cell)) {
            sd_map_remove(&st->state, id);
        }
    }
    return SD_OK;
}

/*
 * Scans only when the output watermark passed the cached earliest expiry, so a stage with many
 * live global-window cells does not pay O(cells) on every watermark move.
 */
void sd__state_gc(sd_em *em, sd__stage *st)
{
    sd_time out = st->out_wm;
    size_t it = 0;
    sd_bytes k;
    void *v;
    if (st->state.len > 0 && sd__wm_passed(st->state_min_expire, out)) {
        bool dropped = false;
        int64_t lateness = pcoll_of(em, st->inputs[0])->ws.allowed_lateness_ms;
        sd_time next = SD_TIME_MAX;
        while (sd_map_next(&st->state, &it, &k, &v)) {
            const sd__state_cell *c = v;
            sd_time expire = sd__win_expiry(&c->win, lateness);
            if (sd__wm_passed(expire, out)) {
                sd_map_remove(&st->state, k);
                dropped = true;
            } else {
                next = SD_MIN(next, expire);
            }
        }
        st->state_min_expire = next;
        if (dropped) {
            st->state_epoch++; /* an SDK's cached copy of those cells is stale now */
        }
    }
    for (size_t i = 0; i < st->n_sides; i++) {
        sd__side *s = &st->sides[i];
        if (s->windows.len == 0 || !sd__wm_passed(s->min_expire, out)) {
            continue;
        }
        sd_time next = SD_TIME_MAX;
        it = 0;
        while (sd_map_next(&s->windows, &it, &k, &v)) {
            const sd__side_window *sw = v;
            sd_time expire = sd__win_max_ts(&sw->win);
            if (sd__wm_passed(expire, out)) {
                sd_map_remove(&s->windows, k);
            } else {
                next = SD_MIN(next, expire);
            }
        }
        s->min_expire = next;
    }
}
