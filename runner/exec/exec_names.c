/*
 * Sundial: executor: the user's names for what the runner reports.
 *
 * Runner metrics and logs speak of stage ids ("stage-003") and PCollection ids ("pc_17",
 * "ref_PCollection_PCollection_5"), which mean nothing to whoever wrote the pipeline. This file
 * maps them to the names the user gave, from the job's pipeline proto:
 *
 *   a PCollection   its unique_name; or, for one the planner made from a user transform
 *                   ("<transform id>/lifted", ".../grouped"), that transform's unique name
 *                   with the planner's suffix ("SumPerUser/grouped"); else none;
 *   a stage         the unique names of the user transforms fused into it, in topological
 *                   order, first and last ("Split words .. Count/lifted"), or the one;
 *                   runner-made transforms without a user name are skipped.
 *
 * The maps (id -> unique name, borrowed from the pipeline, which outlives the run) are built
 * on first use, once per run; composed names are made once and owned by the run
 * (sd_exec_names_deinit frees them). Nothing here is on a hot path: the metrics that carry
 * these labels are published at most every 100 ms.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/exec/exec_int.h"

/* Keep a composed name for the run's life; NULL on out-of-memory. */
static const char *keep(sd_exec_names *n, char *s)
{
    if (s == NULL) {
        return NULL;
    }
    if (sd_vec_push(&n->owned, &s) != SD_OK) {
        sd_free(s);
        return NULL;
    }
    return s;
}

static void build(sd_exec_names *n, const pb_Pipeline *p)
{
    sd_map_init(&n->pnames, NULL);
    sd_map_init(&n->tnames, NULL);
    sd_map_init(&n->composed, NULL);
    sd_vec_init(&n->owned, sizeof(char *));
    n->ready = true;
    const SD_PL(Components) *c = p != NULL ? p->components : NULL;
    for (size_t i = 0; c != NULL && i < c->n_transforms; i++) {
        const SD_PL(Components__TransformsEntry) *e = c->transforms[i];
        if (e->key != NULL && e->value != NULL && e->value->unique_name != NULL &&
            e->value->unique_name[0] != '\0' &&
            sd_map_put_str(&n->tnames, e->key, e->value->unique_name) != SD_OK) {
            return; /* out of memory: fewer names, never wrong ones */
        }
    }
    for (size_t i = 0; c != NULL && i < c->n_pcollections; i++) {
        const SD_PL(Components__PcollectionsEntry) *e = c->pcollections[i];
        if (e->key != NULL && e->value != NULL && e->value->unique_name != NULL &&
            e->value->unique_name[0] != '\0' &&
            sd_map_put_str(&n->pnames, e->key, e->value->unique_name) != SD_OK) {
            return;
        }
    }
}

/* The user's name for a transform or PCollection id (names: the matching map), or NULL. */
static const char *user_name(sd_exec_names *n, const sd_map *names, const char *id)
{
    const char *name = sd_map_get_str(names, id);
    if (name != NULL) {
        return name;
    }
    const char *made = sd_map_get_str(&n->composed, id);
    if (made != NULL) {
        return made;
    }
    for (size_t len = strlen(id); len-- > 0;) {
        if (id[len] != '/') {
            continue;
        }
        const char *base = sd_map_get(&n->tnames, sd_bytes_make((const uint8_t *)id, len));
        if (base == NULL) {
            continue;
        }
        made = keep(n, sd_asprintf("%s%s", base, id + len));
        if (made != NULL && sd_map_put_str(&n->composed, id, (void *)made) != SD_OK) {
            return NULL;
        }
        return made;
    }
    return NULL;
}

const char *sd__exec_pcoll_name(sd_exec_run *r, const char *id)
{
    if (!r->names.ready) {
        build(&r->names, sd_job_pipeline(r->job));
    }
    return user_name(&r->names, &r->names.pnames, id);
}

const char *sd__exec_transform_name(sd_exec_run *r, const char *transform_id)
{
    if (!r->names.ready) {
        build(&r->names, sd_job_pipeline(r->job));
    }
    return user_name(&r->names, &r->names.tnames, transform_id);
}

const char *sd__exec_stage_name(sd_exec_run *r, const char *stage_id)
{
    sd_exec_names *n = &r->names;
    if (!n->ready) {
        build(n, sd_job_pipeline(r->job));
    }
    const char *made = sd_map_get_str(&n->composed, stage_id);
    if (made != NULL) {
        return made;
    }
    const sd_plan_stage *ps = r->plan != NULL ? sd_plan_find_stage(r->plan, stage_id) : NULL;
    const char *first = NULL, *last = NULL;
    for (size_t k = 0; ps != NULL && k < ps->n_transforms; k++) {
        const char *name = user_name(n, &n->tnames, ps->transforms[k]);
        if (name != NULL) {
            first = first != NULL ? first : name;
            last = name;
        }
    }
    if (first == NULL) {
        return NULL;
    }
    made = keep(n, first == last ? sd_strdup(first) : sd_asprintf("%s .. %s", first, last));
    if (made != NULL && sd_map_put_str(&n->composed, stage_id, (void *)made) != SD_OK) {
        return NULL;
    }
    return made;
}

void sd__exec_names_deinit(sd_exec_names *n)
{
    if (!n->ready) {
        return;
    }
    sd_map_deinit(&n->pnames);
    sd_map_deinit(&n->tnames);
    sd_map_deinit(&n->composed);
    for (size_t i = 0; i < n->owned.len; i++) {
        sd_free(*SD_VEC_AT(&n->owned, char *, i));
    }
    sd_vec_deinit(&n->owned);
    n->ready = false;
}
