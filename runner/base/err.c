/*
 * Sundial: error messages.
 *
 * An sd_err travels down a call chain so that the function that sees bad data can say exactly
 * what was wrong ("coder c3: unknown URN beam:coder:foo:v1") and callers can add context on the
 * way back up. Messages are truncated at SD_ERR_MSG_MAX; truncation is preferred to allocation
 * because errors are often reported when memory is already short.
 */
#include "runner/base/err.h"

#include <stdio.h>
#include <string.h>

void sd_err_clear(sd_err *err)
{
    if (err != NULL) {
        err->code = SD_OK;
        err->msg[0] = '\0';
    }
}

sd_status sd_err_vset(sd_err *err, sd_status code, const char *fmt, va_list ap)
{
    if (err == NULL || err->code != SD_OK) {
        return code;
    }
    err->code = code;
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    return code;
}

sd_status sd_err_set(sd_err *err, sd_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sd_err_vset(err, code, fmt, ap);
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
    return sd_status_str(err->code);
}
