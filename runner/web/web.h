/* Sundial: the web UI — jobs, stages, watermarks and a watermark timeline over HTTP. */
#ifndef SD_RUNNER_WEB_WEB_H
#define SD_RUNNER_WEB_WEB_H

#include "runner/base/err.h"
#include "runner/exec/exec.h"
#include "runner/jobservice/jobservice.h"

struct ev_loop;

typedef struct sd_web sd_web;

typedef struct sd_web_config {
    const char *host; /* address to bind ("127.0.0.1", "::1", "localhost", ...); NULL = loopback */
    int port;         /* 0 = a free port */
    sd_jobsvc *jobs;  /* borrowed; must outlive the web server */
    sd_exec *exec;    /* borrowed; must outlive the web server (NULL: recorded views only) */
} sd_web_config;

/*
 * Serve the web UI on cfg->host:cfg->port from `loop` (libmicrohttpd without threads of its
 * own: its epoll descriptor is an ev_io and its timeout an ev_timer, so every request is
 * answered on the loop thread, where the job service and the executor live).
 *
 *   GET  /, /job/ID                the pages (HTML; app.js and style.css beside them)
 *   GET  /api/jobs                 [{id, name, state, created, started, ended, duration_ms}]
 *   GET  /api/jobs/ID[?after=SEQ]  the job, its messages after SEQ, and its stages (view)
 *   GET  /api/jobs/ID/timeline[?gen=G&after=SEQ]   samples and marks (only newer ones when
 *                                  G is still the timeline's generation)
 *   GET  /api/jobs/ID/trace[?stage=S&kind=K,...&after=SEQ&wall=0]   the engine's time trace
 *                                  of the job (exec_trace.c): its records, filtered
 *   POST /api/jobs/ID/cancel       Cancel, as the Job API does it
 *   POST /api/jobs/ID/drain        Drain, as the Job API does it (409: the job cannot drain)
 *   GET  /api/jobs/ID/pause, /timers, /state, /elements   a test-mode job's gate, timers,
 *                                  user state and delivered elements (sd_exec_control)
 *   POST /api/jobs/ID/pause, /step, /resume   pause, step, resume (runner/exec/exec_pause.c)
 *
 * POSTs must carry the header "X-Sundial-Action: 1" (a page of another site cannot add it
 * without a CORS preflight, which is refused), and when bound to loopback the Host header
 * must name a loopback host (no DNS rebinding). OUT: out (caller owns; sd_web_destroy).
 * Errors: SD_EIO naming the address when it cannot bind; SD_EINVAL for a host that does not
 * resolve; SD_ENOMEM. Loop thread.
 */
SD_MUST_CHECK sd_status sd_web_create(struct ev_loop *loop,
                                      const sd_web_config *cfg,
                                      sd_web **out,
                                      sd_err *err);

/* "http://HOST:PORT/" with the bound port. Borrowed. */
const char *sd_web_url(const sd_web *w);

/* The bound port. */
int sd_web_port(const sd_web *w);

/* Stop serving (open connections are closed) and free. NULL is a no-op. Loop thread. */
void sd_web_destroy(sd_web *w);

#endif
