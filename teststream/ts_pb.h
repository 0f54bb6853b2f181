/* Sundial TestStream: TestStreamPayload bytes <-> the event model (protobuf-c inside). */
#ifndef SD_TESTSTREAM_TS_PB_H
#define SD_TESTSTREAM_TS_PB_H

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"
#include "teststream/ts.h"

/*
 * The one place that reads and writes Beam's TestStreamPayload: the runner's executor decodes
 * a pipeline's payloads with it, the C SDK's builder encodes its scripts with it. This header
 * mentions no protobuf-c type, so a user of it needs no generated code (ts_pb.c has it).
 */

/*
 * Turns one element as the payload carries it (the outer-context encoding of the payload's
 * coder) into the bytes the stream stores; appends them to out. Errors fail the decode.
 */
typedef sd_status (*sd_ts_recode_fn)(void *ctx, sd_bytes outer, sd_buf *out, sd_err *err);

/*
 * Decode payload (a serialized TestStreamPayload) into a new stream named name with outputs
 * tags[0..n_tags), n_tags >= 1. An event's tag names its output; an element event without a
 * tag (or an empty one) goes to the only output of a one-output stream; a watermark event
 * without a tag moves every output. recode (NULL: the payload's bytes are stored as they are)
 * converts each element. Timestamps are clamped to Beam's range. OUT: out (caller owns; free
 * with sd_ts_stream_destroy). SD_EINVAL naming the problem (malformed payload, unknown tag, an
 * event of no kind, a watermark going back, ...) prefixed "TestStream <name>: "; recode's
 * errors; SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_decode(sd_bytes payload,
                                     const char *name,
                                     const char *const *tags,
                                     size_t n_tags,
                                     sd_ts_recode_fn recode,
                                     void *recode_ctx,
                                     sd_ts_stream **out,
                                     sd_err *err);

/*
 * A live TestStream (Beam's TestStreamPayload.endpoint): OUT: url = the TestStreamService the
 * payload names (caller frees with sd_free), or NULL when it names none (no endpoint, or an
 * empty url: Python always writes the field). SD_EINVAL for a malformed payload or one that
 * names an endpoint and lists events too; SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_payload_endpoint(sd_bytes payload,
                                               const char *name,
                                               char **url,
                                               sd_err *err);

/*
 * Append one event as a TestStreamService streams it (a serialized TestStreamPayload.Event)
 * to s, read by the same rules as sd_ts_decode's events; index numbers it in errors.
 * SD_EINVAL naming the problem ("TestStream <name>: ..."), recode's errors, SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_decode_event(sd_ts_stream *s,
                                           sd_bytes event,
                                           size_t index,
                                           sd_ts_recode_fn recode,
                                           void *recode_ctx,
                                           sd_err *err);

/* The EventsRequest (Beam's interactive API) asking for the outputs tags[0..n_tags); appends
 * the serialized message to out. SD_ENOMEM. */
SD_MUST_CHECK sd_status sd_ts_encode_events_request(const char *const *tags,
                                                    size_t n_tags,
                                                    sd_buf *out,
                                                    sd_err *err);

/*
 * The other side of a live TestStream (a TestStreamService, the C SDK's
 * sdk-harness/src/teststream_service.c). OUT: want[k] for each output k of s: whether the
 * EventsRequest request (serialized) asks for it; a request naming no output asks for all.
 * SD_EINVAL for a malformed request or one naming an output s does not have (the message
 * names it and s's outputs); SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_decode_events_request(const sd_ts_stream *s,
                                                    sd_bytes request,
                                                    bool *want,
                                                    sd_err *err);

/*
 * Event i of s as a TestStreamService streams it: a serialized TestStreamPayload.Event,
 * written as sd_ts_encode writes each event (its output's name as the tag, element bytes as
 * the stream stores them), appended to out. i < sd_ts_stream_n_events(s). SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_encode_event(const sd_ts_stream *s,
                                           size_t i,
                                           sd_buf *out,
                                           sd_err *err);

/*
 * A live TestStream's payload: coder_id, no events, and an endpoint whose url is url (the
 * TestStreamService the runner reads the events from). Appends the serialized message to
 * out. SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_encode_live(const char *coder_id,
                                          const char *url,
                                          sd_buf *out,
                                          sd_err *err);

/*
 * Encode s as a TestStreamPayload with coder_id: each event names its output's name as its
 * tag (explicitly, even for one output), element bytes go as the stream stores them. Appends
 * the serialized message to out. SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_encode(const sd_ts_stream *s,
                                     const char *coder_id,
                                     sd_buf *out,
                                     sd_err *err);

#endif
