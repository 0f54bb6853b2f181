/* Sundial: artifact staging (reverse retrieval from the client) and retrieval (for workers). */

/*
 * Staging. Beam's current protocol is pull-based and reversed: the submitting client opens
 * ArtifactStagingService.ReverseArtifactRetrievalService, says which job it stages for (the
 * staging token from Prepare), and then *the server* asks. Per stream the server walks a small
 * state machine:
 *
 *   AWAIT_TOKEN --first message: staging_token--> for each environment with fetchable deps:
 *       send ResolveArtifacts(deps) --> AWAIT_RESOLVE --replacements--> deps := replacements
 *       for each file/url dependency:
 *           send GetArtifact(dep) --> AWAIT_CHUNKS --data...is_last--> write file, rewrite dep
 *   --> DONE: finish the stream with OK (the TypeScript client never half-closes; it waits
 *       for the server to end the call).
 *
 * Only beam:artifact:type:file:v1 and url:v1 dependencies are fetched: embedded artifacts
 * already carry their bytes, and typed ones (pypi, maven, deferred) are resolved by workers.
 * The TypeScript client answers GetArtifact only for file artifacts, so asking for anything
 * else would break it.
 *
 * Where bytes land. Each fetched dependency becomes <artifact_dir>/<job id>/dep-NNN-<name>,
 * where <name> is the client's basename reduced to [A-Za-z0-9._-] with leading dots removed.
 * The client's path is never used as a path: no "..", slash or absolute path it sends can
 * move a write out of the job directory. Files are opened with O_NOFOLLOW and the job
 * directory is checked not to be a symlink. The dependency is then rewritten to
 * {type file, path <staged file>, same role}, so workers asking the retrieval service name
 * exactly the files we wrote.
 *
 * Retrieval. GetArtifact serves only (a) files recorded in svc->staged — an exact path match,
 * plus a prefix check against the owning job's directory — and (b) embedded artifacts, whose
 * bytes are in the request. Everything else is NOT_FOUND: the runner must not become a file
 * server for arbitrary paths. Files are streamed in chunks of at most SD_JOBSVC_CHUNK_MAX bytes
 * and paced: at most SD__ARTIFACT_QUEUE chunks sit in the transport's queue, and the stream
 * resumes from sd__jobsvc_pump() when there is room, so a large artifact never sits in memory.
 *
 * Failure. A staging stream that breaks (malformed message, wrong reply kind, early close,
 * I/O error) finishes with an error naming the cause and marks the job's staging as failed;
 * Run then refuses the job with that text. Other jobs are unaffected.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/fs.h"
#include "runner/base/log.h"
#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"
#include "runner/urns/urns.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

/* Chunks allowed in the transport's send queue before a GetArtifact stream waits. */
#define SD__ARTIFACT_QUEUE 4

#define PB(name)  org__apache__beam__model__job_management__v1__##name
#define PBP(name) org__apache__beam__model__pipeline__v1__##name

#define REQ_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__ARTIFACT_REQUEST_WRAPPER__REQUEST_##x
#define RESP_CASE(x) \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__ARTIFACT_RESPONSE_WRAPPER__RESPONSE_##x

typedef Org__Apache__Beam__Model__Pipeline__V1__ArtifactFilePayload file_payload;
typedef Org__Apache__Beam__Model__Pipeline__V1__ArtifactUrlPayload url_payload;
typedef Org__Apache__Beam__Model__Pipeline__V1__EmbeddedFilePayload embedded_payload;
typedef Org__Apache__Beam__Model__JobManagement__V1__ResolveArtifactsRequest resolve_req;
typedef Org__Apache__Beam__Model__JobManagement__V1__ResolveArtifactsResponse resolve_resp;
typedef Org__Apache__Beam__Model__JobManagement__V1__GetArtifactRequest get_req;
typedef Org__Apache__Beam__Model__JobManagement__V1__GetArtifactResponse get_resp;

enum { AWAIT_TOKEN, AWAIT_RESOLVE, AWAIT_CHUNKS, STAGING_DONE };

struct sd__staging {
    int phase;
    size_t env_index;
    size_t dep_index;
    int fd;         /* file being written, or -1 */
    char *path;     /* its path (borrowed from job->staged_paths) */
    uint64_t bytes; /* written so far */
};

