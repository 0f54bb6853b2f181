/*
 * Sundial: executor: pausing, stepping and inspecting a test-mode job (the control surface).
 *
 * The engine holds the gate (runner/engine/em_pause.h); this file is what a person or a test
 * reaches it through: the pipeline options that start a job paused, and one JSON API that the
 * web server exposes under /api/jobs/ID/... (sundialctl, the Python helper and the C SDK's
 * helper all speak it):
 *
 *   GET  pause                 the gate, the clock, every stage's watermarks, hold and timer
 *                              counts, the job's state
 *   POST pause[?at=T|before=event]   pause now (or before the clock passes T, or before the
 *                              next TestStream event)
 *   POST step?events=N | for=DURATION | watermark=T&pcollection=ID
 *   POST resume
 *   GET  timers[?stage=S]      the stored timers (key encoded and readable, window, fire, hold)
 *   GET  state?stage=S[&key=READABLE | &key_hex=HEX]   committed user state
 *   GET  elements?pcollection=P   what was delivered into P so far (with the tap: a job started
 *                              with a pause option keeps it)
 *
 * Options: beam:option:sundial_pause:v1 = "start" (closed from the start) or "event" (closed
 * before the first TestStream event); beam:option:sundial_pause_at:v1 = an RFC 3339 time on the
 * job clock, or "+DURATION" from the job's start. Times in requests: RFC 3339, "+DURATION"
 * (from the clock now), or ms since the epoch; durations "59m", "1h30m", "90s", "250ms" or ms.
 * Wall-clock jobs refuse every pause, with the engine's reason. Loop thread only.
 */
#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/coder/value.h"
#include "runner/engine/em_pause.h"
#include "runner/exec/exec_int.h"

/* Values the tap keeps per PCollection. */
#define TAP_MAX 10000

/* ================================================================ parsing */

/* "59m", "1h30m", "90s", "250ms", "1500" (ms). false when malformed or out of range. */
static bool parse_duration(const char *s, int64_t *out)
{
    int64_t total = 0;
    const char *p = s;
    if (s == NULL || *s == '\0') {
        return false;
    }
    while (*p != '\0') {
        if (!isdigit((unsigned char)*p)) {
            return false;
        }
        int64_t n = 0;
        while (isdigit((unsigned char)*p)) {
            if (n > (INT64_MAX - 9) / 10) {
                return false;
            }
            n = n * 10 + (*p++ - '0');
        }
        int64_t unit = 1;
        if (strncmp(p, "ms", 2) == 0) {
            p += 2;
        } else if (*p == 'h') {
            unit = 3600000, p++;
        } else if (*p == 'm') {
            unit = 60000, p++;
        } else if (*p == 's') {
            unit = 1000, p++;
        } else if (*p == 'd') {
            unit = 86400000, p++;
        } else if (*p != '\0') {
            return false;
        }
        if (n > (INT64_MAX - total) / unit) {
            return false;
        }
        total += n * unit;
    }
    *out = total;
    return true;
}

/* RFC 3339 ("2026-12-07T21:00:00Z", "...:00.250+01:00") -> ms since the epoch. */
static bool parse_rfc3339(const char *s, sd_time *out)
{
    int y, mo, d, h, mi, sec, n = 0;
    if (s == NULL ||
        sscanf(s, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 ||
        n == 0) {
        return false;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) {
        return false;
    }
    const char *p = s + n;
    int64_t ms = 0;
    if (*p == '.') {
        int digits = 0;
        for (p++; isdigit((unsigned char)*p); p++, digits++) {
            if (digits < 3) {
                ms = ms * 10 + (*p - '0');
            }
        }
        if (digits == 0) {
            return false;
        }
        for (; digits < 3; digits++) {
            ms *= 10;
        }
    }
    int64_t offset_min = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (sscanf(p + 1, "%2d:%2d", &oh, &om) != 2 || oh > 23 || om > 59) {
            return false;
        }
        offset_min = (*p == '-' ? -1 : 1) * (oh * 60 + om);
        p += 6;
    } else {
        return false;
    }
    if (*p != '\0') {
        return false;
    }
    /* Days since 1970-01-01 of a proleptic Gregorian date (the civil-from-days inverse). */
    int64_t yy = mo <= 2 ? y - 1 : y;
    int64_t era = (yy >= 0 ? yy : yy - 399) / 400;
    int64_t yoe = yy - era * 400;
    int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = era * 146097 + doe - 719468;
    int64_t secs = days * 86400 + h * 3600 + mi * 60 + sec;
    *out = secs * 1000 + ms - offset_min * 60000;
    return true;
}

