/* Sundial: gRPC C core + libev transport. The only interface that hides <grpc/...>. */
#ifndef SD_RUNNER_TRANSPORT_RPC_H
#define SD_RUNNER_TRANSPORT_RPC_H

#include <stdbool.h>
#include <stddef.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"

/*
 * Model
 * -----
 * One sd_rpc per process owns a single gRPC completion queue, a pump thread blocked in
 * grpc_completion_queue_next(), and a libev loop (given by the caller, run by the caller).
 * Every callback below runs as if on the libev loop thread, never on a gRPC thread, so code
 * above this layer needs no locks: on the loop thread itself, or, when the loop is run by
 * sd_rpc_loop_run(), on the pump thread while the loop thread waits in its poll (the two
 * exclude each other with a mutex; libev may be used from the callback either way). Messages cross
 * this interface as serialized protobuf bytes; the layer above packs and unpacks them (protobuf-c),
 * this layer knows nothing of message types.
 *
 * Buffers passed to callbacks are borrowed for the duration of the callback only.
 * Sends copy their input. *
 * Callbacks never run from inside an API call: they come from the loop (the one exception is
 * sd_rpc_destroy, below). So a handler may call any function here from any callback.
 *
 * Loop liveness: the hub's own watcher does not keep ev_run() going. Each live server (from
 * create until its shutdown done), server call, client unary call and client stream holds
 * one loop reference until it ends, so ev_run(loop, 0) returns once all of them are gone
 * and the caller has no other active watcher. Tasks queued by sd_rpc_run_on_loop() do not
 * hold the loop: whoever posts them must make sure it keeps running.
 *
 * gRPC's own log lines go to runner/base/log.h under module "grpc" (its errors at WARN).
 */

struct ev_loop;

/* gRPC status codes (same numbers as grpc_status_code). */
typedef enum sd_rpc_code {
    SD_RPC_OK = 0,
    SD_RPC_CANCELLED = 1,
    SD_RPC_UNKNOWN = 2,
    SD_RPC_INVALID_ARGUMENT = 3,
    SD_RPC_DEADLINE_EXCEEDED = 4,
    SD_RPC_NOT_FOUND = 5,
    SD_RPC_ALREADY_EXISTS = 6,
    SD_RPC_PERMISSION_DENIED = 7,
    SD_RPC_RESOURCE_EXHAUSTED = 8,
    SD_RPC_FAILED_PRECONDITION = 9,
    SD_RPC_ABORTED = 10,
    SD_RPC_OUT_OF_RANGE = 11,
    SD_RPC_UNIMPLEMENTED = 12,
    SD_RPC_INTERNAL = 13,
    SD_RPC_UNAVAILABLE = 14,
    SD_RPC_DATA_LOSS = 15,
    SD_RPC_UNAUTHENTICATED = 16
} sd_rpc_code;

/* Map an sd_status to the gRPC code a client should see (EINVAL/EPROTO -> INVALID_ARGUMENT...). */
sd_rpc_code sd_rpc_code_from_status(sd_status st);

typedef enum sd_rpc_kind {
    SD_RPC_KIND_UNARY,
    SD_RPC_KIND_SERVER_STREAM,
    SD_RPC_KIND_CLIENT_STREAM,
    SD_RPC_KIND_BIDI
} sd_rpc_kind;

typedef struct sd_rpc sd_rpc;
typedef struct sd_rpc_server sd_rpc_server;
typedef struct sd_rpc_call sd_rpc_call; /* one server-side call */
typedef struct sd_rpc_channel sd_rpc_channel;
typedef struct sd_rpc_stream sd_rpc_stream; /* one client-side streaming call */

/* ---------------------------------------------------------------- hub */

/*
 * Create the hub: calls grpc_init(), creates the completion queue and starts the pump thread,
 * and registers an ev_async on `loop` to receive completions. The caller runs the loop.
 * Caller owns; free with sd_rpc_destroy() after every server, channel and stream is gone.
 */
SD_MUST_CHECK sd_status sd_rpc_create(struct ev_loop *loop, sd_rpc **out, sd_err *err);

