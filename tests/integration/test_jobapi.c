/*
 * Sundial: the job service over the wire. One process runs an sd_rpc_server with the Job,
 * ArtifactStaging and ArtifactRetrieval services on 127.0.0.1:0 and drives them with sd_rpc
 * client calls, in the order the Beam TypeScript client uses them: Prepare, the reverse
 * staging stream (the client answers the server's requests and never half-closes), Run,
 * GetState polling, GetJobMetrics. A fake executor finishes the job from a libev timer, so
 * state changes really travel on open GetStateStream/GetMessageStream calls. Staged files are
 * then fetched back with GetArtifact (paced, chunked). Error codes are checked end to end.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "org/apache/beam/model/job_management/v1/beam_artifact_api.pb-c.h"
#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"
#include "runner/transport/rpc.h"

#define PBJ(name) org__apache__beam__model__job_management__v1__##name
#define PBR(name) org__apache__beam__model__pipeline__v1__##name
#define REQ_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__ARTIFACT_REQUEST_WRAPPER__REQUEST_##x
#define RESP_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__ARTIFACT_RESPONSE_WRAPPER__RESPONSE_##x
#define MSG_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_RESPONSE__RESPONSE_##x

#define URN_FILE "beam:artifact:type:file:v1"
#define BIG_SIZE (3 * 1024 * 1024 + 17)

/* ---------------------------------------------------------------- fixture */

typedef struct wire {
    struct ev_loop *loop;
    ev_timer watchdog;
    bool timed_out;
    sd_rpc *rpc;
    sd_rpc_server *srv;
    sd_rpc_channel *ch;
    sd_jobsvc *svc;
    bool server_done;
    int port;
    char root[512];
    char art[600];
    char src[600];
    /* fake executor */
    ev_timer finish;
    sd_job *running;
    sd_job_state finish_with;
    int starts;
    int cancels;
} wire;

static wire W;

static void on_watchdog(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    W.timed_out = true;
    ev_break(loop, EVBREAK_ALL);
}

static void run_until(const bool *flag)
{
    while (!*flag && !W.timed_out) {
        ev_run(W.loop, EVRUN_ONCE);
    }
    assert_false(W.timed_out);
}

/* The executor finishes the job a few milliseconds after Run (or Cancel). */
static void on_finish(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)t;
    (void)revents;
    sd_job *job = W.running;
    if (job == NULL) {
        return;
    }
    if (W.finish_with == SD_JOB_DONE) {
        static const uint8_t ts_dist[] = { 0, 0, 0, 4, 3, 6, 1, 3 };
        sd_pb_monitoring_info mi;
        PBR(monitoring_info__init)(&mi);
        mi.urn = (char *)"beam:metric:user:distribution_int64:v1";
        mi.type = (char *)"beam:metrics:distribution_int64:v1";
        mi.payload.data = (uint8_t *)ts_dist;
        mi.payload.len = sizeof(ts_dist);
        const sd_pb_monitoring_info *p = &mi;
        assert_int_equal(sd_job_set_metrics(job, &p, 1), SD_OK);
        sd_job_message(job, SD_JOB_MSG_BASIC, "pipeline finished");
    }
    sd_job_set_state(job, W.finish_with);
    W.running = NULL;
}

static sd_status hook_start(void *ctx, sd_job *job, sd_err *err)
{
    (void)ctx;
    (void)err;
    W.starts++;
    sd_job_set_state(job, SD_JOB_RUNNING);
    W.running = job;
    W.finish_with = SD_JOB_DONE;
    ev_timer_set(&W.finish, 0.02, 0.);
    ev_timer_start(W.loop, &W.finish);
    return SD_OK;
}

static void hook_cancel(void *ctx, sd_job *job)
{
    (void)ctx;
    W.cancels++;
    W.running = job;
    W.finish_with = SD_JOB_CANCELLED;
    ev_timer_stop(W.loop, &W.finish);
    ev_timer_set(&W.finish, 0.01, 0.);
    ev_timer_start(W.loop, &W.finish);
}

static int rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        return remove(path);
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        char sub[2048];
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        rm_tree(sub);
    }
    closedir(d);
    return rmdir(path);
}

