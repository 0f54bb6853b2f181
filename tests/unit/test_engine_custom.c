/*
 * Engine tests, custom windows (beam:coder:custom_window:v1): windows only the SDK can
 * interpret, each written after its max timestamp, which is all the engine reads of them.
 *
 *   gen -> assign (a custom window per element) -> windowed (CUSTOM) -> gbk -> collect
 *                                                                     \-> timers (stateful)
 *
 * The fake window fn labels each element's window with bytes ("w<k>" or "x<k>" for the k-th
 * ten milliseconds) and gives it the max timestamp 10k + 9: two windows with the same max
 * timestamp and different bytes stay apart, and the same bytes meet in one group across
 * bundles. The GroupByKey fires each window when the watermark passes its max timestamp, with
 * the output timestamp at it (END_OF_WINDOW), and hands the window's bytes back unchanged. A
 * stateful DoFn over the same windows sets an event-time timer at each window's max timestamp
 * and reads its bag state there: timers and state keep custom windows apart too. Every case
 * runs under every bundle shape, bounded and streaming.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_harness.h"

static sd_coder *c_cwin, *wv_kv_c, *wv_grouped_c, *wv_out_c, *c_timer_c;

typedef struct custom_case {
    const char *name;
    bool bounded;
    row rows[12];
    size_t n_rows;
    const char *want[12];
    size_t n_want;
} custom_case;

static void custom_coders_setup(void)
{
    /* custom_window over bytes: the bytes coder carries its own length, as length_prefix does */
    assert_int_equal(sd_coder_create(&c_cwin, NULL, SD_CODER_CUSTOM_WINDOW, c_bytes, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&wv_kv_c, NULL, SD_CODER_WINDOWED_VALUE, c_kv, c_cwin, NULL),
                     SD_OK);
    assert_int_equal(
        sd_coder_create(&wv_grouped_c, NULL, SD_CODER_WINDOWED_VALUE, c_grouped, c_cwin, NULL),
        SD_OK);
    assert_int_equal(
        sd_coder_create(&wv_out_c, NULL, SD_CODER_WINDOWED_VALUE, c_bytes, c_cwin, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&c_timer_c, NULL, SD_CODER_TIMER, c_bytes, c_cwin, NULL),
                     SD_OK);
}

static void custom_coders_teardown(void)
{
    sd_coder *all[] = { wv_kv_c, wv_grouped_c, wv_out_c, c_timer_c, c_cwin };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sd_coder_destroy(all[i]);
    }
}

static int cmp_values(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static sd_status fn_gen_custom_rows(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    const custom_case *cc = ctx;
    sd_status rc = SD_OK;
    (void)e;
    for (size_t i = 0; rc == SD_OK && i < cc->n_rows; i++) {
        sd_buf kv;
        sd_buf_init(&kv, 0);
        rc = kv_bytes(&kv, cc->rows[i].key, cc->rows[i].value);
        if (rc == SD_OK) {
            rc = h_emit_global(h, b, "raw", cc->rows[i].ts, sd_buf_bytes(&kv));
        }
        sd_buf_deinit(&kv);
    }
    return rc;
}

/* The custom window of an element at ts for key: its label's nested bytes encoding (what the
 * component coder, bytes, writes) and max timestamp 10k + 9. Key "b" gets the "x" labels. */
static sd_window custom_window(sd_buf *label, const char *key, sd_time ts)
{
    char text[32];
    snprintf(text, sizeof(text), "%s%lld", strcmp(key, "b") == 0 ? "x" : "w", (long long)(ts / 10));
    sd_buf_reset(label);
    assert_int_equal(sd_buf_put_lp(label, sd_bytes_str(text)), SD_OK);
    sd_window w = sd_window_interval(SD_TIME_MIN, ts / 10 * 10 + 10);
    w.custom = true;
    w.custom_bytes = sd_buf_bytes(label);
    return w;
}

static sd_status fn_assign_labels(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes key;
    assert_int_equal(sd_reader_lp(&r, &key), SD_OK);
    char k[16];
    snprintf(k, sizeof(k), "%.*s", (int)key.len, (const char *)key.ptr);
    sd_buf label;
    sd_buf_init(&label, 0);
    sd_window w = custom_window(&label, k, e->ts);
    sd_pane p = SD_PANE_NO_FIRING;
    sd_status rc = h_emit(h, b, "windowed", e->ts, &w, 1, &p, e->elem);
    sd_buf_deinit(&label);
    return rc;
}

/* "k=a w=w0@9 ts=9 pane=07 v=1,3": the window's label (its bytes, decoded) and max timestamp. */
static int put_window(char *line, size_t n, const sd_window *w)
{
    sd_reader r = sd_reader_make(w->custom_bytes);
    sd_bytes label = SD_BYTES_NULL;
    assert_true(w->custom);
    assert_int_equal(sd_reader_lp(&r, &label), SD_OK);
    assert_true(sd_reader_done(&r));
    return snprintf(line, n, "w=%.*s@%lld", (int)label.len, (const char *)label.ptr,
                    (long long)(w->end - 1));
}

static sd_status fn_collect_custom(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)b;
    (void)ctx;
    sd_bytes key;
    uint64_t vals[16];
    size_t n = get_grouped(e->elem, &key, vals, 16);
    assert_true(n <= 16);
    qsort(vals, n, sizeof(vals[0]), cmp_values);
    char line[H_RESULT_LEN];
    int off = snprintf(line, sizeof(line), "k=%.*s ", (int)key.len, (const char *)key.ptr);
    off += put_window(line + off, sizeof(line) - (size_t)off, &e->win);
    off += snprintf(line + off, sizeof(line) - (size_t)off,
                    " ts=%lld pane=%02x v=", (long long)e->ts, pane_byte(&e->pane));
    for (size_t i = 0; i < n && off < (int)sizeof(line); i++) {
        off += snprintf(line + off, sizeof(line) - (size_t)off, i ? ",%llu" : "%llu",
                        (unsigned long long)vals[i]);
    }
    h_record(h, "%s", line);
    return SD_OK;
}

