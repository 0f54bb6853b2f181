/*
 * Sundial: a bundle's output streams (sd__outstream, em_int.h): what an SDK sends for each
 * output, checked piece by piece as it arrives and kept in chunks (sealed chunks may go to the
 * spill file); for a sink that resends (sd_stage_spec.sink_resends) each piece is held until
 * the next shows it was not sent again. Completion (em_complete.c) delivers them.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* Output streams: checked as they arrive (em_int.h: sd__outstream)                           */
/* ========================================================================================== */

sd_status
sd__em_check_values(sd_em *em, sd__pcoll *pc, sd_bytes data, size_t *pos, size_t *n, sd_err *err)
{
    sd_reader r = sd_reader_make(data);
    if (*pos > 0) { /* data.ptr may be NULL when nothing arrived: NULL + 0 is undefined */
        r.p += *pos;
    }
    while (!sd_reader_done(&r)) {
        sd_bytes elem;
        sd_status rc = sd_wv_decode(pc->wv_coder, &r, &em->hdr, &elem, err);
        if (rc != SD_OK) {
            (void)sd_err_prefix(err, "pcollection \"%s\" element %zu: ", pc->id, *n);
            return rc;
        }
        /* No separate key check: decoding skipped the element with its KV coder, which skips
         * the key with the same key coder sd_kv_split uses, so the split cannot fail later. */
        const sd_window *ws = sd_windows_items(&em->hdr.windows);
        for (size_t w = 0; w < em->hdr.windows.n; w++) {
            sd__win win; /* a custom window is interned now: commit will need it */
            rc = sd__win_intern(em, &ws[w], &win, err);
            if (rc != SD_OK) {
                (void)sd_err_prefix(err, "pcollection \"%s\" element %zu: ", pc->id, *n);
                return rc;
            }
            if (pc->merge_gbk != SIZE_MAX) {
                rc = sd__gbk_merge_result(em, pc, elem, false, err);
                if (rc != SD_OK) {
                    return rc;
                }
            }
        }
        *pos = (size_t)(r.p - data.ptr);
        (*n)++;
    }
    return SD_OK;
}

void sd__outstream_reset(sd__outstream *os)
{
    for (size_t i = 0; i < os->chunks.len; i++) {
        sd__chunk *ch = SD_VEC_AT(&os->chunks, sd__chunk, i);
        sd_free(ch->data);
        if (ch->on_file) {
            sd__spill_free(os->em, ch->off, ch->len);
        }
    }
    os->chunks.len = 0;
    sd_buf_reset(&os->tail);
    sd_buf_reset(&os->held);
    os->checked = os->n_checked = os->len = os->retry_at = os->spilled = 0;
}

size_t sd__outstream_footprint(const sd__outstream *os)
{
    size_t n = os->tail.cap + os->held.cap + os->chunks.cap * os->chunks.item_size;
    for (size_t c = 0; c < os->chunks.len; c++) {
        const sd__chunk *ch = SD_VEC_AT(&os->chunks, sd__chunk, c);
        n += ch->data != NULL ? ch->len : 0; /* commit took the data of delivered chunks */
    }
    return n;
}

void sd__outstream_deinit(sd__outstream *os)
{
    sd__outstream_reset(os);
    sd_vec_deinit(&os->chunks);
    sd_buf_deinit(&os->tail);
    sd_buf_deinit(&os->held);
}

/* Seal the checked part of the tail as a chunk; the rest starts a new tail, with room for the
 * rest and up to two chunks' worth of appends, so a tail filled a piece at a time (a piece is
 * at most a chunk: sd__outstream_append) is not moved before it is sealed again. Over the
 * memory budget the chunk goes to the spill file. */
/* A sealed chunk whose buffer has at least this much more room than bytes is shrunk. */
#define SD__OUT_SHRINK ((size_t)64 * 1024)