static int setup(void **state)
{
    (void)state;
    memset(&W, 0, sizeof(W));
    snprintf(W.root, sizeof(W.root), "%s/sd-jobapi-XXXXXX",
             getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(W.root));
    snprintf(W.art, sizeof(W.art), "%s/artifacts", W.root);
    snprintf(W.src, sizeof(W.src), "%s/pkg.tgz", W.root);
    W.loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(W.loop);
    ev_timer_init(&W.watchdog, on_watchdog, 30.0, 0.);
    ev_timer_start(W.loop, &W.watchdog);
    ev_unref(W.loop);
    ev_timer_init(&W.finish, on_finish, 0.02, 0.);
    sd_err err = { 0 };
    assert_int_equal(sd_rpc_create(W.loop, &W.rpc, &err), SD_OK);
    assert_int_equal(sd_rpc_server_create(W.rpc, &W.srv, &err), SD_OK);
    sd_job_hooks hooks = { .start = hook_start, .cancel = hook_cancel };
    assert_int_equal(sd_jobsvc_create(W.rpc, &hooks, W.art, &W.svc, &err), SD_OK);
    assert_int_equal(sd_jobsvc_register(W.svc, W.srv, NULL), SD_OK);
    assert_int_equal(sd_jobsvc_register(W.svc, W.srv, NULL), SD_ESTATE); /* once only */
    assert_int_equal(sd_rpc_server_listen(W.srv, "127.0.0.1:0", &W.port, &err), SD_OK);
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", W.port);
    assert_int_equal(sd_jobsvc_set_endpoint(W.svc, ep), SD_OK);
    assert_int_equal(sd_rpc_server_start(W.srv, &err), SD_OK);
    assert_int_equal(sd_rpc_channel_create(W.rpc, ep, &W.ch, &err), SD_OK);
    return 0;
}

static void on_server_done(void *ctx)
{
    (void)ctx;
    W.server_done = true;
}

static int teardown(void **state)
{
    (void)state;
    sd_rpc_channel_destroy(W.ch);
    sd_rpc_server_shutdown(W.srv, 0, on_server_done, NULL);
    run_until(&W.server_done);
    assert_null(sd__jobsvc_check(W.svc));
    sd_jobsvc_destroy(W.svc);
    ev_timer_stop(W.loop, &W.finish);
    ev_run(W.loop, 0); /* nothing live may remain */
    assert_false(W.timed_out);
    sd_rpc_destroy(W.rpc);
    ev_ref(W.loop);
    ev_timer_stop(W.loop, &W.watchdog);
    ev_loop_destroy(W.loop);
    rm_tree(W.root);
    return 0;
}

/* ---------------------------------------------------------------- client helpers */

static const char *path_of(sd__jobsvc_method m)
{
    return sd__jobsvc_method_get(m)->path;
}

typedef struct ures {
    bool done;
    sd_rpc_code code;
    char msg[1024];
    uint8_t *data;
    size_t len;
} ures;

static void on_unary(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    ures *r = ctx;
    r->code = code;
    snprintf(r->msg, sizeof(r->msg), "%s", message);
    r->data = malloc(response.len + 1);
    assert_non_null(r->data);
    if (response.len > 0) {
        memcpy(r->data, response.ptr, response.len);
    }
    r->len = response.len;
    r->done = true;
}

static void unary_raw(sd__jobsvc_method m, const void *bytes, size_t len, ures *r)
{
    memset(r, 0, sizeof(*r));
    sd_err err = { 0 };
    assert_int_equal(sd_rpc_unary(W.ch, path_of(m), sd_bytes_make(bytes, len), NULL, 0, 10000,
                                  on_unary, r, &err),
                     SD_OK);
    run_until(&r->done);
}

static void unary(sd__jobsvc_method m, const ProtobufCMessage *req, ures *r)
{
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *b = malloc(n + 1);
    assert_non_null(b);
    protobuf_c_message_pack(req, b);
    unary_raw(m, b, n, r);
    free(b);
}

