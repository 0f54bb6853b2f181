/*
 * Sundial: the robustness test's fake SDK worker.
 *
 * Written directly on the transport: it opens Control, Data, State and Logging towards the
 * runner with its worker id, fetches its descriptors with GetProcessBundleDescriptor (to
 * learn each stage's role, data source and sinks), collects a bundle's input from the Data
 * stream, and at pardo1's bundle behaves or misbehaves as its row of the case table says
 * (act(), one case per misbehave value); pardo2's bundle always behaves, and records what it
 * saw grouped in F.grouped. Problems go to F.problem, never to a cmocka assert (see
 * test_robust.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/coder/coder.h"
#include "runner/fnapi/fnapi.h"
#include "runner/urns/urns.h"
#include "tests/integration/robust/robust.h"

/* ================================================================ the fake SDK worker */

static fbundle *bundle_get(fake *f, const char *iid)
{
    for (size_t i = 0; i < f->n_bundles; i++) {
        if (strcmp(f->bundles[i].iid, iid) == 0) {
            return &f->bundles[i];
        }
    }
    if (f->n_bundles == sizeof(f->bundles) / sizeof(f->bundles[0])) {
        problem("fake worker %s: too many bundles", f->id);
        return NULL;
    }
    fbundle *b = &f->bundles[f->n_bundles++];
    memset(b, 0, sizeof(*b));
    snprintf(b->iid, sizeof(b->iid), "%s", iid);
    sd_buf_init(&b->input, 0);
    return b;
}

static fdesc *desc_get(fake *f, const char *id)
{
    for (size_t i = 0; i < f->n_descs; i++) {
        if (strcmp(f->descs[i].id, id) == 0) {
            return &f->descs[i];
        }
    }
    if (f->n_descs == sizeof(f->descs) / sizeof(f->descs[0])) {
        problem("fake worker %s: too many descriptors", f->id);
        return NULL;
    }
    fdesc *d = &f->descs[f->n_descs++];
    memset(d, 0, sizeof(*d));
    snprintf(d->id, sizeof(d->id), "%s", id);
    return d;
}

static void send_on(sd_rpc_stream *s, const ProtobufCMessage *m)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    if (s == NULL || sd_fnapi_pb_pack(m, &b) != SD_OK ||
        sd_rpc_stream_send(s, sd_buf_bytes(&b)) != SD_OK) {
        /* Sending after the runner ended the stream is expected in the failure rows. */
        SD_DEBUG("robust", "fake worker: a send was refused");
    }
    sd_buf_deinit(&b);
}

static void send_raw(sd_rpc_stream *s, sd_bytes bytes)
{
    if (s == NULL || sd_rpc_stream_send(s, bytes) != SD_OK) {
        SD_DEBUG("robust", "fake worker: a raw send was refused");
    }
}

static void respond(fake *f, const char *iid, const char *error, int kind)
{
    pb_InstructionResponse resp =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_RESPONSE__INIT;
    pb_ProcessBundleResponse pb =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_RESPONSE__INIT;
    pb_ProgressResponse pr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_PROGRESS_RESPONSE__INIT;
    pb_ProcessBundleSplitResponse sr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_SPLIT_RESPONSE__INIT;
    SD_FN(RegisterResponse)
    rr = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__REGISTER_RESPONSE__INIT;
    resp.instruction_id = (char *)iid;
    if (error != NULL) {
        resp.error = (char *)error;
    } else if (kind == FNE(INSTRUCTION_RESPONSE__RESPONSE_REGISTER)) {
        resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_REGISTER);
        resp.register_ = &rr;
    } else if (kind == FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE)) {
        resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
        resp.process_bundle = &pb;
    } else if (kind == FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS)) {
        resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS);
        resp.process_bundle_progress = &pr;
    } else {
        resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT);
        resp.process_bundle_split = &sr;
    }
    send_on(f->ctl, &resp.base);
}

static void respond_with(fake *f, const char *iid, pb_ProcessBundleResponse *pb)
{
    pb_InstructionResponse resp =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_RESPONSE__INIT;
    resp.instruction_id = (char *)iid;
    resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    resp.process_bundle = pb;
    send_on(f->ctl, &resp.base);
}