struct sd__artifact_out {
    int fd;                 /* staged file, or -1 for embedded data */
    ProtobufCMessage *keep; /* unpacked payload holding embedded bytes */
    const uint8_t *data;    /* embedded bytes */
    uint64_t size;
    uint64_t offset;
    uint8_t *buf; /* read buffer for files */
};

/* ================================================================ names and directories */

static bool name_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

char *sd__jobsvc_staged_name(size_t index, const char *source)
{
    const char *s = source != NULL ? source : "";
    size_t end = strcspn(s, "?#"); /* URL query and fragment are not part of the name */
    while (end > 0 && (s[end - 1] == '/' || s[end - 1] == '\\')) {
        end--;
    }
    size_t start = end;
    while (start > 0 && s[start - 1] != '/' && s[start - 1] != '\\') {
        start--;
    }
    while (start < end && s[start] == '.') {
        start++; /* no hidden files, and never "." or ".." */
    }
    char base[65];
    size_t n = 0;
    for (size_t i = start; i < end && n < sizeof(base) - 1; i++) {
        unsigned char c = (unsigned char)s[i];
        base[n++] = name_char_ok(c) ? (char)c : '_';
    }
    base[n] = '\0';
    return sd_asprintf("dep-%03zu-%s", index, n > 0 ? base : "artifact");
}

sd_status sd__mkdirs(const char *path, sd_err *err)
{
    char *p = sd_strdup(path);
    if (p == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory creating directory \"%s\"", path);
    }
    size_t len = strlen(p);
    for (size_t i = 1; i <= len; i++) {
        if (p[i] != '/' && p[i] != '\0') {
            continue;
        }
        char saved = p[i];
        p[i] = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            int e = errno;
            sd_err_set(err, SD_EIO, "cannot create directory \"%s\": %s", p, strerror(e));
            sd_free(p);
            return SD_EIO;
        }
        p[i] = saved;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        sd_free(p);
        return sd_err_set(err, SD_EIO, "\"%s\" is not a directory", path);
    }
    sd_free(p);
    return SD_OK;
}

/*
 * Remove `name` under the directory dirfd and everything below it, never following a
 * symlink (a link is removed, not its target). Depth is bounded: what a runaway tree keeps
 * past it stays, and the final rmdir fails harmlessly.
 */
