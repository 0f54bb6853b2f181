/*
 * Sundial: the engine's time trace store (em_trace.h): an array of records that grows up to
 * its cap, the interned names records refer to, and the names of kinds and causes.
 *
 * Recording never fails a job: the store keeps one spare slot, so when the cap is reached, or
 * memory for more records cannot be had, the spare slot takes the CUT record and recording
 * stops there (the CUT record counts what was left out). The engine's call sites build a record
 * with sd__trace_rec and hand it to sd__trace_add, which numbers it and stamps the clocks.
 */
#include "runner/engine/em_trace.h"

#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

/* Records allocated at first (the store doubles from there up to its cap). */
#define TRACE_FIRST_ALLOC 64

sd_status sd__trace_init(sd__trace *tr, size_t cap)
{
    memset(tr, 0, sizeof(*tr));
    sd_vec_init(&tr->names, sizeof(char *));
    sd_map_init(&tr->name_ids, NULL);
    tr->cap = cap == 0 ? SD_EM_TRACE_CAP_DEFAULT : SD_MIN(cap, (size_t)SD_EM_TRACE_CAP_MAX);
    tr->alloc = SD_MIN((size_t)TRACE_FIRST_ALLOC, tr->cap);
    tr->recs = sd_calloc(tr->alloc, sizeof(*tr->recs));
    if (tr->recs == NULL) {
        tr->alloc = 0;
        return SD_ENOMEM;
    }
    return SD_OK;
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

/* Room for one record beyond the next (the spare slot for CUT); false when there is none. */
static bool room_for_two(sd__trace *tr)
{
    if (tr->len + 2 <= tr->alloc) {
        return true;
    }
    if (tr->len + 2 > tr->cap) {
        return false;
    }
    size_t n = SD_MIN(tr->alloc * 2, tr->cap);
    sd_trace_rec *recs = sd_realloc(tr->recs, n * sizeof(*recs));
    if (recs == NULL) {
        return false;
    }
    tr->recs = recs;
    tr->alloc = n;
    return true;
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

void sd__trace_add(sd_em *em, sd_trace_rec *r)
{
    sd__trace *tr = &em->trace;
    if (tr->cut) {
        tr->recs[tr->len - 1].index++;
        return;
    }
    if (tr->alloc == 0) {
        return; /* never initialised (sd_em_create failed half-way) */
    }
    r->seq = tr->len;
    r->clock = trace_clock(em, em->clock_now);
    /* An injected wall clock may tick per call (tests): the trace reads the time the engine
     * last read rather than perturb it; the real wall clock is read now. */
    r->wall = em->cfg.wall_now != NULL ? em->wall_last : sd_wall_now_ms();
    if (room_for_two(tr)) {
        tr->recs[tr->len++] = *r;
        return;
    }
    /* The spare slot: always there while the trace is not cut (alloc >= len + 1). */
    sd_trace_rec *cut = &tr->recs[tr->len++];
    *cut = sd__trace_rec(SD_TRACE_CUT, 0, -1);
    cut->seq = r->seq;
    cut->clock = r->clock;
    cut->wall = r->wall;
    cut->count = (int64_t)r->seq;
    cut->index = 1; /* r itself */
    tr->cut = true;
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
