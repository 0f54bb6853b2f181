/*
 * Sundial TestStream: reading and writing TestStreamPayload (teststream/ts_pb.h).
 *
 * What it is. The translation between Beam's TestStreamPayload and the event model
 * (teststream/ts.h), in both directions, and the only TestStream code that sees protobuf-c.
 * The runner's executor decodes (runner/exec/xplan.c hands the engine a driver full of
 * streams), the C SDK's builder encodes (sdk-harness/src/teststream.c); both therefore agree
 * on every field by construction, and a script the SDK writes reads back as the same script.
 *
 * Tags. Beam names an event's output by its tag. Writers here always name it, even for a
 * single-output stream, and write an "every output" watermark as one event per output:
 * runners differ in how they read an empty tag, and explicit ones mean the same everywhere.
 * Readers accept what other SDKs write: an element event without a tag goes to the only
 * output of a one-output stream, a watermark event without a tag moves every output.
 *
 * Elements. The payload carries each element in the outer context of the payload's coder.
 * What a stream stores is its user's choice (the runner: nested encodings of the wire coder),
 * so the decoder takes a recode function instead of knowing coders. Timestamps are clamped
 * to Beam's range, as everywhere on the runner's way in.
 */
#include "teststream/ts_pb.h"

#include <string.h>

#include "org/apache/beam/model/interactive/v1/beam_interactive_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/beam_runner_api.pb-c.h"
#include "runner/base/alloc.h"

typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload pb_payload;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload__Event pb_event;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload__Event__AddElements pb_add;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload__Event__AdvanceWatermark pb_wm;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload__Event__AdvanceProcessingTime
    pb_pt;
typedef Org__Apache__Beam__Model__Pipeline__V1__TestStreamPayload__TimestampedElement pb_elem;

#define EVENT_CASE(x) ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__EVENT__EVENT_##x

/* ================================================================ decoding */

/* The output an element event's tag names (see "Tags"). false when none. */
static bool element_output(const sd_ts_stream *s, const char *tag, size_t *out)
{
    if (sd_ts_stream_find_output(s, tag == NULL ? "" : tag, out)) {
        return true;
    }
    if (sd_ts_stream_n_outputs(s) == 1 && (tag == NULL || tag[0] == '\0')) {
        *out = 0;
        return true;
    }
    return false;
}

static sd_status decode_elements(sd_ts_stream *s,
                                 size_t i,
                                 const pb_add *add,
                                 sd_ts_recode_fn recode,
                                 void *ctx,
                                 sd_err *err)
{
    size_t output;
    if (!element_output(s, add->tag, &output)) {
        return sd_err_set(err, SD_EINVAL, "TestStream %s: event %zu names unknown tag \"%s\"",
                          sd_ts_stream_name(s), i, add->tag);
    }
    size_t n = add->n_elements;
    sd_buf all;
    sd_buf_init(&all, 0);
    sd_bytes *elems = sd_calloc(n + 1, sizeof(*elems));
    sd_time *ts = sd_calloc(n + 1, sizeof(*ts));
    size_t *offs = sd_calloc(n + 1, sizeof(*offs));
    sd_status rc = SD_OK;
    if (elems == NULL || ts == NULL || offs == NULL) {
        rc = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t k = 0; rc == SD_OK && k < n; k++) {
        const pb_elem *te = add->elements[k];
        sd_bytes outer = sd_bytes_make(te->encoded_element.data, te->encoded_element.len);
        offs[k] = all.len;
        rc = recode != NULL ? recode(ctx, outer, &all, err) : sd_buf_append_bytes(&all, outer);
        ts[k] = sd_time_clamp(te->timestamp);
    }
    if (rc == SD_OK) {
        offs[n] = all.len;
        for (size_t k = 0; k < n; k++) {
            /* Every element may encode to nothing (a window coder): then all.data is NULL,
             * and NULL + 0 is undefined. */
            elems[k] =
                sd_bytes_make(all.data != NULL ? all.data + offs[k] : NULL, offs[k + 1] - offs[k]);
        }
        rc = sd_ts_stream_add_elements(s, output, elems, ts, n, err);
    }
    sd_buf_deinit(&all);
    sd_free(elems);
    sd_free(ts);
    sd_free(offs);
    return rc;
}

