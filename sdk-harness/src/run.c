/*
 * Sundial C SDK: running a pipeline — the Job API client and the runner it talks to.
 *
 * sd_pipeline_run() is synchronous for the caller and asynchronous underneath: every call is
 * made on the runtime's loop thread, and the caller waits on a condition variable.
 *
 *   Prepare(pipeline, options) -> Run -> GetMessageStream (state events + messages, ends after
 *   a terminal state) -> GetJobMetrics
 *
 * The message stream doubles as the state watcher: the job service replays the job's history
 * (messages and state changes in order) and finishes the stream after a terminal state, so one
 * call yields the final state and every error message that explains it, with no polling delay.
 *
 * The runner. Given an endpoint, the job goes to that job server (sundial serve, or any Beam
 * job server). Without one, an embedded runner (runner/server/embed.h) is started in this
 * process for the call, on a free loopback port, and stopped after it.
 *
 * Environment: LOOPBACK (default) points beam:env:external:v1 at this process's worker pool;
 * PROCESS names this program (or opts.process_command) in beam:env:process:v1, and the runner
 * starts it with the boot flags that sd_sdk_main() recognises.
 */
/* dladdr() (finding the embedded runner next to this library) is a GNU extension. */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "google/protobuf/struct.pb-c.h"
#include "org/apache/beam/model/job_management/v1/beam_artifact_api.pb-c.h"
#include "org/apache/beam/model/job_management/v1/beam_job_api.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/transport/rpc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/sdk_int.h"
#include "sundial/embedded.h"

#define JM(x)       Org__Apache__Beam__Model__JobManagement__V1__##x
#define JMF(x)      org__apache__beam__model__job_management__v1__##x
#define JME(x)      ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__##x
#define JOB_PATH(m) "/org.apache.beam.model.job_management.v1.JobService/" m

/* ================================================================ the runner */

/*
 * The embedded runner lives in libsundial_embedded, which the SDK does not link (a worker
 * must not carry a runner). It is found through <sundial/embedded.h>: a weak reference to
 * sd_embedded_runner_v1 resolves when the program links the embedded library; otherwise the
 * shared library next to this one is loaded on first use. The loaded library stays loaded.
 */
extern const sd_embedded_runner sd_embedded_runner_v1 __attribute__((weak));

/* The directory part of the file this code was loaded from ("" when unknown). */
static void own_dir(char *out, size_t size)
{
    static const char anchor = 0;
    Dl_info info;
    out[0] = '\0';
    if (dladdr(&anchor, &info) != 0 && info.dli_fname != NULL) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash != NULL) {
            snprintf(out, size, "%.*s/", (int)(slash - info.dli_fname), info.dli_fname);
        }
    }
}

static const sd_embedded_runner *find_embedded(sd_err *err)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const sd_embedded_runner *found;
    static char why[512];
    if (&sd_embedded_runner_v1 != NULL) {
        found = &sd_embedded_runner_v1;
    }
    pthread_mutex_lock(&lock);
    if (found == NULL && why[0] == '\0') {
        char dir[4096], path[4200];
        own_dir(dir, sizeof(dir));
        snprintf(path, sizeof(path), "%slibsundial_embedded.so.%d", dir, SD_VERSION_MAJOR);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        const sd_embedded_runner *r = h != NULL ? dlsym(h, "sd_embedded_runner_v1") : NULL;
        if (r == NULL) {
            const char *e = dlerror();
            snprintf(why, sizeof(why), "%s", e != NULL ? e : "sd_embedded_runner_v1 missing");
        } else if (r->abi != SD_EMBEDDED_RUNNER_ABI) {
            snprintf(why, sizeof(why), "%.300s speaks embedded-runner ABI %u, this SDK %u", path,
                     (unsigned)r->abi, (unsigned)SD_EMBEDDED_RUNNER_ABI);
        } else {
            found = r;
        }
    }
    const sd_embedded_runner *r = found;
    pthread_mutex_unlock(&lock);
    if (r == NULL) {
        sd_err_set(err, SD_EUNAVAIL,
                   "no embedded runner: link Sundial::embedded (pkg-config sundial-embedded) or "
                   "give sd_run_options.endpoint (%s)",
                   why);
    }
    return r;
}

struct sd__runner {
    const sd_embedded_runner *impl;
    void *handle;
    char endpoint[128];
};

