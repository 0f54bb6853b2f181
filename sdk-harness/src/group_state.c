/*
 * Sundial C SDK: keyed state with timeouts — Spark's mapGroupsWithState (one state value and
 * one timeout per key, the timeout reset by every call) and transformWithState's timers (kept
 * until they fire or are deleted), on Beam's state and timers.
 *
 * sd_map_groups_with_state is one stateful ParDo running the built-in DoFn "sd:group_state",
 * whose config names the user's group function (lp name, lp user config). Per key it keeps
 *   gs_value    value state: the function's state (the user's state coder);
 *   gs_timers   map state (bytes -> bytes): the registered timers, key = a domain byte and
 *               the 8-byte big-endian time, value empty;
 * and four timer families: gs_timeout_pt / gs_timeout_et (the timeout; one per key, no tag)
 * and gs_timer_pt / gs_timer_et (registered timers, tagged with their 8-byte time, so several
 * coexist and each is deleted alone).
 *
 * A call (an element, or a firing) runs the function, then applies what it asked: the state
 * write or removal, and the timeout: both timeout timers are cleared and the one it set, if
 * any, is set — so a timeout lives exactly until the next call. Timers registered or deleted
 * are applied at once (timer and map entry together); a registered timer that fires is
 * removed from the map before the function sees it. Processing-time timeouts and timers are
 * on the job's clock (sd_ctx_processing_time: the runner's synthetic clock in test mode, where
 * an hour-long timeout fires as soon as nothing else can run). A firing's output timestamp is
 * its firing time for event-time timers and the key's last element's timestamp otherwise (the
 * timer holds the output watermark there, so what it emits is on time).
 */
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "sdk-harness/src/pipeline_int.h"
#include "sdk-harness/src/sdk_int.h"

#define GS_VALUE      "gs_value"
#define GS_TIMERS     "gs_timers"
#define GS_TIMEOUT_PT "gs_timeout_pt"
#define GS_TIMEOUT_ET "gs_timeout_et"
#define GS_TIMER_PT   "gs_timer_pt"
#define GS_TIMER_ET   "gs_timer_et"

struct sd_group_state {
    sd_ctx *c;
    bool timed_out;
    bool fired;
    sd_group_timer timer; /* fired */
    int timeout;          /* 0 none, else the domain of the timeout to set after the call */
    sd_time timeout_at;
    sd_time hold;
};

typedef struct gs_config {
    sd_group_fn fn;
} gs_config;

static sd_status gs_setup(sd_bytes config, void **state, sd_err *err)
{
    sd_reader r = sd_reader_make(config);
    sd_bytes name, user;
    if (sd_reader_lp(&r, &name) != SD_OK || sd_reader_lp(&r, &user) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "MapGroupsWithState: malformed configuration");
    }
    sd_group_fn fn = sd__find_group_fn(name);
    if (fn == NULL) {
        return sd_err_set(err, SD_ENOTFOUND,
                          "MapGroupsWithState: no group function registered as \"%.*s\" (register "
                          "it with sd_register_group_fn before sd_sdk_main)",
                          (int)name.len, (const char *)name.ptr);
    }
    gs_config *g = sd_calloc(1, sizeof(*g));
    if (g == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    g->fn = fn;
    *state = g;
    return SD_OK;
}

static void gs_teardown(void *state)
{
    sd_free(state);
}

