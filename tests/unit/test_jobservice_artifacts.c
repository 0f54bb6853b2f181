/*
 * Sundial: unit tests for artifact staging and retrieval (runner/jobservice/artifacts.c),
 * driven through the fake transport: a fake submitting client answers the server's
 * ResolveArtifacts / GetArtifact requests on the reverse stream, including hostile artifact
 * names that try to escape the job directory; workers fetch staged files back in paced
 * chunks; broken or early-closed staging streams fail the job's staging, not the service.
 */
#define _XOPEN_SOURCE 700 /* realpath */

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_jobservice_fake.h"

#define URN_FILE     "beam:artifact:type:file:v1"
#define URN_URL      "beam:artifact:type:url:v1"
#define URN_EMBEDDED "beam:artifact:type:embedded:v1"
#define URN_PYPI     "beam:artifact:type:pypi:v1"
#define ROLE_TO      "beam:artifact:role:staging_to:v1"

typedef Org__Apache__Beam__Model__JobManagement__V1__ArtifactRequestWrapper req_wrapper;
typedef Org__Apache__Beam__Model__JobManagement__V1__ArtifactResponseWrapper resp_wrapper;

static char root_dir[1024]; /* mkdtemp: holds the artifact dir and nothing else */
static char art_dir[1100];  /* <root>/artifacts */

static int rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        return remove(path);
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        rm_tree(sub);
    }
    closedir(d);
    return rmdir(path);
}

static int count_entries(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        return -1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            n++;
        }
    }
    closedir(d);
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(root_dir, sizeof(root_dir), "%s/sd-jobsvc-XXXXXX",
             getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(root_dir));
    snprintf(art_dir, sizeof(art_dir), "%s/artifacts/", root_dir); /* trailing slash on purpose */
    sd_jobsvc *svc = NULL;
    sd_err err = { 0 };
    assert_int_equal(sd_jobsvc_create(NULL, NULL, art_dir, &svc, &err), SD_OK);
    art_dir[strlen(art_dir) - 1] = '\0';
    fake_install(svc);
    assert_int_equal(sd_jobsvc_set_endpoint(svc, "localhost:8099"), SD_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    check_invariants();
    sd_jobsvc_destroy(F.svc);
    F.svc = NULL;
    rm_tree(root_dir);
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len + 4096 > cap) {
            cap = cap * 2 + 8192;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t r = fread(buf + *len, 1, 4096, f);
        *len += r;
        if (r < 4096) {
            break;
        }
    }
    fclose(f);
    return buf;
}

/* ---------------------------------------------------------------- fake submitting client */

static void send_token(fcall *c, const char *token)
{
    resp_wrapper w;
    PBJ(artifact_response_wrapper__init)(&w);
    w.staging_token = (char *)token;
    call_feed(c, &w.base);
}

/* The next request the server sent on the staging stream (caller frees). */
static req_wrapper *next_request(fcall *c, size_t *cursor)
{
    if (*cursor >= c->n_msgs) {
        fail_msg("no request #%zu on the staging stream (finished=%d code=%d: %s)", *cursor,
                 c->finished, (int)c->code, c->message);
    }
    return call_msg(c, (*cursor)++, &PBJ(artifact_request_wrapper__descriptor));
}

static void answer_resolve_echo(fcall *c, const req_wrapper *rq)
{
    assert_int_equal(rq->request_case, REQ_CASE(RESOLVE_ARTIFACT));
    Org__Apache__Beam__Model__JobManagement__V1__ResolveArtifactsResponse rr;
    PBJ(resolve_artifacts_response__init)(&rr);
    rr.n_replacements = rq->resolve_artifact->n_artifacts;
    rr.replacements = rq->resolve_artifact->artifacts;
    resp_wrapper w;
    PBJ(artifact_response_wrapper__init)(&w);
    w.response_case = RESP_CASE(RESOLVE_ARTIFACT_RESPONSE);
    w.resolve_artifact_response = &rr;
    call_feed(c, &w.base);
}

static void send_chunk(fcall *c, const char *data, size_t len, bool last)
{
    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactResponse g;
    PBJ(get_artifact_response__init)(&g);
    g.data.data = (uint8_t *)data;
    g.data.len = len;
    resp_wrapper w;
    PBJ(artifact_response_wrapper__init)(&w);
    w.response_case = RESP_CASE(GET_ARTIFACT_RESPONSE);
    w.get_artifact_response = &g;
    w.is_last = last;
    call_feed(c, &w.base);
}

