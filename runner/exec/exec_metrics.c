/*
 * Sundial: executor: monitoring infos.
 *
 * Two kinds of metrics reach a job's GetJobMetrics. The SDK's: every ProcessBundleResponse's
 * monitoring infos are kept packed on the run (r->metrics) as the bundle's response arrives,
 * merged into one per metric whenever they pile up (merge_kept: a streaming job's bundles
 * report for hours), and published as the job's committed metrics, merged, when the run ends
 * (exec_metrics_merge.c; the web view also scans them for element counts). The runner's own: stage
 * watermarks, the job clock and dropped-late counts, published as attempted metrics after
 * bundles commit (at most every 100 ms, see sd__exec_bundle_maybe_complete) and at the end,
 * so watermarks and the clock are visible while a job runs. sd__exec_observe() is also the
 * hook that feeds the web view (exec_web.c).
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/exec/exec_int.h"
#include "runner/urns/urns.h"

void sd__exec_gauge_free(void *v)
{
    sd_buf_deinit(v);
    sd_free(v);
}

/* The latest-wins identity of a gauge: its URN and labels, as one string. */
static char *gauge_key(const pb_MonitoringInfo *mi)
{
    sd_buf k;
    sd_buf_init(&k, 0);
    sd_status st = sd_buf_append_str(&k, mi->urn);
    for (size_t i = 0; i < mi->n_labels && st == SD_OK; i++) {
        st = sd_buf_printf(&k, "\n%s=%s", mi->labels[i]->key, mi->labels[i]->value);
    }
    char *out = st == SD_OK ? sd_strndup((const char *)k.data, k.len) : NULL;
    sd_buf_deinit(&k);
    return out;
}

/* The timestamp of a packed latest_int64 payload (its first varint), or -1. */
static int64_t gauge_ts(const uint8_t *p, size_t n)
{
    sd_reader r = sd_reader_make(sd_bytes_make(p, n));
    uint64_t ts;
    return sd_reader_varint(&r, &ts) == SD_OK ? (int64_t)ts : -1;
}

/*
 * An SDK's latest_int64 (Beam's gauges: user latest_int64, Sundial's partition watermarks)
 * also goes to the run's gauges, the latest per URN and labels, which the runner publishes
 * with its own metrics (GetJobMetrics.attempted) while the job runs — the committed metrics,
 * every bundle's, come only at the end. The payload's timestamp decides which is latest; an
 * equal one replaces (bundles commit in order).
 */
static void keep_gauge(sd_exec_run *r, const pb_MonitoringInfo *mi, const sd_buf *packed)
{
    if (mi->type == NULL || strcmp(mi->type, SD_URN_METRIC_TYPE_LATEST_INT64) != 0 ||
        mi->urn == NULL) {
        return;
    }
    char *key = gauge_key(mi);
    if (key == NULL) {
        return;
    }
    sd_buf *old = sd_map_get_str(&r->gauges, key);
    if (old != NULL) {
        pb_MonitoringInfo *prev = (pb_MonitoringInfo *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__monitoring_info__descriptor, NULL, old->len,
            old->data);
        int64_t prev_ts = prev != NULL ? gauge_ts(prev->payload.data, prev->payload.len) : -1;
        if (prev != NULL) {
            protobuf_c_message_free_unpacked(&prev->base, NULL);
        }
        if (gauge_ts(mi->payload.data, mi->payload.len) < prev_ts) {
            sd_free(key);
            return;
        }
    }
    sd_buf *copy = sd_malloc(sizeof(*copy));
    if (copy != NULL) {
        sd_buf_init(copy, 0);
        if (sd_buf_append_bytes(copy, sd_buf_bytes(packed)) != SD_OK ||
            sd_map_put_str(&r->gauges, key, copy) != SD_OK) {
            sd__exec_gauge_free(copy);
        }
    }
    sd_free(key);
}

