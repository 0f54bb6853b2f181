/*
 * Sundial planner: entry points, problem collection, lookups and the invariant checker.
 *
 * Validation never stops at the first problem. Each phase records problems as lines in a
 * buffer and keeps going with whatever it could understand, so a user who submits a pipeline
 * with three unsupported URNs and a Docker environment learns about all four at once. Only
 * allocation failure aborts a phase (SD_ENOMEM). The final status is SD_EINVAL if anything was
 * malformed (a dangling reference, an undecodable payload) and SD_EUNIMPL if everything was
 * well-formed but something is not supported.
 *
 * Building reuses the same context: validation phases, then fusion and assembly (fuse.c),
 * then one descriptor per SDK stage (descriptor.c). The build context has a scratch arena that
 * dies with the call; the plan has its own arena that dies in sd_plan_destroy(), and nothing in
 * the plan points into the scratch arena or into the caller's Pipeline.
 */
#include "runner/plan/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

/* ----------------------------------------------------------------------------------------- */
/* Context                                                                                    */
/* ----------------------------------------------------------------------------------------- */

static void ctx_init(pl_ctx *c, const pb_pipeline *p, const sd_plan_options *opt)
{
    memset(c, 0, sizeof(*c));
    c->p = p;
    if (opt != NULL) {
        c->opt = *opt;
    } else {
        c->opt = (sd_plan_options)SD_PLAN_OPTIONS_INIT;
    }
    if (c->opt.data_url == NULL) {
        c->opt.data_url = "";
    }
    if (c->opt.state_url == NULL) {
        c->opt.state_url = "";
    }
    sd_map *maps[] = { &c->transforms,    &c->pcolls,     &c->coders,       &c->wstrats,
                       &c->envs,          &c->new_coders, &c->new_pcolls,   &c->transform_ids,
                       &c->alias,         &c->seen,       &c->visiting,     &c->expanded,
                       &c->used_ws,       &c->node_index, &c->producer,     &c->wire,
                       &c->port,          &c->boundary,   &c->consumers,    &c->merge_pairs,
                       &c->merge_results, &c->fuse_alias, &c->sibling_stage };
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        sd_map_init(maps[i], NULL);
    }
    sd_vec_init(&c->nodes, sizeof(pl_node));
    sd_vec_init(&c->stages, sizeof(pl_stage));
    sd_buf_init(&c->problems, 0);
}

static void ctx_deinit(pl_ctx *c)
{
    sd_map *maps[] = { &c->transforms,    &c->pcolls,     &c->coders,       &c->wstrats,
                       &c->envs,          &c->new_coders, &c->new_pcolls,   &c->transform_ids,
                       &c->alias,         &c->seen,       &c->visiting,     &c->expanded,
                       &c->used_ws,       &c->node_index, &c->producer,     &c->wire,
                       &c->port,          &c->boundary,   &c->consumers,    &c->merge_pairs,
                       &c->merge_results, &c->fuse_alias, &c->sibling_stage };
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        sd_map_deinit(maps[i]);
    }
    for (size_t i = 0; i < c->stages.len; i++) {
        pl_stage *st = SD_VEC_AT(&c->stages, pl_stage, i);
        sd_vec_deinit(&st->members);
        sd_vec_deinit(&st->deps);
    }
    sd_vec_deinit(&c->stages);
    sd_vec_deinit(&c->nodes);
    sd_buf_deinit(&c->problems);
    sd_arena_deinit(&c->scratch);
}

/* ----------------------------------------------------------------------------------------- */
/* Problems                                                                                   */
/* ----------------------------------------------------------------------------------------- */

sd_status sd__plan_problem(pl_ctx *c, bool malformed, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return SD_EINTERNAL;
    }
    PL_TRY(sd_buf_reserve(&c->problems, (size_t)n + 2));
    va_start(ap, fmt);
    vsnprintf((char *)c->problems.data + c->problems.len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    /* A message must stay on one line: the report is line-oriented. */
    for (int i = 0; i < n; i++) {
        char *ch = (char *)c->problems.data + c->problems.len + i;
        if (*ch == '\n') {
            *ch = ' ';
        }
    }
    c->problems.len += (size_t)n;
    c->problems.data[c->problems.len++] = '\n';
    c->n_problems++;
    if (malformed) {
        c->malformed = true;
    }
    return SD_OK;
}

