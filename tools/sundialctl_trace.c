/*
 * sundialctl trace: a job's time trace (docs/trace.md).
 *
 *   sundialctl trace JOB [--stage S] [--kind K[,K...]]
 *   sundialctl trace --diff A B [--control]
 *
 * The trace is the job artifact sundial:artifact:trace:v1 (ArtifactRetrievalService.
 * GetArtifact on the job port, type_payload = the job id): JSON lines, one record a line.
 * On a terminal it is printed as a table (step, processing time, kind, stage, what); piped,
 * as the JSON lines themselves (filtered).
 *
 * --diff compares two traces, each a job id or a file of JSON lines saved from `trace` (a
 * path that exists is read as a file): wall times are left out of both (they are the only
 * thing two runs of the same test job may differ in), then the lines are compared. Identical:
 * "traces are identical (N records)" and exit 0. Different: the first and last differing
 * region as "-" (A) and "+" (B) lines, and exit 1. Trouble (unreadable input): exit 2.
 * The pause gate's records (kinds pause and step) say how a person or a test drove the job,
 * not what its time did: a paused-and-stepped run takes the unpaused run's time steps, so
 * --diff leaves them out and numbers the other records again (seq) before comparing; with
 * --control they are compared too, as they are.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "org/apache/beam/model/job_management/v1/beam_artifact_api.pb-c.h"
#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/time.h"
#include "runner/base/vec.h"
#include "runner/transport/rpc.h"

#define TRACE_URN "sundial:artifact:trace:v1"
#define ARTIFACT_PATH \
    "/org.apache.beam.model.job_management.v1.ArtifactRetrievalService/GetArtifact"
#define DIFF_SHOW_MAX 200 /* lines of each side shown per differing region */

int sundialctl_trace(sd_rpc *rpc, sd_rpc_channel *ch, int argc, char **argv);

typedef struct fetch_state {
    bool done;
    sd_rpc_code code;
    char message[1024];
    sd_buf data;
    bool oom;
} fetch_state;

static void fetch_on_message(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    fetch_state *fs = ctx;
    (void)s;
    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactResponse *r =
        org__apache__beam__model__job_management__v1__get_artifact_response__unpack(NULL, msg.len,
                                                                                    msg.ptr);
    if (r == NULL) {
        return;
    }
    if (sd_buf_append(&fs->data, r->data.data, r->data.len) != SD_OK) {
        fs->oom = true;
    }
    org__apache__beam__model__job_management__v1__get_artifact_response__free_unpacked(r, NULL);
}

static void fetch_on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    fetch_state *fs = ctx;
    (void)s;
    fs->code = code;
    snprintf(fs->message, sizeof(fs->message), "%s", message);
    fs->done = true;
}

/* The job's trace as JSON lines into out. 0, or 1 after printing why. */
static int fetch_trace(sd_rpc *rpc, sd_rpc_channel *ch, const char *job, sd_buf *out)
{
    Org__Apache__Beam__Model__Pipeline__V1__ArtifactInformation a =
        ORG__APACHE__BEAM__MODEL__PIPELINE__V1__ARTIFACT_INFORMATION__INIT;
    Org__Apache__Beam__Model__JobManagement__V1__GetArtifactRequest req =
        ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__GET_ARTIFACT_REQUEST__INIT;
    a.type_urn = (char *)TRACE_URN;
    a.type_payload.data = (uint8_t *)job;
    a.type_payload.len = strlen(job);
    req.artifact = &a;
    fetch_state fs = { 0 };
    sd_rpc_stream_handler h = { fetch_on_message, fetch_on_close, &fs };
    sd_rpc_stream *s = NULL;
    sd_err err = { 0 };
    sd_buf packed;
    sd_buf_init(&packed, 0);
    sd_buf_init(&fs.data, 0);
    size_t n = protobuf_c_message_get_packed_size(&req.base);
    if (sd_buf_reserve(&packed, n) != SD_OK) {
        fprintf(stderr, "sundialctl: out of memory\n");
        return 1;
    }
    protobuf_c_message_pack(&req.base, packed.data);
    packed.len = n;
    if (sd_rpc_stream_open(ch, ARTIFACT_PATH, NULL, 0, &h, &s, &err) != SD_OK ||
        sd_rpc_stream_send(s, sd_buf_bytes(&packed)) != SD_OK) {
        fprintf(stderr, "sundialctl: %s\n", sd_err_msg(&err));
        sd_buf_deinit(&packed);
        return 1;
    }
    sd_rpc_stream_half_close(s);
    sd_buf_deinit(&packed);
    while (!fs.done) {
        ev_run(sd_rpc_loop(rpc), EVRUN_ONCE);
    }
    if (fs.code != SD_RPC_OK || fs.oom) {
        fprintf(stderr, "sundialctl: the trace of job %s: %s (gRPC code %d)\n", job,
                fs.oom ? "out of memory" : fs.message, (int)fs.code);
        sd_buf_deinit(&fs.data);
        return 1;
    }
    *out = fs.data;
    return 0;
}

