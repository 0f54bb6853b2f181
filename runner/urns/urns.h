/*
 * Sundial: the URN strings of Beam's portable model, as C string literals.
 *
 * Beam names transforms, coders, window fns, environments, protocols, artifacts and metrics by
 * URN. In Beam's .proto files these strings hang off enum values as custom options, which
 * protoc-c does not expose, so Sundial's proto subset (proto/) keeps only the enum numbers and
 * every string lives here instead. This header is pure C: no protobuf-c, no gRPC, usable by the
 * engine, the planner and the SDK harness alike.
 *
 * Naming: SD_URN_<FAMILY>_<NAME>. Metric type URNs are SD_URN_METRIC_TYPE_*, metric identities
 * are SD_URN_METRIC_*, and monitoring-info label keys are SD_LABEL_* (they are keys, not URNs).
 * Each group notes the Beam enum it mirrors so the two can be checked side by side. URNs that
 * come from SDK conventions rather than a Beam enum say so.
 *
 * Every value is a string literal, so `sizeof(SD_URN_X) - 1` is its length and adjacent-literal
 * concatenation works. Compare with strcmp or sd_bytes equality; never by pointer.
 */
#ifndef SD_RUNNER_URNS_URNS_H
#define SD_RUNNER_URNS_URNS_H

/* ----------------------------------------------------------------------------------------- */
/* Primitive transforms (StandardPTransforms.Primitives).                                    */
/* ----------------------------------------------------------------------------------------- */

#define SD_URN_TRANSFORM_PARDO         "beam:transform:pardo:v1"
#define SD_URN_TRANSFORM_FLATTEN       "beam:transform:flatten:v1"
#define SD_URN_TRANSFORM_GROUP_BY_KEY  "beam:transform:group_by_key:v1"
#define SD_URN_TRANSFORM_IMPULSE       "beam:transform:impulse:v1"
#define SD_URN_TRANSFORM_WINDOW_INTO   "beam:transform:window_into:v1"
#define SD_URN_TRANSFORM_TEST_STREAM   "beam:transform:teststream:v1"
#define SD_URN_TRANSFORM_MAP_WINDOWS   "beam:transform:map_windows:v1"
#define SD_URN_TRANSFORM_MERGE_WINDOWS "beam:transform:merge_windows:v1"
#define SD_URN_TRANSFORM_TO_STRING     "beam:transform:to_string:v1"

/* Deprecated primitives (StandardPTransforms.DeprecatedPrimitives). */
#define SD_URN_TRANSFORM_READ        "beam:transform:read:v1"
#define SD_URN_TRANSFORM_CREATE_VIEW "beam:transform:create_view:v1"

/* ----------------------------------------------------------------------------------------- */
/* Composite transforms (StandardPTransforms.Composites).                                    */
/* ----------------------------------------------------------------------------------------- */

#define SD_URN_TRANSFORM_COMBINE_PER_KEY  "beam:transform:combine_per_key:v1"
#define SD_URN_TRANSFORM_COMBINE_GLOBALLY "beam:transform:combine_globally:v1"
#define SD_URN_TRANSFORM_RESHUFFLE        "beam:transform:reshuffle:v1"
#define SD_URN_TRANSFORM_WRITE_FILES      "beam:transform:write_files:v1"
#define SD_URN_TRANSFORM_PUBSUB_READ      "beam:transform:pubsub_read:v1"
#define SD_URN_TRANSFORM_PUBSUB_WRITE     "beam:transform:pubsub_write:v1"
#define SD_URN_TRANSFORM_PUBSUB_WRITE_V2  "beam:transform:pubsub_write:v2"
#define SD_URN_TRANSFORM_GROUP_INTO_BATCHES_WITH_SHARDED_KEY \
    "beam:transform:group_into_batches_with_sharded_key:v1"
#define SD_URN_TRANSFORM_REDISTRIBUTE_BY_KEY      "beam:transform:redistribute_by_key:v1"
#define SD_URN_TRANSFORM_REDISTRIBUTE_ARBITRARILY "beam:transform:redistribute_arbitrarily:v1"

/* Lifted combine components (StandardPTransforms.CombineComponents). */
#define SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE "beam:transform:combine_per_key_precombine:v1"
#define SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS \
    "beam:transform:combine_per_key_merge_accumulators:v1"
#define SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS \
    "beam:transform:combine_per_key_extract_outputs:v1"
