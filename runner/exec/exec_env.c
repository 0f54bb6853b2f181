/*
 * Sundial: executor: environments, i.e. launching and stopping SDK workers.
 *
 * One worker per environment an SDK stage runs in. sd__exec_env_start() first registers the
 * worker with the Fn API (sd_fnapi_worker_create, with its ProvisionInfo and the descriptors
 * of its stages) under a worker id that is readable for logs and unguessable for access
 * ("JOB-ENV-wN-TOKEN"), then starts it by the environment's URN:
 *
 *   beam:env:external:v1   StartWorker on the worker pool named in the ExternalPayload; the
 *                          pool may answer after the job ended (sd_exec_start_call)
 *   beam:env:process:v1    fork + exec of the ProcessPayload's command with the endpoint flags;
 *                          reaped with ev_child on libev's default loop, polled elsewhere; its
 *                          stderr is a pipe the loop forwards to the server's stderr, keeping
 *                          the last SD_EXEC_STDERR_TAIL bytes for the job's error when it
 *                          exits, is lost or never connects (a JVM that cannot start says why
 *                          there and nowhere else)
 *   (test seam)            sd__exec_set_env_starter: the fuzz targets play the SDK themselves
 *
 * Anything else fails the job with SD_EUNIMPL; Prepare refuses it before that (the planner
 * names every environment it cannot start, and sd__exec_env_check what a PROCESS or EXTERNAL
 * payload lacks: a command that is not there, a pool without an address). Stopping is the
 * reverse: destroy the Fn API worker (its streams end gracefully), StopWorker on the pool, or
 * TERM (and CONT, for a stopped process), a short wait, then KILL and reap. A worker that exits, is
 * lost, or never opens its control stream within worker_connect_timeout_s fails its job; its ERROR
 * logs become WARNING job messages (see on_worker_log for why).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/rand.h"
#include "runner/exec/exec_int.h"
#include "runner/urns/urns.h"

/* ================================================================ environments */

/*
 * Worker pools. A job with an external environment asks the pool at its URL to start a
 * worker. The channel to it is the executor's, kept after the job (at most MAX_IDLE_POOLS
 * idle ones, the least recently used closed first), so the next job of the same pool — a test
 * suite's every pipeline — starts its worker on a connection that is already up. A pool whose
 * StartWorker failed is not reused: its channel closes once no job uses it, and the next job
 * connects afresh.
 */
#define MAX_IDLE_POOLS 8

typedef struct sd_exec_pool {
    char *url;
    sd_rpc_channel *ch;
    unsigned users;   /* environments using it */
    unsigned pending; /* StopWorker calls not answered yet: the channel stays until they are */
    uint64_t used;    /* ex->pool_seq when last taken (least recently used goes first) */
    bool broken;      /* a StartWorker on it failed, or a StopWorker found it gone */
    unsigned started; /* StartWorker calls sent on its channel */
    bool orphan;      /* broken and replaced in ex->pools: closed when its last user is done */
    bool closing;     /* out of ex->pools, freed by the last StopWorker's answer */
} sd_exec_pool;

/* Close p (no user left): out of ex->pools (unless orphaned), its channel destroyed now or,
 * while a StopWorker is on its way, by that call's answer. */
static void pool_close(sd_exec *ex, sd_exec_pool *p)
{
    if (!p->orphan) {
        sd_map_remove(&ex->pools, sd_bytes_str(p->url));
    }
    if (p->pending > 0) {
        p->closing = true;
        return;
    }
    sd_rpc_channel_destroy(p->ch);
    sd_free(p->url);
    sd_free(p);
}

/* Close idle pools beyond MAX_IDLE_POOLS, and every idle broken one. */
static void pools_trim(sd_exec *ex)
{
    for (;;) {
        size_t it = 0, idle = 0;
        void *v;
        sd_exec_pool *oldest = NULL, *broken = NULL;
        while (sd_map_next(&ex->pools, &it, NULL, &v)) {
            sd_exec_pool *p = v;
            if (p->users > 0) {
                continue;
            }
            idle++;
            broken = p->broken ? p : broken;
            oldest = oldest == NULL || p->used < oldest->used ? p : oldest;
        }
        if (broken != NULL) {
            pool_close(ex, broken);
        } else if (idle > MAX_IDLE_POOLS) {
            pool_close(ex, oldest);
        } else {
            return;
        }
    }
}

