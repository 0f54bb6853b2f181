/*
 * Unit tests for the C SDK's bundle processor: hand-built ProcessBundleDescriptors fed encoded
 * elements directly (no network), outputs captured from the data sinks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/sdk_int.h"

#define PL_DESC(x) org__apache__beam__model__pipeline__v1__##x##__descriptor
#define FN_DESC(x) org__apache__beam__model__fn_execution__v1__##x##__descriptor

/* ---------------------------------------------------------------- DoFns under test */

static sd_status split_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes line;
    (void)state;
    if (sd_read_bytes(&r, &line) != SD_OK) {
        return sd_fail(c, "not a string");
    }
    size_t i = 0;
    while (i < line.len) {
        size_t s = i;
        while (i < line.len && line.ptr[i] != ' ') {
            i++;
        }
        if (i > s) {
            sd_status st = sd_emit_kv_str_int(c, (const char *)line.ptr + s, i - s, 1);
            if (st != SD_OK) {
                return st;
            }
        }
        i++;
    }
    return SD_OK;
}

static sd_status fail_process(sd_ctx *c, void *state)
{
    (void)state;
    return sd_fail(c, "boom %d", 7);
}

static sd_status side_sum_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    int64_t x, total = 0;
    sd_iter it;
    sd_bytes v;
    bool has;
    (void)state;
    if (sd_read_int(&r, &x) != SD_OK || sd_side_iterable(c, 0, &it) != SD_OK) {
        return sd_fail(c, "side_sum: bad input or side input");
    }
    while (sd_iter_next(&it, &v, &has) == SD_OK && has) {
        sd_reader vr = sd_reader_make(v);
        int64_t y;
        if (sd_read_int(&vr, &y) != SD_OK) {
            return sd_fail(c, "side_sum: bad side value");
        }
        total += y;
    }
    return sd_emit_int(c, x * total);
}

