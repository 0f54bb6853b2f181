/*
 * Sundial: executor: the web view.
 *
 * What the web UI (runner/web) shows of a job, recorded here because only the executor sees
 * the engine, the plan and the pipeline together. Everything in this file is read-only
 * towards the rest of the executor; its one hook is sd__exec_web_observe() at the end of
 * sd__exec_observe(), which already runs after bundles commit (at most every 100 ms) and when
 * a run ends. The web UI's own requests call it too, so a job whose bundles are slow still
 * gets a sample about once a second.
 *
 * The record (web_rec) hangs on the job (sd_job_set_view), not on the run: the run is freed
 * when the job ends, the job is kept in the job history, and its page should still show its
 * last stages and its whole timeline. So the record copies every name it shows into its own
 * allocations (web_alloc) and never points into the plan or the engine.
 *
 *   stage stats     sd_em_stage_info (watermarks, hold, pending, in flight, dropped, timer
 *                   counts); refreshed when a view is asked for and when the run ends
 *   element counts  measured by the runner (sd_em_pcollection_info: the windowed values and
 *                   encoded bytes the engine took into each PCollection between stages, from
 *                   every SDK's data plane alike), and beside them the SDK's
 *                   beam:metric:element_count:v1 per PCOLLECTION label summed over committed
 *                   bundles (r->metrics, scanned incrementally), which also covers the
 *                   PCollections fused inside a stage; an SDK that sends none (the C SDK)
 *                   leaves has_count false
 *   timeline        one sample (wall ms since Run, job clock, every stage's output
 *                   watermark) whenever something changed or a second went by; at most
 *                   `cap` samples: when full, every other old sample goes and the spacing
 *                   between kept samples doubles, so a long job keeps its whole history at a
 *                   coarser grain (generation tells readers that samples went away); the
 *                   newest observation inside the spacing waits as the "head"
 *   marks           changes seen between two observations: the TestStream stage's output
 *                   watermark moving (a watermark event, or its end), the clock moving while
 *                   the TestStream still has events (a processing-time event), or the
 *                   synthetic clock moving otherwise (a jump to a due timer). Element events
 *                   change neither and are not marked. A ring of SD_EXEC_MARKS_MAX.
 *
 * Memory: cap = min(SD_EXEC_TIMELINE_MAX, WEB_WM_BUDGET / stages) samples, so one job's
 * timeline costs at most about 2 MB of watermarks however wide its pipeline is.
 */
#include <stdint.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/time.h"
#include "runner/exec/exec_int.h"
#include "runner/urns/urns.h"

#define WEB_MAGIC        0x57454256u /* "WEBV" */
#define WEB_WM_BUDGET    262144      /* watermark slots per job (8 bytes each) */
#define WEB_MIN_SAMPLES  16
#define WEB_HEARTBEAT_MS 1000
#define WEB_FIRST_GAP_MS 50

typedef struct web_rec {
    uint32_t magic;
    sd_vec owned; /* void *: names and arrays (web_alloc), freed with the record */
    bool failed;  /* a web_alloc failed */
    bool synthetic;
    sd_time clock_ms;
    int64_t elapsed_ms;
    uint64_t bundles_done;
    size_t n_stages;
    sd_exec_view_stage *stages;
    sd_vec pcolls;      /* sd_exec_view_pcoll; names from web_alloc */
    sd_map pcoll_index; /* PCollection id -> (void *)(index + 1) */
    sd_map pnames;      /* PCollection id -> unique name, borrowed from the pipeline; run only */
    sd_map tnames;      /* transform id -> unique name, the same */
    size_t n_em_pcolls;
    size_t *em_pcolls; /* engine PCollection index -> index in pcolls (SIZE_MAX: not shown) */
    size_t metrics_seen;
    size_t teststream; /* stage index, or SIZE_MAX */
    bool observed;
    sd_time last_ts_wm;
    sd_time last_clock;
    size_t cap;
    size_t n_samples;
    sd_exec_sample *samples;
    sd_time *wms;
    bool has_head;
    sd_exec_sample head;
    sd_time *head_wms;
    uint64_t next_seq;
    uint64_t generation;
    int64_t min_gap_ms;
    sd_exec_mark marks[SD_EXEC_MARKS_MAX];
    size_t n_marks;
    uint64_t next_mark_seq;
} web_rec;

