/*
 * Sundial: Fn API server side.
 *
 * What this module does
 * ---------------------
 * It owns the gRPC streams an SDK harness opens to the runner and nothing about bundles: the
 * executor decides what to send and interprets what comes back. Each SDK harness is an
 * sd_fnapi_worker, identified by the `worker_id` metadata every Beam harness attaches to its calls.
 *
 *     SDK harness                         sd_fnapi_worker                      executor
 *     Control (bidi)  <- InstructionRequest <- sd_fnapi_worker_instruct()  <-  bundles, splits
 *                     -> InstructionResponse -> pending[id].cb        ->
 *     Data (bidi)     <- Elements           <- sd_fnapi_worker_send_elements()
 *                     -> Elements           -> hooks.on_elements      ->  engine outputs
 *     State (bidi)    -> StateRequest       -> hooks.on_state         ->  engine state
 *                     <- StateResponse      <- sd_fnapi_worker_state_reply()
 *     Logging         -> LogEntry.List      -> hooks.on_log           ->  job messages
 *     GetProcessBundleDescriptor, GetProvisionInfo (unary): served from what the executor stored.
 *
 * Invariants
 * ----------
 * - Every pending instruction callback runs exactly once: with the response, or with an error
 *   when the worker is lost or stopped.
 * - A stream's sd_rpc_call user data points at its worker only while the worker is alive; the
 *   worker clears it when it is destroyed, so late callbacks on a closing call find NULL.
 * - A call is served only for the worker its `worker_id` metadata names, and a worker has at
 *   most one stream of each kind: a second opener is refused, never swapped in. Worker and
 *   descriptor ids carry 128 random bits (the executor makes them), so knowing one is the
 *   capability; GetProcessBundleDescriptor without metadata (the TypeScript SDK) is served by
 *   the descriptor id alone, which is unique for the server's life.
 * - A worker whose Data stream ends before it is stopped is lost: it could finish no bundle.
 * - The runner never cancels a worker's streams: it ends them with an OK status. The
 *   TypeScript SDK's process dies on a cancelled control stream (research note §0.4).
 *
 * Trade-off: instructions and data for a worker whose streams are not yet open are queued
 * without a bound; the executor bounds what it sends (a few bundles per worker).
 */
#include "runner/fnapi/fnapi.h"

#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "runner/base/vec.h"
#include "runner/fnapi/fnapi_int.h"

/* The stream kinds (sd__fn_stream, fnapi_int.h) under short local names. */
typedef sd__fn_stream stream_kind;
#define S_CONTROL SD__FN_CONTROL
#define S_DATA    SD__FN_DATA
#define S_STATE   SD__FN_STATE
#define S_LOGGING SD__FN_LOGGING

typedef struct pending_instr {
    sd_fnapi_instruction_cb cb;
    void *ctx;
} pending_instr;

typedef struct stream_ref {
    sd_fnapi_worker *worker; /* NULL once the worker is gone */
    stream_kind kind;
} stream_ref;

/* Workers whose job ended, remembered so that a stream they open late (a worker that opens
 * its State stream lazily, after its last bundle's input came in the request) is turned away
 * quietly rather than reported as a stranger. */
#define RETIRED_WORKERS 32

struct sd_fnapi {
    sd_rpc *rpc;
    sd_map workers; /* worker id -> sd_fnapi_worker* (borrowed: the executor owns workers) */
    char *retired[RETIRED_WORKERS]; /* a ring of ids */
    size_t retired_next;
};

static void retire(sd_fnapi *fn, const char *id)
{
    char *copy = sd_strdup(id);
    if (copy != NULL) {
        sd_free(fn->retired[fn->retired_next]);
        fn->retired[fn->retired_next] = copy;
        fn->retired_next = (fn->retired_next + 1) % RETIRED_WORKERS;
    }
}

static bool retired(const sd_fnapi *fn, const char *id)
{
    for (size_t i = 0; id != NULL && i < RETIRED_WORKERS; i++) {
        if (fn->retired[i] != NULL && strcmp(fn->retired[i], id) == 0) {
            return true;
        }
    }
    return false;
}