sd_status sd__runner_start(bool wall_clock, sd__runner **out, const char **endpoint, sd_err *err)
{
    const sd_embedded_runner *impl = find_embedded(err);
    if (impl == NULL) {
        return SD_EUNAVAIL;
    }
    sd__runner *r = sd_calloc(1, sizeof(*r));
    const char *ep = NULL;
    if (r == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    r->impl = impl;
    sd_status st = impl->start(wall_clock, &r->handle, &ep, err);
    if (st != SD_OK) {
        sd_free(r);
        return st;
    }
    snprintf(r->endpoint, sizeof(r->endpoint), "%s", ep);
    *out = r;
    *endpoint = r->endpoint;
    return SD_OK;
}

typedef struct forget_arg {
    sd__rt *rt;
    const char *target;
} forget_arg;

static void forget_on_loop(void *arg)
{
    forget_arg *f = arg;
    sd__rt_channel_forget(f->rt, f->target);
}

void sd__runner_stop(sd__runner *r)
{
    if (r == NULL) {
        return;
    }
    r->impl->stop(r->handle);
    /* Its workers may have left connections to it in the idle set. */
    sd_err err;
    sd_err_clear(&err);
    forget_arg f = { NULL, r->endpoint };
    if (sd__rt_get(&f.rt, &err) == SD_OK) {
        SD_IGNORE(sd__rt_call(f.rt, forget_on_loop, &f));
    }
    sd_free(r);
}

/* The public face of the same runner (<sundial/runner.h>). */
struct sd_local_runner {
    sd__runner *r;
    const char *endpoint;
};

sd_status sd_local_runner_start(bool wall_clock, sd_local_runner **out, sd_err *err)
{
    if (out == NULL) {
        return sd_err_set(err, SD_EINVAL, "sd_local_runner_start: NULL out");
    }
    *out = NULL;
    sd_local_runner *lr = sd_calloc(1, sizeof(*lr));
    if (lr == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    sd_status st = sd__runner_start(wall_clock, &lr->r, &lr->endpoint, err);
    if (st != SD_OK) {
        sd_free(lr);
        return st;
    }
    *out = lr;
    return SD_OK;
}

const char *sd_local_runner_endpoint(const sd_local_runner *r)
{
    return r != NULL ? r->endpoint : NULL;
}

void sd_local_runner_stop(sd_local_runner *r)
{
    if (r == NULL) {
        return;
    }
    sd__runner_stop(r->r);
    sd_free(r);
}

/* ================================================================ the job client */

typedef struct jc {
    sd__rt *rt;
    const char *endpoint;
    sd_rpc_channel *ch;
    bool keep_channel; /* the runner outlives the run: keep the connection for the next */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the current unary call; chain: Prepare's answer starts Run, Run's opens the message
     * stream, on the loop thread (no hand-over to the calling thread in between) */
    int chain; /* CHAIN_* */
    const char *path;
    sd_bytes req;
    int timeout_ms;
    bool done;
    sd_rpc_code code;
    char msg[1024];
    sd_buf resp;
    sd_buf run_req; /* Run's request when the chain starts it */
    /* the message stream */
    char *job_id;
    sd_rpc_stream *ms;
    bool ms_closed;
    sd_rpc_code ms_code;
    int state;
    sd_buf errors;
    sd_err err;
    /* GetJobMetrics, started on the loop thread as soon as a terminal state arrives (a hand-
     * over to the calling thread and back saved); collect_metrics waits for it. */
    bool m_started;
    bool m_done;
    sd_rpc_code m_code;
    char m_msg[256];
    sd_buf m_resp;
    /* the trace (sd_run_options.trace): GetArtifact of sundial:artifact:trace:v1 */
    bool t_done;
    sd_rpc_code t_code;
    char t_msg[256];
    sd_buf t_data;
} jc;

static void jc_signal(jc *c)
{
    pthread_mutex_lock(&c->mu);
    c->done = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void jc_open(void *arg)
{
    jc *c = arg;
    sd_status st = c->keep_channel
                       ? sd__rt_channel_take(c->rt, c->endpoint, &c->ch, &c->err)
                       : sd_rpc_channel_create(sd__rt_rpc(c->rt), c->endpoint, &c->ch, &c->err);
    if (st != SD_OK) {
        c->ch = NULL;
    }
}

static void jc_close(void *arg)
{
    jc *c = arg;
    if (c->ch != NULL && c->keep_channel) {
        sd__rt_channel_give(c->rt, c->endpoint, c->ch);
    } else if (c->ch != NULL) {
        sd_rpc_channel_destroy(c->ch);
    }
    c->ch = NULL;
}

/* m packed into out (empty, the caller's). */
static sd_status pack(const ProtobufCMessage *m, sd_buf *out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    sd_status st = sd_buf_reserve(out, n > 0 ? n : 1);
    if (st == SD_OK) {
        out->len = protobuf_c_message_pack(m, out->data);
    }
    return st;
}

enum { CHAIN_NONE, CHAIN_RUN, CHAIN_WATCH };

static void ms_open(void *arg);
static void unary_start(void *arg);

/*
 * Loop thread, Prepare or Run answered OK with c->chain set: go on with the next step here.
 * After Prepare: Run, with c->req pointing into c->run_req. After Run: c->job_id, and the
 * message stream opened. False when this step has ended the chain (c->code says how).
 */
static bool chain_next(jc *c)
{
    if (c->chain == CHAIN_RUN) {
        JM(PrepareJobResponse) *pr =
            JMF(prepare_job_response__unpack)(NULL, c->resp.len, c->resp.data);
        if (pr == NULL) {
            c->code = SD_RPC_INTERNAL;
            snprintf(c->msg, sizeof(c->msg), "malformed PrepareJobResponse");
            return false;
        }
        JM(RunJobRequest) run = JME(RUN_JOB_REQUEST__INIT);
        run.preparation_id = pr->preparation_id;
        run.retrieval_token = pr->staging_session_token;
        sd_buf_reset(&c->run_req);
        sd_status st = pack(&run.base, &c->run_req);
        JMF(prepare_job_response__free_unpacked)(pr, NULL);
        if (st != SD_OK) {
            c->code = SD_RPC_RESOURCE_EXHAUSTED;
            snprintf(c->msg, sizeof(c->msg), "out of memory");
            return false;
        }
        c->chain = CHAIN_WATCH;
        c->path = JOB_PATH("Run");
        c->req = sd_buf_bytes(&c->run_req);
        unary_start(c);
        return !c->done;
    }
    JM(RunJobResponse) *rr = JMF(run_job_response__unpack)(NULL, c->resp.len, c->resp.data);
    c->chain = CHAIN_NONE;
    if (rr == NULL || rr->job_id == NULL || (c->job_id = sd_strdup(rr->job_id)) == NULL) {
        c->code = SD_RPC_INTERNAL;
        snprintf(c->msg, sizeof(c->msg), "%s",
                 rr == NULL ? "malformed RunJobResponse" : "no job id");
    } else {
        ms_open(c);
    }
    if (rr != NULL) {
        JMF(run_job_response__free_unpacked)(rr, NULL);
    }
    return false;
}

static void unary_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    jc *c = ctx;
    c->code = code;
    snprintf(c->msg, sizeof(c->msg), "%s", message);
    sd_buf_reset(&c->resp);
    if (sd_buf_append_bytes(&c->resp, response) != SD_OK) {
        c->code = SD_RPC_RESOURCE_EXHAUSTED;
        snprintf(c->msg, sizeof(c->msg), "out of memory");
    }
    if (c->code == SD_RPC_OK && c->chain != CHAIN_NONE && chain_next(c)) {
        return; /* the next call of the chain is on its way */
    }
    jc_signal(c);
}

static void unary_start(void *arg)
{
    jc *c = arg;
    sd_err err;
    sd_err_clear(&err);
    if (sd_rpc_unary(c->ch, c->path, c->req, NULL, 0, c->timeout_ms, unary_done, c, &err) !=
        SD_OK) {
        c->code = SD_RPC_UNAVAILABLE;
        snprintf(c->msg, sizeof(c->msg), "%s", sd_err_msg(&err));
        jc_signal(c);
    }
}

/* A unary call; OK only when gRPC said OK. The response is in c->resp. */
static sd_status
jc_unary(jc *c, const char *path, const ProtobufCMessage *m, int timeout_ms, sd_err *err)
{
    sd_buf req;
    sd_buf_init(&req, 0);
    if (pack(m, &req) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    c->path = path;
    c->req = sd_buf_bytes(&req);
    c->timeout_ms = timeout_ms;
    c->done = false;
    /* Not waited for: unary_start signals a failure to start as the answer would. Started
     * here when the loop is idle (this thread holds no lock). */
    sd_status st = sd_rpc_run_soon(sd__rt_rpc(c->rt), unary_start, c);
    if (st == SD_OK) {
        pthread_mutex_lock(&c->mu);
        while (!c->done) {
            pthread_cond_wait(&c->cv, &c->mu);
        }
        pthread_mutex_unlock(&c->mu);
    }
    sd_buf_deinit(&req);
    if (st != SD_OK) {
        return sd_err_set(err, st, "%s: cannot start the call", path);
    }
    if (c->code != SD_RPC_OK) {
        sd_status code = c->code == SD_RPC_UNAVAILABLE         ? SD_EUNAVAIL
                         : c->code == SD_RPC_DEADLINE_EXCEEDED ? SD_ETIMEOUT
                         : c->code == SD_RPC_UNIMPLEMENTED     ? SD_EUNIMPL
                                                               : SD_EINVAL;
        return sd_err_set(err, code, "%s at %s failed (gRPC %d): %s", c->path, c->endpoint,
                          (int)c->code, c->msg);
    }
    return SD_OK;
}

static bool terminal(int state)
{
    return state == SD_RUN_DONE || state == SD_RUN_FAILED || state == SD_RUN_CANCELLED ||
           state == 6 /* UPDATED */ || state == SD_RUN_DRAINED;
}

static void metrics_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    jc *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->m_code = code;
    snprintf(c->m_msg, sizeof(c->m_msg), "%s", message);
    if (sd_buf_append_bytes(&c->m_resp, response) != SD_OK) {
        c->m_code = SD_RPC_RESOURCE_EXHAUSTED;
        snprintf(c->m_msg, sizeof(c->m_msg), "out of memory");
    }
    c->m_done = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Loop thread: ask for the job's metrics (its state is terminal). */
static void metrics_start(void *arg)
{
    jc *c = arg;
    JM(GetJobMetricsRequest) m = JME(GET_JOB_METRICS_REQUEST__INIT);
    sd_buf req;
    sd_buf_init(&req, 0);
    m.job_id = c->job_id;
    sd_status st = pack(&m.base, &req);
    if (st == SD_OK) {
        st = sd_rpc_unary(c->ch, JOB_PATH("GetJobMetrics"), sd_buf_bytes(&req), NULL, 0, 30000,
                          metrics_done, c, NULL);
    }
    sd_buf_deinit(&req);
    pthread_mutex_lock(&c->mu);
    c->m_started = st == SD_OK; /* else collect_metrics tries once more */
    pthread_mutex_unlock(&c->mu);
}

static void ms_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    jc *c = ctx;
    (void)s;
    JM(JobMessagesResponse) *r = JMF(job_messages_response__unpack)(NULL, msg.len, msg.ptr);
    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (r->response_case == JME(JOB_MESSAGES_RESPONSE__RESPONSE_STATE_RESPONSE) &&
        r->state_response != NULL) {
        c->state = (int)r->state_response->state;
    } else if (r->response_case == JME(JOB_MESSAGES_RESPONSE__RESPONSE_MESSAGE_RESPONSE) &&
               r->message_response != NULL &&
               r->message_response->importance ==
                   JME(JOB_MESSAGE__MESSAGE_IMPORTANCE__JOB_MESSAGE_ERROR)) {
        if (c->errors.len > 0) {
            SD_IGNORE(sd_buf_append_byte(&c->errors, '\n'));
        }
        SD_IGNORE(sd_buf_append_str(&c->errors, r->message_response->message_text));
    }
    bool ask = terminal(c->state) && !c->m_started && c->ch != NULL;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    JMF(job_messages_response__free_unpacked)(r, NULL);
    if (ask) {
        metrics_start(c);
    }
}

static void ms_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    jc *c = ctx;
    (void)s;
    pthread_mutex_lock(&c->mu);
    c->ms = NULL;
    c->ms_closed = true;
    c->ms_code = code;
    if (code != SD_RPC_OK && !terminal(c->state)) {
        snprintf(c->msg, sizeof(c->msg), "GetMessageStream closed: %s", message);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void ms_open(void *arg)
{
    jc *c = arg;
    sd_err err;
    sd_buf req;
    JM(JobMessagesRequest) m = JME(JOB_MESSAGES_REQUEST__INIT);
    sd_rpc_stream_handler h = { ms_message, ms_close, c };
    sd_err_clear(&err);
    sd_buf_init(&req, 0);
    m.job_id = c->job_id;
    if (sd_buf_reserve(&req, protobuf_c_message_get_packed_size(&m.base) + 1) != SD_OK ||
        sd_rpc_stream_open(c->ch, JOB_PATH("GetMessageStream"), NULL, 0, &h, &c->ms, &err) !=
            SD_OK) {
        pthread_mutex_lock(&c->mu);
        c->ms_closed = true;
        c->ms_code = SD_RPC_UNAVAILABLE;
        snprintf(c->msg, sizeof(c->msg), "GetMessageStream: %s", sd_err_msg(&err));
        pthread_mutex_unlock(&c->mu);
        sd_buf_deinit(&req);
        return;
    }
    req.len = protobuf_c_message_pack(&m.base, req.data);
    SD_IGNORE(sd_rpc_stream_send(c->ms, sd_buf_bytes(&req)));
    sd_rpc_stream_half_close(c->ms);
    sd_buf_deinit(&req);
}

static void ms_cancel(void *arg)
{
    jc *c = arg;
    if (c->ms != NULL) {
        sd_rpc_stream_cancel(c->ms);
    }
}

/* One string-valued option entry in a, or NULL on out-of-memory (or a NULL name or value). */
static Google__Protobuf__Struct__FieldsEntry *
string_option(sd_arena *a, const char *name, const char *value)
{
    Google__Protobuf__Struct__FieldsEntry *x =
        sd__pb_alloc(a, &google__protobuf__struct__fields_entry__descriptor);
    Google__Protobuf__Value *xv = sd__pb_alloc(a, &google__protobuf__value__descriptor);
    if (x == NULL || xv == NULL || name == NULL || value == NULL) {
        return NULL;
    }
    xv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    xv->string_value = sd_arena_strdup(a, value);
    x->key = sd_arena_strdup(a, name);
    x->value = xv;
    return xv->string_value == NULL || x->key == NULL ? NULL : x;
}

/* Pipeline options: the clock choice, the caller's extra options, and the per-element late
 * policy of the pipeline's WindowIntos (drop_late: "" for none). */
static Google__Protobuf__Struct *
make_options(sd_arena *a, bool wall_clock, const sd_run_options *o, const char *drop_late)
{
    Google__Protobuf__Struct *s = sd__pb_alloc(a, &google__protobuf__struct__descriptor);
    Google__Protobuf__Struct__FieldsEntry *e =
        sd__pb_alloc(a, &google__protobuf__struct__fields_entry__descriptor);
    Google__Protobuf__Value *v = sd__pb_alloc(a, &google__protobuf__value__descriptor);
    size_t n_extra = o->option_names != NULL && o->option_values != NULL ? o->n_options : 0;
    Google__Protobuf__Struct__FieldsEntry **arr = sd_arena_alloc(a, (4 + n_extra) * sizeof(*arr));
    if (s == NULL || e == NULL || v == NULL || arr == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < n_extra; i++) {
        arr[1 + i] = string_option(a, o->option_names[i], o->option_values[i]);
        if (arr[1 + i] == NULL) {
            return NULL;
        }
    }
    if (drop_late[0] != '\0') {
        arr[1 + n_extra] = string_option(a, "beam:option:sundial_drop_late_elements:v1", drop_late);
        if (arr[1 + n_extra] == NULL) {
            return NULL;
        }
        n_extra++;
    }
    /* Schedules: the runner reads and writes the files (it runs on this machine). */
    const char *sched_names[2] = { "beam:option:sundial_record_schedule:v1",
                                   "beam:option:sundial_replay_schedule:v1" };
    const char *sched_files[2] = { o->record_schedule, o->replay_schedule };
    for (int k = 0; k < 2; k++) {
        if (sched_files[k] != NULL) {
            arr[1 + n_extra] = string_option(a, sched_names[k], sched_files[k]);
            if (arr[1 + n_extra] == NULL) {
                return NULL;
            }
            n_extra++;
        }
    }
    v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    v->string_value = wall_clock ? "wall" : "synthetic";
    e->key = "beam:option:sundial_clock:v1";
    e->value = v;
    arr[0] = e;
    s->n_fields = 1 + n_extra;
    s->fields = arr;
    return s;
}

/* ---- watermarks in the job's metrics ---- */

static const char *mi_label(const pb_MonitoringInfo *mi, const char *key)
{
    for (size_t k = 0; k < mi->n_labels; k++) {
        if (strcmp(mi->labels[k]->key, key) == 0) {
            return mi->labels[k]->value;
        }
    }
    return NULL;
}

/* The entry (id, name) of a watermark list, added (input and output SD_TIME_MIN) when new. */
static sd_run_watermark *
wm_entry(sd_run_watermark **list, size_t *n, const char *id, const char *name)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*list)[i].id, id) == 0 && strcmp((*list)[i].name, name) == 0) {
            return &(*list)[i];
        }
    }
    sd_run_watermark *grown = sd_realloc(*list, (*n + 1) * sizeof(**list));
    if (grown == NULL) {
        return NULL;
    }
    *list = grown;
    sd_run_watermark *e = &grown[*n];
    e->id = sd_strdup(id);
    e->name = sd_strdup(name);
    e->input = SD_TIME_MIN;
    e->output = SD_TIME_MIN;
    if (e->id == NULL || e->name == NULL) {
        sd_free(e->id);
        sd_free(e->name);
        return NULL;
    }
    (*n)++;
    return e;
}

