/*
 * Unit tests for sd_proto (the protoc-c output of proto/) and runner/urns/urns.h.
 *
 * Sundial's .proto files are written by hand to match Beam's wire format, so the risk is a
 * wrong field number, type or package, which would compile fine and fail only against a real
 * SDK. These tests pin the bytes: every row of the pack table is an encoding computed by hand
 * from the protobuf wire rules (tag = field_number << 3 | wire_type, as a varint), chosen to hit
 * the fields whose numbers do not follow their position (PTransform.unique_name = 5,
 * Environment.urn = 2, Trigger.always = 12, the 1000+ oneof members of the Fn API, ...).
 * Each row is also unpacked and packed again to show the descriptor reads what it writes.
 * Other tests cover unpacking in a foreign field order, unknown-field preservation, packed and
 * unpacked repeated scalars, malformed input, service/method names used for gRPC paths, enum
 * numbers, the URN table's shape, and an OOM loop through a ProtobufCAllocator built on
 * sd_malloc (the shape the RPC arena allocator will take).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "google/protobuf/duration.pb-c.h"
#include "org/apache/beam/model/fn_execution/v1/beam_fn_api.pb-c.h"
#include "org/apache/beam/model/fn_execution/v1/beam_provision_api.pb-c.h"
#include "org/apache/beam/model/interactive/v1/beam_interactive_api.pb-c.h"
#include "org/apache/beam/model/job_management/v1/beam_artifact_api.pb-c.h"
#include "org/apache/beam/model/job_management/v1/beam_job_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/beam_runner_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/metrics.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/standard_window_fns.pb-c.h"
#include "proto/state_spec.h"
#include "runner/base/alloc.h"
#include "runner/urns/state_kinds.h"
#include "runner/urns/urns.h"

/* Short spellings of the generated names, for this file only. */
#define PL(T)      Org__Apache__Beam__Model__Pipeline__V1__##T
#define PL_(f)     org__apache__beam__model__pipeline__v1__##f
#define PL_INIT(M) ORG__APACHE__BEAM__MODEL__PIPELINE__V1__##M##__INIT
#define PL_K(K)    ORG__APACHE__BEAM__MODEL__PIPELINE__V1__##K
#define FN(T)      Org__Apache__Beam__Model__FnExecution__V1__##T
#define FN_(f)     org__apache__beam__model__fn_execution__v1__##f
#define FN_INIT(M) ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__##M##__INIT
#define FN_K(K)    ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__##K
#define JM(T)      Org__Apache__Beam__Model__JobManagement__V1__##T
#define JM_(f)     org__apache__beam__model__job_management__v1__##f
#define JM_INIT(M) ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__##M##__INIT
#define JM_K(K)    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__##K

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ========================================================================================= */
/* Message builders for the pack table. Each fills static storage and returns the message.   */
/* ========================================================================================= */

static const ProtobufCMessage *make_ptransform_unique_name(void)
{
    static PL(PTransform) m = PL_INIT(PTRANSFORM);
    m.unique_name = "a";
    return &m.base;
}

static const ProtobufCMessage *make_ptransform_input_map(void)
{
    static PL(PTransform) m = PL_INIT(PTRANSFORM);
    typedef PL(PTransform__InputsEntry) entry_t;
    static entry_t e = PL_INIT(PTRANSFORM__INPUTS_ENTRY);
    static entry_t *entries[1];
    e.key = "in";
    e.value = "pc";
    entries[0] = &e;
    m.n_inputs = 1;
    m.inputs = entries;
    return &m.base;
}

static const ProtobufCMessage *make_environment_urn(void)
{
    static PL(Environment) m = PL_INIT(ENVIRONMENT);
    m.urn = "x";
    return &m.base;
}

static const ProtobufCMessage *make_trigger_always(void)
{
    static PL(Trigger) m = PL_INIT(TRIGGER);
    static PL(Trigger__Always) always = PL_INIT(TRIGGER__ALWAYS);
    m.trigger_case = PL_K(TRIGGER__TRIGGER_ALWAYS);
    m.always = &always;
    return &m.base;
}

static const ProtobufCMessage *make_align_to(void)
{
    static PL(TimestampTransform) m = PL_INIT(TIMESTAMP_TRANSFORM);
    static PL(TimestampTransform__AlignTo) a = PL_INIT(TIMESTAMP_TRANSFORM__ALIGN_TO);
    a.period = 5;
    a.offset = 1;
    m.timestamp_transform_case = PL_K(TIMESTAMP_TRANSFORM__TIMESTAMP_TRANSFORM_ALIGN_TO);
    m.align_to = &a;
    return &m.base;
}

static const ProtobufCMessage *make_function_spec(void)
{
    static PL(FunctionSpec) m = PL_INIT(FUNCTION_SPEC);
    static uint8_t payload[] = { 0x07 };
    m.urn = "u";
    m.payload.data = payload;
    m.payload.len = sizeof(payload);
    return &m.base;
}

static const ProtobufCMessage *make_fixed_windows(void)
{
    static PL(FixedWindowsPayload) m = PL_INIT(FIXED_WINDOWS_PAYLOAD);
    static Google__Protobuf__Duration size = GOOGLE__PROTOBUF__DURATION__INIT;
    size.seconds = 60;
    m.size = &size;
    return &m.base;
}

static const ProtobufCMessage *make_instruction_process_bundle(void)
{
    static FN(InstructionRequest) m = FN_INIT(INSTRUCTION_REQUEST);
    static FN(ProcessBundleRequest) pb = FN_INIT(PROCESS_BUNDLE_REQUEST);
    pb.process_bundle_descriptor_id = "d";
    m.instruction_id = "i";
    m.request_case = FN_K(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE);
    m.process_bundle = &pb;
    return &m.base;
}

static const ProtobufCMessage *make_state_get(void)
{
    static FN(StateRequest) m = FN_INIT(STATE_REQUEST);
    static FN(StateGetRequest) get = FN_INIT(STATE_GET_REQUEST);
    m.id = "s";
    m.request_case = FN_K(STATE_REQUEST__REQUEST_GET);
    m.get = &get;
    return &m.base;
}

static const ProtobufCMessage *make_state_key_bag(void)
{
    static FN(StateKey) m = FN_INIT(STATE_KEY);
    static FN(StateKey__BagUserState) bag = FN_INIT(STATE_KEY__BAG_USER_STATE);
    bag.transform_id = "t";
    m.type_case = FN_K(STATE_KEY__TYPE_BAG_USER_STATE);
    m.bag_user_state = &bag;
    return &m.base;
}

