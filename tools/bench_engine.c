/*
 * bench_engine: GroupByKey throughput of the element manager, with no SDK and no network.
 *
 *   bench_engine [N_ELEMENTS [N_KEYS]]      (default 1000000 elements over 1000 keys)
 *
 * The pipeline is impulse -> gen (a fake SDK stage) -> GBK -> sink (a fake SDK stage). The
 * generated KV<bytes, varint> data is encoded before the clock starts; the timed part is what
 * the engine does: decoding the gen stage's output, grouping by key and window, encoding the
 * grouped KV<bytes, iterable<varint>> output and handing it out as sink bundles.
 *
 * The baseline, measured in the same run, is a plain C loop doing the same work in one
 * process: parse the same bytes, group them with a hash map, encode the groups. The ratio
 * says what the engine's bookkeeping (watermarks, windows, bundles) costs over the bare work.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"

static sd_coder *mk(sd_coder_kind kind, sd_coder *a, sd_coder *b)
{
    sd_coder *c = NULL;
    sd_err err = { 0 };
    sd_status st = b != NULL   ? sd_coder_create(&c, &err, kind, a, b, NULL)
                   : a != NULL ? sd_coder_create(&c, &err, kind, a, NULL)
                               : sd_coder_create(&c, &err, kind, NULL);
    if (st != SD_OK) {
        fprintf(stderr, "bench_engine: coder: %s\n", sd_err_msg(&err));
        exit(1);
    }
    return c;
}

static void check(sd_status st, const char *what, const sd_err *err)
{
    if (st != SD_OK) {
        fprintf(stderr, "bench_engine: %s: %s\n", what, sd_err_msg(err));
        exit(1);
    }
}

/* One windowed value per element: global window, no-firing pane, KV<bytes key, varint v>. */
static void gen_input(sd_buf *out, size_t n, size_t keys)
{
    for (size_t i = 0; i < n; i++) {
        char key[32];
        int kn = snprintf(key, sizeof(key), "key-%zu", i % keys);
        if (sd_buf_put_be64(out, sd_time_encode(0)) != SD_OK || sd_buf_put_be32(out, 1) != SD_OK ||
            sd_buf_append_byte(out, 0x0f) != SD_OK ||
            sd_buf_put_lp(out, sd_bytes_make(key, (size_t)kn)) != SD_OK ||
            sd_buf_put_varint(out, i) != SD_OK) {
            fprintf(stderr, "bench_engine: out of memory generating input\n");
            exit(1);
        }
    }
}

typedef struct group {
    sd_buf values;
    uint32_t count;
} group;

static void group_destroy(void *p)
{
    group *g = p;
    sd_buf_deinit(&g->values);
    sd_free(g);
}

