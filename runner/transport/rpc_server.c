/*
 * Sundial: the server side of the transport — registered methods, one state machine per call.
 *
 * Every method is registered with C core before start, unary and server-streaming ones with
 * GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER (the request arrives with the call) and the others
 * with GRPC_SRM_PAYLOAD_NONE. One request per method stays posted, re-armed first thing when a
 * call arrives; one generic request stays posted too and answers unknown paths with
 * UNIMPLEMENTED (without it such calls would hang until their deadline).
 *
 * A call (sd_rpc_call) owns one tag per kind of batch, so nothing is allocated per operation:
 *
 *   t_new    the request notification (server_request_*)
 *   t_close  RECV_CLOSE_ON_SERVER, posted at once: the end event, and how we learn of
 *            cancellation while a handler answers asynchronously
 *   t_send   [SEND_INITIAL_METADATA] [SEND_MESSAGE] [SEND_STATUS_FROM_SERVER] — one at a time
 *   rslots[] RECV_MESSAGE, exactly one posted while receiving (CLIENT_STREAM, BIDI)
 *
 * As on the client (rpc_client.c), the pump thread chains a busy call without a loop round
 * trip: a completed send is followed at once by the next queued message (call_pump_send), a
 * received message by the next receive into a free slot (call_pump_recv, up to
 * SD_RPC_RECV_AHEAD messages or SD_RPC_RECV_AHEAD_BYTES waiting for the loop). The status is
 * only ever sent by the loop, after the queue is empty. The pump reads just two flags the loop
 * keeps under the call's mutex (pump_stop_send, pump_stop_recv, from call_sync_pump); a batch it
 * starts in the instant before they change simply fails, as any batch on a dead call does.
 * Messages received ahead are delivered in order and never while receiving is paused (the
 * loop holds them until sd_rpc_call_resume_recv), so a paused handler sees no on_message.
 *
 * `pending` counts batches that start_batch accepted. The context is freed only when
 * pending == 0 and the end event has been seen; that is also when on_close runs, so on_close
 * is truly the last callback and every message callback comes before it.
 *
 * Sends: the handler queues copies (sd_rpc_outq); kick_send() starts the next batch when none
 * is in flight. The first batch always carries SEND_INITIAL_METADATA (C core would hold a
 * message sent before the headers). Streaming calls send their headers at once; unary calls
 * send headers, the response and the status in one batch. The status rides with the last
 * queued message, so a finish never overtakes a queued message.
 *
 * Receives: the client's half-close is a RECV_MESSAGE that succeeds with a NULL buffer (not
 * RECV_CLOSE_ON_SERVER, which completes only at the very end). Back-pressure is explicit:
 * sd_rpc_call_pause_recv() stops re-posting RECV_MESSAGE, so HTTP/2 flow control stalls the client.
 *
 * `cancelled` in on_close: C core's flag cannot tell "the client went away" from "we sent a
 * non-OK status" reliably across versions, so we combine it with what we know: the call was
 * not cancelled if our status batch completed and either the status was an error we chose or
 * C core reports no cancellation.
 *
 * Shutdown: grpc_server_shutdown_and_notify() stops new calls (posted requests come back with
 * ok=0 and are freed); after the grace period grpc_server_cancel_all_calls() ends live calls;
 * when the notification has arrived and every call and request context is gone, the server is
 * destroyed and the caller's done() runs.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/transport/rpc_int.h"

#define SD_RPC_GENERIC (-1)

typedef struct sd_method {
    char *path;
    sd_rpc_kind kind;
    sd_rpc_handler h;
    void *handle;
    bool posted;
} sd_method;

struct sd_rpc_server {
    sd_rpc *rpc;
    sd_rpc_closer closer;
    grpc_server *gs;
    sd_method *methods;
    size_t n_methods;
    bool started;
    bool shutting_down;
    bool notified;
    bool generic_posted;
    long n_calls;    /* live call contexts (registered and generic) */
    long n_requests; /* request notifications posted and not yet completed */
    sd_tag t_shutdown;
    ev_timer grace;
    ev_timer rearm;
    sd_rpc_listener listener; /* an adopted early socket (fd -1: gRPC listens itself) */
    void (*done)(void *ctx);
    void *done_ctx;
};

typedef struct sd_md_pair {
    char *key;
    char *value;
} sd_md_pair;

struct sd_rpc_call {
    sd_rpc_server *srv;
    int mi; /* method index, or SD_RPC_GENERIC */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array req_md;
    grpc_call_details details; /* generic requests only */
    grpc_byte_buffer *payload;
    grpc_slice status_slice;
    sd_tag t_new;
    sd_tag t_close;
    sd_tag t_send;
    sd_tag t_resume;    /* delivers messages held while paused, from the loop (not a batch) */
    atomic_int pending; /* batches in C core (the pump posts receives and sends too) */
    int grpc_cancelled;

    /* Guarded by mu: what the pump thread touches when it chains sends and receives. */
    pthread_mutex_t mu;
    grpc_byte_buffer *send_bb;
    sd_rpc_outq outq;
    sd_rpc_rslot rslots[SD_RPC_RECV_AHEAD];
    unsigned r_post;     /* receives posted so far; the next goes to slot r_post % AHEAD */
    unsigned r_deliver;  /* slots delivered so far */
    bool r_posted;       /* a RECV_MESSAGE is in C core */
    size_t r_held;       /* bytes received and not yet delivered */
    bool pump_stop_send; /* the loop's flags below say: start no send */
    bool pump_stop_recv; /* ... start no receive (also paused, finishing, half-closed) */

