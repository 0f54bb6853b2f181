/*
 * Sundial C SDK: an error is a status code plus a message naming the thing and the expectation.
 */
#ifndef SD_SUNDIAL_ERR_H
#define SD_SUNDIAL_ERR_H

#include <stdarg.h>
#include <sundial/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SD_ERR_MSG_MAX 1024

/*
 * Caller-provided error slot. Functions that can fail for data-dependent reasons take a
 * trailing `sd_err *err`, which may be NULL. A zeroed sd_err means "no error".
 */
typedef struct sd_err {
    sd_status code;
    char msg[SD_ERR_MSG_MAX];
} sd_err;

/* Reset err to "no error". err may be NULL. */
SD_API void sd_err_clear(sd_err *err);

/*
 * Record code and a printf-style message in err (if non-NULL) and return code, so callers
 * write `return sd_err_set(err, SD_EPROTO, "coder %s: ...", id);`. The first error wins:
 * if err already holds an error, it is kept (use sd_err_prefix to add context). code must not
 * be SD_OK (a failure never carries a success status): that is asserted, and a release build
 * records and returns SD_EINTERNAL instead, its message saying so.
 */
SD_API sd_status sd_err_set(sd_err *err, sd_status code, const char *fmt, ...) SD_PRINTF(3, 4);
SD_API sd_status sd_err_vset(sd_err *err, sd_status code, const char *fmt, va_list ap)
    SD_PRINTF(3, 0);

/*
 * Prepend context to an existing message: "stage-003: " + old message. Returns err->code
 * (SD_OK if err is NULL or holds no error).
 */
SD_API sd_status sd_err_prefix(sd_err *err, const char *fmt, ...) SD_PRINTF(2, 3);

/* The message, or the code's description when no message was set. Never NULL, and never
 * "success": for an err that holds no error it says that no error was recorded (a message is
 * only asked for a failure). */
SD_API const char *sd_err_msg(const sd_err *err);

#ifdef __cplusplus
}
#endif

#endif
