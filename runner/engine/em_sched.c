/*
 * Sundial: engine: recording and replaying a job's schedule.
 *
 * What and why
 * ------------
 * Beam promises user code no particular bundling or order, so a pipeline that depends on one
 * passes on one run and fails on the next. The engine already makes every choice
 * deterministically for a given job, input, bundle shape, caps and schedule seed
 * (sd_em_config); what it did not do is say which choices it made. Here it does: at each
 * decision — an SDK bundle handed out, a TestStream event played, the synthetic clock jumping,
 * a bundle committed or failed, and (from the executor) a runner-initiated split and the SDK's
 * answer — it calls sd_em_config.on_decision with the decision as plain C data.
 *
 * sd_em_sched is the hook that makes a file of it. Recording, it appends one canonical text
 * line per decision. Replaying, it formats each decision the same way and compares it with
 * the recording's step of the same number: the first that differs fails the engine call in
 * which it was made with a message naming the step, both lines and what differed, and every
 * later call fails with the same message, so a diverging replay can never go on silently.
 * The recording's header carries the seed, shape and caps; the executor configures the
 * engine from it, which is what makes the engine's own choices repeat (the schedule is the
 * decision source through the seeded generator, which it restarts, rather than through a
 * second code path of choices that could drift from the first).
 *
 * What a decision line holds is what identifies it across runs and nothing that differs
 * between identical runs: bundle ids ("<stage>-<n>" counts per stage), element counts and
 * FNV-1a digests of the bytes that travel. The job clock starts at the wall time the engine
 * is created, so clock values are written relative to that start, and processing-time timers
 * (whose firing times are on that clock) enter a bundle's digest by family only.
 *
 * Cost: one line (about 80 bytes) per decision, a few per bundle; digests read each input
 * and output byte once more. Without a hook the engine pays one branch per decision.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull

struct sd_em_sched {
    bool replay;
    sd_em_sched_header h;
    uint64_t step;  /* decisions seen */
    sd_buf text;    /* recording: the step lines so far */
    char **lines;   /* replaying: the canonical text of step i + 1 (owned) */
    size_t n_lines; /* replaying: the recording's steps */
    char *diverged; /* the first divergence's message (owned), or NULL */
    sd_buf line;    /* scratch: this decision's canonical text */
};

/* ========================================================================================== */
/* Digests (engine side)                                                                      */
/* ========================================================================================== */

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * FNV_PRIME;
    }
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)(v >> (8 * i));
    }
    return fnv(h, b, sizeof(b));
}

static sd_status decide(sd_em *em, const sd_em_decision *d, sd_err *err)
{
    return em->cfg.on_decision(em->cfg.decision_ctx, d, err);
}

sd_status sd_em_decide(sd_em *em, const sd_em_decision *d, sd_err *err)
{
    return em == NULL || em->cfg.on_decision == NULL ? SD_OK : decide(em, d, err);
}

sd_status sd__em_decide_bundle(sd_em *em, const sd_bundle *b, sd_err *err)
{
    if (em->cfg.on_decision == NULL) {
        return SD_OK;
    }
    const sd__stage *st = b->stage;
    uint64_t h = fnv(FNV_OFFSET, b->input.data, b->input.len);
    for (size_t i = 0; i < b->timer_inputs.len; i++) {
        const sd__timer_input *ti = SD_VEC_AT(&b->timer_inputs, sd__timer_input, i);
        h = fnv_u64(h, ti->family);
        if (ti->family < st->n_families && !st->families[ti->family].processing_time) {
            h = fnv(h, b->timer_bytes.data + ti->off, ti->len);
        }
    }
    sd_em_decision d = { .kind = SD_DECISION_BUNDLE,
                         .bundle = b->id,
                         .stage = st->id,
                         .elements = b->n_input,
                         .count = b->fired.len,
                         .digest = h };
    return decide(em, &d, err);
}

