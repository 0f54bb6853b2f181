/*
 * Sundial planner: greedy fusion and assembly of the public plan.
 *
 * Fusion visits leaf nodes in topological order. Runner nodes always get a stage of their own.
 * An SDK node joins the stage of its main input's producer when that producer is an SDK node
 * in the same environment, the node is not a forced root, none of its side inputs comes
 * from that stage or from a stage that transitively depends on it, and the engine can tell from
 * the stage's input elements which side windows it reads (side_consumer_may_fuse). Checking
 * dependencies at the stage level (not the node level) matters: a stage grows after its first
 * members were placed, and a later member may make the whole stage depend on another stage, so the
 * test walks the current stage dependency graph each time (depth-first; stage counts are small).
 *
 *     stage A: [x] --main--> [y]          y may join A
 *     stage B: [z] reads A                [w] reads y (main) and z (side): B depends on A,
 *                                          so w must not join A (A would then depend on B)
 *
 * Stages are created in the order of their first member, which is not always a topological
 * order of stages (a stage can gain a member reading a later stage through a side input), so
 * the stages are sorted topologically afterwards (ties by creation order) and only then named
 * stage-001, stage-002, ...
 *
 * Assembly then decides which PCollections cross stage boundaries, gives each its wire coder
 * (LP rule) and port coder, translates windowing strategies, copies every string the executor
 * will see into the plan's arena, and asks descriptor.c for one descriptor per SDK stage.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

static pl_stage *stage_at(const pl_ctx *c, size_t i)
{
    return SD_VEC_AT(&c->stages, pl_stage, i);
}

/* ----------------------------------------------------------------------------------------- */
/* Fusion                                                                                     */
/* ----------------------------------------------------------------------------------------- */

static sd_status
new_stage(pl_ctx *c, sd_plan_stage_kind kind, const char *env, const char *main_input, size_t *idx)
{
    pl_stage *st;
    PL_TRY(sd_vec_push_zero(&c->stages, (void **)&st));
    st->kind = kind;
    st->env = env;
    st->main_input = main_input;
    sd_vec_init(&st->members, sizeof(size_t));
    sd_vec_init(&st->deps, sizeof(size_t));
    *idx = c->stages.len - 1;
    return SD_OK;
}

static sd_status add_dep(pl_ctx *c, size_t s, const char *pcoll)
{
    pl_node *p = sd__plan_producer(c, pcoll);
    if (p == NULL || p->stage == SD_PLAN_NONE || p->stage == s) {
        return SD_OK;
    }
    return sd_vec_push(&stage_at(c, s)->deps, &p->stage);
}

/* Does stage `from` depend, directly or transitively, on stage `to`? */
static sd_status depends_on(pl_ctx *c, size_t from, size_t to, bool *out)
{
    size_t n = c->stages.len;
    bool *seen = sd_arena_alloc(&c->scratch, n + 1);
    size_t *stack = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    if (seen == NULL || stack == NULL) {
        return SD_ENOMEM;
    }
    size_t top = 0;
    stack[top++] = from;
    seen[from] = true;
    *out = false;
    while (top > 0) {
        size_t s = stack[--top];
        if (s == to) {
            *out = true;
            return SD_OK;
        }
        const pl_stage *st = stage_at(c, s);
        for (size_t i = 0; i < st->deps.len; i++) {
            size_t d = *SD_VEC_AT(&st->deps, size_t, i);
            if (!seen[d]) {
                seen[d] = true;
                stack[top++] = d;
            }
        }
    }
    return SD_OK;
}

static sd_plan_stage_kind runner_kind(pl_kind k)
{
    switch (k) {
    case PL_IMPULSE:
        return SD_PLAN_STAGE_IMPULSE;
    case PL_GBK:
        return SD_PLAN_STAGE_GBK;
    case PL_FLATTEN:
        return SD_PLAN_STAGE_FLATTEN;
    case PL_TESTSTREAM:
        return SD_PLAN_STAGE_TESTSTREAM;
    default:
        return SD_PLAN_STAGE_SDK;
    }
}

/* Reorder c->stages topologically (ties by creation order) and remap every stage index. */
static sd_status sort_stages(pl_ctx *c)
{
    size_t n = c->stages.len;
    size_t *pos = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    size_t *order = sd_arena_alloc(&c->scratch, sizeof(size_t) * (n + 1));
    bool *placed = sd_arena_alloc(&c->scratch, n + 1);
    if (pos == NULL || order == NULL || placed == NULL) {
        return SD_ENOMEM;
    }
    for (size_t k = 0; k < n; k++) {
        size_t pick = SD_PLAN_NONE;
        for (size_t i = 0; i < n && pick == SD_PLAN_NONE; i++) {
            if (placed[i]) {
                continue;
            }
            const pl_stage *st = stage_at(c, i);
            bool ready = true;
            for (size_t j = 0; j < st->deps.len && ready; j++) {
                ready = placed[*SD_VEC_AT(&st->deps, size_t, j)];
            }
            if (ready) {
                pick = i;
            }
        }
        if (pick == SD_PLAN_NONE) {
            /* Fusion never creates a cycle; fail loudly rather than emit a bad order. */
            return SD_EINTERNAL;
        }
        placed[pick] = true;
        order[k] = pick;
        pos[pick] = k;
    }
    sd_vec sorted;
    sd_vec_init(&sorted, sizeof(pl_stage));
    PL_TRY(sd_vec_reserve(&sorted, n));
    for (size_t k = 0; k < n; k++) {
        pl_stage *st = stage_at(c, order[k]);
        for (size_t j = 0; j < st->deps.len; j++) {
            size_t *d = SD_VEC_AT(&st->deps, size_t, j);
            *d = pos[*d];
        }
        sd_status s = sd_vec_push(&sorted, st);
        (void)s; /* cannot fail: reserved */
    }
    sd_vec_deinit(&c->stages);
    c->stages = sorted;
    for (size_t i = 0; i < c->nodes.len; i++) {
        pl_node *nd = sd__plan_node(c, i);
        if (nd->stage != SD_PLAN_NONE) {
            nd->stage = pos[nd->stage];
        }
    }
    return SD_OK;
}

