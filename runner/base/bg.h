/* Sundial: heavy work off the loop thread — a few worker threads, completions on the loop. */
#ifndef SD_RUNNER_BASE_BG_H
#define SD_RUNNER_BASE_BG_H

#include <stdbool.h>

#include "runner/base/status.h"

/*
 * Everything the servers do runs on one loop thread, so one slow request (planning a pipeline
 * of a million transforms) would stall every other client. sd_bg runs such work on a small
 * pool of threads and hands each result back to the loop thread:
 *
 *   loop: sd_bg_submit(bg, work, done, arg)
 *   pool thread: work(arg)                        -- may only touch what arg owns or pins
 *   loop: done(arg, false)                        -- through post(), the loop's own queue
 *
 * post is how a thread asks the loop to call fn(ctx) soon (the transport's
 * sd_rpc_run_on_loop); it must be safe from any thread. With post == NULL there is no pool:
 * sd_bg_submit runs work and done(arg, false) at once on the caller's thread (unit tests, and
 * callers without a loop).
 *
 * Closing abandons what is not yet delivered: queued items get done(arg, true) at once on the
 * closing thread; an item whose work is running gets done(arg, true) on its pool thread when
 * the work returns. done(arg, true) must only release what arg owns, nothing else: the
 * submitter may be gone. Close never waits for running work (a server told to stop must stop
 * within a second), so work must not read memory that its submitter frees on close; see
 * sd_job_pin for how the job service keeps a pipeline alive under a running reader.
 */
typedef struct sd_bg sd_bg;

typedef sd_status (*sd_bg_post_fn)(void *post_ctx, void (*fn)(void *ctx), void *ctx);

/* OUT: out. threads >= 1 (started on demand). post may be NULL (synchronous). SD_ENOMEM. */
SD_MUST_CHECK sd_status sd_bg_create(unsigned threads,
                                     sd_bg_post_fn post,
                                     void *post_ctx,
                                     sd_bg **out);

/*
 * Queue work(arg) and later done(arg, abandoned) as described above. Loop thread only.
 * SD_ESTATE after sd_bg_close, SD_ENOMEM; on error neither callback runs.
 */
SD_MUST_CHECK sd_status sd_bg_submit(sd_bg *bg,
                                     void (*work)(void *arg),
                                     void (*done)(void *arg, bool abandoned),
                                     void *arg);

/* Items submitted and not yet delivered (queued, running or waiting for the loop). */
unsigned sd_bg_pending(const sd_bg *bg);

/*
 * Abandon everything not yet delivered and release bg (its memory goes with the last pool
 * thread). Loop thread only; NULL is ignored.
 */
void sd_bg_close(sd_bg *bg);

#endif