sd_status sd__em_decide_clock(sd_em *em, sd_em_decision_kind kind, sd_err *err)
{
    if (em->cfg.on_decision == NULL) {
        return SD_OK;
    }
    sd_em_decision d = { .kind = kind,
                         .clock = em->clock_now >= SD_TIME_MAX
                                      ? SD_TIME_MAX
                                      : sd_time_add(em->clock_now, -em->clock_start) };
    return decide(em, &d, err);
}

sd_status sd__em_decide_commit(sd_em *em, const sd_bundle *b, sd_err *err)
{
    if (em->cfg.on_decision == NULL) {
        return SD_OK;
    }
    uint64_t h = FNV_OFFSET;
    for (size_t o = 0; o < b->stage->n_outputs; o++) {
        h = fnv_u64(h, o);
        const sd__outstream *os = &b->outputs[o];
        h = fnv_u64(h, os->len);
        for (size_t c = 0; c < os->chunks.len; c++) {
            const sd__chunk *ch = SD_VEC_AT(&os->chunks, sd__chunk, c);
            if (!ch->on_file) {
                h = fnv(h, ch->data, ch->len);
                continue;
            }
            uint8_t *copy = sd_malloc(ch->len > 0 ? ch->len : 1); /* spilled: read it back */
            sd_status rc = copy == NULL ? sd_err_set(err, SD_ENOMEM, "out of memory")
                                        : sd__spill_read(em, ch->off, copy, ch->len, err);
            if (rc == SD_OK) {
                h = fnv(h, copy, ch->len);
            }
            sd_free(copy);
            if (rc != SD_OK) {
                return rc;
            }
        }
        h = fnv(h, os->tail.data, os->tail.len);
    }
    for (size_t i = 0; i < b->residuals.len; i++) {
        const sd__residual *r = SD_VEC_AT(&b->residuals, sd__residual, i);
        h = fnv_u64(h, (uint64_t)r->delay_ms);
        h = fnv_u64(h, r->len);
        h = fnv(h, r->bytes, r->len);
    }
    sd_em_decision d = { .kind = SD_DECISION_COMMIT,
                         .bundle = b->id,
                         .elements = b->n_primary,
                         .count = b->residuals.len,
                         .digest = h };
    return decide(em, &d, err);
}

void sd__em_decide_fail(sd_em *em, const sd_bundle *b)
{
    if (em->cfg.on_decision != NULL) {
        sd_em_decision d = { .kind = SD_DECISION_FAIL, .bundle = b->id };
        (void)decide(em, &d, NULL); /* a replay remembers a divergence for its next step */
    }
}

/* ========================================================================================== */
/* The file                                                                                   */
/* ========================================================================================== */

const char *sd_em_shape_name(int shape)
{
    switch (shape) {
    case SD_SHAPE_GREEDY:
        return "greedy";
    case SD_SHAPE_ONE_KEY:
        return "one_key";
    case SD_SHAPE_ONE_ELEMENT:
        return "one_element";
    default:
        return "?";
    }
}

static int shape_parse(const char *s)
{
    for (int k = SD_SHAPE_GREEDY; k <= SD_SHAPE_ONE_ELEMENT; k++) {
        if (strcmp(s, sd_em_shape_name(k)) == 0) {
            return k;
        }
    }
    return -1;
}

/* An id as one token: bytes <= 0x20, '%' and 0x7f as %XX. */
static sd_status put_id(sd_buf *out, const char *id)
{
    sd_status rc = SD_OK;
    for (const unsigned char *p = (const unsigned char *)(id != NULL ? id : "");
         *p != '\0' && rc == SD_OK; p++) {
        rc = *p <= 0x20 || *p == '%' || *p == 0x7f ? sd_buf_printf(out, "%%%02X", *p)
                                                   : sd_buf_append_byte(out, *p);
    }
    return rc;
}

static sd_status put_clock(sd_buf *out, int64_t ms)
{
    return ms >= SD_TIME_MAX ? sd_buf_append_str(out, "+inf") : sd_buf_printf(out, "%+" PRId64, ms);
}