#define SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES "beam:transform:combine_grouped_values:v1"
#define SD_URN_TRANSFORM_COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS \
    "beam:transform:combine_per_key_convert_to_accumulators:v1"

/*
 * Splittable DoFn expansion (StandardPTransforms.SplittableParDoComponents). Note the singular
 * "element" in the process URN and the plural "restrictions" in the truncate URN.
 */
#define SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION "beam:transform:sdf_pair_with_restriction:v1"
#define SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS \
    "beam:transform:sdf_split_and_size_restrictions:v1"
#define SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS \
    "beam:transform:sdf_process_sized_element_and_restrictions:v1"
#define SD_URN_TRANSFORM_SDF_TRUNCATE_SIZED_RESTRICTIONS \
    "beam:transform:sdf_truncate_sized_restrictions:v1"

/*
 * The same two families as tables, X(NAME, URN), for code that treats every member alike (the
 * planner's "runs in an SDK" test, the C SDK's capabilities and its operation per URN). NAME
 * is the member's short name: the C SDK's OP_<NAME> and SDF_<NAME>.
 */
#define SD_URN_COMBINE_COMPONENTS(X)                                     \
    X(PRECOMBINE, SD_URN_TRANSFORM_COMBINE_PER_KEY_PRECOMBINE)           \
    X(MERGE, SD_URN_TRANSFORM_COMBINE_PER_KEY_MERGE_ACCUMULATORS)        \
    X(EXTRACT, SD_URN_TRANSFORM_COMBINE_PER_KEY_EXTRACT_OUTPUTS)         \
    X(CONVERT, SD_URN_TRANSFORM_COMBINE_PER_KEY_CONVERT_TO_ACCUMULATORS) \
    X(COMBINE_GROUPED, SD_URN_TRANSFORM_COMBINE_GROUPED_VALUES)
#define SD_URN_SDF_COMPONENTS(X)                                             \
    X(PAIR, SD_URN_TRANSFORM_SDF_PAIR_WITH_RESTRICTION)                      \
    X(SPLIT, SD_URN_TRANSFORM_SDF_SPLIT_AND_SIZE_RESTRICTIONS)               \
    X(PROCESS, SD_URN_TRANSFORM_SDF_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS) \
    X(TRUNCATE, SD_URN_TRANSFORM_SDF_TRUNCATE_SIZED_RESTRICTIONS)

/* StandardPTransforms.GroupIntoBatchesComponents. */
#define SD_URN_TRANSFORM_GROUP_INTO_BATCHES "beam:transform:group_into_batches:v1"

/* Runner-inserted data-plane transforms (fn_execution FnApiTransforms.Runner). */
#define SD_URN_RUNNER_SOURCE "beam:runner:source:v1"
#define SD_URN_RUNNER_SINK   "beam:runner:sink:v1"

/* ----------------------------------------------------------------------------------------- */
/* Side inputs and user state.                                                               */
/* ----------------------------------------------------------------------------------------- */

/* StandardSideInputTypes.Enum (SideInput.access_pattern.urn). */
#define SD_URN_SIDE_INPUT_ITERABLE "beam:side_input:iterable:v1"
#define SD_URN_SIDE_INPUT_MULTIMAP "beam:side_input:multimap:v1"

/*
 * Window mapping fns (SideInput.window_mapping_fn.urn). Not a Beam proto enum: these are the
 * strings the Go and TypeScript SDKs emit.
 */
#define SD_URN_WINDOW_MAPPING_GLOBAL               "beam:window_mapping_fn:global:v1"
#define SD_URN_WINDOW_MAPPING_IDENTITY             "beam:window_mapping_fn:identity:v1"
#define SD_URN_WINDOW_MAPPING_ASSIGN_MAX_TIMESTAMP "beam:window_mapping_fn:assign_max_timestamp:v1"

/* StandardUserStateTypes.Enum (StateSpec.protocol.urn). */
#define SD_URN_USER_STATE_BAG          "beam:user_state:bag:v1"
#define SD_URN_USER_STATE_MULTIMAP     "beam:user_state:multimap:v1"
#define SD_URN_USER_STATE_ORDERED_LIST "beam:user_state:ordered_list:v1"

/* ----------------------------------------------------------------------------------------- */
/* Coders (StandardCoders.Enum).                                                             */
/* ----------------------------------------------------------------------------------------- */