/* Create the job's directory once; it must be a real directory, not a symlink. */
sd_status sd__jobsvc_job_ensure_dir(sd_job *job, sd_err *err)
{
    if (job->dir_made) {
        return SD_OK;
    }
    sd_status st = sd__mkdirs(job->dir, err);
    if (st != SD_OK) {
        return st;
    }
    struct stat sb;
    if (lstat(job->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        return sd_err_set(err, SD_EIO, "job directory \"%s\" is not a plain directory", job->dir);
    }
    job->dir_made = true;
    return SD_OK;
}

/* ================================================================ helpers */

static bool is_type(const sd_pb_artifact *a, const char *urn)
{
    return a != NULL && a->type_urn != NULL && strcmp(a->type_urn, urn) == 0;
}

static bool is_fetchable(const sd_pb_artifact *a)
{
    return is_type(a, SD_URN_ARTIFACT_TYPE_FILE) || is_type(a, SD_URN_ARTIFACT_TYPE_URL);
}

static sd_pb_environment *env_at(sd_job *job, size_t i)
{
    const Org__Apache__Beam__Model__Pipeline__V1__Components *c = job->req->pipeline->components;
    if (c == NULL || i >= c->n_environments || c->environments[i] == NULL) {
        return NULL;
    }
    return c->environments[i]->value;
}

static const char *env_id(sd_job *job, size_t i)
{
    const Org__Apache__Beam__Model__Pipeline__V1__Components *c = job->req->pipeline->components;
    return c->environments[i]->key != NULL ? c->environments[i]->key : "";
}

static size_t env_count(sd_job *job)
{
    const Org__Apache__Beam__Model__Pipeline__V1__Components *c = job->req->pipeline->components;
    return c != NULL ? c->n_environments : 0;
}

static void close_partial(sd__staging *stg)
{
    if (stg->fd >= 0) {
        (void)close(stg->fd);
        stg->fd = -1;
        if (stg->path != NULL) {
            (void)remove(stg->path); /* the path stays listed; destroy's remove is harmless */
        }
    }
    stg->path = NULL;
}

/* End the staging stream with an error and record it on the job. */
static void stage_fail(sd_jobsvc *svc, sd__jobsvc_rec *rec, sd_status st, const char *msg)
{
    sd__staging *stg = rec->staging;
    close_partial(stg);
    stg->phase = STAGING_DONE;
    sd_job *job = rec->job;
    if (job != NULL && job->staging == 1) {
        job->staging = 3;
        sd_free(job->staging_error);
        job->staging_error = sd_strdup(msg);
        sd_job_message(job, SD_JOB_MSG_ERROR, "artifact staging failed: %s", msg);
    }
    SD_INFO("jobservice", "staging failed: %s", msg);
    sd__jobsvc_rec_finish(svc, rec, sd__jobsvc_code(st), msg);
}

static void stage_failf(sd_jobsvc *svc, sd__jobsvc_rec *rec, sd_status st, const char *fmt, ...)
    SD_PRINTF(4, 5);

static void stage_failf(sd_jobsvc *svc, sd__jobsvc_rec *rec, sd_status st, const char *fmt, ...)
{
    sd_err err = { 0 };
    va_list ap;
    va_start(ap, fmt);
    (void)sd_err_vset(&err, st, fmt, ap);
    va_end(ap);
    stage_fail(svc, rec, err.code, sd_err_msg(&err));
}

static sd_status send_request(sd_jobsvc *svc, sd__jobsvc_rec *rec, sd_pb_artifact_req *w)
{
    sd_status st = sd__jobsvc_rec_send(svc, rec, &w->base);
    if (st != SD_OK && rec->staging->phase != STAGING_DONE) {
        stage_fail(svc, rec, st, "could not send a request on the staging stream");
    }
    return st;
}

/* ================================================================ staging steps */

static void advance_env(sd_jobsvc *svc, sd__jobsvc_rec *rec);

static void finish_staging(sd_jobsvc *svc, sd__jobsvc_rec *rec)
{
    sd__staging *stg = rec->staging;
    stg->phase = STAGING_DONE;
    rec->job->staging = 2;
    SD_INFO("jobservice", "%s: staged %zu artifact(s)", rec->job->id, rec->job->n_staged);
    sd__jobsvc_rec_finish(svc, rec, SD_RPC_OK, NULL);
}

/* The path or URL a fetchable dependency names (caller frees the payload message). */
static const char *dep_source(const sd_pb_artifact *dep, ProtobufCMessage **payload, sd_err *err)
{
    sd_bytes b = sd_bytes_make(dep->type_payload.data, dep->type_payload.len);
    if (is_type(dep, SD_URN_ARTIFACT_TYPE_FILE)) {
        file_payload *p =
            (file_payload *)sd__jobsvc_pb_unpack(&PBP(artifact_file_payload__descriptor), b, err);
        *payload = p != NULL ? &p->base : NULL;
        return p != NULL ? p->path : NULL;
    }
    url_payload *p =
        (url_payload *)sd__jobsvc_pb_unpack(&PBP(artifact_url_payload__descriptor), b, err);
    *payload = p != NULL ? &p->base : NULL;
    return p != NULL ? p->url : NULL;
}

/* Open the next staged file and ask the client for the dependency's bytes. */
static void begin_fetch(sd_jobsvc *svc, sd__jobsvc_rec *rec, sd_pb_artifact *dep)
{
    sd__staging *stg = rec->staging;
    sd_job *job = rec->job;
    sd_err err = { 0 };
    ProtobufCMessage *payload = NULL;
    const char *source = dep_source(dep, &payload, &err);
    if (source == NULL) {
        stage_failf(svc, rec, err.code, "environment \"%s\" dependency %zu: %s",
                    env_id(job, stg->env_index), stg->dep_index, sd_err_msg(&err));
        return;
    }
    char *name = sd__jobsvc_staged_name(job->n_staged, source);
    sd__jobsvc_pb_destroy(payload);
    char *path = name != NULL ? sd_asprintf("%s/%s", job->dir, name) : NULL;
    sd_free(name);
    if (path == NULL || sd_vec_push(&job->staged_paths, &path) != SD_OK) {
        sd_free(path);
        stage_fail(svc, rec, SD_ENOMEM, "out of memory staging an artifact");
        return;
    }
    job->n_staged++;
    sd_status st = sd__jobsvc_job_ensure_dir(job, &err);
    if (st != SD_OK) {
        stage_fail(svc, rec, st, sd_err_msg(&err));
        return;
    }
    stg->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (stg->fd < 0) {
        stage_failf(svc, rec, SD_EIO, "cannot create staged file \"%s\": %s", path,
                    strerror(errno));
        return;
    }
    stg->path = path;
    stg->bytes = 0;

    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactRequest g;
    PB(get_artifact_request__init)(&g);
    g.artifact = dep;
    sd_pb_artifact_req w;
    PB(artifact_request_wrapper__init)(&w);
    w.request_case = REQ_CASE(GET_ARTIFACT);
    w.get_artifact = &g;
    stg->phase = AWAIT_CHUNKS;
    (void)send_request(svc, rec, &w);
}

/* Fetch the next file/url dependency of the current environment, or move on. */
static void next_dep(sd_jobsvc *svc, sd__jobsvc_rec *rec)
{
    sd__staging *stg = rec->staging;
    sd_pb_environment *env = env_at(rec->job, stg->env_index);
    while (env != NULL && stg->dep_index < env->n_dependencies) {
        sd_pb_artifact *dep = env->dependencies[stg->dep_index];
        if (is_fetchable(dep)) {
            begin_fetch(svc, rec, dep);
            return;
        }
        stg->dep_index++;
    }
    stg->env_index++;
    advance_env(svc, rec);
}

static bool env_has_fetchable(const sd_pb_environment *env)
{
    for (size_t j = 0; env != NULL && j < env->n_dependencies; j++) {
        if (is_fetchable(env->dependencies[j])) {
            return true;
        }
    }
    return false;
}

/* Ask the client to resolve the next environment with something to fetch, or finish. */
static void advance_env(sd_jobsvc *svc, sd__jobsvc_rec *rec)
{
    sd__staging *stg = rec->staging;
    size_t n = env_count(rec->job);
    while (stg->env_index < n && !env_has_fetchable(env_at(rec->job, stg->env_index))) {
        stg->env_index++;
    }
    if (stg->env_index >= n) {
        finish_staging(svc, rec);
        return;
    }
    sd_pb_environment *env = env_at(rec->job, stg->env_index);
    resolve_req r;
    PB(resolve_artifacts_request__init)(&r);
    r.n_artifacts = env->n_dependencies;
    r.artifacts = env->dependencies;
    sd_pb_artifact_req w;
    PB(artifact_request_wrapper__init)(&w);
    w.request_case = REQ_CASE(RESOLVE_ARTIFACT);
    w.resolve_artifact = &r;
    stg->phase = AWAIT_RESOLVE;
    (void)send_request(svc, rec, &w);
}

/* Replace the environment's dependencies with the client's resolved list (deep copies). */
static void apply_resolved(sd_jobsvc *svc, sd__jobsvc_rec *rec, const resolve_resp *rr)
{
    sd__staging *stg = rec->staging;
    sd_pb_environment *env = env_at(rec->job, stg->env_index);
    size_t n = rr != NULL ? rr->n_replacements : 0;
    sd_pb_artifact **deps = sd_calloc(n == 0 ? 1 : n, sizeof(*deps));
    bool ok = deps != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        deps[i] = (sd_pb_artifact *)sd__jobsvc_pb_dup(&rr->replacements[i]->base);
        ok = deps[i] != NULL;
    }
    if (!ok) {
        for (size_t i = 0; deps != NULL && i < n; i++) {
            sd__jobsvc_pb_destroy(deps[i] != NULL ? &deps[i]->base : NULL);
        }
        sd_free(deps);
        stage_fail(svc, rec, SD_ENOMEM, "out of memory applying resolved artifacts");
        return;
    }
    for (size_t i = 0; i < env->n_dependencies; i++) {
        sd__jobsvc_pb_destroy(&env->dependencies[i]->base);
    }
    sd_free(env->dependencies);
    env->dependencies = deps;
    env->n_dependencies = n;
    stg->dep_index = 0;
    next_dep(svc, rec);
}