/* The path inside a file artifact's payload (static buffer). */
static const char *artifact_path(const sd_pb_artifact *a)
{
    static char out[PATH_MAX];
    Org__Apache__Beam__Model__Pipeline__V1__ArtifactFilePayload *p =
        (void *)protobuf_c_message_unpack(&PBR(artifact_file_payload__descriptor), NULL,
                                          a->type_payload.len, a->type_payload.data);
    assert_non_null(p);
    snprintf(out, sizeof(out), "%s", p->path);
    pb_free(p);
    return out;
}

/*
 * Play the TypeScript client: token, echo every resolve, answer every GetArtifact with
 * content "<path>|payload" in chunks of `chunk` bytes, ending with an empty is_last message
 * when ts_style, else with is_last on the last data chunk.
 */
static fcall *stage_all(const char *token, size_t chunk, bool ts_style)
{
    Org__Apache__Beam__Model__JobManagement__V1__GetJobsRequest empty;
    PBJ(get_jobs_request__init)(&empty);
    fcall *c = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    assert_non_null(c->rec);
    send_token(c, token);
    size_t cursor = 0;
    while (!c->finished) {
        req_wrapper *rq = next_request(c, &cursor);
        if (rq->request_case == REQ_CASE(RESOLVE_ARTIFACT)) {
            answer_resolve_echo(c, rq);
        } else {
            const sd_pb_artifact *a = rq->get_artifact->artifact;
            assert_string_equal(a->type_urn, URN_FILE); /* TS answers only file artifacts */
            char content[PATH_MAX + 16];
            snprintf(content, sizeof(content), "%s|payload", artifact_path(a));
            size_t len = strlen(content);
            for (size_t off = 0; off < len; off += chunk) {
                size_t n = len - off < chunk ? len - off : chunk;
                send_chunk(c, content + off, n, !ts_style && off + n == len);
            }
            if (ts_style) {
                send_chunk(c, "", 0, true);
            }
        }
        pb_free(rq);
    }
    return c;
}

/* Every dependency of every environment of the job's pipeline, in order. */
static size_t job_deps(sd_job *job, const sd_pb_artifact **out, size_t max)
{
    const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *p = sd_job_pipeline(job);
    size_t n = 0;
    for (size_t e = 0; e < p->components->n_environments; e++) {
        const sd_pb_environment *env = p->components->environments[e]->value;
        for (size_t d = 0; d < env->n_dependencies && n < max; d++) {
            out[n++] = env->dependencies[d];
        }
    }
    return n;
}

/* ---------------------------------------------------------------- tests */

