/*
 * Sundial C SDK: the TestStream builder (beam:transform:teststream:v1).
 *
 * A TestStream is a root transform whose TestStreamPayload scripts everything its outputs
 * will ever see: element events (per output tag, each element with an event timestamp),
 * watermark events (per tag) and processing-time advances. The builder records events in the
 * order user code adds them and writes the payload only when the pipeline is translated,
 * because the payload names the element coder by its id in the pipeline's coder table, which
 * exists only then.
 *
 * Encodings. SDK code hands elements over in the nested context (the SDK-wide convention);
 * Beam's TestStreamPayload carries each element encoded in the *outer* context of the stream's
 * coder (what Java's CoderUtils.encodeToByteArray writes). Each element is therefore decoded
 * and re-encoded once, when it is added: this both checks that it is one value of the coder
 * and catches mistakes at construction rather than in the runner.
 *
 * Tags. Every event names its tag explicitly, even for a single-output stream, and a
 * "every tag" watermark advance becomes one event per tag: runners differ in how they read an
 * empty tag, and explicit ones mean the same everywhere.
 *
 * Watermarks never move backwards: the builder tracks each tag's latest watermark and refuses
 * (sticky error) a smaller one, as Beam's Java builder does. Tests of the runner's own check
 * may switch that off through sd__teststream_allow_backwards.
 *
 * Ownership: the builder is owned by its pipeline (sd__pipeline_own) and freed with it.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/coder/value.h"
#include "sdk-harness/src/sdk_int.h"

#define TS_MAGIC 0x53445453u

typedef enum ts_kind { EV_ELEMENTS = 0, EV_WATERMARK, EV_PROCESSING_TIME } ts_kind;

typedef struct ts_elem {
    size_t off; /* into data: the outer-context encoding */
    size_t len;
    sd_time ts;
} ts_elem;

typedef struct ts_event {
    ts_kind kind;
    size_t tag;   /* ELEMENTS, WATERMARK */
    size_t first; /* ELEMENTS: index into elems */
    size_t n;
    int64_t value; /* WATERMARK: the new watermark; PROCESSING_TIME: the advance */
} ts_event;

struct sd_teststream {
    uint32_t magic;
    sd_pipeline *p;
    char *name;
    const sd_coder *coder;
    size_t n_tags;
    char **tags;
    sd_pcoll **outs;
    sd_time *wms;  /* per tag: the latest watermark asked for */
    sd_vec events; /* ts_event */
    sd_vec elems;  /* ts_elem */
    sd_buf data;   /* element encodings */
    bool allow_backwards;
};

#define PL_DESC(x)    org__apache__beam__model__pipeline__v1__##x##__descriptor
#define EVENT_CASE(x) ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TEST_STREAM_PAYLOAD__EVENT__EVENT_##x

typedef SD_PL(TestStreamPayload) pb_TestStreamPayload;
typedef SD_PL(TestStreamPayload__Event) pb_Event;

/* ================================================================ lifecycle */

static void ts_free(void *v)
{
    sd_teststream *ts = v;
    if (ts == NULL) {
        return;
    }
    for (size_t i = 0; i < ts->n_tags; i++) {
        sd_free(ts->tags[i]);
    }
    sd_free(ts->tags);
    sd_free(ts->outs);
    sd_free(ts->wms);
    sd_free(ts->name);
    sd_vec_deinit(&ts->events);
    sd_vec_deinit(&ts->elems);
    sd_buf_deinit(&ts->data);
    ts->magic = 0;
    sd_free(ts);
}

static bool usable(const sd_teststream *ts)
{
    return ts != NULL && ts->magic == TS_MAGIC && !sd__pipeline_failed(ts->p);
}

