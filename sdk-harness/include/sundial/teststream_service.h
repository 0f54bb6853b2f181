/*
 * Sundial C SDK: a TestStreamService a test feeds while its job runs — the server side of a
 * live TestStream. Part of <sundial/sundial.h>, which includes it; it may also be included
 * alone.
 *
 * A TestStream whose payload names an endpoint (sd_teststream_set_endpoint) is not scripted:
 * the runner opens Beam's TestStreamService.Events on that endpoint when the job starts and
 * plays each event the service streams, at quiescence, exactly as a scripted one; the
 * stream's end is the TestStream's end. This header serves one from the test's own process,
 * on 127.0.0.1 at a free port, so a test can decide the next event after looking at the job
 * (with <sundial/control.h>), the way Kafka Streams' TopologyTestDriver tests are written:
 *
 *     sd_teststream_service *svc;
 *     sd_teststream_service_start(kv_coder, NULL, 0, &svc, &err);      // tag "out"
 *     sd_teststream *ts = sd_teststream_create(p, "Clicks", kv_coder, NULL, 0);
 *     sd_teststream_set_endpoint(ts, sd_teststream_service_endpoint(svc));
 *     // thread A: sd_pipeline_run(p, ...)
 *     // thread B (the test):
 *     sd_teststream_service_add_elements(svc, NULL, &click, &at, 1, &err);
 *     sd_teststream_service_advance_processing_time(svc, 60 * 60000, &err);
 *     sd_teststream_service_end(svc, &err);                           // the TestStream ends
 *     // ... join thread A ...
 *     sd_teststream_service_stop(svc);
 *
 * Events. Each push appends events to the service's stream, checked as the TestStream
 * builder checks a script (a known tag, timestamps in Beam's range, watermarks that never go
 * back, clock advances >= 0, elements that are one value of the coder), and is sent at once
 * to every open Events call. The wire form is Beam's TestStreamPayload.Event, each naming its
 * tag; elements go in the outer context of the coder (the payload's convention), converted
 * from the nested encodings the SDK uses everywhere else. A bad push changes nothing and
 * returns the error.
 *
 * Readers. Every Events call gets the whole stream from its first event on, then each event
 * as it is pushed, then the end: two jobs (a paused run and the same run unpaused) can read
 * one service. A call's EventsRequest names the outputs it wants (a Sundial runner names
 * all of the TestStream's); element and watermark events of other tags are not sent to it,
 * processing-time events always are. A request naming a tag the service does not have is
 * refused (INVALID_ARGUMENT, naming it), and so the job fails.
 *
 * Threads: every function may be called from any thread except a DoFn's; calls on one
 * service from several threads are serialised. The service runs on the SDK runtime's event
 * loop (the one its workers use).
 */
#ifndef SD_SUNDIAL_TESTSTREAM_SERVICE_H
#define SD_SUNDIAL_TESTSTREAM_SERVICE_H

#include <stddef.h>
#include <stdint.h>
#include <sundial/bytes.h>
#include <sundial/coder.h>
#include <sundial/err.h>
#include <sundial/export.h>
#include <sundial/status.h>
#include <sundial/time.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_teststream_service sd_teststream_service;

/*
 * Start a TestStreamService on 127.0.0.1 at a free port, for a TestStream of elements of
 * coder (the service keeps its own reference; the pipeline may go first) with outputs
 * tags[0..n_tags) (n_tags == 0: one output tagged "out", as sd_teststream_create). Tags must
 * be distinct, non-empty and contain no '/'. OUT: *out (stop with sd_teststream_service_stop).
 * SD_EINVAL (a NULL coder or out, bad tags), SD_EIO (the server cannot start), SD_ENOMEM.
 */
SD_API SD_MUST_CHECK sd_status sd_teststream_service_start(const sd_pcoder *coder,
                                                           const char *const *tags,
                                                           size_t n_tags,
                                                           sd_teststream_service **out,
                                                           sd_err *err);

/* Its endpoint, "127.0.0.1:PORT", for sd_teststream_set_endpoint. Borrowed until stop. */
SD_API const char *sd_teststream_service_endpoint(const sd_teststream_service *svc);

/*
 * Push an element event on tag (NULL = the first tag): elements[i] (nested encodings with the
 * service's coder; copied) at event time timestamps[i], i < n. n == 0 pushes an empty event.
 * SD_EINVAL (unknown tag, an element that is not one value of the coder, a timestamp outside
 * Beam's range, NULL arrays with n > 0), SD_ESTATE (the stream has ended), SD_ENOMEM.
 */
SD_API SD_MUST_CHECK sd_status sd_teststream_service_add_elements(sd_teststream_service *svc,
                                                                  const char *tag,
                                                                  const sd_bytes *elements,
                                                                  const sd_time *timestamps,
                                                                  size_t n,
                                                                  sd_err *err);

/*
 * Push a watermark event: tag's watermark (NULL = every tag's: one event per tag, all or
 * none) becomes wm (SD_TIME_MAX: the end of time). Equal is allowed, backwards is SD_EINVAL
 * (naming the tag and both values); unknown tag SD_EINVAL; SD_ESTATE after the end; SD_ENOMEM.
 */
SD_API SD_MUST_CHECK sd_status sd_teststream_service_advance_watermark(sd_teststream_service *svc,
                                                                       const char *tag,
                                                                       sd_time wm,
                                                                       sd_err *err);

/* Push a processing-time event: the job's clock moves forward by ms (>= 0, else SD_EINVAL).
 * SD_ESTATE after the end; SD_ENOMEM. */
SD_API SD_MUST_CHECK sd_status
sd_teststream_service_advance_processing_time(sd_teststream_service *svc, int64_t ms, sd_err *err);

/*
 * End the stream: every open Events call ends with OK once its events are sent, and so does
 * every later one (the TestStream then moves its outputs' watermarks to the end of time).
 * Pushes after it are SD_ESTATE. Ending twice is harmless.
 */
SD_API SD_MUST_CHECK sd_status sd_teststream_service_end(sd_teststream_service *svc, sd_err *err);

/*
 * Wait until n_readers Events calls have been opened on the service (counting those that are
 * over), up to timeout_ms: a test that must know its job is reading the stream. SD_EIO
 * (naming the endpoint and both counts) when they did not come in time.
 */
SD_API SD_MUST_CHECK sd_status sd_teststream_service_wait_readers(sd_teststream_service *svc,
                                                                  uint64_t n_readers,
                                                                  int timeout_ms,
                                                                  sd_err *err);

/* Events pushed so far (an element event, a per-tag watermark or a clock advance each). */
SD_API uint64_t sd_teststream_service_n_events(const sd_teststream_service *svc);

/*
 * Stop the service and free it: open Events calls are cancelled (a job still reading fails,
 * its error naming the TestStream and this endpoint, unless the stream had ended and been
 * read), the port is closed. Events a call has queued but not yet delivered may be lost with
 * it: a test that needs the job to have read them waits for their effect first. Blocks until
 * the server is down. NULL is a no-op; the handle is invalid afterwards.
 */
SD_API void sd_teststream_service_stop(sd_teststream_service *svc);

#ifdef __cplusplus
}
#endif

#endif
