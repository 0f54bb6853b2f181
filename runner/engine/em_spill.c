/*
 * Sundial engine: the memory budget and the spill file.
 *
 * With sd_em_config.memory_limit set, the engine keeps what it holds for a job in memory up to
 * that many bytes and writes the rest to one unlinked temporary file, read back when needed:
 *
 *   - pending elements of an SDK stage: while over the budget, an element delivered to a stage
 *     is appended, encoded, to the stage's open run instead of its pending heap; a full run
 *     (SD__SPILL_RUN bytes) is written out. A stage whose heap is empty loads its oldest run
 *     back (sd__pending_load) before it makes a bundle. Spilled elements keep their sequence
 *     numbers and timestamps and hold the input watermark at their oldest timestamp;
 *   - GroupByKey values: over the budget, once a GroupByKey holds a quarter of the budget in
 *     values, every group's values so far are written out as an extent of the group
 *     (sd__gbk_maybe_spill), and read back in order when a pane is encoded (em_gbk.c);
 *   - bundle outputs: over the budget, each sealed output chunk of an in-flight bundle is
 *     written out (em_outstream.c) and read back, one chunk at a time, at commit.
 *
 * What the engine holds is estimated, not counted byte by byte (sd__em_mem_estimate): pending
 * elements at their record size plus their PCollection's mean element size, GroupByKey values
 * as appended, output chunks and in-flight inputs as buffered. The estimate is refreshed every
 * SD__SPILL_CHECK_EVERY deliveries, at each sealed output chunk and after a GroupByKey spill
 * (at every delivery under a budget of less than four runs), so the overshoot is a few chunks.
 * The units written (runs, output chunks) are at most an eighth of the budget
 * (sd__spill_unit). Not
 * spilled: side-input stores, user state, timers, residuals, one GroupByKey pane being encoded
 * (one key's values in one window) and the bundles in flight.
 *
 * Where the space goes: runs and chunks read back give their file space to the system again
 * (FALLOC_FL_PUNCH_HOLE, where the file system can), so the file's disk use follows what is
 * spilled now; GroupByKey extents are given back when their group empties. The file is made
 * with mkstemp (mode 0600, a new name) and removed from its directory at once, so nothing
 * remains if the process dies.
 *
 * Which elements are spilled depends only on the job's data and configuration (the estimate
 * reads no clock and no allocator), so a recorded schedule replays the same.
 */
#define _GNU_SOURCE /* fallocate, FALLOC_FL_PUNCH_HOLE */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* The file                                                                                   */
/* ========================================================================================== */

static sd_status spill_open(sd_em *em, sd_err *err)
{
    if (em->spill_fd >= 0) {
        return SD_OK;
    }
    const char *dir = em->cfg.spill_dir;
    if (dir == NULL || dir[0] == '\0') {
        dir = getenv("TMPDIR");
    }
    if (dir == NULL || dir[0] == '\0') {
        dir = "/tmp";
    }
    char *path = sd_asprintf("%s/sundial-spill-XXXXXX", dir);
    if (path == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    int fd = mkstemp(path);
    if (fd < 0) {
        int e = errno;
        sd_status rc = sd_err_set(err, SD_EIO,
                                  "memory limit: cannot create a spill file in \"%s\": %s "
                                  "(choose another directory or raise the limit)",
                                  dir, strerror(e));
        sd_free(path);
        return rc;
    }
    (void)unlink(path); /* the descriptor keeps it; nothing stays behind */
    sd_free(path);
    em->spill_fd = fd;
    em->spill_end = 0;
    return SD_OK;
}

sd_status sd__spill_write(sd_em *em, const void *data, size_t len, uint64_t *off, sd_err *err)
{
    sd_status rc = spill_open(em, err);
    if (rc != SD_OK) {
        return rc;
    }
    *off = em->spill_end;
    const uint8_t *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(em->spill_fd, p + done, len - done, (off_t)(*off + done));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            int e = n < 0 ? errno : ENOSPC;
            return sd_err_set(err, SD_EIO,
                              "memory limit: writing %zu bytes to the spill file failed: %s", len,
                              strerror(e));
        }
        done += (size_t)n;
    }
    em->spill_end += len;
    em->spill_live += len;
    em->spill_total += len;
    em->spill_peak = SD_MAX(em->spill_peak, em->spill_live);
    return SD_OK;
}

sd_status sd__spill_read(sd_em *em, uint64_t off, void *data, size_t len, sd_err *err)
{
    uint8_t *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(em->spill_fd, p + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return sd_err_set(err, SD_EIO,
                              "memory limit: reading %zu bytes back from the spill file failed: %s",
                              len, n < 0 ? strerror(errno) : "the file is shorter");
        }
        done += (size_t)n;
    }
    return SD_OK;
}