/* Reports kept before the first merge; later, twice what the last merge left. */
#define METRICS_MERGE_MIN 4096

/* The kept reports, unpacked (*n of them; NULL on failure, or when there are none). */
static pb_MonitoringInfo **unpack_kept(const sd_exec_run *r, size_t *n)
{
    pb_MonitoringInfo **infos = sd_calloc(r->metrics.len == 0 ? 1 : r->metrics.len, sizeof(*infos));
    *n = 0;
    for (size_t i = 0; infos != NULL && i < r->metrics.len; i++) {
        const sd_buf *b = SD_VEC_AT(&r->metrics, sd_buf, i);
        pb_MonitoringInfo *mi = (pb_MonitoringInfo *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__monitoring_info__descriptor, NULL, b->len,
            b->data);
        if (mi != NULL) {
            infos[(*n)++] = mi;
        }
    }
    return infos;
}

static void free_unpacked(pb_MonitoringInfo **infos, size_t n)
{
    for (size_t i = 0; infos != NULL && i < n; i++) {
        protobuf_c_message_free_unpacked(&infos[i]->base, NULL);
    }
    sd_free(infos);
}

/*
 * Replace the kept reports by one per metric (exec_metrics_merge.c, pass_latest). Memory then
 * grows with the number of distinct metrics, not with the bundles run. On failure the reports
 * stay as they are (the next try comes after as many again).
 */
static void merge_kept(sd_exec_run *r)
{
    size_t n = 0, n_out = 0;
    pb_MonitoringInfo **infos = unpack_kept(r, &n);
    pb_MonitoringInfo **out = sd_calloc(n == 0 ? 1 : n, sizeof(*out)); /* merge compacts it */
    sd_exec_merged merged;
    sd_vec packed;
    sd_vec_init(&packed, sizeof(sd_buf));
    r->metrics_merge_at = 2 * r->metrics.len;
    if (infos != NULL && out != NULL) {
        memcpy(out, infos, n * sizeof(*out));
    }
    if (infos == NULL || out == NULL ||
        sd__exec_metrics_merge(out, n, true, &n_out, &merged) != SD_OK) {
        free_unpacked(infos, n);
        sd_free(out);
        return;
    }
    sd_status st = sd_vec_reserve(&packed, n_out);
    for (size_t i = 0; i < n_out && st == SD_OK; i++) {
        sd_buf b;
        sd_buf_init(&b, 0);
        st = sd_fnapi_pb_pack(&out[i]->base, &b);
        st = st == SD_OK ? sd_vec_push(&packed, &b) : st;
        if (st != SD_OK) {
            sd_buf_deinit(&b);
        }
    }
    sd__exec_metrics_merged_release(&merged);
    free_unpacked(infos, n);
    sd_free(out);
    if (st != SD_OK) {
        for (size_t i = 0; i < packed.len; i++) {
            sd_buf_deinit(SD_VEC_AT(&packed, sd_buf, i));
        }
        sd_vec_deinit(&packed);
        return;
    }
    sd__exec_web_metrics_merged(r, packed.len);
    for (size_t i = 0; i < r->metrics.len; i++) {
        sd_buf_deinit(SD_VEC_AT(&r->metrics, sd_buf, i));
    }
    sd_vec_deinit(&r->metrics);
    r->metrics = packed;
    r->metrics_merged = true;
    r->metrics_merge_at = SD_MAX(METRICS_MERGE_MIN, 2 * packed.len);
}

void sd__exec_metrics_add(sd_exec_run *r, const pb_MonitoringInfo *mi)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    if (sd_fnapi_pb_pack(&mi->base, &b) != SD_OK) {
        sd_buf_deinit(&b);
        return;
    }
    keep_gauge(r, mi, &b);
    if (sd_vec_push(&r->metrics, &b) != SD_OK) {
        sd_buf_deinit(&b);
        return;
    }
    if (r->metrics.len >= SD_MAX(METRICS_MERGE_MIN, r->metrics_merge_at)) {
        merge_kept(r);
    }
}

