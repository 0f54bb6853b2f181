/*
 * Sundial C SDK: splittable DoFns — the offset-range tracker, watermark estimators, the
 * calendar arithmetic of bounded-delay watermarks, and the restriction codec.
 *
 * How an SDF runs. The runner expands a ParDo whose ParDoPayload names a restriction coder
 * into three transforms, which the bundle processor (proc_ops.c) runs with these helpers:
 *
 *   element --pair_with_restriction--> KV(element, restriction)
 *           --split_and_size---------> KV(KV(element, part), size)        (one per part)
 *           --process_sized_element--> outputs, and maybe a residual root
 *
 * A restriction travels as varint(from) varint(to) varint(watermark estimator state); the
 * runner never looks inside. In process, the DoFn claims offsets through the tracker. When it
 * asks to resume (a self-checkpoint), the tracker is cut after the last claimed offset: the
 * call keeps [from, last + 1) and the rest [last + 1, to) goes back to the runner as a
 * DelayedBundleApplication with the requested delay and the estimator's current watermark as
 * the output watermark of every output. A split request from the runner cuts the tracker the
 * same way, at a fraction of the unclaimed work, while process runs (under the processor's
 * split lock).
 *
 * Watermark estimators (their state is the estimate itself, so it survives checkpoints):
 *   monotonic       max of the timestamps of everything emitted;
 *   bounded delay   max over emitted elements of (timestamp - delay), where the delay is a
 *                   day-time interval in ms and/or a year-month interval; each element's
 *                   candidate is computed before the max is taken (month arithmetic clamps,
 *                   so the order is part of the definition);
 *   wall time       the SDK's wall clock when the estimate is read;
 *   manual          what the DoFn set with sd_watermark_set.
 * Estimates never move backwards within an estimator except for manual, which reports what
 * it was told (the runner keeps watermarks monotone anyway).
 *
 * Calendar months: t - n months takes t's UTC civil date, moves the month back by n, clamps
 * the day to the length of the target month (Mar 31 - 1 month = Feb 28, or Feb 29 in a leap
 * year) and keeps the time of day. The day-number conversions are the usual closed forms over
 * 400-year eras, valid across Beam's whole timestamp range.
 */
#include <pthread.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "sdk-harness/src/sdf_int.h"

#define MS_PER_DAY 86400000LL

/* ================================================================ tracker */

void sd__tracker_init(sd__tracker *t, sd_offset_range r)
{
    memset(t, 0, sizeof(*t));
    t->r = r;
    if (t->r.to < t->r.from) {
        t->r.to = t->r.from;
    }
}

int64_t sd__tracker_next(const sd__tracker *t)
{
    return t->claimed ? t->last + 1 : t->r.from;
}

int sd__tracker_claim(sd__tracker *t, int64_t pos)
{
    if (pos < t->r.from || (t->claimed && pos <= t->last)) {
        return -1;
    }
    if (pos >= t->r.to) {
        t->exhausted = true;
        return 0;
    }
    t->last = pos;
    t->claimed = true;
    return 1;
}

bool sd__tracker_done(const sd__tracker *t)
{
    return t->exhausted || sd__tracker_next(t) >= t->r.to;
}

bool sd__tracker_split(sd__tracker *t, double fraction, sd_offset_range *residual)
{
    int64_t next = sd__tracker_next(t);
    if (t->exhausted || next >= t->r.to) {
        return false;
    }
    if (!(fraction > 0)) {
        fraction = 0;
    }
    /* Remaining work as a double: to - next may not fit an int64 for huge ranges. */
    double remaining = (double)t->r.to - (double)next;
    double step = remaining * fraction; /* >= 0: truncation is the floor */
    int64_t split;
    if (step >= remaining) {
        return false;
    }
    split = next + (int64_t)step;
    /* An in-progress claim stays in the primary: never split at or before it. */
    if (t->claimed && split <= t->last) {
        split = t->last + 1;
    }
    if (split >= t->r.to) {
        return false;
    }
    residual->from = split;
    residual->to = t->r.to;
    t->r.to = split;
    return true;
}

/* ================================================================ watermark estimators */

void sd__wm_init(sd__wm_est *e, const sd_wm_spec *spec, sd_time state)
{
    memset(e, 0, sizeof(*e));
    if (spec != NULL) {
        e->spec = *spec;
    }
    e->wm = sd_time_clamp(state);
}

void sd__wm_observe(sd__wm_est *e, sd_time ts)
{
    sd_time cand;
    switch (e->spec.kind) {
    case SD_WM_MONOTONIC:
        cand = ts;
        break;
    case SD_WM_BOUNDED_DELAY:
        cand = sd_time_minus_interval(ts, e->spec.delay); /* per element, before the max */
        break;
    default:
        return;
    }
    if (cand > e->wm) {
        e->wm = cand;
    }
}

void sd__wm_set(sd__wm_est *e, sd_time wm)
{
    if (e->spec.kind == SD_WM_MANUAL) {
        e->wm = sd_time_clamp(wm);
    }
}