static const ProtobufCMessage *make_elements_data(void)
{
    static FN(Elements) m = FN_INIT(ELEMENTS);
    typedef FN(Elements__Data) data_t;
    static data_t d = FN_INIT(ELEMENTS__DATA);
    static data_t *ds[1];
    static uint8_t bytes[] = { 0x01, 0x02 };
    d.instruction_id = "i";
    d.transform_id = "t";
    d.data.data = bytes;
    d.data.len = sizeof(bytes);
    d.is_last = 1;
    ds[0] = &d;
    m.n_data = 1;
    m.data = ds;
    return &m.base;
}

static const ProtobufCMessage *make_cache_token(void)
{
    static FN(ProcessBundleRequest__CacheToken) m = FN_INIT(PROCESS_BUNDLE_REQUEST__CACHE_TOKEN);
    static FN(ProcessBundleRequest__CacheToken__UserState) us =
        FN_INIT(PROCESS_BUNDLE_REQUEST__CACHE_TOKEN__USER_STATE);
    static uint8_t token[] = { 'k' };
    m.type_case = FN_K(PROCESS_BUNDLE_REQUEST__CACHE_TOKEN__TYPE_USER_STATE);
    m.user_state = &us;
    m.token.data = token;
    m.token.len = sizeof(token);
    return &m.base;
}

static const ProtobufCMessage *make_desired_split(void)
{
    static FN(ProcessBundleSplitRequest__DesiredSplit) m =
        FN_INIT(PROCESS_BUNDLE_SPLIT_REQUEST__DESIRED_SPLIT);
    static int64_t points[] = { 1, 2 };
    m.fraction_of_remainder = 0.5;
    m.n_allowed_split_points = COUNT(points);
    m.allowed_split_points = points;
    return &m.base;
}

static const ProtobufCMessage *make_artifact_request(void)
{
    static JM(ArtifactRequestWrapper) m = JM_INIT(ARTIFACT_REQUEST_WRAPPER);
    static JM(GetArtifactRequest) get = JM_INIT(GET_ARTIFACT_REQUEST);
    m.request_case = JM_K(ARTIFACT_REQUEST_WRAPPER__REQUEST_GET_ARTIFACT);
    m.get_artifact = &get;
    return &m.base;
}

static const ProtobufCMessage *make_job_state_event(void)
{
    static JM(JobStateEvent) m = JM_INIT(JOB_STATE_EVENT);
    m.state = JM_K(JOB_STATE__ENUM__DONE);
    return &m.base;
}

static const ProtobufCMessage *make_provision_info(void)
{
    static FN(ProvisionInfo) m = FN_INIT(PROVISION_INFO);
    static char *caps[] = { "c" };
    m.retrieval_token = "r";
    m.n_runner_capabilities = COUNT(caps);
    m.runner_capabilities = caps;
    return &m.base;
}

/* ========================================================================================= */
/* Pack table: exact bytes, then unpack + repack round trip.                                  */
/* ========================================================================================= */

static const struct {
    const char *name;
    const ProtobufCMessage *(*make)(void);
    size_t len;
    uint8_t bytes[24];
} pack_rows[] = {
    /* field 5, LEN: tag 0x2a. */
    { "PTransform.unique_name=5", make_ptransform_unique_name, 3, { 0x2a, 0x01, 'a' } },
    /* field 3, LEN, holding an entry {key=1, value=2}. */
    { "PTransform.inputs map=3",
      make_ptransform_input_map,
      10,
      { 0x1a, 0x08, 0x0a, 0x02, 'i', 'n', 0x12, 0x02, 'p', 'c' } },
    { "Environment.urn=2", make_environment_urn, 3, { 0x12, 0x01, 'x' } },
    /* field 12, LEN, empty message: tag 12 << 3 | 2 = 0x62. */
    { "Trigger.always=12", make_trigger_always, 2, { 0x62, 0x00 } },
    /* align_to = 2 holding period = 3, offset = 4. */
    { "TimestampTransform.AlignTo 3/4", make_align_to, 6, { 0x12, 0x04, 0x18, 0x05, 0x20, 0x01 } },
    { "FunctionSpec.payload=3", make_function_spec, 6, { 0x0a, 0x01, 'u', 0x1a, 0x01, 0x07 } },
    /* Duration.seconds = 60 inside field 1. */
    { "FixedWindowsPayload.size", make_fixed_windows, 4, { 0x0a, 0x02, 0x08, 0x3c } },
    /* 1001 << 3 | 2 = 8010 = varint ca 3e. */
    { "InstructionRequest.process_bundle=1001",
      make_instruction_process_bundle,
      9,
      { 0x0a, 0x01, 'i', 0xca, 0x3e, 0x03, 0x0a, 0x01, 'd' } },
    /* 1000 << 3 | 2 = 8002 = varint c2 3e; an empty oneof member is still written. */
    { "StateRequest.get=1000", make_state_get, 6, { 0x0a, 0x01, 's', 0xc2, 0x3e, 0x00 } },
    { "StateKey.bag_user_state=3", make_state_key_bag, 5, { 0x1a, 0x03, 0x0a, 0x01, 't' } },
    { "Elements.Data",
      make_elements_data,
      14,
      { 0x0a, 0x0c, 0x0a, 0x01, 'i', 0x12, 0x01, 't', 0x1a, 0x02, 0x01, 0x02, 0x20, 0x01 } },
    /* token = 10: 10 << 3 | 2 = 0x52. */
    { "CacheToken.token=10", make_cache_token, 5, { 0x0a, 0x00, 0x52, 0x01, 'k' } },
    /* fraction_of_remainder = 1 (fixed64, 0.5 little-endian); allowed_split_points = 3 packed. */
    { "DesiredSplit packed points=3",
      make_desired_split,
      13,
      { 0x09, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f, 0x1a, 0x02, 0x01, 0x02 } },
    { "ArtifactRequestWrapper.get_artifact=1001", make_artifact_request, 3, { 0xca, 0x3e, 0x00 } },
    { "JobStateEvent.state DONE=3", make_job_state_event, 2, { 0x08, 0x03 } },
    /* retrieval_token = 6 (0x32), runner_capabilities = 12 (0x62). */
    { "ProvisionInfo 6 and 12", make_provision_info, 6, { 0x32, 0x01, 'r', 0x62, 0x01, 'c' } },
};

