/* Sundial: the job object — prepared pipeline, state machine, history ring, metrics, options. */

/*
 * A job is what Prepare creates and the executor drives. It owns the unpacked
 * PrepareJobRequest (pipeline, options and name stay inside it, so nothing is copied twice),
 * its state, a bounded history and its metrics.
 *
 * State machine. Beam's JobState has twelve values but a local runner only walks a few:
 * STOPPED -> STARTING -> RUNNING -> DONE | FAILED | CANCELLED, with CANCELLING on the way to
 * CANCELLED and DRAINING on the way to DRAINED (JobService.Drain). sd_job_set_state() enforces
 * three rules and silently ignores anything else, because the callers (executor, cancel, failure
 * paths) race benignly — a bundle failure and a cancel can both try to end the job — and the first
 * terminal state must win:
 *   1. terminal states (DONE, FAILED, CANCELLED, UPDATED, DRAINED) are never left;
 *   2. nothing returns to STOPPED or UNSPECIFIED;
 *   3. CANCELLING only moves on to a terminal state (a late RUNNING is dropped); DRAINING
 *      likewise, or to CANCELLING (a Cancel overrides a Drain).
 *
 * History. Messages and state changes share one ring of SD_JOB_HISTORY_MAX entries so that
 * GetMessageStream can replay them in their true order. When full, the oldest entry goes.
 * Prism keeps about 100; 1000 costs ~40 KB per job and keeps a whole failure story. Adding an
 * entry never fails: on out-of-memory the message text is dropped, which loses one message
 * rather than failing a state change.
 *
 * Memory. Every message the job keeps was unpacked with sd__jobsvc_pb_allocator
 * (sd_malloc/sd_free), so protobuf_c_message_free_unpacked() frees it and allocation failures can
 * be injected in tests. Copies of SDK-provided messages (metrics, replaced artifacts) go through
 * pack + unpack: slower than a field-by-field copy but exact, including unknown fields and opaque
 * payload bytes (the TypeScript SDK's distribution payload is non-standard and must survive).
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/fs.h"
#include "runner/base/log.h"
#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"

/* ================================================================ protobuf-c helpers */

static void *pb_alloc(void *data, size_t size)
{
    void *p = sd_malloc(size == 0 ? 1 : size);
    if (p == NULL && data != NULL) {
        ((sd__jobsvc_pb_alloc *)data)->failed = true;
    }
    return p;
}

static void pb_free(void *data, void *p)
{
    (void)data;
    sd_free(p);
}

ProtobufCAllocator sd__jobsvc_pb_allocator = { .alloc = pb_alloc,
                                               .free = pb_free,
                                               .allocator_data = NULL };

void sd__jobsvc_pb_alloc_init(sd__jobsvc_pb_alloc *pa)
{
    pa->a.alloc = pb_alloc;
    pa->a.free = pb_free;
    pa->a.allocator_data = pa;
    pa->failed = false;
}

ProtobufCMessage *
sd__jobsvc_pb_unpack(const ProtobufCMessageDescriptor *desc, sd_bytes bytes, sd_err *err)
{
    sd__jobsvc_pb_alloc pa;
    sd__jobsvc_pb_alloc_init(&pa);
    /* protobuf-c reads nothing through a NULL pointer when len is 0, but be explicit. */
    static const uint8_t empty[1] = { 0 };
    const uint8_t *p = bytes.ptr != NULL ? bytes.ptr : empty;
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, &pa.a, bytes.len, p);
    if (m != NULL) {
        return m;
    }
    if (pa.failed) {
        sd_err_set(err, SD_ENOMEM, "out of memory unpacking %s", desc->short_name);
    } else {
        sd_err_set(err, SD_EPROTO, "%s: malformed protobuf (%zu bytes)", desc->short_name,
                   bytes.len);
    }
    return NULL;
}

sd_status sd__jobsvc_pb_pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = sd_malloc(n == 0 ? 1 : n);
    if (buf == NULL) {
        return SD_ENOMEM;
    }
    *len = protobuf_c_message_pack(msg, buf);
    *out = buf;
    return SD_OK;
}

