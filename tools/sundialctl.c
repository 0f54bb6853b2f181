/*
 * sundialctl: a command-line client for a Sundial (or any Beam) job server.
 *
 *   sundialctl [--endpoint HOST:PORT] jobs
 *   sundialctl [--endpoint HOST:PORT] state JOB
 *   sundialctl [--endpoint HOST:PORT] messages JOB      (history, then follows until the end)
 *   sundialctl [--endpoint HOST:PORT] metrics JOB       (watermarks, clock, counters)
 *   sundialctl [--endpoint HOST:PORT] watch JOB         (the same, once a second, until it ends)
 *   sundialctl [--endpoint HOST:PORT] cancel JOB
 *   sundialctl [--endpoint HOST:PORT] drain JOB
 *   sundialctl [--endpoint HOST:PORT] trace JOB [--stage S] [--kind K]   (sundialctl_trace.c)
 *   sundialctl [--endpoint HOST:PORT] trace --diff A B [--control]
 *   sundialctl [--web URL] pause|step|resume|inspect|timers|user-state|elements JOB ...
 *                                     (a test-mode job's gate, over HTTP: sundialctl_pause.c)
 *   sundialctl --version | --help
 *
 * Flags are parsed by getopt_long, as in `sundial` and the C SDK's examples: a value follows
 * its flag as the next word or after '=' (--endpoint HOST:PORT, --endpoint=HOST:PORT), and
 * flags may come before or after the command.
 * The endpoint defaults to $SUNDIAL_ENDPOINT, else 127.0.0.1:8099. Watermarks and the job
 * clock come from GetJobMetrics.attempted (Sundial's runner metrics), shown per stage as
 * readable times; "-inf"/"+inf" stand for Beam's minimum and maximum timestamps.
 *
 * Each command is one request (messages: one server stream) driven to completion on a private
 * libev loop. Exit status: 0 on success, 1 when the server answered with an error (printed),
 * 2 on usage errors (an unknown command, a missing job id, extra arguments).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "org/apache/beam/model/job_management/v1/beam_job_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/metrics.pb-c.h"
#include "runner/base/buf.h"
#include "runner/base/time.h"
#include "runner/transport/rpc.h"

#define JM(x)              Org__Apache__Beam__Model__JobManagement__V1__##x
#define SUNDIALCTL_VERSION SD_PROJECT_VERSION /* the same as `sundial version` (CMake) */
#define JOB_PATH(m)        "/org.apache.beam.model.job_management.v1.JobService/" m

int sundialctl_pause_main(const char *web, int argc, char **argv); /* sundialctl_pause.c */

typedef struct call_state {
    struct ev_loop *loop;
    bool done;
    sd_rpc_code code;
    char message[1024];
    sd_buf response;
    int n_stream;
} call_state;

static void unary_done(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    call_state *cs = ctx;
    cs->code = code;
    snprintf(cs->message, sizeof(cs->message), "%s", message);
    if (sd_buf_append_bytes(&cs->response, response) != SD_OK) {
        cs->code = SD_RPC_RESOURCE_EXHAUSTED;
    }
    cs->done = true;
}

/* One unary call, run to completion. Returns 0 and fills cs->response, or 1 after printing. */
static int unary(sd_rpc *rpc,
                 sd_rpc_channel *ch,
                 const char *path,
                 const ProtobufCMessage *req,
                 call_state *cs)
{
    sd_buf packed;
    sd_err err = { 0 };
    size_t n = protobuf_c_message_get_packed_size(req);
    sd_buf_init(&packed, 0);
    if (sd_buf_reserve(&packed, n) != SD_OK) {
        return 1;
    }
    protobuf_c_message_pack(req, packed.data);
    packed.len = n;
    if (sd_rpc_unary(ch, path, sd_buf_bytes(&packed), NULL, 0, 30000, unary_done, cs, &err) !=
        SD_OK) {
        fprintf(stderr, "sundialctl: %s\n", sd_err_msg(&err));
        sd_buf_deinit(&packed);
        return 1;
    }
    sd_buf_deinit(&packed);
    while (!cs->done) {
        ev_run(sd_rpc_loop(rpc), EVRUN_ONCE);
    }
    if (cs->code != SD_RPC_OK) {
        fprintf(stderr, "sundialctl: %s failed: %s (gRPC code %d)\n", strrchr(path, '/') + 1,
                cs->message, (int)cs->code);
        return 1;
    }
    return 0;
}