/* A time: RFC 3339, "+DURATION" from base, or ms since the epoch. */
static bool parse_time(const char *s, sd_time base, sd_time *out)
{
    int64_t d;
    if (s == NULL) {
        return false;
    }
    if (s[0] == '+') {
        if (!parse_duration(s + 1, &d)) {
            return false;
        }
        *out = sd_time_add(base, d);
        return true;
    }
    if (parse_rfc3339(s, out)) {
        return true;
    }
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0') {
        return false;
    }
    *out = sd_time_clamp(v);
    return true;
}

/* ================================================================ options */

sd_status sd__exec_pause_setup(sd_exec_run *r, sd_err *err)
{
    const char *mode = sd_job_option_string(r->job, "sundial_pause");
    const char *at = sd_job_option_string(r->job, "sundial_pause_at");
    bool tap = sd_job_option_bool(r->job, "sundial_tap", false);
    if (mode == NULL && at == NULL && !tap) {
        return SD_OK;
    }
    sd_status st = SD_OK;
    if (mode != NULL && strcmp(mode, "start") == 0) {
        st = sd_em_pause_start(r->em, err);
    } else if (mode != NULL && strcmp(mode, "event") == 0) {
        st = sd_em_pause_before_event(r->em, err);
    } else if (mode != NULL && mode[0] != '\0' && strcmp(mode, "none") != 0) {
        return sd_err_set(err, SD_EINVAL,
                          "pipeline option beam:option:sundial_pause:v1: expected \"start\" or "
                          "\"event\", got \"%s\"",
                          mode);
    }
    if (st == SD_OK && at != NULL) {
        sd_time t;
        if (!parse_time(at, sd_em_clock_now(r->em), &t)) {
            return sd_err_set(err, SD_EINVAL,
                              "pipeline option beam:option:sundial_pause_at:v1: expected an RFC "
                              "3339 time (2026-01-01T00:00:00Z) or +DURATION (+59m), got \"%s\"",
                              at);
        }
        st = sd_em_pause_at(r->em, t, err);
    }
    if (st == SD_OK) {
        st = sd_em_tap_all(r->em, TAP_MAX, err);
    }
    if (st != SD_OK) {
        return sd_err_prefix(err, "pausing the job: ");
    }
    /* A paused job's clock moves only by its own events: never by real time (slow waves). */
    r->wave_patience = false;
    r->pausable = true;
    return SD_OK;
}

/* ================================================================ JSON */

static json_t *jtime(sd_time t)
{
    char buf[64];
    return json_string(sd_time_format(t, buf, sizeof(buf)));
}

static json_t *jhex(sd_bytes b)
{
    static const char digits[] = "0123456789abcdef";
    char *s = sd_calloc(b.len * 2 + 1, 1);
    if (s == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < b.len; i++) {
        s[2 * i] = digits[b.ptr[i] >> 4];
        s[2 * i + 1] = digits[b.ptr[i] & 15];
    }
    json_t *j = json_string(s);
    sd_free(s);
    return j;
}

static bool unhex(const char *s, sd_buf *out)
{
    size_t n = strlen(s);
    if (n % 2 != 0) {
        return false;
    }
    for (size_t i = 0; i < n; i += 2) {
        int hi = isxdigit((unsigned char)s[i])
                     ? (isdigit((unsigned char)s[i]) ? s[i] - '0'
                                                     : (tolower((unsigned char)s[i]) - 'a' + 10))
                     : -1;
        int lo =
            isxdigit((unsigned char)s[i + 1])
                ? (isdigit((unsigned char)s[i + 1]) ? s[i + 1] - '0'
                                                    : (tolower((unsigned char)s[i + 1]) - 'a' + 10))
                : -1;
        if (hi < 0 || lo < 0 || sd_buf_append_byte(out, (uint8_t)(hi * 16 + lo)) != SD_OK) {
            return false;
        }
    }
    return true;
}

/* A decoded value as JSON: numbers, strings, [k, v] for KVs, arrays; bytes as UTF-8 text when
 * they are printable, else hex; what has no plain form is null. */