/* A unary call that must succeed; returns the unpacked response (free_unpacked with NULL). */
static void *
unary_ok(sd__jobsvc_method m, const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc)
{
    ures r;
    unary(m, req, &r);
    if (r.code != SD_RPC_OK) {
        fail_msg("%s: code %d: %s", path_of(m), (int)r.code, r.msg);
    }
    void *out = protobuf_c_message_unpack(desc, NULL, r.len, r.data);
    assert_non_null(out);
    free(r.data);
    return out;
}

/* A client stream that records every server message and the final status. */
typedef struct cstream {
    sd_rpc_stream *s;
    uint8_t *msgs[64];
    size_t lens[64];
    size_t n;
    size_t total_bytes;
    bool keep; /* store message bytes (else only count them) */
    bool closed;
    sd_rpc_code code;
    char msg[1024];
    void (*on_msg)(struct cstream *cs, sd_bytes msg);
} cstream;

static void cs_on_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    (void)s;
    cstream *cs = ctx;
    if (cs->on_msg != NULL) {
        cs->on_msg(cs, msg);
    }
    if (cs->keep && cs->n < 64) {
        cs->msgs[cs->n] = malloc(msg.len + 1);
        assert_non_null(cs->msgs[cs->n]);
        memcpy(cs->msgs[cs->n], msg.ptr, msg.len);
        cs->lens[cs->n] = msg.len;
    }
    cs->n++;
    cs->total_bytes += msg.len;
}

static void cs_on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    (void)s;
    cstream *cs = ctx;
    cs->code = code;
    snprintf(cs->msg, sizeof(cs->msg), "%s", message);
    cs->closed = true;
    cs->s = NULL;
}

static void cs_open(cstream *cs, sd__jobsvc_method m)
{
    sd_rpc_stream_handler h = { .on_message = cs_on_message, .on_close = cs_on_close, .ctx = cs };
    sd_err err = { 0 };
    assert_int_equal(sd_rpc_stream_open(W.ch, path_of(m), NULL, 0, &h, &cs->s, &err), SD_OK);
}

static void cs_send(cstream *cs, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n + 1);
    assert_non_null(b);
    protobuf_c_message_pack(msg, b);
    assert_int_equal(sd_rpc_stream_send(cs->s, sd_bytes_make(b, n)), SD_OK);
    free(b);
}

/* A server-streaming call: open, send the one request, half-close. */
static void cs_server_stream(cstream *cs, sd__jobsvc_method m, const ProtobufCMessage *req)
{
    cs_open(cs, m);
    cs_send(cs, req);
    sd_rpc_stream_half_close(cs->s);
}

static void cs_free(cstream *cs)
{
    for (size_t i = 0; i < cs->n && i < 64; i++) {
        free(cs->msgs[i]);
    }
}

/* ---------------------------------------------------------------- the TS-like staging client */

static void send_wrapper(cstream *cs, ProtobufCMessage *inner, int which, bool last)
{
    Org__Apache__Beam__Model__JobManagement__V1__ArtifactResponseWrapper w;
    PBJ(artifact_response_wrapper__init)(&w);
    w.is_last = last;
    if (which == 1) {
        w.response_case = RESP_CASE(RESOLVE_ARTIFACT_RESPONSE);
        w.resolve_artifact_response = (void *)inner;
    } else if (which == 2) {
        w.response_case = RESP_CASE(GET_ARTIFACT_RESPONSE);
        w.get_artifact_response = (void *)inner;
    }
    cs_send(cs, &w.base);
}

