/* Sundial: job service internals shared by its .c files and its tests. */
#ifndef SD_RUNNER_JOBSERVICE_JOBSERVICE_INT_H
#define SD_RUNNER_JOBSERVICE_JOBSERVICE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "org/apache/beam/model/job_management/v1/beam_artifact_api.pb-c.h"
#include "runner/base/buf.h"
#include "runner/base/map.h"
#include "runner/base/time.h"
#include "runner/base/vec.h"
#include "runner/jobservice/jobservice.h"

/* Short names for the generated types used throughout the module. */
typedef Org__Apache__Beam__Model__Pipeline__V1__Pipeline sd_pb_pipeline;
typedef Org__Apache__Beam__Model__Pipeline__V1__Environment sd_pb_environment;
typedef Org__Apache__Beam__Model__Pipeline__V1__ArtifactInformation sd_pb_artifact;
typedef Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo sd_pb_monitoring_info;
typedef Org__Apache__Beam__Model__JobManagement__V1__PrepareJobRequest sd_pb_prepare_req;
typedef Org__Apache__Beam__Model__JobManagement__V1__MetricResults sd_pb_metric_results;
typedef Org__Apache__Beam__Model__JobManagement__V1__ArtifactRequestWrapper sd_pb_artifact_req;
typedef Org__Apache__Beam__Model__JobManagement__V1__ArtifactResponseWrapper sd_pb_artifact_resp;

/* The methods served, in registration order. */
typedef enum sd__jobsvc_method {
    SD__JS_PREPARE,
    SD__JS_RUN,
    SD__JS_GET_JOBS,
    SD__JS_GET_STATE,
    SD__JS_GET_PIPELINE,
    SD__JS_CANCEL,
    SD__JS_DRAIN,
    SD__JS_GET_STATE_STREAM,
    SD__JS_GET_MESSAGE_STREAM,
    SD__JS_GET_JOB_METRICS,
    SD__JS_DESCRIBE_OPTIONS,
    SD__JS_RESOLVE_ARTIFACTS,
    SD__JS_GET_ARTIFACT,
    SD__JS_REVERSE_RETRIEVAL,
    SD__JS_METHOD_COUNT
} sd__jobsvc_method;

typedef struct sd__jobsvc_method_info {
    const char *path; /* "/pkg.Service/Method" */
    sd_rpc_kind kind;
} sd__jobsvc_method_info;

/* Path and kind of method m. */
const sd__jobsvc_method_info *sd__jobsvc_method_get(sd__jobsvc_method m);

/*
 * The seam between the service logic and the transport. Production wraps sd_rpc_call_*; tests
 * install a fake that records what was sent. `call` is the transport's opaque call handle.
 */
typedef struct sd__jobsvc_io {
    sd_status (*send)(void *io_ctx, void *call, sd_bytes msg);
    void (*finish)(void *io_ctx, void *call, sd_rpc_code code, const char *message);
    size_t (*send_queue_len)(void *io_ctx, void *call);
    /* Ask for sd__jobsvc_pump() to run soon (a paced GetArtifact is waiting for room). */
    void (*want_pump)(void *io_ctx);
    /* Called once from sd_jobsvc_destroy(). May be NULL. */
    void (*release)(void *io_ctx);
    void *io_ctx;
} sd__jobsvc_io;

/* Replace the io seam (copied). Before any call arrives. */
void sd__jobsvc_set_io(sd_jobsvc *svc, const sd__jobsvc_io *io);

/* Test hook: the wall clock used for state and message timestamps (NULL restores the real one). */
void sd__jobsvc_set_clock(sd_jobsvc *svc, sd_time (*now_ms)(void));

/*
 * Transport callbacks, method-independent. on_open returns the call's record (keep it with
 * the call and pass it back) or NULL when the call was answered at once (unary calls,
 * immediate errors). The record stays valid until on_close, which frees it.
 */
