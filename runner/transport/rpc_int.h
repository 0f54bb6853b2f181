/* Sundial: transport internals shared by rpc_hub.c, rpc_stream.c, rpc_server.c and rpc_client.c. */
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

/* A FIFO of byte buffers waiting to be sent on one call (a ring that grows by doubling; a
 * zeroed queue is empty). rpc_stream.c's own. */
typedef struct sd_rpc_outq {
    grpc_byte_buffer **items;
    size_t cap;
    size_t head;
    size_t len;
} sd_rpc_outq;

/*
 * The stream core (rpc_stream.c): the send queue and the receive ring of one call, a client
 * stream (rpc_client.c) or a server call (rpc_server.c), and the pump-thread hooks that keep a
 * busy call moving without a round trip through the loop. Its top comment tells the rules.
 *
 * Receive-ahead: a call keeps up to SD_RPC_RECV_AHEAD received messages between the pump and
 * the loop, holding less than SD_RPC_RECV_AHEAD_BYTES.
 */
#define SD_RPC_RECV_AHEAD       16
#define SD_RPC_RECV_AHEAD_BYTES ((size_t)1 << 20)

typedef struct sd_rpc_sc sd_rpc_sc;

typedef struct sd_rpc_rslot {
    sd_tag tag;
    sd_rpc_sc *owner;
    grpc_byte_buffer *bb; /* filled by C core */
    bool ok;              /* loop thread: the completion's result, once done */
    bool done;            /* loop thread: completed and dispatched, not yet taken */
} sd_rpc_rslot;

/* What differs between a client stream and a server call. Every hook runs on the loop. */
typedef struct sd_rpc_sc_ops {
    /* mu held: may a send batch start (the call is not over)? */
    bool (*may_send)(sd_rpc_sc *sc);
    /* mu held: gRPC refused a send batch; the core has cancelled the call (send_failure). */
    void (*send_refused)(sd_rpc_sc *sc);
    /* A send batch completed (its buffer is freed, `sending` is clear); mu not held. */
    void (*sent)(sd_rpc_sc *sc, bool ok);
    /* A receive completed and its slot is done: take what is in order (sd__rpc_sc_take). */
    void (*received)(sd_rpc_sc *sc);
} sd_rpc_sc_ops;

struct sd_rpc_sc {
    grpc_call *call;
    const sd_rpc_sc_ops *ops;
    const char *what;         /* names the call in logged errors */
    const char *send_failure; /* the status message of the cancel when a send cannot start */
    bool end_is_status;       /* the end is SEND_STATUS_FROM_SERVER, else a client half-close */
    grpc_metadata *md;        /* initial metadata to send (the client's; may be NULL) */
    size_t n_md;
    sd_tag t_send;
    atomic_int pending; /* batches in C core (the side counts its own tags here too) */

    /* Guarded by mu: what the pump thread touches when it chains sends and receives. */
    pthread_mutex_t mu;
    grpc_byte_buffer *send_bb; /* the message of the send batch in flight */
    sd_rpc_outq outq;
    bool end_wanted; /* the end (half-close or status) goes once the queue is empty */
    sd_rpc_code end_code;
    char *end_msg;     /* the status details (NULL: none); freed by sd__rpc_sc_deinit */
    bool end_posted;   /* the end is in a started batch: nothing more is sent */
    bool end_inflight; /* the send batch in flight carries the end */
    bool end_ok;       /* the batch that carried the end completed with ok */
    grpc_slice end_details;
    bool pump_stop_send; /* the side's word: the pump starts no send */
    bool pump_stop_recv; /* ... and posts no receive */
    sd_rpc_rslot rslots[SD_RPC_RECV_AHEAD];
    unsigned r_post;    /* receives posted so far; the next goes to slot r_post % AHEAD */
    unsigned r_deliver; /* slots taken so far */
    bool r_posted;      /* a RECV_MESSAGE is in C core */
    size_t r_held;      /* bytes received and not yet taken */

    /* Loop thread only. */
    bool md_sent; /* SEND_INITIAL_METADATA is in a started batch */
    bool sending; /* a t_send batch is in flight */
};

/* Set sc up for call; the caller then fills what, send_failure, end_is_status, md, n_md. */
void sd__rpc_sc_init(sd_rpc_sc *sc, grpc_call *call, const sd_rpc_sc_ops *ops);
/* Free what sc holds (queued, received and in-flight buffers, end_msg, the mutex), once
 * nothing of it is in C core or in the hand-over queue. */
void sd__rpc_sc_deinit(sd_rpc_sc *sc);
/* Start the next send batch unless one is in flight, the end is posted or !ops->may_send:
 * [initial metadata, the first time] [the next queued message] [the end, when wanted and
 * the queue is empty]. Loop thread; the _locked form with mu held. */
void sd__rpc_sc_kick_locked(sd_rpc_sc *sc);
void sd__rpc_sc_kick(sd_rpc_sc *sc);
/* Queue a copy of msg, and kick when asked. SD_ENOMEM if it cannot be queued. Loop thread. */
SD_MUST_CHECK sd_status sd__rpc_sc_send(sd_rpc_sc *sc, sd_bytes msg, bool kick);
/* Ask for the end after what is queued (a server's status: code and msg, whose ownership
 * passes to sc, NULL for no details), and kick. Loop thread; the _locked form, mu held, does
 * not kick. */
void sd__rpc_sc_end(sd_rpc_sc *sc, sd_rpc_code code, char *msg);
void sd__rpc_sc_end_locked(sd_rpc_sc *sc, sd_rpc_code code, char *msg);
/* Messages queued or in flight. Any thread. */
size_t sd__rpc_sc_queue_len(sd_rpc_sc *sc);
/* Post RECV_MESSAGE into the next free slot, unless one is posted or the ring is full (by
 * count or bytes). False when gRPC refused it: nothing was posted and the caller reports.
 * Loop thread; the _locked form with mu held. */
bool sd__rpc_sc_post_recv_locked(sd_rpc_sc *sc);
bool sd__rpc_sc_post_recv(sd_rpc_sc *sc);
/* Take the next received slot in order: true with *bb (the caller's; NULL at the end of the
 * stream) and *ok; false when it has not come in yet. Loop thread. */
bool sd__rpc_sc_take(sd_rpc_sc *sc, grpc_byte_buffer **bb, bool *ok);
/* True if a received slot waits to be taken. Loop thread. */
bool sd__rpc_sc_has_held(sd_rpc_sc *sc);

/* A NUL-terminated copy of a slice via sd_malloc (NULL on failure). */
char *sd__rpc_slice_dup(grpc_slice s);

#endif
