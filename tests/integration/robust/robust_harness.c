/*
 * Sundial: the robustness test's harness: the fixture, client calls, pipelines, jobs, the pool.
 *
 * The fixture F is one embedded runner (hang timeout HANG_TIMEOUT_S, stall timeout
 * STALL_TIMEOUT_S) and, on the test thread, one libev loop with an sd_rpc hub: a channel to
 * the runner, and a worker pool server the runner's EXTERNAL environments ask for workers.
 * The test bodies drive that loop through wait_for() and settle(); client calls (unary,
 * server streams) block the test body, never a callback. Pipelines are built by hand in an
 * arena (plb, pl_*): pl_main() is part 2's impulse -> pardo1 -> gbk -> pardo2. run_job()
 * prepares, runs and waits for a job and collects its final state and messages. The pool
 * starts a fake worker (robust_fake.c) for every StartWorker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/coder/coder.h"
#include "runner/fnapi/fnapi.h"
#include "runner/urns/urns.h"
#include "tests/integration/robust/robust.h"

/* ================================================================ fixture */

fixture F;

void problem(const char *fmt, ...)
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
bool wait_for(const bool *flag, double seconds)
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
void settle(double seconds)
{
    bool never = false;
    (void)wait_for(&never, seconds);
}

void pack(const ProtobufCMessage *m, sd_buf *out)
{
    sd_buf_init(out, 0);
    assert_int_equal(sd_fnapi_pb_pack(m, out), SD_OK);
}

/* ================================================================ client calls */

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

void unary_md(const char *path, sd_bytes req, const sd_rpc_metadata *md, size_t n_md, reply *r)
{
    sd_err err = { 0 };
    memset(r, 0, sizeof(*r));
    assert_int_equal(sd_rpc_unary(F.ch, path, req, md, n_md, 10000, on_unary, r, &err), SD_OK);
    assert_true(wait_for(&r->done, 15.0));
}

void unary(const char *path, sd_bytes req, reply *r)
{
    unary_md(path, req, NULL, 0, r);
}

void unary_msg(const char *path, const ProtobufCMessage *m, reply *r)
{
    sd_buf b;
    pack(m, &b);
    unary(path, sd_buf_bytes(&b), r);
    sd_buf_deinit(&b);
}

void reply_free(reply *r)
{
    sd_buf_deinit(&r->data);
}

void cs_on_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
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

void cs_on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    cstream *c = ctx;
    (void)s;
    c->code = code;
    snprintf(c->msg, sizeof(c->msg), "%s", message);
    c->done = true;
}

/* Open a stream, send `first` (if any), half-close unless `keep_open`, wait for the end. */
void stream_call(const char *path,
                 const sd_bytes *first,
                 bool keep_open,
                 cstream *c,
                 double seconds)
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

void cstream_free(cstream *c)
{
    for (size_t i = 0; i < c->msgs.len; i++) {
        sd_buf_deinit(SD_VEC_AT(&c->msgs, sd_buf, i));
    }
    sd_vec_deinit(&c->msgs);
}

/* ================================================================ pipelines */

static void *az(arena *a, size_t size)
{
    assert_true(a->n < sizeof(a->blocks) / sizeof(a->blocks[0]));
    void *p = sd_calloc(1, size);
    assert_non_null(p);
    a->blocks[a->n++] = p;
    return p;
}

void arena_free(arena *a)
{
    for (size_t i = 0; i < a->n; i++) {
        sd_free(a->blocks[i]);
    }
    a->n = 0;
}

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

void pl_init(plb *b)
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

void pl_pcoll(plb *b, const char *id, const char *coder)
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

pb_Environment *pl_env(plb *b, const char *id, const char *urn, ProtobufCBinaryData payload)
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
    return env;
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
    pb_Environment *env = pl_env(b, id, SD_URN_ENV_EXTERNAL, packed_into(b, &xp->base));
    if (F.mode != NULL && F.mode->mb == MB_REGISTERED) {
        static char *caps[] = { SD_URN_PROTOCOL_SUNDIAL_REGISTER_DESCRIPTORS };
        env->n_capabilities = 1;
        env->capabilities = caps;
    }
}

/* A leaf transform; a pardo gets a ParDoPayload naming the fake DoFn. in/out may be NULL. */
void pl_transform(plb *b,
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

void pl_common_coders(plb *b)
{
    pl_coder(b, "bytes", SD_URN_CODER_BYTES, NULL, NULL);
    pl_coder(b, "kv", SD_URN_CODER_KV, "bytes", "bytes");
    pl_coder(b, "gw", SD_URN_CODER_GLOBAL_WINDOW, NULL, NULL);
    pl_coder(b, "it", SD_URN_CODER_ITERABLE, "bytes", NULL);
    pl_coder(b, "kvit", SD_URN_CODER_KV, "bytes", "it");
}

/* impulse -> pardo1 (fake worker) -> gbk -> pardo2 (fake worker) */
/* impulse -> pardo1 -> gbk -> pardo2, both pardos in environment "fake" (see pl_main). */
void pl_main_in(plb *b, const char *env_urn, ProtobufCBinaryData env_payload)
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
void pl_main(plb *b)
{
    pl_main_in(b, NULL, (ProtobufCBinaryData){ 0, NULL });
}

/* ================================================================ jobs */

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
void prepare(const pb_Pipeline *p, const char *name, reply *r, char *prep_id, size_t cap)
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
void collect_messages(const char *job_id, job_result *out)
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
void run_prepared(const char *prep, const char *name, job_result *out)
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
void run_job(const pb_Pipeline *p, const char *name, job_result *out)
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

/* ================================================================ the worker pool */

static void on_start_worker(sd_rpc_call *call, sd_bytes request, void *ctx)
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
        sd_rpc_call_finish(call, SD_RPC_INVALID_ARGUMENT, "malformed StartWorkerRequest");
        if (req != NULL) {
            protobuf_c_message_free_unpacked(&req->base, NULL);
        }
        return;
    }
    snprintf(F.worker_id, sizeof(F.worker_id), "%s", req->worker_id);
    if (F.mode != NULL && F.mode->mb == MB_POOL_FAILS) {
        sd_rpc_call_finish(call, SD_RPC_RESOURCE_EXHAUSTED, "robust pool: no free worker slots");
    } else {
        if (F.mode != NULL && F.mode->mb == MB_POOL_REFUSES) {
            resp.error = "robust pool: the boot image is missing";
        } else {
            fake_start(req->worker_id, req->control_endpoint->url);
        }
        sd_buf_init(&b, 0);
        if (sd_fnapi_pb_pack(&resp.base, &b) != SD_OK) {
            problem("out of memory");
        }
        sd_rpc_call_reply(call, sd_buf_bytes(&b));
        sd_buf_deinit(&b);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void on_stop_worker(sd_rpc_call *call, sd_bytes request, void *ctx)
{
    pb_StopWorkerResponse resp =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STOP_WORKER_RESPONSE__INIT;
    sd_buf b;
    (void)request;
    (void)ctx;
    F.stop_calls++;
    sd_buf_init(&b, 0);
    if (sd_fnapi_pb_pack(&resp.base, &b) != SD_OK) {
        problem("out of memory");
    }
    sd_rpc_call_reply(call, sd_buf_bytes(&b));
    sd_buf_deinit(&b);
}

static void on_pool_closed(void *ctx)
{
    (void)ctx;
    F.pool_closed = true;
}

/* ================================================================ setup */

int group_setup(void **state)
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

int group_teardown(void **state)
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
