/*
 * sundialctl: pause, step and inspect a test-mode job, over the server's HTTP JSON API
 * (/api/jobs/ID/..., runner/exec/exec_pause.c), which the web UI serves:
 *
 *   sundialctl [--web URL] pause JOB [--at TIME | --before-event]
 *   sundialctl [--web URL] step JOB [--events N | --for DURATION]
 *   sundialctl [--web URL] step JOB --watermark TIME --pcollection P
 *   sundialctl [--web URL] resume JOB
 *   sundialctl [--web URL] inspect JOB          the gate, the clock, stage watermarks
 *   sundialctl [--web URL] timers JOB [--stage S]
 *   sundialctl [--web URL] user-state JOB --stage S [--key K | --key-hex HEX]
 *   sundialctl [--web URL] elements JOB --pcollection P
 *
 * The web UI's URL defaults to $SUNDIAL_WEB, else http://127.0.0.1:8074/ (Prism's web port,
 * which `sundial` serves by default; `sundial serve --web_port N` turns it on). step waits
 * until the job rests again (or ends), printing its status then. Answers print as the server's
 * JSON, one document a line. Exit status: 0, 1 when the server refused (its message on
 * stderr), 2 for usage errors. Plain HTTP/1.1 over a TCP socket (runner/base/http.h, the
 * client the C SDK's job control helper uses too): nothing beyond the URL.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner/base/buf.h"
#include "runner/base/http.h"

int sundialctl_pause_main(const char *web, int argc, char **argv);

/* Appends that cannot fail the command midway: out of memory ends it (a few KB at most). */
static void put(sd_buf *b, const void *p, size_t n)
{
    if (sd_buf_append(b, p, n) != SD_OK) {
        fprintf(stderr, "sundialctl: out of memory\n");
        exit(1);
    }
}

static void put_byte(sd_buf *b, uint8_t c)
{
    put(b, &c, 1);
}

static void put_escaped(sd_buf *out, const char *s)
{
    if (sd_http_put_escaped(out, s) != SD_OK) {
        fprintf(stderr, "sundialctl: out of memory\n");
        exit(1);
    }
}

/* One request (runner/base/http.h); OUT: status, body (NUL-terminated). 0, or 1 after
 * printing why. */
static int http(const char *web, const char *method, const char *path, int *status, sd_buf *body)
{
    sd_http_target t;
    sd_err err;
    sd_err_clear(&err);
    if (sd_http_target_parse(web, &t, &err) != SD_OK ||
        sd_http_request(&t, method, path, status, body, &err) != SD_OK) {
        fprintf(stderr, "sundialctl: %s\n", sd_err_msg(&err));
        return 1;
    }
    return 0;
}

/* Call ACTION of job with the query; print the answer; 0 or 1. OUT: body (may be NULL). */
static int call(const char *web,
                const char *method,
                const char *job,
                const char *action,
                const char *query,
                sd_buf *keep)
{
    sd_buf path, body;
    sd_buf_init(&path, 0);
    sd_buf_init(&body, 0);
    put(&path, "/api/jobs/", 10);
    put_escaped(&path, job);
    put_byte(&path, '/');
    put(&path, action, strlen(action));
    if (query != NULL && query[0] != '\0') {
        put_byte(&path, '?');
        put(&path, query, strlen(query));
    }
    put_byte(&path, '\0');
    int status = 0;
    int rc = http(web, method, (const char *)path.data, &status, &body);
    if (rc == 0) {
        const char *text = body.data != NULL ? (const char *)body.data : "";
        if (status != 200) {
            fprintf(stderr, "sundialctl: %s %s: HTTP %d: %s\n", action, job, status, text);
            rc = 1;
        } else if (keep != NULL) {
            put(keep, text, strlen(text) + 1);
        } else {
            printf("%s\n", text);
        }
    }
    sd_buf_deinit(&path);
    sd_buf_deinit(&body);
    return rc;
}

/* Add name=value (escaped) to the query. */
static void add_param(sd_buf *q, const char *name, const char *value)
{
    if (q->len > 0) {
        put_byte(q, '&');
    }
    put(q, name, strlen(name));
    put_byte(q, '=');
    put_escaped(q, value);
}

/* After a step: poll the status until the job rests or ends; print it. */
static int wait_rest(const char *web, const char *job)
{
    for (int i = 0; i < 6000; i++) {
        sd_buf st;
        sd_buf_init(&st, 0);
        if (call(web, "GET", job, "pause", NULL, &st) != 0) {
            sd_buf_deinit(&st);
            return 1;
        }
        const char *t = (const char *)st.data;
        bool rest = strstr(t, "\"at_rest\":true") != NULL || strstr(t, "\"state\":\"DONE\"") ||
                    strstr(t, "\"state\":\"FAILED\"") || strstr(t, "\"state\":\"CANCELLED\"") ||
                    strstr(t, "\"state\":\"DRAINED\"");
        if (rest) {
            printf("%s\n", t);
            sd_buf_deinit(&st);
            return 0;
        }
        sd_buf_deinit(&st);
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "sundialctl: job %s did not come to rest within 120 s\n", job);
    return 1;
}

int sundialctl_pause_main(const char *web, int argc, char **argv)
{
    /* argv[0] = the command, argv[1] = the job, then --flag VALUE pairs. */
    const char *cmd = argv[0];
    if (argc < 2) {
        fprintf(stderr, "sundialctl: %s expects a job id\n", cmd);
        return 2;
    }
    const char *job = argv[1];
    static const char *const flags[][2] = {
        { "--at", "at" },
        { "--events", "events" },
        { "--for", "for" },
        { "--watermark", "watermark" },
        { "--pcollection", "pcollection" },
        { "--stage", "stage" },
        { "--key", "key" },
        { "--key-hex", "key_hex" },
    };
    sd_buf q;
    sd_buf_init(&q, 0);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--before-event") == 0) {
            add_param(&q, "before", "event");
            continue;
        }
        const char *name = NULL;
        for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]) && name == NULL; k++) {
            if (strcmp(argv[i], flags[k][0]) == 0) {
                name = flags[k][1];
            }
        }
        if (name == NULL || i + 1 >= argc) {
            fprintf(stderr, "sundialctl: %s: unexpected argument \"%s\"%s\n", cmd, argv[i],
                    name != NULL ? " (it needs a value)" : "");
            sd_buf_deinit(&q);
            return 2;
        }
        add_param(&q, name, argv[++i]);
    }
    put_byte(&q, '\0');
    const char *query = (const char *)q.data;
    int rc;
    if (strcmp(cmd, "pause") == 0 || strcmp(cmd, "resume") == 0) {
        rc = call(web, "POST", job, cmd, query, NULL);
    } else if (strcmp(cmd, "step") == 0) {
        sd_buf ignored;
        sd_buf_init(&ignored, 0);
        rc = call(web, "POST", job, "step", query, &ignored);
        sd_buf_deinit(&ignored);
        if (rc == 0) {
            rc = wait_rest(web, job);
        }
    } else if (strcmp(cmd, "inspect") == 0) {
        rc = call(web, "GET", job, "pause", query, NULL);
    } else if (strcmp(cmd, "user-state") == 0) {
        rc = call(web, "GET", job, "state", query, NULL);
    } else {
        rc = call(web, "GET", job, cmd, query, NULL); /* timers, elements */
    }
    sd_buf_deinit(&q);
    return rc;
}
