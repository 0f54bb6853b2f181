/*
 * bench_engine: GroupByKey throughput of the element manager, with no SDK and no network.
 *
 *   bench_engine [N_ELEMENTS [N_KEYS [ROUNDS]]]  (default 1000000 elements, 1000 keys, 5 rounds)
 *   bench_engine --scale [ROUNDS]                10,000 / 100,000 / 1,000,000 elements, 1000 keys
 *
 * The pipeline is impulse -> gen (a fake SDK stage) -> GBK -> sink (a fake SDK stage). The
 * generated KV<bytes, varint> data is encoded before the clock starts; the timed part is what
 * the engine does: decoding the gen stage's output, grouping by key and window, encoding the
 * grouped KV<bytes, iterable<varint>> output and handing it out as sink bundles.
 *
 * The baseline is a plain C loop doing the same work in one process: parse the same bytes,
 * group them with a hash map, encode the groups as windowed values (end of the global window,
 * the only, on-time pane). The ratio says what the engine's bookkeeping (watermarks, windows,
 * bundles) costs over the bare work. The engine's output is checked against the baseline's,
 * byte for byte per key (timestamp, window, pane, key, every value in arrival order), with
 * every key exactly once; the check is not timed. The two sides run interleaved ROUNDS times
 * (each engine round a fresh engine); printed per round and as min and median, with the ratio
 * of the medians on the last line (`ratio engine_gbk X`). Times are the thread's CPU time,
 * wall time in brackets: both sides are single-threaded, so they agree on an idle machine,
 * and on a shared one CPU time leaves out the waits for a core that make wall times swing.
 * --scale runs each size in a child process, so the peak RSS printed belongs to that size
 * alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"

#define BENCH_NAME "bench_engine"
#include "bench_common.h"

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

/* The baseline: the same parse, group and encode in a plain loop. Returns groups written;
 * when where is given, records per key where its windowed value is in out (for the check). */
static size_t baseline(sd_bytes in, sd_buf *out, sd_map *where)
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
        size_t off = out->len;
        if (sd_buf_put_be64(out, sd_time_encode(SD_TIME_GLOBAL_MAX)) != SD_OK ||
            sd_buf_put_be32(out, 1) != SD_OK || sd_buf_append_byte(out, 0x07) != SD_OK ||
            sd_buf_put_lp(out, key) != SD_OK || sd_buf_put_be32(out, g->count) != SD_OK ||
            sd_buf_append_bytes(out, sd_buf_bytes(&g->values)) != SD_OK) {
            exit(1);
        }
        /* off and length packed in the pointer-sized value: both fit (tests are < 4 GB). */
        uint64_t loc = ((uint64_t)off << 32) | (uint64_t)(out->len - off);
        if (where != NULL && sd_map_put(where, key, (void *)(uintptr_t)loc) != SD_OK) {
            exit(1);
        }
        n++;
    }
    sd_map_deinit(&groups);
    return n;
}

typedef struct coders {
    sd_coder *bytes, *varint, *gw, *kv, *iter, *grouped, *wv_bytes, *wv_kv, *wv_grouped;
} coders;

/* Check one sink bundle's input against the baseline: each windowed value equal, byte for
 * byte, to the baseline's for its key, and no key twice. Returns the groups checked. */
static size_t
check_output(const coders *c, sd_bytes data, const sd_buf *base, sd_map *where, sd_map *seen)
{
    sd_reader r = sd_reader_make(data);
    sd_wv_header hdr;
    sd_err err = { 0 };
    size_t n = 0;
    sd_wv_header_init(&hdr);
    while (!sd_reader_done(&r)) {
        const uint8_t *start = r.p;
        sd_bytes elem, key;
        check(sd_wv_decode(c->wv_grouped, &r, &hdr, &elem, &err), "decode output", &err);
        sd_reader er = sd_reader_make(elem);
        if (sd_reader_lp(&er, &key) != SD_OK) {
            exit(1);
        }
        uint64_t loc = (uint64_t)(uintptr_t)sd_map_get(where, key);
        size_t off = (size_t)(loc >> 32), len = (size_t)(loc & 0xffffffffu);
        if (loc == 0 || sd_map_has(seen, key) || len != (size_t)(r.p - start) ||
            memcmp(base->data + off, start, len) != 0) {
            fprintf(stderr, "bench_engine: group of key \"%.*s\" differs from the baseline's%s\n",
                    (int)key.len, (const char *)key.ptr,
                    sd_map_has(seen, key) ? " (emitted twice)" : "");
            exit(1);
        }
        check(sd_map_put(seen, key, NULL), "check", &err);
        n++;
    }
    sd_wv_header_deinit(&hdr);
    return n;
}

