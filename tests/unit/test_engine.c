/*
 * Unit tests for runner/engine: the element manager driven like an executor would drive it.
 *
 * A small fake executor ("harness") registers PCollections and stages, pulls bundles, decodes
 * their input with the coder library, runs fake DoFns (C callbacks) that emit outputs, state
 * and timers through the engine API, and completes the bundles — checking the engine's
 * invariants (sd__em_check, including watermark monotonicity) after every mutation. Each
 * pipeline case runs under several bundle shapes (greedy, one element per bundle, a byte cap,
 * several bundles in flight completed out of order) and must give the same answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

/* ========================================================================================== */
/* Coders                                                                                     */
/* ========================================================================================== */

static sd_coder *c_bytes, *c_varint, *c_gw, *c_iw, *c_kv, *c_iter, *c_grouped;
static sd_coder *wv_bytes_g, *wv_varint_g, *wv_kv_g, *wv_kv_i, *wv_grouped_g, *wv_grouped_i;
static sd_coder *c_timer_g, *c_timer_i;

static sd_coder *mk(sd_coder_kind kind, sd_coder *a, sd_coder *b)
{
    sd_coder *c = NULL;
    sd_err err = { 0 };
    sd_status rc = b != NULL   ? sd_coder_new(&c, &err, kind, a, b, NULL)
                   : a != NULL ? sd_coder_new(&c, &err, kind, a, NULL)
                               : sd_coder_new(&c, &err, kind, NULL);
    if (rc != SD_OK) {
        fprintf(stderr, "coder: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(rc, SD_OK);
    return c;
}

static int coders_setup(void **state)
{
    (void)state;
    c_bytes = mk(SD_CODER_BYTES, NULL, NULL);
    c_varint = mk(SD_CODER_VARINT, NULL, NULL);
    c_gw = mk(SD_CODER_GLOBAL_WINDOW, NULL, NULL);
    c_iw = mk(SD_CODER_INTERVAL_WINDOW, NULL, NULL);
    c_kv = mk(SD_CODER_KV, c_bytes, c_varint);
    c_iter = mk(SD_CODER_ITERABLE, c_varint, NULL);
    c_grouped = mk(SD_CODER_KV, c_bytes, c_iter);
    wv_bytes_g = mk(SD_CODER_WINDOWED_VALUE, c_bytes, c_gw);
    wv_varint_g = mk(SD_CODER_WINDOWED_VALUE, c_varint, c_gw);
    wv_kv_g = mk(SD_CODER_WINDOWED_VALUE, c_kv, c_gw);
    wv_kv_i = mk(SD_CODER_WINDOWED_VALUE, c_kv, c_iw);
    wv_grouped_g = mk(SD_CODER_WINDOWED_VALUE, c_grouped, c_gw);
    wv_grouped_i = mk(SD_CODER_WINDOWED_VALUE, c_grouped, c_iw);
    c_timer_g = mk(SD_CODER_TIMER, c_bytes, c_gw);
    c_timer_i = mk(SD_CODER_TIMER, c_bytes, c_iw);
    return 0;
}

static int coders_teardown(void **state)
{
    sd_coder *all[] = { c_bytes, c_varint,     c_gw,         c_iw,        c_kv,
                        c_iter,  c_grouped,    wv_bytes_g,   wv_varint_g, wv_kv_g,
                        wv_kv_i, wv_grouped_g, wv_grouped_i, c_timer_g,   c_timer_i };
    (void)state;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sd_coder_destroy(all[i]);
    }
    return 0;
}

/* ========================================================================================== */
/* The fake executor                                                                          */
/* ========================================================================================== */

typedef struct harness harness;

typedef struct h_elem {
    sd_time ts;
    sd_window win;
    sd_pane pane;
    sd_bytes elem;
} h_elem;

typedef sd_status (*h_fn)(harness *h, sd_bundle *b, const h_elem *e, void *ctx);
typedef sd_status (
    *h_tfn)(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx);

typedef struct h_shape {
    const char *name;
    size_t max_elems;
    size_t max_bytes;
    size_t max_inflight;
    bool lifo;
    int bundle_shape; /* SD_SHAPE_* */
    uint64_t seed;    /* sd_em_config.schedule_seed */
} h_shape;

/* Every pipeline case runs under each of these and must give the same answer. */
static const h_shape SHAPES[] = {
    { "greedy", 0, 0, 1, false, SD_SHAPE_GREEDY, 0 },
    { "one-element", 1, 0, 1, false, SD_SHAPE_GREEDY, 0 },
    { "byte-cap-40", 0, 40, 1, false, SD_SHAPE_GREEDY, 0 },
    { "three-in-flight-lifo", 2, 0, 3, true, SD_SHAPE_GREEDY, 0 },
    { "one-key", 0, 0, 1, false, SD_SHAPE_ONE_KEY, 0 },
    { "one-element-shape", 0, 0, 1, false, SD_SHAPE_ONE_ELEMENT, 0 },
    { "seed-7", 0, 0, 1, false, SD_SHAPE_GREEDY, 7 },
    { "seed-42-one-key-two-in-flight", 0, 0, 2, false, SD_SHAPE_ONE_KEY, 42 },
    { "seed-99-one-element-three-lifo", 0, 0, 3, true, SD_SHAPE_ONE_ELEMENT, 99 },
    { "seed-1234-cap-3-fifo", 3, 0, 2, false, SD_SHAPE_GREEDY, 1234 },
};
#define N_SHAPES (sizeof(SHAPES) / sizeof(SHAPES[0]))

#define H_MAX_RESULTS 512
#define H_RESULT_LEN  160

struct harness {
    sd_em *em;
    sd_err err;
    h_shape shape;
    bool oom; /* report errors instead of asserting */

    struct {
        const char *id;
        const sd_coder *wv;
    } pcs[24];

    size_t n_pcs;

    struct {
        const char *stage;
        h_fn fn;
        h_tfn tfn;
        void *ctx;
        const sd_coder *timer_coder;
    } fns[16];

    size_t n_fns;
    sd_time prev[64];
    char results[H_MAX_RESULTS][H_RESULT_LEN];
    size_t n_results;
    size_t n_bundles;
    size_t max_input;
    uint64_t sched_hash; /* FNV-1a over every bundle handed out: stage, input, timers */
    int64_t engine_ns;   /* time spent inside next_bundle and complete_bundle */
    sd_buf dump;
};

static void h_check(harness *h)
{
    const char *bad = sd__em_check(h->em, h->prev);
    if (bad != NULL) {
        fail_msg("engine invariant broken (%s): %s", h->shape.name, bad);
    }
}

static sd_status h_init(harness *h, const h_shape *shape, const sd_em_config *base, bool oom)
{
    sd_em_config cfg = { 0 };
    memset(h, 0, sizeof(*h));
    if (base != NULL) {
        cfg = *base;
    }
    h->shape = *shape;
    h->oom = oom;
    cfg.max_bundle_elements = shape->max_elems;
    cfg.max_bundle_bytes = shape->max_bytes;
    cfg.bundle_shape = shape->bundle_shape;
    cfg.schedule_seed = shape->seed;
    for (size_t i = 0; i < 64; i++) {
        h->prev[i] = SD_TIME_MIN;
    }
    sd_buf_init(&h->dump, 0);
    return sd_em_create(&cfg, &h->em);
}

static void h_deinit(harness *h)
{
    sd_em_destroy(h->em);
    sd_buf_deinit(&h->dump);
    h->em = NULL;
}

static sd_status h_pcoll(harness *h, const char *id, const sd_coder *wv, const sd_windowing *ws)
{
    h->pcs[h->n_pcs].id = id;
    h->pcs[h->n_pcs].wv = wv;
    h->n_pcs++;
    sd_status rc = sd_em_add_pcollection(h->em, id, wv, ws, &h->err);
    if (!h->oom && rc != SD_OK) {
        fail_msg("add_pcollection %s: %s", id, sd_err_msg(&h->err));
    }
    return rc;
}

static const sd_coder *h_coder(const harness *h, const char *id)
{
    for (size_t i = 0; i < h->n_pcs; i++) {
        if (strcmp(h->pcs[i].id, id) == 0) {
            return h->pcs[i].wv;
        }
    }
    fail_msg("no pcollection %s", id);
    return NULL;
}

static sd_status h_add(harness *h, const sd_stage_spec *spec, h_fn fn, h_tfn tfn, void *ctx)
{
    sd_status rc = sd_em_add_stage(h->em, spec, &h->err);
    if (!h->oom && rc != SD_OK) {
        fail_msg("add_stage %s: %s", spec->id, sd_err_msg(&h->err));
    }
    if (fn != NULL || tfn != NULL) {
        h->fns[h->n_fns].stage = spec->id;
        h->fns[h->n_fns].fn = fn;
        h->fns[h->n_fns].tfn = tfn;
        h->fns[h->n_fns].ctx = ctx;
        h->fns[h->n_fns].timer_coder =
            spec->n_timer_families > 0 ? spec->timer_families[0].timer_coder : NULL;
        h->n_fns++;
    }
    return rc;
}

/* Shorthand for a stage with at most one input and a list of outputs. */
static sd_status h_stage(harness *h,
                         const char *id,
                         sd_stage_kind kind,
                         const char *input,
                         const char *const *outputs,
                         size_t n_outputs,
                         h_fn fn,
                         void *ctx)
{
    const char *ins[1] = { input };
    sd_stage_spec spec = { .id = id,
                           .kind = kind,
                           .inputs = ins,
                           .n_inputs = input != NULL ? 1 : 0,
                           .outputs = outputs,
                           .n_outputs = n_outputs };
    return h_add(h, &spec, fn, NULL, ctx);
}

static SD_PRINTF(2, 3) void h_record(harness *h, const char *fmt, ...)
{
    va_list ap;
    assert_true(h->n_results < H_MAX_RESULTS);
    va_start(ap, fmt);
    vsnprintf(h->results[h->n_results++], H_RESULT_LEN, fmt, ap);
    va_end(ap);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

static void h_expect(harness *h, const char *const *want, size_t n)
{
    qsort(h->results, h->n_results, H_RESULT_LEN, cmp_str);
    char sorted[H_MAX_RESULTS][H_RESULT_LEN];
    for (size_t i = 0; i < n; i++) {
        snprintf(sorted[i], H_RESULT_LEN, "%s", want[i]);
    }
    qsort(sorted, n, H_RESULT_LEN, cmp_str);
    for (size_t i = 0; i < h->n_results || i < n; i++) {
        const char *got = i < h->n_results ? h->results[i] : "(missing)";
        const char *exp = i < n ? sorted[i] : "(extra)";
        if (strcmp(got, exp) != 0) {
            for (size_t j = 0; j < h->n_results; j++) {
                fprintf(stderr, "  got[%zu] %s\n", j, h->results[j]);
            }
            fail_msg("shape %s: result %zu: got \"%s\", want \"%s\"", h->shape.name, i, got, exp);
        }
    }
}

/* Emit one windowed value to an output, split over two calls so elements straddle. */
static sd_status h_emit(harness *h,
                        sd_bundle *b,
                        const char *pcoll,
                        sd_time ts,
                        const sd_window *wins,
                        size_t n_wins,
                        const sd_pane *pane,
                        sd_bytes elem)
{
    sd_buf buf;
    sd_buf_init(&buf, 0);
    const sd_coder *wv = h_coder(h, pcoll);
    sd_status rc = sd_wv_encode_header(&buf, sd_wv_window_coder(wv), ts, wins, n_wins, pane);
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(&buf, elem);
    }
    size_t half = buf.len / 2;
    if (rc == SD_OK) {
        rc = sd_em_bundle_output(h->em, b, pcoll, sd_bytes_make(buf.data, half), &h->err);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_output(h->em, b, pcoll, sd_bytes_make(buf.data + half, buf.len - half),
                                 &h->err);
    }
    sd_buf_deinit(&buf);
    return rc;
}

static sd_status
h_emit_global(harness *h, sd_bundle *b, const char *pcoll, sd_time ts, sd_bytes elem)
{
    sd_window w = sd_window_global();
    sd_pane p = SD_PANE_NO_FIRING;
    return h_emit(h, b, pcoll, ts, &w, 1, &p, elem);
}

static sd_status kv_bytes(sd_buf *out, const char *key, uint64_t v)
{
    sd_status rc = sd_buf_put_lp(out, sd_bytes_str(key));
    return rc == SD_OK ? sd_buf_put_varint(out, v) : rc;
}

static int find_fn(const harness *h, const char *stage)
{
    for (size_t i = 0; i < h->n_fns; i++) {
        if (strcmp(h->fns[i].stage, stage) == 0) {
            return (int)i;
        }
    }
    return -1;
}

static void h_hash(harness *h, sd_bytes data)
{
    uint64_t x = h->sched_hash == 0 ? 0xcbf29ce484222325ULL : h->sched_hash;
    for (size_t i = 0; i < data.len; i++) {
        x = (x ^ data.ptr[i]) * 0x100000001b3ULL;
    }
    h->sched_hash = (x ^ 0xff) * 0x100000001b3ULL; /* a separator between pieces */
}

/* The engine's bundle shapes hold: one element or one timer; one key per stateful bundle. */
static void h_check_shape(harness *h, sd_bundle *b)
{
    size_t n_timers = 0;
    sd_bytes key = SD_BYTES_NULL;
    bool have_key = false;
    for (size_t i = 0; i < sd_bundle_n_timer_inputs(b); i++) {
        const char *tid, *fid;
        sd_bytes timers;
        sd_bundle_timer_input(b, i, &tid, &fid, &timers);
        sd_reader r = sd_reader_make(timers);
        sd_timer t;
        sd_timer_init(&t);
        const sd__family *fam = NULL;
        for (size_t k = 0; k < b->stage->n_families; k++) {
            if (strcmp(b->stage->families[k].family_id, fid) == 0 &&
                strcmp(b->stage->families[k].transform_id, tid) == 0) {
                fam = &b->stage->families[k];
            }
        }
        assert_non_null(fam);
        while (!sd_reader_done(&r)) {
            assert_int_equal(sd_timer_decode(fam->timer_coder, &r, &t, NULL), SD_OK);
            n_timers++;
            if (h->shape.bundle_shape == SD_SHAPE_ONE_KEY) {
                if (have_key && !sd_bytes_equal(key, t.key)) {
                    fail_msg("shape %s: bundle %s has timers of two keys", h->shape.name,
                             sd_bundle_id(b));
                }
                key = t.key; /* borrowed from `timers`, which outlives this check */
                have_key = true;
            }
        }
        sd_timer_deinit(&t);
    }
    if (h->shape.bundle_shape == SD_SHAPE_ONE_ELEMENT) {
        assert_true(sd_bundle_input_count(b) + n_timers <= 1);
    }
    if (h->shape.bundle_shape == SD_SHAPE_ONE_KEY && b->stage->stateful) {
        for (size_t i = 0; i < b->n_primary; i++) {
            const sd__elem *e = SD_VEC_AT(&b->elems, sd__elem, i);
            sd_bytes k = sd_bytes_make(e->slab->data + e->off, e->key_len);
            if (have_key && !sd_bytes_equal(key, k)) {
                fail_msg("shape %s: bundle %s mixes keys", h->shape.name, sd_bundle_id(b));
            }
            key = k;
            have_key = true;
        }
    }
}

/* Run the fake DoFn of b's stage over its first `limit` input elements and its timers
 * (outputs are not committed yet). */
static sd_status h_process_n(harness *h, sd_bundle *b, size_t limit)
{
    int f = find_fn(h, sd_bundle_stage(b));
    sd_status rc = SD_OK;
    sd_bytes in = sd_bundle_input(b);
    if (!h->oom && h->shape.max_bytes > 0 && sd_bundle_input_count(b) > 1) {
        assert_true(in.len <= h->shape.max_bytes);
    }
    if (!h->oom && h->shape.max_elems > 0) {
        assert_true(sd_bundle_input_count(b) + sd_bundle_n_timer_inputs(b) <= h->shape.max_elems ||
                    sd_bundle_input_count(b) <= h->shape.max_elems);
    }
    h->max_input = in.len > h->max_input ? in.len : h->max_input;
    h_hash(h, sd_bytes_str(sd_bundle_stage(b)));
    h_hash(h, in);
    for (size_t i = 0; i < sd_bundle_n_timer_inputs(b); i++) {
        const char *tid, *fid;
        sd_bytes timers;
        sd_bundle_timer_input(b, i, &tid, &fid, &timers);
        h_hash(h, timers);
    }
    if (!h->oom) {
        h_check_shape(h, b);
    }
    if (f < 0) {
        return SD_OK;
    }
    const sd_coder *wv = h_coder(h, sd_bundle_input_pcollection(b));
    sd_reader r = sd_reader_make(in);
    sd_wv_header hdr;
    sd_wv_header_init(&hdr);
    size_t n = 0;
    while (rc == SD_OK && !sd_reader_done(&r) && n < limit) {
        sd_bytes elem;
        rc = sd_wv_decode(wv, &r, &hdr, &elem, &h->err);
        if (rc != SD_OK) {
            break;
        }
        assert_int_equal(hdr.windows.n, 1);
        h_elem e = {
            .ts = hdr.ts, .win = sd_windows_items(&hdr.windows)[0], .pane = hdr.pane, .elem = elem
        };
        n++;
        if (h->fns[f].fn != NULL) {
            rc = h->fns[f].fn(h, b, &e, h->fns[f].ctx);
        }
    }
    sd_wv_header_deinit(&hdr);
    if (rc == SD_OK && limit == SIZE_MAX) {
        assert_int_equal(n, sd_bundle_input_count(b));
    }
    for (size_t i = 0; rc == SD_OK && i < sd_bundle_n_timer_inputs(b); i++) {
        const char *tid, *fid;
        sd_bytes timers;
        sd_bundle_timer_input(b, i, &tid, &fid, &timers);
        sd_reader tr = sd_reader_make(timers);
        sd_timer t;
        sd_timer_init(&t);
        while (rc == SD_OK && !sd_reader_done(&tr)) {
            rc = sd_timer_decode(h->fns[f].timer_coder, &tr, &t, &h->err);
            if (rc == SD_OK && h->fns[f].tfn != NULL) {
                rc = h->fns[f].tfn(h, b, fid, &t, h->fns[f].ctx);
            }
        }
        sd_timer_deinit(&t);
    }
    return rc;
}

static sd_status h_process(harness *h, sd_bundle *b)
{
    return h_process_n(h, b, SIZE_MAX);
}

/* Pull, process and complete bundles until the engine is done (or stuck). */
static sd_status h_run(harness *h)
{
    sd_bundle *open[8];
    size_t n_open = 0;
    sd_status rc = SD_OK;
    for (;;) {
        while (n_open < h->shape.max_inflight) {
            sd_bundle *b = NULL;
            int64_t t0 = sd_mono_now_ns();
            rc = sd_em_next_bundle(h->em, &b, &h->err);
            h->engine_ns += sd_mono_now_ns() - t0;
            if (rc != SD_OK) {
                goto out;
            }
            if (!h->oom) {
                h_check(h);
            }
            if (b == NULL) {
                break;
            }
            h->n_bundles++;
            open[n_open++] = b;
            rc = h_process(h, b);
            if (rc != SD_OK) {
                goto out;
            }
        }
        if (n_open == 0) {
            if (sd_em_done(h->em)) {
                return SD_OK;
            }
            sd_buf_reset(&h->dump);
            return sd_em_check_stuck(h->em, &h->dump);
        }
        size_t pick = h->shape.lifo ? n_open - 1 : 0;
        sd_bundle *b = open[pick];
        memmove(&open[pick], &open[pick + 1], (n_open - pick - 1) * sizeof(open[0]));
        n_open--;
        int64_t t0 = sd_mono_now_ns();
        rc = sd_em_complete_bundle(h->em, b, &h->err);
        h->engine_ns += sd_mono_now_ns() - t0;
        if (rc != SD_OK) {
            goto out;
        }
        if (!h->oom) {
            h_check(h);
        }
    }
out:
    for (size_t i = 0; i < n_open; i++) {
        sd_em_fail_bundle(h->em, open[i]);
    }
    if (!h->oom) {
        fail_msg("shape %s: run failed: %s (%s)", h->shape.name, sd_err_msg(&h->err),
                 sd_status_name(rc));
    }
    return rc;
}

static void h_run_ok(harness *h)
{
    sd_status rc = h_run(h);
    if (rc != SD_OK) {
        fail_msg("shape %s: %s\n%.*s", h->shape.name, sd_status_name(rc), (int)h->dump.len,
                 (const char *)h->dump.data);
    }
    assert_true(sd_em_done(h->em));
    assert_int_equal(sd_em_in_progress(h->em), 0);
    assert_int_equal(sd_em_check_stuck(h->em, NULL), SD_OK);
}

/* ========================================================================================== */
/* Decoding helpers for fake DoFns                                                            */
/* ========================================================================================== */

static __attribute__((unused)) void get_kv(sd_bytes elem, sd_bytes *key, uint64_t *v)
{
    sd_reader r = sd_reader_make(elem);
    assert_int_equal(sd_reader_lp(&r, key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, v), SD_OK);
    assert_true(sd_reader_done(&r));
}

/* A grouped element: key, count, varint values. */
static size_t get_grouped(sd_bytes elem, sd_bytes *key, uint64_t *vals, size_t cap)
{
    sd_reader r = sd_reader_make(elem);
    uint32_t n;
    assert_int_equal(sd_reader_lp(&r, key), SD_OK);
    assert_int_equal(sd_reader_be32(&r, &n), SD_OK);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v;
        assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
        if (i < cap) {
            vals[i] = v;
        }
    }
    assert_true(sd_reader_done(&r));
    return n;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint8_t pane_byte(const sd_pane *p)
{
    uint8_t mem[32]; /* a pane is at most 21 bytes: no allocation (the OOM loop runs this) */
    sd_buf b = { .data = mem, .cap = sizeof(mem) };
    assert_int_equal(sd_pane_encode(p, &b), SD_OK);
    return mem[0];
}

/* Record a grouped element: "k=a w=[0,10) ts=9 pane=07 v=1,5" (values sorted). */
static sd_status fn_collect_grouped(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t vals[64];
    char line[H_RESULT_LEN];
    (void)b;
    (void)ctx;
    size_t n = get_grouped(e->elem, &key, vals, 64);
    assert_true(n <= 64);
    qsort(vals, n, sizeof(vals[0]), cmp_u64);
    int off;
    if (e->win.global) {
        off = snprintf(line, sizeof(line), "k=%.*s w=G ts=%s pane=%02x v=", (int)key.len,
                       (const char *)key.ptr, e->ts == SD_TIME_GLOBAL_MAX ? "GMAX" : "?",
                       pane_byte(&e->pane));
    } else {
        off =
            snprintf(line, sizeof(line), "k=%.*s w=[%lld,%lld) ts=%lld pane=%02x v=", (int)key.len,
                     (const char *)key.ptr, (long long)e->win.start, (long long)e->win.end,
                     (long long)e->ts, pane_byte(&e->pane));
    }
    for (size_t i = 0; i < n && off < (int)sizeof(line); i++) {
        off += snprintf(line + off, sizeof(line) - (size_t)off, i ? ",%llu" : "%llu",
                        (unsigned long long)vals[i]);
    }
    h_record(h, "%s", line);
    return SD_OK;
}

/* ========================================================================================== */
/* Wordcount: impulse -> split (SDK) -> GBK -> count (SDK)                                    */
/* ========================================================================================== */

static const char *const LINES[] = {
    "the quick brown fox",
    "jumps over the lazy dog",
    "the dog barks",
};

static sd_status fn_split(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_status rc = SD_OK;
    (void)ctx;
    /* The impulse element: empty bytes, nested (one zero byte), at the minimum timestamp. */
    assert_int_equal(e->elem.len, 1);
    assert_int_equal(e->elem.ptr[0], 0);
    assert_true(e->ts == SD_TIME_MIN);
    assert_true(e->win.global);
    assert_int_equal(pane_byte(&e->pane), 0x0f);
    for (size_t i = 0; rc == SD_OK && i < sizeof(LINES) / sizeof(LINES[0]); i++) {
        const char *p = LINES[i];
        while (rc == SD_OK && *p) {
            const char *s = p;
            while (*p && *p != ' ') {
                p++;
            }
            sd_buf kv;
            sd_buf_init(&kv, 0);
            rc = sd_buf_put_lp(&kv, sd_bytes_make(s, (size_t)(p - s)));
            if (rc == SD_OK) {
                rc = sd_buf_put_varint(&kv, 1);
            }
            if (rc == SD_OK) {
                rc = h_emit_global(h, b, "words", e->ts, sd_buf_bytes(&kv));
            }
            sd_buf_deinit(&kv);
            while (*p == ' ') {
                p++;
            }
        }
    }
    return rc;
}

static sd_status fn_count(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t vals[16];
    (void)b;
    (void)ctx;
    size_t n = get_grouped(e->elem, &key, vals, 16);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += vals[i];
    }
    assert_true(e->win.global);
    assert_true(e->ts == SD_TIME_GLOBAL_MAX);
    assert_int_equal(pane_byte(&e->pane), 0x07);
    if (!h->oom) {
        h_record(h, "%.*s=%llu", (int)key.len, (const char *)key.ptr, (unsigned long long)sum);
    }
    return SD_OK;
}

