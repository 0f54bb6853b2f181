/*
 * Sundial C SDK: a runner kept for many runs. Part of <sundial/sundial.h>, which includes it;
 * it may also be included alone.
 *
 * sd_pipeline_run without an endpoint starts an embedded runner for the run and stops it after
 * (a few milliseconds each time). A test suite that runs many small pipelines can start one
 * runner, give its endpoint to every run (sd_run_options.endpoint), and stop it at the end:
 *
 *     sd_local_runner *r;
 *     if (sd_local_runner_start(false, &r, &err) != SD_OK) ...
 *     sd_run_options o = { .endpoint = sd_local_runner_endpoint(r) };
 *     ... sd_pipeline_run(p1, &o, NULL, &err); sd_pipeline_run(p2, &o, NULL, &err); ...
 *     sd_local_runner_stop(r);
 *
 * Its jobs are independent (each has its own clock, state and workers); the runner keeps a
 * bounded history of ended jobs and removes their artifacts as they end.
 */
#ifndef SD_SUNDIAL_RUNNER_H
#define SD_SUNDIAL_RUNNER_H

#include <stdbool.h>
#include <sundial/err.h>
#include <sundial/export.h>
#include <sundial/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_local_runner sd_local_runner;

/*
 * Start an embedded Sundial runner on a loopback port: test mode (synthetic clock) unless
 * wall_clock. Needs the embedded runner (Sundial::embedded, or libsundial_embedded beside
 * libsundial): SD_EUNAVAIL naming what to link otherwise. OUT: *out (stop it with
 * sd_local_runner_stop). Thread-safe.
 */
SD_API SD_MUST_CHECK sd_status sd_local_runner_start(bool wall_clock,
                                                     sd_local_runner **out,
                                                     sd_err *err);

/* Its job endpoint, "127.0.0.1:PORT" (valid until stopped); NULL for NULL. */
SD_API const char *sd_local_runner_endpoint(const sd_local_runner *r);

/* Cancel its jobs, stop it and free it (runs using it must have returned). NULL is a no-op. */
SD_API void sd_local_runner_stop(sd_local_runner *r);

#ifdef __cplusplus
}
#endif

#endif