/* The canonical text of a decision (no step number, no newline), NUL-terminated in out. */
static sd_status format_decision(const sd_em_decision *d, sd_buf *out)
{
    sd_status rc;
    sd_buf_reset(out);
    switch (d->kind) {
    case SD_DECISION_BUNDLE:
        rc = sd_buf_append_str(out, "bundle ");
        rc = rc == SD_OK ? put_id(out, d->bundle) : rc;
        rc = rc == SD_OK ? sd_buf_append_str(out, " stage=") : rc;
        rc = rc == SD_OK ? put_id(out, d->stage) : rc;
        rc = rc == SD_OK
                 ? sd_buf_printf(out, " elements=%" PRIu64 " timers=%" PRIu64 " digest=%016" PRIx64,
                                 d->elements, d->count, d->digest)
                 : rc;
        break;
    case SD_DECISION_TESTSTREAM:
        rc = sd_buf_append_str(out, "teststream clock=");
        rc = rc == SD_OK ? put_clock(out, d->clock) : rc;
        break;
    case SD_DECISION_CLOCK:
        rc = sd_buf_append_str(out, "clock ");
        rc = rc == SD_OK ? put_clock(out, d->clock) : rc;
        break;
    case SD_DECISION_SPLIT:
        rc = sd_buf_append_str(out, "split ");
        rc = rc == SD_OK ? put_id(out, d->bundle) : rc;
        rc = rc == SD_OK ? sd_buf_printf(out, " asked=%.17g answered=", d->fraction) : rc;
        rc = rc == SD_OK ? (d->first_split < 0 ? sd_buf_append_str(out, "none")
                                               : sd_buf_printf(out, "%" PRId64, d->first_split))
                         : rc;
        if (d->answer.len > 0) {
            static const char hex[] = "0123456789abcdef";
            rc = rc == SD_OK ? sd_buf_append_str(out, " answer=") : rc;
            for (size_t i = 0; i < d->answer.len && rc == SD_OK; i++) {
                char two[2] = { hex[d->answer.ptr[i] >> 4], hex[d->answer.ptr[i] & 15] };
                rc = sd_buf_append(out, two, 2);
            }
        }
        break;
    case SD_DECISION_COMMIT:
        rc = sd_buf_append_str(out, "commit ");
        rc = rc == SD_OK ? put_id(out, d->bundle) : rc;
        rc = rc == SD_OK
                 ? sd_buf_printf(out,
                                 " primary=%" PRIu64 " residuals=%" PRIu64 " digest=%016" PRIx64,
                                 d->elements, d->count, d->digest)
                 : rc;
        break;
    case SD_DECISION_FAIL:
    default:
        rc = sd_buf_append_str(out, "fail ");
        rc = rc == SD_OK ? put_id(out, d->bundle) : rc;
        break;
    }
    return rc == SD_OK ? sd_buf_append_byte(out, '\0') : rc;
}

sd_status sd_em_sched_record(const sd_em_sched_header *h, sd_em_sched **out)
{
    sd_em_sched *s = sd_calloc(1, sizeof(*s));
    *out = NULL;
    if (s == NULL) {
        return SD_ENOMEM;
    }
    s->h = *h;
    sd_buf_init(&s->text, 0);
    sd_buf_init(&s->line, 0);
    *out = s;
    return SD_OK;
}

void sd_em_sched_destroy(sd_em_sched *s)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->n_lines; i++) {
        sd_free(s->lines[i]);
    }
    sd_free(s->lines);
    sd_free(s->diverged);
    sd_buf_deinit(&s->text);
    sd_buf_deinit(&s->line);
    sd_free(s);
}

bool sd_em_sched_replaying(const sd_em_sched *s)
{
    return s != NULL && s->replay;
}

void sd_em_sched_set_no_spread(sd_em_sched *s)
{
    if (s != NULL) {
        s->h.no_spread = 1;
    }
}

const sd_em_sched_header *sd_em_sched_header_get(const sd_em_sched *s)
{
    return &s->h;
}