static const char *state_name(int s)
{
    static const char *names[] = { "UNSPECIFIED", "STOPPED",   "RUNNING",    "DONE",
                                   "FAILED",      "CANCELLED", "UPDATED",    "DRAINING",
                                   "DRAINED",     "STARTING",  "CANCELLING", "UPDATING" };
    return s >= 0 && s < (int)(sizeof(names) / sizeof(names[0])) ? names[s] : "?";
}

/* A time with its raw milliseconds, except for the bounds (sd_time_format). */
static void fmt_time(sd_time t, char *out, size_t n)
{
    char text[48];
    sd_time_format(t, text, sizeof(text));
    if (t <= SD_TIME_MIN || t >= SD_TIME_GLOBAL_MAX) {
        snprintf(out, n, "%s", text);
    } else {
        snprintf(out, n, "%s (%lld)", text, (long long)t);
    }
}

static int cmd_jobs(sd_rpc *rpc, sd_rpc_channel *ch)
{
    JM(GetJobsRequest) req = ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__GET_JOBS_REQUEST__INIT;
    call_state cs = { 0 };
    sd_buf_init(&cs.response, 0);
    if (unary(rpc, ch, JOB_PATH("GetJobs"), &req.base, &cs) != 0) {
        return 1;
    }
    JM(GetJobsResponse) *resp =
        org__apache__beam__model__job_management__v1__get_jobs_response__unpack(
            NULL, cs.response.len, cs.response.data);
    if (resp == NULL) {
        fprintf(stderr, "sundialctl: malformed GetJobsResponse\n");
        return 1;
    }
    printf("%-12s %-11s %s\n", "JOB", "STATE", "NAME");
    for (size_t i = 0; i < resp->n_job_info; i++) {
        printf("%-12s %-11s %s\n", resp->job_info[i]->job_id, state_name(resp->job_info[i]->state),
               resp->job_info[i]->job_name);
    }
    org__apache__beam__model__job_management__v1__get_jobs_response__free_unpacked(resp, NULL);
    sd_buf_deinit(&cs.response);
    return 0;
}

/* The job's state number into *out; 0 on success, 1 with a message printed. */
static int get_state(sd_rpc *rpc, sd_rpc_channel *ch, const char *job, int *out)
{
    JM(GetJobStateRequest)
    req = ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__GET_JOB_STATE_REQUEST__INIT;
    call_state cs = { 0 };
    req.job_id = (char *)job;
    sd_buf_init(&cs.response, 0);
    if (unary(rpc, ch, JOB_PATH("GetState"), &req.base, &cs) != 0) {
        return 1;
    }
    JM(JobStateEvent) *ev = org__apache__beam__model__job_management__v1__job_state_event__unpack(
        NULL, cs.response.len, cs.response.data);
    sd_buf_deinit(&cs.response);
    if (ev == NULL) {
        fprintf(stderr, "sundialctl: malformed JobStateEvent\n");
        return 1;
    }
    *out = (int)ev->state;
    org__apache__beam__model__job_management__v1__job_state_event__free_unpacked(ev, NULL);
    return 0;
}

static int cmd_state(sd_rpc *rpc, sd_rpc_channel *ch, const char *job)
{
    int state = 0;
    if (get_state(rpc, ch, job, &state) != 0) {
        return 1;
    }
    printf("%s %s\n", job, state_name(state));
    return 0;
}

static int cmd_metrics(sd_rpc *rpc, sd_rpc_channel *ch, const char *job);

/*
 * watch JOB: the job's state, stage watermarks, clock and counters once a second until the
 * job ends. On a terminal the screen is redrawn in place; piped, each refresh is appended
 * under a "=== TIME JOB STATE" line. Exit status 0 when the job ended DONE, 1 otherwise.
 */