ProtobufCMessage *sd__jobsvc_pb_dup(const ProtobufCMessage *msg)
{
    uint8_t *bytes;
    size_t len;
    if (sd__jobsvc_pb_pack(msg, &bytes, &len) != SD_OK) {
        return NULL;
    }
    ProtobufCMessage *copy = sd__jobsvc_pb_unpack(msg->descriptor, sd_bytes_make(bytes, len), NULL);
    sd_free(bytes);
    return copy;
}

void sd__jobsvc_pb_destroy(ProtobufCMessage *msg)
{
    if (msg != NULL) {
        protobuf_c_message_free_unpacked(msg, &sd__jobsvc_pb_allocator);
    }
}

void sd__jobsvc_timestamp_set(Google__Protobuf__Timestamp *ts, sd_time ms)
{
    int64_t sec = ms / 1000;
    int64_t rem = ms % 1000;
    if (rem < 0) {
        rem += 1000;
        sec -= 1;
    }
    ts->seconds = sec;
    ts->nanos = (int32_t)(rem * 1000000);
}

/* ================================================================ lifecycle */

sd_status sd__jobsvc_job_create(sd_jobsvc *svc, sd_pb_prepare_req *req, sd_job **out, sd_err *err)
{
    sd_job *job = sd_calloc(1, sizeof(*job));
    if (job == NULL) {
        sd__jobsvc_pb_destroy(&req->base);
        return sd_err_set(err, SD_ENOMEM, "out of memory creating a job");
    }
    job->magic = SD__JOB_MAGIC;
    job->svc = svc;
    job->req = req;
    job->state = SD_JOB_STOPPED;
    job->state_time_ms = svc->now_ms();
    job->created_ms = job->state_time_ms;
    job->next_seq = 1;
    sd_vec_init(&job->staged_paths, sizeof(char *));
    sd_map_init(&job->option_cache, sd_free);
    job->id = sd_asprintf("job-%03u", svc->next_job);
    job->ring = sd_calloc(SD_JOB_HISTORY_MAX, sizeof(sd__jobsvc_job_entry));
    job->metrics = sd_malloc(sizeof(*job->metrics));
    if (job->metrics != NULL) {
        org__apache__beam__model__job_management__v1__metric_results__init(job->metrics);
    }
    if (req->pipeline_options == NULL) {
        req->pipeline_options = sd_malloc(sizeof(Google__Protobuf__Struct));
        if (req->pipeline_options != NULL) {
            google__protobuf__struct__init(req->pipeline_options);
        }
    }
    if (job->id == NULL || job->ring == NULL || job->metrics == NULL ||
        req->pipeline_options == NULL) {
        sd__jobsvc_job_destroy(job);
        return sd_err_set(err, SD_ENOMEM, "out of memory creating a job");
    }
    if (svc->artifact_dir != NULL) {
        job->dir = sd_asprintf("%s/%s", svc->artifact_dir, job->id);
        if (job->dir == NULL) {
            sd__jobsvc_job_destroy(job);
            return sd_err_set(err, SD_ENOMEM, "out of memory creating a job");
        }
    }
    /* The initial STOPPED is history too, so message streams show the whole story. */
    sd__jobsvc_job_entry *e = &job->ring[0];
    e->seq = job->next_seq++;
    e->time_ms = job->state_time_ms;
    e->is_state = true;
    e->value = SD_JOB_STOPPED;
    job->ring_len = 1;
    *out = job;
    return SD_OK;
}

void sd__jobsvc_job_destroy(sd_job *job)
{
    if (job == NULL) {
        return;
    }
    if (job->ring != NULL) {
        for (size_t i = 0; i < SD_JOB_HISTORY_MAX; i++) {
            sd_free(job->ring[i].text);
        }
        sd_free(job->ring);
    }
    for (size_t i = 0; i < job->staged_paths.len; i++) {
        char *path = *SD_VEC_AT(&job->staged_paths, char *, i);
        (void)remove(path);
        sd_free(path);
    }
    sd_vec_deinit(&job->staged_paths);
    sd_map_deinit(&job->option_cache);
    if (job->view != NULL && job->view_free != NULL) {
        job->view_free(job->view);
    }
    if (job->trace != NULL && job->trace_free != NULL) {
        job->trace_free(job->trace);
    }
    if (job->dir_made && job->dir != NULL) {
        (void)remove(job->dir); /* only succeeds when empty, which is what we want */
    }
    sd__jobsvc_pb_destroy(job->req != NULL ? &job->req->base : NULL);
    sd__jobsvc_pb_destroy(job->metrics != NULL ? &job->metrics->base : NULL);
    sd_free(job->id);
    sd_free(job->dir);
    sd_free(job->error);
    sd_free(job->staging_error);
    job->magic = 0;
    sd_free(job);
}

