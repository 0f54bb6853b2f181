/*
 * Sundial: assembling a runner instance.
 *
 * The job service, the Fn API and the executor share one gRPC server, one completion queue
 * and one libev loop, so a job submitted over the Job API and the SDK workers it starts all
 * talk to the same port. `sundial serve` runs one of these on libev's default loop; the
 * embedded runner (embed.c) runs one on a private loop in a background thread.
 *
 * Teardown order matters: the web UI (if served) stops first, since it reads the executor;
 * then jobs are cancelled (their workers' streams end with OK, which
 * the TypeScript SDK needs), then the server stops accepting calls and cancels stragglers after
 * a grace period, and only when every call has closed are the services and the hub freed.
 */
#include "runner/server/server.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/bg.h"
#include "runner/base/fs.h"
#include "runner/base/log.h"
#include "runner/exec/exec.h"
#include "runner/fnapi/fnapi.h"
#include "runner/jobservice/jobservice.h"
#include "runner/transport/rpc.h"
#include "runner/web/web.h"

/* Threads checking and planning pipelines off the loop thread (runner/base/bg.h). */
#define SD_SERVER_BG_THREADS 2

struct sd_server {
    sd_rpc *rpc;
    sd_bg *bg;
    sd_rpc_server *srv;
    sd_jobsvc *jobs;
    sd_fnapi *fn;
    sd_exec *ex;
    sd_web *web; /* NULL when the web UI is not served */
    char endpoint[300];
    char *owned_dir; /* the private artifact directory made at start; removed at destroy */
    bool shutting_down;
    void (*done)(void *ctx);
    void *done_ctx;
};

static void close_fd(int fd)
{
    if (fd >= 0) {
        (void)close(fd);
    }
}

static sd_status post_to_loop(void *ctx, void (*fn)(void *ctx), void *arg)
{
    return sd_rpc_run_on_loop(ctx, fn, arg);
}

/* A configured limit: 0 = the default, SIZE_MAX = none (the job service's 0). */
static size_t limit(size_t configured, size_t dflt)
{
    if (configured == 0) {
        return dflt;
    }
    return configured == SIZE_MAX ? 0 : configured;
}

