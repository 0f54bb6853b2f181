/*
 * Sundial: robustness, part 1: the Job API probed with requests no real client would send.
 *
 * Malformed protobuf on every method (INVALID_ARGUMENT naming the message type), ids nobody
 * issued (NOT_FOUND naming the id), a pipeline with several unknown URNs, a docker
 * environment and an unknown requirement (one error that lists every problem), and
 * environments that cannot yield a worker (garbage ExternalPayload, a pool nobody listens on,
 * which fail their job naming the environment; a missing PROCESS boot command, refused at
 * Prepare; a worker that dies at once, whose stderr the job's error carries).
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

/* ================================================================ part 1: Job API probes */

/* Bytes that are no protobuf message: field 1, length 127, but only two bytes follow. */
static const uint8_t MALFORMED[] = { 0x0a, 0x7f, 0x41, 0x42 };

void check_contains(const char *what, const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL) {
        fail_msg("%s: \"%s\" does not mention \"%s\"", what, text, needle);
    }
}

void test_malformed_requests(void **state)
{
    (void)state;

    static const struct {
        const char *path;
        sd_rpc_kind kind;
        const char *type; /* the message type the error must name */
    } rows[] = {
        { JS "Prepare", SD_RPC_KIND_UNARY, "PrepareJobRequest" },
        { JS "Run", SD_RPC_KIND_UNARY, "RunJobRequest" },
        { JS "GetJobs", SD_RPC_KIND_UNARY, "GetJobsRequest" },
        { JS "GetState", SD_RPC_KIND_UNARY, "GetJobStateRequest" },
        { JS "GetPipeline", SD_RPC_KIND_UNARY, "GetJobPipelineRequest" },
        { JS "Cancel", SD_RPC_KIND_UNARY, "CancelJobRequest" },
        { JS "Drain", SD_RPC_KIND_UNARY, "DrainJobRequest" },
        { JS "GetJobMetrics", SD_RPC_KIND_UNARY, "GetJobMetricsRequest" },
        { JS "DescribePipelineOptions", SD_RPC_KIND_UNARY, "DescribePipelineOptionsRequest" },
        { JS "GetStateStream", SD_RPC_KIND_SERVER_STREAM, "GetJobStateRequest" },
        { JS "GetMessageStream", SD_RPC_KIND_SERVER_STREAM, "JobMessagesRequest" },
        { ARS "ResolveArtifacts", SD_RPC_KIND_UNARY, "ResolveArtifactsRequest" },
        { ARS "GetArtifact", SD_RPC_KIND_SERVER_STREAM, "GetArtifactRequest" },
        { ASS "ReverseArtifactRetrievalService", SD_RPC_KIND_BIDI, "ArtifactResponseWrapper" },
        { SD_PATH_GET_PBD, SD_RPC_KIND_UNARY, "GetProcessBundleDescriptorRequest" },
        { SD_PATH_PROVISION, SD_RPC_KIND_UNARY, "GetProvisionInfoRequest" },
    };

    sd_bytes bad = sd_bytes_make(MALFORMED, sizeof(MALFORMED));
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_rpc_code code;
        char msg[4096];
        if (rows[i].kind == SD_RPC_KIND_UNARY) {
            reply r;
            unary(rows[i].path, bad, &r);
            code = r.code;
            snprintf(msg, sizeof(msg), "%s", r.msg);
            reply_free(&r);
        } else {
            cstream c;
            stream_call(rows[i].path, &bad, rows[i].kind == SD_RPC_KIND_BIDI, &c, 10.0);
            code = c.code;
            snprintf(msg, sizeof(msg), "%s", c.msg);
            cstream_free(&c);
        }
        printf("  malformed %-60s -> %d \"%s\"\n", rows[i].path, (int)code, msg);
        if (code != SD_RPC_INVALID_ARGUMENT) {
            fail_msg("%s: expected INVALID_ARGUMENT, got %d (%s)", rows[i].path, (int)code, msg);
        }
        check_contains(rows[i].path, msg, rows[i].type);
    }
    assert_string_equal(F.problem, "");
}

