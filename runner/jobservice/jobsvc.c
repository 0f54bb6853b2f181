/* Sundial: the Job API — Prepare, Run, state, messages, metrics — on top of sd_job. */

/*
 * This file turns JobService requests into calls on job objects and answers them. It never
 * touches gRPC: requests arrive as packed bytes through sd__jobsvc_on_open() and friends, and
 * answers leave through the sd__jobsvc_io seam. jobsvc_rpc.c binds that seam to the transport
 * (sd_rpc_call_*); the unit tests bind it to a recorder. That keeps every handler testable without
 * a network and keeps the transport free of Beam knowledge.
 *
 * Calls and records. Unary calls are answered inside on_open and leave nothing behind, except
 * Prepare with a background pool: it is checked off the loop thread (prepare.c) and keeps an
 * SD__REC_PREPARE record until answered.
 * Streaming calls (GetStateStream, GetMessageStream, GetArtifact, the staging stream) get an
 * sd__jobsvc_rec, linked in svc->recs until the transport's on_close. A record we finish ourselves
 * (terminal state reached) stays linked, marked `finished`, until on_close arrives, because the
 * transport still holds the call. Job changes are pushed by sd__jobsvc_notify(), which walks
 * that list: O(open streams) per change, fine for a local runner with a handful of watchers.
 *
 * What a client sees, in order (all on the loop thread, so ordering is exact):
 *   GetStateStream   current state, then every change, finished OK after a terminal state;
 *   GetMessageStream the job's history ring (messages and state events interleaved, oldest
 *                    first), then live entries, finished OK after a terminal state event; the
 *                    failure text of a FAILED job is in it as JOB_MESSAGE_ERROR.
 * A stream whose client stops reading is ended with RESOURCE_EXHAUSTED once SD__STREAM_QUEUE_MAX
 * messages are queued, so one stuck client cannot grow the runner's memory without bound.
 *
 * Error mapping (sd_status -> gRPC) lives in sd__jobsvc_code(); every error message names the
 * job or the request and what was expected.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"
#include "runner/urns/urns.h"

#define SD__STREAM_QUEUE_MAX 4096

#define JS_PKG "/org.apache.beam.model.job_management.v1."

static const sd__jobsvc_method_info methods[SD__JS_METHOD_COUNT] = {
    [SD__JS_PREPARE] = { JS_PKG "JobService/Prepare", SD_RPC_KIND_UNARY },
    [SD__JS_RUN] = { JS_PKG "JobService/Run", SD_RPC_KIND_UNARY },
    [SD__JS_GET_JOBS] = { JS_PKG "JobService/GetJobs", SD_RPC_KIND_UNARY },
    [SD__JS_GET_STATE] = { JS_PKG "JobService/GetState", SD_RPC_KIND_UNARY },
    [SD__JS_GET_PIPELINE] = { JS_PKG "JobService/GetPipeline", SD_RPC_KIND_UNARY },
    [SD__JS_CANCEL] = { JS_PKG "JobService/Cancel", SD_RPC_KIND_UNARY },
    [SD__JS_DRAIN] = { JS_PKG "JobService/Drain", SD_RPC_KIND_UNARY },
    [SD__JS_GET_STATE_STREAM] = { JS_PKG "JobService/GetStateStream", SD_RPC_KIND_SERVER_STREAM },
    [SD__JS_GET_MESSAGE_STREAM] = { JS_PKG "JobService/GetMessageStream",
                                    SD_RPC_KIND_SERVER_STREAM },
    [SD__JS_GET_JOB_METRICS] = { JS_PKG "JobService/GetJobMetrics", SD_RPC_KIND_UNARY },
    [SD__JS_DESCRIBE_OPTIONS] = { JS_PKG "JobService/DescribePipelineOptions", SD_RPC_KIND_UNARY },
    [SD__JS_RESOLVE_ARTIFACTS] = { JS_PKG "ArtifactRetrievalService/ResolveArtifacts",
                                   SD_RPC_KIND_UNARY },
    [SD__JS_GET_ARTIFACT] = { JS_PKG "ArtifactRetrievalService/GetArtifact",
                              SD_RPC_KIND_SERVER_STREAM },
    [SD__JS_REVERSE_RETRIEVAL] = { JS_PKG "ArtifactStagingService/ReverseArtifactRetrievalService",
                                   SD_RPC_KIND_BIDI },
};

const sd__jobsvc_method_info *sd__jobsvc_method_get(sd__jobsvc_method m)
{
    if ((int)m < 0 || m >= SD__JS_METHOD_COUNT) {
        return NULL;
    }
    return &methods[m];
}

/* Short names for the generated Job API types used below. */
typedef Org__Apache__Beam__Model__JobManagement__V1__PrepareJobResponse prepare_resp;
typedef Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run_req;
typedef Org__Apache__Beam__Model__JobManagement__V1__RunJobResponse run_resp;
typedef Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest state_req;
typedef Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent state_event;
typedef Org__Apache__Beam__Model__JobManagement__V1__JobMessage job_message;
typedef Org__Apache__Beam__Model__JobManagement__V1__JobMessagesResponse messages_resp;
typedef Org__Apache__Beam__Model__JobManagement__V1__JobInfo job_info;

#define PB(name) org__apache__beam__model__job_management__v1__##name

