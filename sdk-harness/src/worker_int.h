/*
 * Sundial C SDK: internals of the Fn API worker, shared by its three files and nothing else.
 *
 * The worker (see worker.c for the threads, the mutex and shutdown) is split by concern:
 *
 *     worker.c         the control stream (instructions in, responses out), the worker's
 *                      lifecycle and shutdown, and small helpers
 *     worker_io.c      the data and state streams: loop-side sending in FIFO order, inbound
 *                      data/timer chunks and state responses, and the sd__bundle_io a
 *                      bundle thread runs its processor over
 *     worker_bundle.c  descriptors (fetched once, cached) and bundles: one thread per
 *                      ProcessBundle instruction, idle processors kept for reuse, and the
 *                      ProcessBundleResponse with counters and residual roots
 *
 * Fields are marked with the thread that may touch them: "loop thread only" or "under mu".
 */
#ifndef SD_SDK_HARNESS_SRC_WORKER_INT_H
#define SD_SDK_HARNESS_SRC_WORKER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/map.h"
#include "runner/base/vec.h"
#include "runner/transport/rpc.h"
#include "sdk-harness/src/sdk_int.h"
#include "sdk-harness/src/state_cache.h"

#define FNF(x) org__apache__beam__model__fn_execution__v1__##x
#define FNE(x) ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__##x

/* ================================================================ types */

typedef struct chunk {
    struct chunk *next;
    bool timer;
    bool is_last;
    char *tid;
    char *family;
    uint8_t *data;
    size_t len;
} chunk;

typedef struct inbox {
    chunk *head;
    chunk *tail;
    bool lost; /* a chunk could not be kept (out of memory): the bundle fails, never runs short */
} inbox;

typedef struct waiter {
    bool done;
    bool failed;
    char error[512];
    sd_buf data;
    sd_buf token;
} waiter;

typedef struct chan {
    char *url;
    sd_rpc_channel *ch; /* the worker's control channel when borrowed */
    bool borrowed;
    sd_rpc_stream *data;
    sd_rpc_stream *state;
} chan;

typedef struct idle_list {
    sd_vec procs; /* sd__proc * */
} idle_list;

struct sd__worker {
    sd__rt *rt;
    sd_rpc *rpc;
    char *id;
    char *control_url;
    char *logging_url;
    void (*on_done)(void *ctx, const char *why);
    void *done_ctx;
    /* Loop thread only. */
    sd_rpc_channel *ctl_ch;
    sd_rpc_stream *ctl;
    sd_rpc_channel *log_ch;
    sd_rpc_stream *log;
    sd_vec chans; /* chan * */
    int open_streams;
    bool stopping;
    bool finished;
    char why[512];
    /* Shared, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool dead;
    bool inbox_lost; /* data for an instruction with no inbox could not be filed (OOM) */
    sd_map inboxes;  /* instruction -> inbox * */
    sd_map waiters;  /* state request id -> waiter * (borrowed: on the bundle's stack) */
    sd_map descs;    /* descriptor id -> ProcessBundleDescriptor * */
    sd_map idle;     /* descriptor id -> idle_list * */
    sd_map running;  /* instruction -> sd__proc * of bundles in progress (borrowed) */
    long next_id;
    int live_bundles;
    int finish_tasks;   /* finish_task()s queued on the loop and not yet run (under mu) */
    sd__scache *scache; /* user state kept across bundles under the runner's cache tokens
                         * (its own lock; NULL: none) */
};

/* Which stream a queued send goes to. */
typedef enum send_kind { SEND_CONTROL, SEND_DATA, SEND_STATE, SEND_LOG } send_kind;