/* One engine run on a fresh engine; checks its output. Returns its times (the check
 * excluded). */
static span engine_round(const coders *c,
                         const sd_buf *input,
                         const sd_buf *base,
                         sd_map *where,
                         size_t base_groups,
                         size_t *sink_bundles)
{
    sd_em *em = NULL;
    sd_err err = { 0 };
    sd_em_config cfg = { 0 };
    cfg.max_bundle_bytes = 4 << 20;
    check(sd_em_create(&cfg, &em), "create", &err);
    static const char *imp[] = { "imp" }, *words[] = { "words" }, *grp[] = { "grouped" };
    check(sd_em_add_pcollection(em, "imp", c->wv_bytes, NULL, &err), "pcollection", &err);
    check(sd_em_add_pcollection(em, "words", c->wv_kv, NULL, &err), "pcollection", &err);
    check(sd_em_add_pcollection(em, "grouped", c->wv_grouped, NULL, &err), "pcollection", &err);
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

    sd_map seen;
    sd_map_init(&seen, NULL);
    span t0 = span_start(), checking = { 0, 0 };
    size_t grouped = 0;
    *sink_bundles = 0;
    for (;;) {
        sd_bundle *b = NULL;
        check(sd_em_next_bundle(em, &b, &err), "next bundle", &err);
        if (b == NULL) {
            break;
        }
        if (strcmp(sd_em_bundle_stage(b), "gen") == 0) {
            check(sd_em_bundle_output(em, b, "words", sd_buf_bytes(input), &err), "output", &err);
        } else {
            span c0 = span_start();
            size_t got = check_output(c, sd_em_bundle_input(b), base, where, &seen);
            if (got != sd_em_bundle_input_count(b)) {
                fprintf(stderr, "bench_engine: sink bundle of %zu elements holds %zu groups\n",
                        sd_em_bundle_input_count(b), got);
                exit(1);
            }
            grouped += got;
            (*sink_bundles)++;
            span took = span_since(c0);
            checking.wall += took.wall;
            checking.cpu += took.cpu;
        }
        check(sd_em_complete_bundle(em, b, &err), "complete", &err);
    }
    span t = span_since(t0);
    t.wall -= checking.wall;
    t.cpu -= checking.cpu;
    if (!sd_em_done(em) || grouped != base_groups) {
        fprintf(stderr, "bench_engine: engine produced %zu groups, baseline %zu (done=%d)\n",
                grouped, base_groups, (int)sd_em_done(em));
        exit(1);
    }
    sd_map_deinit(&seen);
    sd_em_destroy(em);
    return t;
}