/* Send one data chunk (and/or the is_last marker) for a transform of a bundle. */
static void send_data(fake *f, const char *iid, const char *tid, sd_bytes bytes, bool is_last)
{
    pb_Elements msg = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
    pb_Elements_Data d = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    pb_Elements_Data *ds[1] = { &d };
    d.instruction_id = (char *)iid;
    d.transform_id = (char *)tid;
    d.data.data = (uint8_t *)bytes.ptr;
    d.data.len = bytes.len;
    d.is_last = is_last;
    msg.n_data = 1;
    msg.data = ds;
    send_on(f->data, &msg.base);
}

/* A windowed value in the global window with a KV<bytes, bytes> (or a bytes) element. */
static void put_wv(sd_buf *out, const char *key, const char *value)
{
    sd_coder *gw = NULL;
    sd_err err = { 0 };
    sd_window w = sd_window_global();
    sd_pane pane = SD_PANE_NO_FIRING;
    if (sd_coder_create(&gw, &err, SD_CODER_GLOBAL_WINDOW, NULL) != SD_OK ||
        sd_wv_encode_header(out, gw, 1000, &w, 1, &pane, NULL) != SD_OK ||
        (key != NULL && sd_buf_put_lp(out, sd_bytes_str(key)) != SD_OK) ||
        sd_buf_put_lp(out, sd_bytes_str(value)) != SD_OK) {
        problem("encoding a windowed value failed: %s", sd_err_msg(&err));
    }
    sd_coder_destroy(gw);
}

/*
 * Decode pardo2's input, windowed KV<bytes, iterable<bytes>> values, into "k=[v,v] k=[v]"
 * (keys and values in arrival order).
 */
static void describe_grouped(sd_bytes in, char *out, size_t cap)
{
    sd_coder *b = NULL, *it = NULL, *kv = NULL, *gw = NULL, *wv = NULL;
    sd_err err = { 0 };
    sd_reader r = sd_reader_make(in);
    sd_wv_header h;
    out[0] = '\0';
    sd_wv_header_init(&h);
    if (sd_coder_create(&b, &err, SD_CODER_BYTES, NULL) != SD_OK ||
        sd_coder_create(&it, &err, SD_CODER_ITERABLE, b, NULL) != SD_OK ||
        sd_coder_create(&kv, &err, SD_CODER_KV, b, it, NULL) != SD_OK ||
        sd_coder_create(&gw, &err, SD_CODER_GLOBAL_WINDOW, NULL) != SD_OK ||
        sd_coder_create(&wv, &err, SD_CODER_WINDOWED_VALUE, kv, gw, NULL) != SD_OK) {
        problem("building coders failed: %s", sd_err_msg(&err));
        goto done;
    }
    while (!sd_reader_done(&r)) {
        sd_bytes elem, key, v;
        uint32_t count;
        if (sd_wv_decode(wv, &r, &h, &elem, &err) != SD_OK) {
            problem("pardo2's input is not windowed KV<bytes, iterable<bytes>>: %s",
                    sd_err_msg(&err));
            goto done;
        }
        sd_reader er = sd_reader_make(elem);
        if (sd_reader_lp(&er, &key) != SD_OK || sd_reader_be32(&er, &count) != SD_OK) {
            problem("pardo2's input element is malformed");
            goto done;
        }
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%.*s=[", n > 0 ? " " : "", (int)key.len,
                 (const char *)key.ptr);
        for (uint32_t i = 0; i < count; i++) {
            if (sd_reader_lp(&er, &v) != SD_OK) {
                problem("pardo2's input iterable is malformed");
                goto done;
            }
            n = strlen(out);
            snprintf(out + n, cap - n, "%s%.*s", i > 0 ? "," : "", (int)v.len, (const char *)v.ptr);
        }
        n = strlen(out);
        snprintf(out + n, cap - n, "]");
    }
done:
    sd_wv_header_deinit(&h);
    sd_coder_destroy(wv);
    sd_coder_destroy(gw);
    sd_coder_destroy(kv);
    sd_coder_destroy(it);
    sd_coder_destroy(b);
}

