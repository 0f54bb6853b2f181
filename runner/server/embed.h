/* Sundial: an in-process runner for tests and SDK programs. */
#ifndef SD_RUNNER_SERVER_EMBED_H
#define SD_RUNNER_SERVER_EMBED_H

#include "runner/base/err.h"
#include "runner/server/server.h"

typedef struct sd_embedded sd_embedded;

/*
 * Start a runner on its own libev loop in a background thread (default: 127.0.0.1, free
 * port, synthetic clock). Returns once it accepts connections. cfg may be NULL.
 * OUT: out (caller owns; stop with sd_embedded_stop). Thread-safe.
 */
SD_MUST_CHECK sd_status sd_embedded_start(const sd_server_config *cfg,
                                          sd_embedded **out,
                                          sd_err *err);

/* "127.0.0.1:PORT". Borrowed, valid until sd_embedded_stop. */
const char *sd_embedded_endpoint(const sd_embedded *e);

/* Cancel running jobs, stop the server, join the thread, free. Blocks. NULL: no-op. */
void sd_embedded_stop(sd_embedded *e);

#endif
