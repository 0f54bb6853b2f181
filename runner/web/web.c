/*
 * Sundial: the web UI.
 *
 * What it is
 * ----------
 * A small HTTP server inside `sundial` that shows what a job is doing and why it waits: the
 * jobs list, a job page (stages named by the user transforms fused into them, watermarks,
 * holds, pending timers, element counts, the job clock, messages, Cancel and Drain) and a
 * watermark timeline. The pages are static (assets/, embedded at build time); they draw
 * everything from the JSON endpoints below, polling once a second.
 *
 * Threads: none of its own. libmicrohttpd runs in "external epoll" mode: its epoll
 * descriptor is watched by an ev_io and its timeout by an ev_timer, and MHD_run() is called
 * on the loop thread, so request handlers may read the job service and the executor, which
 * are not thread-safe, directly. The cost: a slow client cannot block us (MHD never blocks in
 * MHD_run), but a huge response is built in one go on the loop (they are bounded: a job's
 * history ring, a timeline of at most SD_EXEC_TIMELINE_MAX samples).
 *
 *   loop --ev_io(epoll fd readable)--> MHD_run --> on_request --> route --> JSON/asset
 *        --ev_timer(MHD_get_timeout)--> MHD_run          (timeouts, queued writes)
 *
 * Only this file includes <microhttpd.h> (tools/check_deps.sh checks it).
 *
 * Safety: every user-provided string (job names, transform and PCollection names, messages)
 * leaves only inside JSON strings, and the page inserts them with textContent, never as
 * markup; the HTML is served with a Content-Security-Policy that allows only our own script
 * and style files. Cancel and Drain are POSTs that must carry X-Sundial-Action (a
 * cross-site form cannot; a cross-site fetch with it needs a preflight, which we refuse), and
 * a loopback server answers only requests whose Host header is a loopback name, so a
 * DNS-rebinding page cannot read it either.
 */
#include "runner/web/web.h"

#include <dlfcn.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"

/*
 * libmicrohttpd is loaded when a web UI starts (dlopen), not with the binary: it brings GnuTLS
 * and eight more libraries whose loading and constructors took about 2 ms of CPU before main,
 * on every start, also the many with --serve_http false (Beam's PrismRunner), whose launchers
 * connect a few milliseconds after the exec. The calls below go through this table.
 */
static struct {
    bool tried;
    char error[256]; /* why it could not be loaded ("" once loaded) */
    __typeof__(MHD_start_daemon) *start_daemon;
    __typeof__(MHD_stop_daemon) *stop_daemon;
    __typeof__(MHD_get_daemon_info) *get_daemon_info;
    __typeof__(MHD_get_timeout) *get_timeout;
    __typeof__(MHD_run) *run;
    __typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
    __typeof__(MHD_add_response_header) *add_response_header;
    __typeof__(MHD_queue_response) *queue_response;
    __typeof__(MHD_destroy_response) *destroy_response;
    __typeof__(MHD_lookup_connection_value) *lookup_connection_value;
} mhd;

#define MHD_start_daemon                (*mhd.start_daemon)
#define MHD_stop_daemon                 (*mhd.stop_daemon)
#define MHD_get_daemon_info             (*mhd.get_daemon_info)
#define MHD_get_timeout                 (*mhd.get_timeout)
#define MHD_run                         (*mhd.run)
#define MHD_create_response_from_buffer (*mhd.create_response_from_buffer)
#define MHD_add_response_header         (*mhd.add_response_header)
#define MHD_queue_response              (*mhd.queue_response)
#define MHD_destroy_response            (*mhd.destroy_response)
#define MHD_lookup_connection_value     (*mhd.lookup_connection_value)

/* dlsym's object pointer as a function pointer (POSIX guarantees the conversion works). */
#define MHD_SYM(lib, field, name)                                                          \
    do {                                                                                   \
        void *sym_ = dlsym((lib), (name));                                                 \
        memcpy(&mhd.field, &sym_, sizeof(sym_));                                           \
        if (sym_ == NULL) {                                                                \
            snprintf(mhd.error, sizeof(mhd.error), "%s has no %s", SD_MHD_SONAME, (name)); \
            return false;                                                                  \
        }                                                                                  \
    } while (0)