/*
 * Stage watermarks (the runner's input/output_watermark metrics) and partition watermarks
 * (the sources' partition_watermark metrics, one per step: the one with the latest wall time
 * wins, a later one in the list on a tie) from a list of monitoring infos. Best-effort: a
 * metric that cannot be read or stored is skipped.
 */
static void
collect_watermarks(pb_MonitoringInfo *const *mis, size_t n, sd_run_result *res, int64_t *part_ts)
{
    for (size_t i = 0; i < n; i++) {
        const pb_MonitoringInfo *mi = mis[i];
        if (mi->urn == NULL) {
            continue;
        }
        bool in = strcmp(mi->urn, SD_URN_METRIC_SUNDIAL_INPUT_WATERMARK) == 0;
        bool out = strcmp(mi->urn, SD_URN_METRIC_SUNDIAL_OUTPUT_WATERMARK) == 0;
        bool part = strcmp(mi->urn, SD_URN_METRIC_PARTITION_WM) == 0;
        /* The runner's stage metrics name their stage in SUNDIAL_STAGE; a source's partition
         * watermark (an SDK's metric) its transform in PTRANSFORM. */
        const char *id = mi_label(mi, part ? SD_LABEL_PTRANSFORM : "SUNDIAL_STAGE");
        const char *name =
            part ? mi_label(mi, SD_LABEL_SUNDIAL_PARTITION) : mi_label(mi, "SUNDIAL_NAME");
        sd_reader rd = sd_reader_make(sd_bytes_make(mi->payload.data, mi->payload.len));
        uint64_t ts, v;
        if (!(in || out || part) || id == NULL || sd_reader_varint(&rd, &ts) != SD_OK ||
            sd_reader_varint(&rd, &v) != SD_OK) {
            continue;
        }
        sd_run_watermark *e =
            part ? wm_entry(&res->partition_watermarks, &res->n_partition_watermarks, id,
                            name != NULL ? name : "")
                 : wm_entry(&res->stage_watermarks, &res->n_stage_watermarks, id,
                            name != NULL ? name : id);
        if (e == NULL) {
            continue;
        }
        if (in) {
            e->input = (sd_time)v;
        } else if (out) {
            e->output = (sd_time)v;
        } else {
            size_t k = (size_t)(e - res->partition_watermarks);
            if (k < 256 && (int64_t)ts >= part_ts[k]) {
                part_ts[k] = (int64_t)ts;
                e->output = (sd_time)v;
            }
        }
    }
}

