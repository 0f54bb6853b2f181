/*
 * Sundial: unit tests for the Job API (runner/jobservice), driven through the internal io seam
 * with a fake transport (test_jobservice_fake.h): Prepare/Run/GetState/Cancel/GetJobMetrics
 * flows with fake executor hooks, malformed requests, unknown ids, state rules, state and
 * message stream ordering, the history ring bound, options, several jobs, and an OOM loop.
 */
#include <math.h>
#include <stdlib.h>

#include "runner/base/bg.h"
#include "test_jobservice_fake.h"
#include "tests/unit/fake_loop.h"

/* ---------------------------------------------------------------- fake executor */

typedef enum start_action {
    START_NOTHING,
    START_RUNNING,
    START_DONE,
    START_FAIL_ASYNC
} start_action;

typedef struct hooks_state {
    sd_status validate_status;
    const char *validate_msg;
    int validate_calls;
    bool saw_options;
    sd_status start_status;
    start_action action;
    int start_calls;
    int cancel_calls;
    bool cancel_sync; /* cancel hook marks CANCELLED at once */
    sd_job *last_job;
} hooks_state;

static hooks_state H;

static sd_status h_validate(void *ctx,
                            const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *p,
                            const Google__Protobuf__Struct *options,
                            sd_err *err)
{
    (void)ctx;
    H.validate_calls++;
    assert_non_null(p);
    H.saw_options = options != NULL;
    if (H.validate_status != SD_OK) {
        return sd_err_set(err, H.validate_status, "%s", H.validate_msg);
    }
    return SD_OK;
}

static sd_status h_start(void *ctx, sd_job *job, sd_err *err)
{
    (void)ctx;
    H.start_calls++;
    H.last_job = job;
    assert_int_equal(sd_job_state_get(job), SD_JOB_STARTING);
    if (H.start_status != SD_OK) {
        return sd_err_set(err, H.start_status, "executor refused %s: no workers", sd_job_id(job));
    }
    switch (H.action) {
    case START_RUNNING:
        sd_job_set_state(job, SD_JOB_RUNNING);
        break;
    case START_DONE:
        sd_job_set_state(job, SD_JOB_RUNNING);
        sd_job_set_state(job, SD_JOB_DONE);
        break;
    case START_FAIL_ASYNC:
        sd_job_fail(job, "stage s1 failed: boom");
        break;
    default:
        break;
    }
    return SD_OK;
}

static void h_cancel(void *ctx, sd_job *job)
{
    (void)ctx;
    H.cancel_calls++;
    if (H.cancel_sync) {
        sd_job_set_state(job, SD_JOB_CANCELLED);
    }
}

static int setup(void **state)
{
    (void)state;
    memset(&H, 0, sizeof(H));
    H.action = START_RUNNING;
    sd_job_hooks hooks = { .validate = h_validate, .start = h_start, .cancel = h_cancel };
    sd_jobsvc *svc = NULL;
    sd_err err = { 0 };
    assert_int_equal(sd_jobsvc_create(NULL, &hooks, NULL, &svc, &err), SD_OK);
    fake_install(svc);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    check_invariants();
    sd_jobsvc_destroy(F.svc);
    F.svc = NULL;
    return 0;
}

static const tdep NO_ENVS[1][MAX_TDEPS] = { { { NULL, NULL, NULL } } };

/* ---------------------------------------------------------------- request builders */

static char *prepare_simple(const char *name)
{
    pb_prepare_resp *r = prepare_ok(name, NO_ENVS, 1, NULL);
    char *id = strdup(r->preparation_id);
    pb_free(r);
    return id;
}

#define JOB_REQ(var, type, init, id) \
    type var;                        \
    init(&var);                      \
    var.job_id = (char *)(id)

static Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *get_state(const char *id)
{
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest,
            PBJ(get_job_state_request__init), id);
    return unary_ok(SD__JS_GET_STATE, &req.base, &PBJ(job_state_event__descriptor));
}

static int state_of(const char *id)
{
    Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *ev = get_state(id);
    int s = (int)ev->state;
    pb_free(ev);
    return s;
}

static char *run_ok(const char *id)
{
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest req;
    PBJ(run_job_request__init)(&req);
    req.preparation_id = (char *)id;
    Org__Apache__Beam__Model__JobManagement__V1__RunJobResponse *r =
        unary_ok(SD__JS_RUN, &req.base, &PBJ(run_job_response__descriptor));
    char *job_id = strdup(r->job_id);
    pb_free(r);
    return job_id;
}

static int cancel(const char *id)
{
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__CancelJobRequest,
            PBJ(cancel_job_request__init), id);
    Org__Apache__Beam__Model__JobManagement__V1__CancelJobResponse *r =
        unary_ok(SD__JS_CANCEL, &req.base, &PBJ(cancel_job_response__descriptor));
    int s = (int)r->state;
    pb_free(r);
    return s;
}

static Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsResponse *
get_metrics(const char *id)
{
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsRequest,
            PBJ(get_job_metrics_request__init), id);
    return unary_ok(SD__JS_GET_JOB_METRICS, &req.base, &PBJ(get_job_metrics_response__descriptor));
}

/* Finished jobs beyond the history bound are forgotten when a new job is prepared; running
 * ones never are, and the count of jobs prepared keeps counting. */
static void test_job_history_bound(void **state)
{
    (void)state;
    char *ids[8];
    sd_jobsvc_set_history(F.svc, 3);
    for (int i = 0; i < 8; i++) {
        ids[i] = prepare_simple("history");
        if (i == 1) {
            continue; /* job 2 stays prepared (not terminal): never forgotten */
        }
        sd_job *job = sd_jobsvc_find(F.svc, ids[i]);
        assert_non_null(job);
        sd_job_set_state(job, SD_JOB_RUNNING);
        sd_job_set_state(job, SD_JOB_DONE);
    }
    /* Prepares of jobs 4..8 trimmed down to 3 finished before each new one: jobs 1, 3, 4 are
     * gone; 5, 6, 7 (finished), 8 (finished, the newest) and 2 (never run) remain. */
    assert_null(sd_jobsvc_find(F.svc, ids[0]));
    assert_null(sd_jobsvc_find(F.svc, ids[2]));
    assert_null(sd_jobsvc_find(F.svc, ids[3]));
    assert_non_null(sd_jobsvc_find(F.svc, ids[1]));
    for (int i = 4; i < 8; i++) {
        assert_non_null(sd_jobsvc_find(F.svc, ids[i]));
        assert_int_equal(state_of(ids[i]), SD_JOB_DONE);
    }
    assert_int_equal(sd_jobsvc_job_count(F.svc), 8);
    for (int i = 0; i < 8; i++) {
        free(ids[i]);
    }
}