/* A bundle thread's own record (worker_bundle.c owns it; worker_io.c's I/O gets it as ctx). */
typedef struct bundle {
    sd__worker *w;
    char *instruction;
    char *desc_id;
    char *data_url;
    char *state_url;
    bool embedded; /* its whole input came in the ProcessBundleRequest */
    /* State writes (append, clear) go out without waiting for their answers: those in flight
     * (sd__state_write *) are settled before a state read goes to the runner, every
     * SD_WORKER_WRITES_MAX writes, and before the bundle answers (sd__worker_state_settle).
     * Bag user state read in this bundle is kept with its writes since (packed StateKey ->
     * sd_buf *): a key read again costs no round trip (what Beam's SDKs keep per bundle).
     * With a user-state cache token from the runner (shared), that state goes to the worker's
     * scache instead, kept across bundles while the stage's token stays the same. */
    sd_vec writes;
    sd_map state_cache;
    sd_buf token; /* the user-state cache token of the request (empty: none) */
    bool shared;  /* the bundle uses w->scache under token */
} bundle;

/* Writes in flight at most, per bundle. */
#define SD_WORKER_WRITES_MAX 256

/* ================================================================ shared inside the worker */

/* worker_io.c: set up and tear down a bundle's state writes and cache (start_bundle,
 * bundle_main); settle its writes in flight: wait for their answers, SD_EIO naming the first
 * that failed (always call it before the bundle answers, even when the bundle failed). */
void sd__worker_state_init(bundle *b);
void sd__worker_state_deinit(bundle *b);
sd_status sd__worker_state_settle(bundle *b, sd_err *err);

/* worker.c: free one chunk (NULL is a no-op), a cached descriptor (a map free callback). */
void sd__worker_chunk_destroy(chunk *c);
void sd__worker_desc_free(void *v);
/* worker.c: pack m into out (reset first). */
sd_status sd__worker_pack(const ProtobufCMessage *m, sd_buf *out);
/* worker.c: start shutting down (loop thread): cancel the streams, fail waiters and inboxes. */
void sd__worker_shutdown(sd__worker *w, const char *why);
/* worker.c: free the worker once every stream has closed and every bundle thread has left
 * (loop thread); on_done runs then. */
void sd__worker_maybe_finish(sd__worker *w);

/* worker_io.c: the data (SEND_DATA) or state (SEND_STATE) stream to url, each opened on its
 * first use (loop thread). */
sd_rpc_stream *sd__worker_get_stream(sd__worker *w, const char *url, send_kind kind, sd_err *err);
/* worker_io.c: file el's data and timers in their instructions' inboxes (under the
 * instruction given, when not NULL: input embedded in a ProcessBundleRequest). Any thread. */
void sd__worker_inbox_add(sd__worker *w, const pb_Elements *el, const char *instruction);
/* worker_io.c: queue bytes (taken; bytes is left empty) to go out on the loop thread, in
 * submission order. Callable from any thread; SEND_CONTROL may send from the calling thread
 * when the loop is idle (sd_rpc_run_soon), so its caller must hold no lock. */
sd_status sd__worker_queue_send(sd__worker *w, send_kind kind, const char *url, sd_buf *bytes);
/* worker_io.c: the close handler of the data, state and logging streams. */
void sd__worker_on_aux_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx);
/* worker_io.c: the processor I/O of bundle b (state, data, timers and logs over the streams). */
sd__bundle_io sd__worker_bundle_io(bundle *b);

/* worker_bundle.c: DelayedBundleApplications for a vector of sd__residual_root (borrowing
 * from it); free *mem and the array. NULL when out of memory. */
pb_DelayedBundleApplication **sd__worker_residual_roots(const sd_vec *roots, void **mem);
/* worker_bundle.c: start a bundle thread for a ProcessBundle instruction (loop thread): its
 * descriptor, whether its input is embedded, its user-state cache token. */
sd_status sd__worker_start_bundle(sd__worker *w,
                                  const char *instruction,
                                  const pb_ProcessBundleRequest *req,
                                  sd_err *err);
/* worker_io.c: State API get requests this process's workers sent to a runner, in all (a
 * test's view of what the state cache spared). */
uint64_t sd__worker_state_gets_total(void);

#endif
