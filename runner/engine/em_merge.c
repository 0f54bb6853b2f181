/*
 * Sundial: window merging by the SDK, for GroupByKeys whose windows the runner cannot merge.
 *
 * A custom WindowFn that merges (Beam's MergeStatus NEEDS_MERGE with a window fn URN the runner
 * does not know) is code in the SDK: only the SDK's beam:transform:merge_windows:v1 can say
 * which windows merge into which. The engine cannot call the SDK, so the merge is a round trip
 * through an ordinary SDK stage that the planner adds for the GroupByKey (sd_em_set_merge_windows):
 *
 *     GBK input --> GBK groups, one per (key, window)  --requests-->  merge stage (SDK)
 *                       ^                                                   |
 *                       +----------------- results (sd__em_deliver) --------+
 *
 *   1. A value joins the group of exactly its window (em_gbk.c, custom_add). A window the key
 *      did not hold marks the key "unmerged".
 *   2. Each scheduling pass (sd__gbk_fire, before it fires anything) sends one request per
 *      unmerged key that has none in flight: KV<nonce, iterable<window>>, the nonce being the
 *      key's nested encoding and the windows every window the key holds (merged ones
 *      included, as Beam's runners do: a WindowFn may merge a new window into an old one).
 *      The key moves from "unmerged" to "merging". Requests are sent in key byte order.
 *   3. The merge stage's bundle answers KV<nonce, KV<unmerged windows, [(merged window,
 *      consumed windows)]>>; on delivery the engine folds, per merged window, the groups of
 *      its consumed windows into one group of the merged window with sd__gbk_fold, the same
 *      fold that merges sessions (values, pane counters, trigger states, a closed window's
 *      rule). The key leaves "merging"; if windows arrived meanwhile it is "unmerged" again.
 *   4. A key's groups fire only while it is neither unmerged nor merging, so a merged window
 *      fires once, on the merged window, with every value; meanwhile its values hold the
 *      GBK's input watermark (em_gbk.c, hold) and so everything downstream.
 *
 * Results do not depend on bundling or schedule: what merges is the WindowFn's answer on the
 * key's set of windows, whichever bundles the windows arrived in; windows arriving while a
 * request is in flight are merged by the next request, and merging is associative for every
 * WindowFn Beam allows (Java's MergeOverlappingIntervalWindows, Python's merge contract).
 * A result is checked completely when its bundle completes (sd__gbk_merge_result with apply
 * false: bad bytes, an unknown nonce, a window the key does not hold, a window consumed twice
 * fail that bundle) before anything is applied.
 *
 * Triggers: the merged groups' trigger states merge as sessions' do. A trigger that counts
 * elements is asked once per scheduling pass after the merge, not after every element as for
 * other windows in a stream (em_gbk.c, cut_if_ready): which windows a value belongs to is not
 * known until the SDK answered, so such a pane may hold more than the count (Beam promises at
 * least the count; Java's ReduceFnRunner also asks once per batch of a key's elements).
 *
 * Cost: one request per key per round, carrying every window of the key; a key with many
 * live windows that keep arriving resends them each round (O(windows) per round).
 */
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

static int cmp_key(const void *pa, const void *pb)
{
    return sd_bytes_cmp(*(const sd_bytes *)pa, *(const sd_bytes *)pb);
}

/* Append the request for key (its groups in list) to out. */
static sd_status encode_request(const sd_em *em,
                                sd_buf *out,
                                const sd_coder *window_coder,
                                sd_bytes key,
                                const sd_vec *list,
                                sd_err *err)
{
    sd_status rc = sd_buf_put_varint(out, key.len);
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(out, key);
    }
    if (rc == SD_OK) {
        rc = sd_iterable_encode_begin(out, list->len);
    }
    for (size_t i = 0; i < list->len && rc == SD_OK; i++) {
        const sd__group *g = *SD_VEC_AT(list, const sd__group *, i);
        sd_window w = sd__win_to(em, &g->win);
        rc = sd_window_encode(window_coder, &w, out, err);
    }
    return rc;
}