static void test_pack_exact_bytes(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(pack_rows); i++) {
        const ProtobufCMessage *msg = pack_rows[i].make();
        uint8_t out[64];
        uint8_t again[64];
        size_t size = protobuf_c_message_get_packed_size(msg);
        if (size != pack_rows[i].len) {
            fail_msg("row \"%s\": packed size %zu, expected %zu", pack_rows[i].name, size,
                     pack_rows[i].len);
        }
        assert_true(size <= sizeof(out));
        assert_int_equal(protobuf_c_message_pack(msg, out), size);
        if (memcmp(out, pack_rows[i].bytes, size) != 0) {
            fail_msg("row \"%s\": bytes differ from the hand-computed encoding", pack_rows[i].name);
        }

        ProtobufCMessage *back = protobuf_c_message_unpack(msg->descriptor, NULL, size, out);
        if (back == NULL) {
            fail_msg("row \"%s\": could not unpack its own encoding", pack_rows[i].name);
        }
        assert_int_equal(protobuf_c_message_pack(back, again), size);
        assert_memory_equal(again, out, size);
        protobuf_c_message_free_unpacked(back, NULL);
    }
}

/* ========================================================================================= */
/* Unpacking.                                                                                 */
/* ========================================================================================= */

/* Fields may arrive in any order; Beam's Java and Go writers emit spec (1) before name (5). */
static void test_unpack_field_order(void **state)
{
    static const uint8_t in[] = { 0x2a, 0x01, 'a', 0x0a, 0x03, 0x0a, 0x01, 'u' };
    (void)state;
    PL(PTransform) *t = PL_(ptransform__unpack)(NULL, sizeof(in), in);
    assert_non_null(t);
    assert_string_equal(t->unique_name, "a");
    assert_non_null(t->spec);
    assert_string_equal(t->spec->urn, "u");
    assert_int_equal(t->spec->payload.len, 0);
    PL_(ptransform__free_unpacked)(t, NULL);
}

/* An InstructionResponse for a finished bundle with one short-id metric. */
static const uint8_t bundle_response[] = {
    0x0a, 0x01, 'i',                    /* instruction_id = "i" */
    0xca, 0x3e, 0x0a,                   /* process_bundle (1001), 10 bytes */
    0x20, 0x01,                         /*   requires_finalization (4) = true */
    0x2a, 0x06,                         /*   monitoring_data (5) entry, 6 bytes */
    0x0a, 0x01, 'm',  0x12, 0x01, 0x05, /*     key "m", value 05 */
};

static void test_unpack_instruction_response(void **state)
{
    (void)state;
    FN(InstructionResponse) *r =
        FN_(instruction_response__unpack)(NULL, sizeof(bundle_response), bundle_response);
    assert_non_null(r);
    assert_string_equal(r->instruction_id, "i");
    assert_string_equal(r->error, "");
    assert_int_equal(r->response_case, FN_K(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE));
    assert_int_equal(r->response_case, 1001);
    assert_non_null(r->process_bundle);
    assert_true(r->process_bundle->requires_finalization);
    assert_int_equal(r->process_bundle->n_residual_roots, 0);
    assert_int_equal(r->process_bundle->n_monitoring_data, 1);
    assert_string_equal(r->process_bundle->monitoring_data[0]->key, "m");
    assert_int_equal(r->process_bundle->monitoring_data[0]->value.len, 1);
    assert_int_equal(r->process_bundle->monitoring_data[0]->value.data[0], 0x05);
    FN_(instruction_response__free_unpacked)(r, NULL);
}

/*
 * Fields a newer Beam adds must survive a runner that does not know them: protobuf-c keeps
 * unknown fields and writes them back (after the known ones).
 */
static void test_unknown_fields_survive(void **state)
{
    /* unique_name = "a", then field 127 (tag 127 << 3 | 0 = varint f8 07) = 5. */
    static const uint8_t in[] = { 0x2a, 0x01, 'a', 0xf8, 0x07, 0x05 };
    uint8_t out[sizeof(in)];
    (void)state;
    PL(PTransform) *t = PL_(ptransform__unpack)(NULL, sizeof(in), in);
    assert_non_null(t);
    assert_string_equal(t->unique_name, "a");
    assert_int_equal(PL_(ptransform__get_packed_size)(t), sizeof(in));
    assert_int_equal(PL_(ptransform__pack)(t, out), sizeof(in));
    assert_memory_equal(out, in, sizeof(in));
    PL_(ptransform__free_unpacked)(t, NULL);
}

/* Repeated int64 must be read whether the writer packed it or not. */
static void test_repeated_packed_and_unpacked(void **state)
{
    static const uint8_t packed[] = { 0x1a, 0x02, 0x01, 0x02 };
    static const uint8_t unpacked[] = { 0x18, 0x01, 0x18, 0x02 };

    const struct {
        const char *name;
        const uint8_t *bytes;
        size_t len;
    } rows[] = {
        { "packed", packed, sizeof(packed) },
        { "unpacked", unpacked, sizeof(unpacked) },
    };

    (void)state;
    for (size_t i = 0; i < COUNT(rows); i++) {
        /* protoc-c emits unpack functions only for top-level messages. */
        ProtobufCMessage *m =
            protobuf_c_message_unpack(&FN_(process_bundle_split_request__desired_split__descriptor),
                                      NULL, rows[i].len, rows[i].bytes);
        FN(ProcessBundleSplitRequest__DesiredSplit) *d =
            (FN(ProcessBundleSplitRequest__DesiredSplit) *)m;
        if (d == NULL) {
            fail_msg("row \"%s\": unpack failed", rows[i].name);
        }
        assert_int_equal(d->n_allowed_split_points, 2);
        assert_int_equal(d->allowed_split_points[0], 1);
        assert_int_equal(d->allowed_split_points[1], 2);
        protobuf_c_message_free_unpacked(m, NULL);
    }
}

