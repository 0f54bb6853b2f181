/*
 * Sundial: the source hook — how a runner-side scripted source (teststream/ts_drive.c)
 * feeds the TESTSTREAM stages.
 *
 * The engine knows TESTSTREAM stages only as runner-side stages whose outputs someone else
 * feeds: the driver installed with sd_em_set_source (teststream/ts_drive.c, the TestStream
 * driver) plays one step at a time, only when the engine is quiescent (sd_em_next_bundle has
 * nothing to hand out and nothing is in flight), through the sd_em_source_* calls below.
 * Trade-off: the synthetic clock does not jump while the driver has steps left — its
 * processing-time events are the only way the clock moves then — matching Prism.
 */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

sd_status sd_em_set_source(sd_em *em, const sd_em_source *ops, void *ctx, sd_err *err)
{
    if (em == NULL || ops == NULL || ops->pending == NULL || ops->step == NULL) {
        return sd_err_set(err, SD_EINVAL, "set_source: em, pending and step are required");
    }
    if (em->started) {
        return sd_err_set(err, SD_ESTATE, "set_source: the engine has started");
    }
    if (em->source.step != NULL) {
        return sd_err_set(err, SD_EEXIST, "set_source: a source driver is installed already");
    }
    em->source = *ops;
    em->source_ctx = ctx;
    return SD_OK;
}

sd_status sd_em_source_output(const sd_em *em,
                              const char *stage_id,
                              const char *pcollection,
                              size_t *out_stage,
                              size_t *out_pcoll,
                              sd_err *err)
{
    if (em == NULL || stage_id == NULL || pcollection == NULL) {
        return sd_err_set(err, SD_EINVAL, "teststream: em, stage and PCollection are required");
    }
    const sd__stage *st = sd_map_get_str(&em->stage_by_id, stage_id);
    if (st == NULL || st->kind != SD_STAGE_TESTSTREAM) {
        return sd_err_set(err, SD_ENOTFOUND, "teststream \"%s\": no such TestStream stage",
                          stage_id);
    }
    for (size_t i = 0; i < st->n_outputs; i++) {
        const sd__pcoll *pc = sd__em_pcoll_at(em, st->outputs[i]);
        if (strcmp(pc->id, pcollection) == 0) {
            *out_stage = st->index;
            *out_pcoll = pc->index;
            return SD_OK;
        }
    }
    return sd_err_set(err, SD_ENOTFOUND, "teststream \"%s\": \"%s\" is not one of its outputs",
                      stage_id, pcollection);
}

bool sd__em_source_pending(const sd_em *em)
{
    return em->source.pending != NULL && em->source.pending(em->source_ctx);
}

sd_status sd__em_source_step(sd_em *em, sd_err *err)
{
    sd__em_progressed(em); /* a scripted event is played: progress, whatever it holds */
    em->epoch++;
    em->source_steps++;
    em->in_source_step = true;
    sd_status rc = em->source.step(em->source_ctx, em, err);
    em->in_source_step = false;
    return rc;
}

/* The stage that produces pc (its TestStream), or -1. */
static int32_t pcoll_stage(const sd__pcoll *pc)
{
    return pc->producer == SIZE_MAX ? -1 : (int32_t)pc->producer;
}

sd_status sd_em_source_deliver(sd_em *em,
                               size_t pcoll,
                               const sd_bytes *elements,
                               const sd_time *timestamps,
                               size_t n,
                               sd_err *err)
{
    assert(em->in_source_step && pcoll < em->pcolls.len);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += elements[i].len;
    }
    /* One slab for the event's elements: every pending record points into it. */
    uint8_t *data = sd_malloc(total == 0 ? 1 : total);
    sd__slab *slab = data != NULL ? sd__slab_create(data, total) : NULL; /* frees data on failure */
    if (slab == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (elements[i].len > 0) {
            memcpy(data + off, elements[i].ptr, elements[i].len);
        }
        off += elements[i].len;
    }
    sd__pcoll *pc = sd__em_pcoll_at(em, pcoll);
    sd_status rc = SD_OK;
    sd__trace_source(em, pcoll_stage(pc), (int32_t)pcoll, 0, (int64_t)n, SD_TIME_MIN);
    off = 0;
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        sd__incoming in = {
            .ts = timestamps[i],
            .win = { .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true },
            .pane = SD_PANE_NO_FIRING,
            .elem = sd_bytes_make(data + off, elements[i].len),
            .slab = slab
        };
        off += elements[i].len;
        rc = sd__em_deliver(em, pc, &in, err);
    }
    sd__slab_unref(slab);
    return rc;
}

void sd_em_source_watermark(sd_em *em, size_t pcoll, sd_time wm)
{
    assert(em->in_source_step && pcoll < em->pcolls.len);
    sd__pcoll *pc = sd__em_pcoll_at(em, pcoll);
    sd__trace_source(em, pcoll_stage(pc), (int32_t)pcoll, 1, 0, wm);
    pc->wm = SD_MAX(pc->wm, wm);
}

void sd_em_source_finish(sd_em *em, size_t stage)
{
    assert(em->in_source_step && stage < em->stages.len);
    const sd__stage *st = sd__em_stage_at(em, stage);
    for (size_t o = 0; o < st->n_outputs; o++) {
        sd__trace_source(em, (int32_t)stage, (int32_t)st->outputs[o], 1, 0, SD_TIME_MAX);
        sd__em_pcoll_at(em, st->outputs[o])->wm = SD_TIME_MAX;
    }
}

void sd_em_source_advance_clock(sd_em *em, int64_t ms)
{
    assert(em->in_source_step && ms >= 0);
    sd_time to = ms >= SD_TIME_MAX ? SD_TIME_MAX : sd_time_add(em->clock_now, ms);
    int32_t stage = em->teststream == SIZE_MAX ? -1 : (int32_t)em->teststream;
    sd__trace_source(em, stage, -1, 2, 0, sd__trace_clock(em, SD_MAX(to, em->clock_now)));
    (void)sd__clock_advance(em, to, SD_CLOCK_CAUSE_TESTSTREAM);
}
