/*
 * Sundial C SDK: the attribute macros every public header uses.
 *
 * SD_API marks a function the shared library exports. Sundial is built with hidden visibility
 * by default, so a function without SD_API stays inside the library whatever its name; the
 * public headers are the complete list of what a program can call.
 */
#ifndef SD_SUNDIAL_EXPORT_H
#define SD_SUNDIAL_EXPORT_H

#if defined(__GNUC__)
#define SD_API __attribute__((visibility("default")))
/* The caller must look at the result (an sd_status, or an owned pointer). */
#define SD_MUST_CHECK __attribute__((warn_unused_result))
/* printf-style checking of argument `args` against format argument `fmt` (1-based). */
#define SD_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define SD_API
#define SD_MUST_CHECK
#define SD_PRINTF(fmt, args)
#endif

#endif