/* The last chunk arrived: close the file and point the dependency at it. */
static void complete_fetch(sd_jobsvc *svc, sd__jobsvc_rec *rec)
{
    sd__staging *stg = rec->staging;
    sd_job *job = rec->job;
    sd_pb_environment *env = env_at(job, stg->env_index);
    sd_pb_artifact *dep = env->dependencies[stg->dep_index];
    if (close(stg->fd) != 0) {
        stg->fd = -1;
        stage_failf(svc, rec, SD_EIO, "cannot write staged file \"%s\": %s", stg->path,
                    strerror(errno));
        return;
    }
    stg->fd = -1;

    /* Keep the client's checksum when it gave one for a file. */
    char *sha = NULL;
    if (is_type(dep, SD_URN_ARTIFACT_TYPE_FILE)) {
        file_payload *old = (file_payload *)sd__jobsvc_pb_unpack(
            &PBP(artifact_file_payload__descriptor),
            sd_bytes_make(dep->type_payload.data, dep->type_payload.len), NULL);
        if (old != NULL && old->sha256 != NULL && old->sha256[0] != '\0') {
            sha = sd_strdup(old->sha256);
        }
        sd__jobsvc_pb_destroy(old != NULL ? &old->base : NULL);
    }
    file_payload fp;
    PBP(artifact_file_payload__init)(&fp);
    fp.path = stg->path;
    if (sha != NULL) {
        fp.sha256 = sha;
    }
    uint8_t *bytes = NULL;
    size_t len = 0;
    sd_status st = sd__jobsvc_pb_pack(&fp.base, &bytes, &len);
    sd_free(sha);
    sd_pb_artifact *copy = NULL;
    if (st == SD_OK) {
        sd_pb_artifact a = *dep;
        a.type_urn = (char *)SD_URN_ARTIFACT_TYPE_FILE;
        a.type_payload.data = bytes;
        a.type_payload.len = len;
        copy = (sd_pb_artifact *)sd__jobsvc_pb_dup(&a.base);
    }
    sd_free(bytes);
    if (copy == NULL || sd_map_put_str(&svc->staged, stg->path, job) != SD_OK) {
        sd__jobsvc_pb_destroy(copy != NULL ? &copy->base : NULL);
        stage_fail(svc, rec, SD_ENOMEM, "out of memory recording a staged artifact");
        return;
    }
    sd__jobsvc_pb_destroy(&dep->base);
    env->dependencies[stg->dep_index] = copy;
    SD_DEBUG("jobservice", "%s: staged %s (%llu bytes)", job->id, stg->path,
             (unsigned long long)stg->bytes);
    stg->path = NULL;
    stg->dep_index++;
    next_dep(svc, rec);
}