/* A finished job is also forgotten once it ended longer than the TTL ago (checked when jobs
 * are listed or prepared); jobs not finished are kept however old. */
static void test_job_history_ttl(void **state)
{
    (void)state;
    sd_jobsvc_set_history_ttl(F.svc, 60 * 1000);
    char *old = prepare_simple("old");
    char *waiting = prepare_simple("never run");
    sd_job *job = sd_jobsvc_find(F.svc, old);
    sd_job_set_state(job, SD_JOB_RUNNING);
    sd_job_set_state(job, SD_JOB_DONE);
    F.now += 59 * 1000;
    Org__Apache__Beam__Model__JobManagement__V1__GetJobsRequest req;
    PBJ(get_jobs_request__init)(&req);
    Org__Apache__Beam__Model__JobManagement__V1__GetJobsResponse *r =
        unary_ok(SD__JS_GET_JOBS, &req.base, &PBJ(get_jobs_response__descriptor));
    assert_int_equal(r->n_job_info, 2);
    pb_free(r);
    F.now += 2 * 1000;
    r = unary_ok(SD__JS_GET_JOBS, &req.base, &PBJ(get_jobs_response__descriptor));
    assert_int_equal(r->n_job_info, 1);
    assert_string_equal(r->job_info[0]->job_id, waiting);
    pb_free(r);
    assert_null(sd_jobsvc_find(F.svc, old));
    free(old);
    free(waiting);
}

/* ---------------------------------------------------------------- flows */

/* The TypeScript client's sequence: Prepare, Run, poll GetState, GetJobMetrics at the end. */
static void test_prepare_run_done_metrics(void **state)
{
    (void)state;
    pb_prepare_resp *pr = prepare_ok("wordcount", NO_ENVS, 1, NULL);
    assert_string_equal(pr->preparation_id, "job-001");
    assert_string_equal(pr->staging_session_token, "job-001");
    assert_null(pr->artifact_staging_endpoint); /* nothing to stage: the client skips it */
    assert_int_equal(H.validate_calls, 1);
    assert_true(H.saw_options); /* an empty Struct, never NULL */
    pb_free(pr);

    assert_int_equal(state_of("job-001"), SD_JOB_STOPPED);
    F.now += 5;
    char *job_id = run_ok("job-001");
    assert_string_equal(job_id, "job-001");
    assert_int_equal(H.start_calls, 1);
    assert_int_equal(state_of(job_id), SD_JOB_RUNNING);

    /* Metrics reported by the executor, payloads opaque (TS's non-standard distribution). */
    static const uint8_t ts_dist[] = { 0x00, 0x00, 0x00, 0x04, 0x03, 0x06, 0x01, 0x03 };
    sd_pb_monitoring_info mi[2];
    Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo__LabelsEntry lab;
    PBR(monitoring_info__labels_entry__init)(&lab);
    lab.key = (char *)"NAME";
    lab.value = (char *)"dist";
    Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo__LabelsEntry *labp = &lab;
    for (int i = 0; i < 2; i++) {
        PBR(monitoring_info__init)(&mi[i]);
        mi[i].n_labels = 1;
        mi[i].labels = &labp;
    }
    mi[0].urn = (char *)"beam:metric:user:distribution_int64:v1";
    mi[0].type = (char *)"beam:metrics:distribution_int64:v1";
    mi[0].payload.data = (uint8_t *)ts_dist;
    mi[0].payload.len = sizeof(ts_dist);
    mi[1].urn = (char *)"beam:metric:user:sum_int64:v1";
    mi[1].type = (char *)"beam:metrics:sum_int64:v1";
    mi[1].payload.data = (uint8_t *)"\x2a";
    mi[1].payload.len = 1;
    const sd_pb_monitoring_info *infos[2] = { &mi[0], &mi[1] };
    sd_job *job = sd_jobsvc_find(F.svc, job_id);
    assert_non_null(job);
    assert_int_equal(sd_job_set_metrics(job, infos, 2), SD_OK);
    F.now += 100;
    sd_job_set_state(job, SD_JOB_DONE);

    Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *ev = get_state(job_id);
    assert_int_equal(ev->state, SD_JOB_DONE);
    assert_non_null(ev->timestamp);
    assert_int_equal(ev->timestamp->seconds, (F.now) / 1000);
    assert_int_equal(ev->timestamp->nanos, (F.now % 1000) * 1000000);
    pb_free(ev);

    Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsResponse *m = get_metrics(job_id);
    assert_non_null(m->metrics);
    assert_int_equal(m->metrics->n_committed, 2);
    assert_int_equal(m->metrics->n_attempted, 0);
    assert_string_equal(m->metrics->committed[0]->urn, "beam:metric:user:distribution_int64:v1");
    assert_int_equal(m->metrics->committed[0]->payload.len, sizeof(ts_dist));
    assert_memory_equal(m->metrics->committed[0]->payload.data, ts_dist, sizeof(ts_dist));
    assert_string_equal(m->metrics->committed[0]->labels[0]->value, "dist");
    assert_int_equal(m->metrics->committed[1]->payload.data[0], 0x2a);
    pb_free(m);
    free(job_id);
}

/* GetJobMetrics must answer with a MetricResults even before any metric exists. */
static void test_metrics_always_present(void **state)
{
    (void)state;
    char *id = prepare_simple("m");
    Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsResponse *m = get_metrics(id);
    assert_non_null(m->metrics);
    assert_int_equal(m->metrics->n_committed, 0);
    pb_free(m);
    /* Attempted and committed are independent. */
    sd_pb_monitoring_info mi;
    PBR(monitoring_info__init)(&mi);
    mi.urn = (char *)"u";
    const sd_pb_monitoring_info *p = &mi;
    sd_job *job = sd_jobsvc_find(F.svc, id);
    assert_int_equal(sd_job_set_attempted_metrics(job, &p, 1), SD_OK);
    assert_int_equal(sd_job_set_metrics(job, NULL, 0), SD_OK);
    m = get_metrics(id);
    assert_int_equal(m->metrics->n_attempted, 1);
    assert_int_equal(m->metrics->n_committed, 0);
    pb_free(m);
    assert_int_equal(sd_job_metrics(job)->n_attempted, 1);
    free(id);
}