struct sd_fnapi_worker {
    sd_fnapi *fn;
    char *id;
    sd_fnapi_worker_hooks hooks;
    sd_buf provision;   /* packed ProvisionInfo */
    sd_map descriptors; /* id -> sd_buf* packed ProcessBundleDescriptor */
    bool push;     /* send descriptors in RegisterRequests (sd_fnapi_worker_push_descriptors) */
    sd_map pushed; /* descriptor id -> (void *)1: sent in a RegisterRequest */
    sd_rpc_call *calls[4];
    stream_ref *refs[4];
    sd_vec queued[2];    /* S_CONTROL and S_DATA: sd_buf of packed messages not yet sent */
    sd_map pending;      /* instruction id -> pending_instr* */
    size_t largest_data; /* the largest message sent on the Data stream */
    bool stopped;
    bool lost;
    /* Re-entrancy guard: hooks and instruction callbacks may destroy the worker. While depth
     * > 0 the final free is deferred (destroy_requested) until the outermost frame returns. */
    int depth;
    bool destroy_requested;
};

static const char *kind_name[] = { "Control", "Data", "State", "Logging" };

sd_status sd_fnapi_pb_pack(const ProtobufCMessage *msg, sd_buf *out)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    sd_status st;
    sd_buf_reset(out);
    st = sd_buf_reserve(out, n);
    if (st != SD_OK) {
        return st;
    }
    protobuf_c_message_pack(msg, out->data);
    out->len = n;
    return SD_OK;
}

static void buf_destroy(void *p)
{
    sd_buf *b = p;
    if (b != NULL) {
        sd_buf_deinit(b);
        sd_free(b);
    }
}

/* ---------------------------------------------------------------- workers */

sd_status sd_fnapi_worker_create(sd_fnapi *fn,
                                 const char *worker_id,
                                 const sd_fnapi_worker_hooks *hooks,
                                 sd_bytes provision_info,
                                 sd_fnapi_worker **out,
                                 sd_err *err)
{
    sd_fnapi_worker *w;
    if (sd_map_get_str(&fn->workers, worker_id) != NULL) {
        return sd_err_set(err, SD_EEXIST, "worker %s: already registered", worker_id);
    }
    w = sd_calloc(1, sizeof(*w));
    if (w == NULL) {
        return sd_err_set(err, SD_ENOMEM, "worker %s: out of memory", worker_id);
    }
    w->fn = fn;
    w->hooks = *hooks;
    sd_buf_init(&w->provision, 0);
    sd_map_init(&w->descriptors, buf_destroy);
    sd_map_init(&w->pushed, NULL);
    sd_map_init(&w->pending, sd_free);
    sd_vec_init(&w->queued[0], sizeof(sd_buf));
    sd_vec_init(&w->queued[1], sizeof(sd_buf));
    w->id = sd_strdup(worker_id);
    if (w->id == NULL || sd_buf_append_bytes(&w->provision, provision_info) != SD_OK ||
        sd_map_put_str(&fn->workers, worker_id, w) != SD_OK) {
        sd_free(w->id);
        sd_buf_deinit(&w->provision);
        sd_free(w);
        return sd_err_set(err, SD_ENOMEM, "worker %s: out of memory", worker_id);
    }
    *out = w;
    return SD_OK;
}

const char *sd_fnapi_worker_id(const sd_fnapi_worker *w)
{
    return w->id;
}

bool sd_fnapi_worker_is_connected(const sd_fnapi_worker *w)
{
    return w->calls[S_CONTROL] != NULL;
}

sd_status sd_fnapi_worker_add_descriptor(sd_fnapi_worker *w, const char *id, sd_bytes packed)
{
    sd_buf *b = sd_malloc(sizeof(*b));
    if (b == NULL) {
        return SD_ENOMEM;
    }
    sd_buf_init(b, 0);
    if (sd_buf_append_bytes(b, packed) != SD_OK ||
        sd_map_put_str(&w->descriptors, id, b) != SD_OK) {
        buf_destroy(b);
        return SD_ENOMEM;
    }
    return SD_OK;
}

/* Send packed bytes on the stream of `kind`, or queue them until it opens. */
static sd_status send_or_queue(sd_fnapi_worker *w, stream_kind kind, const sd_buf *packed)
{
    if (w->calls[kind] != NULL) {
        return sd_rpc_call_send(w->calls[kind], sd_buf_bytes(packed));
    }
    sd_buf copy;
    sd_buf_init(&copy, 0);
    if (sd_buf_append_bytes(&copy, sd_buf_bytes(packed)) != SD_OK) {
        sd_buf_deinit(&copy);
        return SD_ENOMEM;
    }
    sd_status st = sd_vec_push(&w->queued[kind], &copy);
    if (st != SD_OK) {
        sd_buf_deinit(&copy);
    }
    return st;
}

static void flush_queue(sd_fnapi_worker *w, stream_kind kind)
{
    sd_vec *q = &w->queued[kind];
    for (size_t i = 0; i < q->len; i++) {
        sd_buf *b = SD_VEC_AT(q, sd_buf, i);
        if (w->calls[kind] != NULL && sd_rpc_call_send(w->calls[kind], sd_buf_bytes(b)) != SD_OK) {
            SD_WARN("fnapi", "worker %s: could not send a queued %s message", w->id,
                    kind_name[kind]);
        }
        sd_buf_deinit(b);
    }
    sd_vec_reset(q);
}