static sd_status write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return SD_EIO;
        }
        p += w;
        n -= (size_t)w;
    }
    return SD_OK;
}

static void on_token(sd_jobsvc *svc, sd__jobsvc_rec *rec, const sd_pb_artifact_resp *m)
{
    const char *token = m->staging_token != NULL ? m->staging_token : "";
    sd_job *job = sd_jobsvc_find(svc, token);
    if (job == NULL) {
        stage_failf(svc, rec, SD_ENOTFOUND, "staging token \"%s\" names no prepared job", token);
        return;
    }
    if (job->run_requested || job->state != SD_JOB_STOPPED) {
        stage_failf(svc, rec, SD_ESTATE, "job %s is %s; artifacts must be staged before Run",
                    job->id, sd_job_state_name(job->state));
        return;
    }
    if (job->staging != 0) {
        static const char *const what[] = { "", "being staged by another stream", "already staged",
                                            "marked failed by an earlier staging attempt" };
        stage_failf(svc, rec, SD_ESTATE, "job %s: artifacts are %s", job->id, what[job->staging]);
        return;
    }
    if (job->dir == NULL) {
        stage_failf(svc, rec, SD_ESTATE,
                    "job %s: this job server has no artifact directory, so it cannot stage",
                    job->id);
        return;
    }
    rec->job = job;
    job->staging = 1;
    advance_env(svc, rec);
}

