/*
 * Sundial: the client side of the transport — channels, unary calls and streams.
 *
 * A channel is an insecure grpc_channel with an unlimited receive size (C core's default of
 * 4 MiB is too small for pipelines and element batches). Method paths are registered with the
 * channel once (grpc_channel_register_call) and cached per channel.
 *
 * A unary call is one batch of six ops — send headers, message and half-close, receive
 * headers, message and status. It always completes with ok=1; the status says what happened.
 *
 * A stream (client-streaming, server-streaming or bidi: on the wire they differ only in how
 * many messages each side sends) runs its messages through the stream core (rpc_stream.c:
 * the send queue ending in SEND_CLOSE_FROM_CLIENT, the receive ring, the pump's chaining) and
 * keeps two tags of its own:
 *
 *   t_status  RECV_STATUS_ON_CLIENT, posted at open: the end event
 *   t_md      RECV_INITIAL_METADATA
 *
 * C core completes RECV_STATUS_ON_CLIENT only after the client has read every message, so a
 * stream always keeps reading; there is no receive pause on the client side. The stream is
 * freed when pending == 0 and the status has arrived; on_close runs just before that and is
 * therefore the last callback.
 *
 * Each channel keeps a list of its live calls, so sd_rpc_channel_destroy() can cancel them;
 * the grpc_channel itself is destroyed once the last of them has delivered its callback.
 */
#include <stdatomic.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/transport/rpc_int.h"

typedef struct sd_chan_method sd_chan_method;

struct sd_chan_method {
    char *path;
    void *handle;
    sd_chan_method *next;
};

/* The part shared by unary calls and streams: membership in the channel's list. */
typedef struct sd_ccall sd_ccall;

struct sd_ccall {
    sd_ccall *prev;
    sd_ccall *next;
    grpc_call *call;
};

struct sd_rpc_channel {
    sd_rpc *rpc;
    sd_rpc_closer closer;
    grpc_channel *ch;
    sd_chan_method *methods;
    sd_ccall *calls;
    long n_calls;
    long n_final; /* of them, calls inside their final callback (on_close, a unary's done) */
    bool destroying;
};

typedef struct sd_unary {
    sd_ccall base;
    sd_rpc_channel *ch;
    sd_tag tag;
    grpc_metadata *send_md;
    size_t n_md;
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *recv_bb;
    grpc_metadata_array recv_md;
    grpc_metadata_array trailing;
    grpc_status_code status;
    grpc_slice details;
    void (*done)(void *ctx, sd_rpc_code code, const char *message, sd_bytes response);
    void *ctx;
} sd_unary;

struct sd_rpc_stream {
    sd_ccall base;
    sd_rpc_channel *ch;
    sd_rpc_stream_handler h;
    sd_rpc_sc sc; /* the message flow (rpc_stream.c); its md is ours, sent with the first batch */
    sd_tag t_status;
    sd_tag t_md;
    grpc_metadata_array recv_md;
    grpc_metadata_array trailing;
    grpc_status_code status;
    grpc_slice details;

    /* Loop thread only. */
    bool got_status;
    bool cancelled;
    bool user_closed;
    bool eos;
};

/* ---------------------------------------------------------------- channel */

/* The hub is being destroyed while this channel has calls: cancel them (callbacks follow). */
static void chan_force(sd_rpc_closer *closer)
{
    sd_rpc_channel *ch = SD_CONTAINER_OF(closer, sd_rpc_channel, closer);
    for (sd_ccall *c = ch->calls; c != NULL; c = c->next) {
        grpc_call_cancel(c->call, NULL);
    }
}