static json_t *jvalue(const sd_value *v)
{
    if (v == NULL) {
        return json_null();
    }
    switch (v->kind) {
    case SD_VALUE_NULL:
        return json_null();
    case SD_VALUE_BOOL:
        return json_boolean(v->b);
    case SD_VALUE_INT:
        return json_integer((json_int_t)v->i);
    case SD_VALUE_DOUBLE:
        return json_real(v->d);
    case SD_VALUE_STRING:
        return json_stringn((const char *)v->bytes, v->len);
    case SD_VALUE_BYTES: {
        bool text = true;
        for (size_t i = 0; i < v->len && text; i++) {
            text = v->bytes[i] >= 0x20 && v->bytes[i] < 0x7f;
        }
        return text ? json_stringn((const char *)v->bytes, v->len)
                    : jhex(sd_bytes_make(v->bytes, v->len));
    }
    case SD_VALUE_KV: {
        json_t *a = json_array();
        json_array_append_new(a, jvalue(v->items[0]));
        json_array_append_new(a, jvalue(v->items[1]));
        return a;
    }
    case SD_VALUE_LIST:
    case SD_VALUE_ROW:
    case SD_VALUE_MAP: {
        json_t *a = json_array();
        for (size_t i = 0; i < v->n_items; i++) {
            json_array_append_new(a, jvalue(v->items[i]));
        }
        return a;
    }
    default:
        return json_null();
    }
}

/* The readable form of bytes under coder (nested), or null when it does not decode. */
static json_t *jreadable(const sd_coder *coder, sd_bytes b)
{
    if (coder == NULL) {
        return json_null();
    }
    sd_reader rd = sd_reader_make(b);
    sd_value *v = NULL;
    sd_err err;
    sd_err_clear(&err);
    json_t *j = json_null();
    if (sd_coder_decode(coder, &rd, true, &v, &err) == SD_OK && rd.p == rd.end) {
        json_decref(j);
        j = jvalue(v);
    }
    sd_value_destroy(v);
    return j;
}

