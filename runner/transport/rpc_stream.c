/*
 * Sundial: the stream core — the one state machine of a gRPC call's message flow, shared by
 * client streams (rpc_client.c) and server calls (rpc_server.c).
 *
 * A call has one send batch and one receive in C core at a time (C core allows one batch of
 * each kind per call), each with its own tag:
 *
 *   t_send    [SEND_INITIAL_METADATA] [SEND_MESSAGE] [end], one batch at a time; the end is the
 *             client's SEND_CLOSE_FROM_CLIENT or the server's SEND_STATUS_FROM_SERVER
 *   rslots[]  RECV_MESSAGE into a ring of SD_RPC_RECV_AHEAD slots, re-posted until the end
 *
 * The side owns the rest of the call (its end event, cancellation, user callbacks, freeing)
 * and tells the core what differs through sd_rpc_sc_ops.
 *
 * Sends: the side queues copies (sd__rpc_sc_send) and the loop starts a batch when none is in
 * flight (sd__rpc_sc_kick). The first batch always carries the initial metadata (C core would
 * hold a message sent before the headers). The end rides with the last queued message or goes
 * alone once the queue is empty, so it never overtakes a message.
 *
 * The pump thread keeps a busy call moving without a round trip through the loop (which costs
 * two thread wake-ups per step): when a send that carried a message completes, it starts the
 * next queued message itself, or the end when that was the last and the end is wanted
 * (sc_pump_send), and the loop hears of the sends only when the queue runs dry; when a
 * message arrives, it posts the next receive into the next free slot (sc_pump_recv) before
 * handing the message over. The loop takes the slots in order (sd__rpc_sc_take) and posts the
 * next receive itself when the pump could not (the ring full, SD_RPC_RECV_AHEAD_BYTES held,
 * or the side's pump_stop_recv). Order is unchanged: one send and one receive in flight,
 * messages taken in arrival order.
 *
 * Threads: what both threads touch is guarded by mu; the loop keeps its own flags (`sending`,
 * `md_sent`) and the side's. The pump never frees anything but the buffer it just sent and
 * never touches the call after the hand-over. No progress waits for a signal that can be
 * missed: every decision the pump leaves to the loop is taken under mu, and a completion the
 * pump does not consume is always handed over (sd_tag.on_pump returns false), so the loop
 * sees the state the pump left: a send it did not chain arrives as t_send and kicks; a
 * receive it did not post is posted by the loop after the take (the side's `received`). A
 * kick that finds a send in flight needs no wake: that send's completion runs the same test
 * under mu (sc_pump_send or sc_on_send).
 *
 * `pending` counts batches in C core and tags in the hand-over queue (the side adds its own);
 * the side frees the call only once it is zero, so the pump cannot touch a freed call.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/transport/rpc_int.h"

/* ---------------------------------------------------------------- send queue */

static sd_status outq_push(sd_rpc_outq *q, grpc_byte_buffer *bb)
{
    if (q->len == q->cap) {
        size_t ncap = q->cap == 0 ? 8 : q->cap * 2;
        grpc_byte_buffer **items;
        if (ncap > SIZE_MAX / sizeof(*items)) {
            return SD_ENOMEM;
        }
        items = sd_malloc(ncap * sizeof(*items));
        if (items == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < q->len; i++) {
            items[i] = q->items[(q->head + i) % q->cap];
        }
        sd_free(q->items);
        q->items = items;
        q->cap = ncap;
        q->head = 0;
    }
    q->items[(q->head + q->len) % q->cap] = bb;
    q->len++;
    return SD_OK;
}

static grpc_byte_buffer *outq_pop(sd_rpc_outq *q)
{
    grpc_byte_buffer *bb;
    if (q->len == 0) {
        return NULL;
    }
    bb = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return bb;
}

static void outq_deinit(sd_rpc_outq *q)
{
    grpc_byte_buffer *bb;
    while ((bb = outq_pop(q)) != NULL) {
        grpc_byte_buffer_destroy(bb);
    }
    sd_free(q->items);
    memset(q, 0, sizeof(*q));
}