#define MSG_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_RESPONSE__RESPONSE_##x

/* ================================================================ codes and io */

sd_rpc_code sd__jobsvc_code(sd_status st)
{
    switch (st) {
    case SD_OK:
        return SD_RPC_OK;
    case SD_EINVAL:
    case SD_EPROTO:
        return SD_RPC_INVALID_ARGUMENT;
    case SD_ENOTFOUND:
        return SD_RPC_NOT_FOUND;
    case SD_ESTATE:
        return SD_RPC_FAILED_PRECONDITION;
    case SD_EUNIMPL:
        return SD_RPC_UNIMPLEMENTED;
    case SD_ENOMEM:
    case SD_ETOOBIG:
        return SD_RPC_RESOURCE_EXHAUSTED;
    case SD_ECANCELED:
        return SD_RPC_CANCELLED;
    case SD_ETIMEOUT:
        return SD_RPC_DEADLINE_EXCEEDED;
    case SD_EEXIST:
        return SD_RPC_ALREADY_EXISTS;
    case SD_EUNAVAIL:
        return SD_RPC_UNAVAILABLE;
    default:
        return SD_RPC_INTERNAL;
    }
}

static sd_status null_send(void *io_ctx, void *call, sd_bytes msg)
{
    (void)io_ctx;
    (void)call;
    (void)msg;
    return SD_ESTATE;
}

static void null_finish(void *io_ctx, void *call, sd_rpc_code code, const char *message)
{
    (void)io_ctx;
    (void)call;
    (void)code;
    (void)message;
}

static size_t null_queue_len(void *io_ctx, void *call)
{
    (void)io_ctx;
    (void)call;
    return 0;
}

static void null_want_pump(void *io_ctx)
{
    (void)io_ctx;
}

void sd__jobsvc_set_io(sd_jobsvc *svc, const sd__jobsvc_io *io)
{
    svc->io = *io;
}

void sd__jobsvc_set_clock(sd_jobsvc *svc, sd_time (*now_ms)(void))
{
    svc->now_ms = now_ms != NULL ? now_ms : sd_wall_now_ms;
}

void sd__jobsvc_reply(sd_jobsvc *svc, void *call, const ProtobufCMessage *msg)
{
    uint8_t *bytes;
    size_t len;
    if (sd__jobsvc_pb_pack(msg, &bytes, &len) != SD_OK) {
        svc->io.finish(svc->io.io_ctx, call, SD_RPC_RESOURCE_EXHAUSTED,
                       "out of memory packing the response");
        return;
    }
    sd_status st = svc->io.send(svc->io.io_ctx, call, sd_bytes_make(bytes, len));
    sd_free(bytes);
    if (st != SD_OK) {
        svc->io.finish(svc->io.io_ctx, call, sd__jobsvc_code(st), "could not send the response");
        return;
    }
    svc->io.finish(svc->io.io_ctx, call, SD_RPC_OK, NULL);
}

void sd__jobsvc_reply_error(sd_jobsvc *svc, void *call, sd_status st, const char *message)
{
    /* An error reply never carries a success status (a caller's bug: asserted; a release
     * build replies INTERNAL). */
    assert(st != SD_OK && "an error reply with status SD_OK");
    if (st == SD_OK) {
        st = SD_EINTERNAL;
    }
    svc->io.finish(svc->io.io_ctx, call, sd__jobsvc_code(st), message);
}

sd__jobsvc_rec *sd__jobsvc_rec_create(sd_jobsvc *svc, sd__jobsvc_rec_kind kind, void *call)
{
    sd__jobsvc_rec *rec = sd_calloc(1, sizeof(*rec));
    if (rec == NULL) {
        return NULL;
    }
    rec->kind = kind;
    rec->call = call;
    rec->next = svc->recs;
    if (svc->recs != NULL) {
        svc->recs->prev = rec;
    }
    svc->recs = rec;
    return rec;
}

static void rec_unlink(sd_jobsvc *svc, sd__jobsvc_rec *rec)
{
    if (rec->prev != NULL) {
        rec->prev->next = rec->next;
    } else {
        svc->recs = rec->next;
    }
    if (rec->next != NULL) {
        rec->next->prev = rec->prev;
    }
    rec->prev = rec->next = NULL;
}

void sd__jobsvc_rec_finish(sd_jobsvc *svc,
                           sd__jobsvc_rec *rec,
                           sd_rpc_code code,
                           const char *message)
{
    if (rec->finished) {
        return;
    }
    rec->finished = true;
    rec->pump_wanted = false;
    svc->io.finish(svc->io.io_ctx, rec->call, code, message);
}

sd_status sd__jobsvc_rec_send(sd_jobsvc *svc, sd__jobsvc_rec *rec, const ProtobufCMessage *msg)
{
    if (rec->finished) {
        return SD_ESTATE;
    }
    uint8_t *bytes;
    size_t len;
    sd_status st = sd__jobsvc_pb_pack(msg, &bytes, &len);
    if (st != SD_OK) {
        sd__jobsvc_rec_finish(svc, rec, SD_RPC_RESOURCE_EXHAUSTED,
                              "out of memory packing a message");
        return st;
    }
    st = svc->io.send(svc->io.io_ctx, rec->call, sd_bytes_make(bytes, len));
    sd_free(bytes);
    if (st == SD_ESTATE) {
        rec->finished = true; /* the call is gone; on_close will follow */
    } else if (st != SD_OK) {
        sd__jobsvc_rec_finish(svc, rec, sd__jobsvc_code(st), "could not queue a message");
    }
    return st;
}