static sd_status pool_take(sd_exec *ex, const char *url, sd_exec_pool **out, sd_err *err)
{
    sd_exec_pool *p = sd_map_get_str(&ex->pools, url);
    if (p != NULL && p->broken) {
        /* A fresh connection; the broken one closes when its users are done. */
        if (p->users == 0) {
            pool_close(ex, p);
        } else {
            sd_map_remove(&ex->pools, sd_bytes_str(url));
            p->orphan = true;
        }
        p = NULL;
    }
    if (p == NULL) {
        p = sd_calloc(1, sizeof(*p));
        if (p == NULL || (p->url = sd_strdup(url)) == NULL) {
            sd_free(p);
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        sd_status st = sd_rpc_channel_create(ex->rpc, url, &p->ch, err);
        if (st == SD_OK && (st = sd_map_put_str(&ex->pools, url, p)) != SD_OK) {
            sd_rpc_channel_destroy(p->ch);
            st = sd_err_set(err, SD_ENOMEM, "out of memory");
        }
        if (st != SD_OK) {
            sd_free(p->url);
            sd_free(p);
            return st;
        }
    }
    p->users++;
    p->used = ++ex->pool_seq;
    *out = p;
    return SD_OK;
}

static void pool_release(sd_exec *ex, sd_exec_pool *p)
{
    if (--p->users > 0) {
        return;
    }
    if (p->orphan) {
        pool_close(ex, p);
        return;
    }
    pools_trim(ex);
}

void sd__exec_pools_close(sd_exec *ex)
{
    for (;;) {
        size_t it = 0;
        void *v;
        if (!sd_map_next(&ex->pools, &it, NULL, &v)) {
            break;
        }
        pool_close(ex, v);
    }
    sd_map_deinit(&ex->pools);
}

static void env_stop_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    sd_exec_pool *p = ctx;
    (void)response;
    if (code != SD_RPC_OK) {
        SD_DEBUG("exec", "StopWorker: %s", message);
    }
    if (code == SD_RPC_UNAVAILABLE) {
        /* The pool is gone (its client tore it down): the next job to name its address
         * connects afresh rather than on a channel backing off from the refused connection. */
        p->broken = true;
    }
    if (--p->pending == 0 && p->closing) {
        sd_rpc_channel_destroy(p->ch);
        sd_free(p->url);
        sd_free(p);
    }
}

/* ---------------------------------------------------------------- a worker's stderr */

/* Keep the last SD_EXEC_STDERR_TAIL bytes of what the worker wrote. */
static void err_keep(sd_exec_env *e, const char *p, size_t n)
{
    const size_t cap = sizeof(e->err_tail);
    if (n >= cap) {
        memcpy(e->err_tail, p + (n - cap), cap);
        e->err_len = cap;
        return;
    }
    if (e->err_len + n > cap) {
        size_t drop = e->err_len + n - cap;
        memmove(e->err_tail, e->err_tail + drop, e->err_len - drop);
        e->err_len -= drop;
    }
    memcpy(e->err_tail + e->err_len, p, n);
    e->err_len += n;
}

static void err_close(sd_exec_env *e)
{
    if (e->err_active) {
        ev_io_stop(e->r->ex->loop, &e->err_io);
        e->err_active = false;
    }
    if (e->err_fd >= 0) {
        close(e->err_fd);
        e->err_fd = -1;
    }
}

/* Read what the pipe holds now (it is non-blocking): forwarded to the server's stderr, where a
 * worker's output always went, and kept. Closes the pipe at its end. */
static void err_drain(sd_exec_env *e)
{
    char buf[4096];
    while (e->err_fd >= 0) {
        ssize_t n = read(e->err_fd, buf, sizeof(buf));
        if (n > 0) {
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(STDERR_FILENO, buf + off, (size_t)(n - off));
                if (w <= 0 && errno != EINTR) {
                    break; /* the server's stderr is gone: the tail is still kept */
                }
                off += w > 0 ? w : 0;
            }
            err_keep(e, buf, (size_t)n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                err_close(e);
            }
            return;
        }
    }
}

static void err_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    err_drain(w->data);
}

/* "; its stderr ended with:\n..." (the last lines of the tail), or "" when it wrote nothing.
 * Owned by the caller (sd_free); NULL when out of memory. */
static char *err_suffix(sd_exec_env *e)
{
    err_drain(e);
    size_t len = e->err_len;
    while (len > 0 && (e->err_tail[len - 1] == '\n' || e->err_tail[len - 1] == '\r')) {
        len--;
    }
    size_t start = 0;
    if (len == sizeof(e->err_tail)) {
        /* The kept bytes start mid-line: from the first whole line on. */
        const char *nl = memchr(e->err_tail, '\n', len);
        start = nl != NULL ? (size_t)(nl - e->err_tail) + 1 : 0;
    }
    if (start >= len) {
        return sd_strdup("");
    }
    return sd_asprintf("; its stderr ended with:\n%.*s", (int)(len - start), e->err_tail + start);
}

static void child_exited(sd_exec_env *e, int status)
{
    e->exited = true;
    if (e->r != NULL && !e->r->finishing) {
        char *tail = err_suffix(e);
        const char *t = tail != NULL ? tail : "";
        if (WIFEXITED(status)) {
            sd__exec_run_fail(
                e->r, "SDK worker process for environment %s (pid %d) exited with status %d%s",
                e->env_id, (int)e->pid, WEXITSTATUS(status), t);
        } else if (WIFSIGNALED(status)) {
            sd__exec_run_fail(
                e->r, "SDK worker process for environment %s (pid %d) killed by signal %d%s",
                e->env_id, (int)e->pid, WTERMSIG(status), t);
        }
        sd_free(tail);
    }
}

static void child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
    sd_exec_env *e = w->data;
    (void)revents;
    ev_child_stop(loop, w);
    e->child_active = false;
    child_exited(e, w->rstatus);
}