static sd_status outstream_seal(sd_em *em, sd__outstream *os, sd_err *err)
{
    size_t len, rest = os->tail.len - os->checked;
    sd__chunk ch = { .len = os->checked };
    sd_buf next;
    sd_buf_init(&next, 0);
    sd_status rc = sd_buf_reserve(&next, rest + 2 * sd__spill_unit(em, SD__OUT_CHUNK));
    if (rc == SD_OK) {
        rc = sd_buf_append(&next, os->tail.data + os->checked, rest);
    }
    if (rc == SD_OK) {
        rc = sd_vec_push(&os->chunks, &ch);
    }
    if (rc != SD_OK) {
        sd_buf_deinit(&next);
        return rc;
    }
    sd__chunk *last = SD_VEC_AT(&os->chunks, sd__chunk, os->chunks.len - 1);
    size_t cap = os->tail.cap;
    last->data = sd_buf_take(&os->tail, &len);
    sd_buf_deinit(&os->tail);
    if (last->data != NULL && cap - last->len >= SD__OUT_SHRINK) {
        /* The old tail may be much larger than its chunk: the rest just copied (a large value
         * cut by the Data messages: as large again as the chunk, all of it touched) and the
         * doubling's spare capacity. The chunk keeps only its own bytes. */
        uint8_t *p = sd_realloc(last->data, last->len);
        last->data = p != NULL ? p : last->data;
    }
    os->tail = next;
    os->checked = 0;
    os->retry_at = 0;
    if (last->data != NULL && sd__em_over_budget(em)) {
        rc = sd__spill_write(em, last->data, last->len, &last->off, err);
        if (rc != SD_OK) {
            return rc; /* the bundle fails (the chunk stays in memory until then) */
        }
        sd_free(last->data);
        last->data = NULL;
        last->on_file = true;
        os->spilled += last->len;
    }
    return SD_OK;
}

static sd_status outstream_append_piece(sd_em *em,
                                        const sd__pcoll *pc,
                                        sd__outstream *os,
                                        sd_bytes data,
                                        sd_err *err)
{
    /* The first tail grows as a buffer does (a small bundle keeps a small footprint); after a
     * seal the stream is known to be large and each new tail starts at SD__OUT_CHUNK. */
    sd_status rc = sd_buf_append_bytes(&os->tail, data);
    if (rc != SD_OK) {
        return rc;
    }
    os->em = em;
    os->len += data.len;
    if (pc->merge_gbk != SIZE_MAX || os->tail.len < os->retry_at) {
        return SD_OK;
    }
    /* Check what decodes whole now (without a message: commit checks again what fails). */
    size_t before = os->checked;
    if (sd__em_check_values(em, (sd__pcoll *)pc, sd_buf_bytes(&os->tail), &os->checked,
                            &os->n_checked, NULL) != SD_OK) {
        size_t pending = os->tail.len - os->checked;
        os->retry_at = os->tail.len + (os->checked > before ? 0 : pending);
    }
    return os->checked >= sd__spill_unit(em, SD__OUT_CHUNK) ? outstream_seal(em, os, err) : SD_OK;
}

sd_status
sd__outstream_append(sd_em *em, const sd__pcoll *pc, sd__outstream *os, sd_bytes data, sd_err *err)
{
    /* A large piece of data is taken a chunk at a time, so the tail stays about a chunk long
     * (sealed as it fills) instead of doubling to the size of the whole piece: the memory
     * is the same, but chunk-sized blocks are reused by the allocator from one bundle to the
     * next, where a block of tens of megabytes is mapped afresh (page faults) every time. */
    size_t step = sd__spill_unit(em, SD__OUT_CHUNK);
    while (data.len > step) {
        sd_status rc = outstream_append_piece(em, pc, os, sd_bytes_make(data.ptr, step), err);
        if (rc != SD_OK) {
            return rc;
        }
        data.ptr += step;
        data.len -= step;
    }
    return outstream_append_piece(em, pc, os, data, err);
}

sd_status sd__outstream_release_held(sd_em *em, sd__stage *st, sd_bundle *b, sd_err *err)
{
    for (size_t i = 0; b->outputs != NULL && i < st->n_outputs; i++) {
        sd__outstream *os = &b->outputs[i];
        if (os->held.len > 0) {
            sd_status rc = sd__outstream_append(em, sd__em_pcoll_at(em, st->outputs[i]), os,
                                                sd_buf_bytes(&os->held), err);
            if (rc != SD_OK) {
                return rc;
            }
            sd_buf_reset(&os->held);
        }
    }
    return SD_OK;
}