void sd_fnapi_worker_push_descriptors(sd_fnapi_worker *w, bool on)
{
    w->push = on;
}

static void registered(void *ctx, const pb_InstructionResponse *resp, const char *error)
{
    sd_fnapi_worker *w = ctx;
    if (resp != NULL && error != NULL) {
        /* The bundle that needs the descriptor fetches it or fails with its own error; a lost
         * worker is reported by the executor. */
        SD_WARN("fnapi", "worker %s: RegisterRequest failed: %s", w->id, error);
    }
}

/* InstructionRequest{1: iid, 1000: RegisterRequest{1: desc followed by its field 1 (id) = id}}
 * into out. 0x0a is field 1, length-delimited; (1000 << 3) | 2 the same for field 1000. */
static sd_status pack_register(sd_buf *out, const char *iid, const char *id, sd_bytes desc)
{
    size_t id_len = strlen(id);
    size_t desc_len = desc.len + 1 + sd_varint_size(id_len) + id_len;
    size_t reg_len = 1 + sd_varint_size(desc_len) + desc_len;
    sd_status st = sd_buf_append_byte(out, 0x0a);
    st = st == SD_OK ? sd_buf_put_lp(out, sd_bytes_str(iid)) : st;
    st = st == SD_OK ? sd_buf_put_varint(out, (1000u << 3) | 2u) : st;
    st = st == SD_OK ? sd_buf_put_varint(out, reg_len) : st;
    st = st == SD_OK ? sd_buf_append_byte(out, 0x0a) : st;
    st = st == SD_OK ? sd_buf_put_varint(out, desc_len) : st;
    st = st == SD_OK ? sd_buf_append_bytes(out, desc) : st;
    st = st == SD_OK ? sd_buf_append_byte(out, 0x0a) : st;
    return st == SD_OK ? sd_buf_put_lp(out, sd_bytes_str(id)) : st;
}

/*
 * Before a process_bundle instruction: send the descriptor it names in a RegisterRequest when
 * the worker takes pushes and has not had it. The message is written straight from the packed
 * descriptor: InstructionRequest{1: instruction_id, 1000: RegisterRequest{1: descriptor}}, the
 * descriptor followed by its id field again, set to the id the bundle names (a field that
 * occurs twice takes its last value), as GetProcessBundleDescriptor serves it under that id.
 */
static sd_status push_descriptor(sd_fnapi_worker *w, const pb_InstructionRequest *req)
{
    const char *id =
        req->request_case ==
                    ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE &&
                req->process_bundle != NULL
            ? req->process_bundle->process_bundle_descriptor_id
            : NULL;
    if (!w->push || id == NULL || sd_map_get_str(&w->pushed, id) != NULL) {
        return SD_OK;
    }
    const sd_buf *desc = sd_map_get_str(&w->descriptors, id);
    if (desc == NULL) {
        return SD_OK; /* the harness's fetch reports the unknown id */
    }
    char *iid = sd_asprintf("register:%s", id);
    if (iid == NULL) {
        return SD_ENOMEM;
    }
    sd_buf packed;
    sd_buf_init(&packed, 0);
    pending_instr *p = sd_malloc(sizeof(*p));
    sd_status st = p == NULL ? SD_ENOMEM : pack_register(&packed, iid, id, sd_buf_bytes(desc));
    if (st == SD_OK) {
        p->cb = registered;
        p->ctx = w;
        st = sd_map_put_str(&w->pending, iid, p);
    }
    if (st == SD_OK) {
        p = NULL; /* the map has it */
        st = send_or_queue(w, S_CONTROL, &packed);
        if (st != SD_OK) {
            sd_free(sd_map_take(&w->pending, sd_bytes_str(iid)));
        }
    }
    if (st == SD_OK) {
        st = sd_map_put_str(&w->pushed, id, (void *)1);
    }
    sd_free(p);
    sd_free(iid);
    sd_buf_deinit(&packed);
    return st;
}