static void child_poll_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    sd_exec_env *e = w->data;
    int status = 0;
    (void)revents;
    if (waitpid(e->pid, &status, WNOHANG) == e->pid) {
        ev_timer_stop(loop, w);
        e->poll_active = false;
        child_exited(e, status);
    }
}

void sd__exec_env_stop(sd_exec_env *e)
{
    sd_exec *ex = e->r->ex;
    if (e->worker != NULL) {
        sd_fnapi_worker_destroy(e->worker);
        e->worker = NULL;
    }
    if (e->kind == ENV_EXTERNAL && e->pool_ref != NULL) {
        /* StopWorker on the executor's channel, which stays for the pool's next job. */
        pb_StopWorkerRequest req =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STOP_WORKER_REQUEST__INIT;
        sd_buf packed;
        sd_buf_init(&packed, 0);
        req.worker_id = e->worker_id;
        e->pool_ref->pending++;
        if (sd_fnapi_pb_pack(&req.base, &packed) != SD_OK ||
            sd_rpc_unary(e->pool, SD_PATH_STOP_WORKER, sd_buf_bytes(&packed), NULL, 0, 5000,
                         env_stop_done, e->pool_ref, NULL) != SD_OK) {
            e->pool_ref->pending--;
            SD_DEBUG("exec", "StopWorker for %s: not sent", e->worker_id);
        }
        sd_buf_deinit(&packed);
        pool_release(ex, e->pool_ref);
        e->pool_ref = NULL;
        e->pool = NULL;
    }
    if (e->lost_active) {
        ev_timer_stop(ex->loop, &e->lost_grace);
        e->lost_active = false;
    }
    err_close(e);
    if (e->kind == ENV_PROCESS && e->pid > 0 && !e->exited) {
        kill(e->pid, SIGTERM);
        /* A stopped (SIGSTOP, hung) worker would keep the TERM pending and cost the whole
         * wait below, on the loop thread, once per worker: let it run so it can act on it. */
        kill(e->pid, SIGCONT);
        if (e->child_active) {
            ev_child_stop(ex->loop, &e->child);
            e->child_active = false;
        }
        if (e->poll_active) {
            ev_timer_stop(ex->loop, &e->child_poll);
            e->poll_active = false;
        }
        /* Reap without blocking the loop for long: give it a moment, then SIGKILL. */
        for (int i = 0; i < 50; i++) {
            if (waitpid(e->pid, NULL, WNOHANG) == e->pid) {
                e->exited = true;
                break;
            }
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        if (!e->exited) {
            kill(e->pid, SIGKILL);
            waitpid(e->pid, NULL, 0);
            e->exited = true;
        }
    }
}

void sd__exec_env_destroy(sd_exec_env *e)
{
    if (e->start != NULL) {
        e->start->e = NULL;
    }
    sd_free(e->env_id);
    sd_free(e->worker_id);
    sd_free(e->pool_url);
    sd_free(e->lost_why);
    sd_free(e);
}

static sd_status send_start_worker(sd_exec_env *e, sd_err *err);

static void start_worker_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes resp)
{
    sd_exec_start_call *sc = ctx;
    sd_exec_env *e = sc->e;
    bool sc_reused = sc->reused;
    pb_StartWorkerResponse *r;
    sd_free(sc);
    if (e == NULL) {
        return; /* the job ended before the pool answered */
    }
    e->start = NULL;
    if (e->r == NULL || e->r->finishing) {
        return;
    }
    if (code != SD_RPC_OK) {
        if (e->pool_ref != NULL) {
            e->pool_ref->broken = true; /* the next job connects afresh */
        }
        /* A channel an earlier job used may be backing off from a pool that went away (a
         * client starts a pool per pipeline, and a new one may take the old one's port):
         * once, on a connection of its own. */
        sd_err rerr = { 0 };
        if (sc_reused && code == SD_RPC_UNAVAILABLE && e->pool_ref != NULL) {
            SD_INFO("exec",
                    "environment %s: StartWorker at %s on a reused connection failed (%s); "
                    "trying a new one",
                    e->env_id, e->pool_url, message);
            pool_release(e->r->ex, e->pool_ref);
            e->pool_ref = NULL;
            e->pool = NULL;
            if (send_start_worker(e, &rerr) == SD_OK) {
                return;
            }
            message = sd_err_msg(&rerr);
        }
        sd__exec_run_fail(e->r, "environment %s: StartWorker on the worker pool at %s failed: %s",
                          e->env_id, e->pool_url, message);
        return;
    }
    r = (pb_StartWorkerResponse *)protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__start_worker_response__descriptor, NULL,
        resp.len, resp.ptr);
    if (r == NULL) {
        sd__exec_run_fail(e->r, "environment %s: malformed StartWorkerResponse from %s", e->env_id,
                          e->pool_url);
        return;
    }
    if (r->error != NULL && r->error[0] != '\0') {
        sd__exec_run_fail(e->r, "environment %s: the worker pool at %s refused StartWorker: %s",
                          e->env_id, e->pool_url, r->error);
    } else {
        SD_DEBUG("exec", "job %s: StartWorker %s answered", e->r->job_id, e->worker_id);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* ---------------------------------------------------------------- worker hooks */

/* Reaps a PROCESS worker that has already exited (true), reporting it like the watcher would. */
static bool reap_now(sd_exec_env *e)
{
    int status = 0;
    if (e->exited || e->pid <= 0 || waitpid(e->pid, &status, WNOHANG) != e->pid) {
        return e->exited;
    }
    struct ev_loop *loop = e->r->ex->loop;
    if (e->child_active) {
        ev_child_stop(loop, &e->child);
        e->child_active = false;
    }
    if (e->poll_active) {
        ev_timer_stop(loop, &e->child_poll);
        e->poll_active = false;
    }
    child_exited(e, status);
    return true;
}

static void lost_grace_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    sd_exec_env *e = t->data;
    (void)loop;
    (void)revents;
    e->lost_active = false;
    /* Taken first: failing the run frees e (and used to free this message, which was then
     * freed again here: a use after free whenever the worker outlived the grace period). */
    char *why = e->lost_why;
    e->lost_why = NULL;
    if (!reap_now(e) && !e->r->finishing) {
        char *tail = err_suffix(e);
        sd__exec_run_fail(e->r, "%s%s", why, tail != NULL ? tail : "");
        sd_free(tail);
    }
    sd_free(why);
}

