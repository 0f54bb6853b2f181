/*
 * Sundial: executor: the job's time trace, for its readers.
 *
 * The engine records every move of the job's time (runner/engine/em_trace.h: clock moves,
 * watermarks, holds, timers, panes, TestStream events, late elements, and the pause gate's
 * stops and the steps asked of it). The engine is
 * destroyed when its run ends, so when the run's last observation is made (sd__exec_observe
 * with final, before the job's terminal state is set) this file copies the records and the
 * names they use (stage ids, PCollection ids, timer families) onto the job
 * (sd_job_set_trace), where it stays as long as the job is remembered. While the run is live
 * the readers read the engine's records directly.
 *
 * Readers get JSON lines, one record a line, in record order, with the fields of its kind
 * only (docs/trace.md):
 *
 *   {"seq":3,"clock":0,"wall":1765140000123,"kind":"wm_out","stage":"s2","t":3600000,
 *    "t2":"-inf"}
 *
 * Times are integers (ms), or the strings "-inf" / "+inf" for Beam's minimum and maximum
 * (and a decimal string past 2^53, which JSON readers in JavaScript could not hold). "wall"
 * is left out on request (sd_exec_trace_query.wall false): what remains is deterministic, so
 * two runs of the same test job give byte-identical lines (sundialctl trace --diff).
 *
 * Memory: a copy is the engine's records as they are (its cap bounds them: at most
 * SD_EM_TRACE_CAP_DEFAULT records, about 12 MB, unless the job asked for another cap) plus the
 * names. The job service remembers up to a hundred finished jobs, so the records of all kept
 * copies together are bounded too: past SD_EXEC_TRACE_KEEP_BYTES the oldest copies drop their
 * records (their readers are told so). Copies are made and freed on the loop threads of
 * whichever servers the process runs (an embedded runner has its own), hence the lock.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/exec/exec_int.h"

#define TRACE_MAGIC 0x54524345u /* "TRCE" */

/* The copy kept on the job. */
typedef struct trace_copy {
    uint32_t magic;
    struct trace_copy *older, *newer; /* every copy with records, oldest first (kept_lock) */
    size_t bytes;                     /* of recs */
    bool dropped;                     /* its records went to keep the budget */
    size_t n;
    sd_trace_rec *recs;
    bool cut;
    size_t n_stages;
    char **stages; /* stage ids by engine index */
    size_t n_pcolls;
    char **pcolls; /* PCollection ids by engine index */
    size_t n_names;
    char **names; /* interned names by index (NULL where none was used) */
} trace_copy;

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_copy *kept_oldest, *kept_newest;
static size_t kept_bytes;

/* Take c out of the list of copies with records. kept_lock held. */
static void kept_unlink(trace_copy *c)
{
    if (c->dropped) {
        return;
    }
    *(c->older != NULL ? &c->older->newer : &kept_oldest) = c->newer;
    *(c->newer != NULL ? &c->newer->older : &kept_newest) = c->older;
    c->older = c->newer = NULL;
    kept_bytes -= c->bytes;
    c->dropped = true;
}

/* Add c as the newest copy; drop the oldest copies' records while over the budget. */
static void kept_add(trace_copy *c)
{
    pthread_mutex_lock(&kept_lock);
    c->older = kept_newest;
    *(kept_newest != NULL ? &kept_newest->newer : &kept_oldest) = c;
    kept_newest = c;
    kept_bytes += c->bytes;
    while (kept_bytes > SD_EXEC_TRACE_KEEP_BYTES && kept_oldest != c) {
        trace_copy *old = kept_oldest;
        kept_unlink(old);
        sd_free(old->recs);
        old->recs = NULL;
        old->n = 0;
    }
    pthread_mutex_unlock(&kept_lock);
}