static int cmd_watch(sd_rpc *rpc, sd_rpc_channel *ch, const char *job)
{
    bool tty = isatty(STDOUT_FILENO) != 0;
    for (;;) {
        int state = 0;
        if (get_state(rpc, ch, job, &state) != 0) {
            return 1;
        }
        char now[64];
        time_t t = time(NULL);
        struct tm tm;
        if (gmtime_r(&t, &tm) == NULL ||
            strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
            snprintf(now, sizeof(now), "%lld", (long long)t);
        }
        if (tty) {
            printf("\033[H\033[2J");
        }
        printf("=== %s %s %s\n", now, job, state_name(state));
        if (cmd_metrics(rpc, ch, job) != 0) {
            return 1;
        }
        fflush(stdout);
        /* Terminal states: DONE 3, FAILED 4, CANCELLED 5, UPDATED 6, DRAINED 8. */
        if (state == 3 || state == 4 || state == 5 || state == 6 || state == 8) {
            return state == 3 ? 0 : 1;
        }
        struct timespec ts = { 1, 0 };
        nanosleep(&ts, NULL);
    }
}

/* Cancel, or Drain: both answer with the job's state afterwards, which is printed. */
static int cmd_stop(sd_rpc *rpc, sd_rpc_channel *ch, const char *job, bool drain)
{
    JM(CancelJobRequest)
    creq = ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__CANCEL_JOB_REQUEST__INIT;
    JM(DrainJobRequest)
    dreq = ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__DRAIN_JOB_REQUEST__INIT;
    call_state cs = { 0 };
    creq.job_id = dreq.job_id = (char *)job;
    sd_buf_init(&cs.response, 0);
    if (unary(rpc, ch, drain ? JOB_PATH("Drain") : JOB_PATH("Cancel"),
              drain ? &dreq.base : &creq.base, &cs) != 0) {
        return 1;
    }
    int state = -1;
    if (drain) {
        JM(DrainJobResponse) *r =
            org__apache__beam__model__job_management__v1__drain_job_response__unpack(
                NULL, cs.response.len, cs.response.data);
        if (r != NULL) {
            state = (int)r->state;
            org__apache__beam__model__job_management__v1__drain_job_response__free_unpacked(r,
                                                                                            NULL);
        }
    } else {
        JM(CancelJobResponse) *r =
            org__apache__beam__model__job_management__v1__cancel_job_response__unpack(
                NULL, cs.response.len, cs.response.data);
        if (r != NULL) {
            state = (int)r->state;
            org__apache__beam__model__job_management__v1__cancel_job_response__free_unpacked(r,
                                                                                             NULL);
        }
    }
    sd_buf_deinit(&cs.response);
    if (state < 0) {
        fprintf(stderr, "sundialctl: malformed %s\n",
                drain ? "DrainJobResponse" : "CancelJobResponse");
        return 1;
    }
    printf("%s %s\n", job, state_name(state));
    return 0;
}

static const char *label(const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *mi,
                         const char *key)
{
    for (size_t i = 0; i < mi->n_labels; i++) {
        if (strcmp(mi->labels[i]->key, key) == 0) {
            return mi->labels[i]->value;
        }
    }
    return "";
}

/* Two varints (latest_int64: wall ms, value) or one (sum_int64). */
static bool varints(ProtobufCBinaryData p, int64_t *a, int64_t *b)
{
    sd_reader r = sd_reader_make(sd_bytes_make(p.data, p.len));
    uint64_t x = 0, y = 0;
    if (sd_reader_varint(&r, &x) != SD_OK) {
        return false;
    }
    *a = (int64_t)x;
    if (b != NULL) {
        if (sd_reader_varint(&r, &y) != SD_OK) {
            return false;
        }
        *b = (int64_t)y;
    }
    return true;
}

/* The attempted metric of urn for PCollection id, or NULL. */
static const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *
find_pcoll_metric(const JM(MetricResults) * m, const char *urn, const char *id)
{
    for (size_t i = 0; i < m->n_attempted; i++) {
        if (strcmp(m->attempted[i]->urn, urn) == 0 &&
            strcmp(label(m->attempted[i], "PCOLLECTION"), id) == 0) {
            return m->attempted[i];
        }
    }
    return NULL;
}

/*
 * Progress per PCollection the runner sees, while the job runs: elements and bytes so far
 * (Sundial's attempted element_count and sampled_byte_size), with the user's name for it.
 */