void sd__jobsvc_artifacts_message(sd_jobsvc *svc, sd__jobsvc_rec *rec, sd_bytes msg)
{
    sd__staging *stg = rec->staging;
    if (stg->phase == STAGING_DONE) {
        return;
    }
    sd_err err = { 0 };
    sd_pb_artifact_resp *m = (sd_pb_artifact_resp *)sd__jobsvc_pb_unpack(
        &PB(artifact_response_wrapper__descriptor), msg, &err);
    if (m == NULL) {
        stage_fail(svc, rec, err.code, sd_err_msg(&err));
        return;
    }
    switch (stg->phase) {
    case AWAIT_TOKEN:
        on_token(svc, rec, m);
        break;
    case AWAIT_RESOLVE:
        if (m->response_case != RESP_CASE(RESOLVE_ARTIFACT_RESPONSE)) {
            stage_failf(svc, rec, SD_EPROTO,
                        "job %s: expected resolve_artifact_response for environment \"%s\", got "
                        "response case %d",
                        rec->job->id, env_id(rec->job, stg->env_index), (int)m->response_case);
            break;
        }
        apply_resolved(svc, rec, m->resolve_artifact_response);
        break;
    case AWAIT_CHUNKS: {
        bool chunk = m->response_case == RESP_CASE(GET_ARTIFACT_RESPONSE);
        if (!chunk && !(m->is_last && m->response_case == 0)) {
            stage_failf(svc, rec, SD_EPROTO,
                        "job %s: expected get_artifact_response for \"%s\", got response case %d",
                        rec->job->id, stg->path, (int)m->response_case);
            break;
        }
        if (chunk && m->get_artifact_response != NULL && m->get_artifact_response->data.len > 0) {
            const ProtobufCBinaryData *d = &m->get_artifact_response->data;
            if (write_all(stg->fd, d->data, d->len) != SD_OK) {
                stage_failf(svc, rec, SD_EIO, "cannot write staged file \"%s\": %s", stg->path,
                            strerror(errno));
                break;
            }
            stg->bytes += d->len;
        }
        if (m->is_last) {
            complete_fetch(svc, rec);
        }
        break;
    }
    default:
        break;
    }
    sd__jobsvc_pb_destroy(&m->base);
}

void sd__jobsvc_artifacts_half_close(sd_jobsvc *svc, sd__jobsvc_rec *rec)
{
    if (rec->kind == SD__REC_STAGING && rec->staging->phase != STAGING_DONE) {
        stage_fail(svc, rec, SD_EPROTO,
                   rec->job == NULL
                       ? "the client closed the staging stream before sending its staging token"
                       : "the client closed the staging stream before sending every requested "
                         "artifact");
    }
}

/* ================================================================ retrieval */

/* Serve the next chunks of a GetArtifact stream while the queue has room. */
void sd__jobsvc_artifacts_pump(sd_jobsvc *svc, sd__jobsvc_rec *rec)
{
    sd__artifact_out *out = rec->out;
    rec->pump_wanted = false;
    while (!rec->finished) {
        if (out->offset >= out->size) {
            sd__jobsvc_rec_finish(svc, rec, SD_RPC_OK, NULL);
            return;
        }
        if (svc->io.send_queue_len(svc->io.io_ctx, rec->call) >= SD__ARTIFACT_QUEUE) {
            rec->pump_wanted = true;
            svc->io.want_pump(svc->io.io_ctx);
            return;
        }
        uint64_t left = out->size - out->offset;
        size_t n = left < SD_JOBSVC_CHUNK_MAX ? (size_t)left : SD_JOBSVC_CHUNK_MAX;
        const uint8_t *p;
        if (out->fd >= 0) {
            ssize_t r;
            do {
                r = pread(out->fd, out->buf, n, (off_t)out->offset);
            } while (r < 0 && errno == EINTR);
            if (r <= 0) {
                /* The file shrank or failed under us: say so rather than send short data. */
                sd__jobsvc_rec_finish(svc, rec, SD_RPC_INTERNAL,
                                      "staged artifact could not be read");
                return;
            }
            n = (size_t)r;
            p = out->buf;
        } else {
            p = out->data + out->offset;
        }
        get_resp g;
        PB(get_artifact_response__init)(&g);
        g.data.data = (uint8_t *)p;
        g.data.len = n;
        if (sd__jobsvc_rec_send(svc, rec, &g.base) != SD_OK) {
            return;
        }
        out->offset += n;
    }
}