/* The baseline: the same parse, group and encode in a plain loop. Returns groups written. */
static size_t baseline(sd_bytes in, sd_buf *out)
{
    sd_map groups;
    sd_reader r = sd_reader_make(in);
    sd_map_init(&groups, group_destroy);
    while (!sd_reader_done(&r)) {
        uint64_t ts, v;
        uint32_t nw;
        uint8_t pane;
        sd_bytes key, vbytes;
        const uint8_t *vstart;
        if (sd_reader_be64(&r, &ts) != SD_OK || sd_reader_be32(&r, &nw) != SD_OK ||
            sd_reader_byte(&r, &pane) != SD_OK || sd_reader_lp(&r, &key) != SD_OK) {
            exit(1);
        }
        vstart = r.p;
        if (sd_reader_varint(&r, &v) != SD_OK) {
            exit(1);
        }
        vbytes = sd_bytes_make(vstart, (size_t)(r.p - vstart));
        group *g = sd_map_get(&groups, key);
        if (g == NULL) {
            g = sd_calloc(1, sizeof(*g));
            if (g == NULL || sd_map_put(&groups, key, g) != SD_OK) {
                exit(1);
            }
        }
        if (sd_buf_append_bytes(&g->values, vbytes) != SD_OK) {
            exit(1);
        }
        g->count++;
    }
    size_t it = 0, n = 0;
    sd_bytes key;
    void *v;
    while (sd_map_next(&groups, &it, &key, &v)) {
        group *g = v;
        if (sd_buf_put_be64(out, sd_time_encode(SD_TIME_GLOBAL_MAX)) != SD_OK ||
            sd_buf_put_be32(out, 1) != SD_OK || sd_buf_append_byte(out, 0x07) != SD_OK ||
            sd_buf_put_lp(out, key) != SD_OK || sd_buf_put_be32(out, g->count) != SD_OK ||
            sd_buf_append_bytes(out, sd_buf_bytes(&g->values)) != SD_OK) {
            exit(1);
        }
        n++;
    }
    sd_map_deinit(&groups);
    return n;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    size_t keys = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000;
    sd_err err = { 0 };
    sd_coder *bytes, *varint, *gw, *kv, *iter, *grouped, *wv_bytes, *wv_kv, *wv_grouped;

    if (n == 0 || keys == 0) {
        fprintf(stderr, "usage: bench_engine [N_ELEMENTS [N_KEYS]] (both > 0)\n");
        return 2;
    }
    bytes = mk(SD_CODER_BYTES, NULL, NULL);
    varint = mk(SD_CODER_VARINT, NULL, NULL);
    gw = mk(SD_CODER_GLOBAL_WINDOW, NULL, NULL);
    kv = mk(SD_CODER_KV, bytes, varint);
    iter = mk(SD_CODER_ITERABLE, varint, NULL);
    grouped = mk(SD_CODER_KV, bytes, iter);
    wv_bytes = mk(SD_CODER_WINDOWED_VALUE, bytes, gw);
    wv_kv = mk(SD_CODER_WINDOWED_VALUE, kv, gw);
    wv_grouped = mk(SD_CODER_WINDOWED_VALUE, grouped, gw);

    sd_buf input;
    sd_buf_init(&input, 0);
    gen_input(&input, n, keys);

    /* Baseline first, on the same bytes. */
    sd_buf base_out;
    sd_buf_init(&base_out, 0);
    int64_t b0 = sd_mono_now_ns();
    size_t base_groups = baseline(sd_buf_bytes(&input), &base_out);
    int64_t base_ns = sd_mono_now_ns() - b0;

    sd_em *em = NULL;
    sd_em_config cfg = { 0 };
    cfg.max_bundle_bytes = 4 << 20;
    check(sd_em_create(&cfg, &em), "create", &err);
    static const char *imp[] = { "imp" }, *words[] = { "words" }, *grp[] = { "grouped" };
    check(sd_em_add_pcollection(em, "imp", wv_bytes, NULL, &err), "pcollection", &err);
    check(sd_em_add_pcollection(em, "words", wv_kv, NULL, &err), "pcollection", &err);
    check(sd_em_add_pcollection(em, "grouped", wv_grouped, NULL, &err), "pcollection", &err);
    sd_stage_spec s_imp = {
        .id = "impulse", .kind = SD_STAGE_IMPULSE, .outputs = imp, .n_outputs = 1
    };
    sd_stage_spec s_gen = { .id = "gen",
                            .kind = SD_STAGE_SDK,
                            .inputs = imp,
                            .n_inputs = 1,
                            .outputs = words,
                            .n_outputs = 1 };
    sd_stage_spec s_gbk = { .id = "gbk",
                            .kind = SD_STAGE_GBK,
                            .inputs = words,
                            .n_inputs = 1,
                            .outputs = grp,
                            .n_outputs = 1 };
    sd_stage_spec s_sink = { .id = "sink", .kind = SD_STAGE_SDK, .inputs = grp, .n_inputs = 1 };
    check(sd_em_add_stage(em, &s_imp, &err), "stage", &err);
    check(sd_em_add_stage(em, &s_gen, &err), "stage", &err);
    check(sd_em_add_stage(em, &s_gbk, &err), "stage", &err);
    check(sd_em_add_stage(em, &s_sink, &err), "stage", &err);
    check(sd_em_start(em, &err), "start", &err);

    int64_t t0 = sd_mono_now_ns();
    size_t grouped_elements = 0, sink_bundles = 0;
    for (;;) {
        sd_bundle *b = NULL;
        check(sd_em_next_bundle(em, &b, &err), "next bundle", &err);
        if (b == NULL) {
            break;
        }
        if (strcmp(sd_em_bundle_stage(b), "gen") == 0) {
            check(sd_em_bundle_output(em, b, "words", sd_buf_bytes(&input), &err), "output", &err);
        } else {
            grouped_elements += sd_em_bundle_input_count(b);
            sink_bundles++;
        }
        check(sd_em_complete_bundle(em, b, &err), "complete", &err);
    }
    int64_t eng_ns = sd_mono_now_ns() - t0;
    if (!sd_em_done(em) || grouped_elements != base_groups) {
        fprintf(stderr, "bench_engine: engine produced %zu groups, baseline %zu (done=%d)\n",
                grouped_elements, base_groups, (int)sd_em_done(em));
        return 1;
    }
    double eng_rate = (double)n / ((double)eng_ns / 1e9);
    double base_rate = (double)n / ((double)base_ns / 1e9);
    printf("engine GroupByKey: %zu elements over %zu keys\n", n, keys);
    printf("  engine:   %10.1f ms  %12.0f elements/s  (%zu sink bundles)\n", eng_ns / 1e6, eng_rate,
           sink_bundles);
    printf("  baseline: %10.1f ms  %12.0f elements/s  (plain C loop, same bytes)\n", base_ns / 1e6,
           base_rate);
    printf("  ratio engine/baseline time: %.2f\n", (double)eng_ns / (double)base_ns);

    sd_em_destroy(em);
    sd_buf_deinit(&input);
    sd_buf_deinit(&base_out);
    sd_coder *all[] = { bytes, varint, gw, kv, iter, grouped, wv_bytes, wv_kv, wv_grouped };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sd_coder_destroy(all[i]);
    }
    return 0;
}