/* The map key of a timer, as a nested bytes encoding: length 9, the domain byte, the time. */
static void timer_key(uint8_t k[10], sd_group_timer t)
{
    uint64_t v = (uint64_t)t.at;
    k[0] = 9;
    k[1] = t.domain == SD_PROCESSING_TIME ? 'p' : 'e';
    for (int i = 9; i >= 2; i--) {
        k[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

/* The empty bytes value of a map entry (nested: length 0). */
static const uint8_t EMPTY_VALUE[1] = { 0 };

/* After the function: the timeout it set (the previous one is gone either way). */
static sd_status apply_timeout(sd_group_state *gs)
{
    sd_ctx *c = gs->c;
    sd_status st = sd_timer_clear(c, GS_TIMEOUT_PT, SD_BYTES_NULL);
    if (st == SD_OK) {
        st = sd_timer_clear(c, GS_TIMEOUT_ET, SD_BYTES_NULL);
    }
    if (st == SD_OK && gs->timeout == SD_PROCESSING_TIME) {
        st = sd_timer_set(c, GS_TIMEOUT_PT, SD_BYTES_NULL, gs->timeout_at, gs->hold);
    } else if (st == SD_OK && gs->timeout == SD_EVENT_TIME) {
        st = sd_timer_set(c, GS_TIMEOUT_ET, SD_BYTES_NULL, gs->timeout_at, gs->timeout_at);
    }
    return st;
}

static sd_status run_fn(sd_ctx *c, gs_config *g, sd_group_state *gs, const sd_bytes *value)
{
    gs->c = c;
    sd_status st = g->fn(c, gs, value);
    if (st != SD_OK) {
        return st;
    }
    return apply_timeout(gs);
}

static sd_status gs_process(sd_ctx *c, void *state)
{
    sd_bytes k, v;
    if (sd_ctx_kv(c, &k, &v) != SD_OK) {
        return sd_fail(c, "MapGroupsWithState: the input is not a KV");
    }
    sd_group_state gs = { .hold = sd_ctx_timestamp(c) };
    return run_fn(c, state, &gs, &v);
}

static sd_status gs_on_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    sd_group_state gs = { .hold = sd_ctx_timestamp(c) };
    if (strcmp(family, GS_TIMEOUT_PT) == 0 || strcmp(family, GS_TIMEOUT_ET) == 0) {
        gs.timed_out = true;
        return run_fn(c, state, &gs, NULL);
    }
    if (tag.len != 8) {
        return sd_fail(c, "MapGroupsWithState: timer %s has a malformed tag", family);
    }
    uint64_t at = 0;
    for (size_t i = 0; i < 8; i++) {
        at = at << 8 | tag.ptr[i];
    }
    gs.fired = true;
    gs.timer.domain = strcmp(family, GS_TIMER_PT) == 0 ? SD_PROCESSING_TIME : SD_EVENT_TIME;
    gs.timer.at = (sd_time)at;
    uint8_t key[10];
    timer_key(key, gs.timer);
    sd_status st = sd_state_map_remove(c, GS_TIMERS, sd_bytes_make(key, sizeof(key)));
    return st != SD_OK ? st : run_fn(c, state, &gs, NULL);
}

void sd__register_group_builtins(void)
{
    static const sd_dofn dofn = {
        .setup = gs_setup, .process = gs_process, .on_timer = gs_on_timer, .teardown = gs_teardown
    };
    if (sd_register_dofn("sd:group_state", &dofn) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
}

sd_pcoll *sd_map_groups_with_state(sd_pipeline *p,
                                   const char *name,
                                   sd_pcoll *input,
                                   const char *group_fn,
                                   sd_bytes config,
                                   const sd_pcoder *state_coder,
                                   const sd_pcoder *output_coder)
{
    if (group_fn == NULL || state_coder == NULL) {
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "MapGroupsWithState %s: a group function and a state coder are "
                                 "required",
                                 name != NULL ? name : "(null)");
    }
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    if (sd_buf_put_lp(&cfg, sd_bytes_str(group_fn)) != SD_OK ||
        sd_buf_put_lp(&cfg, config) != SD_OK) {
        sd_buf_deinit(&cfg);
        return sd__pipeline_oom(p);
    }
    const sd_state_spec states[2] = {
        { .id = GS_VALUE, .kind = SD_STATE_VALUE, .coder = state_coder },
        { .id = GS_TIMERS,
          .kind = SD_STATE_MAP,
          .coder = sd_pcoder_bytes(p),
          .key_coder = sd_pcoder_bytes(p) },
    };
    const sd_timer_spec timers[4] = { { GS_TIMEOUT_PT, SD_PROCESSING_TIME },
                                      { GS_TIMEOUT_ET, SD_EVENT_TIME },
                                      { GS_TIMER_PT, SD_PROCESSING_TIME },
                                      { GS_TIMER_ET, SD_EVENT_TIME } };
    const sd_pcoder *outc[1] = { output_coder };
    sd_pardo_spec spec = { .dofn = "sd:group_state",
                           .config = sd_buf_bytes(&cfg),
                           .n_outputs = 1,
                           .output_coders = outc,
                           .n_states = 2,
                           .states = states,
                           .n_timers = 4,
                           .timers = timers };
    sd_pcoll *out = sd_pardo(p, name, input, &spec, NULL);
    sd_buf_deinit(&cfg);
    return out;
}

/* ================================================================ in a group function */

bool sd_group_timed_out(const sd_group_state *gs)
{
    return gs->timed_out;
}

bool sd_group_timer_fired(const sd_group_state *gs, sd_group_timer *out)
{
    if (gs->fired && out != NULL) {
        *out = gs->timer;
    }
    return gs->fired;
}

sd_status sd_group_get(sd_group_state *gs, sd_bytes *value, bool *exists)
{
    sd_iter it;
    bool has = false;
    sd_status st = sd_state_read(gs->c, GS_VALUE, &it);
    if (st == SD_OK) {
        st = sd_iter_next(&it, value, &has);
    }
    *exists = st == SD_OK && has;
    return st;
}

sd_status sd_group_update(sd_group_state *gs, sd_bytes value)
{
    return sd_state_write(gs->c, GS_VALUE, value);
}

sd_status sd_group_remove(sd_group_state *gs)
{
    return sd_state_clear(gs->c, GS_VALUE);
}

sd_status sd_group_set_timeout_ms(sd_group_state *gs, int64_t ms)
{
    if (ms < 0) {
        return sd_fail(gs->c, "sd_group_set_timeout_ms: negative duration %lld ms", (long long)ms);
    }
    gs->timeout = SD_PROCESSING_TIME;
    gs->timeout_at = sd_time_add(sd_ctx_processing_time(gs->c), ms);
    return SD_OK;
}

sd_status sd_group_set_timeout_at(sd_group_state *gs, sd_time at)
{
    gs->timeout = SD_EVENT_TIME;
    gs->timeout_at = at;
    return SD_OK;
}

static sd_status check_domain(sd_group_state *gs, sd_group_timer t, const char *what)
{
    if (t.domain != SD_EVENT_TIME && t.domain != SD_PROCESSING_TIME) {
        return sd_fail(gs->c, "%s: unknown time domain %d", what, (int)t.domain);
    }
    return SD_OK;
}

static sd_bytes timer_tag(uint8_t tag[8], sd_group_timer t)
{
    uint8_t k[10];
    timer_key(k, t);
    memcpy(tag, k + 2, 8);
    return sd_bytes_make(tag, 8);
}

sd_status sd_group_timer_register(sd_group_state *gs, sd_group_timer t)
{
    sd_status st = check_domain(gs, t, "sd_group_timer_register");
    uint8_t key[10], tag[8];
    timer_key(key, t);
    if (st == SD_OK) {
        st = sd_state_map_put(gs->c, GS_TIMERS, sd_bytes_make(key, sizeof(key)),
                              sd_bytes_make(EMPTY_VALUE, 1));
    }
    if (st == SD_OK) {
        bool pt = t.domain == SD_PROCESSING_TIME;
        st = sd_timer_set(gs->c, pt ? GS_TIMER_PT : GS_TIMER_ET, timer_tag(tag, t), t.at,
                          pt ? gs->hold : t.at);
    }
    return st;
}

sd_status sd_group_timer_delete(sd_group_state *gs, sd_group_timer t)
{
    sd_status st = check_domain(gs, t, "sd_group_timer_delete");
    uint8_t key[10], tag[8];
    timer_key(key, t);
    if (st == SD_OK) {
        st = sd_state_map_remove(gs->c, GS_TIMERS, sd_bytes_make(key, sizeof(key)));
    }
    if (st == SD_OK) {
        st = sd_timer_clear(gs->c, t.domain == SD_PROCESSING_TIME ? GS_TIMER_PT : GS_TIMER_ET,
                            timer_tag(tag, t));
    }
    return st;
}

static int cmp_timer(const void *a, const void *b)
{
    const sd_group_timer *x = a, *y = b;
    if (x->domain != y->domain) {
        return x->domain < y->domain ? -1 : 1;
    }
    return x->at < y->at ? -1 : x->at > y->at ? 1 : 0;
}

sd_status sd_group_timer_list(sd_group_state *gs, sd_group_timer *out, size_t cap, size_t *n)
{
    sd_iter it;
    bool has;
    sd_bytes key;
    size_t count = 0;
    *n = 0;
    sd_status st = sd_state_map_keys(gs->c, GS_TIMERS, &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &key, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(key);
        sd_bytes k;
        if (sd_read_bytes(&r, &k) != SD_OK || k.len != 9) {
            return sd_fail(gs->c, "sd_group_timer_list: a malformed timer entry");
        }
        uint64_t at = 0;
        for (size_t i = 1; i < 9; i++) {
            at = at << 8 | k.ptr[i];
        }
        if (count < cap) {
            out[count].domain = k.ptr[0] == 'p' ? SD_PROCESSING_TIME : SD_EVENT_TIME;
            out[count].at = (sd_time)at;
        }
        count++;
    }
    if (st == SD_OK && out != NULL) {
        qsort(out, count < cap ? count : cap, sizeof(*out), cmp_timer);
    }
    *n = count;
    return st;
}