static void print_pcollections(const JM(MetricResults) * m)
{
    bool header = false;
    for (size_t i = 0; i < m->n_attempted; i++) {
        const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *mi = m->attempted[i];
        int64_t n;
        if (strcmp(mi->urn, "beam:metric:element_count:v1") != 0 ||
            !varints(mi->payload, &n, NULL)) {
            continue;
        }
        const char *id = label(mi, "PCOLLECTION");
        int64_t count = 0, bytes = 0;
        const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *size =
            find_pcoll_metric(m, "beam:metric:sampled_byte_size:v1", id);
        if (size == NULL || !varints(size->payload, &count, &bytes)) {
            bytes = -1;
        }
        if (!header) {
            printf("%-24s %12s %14s  %s\n", "PCOLLECTION", "ELEMENTS", "BYTES", "NAME");
            header = true;
        }
        char b[32];
        if (bytes < 0) {
            snprintf(b, sizeof(b), "?");
        } else {
            snprintf(b, sizeof(b), "%lld", (long long)bytes);
        }
        printf("%-24s %12lld %14s  %s\n", id, (long long)n, b, label(mi, "SUNDIAL_NAME"));
    }
}

/*
 * The SDK's counters (committed: what the workers reported for their bundles), summed per
 * metric and label set, one line each: URN, then its PTRANSFORM or PCOLLECTION and NAME.
 */
static void print_committed(const JM(MetricResults) * m)
{
    printf("committed metrics: %zu\n", m->n_committed);
    bool *done = calloc(m->n_committed + 1, sizeof(bool));
    if (done == NULL) {
        return;
    }
    for (size_t i = 0; i < m->n_committed; i++) {
        const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *mi = m->committed[i];
        int64_t v, total = 0;
        if (done[i] || strcmp(mi->type, "beam:metrics:sum_int64:v1") != 0) {
            continue;
        }
        const char *where = label(mi, "PTRANSFORM");
        if (where[0] == '\0') {
            where = label(mi, "SUNDIAL_STAGE"); /* the runner's own counters */
        }
        const char *pcoll = label(mi, "PCOLLECTION");
        const char *name = label(mi, "NAME");
        size_t reports = 0;
        for (size_t k = i; k < m->n_committed; k++) {
            const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *o = m->committed[k];
            if (!done[k] && strcmp(o->urn, mi->urn) == 0 && strcmp(o->type, mi->type) == 0 &&
                (strcmp(label(o, "PTRANSFORM"), where) == 0 ||
                 strcmp(label(o, "SUNDIAL_STAGE"), where) == 0) &&
                strcmp(label(o, "PCOLLECTION"), pcoll) == 0 &&
                strcmp(label(o, "NAME"), name) == 0 && varints(o->payload, &v, NULL)) {
                total += v;
                reports++;
                done[k] = true;
            }
        }
        if (reports > 0) {
            printf("  %s %s%s%s%s = %lld\n", mi->urn, where, pcoll, name[0] ? " " : "", name,
                   (long long)total);
        }
    }
    free(done);
}

static int cmd_metrics(sd_rpc *rpc, sd_rpc_channel *ch, const char *job)
{
    JM(GetJobMetricsRequest)
    req = ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__GET_JOB_METRICS_REQUEST__INIT;
    call_state cs = { 0 };
    char t1[96], t2[96];
    req.job_id = (char *)job;
    sd_buf_init(&cs.response, 0);
    if (unary(rpc, ch, JOB_PATH("GetJobMetrics"), &req.base, &cs) != 0) {
        return 1;
    }
    JM(GetJobMetricsResponse) *resp =
        org__apache__beam__model__job_management__v1__get_job_metrics_response__unpack(
            NULL, cs.response.len, cs.response.data);
    if (resp == NULL || resp->metrics == NULL) {
        fprintf(stderr, "sundialctl: malformed GetJobMetricsResponse\n");
        return 1;
    }
    const JM(MetricResults) *m = resp->metrics;
    /* Watermarks: pair input/output per stage, in the order the server lists them. */
    printf("%-12s %-44s %-44s %s\n", "STAGE", "INPUT WATERMARK", "OUTPUT WATERMARK", "NAME");
    for (size_t i = 0; i < m->n_attempted; i++) {
        const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *in = m->attempted[i];
        int64_t at, wm_in, wm_out = 0;
        if (strcmp(in->urn, "beam:metric:sundial:input_watermark:v1") != 0 ||
            !varints(in->payload, &at, &wm_in)) {
            continue;
        }
        const char *stage = label(in, "SUNDIAL_STAGE");
        for (size_t k = 0; k < m->n_attempted; k++) {
            const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *out = m->attempted[k];
            if (strcmp(out->urn, "beam:metric:sundial:output_watermark:v1") == 0 &&
                strcmp(label(out, "SUNDIAL_STAGE"), stage) == 0) {
                varints(out->payload, &at, &wm_out);
            }
        }
        fmt_time(wm_in, t1, sizeof(t1));
        fmt_time(wm_out, t2, sizeof(t2));
        printf("%-12s %-44s %-44s %s\n", stage, t1, t2, label(in, "SUNDIAL_NAME"));
    }
    for (size_t i = 0; i < m->n_attempted; i++) {
        int64_t at, clock;
        if (strcmp(m->attempted[i]->urn, "beam:metric:sundial:clock:v1") == 0 &&
            varints(m->attempted[i]->payload, &at, &clock)) {
            fmt_time(clock, t1, sizeof(t1));
            printf("job clock: %s\n", t1);
        }
    }
    /* Partitioned sources' watermarks (the latest each source reported). */
    for (size_t i = 0; i < m->n_attempted; i++) {
        const Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo *pw = m->attempted[i];
        int64_t at, wm;
        if (strcmp(pw->urn, "beam:metric:sundial:partition_watermark:v1") == 0 &&
            varints(pw->payload, &at, &wm)) {
            fmt_time(wm, t1, sizeof(t1));
            printf("partition %s %s %s\n", label(pw, "PTRANSFORM"), label(pw, "SUNDIAL_PARTITION"),
                   t1);
        }
    }
    print_pcollections(m);
    print_committed(m);
    org__apache__beam__model__job_management__v1__get_job_metrics_response__free_unpacked(resp,
                                                                                          NULL);
    sd_buf_deinit(&cs.response);
    return 0;
}