#define SD_URN_CODER_BYTES                 "beam:coder:bytes:v1"
#define SD_URN_CODER_STRING_UTF8           "beam:coder:string_utf8:v1"
#define SD_URN_CODER_KV                    "beam:coder:kv:v1"
#define SD_URN_CODER_BOOL                  "beam:coder:bool:v1"
#define SD_URN_CODER_VARINT                "beam:coder:varint:v1"
#define SD_URN_CODER_DOUBLE                "beam:coder:double:v1"
#define SD_URN_CODER_ITERABLE              "beam:coder:iterable:v1"
#define SD_URN_CODER_TIMER                 "beam:coder:timer:v1"
#define SD_URN_CODER_INTERVAL_WINDOW       "beam:coder:interval_window:v1"
#define SD_URN_CODER_LENGTH_PREFIX         "beam:coder:length_prefix:v1"
#define SD_URN_CODER_GLOBAL_WINDOW         "beam:coder:global_window:v1"
#define SD_URN_CODER_WINDOWED_VALUE        "beam:coder:windowed_value:v1"
#define SD_URN_CODER_PARAM_WINDOWED_VALUE  "beam:coder:param_windowed_value:v1"
#define SD_URN_CODER_STATE_BACKED_ITERABLE "beam:coder:state_backed_iterable:v1"
#define SD_URN_CODER_CUSTOM_WINDOW         "beam:coder:custom_window:v1"
#define SD_URN_CODER_ROW                   "beam:coder:row:v1"
#define SD_URN_CODER_SHARDED_KEY           "beam:coder:sharded_key:v1"
#define SD_URN_CODER_NULLABLE              "beam:coder:nullable:v1"

/* Beam's Go SDK's own coders (opaque to runners; length first, in every context). */
#define SD_URN_CODER_GO_CUSTOM "beam:go:coder:custom:v1"

/* Beam's TypeScript SDK's coder of any JavaScript value (opaque to runners). */
#define SD_URN_CODER_TS_GENERIC_OBJECT "beam:coder:genericobjectjs:v1"

/* ----------------------------------------------------------------------------------------- */
/* Window fns (standard_window_fns.proto: <Name>Payload.Enum.PROPERTIES).                    */
/* ----------------------------------------------------------------------------------------- */

#define SD_URN_WINDOW_FN_GLOBAL  "beam:window_fn:global_windows:v1"
#define SD_URN_WINDOW_FN_FIXED   "beam:window_fn:fixed_windows:v1"
#define SD_URN_WINDOW_FN_SLIDING "beam:window_fn:sliding_windows:v1"
#define SD_URN_WINDOW_FN_SESSION "beam:window_fn:session_windows:v1"

/* ----------------------------------------------------------------------------------------- */
/* Environments (StandardEnvironments.Environments).                                         */
/* ----------------------------------------------------------------------------------------- */

#define SD_URN_ENV_DOCKER   "beam:env:docker:v1"
#define SD_URN_ENV_PROCESS  "beam:env:process:v1"
#define SD_URN_ENV_EXTERNAL "beam:env:external:v1"
#define SD_URN_ENV_DEFAULT  "beam:env:default:v1"
#define SD_URN_ENV_ANYOF    "beam:env:anyof:v1"

/* ----------------------------------------------------------------------------------------- */
/* Capabilities and requirements.                                                            */
/* ----------------------------------------------------------------------------------------- */

/* SDK capabilities, listed in Environment.capabilities (StandardProtocols.Enum). */
#define SD_URN_PROTOCOL_LEGACY_PROGRESS_REPORTING    "beam:protocol:progress_reporting:v0"
#define SD_URN_PROTOCOL_PROGRESS_REPORTING           "beam:protocol:progress_reporting:v1"
#define SD_URN_PROTOCOL_WORKER_STATUS                "beam:protocol:worker_status:v1"
#define SD_URN_PROTOCOL_MULTI_CORE_BUNDLE_PROCESSING "beam:protocol:multi_core_bundle_processing:v1"
#define SD_URN_PROTOCOL_HARNESS_MONITORING_INFOS     "beam:protocol:harness_monitoring_infos:v1"
#define SD_URN_PROTOCOL_SIBLING_WORKERS              "beam:protocol:sibling_workers:v1"
#define SD_URN_PROTOCOL_CONTROL_REQUEST_ELEMENTS_EMBEDDING \
    "beam:protocol:control_request_elements_embedding:v1"
