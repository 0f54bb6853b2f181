/* Sundial: an error is a status code plus a message naming the thing and the expectation. */
#ifndef SD_RUNNER_BASE_ERR_H
#define SD_RUNNER_BASE_ERR_H

/* sd_err belongs to the C SDK's public vocabulary; it is defined in the installed header. */
#include <sundial/err.h>

#include "runner/base/status.h"

/*
 * Where a failed call turns into a failure (of a job, a bundle, a request): make err describe
 * that failure. st is what the call returned. err keeps an error it holds already; a call that
 * failed without saying why (st set, err empty) gets st and a message naming what (the callee)
 * and the status, marked as an internal error. A failure never carries a success status:
 * st == SD_OK with an empty err is a programmer error (asserted; in release builds recorded as
 * SD_EINTERNAL). Returns err's code, never SD_OK; err must not be NULL.
 */
sd_status sd_err_failed(sd_err *err, sd_status st, const char *what);

#endif