static sd_status build_wordcount(harness *h)
{
    static const char *imp[] = { "imp" }, *words[] = { "words" }, *grouped[] = { "grouped" };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "words", wv_kv_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "split", SD_STAGE_SDK, "imp", words, 1, fn_split, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "words", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "count", SD_STAGE_SDK, "grouped", NULL, 0, fn_count, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

static void test_wordcount(void **state)
{
    static const char *const want[] = { "the=3",  "quick=1", "brown=1", "fox=1",  "jumps=1",
                                        "over=1", "lazy=1",  "dog=2",   "barks=1" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        assert_int_equal(build_wordcount(&h), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, sizeof(want) / sizeof(want[0]));
        sd_em_stage_stats stats;
        for (size_t i = 0; i < sd_em_n_stages(h.em); i++) {
            sd_em_stage_info(h.em, i, &stats);
            assert_true(stats.input_wm == SD_TIME_MAX);
            assert_true(stats.output_wm == SD_TIME_MAX);
            assert_int_equal(stats.pending, 0);
        }
        h_deinit(&h);
    }
}

/* ========================================================================================== */
/* Windowing: gen -> assign (SDK, assigns windows) -> GBK -> collect                           */
/* ========================================================================================== */

typedef struct row {
    const char *key;
    uint64_t value;
    sd_time ts;
} row;

typedef struct window_case {
    const char *name;
    sd_windowing ws;
    row rows[12];
    size_t n_rows;
    const char *want[12];
    size_t n_want;
} window_case;

static sd_status fn_gen_rows(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const window_case *wc = ctx;
    sd_status rc = SD_OK;
    (void)e;
    for (size_t i = 0; rc == SD_OK && i < wc->n_rows; i++) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, wc->rows[i].key, wc->rows[i].value);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "raw", wc->rows[i].ts, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    return rc;
}

/* WindowInto, SDK-side: fixed, sliding or session windows for each element. */
static sd_status fn_assign(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const window_case *wc = ctx;
    const sd_windowing *ws = &wc->ws;
    sd_window wins[8];
    size_t n = 0;
    sd_pane p = SD_PANE_NO_FIRING;
    switch (ws->kind) {
    case SD_WINDOWFN_FIXED: {
        sd_time start = e->ts - ((e->ts - ws->offset_ms) % ws->size_ms + ws->size_ms) % ws->size_ms;
        wins[n++] = sd_window_interval(start, start + ws->size_ms);
        break;
    }
    case SD_WINDOWFN_SLIDING: {
        sd_time last =
            e->ts - ((e->ts - ws->offset_ms) % ws->period_ms + ws->period_ms) % ws->period_ms;
        for (sd_time s = last; s > e->ts - ws->size_ms && n < 8; s -= ws->period_ms) {
            wins[n++] = sd_window_interval(s, s + ws->size_ms);
        }
        break;
    }
    case SD_WINDOWFN_SESSIONS:
        wins[n++] = sd_window_interval(e->ts, e->ts + ws->gap_ms);
        break;
    default:
        wins[n++] = sd_window_global();
        break;
    }
    return h_emit(h, b, "windowed", e->ts, wins, n, &p, e->elem);
}

static sd_status build_windowed(harness *h, window_case *wc)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "raw", wv_kv_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_rows, wc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "raw", windowed, 1, fn_assign, wc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

static window_case WINDOW_CASES[] = {
    { .name = "fixed-10",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 },
      .rows = { { "a", 1, 1 }, { "a", 5, 5 }, { "a", 12, 12 }, { "b", 3, 3 } },
      .n_rows = 4,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=1,5", "k=a w=[10,20) ts=19 pane=07 v=12",
                "k=b w=[0,10) ts=9 pane=07 v=3" },
      .n_want = 3 },
    { .name = "fixed-10-negative-times",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 },
      .rows = { { "a", 1, -1 }, { "a", 2, -10 }, { "a", 3, -11 } },
      .n_rows = 3,
      .want = { "k=a w=[-10,0) ts=-1 pane=07 v=1,2", "k=a w=[-20,-10) ts=-11 pane=07 v=3" },
      .n_want = 2 },
    { .name = "sliding-10-every-5",
      .ws = { .kind = SD_WINDOWFN_SLIDING, .size_ms = 10, .period_ms = 5 },
      .rows = { { "a", 7, 7 }, { "a", 2, 2 } },
      .n_rows = 2,
      .want = { "k=a w=[-5,5) ts=4 pane=07 v=2", "k=a w=[0,10) ts=9 pane=07 v=2,7",
                "k=a w=[5,15) ts=14 pane=07 v=7" },
      .n_want = 3 },
    { .name = "sessions-gap-10",
      .ws = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 10 },
      .rows = { { "a", 1, 1 }, { "a", 5, 5 }, { "a", 30, 30 }, { "b", 2, 2 } },
      .n_rows = 4,
      .want = { "k=a w=[1,15) ts=14 pane=07 v=1,5", "k=a w=[30,40) ts=39 pane=07 v=30",
                "k=b w=[2,12) ts=11 pane=07 v=2" },
      .n_want = 3 },
    { .name = "sessions-bridge-merges-three",
      .ws = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 10 },
      .rows = { { "a", 1, 1 }, { "a", 15, 15 }, { "a", 8, 8 }, { "a", 40, 40 } },
      .n_rows = 4,
      .want = { "k=a w=[1,25) ts=24 pane=07 v=1,8,15", "k=a w=[40,50) ts=49 pane=07 v=40" },
      .n_want = 2 },
    { .name = "sessions-touching-do-not-merge",
      .ws = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 10 },
      .rows = { { "a", 1, 0 }, { "a", 2, 10 } },
      .n_rows = 2,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=1", "k=a w=[10,20) ts=19 pane=07 v=2" },
      .n_want = 2 },
    { .name = "fixed-earliest",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10, .output_time = SD_OUTPUT_TIME_EARLIEST },
      .rows = { { "a", 1, 4 }, { "a", 2, 2 }, { "a", 3, 8 } },
      .n_rows = 3,
      .want = { "k=a w=[0,10) ts=2 pane=07 v=1,2,3" },
      .n_want = 1 },
    { .name = "fixed-latest",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10, .output_time = SD_OUTPUT_TIME_LATEST },
      .rows = { { "a", 1, 4 }, { "a", 2, 2 }, { "a", 3, 8 } },
      .n_rows = 3,
      .want = { "k=a w=[0,10) ts=8 pane=07 v=1,2,3" },
      .n_want = 1 },
    { .name = "sessions-earliest",
      .ws = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 5, .output_time = SD_OUTPUT_TIME_EARLIEST },
      .rows = { { "a", 1, 7 }, { "a", 2, 3 } },
      .n_rows = 2,
      .want = { "k=a w=[3,12) ts=3 pane=07 v=1,2" },
      .n_want = 1 },
    { .name = "fixed-with-lateness-batch",
      .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10, .allowed_lateness_ms = 1000 },
      .rows = { { "a", 1, 1 } },
      .n_rows = 1,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=1" },
      .n_want = 1 },
};

static void test_windows_table(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(WINDOW_CASES) / sizeof(WINDOW_CASES[0]); c++) {
        window_case *wc = &WINDOW_CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
            h.shape.name = wc->name;
            assert_int_equal(build_windowed(&h, wc), SD_OK);
            h_run_ok(&h);
            h_expect(&h, wc->want, wc->n_want);
            assert_int_equal(sd__em_gbk_groups(h.em, "gbk"), 0);
            h_deinit(&h);
        }
    }
}

/* ========================================================================================== */
/* Flatten                                                                                    */
/* ========================================================================================== */

static sd_status fn_emit_values(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const uint64_t *vals = ctx; /* vals[0] = count, then (output index, value) */
    static const char *outs[] = { "pa", "pb" };
    sd_status rc = SD_OK;
    (void)e;
    for (uint64_t i = 0; rc == SD_OK && i < vals[0]; i++) {
        uint8_t v[10];
        sd_buf buf = { .data = v, .cap = sizeof(v) };
        rc = sd_buf_put_varint(&buf, vals[2 + 2 * i]);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, outs[vals[1 + 2 * i]], (sd_time)vals[2 + 2 * i],
                               sd_bytes_make(v, buf.len));
        }
    }
    return rc;
}

static sd_status fn_record_varint(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    (void)b;
    (void)ctx;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    h_record(h, "v=%llu ts=%lld", (unsigned long long)v, (long long)e->ts);
    return SD_OK;
}

static void test_flatten(void **state)
{
    static const uint64_t a_vals[] = { 2, 0, 1, 0, 2 };
    static const uint64_t b_vals[] = { 1, 1, 3 };
    static const char *imp[] = { "imp" }, *pa[] = { "pa" }, *pb[] = { "pb" }, *pf[] = { "pf" },
                      *both[] = { "pa", "pb" };
    static const char *const want[] = { "v=1 ts=1", "v=2 ts=2", "v=3 ts=3" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "pa", wv_varint_g, NULL);
        h_pcoll(&h, "pb", wv_varint_g, NULL);
        h_pcoll(&h, "pf", wv_varint_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "a", SD_STAGE_SDK, "imp", pa, 1, fn_emit_values, (void *)a_vals);
        h_stage(&h, "b", SD_STAGE_SDK, "imp", pb, 1, fn_emit_values, (void *)b_vals);
        sd_stage_spec flat = { .id = "flatten",
                               .kind = SD_STAGE_FLATTEN,
                               .inputs = both,
                               .n_inputs = 2,
                               .outputs = pf,
                               .n_outputs = 1 };
        h_add(&h, &flat, NULL, NULL, NULL);
        h_stage(&h, "sink", SD_STAGE_SDK, "pf", NULL, 0, fn_record_varint, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, 3);
        h_deinit(&h);
    }
}

/*
 * A Flatten with no inputs (Beam's Flatten of an empty PCollectionList) is an empty PCollection
 * that is complete at once: its consumer sees no elements and the job ends.
 */
static void test_flatten_no_inputs(void **state)
{
    static const char *imp[] = { "imp" }, *pf[] = { "pf" }, *pm[] = { "pm" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "pf", wv_varint_g, NULL);
        h_pcoll(&h, "pm", wv_varint_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        sd_stage_spec flat = { .id = "flatten",
                               .kind = SD_STAGE_FLATTEN,
                               .outputs = pf,
                               .n_outputs = 1 };
        h_add(&h, &flat, NULL, NULL, NULL);
        h_stage(&h, "sink", SD_STAGE_SDK, "pf", pm, 1, fn_record_varint, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, NULL, 0);
        sd_time wm = 0;
        assert_int_equal(sd_em_pcollection_watermark(h.em, "pf", &wm), SD_OK);
        assert_true(wm == SD_TIME_MAX);
        h_deinit(&h);
    }
}

/* ========================================================================================== */
/* Side inputs                                                                                */
/* ========================================================================================== */

static sd_status fn_side_producer(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    static const char *const keys[] = { "k1", "k2", "k1" };
    sd_status rc = SD_OK;
    (void)e;
    (void)ctx;
    for (size_t i = 0; rc == SD_OK && i < 3; i++) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, keys[i], 10 + i);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "side", 0, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    return rc;
}

static void fmt_varints(sd_bytes data, char *out, size_t cap)
{
    sd_reader r = sd_reader_make(data);
    size_t off = 0;
    out[0] = 0;
    while (!sd_reader_done(&r)) {
        uint64_t v;
        assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
        off +=
            (size_t)snprintf(out + off, cap - off, off ? ",%llu" : "%llu", (unsigned long long)v);
    }
}

static sd_status fn_side_reader(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_buf out;
    char a[64], c[64], d[64];
    sd_bytes gw = SD_BYTES_NULL; /* the global window encodes to nothing */
    sd_bytes k1 = sd_bytes_make("\x02k1", 3), k9 = sd_bytes_make("\x02k9", 3);
    (void)e;
    (void)ctx;
    sd_buf_init(&out, 0);
    /* Multimap access by key, and the keys. */
    assert_int_equal(sd_em_side_input_get(h->em, b, "T", "mm", gw, &k1, &out, &h->err), SD_OK);
    fmt_varints(sd_buf_bytes(&out), a, sizeof(a));
    sd_buf_reset(&out);
    assert_int_equal(sd_em_side_input_get(h->em, b, "T", "mm", gw, &k9, &out, &h->err), SD_OK);
    assert_int_equal(out.len, 0);
    assert_int_equal(sd_em_side_input_keys(h->em, b, "T", "mm", gw, &out, &h->err), SD_OK);
    assert_int_equal(out.len, 6);
    assert_memory_equal(out.data, "\x02k1\x02k2", 6);
    sd_buf_reset(&out);
    /* Iterable access: the KV element encodings. */
    assert_int_equal(sd_em_side_input_get(h->em, b, "T", "it", gw, NULL, &out, &h->err), SD_OK);
    snprintf(c, sizeof(c), "%zu", out.len);
    sd_buf_reset(&out);
    /* Wrong access kinds and unknown ids are errors, not crashes. */
    assert_int_equal(sd_em_side_input_get(h->em, b, "T", "it", gw, &k1, &out, &h->err), SD_EINVAL);
    assert_int_equal(sd_em_side_input_get(h->em, b, "T", "mm", gw, NULL, &out, &h->err), SD_EINVAL);
    assert_int_equal(sd_em_side_input_get(h->em, b, "T", "nope", gw, NULL, &out, &h->err),
                     SD_ENOTFOUND);
    assert_int_equal(
        sd_em_side_input_get(h->em, b, "T", "it", sd_bytes_make("x", 1), NULL, &out, &h->err),
        SD_EPROTO);
    snprintf(d, sizeof(d), "%zu", out.len);
    h_record(h, "mm[k1]=%s it_bytes=%s after_errors=%s", a, c, d);
    sd_buf_deinit(&out);
    return SD_OK;
}

static void build_side(harness *h)
{
    static const char *imp[] = { "imp" }, *side[] = { "side" };
    h_pcoll(h, "imp", wv_bytes_g, NULL);
    h_pcoll(h, "side", wv_kv_g, NULL);
    h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(h, "producer", SD_STAGE_SDK, "imp", side, 1, fn_side_producer, NULL);
    sd_side_input_spec sides[] = { { "T", "mm", "side", SD_SIDE_MULTIMAP },
                                   { "T", "it", "side", SD_SIDE_ITERABLE } };
    const char *ins[] = { "imp" };
    sd_stage_spec reader = { .id = "reader",
                             .kind = SD_STAGE_SDK,
                             .inputs = ins,
                             .n_inputs = 1,
                             .side_inputs = sides,
                             .n_side_inputs = 2 };
    h_add(h, &reader, fn_side_reader, NULL, NULL);
    assert_int_equal(sd_em_start(h->em, &h->err), SD_OK);
}

static void test_side_inputs(void **state)
{
    /* 3 KV elements of 4 bytes each (02 'k' 'n' varint). */
    static const char *const want[] = { "mm[k1]=10,12 it_bytes=12 after_errors=0" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        build_side(&h);
        h_run_ok(&h);
        h_expect(&h, want, 1);
        h_deinit(&h);
    }
}

static void test_side_input_waits_for_producer(void **state)
{
    harness h;
    sd_bundle *p = NULL, *b = NULL;
    (void)state;
    h_shape shape = { "manual", 0, 0, 8, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_side(&h);
    assert_int_equal(sd_em_next_bundle(h.em, &p, &h.err), SD_OK);
    assert_non_null(p);
    assert_string_equal(sd_bundle_stage(p), "producer");
    assert_int_equal(h_process(&h, p), SD_OK);
    /* The reader's side input is not complete while the producer runs: nothing is ready. */
    assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
    assert_null(b);
    assert_int_equal(sd_em_in_progress(h.em), 1);
    assert_int_equal(sd_em_check_stuck(h.em, NULL), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, p, &h.err), SD_OK);
    h_check(&h);
    assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
    assert_non_null(b);
    assert_string_equal(sd_bundle_stage(b), "reader");
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_run_ok(&h);
    h_deinit(&h);
}

/* ========================================================================================== */
/* Splits, failures, caps, stuck detection                                                    */
/* ========================================================================================== */

static sd_status fn_gen_n(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    size_t n = (size_t)(uintptr_t)ctx;
    sd_status rc = SD_OK;
    (void)e;
    for (size_t i = 0; rc == SD_OK && i < n; i++) {
        uint8_t v[10];
        sd_buf buf = { .data = v, .cap = sizeof(v) };
        rc = sd_buf_put_varint(&buf, i);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "nums", (sd_time)i, sd_bytes_make(v, buf.len));
        }
    }
    return rc;
}

