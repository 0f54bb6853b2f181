/*
 * Steering a job's time from a C test (<sundial/control.h>), TopologyTestDriver-style: the
 * worked example of a Spark-style processing-time timeout (sd_map_groups_with_state: a click
 * count per user, a one-hour timeout that each click resets), the C twin of
 * tests/integration/pause_timeout_check.py.
 *
 * The test starts `sundial serve --port 0 --web_port 0` (the binary beside this one) and a
 * TestStreamService (<sundial/teststream_service.h>) on loopback; the pipeline's TestStream
 * reads its clicks live from that service. The pipeline runs on the server paused from the
 * start (sundial_pause=start) in a second thread, and from this one the test: checks that the
 * job rests with nothing out; feeds alice's and bob's clicks through the service and ends the
 * stream; plays them (a step of no processing time) and reads them back from the TestStream's
 * output; steps 59 minutes — no timeout, nothing out, alice's state holds her 2 clicks, two
 * timers pending; steps 2 more minutes — both timeouts fire — and lets the job end. The same
 * pipeline unpaused, reading the same service (every Events call gets the whole stream), gives
 * the same output (the run's own assertion checks it both ways). The same steps run once more
 * over a scripted TestStream with the same clicks.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sundial/sundial.h"

#define MINUTE (60LL * 1000LL)
#define HOUR   (60LL * MINUTE)

static int64_t read_int(sd_bytes b)
{
    sd_reader r = sd_reader_make(b);
    int64_t v = 0;
    return sd_read_int(&r, &v) == SD_OK ? v : -1;
}

/* mapGroupsWithState: count clicks, reset the one-hour timeout; on timeout "<user> N". */
static sd_status clicks(sd_ctx *c, sd_group_state *gs, const sd_bytes *value)
{
    sd_bytes cur;
    bool exists;
    sd_status st = sd_group_get(gs, &cur, &exists);
    if (st != SD_OK) {
        return st;
    }
    int64_t total = exists ? read_int(cur) : 0;
    if (value == NULL) {
        sd_reader kr = sd_reader_make(sd_ctx_key(c));
        sd_bytes user;
        char line[96];
        if (sd_read_bytes(&kr, &user) != SD_OK) {
            return sd_fail(c, "bad key");
        }
        int len = snprintf(line, sizeof(line), "%.*s timed out: %lld", (int)user.len,
                           (const char *)user.ptr, (long long)total);
        st = sd_emit_str(c, line, (size_t)len);
        return st != SD_OK ? st : sd_group_remove(gs);
    }
    uint8_t buf[10];
    sd_buf b = { .data = buf, .cap = sizeof(buf) };
    if ((st = sd_enc_int(&b, total + read_int(*value))) != SD_OK ||
        (st = sd_group_update(gs, sd_buf_bytes(&b))) != SD_OK) {
        return st;
    }
    return sd_group_set_timeout_ms(gs, HOUR);
}

static sd_bytes click(sd_buf *b, const char *user);

/* The same clicks as feed_clicks sends, scripted. */
static void script_clicks(sd_teststream *s)
{
    sd_buf b1, b2;
    sd_buf_init(&b1, 0);
    sd_buf_init(&b2, 0);
    sd_bytes first[2] = { click(&b1, "alice"), click(&b2, "bob") };
    sd_time at1[2] = { 1, 1 };
    sd_teststream_add_elements(s, NULL, first, at1, 2);
    sd_bytes again = click(&b1, "alice");
    sd_time at2 = 2;
    sd_teststream_add_elements(s, NULL, &again, &at2, 1);
    sd_buf_deinit(&b1);
    sd_buf_deinit(&b2);
}