/* A file's bytes into out. 0, or 2 after printing why. */
static int read_file(const char *path, sd_buf *out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "sundialctl: cannot open %s: %s\n", path, strerror(errno));
        return 2;
    }
    sd_buf_init(out, 0);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (sd_buf_append(out, chunk, n) != SD_OK) {
            fclose(f);
            fprintf(stderr, "sundialctl: out of memory reading %s\n", path);
            return 2;
        }
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        fprintf(stderr, "sundialctl: cannot read %s\n", path);
        return 2;
    }
    return 0;
}

/* Split data into lines (NUL-terminated in place; data gets a final NUL). */
static bool split_lines(sd_buf *data, sd_vec *lines)
{
    if (sd_buf_append_byte(data, '\0') != SD_OK) {
        return false;
    }
    char *p = (char *)data->data;
    char *end = p + data->len - 1;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl != NULL) {
            *nl = '\0';
        }
        if (*p != '\0' && sd_vec_push(lines, &p) != SD_OK) {
            return false;
        }
        p = nl != NULL ? nl + 1 : end;
    }
    return true;
}

/* A processing time since the job started: "+0", "+250 ms", "+12 min", "+1 h 30 min", ... */
static void fmt_rel(int64_t ms, char *out, size_t n)
{
    const int64_t s = 1000, m = 60 * s, h = 60 * m, d = 24 * h;
    uint64_t v = ms < 0 ? 0 - (uint64_t)ms : (uint64_t)ms;
    const char *sign = ms < 0 ? "-" : "+";
    if (v == 0) {
        snprintf(out, n, "+0");
    } else if (v < (uint64_t)s || v % (uint64_t)s != 0) {
        snprintf(out, n, "%s%llu ms", sign, (unsigned long long)v);
    } else if (v < (uint64_t)m) {
        snprintf(out, n, "%s%llu s", sign, (unsigned long long)(v / s));
    } else if (v < (uint64_t)h) {
        snprintf(out, n, "%s%llu min %llu s", sign, (unsigned long long)(v / m),
                 (unsigned long long)(v % m / s));
    } else if (v < (uint64_t)d) {
        snprintf(out, n, "%s%llu h %llu min", sign, (unsigned long long)(v / h),
                 (unsigned long long)(v % h / m));
    } else {
        snprintf(out, n, "%s%llu d %llu h", sign, (unsigned long long)(v / d),
                 (unsigned long long)(v % d / h));
    }
    /* "+12 min 0 s" reads better as "+12 min" */
    size_t len = strlen(out);
    if (len > 4 && (strcmp(out + len - 4, " 0 s") == 0 || strcmp(out + len - 4, " 0 h") == 0)) {
        out[len - 4] = '\0';
    } else if (len > 6 && strcmp(out + len - 6, " 0 min") == 0) {
        out[len - 6] = '\0';
    }
}

/* A record's time field as text: "-inf", "+inf", a date for absolute event times, or a
 * processing time since the job started (relative). */