static void good_outputs(fake *f, const fbundle *b, const fdesc *d)
{
    sd_buf out;
    sd_buf_init(&out, 0);
    if (d->role == 1) {
        put_wv(&out, "k1", "a");
        put_wv(&out, "k2", "b");
        put_wv(&out, "k1", "c");
    } else {
        put_wv(&out, NULL, "done");
    }
    for (size_t i = 0; i < d->n_sinks; i++) {
        send_data(f, b->iid, d->sinks[i], sd_buf_bytes(&out), false);
        send_data(f, b->iid, d->sinks[i], SD_BYTES_NULL, true);
    }
    sd_buf_deinit(&out);
}

/* Garbage the misbehaving rows send where the runner expects encoded data. */
static const uint8_t garbage[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                   0xff, 0x7f, 0x00, 0x00, 0x00, 0x05, 0x0f, 0x09 };
/* Bytes that are no protobuf message: field 1, length 127, but only two bytes follow. */
static const uint8_t not_proto[] = { 0x0a, 0x7f, 0x01, 0x02 };

/* MB_GARBAGE_LAST: sink data that is no windowed KV, the response first, the bad data last. */
static void mb_garbage_last(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    /* One Elements message: the bad output with its is_last, then an entry for another
     * instruction, so the runner goes on reading the message after the job failed. */
    pb_Elements msg = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
    pb_Elements_Data d0 = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    pb_Elements_Data d1 = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    pb_Elements_Data *ds[2] = { &d0, &d1 };
    d0.instruction_id = b->iid;
    d0.transform_id = (char *)d->sinks[0];
    d0.data.data = (uint8_t *)garbage;
    d0.data.len = sizeof(garbage);
    d0.is_last = true;
    d1.instruction_id = "robust-another-instruction";
    d1.transform_id = (char *)d->sinks[0];
    d1.is_last = true;
    msg.n_data = 2;
    msg.data = ds;
    respond(f, b->iid, NULL, pb_kind);
    send_on(f->data, &msg.base);
}

/* MB_TRUNCATED_ELEMENT: One good element, then half of another. */
static void mb_truncated_element(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    sd_buf out;
    sd_buf_init(&out, 0);
    put_wv(&out, "k1", "a");
    put_wv(&out, "k2", "a-value-that-will-be-cut");
    out.len -= 7;
    for (size_t i = 0; i < d->n_sinks; i++) {
        send_data(f, b->iid, d->sinks[i], sd_buf_bytes(&out), true);
    }
    sd_buf_deinit(&out);
    respond(f, b->iid, NULL, pb_kind);
}

/* MB_UNKNOWN_INSTRUCTION: Data for an instruction nobody sent, then a good bundle. */
static void mb_unknown_instruction(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    sd_buf out;
    sd_buf_init(&out, 0);
    put_wv(&out, "k9", "z");
    send_data(f, "robust-no-such-instruction", d->sinks[0], sd_buf_bytes(&out), true);
    sd_buf_deinit(&out);
    good_outputs(f, b, d);
    respond(f, b->iid, NULL, pb_kind);
}

/* MB_UNKNOWN_TRANSFORM: Data for the right bundle but a transform that is no sink. */
static void mb_unknown_transform(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    sd_buf out;
    sd_buf_init(&out, 0);
    put_wv(&out, "k1", "a");
    send_data(f, b->iid, "robust-no-such-transform", sd_buf_bytes(&out), true);
    sd_buf_deinit(&out);
    good_outputs(f, b, d);
    respond(f, b->iid, NULL, pb_kind);
}

/* MB_UNKNOWN_TIMER: Timers for a family the stage does not have. */
static void mb_unknown_timer(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    pb_Elements msg = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
    pb_Elements_Timers t = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__TIMERS__INIT;
    pb_Elements_Timers *ts[1] = { &t };
    t.instruction_id = b->iid;
    t.transform_id = "pardo1";
    t.timer_family_id = "robust-no-such-family";
    t.timers.data = (uint8_t *)garbage;
    t.timers.len = sizeof(garbage);
    msg.n_timers = 1;
    msg.timers = ts;
    send_on(f->data, &msg.base);
    good_outputs(f, b, d);
    respond(f, b->iid, NULL, pb_kind);
}