sd_status sd_fnapi_worker_instruct(sd_fnapi_worker *w,
                                   const pb_InstructionRequest *req,
                                   sd_fnapi_instruction_cb cb,
                                   void *ctx)
{
    sd_buf packed;
    pending_instr *p;
    sd_status st;

    if (w->stopped || w->lost) {
        return SD_ESTATE;
    }
    st = push_descriptor(w, req);
    if (st != SD_OK) {
        return st;
    }
    p = sd_malloc(sizeof(*p));
    if (p == NULL) {
        return SD_ENOMEM;
    }
    p->cb = cb;
    p->ctx = ctx;
    st = sd_map_put_str(&w->pending, req->instruction_id, p);
    if (st != SD_OK) {
        sd_free(p);
        return st;
    }
    sd_buf_init(&packed, 0);
    st = sd_fnapi_pb_pack(&req->base, &packed);
    if (st == SD_OK) {
        st = send_or_queue(w, S_CONTROL, &packed);
    }
    sd_buf_deinit(&packed);
    if (st != SD_OK) {
        sd_map_remove(&w->pending, sd_bytes_str(req->instruction_id));
    }
    return st;
}

sd_status sd_fnapi_worker_send_elements(sd_fnapi_worker *w, const pb_Elements *msg)
{
    sd_buf packed;
    sd_status st;
    if (w->stopped || w->lost) {
        return SD_ESTATE;
    }
    sd_buf_init(&packed, 0);
    st = sd_fnapi_pb_pack(&msg->base, &packed);
    if (st == SD_OK) {
        w->largest_data = SD_MAX(w->largest_data, packed.len);
        st = send_or_queue(w, S_DATA, &packed);
    }
    sd_buf_deinit(&packed);
    return st;
}

sd_status sd_fnapi_worker_state_reply(sd_fnapi_worker *w, const pb_StateResponse *resp)
{
    sd_buf packed;
    sd_status st;
    if (w->calls[S_STATE] == NULL) {
        return SD_ESTATE;
    }
    sd_buf_init(&packed, 0);
    st = sd_fnapi_pb_pack(&resp->base, &packed);
    if (st == SD_OK) {
        st = sd_rpc_call_send(w->calls[S_STATE], sd_buf_bytes(&packed));
    }
    sd_buf_deinit(&packed);
    return st;
}

/*
 * Fail every pending instruction with `why`. Callbacks may call back into the worker (even
 * destroy it: the caller holds a depth reference, so the memory stays valid), so entries are
 * taken out of the map one at a time and the map is re-read after every callback.
 */
static void fail_pending(sd_fnapi_worker *w, const char *why)
{
    for (;;) {
        size_t it = 0;
        sd_bytes key;
        void *v;
        if (!sd_map_next(&w->pending, &it, &key, &v)) {
            return;
        }
        pending_instr *p = sd_map_take(&w->pending, key);
        if (p == NULL) {
            return;
        }
        p->cb(p->ctx, NULL, why);
        sd_free(p);
    }
}

static void detach_calls(sd_fnapi_worker *w, bool finish)
{
    for (int k = 0; k < 4; k++) {
        if (w->refs[k] != NULL) {
            w->refs[k]->worker = NULL;
        }
        if (w->calls[k] != NULL && finish) {
            sd_rpc_call_finish(w->calls[k], SD_RPC_OK, NULL);
        }
        w->calls[k] = NULL;
        w->refs[k] = NULL;
    }
}

void sd_fnapi_worker_stop(sd_fnapi_worker *w)
{
    if (w == NULL || w->stopped) {
        return;
    }
    w->stopped = true;
    w->depth++;
    fail_pending(w, "the worker was stopped");
    w->depth--;
    detach_calls(w, true);
}

static void worker_destroy(sd_fnapi_worker *w)
{
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < w->queued[k].len; i++) {
            sd_buf_deinit(SD_VEC_AT(&w->queued[k], sd_buf, i));
        }
        sd_vec_deinit(&w->queued[k]);
    }
    sd_map_deinit(&w->pending);
    sd_map_deinit(&w->descriptors);
    sd_map_deinit(&w->pushed);
    sd_buf_deinit(&w->provision);
    sd_free(w->id);
    sd_free(w);
}

void sd_fnapi_worker_destroy(sd_fnapi_worker *w)
{
    if (w == NULL || w->destroy_requested) {
        return;
    }
    sd_fnapi_worker_stop(w);
    sd_map_remove(&w->fn->workers, sd_bytes_str(w->id));
    retire(w->fn, w->id);
    w->destroy_requested = true;
    if (w->depth == 0) {
        worker_destroy(w);
    }
}

/* Drop a depth reference; free the worker if it was destroyed meanwhile. Returns true when
 * the worker is gone and must not be touched. */
static bool worker_release(sd_fnapi_worker *w)
{
    w->depth--;
    if (w->depth == 0 && w->destroy_requested) {
        worker_destroy(w);
        return true;
    }
    return w->destroy_requested;
}

