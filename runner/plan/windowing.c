/*
 * Sundial planner: windowing strategies, checked and translated into plain C.
 *
 * The engine never sees protobuf, so every windowing strategy the graph uses is turned into an
 * sd_plan_windowing: the window fn as a kind plus millisecond sizes (from the Duration and
 * Timestamp fields of the standard window fn payloads), the modes with UNSPECIFIED replaced by
 * Beam's defaults, and the trigger as a small tree (NULL for the default trigger).
 *
 * Accepted: the four standard window fns with global_window / interval_window coders, and custom
 * window fns (assigned, and merged when they merge, by the SDK: merge.c) with any window coder
 * (one the runner cannot read becomes custom_window over it, coders.c, so that every window
 * carries its max timestamp); RETRACTING accumulation is rejected; with
 * sd_plan_options.default_trigger_only every non-default trigger is rejected too.
 *
 * AfterSynchronizedProcessingTime is the trigger Java puts downstream of a GroupByKey whose
 * trigger waits on processing time (AfterProcessingTime's continuation trigger). Beam's
 * AfterSynchronizedProcessingTimeStateMachine fires once the "synchronized" processing time,
 * the time every upstream worker has reached, is strictly after the time the pane's first
 * element arrived. One process has one clock, so here it is the job clock: the trigger fires
 * at the first moment the clock is past the first element's arrival (em_trigger.c).
 */
#include <string.h>

#include "google/protobuf/duration.pb-c.h"
#include "google/protobuf/timestamp.pb-c.h"
#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

#define MAX_TRIGGER_DEPTH 64

typedef Org__Apache__Beam__Model__Pipeline__V1__FixedWindowsPayload pb_fixed;
typedef Org__Apache__Beam__Model__Pipeline__V1__SlidingWindowsPayload pb_sliding;
typedef Org__Apache__Beam__Model__Pipeline__V1__SessionWindowsPayload pb_sessions;

static bool streq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/*
 * seconds * 1000 + nanos / 1e6 into *out, or false when that does not fit in an int64. The
 * fields come straight from a client's proto, so any int64 is possible (seconds = INT64_MAX
 * once made the plain expression overflow, which is undefined behaviour).
 */
static bool seconds_to_ms(int64_t seconds, int32_t nanos, int64_t *out)
{
    if (seconds > INT64_MAX / 1000 || seconds < INT64_MIN / 1000) {
        return false;
    }
    int64_t ms = seconds * 1000;
    int64_t extra = nanos / 1000000; /* |extra| <= 2147: nanos is an int32 */
    if ((extra > 0 && ms > INT64_MAX - extra) || (extra < 0 && ms < INT64_MIN - extra)) {
        return false;
    }
    *out = ms + extra;
    return true;
}

/*
 * A Duration or Timestamp field (NULL = 0) in milliseconds into *out. On overflow sets
 * *malformed and *why, a message naming `what` and the seconds given (in the scratch arena);
 * returns SD_ENOMEM only when that message cannot be allocated.
 */
static sd_status field_ms(pl_ctx *c,
                          const char *what,
                          int64_t seconds,
                          int32_t nanos,
                          int64_t *out,
                          bool *malformed,
                          const char **why)
{
    if (seconds_to_ms(seconds, nanos, out)) {
        return SD_OK;
    }
    *malformed = true;
    *why = sd_arena_printf(&c->scratch, "has %s of %lld seconds, which overflows milliseconds",
                           what, (long long)seconds);
    return *why == NULL ? SD_ENOMEM : SD_OK;
}

static sd_status duration_ms(pl_ctx *c,
                             const char *what,
                             const Google__Protobuf__Duration *d,
                             int64_t *out,
                             bool *malformed,
                             const char **why)
{
    return field_ms(c, what, d == NULL ? 0 : d->seconds, d == NULL ? 0 : d->nanos, out, malformed,
                    why);
}

static sd_status timestamp_ms(pl_ctx *c,
                              const char *what,
                              const Google__Protobuf__Timestamp *t,
                              int64_t *out,
                              bool *malformed,
                              const char **why)
{
    return field_ms(c, what, t == NULL ? 0 : t->seconds, t == NULL ? 0 : t->nanos, out, malformed,
                    why);
}