/* Malformed input yields NULL, never a crash. */
static void test_malformed_rejected(void **state)
{
    static const uint8_t truncated_len[] = { 0x2a, 0x05, 'a' };
    static const uint8_t truncated_tag[] = { 0xca };
    static const uint8_t truncated_sub[] = { 0x0a, 0x01, 'i', 0xca, 0x3e, 0x09, 0x0a };
    static const uint8_t bad_varint[] = { 0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };

    const struct {
        const char *name;
        const ProtobufCMessageDescriptor *desc;
        const uint8_t *bytes;
        size_t len;
    } rows[] = {
        { "length past end", &PL_(ptransform__descriptor), truncated_len, sizeof(truncated_len) },
        { "tag cut short", &FN_(instruction_request__descriptor), truncated_tag,
          sizeof(truncated_tag) },
        { "sub-message past end", &FN_(instruction_request__descriptor), truncated_sub,
          sizeof(truncated_sub) },
        { "varint over 10 bytes", &JM_(job_state_event__descriptor), bad_varint,
          sizeof(bad_varint) },
    };

    (void)state;
    for (size_t i = 0; i < COUNT(rows); i++) {
        ProtobufCMessage *m =
            protobuf_c_message_unpack(rows[i].desc, NULL, rows[i].len, rows[i].bytes);
        if (m != NULL) {
            protobuf_c_message_free_unpacked(m, NULL);
            fail_msg("row \"%s\": malformed input was accepted", rows[i].name);
        }
    }
}

/* ========================================================================================= */
/* Descriptors: names used on the wire (gRPC paths) and enum numbers.                         */
/* ========================================================================================= */

static void test_service_methods(void **state)
{
    static const struct {
        const ProtobufCServiceDescriptor *svc;
        const char *service;
        const char *method;
        const char *input;
        const char *output;
    } rows[] = {
        { &FN_(beam_fn_control__descriptor), "org.apache.beam.model.fn_execution.v1.BeamFnControl",
          "Control", "org.apache.beam.model.fn_execution.v1.InstructionResponse",
          "org.apache.beam.model.fn_execution.v1.InstructionRequest" },
        { &FN_(beam_fn_control__descriptor), "org.apache.beam.model.fn_execution.v1.BeamFnControl",
          "GetProcessBundleDescriptor",
          "org.apache.beam.model.fn_execution.v1.GetProcessBundleDescriptorRequest",
          "org.apache.beam.model.fn_execution.v1.ProcessBundleDescriptor" },
        { &FN_(beam_fn_data__descriptor), "org.apache.beam.model.fn_execution.v1.BeamFnData",
          "Data", "org.apache.beam.model.fn_execution.v1.Elements",
          "org.apache.beam.model.fn_execution.v1.Elements" },
        { &FN_(beam_fn_state__descriptor), "org.apache.beam.model.fn_execution.v1.BeamFnState",
          "State", "org.apache.beam.model.fn_execution.v1.StateRequest",
          "org.apache.beam.model.fn_execution.v1.StateResponse" },
        { &FN_(beam_fn_logging__descriptor), "org.apache.beam.model.fn_execution.v1.BeamFnLogging",
          "Logging", "org.apache.beam.model.fn_execution.v1.LogEntry.List",
          "org.apache.beam.model.fn_execution.v1.LogControl" },
        { &FN_(beam_fn_external_worker_pool__descriptor),
          "org.apache.beam.model.fn_execution.v1.BeamFnExternalWorkerPool", "StartWorker",
          "org.apache.beam.model.fn_execution.v1.StartWorkerRequest",
          "org.apache.beam.model.fn_execution.v1.StartWorkerResponse" },
        { &FN_(beam_fn_worker_status__descriptor),
          "org.apache.beam.model.fn_execution.v1.BeamFnWorkerStatus", "WorkerStatus",
          "org.apache.beam.model.fn_execution.v1.WorkerStatusResponse",
          "org.apache.beam.model.fn_execution.v1.WorkerStatusRequest" },
        { &FN_(provision_service__descriptor),
          "org.apache.beam.model.fn_execution.v1.ProvisionService", "GetProvisionInfo",
          "org.apache.beam.model.fn_execution.v1.GetProvisionInfoRequest",
          "org.apache.beam.model.fn_execution.v1.GetProvisionInfoResponse" },
        { &JM_(job_service__descriptor), "org.apache.beam.model.job_management.v1.JobService",
          "Prepare", "org.apache.beam.model.job_management.v1.PrepareJobRequest",
          "org.apache.beam.model.job_management.v1.PrepareJobResponse" },
        { &JM_(job_service__descriptor), "org.apache.beam.model.job_management.v1.JobService",
          "GetMessageStream", "org.apache.beam.model.job_management.v1.JobMessagesRequest",
          "org.apache.beam.model.job_management.v1.JobMessagesResponse" },
        { &JM_(job_service__descriptor), "org.apache.beam.model.job_management.v1.JobService",
          "GetState", "org.apache.beam.model.job_management.v1.GetJobStateRequest",
          "org.apache.beam.model.job_management.v1.JobStateEvent" },
        { &JM_(artifact_staging_service__descriptor),
          "org.apache.beam.model.job_management.v1.ArtifactStagingService",
          "ReverseArtifactRetrievalService",
          "org.apache.beam.model.job_management.v1.ArtifactResponseWrapper",
          "org.apache.beam.model.job_management.v1.ArtifactRequestWrapper" },
        { &JM_(artifact_retrieval_service__descriptor),
          "org.apache.beam.model.job_management.v1.ArtifactRetrievalService", "GetArtifact",
          "org.apache.beam.model.job_management.v1.GetArtifactRequest",
          "org.apache.beam.model.job_management.v1.GetArtifactResponse" },
        /* Beam's interactive package: the method path a TestStreamService answers is
         * /org.apache.beam.model.interactive.v1.TestStreamService/Events. */
        { &org__apache__beam__model__interactive__v1__test_stream_service__descriptor,
          "org.apache.beam.model.interactive.v1.TestStreamService", "Events",
          "org.apache.beam.model.interactive.v1.EventsRequest",
          "org.apache.beam.model.pipeline.v1.TestStreamPayload.Event" },
    };

    (void)state;
    for (size_t i = 0; i < COUNT(rows); i++) {
        const ProtobufCServiceDescriptor *svc = rows[i].svc;
        const ProtobufCMethodDescriptor *m =
            protobuf_c_service_descriptor_get_method_by_name(svc, rows[i].method);
        assert_string_equal(svc->name, rows[i].service);
        if (m == NULL) {
            fail_msg("service %s has no method %s", rows[i].service, rows[i].method);
        }
        assert_string_equal(m->input->name, rows[i].input);
        assert_string_equal(m->output->name, rows[i].output);
    }
}