/* Malformed request bytes never crash and answer INVALID_ARGUMENT naming the message. */
static void test_malformed_requests(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        sd__jobsvc_method m;
        const char *bytes;
        size_t len;
        const char *needle;
    } rows[] = {
        { "truncated varint", SD__JS_PREPARE, "\x0a\xff", 2, "PrepareJobRequest" },
        { "length past end", SD__JS_PREPARE, "\x0a\x10\x01", 3, "PrepareJobRequest" },
        { "bad wire type", SD__JS_PREPARE, "\x0f\x00", 2, "PrepareJobRequest" },
        { "nested garbage", SD__JS_PREPARE, "\x0a\x02\x0a\xff", 4, "PrepareJobRequest" },
        { "run garbage", SD__JS_RUN,
          "\x0a\x05"
          "ab",
          4, "RunJobRequest" },
        { "state garbage", SD__JS_GET_STATE, "\xff\xff\xff", 3, "GetJobStateRequest" },
        { "cancel garbage", SD__JS_CANCEL, "\x0a\x7f", 2, "CancelJobRequest" },
        { "metrics garbage", SD__JS_GET_JOB_METRICS, "\x0a\x7f", 2, "GetJobMetricsRequest" },
        { "stream garbage", SD__JS_GET_STATE_STREAM, "\x0a\x7f", 2, "GetJobStateRequest" },
        { "messages garbage", SD__JS_GET_MESSAGE_STREAM, "\x0a\x7f", 2, "JobMessagesRequest" },
        { "jobs garbage", SD__JS_GET_JOBS, "\x0a\x7f", 2, "GetJobsRequest" },
        { "options garbage", SD__JS_DESCRIBE_OPTIONS, "\x0a\x7f", 2,
          "DescribePipelineOptionsRequest" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        fcall *c = open_raw(rows[i].m, rows[i].bytes, rows[i].len);
        if (!c->finished || c->code != SD_RPC_INVALID_ARGUMENT ||
            strstr(c->message, rows[i].needle) == NULL) {
            fail_msg("row \"%s\": finished=%d code=%d msg=%s", rows[i].name, c->finished,
                     (int)c->code, c->message);
        }
        assert_null(c->rec);
        call_close(c);
    }
    assert_int_equal(sd_jobsvc_job_count(F.svc), 0);
    /* The service still works afterwards. */
    char *id = prepare_simple("after");
    assert_string_equal(id, "job-001");
    free(id);
}

static void test_prepare_without_pipeline(void **state)
{
    (void)state;
    pb_prepare_req req;
    PBJ(prepare_job_request__init)(&req);
    unary_err(SD__JS_PREPARE, &req.base, SD_RPC_INVALID_ARGUMENT, "pipeline is missing");
    assert_int_equal(H.validate_calls, 0);
}

/* Validation failures carry the executor's whole message with the right code. */
static void test_validate_rejects(void **state)
{
    (void)state;

    static const struct {
        sd_status st;
        sd_rpc_code code;
        const char *msg;
    } rows[] = {
        { SD_EUNIMPL, SD_RPC_UNIMPLEMENTED,
          "found 2 unsupported features: beam:transform:foo:v1 in t1; docker environment e1" },
        { SD_EINVAL, SD_RPC_INVALID_ARGUMENT, "transform t2: input pcollection p9 is undefined" },
        { SD_EPROTO, SD_RPC_INVALID_ARGUMENT, "coder c1: malformed payload" },
        { SD_ENOTFOUND, SD_RPC_INVALID_ARGUMENT, "environment e7 is not defined" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        H.validate_status = rows[i].st;
        H.validate_msg = rows[i].msg;
        size_t len;
        uint8_t *b = make_prepare("bad", NO_ENVS, 1, NULL, &len);
        fcall *c = open_raw(SD__JS_PREPARE, b, len);
        free(b);
        assert_true(c->finished);
        assert_int_equal(c->code, rows[i].code);
        assert_string_equal(c->message, rows[i].msg);
        call_close(c);
    }
    assert_int_equal(sd_jobsvc_job_count(F.svc), 0);
    H.validate_status = SD_OK;
    char *id = prepare_simple("good");
    assert_string_equal(id, "job-001");
    free(id);
}

/* Every job-addressed method answers NOT_FOUND naming the id. */
static void test_unknown_ids(void **state)
{
    (void)state;
    char *id = prepare_simple("x"); /* one real job, so lookups are not trivially empty */
    static const sd__jobsvc_method methods[] = {
        SD__JS_GET_STATE,       SD__JS_GET_PIPELINE,     SD__JS_CANCEL,
        SD__JS_GET_JOB_METRICS, SD__JS_GET_STATE_STREAM, SD__JS_GET_MESSAGE_STREAM,
    };
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        /* All these requests have the job id as field 1; a GetJobStateRequest encodes it. */
        JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest,
                PBJ(get_job_state_request__init), "job-999");
        unary_err(methods[i], &req.base, SD_RPC_NOT_FOUND, "\"job-999\"");
    }
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run;
    PBJ(run_job_request__init)(&run);
    run.preparation_id = (char *)"prep-42";
    unary_err(SD__JS_RUN, &run.base, SD_RPC_NOT_FOUND, "\"prep-42\"");
    /* Empty id too. */
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest,
            PBJ(get_job_state_request__init), "");
    unary_err(SD__JS_GET_STATE, &req.base, SD_RPC_NOT_FOUND, "\"\"");
    assert_int_equal(state_of(id), SD_JOB_STOPPED);
    free(id);
}

static void test_run_only_once(void **state)
{
    (void)state;
    char *id = prepare_simple("once");
    char *job = run_ok(id);
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest req;
    PBJ(run_job_request__init)(&req);
    req.preparation_id = id;
    unary_err(SD__JS_RUN, &req.base, SD_RPC_FAILED_PRECONDITION, "already run");
    assert_int_equal(H.start_calls, 1);
    /* A job cancelled before Run cannot be run either. */
    char *id2 = prepare_simple("cancelled");
    assert_int_equal(cancel(id2), SD_JOB_CANCELLED);
    req.preparation_id = id2;
    unary_err(SD__JS_RUN, &req.base, SD_RPC_FAILED_PRECONDITION, "CANCELLED");
    assert_int_equal(H.start_calls, 1);
    free(id);
    free(id2);
    free(job);
}

/* The executor refusing to start fails the job and the Run call with its message. */
static void test_run_start_fails(void **state)
{
    (void)state;
    char *id = prepare_simple("nostart");
    H.start_status = SD_EUNAVAIL;
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest req;
    PBJ(run_job_request__init)(&req);
    req.preparation_id = id;
    unary_err(SD__JS_RUN, &req.base, SD_RPC_UNAVAILABLE, "no workers");
    assert_int_equal(state_of(id), SD_JOB_FAILED);
    sd_job *job = sd_jobsvc_find(F.svc, id);
    assert_non_null(sd_job_error(job));
    assert_non_null(strstr(sd_job_error(job), "no workers"));
    free(id);
}

