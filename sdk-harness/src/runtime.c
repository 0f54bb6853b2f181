/*
 * Sundial C SDK: the process-wide runtime — one libev loop on its own thread, the gRPC hub on
 * that loop, the loopback worker pool, and the worker boot entry point (sd_sdk_main).
 *
 * Every gRPC call of the SDK lives on the runtime's loop thread (the transport's rule). User
 * threads (the program calling sd_pipeline_run, bundle threads running DoFns) never touch a
 * stream: they hand a closure to the loop with sd__rt_call() or sd_rpc_run_on_loop() and wait
 * on a condition variable. That is the only cross-thread edge, which keeps the locking small:
 * a task queue owned by the transport, plus per-waiter mutexes in the worker.
 *
 * The loop is kept alive by an active ev_async that is never stopped, so ev_run() does not
 * return when no call happens to be open (the transport unrefs its own watcher). The runtime
 * is created on first use and lives until exit; a test binary that runs many pipelines shares
 * one loop, one hub and one worker pool.
 *
 * The worker pool (beam:env:external:v1, "LOOPBACK") serves BeamFnExternalWorkerPool on
 * 127.0.0.1 at a free port. StartWorker starts an sd__worker connected to the runner's control
 * endpoint; StopWorker (or the runner closing the control stream) stops it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/transport/rpc.h"
#include "sdk-harness/src/sdk_int.h"

#define FNF(x) org__apache__beam__model__fn_execution__v1__##x

/* Idle channels kept, in all and to one target: a job on a reused runner takes two at once
 * (its job client's and its worker's), and a channel made anew costs a name resolution on
 * gRPC's resolver thread before its first call goes out. */
#define RT_IDLE_CHANNELS   4
#define RT_IDLE_PER_TARGET 2

typedef struct rt_idle {
    char *target; /* NULL: a free slot */
    sd_rpc_channel *ch;
    uint64_t used;
} rt_idle;

struct sd__rt {
    struct ev_loop *loop;
    sd_rpc *rpc;
    ev_async keep;
    pthread_t thread;
    rt_idle idle[RT_IDLE_CHANNELS]; /* on the loop (sd_rpc_on_loop) only */
    uint64_t idle_seq;
};

static pthread_once_t g_rt_once = PTHREAD_ONCE_INIT;
static sd__rt *g_rt;
static sd_err g_rt_err;

static void keep_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

static void *rt_main(void *arg)
{
    sd__rt *rt = arg;
    sd_rpc_loop_run(rt->loop);
    return NULL;
}

static void rt_init(void)
{
    sd__rt *rt = sd_calloc(1, sizeof(*rt));
    if (rt == NULL) {
        sd_err_set(&g_rt_err, SD_ENOMEM, "out of memory starting the SDK runtime");
        return;
    }
    rt->loop = ev_loop_new(EVFLAG_AUTO);
    if (rt->loop == NULL) {
        sd_err_set(&g_rt_err, SD_EIO, "SDK runtime: ev_loop_new failed");
        sd_free(rt);
        return;
    }
    ev_async_init(&rt->keep, keep_cb);
    ev_async_start(rt->loop, &rt->keep);
    if (sd_rpc_create(rt->loop, &rt->rpc, &g_rt_err) != SD_OK) {
        ev_loop_destroy(rt->loop);
        sd_free(rt);
        return;
    }
    if (pthread_create(&rt->thread, NULL, rt_main, rt) != 0) {
        sd_err_set(&g_rt_err, SD_EIO, "SDK runtime: cannot start the loop thread");
        return;
    }
    g_rt = rt;
}

sd_status sd__rt_get(sd__rt **out, sd_err *err)
{
    pthread_once(&g_rt_once, rt_init);
    if (g_rt == NULL) {
        return sd_err_set(err, g_rt_err.code != SD_OK ? g_rt_err.code : SD_EINTERNAL, "%s",
                          sd_err_msg(&g_rt_err));
    }
    *out = g_rt;
    return SD_OK;
}

sd_rpc *sd__rt_rpc(sd__rt *rt)
{
    return rt->rpc;
}

typedef struct rt_call {
    void (*fn)(void *ctx);
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} rt_call;

