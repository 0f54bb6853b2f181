/*
 * Sundial: executor: monitoring infos.
 *
 * Two kinds of metrics reach a job's GetJobMetrics. The SDK's: every ProcessBundleResponse's
 * monitoring infos are kept packed on the run (r->metrics) as the bundle's response arrives,
 * and published as the job's committed metrics when the run ends (payloads pass through
 * unchanged; the web view also scans them for element counts). The runner's own: stage
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

void sd__exec_metrics_add(sd_exec_run *r, const pb_MonitoringInfo *mi)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    if (sd_fnapi_pb_pack(&mi->base, &b) != SD_OK || sd_vec_push(&r->metrics, &b) != SD_OK) {
        sd_buf_deinit(&b);
    }
}

/*
 * Runner metrics, so watermarks and the clock are visible while a job runs (GetJobMetrics
 * .attempted, refreshed as bundles commit) and what the runner dropped is visible at the end:
 *   beam:metric:sundial:input_watermark:v1 / output_watermark:v1   latest_int64, PTRANSFORM =
 *       stage id (payload: varint wall ms, varint watermark ms)
 *   beam:metric:sundial:clock:v1                                    latest_int64, the job clock
 *   beam:metric:sundial:dropped_late_elements:v1                    sum_int64, PTRANSFORM = stage
 */
#define SD_METRIC_INPUT_WM     "beam:metric:sundial:input_watermark:v1"
#define SD_METRIC_OUTPUT_WM    "beam:metric:sundial:output_watermark:v1"
#define SD_METRIC_CLOCK        "beam:metric:sundial:clock:v1"
#define SD_METRIC_DROPPED_LATE "beam:metric:sundial:dropped_late_elements:v1"

typedef struct runner_metrics {
    sd_vec infos;    /* pb_MonitoringInfo* (heap) */
    sd_vec payloads; /* sd_buf* */
} runner_metrics;

static void rm_add(runner_metrics *rm,
                   const char *urn,
                   const char *type,
                   const char *stage,
                   int64_t a,
                   int64_t b,
                   bool two)
{
    pb_MonitoringInfo *mi = sd_calloc(1, sizeof(*mi));
    SD_PL(MonitoringInfo__LabelsEntry) *label = sd_calloc(1, sizeof(*label));
    SD_PL(MonitoringInfo__LabelsEntry) **labels = sd_calloc(1, sizeof(*labels));
    sd_buf *payload = sd_malloc(sizeof(*payload));
    if (mi == NULL || label == NULL || labels == NULL || payload == NULL) {
        goto fail;
    }
    org__apache__beam__model__pipeline__v1__monitoring_info__init(mi);
    org__apache__beam__model__pipeline__v1__monitoring_info__labels_entry__init(label);
    sd_buf_init(payload, 0);
    if (sd_buf_put_varint(payload, (uint64_t)a) != SD_OK ||
        (two && sd_buf_put_varint(payload, (uint64_t)b) != SD_OK) ||
        sd_vec_push(&rm->payloads, &payload) != SD_OK) {
        sd_buf_deinit(payload);
        goto fail;
    }
    mi->urn = (char *)urn;
    mi->type = (char *)type;
    mi->payload.data = payload->data;
    mi->payload.len = payload->len;
    if (stage != NULL) {
        label->key = SD_LABEL_PTRANSFORM;
        label->value = (char *)stage;
        labels[0] = label;
        mi->n_labels = 1;
        mi->labels = labels;
    } else {
        sd_free(label);
        sd_free(labels);
        label = NULL;
        labels = NULL;
    }
    if (sd_vec_push(&rm->infos, &mi) == SD_OK) {
        return;
    }
fail:
    sd_free(mi);
    sd_free(label);
    sd_free(labels);
    sd_free(payload);
}

static void rm_deinit(runner_metrics *rm)
{
    for (size_t i = 0; i < rm->infos.len; i++) {
        pb_MonitoringInfo *mi = *SD_VEC_AT(&rm->infos, pb_MonitoringInfo *, i);
        if (mi->n_labels > 0) {
            sd_free(mi->labels[0]);
            sd_free(mi->labels);
        }
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
        rm_add(&rm, SD_METRIC_INPUT_WM, SD_URN_METRIC_TYPE_LATEST_INT64, ss.id, now, ss.input_wm,
               true);
        rm_add(&rm, SD_METRIC_OUTPUT_WM, SD_URN_METRIC_TYPE_LATEST_INT64, ss.id, now, ss.output_wm,
               true);
        if (ss.dropped_late > 0) {
            rm_add(&rm, SD_METRIC_DROPPED_LATE, SD_URN_METRIC_TYPE_SUM_INT64, ss.id,
                   (int64_t)ss.dropped_late, 0, false);
        }
    }
    rm_add(&rm, SD_METRIC_CLOCK, SD_URN_METRIC_TYPE_LATEST_INT64, NULL, now, sd_em_clock_now(r->em),
           true);
    if (sd_job_set_attempted_metrics(r->job, (const pb_MonitoringInfo *const *)rm.infos.items,
                                     rm.infos.len) != SD_OK) {
        SD_WARN("exec", "job %s: could not record runner metrics", r->job_id);
    }
    if (final) {
        /* Dropped-late counts also go with the committed metrics. */
        for (size_t i = 0; i < rm.infos.len; i++) {
            pb_MonitoringInfo *mi = *SD_VEC_AT(&rm.infos, pb_MonitoringInfo *, i);
            if (strcmp(mi->urn, SD_METRIC_DROPPED_LATE) == 0) {
                sd__exec_metrics_add(r, mi);
            }
        }
    }
    rm_deinit(&rm);
    r->observed_ms = sd_mono_now_ms();
    sd__exec_web_observe(r, final);
}

/* Hand the collected monitoring infos to the job (payloads passed through unchanged). */
void sd__exec_publish_metrics(sd_exec_run *r)
{
    size_t n = r->metrics.len;
    pb_MonitoringInfo **infos = sd_calloc(n == 0 ? 1 : n, sizeof(*infos));
    size_t k = 0;
    if (infos == NULL) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sd_buf *b = SD_VEC_AT(&r->metrics, sd_buf, i);
        pb_MonitoringInfo *mi = (pb_MonitoringInfo *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__monitoring_info__descriptor, NULL, b->len,
            b->data);
        if (mi != NULL) {
            infos[k++] = mi;
        }
    }
    if (sd_job_set_metrics(r->job, (const pb_MonitoringInfo *const *)infos, k) != SD_OK) {
        SD_WARN("exec", "job %s: could not record metrics", r->job_id);
    }
    for (size_t i = 0; i < k; i++) {
        protobuf_c_message_free_unpacked(&infos[i]->base, NULL);
    }
    sd_free(infos);
}
