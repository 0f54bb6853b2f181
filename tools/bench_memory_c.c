/*
 * bench_memory_c: the C SDK's side of tools/bench_memory.sh. It submits one pipeline to a
 * running job server (`sundial serve`), with the loopback worker in this process, so the
 * server's resident size can be measured on its own:
 *
 *   Impulse -> MakeValues (one input element emits COUNT KV<varint key, bytes> elements, each
 *   value SIZE bytes, key = index % KEYS: one bundle whose output is COUNT * SIZE bytes of
 *   values) -> GroupByKey -> CheckGroup (every byte of every value checked, one summary line a
 *   key) -> an assertion on the KEYS summary lines.
 *
 * The data in flight is the bundle's encoded elements, the KV bytes the coder makes for each
 * (the varint key, the value's varint length, its SIZE bytes), without the windowed-value
 * header (timestamp, window, pane) that frames each on the Data stream. It is printed as
 * `in_flight_bytes N` before the run; `done` follows a run whose contents checked.
 *
 * Usage: bench_memory_c --endpoint HOST:PORT [--count N] [--size BYTES] [--keys K]
 *        (defaults 256 values of 1 MiB over 256 keys: 256 MiB in one bundle)
 * It is also its own SDK worker binary (sd_sdk_main) should a runner start it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sundial/sundial.h"

/* Byte j of value `seed`: cheap, position dependent, different for every seed. */
static uint8_t pattern(uint64_t seed, size_t j)
{
    return (uint8_t)(seed * 131u + j * 7u + (j >> 13) * 3u);
}

typedef struct config {
    int64_t count, size, keys;
} config;

/* The DoFn config: three varints (count, size, keys). */
static sd_status read_config(sd_ctx *c, config *cf)
{
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    if (sd_read_int(&r, &cf->count) != SD_OK || sd_read_int(&r, &cf->size) != SD_OK ||
        sd_read_int(&r, &cf->keys) != SD_OK || cf->count < 0 || cf->size < 8 || cf->keys < 1) {
        return sd_fail(c, "config: want three varints (count >= 0, size >= 8, keys >= 1)");
    }
    return SD_OK;
}

/* The number of bytes of a varint of v (v >= 0). */
static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* A value of `size` bytes: its index i (8 bytes, little endian), then pattern(i, j). */
static sd_status make_process(sd_ctx *c, void *state)
{
    config cf;
    sd_status st = read_config(c, &cf);
    sd_buf b, v;
    (void)state;
    sd_buf_init(&b, 0);
    sd_buf_init(&v, 0);
    if (st == SD_OK) {
        st = sd_buf_reserve(&v, (size_t)cf.size);
    }
    for (int64_t i = 0; st == SD_OK && i < cf.count; i++) {
        sd_buf_reset(&b);
        for (size_t j = 0; j < 8; j++) {
            v.data[j] = (uint8_t)((uint64_t)i >> (8 * j));
        }
        for (size_t j = 8; j < (size_t)cf.size; j++) {
            v.data[j] = pattern((uint64_t)i, j);
        }
        v.len = (size_t)cf.size;
        st = sd_enc_int(&b, i % cf.keys);
        if (st == SD_OK) {
            st = sd_enc_bytes(&b, v.data, v.len);
        }
        if (st == SD_OK) {
            st = sd_emit(c, 0, sd_buf_bytes(&b));
        }
    }
    sd_buf_deinit(&b);
    sd_buf_deinit(&v);
    return st;
}

/* KV<varint, Iterable<bytes>> -> "key K: N values, B bytes" once every value checked. */
static sd_status check_process(sd_ctx *c, void *state)
{
    config cf;
    sd_status st = read_config(c, &cf);
    sd_bytes key, v;
    sd_iter it;
    bool has;
    int64_t k, n = 0, bytes = 0;
    char out[96];
    (void)state;
    if (st != SD_OK) {
        return st;
    }
    sd_reader kr = sd_reader_make(sd_ctx_grouped(c, &key, &it) == SD_OK ? key : (sd_bytes){ 0 });
    if (sd_read_int(&kr, &k) != SD_OK) {
        return sd_fail(c, "check: not a grouped KV with a varint key");
    }
    while ((st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader vr = sd_reader_make(v);
        sd_bytes p;
        if (sd_read_bytes(&vr, &p) != SD_OK || p.len != (size_t)cf.size) {
            return sd_fail(c, "check: key %" PRId64 ": a value is not %" PRId64 " bytes", k,
                           cf.size);
        }
        uint64_t i = 0;
        for (size_t j = 0; j < 8; j++) {
            i |= (uint64_t)p.ptr[j] << (8 * j);
        }
        if (i >= (uint64_t)cf.count || (int64_t)(i % (uint64_t)cf.keys) != k) {
            return sd_fail(c, "check: key %" PRId64 ": value index %" PRIu64 " is wrong", k, i);
        }
        for (size_t j = 8; j < p.len; j++) {
            if (p.ptr[j] != pattern(i, j)) {
                return sd_fail(c, "check: value %" PRIu64 ": byte %zu differs", i, j);
            }
        }
        n++;
        bytes += (int64_t)p.len;
    }
    if (st != SD_OK) {
        return sd_fail(c, "check: reading the values failed");
    }
    int len = snprintf(out, sizeof(out), "key %" PRId64 ": %" PRId64 " values, %" PRId64 " bytes",
                       k, n, bytes);
    return sd_emit_str(c, out, (size_t)len);
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_memory_c --endpoint HOST:PORT [--count N] [--size BYTES >= 8] "
                    "[--keys K]\n");
    return 2;
}