void sd__spill_free(sd_em *em, uint64_t off, size_t len)
{
    if (em->spill_fd < 0 || len == 0) {
        return;
    }
    em->spill_live -= SD_MIN(em->spill_live, (uint64_t)len);
#ifdef FALLOC_FL_PUNCH_HOLE
    /* Best effort: a file system that cannot punch holes keeps the space until the job ends. */
    (void)fallocate(em->spill_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
                    (off_t)len);
#else
    (void)off;
#endif
}

void sd_em_spill_stats(const sd_em *em, uint64_t *written, uint64_t *peak)
{
    *written = em->spill_total;
    *peak = em->spill_peak;
}

void sd__spill_close(sd_em *em)
{
    if (em->spill_fd >= 0) {
        (void)close(em->spill_fd);
        em->spill_fd = -1;
    }
}

/* ========================================================================================== */
/* The budget                                                                                 */
/* ========================================================================================== */

size_t sd__em_mem_estimate(const sd_em *em)
{
    size_t total = 0;
    for (size_t i = 0; i < em->stages.len; i++) {
        const sd__stage *st = sd__em_stage_at(em, i);
        if (st->kind == SD_STAGE_GBK) {
            total += st->gbk.bytes + st->gbk.n_groups * (sizeof(sd__group) + 32);
            total += st->gbk.ready_bytes.len;
            continue;
        }
        if (st->kind != SD_STAGE_SDK) {
            continue;
        }
        const sd__pcoll *in = sd__em_pcoll_at(em, st->inputs[0]);
        size_t mean = in->n_elements > 0 ? (size_t)(in->n_bytes / in->n_elements) : 0;
        total += (st->pending.len + st->sorted.len) * (sizeof(sd__elem) + mean);
        total += st->spill_tail.cap;
        for (const sd_bundle *b = st->inflight; b != NULL; b = b->next) {
            total += b->input.cap + b->elems.len * sizeof(sd__elem);
            for (size_t o = 0; b->outputs != NULL && o < st->n_outputs; o++) {
                total += b->outputs[o].len - b->outputs[o].spilled;
            }
        }
    }
    return total;
}

/*
 * Memory that moves through the engine in bulk (a bundle's output into GroupByKey values, fired
 * values into panes) leaves freed blocks in the allocator's heaps: value buffers that grew by
 * doubling, values released once their pane is encoded. Below the allocator's mmap threshold
 * they stay resident while the same data takes new memory elsewhere, so a GroupByKey of many
 * keys needed its data about twice (64 MiB of 1 KiB values under 1,000 keys: 149 MiB peak on
 * the server). Every SD__TRIM_AFTER bytes moved, the allocator gives its free memory back.
 */
void sd__em_churn(sd_em *em, size_t bytes)
{
    em->churn += bytes;
    if (em->churn >= SD__TRIM_AFTER) {
        em->churn = 0;
        sd_mem_trim();
    }
}

bool sd__em_over_budget(sd_em *em)
{
    if (em->cfg.memory_limit == 0) {
        return false;
    }
    em->spill_ticks = 0;
    em->over_budget = sd__em_mem_estimate(em) > em->cfg.memory_limit;
    return em->over_budget;
}

bool sd__em_spilling(sd_em *em)
{
    if (em->cfg.memory_limit == 0) {
        return false;
    }
    /* A budget smaller than a few runs is estimated at every call: what it allows is gone
     * within a few deliveries (and the engine tests' one-byte budget spills everything). */
    if (em->cfg.memory_limit < 4 * (size_t)SD__SPILL_RUN ||
        ++em->spill_ticks >= SD__SPILL_CHECK_EVERY) {
        return sd__em_over_budget(em);
    }
    return em->over_budget;
}

/* ========================================================================================== */
/* Pending elements                                                                           */
/* ========================================================================================== */

/*
 * A spilled element: flags (bit 0: global window, 1: pane first, 2: pane last, 3: custom
 * window), pane timing,
 * ts and seq (big-endian 64), window start and end unless global, pane index and non-speculative
 * index + 1 (varints), key_len, and the element as varint length + bytes.
 */
enum { REC_GLOBAL = 1, REC_FIRST = 2, REC_LAST = 4, REC_CUSTOM = 8 };

