/*
 * Sundial: trigger state machines for the runner-side GroupByKey.
 *
 * A windowing strategy's trigger tree (sd_trigger, from the planner) is compiled once per
 * PCollection into a flat array of nodes in preorder (sd__trig); every GBK group (one key in
 * one window) carries one small state record per node (sd__trig_state). The GBK drives the
 * machine with three calls, following Beam's trigger state machines:
 *
 *     element arrives        sd__trig_on_element(root)     counts, processing-time deadlines
 *     each scheduling pass   sd__trig_should_fire(root)    watermark / clock / counts reached?
 *                            sd__trig_on_fire(root)         advance: finish, reset, next phase
 *
 * A tree that counts elements (per_element: AFTER_COUNT or ALWAYS somewhere) is also asked
 * after each arriving element in a streaming pipeline, so AfterCount(3) closes its pane with
 * exactly three values however many arrived in one pass (Prism's streaming mode does the same;
 * em_gbk.c).
 *
 * Node semantics (a finished node never fires again; only active children see elements):
 *
 *     NEVER                  never fires (data leaves only in the final pane at expiry)
 *     ALWAYS                 fires whenever an element arrived since its last firing
 *     AFTER_COUNT(n)         fires once n elements arrived; then finished
 *     AFTER_PROCESSING_TIME  fires once the job clock reaches first arrival + delay; finished
 *     AFTER_SYNCHRONIZED_PROCESSING_TIME
 *                            fires once the job clock is past the first arrival (a deadline
 *                            of arrival + 1 ms); finished. Beam's state machine waits until
 *                            the processing time every upstream worker reached is strictly
 *                            after the first element's; with one clock per job that is the
 *                            job clock. In test mode the clock moves only when nothing else
 *                            can happen (or on a TestStream's AdvanceProcessingTime), so a
 *                            watermark that passes the window's end in the meantime still
 *                            wins: the pane goes out on time, as on Beam's DirectRunner.
 *     AFTER_END_OF_WINDOW    early phase: fires when the early child fires (which then
 *                            restarts) or, on time, when the watermark passes the window's
 *                            max timestamp; then the late phase: fires whenever the late
 *                            child fires (which restarts); finished after on time if no late
 *     AFTER_ALL(subs)        fires once every child fired (or is finished); then finished
 *     AFTER_ANY(subs)        fires once any child fires; then finished
 *     AFTER_EACH(subs)       fires when the current child fires; moves on when it finishes
 *     REPEAT(sub)            fires when the child fires; restarts it when it finishes
 *     OR_FINALLY(main, fin)  fires when either fires; finished when fin fires or main finishes
 *
 * Merging (session windows). When an element joins sessions into one, their states fold node
 * by node (sd__trig_merge) and are then settled for the merged window (sd__trig_merge_end),
 * following Beam's merge rules: a node finished in any merged session is finished (a count
 * or delay that fired would have fired for the union too); counts add up; processing-time
 * deadlines take the earliest; AFTER_END_OF_WINDOW stays in its late phase only if every
 * part was late and the watermark has passed the merged window's end — otherwise it is early
 * again with a fresh late child; AFTER_EACH resumes at its first unfinished child. The
 * element's own new window brings no state (it is an arrival into the merged session).
 *
 * The machine only decides *when*; the GBK decides *what*: a firing with no new values
 * still advances the machine but emits no pane (Beam's FIRE_IF_NON_EMPTY), so a stale
 * processing-time deadline can never wedge the synthetic clock.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em_int.h"

#define TRIG_MAX_NODES 1024
#define TRIG_MAX_DEPTH 64

typedef struct compiler {
    sd_vec nodes; /* sd__trig */
    sd_vec kids;  /* uint32_t */
    sd_err *err;
} compiler;