/* The pipeline: clicks read live from the TestStreamService at endpoint, or (NULL) scripted. */
static sd_pipeline *build(const char *name, const char *endpoint)
{
    sd_pipeline *p = sd_pipeline_create(name);
    const sd_pcoder *kvc = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_teststream *s = sd_teststream_create(p, "Clicks", kvc, NULL, 0);
    if (endpoint != NULL) {
        sd_teststream_set_endpoint(s, endpoint);
    } else {
        script_clicks(s);
    }
    sd_pcoll *out =
        sd_map_groups_with_state(p, "Sessionize", sd_teststream_output(s, NULL), "pause:clicks",
                                 SD_BYTES_NULL, sd_pcoder_varint(p), sd_pcoder_string(p));
    assert_non_null(out);
    static const char *const want[] = { "alice timed out: 2", "bob timed out: 1" };
    sd_assert_strings(p, "Check", out, want, 2);
    if (sd_pipeline_error(p) != NULL) {
        fail_msg("building %s: %s", name, sd_err_msg(sd_pipeline_error(p)));
    }
    return p;
}

/* One click: KV(user, 1), nested, into b. */
static sd_bytes click(sd_buf *b, const char *user)
{
    sd_buf_reset(b);
    assert_int_equal(sd_enc_str(b, user), SD_OK);
    assert_int_equal(sd_enc_int(b, 1), SD_OK);
    return sd_buf_bytes(b);
}

/* The clicks, live: alice and bob at event time 1, alice again at 2; then the stream ends. */
static void feed_clicks(sd_teststream_service *svc)
{
    sd_err err;
    sd_err_clear(&err);
    sd_buf b1, b2;
    sd_buf_init(&b1, 0);
    sd_buf_init(&b2, 0);
    sd_bytes first[2] = { click(&b1, "alice"), click(&b2, "bob") };
    sd_time at1[2] = { 1, 1 };
    sd_status st = sd_teststream_service_add_elements(svc, NULL, first, at1, 2, &err);
    if (st == SD_OK) {
        sd_bytes again = click(&b1, "alice");
        sd_time at2 = 2;
        st = sd_teststream_service_add_elements(svc, NULL, &again, &at2, 1, &err);
    }
    if (st == SD_OK) {
        st = sd_teststream_service_end(svc, &err);
    }
    if (st != SD_OK) {
        fail_msg("feeding the clicks: %s", sd_err_msg(&err));
    }
    sd_buf_deinit(&b1);
    sd_buf_deinit(&b2);
}

/* ---------------------------------------------------------------- the server */

typedef struct server {
    pid_t pid;
    char endpoint[64];
    char web[128];
} server;

static void server_start(server *s)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 16);
    assert_true(n > 0);
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    assert_non_null(slash);
    snprintf(slash + 1, sizeof(self) - (size_t)(slash + 1 - self), "sundial");
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a failed test leaves no server behind */
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 2);
        }
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl(self, self, "serve", "--port", "0", "--web_port", "0", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line1[256] = "", line2[256] = "";
    assert_non_null(fgets(line1, sizeof(line1), f));
    assert_non_null(fgets(line2, sizeof(line2), f));
    assert_int_equal(sscanf(line1, "listening on %63s", s->endpoint), 1);
    assert_int_equal(sscanf(line2, "web ui on %127s", s->web), 1);
    /* The server writes nothing more to stdout that matters; keep the pipe open (fdopen owns
     * it) so it never meets a closed pipe. */
}

static void server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    int status;
    waitpid(s->pid, &status, 0);
}

/* ---------------------------------------------------------------- the run thread */

typedef struct run_arg {
    sd_pipeline *p;
    const char *endpoint;
    const char *job_name;
    bool paused;
    sd_status st;
    sd_err err;
} run_arg;

static void *run_thread(void *arg)
{
    run_arg *a = arg;
    static const char *const names[] = { "beam:option:sundial_pause:v1" };
    static const char *const values[] = { "start" };
    sd_run_options o = { .endpoint = a->endpoint,
                         .job_name = a->job_name,
                         .timeout_ms = 120000,
                         .n_options = a->paused ? 1 : 0,
                         .option_names = names,
                         .option_values = values };
    sd_err_clear(&a->err);
    a->st = sd_pipeline_run(a->p, &o, NULL, &a->err);
    return NULL;
}

/* The name of the first PCollection whose name starts with prefix, from a pause document. */
static bool pcoll_named(const char *doc, const char *prefix, char *out, size_t n)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"name\":\"%s", prefix);
    const char *pcs = strstr(doc, "\"pcollections\"");
    const char *at = pcs != NULL ? strstr(pcs, pat) : NULL;
    if (at == NULL) {
        return false;
    }
    at += 8;
    size_t len = strcspn(at, "\"");
    if (len >= n) {
        return false;
    }
    memcpy(out, at, len);
    out[len] = '\0';
    return true;
}

