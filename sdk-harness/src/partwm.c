/*
 * Sundial C SDK: ISO 8601 durations, and the watermark rules of partitioned sources — the
 * pure part of sd_read_partitioned (partitioned.c holds the reading).
 *
 * Durations. P[nY][nM][nW][nD][T[nH][nM][n[.fff]S]], strictly: designators upper-case, in
 * that order, each once; numbers are plain digits (no sign: a negative delay would put the
 * watermark ahead of the data, a negative timeout means nothing); seconds alone may have a
 * fraction of 1 to 3 digits (the engine counts milliseconds, so a finer fraction would be
 * rounded silently — it is refused instead); weeks stand alone (ISO 8601-1 does not combine
 * them). Years and months are calendar units and go to sd_interval.months (applied with
 * month-end clamping by sd_time_minus_interval); days are 24 hours, as SQL's day-time
 * intervals (INTERVAL '1' DAY) are. Every multiplication and addition is checked: months
 * must fit an int32, milliseconds an int64.
 *
 * Partition watermarks. For the rules see <sundial/partitioned.h>; here is where each one is:
 *
 *   per partition   sd__partwm_observe: the partition's estimator sees the record's event
 *                   time (bounded delay: the candidate ts - delay first, then the max), the
 *                   partition is active again and its silence restarts; a record without
 *                   an event time (sd__partwm_activity) only does the latter;
 *   idleness        sd__partwm_advance: a partition silent for idle_ms or more of the source
 *                   clock (now - last_data >= idle_ms) is idle;
 *   granularity     sd__partwm_advance: the source's watermark is recomputed only when the
 *                   clock reaches the next multiple of gran_ms;
 *   minimum         the recomputed value is the minimum of the active partitions' watermarks;
 *                   with no active partition there is nothing to take it from, so it stays;
 *   monotone        it is taken only when ahead of the current one: a partition that comes
 *                   back behind the others holds the watermark until it catches up, never
 *                   moves it back (its records behind the watermark are late downstream).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "sdk-harness/src/partwm_int.h"

#define MS_PER_SECOND 1000LL
#define MS_PER_MINUTE (60LL * MS_PER_SECOND)
#define MS_PER_HOUR   (60LL * MS_PER_MINUTE)
#define MS_PER_DAY    (24LL * MS_PER_HOUR)
#define MS_PER_WEEK   (7LL * MS_PER_DAY)

/* ================================================================ ISO 8601 durations */

typedef struct dur_parser {
    const char *text;
    size_t at;
    sd_err *err;
} dur_parser;

static sd_status bad(dur_parser *d, const char *expected)
{
    return sd_err_set(d->err, SD_EINVAL, "duration \"%s\": expected %s at offset %zu", d->text,
                      expected, d->at);
}

/* Digits into *v (no sign); SD_EINVAL when none or on overflow. */
static sd_status digits(dur_parser *d, int64_t *v, size_t *n_digits)
{
    int64_t x = 0;
    size_t n = 0;
    while (d->text[d->at] >= '0' && d->text[d->at] <= '9') {
        int dig = d->text[d->at] - '0';
        if (x > (INT64_MAX - dig) / 10) {
            return bad(d, "a number that fits in 64 bits");
        }
        x = x * 10 + dig;
        d->at++;
        n++;
    }
    if (n == 0) {
        return bad(d, d->text[d->at] == '-' || d->text[d->at] == '+'
                          ? "a number without a sign (durations are never negative)"
                          : "a number");
    }
    *v = x;
    *n_digits = n;
    return SD_OK;
}

/* *acc += v * unit, checked. */
static sd_status add_scaled(dur_parser *d, int64_t *acc, int64_t v, int64_t unit, int64_t limit)
{
    if (v > limit / unit || v * unit > limit - *acc) {
        return bad(d, limit == INT32_MAX ? "at most 2147483647 months in all"
                                         : "at most 9223372036854775807 ms in all");
    }
    *acc += v * unit;
    return SD_OK;
}