/* Stateful: add v to the bag of (key, window), set an event-time timer at the window's max
 * timestamp (again for each element: last write wins). */
static sd_status fn_stateful_custom(harness *h, sd_bundle *b, const h_elem *e, void *ctx)
{
    (void)ctx;
    sd_reader r = sd_reader_make(e->elem);
    sd_bytes user_key;
    uint64_t v;
    assert_int_equal(sd_reader_lp(&r, &user_key), SD_OK);
    assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
    sd_bytes key = sd_bytes_make(e->elem.ptr, (size_t)(user_key.ptr + user_key.len - e->elem.ptr));
    sd_buf wenc, vbuf, tbuf;
    sd_buf_init(&wenc, 0);
    sd_buf_init(&vbuf, 0);
    sd_buf_init(&tbuf, 0);
    sd_status rc = sd_window_encode(c_cwin, &e->win, &wenc, &h->err);
    if (rc == SD_OK) {
        rc = sd_buf_put_varint(&vbuf, v);
    }
    if (rc == SD_OK) {
        rc = sd_em_user_state_append(h->em, b, H_STATE("T", "bag", sd_buf_bytes(&wenc), key), NULL,
                                     sd_buf_bytes(&vbuf), &h->err);
    }
    sd_timer t;
    sd_timer_init(&t);
    t.key = key;
    t.tag = SD_BYTES_NULL;
    if (rc == SD_OK) {
        rc = sd_windows_set(&t.windows, &e->win, 1);
    }
    t.fire = sd_window_max_ts(&e->win);
    t.hold = t.fire;
    t.pane = SD_PANE_NO_FIRING;
    if (rc == SD_OK) {
        rc = sd_timer_encode(c_timer_c, &t, &tbuf, &h->err);
    }
    if (rc == SD_OK) {
        rc = sd_em_bundle_timers(h->em, b, "T", "end", sd_buf_bytes(&tbuf), &h->err);
    }
    sd_timer_deinit(&t);
    sd_buf_deinit(&wenc);
    sd_buf_deinit(&vbuf);
    sd_buf_deinit(&tbuf);
    return rc;
}

static sd_status
fn_stateful_custom_timer(harness *h, sd_bundle *b, const char *family, const sd_timer *t, void *ctx)
{
    (void)ctx;
    assert_int_equal(t->windows.n, 1);
    const sd_window *w = sd_windows_items(&t->windows);
    assert_true(sd_em_bundle_watermark(b) > t->fire);
    sd_buf wenc, bag;
    sd_buf_init(&wenc, 0);
    sd_buf_init(&bag, 0);
    sd_status rc = sd_window_encode(c_cwin, w, &wenc, &h->err);
    if (rc == SD_OK) {
        rc = sd_em_user_state_get(h->em, b, H_STATE("T", "bag", sd_buf_bytes(&wenc), t->key), NULL,
                                  &bag, &h->err);
    }
    uint64_t sum = 0, n = 0;
    sd_reader r = sd_reader_make(sd_buf_bytes(&bag));
    while (rc == SD_OK && !sd_reader_done(&r)) {
        uint64_t v;
        assert_int_equal(sd_reader_varint(&r, &v), SD_OK);
        sum += v;
        n++;
    }
    sd_reader kr = sd_reader_make(t->key);
    sd_bytes user_key;
    assert_int_equal(sd_reader_lp(&kr, &user_key), SD_OK);
    char line[H_RESULT_LEN];
    int off = snprintf(line, sizeof(line), "%s k=%.*s ", family, (int)user_key.len,
                       (const char *)user_key.ptr);
    put_window(line + off, sizeof(line) - (size_t)off, w);
    h_record(h, "%s at=%lld sum=%llu n=%llu", line, (long long)t->fire, (unsigned long long)sum,
             (unsigned long long)n);
    sd_buf_deinit(&wenc);
    sd_buf_deinit(&bag);
    return rc;
}

