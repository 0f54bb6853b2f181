/*
 * bench_sdk: the C SDK end to end on the embedded runner, against a plain C loop.
 *
 *   1. Throughput: Create(N small KV<string, varint> elements: 1000 keys) -> ParDo (decode,
 *      v * 3 + 1, re-encode) -> GroupByKey -> ParDo (per key: sum, count and an
 *      order-independent hash of the values). The baseline is the same work as one plain C
 *      loop in this process (encode the element, decode it, map it, re-encode, group in a hash
 *      map, the same per-key reduction). The contents are checked, not only counts: every key
 *      must reach the Sum DoFn exactly once (it records what it saw in a table of this
 *      process; the loopback worker runs here), with the baseline's count, sum and hash of
 *      its values, and the checksum counter must equal the baseline's. The two sides run
 *      interleaved ROUNDS times (each pipeline a fresh embedded runner: the times cover
 *      building the pipeline, submitting it, running it and reading its metrics, not making
 *      the input items). Printed per round and as min and median of each side, in CPU time
 *      (the process's: every thread the pipeline uses, runner loop, worker, gRPC; the loop is
 *      one thread) with wall time beside it.
 *   2. Latency: submit-to-DONE of a one-element pipeline (Create -> ParDo, its element counted
 *      once), R runs interleaving a fresh embedded runner per run with one reused runner
 *      (sd_local_runner); min and median of each, and their ratio.
 *
 * The last line is `ratio sdk_pipeline X`: loop rate / pipeline rate, from the CPU-time
 * medians (lower is better; 1 would mean the runner and SDK cost nothing). CPU time, as in
 * bench_engine, because on a shared machine wall times swing with the waits for a core; it
 * also charges the pipeline for all its threads, where wall time would credit their overlap
 * (the wall-time ratio is printed beside it).
 *
 * Usage: bench_sdk [-n elements] [-R rounds] [-r latency runs]   (defaults 1000000, 5, 10)
 *        bench_sdk --scale [ROUNDS]   throughput at 100,000 / 1,000,000 / 10,000,000 elements
 *                                     (3 rounds each), each size in its own process, so the
 *                                     peak RSS printed (the process's: input items, the
 *                                     pipeline, the runner, the loop) belongs to that size
 *        bench_sdk --memory [N [LIMIT [ROUNDS]]]   the memory budget (defaults 50,000,000,
 *                                     256MiB, 3): Impulse -> ParDo making N KV elements (1000
 *                                     keys) -> the Map ParDo -> GroupByKey -> Sum, so no input
 *                                     sits in the pipeline proto or in this process; run with
 *                                     the pipeline option sundial_memory_limit=LIMIT and,
 *                                     interleaved, with no limit (the baseline), each run in
 *                                     its own process; prints each run's time and peak RSS,
 *                                     checks every key's count, sum and hash against the
 *                                     closed-form answer, and ends with `ratio
 *                                     memory_budget_rss X` (budgeted / unbudgeted peak RSS,
 *                                     medians) after the time ratio
 * The embedded runner runs in test mode (synthetic clock) with the loopback worker.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* The CPU time of every thread of this process (runner, worker, gRPC), in seconds. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ================================================================ per-key results */

/* What one side computed for one key: its values' count, sum and order-independent hash. */
typedef struct key_result {
    int64_t n, sum;
    uint64_t hash;
    int times; /* how often the key was reduced: 1 when right */
} key_result;

/* The Sum DoFn's records (the worker may run bundles on several threads). */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static key_result seen[N_KEYS];
static int seen_bad; /* keys that were not of the form "k%04d" */