/*
 * Runner metrics, so watermarks and the clock are visible while a job runs (GetJobMetrics
 * .attempted, refreshed as bundles commit) and what the runner dropped is visible at the end:
 *   beam:metric:sundial:input_watermark:v1 / output_watermark:v1   latest_int64, SUNDIAL_STAGE =
 *       stage id (payload: varint wall ms, varint watermark ms)
 *   beam:metric:sundial:clock:v1                                    latest_int64, the job clock
 *   beam:metric:sundial:dropped_late_elements:v1                    sum_int64, SUNDIAL_STAGE
 * None carries PTRANSFORM or PCOLLECTION: a client files metrics by those (Beam's Go SDK logs
 * "unknown metric type" for each URN it does not know that has one; without them it drops the
 * metric silently), and a stage is the runner's, not a transform of the pipeline.
 */
typedef struct runner_metrics {
    sd_vec infos;    /* pb_MonitoringInfo* (heap), with their label arrays */
    sd_vec payloads; /* sd_buf* */
} runner_metrics;

/* One label of a runner metric: key and value are borrowed (static, or the run's strings). */
typedef struct rm_label {
    const char *key;
    const char *value; /* NULL: no such label */
} rm_label;

/*
 * Add a monitoring info with up to two labels and a payload of n varints (latest_int64: wall ms
 * and value; sum_int64: the value; distribution_int64: count, sum, min, max). A failed
 * allocation drops this one metric: metrics are best-effort, the job goes on.
 */
static void rm_push(runner_metrics *rm,
                    const char *urn,
                    const char *type,
                    rm_label l0,
                    rm_label l1,
                    const int64_t *values,
                    size_t n)
{
    pb_MonitoringInfo *mi = sd_calloc(1, sizeof(*mi));
    SD_PL(MonitoringInfo__LabelsEntry) *label = sd_calloc(2, sizeof(*label));
    SD_PL(MonitoringInfo__LabelsEntry) **labels = sd_calloc(2, sizeof(*labels));
    sd_buf *payload = sd_malloc(sizeof(*payload));
    if (mi == NULL || label == NULL || labels == NULL || payload == NULL) {
        goto fail;
    }
    org__apache__beam__model__pipeline__v1__monitoring_info__init(mi);
    sd_buf_init(payload, 0);
    sd_status rc = SD_OK;
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        rc = sd_buf_put_varint(payload, (uint64_t)values[i]);
    }
    if (rc != SD_OK || sd_vec_push(&rm->payloads, &payload) != SD_OK) {
        sd_buf_deinit(payload);
        goto fail;
    }
    mi->urn = (char *)urn;
    mi->type = (char *)type;
    mi->payload.data = payload->data;
    mi->payload.len = payload->len;
    const rm_label ls[2] = { l0, l1 };
    for (size_t i = 0; i < 2; i++) {
        if (ls[i].key == NULL || ls[i].value == NULL) {
            continue;
        }
        SD_PL(MonitoringInfo__LabelsEntry) *e = &label[mi->n_labels];
        org__apache__beam__model__pipeline__v1__monitoring_info__labels_entry__init(e);
        e->key = (char *)ls[i].key;
        e->value = (char *)ls[i].value;
        labels[mi->n_labels++] = e;
    }
    mi->labels = labels;
    if (mi->n_labels == 0) {
        sd_free(label); /* labels[0], the block's start, is what rm_deinit frees */
        label = NULL;
    }
    if (sd_vec_push(&rm->infos, &mi) == SD_OK) {
        return;
    }
    payload = NULL; /* owned by rm->payloads now */
fail:
    sd_free(mi);
    sd_free(label);
    sd_free(labels);
    sd_free(payload);
}