/* Answers resolve by echoing and get_artifact with the local file (or fixed bytes). */
static void stager_on_msg(cstream *cs, sd_bytes msg)
{
    Org__Apache__Beam__Model__JobManagement__V1__ArtifactRequestWrapper *rq =
        (void *)protobuf_c_message_unpack(&PBJ(artifact_request_wrapper__descriptor), NULL, msg.len,
                                          msg.ptr);
    assert_non_null(rq);
    if (rq->request_case == REQ_CASE(RESOLVE_ARTIFACT)) {
        Org__Apache__Beam__Model__JobManagement__V1__ResolveArtifactsResponse rr;
        PBJ(resolve_artifacts_response__init)(&rr);
        rr.n_replacements = rq->resolve_artifact->n_artifacts;
        rr.replacements = rq->resolve_artifact->artifacts;
        send_wrapper(cs, &rr.base, 1, false);
    } else {
        const sd_pb_artifact *a = rq->get_artifact->artifact;
        assert_string_equal(a->type_urn, URN_FILE);
        Org__Apache__Beam__Model__Pipeline__V1__ArtifactFilePayload *fp =
            (void *)protobuf_c_message_unpack(&PBR(artifact_file_payload__descriptor), NULL,
                                              a->type_payload.len, a->type_payload.data);
        assert_non_null(fp);
        Org__Apache__Beam__Model__JobManagement__V1__GetArtifactResponse g;
        PBJ(get_artifact_response__init)(&g);
        if (strcmp(fp->path, W.src) == 0) {
            int fd = open(fp->path, O_RDONLY);
            assert_true(fd >= 0);
            static uint8_t buf[65536];
            ssize_t r;
            while ((r = read(fd, buf, sizeof(buf))) > 0) {
                g.data.data = buf;
                g.data.len = (size_t)r;
                send_wrapper(cs, &g.base, 2, false);
            }
            close(fd);
        } else {
            /* A hostile name: never read it, answer with marker bytes. */
            g.data.data = (uint8_t *)"hostile";
            g.data.len = 7;
            send_wrapper(cs, &g.base, 2, false);
        }
        g.data.data = NULL;
        g.data.len = 0;
        send_wrapper(cs, &g.base, 2, true); /* TypeScript's ending: empty data, is_last */
        protobuf_c_message_free_unpacked(&fp->base, NULL);
    }
    protobuf_c_message_free_unpacked(&rq->base, NULL);
}

/* ---------------------------------------------------------------- pipelines */

static uint8_t *file_payload(const char *path, size_t *len)
{
    Org__Apache__Beam__Model__Pipeline__V1__ArtifactFilePayload fp;
    PBR(artifact_file_payload__init)(&fp);
    fp.path = (char *)path;
    *len = protobuf_c_message_get_packed_size(&fp.base);
    uint8_t *b = malloc(*len + 1);
    assert_non_null(b);
    protobuf_c_message_pack(&fp.base, b);
    return b;
}

/* PrepareJobRequest with one environment whose dependencies are the given file paths. */
static uint8_t *prepare_bytes(const char *const *paths, size_t n_paths, size_t *len)
{
    sd_pb_artifact arts[4];
    sd_pb_artifact *artp[4];
    uint8_t *payloads[4] = { 0 };
    assert_true(n_paths <= 4);
    for (size_t i = 0; i < n_paths; i++) {
        PBR(artifact_information__init)(&arts[i]);
        arts[i].type_urn = (char *)URN_FILE;
        size_t pl;
        payloads[i] = file_payload(paths[i], &pl);
        arts[i].type_payload.data = payloads[i];
        arts[i].type_payload.len = pl;
        artp[i] = &arts[i];
    }
    Org__Apache__Beam__Model__Pipeline__V1__Environment env;
    PBR(environment__init)(&env);
    env.urn = (char *)"beam:env:external:v1";
    env.n_dependencies = n_paths;
    env.dependencies = artp;
    Org__Apache__Beam__Model__Pipeline__V1__Components__EnvironmentsEntry ee;
    PBR(components__environments_entry__init)(&ee);
    ee.key = (char *)"js";
    ee.value = &env;
    Org__Apache__Beam__Model__Pipeline__V1__Components__EnvironmentsEntry *eep = &ee;
    Org__Apache__Beam__Model__Pipeline__V1__Components comps;
    PBR(components__init)(&comps);
    comps.n_environments = 1;
    comps.environments = &eep;
    Org__Apache__Beam__Model__Pipeline__V1__Pipeline p;
    PBR(pipeline__init)(&p);
    p.components = &comps;
    /* Keep the job's files after it ends: this test fetches the staged artifact afterwards
     * (workers fetch them while a job runs; by default a job's files go when it ends). */
    Google__Protobuf__Value keep;
    google__protobuf__value__init(&keep);
    keep.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
    keep.bool_value = 1;
    Google__Protobuf__Struct__FieldsEntry fe;
    google__protobuf__struct__fields_entry__init(&fe);
    fe.key = (char *)"beam:option:sundial_keep_artifacts:v1";
    fe.value = &keep;
    Google__Protobuf__Struct__FieldsEntry *fep = &fe;
    Google__Protobuf__Struct opts;
    google__protobuf__struct__init(&opts);
    opts.n_fields = 1;
    opts.fields = &fep;
    Org__Apache__Beam__Model__JobManagement__V1__PrepareJobRequest req;
    PBJ(prepare_job_request__init)(&req);
    req.pipeline = &p;
    req.job_name = (char *)"wire";
    req.pipeline_options = &opts;
    *len = protobuf_c_message_get_packed_size(&req.base);
    uint8_t *out = malloc(*len + 1);
    assert_non_null(out);
    protobuf_c_message_pack(&req.base, out);
    for (size_t i = 0; i < n_paths; i++) {
        free(payloads[i]);
    }
    return out;
}

