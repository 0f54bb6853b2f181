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
 *   t_resume the delivery of messages held while receiving was paused (a loop task)
 *
 * and its messages run through the stream core (rpc_stream.c), as a client stream's do: the
 * send queue ending in SEND_STATUS_FROM_SERVER, the receive ring (RECV_MESSAGE while
 * receiving: CLIENT_STREAM, BIDI) and the pump thread's chaining of both. The pump reads two
 * flags the loop keeps under the call's mutex (pump_stop_send, pump_stop_recv, from
 * call_sync_pump); a batch it starts in the instant before they change simply fails, as any
 * batch on a dead call does. Messages received ahead are delivered in order and never while
 * receiving is paused (the loop holds them until sd_rpc_call_resume_recv), so a paused handler
 * sees no on_message.
 *
 * `pending` (the core's) counts batches that start_batch accepted. The context is freed only
 * when pending == 0 and the end event has been seen; that is also when on_close runs, so
 * on_close is truly the last callback and every message callback comes before it.
 *
 * Sends: streaming calls send their headers at once; unary calls send headers, the response
 * and the status in one batch. The status rides with the last queued message, so a finish
 * never overtakes a queued message.
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
    sd_tag t_new;
    sd_tag t_close;
    sd_tag t_resume; /* delivers messages held while paused, from the loop (not a batch) */
    int grpc_cancelled;
    sd_rpc_sc sc; /* the message flow (rpc_stream.c), ending in the status; counts pending */

    const char *path;
    char *path_owned;
    char *peer;
    sd_md_pair *md;
    size_t n_md;
    void *data;
    size_t n_queued_total;

    bool user_opened; /* on_open ran: on_close is owed */
    bool user_closed; /* on_close ran or is running */
    bool cancel_requested;
    bool failed; /* an op failed: the call is dead, start nothing new */
    bool closed; /* RECV_CLOSE_ON_SERVER completed */
    bool half_closed;
    bool recv_paused;
    bool resume_queued; /* t_resume is in the hand-over queue */
};

#define CALL_OF(scp) SD_CONTAINER_OF(scp, sd_rpc_call, sc)

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
    return c->user_opened && !c->user_closed && !c->failed && !c->closed && !c->sc.end_wanted &&
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
    c->sc.pump_stop_send = c->failed || c->closed || c->cancel_requested || c->sc.end_posted;
    c->sc.pump_stop_recv = c->sc.pump_stop_send || c->sc.end_wanted || c->recv_paused ||
                           c->half_closed || c->user_closed;
}

static void call_sync_pump(sd_rpc_call *c)
{
    pthread_mutex_lock(&c->sc.mu);
    call_sync_pump_locked(c);
    pthread_mutex_unlock(&c->sc.mu);
}

/* Free a call context: its request buffers, the grpc_call, the stream core and itself. */
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
    sd__rpc_sc_deinit(&c->sc);
    sd_free(c);
}

static void call_destroy(sd_rpc_call *c)
{
    sd_rpc_server *srv = c->srv;
    sd_rpc *rpc = srv->rpc;

    /* Nothing is in C core or in the hand-over queue now: the pump cannot touch c. */
    for (size_t i = 0; i < c->n_md; i++) {
        sd_free(c->md[i].key);
        sd_free(c->md[i].value);
    }
    sd_free(c->md);
    sd_free(c->path_owned);
    sd_free(c->peer);
    call_release_request(c); /* metadata arrays, details, grpc_call_unref, the context */
    srv->n_calls--;
    sd__rpc_release(rpc);
    server_maybe_finish(srv);
}

static void call_maybe_destroy(sd_rpc_call *c)
{
    const sd_rpc_handler *h;
    call_sync_pump(c);
    if (atomic_load(&c->sc.pending) > 0 || !c->closed) {
        return;
    }
    h = call_handler(c);
    if (c->user_opened && !c->user_closed) {
        bool cancelled = !c->sc.end_ok || (c->grpc_cancelled && c->sc.end_code == SD_RPC_OK);
        c->user_closed = true;
        if (h->on_close != NULL) {
            h->on_close(c, cancelled, h->ctx);
        }
    }
    call_destroy(c);
}

/* Ask for the status (msg is the call's from here on, NULL: no details) and send it after
 * what is queued. Loop thread. */
static void call_end(sd_rpc_call *c, sd_rpc_code code, char *msg)
{
    pthread_mutex_lock(&c->sc.mu); /* the pump reads these when it chains the status */
    sd__rpc_sc_end_locked(&c->sc, code, msg);
    call_sync_pump_locked(c);
    sd__rpc_sc_kick_locked(&c->sc);
    pthread_mutex_unlock(&c->sc.mu);
}

/* ---------------------------------------------------------------- the stream core's hooks */

static bool call_may_send(sd_rpc_sc *sc)
{
    sd_rpc_call *c = CALL_OF(sc);
    return !c->failed && !c->closed;
}

static void call_send_refused(sd_rpc_sc *sc)
{
    sd_rpc_call *c = CALL_OF(sc);
    c->failed = true; /* the core cancelled the call */
    call_sync_pump_locked(c);
}

static void call_sent(sd_rpc_sc *sc, bool ok)
{
    sd_rpc_call *c = CALL_OF(sc);
    if (!ok) {
        c->failed = true;
    } else {
        sd__rpc_sc_kick(sc);
    }
    call_maybe_destroy(c);
}