/*
 * Shut the completion queue down, join the pump, grpc_shutdown(). NULL is a no-op.
 * Call it on the loop thread but not from a callback of this hub (e.g. after ev_run returns).
 * Anything still open is ended first: servers are shut down with no grace, calls cancelled,
 * and their completions (including user callbacks: on_close, unary done) run inside this
 * call for up to 5 s. So "sd_rpc_server_shutdown(srv, 0, NULL, NULL); sd_rpc_destroy(rpc);"
 * without running the loop in between is fine. Channels must still be destroyed before.
 * Tasks queued by sd_rpc_run_on_loop() that have not run yet are dropped.
 */
void sd_rpc_destroy(sd_rpc *rpc);

struct ev_loop *sd_rpc_loop(sd_rpc *rpc);

/*
 * Run `loop` as ev_run(loop, 0) does, letting the first hub created on it dispatch from its
 * pump thread while the loop waits in its poll (no hand-over: one thread wake-up less for
 * every message that finds the loop idle). The hub's callbacks then run on the loop thread
 * or on its pump, never both at once, with the same guarantees: one at a time, in order,
 * and libev usable from them (the loop is woken after the pump ran some). A loop without a
 * hub, or a nested call, is plain ev_run(loop, 0).
 */
void sd_rpc_loop_run(struct ev_loop *loop);

/* ev_break(loop, how) for callbacks of a loop run by sd_rpc_loop_run (a callback may run on
 * the pump, where a plain ev_break would be lost). */
void sd_rpc_loop_break(struct ev_loop *loop, int how);

/* True when the calling thread is running rpc's callbacks now (inside one of them, on the
 * loop thread or on the pump): code that would hand work to the loop runs it directly then. */
bool sd_rpc_on_loop(const sd_rpc *rpc);

/*
 * Run fn(ctx) on the loop thread soon. Callable from ANY thread (this is how worker threads
 * hand work to the loop). Returns SD_ENOMEM if the task could not be queued.
 */
SD_MUST_CHECK sd_status sd_rpc_run_on_loop(sd_rpc *rpc, void (*fn)(void *ctx), void *ctx);

/*
 * As sd_rpc_run_on_loop, but from a thread other than the loop's, when the loop waits in its
 * poll (sd_rpc_loop_run) fn runs right here, after what is queued for the loop, holding the
 * loop as a callback does (no wake-up of the loop thread first). So the caller must hold no
 * lock that a callback of this hub may take. Otherwise it is queued.
 */
SD_MUST_CHECK sd_status sd_rpc_run_soon(sd_rpc *rpc, void (*fn)(void *ctx), void *ctx);

/* ---------------------------------------------------------------- server */

/*
 * Handler callbacks for one method. All optional except on_open.
 *  on_open:       a new call. For UNARY and SERVER_STREAM, `request` is the request message
 *                 (possibly empty); for CLIENT_STREAM and BIDI it is empty and messages arrive
 *                 through on_message.
 *  on_message:    one client message (CLIENT_STREAM, BIDI).
 *  on_half_close: the client finished sending (CLIENT_STREAM, BIDI).
 *  on_close:      the call is over: finished by sd_rpc_call_finish() and delivered, or cancelled
 *                 (client went away, deadline, server shutdown) when `cancelled` is true. It is
 *                 the last callback for the call; the sd_rpc_call is freed right after it returns.
 *
 * Details callers rely on:
 *  - on_close runs for every call whose on_open ran, exactly once, even when the handler
 *    answers asynchronously; drop every pointer to the sd_rpc_call in it.
 *  - Finishing with a non-OK code yourself gives on_close(cancelled=false).
 *  - A client that resets or loses the stream is reported by on_close(cancelled=true) only;
 *    on_half_close means a clean half-close.
 *  - After sd_rpc_call_finish() or sd_rpc_call_cancel() (sd_rpc_call_is_closed() true) no more
 *    on_message/on_half_close are delivered; messages still arriving are dropped.
 *  - A UNARY/SERVER_STREAM call that arrives without a request message is answered INTERNAL
 *    by the transport; the handler never sees it.
 *  - UNARY and CLIENT_STREAM calls accept one sd_rpc_call_send(); a second returns SD_ESTATE.
 *    Their message goes out with the status, in one batch, when sd_rpc_call_finish() is called.
 *  - Receiving never pauses by itself: a handler that queues faster than the client reads
 *    should watch sd_rpc_call_send_queue_len() and use sd_rpc_call_pause_recv().
 */
