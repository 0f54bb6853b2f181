/*
 * Sundial: a fake transport for the job service unit tests (header-only, static helpers).
 *
 * The job service answers through the sd__jobsvc_io seam. This fake records every message a
 * call sends and the status it finishes with, and lets a test play the transport: open calls
 * with packed requests, feed client messages, close calls. After every step the service's
 * invariant checker runs. A call's "send queue" is the number of recorded messages the test
 * has not consumed yet, so pacing can be tested by consuming and pumping.
 */
#ifndef SD_TESTS_UNIT_TEST_JOBSERVICE_FAKE_H
#define SD_TESTS_UNIT_TEST_JOBSERVICE_FAKE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"

typedef struct fmsg {
    uint8_t *data;
    size_t len;
} fmsg;

typedef struct fcall {
    sd__jobsvc_method m;
    void *rec;
    fmsg msgs[4096];
    size_t n_msgs;
    size_t consumed; /* messages the "network" has taken (for the queue length) */
    bool finished;
    sd_rpc_code code;
    char message[2048];
    bool closed;
} fcall;

typedef struct fake {
    sd_jobsvc *svc;
    int want_pump;
    bool pacing;         /* queue length = unconsumed messages (else always 0) */
    size_t forced_queue; /* when nonzero, the queue length reported for every call */
    sd_time now;
} fake;

static fake F;

static inline sd_time fake_now(void)
{
    return F.now;
}

static inline sd_status fake_send(void *io_ctx, void *call, sd_bytes msg)
{
    (void)io_ctx;
    fcall *c = call;
    if (c->finished || c->closed) {
        return SD_ESTATE;
    }
    assert_true(c->n_msgs < sizeof(c->msgs) / sizeof(c->msgs[0]));
    fmsg *m = &c->msgs[c->n_msgs++];
    m->data = malloc(msg.len == 0 ? 1 : msg.len);
    assert_non_null(m->data);
    if (msg.len > 0) {
        memcpy(m->data, msg.ptr, msg.len);
    }
    m->len = msg.len;
    return SD_OK;
}

static inline void fake_finish(void *io_ctx, void *call, sd_rpc_code code, const char *message)
{
    (void)io_ctx;
    fcall *c = call;
    if (c->finished || c->closed) {
        return;
    }
    c->finished = true;
    c->code = code;
    snprintf(c->message, sizeof(c->message), "%s", message != NULL ? message : "");
}

static inline size_t fake_queue_len(void *io_ctx, void *call)
{
    (void)io_ctx;
    fcall *c = call;
    if (F.forced_queue > 0) {
        return F.forced_queue;
    }
    return F.pacing ? c->n_msgs - c->consumed : 0;
}

static inline void fake_want_pump(void *io_ctx)
{
    (void)io_ctx;
    F.want_pump++;
}

static inline void check_invariants(void)
{
    const char *broken = sd__jobsvc_check(F.svc);
    if (broken != NULL) {
        fail_msg("invariant broken: %s", broken);
    }
}

static inline void fake_install(sd_jobsvc *svc)
{
    F.svc = svc;
    F.now = 1700000000000LL;
    F.want_pump = 0;
    F.pacing = false;
    F.forced_queue = 0;
    sd__jobsvc_io io = { .send = fake_send,
                         .finish = fake_finish,
                         .send_queue_len = fake_queue_len,
                         .want_pump = fake_want_pump };
    sd__jobsvc_set_io(svc, &io);
    sd__jobsvc_set_clock(svc, fake_now);
}

static inline fcall *fcall_new(sd__jobsvc_method m)
{
    fcall *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->m = m;
    return c;
}

/* Open a call with raw request bytes. */
static inline fcall *open_raw(sd__jobsvc_method m, const void *bytes, size_t len)
{
    fcall *c = fcall_new(m);
    c->rec = sd__jobsvc_on_open(F.svc, m, c, sd_bytes_make(bytes, len));
    check_invariants();
    return c;
}

/* Open a call with a message (packed here). */
static inline fcall *open_msg(sd__jobsvc_method m, const ProtobufCMessage *req)
{
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(n == 0 ? 1 : n);
    assert_non_null(buf);
    protobuf_c_message_pack(req, buf);
    fcall *c = open_raw(m, buf, n);
    free(buf);
    return c;
}

/* Client message on a streaming call. */
static inline void call_feed(fcall *c, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n == 0 ? 1 : n);
    assert_non_null(buf);
    protobuf_c_message_pack(msg, buf);
    sd__jobsvc_on_message(F.svc, c->rec, sd_bytes_make(buf, n));
    free(buf);
    check_invariants();
}