static const char *fn_urn(const pb_wstrat *ws)
{
    return ws->window_fn != NULL && ws->window_fn->urn != NULL ? ws->window_fn->urn : "";
}

bool sd__plan_ws_non_merging(const pl_ctx *c, const pb_wstrat *ws)
{
    (void)c;
    switch (ws->merge_status) {
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NON_MERGING:
        return true;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__UNSPECIFIED:
        return !streq(fn_urn(ws), SD_URN_WINDOW_FN_SESSION);
    default:
        return false;
    }
}

/* ----------------------------------------------------------------------------------------- */
/* Window fn payloads                                                                         */
/* ----------------------------------------------------------------------------------------- */

typedef struct fn_params {
    sd_plan_window_kind kind;
    int64_t size_ms, period_ms, offset_ms, gap_ms;
} fn_params;

/*
 * Decode the window fn. Returns SD_OK with *ok false and *why set when it is unsupported or
 * malformed (*malformed tells which); SD_ENOMEM on allocation failure.
 */
static sd_status decode_fn(pl_ctx *c,
                           const pb_wstrat *ws,
                           fn_params *out,
                           bool *ok,
                           bool *malformed,
                           const char **why)
{
    memset(out, 0, sizeof(*out));
    *ok = false;
    *malformed = false;
    const char *urn = fn_urn(ws);
    ProtobufCAllocator pa = sd__plan_arena_pb(&c->scratch);
    size_t len = ws->window_fn != NULL ? ws->window_fn->payload.len : 0;
    const uint8_t *data = ws->window_fn != NULL ? ws->window_fn->payload.data : NULL;
    if (urn[0] == '\0') {
        *malformed = true;
        *why = "has no window fn";
        return SD_OK;
    }
    if (streq(urn, SD_URN_WINDOW_FN_GLOBAL)) {
        out->kind = SD_PLAN_WINDOW_GLOBAL;
        *ok = true;
        return SD_OK;
    }
    if (streq(urn, SD_URN_WINDOW_FN_FIXED)) {
        pb_fixed *f =
            org__apache__beam__model__pipeline__v1__fixed_windows_payload__unpack(&pa, len, data);
        if (f == NULL) {
            goto undecodable;
        }
        out->kind = SD_PLAN_WINDOW_FIXED;
        PL_TRY(duration_ms(c, "a fixed window size", f->size, &out->size_ms, malformed, why));
        if (!*malformed) {
            PL_TRY(timestamp_ms(c, "a fixed window offset", f->offset, &out->offset_ms, malformed,
                                why));
        }
        if (*malformed) {
            return SD_OK;
        }
        if (out->size_ms <= 0) {
            *malformed = true;
            *why = "has fixed windows with a size that is not positive";
            return SD_OK;
        }
        *ok = true;
        return SD_OK;
    }
    if (streq(urn, SD_URN_WINDOW_FN_SLIDING)) {
        pb_sliding *s =
            org__apache__beam__model__pipeline__v1__sliding_windows_payload__unpack(&pa, len, data);
        if (s == NULL) {
            goto undecodable;
        }
        out->kind = SD_PLAN_WINDOW_SLIDING;
        PL_TRY(duration_ms(c, "a sliding window size", s->size, &out->size_ms, malformed, why));
        if (!*malformed) {
            PL_TRY(duration_ms(c, "a sliding window period", s->period, &out->period_ms, malformed,
                               why));
        }
        if (!*malformed) {
            PL_TRY(timestamp_ms(c, "a sliding window offset", s->offset, &out->offset_ms, malformed,
                                why));
        }
        if (*malformed) {
            return SD_OK;
        }
        if (out->size_ms <= 0 || out->period_ms <= 0) {
            *malformed = true;
            *why = "has sliding windows with a size or period that is not positive";
            return SD_OK;
        }
        *ok = true;
        return SD_OK;
    }
    if (streq(urn, SD_URN_WINDOW_FN_SESSION)) {
        pb_sessions *s =
            org__apache__beam__model__pipeline__v1__session_windows_payload__unpack(&pa, len, data);
        if (s == NULL) {
            goto undecodable;
        }
        out->kind = SD_PLAN_WINDOW_SESSIONS;
        PL_TRY(duration_ms(c, "a session gap", s->gap_size, &out->gap_ms, malformed, why));
        if (*malformed) {
            return SD_OK;
        }
        if (out->gap_ms <= 0) {
            *malformed = true;
            *why = "has session windows with a gap that is not positive";
            return SD_OK;
        }
        *ok = true;
        return SD_OK;
    }
    /*
     * Any other window fn (Java's IdentityWindowFn and StaticWindows behind PAssert, Reshuffle
     * and Wait; user WindowFns) assigns its windows in the SDK: the runner never calls it, it
     * only groups by the windows the elements carry and reads their ends from the window coder
     * (which the caller checks is global_window or interval_window). When the windows merge
     * (NEEDS_MERGE), a GroupByKey has the SDK merge them: merge.c gives it a merge_windows
     * stage. The pipeline must say which: UNSPECIFIED leaves it unknown, and is refused.
     */
    if (ws->merge_status ==
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NON_MERGING ||
        ws->merge_status ==
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__ALREADY_MERGED ||
        ws->merge_status ==
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NEEDS_MERGE) {
        out->kind = SD_PLAN_WINDOW_CUSTOM;
        *ok = true;
        return SD_OK;
    }
    *why = NULL; /* unsupported URN: the caller names it */
    return SD_OK;
undecodable:
    if (c->scratch.failed) {
        return SD_ENOMEM;
    }
    *malformed = true;
    *why = "has a window fn payload that does not decode";
    return SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Triggers                                                                                   */
/* ----------------------------------------------------------------------------------------- */

static bool trigger_is_default(const pb_trigger *t)
{
    return t == NULL ||
           t->trigger_case == ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_DEFAULT ||
           t->trigger_case == ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER__NOT_SET;
}

/* Find the first unsupported construct in a trigger tree. OUT: why (static), NULL when fine. */
static void check_trigger(const pb_trigger *t, unsigned depth, const char **why)
{
    if (*why != NULL || t == NULL) {
        return;
    }
    if (depth > MAX_TRIGGER_DEPTH) {
        *why = "a trigger nested too deeply";
        return;
    }
    switch (t->trigger_case) {
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_ALL:
        for (size_t i = 0; i < t->after_all->n_subtriggers; i++) {
            check_trigger(t->after_all->subtriggers[i], depth + 1, why);
        }
        return;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_ANY:
        for (size_t i = 0; i < t->after_any->n_subtriggers; i++) {
            check_trigger(t->after_any->subtriggers[i], depth + 1, why);
        }
        return;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_EACH:
        for (size_t i = 0; i < t->after_each->n_subtriggers; i++) {
            check_trigger(t->after_each->subtriggers[i], depth + 1, why);
        }
        return;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_END_OF_WINDOW:
        check_trigger(t->after_end_of_window->early_firings, depth + 1, why);
        check_trigger(t->after_end_of_window->late_firings, depth + 1, why);
        return;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_OR_FINALLY:
        if (t->or_finally->main == NULL || t->or_finally->finally == NULL) {
            *why = "an OrFinally trigger without both parts";
            return;
        }
        check_trigger(t->or_finally->main, depth + 1, why);
        check_trigger(t->or_finally->finally, depth + 1, why);
        return;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_REPEAT:
        if (t->repeat->subtrigger == NULL) {
            *why = "a Repeat trigger without a subtrigger";
            return;
        }
        check_trigger(t->repeat->subtrigger, depth + 1, why);
        return;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_PROCESSING_TIME:
        for (size_t i = 0; i < t->after_processing_time->n_timestamp_transforms; i++) {
            const Org__Apache__Beam__Model__Pipeline__V1__TimestampTransform *tt =
                t->after_processing_time->timestamp_transforms[i];
            if (tt == NULL ||
                tt->timestamp_transform_case ==
                    ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIMESTAMP_TRANSFORM__TIMESTAMP_TRANSFORM__NOT_SET) {
                *why = "an AfterProcessingTime trigger with an empty timestamp transform";
                return;
            }
        }
        return;
    default:
        return;
    }
}

static sd_status translate_trigger(sd_arena *a, const pb_trigger *t, sd_plan_trigger *out);

static sd_status translate_list(sd_arena *a,
                                size_t n,
                                Org__Apache__Beam__Model__Pipeline__V1__Trigger *const *subs,
                                sd_plan_trigger *out)
{
    sd_plan_trigger *arr = sd_arena_alloc(a, sizeof(*arr) * (n + 1));
    if (arr == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        PL_TRY(translate_trigger(a, subs[i], &arr[i]));
    }
    out->n_subtriggers = n;
    out->subtriggers = arr;
    return SD_OK;
}

static sd_status translate_one(sd_arena *a, const pb_trigger *t, const sd_plan_trigger **out)
{
    *out = NULL;
    if (t == NULL) {
        return SD_OK;
    }
    sd_plan_trigger *x = sd_arena_alloc(a, sizeof(*x));
    if (x == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(translate_trigger(a, t, x));
    *out = x;
    return SD_OK;
}

static sd_status translate_trigger(sd_arena *a, const pb_trigger *t, sd_plan_trigger *out)
{
    memset(out, 0, sizeof(*out));
    if (t == NULL) {
        out->kind = SD_PLAN_TRIGGER_DEFAULT;
        return SD_OK;
    }
    switch (t->trigger_case) {
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_NEVER:
        out->kind = SD_PLAN_TRIGGER_NEVER;
        return SD_OK;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_ALWAYS:
        out->kind = SD_PLAN_TRIGGER_ALWAYS;
        return SD_OK;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_ALL:
        out->kind = SD_PLAN_TRIGGER_AFTER_ALL;
        return translate_list(a, t->after_all->n_subtriggers, t->after_all->subtriggers, out);
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_ANY:
        out->kind = SD_PLAN_TRIGGER_AFTER_ANY;
        return translate_list(a, t->after_any->n_subtriggers, t->after_any->subtriggers, out);
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_EACH:
        out->kind = SD_PLAN_TRIGGER_AFTER_EACH;
        return translate_list(a, t->after_each->n_subtriggers, t->after_each->subtriggers, out);
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_END_OF_WINDOW:
        out->kind = SD_PLAN_TRIGGER_AFTER_END_OF_WINDOW;
        PL_TRY(translate_one(a, t->after_end_of_window->early_firings, &out->early));
        return translate_one(a, t->after_end_of_window->late_firings, &out->late);
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_PROCESSING_TIME: {
        out->kind = SD_PLAN_TRIGGER_AFTER_PROCESSING_TIME;
        size_t n = t->after_processing_time->n_timestamp_transforms;
        sd_plan_timestamp_transform *tts = sd_arena_alloc(a, sizeof(*tts) * (n + 1));
        if (tts == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
            const Org__Apache__Beam__Model__Pipeline__V1__TimestampTransform *tt =
                t->after_processing_time->timestamp_transforms[i];
            if (tt->timestamp_transform_case ==
                ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIMESTAMP_TRANSFORM__TIMESTAMP_TRANSFORM_DELAY) {
                tts[i].kind = SD_PLAN_TT_DELAY;
                tts[i].delay_ms = tt->delay->delay_millis;
            } else {
                tts[i].kind = SD_PLAN_TT_ALIGN_TO;
                tts[i].period_ms = tt->align_to->period;
                tts[i].offset_ms = tt->align_to->offset;
            }
        }
        out->n_timestamp_transforms = n;
        out->timestamp_transforms = tts;
        return SD_OK;
    }
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME:
        out->kind = SD_PLAN_TRIGGER_AFTER_SYNCHRONIZED_PROCESSING_TIME;
        return SD_OK;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_ELEMENT_COUNT:
        out->kind = SD_PLAN_TRIGGER_ELEMENT_COUNT;
        out->element_count = t->element_count->element_count;
        return SD_OK;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_OR_FINALLY: {
        out->kind = SD_PLAN_TRIGGER_OR_FINALLY;
        Org__Apache__Beam__Model__Pipeline__V1__Trigger *parts[2] = { t->or_finally->main,
                                                                      t->or_finally->finally };
        return translate_list(a, 2, parts, out);
    }
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_REPEAT: {
        out->kind = SD_PLAN_TRIGGER_REPEAT;
        Org__Apache__Beam__Model__Pipeline__V1__Trigger *sub[1] = { t->repeat->subtrigger };
        return translate_list(a, 1, sub, out);
    }
    default:
        out->kind = SD_PLAN_TRIGGER_DEFAULT;
        return SD_OK;
    }
}

/* ----------------------------------------------------------------------------------------- */
/* Check and translate                                                                        */
/* ----------------------------------------------------------------------------------------- */

sd_status sd__plan_check_windowing(pl_ctx *c, const char *id, const char *who)
{
    if (id == NULL || id[0] == '\0') {
        return sd__plan_problem(c, true, "%s has no windowing strategy", who);
    }
    char *key = sd_arena_printf(&c->scratch, "w:%s", id);
    if (key == NULL) {
        return SD_ENOMEM;
    }
    if (sd_map_has(&c->seen, sd_bytes_str(key))) {
        return SD_OK;
    }
    PL_TRY(sd_map_put_str(&c->seen, key, PL_PRESENT));
    const pb_wstrat *ws = sd_map_get_str(&c->wstrats, id);
    if (ws == NULL) {
        return sd__plan_problem(c, true, "windowing strategy \"%s\" (used by %s) does not exist",
                                id, who);
    }
    fn_params fp;
    bool ok, malformed;
    const char *why = NULL;
    PL_TRY(decode_fn(c, ws, &fp, &ok, &malformed, &why));
    if (!ok && why != NULL) {
        PL_TRY(sd__plan_problem(c, malformed, "windowing strategy \"%s\" %s", id, why));
    } else if (!ok) {
        PL_TRY(sd__plan_problem(c, false,
                                "windowing strategy \"%s\": unsupported window fn \"%s\" (only "
                                "global, fixed, sliding, sessions, or another whose merge status "
                                "says whether it merges)",
                                id, fn_urn(ws)));
    }
    char *me = sd_arena_printf(&c->scratch, "windowing strategy \"%s\"", id);
    if (me == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd__plan_check_coder(c, ws->window_coder_id, me));
    /* A window coder the runner cannot read is already custom_window here (coders.c); the
     * runner assigns windows of the standard window fns itself, in their standard coders. */
    const char *wurn = sd__plan_coder_urn(c, ws->window_coder_id);
    if (ok && wurn != NULL && fp.kind != SD_PLAN_WINDOW_CUSTOM &&
        !streq(wurn, fp.kind == SD_PLAN_WINDOW_GLOBAL ? SD_URN_CODER_GLOBAL_WINDOW
                                                      : SD_URN_CODER_INTERVAL_WINDOW)) {
        PL_TRY(sd__plan_problem(c, false,
                                "windowing strategy \"%s\" (used by %s): window fn \"%s\" with "
                                "window coder \"%s\" (%s): the runner assigns that window fn's "
                                "windows itself and writes them as %s",
                                id, who, fn_urn(ws), ws->window_coder_id, wurn,
                                fp.kind == SD_PLAN_WINDOW_GLOBAL ? "global windows"
                                                                 : "interval windows"));
    }
    if (ws->accumulation_mode ==
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__RETRACTING) {
        PL_TRY(sd__plan_problem(c, false,
                                "windowing strategy \"%s\" uses RETRACTING accumulation, which "
                                "is not supported",
                                id));
    }
    const char *twhy = NULL;
    check_trigger(ws->trigger, 0, &twhy);
    if (twhy != NULL) {
        PL_TRY(sd__plan_problem(c, false,
                                "windowing strategy \"%s\" uses %s, which is not "
                                "supported",
                                id, twhy));
    } else if (c->opt.default_trigger_only && !trigger_is_default(ws->trigger)) {
        PL_TRY(sd__plan_problem(c, false,
                                "windowing strategy \"%s\" uses a non-default trigger, and this "
                                "runner was configured to accept only the default trigger",
                                id));
    }
    return SD_OK;
}

sd_status sd__plan_translate_windowing(pl_ctx *c,
                                       sd_arena *a,
                                       const char *id,
                                       const pb_wstrat *ws,
                                       sd_plan_windowing *out)
{
    memset(out, 0, sizeof(*out));
    fn_params fp;
    bool ok, malformed;
    const char *why = NULL;
    PL_TRY(decode_fn(c, ws, &fp, &ok, &malformed, &why));
    out->id = sd_arena_strdup(a, id);
    out->window_coder_id = sd_arena_strdup(a, ws->window_coder_id);
    out->environment_id = sd_arena_strdup(a, ws->environment_id);
    if (out->id == NULL || out->window_coder_id == NULL || out->environment_id == NULL) {
        return SD_ENOMEM;
    }
    out->kind = fp.kind;
    out->size_ms = fp.size_ms;
    out->period_ms = fp.period_ms;
    out->offset_ms = fp.offset_ms;
    out->gap_ms = fp.gap_ms;
    switch (ws->merge_status) {
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NEEDS_MERGE:
        out->merge = SD_PLAN_MERGE_NEEDS_MERGE;
        break;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__ALREADY_MERGED:
        out->merge = SD_PLAN_MERGE_ALREADY_MERGED;
        break;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NON_MERGING:
        out->merge = SD_PLAN_MERGE_NON_MERGING;
        break;
    default:
        out->merge = fp.kind == SD_PLAN_WINDOW_SESSIONS ? SD_PLAN_MERGE_NEEDS_MERGE
                                                        : SD_PLAN_MERGE_NON_MERGING;
        break;
    }
    switch (ws->output_time) {
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__LATEST_IN_PANE:
        out->output_time = SD_PLAN_OUTPUT_LATEST_IN_PANE;
        break;
    case ORG__APACHE__BEAM__MODEL__PIPELINE__V1__OUTPUT_TIME__ENUM__EARLIEST_IN_PANE:
        out->output_time = SD_PLAN_OUTPUT_EARLIEST_IN_PANE;
        break;
    default:
        out->output_time = SD_PLAN_OUTPUT_END_OF_WINDOW;
        break;
    }
    out->accumulation =
        ws->accumulation_mode ==
                ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ACCUMULATION_MODE__ENUM__ACCUMULATING
            ? SD_PLAN_ACCUMULATING
            : SD_PLAN_DISCARDING;
    /* UNSPECIFIED is taken as Java's default, FIRE_IF_NON_EMPTY; SDKs that want an empty
     * final pane (Python, TypeScript) say EMIT_ALWAYS explicitly. */
    out->closing =
        ws->closing_behavior ==
                ORG__APACHE__BEAM__MODEL__PIPELINE__V1__CLOSING_BEHAVIOR__ENUM__EMIT_ALWAYS
            ? SD_PLAN_EMIT_ALWAYS
            : SD_PLAN_EMIT_IF_NONEMPTY;
    out->on_time =
        ws->on_time_behavior ==
                ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ON_TIME_BEHAVIOR__ENUM__FIRE_IF_NONEMPTY
            ? SD_PLAN_FIRE_IF_NONEMPTY
            : SD_PLAN_FIRE_ALWAYS;
    out->allowed_lateness_ms = ws->allowed_lateness;
    out->assigns_to_one_window = ws->assigns_to_one_window;
    out->no_closing_tail = sd__plan_has_go_env(c);
    const char *wurn = sd__plan_coder_urn(c, ws->window_coder_id);
    out->interval_windows = wurn != NULL && streq(wurn, SD_URN_CODER_INTERVAL_WINDOW);
    if (!trigger_is_default(ws->trigger)) {
        PL_TRY(translate_one(a, ws->trigger, &out->trigger));
    }
    return SD_OK;
}
