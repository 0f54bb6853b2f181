/*
 * Sundial: executor: live TestStreams.
 *
 * A TestStreamPayload may name an endpoint instead of listing events: a TestStreamService
 * (Beam's interactive API; Python's TestStreamServiceController serves one) from which the
 * runner pulls the events while the job runs. xplan.c gives such a TestStream an open stream
 * in the driver (sd_ts_driver_set_live); here, once the engine exists, each gets a channel to
 * its service and one Events call: the request names the TestStream's outputs, and every
 * event the service streams back is appended to the stream (teststream/ts_pb.c reads it as it
 * reads a scripted one) and the scheduler is kicked. The engine plays the events at quiescence
 * exactly as scripted ones; while the stream is open and has nothing new, the engine waits
 * (sd_em_waiting) instead of ending the job or calling it stuck. The call's end is the
 * stream's end: OK closes the stream (its outputs go to the end of time once played); any
 * other status — the service went away, refused, or sent something that is not an event —
 * fails the job with a message naming the TestStream and the endpoint.
 *
 * Lifetime: a live record outlives its run when the call is still open as the run ends (the
 * run cancels it and forgets it; the call's close callback frees it).
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/exec/exec_int.h"
#include "teststream/ts_pb.h"

#define SD_PATH_TS_EVENTS "/org.apache.beam.model.interactive.v1.TestStreamService/Events"

struct sd__exec_live {
    sd_exec_run *r; /* NULL once the run is gone */
    char *stage_id;
    char *label; /* for messages: "stage-001 (Clicks)", the user's name when it has one */
    char *url;
    sd_rpc_channel *ch;
    sd_rpc_stream *call;  /* NULL once closed */
    sd_ts_stream *stream; /* borrowed from the driver */
    sd__exec_ts_recoder rc;
    size_t events; /* received so far */
};

static void live_free(sd__exec_live *l)
{
    sd__exec_ts_recoder_deinit(&l->rc);
    sd_free(l->stage_id);
    sd_free(l->label);
    sd_free(l->url);
    sd_free(l);
}

static void on_event(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    sd__exec_live *l = ctx;
    sd_exec_run *r = l->r;
    if (r == NULL || r->finishing) {
        return;
    }
    sd_err err;
    sd_err_clear(&err);
    size_t i = l->events++;
    sd_status st = sd_ts_decode_event(l->stream, msg, i, sd__exec_ts_recode, &l->rc, &err);
    if (st != SD_OK) {
        sd_rpc_stream_cancel(s);
        sd_err_failed(&err, st, "reading the event");
        sd__exec_run_fail(r, "TestStream %s: event %zu from the TestStreamService at %s: %s",
                          l->label, i, l->url, sd_err_msg(&err));
        return;
    }
    SD_DEBUG("exec", "job %s: TestStream %s: live event %zu from %s", r->job_id, l->stage_id, i,
             l->url);
    sd__exec_run_kick(r);
}

static void on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    sd__exec_live *l = ctx;
    sd_exec_run *r = l->r;
    (void)s;
    l->call = NULL;
    if (r == NULL) {
        live_free(l); /* the run is gone: it left the record to this callback */
        return;
    }
    if (r->finishing) {
        return;
    }
    if (code == SD_RPC_OK) {
        sd_err err;
        sd_err_clear(&err);
        SD_INFO("exec",
                "job %s: TestStream %s: the TestStreamService at %s ended the stream "
                "after %zu events",
                r->job_id, l->label, l->url, l->events);
        if (sd_ts_driver_set_live(r->ts_driver, l->stage_id, false, &err) != SD_OK) {
            sd__exec_run_fail(r, "TestStream %s: %s", l->label, sd_err_msg(&err));
            return;
        }
        sd__exec_run_kick(r);
        return;
    }
    if (sd_em_draining(r->em)) {
        return; /* the driver ended the stream already; the call's end no longer matters */
    }
    sd__exec_run_fail(
        r,
        "TestStream %s: the TestStreamService at %s %s before the stream ended "
        "(after %zu events; gRPC status %d: %s)",
        l->label, l->url,
        l->events == 0 && code == SD_RPC_UNAVAILABLE ? "could not be reached" : "went away",
        l->events, (int)code, message != NULL && message[0] != '\0' ? message : "no message");
}

