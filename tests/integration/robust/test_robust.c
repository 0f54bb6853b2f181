/*
 * Sundial: robustness of a whole runner against bad clients and misbehaving SDK workers.
 *
 * One embedded runner (runner/server/embed.h, hang timeout 2 s) serves every test in this
 * binary, in order, so each case also proves that the runner survived the previous one. The
 * test process is the runner's only peer, all on loopback:
 *
 *     test thread (one libev loop, one sd_rpc hub)              runner thread
 *     ---------------------------------------------             -------------
 *     Job API client (unary + server streams)      --------->  job service
 *     worker pool server (StartWorker/StopWorker)  <---------  executor (EXTERNAL env)
 *     fake SDK worker: Control/Data/State/Logging   --------->  Fn API
 *
 * Part 1 probes the Job API and the Fn API with bytes no real SDK would send: malformed
 * protobuf on every method (INVALID_ARGUMENT naming the message type), ids nobody issued
 * (NOT_FOUND naming the id), and a pipeline with several unknown URNs, a docker environment
 * and an unknown requirement (one error that lists every problem). Environments that cannot
 * yield a worker (garbage ExternalPayload, a pool nobody listens on, a missing PROCESS boot
 * command) fail their job naming the environment.
 *
 * Part 2 runs one small pipeline, impulse -> pardo1 (SDK) -> gbk (runner) -> pardo2 (SDK),
 * against a fake worker written directly on the transport: it fetches its descriptors with
 * GetProcessBundleDescriptor, reads its input from the Data stream and, depending on the row
 * of the case table, behaves or misbehaves in one precise way at pardo1's bundle. Each row
 * names the final job state and the words the failure text (JOB_MESSAGE_ERROR, read through
 * GetMessageStream) must contain; "$W" and "$S" stand for the worker id and pardo1's stage id.
 * After every row the runner must also stop the worker (StopWorker, streams ended) so nothing
 * from a failed job is left behind. Two more tests cancel a job whose worker hangs, and run a
 * good job beside a hung one (the good one must not wait for the hang to be detected).
 *
 * Timing: only the hang rows wait on the wall clock, for hang_timeout_s plus the executor's 2 s
 * progress interval (about 5 s each); the whole binary takes about 15 s.
 *
 * Callbacks never call cmocka asserts (a longjmp out of a libev callback would leave the loop
 * inconsistent): they record problems in F.problem, which the test bodies check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <ev.h>

#include "org/apache/beam/model/job_management/v1/beam_artifact_api.pb-c.h"
#include "org/apache/beam/model/job_management/v1/beam_job_api.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/base/vec.h"
#include "runner/coder/coder.h"
#include "runner/fnapi/fnapi.h"
#include "proto/pb.h"
#include "runner/server/embed.h"
#include "runner/transport/rpc.h"
#include "runner/urns/urns.h"

#define PBJ(name) org__apache__beam__model__job_management__v1__##name
#define PBP(name) org__apache__beam__model__pipeline__v1__##name
#define PBF(name) org__apache__beam__model__fn_execution__v1__##name
#define FNE(x)    ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__##x
#define JSTATE(x) ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_STATE__ENUM__##x
#define MSG_IS_STATE \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_RESPONSE__RESPONSE_STATE_RESPONSE
#define MSG_IS_MESSAGE \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_RESPONSE__RESPONSE_MESSAGE_RESPONSE
#define JOB_MESSAGE_ERROR 5

#define JS  "/org.apache.beam.model.job_management.v1.JobService/"
#define ARS "/org.apache.beam.model.job_management.v1.ArtifactRetrievalService/"
#define ASS "/org.apache.beam.model.job_management.v1.ArtifactStagingService/"

#define FAKE_DOFN_URN  "beam:dofn:robust_fake:v1"
#define HANG_TIMEOUT_S 2
#define STALL_TIMEOUT_S 5
#define JOB_TIMEOUT_S  40.0

typedef Org__Apache__Beam__Model__JobManagement__V1__JobMessagesResponse msgs_resp;
typedef SD_FN(ProcessBundleProgressResponse) pb_ProgressResponse;
typedef SD_FN(StateKey__BagUserState) pb_BagUserState;
typedef SD_FN(StateGetRequest) pb_StateGetRequest;
typedef SD_FN(ProcessBundleDescriptor) pb_Descriptor;
typedef SD_PL(Components) pb_Components;
typedef SD_PL(FunctionSpec) pb_FunctionSpec;
typedef SD_FN(BundleApplication) pb_BundleApplication;
typedef SD_FN(StateKey__IterableSideInput) pb_IterableSideInput;
typedef SD_FN(StateAppendRequest) pb_StateAppendRequest;
typedef SD_FN(StateClearRequest) pb_StateClearRequest;

/* ================================================================ fixture */

typedef struct fake fake;

typedef struct mcase mcase;

typedef struct fixture {
    struct ev_loop *loop;
    sd_rpc *rpc;
    sd_embedded *emb;
    char runner_ep[64];
    sd_rpc_channel *ch; /* to the runner */
    sd_rpc_server *pool;
    char pool_ep[64];
    bool pool_closed;
    /* per job */
    const mcase *mode;
    fake *fakes;
    int start_calls;
    int stop_calls;
    char worker_id[160]; /* from the last StartWorker */
    char stage_a[64];    /* pardo1's stage id (its descriptor id up to the first '.') */
    char desc_a[160];    /* pardo1's descriptor id as the runner sent it */
    char grouped[256];   /* what pardo2 saw: "k1=[a,c] k2=[b]" */
    char state_error[512];
    bool acted_a;       /* pardo1's bundle reached the fake worker */
    int state_errors;   /* StateResponses with an error */
    char problem[1024]; /* first problem seen inside a callback */
} fixture;

static fixture F;

static void problem(const char *fmt, ...) SD_PRINTF(1, 2);

static void problem(const char *fmt, ...)
{
    va_list ap;
    if (F.problem[0] != '\0') {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(F.problem, sizeof(F.problem), fmt, ap);
    va_end(ap);
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    bool *expired = w->data;
    (void)revents;
    *expired = true;
    ev_break(loop, EVBREAK_ONE);
}

/* Run the test loop until *flag or `seconds` pass. Returns *flag. */
static bool wait_for(const bool *flag, double seconds)
{
    bool expired = false;
    ev_timer t;
    ev_timer_init(&t, on_deadline, seconds, 0.);
    t.data = &expired;
    ev_timer_start(F.loop, &t);
    while (!*flag && !expired) {
        ev_run(F.loop, EVRUN_ONCE);
    }
    ev_timer_stop(F.loop, &t);
    return *flag;
}

/* Run the loop for a while (lets late callbacks arrive). */
static void settle(double seconds)
{
    bool never = false;
    (void)wait_for(&never, seconds);
}

static void pack(const ProtobufCMessage *m, sd_buf *out)
{
    sd_buf_init(out, 0);
    assert_int_equal(sd_pb_pack(m, out), SD_OK);
}

/* ================================================================ client calls */

typedef struct reply {
    bool done;
    sd_rpc_code code;
    char msg[4096];
    sd_buf data;
} reply;

static void on_unary(void *ctx, sd_rpc_code code, const char *message, sd_bytes resp)
{
    reply *r = ctx;
    r->code = code;
    snprintf(r->msg, sizeof(r->msg), "%s", message);
    sd_buf_init(&r->data, 0);
    if (sd_buf_append_bytes(&r->data, resp) != SD_OK) {
        problem("out of memory copying a reply");
    }
    r->done = true;
}

static void
unary_md(const char *path, sd_bytes req, const sd_rpc_metadata *md, size_t n_md, reply *r)
{
    sd_err err = { 0 };
    memset(r, 0, sizeof(*r));
    assert_int_equal(sd_rpc_unary(F.ch, path, req, md, n_md, 10000, on_unary, r, &err), SD_OK);
    assert_true(wait_for(&r->done, 15.0));
}

static void unary(const char *path, sd_bytes req, reply *r)
{
    unary_md(path, req, NULL, 0, r);
}

static void unary_msg(const char *path, const ProtobufCMessage *m, reply *r)
{
    sd_buf b;
    pack(m, &b);
    unary(path, sd_buf_bytes(&b), r);
    sd_buf_deinit(&b);
}

static void reply_free(reply *r)
{
    sd_buf_deinit(&r->data);
}

/* A client stream: messages collected until the server closes it. */
typedef struct cstream {
    bool done;
    sd_rpc_code code;
    char msg[4096];
    sd_vec msgs; /* sd_buf */
} cstream;

static void cs_on_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    cstream *c = ctx;
    sd_buf b;
    (void)s;
    sd_buf_init(&b, 0);
    if (sd_buf_append_bytes(&b, msg) != SD_OK || sd_vec_push(&c->msgs, &b) != SD_OK) {
        sd_buf_deinit(&b);
        problem("out of memory collecting stream messages");
    }
}

static void cs_on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    cstream *c = ctx;
    (void)s;
    c->code = code;
    snprintf(c->msg, sizeof(c->msg), "%s", message);
    c->done = true;
}

/* Open a stream, send `first` (if any), half-close unless `keep_open`, wait for the end. */
static void
stream_call(const char *path, const sd_bytes *first, bool keep_open, cstream *c, double seconds)
{
    sd_err err = { 0 };
    sd_rpc_stream *s = NULL;
    sd_rpc_stream_handler h = { cs_on_message, cs_on_close, c };
    memset(c, 0, sizeof(*c));
    sd_vec_init(&c->msgs, sizeof(sd_buf));
    assert_int_equal(sd_rpc_stream_open(F.ch, path, NULL, 0, &h, &s, &err), SD_OK);
    if (first != NULL) {
        assert_int_equal(sd_rpc_stream_send(s, *first), SD_OK);
    }
    if (!keep_open) {
        sd_rpc_stream_half_close(s);
    }
    if (!wait_for(&c->done, seconds)) {
        sd_rpc_stream_cancel(s);
        assert_true(wait_for(&c->done, 5.0));
        fail_msg("stream %s did not end within %.0f s", path, seconds);
    }
}

static void cstream_free(cstream *c)
{
    for (size_t i = 0; i < c->msgs.len; i++) {
        sd_buf_deinit(SD_VEC_AT(&c->msgs, sd_buf, i));
    }
    sd_vec_deinit(&c->msgs);
}

/* ================================================================ pipelines */

/* Every protobuf-c piece of a hand-made pipeline lives in this arena until it is packed. */
typedef struct arena {
    void *blocks[1024];
    size_t n;
} arena;

static void *az(arena *a, size_t size)
{
    assert_true(a->n < sizeof(a->blocks) / sizeof(a->blocks[0]));
    void *p = sd_calloc(1, size);
    assert_non_null(p);
    a->blocks[a->n++] = p;
    return p;
}

static void arena_free(arena *a)
{
    for (size_t i = 0; i < a->n; i++) {
        sd_free(a->blocks[i]);
    }
    a->n = 0;
}

#define PL_MAX 16

typedef struct plb {
    arena a;
    pb_Pipeline *p;
    pb_Components *c;
} plb;

static ProtobufCBinaryData packed_into(plb *b, const ProtobufCMessage *m)
{
    ProtobufCBinaryData d;
    d.len = protobuf_c_message_get_packed_size(m);
    d.data = az(&b->a, d.len + 1);
    protobuf_c_message_pack(m, d.data);
    return d;
}

static pb_FunctionSpec *spec(plb *b, const char *urn, ProtobufCBinaryData payload)
{
    pb_FunctionSpec *fs = az(&b->a, sizeof(*fs));
    PBP(function_spec__init)(fs);
    fs->urn = (char *)urn;
    fs->payload = payload;
    return fs;
}