#define SD_URN_PROTOCOL_STATE_CACHING               "beam:protocol:state_caching:v1"
#define SD_URN_PROTOCOL_DATA_SAMPLING               "beam:protocol:data_sampling:v1"
#define SD_URN_PROTOCOL_SDK_CONSUMING_RECEIVED_DATA "beam:protocol:sdk_consuming_received_data:v1"
#define SD_URN_PROTOCOL_ORDERED_LIST_STATE          "beam:protocol:ordered_list_state:v1"

/*
 * Sundial's own SDK capability (its C SDK declares it): the harness takes its descriptors in
 * a RegisterRequest on the control stream, which the runner sends before the first bundle
 * that names them, instead of fetching each with GetProcessBundleDescriptor.
 */
#define SD_URN_PROTOCOL_SUNDIAL_REGISTER_DESCRIPTORS "beam:protocol:sundial_register_descriptors:v1"

/* Runner capabilities, sent in ProvisionInfo.runner_capabilities (StandardRunnerProtocols). */
#define SD_URN_RUNNER_PROTOCOL_MONITORING_INFO_SHORT_IDS \
    "beam:protocol:monitoring_info_short_ids:v1"
#define SD_URN_RUNNER_PROTOCOL_CONTROL_RESPONSE_ELEMENTS_EMBEDDING \
    "beam:protocol:control_response_elements_embedding:v1"
#define SD_URN_RUNNER_PROTOCOL_MULTIMAP_KEYS_VALUES_SIDE_INPUT \
    "beam:protocol:multimap_keys_values_side_input:v1"

/* Pipeline.requirements (StandardRequirements.Enum). */
#define SD_URN_REQUIREMENT_STATEFUL_PROCESSING  "beam:requirement:pardo:stateful:v1"
#define SD_URN_REQUIREMENT_BUNDLE_FINALIZATION  "beam:requirement:pardo:finalization:v1"
#define SD_URN_REQUIREMENT_STABLE_INPUT         "beam:requirement:pardo:stable_input:v1"
#define SD_URN_REQUIREMENT_TIME_SORTED_INPUT    "beam:requirement:pardo:time_sorted_input:v1"
#define SD_URN_REQUIREMENT_SPLITTABLE_DOFN      "beam:requirement:pardo:splittable_dofn:v1"
#define SD_URN_REQUIREMENT_ON_WINDOW_EXPIRATION "beam:requirement:pardo:on_window_expiration:v1"

/* ----------------------------------------------------------------------------------------- */
/* Artifacts (StandardArtifacts.Types and .Roles).                                           */
/* ----------------------------------------------------------------------------------------- */

#define SD_URN_ARTIFACT_TYPE_FILE     "beam:artifact:type:file:v1"
#define SD_URN_ARTIFACT_TYPE_URL      "beam:artifact:type:url:v1"
#define SD_URN_ARTIFACT_TYPE_EMBEDDED "beam:artifact:type:embedded:v1"
#define SD_URN_ARTIFACT_TYPE_PYPI     "beam:artifact:type:pypi:v1"
#define SD_URN_ARTIFACT_TYPE_MAVEN    "beam:artifact:type:maven:v1"
#define SD_URN_ARTIFACT_TYPE_DEFERRED "beam:artifact:type:deferred:v1"

#define SD_URN_ARTIFACT_ROLE_STAGING_TO            "beam:artifact:role:staging_to:v1"
#define SD_URN_ARTIFACT_ROLE_PIP_REQUIREMENTS_FILE "beam:artifact:role:pip_requirements_file:v1"
#define SD_URN_ARTIFACT_ROLE_GO_WORKER_BINARY      "beam:artifact:role:go_worker_binary:v1"

/* ----------------------------------------------------------------------------------------- */
/* Display data and resource hints.                                                          */
/* ----------------------------------------------------------------------------------------- */

#define SD_URN_DISPLAY_DATA_LABELLED "beam:display_data:labelled:v1"

#define SD_URN_RESOURCE_HINT_ACCELERATOR   "beam:resources:accelerator:v1"
#define SD_URN_RESOURCE_HINT_MIN_RAM_BYTES "beam:resources:min_ram_bytes:v1"
#define SD_URN_RESOURCE_HINT_CPU_COUNT     "beam:resources:cpu_count:v1"

/* ----------------------------------------------------------------------------------------- */
/* Metrics: type URNs (MonitoringInfoTypeUrns.Enum), naming MonitoringInfo.payload's format. */
/* ----------------------------------------------------------------------------------------- */