uint64_t sd_em_sched_steps(const sd_em_sched *s)
{
    return s->step;
}

const char *sd_em_sched_diverged(const sd_em_sched *s)
{
    return s != NULL ? s->diverged : NULL;
}

/* ---- loading ----------------------------------------------------------------------------- */

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (s[0] < '0' || s[0] > '9') {
        return false;
    }
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') {
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

static const char *const kinds[] = { "bundle ", "teststream ", "clock ",
                                     "split ",  "commit ",     "fail " };

/* One line of the file (NUL-terminated, no newline) at line number no. */
static sd_status load_line(sd_em_sched *s, char *line, size_t no, int *stage, sd_err *err)
{
    static const char *const keys[] = { "seed ", "shape ", "max_bundle_elements ",
                                        "max_bundle_bytes ", "max_inflight " };
    uint64_t v;
    if (*stage == 0) {
        if (strcmp(line, "sundial-schedule v1") != 0) {
            return sd_err_set(err, SD_EPROTO,
                              "schedule line %zu: expected \"sundial-schedule v1\" (a recorded "
                              "Sundial schedule, version 1), got \"%.80s\"",
                              no, line);
        }
        *stage = 1;
        return SD_OK;
    }
    if (*stage >= 1 && *stage <= 5) {
        const char *key = keys[*stage - 1];
        size_t kl = strlen(key);
        if (strncmp(line, key, kl) != 0) {
            return sd_err_set(err, SD_EPROTO,
                              "schedule line %zu: expected \"%s<value>\", got "
                              "\"%.80s\"",
                              no, key, line);
        }
        const char *val = line + kl;
        if (*stage == 2) {
            int k = shape_parse(val);
            if (k < 0) {
                return sd_err_set(err, SD_EPROTO,
                                  "schedule line %zu: shape must be greedy, "
                                  "one_key or one_element, got \"%.40s\"",
                                  no, val);
            }
            s->h.shape = k;
        } else if (!parse_u64(val, &v)) {
            return sd_err_set(err, SD_EPROTO,
                              "schedule line %zu: %smust be a number >= 0, got "
                              "\"%.40s\"",
                              no, key, val);
        } else {
            uint64_t *f[] = { &s->h.seed, NULL, &s->h.max_bundle_elements, &s->h.max_bundle_bytes,
                              &s->h.max_inflight };
            *f[*stage - 1] = v;
        }
        (*stage)++;
        return SD_OK;
    }
    if (*stage == 7) {
        return sd_err_set(err, SD_EPROTO,
                          "schedule line %zu: nothing may follow the \"end\" "
                          "line, got \"%.80s\"",
                          no, line);
    }
    if (*stage == 6 && s->n_lines == 0 && strncmp(line, "memory_limit ", 13) == 0) {
        if (!parse_u64(line + 13, &s->h.memory_limit)) {
            return sd_err_set(err, SD_EPROTO,
                              "schedule line %zu: memory_limit must be a number of bytes >= 0, "
                              "got \"%.40s\"",
                              no, line + 13);
        }
        return SD_OK;
    }
    if (*stage == 6 && s->n_lines == 0 && strncmp(line, "no_spread ", 10) == 0) {
        if (!parse_u64(line + 10, &s->h.no_spread) || s->h.no_spread > 1) {
            return sd_err_set(err, SD_EPROTO,
                              "schedule line %zu: no_spread must be 0 or 1, got \"%.40s\"", no,
                              line + 10);
        }
        return SD_OK;
    }
    if (strncmp(line, "end ", 4) == 0) {
        if (!parse_u64(line + 4, &v) || v != s->n_lines) {
            return sd_err_set(err, SD_EPROTO,
                              "schedule line %zu: \"%s\" does not match the %zu "
                              "steps before it",
                              no, line, s->n_lines);
        }
        *stage = 7;
        return SD_OK;
    }
    char *sp = strncmp(line, "step ", 5) == 0 ? strchr(line + 5, ' ') : NULL;
    if (sp == NULL) {
        return sd_err_set(err, SD_EPROTO,
                          "schedule line %zu: expected \"step <n> <decision>\" "
                          "or \"end <n>\", got \"%.80s\"",
                          no, line);
    }
    *sp = '\0';
    if (!parse_u64(line + 5, &v) || v != s->n_lines + 1) {
        return sd_err_set(err, SD_EPROTO,
                          "schedule line %zu: expected step %zu, got step "
                          "\"%.20s\" (steps are numbered from 1, one after the other)",
                          no, s->n_lines + 1, line + 5);
    }
    const char *rest = sp + 1;
    bool known = false;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        known |= strncmp(rest, kinds[k], strlen(kinds[k])) == 0;
    }
    if (!known) {
        return sd_err_set(err, SD_EPROTO,
                          "schedule line %zu (step %" PRIu64 "): unknown "
                          "decision \"%.40s\" (expected bundle, teststream, clock, split, "
                          "commit or fail)",
                          no, v, rest);
    }
    char **grown = sd_realloc(s->lines, (s->n_lines + 1) * sizeof(*grown));
    if (grown == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory loading a schedule");
    }
    s->lines = grown;
    if ((s->lines[s->n_lines] = sd_strdup(rest)) == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory loading a schedule");
    }
    s->n_lines++;
    return SD_OK;
}

