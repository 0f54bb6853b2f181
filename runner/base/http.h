/* Sundial: a small blocking HTTP/1.1 client for the server's JSON API (sundialctl's time
 * control commands and the C SDK's <sundial/control.h> helper). */
#ifndef SD_RUNNER_BASE_HTTP_H
#define SD_RUNNER_BASE_HTTP_H

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"

/*
 * One request per TCP connection ("Connection: close"), no request body, the answer read to
 * its end: enough for the few-kilobyte JSON documents of /api/jobs/ID/..., with nothing beyond
 * libc. Every request carries the X-Sundial-Action header, the server's guard on calls that
 * change a job (as Cancel and Drain); reads ignore it. Plain HTTP only (the web UI answers on
 * loopback unless bound elsewhere on purpose). Blocking; thread-safe (no shared state).
 */

/* Where requests go: a host name or address and a port, as text. */
typedef struct sd_http_target {
    char host[256];
    char port[16];
} sd_http_target;

/* "http://HOST:PORT/...", "HOST:PORT" or "HOST" (port 80) into *out. SD_EINVAL, naming url
 * and the expected form. */
SD_MUST_CHECK sd_status sd_http_target_parse(const char *url, sd_http_target *out, sd_err *err);

/*
 * METHOD path (path: "/api/jobs/ID/pause?..." — the caller escapes it) to t. OUT: *status =
 * the answer's HTTP status; the answer's body appended to body with a terminating NUL (any
 * status: a refusal's body says why). SD_EIO (the host cannot be resolved or reached, the
 * request cannot be sent), SD_EPROTO (the answer is not HTTP), SD_ENOMEM; each names the
 * host and port or the request.
 */
SD_MUST_CHECK sd_status sd_http_request(const sd_http_target *t,
                                        const char *method,
                                        const char *path,
                                        int *status,
                                        sd_buf *body,
                                        sd_err *err);

/* Append s percent-encoded to out (RFC 3986's unreserved characters stay as they are): for a
 * path segment or a query value. SD_ENOMEM. */
SD_MUST_CHECK sd_status sd_http_put_escaped(sd_buf *out, const char *s);

#endif
