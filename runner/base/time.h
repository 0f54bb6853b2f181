/* Sundial: event time and processing time as int64 milliseconds, with Beam's bounds. */
#ifndef SD_RUNNER_BASE_TIME_H
#define SD_RUNNER_BASE_TIME_H

#include <stdint.h>

typedef int64_t sd_time;

/* Beam's BeamConstants: min/max timestamps and the global window's max timestamp (max - 1 day). */
#define SD_TIME_MIN ((sd_time)-9223372036854775LL)
#define SD_TIME_MAX ((sd_time)9223372036854775LL)
#define SD_TIME_GLOBAL_MAX ((sd_time)9223371950454775LL)

/* a + d, saturating at SD_TIME_MIN / SD_TIME_MAX. */
sd_time sd_time_add(sd_time a, int64_t d);

/* Clamp into [SD_TIME_MIN, SD_TIME_MAX]. */
sd_time sd_time_clamp(int64_t t);

/* Beam's 8-byte timestamp encoding: big-endian of (t XOR sign bit), i.e. t + 2^63. */
uint64_t sd_time_encode(sd_time t);
sd_time sd_time_decode(uint64_t raw);

/* Wall clock in ms since the epoch, and a monotonic clock in ms (arbitrary origin). */
sd_time sd_wall_now_ms(void);
int64_t sd_mono_now_ms(void);
/* Monotonic clock in nanoseconds, for benchmarks. */
int64_t sd_mono_now_ns(void);

#define SD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SD_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