/* Load libmicrohttpd once (loop thread). False with mhd.error set when it cannot be. */
static bool mhd_load(void)
{
    if (mhd.tried) {
        return mhd.error[0] == '\0';
    }
    mhd.tried = true;
    void *lib = dlopen(SD_MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        snprintf(mhd.error, sizeof(mhd.error), "cannot load %s: %s", SD_MHD_SONAME,
                 why != NULL ? why : "unknown error");
        return false;
    }
    MHD_SYM(lib, start_daemon, "MHD_start_daemon");
    MHD_SYM(lib, stop_daemon, "MHD_stop_daemon");
    MHD_SYM(lib, get_daemon_info, "MHD_get_daemon_info");
    MHD_SYM(lib, get_timeout, "MHD_get_timeout");
    MHD_SYM(lib, run, "MHD_run");
    MHD_SYM(lib, create_response_from_buffer, "MHD_create_response_from_buffer");
    MHD_SYM(lib, add_response_header, "MHD_add_response_header");
    MHD_SYM(lib, queue_response, "MHD_queue_response");
    MHD_SYM(lib, destroy_response, "MHD_destroy_response");
    MHD_SYM(lib, lookup_connection_value, "MHD_lookup_connection_value");
    return true; /* never unloaded: the process may start another web UI */
}

/* The embedded assets (generated from runner/web/assets by embed.cmake). */
typedef struct sd__web_asset {
    const char *path;
    const char *content_type;
    const unsigned char *data;
    size_t len;
} sd__web_asset;

extern const sd__web_asset sd__web_assets[];
extern const size_t sd__web_n_assets;

#define WEB_MAGIC           0x57454253u /* "WEBS" */
#define WEB_MAX_CONNECTIONS 64
#define WEB_CONN_TIMEOUT_S  30
#define WEB_MAX_BODY        4096 /* POST bodies are ignored; more than this is refused */
#define WEB_CSP                                                                 \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

struct sd_web {
    uint32_t magic;
    struct ev_loop *loop;
    struct MHD_Daemon *daemon;
    ev_io io;
    ev_timer timer;
    sd_jobsvc *jobs;
    sd_exec *exec;
    bool loopback;
    int port;
    char url[320];
    char last_error[256]; /* the last message libmicrohttpd logged (bind errors) */
};

/* Per-request state kept between the calls MHD makes for one request. */
typedef struct web_req {
    size_t body_len;
} web_req;

/* ================================================================ event loop glue */

static void web_rearm(sd_web *w)
{
    MHD_UNSIGNED_LONG_LONG ms = 0;
    ev_timer_stop(w->loop, &w->timer);
    if (MHD_get_timeout(w->daemon, &ms) == MHD_YES) {
        ev_timer_set(&w->timer, (double)ms / 1000.0, 0.0);
        ev_timer_start(w->loop, &w->timer);
    }
}

static void web_run(sd_web *w)
{
    (void)MHD_run(w->daemon);
    web_rearm(w);
}

static void on_io(struct ev_loop *loop, ev_io *io, int revents)
{
    (void)loop;
    (void)revents;
    web_run(io->data);
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    web_run(t->data);
}

/* fmt is libmicrohttpd's own format string (the attribute tells the compiler so). */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) SD_PRINTF(2, 0);

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    sd_web *w = cls;
    va_list copy;
    va_copy(copy, ap);
    vsnprintf(w->last_error, sizeof(w->last_error), fmt, copy);
    va_end(copy);
    size_t n = strlen(w->last_error);
    while (n > 0 && (w->last_error[n - 1] == '\n' || w->last_error[n - 1] == '.')) {
        w->last_error[--n] = '\0';
    }
    SD_DEBUG("web", "libmicrohttpd: %s", w->last_error);
}

/* ================================================================ JSON helpers */

/* jansson allocates through our allocator (failures injectable, no raw malloc). */
static void *json_alloc(size_t n)
{
    return sd_malloc(n);
}

static void json_release(void *p)
{
    sd_free(p);
}

/* A JSON string; bytes that are not UTF-8 become '?' (jansson refuses invalid UTF-8). */
static json_t *jstr(const char *s)
{
    if (s == NULL) {
        s = "";
    }
    json_t *j = json_string(s);
    if (j != NULL) {
        return j;
    }
    size_t n = strlen(s);
    char *copy = sd_malloc(n + 1);
    if (copy == NULL) {
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t len = p[i] < 0x80         ? 1
                     : (p[i] >> 5) == 6  ? 2
                     : (p[i] >> 4) == 14 ? 3
                     : (p[i] >> 3) == 30 ? 4
                                         : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) {
            ok = (p[i + k] & 0xc0) == 0x80;
        }
        if (ok) {
            memcpy(copy + i, s + i, len);
            i += len;
        } else {
            copy[i++] = '?';
        }
    }
    copy[n] = '\0';
    j = json_string(copy);
    if (j == NULL) {
        /* Still refused (overlong forms, surrogates): keep ASCII only. */
        for (i = 0; i < n; i++) {
            if ((unsigned char)copy[i] >= 0x80) {
                copy[i] = '?';
            }
        }
        j = json_string(copy);
    }
    sd_free(copy);
    return j;
}