/* The worker is gone unexpectedly: fail instructions, tell the executor once. */
static void worker_lost(sd_fnapi_worker *w, const char *why)
{
    if (w->stopped || w->lost) {
        return;
    }
    w->lost = true;
    SD_INFO("fnapi", "worker %s lost: %s", w->id, why);
    w->depth++;
    fail_pending(w, why);
    /* A callback may have destroyed the worker (and freed the hook's context with it). */
    if (!w->destroy_requested && w->hooks.on_lost != NULL) {
        w->hooks.on_lost(w, why, w->hooks.ctx);
    }
    worker_release(w);
}

/* ---------------------------------------------------------------- stream handlers */

/*
 * The worker a call belongs to: the one its `worker_id` metadata names. A call without the
 * metadata belongs to no worker (every Beam SDK sends it on its streams and on
 * GetProvisionInfo; the ids are unguessable, see sd_fnapi_worker_create's caller).
 */
static sd_fnapi_worker *worker_for_call(sd_fnapi *fn, sd_rpc_call *call)
{
    const char *id = sd_rpc_call_metadata(call, "worker_id");
    return id == NULL ? NULL : sd_map_get_str(&fn->workers, id);
}

static void stream_open(sd_fnapi *fn, sd_rpc_call *call, stream_kind kind)
{
    sd_fnapi_worker *w = worker_for_call(fn, call);
    stream_ref *ref;
    if (w == NULL || w->stopped) {
        const char *id = sd_rpc_call_metadata(call, "worker_id");
        char msg[256];
        if (w != NULL || retired(fn, id)) {
            snprintf(msg, sizeof(msg), "worker %s has been stopped: its %s stream is refused", id,
                     kind_name[kind]);
            SD_DEBUG("fnapi", "%s", msg);
            sd_rpc_call_finish(call, SD_RPC_NOT_FOUND, msg);
            return;
        }
        snprintf(msg, sizeof(msg), "unknown worker_id \"%s\" on %s stream: no job expects it",
                 id == NULL ? "(none)" : id, kind_name[kind]);
        SD_WARN("fnapi", "%s", msg);
        sd_rpc_call_finish(call, SD_RPC_NOT_FOUND, msg);
        return;
    }
    if (w->calls[kind] != NULL) {
        /* Never swap a live worker's stream for a newcomer's: whoever opened the first one is
         * the worker; a second opener is a confused or hostile client. */
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "worker %s already has an open %s stream; a second one is "
                 "refused",
                 w->id, kind_name[kind]);
        SD_WARN("fnapi", "%s", msg);
        sd_rpc_call_finish(call, SD_RPC_ALREADY_EXISTS, msg);
        return;
    }
    ref = sd_malloc(sizeof(*ref));
    if (ref == NULL) {
        sd_rpc_call_finish(call, SD_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    ref->worker = w;
    ref->kind = kind;
    w->refs[kind] = ref;
    w->calls[kind] = call;
    sd_rpc_call_set_data(call, ref);
    SD_DEBUG("fnapi", "worker %s opened %s stream", w->id, kind_name[kind]);
    if (kind == S_CONTROL || kind == S_DATA) {
        flush_queue(w, kind);
    }
    if (kind == S_CONTROL && w->hooks.on_connected != NULL) {
        w->depth++;
        w->hooks.on_connected(w, w->hooks.ctx);
        worker_release(w);
    }
}

/*
 * The SDK ended its Data stream while the worker was still wanted. The usual cause, when the
 * stream was cancelled, is a message larger than the SDK's gRPC receive limit: gRPC clients
 * that keep the default (4 MiB; the TypeScript SDK's grpc-js does) cancel the stream on one,
 * and nothing larger than the limit can reach such a worker. Say so when it applies.
 */
#define SD_GRPC_DEFAULT_RECEIVE_LIMIT (4u * 1024 * 1024)

static void data_stream_lost(sd_fnapi_worker *w, bool cancelled)
{
    char why[512];
    if (cancelled && w->largest_data > SD_GRPC_DEFAULT_RECEIVE_LIMIT) {
        snprintf(why, sizeof(why),
                 "the SDK cancelled its Data stream after the runner sent it a message of %zu "
                 "bytes; SDKs whose gRPC client keeps the default 4 MiB receive limit (the "
                 "TypeScript SDK) refuse larger messages, so an element (or a grouped value) "
                 "over about 4 MiB cannot reach this worker",
                 w->largest_data);
    } else {
        snprintf(why, sizeof(why), "the SDK %s its Data stream while the worker was in use",
                 cancelled ? "cancelled" : "closed");
    }
    worker_lost(w, why);
}

static void stream_close(sd_rpc_call *call, bool cancelled, void *ctx)
{
    stream_ref *ref = sd_rpc_call_data(call);
    (void)ctx;
    if (ref == NULL) {
        return;
    }
    sd_fnapi_worker *w = ref->worker;
    if (w != NULL && w->calls[ref->kind] == call) {
        w->calls[ref->kind] = NULL;
        w->refs[ref->kind] = NULL;
        if (ref->kind == S_CONTROL) {
            sd_free(ref);
            worker_lost(w, cancelled ? "the SDK's control stream was cancelled (worker died?)"
                                     : "the SDK closed its control stream");
            return;
        }
        if (ref->kind == S_DATA) {
            /* A worker without its Data stream can finish no bundle: fail now, not hang. */
            sd_free(ref);
            data_stream_lost(w, cancelled);
            return;
        }
    }
    sd_free(ref);
}

static void on_open_control(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    (void)req;
    stream_open(ctx, call, S_CONTROL);
}

static void on_open_data(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    (void)req;
    stream_open(ctx, call, S_DATA);
}

static void on_open_state(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    (void)req;
    stream_open(ctx, call, S_STATE);
}

static void on_open_logging(sd_rpc_call *call, sd_bytes req, void *ctx)
{
    (void)req;
    stream_open(ctx, call, S_LOGGING);
}

static sd_fnapi_worker *ref_worker(sd_rpc_call *call)
{
    stream_ref *ref = sd_rpc_call_data(call);
    return ref == NULL ? NULL : ref->worker;
}

/* A stream sent bytes that do not parse: end that stream (when there is one: the fuzz targets
 * deliver without a call) and lose the worker. */
static void malformed(sd_fnapi_worker *w, sd_rpc_call *call, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "worker %s sent a malformed %s message", w->id, what);
    SD_WARN("fnapi", "%s", msg);
    if (call != NULL) {
        sd_rpc_call_finish(call, SD_RPC_INVALID_ARGUMENT, msg);
    }
    worker_lost(w, msg);
}