static void rt_call_run(void *arg)
{
    rt_call *c = arg;
    c->fn(c->ctx);
    pthread_mutex_lock(&c->mu);
    c->done = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

sd_status sd__rt_call(sd__rt *rt, void (*fn)(void *ctx), void *ctx)
{
    if (pthread_equal(pthread_self(), rt->thread) || sd_rpc_on_loop(rt->rpc)) {
        fn(ctx);
        return SD_OK;
    }
    rt_call c = { .fn = fn, .ctx = ctx, .done = false };
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    sd_status st = sd_rpc_run_on_loop(rt->rpc, rt_call_run, &c);
    if (st == SD_OK) {
        pthread_mutex_lock(&c.mu);
        while (!c.done) {
            pthread_cond_wait(&c.cv, &c.mu);
        }
        pthread_mutex_unlock(&c.mu);
    }
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
    return st;
}

/* ================================================================ idle channels */

static void idle_close(rt_idle *slot)
{
    sd_rpc_channel_destroy(slot->ch);
    sd_free(slot->target);
    memset(slot, 0, sizeof(*slot));
}

sd_status sd__rt_channel_take(sd__rt *rt, const char *target, sd_rpc_channel **out, sd_err *err)
{
    for (int i = 0; i < RT_IDLE_CHANNELS; i++) {
        rt_idle *slot = &rt->idle[i];
        if (slot->target != NULL && strcmp(slot->target, target) == 0) {
            *out = slot->ch;
            sd_free(slot->target);
            memset(slot, 0, sizeof(*slot));
            return SD_OK;
        }
    }
    return sd_rpc_channel_create(rt->rpc, target, out, err);
}

void sd__rt_channel_give(sd__rt *rt, const char *target, sd_rpc_channel *ch)
{
    if (ch == NULL) {
        return;
    }
    /* A free slot, else the least recently given; none when the channel still has calls or
     * the target has RT_IDLE_PER_TARGET idle already (gRPC shares their connection anyway). */
    rt_idle *slot = sd_rpc_channel_busy(ch) ? NULL : &rt->idle[0];
    int same = 0;
    for (int i = 0; slot != NULL && i < RT_IDLE_CHANNELS; i++) {
        rt_idle *s = &rt->idle[i];
        if (s->target != NULL && strcmp(s->target, target) == 0 && ++same >= RT_IDLE_PER_TARGET) {
            slot = NULL;
        } else if (slot->target != NULL && (s->target == NULL || s->used < slot->used)) {
            slot = s;
        }
    }
    char *copy = slot != NULL ? sd_strdup(target) : NULL;
    if (copy == NULL) {
        sd_rpc_channel_destroy(ch);
        return;
    }
    if (slot->target != NULL) {
        idle_close(slot);
    }
    slot->target = copy;
    slot->ch = ch;
    slot->used = ++rt->idle_seq;
}

void sd__rt_channel_forget(sd__rt *rt, const char *target)
{
    for (int i = 0; i < RT_IDLE_CHANNELS; i++) {
        if (rt->idle[i].target != NULL && strcmp(rt->idle[i].target, target) == 0) {
            idle_close(&rt->idle[i]);
        }
    }
}

/* ================================================================ worker pool */

typedef struct pool_worker {
    struct pool_worker *next;
    char *id;
    sd__worker *w;
} pool_worker;

typedef struct pool {
    sd__rt *rt;
    sd_rpc_server *srv;
    char endpoint[64];
    pool_worker *workers;
    sd_err err;
    bool started;
} pool;

static pool g_pool;
static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void pool_worker_done(void *ctx, const char *why)
{
    char *id = ctx;
    pool_worker **pp = &g_pool.workers;
    while (*pp != NULL) {
        if (strcmp((*pp)->id, id) == 0) {
            pool_worker *dead = *pp;
            *pp = dead->next;
            sd_free(dead->id);
            sd_free(dead);
            break;
        }
        pp = &(*pp)->next;
    }
    SD_DEBUG("sdk", "worker %s finished%s%s", id, why != NULL ? ": " : "", why != NULL ? why : "");
    sd_free(id);
}

static void reply_error(sd_rpc_call *call, bool start, const char *error)
{
    sd_buf out;
    sd_buf_init(&out, 0);
    if (start) {
        pb_StartWorkerResponse r =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__START_WORKER_RESPONSE__INIT;
        r.error = (char *)(error != NULL ? error : "");
        if (sd_buf_reserve(&out, protobuf_c_message_get_packed_size(&r.base)) == SD_OK) {
            out.len = protobuf_c_message_pack(&r.base, out.data);
        }
    } else {
        pb_StopWorkerResponse r =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STOP_WORKER_RESPONSE__INIT;
        r.error = (char *)(error != NULL ? error : "");
        if (sd_buf_reserve(&out, protobuf_c_message_get_packed_size(&r.base)) == SD_OK) {
            out.len = protobuf_c_message_pack(&r.base, out.data);
        }
    }
    sd_rpc_call_reply(call, sd_buf_bytes(&out));
    sd_buf_deinit(&out);
}

static void on_start_worker(sd_rpc_call *call, sd_bytes request, void *ctx)
{
    sd_err err;
    (void)ctx;
    sd_err_clear(&err);
    pb_StartWorkerRequest *req = FNF(start_worker_request__unpack)(NULL, request.len, request.ptr);
    if (req == NULL || req->worker_id == NULL || req->control_endpoint == NULL ||
        req->control_endpoint->url == NULL || req->control_endpoint->url[0] == '\0') {
        if (req != NULL) {
            FNF(start_worker_request__free_unpacked)(req, NULL);
        }
        reply_error(call, true, "StartWorker: worker_id and control_endpoint.url are required");
        return;
    }
    pool_worker *pw = sd_calloc(1, sizeof(*pw));
    char *done_id = sd_strdup(req->worker_id);
    if (pw == NULL || done_id == NULL || (pw->id = sd_strdup(req->worker_id)) == NULL) {
        sd_free(pw);
        sd_free(done_id);
        FNF(start_worker_request__free_unpacked)(req, NULL);
        reply_error(call, true, "StartWorker: out of memory");
        return;
    }
    const char *log_url = req->logging_endpoint != NULL ? req->logging_endpoint->url : NULL;
    if (sd__worker_start(g_pool.rt, req->worker_id, req->control_endpoint->url, log_url,
                         pool_worker_done, done_id, &pw->w, &err) != SD_OK) {
        sd_free(pw->id);
        sd_free(pw);
        sd_free(done_id);
        FNF(start_worker_request__free_unpacked)(req, NULL);
        reply_error(call, true, sd_err_msg(&err));
        return;
    }
    pw->next = g_pool.workers;
    g_pool.workers = pw;
    FNF(start_worker_request__free_unpacked)(req, NULL);
    reply_error(call, true, NULL);
}

static void on_stop_worker(sd_rpc_call *call, sd_bytes request, void *ctx)
{
    (void)ctx;
    pb_StopWorkerRequest *req = FNF(stop_worker_request__unpack)(NULL, request.len, request.ptr);
    if (req != NULL && req->worker_id != NULL) {
        for (pool_worker *pw = g_pool.workers; pw != NULL; pw = pw->next) {
            if (strcmp(pw->id, req->worker_id) == 0) {
                sd__worker_stop(pw->w);
                break;
            }
        }
    }
    if (req != NULL) {
        FNF(stop_worker_request__free_unpacked)(req, NULL);
    }
    reply_error(call, false, NULL);
}

typedef struct pool_start {
    const char *addr;
} pool_start;

static void pool_start_on_loop(void *arg)
{
    pool_start *ps = arg;
    sd_rpc_handler start = { .on_open = on_start_worker };
    sd_rpc_handler stop = { .on_open = on_stop_worker };
    int port = 0;
    sd_status st = sd_rpc_server_create(sd__rt_rpc(g_pool.rt), &g_pool.srv, &g_pool.err);
    if (st == SD_OK) {
        st = sd_rpc_server_add_method(g_pool.srv, SD_PATH_START_WORKER, SD_RPC_KIND_UNARY, &start);
    }
    if (st == SD_OK) {
        st = sd_rpc_server_add_method(g_pool.srv, SD_PATH_STOP_WORKER, SD_RPC_KIND_UNARY, &stop);
    }
    if (st == SD_OK) {
        st = sd_rpc_server_listen(g_pool.srv, ps->addr, &port, &g_pool.err);
    }
    if (st == SD_OK) {
        st = sd_rpc_server_start(g_pool.srv, &g_pool.err);
    }
    if (st != SD_OK) {
        if (g_pool.err.code == SD_OK) {
            sd_err_set(&g_pool.err, st, "worker pool: cannot start the server");
        }
        return;
    }
    snprintf(g_pool.endpoint, sizeof(g_pool.endpoint), "127.0.0.1:%d", port);
    g_pool.started = true;
}

static sd_status pool_ensure(const char *addr, sd_err *err)
{
    sd_status st = SD_OK;
    pthread_mutex_lock(&g_pool_lock);
    if (!g_pool.started) {
        if (g_pool.rt == NULL) {
            st = sd__rt_get(&g_pool.rt, err);
        }
        if (st == SD_OK) {
            pool_start ps = { addr };
            sd_err_clear(&g_pool.err);
            st = sd__rt_call(g_pool.rt, pool_start_on_loop, &ps);
            if (st == SD_OK && !g_pool.started) {
                st = sd_err_set(err, g_pool.err.code != SD_OK ? g_pool.err.code : SD_EIO, "%s",
                                sd_err_msg(&g_pool.err));
            }
        }
    }
    pthread_mutex_unlock(&g_pool_lock);
    return st;
}

sd_status sd__pool_endpoint(const char **endpoint, sd_err *err)
{
    sd_status st = pool_ensure("127.0.0.1:0", err);
    if (st == SD_OK) {
        *endpoint = g_pool.endpoint;
    }
    return st;
}

sd_status sd_worker_pool_serve(const char *addr, sd_err *err)
{
    sd_status st = pool_ensure(addr != NULL ? addr : "127.0.0.1:0", err);
    if (st != SD_OK) {
        return st;
    }
    printf("%s\n", g_pool.endpoint);
    fflush(stdout);
    for (;;) {
        pause();
    }
    return SD_OK;
}

/* ================================================================ worker boot */

typedef struct boot {
    const char *id;
    const char *control;
    const char *logging;
    sd__worker *w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    char why[512];
    sd_err err;
    sd_status st;
} boot;

static void boot_done(void *ctx, const char *why)
{
    boot *b = ctx;
    pthread_mutex_lock(&b->mu);
    b->done = true;
    snprintf(b->why, sizeof(b->why), "%s", why != NULL ? why : "");
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void boot_start(void *arg)
{
    boot *b = arg;
    sd__rt *rt = NULL;
    b->st = sd__rt_get(&rt, &b->err);
    if (b->st == SD_OK) {
        b->st = sd__worker_start(rt, b->id, b->control, b->logging, boot_done, b, &b->w, &b->err);
    }
}

/* Provision lookup: the control endpoint when only --provision_endpoint was given. */
typedef struct prov {
    const char *url;
    const char *id;
    sd_rpc_channel *ch;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    char control[256];
    char logging[256];
    char error[256];
} prov;

static void prov_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    prov *p = ctx;
    if (code != SD_RPC_OK) {
        snprintf(p->error, sizeof(p->error), "GetProvisionInfo: %s", message);
    } else {
        pb_GetProvisionInfoResponse *r =
            FNF(get_provision_info_response__unpack)(NULL, response.len, response.ptr);
        if (r == NULL || r->info == NULL || r->info->control_endpoint == NULL) {
            snprintf(p->error, sizeof(p->error), "GetProvisionInfo: no control endpoint");
        } else {
            snprintf(p->control, sizeof(p->control), "%s", r->info->control_endpoint->url);
            if (r->info->logging_endpoint != NULL) {
                snprintf(p->logging, sizeof(p->logging), "%s", r->info->logging_endpoint->url);
            }
        }
        if (r != NULL) {
            FNF(get_provision_info_response__free_unpacked)(r, NULL);
        }
    }
    sd_rpc_channel_destroy(p->ch);
    pthread_mutex_lock(&p->mu);
    p->done = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void prov_start(void *arg)
{
    prov *p = arg;
    sd__rt *rt = NULL;
    sd_err err;
    sd_err_clear(&err);
    sd_rpc_metadata md = { "worker_id", p->id };
    if (sd__rt_get(&rt, &err) != SD_OK ||
        sd_rpc_channel_create(sd__rt_rpc(rt), p->url, &p->ch, &err) != SD_OK ||
        sd_rpc_unary(p->ch, SD_PATH_PROVISION, SD_BYTES_NULL, &md, 1, 30000, prov_done, p, &err) !=
            SD_OK) {
        snprintf(p->error, sizeof(p->error), "GetProvisionInfo: %s", sd_err_msg(&err));
        if (p->ch != NULL) {
            sd_rpc_channel_destroy(p->ch);
        }
        pthread_mutex_lock(&p->mu);
        p->done = true;
        pthread_mutex_unlock(&p->mu);
    }
}

static const char *flag_value(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        while (*a == '-') {
            a++;
        }
        if (strncmp(a, name, n) == 0 && a[n] == '=') {
            const char *v = a + n + 1;
            /* Prism quotes the id: --id='<id>'. */
            return v;
        }
        if (strcmp(a, name) == 0 && i + 1 < argc) {
            return argv[i + 1];
        }
    }
    return NULL;
}

static void unquote(char *s)
{
    size_t n = strlen(s);
    if (n >= 2 && (s[0] == '\'' || s[0] == '"') && s[n - 1] == s[0]) {
        memmove(s, s + 1, n - 2);
        s[n - 2] = '\0';
    }
}

bool sd_sdk_main(int argc, char **argv, int *exit_code)
{
    const char *pool_addr = flag_value(argc, argv, "sundial_worker_pool");
    const char *id_arg = flag_value(argc, argv, "id");
    const char *control = flag_value(argc, argv, "control_endpoint");
    const char *provision = flag_value(argc, argv, "provision_endpoint");
    const char *logging = flag_value(argc, argv, "logging_endpoint");
    sd_err err;
    sd_err_clear(&err);
    if (pool_addr != NULL) {
        if (sd_worker_pool_serve(pool_addr, &err) != SD_OK) {
            fprintf(stderr, "sundial worker pool: %s\n", sd_err_msg(&err));
            *exit_code = 1;
        } else {
            *exit_code = 0;
        }
        return true;
    }
    if (id_arg == NULL || (control == NULL && provision == NULL)) {
        return false;
    }
    char id[256], ctl[256], lg[256];
    snprintf(id, sizeof(id), "%s", id_arg);
    unquote(id);
    ctl[0] = lg[0] = '\0';
    if (control != NULL) {
        snprintf(ctl, sizeof(ctl), "%s", control);
    }
    if (logging != NULL) {
        snprintf(lg, sizeof(lg), "%s", logging);
    }
    sd__rt *rt = NULL;
    if (sd__rt_get(&rt, &err) != SD_OK) {
        fprintf(stderr, "sundial worker %s: %s\n", id, sd_err_msg(&err));
        *exit_code = 1;
        return true;
    }
    if (ctl[0] == '\0') {
        prov p = { .url = provision, .id = id };
        pthread_mutex_init(&p.mu, NULL);
        pthread_cond_init(&p.cv, NULL);
        if (sd__rt_call(rt, prov_start, &p) == SD_OK) {
            pthread_mutex_lock(&p.mu);
            while (!p.done) {
                pthread_cond_wait(&p.cv, &p.mu);
            }
            pthread_mutex_unlock(&p.mu);
        }
        if (p.control[0] == '\0') {
            fprintf(stderr, "sundial worker %s: %s\n", id, p.error[0] ? p.error : "no control");
            *exit_code = 1;
            return true;
        }
        snprintf(ctl, sizeof(ctl), "%s", p.control);
        if (lg[0] == '\0') {
            snprintf(lg, sizeof(lg), "%s", p.logging);
        }
    }
    boot b = { .id = id, .control = ctl, .logging = lg[0] ? lg : NULL };
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    sd_err_clear(&b.err);
    if (sd__rt_call(rt, boot_start, &b) != SD_OK || b.st != SD_OK) {
        fprintf(stderr, "sundial worker %s: %s\n", id, sd_err_msg(&b.err));
        *exit_code = 1;
        return true;
    }
    pthread_mutex_lock(&b.mu);
    while (!b.done) {
        pthread_cond_wait(&b.cv, &b.mu);
    }
    pthread_mutex_unlock(&b.mu);
    SD_DEBUG("sdk", "worker %s ended: %s", id, b.why);
    *exit_code = 0;
    return true;
}
