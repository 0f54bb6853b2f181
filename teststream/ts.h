/* Sundial TestStream: the event model of one TestStream (beam:transform:teststream:v1). */
#ifndef SD_TESTSTREAM_TS_H
#define SD_TESTSTREAM_TS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"
#include "runner/base/time.h"

/*
 * A stream is the script of one TestStream: its named outputs and, in order, its events —
 * elements (bytes and event timestamps) added to one output, an output's watermark moving
 * forward, the processing-time clock moving forward. Everything is in engine-native types
 * (sd_bytes, sd_time); what the element bytes are is the user's business: the runner stores
 * nested encodings of the wire coder (teststream/ts_pb.h decodes them from the payload), the
 * C SDK's builder the outer-context encodings the payload carries (teststream/ts_pb.h
 * encodes them). Every rule about a script is checked here, once, for both: timestamps in
 * Beam's range, watermarks that never go back per output, clocks that never go back.
 *
 * Threads: none; a stream is used by one thread at a time.
 */
typedef struct sd_ts_stream sd_ts_stream;

typedef enum sd_ts_kind {
    SD_TS_ELEMENTS = 0, /* n elements added to output */
    SD_TS_WATERMARK,    /* output's watermark becomes wm */
    SD_TS_CLOCK         /* processing time moves forward by advance_ms (SD_TIME_MAX: to the end) */
} sd_ts_kind;

/* One event, as sd_ts_stream_event reads it. */
typedef struct sd_ts_event {
    sd_ts_kind kind;
    size_t output;      /* ELEMENTS, WATERMARK: index into the stream's outputs */
    size_t n;           /* ELEMENTS: how many (read them with sd_ts_stream_element) */
    sd_time wm;         /* WATERMARK: clamped to Beam's range */
    int64_t advance_ms; /* CLOCK: >= 0 */
} sd_ts_event;

/*
 * A stream named name (used in every error message) with outputs outputs[0..n_outputs),
 * n_outputs >= 1, distinct non-NULL names. Copies everything. OUT: out (caller owns; free
 * with sd_ts_stream_destroy). SD_EINVAL (names), SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_stream_create(const char *name,
                                            const char *const *outputs,
                                            size_t n_outputs,
                                            sd_ts_stream **out,
                                            sd_err *err);

/* NULL is a no-op. */
void sd_ts_stream_destroy(sd_ts_stream *s);

/* The name; the outputs (n_outputs of them, borrowed until destroy). */
const char *sd_ts_stream_name(const sd_ts_stream *s);
size_t sd_ts_stream_n_outputs(const sd_ts_stream *s);
const char *const *sd_ts_stream_outputs(const sd_ts_stream *s);

/* The index of output name. OUT: out. false when there is none. */
bool sd_ts_stream_find_output(const sd_ts_stream *s, const char *name, size_t *out);

/*
 * Append an element event: elements[i] at timestamps[i], i < n (n may be 0), to output.
 * Copies the bytes. All or nothing: SD_EINVAL (bad output index, a timestamp outside
 * [SD_TIME_MIN, SD_TIME_MAX], NULL arrays with n > 0), SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_stream_add_elements(sd_ts_stream *s,
                                                  size_t output,
                                                  const sd_bytes *elements,
                                                  const sd_time *timestamps,
                                                  size_t n,
                                                  sd_err *err);

/*
 * Append a watermark event: output's watermark becomes wm (clamped to Beam's range). SD_EINVAL
 * when it would move backwards from an earlier event's (unless sd_ts_stream_allow_backwards)
 * or for a bad output index; SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_stream_advance_watermark(sd_ts_stream *s,
                                                       size_t output,
                                                       sd_time wm,
                                                       sd_err *err);

/* Append a processing-time event: the clock moves forward by advance_ms (SD_TIME_MAX or more:
 * to the end of time). SD_EINVAL when negative, SD_ENOMEM. */
SD_MUST_CHECK sd_status sd_ts_stream_advance_clock(sd_ts_stream *s,
                                                   int64_t advance_ms,
                                                   sd_err *err);

/* Let watermark events go backwards (for tests of a consumer's own check; off by default). */
void sd_ts_stream_allow_backwards(sd_ts_stream *s, bool allow);

/* The events, in script order. OUT: out (its contents borrowed until the next append). */
size_t sd_ts_stream_n_events(const sd_ts_stream *s);
void sd_ts_stream_event(const sd_ts_stream *s, size_t i, sd_ts_event *out);

/* Element k of element event i. OUT: bytes (borrowed until the next append), ts. */
void sd_ts_stream_element(const sd_ts_stream *s, size_t i, size_t k, sd_bytes *bytes, sd_time *ts);

#endif