sd_status sd_rpc_channel_create(sd_rpc *rpc, const char *target, sd_rpc_channel **out, sd_err *err)
{
    sd_rpc_channel *ch;
    grpc_channel_credentials *creds;
    grpc_arg args[1];
    grpc_channel_args chargs;

    *out = NULL;
    if (rpc == NULL || target == NULL || target[0] == '\0') {
        return sd_err_set(err, SD_EINVAL, "rpc channel: a hub and a target are required");
    }
    ch = sd_calloc(1, sizeof(*ch));
    if (ch == NULL) {
        return sd_err_set(err, SD_ENOMEM, "rpc channel to \"%s\": out of memory", target);
    }
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = -1;
    chargs.num_args = 1;
    chargs.args = args;
    creds = grpc_insecure_credentials_create();
    ch->ch = grpc_channel_create(target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    if (ch->ch == NULL) {
        sd_free(ch);
        return sd_err_set(err, SD_EINTERNAL, "rpc channel to \"%s\": cannot create", target);
    }
    ch->rpc = rpc;
    ch->closer.force = chan_force;
    sd__rpc_closer_add(rpc, &ch->closer);
    *out = ch;
    return SD_OK;
}

static void chan_destroy(sd_rpc_channel *ch)
{
    sd_chan_method *m = ch->methods;
    while (m != NULL) {
        sd_chan_method *next = m->next;
        sd_free(m->path);
        sd_free(m);
        m = next;
    }
    sd__rpc_closer_remove(ch->rpc, &ch->closer);
    grpc_channel_destroy(ch->ch);
    sd_free(ch);
}

bool sd_rpc_channel_busy(const sd_rpc_channel *ch)
{
    return ch->n_calls > ch->n_final || ch->destroying;
}

void sd_rpc_channel_destroy(sd_rpc_channel *ch)
{
    if (ch == NULL || ch->destroying) {
        return;
    }
    ch->destroying = true;
    for (sd_ccall *c = ch->calls; c != NULL; c = c->next) {
        grpc_call_cancel(c->call, NULL);
    }
    if (ch->n_calls == 0) {
        chan_destroy(ch);
    }
}

static void chan_link(sd_rpc_channel *ch, sd_ccall *c)
{
    c->prev = NULL;
    c->next = ch->calls;
    if (ch->calls != NULL) {
        ch->calls->prev = c;
    }
    ch->calls = c;
    ch->n_calls++;
    sd__rpc_hold(ch->rpc);
}

/* Unlink a finished call; frees the channel if it was waiting for its last call. */
static void chan_unlink(sd_rpc_channel *ch, sd_ccall *c)
{
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        ch->calls = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    ch->n_calls--;
    sd__rpc_release(ch->rpc);
    if (ch->destroying && ch->n_calls == 0) {
        chan_destroy(ch);
    }
}

static grpc_call *chan_new_call(sd_rpc_channel *ch, const char *path, int timeout_ms)
{
    gpr_timespec deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
    sd_chan_method *m;

    if (timeout_ms > 0) {
        deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    }
    for (m = ch->methods; m != NULL; m = m->next) {
        if (strcmp(m->path, path) == 0) {
            break;
        }
    }
    if (m == NULL) {
        m = sd_calloc(1, sizeof(*m));
        if (m == NULL) {
            return NULL;
        }
        m->path = sd_strdup(path);
        if (m->path == NULL) {
            sd_free(m);
            return NULL;
        }
        m->handle = grpc_channel_register_call(ch->ch, path, NULL, NULL);
        m->next = ch->methods;
        ch->methods = m;
    }
    return grpc_channel_create_registered_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, ch->rpc->cq,
                                               m->handle, deadline, NULL);
}

static void md_destroy(grpc_metadata *md, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        grpc_slice_unref(md[i].key);
        grpc_slice_unref(md[i].value);
    }
    sd_free(md);
}

/* Validate and copy caller metadata into gRPC form. OUT: md (NULL when n == 0). */
static sd_status
md_build(const sd_rpc_metadata *in, size_t n, grpc_metadata **out, const char *path, sd_err *err)
{
    grpc_metadata *md;

    *out = NULL;
    if (n == 0) {
        return SD_OK;
    }
    if (in == NULL) {
        return sd_err_set(err, SD_EINVAL, "call %s: %zu metadata entries but no array", path, n);
    }
    for (size_t i = 0; i < n; i++) {
        grpc_slice k;
        grpc_slice v;
        bool ok;
        if (in[i].key == NULL || in[i].value == NULL) {
            return sd_err_set(err, SD_EINVAL, "call %s: metadata entry %zu has a NULL key or value",
                              path, i);
        }
        k = grpc_slice_from_static_string(in[i].key);
        v = grpc_slice_from_static_string(in[i].value);
        ok = grpc_header_key_is_legal(k) &&
             (grpc_is_binary_header(k) || grpc_header_nonbin_value_is_legal(v));
        if (!ok) {
            return sd_err_set(err, SD_EINVAL,
                              "call %s: metadata \"%s\" is not a legal lowercase key with a "
                              "printable value",
                              path, in[i].key);
        }
    }
    md = sd_calloc(n, sizeof(*md));
    if (md == NULL) {
        return sd_err_set(err, SD_ENOMEM, "call %s: out of memory for metadata", path);
    }
    for (size_t i = 0; i < n; i++) {
        md[i].key = grpc_slice_from_copied_string(in[i].key);
        md[i].value = grpc_slice_from_copied_string(in[i].value);
    }
    *out = md;
    return SD_OK;
}

/* ---------------------------------------------------------------- unary */