/* The Job API service carries every method of Beam's JobService. */
static void test_job_service_method_list(void **state)
{
    static const char *const names[] = { "Prepare",
                                         "Run",
                                         "GetJobs",
                                         "GetState",
                                         "GetPipeline",
                                         "Cancel",
                                         "Drain",
                                         "GetStateStream",
                                         "GetMessageStream",
                                         "GetJobMetrics",
                                         "DescribePipelineOptions" };
    const ProtobufCServiceDescriptor *svc = &JM_(job_service__descriptor);
    (void)state;
    assert_int_equal(svc->n_methods, COUNT(names));
    for (size_t i = 0; i < COUNT(names); i++) {
        assert_string_equal(svc->methods[i].name, names[i]);
    }
}

static void test_enum_numbers(void **state)
{
    static const struct {
        const char *name;
        int got;
        int want;
    } rows[] = {
        { "IsBounded.BOUNDED", PL_K(IS_BOUNDED__ENUM__BOUNDED), 2 },
        { "TimeDomain.PROCESSING_TIME", PL_K(TIME_DOMAIN__ENUM__PROCESSING_TIME), 2 },
        { "StandardCoders.STRING_UTF8", PL_K(STANDARD_CODERS__ENUM__STRING_UTF8), 10 },
        { "StandardCoders.NULLABLE", PL_K(STANDARD_CODERS__ENUM__NULLABLE), 17 },
        { "OutputTime.EARLIEST_IN_PANE", PL_K(OUTPUT_TIME__ENUM__EARLIEST_IN_PANE), 3 },
        { "AccumulationMode.ACCUMULATING", PL_K(ACCUMULATION_MODE__ENUM__ACCUMULATING), 2 },
        { "MergeStatus.NEEDS_MERGE", PL_K(MERGE_STATUS__ENUM__NEEDS_MERGE), 2 },
        { "ClosingBehavior.EMIT_IF_NONEMPTY", PL_K(CLOSING_BEHAVIOR__ENUM__EMIT_IF_NONEMPTY), 2 },
        { "OnTimeBehavior.FIRE_ALWAYS", PL_K(ON_TIME_BEHAVIOR__ENUM__FIRE_ALWAYS), 1 },
        { "StandardRunnerProtocols.CONTROL_RESPONSE_ELEMENTS_EMBEDDING",
          PL_K(STANDARD_RUNNER_PROTOCOLS__ENUM__CONTROL_RESPONSE_ELEMENTS_EMBEDDING), 6 },
        { "MonitoringInfoSpecs.USER_HISTOGRAM", PL_K(MONITORING_INFO_SPECS__ENUM__USER_HISTOGRAM),
          23 },
        { "MonitoringInfoLabels.PER_WORKER_METRIC",
          PL_K(MONITORING_INFO__MONITORING_INFO_LABELS__PER_WORKER_METRIC), 28 },
        { "LogEntry.Severity.ERROR", FN_K(LOG_ENTRY__SEVERITY__ENUM__ERROR), 6 },
        { "JobState.DONE", JM_K(JOB_STATE__ENUM__DONE), 3 },
        { "JobState.CANCELLING", JM_K(JOB_STATE__ENUM__CANCELLING), 10 },
        { "JobMessage.JOB_MESSAGE_ERROR", JM_K(JOB_MESSAGE__MESSAGE_IMPORTANCE__JOB_MESSAGE_ERROR),
          5 },
        { "PipelineOptionType.OBJECT", JM_K(PIPELINE_OPTION_TYPE__ENUM__OBJECT), 5 },
    };

    (void)state;
    for (size_t i = 0; i < COUNT(rows); i++) {
        if (rows[i].got != rows[i].want) {
            fail_msg("%s = %d, expected %d", rows[i].name, rows[i].got, rows[i].want);
        }
    }
}

/* ========================================================================================= */
/* URN table.                                                                                 */
/* ========================================================================================= */