static int setup_group(void **state)
{
    static const sd_dofn split = { .process = split_process };
    static const sd_dofn failing = { .process = fail_process };
    static const sd_dofn side_sum = { .process = side_sum_process };
    (void)state;
    if (sd_register_dofn("p:split", &split) != SD_OK ||
        sd_register_dofn("p:fail", &failing) != SD_OK ||
        sd_register_dofn("p:side_sum", &side_sum) != SD_OK) {
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- descriptor builder */

typedef struct pbd {
    sd_arena a;
    pb_ProcessBundleDescriptor *d;
} pbd;

#define CAP 32

static void pbd_init(pbd *b)
{
    memset(b, 0, sizeof(*b));
    b->d = sd__pb_alloc(&b->a, &FN_DESC(process_bundle_descriptor));
    b->d->id = "desc-1";
    b->d->transforms = sd_arena_alloc(&b->a, CAP * sizeof(void *));
    b->d->pcollections = sd_arena_alloc(&b->a, CAP * sizeof(void *));
    b->d->coders = sd_arena_alloc(&b->a, CAP * sizeof(void *));
    b->d->windowing_strategies = sd_arena_alloc(&b->a, CAP * sizeof(void *));
}

static SD_PL(FunctionSpec) * spec(pbd *b, const char *urn, sd_bytes payload)
{
    SD_PL(FunctionSpec) *fs = sd__pb_alloc(&b->a, &PL_DESC(function_spec));
    fs->urn = sd_arena_strdup(&b->a, urn);
    fs->payload.data = sd_arena_memdup(&b->a, payload.ptr, payload.len);
    fs->payload.len = payload.len;
    return fs;
}

static void add_coder(pbd *b, const char *id, const char *urn, const char *c0, const char *c1)
{
    SD_PL(Coder) *c = sd__pb_alloc(&b->a, &PL_DESC(coder));
    c->spec = spec(b, urn, SD_BYTES_NULL);
    c->component_coder_ids = sd_arena_alloc(&b->a, 2 * sizeof(char *));
    if (c0 != NULL) {
        c->component_coder_ids[c->n_component_coder_ids++] = (char *)c0;
    }
    if (c1 != NULL) {
        c->component_coder_ids[c->n_component_coder_ids++] = (char *)c1;
    }
    SD_FN(ProcessBundleDescriptor__CodersEntry) *e =
        sd__pb_alloc(&b->a, &FN_DESC(process_bundle_descriptor__coders_entry));
    e->key = (char *)id;
    e->value = c;
    b->d->coders[b->d->n_coders++] = e;
}

static void add_ws(pbd *b, const char *id, const char *window_coder)
{
    SD_PL(WindowingStrategy) *ws = sd__pb_alloc(&b->a, &PL_DESC(windowing_strategy));
    ws->window_fn = spec(b, SD_URN_WINDOW_FN_GLOBAL, SD_BYTES_NULL);
    ws->window_coder_id = (char *)window_coder;
    SD_FN(ProcessBundleDescriptor__WindowingStrategiesEntry) *e =
        sd__pb_alloc(&b->a, &FN_DESC(process_bundle_descriptor__windowing_strategies_entry));
    e->key = (char *)id;
    e->value = ws;
    b->d->windowing_strategies[b->d->n_windowing_strategies++] = e;
}

static void add_pcoll(pbd *b, const char *id, const char *coder, const char *ws)
{
    SD_PL(PCollection) *pc = sd__pb_alloc(&b->a, &PL_DESC(pcollection));
    pc->unique_name = (char *)id;
    pc->coder_id = (char *)coder;
    pc->windowing_strategy_id = (char *)ws;
    SD_FN(ProcessBundleDescriptor__PcollectionsEntry) *e =
        sd__pb_alloc(&b->a, &FN_DESC(process_bundle_descriptor__pcollections_entry));
    e->key = (char *)id;
    e->value = pc;
    b->d->pcollections[b->d->n_pcollections++] = e;
}

static void add_transform(pbd *b,
                          const char *id,
                          SD_PL(FunctionSpec) * fs,
                          const char *in_local,
                          const char *in_pc,
                          const char *out_local,
                          const char *out_pc)
{
    SD_PL(PTransform) *t = sd__pb_alloc(&b->a, &PL_DESC(ptransform));
    t->unique_name = (char *)id;
    t->spec = fs;
    t->inputs = sd_arena_alloc(&b->a, 4 * sizeof(void *));
    t->outputs = sd_arena_alloc(&b->a, 4 * sizeof(void *));
    if (in_pc != NULL) {
        SD_PL(PTransform__InputsEntry) *ie =
            sd__pb_alloc(&b->a, &PL_DESC(ptransform__inputs_entry));
        ie->key = (char *)in_local;
        ie->value = (char *)in_pc;
        t->inputs[t->n_inputs++] = ie;
    }
    if (out_pc != NULL) {
        SD_PL(PTransform__OutputsEntry) *oe =
            sd__pb_alloc(&b->a, &PL_DESC(ptransform__outputs_entry));
        oe->key = (char *)out_local;
        oe->value = (char *)out_pc;
        t->outputs[t->n_outputs++] = oe;
    }
    SD_FN(ProcessBundleDescriptor__TransformsEntry) *e =
        sd__pb_alloc(&b->a, &FN_DESC(process_bundle_descriptor__transforms_entry));
    e->key = (char *)id;
    e->value = t;
    b->d->transforms[b->d->n_transforms++] = e;
}

static void add_input_to(pbd *b, const char *tid, const char *local, const char *pc)
{
    for (size_t i = 0; i < b->d->n_transforms; i++) {
        if (strcmp(b->d->transforms[i]->key, tid) == 0) {
            SD_PL(PTransform) *t = b->d->transforms[i]->value;
            SD_PL(PTransform__InputsEntry) *ie =
                sd__pb_alloc(&b->a, &PL_DESC(ptransform__inputs_entry));
            ie->key = (char *)local;
            ie->value = (char *)pc;
            t->inputs[t->n_inputs++] = ie;
        }
    }
}

static SD_PL(FunctionSpec) * packed_spec(pbd *b, const char *urn, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = sd_arena_alloc(&b->a, n + 1);
    n = protobuf_c_message_pack(m, buf);
    return spec(b, urn, sd_bytes_make(buf, n));
}

static SD_PL(FunctionSpec) * port(pbd *b, const char *urn, const char *coder)
{
    SD_FN(RemoteGrpcPort) p = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__REMOTE_GRPC_PORT__INIT;
    p.coder_id = (char *)coder;
    return packed_spec(b, urn, &p.base);
}

static SD_PL(FunctionSpec) * pardo(pbd *b, const char *dofn, const char *side_local, bool multimap)
{
    sd_buf pl;
    const char *tags[] = { "out0" };
    const char *sides[] = { side_local };
    sd_buf_init(&pl, 0);
    assert_int_equal(sd__dofn_payload_encode(&pl, dofn, SD_BYTES_NULL, tags, 1, sides,
                                             side_local != NULL ? 1 : 0),
                     SD_OK);
    SD_PL(ParDoPayload) pp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__PAR_DO_PAYLOAD__INIT;
    SD_PL(SideInput) si = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__SIDE_INPUT__INIT;
    SD_PL(ParDoPayload__SideInputsEntry)
    se = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__PAR_DO_PAYLOAD__SIDE_INPUTS_ENTRY__INIT;
    SD_PL(ParDoPayload__SideInputsEntry) *sep = &se;
    pp.do_fn = spec(b, SD_URN_DOFN_C, sd_buf_bytes(&pl));
    if (side_local != NULL) {
        si.access_pattern = spec(
            b, multimap ? SD_URN_SIDE_INPUT_MULTIMAP : SD_URN_SIDE_INPUT_ITERABLE, SD_BYTES_NULL);
        se.key = (char *)side_local;
        se.value = &si;
        pp.n_side_inputs = 1;
        pp.side_inputs = &sep;
    }
    SD_PL(FunctionSpec) *fs = packed_spec(b, SD_URN_TRANSFORM_PARDO, &pp.base);
    sd_buf_deinit(&pl);
    return fs;
}

static void common_coders(pbd *b)
{
    add_coder(b, "str", SD_URN_CODER_STRING_UTF8, NULL, NULL);
    add_coder(b, "int", SD_URN_CODER_VARINT, NULL, NULL);
    add_coder(b, "kv", SD_URN_CODER_KV, "str", "int");
    add_coder(b, "gw", SD_URN_CODER_GLOBAL_WINDOW, NULL, NULL);
    add_coder(b, "iw", SD_URN_CODER_INTERVAL_WINDOW, NULL, NULL);
    add_coder(b, "wv_str", SD_URN_CODER_WINDOWED_VALUE, "str", "gw");
    add_coder(b, "wv_kv", SD_URN_CODER_WINDOWED_VALUE, "kv", "gw");
    add_coder(b, "wv_int", SD_URN_CODER_WINDOWED_VALUE, "int", "gw");
    add_coder(b, "wv_int_iw", SD_URN_CODER_WINDOWED_VALUE, "int", "iw");
    add_coder(b, "lp_str", SD_URN_CODER_LENGTH_PREFIX, "str", NULL);
    add_coder(b, "wv_lp_str", SD_URN_CODER_WINDOWED_VALUE, "lp_str", "gw");
    add_ws(b, "global", "gw");
}

/* ---------------------------------------------------------------- fake I/O */

typedef struct capture {
    sd_buf out;
    int n_last;
    int n_state;
    const char *want_side_transform;
} capture;

static sd_status
cap_data(void *ctx, const char *transform_id, sd_bytes data, bool is_last, sd_err *err)
{
    capture *c = ctx;
    (void)transform_id;
    (void)err;
    c->n_last += is_last ? 1 : 0;
    return sd_buf_append_bytes(&c->out, data);
}

static sd_status cap_state_get(void *ctx, const pb_StateKey *key, sd_buf *out, sd_err *err)
{
    capture *c = ctx;
    c->n_state++;
    if (key->type_case !=
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ITERABLE_SIDE_INPUT ||
        strcmp(key->iterable_side_input->transform_id, c->want_side_transform) != 0) {
        return sd_err_set(err, SD_EINVAL, "unexpected state key");
    }
    sd_status st = sd_enc_int(out, 2);
    return st != SD_OK ? st : sd_enc_int(out, 5);
}

static sd__bundle_io cap_io(capture *c)
{
    sd__bundle_io io = { cap_state_get, NULL, NULL, cap_data, NULL, c, NULL };
    sd_buf_init(&c->out, 0);
    c->n_last = 0;
    c->n_state = 0;
    return io;
}

/* Append one windowed value in the global window at ts. */
static void put_wv(sd_buf *b, sd_time ts, const sd_window *w, sd_bytes elem)
{
    sd_pane pane = SD_PANE_NO_FIRING;
    sd_coder *wc = NULL;
    assert_int_equal(sd_coder_create(&wc, NULL,
                                     w->global ? SD_CODER_GLOBAL_WINDOW : SD_CODER_INTERVAL_WINDOW,
                                     NULL),
                     SD_OK);
    assert_int_equal(sd_wv_encode_header(b, wc, ts, w, 1, &pane, NULL), SD_OK);
    assert_int_equal(sd_buf_append_bytes(b, elem), SD_OK);
    sd_coder_destroy(wc);
}

static void put_str_wv(sd_buf *b, sd_time ts, const char *s)
{
    sd_buf e;
    sd_window g = sd_window_global();
    sd_buf_init(&e, 0);
    assert_int_equal(sd_enc_str(&e, s), SD_OK);
    put_wv(b, ts, &g, sd_buf_bytes(&e));
    sd_buf_deinit(&e);
}

static void put_kv_wv(sd_buf *b, sd_time ts, const char *k, int64_t v)
{
    sd_buf e;
    sd_window g = sd_window_global();
    sd_buf_init(&e, 0);
    assert_int_equal(sd_enc_str(&e, k), SD_OK);
    assert_int_equal(sd_enc_int(&e, v), SD_OK);
    put_wv(b, ts, &g, sd_buf_bytes(&e));
    sd_buf_deinit(&e);
}

/* ---------------------------------------------------------------- tests */

static void test_pardo_split_across_chunks(void **state)
{
    pbd b;
    (void)state;
    pbd_init(&b);
    common_coders(&b);
    add_pcoll(&b, "lines", "str", "global");
    add_pcoll(&b, "words", "kv", "global");
    add_transform(&b, "src", port(&b, SD_URN_RUNNER_SOURCE, "wv_str"), NULL, NULL, "out", "lines");
    add_transform(&b, "Split", pardo(&b, "p:split", NULL, false), "main", "lines", "out0", "words");
    add_transform(&b, "sink", port(&b, SD_URN_RUNNER_SINK, "wv_kv"), "in", "words", NULL, NULL);

    sd__proc *p = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd__proc_create(b.d, &p, &err), SD_OK);
    for (int round = 0; round < 2; round++) { /* the processor is reusable */
        capture cap;
        sd__bundle_io io = cap_io(&cap);
        sd_buf in, want;
        sd_buf_init(&in, 0);
        sd_buf_init(&want, 0);
        put_str_wv(&in, 42, "x yy");
        put_str_wv(&in, 43, "zzz");
        put_kv_wv(&want, 42, "x", 1);
        put_kv_wv(&want, 42, "yy", 1);
        put_kv_wv(&want, 43, "zzz", 1);
        assert_int_equal(sd__proc_start(p, "b1", &io, &err), SD_OK);
        /* Split the stream inside the first element. */
        size_t cut = 5;
        assert_int_equal(sd__proc_data(p, "src", sd_bytes_make(in.data, cut), false, &err), SD_OK);
        assert_false(sd__proc_inputs_done(p));
        assert_int_equal(
            sd__proc_data(p, "src", sd_bytes_make(in.data + cut, in.len - cut), true, &err), SD_OK);
        assert_true(sd__proc_inputs_done(p));
        sd__bundle_result res;
        sd__bundle_result_init(&res);
        assert_int_equal(sd__proc_finish(p, &res, &err), SD_OK);
        assert_int_equal(cap.n_last, 1);
        assert_int_equal(cap.out.len, want.len);
        assert_memory_equal(cap.out.data, want.data, want.len);
        sd__bundle_result_deinit(&res);
        sd_buf_deinit(&in);
        sd_buf_deinit(&want);
        sd_buf_deinit(&cap.out);
    }
    sd__proc_destroy(p);
    sd_arena_deinit(&b.a);
}

static SD_PL(FunctionSpec) * combine_spec(pbd *b, const char *urn, const char *fn)
{
    sd_buf pl;
    sd_buf_init(&pl, 0);
    assert_int_equal(sd__combinefn_payload_encode(&pl, fn, SD_BYTES_NULL), SD_OK);
    SD_PL(CombinePayload) cp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__COMBINE_PAYLOAD__INIT;
    cp.combine_fn = spec(b, SD_URN_COMBINEFN_C, sd_buf_bytes(&pl));
    cp.accumulator_coder_id = "int";
    SD_PL(FunctionSpec) *fs = packed_spec(b, urn, &cp.base);
    sd_buf_deinit(&pl);
    return fs;
}

static void test_precombine_sum(void **state)
{
    pbd b;
    (void)state;
    pbd_init(&b);
    common_coders(&b);
    add_pcoll(&b, "in", "kv", "global");
    add_pcoll(&b, "acc", "kv", "global");
    add_transform(&b, "src", port(&b, SD_URN_RUNNER_SOURCE, "wv_kv"), NULL, NULL, "out", "in");
    add_transform(&b, "Pre",
                  combine_spec(&b, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE, SD_COMBINE_SUM),
                  "in", "in", "out", "acc");
    add_transform(&b, "sink", port(&b, SD_URN_RUNNER_SINK, "wv_kv"), "in", "acc", NULL, NULL);
    sd__proc *p = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd__proc_create(b.d, &p, &err), SD_OK);
    capture cap;
    sd__bundle_io io = cap_io(&cap);
    sd_buf in, want;
    sd_buf_init(&in, 0);
    sd_buf_init(&want, 0);
    put_kv_wv(&in, 5, "b", 2);
    put_kv_wv(&in, 3, "a", 1);
    put_kv_wv(&in, 9, "a", 3);
    /* Emitted at the end in key order, at the earliest input timestamp. */
    put_kv_wv(&want, 3, "a", 4);
    put_kv_wv(&want, 5, "b", 2);
    assert_int_equal(sd__proc_start(p, "b1", &io, &err), SD_OK);
    assert_int_equal(sd__proc_data(p, "src", sd_buf_bytes(&in), true, &err), SD_OK);
    assert_int_equal(cap.out.len, 0);
    assert_int_equal(sd__proc_finish(p, NULL, &err), SD_OK);
    assert_int_equal(cap.out.len, want.len);
    assert_memory_equal(cap.out.data, want.data, want.len);
    sd_buf_deinit(&in);
    sd_buf_deinit(&want);
    sd_buf_deinit(&cap.out);
    sd__proc_destroy(p);
    sd_arena_deinit(&b.a);
}