static void web_rec_destroy(void *p)
{
    web_rec *w = p;
    if (w == NULL) {
        return;
    }
    for (size_t i = 0; i < w->owned.len; i++) {
        sd_free(*SD_VEC_AT(&w->owned, void *, i));
    }
    sd_vec_deinit(&w->owned);
    sd_vec_deinit(&w->pcolls);
    sd_map_deinit(&w->pcoll_index);
    sd_map_deinit(&w->pnames);
    sd_map_deinit(&w->tnames);
    sd_free(w->samples);
    sd_free(w->wms);
    sd_free(w->head_wms);
    sd_free(w->em_pcolls);
    w->magic = 0;
    sd_free(w);
}

/* Zeroed memory owned by the record. NULL (and w->failed) on out-of-memory. */
static void *web_alloc(web_rec *w, size_t n)
{
    void *p = sd_calloc(1, n == 0 ? 1 : n);
    if (p == NULL || sd_vec_push(&w->owned, &p) != SD_OK) {
        sd_free(p);
        w->failed = true;
        return NULL;
    }
    return p;
}

static char *web_strdup(web_rec *w, const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = web_alloc(w, n);
    if (copy != NULL) {
        memcpy(copy, s, n);
    }
    return copy;
}

/*
 * The user's name for a transform or PCollection id: its unique name in the pipeline, or, for
 * one the planner made from a user transform ("<transform id>/lifted", ".../grouped"), that
 * transform's unique name with the planner's suffix ("SumPerUser/grouped"). NULL when neither
 * (a name of the runner's own). Copied into the record; NULL also on out-of-memory.
 */
static const char *web_user_name(web_rec *w, const sd_map *names, const char *id)
{
    const char *name = sd_map_get_str(names, id);
    if (name != NULL && name[0] != '\0') {
        return web_strdup(w, name);
    }
    for (size_t n = strlen(id); n-- > 0;) {
        if (id[n] != '/') {
            continue;
        }
        const char *base = sd_map_get(&w->tnames, sd_bytes_make((const uint8_t *)id, n));
        if (base != NULL && base[0] != '\0') {
            size_t blen = strlen(base);
            size_t slen = strlen(id + n);
            char *full = web_alloc(w, blen + slen + 1);
            if (full != NULL) {
                memcpy(full, base, blen);
                memcpy(full + blen, id + n, slen + 1);
            }
            return full;
        }
    }
    return NULL;
}

/* The index of PCollection id in w->pcolls, added when new. SIZE_MAX on out-of-memory. */
static size_t web_pcoll_ref(web_rec *w, const char *id)
{
    void *v = sd_map_get_str(&w->pcoll_index, id);
    if (v != NULL) {
        return (size_t)(uintptr_t)v - 1;
    }
    const char *name = web_user_name(w, &w->pnames, id);
    sd_exec_view_pcoll pc = { 0 };
    pc.id = web_strdup(w, id);
    pc.name = name != NULL ? name : pc.id;
    if (pc.id == NULL || pc.name == NULL) {
        return SIZE_MAX;
    }
    size_t index = w->pcolls.len;
    if (sd_vec_push(&w->pcolls, &pc) != SD_OK) {
        return SIZE_MAX;
    }
    if (sd_map_put_str(&w->pcoll_index, id, (void *)(uintptr_t)(index + 1)) != SD_OK) {
        w->pcolls.len--;
        return SIZE_MAX;
    }
    return index;
}

/* Copy a list of PCollection references into the record. False on out-of-memory. */
static bool web_pcoll_list(web_rec *w, const char *const *ids, size_t n, const size_t **out)
{
    size_t *list = web_alloc(w, (n == 0 ? 1 : n) * sizeof(*list));
    if (list == NULL) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        list[i] = web_pcoll_ref(w, ids[i]);
        if (list[i] == SIZE_MAX) {
            return false;
        }
    }
    *out = list;
    return true;
}