static void test_staged_names(void **state)
{
    (void)state;

    static const struct {
        size_t index;
        const char *source;
        const char *want;
    } rows[] = {
        { 0, "../../etc/passwd", "dep-000-passwd" },
        { 1, "/abs/path/x.tar.gz", "dep-001-x.tar.gz" },
        { 2, "..", "dep-002-artifact" },
        { 3, "", "dep-003-artifact" },
        { 4, "a/b/..", "dep-004-artifact" },
        { 5, "https://host/p/file.whl?sig=1#frag", "dep-005-file.whl" },
        { 6, "we ird name$.txt", "dep-006-we_ird_name_.txt" },
        { 7, "C:\\dir\\evil.exe", "dep-007-evil.exe" },
        { 8, ".hidden", "dep-008-hidden" },
        { 9, "dir/", "dep-009-dir" },
        { 10, "/", "dep-010-artifact" },
        { 11, "x/\xc3\xa9t\xc3\xa9.jar", "dep-011-__t__.jar" },
        { 1234, "f", "dep-1234-f" },
        { 12, "..../...", "dep-012-artifact" },
        { 13, "a\n/b\x01", "dep-013-b_" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *got = sd__jobsvc_staged_name(rows[i].index, rows[i].source);
        assert_non_null(got);
        if (strcmp(got, rows[i].want) != 0) {
            fail_msg("row %zu (%s): got %s want %s", i, rows[i].source, got, rows[i].want);
        }
        assert_null(strchr(got, '/'));
        sd_free(got);
    }
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    char *got = sd__jobsvc_staged_name(0, longname);
    assert_int_equal(strlen(got), strlen("dep-000-") + 64);
    sd_free(got);
}

/* The staging endpoint is offered only when a file/url dependency must be fetched. */
static void test_endpoint_offered_only_with_deps(void **state)
{
    (void)state;
    static const tdep file_dep[1][MAX_TDEPS] = { { { URN_FILE, "/src/pkg.tgz", NULL } } };
    static const tdep url_dep[1][MAX_TDEPS] = { { { URN_URL, "https://x/pkg.tgz", NULL } } };
    static const tdep embedded[1][MAX_TDEPS] = { { { URN_EMBEDDED, "inline", NULL } } };
    static const tdep pypi[1][MAX_TDEPS] = { { { URN_PYPI, "numpy", NULL } } };
    static const tdep none[1][MAX_TDEPS] = { { { NULL, NULL, NULL } } };

    static const struct {
        const char *name;
        const tdep (*envs)[MAX_TDEPS];
        bool offered;
    } rows[] = {
        { "file", file_dep, true }, { "url", url_dep, true }, { "embedded", embedded, false },
        { "pypi", pypi, false },    { "none", none, false },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        pb_prepare_resp *r = prepare_ok(rows[i].name, rows[i].envs, 1, NULL);
        if ((r->artifact_staging_endpoint != NULL) != rows[i].offered) {
            fail_msg("row %s: endpoint offered = %d", rows[i].name,
                     r->artifact_staging_endpoint != NULL);
        }
        if (rows[i].offered) {
            assert_string_equal(r->artifact_staging_endpoint->url, "localhost:8099");
        }
        /* The job directory is made when first needed (a process worker's
         * semi_persist_dir, staging), not by Prepare. */
        sd_job *job = sd_jobsvc_find(F.svc, r->preparation_id);
        struct stat sb;
        assert_int_equal(stat(sd_job_artifact_dir(job), &sb), -1);
        sd_err err = { 0 };
        assert_int_equal(sd_job_make_artifact_dir(job, &err), SD_OK);
        assert_int_equal(stat(sd_job_artifact_dir(job), &sb), 0);
        assert_true(S_ISDIR(sb.st_mode));
        pb_free(r);
    }
    /* Without an endpoint nothing is offered. */
    assert_int_equal(sd_jobsvc_set_endpoint(F.svc, NULL), SD_OK);
    pb_prepare_resp *r = prepare_ok("noep", file_dep, 1, NULL);
    assert_null(r->artifact_staging_endpoint);
    pb_free(r);
}

/*
 * The whole TypeScript-style exchange with hostile names: every file lands inside
 * <artifact_dir>/<job>/, the dependencies are rewritten to the staged files, roles are kept,
 * and nothing is written anywhere else.
 */
static void test_stage_and_escape_attempts(void **state)
{
    (void)state;
    static const tdep envs[2][MAX_TDEPS] = {
        {
            { URN_FILE, "../../etc/passwd", ROLE_TO },
            { URN_EMBEDDED, "inline-bytes", NULL },
            { URN_FILE, "/etc/shadow", NULL },
            { URN_FILE, "..", NULL },
        },
        {
            { URN_FILE, "a/../../b", NULL },
            { URN_URL, "https://example.com/x/../../lib.jar?x=/../../y", NULL },
            { URN_PYPI, "numpy", NULL },
            { URN_FILE,
              "sub/../../../"
              "x",
              NULL },
        },
    };
    int before = count_entries(root_dir);
    pb_prepare_resp *r = prepare_ok("stage", envs, 2, NULL);
    assert_non_null(r->artifact_staging_endpoint);
    char token[64];
    snprintf(token, sizeof(token), "%s", r->staging_session_token);
    pb_free(r);

    /* The fake echoes every resolve; URL dependencies are then asked for as they are. */
    fcall *c = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    send_token(c, token);
    size_t cursor = 0;
    int gets = 0, resolves = 0;
    while (!c->finished) {
        req_wrapper *rq = next_request(c, &cursor);
        if (rq->request_case == REQ_CASE(RESOLVE_ARTIFACT)) {
            resolves++;
            assert_int_equal(rq->resolve_artifact->n_artifacts, 4);
            answer_resolve_echo(c, rq);
        } else {
            gets++;
            const sd_pb_artifact *a = rq->get_artifact->artifact;
            const char *content = strcmp(a->type_urn, URN_URL) == 0 ? "jar-bytes" : "file-bytes";
            send_chunk(c, content, 4, false);
            send_chunk(c, content + 4, strlen(content) - 4, true);
        }
        pb_free(rq);
    }
    assert_int_equal(c->code, SD_RPC_OK);
    assert_int_equal(resolves, 2);
    assert_int_equal(gets, 6); /* 5 file + 1 url; embedded and pypi are not fetched */
    call_close(c);

    sd_job *job = sd_jobsvc_find(F.svc, token);
    const char *dir = sd_job_artifact_dir(job);
    char want_dir[2 * PATH_MAX];
    snprintf(want_dir, sizeof(want_dir), "%s/%s", art_dir, token);
    assert_string_equal(dir, want_dir);
    char real_dir[PATH_MAX];
    assert_non_null(realpath(dir, real_dir));

    const sd_pb_artifact *deps[16];
    size_t n = job_deps(job, deps, 16);
    assert_int_equal(n, 8);
    static const char *const want_names[] = {
        "dep-000-passwd",  NULL, "dep-001-shadow", "dep-002-artifact", "dep-003-b",
        "dep-004-lib.jar", NULL, "dep-005-x"
    };
    for (size_t i = 0; i < n; i++) {
        if (want_names[i] == NULL) {
            assert_true(strcmp(deps[i]->type_urn, URN_EMBEDDED) == 0 ||
                        strcmp(deps[i]->type_urn, URN_PYPI) == 0);
            continue;
        }
        assert_string_equal(deps[i]->type_urn, URN_FILE);
        const char *path = artifact_path(deps[i]);
        char want[PATH_MAX];
        snprintf(want, sizeof(want), "%s/%s", dir, want_names[i]);
        assert_string_equal(path, want);
        char real[PATH_MAX];
        assert_non_null(realpath(path, real));
        assert_int_equal(strncmp(real, real_dir, strlen(real_dir)), 0);
        assert_int_equal(real[strlen(real_dir)], '/');
        assert_null(strchr(real + strlen(real_dir) + 1, '/'));
        size_t len;
        char *data = read_file(path, &len);
        assert_non_null(data);
        const char *want_data = i == 5 ? "jar-bytes" : "file-bytes";
        assert_int_equal(len, strlen(want_data));
        assert_memory_equal(data, want_data, len);
        free(data);
    }
    /* The role of the first dependency survived the rewrite; the sha256 was kept. */
    assert_string_equal(deps[0]->role_urn, ROLE_TO);
    assert_int_equal(deps[0]->role_payload.len, 2);
    Org__Apache__Beam__Model__Pipeline__V1__ArtifactFilePayload *fp =
        (void *)protobuf_c_message_unpack(&PBR(artifact_file_payload__descriptor), NULL,
                                          deps[0]->type_payload.len, deps[0]->type_payload.data);
    assert_string_equal(fp->sha256, "abc123");
    pb_free(fp);
    /* Only the job directory's six files exist; the root holds only "artifacts". */
    assert_int_equal(count_entries(dir), 6);
    assert_int_equal(count_entries(art_dir), 1);
    assert_int_equal(count_entries(root_dir), before);
    assert_int_equal(before, 1);

    /* GetPipeline shows the rewritten dependencies too, and the job can now run. */
    Org__Apache__Beam__Model__JobManagement__V1__GetJobPipelineRequest pr;
    PBJ(get_job_pipeline_request__init)(&pr);
    pr.job_id = token;
    Org__Apache__Beam__Model__JobManagement__V1__GetJobPipelineResponse *gp =
        unary_ok(SD__JS_GET_PIPELINE, &pr.base, &PBJ(get_job_pipeline_response__descriptor));
    assert_string_equal(gp->pipeline->components->environments[0]->value->dependencies[0]->type_urn,
                        URN_FILE);
    pb_free(gp);

    /* Staging twice is refused. */
    fcall *again = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    send_token(again, token);
    assert_true(again->finished);
    assert_int_equal(again->code, SD_RPC_FAILED_PRECONDITION);
    assert_non_null(strstr(again->message, "already staged"));
    call_close(again);

    /* Destroying the service removes what it staged. */
    char kept[PATH_MAX];
    snprintf(kept, sizeof(kept), "%s", dir);
    sd_jobsvc_destroy(F.svc);
    F.svc = NULL;
    struct stat sb;
    assert_int_not_equal(stat(kept, &sb), 0);
    sd_jobsvc *svc = NULL;
    assert_int_equal(sd_jobsvc_create(NULL, NULL, art_dir, &svc, NULL), SD_OK);
    fake_install(svc);
}

/* TypeScript's ending (an empty is_last message) and small chunks reassemble exactly. */
static void test_ts_style_chunks_and_retrieval(void **state)
{
    (void)state;
    static const tdep envs[1][MAX_TDEPS] = { { { URN_FILE, "/home/u/proj/app.tgz", NULL } } };
    pb_prepare_resp *r = prepare_ok("ts", envs, 1, NULL);
    fcall *c = stage_all(r->staging_session_token, 3, true);
    assert_int_equal(c->code, SD_RPC_OK);
    call_close(c);
    sd_job *job = sd_jobsvc_find(F.svc, r->preparation_id);
    pb_free(r);
    const sd_pb_artifact *deps[4];
    assert_int_equal(job_deps(job, deps, 4), 1);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s", artifact_path(deps[0]));

    /* A worker fetches it back through the retrieval service. */
    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactRequest g;
    PBJ(get_artifact_request__init)(&g);
    g.artifact = (sd_pb_artifact *)deps[0];
    fcall *get = open_msg(SD__JS_GET_ARTIFACT, &g.base);
    assert_true(get->finished);
    assert_int_equal(get->code, SD_RPC_OK);
    assert_int_equal(get->n_msgs, 1);
    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactResponse *resp =
        call_msg(get, 0, &PBJ(get_artifact_response__descriptor));
    const char *want = "/home/u/proj/app.tgz|payload";
    assert_int_equal(resp->data.len, strlen(want));
    assert_memory_equal(resp->data.data, want, strlen(want));
    pb_free(resp);
    call_close(get);

    /* ResolveArtifacts echoes its request. */
    Org__Apache__Beam__Model__JobManagement__V1__ResolveArtifactsRequest rr;
    PBJ(resolve_artifacts_request__init)(&rr);
    rr.n_artifacts = 1;
    rr.artifacts = (sd_pb_artifact **)deps;
    Org__Apache__Beam__Model__JobManagement__V1__ResolveArtifactsResponse *rresp =
        unary_ok(SD__JS_RESOLVE_ARTIFACTS, &rr.base, &PBJ(resolve_artifacts_response__descriptor));
    assert_int_equal(rresp->n_replacements, 1);
    assert_string_equal(artifact_path(rresp->replacements[0]), path);
    pb_free(rresp);
}

/* Files larger than a chunk are served in chunks of at most 1 MiB, paced by the queue. */
static void test_retrieval_large_paced(void **state)
{
    (void)state;
    static const tdep envs[1][MAX_TDEPS] = { { { URN_FILE, "big.bin", NULL } } };
    pb_prepare_resp *r = prepare_ok("big", envs, 1, NULL);
    fcall *c = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    send_token(c, r->staging_session_token);
    size_t cursor = 0;
    req_wrapper *rq = next_request(c, &cursor);
    answer_resolve_echo(c, rq);
    pb_free(rq);
    rq = next_request(c, &cursor);
    assert_int_equal(rq->request_case, REQ_CASE(GET_ARTIFACT));
    pb_free(rq);
    const size_t total = 5 * 1024 * 1024 + 12345;
    char *data = malloc(total);
    assert_non_null(data);
    for (size_t i = 0; i < total; i++) {
        data[i] = (char)(i * 7 + i / 4096);
    }
    const size_t piece = 700000;
    for (size_t off = 0; off < total; off += piece) {
        size_t n = total - off < piece ? total - off : piece;
        send_chunk(c, data + off, n, off + n == total);
    }
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_OK);
    call_close(c);
    sd_job *job = sd_jobsvc_find(F.svc, r->preparation_id);
    pb_free(r);
    const sd_pb_artifact *deps[2];
    assert_int_equal(job_deps(job, deps, 2), 1);

    F.pacing = true;
    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactRequest g;
    PBJ(get_artifact_request__init)(&g);
    g.artifact = (sd_pb_artifact *)deps[0];
    fcall *get = open_msg(SD__JS_GET_ARTIFACT, &g.base);
    assert_non_null(get->rec);
    assert_false(get->finished);
    assert_int_equal(get->n_msgs, 4); /* the queue bound */
    assert_true(F.want_pump > 0);
    int rounds = 0;
    while (!get->finished) {
        get->consumed = get->n_msgs; /* the network drains the queue */
        sd__jobsvc_pump(F.svc);
        check_invariants();
        assert_true(++rounds < 100);
    }
    assert_int_equal(get->code, SD_RPC_OK);
    size_t got = 0;
    for (size_t i = 0; i < get->n_msgs; i++) {
        Org__Apache__Beam__Model__JobManagement__V1__GetArtifactResponse *m =
            call_msg(get, i, &PBJ(get_artifact_response__descriptor));
        assert_true(m->data.len <= SD_JOBSVC_CHUNK_MAX);
        assert_true(m->data.len > 0);
        assert_memory_equal(m->data.data, data + got, m->data.len);
        got += m->data.len;
        pb_free(m);
    }
    assert_int_equal(got, total);
    assert_int_equal(get->n_msgs, 6);
    call_close(get);

    /* A worker that goes away mid-transfer is cleaned up. */
    get = open_msg(SD__JS_GET_ARTIFACT, &g.base);
    assert_false(get->finished);
    call_close(get);
    sd__jobsvc_pump(F.svc);
    F.pacing = false;
    free(data);
}