/* Post the next receive unless the pump did or receiving has stopped. Loop thread. */
static void call_post_recv(sd_rpc_call *c)
{
    if (c->recv_paused || c->half_closed || c->failed || c->closed || c->sc.end_wanted ||
        c->cancel_requested) {
        return;
    }
    pthread_mutex_lock(&c->sc.mu);
    if (!sd__rpc_sc_post_recv_locked(&c->sc)) {
        call_fail(c, GRPC_STATUS_INTERNAL, "server could not receive");
        call_sync_pump_locked(c);
    }
    pthread_mutex_unlock(&c->sc.mu);
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
 * Deliver the received slots in order while receiving is not paused (messages received ahead
 * wait in their slots until resume), then post the next receive if the pump did not.
 */
static void call_drain_recv(sd_rpc_call *c)
{
    grpc_byte_buffer *bb;
    bool ok;
    while (!c->recv_paused && sd__rpc_sc_take(&c->sc, &bb, &ok)) {
        call_deliver(c, bb, ok);
    }
    call_post_recv(c);
}

static void call_received(sd_rpc_sc *sc)
{
    sd_rpc_call *c = CALL_OF(sc);
    call_drain_recv(c);
    call_maybe_destroy(c);
}

static const sd_rpc_sc_ops call_ops = {
    .may_send = call_may_send,
    .send_refused = call_send_refused,
    .sent = call_sent,
    .received = call_received,
};

static void call_on_resume(sd_tag *tag, bool ok)
{
    sd_rpc_call *c = SD_CONTAINER_OF(tag, sd_rpc_call, t_resume);
    (void)ok;
    atomic_fetch_sub(&c->sc.pending, 1);
    c->resume_queued = false;
    call_drain_recv(c);
    call_maybe_destroy(c);
}

static void call_on_close(sd_tag *tag, bool ok)
{
    sd_rpc_call *c = SD_CONTAINER_OF(tag, sd_rpc_call, t_close);
    (void)ok; /* always 1 for RECV_CLOSE_ON_SERVER; `cancelled` carries the news */
    atomic_fetch_sub(&c->sc.pending, 1);
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
    c->sc.call = c->call;

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
    atomic_fetch_add(&c->sc.pending, 1);

    if (!call_capture(c)) {
        SD_ERROR(SD_RPC_MOD, "server call: out of memory accepting a call");
        call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "server out of memory");
        call_maybe_destroy(c);
        return;
    }
    c->sc.what = c->path;
    if (c->mi == SD_RPC_GENERIC) {
        SD_DEBUG(SD_RPC_MOD, "unknown method %s from %s", c->path, c->peer);
        call_end(c, SD_RPC_UNIMPLEMENTED, sd_asprintf("unknown method %s", c->path));
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
            call_end(c, SD_RPC_INTERNAL, sd_strdup("missing request message"));
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
            sd__rpc_sc_kick(&c->sc); /* headers now, if on_open queued nothing */
        }
        break;
    }
    case SD_RPC_KIND_CLIENT_STREAM:
    case SD_RPC_KIND_BIDI:
        c->user_opened = true;
        h->on_open(c, sd_bytes_make("", 0), h->ctx);
        sd__rpc_sc_kick(&c->sc);
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
    sd__rpc_sc_init(&c->sc, NULL, &call_ops);
    c->sc.what = "server call";
    c->sc.send_failure = "server could not send";
    c->sc.end_is_status = true;
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
    sd_rpc_kind kind;
    sd_status st;

    if (call == NULL || (msg.ptr == NULL && msg.len > 0)) {
        return SD_EINVAL;
    }
    if (call->sc.end_wanted || call->cancel_requested || call->failed || call->closed ||
        call->user_closed) {
        return SD_ESTATE;
    }
    kind = call_kind(call);
    if ((kind == SD_RPC_KIND_UNARY || kind == SD_RPC_KIND_CLIENT_STREAM) &&
        call->n_queued_total > 0) {
        return SD_ESTATE;
    }
    st = sd__rpc_sc_send(&call->sc, msg,
                         kick && kind != SD_RPC_KIND_UNARY && kind != SD_RPC_KIND_CLIENT_STREAM);
    if (st == SD_OK) {
        call->n_queued_total++;
    }
    return st;
}

sd_status sd_rpc_call_send(sd_rpc_call *call, sd_bytes msg)
{
    return call_queue(call, msg, true);
}

void sd_rpc_call_finish(sd_rpc_call *call, sd_rpc_code code, const char *message)
{
    if (call == NULL || call->sc.end_wanted || call->cancel_requested || call->failed ||
        call->closed || call->user_closed) {
        return;
    }
    call_end(call, code, message != NULL ? sd_strdup(message) : NULL); /* NULL: no details */
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
    return call->sc.end_wanted || call->cancel_requested || call->failed || call->closed ||
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
    if (sd__rpc_sc_has_held(&call->sc)) {
        /* Messages received before the pause come first, delivered from the loop (never
         * from inside this call, which may run in one of the call's own callbacks). The
         * pending count keeps the call alive until t_resume has run. */
        if (!call->resume_queued) {
            call->resume_queued = true;
            atomic_fetch_add(&call->sc.pending, 1);
            call->t_resume.fn = call_on_resume;
            sd__rpc_post_tag(call->srv->rpc, &call->t_resume, true);
        }
        return;
    }
    call_post_recv(call);
}

size_t sd_rpc_call_send_queue_len(const sd_rpc_call *call)
{
    /* The pump pops the queue: it is read under the mutex (mutable in spirit). */
    return sd__rpc_sc_queue_len(&((sd_rpc_call *)call)->sc);
}
