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
 * The script itself is the runner's TestStream event model (teststream/ts.h, an
 * sd_ts_stream whose outputs are the tags), and the payload is written by the same code
 * that decodes it in the runner (teststream/ts_pb.h): this file adds only what belongs to
 * the SDK's API — tag names and the default tag, typed shorthands, sticky pipeline errors,
 * and the encoding convention below. The model checks timestamps, watermarks that go back
 * (refused, as Beam's Java builder does; tests of the runner's own check switch that off
 * through sd__teststream_allow_backwards) and clocks that go back.
 *
 * Encodings. SDK code hands elements over in the nested context (the SDK-wide convention);
 * Beam's TestStreamPayload carries each element encoded in the *outer* context of the stream's
 * coder (what Java's CoderUtils.encodeToByteArray writes). Each element is therefore decoded
 * and re-encoded once, when it is added: this both checks that it is one value of the coder
 * and catches mistakes at construction rather than in the runner.
 *
 * Tags. Every event names its tag explicitly, even for a single-output stream, and a
 * "every tag" watermark advance becomes one event per tag (teststream/ts_pb.c says why).
 *
 * Ownership: the builder is owned by its pipeline (sd__pipeline_own) and freed with it.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/coder/value.h"
#include "sdk-harness/src/sdk_int.h"
#include "teststream/ts.h"
#include "teststream/ts_pb.h"

#define TS_MAGIC 0x53445453u

struct sd_teststream {
    uint32_t magic;
    sd_pipeline *p;
    const sd_coder *coder;
    sd_ts_stream *script; /* outputs: the tags */
    sd_pcoll **outs;      /* per tag */
    char *endpoint;       /* a live TestStream's service (sd_teststream_set_endpoint), or NULL */
};

/* ================================================================ lifecycle */

static void ts_free(void *v)
{
    sd_teststream *ts = v;
    if (ts == NULL) {
        return;
    }
    sd_ts_stream_destroy(ts->script);
    sd_free(ts->outs);
    sd_free(ts->endpoint);
    ts->magic = 0;
    sd_free(ts);
}

static bool usable(const sd_teststream *ts)
{
    return ts != NULL && ts->magic == TS_MAGIC && !sd__pipeline_failed(ts->p);
}

static const char *ts_name(const sd_teststream *ts)
{
    return sd_ts_stream_name(ts->script);
}

/* Scripting calls on a live TestStream are refused (sticky): its events come from the
 * service. true when ts may take an event. */
static bool scripted(sd_teststream *ts, const char *what)
{
    if (ts->endpoint == NULL) {
        return true;
    }
    sd__pipeline_fail(ts->p, SD_EINVAL,
                      "TestStream %s reads its events from the TestStreamService at %s: %s "
                      "cannot add to its script (push the event to the service instead)",
                      ts_name(ts), ts->endpoint, what);
    return false;
}

/* A model error becomes the pipeline's sticky error. */
static void fail_with(sd_teststream *ts, sd_status st, const sd_err *e)
{
    if (st == SD_ENOMEM) {
        sd__pipeline_fail(ts->p, SD_ENOMEM, "out of memory while building TestStream %s",
                          ts_name(ts));
    } else {
        sd__pipeline_fail(ts->p, st, "%s", sd_err_msg(e));
    }
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
    if (!sd__pipeline_own(p, ts, ts_free)) {
        return NULL;
    }
    sd_err e;
    sd_err_clear(&e);
    sd_status st = sd_ts_stream_create(nm, tags, n_tags, &ts->script, &e);
    if (st != SD_OK) {
        return sd__pipeline_fail(p, st, "%s", sd_err_msg(&e));
    }
    ts->outs = sd_calloc(n_tags, sizeof(sd_pcoll *));
    if (ts->outs == NULL) {
        return sd__pipeline_fail(p, SD_ENOMEM, "out of memory while building TestStream %s", nm);
    }
    if (!sd__pipeline_add_teststream(p, name, coder, sd_ts_stream_outputs(ts->script), n_tags, ts,
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
    if (sd_ts_stream_find_output(ts->script, tag, out)) {
        return true;
    }
    sd__pipeline_fail(ts->p, SD_EINVAL, "TestStream %s: %s names unknown tag \"%s\"", ts_name(ts),
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

sd_status sd__teststream_outer(const sd_coder *coder,
                               const sd_bytes *elements,
                               size_t n,
                               sd_buf *outer,
                               sd_bytes *items,
                               size_t *bad,
                               sd_err *err)
{
    size_t *offs = sd_calloc(n + 1, sizeof(size_t));
    if (offs == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_status st = SD_OK;
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        sd_reader r = sd_reader_make(elements[i]);
        sd_value *v = NULL;
        offs[i] = outer->len;
        *bad = i;
        st = sd_coder_decode(coder, &r, true, &v, err);
        if (st == SD_OK && !sd_reader_done(&r)) {
            st = sd_err_set(err, SD_EINVAL, "%zu bytes left over", sd_reader_left(&r));
        }
        if (st == SD_OK) {
            st = sd_coder_encode(coder, v, false, outer, err);
        }
        sd_value_destroy(v);
    }
    if (st == SD_OK) {
        offs[n] = outer->len;
        for (size_t i = 0; i < n; i++) {
            /* Every element may encode to nothing: then outer->data is NULL, and NULL + 0 is
             * undefined. */
            items[i] = sd_bytes_make(outer->data != NULL ? outer->data + offs[i] : NULL,
                                     offs[i + 1] - offs[i]);
        }
    }
    sd_free(offs);
    return st;
}

void sd_teststream_add_elements(sd_teststream *ts,
                                const char *tag,
                                const sd_bytes *elements,
                                const sd_time *timestamps,
                                size_t n)
{
    size_t t;
    if (!usable(ts) || !scripted(ts, "an element event") ||
        !find_tag(ts, "an element event", tag, &t) || n == 0) {
        return;
    }
    if (elements == NULL || timestamps == NULL) {
        sd__pipeline_fail(ts->p, SD_EINVAL, "TestStream %s: NULL elements or timestamps",
                          ts_name(ts));
        return;
    }
    /* Nested in, outer out (see "Encodings"); the model then stores the event whole. */
    sd_buf outer;
    sd_buf_init(&outer, 0);
    sd_bytes *items = sd_calloc(n + 1, sizeof(sd_bytes));
    sd_err e;
    sd_err_clear(&e);
    size_t bad = 0;
    sd_status st = items != NULL
                       ? sd__teststream_outer(ts->coder, elements, n, &outer, items, &bad, &e)
                       : SD_ENOMEM;
    if (st == SD_OK) {
        st = sd_ts_stream_add_elements(ts->script, t, items, timestamps, n, &e);
        if (st != SD_OK) {
            fail_with(ts, st, &e);
        }
    } else if (st == SD_ENOMEM) {
        fail_with(ts, st, &e);
    } else {
        sd__pipeline_fail(ts->p, SD_EINVAL,
                          "TestStream %s: element %zu of tag %s is not one nested value of %s: %s",
                          ts_name(ts), bad, sd_ts_stream_outputs(ts->script)[t], ts->coder->urn,
                          sd_err_msg(&e));
    }
    sd_buf_deinit(&outer);
    sd_free(items);
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
        sd__pipeline_fail(ts->p, SD_EINVAL, "TestStream %s: %s needs a %s stream, not %s",
                          ts_name(ts), what, kind == SD_CODER_VARINT ? "varint" : "string",
                          ts->coder->urn);
        return;
    }
    if (values == NULL) {
        sd__pipeline_fail(ts->p, SD_EINVAL, "TestStream %s: %s: NULL values", ts_name(ts), what);
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
        sd__pipeline_fail(ts->p, SD_ENOMEM, "out of memory while building TestStream %s",
                          ts_name(ts));
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
    sd_err e;
    sd_err_clear(&e);
    sd_status st = sd_ts_stream_advance_watermark(ts->script, t, wm, &e);
    if (st != SD_OK) {
        fail_with(ts, st, &e);
    }
}

void sd_teststream_advance_watermark(sd_teststream *ts, const char *tag, sd_time wm)
{
    size_t t;
    if (!usable(ts) || !scripted(ts, "a watermark event")) {
        return;
    }
    if (tag != NULL) {
        if (find_tag(ts, "a watermark event", tag, &t)) {
            advance_one(ts, t, wm);
        }
        return;
    }
    for (size_t i = 0; i < sd_ts_stream_n_outputs(ts->script) && !sd__pipeline_failed(ts->p); i++) {
        advance_one(ts, i, wm);
    }
}

void sd_teststream_advance_watermark_to_infinity(sd_teststream *ts)
{
    sd_teststream_advance_watermark(ts, NULL, SD_TIME_MAX);
}

void sd_teststream_advance_processing_time(sd_teststream *ts, int64_t ms)
{
    if (!usable(ts) || !scripted(ts, "a processing-time event")) {
        return;
    }
    sd_err e;
    sd_err_clear(&e);
    sd_status st = sd_ts_stream_advance_clock(ts->script, ms, &e);
    if (st != SD_OK) {
        fail_with(ts, st, &e);
    }
}

void sd_teststream_set_endpoint(sd_teststream *ts, const char *endpoint)
{
    if (!usable(ts)) {
        return;
    }
    if (endpoint == NULL || endpoint[0] == '\0') {
        sd__pipeline_fail(ts->p, SD_EINVAL,
                          "TestStream %s: sd_teststream_set_endpoint needs a TestStreamService "
                          "endpoint (\"host:port\"), not an empty one",
                          ts_name(ts));
        return;
    }
    if (sd_ts_stream_n_events(ts->script) > 0) {
        sd__pipeline_fail(ts->p, SD_EINVAL,
                          "TestStream %s already scripts %zu events: a TestStream reads either "
                          "its script or a TestStreamService (%s), not both",
                          ts_name(ts), sd_ts_stream_n_events(ts->script), endpoint);
        return;
    }
    char *copy = sd_strdup(endpoint);
    if (copy == NULL) {
        sd__pipeline_fail(ts->p, SD_ENOMEM, "out of memory while building TestStream %s",
                          ts_name(ts));
        return;
    }
    sd_free(ts->endpoint);
    ts->endpoint = copy;
}

void sd__teststream_allow_backwards(sd_teststream *ts, bool allow)
{
    if (ts != NULL && ts->magic == TS_MAGIC && ts->script != NULL) {
        sd_ts_stream_allow_backwards(ts->script, allow);
    }
}

/* ================================================================ payload */

sd_status sd__teststream_payload(const sd_teststream *ts,
                                 const char *coder_id,
                                 sd_arena *a,
                                 ProtobufCBinaryData *out)
{
    if (ts == NULL || ts->magic != TS_MAGIC || ts->script == NULL) {
        return SD_EINVAL;
    }
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = ts->endpoint != NULL ? sd_ts_encode_live(coder_id, ts->endpoint, &b, NULL)
                                        : sd_ts_encode(ts->script, coder_id, &b, NULL);
    if (st == SD_OK) {
        out->len = b.len;
        out->data = sd_arena_alloc(a, b.len + 1);
        if (out->data == NULL) {
            st = SD_ENOMEM;
        } else if (b.len > 0) {
            memcpy(out->data, b.data, b.len);
        }
    }
    sd_buf_deinit(&b);
    return st;
}