static void pl_init(plb *b)
{
    memset(b, 0, sizeof(*b));
    b->p = az(&b->a, sizeof(*b->p));
    PBP(pipeline__init)(b->p);
    b->c = az(&b->a, sizeof(*b->c));
    PBP(components__init)(b->c);
    b->p->components = b->c;
    b->c->transforms = az(&b->a, PL_MAX * sizeof(void *));
    b->c->pcollections = az(&b->a, PL_MAX * sizeof(void *));
    b->c->coders = az(&b->a, PL_MAX * sizeof(void *));
    b->c->environments = az(&b->a, PL_MAX * sizeof(void *));
    b->c->windowing_strategies = az(&b->a, PL_MAX * sizeof(void *));
    b->p->root_transform_ids = az(&b->a, PL_MAX * sizeof(char *));
    b->p->requirements = az(&b->a, PL_MAX * sizeof(char *));

    /* The one windowing strategy "ws": global windows, default trigger. */
    SD_PL(WindowingStrategy) *ws = az(&b->a, sizeof(*ws));
    SD_PL(Trigger) *tr = az(&b->a, sizeof(*tr));
    SD_PL(Trigger__Default) *dflt = az(&b->a, sizeof(*dflt));
    PBP(windowing_strategy__init)(ws);
    PBP(trigger__init)(tr);
    PBP(trigger__default__init)(dflt);
    tr->trigger_case = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_DEFAULT;
    tr->default_ = dflt;
    ws->window_fn = spec(b, SD_URN_WINDOW_FN_GLOBAL, (ProtobufCBinaryData){ 0, NULL });
    ws->merge_status = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NON_MERGING;
    ws->window_coder_id = "gw";
    ws->trigger = tr;
    ws->accumulation_mode =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__DISCARDING;
    ws->output_time = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__END_OF_WINDOW;
    ws->closing_behavior =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_IF_NONEMPTY;
    ws->on_time_behavior =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ON_TIME_BEHAVIOR__ENUM__FIRE_IF_NONEMPTY;
    ws->assigns_to_one_window = true;
    SD_PL(Components__WindowingStrategiesEntry) *we = az(&b->a, sizeof(*we));
    PBP(components__windowing_strategies_entry__init)(we);
    we->key = "ws";
    we->value = ws;
    b->c->windowing_strategies[b->c->n_windowing_strategies++] = we;
}

static void pl_coder(plb *b, const char *id, const char *urn, const char *c0, const char *c1)
{
    SD_PL(Coder) *cd = az(&b->a, sizeof(*cd));
    PBP(coder__init)(cd);
    cd->spec = spec(b, urn, (ProtobufCBinaryData){ 0, NULL });
    cd->component_coder_ids = az(&b->a, 2 * sizeof(char *));
    if (c0 != NULL) {
        cd->component_coder_ids[cd->n_component_coder_ids++] = (char *)c0;
    }
    if (c1 != NULL) {
        cd->component_coder_ids[cd->n_component_coder_ids++] = (char *)c1;
    }
    SD_PL(Components__CodersEntry) *e = az(&b->a, sizeof(*e));
    PBP(components__coders_entry__init)(e);
    e->key = (char *)id;
    e->value = cd;
    assert_true(b->c->n_coders < PL_MAX);
    b->c->coders[b->c->n_coders++] = e;
}

static void pl_pcoll(plb *b, const char *id, const char *coder)
{
    SD_PL(PCollection) *pc = az(&b->a, sizeof(*pc));
    PBP(pcollection__init)(pc);
    pc->unique_name = (char *)id;
    pc->coder_id = (char *)coder;
    pc->is_bounded = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__IS_BOUNDED__ENUM__BOUNDED;
    pc->windowing_strategy_id = "ws";
    SD_PL(Components__PcollectionsEntry) *e = az(&b->a, sizeof(*e));
    PBP(components__pcollections_entry__init)(e);
    e->key = (char *)id;
    e->value = pc;
    assert_true(b->c->n_pcollections < PL_MAX);
    b->c->pcollections[b->c->n_pcollections++] = e;
}

static void pl_env(plb *b, const char *id, const char *urn, ProtobufCBinaryData payload)
{
    pb_Environment *env = az(&b->a, sizeof(*env));
    PBP(environment__init)(env);
    env->urn = (char *)urn;
    env->payload = payload;
    SD_PL(Components__EnvironmentsEntry) *e = az(&b->a, sizeof(*e));
    PBP(components__environments_entry__init)(e);
    e->key = (char *)id;
    e->value = env;
    assert_true(b->c->n_environments < PL_MAX);
    b->c->environments[b->c->n_environments++] = e;
}

/* An external environment whose worker pool is this test's pool server. */
static void pl_env_external(plb *b, const char *id)
{
    pb_ApiServiceDescriptor *ep = az(&b->a, sizeof(*ep));
    pb_ExternalPayload *xp = az(&b->a, sizeof(*xp));
    PBP(api_service_descriptor__init)(ep);
    PBP(external_payload__init)(xp);
    ep->url = F.pool_ep;
    xp->endpoint = ep;
    pl_env(b, id, SD_URN_ENV_EXTERNAL, packed_into(b, &xp->base));
}

/* A leaf transform; a pardo gets a ParDoPayload naming the fake DoFn. in/out may be NULL. */
static void pl_transform(plb *b,
                         const char *id,
                         const char *urn,
                         const char *in,
                         const char *out,
                         const char *env)
{
    SD_PL(PTransform) *t = az(&b->a, sizeof(*t));
    PBP(ptransform__init)(t);
    t->unique_name = (char *)id;
    ProtobufCBinaryData payload = { 0, NULL };
    if (strcmp(urn, SD_URN_TRANSFORM_PARDO) == 0) {
        SD_PL(ParDoPayload) *pd = az(&b->a, sizeof(*pd));
        PBP(par_do_payload__init)(pd);
        pd->do_fn = spec(b, FAKE_DOFN_URN, (ProtobufCBinaryData){ 0, NULL });
        payload = packed_into(b, &pd->base);
    }
    t->spec = spec(b, urn, payload);
    if (in != NULL) {
        SD_PL(PTransform__InputsEntry) *ie = az(&b->a, sizeof(*ie));
        PBP(ptransform__inputs_entry__init)(ie);
        ie->key = "in";
        ie->value = (char *)in;
        t->inputs = az(&b->a, sizeof(void *));
        t->inputs[0] = ie;
        t->n_inputs = 1;
    }
    if (out != NULL) {
        SD_PL(PTransform__OutputsEntry) *oe = az(&b->a, sizeof(*oe));
        PBP(ptransform__outputs_entry__init)(oe);
        oe->key = "out";
        oe->value = (char *)out;
        t->outputs = az(&b->a, sizeof(void *));
        t->outputs[0] = oe;
        t->n_outputs = 1;
    }
    if (env != NULL) {
        t->environment_id = (char *)env;
    }
    SD_PL(Components__TransformsEntry) *e = az(&b->a, sizeof(*e));
    PBP(components__transforms_entry__init)(e);
    e->key = (char *)id;
    e->value = t;
    assert_true(b->c->n_transforms < PL_MAX);
    b->c->transforms[b->c->n_transforms++] = e;
    b->p->root_transform_ids[b->p->n_root_transform_ids++] = (char *)id;
}

static void pl_common_coders(plb *b)
{
    pl_coder(b, "bytes", SD_URN_CODER_BYTES, NULL, NULL);
    pl_coder(b, "kv", SD_URN_CODER_KV, "bytes", "bytes");
    pl_coder(b, "gw", SD_URN_CODER_GLOBAL_WINDOW, NULL, NULL);
    pl_coder(b, "it", SD_URN_CODER_ITERABLE, "bytes", NULL);
    pl_coder(b, "kvit", SD_URN_CODER_KV, "bytes", "it");
}

/* impulse -> pardo1 (fake worker) -> gbk -> pardo2 (fake worker) */
/* impulse -> pardo1 -> gbk -> pardo2, both pardos in environment "fake" (see pl_main). */
static void pl_main_in(plb *b, const char *env_urn, ProtobufCBinaryData env_payload)
{
    pl_init(b);
    pl_common_coders(b);
    if (env_urn == NULL) {
        pl_env_external(b, "fake");
    } else {
        pl_env(b, "fake", env_urn, env_payload);
    }
    pl_pcoll(b, "p_imp", "bytes");
    pl_pcoll(b, "p_kv", "kv");
    pl_pcoll(b, "p_grp", "kvit");
    pl_pcoll(b, "p_out", "bytes");
    pl_transform(b, "impulse", SD_URN_TRANSFORM_IMPULSE, NULL, "p_imp", NULL);
    pl_transform(b, "pardo1", SD_URN_TRANSFORM_PARDO, "p_imp", "p_kv", "fake");
    pl_transform(b, "gbk", SD_URN_TRANSFORM_GROUP_BY_KEY, "p_kv", "p_grp", NULL);
    pl_transform(b, "pardo2", SD_URN_TRANSFORM_PARDO, "p_grp", "p_out", "fake");
}

/* impulse -> pardo1 (fake worker) -> gbk -> pardo2 (fake worker) */
static void pl_main(plb *b)
{
    pl_main_in(b, NULL, (ProtobufCBinaryData){ 0, NULL });
}

/* ================================================================ jobs */

typedef struct job_result {
    char job_id[160];
    int state;
    char error[8192];  /* every JOB_MESSAGE_ERROR text, joined by " | " */
    char others[8192]; /* the other messages (warnings, worker logs), for diagnostics */
} job_result;

static void append(char *dst, size_t cap, const char *text)
{
    size_t n = strlen(dst);
    if (n > 0 && n + 3 < cap) {
        memcpy(dst + n, " | ", 4);
        n += 3;
    }
    snprintf(dst + n, cap - n, "%s", text);
}

