/*
 * Sundial: the engine's time trace store (em_trace.h): an array of records that grows up to
 * its cap, the interned names records refer to, and the names of kinds and causes.
 *
 * Recording never fails and never allocates: the records' array is allocated whole when the
 * engine is created (mapped on demand), names are interned when a stage is registered, and when
 * the cap is reached its last slot takes the CUT record and recording stops there (the CUT
 * record counts what was left out). The engine's call sites (sd__trace_clock_moved and its
 * siblings) take the next slot with sd__trace_slot, numbered and stamped with the clocks, and
 * fill in their fields there (no copy: a record is 136 bytes).
 */
#include "runner/engine/em_trace.h"

#include <string.h>
#include <time.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

sd_status sd__trace_init(sd__trace *tr, size_t cap)
{
    memset(tr, 0, sizeof(*tr));
    sd_vec_init(&tr->names, sizeof(char *));
    sd_map_init(&tr->name_ids, NULL);
    tr->cap = cap == 0 ? SD_EM_TRACE_CAP_DEFAULT : SD_MIN(cap, (size_t)SD_EM_TRACE_CAP_MAX);
    /* All of it now, so recording never allocates (a job's allocation failures are all
     * reported: tests inject them one by one). Not zeroed (a record is written whole before it
     * is read): only the pages records are written to cost memory, and no time is spent
     * clearing megabytes a short job never uses (calloc did: a quarter of test_engine's time,
     * once the allocator serves blocks this size from its heap). */
    tr->recs = sd_malloc(tr->cap * sizeof(*tr->recs));
    return tr->recs == NULL ? SD_ENOMEM : SD_OK;
}

void sd__trace_deinit(sd__trace *tr)
{
    sd_free(tr->recs);
    for (size_t i = 0; i < tr->names.len; i++) {
        sd_free(*SD_VEC_AT(&tr->names, char *, i));
    }
    sd_vec_deinit(&tr->names);
    sd_map_deinit(&tr->name_ids);
    memset(tr, 0, sizeof(*tr));
}

/* The job clock for records: ms since the engine was created. */
static int64_t trace_clock(const sd_em *em, sd_time clock)
{
    return sd_time_add(clock, -em->clock_start);
}

sd_time sd__trace_clock(const sd_em *em, sd_time clock)
{
    return trace_clock(em, clock);
}

/* The wall clock for records: a test's injected clock may tick per call, so the trace takes
 * the time the engine last read rather than perturb it; the real one is read now, coarsely
 * (a few ms of resolution at a fifth of the cost: a record costs about 100 ns in all). */
static sd_time trace_wall(const sd_em *em)
{
    if (em->cfg.wall_now != NULL) {
        return em->wall_last;
    }
#ifdef CLOCK_REALTIME_COARSE
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME_COARSE, &ts) == 0) {
        return (sd_time)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
#endif
    return sd_wall_now_ms();
}

sd_trace_rec *sd__trace_slot(sd_em *em, sd_trace_kind kind, int cause, int32_t stage)
{
    sd__trace *tr = &em->trace;
    if (tr->cut) {
        tr->recs[tr->len - 1].index++;
        return NULL;
    }
    if (tr->recs == NULL) {
        return NULL; /* never initialised (sd_em_create failed half-way) */
    }
    sd_trace_rec *r = &tr->recs[tr->len];
    *r = sd__trace_rec(kind, cause, stage);
    r->seq = tr->len++;
    r->clock = trace_clock(em, em->clock_now);
    r->wall = trace_wall(em);
    if (tr->len < tr->cap) {
        return r;
    }
    /* The cap's last slot takes the CUT record instead. */
    r->kind = SD_TRACE_CUT;
    r->cause = 0;
    r->stage = -1;
    r->count = (int64_t)r->seq;
    r->index = 1; /* the record it replaces */
    tr->cut = true;
    return NULL;
}

void sd__trace_add(sd_em *em, const sd_trace_rec *r)
{
    sd_trace_rec *slot = sd__trace_slot(em, (sd_trace_kind)r->kind, r->cause, r->stage);
    if (slot != NULL) {
        uint64_t seq = slot->seq;
        int64_t clock = slot->clock;
        sd_time wall = slot->wall;
        *slot = *r;
        slot->seq = seq;
        slot->clock = clock;
        slot->wall = wall;
    }
}

int32_t sd__trace_intern(sd_em *em, sd_bytes name)
{
    sd__trace *tr = &em->trace;
    void *id = sd_map_get(&tr->name_ids, name);
    if (id != NULL) {
        return (int32_t)((uintptr_t)id - 1);
    }
    if (tr->names.len >= INT32_MAX - 1) {
        return -1;
    }
    char *copy = sd_malloc(name.len + 1);
    if (copy == NULL) {
        return -1;
    }
    if (name.len > 0) {
        memcpy(copy, name.ptr, name.len);
    }
    copy[name.len] = '\0';
    if (sd_vec_push(&tr->names, &copy) != SD_OK) {
        sd_free(copy);
        return -1;
    }
    int32_t n = (int32_t)(tr->names.len - 1);
    if (sd_map_put(&tr->name_ids, name, (void *)(uintptr_t)(n + 1)) != SD_OK) {
        tr->names.len--;
        sd_free(copy);
        return -1;
    }
    return n;
}

