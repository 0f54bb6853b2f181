/*
 * Sundial: error messages.
 *
 * An sd_err travels down a call chain so that the function that sees bad data can say exactly
 * what was wrong ("coder c3: unknown URN beam:coder:foo:v1") and callers can add context on the
 * way back up. Messages are truncated at SD_ERR_MSG_MAX; truncation is preferred to allocation
 * because errors are often reported when memory is already short.
 */
#include "runner/base/err.h"

#include <assert.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

void sd_err_clear(sd_err *err)
{
    if (err != NULL) {
        err->code = SD_OK;
        err->msg[0] = '\0';
    }
}

/* What an error recorded with SD_OK (a programmer error) becomes in a release build. */
#define OK_FAILURE "internal error: a failure was reported with a success status: "

sd_status sd_err_vset(sd_err *err, sd_status code, const char *fmt, va_list ap)
{
    /* A failure must never carry a success status: whoever records one has a bug. */
    assert(code != SD_OK && "sd_err_set: a failure with status SD_OK");
    bool ok_code = code == SD_OK;
    if (ok_code) {
        code = SD_EINTERNAL;
    }
    if (err == NULL || err->code != SD_OK) {
        return code;
    }
    err->code = code;
    size_t off = 0;
    if (ok_code) {
        off = strlen(OK_FAILURE);
        memcpy(err->msg, OK_FAILURE, off + 1);
    }
    vsnprintf(err->msg + off, sizeof(err->msg) - off, fmt, ap);
    return code;
}

sd_status sd_err_failed(sd_err *err, sd_status st, const char *what)
{
    if (err->code != SD_OK) {
        return err->code;
    }
    what = what != NULL ? what : "a call";
    if (st == SD_OK) {
        assert(!"sd_err_failed: a failure with status SD_OK and no error");
        err->code = SD_EINTERNAL;
        snprintf(err->msg, sizeof(err->msg),
                 "internal error: %s reported a failure with a success status", what);
        return err->code;
    }
    err->code = st;
    snprintf(err->msg, sizeof(err->msg),
             "%s failed: %s (%s), without saying why (an internal error)", what, sd_status_str(st),
             sd_status_name(st));
    return st;
}

sd_status sd_err_set(sd_err *err, sd_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = sd_err_vset(err, code, fmt, ap);
    va_end(ap);
    return code;
}

sd_status sd_err_prefix(sd_err *err, const char *fmt, ...)
{
    char prefix[256];
    char old[SD_ERR_MSG_MAX];
    va_list ap;

    if (err == NULL || err->code == SD_OK) {
        return SD_OK;
    }
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    size_t plen = strlen(prefix);
    memcpy(old, err->msg, sizeof(old));
    if (plen >= sizeof(err->msg)) {
        plen = sizeof(err->msg) - 1;
    }
    memcpy(err->msg, prefix, plen);
    size_t rest = sizeof(err->msg) - 1 - plen;
    size_t olen = strnlen(old, rest);
    memcpy(err->msg + plen, old, olen);
    err->msg[plen + olen] = '\0';
    return err->code;
}

const char *sd_err_msg(const sd_err *err)
{
    if (err == NULL) {
        return "";
    }
    if (err->msg[0] != '\0') {
        return err->msg;
    }
    if (err->code == SD_OK) {
        /* Only a failure's message is ever asked for: never call it a success. */
        return "internal error: a failure without an error recorded";
    }
    return sd_status_str(err->code);
}