static sd_status run_flush(sd_em *em, sd__stage *st, sd_err *err)
{
    if (st->spill_tail_n == 0) {
        return SD_OK;
    }
    sd__run run = { .len = st->spill_tail.len,
                    .n = st->spill_tail_n,
                    .min_ts = st->spill_tail_min };
    sd_status rc = sd__spill_write(em, st->spill_tail.data, st->spill_tail.len, &run.off, err);
    if (rc == SD_OK && sd_vec_push(&st->spill_runs, &run) != SD_OK) {
        sd__spill_free(em, run.off, run.len);
        rc = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (rc != SD_OK) {
        return rc;
    }
    sd_buf_reset(&st->spill_tail);
    st->spill_tail_n = 0;
    st->spill_tail_min = SD_TIME_MAX;
    return SD_OK;
}

sd_status sd__pending_spill(sd_em *em, sd__stage *st, const sd__elem *e, sd_bytes elem, sd_err *err)
{
    sd_buf *t = &st->spill_tail;
    size_t before = t->len;
    uint8_t flags = (uint8_t)((e->win.global ? REC_GLOBAL : 0) | (e->win.custom ? REC_CUSTOM : 0) |
                              (e->pane.first ? REC_FIRST : 0) | (e->pane.last ? REC_LAST : 0));
    sd_status rc = sd_buf_append_byte(t, flags);
    if (rc == SD_OK) {
        rc = sd_buf_append_byte(t, (uint8_t)e->pane.timing);
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_be64(t, (uint64_t)e->ts);
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_be64(t, e->seq);
    }
    if (rc == SD_OK && !e->win.global) {
        rc = sd_buf_put_be64(t, (uint64_t)e->win.start);
        if (rc == SD_OK) {
            rc = sd_buf_put_be64(t, (uint64_t)e->win.end);
        }
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_varint(t, (uint64_t)e->pane.index);
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_varint(t, (uint64_t)e->pane.nonspec_index + 1);
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_varint(t, (uint64_t)e->key_len);
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_lp(t, elem);
    }
    if (rc != SD_OK) {
        t->len = before;
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    st->spill_tail_n++;
    st->n_spilled++;
    st->spill_tail_min = SD_MIN(st->spill_tail_min, e->ts);
    st->spill_min = SD_MIN(st->spill_min, e->ts);
    return t->len >= sd__spill_unit(em, SD__SPILL_RUN) ? run_flush(em, st, err) : SD_OK;
}

static sd_status decode_rec(sd_reader *r, sd__elem *e, sd_bytes *elem)
{
    uint8_t flags, timing;
    uint64_t ts, seq, start = 0, end = 0, index, nonspec, key_len;
    sd_status rc = sd_reader_byte(r, &flags);
    if (rc == SD_OK) {
        rc = sd_reader_byte(r, &timing);
    }
    if (rc == SD_OK) {
        rc = sd_reader_be64(r, &ts);
    }
    if (rc == SD_OK) {
        rc = sd_reader_be64(r, &seq);
    }
    if (rc == SD_OK && !(flags & REC_GLOBAL)) {
        rc = sd_reader_be64(r, &start);
        if (rc == SD_OK) {
            rc = sd_reader_be64(r, &end);
        }
    }
    if (rc == SD_OK) {
        rc = sd_reader_varint(r, &index);
    }
    if (rc == SD_OK) {
        rc = sd_reader_varint(r, &nonspec);
    }
    if (rc == SD_OK) {
        rc = sd_reader_varint(r, &key_len);
    }
    if (rc == SD_OK) {
        rc = sd_reader_lp(r, elem);
    }
    if (rc != SD_OK || key_len > elem->len) {
        return SD_EPROTO;
    }
    *e = (sd__elem){ .ts = (sd_time)ts,
                     .seq = seq,
                     .pane = { .first = (flags & REC_FIRST) != 0,
                               .last = (flags & REC_LAST) != 0,
                               .timing = timing,
                               .index = (int64_t)index,
                               .nonspec_index = (int64_t)(nonspec - 1) },
                     .len = elem->len,
                     .key_len = (size_t)key_len };
    if (flags & REC_GLOBAL) {
        e->win = (sd__win){ .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true };
    } else {
        e->win = (sd__win){ .start = (sd_time)start,
                            .end = (sd_time)end,
                            .custom = (flags & REC_CUSTOM) != 0 };
    }
    return SD_OK;
}

/* The oldest timestamp among the runs still on file and the open run. */
static sd_time spilled_min(const sd__stage *st)
{
    sd_time m = st->spill_tail_n > 0 ? st->spill_tail_min : SD_TIME_MAX;
    for (size_t i = 0; i < st->spill_runs.len; i++) {
        m = SD_MIN(m, SD_VEC_AT(&st->spill_runs, sd__run, i)->min_ts);
    }
    return m;
}

sd_status sd__pending_load(sd_em *em, sd__stage *st, sd_err *err)
{
    uint8_t *data;
    size_t len, n;
    sd__run run = { 0 };
    bool from_file = st->spill_runs.len > 0;
    if (from_file) {
        run = *SD_VEC_AT(&st->spill_runs, sd__run, 0);
        data = sd_malloc(run.len > 0 ? run.len : 1);
        if (data == NULL) {
            return sd__em_poison(em, sd_err_set(err, SD_ENOMEM, "out of memory"));
        }
        sd_status rc = sd__spill_read(em, run.off, data, run.len, err);
        if (rc != SD_OK) {
            sd_free(data);
            return sd__em_poison(em, rc);
        }
        len = run.len;
        n = run.n;
    } else {
        if (st->spill_tail_n == 0) {
            return SD_OK;
        }
        n = st->spill_tail_n;
        data = sd_buf_take(&st->spill_tail, &len);
    }
    sd__slab *slab = sd__slab_create(data, len);
    if (slab == NULL || sd_vec_reserve(&st->pending, st->pending.len + n) != SD_OK) {
        sd__slab_unref(slab);
        return sd__em_poison(em, sd_err_set(err, SD_ENOMEM, "out of memory"));
    }
    sd_reader r = sd_reader_make(sd_bytes_make(data, len));
    size_t got = 0;
    while (!sd_reader_done(&r)) {
        sd__elem e;
        sd_bytes elem;
        if (decode_rec(&r, &e, &elem) != SD_OK || got == n) {
            sd__slab_unref(slab);
            return sd__em_poison(
                em, sd_err_set(err, SD_EINTERNAL,
                               "stage \"%s\": a spilled run of pending elements does not decode",
                               st->id));
        }
        e.slab = slab;
        e.off = (size_t)(elem.ptr - data);
        slab->refs++;
        sd_status rc = sd__elem_heap_push(&st->pending, &e); /* room was reserved */
        if (rc != SD_OK) {
            slab->refs--;
            sd__slab_unref(slab);
            return sd__em_poison(em, sd_err_set(err, rc, "out of memory"));
        }
        got++;
    }
    sd__slab_unref(slab); /* the elements hold it now */
    if (got != n) {
        return sd__em_poison(em, sd_err_set(err, SD_EINTERNAL,
                                            "stage \"%s\": a spilled run holds %zu elements, "
                                            "not the %zu written",
                                            st->id, got, n));
    }
    if (from_file) {
        sd_vec_remove(&st->spill_runs, 0);
        sd__spill_free(em, run.off, run.len);
    } else {
        st->spill_tail_n = 0;
        st->spill_tail_min = SD_TIME_MAX;
    }
    st->n_spilled -= n;
    st->spill_min = spilled_min(st);
    return SD_OK;
}

void sd__pending_spill_deinit(sd__stage *st)
{
    sd_vec_deinit(&st->spill_runs);
    sd_buf_deinit(&st->spill_tail);
    st->spill_tail_n = 0;
    st->n_spilled = 0;
}

/* ========================================================================================== */
/* GroupByKey values                                                                          */
/* ========================================================================================== */

void sd__gbk_values_clear(sd_em *em, sd__gbk *gbk, sd__group *g)
{
    gbk->bytes -= g->values.len + g->pool.len;
    sd_buf_reset(&g->values);
    sd__vchain_release(&g->pool);
    if (g->spilled != NULL) {
        for (size_t i = 0; i < g->spilled->len; i++) {
            const sd__gext *x = SD_VEC_AT(g->spilled, sd__gext, i);
            sd__spill_free(em, x->off, x->len);
        }
        sd_vec_deinit(g->spilled);
        sd_free(g->spilled);
        g->spilled = NULL;
    }
}

/* A group whose in-memory values sit at [at, at + len) of a batch about to be written. */
typedef struct spill_item {
    sd__group *g;
    size_t at, len;
} spill_item;

/* Write the batch and give each of its groups the extent of its values. */
static sd_status spill_batch(sd_em *em, sd__gbk *gbk, sd_buf *batch, sd_vec *items, sd_err *err)
{
    uint64_t off;
    if (items->len == 0) {
        return SD_OK;
    }
    sd_status rc = sd__spill_write(em, batch->data, batch->len, &off, err);
    for (size_t i = 0; i < items->len && rc == SD_OK; i++) {
        spill_item *it = SD_VEC_AT(items, spill_item, i);
        sd__group *g = it->g;
        if (g->spilled == NULL) {
            g->spilled = sd_calloc(1, sizeof(*g->spilled));
            if (g->spilled == NULL) {
                rc = sd_err_set(err, SD_ENOMEM, "out of memory");
                break;
            }
            sd_vec_init(g->spilled, sizeof(sd__gext));
        }
        sd__gext x = { .off = off + it->at, .len = it->len };
        if (sd_vec_push(g->spilled, &x) != SD_OK) {
            rc = sd_err_set(err, SD_ENOMEM, "out of memory");
            break;
        }
        gbk->bytes -= g->values.len + g->pool.len;
        sd_buf_reset(&g->values);
        sd__vchain_release(&g->pool);
    }
    sd_buf_reset(batch);
    items->len = 0;
    return rc;
}

#define SPILL_BATCH (4u * 1024u * 1024u)

/* Add g's in-memory values to the batch (written whenever it reaches SPILL_BATCH). */
static sd_status
spill_group(sd_em *em, sd__gbk *gbk, sd__group *g, sd_buf *batch, sd_vec *items, sd_err *err)
{
    if (g->values.len == 0 && g->pool.len == 0) {
        return SD_OK;
    }
    spill_item it = { .g = g, .at = batch->len, .len = g->values.len + g->pool.len };
    if (sd__vchain_copy(&g->pool, batch) != SD_OK ||
        sd_buf_append_bytes(batch, sd_buf_bytes(&g->values)) != SD_OK ||
        sd_vec_push(items, &it) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    return batch->len >= SPILL_BATCH ? spill_batch(em, gbk, batch, items, err) : SD_OK;
}

sd_status sd__gbk_maybe_spill(sd_em *em, sd__stage *st, sd_err *err)
{
    sd__gbk *gbk = &st->gbk;
    /* Each spill visits every group, so it waits for a quarter of the budget of new values
     * (or 64 KiB, or an eighth of a tiny budget): a GroupByKey of a million keys is scanned a
     * few times per budget's worth of data, not once per 64 KiB. */
    size_t enough = SD_MAX(sd__spill_unit(em, (size_t)64 * 1024), em->cfg.memory_limit / 4);
    if (em->cfg.memory_limit == 0 || gbk->bytes < enough || !sd__em_spilling(em)) {
        return SD_OK;
    }
    sd_buf batch;
    sd_vec items;
    sd_buf_init(&batch, 0);
    sd_vec_init(&items, sizeof(spill_item));
    sd_status rc = SD_OK;
    size_t it = 0;
    void *v;
    while (rc == SD_OK && sd_map_next(&gbk->groups, &it, NULL, &v)) {
        rc = spill_group(em, gbk, v, &batch, &items, err);
    }
    it = 0;
    while (rc == SD_OK && sd_map_next(&gbk->global, &it, NULL, &v)) {
        rc = spill_group(em, gbk, v, &batch, &items, err);
    }
    it = 0;
    while (rc == SD_OK && sd_map_next(&gbk->sessions, &it, NULL, &v)) {
        sd_vec *list = v;
        for (size_t i = 0; i < list->len && rc == SD_OK; i++) {
            rc = spill_group(em, gbk, *SD_VEC_AT(list, sd__group *, i), &batch, &items, err);
        }
    }
    if (rc == SD_OK) {
        rc = spill_batch(em, gbk, &batch, &items, err);
    }
    sd_buf_deinit(&batch);
    sd_vec_deinit(&items);
    if (rc == SD_OK) {
        (void)sd__em_over_budget(em); /* refresh the estimate now that it shrank */
    }
    return rc;
}

sd_status sd__gbk_spill_all_of(sd_em *em, sd__gbk *gbk, sd__group *g, sd_err *err)
{
    sd_buf batch;
    sd_vec items;
    sd_buf_init(&batch, 0);
    sd_vec_init(&items, sizeof(spill_item));
    sd_status rc = spill_group(em, gbk, g, &batch, &items, err);
    if (rc == SD_OK) {
        rc = spill_batch(em, gbk, &batch, &items, err);
    }
    sd_buf_deinit(&batch);
    sd_vec_deinit(&items);
    return rc;
}

sd_status sd__gbk_read_spilled(sd_em *em, const sd__group *g, sd_buf *out, sd_err *err)
{
    sd_status rc = SD_OK;
    for (size_t i = 0; rc == SD_OK && g->spilled != NULL && i < g->spilled->len; i++) {
        const sd__gext *x = SD_VEC_AT(g->spilled, sd__gext, i);
        rc = sd_buf_reserve(out, out->len + x->len);
        if (rc == SD_OK) {
            rc = sd__spill_read(em, x->off, out->data + out->len, x->len, err);
        }
        if (rc == SD_OK) {
            out->len += x->len;
        }
    }
    return rc;
}