static void make_source_file(void)
{
    FILE *f = fopen(W.src, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < BIG_SIZE; i++) {
        fputc((int)((i * 31 + i / 1000) & 0xff), f);
    }
    fclose(f);
}

/* ---------------------------------------------------------------- tests */

/* test_wire_ts_sequence, step 2: stage the dependencies as the TypeScript client does. */
static void ts_stage(const char *token, cstream *stg)
{
    /* Staging: token first, then the server drives; the client never half-closes. */
    *stg = (cstream){ .on_msg = stager_on_msg };
    cs_open(stg, SD__JS_REVERSE_RETRIEVAL);
    Org__Apache__Beam__Model__JobManagement__V1__ArtifactResponseWrapper first;
    PBJ(artifact_response_wrapper__init)(&first);
    first.staging_token = (char *)token;
    cs_send(stg, &first.base);
    run_until(&stg->closed);
    if (stg->code != SD_RPC_OK) {
        fail_msg("staging ended with %d: %s", (int)stg->code, stg->msg);
    }
    assert_int_equal(stg->n, 3); /* resolve + two GetArtifact requests */
}

/* Step 3: Run, then poll GetState until the job ends (it must end DONE). */
static void ts_run_and_poll(char *job_id,
                            Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest *sreq)
{
    /* Run, then poll GetState as the TypeScript client does until a terminal state. */
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run;
    PBJ(run_job_request__init)(&run);
    run.preparation_id = job_id;
    Org__Apache__Beam__Model__JobManagement__V1__RunJobResponse *rr =
        unary_ok(SD__JS_RUN, &run.base, &PBJ(run_job_response__descriptor));
    assert_string_equal(rr->job_id, "job-001");
    protobuf_c_message_free_unpacked(&rr->base, NULL);
    int polls = 0;
    for (;;) {
        Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *ev =
            unary_ok(SD__JS_GET_STATE, &sreq->base, &PBJ(job_state_event__descriptor));
        int s = (int)ev->state;
        assert_non_null(ev->timestamp);
        protobuf_c_message_free_unpacked(&ev->base, NULL);
        polls++;
        if (sd_job_state_is_terminal((sd_job_state)s)) {
            assert_int_equal(s, SD_JOB_DONE);
            break;
        }
        assert_true(s == SD_JOB_RUNNING);
        ev_sleep(0.005);
        ev_run(W.loop, EVRUN_NOWAIT);
    }
    assert_int_equal(W.starts, 1);
    assert_int_equal(W.starts, 1);
}

/* Step 4: the metrics the worker reported are passed through. */
static void ts_check_metrics(char *job_id)
{
    Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsRequest mreq;
    PBJ(get_job_metrics_request__init)(&mreq);
    mreq.job_id = job_id;
    Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsResponse *mr =
        unary_ok(SD__JS_GET_JOB_METRICS, &mreq.base, &PBJ(get_job_metrics_response__descriptor));
    assert_non_null(mr->metrics);
    assert_int_equal(mr->metrics->n_committed, 1);
    assert_int_equal(mr->metrics->committed[0]->payload.len, 8);
    assert_int_equal(mr->metrics->committed[0]->payload.data[3], 4); /* passed through */
    protobuf_c_message_free_unpacked(&mr->base, NULL);
}

