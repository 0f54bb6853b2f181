/*
 * Sundial: robustness, part 2: misbehaving SDK workers.
 *
 * One row of CASES per misbehaviour runs part 2's pipeline against a fake worker that
 * misbehaves in that one way at pardo1's bundle; the row names the final job state and the
 * words the failure text must contain ("$W" and "$S": the worker id and pardo1's stage id).
 * After every row the runner must have stopped the worker. Two more tests cancel a job whose
 * worker hangs, and run a good job beside a hung one (the good one must not wait for the
 * hang to be detected).
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
    { "descriptors pushed in a RegisterRequest (no fetch)", MB_REGISTERED, JSTATE(DONE), { NULL } },
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
    F.fetches = 0;
    F.registered = 0;
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
    /* Two stages in the worker's environment: pushed only when it declares it takes them. */
    if (why[0] == '\0' && c->mb == MB_REGISTERED && (F.registered != 2 || F.fetches != 0)) {
        snprintf(why, sizeof(why), "%d descriptors pushed (want 2), %d fetched (want 0)",
                 F.registered, F.fetches);
    }
    if (why[0] == '\0' && c->mb == MB_GOOD && (F.registered != 0 || F.fetches != 2)) {
        snprintf(why, sizeof(why), "%d descriptors pushed (want 0), %d fetched (want 2)",
                 F.registered, F.fetches);
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

void test_misbehaving_workers(void **state)
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

/* Start a job whose fake worker hangs at pardo1's bundle; returns its id in prep. */
void start_hung_job(const mcase *mode, char *prep, size_t cap)
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

void cancel_job(const char *prep)
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
void expect_workers_stopped(int starts)
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

/* A client cancels a job whose worker hangs: CANCELLED at once, the worker is stopped. */
void test_cancel_hung_job(void **state)
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
void test_hung_job_beside_a_good_one(void **state)
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

size_t robust_n_cases(void)
{
    return sizeof(CASES) / sizeof(CASES[0]);
}