sd_time sd__wm_current(sd__wm_est *e, sd_time wall_now)
{
    if (e->spec.kind == SD_WM_WALL_TIME && wall_now > e->wm) {
        e->wm = sd_time_clamp(wall_now);
    }
    return e->wm;
}

bool sd__wm_reports(const sd__wm_est *e)
{
    return e->spec.kind != SD_WM_NONE;
}

/* ================================================================ calendar */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int sd__days_in_month(int64_t y, int m)
{
    static const int len[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    if (m < 1 || m > 12) {
        return 0;
    }
    return m == 2 && is_leap(y) ? 29 : len[m - 1];
}

/*
 * Count from 0000-03-01 in years that start in March, so the leap day ends a year: an era is
 * 400 years = 146097 days; within it a year has 365 days plus its share of leap days.
 */
int64_t sd__days_from_civil(int64_t y, int m, int d)
{
    int64_t yy = m <= 2 ? y - 1 : y;
    int64_t era = floor_div(yy, 400);
    int64_t yoe = yy - era * 400;                      /* [0, 399] */
    int64_t mp = m > 2 ? m - 3 : m + 9;                /* March = 0 */
    int64_t doy = (153 * mp + 2) / 5 + (int64_t)d - 1; /* [0, 365] */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468; /* 719468 = days from 0000-03-01 to 1970-01-01 */
}

void sd__civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
    int64_t z = days + 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097;                                      /* [0, 146096] */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               /* [0, 365] */
    int64_t mp = (5 * doy + 2) / 153;                                    /* [0, 11] */
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2 ? 1 : 0);
}

sd_time sd__time_minus_months(sd_time t, int64_t months)
{
    if (months == 0) {
        return t;
    }
    /* Beyond ~10^6 years either way the answer is off Beam's range. */
    if (months > 12LL * 1000000 || months < -12LL * 1000000) {
        return months > 0 ? SD_TIME_MIN : SD_TIME_MAX;
    }
    int64_t days = floor_div(t, MS_PER_DAY);
    int64_t ms_of_day = t - days * MS_PER_DAY;
    int64_t y;
    int m, d;
    sd__civil_from_days(days, &y, &m, &d);
    int64_t total = y * 12 + (m - 1) - months;
    int64_t ny = floor_div(total, 12);
    int nm = (int)(total - ny * 12) + 1;
    int dim = sd__days_in_month(ny, nm);
    int nd = d < dim ? d : dim;
    int64_t nt = sd__days_from_civil(ny, nm, nd) * MS_PER_DAY + ms_of_day;
    return sd_time_clamp(nt);
}

sd_time sd_time_minus_interval(sd_time t, sd_interval iv)
{
    sd_time r = sd__time_minus_months(t, iv.months);
    /* sd_time_add saturates at Beam's range. */
    if (iv.ms == INT64_MIN) {
        return SD_TIME_MAX;
    }
    return sd_time_add(r, -iv.ms);
}

/* ================================================================ codec */

sd_status sd__restriction_encode(sd_buf *out, sd_offset_range r, sd_time wm_state)
{
    sd_status st = sd_enc_int(out, r.from);
    if (st == SD_OK) {
        st = sd_enc_int(out, r.to);
    }
    if (st == SD_OK) {
        st = sd_enc_int(out, wm_state);
    }
    return st;
}

sd_status sd__restriction_decode(sd_reader *in, sd_offset_range *r, sd_time *wm_state)
{
    sd_reader save = *in;
    int64_t from, to, wm;
    if (sd_read_int(in, &from) != SD_OK || sd_read_int(in, &to) != SD_OK ||
        sd_read_int(in, &wm) != SD_OK) {
        *in = save;
        return SD_EPROTO;
    }
    r->from = from;
    r->to = to;
    *wm_state = sd_time_clamp(wm);
    return SD_OK;
}

sd_status sd__sdf_payload_append(sd_buf *payload, const sd_wm_spec *wm)
{
    sd_status st = sd_buf_append(payload, "S", 1);
    if (st == SD_OK) {
        st = sd_enc_int(payload, (int64_t)wm->kind);
    }
    if (st == SD_OK) {
        st = sd_enc_int(payload, wm->delay.months);
    }
    if (st == SD_OK) {
        st = sd_enc_int(payload, wm->delay.ms);
    }
    return st;
}

static sd_status skip_lp_list(sd_reader *r)
{
    int64_t n;
    sd_bytes b;
    if (sd_read_int(r, &n) != SD_OK || n < 0) {
        return SD_EPROTO;
    }
    for (int64_t i = 0; i < n; i++) {
        if (sd_reader_lp(r, &b) != SD_OK) {
            return SD_EPROTO;
        }
    }
    return SD_OK;
}