/* ================================================================ service lifecycle */

sd_status sd_jobsvc_create(sd_rpc *rpc,
                           const sd_job_hooks *hooks,
                           const char *artifact_dir,
                           sd_jobsvc **out,
                           sd_err *err)
{
    sd_jobsvc *svc = sd_calloc(1, sizeof(*svc));
    if (svc == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory creating the job service");
    }
    svc->magic = SD__JOBSVC_MAGIC;
    svc->rpc = rpc;
    if (hooks != NULL) {
        svc->hooks = *hooks;
    }
    svc->io = (sd__jobsvc_io){ .send = null_send,
                               .finish = null_finish,
                               .send_queue_len = null_queue_len,
                               .want_pump = null_want_pump };
    svc->now_ms = sd_wall_now_ms;
    svc->next_job = 1;
    svc->history = SD_JOB_HISTORY_DEFAULT;
    svc->history_ttl_ms = SD_JOB_HISTORY_TTL_DEFAULT_MS;
    sd_vec_init(&svc->jobs, sizeof(sd_job *));
    sd_map_init(&svc->by_id, NULL);
    sd_map_init(&svc->staged, NULL);
    if (artifact_dir != NULL) {
        size_t n = strlen(artifact_dir);
        while (n > 1 && artifact_dir[n - 1] == '/') {
            n--; /* "dir/" and "dir" name the same place; keep paths canonical */
        }
        svc->artifact_dir = sd_strndup(artifact_dir, n);
        if (svc->artifact_dir == NULL) {
            sd_jobsvc_destroy(svc);
            return sd_err_set(err, SD_ENOMEM, "out of memory creating the job service");
        }
        sd_status st = sd__mkdirs(svc->artifact_dir, err);
        if (st != SD_OK) {
            sd_jobsvc_destroy(svc);
            return st;
        }
    }
    *out = svc;
    return SD_OK;
}

sd_status sd_jobsvc_set_endpoint(sd_jobsvc *svc, const char *self_endpoint)
{
    char *copy = NULL;
    if (self_endpoint != NULL && (copy = sd_strdup(self_endpoint)) == NULL) {
        return SD_ENOMEM;
    }
    sd_free(svc->endpoint);
    svc->endpoint = copy;
    return SD_OK;
}

void sd_jobsvc_destroy(sd_jobsvc *svc)
{
    if (svc == NULL) {
        return;
    }
    sd__jobsvc_prepare_detach_all(svc, false);
    while (svc->recs != NULL) {
        sd__jobsvc_rec *rec = svc->recs;
        rec_unlink(svc, rec);
        sd__jobsvc_artifacts_close(svc, rec, true);
        sd_free(rec);
    }
    for (size_t i = 0; i < svc->jobs.len; i++) {
        sd__jobsvc_job_destroy(*SD_VEC_AT(&svc->jobs, sd_job *, i));
    }
    sd_vec_deinit(&svc->jobs);
    sd_map_deinit(&svc->by_id);
    sd_map_deinit(&svc->staged);
    if (svc->io.release != NULL) {
        svc->io.release(svc->io.io_ctx);
    }
    sd_free(svc->artifact_dir);
    sd_free(svc->endpoint);
    svc->magic = 0;
    sd_free(svc);
}

sd_job *sd_jobsvc_find(sd_jobsvc *svc, const char *job_id)
{
    assert(svc != NULL && svc->magic == SD__JOBSVC_MAGIC);
    if (job_id == NULL) {
        return NULL;
    }
    return sd_map_get_str(&svc->by_id, job_id);
}

size_t sd_jobsvc_job_count(const sd_jobsvc *svc)
{
    return svc->next_job - 1; /* every job ever prepared, also those forgotten since */
}

void sd_jobsvc_set_history(sd_jobsvc *svc, size_t max_finished)
{
    svc->history = max_finished;
}

void sd_jobsvc_set_history_ttl(sd_jobsvc *svc, sd_time ttl_ms)
{
    svc->history_ttl_ms = ttl_ms > 0 ? ttl_ms : 0;
}

void sd_jobsvc_set_limits(sd_jobsvc *svc, size_t max_request_bytes, size_t max_transforms)
{
    svc->max_request_bytes = max_request_bytes;
    svc->max_transforms = max_transforms;
}

void sd_jobsvc_set_background(sd_jobsvc *svc, struct sd_bg *bg)
{
    svc->bg = bg;
    svc->inline_bytes = SD__JOBSVC_INLINE_PREPARE_BYTES;
}

void sd__jobsvc_set_inline_bytes(sd_jobsvc *svc, size_t n)
{
    svc->inline_bytes = n;
}

void sd_jobsvc_close(sd_jobsvc *svc)
{
    if (svc == NULL) {
        return;
    }
    svc->closing = true;
    sd__jobsvc_prepare_detach_all(svc, true);
}

static bool job_in_use(const sd_jobsvc *svc, const sd_job *job)
{
    for (const sd__jobsvc_rec *rec = svc->recs; rec != NULL; rec = rec->next) {
        if (rec->job == job) {
            return true;
        }
    }
    return false;
}