static const char *const all_urns[] = {
    SD_URN_TRANSFORM_PARDO,
    SD_URN_TRANSFORM_FLATTEN,
    SD_URN_TRANSFORM_GROUP_BY_KEY,
    SD_URN_TRANSFORM_IMPULSE,
    SD_URN_TRANSFORM_WINDOW_INTO,
    SD_URN_TRANSFORM_TEST_STREAM,
    SD_URN_TRANSFORM_MAP_WINDOWS,
    SD_URN_TRANSFORM_MERGE_WINDOWS,
    SD_URN_TRANSFORM_TO_STRING,
    SD_URN_TRANSFORM_READ,
    SD_URN_TRANSFORM_CREATE_VIEW,
    SD_URN_TRANSFORM_COMBINE_PER_KEY,
    SD_URN_TRANSFORM_COMBINE_GLOBALLY,
    SD_URN_TRANSFORM_RESHUFFLE,
    SD_URN_TRANSFORM_WRITE_FILES,
    SD_URN_TRANSFORM_PUBSUB_READ,
    SD_URN_TRANSFORM_PUBSUB_WRITE,
    SD_URN_TRANSFORM_PUBSUB_WRITE_V2,
    SD_URN_TRANSFORM_GROUP_INTO_BATCHES_WITH_SHARDED_KEY,
    SD_URN_TRANSFORM_REDISTRIBUTE_BY_KEY,
    SD_URN_TRANSFORM_REDISTRIBUTE_ARBITRARILY,
    SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE,
    SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS,
    SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS,
    SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES,
    SD_URN_TRANSFORM_COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS,
    SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION,
    SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS,
    SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS,
    SD_URN_TRANSFORM_SDF_TRUNCATE_SIZED_RESTRICTIONS,
    SD_URN_TRANSFORM_GROUP_INTO_BATCHES,
    SD_URN_RUNNER_SOURCE,
    SD_URN_RUNNER_SINK,
    SD_URN_SIDE_INPUT_ITERABLE,
    SD_URN_SIDE_INPUT_MULTIMAP,
    SD_URN_WINDOW_MAPPING_GLOBAL,
    SD_URN_WINDOW_MAPPING_IDENTITY,
    SD_URN_WINDOW_MAPPING_ASSIGN_MAX_TIMESTAMP,
    SD_URN_USER_STATE_BAG,
    SD_URN_USER_STATE_MULTIMAP,
    SD_URN_USER_STATE_ORDERED_LIST,
    SD_URN_CODER_BYTES,
    SD_URN_CODER_STRING_UTF8,
    SD_URN_CODER_KV,
    SD_URN_CODER_BOOL,
    SD_URN_CODER_VARINT,
    SD_URN_CODER_DOUBLE,
    SD_URN_CODER_ITERABLE,
    SD_URN_CODER_TIMER,
    SD_URN_CODER_INTERVAL_WINDOW,
    SD_URN_CODER_LENGTH_PREFIX,
    SD_URN_CODER_GLOBAL_WINDOW,
    SD_URN_CODER_WINDOWED_VALUE,
    SD_URN_CODER_PARAM_WINDOWED_VALUE,
    SD_URN_CODER_STATE_BACKED_ITERABLE,
    SD_URN_CODER_CUSTOM_WINDOW,
    SD_URN_CODER_ROW,
    SD_URN_CODER_SHARDED_KEY,
    SD_URN_CODER_NULLABLE,
    SD_URN_CODER_GO_CUSTOM,
    SD_URN_CODER_TS_GENERIC_OBJECT,
    SD_URN_WINDOW_FN_GLOBAL,
    SD_URN_WINDOW_FN_FIXED,
    SD_URN_WINDOW_FN_SLIDING,
    SD_URN_WINDOW_FN_SESSION,
    SD_URN_ENV_DOCKER,
    SD_URN_ENV_PROCESS,
    SD_URN_ENV_EXTERNAL,
    SD_URN_ENV_DEFAULT,
    SD_URN_ENV_ANYOF,
    SD_URN_PROTOCOL_LEGACY_PROGRESS_REPORTING,
    SD_URN_PROTOCOL_PROGRESS_REPORTING,
    SD_URN_PROTOCOL_WORKER_STATUS,
    SD_URN_PROTOCOL_MULTI_CORE_BUNDLE_PROCESSING,
    SD_URN_PROTOCOL_HARNESS_MONITORING_INFOS,
    SD_URN_PROTOCOL_SIBLING_WORKERS,
    SD_URN_PROTOCOL_CONTROL_REQUEST_ELEMENTS_EMBEDDING,
    SD_URN_PROTOCOL_STATE_CACHING,
    SD_URN_PROTOCOL_DATA_SAMPLING,
    SD_URN_PROTOCOL_SDK_CONSUMING_RECEIVED_DATA,
    SD_URN_PROTOCOL_ORDERED_LIST_STATE,
    SD_URN_RUNNER_PROTOCOL_MONITORING_INFO_SHORT_IDS,
    SD_URN_RUNNER_PROTOCOL_CONTROL_RESPONSE_ELEMENTS_EMBEDDING,
    SD_URN_RUNNER_PROTOCOL_MULTIMAP_KEYS_VALUES_SIDE_INPUT,
    SD_URN_REQUIREMENT_STATEFUL_PROCESSING,
    SD_URN_REQUIREMENT_BUNDLE_FINALIZATION,
    SD_URN_REQUIREMENT_STABLE_INPUT,
    SD_URN_REQUIREMENT_TIME_SORTED_INPUT,
    SD_URN_REQUIREMENT_SPLITTABLE_DOFN,
    SD_URN_REQUIREMENT_ON_WINDOW_EXPIRATION,
    SD_URN_ARTIFACT_TYPE_FILE,
    SD_URN_ARTIFACT_TYPE_URL,
    SD_URN_ARTIFACT_TYPE_EMBEDDED,
    SD_URN_ARTIFACT_TYPE_PYPI,
    SD_URN_ARTIFACT_TYPE_MAVEN,
    SD_URN_ARTIFACT_TYPE_DEFERRED,
    SD_URN_ARTIFACT_ROLE_STAGING_TO,
    SD_URN_ARTIFACT_ROLE_PIP_REQUIREMENTS_FILE,
    SD_URN_ARTIFACT_ROLE_GO_WORKER_BINARY,
    SD_URN_DISPLAY_DATA_LABELLED,
    SD_URN_RESOURCE_HINT_ACCELERATOR,
    SD_URN_RESOURCE_HINT_MIN_RAM_BYTES,
    SD_URN_RESOURCE_HINT_CPU_COUNT,
    SD_URN_METRIC_TYPE_SUM_INT64,
    SD_URN_METRIC_TYPE_SUM_DOUBLE,
    SD_URN_METRIC_TYPE_DISTRIBUTION_INT64,
    SD_URN_METRIC_TYPE_DISTRIBUTION_DOUBLE,
    SD_URN_METRIC_TYPE_LATEST_INT64,
    SD_URN_METRIC_TYPE_LATEST_DOUBLE,
    SD_URN_METRIC_TYPE_TOP_N_INT64,
    SD_URN_METRIC_TYPE_TOP_N_DOUBLE,
    SD_URN_METRIC_TYPE_BOTTOM_N_INT64,
    SD_URN_METRIC_TYPE_BOTTOM_N_DOUBLE,
    SD_URN_METRIC_TYPE_PROGRESS,
    SD_URN_METRIC_TYPE_SET_STRING,
    SD_URN_METRIC_TYPE_BOUNDED_TRIE,
    SD_URN_METRIC_TYPE_HISTOGRAM_INT64,
    SD_URN_METRIC_USER_SUM_INT64,
    SD_URN_METRIC_USER_SUM_DOUBLE,
    SD_URN_METRIC_USER_DISTRIBUTION_INT64,
    SD_URN_METRIC_USER_DISTRIBUTION_DOUBLE,
    SD_URN_METRIC_USER_LATEST_INT64,
    SD_URN_METRIC_USER_LATEST_DOUBLE,
    SD_URN_METRIC_USER_TOP_N_INT64,
    SD_URN_METRIC_USER_TOP_N_DOUBLE,
    SD_URN_METRIC_USER_BOTTOM_N_INT64,
    SD_URN_METRIC_USER_BOTTOM_N_DOUBLE,
    SD_URN_METRIC_USER_SET_STRING,
    SD_URN_METRIC_USER_BOUNDED_TRIE,
    SD_URN_METRIC_USER_HISTOGRAM_INT64,
    SD_URN_METRIC_ELEMENT_COUNT,
    SD_URN_METRIC_SAMPLED_BYTE_SIZE,
    SD_URN_METRIC_START_BUNDLE_MSECS,
    SD_URN_METRIC_PROCESS_BUNDLE_MSECS,
    SD_URN_METRIC_FINISH_BUNDLE_MSECS,
    SD_URN_METRIC_TOTAL_MSECS,
    SD_URN_METRIC_WORK_REMAINING,
    SD_URN_METRIC_WORK_COMPLETED,
    SD_URN_METRIC_DATA_CHANNEL_READ_INDEX,
    SD_URN_METRIC_API_REQUEST_COUNT,
    SD_URN_METRIC_API_REQUEST_LATENCIES,
    SD_URN_METRIC_SUNDIAL_PROCESSING_TIME_BASE,
    SD_URN_METRIC_SUNDIAL_INPUT_WATERMARK,
    SD_URN_METRIC_SUNDIAL_OUTPUT_WATERMARK,
    SD_URN_METRIC_SUNDIAL_CLOCK,
    SD_URN_METRIC_SUNDIAL_DROPPED_LATE,
};