/* ---------------------------------------------------------------- life */

static void sc_on_send(sd_tag *tag, bool ok);
static bool sc_pump_send(sd_tag *tag, bool *ok);
static void sc_on_recv(sd_tag *tag, bool ok);
static bool sc_pump_recv(sd_tag *tag, bool *ok);

void sd__rpc_sc_init(sd_rpc_sc *sc, grpc_call *call, const sd_rpc_sc_ops *ops)
{
    sc->call = call;
    sc->ops = ops;
    sc->end_details = grpc_empty_slice();
    sc->t_send.fn = sc_on_send;
    sc->t_send.on_pump = sc_pump_send;
    for (size_t i = 0; i < SD_RPC_RECV_AHEAD; i++) {
        sc->rslots[i].owner = sc;
        sc->rslots[i].tag.fn = sc_on_recv;
        sc->rslots[i].tag.on_pump = sc_pump_recv;
    }
    atomic_init(&sc->pending, 0);
    pthread_mutex_init(&sc->mu, NULL);
}

void sd__rpc_sc_deinit(sd_rpc_sc *sc)
{
    outq_deinit(&sc->outq);
    for (size_t i = 0; i < SD_RPC_RECV_AHEAD; i++) {
        if (sc->rslots[i].bb != NULL) {
            grpc_byte_buffer_destroy(sc->rslots[i].bb);
            sc->rslots[i].bb = NULL;
        }
    }
    if (sc->send_bb != NULL) {
        grpc_byte_buffer_destroy(sc->send_bb);
        sc->send_bb = NULL;
    }
    sd_free(sc->end_msg);
    sc->end_msg = NULL;
    pthread_mutex_destroy(&sc->mu);
}

/* ---------------------------------------------------------------- sends */

/* The end op (c->end_details holds a status's details until its batch completes). mu held. */
static void end_op(sd_rpc_sc *sc, grpc_op *op)
{
    if (!sc->end_is_status) {
        op->op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        return;
    }
    sc->end_details =
        sc->end_msg != NULL ? grpc_slice_from_copied_string(sc->end_msg) : grpc_empty_slice();
    op->op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op->data.send_status_from_server.status = (grpc_status_code)sc->end_code;
    op->data.send_status_from_server.status_details = &sc->end_details;
}

/* The end is in a started batch: nothing more is sent, by the loop or the pump. mu held. */
static void end_started(sd_rpc_sc *sc)
{
    sc->end_inflight = true;
    sc->end_posted = true;
    sc->pump_stop_send = true;
}

void sd__rpc_sc_kick_locked(sd_rpc_sc *sc)
{
    grpc_op ops[3];
    size_t n = 0;
    bool with_end = false;

    if (sc->sending || sc->end_posted || !sc->ops->may_send(sc)) {
        return;
    }
    memset(ops, 0, sizeof(ops));
    if (!sc->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].data.send_initial_metadata.count = sc->n_md;
        ops[n].data.send_initial_metadata.metadata = sc->md;
        n++;
    }
    if (sc->outq.len > 0) {
        sc->send_bb = outq_pop(&sc->outq);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = sc->send_bb;
        n++;
    }
    if (sc->end_wanted && sc->outq.len == 0) {
        end_op(sc, &ops[n++]);
        with_end = true;
    }
    if (n == 0) {
        return;
    }
    if (!sd__rpc_start_batch(sc->call, ops, n, &sc->t_send, sc->what)) {
        if (sc->send_bb != NULL) {
            grpc_byte_buffer_destroy(sc->send_bb);
            sc->send_bb = NULL;
        }
        if (with_end) {
            grpc_slice_unref(sc->end_details);
            sc->end_details = grpc_empty_slice();
        }
        sc->pump_stop_send = true;
        grpc_call_cancel_with_status(sc->call, GRPC_STATUS_INTERNAL, sc->send_failure, NULL);
        sc->ops->send_refused(sc);
        return;
    }
    atomic_fetch_add(&sc->pending, 1);
    sc->sending = true;
    sc->md_sent = true;
    if (with_end) {
        end_started(sc);
    }
}