/*
 * Forget the oldest finished jobs while more than svc->history are kept, and every finished
 * job that ended longer than svc->history_ttl_ms ago, skipping any that an open call still
 * reads. Runs when a new job is prepared and when jobs are listed, never from inside a state
 * change, so no caller up the stack holds a job it frees.
 */
void sd__jobsvc_trim_history(sd_jobsvc *svc)
{
    size_t finished = 0;
    for (size_t i = 0; i < svc->jobs.len; i++) {
        finished += sd_job_state_is_terminal((*SD_VEC_AT(&svc->jobs, sd_job *, i))->state);
    }
    sd_time now = svc->now_ms();
    for (size_t i = 0; i < svc->jobs.len;) {
        sd_job *job = *SD_VEC_AT(&svc->jobs, sd_job *, i);
        bool expired = svc->history_ttl_ms > 0 && now - job->state_time_ms > svc->history_ttl_ms;
        if (!sd_job_state_is_terminal(job->state) || job_in_use(svc, job) ||
            (finished <= svc->history && !expired)) {
            i++;
            continue;
        }
        for (size_t k = 0; k < job->staged_paths.len; k++) {
            sd_map_remove(&svc->staged, sd_bytes_str(*SD_VEC_AT(&job->staged_paths, char *, k)));
        }
        sd_map_remove(&svc->by_id, sd_bytes_str(job->id));
        sd_vec_remove(&svc->jobs, i);
        SD_DEBUG("jobservice", "%s: forgotten (job history keeps %zu finished jobs, %lld s)",
                 job->id, svc->history, (long long)(svc->history_ttl_ms / 1000));
        sd__jobsvc_job_destroy(job);
        finished--;
    }
}

size_t sd_jobsvc_active_count(const sd_jobsvc *svc)
{
    size_t n = 0;
    for (size_t i = 0; i < svc->jobs.len; i++) {
        const sd_job *job = *SD_VEC_AT(&svc->jobs, sd_job *, i);
        if (!sd_job_state_is_terminal(sd_job_state_get(job))) {
            n++;
        }
    }
    return n;
}

/* ================================================================ message builders */

/* RFC 3339 UTC with milliseconds: "2024-05-01T12:00:00.123Z". */
static void format_time(sd_time ms, char *buf, size_t size)
{
    int64_t sec = ms / 1000;
    int64_t rem = ms % 1000;
    if (rem < 0) {
        rem += 1000;
        sec -= 1;
    }
    time_t t = (time_t)sec;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL) {
        snprintf(buf, size, "%lld", (long long)ms);
        return;
    }
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)rem);
}

/* Send one history entry on a message stream. */
static sd_status send_entry(sd_jobsvc *svc, sd__jobsvc_rec *rec, const sd__jobsvc_job_entry *e)
{
    messages_resp resp;
    PB(job_messages_response__init)(&resp);
    state_event ev;
    Google__Protobuf__Timestamp ts;
    job_message msg;
    char id[24];
    char when[96]; /* room for any int the compiler imagines in the fields */
    if (e->is_state) {
        PB(job_state_event__init)(&ev);
        google__protobuf__timestamp__init(&ts);
        sd__jobsvc_timestamp_set(&ts, e->time_ms);
        ev.state = (Org__Apache__Beam__Model__JobManagement__V1__JobState__Enum)e->value;
        ev.timestamp = &ts;
        resp.response_case = MSG_CASE(STATE_RESPONSE);
        resp.state_response = &ev;
    } else {
        PB(job_message__init)(&msg);
        snprintf(id, sizeof(id), "%llu", (unsigned long long)e->seq);
        format_time(e->time_ms, when, sizeof(when));
        msg.message_id = id;
        msg.time = when;
        msg.importance =
            (Org__Apache__Beam__Model__JobManagement__V1__JobMessage__MessageImportance)e->value;
        msg.message_text = e->text;
        resp.response_case = MSG_CASE(MESSAGE_RESPONSE);
        resp.message_response = &msg;
    }
    return sd__jobsvc_rec_send(svc, rec, &resp.base);
}

static sd_status send_state(sd_jobsvc *svc, sd__jobsvc_rec *rec, sd_job_state s, sd_time when)
{
    state_event ev;
    PB(job_state_event__init)(&ev);
    Google__Protobuf__Timestamp ts;
    google__protobuf__timestamp__init(&ts);
    sd__jobsvc_timestamp_set(&ts, when);
    ev.state = (Org__Apache__Beam__Model__JobManagement__V1__JobState__Enum)s;
    ev.timestamp = &ts;
    return sd__jobsvc_rec_send(svc, rec, &ev.base);
}

static bool too_slow(sd_jobsvc *svc, sd__jobsvc_rec *rec)
{
    if (svc->io.send_queue_len(svc->io.io_ctx, rec->call) < SD__STREAM_QUEUE_MAX) {
        return false;
    }
    sd__jobsvc_rec_finish(svc, rec, SD_RPC_RESOURCE_EXHAUSTED,
                          "stream client is not reading; too many messages queued");
    return true;
}

