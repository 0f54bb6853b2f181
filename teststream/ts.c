/*
 * Sundial TestStream: the event model (teststream/ts.h).
 *
 * What it is. The script of one TestStream, shared by the two places that write one — the
 * runner, decoding a TestStreamPayload (ts_pb.c), and the C SDK's builder, which records
 * what user code asks for and later encodes it (ts_pb.c again) — and by the one place that
 * plays it, the engine-side driver (ts_drive.c). Rules about a script (Beam's timestamp range,
 * watermarks that do not go back per output, a clock that does not go back) are checked here
 * when an event is appended, so every writer gets the same errors with the same words.
 *
 * Storage: events in a vector of fixed-size records; an element event names a run
 * [first, first + n) of element records, each an (offset, length, timestamp) into one byte
 * buffer holding every element's bytes. Appending is amortised O(bytes); reading an event is
 * O(1). The stream keeps each output's latest watermark, so the backwards check is O(1) per
 * event instead of a scan of the events before it.
 */
#include "teststream/ts.h"

#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/vec.h"

#define TS_MAGIC 0x54535453u

typedef struct ts_rec {
    sd_ts_kind kind;
    size_t output;
    size_t first; /* ELEMENTS: index into elems */
    size_t n;
    int64_t value; /* WATERMARK: the watermark; CLOCK: the advance */
} ts_rec;

typedef struct ts_elem {
    size_t off, len; /* into data */
    sd_time ts;
} ts_elem;

struct sd_ts_stream {
    uint32_t magic;
    char *name;
    char **outputs;
    size_t n_outputs;
    sd_time *wms;  /* per output: the latest watermark event's */
    sd_vec events; /* ts_rec */
    sd_vec elems;  /* ts_elem */
    sd_buf data;
    bool allow_backwards;
};

sd_status sd_ts_stream_create(const char *name,
                              const char *const *outputs,
                              size_t n_outputs,
                              sd_ts_stream **out,
                              sd_err *err)
{
    *out = NULL;
    const char *nm = name != NULL ? name : "(null)";
    if (n_outputs == 0 || outputs == NULL) {
        return sd_err_set(err, SD_EINVAL, "TestStream %s: needs at least one output", nm);
    }
    for (size_t i = 0; i < n_outputs; i++) {
        if (outputs[i] == NULL) {
            return sd_err_set(err, SD_EINVAL, "TestStream %s: output %zu has no name", nm, i);
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(outputs[i], outputs[j]) == 0) {
                return sd_err_set(err, SD_EINVAL, "TestStream %s: output \"%s\" is named twice", nm,
                                  outputs[i]);
            }
        }
    }
    sd_ts_stream *s = sd_calloc(1, sizeof(*s));
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    s->magic = TS_MAGIC;
    sd_vec_init(&s->events, sizeof(ts_rec));
    sd_vec_init(&s->elems, sizeof(ts_elem));
    sd_buf_init(&s->data, 0);
    s->name = sd_strdup(nm);
    s->outputs = sd_calloc(n_outputs, sizeof(char *));
    s->wms = sd_calloc(n_outputs, sizeof(sd_time));
    if (s->name == NULL || s->outputs == NULL || s->wms == NULL) {
        sd_ts_stream_destroy(s);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n_outputs; i++) {
        s->wms[i] = SD_TIME_MIN;
        if ((s->outputs[i] = sd_strdup(outputs[i])) == NULL) {
            sd_ts_stream_destroy(s);
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        s->n_outputs++;
    }
    *out = s;
    return SD_OK;
}

void sd_ts_stream_destroy(sd_ts_stream *s)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->n_outputs; i++) {
        sd_free(s->outputs[i]);
    }
    sd_free(s->outputs);
    sd_free(s->wms);
    sd_free(s->name);
    sd_vec_deinit(&s->events);
    sd_vec_deinit(&s->elems);
    sd_buf_deinit(&s->data);
    s->magic = 0;
    sd_free(s);
}

const char *sd_ts_stream_name(const sd_ts_stream *s)
{
    return s->name;
}

size_t sd_ts_stream_n_outputs(const sd_ts_stream *s)
{
    return s->n_outputs;
}

const char *const *sd_ts_stream_outputs(const sd_ts_stream *s)
{
    return (const char *const *)s->outputs;
}

bool sd_ts_stream_find_output(const sd_ts_stream *s, const char *name, size_t *out)
{
    for (size_t i = 0; name != NULL && i < s->n_outputs; i++) {
        if (strcmp(s->outputs[i], name) == 0) {
            *out = i;
            return true;
        }
    }
    return false;
}