/* GetArtifact serves staged files and embedded data only. */
static void test_retrieval_refuses(void **state)
{
    (void)state;
    static const tdep envs[1][MAX_TDEPS] = { { { URN_FILE, "lib.jar", NULL } } };
    pb_prepare_resp *r = prepare_ok("ref", envs, 1, NULL);
    fcall *c = stage_all(r->staging_session_token, 100, false);
    call_close(c);
    sd_job *job = sd_jobsvc_find(F.svc, r->preparation_id);
    pb_free(r);
    char escape[PATH_MAX];
    snprintf(escape, sizeof(escape), "%s/../../../etc/passwd", sd_job_artifact_dir(job));
    char other[PATH_MAX];
    snprintf(other, sizeof(other), "%s/dep-999-nothing", sd_job_artifact_dir(job));

    static const struct {
        const char *type;
        const char *path;
        sd_rpc_code code;
        const char *needle;
    } rows[] = {
        { URN_FILE, "/etc/passwd", SD_RPC_NOT_FOUND, "was not staged" },
        { URN_FILE, NULL /* escape */, SD_RPC_NOT_FOUND, "was not staged" },
        { URN_FILE, NULL /* other */, SD_RPC_NOT_FOUND, "was not staged" },
        { URN_FILE, "", SD_RPC_NOT_FOUND, "was not staged" },
        { URN_URL, "https://x/y", SD_RPC_NOT_FOUND, "not served" },
        { URN_PYPI, "numpy", SD_RPC_NOT_FOUND, "not served" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        tdep d = { rows[i].type, rows[i].path, NULL };
        if (i == 1) {
            d.path = escape;
        } else if (i == 2) {
            d.path = other;
        }
        size_t len;
        uint8_t *payload = tdep_payload(&d, &len);
        sd_pb_artifact a;
        PBR(artifact_information__init)(&a);
        a.type_urn = (char *)rows[i].type;
        a.type_payload.data = payload;
        a.type_payload.len = len;
        Org__Apache__Beam__Model__JobManagement__V1__GetArtifactRequest g;
        PBJ(get_artifact_request__init)(&g);
        g.artifact = &a;
        unary_err(SD__JS_GET_ARTIFACT, &g.base, rows[i].code, rows[i].needle);
        free(payload);
    }
    /* Missing artifact and malformed request. */
    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactRequest g;
    PBJ(get_artifact_request__init)(&g);
    unary_err(SD__JS_GET_ARTIFACT, &g.base, SD_RPC_INVALID_ARGUMENT, "artifact is missing");
    fcall *bad = open_raw(SD__JS_GET_ARTIFACT, "\x0a\x09zz", 4);
    assert_true(bad->finished);
    assert_int_equal(bad->code, SD_RPC_INVALID_ARGUMENT);
    call_close(bad);
    fcall *bad2 = open_raw(SD__JS_RESOLVE_ARTIFACTS, "\x0a\x09zz", 4);
    assert_int_equal(bad2->code, SD_RPC_INVALID_ARGUMENT);
    call_close(bad2);

    /* Embedded artifacts are served from their own bytes (also when empty). */
    static const char *const embedded[] = { "hello embedded", "" };
    for (size_t i = 0; i < 2; i++) {
        tdep d = { URN_EMBEDDED, embedded[i], NULL };
        size_t len;
        uint8_t *payload = tdep_payload(&d, &len);
        sd_pb_artifact a;
        PBR(artifact_information__init)(&a);
        a.type_urn = (char *)URN_EMBEDDED;
        a.type_payload.data = payload;
        a.type_payload.len = len;
        g.artifact = &a;
        fcall *e = open_msg(SD__JS_GET_ARTIFACT, &g.base);
        assert_true(e->finished);
        assert_int_equal(e->code, SD_RPC_OK);
        size_t got = 0;
        for (size_t k = 0; k < e->n_msgs; k++) {
            Org__Apache__Beam__Model__JobManagement__V1__GetArtifactResponse *m =
                call_msg(e, k, &PBJ(get_artifact_response__descriptor));
            assert_memory_equal(m->data.data, embedded[i] + got, m->data.len);
            got += m->data.len;
            pb_free(m);
        }
        assert_int_equal(got, strlen(embedded[i]));
        call_close(e);
        free(payload);
    }
}

/* Broken staging streams fail the job's staging with a clear message; Run then refuses. */
static void test_staging_failures(void **state)
{
    (void)state;
    static const tdep envs[1][MAX_TDEPS] = { { { URN_FILE, "/p/a.tgz", NULL } } };

    enum { UNKNOWN_TOKEN, MALFORMED, WRONG_KIND, HALF_CLOSE, CANCEL_MID, GARBAGE_CHUNK };

    static const struct {
        const char *name;
        int how;
        sd_rpc_code code;
        const char *needle;
        bool job_marked;
    } rows[] = {
        { "unknown token", UNKNOWN_TOKEN, SD_RPC_NOT_FOUND, "job-nope", false },
        { "malformed first", MALFORMED, SD_RPC_INVALID_ARGUMENT, "ArtifactResponseWrapper", false },
        { "wrong reply kind", WRONG_KIND, SD_RPC_INVALID_ARGUMENT,
          "expected resolve_artifact_response", true },
        { "half close early", HALF_CLOSE, SD_RPC_INVALID_ARGUMENT, "before sending every", true },
        { "cancel mid transfer", CANCEL_MID, SD_RPC_OK, NULL, true },
        { "garbage chunk", GARBAGE_CHUNK, SD_RPC_INVALID_ARGUMENT, "malformed", true },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        pb_prepare_resp *r = prepare_ok(rows[i].name, envs, 1, NULL);
        char id[32];
        snprintf(id, sizeof(id), "%s", r->preparation_id);
        pb_free(r);
        fcall *c = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
        size_t cursor = 0;
        req_wrapper *rq;
        switch (rows[i].how) {
        case UNKNOWN_TOKEN:
            send_token(c, "job-nope");
            break;
        case MALFORMED:
            call_feed_raw(c, "\x12\x05zz", 4);
            break;
        case WRONG_KIND:
            send_token(c, id);
            send_chunk(c, "x", 1, true);
            break;
        case HALF_CLOSE:
            send_token(c, id);
            sd__jobsvc_on_half_close(F.svc, c->rec);
            check_invariants();
            break;
        case CANCEL_MID:
        case GARBAGE_CHUNK:
            send_token(c, id);
            rq = next_request(c, &cursor);
            answer_resolve_echo(c, rq);
            pb_free(rq);
            send_chunk(c, "partial", 7, false);
            if (rows[i].how == GARBAGE_CHUNK) {
                call_feed_raw(c, "\xc2\x3e\x05", 3);
            }
            break;
        }
        sd_job *job = sd_jobsvc_find(F.svc, id);
        char partial[PATH_MAX];
        snprintf(partial, sizeof(partial), "%s/dep-000-a.tgz", sd_job_artifact_dir(job));
        if (rows[i].how == CANCEL_MID) {
            assert_false(c->finished);
            struct stat sb;
            assert_int_equal(stat(partial, &sb), 0); /* being written */
        } else {
            assert_true(c->finished);
            if (c->code != rows[i].code || strstr(c->message, rows[i].needle) == NULL) {
                fail_msg("row %s: code %d message %s", rows[i].name, (int)c->code, c->message);
            }
        }
        call_close(c);
        struct stat sb;
        assert_int_not_equal(stat(partial, &sb), 0); /* partial files are removed */
        Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run;
        PBJ(run_job_request__init)(&run);
        run.preparation_id = id;
        if (rows[i].job_marked) {
            unary_err(SD__JS_RUN, &run.base, SD_RPC_FAILED_PRECONDITION, "staging");
        } else {
            /* The job was never touched: Run goes ahead (and fails: no executor here). */
            unary_err(SD__JS_RUN, &run.base, SD_RPC_FAILED_PRECONDITION, "no executor");
        }
    }
}

/* Staging after Run, and a second stream while the first is active, are refused. */
static void test_staging_state_checks(void **state)
{
    (void)state;
    static const tdep envs[1][MAX_TDEPS] = { { { URN_FILE, "/p/a.tgz", NULL } } };
    pb_prepare_resp *r = prepare_ok("busy", envs, 1, NULL);
    char id[32];
    snprintf(id, sizeof(id), "%s", r->preparation_id);
    pb_free(r);
    fcall *first = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    send_token(first, id);
    assert_false(first->finished);
    fcall *second = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    send_token(second, id);
    assert_true(second->finished);
    assert_int_equal(second->code, SD_RPC_FAILED_PRECONDITION);
    assert_non_null(strstr(second->message, "another stream"));
    call_close(second);
    /* Run while staging is in progress is refused. */
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run;
    PBJ(run_job_request__init)(&run);
    run.preparation_id = id;
    unary_err(SD__JS_RUN, &run.base, SD_RPC_FAILED_PRECONDITION, "in progress");
    call_close(first);

    /* A job without fetchable deps: a client that stages anyway is told OK at once. */
    static const tdep none[1][MAX_TDEPS] = { { { URN_EMBEDDED, "x", NULL } } };
    r = prepare_ok("nodeps", none, 1, NULL);
    fcall *c = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    send_token(c, r->staging_session_token);
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_OK);
    assert_int_equal(c->n_msgs, 0);
    call_close(c);
    pb_free(r);

    /* Staging a job that was already cancelled is refused. */
    r = prepare_ok("cancelled", envs, 1, NULL);
    sd_job_set_state(sd_jobsvc_find(F.svc, r->preparation_id), SD_JOB_CANCELLED);
    c = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    send_token(c, r->staging_session_token);
    assert_int_equal(c->code, SD_RPC_FAILED_PRECONDITION);
    assert_non_null(strstr(c->message, "before Run"));
    call_close(c);
    pb_free(r);
}

