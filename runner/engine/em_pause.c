/*
 * Sundial: element manager — the pause gate, steps, the live source's readiness, and reads of
 * a resting job's state (em_pause.h).
 *
 * The scheduler (em.c, sd_em_next_bundle) takes time steps only at quiescence and asks
 * sd__em_gate before each: a source step (its clock move, when the driver can tell it, from
 * source.peek_clock) or a clock jump to time t. An open gate says yes. A closed one says yes
 * while the step under way has allowance left, otherwise no: the scheduler then returns with
 * nothing (sd_em_waiting), the job rests, and the executor waits for the next step. The gate
 * never moves the clock and never reorders steps, which is what makes a stepped run the
 * unpaused run (em_pause.h).
 *
 * The tap keeps what sd__em_deliver delivers into each PCollection (bounded per PCollection),
 * so a test can read "what reached this PCollection so far" while the job rests.
 *
 * Trade-off: the state is allocated on first use (sd__em_pause_state), so jobs that never
 * pause carry one NULL pointer and the scheduler one branch per time step.
 */
#include "runner/engine/em_pause.h"

#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

typedef enum step_kind { STEP_NONE = 0, STEP_EVENTS, STEP_UNTIL, STEP_WM } step_kind;

typedef struct sd__pause {
    bool closed;
    bool at_rest;
    sd_em_pause_reason reason;
    sd_time at;        /* pause before the clock passes it (SD_TIME_MAX: none) */
    sd_time at_hit;    /* the pause time that closed the gate (for the trace) */
    bool before_event; /* pause before the next source step */
    bool let_one;      /* resumed at a before-event pause: that event goes first */
    step_kind step;
    uint64_t events;    /* STEP_EVENTS: left */
    sd_time until;      /* STEP_UNTIL: the step's clock */
    sd_time last_until; /* the end of the last duration step (SD_TIME_MIN: none) */
    size_t wm_pcoll;    /* STEP_WM */
    sd_time wm;
    uint64_t steps_taken;
    uint64_t time_steps;
} sd__pause;

/* One tapped value: its bytes at [off, off + len) of the PCollection's buffer. */
typedef struct tap_rec {
    sd_time ts;
    sd__win win;
    size_t off, len;
} tap_rec;

typedef struct tap_pc {
    sd_vec recs; /* tap_rec */
    sd_buf bytes;
    uint64_t dropped;
} tap_pc;

struct sd__tap {
    size_t max;
    size_t n; /* PCollections */
    tap_pc *pcs;
};

static const char *wall_refusal =
    "the job runs on the wall clock (sundial_clock=wall): its processing time is real time and "
    "cannot be held, so it cannot pause or step; run it on the synthetic clock (the default in "
    "test mode) to pause it";

const char *sd_em_pause_reason_name(sd_em_pause_reason r)
{
    switch (r) {
    case SD_PAUSE_NONE:
        return "running";
    case SD_PAUSE_BY_HAND:
        return "paused";
    case SD_PAUSE_AT_TIME:
        return "pause at time";
    case SD_PAUSE_BEFORE_EVENT:
        return "before event";
    case SD_PAUSE_STEP_DONE:
        return "step done";
    case SD_PAUSE_START:
        return "paused from the start";
    }
    return "?";
}