static sd_status check_output(const sd_ts_stream *s, size_t output, sd_err *err)
{
    if (output >= s->n_outputs) {
        return sd_err_set(err, SD_EINVAL, "TestStream %s: no output %zu (it has %zu)", s->name,
                          output, s->n_outputs);
    }
    return SD_OK;
}

sd_status sd_ts_stream_add_elements(sd_ts_stream *s,
                                    size_t output,
                                    const sd_bytes *elements,
                                    const sd_time *timestamps,
                                    size_t n,
                                    sd_err *err)
{
    sd_status rc = check_output(s, output, err);
    if (rc != SD_OK) {
        return rc;
    }
    if (n > 0 && (elements == NULL || timestamps == NULL)) {
        return sd_err_set(err, SD_EINVAL, "TestStream %s: NULL elements or timestamps", s->name);
    }
    for (size_t i = 0; i < n; i++) {
        if (timestamps[i] < SD_TIME_MIN || timestamps[i] > SD_TIME_MAX) {
            return sd_err_set(err, SD_EINVAL,
                              "TestStream %s: element %zu of %s: timestamp %lld is outside "
                              "Beam's range",
                              s->name, i, s->outputs[output], (long long)timestamps[i]);
        }
    }
    size_t data_len = s->data.len, elems_len = s->elems.len;
    ts_rec ev = { .kind = SD_TS_ELEMENTS, .output = output, .first = s->elems.len, .n = n };
    for (size_t i = 0; i < n && rc == SD_OK; i++) {
        ts_elem el = { .off = s->data.len, .len = elements[i].len, .ts = timestamps[i] };
        rc = sd_buf_append_bytes(&s->data, elements[i]);
        if (rc == SD_OK) {
            rc = sd_vec_push(&s->elems, &el);
        }
    }
    if (rc == SD_OK) {
        rc = sd_vec_push(&s->events, &ev);
    }
    if (rc != SD_OK) {
        s->data.len = data_len;
        s->elems.len = elems_len;
        return sd_err_set(err, rc, "out of memory");
    }
    return SD_OK;
}

sd_status sd_ts_stream_advance_watermark(sd_ts_stream *s, size_t output, sd_time wm, sd_err *err)
{
    sd_status rc = check_output(s, output, err);
    if (rc != SD_OK) {
        return rc;
    }
    wm = sd_time_clamp(wm);
    if (wm < s->wms[output] && !s->allow_backwards) {
        return sd_err_set(err, SD_EINVAL,
                          "TestStream %s: the watermark of %s would move backwards, from %lld to "
                          "%lld",
                          s->name, s->outputs[output], (long long)s->wms[output], (long long)wm);
    }
    ts_rec ev = { .kind = SD_TS_WATERMARK, .output = output, .value = wm };
    if (sd_vec_push(&s->events, &ev) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    s->wms[output] = SD_MAX(s->wms[output], wm);
    return SD_OK;
}

sd_status sd_ts_stream_advance_clock(sd_ts_stream *s, int64_t advance_ms, sd_err *err)
{
    if (advance_ms < 0) {
        return sd_err_set(err, SD_EINVAL,
                          "TestStream %s: processing time cannot move backwards (%lld ms)", s->name,
                          (long long)advance_ms);
    }
    ts_rec ev = { .kind = SD_TS_CLOCK, .value = advance_ms };
    if (sd_vec_push(&s->events, &ev) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    return SD_OK;
}

void sd_ts_stream_allow_backwards(sd_ts_stream *s, bool allow)
{
    s->allow_backwards = allow;
}

size_t sd_ts_stream_n_events(const sd_ts_stream *s)
{
    return s->events.len;
}

void sd_ts_stream_event(const sd_ts_stream *s, size_t i, sd_ts_event *out)
{
    const ts_rec *r = SD_VEC_AT(&s->events, ts_rec, i);
    memset(out, 0, sizeof(*out));
    out->kind = r->kind;
    out->output = r->output;
    out->n = r->n;
    if (r->kind == SD_TS_WATERMARK) {
        out->wm = r->value;
    } else if (r->kind == SD_TS_CLOCK) {
        out->advance_ms = r->value;
    }
}

void sd_ts_stream_element(const sd_ts_stream *s, size_t i, size_t k, sd_bytes *bytes, sd_time *ts)
{
    const ts_rec *r = SD_VEC_AT(&s->events, ts_rec, i);
    const ts_elem *el = SD_VEC_AT(&s->elems, ts_elem, r->first + k);
    /* Every element may be empty (a window coder's values): then data is NULL, and NULL + 0
     * is undefined. */
    *bytes = sd_bytes_make(s->data.data != NULL ? s->data.data + el->off : NULL, el->len);
    *ts = el->ts;
}