static sd_status compile_node(compiler *c, const sd_trigger *t, int depth, uint32_t *out)
{
    sd__trig *n;
    sd_status rc;
    if (t == NULL) {
        return sd_err_set(c->err, SD_EINVAL, "trigger: missing subtrigger");
    }
    if (depth > TRIG_MAX_DEPTH || c->nodes.len >= TRIG_MAX_NODES) {
        return sd_err_set(c->err, SD_EINVAL, "trigger: tree too deep or too large");
    }
    size_t need = 0, max = 0;
    switch (t->kind) {
    case SD_TRIGGER_DEFAULT:
    case SD_TRIGGER_NEVER:
    case SD_TRIGGER_ALWAYS:
    case SD_TRIGGER_AFTER_END_OF_WINDOW:
    case SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        break;
    case SD_TRIGGER_AFTER_COUNT:
        if (t->count < 1) {
            return sd_err_set(c->err, SD_EINVAL, "trigger: element count must be >= 1, got %lld",
                              (long long)t->count);
        }
        break;
    case SD_TRIGGER_AFTER_PROCESSING_TIME:
        if (t->delay_ms < 0) {
            return sd_err_set(c->err, SD_EINVAL, "trigger: processing-time delay must be >= 0");
        }
        if (t->n_time_transforms > SD_TRIGGER_MAX_TIME_TRANSFORMS) {
            return sd_err_set(c->err, SD_EINVAL,
                              "trigger: at most %d processing-time transforms, got %zu",
                              SD_TRIGGER_MAX_TIME_TRANSFORMS, t->n_time_transforms);
        }
        for (size_t k = 0; k < t->n_time_transforms; k++) {
            const sd_time_transform *x = &t->time_transforms[k];
            if (x->align ? x->period_ms <= 0 : x->delay_ms < 0) {
                return sd_err_set(c->err, SD_EINVAL, "trigger: processing-time transform %zu: %s",
                                  k,
                                  x->align ? "alignment period must be > 0" : "delay must be >= 0");
            }
        }
        break;
    case SD_TRIGGER_AFTER_ALL:
    case SD_TRIGGER_AFTER_ANY:
    case SD_TRIGGER_AFTER_EACH:
        need = 1;
        max = SIZE_MAX;
        break;
    case SD_TRIGGER_REPEAT:
        need = max = 1;
        break;
    case SD_TRIGGER_OR_FINALLY:
        need = max = 2;
        break;
    default:
        return sd_err_set(c->err, SD_EINVAL, "trigger: unknown kind %d", (int)t->kind);
    }
    if (t->n_subs < need || t->n_subs > max) {
        return sd_err_set(c->err, SD_EINVAL, "trigger kind %d: expected %zu subtriggers, got %zu",
                          (int)t->kind, need, t->n_subs);
    }
    uint32_t idx = (uint32_t)c->nodes.len;
    rc = sd_vec_push_zero(&c->nodes, (void **)&n);
    if (rc != SD_OK) {
        return rc;
    }
    n->kind = t->kind;
    n->count = t->count;
    n->delay_ms = t->delay_ms;
    n->n_tt = 0;
    for (size_t k = 0; t->kind == SD_TRIGGER_AFTER_PROCESSING_TIME && k < t->n_time_transforms;
         k++) {
        n->tt[n->n_tt++] = t->time_transforms[k];
    }
    n->early = -1;
    n->late = -1;
    /* Children's indices are reserved first (contiguous), then filled as they compile. */
    uint32_t kid_off = (uint32_t)c->kids.len;
    for (size_t i = 0; i < t->n_subs; i++) {
        uint32_t zero = 0;
        rc = sd_vec_push(&c->kids, &zero);
        if (rc != SD_OK) {
            return rc;
        }
    }
    SD_VEC_AT(&c->nodes, sd__trig, idx)->kid_off = kid_off;
    SD_VEC_AT(&c->nodes, sd__trig, idx)->n_kids = (uint32_t)t->n_subs;
    for (size_t i = 0; i < t->n_subs; i++) {
        uint32_t k;
        rc = compile_node(c, t->subs[i], depth + 1, &k);
        if (rc != SD_OK) {
            return rc;
        }
        *SD_VEC_AT(&c->kids, uint32_t, kid_off + i) = k;
    }
    if (t->kind == SD_TRIGGER_AFTER_END_OF_WINDOW) {
        uint32_t k;
        if (t->early != NULL) {
            rc = compile_node(c, t->early, depth + 1, &k);
            if (rc != SD_OK) {
                return rc;
            }
            SD_VEC_AT(&c->nodes, sd__trig, idx)->early = (int32_t)k;
        }
        if (t->late != NULL) {
            rc = compile_node(c, t->late, depth + 1, &k);
            if (rc != SD_OK) {
                return rc;
            }
            SD_VEC_AT(&c->nodes, sd__trig, idx)->late = (int32_t)k;
        }
    }
    if (t->kind == SD_TRIGGER_DEFAULT) {
        /* Inside a tree, the default trigger is Repeat(AfterEndOfWindow): rewrite it so. */
        sd__trig *d = SD_VEC_AT(&c->nodes, sd__trig, idx);
        d->kind = SD_TRIGGER_REPEAT;
        uint32_t kid = (uint32_t)c->nodes.len;
        sd__trig *eow;
        rc = sd_vec_push_zero(&c->nodes, (void **)&eow);
        if (rc != SD_OK) {
            return rc;
        }
        eow->kind = SD_TRIGGER_AFTER_END_OF_WINDOW;
        eow->early = -1;
        eow->late = -1;
        uint32_t off = (uint32_t)c->kids.len;
        rc = sd_vec_push(&c->kids, &kid);
        if (rc != SD_OK) {
            return rc;
        }
        d = SD_VEC_AT(&c->nodes, sd__trig, idx);
        d->kid_off = off;
        d->n_kids = 1;
    }
    *out = idx;
    return SD_OK;
}