const char *sd__plan_tname(pl_ctx *c, const char *tid)
{
    const pb_transform *t = sd_map_get_str(&c->transforms, tid);
    if (t != NULL && t->unique_name != NULL && t->unique_name[0] != '\0' &&
        strcmp(t->unique_name, tid) != 0) {
        return sd_arena_printf(&c->scratch, "transform \"%s\" (\"%s\")", tid, t->unique_name);
    }
    return sd_arena_printf(&c->scratch, "transform \"%s\"", tid);
}

int sd__plan_strptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Turn the collected problems into the final status: one sd_err message listing as many as
 * fit, and optionally the full report.
 */
static sd_status report_problems(pl_ctx *c, char **report, sd_err *err)
{
    if (c->n_problems == 0) {
        return SD_OK;
    }
    sd_status code = c->malformed ? SD_EINVAL : SD_EUNIMPL;
    if (report != NULL) {
        *report = sd_strndup((const char *)c->problems.data, c->problems.len);
        if (*report == NULL) {
            return sd_err_set(err, SD_ENOMEM, "out of memory while reporting pipeline problems");
        }
    }
    char msg[SD_ERR_MSG_MAX];
    const size_t reserve = 32; /* room for "... and N more" */
    int w = snprintf(msg, sizeof(msg),
                     "pipeline cannot run on Sundial (%zu problem%s): ", c->n_problems,
                     c->n_problems == 1 ? "" : "s");
    size_t len = (size_t)w;
    const char *p = (const char *)c->problems.data;
    const char *end = p + c->problems.len;
    size_t i = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t line = (size_t)(nl - p);
        char head[32];
        int hl = snprintf(head, sizeof(head), "%s[%zu] ", i == 0 ? "" : "; ", i + 1);
        if (len + (size_t)hl + line + reserve >= sizeof(msg)) {
            break;
        }
        memcpy(msg + len, head, (size_t)hl);
        len += (size_t)hl;
        memcpy(msg + len, p, line);
        len += line;
        p = nl + 1;
        i++;
    }
    msg[len] = '\0';
    if (i < c->n_problems) {
        snprintf(msg + len, sizeof(msg) - len, "%s... and %zu more", i == 0 ? "" : "; ",
                 c->n_problems - i);
    }
    return sd_err_set(err, code, "%s", msg);
}

/* ----------------------------------------------------------------------------------------- */
/* Entry points                                                                               */
/* ----------------------------------------------------------------------------------------- */

static sd_status oom(sd_err *err)
{
    return sd_err_set(err, SD_ENOMEM, "out of memory while planning the pipeline");
}

sd_status
sd_plan_validate_ex(const pb_pipeline *p, const sd_plan_options *opt, char **report, sd_err *err)
{
    if (report != NULL) {
        *report = NULL;
    }
    if (p == NULL) {
        return sd_err_set(err, SD_EINVAL, "sd_plan_validate: pipeline is NULL");
    }
    pl_ctx c;
    ctx_init(&c, p, opt);
    sd_status st = sd__plan_analyze(&c);
    if (st == SD_ENOMEM) {
        st = oom(err);
    } else if (st == SD_OK) {
        st = report_problems(&c, report, err);
    } else {
        st = sd_err_set(err, st, "planner failed: %s", sd_status_str(st));
    }
    ctx_deinit(&c);
    return st;
}

sd_status sd_plan_validate(const pb_pipeline *p, sd_err *err)
{
    return sd_plan_validate_ex(p, NULL, NULL, err);
}

