/* Sundial: short names for the protobuf-c types used by the Fn API, the executor and the C SDK. */
#ifndef SD_PROTO_PB_H
#define SD_PROTO_PB_H

#include "org/apache/beam/model/fn_execution/v1/beam_fn_api.pb-c.h"
#include "org/apache/beam/model/fn_execution/v1/beam_provision_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/beam_runner_api.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/endpoints.pb-c.h"
#include "org/apache/beam/model/pipeline/v1/metrics.pb-c.h"

#define SD_FN(x) Org__Apache__Beam__Model__FnExecution__V1__##x
#define SD_PL(x) Org__Apache__Beam__Model__Pipeline__V1__##x

typedef SD_FN(InstructionRequest) pb_InstructionRequest;
typedef SD_FN(InstructionResponse) pb_InstructionResponse;
typedef SD_FN(ProcessBundleRequest) pb_ProcessBundleRequest;
typedef SD_FN(ProcessBundleResponse) pb_ProcessBundleResponse;
typedef SD_FN(ProcessBundleSplitRequest) pb_ProcessBundleSplitRequest;
typedef SD_FN(ProcessBundleSplitRequest__DesiredSplit) pb_DesiredSplit;
typedef SD_FN(ProcessBundleSplitRequest__DesiredSplitsEntry) pb_DesiredSplitsEntry;
typedef SD_FN(ProcessBundleSplitResponse) pb_ProcessBundleSplitResponse;
typedef SD_FN(GetProcessBundleDescriptorRequest) pb_GetProcessBundleDescriptorRequest;
typedef SD_FN(Elements) pb_Elements;
typedef SD_FN(Elements__Data) pb_Elements_Data;
typedef SD_FN(Elements__Timers) pb_Elements_Timers;
typedef SD_FN(StateRequest) pb_StateRequest;
typedef SD_FN(StateResponse) pb_StateResponse;
typedef SD_FN(StateGetResponse) pb_StateGetResponse;
typedef SD_FN(StateAppendResponse) pb_StateAppendResponse;
typedef SD_FN(StateClearResponse) pb_StateClearResponse;
typedef SD_FN(StateKey) pb_StateKey;
typedef SD_FN(LogEntry) pb_LogEntry;
typedef SD_FN(LogEntry__List) pb_LogEntry_List;
typedef SD_FN(LogControl) pb_LogControl;
typedef SD_FN(StartWorkerRequest) pb_StartWorkerRequest;
typedef SD_FN(StartWorkerResponse) pb_StartWorkerResponse;
typedef SD_FN(StopWorkerRequest) pb_StopWorkerRequest;
typedef SD_FN(StopWorkerResponse) pb_StopWorkerResponse;
typedef SD_FN(GetProvisionInfoRequest) pb_GetProvisionInfoRequest;
typedef SD_FN(GetProvisionInfoResponse) pb_GetProvisionInfoResponse;
typedef SD_FN(ProvisionInfo) pb_ProvisionInfo;
typedef SD_FN(DelayedBundleApplication) pb_DelayedBundleApplication;
typedef SD_PL(ApiServiceDescriptor) pb_ApiServiceDescriptor;
typedef SD_PL(MonitoringInfo) pb_MonitoringInfo;
typedef SD_PL(Pipeline) pb_Pipeline;
typedef SD_PL(Environment) pb_Environment;
typedef SD_PL(ExternalPayload) pb_ExternalPayload;
typedef SD_PL(ProcessPayload) pb_ProcessPayload;

/* Full gRPC method paths of the Fn API. */
#define SD_PATH_CONTROL "/org.apache.beam.model.fn_execution.v1.BeamFnControl/Control"
#define SD_PATH_GET_PBD \
    "/org.apache.beam.model.fn_execution.v1.BeamFnControl/GetProcessBundleDescriptor"
#define SD_PATH_DATA      "/org.apache.beam.model.fn_execution.v1.BeamFnData/Data"
#define SD_PATH_STATE     "/org.apache.beam.model.fn_execution.v1.BeamFnState/State"
#define SD_PATH_LOGGING   "/org.apache.beam.model.fn_execution.v1.BeamFnLogging/Logging"
#define SD_PATH_PROVISION "/org.apache.beam.model.fn_execution.v1.ProvisionService/GetProvisionInfo"
#define SD_PATH_START_WORKER \
    "/org.apache.beam.model.fn_execution.v1.BeamFnExternalWorkerPool/StartWorker"
#define SD_PATH_STOP_WORKER \
    "/org.apache.beam.model.fn_execution.v1.BeamFnExternalWorkerPool/StopWorker"

#endif
