/* Sundial: event time and processing time as int64 milliseconds, with Beam's bounds. */
#ifndef SD_RUNNER_BASE_TIME_H
#define SD_RUNNER_BASE_TIME_H

#include <stddef.h>
#include <stdint.h>

/*
 * sd_time, its bounds, saturating addition and the clocks belong to the C SDK's public
 * vocabulary (the installed header); what follows is for the runner and the SDK's insides.
 */
#include <sundial/time.h>

/* Beam's 8-byte timestamp encoding: big-endian of (t XOR sign bit), i.e. t + 2^63. */
uint64_t sd_time_encode(sd_time t);
sd_time sd_time_decode(uint64_t raw);

/*
 * t as a person reads it, into out (n bytes, truncated to fit): "-inf" and "+inf" for Beam's
 * bounds, "end of global window" for the global window's end, otherwise ISO 8601 in UTC with
 * milliseconds ("2026-12-01T14:32:53.512Z"). Returns out.
 */
char *sd_time_format(sd_time t, char *out, size_t n);

/* Monotonic clock in nanoseconds, for benchmarks. */
int64_t sd_mono_now_ns(void);

#define SD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SD_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