static bool pcoll_global(const pl_ctx *c, const char *pcoll);

static bool urn_is(const pl_node *q, const char *urn)
{
    return q->urn != NULL && strcmp(q->urn, urn) == 0;
}

/*
 * May n, which reads side inputs, join stage s? The engine holds a stage's input element until
 * the side windows the SDK will read for it are complete, and knows them only from that element:
 * from its window, or, when the stage input is in the global window and a WindowInto in the
 * stage assigns the consumer's windows, from its timestamp (em_bundle.c). That is right only when
 * every member between the stage input and the last such WindowInto keeps timestamps. A DoFn
 * that sets them there (Java's Create.timestamped, Python's Map to a TimestampedValue) would have
 * the engine check the side windows of the wrong time, and n read a side input not yet complete;
 * so does a WindowInto over an input already in other windows. Then n starts a stage of its own,
 * whose input elements carry the windows it reads in.
 */
static bool side_consumer_may_fuse(pl_ctx *c, const pl_node *n, size_t s)
{
    bool windowed = false;
    for (pl_node *q = sd__plan_producer(c, n->main_input); q != NULL && q->stage == s;
         q = q->main_input != NULL ? sd__plan_producer(c, q->main_input) : NULL) {
        if (urn_is(q, SD_URN_TRANSFORM_WINDOW_INTO)) {
            windowed = true;
        } else if (windowed && !urn_is(q, SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION) &&
                   !urn_is(q, SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS)) {
            return false; /* q may set timestamps (the SDF's pair and split keep them) */
        }
    }
    return !windowed || pcoll_global(c, stage_at(c, s)->main_input);
}

/*
 * The stage n may join as a reader of its main input beside others: the first stage that reads
 * the same PCollection from a runner stage (an Impulse, a GroupByKey, a Flatten), when it is in
 * n's environment. Siblings in one stage share its bundles: on a LOOPBACK worker two stages
 * would buy no parallelism and cost the SDK a second processor to build. SD_PLAN_NONE: none.
 */
static size_t sibling_stage(const pl_ctx *c, const pl_node *n)
{
    void *v = sd_map_get_str(&c->sibling_stage, n->main_input);
    if (v == NULL || c->opt.separate_siblings) {
        return SD_PLAN_NONE;
    }
    size_t s = (size_t)(uintptr_t)v - 1;
    return strcmp(stage_at(c, s)->env, n->env) == 0 ? s : SD_PLAN_NONE;
}

sd_status sd__plan_fuse(pl_ctx *c)
{
    for (size_t k = 0; k < c->n_topo; k++) {
        size_t idx = c->topo[k];
        pl_node *n = sd__plan_node(c, idx);
        size_t s = SD_PLAN_NONE;
        bool sibling = false; /* n reads its main input from a runner stage (or nothing) */
        if (n->kind == PL_SDK && !n->forced_root && n->main_input != NULL) {
            pl_node *q = sd__plan_producer(c, n->main_input);
            if (q != NULL && q->kind == PL_SDK && q->stage != SD_PLAN_NONE &&
                strcmp(stage_at(c, q->stage)->env, n->env) == 0) {
                s = q->stage;
            } else if (q == NULL || q->kind != PL_SDK) {
                sibling = true;
                s = sibling_stage(c, n);
            }
            for (size_t i = 0; s != SD_PLAN_NONE && i < n->n_sides; i++) {
                pl_node *sp = sd__plan_producer(c, n->sides[i].pcoll);
                if (sp == NULL || sp->stage == SD_PLAN_NONE) {
                    continue;
                }
                bool dep = sp->stage == s;
                if (!dep) {
                    PL_TRY(depends_on(c, sp->stage, s, &dep));
                }
                if (dep) {
                    s = SD_PLAN_NONE;
                }
            }
            if (s != SD_PLAN_NONE && n->n_sides > 0 && !side_consumer_may_fuse(c, n, s)) {
                s = SD_PLAN_NONE;
            }
        }
        if (s == SD_PLAN_NONE) {
            sd_plan_stage_kind kind = runner_kind(n->kind);
            PL_TRY(new_stage(c, kind, n->env, n->main_input, &s));
            if (sibling && !sd_map_has(&c->sibling_stage, sd_bytes_str(n->main_input))) {
                PL_TRY(
                    sd_map_put_str(&c->sibling_stage, n->main_input, (void *)(uintptr_t)(s + 1)));
            }
        }
        PL_TRY(sd_vec_push(&stage_at(c, s)->members, &idx));
        n = sd__plan_node(c, idx);
        n->stage = s;
        for (size_t i = 0; i < n->n_inputs; i++) {
            PL_TRY(add_dep(c, s, n->inputs[i].pcoll));
        }
    }
    return sort_stages(c);
}

/* ----------------------------------------------------------------------------------------- */
/* Assembly helpers                                                                           */
/* ----------------------------------------------------------------------------------------- */

static const char *dup_out(pl_ctx *c, const char *s)
{
    return sd_arena_strdup(c->out, s);
}

/* Is pcoll read by a node outside stage s? */
/* The stages whose nodes consume one PCollection, as the lowest and highest stage index. */
typedef struct pl_span {
    size_t lo, hi;
} pl_span;