static void trace_copy_free(void *p)
{
    trace_copy *c = p;
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&kept_lock);
    kept_unlink(c);
    pthread_mutex_unlock(&kept_lock);
    for (size_t i = 0; i < c->n_stages; i++) {
        sd_free(c->stages[i]);
    }
    for (size_t i = 0; i < c->n_pcolls; i++) {
        sd_free(c->pcolls[i]);
    }
    for (size_t i = 0; i < c->n_names; i++) {
        sd_free(c->names[i]);
    }
    sd_free(c->stages);
    sd_free(c->pcolls);
    sd_free(c->names);
    sd_free(c->recs);
    c->magic = 0;
    sd_free(c);
}

/* Where the records are read from: the live engine, or the copy. */
typedef struct trace_src {
    const sd_em *em;       /* live, or NULL */
    const trace_copy *cpy; /* else this */
} trace_src;

static size_t src_len(const trace_src *s)
{
    return s->em != NULL ? sd_em_trace_len(s->em) : s->cpy->n;
}

static const sd_trace_rec *src_at(const trace_src *s, size_t i)
{
    return s->em != NULL ? sd_em_trace_at(s->em, i) : &s->cpy->recs[i];
}

static bool src_cut(const trace_src *s)
{
    return s->em != NULL ? sd_em_trace_was_cut(s->em) : s->cpy->cut;
}

static const char *src_stage(const trace_src *s, int32_t i)
{
    if (i < 0) {
        return NULL;
    }
    if (s->em != NULL) {
        if ((size_t)i >= sd_em_n_stages(s->em)) {
            return NULL;
        }
        sd_em_stage_stats ss;
        sd_em_stage_info(s->em, (size_t)i, &ss);
        return ss.id;
    }
    return (size_t)i < s->cpy->n_stages ? s->cpy->stages[i] : NULL;
}

static const char *src_pcoll(const trace_src *s, int32_t i)
{
    if (i < 0) {
        return NULL;
    }
    if (s->em != NULL) {
        if ((size_t)i >= sd_em_n_pcollections(s->em)) {
            return NULL;
        }
        sd_em_pcoll_stats ps;
        sd_em_pcollection_info(s->em, (size_t)i, &ps);
        return ps.id;
    }
    return (size_t)i < s->cpy->n_pcolls ? s->cpy->pcolls[i] : NULL;
}

static const char *src_name(const trace_src *s, int32_t i)
{
    if (i < 0) {
        return NULL;
    }
    if (s->em != NULL) {
        return sd_em_trace_name(s->em, i);
    }
    return (size_t)i < s->cpy->n_names ? s->cpy->names[i] : NULL;
}

/* ================================================================ the copy */

void sd__exec_trace_keep(sd_exec_run *r)
{
    if (r->em == NULL) {
        return;
    }
    trace_copy *c = sd_calloc(1, sizeof(*c));
    bool ok = c != NULL;
    if (ok) {
        c->magic = TRACE_MAGIC;
        c->dropped = true; /* not in the list until kept_add */
        c->n = sd_em_trace_len(r->em);
        c->cut = sd_em_trace_was_cut(r->em);
        c->n_stages = sd_em_n_stages(r->em);
        c->n_pcolls = sd_em_n_pcollections(r->em);
        c->recs = sd_calloc(c->n == 0 ? 1 : c->n, sizeof(*c->recs));
        c->stages = sd_calloc(c->n_stages == 0 ? 1 : c->n_stages, sizeof(*c->stages));
        c->pcolls = sd_calloc(c->n_pcolls == 0 ? 1 : c->n_pcolls, sizeof(*c->pcolls));
        ok = c->recs != NULL && c->stages != NULL && c->pcolls != NULL;
    }
    for (size_t i = 0; ok && i < c->n_stages; i++) {
        sd_em_stage_stats ss;
        sd_em_stage_info(r->em, i, &ss);
        ok = (c->stages[i] = sd_strdup(ss.id)) != NULL;
    }
    for (size_t i = 0; ok && i < c->n_pcolls; i++) {
        sd_em_pcoll_stats ps;
        sd_em_pcollection_info(r->em, i, &ps);
        ok = (c->pcolls[i] = sd_strdup(ps.id)) != NULL;
    }
    for (size_t i = 0; ok && i < c->n; i++) {
        const sd_trace_rec *rec = sd_em_trace_at(r->em, i);
        c->recs[i] = *rec;
        c->recs[i].window.custom_bytes = (sd_bytes){ 0 }; /* the engine's: not kept */
        if (rec->name < 0) {
            continue;
        }
        size_t k = (size_t)rec->name;
        if (k >= c->n_names) {
            size_t grow = k + 1 > 2 * c->n_names ? k + 1 : 2 * c->n_names;
            char **names = sd_realloc(c->names, grow * sizeof(*names));
            ok = names != NULL;
            if (!ok) {
                break;
            }
            memset(names + c->n_names, 0, (grow - c->n_names) * sizeof(*names));
            c->names = names;
            c->n_names = grow;
        }
        const char *name = sd_em_trace_name(r->em, rec->name);
        if (c->names[k] == NULL && name != NULL) {
            ok = (c->names[k] = sd_strdup(name)) != NULL;
        }
    }
    if (!ok) {
        trace_copy_free(c);
        SD_WARN("exec", "job %s: out of memory keeping its time trace", r->job_id);
        sd_job_set_trace(r->job, NULL, NULL);
        return;
    }
    c->bytes = c->n * sizeof(*c->recs);
    c->dropped = false;
    kept_add(c);
    sd_job_set_trace(r->job, c, trace_copy_free);
}