void *sd__jobsvc_on_open(sd_jobsvc *svc, sd__jobsvc_method m, void *call, sd_bytes request);
void sd__jobsvc_on_message(sd_jobsvc *svc, void *rec, sd_bytes msg);
void sd__jobsvc_on_half_close(sd_jobsvc *svc, void *rec);
void sd__jobsvc_on_close(sd_jobsvc *svc, void *rec, bool cancelled);

/* Continue paced GetArtifact streams that have room in their send queue. */
void sd__jobsvc_pump(sd_jobsvc *svc);

/* NULL when every invariant holds, else a static string naming the broken one. */
const char *sd__jobsvc_check(const sd_jobsvc *svc);

/*
 * Staged-file name for dependency number index whose source path or URL is `source`:
 * "dep-NNN-<basename>", the basename reduced to [A-Za-z0-9._-], leading dots removed, at most
 * 64 characters, "artifact" when nothing is left. Never contains '/' and never is "." or "..".
 * Caller owns; free with sd_free. NULL on out-of-memory.
 */
char *sd__jobsvc_staged_name(size_t index, const char *source);

/* gRPC code for a status (EUNIMPL -> UNIMPLEMENTED, ENOMEM -> RESOURCE_EXHAUSTED, ...). */
sd_rpc_code sd__jobsvc_code(sd_status st);

/* ---------------------------------------------------------------- shared structures */

/* A protobuf-c allocator on sd_malloc/sd_free that remembers whether an allocation failed. */
typedef struct sd__jobsvc_pb_alloc {
    ProtobufCAllocator a;
    bool failed;
} sd__jobsvc_pb_alloc;

void sd__jobsvc_pb_alloc_init(sd__jobsvc_pb_alloc *pa);

/* The allocator every message kept by the service is unpacked (and freed) with. */
extern ProtobufCAllocator sd__jobsvc_pb_allocator;

/*
 * Unpack bytes as desc's message with sd__jobsvc_pb_allocator semantics. NULL on failure with err
 * set: SD_ENOMEM, or SD_EPROTO naming the message type when the bytes are malformed.
 */
ProtobufCMessage *
sd__jobsvc_pb_unpack(const ProtobufCMessageDescriptor *desc, sd_bytes bytes, sd_err *err);

/* Pack into a new buffer. Caller owns *out (sd_free). SD_ENOMEM only. */
SD_MUST_CHECK sd_status sd__jobsvc_pb_pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len);

/* Deep copy through pack + unpack. NULL on out-of-memory. Free with sd__jobsvc_pb_destroy. */
ProtobufCMessage *sd__jobsvc_pb_dup(const ProtobufCMessage *msg);

/* protobuf_c_message_free_unpacked with sd__jobsvc_pb_allocator. NULL is a no-op. */
void sd__jobsvc_pb_destroy(ProtobufCMessage *msg);

/* One history entry: a message or a state change. */
typedef struct sd__jobsvc_job_entry {
    uint64_t seq;    /* 1, 2, ... per job; message_id is its decimal form */
    sd_time time_ms; /* wall clock */
    bool is_state;   /* else a message */
    int value;       /* sd_job_state or importance */
    char *text;      /* messages only; owned */
} sd__jobsvc_job_entry;

struct sd_job {
    uint32_t magic;
    sd_jobsvc *svc;
    char *id;
    sd_pb_prepare_req *req; /* owned; pipeline, options and name live here */
    sd_job_state state;
    sd_time state_time_ms;
    bool run_requested;
    int staging; /* 0 none yet, 1 in progress, 2 done, 3 failed */
    char *staging_error;
    char *error; /* first failure text */
    char *dir;   /* <artifact_dir>/<id> or NULL */
    bool dir_made;
    sd_vec staged_paths;        /* char * owned: files written for this job */
    size_t n_staged;            /* dependency counter for names */
    sd__jobsvc_job_entry *ring; /* SD_JOB_HISTORY_MAX slots */
    size_t ring_start;
    size_t ring_len;
    uint64_t next_seq;
    sd_pb_metric_results *metrics; /* owned; committed + attempted */
    sd_map option_cache;           /* Value address -> char * JSON text (owned) */
    void *user;
    sd_time created_ms; /* Prepare (wall clock) */
    sd_time started_ms; /* first STARTING/RUNNING; 0 = never */
    void *view;         /* sd_job_set_view: owned through view_free */
    void (*view_free)(void *view);
    void *trace; /* sd_job_set_trace: owned through trace_free */
    void (*trace_free)(void *trace);
};