/*
 * An event or processing time. JavaScript numbers are exact to 2^53 ms, but Beam's bounds
 * (about 9.2e15) are beyond that, so the bounds travel as "-inf"/"+inf" and any other value
 * that large as a decimal string.
 */
static json_t *jtime(sd_time t)
{
    char buf[32];
    if (t <= SD_TIME_MIN) {
        return json_string("-inf");
    }
    if (t >= SD_TIME_MAX) {
        return json_string("+inf");
    }
    if (t > ((int64_t)1 << 53) || t < -((int64_t)1 << 53)) {
        snprintf(buf, sizeof(buf), "%lld", (long long)t);
        return json_string(buf);
    }
    return json_integer((json_int_t)t);
}

/* Steal-reference setters that remember a failure (any NULL) instead of checking each. */
static void jset(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (obj == NULL || value == NULL || json_object_set_new(obj, key, value) != 0) {
        *ok = false;
    }
}

static void jpush(json_t *arr, json_t *value, bool *ok)
{
    if (arr == NULL || value == NULL || json_array_append_new(arr, value) != 0) {
        *ok = false;
    }
}

/* ================================================================ responses */

static void add_common_headers(struct MHD_Response *resp)
{
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
}

static enum MHD_Result reply_bytes(struct MHD_Connection *c,
                                   unsigned status,
                                   const char *content_type,
                                   const void *data,
                                   size_t len,
                                   bool copy)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, (void *)data, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    if (resp == NULL) {
        return MHD_NO;
    }
    add_common_headers(resp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (strncmp(content_type, "text/html", 9) == 0) {
        MHD_add_response_header(resp, "Content-Security-Policy", WEB_CSP);
    }
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* Reply with j (reference stolen). NULL j: 500 out of memory. */
static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        return reply_bytes(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "application/json", oom,
                           sizeof(oom) - 1, false);
    }
    enum MHD_Result r =
        reply_bytes(c, status, "application/json; charset=utf-8", text, strlen(text), true);
    sd_free(text);
    return r;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
    bool ok = true;
    json_t *j = json_object();
    jset(j, "error", jstr(msg), &ok);
    if (!ok) {
        json_decref(j);
        j = NULL;
    }
    return reply_json(c, status, j);
}

/* ================================================================ JSON documents */

static json_t *job_summary(const sd_job *job, sd_time now, bool *ok)
{
    json_t *j = json_object();
    sd_time created = sd_job_created_ms(job);
    sd_time started = sd_job_started_ms(job);
    sd_time ended = sd_job_ended_ms(job);
    sd_time from = started != 0 ? started : created;
    jset(j, "id", jstr(sd_job_id(job)), ok);
    jset(j, "name", jstr(sd_job_name(job)), ok);
    jset(j, "state", jstr(sd_job_state_name(sd_job_state_get(job))), ok);
    jset(j, "created", json_integer(created), ok);
    jset(j, "started", started != 0 ? json_integer(started) : json_null(), ok);
    jset(j, "ended", ended != 0 ? json_integer(ended) : json_null(), ok);
    jset(j, "duration_ms", json_integer((ended != 0 ? ended : now) - from), ok);
    const char *error = sd_job_error(job);
    jset(j, "error", error != NULL ? jstr(error) : json_null(), ok);
    return j;
}

static json_t *doc_jobs(sd_web *w)
{
    bool ok = true;
    sd_job *const *jobs;
    size_t n = sd_jobsvc_jobs(w->jobs, &jobs);
    sd_time now = sd_wall_now_ms();
    json_t *arr = json_array();
    for (size_t i = n; i-- > 0;) { /* newest first */
        jpush(arr, job_summary(jobs[i], now, &ok), &ok);
    }
    json_t *doc = json_object();
    jset(doc, "jobs", arr, &ok);
    jset(doc, "now", json_integer(sd_wall_now_ms()), &ok);
    if (!ok) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

static json_t *index_list(const size_t *idx, size_t n, bool *ok)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        jpush(arr, json_integer((json_int_t)idx[i]), ok);
    }
    return arr;
}

