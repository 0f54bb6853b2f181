/*
 * Sundial C SDK: steer a running test-mode job's time from a test — pause, step, inspect. Part
 * of <sundial/sundial.h>, which includes it; it may also be included alone.
 *
 * A Sundial server's web UI answers a JSON API under /api/jobs/ID/ (`sundial serve --web_port
 * N`; the `sundial` command line serves it on 8074 by default). A job run with the pipeline
 * option beam:option:sundial_pause:v1 = "start" rests before its first event; the test then
 * moves its time one step at a time and reads its state in between, TopologyTestDriver-style:
 *
 *     // thread A: sd_pipeline_run(p, &opts, ...) with opts naming the server and
 *     //           "beam:option:sundial_pause:v1" = "start"
 *     // thread B:
 *     sd_job_control *job;
 *     sd_job_control_open(web_url, "my-job", 30000, &job, &err);   // waits until it rests
 *     sd_job_control_step_for(job, 59 * 60000, &err);              // waits until it rests
 *     sd_job_control_get(job, "state", "stage=Groups&key=alice", &json, &err);
 *     sd_job_control_step_for(job, 2 * 60000, &err);
 *     sd_job_control_resume(job, &err);
 *     sd_job_control_close(job);
 *
 * Plain HTTP/1.1 on a TCP socket; every call blocks. Thread-safe for distinct handles.
 */
#ifndef SD_SUNDIAL_CONTROL_H
#define SD_SUNDIAL_CONTROL_H

#include <stdint.h>
#include <sundial/bytes.h>
#include <sundial/err.h>
#include <sundial/export.h>
#include <sundial/status.h>
#include <sundial/time.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_job_control sd_job_control;

/*
 * The newest job named job_name on the server whose web UI is web_url ("http://HOST:PORT/"),
 * once it is running and at rest (paused; or ended), waiting up to timeout_ms. OUT: *out
 * (close with sd_job_control_close). SD_ENOTFOUND (no such job in time), SD_EIO (the server
 * cannot be reached, or the job did not come to rest in time), SD_EINVAL (a bad URL or name),
 * SD_ENOMEM.
 */
SD_API SD_MUST_CHECK sd_status sd_job_control_open(const char *web_url,
                                                   const char *job_name,
                                                   int timeout_ms,
                                                   sd_job_control **out,
                                                   sd_err *err);

/* The job id ("job-001"), borrowed until close. */
SD_API const char *sd_job_control_id(const sd_job_control *c);

/* Steps; each returns once the job rests again or has ended (up to the open's timeout).
 * The server's refusal (not paused, a wall-clock job, a bad argument) is the error. */
SD_API SD_MUST_CHECK sd_status sd_job_control_step_events(sd_job_control *c,
                                                          uint64_t n,
                                                          sd_err *err);
SD_API SD_MUST_CHECK sd_status sd_job_control_step_for(sd_job_control *c, int64_t ms, sd_err *err);
SD_API SD_MUST_CHECK sd_status sd_job_control_step_to_watermark(sd_job_control *c,
                                                                const char *pcollection,
                                                                sd_time watermark,
                                                                sd_err *err);
/* Pause now (waits until the job rests), or let it run on. */
SD_API SD_MUST_CHECK sd_status sd_job_control_pause(sd_job_control *c, sd_err *err);
SD_API SD_MUST_CHECK sd_status sd_job_control_resume(sd_job_control *c, sd_err *err);

/*
 * Read one of the job's documents as JSON, appended to out with a terminating NUL: "pause"
 * (the gate, clock, stages' watermarks and holds), "timers", "state", "elements"; query is
 * the request's query string ("stage=Groups&key=alice", "pcollection=Out"; NULL: none; the
 * caller escapes it). The server's refusal is the error.
 */
SD_API SD_MUST_CHECK sd_status sd_job_control_get(sd_job_control *c,
                                                  const char *what,
                                                  const char *query,
                                                  sd_buf *out,
                                                  sd_err *err);

SD_API void sd_job_control_close(sd_job_control *c);

#ifdef __cplusplus
}
#endif

#endif