static void test_no_executor(void **state)
{
    (void)state;
    sd_jobsvc_destroy(F.svc);
    sd_jobsvc *svc = NULL;
    assert_int_equal(sd_jobsvc_create(NULL, NULL, NULL, &svc, NULL), SD_OK);
    fake_install(svc);
    char *id = prepare_simple("p");
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest req;
    PBJ(run_job_request__init)(&req);
    req.preparation_id = id;
    unary_err(SD__JS_RUN, &req.base, SD_RPC_FAILED_PRECONDITION, "no executor");
    assert_int_equal(state_of(id), SD_JOB_FAILED);
    /* Cancel with no cancel hook ends at once. */
    char *id2 = prepare_simple("q");
    assert_int_equal(cancel(id2), SD_JOB_CANCELLED);
    free(id);
    free(id2);
}

/* Cancel in each state (table): the response state, hook calls and final state. */
static void test_cancel_table(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        start_action action; /* how far the job gets; -1 = not run */
        bool run;
        bool sync;
        int expect_response;
        int expect_hook;
        int expect_final; /* after the executor finishes the cancel */
    } rows[] = {
        { "stopped", START_NOTHING, false, false, SD_JOB_CANCELLED, 0, SD_JOB_CANCELLED },
        { "starting", START_NOTHING, true, false, SD_JOB_CANCELLING, 1, SD_JOB_CANCELLED },
        { "running", START_RUNNING, true, false, SD_JOB_CANCELLING, 1, SD_JOB_CANCELLED },
        { "running sync", START_RUNNING, true, true, SD_JOB_CANCELLED, 1, SD_JOB_CANCELLED },
        { "done", START_DONE, true, false, SD_JOB_DONE, 0, SD_JOB_DONE },
        { "failed", START_FAIL_ASYNC, true, false, SD_JOB_FAILED, 0, SD_JOB_FAILED },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        H.action = rows[i].action;
        H.cancel_sync = rows[i].sync;
        H.cancel_calls = 0;
        char *id = prepare_simple(rows[i].name);
        if (rows[i].run) {
            free(run_ok(id));
        }
        int got = cancel(id);
        if (got != rows[i].expect_response || H.cancel_calls != rows[i].expect_hook) {
            fail_msg("row %s: response %d hook %d", rows[i].name, got, H.cancel_calls);
        }
        /* A second cancel does not call the hook again. */
        assert_int_equal(cancel(id), got);
        assert_int_equal(H.cancel_calls, rows[i].expect_hook);
        sd_job *job = sd_jobsvc_find(F.svc, id);
        if (sd_job_state_get(job) == SD_JOB_CANCELLING) {
            sd_job_set_state(job, SD_JOB_RUNNING); /* late progress is ignored */
            assert_int_equal(sd_job_state_get(job), SD_JOB_CANCELLING);
            sd_job_set_state(job, SD_JOB_CANCELLED);
        }
        assert_int_equal(state_of(id), rows[i].expect_final);
        free(id);
    }
}

/* The state machine's rules, as a table of (path of states, attempted state, result). */
static void test_state_rules(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        sd_job_state path[4];
        sd_job_state attempt;
        bool changed;
        sd_job_state final;
    } rows[] = {
        { "stopped->starting", { 0 }, SD_JOB_STARTING, true, SD_JOB_STARTING },
        { "same state", { SD_JOB_RUNNING }, SD_JOB_RUNNING, false, SD_JOB_RUNNING },
        { "back to stopped", { SD_JOB_RUNNING }, SD_JOB_STOPPED, false, SD_JOB_RUNNING },
        { "to unspecified", { SD_JOB_RUNNING }, SD_JOB_UNSPECIFIED, false, SD_JOB_RUNNING },
        { "done is final", { SD_JOB_RUNNING, SD_JOB_DONE }, SD_JOB_FAILED, false, SD_JOB_DONE },
        { "failed is final", { SD_JOB_FAILED }, SD_JOB_DONE, false, SD_JOB_FAILED },
        { "failed not cancelled", { SD_JOB_FAILED }, SD_JOB_CANCELLED, false, SD_JOB_FAILED },
        { "cancelled is final", { SD_JOB_CANCELLED }, SD_JOB_RUNNING, false, SD_JOB_CANCELLED },
        { "cancelling->running", { SD_JOB_CANCELLING }, SD_JOB_RUNNING, false, SD_JOB_CANCELLING },
        { "cancelling->failed", { SD_JOB_CANCELLING }, SD_JOB_FAILED, true, SD_JOB_FAILED },
        { "running->failed", { SD_JOB_RUNNING }, SD_JOB_FAILED, true, SD_JOB_FAILED },
        { "out of range", { SD_JOB_RUNNING }, (sd_job_state)42, false, SD_JOB_RUNNING },
        { "drained final", { SD_JOB_DRAINED }, SD_JOB_RUNNING, false, SD_JOB_DRAINED },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *id = prepare_simple(rows[i].name);
        sd_job *job = sd_jobsvc_find(F.svc, id);
        for (size_t k = 0; k < 4 && rows[i].path[k] != 0; k++) {
            sd_job_set_state(job, rows[i].path[k]);
        }
        bool changed = sd_job_set_state(job, rows[i].attempt);
        check_invariants();
        if (changed != rows[i].changed || sd_job_state_get(job) != rows[i].final) {
            fail_msg("row %s: changed=%d state=%s", rows[i].name, changed,
                     sd_job_state_name(sd_job_state_get(job)));
        }
        free(id);
    }
    assert_string_equal(sd_job_state_name(SD_JOB_CANCELLING), "CANCELLING");
    assert_string_equal(sd_job_state_name((sd_job_state)99), "UNKNOWN");
    assert_true(sd_job_state_is_terminal(SD_JOB_UPDATED));
    assert_false(sd_job_state_is_terminal(SD_JOB_DRAINING));
}