static inline void call_feed_raw(fcall *c, const void *bytes, size_t len)
{
    sd__jobsvc_on_message(F.svc, c->rec, sd_bytes_make(bytes, len));
    check_invariants();
}

/* The transport's on_close, then free the fake. cancelled = the client went away. */
static inline void call_close(fcall *c)
{
    bool cancelled = !c->finished || c->code != SD_RPC_OK;
    c->closed = true;
    sd__jobsvc_on_close(F.svc, c->rec, cancelled && !c->finished);
    check_invariants();
    for (size_t i = 0; i < c->n_msgs; i++) {
        free(c->msgs[i].data);
    }
    free(c);
}

/* Unpack sent message i of call c as desc's type (caller frees with free_unpacked). */
static inline void *call_msg(fcall *c, size_t i, const ProtobufCMessageDescriptor *desc)
{
    assert_true(i < c->n_msgs);
    void *m = protobuf_c_message_unpack(desc, NULL, c->msgs[i].len, c->msgs[i].data);
    assert_non_null(m);
    return m;
}

static inline void pb_free(void *m)
{
    protobuf_c_message_free_unpacked(m, NULL);
}

/* A unary call that must succeed: returns the unpacked response; the call is closed. */
static inline void *unary_ok(sd__jobsvc_method m,
                             const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *resp_desc)
{
    fcall *c = open_msg(m, req);
    assert_null(c->rec);
    assert_true(c->finished);
    if (c->code != SD_RPC_OK) {
        fail_msg("call %d failed: code %d: %s", (int)m, (int)c->code, c->message);
    }
    assert_int_equal(c->n_msgs, 1);
    void *resp = call_msg(c, 0, resp_desc);
    call_close(c);
    return resp;
}

/* A unary call that must fail with code; the message must contain `needle` (if non-NULL). */
static inline void
unary_err(sd__jobsvc_method m, const ProtobufCMessage *req, sd_rpc_code code, const char *needle)
{
    fcall *c = open_msg(m, req);
    assert_null(c->rec);
    assert_true(c->finished);
    if (c->code != code) {
        fail_msg("call %d: expected code %d, got %d (%s)", (int)m, (int)code, (int)c->code,
                 c->message);
    }
    assert_int_equal(c->n_msgs, 0);
    if (needle != NULL && strstr(c->message, needle) == NULL) {
        fail_msg("error message \"%s\" lacks \"%s\"", c->message, needle);
    }
    call_close(c);
}

/* ---------------------------------------------------------------- pipelines for tests */

typedef Org__Apache__Beam__Model__Pipeline__V1__Components pb_components;
typedef Org__Apache__Beam__Model__Pipeline__V1__Components__EnvironmentsEntry pb_env_entry;
typedef Org__Apache__Beam__Model__JobManagement__V1__PrepareJobRequest pb_prepare_req;
typedef Org__Apache__Beam__Model__JobManagement__V1__PrepareJobResponse pb_prepare_resp;

#define PBJ(name) org__apache__beam__model__job_management__v1__##name
#define PBR(name) org__apache__beam__model__pipeline__v1__##name
#define REQ_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__ARTIFACT_REQUEST_WRAPPER__REQUEST_##x
#define RESP_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__ARTIFACT_RESPONSE_WRAPPER__RESPONSE_##x
#define MSG_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_RESPONSE__RESPONSE_##x

/* One dependency of a test environment: type URN plus a path (file/url) or data (embedded). */
typedef struct tdep {
    const char *type;
    const char *path; /* file path, URL, or embedded bytes */
    const char *role; /* may be NULL */
} tdep;

/* Packed bytes of an artifact payload for a test dependency (malloc'd). */
static inline uint8_t *tdep_payload(const tdep *d, size_t *len)
{
    ProtobufCMessage *m;
    Org__Apache__Beam__Model__Pipeline__V1__ArtifactFilePayload fp;
    Org__Apache__Beam__Model__Pipeline__V1__ArtifactUrlPayload up;
    Org__Apache__Beam__Model__Pipeline__V1__EmbeddedFilePayload ep;
    if (strcmp(d->type, "beam:artifact:type:url:v1") == 0) {
        PBR(artifact_url_payload__init)(&up);
        up.url = (char *)d->path;
        m = &up.base;
    } else if (strcmp(d->type, "beam:artifact:type:embedded:v1") == 0) {
        PBR(embedded_file_payload__init)(&ep);
        ep.data.data = (uint8_t *)d->path;
        ep.data.len = strlen(d->path);
        m = &ep.base;
    } else {
        PBR(artifact_file_payload__init)(&fp);
        fp.path = (char *)d->path;
        fp.sha256 = (char *)"abc123";
        m = &fp.base;
    }
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*len == 0 ? 1 : *len);
    assert_non_null(b);
    protobuf_c_message_pack(m, b);
    return b;
}