static void fmt_field_time(const json_t *v, bool relative, char *out, size_t n)
{
    sd_time t;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        long long big = strtoll(s, &end, 10);
        if (*s == '\0' || *end != '\0') {
            snprintf(out, n, "%s", s); /* -inf, +inf */
            return;
        }
        t = (sd_time)big;
    } else if (json_is_integer(v)) {
        t = (sd_time)json_integer_value(v);
    } else {
        snprintf(out, n, "-");
        return;
    }
    if (relative) {
        fmt_rel(t, out, n);
    } else if (t >= SD_TIME_GLOBAL_MAX) {
        snprintf(out, n, "end of global window");
    } else {
        sd_time_format(t, out, n);
    }
}

static const char *jget_str(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A pause record: why the gate stopped the job, and what it holds back. */
static void describe_pause(const json_t *r, const char *cause, char *out, size_t n)
{
    char t[64], t2[64], held[96];
    fmt_field_time(json_object_get(r, "t"), true, t, sizeof(t));
    fmt_field_time(json_object_get(r, "t2"), true, t2, sizeof(t2));
    if (json_integer_value(json_object_get(r, "count")) == 1) {
        snprintf(held, sizeof(held), "TestStream event #%lld",
                 (long long)json_integer_value(json_object_get(r, "index")));
    } else {
        snprintf(held, sizeof(held), "the clock's jump to %s", t);
    }
    const char *c = cause != NULL ? cause : "?";
    if (strcmp(c, "start") == 0) {
        snprintf(out, n, "paused from the start, before %s", held);
    } else if (strcmp(c, "by_hand") == 0) {
        snprintf(out, n, "paused by hand, before %s", held);
    } else if (strcmp(c, "at_time") == 0) {
        snprintf(out, n, "paused at the pause time %s, before %s", t2, held);
    } else if (strcmp(c, "before_event") == 0) {
        snprintf(out, n, "paused before the next event, %s", held);
    } else if (strcmp(c, "step_done") == 0) {
        snprintf(out, n, "the step is done: at rest before %s", held);
    } else {
        snprintf(out, n, "paused (%s), before %s", c, held);
    }
}

/* A step record: what was asked of the gate. */
static void describe_step(const json_t *r, const char *cause, char *out, size_t n)
{
    const char *c = cause != NULL ? cause : "?";
    json_int_t count = json_integer_value(json_object_get(r, "count"));
    char t[64], t2[64];
    if (strcmp(c, "events") == 0) {
        snprintf(out, n, "step: the next %lld time step(s)", (long long)count);
    } else if (strcmp(c, "for") == 0) {
        char d[64];
        fmt_rel((int64_t)count, d, sizeof(d));
        fmt_field_time(json_object_get(r, "t"), true, t, sizeof(t));
        fmt_field_time(json_object_get(r, "t2"), true, t2, sizeof(t2));
        snprintf(out, n, "step: for %s of processing time, %s -> %s", d[0] == '+' ? d + 1 : d, t2,
                 t);
    } else if (strcmp(c, "watermark") == 0) {
        fmt_field_time(json_object_get(r, "t"), false, t, sizeof(t));
        fmt_field_time(json_object_get(r, "t2"), false, t2, sizeof(t2));
        snprintf(out, n, "step: while the watermark is behind %s (now %s)", t, t2);
    } else if (strcmp(c, "resume") == 0) {
        snprintf(out, n, "resume: the gate opens for good");
    } else {
        snprintf(out, n, "step (%s)", c);
    }
}

/* What a record says, in a few words. */
static void describe(const json_t *r, char *out, size_t n)
{
    const char *kind = jget_str(r, "kind");
    const char *cause = jget_str(r, "cause");
    const char *name = jget_str(r, "name");
    char t[64], t2[64];
    bool pt_timer = cause != NULL && strcmp(cause, "processing_time") == 0;
    bool clock = kind != NULL && strcmp(kind, "clock") == 0;
    fmt_field_time(json_object_get(r, "t"), clock || pt_timer, t, sizeof(t));
    fmt_field_time(json_object_get(r, "t2"), clock, t2, sizeof(t2));
    json_int_t index = json_integer_value(json_object_get(r, "index"));
    json_int_t count = json_integer_value(json_object_get(r, "count"));
    if (kind == NULL) {
        snprintf(out, n, "?");
    } else if (strcmp(kind, "pause") == 0) {
        describe_pause(r, cause, out, n);
    } else if (strcmp(kind, "step") == 0) {
        describe_step(r, cause, out, n);
    } else if (strcmp(kind, "pane") == 0) {
        snprintf(out, n, "%s pane #%lld, %lld value(s), at %s", cause != NULL ? cause : "?",
                 (long long)index, (long long)count, t);
    } else if (strcmp(kind, "teststream") == 0) {
        snprintf(out, n, "event #%lld: %s%s%s", (long long)index, cause != NULL ? cause : "?",
                 cause != NULL && strcmp(cause, "elements") == 0 ? "" : " -> ",
                 cause != NULL && strcmp(cause, "elements") == 0 ? "" : t);
    } else if (strncmp(kind, "timer_", 6) == 0) {
        snprintf(out, n, "%s %s at %s (hold %s)", name != NULL ? name : "?",
                 cause != NULL ? cause : "", t, t2);
    } else if (strcmp(kind, "late") == 0) {
        snprintf(out, n, "%s: timestamp %s, watermark %s", cause != NULL ? cause : "late", t, t2);
    } else if (strcmp(kind, "cut") == 0) {
        snprintf(out, n, "the trace's cap was reached: nothing after step %lld recorded",
                 (long long)count);
    } else {
        snprintf(out, n, "%s -> %s%s%s", t2, t, cause != NULL ? " (" : "",
                 cause != NULL ? cause : "");
        if (cause != NULL && strlen(out) + 2 < n) {
            strcat(out, ")");
        }
    }
}

static bool want(const json_t *r, const char *stage, const char *kinds)
{
    if (stage != NULL) {
        const char *s = jget_str(r, "stage");
        if (s == NULL || strcmp(s, stage) != 0) {
            return false;
        }
    }
    if (kinds != NULL) {
        const char *k = jget_str(r, "kind");
        size_t kl = k != NULL ? strlen(k) : 0;
        for (const char *p = kinds; k != NULL && *p != '\0';) {
            const char *comma = strchr(p, ',');
            size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
            if (n == kl && strncmp(p, k, n) == 0) {
                return true;
            }
            p += n + (comma != NULL);
        }
        return false;
    }
    return true;
}

static int show(sd_buf *data, const char *stage, const char *kinds)
{
    sd_vec lines;
    sd_vec_init(&lines, sizeof(char *));
    if (!split_lines(data, &lines)) {
        fprintf(stderr, "sundialctl: out of memory\n");
        sd_vec_deinit(&lines);
        return 1;
    }
    bool table = isatty(STDOUT_FILENO) != 0;
    if (table) {
        printf("%7s  %-14s  %-11s  %-24s  %s\n", "STEP", "PROC. TIME", "KIND", "STAGE", "WHAT");
    }
    size_t shown = 0;
    for (size_t i = 0; i < lines.len; i++) {
        const char *line = *SD_VEC_AT(&lines, char *, i);
        json_t *r = json_loads(line, 0, NULL);
        if (r == NULL || !json_is_object(r)) {
            fprintf(stderr, "sundialctl: line %zu of the trace is not a JSON object\n", i + 1);
            json_decref(r);
            continue;
        }
        if (want(r, stage, kinds)) {
            shown++;
            if (table) {
                char what[512], clk[32];
                const char *st = jget_str(r, "stage");
                const char *pc = jget_str(r, "pcoll");
                describe(r, what, sizeof(what));
                fmt_rel((int64_t)json_integer_value(json_object_get(r, "clock")), clk, sizeof(clk));
                printf("%7lld  %-14s  %-11s  %-24s  %s\n",
                       (long long)json_integer_value(json_object_get(r, "seq")), clk,
                       jget_str(r, "kind") != NULL ? jget_str(r, "kind") : "?",
                       st != NULL   ? st
                       : pc != NULL ? pc
                                    : "-",
                       what);
            } else {
                printf("%s\n", line);
            }
        }
        json_decref(r);
    }
    if (table) {
        printf("%zu of %zu records\n", shown, lines.len);
    }
    sd_vec_deinit(&lines);
    return 0;
}

static bool is_control_kind(const char *kind)
{
    return kind != NULL && (strcmp(kind, "pause") == 0 || strcmp(kind, "step") == 0);
}

/* A trace from a file (when the path exists) or a job; its lines without "wall", canonical.
 * Without control, the pause and step records are left out (counted in *left_out) and the
 * others numbered again from 0. */
static int load_for_diff(sd_rpc *rpc,
                         sd_rpc_channel *ch,
                         const char *what,
                         bool control,
                         sd_vec *out,
                         size_t *left_out)
{
    sd_buf data;
    int rc = access(what, F_OK) == 0 ? read_file(what, &data)
                                     : (fetch_trace(rpc, ch, what, &data) != 0 ? 2 : 0);
    if (rc != 0) {
        return rc;
    }
    sd_vec lines;
    sd_vec_init(&lines, sizeof(char *));
    if (!split_lines(&data, &lines)) {
        fprintf(stderr, "sundialctl: out of memory\n");
        rc = 2;
    }
    for (size_t i = 0; rc == 0 && i < lines.len; i++) {
        json_error_t jerr;
        json_t *r = json_loads(*SD_VEC_AT(&lines, char *, i), 0, &jerr);
        if (r == NULL || !json_is_object(r)) {
            fprintf(stderr, "sundialctl: %s, line %zu: not a trace record (%s)\n", what, i + 1,
                    r == NULL ? jerr.text : "not an object");
            json_decref(r);
            rc = 2;
            break;
        }
        json_object_del(r, "wall");
        if (!control && is_control_kind(jget_str(r, "kind"))) {
            (*left_out)++;
            json_decref(r);
            continue;
        }
        if (!control && json_object_get(r, "seq") != NULL &&
            json_object_set_new(r, "seq", json_integer((json_int_t)out->len)) != 0) {
            json_decref(r);
            fprintf(stderr, "sundialctl: out of memory\n");
            rc = 2;
            break;
        }
        char *text = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(r);
        if (text == NULL || sd_vec_push(out, &text) != SD_OK) {
            free(text);
            fprintf(stderr, "sundialctl: out of memory\n");
            rc = 2;
        }
    }
    sd_vec_deinit(&lines);
    sd_buf_deinit(&data);
    return rc;
}

static void free_lines(sd_vec *v)
{
    for (size_t i = 0; i < v->len; i++) {
        free(*SD_VEC_AT(v, char *, i));
    }
    sd_vec_deinit(v);
}

static int diff(sd_rpc *rpc, sd_rpc_channel *ch, const char *a, const char *b, bool control)
{
    sd_vec la, lb;
    sd_vec_init(&la, sizeof(char *));
    sd_vec_init(&lb, sizeof(char *));
    size_t left_a = 0, left_b = 0;
    int rc = load_for_diff(rpc, ch, a, control, &la, &left_a);
    if (rc == 0) {
        rc = load_for_diff(rpc, ch, b, control, &lb, &left_b);
    }
    char note[160] = "";
    if (left_a + left_b > 0) {
        snprintf(note, sizeof(note),
                 "; pause and step records left out: %zu and %zu, --control compares them", left_a,
                 left_b);
    }
    if (rc != 0) {
        free_lines(&la);
        free_lines(&lb);
        return rc;
    }
    size_t pre = 0;
    while (pre < la.len && pre < lb.len &&
           strcmp(*SD_VEC_AT(&la, char *, pre), *SD_VEC_AT(&lb, char *, pre)) == 0) {
        pre++;
    }
    size_t suf = 0;
    while (suf < la.len - pre && suf < lb.len - pre &&
           strcmp(*SD_VEC_AT(&la, char *, la.len - 1 - suf),
                  *SD_VEC_AT(&lb, char *, lb.len - 1 - suf)) == 0) {
        suf++;
    }
    if (pre == la.len && pre == lb.len) {
        printf("traces are identical (%zu records; wall times not compared%s)\n", la.len, note);
        free_lines(&la);
        free_lines(&lb);
        return 0;
    }
    printf("--- %s\n+++ %s\n", a, b);
    if (note[0] != '\0') {
        printf("(%s)\n", note + 2);
    }
    printf("@@ -%zu,%zu +%zu,%zu @@ (lines; %zu the same before, %zu after)\n", pre + 1,
           la.len - pre - suf, pre + 1, lb.len - pre - suf, pre, suf);
    for (size_t i = pre; i < la.len - suf; i++) {
        if (i - pre == DIFF_SHOW_MAX) {
            printf("- ... %zu more\n", la.len - suf - i);
            break;
        }
        printf("-%s\n", *SD_VEC_AT(&la, char *, i));
    }
    for (size_t i = pre; i < lb.len - suf; i++) {
        if (i - pre == DIFF_SHOW_MAX) {
            printf("+ ... %zu more\n", lb.len - suf - i);
            break;
        }
        printf("+%s\n", *SD_VEC_AT(&lb, char *, i));
    }
    free_lines(&la);
    free_lines(&lb);
    return 1;
}

/* argv[0] is "trace". */
int sundialctl_trace(sd_rpc *rpc, sd_rpc_channel *ch, int argc, char **argv)
{
    const char *job = NULL, *stage = NULL, *kinds = NULL;
    const char *diff_a = NULL, *diff_b = NULL;
    bool control = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--diff") == 0 && i + 2 < argc) {
            diff_a = argv[++i];
            diff_b = argv[++i];
        } else if (strcmp(a, "--control") == 0) {
            control = true;
        } else if (strcmp(a, "--stage") == 0 && i + 1 < argc) {
            stage = argv[++i];
        } else if (strncmp(a, "--stage=", 8) == 0) {
            stage = a + 8;
        } else if (strcmp(a, "--kind") == 0 && i + 1 < argc) {
            kinds = argv[++i];
        } else if (strncmp(a, "--kind=", 7) == 0) {
            kinds = a + 7;
        } else if (a[0] != '-' && job == NULL) {
            job = a;
        } else {
            fprintf(stderr,
                    "sundialctl: trace: unexpected argument \"%s\"\n"
                    "usage: sundialctl trace JOB [--stage S] [--kind K[,K...]]\n"
                    "       sundialctl trace --diff A B [--control]   (job ids or saved files)\n",
                    a);
            return 2;
        }
    }
    static const char *const known[] = { "clock",      "wm_in",       "wm_out",     "hold",
                                         "timer_set",  "timer_clear", "timer_fire", "pane",
                                         "teststream", "late",        "cut",        "pause",
                                         "step" };
    for (const char *p = kinds; p != NULL && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        bool ok = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]) && !ok; k++) {
            ok = strlen(known[k]) == n && strncmp(known[k], p, n) == 0;
        }
        if (!ok) {
            fprintf(stderr,
                    "sundialctl: trace --kind: \"%.*s\" is not a kind (clock, wm_in, wm_out, "
                    "hold, timer_set, timer_clear, timer_fire, pane, teststream, late, cut, "
                    "pause, step)\n",
                    (int)n, p);
            return 2;
        }
        p += n + (comma != NULL);
    }
    if (diff_a != NULL) {
        if (job != NULL || stage != NULL || kinds != NULL) {
            fprintf(stderr, "sundialctl: trace --diff takes two traces and nothing else\n");
            return 2;
        }
        return diff(rpc, ch, diff_a, diff_b, control);
    }
    if (control) {
        fprintf(stderr, "sundialctl: trace --control goes with --diff A B\n");
        return 2;
    }
    if (job == NULL) {
        fprintf(stderr, "sundialctl: trace expects a job id (or --diff A B)\n");
        return 2;
    }
    sd_buf data;
    if (fetch_trace(rpc, ch, job, &data) != 0) {
        return 1;
    }
    int rc = show(&data, stage, kinds);
    sd_buf_deinit(&data);
    return rc;
}