#define SD_URN_METRIC_TYPE_SUM_INT64           "beam:metrics:sum_int64:v1"
#define SD_URN_METRIC_TYPE_SUM_DOUBLE          "beam:metrics:sum_double:v1"
#define SD_URN_METRIC_TYPE_DISTRIBUTION_INT64  "beam:metrics:distribution_int64:v1"
#define SD_URN_METRIC_TYPE_DISTRIBUTION_DOUBLE "beam:metrics:distribution_double:v1"
#define SD_URN_METRIC_TYPE_LATEST_INT64        "beam:metrics:latest_int64:v1"
#define SD_URN_METRIC_TYPE_LATEST_DOUBLE       "beam:metrics:latest_double:v1"
#define SD_URN_METRIC_TYPE_TOP_N_INT64         "beam:metrics:top_n_int64:v1"
#define SD_URN_METRIC_TYPE_TOP_N_DOUBLE        "beam:metrics:top_n_double:v1"
#define SD_URN_METRIC_TYPE_BOTTOM_N_INT64      "beam:metrics:bottom_n_int64:v1"
#define SD_URN_METRIC_TYPE_BOTTOM_N_DOUBLE     "beam:metrics:bottom_n_double:v1"
#define SD_URN_METRIC_TYPE_PROGRESS            "beam:metrics:progress:v1"
#define SD_URN_METRIC_TYPE_SET_STRING          "beam:metrics:set_string:v1"
#define SD_URN_METRIC_TYPE_BOUNDED_TRIE        "beam:metrics:bounded_trie:v1"
#define SD_URN_METRIC_TYPE_HISTOGRAM_INT64     "beam:metrics:histogram_int64:v1"

/* ----------------------------------------------------------------------------------------- */
/* Metrics: identities (MonitoringInfoSpecs.Enum). Each comment gives type; required labels. */
/* ----------------------------------------------------------------------------------------- */

/* User metrics: the matching type URN; labels PTRANSFORM, NAMESPACE, NAME. */
#define SD_URN_METRIC_USER_SUM_INT64           "beam:metric:user:sum_int64:v1"
#define SD_URN_METRIC_USER_SUM_DOUBLE          "beam:metric:user:sum_double:v1"
#define SD_URN_METRIC_USER_DISTRIBUTION_INT64  "beam:metric:user:distribution_int64:v1"
#define SD_URN_METRIC_USER_DISTRIBUTION_DOUBLE "beam:metric:user:distribution_double:v1"
#define SD_URN_METRIC_USER_LATEST_INT64        "beam:metric:user:latest_int64:v1"
#define SD_URN_METRIC_USER_LATEST_DOUBLE       "beam:metric:user:latest_double:v1"
#define SD_URN_METRIC_USER_TOP_N_INT64         "beam:metric:user:top_n_int64:v1"
#define SD_URN_METRIC_USER_TOP_N_DOUBLE        "beam:metric:user:top_n_double:v1"
#define SD_URN_METRIC_USER_BOTTOM_N_INT64      "beam:metric:user:bottom_n_int64:v1"
#define SD_URN_METRIC_USER_BOTTOM_N_DOUBLE     "beam:metric:user:bottom_n_double:v1"
#define SD_URN_METRIC_USER_SET_STRING          "beam:metric:user:set_string:v1"
#define SD_URN_METRIC_USER_BOUNDED_TRIE        "beam:metric:user:bounded_trie:v1"
#define SD_URN_METRIC_USER_HISTOGRAM_INT64     "beam:metric:user:histogram_int64:v1"

/* Every user metric URN starts with this prefix. */
#define SD_URN_METRIC_USER_PREFIX "beam:metric:user:"

/* sum_int64; PCOLLECTION. */
/*
 * Sundial's own, from its C SDK with a bundle's response (latest_int64, payload varint wall ms,
 * varint value; no labels): the wall-clock ms the bundle's DoFns saw as processing time, the
 * base the runner rebases the bundle's processing-time timers from on the synthetic clock. It
 * is consumed by the runner, not published with the job's metrics.
 */
