/*
 * Sundial: the transport hub — one gRPC completion queue, one pump thread, one libev loop.
 *
 * gRPC C core has no file descriptor a loop could poll: its I/O only makes progress inside
 * grpc_completion_queue_next(). So a pump thread sits in that call with an infinite deadline
 * and forwards completions to the loop thread: it links the tags (each carries its own `next`
 * pointer, so the pump never allocates) onto a mutex-guarded FIFO and calls ev_async_send(),
 * the one libev call that is safe from another thread. The loop thread swaps the FIFO out and
 * runs every tag's closure, so all call state and every user callback lives on the loop
 * thread (or on the pump while the loop waits: "Dispatch on the pump" below) and nothing
 * above this layer needs a lock.
 *
 *   gRPC threads ... -> [pump] next(cq, inf), then next(cq, 0) while ready (<= 64)
 *                              -> on_pump hooks -> lock, append the rest, unlock, ev_async_send
 *                                                     |
 *   [loop] wake -> swap FIFO -> tag->fn(tag, ok)
 *
 * The hop costs two thread wake-ups, tens of microseconds on a busy machine. A stream whose
 * every step waited for it (send done -> loop -> next send; message in -> loop -> next
 * receive) would move one message per hop, so the pump does those steps itself: a tag may
 * carry an on_pump hook, run on the pump thread before the hand-over, which starts the next
 * send of a queued message or posts the next receive under the owning call's mutex
 * (the stream core, rpc_stream.c). And after each blocking wait the pump takes what else is
 * ready with zero-deadline polls (which also let C core read what has arrived) and hands the
 * whole batch over with one lock and one wake-up. The loop thus hears of sends only when a
 * queue runs dry and gets received messages many at a time; one echo stream went from
 * ~5 context switches a message to ~0.2 (tools/bench_transport, which measures one stream
 * against raw C core on one thread). The cost: the first completion of a batch waits while
 * the pump collects up to 63 more, each of which was ready already.
 *
 * Dispatch on the pump (sd_rpc_loop_run). A message that finds the loop idle would still
 * cost the loop thread's wake-up before its callback runs, on every hop of a request chain
 * (a one-element job makes about fifteen). So a loop run by sd_rpc_loop_run holds loop_mu
 * except while it waits in its poll (libev's release/acquire hooks), and the pump, when it
 * can take loop_mu and its batch is short, runs the callbacks itself: one at a time, in
 * order after anything still queued for the loop, with the loop's clock brought up to date;
 * then it wakes the loop so it sees the watchers the callbacks changed. A busy stream's longer
 * batches still go to the loop, so the pump goes on reading while the loop works. ev_break
 * from the pump would be undone by libev when its poll returns: sd_rpc_loop_break defers it
 * to the loop's own wake-up.
 *
 * There is deliberately no "inline drain" (the loop thread polling the queue itself with a
 * zero deadline to skip the hop): with gRPC 1.51 a second thread in
 * grpc_completion_queue_next() can take the kick meant for the pump while the completion is
 * still being pushed, return empty-handed, and leave the completion stranded until some
 * unrelated timer wakes the pump — measured here as streams stalling for 100-250 ms at a time.
 * Only the pump consumes the queue (except in sd_rpc_destroy, which polls until idle).
 *
 * Tasks from sd_rpc_run_on_loop() travel the same way on a second FIFO; they are allocated by
 * the caller's thread, so only that call can fail (SD_ENOMEM).
 *
 * Loop liveness: the wake-up watcher does not keep ev_run() going by itself (it is ev_unref'd).
 * Each live server, server call, client call and client stream holds one ev_ref until it is
 * freed. ev_run() therefore returns once the last of them is gone and no other watcher of the
 * caller's is active; tasks queued from other threads do not keep the loop alive.
 *
 * gRPC's own log lines are routed into runner/base/log.h (module "grpc"). gRPC logs from its
 * internal threads; sd_log is thread-safe. gRPC "errors" are mostly connection noise (a peer
 * went away), so they are logged at WARN.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/transport/rpc_int.h"

/* ---------------------------------------------------------------- status mapping */

