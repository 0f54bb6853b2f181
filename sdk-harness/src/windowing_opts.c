/*
 * Sundial C SDK: triggers for windowing strategies (the sd_trigger_* builders).
 *
 * A trigger is a small immutable tree. Each node is one heap allocation handed to the pipeline
 * (sd__pipeline_own), so nodes live exactly as long as the pipeline, may be shared by several
 * trees and strategies, and user code never frees them. Nodes point at their children; since
 * a child must exist before its parent is built, a tree can never contain a cycle.
 *
 * The builders check what Beam's model requires of each node (counts >= 1 and within the
 * proto's int32, delays >= 0, aligned periods > 0, at least one sub-trigger for the
 * composites, both parts of OrFinally) and report the first violation as the pipeline's sticky
 * error, naming the builder and the bad value. Deeper rules that depend on the runner (Sundial
 * does not run triggers on merging windows, nor AfterSynchronizedProcessingTime) are left to
 * the runner's validation, which reports them all at submission.
 *
 * Translation (sd__trigger_proto) writes Beam's Trigger message into the build arena, one
 * message per node visit: a shared node simply appears twice in the proto, which is what the
 * proto's tree shape requires.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "sdk-harness/src/sdk_int.h"

#define TRIGGER_MAGIC 0x53445452u

typedef enum trig_kind {
    TK_DEFAULT = 0,
    TK_NEVER,
    TK_ALWAYS,
    TK_AFTER_COUNT,
    TK_AFTER_PROCESSING_TIME,
    TK_AFTER_WATERMARK,
    TK_AFTER_ALL,
    TK_AFTER_ANY,
    TK_AFTER_EACH,
    TK_REPEATEDLY,
    TK_OR_FINALLY
} trig_kind;

struct sd_trigger_spec {
    uint32_t magic;
    const sd_pipeline *p;
    trig_kind kind;
    int64_t count;    /* AFTER_COUNT */
    int64_t delay_ms; /* AFTER_PROCESSING_TIME */
    bool aligned;     /* AFTER_PROCESSING_TIME: period_ms / offset_ms are set */
    int64_t period_ms;
    int64_t offset_ms;
    const sd_trigger_spec *early; /* AFTER_WATERMARK (may be NULL) */
    const sd_trigger_spec *late;  /* AFTER_WATERMARK (may be NULL) */
    size_t n_subs;                /* composites, REPEATEDLY (1), OR_FINALLY (2) */
    const sd_trigger_spec **subs; /* owned array */
};

#define PL_DESC(x)   org__apache__beam__model__pipeline__v1__##x##__descriptor
#define TRIG_CASE(x) ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TRIGGER__TRIGGER_##x

typedef SD_PL(Trigger) pb_Trigger;

/* ================================================================ construction */

static void trig_free(void *v)
{
    sd_trigger_spec *t = v;
    if (t != NULL) {
        sd_free(t->subs);
        t->magic = 0;
        sd_free(t);
    }
}

bool sd__trigger_belongs(const sd_trigger_spec *t, const sd_pipeline *p)
{
    return t != NULL && t->magic == TRIGGER_MAGIC && t->p == p;
}

/* A new node of kind with n_subs children (checked, copied). NULL on error (sticky). */
static sd_trigger_spec *new_node(sd_pipeline *p,
                                 const char *what,
                                 trig_kind kind,
                                 const sd_trigger_spec *const *subs,
                                 size_t n_subs)
{
    if (sd__pipeline_failed(p)) {
        return NULL;
    }
    for (size_t i = 0; i < n_subs; i++) {
        if (subs[i] == NULL) {
            return sd__pipeline_fail(p, SD_EINVAL, "%s: sub-trigger %zu is NULL", what, i);
        }
        if (!sd__trigger_belongs(subs[i], p)) {
            return sd__pipeline_fail(p, SD_EINVAL,
                                     "%s: sub-trigger %zu was built for another pipeline", what, i);
        }
    }
    sd_trigger_spec *t = sd_calloc(1, sizeof(*t));
    if (t == NULL) {
        return sd__pipeline_fail(p, SD_ENOMEM, "out of memory while building %s", what);
    }
    t->magic = TRIGGER_MAGIC;
    t->p = p;
    t->kind = kind;
    if (n_subs > 0) {
        t->subs = sd_calloc(n_subs, sizeof(*t->subs));
        if (t->subs == NULL) {
            sd_free(t);
            return sd__pipeline_fail(p, SD_ENOMEM, "out of memory while building %s", what);
        }
        memcpy(t->subs, subs, n_subs * sizeof(*t->subs));
        t->n_subs = n_subs;
    }
    return sd__pipeline_own(p, t, trig_free) ? t : NULL;
}