/* Prepare; returns the preparation id in r (its data unpacked) or the error in r. */
static void prepare(const pb_Pipeline *p, const char *name, reply *r, char *prep_id, size_t cap)
{
    Org__Apache__Beam__Model__JobManagement__V1__PrepareJobRequest req;
    PBJ(prepare_job_request__init)(&req);
    req.pipeline = (pb_Pipeline *)p;
    req.job_name = (char *)name;
    unary_msg(JS "Prepare", &req.base, r);
    if (r->code == SD_RPC_OK && prep_id != NULL) {
        Org__Apache__Beam__Model__JobManagement__V1__PrepareJobResponse *resp =
            (void *)protobuf_c_message_unpack(&PBJ(prepare_job_response__descriptor), NULL,
                                              r->data.len, r->data.data);
        assert_non_null(resp);
        snprintf(prep_id, cap, "%s", resp->preparation_id);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
}

/* Read a job's message stream to its end: final state and error texts. */
static void collect_messages(const char *job_id, job_result *out)
{
    Org__Apache__Beam__Model__JobManagement__V1__JobMessagesRequest req;
    PBJ(job_messages_request__init)(&req);
    req.job_id = (char *)job_id;
    sd_buf b;
    pack(&req.base, &b);
    sd_bytes first = sd_buf_bytes(&b);
    cstream c;
    stream_call(JS "GetMessageStream", &first, false, &c, JOB_TIMEOUT_S);
    sd_buf_deinit(&b);
    assert_int_equal(c.code, SD_RPC_OK);
    for (size_t i = 0; i < c.msgs.len; i++) {
        sd_buf *m = SD_VEC_AT(&c.msgs, sd_buf, i);
        msgs_resp *r = (msgs_resp *)protobuf_c_message_unpack(
            &PBJ(job_messages_response__descriptor), NULL, m->len, m->data);
        assert_non_null(r);
        if (r->response_case == MSG_IS_STATE && r->state_response != NULL) {
            out->state = (int)r->state_response->state;
        } else if (r->response_case == MSG_IS_MESSAGE && r->message_response != NULL) {
            if ((int)r->message_response->importance == JOB_MESSAGE_ERROR) {
                append(out->error, sizeof(out->error), r->message_response->message_text);
            } else {
                append(out->others, sizeof(out->others), r->message_response->message_text);
            }
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    cstream_free(&c);
}

/* Run a prepared job and follow it to its end. */
static void run_prepared(const char *prep, const char *name, job_result *out)
{
    reply r;
    memset(out, 0, sizeof(*out));
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run;
    PBJ(run_job_request__init)(&run);
    run.preparation_id = (char *)prep;
    unary_msg(JS "Run", &run.base, &r);
    if (r.code != SD_RPC_OK) {
        fail_msg("Run %s: %d %s", name, (int)r.code, r.msg);
    }
    Org__Apache__Beam__Model__JobManagement__V1__RunJobResponse *rr =
        (void *)protobuf_c_message_unpack(&PBJ(run_job_response__descriptor), NULL, r.data.len,
                                          r.data.data);
    assert_non_null(rr);
    snprintf(out->job_id, sizeof(out->job_id), "%s", rr->job_id);
    protobuf_c_message_free_unpacked(&rr->base, NULL);
    reply_free(&r);
    collect_messages(out->job_id, out);
}

/* Prepare, Run and follow a job to its end. */
static void run_job(const pb_Pipeline *p, const char *name, job_result *out)
{
    reply r;
    char prep[160];
    prepare(p, name, &r, prep, sizeof(prep));
    if (r.code != SD_RPC_OK) {
        fail_msg("Prepare %s: %d %s", name, (int)r.code, r.msg);
    }
    reply_free(&r);
    run_prepared(prep, name, out);
}

/* ================================================================ the fake SDK worker */

typedef enum misbehave {
    MB_GOOD,
    MB_GARBAGE_ELEMENT,     /* sink data that is not a windowed KV */
    MB_GARBAGE_LAST,        /* the same, but the response first and the bad data last */
    MB_TRUNCATED_ELEMENT,   /* one good element, then half of another */
    MB_HALF_CLOSE_CONTROL,  /* half-close the control stream mid-bundle */
    MB_CANCEL_CONTROL,      /* cancel the control stream mid-bundle */
    MB_DISCONNECT,          /* drop the whole connection mid-bundle */
    MB_ERROR_RESPONSE,      /* ProcessBundle answered with an error string */
    MB_MALFORMED_DATA,      /* bytes on the Data stream that are not an Elements message */
    MB_MALFORMED_CONTROL,   /* bytes on the Control stream that are not an InstructionResponse */
    MB_MALFORMED_STATE,     /* bytes on the State stream that are not a StateRequest */
    MB_UNKNOWN_INSTRUCTION, /* data for an instruction nobody sent, then a good bundle */
    MB_UNKNOWN_TRANSFORM,   /* data for the right bundle but a transform that is no sink */
    MB_UNKNOWN_TIMER,       /* timers for a family the stage does not have */
    MB_WRONG_RESPONSE_KIND, /* ProcessBundle answered with a progress response */
    MB_STATE_UNKNOWN,       /* a state request naming no bundle, then a good bundle */
    MB_STATE_GARBAGE,       /* state requests with garbage keys for a stateless stage */
    MB_DUPLICATE_RESPONSE,  /* every response sent twice */
    MB_NO_IS_LAST,          /* answers ProcessBundle but never ends its output stream */
    MB_BAD_RESIDUAL,        /* a residual root whose element is not an input element */
    MB_ODD_METRICS,         /* monitoring infos with garbage payloads and empty URNs */
    MB_LOGS,                /* garbage on the Logging stream, then a real log entry */
    MB_STALL,               /* answers progress requests, never finishes the bundle */
    MB_HANG,                /* never answers the bundle nor progress requests */
    MB_POOL_REFUSES,        /* StartWorkerResponse.error */
    MB_POOL_FAILS           /* StartWorker fails with a gRPC status */
} misbehave;

struct mcase {
    const char *name;
    misbehave mb;
    int want_state;
    const char *want[5]; /* substrings of the error text; "$W" worker id, "$S" pardo1's stage */
};

typedef struct fdesc {
    char id[160];
    int status; /* 0 unknown, 1 fetching, 2 ready, 3 failed */
    int role;   /* 1 = pardo1's stage, 2 = pardo2's stage */
    char source[128];
    char sinks[4][128];
    size_t n_sinks;
} fdesc;

typedef struct fbundle {
    char iid[160];
    char desc[160];
    bool requested;
    bool input_done;
    bool acted;
    sd_buf input;
} fbundle;

struct fake {
    fake *next;
    const mcase *mode; /* the row this worker plays (F.mode when it started) */
    char id[160];
    sd_rpc_channel *ch;
    sd_rpc_stream *ctl;
    sd_rpc_stream *data;
    sd_rpc_stream *state;
    sd_rpc_stream *logging;
    int open; /* streams whose on_close has not run yet */
    bool closed_all;
    fdesc descs[4];
    size_t n_descs;
    fbundle bundles[32];
    size_t n_bundles;
    fbundle *waiting; /* a bundle waiting for `waiting_for` more StateResponses */
    const fdesc *waiting_desc;
    int waiting_for;
};

static fbundle *bundle_get(fake *f, const char *iid)
{
    for (size_t i = 0; i < f->n_bundles; i++) {
        if (strcmp(f->bundles[i].iid, iid) == 0) {
            return &f->bundles[i];
        }
    }
    if (f->n_bundles == sizeof(f->bundles) / sizeof(f->bundles[0])) {
        problem("fake worker %s: too many bundles", f->id);
        return NULL;
    }
    fbundle *b = &f->bundles[f->n_bundles++];
    memset(b, 0, sizeof(*b));
    snprintf(b->iid, sizeof(b->iid), "%s", iid);
    sd_buf_init(&b->input, 0);
    return b;
}

static fdesc *desc_get(fake *f, const char *id)
{
    for (size_t i = 0; i < f->n_descs; i++) {
        if (strcmp(f->descs[i].id, id) == 0) {
            return &f->descs[i];
        }
    }
    if (f->n_descs == sizeof(f->descs) / sizeof(f->descs[0])) {
        problem("fake worker %s: too many descriptors", f->id);
        return NULL;
    }
    fdesc *d = &f->descs[f->n_descs++];
    memset(d, 0, sizeof(*d));
    snprintf(d->id, sizeof(d->id), "%s", id);
    return d;
}

static void send_on(sd_rpc_stream *s, const ProtobufCMessage *m)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    if (s == NULL || sd_pb_pack(m, &b) != SD_OK ||
        sd_rpc_stream_send(s, sd_buf_bytes(&b)) != SD_OK) {
        /* Sending after the runner ended the stream is expected in the failure rows. */
        SD_DEBUG("robust", "fake worker: a send was refused");
    }
    sd_buf_deinit(&b);
}

static void send_raw(sd_rpc_stream *s, sd_bytes bytes)
{
    if (s == NULL || sd_rpc_stream_send(s, bytes) != SD_OK) {
        SD_DEBUG("robust", "fake worker: a raw send was refused");
    }
}

static void respond(fake *f, const char *iid, const char *error, int kind)
{
    pb_InstructionResponse resp =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_RESPONSE__INIT;
    pb_ProcessBundleResponse pb =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_RESPONSE__INIT;
    pb_ProgressResponse pr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_PROGRESS_RESPONSE__INIT;
    pb_ProcessBundleSplitResponse sr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_SPLIT_RESPONSE__INIT;
    resp.instruction_id = (char *)iid;
    if (error != NULL) {
        resp.error = (char *)error;
    } else if (kind == FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE)) {
        resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
        resp.process_bundle = &pb;
    } else if (kind == FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS)) {
        resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS);
        resp.process_bundle_progress = &pr;
    } else {
        resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT);
        resp.process_bundle_split = &sr;
    }
    send_on(f->ctl, &resp.base);
}

static void respond_with(fake *f, const char *iid, pb_ProcessBundleResponse *pb)
{
    pb_InstructionResponse resp =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__INSTRUCTION_RESPONSE__INIT;
    resp.instruction_id = (char *)iid;
    resp.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    resp.process_bundle = pb;
    send_on(f->ctl, &resp.base);
}

/* Send one data chunk (and/or the is_last marker) for a transform of a bundle. */
static void send_data(fake *f, const char *iid, const char *tid, sd_bytes bytes, bool is_last)
{
    pb_Elements msg = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
    pb_Elements_Data d = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    pb_Elements_Data *ds[1] = { &d };
    d.instruction_id = (char *)iid;
    d.transform_id = (char *)tid;
    d.data.data = (uint8_t *)bytes.ptr;
    d.data.len = bytes.len;
    d.is_last = is_last;
    msg.n_data = 1;
    msg.data = ds;
    send_on(f->data, &msg.base);
}

/* A windowed value in the global window with a KV<bytes, bytes> (or a bytes) element. */
static void put_wv(sd_buf *out, const char *key, const char *value)
{
    sd_coder *gw = NULL;
    sd_err err = { 0 };
    sd_window w = sd_window_global();
    sd_pane pane = SD_PANE_NO_FIRING;
    if (sd_coder_new(&gw, &err, SD_CODER_GLOBAL_WINDOW, NULL) != SD_OK ||
        sd_wv_encode_header(out, gw, 1000, &w, 1, &pane) != SD_OK ||
        (key != NULL && sd_buf_put_lp(out, sd_bytes_str(key)) != SD_OK) ||
        sd_buf_put_lp(out, sd_bytes_str(value)) != SD_OK) {
        problem("encoding a windowed value failed: %s", sd_err_msg(&err));
    }
    sd_coder_destroy(gw);
}

/*
 * Decode pardo2's input, windowed KV<bytes, iterable<bytes>> values, into "k=[v,v] k=[v]"
 * (keys and values in arrival order).
 */
static void describe_grouped(sd_bytes in, char *out, size_t cap)
{
    sd_coder *b = NULL, *it = NULL, *kv = NULL, *gw = NULL, *wv = NULL;
    sd_err err = { 0 };
    sd_reader r = sd_reader_make(in);
    sd_wv_header h;
    out[0] = '\0';
    sd_wv_header_init(&h);
    if (sd_coder_new(&b, &err, SD_CODER_BYTES, NULL) != SD_OK ||
        sd_coder_new(&it, &err, SD_CODER_ITERABLE, b, NULL) != SD_OK ||
        sd_coder_new(&kv, &err, SD_CODER_KV, b, it, NULL) != SD_OK ||
        sd_coder_new(&gw, &err, SD_CODER_GLOBAL_WINDOW, NULL) != SD_OK ||
        sd_coder_new(&wv, &err, SD_CODER_WINDOWED_VALUE, kv, gw, NULL) != SD_OK) {
        problem("building coders failed: %s", sd_err_msg(&err));
        goto done;
    }
    while (!sd_reader_done(&r)) {
        sd_bytes elem, key, v;
        uint32_t count;
        if (sd_wv_decode(wv, &r, &h, &elem, &err) != SD_OK) {
            problem("pardo2's input is not windowed KV<bytes, iterable<bytes>>: %s",
                    sd_err_msg(&err));
            goto done;
        }
        sd_reader er = sd_reader_make(elem);
        if (sd_reader_lp(&er, &key) != SD_OK || sd_reader_be32(&er, &count) != SD_OK) {
            problem("pardo2's input element is malformed");
            goto done;
        }
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%.*s=[", n > 0 ? " " : "", (int)key.len,
                 (const char *)key.ptr);
        for (uint32_t i = 0; i < count; i++) {
            if (sd_reader_lp(&er, &v) != SD_OK) {
                problem("pardo2's input iterable is malformed");
                goto done;
            }
            n = strlen(out);
            snprintf(out + n, cap - n, "%s%.*s", i > 0 ? "," : "", (int)v.len, (const char *)v.ptr);
        }
        n = strlen(out);
        snprintf(out + n, cap - n, "]");
    }
done:
    sd_wv_header_deinit(&h);
    sd_coder_destroy(wv);
    sd_coder_destroy(gw);
    sd_coder_destroy(kv);
    sd_coder_destroy(it);
    sd_coder_destroy(b);
}

static void good_outputs(fake *f, const fbundle *b, const fdesc *d)
{
    sd_buf out;
    sd_buf_init(&out, 0);
    if (d->role == 1) {
        put_wv(&out, "k1", "a");
        put_wv(&out, "k2", "b");
        put_wv(&out, "k1", "c");
    } else {
        put_wv(&out, NULL, "done");
    }
    for (size_t i = 0; i < d->n_sinks; i++) {
        send_data(f, b->iid, d->sinks[i], sd_buf_bytes(&out), false);
        send_data(f, b->iid, d->sinks[i], SD_BYTES_NULL, true);
    }
    sd_buf_deinit(&out);
}