sd_rpc_code sd_rpc_code_from_status(sd_status st)
{
    switch (st) {
    case SD_OK:
        return SD_RPC_OK;
    case SD_ENOMEM:
    case SD_ETOOBIG:
        return SD_RPC_RESOURCE_EXHAUSTED;
    case SD_EINVAL:
    case SD_EPROTO:
        return SD_RPC_INVALID_ARGUMENT;
    case SD_ENOTFOUND:
        return SD_RPC_NOT_FOUND;
    case SD_ESTATE:
        return SD_RPC_FAILED_PRECONDITION;
    case SD_EIO:
    case SD_EINTERNAL:
        return SD_RPC_INTERNAL;
    case SD_ECANCELED:
        return SD_RPC_CANCELLED;
    case SD_EUNIMPL:
        return SD_RPC_UNIMPLEMENTED;
    case SD_ETIMEOUT:
        return SD_RPC_DEADLINE_EXCEEDED;
    case SD_EEXIST:
        return SD_RPC_ALREADY_EXISTS;
    case SD_EUNAVAIL:
        return SD_RPC_UNAVAILABLE;
    default:
        return SD_RPC_UNKNOWN;
    }
}

/* ---------------------------------------------------------------- gRPC log routing */

static void grpc_log_to_sd(gpr_log_func_args *args)
{
    sd_log_level level = SD_LOG_DEBUG;
    const char *file = args->file != NULL ? args->file : "?";
    const char *slash = strrchr(file, '/');

    if (args->severity == GPR_LOG_SEVERITY_ERROR) {
        level = SD_LOG_WARN;
    } else if (args->severity == GPR_LOG_SEVERITY_INFO) {
        level = SD_LOG_INFO;
    }
    sd_log(level, "grpc", "%s:%d %s", slash != NULL ? slash + 1 : file, args->line,
           args->message != NULL ? args->message : "");
}

/* ---------------------------------------------------------------- small shared helpers */

bool sd__rpc_start_batch(grpc_call *call,
                         const grpc_op *ops,
                         size_t n_ops,
                         sd_tag *tag,
                         const char *what)
{
    grpc_call_error e;
    SD_TSAN_RELEASE(tag);
    e = grpc_call_start_batch(call, ops, n_ops, tag, NULL);
    if (e != GRPC_CALL_OK) {
        SD_ERROR(SD_RPC_MOD, "%s: grpc_call_start_batch failed: %s", what,
                 grpc_call_error_to_string(e));
        return false;
    }
    return true;
}

bool sd__rpc_bb_bytes(grpc_byte_buffer *bb, grpc_slice *hold, sd_bytes *out)
{
    grpc_byte_buffer_reader r;

    *hold = grpc_empty_slice();
    if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE) {
        grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
        if (sb->count == 0) {
            *out = sd_bytes_make("", 0);
            return true;
        }
        if (sb->count == 1) {
            *out = sd_bytes_make(GRPC_SLICE_START_PTR(sb->slices[0]),
                                 GRPC_SLICE_LENGTH(sb->slices[0]));
            return true;
        }
    }
    if (!grpc_byte_buffer_reader_init(&r, bb)) {
        return false;
    }
    *hold = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    *out = sd_bytes_make(GRPC_SLICE_START_PTR(*hold), GRPC_SLICE_LENGTH(*hold));
    return true;
}

grpc_byte_buffer *sd__rpc_bb_from(sd_bytes msg)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)msg.ptr, msg.len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