/*
 * A worker's stream ended. When it is a process we started, the usual cause is that it died,
 * and its exit status (pid, signal) says more than "the stream was cancelled": the kernel closes
 * a killed process's sockets just before its parent can reap it, so the stream's end often
 * arrives first. Reap it now if it is gone, else wait SD_EXEC_LOST_GRACE_S for the status
 * (child_exited fails the job then) before failing with the stream's reason.
 */
static void on_worker_lost(sd_fnapi_worker *w, const char *why, void *ctx)
{
    (void)w;
    (void)sd__exec_env_lost(ctx, why);
}

bool sd__exec_env_lost(sd_exec_env *e, const char *why)
{
    char msg[768];
    if (e->r->finishing || e->lost_active) {
        return e->lost_active;
    }
    snprintf(msg, sizeof(msg), "SDK worker %s (environment %s) lost: %s", e->worker_id, e->env_id,
             why);
    if (e->kind != ENV_PROCESS || e->pid <= 0 || e->exited) {
        sd__exec_run_fail(e->r, "%s", msg);
        return false;
    }
    if (reap_now(e)) {
        return true;
    }
    e->lost_why = sd_strdup(msg);
    if (e->lost_why == NULL) {
        sd__exec_run_fail(e->r, "%s", msg);
        return false;
    }
    SD_DEBUG("exec", "worker %s (pid %d): %s; waiting for its exit status", e->worker_id,
             (int)e->pid, why);
    ev_timer_init(&e->lost_grace, lost_grace_cb, SD_EXEC_LOST_GRACE_S, 0.);
    e->lost_grace.data = e;
    ev_timer_start(e->r->ex->loop, &e->lost_grace);
    e->lost_active = true;
    return true;
}

bool sd__exec_log_is_echo(const char *job_id, const char *text)
{
    static const char tag[] = "[worker ";
    size_t n = strlen(job_id);
    for (const char *p = text != NULL ? strstr(text, tag) : NULL; p != NULL;
         p = strstr(p + 1, tag)) {
        /* Worker ids start with their job's id (exec_env.c names them "<job>-<env>-w<n>-..."). */
        if (strncmp(p + sizeof(tag) - 1, job_id, n) == 0 && p[sizeof(tag) - 1 + n] == '-') {
            return true;
        }
    }
    return false;
}

static void on_worker_log(sd_fnapi_worker *w, const pb_LogEntry *entry, void *ctx)
{
    sd_exec_env *e = ctx;
    int importance = 3; /* JOB_MESSAGE_BASIC */
    bool error = entry->severity >= 6;
    (void)w;
    if (e->r->finishing) {
        return; /* the job has its final state; its workers are being stopped */
    }
    /* A LOOPBACK worker lives in the process that submitted the job, and Beam's Go SDK logs
     * every job message it receives through the same logger its worker sends to the Logging
     * service: each echo came back as a new log entry, was echoed again, and so on, as fast as
     * the loop could spin (thousands of messages a second, each nesting all the earlier ones,
     * printed by the SDK when the stream ended). An entry carrying one of this job's echoes is
     * that loop: it goes to the server's log only. */
    if (sd__exec_log_is_echo(e->r->job_id, entry->message)) {
        SD_DEBUG("exec", "worker %s logged a job message back; not echoed", e->worker_id);
        return;
    }
    /* A worker's ERROR log becomes a WARNING job message, marked ERROR in its text:
     * JOB_MESSAGE_ERROR is the job's own failure, and Beam's clients (Java's PortableRunner)
     * report the first one as the cause, which must be the failure message that names the
     * stage and carries the SDK's error (an assertion's text), not a log line before it. */
    if (entry->severity >= 5) {
        importance = 4; /* WARNING */
    } else if (entry->severity <= 2 && entry->severity != 0) {
        importance = 1; /* DEBUG */
    }
    sd_job_message(e->r->job, importance, "[worker %s%s%s]%s %s", e->worker_id,
                   entry->transform_id != NULL && entry->transform_id[0] ? " " : "",
                   entry->transform_id != NULL ? entry->transform_id : "", error ? " ERROR:" : "",
                   entry->message != NULL ? entry->message : "");
}