static sd_status build_custom(harness *h, const custom_case *cc)
{
    static const char *imp[] = { "imp" }, *raw[] = { "raw" }, *windowed[] = { "windowed" },
                      *grouped[] = { "grouped" };
    sd_windowing ws = { .kind = SD_WINDOWFN_CUSTOM };
    sd_timer_family_spec fam = { "T", "end", false, c_timer_c };
    const char *ins[] = { "windowed" };
    sd_stage_spec stateful = { .id = "stateful",
                               .kind = SD_STAGE_SDK,
                               .inputs = ins,
                               .n_inputs = 1,
                               .stateful = true,
                               .timer_families = &fam,
                               .n_timer_families = 1 };
    sd_status rc = h_pcoll(h, "imp", wv_bytes_g, NULL);
    if (rc == SD_OK) {
        rc = h_pcoll(h, "raw", wv_kv_g, NULL);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "windowed", wv_kv_c, &ws);
    }
    if (rc == SD_OK) {
        rc = h_pcoll(h, "grouped", wv_grouped_c, &ws);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "impulse", SD_STAGE_IMPULSE, NULL, imp, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gen", SD_STAGE_SDK, "imp", raw, 1, fn_gen_custom_rows, (void *)cc);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "assign", SD_STAGE_SDK, "raw", windowed, 1, fn_assign_labels, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "gbk", SD_STAGE_GBK, "windowed", grouped, 1, NULL, NULL);
    }
    if (rc == SD_OK) {
        rc = h_stage(h, "collect", SD_STAGE_SDK, "grouped", NULL, 0, fn_collect_custom, NULL);
    }
    if (rc == SD_OK) {
        rc = h_add(h, &stateful, fn_stateful_custom, fn_stateful_custom_timer, NULL);
    }
    if (rc == SD_OK) {
        rc = sd_em_start(h->em, &h->err);
    }
    return rc;
}

/* a:1@1 a:3@3 a:12@12 b:2@2 b:5@5 a:19@19 c:7@7: a's w0 and w1, b's x0 (same max timestamp as
 * w0, other bytes), c's w0 (same bytes as a's w0, another key). */
#define CUSTOM_ROWS                                                           \
    .rows = { { "a", 1, 1 }, { "a", 3, 3 },   { "a", 12, 12 }, { "b", 2, 2 }, \
              { "b", 5, 5 }, { "a", 19, 19 }, { "c", 7, 7 } },                \
    .n_rows = 7
#define CUSTOM_WANT                                                                  \
    .want = { "k=a w=w0@9 ts=9 pane=07 v=1,3", "k=b w=x0@9 ts=9 pane=07 v=2,5",      \
              "k=c w=w0@9 ts=9 pane=07 v=7",   "k=a w=w1@19 ts=19 pane=07 v=12,19",  \
              "end k=a w=w0@9 at=9 sum=4 n=2", "end k=b w=x0@9 at=9 sum=7 n=2",      \
              "end k=c w=w0@9 at=9 sum=7 n=1", "end k=a w=w1@19 at=19 sum=31 n=2" }, \
    .n_want = 8

static const custom_case CUSTOM_CASES[] = {
    { .name = "custom-streaming", CUSTOM_ROWS, CUSTOM_WANT },
    { .name = "custom-bounded", .bounded = true, CUSTOM_ROWS, CUSTOM_WANT },
};

static const char *custom_case_name(const void *r)
{
    return ((const custom_case *)r)->name;
}

static sd_status custom_case_build(harness *h, const void *r, window_case *wc)
{
    (void)wc;
    return build_custom(h, r);
}

static void custom_case_check(harness *h, const void *r)
{
    const custom_case *cc = r;
    h_expect(h, cc->want, cc->n_want);
    assert_int_equal(sd__em_gbk_groups(h->em, "gbk"), 0);
}

void test_custom_windows(void **state)
{
    (void)state;
    custom_coders_setup();
    for (size_t i = 0; i < sizeof(CUSTOM_CASES) / sizeof(CUSTOM_CASES[0]); i++) {
        sd_em_config cfg = { .bounded = CUSTOM_CASES[i].bounded };
        h_case_table t = { .rows = &CUSTOM_CASES[i],
                           .n_rows = 1,
                           .row_size = sizeof(custom_case),
                           .cfg = &cfg,
                           .name = custom_case_name,
                           .build = custom_case_build,
                           .check = custom_case_check };
        h_run_cases(&t);
    }
    custom_coders_teardown();
}

/* A custom window coder over a window fn the engine assigns itself is refused at once. */
void test_custom_windows_need_custom_fn(void **state)
{
    (void)state;
    custom_coders_setup();
    harness h;
    assert_int_equal(h_init(&h, &SHAPES[0], NULL, false), SD_OK);
    sd_windowing fixed = { .kind = SD_WINDOWFN_FIXED, .size_ms = 10 };
    assert_int_equal(sd_em_add_pcollection(h.em, "windowed", wv_kv_c, &fixed, &h.err), SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&h.err), "custom windows need a window fn of the SDK's"));
    h_deinit(&h);
    custom_coders_teardown();
}