/*
 * Index every node input by PCollection once the stages are fixed, so that consumed_outside
 * is one lookup (it used to scan every node for every output: quadratic, 100 s for a chain of
 * 100,000 transforms).
 */
static sd_status index_consumers(pl_ctx *c)
{
    for (size_t i = 0; i < c->nodes.len; i++) {
        const pl_node *n = sd__plan_node(c, i);
        for (size_t j = 0; j < n->n_inputs; j++) {
            pl_span *sp = sd_map_get_str(&c->consumers, n->inputs[j].pcoll);
            if (sp == NULL) {
                sp = sd_arena_alloc(&c->scratch, sizeof(*sp));
                if (sp == NULL) {
                    return SD_ENOMEM;
                }
                sp->lo = sp->hi = n->stage;
                PL_TRY(sd_map_put_str(&c->consumers, n->inputs[j].pcoll, sp));
            } else {
                sp->lo = n->stage < sp->lo ? n->stage : sp->lo;
                sp->hi = n->stage > sp->hi ? n->stage : sp->hi;
            }
        }
    }
    return SD_OK;
}

/* Does a node outside stage s consume pcoll? (After index_consumers.) */
static bool consumed_outside(const pl_ctx *c, const char *pcoll, size_t s)
{
    const pl_span *sp = sd_map_get_str(&c->consumers, pcoll);
    /* A window-merge stage's results go back to its GroupByKey through the engine (merge.c). */
    return (sp != NULL && (sp->lo != s || sp->hi != s)) ||
           sd_map_has(&c->merge_results, sd_bytes_str(pcoll));
}

static sd_status mark_boundary(pl_ctx *c, const char *pcoll)
{
    if (sd_map_has(&c->boundary, sd_bytes_str(pcoll))) {
        return SD_OK;
    }
    const pb_pcoll *p = sd__plan_pcoll_get(c, pcoll);
    const char *wire = pcoll;
    if (p != NULL) {
        PL_TRY(sd__plan_pcoll_coder(c, p->coder_id, &wire));
    }
    return sd_map_put_str(&c->boundary, pcoll, (void *)wire);
}

typedef struct pl_cons {
    size_t stage;
    bool side;
} pl_cons;

static int cons_cmp(const void *a, const void *b)
{
    const pl_cons *x = a;
    const pl_cons *y = b;
    if (x->stage != y->stage) {
        return x->stage < y->stage ? -1 : 1;
    }
    return (int)x->side - (int)y->side;
}