static void unary_on_done(sd_tag *tag, bool ok)
{
    sd_unary *u = SD_CONTAINER_OF(tag, sd_unary, tag);
    sd_rpc_code code = (sd_rpc_code)u->status;
    char *msg = sd__rpc_slice_dup(u->details);
    sd_bytes resp = sd_bytes_make("", 0);
    grpc_slice hold = grpc_empty_slice();

    (void)ok; /* a batch with RECV_STATUS_ON_CLIENT always succeeds; the status tells */
    if (code == SD_RPC_OK) {
        if (u->recv_bb == NULL) {
            code = SD_RPC_INTERNAL;
            sd_free(msg);
            msg = sd_strdup("no response message");
        } else if (!sd__rpc_bb_bytes(u->recv_bb, &hold, &resp)) {
            code = SD_RPC_INTERNAL;
            sd_free(msg);
            msg = sd_strdup("unreadable response message");
            resp = sd_bytes_make("", 0);
        }
    }
    u->ch->n_final++;
    u->done(u->ctx, code, msg != NULL ? msg : "", resp);
    u->ch->n_final--;
    grpc_slice_unref(hold);
    sd_free(msg);

    if (u->recv_bb != NULL) {
        grpc_byte_buffer_destroy(u->recv_bb);
    }
    grpc_byte_buffer_destroy(u->send_bb);
    md_destroy(u->send_md, u->n_md);
    grpc_metadata_array_destroy(&u->recv_md);
    grpc_metadata_array_destroy(&u->trailing);
    grpc_slice_unref(u->details);
    grpc_call_unref(u->base.call);
    chan_unlink(u->ch, &u->base);
    sd_free(u);
}

sd_status
sd_rpc_unary(sd_rpc_channel *ch,
             const char *path,
             sd_bytes request,
             const sd_rpc_metadata *md,
             size_t n_md,
             int timeout_ms,
             void (*done)(void *ctx, sd_rpc_code code, const char *message, sd_bytes response),
             void *ctx,
             sd_err *err)
{
    sd_unary *u;
    grpc_op ops[6];
    sd_status st;

    if (ch == NULL || path == NULL || path[0] != '/' || done == NULL ||
        (request.ptr == NULL && request.len > 0)) {
        return sd_err_set(err, SD_EINVAL,
                          "unary call: channel, \"/service/method\" path and "
                          "done callback are required");
    }
    if (ch->destroying) {
        return sd_err_set(err, SD_ESTATE, "unary call %s: channel is being destroyed", path);
    }
    u = sd_calloc(1, sizeof(*u));
    if (u == NULL) {
        return sd_err_set(err, SD_ENOMEM, "unary call %s: out of memory", path);
    }
    st = md_build(md, n_md, &u->send_md, path, err);
    if (st != SD_OK) {
        sd_free(u);
        return st;
    }
    u->n_md = n_md;
    u->base.call = chan_new_call(ch, path, timeout_ms);
    if (u->base.call == NULL) {
        md_destroy(u->send_md, u->n_md);
        sd_free(u);
        return sd_err_set(err, SD_ENOMEM, "unary call %s: cannot create the call", path);
    }
    u->ch = ch;
    u->done = done;
    u->ctx = ctx;
    u->send_bb = sd__rpc_bb_from(request.len > 0 ? request : sd_bytes_make("", 0));
    grpc_metadata_array_init(&u->recv_md);
    grpc_metadata_array_init(&u->trailing);
    u->details = grpc_empty_slice();
    u->tag.fn = unary_on_done;

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = u->n_md;
    ops[0].data.send_initial_metadata.metadata = u->send_md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = u->send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->recv_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing;
    ops[5].data.recv_status_on_client.status = &u->status;
    ops[5].data.recv_status_on_client.status_details = &u->details;
    if (!sd__rpc_start_batch(u->base.call, ops, 6, &u->tag, path)) {
        grpc_byte_buffer_destroy(u->send_bb);
        md_destroy(u->send_md, u->n_md);
        grpc_metadata_array_destroy(&u->recv_md);
        grpc_metadata_array_destroy(&u->trailing);
        grpc_call_unref(u->base.call);
        sd_free(u);
        return sd_err_set(err, SD_EINTERNAL, "unary call %s: gRPC refused the batch", path);
    }
    chan_link(ch, &u->base);
    return SD_OK;
}

/* ---------------------------------------------------------------- streams */

#define STREAM_OF(scp) SD_CONTAINER_OF(scp, sd_rpc_stream, sc)

