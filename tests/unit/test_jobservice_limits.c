/*
 * Sundial: Job API unit tests: limits. Out-of-memory loops over Prepare and the job calls
 * (every failure answers RESOURCE_EXHAUSTED and leaves nothing behind), Prepare's size and
 * transform limits, and Prepare planned on a background pool.
 */
#include <math.h>
#include <stdlib.h>

#include "runner/base/bg.h"
#include "test_jobservice_harness.h"
#include "tests/unit/fake_loop.h"

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
    size_t before = sd__jobsvc_job_history_len(job);
    sd_alloc_fail_after(1, 1);
    sd_job_message(job, SD_JOB_MSG_BASIC, "lost");
    sd_job_fail(job, "failure under OOM");
    sd_alloc_fail_after(0, 0);
    /* The messages were dropped but the state change was not. */
    assert_int_equal(sd_job_state_get(job), SD_JOB_FAILED);
    assert_int_equal(sd__jobsvc_job_history_len(job), before + 1);
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
    assert_int_equal(sd__jobsvc_prepare_count_transforms(sd_bytes_make(bytes, len)), 3);
    assert_int_equal(sd__jobsvc_prepare_count_transforms(sd_bytes_make(bytes, len - 1)), 0);

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
 * ones in progress with UNAVAILABLE and refuses new ones. (A small request is checked inline
 * even with a pool: first that, then every request goes to the pool.)
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

    fcall *c = prepare_raw(bytes, len); /* small: answered at once, on the loop thread */
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_OK);
    call_close(c);
    assert_int_equal(sd_bg_pending(bg), 0);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 1);
    sd__jobsvc_set_inline_bytes(F.svc, 0);

    c = prepare_raw(bytes, len);
    assert_non_null(c->rec);
    assert_false(c->finished);
    fake_run(&l);
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_OK);
    assert_int_equal(c->n_msgs, 1);
    call_close(c);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 2);
    assert_int_equal(H.validate_calls, 2);

    /* The client goes away before the check is done. */
    c = prepare_raw(bytes, len);
    assert_false(c->finished);
    call_close(c);
    fake_run(&l);
    assert_int_equal(sd_jobsvc_job_count(F.svc), 2);

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
    assert_int_equal(sd_jobsvc_job_count(F.svc), 2);
    sd_bg_close(bg);
    fake_loop_deinit(&l);
    free(bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prepare_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_in_background, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_prepare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_job_calls, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