void sd__exec_connect_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    sd_exec_run *r = t->data;
    (void)loop;
    (void)revents;
    for (size_t i = 0; i < r->envs.len; i++) {
        sd_exec_env *e = *SD_VEC_AT(&r->envs, sd_exec_env *, i);
        if (e->worker != NULL && !sd_fnapi_worker_is_connected(e->worker)) {
            char *tail = e->kind == ENV_PROCESS ? err_suffix(e) : NULL;
            sd__exec_run_fail(r,
                              "SDK worker %s (environment %s) did not open its control stream "
                              "within %d s%s",
                              e->worker_id, e->env_id, r->ex->cfg.worker_connect_timeout_s,
                              tail != NULL ? tail : "");
            sd_free(tail);
            return;
        }
    }
}

/* Packed ProvisionInfo for a worker of this job. */
static sd_status
provision_info(sd_exec_run *r, const char *worker_id, const pb_Environment *env, sd_buf *out)
{
    pb_ProvisionInfo info = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROVISION_INFO__INIT;
    pb_ApiServiceDescriptor ep =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__API_SERVICE_DESCRIPTOR__INIT;
    SD_FN(ProvisionInfo__MetadataEntry)
    md[2] = { ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROVISION_INFO__METADATA_ENTRY__INIT,
              ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROVISION_INFO__METADATA_ENTRY__INIT };
    SD_FN(ProvisionInfo__MetadataEntry) * mdp[2] = { &md[0], &md[1] };
    (void)worker_id;
    ep.url = r->ex->endpoint;
    info.pipeline_options = (Google__Protobuf__Struct *)sd_job_options(r->job);
    info.retrieval_token = r->job_id;
    info.logging_endpoint = &ep;
    info.artifact_endpoint = &ep;
    info.control_endpoint = &ep;
    if (env != NULL) {
        info.n_dependencies = env->n_dependencies;
        info.dependencies = env->dependencies;
    }
    md[0].key = "runner";
    md[0].value = "sundial";
    md[1].key = "runner_version";
    md[1].value = "0.1.0";
    info.n_metadata = 2;
    info.metadata = mdp;
    return sd_fnapi_pb_pack(&info.base, out);
}

