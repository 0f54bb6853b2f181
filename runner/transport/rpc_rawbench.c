/*
 * Sundial: rpc_rawbench — the raw gRPC C core baseline that tools/bench_transport measures the
 * transport against. Benchmark support only: compiled into bench_transport, not sd_transport.
 *
 * What "raw" means: the best a C program can do with the same library for the same stream —
 * one thread, one completion queue shared by a server and a client, driven by
 * grpc_completion_queue_next on that thread, and every next batch started straight from the
 * completion that allows it. So there is no pump thread, no hand-over queue, no libev and no
 * copy on the echo path (the server sends back the very buffer it received). The rules of C
 * core are the transport's: one SEND_MESSAGE and one RECV_MESSAGE in flight per call, the
 * client's half-close rides with its last message and the server's status with its last echo.
 *
 *   client: [md] + msg i (+ close with the last) --->  server: recv -> FIFO -> send (+ status)
 *   client: recv echo i, check its bytes         <---
 *
 * The client keeps at most `window` messages unanswered, so the server's FIFO never holds more.
 * Tags are small integers (one of each kind in flight at a time), so nothing is allocated per
 * completion; messages are grpc_slice_malloc'd and filled in place.
 *
 * Each round creates and destroys its own server, channel and completion queue, so no state is
 * shared with the transport's rounds and no idle thread of ours sits in gRPC's poller.
 */
#include "runner/transport/rpc_rawbench.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "runner/base/alloc.h"
#include "runner/base/time.h"

#define RB_PATH       "/sd.bench.Raw/Echo"
#define RB_TIMEOUT_MS 120000

struct sd_rpc_rawbench {
    int initialised;
};

enum rb_tag {
    T_NEW = 1,
    T_SRV_CLOSE,
    T_SRV_RECV,
    T_SRV_SEND,
    T_CLI_STATUS,
    T_CLI_MD,
    T_CLI_SEND,
    T_CLI_RECV,
    T_SHUTDOWN
};

typedef struct rb_run {
    grpc_completion_queue *cq;
    grpc_server *srv;
    grpc_channel *ch;
    int pending; /* batches started and not yet completed */
    bool failed;
    const char *why;

    /* Server call. */
    grpc_call *scall;
    gpr_timespec sdeadline;
    grpc_metadata_array sreq_md;
    int scancelled;
    grpc_byte_buffer *srecv;
    grpc_byte_buffer *ssend;
    grpc_byte_buffer **ring;
    size_t cap, head, len;
    grpc_slice sdetails;
    bool s_md_sent, s_sending, s_half, s_status_sent, s_closed;

    /* Client call. */
    grpc_call *ccall;
    grpc_metadata_array cmd, ctrail;
    grpc_status_code cstatus;
    grpc_slice cdetails;
    grpc_byte_buffer *crecv;
    grpc_byte_buffer *csend;
    long n, window, sent, answered;
    size_t size;
    bool c_md_sent, c_sending, c_closed, c_status;
} rb_run;

/* ---------------------------------------------------------------- message contents */

void sd_rpc_rawbench_fill(uint8_t *buf, size_t size, uint64_t seq)
{
    size_t head = size < 8 ? size : 8;
    for (size_t i = 0; i < head; i++) {
        buf[i] = (uint8_t)(seq >> (8 * i));
    }
    memset(buf + head, (int)(uint8_t)(seq * 37 + 11), size - head);
}