/* The client may resolve a dependency to something else (here: embedded); that is kept. */
static void test_resolve_replacements(void **state)
{
    (void)state;
    static const tdep envs[1][MAX_TDEPS] = { { { URN_FILE, "/p/a.tgz", NULL },
                                               { URN_FILE, "/p/b.tgz", NULL } } };
    pb_prepare_resp *r = prepare_ok("resolve", envs, 1, NULL);
    fcall *c = open_raw(SD__JS_REVERSE_RETRIEVAL, "", 0);
    send_token(c, r->staging_session_token);
    size_t cursor = 0;
    req_wrapper *rq = next_request(c, &cursor);
    pb_free(rq);
    /* Replace both with a single embedded artifact. */
    tdep d = { URN_EMBEDDED, "resolved-inline", NULL };
    size_t len;
    uint8_t *payload = tdep_payload(&d, &len);
    sd_pb_artifact a;
    PBR(artifact_information__init)(&a);
    a.type_urn = (char *)URN_EMBEDDED;
    a.type_payload.data = payload;
    a.type_payload.len = len;
    sd_pb_artifact *ap = &a;
    Org__Apache__Beam__Model__JobManagement__V1__ResolveArtifactsResponse rr;
    PBJ(resolve_artifacts_response__init)(&rr);
    rr.n_replacements = 1;
    rr.replacements = &ap;
    resp_wrapper w;
    PBJ(artifact_response_wrapper__init)(&w);
    w.response_case = RESP_CASE(RESOLVE_ARTIFACT_RESPONSE);
    w.resolve_artifact_response = &rr;
    call_feed(c, &w.base);
    free(payload);
    assert_true(c->finished);
    assert_int_equal(c->code, SD_RPC_OK);
    assert_int_equal(c->n_msgs, 1); /* no GetArtifact was needed */
    call_close(c);
    sd_job *job = sd_jobsvc_find(F.svc, r->preparation_id);
    pb_free(r);
    const sd_pb_artifact *deps[4];
    assert_int_equal(job_deps(job, deps, 4), 1);
    assert_string_equal(deps[0]->type_urn, URN_EMBEDDED);
}