sd_status
sd_plan_build(const pb_pipeline *p, const sd_plan_options *opt, sd_plan **out, sd_err *err)
{
    if (out == NULL) {
        return sd_err_set(err, SD_EINVAL, "sd_plan_build: out is NULL");
    }
    *out = NULL;
    if (p == NULL) {
        return sd_err_set(err, SD_EINVAL, "sd_plan_build: pipeline is NULL");
    }
    sd_plan *plan = sd_calloc(1, sizeof(*plan));
    sd__plan_mem *mem = sd_calloc(1, sizeof(*mem));
    if (plan == NULL || mem == NULL) {
        sd_free(plan);
        sd_free(mem);
        return oom(err);
    }
    plan->mem = mem;
    plan->teststream_stage = SD_PLAN_NONE;

    pl_ctx c;
    ctx_init(&c, p, opt);
    c.out = &mem->arena;
    sd_status st = sd__plan_analyze(&c);
    if (st == SD_OK && c.n_problems > 0) {
        st = report_problems(&c, NULL, err);
    } else if (st == SD_OK) {
        st = sd__plan_fuse(&c);
        if (st == SD_OK) {
            st = sd__plan_assemble(&c, plan);
        }
        if (st == SD_OK && c.n_problems > 0) {
            /* Assembly found something validation could not (kept for robustness). */
            st = report_problems(&c, NULL, err);
        }
    }
    if (st == SD_ENOMEM) {
        st = oom(err);
    } else if (st != SD_OK && (err == NULL || err->code == SD_OK)) {
        st = sd_err_set(err, st, "planner failed: %s", sd_status_str(st));
    }
    ctx_deinit(&c);
    if (st != SD_OK) {
        sd_plan_destroy(plan);
        return st;
    }
    *out = plan;
    return SD_OK;
}

void sd_plan_destroy(sd_plan *plan)
{
    if (plan == NULL) {
        return;
    }
    if (plan->mem != NULL) {
        sd_arena_deinit(&plan->mem->arena);
        sd_free(plan->mem);
    }
    sd_free(plan);
}

/* ----------------------------------------------------------------------------------------- */
/* Lookups                                                                                    */
/* ----------------------------------------------------------------------------------------- */

/* Binary search over an array of structs sorted by their first member, a const char *id. */
static const void *find_sorted(const void *base, size_t n, size_t size, const char *id)
{
    if (id == NULL) {
        return NULL;
    }
    size_t lo = 0;
    size_t hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *key;
        memcpy(&key, (const char *)base + mid * size, sizeof(key)); /* first member: the id */
        int r = strcmp(id, key);
        if (r == 0) {
            return (const char *)base + mid * size;
        }
        if (r < 0) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return NULL;
}

const sd_plan_stage *sd_plan_find_stage(const sd_plan *plan, const char *id)
{
    /* Stages are in topological order, not sorted: a linear scan (stage counts are small). */
    for (size_t i = 0; plan != NULL && id != NULL && i < plan->n_stages; i++) {
        if (strcmp(plan->stages[i].id, id) == 0) {
            return &plan->stages[i];
        }
    }
    return NULL;
}

const sd_plan_pcollection *sd_plan_find_pcollection(const sd_plan *plan, const char *id)
{
    if (plan == NULL) {
        return NULL;
    }
    return find_sorted(plan->pcollections, plan->n_pcollections, sizeof(sd_plan_pcollection), id);
}

const sd_plan_coder *sd_plan_find_coder(const sd_plan *plan, const char *id)
{
    if (plan == NULL) {
        return NULL;
    }
    return find_sorted(plan->coders, plan->n_coders, sizeof(sd_plan_coder), id);
}

const sd_plan_windowing *sd_plan_find_windowing(const sd_plan *plan, const char *id)
{
    if (plan == NULL) {
        return NULL;
    }
    return find_sorted(plan->windowings, plan->n_windowings, sizeof(sd_plan_windowing), id);
}

const char *sd_plan_stage_kind_name(sd_plan_stage_kind kind)
{
    switch (kind) {
    case SD_PLAN_STAGE_SDK:
        return "sdk";
    case SD_PLAN_STAGE_IMPULSE:
        return "impulse";
    case SD_PLAN_STAGE_GBK:
        return "gbk";
    case SD_PLAN_STAGE_FLATTEN:
        return "flatten";
    case SD_PLAN_STAGE_TESTSTREAM:
        return "teststream";
    }
    return "unknown";
}