/* ========================================================================================== */
/* What the engine records (its call sites: em_time.c, em_timer.c, em_bundle.c, em_gbk.c,     */
/* em_source.c, em.c)                                                                         */
/* ========================================================================================== */

static void set_window(sd_em *em, sd_trace_rec *r, const sd__win *w)
{
    r->has_window = true;
    r->window = sd__win_to(em, w);
}

/*
 * Following the wall clock moves the job clock at nearly every engine call (a wall-clock job: a
 * record a millisecond would fill the cap in minutes with nothing else in it). So consecutive
 * WALL moves with nothing recorded between them are one record, its t the latest clock (t2
 * stays where the run of moves started): every other record still carries the clock it was
 * made at.
 */
void sd__trace_clock_moved(sd_em *em, sd_time old, sd_trace_clock_cause cause)
{
    sd__trace *tr = &em->trace;
    if (cause == SD_CLOCK_CAUSE_WALL && !tr->cut && tr->len > 0) {
        sd_trace_rec *last = &tr->recs[tr->len - 1];
        if (last->kind == SD_TRACE_CLOCK && last->cause == SD_CLOCK_CAUSE_WALL) {
            last->clock = last->t = trace_clock(em, em->clock_now);
            last->wall = trace_wall(em);
            return;
        }
    }
    sd_trace_rec *r = sd__trace_slot(em, SD_TRACE_CLOCK, (int)cause, -1);
    if (r != NULL) {
        r->t = r->clock;
        r->t2 = trace_clock(em, old);
    }
}

void sd__trace_wm(sd_em *em, const sd__stage *st, sd_trace_kind kind, sd_time now, sd_time old)
{
    sd_trace_rec *r = sd__trace_slot(em, kind, 0, (int32_t)st->index);
    if (r != NULL) {
        r->t = now;
        r->t2 = old;
    }
}

void sd__trace_hold(sd_em *em, sd__stage *st, sd_time now, sd_trace_hold source)
{
    sd_time old = st->trace_hold;
    st->trace_hold = now;
    sd_trace_rec *r = sd__trace_slot(em, SD_TRACE_HOLD, (int)source, (int32_t)st->index);
    if (r != NULL) {
        r->t = now;
        r->t2 = old;
    }
}

void sd__trace_timer(sd_em *em, const sd__stage *st, sd_trace_kind kind, const sd__timer *t)
{
    const sd__family *f = &st->families[t->family];
    sd_trace_rec *r = sd__trace_slot(em, kind, f->processing_time ? 1 : 0, (int32_t)st->index);
    if (r != NULL) {
        r->name = f->trace_name;
        set_window(em, r, &t->win);
        r->key = sd_hash_bytes(sd_bytes_make(t->key, t->key_len));
        r->t = f->processing_time ? trace_clock(em, t->fire) : t->fire;
        r->t2 = t->hold;
    }
}

void sd__trace_pane(sd_em *em,
                    const sd__stage *st,
                    const sd__win *w,
                    uint64_t key,
                    const sd_pane *pane,
                    int64_t count,
                    sd_time ts)
{
    sd_trace_rec *r = sd__trace_slot(em, SD_TRACE_PANE, pane->timing, (int32_t)st->index);
    if (r != NULL) {
        r->pcoll = st->n_outputs > 0 ? (int32_t)st->outputs[0] : -1;
        set_window(em, r, w);
        r->key = key;
        r->index = pane->index;
        r->count = count;
        r->t = ts;
    }
}

void sd__trace_source(sd_em *em, int32_t stage, int32_t pcoll, int cause, int64_t count, sd_time t)
{
    sd_trace_rec *r = sd__trace_slot(em, SD_TRACE_TESTSTREAM, cause, stage);
    if (r != NULL) {
        r->pcoll = pcoll;
        r->index = (int64_t)em->source_steps - 1;
        r->count = count;
        r->t = t;
    }
}

void sd__trace_late(sd_em *em,
                    const sd__stage *st,
                    const sd__pcoll *pc,
                    const sd__incoming *in,
                    sd_late_reason why,
                    bool routed)
{
    sd_trace_rec *r = sd__trace_slot(em, SD_TRACE_LATE, (int)why, (int32_t)st->index);
    if (r != NULL) {
        r->pcoll = (int32_t)pc->index;
        set_window(em, r, &in->win);
        r->t = in->ts;
        r->t2 = pc->wm;
        r->index = 1;
        r->count = routed ? 1 : 0;
    }
}

void sd__trace_late_values(sd_em *em,
                           const sd__stage *st,
                           const sd__pcoll *pc,
                           const sd__win *w,
                           sd_time ts,
                           uint64_t n)
{
    sd_trace_rec *r = sd__trace_slot(em, SD_TRACE_LATE, SD_LATE_WINDOW_CLOSED, (int32_t)st->index);
    if (r != NULL) {
        r->pcoll = (int32_t)pc->index;
        set_window(em, r, w);
        r->t = ts;
        r->t2 = pc->wm;
        r->index = (int64_t)n;
    }
}