sd_status sd_em_sched_replay(sd_bytes text, sd_em_sched **out, sd_err *err)
{
    sd_em_sched *s = NULL;
    sd_em_sched_header h = { 0 };
    sd_status rc = sd_em_sched_record(&h, &s);
    *out = NULL;
    if (rc != SD_OK) {
        return sd_err_set(err, rc, "out of memory loading a schedule");
    }
    s->replay = true;
    int stage = 0; /* 0 version, 1..5 header, 6 steps, 7 after end */
    size_t no = 0;
    for (size_t at = 0; at < text.len && rc == SD_OK;) {
        const uint8_t *nl = memchr(text.ptr + at, '\n', text.len - at);
        size_t len = nl != NULL ? (size_t)(nl - (text.ptr + at)) : text.len - at;
        no++;
        sd_buf_reset(&s->line);
        rc = sd_buf_append(&s->line, text.ptr + at, len);
        rc = rc == SD_OK ? sd_buf_append_byte(&s->line, '\0') : rc;
        if (rc != SD_OK) {
            rc = sd_err_set(err, rc, "out of memory loading a schedule");
            break;
        }
        char *line = (char *)s->line.data;
        if (len > 0 && line[len - 1] == '\r') {
            line[len - 1] = '\0';
        }
        if (memchr(line, '\0', len > 0 && line[len - 1] == '\0' ? len - 1 : len) != NULL) {
            rc = sd_err_set(err, SD_EPROTO, "schedule line %zu: a NUL byte (not a text file)", no);
        } else if (line[0] != '\0' && line[0] != '#') {
            rc = load_line(s, line, no, &stage, err);
        }
        at += len + (nl != NULL ? 1 : 0);
    }
    if (rc == SD_OK && stage != 7) {
        rc = sd_err_set(err, SD_EPROTO,
                        stage < 6 ? "schedule: the file ends in its header (line %zu): not a "
                                    "complete recording"
                                  : "schedule: the file ends at line %zu without its \"end\" "
                                    "line: the recording is truncated",
                        no);
    }
    if (rc != SD_OK) {
        sd_em_sched_destroy(s);
        return rc;
    }
    *out = s;
    return SD_OK;
}

/* ---- deciding ---------------------------------------------------------------------------- */

