/*
 * Tests: a stand-in for the loop thread's task queue (what sd_rpc_run_on_loop offers), for
 * code that hands work to runner/base/bg.h. Tasks posted from any thread wait here until the
 * test calls fake_run, which runs them on the test's thread.
 */
#ifndef SD_TESTS_UNIT_FAKE_LOOP_H
#define SD_TESTS_UNIT_FAKE_LOOP_H

#include <pthread.h>
#include <string.h>

#include "runner/base/status.h"

#define FAKE_LOOP_MAX 16

typedef struct fake_loop {
    pthread_mutex_t lock;
    pthread_cond_t posted;
    void (*fn[FAKE_LOOP_MAX])(void *);
    void *ctx[FAKE_LOOP_MAX];
    int n;
} fake_loop;

static inline void fake_loop_init(fake_loop *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->posted, NULL);
}

static inline void fake_loop_deinit(fake_loop *l)
{
    pthread_cond_destroy(&l->posted);
    pthread_mutex_destroy(&l->lock);
}

/* An sd_bg_post_fn. */
static inline sd_status fake_post(void *post_ctx, void (*fn)(void *), void *ctx)
{
    fake_loop *l = post_ctx;
    pthread_mutex_lock(&l->lock);
    if (l->n == FAKE_LOOP_MAX) {
        pthread_mutex_unlock(&l->lock);
        return SD_ENOMEM;
    }
    l->fn[l->n] = fn;
    l->ctx[l->n] = ctx;
    l->n++;
    pthread_cond_broadcast(&l->posted);
    pthread_mutex_unlock(&l->lock);
    return SD_OK;
}

/* Wait until at least one task is posted, then run every posted task. */
static inline void fake_run(fake_loop *l)
{
    void (*fn[FAKE_LOOP_MAX])(void *);
    void *ctx[FAKE_LOOP_MAX];
    pthread_mutex_lock(&l->lock);
    while (l->n == 0) {
        pthread_cond_wait(&l->posted, &l->lock);
    }
    int n = l->n;
    memcpy(fn, l->fn, sizeof(fn));
    memcpy(ctx, l->ctx, sizeof(ctx));
    l->n = 0;
    pthread_mutex_unlock(&l->lock);
    for (int i = 0; i < n; i++) {
        fn[i](ctx[i]);
    }
}

#endif
