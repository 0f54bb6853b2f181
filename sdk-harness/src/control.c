/*
 * Sundial C SDK: the job control helper (<sundial/control.h>): HTTP/1.1 requests to the
 * server's /api/jobs/ID/... JSON API (runner/exec/exec_pause.c has the API), through the
 * client in runner/base/http.h (sundialctl's time control commands use it too). The answers are
 * read with a few string searches for the fields the helper needs (the job's id, at_rest, the
 * state); whole documents go to the caller as JSON text.
 */
#include "sundial/control.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runner/base/alloc.h"
#include "runner/base/http.h"
#include "sundial/sundial.h"

struct sd_job_control {
    sd_http_target web;
    char id[128];
    int timeout_ms;
};

/* One request to path (runner/base/http.h); OUT: *status, body (NUL-terminated). */
static sd_status request(const sd_job_control *c,
                         const char *method,
                         const char *path,
                         int *status,
                         sd_buf *body,
                         sd_err *err)
{
    sd_status st = sd_http_request(&c->web, method, path, status, body, err);
    return st == SD_OK ? SD_OK : sd_err_prefix(err, "job control: ");
}

/* ACTION of the job; OUT: body (NUL-terminated). A non-200 answer is the error. */
static sd_status call(const sd_job_control *c,
                      const char *method,
                      const char *action,
                      const char *query,
                      sd_buf *body,
                      sd_err *err)
{
    char path[1024];
    int n = snprintf(path, sizeof(path), "/api/jobs/%s/%s%s%s", c->id, action,
                     query != NULL && query[0] != '\0' ? "?" : "", query != NULL ? query : "");
    if (n < 0 || (size_t)n >= sizeof(path)) {
        return sd_err_set(err, SD_EINVAL, "job control: the query for %s is too long", action);
    }
    int status = 0;
    sd_status st = request(c, method, path, &status, body, err);
    if (st == SD_OK && status != 200) {
        st = sd_err_set(err,
                        status == 404   ? SD_ENOTFOUND
                        : status == 409 ? SD_ESTATE
                                        : SD_EINVAL,
                        "job control: %s %s: HTTP %d: %s", method, action, status,
                        body->data != NULL ? (const char *)body->data : "");
    }
    return st;
}

static bool terminal(const char *doc)
{
    return strstr(doc, "\"state\":\"DONE\"") != NULL || strstr(doc, "\"state\":\"FAILED\"") ||
           strstr(doc, "\"state\":\"CANCELLED\"") || strstr(doc, "\"state\":\"DRAINED\"");
}

static void nap_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Until the job rests at its gate or has ended. */
static sd_status wait_rest(sd_job_control *c, sd_err *err)
{
    int64_t deadline = sd_mono_now_ms() + c->timeout_ms;
    for (;;) {
        sd_buf doc;
        sd_buf_init(&doc, 0);
        sd_status st = call(c, "GET", "pause", NULL, &doc, err);
        bool rest = st == SD_OK && (strstr((const char *)doc.data, "\"at_rest\":true") != NULL ||
                                    terminal((const char *)doc.data));
        sd_buf_deinit(&doc);
        if (st != SD_OK || rest) {
            return st;
        }
        if (sd_mono_now_ms() > deadline) {
            return sd_err_set(err, SD_EIO, "job control: job %s did not come to rest within %d ms",
                              c->id, c->timeout_ms);
        }
        nap_ms(20);
    }
}

/* The id of the newest job named name in the /api/jobs document, or false. */
static bool find_job(const char *doc, const char *name, char *id, size_t n)
{
    char pat[300];
    snprintf(pat, sizeof(pat), "\"name\":\"%s\"", name);
    const char *at = strstr(doc, pat);
    if (at == NULL) {
        return false;
    }
    const char *obj = at;
    while (obj > doc && *obj != '{') {
        obj--;
    }
    const char *idp = strstr(obj, "\"id\":\"");
    if (idp == NULL || idp > at) {
        return false;
    }
    idp += 6;
    size_t len = strcspn(idp, "\"");
    if (len == 0 || len >= n) {
        return false;
    }
    memcpy(id, idp, len);
    id[len] = '\0';
    return true;
}

