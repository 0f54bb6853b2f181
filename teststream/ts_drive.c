/*
 * Sundial TestStream: the driver (teststream/ts_drive.h).
 *
 * What it is. The engine offers one hook for runner-side scripted sources (sd_em_set_source):
 * at quiescence — nothing in flight, no SDK bundle ready, due processing-time work handled —
 * it asks whether a step is left and, if so, has the driver play exactly one. This file is
 * that driver for TestStreams; the engine itself knows no events, streams or scripts.
 *
 * One step plays one event of one stream: its elements are delivered to the stage's output
 * PCollection (global window, no-firing pane), its watermark moves that output only, its
 * clock advance moves the job clock. After a stream's last event comes one more step, its
 * end: every output of the stage goes to the end of time.
 *
 * Several TestStreams (Beam allows any number) share the job's one processing-time clock.
 * Each stream is a timeline: its element and watermark events happen at the processing time
 * its own clock events have reached (pos, from the job's start). At quiescence the stream
 * whose timeline is furthest behind takes its next step (ties: the stream added first), and
 * the job clock follows the slowest stream with events left, so the streams' processing-time
 * events merge in time order and each watermark event applies to its own stream's outputs
 * only. One stream gives exactly its own order: each clock event moves the job clock by its
 * amount.
 *
 * Trade-off: choosing the next stream scans them all (O(streams) a step); pipelines have a
 * handful of TestStreams, and a step is followed by a whole scheduling pass anyway.
 */
#include "teststream/ts_drive.h"

#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/vec.h"

typedef struct ts_play {
    char *stage_id;
    size_t stage;   /* the engine's stage index */
    size_t *pcolls; /* per stream output: the engine's PCollection index */
    sd_ts_stream *stream;
    size_t next; /* the next event to play; == n_events: only the end step is left; past it,
                  * the stream is over */
    sd_time pos; /* processing time this stream's clock events have reached (ms from the
                  * start; SD_TIME_MAX once it advanced to the end or ended) */
    bool live;   /* its events come from a service still sending (sd_ts_driver_set_live): its
                  * end step waits until the service says it is over */
} ts_play;

struct sd_ts_driver {
    sd_em *em;
    sd_vec plays;   /* ts_play, in the order added */
    sd_vec scratch; /* sd_bytes: one element event's elements */
    sd_vec times;   /* sd_time: their timestamps */
};

static void play_deinit(ts_play *p)
{
    sd_free(p->stage_id);
    sd_free(p->pcolls);
    sd_ts_stream_destroy(p->stream);
}

static void driver_destroy(void *ctx)
{
    sd_ts_driver *d = ctx;
    for (size_t i = 0; i < d->plays.len; i++) {
        play_deinit(SD_VEC_AT(&d->plays, ts_play, i));
    }
    sd_vec_deinit(&d->plays);
    sd_vec_deinit(&d->scratch);
    sd_vec_deinit(&d->times);
    sd_free(d);
}

/* The stream whose timeline is furthest behind among those with a step left, or NULL. */
static ts_play *next_play(const sd_ts_driver *d)
{
    ts_play *best = NULL;
    for (size_t i = 0; i < d->plays.len; i++) {
        ts_play *p = SD_VEC_AT(&d->plays, ts_play, i);
        if (p->next <= sd_ts_stream_n_events(p->stream) && (best == NULL || p->pos < best->pos)) {
            best = p;
        }
    }
    return best;
}

static bool driver_pending(void *ctx)
{
    return next_play(ctx) != NULL;
}

/* A live stream with nothing more yet is the one to play next: wait for its service. */
static bool driver_ready(void *ctx)
{
    const ts_play *p = next_play(ctx);
    return p == NULL || !(p->live && p->next == sd_ts_stream_n_events(p->stream));
}

/* The processing time the slowest stream with events left has reached (MAX: none left). */
static sd_time slowest_pos(const sd_ts_driver *d)
{
    const ts_play *p = next_play(d);
    return p != NULL ? p->pos : SD_TIME_MAX;
}

static sd_status
play_elements(sd_ts_driver *d, const ts_play *p, size_t i, const sd_ts_event *ev, sd_err *err)
{
    d->scratch.len = 0;
    d->times.len = 0;
    sd_status rc = SD_OK;
    for (size_t k = 0; k < ev->n && rc == SD_OK; k++) {
        sd_bytes b;
        sd_time t;
        sd_ts_stream_element(p->stream, i, k, &b, &t);
        rc = sd_vec_push(&d->scratch, &b);
        if (rc == SD_OK) {
            rc = sd_vec_push(&d->times, &t);
        }
    }
    if (rc != SD_OK) {
        return sd_err_set(err, rc, "out of memory");
    }
    const sd_bytes *elems = d->scratch.items;
    const sd_time *times = d->times.items;
    return sd_em_source_deliver(d->em, p->pcolls[ev->output], elems, times, ev->n, err);
}

/* How far the next step moves the job clock (driver_step's rule, played on a copy). */
static bool driver_peek_clock(void *ctx, int64_t *advance_ms)
{
    sd_ts_driver *d = ctx;
    ts_play *p = next_play(d);
    if (p == NULL) {
        return false;
    }
    sd_time before = p->pos;
    size_t n_events = sd_ts_stream_n_events(p->stream);
    sd_time pos = SD_TIME_MAX;
    if (p->next < n_events) {
        sd_ts_event ev;
        sd_ts_stream_event(p->stream, p->next, &ev);
        if (ev.kind != SD_TS_CLOCK) {
            return false;
        }
        pos = ev.advance_ms >= SD_TIME_MAX ? SD_TIME_MAX : sd_time_add(p->pos, ev.advance_ms);
    }
    sd_time saved_pos = p->pos;
    size_t saved_next = p->next;
    p->pos = pos;
    p->next = p->next < n_events ? p->next + 1 : n_events + 1;
    sd_time after = slowest_pos(d);
    p->pos = saved_pos;
    p->next = saved_next;
    if (after == SD_TIME_MAX && saved_next < n_events) {
        *advance_ms = SD_TIME_MAX; /* every stream at the end of time */
        return true;
    }
    if (after == SD_TIME_MAX || after <= before) {
        return false;
    }
    *advance_ms = after - before;
    return true;
}

