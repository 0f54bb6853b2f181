/* Sundial: transport internals shared by rpc_hub.c, rpc_server.c and rpc_client.c. */
#ifndef SD_RUNNER_TRANSPORT_RPC_INT_H
#define SD_RUNNER_TRANSPORT_RPC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <ev.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>

#include "runner/base/tsan.h"
#include "runner/transport/rpc.h"

#define SD_RPC_MOD "transport"

/*
 * A completion tag is a closure: gRPC hands back the pointer we gave it, and fn recovers the
 * owning object with SD_CONTAINER_OF. Each object embeds one tag per kind of batch it can have
 * in flight, and C core allows at most one batch of each kind per call, so a tag is never in
 * two places at once. `next` and `ok` let the pump thread queue the tag itself (no allocation
 * on the pump thread): a tag sits in the hand-over queue only between its completion and its
 * dispatch, and it cannot complete again before it has been dispatched.
 *
 * on_pump (optional) runs on the pump thread as soon as the completion surfaces, before it is
 * handed over; it may change *ok. It returns true when it consumed the completion (it started
 * the next batch with the same tag, so nothing goes to the loop), false to hand the tag over
 * as usual. It touches only what its object guards with its own mutex, and never the object
 * after the hand-over (the loop may free it from then on).
 */
typedef struct sd_tag sd_tag;

struct sd_tag {
    void (*fn)(sd_tag *tag, bool ok);
    bool (*on_pump)(sd_tag *tag, bool *ok);
    sd_tag *next;
    bool ok;
};

/* ThreadSanitizer cannot see the ordering gRPC's completion queue provides between starting a
 * batch on one thread and its completion surfacing on another: the tag carries that edge
 * (SD_TSAN_RELEASE / SD_TSAN_ACQUIRE, runner/base/tsan.h). */

#define SD_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* A task handed to the loop by sd_rpc_run_on_loop. */
typedef struct sd_rpc_task sd_rpc_task;

struct sd_rpc_task {
    void (*fn)(void *ctx);
    void *ctx;
    sd_rpc_task *next;
};

/*
 * Servers and channels register a "closer" with the hub, so sd_rpc_destroy() can end what the
 * caller left open (a server shut down but not yet finished, calls still in flight) instead
 * of leaking it or hanging in the completion queue shutdown.
 */
typedef struct sd_rpc_closer sd_rpc_closer;

struct sd_rpc_closer {
    void (*force)(sd_rpc_closer *c);
    sd_rpc_closer *prev;
    sd_rpc_closer *next;
};

void sd__rpc_closer_add(sd_rpc *rpc, sd_rpc_closer *c);
void sd__rpc_closer_remove(sd_rpc *rpc, sd_rpc_closer *c);

struct sd_rpc {
    struct ev_loop *loop;
    sd_rpc_closer *closers;
    grpc_completion_queue *cq;
    ev_async wake;
    pthread_t pump;
    bool pump_running;

    /* Guarded by lock: completions forwarded by the pump and tasks from any thread. */
    pthread_mutex_t lock;
    sd_tag *ev_head;
    sd_tag *ev_tail;
    sd_rpc_task *task_head;
    sd_rpc_task *task_tail;

    /* Inline dispatch (sd_rpc_loop_run): held by whoever runs this hub's callbacks, the loop
     * thread (all the time but while it waits in its backend poll) or the pump (while it
     * dispatches a completion itself because the loop was waiting). */
    pthread_mutex_t loop_mu;
    atomic_bool inline_ok; /* sd_rpc_loop_run is running the loop */
    bool hooks;            /* this hub set the loop's userdata and release/acquire hooks */
    int break_pending;     /* sd_rpc_loop_break from the pump: the loop breaks when it wakes */

    /* Loop thread only. */
    long n_live; /* servers, server calls, client calls and streams: each holds an ev_ref */
    int dispatch_depth;

    /* Counters, logged at debug level by sd_rpc_destroy (loop thread only). */
    unsigned long n_pumped;
    unsigned long n_wakeups;
    unsigned long n_inline; /* completions the pump dispatched itself */
};

/*
 * Queue tag for dispatch on the loop thread, as the pump does with a completion (fn(tag, ok)
 * runs from the loop, never inside this call). Any thread; the tag must not be queued already.
 */
void sd__rpc_post_tag(sd_rpc *rpc, sd_tag *tag, bool ok);

