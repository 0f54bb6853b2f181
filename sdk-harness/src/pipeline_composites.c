/*
 * Sundial C SDK: the composite transforms and the assertions, built from the primitives.
 *
 * Each composite opens a parent transform, builds its leaves inside that scope (their ids
 * are "<composite>/<leaf>"), and closes the scope with the composite's output:
 *
 *   Create            Impulse -> a built-in DoFn that emits the encoded elements
 *   CombinePerKey     GroupByKey -> a ParDo of the built-in combine-grouped DoFn, under the
 *                     combine_per_key URN with a CombinePayload: a runner may lift the
 *                     combiner, and one that does not (Flink, Spark: Java's fuser keeps only
 *                     primitive leaves) runs two primitives
 *   CombineGlobally   key every element with the empty key (plus a sentinel when globally
 *                     windowed, so an empty input still gives one output), CombinePerKey with
 *                     the global-wrap CombineFn, drop the key
 *   Reshuffle         key with a varint -> GroupByKey -> ungroup, under the reshuffle URN
 *   assertions        [select window and panes] -> [rewindow] -> tag + sentinel -> group ->
 *                     check, all built-in DoFns (builtins.c, panes.c), so they run on any
 *                     runner that can run a C worker
 *
 * WithTimestamps is no composite, only a ParDo of the built-in timestamp DoFn; it sits here
 * with the other built-in-DoFn transforms.
 *
 * The model helpers come from pipeline.c through pipeline_int.h; errors are sticky there.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/time.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/pipeline_int.h"

/* ================================================================ composites */

/* A ParDo of a built-in DoFn inside the current scope. */
static sd_pcoll *builtin_pardo(sd_pipeline *p,
                               const char *name,
                               sd_pcoll *input,
                               const char *dofn,
                               sd_bytes config,
                               const sd_coder *out)
{
    return sd_apply(p, name, input, dofn, config, out);
}

static void created_release(void *c)
{
    sd__created_unref(c);
}