void sd__rpc_sc_kick(sd_rpc_sc *sc)
{
    pthread_mutex_lock(&sc->mu);
    sd__rpc_sc_kick_locked(sc);
    pthread_mutex_unlock(&sc->mu);
}

sd_status sd__rpc_sc_send(sd_rpc_sc *sc, sd_bytes msg, bool kick)
{
    grpc_byte_buffer *bb = sd__rpc_bb_from(msg.len > 0 ? msg : sd_bytes_make("", 0));
    pthread_mutex_lock(&sc->mu);
    if (outq_push(&sc->outq, bb) != SD_OK) {
        pthread_mutex_unlock(&sc->mu);
        grpc_byte_buffer_destroy(bb);
        return SD_ENOMEM;
    }
    if (kick) {
        sd__rpc_sc_kick_locked(sc);
    }
    pthread_mutex_unlock(&sc->mu);
    return SD_OK;
}

void sd__rpc_sc_end_locked(sd_rpc_sc *sc, sd_rpc_code code, char *msg)
{
    sc->end_wanted = true;
    sc->end_code = code;
    sd_free(sc->end_msg);
    sc->end_msg = msg;
}

void sd__rpc_sc_end(sd_rpc_sc *sc, sd_rpc_code code, char *msg)
{
    pthread_mutex_lock(&sc->mu); /* the pump reads these when it chains the end */
    sd__rpc_sc_end_locked(sc, code, msg);
    sd__rpc_sc_kick_locked(sc);
    pthread_mutex_unlock(&sc->mu);
}

size_t sd__rpc_sc_queue_len(sd_rpc_sc *sc)
{
    size_t n;
    pthread_mutex_lock(&sc->mu);
    n = sc->outq.len + (sc->send_bb != NULL ? 1 : 0);
    pthread_mutex_unlock(&sc->mu);
    return n;
}

/*
 * Pump thread, mu held: the message *bb went out; send what follows with the same tag, the
 * next queued message or else the end. False when gRPC refused it: the call is then cancelled
 * and the completion handed over as a failed send.
 */
static bool chain_next_locked(sd_rpc_sc *sc)
{
    grpc_op op;
    bool with_end = sc->outq.len == 0;

    grpc_byte_buffer_destroy(sc->send_bb);
    sc->send_bb = NULL;
    memset(&op, 0, sizeof(op));
    if (with_end) {
        end_op(sc, &op);
    } else {
        sc->send_bb = outq_pop(&sc->outq);
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = sc->send_bb;
    }
    if (!sd__rpc_start_batch(sc->call, &op, 1, &sc->t_send, sc->what)) {
        if (with_end) {
            grpc_slice_unref(sc->end_details);
            sc->end_details = grpc_empty_slice();
        }
        grpc_call_cancel_with_status(sc->call, GRPC_STATUS_INTERNAL, sc->send_failure, NULL);
        return false;
    }
    if (with_end) {
        end_started(sc);
    }
    return true;
}

/*
 * Pump thread: a send completed. If it carried a message and went out, and more is queued or
 * the end is wanted, start that now with the same tag (the loop is not told); otherwise hand
 * the completion over. The batch that carried the end is always handed over.
 */
static bool sc_pump_send(sd_tag *tag, bool *ok)
{
    sd_rpc_sc *sc = SD_CONTAINER_OF(tag, sd_rpc_sc, t_send);
    bool chained = false;

    pthread_mutex_lock(&sc->mu);
    if (*ok && !sc->pump_stop_send && sc->send_bb != NULL && (sc->outq.len > 0 || sc->end_wanted)) {
        chained = chain_next_locked(sc);
        if (!chained) { /* handed over as a failed send, as when the loop cannot send */
            sc->pump_stop_send = true;
            *ok = false;
        }
    }
    pthread_mutex_unlock(&sc->mu);
    return chained;
}