sd_status sd__trig_compile(const sd_trigger *t, sd__trigger **out, sd_err *err)
{
    compiler c = { .err = err };
    uint32_t root;
    *out = NULL;
    if (t == NULL || t->kind == SD_TRIGGER_DEFAULT) {
        return SD_OK;
    }
    sd_vec_init(&c.nodes, sizeof(sd__trig));
    sd_vec_init(&c.kids, sizeof(uint32_t));
    sd_status rc = compile_node(&c, t, 0, &root);
    sd__trigger *tr = NULL;
    if (rc == SD_OK) {
        tr = sd_calloc(1, sizeof(*tr));
        rc = tr == NULL ? SD_ENOMEM : SD_OK;
    }
    if (rc != SD_OK) {
        sd_vec_deinit(&c.nodes);
        sd_vec_deinit(&c.kids);
        return rc;
    }
    tr->nodes = c.nodes.items;
    tr->n_nodes = c.nodes.len;
    tr->kids = c.kids.items;
    tr->n_kids = c.kids.len;
    for (size_t i = 0; i < tr->n_nodes; i++) {
        if (tr->nodes[i].kind == SD_TRIGGER_AFTER_PROCESSING_TIME ||
            tr->nodes[i].kind == SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME) {
            tr->uses_processing_time = true;
        }
        if (tr->nodes[i].kind == SD_TRIGGER_AFTER_COUNT || tr->nodes[i].kind == SD_TRIGGER_ALWAYS) {
            tr->per_element = true;
        }
    }
    *out = tr;
    return SD_OK;
}

void sd__trig_destroy(sd__trigger *t)
{
    if (t != NULL) {
        sd_free(t->nodes);
        sd_free(t->kids);
        sd_free(t);
    }
}