/* ================================================================ JSON lines */

/* A JSON string: quotes, backslashes and control characters escaped; bytes that are not
 * UTF-8 become '?'. */
static sd_status put_str(sd_buf *b, const char *s)
{
    sd_status st = sd_buf_append_byte(b, '"');
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; st == SD_OK && i < n;) {
        unsigned char ch = p[i];
        if (ch == '"' || ch == '\\') {
            st = sd_buf_printf(b, "\\%c", ch);
            i++;
        } else if (ch < 0x20) {
            st = sd_buf_printf(b, "\\u%04x", ch);
            i++;
        } else if (ch < 0x80) {
            st = sd_buf_append_byte(b, ch);
            i++;
        } else {
            size_t len = (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : (ch >> 3) == 30 ? 4 : 0;
            bool ok = len > 0 && i + len <= n;
            for (size_t k = 1; ok && k < len; k++) {
                ok = (p[i + k] & 0xc0) == 0x80;
            }
            if (ok) {
                st = sd_buf_append(b, p + i, len);
                i += len;
            } else {
                st = sd_buf_append_byte(b, '?');
                i++;
            }
        }
    }
    return st == SD_OK ? sd_buf_append_byte(b, '"') : st;
}

/* A time value: an integer, "-inf", "+inf", or a decimal string past 2^53. */
static sd_status put_tval(sd_buf *b, sd_time t)
{
    if (t <= SD_TIME_MIN) {
        return sd_buf_append_str(b, "\"-inf\"");
    }
    if (t >= SD_TIME_MAX) {
        return sd_buf_append_str(b, "\"+inf\"");
    }
    if (t > ((int64_t)1 << 53) || t < -((int64_t)1 << 53)) {
        return sd_buf_printf(b, "\"%" PRId64 "\"", (int64_t)t);
    }
    return sd_buf_printf(b, "%" PRId64, (int64_t)t);
}

/* ,"key":time */
static sd_status put_time(sd_buf *b, const char *key, sd_time t)
{
    sd_status st = sd_buf_printf(b, ",\"%s\":", key);
    return st == SD_OK ? put_tval(b, t) : st;
}

static sd_status put_key_str(sd_buf *b, const char *key, const char *v)
{
    sd_status st = sd_buf_printf(b, ",\"%s\":", key);
    return st == SD_OK ? put_str(b, v) : st;
}

/* Does the kind carry a cause, an index and a count, a name? */
static bool kind_has_cause(sd_trace_kind k)
{
    return k == SD_TRACE_CLOCK || k == SD_TRACE_HOLD || k == SD_TRACE_TIMER_SET ||
           k == SD_TRACE_TIMER_CLEAR || k == SD_TRACE_TIMER_FIRE || k == SD_TRACE_PANE ||
           k == SD_TRACE_TESTSTREAM || k == SD_TRACE_LATE || k == SD_TRACE_PAUSE ||
           k == SD_TRACE_STEP;
}