sd_teststream *sd_teststream_create(sd_pipeline *p,
                                    const char *name,
                                    const sd_coder *coder,
                                    const char *const *tags,
                                    size_t n_tags)
{
    static const char *const default_tags[] = { "out" };
    if (sd__pipeline_failed(p)) {
        return NULL;
    }
    const char *nm = name != NULL ? name : "(null)";
    if (coder == NULL) {
        return sd__pipeline_fail(p, SD_EINVAL, "TestStream %s: NULL coder", nm);
    }
    if (n_tags == 0) {
        tags = default_tags;
        n_tags = 1;
    } else if (tags == NULL) {
        return sd__pipeline_fail(p, SD_EINVAL, "TestStream %s: %zu tags but a NULL tag array", nm,
                                 n_tags);
    }
    for (size_t i = 0; i < n_tags; i++) {
        if (tags[i] == NULL || tags[i][0] == '\0' || strchr(tags[i], '/') != NULL) {
            return sd__pipeline_fail(
                p, SD_EINVAL, "TestStream %s: tag %zu must be non-empty and contain no '/'", nm, i);
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(tags[i], tags[j]) == 0) {
                return sd__pipeline_fail(p, SD_EINVAL, "TestStream %s: tag \"%s\" is used twice",
                                         nm, tags[i]);
            }
        }
    }
    sd_teststream *ts = sd_calloc(1, sizeof(*ts));
    if (ts == NULL) {
        return sd__pipeline_fail(p, SD_ENOMEM, "out of memory while building TestStream %s", nm);
    }
    ts->magic = TS_MAGIC;
    ts->p = p;
    ts->coder = coder;
    sd_vec_init(&ts->events, sizeof(ts_event));
    sd_vec_init(&ts->elems, sizeof(ts_elem));
    sd_buf_init(&ts->data, 0);
    if (!sd__pipeline_own(p, ts, ts_free)) {
        return NULL;
    }
    ts->name = sd_strdup(nm);
    ts->tags = sd_calloc(n_tags, sizeof(char *));
    ts->outs = sd_calloc(n_tags, sizeof(sd_pcoll *));
    ts->wms = sd_calloc(n_tags, sizeof(sd_time));
    if (ts->name == NULL || ts->tags == NULL || ts->outs == NULL || ts->wms == NULL) {
        return sd__pipeline_fail(p, SD_ENOMEM, "out of memory while building TestStream %s", nm);
    }
    for (size_t i = 0; i < n_tags; i++) {
        ts->wms[i] = SD_TIME_MIN;
        if ((ts->tags[i] = sd_strdup(tags[i])) == NULL) {
            return sd__pipeline_fail(p, SD_ENOMEM, "out of memory while building TestStream %s",
                                     nm);
        }
        ts->n_tags++;
    }
    if (!sd__pipeline_add_teststream(p, name, coder, (const char *const *)ts->tags, ts->n_tags, ts,
                                     ts->outs)) {
        return NULL;
    }
    return ts;
}

/* The index of tag (NULL = 0). Sticky error and false when unknown. */
static bool find_tag(sd_teststream *ts, const char *what, const char *tag, size_t *out)
{
    if (tag == NULL) {
        *out = 0;
        return true;
    }
    for (size_t i = 0; i < ts->n_tags; i++) {
        if (strcmp(ts->tags[i], tag) == 0) {
            *out = i;
            return true;
        }
    }
    sd__pipeline_fail(ts->p, SD_EINVAL, "TestStream %s: %s names unknown tag \"%s\"", ts->name,
                      what, tag);
    return false;
}

sd_pcoll *sd_teststream_output(sd_teststream *ts, const char *tag)
{
    size_t i;
    if (!usable(ts) || !find_tag(ts, "sd_teststream_output", tag, &i)) {
        return NULL;
    }
    return ts->outs[i];
}

/* ================================================================ events */

static bool push_event(sd_teststream *ts, const ts_event *ev)
{
    if (sd_vec_push(&ts->events, ev) != SD_OK) {
        sd__pipeline_fail(ts->p, SD_ENOMEM, "out of memory while building TestStream %s", ts->name);
        return false;
    }
    return true;
}

void sd_teststream_add_elements(sd_teststream *ts,
                                const char *tag,
                                const sd_bytes *elements,
                                const sd_time *timestamps,
                                size_t n)
{
    size_t t;
    if (!usable(ts) || !find_tag(ts, "an element event", tag, &t) || n == 0) {
        return;
    }
    if (elements == NULL || timestamps == NULL) {
        sd__pipeline_fail(ts->p, SD_EINVAL, "TestStream %s: NULL elements or timestamps", ts->name);
        return;
    }
    ts_event ev = { .kind = EV_ELEMENTS, .tag = t, .first = ts->elems.len, .n = n };
    size_t data_len = ts->data.len, elems_len = ts->elems.len;
    for (size_t i = 0; i < n; i++) {
        sd_reader r = sd_reader_make(elements[i]);
        sd_value *v = NULL;
        sd_err e;
        sd_err_clear(&e);
        ts_elem el = { .off = ts->data.len, .ts = timestamps[i] };
        sd_status st = sd_coder_decode(ts->coder, &r, true, &v, &e);
        if (st == SD_OK && !sd_reader_done(&r)) {
            st = sd_err_set(&e, SD_EINVAL, "%zu bytes left over", sd_reader_left(&r));
        }
        if (st == SD_OK && (timestamps[i] < SD_TIME_MIN || timestamps[i] > SD_TIME_MAX)) {
            st = sd_err_set(&e, SD_EINVAL, "timestamp %lld is outside Beam's range",
                            (long long)timestamps[i]);
        }
        if (st == SD_OK) {
            st = sd_coder_encode(ts->coder, v, false, &ts->data, &e);
        }
        sd_value_destroy(v);
        if (st == SD_OK) {
            el.len = ts->data.len - el.off;
            st = sd_vec_push(&ts->elems, &el);
        }
        if (st != SD_OK) {
            ts->data.len = data_len;
            ts->elems.len = elems_len;
            if (st == SD_ENOMEM) {
                sd__pipeline_fail(ts->p, SD_ENOMEM, "out of memory while building TestStream %s",
                                  ts->name);
            } else {
                sd__pipeline_fail(ts->p, SD_EINVAL,
                                  "TestStream %s: element %zu of tag %s is not one nested value "
                                  "of %s: %s",
                                  ts->name, i, ts->tags[t], ts->coder->urn, sd_err_msg(&e));
            }
            return;
        }
    }
    if (!push_event(ts, &ev)) {
        ts->data.len = data_len;
        ts->elems.len = elems_len;
    }
}