static uint64_t mix(int64_t x)
{
    uint64_t z = (uint64_t)x + 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* The index of key "k%04d" from its nested encoding, or -1. */
static int key_index(sd_bytes kenc)
{
    sd_reader r = sd_reader_make(kenc);
    sd_bytes k;
    if (sd_read_bytes(&r, &k) != SD_OK || !sd_reader_done(&r) || k.len != 5 || k.ptr[0] != 'k') {
        return -1;
    }
    int i = 0;
    for (size_t j = 1; j < 5; j++) {
        if (k.ptr[j] < '0' || k.ptr[j] > '9') {
            return -1;
        }
        i = i * 10 + (k.ptr[j] - '0');
    }
    return i < N_KEYS ? i : -1;
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
    key_result kr = { .times = 1 };
    int64_t x;
    sd_status st = sd_ctx_grouped(c, &key, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        if (sd_read_int(&r, &x) != SD_OK) {
            return sd_fail(c, "bench: grouped value is not a varint");
        }
        kr.n++;
        kr.sum += x;
        kr.hash += mix(x);
    }
    if (st != SD_OK) {
        return st;
    }
    sd_buf *b = state;
    sd_buf_reset(b);
    if (sd_buf_append_bytes(b, key) != SD_OK || sd_enc_int(b, kr.sum) != SD_OK) {
        return SD_ENOMEM;
    }
    int i = key_index(key);
    pthread_mutex_lock(&seen_lock);
    if (i < 0) {
        seen_bad++;
    } else {
        seen[i].n += kr.n;
        seen[i].sum += kr.sum;
        seen[i].hash += kr.hash;
        seen[i].times++;
    }
    pthread_mutex_unlock(&seen_lock);
    sd_counter_add(c, "checksum", kr.sum);
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

/* The same work in one loop; OUT: res[key] per key and *checksum. Returns 0, or -1. */
static int plain_loop(size_t n, key_result res[N_KEYS], int64_t *checksum)
{
    sd_map groups;
    sd_buf elem, out;
    sd_map_init(&groups, group_free);
    sd_buf_init(&elem, 0);
    sd_buf_init(&out, 0);
    *checksum = 0;
    for (size_t i = 0; i < n; i++) {
        char key[16];
        int len = snprintf(key, sizeof(key), "k%04zu", i % N_KEYS);
        /* Create: the element's encoding. */
        sd_buf_reset(&elem);
        if (sd_enc_bytes(&elem, key, (size_t)len) != SD_OK ||
            sd_enc_int(&elem, (int64_t)i) != SD_OK) {
            return -1;
        }
        /* ParDo: decode, map, re-encode. */
        sd_reader r = sd_reader_make(sd_buf_bytes(&elem));
        sd_bytes k;
        int64_t x;
        if (sd_read_bytes(&r, &k) != SD_OK || sd_read_int(&r, &x) != SD_OK) {
            return -1;
        }
        sd_buf_reset(&out);
        if (sd_enc_bytes(&out, k.ptr, k.len) != SD_OK || sd_enc_int(&out, x * 3 + 1) != SD_OK) {
            return -1;
        }
        /* GroupByKey: values appended under the key's encoding. */
        sd_reader r2 = sd_reader_make(sd_buf_bytes(&out));
        sd_bytes kenc = sd_bytes_make(out.data, 0), venc;
        if (sd_read_bytes(&r2, &k) != SD_OK) {
            return -1;
        }
        kenc.len = (size_t)(r2.p - out.data);
        venc = sd_bytes_make(r2.p, sd_reader_left(&r2));
        sd_buf *g = sd_map_get(&groups, kenc);
        if (g == NULL) {
            g = sd_calloc(1, sizeof(*g));
            if (g == NULL || sd_map_put(&groups, kenc, g) != SD_OK) {
                return -1;
            }
            sd_buf_init(g, 0);
        }
        if (sd_buf_append_bytes(g, venc) != SD_OK) {
            return -1;
        }
    }
    /* ParDo: the reduction per key. */
    size_t it = 0;
    sd_bytes gk;
    void *gv;
    while (sd_map_next(&groups, &it, &gk, &gv)) {
        sd_buf *g = gv;
        sd_reader r = sd_reader_make(sd_buf_bytes(g));
        key_result kr = { .times = 1 };
        int64_t x;
        while (!sd_reader_done(&r)) {
            if (sd_read_int(&r, &x) != SD_OK) {
                return -1;
            }
            kr.n++;
            kr.sum += x;
            kr.hash += mix(x);
        }
        sd_buf_reset(&out);
        if (sd_buf_append_bytes(&out, gk) != SD_OK || sd_enc_int(&out, kr.sum) != SD_OK) {
            return -1;
        }
        int ki = key_index(gk);
        if (ki < 0) {
            return -1;
        }
        res[ki] = kr;
        *checksum += kr.sum;
    }
    sd_map_deinit(&groups);
    sd_buf_deinit(&elem);
    sd_buf_deinit(&out);
    return 0;
}

/* ================================================================ runs */

/* One pipeline over items; OUT: *checksum (the counter), *wall and *cpu seconds. */
static int
run_pipeline(const sd_bytes *items, size_t n, int64_t *checksum, double *wall, double *cpu)
{
    pthread_mutex_lock(&seen_lock);
    memset(seen, 0, sizeof(seen));
    seen_bad = 0;
    pthread_mutex_unlock(&seen_lock);
    double t0 = now_s(), c0 = cpu_s();
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
    *wall = now_s() - t0;
    *cpu = cpu_s() - c0;
    if (st != SD_OK) {
        fprintf(stderr, "bench_sdk: pipeline failed: %s\n", sd_err_msg(&err));
    } else {
        *checksum = sd_run_result_counter(&res, "checksum");
        sd_run_result_deinit(&res);
    }
    sd_pipeline_destroy(p);
    return st == SD_OK ? 0 : -1;
}

/* Compare the Sum DoFn's records with the baseline's, key by key. Returns 0 when equal. */
static int check_results(const key_result want[N_KEYS], int64_t want_sum, int64_t got_sum)
{
    int bad = 0;
    pthread_mutex_lock(&seen_lock);
    if (seen_bad > 0) {
        fprintf(stderr, "bench_sdk: %d groups with a malformed key\n", seen_bad);
        bad++;
    }
    for (int i = 0; i < N_KEYS && bad < 10; i++) {
        const key_result *w = &want[i], *g = &seen[i];
        if (w->times != g->times || w->n != g->n || w->sum != g->sum || w->hash != g->hash) {
            fprintf(stderr,
                    "bench_sdk: key k%04d: pipeline reduced it %d times (%lld values, sum %lld, "
                    "hash %016llx), the plain loop %d times (%lld values, sum %lld, hash "
                    "%016llx)\n",
                    i, g->times, (long long)g->n, (long long)g->sum, (unsigned long long)g->hash,
                    w->times, (long long)w->n, (long long)w->sum, (unsigned long long)w->hash);
            bad++;
        }
    }
    pthread_mutex_unlock(&seen_lock);
    if (got_sum != want_sum) {
        fprintf(stderr, "bench_sdk: checksum mismatch: pipeline %lld, plain loop %lld\n",
                (long long)got_sum, (long long)want_sum);
        bad++;
    }
    return bad == 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of t[0..n) (sorts t, so t[0] is then the minimum). */
static double median_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/*
 * Throughput, interleaved: each round runs the plain loop, then the pipeline, and checks the
 * pipeline's results against the loop's. Returns the ratio of the CPU-time medians (loop
 * rate / pipeline rate), or a negative number on failure.
 */
static double run_throughput(size_t n, int rounds)
{
    sd_buf all;
    sd_bytes *items = NULL;
    sd_buf_init(&all, 0);
    double *t = sd_calloc(4 * (size_t)rounds, sizeof(double));
    static key_result want[N_KEYS];
    if (t == NULL || make_inputs(n, &all, &items) != 0) {
        fprintf(stderr, "bench_sdk: out of memory making inputs\n");
        return -1;
    }
    double *pw = t, *pc = t + rounds, *lw = t + 2 * rounds, *lc = t + 3 * rounds;
    double ratio = -1;
    printf("throughput: Create -> ParDo -> GroupByKey -> ParDo, %zu KV elements, %d keys, %d "
           "rounds (CPU time [wall])\n",
           n, N_KEYS, rounds);
    int i;
    for (i = 0; i < rounds; i++) {
        int64_t want_sum, got_sum = 0;
        memset(want, 0, sizeof(want));
        double t0 = now_s(), c0 = cpu_s();
        int rc = plain_loop(n, want, &want_sum);
        lw[i] = now_s() - t0;
        lc[i] = cpu_s() - c0;
        if (rc != 0) {
            fprintf(stderr, "bench_sdk: plain loop failed\n");
            break;
        }
        if (run_pipeline(items, n, &got_sum, &pw[i], &pc[i]) != 0 ||
            check_results(want, want_sum, got_sum) != 0) {
            break;
        }
        printf("  round %d: pipeline %8.1f ms [%.1f] (%.0f elements/s)  loop %8.1f ms [%.1f] "
               "(%.0f elements/s)  ratio %.2f [%.2f]\n",
               i + 1, pc[i] * 1e3, pw[i] * 1e3, (double)n / pc[i], lc[i] * 1e3, lw[i] * 1e3,
               (double)n / lc[i], pc[i] / lc[i], pw[i] / lw[i]);
    }
    if (i == rounds) {
        double pwm = median_of(pw, rounds), pcm = median_of(pc, rounds);
        double lwm = median_of(lw, rounds), lcm = median_of(lc, rounds);
        printf("  embedded runner  min %8.1f ms  median %8.1f ms (%.0f elements/s)  [wall min "
               "%.1f median %.1f]\n",
               pc[0] * 1e3, pcm * 1e3, (double)n / pcm, pw[0] * 1e3, pwm * 1e3);
        printf("  plain C loop     min %8.1f ms  median %8.1f ms (%.0f elements/s)  [wall min "
               "%.1f median %.1f]\n",
               lc[0] * 1e3, lcm * 1e3, (double)n / lcm, lw[0] * 1e3, lwm * 1e3);
        printf("  contents checked every round: each key once, count, sum and hash of its "
               "values equal\n");
        printf("  ratio (loop rate / pipeline rate): of mins %.2f, of medians %.2f [wall: of "
               "mins %.2f, of medians %.2f]\n",
               pc[0] / lc[0], pcm / lcm, pw[0] / lw[0], pwm / lwm);
        ratio = pcm / lcm;
    }
    sd_free(t);
    sd_free(items);
    sd_buf_deinit(&all);
    return ratio;
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
    int64_t seen_n = sd_run_result_counter(&res, "seen");
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    if (st != SD_OK || seen_n != 1) {
        fprintf(stderr, "bench_sdk: one-element pipeline %s: %s (seen %lld)\n",
                endpoint != NULL ? "on the reused runner" : "on a fresh runner",
                st != SD_OK ? sd_err_msg(&err) : "wrong result", (long long)seen_n);
        return -1;
    }
    return ms;
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

/* ================================================================ --memory */

/* bench:gen: from the impulse, N elements KV<"k%04d" (i % 1000), i> (N: the config, decimal). */
static sd_status gen_process(sd_ctx *c, void *state)
{
    sd_bytes cfg = sd_ctx_config(c);
    char num[32];
    sd_buf *b = state;
    if (cfg.len == 0 || cfg.len >= sizeof(num)) {
        return sd_fail(c, "bench: gen needs a count");
    }
    memcpy(num, cfg.ptr, cfg.len);
    num[cfg.len] = '\0';
    uint64_t n = strtoull(num, NULL, 10);
    for (uint64_t i = 0; i < n; i++) {
        char key[16];
        int len = snprintf(key, sizeof(key), "k%04d", (int)(i % N_KEYS));
        sd_buf_reset(b);
        if (sd_enc_bytes(b, key, (size_t)len) != SD_OK || sd_enc_int(b, (int64_t)i) != SD_OK) {
            return SD_ENOMEM;
        }
        sd_status st = sd_emit(c, 0, sd_buf_bytes(b));
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* One --memory run (in a child process): OUT: wall seconds. limit NULL: no budget. */
static int memory_run(uint64_t n, const char *limit, double *wall)
{
    static key_result want[N_KEYS];
    int64_t want_sum = 0, got_sum = 0;
    memset(want, 0, sizeof(want));
    for (uint64_t i = 0; i < n; i++) { /* what the Map makes of i: 3i + 1 */
        key_result *w = &want[i % N_KEYS];
        int64_t x = (int64_t)i * 3 + 1;
        w->times = 1;
        w->n++;
        w->sum += x;
        w->hash += mix(x);
        want_sum += x;
    }
    char num[32];
    snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
    sd_pipeline *p = sd_pipeline_create("bench-memory");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *imp = sd_impulse(p, "Impulse");
    sd_pcoll *in = sd_apply(p, "Gen", imp, "bench:gen", sd_bytes_make(num, strlen(num)), kv);
    sd_pcoll *m = sd_apply(p, "Map", in, "bench:map", SD_BYTES_NULL, kv);
    sd_pcoll *g = sd_group_by_key(p, "Group", m);
    sd_apply(p, "Sum", g, "bench:sum", SD_BYTES_NULL, kv);
    const char *names[] = { "beam:option:sundial_memory_limit:v1" };
    const char *values[] = { limit != NULL ? limit : "0" };
    sd_run_options o = { .n_options = 1, .option_names = names, .option_values = values };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    double t0 = now_s();
    sd_status st = sd_pipeline_run(p, &o, &res, &err);
    *wall = now_s() - t0;
    if (st != SD_OK) {
        fprintf(stderr, "bench_sdk: pipeline failed: %s\n", sd_err_msg(&err));
    } else {
        got_sum = sd_run_result_counter(&res, "checksum");
        sd_run_result_deinit(&res);
    }
    sd_pipeline_destroy(p);
    return st == SD_OK ? check_results(want, want_sum, got_sum) : -1;
}

/* --memory: budgeted and unbudgeted runs interleaved, each in a child process. */
static int run_memory(uint64_t n, const char *limit, int rounds)
{
    double *t = sd_calloc(4 * (size_t)rounds, sizeof(double));
    if (t == NULL) {
        return 1;
    }
    double *bw = t, *br = t + rounds, *uw = t + 2 * rounds, *ur = t + 3 * rounds;
    printf("memory budget: Impulse -> Gen (%llu KV elements, %d keys) -> Map -> GroupByKey -> "
           "Sum, sundial_memory_limit=%s against no limit, %d rounds\n",
           (unsigned long long)n, N_KEYS, limit, rounds);
    for (int i = 0; i < 2 * rounds; i++) {
        bool budget = i % 2 == 0;
        int pipefd[2];
        fflush(stdout);
        if (pipe(pipefd) != 0) {
            perror("bench_sdk: pipe");
            return 1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("bench_sdk: fork");
            return 1;
        }
        if (pid == 0) {
            double res[2] = { 0, 0 };
            close(pipefd[0]);
            int rc = memory_run(n, budget ? limit : NULL, &res[0]);
            struct rusage ru;
            res[1] = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : -1;
            if (write(pipefd[1], res, sizeof(res)) != (ssize_t)sizeof(res)) {
                rc = -1;
            }
            _exit(rc == 0 ? 0 : 1);
        }
        close(pipefd[1]);
        double res[2] = { -1, -1 };
        ssize_t got = read(pipefd[0], res, sizeof(res));
        close(pipefd[0]);
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
            got != (ssize_t)sizeof(res)) {
            fprintf(stderr, "bench_sdk: the %s run failed\n", budget ? "budgeted" : "unbudgeted");
            sd_free(t);
            return 1;
        }
        (budget ? bw : uw)[i / 2] = res[0];
        (budget ? br : ur)[i / 2] = res[1];
        printf("  round %d %-10s %8.1f s  peak RSS %7.0f MB  (contents checked)\n", i / 2 + 1,
               budget ? limit : "no limit", res[0], res[1]);
    }
    double bwm = median_of(bw, rounds), brm = median_of(br, rounds);
    double uwm = median_of(uw, rounds), urm = median_of(ur, rounds);
    printf("  budget %-9s time min %.1f s median %.1f s, peak RSS min %.0f MB median %.0f MB\n",
           limit, bw[0], bwm, br[0], brm);
    printf("  no limit         time min %.1f s median %.1f s, peak RSS min %.0f MB median %.0f "
           "MB\n",
           uw[0], uwm, ur[0], urm);
    printf("ratio memory_budget_time %.2f\n", bwm / uwm);
    printf("ratio memory_budget_rss %.2f\n", brm / urm);
    sd_free(t);
    return 0;
}

/* --scale: run_throughput at 10x steps, each in a child process; its peak RSS after. */
static int run_scale(int rounds)
{
    printf("C SDK pipeline, scaling (%d keys, %d rounds a size, each size in its own process)\n",
           N_KEYS, rounds);
    for (size_t size = 100000; size <= 10000000; size *= 10) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("bench_sdk: fork");
            return 1;
        }
        if (pid == 0) {
            double ratio = run_throughput(size, rounds);
            struct rusage ru;
            long rss = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
            printf("  peak RSS %ld MB (%.0f bytes an element)\n", rss / 1024,
                   (double)rss * 1024.0 / (double)size);
            printf("ratio sdk_pipeline_%zu %.2f\n", size, ratio);
            fflush(stdout);
            _exit(ratio < 0 ? 1 : 0);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench_sdk: the %zu-element run failed\n", size);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t n = 1000000;
    int rounds = 5, runs = 10;
    int code;
    static const sd_dofn mapfn = { .setup = buf_setup,
                                   .process = map_process,
                                   .teardown = buf_teardown };
    static const sd_dofn sumfn = { .setup = buf_setup,
                                   .process = sum_process,
                                   .teardown = buf_teardown };
    static const sd_dofn ident = { .process = ident_process };
    static const sd_dofn genfn = { .setup = buf_setup,
                                   .process = gen_process,
                                   .teardown = buf_teardown };
    if (sd_register_dofn("bench:map", &mapfn) != SD_OK ||
        sd_register_dofn("bench:sum", &sumfn) != SD_OK ||
        sd_register_dofn("bench:ident", &ident) != SD_OK ||
        sd_register_dofn("bench:gen", &genfn) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    if (argc > 1 && strcmp(argv[1], "--memory") == 0) {
        uint64_t mn = argc > 2 ? strtoull(argv[2], NULL, 10) : 50000000;
        const char *limit = argc > 3 ? argv[3] : "256MiB";
        int r = argc > 4 ? (int)strtol(argv[4], NULL, 10) : 3;
        if (mn == 0 || r <= 0) {
            fprintf(stderr, "usage: bench_sdk --memory [N >= 1 [LIMIT [ROUNDS >= 1]]]\n");
            return 2;
        }
        return run_memory(mn, limit, r);
    }
    if (argc > 1 && strcmp(argv[1], "--scale") == 0) {
        int r = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 3;
        if (r <= 0) {
            fprintf(stderr, "usage: bench_sdk --scale [ROUNDS >= 1]\n");
            return 2;
        }
        return run_scale(r);
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-n") == 0) {
            n = (size_t)strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-R") == 0) {
            rounds = (int)strtol(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-r") == 0) {
            runs = (int)strtol(argv[i + 1], NULL, 10);
        }
    }
    if (n == 0 || rounds <= 0 || runs <= 0) {
        fprintf(stderr, "usage: bench_sdk [-n elements] [-R rounds] [-r latency runs]\n");
        return 2;
    }
    double fresh[2], reused[2];
    if (run_latency(runs, fresh, reused) != 0) {
        return 1;
    }
    printf("latency: one-element pipeline submit-to-DONE, %d runs, interleaved\n", runs);
    printf("  fresh embedded runner per run  min %6.2f ms  median %6.2f ms\n", fresh[0], fresh[1]);
    printf("  one reused runner              min %6.2f ms  median %6.2f ms\n", reused[0],
           reused[1]);
    printf("  latency ratio reused/fresh (medians) %.2f\n", reused[1] / fresh[1]);
    fflush(stdout);
    double ratio = run_throughput(n, rounds);
    if (ratio < 0) {
        return 1;
    }
    printf("ratio sdk_pipeline %.2f\n", ratio);
    return 0;
}