static void build_gen_sink(harness *h, size_t n)
{
    static const char *imp[] = { "imp" }, *nums[] = { "nums" };
    h_pcoll(h, "imp", wv_bytes_g, NULL);
    h_pcoll(h, "nums", wv_varint_g, NULL);
    h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(h, "gen", SD_STAGE_SDK, "imp", nums, 1, fn_gen_n, (void *)(uintptr_t)n);
    h_stage(h, "sink", SD_STAGE_SDK, "nums", NULL, 0, fn_record_varint, NULL);
    assert_int_equal(sd_em_start(h->em, &h->err), SD_OK);
}

static sd_bundle *pull(harness *h, const char *stage)
{
    sd_bundle *b = NULL;
    assert_int_equal(sd_em_next_bundle(h->em, &b, &h->err), SD_OK);
    h_check(h);
    assert_non_null(b);
    assert_string_equal(sd_bundle_stage(b), stage);
    return b;
}

static void test_channel_split(void **state)
{
    static const char *const want[] = { "v=0 ts=0", "v=1 ts=1", "v=2 ts=2", "v=3 ts=3",
                                        "v=4 ts=4" };
    harness h;
    (void)state;
    h_shape shape = { "split", 0, 0, 1, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 5);
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    h_check(&h);

    sd_bundle *b = pull(&h, "sink");
    assert_int_equal(sd_bundle_input_count(b), 5);
    /* The SDK processed the first two, then accepted a split at element 2. */
    assert_int_equal(sd_em_bundle_split(h.em, b, 6, &h.err), SD_EINVAL);
    assert_int_equal(sd_em_bundle_split(h.em, b, 2, &h.err), SD_OK);
    h_check(&h);
    assert_int_equal(sd_em_bundle_split(h.em, b, 3, &h.err), SD_EINVAL);
    h_record(&h, "v=0 ts=0");
    h_record(&h, "v=1 ts=1");
    /* The remainder is pending again and may run while the primary is still in flight. */
    sd_bundle *r = pull(&h, "sink");
    assert_int_equal(sd_bundle_input_count(r), 3);
    assert_int_equal(h_process(&h, r), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, r, &h.err), SD_OK);
    h_check(&h);
    assert_false(sd_em_done(h.em));
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_check(&h);
    h_run_ok(&h);
    h_expect(&h, want, 5);
    h_deinit(&h);
}

static void test_fail_bundle_retries_cleanly(void **state)
{
    static const char *const want[] = { "v=0 ts=0", "v=1 ts=1", "v=2 ts=2" };
    harness h;
    (void)state;
    h_shape shape = { "fail", 0, 0, 1, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 3);
    /* The first attempt of the generator emits output, then fails: nothing may leak out. */
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    sd_em_fail_bundle(h.em, g);
    h_check(&h);
    h.n_results = 0;
    g = pull(&h, "gen");
    assert_int_equal(sd_bundle_input_count(g), 1);
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    h_check(&h);
    /* A sink bundle fails once too. */
    sd_bundle *b = pull(&h, "sink");
    assert_int_equal(sd_bundle_input_count(b), 3);
    sd_em_fail_bundle(h.em, b);
    h_check(&h);
    h_run_ok(&h);
    h_expect(&h, want, 3);
    h_deinit(&h);
}

static void test_bad_output_bytes_fail_the_bundle(void **state)
{
    harness h;
    (void)state;
    h_shape shape = { "bad", 0, 0, 1, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 2);
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    /* A truncated windowed value at the end of the stream. */
    assert_int_equal(sd_em_bundle_output(h.em, g, "nums", sd_bytes_make("\x80\x00", 2), &h.err),
                     SD_OK);
    assert_int_equal(sd_em_bundle_output(h.em, g, "nope", sd_bytes_make("x", 1), &h.err),
                     SD_ENOTFOUND);
    sd_err err = { 0 };
    assert_int_equal(sd_em_complete_bundle(h.em, g, &err), SD_EPROTO);
    assert_non_null(strstr(sd_err_msg(&err), "nums"));
    h_check(&h);
    /* Nothing of it was committed: the generator's input is pending again. */
    assert_int_equal(sd_em_in_progress(h.em), 0);
    g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    h_run_ok(&h);
    assert_int_equal(h.n_results, 2);
    h_deinit(&h);
}

static void test_byte_cap(void **state)
{
    harness h;
    (void)state;
    h_shape shape = { "cap-30", 0, 30, 1, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    build_gen_sink(&h, 20);
    h_run_ok(&h);
    assert_int_equal(h.n_results, 20);
    /* 1 gen bundle + sink bundles of at most 30 bytes (each element is 8+4+1+1 = 14 bytes). */
    assert_true(h.max_input <= 30);
    assert_int_equal(h.n_bundles, 1 + 10);
    h_deinit(&h);
}

static void test_stuck_dump(void **state)
{
    harness h;
    sd_bundle *b = NULL;
    (void)state;
    h_shape shape = { "stuck", 0, 0, 1, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    assert_int_equal(build_wordcount(&h), SD_OK);
    /* A hold that nothing will ever release pins the splitter's output watermark, so the
     * GBK (global window) can never fire: the job must be reported stuck, not hang. */
    sd__stage *split = sd_map_get_str(&h.em->stage_by_id, "split");
    assert_int_equal(sd__tsbag_add(&split->holds, 5), SD_OK);
    for (;;) {
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        if (b == NULL) {
            break;
        }
        assert_int_equal(h_process(&h, b), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    }
    assert_false(sd_em_done(h.em));
    sd_buf dump;
    sd_buf_init(&dump, 0);
    assert_int_equal(sd_em_check_stuck(h.em, &dump), SD_ESTATE);
    assert_int_equal(sd_buf_append_byte(&dump, 0), SD_OK);
    const char *d = (const char *)dump.data;
    assert_non_null(strstr(d, "engine stuck"));
    assert_non_null(strstr(d, "stage gbk (gbk)"));
    assert_non_null(strstr(d, "gbk_values=12"));
    assert_non_null(strstr(d, "stage split (sdk): upstream=MAX in=MAX out=5 hold=5"));
    sd_buf_deinit(&dump);
    sd__tsbag_remove(&split->holds, 5);
    h_run_ok(&h);
    assert_int_equal(h.n_results, 9);
    h_deinit(&h);
}

/* ========================================================================================== */
/* Graph validation                                                                           */
/* ========================================================================================== */

static void test_graph_errors(void **state)
{
    static const struct {
        const char *name;
        sd_stage_kind kind;
        const char *in;
        const char *out;
        sd_status want;
    } rows[] = {
        { "gbk over a non-KV input", SD_STAGE_GBK, "imp", "g", SD_EINVAL },
        { "unknown input", SD_STAGE_SDK, "nope", NULL, SD_ENOTFOUND },
        { "second producer", SD_STAGE_SDK, "imp", "imp", SD_EEXIST },
        { "impulse with an input", SD_STAGE_IMPULSE, "imp", "g", SD_EINVAL },
        { "sdk stage without input", SD_STAGE_SDK, NULL, "g", SD_EINVAL },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_em *em;
        sd_err err = { 0 };
        static const char *imp[] = { "imp" };
        assert_int_equal(sd_em_create(NULL, &em), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "g", wv_grouped_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_EEXIST);
        sd_stage_spec imp_spec = {
            .id = "impulse", .kind = SD_STAGE_IMPULSE, .outputs = imp, .n_outputs = 1
        };
        assert_int_equal(sd_em_add_stage(em, &imp_spec, &err), SD_OK);
        const char *ins[] = { rows[i].in }, *outs[] = { rows[i].out };
        sd_stage_spec spec = { .id = "s",
                               .kind = rows[i].kind,
                               .inputs = ins,
                               .n_inputs = rows[i].in ? 1 : 0,
                               .outputs = outs,
                               .n_outputs = rows[i].out ? 1 : 0 };
        sd_err_clear(&err);
        sd_status rc = sd_em_add_stage(em, &spec, &err);
        if (rc != rows[i].want) {
            fail_msg("%s: got %s (%s)", rows[i].name, sd_status_name(rc), sd_err_msg(&err));
        }
        sd_em_destroy(em);
    }
    /* A consumed PCollection without a producer is rejected at start. */
    sd_em *em;
    sd_err err = { 0 };
    const char *ins[] = { "orphan" };
    assert_int_equal(sd_em_create(NULL, &em), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "orphan", wv_bytes_g, NULL, &err), SD_OK);
    sd_stage_spec s = { .id = "s", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1 };
    assert_int_equal(sd_em_add_stage(em, &s, &err), SD_OK);
    assert_int_equal(sd_em_start(em, &err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "orphan"));
    sd_em_destroy(em);
    /* Malformed triggers and non-windowed-value coders are refused. */
    assert_int_equal(sd_em_create(NULL, &em), SD_OK);
    sd_trigger bad = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 0 };
    sd_windowing ws = { .trigger = &bad };
    assert_int_equal(sd_em_add_pcollection(em, "t", wv_kv_g, &ws, &err), SD_EINVAL);
    sd_trigger lonely = { .kind = SD_TRIGGER_REPEAT };
    ws.trigger = &lonely;
    assert_int_equal(sd_em_add_pcollection(em, "t", wv_kv_g, &ws, &err), SD_EINVAL);
    assert_int_equal(sd_em_add_pcollection(em, "c", c_kv, NULL, &err), SD_EINVAL);
    sd_em_destroy(em);
    /* A trigger on session windows feeding a GBK is accepted (trigger state merges). */
    static const char *imp[] = { "imp" }, *kv[] = { "kv" }, *g[] = { "g" };
    sd_trigger count2 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 2 };
    sd_windowing sess = { .kind = SD_WINDOWFN_SESSIONS, .gap_ms = 10, .trigger = &count2 };
    assert_int_equal(sd_em_create(NULL, &em), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "kv", wv_kv_i, &sess, &err), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "g", wv_grouped_i, &sess, &err), SD_OK);
    sd_stage_spec s1 = { .id = "i", .kind = SD_STAGE_IMPULSE, .outputs = imp, .n_outputs = 1 };
    sd_stage_spec s2 = {
        .id = "p", .kind = SD_STAGE_SDK, .inputs = imp, .n_inputs = 1, .outputs = kv, .n_outputs = 1
    };
    sd_stage_spec s3 = {
        .id = "gbk", .kind = SD_STAGE_GBK, .inputs = kv, .n_inputs = 1, .outputs = g, .n_outputs = 1
    };
    assert_int_equal(sd_em_add_stage(em, &s1, &err), SD_OK);
    assert_int_equal(sd_em_add_stage(em, &s2, &err), SD_OK);
    assert_int_equal(sd_em_add_stage(em, &s3, &err), SD_OK);
    assert_int_equal(sd_em_start(em, &err), SD_OK);
    sd_em_destroy(em);
}

/* ========================================================================================== */
/* Stateful stages: user state and event-time timers                                         */
/* ========================================================================================== */

static sd_time fake_wall_now = 1000000000000LL;
static sd_time pt_origin = 1000000000000LL; /* processing times are recorded relative to it */

static sd_time fake_wall(void *ctx)
{
    (void)ctx;
    return fake_wall_now;
}

typedef struct timer_plan {
    const char *family;   /* the family to set on each element */
    bool processing_time; /* fire = wall + delay, else fire = delay (absolute event time) */
    int64_t delay;
    bool emit_windowed; /* on firing, emit KV<key, sum> in window [fire, fire + 10) */
    int loop_once;      /* the first firing sets one more timer, delay later */
} timer_plan;

static sd_status set_timer(harness *h,
                           sd_bundle *b,
                           const char *family,
                           sd_bytes key,
                           sd_time fire,
                           sd_time hold,
                           const sd_coder *timer_coder)
{
    sd_timer t;
    sd_buf buf;
    sd_window w = sd_window_global();
    sd_timer_init(&t);
    sd_buf_init(&buf, 0);
    t.key = key;
    t.tag = SD_BYTES_NULL;
    sd_status rc = sd_windows_set(&t.windows, &w, 1);
    t.fire = fire;
    t.hold = hold;
    t.pane = SD_PANE_NO_FIRING;
    if (rc == SD_OK) {
        rc = sd_timer_encode(timer_coder, &t, &buf, &h->err);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_timers(h->em, b, "T", family, sd_buf_bytes(&buf), &h->err);
    }
    sd_timer_deinit(&t);
    sd_buf_deinit(&buf);
    return rc;
}

/* Element: KV<key, v>. Append v to bag state "buf" of the key; set a timer (twice: the first
 * setting is superseded, last write wins). */
static sd_status fn_keyed(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const timer_plan *plan = ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes user_key;
    uint64_t v;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    uint8_t vb[10];
    sd_buf vbuf = { .data = vb, .cap = sizeof(vb) };
    sd_status rc = sd_buf_put_varint(&vbuf, v);
    if (rc == SD_OK) {
        rc = sd_em_user_state_append(h->em, b, "T", "buf", SD_BYTES_NULL, key, NULL,
                                     sd_bytes_make(vb, vbuf.len), &h->err);
    }
    sd_time base = plan->processing_time ? fake_wall_now : 0;
    if (rc == SD_OK) {
        rc = set_timer(h, b, plan->family, key, base + plan->delay / 2, e->ts, c_timer_g);
    }
    if (rc == SD_OK) {
        rc = set_timer(h, b, plan->family, key, base + plan->delay, e->ts, c_timer_g);
    }
    return rc;
}

static sd_status
fn_keyed_timer(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx)
{
    timer_plan *plan = ctx;
    sd_buf bag;
    sd_bytes window = SD_BYTES_NULL;
    sd_buf_init(&bag, 0);
    sd_status rc = sd_em_user_state_get(h->em, b, "T", "buf", window, t->key, NULL, &bag, &h->err);
    uint64_t sum = 0, n = 0;
    sd_reader r = sd_reader_make(sd_buf_bytes(&bag));
    while (rc == SD_OK && !sd_reader_done(&r)) {
        uint64_t v;
        assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
        sum += v;
        n++;
    }
    if (rc == SD_OK) {
        rc = sd_em_user_state_clear(h->em, b, "T", "buf", window, t->key, NULL, &h->err);
    }
    sd_reader kr = sd_reader_make(t->key);
    sd_bytes user_key;
    assert_int_equal(sd_reader_lp(&kr, &user_key), SD_OK);
    if (!plan->processing_time) {
        /* An event-time timer never fires before the input watermark passed it. */
        assert_true(sd_bundle_watermark(b) > t->fire);
    }
    sd_time rel = plan->processing_time ? sd_em_clock_now(h->em) - pt_origin : t->fire;
    h_record(h, "%s k=%.*s sum=%llu n=%llu at=%lld", family, (int)user_key.len,
             (const char *)user_key.ptr, (unsigned long long)sum, (unsigned long long)n,
             (long long)rel);
    if (rc == SD_OK && plan->emit_windowed) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = sd_buf_append_bytes(&kv, t->key);
        if (rc == SD_OK) {
            rc = sd_buf_put_varint(&kv, sum);
        }
        sd_window w = sd_window_interval(t->fire, t->fire + 10);
        sd_pane p = SD_PANE_NO_FIRING;
        if (rc == SD_OK) {
            rc = h_emit(h, b, "out", t->fire, &w, 1, &p, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    if (rc == SD_OK && plan->loop_once > 0) {
        plan->loop_once--;
        sd_time base = plan->processing_time ? fake_wall_now : 0;
        rc = set_timer(h, b, family, t->key, base + plan->delay * 2, t->hold, c_timer_g);
    }
    sd_buf_deinit(&bag);
    return rc;
}

static sd_status build_keyed(harness *h, window_case *wc, timer_plan *plan)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *out[] = { "out" },
                      *grouped[] = { "grouped" };
    static sd_windowing fixed10 = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 };
    sd_timer_family_spec fam = { "T", plan->family, plan->processing_time, c_timer_g };
    const char *ins[] = { "raw" };
    sd_stage_spec keyed = { .id = "keyed",
                            .kind = SD_STAGE_SDK,
                            .inputs = ins,
                            .n_inputs = 1,
                            .outputs = out,
                            .n_outputs = 1,
                            .stateful = true,
                            .timer_families = &fam,
                            .n_timer_families = 1 };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "raw", wv_kv_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "out", wv_kv_i, &fixed10);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_i, &fixed10);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_rows, wc);
    }
    if (rc == SD_OK) {
        rc = h_add(h, &keyed, fn_keyed, fn_keyed_timer, plan);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "out", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    if (!h->oom) {
        assert_int_equal(rc, SD_OK);
    }
    return rc;
}

static void test_event_time_timers_and_state(void **state)
{
    static window_case rows = {
        .rows = { { "a", 1, 1 }, { "b", 10, 2 }, { "a", 2, 3 }, { "a", 4, 4 }, { "b", 20, 5 } },
        .n_rows = 5
    };
    /* One firing per key at 1000 (the setting at 500 was superseded); the firing's output is
     * on time downstream because the timer's hold kept the stage's output watermark back. */
    static const char *const want[] = { "flush k=a sum=7 n=3 at=1000",
                                        "flush k=b sum=30 n=2 at=1000",
                                        "k=a w=[1000,1010) ts=1009 pane=07 v=7",
                                        "k=b w=[1000,1010) ts=1009 pane=07 v=30" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        timer_plan plan = { .family = "flush", .delay = 1000, .emit_windowed = true };
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, 4);
        sd_em_stage_stats st;
        sd_em_stage_info(h.em, 3, &st);
        assert_string_equal(st.id, "gbk");
        assert_int_equal(st.dropped_late, 0);
        h_deinit(&h);
    }
}

static void test_looping_timer(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 } }, .n_rows = 1 };
    static const char *const want[] = { "flush k=a sum=1 n=1 at=100", "flush k=a sum=0 n=0 at=200",
                                        "k=a w=[100,110) ts=109 pane=07 v=1",
                                        "k=a w=[200,210) ts=209 pane=07 v=0" };
    (void)state;
    harness h;
    timer_plan plan = { .family = "flush", .delay = 100, .emit_windowed = true, .loop_once = 1 };
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 4);
    h_deinit(&h);
}

static void test_user_state_is_tentative(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "a", 2, 2 } }, .n_rows = 2 };
    static const char *const want[] = { "flush k=a sum=3 n=2 at=1000" };
    harness h;
    (void)state;
    timer_plan plan = { .family = "flush", .delay = 1000 };
    assert_int_equal(h_init(&h, &SHAPES[1], NULL, false), SD_OK); /* one element per bundle */
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    /* The first keyed bundle appends state and sets timers, then fails: none of it stays. */
    sd_bundle *b = pull(&h, "keyed");
    assert_int_equal(h_process(&h, b), SD_OK);
    sd_buf got;
    sd_buf_init(&got, 0);
    sd_bytes key = sd_bytes_make("\x01"
                                 "a",
                                 2);
    assert_int_equal(
        sd_em_user_state_get(h.em, b, "T", "buf", SD_BYTES_NULL, key, NULL, &got, &h.err), SD_OK);
    assert_int_equal(got.len, 1); /* the bundle sees its own append */
    /* Key "a" is locked while this bundle runs: its second element must wait. */
    sd_bundle *other = NULL;
    assert_int_equal(sd_em_next_bundle(h.em, &other, &h.err), SD_OK);
    assert_null(other);
    sd_em_fail_bundle(h.em, b);
    h_check(&h);
    b = pull(&h, "keyed");
    sd_buf_reset(&got);
    assert_int_equal(
        sd_em_user_state_get(h.em, b, "T", "buf", SD_BYTES_NULL, key, NULL, &got, &h.err), SD_OK);
    assert_int_equal(got.len, 0);
    /* Multimap state: append, clear one key, list keys — all tentative until commit. */
    sd_bytes m1 = sd_bytes_make("\x02m1", 3), m2 = sd_bytes_make("\x02m2", 3);
    assert_int_equal(sd_em_user_state_append(h.em, b, "T", "mm", SD_BYTES_NULL, key, &m2,
                                             sd_bytes_make("\x05", 1), &h.err),
                     SD_OK);
    assert_int_equal(sd_em_user_state_append(h.em, b, "T", "mm", SD_BYTES_NULL, key, &m1,
                                             sd_bytes_make("\x07", 1), &h.err),
                     SD_OK);
    /* A value of zero bytes (Java's SetState: a multimap with VoidCoder values) still makes
     * its key present, before and after commit. */
    sd_bytes m3 = sd_bytes_make("\x02m3", 3);
    assert_int_equal(sd_em_user_state_append(h.em, b, "T", "mm", SD_BYTES_NULL, key, &m3,
                                             SD_BYTES_NULL, &h.err),
                     SD_OK);
    assert_int_equal(sd_em_user_state_keys(h.em, b, "T", "mm", SD_BYTES_NULL, key, &got, &h.err),
                     SD_OK);
    assert_int_equal(got.len, 9);
    assert_memory_equal(got.data, "\x02m1\x02m2\x02m3", 9);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_check(&h);
    b = pull(&h, "keyed");
    sd_buf_reset(&got);
    assert_int_equal(
        sd_em_user_state_get(h.em, b, "T", "mm", SD_BYTES_NULL, key, &m1, &got, &h.err), SD_OK);
    assert_int_equal(got.len, 1);
    assert_int_equal(got.data[0], 7);
    /* Entries (MultimapEntriesUserState): each key, then its values as an IterableCoder writes
     * them (a big-endian count, then the values), committed and tentative alike. */
    assert_int_equal(sd_em_user_state_append(h.em, b, "T", "mm", SD_BYTES_NULL, key, &m2,
                                             sd_bytes_make("\x09\x81\x01", 3), &h.err),
                     SD_OK);
    sd_buf_reset(&got);
    assert_int_equal(sd_em_user_state_entries(h.em, b, "T", "mm", SD_BYTES_NULL, key, c_varint,
                                              &got, &h.err),
                     SD_OK);
    static const uint8_t want_entries[] = { 2, 'm', '1', 0, 0,    0, 1, 7, 2, 'm', '2', 0, 0,
                                            0, 3,   5,   9, 0x81, 1, 2, 'm', '3', 0, 0, 0, 0 };
    assert_int_equal(got.len, sizeof(want_entries));
    assert_memory_equal(got.data, want_entries, sizeof(want_entries));
    /* Values that do not split with the value coder are the SDK's error, not a crash. */
    assert_int_equal(sd_em_user_state_entries(h.em, b, "T", "mm", SD_BYTES_NULL, key, c_gw,
                                              &got, &h.err),
                     SD_EPROTO);
    assert_non_null(strstr(sd_err_msg(&h.err), "multimap entries of state \"mm\""));
    assert_int_equal(sd_em_user_state_clear(h.em, b, "T", "mm", SD_BYTES_NULL, key, &m1, &h.err),
                     SD_OK);
    sd_buf_reset(&got);
    assert_int_equal(sd_em_user_state_entries(h.em, b, "T", "mm", SD_BYTES_NULL, key, c_varint,
                                              &got, &h.err),
                     SD_OK);
    assert_int_equal(got.len, sizeof(want_entries) - 8);
    assert_memory_equal(got.data, want_entries + 8, sizeof(want_entries) - 8);
    sd_buf_reset(&got);
    assert_int_equal(sd_em_user_state_keys(h.em, b, "T", "mm", SD_BYTES_NULL, key, &got, &h.err),
                     SD_OK);
    assert_int_equal(got.len, 6);
    assert_memory_equal(got.data, "\x02m2\x02m3", 6);
    /* A window that does not decode with the input's window coder is an error. */
    assert_int_equal(
        sd_em_user_state_get(h.em, b, "T", "buf", sd_bytes_make("zz", 2), key, NULL, &got, &h.err),
        SD_EPROTO);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    sd_buf_deinit(&got);
    h_run_ok(&h);
    h_expect(&h, want, 1);
    h_deinit(&h);
}