typedef struct sd_rpc_handler {
    void (*on_open)(sd_rpc_call *call, sd_bytes request, void *ctx);
    void (*on_message)(sd_rpc_call *call, sd_bytes msg, void *ctx);
    void (*on_half_close)(sd_rpc_call *call, void *ctx);
    void (*on_close)(sd_rpc_call *call, bool cancelled, void *ctx);
    void *ctx;
} sd_rpc_handler;

/*
 * A server with raised receive limits (unlimited), keepalive settings that tolerate idle SDK
 * streams (pings permitted without calls, unlimited ping strikes), SO_REUSEPORT off, and a
 * generic handler answering UNIMPLEMENTED for unknown methods.
 */
SD_MUST_CHECK sd_status sd_rpc_server_create(sd_rpc *rpc, sd_rpc_server **out, sd_err *err);

/* Register a method by full path "/pkg.Service/Method". Before sd_rpc_server_start(). */
SD_MUST_CHECK sd_status sd_rpc_server_add_method(sd_rpc_server *srv,
                                                 const char *path,
                                                 sd_rpc_kind kind,
                                                 const sd_rpc_handler *h);

/*
 * Bind "host:port" ("127.0.0.1:0" picks a free port). OUT: port, the bound port.
 * Before sd_rpc_server_start(). Fails with SD_EIO and a message if the address is taken.
 */
SD_MUST_CHECK sd_status sd_rpc_server_listen(sd_rpc_server *srv,
                                             const char *addr,
                                             int *port,
                                             sd_err *err);

/*
 * Bind and listen on a plain TCP socket for host:port before anything else exists (no gRPC,
 * no hub; see rpc_listen.c), so a client's connect succeeds from then on and waits in the
 * kernel until a server adopts the socket. OUT: fd (close on exec), bound (the port, for 0).
 * A host that is not a numeric IPv4 address binds nothing: fd is -1 and SD_OK is returned
 * (sd_rpc_server_listen binds it later). SD_EIO with a message when the port is taken.
 */
SD_MUST_CHECK sd_status
sd_rpc_listen_early(const char *host, int port, int *fd, int *bound, sd_err *err);

/*
 * Serve the connections of a socket from sd_rpc_listen_early instead of binding one (before
 * sd_rpc_server_start). The server owns fd from this call on, also when it fails; it closes
 * the socket when it shuts down.
 */
SD_MUST_CHECK sd_status sd_rpc_server_adopt(sd_rpc_server *srv, int fd, sd_err *err);

SD_MUST_CHECK sd_status sd_rpc_server_start(sd_rpc_server *srv, sd_err *err);

/*
 * Stop accepting calls; after grace_ms cancel the calls still open; when every call has
 * closed, call done(ctx) on the loop thread and free the server. The server pointer is
 * invalid after done runs. Safe to call once.
 */
void sd_rpc_server_shutdown(sd_rpc_server *srv, int grace_ms, void (*done)(void *ctx), void *ctx);

/*
 * Queue one message on a server call (copied). Messages go out in order, one SEND at a time.
 * Returns SD_ESTATE after sd_rpc_call_finish() or once the call is cancelled.
 */
SD_MUST_CHECK sd_status sd_rpc_call_send(sd_rpc_call *call, sd_bytes msg);

/*
 * End the call with a status after all queued messages are sent. `message` may be NULL.
 * For UNARY calls, send the response with sd_rpc_call_send() first (or use sd_rpc_call_reply()).
 * Calling it twice, or on a cancelled call, is a no-op.
 */
void sd_rpc_call_finish(sd_rpc_call *call, sd_rpc_code code, const char *message);

/* sd_rpc_call_send(response) + sd_rpc_call_finish(OK). */
void sd_rpc_call_reply(sd_rpc_call *call, sd_bytes response);

/* Cancel the call from the server side (the client sees CANCELLED). */
void sd_rpc_call_cancel(sd_rpc_call *call);

/* Request metadata value for a lowercase key (e.g. "worker_id"), or NULL. Borrowed. */
const char *sd_rpc_call_metadata(const sd_rpc_call *call, const char *key);
const char *sd_rpc_call_method(const sd_rpc_call *call); /* the path */
const char *sd_rpc_call_peer(const sd_rpc_call *call);
bool sd_rpc_call_is_closed(const sd_rpc_call *call); /* finished or cancelled */