/* MB_STATE_UNKNOWN: A state request naming no bundle, then a good bundle. */
static void mb_state_unknown(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    pb_StateRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__INIT;
    pb_StateKey key = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
    pb_BagUserState bag =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
    pb_StateGetRequest get = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_GET_REQUEST__INIT;
    bag.transform_id = "pardo1";
    bag.user_state_id = "robust-state";
    key.type_case = FNE(STATE_KEY__TYPE_BAG_USER_STATE);
    key.bag_user_state = &bag;
    req.id = "robust-state-1";
    req.instruction_id = "robust-no-such-bundle";
    req.state_key = &key;
    req.request_case = FNE(STATE_REQUEST__REQUEST_GET);
    req.get = &get;
    send_on(f->state, &req.base);
    good_outputs(f, b, d);
    respond(f, b->iid, NULL, pb_kind);
}

/* MB_STATE_GARBAGE: State requests with garbage keys for a stateless stage. */
static void mb_state_garbage(fake *f, fbundle *b, const fdesc *d)
{
    /* Append, get, clear and a side-input read on a bundle that has no state at all,
     * with keys and windows that decode as nothing. */
    static const int kinds[4] = { FNE(STATE_REQUEST__REQUEST_APPEND),
                                  FNE(STATE_REQUEST__REQUEST_GET),
                                  FNE(STATE_REQUEST__REQUEST_CLEAR),
                                  FNE(STATE_REQUEST__REQUEST_GET) };
    for (int k = 0; k < 4; k++) {
        pb_StateRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__INIT;
        pb_StateKey key = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
        pb_BagUserState bag =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
        pb_IterableSideInput side =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__ITERABLE_SIDE_INPUT__INIT;
        pb_StateGetRequest get =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_GET_REQUEST__INIT;
        pb_StateAppendRequest app =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_APPEND_REQUEST__INIT;
        pb_StateClearRequest clr =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_CLEAR_REQUEST__INIT;
        char id[32];
        snprintf(id, sizeof(id), "robust-garbage-%d", k);
        if (k < 3) {
            bag.transform_id = "pardo1";
            bag.user_state_id = "robust-no-such-state";
            bag.key.data = (uint8_t *)garbage;
            bag.key.len = sizeof(garbage);
            bag.window.data = (uint8_t *)garbage;
            bag.window.len = 3;
            key.type_case = FNE(STATE_KEY__TYPE_BAG_USER_STATE);
            key.bag_user_state = &bag;
        } else {
            side.transform_id = "pardo1";
            side.side_input_id = "robust-no-such-side-input";
            side.window.data = (uint8_t *)garbage;
            side.window.len = sizeof(garbage);
            key.type_case = FNE(STATE_KEY__TYPE_ITERABLE_SIDE_INPUT);
            key.iterable_side_input = &side;
        }
        req.id = id;
        req.instruction_id = b->iid;
        req.state_key = &key;
        req.request_case = kinds[k];
        if (k == 0) {
            app.data.data = (uint8_t *)garbage;
            app.data.len = sizeof(garbage);
            req.append = &app;
        } else if (k == 2) {
            req.clear = &clr;
        } else {
            req.get = &get;
        }
        send_on(f->state, &req.base);
    }
    /* Like a real SDK, the bundle goes on only once its state reads are answered. */
    f->waiting = b;
    f->waiting_desc = d;
    f->waiting_for = 4;
}

/* MB_NO_IS_LAST: Answers ProcessBundle but never ends its output stream. */
static void mb_no_is_last(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    sd_buf out;
    sd_buf_init(&out, 0);
    put_wv(&out, "k1", "a");
    for (size_t i = 0; i < d->n_sinks; i++) {
        send_data(f, b->iid, d->sinks[i], sd_buf_bytes(&out), false);
    }
    sd_buf_deinit(&out);
    respond(f, b->iid, NULL, pb_kind);
}