static void test_stateful_split_keeps_keys_locked(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "b", 2, 2 }, { "c", 3, 3 } },
                                .n_rows = 3 };
    static const char *const want[] = { "flush k=a sum=1 n=1 at=1000",
                                        "flush k=b sum=2 n=1 at=1000",
                                        "flush k=c sum=3 n=1 at=1000" };
    harness h;
    (void)state;
    timer_plan plan = { .family = "flush", .delay = 1000 };
    h_shape shape = { "stateful-split", 0, 0, 4, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    sd_bundle *g = pull(&h, "gen");
    assert_int_equal(h_process(&h, g), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
    sd_bundle *b = pull(&h, "keyed");
    assert_int_equal(sd_bundle_input_count(b), 3);
    /* The SDK only got to "a" (it processes element 0 below) and split off "b" and "c". */
    assert_int_equal(sd_em_bundle_split(h.em, b, 1, &h.err), SD_OK);
    h_check(&h);
    assert_int_equal(sd_bundle_input_count(b), 3); /* the input as sent does not change */
    /* The split-off keys stay locked by the running bundle until it ends. */
    sd_bundle *other = NULL;
    assert_int_equal(sd_em_next_bundle(h.em, &other, &h.err), SD_OK);
    assert_null(other);
    assert_int_equal(h_process_n(&h, b, 1), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_check(&h);
    other = pull(&h, "keyed");
    assert_int_equal(sd_bundle_input_count(other), 2);
    assert_int_equal(h_process(&h, other), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, other, &h.err), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 3);
    h_deinit(&h);
}

/* ========================================================================================== */
/* Processing time: synthetic clock, wall clock, delayed residuals                            */
/* ========================================================================================== */

static void test_processing_time_timer_synthetic_clock(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "b", 2, 2 } }, .n_rows = 2 };
    /* An hour-long timer fires at once in wall time, at +1h on the job's clock. Its attempt
     * to re-arm itself comes when the input is finished (the global window has expired), so
     * it is dropped and counted instead of keeping the job alive. */
    static const char *const want[] = { "pt k=a sum=1 n=1 at=3600000",
                                        "pt k=b sum=2 n=1 at=3600000" };
    (void)state;
    harness h;
    sd_em_config cfg = { .clock = SD_CLOCK_SYNTHETIC, .wall_now = fake_wall };
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 3600000, .loop_once = 1 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    assert_true(sd_em_clock_now(h.em) == fake_wall_now);
    h_run_ok(&h);
    h_expect(&h, want, 2);
    assert_true(sd_em_clock_now(h.em) == fake_wall_now + 3600000);
    sd_em_stage_stats st;
    sd_em_stage_info(h.em, 2, &st);
    assert_string_equal(st.id, "keyed");
    assert_int_equal(st.dropped_timers, 1);
    h_deinit(&h);
}

static void test_processing_time_timer_wall_clock(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 } }, .n_rows = 1 };
    harness h;
    sd_bundle *b = NULL;
    sd_time wake;
    (void)state;
    sd_em_config cfg = { .clock = SD_CLOCK_WALL, .wall_now = fake_wall };
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 500 };
    sd_time start = fake_wall_now;
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
    for (;;) {
        assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
        if (b == NULL) {
            break;
        }
        assert_int_equal(h_process(&h, b), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
        h_check(&h);
    }
    /* Waiting for time is not being stuck; the executor is told when to come back. */
    assert_false(sd_em_done(h.em));
    assert_int_equal(sd_em_check_stuck(h.em, NULL), SD_OK);
    assert_true(sd_em_next_wakeup(h.em, &wake));
    assert_true(wake == start + 500);
    fake_wall_now = start + 499;
    assert_int_equal(sd_em_next_bundle(h.em, &b, &h.err), SD_OK);
    assert_null(b);
    fake_wall_now = start + 500;
    h_run_ok(&h);
    assert_int_equal(h.n_results, 1);
    assert_non_null(strstr(h.results[0], "pt k=a sum=1 n=1 at=500"));
    fake_wall_now = start;
    h_deinit(&h);
}

/* A self-checkpointing DoFn: element v emits KV<"k", v> and, while v < 3, a residual v + 1
 * delayed by one second (a ProcessContinuation). */
static sd_status fn_resume(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    (void)ctx;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    h_record(h, "v=%llu at=%lld", (unsigned long long)v,
             (long long)(sd_em_clock_now(h->em) - fake_wall_now));
    sd_buf kv;
    sd_buf_init(&kv, 0);
    sd_status rc = kv_bytes(&kv, "k", v);
    if (rc == SD_OK) {
        rc = h_emit_global(h, b, "outs", e->ts, sd_buf_bytes(&kv));
    }
    if (rc == SD_OK && v < 3) {
        sd_buf res;
        sd_buf_init(&res, 0);
        rc = sd_wv_encode_header(&res, c_gw, e->ts, &e->win, 1, &e->pane);
        if (rc == SD_OK) {
            rc = sd_buf_put_varint(&res, v + 1);
        }
        if (rc == SD_OK) {
            rc = sd_em_bundle_residual(h->em, b, sd_buf_bytes(&res), 1000, false, 0, &h->err);
        }
        sd_buf_deinit(&res);
    }
    sd_buf_deinit(&kv);
    return rc;
}

static sd_status fn_seed(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)ctx;
    return h_emit_global(h, b, "seeds", e->ts, sd_bytes_make("\x00", 1));
}

static void test_delayed_residuals(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" },
                      *grouped[] = { "grouped" };
    static const char *const want[] = { "v=0 at=0", "v=1 at=1000", "v=2 at=2000", "v=3 at=3000",
                                        "k=k w=G ts=GMAX pane=07 v=0,1,2,3" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        sd_em_config cfg = { .wall_now = fake_wall };
        assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "seeds", wv_varint_g, NULL);
        h_pcoll(&h, "outs", wv_kv_g, NULL);
        h_pcoll(&h, "grouped", wv_grouped_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_seed, NULL);
        h_stage(&h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_resume, NULL);
        h_stage(&h, "gbk", SD_STAGE_GBK, "outs", grouped, 1, NULL, NULL);
        h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        /* The parked residual holds the stage's input watermark: the global-window GBK fires
         * once, with every value, and only after the last resumption. */
        h_run_ok(&h);
        h_expect(&h, want, 5);
        h_deinit(&h);
    }
}

/* ========================================================================================== */
/* TestStream                                                                                 */
/* ========================================================================================== */

typedef struct ts_step {
    char kind; /* 'e' element, 'b' element in one event with the adjacent 'b's, 'w' watermark,
                * 'c' clock */
    const char *key;
    uint64_t v;
    sd_time t; /* element timestamp, watermark, or clock advance */
} ts_step;

typedef struct ts_case {
    const char *name;
    int64_t lateness;
    sd_output_time output_time; /* 0: END_OF_WINDOW */
    ts_step steps[20];
    size_t n_steps;
    const char *want[8];
    size_t n_want;
    uint64_t dropped;
} ts_case;

static sd_status add_ts_steps(harness *h, const ts_case *tc)
{
    sd_status rc = SD_OK;
    for (size_t i = 0; rc == SD_OK && i < tc->n_steps; i++) {
        const ts_step *st = &tc->steps[i];
        if (st->kind == 'b') {
            /* One TestStream event with several elements: they reach the GBK in one pass. */
            sd_buf kvs[20];
            sd_bytes els[20];
            sd_time tss[20];
            size_t n = 0;
            for (; i < tc->n_steps && tc->steps[i].kind == 'b' && n < 20; i++, n++) {
                sd_buf_init(&kvs[n], 0);
                if (rc == SD_OK) {
                    rc = kv_bytes(&kvs[n], tc->steps[i].key, tc->steps[i].v);
                }
                els[n] = sd_buf_bytes(&kvs[n]);
                tss[n] = tc->steps[i].t;
            }
            i--;
            if (rc == SD_OK) {
                rc = sd_em_teststream_add_elements(h->em, "ts", "tsout", els, tss, n, &h->err);
            }
            for (size_t k = 0; k < n; k++) {
                sd_buf_deinit(&kvs[k]);
            }
        } else if (st->kind == 'e') {
            sd_buf kv;
            sd_buf_init(&kv, 0);
            rc = kv_bytes(&kv, st->key, st->v);
            sd_bytes el = sd_buf_bytes(&kv);
            if (rc == SD_OK) {
                rc = sd_em_teststream_add_elements(h->em, "ts", "tsout", &el, &st->t, 1, &h->err);
            }
            sd_buf_deinit(&kv);
        } else if (st->kind == 'w') {
            rc = sd_em_teststream_advance_watermark(h->em, "ts", "tsout", st->t, &h->err);
        } else {
            rc = sd_em_teststream_advance_clock(h->em, "ts", st->t, &h->err);
        }
    }
    if (!h->oom) {
        assert_int_equal(rc, SD_OK);
    }
    return rc;
}

/* ========================================================================================== */
/* Time-sorted input (RequiresTimeSortedInput)                                                */
/* ========================================================================================== */

typedef struct sorted_log {
    char by_key[2][128]; /* values of keys "a" and "b", in the order the stage got them */
    size_t n_grouped;    /* values the downstream GroupByKey grouped */
} sorted_log;

static sd_status fn_log_sorted(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sorted_log *log = ctx;
    sd_bytes key;
    uint64_t v;
    get_kv(e->elem, &key, &v);
    char *line = log->by_key[key.len == 1 && key.ptr[0] == 'b' ? 1 : 0];
    size_t used = strlen(line);
    snprintf(line + used, 128 - used, "%s%llu", used > 0 ? "," : "", (unsigned long long)v);
    return h_emit_global(h, b, "so", e->ts, e->elem);
}

static size_t csv_count(const char *s)
{
    size_t n = s[0] != '\0';
    for (; *s != '\0'; s++) {
        n += *s == ',';
    }
    return n;
}

static sd_status fn_count_grouped(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sorted_log *log = ctx;
    sd_bytes key;
    uint64_t vals[64];
    (void)h;
    (void)b;
    log->n_grouped += get_grouped(e->elem, &key, vals, 64);
    return SD_OK;
}

typedef struct sorted_case {
    const char *name;
    int64_t lateness;
    ts_step steps[16];
    size_t n_steps;
    const char *want_a, *want_b;
    uint64_t dropped;
} sorted_case;

static const sorted_case SORTED_CASES[] = {
    /* Out-of-order values wait until the watermark passes them, then go in timestamp order;
     * those already behind the watermark on arrival are dropped (1, 2 and 6). */
    { .name = "sorted-no-lateness",
      .steps = { { 'e', "a", 5, 5 },
                 { 'e', "a", 3, 3 },
                 { 'e', "b", 4, 4 },
                 { 'w', NULL, 0, 3 },
                 { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 4, 4 },
                 { 'e', "b", 3, 3 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 6, 6 },
                 { 'e', "b", 12, 12 },
                 { 'e', "b", 11, 11 } },
      .n_steps = 12,
      .want_a = "3,4,5",
      .want_b = "3,4,11,12",
      .dropped = 3 },
    /* Allowed lateness 5: a value is kept while ts + 5 is not behind the watermark, and goes
     * out once the watermark passes ts + 5 (0 is dropped: 0 + 5 < 7). */
    { .name = "sorted-allowed-lateness",
      .lateness = 5,
      .steps = { { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 3 },
                 { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 7 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 0, 0 },
                 { 'e', "b", 4, 4 },
                 { 'e', "b", 3, 3 },
                 { 'w', NULL, 0, 20 } },
      .n_steps = 9,
      .want_a = "1,2,5",
      .want_b = "3,4",
      .dropped = 1 },
};

/*
 * TestStream -> time-sorted stateful stage (records its input, re-emits it) -> GroupByKey in
 * the global window -> count. The stage gets its elements behind its input watermark, so they
 * must hold its output watermark until processed: else the GroupByKey's window would close
 * first and drop them all.
 */
static void test_time_sorted_input(void **state)
{
    static const char *tsout[] = { "tsout" }, *so[] = { "so" }, *grouped[] = { "grouped" };
    (void)state;
    for (size_t c = 0; c < sizeof(SORTED_CASES) / sizeof(SORTED_CASES[0]); c++) {
        const sorted_case *tc = &SORTED_CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            sorted_log log;
            memset(&log, 0, sizeof(log));
            sd_windowing ws = { .allowed_lateness_ms = tc->lateness };
            ts_case steps = { .n_steps = tc->n_steps };
            memcpy(steps.steps, tc->steps, sizeof(tc->steps));
            assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
            assert_int_equal(h_pcoll(&h, "tsout", wv_kv_g, &ws), SD_OK);
            assert_int_equal(h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL),
                             SD_OK);
            const char *ins[1] = { "tsout" };
            assert_int_equal(h_pcoll(&h, "so", wv_kv_g, &ws), SD_OK);
            assert_int_equal(h_pcoll(&h, "grouped", wv_grouped_g, &ws), SD_OK);
            sd_stage_spec sorted = { .id = "sorted",
                                     .kind = SD_STAGE_SDK,
                                     .inputs = ins,
                                     .n_inputs = 1,
                                     .outputs = so,
                                     .n_outputs = 1,
                                     .stateful = true,
                                     .time_sorted_input = true };
            assert_int_equal(h_add(&h, &sorted, fn_log_sorted, NULL, &log), SD_OK);
            assert_int_equal(h_stage(&h, "gbk", SD_STAGE_GBK, "so", grouped, 1, NULL, NULL),
                             SD_OK);
            assert_int_equal(
                h_stage(&h, "count", SD_STAGE_SDK, "grouped", NULL, 0, fn_count_grouped, &log),
                SD_OK);
            assert_int_equal(add_ts_steps(&h, &steps), SD_OK);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            if (strcmp(log.by_key[0], tc->want_a) != 0 || strcmp(log.by_key[1], tc->want_b) != 0) {
                fail_msg("%s, shape %s: a got \"%s\" want \"%s\"; b got \"%s\" want \"%s\"",
                         tc->name, SHAPES[s].name, log.by_key[0], tc->want_a, log.by_key[1],
                         tc->want_b);
            }
            sd_em_stage_stats st;
            sd_em_stage_info(h.em, 1, &st);
            assert_string_equal(st.id, "sorted");
            assert_int_equal(st.dropped_late, tc->dropped);
            sd_em_stage_info(h.em, 2, &st);
            assert_string_equal(st.id, "gbk");
            assert_int_equal(st.dropped_late, 0);
            assert_int_equal(log.n_grouped, csv_count(tc->want_a) + csv_count(tc->want_b));
            h_deinit(&h);
        }
    }
    /* Only a stateful SDK stage can sort its input. */
    harness h;
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    assert_int_equal(h_pcoll(&h, "tsout", wv_kv_g, NULL), SD_OK);
    const char *ins[1] = { "tsout" };
    sd_stage_spec bad = {
        .id = "bad", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .time_sorted_input = true
    };
    assert_int_equal(sd_em_add_stage(h.em, &bad, &h.err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&h.err), "time-sorted input needs a stateful SDK stage"));
    h_deinit(&h);
}

static const ts_case TS_CASES[] = {
    { .name = "on-time-and-late-dropped",
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 12, 12 },
                 { 'w', NULL, 0, 20 },
                 { 'e', "a", 25, 25 } },
      .n_steps = 7,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=1,5", "k=a w=[10,20) ts=19 pane=07 v=12",
                "k=a w=[20,30) ts=29 pane=07 v=25" },
      .n_want = 3,
      .dropped = 1 },
    { .name = "allowed-lateness-late-pane",
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 14 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 15 },
                 { 'e', "a", 6, 6 } },
      .n_steps = 8,
      /* on time (first, not last), late pane 1 for 3, late pane 2 for 4 (at 14 the window
       * is still inside its lateness), and 6 arrives after it expired (dropped). */
      .want = { "k=a w=[0,10) ts=9 pane=05 v=1,5", "k=a w=[0,10) ts=9 pane=18 v=3",
                "k=a w=[0,10) ts=9 pane=18 v=4" },
      .n_want = 3,
      .dropped = 1 },
    /* Beam's trigger transcripts known_late_data_watermark and
     * known_late_data_no_watermark_hold_possible: with OUTPUT_AT_EARLIEST, values behind the
     * GroupByKey's output watermark on arrival cannot hold it, so they do not set the pane's
     * timestamp; with none that could, the pane goes out at the end of its window. */
    { .name = "earliest-ignores-values-behind-the-watermark",
      .output_time = SD_OUTPUT_TIME_EARLIEST,
      .steps = { { 'w', NULL, 0, 5 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 7, 7 },
                 { 'e', "a", 8, 8 },
                 { 'w', NULL, 0, 11 } },
      .n_steps = 6,
      .want = { "k=a w=[0,10) ts=7 pane=07 v=2,3,7,8" },
      .n_want = 1 },
    { .name = "earliest-with-no-holdable-value-is-end-of-window",
      .output_time = SD_OUTPUT_TIME_EARLIEST,
      .steps = { { 'w', NULL, 0, 8 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 7, 7 },
                 { 'w', NULL, 0, 11 } },
      .n_steps = 5,
      .want = { "k=a w=[0,10) ts=9 pane=07 v=2,3,7" },
      .n_want = 1 },
};

static void test_teststream(void **state)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    (void)state;
    for (size_t c = 0; c < sizeof(TS_CASES) / sizeof(TS_CASES[0]); c++) {
        const ts_case *tc = &TS_CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            window_case wc = { .ws = { .kind = SD_WINDOWFN_FIXED,
                                       .size_ms = 10,
                                       .allowed_lateness_ms = tc->lateness,
                                       .output_time = tc->output_time } };
            assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
            h.shape.name = tc->name;
            h_pcoll(&h, "tsout", wv_kv_g, NULL);
            h_pcoll(&h, "windowed", wv_kv_i, &wc.ws);
            h_pcoll(&h, "grouped", wv_grouped_i, &wc.ws);
            h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
            h_stage(&h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, &wc);
            h_stage(&h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
            h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
            add_ts_steps(&h, tc);
            assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
            h_run_ok(&h);
            h_expect(&h, tc->want, tc->n_want);
            sd_em_stage_stats st;
            sd_em_stage_info(h.em, 2, &st);
            assert_string_equal(st.id, "gbk");
            assert_int_equal(st.dropped_late, tc->dropped);
            h_deinit(&h);
        }
    }
}