/* Step 5: the watchers saw the whole story, and the server closed them with OK. */
static void ts_check_watchers(cstream *states, cstream *msgs)
{
    /* The streams saw the whole story and were closed by the server with OK. */
    run_until(&states->closed);
    run_until(&msgs->closed);
    assert_int_equal(states->code, SD_RPC_OK);
    static const int want_states[] = { SD_JOB_STOPPED, SD_JOB_STARTING, SD_JOB_RUNNING,
                                       SD_JOB_DONE };
    assert_int_equal(states->n, 4);
    for (size_t i = 0; i < 4; i++) {
        Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *ev =
            (void *)protobuf_c_message_unpack(&PBJ(job_state_event__descriptor), NULL,
                                              states->lens[i], states->msgs[i]);
        assert_int_equal(ev->state, want_states[i]);
        protobuf_c_message_free_unpacked(&ev->base, NULL);
    }
    assert_int_equal(msgs->code, SD_RPC_OK);
    bool saw_text = false;
    int last_state = 0;
    for (size_t i = 0; i < msgs->n; i++) {
        Org__Apache__Beam__Model__JobManagement__V1__JobMessagesResponse *m =
            (void *)protobuf_c_message_unpack(&PBJ(job_messages_response__descriptor), NULL,
                                              msgs->lens[i], msgs->msgs[i]);
        assert_non_null(m);
        if (m->response_case == MSG_CASE(MESSAGE_RESPONSE)) {
            saw_text |= strcmp(m->message_response->message_text, "pipeline finished") == 0;
        } else {
            last_state = (int)m->state_response->state;
        }
        protobuf_c_message_free_unpacked(&m->base, NULL);
    }
    assert_true(saw_text);
    assert_int_equal(last_state, SD_JOB_DONE);
}

/* Step 6: workers fetch the staged dependency back, and the hostile name stayed inside. */
static void ts_check_fetch(char *job_id)
{
    /* Workers fetch the staged dependency back: same bytes, chunks of at most 1 MiB. */
    Org__Apache__Beam__Model__JobManagement__V1__GetJobPipelineRequest gp;
    PBJ(get_job_pipeline_request__init)(&gp);
    gp.job_id = job_id;
    Org__Apache__Beam__Model__JobManagement__V1__GetJobPipelineResponse *pipe =
        unary_ok(SD__JS_GET_PIPELINE, &gp.base, &PBJ(get_job_pipeline_response__descriptor));
    const Org__Apache__Beam__Model__Pipeline__V1__Environment *env =
        pipe->pipeline->components->environments[0]->value;
    assert_int_equal(env->n_dependencies, 2);
    for (size_t d = 0; d < 2; d++) {
        Org__Apache__Beam__Model__Pipeline__V1__ArtifactFilePayload *fp =
            (void *)protobuf_c_message_unpack(&PBR(artifact_file_payload__descriptor), NULL,
                                              env->dependencies[d]->type_payload.len,
                                              env->dependencies[d]->type_payload.data);
        char want[1024];
        snprintf(want, sizeof(want), "%s/job-001/%s", W.art,
                 d == 0 ? "dep-000-pkg.tgz" : "dep-001-passwd");
        assert_string_equal(fp->path, want);
        protobuf_c_message_free_unpacked(&fp->base, NULL);
    }
    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactRequest ga;
    PBJ(get_artifact_request__init)(&ga);
    ga.artifact = env->dependencies[0];
    cstream got = { .keep = true };
    cs_server_stream(&got, SD__JS_GET_ARTIFACT, &ga.base);
    run_until(&got.closed);
    assert_int_equal(got.code, SD_RPC_OK);
    assert_int_equal(got.n, 4);
    FILE *f = fopen(W.src, "rb");
    assert_non_null(f);
    size_t total = 0;
    for (size_t i = 0; i < got.n; i++) {
        Org__Apache__Beam__Model__JobManagement__V1__GetArtifactResponse *g =
            (void *)protobuf_c_message_unpack(&PBJ(get_artifact_response__descriptor), NULL,
                                              got.lens[i], got.msgs[i]);
        assert_true(g->data.len <= SD_JOBSVC_CHUNK_MAX);
        uint8_t *expect = malloc(g->data.len + 1);
        assert_int_equal(fread(expect, 1, g->data.len, f), g->data.len);
        assert_memory_equal(expect, g->data.data, g->data.len);
        total += g->data.len;
        free(expect);
        protobuf_c_message_free_unpacked(&g->base, NULL);
    }
    fclose(f);
    assert_int_equal(total, BIG_SIZE);

    /* The hostile name landed inside the job directory with the client's marker bytes. */
    char hostile[1024];
    snprintf(hostile, sizeof(hostile), "%s/job-001/dep-001-passwd", W.art);
    f = fopen(hostile, "rb");
    assert_non_null(f);
    char buf[16] = { 0 };
    assert_int_equal(fread(buf, 1, sizeof(buf), f), 7);
    fclose(f);
    assert_string_equal(buf, "hostile");

    protobuf_c_message_free_unpacked(&pipe->base, NULL);
    cs_free(&got);
}

