/*
 * The engine test harness (see engine_harness.h): the coders every test shares, the fake
 * executor that pulls, processes and completes bundles under a bundle shape, the decoding
 * helpers fake DoFns use, and h_run_cases, the one driver that runs a table of pipeline cases
 * under every shape. Nothing here knows a particular pipeline; those live in the
 * test_engine_*.c files, one per engine concern.
 */
#include "engine_harness.h"

#include <time.h>

#include "runner/base/time.h"

/* ========================================================================================== */
/* Coders                                                                                     */
/* ========================================================================================== */

sd_coder *c_bytes, *c_varint, *c_gw, *c_iw, *c_kv, *c_iter, *c_grouped;
sd_coder *wv_bytes_g, *wv_varint_g, *wv_kv_g, *wv_kv_i, *wv_grouped_g, *wv_grouped_i;
sd_coder *c_timer_g, *c_timer_i;

static sd_coder *mk(sd_coder_kind kind, sd_coder *a, sd_coder *b)
{
    sd_coder *c = NULL;
    sd_err err = { 0 };
    sd_status rc = b != NULL   ? sd_coder_create(&c, &err, kind, a, b, NULL)
                   : a != NULL ? sd_coder_create(&c, &err, kind, a, NULL)
                               : sd_coder_create(&c, &err, kind, NULL);
    if (rc != SD_OK) {
        fprintf(stderr, "coder: %s\n", sd_err_msg(&err));
    }
    assert_int_equal(rc, SD_OK);
    return c;
}

int coders_setup(void **state)
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

int coders_teardown(void **state)
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

const h_shape SHAPES[] = {
    { "greedy", 0, 0, 1, false, SD_SHAPE_GREEDY, 0, 0 },
    { "one-element", 1, 0, 1, false, SD_SHAPE_GREEDY, 0, 0 },
    { "byte-cap-40", 0, 40, 1, false, SD_SHAPE_GREEDY, 0, 0 },
    { "three-in-flight-lifo", 2, 0, 3, true, SD_SHAPE_GREEDY, 0, 0 },
    { "one-key", 0, 0, 1, false, SD_SHAPE_ONE_KEY, 0, 0 },
    { "one-element-shape", 0, 0, 1, false, SD_SHAPE_ONE_ELEMENT, 0, 0 },
    { "seed-7", 0, 0, 1, false, SD_SHAPE_GREEDY, 7, 0 },
    { "seed-42-one-key-two-in-flight", 0, 0, 2, false, SD_SHAPE_ONE_KEY, 42, 0 },
    { "seed-99-one-element-three-lifo", 0, 0, 3, true, SD_SHAPE_ONE_ELEMENT, 99, 0 },
    { "seed-1234-cap-3-fifo", 3, 0, 2, false, SD_SHAPE_GREEDY, 1234, 0 },
    /* A memory budget of one byte: every pending element, GroupByKey value and sealed output
     * chunk goes through the spill file (em_spill.c). */
    { "spill-everything", 0, 0, 1, false, SD_SHAPE_GREEDY, 0, 1 },
    { "spill-seed-5-cap-2-two-lifo", 2, 0, 2, true, SD_SHAPE_GREEDY, 5, 1 },
};
_Static_assert(sizeof(SHAPES) / sizeof(SHAPES[0]) == N_SHAPES, "N_SHAPES counts SHAPES");

void h_check(harness *h)
{
    const char *bad = sd__em_check(h->em, h->prev);
    size_t est = sd__em_mem_estimate(h->em);
    h->peak_mem = SD_MAX(h->peak_mem, est);
    if (bad != NULL) {
        fail_msg("engine invariant broken (%s): %s", h->shape.name, bad);
    }
}