static json_t *doc_view(const sd_exec_view *v, bool *ok)
{
    json_t *j = json_object();
    jset(j, "live", json_boolean(v->live), ok);
    jset(j, "clock", jstr(v->synthetic ? "synthetic" : "wall"), ok);
    jset(j, "clock_ms", jtime(v->clock_ms), ok);
    jset(j, "elapsed_ms", json_integer(v->elapsed_ms), ok);
    jset(j, "bundles_done", json_integer((json_int_t)v->bundles_done), ok);
    json_t *stages = json_array();
    for (size_t i = 0; i < v->n_stages; i++) {
        const sd_exec_view_stage *s = &v->stages[i];
        json_t *js = json_object();
        json_t *names = json_array();
        for (size_t k = 0; k < s->n_transforms; k++) {
            jpush(names, jstr(s->transforms[k]), ok);
        }
        jset(js, "id", jstr(s->id), ok);
        jset(js, "kind", jstr(s->kind), ok);
        jset(js, "transforms", names, ok);
        jset(js, "inputs", index_list(s->inputs, s->n_inputs, ok), ok);
        jset(js, "outputs", index_list(s->outputs, s->n_outputs, ok), ok);
        jset(js, "input_wm", jtime(s->input_wm), ok);
        jset(js, "output_wm", jtime(s->output_wm), ok);
        jset(js, "hold", jtime(s->hold), ok);
        jset(js, "pending", json_integer((json_int_t)s->pending), ok);
        jset(js, "in_progress", json_integer((json_int_t)s->in_progress), ok);
        jset(js, "et_timers", json_integer((json_int_t)s->et_timers), ok);
        jset(js, "pt_timers", json_integer((json_int_t)s->pt_timers), ok);
        jset(js, "dropped_late", json_integer((json_int_t)s->dropped_late), ok);
        jpush(stages, js, ok);
    }
    jset(j, "stages", stages, ok);
    json_t *pcolls = json_array();
    for (size_t i = 0; i < v->n_pcolls; i++) {
        const sd_exec_view_pcoll *p = &v->pcolls[i];
        json_t *jp = json_object();
        jset(jp, "id", jstr(p->id), ok);
        jset(jp, "name", jstr(p->name), ok);
        /* The runner's measurement where it has one, else the SDK's report. */
        json_int_t elements = p->measured ? (json_int_t)p->measured_elements : p->elements;
        jset(jp, "elements", p->measured || p->has_count ? json_integer(elements) : json_null(),
             ok);
        jset(jp, "bytes", p->measured ? json_integer((json_int_t)p->measured_bytes) : json_null(),
             ok);
        jset(jp, "count_source", jstr(p->measured ? "runner" : p->has_count ? "sdk" : "none"), ok);
        jset(jp, "sdk_elements", p->has_count ? json_integer(p->elements) : json_null(), ok);
        jpush(pcolls, jp, ok);
    }
    jset(j, "pcollections", pcolls, ok);
    return j;
}

