/* Sundial: the runner side of Beam's Fn API (control, data, state, logging, provision). */
#ifndef SD_RUNNER_FNAPI_FNAPI_H
#define SD_RUNNER_FNAPI_FNAPI_H

#include <stdbool.h>

#include "proto/pb.h"
#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/transport/rpc.h"

/*
 * One sd_fnapi serves the Fn API methods on a server shared with the job service. SDK
 * harnesses connect with gRPC metadata `worker_id`; each known worker id maps to an sd_fnapi_worker
 * that the executor created before starting the SDK process (or calling StartWorker). Streams
 * for unknown worker ids are refused with NOT_FOUND naming the id.
 *
 * The executor talks to a worker through sd_fnapi_worker_* calls and hears back through hooks; all
 * of it runs on the loop thread. Instructions and data sent before the SDK has opened its streams
 * are queued and flushed when the stream opens (the TypeScript SDK opens its Data stream only after
 * fetching its first descriptor).
 */

typedef struct sd_fnapi sd_fnapi;
typedef struct sd_fnapi_worker sd_fnapi_worker;

typedef struct sd_fnapi_worker_hooks {
    /* The control stream opened. Optional. */
    void (*on_connected)(sd_fnapi_worker *w, void *ctx);
    /* Inbound data/timers from the SDK. The message is borrowed for the call. */
    void (*on_elements)(sd_fnapi_worker *w, const pb_Elements *msg, void *ctx);
    /* A state request; answer it (now or later) with sd_fnapi_worker_state_reply(). */
    void (*on_state)(sd_fnapi_worker *w, const pb_StateRequest *req, void *ctx);
    /* One log entry from the SDK. Optional. */
    void (*on_log)(sd_fnapi_worker *w, const pb_LogEntry *entry, void *ctx);
    /*
     * The worker went away while not being stopped: its control stream closed or was cancelled
     * before sd_fnapi_worker_stop(). `why` names what happened. Every pending instruction callback
     * has already been called with an error.
     */
    void (*on_lost)(sd_fnapi_worker *w, const char *why, void *ctx);
    void *ctx;
} sd_fnapi_worker_hooks;

SD_MUST_CHECK sd_status sd_fnapi_create(sd_rpc *rpc, sd_fnapi **out, sd_err *err);
/* Register the Fn API methods on srv (before the server starts). */
SD_MUST_CHECK sd_status sd_fnapi_register(sd_fnapi *fn, sd_rpc_server *srv, sd_err *err);
/* Destroy; every worker must have been destroyed. NULL is a no-op. */
void sd_fnapi_destroy(sd_fnapi *fn);

/*
 * Expect a worker with this id. provision_info is the packed ProvisionInfo served to it by
 * GetProvisionInfo (copied). Caller owns the result; free with sd_fnapi_worker_destroy().
 */
SD_MUST_CHECK sd_status sd_fnapi_worker_create(sd_fnapi *fn,
                                               const char *worker_id,
                                               const sd_fnapi_worker_hooks *hooks,
                                               sd_bytes provision_info,
                                               sd_fnapi_worker **out,
                                               sd_err *err);

const char *sd_fnapi_worker_id(const sd_fnapi_worker *w);
bool sd_fnapi_worker_is_connected(const sd_fnapi_worker *w);

/* Make a descriptor available to GetProcessBundleDescriptor (packed bytes, copied). */
SD_MUST_CHECK sd_status sd_fnapi_worker_add_descriptor(sd_fnapi_worker *w,
                                                       const char *id,
                                                       sd_bytes packed);

/*
 * Push descriptors (the worker's environment declares
 * beam:protocol:sundial_register_descriptors:v1): a process_bundle instruction that names a
 * descriptor this worker has not been sent yet is preceded by a RegisterRequest carrying it
 * (instruction id "register:" + the descriptor id), which saves the harness a fetch.
 * GetProcessBundleDescriptor still serves every descriptor.
 */
void sd_fnapi_worker_push_descriptors(sd_fnapi_worker *w, bool on);

/*
 * Send an instruction (its instruction_id must be set and unique). cb runs exactly once on the
 * loop thread: with the response, or with resp = NULL and `error` set when the worker is lost
 * or stopped first. Not called if this returns an error.
 */
typedef void (*sd_fnapi_instruction_cb)(void *ctx,
                                        const pb_InstructionResponse *resp,
                                        const char *error);
SD_MUST_CHECK sd_status sd_fnapi_worker_instruct(sd_fnapi_worker *w,
                                                 const pb_InstructionRequest *req,
                                                 sd_fnapi_instruction_cb cb,
                                                 void *ctx);

/* Send data/timers to the SDK on its Data stream (queued until the stream opens). */
SD_MUST_CHECK sd_status sd_fnapi_worker_send_elements(sd_fnapi_worker *w, const pb_Elements *msg);

/* Answer a state request. */
SD_MUST_CHECK sd_status sd_fnapi_worker_state_reply(sd_fnapi_worker *w,
                                                    const pb_StateResponse *resp);

/*
 * End the worker's streams gracefully (OK status; never a cancel: the TypeScript SDK's
 * process dies on a cancelled control stream). Pending instruction callbacks get an error.
 * After this, on_lost is no longer called.
 */
void sd_fnapi_worker_stop(sd_fnapi_worker *w);

/* Stop if needed and forget the worker. NULL is a no-op. */
void sd_fnapi_worker_destroy(sd_fnapi_worker *w);

/* Pack any protobuf-c message into a new buffer (reset first). */
SD_MUST_CHECK sd_status sd_fnapi_pb_pack(const ProtobufCMessage *msg, sd_buf *out);

#endif