static void deliver_control(sd_fnapi_worker *w, sd_rpc_call *call, sd_bytes msg)
{
    pb_InstructionResponse *resp;
    pending_instr *p;
    resp = (pb_InstructionResponse *)protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__instruction_response__descriptor, NULL,
        msg.len, msg.ptr);
    if (resp == NULL) {
        malformed(w, call, "InstructionResponse");
        return;
    }
    p = sd_map_take(&w->pending, sd_bytes_str(resp->instruction_id));
    if (p == NULL) {
        SD_WARN("fnapi", "worker %s answered unknown instruction \"%s\"", w->id,
                resp->instruction_id);
    } else {
        w->depth++;
        p->cb(p->ctx, resp, resp->error != NULL && resp->error[0] != '\0' ? resp->error : NULL);
        sd_free(p);
        worker_release(w);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static void deliver_data(sd_fnapi_worker *w, sd_rpc_call *call, sd_bytes msg)
{
    pb_Elements *el = (pb_Elements *)protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__elements__descriptor, NULL, msg.len, msg.ptr);
    if (el == NULL) {
        malformed(w, call, "Elements");
        return;
    }
    if (w->hooks.on_elements != NULL) {
        w->depth++;
        w->hooks.on_elements(w, el, w->hooks.ctx);
        worker_release(w);
    }
    protobuf_c_message_free_unpacked(&el->base, NULL);
}

static void deliver_state(sd_fnapi_worker *w, sd_rpc_call *call, sd_bytes msg)
{
    pb_StateRequest *req = (pb_StateRequest *)protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__state_request__descriptor, NULL, msg.len,
        msg.ptr);
    if (req == NULL) {
        malformed(w, call, "StateRequest");
        return;
    }
    if (w->hooks.on_state != NULL) {
        w->depth++;
        w->hooks.on_state(w, req, w->hooks.ctx);
        worker_release(w);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void deliver_logging(sd_fnapi_worker *w, sd_bytes msg)
{
    pb_LogEntry_List *list = (pb_LogEntry_List *)protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__log_entry__list__descriptor, NULL, msg.len,
        msg.ptr);
    if (list == NULL) {
        SD_WARN("fnapi", "worker %s sent a malformed LogEntry.List; ignored", w->id);
        return;
    }
    w->depth++;
    for (size_t i = 0; i < list->n_log_entries && w->hooks.on_log != NULL && !w->destroy_requested;
         i++) {
        w->hooks.on_log(w, list->log_entries[i], w->hooks.ctx);
    }
    worker_release(w);
    protobuf_c_message_free_unpacked(&list->base, NULL);
}