    const char *path;
    char *path_owned;
    char *peer;
    sd_md_pair *md;
    size_t n_md;
    void *data;
    size_t n_queued_total;
    sd_rpc_code finish_code;
    char *finish_msg;

    bool user_opened;     /* on_open ran: on_close is owed */
    bool user_closed;     /* on_close ran or is running */
    bool md_sent;         /* SEND_INITIAL_METADATA is in a started batch */
    bool sending;         /* a t_send batch is in flight */
    bool status_inflight; /* the in-flight send batch carries the status */
    bool status_posted;
    bool status_ok; /* the status batch completed with ok */
    bool finish_requested;
    bool cancel_requested;
    bool failed; /* an op failed: the call is dead, start nothing new */
    bool closed; /* RECV_CLOSE_ON_SERVER completed */
    bool half_closed;
    bool recv_paused;
    bool resume_queued; /* t_resume is in the hand-over queue */
};

static void server_maybe_finish(sd_rpc_server *srv);
static void server_post(sd_rpc_server *srv, int mi);
static void call_on_new(sd_tag *tag, bool ok);

/* ---------------------------------------------------------------- call helpers */

static const sd_rpc_handler *call_handler(const sd_rpc_call *c)
{
    return c->mi == SD_RPC_GENERIC ? NULL : &c->srv->methods[c->mi].h;
}

static sd_rpc_kind call_kind(const sd_rpc_call *c)
{
    return c->mi == SD_RPC_GENERIC ? SD_RPC_KIND_UNARY : c->srv->methods[c->mi].kind;
}

/* True while message and half-close callbacks may still be delivered. */
static bool call_user_active(const sd_rpc_call *c)
{
    return c->user_opened && !c->user_closed && !c->failed && !c->closed && !c->finish_requested &&
           !c->cancel_requested;
}

static void call_fail(sd_rpc_call *c, grpc_status_code code, const char *why)
{
    if (c->failed) {
        return;
    }
    c->failed = true;
    grpc_call_cancel_with_status(c->call, code, why, NULL);
}

/* Mirror the loop's flags into the two the pump reads. mu held. */
static void call_sync_pump_locked(sd_rpc_call *c)
{
    c->pump_stop_send = c->failed || c->closed || c->cancel_requested || c->status_posted;
    c->pump_stop_recv = c->pump_stop_send || c->finish_requested || c->recv_paused ||
                        c->half_closed || c->user_closed;
}

static void call_sync_pump(sd_rpc_call *c)
{
    pthread_mutex_lock(&c->mu);
    call_sync_pump_locked(c);
    pthread_mutex_unlock(&c->mu);
}

static void call_release_request(sd_rpc_call *c)
{
    grpc_metadata_array_destroy(&c->req_md);
    grpc_call_details_destroy(&c->details);
    if (c->payload != NULL) {
        grpc_byte_buffer_destroy(c->payload);
    }
    if (c->call != NULL) {
        grpc_call_unref(c->call);
    }
    pthread_mutex_destroy(&c->mu);
    sd_free(c);
}

static void call_destroy(sd_rpc_call *c)
{
    sd_rpc_server *srv = c->srv;
    sd_rpc *rpc = srv->rpc;

    /* Nothing is in C core or in the hand-over queue now: the pump cannot touch c. */
    sd__rpc_outq_deinit(&c->outq);
    for (size_t i = 0; i < SD_RPC_RECV_AHEAD; i++) {
        if (c->rslots[i].bb != NULL) {
            grpc_byte_buffer_destroy(c->rslots[i].bb);
        }
    }
    if (c->send_bb != NULL) {
        grpc_byte_buffer_destroy(c->send_bb);
    }
    for (size_t i = 0; i < c->n_md; i++) {
        sd_free(c->md[i].key);
        sd_free(c->md[i].value);
    }
    sd_free(c->md);
    sd_free(c->path_owned);
    sd_free(c->peer);
    sd_free(c->finish_msg);
    call_release_request(c); /* metadata arrays, details, grpc_call_unref, the context */
    srv->n_calls--;
    sd__rpc_release(rpc);
    server_maybe_finish(srv);
}

static void call_maybe_destroy(sd_rpc_call *c)
{
    const sd_rpc_handler *h;
    call_sync_pump(c);
    if (atomic_load(&c->pending) > 0 || !c->closed) {
        return;
    }
    h = call_handler(c);
    if (c->user_opened && !c->user_closed) {
        bool cancelled = !c->status_ok || (c->grpc_cancelled && c->finish_code == SD_RPC_OK);
        c->user_closed = true;
        if (h->on_close != NULL) {
            h->on_close(c, cancelled, h->ctx);
        }
    }
    call_destroy(c);
}

static void call_on_send(sd_tag *tag, bool ok);

static bool call_pump_send(sd_tag *tag, bool *ok);

/* The status op for the finish asked for (c->status_slice holds its details until the batch
 * completes). mu held. */
static void status_op(sd_rpc_call *c, grpc_op *op)
{
    c->status_slice =
        c->finish_msg != NULL ? grpc_slice_from_copied_string(c->finish_msg) : grpc_empty_slice();
    op->op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op->data.send_status_from_server.status = (grpc_status_code)c->finish_code;
    op->data.send_status_from_server.status_details = &c->status_slice;
}