/* GetStateStream: current state first, every change in order, OK after the terminal state. */
static void test_state_stream_order(void **state)
{
    (void)state;
    H.action = START_RUNNING;
    char *id = prepare_simple("s");
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest,
            PBJ(get_job_state_request__init), id);
    fcall *a = open_msg(SD__JS_GET_STATE_STREAM, &req.base);
    assert_non_null(a->rec);
    assert_false(a->finished);
    F.now += 10;
    free(run_ok(id));
    fcall *b = open_msg(SD__JS_GET_STATE_STREAM, &req.base); /* joins while RUNNING */
    sd_job *job = sd_jobsvc_find(F.svc, id);
    sd_job_message(job, SD_JOB_MSG_BASIC, "not a state"); /* ignored by state streams */
    F.now += 10;
    sd_job_set_state(job, SD_JOB_DONE);
    sd_job_set_state(job, SD_JOB_FAILED); /* ignored: terminal */

    static const int want_a[] = { SD_JOB_STOPPED, SD_JOB_STARTING, SD_JOB_RUNNING, SD_JOB_DONE };
    static const int want_b[] = { SD_JOB_RUNNING, SD_JOB_DONE };
    assert_int_equal(a->n_msgs, 4);
    int64_t last_ts = 0;
    for (size_t i = 0; i < 4; i++) {
        Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *ev =
            call_msg(a, i, &PBJ(job_state_event__descriptor));
        assert_int_equal(ev->state, want_a[i]);
        assert_non_null(ev->timestamp);
        int64_t ts = ev->timestamp->seconds * 1000 + ev->timestamp->nanos / 1000000;
        assert_true(ts >= last_ts);
        last_ts = ts;
        pb_free(ev);
    }
    assert_int_equal(b->n_msgs, 2);
    for (size_t i = 0; i < 2; i++) {
        Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *ev =
            call_msg(b, i, &PBJ(job_state_event__descriptor));
        assert_int_equal(ev->state, want_b[i]);
        pb_free(ev);
    }
    assert_true(a->finished && a->code == SD_RPC_OK);
    assert_true(b->finished && b->code == SD_RPC_OK);
    call_close(a);
    call_close(b);
    /* Opened on a terminal job: one event, then OK. */
    fcall *c = open_msg(SD__JS_GET_STATE_STREAM, &req.base);
    assert_int_equal(c->n_msgs, 1);
    assert_true(c->finished && c->code == SD_RPC_OK);
    call_close(c);
    free(id);
}

/* Collect a message stream as a compact transcript: "S<state>" or "M<importance>:<text>". */
static void transcript(fcall *c, char *out, size_t size)
{
    out[0] = '\0';
    for (size_t i = 0; i < c->n_msgs; i++) {
        Org__Apache__Beam__Model__JobManagement__V1__JobMessagesResponse *r =
            call_msg(c, i, &PBJ(job_messages_response__descriptor));
        char item[256];
        if (r->response_case == MSG_CASE(STATE_RESPONSE)) {
            snprintf(item, sizeof(item), "S%d ", (int)r->state_response->state);
        } else {
            assert_non_null(r->message_response->time);
            assert_true(strlen(r->message_response->time) >= 20); /* RFC 3339 */
            assert_true(r->message_response->message_id[0] != '\0');
            snprintf(item, sizeof(item), "M%d:%s ", (int)r->message_response->importance,
                     r->message_response->message_text);
        }
        strncat(out, item, size - strlen(out) - 1);
        pb_free(r);
    }
}

/* GetMessageStream interleaves messages and states, includes the failure as ERROR, ends OK. */
static void test_message_stream(void **state)
{
    (void)state;
    H.action = START_NOTHING;
    char *id = prepare_simple("msgs");
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__JobMessagesRequest,
            PBJ(job_messages_request__init), id);
    fcall *live = open_msg(SD__JS_GET_MESSAGE_STREAM, &req.base);
    free(run_ok(id));
    sd_job *job = sd_jobsvc_find(F.svc, id);
    sd_job_set_state(job, SD_JOB_RUNNING);
    sd_job_message(job, SD_JOB_MSG_BASIC, "worker %d connected", 1);
    sd_job_message(job, SD_JOB_MSG_WARNING, "slow bundle");
    sd_job_fail(job, "bundle %s failed: %s", "b7", "ZeroDivisionError");
    sd_job_message(job, SD_JOB_MSG_DEBUG, "after the end");

    char got[2048];
    transcript(live, got, sizeof(got));
    assert_string_equal(got, "S1 S9 S2 M3:worker 1 connected M4:slow bundle "
                             "M5:bundle b7 failed: ZeroDivisionError S4 ");
    assert_true(live->finished && live->code == SD_RPC_OK);
    call_close(live);
    assert_string_equal(sd_job_error(job), "bundle b7 failed: ZeroDivisionError");

    /* A late reader gets the same history replayed (plus what came after), then OK. */
    fcall *late = open_msg(SD__JS_GET_MESSAGE_STREAM, &req.base);
    transcript(late, got, sizeof(got));
    assert_string_equal(got, "S1 S9 S2 M3:worker 1 connected M4:slow bundle "
                             "M5:bundle b7 failed: ZeroDivisionError S4 M1:after the end ");
    assert_true(late->finished && late->code == SD_RPC_OK);
    call_close(late);
    /* A second failure keeps the first error text and state. */
    sd_job_fail(job, "second");
    assert_string_equal(sd_job_error(job), "bundle b7 failed: ZeroDivisionError");
    assert_int_equal(sd_job_state_get(job), SD_JOB_FAILED);
    free(id);
}

/* At most SD_JOB_HISTORY_MAX entries are kept; a replay still ends with the terminal state. */
static void test_history_ring_bound(void **state)
{
    (void)state;
    char *id = prepare_simple("ring");
    sd_job *job = sd_jobsvc_find(F.svc, id);
    free(run_ok(id));
    sd_job_set_state(job, SD_JOB_DONE);
    for (int i = 0; i < 2500; i++) {
        sd_job_message(job, SD_JOB_MSG_DETAILED, "m%d", i);
    }
    check_invariants();
    assert_int_equal(sd__job_history_len(job), SD_JOB_HISTORY_MAX);
    const sd__job_entry *first = sd__job_history_at(job, 0);
    const sd__job_entry *last = sd__job_history_at(job, SD_JOB_HISTORY_MAX - 1);
    assert_string_equal(first->text, "m1500");
    assert_string_equal(last->text, "m2499");
    assert_int_equal(last->seq - first->seq, SD_JOB_HISTORY_MAX - 1);

    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__JobMessagesRequest,
            PBJ(job_messages_request__init), id);
    fcall *c = open_msg(SD__JS_GET_MESSAGE_STREAM, &req.base);
    assert_int_equal(c->n_msgs, SD_JOB_HISTORY_MAX + 1);
    Org__Apache__Beam__Model__JobManagement__V1__JobMessagesResponse *r =
        call_msg(c, SD_JOB_HISTORY_MAX, &PBJ(job_messages_response__descriptor));
    assert_int_equal(r->response_case, MSG_CASE(STATE_RESPONSE));
    assert_int_equal(r->state_response->state, SD_JOB_DONE);
    pb_free(r);
    assert_true(c->finished && c->code == SD_RPC_OK);
    call_close(c);
    free(id);
}

/* A client that goes away mid-stream is dropped; later changes do not touch it. */
static void test_stream_client_cancels(void **state)
{
    (void)state;
    char *id = prepare_simple("gone");
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest,
            PBJ(get_job_state_request__init), id);
    fcall *a = open_msg(SD__JS_GET_STATE_STREAM, &req.base);
    fcall *b = open_msg(SD__JS_GET_MESSAGE_STREAM, &req.base);
    call_close(a); /* cancelled by the client */
    free(run_ok(id));
    assert_int_equal(b->n_msgs, 3); /* STOPPED, STARTING, RUNNING */
    call_close(b);
    sd_job_set_state(sd_jobsvc_find(F.svc, id), SD_JOB_DONE);
    assert_int_equal(state_of(id), SD_JOB_DONE);
    free(id);
}

