/*
 * Sundial: Job API unit tests: what a client can list and read about jobs (GetJobs,
 * GetPipeline, DescribePipelineOptions, the pipeline options a job carries), several jobs at
 * once, and the executor's user pointer on a job.
 */
#include <math.h>
#include <stdlib.h>

#include "runner/base/bg.h"
#include "test_jobservice_harness.h"
#include "tests/unit/fake_loop.h"

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
    unary_err(SD__JS_DRAIN, &d.base, SD_RPC_NOT_FOUND, "job-001"); /* no such job */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_jobs_and_pipeline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_describe_options_and_drain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_several_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_user_pointer, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
