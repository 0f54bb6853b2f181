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
static atomic_int json_lines = 0;
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

void sd_log_set_json(int on)
{
    atomic_store(&json_lines, on != 0);
}

/* The first "<prefix><digits>" in s (a job or stage id), copied into out; "" when none. */
static void find_id(const char *s, const char *prefix, char *out, size_t size)
{
    size_t n = strlen(prefix);
    out[0] = '\0';
    for (const char *p = strstr(s, prefix); p != NULL; p = strstr(p + 1, prefix)) {
        size_t k = n;
        while (p[k] >= '0' && p[k] <= '9') {
            k++;
        }
        if (k > n && k < size) {
            memcpy(out, p, k);
            out[k] = '\0';
            return;
        }
    }
}

void sd_json_put_string(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            fputc('\\', f);
            fputc(*p, f);
        } else if (*p == '\n') {
            fputs("\\n", f);
        } else if (*p < 0x20) {
            fprintf(f, "\\u%04x", *p);
        } else {
            fputc(*p, f);
        }
    }
}

void sd_log(sd_log_level level, const char *module, const char *fmt, ...)
{
    static const char *names[] = { "DEBUG", "INFO", "WARN", "ERROR", "OFF" };
    char msg[2048];
    char stamp[40];
    struct timespec ts;
    struct tm tm;
    va_list ap;

    if (level < sd_log_get_level()) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &ts);
    if (gmtime_r(&ts.tv_sec, &tm) == NULL ||
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
        snprintf(stamp, sizeof(stamp), "%lld", (long long)ts.tv_sec);
    }
    size_t len = strlen(stamp);
    snprintf(stamp + len, sizeof(stamp) - len, ".%03ldZ", ts.tv_nsec / 1000000);
    pthread_mutex_lock(&log_lock);
    if (atomic_load(&json_lines)) {
        char job[32], stage[32];
        find_id(msg, "job-", job, sizeof(job));
        find_id(msg, "stage-", stage, sizeof(stage));
        fprintf(stderr, "{\"time\":\"%s\",\"level\":\"%s\",\"module\":\"", stamp, names[level]);
        sd_json_put_string(stderr, module);
        fputc('"', stderr);
        if (job[0] != '\0') {
            fprintf(stderr, ",\"job\":\"%s\"", job);
        }
        if (stage[0] != '\0') {
            fprintf(stderr, ",\"stage\":\"%s\"", stage);
        }
        fputs(",\"msg\":\"", stderr);
        sd_json_put_string(stderr, msg);
        fputs("\"}\n", stderr);
    } else {
        fprintf(stderr, "sundial %s %s [%s] %s\n", stamp, names[level], module, msg);
    }
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
}