/* A reader that never drains is cut off with RESOURCE_EXHAUSTED instead of growing memory. */
static void test_slow_stream_reader(void **state)
{
    (void)state;
    char *id = prepare_simple("slow");
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__JobMessagesRequest,
            PBJ(job_messages_request__init), id);
    fcall *c = open_msg(SD__JS_GET_MESSAGE_STREAM, &req.base);
    F.forced_queue = 100000;
    sd_job_message(sd_jobsvc_find(F.svc, id), SD_JOB_MSG_BASIC, "x");
    F.forced_queue = 0;
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_RESOURCE_EXHAUSTED);
    call_close(c);
    free(id);
}

static void test_get_jobs_and_pipeline(void **state)
{
    (void)state;
    char *a = prepare_simple("alpha");
    char *b = prepare_simple("beta");
    free(run_ok(b));
    Org__Apache__Beam__Model__JobManagement__V1__GetJobsRequest req;
    PBJ(get_jobs_request__init)(&req);
    Org__Apache__Beam__Model__JobManagement__V1__GetJobsResponse *r =
        unary_ok(SD__JS_GET_JOBS, &req.base, &PBJ(get_jobs_response__descriptor));
    assert_int_equal(r->n_job_info, 2);
    assert_string_equal(r->job_info[0]->job_id, "job-001");
    assert_string_equal(r->job_info[0]->job_name, "alpha");
    assert_int_equal(r->job_info[0]->state, SD_JOB_STOPPED);
    assert_string_equal(r->job_info[1]->job_id, "job-002");
    assert_string_equal(r->job_info[1]->job_name, "beta");
    assert_int_equal(r->job_info[1]->state, SD_JOB_RUNNING);
    assert_non_null(r->job_info[1]->pipeline_options);
    pb_free(r);

    JOB_REQ(pr, Org__Apache__Beam__Model__JobManagement__V1__GetJobPipelineRequest,
            PBJ(get_job_pipeline_request__init), a);
    Org__Apache__Beam__Model__JobManagement__V1__GetJobPipelineResponse *p =
        unary_ok(SD__JS_GET_PIPELINE, &pr.base, &PBJ(get_job_pipeline_response__descriptor));
    assert_non_null(p->pipeline);
    assert_int_equal(p->pipeline->n_root_transform_ids, 1);
    assert_string_equal(p->pipeline->root_transform_ids[0], "root");
    assert_int_equal(p->pipeline->components->n_environments, 1);
    pb_free(p);
    assert_string_equal(sd_job_name(sd_jobsvc_find(F.svc, a)), "alpha");
    assert_int_equal(sd_jobsvc_job_count(F.svc), 2);
    free(a);
    free(b);
}

static void test_describe_options_and_drain(void **state)
{
    (void)state;
    Org__Apache__Beam__Model__JobManagement__V1__DescribePipelineOptionsRequest req;
    PBJ(describe_pipeline_options_request__init)(&req);
    Org__Apache__Beam__Model__JobManagement__V1__DescribePipelineOptionsResponse *r = unary_ok(
        SD__JS_DESCRIBE_OPTIONS, &req.base, &PBJ(describe_pipeline_options_response__descriptor));
    bool clock = false;
    for (size_t i = 0; i < r->n_options; i++) {
        if (strcmp(r->options[i]->name, "sundial_clock") == 0) {
            clock = true;
            assert_string_equal(r->options[i]->default_value, "synthetic");
            assert_non_null(strstr(r->options[i]->description, "wall"));
        }
    }
    assert_true(clock);
    pb_free(r);
    Org__Apache__Beam__Model__JobManagement__V1__DrainJobRequest d;
    PBJ(drain_job_request__init)(&d);
    d.job_id = (char *)"job-001";
    unary_err(SD__JS_DRAIN, &d.base, SD_RPC_UNIMPLEMENTED, "Cancel");
}