/* A job's time trace (payload: the job id): JSON lines from the executor's hook. */
static void open_trace(sd_jobsvc *svc, sd_bytes payload, sd__artifact_out *out, sd_err *err)
{
    char id[256];
    if (payload.len == 0 || payload.len >= sizeof(id) ||
        memchr(payload.ptr, '\0', payload.len) != NULL) {
        sd_err_set(err, SD_EINVAL,
                   SD_URN_ARTIFACT_SUNDIAL_TRACE ": type_payload must be a job id (1 to %zu "
                                                 "bytes of UTF-8), got %zu bytes",
                   sizeof(id) - 1, payload.len);
        return;
    }
    memcpy(id, payload.ptr, payload.len);
    id[payload.len] = '\0';
    sd_job *job = sd_jobsvc_find(svc, id);
    if (job == NULL) {
        sd_err_set(err, SD_ENOTFOUND, SD_URN_ARTIFACT_SUNDIAL_TRACE ": job \"%s\" not found", id);
        return;
    }
    if (svc->hooks.trace == NULL) {
        sd_err_set(err, SD_ENOTFOUND,
                   SD_URN_ARTIFACT_SUNDIAL_TRACE ": this job server keeps no traces");
        return;
    }
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = svc->hooks.trace(svc->hooks.ctx, job, &b, err);
    if (st != SD_OK) {
        sd_buf_deinit(&b);
        return;
    }
    size_t len = 0;
    out->buf = sd_buf_take(&b, &len);
    out->data = out->buf;
    out->size = len;
}