/* MB_BAD_RESIDUAL: A residual root whose element is not an input element. */
static void mb_bad_residual(fake *f, fbundle *b, const fdesc *d)
{
    pb_ProcessBundleResponse pb =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_RESPONSE__INIT;
    pb_DelayedBundleApplication dba =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__DELAYED_BUNDLE_APPLICATION__INIT;
    pb_BundleApplication ba = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__BUNDLE_APPLICATION__INIT;
    pb_DelayedBundleApplication *roots[1] = { &dba };
    ba.transform_id = "pardo1";
    ba.input_id = "in";
    ba.element.data = (uint8_t *)garbage;
    ba.element.len = sizeof(garbage);
    dba.application = &ba;
    pb.n_residual_roots = 1;
    pb.residual_roots = roots;
    good_outputs(f, b, d);
    respond_with(f, b->iid, &pb);
}

/* MB_ODD_METRICS: Monitoring infos with garbage payloads and empty URNs. */
static void mb_odd_metrics(fake *f, fbundle *b, const fdesc *d)
{
    pb_ProcessBundleResponse pb =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_RESPONSE__INIT;
    pb_MonitoringInfo m0 = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__INIT;
    pb_MonitoringInfo m1 = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__INIT;
    pb_MonitoringInfo *ms[2] = { &m0, &m1 };
    m0.urn = "beam:metric:user:sum_int64:v1";
    m0.type = "beam:metrics:sum_int64:v1";
    m0.payload.data = (uint8_t *)garbage;
    m0.payload.len = sizeof(garbage);
    pb.n_monitoring_infos = 2;
    pb.monitoring_infos = ms;
    good_outputs(f, b, d);
    respond_with(f, b->iid, &pb);
}

/* MB_LOGS: Garbage on the Logging stream, then a real log entry. */
static void mb_logs(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    pb_LogEntry_List list = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__LOG_ENTRY__LIST__INIT;
    pb_LogEntry e = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__LOG_ENTRY__INIT;
    pb_LogEntry *es[1] = { &e };
    e.severity = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__LOG_ENTRY__SEVERITY__ENUM__WARN;
    e.message = "robust: a log line from pardo1";
    e.transform_id = "pardo1";
    e.instruction_id = b->iid;
    list.n_log_entries = 1;
    list.log_entries = es;
    send_raw(f->logging, sd_bytes_make(not_proto, sizeof(not_proto)));
    send_on(f->logging, &list.base);
    good_outputs(f, b, d);
    respond(f, b->iid, NULL, pb_kind);
}

/* A bundle has its request, its whole input and its descriptor: act on the case's row. */
static void act(fake *f, fbundle *b, const fdesc *d)
{
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    misbehave mb = d->role == 1 ? f->mode->mb : MB_GOOD;

    if (d->role == 2) {
        describe_grouped(sd_buf_bytes(&b->input), F.grouped, sizeof(F.grouped));
    } else {
        F.acted_a = true;
    }
    switch (mb) {
    case MB_GOOD:
    case MB_REGISTERED:
    case MB_POOL_REFUSES:
    case MB_POOL_FAILS:
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        break;
    case MB_GARBAGE_ELEMENT:
        for (size_t i = 0; i < d->n_sinks; i++) {
            send_data(f, b->iid, d->sinks[i], sd_bytes_make(garbage, sizeof(garbage)), true);
        }
        respond(f, b->iid, NULL, pb_kind);
        break;
    case MB_GARBAGE_LAST:
        mb_garbage_last(f, b, d);
        break;
    case MB_TRUNCATED_ELEMENT:
        mb_truncated_element(f, b, d);
        break;
    case MB_HALF_CLOSE_CONTROL:
        sd_rpc_stream_half_close(f->ctl);
        break;
    case MB_CANCEL_CONTROL:
        sd_rpc_stream_cancel(f->ctl);
        break;
    case MB_DISCONNECT:
        sd_rpc_channel_destroy(f->ch);
        f->ch = NULL;
        break;
    case MB_ERROR_RESPONSE:
        respond(f, b->iid, "robust: the DoFn exploded on element 7 (ZeroDivisionError)", 0);
        break;
    case MB_MALFORMED_DATA:
        send_raw(f->data, sd_bytes_make(not_proto, sizeof(not_proto)));
        break;
    case MB_MALFORMED_CONTROL:
        send_raw(f->ctl, sd_bytes_make(not_proto, sizeof(not_proto)));
        break;
    case MB_MALFORMED_STATE:
        send_raw(f->state, sd_bytes_make(not_proto, sizeof(not_proto)));
        break;
    case MB_UNKNOWN_INSTRUCTION:
        mb_unknown_instruction(f, b, d);
        break;
    case MB_UNKNOWN_TRANSFORM:
        mb_unknown_transform(f, b, d);
        break;
    case MB_UNKNOWN_TIMER:
        mb_unknown_timer(f, b, d);
        break;
    case MB_WRONG_RESPONSE_KIND:
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS));
        break;
    case MB_STATE_UNKNOWN:
        mb_state_unknown(f, b, d);
        break;
    case MB_STATE_GARBAGE:
        mb_state_garbage(f, b, d);
        break;
    case MB_DUPLICATE_RESPONSE:
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        respond(f, b->iid, NULL, pb_kind);
        break;
    case MB_NO_IS_LAST:
        mb_no_is_last(f, b, d);
        break;
    case MB_BAD_RESIDUAL:
        mb_bad_residual(f, b, d);
        break;
    case MB_ODD_METRICS:
        mb_odd_metrics(f, b, d);
        break;
    case MB_LOGS:
        mb_logs(f, b, d);
        break;
    case MB_STALL:
    case MB_HANG:
        break;
    }
}

