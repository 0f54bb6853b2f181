/*
 * Unit tests for runner/engine: the element manager driven like an executor would drive it.
 *
 * This file is only the group runner of the test_engine binary. The fake executor, the bundle
 * shapes and the case driver are in engine_harness.h/.c; the tests are split by engine concern
 * into test_engine_graph.c, test_engine_gbk.c, test_engine_timers.c, test_engine_teststream.c,
 * test_engine_triggers.c, test_engine_state.c, test_engine_robustness.c, test_engine_drain.c and
 * test_engine_livelock.c. The list below keeps the order the tests ran in when they were one
 * file (newer tests are added before the OOM loop).
 */
#include "engine_harness.h"

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundle_output_cap),
        cmocka_unit_test(test_two_teststreams),
        cmocka_unit_test(test_wordcount),
        cmocka_unit_test(test_windows_table),
        cmocka_unit_test(test_flatten),
        cmocka_unit_test(test_flatten_no_inputs),
        cmocka_unit_test(test_time_sorted_input),
        cmocka_unit_test(test_side_inputs),
        cmocka_unit_test(test_side_input_waits_for_producer),
        cmocka_unit_test(test_side_input_window_mapping),
        cmocka_unit_test(test_triggered_side_inputs),
        cmocka_unit_test(test_triggered_side_in_flight),
        cmocka_unit_test(test_channel_split),
        cmocka_unit_test(test_fail_bundle_retries_cleanly),
        cmocka_unit_test(test_bad_output_bytes_fail_the_bundle),
        cmocka_unit_test(test_output_cut_anywhere),
        cmocka_unit_test(test_byte_cap),
        cmocka_unit_test(test_stuck_dump),
        cmocka_unit_test(test_graph_errors),
        cmocka_unit_test(test_event_time_timers_and_state),
        cmocka_unit_test(test_looping_timer),
        cmocka_unit_test(test_user_state_is_tentative),
        cmocka_unit_test(test_stateful_split_keeps_keys_locked),
        cmocka_unit_test(test_processing_time_timer_synthetic_clock),
        cmocka_unit_test(test_processing_time_base),
        cmocka_unit_test(test_processing_time_timer_wall_clock),
        cmocka_unit_test(test_delayed_residuals),
        cmocka_unit_test(test_teststream),
        cmocka_unit_test(test_teststream_clock_drives_processing_time),
        cmocka_unit_test(test_event_time_timer_waits_for_the_watermark),
        cmocka_unit_test(test_triggers),
        cmocka_unit_test(test_session_triggers),
        cmocka_unit_test(test_state_of_expired_windows_is_dropped),
        cmocka_unit_test(test_processing_time_trigger_synthetic),
        cmocka_unit_test(test_on_window_expiration),
        cmocka_unit_test(test_on_window_expiration_holds_output),
        cmocka_unit_test(test_on_window_expiration_spec_errors),
        cmocka_unit_test(test_ordered_list_state),
        cmocka_unit_test(test_late_data_dead_letter),
        cmocka_unit_test(test_late_output_errors),
        cmocka_unit_test(test_schedule_seed_is_deterministic),
        cmocka_unit_test(test_schedule_seed_catches_order_dependence),
        cmocka_unit_test(test_schedule_record_replay),
        cmocka_unit_test(test_schedule_tampered_fails),
        cmocka_unit_test(test_schedule_file_errors),
        cmocka_unit_test(test_schedule_split_answers),
        cmocka_unit_test(test_gbk_million),
        cmocka_unit_test(test_gbk_memory_budget),
        cmocka_unit_test(test_garbage_from_the_sdk),
        cmocka_unit_test(test_late_policy_per_element),
        cmocka_unit_test(test_drain_stops_the_teststream),
        cmocka_unit_test(test_drain_fires_event_time_timers),
        cmocka_unit_test(test_drain_releases_delayed_residuals),
        cmocka_unit_test(test_residual_holds),
        cmocka_unit_test(test_residual_without_estimate),
        cmocka_unit_test(test_drain_before_start),
        cmocka_unit_test(test_livelock_self_checkpoint),
        cmocka_unit_test(test_livelock_checkpoints_that_emit),
        cmocka_unit_test(test_livelock_looping_timer),
        cmocka_unit_test(test_livelock_state_and_event_time),
        cmocka_unit_test(test_livelock_wall_clock_delays),
        cmocka_unit_test(test_livelock_waiting_for_real_time),
        cmocka_unit_test(test_livelock_timer_waiting_for_real_time),
        cmocka_unit_test(test_merge_windows_cases),
        cmocka_unit_test(test_merge_windows_bad_answers),
        cmocka_unit_test(test_merge_windows_registration),
        cmocka_unit_test(test_merge_windows_oom),
        cmocka_unit_test(test_merge_windows_unanswered_is_stuck),
        cmocka_unit_test(test_custom_windows),
        cmocka_unit_test(test_custom_windows_need_custom_fn),
        cmocka_unit_test(test_oom_loop),
    };
    return cmocka_run_group_tests(tests, coders_setup, coders_teardown);
}