static void test_window_into_fixed(void **state)
{
    pbd b;
    (void)state;
    pbd_init(&b);
    common_coders(&b);
    add_ws(&b, "fixed", "iw");
    add_pcoll(&b, "in", "int", "global");
    add_pcoll(&b, "win", "int", "fixed");
    SD_PL(FixedWindowsPayload)
    fp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__FIXED_WINDOWS_PAYLOAD__INIT;
    Google__Protobuf__Duration size = GOOGLE__PROTOBUF__DURATION__INIT;
    size.seconds = 10;
    fp.size = &size;
    SD_PL(WindowIntoPayload) wp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__WINDOW_INTO_PAYLOAD__INIT;
    wp.window_fn = packed_spec(&b, SD_URN_WINDOW_FN_FIXED, &fp.base);
    add_transform(&b, "src", port(&b, SD_URN_RUNNER_SOURCE, "wv_int"), NULL, NULL, "out", "in");
    add_transform(&b, "Win", packed_spec(&b, SD_URN_TRANSFORM_WINDOW_INTO, &wp.base), "in", "in",
                  "out", "win");
    add_transform(&b, "sink", port(&b, SD_URN_RUNNER_SINK, "wv_int_iw"), "in", "win", NULL, NULL);
    sd__proc *p = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd__proc_create(b.d, &p, &err), SD_OK);
    capture cap;
    sd__bundle_io io = cap_io(&cap);

    static const struct {
        sd_time ts;
        sd_time start;
    } rows[] = { { 15000, 10000 }, { 0, 0 }, { 9999, 0 }, { -1, -10000 } };

    sd_buf in, want, e;
    sd_buf_init(&in, 0);
    sd_buf_init(&want, 0);
    sd_buf_init(&e, 0);
    assert_int_equal(sd_enc_int(&e, 7), SD_OK);
    sd_window g = sd_window_global();
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_window w = sd_window_interval(rows[i].start, rows[i].start + 10000);
        put_wv(&in, rows[i].ts, &g, sd_buf_bytes(&e));
        put_wv(&want, rows[i].ts, &w, sd_buf_bytes(&e));
    }
    assert_int_equal(sd__proc_start(p, "b1", &io, &err), SD_OK);
    assert_int_equal(sd__proc_data(p, "src", sd_buf_bytes(&in), true, &err), SD_OK);
    assert_int_equal(sd__proc_finish(p, NULL, &err), SD_OK);
    assert_int_equal(cap.out.len, want.len);
    assert_memory_equal(cap.out.data, want.data, want.len);
    sd_buf_deinit(&in);
    sd_buf_deinit(&want);
    sd_buf_deinit(&e);
    sd_buf_deinit(&cap.out);
    sd__proc_destroy(p);
    sd_arena_deinit(&b.a);
}