/* ================================================================ accessors */

const char *sd_job_id(const sd_job *job)
{
    return job->id;
}

const char *sd_job_name(const sd_job *job)
{
    return job->req->job_name != NULL ? job->req->job_name : "";
}

const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *sd_job_pipeline(const sd_job *job)
{
    return job->req->pipeline;
}

const Google__Protobuf__Struct *sd_job_options(const sd_job *job)
{
    return job->req->pipeline_options;
}

const char *sd_job_artifact_dir(const sd_job *job)
{
    return job->dir;
}

sd_status sd_job_make_artifact_dir(sd_job *job, sd_err *err)
{
    return job->dir != NULL ? sd__jobsvc_job_ensure_dir(job, err) : SD_OK;
}

sd_job_state sd_job_state_get(const sd_job *job)
{
    return job->state;
}

const char *sd_job_error(const sd_job *job)
{
    return job->error;
}

void sd_job_set_user(sd_job *job, void *user)
{
    job->user = user;
}

void *sd_job_user(const sd_job *job)
{
    return job->user;
}

const Org__Apache__Beam__Model__JobManagement__V1__MetricResults *sd_job_metrics(const sd_job *job)
{
    return job->metrics;
}

/* ================================================================ options */

static const Google__Protobuf__Value *struct_get(const Google__Protobuf__Struct *s, const char *key)
{
    for (size_t i = 0; i < s->n_fields; i++) {
        const Google__Protobuf__Struct__FieldsEntry *f = s->fields[i];
        if (f != NULL && f->key != NULL && strcmp(f->key, key) == 0) {
            return f->value;
        }
    }
    return NULL;
}

const Google__Protobuf__Value *sd_job_option(const sd_job *job, const char *key)
{
    const Google__Protobuf__Struct *s = job->req->pipeline_options;
    if (s == NULL || key == NULL) {
        return NULL;
    }
    const Google__Protobuf__Value *v = struct_get(s, key);
    if (v != NULL || strncmp(key, "beam:option:", 12) == 0) {
        return v;
    }
    char *urn = sd_asprintf("beam:option:%s:v1", key);
    if (urn == NULL) {
        return NULL;
    }
    v = struct_get(s, urn);
    sd_free(urn);
    return v;
}

static char *render_json(const Google__Protobuf__Value *v);

const char *sd_job_option_string(const sd_job *job, const char *key)
{
    const Google__Protobuf__Value *v = sd_job_option(job, key);
    if (v == NULL) {
        return NULL;
    }
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE) {
        return v->string_value;
    }
    /* Other kinds are rendered once and cached on the job (options never change after
     * Prepare), keyed by the Value's address so a bare name and its URN share the entry. */
    sd_job *mut = (sd_job *)job; /* logically const: only the cache changes */
    sd_bytes k = sd_bytes_make(&v, sizeof(v));
    const char *cached = sd_map_get(&mut->option_cache, k);
    if (cached != NULL) {
        return cached;
    }
    char *text = render_json(v);
    if (text == NULL) {
        return NULL;
    }
    if (sd_map_put(&mut->option_cache, k, text) != SD_OK) {
        sd_free(text);
        return NULL;
    }
    return text;
}

static bool str_ieq(const char *a, const char *b)
{
    for (; *a != '\0' && *b != '\0'; a++, b++) {
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) {
            return false;
        }
    }
    return *a == *b;
}