/* ========================================================================================== */
/* Reading                                                                                    */
/* ========================================================================================== */

size_t sd_em_trace_len(const sd_em *em)
{
    return em->trace.len;
}

const sd_trace_rec *sd_em_trace_at(const sd_em *em, size_t i)
{
    return i < em->trace.len ? &em->trace.recs[i] : NULL;
}

bool sd_em_trace_was_cut(const sd_em *em)
{
    return em->trace.cut;
}

const char *sd_em_trace_name(const sd_em *em, int32_t name)
{
    if (name < 0 || (size_t)name >= em->trace.names.len) {
        return NULL;
    }
    return *SD_VEC_AT(&em->trace.names, char *, (size_t)name);
}

const char *sd_trace_kind_name(sd_trace_kind k)
{
    static const char *const names[SD_TRACE_KINDS] = {
        [SD_TRACE_CLOCK] = "clock",
        [SD_TRACE_WM_IN] = "wm_in",
        [SD_TRACE_WM_OUT] = "wm_out",
        [SD_TRACE_HOLD] = "hold",
        [SD_TRACE_TIMER_SET] = "timer_set",
        [SD_TRACE_TIMER_CLEAR] = "timer_clear",
        [SD_TRACE_TIMER_FIRE] = "timer_fire",
        [SD_TRACE_PANE] = "pane",
        [SD_TRACE_TESTSTREAM] = "teststream",
        [SD_TRACE_LATE] = "late",
        [SD_TRACE_CUT] = "cut",
        [SD_TRACE_PAUSE] = "pause",
        [SD_TRACE_STEP] = "step",
    };
    return (unsigned)k < SD_TRACE_KINDS ? names[k] : "?";
}

static const char *pick(const char *const *names, int n, int i)
{
    return i >= 0 && i < n ? names[i] : "?";
}

const char *sd_trace_cause_name(sd_trace_kind k, int cause)
{
    static const char *const clock[SD_CLOCK_CAUSES] = { "teststream", "timer", "idle", "wall",
                                                        "step" };
    static const char *const hold[SD_HOLD_SOURCES] = {
        [SD_HOLD_NONE] = "none",         [SD_HOLD_PENDING] = "pending",
        [SD_HOLD_SPILL] = "spill",       [SD_HOLD_IN_FLIGHT] = "in_flight",
        [SD_HOLD_PARKED] = "parked",     [SD_HOLD_GBK] = "gbk",
        [SD_HOLD_CUT_TAIL] = "cut_tail", [SD_HOLD_TIMER] = "timer",
        [SD_HOLD_RESIDUAL] = "residual", [SD_HOLD_SORTED] = "sorted",
    };
    static const char *const domain[] = { "event_time", "processing_time" };
    static const char *const timing[] = { "early", "on_time", "late", "unknown" };
    static const char *const event[] = { "elements", "watermark", "processing_time" };
    static const char *const pause[SD_PAUSE_CAUSES] = {
        [SD_PAUSE_CAUSE_START] = "start",         [SD_PAUSE_CAUSE_BY_HAND] = "by_hand",
        [SD_PAUSE_CAUSE_AT_TIME] = "at_time",     [SD_PAUSE_CAUSE_BEFORE_EVENT] = "before_event",
        [SD_PAUSE_CAUSE_STEP_DONE] = "step_done",
    };
    static const char *const step[SD_STEP_CAUSES] = {
        [SD_STEP_CAUSE_EVENTS] = "events",
        [SD_STEP_CAUSE_FOR] = "for",
        [SD_STEP_CAUSE_WATERMARK] = "watermark",
        [SD_STEP_CAUSE_RESUME] = "resume",
    };
    switch (k) {
    case SD_TRACE_CLOCK:
        return pick(clock, SD_CLOCK_CAUSES, cause);
    case SD_TRACE_HOLD:
        return pick(hold, SD_HOLD_SOURCES, cause);
    case SD_TRACE_TIMER_SET:
    case SD_TRACE_TIMER_CLEAR:
    case SD_TRACE_TIMER_FIRE:
        return pick(domain, 2, cause);
    case SD_TRACE_PANE:
        return pick(timing, 4, cause);
    case SD_TRACE_TESTSTREAM:
        return pick(event, 3, cause);
    case SD_TRACE_PAUSE:
        return pick(pause, SD_PAUSE_CAUSES, cause);
    case SD_TRACE_STEP:
        return pick(step, SD_STEP_CAUSES, cause);
    case SD_TRACE_LATE:
        return cause >= SD_LATE_WINDOW_EXPIRED && cause <= SD_LATE_SORTED_EXPIRED
                   ? sd_late_reason_name((sd_late_reason)cause)
                   : "?";
    case SD_TRACE_WM_IN:
    case SD_TRACE_WM_OUT:
    case SD_TRACE_CUT:
        return "";
    case SD_TRACE_KINDS:
        break;
    }
    return "?";
}