void sd__jobsvc_notify(sd_jobsvc *svc, sd_job *job, const sd__jobsvc_job_entry *e)
{
    bool terminal = e->is_state && sd_job_state_is_terminal((sd_job_state)e->value);
    for (sd__jobsvc_rec *rec = svc->recs, *next; rec != NULL; rec = next) {
        next = rec->next;
        if (rec->job != job || rec->finished) {
            continue;
        }
        if (rec->kind == SD__REC_STATE_STREAM && e->is_state) {
            if (!too_slow(svc, rec)) {
                (void)send_state(svc, rec, (sd_job_state)e->value, e->time_ms);
            }
        } else if (rec->kind == SD__REC_MESSAGE_STREAM) {
            if (!too_slow(svc, rec)) {
                (void)send_entry(svc, rec, e);
            }
        } else {
            continue;
        }
        if (terminal) {
            sd__jobsvc_rec_finish(svc, rec, SD_RPC_OK, NULL);
        }
    }
}

/* ================================================================ handlers */

/* Unpack a request that names a job and find the job; on failure answer the call. */
static sd_job *request_job(sd_jobsvc *svc,
                           void *call,
                           const ProtobufCMessageDescriptor *desc,
                           sd_bytes request,
                           ProtobufCMessage **out_msg)
{
    sd_err err = { 0 };
    ProtobufCMessage *m = sd__jobsvc_pb_unpack(desc, request, &err);
    if (m == NULL) {
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return NULL;
    }
    /* Every job-addressed request of the Job API has the id as its first field, a string. */
    const ProtobufCFieldDescriptor *f = &desc->fields[0];
    assert(f->id == 1 && f->type == PROTOBUF_C_TYPE_STRING);
    /* memcpy rather than a cast of the char pointer, which clang flags with -Wcast-align. */
    const char *id;
    memcpy(&id, (const char *)m + f->offset, sizeof(id));
    sd_job *job = sd_jobsvc_find(svc, id);
    if (job == NULL) {
        sd_err_set(&err, SD_ENOTFOUND, "%s: no job \"%s\" (known jobs: %zu)", desc->short_name,
                   id != NULL ? id : "", svc->jobs.len);
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        sd__jobsvc_pb_destroy(m);
        return NULL;
    }
    *out_msg = m;
    return job;
}

bool sd__jobsvc_pipeline_needs_staging(const sd_pb_pipeline *p)
{
    if (p == NULL || p->components == NULL) {
        return false;
    }
    const Org__Apache__Beam__Model__Pipeline__V1__Components *c = p->components;
    for (size_t i = 0; i < c->n_environments; i++) {
        const sd_pb_environment *env = c->environments[i]->value;
        for (size_t j = 0; env != NULL && j < env->n_dependencies; j++) {
            const char *t = env->dependencies[j]->type_urn;
            if (t != NULL && (strcmp(t, SD_URN_ARTIFACT_TYPE_FILE) == 0 ||
                              strcmp(t, SD_URN_ARTIFACT_TYPE_URL) == 0)) {
                return true;
            }
        }
    }
    return false;
}

static void handle_run(sd_jobsvc *svc, void *call, sd_bytes request)
{
    sd_err err = { 0 };
    run_req *req = (run_req *)sd__jobsvc_pb_unpack(&PB(run_job_request__descriptor), request, &err);
    if (req == NULL) {
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return;
    }
    sd_job *job = sd_jobsvc_find(svc, req->preparation_id);
    if (job == NULL) {
        sd_err_set(&err, SD_ENOTFOUND, "Run: no prepared job \"%s\"", req->preparation_id);
    } else if (job->run_requested) {
        sd_err_set(&err, SD_ESTATE, "Run: job %s was already run (state %s)", job->id,
                   sd_job_state_name(job->state));
    } else if (job->state != SD_JOB_STOPPED) {
        sd_err_set(&err, SD_ESTATE, "Run: job %s is %s and cannot be run", job->id,
                   sd_job_state_name(job->state));
    } else if (job->staging == 1) {
        sd_err_set(&err, SD_ESTATE, "Run: artifact staging for job %s is still in progress",
                   job->id);
    } else if (job->staging == 3) {
        sd_err_set(&err, SD_ESTATE, "Run: artifact staging for job %s failed: %s", job->id,
                   job->staging_error != NULL ? job->staging_error : "unknown error");
    }
    sd__jobsvc_pb_destroy(&req->base);
    if (err.code != SD_OK) {
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return;
    }
    job->run_requested = true;
    sd_job_set_state(job, SD_JOB_STARTING);
    sd_status st;
    if (svc->hooks.start == NULL) {
        st = sd_err_set(&err, SD_ESTATE, "no executor is configured to run job %s", job->id);
    } else {
        st = svc->hooks.start(svc->hooks.ctx, job, &err);
        if (st != SD_OK && err.code == SD_OK) {
            sd_err_set(&err, st, "job %s could not start (%s)", job->id, sd_status_name(st));
        }
    }
    if (st != SD_OK) {
        sd_job_fail(job, "%s", sd_err_msg(&err));
        sd__jobsvc_reply_error(svc, call, st, sd_err_msg(&err));
        return;
    }
    run_resp resp;
    PB(run_job_response__init)(&resp);
    resp.job_id = job->id;
    sd__jobsvc_reply(svc, call, &resp.base);
}