/*
 * The TypeScript client's whole sequence over the wire: Prepare (step 1, here), staging, Run and
 * polling, metrics, the watchers' streams, and the workers' artifact fetches.
 */
static void test_wire_ts_sequence(void **state)
{
    (void)state;
    cstream stg;
    make_source_file();
    const char *deps[2] = { W.src, "../../../etc/passwd" };
    size_t len;
    uint8_t *req = prepare_bytes(deps, 2, &len);
    ures r;
    unary_raw(SD__JS_PREPARE, req, len, &r);
    free(req);
    assert_int_equal(r.code, SD_RPC_OK);
    Org__Apache__Beam__Model__JobManagement__V1__PrepareJobResponse *pr =
        (void *)protobuf_c_message_unpack(&PBJ(prepare_job_response__descriptor), NULL, r.len,
                                          r.data);
    free(r.data);
    assert_non_null(pr);
    assert_string_equal(pr->preparation_id, "job-001");
    assert_non_null(pr->artifact_staging_endpoint);
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", W.port);
    assert_string_equal(pr->artifact_staging_endpoint->url, ep);

    /* Watchers opened before Run see every change over the wire. */
    Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest sreq;
    PBJ(get_job_state_request__init)(&sreq);
    sreq.job_id = pr->preparation_id;
    cstream states = { .keep = true };
    cs_server_stream(&states, SD__JS_GET_STATE_STREAM, &sreq.base);
    cstream msgs = { .keep = true };
    cs_server_stream(&msgs, SD__JS_GET_MESSAGE_STREAM, &sreq.base); /* same wire shape */

    ts_stage(pr->staging_session_token, &stg);
    ts_run_and_poll(pr->preparation_id, &sreq);
    ts_check_metrics(pr->preparation_id);
    ts_check_watchers(&states, &msgs);
    ts_check_fetch(pr->preparation_id);
    protobuf_c_message_free_unpacked(&pr->base, NULL);
    cs_free(&states);
    cs_free(&msgs);
    cs_free(&stg);
}