sd_status sd_duration_parse(const char *text, sd_interval *out, sd_err *err)
{
    /* The designators in order; months and minutes share 'M', told apart by the T. */
    static const char date_des[] = "YMWD";
    static const char time_des[] = "HMS";
    static const int64_t date_unit[] = { 12, 1, MS_PER_WEEK, MS_PER_DAY };
    static const int64_t time_unit[] = { MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND };
    dur_parser d = { text != NULL ? text : "(null)", 0, err };
    int64_t months = 0, ms = 0;
    size_t next = 0; /* the first designator still allowed in the current part */
    bool in_time = false, any_time = false, week = false;
    int parts = 0;
    if (text == NULL || text[0] != 'P') {
        return bad(&d, "\"P\" (an ISO 8601 duration such as PT5S, PT1M, P1D or P1M)");
    }
    d.at = 1;
    while (d.text[d.at] != '\0') {
        if (d.text[d.at] == 'T') {
            if (in_time) {
                return bad(&d, "one \"T\" only");
            }
            in_time = true;
            next = 0;
            d.at++;
            if (d.text[d.at] == '\0') {
                return bad(&d, "hours, minutes or seconds after \"T\"");
            }
            continue;
        }
        int64_t v, frac = 0;
        size_t n_digits;
        sd_status st = digits(&d, &v, &n_digits);
        if (st != SD_OK) {
            return st;
        }
        bool has_frac = false;
        if (d.text[d.at] == '.' || d.text[d.at] == ',') {
            d.at++;
            size_t n_frac;
            if ((st = digits(&d, &frac, &n_frac)) != SD_OK) {
                return st;
            }
            if (n_frac > 3) {
                d.at -= n_frac;
                return bad(&d, "at most 3 fraction digits (milliseconds)");
            }
            for (size_t i = n_frac; i < 3; i++) {
                frac *= 10;
            }
            has_frac = true;
        }
        const char *des = in_time ? time_des : date_des;
        const char *hit = d.text[d.at] != '\0' ? strchr(des + next, d.text[d.at]) : NULL;
        if (hit == NULL) {
            if (d.text[d.at] != '\0' && strchr(des, d.text[d.at]) != NULL) {
                return bad(&d, "designators in the order Y M W D T H M S, each once");
            }
            return bad(&d, in_time ? "a time designator (H, M or S)"
                                   : "a date designator (Y, M, W or D; T before a time part)");
        }
        size_t k = (size_t)(hit - des);
        if (has_frac && !(in_time && k == 2)) {
            return bad(&d, "a fraction on seconds only");
        }
        if (!in_time && k == 2) {
            week = true;
        }
        if (in_time) {
            st = add_scaled(&d, &ms, v, time_unit[k], INT64_MAX);
            if (st == SD_OK && has_frac) {
                st = add_scaled(&d, &ms, frac, 1, INT64_MAX);
            }
            any_time = true;
        } else if (k <= 1) {
            st = add_scaled(&d, &months, v, date_unit[k], INT32_MAX);
        } else {
            st = add_scaled(&d, &ms, v, date_unit[k], INT64_MAX);
        }
        if (st != SD_OK) {
            return st;
        }
        parts++;
        next = k + 1;
        d.at++;
    }
    if (parts == 0 || (in_time && !any_time)) {
        return bad(&d, "at least one number and designator");
    }
    if (week && parts > 1) {
        d.at = 0;
        return bad(&d, "weeks alone (PnW); ISO 8601 does not combine them with other parts");
    }
    out->months = (int32_t)months;
    out->ms = ms;
    return SD_OK;
}

sd_status sd_duration_parse_ms(const char *text, int64_t *ms, sd_err *err)
{
    sd_interval iv;
    sd_status st = sd_duration_parse(text, &iv, err);
    if (st != SD_OK) {
        return st;
    }
    if (iv.months != 0) {
        return sd_err_set(err, SD_EINVAL,
                          "duration \"%s\": years and months have no fixed length here; expected "
                          "weeks, days, hours, minutes or seconds",
                          text);
    }
    *ms = iv.ms;
    return SD_OK;
}

/* ================================================================ partition watermarks */

int64_t sd__floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0)) ? q - 1 : q;
}

/* The first multiple of g strictly after t, saturating at the end of time. */
static sd_time next_boundary(sd_time t, int64_t g)
{
    int64_t q = sd__floor_div(t, g);
    if (q >= SD_TIME_MAX / g) {
        return SD_TIME_MAX;
    }
    return (q + 1) * g;
}

sd_status sd__partwm_init(sd__partwm *w,
                          size_t n,
                          sd_interval delay,
                          int64_t idle_ms,
                          int64_t gran_ms,
                          sd_time start)
{
    memset(w, 0, sizeof(*w));
    if (n == 0 || gran_ms <= 0 || idle_ms < 0 || delay.months < 0 || delay.ms < 0) {
        return SD_EINVAL;
    }
    w->parts = sd_calloc(n, sizeof(*w->parts));
    if (w->parts == NULL) {
        return SD_ENOMEM;
    }
    sd_wm_spec spec = { .kind = SD_WM_BOUNDED_DELAY, .delay = delay };
    for (size_t i = 0; i < n; i++) {
        sd__wm_init(&w->parts[i].est, &spec, SD_TIME_MIN);
        w->parts[i].last_data = start;
    }
    w->n = n;
    w->idle_ms = idle_ms;
    w->gran_ms = gran_ms;
    /* The first step (at start) recomputes: start itself is the first boundary. */
    w->next_emit = sd__floor_div(start, gran_ms) * gran_ms;
    w->wm = SD_TIME_MIN;
    return SD_OK;
}

void sd__partwm_deinit(sd__partwm *w)
{
    sd_free(w->parts);
    memset(w, 0, sizeof(*w));
}

void sd__partwm_observe(sd__partwm *w, size_t i, sd_time ts, sd_time now)
{
    if (i >= w->n) {
        return;
    }
    sd__wm_observe(&w->parts[i].est, ts);
    w->parts[i].last_data = now;
    w->parts[i].idle = false;
}

void sd__partwm_activity(sd__partwm *w, size_t i, sd_time now)
{
    if (i >= w->n) {
        return;
    }
    w->parts[i].last_data = now;
    w->parts[i].idle = false;
}

bool sd__partwm_advance(sd__partwm *w, sd_time now)
{
    bool changed = false;
    for (size_t i = 0; i < w->n; i++) {
        sd__part_wm *pt = &w->parts[i];
        /* now - last_data >= idle_ms, written so that it cannot overflow. */
        if (!pt->idle && w->idle_ms > 0 && now >= pt->last_data &&
            now - pt->last_data >= w->idle_ms) {
            pt->idle = true;
            changed = true;
        }
    }
    if (now < w->next_emit) {
        return changed;
    }
    w->next_emit = next_boundary(now, w->gran_ms);
    sd_time lo = SD_TIME_MAX;
    bool any = false;
    for (size_t i = 0; i < w->n; i++) {
        if (!w->parts[i].idle) {
            any = true;
            if (w->parts[i].est.wm < lo) {
                lo = w->parts[i].est.wm;
            }
        }
    }
    if (any && lo > w->wm) {
        w->wm = lo;
        changed = true;
    }
    return changed;
}