/* rm_push with one label (or none) and one or two values, as the stage metrics are. */
static void rm_add(runner_metrics *rm,
                   const char *urn,
                   const char *type,
                   const char *stage,
                   int64_t a,
                   int64_t b,
                   bool two)
{
    const int64_t v[2] = { a, b };
    rm_push(rm, urn, type, (rm_label){ SD_LABEL_SUNDIAL_STAGE, stage }, (rm_label){ NULL, NULL }, v,
            two ? 2 : 1);
}

static void rm_deinit(runner_metrics *rm)
{
    for (size_t i = 0; i < rm->infos.len; i++) {
        pb_MonitoringInfo *mi = *SD_VEC_AT(&rm->infos, pb_MonitoringInfo *, i);
        sd_free(mi->labels[0]); /* the label block (NULL without labels) */
        sd_free(mi->labels);
        sd_free(mi);
    }
    for (size_t i = 0; i < rm->payloads.len; i++) {
        sd_buf *b = *SD_VEC_AT(&rm->payloads, sd_buf *, i);
        sd_buf_deinit(b);
        sd_free(b);
    }
    sd_vec_deinit(&rm->infos);
    sd_vec_deinit(&rm->payloads);
}

/* The label that carries a user's name for what a metric is about (the PCollection's unique
 * name in the pipeline), next to Beam's PCOLLECTION id label. */
#define SD_LABEL_SUNDIAL_NAME "SUNDIAL_NAME"

/*
 * Progress per PCollection the runner sees (stage inputs and outputs), while the job runs:
 *   beam:metric:element_count:v1      sum_int64, PCOLLECTION = id, SUNDIAL_NAME = unique name
 *   beam:metric:sampled_byte_size:v1  distribution_int64 of element sizes (count, sum, min,
 *                                     max), every element measured (not sampled)
 * Counts are windowed values as the engine holds them (an element in two windows counts
 * twice). PCollections inside a fused stage are the SDK's to count (its own monitoring infos).
 */
static void add_pcoll_metrics(sd_exec_run *r, runner_metrics *rm)
{
    for (size_t i = 0; i < sd_em_n_pcollections(r->em); i++) {
        sd_em_pcoll_stats ps;
        sd_em_pcollection_info(r->em, i, &ps);
        rm_label id = { SD_LABEL_PCOLLECTION, ps.id };
        rm_label name = { SD_LABEL_SUNDIAL_NAME, sd__exec_pcoll_name(r, ps.id) };
        int64_t count = (int64_t)SD_MIN(ps.elements, (uint64_t)INT64_MAX);
        int64_t sum = (int64_t)SD_MIN(ps.bytes, (uint64_t)INT64_MAX);
        const int64_t dist[4] = { count, sum, (int64_t)ps.min_bytes, (int64_t)ps.max_bytes };
        rm_push(rm, SD_URN_METRIC_ELEMENT_COUNT, SD_URN_METRIC_TYPE_SUM_INT64, id, name, &count, 1);
        rm_push(rm, SD_URN_METRIC_SAMPLED_BYTE_SIZE, SD_URN_METRIC_TYPE_DISTRIBUTION_INT64, id,
                name, dist, 4);
    }
}