bool sd_job_option_bool(const sd_job *job, const char *key, bool dflt)
{
    const Google__Protobuf__Value *v = sd_job_option(job, key);
    if (v == NULL) {
        return dflt;
    }
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE) {
        return v->bool_value != 0;
    }
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE && v->string_value != NULL) {
        if (str_ieq(v->string_value, "true")) {
            return true;
        }
        if (str_ieq(v->string_value, "false")) {
            return false;
        }
    }
    return dflt;
}

bool sd_job_option_int(const sd_job *job, const char *key, int64_t *out)
{
    const Google__Protobuf__Value *v = sd_job_option(job, key);
    if (v == NULL) {
        return false;
    }
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE) {
        double d = v->number_value;
        /* 2^63 is exactly representable; anything at or beyond it does not fit. */
        if (!isfinite(d) || d != floor(d) || d < -9223372036854775808.0 ||
            d >= 9223372036854775808.0) {
            return false;
        }
        *out = (int64_t)d;
        return true;
    }
    if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE && v->string_value != NULL &&
        v->string_value[0] != '\0') {
        char *end = NULL;
        errno = 0;
        long long n = strtoll(v->string_value, &end, 10);
        if (errno != 0 || end == NULL || *end != '\0') {
            return false;
        }
        *out = (int64_t)n;
        return true;
    }
    return false;
}

static sd_status json_value(sd_buf *b, const Google__Protobuf__Value *v, int depth);

static sd_status json_string(sd_buf *b, const char *s)
{
    sd_status st = sd_buf_append_byte(b, '"');
    for (const unsigned char *p = (const unsigned char *)(s != NULL ? s : ""); st == SD_OK && *p;
         p++) {
        switch (*p) {
        case '"':
            st = sd_buf_append_str(b, "\\\"");
            break;
        case '\\':
            st = sd_buf_append_str(b, "\\\\");
            break;
        case '\n':
            st = sd_buf_append_str(b, "\\n");
            break;
        case '\r':
            st = sd_buf_append_str(b, "\\r");
            break;
        case '\t':
            st = sd_buf_append_str(b, "\\t");
            break;
        default:
            if (*p < 0x20) {
                st = sd_buf_printf(b, "\\u%04x", *p);
            } else {
                st = sd_buf_append_byte(b, *p);
            }
        }
    }
    return st == SD_OK ? sd_buf_append_byte(b, '"') : st;
}

static sd_status json_struct(sd_buf *b, const Google__Protobuf__Struct *s, int depth)
{
    sd_status st = sd_buf_append_byte(b, '{');
    for (size_t i = 0; st == SD_OK && s != NULL && i < s->n_fields; i++) {
        if (i > 0) {
            st = sd_buf_append_byte(b, ',');
        }
        if (st == SD_OK) {
            st = json_string(b, s->fields[i]->key);
        }
        if (st == SD_OK) {
            st = sd_buf_append_byte(b, ':');
        }
        if (st == SD_OK) {
            st = json_value(b, s->fields[i]->value, depth + 1);
        }
    }
    return st == SD_OK ? sd_buf_append_byte(b, '}') : st;
}

/* Past this depth values render as null: a hostile client cannot blow the stack. */
#define JSON_MAX_DEPTH 64

static sd_status json_value(sd_buf *b, const Google__Protobuf__Value *v, int depth)
{
    if (v == NULL || depth > JSON_MAX_DEPTH) {
        return sd_buf_append_str(b, "null");
    }
    switch (v->kind_case) {
    case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE: {
        double d = v->number_value;
        if (!isfinite(d)) {
            return sd_buf_append_str(b, "null");
        }
        if (d == floor(d) && fabs(d) < 9007199254740992.0) {
            return sd_buf_printf(b, "%lld", (long long)d);
        }
        return sd_buf_printf(b, "%.17g", d);
    }
    case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE:
        return json_string(b, v->string_value);
    case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE:
        return sd_buf_append_str(b, v->bool_value ? "true" : "false");
    case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE:
        return json_struct(b, v->struct_value, depth);
    case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE: {
        sd_status st = sd_buf_append_byte(b, '[');
        const Google__Protobuf__ListValue *l = v->list_value;
        for (size_t i = 0; st == SD_OK && l != NULL && i < l->n_values; i++) {
            if (i > 0) {
                st = sd_buf_append_byte(b, ',');
            }
            if (st == SD_OK) {
                st = json_value(b, l->values[i], depth + 1);
            }
        }
        return st == SD_OK ? sd_buf_append_byte(b, ']') : st;
    }
    default:
        return sd_buf_append_str(b, "null");
    }
}