static void handle_get_jobs(sd_jobsvc *svc, void *call, sd_bytes request)
{
    sd_err err = { 0 };
    sd__jobsvc_trim_history(svc);
    ProtobufCMessage *req = sd__jobsvc_pb_unpack(&PB(get_jobs_request__descriptor), request, &err);
    if (req == NULL) {
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return;
    }
    sd__jobsvc_pb_destroy(req);
    size_t n = svc->jobs.len;
    job_info *infos = sd_calloc(n == 0 ? 1 : n, sizeof(*infos));
    job_info **ptrs = sd_calloc(n == 0 ? 1 : n, sizeof(*ptrs));
    if (infos == NULL || ptrs == NULL) {
        sd_free(infos);
        sd_free(ptrs);
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory listing jobs");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sd_job *job = *SD_VEC_AT(&svc->jobs, sd_job *, i);
        PB(job_info__init)(&infos[i]);
        infos[i].job_id = job->id;
        infos[i].job_name = (char *)sd_job_name(job);
        infos[i].pipeline_options = job->req->pipeline_options;
        infos[i].state = (Org__Apache__Beam__Model__JobManagement__V1__JobState__Enum)job->state;
        ptrs[i] = &infos[i];
    }
    Org__Apache__Beam__Model__JobManagement__V1__GetJobsResponse resp;
    PB(get_jobs_response__init)(&resp);
    resp.n_job_info = n;
    resp.job_info = ptrs;
    sd__jobsvc_reply(svc, call, &resp.base);
    sd_free(infos);
    sd_free(ptrs);
}

static void handle_get_state(sd_jobsvc *svc, void *call, sd_bytes request)
{
    ProtobufCMessage *req;
    sd_job *job = request_job(svc, call, &PB(get_job_state_request__descriptor), request, &req);
    if (job == NULL) {
        return;
    }
    sd__jobsvc_pb_destroy(req);
    state_event ev;
    PB(job_state_event__init)(&ev);
    Google__Protobuf__Timestamp ts;
    google__protobuf__timestamp__init(&ts);
    sd__jobsvc_timestamp_set(&ts, job->state_time_ms);
    ev.state = (Org__Apache__Beam__Model__JobManagement__V1__JobState__Enum)job->state;
    ev.timestamp = &ts;
    sd__jobsvc_reply(svc, call, &ev.base);
}

static void handle_get_pipeline(sd_jobsvc *svc, void *call, sd_bytes request)
{
    ProtobufCMessage *req;
    sd_job *job = request_job(svc, call, &PB(get_job_pipeline_request__descriptor), request, &req);
    if (job == NULL) {
        return;
    }
    sd__jobsvc_pb_destroy(req);
    Org__Apache__Beam__Model__JobManagement__V1__GetJobPipelineResponse resp;
    PB(get_job_pipeline_response__init)(&resp);
    resp.pipeline = job->req->pipeline;
    sd__jobsvc_reply(svc, call, &resp.base);
}

static void handle_cancel(sd_jobsvc *svc, void *call, sd_bytes request)
{
    ProtobufCMessage *req;
    sd_job *job = request_job(svc, call, &PB(cancel_job_request__descriptor), request, &req);
    if (job == NULL) {
        return;
    }
    sd__jobsvc_pb_destroy(req);
    sd_job_state state = sd__jobsvc_cancel(svc, job);
    Org__Apache__Beam__Model__JobManagement__V1__CancelJobResponse resp;
    PB(cancel_job_response__init)(&resp);
    resp.state = (Org__Apache__Beam__Model__JobManagement__V1__JobState__Enum)state;
    sd__jobsvc_reply(svc, call, &resp.base);
}

static void handle_get_metrics(sd_jobsvc *svc, void *call, sd_bytes request)
{
    ProtobufCMessage *req;
    sd_job *job = request_job(svc, call, &PB(get_job_metrics_request__descriptor), request, &req);
    if (job == NULL) {
        return;
    }
    sd__jobsvc_pb_destroy(req);
    Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsResponse resp;
    PB(get_job_metrics_response__init)(&resp);
    resp.metrics = job->metrics; /* always set: the TypeScript client requires the field */
    sd__jobsvc_reply(svc, call, &resp.base);
}

static void handle_describe_options(sd_jobsvc *svc, void *call, sd_bytes request)
{
    sd_err err = { 0 };
    ProtobufCMessage *req =
        sd__jobsvc_pb_unpack(&PB(describe_pipeline_options_request__descriptor), request, &err);
    if (req == NULL) {
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return;
    }
    sd__jobsvc_pb_destroy(req);

    static const struct {
        const char *name;
        int type;
        const char *description;
        const char *dflt;
    } table[] = {
        { "sundial_clock",
          ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__PIPELINE_OPTION_TYPE__ENUM__STRING,
          "Processing-time clock: 'synthetic' (deterministic test clock that jumps to the next "
          "timer when the pipeline is idle) or 'wall' (the real clock).",
          "synthetic" },
        { "direct_test_splits",
          ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__PIPELINE_OPTION_TYPE__ENUM__OBJECT,
          "Runner-initiated channel splits for tests, as the Beam direct runners take them: "
          "{\"<transform name>\": {\"timings\": [...], \"fractions\": [...]}}.",
          "" },
    };

    enum { N = sizeof(table) / sizeof(table[0]) };

    Org__Apache__Beam__Model__JobManagement__V1__PipelineOptionDescriptor d[N];
    Org__Apache__Beam__Model__JobManagement__V1__PipelineOptionDescriptor *ptrs[N];
    for (size_t i = 0; i < N; i++) {
        PB(pipeline_option_descriptor__init)(&d[i]);
        d[i].name = (char *)table[i].name;
        d[i].type =
            (Org__Apache__Beam__Model__JobManagement__V1__PipelineOptionType__Enum)table[i].type;
        d[i].description = (char *)table[i].description;
        d[i].default_value = (char *)table[i].dflt;
        d[i].group = (char *)"sundial";
        ptrs[i] = &d[i];
    }
    Org__Apache__Beam__Model__JobManagement__V1__DescribePipelineOptionsResponse resp;
    PB(describe_pipeline_options_response__init)(&resp);
    resp.n_options = N;
    resp.options = ptrs;
    sd__jobsvc_reply(svc, call, &resp.base);
}