/* Option accessors over the Struct the SDKs send. */
static void test_options(void **state)
{
    (void)state;
    Google__Protobuf__Value v[8];
    Google__Protobuf__Struct__FieldsEntry e[8];
    Google__Protobuf__Struct__FieldsEntry *ep[8];
    for (int i = 0; i < 8; i++) {
        google__protobuf__value__init(&v[i]);
        google__protobuf__struct__fields_entry__init(&e[i]);
        e[i].value = &v[i];
        ep[i] = &e[i];
    }
    /* Nested: {"s1": {"timings": [1, 2.5], "flag": true, "q": "a\"b"}} */
    Google__Protobuf__Value inner[3], nums[2];
    Google__Protobuf__Struct__FieldsEntry ie[3];
    Google__Protobuf__Struct__FieldsEntry *iep[3];
    Google__Protobuf__Value *nump[2] = { &nums[0], &nums[1] };
    Google__Protobuf__ListValue list;
    google__protobuf__list_value__init(&list);
    list.n_values = 2;
    list.values = nump;
    for (int i = 0; i < 2; i++) {
        google__protobuf__value__init(&nums[i]);
        nums[i].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
    }
    nums[0].number_value = 1;
    nums[1].number_value = 2.5;
    for (int i = 0; i < 3; i++) {
        google__protobuf__value__init(&inner[i]);
        google__protobuf__struct__fields_entry__init(&ie[i]);
        ie[i].value = &inner[i];
        iep[i] = &ie[i];
    }
    ie[0].key = (char *)"timings";
    inner[0].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
    inner[0].list_value = &list;
    ie[1].key = (char *)"flag";
    inner[1].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
    inner[1].bool_value = 1;
    ie[2].key = (char *)"q";
    inner[2].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    inner[2].string_value = (char *)"a\"b";
    Google__Protobuf__Struct inner_struct;
    google__protobuf__struct__init(&inner_struct);
    inner_struct.n_fields = 3;
    inner_struct.fields = iep;
    Google__Protobuf__Value s1;
    google__protobuf__value__init(&s1);
    s1.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
    s1.struct_value = &inner_struct;
    Google__Protobuf__Struct__FieldsEntry s1e;
    google__protobuf__struct__fields_entry__init(&s1e);
    s1e.key = (char *)"s1";
    s1e.value = &s1;
    Google__Protobuf__Struct__FieldsEntry *s1ep = &s1e;
    Google__Protobuf__Struct splits;
    google__protobuf__struct__init(&splits);
    splits.n_fields = 1;
    splits.fields = &s1ep;

    e[0].key = (char *)"beam:option:sundial_clock:v1";
    v[0].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    v[0].string_value = (char *)"wall";
    e[1].key = (char *)"beam:option:streaming:v1";
    v[1].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
    v[1].bool_value = 1;
    e[2].key = (char *)"beam:option:sundial_schedule_seed:v1";
    v[2].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
    v[2].number_value = 42;
    e[3].key = (char *)"beam:option:direct_test_splits:v1";
    v[3].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
    v[3].struct_value = &splits;
    e[4].key = (char *)"plain_key";
    v[4].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    v[4].string_value = (char *)"FALSE";
    e[5].key = (char *)"beam:option:fraction:v1";
    v[5].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
    v[5].number_value = 0.5;
    e[6].key = (char *)"beam:option:intstr:v1";
    v[6].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    v[6].string_value = (char *)"-17";
    e[7].key = (char *)"beam:option:nothing:v1";
    v[7].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE;
    Google__Protobuf__Struct opts;
    google__protobuf__struct__init(&opts);
    opts.n_fields = 8;
    opts.fields = ep;

    pb_prepare_resp *r = prepare_ok("opts", NO_ENVS, 1, &opts);
    sd_job *job = sd_jobsvc_find(F.svc, r->preparation_id);
    pb_free(r);

    assert_string_equal(sd_job_option_string(job, SD_JOB_OPTION_CLOCK), "wall");
    assert_string_equal(sd_job_option_string(job, "sundial_clock"), "wall"); /* bare name */
    assert_true(sd_job_option_bool(job, "streaming", false));
    assert_false(sd_job_option_bool(job, "plain_key", true)); /* string "FALSE" */
    assert_true(sd_job_option_bool(job, "absent", true));
    int64_t n = 0;
    assert_true(sd_job_option_int(job, "sundial_schedule_seed", &n));
    assert_int_equal(n, 42);
    assert_true(sd_job_option_int(job, "intstr", &n));
    assert_int_equal(n, -17);
    assert_false(sd_job_option_int(job, "fraction", &n));
    assert_false(sd_job_option_int(job, "sundial_clock", &n));
    assert_null(sd_job_option(job, "missing"));
    assert_null(sd_job_option_string(job, "missing"));

    const char *want = "{\"s1\":{\"timings\":[1,2.5],\"flag\":true,\"q\":\"a\\\"b\"}}";
    char *json = sd_job_option_json(job, "beam:option:direct_test_splits:v1");
    assert_non_null(json);
    assert_string_equal(json, want);
    sd_free(json);
    /* The string accessor renders other kinds as JSON too (cached, borrowed). */
    const char *s = sd_job_option_string(job, "direct_test_splits");
    assert_string_equal(s, want);
    assert_ptr_equal(sd_job_option_string(job, "beam:option:direct_test_splits:v1"), s);
    assert_string_equal(sd_job_option_string(job, "streaming"), "true");
    assert_string_equal(sd_job_option_string(job, "nothing"), "null");
    assert_string_equal(sd_job_option_string(job, "fraction"), "0.5");
}

/* One job failing leaves the others serving and finishing. */
static void test_several_jobs(void **state)
{
    (void)state;
    char *ids[3];
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof(name), "j%d", i);
        ids[i] = prepare_simple(name);
        free(run_ok(ids[i]));
    }
    sd_job_fail(sd_jobsvc_find(F.svc, ids[1]), "worker crashed");
    sd_job_set_state(sd_jobsvc_find(F.svc, ids[0]), SD_JOB_DONE);
    assert_int_equal(state_of(ids[0]), SD_JOB_DONE);
    assert_int_equal(state_of(ids[1]), SD_JOB_FAILED);
    assert_int_equal(state_of(ids[2]), SD_JOB_RUNNING);
    char *more = prepare_simple("later");
    assert_string_equal(more, "job-004");
    sd_job_set_state(sd_jobsvc_find(F.svc, ids[2]), SD_JOB_DONE);
    assert_int_equal(state_of(ids[2]), SD_JOB_DONE);
    for (int i = 0; i < 3; i++) {
        free(ids[i]);
    }
    free(more);
}

static void test_user_pointer(void **state)
{
    (void)state;
    char *id = prepare_simple("u");
    sd_job *job = sd_jobsvc_find(F.svc, id);
    assert_null(sd_job_user(job));
    int x;
    sd_job_set_user(job, &x);
    assert_ptr_equal(sd_job_user(job), &x);
    assert_string_equal(sd_job_id(job), id);
    assert_null(sd_job_artifact_dir(job)); /* the service has no artifact_dir */
    assert_non_null(sd_job_pipeline(job));
    assert_non_null(sd_job_options(job));
    assert_null(sd_jobsvc_find(F.svc, NULL));
    free(id);
}

/* ---------------------------------------------------------------- out of memory */

/*
 * Fail allocation N = 1, 2, ... inside Prepare until it succeeds: every failure must answer
 * RESOURCE_EXHAUSTED (never crash, never leak under ASan) and leave no job behind.
 */
static void test_oom_prepare(void **state)
{
    (void)state;
    size_t len;
    uint8_t *bytes = make_prepare("oom", NO_ENVS, 1, NULL, &len);
    bool ok = false;
    for (long n = 1; n < 500 && !ok; n++) {
        sd_alloc_fail_after(n, 0);
        fcall *c = fcall_new(SD__JS_PREPARE);
        c->rec = sd__jobsvc_on_open(F.svc, SD__JS_PREPARE, c, sd_bytes_make(bytes, len));
        long injected = sd_alloc_injected_failures();
        sd_alloc_fail_after(0, 0);
        check_invariants();
        assert_true(c->finished);
        if (c->code == SD_RPC_OK) {
            ok = true;
        } else {
            if (c->code != SD_RPC_RESOURCE_EXHAUSTED) {
                fail_msg("n=%ld: code %d (%s)", n, (int)c->code, c->message);
            }
            assert_true(injected > 0);
            assert_int_equal(sd_jobsvc_job_count(F.svc), 0);
        }
        call_close(c);
    }
    assert_true(ok);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 1);
    free(bytes);
}