static void msg_on_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    call_state *cs = ctx;
    (void)s;
    JM(JobMessagesResponse) *r =
        org__apache__beam__model__job_management__v1__job_messages_response__unpack(NULL, msg.len,
                                                                                    msg.ptr);
    if (r == NULL) {
        return;
    }
    if (r->response_case ==
            ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_RESPONSE__RESPONSE_MESSAGE_RESPONSE &&
        r->message_response != NULL) {
        printf("%s %s\n", r->message_response->time, r->message_response->message_text);
    } else if (r->state_response != NULL) {
        printf("state %s\n", state_name(r->state_response->state));
    }
    fflush(stdout);
    cs->n_stream++;
    org__apache__beam__model__job_management__v1__job_messages_response__free_unpacked(r, NULL);
}

static void msg_on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    call_state *cs = ctx;
    (void)s;
    cs->code = code;
    snprintf(cs->message, sizeof(cs->message), "%s", message);
    cs->done = true;
}

static int cmd_messages(sd_rpc *rpc, sd_rpc_channel *ch, const char *job)
{
    JM(JobMessagesRequest)
    req = ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_REQUEST__INIT;
    call_state cs = { 0 };
    sd_rpc_stream_handler h = { msg_on_message, msg_on_close, &cs };
    sd_rpc_stream *s = NULL;
    sd_err err = { 0 };
    sd_buf packed;
    req.job_id = (char *)job;
    sd_buf_init(&packed, 0);
    size_t n = protobuf_c_message_get_packed_size(&req.base);
    if (sd_buf_reserve(&packed, n) != SD_OK) {
        return 1;
    }
    protobuf_c_message_pack(&req.base, packed.data);
    packed.len = n;
    if (sd_rpc_stream_open(ch, JOB_PATH("GetMessageStream"), NULL, 0, &h, &s, &err) != SD_OK ||
        sd_rpc_stream_send(s, sd_buf_bytes(&packed)) != SD_OK) {
        fprintf(stderr, "sundialctl: %s\n", sd_err_msg(&err));
        sd_buf_deinit(&packed);
        return 1;
    }
    sd_rpc_stream_half_close(s);
    sd_buf_deinit(&packed);
    while (!cs.done) {
        ev_run(sd_rpc_loop(rpc), EVRUN_ONCE);
    }
    if (cs.code != SD_RPC_OK) {
        fprintf(stderr, "sundialctl: GetMessageStream failed: %s (gRPC code %d)\n", cs.message,
                (int)cs.code);
        return 1;
    }
    return 0;
}

int sundialctl_trace(sd_rpc *rpc, sd_rpc_channel *ch, int argc, char **argv);

