/*
 * Sundial: Job API unit tests: the server streams. GetStateStream sends the current state
 * first, then every change in order, and ends OK after the terminal state; GetMessageStream
 * interleaves states and messages; a replay keeps at most SD_JOB_HISTORY_MAX entries; a
 * client that leaves is dropped, and one that never reads is cut off with RESOURCE_EXHAUSTED.
 */
#include <math.h>
#include <stdlib.h>

#include "runner/base/bg.h"
#include "test_jobservice_harness.h"
#include "tests/unit/fake_loop.h"

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
    assert_int_equal(sd__jobsvc_job_history_len(job), SD_JOB_HISTORY_MAX);
    const sd__jobsvc_job_entry *first = sd__jobsvc_job_history_at(job, 0);
    const sd__jobsvc_job_entry *last = sd__jobsvc_job_history_at(job, SD_JOB_HISTORY_MAX - 1);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_state_stream_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_message_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_history_ring_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_client_cancels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_stream_reader, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