/* Every URN is "beam:<...>:v<digits>" with no blanks, and no two entries are the same string. */
static void test_urns_well_formed(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(all_urns); i++) {
        const char *u = all_urns[i];
        size_t n = strlen(u);
        const char *v = strrchr(u, ':');
        if (strncmp(u, "beam:", 5) != 0 || v == NULL || v[1] != 'v' || v[2] == '\0') {
            fail_msg("URN \"%s\" is not of the form beam:...:v<N>", u);
        }
        for (const char *p = v + 2; *p != '\0'; p++) {
            if (*p < '0' || *p > '9') {
                fail_msg("URN \"%s\" has a non-numeric version", u);
            }
        }
        for (size_t k = 0; k < n; k++) {
            if (u[k] == ' ' || u[k] == '\t' || u[k] == '\n') {
                fail_msg("URN \"%s\" contains whitespace", u);
            }
        }
        for (size_t j = i + 1; j < COUNT(all_urns); j++) {
            if (strcmp(u, all_urns[j]) == 0) {
                fail_msg("URN \"%s\" appears twice (entries %zu and %zu)", u, i, j);
            }
        }
    }
}

/*
 * The state kinds table (runner/urns/state_kinds.h, read through proto/state_spec.h) against
 * the generated StateSpec: every member of its spec oneof has exactly one row, the view finds
 * the member's coder fields (a key coder exactly where the member has key_coder_id), and the
 * case a row fills is the case it reads. A member added to the .proto without a row fails here.
 */
static void test_state_kinds_table(void **state)
{
    (void)state;
    const ProtobufCMessageDescriptor *sd = &PL_(state_spec__descriptor);
    bool seen[SD_USER_STATE_KIND_COUNT] = { false };
    size_t n_members = 0;
    for (unsigned i = 0; i < sd->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &sd->fields[i];
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) == 0) {
            continue; /* protocol */
        }
        n_members++;
        const ProtobufCMessageDescriptor *md = f->descriptor;
        ProtobufCMessage *m = sd_malloc(md->sizeof_message);
        assert_non_null(m);
        protobuf_c_message_init(md, m);
        PL(StateSpec) ss = PL_INIT(STATE_SPEC);
        memcpy((char *)&ss + f->offset, &m, sizeof(m));
        ss.spec_case = (PL(StateSpec__SpecCase))f->id;

        sd_pb_state_view v = { SD_USER_STATE_KIND_COUNT, NULL, NULL };
        if (!sd_pb_state_view_of(&ss, &v)) {
            fail_msg("StateSpec member %s has no row in SD_STATE_KINDS", f->name);
        }
        assert_true(v.kind < SD_USER_STATE_KIND_COUNT && v.value_coder_id != NULL);
        assert_false(seen[v.kind]);
        seen[v.kind] = true;
        assert_int_equal(sd_pb_state_spec_case(v.kind), (int)f->id);
        /* The coder fields lie inside the member and are its string fields. */
        char *base = (char *)m;
        assert_true((char *)v.value_coder_id > base &&
                    (char *)v.value_coder_id < base + md->sizeof_message);
        const ProtobufCFieldDescriptor *kf =
            protobuf_c_message_descriptor_get_field_by_name(md, "key_coder_id");
        if (kf != NULL) {
            assert_ptr_equal((char *)v.key_coder_id, base + kf->offset);
            assert_true(sd_user_state_row_of(v.kind)->keyed);
            assert_int_equal(sd_user_state_row_of(v.kind)->key, SD_STATE_KEY_MULTIMAP);
        } else {
            assert_null(v.key_coder_id);
            assert_false(sd_user_state_row_of(v.kind)->keyed);
        }
        bool is_value_field = false;
        for (unsigned j = 0; j < md->n_fields; j++) {
            if (base + md->fields[j].offset == (char *)v.value_coder_id) {
                is_value_field = md->fields[j].type == PROTOBUF_C_TYPE_STRING;
            }
        }
        assert_true(is_value_field);

        /* The helper in the planner's order: map keys first. */
        *v.value_coder_id = (char *)"values";
        if (v.key_coder_id != NULL) {
            *v.key_coder_id = (char *)"keys";
        }
        const char *ids[2];
        sd_pb_state_coder_ids(&ss, ids);
        assert_string_equal(ids[0], v.key_coder_id != NULL ? "keys" : "values");
        if (v.key_coder_id != NULL) {
            assert_string_equal(ids[1], "values");
        } else {
            assert_null(ids[1]);
        }
        sd_free(m);
    }
    assert_int_equal(n_members, SD_USER_STATE_KIND_COUNT);

    /* An unset oneof, or a member missing, is no kind. */
    PL(StateSpec) empty = PL_INIT(STATE_SPEC);
    sd_pb_state_view v;
    assert_false(sd_pb_state_view_of(&empty, &v));
    empty.spec_case = PL_K(STATE_SPEC__SPEC_BAG_SPEC);
    assert_false(sd_pb_state_view_of(&empty, &v));
    const char *ids[2] = { "x", "y" };
    sd_pb_state_coder_ids(NULL, ids);
    assert_null(ids[0]);
    assert_null(ids[1]);

    /* Names are distinct; the protocols are the user-state URNs, and only they are known. */
    for (int k = 0; k < (int)SD_USER_STATE_KIND_COUNT; k++) {
        const sd_user_state_row *r = sd_user_state_row_of((sd_user_state_kind)k);
        assert_true(strncmp(r->protocol, "beam:user_state:", 16) == 0);
        for (int j = k + 1; j < (int)SD_USER_STATE_KIND_COUNT; j++) {
            assert_string_not_equal(r->name, sd_user_state_name((sd_user_state_kind)j));
        }
    }
    assert_true(sd_user_state_protocol_known(SD_URN_USER_STATE_BAG));
    assert_true(sd_user_state_protocol_known(SD_URN_USER_STATE_MULTIMAP));
    assert_true(sd_user_state_protocol_known(SD_URN_USER_STATE_ORDERED_LIST));
    assert_false(sd_user_state_protocol_known("beam:user_state:set:v1"));
    assert_false(sd_user_state_protocol_known(""));
    assert_string_equal(sd_user_state_name(SD_USER_STATE_ORDERED_LIST), "ordered-list");
    assert_int_equal(sd_user_state_row_of(SD_USER_STATE_ORDERED_LIST)->key,
                     SD_STATE_KEY_ORDERED_LIST);
    assert_int_equal(sd_user_state_row_of(SD_USER_STATE_COMBINING)->key, SD_STATE_KEY_BAG);
}