static sd_status decode_watermark(sd_ts_stream *s, const pb_wm *wm, sd_err *err)
{
    sd_time t = sd_time_clamp(wm->new_watermark);
    size_t output;
    sd_status rc = SD_OK;
    if (wm->tag == NULL || wm->tag[0] == '\0') {
        for (size_t k = 0; rc == SD_OK && k < sd_ts_stream_n_outputs(s); k++) {
            rc = sd_ts_stream_advance_watermark(s, k, t, err);
        }
        return rc;
    }
    if (!sd_ts_stream_find_output(s, wm->tag, &output)) {
        return sd_err_set(err, SD_EINVAL, "TestStream %s: watermark event names unknown tag \"%s\"",
                          sd_ts_stream_name(s), wm->tag);
    }
    return sd_ts_stream_advance_watermark(s, output, t, err);
}

/* Append event ev (number i, for errors) to s. */
static sd_status decode_event(sd_ts_stream *s,
                              size_t i,
                              const pb_event *ev,
                              sd_ts_recode_fn recode,
                              void *recode_ctx,
                              sd_err *err)
{
    switch (ev->event_case) {
    case EVENT_CASE(ELEMENT_EVENT):
        return decode_elements(s, i, ev->element_event, recode, recode_ctx, err);
    case EVENT_CASE(WATERMARK_EVENT):
        return decode_watermark(s, ev->watermark_event, err);
    case EVENT_CASE(PROCESSING_TIME_EVENT):
        return sd_ts_stream_advance_clock(s, ev->processing_time_event->advance_duration, err);
    default:
        return sd_err_set(err, SD_EINVAL, "TestStream %s: event %zu has no kind",
                          sd_ts_stream_name(s), i);
    }
}

sd_status sd_ts_decode(sd_bytes payload,
                       const char *name,
                       const char *const *tags,
                       size_t n_tags,
                       sd_ts_recode_fn recode,
                       void *recode_ctx,
                       sd_ts_stream **out,
                       sd_err *err)
{
    *out = NULL;
    pb_payload *tp = org__apache__beam__model__pipeline__v1__test_stream_payload__unpack(
        NULL, payload.len, payload.ptr);
    if (tp == NULL) {
        return sd_err_set(err, SD_EINVAL, "TestStream %s: malformed TestStreamPayload",
                          name != NULL ? name : "(null)");
    }
    sd_ts_stream *s = NULL;
    sd_status rc = sd_ts_stream_create(name, tags, n_tags, &s, err);
    for (size_t i = 0; rc == SD_OK && i < tp->n_events; i++) {
        rc = decode_event(s, i, tp->events[i], recode, recode_ctx, err);
    }
    org__apache__beam__model__pipeline__v1__test_stream_payload__free_unpacked(tp, NULL);
    if (rc != SD_OK) {
        sd_ts_stream_destroy(s);
        return rc;
    }
    *out = s;
    return SD_OK;
}