/* `trace` has options of its own (sundialctl_trace.c); the same loop and channel. */
static int run_trace(const char *endpoint, int argc, char **argv)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    sd_rpc *rpc = NULL;
    sd_rpc_channel *ch = NULL;
    sd_err err = { 0 };
    int rc = 2;
    if (loop == NULL || sd_rpc_create(loop, &rpc, &err) != SD_OK ||
        sd_rpc_channel_create(rpc, endpoint, &ch, &err) != SD_OK) {
        fprintf(stderr, "sundialctl: %s\n", sd_err_msg(&err));
    } else {
        rc = sundialctl_trace(rpc, ch, argc, argv);
    }
    sd_rpc_channel_destroy(ch);
    if (rpc != NULL) {
        for (int k = 0; k < 10; k++) {
            ev_run(loop, EVRUN_NOWAIT);
        }
        sd_rpc_destroy(rpc);
    }
    if (loop != NULL) {
        ev_loop_destroy(loop);
    }
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sundialctl [--endpoint HOST:PORT] COMMAND\n"
               "  jobs               list jobs and their states\n"
               "  state JOB          the job's state\n"
               "  messages JOB       the job's messages and state changes, until it ends\n"
               "  metrics JOB        stage watermarks, the job clock, counters\n"
               "  watch JOB          state, watermarks and counters once a second until it ends\n"
               "  cancel JOB         cancel a job\n"
               "  drain JOB          drain a job: stop its sources, finish what was read\n"
               "  trace JOB [--stage S] [--kind K[,K...]]\n"
               "                     the job's time trace: a table on a terminal, JSON lines\n"
               "                     when piped\n"
               "  trace --diff A B [--control]\n"
               "                     compare two traces (job ids or saved JSON-lines files),\n"
               "                     wall times left out, and pause and step records unless\n"
               "                     --control: exit 0 identical, 1 different\n"
               "  pause JOB [--at TIME | --before-event]     pause a test-mode job (web UI API)\n"
               "  step JOB [--events N | --for DURATION | --watermark TIME --pcollection P]\n"
               "  resume JOB         let a paused job run on\n"
               "  inspect JOB        the gate, the job clock, each stage's watermarks and holds\n"
               "  timers JOB [--stage S]                     the stored timers\n"
               "  user-state JOB --stage S [--key K | --key-hex HEX]   committed user state\n"
               "  elements JOB --pcollection P               what reached P so far\n"
               "  version            print the version (also --version)\n"
               "The endpoint defaults to $SUNDIAL_ENDPOINT, else 127.0.0.1:8099. A flag's value\n"
               "follows it or an '=' (--endpoint HOST:PORT or --endpoint=HOST:PORT). The pause\n"
               "commands talk to the web UI: --web URL (before the command), else $SUNDIAL_WEB,\n"
               "else http://127.0.0.1:8074/.\n");
}

enum { OPT_ENDPOINT = 256, OPT_VERSION, OPT_HELP, OPT_WEB };

/*
 * Parse the flags (getopt_long: before or after the command). Returns -1 to go on with
 * argv[optind..] as the command and its arguments, else the exit status (0 after --help or
 * --version, 2 after a bad flag, which getopt named on stderr before the usage).
 */