static void reset(const sd__trigger *t, sd__trig_state *s, uint32_t i)
{
    const sd__trig *n = &t->nodes[i];
    s[i] = (sd__trig_state){ .deadline = SD_TIME_MAX };
    for (uint32_t k = 0; k < n->n_kids; k++) {
        reset(t, s, t->kids[n->kid_off + k]);
    }
    if (n->early >= 0) {
        reset(t, s, (uint32_t)n->early);
    }
    if (n->late >= 0) {
        reset(t, s, (uint32_t)n->late);
    }
}

void sd__trig_init_state(const sd__trigger *t, sd__trig_state *s)
{
    reset(t, s, 0);
}

static uint32_t kid(const sd__trigger *t, const sd__trig *n, uint32_t k)
{
    return t->kids[n->kid_off + k];
}

/* a mod p in [0, p), for p > 0 (C's % keeps the sign of a). */
static int64_t residue(int64_t a, int64_t p)
{
    int64_t r = a % p;
    return r < 0 ? r + p : r;
}

/* The first element's processing time through the node's delay and timestamp transforms. */
static sd_time processing_deadline(const sd__trig *n, sd_time clock)
{
    sd_time t = sd_time_add(clock, n->delay_ms);
    for (uint32_t k = 0; k < n->n_tt; k++) {
        const sd_time_transform *x = &n->tt[k];
        if (!x->align) {
            t = sd_time_add(t, x->delay_ms);
            continue;
        }
        /* (t - offset) mod period, without computing t - offset: the offset is a client's
         * int64 and that difference can overflow. Both residues are in [0, period), so their
         * difference cannot. */
        int64_t since = residue(t, x->period_ms) - residue(x->offset_ms, x->period_ms);
        if (since < 0) {
            since += x->period_ms;
        }
        if (since != 0) {
            t = sd_time_add(t, x->period_ms - since);
        }
    }
    return t;
}

static void on_element(const sd__trigger *t, sd__trig_state *s, uint32_t i, sd_time clock)
{
    const sd__trig *n = &t->nodes[i];
    if (s[i].done) {
        return;
    }
    switch (n->kind) {
    case SD_TRIGGER_ALWAYS:
    case SD_TRIGGER_AFTER_COUNT:
        s[i].count++;
        break;
    case SD_TRIGGER_AFTER_PROCESSING_TIME:
        if (s[i].deadline == SD_TIME_MAX) {
            s[i].deadline = processing_deadline(n, clock);
        }
        break;
    case SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        /* Strictly after the arrival (Beam's isAfter): the first clock tick past it. */
        if (s[i].deadline == SD_TIME_MAX) {
            s[i].deadline = sd_time_add(clock, 1);
        }
        break;
    case SD_TRIGGER_AFTER_END_OF_WINDOW: {
        int32_t child = s[i].phase == 0 ? n->early : n->late;
        if (child >= 0) {
            on_element(t, s, (uint32_t)child, clock);
        }
        break;
    }
    case SD_TRIGGER_AFTER_EACH:
        if (s[i].cur < n->n_kids) {
            on_element(t, s, kid(t, n, s[i].cur), clock);
        }
        break;
    case SD_TRIGGER_AFTER_ALL:
    case SD_TRIGGER_AFTER_ANY:
    case SD_TRIGGER_REPEAT:
    case SD_TRIGGER_OR_FINALLY:
        for (uint32_t k = 0; k < n->n_kids; k++) {
            on_element(t, s, kid(t, n, k), clock);
        }
        break;
    default:
        break;
    }
}

void sd__trig_on_element(const sd__trigger *t, sd__trig_state *s, sd_time clock)
{
    on_element(t, s, 0, clock);
}