static sd_status spawn_process(sd_exec_env *e, const pb_ProcessPayload *pp, sd_err *err)
{
    sd_exec *ex = e->r->ex;
    char *argv[8];
    char *args[6];
    pid_t pid;

    if (pp->command == NULL || pp->command[0] == '\0') {
        return sd_err_set(err, SD_EINVAL, "environment %s (beam:env:process:v1): empty command",
                          e->env_id);
    }
    sd_status st = sd_job_make_artifact_dir(e->r->job, err); /* the worker's semi_persist_dir */
    if (st != SD_OK) {
        return st;
    }
    args[0] = sd_asprintf("--id=%s", e->worker_id);
    args[1] = sd_asprintf("--provision_endpoint=%s", ex->endpoint);
    args[2] = sd_asprintf("--control_endpoint=%s", ex->endpoint);
    args[3] = sd_asprintf("--logging_endpoint=%s", ex->endpoint);
    args[4] = sd_asprintf("--artifact_endpoint=%s", ex->endpoint);
    const char *dir = sd_job_artifact_dir(e->r->job);
    args[5] = sd_asprintf("--semi_persist_dir=%s", dir != NULL ? dir : "/tmp");
    for (int i = 0; i < 6; i++) {
        if (args[i] == NULL) {
            for (int j = 0; j < 6; j++) {
                sd_free(args[j]);
            }
            return sd_err_set(err, SD_ENOMEM, "out of memory");
        }
    }
    argv[0] = pp->command;
    for (int i = 0; i < 6; i++) {
        argv[i + 1] = args[i];
    }
    argv[7] = NULL;
    /* Its stderr: a pipe read on the loop (err_cb). Close-on-exec, so no other worker keeps a
     * copy of either end; dup2 onto fd 2 clears the flag for this one. */
    int errp[2] = { -1, -1 };
    if (pipe(errp) != 0) {
        errp[0] = errp[1] = -1; /* the worker then writes to the server's stderr, as before */
    } else if (fcntl(errp[0], F_SETFD, FD_CLOEXEC) != 0 ||
               fcntl(errp[1], F_SETFD, FD_CLOEXEC) != 0) {
        close(errp[0]);
        close(errp[1]);
        errp[0] = errp[1] = -1;
    }
    pid = fork();
    if (pid < 0) {
        int fork_errno = errno;
        for (int j = 0; j < 6; j++) {
            sd_free(args[j]);
        }
        if (errp[0] >= 0) {
            close(errp[0]);
            close(errp[1]);
        }
        return sd_err_set(err, SD_EIO, "environment %s: fork failed: %s", e->env_id,
                          strerror(fork_errno));
    }
    if (pid == 0) {
        /* Child: only async-signal-safe work until exec. */
        if (errp[1] >= 0) {
            dup2(errp[1], STDERR_FILENO);
        }
        for (size_t i = 0; i < pp->n_env; i++) {
            setenv(pp->env[i]->key, pp->env[i]->value, 1);
        }
        execvp(argv[0], argv);
        /* Said on its stderr, so the job's error carries it (Prepare checked the command, but
         * it may have changed since). Constant strings only: no strerror here. */
        const char *why = errno == ENOENT    ? "no such file"
                          : errno == EACCES  ? "permission denied"
                          : errno == ENOEXEC ? "not an executable format"
                                             : "exec failed";
        static const char head[] = "sundial: cannot execute the worker command ";
        (void)!write(STDERR_FILENO, head, sizeof(head) - 1);
        (void)!write(STDERR_FILENO, argv[0], strlen(argv[0]));
        (void)!write(STDERR_FILENO, ": ", 2);
        (void)!write(STDERR_FILENO, why, strlen(why));
        (void)!write(STDERR_FILENO, "\n", 1);
        _exit(127);
    }
    for (int j = 0; j < 6; j++) {
        sd_free(args[j]);
    }
    if (errp[1] >= 0) {
        close(errp[1]);
        (void)fcntl(errp[0], F_SETFL, fcntl(errp[0], F_GETFL) | O_NONBLOCK);
        e->err_fd = errp[0];
        ev_io_init(&e->err_io, err_cb, e->err_fd, EV_READ);
        e->err_io.data = e;
        ev_io_start(ex->loop, &e->err_io);
        e->err_active = true;
    }
    e->pid = pid;
    if (ev_is_default_loop(ex->loop)) {
        ev_child_init(&e->child, child_cb, pid, 0);
        e->child.data = e;
        ev_child_start(ex->loop, &e->child);
        e->child_active = true;
    } else {
        /* libev reaps children only on its default loop; poll elsewhere. */
        ev_timer_init(&e->child_poll, child_poll_cb, 0.1, 0.1);
        e->child_poll.data = e;
        ev_timer_start(ex->loop, &e->child_poll);
        e->poll_active = true;
    }
    SD_INFO("exec", "job %s: started worker process %s (pid %d) for environment %s", e->r->job_id,
            pp->command, (int)pid, e->env_id);
    return SD_OK;
}

/* The environment env_id of the job's pipeline, or NULL. */
static const pb_Environment *find_environment(const sd_exec_run *r, const char *env_id)
{
    const pb_Pipeline *p = sd_job_pipeline(r->job);
    const pb_Environment *env = NULL;
    for (size_t i = 0; p->components != NULL && i < p->components->n_environments; i++) {
        if (strcmp(p->components->environments[i]->key, env_id) == 0) {
            env = p->components->environments[i]->value;
        }
    }
    return env;
}

/*
 * A new environment record on the run (r->envs, which owns it from then on, also on error)
 * with its worker registered with the Fn API: a fresh worker id, the ProvisionInfo, and the
 * descriptors of the stages that run in this environment. OUT: *out.
 */