/* The record for a run whose engine exists: names, stages and an empty timeline. */
static web_rec *web_rec_build(sd_exec_run *r)
{
    web_rec *w = sd_calloc(1, sizeof(*w));
    if (w == NULL) {
        return NULL;
    }
    w->magic = WEB_MAGIC;
    sd_vec_init(&w->owned, sizeof(void *));
    sd_vec_init(&w->pcolls, sizeof(sd_exec_view_pcoll));
    sd_map_init(&w->pcoll_index, NULL);
    sd_map_init(&w->pnames, NULL);
    sd_map_init(&w->tnames, NULL);
    w->teststream = SIZE_MAX;
    w->next_seq = 1;
    w->next_mark_seq = 1;

    /* The clock as engine_setup chose it. */
    w->synthetic = sd__exec_synthetic_clock(r->ex, r->job);

    const pb_Pipeline *p = sd_job_pipeline(r->job);
    bool ok = true;
    if (p->components != NULL) {
        for (size_t i = 0; ok && i < p->components->n_transforms; i++) {
            const SD_PL(Components__TransformsEntry) *e = p->components->transforms[i];
            if (e->key != NULL && e->value != NULL && e->value->unique_name != NULL) {
                ok = sd_map_put_str(&w->tnames, e->key, e->value->unique_name) == SD_OK;
            }
        }
        for (size_t i = 0; ok && i < p->components->n_pcollections; i++) {
            const SD_PL(Components__PcollectionsEntry) *e = p->components->pcollections[i];
            if (e->key != NULL && e->value != NULL && e->value->unique_name != NULL) {
                ok = sd_map_put_str(&w->pnames, e->key, e->value->unique_name) == SD_OK;
            }
        }
    }
    w->n_stages = sd_em_n_stages(r->em);
    w->stages = web_alloc(w, (w->n_stages == 0 ? 1 : w->n_stages) * sizeof(*w->stages));
    ok = ok && w->stages != NULL;
    for (size_t i = 0; ok && i < w->n_stages; i++) {
        sd_em_stage_stats ss;
        sd_exec_view_stage *vs = &w->stages[i];
        sd_em_stage_info(r->em, i, &ss);
        vs->id = web_strdup(w, ss.id);
        vs->kind = sd_em_stage_kind_name(ss.kind);
        vs->hold = SD_TIME_MAX;
        if (ss.kind == SD_STAGE_TESTSTREAM) {
            w->teststream = i;
        }
        const sd_plan_stage *ps = sd_plan_find_stage(r->plan, ss.id);
        if (vs->id == NULL) {
            ok = false;
            break;
        }
        if (ps == NULL) {
            continue;
        }
        const char **names =
            web_alloc(w, (ps->n_transforms == 0 ? 1 : ps->n_transforms) * sizeof(*names));
        ok = names != NULL;
        for (size_t k = 0; ok && k < ps->n_transforms; k++) {
            /* Transforms of the runner's own (no user name) are left out; a name is listed
             * once (a planner-made transform may map back to one already listed). */
            const char *name = web_user_name(w, &w->tnames, ps->transforms[k]);
            bool seen = name == NULL;
            for (size_t m = 0; !seen && m < vs->n_transforms; m++) {
                seen = strcmp(names[m], name) == 0;
            }
            if (!seen) {
                names[vs->n_transforms++] = name;
            }
        }
        vs->transforms = names;
        const char **outs = web_alloc(w, (ps->n_outputs == 0 ? 1 : ps->n_outputs) * sizeof(*outs));
        ok = ok && outs != NULL;
        for (size_t k = 0; ok && k < ps->n_outputs; k++) {
            outs[k] = ps->outputs[k].pcollection;
        }
        ok = ok && web_pcoll_list(w, ps->inputs, ps->n_inputs, &vs->inputs) &&
             web_pcoll_list(w, outs, ps->n_outputs, &vs->outputs);
        vs->n_inputs = ps->n_inputs;
        vs->n_outputs = ps->n_outputs;
    }
    /* The engine's PCollections the page shows (the stages' inputs and outputs). */
    w->n_em_pcolls = sd_em_n_pcollections(r->em);
    w->em_pcolls = sd_calloc(w->n_em_pcolls == 0 ? 1 : w->n_em_pcolls, sizeof(*w->em_pcolls));
    ok = ok && w->em_pcolls != NULL;
    for (size_t i = 0; ok && i < w->n_em_pcolls; i++) {
        sd_em_pcoll_stats ps;
        sd_em_pcollection_info(r->em, i, &ps);
        void *v = sd_map_get_str(&w->pcoll_index, ps.id);
        w->em_pcolls[i] = v != NULL ? (size_t)(uintptr_t)v - 1 : SIZE_MAX;
    }
    size_t per = w->n_stages == 0 ? 1 : w->n_stages;
    w->cap = WEB_WM_BUDGET / per;
    w->cap = w->cap > SD_EXEC_TIMELINE_MAX ? SD_EXEC_TIMELINE_MAX : w->cap;
    w->cap = w->cap < WEB_MIN_SAMPLES ? WEB_MIN_SAMPLES : w->cap;
    w->samples = sd_calloc(w->cap, sizeof(*w->samples));
    w->wms = sd_calloc(w->cap * per, sizeof(*w->wms));
    w->head_wms = sd_calloc(per, sizeof(*w->head_wms));
    if (!ok || w->failed || w->samples == NULL || w->wms == NULL || w->head_wms == NULL) {
        web_rec_destroy(w);
        return NULL;
    }
    return w;
}

