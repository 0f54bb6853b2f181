/*
 * Shared helpers of the C SDK's time tests (test_teststream.c, test_triggers.c, test_time.c):
 * DoFns that render grouped panes as strings (so assertions can check exact contents, windows,
 * pane info and timestamps), TestStream shorthands for KV<string, varint> elements, and a
 * runner that reports the failure message and the wall time of a job.
 *
 * Everything is static inline so each test binary uses what it needs without warnings.
 */
#ifndef SD_TESTS_INTEGRATION_SDK_TIME_COMMON_H
#define SD_TESTS_INTEGRATION_SDK_TIME_COMMON_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/time.h"
#include "sundial/sundial.h"

#define SEC_MS  1000LL
#define MIN_MS  (60LL * SEC_MS)
#define HOUR_MS (60LL * MIN_MS)
#define DAY_MS  (24LL * HOUR_MS)

/* ---------------------------------------------------------------- pane rendering DoFns */

static inline int tc_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * Render a grouped KV<string, Iterable<varint>> (mode 0: "key:v1,v2" with values sorted;
 * mode 1: the same plus " [start,end) TIMING#index/nonspec first|last @timestamp").
 */
static inline sd_status tc_render(sd_ctx *c, int mode)
{
    sd_bytes key, v;
    sd_iter it;
    bool has;
    int64_t vals[256];
    size_t n = 0;
    char buf[1024];
    if (sd_ctx_grouped(c, &key, &it) != SD_OK) {
        return sd_fail(c, "render: not a grouped KV");
    }
    sd_reader kr = sd_reader_make(key);
    sd_bytes k;
    if (sd_read_bytes(&kr, &k) != SD_OK) {
        return sd_fail(c, "render: key is not a string");
    }
    sd_status st;
    while ((st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        if (n == 256 || sd_read_int(&r, &vals[n]) != SD_OK) {
            return sd_fail(c, "render: too many values or not a varint");
        }
        n++;
    }
    if (st != SD_OK) {
        return st;
    }
    qsort(vals, n, sizeof(vals[0]), tc_cmp_i64);
    int len = snprintf(buf, sizeof(buf), "%.*s:", (int)k.len, (const char *)k.ptr);
    for (size_t i = 0; i < n; i++) {
        len +=
            snprintf(buf + len, sizeof(buf) - (size_t)len, "%s%" PRId64, i > 0 ? "," : "", vals[i]);
    }
    if (mode == 1) {
        sd_window w = sd_ctx_window(c);
        sd_pane pane = sd_ctx_pane(c);
        if (w.global) {
            len += snprintf(buf + len, sizeof(buf) - (size_t)len, " [global)");
        } else {
            len += snprintf(buf + len, sizeof(buf) - (size_t)len, " [%" PRId64 ",%" PRId64 ")",
                            w.start, w.end);
        }
        len += snprintf(buf + len, sizeof(buf) - (size_t)len,
                        " %s#%" PRId64 "/%" PRId64 "%s%s @%" PRId64,
                        sd_pane_timing_name(pane.timing), pane.index, pane.nonspec_index,
                        pane.first ? " first" : "", pane.last ? " last" : "", sd_ctx_timestamp(c));
    }
    return sd_emit_str(c, buf, (size_t)len);
}

static inline sd_status tc_values_process(sd_ctx *c, void *state)
{
    (void)state;
    return tc_render(c, 0);
}

static inline sd_status tc_panes_process(sd_ctx *c, void *state)
{
    (void)state;
    return tc_render(c, 1);
}

/* "tc:values" and "tc:panes". Returns false when registration failed. */
static inline bool tc_register(void)
{
    static const sd_dofn values = { .process = tc_values_process };
    static const sd_dofn panes = { .process = tc_panes_process };
    return sd_register_dofn("tc:values", &values) == SD_OK &&
           sd_register_dofn("tc:panes", &panes) == SD_OK;
}

/* ---------------------------------------------------------------- building */

static inline const sd_pcoder *tc_kv_coder(sd_pipeline *p)
{
    return sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
}

/* Add KV<string, varint> elements key[i]=vals[i] at tss[i] to tag as one element event. */
static inline void tc_add_kvs(sd_teststream *ts,
                              const char *tag,
                              const char *const *keys,
                              const int64_t *vals,
                              const sd_time *tss,
                              size_t n)
{
    sd_buf b;
    size_t offs[65];
    sd_bytes items[64];
    sd_buf_init(&b, 0);
    for (size_t i = 0; i < n && i < 64; i++) {
        offs[i] = b.len;
        if (sd_enc_str(&b, keys[i]) != SD_OK || sd_enc_int(&b, vals[i]) != SD_OK) {
            abort();
        }
    }
    offs[n] = b.len;
    for (size_t i = 0; i < n && i < 64; i++) {
        items[i] = sd_bytes_make(b.data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_teststream_add_elements(ts, tag, items, tss, n);
    sd_buf_deinit(&b);
}

/* One KV element. */
static inline void
tc_add_kv(sd_teststream *ts, const char *tag, const char *key, int64_t v, sd_time t)
{
    tc_add_kvs(ts, tag, &key, &v, &t, 1);
}

/* Window -> GroupByKey -> render (dofn "tc:values" or "tc:panes"). */
static inline sd_pcoll *tc_group_render(sd_pipeline *p,
                                        const char *prefix,
                                        sd_pcoll *in,
                                        const sd_windowfn *wf,
                                        const char *dofn)
{
    char n1[64], n2[64], n3[64];
    snprintf(n1, sizeof(n1), "%sWindow", prefix);
    snprintf(n2, sizeof(n2), "%sGroup", prefix);
    snprintf(n3, sizeof(n3), "%sRender", prefix);
    sd_pcoll *w = wf != NULL ? sd_window_into(p, n1, in, wf) : in;
    sd_pcoll *g = sd_group_by_key(p, n2, w);
    return sd_apply(p, n3, g, dofn, SD_BYTES_NULL, sd_pcoder_string(p));
}

/* ---------------------------------------------------------------- running */

/*
 * Run p on the embedded runner (test clock). OUT: *wall_ms (may be NULL) the job's wall time;
 * res (may be NULL) the result. Prints the failure message. Returns the run's status; the
 * message is copied into msg (may be NULL, size msg_len).
 */
static inline sd_status
tc_run(sd_pipeline *p, int64_t *wall_ms, sd_run_result *res, char *msg, size_t msg_len)
{
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err err;
    sd_err_clear(&err);
    int64_t t0 = sd_mono_now_ms();
    sd_status st = sd_pipeline_run(p, &opts, res, &err);
    if (wall_ms != NULL) {
        *wall_ms = sd_mono_now_ms() - t0;
    }
    if (msg != NULL && msg_len > 0) {
        snprintf(msg, msg_len, "%s", st == SD_OK ? "" : sd_err_msg(&err));
    }
    if (st != SD_OK && msg == NULL) {
        fprintf(stderr, "run of %s failed (%s): %s\n", "pipeline", sd_status_name(st),
                sd_err_msg(&err));
    }
    return st;
}

#endif