void test_unknown_ids(void **state)
{
    (void)state;
    static const char *const id = "robust-job-that-never-was";

    static const struct {
        const char *path;
        sd_rpc_kind kind;
    } rows[] = {
        { JS "Run", SD_RPC_KIND_UNARY },
        { JS "GetState", SD_RPC_KIND_UNARY },
        { JS "GetPipeline", SD_RPC_KIND_UNARY },
        { JS "Cancel", SD_RPC_KIND_UNARY },
        { JS "GetJobMetrics", SD_RPC_KIND_UNARY },
        { JS "GetStateStream", SD_RPC_KIND_SERVER_STREAM },
        { JS "GetMessageStream", SD_RPC_KIND_SERVER_STREAM },
        { ASS "ReverseArtifactRetrievalService", SD_RPC_KIND_BIDI },
        { SD_PATH_GET_PBD, SD_RPC_KIND_UNARY },
    };

    /* Every one of these requests carries the id as string field 1. */
    sd_buf req;
    sd_buf_init(&req, 0);
    assert_int_equal(sd_buf_append_byte(&req, 0x0a), SD_OK);
    assert_int_equal(sd_buf_put_lp(&req, sd_bytes_str(id)), SD_OK);
    sd_bytes bytes = sd_buf_bytes(&req);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_rpc_code code;
        char msg[4096];
        if (rows[i].kind == SD_RPC_KIND_UNARY) {
            reply r;
            unary(rows[i].path, bytes, &r);
            code = r.code;
            snprintf(msg, sizeof(msg), "%s", r.msg);
            reply_free(&r);
        } else {
            cstream c;
            stream_call(rows[i].path, &bytes, rows[i].kind == SD_RPC_KIND_BIDI, &c, 10.0);
            code = c.code;
            snprintf(msg, sizeof(msg), "%s", c.msg);
            assert_int_equal(c.msgs.len, 0);
            cstream_free(&c);
        }
        printf("  unknown id %-60s -> %d \"%s\"\n", rows[i].path, (int)code, msg);
        if (code != SD_RPC_NOT_FOUND) {
            fail_msg("%s: expected NOT_FOUND, got %d (%s)", rows[i].path, (int)code, msg);
        }
        check_contains(rows[i].path, msg, id);
    }
    sd_buf_deinit(&req);

    /* Fn API streams and provisioning for a worker id no job expects. */
    sd_rpc_metadata md = { "worker_id", "robust-worker-nobody-started" };
    reply r;
    unary_md(SD_PATH_PROVISION, SD_BYTES_NULL, &md, 1, &r);
    printf("  unknown worker GetProvisionInfo -> %d \"%s\"\n", (int)r.code, r.msg);
    assert_int_equal(r.code, SD_RPC_NOT_FOUND);
    check_contains("GetProvisionInfo", r.msg, md.value);
    reply_free(&r);
    static const char *const streams[] = { SD_PATH_CONTROL, SD_PATH_DATA, SD_PATH_STATE,
                                           SD_PATH_LOGGING };
    for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        cstream c;
        sd_err err = { 0 };
        sd_rpc_stream *s = NULL;
        sd_rpc_stream_handler h = { cs_on_message, cs_on_close, &c };
        memset(&c, 0, sizeof(c));
        sd_vec_init(&c.msgs, sizeof(sd_buf));
        assert_int_equal(sd_rpc_stream_open(F.ch, streams[i], &md, 1, &h, &s, &err), SD_OK);
        assert_true(wait_for(&c.done, 10.0));
        printf("  unknown worker %-55s -> %d \"%s\"\n", streams[i], (int)c.code, c.msg);
        assert_int_equal(c.code, SD_RPC_NOT_FOUND);
        check_contains(streams[i], c.msg, md.value);
        cstream_free(&c);
    }

    /* A method nobody serves. */
    unary("/org.apache.beam.model.job_management.v1.JobService/Teleport", SD_BYTES_NULL, &r);
    assert_int_equal(r.code, SD_RPC_UNIMPLEMENTED);
    reply_free(&r);
}

void test_prepare_lists_every_problem(void **state)
{
    (void)state;
    plb b;
    pl_init(&b);
    pl_common_coders(&b);
    pl_env(&b, "dock", SD_URN_ENV_DOCKER, (ProtobufCBinaryData){ 0, NULL });
    pl_pcoll(&b, "p_imp", "bytes");
    pl_pcoll(&b, "p_x", "bytes");
    pl_pcoll(&b, "p_y", "bytes");
    pl_pcoll(&b, "p_z", "bytes");
    pl_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NULL, "p_imp", NULL);
    pl_transform(&b, "mystery_a", "beam:transform:robust_mystery_a:v1", "p_imp", "p_x", "dock");
    pl_transform(&b, "mystery_b", "beam:transform:robust_mystery_b:v1", "p_x", "p_y", "dock");
    pl_transform(&b, "mystery_c", "beam:transform:robust_mystery_c:v7", "p_y", "p_z", NULL);
    b.p->requirements[b.p->n_requirements++] = "beam:requirement:robust_mystery:v1";
    reply r;
    prepare(b.p, "robust-unknown-urns", &r, NULL, 0);
    printf("  Prepare(unknown URNs) -> %d \"%s\"\n", (int)r.code, r.msg);
    assert_true(r.code == SD_RPC_UNIMPLEMENTED || r.code == SD_RPC_INVALID_ARGUMENT);
    static const char *const needles[] = {
        "beam:transform:robust_mystery_a:v1", "beam:transform:robust_mystery_b:v1",
        "beam:transform:robust_mystery_c:v7", SD_URN_ENV_DOCKER,
        "beam:requirement:robust_mystery:v1",
    };
    for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++) {
        check_contains("Prepare", r.msg, needles[i]);
    }
    reply_free(&r);
    arena_free(&b.a);

    /* No job was created for it: the next good job is served as usual. */
    pl_init(&b);
    pl_common_coders(&b);
    pl_pcoll(&b, "p_imp", "bytes");
    pl_transform(&b, "impulse", SD_URN_TRANSFORM_IMPULSE, NULL, "p_imp", NULL);
    job_result jr;
    run_job(b.p, "robust-impulse-only", &jr);
    arena_free(&b.a);
    printf("  impulse-only job %s -> state %d\n", jr.job_id, jr.state);
    assert_int_equal(jr.state, JSTATE(DONE));
    assert_string_equal(jr.error, "");
}

