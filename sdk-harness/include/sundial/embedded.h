/*
 * Sundial C SDK: the contract between the SDK and the embedded runner.
 *
 * sd_pipeline_run without an endpoint runs the pipeline on a Sundial runner inside the
 * process. That runner (job service, planner, engine, Fn API server) is not part of
 * libsundial: it is libsundial_embedded (CMake Sundial::embedded, pkg-config
 * sundial-embedded), which defines the one object below. The SDK never links it; it finds it
 *
 *   1. in the program itself, when the program was linked with Sundial::embedded (a weak
 *      reference to sd_embedded_runner_v1, so the SDK links with or without it);
 *   2. otherwise as libsundial_embedded.so.N next to libsundial.so.N, loaded on first use.
 *
 * A worker started by a distributed runner (Flink, Dataflow) needs neither: it is only the
 * SDK. Programs do not call these functions; they are here so that the two libraries agree.
 */
#ifndef SD_SUNDIAL_EMBEDDED_H
#define SD_SUNDIAL_EMBEDDED_H

#include <stdbool.h>
#include <stdint.h>
#include <sundial/err.h>
#include <sundial/export.h>
#include <sundial/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever sd_embedded_runner changes shape. */
#define SD_EMBEDDED_RUNNER_ABI 1u

typedef struct sd_embedded_runner {
    uint32_t abi; /* SD_EMBEDDED_RUNNER_ABI of the library that defines it */
    /*
     * Start a runner on a loopback port (test-mode clock unless wall_clock). OUT: *handle
     * (stop it with stop) and *endpoint ("127.0.0.1:PORT", valid until stop). Thread-safe.
     */
    sd_status (*start)(bool wall_clock, void **handle, const char **endpoint, sd_err *err);
    /* Cancel its jobs, stop it and free it. NULL is a no-op. Blocks. */
    void (*stop)(void *handle);
} sd_embedded_runner;

/* Defined by libsundial_embedded. */
SD_API extern const sd_embedded_runner sd_embedded_runner_v1;

#ifdef __cplusplus
}
#endif

#endif