#define SD__JOB_MAGIC    0x4a4f4231u /* "JOB1" */
#define SD__JOBSVC_MAGIC 0x4a535643u /* "JSVC" */

/* Kinds of call records. */
typedef enum sd__jobsvc_rec_kind {
    SD__REC_STATE_STREAM,
    SD__REC_MESSAGE_STREAM,
    SD__REC_STAGING,
    SD__REC_GET_ARTIFACT,
    SD__REC_PREPARE /* a Prepare being checked on the background pool (prepare.c) */
} sd__jobsvc_rec_kind;

typedef struct sd__prep sd__prep;

typedef struct sd__staging sd__staging;
typedef struct sd__artifact_out sd__artifact_out;

/* A streaming call in progress. Linked in svc->recs until on_close. */
typedef struct sd__jobsvc_rec {
    sd__jobsvc_rec_kind kind;
    void *call;
    sd_job *job;      /* NULL for GetArtifact and staging before the token */
    bool finished;    /* we ended it; waiting for on_close */
    bool pump_wanted; /* GetArtifact waiting for room */
    struct sd__jobsvc_rec *prev, *next;
    sd__staging *staging;
    sd__artifact_out *out;
    sd__prep *prep; /* SD__REC_PREPARE until its check is answered */
} sd__jobsvc_rec;

struct sd_jobsvc {
    uint32_t magic;
    sd_rpc *rpc;
    sd_job_hooks hooks;
    char *artifact_dir;
    char *endpoint;
    sd__jobsvc_io io;
    sd_time (*now_ms)(void);
    sd_vec jobs;   /* sd_job * owned, creation order */
    sd_map by_id;  /* id -> sd_job * borrowed */
    sd_map staged; /* staged file path -> sd_job * borrowed */
    unsigned next_job;
    size_t history;         /* finished jobs kept (see trim_history) */
    sd_time history_ttl_ms; /* finished jobs forgotten this long after they ended; 0 = never */
    sd__jobsvc_rec *recs;   /* open streaming calls */
    bool registered;
    struct sd_bg *bg;         /* background pool for Prepare (borrowed), NULL = inline */
    size_t inline_bytes;      /* a Prepare up to this size is checked inline even so */
    sd__prep *preps;          /* Prepares being checked there (prepare.c) */
    bool closing;             /* sd_jobsvc_close: new Prepares are refused */
    size_t max_request_bytes; /* 0 = no limit */
    size_t max_transforms;    /* 0 = no limit */
};

/* ---------------------------------------------------------------- cross-file helpers */

/* Create a job from an unpacked request (takes ownership of req even on error). */
SD_MUST_CHECK sd_status sd__jobsvc_job_create(sd_jobsvc *svc,
                                              sd_pb_prepare_req *req,
                                              sd_job **out,
                                              sd_err *err);
void sd__jobsvc_job_destroy(sd_job *job);

/* Visit history entries in order. */
size_t sd__jobsvc_job_history_len(const sd_job *job);
const sd__jobsvc_job_entry *sd__jobsvc_job_history_at(const sd_job *job, size_t i);

/* Send msg on rec's call; on failure the rec is finished with the error. */
sd_status sd__jobsvc_rec_send(sd_jobsvc *svc, sd__jobsvc_rec *rec, const ProtobufCMessage *msg);