static json_t *doc_job(sd_web *w, sd_job *job, uint64_t after)
{
    bool ok = true;
    json_t *doc = json_object();
    jset(doc, "job", job_summary(job, sd_wall_now_ms(), &ok), &ok);
    json_t *msgs = json_array();
    uint64_t last = after;
    for (size_t i = 0, n = sd_job_history_len(job); i < n; i++) {
        sd_job_event e;
        sd_job_history_at(job, i, &e);
        if (e.seq <= after) {
            continue;
        }
        json_t *m = json_object();
        jset(m, "seq", json_integer((json_int_t)e.seq), &ok);
        jset(m, "time", json_integer(e.time_ms), &ok);
        if (e.is_state) {
            jset(m, "state", jstr(sd_job_state_name((sd_job_state)e.value)), &ok);
        } else {
            static const char *const names[] = { "?",     "debug",   "detailed",
                                                 "basic", "warning", "error" };
            int v = e.value >= 1 && e.value <= 5 ? e.value : 0;
            jset(m, "importance", jstr(names[v]), &ok);
            jset(m, "text", jstr(e.text), &ok);
        }
        jpush(msgs, m, &ok);
        last = e.seq;
    }
    jset(doc, "messages", msgs, &ok);
    jset(doc, "last_seq", json_integer((json_int_t)last), &ok);
    sd_exec_view v;
    if (sd_exec_view_get(w->exec, job, &v) == SD_OK) {
        jset(doc, "view", doc_view(&v, &ok), &ok);
    } else {
        jset(doc, "view", json_null(), &ok);
    }
    if (!ok) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

static json_t *sample_row(const sd_exec_sample *s, const sd_time *wms, size_t n, bool *ok)
{
    json_t *row = json_array();
    jpush(row, json_integer((json_int_t)s->seq), ok);
    jpush(row, json_integer(s->wall_ms), ok);
    jpush(row, jtime(s->clock_ms), ok);
    for (size_t i = 0; i < n; i++) {
        jpush(row, jtime(wms[i]), ok);
    }
    return row;
}

static json_t *doc_timeline(sd_web *w, sd_job *job, bool have_gen, uint64_t gen, uint64_t after)
{
    static const char *const kinds[] = { "ts_watermark", "ts_clock", "ts_end", "clock_jump" };
    bool ok = true;
    sd_exec_timeline t;
    json_t *doc = json_object();
    if (sd_exec_timeline_get(w->exec, job, &t) != SD_OK) {
        jset(doc, "generation", json_null(), &ok);
        if (!ok) {
            json_decref(doc);
            return NULL;
        }
        return doc;
    }
    bool full = !have_gen || gen != t.generation;
    json_t *samples = json_array();
    for (size_t i = 0; i < t.n_samples; i++) {
        if (full || t.samples[i].seq > after) {
            jpush(samples, sample_row(&t.samples[i], &t.wms[i * t.n_stages], t.n_stages, &ok), &ok);
        }
    }
    json_t *marks = json_array();
    for (size_t i = 0; i < t.n_marks; i++) {
        const sd_exec_mark *m = &t.marks[i];
        json_t *jm = json_object();
        jset(jm, "seq", json_integer((json_int_t)m->seq), &ok);
        jset(jm, "kind", jstr(kinds[m->kind]), &ok);
        jset(jm, "wall_ms", json_integer(m->wall_ms), &ok);
        jset(jm, "clock_ms", jtime(m->clock_ms), &ok);
        jset(jm, "from", jtime(m->from), &ok);
        jset(jm, "to", jtime(m->to), &ok);
        jpush(marks, jm, &ok);
    }
    jset(doc, "generation", json_integer((json_int_t)t.generation), &ok);
    jset(doc, "full", json_boolean(full), &ok);
    jset(doc, "samples", samples, &ok);
    jset(doc, "head", t.has_head ? sample_row(&t.head, t.head_wms, t.n_stages, &ok) : json_null(),
         &ok);
    jset(doc, "marks", marks, &ok);
    if (!ok) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* ================================================================ routing */

/* A decimal query argument (0 when absent or malformed). OUT: present. */
static uint64_t query_u64(struct MHD_Connection *c, const char *key, bool *present)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    char *end;
    if (present != NULL) {
        *present = false;
    }
    if (v == NULL || v[0] < '0' || v[0] > '9') {
        return 0;
    }
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0') {
        return 0;
    }
    if (present != NULL) {
        *present = true;
    }
    return (uint64_t)n;
}

/* The host part of a Host header value ("127.0.0.1:8074" -> "127.0.0.1", "[::1]:80" -> "::1"). */
static bool host_is_loopback(const char *host)
{
    char name[256];
    size_t n;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        if (close == NULL) {
            return false;
        }
        n = (size_t)(close - host - 1);
        host++;
    } else {
        const char *colon = strchr(host, ':');
        n = colon != NULL ? (size_t)(colon - host) : strlen(host);
    }
    if (n == 0 || n >= sizeof(name)) {
        return false;
    }
    memcpy(name, host, n);
    name[n] = '\0';
    if (strcmp(name, "localhost") == 0 || strcmp(name, "::1") == 0) {
        return true;
    }
    if (strncmp(name, "127.", 4) != 0) {
        return false;
    }
    for (const char *p = name; *p != '\0'; p++) {
        if ((*p < '0' || *p > '9') && *p != '.') {
            return false;
        }
    }
    return true;
}

/* POSTs come from our own page: Origin, when sent, is this server. */
static bool origin_ok(struct MHD_Connection *c)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (origin == NULL) {
        return true;
    }
    if (host == NULL || strncmp(origin, "http://", 7) != 0) {
        return false;
    }
    return strcmp(origin + 7, host) == 0;
}

static const sd__web_asset *find_asset(const char *path)
{
    for (size_t i = 0; i < sd__web_n_assets; i++) {
        if (strcmp(sd__web_assets[i].path, path) == 0) {
            return &sd__web_assets[i];
        }
    }
    return NULL;
}

static enum MHD_Result reply_asset(struct MHD_Connection *c, const char *path)
{
    const sd__web_asset *a = find_asset(path);
    if (a == NULL) {
        return reply_error(c, MHD_HTTP_NOT_FOUND, "no such page");
    }
    return reply_bytes(c, MHD_HTTP_OK, a->content_type, a->data, a->len, false);
}

/* /api/jobs/ID[/ACTION]: OUT: id (into buf), action ("" for none). False when malformed. */
static bool split_job_path(const char *rest, char *id, size_t id_size, const char **action)
{
    const char *slash = strchr(rest, '/');
    size_t n = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    if (n == 0 || n >= id_size) {
        return false;
    }
    memcpy(id, rest, n);
    id[n] = '\0';
    *action = slash != NULL ? slash + 1 : "";
    return true;
}