/* Per-call user pointer, NULL initially. */
void sd_rpc_call_set_data(sd_rpc_call *call, void *data);
void *sd_rpc_call_data(const sd_rpc_call *call);

/*
 * Back-pressure: stop posting receives (the client blocks through HTTP/2 flow control) and
 * resume. Receiving is on by default. The transport receives a little ahead of the handler
 * (at most 16 messages, about 1 MiB, see SD_RPC_RECV_AHEAD); what it already holds when the
 * call is paused is delivered after the resume, in order, so no on_message runs while paused.
 */
void sd_rpc_call_pause_recv(sd_rpc_call *call);
void sd_rpc_call_resume_recv(sd_rpc_call *call);

/* Number of messages queued but not yet sent on this call. */
size_t sd_rpc_call_send_queue_len(const sd_rpc_call *call);

/* ---------------------------------------------------------------- client */

/* An insecure channel to "host:port" with unlimited receive size. Caller owns. */
SD_MUST_CHECK sd_status sd_rpc_channel_create(sd_rpc *rpc,
                                              const char *target,
                                              sd_rpc_channel **out,
                                              sd_err *err);

/*
 * Cancel the channel's open calls and destroy it once their callbacks have run. The pointer
 * is invalid after this call; pending unary callbacks still run (with CANCELLED).
 */
void sd_rpc_channel_destroy(sd_rpc_channel *ch);

/* True while the channel has calls whose final callback (a stream's on_close, a unary's done)
 * has not been called, or is destroying (so it is not idle). A call inside its final callback
 * does not count: the last stream of a channel may hand the channel on from there. */
bool sd_rpc_channel_busy(const sd_rpc_channel *ch);

/* Optional metadata pairs for a client call; keys must be lowercase. */
typedef struct sd_rpc_metadata {
    const char *key;
    const char *value;
} sd_rpc_metadata;

/*
 * A unary call. `done` runs exactly once on the loop thread with the status, the status
 * message (never NULL) and the response (empty unless code == SD_RPC_OK) — unless this
 * function returns an error, in which case it never runs. timeout_ms <= 0 means none.
 */
SD_MUST_CHECK sd_status
sd_rpc_unary(sd_rpc_channel *ch,
             const char *path,
             sd_bytes request,
             const sd_rpc_metadata *md,
             size_t n_md,
             int timeout_ms,
             void (*done)(void *ctx, sd_rpc_code code, const char *message, sd_bytes response),
             void *ctx,
             sd_err *err);

/*
 * Client streaming/bidi calls (the C SDK harness's Control, Data, State, Logging streams).
 * A server-streaming call is a stream too: open, send the request, half-close, read.
 *  on_message: one server message. Not delivered after sd_rpc_stream_cancel().
 *  on_close:   the final status; last callback; the stream is freed right after it returns.
 *              It always runs once sd_rpc_stream_open() returned SD_OK (also when the channel
 *              is destroyed: CANCELLED). The stream has no deadline and always keeps reading
 *              (gRPC delivers the status only after every message was read).
 */
typedef struct sd_rpc_stream_handler {
    void (*on_message)(sd_rpc_stream *s, sd_bytes msg, void *ctx);
    void (*on_close)(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx);
    void *ctx;
} sd_rpc_stream_handler;

SD_MUST_CHECK sd_status sd_rpc_stream_open(sd_rpc_channel *ch,
                                           const char *path,
                                           const sd_rpc_metadata *md,
                                           size_t n_md,
                                           const sd_rpc_stream_handler *h,
                                           sd_rpc_stream **out,
                                           sd_err *err);

/* Queue a message (copied). SD_ESTATE after half-close or close. */
SD_MUST_CHECK sd_status sd_rpc_stream_send(sd_rpc_stream *s, sd_bytes msg);

/* Half-close after the queued messages are sent. */
void sd_rpc_stream_half_close(sd_rpc_stream *s);

/* Cancel; on_close follows with CANCELLED. */
void sd_rpc_stream_cancel(sd_rpc_stream *s);

/*
 * Number of messages queued on the stream but not yet handed to gRPC (including the one in
 * flight). Callers that produce faster than the peer reads can throttle on it.
 */
size_t sd_rpc_stream_send_queue_len(const sd_rpc_stream *s);

#endif