/* ---------------------------------------------------------------- the trace */

static void trace_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    jc *c = ctx;
    (void)s;
    JM(GetArtifactResponse) *r = JMF(get_artifact_response__unpack)(NULL, msg.len, msg.ptr);
    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (sd_buf_append(&c->t_data, r->data.data, r->data.len) != SD_OK) {
        snprintf(c->t_msg, sizeof(c->t_msg), "out of memory");
        c->t_code = SD_RPC_RESOURCE_EXHAUSTED;
    }
    pthread_mutex_unlock(&c->mu);
    JMF(get_artifact_response__free_unpacked)(r, NULL);
}

static void trace_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    jc *c = ctx;
    (void)s;
    pthread_mutex_lock(&c->mu);
    if (c->t_code == SD_RPC_OK) {
        c->t_code = code;
        snprintf(c->t_msg, sizeof(c->t_msg), "%s", message);
    }
    c->t_done = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Loop thread: GetArtifact of the job's trace (the artifact a Sundial job server serves). */
static void trace_open(void *arg)
{
    jc *c = arg;
    sd_err err;
    sd_buf req;
    sd_rpc_stream *s = NULL;
    Org__Apache__Beam__Model__Pipeline__V1__ArtifactInformation a =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ARTIFACT_INFORMATION__INIT;
    JM(GetArtifactRequest) m = JME(GET_ARTIFACT_REQUEST__INIT);
    sd_rpc_stream_handler h = { trace_message, trace_close, c };
    a.type_urn = (char *)SD_RUN_TRACE_ARTIFACT;
    a.type_payload.data = (uint8_t *)c->job_id;
    a.type_payload.len = strlen(c->job_id);
    m.artifact = &a;
    sd_err_clear(&err);
    sd_buf_init(&req, 0);
    if (pack(&m.base, &req) != SD_OK ||
        sd_rpc_stream_open(c->ch,
                           "/org.apache.beam.model.job_management.v1.ArtifactRetrievalService/"
                           "GetArtifact",
                           NULL, 0, &h, &s, &err) != SD_OK) {
        pthread_mutex_lock(&c->mu);
        c->t_done = true;
        c->t_code = SD_RPC_UNAVAILABLE;
        snprintf(c->t_msg, sizeof(c->t_msg), "%s", sd_err_msg(&err));
        pthread_mutex_unlock(&c->mu);
        sd_buf_deinit(&req);
        return;
    }
    SD_IGNORE(sd_rpc_stream_send(s, sd_buf_bytes(&req)));
    sd_rpc_stream_half_close(s);
    sd_buf_deinit(&req);
}