sd_status
sd_server_create(struct ev_loop *loop, const sd_server_config *cfg, sd_server **out, sd_err *err)
{
    sd_server *s = sd_calloc(1, sizeof(*s));
    const char *host = cfg->host != NULL ? cfg->host : "127.0.0.1";
    char addr[300];
    char artifacts[512];
    int bound = 0;
    sd_status st;

    int early = cfg->have_listen_fd ? cfg->listen_fd : -1;
    if (s == NULL) {
        close_fd(early);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    st = sd_rpc_create(loop, &s->rpc, err);
    if (st != SD_OK) {
        close_fd(early);
        sd_free(s);
        return st;
    }
    st = sd_bg_create(SD_SERVER_BG_THREADS, post_to_loop, s->rpc, &s->bg);
    if (st != SD_OK) {
        close_fd(early);
        sd_rpc_destroy(s->rpc);
        sd_free(s);
        return sd_err_set(err, st, "out of memory");
    }
    st = sd_rpc_server_create(s->rpc, &s->srv, err);
    if (st != SD_OK) {
        close_fd(early);
        sd_bg_close(s->bg);
        sd_rpc_destroy(s->rpc);
        sd_free(s);
        return st;
    }
    snprintf(addr, sizeof(addr), "%s:%d", host, cfg->port);
    if (early >= 0) {
        /* Bound and listening since the process started (main.c); the server takes it. */
        st = sd_rpc_server_adopt(s->srv, early, err);
        bound = cfg->port;
    } else {
        st = sd_rpc_server_listen(s->srv, addr, &bound, err);
    }
    if (st != SD_OK) {
        sd_err_prefix(err, "cannot listen on %s: ", addr);
        goto fail;
    }
    snprintf(s->endpoint, sizeof(s->endpoint), "%s:%d", host, bound);
    /* Artifacts: the directory given, checked to be ours alone, or a fresh private one. */
    if (cfg->artifact_dir != NULL && cfg->own_artifact_dir) {
        s->owned_dir = sd_strdup(cfg->artifact_dir);
        if (s->owned_dir == NULL) {
            st = sd_err_set(err, SD_ENOMEM, "out of memory");
            goto fail;
        }
        snprintf(artifacts, sizeof(artifacts), "%s", s->owned_dir);
    } else if (cfg->artifact_dir != NULL) {
        st = sd_private_dir(cfg->artifact_dir, err);
        if (st != SD_OK) {
            sd_err_prefix(err, "--artifacts_dir: ");
            goto fail;
        }
        snprintf(artifacts, sizeof(artifacts), "%s", cfg->artifact_dir);
    } else {
        st = sd_private_tmpdir("sundial", &s->owned_dir, err);
        if (st != SD_OK) {
            goto fail;
        }
        snprintf(artifacts, sizeof(artifacts), "%s", s->owned_dir);
    }
    st = sd_fnapi_create(s->rpc, &s->fn, err);
    if (st != SD_OK) {
        goto fail;
    }
    sd_exec_config ecfg = { 0 };
    ecfg.endpoint = s->endpoint;
    ecfg.wall_clock = cfg->wall_clock;
    ecfg.max_bundle_bytes = cfg->max_bundle_bytes;
    ecfg.hang_timeout_s = cfg->hang_timeout_s;
    ecfg.stall_timeout_s = cfg->stall_timeout_s;
    ecfg.livelock_rounds = cfg->livelock_rounds;
    ecfg.memory_limit = cfg->memory_limit;
    ecfg.spill_dir = cfg->spill_dir;
    ecfg.record_schedule_dir = cfg->record_schedule_dir;
    ecfg.replay_schedule = cfg->replay_schedule;
    ecfg.bg = s->bg;
    st = sd_exec_create(s->rpc, s->fn, &ecfg, &s->ex, err);
    if (st != SD_OK) {
        goto fail;
    }
    sd_job_hooks hooks = sd_exec_job_hooks(s->ex);
    st = sd_jobsvc_create(s->rpc, &hooks, artifacts, &s->jobs, err);
    if (st == SD_OK) {
        sd_jobsvc_set_history(s->jobs, cfg->job_history > 0 ? (size_t)cfg->job_history
                                                            : SD_JOB_HISTORY_DEFAULT);
        if (cfg->job_history_ttl_s != 0) {
            sd_jobsvc_set_history_ttl(
                s->jobs, cfg->job_history_ttl_s < 0 ? 0 : (sd_time)(cfg->job_history_ttl_s * 1000));
        }
        sd_jobsvc_set_limits(
            s->jobs, limit(cfg->max_pipeline_bytes, SD_MAX_PIPELINE_BYTES_DEFAULT),
            limit(cfg->max_pipeline_transforms, SD_MAX_PIPELINE_TRANSFORMS_DEFAULT));
        sd_jobsvc_set_background(s->jobs, s->bg);

        st = sd_jobsvc_register(s->jobs, s->srv, s->endpoint);
        if (st != SD_OK) {
            sd_err_set(err, st, "cannot register the job service");
        }
    }
    if (st == SD_OK) {
        st = sd_fnapi_register(s->fn, s->srv, err);
    }
    if (st == SD_OK && cfg->serve_http) {
        /* The web UI binds the job port's host; it reads the job service and the executor. */
        sd_web_config wc = { .host = host, .port = cfg->web_port, .jobs = s->jobs, .exec = s->ex };
        sd_err werr;
        sd_err_clear(&werr);
        st = sd_web_create(loop, &wc, &s->web, &werr);
        if (st != SD_OK && cfg->web_optional) {
            SD_WARN("server", "%s; serving without a web UI", sd_err_msg(&werr));
            st = SD_OK;
        } else if (st != SD_OK) {
            sd_err_set(err, st, "%s", sd_err_msg(&werr));
        }
    }
    if (st == SD_OK) {
        st = sd_rpc_server_start(s->srv, err);
    }
    if (st != SD_OK) {
        goto fail;
    }
    *out = s;
    return SD_OK;
fail:
    sd_web_destroy(s->web);
    sd_exec_destroy(s->ex);
    s->ex = NULL;
    /* A bound but never started server must still go through shutdown before destroy. */
    sd_rpc_server_shutdown(s->srv, 0, NULL, NULL);
    s->srv = NULL;
    sd_jobsvc_destroy(s->jobs);
    sd_bg_close(s->bg);
    sd_fnapi_destroy(s->fn);
    sd_rpc_destroy(s->rpc);
    if (s->owned_dir != NULL) {
        sd_rmtree(s->owned_dir);
        sd_free(s->owned_dir);
    }
    sd_free(s);
    return st;
}

const char *sd_server_endpoint(const sd_server *s)
{
    return s->endpoint;
}

const char *sd_server_web_url(const sd_server *s)
{
    return s->web != NULL ? sd_web_url(s->web) : NULL;
}

void sd_server_job_counts(const sd_server *s, size_t *out_total, size_t *out_active)
{
    if (out_total != NULL) {
        *out_total = sd_jobsvc_job_count(s->jobs);
    }
    if (out_active != NULL) {
        *out_active = sd_jobsvc_active_count(s->jobs);
    }
}

static void server_closed(void *ctx)
{
    sd_server *s = ctx;
    s->srv = NULL;
    if (s->done != NULL) {
        s->done(s->done_ctx);
    }
}

void sd_server_shutdown(sd_server *s, int grace_ms, void (*done)(void *ctx), void *ctx)
{
    if (s->shutting_down) {
        return;
    }
    s->shutting_down = true;
    s->done = done;
    s->done_ctx = ctx;
    /* First the web UI: it reads the executor, which goes next. */
    sd_web_destroy(s->web);
    s->web = NULL;
    /* Prepares still being checked are answered now, so no call waits out the grace. */
    sd_jobsvc_close(s->jobs);
    sd_exec_destroy(s->ex);
    s->ex = NULL;
    sd_rpc_server_shutdown(s->srv, grace_ms, server_closed, s);
}

void sd_server_destroy(sd_server *s)
{
    if (s == NULL) {
        return;
    }
    sd_web_destroy(s->web);
    sd_exec_destroy(s->ex);
    sd_jobsvc_destroy(s->jobs);
    /* After every submitter is gone: work still running only frees what it owns. */
    sd_bg_close(s->bg);
    sd_fnapi_destroy(s->fn);
    sd_rpc_destroy(s->rpc);
    if (s->owned_dir != NULL) {
        sd_rmtree(s->owned_dir);
        sd_free(s->owned_dir);
    }
    sd_free(s);
}