sd_status sd__gbk_request_merges(sd_em *em, sd__stage *st, bool *changed, sd_err *err)
{
    sd__gbk *gbk = &st->gbk;
    if (sd_map_len(&gbk->unmerged) == 0) {
        return SD_OK;
    }
    const sd__pcoll *in = sd__em_pcoll_at(em, st->inputs[0]);
    sd__pcoll *req = sd__em_pcoll_at(em, gbk->merge_requests);
    size_t n = sd_map_len(&gbk->unmerged), n_send = 0;
    sd_bytes *keys = sd_calloc(n, sizeof(sd_bytes));
    size_t *ends = sd_calloc(n + 1, sizeof(size_t));
    sd_buf out;
    sd_buf_init(&out, 0);
    sd_status rc = keys == NULL || ends == NULL ? SD_ENOMEM : SD_OK;
    size_t it = 0;
    sd_bytes k;
    while (rc == SD_OK && sd_map_next(&gbk->unmerged, &it, &k, NULL)) {
        if (!sd_map_has(&gbk->merging, k)) {
            keys[n_send++] = k;
        }
    }
    if (n_send > 1) {
        qsort(keys, n_send, sizeof(sd_bytes), cmp_key);
    }
    for (size_t i = 0; i < n_send && rc == SD_OK; i++) {
        const sd_vec *list = sd_map_get(&gbk->sessions, keys[i]);
        rc = list == NULL ? SD_EINTERNAL : SD_OK;
        if (rc == SD_OK) {
            rc = encode_request(em, &out, in->window_coder, keys[i], list, err);
        }
        ends[i] = out.len;
    }
    sd__slab *slab = NULL;
    if (rc == SD_OK && n_send > 0) {
        size_t total;
        uint8_t *data = sd_buf_take(&out, &total);
        slab = data == NULL ? NULL : sd__slab_create(data, total);
        rc = slab == NULL ? SD_ENOMEM : SD_OK;
    }
    /* Mark first (keys borrow the unmerged map's storage), then deliver. */
    for (size_t i = 0; i < n_send && rc == SD_OK; i++) {
        rc = sd_map_put(&gbk->merging, keys[i], (void *)1);
    }
    for (size_t i = 0; i < n_send && rc == SD_OK; i++) {
        size_t start = i == 0 ? 0 : ends[i - 1];
        sd__incoming inc = {
            .ts = SD_TIME_MIN,
            .win = { .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true },
            .pane = SD_PANE_NO_FIRING,
            .elem = sd_bytes_make(slab->data + start, ends[i] - start),
            .slab = slab
        };
        rc = sd__em_deliver(em, req, &inc, err);
    }
    for (size_t i = 0; i < n_send && rc == SD_OK; i++) {
        sd_map_remove(&gbk->unmerged, sd_bytes_make(keys[i].ptr, keys[i].len));
        /* keys[i] may point into the removed entry from here on: not used again. */
    }
    if (n_send > 0 && rc == SD_OK) {
        *changed = true;
    }
    sd__slab_unref(slab);
    sd_buf_deinit(&out);
    sd_free(keys);
    sd_free(ends);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Results                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The index in list of the group of window w, or SIZE_MAX. */
static size_t find_window(const sd_vec *list, const sd__win *w)
{
    for (size_t i = 0; i < list->len; i++) {
        const sd__group *g = *SD_VEC_AT(list, const sd__group *, i);
        if (g->win.start == w->start && g->win.end == w->end && g->win.global == w->global) {
            return i;
        }
    }
    return SIZE_MAX;
}

static int cmp_size(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    return (a > b) - (a < b);
}

typedef struct merge_ctx {
    sd_em *em;
    sd__stage *st;
    const sd__pcoll *pc;
    sd_vec *list; /* the key's groups */
    bool apply;
    sd_vec idx;  /* size_t: the consumed windows' groups */
    sd_vec used; /* size_t: every group named so far (check: each at most once) */
} merge_ctx;

static sd_status read_window(sd_em *em,
                             const sd__pcoll *pc,
                             const sd_coder *wc,
                             sd_bytes raw,
                             sd__win *w,
                             sd_err *err)
{
    sd_status rc = sd__win_decode(em, wc, raw, w, err);
    if (rc != SD_OK) {
        (void)sd_err_prefix(err, "pcollection \"%s\": merge result: ", pc->id);
    }
    return rc;
}

/* One (merged window, consumed windows) entry at r. */
static sd_status merge_one(merge_ctx *mc, const sd_coder *pair, sd_reader *r, sd_err *err)
{
    const sd_coder *wc = sd_coder_component(pair, 0);
    const sd_coder *consumed = sd_coder_component(pair, 1);
    sd_bytes raw;
    sd__win merged;
    sd_status rc = sd_coder_slice(wc, r, true, &raw, err);
    if (rc == SD_OK) {
        rc = read_window(mc->em, mc->pc, wc, raw, &merged, err);
    }
    sd_iterable_reader it;
    if (rc == SD_OK) {
        rc = sd_iterable_begin(&it, consumed, r, err);
    }
    mc->idx.len = 0;
    bool has = true;
    while (rc == SD_OK) {
        sd_bytes e;
        rc = sd_iterable_next(&it, &e, &has, err);
        if (rc != SD_OK || !has) {
            break;
        }
        sd__win w;
        rc = read_window(mc->em, mc->pc, wc, e, &w, err);
        size_t at = rc == SD_OK ? find_window(mc->list, &w) : SIZE_MAX;
        if (rc == SD_OK && at == SIZE_MAX) {
            rc = sd_err_set(err, SD_EPROTO,
                            "pcollection \"%s\": merge result consumes window [%lld, %lld), "
                            "which the key does not hold",
                            mc->pc->id, (long long)w.start, (long long)w.end);
        }
        for (size_t i = 0; rc == SD_OK && i < mc->used.len; i++) {
            if (*SD_VEC_AT(&mc->used, size_t, i) == at) {
                rc = sd_err_set(err, SD_EPROTO,
                                "pcollection \"%s\": merge result names window [%lld, %lld) "
                                "twice",
                                mc->pc->id, (long long)w.start, (long long)w.end);
            }
        }
        if (rc == SD_OK) {
            rc = sd_vec_push(&mc->idx, &at);
        }
        if (rc == SD_OK) {
            rc = sd_vec_push(&mc->used, &at);
        }
    }
    if (rc != SD_OK || mc->idx.len == 0) {
        return rc;
    }
    /* A merged window the key already holds but the answer did not list joins the fold, so a
     * key never holds one window twice. */
    size_t same = find_window(mc->list, &merged);
    for (size_t i = 0; same != SIZE_MAX && i < mc->idx.len; i++) {
        same = *SD_VEC_AT(&mc->idx, size_t, i) == same ? SIZE_MAX : same;
    }
    if (same != SIZE_MAX) {
        rc = sd_vec_push(&mc->idx, &same);
    }
    if (rc != SD_OK || !mc->apply) {
        return rc;
    }
    size_t *idx = SD_VEC_AT(&mc->idx, size_t, 0);
    qsort(idx, mc->idx.len, sizeof(size_t), cmp_size);
    sd__group *kept;
    return sd__gbk_fold(mc->em, mc->st, mc->list, idx, mc->idx.len, &merged, &kept, err);
}

/*
 * Apply mode: folding changes the list (indexes of later entries shift), so each entry's
 * windows are looked up again after the previous entry's fold; the check pass, which changes
 * nothing, has already proved that every window exists and appears once.
 */
sd_status
sd__gbk_merge_result(sd_em *em, const sd__pcoll *pc, sd_bytes elem, bool apply, sd_err *err)
{
    sd__stage *st = sd__em_stage_at(em, pc->merge_gbk);
    sd__gbk *gbk = &st->gbk;
    const sd_coder *kv = pc->elem_coder;
    const sd_coder *body = sd_coder_component(kv, 1);
    const sd_coder *unmerged = sd_coder_component(body, 0);
    const sd_coder *pairs = sd_coder_component(body, 1);
    const sd_coder *pair = sd_coder_component(pairs, 0);
    sd_reader r = sd_reader_make(elem);
    sd_bytes key;
    sd_status rc = sd_reader_lp(&r, &key);
    if (rc != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "pcollection \"%s\": merge result without a nonce",
                          pc->id);
    }
    sd_vec *list = sd_map_get(&gbk->sessions, key);
    if (list == NULL || !sd_map_has(&gbk->merging, key)) {
        return sd_err_set(err, SD_EPROTO,
                          "pcollection \"%s\": merge result for a nonce (%zu bytes) no request of "
                          "gbk \"%s\" is waiting for",
                          pc->id, key.len, st->id);
    }
    merge_ctx mc = { .em = em, .st = st, .pc = pc, .list = list, .apply = apply };
    sd_vec_init(&mc.idx, sizeof(size_t));
    sd_vec_init(&mc.used, sizeof(size_t));
    /* The unmerged windows: checked (they must be held), nothing to do with them. */
    sd_iterable_reader it;
    rc = sd_iterable_begin(&it, unmerged, &r, err);
    bool has = true;
    while (rc == SD_OK && has) {
        sd_bytes e;
        rc = sd_iterable_next(&it, &e, &has, err);
        sd__win w;
        if (rc == SD_OK && has) {
            rc = read_window(em, pc, sd_coder_component(unmerged, 0), e, &w, err);
            if (rc == SD_OK && find_window(list, &w) == SIZE_MAX) {
                rc = sd_err_set(err, SD_EPROTO,
                                "pcollection \"%s\": merge result leaves window [%lld, %lld) "
                                "unmerged, which the key does not hold",
                                pc->id, (long long)w.start, (long long)w.end);
            }
        }
    }
    if (rc == SD_OK) {
        rc = sd_iterable_begin(&it, pairs, &r, err);
    }
    has = true;
    while (rc == SD_OK) {
        sd_bytes e;
        rc = sd_iterable_next(&it, &e, &has, err);
        if (rc != SD_OK || !has) {
            break;
        }
        sd_reader er = sd_reader_make(e);
        if (apply) {
            mc.used.len = 0; /* indexes shift with each fold; checked already */
        }
        rc = merge_one(&mc, pair, &er, err);
    }
    if (rc == SD_OK && !sd_reader_done(&r)) {
        rc = sd_err_set(err, SD_EPROTO, "pcollection \"%s\": %zu bytes after a merge result",
                        pc->id, sd_reader_left(&r));
    }
    sd_vec_deinit(&mc.idx);
    sd_vec_deinit(&mc.used);
    if (rc != SD_OK || !apply) {
        return rc;
    }
    sd_map_remove(&gbk->merging, key);
    gbk->dirty = true;
    return SD_OK;
}