static int size_cmp(const void *a, const void *b)
{
    size_t x = *(const size_t *)a;
    size_t y = *(const size_t *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

static int output_cmp(const void *a, const void *b)
{
    return strcmp(((const sd_plan_output *)a)->pcollection,
                  ((const sd_plan_output *)b)->pcollection);
}

static int coder_cmp(const void *a, const void *b)
{
    return strcmp(((const sd_plan_coder *)a)->id, ((const sd_plan_coder *)b)->id);
}

static int pcoll_cmp(const void *a, const void *b)
{
    return strcmp(((const sd_plan_pcollection *)a)->id, ((const sd_plan_pcollection *)b)->id);
}

static int env_cmp(const void *a, const void *b)
{
    return strcmp(((const sd_plan_environment *)a)->id, ((const sd_plan_environment *)b)->id);
}

static int tsout_cmp(const void *a, const void *b)
{
    return strcmp(((const sd_plan_teststream_output *)a)->tag,
                  ((const sd_plan_teststream_output *)b)->tag);
}

/* A transform id for the stage's data ports, unique among all transform ids. */
static const char *port_id(pl_ctx *c, const char *stage, const char *what, const char *pcoll)
{
    char *base = pcoll != NULL ? sd_arena_printf(&c->scratch, "%s_%s_%s", stage, what, pcoll)
                               : sd_arena_printf(&c->scratch, "%s_%s", stage, what);
    if (base == NULL) {
        return NULL;
    }
    const char *id = sd__plan_unique_id(c, &c->transform_ids, NULL, base);
    if (id == NULL || sd_map_put_str(&c->transform_ids, id, PL_PRESENT) != SD_OK) {
        return NULL;
    }
    return dup_out(c, id);
}

/* Components of the wire form of a KV pcoll's coder, into the plan arena. */
static sd_status kv_parts(pl_ctx *c, const char *pcoll, const char **key, const char **value)
{
    *key = NULL;
    *value = NULL;
    const char *wire = sd_map_get_str(&c->boundary, pcoll);
    const pb_coder *k = wire != NULL ? sd__plan_coder_get(c, wire) : NULL;
    if (k == NULL || k->spec == NULL || strcmp(k->spec->urn, SD_URN_CODER_KV) != 0 ||
        k->n_component_coder_ids != 2) {
        return SD_OK;
    }
    *key = dup_out(c, k->component_coder_ids[0]);
    *value = dup_out(c, k->component_coder_ids[1]);
    return *key == NULL || *value == NULL ? SD_ENOMEM : SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Stages                                                                                     */
/* ----------------------------------------------------------------------------------------- */

static sd_status boundaries(pl_ctx *c)
{
    for (size_t s = 0; s < c->stages.len; s++) {
        pl_stage *st = stage_at(c, s);
        for (size_t m = 0; m < st->members.len; m++) {
            pl_node *n = sd__plan_node(c, *SD_VEC_AT(&st->members, size_t, m));
            if (st->kind != SD_PLAN_STAGE_SDK) {
                for (size_t i = 0; i < n->n_inputs; i++) {
                    PL_TRY(mark_boundary(c, n->inputs[i].pcoll));
                }
                for (size_t i = 0; i < n->n_outputs; i++) {
                    PL_TRY(mark_boundary(c, n->outputs[i].pcoll));
                }
                continue;
            }
            for (size_t i = 0; i < n->n_sides; i++) {
                PL_TRY(mark_boundary(c, n->sides[i].pcoll));
            }
            for (size_t i = 0; i < n->n_outputs; i++) {
                if (consumed_outside(c, n->outputs[i].pcoll, s)) {
                    PL_TRY(mark_boundary(c, n->outputs[i].pcoll));
                }
            }
        }
        if (st->kind == SD_PLAN_STAGE_SDK && st->main_input != NULL) {
            PL_TRY(mark_boundary(c, st->main_input));
        }
    }
    /*
     * Flatten inputs already have the output's coder (rewrite.c transcodes those that differ).
     * Only in a pipeline without any SDK environment can one still differ; it then takes the
     * output's wire coder, the one way left for the runner to concatenate the bytes.
     */
    for (size_t s = 0; s < c->stages.len; s++) {
        pl_stage *st = stage_at(c, s);
        if (st->kind != SD_PLAN_STAGE_FLATTEN) {
            continue;
        }
        pl_node *n = sd__plan_node(c, *SD_VEC_AT(&st->members, size_t, 0));
        const char *w = sd_map_get_str(&c->boundary, n->outputs[0].pcoll);
        const pb_pcoll *out = sd__plan_pcoll_get(c, n->outputs[0].pcoll);
        for (size_t i = 0; w != NULL && out != NULL && i < n->n_inputs; i++) {
            const pb_pcoll *in = sd__plan_pcoll_get(c, n->inputs[i].pcoll);
            if (in != NULL && !sd__plan_coders_equal(c, in->coder_id, out->coder_id)) {
                PL_TRY(sd_map_put_str(&c->boundary, n->inputs[i].pcoll, (void *)w));
            }
        }
    }
    return SD_OK;
}

static const char *pcoll_port(pl_ctx *c, const char *pcoll)
{
    const char *key = sd_arena_printf(&c->scratch, "port:%s", pcoll);
    return key == NULL ? NULL : sd_map_get_str(&c->port, key);
}

/* Port coders of every boundary PCollection, memoized under "port:<pcoll>" in c->port. */
static sd_status port_coders(pl_ctx *c)
{
    size_t it = 0;
    sd_bytes key;
    void *val;
    /* Collect first: port_coder inserts into c->port while we iterate c->boundary (distinct). */
    while (sd_map_next(&c->boundary, &it, &key, &val)) {
        char *pcoll = sd_arena_memdup(&c->scratch, key.ptr, key.len + 1);
        if (pcoll == NULL) {
            return SD_ENOMEM;
        }
        pcoll[key.len] = '\0';
        const pb_pcoll *p = sd__plan_pcoll_get(c, pcoll);
        const pb_wstrat *ws =
            p != NULL ? sd_map_get_str(&c->wstrats, p->windowing_strategy_id) : NULL;
        if (ws == NULL) {
            return SD_EINTERNAL;
        }
        const char *port;
        PL_TRY(sd__plan_port_coder(c, val, ws->window_coder_id, &port));
        char *pk = sd_arena_printf(&c->scratch, "port:%s", pcoll);
        if (pk == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd_map_put_str(&c->port, pk, (void *)port));
    }
    return SD_OK;
}

/* Member node m of stage st. */
static pl_node *member_at(const pl_ctx *c, const pl_stage *st, size_t m)
{
    return sd__plan_node(c, *SD_VEC_AT(&st->members, size_t, m));
}

/*
 * The stage's transforms and the flags its members raise (stateful, window expiration,
 * finalization, time-sorted input, splittable). OUT: n_sides, n_timers, n_outs (the members'
 * totals, for sizing the tables the later steps fill).
 */
static sd_status assemble_members(pl_ctx *c,
                                  const pl_stage *st,
                                  sd_plan_stage *ps,
                                  size_t *n_sides,
                                  size_t *n_timers,
                                  size_t *n_outs)
{
    size_t nm = st->members.len;
    const char **tids = sd_arena_alloc(c->out, sizeof(char *) * (nm + 1));
    if (tids == NULL) {
        return SD_ENOMEM;
    }
    *n_sides = 0;
    *n_timers = 0;
    *n_outs = 0;
    for (size_t m = 0; m < nm; m++) {
        pl_node *n = member_at(c, st, m);
        tids[m] = dup_out(c, n->id);
        if (tids[m] == NULL) {
            return SD_ENOMEM;
        }
        *n_sides += n->n_sides;
        *n_timers += n->n_timers;
        *n_outs += n->n_outputs;
        ps->stateful = ps->stateful || n->stateful;
        ps->on_window_expiration = ps->on_window_expiration || n->window_expiration;
        if (n->window_expiration && ps->expiration_transform == NULL) {
            ps->expiration_transform = dup_out(c, n->id);
            ps->expiration_family = dup_out(c, n->expiration_family);
            if (ps->expiration_transform == NULL || ps->expiration_family == NULL) {
                return SD_ENOMEM;
            }
        }
        ps->requires_finalization = ps->requires_finalization || n->finalization;
        /* Only the root can be time-sorted: the ParDo is stateful, so it starts the stage. */
        ps->time_sorted_input = ps->time_sorted_input || n->time_sorted;
        ps->splittable = ps->splittable || n->splittable;
        ps->after_reshuffle = ps->after_reshuffle || n->after_reshuffle;
    }
    ps->n_transforms = nm;
    ps->transforms = tids;
    return SD_OK;
}

/* Upstream stages: st->deps sorted, without repeats. */
static sd_status assemble_upstream(pl_ctx *c, const pl_stage *st, sd_plan_stage *ps)
{
    size_t *ups = sd_arena_alloc(c->out, sizeof(size_t) * (st->deps.len + 1));
    if (ups == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < st->deps.len; i++) {
        ups[i] = *SD_VEC_AT(&st->deps, size_t, i);
    }
    qsort(ups, st->deps.len, sizeof(size_t), size_cmp);
    size_t nu = 0;
    for (size_t i = 0; i < st->deps.len; i++) {
        if (nu == 0 || ups[nu - 1] != ups[i]) {
            ups[nu++] = ups[i];
        }
    }
    ps->n_upstream = nu;
    ps->upstream = ups;
    return SD_OK;
}

/* Inputs: a Flatten's every input, an SDK or GBK stage's main input; none otherwise. */
static sd_status assemble_inputs(pl_ctx *c, const pl_stage *st, sd_plan_stage *ps)
{
    if (st->kind != SD_PLAN_STAGE_SDK && st->kind != SD_PLAN_STAGE_FLATTEN &&
        st->kind != SD_PLAN_STAGE_GBK) {
        return SD_OK;
    }
    const pl_node *first = member_at(c, st, 0);
    size_t ni = st->kind == SD_PLAN_STAGE_FLATTEN ? first->n_inputs : 1;
    const char **ins = sd_arena_alloc(c->out, sizeof(char *) * (ni + 1));
    if (ins == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < ni; i++) {
        ins[i] =
            dup_out(c, st->kind == SD_PLAN_STAGE_FLATTEN ? first->inputs[i].pcoll : st->main_input);
        if (ins[i] == NULL) {
            return SD_ENOMEM;
        }
    }
    ps->n_inputs = ni;
    ps->inputs = ins;
    return SD_OK;
}

/*
 * Outputs, sorted by PCollection: every member output, except that an SDK stage lists only
 * those consumed outside it, each with a sink transform. n_outs bounds their number.
 */
static sd_status
assemble_outputs(pl_ctx *c, const pl_stage *st, size_t s, size_t n_outs, sd_plan_stage *ps)
{
    sd_plan_output *outs = sd_arena_alloc(c->out, sizeof(*outs) * (n_outs + 1));
    if (outs == NULL) {
        return SD_ENOMEM;
    }
    size_t no = 0;
    for (size_t m = 0; m < st->members.len; m++) {
        pl_node *n = member_at(c, st, m);
        for (size_t i = 0; i < n->n_outputs; i++) {
            const char *pc = n->outputs[i].pcoll;
            if (st->kind == SD_PLAN_STAGE_SDK && !consumed_outside(c, pc, s)) {
                continue;
            }
            outs[no].pcollection = dup_out(c, pc);
            outs[no].port_coder_id = dup_out(c, pcoll_port(c, pc));
            if (outs[no].pcollection == NULL || outs[no].port_coder_id == NULL) {
                return SD_ENOMEM;
            }
            no++;
        }
    }
    qsort(outs, no, sizeof(*outs), output_cmp);
    for (size_t i = 0; st->kind == SD_PLAN_STAGE_SDK && i < no; i++) {
        outs[i].sink_transform = port_id(c, ps->id, "sink", outs[i].pcollection);
        if (outs[i].sink_transform == NULL) {
            return SD_ENOMEM;
        }
    }
    ps->n_outputs = no;
    ps->outputs = outs;
    return SD_OK;
}

/* A GroupByKey stage: its input's windowing strategy and KV parts. */
static sd_status assemble_gbk(pl_ctx *c, const pl_stage *st, sd_plan_stage *ps)
{
    const pb_pcoll *in = sd__plan_pcoll_get(c, st->main_input);
    ps->windowing_strategy_id = dup_out(c, in->windowing_strategy_id);
    if (ps->windowing_strategy_id == NULL) {
        return SD_ENOMEM;
    }
    const pl_node *g = member_at(c, st, 0);
    for (size_t i = 0; i < g->n_outputs; i++) {
        if (strcmp(g->outputs[i].local, SD_GBK_LATE_OUTPUT_TAG) == 0) {
            ps->late_pcollection = dup_out(c, g->outputs[i].pcoll);
            if (ps->late_pcollection == NULL) {
                return SD_ENOMEM;
            }
        }
        if (strcmp(g->outputs[i].local, SD_GBK_MERGE_OUTPUT_TAG) == 0) {
            ps->merge_requests = dup_out(c, g->outputs[i].pcoll);
            ps->merge_results = dup_out(c, sd_map_get_str(&c->merge_pairs, g->outputs[i].pcoll));
            if (ps->merge_requests == NULL || ps->merge_results == NULL) {
                return SD_ENOMEM;
            }
        }
    }
    return kv_parts(c, st->main_input, &ps->key_coder_id, &ps->value_coder_id);
}

/* A TestStream stage: its payload, the coder its elements are stored in, its tagged outputs. */
static sd_status assemble_teststream(pl_ctx *c, const pl_stage *st, sd_plan_stage *ps)
{
    sd_arena *a = c->out;
    const pl_node *first = member_at(c, st, 0);
    const pb_transform *t = first->msg;
    ps->teststream_payload.len = t->spec->payload.len;
    ps->teststream_payload.ptr = sd_arena_memdup(a, t->spec->payload.data, t->spec->payload.len);
    /* Rerouted outputs (rewrite.c) hold the raw elements length-prefixed whole. */
    const char *wire = first->teststream_raw_coder;
    if (wire == NULL) {
        PL_TRY(sd__plan_wire_coder(c, first->teststream->coder_id, &wire));
    }
    ps->teststream_coder_id = dup_out(c, first->teststream->coder_id);
    ps->teststream_wire_coder_id = dup_out(c, wire);
    if (sd__plan_has_go_env(c)) {
        const char *urn = sd__plan_coder_urn(c, first->teststream->coder_id);
        /* Unknown to the runner, C is stored as length_prefix(C) (rewrite.c). */
        bool own = urn != NULL && strcmp(urn, SD_URN_CODER_GO_CUSTOM) == 0;
        ps->teststream_form = own ? SD_PLAN_TS_STORED : SD_PLAN_TS_NESTED;
    }
    sd_plan_teststream_output *tso = sd_arena_alloc(a, sizeof(*tso) * (first->n_outputs + 1));
    if ((ps->teststream_payload.ptr == NULL && t->spec->payload.len > 0) ||
        ps->teststream_coder_id == NULL || ps->teststream_wire_coder_id == NULL || tso == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < first->n_outputs; i++) {
        tso[i].tag = dup_out(c, first->outputs[i].local);
        tso[i].pcollection = dup_out(c, first->outputs[i].pcoll);
        if (tso[i].tag == NULL || tso[i].pcollection == NULL) {
            return SD_ENOMEM;
        }
    }
    qsort(tso, first->n_outputs, sizeof(*tso), tsout_cmp);
    ps->n_teststream_outputs = first->n_outputs;
    ps->teststream_outputs = tso;
    return SD_OK;
}

/* The PCollection's windowing strategy id, when it has a known one (else NULL). */
static const char *pcoll_ws(const pl_ctx *c, const char *pcoll)
{
    const pb_pcoll *p = pcoll != NULL ? sd__plan_pcoll_get(c, pcoll) : NULL;
    return p != NULL && sd_map_has(&c->wstrats, sd_bytes_str(p->windowing_strategy_id))
               ? p->windowing_strategy_id
               : NULL;
}

/* The PCollection is in the global window (unknown ones count as not). */
static bool pcoll_global(const pl_ctx *c, const char *pcoll)
{
    const char *id = pcoll_ws(c, pcoll);
    const pb_wstrat *ws = id != NULL ? sd_map_get_str(&c->wstrats, id) : NULL;
    return ws != NULL && ws->window_fn != NULL && ws->window_fn->urn != NULL &&
           strcmp(ws->window_fn->urn, SD_URN_WINDOW_FN_GLOBAL) == 0;
}

/* An SDK stage: source, side inputs, timers (in their wire coders), key coder. */
static sd_status
assemble_sdk(pl_ctx *c, const pl_stage *st, size_t n_sides, size_t n_timers, sd_plan_stage *ps)
{
    sd_arena *a = c->out;
    ps->source_transform = port_id(c, ps->id, "source", NULL);
    ps->source_port_coder_id = dup_out(c, pcoll_port(c, st->main_input));
    sd_plan_side_input *sides = sd_arena_alloc(a, sizeof(*sides) * (n_sides + 1));
    sd_plan_timer_family *timers = sd_arena_alloc(a, sizeof(*timers) * (n_timers + 1));
    if (ps->source_transform == NULL || ps->source_port_coder_id == NULL || sides == NULL ||
        timers == NULL) {
        return SD_ENOMEM;
    }
    size_t ns = 0;
    size_t nt = 0;
    for (size_t m = 0; m < st->members.len; m++) {
        pl_node *n = member_at(c, st, m);
        for (size_t i = 0; i < n->n_sides; i++) {
            sd_plan_side_input *si = &sides[ns++];
            si->transform = dup_out(c, n->id);
            si->local_id = dup_out(c, n->sides[i].local);
            si->pcollection = dup_out(c, n->sides[i].pcoll);
            si->access = n->sides[i].access;
            si->window_mapping_urn = dup_out(c, n->sides[i].mapping);
            si->main_windowing_strategy_id = NULL;
            if (pcoll_global(c, st->main_input) && !pcoll_global(c, n->main_input)) {
                const char *ws = pcoll_ws(c, n->main_input);
                si->main_windowing_strategy_id = ws != NULL ? dup_out(c, ws) : NULL;
                if (ws != NULL && si->main_windowing_strategy_id == NULL) {
                    return SD_ENOMEM;
                }
            }
            if (si->transform == NULL || si->local_id == NULL || si->pcollection == NULL ||
                si->window_mapping_urn == NULL) {
                return SD_ENOMEM;
            }
        }
        for (size_t i = 0; i < n->n_timers; i++) {
            sd_plan_timer_family *tf = &timers[nt++];
            const char *wire;
            PL_TRY(sd__plan_wire_coder(c, n->timers[i].coder, &wire));
            tf->transform = dup_out(c, n->id);
            tf->family = dup_out(c, n->timers[i].family);
            tf->domain = n->timers[i].domain;
            tf->timer_coder_id = dup_out(c, wire);
            if (tf->transform == NULL || tf->family == NULL || tf->timer_coder_id == NULL) {
                return SD_ENOMEM;
            }
        }
    }
    ps->n_side_inputs = ns;
    ps->side_inputs = sides;
    ps->n_timer_families = nt;
    ps->timer_families = timers;
    if (ps->stateful) {
        const char *unused;
        PL_TRY(kv_parts(c, st->main_input, &ps->key_coder_id, &unused));
    }
    return SD_OK;
}

/* Stage s of c->stages as public stage ps ("stage-<s + 1>"), in the plan's arena. */
static sd_status assemble_stage(pl_ctx *c, size_t s, sd_plan_stage *ps)
{
    pl_stage *st = stage_at(c, s);
    char *id = sd_arena_printf(c->out, "stage-%03zu", s + 1);
    if (id == NULL) {
        return SD_ENOMEM;
    }
    ps->id = id;
    ps->kind = st->kind;
    ps->environment_id = dup_out(c, st->kind == SD_PLAN_STAGE_SDK ? st->env : "");
    if (ps->environment_id == NULL) {
        return SD_ENOMEM;
    }
    if (st->kind == SD_PLAN_STAGE_SDK && sd__plan_env_is_typescript(c, st->env)) {
        ps->max_output_bytes = SD_PLAN_TS_MAX_OUTPUT_BYTES;
        ps->sink_resends = true;
    }
    size_t n_sides, n_timers, n_outs;
    PL_TRY(assemble_members(c, st, ps, &n_sides, &n_timers, &n_outs));
    PL_TRY(assemble_upstream(c, st, ps));
    PL_TRY(assemble_inputs(c, st, ps));
    PL_TRY(assemble_outputs(c, st, s, n_outs, ps));
    if (st->kind == SD_PLAN_STAGE_GBK) {
        PL_TRY(assemble_gbk(c, st, ps));
    }
    if (st->kind == SD_PLAN_STAGE_TESTSTREAM) {
        PL_TRY(assemble_teststream(c, st, ps));
    }
    if (st->kind == SD_PLAN_STAGE_SDK) {
        PL_TRY(assemble_sdk(c, st, n_sides, n_timers, ps));
    }
    return SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Tables                                                                                     */
/* ----------------------------------------------------------------------------------------- */

static sd_status copy_coder(pl_ctx *c, const char *id, const pb_coder *k, sd_plan_coder *out)
{
    sd_arena *a = c->out;
    out->id = dup_out(c, id);
    out->urn = dup_out(c, k->spec != NULL ? k->spec->urn : "");
    if (out->id == NULL || out->urn == NULL) {
        return SD_ENOMEM;
    }
    if (k->spec != NULL && k->spec->payload.len > 0) {
        out->payload.ptr = sd_arena_memdup(a, k->spec->payload.data, k->spec->payload.len);
        out->payload.len = k->spec->payload.len;
        if (out->payload.ptr == NULL) {
            return SD_ENOMEM;
        }
    }
    const char **comps = sd_arena_alloc(a, sizeof(char *) * (k->n_component_coder_ids + 1));
    if (comps == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < k->n_component_coder_ids; i++) {
        comps[i] = dup_out(c, k->component_coder_ids[i]);
        if (comps[i] == NULL) {
            return SD_ENOMEM;
        }
    }
    out->n_components = k->n_component_coder_ids;
    out->components = comps;
    return SD_OK;
}

/*
 * The coder table: every pipeline coder validation checked (so every coder the graph references,
 * with all components) plus every synthesized coder. Unused pipeline coders are left out: they
 * were never validated and may even name missing components.
 */
static sd_status coder_table(pl_ctx *c, sd_plan *plan)
{
    size_t n = sd_map_len(&c->seen) + sd_map_len(&c->new_coders);
    sd_plan_coder *arr = sd_arena_alloc(c->out, sizeof(*arr) * (n + 1));
    if (arr == NULL) {
        return SD_ENOMEM;
    }
    size_t m = 0;
    size_t it = 0;
    sd_bytes key;
    void *val;
    while (sd_map_next(&c->seen, &it, &key, &val)) {
        if (key.len < 2 || key.ptr[0] != 'c' || key.ptr[1] != ':') {
            continue;
        }
        char *id = sd_arena_memdup(&c->scratch, key.ptr + 2, key.len - 1);
        if (id == NULL) {
            return SD_ENOMEM;
        }
        id[key.len - 2] = '\0';
        const pb_coder *k = sd_map_get_str(&c->coders, id);
        if (k != NULL && !sd_map_has(&c->new_coders, sd_bytes_str(id))) {
            PL_TRY(copy_coder(c, id, k, &arr[m++]));
        }
    }
    it = 0;
    while (sd_map_next(&c->new_coders, &it, &key, &val)) {
        char *id = sd_arena_memdup(&c->scratch, key.ptr, key.len + 1);
        if (id == NULL) {
            return SD_ENOMEM;
        }
        id[key.len] = '\0';
        PL_TRY(copy_coder(c, id, val, &arr[m++]));
    }
    qsort(arr, m, sizeof(*arr), coder_cmp);
    plan->n_coders = m;
    plan->coders = arr;
    return SD_OK;
}

static sd_status windowing_table(pl_ctx *c, sd_plan *plan)
{
    size_t n = 0;
    sd_bytes *keys = sd_map_sorted_keys(&c->used_ws, &n);
    if (keys == NULL && n != 0) {
        return SD_ENOMEM;
    }
    sd_plan_windowing *arr = sd_arena_alloc(c->out, sizeof(*arr) * (n + 1));
    sd_status st = arr == NULL ? SD_ENOMEM : SD_OK;
    for (size_t i = 0; st == SD_OK && i < n; i++) {
        char *id = sd_arena_memdup(&c->scratch, keys[i].ptr, keys[i].len + 1);
        if (id == NULL) {
            st = SD_ENOMEM;
            break;
        }
        id[keys[i].len] = '\0';
        st = sd__plan_translate_windowing(c, c->out, id, sd_map_get_str(&c->wstrats, id), &arr[i]);
    }
    sd_free(keys);
    PL_TRY(st);
    plan->n_windowings = n;
    plan->windowings = arr;
    return SD_OK;
}

static sd_status pcoll_table(pl_ctx *c, sd_plan *plan)
{
    size_t n = sd_map_len(&c->boundary);
    sd_plan_pcollection *arr = sd_arena_alloc(c->out, sizeof(*arr) * (n + 1));
    pl_cons *cons = sd_arena_alloc(&c->scratch, sizeof(*cons) * (c->stages.len * 2 + 1));
    if (arr == NULL || cons == NULL) {
        return SD_ENOMEM;
    }
    size_t m = 0;
    size_t it = 0;
    sd_bytes key;
    void *val;
    while (sd_map_next(&c->boundary, &it, &key, &val)) {
        char *id = sd_arena_memdup(&c->scratch, key.ptr, key.len + 1);
        if (id == NULL) {
            return SD_ENOMEM;
        }
        id[key.len] = '\0';
        const pb_pcoll *p = sd__plan_pcoll_get(c, id);
        const pb_wstrat *ws = sd_map_get_str(&c->wstrats, p->windowing_strategy_id);
        sd_plan_pcollection *pc = &arr[m++];
        pc->id = dup_out(c, id);
        pc->coder_id = dup_out(c, p->coder_id);
        pc->wire_coder_id = dup_out(c, val);
        pc->window_coder_id = dup_out(c, ws->window_coder_id);
        pc->port_coder_id = dup_out(c, pcoll_port(c, id));
        pc->windowing_strategy_id = dup_out(c, p->windowing_strategy_id);
        if (pc->id == NULL || pc->coder_id == NULL || pc->wire_coder_id == NULL ||
            pc->window_coder_id == NULL || pc->port_coder_id == NULL ||
            pc->windowing_strategy_id == NULL) {
            return SD_ENOMEM;
        }
        pc->windowing = sd_plan_find_windowing(plan, p->windowing_strategy_id);
        pc->bounded =
            p->is_bounded != ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__UNBOUNDED;
        pl_node *prod = sd__plan_producer(c, id);
        pc->producer_stage = prod != NULL ? prod->stage : SD_PLAN_NONE;

        /* Consumers: stages reading it through a port (main) or the state API (side). */
        size_t nc = 0;
        for (size_t s = 0; s < c->stages.len; s++) {
            const pl_stage *st = stage_at(c, s);
            bool main = false;
            bool side = false;
            for (size_t k = 0; k < st->members.len; k++) {
                const pl_node *nd = sd__plan_node(c, *SD_VEC_AT(&st->members, size_t, k));
                for (size_t i = 0; i < nd->n_sides; i++) {
                    side = side || strcmp(nd->sides[i].pcoll, id) == 0;
                }
                if (st->kind == SD_PLAN_STAGE_SDK) {
                    continue;
                }
                for (size_t i = 0; i < nd->n_inputs; i++) {
                    main = main || strcmp(nd->inputs[i].pcoll, id) == 0;
                }
            }
            if (st->kind == SD_PLAN_STAGE_SDK && st->main_input != NULL &&
                strcmp(st->main_input, id) == 0) {
                main = true;
            }
            if (main) {
                cons[nc++] = (pl_cons){ s, false };
            }
            if (side) {
                cons[nc++] = (pl_cons){ s, true };
            }
        }
        qsort(cons, nc, sizeof(*cons), cons_cmp);
        sd_plan_consumer *pcs = sd_arena_alloc(c->out, sizeof(*pcs) * (nc + 1));
        if (pcs == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < nc; i++) {
            pcs[i].stage = cons[i].stage;
            pcs[i].side_input = cons[i].side;
        }
        pc->n_consumers = nc;
        pc->consumers = pcs;
    }
    qsort(arr, m, sizeof(*arr), pcoll_cmp);
    plan->n_pcollections = m;
    plan->pcollections = arr;
    return SD_OK;
}

static sd_status env_table(pl_ctx *c, sd_plan *plan)
{
    sd_plan_environment *arr = sd_arena_alloc(c->out, sizeof(*arr) * (plan->n_stages + 1));
    if (arr == NULL) {
        return SD_ENOMEM;
    }
    size_t m = 0;
    for (size_t s = 0; s < plan->n_stages; s++) {
        const sd_plan_stage *ps = &plan->stages[s];
        if (ps->kind != SD_PLAN_STAGE_SDK) {
            continue;
        }
        bool dup = false;
        for (size_t i = 0; i < m; i++) {
            dup = dup || strcmp(arr[i].id, ps->environment_id) == 0;
        }
        const pb_env *e = sd_map_get_str(&c->envs, ps->environment_id);
        if (dup || e == NULL) {
            continue;
        }
        arr[m].id = ps->environment_id;
        arr[m].urn = dup_out(c, e->urn);
        arr[m].payload.len = e->payload.len;
        arr[m].payload.ptr = sd_arena_memdup(c->out, e->payload.data, e->payload.len);
        if (arr[m].urn == NULL || (arr[m].payload.ptr == NULL && e->payload.len > 0)) {
            return SD_ENOMEM;
        }
        m++;
    }
    qsort(arr, m, sizeof(*arr), env_cmp);
    plan->n_environments = m;
    plan->environments = arr;
    return SD_OK;
}

sd_status sd__plan_assemble(pl_ctx *c, sd_plan *plan)
{
    PL_TRY(index_consumers(c));
    PL_TRY(boundaries(c));
    PL_TRY(port_coders(c));
    size_t n = c->stages.len;
    sd_plan_stage *stages = sd_arena_alloc(c->out, sizeof(*stages) * (n + 1));
    if (stages == NULL) {
        return SD_ENOMEM;
    }
    for (size_t s = 0; s < n; s++) {
        PL_TRY(assemble_stage(c, s, &stages[s]));
        if (stages[s].kind == SD_PLAN_STAGE_TESTSTREAM) {
            plan->teststream_stage = s;
        }
    }
    plan->n_stages = n;
    plan->stages = stages;
    /* Descriptors may synthesize nothing new, but build them before the coder table anyway so
     * the table is guaranteed to hold every coder a descriptor mentions. */
    for (size_t s = 0; s < n; s++) {
        if (stages[s].kind == SD_PLAN_STAGE_SDK) {
            PL_TRY(sd__plan_descriptor(c, stage_at(c, s), &stages[s]));
        }
    }
    PL_TRY(coder_table(c, plan));
    PL_TRY(windowing_table(c, plan));
    PL_TRY(pcoll_table(c, plan));
    return env_table(c, plan);
}