/* Error codes reach the client with their messages. */
static void test_wire_errors(void **state)
{
    (void)state;
    ures r;
    unary_raw(SD__JS_PREPARE, "\x0a\xff", 2, &r);
    assert_int_equal(r.code, SD_RPC_INVALID_ARGUMENT);
    assert_non_null(strstr(r.msg, "PrepareJobRequest"));
    free(r.data);

    Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest s;
    PBJ(get_job_state_request__init)(&s);
    s.job_id = (char *)"job-404";
    unary(SD__JS_GET_STATE, &s.base, &r);
    assert_int_equal(r.code, SD_RPC_NOT_FOUND);
    assert_non_null(strstr(r.msg, "job-404"));
    free(r.data);
    unary(SD__JS_GET_JOB_METRICS, &s.base, &r);
    assert_int_equal(r.code, SD_RPC_NOT_FOUND);
    free(r.data);
    unary(SD__JS_DRAIN, &s.base, &r); /* the same bytes as a DrainJobRequest */
    assert_int_equal(r.code, SD_RPC_NOT_FOUND);
    assert_non_null(strstr(r.msg, "job-404"));
    free(r.data);

    /* A state stream for an unknown job ends with NOT_FOUND and no messages. */
    cstream st = { .keep = true };
    cs_server_stream(&st, SD__JS_GET_STATE_STREAM, &s.base);
    run_until(&st.closed);
    assert_int_equal(st.code, SD_RPC_NOT_FOUND);
    assert_int_equal(st.n, 0);

    /* A staging stream with an unknown token, and one that sends garbage. */
    cstream stg = { 0 };
    cs_open(&stg, SD__JS_REVERSE_RETRIEVAL);
    Org__Apache__Beam__Model__JobManagement__V1__ArtifactResponseWrapper w;
    PBJ(artifact_response_wrapper__init)(&w);
    w.staging_token = (char *)"job-404";
    cs_send(&stg, &w.base);
    run_until(&stg.closed);
    assert_int_equal(stg.code, SD_RPC_NOT_FOUND);
    cstream bad = { 0 };
    cs_open(&bad, SD__JS_REVERSE_RETRIEVAL);
    assert_int_equal(sd_rpc_stream_send(bad.s, sd_bytes_make("\x12\x09", 2)), SD_OK);
    run_until(&bad.closed);
    assert_int_equal(bad.code, SD_RPC_INVALID_ARGUMENT);

    /* The service still serves. */
    const char *none[1] = { NULL };
    size_t len;
    uint8_t *req = prepare_bytes(none, 0, &len);
    unary_raw(SD__JS_PREPARE, req, len, &r);
    free(req);
    assert_int_equal(r.code, SD_RPC_OK);
    free(r.data);
}

static void test_wire_cancel(void **state)
{
    (void)state;
    const char *none[1] = { NULL };
    size_t len;
    uint8_t *req = prepare_bytes(none, 0, &len);
    ures r;
    unary_raw(SD__JS_PREPARE, req, len, &r);
    free(req);
    assert_int_equal(r.code, SD_RPC_OK);
    Org__Apache__Beam__Model__JobManagement__V1__PrepareJobResponse *pr =
        (void *)protobuf_c_message_unpack(&PBJ(prepare_job_response__descriptor), NULL, r.len,
                                          r.data);
    free(r.data);
    assert_null(pr->artifact_staging_endpoint); /* nothing to stage */
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run;
    PBJ(run_job_request__init)(&run);
    run.preparation_id = pr->preparation_id;
    protobuf_c_message_free_unpacked(
        unary_ok(SD__JS_RUN, &run.base, &PBJ(run_job_response__descriptor)), NULL);
    Org__Apache__Beam__Model__JobManagement__V1__CancelJobRequest c;
    PBJ(cancel_job_request__init)(&c);
    c.job_id = pr->preparation_id;
    Org__Apache__Beam__Model__JobManagement__V1__CancelJobResponse *cr =
        unary_ok(SD__JS_CANCEL, &c.base, &PBJ(cancel_job_response__descriptor));
    assert_int_equal(cr->state, SD_JOB_CANCELLING);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
    assert_int_equal(W.cancels, 1);
    Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest s;
    PBJ(get_job_state_request__init)(&s);
    s.job_id = pr->preparation_id;
    cstream st = { .keep = true };
    cs_server_stream(&st, SD__JS_GET_STATE_STREAM, &s.base);
    run_until(&st.closed);
    assert_int_equal(st.code, SD_RPC_OK);
    assert_int_equal(st.n, 2); /* CANCELLING, then CANCELLED */
    Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *ev =
        (void *)protobuf_c_message_unpack(&PBJ(job_state_event__descriptor), NULL, st.lens[1],
                                          st.msgs[1]);
    assert_int_equal(ev->state, SD_JOB_CANCELLED);
    protobuf_c_message_free_unpacked(&ev->base, NULL);
    cs_free(&st);
    protobuf_c_message_free_unpacked(&pr->base, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wire_ts_sequence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wire_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wire_cancel, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