char *sd__rpc_slice_dup(grpc_slice s)
{
    return sd_strndup((const char *)GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
}

/* ---------------------------------------------------------------- liveness */

void sd__rpc_hold(sd_rpc *rpc)
{
    rpc->n_live++;
    ev_ref(rpc->loop);
}

void sd__rpc_release(sd_rpc *rpc)
{
    rpc->n_live--;
    ev_unref(rpc->loop);
}

/* ---------------------------------------------------------------- pump and dispatch */

/* ---------------------------------------------------------------- inline dispatch */

/* The hub whose loop this thread runs in sd_rpc_loop_run, and the hub whose callbacks it is
 * running now (holding that hub's loop_mu). */
static _Thread_local sd_rpc *t_run;
static _Thread_local sd_rpc *t_in;

/* libev's hooks around its blocking poll: the loop thread lets go of loop_mu only while it
 * waits, so the pump can run callbacks exactly when the loop would be idle. */
static void loop_release(struct ev_loop *loop)
{
    sd_rpc *rpc = ev_userdata(loop);
    if (rpc != NULL && t_run == rpc) {
        t_in = NULL;
        pthread_mutex_unlock(&rpc->loop_mu);
    }
}

static void loop_acquire(struct ev_loop *loop)
{
    sd_rpc *rpc = ev_userdata(loop);
    if (rpc != NULL && t_run == rpc) {
        pthread_mutex_lock(&rpc->loop_mu);
        t_in = rpc;
    }
}

static void loop_noop(struct ev_loop *loop)
{
    (void)loop;
}

void sd_rpc_loop_break(struct ev_loop *loop, int how)
{
    sd_rpc *rpc = ev_userdata(loop);
    if (rpc != NULL && t_in == rpc && t_run != rpc) {
        /* On the pump while the loop waits: libev resets a break made during its poll, so
         * the loop makes it itself once woken (on_wake; pump_inline wakes it). */
        rpc->break_pending = how;
        return;
    }
    ev_break(loop, how);
}

bool sd_rpc_on_loop(const sd_rpc *rpc)
{
    return rpc != NULL && t_in == rpc;
}

void sd_rpc_loop_run(struct ev_loop *loop)
{
    sd_rpc *rpc = ev_userdata(loop);
    if (rpc == NULL || t_run != NULL) {
        ev_run(loop, 0);
        return;
    }
    pthread_mutex_lock(&rpc->loop_mu);
    t_run = rpc;
    t_in = rpc;
    atomic_store(&rpc->inline_ok, true);
    ev_run(loop, 0);
    atomic_store(&rpc->inline_ok, false);
    t_in = NULL;
    t_run = NULL;
    pthread_mutex_unlock(&rpc->loop_mu);
}

/* Append the chain head..tail to the hand-over queue and wake the loop. Any thread. */
static void post_chain(sd_rpc *rpc, sd_tag *head, sd_tag *tail)
{
    pthread_mutex_lock(&rpc->lock);
    if (rpc->ev_tail != NULL) {
        rpc->ev_tail->next = head;
    } else {
        rpc->ev_head = head;
    }
    rpc->ev_tail = tail;
    pthread_mutex_unlock(&rpc->lock);
    ev_async_send(rpc->loop, &rpc->wake);
}

void sd__rpc_post_tag(sd_rpc *rpc, sd_tag *tag, bool ok)
{
    tag->ok = ok;
    tag->next = NULL;
    post_chain(rpc, tag, tag);
}

/* Run the completions, then the tasks, in order (whoever holds the loop). */
static void dispatch(sd_rpc *rpc, sd_tag *tags, sd_rpc_task *tasks)
{
    int n = 0;
    rpc->dispatch_depth++;
    while (tags != NULL) {
        sd_tag *t = tags;
        tags = t->next;
        t->next = NULL;
        n++;
        t->fn(t, t->ok);
    }
    rpc->n_pumped += (unsigned long)n;
    while (tasks != NULL) {
        sd_rpc_task *k = tasks;
        tasks = k->next;
        k->fn(k->ctx);
        sd_free(k);
    }
    rpc->dispatch_depth--;
}

/*
 * The pump: block for one completion, then take what else is ready without blocking (up to
 * SD_RPC_PUMP_BATCH, with zero-deadline polls that also let C core read what has arrived),
 * and hand the batch over with one lock and one wake-up. Completions an on_pump hook consumes
 * (a chained send or receive) are not handed over at all.
 */
#define SD_RPC_PUMP_BATCH 64

/*
 * Pump thread: dispatch the chain from head (n tags) here, without the hop to the loop thread, when
 * the loop runs in sd_rpc_loop_run and is waiting in its poll (loop_mu free) and the chain is
 * short (a busy stream's batches keep going to the loop, so the pump goes on reading while
 * the loop works). What the loop has not taken yet from the hand-over queues runs first, in
 * order. Callbacks then run as on the loop thread: one at a time, under loop_mu, with the
 * loop's clock brought up to date; the loop is woken afterwards so it sees the watchers they
 * started or stopped. False when it is the loop's to do.
 */
#define SD_RPC_INLINE_MAX 4

/* The inline dispatch of pump_inline and sd_rpc_run_soon: the tags head (n of them), then
 * the task `task` (may be NULL), each after what is queued of its kind. */
static bool run_inline(sd_rpc *rpc, sd_tag *head, int n, sd_rpc_task *task)
{
    if (!atomic_load(&rpc->inline_ok) || pthread_mutex_trylock(&rpc->loop_mu) != 0) {
        return false;
    }
    if (!atomic_load(&rpc->inline_ok)) {
        pthread_mutex_unlock(&rpc->loop_mu);
        return false;
    }
    t_in = rpc;
    ev_now_update(rpc->loop);
    pthread_mutex_lock(&rpc->lock);
    sd_tag *tags = head;
    if (rpc->ev_head != NULL) {
        rpc->ev_tail->next = head;
        tags = rpc->ev_head;
    }
    if (task != NULL) {
        if (rpc->task_tail != NULL) {
            rpc->task_tail->next = task;
        } else {
            rpc->task_head = task;
        }
    }
    sd_rpc_task *tasks = rpc->task_head;
    rpc->ev_head = rpc->ev_tail = NULL;
    rpc->task_head = rpc->task_tail = NULL;
    pthread_mutex_unlock(&rpc->lock);
    rpc->n_inline += (unsigned long)n;
    dispatch(rpc, tags, tasks);
    if (ev_pending_count(rpc->loop) > 0) {
        ev_invoke_pending(rpc->loop); /* what the callbacks fed the loop (ev_feed_event) */
    }
    t_in = NULL;
    pthread_mutex_unlock(&rpc->loop_mu);
    ev_async_send(rpc->loop, &rpc->wake);
    return true;
}

static bool pump_inline(sd_rpc *rpc, sd_tag *head, int n)
{
    return n <= SD_RPC_INLINE_MAX && run_inline(rpc, head, n, NULL);
}

static void *pump_main(void *arg)
{
    sd_rpc *rpc = arg;
    bool shutdown = false;
    while (!shutdown) {
        sd_tag *head = NULL, *tail = NULL;
        int n_tags = 0;
        grpc_event ev =
            grpc_completion_queue_next(rpc->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        for (int n = 0;; n++) {
            if (ev.type == GRPC_QUEUE_SHUTDOWN) {
                shutdown = true;
                break;
            }
            if (ev.type == GRPC_OP_COMPLETE) {
                sd_tag *tag = ev.tag;
                bool ok = ev.success != 0;
                SD_TSAN_ACQUIRE(tag);
                if (tag->on_pump == NULL || !tag->on_pump(tag, &ok)) {
                    tag->ok = ok;
                    tag->next = NULL;
                    if (tail != NULL) {
                        tail->next = tag;
                    } else {
                        head = tag;
                    }
                    tail = tag;
                    n_tags++;
                }
            }
            if (n + 1 >= SD_RPC_PUMP_BATCH) {
                break;
            }
            ev = grpc_completion_queue_next(rpc->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
            if (ev.type == GRPC_QUEUE_TIMEOUT) {
                break;
            }
        }
        if (head != NULL && !pump_inline(rpc, head, n_tags)) {
            post_chain(rpc, head, tail);
        }
    }
    return NULL;
}

static void on_wake(struct ev_loop *loop, ev_async *w, int revents)
{
    sd_rpc *rpc = w->data;
    sd_tag *tags;
    sd_rpc_task *tasks;

    (void)loop;
    (void)revents;
    pthread_mutex_lock(&rpc->lock);
    tags = rpc->ev_head;
    tasks = rpc->task_head;
    rpc->ev_head = rpc->ev_tail = NULL;
    rpc->task_head = rpc->task_tail = NULL;
    pthread_mutex_unlock(&rpc->lock);
    rpc->n_wakeups++;
    dispatch(rpc, tags, tasks);
    if (rpc->break_pending != 0) {
        ev_break(loop, rpc->break_pending);
        rpc->break_pending = 0;
    }
}

/* ---------------------------------------------------------------- public */

sd_status sd_rpc_create(struct ev_loop *loop, sd_rpc **out, sd_err *err)
{
    sd_rpc *rpc;
    int rc;

    *out = NULL;
    if (loop == NULL) {
        return sd_err_set(err, SD_EINVAL, "rpc hub: loop is NULL");
    }
    rpc = sd_calloc(1, sizeof(*rpc));
    if (rpc == NULL) {
        return sd_err_set(err, SD_ENOMEM, "rpc hub: out of memory");
    }
    gpr_set_log_function(grpc_log_to_sd);
    /* Names (an SDK's worker pool announces "localhost:PORT") are resolved with getaddrinfo,
     * not gRPC's c-ares resolver, which leaks a few bytes per resolution in this gRPC (1.51):
     * a server connecting to a LOOPBACK pool per job would grow without bound. The caller's
     * own setting wins. */
    (void)setenv("GRPC_DNS_RESOLVER", "native", 0);
    grpc_init();
    rpc->loop = loop;
    pthread_mutex_init(&rpc->lock, NULL);
    pthread_mutex_init(&rpc->loop_mu, NULL);
    atomic_init(&rpc->inline_ok, false);
    if (ev_userdata(loop) == NULL) {
        /* The loop's first hub may dispatch on its pump (sd_rpc_loop_run). */
        ev_set_userdata(loop, rpc);
        ev_set_loop_release_cb(loop, loop_release, loop_acquire);
        rpc->hooks = true;
    }
    rpc->cq = grpc_completion_queue_create_for_next(NULL);
    if (rpc->cq == NULL) {
        pthread_mutex_destroy(&rpc->lock);
        sd_free(rpc);
        grpc_shutdown();
        return sd_err_set(err, SD_EINTERNAL, "rpc hub: cannot create a completion queue");
    }
    ev_async_init(&rpc->wake, on_wake);
    rpc->wake.data = rpc;
    ev_async_start(loop, &rpc->wake);
    ev_unref(loop);
    rc = pthread_create(&rpc->pump, NULL, pump_main, rpc);
    if (rc != 0) {
        ev_ref(loop);
        ev_async_stop(loop, &rpc->wake);
        grpc_completion_queue_shutdown(rpc->cq);
        while (
            grpc_completion_queue_next(rpc->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
            GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(rpc->cq);
        pthread_mutex_destroy(&rpc->lock);
        sd_free(rpc);
        grpc_shutdown();
        return sd_err_set(err, SD_EINTERNAL, "rpc hub: cannot start the pump thread (%d)", rc);
    }
    rpc->pump_running = true;
    *out = rpc;
    return SD_OK;
}

void sd__rpc_closer_add(sd_rpc *rpc, sd_rpc_closer *c)
{
    c->prev = NULL;
    c->next = rpc->closers;
    if (rpc->closers != NULL) {
        rpc->closers->prev = c;
    }
    rpc->closers = c;
}

void sd__rpc_closer_remove(sd_rpc *rpc, sd_rpc_closer *c)
{
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        rpc->closers = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    c->prev = c->next = NULL;
}

/*
 * Run completions on the calling (loop) thread until nothing is live or the time is up:
 * events the pump forwarded, and events taken directly with a short deadline.
 */
static void drive_until_idle(sd_rpc *rpc, int64_t limit_ms)
{
    gpr_timespec end =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(limit_ms, GPR_TIMESPAN));
    while (rpc->n_live > 0 && gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), end) < 0) {
        sd_tag *tags;
        pthread_mutex_lock(&rpc->lock);
        tags = rpc->ev_head;
        rpc->ev_head = rpc->ev_tail = NULL;
        pthread_mutex_unlock(&rpc->lock);
        while (tags != NULL) {
            sd_tag *t = tags;
            tags = t->next;
            t->next = NULL;
            t->fn(t, t->ok);
        }
        if (rpc->n_live == 0) {
            break;
        }
        grpc_event ev = grpc_completion_queue_next(
            rpc->cq,
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(5, GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            sd_tag *tag = ev.tag;
            bool ok = ev.success != 0;
            SD_TSAN_ACQUIRE(tag);
            if (tag->on_pump == NULL || !tag->on_pump(tag, &ok)) {
                tag->fn(tag, ok);
            }
        }
    }
}

void sd_rpc_destroy(sd_rpc *rpc)
{
    if (rpc == NULL) {
        return;
    }
    if (rpc->n_live > 0) {
        /* Shut down what the caller left open (servers with grace 0, calls cancelled) and
         * let those completions run here; their callbacks run on this thread. */
        SD_DEBUG(SD_RPC_MOD, "rpc hub destroyed with %ld live servers/calls/streams; ending them",
                 rpc->n_live);
        for (sd_rpc_closer *c = rpc->closers; c != NULL;) {
            sd_rpc_closer *next = c->next;
            c->force(c);
            c = next;
        }
        drive_until_idle(rpc, 5000);
        if (rpc->n_live > 0) {
            SD_ERROR(SD_RPC_MOD,
                     "rpc hub: %ld servers/calls/streams did not end; shutdown may hang",
                     rpc->n_live);
        }
    }
    SD_DEBUG(SD_RPC_MOD, "hub: %lu completions via the pump, %lu wake-ups, %lu run by the pump",
             rpc->n_pumped, rpc->n_wakeups, rpc->n_inline);
    grpc_completion_queue_shutdown(rpc->cq);
    if (rpc->pump_running) {
        pthread_join(rpc->pump, NULL);
    }
    /* Completions forwarded but never dispatched cannot exist once every object is gone;
     * tasks that never ran are dropped. */
    while (rpc->task_head != NULL) {
        sd_rpc_task *k = rpc->task_head;
        rpc->task_head = k->next;
        sd_free(k);
    }
    grpc_completion_queue_destroy(rpc->cq);
    ev_ref(rpc->loop);
    ev_async_stop(rpc->loop, &rpc->wake);
    if (rpc->hooks) {
        ev_set_loop_release_cb(rpc->loop, loop_noop, loop_noop);
        ev_set_userdata(rpc->loop, NULL);
    }
    pthread_mutex_destroy(&rpc->lock);
    pthread_mutex_destroy(&rpc->loop_mu);
    sd_free(rpc);
    grpc_shutdown();
}

struct ev_loop *sd_rpc_loop(sd_rpc *rpc)
{
    return rpc->loop;
}

static sd_status run_task(sd_rpc *rpc, void (*fn)(void *ctx), void *ctx, bool soon)
{
    sd_rpc_task *k;
    if (rpc == NULL || fn == NULL) {
        return SD_EINVAL;
    }
    k = sd_malloc(sizeof(*k));
    if (k == NULL) {
        return SD_ENOMEM;
    }
    k->fn = fn;
    k->ctx = ctx;
    k->next = NULL;
    if (soon && t_in != rpc && run_inline(rpc, NULL, 0, k)) {
        return SD_OK;
    }
    pthread_mutex_lock(&rpc->lock);
    if (rpc->task_tail != NULL) {
        rpc->task_tail->next = k;
    } else {
        rpc->task_head = k;
    }
    rpc->task_tail = k;
    pthread_mutex_unlock(&rpc->lock);
    ev_async_send(rpc->loop, &rpc->wake);
    return SD_OK;
}

sd_status sd_rpc_run_on_loop(sd_rpc *rpc, void (*fn)(void *ctx), void *ctx)
{
    return run_task(rpc, fn, ctx, false);
}

sd_status sd_rpc_run_soon(sd_rpc *rpc, void (*fn)(void *ctx), void *ctx)
{
    return run_task(rpc, fn, ctx, true);
}