sd_status sd_ts_payload_endpoint(sd_bytes payload, const char *name, char **url, sd_err *err)
{
    *url = NULL;
    pb_payload *tp = org__apache__beam__model__pipeline__v1__test_stream_payload__unpack(
        NULL, payload.len, payload.ptr);
    if (tp == NULL) {
        return sd_err_set(err, SD_EINVAL, "TestStream %s: malformed TestStreamPayload",
                          name != NULL ? name : "(null)");
    }
    sd_status rc = SD_OK;
    if (tp->endpoint != NULL && tp->endpoint->url != NULL && tp->endpoint->url[0] != '\0') {
        if (tp->n_events > 0) {
            rc = sd_err_set(err, SD_EINVAL,
                            "TestStream %s: the payload names an endpoint (%s) and lists %zu "
                            "events; a TestStream reads either its events or a service, not both",
                            name != NULL ? name : "(null)", tp->endpoint->url, tp->n_events);
        } else if ((*url = sd_strdup(tp->endpoint->url)) == NULL) {
            rc = sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    org__apache__beam__model__pipeline__v1__test_stream_payload__free_unpacked(tp, NULL);
    return rc;
}

sd_status sd_ts_decode_event(sd_ts_stream *s,
                             sd_bytes event,
                             size_t index,
                             sd_ts_recode_fn recode,
                             void *recode_ctx,
                             sd_err *err)
{
    pb_event *ev = (pb_event *)protobuf_c_message_unpack(
        &org__apache__beam__model__pipeline__v1__test_stream_payload__event__descriptor, NULL,
        event.len, event.ptr);
    if (ev == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "TestStream %s: event %zu (%zu bytes) is not a TestStreamPayload.Event",
                          sd_ts_stream_name(s), index, event.len);
    }
    sd_status rc = decode_event(s, index, ev, recode, recode_ctx, err);
    protobuf_c_message_free_unpacked(&ev->base, NULL);
    return rc;
}

sd_status
sd_ts_encode_events_request(const char *const *tags, size_t n_tags, sd_buf *out, sd_err *err)
{
    Org__Apache__Beam__Model__Interactive__V1__EventsRequest m =
        ORG__APACHE__BEAM__MODEL__INTERACTIVE__V1__EVENTS_REQUEST__INIT;
    m.n_output_ids = n_tags;
    m.output_ids = (char **)tags;
    size_t len = protobuf_c_message_get_packed_size(&m.base);
    if (sd_buf_reserve(out, len + 1) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    out->len += protobuf_c_message_pack(&m.base, out->data + out->len);
    return SD_OK;
}

sd_status
sd_ts_decode_events_request(const sd_ts_stream *s, sd_bytes request, bool *want, sd_err *err)
{
    size_t n_outputs = sd_ts_stream_n_outputs(s);
    Org__Apache__Beam__Model__Interactive__V1__EventsRequest *m =
        org__apache__beam__model__interactive__v1__events_request__unpack(NULL, request.len,
                                                                          request.ptr);
    if (m == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "TestStream %s: the request (%zu bytes) is not an EventsRequest",
                          sd_ts_stream_name(s), request.len);
    }
    for (size_t k = 0; k < n_outputs; k++) {
        want[k] = m->n_output_ids == 0;
    }
    sd_status rc = SD_OK;
    for (size_t j = 0; rc == SD_OK && j < m->n_output_ids; j++) {
        size_t k;
        const char *id = m->output_ids[j] != NULL ? m->output_ids[j] : "";
        if (sd_ts_stream_find_output(s, id, &k)) {
            want[k] = true;
            continue;
        }
        sd_buf names;
        sd_buf_init(&names, 0);
        for (size_t o = 0; o < n_outputs; o++) {
            if (sd_buf_printf(&names, "%s\"%s\"", o > 0 ? ", " : "", sd_ts_stream_outputs(s)[o]) !=
                SD_OK) {
                break;
            }
        }
        rc = sd_err_set(err, SD_EINVAL,
                        "TestStream %s: the EventsRequest asks for output \"%s\"; the stream's "
                        "outputs are %.*s",
                        sd_ts_stream_name(s), id, (int)names.len,
                        names.data != NULL ? (const char *)names.data : "");
        sd_buf_deinit(&names);
    }
    org__apache__beam__model__interactive__v1__events_request__free_unpacked(m, NULL);
    return rc;
}

/* ================================================================ encoding */

/* The message's parts, one allocation each, freed together (the message borrows from s). */
typedef struct enc {
    pb_event *events;
    pb_event **event_ptrs;
    pb_add *adds;
    pb_wm *wms;
    pb_pt *pts;
    pb_elem *elems;
    pb_elem **elem_ptrs;
} enc;

static void enc_free(enc *e)
{
    sd_free(e->events);
    sd_free(e->event_ptrs);
    sd_free(e->adds);
    sd_free(e->wms);
    sd_free(e->pts);
    sd_free(e->elems);
    sd_free(e->elem_ptrs);
}

/* Fill slot `slot` of e with event i of s; *next_elem is the first unused element slot. */
static void enc_event(const sd_ts_stream *s, enc *e, size_t i, size_t slot, size_t *next_elem)
{
    static const pb_event event_init =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__EVENT__INIT;
    static const pb_add add_init =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__EVENT__ADD_ELEMENTS__INIT;
    static const pb_wm wm_init =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__EVENT__ADVANCE_WATERMARK__INIT;
    static const pb_pt pt_init =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__EVENT__ADVANCE_PROCESSING_TIME__INIT;
    static const pb_elem elem_init =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__TIMESTAMPED_ELEMENT__INIT;
    const char *const *outputs = sd_ts_stream_outputs(s);
    sd_ts_event ev;
    sd_ts_stream_event(s, i, &ev);
    pb_event *pe = &e->events[slot];
    *pe = event_init;
    e->event_ptrs[slot] = pe;
    switch (ev.kind) {
    case SD_TS_ELEMENTS: {
        pb_add *x = &e->adds[slot];
        *x = add_init;
        x->tag = (char *)outputs[ev.output];
        x->n_elements = ev.n;
        x->elements = &e->elem_ptrs[*next_elem];
        for (size_t k = 0; k < ev.n; k++) {
            pb_elem *te = &e->elems[*next_elem];
            sd_bytes b;
            sd_time t;
            *te = elem_init;
            sd_ts_stream_element(s, i, k, &b, &t);
            te->timestamp = t;
            te->encoded_element.data = (uint8_t *)b.ptr;
            te->encoded_element.len = b.len;
            e->elem_ptrs[(*next_elem)++] = te;
        }
        pe->event_case = EVENT_CASE(ELEMENT_EVENT);
        pe->element_event = x;
        break;
    }
    case SD_TS_WATERMARK: {
        pb_wm *x = &e->wms[slot];
        *x = wm_init;
        x->tag = (char *)outputs[ev.output];
        x->new_watermark = ev.wm;
        pe->event_case = EVENT_CASE(WATERMARK_EVENT);
        pe->watermark_event = x;
        break;
    }
    case SD_TS_CLOCK: {
        pb_pt *x = &e->pts[slot];
        *x = pt_init;
        x->advance_duration = ev.advance_ms;
        pe->event_case = EVENT_CASE(PROCESSING_TIME_EVENT);
        pe->processing_time_event = x;
        break;
    }
    }
}

/* Allocate e (zeroed) for n events holding n_elems elements. false: out of memory (the
 * caller still frees e with enc_free). */
static bool enc_alloc(enc *e, size_t n, size_t n_elems)
{
    e->events = sd_calloc(n + 1, sizeof(pb_event));
    e->event_ptrs = sd_calloc(n + 1, sizeof(pb_event *));
    e->adds = sd_calloc(n + 1, sizeof(pb_add));
    e->wms = sd_calloc(n + 1, sizeof(pb_wm));
    e->pts = sd_calloc(n + 1, sizeof(pb_pt));
    e->elems = sd_calloc(n_elems + 1, sizeof(pb_elem));
    e->elem_ptrs = sd_calloc(n_elems + 1, sizeof(pb_elem *));
    if (e->events == NULL || e->event_ptrs == NULL || e->adds == NULL || e->wms == NULL ||
        e->pts == NULL || e->elems == NULL || e->elem_ptrs == NULL) {
        return false;
    }
    return true;
}

/* Append the packed message m to out. */
static sd_status pack_to(const ProtobufCMessage *m, sd_buf *out)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    sd_status rc = sd_buf_reserve(out, len + 1);
    if (rc == SD_OK) {
        out->len += protobuf_c_message_pack(m, out->data + out->len);
    }
    return rc;
}