/* A bundle has its request, its whole input and its descriptor: act on the case's row. */
static void act(fake *f, fbundle *b, const fdesc *d)
{
    static const uint8_t garbage[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                       0xff, 0x7f, 0x00, 0x00, 0x00, 0x05, 0x0f, 0x09 };
    static const uint8_t not_proto[] = { 0x0a, 0x7f, 0x01, 0x02 };
    const int pb_kind = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
    misbehave mb = d->role == 1 ? f->mode->mb : MB_GOOD;

    if (d->role == 2) {
        describe_grouped(sd_buf_bytes(&b->input), F.grouped, sizeof(F.grouped));
    } else {
        F.acted_a = true;
    }
    switch (mb) {
    case MB_GOOD:
    case MB_POOL_REFUSES:
    case MB_POOL_FAILS:
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        break;
    case MB_GARBAGE_ELEMENT:
        for (size_t i = 0; i < d->n_sinks; i++) {
            send_data(f, b->iid, d->sinks[i], sd_bytes_make(garbage, sizeof(garbage)), true);
        }
        respond(f, b->iid, NULL, pb_kind);
        break;
    case MB_GARBAGE_LAST: {
        /* One Elements message: the bad output with its is_last, then an entry for another
         * instruction, so the runner goes on reading the message after the job failed. */
        pb_Elements msg = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
        pb_Elements_Data d0 = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
        pb_Elements_Data d1 = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
        pb_Elements_Data *ds[2] = { &d0, &d1 };
        d0.instruction_id = b->iid;
        d0.transform_id = (char *)d->sinks[0];
        d0.data.data = (uint8_t *)garbage;
        d0.data.len = sizeof(garbage);
        d0.is_last = true;
        d1.instruction_id = "robust-another-instruction";
        d1.transform_id = (char *)d->sinks[0];
        d1.is_last = true;
        msg.n_data = 2;
        msg.data = ds;
        respond(f, b->iid, NULL, pb_kind);
        send_on(f->data, &msg.base);
        break;
    }
    case MB_TRUNCATED_ELEMENT: {
        sd_buf out;
        sd_buf_init(&out, 0);
        put_wv(&out, "k1", "a");
        put_wv(&out, "k2", "a-value-that-will-be-cut");
        out.len -= 7;
        for (size_t i = 0; i < d->n_sinks; i++) {
            send_data(f, b->iid, d->sinks[i], sd_buf_bytes(&out), true);
        }
        sd_buf_deinit(&out);
        respond(f, b->iid, NULL, pb_kind);
        break;
    }
    case MB_HALF_CLOSE_CONTROL:
        sd_rpc_stream_half_close(f->ctl);
        break;
    case MB_CANCEL_CONTROL:
        sd_rpc_stream_cancel(f->ctl);
        break;
    case MB_DISCONNECT:
        sd_rpc_channel_destroy(f->ch);
        f->ch = NULL;
        break;
    case MB_ERROR_RESPONSE:
        respond(f, b->iid, "robust: the DoFn exploded on element 7 (ZeroDivisionError)", 0);
        break;
    case MB_MALFORMED_DATA:
        send_raw(f->data, sd_bytes_make(not_proto, sizeof(not_proto)));
        break;
    case MB_MALFORMED_CONTROL:
        send_raw(f->ctl, sd_bytes_make(not_proto, sizeof(not_proto)));
        break;
    case MB_MALFORMED_STATE:
        send_raw(f->state, sd_bytes_make(not_proto, sizeof(not_proto)));
        break;
    case MB_UNKNOWN_INSTRUCTION: {
        sd_buf out;
        sd_buf_init(&out, 0);
        put_wv(&out, "k9", "z");
        send_data(f, "robust-no-such-instruction", d->sinks[0], sd_buf_bytes(&out), true);
        sd_buf_deinit(&out);
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        break;
    }
    case MB_UNKNOWN_TRANSFORM: {
        sd_buf out;
        sd_buf_init(&out, 0);
        put_wv(&out, "k1", "a");
        send_data(f, b->iid, "robust-no-such-transform", sd_buf_bytes(&out), true);
        sd_buf_deinit(&out);
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        break;
    }
    case MB_UNKNOWN_TIMER: {
        pb_Elements msg = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
        pb_Elements_Timers t = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__TIMERS__INIT;
        pb_Elements_Timers *ts[1] = { &t };
        t.instruction_id = b->iid;
        t.transform_id = "pardo1";
        t.timer_family_id = "robust-no-such-family";
        t.timers.data = (uint8_t *)garbage;
        t.timers.len = sizeof(garbage);
        msg.n_timers = 1;
        msg.timers = ts;
        send_on(f->data, &msg.base);
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        break;
    }
    case MB_WRONG_RESPONSE_KIND:
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS));
        break;
    case MB_STATE_UNKNOWN: {
        pb_StateRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__INIT;
        pb_StateKey key = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
        pb_BagUserState bag =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
        pb_StateGetRequest get =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_GET_REQUEST__INIT;
        bag.transform_id = "pardo1";
        bag.user_state_id = "robust-state";
        key.type_case = FNE(STATE_KEY__TYPE_BAG_USER_STATE);
        key.bag_user_state = &bag;
        req.id = "robust-state-1";
        req.instruction_id = "robust-no-such-bundle";
        req.state_key = &key;
        req.request_case = FNE(STATE_REQUEST__REQUEST_GET);
        req.get = &get;
        send_on(f->state, &req.base);
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        break;
    }
    case MB_STATE_GARBAGE: {
        /* Append, get, clear and a side-input read on a bundle that has no state at all,
         * with keys and windows that decode as nothing. */
        static const int kinds[4] = { FNE(STATE_REQUEST__REQUEST_APPEND),
                                      FNE(STATE_REQUEST__REQUEST_GET),
                                      FNE(STATE_REQUEST__REQUEST_CLEAR),
                                      FNE(STATE_REQUEST__REQUEST_GET) };
        for (int k = 0; k < 4; k++) {
            pb_StateRequest req = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__INIT;
            pb_StateKey key = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__INIT;
            pb_BagUserState bag =
                ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__BAG_USER_STATE__INIT;
            pb_IterableSideInput side =
                ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__ITERABLE_SIDE_INPUT__INIT;
            pb_StateGetRequest get =
                ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_GET_REQUEST__INIT;
            pb_StateAppendRequest app =
                ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_APPEND_REQUEST__INIT;
            pb_StateClearRequest clr =
                ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_CLEAR_REQUEST__INIT;
            char id[32];
            snprintf(id, sizeof(id), "robust-garbage-%d", k);
            if (k < 3) {
                bag.transform_id = "pardo1";
                bag.user_state_id = "robust-no-such-state";
                bag.key.data = (uint8_t *)garbage;
                bag.key.len = sizeof(garbage);
                bag.window.data = (uint8_t *)garbage;
                bag.window.len = 3;
                key.type_case = FNE(STATE_KEY__TYPE_BAG_USER_STATE);
                key.bag_user_state = &bag;
            } else {
                side.transform_id = "pardo1";
                side.side_input_id = "robust-no-such-side-input";
                side.window.data = (uint8_t *)garbage;
                side.window.len = sizeof(garbage);
                key.type_case = FNE(STATE_KEY__TYPE_ITERABLE_SIDE_INPUT);
                key.iterable_side_input = &side;
            }
            req.id = id;
            req.instruction_id = b->iid;
            req.state_key = &key;
            req.request_case = kinds[k];
            if (k == 0) {
                app.data.data = (uint8_t *)garbage;
                app.data.len = sizeof(garbage);
                req.append = &app;
            } else if (k == 2) {
                req.clear = &clr;
            } else {
                req.get = &get;
            }
            send_on(f->state, &req.base);
        }
        /* Like a real SDK, the bundle goes on only once its state reads are answered. */
        f->waiting = b;
        f->waiting_desc = d;
        f->waiting_for = 4;
        break;
    }
    case MB_DUPLICATE_RESPONSE:
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        respond(f, b->iid, NULL, pb_kind);
        break;
    case MB_NO_IS_LAST: {
        sd_buf out;
        sd_buf_init(&out, 0);
        put_wv(&out, "k1", "a");
        for (size_t i = 0; i < d->n_sinks; i++) {
            send_data(f, b->iid, d->sinks[i], sd_buf_bytes(&out), false);
        }
        sd_buf_deinit(&out);
        respond(f, b->iid, NULL, pb_kind);
        break;
    }
    case MB_BAD_RESIDUAL: {
        pb_ProcessBundleResponse pb =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_RESPONSE__INIT;
        pb_DelayedBundleApplication dba =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__DELAYED_BUNDLE_APPLICATION__INIT;
        pb_BundleApplication ba =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__BUNDLE_APPLICATION__INIT;
        pb_DelayedBundleApplication *roots[1] = { &dba };
        ba.transform_id = "pardo1";
        ba.input_id = "in";
        ba.element.data = (uint8_t *)garbage;
        ba.element.len = sizeof(garbage);
        dba.application = &ba;
        pb.n_residual_roots = 1;
        pb.residual_roots = roots;
        good_outputs(f, b, d);
        respond_with(f, b->iid, &pb);
        break;
    }
    case MB_ODD_METRICS: {
        pb_ProcessBundleResponse pb =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__PROCESS_BUNDLE_RESPONSE__INIT;
        pb_MonitoringInfo m0 = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__INIT;
        pb_MonitoringInfo m1 = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__INIT;
        pb_MonitoringInfo *ms[2] = { &m0, &m1 };
        m0.urn = "beam:metric:user:sum_int64:v1";
        m0.type = "beam:metrics:sum_int64:v1";
        m0.payload.data = (uint8_t *)garbage;
        m0.payload.len = sizeof(garbage);
        pb.n_monitoring_infos = 2;
        pb.monitoring_infos = ms;
        good_outputs(f, b, d);
        respond_with(f, b->iid, &pb);
        break;
    }
    case MB_LOGS: {
        pb_LogEntry_List list = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__LOG_ENTRY__LIST__INIT;
        pb_LogEntry e = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__LOG_ENTRY__INIT;
        pb_LogEntry *es[1] = { &e };
        e.severity = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__LOG_ENTRY__SEVERITY__ENUM__WARN;
        e.message = "robust: a log line from pardo1";
        e.transform_id = "pardo1";
        e.instruction_id = b->iid;
        list.n_log_entries = 1;
        list.log_entries = es;
        send_raw(f->logging, sd_bytes_make(not_proto, sizeof(not_proto)));
        send_on(f->logging, &list.base);
        good_outputs(f, b, d);
        respond(f, b->iid, NULL, pb_kind);
        break;
    }
    case MB_STALL:
    case MB_HANG:
        break;
    }
}

static void maybe_act(fake *f, fbundle *b)
{
    if (b == NULL || b->acted || !b->requested || !b->input_done) {
        return;
    }
    fdesc *d = desc_get(f, b->desc);
    if (d == NULL || d->status != 2) {
        return;
    }
    b->acted = true;
    act(f, b, d);
}

typedef struct desc_call {
    fake *f;
    char id[160];
} desc_call;

