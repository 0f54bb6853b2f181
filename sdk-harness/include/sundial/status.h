/*
 * Sundial C SDK: status codes. Every fallible call returns an sd_status; SD_OK is 0.
 */
#ifndef SD_SUNDIAL_STATUS_H
#define SD_SUNDIAL_STATUS_H

#include <sundial/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One X-macro defines every code once; the enum, sd_status_name() and sd_status_str() are
 * generated from it, so a new code cannot be half-added.
 */
#define SD_STATUS_MAP(X)                                  \
    X(OK, "success")                                      \
    X(ENOMEM, "out of memory")                            \
    X(EINVAL, "invalid argument")                         \
    X(EPROTO, "malformed or unexpected protocol data")    \
    X(ENOTFOUND, "not found")                             \
    X(ESTATE, "operation not valid in the current state") \
    X(EIO, "input/output error")                          \
    X(ECANCELED, "canceled")                              \
    X(EUNIMPL, "not implemented")                         \
    X(ETOOBIG, "size limit exceeded")                     \
    X(ETIMEOUT, "timed out")                              \
    X(EEXIST, "already exists")                           \
    X(EUNAVAIL, "unavailable")                            \
    X(EINTERNAL, "internal error")

typedef enum sd_status {

#define SD__STATUS_ENUM(name, text) SD_##name,
    SD_STATUS_MAP(SD__STATUS_ENUM)
#undef SD__STATUS_ENUM
        SD__STATUS_COUNT
} sd_status;

/* The code's identifier without the SD_ prefix, e.g. "EPROTO". Never NULL. */
SD_API const char *sd_status_name(sd_status code);

/* A short human description of the code. Never NULL. */
SD_API const char *sd_status_str(sd_status code);

#ifdef __cplusplus
}
#endif

#endif