sd_status sd_plan_describe(const sd_plan *plan, sd_buf *out)
{
    for (size_t i = 0; i < plan->n_stages; i++) {
        const sd_plan_stage *s = &plan->stages[i];
        PL_TRY(sd_buf_printf(out, "%s %s", s->id, sd_plan_stage_kind_name(s->kind)));
        if (s->environment_id[0] != '\0') {
            PL_TRY(sd_buf_printf(out, " env=%s", s->environment_id));
        }
        PL_TRY(sd_buf_append_str(out, " ["));
        for (size_t j = 0; j < s->n_transforms; j++) {
            PL_TRY(sd_buf_printf(out, "%s%s", j ? ", " : "", s->transforms[j]));
        }
        PL_TRY(sd_buf_append_str(out, "] in="));
        for (size_t j = 0; j < s->n_inputs; j++) {
            PL_TRY(sd_buf_printf(out, "%s%s", j ? "," : "", s->inputs[j]));
        }
        PL_TRY(sd_buf_append_str(out, " out="));
        for (size_t j = 0; j < s->n_outputs; j++) {
            PL_TRY(sd_buf_printf(out, "%s%s", j ? "," : "", s->outputs[j].pcollection));
        }
        for (size_t j = 0; j < s->n_side_inputs; j++) {
            PL_TRY(sd_buf_printf(out, " side=%s:%s", s->side_inputs[j].local_id,
                                 s->side_inputs[j].pcollection));
        }
        if (s->stateful) {
            PL_TRY(sd_buf_append_str(out, " stateful"));
        }
        if (s->splittable) {
            PL_TRY(sd_buf_append_str(out, " splittable"));
        }
        PL_TRY(sd_buf_append_str(out, "\n"));
    }
    for (size_t i = 0; i < plan->n_pcollections; i++) {
        const sd_plan_pcollection *pc = &plan->pcollections[i];
        PL_TRY(sd_buf_printf(out, "pcollection %s coder=%s wire=%s port=%s windowing=%s\n", pc->id,
                             pc->coder_id, pc->wire_coder_id, pc->port_coder_id,
                             pc->windowing_strategy_id));
    }
    return SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Invariants                                                                                 */
/* ----------------------------------------------------------------------------------------- */

static bool descriptor_has_transform(const pb_pbd *d, const char *id, const char *urn)
{
    for (size_t i = 0; i < d->n_transforms; i++) {
        if (strcmp(d->transforms[i]->key, id) == 0) {
            const pb_transform *t = d->transforms[i]->value;
            return t != NULL && t->spec != NULL && strcmp(t->spec->urn, urn) == 0;
        }
    }
    return false;
}

static bool sorted_unique(const void *base, size_t n, size_t size)
{
    for (size_t i = 1; i < n; i++) {
        const char *a;
        const char *b;
        memcpy(&a, (const char *)base + (i - 1) * size, sizeof(a));
        memcpy(&b, (const char *)base + i * size, sizeof(b));
        if (strcmp(a, b) >= 0) {
            return false;
        }
    }
    return true;
}

const char *sd__plan_check(const sd_plan *plan)
{
    if (plan == NULL || plan->mem == NULL) {
        return "plan or its memory is NULL";
    }
    if (!sorted_unique(plan->pcollections, plan->n_pcollections, sizeof(sd_plan_pcollection))) {
        return "PCollection table not sorted/unique";
    }
    if (!sorted_unique(plan->coders, plan->n_coders, sizeof(sd_plan_coder))) {
        return "coder table not sorted/unique";
    }
    if (!sorted_unique(plan->windowings, plan->n_windowings, sizeof(sd_plan_windowing))) {
        return "windowing table not sorted/unique";
    }
    for (size_t i = 0; i < plan->n_coders; i++) {
        const sd_plan_coder *k = &plan->coders[i];
        for (size_t j = 0; j < k->n_components; j++) {
            if (sd_plan_find_coder(plan, k->components[j]) == NULL) {
                return "coder component missing from the coder table";
            }
        }
    }
    for (size_t i = 0; i < plan->n_pcollections; i++) {
        const sd_plan_pcollection *pc = &plan->pcollections[i];
        if (sd_plan_find_coder(plan, pc->coder_id) == NULL ||
            sd_plan_find_coder(plan, pc->wire_coder_id) == NULL ||
            sd_plan_find_coder(plan, pc->window_coder_id) == NULL ||
            sd_plan_find_coder(plan, pc->port_coder_id) == NULL) {
            return "PCollection coder missing from the coder table";
        }
        if (pc->windowing == NULL ||
            sd_plan_find_windowing(plan, pc->windowing_strategy_id) != pc->windowing) {
            return "PCollection windowing not in the windowing table";
        }
        if (pc->producer_stage != SD_PLAN_NONE && pc->producer_stage >= plan->n_stages) {
            return "PCollection producer stage out of range";
        }
        for (size_t j = 0; j < pc->n_consumers; j++) {
            if (pc->consumers[j].stage >= plan->n_stages) {
                return "PCollection consumer stage out of range";
            }
            if (pc->producer_stage != SD_PLAN_NONE &&
                pc->consumers[j].stage <= pc->producer_stage) {
                return "PCollection consumed by a stage not after its producer";
            }
        }
    }
    for (size_t i = 0; i < plan->n_stages; i++) {
        const sd_plan_stage *s = &plan->stages[i];
        for (size_t j = 0; j < i; j++) {
            if (strcmp(plan->stages[j].id, s->id) == 0) {
                return "duplicate stage id";
            }
        }
        for (size_t j = 0; j < s->n_upstream; j++) {
            if (s->upstream[j] >= i) {
                return "stage upstream not earlier in topological order";
            }
        }
        for (size_t j = 0; j < s->n_inputs; j++) {
            if (sd_plan_find_pcollection(plan, s->inputs[j]) == NULL) {
                return "stage input missing from the PCollection table";
            }
        }
        for (size_t j = 0; j < s->n_outputs; j++) {
            const sd_plan_pcollection *pc =
                sd_plan_find_pcollection(plan, s->outputs[j].pcollection);
            if (pc == NULL) {
                return "stage output missing from the PCollection table";
            }
            if (pc->producer_stage != i) {
                return "stage output names another producer";
            }
            if (strcmp(pc->port_coder_id, s->outputs[j].port_coder_id) != 0) {
                return "stage output port coder differs from the PCollection table";
            }
        }
        for (size_t j = 0; j < s->n_side_inputs; j++) {
            if (sd_plan_find_pcollection(plan, s->side_inputs[j].pcollection) == NULL) {
                return "side input missing from the PCollection table";
            }
        }
        if (s->kind == SD_PLAN_STAGE_SDK) {
            if (s->descriptor == NULL || s->descriptor_bytes.len == 0) {
                return "SDK stage without a descriptor";
            }
            if (strcmp(s->descriptor->id, s->id) != 0) {
                return "descriptor id differs from stage id";
            }
            if (s->n_inputs != 1 || s->source_transform == NULL) {
                return "SDK stage without exactly one main input";
            }
            if (!descriptor_has_transform(s->descriptor, s->source_transform,
                                          SD_URN_RUNNER_SOURCE)) {
                return "descriptor lacks the stage's data source";
            }
            for (size_t j = 0; j < s->n_outputs; j++) {
                if (s->outputs[j].sink_transform == NULL ||
                    !descriptor_has_transform(s->descriptor, s->outputs[j].sink_transform,
                                              SD_URN_RUNNER_SINK)) {
                    return "descriptor lacks a stage output's data sink";
                }
            }
            if (s->descriptor->state_api_service_descriptor == NULL) {
                return "descriptor lacks state_api_service_descriptor";
            }
            for (size_t j = 0; j < s->descriptor->n_coders; j++) {
                if (sd_plan_find_coder(plan, s->descriptor->coders[j]->key) == NULL) {
                    return "descriptor coder missing from the coder table";
                }
            }
            for (size_t j = 0; j < s->descriptor->n_pcollections; j++) {
                const pb_pcoll *pc = s->descriptor->pcollections[j]->value;
                if (pc == NULL || sd_plan_find_coder(plan, pc->coder_id) == NULL) {
                    return "descriptor PCollection coder missing from the coder table";
                }
                const sd_plan_pcollection *tp =
                    sd_plan_find_pcollection(plan, s->descriptor->pcollections[j]->key);
                if (tp != NULL && strcmp(tp->wire_coder_id, pc->coder_id) != 0) {
                    return "boundary PCollection without its wire coder in a descriptor";
                }
            }
        } else if (s->n_transforms != 1 || s->environment_id[0] != '\0') {
            return "runner stage must hold one transform and no environment";
        }
    }
    return NULL;
}