static int run(const char *endpoint, config cf)
{
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    if (sd_enc_int(&cfg, cf.count) != SD_OK || sd_enc_int(&cfg, cf.size) != SD_OK ||
        sd_enc_int(&cfg, cf.keys) != SD_OK) {
        return 1;
    }
    /* The expected summary of each key that gets a value. */
    int64_t n_keys = cf.count < cf.keys ? cf.count : cf.keys;
    char **want = calloc((size_t)n_keys + 1, sizeof(*want));
    uint64_t in_flight = 0;
    for (int64_t i = 0; i < cf.count; i++) {
        in_flight +=
            varint_len((uint64_t)(i % cf.keys)) + varint_len((uint64_t)cf.size) + (uint64_t)cf.size;
    }
    for (int64_t k = 0; want != NULL && k < n_keys; k++) {
        int64_t n = cf.count / cf.keys + (k < cf.count % cf.keys ? 1 : 0);
        want[k] = malloc(96);
        if (want[k] == NULL) {
            return 1;
        }
        snprintf(want[k], 96, "key %" PRId64 ": %" PRId64 " values, %" PRId64 " bytes", k, n,
                 n * cf.size);
    }
    if (want == NULL) {
        return 1;
    }
    printf("in_flight_bytes %" PRIu64 "\n", in_flight);
    fflush(stdout);
    sd_pipeline *p = sd_pipeline_create("bench-memory");
    sd_pcoll *seed = sd_impulse(p, "Seed");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_varint(p), sd_pcoder_bytes(p));
    sd_pcoll *kvs = sd_apply(p, "MakeValues", seed, "bench_memory:make", sd_buf_bytes(&cfg), kv);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", kvs);
    sd_pcoll *out = sd_apply(p, "CheckGroup", grouped, "bench_memory:check", sd_buf_bytes(&cfg),
                             sd_pcoder_string(p));
    sd_assert_strings(p, "Check", out, (const char *const *)want, (size_t)n_keys);
    sd_run_options opts = { .endpoint = endpoint, .timeout_ms = 600000 };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    int rc = 0;
    if (st != SD_OK || res.state != SD_RUN_DONE) {
        fprintf(stderr, "bench_memory_c: the run failed: %s\n",
                st != SD_OK ? sd_err_msg(&err) : "not DONE");
        rc = 1;
    } else {
        printf("done\n");
    }
    if (st == SD_OK || res.state != SD_RUN_UNKNOWN) {
        sd_run_result_deinit(&res);
    }
    sd_pipeline_destroy(p);
    for (int64_t k = 0; k < n_keys; k++) {
        free(want[k]);
    }
    free(want);
    sd_buf_deinit(&cfg);
    return rc;
}

int main(int argc, char **argv)
{
    static const sd_dofn make = { .process = make_process };
    static const sd_dofn check = { .process = check_process };
    int code;
    if (sd_register_dofn("bench_memory:make", &make) != SD_OK ||
        sd_register_dofn("bench_memory:check", &check) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const char *endpoint = NULL;
    config cf = { .count = 256, .size = 1 << 20, .keys = 256 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            return usage();
        }
        const char *v = argv[++i];
        if (strcmp(a, "--endpoint") == 0) {
            endpoint = v;
        } else if (strcmp(a, "--count") == 0) {
            cf.count = strtoll(v, NULL, 10);
        } else if (strcmp(a, "--size") == 0) {
            cf.size = strtoll(v, NULL, 10);
        } else if (strcmp(a, "--keys") == 0) {
            cf.keys = strtoll(v, NULL, 10);
        } else {
            return usage();
        }
    }
    if (endpoint == NULL || cf.count < 1 || cf.size < 8 || cf.keys < 1) {
        return usage();
    }
    return run(endpoint, cf);
}