static void handle_drain(sd_jobsvc *svc, void *call, sd_bytes request)
{
    ProtobufCMessage *req;
    sd_job *job = request_job(svc, call, &PB(drain_job_request__descriptor), request, &req);
    if (job == NULL) {
        return;
    }
    sd__jobsvc_pb_destroy(req);
    sd_err err = { 0 };
    sd_job_state state;
    if (sd__jobsvc_drain(svc, job, &state, &err) != SD_OK) {
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return;
    }
    Org__Apache__Beam__Model__JobManagement__V1__DrainJobResponse resp;
    PB(drain_job_response__init)(&resp);
    resp.state = (Org__Apache__Beam__Model__JobManagement__V1__JobState__Enum)state;
    sd__jobsvc_reply(svc, call, &resp.base);
}

static void *open_state_stream(sd_jobsvc *svc, void *call, sd_bytes request)
{
    ProtobufCMessage *req;
    sd_job *job = request_job(svc, call, &PB(get_job_state_request__descriptor), request, &req);
    if (job == NULL) {
        return NULL;
    }
    sd__jobsvc_pb_destroy(req);
    sd__jobsvc_rec *rec = sd__jobsvc_rec_create(svc, SD__REC_STATE_STREAM, call);
    if (rec == NULL) {
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory opening a state stream");
        return NULL;
    }
    rec->job = job;
    (void)send_state(svc, rec, job->state, job->state_time_ms);
    if (sd_job_state_is_terminal(job->state)) {
        sd__jobsvc_rec_finish(svc, rec, SD_RPC_OK, NULL);
    }
    return rec;
}

static void *open_message_stream(sd_jobsvc *svc, void *call, sd_bytes request)
{
    ProtobufCMessage *req;
    sd_job *job = request_job(svc, call, &PB(job_messages_request__descriptor), request, &req);
    if (job == NULL) {
        return NULL;
    }
    sd__jobsvc_pb_destroy(req);
    sd__jobsvc_rec *rec = sd__jobsvc_rec_create(svc, SD__REC_MESSAGE_STREAM, call);
    if (rec == NULL) {
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory opening a message stream");
        return NULL;
    }
    rec->job = job;
    bool sent_terminal = false;
    for (size_t i = 0; i < sd__jobsvc_job_history_len(job) && !rec->finished; i++) {
        const sd__jobsvc_job_entry *e = sd__jobsvc_job_history_at(job, i);
        (void)send_entry(svc, rec, e);
        if (e->is_state && sd_job_state_is_terminal((sd_job_state)e->value)) {
            sent_terminal = true;
        }
    }
    if (sd_job_state_is_terminal(job->state)) {
        if (!sent_terminal) {
            /* The ring dropped the terminal event under a flood of later messages. */
            sd__jobsvc_job_entry e = {
                .seq = 0, .time_ms = job->state_time_ms, .is_state = true, .value = (int)job->state
            };
            (void)send_entry(svc, rec, &e);
        }
        sd__jobsvc_rec_finish(svc, rec, SD_RPC_OK, NULL);
    }
    return rec;
}

/* ================================================================ dispatch */

void *sd__jobsvc_on_open(sd_jobsvc *svc, sd__jobsvc_method m, void *call, sd_bytes request)
{
    switch (m) {
    case SD__JS_PREPARE:
        return sd__jobsvc_prepare_open(svc, call, request);
    case SD__JS_RUN:
        handle_run(svc, call, request);
        return NULL;
    case SD__JS_GET_JOBS:
        handle_get_jobs(svc, call, request);
        return NULL;
    case SD__JS_GET_STATE:
        handle_get_state(svc, call, request);
        return NULL;
    case SD__JS_GET_PIPELINE:
        handle_get_pipeline(svc, call, request);
        return NULL;
    case SD__JS_CANCEL:
        handle_cancel(svc, call, request);
        return NULL;
    case SD__JS_DRAIN:
        handle_drain(svc, call, request);
        return NULL;
    case SD__JS_GET_STATE_STREAM:
        return open_state_stream(svc, call, request);
    case SD__JS_GET_MESSAGE_STREAM:
        return open_message_stream(svc, call, request);
    case SD__JS_GET_JOB_METRICS:
        handle_get_metrics(svc, call, request);
        return NULL;
    case SD__JS_DESCRIBE_OPTIONS:
        handle_describe_options(svc, call, request);
        return NULL;
    case SD__JS_RESOLVE_ARTIFACTS:
    case SD__JS_GET_ARTIFACT:
    case SD__JS_REVERSE_RETRIEVAL:
        return sd__jobsvc_artifacts_open(svc, m, call, request);
    default:
        sd__jobsvc_reply_error(svc, call, SD_EUNIMPL, "unknown job service method");
        return NULL;
    }
}