/* Start the next send batch if none is in flight. Loop thread, mu held. */
static void call_kick_send_locked(sd_rpc_call *c)
{
    grpc_op ops[3];
    size_t n = 0;
    bool with_status = false;

    if (c->sending || c->failed || c->closed || c->status_posted) {
        return;
    }
    memset(ops, 0, sizeof(ops));
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    }
    if (c->outq.len > 0) {
        c->send_bb = sd__rpc_outq_pop(&c->outq);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->send_bb;
        n++;
    }
    if (c->finish_requested && c->outq.len == 0) {
        status_op(c, &ops[n++]);
        with_status = true;
    }
    if (n == 0) {
        return;
    }
    c->t_send.fn = call_on_send;
    c->t_send.on_pump = call_pump_send;
    if (!sd__rpc_start_batch(c->call, ops, n, &c->t_send, c->path)) {
        if (c->send_bb != NULL) {
            grpc_byte_buffer_destroy(c->send_bb);
            c->send_bb = NULL;
        }
        if (with_status) {
            grpc_slice_unref(c->status_slice);
        }
        call_fail(c, GRPC_STATUS_INTERNAL, "server could not send");
        call_sync_pump_locked(c);
        return;
    }
    atomic_fetch_add(&c->pending, 1);
    c->sending = true;
    c->md_sent = true;
    c->status_inflight = with_status;
    if (with_status) {
        c->status_posted = true;
        call_sync_pump_locked(c);
    }
}

static void call_kick_send(sd_rpc_call *c)
{
    pthread_mutex_lock(&c->mu);
    call_kick_send_locked(c);
    pthread_mutex_unlock(&c->mu);
}

/*
 * Pump thread, mu held: the last queued message went out and the status is asked for: send
 * it now with the same tag (a stream's end costs no hop to a loop that may be busy). False
 * when gRPC refused it (the completion is then handed over as a failed send).
 */
static bool call_chain_status_locked(sd_rpc_call *c)
{
    grpc_op op;
    grpc_byte_buffer_destroy(c->send_bb);
    c->send_bb = NULL;
    memset(&op, 0, sizeof(op));
    status_op(c, &op);
    if (!sd__rpc_start_batch(c->call, &op, 1, &c->t_send, c->path)) {
        grpc_slice_unref(c->status_slice);
        grpc_call_cancel_with_status(c->call, GRPC_STATUS_INTERNAL, "server could not send", NULL);
        return false;
    }
    c->status_inflight = true;
    c->status_posted = true;
    c->pump_stop_send = true;
    return true;
}

/*
 * Pump thread: a send completed. If it went out and more messages are queued, send the next
 * one now with the same tag (the loop is not told), or the status when that was the last and
 * it is asked for; otherwise hand the completion over. The batch that carried the status is
 * always handed over (pump_stop_send is set by then).
 */
