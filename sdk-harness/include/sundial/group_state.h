/*
 * Sundial C SDK: keyed state with timeouts (Spark's mapGroupsWithState, transformWithState's
 * timers), a helper over stateful DoFns. Part of <sundial/sundial.h>, which includes it; it
 * may also be included alone.
 */
#ifndef SD_SUNDIAL_GROUP_STATE_H
#define SD_SUNDIAL_GROUP_STATE_H

#include <sundial/sundial.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * sd_map_groups_with_state runs a registered group function per key of a KV<K, V> input: once
 * per element with its value, and once per timeout or timer of the key that fires, with none
 * (value NULL). The function keeps one state value per key (sd_group_get / _update / _remove:
 * nested encodings with the state coder), emits with sd_emit (the output coder), and may
 *   - set the key's timeout: a processing-time duration from now (sd_group_set_timeout_ms,
 *     on the job's clock: in test mode an hour passes at once) or an event time
 *     (sd_group_set_timeout_at, fires when the watermark passes it). The timeout resets on
 *     every call: it is gone unless set again within it (Spark's GroupState). When it fires
 *     the function is called with sd_group_timed_out() true;
 *   - register timers that stay until they fire or are deleted (transformWithState):
 *     sd_group_timer_register / _delete / _list; a firing one calls the function with
 *     sd_group_timer_fired() true.
 * sd_ctx_key is the key (nested, the input's key coder) in every call.
 */
typedef struct sd_group_state sd_group_state;
typedef sd_status (*sd_group_fn)(sd_ctx *c, sd_group_state *gs, const sd_bytes *value);

typedef struct sd_group_timer {
    sd_time_domain domain;
    sd_time at;
} sd_group_timer;

/* Register a group function (before building or running pipelines; as sd_register_dofn). */
SD_API SD_MUST_CHECK sd_status sd_register_group_fn(const char *name, sd_group_fn fn);
/* The helper itself; config reaches the function as sd_ctx_config. NULL on error (sticky). */
SD_API sd_pcoll *sd_map_groups_with_state(sd_pipeline *p,
                                          const char *name,
                                          sd_pcoll *input,
                                          const char *group_fn,
                                          sd_bytes config,
                                          const sd_pcoder *state_coder,
                                          const sd_pcoder *output_coder);

/* Called because the key's timeout passed (no value). */
SD_API bool sd_group_timed_out(const sd_group_state *gs);
/* Called because registered timer *out fired (no value); false otherwise. */
SD_API bool sd_group_timer_fired(const sd_group_state *gs, sd_group_timer *out);
/* The key's state: OUT *exists, and *value (borrowed until the call returns) when it does. */
SD_API SD_MUST_CHECK sd_status sd_group_get(sd_group_state *gs, sd_bytes *value, bool *exists);
SD_API SD_MUST_CHECK sd_status sd_group_update(sd_group_state *gs, sd_bytes value);
SD_API SD_MUST_CHECK sd_status sd_group_remove(sd_group_state *gs);
/* The timeout for this call: ms >= 0 of processing time from now, or an event time. */
SD_API SD_MUST_CHECK sd_status sd_group_set_timeout_ms(sd_group_state *gs, int64_t ms);
SD_API SD_MUST_CHECK sd_status sd_group_set_timeout_at(sd_group_state *gs, sd_time at);
/* Timers kept until they fire or are deleted (processing time: at on the job's clock). */
SD_API SD_MUST_CHECK sd_status sd_group_timer_register(sd_group_state *gs, sd_group_timer t);
SD_API SD_MUST_CHECK sd_status sd_group_timer_delete(sd_group_state *gs, sd_group_timer t);
/* The key's registered timers: up to cap into out, OUT *n how many there are (sorted). */
SD_API SD_MUST_CHECK sd_status sd_group_timer_list(sd_group_state *gs,
                                                   sd_group_timer *out,
                                                   size_t cap,
                                                   size_t *n);

#ifdef __cplusplus
}
#endif

#endif /* SD_SUNDIAL_GROUP_STATE_H */