/*
 * Packed PrepareJobRequest for a pipeline with one environment per `envs` row (deps listed,
 * NULL-terminated by type == NULL), optional options. Caller frees with free().
 */
#define MAX_TENVS 4
#define MAX_TDEPS 8

static inline uint8_t *make_prepare(const char *job_name,
                                    const tdep envs[][MAX_TDEPS],
                                    size_t n_envs,
                                    Google__Protobuf__Struct *options,
                                    size_t *out_len)
{
    Org__Apache__Beam__Model__Pipeline__V1__Pipeline p;
    PBR(pipeline__init)(&p);
    pb_components comps;
    PBR(components__init)(&comps);
    p.components = &comps;
    pb_env_entry entries[MAX_TENVS];
    pb_env_entry *entry_ptrs[MAX_TENVS];
    Org__Apache__Beam__Model__Pipeline__V1__Environment env[MAX_TENVS];
    sd_pb_artifact arts[MAX_TENVS][MAX_TDEPS];
    sd_pb_artifact *art_ptrs[MAX_TENVS][MAX_TDEPS];
    uint8_t *payloads[MAX_TENVS][MAX_TDEPS] = { { 0 } };
    char ids[MAX_TENVS][24];
    assert_true(n_envs <= MAX_TENVS);
    for (size_t e = 0; e < n_envs; e++) {
        PBR(components__environments_entry__init)(&entries[e]);
        PBR(environment__init)(&env[e]);
        snprintf(ids[e], sizeof(ids[e]), "env%zu", e);
        entries[e].key = ids[e];
        entries[e].value = &env[e];
        env[e].urn = (char *)"beam:env:external:v1";
        size_t n = 0;
        while (n < MAX_TDEPS && envs[e][n].type != NULL) {
            PBR(artifact_information__init)(&arts[e][n]);
            arts[e][n].type_urn = (char *)envs[e][n].type;
            size_t len;
            payloads[e][n] = tdep_payload(&envs[e][n], &len);
            arts[e][n].type_payload.data = payloads[e][n];
            arts[e][n].type_payload.len = len;
            if (envs[e][n].role != NULL) {
                arts[e][n].role_urn = (char *)envs[e][n].role;
                arts[e][n].role_payload.data = (uint8_t *)"rp";
                arts[e][n].role_payload.len = 2;
            }
            art_ptrs[e][n] = &arts[e][n];
            n++;
        }
        env[e].n_dependencies = n;
        env[e].dependencies = art_ptrs[e];
        entry_ptrs[e] = &entries[e];
    }
    comps.n_environments = n_envs;
    comps.environments = entry_ptrs;
    char *root = (char *)"root";
    p.n_root_transform_ids = 1;
    p.root_transform_ids = &root;

    pb_prepare_req req;
    PBJ(prepare_job_request__init)(&req);
    req.pipeline = &p;
    req.pipeline_options = options;
    req.job_name = (char *)(job_name != NULL ? job_name : "");
    *out_len = protobuf_c_message_get_packed_size(&req.base);
    uint8_t *out = malloc(*out_len);
    assert_non_null(out);
    protobuf_c_message_pack(&req.base, out);
    for (size_t e = 0; e < n_envs; e++) {
        for (size_t d = 0; d < MAX_TDEPS; d++) {
            free(payloads[e][d]);
        }
    }
    return out;
}

/* Prepare a pipeline and return its preparation id (static buffer) and response. */
static inline pb_prepare_resp *prepare_ok(const char *job_name,
                                          const tdep envs[][MAX_TDEPS],
                                          size_t n_envs,
                                          Google__Protobuf__Struct *options)
{
    size_t len;
    uint8_t *bytes = make_prepare(job_name, envs, n_envs, options, &len);
    fcall *c = open_raw(SD__JS_PREPARE, bytes, len);
    free(bytes);
    assert_true(c->finished);
    if (c->code != SD_RPC_OK) {
        fail_msg("Prepare failed: %d %s", (int)c->code, c->message);
    }
    pb_prepare_resp *r = call_msg(c, 0, &PBJ(prepare_job_response__descriptor));
    call_close(c);
    return r;
}

#endif