/* Play the next step of the stream furthest behind. */
static sd_status driver_step(void *ctx, sd_em *em, sd_err *err)
{
    sd_ts_driver *d = ctx;
    ts_play *p = next_play(d);
    sd_time before = slowest_pos(d);
    size_t n_events = sd_ts_stream_n_events(p->stream);
    if (p->next == n_events) {
        sd_em_source_finish(em, p->stage);
        p->next++;
        p->pos = SD_TIME_MAX;
        /* The streams left may be ahead of this one: the clock moves to the slowest. */
        sd_time after = slowest_pos(d);
        if (after != SD_TIME_MAX && after > before) {
            sd_em_source_advance_clock(em, after - before);
        }
        return SD_OK;
    }
    sd_ts_event ev;
    size_t i = p->next++;
    sd_ts_stream_event(p->stream, i, &ev);
    switch (ev.kind) {
    case SD_TS_ELEMENTS:
        return play_elements(d, p, i, &ev, err);
    case SD_TS_WATERMARK:
        sd_em_source_watermark(em, p->pcolls[ev.output], ev.wm);
        return SD_OK;
    case SD_TS_CLOCK: {
        p->pos = ev.advance_ms >= SD_TIME_MAX ? SD_TIME_MAX : sd_time_add(p->pos, ev.advance_ms);
        sd_time after = slowest_pos(d);
        if (after == SD_TIME_MAX) {
            sd_em_source_advance_clock(em, SD_TIME_MAX); /* every stream is at the end of time */
        } else if (after > before) {
            sd_em_source_advance_clock(em, after - before);
        }
        return SD_OK;
    }
    }
    return SD_OK;
}

/* Draining: the events not played yet are input not read yet; they are dropped, and each
 * stream's end step (its outputs to the end of time) is all that is left. */
static void driver_drain(void *ctx)
{
    sd_ts_driver *d = ctx;
    for (size_t i = 0; i < d->plays.len; i++) {
        ts_play *p = SD_VEC_AT(&d->plays, ts_play, i);
        size_t n = sd_ts_stream_n_events(p->stream);
        if (p->next < n) {
            p->next = n;
        }
        p->live = false;
    }
}

sd_status sd_ts_driver_create(sd_em *em, sd_ts_driver **out, sd_err *err)
{
    static const sd_em_source ops = { .pending = driver_pending,
                                      .step = driver_step,
                                      .drain = driver_drain,
                                      .destroy = driver_destroy,
                                      .ready = driver_ready,
                                      .peek_clock = driver_peek_clock };
    *out = NULL;
    sd_ts_driver *d = sd_calloc(1, sizeof(*d));
    if (d == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    d->em = em;
    sd_vec_init(&d->plays, sizeof(ts_play));
    sd_vec_init(&d->scratch, sizeof(sd_bytes));
    sd_vec_init(&d->times, sizeof(sd_time));
    sd_status rc = sd_em_set_source(em, &ops, d, err);
    if (rc != SD_OK) {
        driver_destroy(d);
        return rc;
    }
    *out = d;
    return SD_OK;
}

sd_ts_stream *sd_ts_driver_stream(const sd_ts_driver *d, const char *stage_id)
{
    for (size_t i = 0; d != NULL && i < d->plays.len; i++) {
        const ts_play *p = SD_VEC_AT(&d->plays, ts_play, i);
        if (strcmp(p->stage_id, stage_id) == 0) {
            return p->stream;
        }
    }
    return NULL;
}

sd_status sd_ts_driver_add(sd_ts_driver *d,
                           const char *stage_id,
                           sd_ts_stream *stream,
                           const char *const *pcollections,
                           sd_err *err)
{
    ts_play p = { .stream = stream, .pos = 0 };
    sd_status rc = SD_OK;
    if (sd_ts_driver_stream(d, stage_id) != NULL) {
        rc = sd_err_set(err, SD_EEXIST, "teststream \"%s\": it has a stream already", stage_id);
        goto fail;
    }
    size_t n = sd_ts_stream_n_outputs(stream);
    p.stage_id = sd_strdup(stage_id);
    p.pcolls = sd_calloc(n, sizeof(size_t));
    if (p.stage_id == NULL || p.pcolls == NULL) {
        rc = sd_err_set(err, SD_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        rc = sd_em_source_output(d->em, stage_id, pcollections[i], &p.stage, &p.pcolls[i], err);
    }
    if (rc == SD_OK && sd_vec_push(&d->plays, &p) != SD_OK) {
        rc = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (rc == SD_OK) {
        return SD_OK;
    }
fail:
    play_deinit(&p);
    return rc;
}

sd_status sd_ts_driver_set_live(sd_ts_driver *d, const char *stage_id, bool live, sd_err *err)
{
    for (size_t i = 0; d != NULL && i < d->plays.len; i++) {
        ts_play *p = SD_VEC_AT(&d->plays, ts_play, i);
        if (strcmp(p->stage_id, stage_id) == 0) {
            p->live = live;
            return SD_OK;
        }
    }
    return sd_err_set(err, SD_ENOTFOUND, "teststream \"%s\": no such stream",
                      stage_id != NULL ? stage_id : "(null)");
}