static sd_status env_register(sd_exec_run *r,
                              const char *env_id,
                              const pb_Environment *env,
                              sd_exec_env **out,
                              sd_err *err)
{
    sd_exec *ex = r->ex;
    sd_exec_env *e;
    sd_buf prov;
    sd_status st;

    e = sd_calloc(1, sizeof(*e));
    if (e == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    e->r = r;
    e->err_fd = -1;
    e->env_id = sd_strdup(env_id);
    bool push = false;
    for (size_t i = 0; env != NULL && i < env->n_capabilities; i++) {
        const char *cap = env->capabilities[i];
        e->embed =
            e->embed || (sd__exec_embed_input(r) &&
                         strcmp(cap, SD_URN_PROTOCOL_CONTROL_REQUEST_ELEMENTS_EMBEDDING) == 0);
        push = push || strcmp(cap, SD_URN_PROTOCOL_SUNDIAL_REGISTER_DESCRIPTORS) == 0;
    }
    char token[SD_TOKEN_HEX];
    if (sd_token_hex(token) != SD_OK) {
        sd_free(e);
        return sd_err_set(err, SD_EIO, "environment %s: no random bytes for a worker id", env_id);
    }
    /* Readable for logs, unguessable for access: "JOB-ENV-wN-TOKEN". */
    e->worker_id = sd_asprintf("%s-%s-w%llu-%s", r->job_id, env_id,
                               (unsigned long long)++ex->worker_seq, token);
    if (e->env_id == NULL || e->worker_id == NULL || sd_vec_push(&r->envs, &e) != SD_OK) {
        sd__exec_env_destroy(e);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_fnapi_worker_hooks hooks = {
        .on_elements = sd__exec_on_worker_elements,
        .on_state = sd__exec_on_worker_state,
        .on_log = on_worker_log,
        .on_lost = on_worker_lost,
        .ctx = e,
    };
    sd_buf_init(&prov, 0);
    st = provision_info(r, e->worker_id, env, &prov);
    if (st == SD_OK) {
        st = sd_fnapi_worker_create(ex->fn, e->worker_id, &hooks, sd_buf_bytes(&prov), &e->worker,
                                    err);
    }
    sd_buf_deinit(&prov);
    if (st != SD_OK) {
        return st;
    }
    sd_fnapi_worker_push_descriptors(e->worker, push);
    /* Descriptors of the stages that run in this environment. */
    for (size_t i = 0; i < r->xp.n_stages; i++) {
        const sd_exec_stage *s = &r->xp.stages[i];
        if (s->env_id != NULL && strcmp(s->env_id, env_id) == 0) {
            st = sd_fnapi_worker_add_descriptor(e->worker, r->wire_ids[i], s->descriptor);
            if (st == SD_OK && r->drain_wire_ids[i] != NULL) {
                st = sd_fnapi_worker_add_descriptor(e->worker, r->drain_wire_ids[i],
                                                    s->drain_descriptor);
            }
            if (st != SD_OK) {
                return sd_err_set(err, st, "out of memory");
            }
        }
    }
    *out = e;
    return SD_OK;
}

/* Take the pool at e->pool_url and send it StartWorker for e's worker. */
static sd_status send_start_worker(sd_exec_env *e, sd_err *err)
{
    sd_exec *ex = e->r->ex;
    sd_status st = pool_take(ex, e->pool_url, &e->pool_ref, err);
    if (st != SD_OK) {
        return st;
    }
    e->pool = e->pool_ref->ch;
    pb_StartWorkerRequest req =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__START_WORKER_REQUEST__INIT;
    pb_ApiServiceDescriptor ep =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__API_SERVICE_DESCRIPTOR__INIT;
    ep.url = ex->endpoint;
    req.worker_id = e->worker_id;
    req.control_endpoint = &ep;
    req.logging_endpoint = &ep;
    req.artifact_endpoint = &ep;
    req.provision_endpoint = &ep;
    sd_buf packed;
    sd_buf_init(&packed, 0);
    st = sd_fnapi_pb_pack(&req.base, &packed);
    if (st == SD_OK) {
        e->start = sd_calloc(1, sizeof(*e->start));
        st = e->start == NULL ? sd_err_set(err, SD_ENOMEM, "out of memory") : SD_OK;
    }
    if (st == SD_OK) {
        e->start->e = e;
        e->start->reused = e->pool_ref->started++ > 0;
        st = sd_rpc_unary(e->pool, SD_PATH_START_WORKER, sd_buf_bytes(&packed), NULL, 0, 30000,
                          start_worker_done, e->start, err);
        SD_DEBUG("exec", "job %s: StartWorker %s sent to %s", e->r->job_id, e->worker_id,
                 e->pool_url);
        if (st != SD_OK) {
            sd_free(e->start);
            e->start = NULL;
        }
    }
    sd_buf_deinit(&packed);
    return st;
}

/* beam:env:external:v1: StartWorker on the worker pool its ExternalPayload names. */
static sd_status start_external(sd_exec_env *e, const pb_Environment *env, sd_err *err)
{
    pb_ExternalPayload *xp = (pb_ExternalPayload *)protobuf_c_message_unpack(
        &org__apache__beam__model__pipeline__v1__external_payload__descriptor, NULL,
        env->payload.len, env->payload.data);
    if (xp == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "environment %s (beam:env:external:v1): malformed ExternalPayload "
                          "(%zu bytes)",
                          e->env_id, env->payload.len);
    }
    if (xp->endpoint == NULL || xp->endpoint->url == NULL || xp->endpoint->url[0] == '\0') {
        protobuf_c_message_free_unpacked(&xp->base, NULL);
        return sd_err_set(err, SD_EINVAL,
                          "environment %s (beam:env:external:v1): payload has no worker pool "
                          "endpoint url",
                          e->env_id);
    }
    e->kind = ENV_EXTERNAL;
    e->pool_url = sd_strdup(xp->endpoint->url);
    protobuf_c_message_free_unpacked(&xp->base, NULL);
    if (e->pool_url == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    return send_start_worker(e, err);
}

/* beam:env:process:v1: fork and exec its ProcessPayload's command (spawn_process). */
static sd_status start_process(sd_exec_env *e, const pb_Environment *env, sd_err *err)
{
    pb_ProcessPayload *pp = (pb_ProcessPayload *)protobuf_c_message_unpack(
        &org__apache__beam__model__pipeline__v1__process_payload__descriptor, NULL,
        env->payload.len, env->payload.data);
    if (pp == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "environment %s (beam:env:process:v1): malformed ProcessPayload",
                          e->env_id);
    }
    e->kind = ENV_PROCESS;
    sd_status st = spawn_process(e, pp, err);
    protobuf_c_message_free_unpacked(&pp->base, NULL);
    return st;
}

/* ---------------------------------------------------------------- checks at Prepare */

/* NULL when path is a file this process may execute, else what is wrong with it. */
static const char *not_executable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        return errno == ENOENT || errno == ENOTDIR ? "does not exist" : "cannot be read";
    }
    if (S_ISDIR(st.st_mode)) {
        return "is a directory";
    }
    if (access(path, X_OK) != 0) {
        return "is not executable";
    }
    return NULL;
}

