/*
 * Sundial: executor: late data kept for inspection.
 *
 * Beam drops late data and counts it; a user debugging a streaming job wants to see what was
 * dropped and why. With the pipeline option beam:option:sundial_late_data_dir:v1 = DIR (made
 * private if missing, like --artifacts_dir), every element the engine treats as late (the
 * engine's observer, sd_em_config.on_late) becomes one JSON line in DIR/<transform>.jsonl,
 * one file per stage named after the user transforms in it:
 *
 *   {"transform": "SumPerUser/Group", "stage": "stage-003", "pcollection": "...",
 *    "reason": "window expired", "timestamp": "2026-...Z", "timestamp_ms": 40000,
 *    "window": "[..., ...)" or "global", "watermark": "...Z", "watermark_ms": 45000,
 *    "routed": false, "element": "KV(\"k\", 4)", "element_hex": "016b04"}
 *
 * "element" is the value as the runner can read it (sd_value_describe; opaque coders show
 * their bytes), "element_hex" its exact encoding. Files are flushed per line (late data is
 * rare, and a job that then fails keeps what it wrote) and kept when the job ends: they are
 * the user's, not the job's artifacts. A file that cannot be written is reported once.
 */
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/fs.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/coder/value.h"
#include "runner/exec/exec_int.h"

sd_status sd__exec_late_setup(sd_exec_run *r, sd_em_config *cfg, sd_err *err)
{
    const char *dir = sd_job_option_string(r->job, "sundial_late_data_dir");
    if (dir == NULL || dir[0] == '\0') {
        return SD_OK;
    }
    if (sd_private_dir(dir, err) != SD_OK) {
        return sd_err_prefix(err, "pipeline option beam:option:sundial_late_data_dir:v1: ");
    }
    r->late_dir = sd_strdup(dir);
    if (r->late_dir == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    cfg->on_late = sd__exec_on_late;
    cfg->late_ctx = r;
    return SD_OK;
}

/* The stage's file, opened on its first late element (NULL: it cannot be written). */
static FILE *late_file(sd_exec_run *r, const char *stage_id, const char *name)
{
    if (sd_map_has(&r->late_files, sd_bytes_str(stage_id))) {
        return sd_map_get_str(&r->late_files, stage_id);
    }
    char base[200];
    size_t n = 0;
    for (const char *p = name; *p != '\0' && n + 1 < sizeof(base); p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.';
        base[n] = ok && !(n == 0 && c == '.') ? c : '_';
        n++;
    }
    base[n] = '\0';
    char *path = sd_asprintf("%s/%s.jsonl", r->late_dir, base);
    FILE *f = path != NULL ? fopen(path, "a") : NULL;
    if (f == NULL) {
        SD_WARN("exec", "job %s: late data of %s cannot be written to %s", r->job_id, stage_id,
                path != NULL ? path : r->late_dir);
    }
    sd_free(path);
    if (sd_map_put_str(&r->late_files, stage_id, f) != SD_OK && f != NULL) {
        fclose(f);
        return NULL;
    }
    return f;
}

/* "element" of the line: the value decoded with its PCollection's element coder, if it can. */
static void put_element(sd_exec_run *r, FILE *f, const sd_em_late *l)
{
    sd_coder *coder = sd_map_get_str(&r->late_coders, l->pcollection);
    if (coder == NULL && !sd_map_has(&r->late_coders, sd_bytes_str(l->pcollection))) {
        const sd_plan_pcollection *pc = sd_plan_find_pcollection(r->plan, l->pcollection);
        sd_coder *wv = NULL;
        sd_err ignored = { 0 };
        if (pc != NULL && sd__exec_plan_coder(r->plan, pc->port_coder_id, &wv, &ignored) == SD_OK &&
            wv->n_components > 0) {
            coder = sd_coder_ref(wv->components[0]);
        }
        sd_coder_destroy(wv);
        if (sd_map_put_str(&r->late_coders, l->pcollection, coder) != SD_OK) {
            sd_coder_destroy(coder);
            coder = NULL;
        }
    }
    sd_value *v = NULL;
    sd_buf text;
    sd_buf_init(&text, 0);
    sd_reader rd = sd_reader_make(l->element);
    sd_err ignored = { 0 };
    if (coder != NULL && sd_coder_decode(coder, &rd, true, &v, &ignored) == SD_OK &&
        sd_value_describe(v, &text) == SD_OK && sd_buf_append_byte(&text, '\0') == SD_OK) {
        fputs(",\"element\":\"", f);
        sd_json_put_string(f, (const char *)text.data);
        fputc('"', f);
    }
    sd_value_destroy(v);
    sd_buf_deinit(&text);
    fputs(",\"element_hex\":\"", f);
    for (size_t i = 0; i < l->element.len; i++) {
        fprintf(f, "%02x", l->element.ptr[i]);
    }
    fputc('"', f);
}

void sd__exec_on_late(void *ctx, const sd_em_late *l)
{
    sd_exec_run *r = ctx;
    const char *name = sd__exec_stage_name(r, l->stage_id);
    FILE *f = late_file(r, l->stage_id, name != NULL ? name : l->stage_id);
    if (f == NULL) {
        return;
    }
    const char *pname = sd__exec_pcoll_name(r, l->pcollection);
    char ts[48], wm[48], ws[48], we[48];
    fputs("{\"transform\":\"", f);
    sd_json_put_string(f, name != NULL ? name : l->stage_id);
    fputs("\",\"stage\":\"", f);
    sd_json_put_string(f, l->stage_id);
    fputs("\",\"pcollection\":\"", f);
    sd_json_put_string(f, pname != NULL ? pname : l->pcollection);
    fprintf(f, "\",\"reason\":\"%s\",\"timestamp\":\"%s\",\"timestamp_ms\":%lld",
            sd_late_reason_name(l->reason), sd_time_format(l->timestamp, ts, sizeof(ts)),
            (long long)l->timestamp);
    if (l->window.global) {
        fputs(",\"window\":\"global\"", f);
    } else {
        fprintf(f, ",\"window\":\"[%s, %s)\"", sd_time_format(l->window.start, ws, sizeof(ws)),
                sd_time_format(l->window.end, we, sizeof(we)));
    }
    fprintf(f, ",\"watermark\":\"%s\",\"watermark_ms\":%lld,\"routed\":%s",
            sd_time_format(l->watermark, wm, sizeof(wm)), (long long)l->watermark,
            l->routed ? "true" : "false");
    put_element(r, f, l);
    fputs("}\n", f);
    fflush(f);
}

void sd__exec_late_close(sd_exec_run *r)
{
    size_t it = 0;
    void *v;
    while (sd_map_next(&r->late_files, &it, NULL, &v)) {
        if (v != NULL) {
            fclose(v);
        }
    }
    sd_map_deinit(&r->late_files);
    it = 0;
    while (sd_map_next(&r->late_coders, &it, NULL, &v)) {
        sd_coder_destroy(v);
    }
    sd_map_deinit(&r->late_coders);
    sd_free(r->late_dir);
    r->late_dir = NULL;
}
