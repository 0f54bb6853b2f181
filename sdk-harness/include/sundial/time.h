/*
 * Sundial C SDK: event time and processing time as int64 milliseconds, with Beam's bounds.
 */
#ifndef SD_SUNDIAL_TIME_H
#define SD_SUNDIAL_TIME_H

#include <stdint.h>
#include <sundial/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Milliseconds since the Unix epoch (event time), or on a job's processing-time clock. */
typedef int64_t sd_time;

/* Beam's BeamConstants: min/max timestamps and the global window's max timestamp (max - 1 day). */
#define SD_TIME_MIN        ((sd_time)-9223372036854775LL)
#define SD_TIME_MAX        ((sd_time)9223372036854775LL)
#define SD_TIME_GLOBAL_MAX ((sd_time)9223371950454775LL)

/* a + d, saturating at SD_TIME_MIN / SD_TIME_MAX. */
SD_API sd_time sd_time_add(sd_time a, int64_t d);

/* Clamp into [SD_TIME_MIN, SD_TIME_MAX]. */
SD_API sd_time sd_time_clamp(int64_t t);

/* Wall clock in ms since the epoch, and a monotonic clock in ms (arbitrary origin). */
SD_API sd_time sd_wall_now_ms(void);
SD_API int64_t sd_mono_now_ms(void);

#ifdef __cplusplus
}
#endif

#endif