static char *render_json(const Google__Protobuf__Value *v)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    if (json_value(&b, v, 0) != SD_OK || sd_buf_append_byte(&b, '\0') != SD_OK) {
        sd_buf_deinit(&b);
        return NULL;
    }
    size_t len;
    return (char *)sd_buf_take(&b, &len);
}

char *sd_job_option_json(const sd_job *job, const char *key)
{
    const Google__Protobuf__Value *v = sd_job_option(job, key);
    return v != NULL ? render_json(v) : NULL;
}

/* ================================================================ state and history */

bool sd_job_state_is_terminal(sd_job_state s)
{
    return s == SD_JOB_DONE || s == SD_JOB_FAILED || s == SD_JOB_CANCELLED || s == SD_JOB_UPDATED ||
           s == SD_JOB_DRAINED;
}

const char *sd_job_state_name(sd_job_state s)
{
    static const char *const names[] = { "UNSPECIFIED", "STOPPED",   "RUNNING",    "DONE",
                                         "FAILED",      "CANCELLED", "UPDATED",    "DRAINING",
                                         "DRAINED",     "STARTING",  "CANCELLING", "UPDATING" };
    if ((int)s < 0 || (size_t)s >= sizeof(names) / sizeof(names[0])) {
        return "UNKNOWN";
    }
    return names[s];
}

size_t sd__jobsvc_job_history_len(const sd_job *job)
{
    return job->ring_len;
}

const sd__jobsvc_job_entry *sd__jobsvc_job_history_at(const sd_job *job, size_t i)
{
    return &job->ring[(job->ring_start + i) % SD_JOB_HISTORY_MAX];
}

/* Append an entry (dropping the oldest when full). text is taken. Returns the entry. */
static sd__jobsvc_job_entry *history_push(sd_job *job, bool is_state, int value, char *text)
{
    sd__jobsvc_job_entry *e;
    if (job->ring_len == SD_JOB_HISTORY_MAX) {
        e = &job->ring[job->ring_start];
        sd_free(e->text);
        job->ring_start = (job->ring_start + 1) % SD_JOB_HISTORY_MAX;
    } else {
        e = &job->ring[(job->ring_start + job->ring_len) % SD_JOB_HISTORY_MAX];
        job->ring_len++;
    }
    e->seq = job->next_seq++;
    e->time_ms = job->svc->now_ms();
    e->is_state = is_state;
    e->value = value;
    e->text = text;
    return e;
}

/*
 * A finished job's files go at once: what it staged and whatever its workers left in its
 * directory (their --semi_persist_dir), unless the pipeline option sundial_keep_artifacts is
 * true. Its record (state, messages, metrics) stays until the history bound forgets it.
 */
static void release_files(sd_job *job)
{
    if (sd_job_option_bool(job, "sundial_keep_artifacts", false)) {
        SD_INFO("jobservice", "%s: keeping its files in %s (sundial_keep_artifacts)", job->id,
                job->dir != NULL ? job->dir : "(no directory)");
        return;
    }
    for (size_t i = 0; i < job->staged_paths.len; i++) {
        char *path = *SD_VEC_AT(&job->staged_paths, char *, i);
        (void)remove(path);
    }
    if (job->dir_made && job->dir != NULL) {
        sd_rmtree(job->dir);
        job->dir_made = false;
    }
}

static bool transition_ok(sd_job_state from, sd_job_state to)
{
    if (from == to || sd_job_state_is_terminal(from)) {
        return false;
    }
    if (to == SD_JOB_STOPPED || to == SD_JOB_UNSPECIFIED || (int)to < 0 ||
        (int)to > (int)SD_JOB_UPDATING) {
        return false;
    }
    if (from == SD_JOB_CANCELLING && !sd_job_state_is_terminal(to)) {
        return false;
    }
    if (from == SD_JOB_DRAINING && !sd_job_state_is_terminal(to) && to != SD_JOB_CANCELLING) {
        return false;
    }
    return true;
}