static int parse_flags(int argc, char **argv, const char **endpoint)
{
    /* `trace` reads its own flags (--stage, --kind, --diff): for it, the flags end at the
     * command word ("+": getopt stops at the first word that is not a flag). */
    bool trace = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--endpoint") == 0) {
            i++;
        } else if (argv[i][0] != '-') {
            trace = strcmp(argv[i], "trace") == 0;
            break;
        }
    }
    static const struct option flags[] = {
        { "endpoint", required_argument, NULL, OPT_ENDPOINT },
        { "version", no_argument, NULL, OPT_VERSION },
        { "help", no_argument, NULL, OPT_HELP },
        { "web", required_argument, NULL, OPT_WEB }, /* only the pause commands use it */
        { NULL, 0, NULL, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, trace ? "+h" : "h", flags, NULL)) != -1) {
        switch (c) {
        case OPT_ENDPOINT:
            *endpoint = optarg;
            break;
        case OPT_WEB:
            break;
        case OPT_VERSION:
            printf("sundialctl %s\n", SUNDIALCTL_VERSION);
            return 0;
        case 'h':
        case OPT_HELP:
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

/* A pause command (sundialctl_pause.c) after the leading --web/--endpoint flags: its flags
 * after the job are its own, so it is found before getopt would read them. OUT: web. */
static int pause_command(int argc, char **argv, const char **web)
{
    static const char *const cmds[] = { "pause",  "step",       "resume",  "inspect",
                                        "timers", "user-state", "elements" };
    int k = 1;
    while (k < argc && strncmp(argv[k], "--", 2) == 0) {
        bool web_flag = strcmp(argv[k], "--web") == 0;
        if (strncmp(argv[k], "--web=", 6) == 0) {
            *web = argv[k] + 6;
        } else if (web_flag && k + 1 < argc) {
            *web = argv[k + 1];
        }
        k += strchr(argv[k], '=') == NULL && k + 1 < argc &&
                     (web_flag || strcmp(argv[k], "--endpoint") == 0)
                 ? 2
                 : 1;
    }
    for (size_t c = 0; k < argc && c < sizeof(cmds) / sizeof(cmds[0]); c++) {
        if (strcmp(argv[k], cmds[c]) == 0) {
            return k;
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    const char *endpoint = getenv("SUNDIAL_ENDPOINT");
    const char *web = getenv("SUNDIAL_WEB");
    if (endpoint == NULL || endpoint[0] == '\0') {
        endpoint = "127.0.0.1:8099";
    }
    if (web == NULL || web[0] == '\0') {
        web = "http://127.0.0.1:8074/";
    }
    int pc = pause_command(argc, argv, &web);
    if (pc > 0) {
        return sundialctl_pause_main(web, argc - pc, argv + pc);
    }
    int done = parse_flags(argc, argv, &endpoint);
    if (done >= 0) {
        return done;
    }
    int i = optind;
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[i];
    const char *job = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "version") == 0) {
        printf("sundialctl %s\n", SUNDIALCTL_VERSION);
        return 0;
    }
    if (strcmp(cmd, "trace") == 0) {
        return run_trace(endpoint, argc - i, argv + i);
    }
    bool needs_job = strcmp(cmd, "jobs") != 0;
    if (strcmp(cmd, "jobs") != 0 && strcmp(cmd, "state") != 0 && strcmp(cmd, "messages") != 0 &&
        strcmp(cmd, "metrics") != 0 && strcmp(cmd, "cancel") != 0 && strcmp(cmd, "drain") != 0 &&
        strcmp(cmd, "watch") != 0) {
        fprintf(stderr, "sundialctl: unknown command \"%s\"\n", cmd);
        usage(stderr);
        return 2;
    }
    if (needs_job && job == NULL) {
        fprintf(stderr, "sundialctl: %s expects a job id\n", cmd);
        return 2;
    }
    int n_args = needs_job ? 2 : 1;
    if (i + n_args < argc) {
        fprintf(stderr, "sundialctl: unexpected argument \"%s\" after %s\n", argv[i + n_args], cmd);
        return 2;
    }

    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    sd_rpc *rpc = NULL;
    sd_rpc_channel *ch = NULL;
    sd_err err = { 0 };
    int rc = 1;
    if (loop == NULL || sd_rpc_create(loop, &rpc, &err) != SD_OK ||
        sd_rpc_channel_create(rpc, endpoint, &ch, &err) != SD_OK) {
        fprintf(stderr, "sundialctl: %s\n", sd_err_msg(&err));
    } else if (strcmp(cmd, "jobs") == 0) {
        rc = cmd_jobs(rpc, ch);
    } else if (strcmp(cmd, "state") == 0) {
        rc = cmd_state(rpc, ch, job);
    } else if (strcmp(cmd, "messages") == 0) {
        rc = cmd_messages(rpc, ch, job);
    } else if (strcmp(cmd, "metrics") == 0) {
        rc = cmd_metrics(rpc, ch, job);
    } else if (strcmp(cmd, "watch") == 0) {
        rc = cmd_watch(rpc, ch, job);
    } else {
        rc = cmd_stop(rpc, ch, job, strcmp(cmd, "drain") == 0);
    }
    sd_rpc_channel_destroy(ch);
    if (rpc != NULL) {
        /* Let the channel's teardown callbacks run before the hub goes. */
        for (int k = 0; k < 10; k++) {
            ev_run(loop, EVRUN_NOWAIT);
        }
        sd_rpc_destroy(rpc);
    }
    if (loop != NULL) {
        ev_loop_destroy(loop);
    }
    return rc;
}