const sd_trigger_spec *sd_trigger_default(sd_pipeline *p)
{
    return new_node(p, "sd_trigger_default", TK_DEFAULT, NULL, 0);
}

const sd_trigger_spec *sd_trigger_never(sd_pipeline *p)
{
    return new_node(p, "sd_trigger_never", TK_NEVER, NULL, 0);
}

const sd_trigger_spec *sd_trigger_always(sd_pipeline *p)
{
    return new_node(p, "sd_trigger_always", TK_ALWAYS, NULL, 0);
}

const sd_trigger_spec *sd_trigger_after_count(sd_pipeline *p, int64_t count)
{
    if (!sd__pipeline_failed(p) && (count < 1 || count > INT32_MAX)) {
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "sd_trigger_after_count: count must be in 1..%d, got %lld",
                                 INT32_MAX, (long long)count);
    }
    sd_trigger_spec *t = new_node(p, "sd_trigger_after_count", TK_AFTER_COUNT, NULL, 0);
    if (t != NULL) {
        t->count = count;
    }
    return t;
}

const sd_trigger_spec *sd_trigger_after_processing_time(sd_pipeline *p, int64_t delay_ms)
{
    if (!sd__pipeline_failed(p) && delay_ms < 0) {
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "sd_trigger_after_processing_time: delay must be >= 0 ms, got "
                                 "%lld",
                                 (long long)delay_ms);
    }
    sd_trigger_spec *t =
        new_node(p, "sd_trigger_after_processing_time", TK_AFTER_PROCESSING_TIME, NULL, 0);
    if (t != NULL) {
        t->delay_ms = delay_ms;
    }
    return t;
}

const sd_trigger_spec *sd_trigger_after_processing_time_aligned(sd_pipeline *p,
                                                                int64_t delay_ms,
                                                                int64_t period_ms,
                                                                int64_t offset_ms)
{
    if (!sd__pipeline_failed(p) && period_ms <= 0) {
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "sd_trigger_after_processing_time_aligned: period must be > 0 "
                                 "ms, got %lld",
                                 (long long)period_ms);
    }
    sd_trigger_spec *t = (sd_trigger_spec *)sd_trigger_after_processing_time(p, delay_ms);
    if (t != NULL) {
        t->aligned = true;
        t->period_ms = period_ms;
        t->offset_ms = offset_ms;
    }
    return t;
}

const sd_trigger_spec *sd_trigger_after_watermark(sd_pipeline *p,
                                                  const sd_trigger_spec *early,
                                                  const sd_trigger_spec *late)
{
    const sd_trigger_spec *parts[2];
    size_t n = 0;
    if (early != NULL) {
        parts[n++] = early;
    }
    if (late != NULL) {
        parts[n++] = late;
    }
    /* Checked like sub-triggers (same pipeline); kept in early/late rather than subs. */
    sd_trigger_spec *t = new_node(p, "sd_trigger_after_watermark", TK_AFTER_WATERMARK, parts, n);
    if (t != NULL) {
        sd_free(t->subs);
        t->subs = NULL;
        t->n_subs = 0;
        t->early = early;
        t->late = late;
    }
    return t;
}

static const sd_trigger_spec *composite(sd_pipeline *p,
                                        const char *what,
                                        trig_kind kind,
                                        const sd_trigger_spec *const *subs,
                                        size_t n)
{
    if (!sd__pipeline_failed(p) && (n == 0 || subs == NULL)) {
        return sd__pipeline_fail(p, SD_EINVAL, "%s: needs at least one sub-trigger", what);
    }
    return new_node(p, what, kind, subs, n);
}

const sd_trigger_spec *
sd_trigger_after_all(sd_pipeline *p, const sd_trigger_spec *const *subs, size_t n)
{
    return composite(p, "sd_trigger_after_all", TK_AFTER_ALL, subs, n);
}

