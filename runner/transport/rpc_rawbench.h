/*
 * Sundial: the raw gRPC C core baseline of tools/bench_transport (benchmark support only).
 *
 * Built into bench_transport alone, never into sd_transport or the runner. It lives here
 * because <grpc/...> may be included only in runner/transport (tools/check_deps.sh); this
 * header hides gRPC, so the benchmark stays plain C.
 */
#ifndef SD_RUNNER_TRANSPORT_RPC_RAWBENCH_H
#define SD_RUNNER_TRANSPORT_RPC_RAWBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/status.h"

typedef struct sd_rpc_rawbench sd_rpc_rawbench;

/*
 * Hold gRPC initialised (grpc_init) for the benchmark's lifetime, so the rounds in between do
 * not shut it down and start it again. Caller owns; free with sd_rpc_rawbench_destroy().
 */
SD_MUST_CHECK sd_status sd_rpc_rawbench_create(sd_rpc_rawbench **out, sd_err *err);

/* grpc_shutdown() and free. NULL is a no-op. */
void sd_rpc_rawbench_destroy(sd_rpc_rawbench *rb);

/*
 * One bidi echo stream written straight against C core on the calling thread: a server and a
 * channel on 127.0.0.1 sharing one completion queue, which this thread drives with
 * grpc_completion_queue_next (no libev, no hub, no other thread of ours). The client sends n
 * messages of `size` bytes (message i filled by sd_rpc_rawbench_fill(i)) with at most `window`
 * of them unanswered and half-closes with the last; the server echoes each one (forwarding the
 * received buffer) and ends with OK; every echo is checked with sd_rpc_rawbench_check.
 * Returns SD_OK and OUT: ns, the wall time from creating the call to its status (the server
 * and channel are set up before and torn down after); SD_EPROTO with a message when an echo is
 * missing, reordered or corrupt or the status is not OK; SD_ETIMEOUT after 120 s.
 */
SD_MUST_CHECK sd_status sd_rpc_rawbench_echo(sd_rpc_rawbench *rb,
                                             long n,
                                             size_t size,
                                             long window,
                                             int64_t *ns,
                                             sd_err *err);

/* Fill buf[0..size) with message number seq (the sequence number, then a seq-dependent byte). */
void sd_rpc_rawbench_fill(uint8_t *buf, size_t size, uint64_t seq);

/* True if msg is exactly what sd_rpc_rawbench_fill(buf, size, seq) wrote. */
bool sd_rpc_rawbench_check(sd_bytes msg, size_t size, uint64_t seq);

#endif
