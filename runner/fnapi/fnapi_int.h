/* Sundial: Fn API internals for the module's tests and fuzz targets. */
#ifndef SD_RUNNER_FNAPI_FNAPI_INT_H
#define SD_RUNNER_FNAPI_FNAPI_INT_H

#include "runner/base/buf.h"
#include "runner/fnapi/fnapi.h"

/* The four streams a worker sends messages on. */
typedef enum sd__fn_stream {
    SD__FN_CONTROL, /* InstructionResponse */
    SD__FN_DATA,    /* Elements (data and timers) */
    SD__FN_STATE,   /* StateRequest */
    SD__FN_LOGGING  /* LogEntry.List */
} sd__fn_stream;

/*
 * The seam under the stream handlers: decode msg as the message of stream `kind` and dispatch
 * it exactly as a message arriving on that stream is (to the pending instruction's callback or
 * the worker's hooks; bytes that do not parse lose the worker, except on Logging, where they
 * are ignored). The gRPC handlers call the same code, so a fuzz target that delivers bytes
 * here exercises what a worker's messages reach. Loop thread. Does nothing for NULL or a
 * stopped, lost or destroyed worker. The worker may be destroyed by a hook meanwhile.
 */
void sd__fnapi_worker_deliver(sd_fnapi_worker *w, sd__fn_stream kind, sd_bytes msg);

/* The worker registered under worker_id, or NULL. Borrowed. */
sd_fnapi_worker *sd__fnapi_worker_get(sd_fnapi *fn, const char *worker_id);

#endif