/* Readable text of a JSON value for key matching: strings bare, the rest compact JSON. */
static bool json_matches(const json_t *j, const char *want)
{
    if (json_is_string(j)) {
        return strcmp(json_string_value(j), want) == 0;
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    bool eq = s != NULL && strcmp(s, want) == 0;
    sd_free(s);
    return eq;
}

static json_t *jwindow(const sd_window *w)
{
    if (w->global) {
        return json_string("global");
    }
    if (w->custom) {
        return json_string("custom");
    }
    json_t *a = json_array();
    json_array_append_new(a, jtime(w->start));
    json_array_append_new(a, jtime(w->end));
    return a;
}

/* The key coder of stage i (its KV input's key), or NULL. */
static const sd_coder *key_coder(const sd_exec_run *r, size_t i)
{
    const char *in = sd_em_stage_input(r->em, i);
    const sd_coder *c = in != NULL ? sd_em_pcollection_elem_coder(r->em, in) : NULL;
    return c != NULL && c->kind == SD_CODER_KV ? sd_coder_component(c, 0) : NULL;
}

/* Stage by engine id, or by a name it carries (the user's transform names). */
static bool find_stage(sd_exec_run *r, const char *want, size_t *out)
{
    size_t n = sd_em_n_stages(r->em);
    for (size_t i = 0; want != NULL && i < n; i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        if (strcmp(ss.id, want) == 0) {
            *out = i;
            return true;
        }
    }
    for (size_t i = 0; want != NULL && i < n; i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        const char *name = sd__exec_stage_name(r, ss.id);
        if (name != NULL && strstr(name, want) != NULL) {
            *out = i;
            return true;
        }
    }
    return false;
}

/* PCollection by id or by the user's name. NULL when none. */
static const char *find_pcoll(sd_exec_run *r, const char *want)
{
    size_t n = sd_em_n_pcollections(r->em);
    for (size_t i = 0; want != NULL && i < n; i++) {
        sd_em_pcoll_stats ps;
        sd_em_pcollection_info(r->em, i, &ps);
        if (strcmp(ps.id, want) == 0) {
            return ps.id;
        }
    }
    for (size_t i = 0; want != NULL && i < n; i++) {
        sd_em_pcoll_stats ps;
        sd_em_pcollection_info(r->em, i, &ps);
        const char *name = sd__exec_pcoll_name(r, ps.id);
        if (name != NULL && strcmp(name, want) == 0) {
            return ps.id;
        }
    }
    return NULL;
}

static json_t *doc_status(sd_exec_run *r)
{
    sd_em_pause_info pi;
    sd_em_pause_info_get(r->em, &pi);
    json_t *d = json_object();
    json_object_set_new(d, "job", json_string(r->job_id));
    json_object_set_new(d, "state", json_string(sd_job_state_name(sd_job_state_get(r->job))));
    json_object_set_new(d, "paused", json_boolean(pi.closed));
    json_object_set_new(d, "at_rest",
                        json_boolean(pi.at_rest && !r->finishing && sd_map_len(&r->inflight) == 0));
    json_object_set_new(d, "reason", json_string(sd_em_pause_reason_name(pi.reason)));
    json_object_set_new(d, "stepping", json_boolean(pi.stepping));
    json_object_set_new(d, "waiting_for_source", json_boolean(pi.source_waiting));
    sd_time now = sd_em_clock_now(r->em);
    json_object_set_new(d, "clock", jtime(now));
    json_object_set_new(d, "clock_ms", json_integer(now));
    if (pi.step_clock != SD_TIME_MIN) {
        json_object_set_new(d, "step_clock", jtime(pi.step_clock));
        json_object_set_new(d, "step_clock_ms", json_integer(pi.step_clock));
    }
    if (pi.pause_at != SD_TIME_MAX) {
        json_object_set_new(d, "pause_at", jtime(pi.pause_at));
    }
    json_object_set_new(d, "pause_before_event", json_boolean(pi.before_event));
    json_object_set_new(d, "steps_taken", json_integer((json_int_t)pi.steps_taken));
    json_object_set_new(d, "time_steps", json_integer((json_int_t)pi.time_steps));
    sd_time due;
    if (sd_em_next_pt_due(r->em, &due)) {
        json_object_set_new(d, "next_timer", jtime(due));
        json_object_set_new(d, "next_timer_ms", json_integer(due));
    }
    json_t *stages = json_array();
    for (size_t i = 0; i < sd_em_n_stages(r->em); i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        json_t *s = json_object();
        json_object_set_new(s, "id", json_string(ss.id));
        const char *name = sd__exec_stage_name(r, ss.id);
        json_object_set_new(s, "name", json_string(name != NULL ? name : ss.id));
        json_object_set_new(s, "kind", json_string(sd_em_stage_kind_name(ss.kind)));
        json_object_set_new(s, "input_watermark", jtime(ss.input_wm));
        json_object_set_new(s, "output_watermark", jtime(ss.output_wm));
        json_object_set_new(s, "input_watermark_ms", json_integer(ss.input_wm));
        json_object_set_new(s, "output_watermark_ms", json_integer(ss.output_wm));
        json_object_set_new(s, "hold", ss.hold == SD_TIME_MAX ? json_null() : jtime(ss.hold));
        sd_time at[SD_HOLD_SOURCES];
        json_t *holds = json_object();
        if (sd_em_stage_holds(r->em, i, at)) {
            for (int h = 1; h < SD_HOLD_SOURCES; h++) {
                if (at[h] != SD_TIME_MAX) {
                    json_object_set_new(holds, sd_trace_cause_name(SD_TRACE_HOLD, h), jtime(at[h]));
                }
            }
        }
        json_object_set_new(s, "holds", holds); /* by source: what holds it back, and to when */
        json_object_set_new(s, "pending", json_integer((json_int_t)ss.pending));
        json_object_set_new(s, "event_time_timers", json_integer((json_int_t)ss.et_timers));
        json_object_set_new(s, "processing_time_timers", json_integer((json_int_t)ss.pt_timers));
        json_array_append_new(stages, s);
    }
    json_object_set_new(d, "stages", stages);
    json_t *pcs = json_array();
    for (size_t i = 0; i < sd_em_n_pcollections(r->em); i++) {
        sd_em_pcoll_stats ps;
        sd_em_pcollection_info(r->em, i, &ps);
        json_t *p = json_object();
        json_object_set_new(p, "id", json_string(ps.id));
        const char *name = sd__exec_pcoll_name(r, ps.id);
        json_object_set_new(p, "name", json_string(name != NULL ? name : ps.id));
        json_object_set_new(p, "watermark", jtime(ps.watermark));
        json_object_set_new(p, "elements", json_integer((json_int_t)ps.elements));
        json_array_append_new(pcs, p);
    }
    json_object_set_new(d, "pcollections", pcs);
    return d;
}

typedef struct timers_ctx {
    sd_exec_run *r;
    const char *stage;
    const sd_coder *key_coder;
    json_t *out;
} timers_ctx;

static void on_timer(void *ctx, const sd_em_timer_view *t)
{
    timers_ctx *tc = ctx;
    json_t *j = json_object();
    json_object_set_new(j, "stage", json_string(tc->stage));
    json_object_set_new(j, "transform", json_string(t->transform_id));
    const char *tname = sd__exec_transform_name(tc->r, t->transform_id);
    json_object_set_new(j, "transform_name", json_string(tname != NULL ? tname : t->transform_id));
    json_object_set_new(j, "family", json_string(t->family_id));
    json_object_set_new(j, "domain", json_string(t->processing_time ? "processing" : "event"));
    json_object_set_new(j, "key_hex", jhex(t->key));
    json_object_set_new(j, "key", jreadable(tc->key_coder, t->key));
    json_object_set_new(j, "tag", json_stringn((const char *)t->tag.ptr, t->tag.len));
    json_object_set_new(j, "window", jwindow(&t->window));
    json_object_set_new(j, "fire", jtime(t->fire));
    json_object_set_new(j, "fire_ms", json_integer(t->fire));
    json_object_set_new(j, "hold", jtime(t->hold));
    json_array_append_new(tc->out, j);
}

typedef struct state_ctx {
    const sd_coder *key_coder;
    const char *want_readable;
    json_t *out;
} state_ctx;

static void on_state(void *ctx, const sd_em_state_view *s)
{
    state_ctx *sc = ctx;
    json_t *key = jreadable(sc->key_coder, s->key);
    if (sc->want_readable != NULL && !json_matches(key, sc->want_readable)) {
        json_decref(key);
        return;
    }
    json_t *j = json_object();
    json_object_set_new(j, "transform",
                        json_stringn((const char *)s->transform_id.ptr, s->transform_id.len));
    json_object_set_new(j, "state_id",
                        json_stringn((const char *)s->state_id.ptr, s->state_id.len));
    json_object_set_new(j, "window_hex", jhex(s->window));
    json_object_set_new(j, "key_hex", jhex(s->key));
    json_object_set_new(j, "key", key);
    json_object_set_new(j, "value_hex", jhex(s->bag));
    json_object_set_new(j, "value_bytes", json_integer((json_int_t)s->bag.len));
    json_object_set_new(j, "map_keys", json_integer((json_int_t)s->map_keys));
    json_object_set_new(j, "ordered_entries", json_integer((json_int_t)s->ordered));
    json_array_append_new(sc->out, j);
}

typedef struct elems_ctx {
    const sd_coder *coder;
    json_t *out;
} elems_ctx;

static void on_element(void *ctx, const sd_em_tapped_view *v)
{
    elems_ctx *ec = ctx;
    json_t *j = json_object();
    json_object_set_new(j, "value", jreadable(ec->coder, v->element));
    json_object_set_new(j, "hex", jhex(v->element));
    json_object_set_new(j, "timestamp", jtime(v->timestamp));
    json_object_set_new(j, "timestamp_ms", json_integer(v->timestamp));
    json_object_set_new(j, "window", jwindow(&v->window));
    json_array_append_new(ec->out, j);
}

/* ================================================================ the API */

static char *error_doc(int *code, int http, const char *fmt, ...) SD_PRINTF(3, 4);

static char *error_doc(int *code, int http, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *j = json_object();
    json_object_set_new(j, "error", json_string(msg));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    *code = http;
    return text;
}

static int status_code(sd_status st)
{
    switch (st) {
    case SD_ENOTFOUND:
        return 404;
    case SD_ESTATE:
        return 409;
    case SD_EINVAL:
        return 400;
    default:
        return 500;
    }
}

static char *
do_post(sd_exec_run *r, const char *action, sd_exec_param_fn param, void *pctx, int *code)
{
    sd_err err;
    sd_err_clear(&err);
    sd_status st = SD_OK;
    const char *at = param(pctx, "at");
    const char *before = param(pctx, "before");
    if (strcmp(action, "pause") == 0) {
        if (at != NULL) {
            sd_time t;
            if (!parse_time(at, sd_em_clock_now(r->em), &t)) {
                return error_doc(code, 400,
                                 "pause: at=%s is not a time (RFC 3339, +DURATION "
                                 "from the clock now, or ms since the epoch)",
                                 at);
            }
            st = sd_em_pause_at(r->em, t, &err);
        } else if (before != NULL) {
            if (strcmp(before, "event") != 0) {
                return error_doc(code, 400, "pause: before=%s: only before=event is known", before);
            }
            st = sd_em_pause_before_event(r->em, &err);
        } else {
            st = sd_em_pause(r->em, &err);
        }
        if (st == SD_OK) {
            r->wave_patience = false;
            SD_INFO("exec", "job %s: pause requested", r->job_id);
        }
    } else if (strcmp(action, "resume") == 0) {
        sd_em_resume(r->em);
        SD_INFO("exec", "job %s: resumed", r->job_id);
    } else { /* step */
        const char *events = param(pctx, "events");
        const char *dur = param(pctx, "for");
        const char *wm = param(pctx, "watermark");
        if (events != NULL) {
            char *end = NULL;
            unsigned long long n = strtoull(events, &end, 10);
            if (end == events || *end != '\0' || events[0] == '-') {
                return error_doc(code, 400, "step: events=%s is not a count", events);
            }
            st = sd_em_step_events(r->em, n, &err);
        } else if (dur != NULL) {
            int64_t ms;
            if (!parse_duration(dur, &ms)) {
                return error_doc(code, 400,
                                 "step: for=%s is not a duration (59m, 1h30m, 90s, 250ms, or ms)",
                                 dur);
            }
            st = sd_em_step_for(r->em, ms, &err);
        } else if (wm != NULL) {
            sd_time t;
            const char *want = param(pctx, "pcollection");
            const char *pc = find_pcoll(r, want);
            if (!parse_time(wm, sd_em_clock_now(r->em), &t)) {
                return error_doc(code, 400, "step: watermark=%s is not a time", wm);
            }
            if (pc == NULL) {
                return error_doc(code, 404,
                                 "step: no PCollection \"%s\" (give pcollection=ID "
                                 "or its name)",
                                 want != NULL ? want : "");
            }
            st = sd_em_step_to_watermark(r->em, pc, t, &err);
        } else {
            st = sd_em_step_events(r->em, 1, &err); /* the next event */
        }
    }
    if (st != SD_OK) {
        return error_doc(code, status_code(st), "%s: %s", action, sd_err_msg(&err));
    }
    sd__exec_run_kick(r);
    *code = 200;
    json_t *d = doc_status(r);
    /* The step is under way: the kick takes it on the next loop turn. */
    json_object_set_new(d, "at_rest", json_false());
    char *text = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    return text;
}

sd_status sd_exec_control(sd_exec *ex,
                          sd_job *job,
                          const char *action,
                          bool post,
                          sd_exec_param_fn param,
                          void *pctx,
                          char **json_out,
                          int *code)
{
    static const char *const actions[] = {
        "pause", "step", "resume", "timers", "state", "elements"
    };
    bool known = false;
    for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++) {
        known = known || strcmp(action, actions[i]) == 0;
    }
    *json_out = NULL;
    if (!known) {
        return SD_ENOTFOUND;
    }
    sd_exec_run *r = ex != NULL ? sd_map_get_str(&ex->runs, sd_job_id(job)) : NULL;
    if (r == NULL || r->em == NULL || r->finishing) {
        if (strcmp(action, "pause") == 0 && !post) {
            json_t *d = json_object();
            json_object_set_new(d, "job", json_string(sd_job_id(job)));
            json_object_set_new(d, "state", json_string(sd_job_state_name(sd_job_state_get(job))));
            json_object_set_new(d, "paused", json_false());
            json_object_set_new(d, "at_rest", json_false());
            json_object_set_new(d, "running", json_false());
            *json_out = json_dumps(d, JSON_COMPACT);
            json_decref(d);
            *code = 200;
            return SD_OK;
        }
        *json_out = error_doc(code, 409, "%s: job %s is not running (%s)", action, sd_job_id(job),
                              sd_job_state_name(sd_job_state_get(job)));
        return SD_OK;
    }
    bool mutating = strcmp(action, "step") == 0 || strcmp(action, "resume") == 0 ||
                    (strcmp(action, "pause") == 0 && post);
    if (mutating != post) {
        *json_out = error_doc(code, 405, "%s: use %s", action, mutating ? "POST" : "GET");
        return SD_OK;
    }
    if (mutating) {
        *json_out = do_post(r, action, param, pctx, code);
        return SD_OK;
    }
    *code = 200;
    json_t *d = NULL;
    if (strcmp(action, "pause") == 0) {
        d = doc_status(r);
    } else if (strcmp(action, "timers") == 0) {
        const char *want = param(pctx, "stage");
        size_t only = SIZE_MAX;
        if (want != NULL && !find_stage(r, want, &only)) {
            *json_out = error_doc(code, 404, "timers: no stage \"%s\"", want);
            return SD_OK;
        }
        json_t *arr = json_array();
        for (size_t i = 0; i < sd_em_n_stages(r->em); i++) {
            if (only != SIZE_MAX && i != only) {
                continue;
            }
            sd_em_stage_stats ss;
            sd_em_stage_info(r->em, i, &ss);
            timers_ctx tc = { r, ss.id, key_coder(r, i), arr };
            sd_err err;
            sd_err_clear(&err);
            if (sd_em_timers_list(r->em, i, on_timer, &tc, &err) != SD_OK) {
                json_decref(arr);
                *json_out = error_doc(code, 500, "timers: %s", sd_err_msg(&err));
                return SD_OK;
            }
        }
        d = json_object();
        json_object_set_new(d, "timers", arr);
    } else if (strcmp(action, "state") == 0) {
        const char *want = param(pctx, "stage");
        size_t si;
        if (want == NULL || !find_stage(r, want, &si)) {
            *json_out = error_doc(code, 404,
                                  "state: no stage \"%s\" (give stage=ID or a "
                                  "transform name)",
                                  want != NULL ? want : "");
            return SD_OK;
        }
        const char *key_hex = param(pctx, "key_hex");
        sd_buf kb;
        sd_buf_init(&kb, 0);
        sd_bytes key = SD_BYTES_NULL;
        if (key_hex != NULL) {
            if (!unhex(key_hex, &kb)) {
                sd_buf_deinit(&kb);
                *json_out = error_doc(code, 400, "state: key_hex=%s is not hex", key_hex);
                return SD_OK;
            }
            key = sd_bytes_make(kb.data != NULL ? kb.data : (const uint8_t *)"", kb.len);
        }
        state_ctx sc = { key_coder(r, si), param(pctx, "key"), json_array() };
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_em_state_list(r->em, si, key, on_state, &sc, &err);
        sd_buf_deinit(&kb);
        if (st != SD_OK) {
            json_decref(sc.out);
            *json_out = error_doc(code, 500, "state: %s", sd_err_msg(&err));
            return SD_OK;
        }
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, si, &ss);
        d = json_object();
        json_object_set_new(d, "stage", json_string(ss.id));
        json_object_set_new(d, "cells", sc.out);
    } else { /* elements */
        const char *want = param(pctx, "pcollection");
        const char *pc = find_pcoll(r, want);
        if (pc == NULL) {
            *json_out = error_doc(code, 404,
                                  "elements: no PCollection \"%s\" (give "
                                  "pcollection=ID or its name)",
                                  want != NULL ? want : "");
            return SD_OK;
        }
        elems_ctx ec = { sd_em_pcollection_elem_coder(r->em, pc), json_array() };
        uint64_t dropped = 0;
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_em_tapped(r->em, pc, on_element, &ec, &dropped, &err);
        if (st != SD_OK) {
            json_decref(ec.out);
            *json_out = error_doc(code, status_code(st), "elements: %s", sd_err_msg(&err));
            return SD_OK;
        }
        d = json_object();
        json_object_set_new(d, "pcollection", json_string(pc));
        json_object_set_new(d, "elements", ec.out);
        json_object_set_new(d, "not_kept", json_integer((json_int_t)dropped));
    }
    *json_out = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    return SD_OK;
}
