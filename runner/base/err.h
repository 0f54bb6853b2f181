/* Sundial: an error is a status code plus a message naming the thing and the expectation. */
#ifndef SD_RUNNER_BASE_ERR_H
#define SD_RUNNER_BASE_ERR_H

/* sd_err belongs to the C SDK's public vocabulary; it is defined in the installed header. */
#include <sundial/err.h>

#include "runner/base/status.h"

#endif