/* Finish rec's call (once) with code and message. */
void sd__jobsvc_rec_finish(sd_jobsvc *svc,
                           sd__jobsvc_rec *rec,
                           sd_rpc_code code,
                           const char *message);

/* Reply to a unary call with msg, or finish it with an error. */
void sd__jobsvc_reply(sd_jobsvc *svc, void *call, const ProtobufCMessage *msg);
void sd__jobsvc_reply_error(sd_jobsvc *svc, void *call, sd_status st, const char *message);

/* Allocate a record and link it. NULL on out-of-memory. */
sd__jobsvc_rec *sd__jobsvc_rec_create(sd_jobsvc *svc, sd__jobsvc_rec_kind kind, void *call);

/* Cancel and Drain as the Job API does them, for a job already found (jobview.c). */
sd_job_state sd__jobsvc_cancel(sd_jobsvc *svc, sd_job *job);
SD_MUST_CHECK sd_status sd__jobsvc_drain(sd_jobsvc *svc,
                                         sd_job *job,
                                         sd_job_state *out_state,
                                         sd_err *err);

/* Forget the oldest finished jobs beyond the history bound (jobsvc.c). */
void sd__jobsvc_trim_history(sd_jobsvc *svc);

/* --- prepare.c: JobService.Prepare. */
/* on_open of Prepare: answers at once (returns NULL) or returns the SD__REC_PREPARE record. */
void *sd__jobsvc_prepare_open(sd_jobsvc *svc, void *call, sd_bytes request);
/* The transport closed a Prepare call: its check's result will be dropped. */
void sd__jobsvc_prepare_call_closed(sd__jobsvc_rec *rec);
/* Detach every Prepare in progress; answer_calls finishes their calls with UNAVAILABLE. */
void sd__jobsvc_prepare_detach_all(sd_jobsvc *svc, bool answer_calls);
/* Transforms listed in a packed PrepareJobRequest's Components (0 if it is malformed). */
size_t sd__jobsvc_prepare_count_transforms(sd_bytes request);

/* Notifications from job.c to the streams (jobsvc.c). */
void sd__jobsvc_notify(sd_jobsvc *svc, sd_job *job, const sd__jobsvc_job_entry *entry);

/* True when any dependency of any environment would be fetched from the client. */
bool sd__jobsvc_pipeline_needs_staging(const sd_pb_pipeline *p);

/* artifacts.c: the artifact methods and record cleanup. */
void *sd__jobsvc_artifacts_open(sd_jobsvc *svc, sd__jobsvc_method m, void *call, sd_bytes request);
void sd__jobsvc_artifacts_message(sd_jobsvc *svc, sd__jobsvc_rec *rec, sd_bytes msg);
/* A Prepare up to this many bytes is checked inline even with a background pool; tests set
 * another bound with sd__jobsvc_set_inline_bytes (0: everything goes to the pool). */
#define SD__JOBSVC_INLINE_PREPARE_BYTES ((size_t)64 * 1024)
void sd__jobsvc_set_inline_bytes(sd_jobsvc *svc, size_t n);
void sd__jobsvc_artifacts_half_close(sd_jobsvc *svc, sd__jobsvc_rec *rec);
void sd__jobsvc_artifacts_close(sd_jobsvc *svc, sd__jobsvc_rec *rec, bool cancelled);
void sd__jobsvc_artifacts_pump(sd_jobsvc *svc, sd__jobsvc_rec *rec);

/* Create <artifact_dir>/<job id> once (a plain directory, never a symlink). */
SD_MUST_CHECK sd_status sd__jobsvc_job_ensure_dir(sd_job *job, sd_err *err);

/* Make path and its missing parents (mode 0700). */
SD_MUST_CHECK sd_status sd__mkdirs(const char *path, sd_err *err);

/* Fill a google.protobuf.Timestamp from ms. */
void sd__jobsvc_timestamp_set(Google__Protobuf__Timestamp *ts, sd_time ms);

#endif