/* The transform families as tables: each member once, in its family's URN namespace. */
static void test_urn_families(void **state)
{
    (void)state;
#define URN_OF(name, urn) urn,
    static const char *const combine[] = { SD_URN_COMBINE_COMPONENTS(URN_OF) };
    static const char *const sdf[] = { SD_URN_SDF_COMPONENTS(URN_OF) };
#undef URN_OF
    assert_int_equal(COUNT(combine), 5);
    assert_int_equal(COUNT(sdf), 4);
    for (size_t i = 0; i < COUNT(combine); i++) {
        assert_true(strncmp(combine[i], "beam:transform:combine_", 23) == 0);
        for (size_t j = i + 1; j < COUNT(combine); j++) {
            assert_string_not_equal(combine[i], combine[j]);
        }
    }
    for (size_t i = 0; i < COUNT(sdf); i++) {
        assert_true(strncmp(sdf[i], "beam:transform:sdf_", 19) == 0);
        for (size_t j = i + 1; j < COUNT(sdf); j++) {
            assert_string_not_equal(sdf[i], sdf[j]);
        }
    }
}

/* The URNs whose spelling is easy to get wrong, checked letter for letter. */
static void test_urns_tricky_spellings(void **state)
{
    (void)state;
    assert_string_equal(SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS,
                        "beam:transform:sdf_process_sized_element_and_restrictions:v1");
    assert_string_equal(SD_URN_TRANSFORM_SDF_TRUNCATE_SIZED_RESTRICTIONS,
                        "beam:transform:sdf_truncate_sized_restrictions:v1");
    assert_string_equal(SD_URN_TRANSFORM_WINDOW_INTO, "beam:transform:window_into:v1");
    assert_string_equal(SD_URN_TRANSFORM_TEST_STREAM, "beam:transform:teststream:v1");
    assert_string_equal(SD_URN_PROTOCOL_LEGACY_PROGRESS_REPORTING,
                        "beam:protocol:progress_reporting:v0");
    assert_string_equal(SD_URN_TRANSFORM_PUBSUB_WRITE_V2, "beam:transform:pubsub_write:v2");
    assert_string_equal(SD_URN_METRIC_ELEMENT_COUNT, "beam:metric:element_count:v1");
    assert_string_equal(SD_URN_METRIC_TYPE_SUM_INT64, "beam:metrics:sum_int64:v1");
    assert_string_equal(SD_LABEL_PTRANSFORM, "PTRANSFORM");
    assert_int_equal(strncmp(SD_URN_METRIC_USER_SUM_INT64, SD_URN_METRIC_USER_PREFIX,
                             sizeof(SD_URN_METRIC_USER_PREFIX) - 1),
                     0);
}

/* ========================================================================================= */
/* OOM loop: unpack through an allocator that fails on the Nth call.                          */
/* ========================================================================================= */

static long live_allocations;

static void *counting_alloc(void *data, size_t size)
{
    (void)data;
    void *p = sd_malloc(size);
    if (p != NULL) {
        live_allocations++;
    }
    return p;
}

static void counting_free(void *data, void *p)
{
    (void)data;
    if (p != NULL) {
        live_allocations--;
    }
    sd_free(p);
}

static void test_unpack_oom_loop(void **state)
{
    ProtobufCAllocator alloc = { .alloc = counting_alloc,
                                 .free = counting_free,
                                 .allocator_data = NULL };
    FN(InstructionResponse) *r = NULL;
    long n;
    (void)state;
    for (n = 1; n < 1000; n++) {
        live_allocations = 0;
        sd_alloc_fail_after(n, 1);
        r = FN_(instruction_response__unpack)(&alloc, sizeof(bundle_response), bundle_response);
        long injected = sd_alloc_injected_failures();
        sd_alloc_fail_after(0, 0);
        if (r != NULL) {
            assert_int_equal(injected, 0);
            break;
        }
        assert_true(injected > 0);
        if (live_allocations != 0) {
            fail_msg("failing allocation %ld leaked %ld blocks", n, live_allocations);
        }
    }
    assert_non_null(r);
    assert_true(n > 1);
    assert_int_equal(r->process_bundle->n_monitoring_data, 1);
    FN_(instruction_response__free_unpacked)(r, &alloc);
    assert_int_equal(live_allocations, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_exact_bytes),
        cmocka_unit_test(test_unpack_field_order),
        cmocka_unit_test(test_unpack_instruction_response),
        cmocka_unit_test(test_unknown_fields_survive),
        cmocka_unit_test(test_repeated_packed_and_unpacked),
        cmocka_unit_test(test_malformed_rejected),
        cmocka_unit_test(test_service_methods),
        cmocka_unit_test(test_job_service_method_list),
        cmocka_unit_test(test_enum_numbers),
        cmocka_unit_test(test_urns_well_formed),
        cmocka_unit_test(test_urns_tricky_spellings),
        cmocka_unit_test(test_state_kinds_table),
        cmocka_unit_test(test_urn_families),
        cmocka_unit_test(test_unpack_oom_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
