/*
 * Sundial: unit tests for the Job API (runner/jobservice), driven through the internal io seam
 * with a fake transport (test_jobservice_fake.h) and a fake executor
 * (test_jobservice_harness.h): Prepare/Run/GetState/Cancel/GetJobMetrics flows with the fake
 * executor's hooks, malformed requests, unknown ids, validation, state rules, and the job
 * history's bound and time to live. The other concerns have binaries of their own (see
 * test_jobservice_harness.h).
 */
#include <math.h>
#include <stdlib.h>

#include "runner/base/bg.h"
#include "test_jobservice_harness.h"
#include "tests/unit/fake_loop.h"

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

/*
 * Drain, by the job's state: a job that never ran is DRAINED at once; a starting or running
 * one is DRAINING and the executor is told once; the executor's late RUNNING is ignored; a
 * Cancel still overrides; ended or cancelling jobs refuse.
 */
static void test_drain_table(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        start_action action;
        bool run;
        int expect; /* the response's state, or -1: FAILED_PRECONDITION */
        int expect_hook;
    } rows[] = {
        { "stopped", START_NOTHING, false, SD_JOB_DRAINED, 0 },
        { "starting", START_NOTHING, true, SD_JOB_DRAINING, 1 },
        { "running", START_RUNNING, true, SD_JOB_DRAINING, 1 },
        { "done", START_DONE, true, -1, 0 },
        { "failed", START_FAIL_ASYNC, true, -1, 0 },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        H.action = rows[i].action;
        H.drain_calls = 0;
        char *id = prepare_simple(rows[i].name);
        if (rows[i].run) {
            free(run_ok(id));
        }
        if (rows[i].expect < 0) {
            Org__Apache__Beam__Model__JobManagement__V1__DrainJobRequest req = drain_req(id);
            unary_err(SD__JS_DRAIN, &req.base, SD_RPC_FAILED_PRECONDITION,
                      sd_job_state_name(sd_job_state_get(sd_jobsvc_find(F.svc, id))));
        } else {
            int got = drain(id);
            if (got != rows[i].expect || H.drain_calls != rows[i].expect_hook) {
                fail_msg("row %s: response %d hook %d", rows[i].name, got, H.drain_calls);
            }
            assert_int_equal(drain(id), got); /* again: no second hook call */
        }
        assert_int_equal(H.drain_calls, rows[i].expect_hook);
        sd_job *job = sd_jobsvc_find(F.svc, id);
        if (sd_job_state_get(job) == SD_JOB_DRAINING) {
            assert_false(sd_job_set_state(job, SD_JOB_RUNNING)); /* late progress */
            assert_int_equal(state_of(id), SD_JOB_DRAINING);
            assert_true(sd_job_set_state(job, SD_JOB_DRAINED));
            assert_int_equal(state_of(id), SD_JOB_DRAINED);
            assert_int_equal(drain(id), SD_JOB_DRAINED);
        }
        free(id);
    }
    /* Cancel overrides a drain; a job being cancelled cannot be drained. */
    H.action = START_RUNNING;
    char *id = prepare_simple("drain then cancel");
    free(run_ok(id));
    assert_int_equal(drain(id), SD_JOB_DRAINING);
    assert_int_equal(cancel(id), SD_JOB_CANCELLING);
    Org__Apache__Beam__Model__JobManagement__V1__DrainJobRequest req = drain_req(id);
    unary_err(SD__JS_DRAIN, &req.base, SD_RPC_FAILED_PRECONDITION, "CANCELLING");
    sd_job_set_state(sd_jobsvc_find(F.svc, id), SD_JOB_CANCELLED);
    free(id);
    /* Unknown and malformed requests. */
    req = drain_req("job-999");
    unary_err(SD__JS_DRAIN, &req.base, SD_RPC_NOT_FOUND, "job-999");
}

/* Without a drain hook (an executor that cannot drain), Drain is UNIMPLEMENTED. */
static void test_drain_unsupported(void **state)
{
    (void)state;
    sd_jobsvc_destroy(F.svc);
    sd_job_hooks hooks = { .validate = h_validate, .start = h_start, .cancel = h_cancel };
    sd_jobsvc *svc = NULL;
    sd_err err = { 0 };
    assert_int_equal(sd_jobsvc_create(NULL, &hooks, NULL, &svc, &err), SD_OK);
    fake_install(svc);
    char *id = prepare_simple("no drain");
    free(run_ok(id));
    Org__Apache__Beam__Model__JobManagement__V1__DrainJobRequest req = drain_req(id);
    unary_err(SD__JS_DRAIN, &req.base, SD_RPC_UNIMPLEMENTED, "drain");
    assert_int_equal(state_of(id), SD_JOB_RUNNING);
    free(id);
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
        { "draining->running", { SD_JOB_DRAINING }, SD_JOB_RUNNING, false, SD_JOB_DRAINING },
        { "draining->starting", { SD_JOB_DRAINING }, SD_JOB_STARTING, false, SD_JOB_DRAINING },
        { "draining->drained", { SD_JOB_DRAINING }, SD_JOB_DRAINED, true, SD_JOB_DRAINED },
        { "draining->failed", { SD_JOB_DRAINING }, SD_JOB_FAILED, true, SD_JOB_FAILED },
        { "draining->cancelling", { SD_JOB_DRAINING }, SD_JOB_CANCELLING, true, SD_JOB_CANCELLING },
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
        cmocka_unit_test_setup_teardown(test_drain_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_unsupported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_history_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_history_ttl, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