/* Encode n values with enc into one buffer and add them as one element event. */
static void add_encoded(sd_teststream *ts,
                        const char *tag,
                        const char *what,
                        sd_coder_kind kind,
                        const void *values,
                        const sd_time *timestamps,
                        size_t n)
{
    if (!usable(ts) || n == 0) {
        return;
    }
    if (ts->coder->kind != kind) {
        sd__pipeline_fail(ts->p, SD_EINVAL, "TestStream %s: %s needs a %s stream, not %s", ts->name,
                          what, kind == SD_CODER_VARINT ? "varint" : "string", ts->coder->urn);
        return;
    }
    if (values == NULL) {
        sd__pipeline_fail(ts->p, SD_EINVAL, "TestStream %s: %s: NULL values", ts->name, what);
        return;
    }
    sd_buf all;
    size_t *offs = sd_calloc(n + 1, sizeof(size_t));
    sd_bytes *items = sd_calloc(n + 1, sizeof(sd_bytes));
    sd_buf_init(&all, 0);
    sd_status st = offs != NULL && items != NULL ? SD_OK : SD_ENOMEM;
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        offs[i] = all.len;
        if (kind == SD_CODER_VARINT) {
            st = sd_enc_int(&all, ((const int64_t *)values)[i]);
        } else {
            const char *s = ((const char *const *)values)[i];
            st = sd_enc_str(&all, s != NULL ? s : "");
        }
    }
    if (st == SD_OK) {
        offs[n] = all.len;
        for (size_t i = 0; i < n; i++) {
            items[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
        }
        sd_teststream_add_elements(ts, tag, items, timestamps, n);
    } else {
        sd__pipeline_fail(ts->p, SD_ENOMEM, "out of memory while building TestStream %s", ts->name);
    }
    sd_buf_deinit(&all);
    sd_free(offs);
    sd_free(items);
}

void sd_teststream_add_strings(sd_teststream *ts,
                               const char *tag,
                               const char *const *strings,
                               const sd_time *timestamps,
                               size_t n)
{
    add_encoded(ts, tag, "sd_teststream_add_strings", SD_CODER_STRING_UTF8, strings, timestamps, n);
}

void sd_teststream_add_ints(sd_teststream *ts,
                            const char *tag,
                            const int64_t *values,
                            const sd_time *timestamps,
                            size_t n)
{
    add_encoded(ts, tag, "sd_teststream_add_ints", SD_CODER_VARINT, values, timestamps, n);
}

static void advance_one(sd_teststream *ts, size_t t, sd_time wm)
{
    if (wm < ts->wms[t] && !ts->allow_backwards) {
        sd__pipeline_fail(ts->p, SD_EINVAL,
                          "TestStream %s: the watermark of tag %s would move backwards, from "
                          "%lld to %lld",
                          ts->name, ts->tags[t], (long long)ts->wms[t], (long long)wm);
        return;
    }
    ts_event ev = { .kind = EV_WATERMARK, .tag = t, .value = wm };
    if (push_event(ts, &ev)) {
        ts->wms[t] = SD_MAX(ts->wms[t], wm);
    }
}

void sd_teststream_advance_watermark(sd_teststream *ts, const char *tag, sd_time wm)
{
    size_t t;
    if (!usable(ts)) {
        return;
    }
    wm = sd_time_clamp(wm);
    if (tag != NULL) {
        if (find_tag(ts, "a watermark event", tag, &t)) {
            advance_one(ts, t, wm);
        }
        return;
    }
    for (size_t i = 0; i < ts->n_tags && !sd__pipeline_failed(ts->p); i++) {
        advance_one(ts, i, wm);
    }
}

void sd_teststream_advance_watermark_to_infinity(sd_teststream *ts)
{
    sd_teststream_advance_watermark(ts, NULL, SD_TIME_MAX);
}