sd_status sd_ts_encode(const sd_ts_stream *s, const char *coder_id, sd_buf *out, sd_err *err)
{
    pb_payload m = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__INIT;
    size_t n = sd_ts_stream_n_events(s), n_elems = 0;
    for (size_t i = 0; i < n; i++) {
        sd_ts_event ev;
        sd_ts_stream_event(s, i, &ev);
        n_elems += ev.kind == SD_TS_ELEMENTS ? ev.n : 0;
    }
    enc e = { 0 };
    sd_status rc = SD_OK;
    if (!enc_alloc(&e, n, n_elems)) {
        rc = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    size_t next_elem = 0;
    for (size_t i = 0; rc == SD_OK && i < n; i++) {
        enc_event(s, &e, i, i, &next_elem);
    }
    if (rc == SD_OK) {
        m.coder_id = (char *)(coder_id != NULL ? coder_id : "");
        m.n_events = n;
        m.events = e.event_ptrs;
        rc = pack_to(&m.base, out);
        if (rc != SD_OK) {
            rc = sd_err_set(err, rc, "TestStream %s: out of memory for its %zu-byte payload",
                            sd_ts_stream_name(s), protobuf_c_message_get_packed_size(&m.base));
        }
    }
    enc_free(&e);
    return rc;
}

sd_status sd_ts_encode_event(const sd_ts_stream *s, size_t i, sd_buf *out, sd_err *err)
{
    sd_ts_event ev;
    sd_ts_stream_event(s, i, &ev);
    enc e = { 0 };
    if (!enc_alloc(&e, 1, ev.kind == SD_TS_ELEMENTS ? ev.n : 0)) {
        enc_free(&e);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    size_t next_elem = 0;
    enc_event(s, &e, i, 0, &next_elem);
    sd_status rc = pack_to(&e.events[0].base, out);
    enc_free(&e);
    if (rc != SD_OK) {
        return sd_err_set(err, rc, "TestStream %s: out of memory for event %zu",
                          sd_ts_stream_name(s), i);
    }
    return SD_OK;
}

sd_status sd_ts_encode_live(const char *coder_id, const char *url, sd_buf *out, sd_err *err)
{
    pb_payload m = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__INIT;
    Org__Apache__Beam__Model__Pipeline__V1__ApiServiceDescriptor ep =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__API_SERVICE_DESCRIPTOR__INIT;
    ep.url = (char *)(url != NULL ? url : "");
    m.coder_id = (char *)(coder_id != NULL ? coder_id : "");
    m.endpoint = &ep;
    if (pack_to(&m.base, out) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    return SD_OK;
}