static sd_status pause_state(sd_em *em, sd__pause **out, sd_err *err)
{
    if (em == NULL) {
        return sd_err_set(err, SD_EINVAL, "pause: no engine");
    }
    if (em->cfg.clock == SD_CLOCK_WALL) {
        return sd_err_set(err, SD_EINVAL, "%s", wall_refusal);
    }
    if (em->pause == NULL) {
        sd__pause *p = sd_calloc(1, sizeof(*p));
        if (p == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        p->at = SD_TIME_MAX;
        p->last_until = SD_TIME_MIN;
        em->pause = p;
    }
    *out = em->pause;
    return SD_OK;
}

void sd__em_pause_destroy(sd_em *em)
{
    sd_free(em->pause);
    em->pause = NULL;
    if (em->tap != NULL) {
        for (size_t i = 0; i < em->tap->n; i++) {
            sd_vec_deinit(&em->tap->pcs[i].recs);
            sd_buf_deinit(&em->tap->pcs[i].bytes);
        }
        sd_free(em->tap->pcs);
        sd_free(em->tap);
        em->tap = NULL;
    }
}

/* ================================================================ the trace */

/* The gate stopped the job before a time step (source: a TestStream event) to target. */
static void trace_rest(sd_em *em, const sd__pause *p, bool source, sd_time target)
{
    static const sd_trace_pause_cause causes[] = {
        [SD_PAUSE_NONE] = SD_PAUSE_CAUSE_BY_HAND, /* cannot be: the gate is closed */
        [SD_PAUSE_BY_HAND] = SD_PAUSE_CAUSE_BY_HAND,
        [SD_PAUSE_AT_TIME] = SD_PAUSE_CAUSE_AT_TIME,
        [SD_PAUSE_BEFORE_EVENT] = SD_PAUSE_CAUSE_BEFORE_EVENT,
        [SD_PAUSE_STEP_DONE] = SD_PAUSE_CAUSE_STEP_DONE,
        [SD_PAUSE_START] = SD_PAUSE_CAUSE_START,
    };
    sd_trace_rec *r = sd__trace_slot(em, SD_TRACE_PAUSE, (int)causes[p->reason], -1);
    if (r == NULL) {
        return;
    }
    r->t = target >= SD_TIME_MAX ? SD_TIME_MAX : sd__trace_clock(em, target);
    r->t2 = p->reason == SD_PAUSE_AT_TIME ? sd__trace_clock(em, p->at_hit) : SD_TIME_MAX;
    r->count = source ? 1 : 0;
    r->index = source ? (int64_t)em->source_steps : 0;
}

/* A step was asked (or the gate opened): the trace's STEP record, its fields to fill. */
static sd_trace_rec *trace_step(sd_em *em, sd_trace_step_cause cause)
{
    return sd__trace_slot(em, SD_TRACE_STEP, (int)cause, -1);
}

static sd_status close_gate(sd_em *em, sd_em_pause_reason why, sd_err *err)
{
    sd__pause *p = NULL;
    sd_status rc = pause_state(em, &p, err);
    if (rc == SD_OK && !p->closed) {
        p->closed = true;
        p->at_rest = false;
        p->reason = why;
        p->step = STEP_NONE;
    }
    return rc;
}

sd_status sd_em_pause(sd_em *em, sd_err *err)
{
    return close_gate(em, SD_PAUSE_BY_HAND, err);
}

sd_status sd_em_pause_start(sd_em *em, sd_err *err)
{
    return close_gate(em, SD_PAUSE_START, err);
}

sd_status sd_em_pause_at(sd_em *em, sd_time clock_ms, sd_err *err)
{
    sd__pause *p = NULL;
    sd_status rc = pause_state(em, &p, err);
    if (rc == SD_OK) {
        p->at = clock_ms;
    }
    return rc;
}

sd_status sd_em_pause_before_event(sd_em *em, sd_err *err)
{
    sd__pause *p = NULL;
    sd_status rc = pause_state(em, &p, err);
    if (rc == SD_OK) {
        p->before_event = true;
    }
    return rc;
}

/* The closed gate for a new step. */
static sd_status stepping(sd_em *em, sd__pause **out, sd_err *err)
{
    sd_status rc = pause_state(em, out, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (!(*out)->closed) {
        return sd_err_set(err, SD_ESTATE, "step: the job is not paused (pause it first)");
    }
    (*out)->at_rest = false;
    return SD_OK;
}

sd_status sd_em_step_events(sd_em *em, uint64_t n, sd_err *err)
{
    sd__pause *p = NULL;
    if (n == 0) {
        return sd_err_set(err, SD_EINVAL, "step: the number of events must be at least 1");
    }
    sd_status rc = stepping(em, &p, err);
    if (rc == SD_OK) {
        p->step = STEP_EVENTS;
        p->events = n;
        sd_trace_rec *r = trace_step(em, SD_STEP_CAUSE_EVENTS);
        if (r != NULL) {
            r->count = n > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n;
        }
    }
    return rc;
}

sd_status sd_em_step_for(sd_em *em, int64_t ms, sd_err *err)
{
    sd__pause *p = NULL;
    if (ms < 0) {
        return sd_err_set(err, SD_EINVAL, "step: a duration of %lld ms is negative", (long long)ms);
    }
    sd_status rc = stepping(em, &p, err);
    if (rc == SD_OK) {
        sd_time from = SD_MAX(em->clock_now, p->last_until);
        p->step = STEP_UNTIL;
        p->until = sd_time_add(from, ms);
        p->last_until = p->until;
        sd_trace_rec *r = trace_step(em, SD_STEP_CAUSE_FOR);
        if (r != NULL) {
            r->t = p->until >= SD_TIME_MAX ? SD_TIME_MAX : sd__trace_clock(em, p->until);
            r->t2 = sd__trace_clock(em, from);
            r->count = ms;
        }
    }
    return rc;
}

sd_status sd_em_step_to_watermark(sd_em *em, const char *pcoll, sd_time wm, sd_err *err)
{
    sd__pause *p = NULL;
    const sd__pcoll *pc = em != NULL ? sd__em_find_pcoll(em, pcoll) : NULL;
    if (pc == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "step: no PCollection \"%s\"",
                          pcoll != NULL ? pcoll : "(null)");
    }
    sd_status rc = stepping(em, &p, err);
    if (rc == SD_OK) {
        p->step = STEP_WM;
        p->wm_pcoll = pc->index;
        p->wm = wm;
        sd_trace_rec *r = trace_step(em, SD_STEP_CAUSE_WATERMARK);
        if (r != NULL) {
            r->pcoll = (int32_t)pc->index;
            r->t = wm;
            r->t2 = pc->wm;
        }
    }
    return rc;
}

void sd_em_resume(sd_em *em)
{
    if (em == NULL || em->pause == NULL) {
        return;
    }
    sd__pause *p = em->pause;
    if (p->closed || p->at != SD_TIME_MAX || p->before_event) {
        (void)trace_step(em, SD_STEP_CAUSE_RESUME); /* no fields: the gate opens */
    }
    p->let_one = p->closed && p->at_rest && p->reason == SD_PAUSE_BEFORE_EVENT;
    p->closed = false;
    p->at_rest = false;
    p->reason = SD_PAUSE_NONE;
    p->step = STEP_NONE;
    p->at = SD_TIME_MAX;
    p->before_event = false;
}

void sd_em_pause_info_get(const sd_em *em, sd_em_pause_info *out)
{
    memset(out, 0, sizeof(*out));
    out->pause_at = SD_TIME_MAX;
    out->step_clock = SD_TIME_MIN;
    if (em == NULL) {
        return;
    }
    out->source_waiting = em->source_waiting;
    const sd__pause *p = em->pause;
    if (p == NULL) {
        return;
    }
    out->closed = p->closed;
    out->at_rest = p->closed && p->at_rest;
    out->reason = p->closed ? p->reason : SD_PAUSE_NONE;
    out->stepping = p->closed && p->step != STEP_NONE;
    out->step_clock = p->last_until;
    out->pause_at = p->at;
    out->before_event = p->before_event;
    out->steps_taken = p->steps_taken;
    out->time_steps = p->time_steps;
}

bool sd_em_waiting(const sd_em *em)
{
    return em != NULL && em->waiting;
}

/* The allowance of the step under way covers a time step to target. */
static bool allowed(sd_em *em, sd__pause *p, sd_time target)
{
    switch (p->step) {
    case STEP_NONE:
        return false;
    case STEP_EVENTS:
        if (p->events > 0) {
            p->events--; /* at 0 the step stays, so the next block says it is done */
            return true;
        }
        return false;
    case STEP_UNTIL:
        return target <= p->until;
    case STEP_WM:
        return sd__em_pcoll_at(em, p->wm_pcoll)->wm < p->wm;
    }
    return false;
}

bool sd__em_gate(sd_em *em, bool source, sd_time target)
{
    sd__pause *p = em->pause;
    if (p == NULL) {
        return true;
    }
    bool let_one = p->let_one; /* only for the very next time step */
    p->let_one = false;
    if (!p->closed) {
        if (source && p->before_event && let_one) {
            p->time_steps++; /* the event the job paused before goes now */
            return true;
        }
        if (source && p->before_event) {
            p->before_event = false;
            p->closed = true;
            p->reason = SD_PAUSE_BEFORE_EVENT;
            p->step = STEP_NONE;
        } else if (target > p->at) {
            p->at_hit = p->at;
            p->at = SD_TIME_MAX;
            p->closed = true;
            p->reason = SD_PAUSE_AT_TIME;
            p->step = STEP_NONE;
        } else {
            p->time_steps++;
            return true;
        }
    }
    if (allowed(em, p, target)) {
        p->steps_taken++;
        p->time_steps++;
        return true;
    }
    if (p->step != STEP_NONE) {
        p->step = STEP_NONE;
        p->reason = SD_PAUSE_STEP_DONE;
    }
    if (!p->at_rest) {
        p->at_rest = true;
        trace_rest(em, p, source, target);
    }
    em->waiting = true;
    return false;
}

bool sd__em_pause_lets_real_time_in(const sd_em *em)
{
    const sd__pause *p = em->pause;
    return p == NULL || (!p->closed && p->at == SD_TIME_MAX && !p->before_event);
}

bool sd__em_source_ready(sd_em *em)
{
    const sd__pause *p = em->pause;
    if (p != NULL && p->closed && p->step == STEP_NONE) {
        return true; /* the closed gate stops the job here anyway: it rests, not waits */
    }
    bool ready = em->source.ready == NULL || em->source.ready(em->source_ctx);
    em->source_waiting = !ready;
    if (!ready) {
        em->waiting = true;
    }
    return ready;
}

sd_time sd__em_source_target(const sd_em *em)
{
    int64_t ms = 0;
    if (em->source.peek_clock == NULL || !em->source.peek_clock(em->source_ctx, &ms)) {
        return em->clock_now;
    }
    return ms >= SD_TIME_MAX ? SD_TIME_MAX : sd_time_add(em->clock_now, ms);
}

/* ================================================================ inspection */

static int timer_cmp(const void *a, const void *b)
{
    const sd__timer *x = *(const sd__timer *const *)a, *y = *(const sd__timer *const *)b;
    if (x->due != y->due) {
        return x->due < y->due ? -1 : 1;
    }
    if (x->family != y->family) {
        return x->family < y->family ? -1 : 1;
    }
    size_t n = SD_MIN(x->key_len, y->key_len);
    int c = n > 0 ? memcmp(x->key, y->key, n) : 0;
    if (c != 0 || x->key_len == y->key_len) {
        return c;
    }
    return x->key_len < y->key_len ? -1 : 1;
}

sd_status
sd_em_timers_list(const sd_em *em, size_t stage, sd_em_timer_fn fn, void *ctx, sd_err *err)
{
    if (em == NULL || stage >= em->stages.len) {
        return sd_err_set(err, SD_ENOTFOUND, "timers: no stage %zu", stage);
    }
    const sd__stage *st = sd__em_stage_at(em, stage);
    size_t n = st->timers.len;
    sd__timer **all = sd_calloc(n + 1, sizeof(*all));
    if (all == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < st->timers.cap && k < n; i++) {
        if (st->timers.slots[i].t != NULL) {
            all[k++] = st->timers.slots[i].t;
        }
    }
    qsort(all, k, sizeof(*all), timer_cmp);
    for (size_t i = 0; i < k; i++) {
        const sd__timer *t = all[i];
        const sd__family *f = &st->families[t->family];
        sd_em_timer_view v = { .transform_id = f->transform_id,
                               .family_id = f->family_id,
                               .processing_time = f->processing_time,
                               .key = sd_bytes_make(t->key, t->key_len),
                               .tag = sd__timer_tag(t),
                               .window = sd__win_to(em, &t->win),
                               .fire = t->fire,
                               .hold = t->hold };
        fn(ctx, &v);
    }
    sd_free(all);
    return SD_OK;
}

sd_status sd_em_state_list(const sd_em *em,
                           size_t stage,
                           sd_bytes key,
                           sd_em_state_fn fn,
                           void *ctx,
                           sd_err *err)
{
    if (em == NULL || stage >= em->stages.len) {
        return sd_err_set(err, SD_ENOTFOUND, "state: no stage %zu", stage);
    }
    const sd__stage *st = sd__em_stage_at(em, stage);
    size_t n = 0;
    sd_bytes *ids = sd_map_sorted_keys(&st->state, &n);
    if (ids == NULL && n > 0) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const sd__state_cell *cell = sd_map_get(&st->state, ids[i]);
        sd_reader r = sd_reader_make(ids[i]);
        sd_em_state_view v = { 0 };
        if (sd_reader_lp(&r, &v.transform_id) != SD_OK || sd_reader_lp(&r, &v.state_id) != SD_OK ||
            sd_reader_lp(&r, &v.window) != SD_OK) {
            continue; /* cannot happen: the engine built the identity */
        }
        v.key = sd__state_cell_key(ids[i]);
        if (key.ptr != NULL &&
            (v.key.len != key.len || (key.len > 0 && memcmp(v.key.ptr, key.ptr, key.len) != 0))) {
            continue;
        }
        v.bag = sd_buf_bytes(&cell->bag);
        v.map_keys = sd_map_len(&cell->mm);
        v.ordered = cell->ol.len - cell->ol.head;
        fn(ctx, &v);
    }
    sd_free(ids);
    return SD_OK;
}