/* Write v as a varint at d; returns the end. */
static uint8_t *put_varint_at(uint8_t *d, uint64_t v)
{
    while (v >= 0x80) {
        *d++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *d++ = (uint8_t)v;
    return d;
}

/*
 * The Create DoFn's configuration: varint(n), then per element lp(element), a byte saying
 * whether a timestamp follows, and the timestamp (8 bytes, big-endian). Sized first and
 * written in place in one allocation: a million elements would otherwise grow the buffer (and
 * copy it) a dozen times, and pay a checked append per field.
 */
static sd_status
put_create_config(sd_buf *b, const sd_bytes *elements, size_t n, const sd_time *timestamps)
{
    size_t need = sd_varint_size(n);
    for (size_t i = 0; i < n; i++) {
        need += sd_varint_size(elements[i].len) + elements[i].len + 1 +
                (timestamps != NULL ? sizeof(uint64_t) : 0);
    }
    sd_status st = sd_buf_reserve(b, need);
    if (st != SD_OK) {
        return st;
    }
    uint8_t *d = put_varint_at(b->data + b->len, n);
    for (size_t i = 0; i < n; i++) {
        d = put_varint_at(d, elements[i].len);
        if (elements[i].len > 0) {
            memcpy(d, elements[i].ptr, elements[i].len);
            d += elements[i].len;
        }
        *d++ = timestamps != NULL ? 1 : 0;
        if (timestamps != NULL) {
            uint64_t t = sd_time_encode(timestamps[i]);
            for (int k = 0; k < 8; k++) {
                *d++ = (uint8_t)(t >> (56 - 8 * k));
            }
        }
    }
    b->len = (size_t)(d - b->data);
    return SD_OK;
}

sd_pcoll *sd_create(sd_pipeline *p,
                    const char *name,
                    const sd_coder *coder,
                    const sd_bytes *elements,
                    size_t n,
                    const sd_time *timestamps)
{
    sd_buf cfg;
    if (sd__pipeline_failed(p)) {
        return NULL;
    }
    if (coder == NULL || (n > 0 && elements == NULL)) {
        return sd__pipeline_fail(p, SD_EINVAL, "Create %s: NULL coder or elements",
                                 name != NULL ? name : "(null)");
    }
    /* Check every element decodes with the coder now, not in the worker. */
    for (size_t i = 0; i < n; i++) {
        sd_reader r = sd_reader_make(elements[i]);
        sd_err e;
        sd_err_clear(&e);
        if (sd_coder_skip(coder, &r, true, &e) != SD_OK || !sd_reader_done(&r)) {
            return sd__pipeline_fail(
                p, SD_EINVAL, "Create %s: element %zu is not one nested value of %s%s%s", name, i,
                coder->urn, e.code != SD_OK ? ": " : "", e.code != SD_OK ? sd_err_msg(&e) : "");
        }
    }
    px_transform *t = sd__pipeline_new_transform(p, name, PX_COMPOSITE);
    if (t == NULL) {
        return NULL;
    }
    long saved = sd__pipeline_enter(p, t);
    sd_pcoll *imp = sd_impulse(p, "Impulse");
    sd_buf_init(&cfg, 0);
    if (put_create_config(&cfg, elements, n, timestamps) != SD_OK) {
        sd__pipeline_oom(p);
    }
    sd_pcoll *out = NULL;
    if (cfg.len < SD_CREATE_REF_MIN_BYTES || sd__pipeline_failed(p)) {
        out = builtin_pardo(p, "Elements", imp, SD_FN_CREATE, sd_buf_bytes(&cfg), coder);
    } else {
        /* Large: kept here by reference; pipeline_proto.c puts it inline where it must. */
        size_t len;
        uint8_t *data = sd_buf_take(&cfg, &len);
        sd__created *c = sd__created_create(data, len);
        if (c == NULL) {
            sd__pipeline_oom(p);
        } else if (sd__pipeline_own(p, c, created_release)) {
            out = builtin_pardo(p, "Elements", imp, SD_FN_CREATE_REF,
                                sd_bytes_str(sd__created_token(c)), coder);
        }
        if (out != NULL) {
            /* The ParDo just made is the newest transform. */
            px_transform *pt = *SD_VEC_AT(&p->transforms, px_transform *, p->transforms.len - 1);
            assert(pt->kind == PX_PARDO);
            pt->created = c;
        }
    }
    sd_buf_deinit(&cfg);
    sd__pipeline_leave(p, t, saved, out);
    return sd__pipeline_failed(p) ? NULL : out;
}

/*
 * Create of n scalars (strings or varints, selected by `strings`): encode them into one buffer,
 * slice it into elements and hand them to sd_create.
 */
static sd_pcoll *create_scalars(sd_pipeline *p,
                                const char *name,
                                bool strings,
                                const char *const *svals,
                                const int64_t *ivals,
                                size_t n)
{
    sd_buf all;
    sd_bytes *items;
    size_t *offs;
    sd_pcoll *out = NULL;
    if (sd__pipeline_failed(p)) {
        return NULL;
    }
    items = sd_calloc(n + 1, sizeof(sd_bytes));
    offs = sd_calloc(n + 1, sizeof(size_t));
    sd_buf_init(&all, 0);
    bool ok = items != NULL && offs != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        offs[i] = all.len;
        ok = (strings ? sd_enc_str(&all, svals[i] != NULL ? svals[i] : "")
                      : sd_enc_int(&all, ivals[i])) == SD_OK;
    }
    if (ok) {
        offs[n] = all.len;
        for (size_t i = 0; i < n; i++) {
            items[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
        }
        out =
            sd_create(p, name, strings ? sd_pcoder_string(p) : sd_pcoder_varint(p), items, n, NULL);
    } else {
        sd__pipeline_oom(p);
    }
    sd_buf_deinit(&all);
    sd_free(items);
    sd_free(offs);
    return out;
}

sd_pcoll *sd_create_strings(sd_pipeline *p, const char *name, const char *const *strings, size_t n)
{
    return create_scalars(p, name, true, strings, NULL, n);
}

sd_pcoll *sd_create_ints(sd_pipeline *p, const char *name, const int64_t *values, size_t n)
{
    return create_scalars(p, name, false, NULL, values, n);
}

sd_pcoll *sd_combine_per_key(sd_pipeline *p,
                             const char *name,
                             sd_pcoll *input,
                             const char *combinefn,
                             sd_bytes config,
                             const sd_coder *accumulator_coder,
                             const sd_coder *output_coder)
{
    if (!sd__pipeline_check_inputs(p, "CombinePerKey", &input, 1)) {
        return NULL;
    }
    if (input->coder->kind != SD_CODER_KV) {
        return sd__pipeline_fail(p, SD_EINVAL, "CombinePerKey %s: input %s must have a KV coder",
                                 name, input->id);
    }
    if (combinefn == NULL || sd__find_combinefn(sd_bytes_str(combinefn)) == NULL) {
        return sd__pipeline_fail(p, SD_ENOTFOUND,
                                 "CombinePerKey %s: no CombineFn registered as \"%s\"", name,
                                 combinefn != NULL ? combinefn : "(null)");
    }
    if (accumulator_coder == NULL || output_coder == NULL) {
        return sd__pipeline_fail(
            p, SD_EINVAL, "CombinePerKey %s: accumulator and output coders are required", name);
    }
    const sd_coder *out_coder = sd_pcoder_kv(p, input->coder->components[0], output_coder);
    px_transform *t = sd__pipeline_new_transform(p, name, PX_COMBINE_PER_KEY);
    if (t == NULL || !sd__pipeline_add_input(p, t, "in", input)) {
        return NULL;
    }
    t->acc_coder = accumulator_coder;
    if (sd__combinefn_payload_encode(&t->fn_payload, combinefn, config) != SD_OK) {
        return sd__pipeline_oom(p);
    }
    long saved = sd__pipeline_enter(p, t);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", input);
    sd_pcoll *out = NULL;
    if (grouped != NULL) {
        out = builtin_pardo(p, "Combine", grouped, SD_FN_COMBINE_GROUPED,
                            sd_buf_bytes(&t->fn_payload), out_coder);
    }
    sd__pipeline_leave(p, t, saved, out);
    return sd__pipeline_failed(p) ? NULL : out;
}

sd_pcoll *sd_count_per_key(sd_pipeline *p, const char *name, sd_pcoll *input)
{
    const sd_coder *v = sd_pcoder_varint(p);
    return sd_combine_per_key(p, name, input, SD_COMBINE_COUNT, SD_BYTES_NULL, v, v);
}

/* KV<bytes "", bytes(0x01 ++ element)>, plus a sentinel in the global window when the input is
 * globally windowed (so the group exists even for an empty input), all in the current scope. */
static sd_pcoll *tag_and_sentinel(sd_pipeline *p, sd_pcoll *input)
{
    const sd_coder *b = sd_pcoder_bytes(p);
    const sd_coder *kvc = sd_pcoder_kv(p, b, b);
    sd_pcoll *keyed = builtin_pardo(p, "Tag", input, SD_FN_ASSERT_KEY, SD_BYTES_NULL, kvc);
    if (sd__pipeline_failed(p)) {
        return NULL;
    }
    const sd_windowfn *wf = sd_vec_at(&p->windowings, keyed->windowing);
    if (wf->kind != SD_WINDOW_GLOBAL) {
        return keyed;
    }
    static const uint8_t sentinel[] = { 0x00, 0x01, 0x00 };
    sd_bytes e = sd_bytes_make(sentinel, sizeof(sentinel));
    sd_pcoll *s = sd_create(p, "Sentinel", kvc, &e, 1, NULL);
    sd_pcoll *both[2] = { keyed, s };
    return sd_flatten(p, "WithSentinel", both, 2);
}

sd_pcoll *sd_combine_globally(sd_pipeline *p,
                              const char *name,
                              sd_pcoll *input,
                              const char *combinefn,
                              sd_bytes config,
                              const sd_coder *accumulator_coder,
                              const sd_coder *output_coder)
{
    sd_buf cfg;
    if (!sd__pipeline_check_inputs(p, "CombineGlobally", &input, 1)) {
        return NULL;
    }
    if (combinefn == NULL || sd__find_combinefn(sd_bytes_str(combinefn)) == NULL) {
        return sd__pipeline_fail(
            p, SD_ENOTFOUND, "CombineGlobally %s: no CombineFn registered as \"%s\"",
            name != NULL ? name : "(null)", combinefn != NULL ? combinefn : "(null)");
    }
    px_transform *t = sd__pipeline_new_transform(p, name, PX_COMPOSITE);
    if (t == NULL || !sd__pipeline_add_input(p, t, "in", input)) {
        return NULL;
    }
    long saved = sd__pipeline_enter(p, t);
    sd_pcoll *tagged = tag_and_sentinel(p, input);
    sd_buf_init(&cfg, 0);
    if (sd_buf_put_lp(&cfg, sd_bytes_str(combinefn)) != SD_OK ||
        sd_buf_put_lp(&cfg, config) != SD_OK) {
        sd__pipeline_oom(p);
    }
    sd_pcoll *combined = sd_combine_per_key(p, "CombinePerKey", tagged, SD_COMBINE_GLOBAL_WRAP,
                                            sd_buf_bytes(&cfg), accumulator_coder, output_coder);
    sd_buf_deinit(&cfg);
    sd_pcoll *out =
        builtin_pardo(p, "Unkey", combined, SD_FN_DROP_KEY, SD_BYTES_NULL, output_coder);
    sd__pipeline_leave(p, t, saved, out);
    return sd__pipeline_failed(p) ? NULL : out;
}

sd_pcoll *sd_reshuffle(sd_pipeline *p, const char *name, sd_pcoll *input)
{
    if (!sd__pipeline_check_inputs(p, "Reshuffle", &input, 1)) {
        return NULL;
    }
    px_transform *t = sd__pipeline_new_transform(p, name, PX_RESHUFFLE);
    if (t == NULL || !sd__pipeline_add_input(p, t, "in", input)) {
        return NULL;
    }
    long saved = sd__pipeline_enter(p, t);
    const sd_coder *kvc = sd_pcoder_kv(p, sd_pcoder_varint(p), input->coder);
    sd_pcoll *keyed = builtin_pardo(p, "Key", input, SD_FN_RESHUFFLE_KEY, SD_BYTES_NULL, kvc);
    sd_pcoll *grouped = sd_group_by_key(p, "Group", keyed);
    sd_pcoll *out =
        builtin_pardo(p, "Ungroup", grouped, SD_FN_RESHUFFLE_UNGROUP, SD_BYTES_NULL, input->coder);
    sd__pipeline_leave(p, t, saved, out);
    return sd__pipeline_failed(p) ? NULL : out;
}

sd_pcoll *sd_with_timestamps(sd_pipeline *p,
                             const char *name,
                             sd_pcoll *input,
                             const char *timestamp_fn,
                             sd_bytes config)
{
    sd_buf cfg;
    if (sd__pipeline_failed(p)) {
        return NULL;
    }
    if (timestamp_fn == NULL || sd__find_timestamp_fn(sd_bytes_str(timestamp_fn)) == NULL) {
        return sd__pipeline_fail(p, SD_ENOTFOUND,
                                 "WithTimestamps %s: no timestamp function registered as "
                                 "\"%s\"",
                                 name != NULL ? name : "(null)",
                                 timestamp_fn != NULL ? timestamp_fn : "(null)");
    }
    sd_buf_init(&cfg, 0);
    if (sd_buf_put_lp(&cfg, sd_bytes_str(timestamp_fn)) != SD_OK ||
        sd_buf_put_lp(&cfg, config) != SD_OK) {
        sd_buf_deinit(&cfg);
        return sd__pipeline_oom(p);
    }
    sd_pcoll *out = builtin_pardo(p, name, input, SD_FN_TIMESTAMP, sd_buf_bytes(&cfg), NULL);
    sd_buf_deinit(&cfg);
    return out;
}

/* ================================================================ assertions */

/*
 * An assertion composite: [Select: the window and panes asked for] -> [Rewindow: into the plain
 * global window, so the gathering GroupByKey fires once, after all input, whatever pc's
 * trigger] -> Tag + Sentinel -> Gather -> Check. mode 0 compares contents, mode 1 the count.
 */
static void add_assertion(sd_pipeline *p,
                          const char *name,
                          sd_pcoll *pc,
                          int mode,
                          const sd_window *window,
                          sd_pane_filter panes,
                          const sd_bytes *expected,
                          size_t n,
                          int64_t count)
{
    sd_buf cfg;
    if (!sd__pipeline_check_inputs(p, "assertion", &pc, 1)) {
        return;
    }
    if ((unsigned)panes > SD_PANES_FINAL) {
        sd__pipeline_fail(p, SD_EINVAL,
                          "assertion %s: pane filter %d is not an sd_pane_filter value",
                          name != NULL ? name : "(null)", (int)panes);
        return;
    }
    px_transform *t = sd__pipeline_new_transform(p, name, PX_COMPOSITE);
    if (t == NULL || !sd__pipeline_add_input(p, t, "in", pc)) {
        return;
    }
    long saved = sd__pipeline_enter(p, t);
    sd_pcoll *in = pc;
    sd_buf_init(&cfg, 0);
    if ((window != NULL && !window->global) || panes != SD_PANES_ALL) {
        if (sd__pane_select_config(&cfg, window != NULL && !window->global ? window : NULL,
                                   panes) != SD_OK) {
            sd__pipeline_oom(p);
        }
        in = builtin_pardo(p, "Select", in, SD_FN_ASSERT_PANES, sd_buf_bytes(&cfg), NULL);
        sd_buf_reset(&cfg);
    }
    if (in != NULL && in->windowing != 0) {
        sd_windowfn g = { .kind = SD_WINDOW_GLOBAL };
        in = sd_window_into(p, "Rewindow", in, &g);
    }
    sd_pcoll *tagged = tag_and_sentinel(p, in);
    sd_pcoll *grouped = sd_group_by_key(p, "Gather", tagged);
    sd_status st = sd_buf_put_varint(&cfg, (uint64_t)mode);
    if (st == SD_OK) {
        st = sd_buf_put_lp(&cfg, sd_bytes_str(t->id));
    }
    if (st == SD_OK) {
        st = sd__coder_serialize(pc->coder, &cfg);
    }
    if (st == SD_OK) {
        /* The selection already happened upstream: the checker sees one global window. */
        st = sd_buf_append_byte(&cfg, 0);
    }
    if (st == SD_OK) {
        st = sd_buf_put_varint(&cfg, mode == 1 ? (uint64_t)count : n);
    }
    for (size_t i = 0; mode == 0 && i < n && st == SD_OK; i++) {
        st = sd_buf_put_lp(&cfg, expected[i]);
    }
    if (st != SD_OK) {
        sd__pipeline_oom(p);
    }
    builtin_pardo(p, "Check", grouped, SD_FN_ASSERT_CHECK, sd_buf_bytes(&cfg), sd_pcoder_bytes(p));
    sd_buf_deinit(&cfg);
    p->parent = saved;
}

void sd_assert_contains_exactly(sd_pipeline *p,
                                const char *name,
                                sd_pcoll *pc,
                                const sd_bytes *expected,
                                size_t n)
{
    add_assertion(p, name, pc, 0, NULL, SD_PANES_ALL, expected, n, 0);
}

void sd_assert_in_window(sd_pipeline *p,
                         const char *name,
                         sd_pcoll *pc,
                         const sd_window *w,
                         const sd_bytes *expected,
                         size_t n)
{
    add_assertion(p, name, pc, 0, w, SD_PANES_ALL, expected, n, 0);
}

void sd_assert_in_pane(sd_pipeline *p,
                       const char *name,
                       sd_pcoll *pc,
                       const sd_window *w,
                       sd_pane_filter panes,
                       const sd_bytes *expected,
                       size_t n)
{
    add_assertion(p, name, pc, 0, w, panes, expected, n, 0);
}

void sd_assert_count(sd_pipeline *p, const char *name, sd_pcoll *pc, int64_t n)
{
    add_assertion(p, name, pc, 1, NULL, SD_PANES_ALL, NULL, 0, n);
}

void sd_assert_count_in_pane(sd_pipeline *p,
                             const char *name,
                             sd_pcoll *pc,
                             const sd_window *w,
                             sd_pane_filter panes,
                             int64_t n)
{
    add_assertion(p, name, pc, 1, w, panes, NULL, 0, n);
}

void sd_assert_empty(sd_pipeline *p, const char *name, sd_pcoll *pc)
{
    add_assertion(p, name, pc, 1, NULL, SD_PANES_ALL, NULL, 0, 0);
}

void sd_assert_strings(sd_pipeline *p,
                       const char *name,
                       sd_pcoll *pc,
                       const char *const *expected,
                       size_t n)
{
    sd_assert_strings_in_pane(p, name, pc, NULL, SD_PANES_ALL, expected, n);
}

void sd_assert_strings_in_pane(sd_pipeline *p,
                               const char *name,
                               sd_pcoll *pc,
                               const sd_window *w,
                               sd_pane_filter panes,
                               const char *const *expected,
                               size_t n)
{
    sd_buf all;
    size_t *offs = sd_calloc(n + 1, sizeof(size_t));
    sd_bytes *items = sd_calloc(n + 1, sizeof(sd_bytes));
    sd_buf_init(&all, 0);
    bool ok = offs != NULL && items != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        offs[i] = all.len;
        ok = sd_enc_str(&all, expected[i]) == SD_OK;
    }
    if (ok) {
        offs[n] = all.len;
        for (size_t i = 0; i < n; i++) {
            items[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
        }
        add_assertion(p, name, pc, 0, w, panes, items, n, 0);
    } else {
        sd__pipeline_oom(p);
    }
    sd_buf_deinit(&all);
    sd_free(offs);
    sd_free(items);
}