static void test_side_input_and_lp_ports(void **state)
{
    pbd b;
    (void)state;
    pbd_init(&b);
    common_coders(&b);
    add_pcoll(&b, "in", "int", "global");
    add_pcoll(&b, "side", "int", "global");
    add_pcoll(&b, "out", "int", "global");
    add_transform(&b, "src", port(&b, SD_URN_RUNNER_SOURCE, "wv_int"), NULL, NULL, "out", "in");
    add_transform(&b, "Scale", pardo(&b, "p:side_sum", "side0", false), "main", "in", "out0",
                  "out");
    add_input_to(&b, "Scale", "side0", "side");
    add_transform(&b, "sink", port(&b, SD_URN_RUNNER_SINK, "wv_int"), "in", "out", NULL, NULL);
    sd__proc *p = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd__proc_create(b.d, &p, &err), SD_OK);
    capture cap;
    sd__bundle_io io = cap_io(&cap);
    cap.want_side_transform = "Scale";
    sd_buf in, want, e;
    sd_buf_init(&in, 0);
    sd_buf_init(&want, 0);
    sd_buf_init(&e, 0);
    sd_window g = sd_window_global();
    for (int64_t x = 1; x <= 3; x++) {
        sd_buf_reset(&e);
        assert_int_equal(sd_enc_int(&e, x), SD_OK);
        put_wv(&in, 0, &g, sd_buf_bytes(&e));
        sd_buf_reset(&e);
        assert_int_equal(sd_enc_int(&e, 7 * x), SD_OK);
        put_wv(&want, 0, &g, sd_buf_bytes(&e));
    }
    assert_int_equal(sd__proc_start(p, "b1", &io, &err), SD_OK);
    assert_int_equal(sd__proc_data(p, "src", sd_buf_bytes(&in), true, &err), SD_OK);
    assert_int_equal(sd__proc_finish(p, NULL, &err), SD_OK);
    assert_int_equal(cap.n_state, 1); /* cached for the bundle */
    assert_int_equal(cap.out.len, want.len);
    assert_memory_equal(cap.out.data, want.data, want.len);
    sd_buf_deinit(&in);
    sd_buf_deinit(&want);
    sd_buf_deinit(&e);
    sd_buf_deinit(&cap.out);
    sd__proc_destroy(p);
    sd_arena_deinit(&b.a);

    /* A length-prefixed port around a string PCollection is unwrapped and rewrapped. */
    pbd_init(&b);
    common_coders(&b);
    add_pcoll(&b, "lines", "str", "global");
    add_transform(&b, "src", port(&b, SD_URN_RUNNER_SOURCE, "wv_lp_str"), NULL, NULL, "out",
                  "lines");
    add_transform(&b, "sink", port(&b, SD_URN_RUNNER_SINK, "wv_lp_str"), "in", "lines", NULL, NULL);
    assert_int_equal(sd__proc_create(b.d, &p, &err), SD_OK);
    io = cap_io(&cap);
    sd_buf_init(&in, 0);
    sd_buf_init(&e, 0);
    assert_int_equal(sd_buf_put_varint(&e, 4), SD_OK);
    assert_int_equal(sd_enc_str(&e, "abc"), SD_OK);
    put_wv(&in, 0, &g, sd_buf_bytes(&e));
    assert_int_equal(sd__proc_start(p, "b2", &io, &err), SD_OK);
    assert_int_equal(sd__proc_data(p, "src", sd_buf_bytes(&in), true, &err), SD_OK);
    assert_int_equal(sd__proc_finish(p, NULL, &err), SD_OK);
    assert_int_equal(cap.out.len, in.len);
    assert_memory_equal(cap.out.data, in.data, in.len);
    sd_buf_deinit(&in);
    sd_buf_deinit(&e);
    sd_buf_deinit(&cap.out);
    sd__proc_destroy(p);
    sd_arena_deinit(&b.a);
}