sd_status h_init(harness *h, const h_shape *shape, const sd_em_config *base, bool oom)
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
    if (shape->memory_limit > 0) {
        cfg.memory_limit = shape->memory_limit;
    }
    /* Every engine test runs with a tight live-lock bound: no legitimate pipeline here makes
     * this many bundles in a row without progress, so a false live-lock shows at once. */
    if (cfg.livelock_rounds == 0) {
        cfg.livelock_rounds = H_LIVELOCK_ROUNDS;
    }
    for (size_t i = 0; i < 64; i++) {
        h->prev[i] = SD_TIME_MIN;
    }
    h->fake_clock = cfg.wall_now != NULL;
    sd_buf_init(&h->dump, 0);
    return sd_em_create(&cfg, &h->em);
}

/* Wait until the wall clock reads due (see h_run). */
static void h_wait_until(harness *h, sd_time due)
{
    sd_time now = h->fake_clock ? fake_wall_now : sd_wall_now_ms();
    h->n_naps++;
    if (due <= now) {
        return;
    }
    h->nap_ms += due - now;
    if (h->fake_clock) {
        fake_wall_now = due;
        return;
    }
    struct timespec ts = { (time_t)((due - now) / 1000), (long)((due - now) % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

void h_deinit(harness *h)
{
    sd_em_destroy(h->em);
    sd_buf_deinit(&h->dump);
    h->em = NULL;
}

sd_status h_pcoll(harness *h, const char *id, const sd_coder *wv, const sd_windowing *ws)
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

const sd_coder *h_coder(const harness *h, const char *id)
{
    for (size_t i = 0; i < h->n_pcs; i++) {
        if (strcmp(h->pcs[i].id, id) == 0) {
            return h->pcs[i].wv;
        }
    }
    fail_msg("no pcollection %s", id);
    return NULL;
}

sd_status h_add(harness *h, const sd_stage_spec *spec, h_fn fn, h_tfn tfn, void *ctx)
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
sd_status h_stage(harness *h,
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

SD_PRINTF(2, 3) void h_record(harness *h, const char *fmt, ...)
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

void h_expect(harness *h, const char *const *want, size_t n)
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
sd_status h_emit(harness *h,
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
    sd_status rc = sd_wv_encode_header(&buf, sd_wv_window_coder(wv), ts, wins, n_wins, pane, NULL);
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

sd_status h_emit_global(harness *h, sd_bundle *b, const char *pcoll, sd_time ts, sd_bytes elem)
{
    sd_window w = sd_window_global();
    sd_pane p = SD_PANE_NO_FIRING;
    return h_emit(h, b, pcoll, ts, &w, 1, &p, elem);
}

sd_status kv_bytes(sd_buf *out, const char *key, uint64_t v)
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
    for (size_t i = 0; i < sd_em_bundle_n_timer_inputs(b); i++) {
        const char *tid, *fid;
        sd_bytes timers;
        sd_em_bundle_timer_input(b, i, &tid, &fid, &timers);
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
                             sd_em_bundle_id(b));
                }
                key = t.key; /* borrowed from `timers`, which outlives this check */
                have_key = true;
            }
        }
        sd_timer_deinit(&t);
    }
    if (h->shape.bundle_shape == SD_SHAPE_ONE_ELEMENT) {
        assert_true(sd_em_bundle_input_count(b) + n_timers <= 1);
    }
    if (h->shape.bundle_shape == SD_SHAPE_ONE_KEY && b->stage->stateful) {
        for (size_t i = 0; i < b->n_primary; i++) {
            const sd__elem *e = SD_VEC_AT(&b->elems, sd__elem, i);
            sd_bytes k = sd_bytes_make(e->slab->data + e->off, e->key_len);
            if (have_key && !sd_bytes_equal(key, k)) {
                fail_msg("shape %s: bundle %s mixes keys", h->shape.name, sd_em_bundle_id(b));
            }
            key = k;
            have_key = true;
        }
    }
}

/* Run the fake DoFn of b's stage over its first `limit` input elements and its timers
 * (outputs are not committed yet). */