/* An artifact directory that cannot be created fails create() with a message. */
static void test_bad_artifact_dir(void **state)
{
    (void)state;
    char file[1200];
    snprintf(file, sizeof(file), "%s/plainfile", root_dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    char under[1300];
    snprintf(under, sizeof(under), "%s/sub", file);
    sd_jobsvc *svc = NULL;
    sd_err err = { 0 };
    assert_int_equal(sd_jobsvc_create(NULL, NULL, under, &svc, &err), SD_EIO);
    assert_null(svc);
    assert_non_null(strstr(err.msg, "plainfile"));
    assert_int_equal(sd_jobsvc_create(NULL, NULL, file, &svc, &err), SD_EIO);
    remove(file);
}

/* Staging under allocation failure: errors, never crashes or leaks; eventually succeeds. */
static void test_oom_staging(void **state)
{
    (void)state;
    static const tdep envs[1][MAX_TDEPS] = { { { URN_FILE, "/p/a.tgz", NULL } } };
    bool ok = false;
    for (long n = 1; n < 400 && !ok; n++) {
        pb_prepare_resp *r = prepare_ok("oom", envs, 1, NULL);
        char id[32];
        snprintf(id, sizeof(id), "%s", r->preparation_id);
        pb_free(r);
        fcall *c = fcall_new(SD__JS_REVERSE_RETRIEVAL);
        sd_alloc_fail_after(n, 0);
        c->rec = sd__jobsvc_on_open(F.svc, SD__JS_REVERSE_RETRIEVAL, c, SD_BYTES_NULL);
        if (c->rec != NULL) {
            send_token(c, id);
            size_t cursor = 0;
            if (!c->finished) {
                req_wrapper *rq = next_request(c, &cursor);
                answer_resolve_echo(c, rq);
                pb_free(rq);
            }
            if (!c->finished) {
                send_chunk(c, "abc", 3, true);
            }
        }
        sd_alloc_fail_after(0, 0);
        check_invariants();
        assert_true(c->finished);
        ok = c->code == SD_RPC_OK;
        if (!ok) {
            assert_int_equal(c->code, SD_RPC_RESOURCE_EXHAUSTED);
        }
        call_close(c);
    }
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staged_names),
        cmocka_unit_test_setup_teardown(test_endpoint_offered_only_with_deps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stage_and_escape_attempts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ts_style_chunks_and_retrieval, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retrieval_large_paced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retrieval_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_staging_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_staging_state_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resolve_replacements, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_artifact_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom_staging, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