/* Open the Events call of TestStream stage ps, whose payload names url. */
static sd_status live_open(sd_exec_run *r, const sd_plan_stage *ps, char *url, sd_err *err)
{
    sd__exec_live *l = sd_calloc(1, sizeof(*l));
    if (l == NULL) {
        sd_free(url);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    l->url = url;
    l->r = r;
    l->stage_id = sd_strdup(ps->id);
    const char *name = sd__exec_stage_name(r, ps->id);
    l->label = name != NULL ? sd_asprintf("%s (%s)", ps->id, name) : sd_strdup(ps->id);
    l->stream = sd_ts_driver_stream(r->ts_driver, ps->id);
    sd_status st = l->stage_id != NULL && l->label != NULL && l->stream != NULL
                       ? SD_OK
                       : sd_err_set(err, SD_ENOMEM, "out of memory");
    if (st == SD_OK) {
        st = sd__exec_ts_recoder_init(r->plan, ps, &l->rc, err);
    }
    size_t n = ps->n_teststream_outputs;
    const char **tags = sd_calloc(n + 1, sizeof(*tags));
    sd_buf req;
    sd_buf_init(&req, 0);
    if (st == SD_OK && tags == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; st == SD_OK && i < n; i++) {
        tags[i] = ps->teststream_outputs[i].tag;
    }
    if (st == SD_OK) {
        st = sd_ts_encode_events_request(tags, n, &req, err);
    }
    sd_free(tags);
    if (st == SD_OK) {
        st = sd_rpc_channel_create(r->ex->rpc, url, &l->ch, err);
    }
    if (st == SD_OK) {
        sd_rpc_stream_handler h = { .on_message = on_event, .on_close = on_close, .ctx = l };
        st = sd_rpc_stream_open(l->ch, SD_PATH_TS_EVENTS, NULL, 0, &h, &l->call, err);
    }
    if (st == SD_OK) {
        st = sd_rpc_stream_send(l->call, sd_buf_bytes(&req));
        if (st != SD_OK) {
            sd_err_set(err, st, "sending the EventsRequest");
        }
        sd_rpc_stream_half_close(l->call); /* on_close follows either way */
    }
    sd_buf_deinit(&req);
    if (l->call == NULL) {
        if (l->ch != NULL) {
            sd_rpc_channel_destroy(l->ch);
        }
        live_free(l);
    } else if (sd_vec_push(&r->lives, &l) != SD_OK) {
        l->r = NULL; /* on_close frees it */
        sd_rpc_channel_destroy(l->ch);
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (st != SD_OK) {
        sd_err_prefix(err, "TestStream %s (TestStreamService at %s): ", ps->id, url);
    }
    return st;
}

sd_status sd__exec_live_start(sd_exec_run *r, sd_err *err)
{
    for (size_t i = 0; i < r->plan->n_stages; i++) {
        const sd_plan_stage *ps = &r->plan->stages[i];
        if (ps->kind != SD_PLAN_STAGE_TESTSTREAM) {
            continue;
        }
        char *url = NULL;
        sd_status st = sd_ts_payload_endpoint(ps->teststream_payload, ps->id, &url, err);
        if (st == SD_OK && url != NULL) {
            SD_INFO("exec",
                    "job %s: TestStream %s reads its events from the TestStreamService "
                    "at %s",
                    r->job_id, ps->id, url);
            st = live_open(r, ps, url, err);
        }
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

void sd__exec_live_stop(sd_exec_run *r)
{
    for (size_t i = 0; i < r->lives.len; i++) {
        sd__exec_live *l = *SD_VEC_AT(&r->lives, sd__exec_live *, i);
        sd_rpc_channel *ch = l->ch;
        if (l->call != NULL) {
            l->r = NULL; /* the cancelled call's close frees it */
            sd_rpc_channel_destroy(ch);
        } else {
            sd_rpc_channel_destroy(ch);
            live_free(l);
        }
    }
    sd_vec_deinit(&r->lives);
}
