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
 * The binary is split by concern (see robust.h for the map): the harness and the fake worker
 * in robust_harness.c and robust_fake.c, part 1 in test_robust_jobapi.c, part 2 in
 * test_robust_workers.c, and here the last part (the Fn API refuses what no worker of a job
 * may do, and the runner still serves after everything) and main().
 *
 * Callbacks never call cmocka asserts (a longjmp out of a libev callback would leave the loop
 * inconsistent): they record problems in F.problem, which the test bodies check.
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

/* Open stream `path` with the given metadata (n_md 0: none) and wait for the runner's answer. */
static sd_rpc_code
open_and_wait(const char *path, const sd_rpc_metadata *md, size_t n_md, char *msg, size_t cap)
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
    static const mcase hang = { "isolation: a stalled job", MB_STALL, JSTATE(CANCELLED), { NULL } };
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
    assert_true(resp->n_job_info >= robust_n_cases());
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