static const char *query_param(void *ctx, const char *name)
{
    return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

/* Pause, step, resume and the paused job's state (sd_exec_control): GETs read, POSTs are
 * actions and need what Cancel and Drain need. */
static enum MHD_Result
route_control(sd_web *w, struct MHD_Connection *c, sd_job *job, const char *action, bool post)
{
    if (post && (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Sundial-Action") == NULL ||
                 !origin_ok(c))) {
        return reply_error(c, MHD_HTTP_FORBIDDEN,
                           "actions need the X-Sundial-Action header and a same-origin request");
    }
    char *text = NULL;
    int code = 0;
    if (sd_exec_control(w->exec, job, action, post, query_param, c, &text, &code) != SD_OK) {
        return reply_error(c, MHD_HTTP_NOT_FOUND, "no such API");
    }
    if (text == NULL) {
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    if (post && code == MHD_HTTP_OK) {
        SD_INFO("web", "%s: %s requested over HTTP", sd_job_id(job), action);
    }
    enum MHD_Result res =
        reply_bytes(c, (unsigned)code, "application/json", text, strlen(text), true);
    sd_free(text);
    return res;
}

/*
 * GET /api/jobs/ID/trace[?stage=S&kind=K,K2&after=SEQ&wall=0]: the job's time trace records
 * (exec_trace.c writes them as JSON lines; here they become one array):
 *   {"job": ID, "available": true, "live": bool, "cut": bool, "total": N, "records": [...]}
 * A job without a trace (not run yet) answers 200 with available false and no records, so a
 * page polling a starting job sees no error. A bad kind: 400 naming it.
 */
static enum MHD_Result reply_trace(sd_web *w, struct MHD_Connection *c, sd_job *job)
{
    sd_exec_trace_query q = { 0 };
    sd_err err;
    sd_err_clear(&err);
    const char *kind = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "kind");
    if (sd_exec_trace_kinds(kind, &q.kinds, &err) != SD_OK) {
        return reply_error(c, MHD_HTTP_BAD_REQUEST, sd_err_msg(&err));
    }
    const char *stage = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stage");
    q.stage = stage != NULL && stage[0] != '\0' ? stage : NULL;
    q.after = query_u64(c, "after", &q.has_after);
    const char *wall = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "wall");
    q.wall = wall == NULL || strcmp(wall, "0") != 0;
    sd_buf lines;
    sd_buf_init(&lines, 0);
    sd_exec_trace_info info;
    sd_status st = sd_exec_trace_get(w->exec, job, &q, &lines, &info, &err);
    if (st != SD_OK && st != SD_ENOTFOUND) {
        sd_buf_deinit(&lines);
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, sd_err_msg(&err));
    }
    bool ok = true;
    json_t *head = json_object();
    jset(head, "job", jstr(sd_job_id(job)), &ok);
    jset(head, "available", json_boolean(st == SD_OK), &ok);
    if (st != SD_OK) {
        jset(head, "reason", jstr(sd_err_msg(&err)), &ok);
    }
    jset(head, "live", json_boolean(st == SD_OK && info.live), &ok);
    jset(head, "cut", json_boolean(st == SD_OK && info.cut), &ok);
    jset(head, "total", json_integer(st == SD_OK ? (json_int_t)info.total : 0), &ok);
    char *text = ok ? json_dumps(head, JSON_COMPACT) : NULL;
    json_decref(head);
    /* {...head fields...,"records":[line,line,...]} */
    sd_buf body;
    sd_buf_init(&body, 0);
    sd_status bs = text != NULL ? SD_OK : SD_ENOMEM;
    if (bs == SD_OK) {
        bs = sd_buf_append(&body, text, strlen(text) - 1); /* without its closing brace */
    }
    if (bs == SD_OK) {
        bs = sd_buf_append_str(&body, ",\"records\":[");
    }
    for (size_t i = 0; bs == SD_OK && i < lines.len; i++) {
        uint8_t ch = lines.data[i];
        bs = sd_buf_append_byte(&body, ch != '\n' ? ch : i + 1 < lines.len ? ',' : ']');
    }
    if (bs == SD_OK && lines.len == 0) {
        bs = sd_buf_append_byte(&body, ']');
    }
    if (bs == SD_OK) {
        bs = sd_buf_append_byte(&body, '}');
    }
    sd_free(text);
    sd_buf_deinit(&lines);
    enum MHD_Result r;
    if (bs != SD_OK) {
        r = reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    } else {
        r = reply_bytes(c, MHD_HTTP_OK, "application/json; charset=utf-8", body.data, body.len,
                        true);
    }
    sd_buf_deinit(&body);
    return r;
}