static void *open_get_artifact(sd_jobsvc *svc, void *call, sd_bytes request)
{
    sd_err err = { 0 };
    get_req *req =
        (get_req *)sd__jobsvc_pb_unpack(&PB(get_artifact_request__descriptor), request, &err);
    if (req == NULL) {
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return NULL;
    }
    const sd_pb_artifact *a = req->artifact;
    sd_bytes payload =
        a != NULL ? sd_bytes_make(a->type_payload.data, a->type_payload.len) : SD_BYTES_NULL;
    sd__artifact_out *out = sd_calloc(1, sizeof(*out));
    if (out == NULL) {
        sd__jobsvc_pb_destroy(&req->base);
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory serving an artifact");
        return NULL;
    }
    out->fd = -1;
    if (a == NULL) {
        sd_err_set(&err, SD_EINVAL, "GetArtifactRequest: artifact is missing");
    } else if (is_type(a, SD_URN_ARTIFACT_TYPE_EMBEDDED)) {
        embedded_payload *e = (embedded_payload *)sd__jobsvc_pb_unpack(
            &PBP(embedded_file_payload__descriptor), payload, &err);
        if (e != NULL) {
            out->keep = &e->base;
            out->data = e->data.data;
            out->size = e->data.len;
        }
    } else if (is_type(a, SD_URN_ARTIFACT_TYPE_FILE)) {
        file_payload *f = (file_payload *)sd__jobsvc_pb_unpack(
            &PBP(artifact_file_payload__descriptor), payload, &err);
        sd_job *job = f != NULL ? sd_map_get_str(&svc->staged, f->path) : NULL;
        if (f != NULL && job == NULL) {
            sd_err_set(&err, SD_ENOTFOUND, "artifact file \"%s\" was not staged by this job server",
                       f->path);
        } else if (f != NULL) {
            size_t dl = strlen(job->dir);
            struct stat sb;
            /* Defence in depth: the path must sit directly in the owning job's directory. */
            if (strncmp(f->path, job->dir, dl) != 0 || f->path[dl] != '/' ||
                strchr(f->path + dl + 1, '/') != NULL) {
                sd_err_set(&err, SD_ENOTFOUND, "artifact file \"%s\" is outside job %s", f->path,
                           job->id);
            } else if ((out->fd = open(f->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
                       fstat(out->fd, &sb) != 0) {
                sd_err_set(&err, SD_ENOTFOUND, "staged artifact \"%s\" cannot be opened: %s",
                           f->path, strerror(errno));
            } else {
                out->size = (uint64_t)sb.st_size;
                size_t cap =
                    out->size < SD_JOBSVC_CHUNK_MAX ? (size_t)out->size : SD_JOBSVC_CHUNK_MAX;
                out->buf = sd_malloc(cap == 0 ? 1 : cap);
                if (out->buf == NULL) {
                    sd_err_set(&err, SD_ENOMEM, "out of memory serving an artifact");
                }
            }
        }
        sd__jobsvc_pb_destroy(f != NULL ? &f->base : NULL);
    } else if (is_type(a, SD_URN_ARTIFACT_SUNDIAL_TRACE)) {
        open_trace(svc, payload, out, &err);
    } else {
        sd_err_set(&err, SD_ENOTFOUND,
                   "artifact type \"%s\" is not served by Sundial (only staged files, "
                   "embedded data and " SD_URN_ARTIFACT_SUNDIAL_TRACE ")",
                   a->type_urn);
    }
    sd__jobsvc_pb_destroy(&req->base);
    sd__jobsvc_rec *rec =
        err.code == SD_OK ? sd__jobsvc_rec_create(svc, SD__REC_GET_ARTIFACT, call) : NULL;
    if (rec == NULL) {
        if (err.code == SD_OK) {
            sd_err_set(&err, SD_ENOMEM, "out of memory serving an artifact");
        }
        if (out->fd >= 0) {
            (void)close(out->fd);
        }
        sd__jobsvc_pb_destroy(out->keep);
        sd_free(out->buf);
        sd_free(out);
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return NULL;
    }
    rec->out = out;
    sd__jobsvc_artifacts_pump(svc, rec);
    return rec;
}

static void handle_resolve(sd_jobsvc *svc, void *call, sd_bytes request)
{
    sd_err err = { 0 };
    resolve_req *req = (resolve_req *)sd__jobsvc_pb_unpack(
        &PB(resolve_artifacts_request__descriptor), request, &err);
    if (req == NULL) {
        sd__jobsvc_reply_error(svc, call, err.code, sd_err_msg(&err));
        return;
    }
    /* Every artifact Sundial hands out is already concrete: resolve to itself. */
    resolve_resp resp;
    PB(resolve_artifacts_response__init)(&resp);
    resp.n_replacements = req->n_artifacts;
    resp.replacements = req->artifacts;
    sd__jobsvc_reply(svc, call, &resp.base);
    sd__jobsvc_pb_destroy(&req->base);
}

/* ================================================================ dispatch */

void *sd__jobsvc_artifacts_open(sd_jobsvc *svc, sd__jobsvc_method m, void *call, sd_bytes request)
{
    switch (m) {
    case SD__JS_RESOLVE_ARTIFACTS:
        handle_resolve(svc, call, request);
        return NULL;
    case SD__JS_GET_ARTIFACT:
        return open_get_artifact(svc, call, request);
    case SD__JS_REVERSE_RETRIEVAL: {
        sd__staging *stg = sd_calloc(1, sizeof(*stg));
        sd__jobsvc_rec *rec =
            stg != NULL ? sd__jobsvc_rec_create(svc, SD__REC_STAGING, call) : NULL;
        if (rec == NULL) {
            sd_free(stg);
            sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory opening a staging stream");
            return NULL;
        }
        stg->fd = -1;
        stg->phase = AWAIT_TOKEN;
        rec->staging = stg;
        return rec;
    }
    default:
        sd__jobsvc_reply_error(svc, call, SD_EUNIMPL, "unknown artifact method");
        return NULL;
    }
}

void sd__jobsvc_artifacts_close(sd_jobsvc *svc, sd__jobsvc_rec *rec, bool cancelled)
{
    (void)cancelled;
    if (rec->kind == SD__REC_STAGING && rec->staging != NULL) {
        sd__staging *stg = rec->staging;
        if (stg->phase != STAGING_DONE && rec->job != NULL && rec->job->staging == 1) {
            close_partial(stg);
            rec->job->staging = 3;
            sd_free(rec->job->staging_error);
            rec->job->staging_error =
                sd_strdup("the staging stream closed before every artifact arrived");
        }
        close_partial(stg);
        sd_free(stg);
        rec->staging = NULL;
    }
    if (rec->kind == SD__REC_GET_ARTIFACT && rec->out != NULL) {
        sd__artifact_out *out = rec->out;
        if (out->fd >= 0) {
            (void)close(out->fd);
        }
        sd__jobsvc_pb_destroy(out->keep);
        sd_free(out->buf);
        sd_free(out);
        rec->out = NULL;
    }
    (void)svc;
}