sd_status sd_job_control_open(const char *web_url,
                              const char *job_name,
                              int timeout_ms,
                              sd_job_control **out,
                              sd_err *err)
{
    *out = NULL;
    if (web_url == NULL || job_name == NULL || strchr(job_name, '"') != NULL ||
        strlen(job_name) > 200) {
        return sd_err_set(err, SD_EINVAL,
                          "job control: a web UI URL and a plain job name are "
                          "needed");
    }
    sd_job_control *c = sd_calloc(1, sizeof(*c));
    if (c == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 60000;
    sd_status st = sd_http_target_parse(web_url, &c->web, err);
    if (st != SD_OK) {
        st = sd_err_prefix(err, "job control: ");
    }
    int64_t deadline = sd_mono_now_ms() + c->timeout_ms;
    bool found = false;
    while (st == SD_OK && !found) {
        sd_buf doc;
        sd_buf_init(&doc, 0);
        int status = 0;
        st = request(c, "GET", "/api/jobs", &status, &doc, err);
        found = st == SD_OK && status == 200 &&
                find_job((const char *)doc.data, job_name, c->id, sizeof(c->id));
        sd_buf_deinit(&doc);
        if (st == SD_OK && !found) {
            if (sd_mono_now_ms() > deadline) {
                st = sd_err_set(err, SD_ENOTFOUND, "job control: no job named \"%s\" at %s",
                                job_name, web_url);
            } else {
                nap_ms(20);
            }
        }
    }
    if (st == SD_OK) {
        st = wait_rest(c, err);
    }
    if (st != SD_OK) {
        sd_free(c);
        return st;
    }
    *out = c;
    return SD_OK;
}

const char *sd_job_control_id(const sd_job_control *c)
{
    return c != NULL ? c->id : NULL;
}

static sd_status
post_and_wait(sd_job_control *c, const char *action, const char *query, bool wait, sd_err *err)
{
    sd_buf body;
    sd_buf_init(&body, 0);
    sd_status st = call(c, "POST", action, query, &body, err);
    sd_buf_deinit(&body);
    return st == SD_OK && wait ? wait_rest(c, err) : st;
}

sd_status sd_job_control_step_events(sd_job_control *c, uint64_t n, sd_err *err)
{
    char q[64];
    snprintf(q, sizeof(q), "events=%llu", (unsigned long long)n);
    return post_and_wait(c, "step", q, true, err);
}

sd_status sd_job_control_step_for(sd_job_control *c, int64_t ms, sd_err *err)
{
    char q[64];
    snprintf(q, sizeof(q), "for=%lldms", (long long)ms);
    return ms < 0 ? sd_err_set(err, SD_EINVAL, "job control: a negative step")
                  : post_and_wait(c, "step", q, true, err);
}

sd_status sd_job_control_step_to_watermark(sd_job_control *c,
                                           const char *pcollection,
                                           sd_time watermark,
                                           sd_err *err)
{
    if (pcollection == NULL || pcollection[0] == '\0') {
        return sd_err_set(err, SD_EINVAL, "job control: a PCollection (id or name) is needed");
    }
    sd_buf q;
    sd_buf_init(&q, 0);
    sd_status st = sd_buf_printf(&q, "watermark=%lld&pcollection=", (long long)watermark);
    if (st == SD_OK) {
        st = sd_http_put_escaped(&q, pcollection); /* a name may hold '/', ' ', '&' */
    }
    if (st == SD_OK) {
        st = sd_buf_append_byte(&q, '\0');
    }
    st = st == SD_OK ? post_and_wait(c, "step", (const char *)q.data, true, err)
                     : sd_err_set(err, SD_ENOMEM, "out of memory");
    sd_buf_deinit(&q);
    return st;
}

sd_status sd_job_control_pause(sd_job_control *c, sd_err *err)
{
    return post_and_wait(c, "pause", NULL, true, err);
}

sd_status sd_job_control_resume(sd_job_control *c, sd_err *err)
{
    return post_and_wait(c, "resume", NULL, false, err);
}

sd_status
sd_job_control_get(sd_job_control *c, const char *what, const char *query, sd_buf *out, sd_err *err)
{
    return call(c, "GET", what, query, out, err);
}

void sd_job_control_close(sd_job_control *c)
{
    sd_free(c);
}