/* Add the element counts of bundles committed since the last look. */
static void web_count_elements(sd_exec_run *r, web_rec *w)
{
    for (; w->metrics_seen < r->metrics.len; w->metrics_seen++) {
        const sd_buf *b = SD_VEC_AT(&r->metrics, sd_buf, w->metrics_seen);
        pb_MonitoringInfo *mi = (pb_MonitoringInfo *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__monitoring_info__descriptor, NULL, b->len,
            b->data);
        if (mi == NULL) {
            continue;
        }
        const char *pcoll = NULL;
        for (size_t k = 0; k < mi->n_labels; k++) {
            if (mi->labels[k]->key != NULL &&
                strcmp(mi->labels[k]->key, SD_LABEL_PCOLLECTION) == 0) {
                pcoll = mi->labels[k]->value;
            }
        }
        uint64_t v = 0;
        sd_reader rd = sd_reader_make(sd_bytes_make(mi->payload.data, mi->payload.len));
        if (mi->urn != NULL && strcmp(mi->urn, SD_URN_METRIC_ELEMENT_COUNT) == 0 && pcoll != NULL &&
            sd_reader_varint(&rd, &v) == SD_OK) {
            size_t index = web_pcoll_ref(w, pcoll);
            if (index != SIZE_MAX) {
                sd_exec_view_pcoll *pc = SD_VEC_AT(&w->pcolls, sd_exec_view_pcoll, index);
                pc->has_count = true;
                pc->elements += (int64_t)v;
            }
        }
        protobuf_c_message_free_unpacked(&mi->base, NULL);
    }
}

/* The runner's own counts: what the engine took into each PCollection the page shows. */
static void web_count_measured(sd_exec_run *r, web_rec *w)
{
    size_t n = sd_em_n_pcollections(r->em);
    for (size_t i = 0; i < n && i < w->n_em_pcolls; i++) {
        if (w->em_pcolls[i] == SIZE_MAX) {
            continue;
        }
        sd_em_pcoll_stats ps;
        sd_em_pcollection_info(r->em, i, &ps);
        sd_exec_view_pcoll *pc = SD_VEC_AT(&w->pcolls, sd_exec_view_pcoll, w->em_pcolls[i]);
        pc->measured = true;
        pc->measured_elements = ps.elements;
        pc->measured_bytes = ps.bytes;
    }
}