/* What a differing pair of canonical lines says, for the divergence message. */
static const char *what_differs(const char *rec, const char *got)
{
    size_t i = 0;
    while (rec[i] != '\0' && rec[i] == got[i]) {
        i++;
    }
    size_t tok = i;
    while (tok > 0 && rec[tok - 1] != ' ') {
        tok--;
    }
    const char *rk = strchr(rec, ' '), *gk = strchr(got, ' ');
    size_t rl = rk != NULL ? (size_t)(rk - rec) : strlen(rec);
    size_t gl = gk != NULL ? (size_t)(gk - got) : strlen(got);
    if (rl != gl || strncmp(rec, got, rl) != 0) {
        return "this run made another kind of decision at this point";
    }
    const char *at = rec + tok;
    if (strncmp(rec, "bundle", 6) == 0) {
        const char *rs = strstr(rec, " stage="), *gs = strstr(got, " stage=");
        size_t rn = rs != NULL ? strcspn(rs + 1, " ") : 0,
               gn = gs != NULL ? strcspn(gs + 1, " ") : 0;
        bool same_stage = rs != NULL && gs != NULL && rn == gn && strncmp(rs, gs, rn + 1) == 0;
        return !same_stage ? "another stage had work ready first"
               : tok == 7  ? "another number of this stage's bundles came before"
               : strncmp(at, "digest=", 7) == 0
                   ? "the bundle holds other elements or timers"
                   : "the bundle holds another number of elements or timers";
    }
    if (strncmp(rec, "commit", 6) == 0) {
        return tok == 7 ? "another bundle completed here"
               : strncmp(at, "primary=", 8) == 0
                   ? "the SDK processed another number of the bundle's elements"
               : strncmp(at, "residuals=", 10) == 0
                   ? "the SDK handed back another number of residuals"
                   : "the SDK's output or residuals differ";
    }
    if (strncmp(rec, "split", 5) == 0) {
        return strncmp(at, "answered=", 9) == 0 ? "the SDK answered the split differently"
                                                : "another split was asked for";
    }
    if (strncmp(rec, "clock", 5) == 0 || strncmp(rec, "teststream", 10) == 0) {
        return "the job clock is elsewhere";
    }
    return "another bundle failed";
}