static void maybe_act(fake *f, fbundle *b)
{
    if (b == NULL || b->acted || !b->requested || !b->input_done) {
        return;
    }
    fdesc *d = desc_get(f, b->desc);
    if (d == NULL || d->status != 2) {
        return;
    }
    b->acted = true;
    act(f, b, d);
}

typedef struct desc_call {
    fake *f;
    char id[160];
} desc_call;

/* Learn a descriptor's role, its data source and its sinks; run the bundles waiting for it. */
static void learn_descriptor(fake *f, fdesc *d, const pb_Descriptor *pbd)
{
    for (size_t i = 0; i < pbd->n_transforms; i++) {
        const char *tid = pbd->transforms[i]->key;
        const SD_PL(PTransform) *t = pbd->transforms[i]->value;
        const char *urn = t->spec != NULL ? t->spec->urn : "";
        if (strcmp(tid, "pardo1") == 0) {
            d->role = 1;
            /* Descriptor ids are "STAGE.JOB.TOKEN"; messages name the stage. */
            snprintf(F.desc_a, sizeof(F.desc_a), "%s", d->id);
            snprintf(F.stage_a, sizeof(F.stage_a), "%.*s", (int)strcspn(d->id, "."), d->id);
        } else if (strcmp(tid, "pardo2") == 0) {
            d->role = 2;
        } else if (strcmp(urn, SD_URN_RUNNER_SOURCE) == 0) {
            snprintf(d->source, sizeof(d->source), "%s", tid);
        } else if (strcmp(urn, SD_URN_RUNNER_SINK) == 0 && d->n_sinks < 4) {
            snprintf(d->sinks[d->n_sinks++], sizeof(d->sinks[0]), "%s", tid);
        }
    }
    if (d->role == 0 || d->source[0] == '\0' || (d->role == 1 && d->n_sinks != 1)) {
        d->status = 3;
        problem("descriptor %s: unexpected shape (role %d, source \"%s\", %zu sinks)", d->id,
                d->role, d->source, d->n_sinks);
        return;
    }
    d->status = 2;
    for (size_t i = 0; i < f->n_bundles; i++) {
        maybe_act(f, &f->bundles[i]);
    }
}

static void on_descriptor(void *ctx, sd_rpc_code code, const char *message, sd_bytes resp)
{
    desc_call *dc = ctx;
    fake *f = dc->f;
    fdesc *d = desc_get(f, dc->id);
    sd_free(dc);
    if (d == NULL) {
        return;
    }
    if (code != SD_RPC_OK) {
        d->status = 3;
        problem("GetProcessBundleDescriptor %s: %s", d->id, message);
        return;
    }
    pb_Descriptor *pbd = (void *)protobuf_c_message_unpack(
        &PBF(process_bundle_descriptor__descriptor), NULL, resp.len, resp.ptr);
    if (pbd == NULL) {
        d->status = 3;
        problem("descriptor %s does not parse", d->id);
        return;
    }
    learn_descriptor(f, d, pbd);
    protobuf_c_message_free_unpacked(&pbd->base, NULL);
}