static bool
should_fire(const sd__trigger *t, const sd__trig_state *s, uint32_t i, const sd__trig_ctx *c)
{
    const sd__trig *n = &t->nodes[i];
    if (s[i].done) {
        return false;
    }
    switch (n->kind) {
    case SD_TRIGGER_ALWAYS:
        return s[i].count >= 1;
    case SD_TRIGGER_AFTER_COUNT:
        return s[i].count >= n->count;
    case SD_TRIGGER_AFTER_PROCESSING_TIME:
    case SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        return s[i].deadline != SD_TIME_MAX && s[i].deadline <= c->clock;
    case SD_TRIGGER_AFTER_END_OF_WINDOW:
        if (s[i].phase == 0) {
            return c->past_end || (n->early >= 0 && should_fire(t, s, (uint32_t)n->early, c));
        }
        return n->late >= 0 && should_fire(t, s, (uint32_t)n->late, c);
    case SD_TRIGGER_AFTER_ALL:
        for (uint32_t k = 0; k < n->n_kids; k++) {
            uint32_t j = kid(t, n, k);
            if (!s[j].done && !should_fire(t, s, j, c)) {
                return false;
            }
        }
        return true;
    case SD_TRIGGER_AFTER_ANY:
        for (uint32_t k = 0; k < n->n_kids; k++) {
            if (should_fire(t, s, kid(t, n, k), c)) {
                return true;
            }
        }
        return false;
    case SD_TRIGGER_AFTER_EACH:
        return s[i].cur < n->n_kids && should_fire(t, s, kid(t, n, s[i].cur), c);
    case SD_TRIGGER_REPEAT:
        return should_fire(t, s, kid(t, n, 0), c);
    case SD_TRIGGER_OR_FINALLY:
        return should_fire(t, s, kid(t, n, 0), c) || should_fire(t, s, kid(t, n, 1), c);
    default:
        return false; /* NEVER */
    }
}

bool sd__trig_should_fire(const sd__trigger *t, const sd__trig_state *s, const sd__trig_ctx *c)
{
    return should_fire(t, s, 0, c);
}

static void on_fire(const sd__trigger *t, sd__trig_state *s, uint32_t i, const sd__trig_ctx *c)
{
    const sd__trig *n = &t->nodes[i];
    switch (n->kind) {
    case SD_TRIGGER_ALWAYS:
        s[i].count = 0;
        break;
    case SD_TRIGGER_AFTER_COUNT:
    case SD_TRIGGER_AFTER_PROCESSING_TIME:
    case SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        s[i].done = true;
        break;
    case SD_TRIGGER_AFTER_END_OF_WINDOW:
        if (s[i].phase == 0) {
            if (c->past_end) {
                s[i].phase = 1;
                if (n->early >= 0) {
                    reset(t, s, (uint32_t)n->early);
                }
                if (n->late < 0) {
                    s[i].done = true;
                }
            } else {
                on_fire(t, s, (uint32_t)n->early, c);
                reset(t, s, (uint32_t)n->early); /* early firings repeat */
            }
        } else {
            on_fire(t, s, (uint32_t)n->late, c);
            reset(t, s, (uint32_t)n->late); /* late firings repeat */
        }
        break;
    case SD_TRIGGER_AFTER_ALL:
    case SD_TRIGGER_AFTER_ANY:
        for (uint32_t k = 0; k < n->n_kids; k++) {
            uint32_t j = kid(t, n, k);
            if (should_fire(t, s, j, c)) {
                on_fire(t, s, j, c);
            }
        }
        s[i].done = true;
        break;
    case SD_TRIGGER_AFTER_EACH: {
        uint32_t j = kid(t, n, s[i].cur);
        on_fire(t, s, j, c);
        if (s[j].done) {
            s[i].cur++;
        }
        if (s[i].cur >= n->n_kids) {
            s[i].done = true;
        }
        break;
    }
    case SD_TRIGGER_REPEAT: {
        uint32_t j = kid(t, n, 0);
        on_fire(t, s, j, c);
        if (s[j].done) {
            reset(t, s, j);
        }
        break;
    }
    case SD_TRIGGER_OR_FINALLY: {
        uint32_t main = kid(t, n, 0), fin = kid(t, n, 1);
        if (should_fire(t, s, fin, c)) {
            on_fire(t, s, fin, c);
            s[i].done = true;
        } else {
            on_fire(t, s, main, c);
            if (s[main].done) {
                s[i].done = true;
            }
        }
        break;
    }
    default:
        break;
    }
}