/* Record a grouped element with its pane spelled out: "v=1,2 E#0 first". */
static sd_status fn_collect_panes(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    static const char *const timing[] = { "E", "O", "L", "U" };
    sd_bytes key;
    uint64_t vals[64];
    char line[H_RESULT_LEN];
    (void)b;
    (void)ctx;
    size_t n = get_grouped(e->elem, &key, vals, 64);
    int off = snprintf(line, sizeof(line), "v=");
    for (size_t i = 0; i < n; i++) {
        off += snprintf(line + off, sizeof(line) - (size_t)off, i ? ",%llu" : "%llu",
                        (unsigned long long)vals[i]);
    }
    snprintf(line + off, sizeof(line) - (size_t)off, " %s#%lld/%lld%s%s ts=%lld",
             timing[e->pane.timing], (long long)e->pane.index, (long long)e->pane.nonspec_index,
             e->pane.first ? " first" : "", e->pane.last ? " last" : "", (long long)e->ts);
    h_record(h, "%s", line);
    return SD_OK;
}

/* The same with the window: "w=[1,26) v=1,16,8 E#0/-1 first ts=25" (values in arrival
 * order). */
static sd_status fn_collect_session_panes(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    size_t before = h->n_results;
    sd_status rc = fn_collect_panes(h, b, e, ctx);
    if (rc == SD_OK && h->n_results > before) {
        char line[2 * H_RESULT_LEN];
        snprintf(line, sizeof(line), "w=[%lld,%lld) %s", (long long)e->win.start,
                 (long long)e->win.end, h->results[before]);
        memcpy(h->results[before], line, H_RESULT_LEN - 1);
        h->results[before][H_RESULT_LEN - 1] = 0;
    }
    return rc;
}

/* "k=a n=3 E#0/-1 first last ts=9": key, value count and pane, for panes whose values depend
 * on arrival order (several elements in one TestStream event: the schedule seeds shuffle
 * them). */
static sd_status fn_collect_pane_counts(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    static const char *const timing[] = { "E", "O", "L", "U" };
    sd_bytes key;
    uint64_t vals[64];
    (void)b;
    (void)ctx;
    size_t n = get_grouped(e->elem, &key, vals, 64);
    h_record(h, "k=%.*s n=%zu %s#%lld/%lld%s%s ts=%lld", (int)key.len, (const char *)key.ptr, n,
             timing[e->pane.timing], (long long)e->pane.index, (long long)e->pane.nonspec_index,
             e->pane.first ? " first" : "", e->pane.last ? " last" : "", (long long)e->ts);
    return SD_OK;
}

typedef struct trigger_case {
    const char *name;
    const sd_trigger *trigger;
    bool accumulating;
    int64_t lateness;
    ts_step steps[20];
    size_t n_steps;
    const char *want[8];
    size_t n_want;
    uint64_t dropped;
    bool sessions; /* session windows (gap 10) instead of fixed windows of 10 */
    bool on_time_if_nonempty; /* OnTimeBehavior FIRE_IF_NONEMPTY */
    bool closing_emit_always; /* ClosingBehavior EMIT_ALWAYS */
    bool counts_only;         /* record panes with fn_collect_pane_counts */
} trigger_case;

static const sd_trigger T_COUNT1 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 1 };
static const sd_trigger T_COUNT2 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 2 };
static const sd_trigger T_COUNT3 = { .kind = SD_TRIGGER_AFTER_COUNT, .count = 3 };
static const sd_trigger T_PT1000 = { .kind = SD_TRIGGER_AFTER_PROCESSING_TIME, .delay_ms = 1000 };
static const sd_trigger T_ALWAYS = { .kind = SD_TRIGGER_ALWAYS };
static const sd_trigger *const SUBS_COUNT2[] = { &T_COUNT2 };
static const sd_trigger *const SUBS_COUNT1[] = { &T_COUNT1 };
static const sd_trigger *const SUBS_PT[] = { &T_PT1000 };
static const sd_trigger T_REPEAT_COUNT2 = { .kind = SD_TRIGGER_REPEAT,
                                            .subs = SUBS_COUNT2,
                                            .n_subs = 1 };
static const sd_trigger T_REPEAT_COUNT1 = { .kind = SD_TRIGGER_REPEAT,
                                            .subs = SUBS_COUNT1,
                                            .n_subs = 1 };
static const sd_trigger T_REPEAT_PT = { .kind = SD_TRIGGER_REPEAT, .subs = SUBS_PT, .n_subs = 1 };
/* Aligned to 1000 ms with offset INT64_MIN (which is 192 mod 1000): a client may send any
 * int64 offset, and t - offset once overflowed here. */
static const sd_time_transform TT_ALIGN_MIN[] = {
    { .align = true, .period_ms = 1000, .offset_ms = INT64_MIN },
};
static const sd_trigger T_PT_ALIGN_MIN = { .kind = SD_TRIGGER_AFTER_PROCESSING_TIME,
                                           .time_transforms = TT_ALIGN_MIN,
                                           .n_time_transforms = 1 };
static const sd_trigger *const SUBS_PT_ALIGN_MIN[] = { &T_PT_ALIGN_MIN };
static const sd_trigger T_REPEAT_PT_ALIGN_MIN = { .kind = SD_TRIGGER_REPEAT,
                                                  .subs = SUBS_PT_ALIGN_MIN,
                                                  .n_subs = 1 };
static const sd_trigger *const SUBS_OR[] = { &T_REPEAT_COUNT1, &T_COUNT3 };
static const sd_trigger T_OR_FINALLY = { .kind = SD_TRIGGER_OR_FINALLY,
                                         .subs = SUBS_OR,
                                         .n_subs = 2 };
static const sd_trigger *const SUBS_EACH[] = { &T_COUNT2, &T_COUNT1 };
static const sd_trigger T_EACH = { .kind = SD_TRIGGER_AFTER_EACH, .subs = SUBS_EACH, .n_subs = 2 };
static const sd_trigger *const SUBS_ALL[] = { &T_COUNT2, &T_PT1000 };
static const sd_trigger T_ALL = { .kind = SD_TRIGGER_AFTER_ALL, .subs = SUBS_ALL, .n_subs = 2 };
static const sd_trigger T_EOW_EARLY_LATE = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW,
                                             .early = &T_COUNT1,
                                             .late = &T_ALWAYS };
static const sd_trigger T_NEVER = { .kind = SD_TRIGGER_NEVER };
static const sd_trigger T_SYNC_PT = { .kind = SD_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME };
static const sd_trigger *const SUBS_SYNC_PT[] = { &T_SYNC_PT };
static const sd_trigger T_REPEAT_SYNC_PT = { .kind = SD_TRIGGER_REPEAT,
                                             .subs = SUBS_SYNC_PT,
                                             .n_subs = 1 };

static const trigger_case TRIGGER_CASES[] = {
    { .name = "repeat-count-2",
      .trigger = &T_REPEAT_COUNT2,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'w', NULL, 0, 10 } },
      .n_steps = 4,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "early-late-on-time-even-when-empty",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 20 } },
      .n_steps = 5,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v= O#2/0 ts=9", "v=3 L#3/1 ts=9" },
      .n_want = 4 },
    { .name = "on-time-pane-skipped-when-empty-if-nonempty",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .on_time_if_nonempty = true,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 20 } },
      .n_steps = 5,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v=3 O#2/0 ts=9" },
      .n_want = 3 },
    /* ClosingBehavior: with FIRE_IF_NONEMPTY (the zero value) nothing new at expiry means no
     * final pane; EMIT_ALWAYS emits one anyway (empty, or a repeat when accumulating). */
    { .name = "no-final-pane-at-expiry-if-nonempty",
      .trigger = &T_REPEAT_COUNT2,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1,2 E#0/-1 first ts=9" },
      .n_want = 1 },
    { .name = "closing-emit-always-empty-on-time-final-pane",
      .trigger = &T_REPEAT_COUNT2,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1,2 E#0/-1 first ts=9", "v= O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "closing-emit-always-accumulating-repeats-values",
      .trigger = &T_REPEAT_COUNT2,
      .accumulating = true,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=1,2 O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "closing-emit-always-late-final-pane-after-on-time",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 E#0/-1 first ts=9", "v= O#1/0 ts=9", "v= L#2/1 last ts=9" },
      .n_want = 3 },
    { .name = "closing-emit-always-accumulating-late-final-pane",
      .trigger = &T_EOW_EARLY_LATE,
      .lateness = 5,
      .accumulating = true,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 E#0/-1 first ts=9", "v=1 O#1/0 ts=9", "v=1 L#2/1 last ts=9" },
      .n_want = 3 },
    { .name = "closing-emit-always-default-trigger-late-final-pane",
      .lateness = 5,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 O#0/0 first ts=9", "v= L#1/1 last ts=9" },
      .n_want = 2 },
    { .name = "default-trigger-no-final-pane-if-nonempty",
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'w', NULL, 0, 20 } },
      .n_steps = 3,
      .want = { "v=1 O#0/0 first ts=9" },
      .n_want = 1 },
    { .name = "closing-emit-always-not-after-the-trigger-finished",
      .trigger = &T_OR_FINALLY,
      .closing_emit_always = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'w', NULL, 0, 10 } },
      .n_steps = 4,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v=3 E#2/-1 last ts=9" },
      .n_want = 3 },
    { .name = "or-finally-closes-the-window",
      .trigger = &T_OR_FINALLY,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'e', "a", 4, 4 } },
      .n_steps = 4,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v=3 E#2/-1 last ts=9" },
      .n_want = 3,
      .dropped = 1 },
    { .name = "after-each",
      .trigger = &T_EACH,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'e', "a", 4, 4 } },
      .n_steps = 4,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 E#1/-1 last ts=9" },
      .n_want = 2,
      .dropped = 1 },
    { .name = "after-all-count-and-processing-time",
      .trigger = &T_ALL,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'c', NULL, 0, 999 },
                 { 'c', NULL, 0, 1 },
                 { 'e', "a", 3, 3 } },
      .n_steps = 5,
      .want = { "v=1,2 E#0/-1 first last ts=9" },
      .n_want = 1,
      .dropped = 1 },
    { .name = "repeat-processing-time",
      .trigger = &T_REPEAT_PT,
      .steps = { { 'e', "a", 1, 1 },
                 { 'c', NULL, 0, 500 },
                 { 'e', "a", 2, 2 },
                 { 'c', NULL, 0, 600 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 6,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "repeat-processing-time-aligned-to-offset-int64-min",
      .trigger = &T_REPEAT_PT_ALIGN_MIN,
      /* The deadline of the first pane is 192; the element at 193 waits for 1192. */
      .steps = { { 'e', "a", 1, 1 },
                 { 'c', NULL, 0, 191 },
                 { 'e', "a", 2, 2 },
                 { 'c', NULL, 0, 1 },
                 { 'c', NULL, 0, 1 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 7,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 O#1/0 last ts=9" },
      .n_want = 2 },
    { .name = "accumulating-repeat-count-1",
      .trigger = &T_REPEAT_COUNT1,
      .accumulating = true,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1 E#0/-1 first ts=9", "v=1,2 E#1/-1 ts=9" },
      .n_want = 2 },
    /* Beam's Python prism_runner_test test_after_count_trigger_streaming: Create([1, 2, 3, 4,
     * 5, 10, 11]) | FlatMap(A t, B t + 5) | FixedWindows(10), AfterCount(3), discarding. All
     * fourteen elements reach the GBK in one pass; the trigger is asked per element, so each
     * firing pane holds exactly three values. The trigger then finished and closed its window
     * for the key (Java's ReduceFnRunner drops later elements as droppedDueToClosedWindow,
     * Python's GeneralTriggerDriver skips a TOMBSTONEd window): A 4, 5 and B 9 are dropped and
     * counted. A [10,20) never reaches three values and goes out at expiry. */
    { .name = "after-count-3-one-event-per-element-panes",
      .trigger = &T_COUNT3,
      .counts_only = true,
      .steps = { { 'b', "A", 1, 1 },
                 { 'b', "B", 6, 6 },
                 { 'b', "A", 2, 2 },
                 { 'b', "B", 7, 7 },
                 { 'b', "A", 3, 3 },
                 { 'b', "B", 8, 8 },
                 { 'b', "A", 4, 4 },
                 { 'b', "B", 9, 9 },
                 { 'b', "A", 5, 5 },
                 { 'b', "B", 10, 10 },
                 { 'b', "A", 10, 10 },
                 { 'b', "B", 15, 15 },
                 { 'b', "A", 11, 11 },
                 { 'b', "B", 16, 16 },
                 { 'w', NULL, 0, 100 } },
      .n_steps = 15,
      .want = { "k=A n=3 E#0/-1 first last ts=9", "k=B n=3 E#0/-1 first last ts=9",
                "k=A n=2 O#0/0 first last ts=19", "k=B n=3 E#0/-1 first last ts=19" },
      .n_want = 4,
      .dropped = 3 },
    /* Several panes of one group cut in one pass go out in firing order. */
    { .name = "repeat-count-2-one-event-several-panes",
      .trigger = &T_REPEAT_COUNT2,
      .counts_only = true,
      .steps = { { 'b', "a", 1, 1 },
                 { 'b', "a", 2, 2 },
                 { 'b', "a", 3, 3 },
                 { 'b', "a", 4, 4 },
                 { 'b', "a", 5, 5 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 6,
      .want = { "k=a n=2 E#0/-1 first ts=9", "k=a n=2 E#1/-1 ts=9", "k=a n=1 O#2/0 last ts=9" },
      .n_want = 3 },
    { .name = "accumulating-repeat-count-2-one-event-several-panes",
      .trigger = &T_REPEAT_COUNT2,
      .accumulating = true,
      .counts_only = true,
      .steps = { { 'b', "a", 1, 1 },
                 { 'b', "a", 2, 2 },
                 { 'b', "a", 3, 3 },
                 { 'b', "a", 4, 4 },
                 { 'b', "a", 5, 5 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 6,
      .want = { "k=a n=2 E#0/-1 first ts=9", "k=a n=4 E#1/-1 ts=9", "k=a n=5 O#2/0 last ts=9" },
      .n_want = 3 },
    /* Java's continuation trigger downstream of AfterProcessingTime: a pane fires once the
     * clock is past its first element's arrival, never at the arrival itself; values that
     * arrive with no clock tick before the window's end go out in the on-time pane. */
    { .name = "repeat-synchronized-processing-time",
      .trigger = &T_REPEAT_SYNC_PT,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'c', NULL, 0, 1 },
                 { 'e', "a", 3, 3 },
                 { 'c', NULL, 0, 5 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 10 } },
      .n_steps = 7,
      .want = { "v=1,2 E#0/-1 first ts=9", "v=3 E#1/-1 ts=9", "v=4 O#2/0 last ts=9" },
      .n_want = 3 },
    { .name = "never-fires-at-expiry",
      .trigger = &T_NEVER,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'w', NULL, 0, 10 } },
      .n_steps = 3,
      .want = { "v=1,2 O#0/0 first last ts=9" },
      .n_want = 1 },
};

static sd_status
build_trigger_pipeline(harness *h, const trigger_case *tc, window_case *wc, bool dead_letter);

static const sd_trigger *const SUBS_COUNT3[] = { &T_COUNT3 };
static const sd_trigger T_REPEAT_COUNT3 = { .kind = SD_TRIGGER_REPEAT,
                                            .subs = SUBS_COUNT3,
                                            .n_subs = 1 };
static const sd_trigger T_EOW_EARLY2_LATE3 = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW,
                                               .early = &T_REPEAT_COUNT2,
                                               .late = &T_REPEAT_COUNT3 };
static const sd_trigger T_EOW_EARLY_NEVER_LATE = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW,
                                                   .early = &T_COUNT1,
                                                   .late = &T_NEVER };

/* Session windows (gap 10) with triggers: the merging sessions' trigger states merge. */
static const trigger_case SESSION_TRIGGER_CASES[] = {
    { .name = "counts add up when sessions merge",
      .sessions = true,
      .trigger = &T_REPEAT_COUNT3,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 16, 16 },
                 { 'e', "a", 8, 8 },
                 { 'e', "a", 9, 9 },
                 { 'w', NULL, 0, 40 } },
      .n_steps = 5,
      .want = { "w=[1,26) v=1,16,8 E#0/-1 first ts=25", "w=[1,26) v=9 O#1/0 last ts=25" },
      .n_want = 2 },
    /* The bridged session [1,24) is a new window: early again, and its panes are numbered
     * from 0 (Beam's drivers clear the pane state of windows merged away). */
    { .name = "a late session joined by an early one is a new window, early again",
      .sessions = true,
      .trigger = &T_EOW_EARLY_NEVER_LATE,
      .lateness = 100,
      .steps = { { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 12 },
                 { 'e', "a", 14, 14 },
                 { 'e', "a", 10, 10 },
                 { 'w', NULL, 0, 200 } },
      .n_steps = 5,
      .want = { "w=[1,11) v=1 E#0/-1 first ts=10", "w=[1,11) v= O#1/0 ts=10",
                "w=[14,24) v=14 E#0/-1 first ts=23", "w=[1,24) v=10 E#0/-1 first ts=23",
                "w=[1,24) v= O#1/0 last ts=23" },
      .n_want = 5 },
    /* Beam's trigger transcript early_late_sessions (trigger_transcripts.yaml): a session that
     * grows is a new window (its early pane is number 0 again); late data falling inside an
     * existing session keeps that session's numbering (L#1/1). */
    { .name = "panes renumber when a session grows, not when data falls inside it",
      .sessions = true,
      .trigger = &T_EOW_EARLY2_LATE3,
      .accumulating = true,
      .lateness = 100,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 2, 2 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 4, 4 },
                 { 'e', "a", 5, 5 },
                 { 'w', NULL, 0, 100 },
                 { 'e', "a", 1, 1 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 300 } },
      .n_steps = 10,
      .want = { "w=[1,12) v=1,2 E#0/-1 first ts=11", "w=[1,14) v=1,2,3,4 E#0/-1 first ts=13",
                "w=[1,15) v=1,2,3,4,5 O#0/0 first ts=14",
                "w=[1,15) v=1,2,3,4,5,1,3,4 L#1/1 ts=14" },
      .n_want = 4 },
    { .name = "a finished session stays closed when others join it",
      .sessions = true,
      .trigger = &T_COUNT2,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 3, 3 },
                 { 'e', "a", 20, 20 },
                 { 'e', "a", 12, 12 },
                 { 'w', NULL, 0, 50 } },
      .n_steps = 5,
      .want = { "w=[1,13) v=1,3 E#0/-1 first last ts=12" },
      .n_want = 1,
      .dropped = 2 },
    { .name = "the earliest processing-time deadline wins",
      .sessions = true,
      .trigger = &T_REPEAT_PT,
      .steps = { { 'e', "a", 16, 16 },
                 { 'c', NULL, 0, 500 },
                 { 'e', "a", 1, 1 },
                 { 'c', NULL, 0, 100 },
                 { 'e', "a", 8, 8 },
                 { 'c', NULL, 0, 400 },
                 { 'w', NULL, 0, 40 } },
      .n_steps = 7,
      .want = { "w=[1,26) v=1,16,8 E#0/-1 first ts=25" },
      .n_want = 1 },
    { .name = "keys merge independently",
      .sessions = true,
      .trigger = &T_REPEAT_COUNT3,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "b", 2, 16 },
                 { 'e', "a", 16, 16 },
                 { 'e', "b", 3, 1 },
                 { 'e', "a", 8, 8 },
                 { 'w', NULL, 0, 40 } },
      .n_steps = 6,
      .want = { "w=[1,26) v=1,16,8 E#0/-1 first ts=25", "w=[1,11) v=3 O#0/0 first last ts=10",
                "w=[16,26) v=2 O#0/0 first last ts=25" },
      .n_want = 3 },
};

static void test_session_triggers(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(SESSION_TRIGGER_CASES) / sizeof(SESSION_TRIGGER_CASES[0]); c++) {
        const trigger_case *tc = &SESSION_TRIGGER_CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            window_case wc;
            sd_em_config cfg = { .wall_now = fake_wall };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            h.shape.name = tc->name;
            assert_int_equal(build_trigger_pipeline(&h, tc, &wc, false), SD_OK);
            h_run_ok(&h);
            h_expect(&h, tc->want, tc->n_want);
            sd_em_stage_stats st;
            sd_em_stage_info(h.em, 2, &st);
            assert_int_equal(st.dropped_late, tc->dropped);
            assert_int_equal(sd__em_gbk_groups(h.em, "gbk"), 0);
            h_deinit(&h);
        }
    }
}

/* TestStream -> assign (fixed 10) -> GBK with tc's trigger -> collect panes; with dead_letter,
 * the GBK's late data goes to "late" -> record_late. */
static sd_status fn_record_late(harness *h, sd_bundle *b, const h_elem *e, void *ctx);