/* Learn a descriptor's role, its data source and its sinks. */
static void on_descriptor(void *ctx, sd_rpc_code code, const char *message, sd_bytes resp)
{
    desc_call *dc = ctx;
    fake *f = dc->f;
    fdesc *d = desc_get(f, dc->id);
    sd_free(dc);
    if (d == NULL) {
        return;
    }
    if (code != SD_RPC_OK) {
        d->status = 3;
        problem("GetProcessBundleDescriptor %s: %s", d->id, message);
        return;
    }
    pb_Descriptor *pbd = (void *)protobuf_c_message_unpack(
        &PBF(process_bundle_descriptor__descriptor), NULL, resp.len, resp.ptr);
    if (pbd == NULL) {
        d->status = 3;
        problem("descriptor %s does not parse", d->id);
        return;
    }
    for (size_t i = 0; i < pbd->n_transforms; i++) {
        const char *tid = pbd->transforms[i]->key;
        const SD_PL(PTransform) *t = pbd->transforms[i]->value;
        const char *urn = t->spec != NULL ? t->spec->urn : "";
        if (strcmp(tid, "pardo1") == 0) {
            d->role = 1;
            /* Descriptor ids are "STAGE.JOB.TOKEN"; messages name the stage. */
            snprintf(F.desc_a, sizeof(F.desc_a), "%s", d->id);
            snprintf(F.stage_a, sizeof(F.stage_a), "%.*s", (int)strcspn(d->id, "."), d->id);
        } else if (strcmp(tid, "pardo2") == 0) {
            d->role = 2;
        } else if (strcmp(urn, SD_URN_RUNNER_SOURCE) == 0) {
            snprintf(d->source, sizeof(d->source), "%s", tid);
        } else if (strcmp(urn, SD_URN_RUNNER_SINK) == 0 && d->n_sinks < 4) {
            snprintf(d->sinks[d->n_sinks++], sizeof(d->sinks[0]), "%s", tid);
        }
    }
    protobuf_c_message_free_unpacked(&pbd->base, NULL);
    if (d->role == 0 || d->source[0] == '\0' || (d->role == 1 && d->n_sinks != 1)) {
        d->status = 3;
        problem("descriptor %s: unexpected shape (role %d, source \"%s\", %zu sinks)", d->id,
                d->role, d->source, d->n_sinks);
        return;
    }
    d->status = 2;
    for (size_t i = 0; i < f->n_bundles; i++) {
        maybe_act(f, &f->bundles[i]);
    }
}

static void fetch_descriptor(fake *f, fdesc *d)
{
    pb_GetProcessBundleDescriptorRequest req =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__GET_PROCESS_BUNDLE_DESCRIPTOR_REQUEST__INIT;
    sd_rpc_metadata md = { "worker_id", f->id };
    sd_buf b;
    sd_err err = { 0 };
    desc_call *dc = sd_calloc(1, sizeof(*dc));
    if (dc == NULL || f->ch == NULL) {
        sd_free(dc);
        problem("cannot fetch descriptor %s", d->id);
        return;
    }
    dc->f = f;
    snprintf(dc->id, sizeof(dc->id), "%s", d->id);
    req.process_bundle_descriptor_id = d->id;
    sd_buf_init(&b, 0);
    if (sd_pb_pack(&req.base, &b) != SD_OK ||
        sd_rpc_unary(f->ch, SD_PATH_GET_PBD, sd_buf_bytes(&b), &md, 1, 10000, on_descriptor, dc,
                     &err) != SD_OK) {
        sd_free(dc);
        problem("GetProcessBundleDescriptor could not be sent: %s", sd_err_msg(&err));
    } else {
        d->status = 1;
    }
    sd_buf_deinit(&b);
}

static void on_ctl_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fake *f = ctx;
    (void)s;
    pb_InstructionRequest *req = (void *)protobuf_c_message_unpack(
        &PBF(instruction_request__descriptor), NULL, msg.len, msg.ptr);
    if (req == NULL) {
        problem("the runner sent a malformed InstructionRequest");
        return;
    }
    switch (req->request_case) {
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE): {
        fbundle *b = bundle_get(f, req->instruction_id);
        if (b != NULL && req->process_bundle != NULL) {
            b->requested = true;
            snprintf(b->desc, sizeof(b->desc), "%s",
                     req->process_bundle->process_bundle_descriptor_id);
            fdesc *d = desc_get(f, b->desc);
            if (d != NULL && d->status == 0) {
                fetch_descriptor(f, d);
            }
            maybe_act(f, b);
        }
        break;
    }
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_PROGRESS):
        if (f->mode->mb != MB_HANG) {
            respond(f, req->instruction_id, NULL,
                    FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS));
        }
        break;
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_SPLIT):
        if (f->mode->mb != MB_HANG) {
            respond(f, req->instruction_id, NULL,
                    FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT));
        }
        break;
    default:
        respond(f, req->instruction_id, "robust fake worker: unsupported instruction", 0);
        break;
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void on_data_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fake *f = ctx;
    (void)s;
    pb_Elements *el =
        (void *)protobuf_c_message_unpack(&PBF(elements__descriptor), NULL, msg.len, msg.ptr);
    if (el == NULL) {
        problem("the runner sent a malformed Elements message");
        return;
    }
    for (size_t i = 0; i < el->n_data; i++) {
        const pb_Elements_Data *d = el->data[i];
        fbundle *b = bundle_get(f, d->instruction_id);
        if (b == NULL) {
            break;
        }
        if (sd_buf_append(&b->input, d->data.data, d->data.len) != SD_OK) {
            problem("out of memory buffering input");
        }
        if (d->is_last) {
            b->input_done = true;
        }
    }
    protobuf_c_message_free_unpacked(&el->base, NULL);
    for (size_t i = 0; i < f->n_bundles; i++) {
        maybe_act(f, &f->bundles[i]);
    }
}

/* State answers; a bundle that waits for them (MB_STATE_GARBAGE) finishes from here. */
static void on_state_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fake *f = ctx;
    (void)s;
    pb_StateResponse *r =
        (void *)protobuf_c_message_unpack(&PBF(state_response__descriptor), NULL, msg.len, msg.ptr);
    if (r == NULL) {
        problem("the runner sent a malformed StateResponse");
        return;
    }
    if (r->error != NULL && r->error[0] != '\0') {
        snprintf(F.state_error, sizeof(F.state_error), "%s: %s", r->id, r->error);
        F.state_errors++;
        printf("      state error %s\n", F.state_error);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    if (f->waiting != NULL && --f->waiting_for == 0) {
        fbundle *b = f->waiting;
        f->waiting = NULL;
        good_outputs(f, b, f->waiting_desc);
        respond(f, b->iid, NULL, FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE));
    }
}

static void on_fake_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    fake *f = ctx;
    (void)code;
    (void)message;
    if (s == f->ctl) {
        f->ctl = NULL;
    } else if (s == f->data) {
        f->data = NULL;
    } else if (s == f->state) {
        f->state = NULL;
    } else if (s == f->logging) {
        f->logging = NULL;
    }
    if (--f->open == 0) {
        f->closed_all = true;
    }
}

static void fake_start(const char *worker_id, const char *control_url)
{
    sd_err err = { 0 };
    fake *f = sd_calloc(1, sizeof(*f));
    if (f == NULL) {
        problem("out of memory starting a fake worker");
        return;
    }
    snprintf(f->id, sizeof(f->id), "%s", worker_id);
    f->mode = F.mode;
    f->next = F.fakes;
    F.fakes = f;
    if (sd_rpc_channel_create(F.rpc, control_url, &f->ch, &err) != SD_OK) {
        problem("fake worker: channel to %s: %s", control_url, sd_err_msg(&err));
        f->closed_all = true;
        return;
    }
    sd_rpc_metadata md = { "worker_id", f->id };
    sd_rpc_stream_handler hc = { on_ctl_message, on_fake_close, f };
    sd_rpc_stream_handler hd = { on_data_message, on_fake_close, f };
    sd_rpc_stream_handler hs = { on_state_message, on_fake_close, f };
    sd_rpc_stream_handler hl = { NULL, on_fake_close, f };
    if (sd_rpc_stream_open(f->ch, SD_PATH_CONTROL, &md, 1, &hc, &f->ctl, &err) != SD_OK) {
        problem("fake worker: Control: %s", sd_err_msg(&err));
        f->closed_all = f->open == 0;
        return;
    }
    f->open++;
    if (sd_rpc_stream_open(f->ch, SD_PATH_DATA, &md, 1, &hd, &f->data, &err) != SD_OK) {
        problem("fake worker: Data: %s", sd_err_msg(&err));
        return;
    }
    f->open++;
    if (sd_rpc_stream_open(f->ch, SD_PATH_STATE, &md, 1, &hs, &f->state, &err) != SD_OK) {
        problem("fake worker: State: %s", sd_err_msg(&err));
        return;
    }
    f->open++;
    if (sd_rpc_stream_open(f->ch, SD_PATH_LOGGING, &md, 1, &hl, &f->logging, &err) != SD_OK) {
        problem("fake worker: Logging: %s", sd_err_msg(&err));
        return;
    }
    f->open++;
}

static bool fakes_closed(void)
{
    for (fake *f = F.fakes; f != NULL; f = f->next) {
        if (!f->closed_all) {
            return false;
        }
    }
    return true;
}

static void fakes_free(void)
{
    while (F.fakes != NULL) {
        fake *f = F.fakes;
        F.fakes = f->next;
        if (f->ch != NULL) {
            sd_rpc_channel_destroy(f->ch);
        }
        for (size_t i = 0; i < f->n_bundles; i++) {
            sd_buf_deinit(&f->bundles[i].input);
        }
        sd_free(f);
    }
}

/* ================================================================ the worker pool */