/* A RegisterRequest: each descriptor, under the id it carries (the one bundles name). */
static void on_register(fake *f, const pb_InstructionRequest *req)
{
    const Org__Apache__Beam__Model__FnExecution__V1__RegisterRequest *reg = req->register_;
    for (size_t i = 0; reg != NULL && i < reg->n_process_bundle_descriptor; i++) {
        const pb_Descriptor *pbd = reg->process_bundle_descriptor[i];
        fdesc *d = pbd->id != NULL ? desc_get(f, pbd->id) : NULL;
        if (d == NULL) {
            problem("a registered descriptor without an id");
            continue;
        }
        F.registered++;
        learn_descriptor(f, d, pbd);
    }
    respond(f, req->instruction_id, NULL, FNE(INSTRUCTION_RESPONSE__RESPONSE_REGISTER));
}

static void fetch_descriptor(fake *f, fdesc *d)
{
    pb_GetProcessBundleDescriptorRequest req =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__GET_PROCESS_BUNDLE_DESCRIPTOR_REQUEST__INIT;
    sd_rpc_metadata md = { "worker_id", f->id };
    sd_buf b;
    sd_err err = { 0 };
    desc_call *dc = sd_calloc(1, sizeof(*dc));
    if (dc == NULL || f->ch == NULL) {
        sd_free(dc);
        problem("cannot fetch descriptor %s", d->id);
        return;
    }
    dc->f = f;
    F.fetches++;
    snprintf(dc->id, sizeof(dc->id), "%s", d->id);
    req.process_bundle_descriptor_id = d->id;
    sd_buf_init(&b, 0);
    if (sd_fnapi_pb_pack(&req.base, &b) != SD_OK ||
        sd_rpc_unary(f->ch, SD_PATH_GET_PBD, sd_buf_bytes(&b), &md, 1, 10000, on_descriptor, dc,
                     &err) != SD_OK) {
        sd_free(dc);
        problem("GetProcessBundleDescriptor could not be sent: %s", sd_err_msg(&err));
    } else {
        d->status = 1;
    }
    sd_buf_deinit(&b);
}

static void on_ctl_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fake *f = ctx;
    (void)s;
    pb_InstructionRequest *req = (void *)protobuf_c_message_unpack(
        &PBF(instruction_request__descriptor), NULL, msg.len, msg.ptr);
    if (req == NULL) {
        problem("the runner sent a malformed InstructionRequest");
        return;
    }
    switch (req->request_case) {
    case FNE(INSTRUCTION_REQUEST__REQUEST_REGISTER):
        on_register(f, req);
        break;
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE): {
        fbundle *b = bundle_get(f, req->instruction_id);
        if (b != NULL && req->process_bundle != NULL) {
            b->requested = true;
            snprintf(b->desc, sizeof(b->desc), "%s",
                     req->process_bundle->process_bundle_descriptor_id);
            fdesc *d = desc_get(f, b->desc);
            if (d != NULL && d->status == 0) {
                fetch_descriptor(f, d);
            }
            maybe_act(f, b);
        }
        break;
    }
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_PROGRESS):
        if (f->mode->mb != MB_HANG) {
            respond(f, req->instruction_id, NULL,
                    FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS));
        }
        break;
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_SPLIT):
        if (f->mode->mb != MB_HANG) {
            respond(f, req->instruction_id, NULL,
                    FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT));
        }
        break;
    default:
        respond(f, req->instruction_id, "robust fake worker: unsupported instruction", 0);
        break;
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void on_data_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fake *f = ctx;
    (void)s;
    pb_Elements *el =
        (void *)protobuf_c_message_unpack(&PBF(elements__descriptor), NULL, msg.len, msg.ptr);
    if (el == NULL) {
        problem("the runner sent a malformed Elements message");
        return;
    }
    for (size_t i = 0; i < el->n_data; i++) {
        const pb_Elements_Data *d = el->data[i];
        fbundle *b = bundle_get(f, d->instruction_id);
        if (b == NULL) {
            break;
        }
        if (sd_buf_append(&b->input, d->data.data, d->data.len) != SD_OK) {
            problem("out of memory buffering input");
        }
        if (d->is_last) {
            b->input_done = true;
        }
    }
    protobuf_c_message_free_unpacked(&el->base, NULL);
    for (size_t i = 0; i < f->n_bundles; i++) {
        maybe_act(f, &f->bundles[i]);
    }
}

