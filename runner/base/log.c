/*
 * Sundial: logging. One line per call, written with a single fprintf under a mutex so lines from
 * the loop thread, the gRPC pump and SDK worker threads never interleave.
 */
#include "runner/base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int current_level = -1;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static int level_from_env(void)
{
    const char *s = getenv("SUNDIAL_LOG");
    if (s == NULL) {
        return SD_LOG_WARN;
    }
    if (strcmp(s, "debug") == 0) {
        return SD_LOG_DEBUG;
    }
    if (strcmp(s, "info") == 0) {
        return SD_LOG_INFO;
    }
    if (strcmp(s, "error") == 0) {
        return SD_LOG_ERROR;
    }
    if (strcmp(s, "off") == 0) {
        return SD_LOG_OFF;
    }
    return SD_LOG_WARN;
}

void sd_log_set_level(sd_log_level level)
{
    atomic_store(&current_level, (int)level);
}

sd_log_level sd_log_get_level(void)
{
    int l = atomic_load(&current_level);
    if (l < 0) {
        l = level_from_env();
        atomic_store(&current_level, l);
    }
    return (sd_log_level)l;
}

void sd_log(sd_log_level level, const char *module, const char *fmt, ...)
{
    static const char *names[] = { "DEBUG", "INFO", "WARN", "ERROR", "OFF" };
    char msg[2048];
    struct timespec ts;
    va_list ap;

    if (level < sd_log_get_level()) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "sundial %lld.%03ld %s [%s] %s\n", (long long)ts.tv_sec, ts.tv_nsec / 1000000,
            names[level], module, msg);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
}