static void on_start_worker(sd_call *call, sd_bytes request, void *ctx)
{
    (void)ctx;
    pb_StartWorkerRequest *req = (void *)protobuf_c_message_unpack(
        &PBF(start_worker_request__descriptor), NULL, request.len, request.ptr);
    pb_StartWorkerResponse resp =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__START_WORKER_RESPONSE__INIT;
    sd_buf b;
    F.start_calls++;
    if (req == NULL || req->control_endpoint == NULL) {
        problem("the runner sent a malformed StartWorkerRequest");
        sd_call_finish(call, SD_RPC_INVALID_ARGUMENT, "malformed StartWorkerRequest");
        if (req != NULL) {
            protobuf_c_message_free_unpacked(&req->base, NULL);
        }
        return;
    }
    snprintf(F.worker_id, sizeof(F.worker_id), "%s", req->worker_id);
    if (F.mode != NULL && F.mode->mb == MB_POOL_FAILS) {
        sd_call_finish(call, SD_RPC_RESOURCE_EXHAUSTED, "robust pool: no free worker slots");
    } else {
        if (F.mode != NULL && F.mode->mb == MB_POOL_REFUSES) {
            resp.error = "robust pool: the boot image is missing";
        } else {
            fake_start(req->worker_id, req->control_endpoint->url);
        }
        sd_buf_init(&b, 0);
        if (sd_pb_pack(&resp.base, &b) != SD_OK) {
            problem("out of memory");
        }
        sd_call_reply(call, sd_buf_bytes(&b));
        sd_buf_deinit(&b);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void on_stop_worker(sd_call *call, sd_bytes request, void *ctx)
{
    pb_StopWorkerResponse resp =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STOP_WORKER_RESPONSE__INIT;
    sd_buf b;
    (void)request;
    (void)ctx;
    F.stop_calls++;
    sd_buf_init(&b, 0);
    if (sd_pb_pack(&resp.base, &b) != SD_OK) {
        problem("out of memory");
    }
    sd_call_reply(call, sd_buf_bytes(&b));
    sd_buf_deinit(&b);
}

static void on_pool_closed(void *ctx)
{
    (void)ctx;
    F.pool_closed = true;
}

/* ================================================================ setup */

static int group_setup(void **state)
{
    (void)state;
    sd_err err = { 0 };
    memset(&F, 0, sizeof(F));
    if (getenv("SD_ROBUST_DEBUG") == NULL) {
        sd_log_set_level(SD_LOG_ERROR);
    }
    sd_server_config cfg = { 0 };
    cfg.hang_timeout_s = HANG_TIMEOUT_S;
    cfg.stall_timeout_s = STALL_TIMEOUT_S;
    if (sd_embedded_start(&cfg, &F.emb, &err) != SD_OK) {
        fprintf(stderr, "embedded runner: %s\n", sd_err_msg(&err));
        return -1;
    }
    snprintf(F.runner_ep, sizeof(F.runner_ep), "%s", sd_embedded_endpoint(F.emb));
    F.loop = ev_loop_new(EVFLAG_AUTO);
    if (F.loop == NULL || sd_rpc_create(F.loop, &F.rpc, &err) != SD_OK ||
        sd_rpc_channel_create(F.rpc, F.runner_ep, &F.ch, &err) != SD_OK ||
        sd_rpc_server_create(F.rpc, &F.pool, &err) != SD_OK) {
        fprintf(stderr, "client side: %s\n", sd_err_msg(&err));
        return -1;
    }
    sd_rpc_handler hs = { .on_open = on_start_worker };
    sd_rpc_handler hp = { .on_open = on_stop_worker };
    int port = 0;
    if (sd_rpc_server_add_method(F.pool, SD_PATH_START_WORKER, SD_RPC_KIND_UNARY, &hs) != SD_OK ||
        sd_rpc_server_add_method(F.pool, SD_PATH_STOP_WORKER, SD_RPC_KIND_UNARY, &hp) != SD_OK ||
        sd_rpc_server_listen(F.pool, "127.0.0.1:0", &port, &err) != SD_OK ||
        sd_rpc_server_start(F.pool, &err) != SD_OK) {
        fprintf(stderr, "worker pool: %s\n", sd_err_msg(&err));
        return -1;
    }
    snprintf(F.pool_ep, sizeof(F.pool_ep), "127.0.0.1:%d", port);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fakes_free();
    sd_rpc_channel_destroy(F.ch);
    sd_rpc_server_shutdown(F.pool, 0, on_pool_closed, NULL);
    (void)wait_for(&F.pool_closed, 10.0);
    /* Let cancelled calls deliver their last callbacks, then the hub can go. */
    settle(0.05);
    sd_rpc_destroy(F.rpc);
    ev_loop_destroy(F.loop);
    sd_embedded_stop(F.emb);
    return 0;
}

/* ================================================================ part 1: Job API probes */

/* Bytes that are no protobuf message: field 1, length 127, but only two bytes follow. */
static const uint8_t MALFORMED[] = { 0x0a, 0x7f, 0x41, 0x42 };

static void check_contains(const char *what, const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL) {
        fail_msg("%s: \"%s\" does not mention \"%s\"", what, text, needle);
    }
}

static void test_malformed_requests(void **state)
{
    (void)state;

    static const struct {
        const char *path;
        sd_rpc_kind kind;
        const char *type; /* the message type the error must name */
    } rows[] = {
        { JS "Prepare", SD_RPC_KIND_UNARY, "PrepareJobRequest" },
        { JS "Run", SD_RPC_KIND_UNARY, "RunJobRequest" },
        { JS "GetJobs", SD_RPC_KIND_UNARY, "GetJobsRequest" },
        { JS "GetState", SD_RPC_KIND_UNARY, "GetJobStateRequest" },
        { JS "GetPipeline", SD_RPC_KIND_UNARY, "GetJobPipelineRequest" },
        { JS "Cancel", SD_RPC_KIND_UNARY, "CancelJobRequest" },
        { JS "Drain", SD_RPC_KIND_UNARY, "DrainJobRequest" },
        { JS "GetJobMetrics", SD_RPC_KIND_UNARY, "GetJobMetricsRequest" },
        { JS "DescribePipelineOptions", SD_RPC_KIND_UNARY, "DescribePipelineOptionsRequest" },
        { JS "GetStateStream", SD_RPC_KIND_SERVER_STREAM, "GetJobStateRequest" },
        { JS "GetMessageStream", SD_RPC_KIND_SERVER_STREAM, "JobMessagesRequest" },
        { ARS "ResolveArtifacts", SD_RPC_KIND_UNARY, "ResolveArtifactsRequest" },
        { ARS "GetArtifact", SD_RPC_KIND_SERVER_STREAM, "GetArtifactRequest" },
        { ASS "ReverseArtifactRetrievalService", SD_RPC_KIND_BIDI, "ArtifactResponseWrapper" },
        { SD_PATH_GET_PBD, SD_RPC_KIND_UNARY, "GetProcessBundleDescriptorRequest" },
        { SD_PATH_PROVISION, SD_RPC_KIND_UNARY, "GetProvisionInfoRequest" },
    };

    sd_bytes bad = sd_bytes_make(MALFORMED, sizeof(MALFORMED));
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_rpc_code code;
        char msg[4096];
        if (rows[i].kind == SD_RPC_KIND_UNARY) {
            reply r;
            unary(rows[i].path, bad, &r);
            code = r.code;
            snprintf(msg, sizeof(msg), "%s", r.msg);
            reply_free(&r);
        } else {
            cstream c;
            stream_call(rows[i].path, &bad, rows[i].kind == SD_RPC_KIND_BIDI, &c, 10.0);
            code = c.code;
            snprintf(msg, sizeof(msg), "%s", c.msg);
            cstream_free(&c);
        }
        printf("  malformed %-60s -> %d \"%s\"\n", rows[i].path, (int)code, msg);
        if (code != SD_RPC_INVALID_ARGUMENT) {
            fail_msg("%s: expected INVALID_ARGUMENT, got %d (%s)", rows[i].path, (int)code, msg);
        }
        check_contains(rows[i].path, msg, rows[i].type);
    }
    assert_string_equal(F.problem, "");
}

static void test_unknown_ids(void **state)
{
    (void)state;
    static const char *const id = "robust-job-that-never-was";

    static const struct {
        const char *path;
        sd_rpc_kind kind;
    } rows[] = {
        { JS "Run", SD_RPC_KIND_UNARY },
        { JS "GetState", SD_RPC_KIND_UNARY },
        { JS "GetPipeline", SD_RPC_KIND_UNARY },
        { JS "Cancel", SD_RPC_KIND_UNARY },
        { JS "GetJobMetrics", SD_RPC_KIND_UNARY },
        { JS "GetStateStream", SD_RPC_KIND_SERVER_STREAM },
        { JS "GetMessageStream", SD_RPC_KIND_SERVER_STREAM },
        { ASS "ReverseArtifactRetrievalService", SD_RPC_KIND_BIDI },
        { SD_PATH_GET_PBD, SD_RPC_KIND_UNARY },
    };

    /* Every one of these requests carries the id as string field 1. */
    sd_buf req;
    sd_buf_init(&req, 0);
    assert_int_equal(sd_buf_append_byte(&req, 0x0a), SD_OK);
    assert_int_equal(sd_buf_put_lp(&req, sd_bytes_str(id)), SD_OK);
    sd_bytes bytes = sd_buf_bytes(&req);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_rpc_code code;
        char msg[4096];
        if (rows[i].kind == SD_RPC_KIND_UNARY) {
            reply r;
            unary(rows[i].path, bytes, &r);
            code = r.code;
            snprintf(msg, sizeof(msg), "%s", r.msg);
            reply_free(&r);
        } else {
            cstream c;
            stream_call(rows[i].path, &bytes, rows[i].kind == SD_RPC_KIND_BIDI, &c, 10.0);
            code = c.code;
            snprintf(msg, sizeof(msg), "%s", c.msg);
            assert_int_equal(c.msgs.len, 0);
            cstream_free(&c);
        }
        printf("  unknown id %-60s -> %d \"%s\"\n", rows[i].path, (int)code, msg);
        if (code != SD_RPC_NOT_FOUND) {
            fail_msg("%s: expected NOT_FOUND, got %d (%s)", rows[i].path, (int)code, msg);
        }
        check_contains(rows[i].path, msg, id);
    }
    sd_buf_deinit(&req);

    /* Fn API streams and provisioning for a worker id no job expects. */
    sd_rpc_metadata md = { "worker_id", "robust-worker-nobody-started" };
    reply r;
    unary_md(SD_PATH_PROVISION, SD_BYTES_NULL, &md, 1, &r);
    printf("  unknown worker GetProvisionInfo -> %d \"%s\"\n", (int)r.code, r.msg);
    assert_int_equal(r.code, SD_RPC_NOT_FOUND);
    check_contains("GetProvisionInfo", r.msg, md.value);
    reply_free(&r);
    static const char *const streams[] = { SD_PATH_CONTROL, SD_PATH_DATA, SD_PATH_STATE,
                                           SD_PATH_LOGGING };
    for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        cstream c;
        sd_err err = { 0 };
        sd_rpc_stream *s = NULL;
        sd_rpc_stream_handler h = { cs_on_message, cs_on_close, &c };
        memset(&c, 0, sizeof(c));
        sd_vec_init(&c.msgs, sizeof(sd_buf));
        assert_int_equal(sd_rpc_stream_open(F.ch, streams[i], &md, 1, &h, &s, &err), SD_OK);
        assert_true(wait_for(&c.done, 10.0));
        printf("  unknown worker %-55s -> %d \"%s\"\n", streams[i], (int)c.code, c.msg);
        assert_int_equal(c.code, SD_RPC_NOT_FOUND);
        check_contains(streams[i], c.msg, md.value);
        cstream_free(&c);
    }

    /* A method nobody serves. */
    unary("/org.apache.beam.model.job_management.v1.JobService/Teleport", SD_BYTES_NULL, &r);
    assert_int_equal(r.code, SD_RPC_UNIMPLEMENTED);
    reply_free(&r);
}

static void test_prepare_lists_every_problem(void **state)
{
    (void)state;
    plb b;
    pl_init(&b);
    pl_common_coders(&b);
    pl_env(&b, "dock", SD_URN_ENV_DOCKER, (ProtobufCBinaryData){ 0, NULL });
    pl_pcoll(&b, "p_imp", "bytes");
    pl_pcoll(&b, "p_x", "bytes");
    pl_pcoll(&b, "p_y", "bytes");
    pl_pcoll(&b, "p_z", "bytes");
    pl_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NULL, "p_imp", NULL);
    pl_transform(&b, "mystery_a", "beam:transform:robust_mystery_a:v1", "p_imp", "p_x", "dock");
    pl_transform(&b, "mystery_b", "beam:transform:robust_mystery_b:v1", "p_x", "p_y", "dock");
    pl_transform(&b, "mystery_c", "beam:transform:robust_mystery_c:v7", "p_y", "p_z", NULL);
    b.p->requirements[b.p->n_requirements++] = "beam:requirement:robust_mystery:v1";
    reply r;
    prepare(b.p, "robust-unknown-urns", &r, NULL, 0);
    printf("  Prepare(unknown URNs) -> %d \"%s\"\n", (int)r.code, r.msg);
    assert_true(r.code == SD_RPC_UNIMPLEMENTED || r.code == SD_RPC_INVALID_ARGUMENT);
    static const char *const needles[] = {
        "beam:transform:robust_mystery_a:v1", "beam:transform:robust_mystery_b:v1",
        "beam:transform:robust_mystery_c:v7", SD_URN_ENV_DOCKER,
        "beam:requirement:robust_mystery:v1",
    };
    for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++) {
        check_contains("Prepare", r.msg, needles[i]);
    }
    reply_free(&r);
    arena_free(&b.a);

    /* No job was created for it: the next good job is served as usual. */
    pl_init(&b);
    pl_common_coders(&b);
    pl_pcoll(&b, "p_imp", "bytes");
    pl_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NULL, "p_imp", NULL);
    job_result jr;
    run_job(b.p, "robust-impulse-only", &jr);
    arena_free(&b.a);
    printf("  impulse-only job %s -> state %d\n", jr.job_id, jr.state);
    assert_int_equal(jr.state, JSTATE(DONE));
    assert_string_equal(jr.error, "");
}