/* The same for the executor-facing calls: they degrade (drop or refuse), never crash. */
static void test_oom_job_calls(void **state)
{
    (void)state;
    char *id = prepare_simple("oomjob");
    sd_job *job = sd_jobsvc_find(F.svc, id);
    sd_pb_monitoring_info mi;
    PBR(monitoring_info__init)(&mi);
    mi.urn = (char *)"beam:metric:user:sum_int64:v1";
    const sd_pb_monitoring_info *p = &mi;
    bool ok = false;
    for (long n = 1; n < 100 && !ok; n++) {
        sd_alloc_fail_after(n, 0);
        sd_status st = sd_job_set_metrics(job, &p, 1);
        sd_alloc_fail_after(0, 0);
        ok = st == SD_OK;
        if (!ok) {
            assert_int_equal(st, SD_ENOMEM);
            assert_int_equal(sd_job_metrics(job)->n_committed, 0); /* old metrics kept */
        }
    }
    assert_true(ok);
    assert_int_equal(sd_job_metrics(job)->n_committed, 1);
    size_t before = sd__job_history_len(job);
    sd_alloc_fail_after(1, 1);
    sd_job_message(job, SD_JOB_MSG_BASIC, "lost");
    sd_job_fail(job, "failure under OOM");
    sd_alloc_fail_after(0, 0);
    /* The messages were dropped but the state change was not. */
    assert_int_equal(sd_job_state_get(job), SD_JOB_FAILED);
    assert_int_equal(sd__job_history_len(job), before + 1);
    check_invariants();

    /* Streams and unary replies under OOM answer RESOURCE_EXHAUSTED or succeed. */
    for (long n = 1; n < 100; n++) {
        JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__JobMessagesRequest,
                PBJ(job_messages_request__init), id);
        size_t len = protobuf_c_message_get_packed_size(&req.base);
        uint8_t buf[64];
        protobuf_c_message_pack(&req.base, buf);
        sd_alloc_fail_after(n, 0);
        fcall *c = fcall_new(SD__JS_GET_MESSAGE_STREAM);
        c->rec = sd__jobsvc_on_open(F.svc, SD__JS_GET_MESSAGE_STREAM, c, sd_bytes_make(buf, len));
        sd_alloc_fail_after(0, 0);
        check_invariants();
        assert_true(c->finished);
        bool done = c->code == SD_RPC_OK;
        if (!done) {
            assert_int_equal(c->code, SD_RPC_RESOURCE_EXHAUSTED);
        }
        call_close(c);
        if (done) {
            break;
        }
    }
    free(id);
}


/* ---------------------------------------------------------------- Prepare limits, background */

/* A PrepareJobRequest whose pipeline lists n (<= 8) transforms. Caller frees. */
static uint8_t *prepare_with_transforms(size_t n, size_t *len)
{
    Org__Apache__Beam__Model__Pipeline__V1__Pipeline p;
    PBR(pipeline__init)(&p);
    pb_components comps;
    PBR(components__init)(&comps);
    p.components = &comps;
    Org__Apache__Beam__Model__Pipeline__V1__Components__TransformsEntry e[8], *ep[8];
    Org__Apache__Beam__Model__Pipeline__V1__PTransform t[8];
    char ids[8][8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        PBR(components__transforms_entry__init)(&e[i]);
        PBR(ptransform__init)(&t[i]);
        snprintf(ids[i], sizeof(ids[i]), "t%zu", i);
        t[i].unique_name = ids[i];
        e[i].key = ids[i];
        e[i].value = &t[i];
        ep[i] = &e[i];
    }
    comps.n_transforms = n;
    comps.transforms = ep;
    pb_prepare_req req;
    PBJ(prepare_job_request__init)(&req);
    req.pipeline = &p;
    req.job_name = "limits";
    *len = protobuf_c_message_get_packed_size(&req.base);
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    protobuf_c_message_pack(&req.base, buf);
    return buf;
}

static fcall *prepare_raw(const uint8_t *bytes, size_t len)
{
    return open_raw(SD__JS_PREPARE, bytes, len);
}

/* Both limits refuse before anything is decoded or validated, naming the limit and flag. */
static void test_prepare_limits(void **state)
{
    (void)state;
    size_t len;
    uint8_t *bytes = prepare_with_transforms(3, &len);
    assert_int_equal(sd__prepare_count_transforms(sd_bytes_make(bytes, len)), 3);
    assert_int_equal(sd__prepare_count_transforms(sd_bytes_make(bytes, len - 1)), 0);

    sd_jobsvc_set_limits(F.svc, 0, 2);
    fcall *c = prepare_raw(bytes, len);
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(c->message, "has 3 transforms"));
    assert_non_null(strstr(c->message, "--max_pipeline_transforms"));
    call_close(c);

    sd_jobsvc_set_limits(F.svc, len - 1, 0);
    c = prepare_raw(bytes, len);
    assert_int_equal(c->code, SD_RPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(c->message, "--max_pipeline_bytes"));
    call_close(c);
    assert_int_equal(H.validate_calls, 0);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 0);

    sd_jobsvc_set_limits(F.svc, len, 3); /* exactly at both limits: accepted */
    c = prepare_raw(bytes, len);
    assert_int_equal(c->code, SD_RPC_OK);
    call_close(c);
    assert_int_equal(H.validate_calls, 1);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 1);
    free(bytes);
}

/*
 * With a background pool, Prepare answers only after the pool's result reached the loop; a
 * client that left meanwhile gets nothing and no job is made; sd_jobsvc_close answers the
 * ones in progress with UNAVAILABLE and refuses new ones.
 */
static void test_prepare_in_background(void **state)
{
    (void)state;
    fake_loop l;
    fake_loop_init(&l);
    sd_bg *bg = NULL;
    assert_int_equal(sd_bg_create(1, fake_post, &l, &bg), SD_OK);
    sd_jobsvc_set_background(F.svc, bg);
    size_t len;
    uint8_t *bytes = prepare_with_transforms(2, &len);

    fcall *c = prepare_raw(bytes, len);
    assert_non_null(c->rec);
    assert_false(c->finished);
    fake_run(&l);
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_OK);
    assert_int_equal(c->n_msgs, 1);
    call_close(c);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 1);
    assert_int_equal(H.validate_calls, 1);

    /* The client goes away before the check is done. */
    c = prepare_raw(bytes, len);
    assert_false(c->finished);
    call_close(c);
    fake_run(&l);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 1);

    /* The server stops while one is in progress. */
    c = prepare_raw(bytes, len);
    assert_false(c->finished);
    sd_jobsvc_close(F.svc);
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_UNAVAILABLE);
    fake_run(&l); /* its result arrives and is dropped */
    fcall *late = prepare_raw(bytes, len);
    assert_true(late->finished);
    assert_int_equal(late->code, SD_RPC_UNAVAILABLE);
    call_close(late);
    call_close(c);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 1);
    sd_bg_close(bg);
    fake_loop_deinit(&l);
    free(bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prepare_run_done_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_always_present, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_without_pipeline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validate_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_only_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_start_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_executor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_stream_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_message_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_history_ring_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_client_cancels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_stream_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_jobs_and_pipeline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_describe_options_and_drain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_several_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_history_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_user_pointer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_history_ttl, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_in_background, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_prepare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_job_calls, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