/* Environments that cannot produce a worker: the job fails naming the environment. */
void test_environment_failures(void **state)
{
    (void)state;
    static const uint8_t garbage[] = { 0x0a, 0x7f, 0x01 };
    plb b;
    job_result jr;
    reply r;
    char prep[160];

    /* An external environment whose payload is not an ExternalPayload. */
    pl_main_in(&b, SD_URN_ENV_EXTERNAL,
               (ProtobufCBinaryData){ sizeof(garbage), (uint8_t *)garbage });
    prepare(b.p, "robust-bad-external-payload", &r, prep, sizeof(prep));
    printf("  Prepare(external env, garbage payload) -> %d \"%s\"\n", (int)r.code, r.msg);
    if (r.code == SD_RPC_OK) {
        reply_free(&r);
        run_prepared(prep, "robust-bad-external-payload", &jr);
        printf("  [external env, garbage payload] %s -> %d\n      error: %s\n", jr.job_id, jr.state,
               jr.error);
        assert_int_equal(jr.state, JSTATE(FAILED));
        check_contains("bad external payload", jr.error, "fake");
        check_contains("bad external payload", jr.error, "malformed ExternalPayload");
    } else {
        assert_int_equal(r.code, SD_RPC_INVALID_ARGUMENT);
        check_contains("bad external payload", r.msg, "fake");
        reply_free(&r);
    }
    arena_free(&b.a);

    /* A worker pool nobody listens on. */
    {
        pb_ApiServiceDescriptor ep =
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__API_SERVICE_DESCRIPTOR__INIT;
        pb_ExternalPayload xp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__EXTERNAL_PAYLOAD__INIT;
        uint8_t buf[128];
        ep.url = "127.0.0.1:1";
        xp.endpoint = &ep;
        size_t n = protobuf_c_message_pack(&xp.base, buf);
        pl_main_in(&b, SD_URN_ENV_EXTERNAL, (ProtobufCBinaryData){ n, buf });
        run_job(b.p, "robust-no-worker-pool", &jr);
        arena_free(&b.a);
        printf("  [worker pool not listening] %s -> %d\n      error: %s\n", jr.job_id, jr.state,
               jr.error);
        assert_int_equal(jr.state, JSTATE(FAILED));
        check_contains("no worker pool", jr.error, "127.0.0.1:1");
        check_contains("no worker pool", jr.error, "fake");
    }

    /* A PROCESS environment whose boot command does not exist: refused at Prepare, naming the
     * environment and the command (it used to be started and fail as "exited with status
     * 127", with nothing saying why). */
    {
        pb_ProcessPayload pp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__PROCESS_PAYLOAD__INIT;
        uint8_t buf[128];
        pp.command = "/nonexistent/robust-boot";
        size_t n = protobuf_c_message_pack(&pp.base, buf);
        pl_main_in(&b, SD_URN_ENV_PROCESS, (ProtobufCBinaryData){ n, buf });
        prepare(b.p, "robust-missing-boot", &r, prep, sizeof(prep));
        arena_free(&b.a);
        printf("  Prepare(process boot command missing) -> %d \"%s\"\n", (int)r.code, r.msg);
        assert_int_equal(r.code, SD_RPC_INVALID_ARGUMENT);
        check_contains("missing boot", r.msg, "fake");
        check_contains("missing boot", r.msg, "\"/nonexistent/robust-boot\" does not exist");
        reply_free(&r);
    }

    /* A PROCESS worker that starts and dies at once: the job fails with what it wrote to its
     * stderr (a JVM that cannot start says why only there). /bin/sh takes the endpoint flags
     * for options it does not have, says so on stderr and exits non-zero. */
    {
        pb_ProcessPayload pp = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__PROCESS_PAYLOAD__INIT;
        uint8_t buf[128];
        pp.command = "/bin/sh";
        size_t n = protobuf_c_message_pack(&pp.base, buf);
        pl_main_in(&b, SD_URN_ENV_PROCESS, (ProtobufCBinaryData){ n, buf });
        run_job(b.p, "robust-worker-dies", &jr);
        arena_free(&b.a);
        printf("  [process worker dies at once] %s -> %d\n      error: %s\n", jr.job_id, jr.state,
               jr.error);
        assert_int_equal(jr.state, JSTATE(FAILED));
        check_contains("worker dies", jr.error, "fake");
        check_contains("worker dies", jr.error, "exited with status");
        check_contains("worker dies", jr.error, "its stderr ended with:");
        check_contains("worker dies", jr.error, "option");
    }
    assert_string_equal(F.problem, "");
}