/* Decode and dispatch one message from the worker (call may be NULL: see fnapi_int.h). */
static void deliver(sd_fnapi_worker *w, sd_rpc_call *call, sd__fn_stream kind, sd_bytes msg)
{
    switch (kind) {
    case SD__FN_CONTROL:
        deliver_control(w, call, msg);
        break;
    case SD__FN_DATA:
        deliver_data(w, call, msg);
        break;
    case SD__FN_STATE:
        deliver_state(w, call, msg);
        break;
    case SD__FN_LOGGING:
        deliver_logging(w, msg);
        break;
    }
}

void sd__fnapi_worker_deliver(sd_fnapi_worker *w, sd__fn_stream kind, sd_bytes msg)
{
    if (w == NULL || w->stopped || w->lost || w->destroy_requested) {
        return;
    }
    deliver(w, NULL, kind, msg);
}

sd_fnapi_worker *sd__fnapi_worker_get(sd_fnapi *fn, const char *worker_id)
{
    return sd_map_get_str(&fn->workers, worker_id);
}

static void on_control_message(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    sd_fnapi_worker *w = ref_worker(call);
    (void)ctx;
    if (w != NULL) {
        deliver(w, call, SD__FN_CONTROL, msg);
    }
}

static void on_control_half_close(sd_rpc_call *call, void *ctx)
{
    sd_fnapi_worker *w = ref_worker(call);
    (void)ctx;
    sd_rpc_call_finish(call, SD_RPC_OK, NULL);
    if (w != NULL) {
        worker_lost(w, "the SDK half-closed its control stream");
    }
}

static void on_data_message(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    sd_fnapi_worker *w = ref_worker(call);
    (void)ctx;
    if (w != NULL) {
        deliver(w, call, SD__FN_DATA, msg);
    }
}

static void on_state_message(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    sd_fnapi_worker *w = ref_worker(call);
    (void)ctx;
    if (w != NULL) {
        deliver(w, call, SD__FN_STATE, msg);
    }
}

static void on_logging_message(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    sd_fnapi_worker *w = ref_worker(call);
    (void)ctx;
    if (w != NULL) {
        deliver(w, call, SD__FN_LOGGING, msg);
    }
}

static void on_stream_half_close(sd_rpc_call *call, void *ctx)
{
    (void)ctx;
    sd_rpc_call_finish(call, SD_RPC_OK, NULL);
}