static void stream_maybe_destroy(sd_rpc_stream *s)
{
    if (atomic_load(&s->sc.pending) > 0 || !s->got_status) {
        return;
    }
    if (!s->user_closed) {
        char *msg = sd__rpc_slice_dup(s->details);
        s->user_closed = true;
        if (s->h.on_close != NULL) {
            s->ch->n_final++;
            s->h.on_close(s, (sd_rpc_code)s->status, msg != NULL ? msg : "", s->h.ctx);
            s->ch->n_final--;
        }
        sd_free(msg);
    }
    /* Nothing is in C core or in the hand-over queue now: the pump cannot touch s. */
    sd__rpc_sc_deinit(&s->sc);
    md_destroy(s->sc.md, s->sc.n_md);
    grpc_metadata_array_destroy(&s->recv_md);
    grpc_metadata_array_destroy(&s->trailing);
    grpc_slice_unref(s->details);
    grpc_call_unref(s->base.call);
    chan_unlink(s->ch, &s->base);
    sd_free(s);
}

/* The pump starts no more sends (cancelled, the status in, a failure). Loop thread. */
static void stream_stop_sends(sd_rpc_stream *s)
{
    pthread_mutex_lock(&s->sc.mu);
    s->sc.pump_stop_send = true;
    pthread_mutex_unlock(&s->sc.mu);
}

static bool stream_may_send(sd_rpc_sc *sc)
{
    sd_rpc_stream *s = STREAM_OF(sc);
    return !s->got_status && !s->cancelled;
}

static void stream_send_refused(sd_rpc_sc *sc)
{
    STREAM_OF(sc)->cancelled = true;
}

static void stream_sent(sd_rpc_sc *sc, bool ok)
{
    if (ok) {
        sd__rpc_sc_kick(sc);
    }
    /* On failure the call is over; the status is on its way. */
    stream_maybe_destroy(STREAM_OF(sc));
}

/* Post the next receive unless the pump did; on failure the stream is cancelled. */
static void stream_post_recv(sd_rpc_stream *s)
{
    if (sd__rpc_sc_post_recv(&s->sc)) {
        return;
    }
    grpc_call_cancel_with_status(s->base.call, GRPC_STATUS_INTERNAL,
                                 "client stream could not receive", NULL);
    pthread_mutex_lock(&s->sc.mu);
    s->sc.pump_stop_send = true;
    s->sc.pump_stop_recv = true;
    pthread_mutex_unlock(&s->sc.mu);
    s->eos = true;
    s->cancelled = true;
}

/* Deliver one received slot (the next in order): a message, or the end of the stream. */
static void stream_deliver(sd_rpc_stream *s, grpc_byte_buffer *bb, bool ok)
{
    grpc_slice hold;
    sd_bytes msg;

    if (!ok || bb == NULL) {
        s->eos = true;
        if (bb != NULL) {
            grpc_byte_buffer_destroy(bb);
        }
        return;
    }
    if (!sd__rpc_bb_bytes(bb, &hold, &msg)) {
        if (!s->cancelled) {
            s->cancelled = true;
            stream_stop_sends(s);
            grpc_call_cancel_with_status(s->base.call, GRPC_STATUS_INTERNAL,
                                         "unreadable message from the server", NULL);
        }
    } else {
        if (!s->cancelled && !s->user_closed && s->h.on_message != NULL) {
            s->h.on_message(s, msg, s->h.ctx);
        }
        grpc_slice_unref(hold);
    }
    grpc_byte_buffer_destroy(bb);
}

static void stream_received(sd_rpc_sc *sc)
{
    sd_rpc_stream *s = STREAM_OF(sc);
    grpc_byte_buffer *bb;
    bool ok;

    /* Slots complete and are dispatched in posting order, so this takes the one that just
     * completed; the loop keeps the general form in case that ever changes. */
    while (sd__rpc_sc_take(&s->sc, &bb, &ok)) {
        stream_deliver(s, bb, ok);
    }
    /* Keep reading even after a cancel: the status arrives only after the last read. */
    if (!s->eos) {
        stream_post_recv(s);
    }
    stream_maybe_destroy(s);
}

static const sd_rpc_sc_ops stream_ops = {
    .may_send = stream_may_send,
    .send_refused = stream_send_refused,
    .sent = stream_sent,
    .received = stream_received,
};

static void stream_on_md(sd_tag *tag, bool ok)
{
    sd_rpc_stream *s = SD_CONTAINER_OF(tag, sd_rpc_stream, t_md);
    (void)ok;
    atomic_fetch_sub(&s->sc.pending, 1);
    stream_maybe_destroy(s);
}

