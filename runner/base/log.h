/* Sundial: process logging to stderr. */
#ifndef SD_RUNNER_BASE_LOG_H
#define SD_RUNNER_BASE_LOG_H

#include <stdio.h>

#include "runner/base/status.h"

typedef enum sd_log_level {
    SD_LOG_DEBUG = 0,
    SD_LOG_INFO = 1,
    SD_LOG_WARN = 2,
    SD_LOG_ERROR = 3,
    SD_LOG_OFF = 4
} sd_log_level;

/*
 * Set the minimum level printed. The initial level comes from the environment variable
 * SUNDIAL_LOG (debug|info|warn|error|off), default warn. Thread-safe.
 */
void sd_log_set_level(sd_log_level level);
sd_log_level sd_log_get_level(void);

/*
 * Print one line to stderr when level is enabled. Thread-safe. Text (the default):
 *     sundial 2026-12-01T10:24:04.123Z WARN [exec] message
 * JSON (sd_log_set_json): one object a line, with the job and stage ids the message names:
 *     {"time":"2026-12-01T10:24:04.123Z","level":"warn","module":"exec","job":"job-001",
 *      "stage":"stage-002","msg":"..."}
 */
void sd_log(sd_log_level level, const char *module, const char *fmt, ...) SD_PRINTF(3, 4);

/* s as the body of a JSON string on f: quotes, backslashes and control characters escaped
 * (the JSON log lines, and the executor's late-data files). */
void sd_json_put_string(FILE *f, const char *s);

/* Write JSON lines instead of text (`sundial --log_kind json`). Thread-safe. */
void sd_log_set_json(int on);

#define SD_DEBUG(mod, ...) sd_log(SD_LOG_DEBUG, mod, __VA_ARGS__)
#define SD_INFO(mod, ...)  sd_log(SD_LOG_INFO, mod, __VA_ARGS__)
#define SD_WARN(mod, ...)  sd_log(SD_LOG_WARN, mod, __VA_ARGS__)
#define SD_ERROR(mod, ...) sd_log(SD_LOG_ERROR, mod, __VA_ARGS__)

#endif