static void sc_on_send(sd_tag *tag, bool ok)
{
    sd_rpc_sc *sc = SD_CONTAINER_OF(tag, sd_rpc_sc, t_send);
    atomic_fetch_sub(&sc->pending, 1);
    pthread_mutex_lock(&sc->mu);
    sc->sending = false;
    if (sc->send_bb != NULL) {
        grpc_byte_buffer_destroy(sc->send_bb);
        sc->send_bb = NULL;
    }
    if (sc->end_inflight) {
        grpc_slice_unref(sc->end_details);
        sc->end_details = grpc_empty_slice();
        sc->end_inflight = false;
        sc->end_ok = ok;
    }
    pthread_mutex_unlock(&sc->mu);
    sc->ops->sent(sc, ok);
}

/* ---------------------------------------------------------------- receives */

bool sd__rpc_sc_post_recv_locked(sd_rpc_sc *sc)
{
    sd_rpc_rslot *slot;
    grpc_op op;

    if (sc->r_posted || sc->r_post - sc->r_deliver >= SD_RPC_RECV_AHEAD ||
        sc->r_held >= SD_RPC_RECV_AHEAD_BYTES) {
        return true;
    }
    slot = &sc->rslots[sc->r_post % SD_RPC_RECV_AHEAD];
    slot->bb = NULL;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &slot->bb;
    if (!sd__rpc_start_batch(sc->call, &op, 1, &slot->tag, sc->what)) {
        return false;
    }
    atomic_fetch_add(&sc->pending, 1);
    sc->r_post++;
    sc->r_posted = true;
    return true;
}

bool sd__rpc_sc_post_recv(sd_rpc_sc *sc)
{
    bool ok;
    pthread_mutex_lock(&sc->mu);
    ok = sd__rpc_sc_post_recv_locked(sc);
    pthread_mutex_unlock(&sc->mu);
    return ok;
}

/* Pump thread: a receive completed; post the next one at once if it carried a message. */
static bool sc_pump_recv(sd_tag *tag, bool *ok)
{
    sd_rpc_rslot *slot = SD_CONTAINER_OF(tag, sd_rpc_rslot, tag);
    sd_rpc_sc *sc = slot->owner;

    pthread_mutex_lock(&sc->mu);
    sc->r_posted = false;
    if (*ok && slot->bb != NULL) {
        sc->r_held += grpc_byte_buffer_length(slot->bb);
        if (!sc->pump_stop_recv && !sd__rpc_sc_post_recv_locked(sc)) {
            /* The loop finds no receive posted and tries (and reports) it itself. */
            sc->pump_stop_recv = true;
        }
    }
    pthread_mutex_unlock(&sc->mu);
    return false;
}

static void sc_on_recv(sd_tag *tag, bool ok)
{
    sd_rpc_rslot *slot = SD_CONTAINER_OF(tag, sd_rpc_rslot, tag);
    sd_rpc_sc *sc = slot->owner;

    atomic_fetch_sub(&sc->pending, 1);
    slot->ok = ok;
    slot->done = true;
    sc->ops->received(sc);
}

bool sd__rpc_sc_take(sd_rpc_sc *sc, grpc_byte_buffer **bb, bool *ok)
{
    sd_rpc_rslot *slot;

    pthread_mutex_lock(&sc->mu);
    slot = &sc->rslots[sc->r_deliver % SD_RPC_RECV_AHEAD];
    if (sc->r_deliver == sc->r_post || !slot->done) {
        pthread_mutex_unlock(&sc->mu);
        return false;
    }
    *bb = slot->bb;
    *ok = slot->ok;
    slot->bb = NULL;
    slot->done = false;
    sc->r_deliver++;
    if (*ok && *bb != NULL) {
        sc->r_held -= grpc_byte_buffer_length(*bb);
    }
    pthread_mutex_unlock(&sc->mu);
    return true;
}

bool sd__rpc_sc_has_held(sd_rpc_sc *sc)
{
    bool held;
    pthread_mutex_lock(&sc->mu);
    held = sc->r_deliver != sc->r_post && sc->rslots[sc->r_deliver % SD_RPC_RECV_AHEAD].done;
    pthread_mutex_unlock(&sc->mu);
    return held;
}
