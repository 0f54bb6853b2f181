/*
 * bench_sdk: the C SDK end to end on the embedded runner, against a plain C loop.
 *
 *   1. Throughput: Create(N small KV<string, varint> elements: 1000 keys) -> ParDo (decode,
 *      v * 3 + 1, re-encode) -> GroupByKey -> ParDo (sum per key, add to a counter). The same
 *      work as one plain C loop in this process (encode the element, decode it, map it,
 *      re-encode, group in a hash map, sum per group). Both produce the same checksum (the
 *      sum of every mapped value), which is checked; printed: elements/s of each and the ratio.
 *   2. Latency: submit-to-DONE of a one-element pipeline (Create -> ParDo, its element counted
 *      once), R rounds interleaving a fresh embedded runner per run with one reused runner
 *      (sd_local_runner); min and median of each, and their ratio on the last line.
 *
 * Usage: bench_sdk [-n elements] [-r latency runs]   (defaults 1000000 and 10)
 * The embedded runner runs in test mode (synthetic clock) with the loopback worker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner/base/alloc.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "sundial/sundial.h"

#define N_KEYS 1000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ================================================================ the DoFns */

static sd_status map_process(sd_ctx *c, void *state)
{
    sd_bytes k, v;
    int64_t x;
    sd_reader r;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "bench: not a KV");
    }
    r = sd_reader_make(v);
    if (sd_read_int(&r, &x) != SD_OK) {
        return sd_fail(c, "bench: value is not a varint");
    }
    sd_buf *b = state;
    sd_buf_reset(b);
    if (sd_buf_append_bytes(b, k) != SD_OK || sd_enc_int(b, x * 3 + 1) != SD_OK) {
        return SD_ENOMEM;
    }
    return sd_emit(c, 0, sd_buf_bytes(b));
}

static sd_status buf_setup(sd_bytes config, void **state, sd_err *err)
{
    (void)config;
    (void)err;
    sd_buf *b = sd_calloc(1, sizeof(*b));
    if (b == NULL) {
        return SD_ENOMEM;
    }
    sd_buf_init(b, 0);
    *state = b;
    return SD_OK;
}

static void buf_teardown(void *state)
{
    sd_buf *b = state;
    if (b != NULL) {
        sd_buf_deinit(b);
        sd_free(b);
    }
}

static sd_status sum_process(sd_ctx *c, void *state)
{
    sd_bytes key, v;
    sd_iter it;
    bool has;
    int64_t sum = 0, x;
    sd_status st = sd_ctx_grouped(c, &key, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        if (sd_read_int(&r, &x) != SD_OK) {
            return sd_fail(c, "bench: grouped value is not a varint");
        }
        sum += x;
    }
    if (st != SD_OK) {
        return st;
    }
    sd_buf *b = state;
    sd_buf_reset(b);
    if (sd_buf_append_bytes(b, key) != SD_OK || sd_enc_int(b, sum) != SD_OK) {
        return SD_ENOMEM;
    }
    sd_counter_add(c, "checksum", sum);
    sd_counter_add(c, "groups", 1);
    return sd_emit(c, 0, sd_buf_bytes(b));
}

static sd_status ident_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_counter_add(c, "seen", 1);
    return sd_emit(c, 0, sd_ctx_element(c));
}

/* ================================================================ inputs */

