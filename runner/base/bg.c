/* Sundial: heavy work off the loop thread (see bg.h for the contract). */
#include "runner/base/bg.h"

#include <pthread.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"

typedef struct bg_item {
    struct bg_item *next;
    void (*work)(void *arg);
    void (*done)(void *arg, bool abandoned);
    void *arg;
} bg_item;

typedef struct bg_list {
    bg_item *head, *tail;
} bg_list;

/*
 * One lock guards everything below it. refs counts the owner (until sd_bg_close), each live
 * pool thread and a drain task posted to the loop; whoever drops the last one frees bg, so a
 * pool thread still finishing abandoned work never touches freed memory.
 */
struct sd_bg {
    sd_bg_post_fn post;
    void *post_ctx;
    unsigned max_threads;
    unsigned pending; /* loop thread only */

    pthread_mutex_t lock;
    pthread_cond_t wake;
    bg_list queue; /* waiting for a thread */
    bg_list ready; /* worked, waiting for the loop */
    unsigned n_threads, n_idle, refs;
    bool closed, drain_posted;
};

static void list_push(bg_list *l, bg_item *it)
{
    it->next = NULL;
    if (l->tail != NULL) {
        l->tail->next = it;
    } else {
        l->head = it;
    }
    l->tail = it;
}

static bg_item *list_take(bg_list *l)
{
    bg_item *all = l->head;
    l->head = l->tail = NULL;
    return all;
}

static void bg_destroy(sd_bg *bg)
{
    if (bg == NULL) {
        return;
    }
    pthread_cond_destroy(&bg->wake);
    pthread_mutex_destroy(&bg->lock);
    sd_free(bg);
}

/* Drop one reference (lock held); true when bg must now be freed by the caller. */
static bool unref_locked(sd_bg *bg)
{
    return --bg->refs == 0;
}

/* On the loop thread: deliver every finished item. */
static void drain(void *ctx)
{
    sd_bg *bg = ctx;
    pthread_mutex_lock(&bg->lock);
    bg->drain_posted = false;
    bg_item *items = list_take(&bg->ready);
    bool last = unref_locked(bg);
    pthread_mutex_unlock(&bg->lock);
    while (items != NULL) {
        bg_item *it = items;
        items = it->next;
        bg->pending--;
        it->done(it->arg, false);
        sd_free(it);
    }
    if (last) {
        bg_destroy(bg);
    }
}

static void *thread_main(void *ctx)
{
    sd_bg *bg = ctx;
    pthread_mutex_lock(&bg->lock);
    for (;;) {
        while (!bg->closed && bg->queue.head == NULL) {
            bg->n_idle++;
            pthread_cond_wait(&bg->wake, &bg->lock);
            bg->n_idle--;
        }
        if (bg->closed) {
            break;
        }
        bg_item *it = bg->queue.head;
        bg->queue.head = it->next;
        if (bg->queue.head == NULL) {
            bg->queue.tail = NULL;
        }
        pthread_mutex_unlock(&bg->lock);

        it->work(it->arg);

        pthread_mutex_lock(&bg->lock);
        if (bg->closed) {
            pthread_mutex_unlock(&bg->lock);
            it->done(it->arg, true);
            sd_free(it);
            pthread_mutex_lock(&bg->lock);
            continue;
        }
        list_push(&bg->ready, it);
        if (!bg->drain_posted) {
            bg->refs++;
            bg->drain_posted = true;
            if (bg->post(bg->post_ctx, drain, bg) != SD_OK) {
                /* Out of memory: the next completion (or close) picks this item up. */
                bg->refs--;
                bg->drain_posted = false;
                SD_ERROR("bg", "cannot hand a finished task to the loop (out of memory)");
            }
        }
    }
    bg->n_threads--;
    bool last = unref_locked(bg);
    pthread_mutex_unlock(&bg->lock);
    if (last) {
        bg_destroy(bg);
    }
    return NULL;
}

sd_status sd_bg_create(unsigned threads, sd_bg_post_fn post, void *post_ctx, sd_bg **out)
{
    *out = NULL;
    sd_bg *bg = sd_calloc(1, sizeof(*bg));
    if (bg == NULL) {
        return SD_ENOMEM;
    }
    if (pthread_mutex_init(&bg->lock, NULL) != 0) {
        sd_free(bg);
        return SD_ENOMEM;
    }
    if (pthread_cond_init(&bg->wake, NULL) != 0) {
        pthread_mutex_destroy(&bg->lock);
        sd_free(bg);
        return SD_ENOMEM;
    }
    bg->post = post;
    bg->post_ctx = post_ctx;
    bg->max_threads = threads > 0 ? threads : 1;
    bg->refs = 1;
    *out = bg;
    return SD_OK;
}

sd_status
sd_bg_submit(sd_bg *bg, void (*work)(void *arg), void (*done)(void *arg, bool abandoned), void *arg)
{
    if (bg == NULL || work == NULL || done == NULL || bg->closed) {
        return SD_ESTATE;
    }
    if (bg->post == NULL) {
        work(arg);
        done(arg, false);
        return SD_OK;
    }
    bg_item *it = sd_calloc(1, sizeof(*it));
    if (it == NULL) {
        return SD_ENOMEM;
    }
    it->work = work;
    it->done = done;
    it->arg = arg;
    pthread_mutex_lock(&bg->lock);
    if (bg->n_idle == 0 && bg->n_threads < bg->max_threads) {
        pthread_t t;
        pthread_attr_t attr;
        int rc = pthread_attr_init(&attr);
        if (rc == 0) {
            (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            rc = pthread_create(&t, &attr, thread_main, bg);
            pthread_attr_destroy(&attr);
        }
        if (rc == 0) {
            bg->n_threads++;
            bg->refs++;
        } else if (bg->n_threads == 0) {
            pthread_mutex_unlock(&bg->lock);
            sd_free(it);
            return SD_ENOMEM;
        }
        /* Otherwise a busy thread takes it later. */
    }
    list_push(&bg->queue, it);
    bg->pending++;
    pthread_cond_signal(&bg->wake);
    pthread_mutex_unlock(&bg->lock);
    return SD_OK;
}

unsigned sd_bg_pending(const sd_bg *bg)
{
    return bg != NULL ? bg->pending : 0;
}

void sd_bg_close(sd_bg *bg)
{
    if (bg == NULL) {
        return;
    }
    pthread_mutex_lock(&bg->lock);
    bg->closed = true;
    bg_item *queued = list_take(&bg->queue);
    bg_item *ready = list_take(&bg->ready);
    pthread_cond_broadcast(&bg->wake);
    bool last = unref_locked(bg);
    pthread_mutex_unlock(&bg->lock);
    bg_item *lists[] = { queued, ready };
    for (int i = 0; i < 2; i++) {
        while (lists[i] != NULL) {
            bg_item *it = lists[i];
            lists[i] = it->next;
            it->done(it->arg, true);
            sd_free(it);
        }
    }
    if (last) {
        bg_destroy(bg);
    }
}