/* ROUNDS interleaved rounds of baseline and engine. Returns the ratio of the medians. */
static double bench(const coders *c, size_t n, size_t keys, size_t rounds, bool quiet)
{
    sd_buf input, base_out, ref;
    sd_map where;
    sd_buf_init(&input, 0);
    sd_buf_init(&base_out, 0);
    sd_buf_init(&ref, 0);
    sd_map_init(&where, NULL);
    gen_input(&input, n, keys);
    /* The reference output (and where each key's group is in it), made once, untimed. */
    size_t groups = baseline(sd_buf_bytes(&input), &ref, &where);
    /* CPU and wall times of each side: ecpu, ewall, bcpu, bwall. */
    int64_t *t = sd_calloc(4 * rounds, sizeof(int64_t));
    if (t == NULL) {
        exit(1);
    }
    int64_t *ecpu = t, *ewall = t + rounds, *bcpu = t + 2 * rounds, *bwall = t + 3 * rounds;
    if (!quiet) {
        printf("engine GroupByKey: %zu elements over %zu keys, %zu rounds (times: CPU, wall in "
               "brackets)\n",
               n, keys, rounds);
    }
    for (size_t i = 0; i < rounds; i++) {
        size_t sink_bundles = 0;
        sd_buf_reset(&base_out);
        span b0 = span_start();
        size_t got = baseline(sd_buf_bytes(&input), &base_out, NULL);
        span b = span_since(b0);
        if (got != groups || base_out.len != ref.len) {
            exit(1);
        }
        span e = engine_round(c, &input, &ref, &where, groups, &sink_bundles);
        bcpu[i] = b.cpu;
        bwall[i] = b.wall;
        ecpu[i] = e.cpu;
        ewall[i] = e.wall;
        if (!quiet) {
            printf("  round %zu: engine %8.1f ms [%.1f] (%.0f elements/s, %zu sink bundles)  "
                   "baseline %8.1f ms [%.1f] (%.0f elements/s)  ratio %.2f\n",
                   i + 1, (double)e.cpu / 1e6, (double)e.wall / 1e6,
                   (double)n / ((double)e.cpu / 1e9), sink_bundles, (double)b.cpu / 1e6,
                   (double)b.wall / 1e6, (double)n / ((double)b.cpu / 1e9),
                   (double)e.cpu / (double)b.cpu);
        }
    }
    int64_t emed = median(ecpu, rounds), bmed = median(bcpu, rounds);
    int64_t ewmed = median(ewall, rounds), bwmed = median(bwall, rounds);
    double ratio = (double)emed / (double)bmed;
    printf("  %zu elements: engine min %.1f median %.1f ms (%.0f ns an element) [wall min %.1f "
           "median %.1f]  baseline min %.1f median %.1f ms [wall min %.1f median %.1f]  ratio of "
           "mins %.2f, of medians %.2f [wall %.2f, %.2f]  peak RSS %.1f MB\n",
           n, (double)ecpu[0] / 1e6, (double)emed / 1e6, (double)emed / (double)n,
           (double)ewall[0] / 1e6, (double)ewmed / 1e6, (double)bcpu[0] / 1e6, (double)bmed / 1e6,
           (double)bwall[0] / 1e6, (double)bwmed / 1e6, (double)ecpu[0] / (double)bcpu[0], ratio,
           (double)ewall[0] / (double)bwall[0], (double)ewmed / (double)bwmed,
           (double)peak_rss_kb() / 1024.0);
    sd_free(t);
    sd_map_deinit(&where);
    sd_buf_deinit(&ref);
    sd_buf_deinit(&base_out);
    sd_buf_deinit(&input);
    return ratio;
}

int main(int argc, char **argv)
{
    bool scale = argc > 1 && strcmp(argv[1], "--scale") == 0;
    size_t n = !scale && argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    size_t keys = !scale && argc > 2 ? strtoull(argv[2], NULL, 10) : 1000;
    const char *rounds_arg = scale ? (argc > 2 ? argv[2] : NULL) : (argc > 3 ? argv[3] : NULL);
    size_t rounds = rounds_arg != NULL ? strtoull(rounds_arg, NULL, 10) : scale ? 3 : 5;
    if (n == 0 || keys == 0 || rounds == 0) {
        fprintf(stderr, "usage: bench_engine [N_ELEMENTS [N_KEYS [ROUNDS]]] | --scale [ROUNDS] "
                        "(all > 0)\n");
        return 2;
    }
    coders c;
    c.bytes = mk(SD_CODER_BYTES, NULL, NULL);
    c.varint = mk(SD_CODER_VARINT, NULL, NULL);
    c.gw = mk(SD_CODER_GLOBAL_WINDOW, NULL, NULL);
    c.kv = mk(SD_CODER_KV, c.bytes, c.varint);
    c.iter = mk(SD_CODER_ITERABLE, c.varint, NULL);
    c.grouped = mk(SD_CODER_KV, c.bytes, c.iter);
    c.wv_bytes = mk(SD_CODER_WINDOWED_VALUE, c.bytes, c.gw);
    c.wv_kv = mk(SD_CODER_WINDOWED_VALUE, c.kv, c.gw);
    c.wv_grouped = mk(SD_CODER_WINDOWED_VALUE, c.grouped, c.gw);

    if (!scale) {
        printf("ratio engine_gbk %.2f\n", bench(&c, n, keys, rounds, false));
    } else {
        printf("engine GroupByKey, scaling (1000 keys, %zu rounds a size, each size in its own "
               "process)\n",
               rounds);
        for (size_t size = 10000; size <= 1000000; size *= 10) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid < 0) {
                perror("bench_engine: fork");
                return 1;
            }
            if (pid == 0) {
                double ratio = bench(&c, size, 1000, rounds, true);
                printf("ratio engine_gbk_%zu %.2f\n", size, ratio);
                fflush(stdout);
                _exit(0);
            }
            int status = 0;
            if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "bench_engine: the %zu-element run failed\n", size);
                return 1;
            }
        }
    }
    sd_coder *all[] = { c.bytes,   c.varint,   c.gw,    c.kv,        c.iter,
                        c.grouped, c.wv_bytes, c.wv_kv, c.wv_grouped };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sd_coder_destroy(all[i]);
    }
    return 0;
}