static int make_inputs(size_t n, sd_buf *all, sd_bytes **items)
{
    size_t *offs = sd_calloc(n + 1, sizeof(size_t));
    *items = sd_calloc(n, sizeof(sd_bytes));
    if (offs == NULL || *items == NULL) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char key[16];
        int len = snprintf(key, sizeof(key), "k%04zu", i % N_KEYS);
        offs[i] = all->len;
        if (sd_enc_bytes(all, key, (size_t)len) != SD_OK || sd_enc_int(all, (int64_t)i) != SD_OK) {
            return -1;
        }
    }
    offs[n] = all->len;
    for (size_t i = 0; i < n; i++) {
        (*items)[i] = sd_bytes_make(all->data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_free(offs);
    return 0;
}

/* ================================================================ the plain loop */

static void group_free(void *v)
{
    sd_buf *b = v;
    sd_buf_deinit(b);
    sd_free(b);
}

/* Returns the checksum, or INT64_MIN on failure. */
static int64_t plain_loop(size_t n)
{
    sd_map groups;
    sd_buf elem, out;
    sd_map_init(&groups, group_free);
    sd_buf_init(&elem, 0);
    sd_buf_init(&out, 0);
    int64_t checksum = 0;
    for (size_t i = 0; i < n; i++) {
        char key[16];
        int len = snprintf(key, sizeof(key), "k%04zu", i % N_KEYS);
        /* Create: the element's encoding. */
        sd_buf_reset(&elem);
        if (sd_enc_bytes(&elem, key, (size_t)len) != SD_OK ||
            sd_enc_int(&elem, (int64_t)i) != SD_OK) {
            return INT64_MIN;
        }
        /* ParDo: decode, map, re-encode. */
        sd_reader r = sd_reader_make(sd_buf_bytes(&elem));
        sd_bytes k;
        int64_t x;
        if (sd_read_bytes(&r, &k) != SD_OK || sd_read_int(&r, &x) != SD_OK) {
            return INT64_MIN;
        }
        sd_buf_reset(&out);
        if (sd_enc_bytes(&out, k.ptr, k.len) != SD_OK || sd_enc_int(&out, x * 3 + 1) != SD_OK) {
            return INT64_MIN;
        }
        /* GroupByKey: values appended under the key's encoding. */
        sd_reader r2 = sd_reader_make(sd_buf_bytes(&out));
        sd_bytes kenc = sd_bytes_make(out.data, 0), venc;
        if (sd_read_bytes(&r2, &k) != SD_OK) {
            return INT64_MIN;
        }
        kenc.len = (size_t)(r2.p - out.data);
        venc = sd_bytes_make(r2.p, sd_reader_left(&r2));
        sd_buf *g = sd_map_get(&groups, kenc);
        if (g == NULL) {
            g = sd_calloc(1, sizeof(*g));
            if (g == NULL || sd_map_put(&groups, kenc, g) != SD_OK) {
                return INT64_MIN;
            }
            sd_buf_init(g, 0);
        }
        if (sd_buf_append_bytes(g, venc) != SD_OK) {
            return INT64_MIN;
        }
    }
    /* ParDo: sum per key. */
    size_t it = 0;
    sd_bytes gk;
    void *gv;
    while (sd_map_next(&groups, &it, &gk, &gv)) {
        sd_buf *g = gv;
        sd_reader r = sd_reader_make(sd_buf_bytes(g));
        int64_t sum = 0, x;
        while (!sd_reader_done(&r)) {
            if (sd_read_int(&r, &x) != SD_OK) {
                return INT64_MIN;
            }
            sum += x;
        }
        sd_buf_reset(&out);
        if (sd_buf_append_bytes(&out, gk) != SD_OK || sd_enc_int(&out, sum) != SD_OK) {
            return INT64_MIN;
        }
        checksum += sum;
    }
    sd_map_deinit(&groups);
    sd_buf_deinit(&elem);
    sd_buf_deinit(&out);
    return checksum;
}

/* ================================================================ runs */

static int run_pipeline(size_t n, int64_t *checksum, double *seconds)
{
    sd_buf all;
    sd_bytes *items = NULL;
    sd_buf_init(&all, 0);
    if (make_inputs(n, &all, &items) != 0) {
        fprintf(stderr, "bench_sdk: out of memory making inputs\n");
        return -1;
    }
    double t0 = now_s();
    sd_pipeline *p = sd_pipeline_create("bench-sdk");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *in = sd_create(p, "Create", kv, items, n, NULL);
    sd_pcoll *m = sd_apply(p, "Map", in, "bench:map", SD_BYTES_NULL, kv);
    sd_pcoll *g = sd_group_by_key(p, "Group", m);
    sd_apply(p, "Sum", g, "bench:sum", SD_BYTES_NULL, kv);
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, NULL, &res, &err);
    *seconds = now_s() - t0;
    if (st != SD_OK) {
        fprintf(stderr, "bench_sdk: pipeline failed: %s\n", sd_err_msg(&err));
    } else {
        *checksum = sd_run_result_counter(&res, "checksum");
        if (sd_run_result_counter(&res, "groups") != (n < N_KEYS ? (int64_t)n : N_KEYS)) {
            fprintf(stderr, "bench_sdk: expected %d groups, got %lld\n", N_KEYS,
                    (long long)sd_run_result_counter(&res, "groups"));
            st = SD_EINTERNAL;
        }
        sd_run_result_deinit(&res);
    }
    sd_pipeline_destroy(p);
    sd_free(items);
    sd_buf_deinit(&all);
    return st == SD_OK ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One one-element pipeline (Create -> ParDo) on endpoint (NULL: a fresh embedded runner);
 * its wall time in ms, or a negative number on failure (the element must arrive once). */
static double one_element_run(const char *endpoint)
{
    sd_pipeline *p = sd_pipeline_create("bench-latency");
    const int64_t one = 1;
    sd_pcoll *in = sd_create_ints(p, "One", &one, 1);
    sd_apply(p, "Ident", in, "bench:ident", SD_BYTES_NULL, NULL);
    sd_run_options o = { .endpoint = endpoint };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    double t0 = now_s();
    sd_status st = sd_pipeline_run(p, &o, &res, &err);
    double ms = (now_s() - t0) * 1000;
    int64_t seen = sd_run_result_counter(&res, "seen");
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    if (st != SD_OK || seen != 1) {
        fprintf(stderr, "bench_sdk: one-element pipeline %s: %s (seen %lld)\n",
                endpoint != NULL ? "on the reused runner" : "on a fresh runner",
                st != SD_OK ? sd_err_msg(&err) : "wrong result", (long long)seen);
        return -1;
    }
    return ms;
}

static double median_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/*
 * Latency, interleaved: each round runs the one-element pipeline once on a fresh embedded
 * runner (started and stopped by sd_pipeline_run) and once on one runner started before the
 * rounds (sd_local_runner), which is the baseline's counterpart a test suite would use.
 * OUT: min and median of each, in ms.
 */
static int run_latency(int runs, double fresh[2], double reused[2])
{
    double *tf = sd_calloc((size_t)runs, sizeof(double));
    double *tr = sd_calloc((size_t)runs, sizeof(double));
    sd_local_runner *lr = NULL;
    sd_err err;
    sd_err_clear(&err);
    int rc = tf == NULL || tr == NULL ? -1 : 0;
    if (rc == 0 && sd_local_runner_start(false, &lr, &err) != SD_OK) {
        fprintf(stderr, "bench_sdk: cannot start a runner: %s\n", sd_err_msg(&err));
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < runs; i++) {
        tf[i] = one_element_run(NULL);
        tr[i] = one_element_run(sd_local_runner_endpoint(lr));
        rc = tf[i] < 0 || tr[i] < 0 ? -1 : 0;
    }
    sd_local_runner_stop(lr);
    if (rc == 0) {
        fresh[1] = median_of(tf, runs);
        fresh[0] = tf[0];
        reused[1] = median_of(tr, runs);
        reused[0] = tr[0];
    }
    sd_free(tf);
    sd_free(tr);
    return rc;
}

int main(int argc, char **argv)
{
    size_t n = 1000000;
    int runs = 10;
    int code;
    static const sd_dofn mapfn = { .setup = buf_setup,
                                   .process = map_process,
                                   .teardown = buf_teardown };
    static const sd_dofn sumfn = { .setup = buf_setup,
                                   .process = sum_process,
                                   .teardown = buf_teardown };
    static const sd_dofn ident = { .process = ident_process };
    if (sd_register_dofn("bench:map", &mapfn) != SD_OK ||
        sd_register_dofn("bench:sum", &sumfn) != SD_OK ||
        sd_register_dofn("bench:ident", &ident) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-n") == 0) {
            n = (size_t)strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-r") == 0) {
            runs = (int)strtol(argv[i + 1], NULL, 10);
        }
    }
    if (n == 0 || runs <= 0) {
        fprintf(stderr, "usage: bench_sdk [-n elements] [-r latency runs]\n");
        return 2;
    }
    double t0 = now_s();
    int64_t want = plain_loop(n);
    double loop_s = now_s() - t0;
    if (want == INT64_MIN) {
        fprintf(stderr, "bench_sdk: plain loop failed\n");
        return 1;
    }
    int64_t got = 0;
    double pipe_s = 0;
    if (run_pipeline(n, &got, &pipe_s) != 0) {
        return 1;
    }
    if (got != want) {
        fprintf(stderr, "bench_sdk: checksum mismatch: pipeline %lld, plain loop %lld\n",
                (long long)got, (long long)want);
        return 1;
    }
    double fresh[2], reused[2];
    if (run_latency(runs, fresh, reused) != 0) {
        return 1;
    }
    double pipe_rate = (double)n / pipe_s, loop_rate = (double)n / loop_s;
    printf("throughput: Create -> ParDo -> GroupByKey -> ParDo, %zu KV elements, %d keys\n", n,
           N_KEYS);
    printf("  embedded runner  %10.3f s  %12.0f elements/s\n", pipe_s, pipe_rate);
    printf("  plain C loop     %10.3f s  %12.0f elements/s\n", loop_s, loop_rate);
    printf("  ratio (loop / pipeline)  %.1fx   checksum %lld (equal)\n", loop_rate / pipe_rate,
           (long long)got);
    printf("latency: one-element pipeline submit-to-DONE, %d rounds, interleaved\n", runs);
    printf("  fresh embedded runner per run  min %6.2f ms  median %6.2f ms\n", fresh[0], fresh[1]);
    printf("  one reused runner              min %6.2f ms  median %6.2f ms\n", reused[0],
           reused[1]);
    printf("ratio latency_reused/fresh %.2f\n", reused[1] / fresh[1]);
    return 0;
}