/* Environments that cannot produce a worker: the job fails naming the environment. */
static void test_environment_failures(void **state)
{
    (void)state;
    static const uint8_t garbage[] = { 0x0a, 0x7f, 0x01 };
    plb b;
    job_result jr;
    reply r;
    char prep[160];

    /* An external environment whose payload is not an ExternalPayload. */
    pl_main_in(&b, SD_URN_ENV_EXTERNAL,
               (ProtobufCBinaryData){ sizeof(garbage), (uint8_t *)garbage });
    prepare(b.p, "robust-bad-external-payload", &r, prep, sizeof(prep));
    printf("  Prepare(external env, garbage payload) -> %d \"%s\"\n", (int)r.code, r.msg);
    if (r.code == SD_RPC_OK) {
        reply_free(&r);
        run_prepared(prep, "robust-bad-external-payload", &jr);
        printf("  [external env, garbage payload] %s -> %d\n      error: %s\n", jr.job_id, jr.state,
               jr.error);
        assert_int_equal(jr.state, JSTATE(FAILED));
        check_contains("bad external payload", jr.error, "fake");
        check_contains("bad external payload", jr.error, "malformed ExternalPayload");
    } else {
        assert_int_equal(r.code, SD_RPC_INVALID_ARGUMENT);
        check_contains("bad external payload", r.msg, "fake");
        reply_free(&r);
    }
    arena_free(&b.a);

    /* A worker pool nobody listens on. */
    {
        pb_ApiServiceDescriptor ep =
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__API_SERVICE_DESCRIPTOR__INIT;
        pb_ExternalPayload xp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__EXTERNAL_PAYLOAD__INIT;
        uint8_t buf[128];
        ep.url = "127.0.0.1:1";
        xp.endpoint = &ep;
        size_t n = protobuf_c_message_pack(&xp.base, buf);
        pl_main_in(&b, SD_URN_ENV_EXTERNAL, (ProtobufCBinaryData){ n, buf });
        run_job(b.p, "robust-no-worker-pool", &jr);
        arena_free(&b.a);
        printf("  [worker pool not listening] %s -> %d\n      error: %s\n", jr.job_id, jr.state,
               jr.error);
        assert_int_equal(jr.state, JSTATE(FAILED));
        check_contains("no worker pool", jr.error, "127.0.0.1:1");
        check_contains("no worker pool", jr.error, "fake");
    }

    /* A PROCESS environment whose boot command does not exist. */
    {
        pb_ProcessPayload pp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__PROCESS_PAYLOAD__INIT;
        uint8_t buf[128];
        pp.command = "/nonexistent/robust-boot";
        size_t n = protobuf_c_message_pack(&pp.base, buf);
        pl_main_in(&b, SD_URN_ENV_PROCESS, (ProtobufCBinaryData){ n, buf });
        run_job(b.p, "robust-missing-boot", &jr);
        arena_free(&b.a);
        printf("  [process boot command missing] %s -> %d\n      error: %s\n", jr.job_id, jr.state,
               jr.error);
        assert_int_equal(jr.state, JSTATE(FAILED));
        check_contains("missing boot", jr.error, "fake");
        /* 127 from the child's exec failure (valgrind's own leak check in the forked child
         * changes that code, so only the words are checked). */
        check_contains("missing boot", jr.error, "exited with status");
    }
    assert_string_equal(F.problem, "");
}

/* ================================================================ part 2: fake workers */

static const mcase CASES[] = {
    { "garbage element bytes for a sink",
      MB_GARBAGE_ELEMENT,
      JSTATE(FAILED),
      { "$S", "p_kv", "$W" } },
    { "garbage element bytes after the response",
      MB_GARBAGE_LAST,
      JSTATE(FAILED),
      { "$S", "p_kv", "$W" } },
    { "truncated element for a sink",
      MB_TRUNCATED_ELEMENT,
      JSTATE(FAILED),
      { "$S", "p_kv", "$W", "element 1" } },
    { "control stream half-closed mid-bundle",
      MB_HALF_CLOSE_CONTROL,
      JSTATE(FAILED),
      { "$W", "control stream" } },
    { "control stream cancelled mid-bundle",
      MB_CANCEL_CONTROL,
      JSTATE(FAILED),
      { "$W", "control stream" } },
    { "connection dropped mid-bundle", MB_DISCONNECT, JSTATE(FAILED), { "$W" } },
    { "ProcessBundle answered with an error",
      MB_ERROR_RESPONSE,
      JSTATE(FAILED),
      { "$W", "$S", "robust: the DoFn exploded on element 7 (ZeroDivisionError)" } },
    { "malformed protobuf on the Data stream",
      MB_MALFORMED_DATA,
      JSTATE(FAILED),
      { "$W", "malformed", "Elements" } },
    { "malformed protobuf on the Control stream",
      MB_MALFORMED_CONTROL,
      JSTATE(FAILED),
      { "$W", "malformed", "InstructionResponse" } },
    { "malformed protobuf on the State stream",
      MB_MALFORMED_STATE,
      JSTATE(FAILED),
      { "$W", "malformed", "StateRequest" } },
    { "data for an unknown instruction (dropped)", MB_UNKNOWN_INSTRUCTION, JSTATE(DONE), { NULL } },
    { "data for an unknown transform",
      MB_UNKNOWN_TRANSFORM,
      JSTATE(FAILED),
      { "$S", "$W", "robust-no-such-transform" } },
    { "timers for an unknown timer family",
      MB_UNKNOWN_TIMER,
      JSTATE(FAILED),
      { "$S", "robust-no-such-family" } },
    { "ProcessBundle answered with another response kind",
      MB_WRONG_RESPONSE_KIND,
      JSTATE(FAILED),
      { "$S", "$W" } },
    { "state request for an unknown bundle (answered with an error)",
      MB_STATE_UNKNOWN,
      JSTATE(DONE),
      { NULL } },
    { "state requests with garbage keys on a stateless stage (answered with errors)",
      MB_STATE_GARBAGE,
      JSTATE(DONE),
      { NULL } },
    { "every response sent twice", MB_DUPLICATE_RESPONSE, JSTATE(DONE), { NULL } },
    { "response without the end of its output", MB_NO_IS_LAST, JSTATE(FAILED), { "$S", "$W" } },
    { "residual root with a garbage element",
      MB_BAD_RESIDUAL,
      JSTATE(FAILED),
      { "$S", "$W", "p_imp" } },
    { "monitoring infos with garbage payloads (passed through)",
      MB_ODD_METRICS,
      JSTATE(DONE),
      { NULL } },
    { "garbage on the Logging stream, then a log entry", MB_LOGS, JSTATE(DONE), { NULL } },
    { "never answers a bundle or a progress request",
      MB_HANG,
      JSTATE(FAILED),
      { "$S", "$W", "hung" } },
    { "answers progress requests but its bundle never moves",
      MB_STALL,
      JSTATE(FAILED),
      { "$S", "$W", "consumed no input and produced no output", "Per-stage state", "stage-003" } },
    { "worker pool refuses StartWorker",
      MB_POOL_REFUSES,
      JSTATE(FAILED),
      { "robust pool: the boot image is missing", "fake" } },
    { "worker pool fails StartWorker",
      MB_POOL_FAILS,
      JSTATE(FAILED),
      { "robust pool: no free worker slots", "fake" } },
    { "well-behaved worker", MB_GOOD, JSTATE(DONE), { NULL } },
};

/* Expand "$W" / "$S" in a wanted substring. */
static const char *expand(const char *want)
{
    if (strcmp(want, "$W") == 0) {
        return F.worker_id;
    }
    if (strcmp(want, "$S") == 0) {
        return F.stage_a;
    }
    return want;
}

/* Run one row; returns NULL or what went wrong (static storage). */
static const char *run_case(const mcase *c)
{
    static char why[12288];
    plb b;
    job_result jr;
    F.mode = c;
    F.worker_id[0] = '\0';
    F.stage_a[0] = '\0';
    F.desc_a[0] = '\0';
    F.grouped[0] = '\0';
    F.state_error[0] = '\0';
    F.acted_a = false;
    F.state_errors = 0;
    F.problem[0] = '\0';
    F.start_calls = 0;
    F.stop_calls = 0;
    pl_main(&b);
    run_job(b.p, c->name, &jr);
    arena_free(&b.a);
    printf("  [%s] %s -> %s\n      error: %s\n", c->name, jr.job_id,
           jr.state == JSTATE(DONE)     ? "DONE"
           : jr.state == JSTATE(FAILED) ? "FAILED"
                                        : "other",
           jr.error[0] != '\0' ? jr.error : "(none)");
    why[0] = '\0';
    if (jr.state != c->want_state) {
        snprintf(why, sizeof(why), "state %d, expected %d; messages: %s", jr.state, c->want_state,
                 jr.others);
    }
    for (size_t i = 0; i < sizeof(c->want) / sizeof(c->want[0]) && c->want[i] != NULL; i++) {
        const char *needle = expand(c->want[i]);
        if (why[0] == '\0' && (needle[0] == '\0' || strstr(jr.error, needle) == NULL)) {
            snprintf(why, sizeof(why), "the error does not mention \"%s\" (%s)", needle,
                     c->want[i]);
        }
    }
    if (why[0] == '\0' && c->want_state == JSTATE(DONE)) {
        if (jr.error[0] != '\0') {
            snprintf(why, sizeof(why), "a DONE job reported errors");
        } else if (strcmp(F.grouped, "k1=[a,c] k2=[b]") != 0) {
            snprintf(why, sizeof(why), "pardo2 saw \"%s\", not \"k1=[a,c] k2=[b]\"", F.grouped);
        }
    }
    if (why[0] == '\0' && c->mb == MB_STATE_GARBAGE && F.state_errors != 4) {
        snprintf(why, sizeof(why), "%d of 4 garbage state requests were refused", F.state_errors);
    }
    if (why[0] == '\0' && c->mb == MB_LOGS &&
        strstr(jr.others, "robust: a log line from pardo1") == NULL) {
        snprintf(why, sizeof(why), "the worker's log line is not among the job messages");
    }
    if (why[0] == '\0' && c->mb == MB_ODD_METRICS) {
        Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsRequest mreq;
        PBJ(get_job_metrics_request__init)(&mreq);
        mreq.job_id = jr.job_id;
        reply r;
        unary_msg(JS "GetJobMetrics", &mreq.base, &r);
        if (r.code != SD_RPC_OK) {
            snprintf(why, sizeof(why), "GetJobMetrics after odd metrics: %d %s", (int)r.code,
                     r.msg);
        }
        reply_free(&r);
    }
    if (why[0] == '\0' && c->mb == MB_STATE_UNKNOWN &&
        (strstr(F.state_error, "robust-no-such-bundle") == NULL ||
         strstr(F.state_error, "robust-state-1") == NULL)) {
        snprintf(why, sizeof(why), "state error \"%s\" names neither request nor bundle",
                 F.state_error);
    }
    /* The runner stops what it started: StopWorker, and every stream of the worker ends. */
    bool all_closed = false;
    for (int i = 0; i < 100 && !all_closed; i++) {
        all_closed = fakes_closed() && F.stop_calls >= F.start_calls;
        if (!all_closed) {
            settle(0.1);
        }
    }
    if (why[0] == '\0' && !all_closed) {
        snprintf(why, sizeof(why),
                 "the runner left the worker running (StartWorker %d, "
                 "StopWorker %d)",
                 F.start_calls, F.stop_calls);
    }
    if (why[0] == '\0' && F.start_calls != 1) {
        snprintf(why, sizeof(why), "%d StartWorker calls, expected 1", F.start_calls);
    }
    fakes_free();
    if (why[0] == '\0' && F.problem[0] != '\0') {
        snprintf(why, sizeof(why), "%s", F.problem);
    }
    return why[0] != '\0' ? why : NULL;
}

static void test_misbehaving_workers(void **state)
{
    (void)state;
    size_t failed = 0;
    for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        const char *why = run_case(&CASES[i]);
        if (why != NULL) {
            printf("  FAILED ROW [%s]: %s\n", CASES[i].name, why);
            failed++;
        }
        fflush(stdout);
    }
    assert_int_equal(failed, 0);
}

/* A client cancels a job whose worker hangs: CANCELLED at once, the worker is stopped. */
/* Start a job whose fake worker hangs at pardo1's bundle; returns its id in prep. */
static void start_hung_job(const mcase *mode, char *prep, size_t cap)
{
    plb b;
    reply r;
    F.mode = mode;
    F.acted_a = false;
    pl_main(&b);
    prepare(b.p, mode->name, &r, prep, cap);
    assert_int_equal(r.code, SD_RPC_OK);
    reply_free(&r);
    arena_free(&b.a);
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run;
    PBJ(run_job_request__init)(&run);
    run.preparation_id = prep;
    unary_msg(JS "Run", &run.base, &r);
    assert_int_equal(r.code, SD_RPC_OK);
    reply_free(&r);
    assert_true(wait_for(&F.acted_a, 20.0));
}