sd_status h_process_n(harness *h, sd_bundle *b, size_t limit)
{
    int f = find_fn(h, sd_em_bundle_stage(b));
    sd_status rc = SD_OK;
    sd_bytes in = sd_em_bundle_input(b);
    if (!h->oom && h->shape.max_bytes > 0 && sd_em_bundle_input_count(b) > 1) {
        assert_true(in.len <= h->shape.max_bytes);
    }
    if (!h->oom && h->shape.max_elems > 0) {
        assert_true(sd_em_bundle_input_count(b) + sd_em_bundle_n_timer_inputs(b) <=
                        h->shape.max_elems ||
                    sd_em_bundle_input_count(b) <= h->shape.max_elems);
    }
    h->max_input = in.len > h->max_input ? in.len : h->max_input;
    h_hash(h, sd_bytes_str(sd_em_bundle_stage(b)));
    h_hash(h, in);
    for (size_t i = 0; i < sd_em_bundle_n_timer_inputs(b); i++) {
        const char *tid, *fid;
        sd_bytes timers;
        sd_em_bundle_timer_input(b, i, &tid, &fid, &timers);
        h_hash(h, timers);
    }
    if (!h->oom) {
        h_check_shape(h, b);
    }
    if (f < 0) {
        return SD_OK;
    }
    const sd_coder *wv = h_coder(h, sd_em_bundle_input_pcollection(b));
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
        assert_int_equal(n, sd_em_bundle_input_count(b));
    }
    for (size_t i = 0; rc == SD_OK && i < sd_em_bundle_n_timer_inputs(b); i++) {
        const char *tid, *fid;
        sd_bytes timers;
        sd_em_bundle_timer_input(b, i, &tid, &fid, &timers);
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

sd_status h_process(harness *h, sd_bundle *b)
{
    return h_process_n(h, b, SIZE_MAX);
}

/* Pull, process and complete bundles until the engine is done (or stuck). */
sd_status h_run(harness *h)
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
            sd_time due;
            if (h->em->cfg.clock == SD_CLOCK_SYNTHETIC && sd_em_next_wakeup(h->em, &due)) {
                h_wait_until(h, due);
                continue;
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
        if (sd_em_check_livelock(h->em, NULL) != SD_OK) {
            /* Like stuck: returned with the dump, for the caller to expect or report. */
            for (size_t i = 0; i < n_open; i++) {
                sd_em_fail_bundle(h->em, open[i]);
            }
            sd_buf_reset(&h->dump);
            return sd_em_check_livelock(h->em, &h->dump);
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

void h_run_ok(harness *h)
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

void get_kv(sd_bytes elem, sd_bytes *key, uint64_t *v)
{
    sd_reader r = sd_reader_make(elem);
    assert_int_equal(sd_reader_lp(&r, key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, v), SD_OK);
    assert_true(sd_reader_done(&r));
}

/* A grouped element: key, count, varint values. */
size_t get_grouped(sd_bytes elem, sd_bytes *key, uint64_t *vals, size_t cap)
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

uint8_t pane_byte(const sd_pane *p)
{
    uint8_t mem[32]; /* a pane is at most 21 bytes: no allocation (the OOM loop runs this) */
    sd_buf b = { .data = mem, .cap = sizeof(mem) };
    assert_int_equal(sd_pane_encode(p, &b), SD_OK);
    return mem[0];
}

/* Record a grouped element: "k=a w=[0,10) ts=9 pane=07 v=1,5" (values sorted). */
sd_status fn_collect_grouped(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
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
/* The case driver: shapes x cases x invariant checks                                         */
/* ========================================================================================== */

void h_run_cases(const h_case_table *t)
{
    for (size_t c = 0; c < t->n_rows; c++) {
        const void *r = (const char *)t->rows + c * t->row_size;
        for (size_t s = 0; s < N_SHAPES; s++) {
            harness h;
            window_case wc;
            memset(&wc, 0, sizeof(wc));
            assert_int_equal(h_init(&h, &SHAPES[s], t->cfg, false), SD_OK);
            if (t->name != NULL) {
                h.shape.name = t->name(r);
            }
            assert_int_equal(t->build(&h, r, &wc), SD_OK);
            h_run_ok(&h);
            t->check(&h, r);
            h_deinit(&h);
        }
    }
}