void sd__jobsvc_on_message(sd_jobsvc *svc, void *rec_ptr, sd_bytes msg)
{
    sd__jobsvc_rec *rec = rec_ptr;
    if (rec == NULL || rec->finished) {
        return;
    }
    if (rec->kind == SD__REC_STAGING) {
        sd__jobsvc_artifacts_message(svc, rec, msg);
    }
}

void sd__jobsvc_on_half_close(sd_jobsvc *svc, void *rec_ptr)
{
    sd__jobsvc_rec *rec = rec_ptr;
    if (rec == NULL || rec->finished) {
        return;
    }
    if (rec->kind == SD__REC_STAGING) {
        sd__jobsvc_artifacts_half_close(svc, rec);
    }
}

void sd__jobsvc_on_close(sd_jobsvc *svc, void *rec_ptr, bool cancelled)
{
    sd__jobsvc_rec *rec = rec_ptr;
    if (rec == NULL) {
        return;
    }
    rec_unlink(svc, rec);
    sd__jobsvc_prepare_call_closed(rec);
    sd__jobsvc_artifacts_close(svc, rec, cancelled);
    sd_free(rec);
}

void sd__jobsvc_pump(sd_jobsvc *svc)
{
    for (sd__jobsvc_rec *rec = svc->recs, *next; rec != NULL; rec = next) {
        next = rec->next;
        if (rec->kind == SD__REC_GET_ARTIFACT && rec->pump_wanted && !rec->finished) {
            sd__jobsvc_artifacts_pump(svc, rec);
        }
    }
}

/* ================================================================ invariants */

static bool job_known(const sd_jobsvc *svc, const sd_job *job)
{
    for (size_t i = 0; i < svc->jobs.len; i++) {
        if (*SD_VEC_AT(&svc->jobs, sd_job *, i) == job) {
            return true;
        }
    }
    return false;
}

const char *sd__jobsvc_check(const sd_jobsvc *svc)
{
    if (svc->magic != SD__JOBSVC_MAGIC) {
        return "service magic is wrong";
    }
    if (sd_map_len(&svc->by_id) != svc->jobs.len) {
        return "id map and job list differ in size";
    }
    if (svc->next_job <= svc->jobs.len) {
        return "job counter is behind the number of jobs";
    }
    for (size_t i = 0; i < svc->jobs.len; i++) {
        const sd_job *job = *SD_VEC_AT(&svc->jobs, sd_job *, i);
        if (job->magic != SD__JOB_MAGIC || job->svc != svc) {
            return "job magic or owner is wrong";
        }
        if (sd_map_get_str(&svc->by_id, job->id) != job) {
            return "job is not found under its own id";
        }
        if (job->ring_len > SD_JOB_HISTORY_MAX || job->ring_start >= SD_JOB_HISTORY_MAX) {
            return "history ring bounds are wrong";
        }
        for (size_t k = 1; k < job->ring_len; k++) {
            if (sd__jobsvc_job_history_at(job, k)->seq <=
                sd__jobsvc_job_history_at(job, k - 1)->seq) {
                return "history entries are out of order";
            }
        }
        if (job->ring_len > 0 &&
            sd__jobsvc_job_history_at(job, job->ring_len - 1)->seq >= job->next_seq) {
            return "history sequence counter is behind";
        }
        if ((int)job->state < SD_JOB_STOPPED || (int)job->state > SD_JOB_UPDATING) {
            return "job state is out of range";
        }
        if (job->run_requested && job->state == SD_JOB_STOPPED) {
            return "a job that was run is still STOPPED";
        }
        if (job->state == SD_JOB_FAILED && job->error == NULL && job->ring_len == 0) {
            return "a FAILED job has no history";
        }
        if (job->staging < 0 || job->staging > 3 ||
            (job->staging_error != NULL && job->staging != 3)) {
            return "staging state and staging error disagree";
        }
        if (job->metrics == NULL || job->req == NULL || job->req->pipeline == NULL ||
            job->req->pipeline_options == NULL) {
            return "job lost its request, pipeline, options or metrics";
        }
    }
    const sd__jobsvc_rec *prev = NULL;
    for (const sd__jobsvc_rec *rec = svc->recs; rec != NULL; prev = rec, rec = rec->next) {
        if (rec->prev != prev) {
            return "call record list links are broken";
        }
        if (rec->job != NULL && !job_known(svc, rec->job)) {
            return "call record points at an unknown job";
        }
        if ((rec->kind == SD__REC_STATE_STREAM || rec->kind == SD__REC_MESSAGE_STREAM) &&
            !rec->finished && (rec->job == NULL || sd_job_state_is_terminal(rec->job->state))) {
            return "a state or message stream is still open on a terminal job";
        }
    }
    size_t it = 0;
    sd_bytes key;
    void *value;
    while (sd_map_next(&svc->staged, &it, &key, &value)) {
        if (!job_known(svc, value)) {
            return "staged file belongs to an unknown job";
        }
    }
    return NULL;
}