bool sd_job_set_state(sd_job *job, sd_job_state s)
{
    assert(job != NULL && job->magic == SD__JOB_MAGIC);
    if (!transition_ok(job->state, s)) {
        SD_DEBUG("jobservice", "%s: ignoring state %s while %s", job->id, sd_job_state_name(s),
                 sd_job_state_name(job->state));
        return false;
    }
    job->state = s;
    sd__jobsvc_job_entry *e = history_push(job, true, (int)s, NULL);
    job->state_time_ms = e->time_ms;
    if (job->started_ms == 0 && (s == SD_JOB_STARTING || s == SD_JOB_RUNNING)) {
        job->started_ms = e->time_ms;
    }
    sd__jobsvc_notify(job->svc, job, e);
    if (sd_job_state_is_terminal(s)) {
        release_files(job); /* after the clients are told: removing a tree takes a while */
    }
    return true;
}

static void add_message(sd_job *job, int importance, char *text)
{
    assert(job != NULL && job->magic == SD__JOB_MAGIC);
    if (text == NULL) {
        return; /* out of memory: lose this message, as documented */
    }
    sd__jobsvc_job_entry *e = history_push(job, false, importance, text);
    sd__jobsvc_notify(job->svc, job, e);
}

/* printf into a new string; NULL on out-of-memory. */
static char *vformat(const char *fmt, va_list ap) SD_PRINTF(1, 0);

static char *vformat(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        return NULL;
    }
    if ((size_t)n < sizeof(tmp)) {
        return sd_strdup(tmp);
    }
    char *text = sd_malloc((size_t)n + 1);
    if (text != NULL) {
        (void)vsnprintf(text, (size_t)n + 1, fmt, ap);
    }
    return text;
}

void sd_job_message(sd_job *job, int importance, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = vformat(fmt, ap);
    va_end(ap);
    add_message(job, importance, text);
}

void sd_job_fail(sd_job *job, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = vformat(fmt, ap);
    va_end(ap);
    if (text != NULL && job->error == NULL && !sd_job_state_is_terminal(job->state)) {
        job->error = sd_strdup(text);
    }
    if (text != NULL) {
        SD_INFO("jobservice", "%s failed: %s", job->id, text);
    }
    add_message(job, SD_JOB_MSG_ERROR, text);
    sd_job_set_state(job, SD_JOB_FAILED);
}

/* ================================================================ metrics */

static sd_status
set_metrics(sd_job *job, const sd_pb_monitoring_info *const *infos, size_t n, bool committed)
{
    assert(job != NULL && job->magic == SD__JOB_MAGIC);
    sd_pb_metric_results tmp;
    org__apache__beam__model__job_management__v1__metric_results__init(&tmp);
    /* Packing only reads the messages; the casts drop const for the generated struct type. */
    if (committed) {
        tmp.n_committed = n;
        tmp.committed = (sd_pb_monitoring_info **)infos;
        tmp.n_attempted = job->metrics->n_attempted;
        tmp.attempted = job->metrics->attempted;
    } else {
        tmp.n_attempted = n;
        tmp.attempted = (sd_pb_monitoring_info **)infos;
        tmp.n_committed = job->metrics->n_committed;
        tmp.committed = job->metrics->committed;
    }
    ProtobufCMessage *copy = sd__jobsvc_pb_dup(&tmp.base);
    if (copy == NULL) {
        return SD_ENOMEM;
    }
    sd__jobsvc_pb_destroy(&job->metrics->base);
    job->metrics = (sd_pb_metric_results *)copy;
    return SD_OK;
}

sd_status sd_job_set_metrics(sd_job *job, const sd_pb_monitoring_info *const *infos, size_t n)
{
    return set_metrics(job, infos, n, true);
}

sd_status
sd_job_set_attempted_metrics(sd_job *job, const sd_pb_monitoring_info *const *infos, size_t n)
{
    return set_metrics(job, infos, n, false);
}