static void on_get_descriptor(sd_rpc_call *call, sd_bytes request, void *ctx)
{
    sd_fnapi *fn = ctx;
    pb_GetProcessBundleDescriptorRequest *req;
    sd_buf *d = NULL;
    char msg[256];

    req = (pb_GetProcessBundleDescriptorRequest *)protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__get_process_bundle_descriptor_request__descriptor,
        NULL, request.len, request.ptr);
    if (req == NULL) {
        sd_rpc_call_finish(call, SD_RPC_INVALID_ARGUMENT,
                           "malformed GetProcessBundleDescriptorRequest");
        return;
    }
    /*
     * With worker_id metadata only that worker's descriptors are served. Without it (the
     * TypeScript SDK sends none on this call) the id alone decides: descriptor ids are unique
     * for the server's life and carry 128 random bits, so the one worker holding it is the one
     * the caller was told about, never another job's.
     */
    const char *wid = sd_rpc_call_metadata(call, "worker_id");
    const char *pbd_id = req->process_bundle_descriptor_id;
    sd_fnapi_worker *owner = NULL;
    size_t it = 0;
    void *v;
    while (owner == NULL && sd_map_next(&fn->workers, &it, NULL, &v)) {
        if (sd_map_get_str(&((sd_fnapi_worker *)v)->descriptors, pbd_id) != NULL) {
            owner = v;
        }
    }
    sd_fnapi_worker *w = wid != NULL ? sd_map_get_str(&fn->workers, wid) : NULL;
    if (w != NULL) {
        d = sd_map_get_str(&w->descriptors, pbd_id);
    } else if (wid == NULL && owner != NULL) {
        d = sd_map_get_str(&owner->descriptors, pbd_id);
    }
    if (d != NULL) {
        SD_DEBUG("fnapi", "descriptor %s served (%zu bytes)", pbd_id, d->len);
        sd_rpc_call_reply(call, sd_buf_bytes(d));
    } else if (wid != NULL && w == NULL) {
        snprintf(msg, sizeof(msg), "GetProcessBundleDescriptor: unknown worker_id \"%s\"", wid);
        sd_rpc_call_finish(call, SD_RPC_NOT_FOUND, msg);
    } else if (owner != NULL) {
        snprintf(msg, sizeof(msg),
                 "process bundle descriptor \"%s\" belongs to another "
                 "worker than %s",
                 pbd_id, wid);
        sd_rpc_call_finish(call, SD_RPC_PERMISSION_DENIED, msg);
    } else {
        snprintf(msg, sizeof(msg), "unknown process bundle descriptor \"%s\"", pbd_id);
        sd_rpc_call_finish(call, SD_RPC_NOT_FOUND, msg);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void on_get_provision(sd_rpc_call *call, sd_bytes request, void *ctx)
{
    sd_fnapi *fn = ctx;
    sd_fnapi_worker *w = worker_for_call(fn, call);
    sd_buf out;
    /* The request has no fields, but bytes that do not parse are still a client bug. */
    ProtobufCMessage *req = protobuf_c_message_unpack(
        &org__apache__beam__model__fn_execution__v1__get_provision_info_request__descriptor, NULL,
        request.len, request.ptr);
    if (req == NULL) {
        sd_rpc_call_finish(call, SD_RPC_INVALID_ARGUMENT, "malformed GetProvisionInfoRequest");
        return;
    }
    protobuf_c_message_free_unpacked(req, NULL);
    if (w == NULL) {
        const char *id = sd_rpc_call_metadata(call, "worker_id");
        char msg[256];
        snprintf(msg, sizeof(msg), "GetProvisionInfo: unknown worker_id \"%s\": no job expects it",
                 id == NULL ? "(none)" : id);
        sd_rpc_call_finish(call, SD_RPC_NOT_FOUND, msg);
        return;
    }
    /* GetProvisionInfoResponse { ProvisionInfo info = 1; }: tag 0x0a, length, bytes. */
    sd_buf_init(&out, 0);
    if (sd_buf_append_byte(&out, 0x0a) != SD_OK ||
        sd_buf_put_varint(&out, w->provision.len) != SD_OK ||
        sd_buf_append_bytes(&out, sd_buf_bytes(&w->provision)) != SD_OK) {
        sd_rpc_call_finish(call, SD_RPC_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        sd_rpc_call_reply(call, sd_buf_bytes(&out));
    }
    sd_buf_deinit(&out);
}

/* ---------------------------------------------------------------- registration */

sd_status sd_fnapi_create(sd_rpc *rpc, sd_fnapi **out, sd_err *err)
{
    sd_fnapi *fn = sd_calloc(1, sizeof(*fn));
    if (fn == NULL) {
        return sd_err_set(err, SD_ENOMEM, "fnapi: out of memory");
    }
    fn->rpc = rpc;
    sd_map_init(&fn->workers, NULL);
    *out = fn;
    return SD_OK;
}

sd_status sd_fnapi_register(sd_fnapi *fn, sd_rpc_server *srv, sd_err *err)
{
    const struct {
        const char *path;
        sd_rpc_kind kind;
        sd_rpc_handler h;
    } methods[] = {
        { SD_PATH_CONTROL,
          SD_RPC_KIND_BIDI,
          { on_open_control, on_control_message, on_control_half_close, stream_close, fn } },
        { SD_PATH_DATA,
          SD_RPC_KIND_BIDI,
          { on_open_data, on_data_message, on_stream_half_close, stream_close, fn } },
        { SD_PATH_STATE,
          SD_RPC_KIND_BIDI,
          { on_open_state, on_state_message, on_stream_half_close, stream_close, fn } },
        { SD_PATH_LOGGING,
          SD_RPC_KIND_BIDI,
          { on_open_logging, on_logging_message, on_stream_half_close, stream_close, fn } },
        { SD_PATH_GET_PBD, SD_RPC_KIND_UNARY, { on_get_descriptor, NULL, NULL, NULL, fn } },
        { SD_PATH_PROVISION, SD_RPC_KIND_UNARY, { on_get_provision, NULL, NULL, NULL, fn } },
    };

    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        sd_status st =
            sd_rpc_server_add_method(srv, methods[i].path, methods[i].kind, &methods[i].h);
        if (st != SD_OK) {
            return sd_err_set(err, st, "fnapi: cannot register %s", methods[i].path);
        }
    }
    return SD_OK;
}

void sd_fnapi_destroy(sd_fnapi *fn)
{
    if (fn == NULL) {
        return;
    }
    if (sd_map_len(&fn->workers) != 0) {
        SD_WARN("fnapi", "destroyed with %zu workers still registered", sd_map_len(&fn->workers));
    }
    sd_map_deinit(&fn->workers);
    for (size_t i = 0; i < RETIRED_WORKERS; i++) {
        sd_free(fn->retired[i]);
    }
    sd_free(fn);
}