static enum MHD_Result
route(sd_web *w, struct MHD_Connection *c, const char *url, const char *method)
{
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, "HEAD") == 0;
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;

    if (strncmp(url, "/api/", 5) != 0) {
        if (!get) {
            return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
        }
        if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0 ||
            strncmp(url, "/job/", 5) == 0) {
            return reply_asset(c, "/index.html");
        }
        if (strcmp(url, "/favicon.ico") == 0) {
            return reply_bytes(c, MHD_HTTP_NO_CONTENT, "image/x-icon", "", 0, false);
        }
        return reply_asset(c, url);
    }
    if (strcmp(url, "/api/jobs") == 0) {
        if (!get) {
            return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
        }
        return reply_json(c, MHD_HTTP_OK, doc_jobs(w));
    }
    char id[128];
    const char *action;
    if (strncmp(url, "/api/jobs/", 10) != 0 || !split_job_path(url + 10, id, sizeof(id), &action)) {
        return reply_error(c, MHD_HTTP_NOT_FOUND, "no such API");
    }
    sd_job *job = sd_jobsvc_find(w->jobs, id);
    if (job == NULL) {
        return reply_error(c, MHD_HTTP_NOT_FOUND, "no such job");
    }
    if (strcmp(action, "") == 0 || strcmp(action, "timeline") == 0) {
        if (!get) {
            return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
        }
        if (action[0] == '\0') {
            return reply_json(c, MHD_HTTP_OK, doc_job(w, job, query_u64(c, "after", NULL)));
        }
        bool have_gen;
        uint64_t gen = query_u64(c, "gen", &have_gen);
        return reply_json(c, MHD_HTTP_OK,
                          doc_timeline(w, job, have_gen, gen, query_u64(c, "after", NULL)));
    }
    if (strcmp(action, "trace") == 0) {
        if (!get) {
            return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
        }
        return reply_trace(w, c, job);
    }
    if (strcmp(action, "cancel") != 0 && strcmp(action, "drain") != 0) {
        return route_control(w, c, job, action, post);
    }
    if (!post) {
        return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use POST");
    }
    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Sundial-Action") == NULL ||
        !origin_ok(c)) {
        return reply_error(c, MHD_HTTP_FORBIDDEN,
                           "actions need the X-Sundial-Action header and a same-origin request");
    }
    sd_err err;
    sd_err_clear(&err);
    if (strcmp(action, "cancel") == 0) {
        sd_job_state state;
        if (sd_jobsvc_cancel_job(w->jobs, id, &state, &err) != SD_OK) {
            return reply_error(c, MHD_HTTP_NOT_FOUND, sd_err_msg(&err));
        }
        SD_INFO("web", "%s: cancel requested from the web UI (now %s)", id,
                sd_job_state_name(state));
        bool ok = true;
        json_t *doc = json_object();
        jset(doc, "state", jstr(sd_job_state_name(state)), &ok);
        return reply_json(c, MHD_HTTP_OK, ok ? doc : (json_decref(doc), NULL));
    }
    sd_job_state state;
    sd_status st = sd_jobsvc_drain_job(w->jobs, id, &state, &err);
    if (st == SD_OK) {
        SD_INFO("web", "%s: drain requested from the web UI (now %s)", id,
                sd_job_state_name(state));
        bool ok = true;
        json_t *doc = json_object();
        jset(doc, "state", jstr(sd_job_state_name(state)), &ok);
        return reply_json(c, MHD_HTTP_OK, ok ? doc : (json_decref(doc), NULL));
    }
    unsigned int code = st == SD_EUNIMPL  ? MHD_HTTP_NOT_IMPLEMENTED
                        : st == SD_ESTATE ? MHD_HTTP_CONFLICT
                                          : MHD_HTTP_NOT_FOUND;
    return reply_error(c, code, sd_err_msg(&err));
}

static enum MHD_Result on_request(void *cls,
                                  struct MHD_Connection *c,
                                  const char *url,
                                  const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size,
                                  void **con_cls)
{
    sd_web *w = cls;
    web_req *req = *con_cls;
    (void)version;
    (void)upload_data;
    if (req == NULL) {
        /* First call: headers only. Remember the request; answer once the body is in. */
        req = sd_calloc(1, sizeof(*req));
        if (req == NULL) {
            return MHD_NO;
        }
        *con_cls = req;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        req->body_len += *upload_data_size;
        *upload_data_size = 0;
        return req->body_len > WEB_MAX_BODY ? MHD_NO : MHD_YES;
    }
    if (w->loopback) {
        const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (host != NULL && !host_is_loopback(host)) {
            return reply_error(c, MHD_HTTP_MISDIRECTED_REQUEST,
                               "this server answers only to a loopback Host");
        }
    }
    return route(w, c, url, method);
}