static void cancel_job(const char *prep)
{
    reply r;
    Org__Apache__Beam__Model__JobManagement__V1__CancelJobRequest cancel;
    PBJ(cancel_job_request__init)(&cancel);
    cancel.job_id = (char *)prep;
    unary_msg(JS "Cancel", &cancel.base, &r);
    assert_int_equal(r.code, SD_RPC_OK);
    reply_free(&r);
    job_result jr;
    memset(&jr, 0, sizeof(jr));
    collect_messages(prep, &jr);
    assert_int_equal(jr.state, JSTATE(CANCELLED));
}

/* Every fake worker the runner started was stopped (StopWorker, streams ended), exactly
 * `starts` were started, and no callback saw a problem; then forget the fakes. */
static void expect_workers_stopped(int starts)
{
    bool all_closed = false;
    for (int i = 0; i < 100 && !all_closed; i++) {
        all_closed = fakes_closed() && F.stop_calls >= F.start_calls;
        if (!all_closed) {
            settle(0.1);
        }
    }
    assert_true(all_closed);
    assert_int_equal(F.start_calls, starts);
    fakes_free();
    assert_string_equal(F.problem, "");
}

static void test_cancel_hung_job(void **state)
{
    (void)state;
    static const mcase hang = {
        "cancel while the worker hangs", MB_HANG, JSTATE(CANCELLED), { NULL }
    };
    char prep[160];
    F.start_calls = 0;
    F.stop_calls = 0;
    F.problem[0] = '\0';
    start_hung_job(&hang, prep, sizeof(prep));
    cancel_job(prep); /* Cancel answers OK and the job ends CANCELLED */
    printf("  [%s] %s -> CANCELLED\n", hang.name, prep);
    expect_workers_stopped(1);
}

/* A hung job does not hold up another job running at the same time on the same runner. */
static void test_hung_job_beside_a_good_one(void **state)
{
    (void)state;
    static const mcase hang = { "hung job beside a good one", MB_HANG, JSTATE(FAILED), { NULL } };
    static const mcase good = { "good job beside a hung one", MB_GOOD, JSTATE(DONE), { NULL } };
    plb b;
    reply r;
    char prep[160];
    F.mode = &hang;
    F.acted_a = false;
    F.start_calls = 0;
    F.stop_calls = 0;
    F.grouped[0] = '\0';
    F.problem[0] = '\0';
    pl_main(&b);
    prepare(b.p, hang.name, &r, prep, sizeof(prep));
    assert_int_equal(r.code, SD_RPC_OK);
    reply_free(&r);
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run;
    PBJ(run_job_request__init)(&run);
    run.preparation_id = prep;
    unary_msg(JS "Run", &run.base, &r);
    assert_int_equal(r.code, SD_RPC_OK);
    reply_free(&r);
    assert_true(wait_for(&F.acted_a, 20.0));

    /* The second job, with a well-behaved worker, finishes while the first one hangs. */
    F.mode = &good;
    job_result jr;
    int64_t t0 = sd_mono_now_ms();
    run_job(b.p, good.name, &jr);
    int64_t took = sd_mono_now_ms() - t0;
    printf("  [%s] %s -> %d in %lld ms\n", good.name, jr.job_id, jr.state, (long long)took);
    assert_int_equal(jr.state, JSTATE(DONE));
    assert_string_equal(F.grouped, "k1=[a,c] k2=[b]");
    assert_true(took < HANG_TIMEOUT_S * 1000);

    memset(&jr, 0, sizeof(jr));
    collect_messages(prep, &jr);
    printf("  [%s] %s -> %d\n      error: %s\n", hang.name, prep, jr.state, jr.error);
    assert_int_equal(jr.state, JSTATE(FAILED));
    check_contains(hang.name, jr.error, "hung");
    arena_free(&b.a);
    expect_workers_stopped(2);
}

/* Open stream `path` with the given metadata (n_md 0: none) and wait for the runner's answer. */
static sd_rpc_code open_and_wait(const char *path, const sd_rpc_metadata *md, size_t n_md,
                                 char *msg, size_t cap)
{
    cstream c;
    sd_err err = { 0 };
    sd_rpc_stream *s = NULL;
    sd_rpc_stream_handler h = { cs_on_message, cs_on_close, &c };
    memset(&c, 0, sizeof(c));
    sd_vec_init(&c.msgs, sizeof(sd_buf));
    assert_int_equal(sd_rpc_stream_open(F.ch, path, md, n_md, &h, &s, &err), SD_OK);
    assert_true(wait_for(&c.done, 10.0));
    snprintf(msg, cap, "%s", c.msg);
    sd_rpc_code code = c.code;
    cstream_free(&c);
    return code;
}

static sd_rpc_code get_descriptor(const char *id, const char *worker_id, char *msg, size_t cap)
{
    pb_GetProcessBundleDescriptorRequest req =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__GET_PROCESS_BUNDLE_DESCRIPTOR_REQUEST__INIT;
    sd_rpc_metadata md = { "worker_id", worker_id };
    reply r;
    sd_buf b;
    sd_buf_init(&b, 0);
    req.process_bundle_descriptor_id = (char *)id;
    pack(&req.base, &b);
    unary_md(SD_PATH_GET_PBD, sd_buf_bytes(&b), &md, worker_id != NULL ? 1 : 0, &r);
    sd_buf_deinit(&b);
    snprintf(msg, cap, "%s", r.msg);
    sd_rpc_code code = r.code;
    reply_free(&r);
    return code;
}

static bool is_token(const char *s)
{
    if (strlen(s) != 32) {
        return false;
    }
    for (; *s != '\0'; s++) {
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) {
            return false;
        }
    }
    return true;
}

/*
 * The Fn API answers a call only for the worker (and so the job) it belongs to: two jobs of
 * the same shape run side by side, and a client that knows one worker's id, the other's, or
 * only what any job's ids look like gets nothing that is not its own.
 */
static void test_fnapi_isolation(void **state)
{
    (void)state;
    /* Stalled, not hung: the runner's hang detection must not end the jobs mid-test. */
    static const mcase hang = { "isolation: a stalled job", MB_STALL, JSTATE(CANCELLED),
                                { NULL } };
    char prep1[160], prep2[160], w1[160], w2[160], d1[160], d2[160], msg[4096];
    F.start_calls = 0;
    F.stop_calls = 0;
    F.problem[0] = '\0';
    start_hung_job(&hang, prep1, sizeof(prep1));
    snprintf(w1, sizeof(w1), "%s", F.worker_id);
    snprintf(d1, sizeof(d1), "%s", F.desc_a);
    start_hung_job(&hang, prep2, sizeof(prep2));
    snprintf(w2, sizeof(w2), "%s", F.worker_id);
    snprintf(d2, sizeof(d2), "%s", F.desc_a);
    printf("  workers %s, %s\n  descriptors %s, %s\n", w1, w2, d1, d2);

    /* Ids are unique and end in 128 random bits (32 hex digits). */
    assert_string_not_equal(w1, w2);
    assert_string_not_equal(d1, d2);
    assert_true(is_token(strrchr(w1, '-') + 1));
    assert_true(is_token(strrchr(d1, '.') + 1));
    assert_non_null(strstr(d1, prep1));
    assert_non_null(strstr(d2, prep2));

    /* Descriptors: each worker gets its own; another job's is refused; the plain stage id
     * (the same in both jobs) names nothing. TypeScript sends no worker_id here. */
    assert_int_equal(get_descriptor(d1, w1, msg, sizeof(msg)), SD_RPC_OK);
    assert_int_equal(get_descriptor(d1, NULL, msg, sizeof(msg)), SD_RPC_OK);
    sd_rpc_code code = get_descriptor(d1, w2, msg, sizeof(msg));
    printf("  job 2's worker asks for job 1's descriptor -> %d \"%s\"\n", (int)code, msg);
    assert_int_equal(code, SD_RPC_PERMISSION_DENIED);
    code = get_descriptor(F.stage_a, NULL, msg, sizeof(msg));
    printf("  descriptor \"%s\" without worker_id -> %d \"%s\"\n", F.stage_a, (int)code, msg);
    assert_int_equal(code, SD_RPC_NOT_FOUND);
    code = get_descriptor(d1, "job-001-fake-w1", msg, sizeof(msg));
    printf("  a guessed worker id -> %d \"%s\"\n", (int)code, msg);
    assert_int_equal(code, SD_RPC_NOT_FOUND);

    /* Streams: a second stream for a live worker is refused (the first stays the worker's);
     * one without worker_id, or with a guessed id, is refused too. */
    static const char *const streams[] = { SD_PATH_CONTROL, SD_PATH_DATA, SD_PATH_STATE,
                                           SD_PATH_LOGGING };
    sd_rpc_metadata real = { "worker_id", w1 };
    sd_rpc_metadata guessed = { "worker_id", "job-001-fake-w1" };
    for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        code = open_and_wait(streams[i], &real, 1, msg, sizeof(msg));
        printf("  second %s for %s -> %d \"%s\"\n", streams[i], w1, (int)code, msg);
        assert_int_equal(code, SD_RPC_ALREADY_EXISTS);
        assert_int_equal(open_and_wait(streams[i], NULL, 0, msg, sizeof(msg)), SD_RPC_NOT_FOUND);
        assert_int_equal(open_and_wait(streams[i], &guessed, 1, msg, sizeof(msg)),
                         SD_RPC_NOT_FOUND);
    }
    reply r;
    unary_md(SD_PATH_PROVISION, SD_BYTES_NULL, NULL, 0, &r);
    assert_int_equal(r.code, SD_RPC_NOT_FOUND);
    reply_free(&r);

    /* Both jobs still belong to their workers: cancelling ends them cleanly. */
    cancel_job(prep1);
    cancel_job(prep2);
    expect_workers_stopped(2);
}

/* After all of that, the runner still lists every job with its final state. */
static void test_runner_still_serves(void **state)
{
    (void)state;
    Org__Apache__Beam__Model__JobManagement__V1__GetJobsRequest req;
    PBJ(get_jobs_request__init)(&req);
    reply r;
    unary_msg(JS "GetJobs", &req.base, &r);
    assert_int_equal(r.code, SD_RPC_OK);
    Org__Apache__Beam__Model__JobManagement__V1__GetJobsResponse *resp =
        (void *)protobuf_c_message_unpack(&PBJ(get_jobs_response__descriptor), NULL, r.data.len,
                                          r.data.data);
    assert_non_null(resp);
    size_t done = 0, failed = 0;
    for (size_t i = 0; i < resp->n_job_info; i++) {
        int st = (int)resp->job_info[i]->state;
        done += st == JSTATE(DONE);
        failed += st == JSTATE(FAILED);
        if (st != JSTATE(DONE) && st != JSTATE(FAILED) && st != JSTATE(CANCELLED)) {
            fail_msg("job %s is still in state %d", resp->job_info[i]->job_id, st);
        }
    }
    printf("  GetJobs: %zu jobs, %zu DONE, %zu FAILED\n", resp->n_job_info, done, failed);
    assert_true(resp->n_job_info >= sizeof(CASES) / sizeof(CASES[0]));
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    reply_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_requests),
        cmocka_unit_test(test_unknown_ids),
        cmocka_unit_test(test_prepare_lists_every_problem),
        cmocka_unit_test(test_environment_failures),
        cmocka_unit_test(test_misbehaving_workers),
        cmocka_unit_test(test_cancel_hung_job),
        cmocka_unit_test(test_hung_job_beside_a_good_one),
        cmocka_unit_test(test_fnapi_isolation),
        cmocka_unit_test(test_runner_still_serves),
    };
    return cmocka_run_group_tests_name("robust", tests, group_setup, group_teardown);
}