/* Stage watermarks and the job clock (attempted); dropped-late counts (both). */
void sd__exec_observe(sd_exec_run *r, bool final)
{
    runner_metrics rm;
    int64_t now = sd_wall_now_ms();
    if (r->em == NULL) {
        return;
    }
    sd_vec_init(&rm.infos, sizeof(pb_MonitoringInfo *));
    sd_vec_init(&rm.payloads, sizeof(sd_buf *));
    for (size_t i = 0; i < sd_em_n_stages(r->em); i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        const int64_t in_wm[2] = { now, ss.input_wm }, out_wm[2] = { now, ss.output_wm };
        rm_label stage = { SD_LABEL_SUNDIAL_STAGE, ss.id };
        rm_label name = { SD_LABEL_SUNDIAL_NAME, sd__exec_stage_name(r, ss.id) };
        rm_push(&rm, SD_URN_METRIC_SUNDIAL_INPUT_WATERMARK, SD_URN_METRIC_TYPE_LATEST_INT64, stage,
                name, in_wm, 2);
        rm_push(&rm, SD_URN_METRIC_SUNDIAL_OUTPUT_WATERMARK, SD_URN_METRIC_TYPE_LATEST_INT64, stage,
                name, out_wm, 2);
        if (ss.dropped_late > 0) {
            rm_add(&rm, SD_URN_METRIC_SUNDIAL_DROPPED_LATE, SD_URN_METRIC_TYPE_SUM_INT64, ss.id,
                   (int64_t)ss.dropped_late, 0, false);
        }
    }
    rm_add(&rm, SD_URN_METRIC_SUNDIAL_CLOCK, SD_URN_METRIC_TYPE_LATEST_INT64, NULL, now,
           sd_em_clock_now(r->em), true);
    add_pcoll_metrics(r, &rm);
    /* The SDKs' gauges (latest each), unpacked for the call and freed after it. */
    size_t n_own = rm.infos.len;
    size_t it = 0;
    sd_bytes gk;
    void *gv;
    while (sd_map_next(&r->gauges, &it, &gk, &gv)) {
        const sd_buf *g = gv;
        pb_MonitoringInfo *mi = (pb_MonitoringInfo *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__monitoring_info__descriptor, NULL, g->len,
            g->data);
        if (mi != NULL && sd_vec_push(&rm.infos, &mi) != SD_OK) {
            protobuf_c_message_free_unpacked(&mi->base, NULL);
        }
    }
    if (sd_job_set_attempted_metrics(r->job, (const pb_MonitoringInfo *const *)rm.infos.items,
                                     rm.infos.len) != SD_OK) {
        SD_WARN("exec", "job %s: could not record runner metrics", r->job_id);
    }
    for (size_t i = n_own; i < rm.infos.len; i++) {
        protobuf_c_message_free_unpacked(&(*SD_VEC_AT(&rm.infos, pb_MonitoringInfo *, i))->base,
                                         NULL);
    }
    rm.infos.len = n_own;
    if (final) {
        /* Dropped-late counts also go with the committed metrics. */
        for (size_t i = 0; i < rm.infos.len; i++) {
            pb_MonitoringInfo *mi = *SD_VEC_AT(&rm.infos, pb_MonitoringInfo *, i);
            if (strcmp(mi->urn, SD_URN_METRIC_SUNDIAL_DROPPED_LATE) == 0) {
                sd__exec_metrics_add(r, mi);
            }
        }
    }
    rm_deinit(&rm);
    r->observed_ms = sd_mono_now_ms();
    sd__exec_web_observe(r, final);
    if (final) {
        sd__exec_trace_keep(r);
    }
}

/* Hand the collected monitoring infos to the job, one per metric (exec_metrics_merge.c). */
void sd__exec_publish_metrics(sd_exec_run *r)
{
    size_t k = 0, n_pub = 0;
    pb_MonitoringInfo **infos = unpack_kept(r, &k);
    pb_MonitoringInfo **pub = sd_calloc(k == 0 ? 1 : k, sizeof(*pub));
    sd_exec_merged merged;
    if (infos == NULL || pub == NULL) {
        free_unpacked(infos, k);
        sd_free(pub);
        return;
    }
    memcpy(pub, infos, k * sizeof(*pub));
    bool ok = sd__exec_metrics_merge(pub, k, r->metrics_merged, &n_pub, &merged) == SD_OK;
    if (!ok || sd_job_set_metrics(r->job, (const pb_MonitoringInfo *const *)pub, n_pub) != SD_OK) {
        SD_WARN("exec", "job %s: could not record metrics", r->job_id);
    }
    if (ok) {
        sd__exec_metrics_merged_release(&merged);
    }
    free_unpacked(infos, k);
    sd_free(pub);
}