static void get(sd_job_control *job, const char *what, const char *query, sd_buf *out)
{
    sd_err err;
    sd_err_clear(&err);
    sd_buf_reset(out);
    sd_status st = sd_job_control_get(job, what, query, out, &err);
    if (st != SD_OK) {
        fail_msg("%s: %s", what, sd_err_msg(&err));
    }
}

/* The integer after "key": in a JSON document (INT64_MIN when absent). */
static int64_t json_int(const char *doc, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *at = strstr(doc, pat);
    return at != NULL ? strtoll(at + strlen(pat), NULL, 10) : INT64_MIN;
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) {
        n++;
    }
    return n;
}

/*
 * The TopologyTestDriver-style run on srv: paused at the start; svc (NULL: the clicks are
 * scripted) is fed while the job rests; step 0 plays the clicks, 59 minutes (no timeout,
 * alice's state, two timers), 2 minutes (both timeouts), resume; the job must end DONE.
 */
static void run_paused(server *srv, sd_teststream_service *svc, const char *name)
{
    sd_err err;
    sd_err_clear(&err);
    run_arg a = { .p = build(name, svc != NULL ? sd_teststream_service_endpoint(svc) : NULL),
                  .endpoint = srv->endpoint,
                  .job_name = name,
                  .paused = true };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_thread, &a), 0);
    sd_job_control *job = NULL;
    sd_status st = sd_job_control_open(srv->web, name, 60000, &job, &err);
    if (st != SD_OK) {
        fail_msg("open: %s", sd_err_msg(&err));
    }
    /* A live job is reading the service before anything is fed. */
    if (svc != NULL && sd_teststream_service_wait_readers(svc, 1, 60000, &err) != SD_OK) {
        fail_msg("%s", sd_err_msg(&err));
    }
    sd_buf doc;
    sd_buf_init(&doc, 0);
    get(job, "pause", NULL, &doc);
    assert_non_null(strstr((const char *)doc.data, "\"paused\":true"));
    assert_non_null(strstr((const char *)doc.data, "\"at_rest\":true"));
    char out_name[128], clicks_name[128];
    /* The timeouts' lines as the runner sees them: the assertion's input (tagged). */
    if (!pcoll_named((const char *)doc.data, "Check/Tag", out_name, sizeof(out_name))) {
        fail_msg("no Check/Tag PCollection in the job's status");
    }
    if (!pcoll_named((const char *)doc.data, "Clicks", clicks_name, sizeof(clicks_name))) {
        fail_msg("no Clicks PCollection in the job's status");
    }
    char q[256], qc[256];
    snprintf(q, sizeof(q), "pcollection=%s", out_name);
    snprintf(qc, sizeof(qc), "pcollection=%s", clicks_name);
    int64_t clock0 = json_int((const char *)doc.data, "clock_ms");
    assert_true(clock0 != INT64_MIN);
    get(job, "elements", qc, &doc);
    assert_null(strstr((const char *)doc.data, "alice"));

    /* The clicks, fed live while the job rests, then played: events of no processing time. */
    if (svc != NULL) {
        feed_clicks(svc);
    }
    assert_int_equal(sd_job_control_step_for(job, 0, &err), SD_OK);
    get(job, "elements", qc, &doc);
    assert_int_equal(count((const char *)doc.data, "\"alice\""), 2);
    assert_int_equal(count((const char *)doc.data, "\"bob\""), 1);
    get(job, "elements", q, &doc);
    assert_int_equal(count((const char *)doc.data, "timed out"), 0);
    /* 59 minutes: no timeout yet. */
    assert_int_equal(sd_job_control_step_for(job, 59 * MINUTE, &err), SD_OK);
    get(job, "elements", q, &doc);
    assert_int_equal(count((const char *)doc.data, "timed out"), 0);
    /* Nothing was due: the clock has not jumped. */
    get(job, "pause", NULL, &doc);
    assert_int_equal(json_int((const char *)doc.data, "clock_ms"), clock0);
    get(job, "state", "stage=Sessionize&key=alice", &doc);
    /* alice's count: varint 2 ("02") in one of her cells. */
    assert_non_null(strstr((const char *)doc.data, "\"value_hex\":\"02\""));
    assert_null(strstr((const char *)doc.data, "\"bob\""));
    get(job, "timers", "stage=Sessionize", &doc);
    assert_int_equal(count((const char *)doc.data, "\"domain\":\"processing\""), 2);
    /* A PCollection name travels escaped in the query ('/', ' ', '&' included): an unknown
     * one is refused by its whole name, and the job has not moved. */
    st = sd_job_control_step_to_watermark(job, "No such/PCollection & more", 0, &err);
    assert_int_equal(st, SD_ENOTFOUND);
    if (strstr(sd_err_msg(&err), "no PCollection \\\"No such/PCollection & more\\\"") == NULL) {
        fail_msg("the refusal does not name the whole PCollection: %s", sd_err_msg(&err));
    }
    sd_err_clear(&err);
    get(job, "elements", q, &doc);
    assert_int_equal(count((const char *)doc.data, "timed out"), 0);
    /* 2 more minutes: both timeouts fire. */
    assert_int_equal(sd_job_control_step_for(job, 2 * MINUTE, &err), SD_OK);
    get(job, "pause", NULL, &doc);
    bool ended = strstr((const char *)doc.data, "\"state\":\"DONE\"") != NULL;
    if (!ended) {
        get(job, "elements", q, &doc);
        assert_int_equal(count((const char *)doc.data, "timed out"), 2);
        assert_non_null(strstr((const char *)doc.data, "alice timed out: 2"));
        assert_non_null(strstr((const char *)doc.data, "bob timed out: 1"));
        assert_int_equal(sd_job_control_resume(job, &err), SD_OK);
    }
    sd_job_control_close(job);
    pthread_join(th, NULL);
    if (a.st != SD_OK) {
        fail_msg("paused run %s: %s", name, sd_err_msg(&a.err));
    }
    sd_pipeline_destroy(a.p);
    sd_buf_deinit(&doc);
}