void sd_teststream_advance_processing_time(sd_teststream *ts, int64_t ms)
{
    if (!usable(ts)) {
        return;
    }
    if (ms < 0) {
        sd__pipeline_fail(ts->p, SD_EINVAL,
                          "TestStream %s: processing time cannot move backwards (%lld ms)",
                          ts->name, (long long)ms);
        return;
    }
    ts_event ev = { .kind = EV_PROCESSING_TIME, .value = ms };
    push_event(ts, &ev);
}

void sd__teststream_allow_backwards(sd_teststream *ts, bool allow)
{
    if (ts != NULL && ts->magic == TS_MAGIC) {
        ts->allow_backwards = allow;
    }
}

/* ================================================================ payload */

static pb_Event *event_proto(sd_arena *a, const sd_teststream *ts, const ts_event *ev)
{
    pb_Event *e = sd__pb_alloc(a, &PL_DESC(test_stream_payload__event));
    if (e == NULL) {
        return NULL;
    }
    switch (ev->kind) {
    case EV_ELEMENTS: {
        SD_PL(TestStreamPayload__Event__AddElements) *x =
            sd__pb_alloc(a, &PL_DESC(test_stream_payload__event__add_elements));
        SD_PL(TestStreamPayload__TimestampedElement) **arr =
            sd_arena_alloc(a, (ev->n + 1) * sizeof(*arr));
        if (x == NULL || arr == NULL) {
            return NULL;
        }
        for (size_t i = 0; i < ev->n; i++) {
            const ts_elem *el = sd_vec_at(&ts->elems, ev->first + i);
            SD_PL(TestStreamPayload__TimestampedElement) *te =
                sd__pb_alloc(a, &PL_DESC(test_stream_payload__timestamped_element));
            if (te == NULL) {
                return NULL;
            }
            te->timestamp = el->ts;
            te->encoded_element.len = el->len;
            te->encoded_element.data = sd_arena_memdup(a, ts->data.data + el->off, el->len);
            if (el->len > 0 && te->encoded_element.data == NULL) {
                return NULL;
            }
            arr[i] = te;
        }
        x->n_elements = ev->n;
        x->elements = arr;
        x->tag = sd_arena_strdup(a, ts->tags[ev->tag]);
        e->event_case = EVENT_CASE(ELEMENT_EVENT);
        e->element_event = x;
        return x->tag != NULL ? e : NULL;
    }
    case EV_WATERMARK: {
        SD_PL(TestStreamPayload__Event__AdvanceWatermark) *x =
            sd__pb_alloc(a, &PL_DESC(test_stream_payload__event__advance_watermark));
        if (x == NULL) {
            return NULL;
        }
        x->new_watermark = ev->value;
        x->tag = sd_arena_strdup(a, ts->tags[ev->tag]);
        e->event_case = EVENT_CASE(WATERMARK_EVENT);
        e->watermark_event = x;
        return x->tag != NULL ? e : NULL;
    }
    case EV_PROCESSING_TIME: {
        SD_PL(TestStreamPayload__Event__AdvanceProcessingTime) *x =
            sd__pb_alloc(a, &PL_DESC(test_stream_payload__event__advance_processing_time));
        if (x == NULL) {
            return NULL;
        }
        x->advance_duration = ev->value;
        e->event_case = EVENT_CASE(PROCESSING_TIME_EVENT);
        e->processing_time_event = x;
        return e;
    }
    }
    return NULL;
}

sd_status sd__teststream_payload(const sd_teststream *ts,
                                 const char *coder_id,
                                 sd_arena *a,
                                 ProtobufCBinaryData *out)
{
    if (ts == NULL || ts->magic != TS_MAGIC) {
        return SD_EINVAL;
    }
    pb_TestStreamPayload *m = sd__pb_alloc(a, &PL_DESC(test_stream_payload));
    if (m == NULL) {
        return SD_ENOMEM;
    }
    m->coder_id = sd_arena_strdup(a, coder_id);
    m->events = sd_arena_alloc(a, (ts->events.len + 1) * sizeof(pb_Event *));
    if (m->coder_id == NULL || m->events == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < ts->events.len; i++) {
        if ((m->events[i] = event_proto(a, ts, sd_vec_at(&ts->events, i))) == NULL) {
            return SD_ENOMEM;
        }
    }
    m->n_events = ts->events.len;
    size_t n = protobuf_c_message_get_packed_size(&m->base);
    out->data = sd_arena_alloc(a, n + 1);
    if (out->data == NULL) {
        return SD_ENOMEM;
    }
    out->len = protobuf_c_message_pack(&m->base, out->data);
    return SD_OK;
}