const sd_trigger_spec *
sd_trigger_after_any(sd_pipeline *p, const sd_trigger_spec *const *subs, size_t n)
{
    return composite(p, "sd_trigger_after_any", TK_AFTER_ANY, subs, n);
}

const sd_trigger_spec *
sd_trigger_after_each(sd_pipeline *p, const sd_trigger_spec *const *subs, size_t n)
{
    return composite(p, "sd_trigger_after_each", TK_AFTER_EACH, subs, n);
}

const sd_trigger_spec *sd_trigger_repeatedly(sd_pipeline *p, const sd_trigger_spec *sub)
{
    return new_node(p, "sd_trigger_repeatedly", TK_REPEATEDLY, &sub, 1);
}

const sd_trigger_spec *
sd_trigger_or_finally(sd_pipeline *p, const sd_trigger_spec *main, const sd_trigger_spec *finally)
{
    const sd_trigger_spec *parts[2] = { main, finally };
    return new_node(p, "sd_trigger_or_finally", TK_OR_FINALLY, parts, 2);
}

/* ================================================================ proto translation */

static void *pbnew(sd_arena *a, const ProtobufCMessageDescriptor *d)
{
    return sd__pb_alloc(a, d);
}

static pb_Trigger *to_proto(sd_arena *a, const sd_trigger_spec *t, unsigned depth);

static pb_Trigger **
list_proto(sd_arena *a, const sd_trigger_spec *const *subs, size_t n, unsigned depth)
{
    pb_Trigger **arr = sd_arena_alloc(a, (n + 1) * sizeof(*arr));
    for (size_t i = 0; arr != NULL && i < n; i++) {
        if ((arr[i] = to_proto(a, subs[i], depth + 1)) == NULL) {
            return NULL;
        }
    }
    return arr;
}