sd_status sd_em_tap_all(sd_em *em, size_t max_per_pcoll, sd_err *err)
{
    if (em->tap != NULL) {
        em->tap->max = max_per_pcoll;
        return SD_OK;
    }
    struct sd__tap *t = sd_calloc(1, sizeof(*t));
    if (t == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    t->max = max_per_pcoll;
    em->tap = t;
    return SD_OK;
}

sd_status sd__em_tap_note(sd_em *em, const sd__pcoll *pc, const sd__incoming *in)
{
    struct sd__tap *t = em->tap;
    if (pc->index >= t->n) {
        size_t n = em->pcolls.len;
        tap_pc *pcs = sd_realloc(t->pcs, (n + 1) * sizeof(*pcs));
        if (pcs == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = t->n; i < n; i++) {
            sd_vec_init(&pcs[i].recs, sizeof(tap_rec));
            sd_buf_init(&pcs[i].bytes, 0);
            pcs[i].dropped = 0;
        }
        t->pcs = pcs;
        t->n = n;
    }
    tap_pc *tp = &t->pcs[pc->index];
    if (tp->recs.len >= t->max) {
        tp->dropped++;
        return SD_OK;
    }
    tap_rec rec = { .ts = in->ts, .win = in->win, .off = tp->bytes.len, .len = in->elem.len };
    sd_status rc = sd_buf_append_bytes(&tp->bytes, in->elem);
    if (rc == SD_OK) {
        rc = sd_vec_push(&tp->recs, &rec);
    }
    return rc;
}

sd_status sd_em_tapped(const sd_em *em,
                       const char *pcoll,
                       sd_em_tapped_fn fn,
                       void *ctx,
                       uint64_t *dropped,
                       sd_err *err)
{
    const sd__pcoll *pc = em != NULL ? sd__em_find_pcoll(em, pcoll) : NULL;
    if (dropped != NULL) {
        *dropped = 0;
    }
    if (pc == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "elements: no PCollection \"%s\"",
                          pcoll != NULL ? pcoll : "(null)");
    }
    if (em->tap == NULL) {
        return sd_err_set(err, SD_ESTATE,
                          "elements: the job keeps no record of delivered elements (start it "
                          "paused, or with a pause option, to keep one)");
    }
    if (pc->index >= em->tap->n) {
        return SD_OK; /* nothing delivered yet */
    }
    const tap_pc *tp = &em->tap->pcs[pc->index];
    for (size_t i = 0; i < tp->recs.len; i++) {
        const tap_rec *rec = SD_VEC_AT(&tp->recs, tap_rec, i);
        const uint8_t *at = tp->bytes.data != NULL ? tp->bytes.data + rec->off : NULL;
        sd_em_tapped_view v = { .element = sd_bytes_make(at, rec->len),
                                .timestamp = rec->ts,
                                .window = sd__win_to(em, &rec->win) };
        fn(ctx, &v);
    }
    if (dropped != NULL) {
        *dropped = tp->dropped;
    }
    return SD_OK;
}

bool sd_em_stage_holds(const sd_em *em, size_t i, sd_time at[SD_HOLD_SOURCES])
{
    if (em == NULL || i >= em->stages.len) {
        return false;
    }
    sd__holds h;
    sd__holds_read(em, sd__em_stage_at(em, i), &h);
    for (size_t s = 0; s < SD_HOLD_SOURCES; s++) {
        at[s] = h.at[s];
    }
    return true;
}

const sd_coder *sd_em_pcollection_elem_coder(const sd_em *em, const char *id)
{
    const sd__pcoll *pc = em != NULL ? sd__em_find_pcoll(em, id) : NULL;
    return pc != NULL ? pc->elem_coder : NULL;
}

const char *sd_em_stage_input(const sd_em *em, size_t i)
{
    if (em == NULL || i >= em->stages.len) {
        return NULL;
    }
    const sd__stage *st = sd__em_stage_at(em, i);
    return st->n_inputs > 0 ? sd__em_pcoll_at(em, st->inputs[0])->id : NULL;
}
