/*
 * Sundial: embedded runner.
 *
 * A C SDK program (or a test) gets a full runner in its own process: a thread runs a private
 * libev loop with an sd_server on it. Start-up is synchronous (the caller learns the endpoint
 * or the error before sd_embedded_start returns); stop is an ev_async into the loop thread,
 * which shuts the server down and breaks the loop, followed by a join.
 */
#include "runner/server/embed.h"

#include <pthread.h>
#include <string.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/tsan.h"
#include "runner/transport/rpc.h"

struct sd_embedded {
    pthread_t thread;
    struct ev_loop *loop;
    ev_async stop_async;
    sd_server *server;
    sd_server_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready;
    sd_status start_status;
    sd_err start_err;
};

static void closed(void *ctx)
{
    sd_embedded *e = ctx;
    sd_rpc_loop_break(e->loop, EVBREAK_ALL);
}

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    sd_embedded *e = w->data;
    (void)loop;
    (void)revents;
    SD_TSAN_ACQUIRE(e); /* what the stopping thread did before ev_async_send */
    ev_async_stop(e->loop, &e->stop_async);
    sd_server_shutdown(e->server, 500, closed, e);
}

static void *thread_main(void *arg)
{
    sd_embedded *e = arg;
    sd_status st = sd_server_create(e->loop, &e->cfg, &e->server, &e->start_err);
    pthread_mutex_lock(&e->lock);
    e->start_status = st;
    e->ready = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
    if (st != SD_OK) {
        return NULL;
    }
    sd_rpc_loop_run(e->loop);
    sd_server_destroy(e->server);
    e->server = NULL;
    return NULL;
}

sd_status sd_embedded_start(const sd_server_config *cfg, sd_embedded **out, sd_err *err)
{
    sd_embedded *e = sd_calloc(1, sizeof(*e));
    if (e == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (cfg != NULL) {
        e->cfg = *cfg;
    }
    e->loop = ev_loop_new(EVFLAG_AUTO);
    if (e->loop == NULL) {
        sd_free(e);
        return sd_err_set(err, SD_EIO, "embedded runner: cannot create an event loop");
    }
    ev_async_init(&e->stop_async, on_stop);
    e->stop_async.data = e;
    ev_async_start(e->loop, &e->stop_async);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    if (pthread_create(&e->thread, NULL, thread_main, e) != 0) {
        ev_loop_destroy(e->loop);
        sd_free(e);
        return sd_err_set(err, SD_EIO, "embedded runner: cannot start its thread");
    }
    pthread_mutex_lock(&e->lock);
    while (!e->ready) {
        pthread_cond_wait(&e->cond, &e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    if (e->start_status != SD_OK) {
        sd_status st = e->start_status;
        pthread_join(e->thread, NULL);
        sd_err_set(err, st, "embedded runner: %s", sd_err_msg(&e->start_err));
        ev_loop_destroy(e->loop);
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->cond);
        sd_free(e);
        return st;
    }
    *out = e;
    return SD_OK;
}

const char *sd_embedded_endpoint(const sd_embedded *e)
{
    return sd_server_endpoint(e->server);
}

void sd_embedded_stop(sd_embedded *e)
{
    if (e == NULL) {
        return;
    }
    SD_TSAN_RELEASE(e);
    ev_async_send(e->loop, &e->stop_async);
    pthread_join(e->thread, NULL);
    ev_loop_destroy(e->loop);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
    sd_free(e);
}