static void on_completed(void *cls,
                         struct MHD_Connection *c,
                         void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    sd_free(*con_cls);
    *con_cls = NULL;
}

/* ================================================================ lifecycle */

static bool addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        static const unsigned char one[16] = { [15] = 1 };
        return memcmp(&in6->sin6_addr, one, 16) == 0;
    }
    return false;
}

sd_status sd_web_create(struct ev_loop *loop, const sd_web_config *cfg, sd_web **out, sd_err *err)
{
    const char *host = cfg->host != NULL ? cfg->host : "127.0.0.1";
    char name[256];
    size_t n = strlen(host);

    /* "[::1]" as well as "::1". */
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof(name)) {
        return sd_err_set(err, SD_EINVAL, "web UI: bad host \"%s\"", cfg->host);
    }
    memcpy(name, host, n);
    name[n] = '\0';
    if (!mhd_load()) {
        return sd_err_set(err, SD_EIO, "web UI: %s", mhd.error);
    }
    if (cfg->port < 0 || cfg->port > 65535) {
        return sd_err_set(err, SD_EINVAL, "web UI: bad port %d", cfg->port);
    }

    struct addrinfo hints;
    struct addrinfo *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int gai = getaddrinfo(name, NULL, &hints, &res);
    if (gai != 0 || res == NULL) {
        return sd_err_set(err, SD_EINVAL, "web UI: cannot resolve host \"%s\": %s", name,
                          gai_strerror(gai));
    }
    /* Prefer IPv4 (what "localhost" means to the job port too). */
    const struct addrinfo *pick = res;
    for (const struct addrinfo *a = res; a != NULL; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, pick->ai_addr, pick->ai_addrlen);
    bool ipv6 = pick->ai_family == AF_INET6;
    freeaddrinfo(res);
    if (ipv6) {
        ((struct sockaddr_in6 *)(void *)&ss)->sin6_port = htons((uint16_t)cfg->port);
    } else {
        ((struct sockaddr_in *)(void *)&ss)->sin_port = htons((uint16_t)cfg->port);
    }

    sd_web *w = sd_calloc(1, sizeof(*w));
    if (w == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    w->magic = WEB_MAGIC;
    w->loop = loop;
    w->jobs = cfg->jobs;
    w->exec = cfg->exec;
    w->loopback = addr_is_loopback((const struct sockaddr *)&ss);
    json_set_alloc_funcs(json_alloc, json_release);

    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | (ipv6 ? MHD_USE_IPv6 : 0);
    w->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, w, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT, (unsigned)WEB_MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)WEB_CONN_TIMEOUT_S, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, w, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, w, MHD_OPTION_END);
    if (w->daemon == NULL) {
        sd_status st =
            sd_err_set(err, SD_EIO, "web UI: cannot listen on %s%s%s:%d: %s", ipv6 ? "[" : "", name,
                       ipv6 ? "]" : "", cfg->port,
                       w->last_error[0] != '\0' ? w->last_error : "libmicrohttpd refused to start");
        sd_free(w);
        return st;
    }
    const union MHD_DaemonInfo *port = MHD_get_daemon_info(w->daemon, MHD_DAEMON_INFO_BIND_PORT);
    const union MHD_DaemonInfo *efd = MHD_get_daemon_info(w->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (port == NULL || efd == NULL) {
        MHD_stop_daemon(w->daemon);
        sd_free(w);
        return sd_err_set(err, SD_EIO, "web UI: libmicrohttpd gives no port or epoll descriptor");
    }
    w->port = port->port;
    snprintf(w->url, sizeof(w->url), "http://%s%s%s:%d/", ipv6 ? "[" : "", name, ipv6 ? "]" : "",
             w->port);
    ev_io_init(&w->io, on_io, efd->epoll_fd, EV_READ);
    w->io.data = w;
    ev_io_start(loop, &w->io);
    ev_init(&w->timer, on_timer);
    w->timer.data = w;
    web_rearm(w);
    SD_INFO("web", "web UI on %s", w->url);
    *out = w;
    return SD_OK;
}

const char *sd_web_url(const sd_web *w)
{
    return w->url;
}

int sd_web_port(const sd_web *w)
{
    return w->port;
}

void sd_web_destroy(sd_web *w)
{
    if (w == NULL) {
        return;
    }
    ev_io_stop(w->loop, &w->io);
    ev_timer_stop(w->loop, &w->timer);
    MHD_stop_daemon(w->daemon);
    w->magic = 0;
    sd_free(w);
}