/* Stage stats, from sd_em_stage_info. */
static void web_refresh_stats(sd_exec_run *r, web_rec *w)
{
    size_t n = sd_em_n_stages(r->em);
    for (size_t i = 0; i < n && i < w->n_stages; i++) {
        sd_em_stage_stats ss;
        sd_exec_view_stage *vs = &w->stages[i];
        sd_em_stage_info(r->em, i, &ss);
        vs->input_wm = ss.input_wm;
        vs->output_wm = ss.output_wm;
        vs->pending = ss.pending;
        vs->in_progress = ss.in_progress;
        vs->dropped_late = ss.dropped_late;
        vs->hold = ss.hold;
        vs->et_timers = ss.et_timers;
        vs->pt_timers = ss.pt_timers;
    }
    web_count_measured(r, w);
}

static void web_mark(web_rec *w, sd_exec_mark_kind kind, int64_t wall, sd_time from, sd_time to)
{
    if (w->n_marks == SD_EXEC_MARKS_MAX) {
        memmove(&w->marks[0], &w->marks[1], (SD_EXEC_MARKS_MAX - 1) * sizeof(w->marks[0]));
        w->n_marks--;
    }
    sd_exec_mark *m = &w->marks[w->n_marks++];
    m->seq = w->next_mark_seq++;
    m->kind = kind;
    m->wall_ms = wall;
    m->clock_ms = w->clock_ms;
    m->from = from;
    m->to = to;
}

/* Keep every other sample (the first and the last stay); the spacing doubles. */
static void web_thin(web_rec *w)
{
    size_t per = w->n_stages == 0 ? 1 : w->n_stages;
    size_t k = 0;
    for (size_t i = 0; i < w->n_samples; i++) {
        if (i % 2 == 0 || i + 1 == w->n_samples) {
            w->samples[k] = w->samples[i];
            memmove(&w->wms[k * per], &w->wms[i * per], per * sizeof(*w->wms));
            k++;
        }
    }
    w->n_samples = k;
    w->generation++;
    w->min_gap_ms = w->min_gap_ms == 0 ? WEB_FIRST_GAP_MS : w->min_gap_ms * 2;
}

/* Record what the engine shows now: marks, then a sample (or the head). */
static void web_sample(sd_exec_run *r, web_rec *w)
{
    size_t per = w->n_stages == 0 ? 1 : w->n_stages;
    int64_t wall = (sd_mono_now_ns() - r->started_ns) / 1000000;
    sd_time clock = sd_em_clock_now(r->em);
    bool changed = !w->observed || clock != w->clock_ms;
    w->clock_ms = clock;
    w->elapsed_ms = wall;
    w->bundles_done = r->bundles_done;
    for (size_t i = 0; i < w->n_stages; i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        changed = changed || ss.output_wm != w->stages[i].output_wm;
        w->stages[i].input_wm = ss.input_wm;
        w->stages[i].output_wm = ss.output_wm;
        w->stages[i].pending = ss.pending;
        w->stages[i].in_progress = ss.in_progress;
        w->stages[i].dropped_late = ss.dropped_late;
        w->head_wms[i] = ss.output_wm;
    }
    sd_time ts_wm = w->teststream != SIZE_MAX ? w->stages[w->teststream].output_wm : SD_TIME_MAX;
    if (w->observed) {
        bool ts_active = w->teststream != SIZE_MAX && w->last_ts_wm < SD_TIME_MAX;
        if (clock != w->last_clock) {
            if (ts_active) {
                web_mark(w, SD_EXEC_MARK_TS_CLOCK, wall, w->last_clock, clock);
            } else if (w->synthetic) {
                web_mark(w, SD_EXEC_MARK_CLOCK_JUMP, wall, w->last_clock, clock);
            }
        }
        if (ts_wm != w->last_ts_wm) {
            web_mark(w, ts_wm >= SD_TIME_MAX ? SD_EXEC_MARK_TS_END : SD_EXEC_MARK_TS_WATERMARK,
                     wall, w->last_ts_wm, ts_wm);
        }
    }
    w->observed = true;
    w->last_clock = clock;
    w->last_ts_wm = ts_wm;

    w->head.wall_ms = wall;
    w->head.clock_ms = clock;
    const sd_exec_sample *last = w->n_samples > 0 ? &w->samples[w->n_samples - 1] : NULL;
    int64_t since = last != NULL ? wall - last->wall_ms : INT64_MAX;
    if (!changed && !w->has_head && since < WEB_HEARTBEAT_MS) {
        return;
    }
    if (last != NULL && since < w->min_gap_ms) {
        w->has_head = true; /* kept once the spacing allows */
        return;
    }
    if (w->n_samples == w->cap) {
        web_thin(w);
    }
    w->head.seq = w->next_seq++;
    w->samples[w->n_samples] = w->head;
    memcpy(&w->wms[w->n_samples * per], w->head_wms, w->n_stages * sizeof(*w->wms));
    w->n_samples++;
    w->has_head = false;
}