static bool rec_has_counts(const sd_trace_rec *r)
{
    sd_trace_kind k = (sd_trace_kind)r->kind;
    return k == SD_TRACE_PANE || k == SD_TRACE_TESTSTREAM || k == SD_TRACE_CUT ||
           k == SD_TRACE_PAUSE ||
           (k == SD_TRACE_STEP &&
            (r->cause == SD_STEP_CAUSE_EVENTS || r->cause == SD_STEP_CAUSE_FOR));
}

/* Which of t and t2 a record carries. */
static void rec_times(const sd_trace_rec *r, bool *t, bool *t2)
{
    switch ((sd_trace_kind)r->kind) {
    case SD_TRACE_CUT:
        *t = *t2 = false;
        return;
    case SD_TRACE_PANE:
    case SD_TRACE_TESTSTREAM:
        *t = true, *t2 = false;
        return;
    case SD_TRACE_PAUSE: /* the held step's clock; the pause time when that was the cause */
        *t = true, *t2 = r->cause == SD_PAUSE_CAUSE_AT_TIME;
        return;
    case SD_TRACE_STEP: /* a target only for a duration or a watermark */
        *t = *t2 = r->cause == SD_STEP_CAUSE_FOR || r->cause == SD_STEP_CAUSE_WATERMARK;
        return;
    default:
        *t = *t2 = true;
        return;
    }
}

static sd_status put_record(sd_buf *b, const trace_src *s, const sd_trace_rec *r, bool wall)
{
    sd_trace_kind k = (sd_trace_kind)r->kind;
    const char *kind = r->kind < SD_TRACE_KINDS ? sd_trace_kind_name(k) : NULL;
    sd_status st = sd_buf_printf(b, "{\"seq\":%" PRIu64 ",\"clock\":%" PRId64, r->seq, r->clock);
    if (st == SD_OK && wall) {
        st = sd_buf_printf(b, ",\"wall\":%" PRId64, (int64_t)r->wall);
    }
    if (st == SD_OK) {
        st = put_key_str(b, "kind", kind != NULL ? kind : "?");
    }
    const char *stage = src_stage(s, r->stage);
    if (st == SD_OK && stage != NULL) {
        st = put_key_str(b, "stage", stage);
    }
    const char *pcoll = src_pcoll(s, r->pcoll);
    if (st == SD_OK && pcoll != NULL) {
        st = put_key_str(b, "pcoll", pcoll);
    }
    const char *name = src_name(s, r->name);
    if (st == SD_OK && name != NULL) {
        st = put_key_str(b, "name", name);
    }
    const char *cause = kind_has_cause(k) ? sd_trace_cause_name(k, r->cause) : NULL;
    if (st == SD_OK && cause != NULL && cause[0] != '\0') {
        st = put_key_str(b, "cause", cause);
    }
    bool has_t, has_t2;
    rec_times(r, &has_t, &has_t2);
    if (st == SD_OK && has_t) {
        st = put_time(b, "t", r->t);
    }
    if (st == SD_OK && has_t2) {
        st = put_time(b, "t2", r->t2);
    }
    if (st == SD_OK && r->has_window) {
        if (r->window.global) {
            st = sd_buf_append_str(b, ",\"window\":\"global\"");
        } else if (r->window.custom) {
            st = sd_buf_append_str(b, ",\"window\":{\"max\":");
            st = st == SD_OK ? put_tval(b, r->window.end - 1) : st;
            st = st == SD_OK ? sd_buf_append_byte(b, '}') : st;
        } else {
            st = sd_buf_append_str(b, ",\"window\":{\"start\":");
            st = st == SD_OK ? put_tval(b, r->window.start) : st;
            st = st == SD_OK ? put_time(b, "end", r->window.end) : st;
            st = st == SD_OK ? sd_buf_append_byte(b, '}') : st;
        }
    }
    if (st == SD_OK && r->key != 0) {
        st = sd_buf_printf(b, ",\"key\":\"%016" PRIx64 "\"", r->key);
    }
    if (st == SD_OK && (rec_has_counts(r) || r->index != 0 || r->count != 0)) {
        st = sd_buf_printf(b, ",\"index\":%" PRId64 ",\"count\":%" PRId64, r->index, r->count);
    }
    return st == SD_OK ? sd_buf_append_str(b, "}\n") : st;
}