sd_status sd_em_sched_decide(void *ctx, const sd_em_decision *d, sd_err *err)
{
    sd_em_sched *s = ctx;
    if (s->diverged != NULL) {
        return sd_err_set(err, SD_ESTATE, "%s", s->diverged);
    }
    if (format_decision(d, &s->line) != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory recording the schedule");
    }
    const char *got = (const char *)s->line.data;
    s->step++;
    if (!s->replay) {
        if (sd_buf_printf(&s->text, "step %" PRIu64 " %s\n", s->step, got) != SD_OK) {
            s->step--;
            return sd_err_set(err, SD_ENOMEM, "out of memory recording the schedule");
        }
        return SD_OK;
    }
    if (s->step <= s->n_lines && strcmp(s->lines[s->step - 1], got) == 0) {
        return SD_OK;
    }
    if (s->step > s->n_lines) {
        s->diverged = sd_asprintf("schedule replay diverged at step %" PRIu64 ": the recording "
                                  "ended after step %zu, but this run goes on with \"%s\"",
                                  s->step, s->n_lines, got);
    } else {
        const char *rec = s->lines[s->step - 1];
        s->diverged = sd_asprintf("schedule replay diverged at step %" PRIu64 " (%s): the "
                                  "recording has \"%s\", this run has \"%s\"",
                                  s->step, what_differs(rec, got), rec, got);
    }
    if (s->diverged == NULL) {
        s->diverged = sd_strdup("schedule replay diverged (out of memory describing it)");
    }
    return sd_err_set(err, SD_ESTATE, "%s",
                      s->diverged != NULL ? s->diverged : "schedule replay diverged");
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The rest of a split line after "split <id> asked=" (step: its number, for errors). */
static sd_status parse_split(const char *p, size_t step, sd_em_sched_split *out, sd_err *err)
{
    char *end;
    errno = 0;
    out->fraction = strtod(p, &end);
    out->first_split = -1;
    bool ok = end != p && errno == 0 && strncmp(end, " answered=", 10) == 0;
    p = ok ? end + 10 : p;
    if (ok && strncmp(p, "none", 4) == 0) {
        p += 4;
    } else if (ok) {
        long long v = strtoll(p, &end, 10);
        ok = end != p && errno == 0 && v >= 0;
        out->first_split = v;
        p = end;
    }
    if (ok && strncmp(p, " answer=", 8) == 0) {
        p += 8;
        size_t len = strlen(p);
        ok = len > 0 && len % 2 == 0;
        for (size_t i = 0; ok && i < len; i += 2) {
            int hi = hex_digit(p[i]), lo = hex_digit(p[i + 1]);
            ok = hi >= 0 && lo >= 0;
            if (ok && sd_buf_append_byte(&out->answer, (uint8_t)(hi << 4 | lo)) != SD_OK) {
                return sd_err_set(err, SD_ENOMEM, "out of memory reading a schedule");
            }
        }
        p += ok ? len : 0;
    }
    if (!ok || *p != '\0') {
        return sd_err_set(err, SD_EPROTO,
                          "schedule step %zu: a split is \"split <bundle> asked=<fraction> "
                          "answered=<element>|none[ answer=<lowercase hex>]\", got \"%.80s\"",
                          step, p);
    }
    return SD_OK;
}

sd_status sd_em_sched_splits_for(const sd_em_sched *s,
                                 const char *bundle,
                                 sd_em_sched_split *out,
                                 size_t max,
                                 size_t *n,
                                 sd_err *err)
{
    sd_buf want;
    sd_status rc = SD_OK;
    *n = 0;
    for (size_t i = 0; i < max; i++) {
        sd_buf_init(&out[i].answer, 0);
    }
    if (s == NULL || !s->replay) {
        return SD_OK;
    }
    sd_buf_init(&want, 0);
    if (sd_buf_append_str(&want, "split ") != SD_OK || put_id(&want, bundle) != SD_OK ||
        sd_buf_append_str(&want, " asked=") != SD_OK) {
        sd_buf_deinit(&want);
        return sd_err_set(err, SD_ENOMEM, "out of memory reading a schedule");
    }
    for (size_t i = 0; i < s->n_lines && rc == SD_OK; i++) {
        if (strncmp(s->lines[i], (const char *)want.data, want.len) != 0) {
            continue;
        }
        if (*n < max) {
            rc = parse_split(s->lines[i] + want.len, i + 1, &out[*n], err);
        }
        (*n)++;
    }
    sd_buf_deinit(&want);
    return rc;
}

sd_status sd_em_sched_finish(sd_em_sched *s, sd_buf *out, sd_err *err)
{
    if (s->replay) {
        if (s->diverged != NULL) {
            return sd_err_set(err, SD_ESTATE, "%s", s->diverged);
        }
        if (s->step < s->n_lines) {
            return sd_err_set(err, SD_ESTATE,
                              "schedule replay diverged at step %" PRIu64 ": this run ended "
                              "after %" PRIu64 " steps, but the recording goes on with \"%s\"",
                              s->step + 1, s->step, s->lines[s->step]);
        }
        return SD_OK;
    }
    if (out == NULL) {
        return SD_OK;
    }
    sd_status rc = sd_buf_printf(out,
                                 "sundial-schedule v1\nseed %" PRIu64 "\nshape %s\n"
                                 "max_bundle_elements %" PRIu64 "\nmax_bundle_bytes %" PRIu64
                                 "\nmax_inflight %" PRIu64 "\nmemory_limit %" PRIu64 "\n",
                                 s->h.seed, sd_em_shape_name(s->h.shape), s->h.max_bundle_elements,
                                 s->h.max_bundle_bytes, s->h.max_inflight, s->h.memory_limit);
    rc = rc == SD_OK && s->h.no_spread != 0 ? sd_buf_printf(out, "no_spread 1\n") : rc;
    rc = rc == SD_OK && s->text.len > 0 ? sd_buf_append(out, s->text.data, s->text.len) : rc;
    rc = rc == SD_OK ? sd_buf_printf(out, "end %" PRIu64 "\n", s->step) : rc;
    return rc == SD_OK ? SD_OK : sd_err_set(err, rc, "out of memory writing the schedule");
}