/* The worked example, its clicks fed live; then the same pipeline unpaused reads the same
 * (ended) stream from its start and gives the same output. */
static void test_paused_timeout_live(void **state)
{
    (void)state;
    server srv;
    server_start(&srv);
    sd_err err;
    sd_err_clear(&err);
    /* The service outlives the coders' pipeline: it keeps its own reference. */
    sd_pipeline *cp = sd_pipeline_create("coders");
    sd_teststream_service *svc = NULL;
    sd_status st = sd_teststream_service_start(
        sd_pcoder_kv(cp, sd_pcoder_string(cp), sd_pcoder_varint(cp)), NULL, 0, &svc, &err);
    if (st != SD_OK) {
        fail_msg("TestStreamService: %s", sd_err_msg(&err));
    }
    sd_pipeline_destroy(cp);
    run_paused(&srv, svc, "pause-c");

    run_arg u = { .p = build("unpaused-c", sd_teststream_service_endpoint(svc)),
                  .endpoint = srv.endpoint,
                  .job_name = "unpaused-c" };
    run_thread(&u);
    if (u.st != SD_OK) {
        fail_msg("unpaused run: %s", sd_err_msg(&u.err));
    }
    assert_int_equal(sd_teststream_service_n_events(svc), 2);
    sd_pipeline_destroy(u.p);
    sd_teststream_service_stop(svc);
    server_stop(&srv);
}

/* The same steps over a scripted TestStream (the gate in front of a source that is always
 * ready, where the live one waits for its service). */
static void test_paused_timeout_scripted(void **state)
{
    (void)state;
    server srv;
    server_start(&srv);
    run_paused(&srv, NULL, "pause-c-scripted");
    server_stop(&srv);
}

int main(int argc, char **argv)
{
    int code;
    if (sd_register_group_fn("pause:clicks", clicks) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paused_timeout_live),
        cmocka_unit_test(test_paused_timeout_scripted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