sd_status sd_exec_trace_kinds(const char *list, uint32_t *out, sd_err *err)
{
    *out = 0;
    if (list == NULL || list[0] == '\0') {
        return SD_OK;
    }
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        int found = -1;
        for (int k = 0; k < SD_TRACE_KINDS && found < 0; k++) {
            const char *name = sd_trace_kind_name((sd_trace_kind)k);
            if (name != NULL && strlen(name) == n && strncmp(name, p, n) == 0) {
                found = k;
            }
        }
        if (found < 0) {
            return sd_err_set(err, SD_EINVAL,
                              "trace kind \"%.*s\" is unknown: expected a comma-separated list "
                              "of clock, wm_in, wm_out, hold, timer_set, timer_clear, "
                              "timer_fire, pane, teststream, late, cut, pause, step",
                              (int)(n > 64 ? 64 : n), p);
        }
        *out |= 1u << (unsigned)found;
        p += n;
        if (*p == ',') {
            p++;
        }
    }
    return SD_OK;
}

/* The records q selects, as JSON lines. SD_ENOMEM. */
static sd_status
trace_write(const trace_src *s, const sd_exec_trace_query *q, sd_buf *out, sd_exec_trace_info *info)
{
    size_t n = src_len(s);
    info->total = n;
    info->cut = src_cut(s);
    for (size_t i = 0; i < n; i++) {
        const sd_trace_rec *rec = src_at(s, i);
        if (q->has_after && rec->seq <= q->after) {
            continue;
        }
        if (q->kinds != 0 && (rec->kind >= 32 || (q->kinds & (1u << rec->kind)) == 0)) {
            continue;
        }
        if (q->stage != NULL) {
            const char *stage = src_stage(s, rec->stage);
            if (stage == NULL || strcmp(stage, q->stage) != 0) {
                continue;
            }
        }
        if (put_record(out, s, rec, q->wall) != SD_OK) {
            return SD_ENOMEM;
        }
        info->n++;
    }
    return SD_OK;
}

sd_status sd_exec_trace_get(sd_exec *ex,
                            sd_job *job,
                            const sd_exec_trace_query *q,
                            sd_buf *out,
                            sd_exec_trace_info *info,
                            sd_err *err)
{
    trace_src s = { 0 };
    sd_exec_run *r = ex != NULL ? sd_map_get_str(&ex->runs, sd_job_id(job)) : NULL;
    memset(info, 0, sizeof(*info));
    if (r != NULL && r->em != NULL && !r->finishing) {
        s.em = r->em;
        info->live = true;
    } else {
        const trace_copy *c = sd_job_trace(job);
        if (c == NULL || c->magic != TRACE_MAGIC) {
            return sd_err_set(err, SD_ENOTFOUND,
                              "job %s has no time trace (it has not run, or failed before its "
                              "engine started)",
                              sd_job_id(job));
        }
        /* held while the records are read: another server's loop may drop them */
        pthread_mutex_lock(&kept_lock);
        if (c->dropped) {
            pthread_mutex_unlock(&kept_lock);
            return sd_err_set(err, SD_ENOTFOUND,
                              "job %s's time trace was dropped: the traces of newer jobs took "
                              "the %zu MiB kept for finished jobs' traces",
                              sd_job_id(job), (size_t)(SD_EXEC_TRACE_KEEP_BYTES >> 20));
        }
        s.cpy = c;
    }
    sd_status st = trace_write(&s, q, out, info);
    if (s.cpy != NULL) {
        pthread_mutex_unlock(&kept_lock);
    }
    if (st != SD_OK) {
        return sd_err_set(err, SD_ENOMEM, "out of memory writing job %s's time trace",
                          sd_job_id(job));
    }
    return SD_OK;
}
