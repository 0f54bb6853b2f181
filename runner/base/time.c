/*
 * Sundial: time arithmetic. Saturating adds keep "end of time" sticky: adding a delay to
 * SD_TIME_MAX stays SD_TIME_MAX rather than wrapping into the past.
 */
#include "runner/base/time.h"

#include <stdio.h>
#include <time.h>

sd_time sd_time_clamp(int64_t t)
{
    if (t < SD_TIME_MIN) {
        return SD_TIME_MIN;
    }
    if (t > SD_TIME_MAX) {
        return SD_TIME_MAX;
    }
    return t;
}

sd_time sd_time_add(sd_time a, int64_t d)
{
    if (d > 0 && a > SD_TIME_MAX - d) {
        return SD_TIME_MAX;
    }
    if (d < 0 && a < SD_TIME_MIN - d) {
        return SD_TIME_MIN;
    }
    return a + d;
}

uint64_t sd_time_encode(sd_time t)
{
    return (uint64_t)t ^ 0x8000000000000000ULL;
}

sd_time sd_time_decode(uint64_t raw)
{
    return (sd_time)(raw ^ 0x8000000000000000ULL);
}

sd_time sd_wall_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (sd_time)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sd_mono_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sd_mono_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

char *sd_time_format(sd_time t, char *out, size_t n)
{
    if (n == 0) {
        return out;
    }
    if (t <= SD_TIME_MIN) {
        snprintf(out, n, "-inf");
    } else if (t >= SD_TIME_MAX) {
        snprintf(out, n, "+inf");
    } else if (t >= SD_TIME_GLOBAL_MAX) {
        snprintf(out, n, "end of global window");
    } else {
        /* Floor division, so 1969 times keep their milliseconds positive. */
        int64_t ms = ((t % 1000) + 1000) % 1000;
        time_t secs = (time_t)((t - ms) / 1000);
        struct tm tm;
        char date[40];
        if (gmtime_r(&secs, &tm) == NULL ||
            strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
            snprintf(out, n, "%lld ms", (long long)t);
        } else {
            snprintf(out, n, "%s.%03dZ", date, (int)ms);
        }
    }
    return out;
}