static sd_status
build_trigger_pipeline(harness *h, const trigger_case *tc, window_case *wc, bool dead_letter)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    memset(wc, 0, sizeof(*wc));
    wc->ws = (sd_windowing){ .kind = tc->sessions ? SD_WINDOWFN_SESSIONS : SD_WINDOWFN_FIXED,
                             .size_ms = 10,
                             .gap_ms = 10,
                             .allowed_lateness_ms = tc->lateness,
                             .accumulating = tc->accumulating,
                             .on_time_if_nonempty = tc->on_time_if_nonempty,
                             .closing_emit_always = tc->closing_emit_always,
                             .trigger = tc->trigger };
    ts_case steps = { .n_steps = tc->n_steps };
    memcpy(steps.steps, tc->steps, sizeof(tc->steps));
    sd_status rc = h_pcoll(h, "tsout", wv_kv_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, wc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0,
                     tc->counts_only ? fn_collect_pane_counts
                     : tc->sessions  ? fn_collect_session_panes
                                     : fn_collect_panes,
                     NULL);
    }
    if (rc == SD_OK && dead_letter) {
        rc = h_pcoll(h, "late", wv_kv_i, &wc->ws);
        if (rc == SD_OK) {
            rc = sd_em_set_late_output(h->em, "gbk", "late", &h->err);
        }
        if (rc == SD_OK) {
            rc = h_stage(h, "dead", SD_STAGE_SDK, "late", NULL, 0, fn_record_late, NULL);
        }
    }
    if (rc == SD_OK) {
        rc = add_ts_steps(h, &steps);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

static void test_triggers(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(TRIGGER_CASES) / sizeof(TRIGGER_CASES[0]); c++) {
        const trigger_case *tc = &TRIGGER_CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            window_case wc;
            sd_em_config cfg = { .wall_now = fake_wall };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            h.shape.name = tc->name;
            assert_int_equal(build_trigger_pipeline(&h, tc, &wc, false), SD_OK);
            h_run_ok(&h);
            h_expect(&h, tc->want, tc->n_want);
            sd_em_stage_stats st;
            sd_em_stage_info(h.em, 2, &st);
            assert_int_equal(st.dropped_late, tc->dropped);
            assert_int_equal(sd__em_gbk_groups(h.em, "gbk"), 0);
            h_deinit(&h);
        }
    }
}

/*
 * Without a TestStream, a processing-time trigger fires by a synthetic clock jump: a
 * self-checkpointing source (resuming every second, holding the watermark meanwhile) feeds a
 * global-window GBK with early firings 300 ms after the first value of each pane.
 */
static void test_processing_time_trigger_synthetic(void **state)
{
    static const sd_trigger early = { .kind = SD_TRIGGER_AFTER_PROCESSING_TIME, .delay_ms = 300 };
    static const sd_trigger eow = { .kind = SD_TRIGGER_AFTER_END_OF_WINDOW, .early = &early };
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *outs[] = { "outs" },
                      *grouped[] = { "grouped" };
    static const char *const want[] = {
        "v=0 at=0",
        "v=1 at=1000",
        "v=2 at=2000",
        "v=3 at=3000",
        "v=0 E#0/-1 first ts=9223371950454775",
        "v=1 E#1/-1 ts=9223371950454775",
        "v=2 E#2/-1 ts=9223371950454775",
        "v=3 O#3/0 last ts=9223371950454775",
    };
    sd_windowing ws = { .trigger = &eow };
    harness h;
    (void)state;
    sd_em_config cfg = { .wall_now = fake_wall };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    h_pcoll(&h, "imp", wv_bytes_g, NULL);
    h_pcoll(&h, "seeds", wv_varint_g, NULL);
    h_pcoll(&h, "outs", wv_kv_g, &ws);
    h_pcoll(&h, "grouped", wv_grouped_g, &ws);
    h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_seed, NULL);
    h_stage(&h, "sdf", SD_STAGE_SDK, "seeds", outs, 1, fn_resume, NULL);
    h_stage(&h, "gbk", SD_STAGE_GBK, "outs", grouped, 1, NULL, NULL);
    h_stage(&h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_panes, NULL);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 8);
    assert_true(sd_em_clock_now(h.em) == fake_wall_now + 3000);
    h_deinit(&h);
}

/* Stateful DoFn over interval windows: record how many values the bag held, then append. */
static sd_status fn_bag_count(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes user_key;
    uint64_t v;
    sd_reader r = sd_reader_make(e->elem);
    uint8_t wmem[32];
    sd_buf wbuf = { .data = wmem, .cap = sizeof(wmem) };
    sd_buf bag;
    (void)ctx;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    assert_int_equal(sd_window_encode(c_iw, &e->win, &wbuf, &h->err), SD_OK);
    sd_bytes window = sd_bytes_make(wmem, wbuf.len);
    sd_buf_init(&bag, 0);
    sd_status rc = sd_em_user_state_get(h->em, b, "T", "bag", window, key, NULL, &bag, &h->err);
    h_record(h, "v=%llu w=[%lld,%lld) held=%zu", (unsigned long long)v, (long long)e->win.start,
             (long long)e->win.end, bag.len);
    if (rc == SD_OK) {
        rc = sd_em_user_state_append(h->em, b, "T", "bag", window, key, NULL,
                                     sd_bytes_make("\x01", 1), &h->err);
    }
    sd_buf_deinit(&bag);
    return rc;
}

static void test_state_of_expired_windows_is_dropped(void **state)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" };
    static const char *const want[] = { "v=1 w=[0,10) held=0", "v=2 w=[0,10) held=1",
                                        "v=3 w=[0,10) held=0", "v=12 w=[10,20) held=0",
                                        "v=15 w=[10,20) held=1" };
    harness h;
    (void)state;
    window_case wc = { .ws = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 } };
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    h_pcoll(&h, "tsout", wv_kv_g, NULL);
    h_pcoll(&h, "windowed", wv_kv_i, &wc.ws);
    h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    h_stage(&h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, &wc);
    const char *ins[] = { "windowed" };
    sd_stage_spec st = {
        .id = "bags", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .stateful = true
    };
    h_add(&h, &st, fn_bag_count, NULL, NULL);
    /* The late element 3 arrives after the watermark passed [0,10): its window's state was
     * dropped when the stage's output watermark passed the window. */
    ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                              { 'e', "a", 2, 2 },
                              { 'w', NULL, 0, 10 },
                              { 'e', "a", 3, 3 },
                              { 'e', "a", 12, 12 },
                              { 'e', "a", 15, 15 } },
                   .n_steps = 6 };
    add_ts_steps(&h, &tc);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    h_run_ok(&h);
    h_expect(&h, want, 5);
    sd__stage *bags = sd_map_get_str(&h.em->stage_by_id, "bags");
    assert_int_equal(bags->state.len, 0);
    h_deinit(&h);
}

static void test_event_time_timer_waits_for_the_watermark(void **state)
{
    static const char *tsout[] = { "tsout" };
    static const char *const want[] = { "flush k=a sum=46 n=2 at=50" };
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        harness h;
        timer_plan plan = { .family = "flush", .delay = 50 };
        assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
        h_pcoll(&h, "tsout", wv_kv_g, NULL);
        h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
        sd_timer_family_spec fam = { "T", "flush", false, c_timer_g };
        const char *ins[] = { "tsout" };
        sd_stage_spec keyed = { .id = "keyed",
                                .kind = SD_STAGE_SDK,
                                .inputs = ins,
                                .n_inputs = 1,
                                .stateful = true,
                                .timer_families = &fam,
                                .n_timer_families = 1 };
        h_add(&h, &keyed, fn_keyed, fn_keyed_timer, &plan);
        /* The timer (at 50) is set at once; the watermark stops at 40, then data at 45 comes:
         * it must be in the state when the timer fires, after the watermark passes 50. */
        ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                                  { 'w', NULL, 0, 40 },
                                  { 'e', "a", 45, 45 },
                                  { 'w', NULL, 0, 60 } },
                       .n_steps = 4 };
        add_ts_steps(&h, &tc);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        h_expect(&h, want, 1);
        h_deinit(&h);
    }
}

static void test_teststream_clock_drives_processing_time(void **state)
{
    static const char *tsout[] = { "tsout" };
    harness h;
    (void)state;
    sd_em_config cfg = { .wall_now = fake_wall };
    timer_plan plan = { .family = "pt", .processing_time = true, .delay = 2000 };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    h_pcoll(&h, "tsout", wv_kv_g, NULL);
    h_stage(&h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    sd_timer_family_spec fam = { "T", "pt", true, c_timer_g };
    const char *ins[] = { "tsout" };
    sd_stage_spec keyed = { .id = "keyed",
                            .kind = SD_STAGE_SDK,
                            .inputs = ins,
                            .n_inputs = 1,
                            .stateful = true,
                            .timer_families = &fam,
                            .n_timer_families = 1 };
    h_add(&h, &keyed, fn_keyed, fn_keyed_timer, &plan);
    /* While TestStream events remain, its events alone move the clock: the 2 s timer fires
     * at +5 s (after the advance), not by a synthetic jump to +2 s. */
    ts_case tc = { .steps = { { 'e', "a", 1, 1 },
                              { 'w', NULL, 0, 100 },
                              { 'c', NULL, 0, 5000 },
                              { 'e', "a", 2, 200 } },
                   .n_steps = 4 };
    add_ts_steps(&h, &tc);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    h_run_ok(&h);
    static const char *const want[] = { "pt k=a sum=1 n=1 at=5000", "pt k=a sum=2 n=1 at=7000" };
    h_expect(&h, want, 2);
    h_deinit(&h);
}

/* ========================================================================================== */
/* OnWindowExpiration                                                                         */
/* ========================================================================================== */

typedef struct owe_case {
    const char *name;
    sd_windowfn_kind kind; /* FIXED (size 10) or GLOBAL */
    int64_t lateness;
    ts_step steps[12];
    size_t n_steps;
    const char *want[12]; /* "exp ..." firings and the downstream GBK's panes */
    size_t n_want;
} owe_case;

static const owe_case *owe_current;

static void owe_window(const sd_window *w, uint8_t *mem, size_t cap, sd_bytes *out)
{
    sd_buf wb = { .data = mem, .cap = cap };
    assert_int_equal(sd_window_encode(w->global ? c_gw : c_iw, w, &wb, NULL), SD_OK);
    *out = sd_bytes_make(mem, wb.len);
}

/* Element KV<k, v>: append v to the bag "buf" of (k, window). */
static sd_status fn_owe_elem(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes user_key, window;
    uint64_t v;
    uint8_t wmem[32], vb[10];
    (void)ctx;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    owe_window(&e->win, wmem, sizeof(wmem), &window);
    sd_buf vbuf = { .data = vb, .cap = sizeof(vb) };
    sd_status rc = sd_buf_put_varint(&vbuf, v);
    if (rc == SD_OK) {
        rc = sd_em_user_state_append(h->em, b, "T", "buf", window, key, NULL,
                                     sd_bytes_make(vb, vbuf.len), &h->err);
    }
    return rc;
}

/* The expiration callback: sum the window's bag, emit KV<k, sum> at the window's max
 * timestamp (on time downstream only if the output watermark was held), clear the bag. */
static sd_status
fn_owe_timer(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx)
{
    const owe_case *oc = owe_current;
    const sd_window *w = &sd_windows_items(&t->windows)[0];
    uint8_t wmem[32];
    sd_bytes window, user_key;
    sd_buf bag;
    (void)ctx;
    assert_string_equal(family, "exp");
    assert_int_equal(t->windows.n, 1);
    assert_int_equal(t->tag.len, 0);
    assert_true(t->fire == (w->global ? SD_TIME_GLOBAL_MAX : w->end - 1));
    assert_true(t->hold == t->fire);
    /* Fired only once the input watermark passed the window's end plus the lateness. */
    assert_true(sd_bundle_watermark(b) > sd_time_add(t->fire, oc->lateness) ||
                sd_bundle_watermark(b) == SD_TIME_MAX);
    owe_window(w, wmem, sizeof(wmem), &window);
    sd_buf_init(&bag, 0);
    sd_status rc = sd_em_user_state_get(h->em, b, "T", "buf", window, t->key, NULL, &bag, &h->err);
    uint64_t sum = 0, n = 0;
    sd_reader r = sd_reader_make(sd_buf_bytes(&bag));
    while (rc == SD_OK && !sd_reader_done(&r)) {
        uint64_t v;
        assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
        sum += v;
        n++;
    }
    sd_reader kr = sd_reader_make(t->key);
    assert_int_equal(sd_reader_lp(&kr, &user_key), SD_OK);
    if (w->global) {
        h_record(h, "exp k=%.*s w=G sum=%llu n=%llu", (int)user_key.len, (const char *)user_key.ptr,
                 (unsigned long long)sum, (unsigned long long)n);
    } else {
        h_record(h, "exp k=%.*s w=[%lld,%lld) sum=%llu n=%llu", (int)user_key.len,
                 (const char *)user_key.ptr, (long long)w->start, (long long)w->end,
                 (unsigned long long)sum, (unsigned long long)n);
    }
    if (rc == SD_OK) {
        rc = sd_em_user_state_clear(h->em, b, "T", "buf", window, t->key, NULL, &h->err);
    }
    sd_buf kv;
    sd_buf_init(&kv, 0);
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(&kv, t->key);
    }
    if (rc == SD_OK) {
        rc = sd_buf_put_varint(&kv, sum);
    }
    sd_pane p = SD_PANE_NO_FIRING;
    if (rc == SD_OK) {
        rc = h_emit(h, b, "out", t->fire, w, 1, &p, sd_buf_bytes(&kv));
    }
    sd_buf_deinit(&kv);
    sd_buf_deinit(&bag);
    return rc;
}

/* TestStream -> assign -> stateful "owe" (expiration family T/exp) -> GBK -> collect. */
static sd_status build_owe(harness *h, const owe_case *oc, window_case *wc)
{
    static const char *tsout[] = { "tsout" }, *windowed[] = { "windowed" }, *out[] = { "out" },
                      *grouped[] = { "grouped" };
    bool global = oc->kind == SD_WINDOWFN_GLOBAL;
    memset(wc, 0, sizeof(*wc));
    wc->ws = (sd_windowing){ .kind = oc->kind,
                             .size_ms = global ? 0 : 10,
                             .allowed_lateness_ms = oc->lateness };
    owe_current = oc;
    sd_timer_family_spec fam = { "T", "exp", false, global ? c_timer_g : c_timer_i };
    const char *ins[] = { "windowed" };
    sd_stage_spec owe = { .id = "owe",
                          .kind = SD_STAGE_SDK,
                          .inputs = ins,
                          .n_inputs = 1,
                          .outputs = out,
                          .n_outputs = 1,
                          .stateful = true,
                          .timer_families = &fam,
                          .n_timer_families = 1,
                          .expiration_transform_id = "T",
                          .expiration_family_id = "exp" };
    ts_case steps = { .n_steps = oc->n_steps };
    memcpy(steps.steps, oc->steps, sizeof(oc->steps));
    sd_status rc = h_pcoll(h, "tsout", wv_kv_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", global ? wv_kv_g : wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "out", global ? wv_kv_g : wv_kv_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", global ? wv_grouped_g : wv_grouped_i, &wc->ws);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "ts", SD_STAGE_TESTSTREAM, NULL, tsout, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "tsout", windowed, 1, fn_assign, wc);
    }
    if (rc == SD_OK) {
        rc = h_add(h, &owe, fn_owe_elem, fn_owe_timer, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "out", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_grouped, NULL);
    }
    if (rc == SD_OK) {
        rc = add_ts_steps(h, &steps);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    if (!h->oom) {
        assert_int_equal(rc, SD_OK);
    }
    return rc;
}

static const owe_case OWE_CASES[] = {
    { .name = "fixed windows, two keys, watermark by watermark",
      .kind = SD_WINDOWFN_FIXED,
      .steps = { { 'e', "a", 1, 1 },
                 { 'e', "a", 5, 5 },
                 { 'e', "b", 3, 3 },
                 { 'e', "a", 12, 12 },
                 { 'w', NULL, 0, 10 },
                 { 'w', NULL, 0, 20 } },
      .n_steps = 6,
      .want = { "exp k=a w=[0,10) sum=6 n=2", "exp k=b w=[0,10) sum=3 n=1",
                "exp k=a w=[10,20) sum=12 n=1", "k=a w=[0,10) ts=9 pane=07 v=6",
                "k=b w=[0,10) ts=9 pane=07 v=3", "k=a w=[10,20) ts=19 pane=07 v=12" },
      .n_want = 6 },
    { .name = "allowed lateness: late data within it is in the state",
      .kind = SD_WINDOWFN_FIXED,
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'w', NULL, 0, 14 },
                 { 'e', "a", 4, 4 },
                 { 'w', NULL, 0, 30 } },
      .n_steps = 6,
      .want = { "exp k=a w=[0,10) sum=8 n=3", "k=a w=[0,10) ts=9 pane=07 v=8" },
      .n_want = 2 },
    { .name = "global window expires at the end of the input",
      .kind = SD_WINDOWFN_GLOBAL,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "b", 2, 2 }, { 'e', "a", 3, 3 } },
      .n_steps = 3,
      .want = { "exp k=a w=G sum=4 n=2", "exp k=b w=G sum=2 n=1", "k=a w=G ts=GMAX pane=07 v=4",
                "k=b w=G ts=GMAX pane=07 v=2" },
      .n_want = 4 },
    { .name = "data after expiry gets no second notification",
      .kind = SD_WINDOWFN_FIXED,
      .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 10 }, { 'e', "a", 3, 3 } },
      .n_steps = 3,
      .want = { "exp k=a w=[0,10) sum=1 n=1", "k=a w=[0,10) ts=9 pane=07 v=1" },
      .n_want = 2 },
};

static void test_on_window_expiration(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(OWE_CASES) / sizeof(OWE_CASES[0]); c++) {
        const owe_case *oc = &OWE_CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            window_case wc;
            assert_int_equal(h_init(&h, &SHAPES[s], NULL, false), SD_OK);
            h.shape.name = oc->name;
            assert_int_equal(build_owe(&h, oc, &wc), SD_OK);
            h_run_ok(&h);
            h_expect(&h, oc->want, oc->n_want);
            sd__stage *st = sd_map_get_str(&h.em->stage_by_id, "owe");
            assert_int_equal(st->state.len, 0);  /* garbage-collected after the callbacks */
            assert_int_equal(st->timers.len, 0); /* nothing left to notify */
            sd_em_stage_stats gs;
            sd_em_stage_info(h.em, 3, &gs);
            assert_string_equal(gs.id, "gbk");
            assert_int_equal(gs.dropped_late, 0); /* the callbacks' output was on time */
            h_deinit(&h);
        }
    }
}

/* Step by step: the expiration bundle holds the output watermark until it completes. */
static void test_on_window_expiration_holds_output(void **state)
{
    static const owe_case oc = { .kind = SD_WINDOWFN_FIXED,
                                 .steps = { { 'e', "a", 1, 1 }, { 'w', NULL, 0, 50 } },
                                 .n_steps = 2 };
    harness h;
    window_case wc;
    sd_time wm;
    (void)state;
    h_shape shape = { "owe-manual", 0, 0, 8, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    assert_int_equal(build_owe(&h, &oc, &wc), SD_OK);
    sd_bundle *b = pull(&h, "assign");
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    b = pull(&h, "owe");
    assert_int_equal(sd_bundle_n_timer_inputs(b), 0);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    /* The watermark moves to 50 at quiescence; the expiration timer of [0,10) fires. */
    b = pull(&h, "owe");
    assert_int_equal(sd_bundle_input_count(b), 0);
    assert_int_equal(sd_bundle_n_timer_inputs(b), 1);
    assert_int_equal(sd_em_pcollection_watermark(h.em, "out", &wm), SD_OK);
    assert_true(wm <= 9);
    sd__stage *st = sd_map_get_str(&h.em->stage_by_id, "owe");
    assert_int_equal(st->state.len, 1); /* not collected while the callback runs */
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_check(&h);
    /* Watermarks move at the next scheduling pass: the GBK fires the callback's output. */
    b = pull(&h, "collect");
    assert_int_equal(sd_em_pcollection_watermark(h.em, "out", &wm), SD_OK);
    assert_true(wm >= 50);
    assert_int_equal(st->state.len, 0);
    assert_int_equal(h_process(&h, b), SD_OK);
    assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
    h_run_ok(&h);
    static const char *const want[] = { "exp k=a w=[0,10) sum=1 n=1",
                                        "k=a w=[0,10) ts=9 pane=07 v=1" };
    h_expect(&h, want, 2);
    h_deinit(&h);
}

static void test_on_window_expiration_spec_errors(void **state)
{
    static const struct {
        const char *name;
        const char *transform;
        const char *family;
        bool processing_time;
        sd_status want;
    } rows[] = {
        { "family of another transform", "U", "exp", false, SD_ENOTFOUND },
        { "undeclared family", "T", "nope", false, SD_ENOTFOUND },
        { "transform without family", "T", NULL, false, SD_EINVAL },
        { "processing-time family", "T", "exp", true, SD_EINVAL },
        { "event-time family", "T", "exp", false, SD_OK },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_em *em;
        sd_err err = { 0 };
        static const char *imp[] = { "imp" }, *kv[] = { "kv" };
        assert_int_equal(sd_em_create(NULL, &em), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "kv", wv_kv_g, NULL, &err), SD_OK);
        sd_stage_spec s1 = { .id = "i", .kind = SD_STAGE_IMPULSE, .outputs = kv, .n_outputs = 1 };
        assert_int_equal(sd_em_add_stage(em, &s1, &err), SD_OK);
        sd_timer_family_spec fam = { "T", "exp", rows[i].processing_time, c_timer_g };
        sd_stage_spec s = { .id = "s",
                            .kind = SD_STAGE_SDK,
                            .inputs = kv,
                            .n_inputs = 1,
                            .stateful = true,
                            .timer_families = &fam,
                            .n_timer_families = 1,
                            .expiration_transform_id = rows[i].transform,
                            .expiration_family_id = rows[i].family };
        sd_status rc = sd_em_add_stage(em, &s, &err);
        if (rc != rows[i].want) {
            fail_msg("%s: got %s (%s)", rows[i].name, sd_status_name(rc), sd_err_msg(&err));
        }
        (void)imp;
        sd_em_destroy(em);
    }
}