#define SD_URN_METRIC_SUNDIAL_PROCESSING_TIME_BASE "beam:metric:sundial:processing_time_base:v1"
#define SD_URN_METRIC_ELEMENT_COUNT                "beam:metric:element_count:v1"
/* distribution_int64; PCOLLECTION. */
#define SD_URN_METRIC_SAMPLED_BYTE_SIZE "beam:metric:sampled_byte_size:v1"
/* sum_int64; PTRANSFORM. */
#define SD_URN_METRIC_START_BUNDLE_MSECS "beam:metric:pardo_execution_time:start_bundle_msecs:v1"
#define SD_URN_METRIC_PROCESS_BUNDLE_MSECS \
    "beam:metric:pardo_execution_time:process_bundle_msecs:v1"
#define SD_URN_METRIC_FINISH_BUNDLE_MSECS "beam:metric:pardo_execution_time:finish_bundle_msecs:v1"
#define SD_URN_METRIC_TOTAL_MSECS         "beam:metric:ptransform_execution_time:total_msecs:v1"
/* progress; PTRANSFORM. */
#define SD_URN_METRIC_WORK_REMAINING "beam:metric:ptransform_progress:remaining:v1"
#define SD_URN_METRIC_WORK_COMPLETED "beam:metric:ptransform_progress:completed:v1"
/* sum_int64; PTRANSFORM. */
#define SD_URN_METRIC_DATA_CHANNEL_READ_INDEX "beam:metric:data_channel:read_index:v1"
/* sum_int64; SERVICE, METHOD, RESOURCE, PTRANSFORM, STATUS. */
#define SD_URN_METRIC_API_REQUEST_COUNT "beam:metric:io:api_request_count:v1"
/* histogram_int64; SERVICE, METHOD, RESOURCE, PTRANSFORM. */
#define SD_URN_METRIC_API_REQUEST_LATENCIES "beam:metric:io:api_request_latencies:v1"

/*
 * Sundial's own runner metrics (runner/exec/exec_metrics.c publishes them per stage, labelled
 * SUNDIAL_STAGE; the C SDK's job client reads the watermarks back): input and output
 * watermark (latest_int64), the job clock (latest_int64) and late elements dropped (sum_int64).
 */
#define SD_URN_METRIC_SUNDIAL_INPUT_WATERMARK  "beam:metric:sundial:input_watermark:v1"
#define SD_URN_METRIC_SUNDIAL_OUTPUT_WATERMARK "beam:metric:sundial:output_watermark:v1"
#define SD_URN_METRIC_SUNDIAL_CLOCK            "beam:metric:sundial:clock:v1"
#define SD_URN_METRIC_SUNDIAL_DROPPED_LATE     "beam:metric:sundial:dropped_late_elements:v1"

/* ----------------------------------------------------------------------------------------- */
/* MonitoringInfo label keys (MonitoringInfo.MonitoringInfoLabels; keys of `labels`).         */
/* ----------------------------------------------------------------------------------------- */

/* The enum value is TRANSFORM but the key string on the wire is "PTRANSFORM". */
#define SD_LABEL_PTRANSFORM         "PTRANSFORM"
#define SD_LABEL_PCOLLECTION        "PCOLLECTION"
#define SD_LABEL_WINDOWING_STRATEGY "WINDOWING_STRATEGY"
#define SD_LABEL_CODER              "CODER"
#define SD_LABEL_ENVIRONMENT        "ENVIRONMENT"
#define SD_LABEL_NAMESPACE          "NAMESPACE"
#define SD_LABEL_NAME               "NAME"
#define SD_LABEL_SERVICE            "SERVICE"
#define SD_LABEL_METHOD             "METHOD"
#define SD_LABEL_RESOURCE           "RESOURCE"
#define SD_LABEL_STATUS             "STATUS"

/* Sundial's own label: the runner stage a runner metric is about. Not PTRANSFORM, which names
 * a transform of the pipeline (a stage is not one), and which clients use to file a metric
 * under a step: the Go SDK logs every URN it does not know that carries one. */
#define SD_LABEL_SUNDIAL_STAGE "SUNDIAL_STAGE"

/* The local name of a GroupByKey's late-data output (a dead letter, Sundial's own): the C
 * SDK's sd_group_by_key_late makes it, the planner routes the GroupByKey's late data to it. */
#define SD_GBK_LATE_OUTPUT_TAG "sundial_late"
/* The output the planner gives a GroupByKey over a custom merging window fn: its requests to the
 * SDK's merge_windows (runner/plan/merge.c). */
#define SD_GBK_MERGE_OUTPUT_TAG "sundial_merge_requests"

#endif /* SD_RUNNER_URNS_URNS_H */