bool sd_rpc_rawbench_check(sd_bytes msg, size_t size, uint64_t seq)
{
    size_t head = size < 8 ? size : 8;
    uint8_t body = (uint8_t)(seq * 37 + 11);
    if (msg.len != size) {
        return false;
    }
    for (size_t i = 0; i < head; i++) {
        if (msg.ptr[i] != (uint8_t)(seq >> (8 * i))) {
            return false;
        }
    }
    for (size_t i = head; i < size; i++) {
        if (msg.ptr[i] != body) {
            return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------- batches */

static void start(rb_run *r, grpc_call *call, const grpc_op *ops, size_t n_ops, enum rb_tag tag)
{
    if (grpc_call_start_batch(call, ops, n_ops, (void *)(uintptr_t)tag, NULL) != GRPC_CALL_OK) {
        r->failed = true;
        r->why = "grpc_call_start_batch refused a batch";
        grpc_call_cancel(call, NULL);
        return;
    }
    r->pending++;
}

static void post_recv(rb_run *r, grpc_call *call, grpc_byte_buffer **into, enum rb_tag tag)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = into;
    start(r, call, &op, 1, tag);
}

/* The next client batch: message `sent` if the window allows, the half-close with the last. */
static void cli_kick(rb_run *r)
{
    grpc_op ops[3];
    size_t n = 0;
    if (r->c_sending || r->c_closed || r->failed || r->sent - r->answered >= r->window) {
        return;
    }
    memset(ops, 0, sizeof(ops));
    if (!r->c_md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        r->c_md_sent = true;
    }
    grpc_slice s = grpc_slice_malloc(r->size);
    sd_rpc_rawbench_fill(GRPC_SLICE_START_PTR(s), r->size, (uint64_t)r->sent);
    r->csend = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = r->csend;
    r->sent++;
    if (r->sent == r->n) {
        ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        r->c_closed = true;
    }
    r->c_sending = true;
    start(r, r->ccall, ops, n, T_CLI_SEND);
}

/* The next server batch: the oldest unsent echo, the OK status once the client half-closed. */
static void srv_kick(rb_run *r)
{
    grpc_op ops[3];
    size_t n = 0;
    if (r->s_sending || r->s_status_sent || r->failed) {
        return;
    }
    memset(ops, 0, sizeof(ops));
    if (!r->s_md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    }
    if (r->len > 0) {
        r->ssend = r->ring[r->head];
        r->head = (r->head + 1) % r->cap;
        r->len--;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = r->ssend;
    }
    if (r->s_half && r->len == 0) {
        r->sdetails = grpc_empty_slice();
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
        ops[n++].data.send_status_from_server.status_details = &r->sdetails;
        r->s_status_sent = true;
    }
    if (n == 0) {
        return;
    }
    r->s_md_sent = true;
    r->s_sending = true;
    start(r, r->scall, ops, n, T_SRV_SEND);
}

/* ---------------------------------------------------------------- completions */

static void on_srv_recv(rb_run *r)
{
    if (r->srecv == NULL) {
        r->s_half = true;
    } else if (r->len == r->cap) {
        r->failed = true;
        r->why = "the server holds more echoes than the window allows";
        grpc_byte_buffer_destroy(r->srecv);
        r->srecv = NULL;
        grpc_call_cancel(r->scall, NULL);
        return;
    } else {
        r->ring[(r->head + r->len) % r->cap] = r->srecv;
        r->len++;
        r->srecv = NULL;
        post_recv(r, r->scall, &r->srecv, T_SRV_RECV);
    }
    srv_kick(r);
}

static void on_cli_recv(rb_run *r)
{
    grpc_byte_buffer_reader rd;
    grpc_slice all;
    if (r->crecv == NULL) {
        return; /* end of stream; the status follows */
    }
    if (!grpc_byte_buffer_reader_init(&rd, r->crecv)) {
        r->failed = true;
        r->why = "unreadable echo";
    } else {
        all = grpc_byte_buffer_reader_readall(&rd);
        grpc_byte_buffer_reader_destroy(&rd);
        if (!sd_rpc_rawbench_check(sd_bytes_make(GRPC_SLICE_START_PTR(all), GRPC_SLICE_LENGTH(all)),
                                   r->size, (uint64_t)r->answered)) {
            r->failed = true;
            r->why = "an echo differs from the message sent";
        }
        grpc_slice_unref(all);
    }
    grpc_byte_buffer_destroy(r->crecv);
    r->crecv = NULL;
    if (r->failed) {
        grpc_call_cancel(r->ccall, NULL);
        return;
    }
    r->answered++;
    post_recv(r, r->ccall, &r->crecv, T_CLI_RECV);
    cli_kick(r);
}

static void on_new_call(rb_run *r)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &r->scancelled;
    start(r, r->scall, &op, 1, T_SRV_CLOSE);
    post_recv(r, r->scall, &r->srecv, T_SRV_RECV);
}

static void dispatch(rb_run *r, enum rb_tag tag, bool ok)
{
    r->pending--;
    switch (tag) {
    case T_NEW:
        if (ok) {
            on_new_call(r);
        } else {
            r->failed = true;
            r->why = "the server got no call";
        }
        break;
    case T_SRV_CLOSE:
        r->s_closed = true;
        break;
    case T_SRV_RECV:
        if (ok) {
            on_srv_recv(r);
        }
        break;
    case T_SRV_SEND:
        r->s_sending = false;
        if (r->ssend != NULL) {
            grpc_byte_buffer_destroy(r->ssend);
            r->ssend = NULL;
        }
        if (ok) {
            srv_kick(r);
        }
        break;
    case T_CLI_SEND:
        r->c_sending = false;
        grpc_byte_buffer_destroy(r->csend);
        r->csend = NULL;
        if (ok) {
            cli_kick(r);
        }
        break;
    case T_CLI_RECV:
        if (ok) {
            on_cli_recv(r);
        }
        break;
    case T_CLI_STATUS:
        r->c_status = true;
        break;
    case T_CLI_MD:
    case T_SHUTDOWN:
        break;
    }
}

/* ---------------------------------------------------------------- one round */

static sd_status rb_setup(rb_run *r, sd_err *err)
{
    grpc_arg arg;
    grpc_channel_args args;
    grpc_server_credentials *screds;
    grpc_channel_credentials *ccreds;
    char target[64];
    void *method;
    int port;

    memset(&arg, 0, sizeof(arg));
    arg.type = GRPC_ARG_INTEGER;
    arg.key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg.value.integer = -1;
    args.num_args = 1;
    args.args = &arg;
    r->cq = grpc_completion_queue_create_for_next(NULL);
    r->srv = grpc_server_create(&args, NULL);
    grpc_server_register_completion_queue(r->srv, r->cq, NULL);
    method = grpc_server_register_method(r->srv, RB_PATH, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
    screds = grpc_insecure_server_credentials_create();
    port = grpc_server_add_http2_port(r->srv, "127.0.0.1:0", screds);
    grpc_server_credentials_release(screds);
    if (port == 0) {
        return sd_err_set(err, SD_EIO, "raw baseline: cannot listen on 127.0.0.1");
    }
    grpc_server_start(r->srv);
    grpc_metadata_array_init(&r->sreq_md);
    if (grpc_server_request_registered_call(r->srv, method, &r->scall, &r->sdeadline, &r->sreq_md,
                                            NULL, r->cq, r->cq,
                                            (void *)(uintptr_t)T_NEW) != GRPC_CALL_OK) {
        return sd_err_set(err, SD_EINTERNAL, "raw baseline: cannot request a call");
    }
    r->pending++;
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    ccreds = grpc_insecure_credentials_create();
    r->ch = grpc_channel_create(target, ccreds, &args);
    grpc_channel_credentials_release(ccreds);
    grpc_metadata_array_init(&r->cmd);
    grpc_metadata_array_init(&r->ctrail);
    r->cdetails = grpc_empty_slice();
    r->ring = sd_calloc((size_t)r->window, sizeof(*r->ring));
    r->cap = (size_t)r->window;
    return r->ring != NULL ? SD_OK : sd_err_set(err, SD_ENOMEM, "raw baseline: out of memory");
}

/* Open the client call: the status and headers posted at once, the first message, a receive. */
static void rb_open(rb_run *r)
{
    grpc_op op;
    void *handle = grpc_channel_register_call(r->ch, RB_PATH, NULL, NULL);
    r->ccall =
        grpc_channel_create_registered_call(r->ch, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq, handle,
                                            gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &r->ctrail;
    op.data.recv_status_on_client.status = &r->cstatus;
    op.data.recv_status_on_client.status_details = &r->cdetails;
    start(r, r->ccall, &op, 1, T_CLI_STATUS);
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_INITIAL_METADATA;
    op.data.recv_initial_metadata.recv_initial_metadata = &r->cmd;
    start(r, r->ccall, &op, 1, T_CLI_MD);
    cli_kick(r);
    post_recv(r, r->ccall, &r->crecv, T_CLI_RECV);
}

/* Drive the queue until both calls are over and nothing is pending. False on the deadline. */
static bool rb_drive(rb_run *r, int64_t until_ns)
{
    while (r->pending > 0) {
        gpr_timespec when =
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(1000, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(r->cq, when, NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            dispatch(r, (enum rb_tag)(uintptr_t)ev.tag, ev.success != 0);
        } else if (sd_mono_now_ns() > until_ns) {
            return false;
        }
    }
    return true;
}

static void rb_teardown(rb_run *r)
{
    grpc_event ev;
    if (r->ccall != NULL) {
        grpc_call_unref(r->ccall);
    }
    if (r->scall != NULL) {
        grpc_call_unref(r->scall);
    }
    if (r->ch != NULL) {
        grpc_channel_destroy(r->ch);
    }
    if (r->srv != NULL) {
        grpc_server_shutdown_and_notify(r->srv, r->cq, (void *)(uintptr_t)T_SHUTDOWN);
        grpc_server_cancel_all_calls(r->srv);
        do {
            ev = grpc_completion_queue_next(r->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (!(ev.type == GRPC_OP_COMPLETE && (uintptr_t)ev.tag == T_SHUTDOWN));
        grpc_server_destroy(r->srv);
    }
    if (r->cq != NULL) {
        grpc_completion_queue_shutdown(r->cq);
        do {
            ev = grpc_completion_queue_next(r->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (ev.type != GRPC_QUEUE_SHUTDOWN);
        grpc_completion_queue_destroy(r->cq);
    }
    for (size_t i = 0; i < r->len; i++) {
        grpc_byte_buffer_destroy(r->ring[(r->head + i) % r->cap]);
    }
    sd_free(r->ring);
    grpc_metadata_array_destroy(&r->sreq_md);
    grpc_metadata_array_destroy(&r->cmd);
    grpc_metadata_array_destroy(&r->ctrail);
    grpc_slice_unref(r->cdetails);
}

sd_status sd_rpc_rawbench_echo(sd_rpc_rawbench *rb,
                               long n,
                               size_t size,
                               long window,
                               int64_t *ns,
                               sd_err *err)
{
    rb_run r;
    sd_status st;
    int64_t t0;

    *ns = 0;
    if (rb == NULL || n <= 0 || size == 0 || window <= 0) {
        return sd_err_set(err, SD_EINVAL, "raw baseline: n, size and window must be positive");
    }
    memset(&r, 0, sizeof(r));
    r.n = n;
    r.size = size;
    r.window = window;
    st = rb_setup(&r, err);
    if (st == SD_OK) {
        t0 = sd_mono_now_ns();
        rb_open(&r);
        if (!rb_drive(&r, t0 + (int64_t)RB_TIMEOUT_MS * 1000000)) {
            st = sd_err_set(err, SD_ETIMEOUT, "raw baseline: the stream did not end in %d s",
                            RB_TIMEOUT_MS / 1000);
        }
        *ns = sd_mono_now_ns() - t0;
    }
    if (st == SD_OK && (r.failed || r.cstatus != GRPC_STATUS_OK || r.answered != n)) {
        st = sd_err_set(err, SD_EPROTO, "raw baseline: %s (status %d, %ld of %ld echoes)",
                        r.why != NULL ? r.why : "the stream failed", (int)r.cstatus, r.answered, n);
    }
    rb_teardown(&r);
    return st;
}

/* ---------------------------------------------------------------- lifetime */

sd_status sd_rpc_rawbench_create(sd_rpc_rawbench **out, sd_err *err)
{
    sd_rpc_rawbench *rb = sd_calloc(1, sizeof(*rb));
    *out = NULL;
    if (rb == NULL) {
        return sd_err_set(err, SD_ENOMEM, "raw baseline: out of memory");
    }
    /* The hub's resolver choice (rpc_hub.c), made before the first grpc_init: gRPC reads the
     * variable at more than one point, and a change in between registers "dns" twice. */
    (void)setenv("GRPC_DNS_RESOLVER", "native", 0);
    grpc_init();
    rb->initialised = 1;
    *out = rb;
    return SD_OK;
}

void sd_rpc_rawbench_destroy(sd_rpc_rawbench *rb)
{
    if (rb == NULL) {
        return;
    }
    grpc_shutdown();
    sd_free(rb);
}