void sd__trig_on_fire(const sd__trigger *t, sd__trig_state *s, const sd__trig_ctx *c)
{
    on_fire(t, s, 0, c);
}

bool sd__trig_finished(const sd__trig_state *s)
{
    return s[0].done;
}

/* Earliest deadline of an active processing-time node under i (SD_TIME_MAX when none). */
static sd_time next_deadline(const sd__trigger *t, const sd__trig_state *s, uint32_t i)
{
    const sd__trig *n = &t->nodes[i];
    sd_time best = SD_TIME_MAX;
    if (s[i].done) {
        return SD_TIME_MAX;
    }
    switch (n->kind) {
    case SD_TRIGGER_AFTER_PROCESSING_TIME:
    case SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        return s[i].deadline;
    case SD_TRIGGER_AFTER_END_OF_WINDOW: {
        int32_t child = s[i].phase == 0 ? n->early : n->late;
        return child >= 0 ? next_deadline(t, s, (uint32_t)child) : SD_TIME_MAX;
    }
    case SD_TRIGGER_AFTER_EACH:
        return s[i].cur < n->n_kids ? next_deadline(t, s, kid(t, n, s[i].cur)) : SD_TIME_MAX;
    default:
        for (uint32_t k = 0; k < n->n_kids; k++) {
            sd_time d = next_deadline(t, s, kid(t, n, k));
            best = d < best ? d : best;
        }
        return best;
    }
}

sd_time sd__trig_next_deadline(const sd__trigger *t, const sd__trig_state *s)
{
    return next_deadline(t, s, 0);
}

/* ---- merging (session windows) ---------------------------------------------------------- */

void sd__trig_merge(const sd__trigger *t, sd__trig_state *into, const sd__trig_state *from)
{
    for (size_t i = 0; i < t->n_nodes; i++) {
        into[i].done = into[i].done || from[i].done;
        into[i].count += from[i].count;
        into[i].deadline = SD_MIN(into[i].deadline, from[i].deadline);
        into[i].phase = (into[i].phase != 0 && from[i].phase != 0) ? 1 : 0;
    }
}

static void merge_end(const sd__trigger *t, sd__trig_state *s, uint32_t i, bool past_end)
{
    const sd__trig *n = &t->nodes[i];
    switch (n->kind) {
    case SD_TRIGGER_AFTER_END_OF_WINDOW:
        if (s[i].phase != 0 && past_end) {
            /* Late everywhere and the merged window is over: stay late. */
            if (n->early >= 0) {
                reset(t, s, (uint32_t)n->early);
            }
            if (n->late >= 0) {
                merge_end(t, s, (uint32_t)n->late, past_end);
            }
            s[i].done = n->late < 0;
        } else {
            /* Some part was still early, or the merged window ends later: early again. */
            s[i].phase = 0;
            s[i].done = false;
            if (n->early >= 0) {
                merge_end(t, s, (uint32_t)n->early, past_end);
            }
            if (n->late >= 0) {
                reset(t, s, (uint32_t)n->late);
            }
        }
        break;
    case SD_TRIGGER_AFTER_EACH:
        s[i].cur = 0;
        for (uint32_t k = 0; k < n->n_kids; k++) {
            uint32_t j = kid(t, n, k);
            merge_end(t, s, j, past_end);
            if (s[j].done && s[i].cur == k) {
                s[i].cur = k + 1;
            }
        }
        s[i].done = s[i].done || s[i].cur >= n->n_kids;
        break;
    default:
        for (uint32_t k = 0; k < n->n_kids; k++) {
            merge_end(t, s, kid(t, n, k), past_end);
        }
        break;
    }
}

void sd__trig_merge_end(const sd__trigger *t, sd__trig_state *s, bool past_end)
{
    merge_end(t, s, 0, past_end);
}