static void test_errors(void **state)
{
    static const struct {
        const char *name;
        int what;
        const char *needle;
    } rows[] = {
        { "unknown urn", 0, "beam:transform:nope:v1" },
        { "unregistered dofn", 1, "p:unregistered" },
        { "failing dofn", 2, "boom 7" },
        { "garbage input", 3, "undecodable element" },
        { "trailing bytes", 4, "trailing bytes" },
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        pbd b;
        pbd_init(&b);
        common_coders(&b);
        add_pcoll(&b, "lines", "str", "global");
        add_pcoll(&b, "words", "kv", "global");
        add_transform(&b, "src", port(&b, SD_URN_RUNNER_SOURCE, "wv_str"), NULL, NULL, "out",
                      "lines");
        const char *fn = rows[i].what == 1   ? "p:unregistered"
                         : rows[i].what == 2 ? "p:fail"
                                             : "p:split";
        add_transform(&b, "T",
                      rows[i].what == 0 ? spec(&b, "beam:transform:nope:v1", SD_BYTES_NULL)
                                        : pardo(&b, fn, NULL, false),
                      "main", "lines", "out0", "words");
        add_transform(&b, "sink", port(&b, SD_URN_RUNNER_SINK, "wv_kv"), "in", "words", NULL, NULL);
        sd__proc *p = NULL;
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd__proc_create(b.d, &p, &err);
        if (rows[i].what <= 1) {
            assert_int_not_equal(st, SD_OK);
        } else {
            assert_int_equal(st, SD_OK);
            capture cap;
            sd__bundle_io io = cap_io(&cap);
            sd_buf in;
            sd_buf_init(&in, 0);
            put_str_wv(&in, 1, "a b");
            if (rows[i].what == 3) {
                in.data[8] = 0x00; /* window count 0x00 00 00 01 -> garbage */
                in.data[9] = 0x7f;
            }
            assert_int_equal(sd__proc_start(p, "b1", &io, &err), SD_OK);
            sd_bytes data = sd_buf_bytes(&in);
            if (rows[i].what == 4) {
                data.len -= 1;
            }
            st = sd__proc_data(p, "src", data, rows[i].what != 4, &err);
            if (st == SD_OK) {
                st = sd__proc_finish(p, NULL, &err);
            }
            assert_int_not_equal(st, SD_OK);
            sd_buf_deinit(&in);
            sd_buf_deinit(&cap.out);
            sd__proc_destroy(p);
        }
        if (strstr(sd_err_msg(&err), rows[i].needle) == NULL) {
            fprintf(stderr, "%s: %s\n", rows[i].name, sd_err_msg(&err));
        }
        assert_non_null(strstr(sd_err_msg(&err), rows[i].needle));
        sd_arena_deinit(&b.a);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pardo_split_across_chunks),
        cmocka_unit_test(test_precombine_sum),
        cmocka_unit_test(test_window_into_fixed),
        cmocka_unit_test(test_side_input_and_lp_ports),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup_group, NULL);
}
