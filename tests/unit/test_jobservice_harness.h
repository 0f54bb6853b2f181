/*
 * Sundial: the Job API unit tests' harness (tests/unit/test_jobservice*.c), header-only like
 * test_jobservice_fake.h, which it builds on.
 *
 * A fake executor (the job hooks: validate, start, cancel) whose behaviour each test sets in
 * H (what validate answers, what start does to the job: nothing, RUNNING, DONE, or a failure
 * after the fact, and whether cancel is synchronous), setup/teardown that create the job
 * service with those hooks on the fake transport and check its invariants at the end, and
 * builders for the requests most tests send (prepare a one-transform pipeline, run, get the
 * state, cancel, get the metrics).
 *
 * The tests are split by concern, one binary each:
 *   test_jobservice.c          Prepare/Run/GetState/Cancel flows, validation, unknown ids,
 *                              state rules, the job history bound and time to live
 *   test_jobservice_streams.c  GetStateStream and GetMessageStream: order, replay bound,
 *                              clients that leave or never read
 *   test_jobservice_options.c  GetJobs, GetPipeline, DescribePipelineOptions, pipeline
 *                              options, several jobs, the executor's user pointer
 *   test_jobservice_limits.c   out-of-memory loops, Prepare's limits, planning in background
 *   test_jobservice_artifacts.c  artifact staging and retrieval (its own fixture)
 */
#ifndef SD_TESTS_UNIT_TEST_JOBSERVICE_HARNESS_H
#define SD_TESTS_UNIT_TEST_JOBSERVICE_HARNESS_H

#include "test_jobservice_fake.h"

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
    int drain_calls;
    sd_job *last_job;
} hooks_state;

static hooks_state H;

static inline sd_status h_validate(void *ctx,
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

static inline sd_status h_start(void *ctx, sd_job *job, sd_err *err)
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

static inline void h_cancel(void *ctx, sd_job *job)
{
    (void)ctx;
    H.cancel_calls++;
    if (H.cancel_sync) {
        sd_job_set_state(job, SD_JOB_CANCELLED);
    }
}

static inline void h_drain(void *ctx, sd_job *job)
{
    (void)ctx;
    H.drain_calls++;
    assert_int_equal(sd_job_state_get(job), SD_JOB_DRAINING);
}

static inline int setup(void **state)
{
    (void)state;
    memset(&H, 0, sizeof(H));
    H.action = START_RUNNING;
    sd_job_hooks hooks = {
        .validate = h_validate, .start = h_start, .cancel = h_cancel, .drain = h_drain
    };
    sd_jobsvc *svc = NULL;
    sd_err err = { 0 };
    assert_int_equal(sd_jobsvc_create(NULL, &hooks, NULL, &svc, &err), SD_OK);
    fake_install(svc);
    return 0;
}

static inline int teardown(void **state)
{
    (void)state;
    check_invariants();
    sd_jobsvc_destroy(F.svc);
    F.svc = NULL;
    return 0;
}

static const tdep NO_ENVS[1][MAX_TDEPS] = { { { NULL, NULL, NULL } } };

/* ---------------------------------------------------------------- request builders */

static inline char *prepare_simple(const char *name)
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

static inline Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *get_state(const char *id)
{
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__GetJobStateRequest,
            PBJ(get_job_state_request__init), id);
    return unary_ok(SD__JS_GET_STATE, &req.base, &PBJ(job_state_event__descriptor));
}

static inline int state_of(const char *id)
{
    Org__Apache__Beam__Model__JobManagement__V1__JobStateEvent *ev = get_state(id);
    int s = (int)ev->state;
    pb_free(ev);
    return s;
}

static inline char *run_ok(const char *id)
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

static inline int cancel(const char *id)
{
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__CancelJobRequest,
            PBJ(cancel_job_request__init), id);
    Org__Apache__Beam__Model__JobManagement__V1__CancelJobResponse *r =
        unary_ok(SD__JS_CANCEL, &req.base, &PBJ(cancel_job_response__descriptor));
    int s = (int)r->state;
    pb_free(r);
    return s;
}

static inline Org__Apache__Beam__Model__JobManagement__V1__DrainJobRequest drain_req(const char *id)
{
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__DrainJobRequest,
            PBJ(drain_job_request__init), id);
    return req;
}

static inline int drain(const char *id)
{
    Org__Apache__Beam__Model__JobManagement__V1__DrainJobRequest req = drain_req(id);
    Org__Apache__Beam__Model__JobManagement__V1__DrainJobResponse *r =
        unary_ok(SD__JS_DRAIN, &req.base, &PBJ(drain_job_response__descriptor));
    int s = (int)r->state;
    pb_free(r);
    return s;
}

static inline Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsResponse *
get_metrics(const char *id)
{
    JOB_REQ(req, Org__Apache__Beam__Model__JobManagement__V1__GetJobMetricsRequest,
            PBJ(get_job_metrics_request__init), id);
    return unary_ok(SD__JS_GET_JOB_METRICS, &req.base, &PBJ(get_job_metrics_response__descriptor));
}

#endif