/* Every allocation failure returns NULL (the arena is marked failed too). */
static pb_Trigger *to_proto(sd_arena *a, const sd_trigger_spec *t, unsigned depth)
{
    pb_Trigger *m = pbnew(a, &PL_DESC(trigger));
    if (m == NULL) {
        return NULL;
    }
    /* Trees are acyclic by construction; depth only guards the C stack against absurd ones. */
    if (depth > 1000) {
        a->failed = true;
        return NULL;
    }
    switch (t != NULL ? t->kind : TK_DEFAULT) {
    case TK_DEFAULT:
        m->trigger_case = TRIG_CASE(DEFAULT);
        m->default_ = pbnew(a, &PL_DESC(trigger__default));
        return m->default_ != NULL ? m : NULL;
    case TK_NEVER:
        m->trigger_case = TRIG_CASE(NEVER);
        m->never = pbnew(a, &PL_DESC(trigger__never));
        return m->never != NULL ? m : NULL;
    case TK_ALWAYS:
        m->trigger_case = TRIG_CASE(ALWAYS);
        m->always = pbnew(a, &PL_DESC(trigger__always));
        return m->always != NULL ? m : NULL;
    case TK_AFTER_COUNT:
        m->trigger_case = TRIG_CASE(ELEMENT_COUNT);
        m->element_count = pbnew(a, &PL_DESC(trigger__element_count));
        if (m->element_count == NULL) {
            return NULL;
        }
        m->element_count->element_count = (int32_t)t->count;
        return m;
    case TK_AFTER_PROCESSING_TIME: {
        SD_PL(Trigger__AfterProcessingTime) *apt =
            pbnew(a, &PL_DESC(trigger__after_processing_time));
        SD_PL(TimestampTransform) **tts = sd_arena_alloc(a, 2 * sizeof(*tts));
        SD_PL(TimestampTransform) *delay = pbnew(a, &PL_DESC(timestamp_transform));
        SD_PL(TimestampTransform__Delay) *d = pbnew(a, &PL_DESC(timestamp_transform__delay));
        if (apt == NULL || tts == NULL || delay == NULL || d == NULL) {
            return NULL;
        }
        d->delay_millis = t->delay_ms;
        delay->timestamp_transform_case =
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIMESTAMP_TRANSFORM__TIMESTAMP_TRANSFORM_DELAY;
        delay->delay = d;
        tts[apt->n_timestamp_transforms++] = delay;
        if (t->aligned) {
            SD_PL(TimestampTransform) *align = pbnew(a, &PL_DESC(timestamp_transform));
            SD_PL(TimestampTransform__AlignTo) *al =
                pbnew(a, &PL_DESC(timestamp_transform__align_to));
            if (align == NULL || al == NULL) {
                return NULL;
            }
            al->period = t->period_ms;
            al->offset = t->offset_ms;
            align->timestamp_transform_case =
                ORG__APACHE__BEAM__MODEL__PIPELINE__V1__TIMESTAMP_TRANSFORM__TIMESTAMP_TRANSFORM_ALIGN_TO;
            align->align_to = al;
            tts[apt->n_timestamp_transforms++] = align;
        }
        apt->timestamp_transforms = tts;
        m->trigger_case = TRIG_CASE(AFTER_PROCESSING_TIME);
        m->after_processing_time = apt;
        return m;
    }
    case TK_AFTER_WATERMARK: {
        SD_PL(Trigger__AfterEndOfWindow) *eow = pbnew(a, &PL_DESC(trigger__after_end_of_window));
        if (eow == NULL) {
            return NULL;
        }
        if (t->early != NULL && (eow->early_firings = to_proto(a, t->early, depth + 1)) == NULL) {
            return NULL;
        }
        if (t->late != NULL && (eow->late_firings = to_proto(a, t->late, depth + 1)) == NULL) {
            return NULL;
        }
        m->trigger_case = TRIG_CASE(AFTER_END_OF_WINDOW);
        m->after_end_of_window = eow;
        return m;
    }
    case TK_AFTER_ALL: {
        SD_PL(Trigger__AfterAll) *x = pbnew(a, &PL_DESC(trigger__after_all));
        if (x == NULL || (x->subtriggers = list_proto(a, t->subs, t->n_subs, depth)) == NULL) {
            return NULL;
        }
        x->n_subtriggers = t->n_subs;
        m->trigger_case = TRIG_CASE(AFTER_ALL);
        m->after_all = x;
        return m;
    }
    case TK_AFTER_ANY: {
        SD_PL(Trigger__AfterAny) *x = pbnew(a, &PL_DESC(trigger__after_any));
        if (x == NULL || (x->subtriggers = list_proto(a, t->subs, t->n_subs, depth)) == NULL) {
            return NULL;
        }
        x->n_subtriggers = t->n_subs;
        m->trigger_case = TRIG_CASE(AFTER_ANY);
        m->after_any = x;
        return m;
    }
    case TK_AFTER_EACH: {
        SD_PL(Trigger__AfterEach) *x = pbnew(a, &PL_DESC(trigger__after_each));
        if (x == NULL || (x->subtriggers = list_proto(a, t->subs, t->n_subs, depth)) == NULL) {
            return NULL;
        }
        x->n_subtriggers = t->n_subs;
        m->trigger_case = TRIG_CASE(AFTER_EACH);
        m->after_each = x;
        return m;
    }
    case TK_REPEATEDLY: {
        SD_PL(Trigger__Repeat) *x = pbnew(a, &PL_DESC(trigger__repeat));
        if (x == NULL || (x->subtrigger = to_proto(a, t->subs[0], depth + 1)) == NULL) {
            return NULL;
        }
        m->trigger_case = TRIG_CASE(REPEAT);
        m->repeat = x;
        return m;
    }
    case TK_OR_FINALLY: {
        SD_PL(Trigger__OrFinally) *x = pbnew(a, &PL_DESC(trigger__or_finally));
        if (x == NULL || (x->main = to_proto(a, t->subs[0], depth + 1)) == NULL ||
            (x->finally = to_proto(a, t->subs[1], depth + 1)) == NULL) {
            return NULL;
        }
        m->trigger_case = TRIG_CASE(OR_FINALLY);
        m->or_finally = x;
        return m;
    }
    }
    return NULL;
}

pb_Trigger *sd__trigger_proto(sd_arena *a, const sd_trigger_spec *t)
{
    pb_Trigger *m = to_proto(a, t, 0);
    if (m == NULL) {
        a->failed = true;
    }
    return m;
}