static bool call_pump_send(sd_tag *tag, bool *ok)
{
    sd_rpc_call *c = SD_CONTAINER_OF(tag, sd_rpc_call, t_send);
    bool chained = false;

    pthread_mutex_lock(&c->mu);
    if (*ok && !c->pump_stop_send && c->send_bb != NULL &&
        (c->outq.len > 0 || c->finish_requested)) {
        chained = c->outq.len > 0 ? sd__rpc_chain_send(c->call, &c->send_bb, &c->outq, &c->t_send,
                                                       c->path, "server could not send")
                                  : call_chain_status_locked(c);
        if (!chained) { /* handed over as a failed send: the loop marks the call failed */
            c->pump_stop_send = true;
            *ok = false;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return chained;
}

static void call_on_send(sd_tag *tag, bool ok)
{
    sd_rpc_call *c = SD_CONTAINER_OF(tag, sd_rpc_call, t_send);
    atomic_fetch_sub(&c->pending, 1);
    pthread_mutex_lock(&c->mu);
    c->sending = false;
    if (c->send_bb != NULL) {
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
    }
    if (c->status_inflight) {
        grpc_slice_unref(c->status_slice);
        c->status_inflight = false;
        c->status_ok = ok;
    }
    if (!ok) {
        c->failed = true;
    } else {
        call_kick_send_locked(c);
    }
    pthread_mutex_unlock(&c->mu);
    call_maybe_destroy(c);
}

static void call_on_recv(sd_tag *tag, bool ok);
static bool call_pump_recv(sd_tag *tag, bool *ok);

/*
 * Post RECV_MESSAGE into the next free slot, unless one is posted, every slot waits for the
 * loop or they hold SD_RPC_RECV_AHEAD_BYTES. Either thread, mu held; on the pump thread only
 * while pump_stop_recv is clear (the loop checks its own flags before calling).
 */
static bool call_post_recv_locked(sd_rpc_call *c)
{
    sd_rpc_rslot *slot;
    grpc_op op;

    if (c->r_posted || c->r_post - c->r_deliver >= SD_RPC_RECV_AHEAD ||
        c->r_held >= SD_RPC_RECV_AHEAD_BYTES) {
        return true;
    }
    slot = &c->rslots[c->r_post % SD_RPC_RECV_AHEAD];
    slot->owner = c;
    slot->bb = NULL;
    slot->tag.fn = call_on_recv;
    slot->tag.on_pump = call_pump_recv;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &slot->bb;
    if (!sd__rpc_start_batch(c->call, &op, 1, &slot->tag, c->path)) {
        return false;
    }
    atomic_fetch_add(&c->pending, 1);
    c->r_post++;
    c->r_posted = true;
    return true;
}

static void call_post_recv(sd_rpc_call *c)
{
    bool ok;
    if (c->recv_paused || c->half_closed || c->failed || c->closed || c->finish_requested ||
        c->cancel_requested) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    ok = call_post_recv_locked(c);
    if (!ok) {
        call_fail(c, GRPC_STATUS_INTERNAL, "server could not receive");
        call_sync_pump_locked(c);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Pump thread: a receive completed; post the next one at once if it carried a message. */
static bool call_pump_recv(sd_tag *tag, bool *ok)
{
    sd_rpc_rslot *slot = SD_CONTAINER_OF(tag, sd_rpc_rslot, tag);
    sd_rpc_call *c = slot->owner;

    pthread_mutex_lock(&c->mu);
    c->r_posted = false;
    if (*ok && slot->bb != NULL) {
        c->r_held += grpc_byte_buffer_length(slot->bb);
        if (!c->pump_stop_recv && !call_post_recv_locked(c)) {
            /* The loop finds no receive posted and tries (and reports) it itself. */
            c->pump_stop_recv = true;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return false;
}

/* Deliver one received slot: a message, the client's half-close, or the end of the call. */
static void call_deliver(sd_rpc_call *c, grpc_byte_buffer *bb, bool ok)
{
    const sd_rpc_handler *h = call_handler(c);
    grpc_slice hold;
    sd_bytes msg;

    if (!ok) {
        c->failed = true;
    } else if (bb == NULL && grpc_call_failed_before_recv_message(c->call)) {
        /* The stream was reset (client cancel, disconnect): not a half-close. */
        c->failed = true;
    } else if (bb == NULL) {
        c->half_closed = true;
        if (call_user_active(c) && h->on_half_close != NULL) {
            h->on_half_close(c, h->ctx);
        }
    } else if (!sd__rpc_bb_bytes(bb, &hold, &msg)) {
        call_fail(c, GRPC_STATUS_INTERNAL, "unreadable request message");
    } else {
        if (!GRPC_SLICE_IS_EMPTY(hold)) {
            /* The message was copied into one slice: its received pieces can go now, not
             * after the handler (a 10 MB Data message would otherwise be held twice while
             * the handler decodes and keeps a third copy). */
            grpc_byte_buffer_destroy(bb);
            bb = NULL;
        }
        if (call_user_active(c) && h->on_message != NULL) {
            sd__rpc_capture(c, msg, false);
            h->on_message(c, msg, h->ctx);
        }
        grpc_slice_unref(hold);
    }
    if (bb != NULL) {
        grpc_byte_buffer_destroy(bb);
    }
}

/*
 * Deliver the received slots in order while receiving is not paused, then post the next
 * receive if the pump did not. Loop thread.
 */
static void call_drain_recv(sd_rpc_call *c)
{
    while (!c->recv_paused) {
        sd_rpc_rslot *slot;
        grpc_byte_buffer *bb;
        bool ok;
        pthread_mutex_lock(&c->mu);
        slot = &c->rslots[c->r_deliver % SD_RPC_RECV_AHEAD];
        if (c->r_deliver == c->r_post || !slot->done) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        bb = slot->bb;
        ok = slot->ok;
        slot->bb = NULL;
        slot->done = false;
        c->r_deliver++;
        if (ok && bb != NULL) {
            c->r_held -= grpc_byte_buffer_length(bb);
        }
        pthread_mutex_unlock(&c->mu);
        call_deliver(c, bb, ok);
    }
    call_post_recv(c);
}

/* True if a received slot waits for delivery (it was held while paused). Loop thread. */
static bool call_has_held(sd_rpc_call *c)
{
    bool held;
    pthread_mutex_lock(&c->mu);
    held = c->r_deliver != c->r_post && c->rslots[c->r_deliver % SD_RPC_RECV_AHEAD].done;
    pthread_mutex_unlock(&c->mu);
    return held;
}

static void call_on_resume(sd_tag *tag, bool ok)
{
    sd_rpc_call *c = SD_CONTAINER_OF(tag, sd_rpc_call, t_resume);
    (void)ok;
    atomic_fetch_sub(&c->pending, 1);
    c->resume_queued = false;
    call_drain_recv(c);
    call_maybe_destroy(c);
}

static void call_on_recv(sd_tag *tag, bool ok)
{
    sd_rpc_rslot *slot = SD_CONTAINER_OF(tag, sd_rpc_rslot, tag);
    sd_rpc_call *c = slot->owner;

    atomic_fetch_sub(&c->pending, 1);
    slot->ok = ok;
    slot->done = true;
    call_drain_recv(c);
    call_maybe_destroy(c);
}

static void call_on_close(sd_tag *tag, bool ok)
{
    sd_rpc_call *c = SD_CONTAINER_OF(tag, sd_rpc_call, t_close);
    (void)ok; /* always 1 for RECV_CLOSE_ON_SERVER; `cancelled` carries the news */
    atomic_fetch_sub(&c->pending, 1);
    c->closed = true;
    call_maybe_destroy(c);
}

/* Copy path, peer and request metadata out of C core's buffers. False on out of memory. */
static bool call_capture(sd_rpc_call *c)
{
    char *peer;
    if (c->mi == SD_RPC_GENERIC) {
        c->path_owned = sd__rpc_slice_dup(c->details.method);
        if (c->path_owned == NULL) {
            return false;
        }
        c->path = c->path_owned;
    } else {
        c->path = c->srv->methods[c->mi].path;
    }
    peer = grpc_call_get_peer(c->call);
    c->peer = sd_strdup(peer != NULL ? peer : "");
    gpr_free(peer);
    if (c->peer == NULL) {
        return false;
    }
    if (c->req_md.count > 0) {
        c->md = sd_calloc(c->req_md.count, sizeof(*c->md));
        if (c->md == NULL) {
            return false;
        }
        for (size_t i = 0; i < c->req_md.count; i++) {
            c->md[i].key = sd__rpc_slice_dup(c->req_md.metadata[i].key);
            c->md[i].value = sd__rpc_slice_dup(c->req_md.metadata[i].value);
            c->n_md = i + 1;
            if (c->md[i].key == NULL || c->md[i].value == NULL) {
                return false;
            }
        }
    }
    return true;
}

static void call_on_new(sd_tag *tag, bool ok)
{
    sd_rpc_call *c = SD_CONTAINER_OF(tag, sd_rpc_call, t_new);
    sd_rpc_server *srv = c->srv;
    const sd_rpc_handler *h;
    grpc_op op;

    srv->n_requests--;
    if (c->mi == SD_RPC_GENERIC) {
        srv->generic_posted = false;
    } else {
        srv->methods[c->mi].posted = false;
    }
    if (!ok) {
        call_release_request(c);
        server_maybe_finish(srv);
        return;
    }
    if (!srv->shutting_down) {
        server_post(srv, c->mi);
    }
    srv->n_calls++;
    sd__rpc_hold(srv->rpc);

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->grpc_cancelled;
    c->t_close.fn = call_on_close;
    if (!sd__rpc_start_batch(c->call, &op, 1, &c->t_close, "server call")) {
        /* No end event will ever come: cancel and free now. */
        grpc_call_cancel(c->call, NULL);
        c->closed = true;
        c->failed = true;
        call_maybe_destroy(c);
        return;
    }
    atomic_fetch_add(&c->pending, 1);

    if (!call_capture(c)) {
        SD_ERROR(SD_RPC_MOD, "server call: out of memory accepting a call");
        call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "server out of memory");
        call_maybe_destroy(c);
        return;
    }
    if (c->mi == SD_RPC_GENERIC) {
        SD_DEBUG(SD_RPC_MOD, "unknown method %s from %s", c->path, c->peer);
        c->finish_requested = true;
        c->finish_code = SD_RPC_UNIMPLEMENTED;
        c->finish_msg = sd_asprintf("unknown method %s", c->path);
        call_kick_send(c);
        call_maybe_destroy(c);
        return;
    }

    h = call_handler(c);
    switch (call_kind(c)) {
    case SD_RPC_KIND_UNARY:
    case SD_RPC_KIND_SERVER_STREAM: {
        grpc_slice hold;
        sd_bytes req;
        if (c->payload == NULL) {
            /* The client half-closed (or went away) without a request message. */
            c->finish_requested = true;
            c->finish_code = SD_RPC_INTERNAL;
            c->finish_msg = sd_strdup("missing request message");
            call_kick_send(c);
            break;
        }
        if (!sd__rpc_bb_bytes(c->payload, &hold, &req)) {
            call_fail(c, GRPC_STATUS_INTERNAL, "unreadable request message");
            break;
        }
        c->user_opened = true;
        sd__rpc_capture(c, req, true);
        h->on_open(c, req, h->ctx);
        grpc_slice_unref(hold);
        grpc_byte_buffer_destroy(c->payload);
        c->payload = NULL;
        if (call_kind(c) == SD_RPC_KIND_SERVER_STREAM) {
            call_kick_send(c); /* headers now, if on_open queued nothing */
        }
        break;
    }
    case SD_RPC_KIND_CLIENT_STREAM:
    case SD_RPC_KIND_BIDI:
        c->user_opened = true;
        h->on_open(c, sd_bytes_make("", 0), h->ctx);
        call_kick_send(c);
        call_post_recv(c);
        break;
    }
    call_maybe_destroy(c);
}

/* ---------------------------------------------------------------- server */

static void server_on_rearm(struct ev_loop *loop, ev_timer *w, int revents)
{
    sd_rpc_server *srv = w->data;
    (void)loop;
    (void)revents;
    if (srv->shutting_down) {
        return;
    }
    for (size_t i = 0; i < srv->n_methods; i++) {
        if (!srv->methods[i].posted) {
            server_post(srv, (int)i);
        }
    }
    if (!srv->generic_posted) {
        server_post(srv, SD_RPC_GENERIC);
    }
}

/* Post one request notification for method mi; on failure retry from a timer. */
static void server_post(sd_rpc_server *srv, int mi)
{
    sd_rpc *rpc = srv->rpc;
    grpc_call_error e;
    sd_rpc_call *c = sd_calloc(1, sizeof(*c));

    if (c == NULL) {
        SD_ERROR(SD_RPC_MOD, "server: out of memory re-arming a request; retrying");
        if (!ev_is_active(&srv->rearm)) {
            ev_timer_set(&srv->rearm, 0.1, 0.);
            ev_timer_start(rpc->loop, &srv->rearm);
        }
        return;
    }
    c->srv = srv;
    c->mi = mi;
    pthread_mutex_init(&c->mu, NULL);
    c->t_new.fn = call_on_new;
    grpc_metadata_array_init(&c->req_md);
    grpc_call_details_init(&c->details);
    SD_TSAN_RELEASE(&c->t_new);
    if (mi == SD_RPC_GENERIC) {
        e = grpc_server_request_call(srv->gs, &c->call, &c->details, &c->req_md, rpc->cq, rpc->cq,
                                     &c->t_new);
    } else {
        sd_method *m = &srv->methods[mi];
        bool with_payload = m->kind == SD_RPC_KIND_UNARY || m->kind == SD_RPC_KIND_SERVER_STREAM;
        e = grpc_server_request_registered_call(srv->gs, m->handle, &c->call, &c->deadline,
                                                &c->req_md, with_payload ? &c->payload : NULL,
                                                rpc->cq, rpc->cq, &c->t_new);
    }
    if (e != GRPC_CALL_OK) {
        SD_ERROR(SD_RPC_MOD, "server: cannot request calls for %s: %s",
                 mi == SD_RPC_GENERIC ? "unknown methods" : srv->methods[mi].path,
                 grpc_call_error_to_string(e));
        call_release_request(c);
        if (!srv->shutting_down && !ev_is_active(&srv->rearm)) {
            ev_timer_set(&srv->rearm, 0.1, 0.);
            ev_timer_start(rpc->loop, &srv->rearm);
        }
        return;
    }
    srv->n_requests++;
    if (mi == SD_RPC_GENERIC) {
        srv->generic_posted = true;
    } else {
        srv->methods[mi].posted = true;
    }
}

static void server_destroy(sd_rpc_server *srv)
{
    for (size_t i = 0; i < srv->n_methods; i++) {
        sd_free(srv->methods[i].path);
    }
    sd_free(srv->methods);
    sd_free(srv);
}

/* The hub is being destroyed with this server still around: end it now. */
static void server_force(sd_rpc_closer *closer)
{
    sd_rpc_server *srv = SD_CONTAINER_OF(closer, sd_rpc_server, closer);
    if (!srv->shutting_down) {
        sd_rpc_server_shutdown(srv, 0, NULL, NULL);
    } else {
        ev_timer_stop(srv->rpc->loop, &srv->grace);
        grpc_server_cancel_all_calls(srv->gs);
    }
}

sd_status sd_rpc_server_create(sd_rpc *rpc, sd_rpc_server **out, sd_err *err)
{
    sd_rpc_server *srv;
    grpc_arg args[6];
    grpc_channel_args chargs;

    *out = NULL;
    srv = sd_calloc(1, sizeof(*srv));
    if (srv == NULL) {
        return sd_err_set(err, SD_ENOMEM, "rpc server: out of memory");
    }
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = -1;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_ALLOW_REUSEPORT;
    args[2].value.integer = 0;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS;
    args[3].value.integer = 5000;
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = GRPC_ARG_HTTP2_MAX_PING_STRIKES;
    args[4].value.integer = 0;
    args[5].type = GRPC_ARG_INTEGER;
    args[5].key = GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
    args[5].value.integer = 1;
    chargs.num_args = sizeof(args) / sizeof(args[0]);
    chargs.args = args;
    srv->gs = grpc_server_create(&chargs, NULL);
    if (srv->gs == NULL) {
        sd_free(srv);
        return sd_err_set(err, SD_EINTERNAL, "rpc server: grpc_server_create failed");
    }
    grpc_server_register_completion_queue(srv->gs, rpc->cq, NULL);
    srv->rpc = rpc;
    srv->listener.fd = -1;
    ev_init(&srv->grace, NULL);
    ev_init(&srv->rearm, server_on_rearm);
    srv->rearm.data = srv;
    srv->closer.force = server_force;
    sd__rpc_closer_add(rpc, &srv->closer);
    sd__rpc_hold(rpc);
    *out = srv;
    return SD_OK;
}

sd_status sd_rpc_server_add_method(sd_rpc_server *srv,
                                   const char *path,
                                   sd_rpc_kind kind,
                                   const sd_rpc_handler *h)
{
    sd_method *methods;
    sd_method *m;
    grpc_server_register_method_payload_handling payload;

    if (srv == NULL || path == NULL || path[0] != '/' || h == NULL || h->on_open == NULL) {
        return SD_EINVAL;
    }
    if (kind != SD_RPC_KIND_UNARY && kind != SD_RPC_KIND_SERVER_STREAM &&
        kind != SD_RPC_KIND_CLIENT_STREAM && kind != SD_RPC_KIND_BIDI) {
        return SD_EINVAL;
    }
    if (srv->started || srv->shutting_down) {
        return SD_ESTATE;
    }
    for (size_t i = 0; i < srv->n_methods; i++) {
        if (strcmp(srv->methods[i].path, path) == 0) {
            return SD_EEXIST;
        }
    }
    methods = sd_realloc(srv->methods, (srv->n_methods + 1) * sizeof(*methods));
    if (methods == NULL) {
        return SD_ENOMEM;
    }
    srv->methods = methods;
    m = &methods[srv->n_methods];
    memset(m, 0, sizeof(*m));
    m->path = sd_strdup(path);
    if (m->path == NULL) {
        return SD_ENOMEM;
    }
    payload = kind == SD_RPC_KIND_UNARY || kind == SD_RPC_KIND_SERVER_STREAM
                  ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
                  : GRPC_SRM_PAYLOAD_NONE;
    m->handle = grpc_server_register_method(srv->gs, m->path, NULL, payload, 0);
    if (m->handle == NULL) {
        sd_free(m->path);
        return SD_EINTERNAL;
    }
    m->kind = kind;
    m->h = *h;
    srv->n_methods++;
    return SD_OK;
}

sd_status sd_rpc_server_listen(sd_rpc_server *srv, const char *addr, int *port, sd_err *err)
{
    grpc_server_credentials *creds;
    int p;

    if (srv == NULL || addr == NULL) {
        return sd_err_set(err, SD_EINVAL, "rpc server: listen needs a server and an address");
    }
    if (srv->started || srv->shutting_down) {
        return sd_err_set(err, SD_ESTATE, "rpc server: listen on \"%s\" after start", addr);
    }
    creds = grpc_insecure_server_credentials_create();
    p = grpc_server_add_http2_port(srv->gs, addr, creds);
    grpc_server_credentials_release(creds);
    if (p == 0) {
        return sd_err_set(err, SD_EIO,
                          "rpc server: cannot listen on \"%s\" (address in use or invalid)", addr);
    }
    if (port != NULL) {
        *port = p;
    }
    return SD_OK;
}

sd_status sd_rpc_server_adopt(sd_rpc_server *srv, int fd, sd_err *err)
{
    if (srv == NULL || fd < 0) {
        if (fd >= 0) {
            (void)close(fd);
        }
        return sd_err_set(err, SD_EINVAL, "rpc server: adopt needs a server and a socket");
    }
    if (srv->started || srv->shutting_down || srv->listener.fd >= 0) {
        (void)close(fd);
        return sd_err_set(err, SD_ESTATE, "rpc server: adopt after start or a second time");
    }
    srv->listener.fd = fd;
    return SD_OK;
}

sd_status sd_rpc_server_start(sd_rpc_server *srv, sd_err *err)
{
    if (srv == NULL) {
        return sd_err_set(err, SD_EINVAL, "rpc server: NULL");
    }
    if (srv->started || srv->shutting_down) {
        return sd_err_set(err, SD_ESTATE, "rpc server: already started or shutting down");
    }
    grpc_server_start(srv->gs);
    srv->started = true;
    sd__rpc_listener_start(&srv->listener, srv->rpc->loop, srv->gs);
    for (size_t i = 0; i < srv->n_methods; i++) {
        server_post(srv, (int)i);
    }
    server_post(srv, SD_RPC_GENERIC);
    return SD_OK;
}

static void server_maybe_finish(sd_rpc_server *srv)
{
    sd_rpc *rpc = srv->rpc;
    void (*done)(void *ctx) = srv->done;
    void *done_ctx = srv->done_ctx;

    if (!srv->shutting_down || !srv->notified || srv->n_calls > 0 || srv->n_requests > 0) {
        return;
    }
    ev_timer_stop(rpc->loop, &srv->grace);
    ev_timer_stop(rpc->loop, &srv->rearm);
    sd__rpc_closer_remove(rpc, &srv->closer);
    grpc_server_destroy(srv->gs);
    server_destroy(srv);
    sd__rpc_release(rpc);
    if (done != NULL) {
        done(done_ctx);
    }
}

static void server_on_notified(sd_tag *tag, bool ok)
{
    sd_rpc_server *srv = SD_CONTAINER_OF(tag, sd_rpc_server, t_shutdown);
    (void)ok;
    srv->notified = true;
    server_maybe_finish(srv);
}

static void server_on_grace(struct ev_loop *loop, ev_timer *w, int revents)
{
    sd_rpc_server *srv = w->data;
    (void)loop;
    (void)revents;
    if (srv->n_calls > 0) {
        SD_INFO(SD_RPC_MOD, "server shutdown: grace period over, cancelling %ld calls",
                srv->n_calls);
    }
    grpc_server_cancel_all_calls(srv->gs);
}

void sd_rpc_server_shutdown(sd_rpc_server *srv, int grace_ms, void (*done)(void *ctx), void *ctx)
{
    sd_rpc *rpc;
    if (srv == NULL || srv->shutting_down) {
        return;
    }
    rpc = srv->rpc;
    srv->shutting_down = true;
    srv->done = done;
    srv->done_ctx = ctx;
    sd__rpc_listener_close(&srv->listener, rpc->loop);
    ev_timer_stop(rpc->loop, &srv->rearm);
    srv->t_shutdown.fn = server_on_notified;
    SD_TSAN_RELEASE(&srv->t_shutdown);
    grpc_server_shutdown_and_notify(srv->gs, rpc->cq, &srv->t_shutdown);
    if (grace_ms <= 0) {
        grpc_server_cancel_all_calls(srv->gs);
    } else {
        ev_timer_init(&srv->grace, server_on_grace, grace_ms / 1000.0, 0.);
        srv->grace.data = srv;
        ev_timer_start(rpc->loop, &srv->grace);
    }
}

/* ---------------------------------------------------------------- call API */

/* Queue msg on call; kick: start sending now (else the caller's next kick does). */
static sd_status call_queue(sd_rpc_call *call, sd_bytes msg, bool kick)
{
    grpc_byte_buffer *bb;
    sd_rpc_kind kind;

    if (call == NULL || (msg.ptr == NULL && msg.len > 0)) {
        return SD_EINVAL;
    }
    if (call->finish_requested || call->cancel_requested || call->failed || call->closed ||
        call->user_closed) {
        return SD_ESTATE;
    }
    kind = call_kind(call);
    if ((kind == SD_RPC_KIND_UNARY || kind == SD_RPC_KIND_CLIENT_STREAM) &&
        call->n_queued_total > 0) {
        return SD_ESTATE;
    }
    bb = sd__rpc_bb_from(msg.len > 0 ? msg : sd_bytes_make("", 0));
    pthread_mutex_lock(&call->mu);
    if (sd__rpc_outq_push(&call->outq, bb) != SD_OK) {
        pthread_mutex_unlock(&call->mu);
        grpc_byte_buffer_destroy(bb);
        return SD_ENOMEM;
    }
    call->n_queued_total++;
    if (kick && kind != SD_RPC_KIND_UNARY && kind != SD_RPC_KIND_CLIENT_STREAM) {
        call_kick_send_locked(call);
    }
    pthread_mutex_unlock(&call->mu);
    return SD_OK;
}

sd_status sd_rpc_call_send(sd_rpc_call *call, sd_bytes msg)
{
    return call_queue(call, msg, true);
}

void sd_rpc_call_finish(sd_rpc_call *call, sd_rpc_code code, const char *message)
{
    if (call == NULL || call->finish_requested || call->cancel_requested || call->failed ||
        call->closed || call->user_closed) {
        return;
    }
    char *msg = message != NULL ? sd_strdup(message) : NULL; /* NULL: no details */
    pthread_mutex_lock(&call->mu); /* the pump reads these when it chains the status */
    call->finish_requested = true;
    call->finish_code = code;
    call->finish_msg = msg;
    call_sync_pump_locked(call);
    call_kick_send_locked(call);
    pthread_mutex_unlock(&call->mu);
}

/* The response and the status go in one batch: a unary client hears nothing until both
 * have arrived, so a status sent after the message's completion would cost a round. */
void sd_rpc_call_reply(sd_rpc_call *call, sd_bytes response)
{
    sd_status st = call_queue(call, response, false);
    if (st == SD_ENOMEM) {
        sd_rpc_call_finish(call, SD_RPC_RESOURCE_EXHAUSTED, "server out of memory sending a reply");
    } else {
        sd_rpc_call_finish(call, SD_RPC_OK, NULL);
    }
}

void sd_rpc_call_cancel(sd_rpc_call *call)
{
    if (call == NULL || call->cancel_requested || call->closed || call->user_closed) {
        return;
    }
    call->cancel_requested = true;
    call->failed = true;
    call_sync_pump(call);
    grpc_call_cancel_with_status(call->call, GRPC_STATUS_CANCELLED, "cancelled by the server",
                                 NULL);
}

const char *sd_rpc_call_metadata(const sd_rpc_call *call, const char *key)
{
    if (call == NULL || key == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < call->n_md; i++) {
        if (strcmp(call->md[i].key, key) == 0) {
            return call->md[i].value;
        }
    }
    return NULL;
}

const char *sd_rpc_call_method(const sd_rpc_call *call)
{
    return call->path;
}

const char *sd_rpc_call_peer(const sd_rpc_call *call)
{
    return call->peer;
}

bool sd_rpc_call_is_closed(const sd_rpc_call *call)
{
    return call->finish_requested || call->cancel_requested || call->failed || call->closed ||
           call->user_closed;
}

void sd_rpc_call_set_data(sd_rpc_call *call, void *data)
{
    call->data = data;
}

void *sd_rpc_call_data(const sd_rpc_call *call)
{
    return call->data;
}

void sd_rpc_call_pause_recv(sd_rpc_call *call)
{
    call->recv_paused = true;
    call_sync_pump(call);
}

void sd_rpc_call_resume_recv(sd_rpc_call *call)
{
    if (!call->recv_paused) {
        return;
    }
    call->recv_paused = false;
    call_sync_pump(call);
    if (call_kind(call) != SD_RPC_KIND_BIDI && call_kind(call) != SD_RPC_KIND_CLIENT_STREAM) {
        return;
    }
    if (call_has_held(call)) {
        /* Messages received before the pause come first, delivered from the loop (never
         * from inside this call, which may run in one of the call's own callbacks). The
         * pending count keeps the call alive until t_resume has run. */
        if (!call->resume_queued) {
            call->resume_queued = true;
            atomic_fetch_add(&call->pending, 1);
            call->t_resume.fn = call_on_resume;
            sd__rpc_post_tag(call->srv->rpc, &call->t_resume, true);
        }
        return;
    }
    call_post_recv(call);
}

size_t sd_rpc_call_send_queue_len(const sd_rpc_call *call)
{
    /* The pump pops the queue: read it under the mutex (mutable in spirit). */
    sd_rpc_call *m = (sd_rpc_call *)call;
    size_t n;
    pthread_mutex_lock(&m->mu);
    n = m->outq.len + (m->send_bb != NULL ? 1 : 0);
    pthread_mutex_unlock(&m->mu);
    return n;
}