/* The job's time trace into res->trace (JSON lines). A runner that keeps none: a warning. */
static void collect_trace(jc *c, sd_run_result *res)
{
    if (sd__rt_call(c->rt, trace_open, c) != SD_OK) {
        SD_WARN("sdk", "job %s: cannot ask for its trace", c->job_id);
        return;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->t_done) {
        pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    if (c->t_code != SD_RPC_OK) {
        SD_WARN("sdk", "job %s: no time trace from %s: %s (gRPC %d)", c->job_id, c->endpoint,
                c->t_msg, (int)c->t_code);
        return;
    }
    if (sd_buf_append_byte(&c->t_data, '\0') != SD_OK) {
        return;
    }
    size_t len = 0;
    res->trace = (char *)sd_buf_take(&c->t_data, &len);
    res->trace_len = len - 1;
}

/* Wait for the GetJobMetrics call started on the loop thread, if one was. */
static bool metrics_wait(jc *c)
{
    pthread_mutex_lock(&c->mu);
    bool started = c->m_started;
    while (started && !c->m_done) {
        pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return started;
}

static sd_status collect_metrics(jc *c, sd_run_result *res, sd_err *err)
{
    /* Started when the terminal state arrived; else now, once more. */
    if (!metrics_wait(c) && (sd__rt_call(c->rt, metrics_start, c) != SD_OK || !metrics_wait(c))) {
        return sd_err_set(err, SD_EUNAVAIL, "GetJobMetrics at %s: cannot start the call",
                          c->endpoint);
    }
    if (c->m_code != SD_RPC_OK) {
        return sd_err_set(err, SD_EUNAVAIL, "GetJobMetrics at %s failed (gRPC %d): %s", c->endpoint,
                          (int)c->m_code, c->m_msg);
    }
    const sd_buf *resp = &c->m_resp;
    JM(GetJobMetricsResponse) *r =
        JMF(get_job_metrics_response__unpack)(NULL, resp->len, resp->data);
    if (r == NULL || r->metrics == NULL) {
        if (r != NULL) {
            JMF(get_job_metrics_response__free_unpacked)(r, NULL);
        }
        return SD_OK;
    }
    /* Committed results when present, else attempted. */
    size_t n = r->metrics->n_committed > 0 ? r->metrics->n_committed : r->metrics->n_attempted;
    pb_MonitoringInfo **mis =
        r->metrics->n_committed > 0 ? r->metrics->committed : r->metrics->attempted;
    res->metrics = n > 0 ? sd_calloc(n, sizeof(sd_run_metric)) : NULL;
    for (size_t i = 0; i < n && res->metrics != NULL; i++) {
        const pb_MonitoringInfo *mi = mis[i];
        /* User counters, and Sundial's count of late elements dropped (named by its URN). */
        bool dropped = mi->urn != NULL && strcmp(mi->urn, SD_RUN_DROPPED_LATE) == 0;
        if (mi->urn == NULL || (strcmp(mi->urn, SD_URN_METRIC_USER_SUM_INT64) != 0 && !dropped)) {
            continue;
        }
        const char *tr = NULL, *name = dropped ? SD_RUN_DROPPED_LATE : NULL;
        for (size_t k = 0; k < mi->n_labels; k++) {
            if (strcmp(mi->labels[k]->key, dropped ? "SUNDIAL_STAGE" : SD_LABEL_PTRANSFORM) == 0) {
                tr = mi->labels[k]->value;
            } else if (strcmp(mi->labels[k]->key, SD_LABEL_NAME) == 0 && !dropped) {
                name = mi->labels[k]->value;
            }
        }
        sd_reader rd = sd_reader_make(sd_bytes_make(mi->payload.data, mi->payload.len));
        uint64_t v = 0;
        if (name == NULL || sd_reader_varint(&rd, &v) != SD_OK) {
            continue;
        }
        sd_run_metric *out = &res->metrics[res->n_metrics];
        out->transform = sd_strdup(tr != NULL ? tr : "");
        out->name = sd_strdup(name);
        out->value = (int64_t)v;
        if (out->transform == NULL || out->name == NULL) {
            sd_free(out->transform);
            sd_free(out->name);
            continue;
        }
        res->n_metrics++;
    }
    int64_t part_ts[256];
    for (size_t i = 0; i < 256; i++) {
        part_ts[i] = INT64_MIN;
    }
    collect_watermarks(r->metrics->committed, r->metrics->n_committed, res, part_ts);
    collect_watermarks(r->metrics->attempted, r->metrics->n_attempted, res, part_ts);
    JMF(get_job_metrics_response__free_unpacked)(r, NULL);
    return SD_OK;
}

/* The environment the job's transforms run in: this program as a beam:env:process:v1
 * command, or the process's loopback worker pool as beam:env:external:v1. OUT: env_urn, and
 * env_payload (an empty buffer the caller owns) filled. */
static sd_status
make_environment(const sd_run_options *o, const char **env_urn, sd_buf *env_payload, sd_err *err)
{
    sd_status st;
    if (o->environment == SD_ENV_PROCESS) {
        char self[4096];
        const char *cmd = o->process_command;
        if (cmd == NULL) {
            ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
            if (len <= 0) {
                return sd_err_set(err, SD_EIO,
                                  "cannot find this program's path for " SD_URN_ENV_PROCESS);
            }
            self[len] = '\0';
            cmd = self;
        }
        pb_ProcessPayload pp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__PROCESS_PAYLOAD__INIT;
        pp.command = (char *)cmd;
        st = sd_buf_reserve(env_payload, protobuf_c_message_get_packed_size(&pp.base) + 1);
        if (st == SD_OK) {
            env_payload->len = protobuf_c_message_pack(&pp.base, env_payload->data);
        }
        *env_urn = SD_URN_ENV_PROCESS;
    } else {
        const char *pool_ep;
        if ((st = sd__pool_endpoint(&pool_ep, err)) != SD_OK) {
            return st;
        }
        pb_ExternalPayload xp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__EXTERNAL_PAYLOAD__INIT;
        pb_ApiServiceDescriptor ep =
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__API_SERVICE_DESCRIPTOR__INIT;
        ep.url = (char *)pool_ep;
        xp.endpoint = &ep;
        st = sd_buf_reserve(env_payload, protobuf_c_message_get_packed_size(&xp.base) + 1);
        if (st == SD_OK) {
            env_payload->len = protobuf_c_message_pack(&xp.base, env_payload->data);
        }
        *env_urn = SD_URN_ENV_EXTERNAL;
    }
    if (st != SD_OK) {
        return sd_err_set(err, st, "out of memory");
    }
    return SD_OK;
}

/* Translate p, then Prepare and Run it on the job service. OUT: c->job_id and res->job_id. */
static sd_status submit_job(jc *c,
                            sd_pipeline *p,
                            const sd_run_options *o,
                            sd_run_result *res,
                            const char *env_urn,
                            sd_bytes env_payload,
                            sd_err *err)
{
    sd_arena a = { 0 };
    sd_status st;
    pb_Pipeline *pl = NULL;
    /* The LOOPBACK workers are this process: large Creates go by reference (builtins.c). */
    st =
        sd__pipeline_build(p, &a, env_urn, env_payload, o->environment != SD_ENV_PROCESS, &pl, err);
    if (st != SD_OK) {
        sd_arena_deinit(&a);
        return st;
    }
    JM(PrepareJobRequest) prep = JME(PREPARE_JOB_REQUEST__INIT);
    prep.pipeline = pl;
    sd_buf drop_late;
    sd_buf_init(&drop_late, 0);
    st = sd__pipeline_drop_late_names(p, &drop_late);
    prep.pipeline_options =
        st == SD_OK ? make_options(&a, o->wall_clock, o, (const char *)drop_late.data) : NULL;
    sd_buf_deinit(&drop_late);
    /* The job is named after the pipeline unless the options say otherwise; a pipeline
     * created without a name still gets a recognisable one. */
    const char *job_name = o->job_name != NULL ? o->job_name : sd__pipeline_name(p);
    prep.job_name = (char *)(job_name[0] != '\0' ? job_name : "sundial-c");
    if (prep.pipeline_options == NULL) {
        sd_arena_deinit(&a);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    /* Prepare, then Run and the message stream, chained on the loop thread (chain_next): the
     * call returns when the last step is done or one failed (c->path names it). */
    c->chain = CHAIN_RUN;
    st = jc_unary(c, JOB_PATH("Prepare"), &prep.base, 60000, err);
    c->chain = CHAIN_NONE;
    sd_arena_deinit(&a);
    if (st != SD_OK) {
        return st;
    }
    if (c->job_id == NULL) {
        return sd_err_set(err, SD_EPROTO, "%s: %s", c->path, c->msg);
    }
    res->job_id = sd_strdup(c->job_id);
    return SD_OK;
}

/* Wait until the job's message stream closes or timeout_ms (> 0) passes. OUT: the last job
 * state seen. True when the wait timed out. */
static bool wait_job(jc *c, int timeout_ms, int *state_out)
{
    int64_t deadline = timeout_ms > 0 ? sd_mono_now_ms() + timeout_ms : INT64_MAX;
    bool timed_out = false;
    pthread_mutex_lock(&c->mu);
    while (!c->ms_closed) {
        if (deadline == INT64_MAX) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        int64_t left = deadline - sd_mono_now_ms();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += left / 1000;
        ts.tv_nsec += (left % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    int state = c->state;
    pthread_mutex_unlock(&c->mu);
    *state_out = state;
    return timed_out;
}

/*
 * Wait for the job's end. With o->drain_after_ms, wait that long first, then Drain the job if
 * it still runs and wait for the rest of o->timeout_ms. OUT: the last state seen. True when
 * the whole wait timed out.
 */
static bool follow_job(jc *c, const sd_run_options *o, int *state)
{
    if (o->drain_after_ms <= 0 || (o->timeout_ms > 0 && o->timeout_ms <= o->drain_after_ms)) {
        return wait_job(c, o->timeout_ms, state);
    }
    if (!wait_job(c, o->drain_after_ms, state)) {
        return false; /* it ended before the drain was due */
    }
    JM(DrainJobRequest) drain = JME(DRAIN_JOB_REQUEST__INIT);
    sd_err de;
    sd_err_clear(&de);
    drain.job_id = c->job_id;
    if (jc_unary(c, JOB_PATH("Drain"), &drain.base, 10000, &de) != SD_OK) {
        /* It may have ended meanwhile; its state says how. */
        SD_WARN("sdk", "job %s: Drain: %s", c->job_id, sd_err_msg(&de));
    }
    return wait_job(c, o->timeout_ms > 0 ? o->timeout_ms - o->drain_after_ms : 0, state);
}

static sd_status
run_job(jc *c, sd_pipeline *p, const sd_run_options *o, sd_run_result *res, sd_err *err)
{
    sd_buf env_payload;
    sd_status st;
    const char *env_urn = NULL;
    sd_buf_init(&env_payload, 0);
    st = make_environment(o, &env_urn, &env_payload, err);
    if (st != SD_OK) {
        sd_buf_deinit(&env_payload);
        return st;
    }
    st = submit_job(c, p, o, res, env_urn, sd_buf_bytes(&env_payload), err);
    sd_buf_deinit(&env_payload);
    if (st != SD_OK) {
        return st;
    }
    /* Follow the job through its message stream (opened by Run's answer) until a terminal
     * state. */
    int state = 0;
    bool timed_out = follow_job(c, o, &state);
    if (timed_out) {
        JM(CancelJobRequest) cancel = JME(CANCEL_JOB_REQUEST__INIT);
        sd_err ce;
        sd_err_clear(&ce);
        cancel.job_id = c->job_id;
        SD_IGNORE(jc_unary(c, JOB_PATH("Cancel"), &cancel.base, 10000, &ce));
        SD_IGNORE(sd__rt_call(c->rt, ms_cancel, c));
        pthread_mutex_lock(&c->mu);
        while (!c->ms_closed) {
            pthread_cond_wait(&c->cv, &c->mu);
        }
        pthread_mutex_unlock(&c->mu);
        res->state = SD_RUN_CANCELLED;
        return sd_err_set(err, SD_ETIMEOUT, "job %s did not finish within %d ms (cancelled)",
                          c->job_id, o->timeout_ms);
    }
    if (!terminal(state)) {
        return sd_err_set(err, SD_EUNAVAIL, "job %s: lost track of the job: %s", c->job_id, c->msg);
    }
    res->state = (sd_run_state)state;
    if (c->errors.len > 0 && sd_buf_append_byte(&c->errors, 0) == SD_OK) {
        res->error = sd_strdup((const char *)c->errors.data);
    }
    sd_err merr;
    sd_err_clear(&merr);
    if (collect_metrics(c, res, &merr) != SD_OK) {
        SD_WARN("sdk", "job %s: metrics unavailable: %s", c->job_id, sd_err_msg(&merr));
    }
    if (o->trace) {
        collect_trace(c, res);
    }
    if (state != SD_RUN_DONE && !(state == SD_RUN_DRAINED && o->drain_after_ms > 0)) {
        return sd_err_set(err, SD_ESTATE, "job %s ended %s: %s", c->job_id,
                          state == SD_RUN_FAILED      ? "FAILED"
                          : state == SD_RUN_CANCELLED ? "CANCELLED"
                          : state == SD_RUN_DRAINED   ? "DRAINED"
                                                      : "UPDATED",
                          res->error != NULL ? res->error : "(no message)");
    }
    return SD_OK;
}

sd_status
sd_pipeline_run(sd_pipeline *p, const sd_run_options *opts, sd_run_result *result, sd_err *err)
{
    if (opts != NULL && opts->explore_seeds > 0) {
        return sd__pipeline_explore(p, opts, result, err);
    }
    return sd__pipeline_run_once(p, opts, result, err);
}

sd_status sd__pipeline_run_once(sd_pipeline *p,
                                const sd_run_options *opts,
                                sd_run_result *result,
                                sd_err *err)
{
    sd_run_options defaults;
    sd_run_result local;
    sd__runner *runner = NULL;
    const char *endpoint = NULL;
    sd_status st;
    memset(&defaults, 0, sizeof(defaults));
    const sd_run_options *o = opts != NULL ? opts : &defaults;
    sd_run_result *res = result != NULL ? result : &local;
    memset(res, 0, sizeof(*res));
    const sd_err *perr = sd_pipeline_error(p);
    if (p == NULL || perr != NULL) {
        st = p == NULL ? sd_err_set(err, SD_EINVAL, "sd_pipeline_run: NULL pipeline")
                       : sd_err_set(err, perr->code, "%s", perr->msg);
        goto out;
    }
    jc c;
    memset(&c, 0, sizeof(c));
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    sd_buf_init(&c.resp, 0);
    sd_buf_init(&c.run_req, 0);
    sd_buf_init(&c.m_resp, 0);
    sd_buf_init(&c.t_data, 0);
    sd_buf_init(&c.errors, 0);
    st = sd__rt_get(&c.rt, err);
    if (st == SD_OK && o->endpoint == NULL) {
        st = sd__runner_start(o->wall_clock, &runner, &endpoint, err);
    } else {
        endpoint = o->endpoint;
        c.keep_channel = true;
    }
    if (st == SD_OK) {
        c.endpoint = endpoint;
        st = sd__rt_call(c.rt, jc_open, &c);
        if (st == SD_OK && c.ch == NULL) {
            st = sd_err_set(err, c.err.code != SD_OK ? c.err.code : SD_EUNAVAIL,
                            "cannot connect to the job server at %s: %s", endpoint,
                            sd_err_msg(&c.err));
        }
    }
    if (st == SD_OK) {
        st = run_job(&c, p, o, res, err);
    }
    if (st == SD_OK) {
        sd__pipeline_count_run(p); /* collections (sd_collect) read the new results */
    }
    if (c.rt != NULL) {
        (void)metrics_wait(&c); /* its callback must not outlive c */
        SD_IGNORE(sd__rt_call(c.rt, jc_close, &c));
    }
    sd__runner_stop(runner);
    sd_free(c.job_id);
    sd_buf_deinit(&c.resp);
    sd_buf_deinit(&c.run_req);
    sd_buf_deinit(&c.m_resp);
    sd_buf_deinit(&c.t_data);
    sd_buf_deinit(&c.errors);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
out:
    if (result == NULL) {
        sd_run_result_deinit(&local);
    }
    return st;
}

void sd_run_result_deinit(sd_run_result *r)
{
    if (r == NULL) {
        return;
    }
    for (size_t i = 0; i < r->n_metrics; i++) {
        sd_free(r->metrics[i].transform);
        sd_free(r->metrics[i].name);
    }
    sd_free(r->metrics);
    for (size_t i = 0; i < r->n_stage_watermarks; i++) {
        sd_free(r->stage_watermarks[i].id);
        sd_free(r->stage_watermarks[i].name);
    }
    sd_free(r->stage_watermarks);
    for (size_t i = 0; i < r->n_partition_watermarks; i++) {
        sd_free(r->partition_watermarks[i].id);
        sd_free(r->partition_watermarks[i].name);
    }
    sd_free(r->partition_watermarks);
    sd_free(r->job_id);
    sd_free(r->error);
    sd_free(r->schedule_file);
    sd_free(r->trace);
    memset(r, 0, sizeof(*r));
}

sd_time
sd_run_result_partition_watermark(const sd_run_result *r, const char *source, const char *partition)
{
    for (size_t i = 0; r != NULL && partition != NULL && i < r->n_partition_watermarks; i++) {
        const sd_run_watermark *w = &r->partition_watermarks[i];
        if ((source == NULL || strstr(w->id, source) != NULL) && strcmp(w->name, partition) == 0) {
            return w->output;
        }
    }
    return SD_TIME_MIN;
}

int64_t sd_run_result_counter(const sd_run_result *r, const char *name)
{
    int64_t sum = 0;
    for (size_t i = 0; r != NULL && i < r->n_metrics; i++) {
        if (strcmp(r->metrics[i].name, name) == 0) {
            sum += r->metrics[i].value;
        }
    }
    return sum;
}