sd_status sd__sdf_payload_wm(sd_bytes payload, sd_wm_spec *wm, sd_err *err)
{
    sd_reader r = sd_reader_make(payload);
    sd_bytes b;
    int64_t kind, months, ms;
    memset(wm, 0, sizeof(*wm));
    if (sd_reader_lp(&r, &b) != SD_OK || sd_reader_lp(&r, &b) != SD_OK ||
        skip_lp_list(&r) != SD_OK || skip_lp_list(&r) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "%s payload: malformed before the SDF trailer",
                          SD_URN_DOFN_C);
    }
    if (sd_reader_done(&r)) {
        return SD_OK;
    }
    if (r.p[0] != 'S') {
        return sd_err_set(err, SD_EPROTO, "%s payload: unknown trailer byte 0x%02x", SD_URN_DOFN_C,
                          r.p[0]);
    }
    r.p++;
    if (sd_read_int(&r, &kind) != SD_OK || sd_read_int(&r, &months) != SD_OK ||
        sd_read_int(&r, &ms) != SD_OK || kind < SD_WM_NONE || kind > SD_WM_BOUNDED_DELAY ||
        months < INT32_MIN || months > INT32_MAX) {
        return sd_err_set(err, SD_EPROTO, "%s payload: malformed watermark estimator trailer",
                          SD_URN_DOFN_C);
    }
    wm->kind = (sd_wm_kind)kind;
    wm->delay.months = (int32_t)months;
    wm->delay.ms = ms;
    return SD_OK;
}

/* ================================================================ DoFn API */

static void lock(sd__sdf_call *s)
{
    if (s->lock != NULL) {
        pthread_mutex_lock(s->lock);
    }
}

static void unlock(sd__sdf_call *s)
{
    if (s->lock != NULL) {
        pthread_mutex_unlock(s->lock);
    }
}

sd_offset_range sd_ctx_restriction(const sd_ctx *c)
{
    sd__sdf_call *s = sd__ctx_sdf(c);
    sd_offset_range r = { 0, 0 };
    if (s != NULL) {
        lock(s);
        r = s->tracker.r;
        unlock(s);
    }
    return r;
}

bool sd_try_claim(sd_ctx *c, int64_t pos)
{
    sd__sdf_call *s = sd__ctx_sdf(c);
    if (s == NULL || !s->in_process) {
        SD_IGNORE(
            sd_fail(c, "sd_try_claim(%lld) outside a splittable DoFn's process", (long long)pos));
        return false;
    }
    lock(s);
    sd__tracker t = s->tracker;
    int rc = sd__tracker_claim(&s->tracker, pos);
    unlock(s);
    if (rc < 0) {
        if (t.claimed) {
            SD_IGNORE(sd_fail(c, "sd_try_claim(%lld): offsets must increase (last claimed %lld)",
                              (long long)pos, (long long)t.last));
        } else {
            SD_IGNORE(sd_fail(c, "sd_try_claim(%lld): below the restriction [%lld, %lld)",
                              (long long)pos, (long long)t.r.from, (long long)t.r.to));
        }
        return false;
    }
    return rc == 1;
}

sd_status sd_resume(sd_ctx *c, int64_t delay_ms)
{
    sd__sdf_call *s = sd__ctx_sdf(c);
    if (s == NULL || !s->in_process) {
        return sd_fail(c, "sd_resume outside a splittable DoFn's process");
    }
    if (delay_ms < 0) {
        return sd_fail(c, "sd_resume: negative delay %lld ms", (long long)delay_ms);
    }
    s->resume = true;
    s->delay_ms = delay_ms;
    return SD_OK;
}

sd_status sd_restriction_emit(sd_ctx *c, sd_offset_range part)
{
    sd__sdf_call *s = sd__ctx_sdf(c);
    if (s == NULL || s->parts == NULL) {
        return sd_fail(c, "sd_restriction_emit outside split_restriction");
    }
    if (part.to < part.from) {
        return sd_fail(c, "sd_restriction_emit: empty-backwards range [%lld, %lld)",
                       (long long)part.from, (long long)part.to);
    }
    return sd_vec_push(s->parts, &part);
}

sd_status sd_watermark_set(sd_ctx *c, sd_time watermark)
{
    sd__sdf_call *s = sd__ctx_sdf(c);
    if (s == NULL || !s->in_process) {
        return sd_fail(c, "sd_watermark_set outside a splittable DoFn's process");
    }
    lock(s);
    sd__wm_set(&s->wm, watermark);
    unlock(s);
    return SD_OK;
}

sd_time sd_ctx_watermark(const sd_ctx *c)
{
    sd__sdf_call *s = sd__ctx_sdf(c);
    if (s == NULL) {
        return SD_TIME_MIN;
    }
    lock(s);
    sd_time wm = sd__wm_current(&s->wm, sd_wall_now_ms());
    unlock(s);
    return wm;
}

void sd__sdf_observe(sd__sdf_call *s, sd_time ts)
{
    lock(s);
    sd__wm_observe(&s->wm, ts);
    unlock(s);
}