/* Keep the loop alive while an object is live (loop thread). */
/* The capture switch for fuzz seeds (rpc_capture.c): with SUNDIAL_CAPTURE_DIR set, write a
 * request message a handler receives on call to a file of that directory. */
void sd__rpc_capture(const sd_rpc_call *call, sd_bytes msg, bool open);

/* A listening socket bound before the server existed (rpc_listen.c): accepted connections go
 * to gRPC as channels of the server. fd -1: none (gRPC listens itself). Loop thread only. */
typedef struct sd_rpc_listener {
    int fd;
    bool active;
    grpc_server *gs;
    ev_io io;
    ev_timer pause;
} sd_rpc_listener;

/* Watch l->fd on loop and hand each connection to gs (once gs is started). */
void sd__rpc_listener_start(sd_rpc_listener *l, struct ev_loop *loop, grpc_server *gs);
/* Stop watching and close the socket (new connects are refused from here on). */
void sd__rpc_listener_close(sd_rpc_listener *l, struct ev_loop *loop);

void sd__rpc_hold(sd_rpc *rpc);
void sd__rpc_release(sd_rpc *rpc);

/*
 * Start a batch on a call. On GRPC_CALL_OK the tag will complete exactly once and true is
 * returned; otherwise the error is logged (naming `what`) and no completion will ever arrive.
 */
bool sd__rpc_start_batch(grpc_call *call,
                         const grpc_op *ops,
                         size_t n_ops,
                         sd_tag *tag,
                         const char *what);

/*
 * The payload of a received buffer as contiguous bytes. A single uncompressed slice is
 * borrowed without a copy; anything else is read into *hold, which the caller unrefs with
 * grpc_slice_unref after use (it is set to an empty slice in the borrowed case). Returns false
 * if the buffer cannot be read (e.g. bad compression).
 */
bool sd__rpc_bb_bytes(grpc_byte_buffer *bb, grpc_slice *hold, sd_bytes *out);

/* A new byte buffer holding a copy of msg. */
grpc_byte_buffer *sd__rpc_bb_from(sd_bytes msg);

/*
 * A FIFO of byte buffers waiting to be sent on one call (a ring that grows by doubling).
 * A zeroed queue is empty.
 */
typedef struct sd_rpc_outq {
    grpc_byte_buffer **items;
    size_t cap;
    size_t head;
    size_t len;
} sd_rpc_outq;

SD_MUST_CHECK sd_status sd__rpc_outq_push(sd_rpc_outq *q, grpc_byte_buffer *bb);
grpc_byte_buffer *sd__rpc_outq_pop(sd_rpc_outq *q);
/* Destroy every queued buffer and free the ring. */
void sd__rpc_outq_deinit(sd_rpc_outq *q);

/*
 * Pump thread, the caller holding its call's lock: a send completed with more queued; the
 * sent buffer *bb is destroyed and the next one popped into *bb and sent with the same tag.
 * True when that send started; false when it could not, and the call was then cancelled
 * with INTERNAL and the status message `failure` (the caller hands the completion over as a
 * failed send).
 */
bool sd__rpc_chain_send(grpc_call *call,
                        grpc_byte_buffer **bb,
                        sd_rpc_outq *q,
                        sd_tag *tag,
                        const char *what,
                        const char *failure);

/*
 * Receive-ahead (rpc_client.c, rpc_server.c): a stream keeps up to SD_RPC_RECV_AHEAD received
 * messages between the pump and the loop. The pump posts the next RECV_MESSAGE as soon as one
 * completes, into the next free slot of a ring, while fewer than SD_RPC_RECV_AHEAD slots wait
 * for the loop and they hold less than SD_RPC_RECV_AHEAD_BYTES; the loop delivers the slots in
 * order and posts the next receive itself when the pump could not. Each slot has its own tag,
 * so a slot waiting in the hand-over queue is never posted again before it is delivered.
 */
#define SD_RPC_RECV_AHEAD       16
#define SD_RPC_RECV_AHEAD_BYTES ((size_t)1 << 20)

typedef struct sd_rpc_rslot {
    sd_tag tag;
    void *owner;          /* the stream or call */
    grpc_byte_buffer *bb; /* filled by C core */
    bool ok;              /* loop thread: the completion's result, once done */
    bool done;            /* loop thread: completed and dispatched, not yet delivered */
} sd_rpc_rslot;

/* A NUL-terminated copy of a slice via sd_malloc (NULL on failure). */
char *sd__rpc_slice_dup(grpc_slice s);

#endif