static void stream_on_status(sd_tag *tag, bool ok)
{
    sd_rpc_stream *s = SD_CONTAINER_OF(tag, sd_rpc_stream, t_status);
    (void)ok;
    atomic_fetch_sub(&s->sc.pending, 1);
    s->got_status = true;
    stream_stop_sends(s);
    stream_maybe_destroy(s);
}

sd_status sd_rpc_stream_open(sd_rpc_channel *ch,
                             const char *path,
                             const sd_rpc_metadata *md,
                             size_t n_md,
                             const sd_rpc_stream_handler *h,
                             sd_rpc_stream **out,
                             sd_err *err)
{
    sd_rpc_stream *s;
    grpc_metadata *send_md;
    grpc_call *call;
    grpc_op op;
    sd_status st;

    if (out != NULL) {
        *out = NULL;
    }
    if (ch == NULL || path == NULL || path[0] != '/' || h == NULL || out == NULL) {
        return sd_err_set(err, SD_EINVAL,
                          "stream: channel, \"/service/method\" path, handler "
                          "and out pointer are required");
    }
    if (ch->destroying) {
        return sd_err_set(err, SD_ESTATE, "stream %s: channel is being destroyed", path);
    }
    s = sd_calloc(1, sizeof(*s));
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "stream %s: out of memory", path);
    }
    st = md_build(md, n_md, &send_md, path, err);
    if (st != SD_OK) {
        sd_free(s);
        return st;
    }
    call = chan_new_call(ch, path, 0);
    if (call == NULL) {
        md_destroy(send_md, n_md);
        sd_free(s);
        return sd_err_set(err, SD_ENOMEM, "stream %s: cannot create the call", path);
    }
    s->base.call = call;
    s->ch = ch;
    s->h = *h;
    sd__rpc_sc_init(&s->sc, call, &stream_ops);
    s->sc.what = "client stream";
    s->sc.send_failure = "client stream could not send";
    s->sc.md = send_md;
    s->sc.n_md = n_md;
    grpc_metadata_array_init(&s->recv_md);
    grpc_metadata_array_init(&s->trailing);
    s->details = grpc_empty_slice();
    s->status = GRPC_STATUS_UNKNOWN;

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &s->trailing;
    op.data.recv_status_on_client.status = &s->status;
    op.data.recv_status_on_client.status_details = &s->details;
    s->t_status.fn = stream_on_status;
    if (!sd__rpc_start_batch(call, &op, 1, &s->t_status, path)) {
        sd__rpc_sc_deinit(&s->sc);
        md_destroy(send_md, n_md);
        grpc_metadata_array_destroy(&s->recv_md);
        grpc_metadata_array_destroy(&s->trailing);
        grpc_call_unref(call);
        sd_free(s);
        return sd_err_set(err, SD_EINTERNAL, "stream %s: gRPC refused the status op", path);
    }
    atomic_fetch_add(&s->sc.pending, 1);
    chan_link(ch, &s->base);

    /* From here on the status will arrive and on_close will run, whatever fails below. */
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_INITIAL_METADATA;
    op.data.recv_initial_metadata.recv_initial_metadata = &s->recv_md;
    s->t_md.fn = stream_on_md;
    if (sd__rpc_start_batch(call, &op, 1, &s->t_md, path)) {
        atomic_fetch_add(&s->sc.pending, 1);
    }
    sd__rpc_sc_kick(&s->sc);
    stream_post_recv(s);
    *out = s;
    return SD_OK;
}

sd_status sd_rpc_stream_send(sd_rpc_stream *s, sd_bytes msg)
{
    if (s == NULL || (msg.ptr == NULL && msg.len > 0)) {
        return SD_EINVAL;
    }
    if (s->sc.end_wanted || s->got_status || s->cancelled || s->user_closed) {
        return SD_ESTATE;
    }
    return sd__rpc_sc_send(&s->sc, msg, true);
}

void sd_rpc_stream_half_close(sd_rpc_stream *s)
{
    if (s == NULL || s->sc.end_wanted || s->got_status || s->cancelled || s->user_closed) {
        return;
    }
    sd__rpc_sc_end(&s->sc, SD_RPC_OK, NULL);
}

void sd_rpc_stream_cancel(sd_rpc_stream *s)
{
    if (s == NULL || s->cancelled || s->got_status || s->user_closed) {
        return;
    }
    s->cancelled = true;
    stream_stop_sends(s);
    grpc_call_cancel(s->base.call, NULL);
}

size_t sd_rpc_stream_send_queue_len(const sd_rpc_stream *s)
{
    /* The pump pops the queue: it is read under the mutex (mutable in spirit). */
    return sd__rpc_sc_queue_len(&((sd_rpc_stream *)s)->sc);
}