void sd__exec_web_metrics_merged(sd_exec_run *r, size_t n_after)
{
    web_rec *w = r->job != NULL ? sd_job_view(r->job) : NULL;
    if (w == NULL || w->magic != WEB_MAGIC) {
        return; /* a record made later counts the merged reports */
    }
    web_count_elements(r, w);
    w->metrics_seen = n_after;
}

/* The hook in sd__exec_observe(): the record is made at the first look at a started engine. */
void sd__exec_web_observe(sd_exec_run *r, bool final)
{
    if (r->em == NULL) {
        return;
    }
    web_rec *w = sd_job_view(r->job);
    if (w == NULL) {
        w = web_rec_build(r);
        if (w == NULL) {
            return; /* out of memory: the UI shows no stages for this job */
        }
        sd_job_set_view(r->job, w, web_rec_destroy);
    }
    if (w->magic != WEB_MAGIC) {
        return;
    }
    web_count_elements(r, w);
    web_count_measured(r, w);
    web_sample(r, w);
    if (final) {
        web_refresh_stats(r, w);
        if (w->has_head) {
            /* The last observation is a sample of its own, whatever the spacing. */
            w->min_gap_ms = 0;
            web_sample(r, w);
        }
        /* No more reports come; the names were copied where they are shown. */
        sd_map_deinit(&w->pnames);
        sd_map_deinit(&w->tnames);
    }
}

/* The record of job, refreshed first when its run is live. OUT: live. */
static web_rec *web_find(sd_exec *ex, sd_job *job, bool *live)
{
    sd_exec_run *r = ex != NULL ? sd_map_get_str(&ex->runs, sd_job_id(job)) : NULL;
    *live = false;
    if (r != NULL && r->em != NULL && !r->finishing) {
        sd__exec_web_observe(r, false);
        web_rec *w = sd_job_view(job);
        if (w != NULL && w->magic == WEB_MAGIC) {
            web_refresh_stats(r, w);
            *live = true;
            return w;
        }
    }
    web_rec *w = sd_job_view(job);
    return w != NULL && w->magic == WEB_MAGIC ? w : NULL;
}

sd_status sd_exec_view_get(sd_exec *ex, sd_job *job, sd_exec_view *out)
{
    bool live;
    web_rec *w = web_find(ex, job, &live);
    memset(out, 0, sizeof(*out));
    if (w == NULL) {
        return SD_ENOTFOUND;
    }
    out->live = live;
    out->synthetic = w->synthetic;
    out->clock_ms = w->clock_ms;
    out->elapsed_ms = w->elapsed_ms;
    out->bundles_done = w->bundles_done;
    out->n_stages = w->n_stages;
    out->stages = w->stages;
    out->n_pcolls = w->pcolls.len;
    out->pcolls = w->pcolls.items;
    return SD_OK;
}

sd_status sd_exec_timeline_get(sd_exec *ex, sd_job *job, sd_exec_timeline *out)
{
    bool live;
    web_rec *w = web_find(ex, job, &live);
    memset(out, 0, sizeof(*out));
    if (w == NULL) {
        return SD_ENOTFOUND;
    }
    out->generation = w->generation;
    out->n_stages = w->n_stages;
    out->n_samples = w->n_samples;
    out->samples = w->samples;
    out->wms = w->wms;
    out->has_head = w->has_head;
    out->head = w->head;
    out->head_wms = w->head_wms;
    out->n_marks = w->n_marks;
    out->marks = w->marks;
    return SD_OK;
}