/* ========================================================================================== */
/* Ordered-list user state                                                                    */
/* ========================================================================================== */

typedef struct ol_op {
    char op; /* a: append (a, value)  A: append raw bytes `value` (bad: must fail)
                c: clear [a, b)  g: get [a, b) == want  n: get [a, b) has `a`.. count in want
                r: append sort keys b-1 down to a  |: complete the bundle  x: fail it */
    int64_t a, b;
    const char *value;
    const char *want;
} ol_op;

typedef struct ol_case {
    const char *name;
    ol_op ops[24];
} ol_case;

#define OL_MIN INT64_MIN
#define OL_MAX INT64_MAX

static const ol_case OL_CASES[] = {
    { "append out of order, read back sorted",
      { { 'a', 5, 0, "e", NULL },
        { 'a', 1, 0, "a", NULL },
        { 'a', 3, 0, "c", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a 3:c 5:e" },
        { '|', 0, 0, NULL, NULL },
        { 'g', 2, 5, NULL, "3:c" },
        { 'g', 1, 2, NULL, "1:a" },
        { '|', 0, 0, NULL, NULL } } },
    { "equal sort keys keep their append order across bundles",
      { { 'a', 2, 0, "x", NULL },
        { '|', 0, 0, NULL, NULL },
        { 'a', 2, 0, "y", NULL },
        { 'a', 1, 0, "w", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:w 2:x 2:y" },
        { '|', 0, 0, NULL, NULL },
        { 'g', 2, 3, NULL, "2:x 2:y" },
        { '|', 0, 0, NULL, NULL } } },
    { "a clear hides committed and earlier entries, not later appends",
      { { 'a', 1, 0, "a", NULL },
        { 'a', 2, 0, "b", NULL },
        { 'a', 3, 0, "c", NULL },
        { '|', 0, 0, NULL, NULL },
        { 'a', 2, 0, "d", NULL },
        { 'c', 2, 3, NULL, NULL },
        { 'a', 2, 0, "e", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a 2:e 3:c" },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a 2:e 3:c" },
        { 'c', OL_MIN, 2, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "2:e 3:c" },
        { '|', 0, 0, NULL, NULL } } },
    { "a failed bundle leaves no trace",
      { { 'a', 1, 0, "a", NULL },
        { '|', 0, 0, NULL, NULL },
        { 'c', OL_MIN, OL_MAX, NULL, NULL },
        { 'a', 9, 0, "z", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "9:z" },
        { 'x', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a" },
        { '|', 0, 0, NULL, NULL } } },
    { "negative sort keys, empty and inverted ranges",
      { { 'a', -5, 0, "m", NULL },
        { 'a', 0, 0, "z", NULL },
        { 'a', -1, 0, "n", NULL },
        { 'g', -5, 0, NULL, "-5:m -1:n" },
        { 'g', 3, 3, NULL, "" },
        { 'c', 4, 1, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "-5:m -1:n 0:z" },
        { 'c', -1, 1, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "-5:m" },
        { '|', 0, 0, NULL, NULL } } },
    { "bad entry bytes add nothing",
      { { 'a', 1, 0, "a", NULL },
        { 'A', 0, 0,
          "\x05\x03"
          "ab",
          NULL },
        { 'A', 0, 0, "\x80", NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a" },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "1:a" },
        { '|', 0, 0, NULL, NULL } } },
    { "many entries merged into the middle, then a prefix cleared",
      { { 'a', 0, 0, "lo", NULL },
        { 'a', 1000, 0, "hi", NULL },
        { '|', 0, 0, NULL, NULL },
        { 'r', 1, 101, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'n', OL_MIN, OL_MAX, NULL, "102" },
        { 'g', 99, 101, NULL, "99:v 100:v" },
        { 'c', OL_MIN, 100, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'g', OL_MIN, OL_MAX, NULL, "100:v 1000:hi" },
        { 'r', 200, 230, NULL, NULL },
        { 'c', 1000, 1001, NULL, NULL },
        { '|', 0, 0, NULL, NULL },
        { 'n', OL_MIN, OL_MAX, NULL, "31" },
        { 'g', 228, OL_MAX, NULL, "228:v 229:v" },
        { '|', 0, 0, NULL, NULL } } },
};

static void ol_format(sd_bytes data, char *out, size_t cap)
{
    sd_reader r = sd_reader_make(data);
    size_t off = 0;
    out[0] = 0;
    while (!sd_reader_done(&r)) {
        uint64_t k;
        sd_bytes v;
        assert_int_equal(sd_reader_varint(&r, &k), SD_OK);
        assert_int_equal(sd_reader_lp(&r, &v), SD_OK);
        off += (size_t)snprintf(out + off, cap - off, "%s%lld:%.*s", off ? " " : "",
                                (long long)(int64_t)k, (int)v.len, (const char *)v.ptr);
        assert_true(off < cap);
    }
}

static size_t ol_count(sd_bytes data)
{
    sd_reader r = sd_reader_make(data);
    size_t n = 0;
    while (!sd_reader_done(&r)) {
        uint64_t k;
        sd_bytes v;
        assert_int_equal(sd_reader_varint(&r, &k), SD_OK);
        assert_int_equal(sd_reader_lp(&r, &v), SD_OK);
        n++;
    }
    return n;
}

static sd_status fn_ignore(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)h;
    (void)b;
    (void)e;
    (void)ctx;
    return SD_OK;
}

static void test_ordered_list_state(void **state)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" };
    static window_case rows = { .rows = { { "a", 1, 1 },
                                          { "a", 2, 2 },
                                          { "a", 3, 3 },
                                          { "a", 4, 4 },
                                          { "a", 5, 5 },
                                          { "a", 6, 6 },
                                          { "a", 7, 7 },
                                          { "a", 8, 8 } },
                                .n_rows = 8 };
    const sd_bytes key = sd_bytes_make("\x01"
                                       "a",
                                       2),
                   gw = SD_BYTES_NULL;
    (void)state;
    for (size_t c = 0; c < sizeof(OL_CASES) / sizeof(OL_CASES[0]); c++) {
        const ol_case *oc = &OL_CASES[c];
        harness h;
        sd_buf buf, out;
        char got[2048];
        h_shape shape = { oc->name, 1, 0, 1, false, SD_SHAPE_GREEDY, 0 };
        assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
        sd_buf_init(&buf, 0);
        sd_buf_init(&out, 0);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "raw", wv_kv_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_rows, &rows);
        const char *ins[] = { "raw" };
        sd_stage_spec ol = {
            .id = "ol", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .stateful = true
        };
        h_add(&h, &ol, fn_ignore, NULL, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        sd_bundle *g = pull(&h, "gen");
        assert_int_equal(h_process(&h, g), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
        sd_bundle *b = NULL;
        for (size_t i = 0; i < 24 && oc->ops[i].op != 0; i++) {
            const ol_op *op = &oc->ops[i];
            if (b == NULL) {
                b = pull(&h, "ol");
            }
            sd_buf_reset(&buf);
            sd_buf_reset(&out);
            switch (op->op) {
            case 'a':
                assert_int_equal(sd_buf_put_varint(&buf, (uint64_t)op->a), SD_OK);
                assert_int_equal(sd_buf_put_lp(&buf, sd_bytes_str(op->value)), SD_OK);
                assert_int_equal(sd_em_ordered_list_append(h.em, b, "T", "ol", gw, key,
                                                           sd_buf_bytes(&buf), &h.err),
                                 SD_OK);
                break;
            case 'A':
                assert_int_equal(sd_em_ordered_list_append(h.em, b, "T", "ol", gw, key,
                                                           sd_bytes_str(op->value), &h.err),
                                 SD_EPROTO);
                break;
            case 'r':
                /* One append call with many entries, in descending order. */
                for (int64_t k = op->b - 1; k >= op->a; k--) {
                    assert_int_equal(sd_buf_put_varint(&buf, (uint64_t)k), SD_OK);
                    assert_int_equal(sd_buf_put_lp(&buf, sd_bytes_str("v")), SD_OK);
                }
                assert_int_equal(sd_em_ordered_list_append(h.em, b, "T", "ol", gw, key,
                                                           sd_buf_bytes(&buf), &h.err),
                                 SD_OK);
                break;
            case 'c':
                assert_int_equal(
                    sd_em_ordered_list_clear(h.em, b, "T", "ol", gw, key, op->a, op->b, &h.err),
                    SD_OK);
                break;
            case 'g':
            case 'n':
                assert_int_equal(
                    sd_em_ordered_list_get(h.em, b, "T", "ol", gw, key, op->a, op->b, &out, &h.err),
                    SD_OK);
                if (op->op == 'g') {
                    ol_format(sd_buf_bytes(&out), got, sizeof(got));
                } else {
                    snprintf(got, sizeof(got), "%zu", ol_count(sd_buf_bytes(&out)));
                }
                if (strcmp(got, op->want) != 0) {
                    fail_msg("%s: op %zu: got \"%s\", want \"%s\"", oc->name, i, got, op->want);
                }
                break;
            case '|':
                assert_int_equal(sd_em_complete_bundle(h.em, b, &h.err), SD_OK);
                b = NULL;
                break;
            case 'x':
                sd_em_fail_bundle(h.em, b);
                b = NULL;
                break;
            default:
                fail_msg("bad op %c", op->op);
            }
            h_check(&h);
        }
        assert_null(b);
        h_run_ok(&h);
        /* The global window expired at the end: the cell was collected. */
        sd__stage *st = sd_map_get_str(&h.em->stage_by_id, "ol");
        assert_int_equal(st->state.len, 0);
        sd_buf_deinit(&buf);
        sd_buf_deinit(&out);
        h_deinit(&h);
    }
}

/* ========================================================================================== */
/* Late data: dead-letter routing                                                             */
/* ========================================================================================== */

static sd_status fn_record_late(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_bytes key;
    uint64_t v;
    (void)b;
    (void)ctx;
    get_kv(e->elem, &key, &v);
    h_record(h, "late k=%.*s v=%llu ts=%lld w=[%lld,%lld) pane=%02x", (int)key.len,
             (const char *)key.ptr, (unsigned long long)v, (long long)e->ts,
             (long long)e->win.start, (long long)e->win.end, pane_byte(&e->pane));
    return SD_OK;
}

static const trigger_case LATE_CASES[] = {
    { .name = "behind the watermark",
      .steps = { { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 10 },
                 { 'e', "a", 3, 3 },
                 { 'e', "b", 4, 4 },
                 { 'e', "a", 12, 12 } },
      .n_steps = 5,
      .want = { "v=1 O#0/0 first last ts=9", "v=12 O#0/0 first last ts=19",
                "late k=a v=3 ts=3 w=[0,10) pane=0f", "late k=b v=4 ts=4 w=[0,10) pane=0f" },
      .n_want = 4,
      .dropped = 2 },
    { .name = "behind the allowed lateness",
      .lateness = 5,
      .steps = { { 'e', "a", 1, 1 },
                 { 'w', NULL, 0, 12 },
                 { 'e', "a", 2, 2 },
                 { 'w', NULL, 0, 15 },
                 { 'e', "a", 3, 3 } },
      .n_steps = 5,
      .want = { "v=1 O#0/0 first ts=9", "v=2 L#1/1 ts=9", "late k=a v=3 ts=3 w=[0,10) pane=0f" },
      .n_want = 3,
      .dropped = 1 },
    { .name = "after the trigger finished",
      .trigger = &T_OR_FINALLY,
      .steps = { { 'e', "a", 1, 1 }, { 'e', "a", 2, 2 }, { 'e', "a", 3, 3 }, { 'e', "a", 4, 4 } },
      .n_steps = 4,
      .want = { "v=1 E#0/-1 first ts=9", "v=2 E#1/-1 ts=9", "v=3 E#2/-1 last ts=9",
                "late k=a v=4 ts=4 w=[0,10) pane=0f" },
      .n_want = 4,
      .dropped = 1 },
};

static void test_late_data_dead_letter(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(LATE_CASES) / sizeof(LATE_CASES[0]); c++) {
        const trigger_case *tc = &LATE_CASES[c];
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            window_case wc;
            sd_em_config cfg = { .wall_now = fake_wall };
            assert_int_equal(h_init(&h, &SHAPES[s], &cfg, false), SD_OK);
            h.shape.name = tc->name;
            assert_int_equal(build_trigger_pipeline(&h, tc, &wc, true), SD_OK);
            h_run_ok(&h);
            h_expect(&h, tc->want, tc->n_want);
            sd_em_stage_stats st;
            sd_em_stage_info(h.em, 2, &st);
            assert_string_equal(st.id, "gbk");
            assert_int_equal(st.dropped_late, tc->dropped); /* routed, still counted */
            h_deinit(&h);
        }
    }
}

static void test_late_output_errors(void **state)
{
    static const struct {
        const char *name;
        const char *stage;
        const char *pcoll;
        sd_status want;
    } rows[] = {
        { "unknown stage", "nope", "late", SD_ENOTFOUND },
        { "unknown pcollection", "gbk", "nope", SD_ENOTFOUND },
        { "not a GBK", "p", "late", SD_EINVAL },
        { "pcollection with a producer", "gbk", "g", SD_EEXIST },
        { "other element coder", "gbk", "bytes", SD_EINVAL },
        { "other window coder", "gbk", "late_g", SD_EINVAL },
        { "ok", "gbk", "late", SD_OK },
    };

    static const char *imp[] = { "imp" }, *kv[] = { "kv" }, *g[] = { "g" };
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_em *em;
        sd_err err = { 0 };
        assert_int_equal(sd_em_create(NULL, &em), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "imp", wv_bytes_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "kv", wv_kv_i, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "g", wv_grouped_i, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "late", wv_kv_i, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "late_g", wv_kv_g, NULL, &err), SD_OK);
        assert_int_equal(sd_em_add_pcollection(em, "bytes", wv_bytes_g, NULL, &err), SD_OK);
        sd_stage_spec s1 = { .id = "i", .kind = SD_STAGE_IMPULSE, .outputs = imp, .n_outputs = 1 };
        sd_stage_spec s2 = { .id = "p",
                             .kind = SD_STAGE_SDK,
                             .inputs = imp,
                             .n_inputs = 1,
                             .outputs = kv,
                             .n_outputs = 1 };
        sd_stage_spec s3 = { .id = "gbk",
                             .kind = SD_STAGE_GBK,
                             .inputs = kv,
                             .n_inputs = 1,
                             .outputs = g,
                             .n_outputs = 1 };
        assert_int_equal(sd_em_add_stage(em, &s1, &err), SD_OK);
        assert_int_equal(sd_em_add_stage(em, &s2, &err), SD_OK);
        assert_int_equal(sd_em_add_stage(em, &s3, &err), SD_OK);
        sd_status rc = sd_em_set_late_output(em, rows[i].stage, rows[i].pcoll, &err);
        if (rc != rows[i].want) {
            fail_msg("%s: got %s (%s)", rows[i].name, sd_status_name(rc), sd_err_msg(&err));
        }
        if (rc == SD_OK) {
            /* Only once per GBK, and never after start. */
            assert_int_equal(sd_em_set_late_output(em, "gbk", "late", &err), SD_EINVAL);
            assert_int_equal(sd_em_start(em, &err), SD_OK);
            assert_int_equal(sd_em_set_late_output(em, "gbk", "late_g", &err), SD_ESTATE);
        }
        sd_em_destroy(em);
    }
}

/* ========================================================================================== */
/* Schedule exploration                                                                       */
/* ========================================================================================== */

static uint64_t results_hash(const harness *h)
{
    uint64_t x = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < h->n_results; i++) {
        for (const char *p = h->results[i]; *p; p++) {
            x = (x ^ (uint8_t)*p) * 0x100000001b3ULL;
        }
        x = (x ^ 0xff) * 0x100000001b3ULL;
    }
    return x;
}

static void test_schedule_seed_is_deterministic(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 },
                                          { "b", 10, 2 },
                                          { "c", 2, 3 },
                                          { "d", 4, 4 },
                                          { "a", 20, 5 },
                                          { "b", 3, 6 },
                                          { "c", 5, 7 },
                                          { "d", 6, 8 } },
                                .n_rows = 8 };
    static const int shapes[] = { SD_SHAPE_GREEDY, SD_SHAPE_ONE_KEY, SD_SHAPE_ONE_ELEMENT };
    (void)state;
    for (size_t sh = 0; sh < 3; sh++) {
        uint64_t first_sched = 0;
        size_t distinct = 0;
        for (uint64_t seed = 1; seed <= 8; seed++) {
            uint64_t sched[2], res[2];
            for (int run = 0; run < 2; run++) {
                harness h;
                h_shape shape = { "seeded", 0, 0, 2, false, shapes[sh], seed };
                timer_plan plan = { .family = "flush", .delay = 1000, .emit_windowed = true };
                assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
                assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
                h_run_ok(&h);
                sched[run] = h.sched_hash;
                res[run] = results_hash(&h); /* in the order they were produced */
                static const char *const want[] = { "flush k=a sum=21 n=2 at=1000",
                                                    "flush k=b sum=13 n=2 at=1000",
                                                    "flush k=c sum=7 n=2 at=1000",
                                                    "flush k=d sum=10 n=2 at=1000",
                                                    "k=a w=[1000,1010) ts=1009 pane=07 v=21",
                                                    "k=b w=[1000,1010) ts=1009 pane=07 v=13",
                                                    "k=c w=[1000,1010) ts=1009 pane=07 v=7",
                                                    "k=d w=[1000,1010) ts=1009 pane=07 v=10" };
                h_expect(&h, want, 8);
                h_deinit(&h);
            }
            /* Same job, inputs, shape and seed: the same schedule and the same output order. */
            assert_true(sched[0] == sched[1]);
            assert_true(res[0] == res[1]);
            if (seed == 1) {
                first_sched = sched[0];
            }
            distinct += sched[0] != first_sched ? 1 : 0;
        }
        /* Different seeds explore different schedules. */
        if (distinct == 0) {
            fail_msg("shape %d: eight seeds gave one schedule", shapes[sh]);
        }
    }
}

/* Order-dependent user code: remember the first value seen per key. */
static sd_status fn_first_wins(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes user_key;
    uint64_t v;
    sd_buf seen;
    (void)ctx;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    sd_buf_init(&seen, 0);
    sd_status rc =
        sd_em_user_state_get(h->em, b, "T", "seen", SD_BYTES_NULL, key, NULL, &seen, &h->err);
    if (rc == SD_OK && seen.len == 0) {
        h_record(h, "first %.*s=%llu", (int)user_key.len, (const char *)user_key.ptr,
                 (unsigned long long)v);
        rc = sd_em_user_state_append(h->em, b, "T", "seen", SD_BYTES_NULL, key, NULL,
                                     sd_bytes_make("\x01", 1), &h->err);
    }
    sd_buf_deinit(&seen);
    return rc;
}

static void test_schedule_seed_catches_order_dependence(void **state)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" };
    static window_case rows = { .rows = { { "a", 1, 1 },
                                          { "a", 2, 2 },
                                          { "a", 3, 3 },
                                          { "a", 4, 4 },
                                          { "a", 5, 5 },
                                          { "a", 6, 6 } },
                                .n_rows = 6 };
    (void)state;
    char answers[17][H_RESULT_LEN];
    for (uint64_t seed = 0; seed <= 16; seed++) {
        harness h;
        h_shape shape = { "first-wins", 0, 0, 1, false, SD_SHAPE_ONE_ELEMENT, seed };
        assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "raw", wv_kv_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_rows, &rows);
        const char *ins[] = { "raw" };
        sd_stage_spec first = {
            .id = "first", .kind = SD_STAGE_SDK, .inputs = ins, .n_inputs = 1, .stateful = true
        };
        h_add(&h, &first, fn_first_wins, NULL, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        assert_int_equal(h.n_results, 1);
        snprintf(answers[seed], H_RESULT_LEN, "%s", h.results[0]);
        h_deinit(&h);
    }
    /* Without a seed, elements go oldest first: the code looks correct... */
    assert_string_equal(answers[0], "first a=1");
    /* ...and some seed shows that it depends on the order. */
    size_t differ = 0;
    for (size_t i = 1; i <= 16; i++) {
        differ += strcmp(answers[i], answers[0]) != 0 ? 1 : 0;
    }
    assert_true(differ > 0);
}

/* ========================================================================================== */
/* Scale                                                                                      */
/* ========================================================================================== */