/* A PROCESS command as execvp finds it: a path when it has a slash, else the first executable
 * of that name in the directories of search (a PATH value). NULL when found, else why not. */
static char *command_problem(const char *command, const char *search)
{
    if (strchr(command, '/') != NULL) {
        const char *why = not_executable(command);
        return why == NULL ? NULL : sd_asprintf("command \"%s\" %s", command, why);
    }
    const char *dirs = search != NULL ? search : "/usr/local/bin:/usr/bin:/bin";
    for (const char *d = dirs;; d++) {
        const char *end = strchr(d, ':');
        size_t n = end != NULL ? (size_t)(end - d) : strlen(d);
        char *path = sd_asprintf("%.*s/%s", (int)n, n > 0 ? d : ".", command);
        if (path == NULL) {
            return NULL; /* out of memory: not the pipeline's problem; the start will tell */
        }
        bool ok = not_executable(path) == NULL;
        sd_free(path);
        if (ok) {
            return NULL;
        }
        if (end == NULL) {
            break;
        }
        d = end;
    }
    return sd_asprintf("command \"%s\" is not an executable on PATH (%s)", command, dirs);
}

char *sd__exec_env_check(void *ctx, const char *env_id, const pb_Environment *env, bool *invalid)
{
    (void)ctx;
    char *why = NULL;
    *invalid = true; /* each problem below is in what the pipeline says */
    if (env->urn != NULL && strcmp(env->urn, SD_URN_ENV_PROCESS) == 0) {
        pb_ProcessPayload *pp = (pb_ProcessPayload *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__process_payload__descriptor, NULL,
            env->payload.len, env->payload.data);
        if (pp == NULL) {
            return sd_asprintf("environment \"%s\" (%s): malformed ProcessPayload (%zu bytes)",
                               env_id, env->urn, env->payload.len);
        }
        if (pp->command == NULL || pp->command[0] == '\0') {
            why = sd_strdup("its ProcessPayload has no command");
        } else {
            const char *search = getenv("PATH");
            for (size_t i = 0; i < pp->n_env; i++) {
                if (pp->env[i]->key != NULL && strcmp(pp->env[i]->key, "PATH") == 0) {
                    search = pp->env[i]->value; /* the worker's own PATH finds its command */
                }
            }
            why = command_problem(pp->command, search);
        }
        protobuf_c_message_free_unpacked(&pp->base, NULL);
        if (why == NULL) {
            return NULL;
        }
        char *msg = sd_asprintf("environment \"%s\" (%s): %s, so Sundial cannot start its SDK "
                                "worker",
                                env_id, env->urn, why);
        sd_free(why);
        return msg;
    }
    if (env->urn != NULL && strcmp(env->urn, SD_URN_ENV_EXTERNAL) == 0) {
        pb_ExternalPayload *xp = (pb_ExternalPayload *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__external_payload__descriptor, NULL,
            env->payload.len, env->payload.data);
        if (xp == NULL) {
            return sd_asprintf("environment \"%s\" (%s): malformed ExternalPayload (%zu bytes)",
                               env_id, env->urn, env->payload.len);
        }
        bool has_url =
            xp->endpoint != NULL && xp->endpoint->url != NULL && xp->endpoint->url[0] != '\0';
        protobuf_c_message_free_unpacked(&xp->base, NULL);
        if (!has_url) {
            return sd_asprintf("environment \"%s\" (%s): its ExternalPayload names no worker "
                               "pool endpoint, so Sundial cannot ask for a worker (a LOOPBACK "
                               "client fills it in when it submits)",
                               env_id, env->urn);
        }
    }
    return NULL;
}

/* Start the worker of one environment. */
sd_status sd__exec_env_start(sd_exec_run *r, const char *env_id, sd_err *err)
{
    sd_exec *ex = r->ex;
    const pb_Environment *env = find_environment(r, env_id);
    sd_exec_env *e = NULL;
    if (env == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "environment %s: not in the pipeline", env_id);
    }
    sd_status st = env_register(r, env_id, env, &e, err);
    if (st != SD_OK) {
        return st;
    }
    if (ex->env_starter != NULL) {
        /* Test seam: no process and no pool; sd__exec_env_stop then only destroys the worker. */
        e->kind = ENV_EXTERNAL;
        return ex->env_starter(ex->env_starter_ctx, e->worker_id, env_id, err);
    }
    if (env->urn != NULL && strcmp(env->urn, SD_URN_ENV_EXTERNAL) == 0) {
        return start_external(e, env, err);
    }
    if (env->urn != NULL && strcmp(env->urn, SD_URN_ENV_PROCESS) == 0) {
        return start_process(e, env, err);
    }
    return sd_err_set(err, SD_EUNIMPL, "environment %s: unsupported urn %s", env_id,
                      env->urn == NULL ? "(none)" : env->urn);
}