/* State answers; a bundle that waits for them (MB_STATE_GARBAGE) finishes from here. */
static void on_state_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fake *f = ctx;
    (void)s;
    pb_StateResponse *r =
        (void *)protobuf_c_message_unpack(&PBF(state_response__descriptor), NULL, msg.len, msg.ptr);
    if (r == NULL) {
        problem("the runner sent a malformed StateResponse");
        return;
    }
    if (r->error != NULL && r->error[0] != '\0') {
        snprintf(F.state_error, sizeof(F.state_error), "%s: %s", r->id, r->error);
        F.state_errors++;
        printf("      state error %s\n", F.state_error);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    if (f->waiting != NULL && --f->waiting_for == 0) {
        fbundle *b = f->waiting;
        f->waiting = NULL;
        good_outputs(f, b, f->waiting_desc);
        respond(f, b->iid, NULL, FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE));
    }
}

static void on_fake_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    fake *f = ctx;
    (void)code;
    (void)message;
    if (s == f->ctl) {
        f->ctl = NULL;
    } else if (s == f->data) {
        f->data = NULL;
    } else if (s == f->state) {
        f->state = NULL;
    } else if (s == f->logging) {
        f->logging = NULL;
    }
    if (--f->open == 0) {
        f->closed_all = true;
    }
}

void fake_start(const char *worker_id, const char *control_url)
{
    sd_err err = { 0 };
    fake *f = sd_calloc(1, sizeof(*f));
    if (f == NULL) {
        problem("out of memory starting a fake worker");
        return;
    }
    snprintf(f->id, sizeof(f->id), "%s", worker_id);
    f->mode = F.mode;
    f->next = F.fakes;
    F.fakes = f;
    if (sd_rpc_channel_create(F.rpc, control_url, &f->ch, &err) != SD_OK) {
        problem("fake worker: channel to %s: %s", control_url, sd_err_msg(&err));
        f->closed_all = true;
        return;
    }
    sd_rpc_metadata md = { "worker_id", f->id };
    sd_rpc_stream_handler hc = { on_ctl_message, on_fake_close, f };
    sd_rpc_stream_handler hd = { on_data_message, on_fake_close, f };
    sd_rpc_stream_handler hs = { on_state_message, on_fake_close, f };
    sd_rpc_stream_handler hl = { NULL, on_fake_close, f };
    if (sd_rpc_stream_open(f->ch, SD_PATH_CONTROL, &md, 1, &hc, &f->ctl, &err) != SD_OK) {
        problem("fake worker: Control: %s", sd_err_msg(&err));
        f->closed_all = f->open == 0;
        return;
    }
    f->open++;
    if (sd_rpc_stream_open(f->ch, SD_PATH_DATA, &md, 1, &hd, &f->data, &err) != SD_OK) {
        problem("fake worker: Data: %s", sd_err_msg(&err));
        return;
    }
    f->open++;
    if (sd_rpc_stream_open(f->ch, SD_PATH_STATE, &md, 1, &hs, &f->state, &err) != SD_OK) {
        problem("fake worker: State: %s", sd_err_msg(&err));
        return;
    }
    f->open++;
    if (sd_rpc_stream_open(f->ch, SD_PATH_LOGGING, &md, 1, &hl, &f->logging, &err) != SD_OK) {
        problem("fake worker: Logging: %s", sd_err_msg(&err));
        return;
    }
    f->open++;
}

bool fakes_closed(void)
{
    for (fake *f = F.fakes; f != NULL; f = f->next) {
        if (!f->closed_all) {
            return false;
        }
    }
    return true;
}

void fakes_free(void)
{
    while (F.fakes != NULL) {
        fake *f = F.fakes;
        F.fakes = f->next;
        if (f->ch != NULL) {
            sd_rpc_channel_destroy(f->ch);
        }
        for (size_t i = 0; i < f->n_bundles; i++) {
            sd_buf_deinit(&f->bundles[i].input);
        }
        sd_free(f);
    }
}