static sd_status fn_gen_many(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    size_t n = (size_t)(uintptr_t)ctx;
    sd_buf out;
    sd_status rc = SD_OK;
    (void)e;
    sd_buf_init(&out, 0);
    /* Encode directly (one output call per 64 KiB) to keep the harness out of the timing. */
    sd_window w = sd_window_global();
    sd_pane p = SD_PANE_NO_FIRING;
    for (size_t i = 0; rc == SD_OK && i < n; i++) {
        char key[16];
        snprintf(key, sizeof(key), "key%04zu", i % 1000);
        rc = sd_wv_encode_header(&out, c_gw, (sd_time)i, &w, 1, &p);
        if (rc == SD_OK) {
            rc = kv_bytes(&out, key, i & 0x7f);
        }
        if (rc == SD_OK && out.len > 65536) {
            rc = sd_em_bundle_output(h->em, b, "words", sd_buf_bytes(&out), &h->err);
            sd_buf_reset(&out);
        }
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_output(h->em, b, "words", sd_buf_bytes(&out), &h->err);
    }
    sd_buf_deinit(&out);
    return rc;
}

static sd_status fn_count_groups(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    size_t *total = ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes key;
    uint32_t n;
    (void)h;
    (void)b;
    assert_int_equal(sd_reader_lp(&r, &key), SD_OK);
    assert_int_equal(sd_reader_be32(&r, &n), SD_OK);
    assert_int_equal(sd_reader_left(&r), n); /* values 0..127 are one byte each */
    total[0] += n;
    total[1]++;
    return SD_OK;
}

static void test_gbk_million(void **state)
{
    static const char *imp[] = { "imp" }, *words[] = { "words" }, *grouped[] = { "grouped" };
    size_t n = 1000000, total[2] = { 0, 0 };
    const char *env = getenv("SD_ENGINE_BENCH_N");
    harness h;
    (void)state;
    if (env != NULL) {
        n = (size_t)strtoull(env, NULL, 10);
    }
    h_shape shape = { "million", 0, 4 << 20, 1, false, SD_SHAPE_GREEDY, 0 };
    assert_int_equal(h_init(&h, &shape, NULL, false), SD_OK);
    h_pcoll(&h, "imp", wv_bytes_g, NULL);
    h_pcoll(&h, "words", wv_kv_g, NULL);
    h_pcoll(&h, "grouped", wv_grouped_g, NULL);
    h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    h_stage(&h, "gen", SD_STAGE_SDK, "imp", words, 1, fn_gen_many, (void *)(uintptr_t)n);
    h_stage(&h, "gbk", SD_STAGE_GBK, "words", grouped, 1, NULL, NULL);
    h_stage(&h, "count", SD_STAGE_SDK, "grouped", NULL, 0, fn_count_groups, total);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    int64_t t0 = sd_mono_now_ns();
    h_run_ok(&h);
    int64_t ns = sd_mono_now_ns() - t0;
    assert_int_equal(total[0], n);
    assert_int_equal(total[1], n < 1000 ? n : 1000);
    fprintf(stderr,
            "gbk of %zu elements over 1000 keys: %.1f ms in all, %.1f ms in the engine "
            "(%.0f ns/element)\n",
            n, (double)ns / 1e6, (double)h.engine_ns / 1e6,
            (double)h.engine_ns / (double)(n ? n : 1));
    h_deinit(&h);
}

/* ========================================================================================== */
/* Garbage from the SDK                                                                       */
/* ========================================================================================== */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Random bytes, or a valid encoding with random damage (truncated or one byte flipped). */
static size_t garbage(uint8_t *buf, size_t cap, const uint8_t *valid, size_t valid_len)
{
    size_t n;
    if (valid != NULL && rng() % 2 == 0) {
        n = valid_len < cap ? valid_len : cap;
        memcpy(buf, valid, n);
        if (n > 0 && rng() % 2 == 0) {
            n = (size_t)(rng() % n);
        } else if (n > 0) {
            buf[rng() % n] ^= (uint8_t)(1u << (rng() % 8));
        }
        return n;
    }
    n = (size_t)(rng() % cap);
    for (size_t i = 0; i < n; i++) {
        buf[i] = (uint8_t)rng();
    }
    return n;
}

static void test_garbage_from_the_sdk(void **state)
{
    static window_case rows = { .rows = { { "a", 1, 1 }, { "b", 2, 2 } }, .n_rows = 2 };
    (void)state;
    /* Valid samples to damage: a windowed KV in an interval window, and a timer. */
    uint8_t wv_ok[64], timer_ok[64];
    sd_buf wb = { .data = wv_ok, .cap = sizeof(wv_ok) };
    sd_buf tb = { .data = timer_ok, .cap = sizeof(timer_ok) };
    sd_window w = sd_window_interval(0, 10);
    sd_pane p = SD_PANE_NO_FIRING;
    assert_int_equal(sd_wv_encode_header(&wb, c_iw, 5, &w, 1, &p), SD_OK);
    assert_int_equal(kv_bytes(&wb, "k", 7), SD_OK);
    sd_timer t;
    sd_timer_init(&t);
    sd_window gw = sd_window_global();
    t.key = sd_bytes_make("\x01"
                          "a",
                          2);
    assert_int_equal(sd_windows_set(&t.windows, &gw, 1), SD_OK);
    t.fire = 5;
    t.hold = 5;
    t.pane = p;
    assert_int_equal(sd_timer_encode(c_timer_g, &t, &tb, NULL), SD_OK);
    sd_timer_deinit(&t);
    size_t failures = 0;
    for (int iter = 0; iter < 300; iter++) {
        harness h;
        timer_plan plan = { .family = "flush", .delay = 1000, .emit_windowed = true };
        assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
        assert_int_equal(build_keyed(&h, &rows, &plan), SD_OK);
        sd_bundle *g = pull(&h, "gen");
        assert_int_equal(h_process(&h, g), SD_OK);
        assert_int_equal(sd_em_complete_bundle(h.em, g, &h.err), SD_OK);
        sd_bundle *b = pull(&h, "keyed");
        uint8_t junk[96];
        size_t n = garbage(junk, sizeof(junk), wv_ok, wb.len);
        assert_int_equal(sd_em_bundle_output(h.em, b, "out", sd_bytes_make(junk, n), &h.err),
                         SD_OK);
        n = garbage(junk, sizeof(junk), timer_ok, tb.len);
        assert_int_equal(sd_em_bundle_timers(h.em, b, "T", "flush", sd_bytes_make(junk, n), &h.err),
                         SD_OK);
        if (rng() % 3 == 0) {
            n = garbage(junk, sizeof(junk), NULL, 0);
            assert_int_equal(
                sd_em_bundle_residual(h.em, b, sd_bytes_make(junk, n), 0, false, 0, &h.err), SD_OK);
        }
        sd_err err = { 0 };
        sd_status rc = sd_em_complete_bundle(h.em, b, &err);
        h_check(&h);
        if (rc != SD_OK) {
            /* Refused as a whole, with a message; the input is pending again. */
            assert_true(rc == SD_EPROTO || rc == SD_EUNIMPL);
            assert_true(strlen(sd_err_msg(&err)) > 0);
            failures++;
        }
        /* Either way the job runs to its end: whatever decoded is handled like real data. */
        h.n_results = 0;
        h_run_ok(&h);
        h_deinit(&h);
    }
    assert_true(failures > 100);
}

/* ========================================================================================== */
/* OOM loop                                                                                   */
/* ========================================================================================== */

typedef enum {
    OOM_WORDCOUNT,
    OOM_KEYED,
    OOM_SESSIONS,
    OOM_TRIGGER,
    OOM_OWE,
    OOM_SESSION_TRIGGER
} oom_pipeline;

static sd_status oom_build(harness *h, oom_pipeline which, window_case *wc, timer_plan *plan)
{
    switch (which) {
    case OOM_WORDCOUNT:
        return build_wordcount(h);
    case OOM_KEYED:
        return build_keyed(h, wc, plan);
    case OOM_TRIGGER:
        return build_trigger_pipeline(h, &TRIGGER_CASES[1], wc, false);
    case OOM_OWE:
        return build_owe(h, &OWE_CASES[1], wc);
    case OOM_SESSION_TRIGGER:
        return build_trigger_pipeline(h, &SESSION_TRIGGER_CASES[1], wc, false);
    default:
        return build_windowed(h, wc);
    }
}

static void test_oom_loop(void **state)
{
    static const struct {
        const char *name;
        oom_pipeline which;
        size_t shape;
    } rows[] = {
        { "wordcount, one element per bundle", OOM_WORDCOUNT, 1 },
        { "state and event-time timers, three in flight", OOM_KEYED, 3 },
        { "session merging, one element per bundle", OOM_SESSIONS, 1 },
        { "TestStream with early/late trigger, greedy", OOM_TRIGGER, 0 },
        { "window expiration with lateness, one element per bundle", OOM_OWE, 1 },
        { "merging sessions with an early/late trigger, seeded one key", OOM_SESSION_TRIGGER, 7 },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        long n;
        for (n = 1; n < 100000; n++) {
            harness h;
            sd_status rc;
            window_case keyed_rows = { .rows = { { "a", 1, 1 }, { "b", 10, 2 }, { "a", 2, 3 } },
                                       .n_rows = 3 };
            timer_plan plan = { .family = "flush", .delay = 1000, .emit_windowed = true };
            window_case trig_wc;
            window_case *wc = rows[i].which == OOM_SESSIONS ? &WINDOW_CASES[4]
                              : rows[i].which == OOM_TRIGGER || rows[i].which == OOM_OWE ||
                                      rows[i].which == OOM_SESSION_TRIGGER
                                  ? &trig_wc
                                  : &keyed_rows;
            sd_alloc_fail_after(n, 1);
            rc = h_init(&h, &SHAPES[rows[i].shape], NULL, true);
            if (rc == SD_OK) {
                rc = oom_build(&h, rows[i].which, wc, &plan);
            }
            if (rc == SD_OK) {
                rc = h_run(&h);
            }
            long injected = sd_alloc_injected_failures();
            sd_alloc_fail_after(0, 0);
            if (injected == 0) {
                if (rc != SD_OK) {
                    fail_msg("%s: clean run failed: %s (%s)", rows[i].name, sd_status_name(rc),
                             sd_err_msg(&h.err));
                }
                assert_true(sd_em_done(h.em));
                h_deinit(&h);
                break;
            }
            /* Every failure surfaces as out-of-memory (or the poisoned state it leaves). */
            if (rc != SD_ENOMEM && rc != SD_ESTATE) {
                fail_msg("%s: allocation %ld: got %s (%s)", rows[i].name, n, sd_status_name(rc),
                         sd_err_msg(&h.err));
            }
            h_deinit(&h);
        }
        assert_true(n > 10);
    }
}

/* ========================================================================================== */
/* Main                                                                                       */
/* ========================================================================================== */


/* ---------------------------------------------------------------- bundle output cap */

typedef struct fan_ctx {
    char last[64]; /* id of the bundle seen last (addresses are reused) */
    size_t bundles, first, max, elements;
} fan_ctx;

/* Impulse -> 40 seeds (one bundle). */
static sd_status fn_emit_40(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)e;
    (void)ctx;
    sd_status rc = SD_OK;
    for (uint64_t i = 0; rc == SD_OK && i < 40; i++) {
        uint8_t v[10];
        sd_buf buf = { .data = v, .cap = sizeof(v) };
        rc = sd_buf_put_varint(&buf, i);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "seeds", (sd_time)i, sd_bytes_make(v, buf.len));
        }
    }
    return rc;
}

/* Each seed makes 1,000 bytes of output; records how many seeds each bundle carried. */
static sd_status fn_fan_1000(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    fan_ctx *f = ctx;
    static const uint8_t kb[1000];
    if (strcmp(f->last, sd_bundle_id(b)) != 0) {
        snprintf(f->last, sizeof(f->last), "%s", sd_bundle_id(b));
        size_t n = sd_bundle_input_count(b);
        f->first = f->bundles == 0 ? n : f->first;
        f->max = SD_MAX(f->max, f->bundles == 0 ? 0 : n);
        f->bundles++;
    }
    f->elements++;
    sd_buf buf;
    sd_buf_init(&buf, 0);
    sd_status rc = sd_buf_put_lp(&buf, sd_bytes_make(kb, sizeof(kb)));
    if (rc == SD_OK) {
        rc = h_emit_global(h, b, "big", e->ts, sd_buf_bytes(&buf));
    }
    sd_buf_deinit(&buf);
    return rc;
}

/*
 * A stage with an output cap (the planner sets one for the TypeScript SDK) takes one element
 * first, then as many as fit the cap by the output per element it learned: 4,000 bytes at
 * about 1,010 bytes an element is 3 a bundle. Without the cap the 40 seeds go in one bundle.
 */
static void test_bundle_output_cap(void **state)
{
    static const char *imp[] = { "imp" }, *seeds[] = { "seeds" }, *big[] = { "big" };
    (void)state;
    for (int capped = 0; capped < 2; capped++) {
        harness h;
        fan_ctx f = { 0 };
        assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
        h_pcoll(&h, "imp", wv_bytes_g, NULL);
        h_pcoll(&h, "seeds", wv_varint_g, NULL);
        h_pcoll(&h, "big", wv_bytes_g, NULL);
        h_stage(&h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
        h_stage(&h, "seed", SD_STAGE_SDK, "imp", seeds, 1, fn_emit_40, NULL);
        const char *ins[1] = { "seeds" };
        sd_stage_spec fan = { .id = "fan",
                              .kind = SD_STAGE_SDK,
                              .inputs = ins,
                              .n_inputs = 1,
                              .outputs = big,
                              .n_outputs = 1,
                              .max_output_bytes = capped ? 4000 : 0 };
        h_add(&h, &fan, fn_fan_1000, NULL, &f);
        h_stage(&h, "sink", SD_STAGE_SDK, "big", NULL, 0, NULL, NULL);
        assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
        h_run_ok(&h);
        assert_int_equal(f.elements, 40);
        if (capped) {
            assert_int_equal(f.first, 1);
            assert_int_equal(f.max, 3);
            assert_int_equal(f.bundles, 1 + 13); /* 1, then 39 in threes */
        } else {
            assert_int_equal(f.bundles, 1);
            assert_int_equal(f.first, 40);
        }
        h_deinit(&h);
    }
}


/* ---------------------------------------------------------------- several TestStreams */

typedef struct clock_rec {
    sd_time start;
    char seen[16][32];
    size_t n;
} clock_rec;

/* Records "v@s": the value and the job clock (seconds since the start) when it arrived. */
static sd_status fn_record_clock(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    clock_rec *c = ctx;
    sd_reader r = sd_reader_make(e->elem);
    uint64_t v;
    (void)b;
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    assert_true(c->n < 16);
    if (v == 4) {
        /* A's watermark event has moved its own output only: B's is still at the minimum. */
        sd_time wa, wb;
        assert_int_equal(sd_em_pcollection_watermark(h->em, "ta", &wa), SD_OK);
        assert_int_equal(sd_em_pcollection_watermark(h->em, "tb", &wb), SD_OK);
        assert_int_equal(wa, 100);
        assert_int_equal(wb, SD_TIME_MIN);
    }
    snprintf(c->seen[c->n++], sizeof(c->seen[0]), "%llu@%lld", (unsigned long long)v,
             (long long)((sd_em_clock_now(h->em) - c->start) / 1000));
    return SD_OK;
}

static sd_status ts_add(harness *h, const char *stage, const char *pc, uint64_t v, sd_time ts)
{
    uint8_t buf[10];
    sd_buf b = { .data = buf, .cap = sizeof(buf) };
    sd_status rc = sd_buf_put_varint(&b, v);
    sd_bytes e = sd_bytes_make(buf, b.len);
    return rc == SD_OK ? sd_em_teststream_add_elements(h->em, stage, pc, &e, &ts, 1, &h->err) : rc;
}

/*
 * Two TestStreams share the job clock: their processing-time events merge in time order (A
 * waits 10 s, B 5 s then 10 s more), each one's watermark events move only its own output, and
 * the job ends once both are done. Beam allows any number of TestStreams (Java's
 * testMultipleStreams); Prism refuses more than one.
 */
static void test_two_teststreams(void **state)
{
    static const char *ta[] = { "ta" }, *tb[] = { "tb" }, *both[] = { "ta", "tb" },
                      *all[] = { "all" };
    static const char *const want[] = { "1@0", "2@0", "3@5", "4@10", "5@15" };
    (void)state;
    harness h;
    clock_rec rec = { 0 };
    sd_em_config cfg = { .wall_now = fake_wall };
    assert_int_equal(h_init(&h, &SHAPES[0], &cfg, false), SD_OK);
    h_pcoll(&h, "ta", wv_varint_g, NULL);
    h_pcoll(&h, "tb", wv_varint_g, NULL);
    h_pcoll(&h, "all", wv_varint_g, NULL);
    h_stage(&h, "A", SD_STAGE_TESTSTREAM, NULL, ta, 1, NULL, NULL);
    h_stage(&h, "B", SD_STAGE_TESTSTREAM, NULL, tb, 1, NULL, NULL);
    sd_stage_spec flat = { .id = "flatten",
                           .kind = SD_STAGE_FLATTEN,
                           .inputs = both,
                           .n_inputs = 2,
                           .outputs = all,
                           .n_outputs = 1 };
    h_add(&h, &flat, NULL, NULL, NULL);
    h_stage(&h, "sink", SD_STAGE_SDK, "all", NULL, 0, fn_record_clock, &rec);
    assert_int_equal(ts_add(&h, "A", "ta", 1, 1), SD_OK);
    assert_int_equal(sd_em_teststream_advance_clock(h.em, "A", 10000, &h.err), SD_OK);
    assert_int_equal(sd_em_teststream_advance_watermark(h.em, "A", "ta", 100, &h.err), SD_OK);
    assert_int_equal(ts_add(&h, "A", "ta", 4, 200), SD_OK);
    assert_int_equal(ts_add(&h, "B", "tb", 2, 2), SD_OK);
    assert_int_equal(sd_em_teststream_advance_clock(h.em, "B", 5000, &h.err), SD_OK);
    assert_int_equal(ts_add(&h, "B", "tb", 3, 3), SD_OK);
    assert_int_equal(sd_em_teststream_advance_clock(h.em, "B", 10000, &h.err), SD_OK);
    assert_int_equal(ts_add(&h, "B", "tb", 5, 5), SD_OK);
    assert_int_equal(sd_em_start(h.em, &h.err), SD_OK);
    rec.start = sd_em_clock_now(h.em);
    h_run_ok(&h);
    assert_int_equal(rec.n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(rec.seen[i], want[i]);
    }
    assert_true(sd_em_done(h.em));
    h_deinit(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundle_output_cap),
        cmocka_unit_test(test_two_teststreams),
        cmocka_unit_test(test_wordcount),
        cmocka_unit_test(test_windows_table),
        cmocka_unit_test(test_flatten),
        cmocka_unit_test(test_flatten_no_inputs),
        cmocka_unit_test(test_time_sorted_input),
        cmocka_unit_test(test_side_inputs),
        cmocka_unit_test(test_side_input_waits_for_producer),
        cmocka_unit_test(test_channel_split),
        cmocka_unit_test(test_fail_bundle_retries_cleanly),
        cmocka_unit_test(test_bad_output_bytes_fail_the_bundle),
        cmocka_unit_test(test_byte_cap),
        cmocka_unit_test(test_stuck_dump),
        cmocka_unit_test(test_graph_errors),
        cmocka_unit_test(test_event_time_timers_and_state),
        cmocka_unit_test(test_looping_timer),
        cmocka_unit_test(test_user_state_is_tentative),
        cmocka_unit_test(test_stateful_split_keeps_keys_locked),
        cmocka_unit_test(test_processing_time_timer_synthetic_clock),
        cmocka_unit_test(test_processing_time_timer_wall_clock),
        cmocka_unit_test(test_delayed_residuals),
        cmocka_unit_test(test_teststream),
        cmocka_unit_test(test_teststream_clock_drives_processing_time),
        cmocka_unit_test(test_event_time_timer_waits_for_the_watermark),
        cmocka_unit_test(test_triggers),
        cmocka_unit_test(test_session_triggers),
        cmocka_unit_test(test_state_of_expired_windows_is_dropped),
        cmocka_unit_test(test_processing_time_trigger_synthetic),
        cmocka_unit_test(test_on_window_expiration),
        cmocka_unit_test(test_on_window_expiration_holds_output),
        cmocka_unit_test(test_on_window_expiration_spec_errors),
        cmocka_unit_test(test_ordered_list_state),
        cmocka_unit_test(test_late_data_dead_letter),
        cmocka_unit_test(test_late_output_errors),
        cmocka_unit_test(test_schedule_seed_is_deterministic),
        cmocka_unit_test(test_schedule_seed_catches_order_dependence),
        cmocka_unit_test(test_gbk_million),
        cmocka_unit_test(test_garbage_from_the_sdk),
        cmocka_unit_test(test_oom_loop),
    };
    return cmocka_run_group_tests(tests, coders_setup, coders_teardown);
}
