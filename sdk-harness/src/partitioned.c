/*
 * Sundial C SDK: partitioned sources (sd_read_partitioned) — N files of timestamped records,
 * or a registered generator, read as the partitions of one topic, with the stream processors'
 * watermark rules (the rules themselves are in partwm.c; this file reads and steps).
 *
 *   ReadPartitioned:  Impulse -> Read (a splittable DoFn: records, watermark history)
 *
 * Why one splittable element for the whole source. The source's watermark is a minimum over
 * partitions that excludes idle ones, and only something that sees every partition can
 * compute it; the runner computes minima over residuals but knows nothing of idleness. So
 * one SDF element reads all partitions, one step per process call: it claims the step's
 * number (the restriction is [0, INT64_MAX) of steps), reads what each partition has, feeds
 * the partitions' estimators, recomputes the source's watermark, reports it as the manual
 * watermark estimate of its self-checkpoint and resumes one granularity later. The runner
 * needs nothing new: a self-checkpoint with a resume delay and an output watermark is what
 * any unbounded SDF does, and on the synthetic clock the delay costs no real time.
 *
 * State. The per-partition state (file offsets, queued records, estimators, silences) does
 * not fit the offset-range restriction, so it lives in a process-wide table keyed by the
 * source's nonce (made at construction, so two pipelines, or two runs, never share one) and
 * records the step it expects next. Step 0 starts a fresh entry; any other step must find
 * the entry at that step, or the job fails saying the read moved to another worker process
 * (or was split by the runner) — it never silently restarts. The entry is removed when the
 * source ends; a job that fails or is cancelled mid-read leaves its entry behind until the
 * process exits (small: the queued records of its files).
 *
 * Replay (synthetic clock): the files are read whole at step 0 and replayed by write time:
 * the source's clock is t0 + step * granularity, t0 the earliest first write time floored to
 * the granularity, and a partition's next record appears once the clock reached its write
 * time. Tail (wall clock): each step reads the complete lines appended since the last one,
 * and the clock is the wall clock. A generator is asked for one record at a time and its
 * next record is kept queued, so it is gated by write time on either clock and the replay
 * can skip to it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "sdk-harness/src/partwm_int.h"
#include "sdk-harness/src/sdk_int.h"

#define SD_FN_PARTITIONED "sundial:partitioned_read"

/* ================================================================ configuration */

#define MAX_PARTITIONS 256
#define MAX_PER_STEP   100000

typedef struct src_config {
    sd_bytes nonce;
    bool tail;
    size_t n;
    sd_bytes paths[MAX_PARTITIONS];
    sd_interval delay;
    int64_t idle_ms;
    int64_t gran_ms;
    int64_t run_for_ms;
    sd_bytes generator; /* empty: files */
    sd_bytes gen_config;
} src_config;

static sd_status config_decode(sd_bytes in, src_config *c)
{
    sd_reader r = sd_reader_make(in);
    int64_t tail, n, months;
    memset(c, 0, sizeof(*c));
    if (sd_reader_lp(&r, &c->nonce) != SD_OK || sd_read_int(&r, &tail) != SD_OK ||
        sd_read_int(&r, &n) != SD_OK || n < 1 || n > MAX_PARTITIONS) {
        return SD_EPROTO;
    }
    c->tail = tail != 0;
    c->n = (size_t)n;
    for (size_t i = 0; i < c->n; i++) {
        if (sd_reader_lp(&r, &c->paths[i]) != SD_OK) {
            return SD_EPROTO;
        }
    }
    if (sd_read_int(&r, &months) != SD_OK || months < 0 || months > INT32_MAX ||
        sd_read_int(&r, &c->delay.ms) != SD_OK || sd_read_int(&r, &c->idle_ms) != SD_OK ||
        sd_read_int(&r, &c->gran_ms) != SD_OK || sd_read_int(&r, &c->run_for_ms) != SD_OK ||
        c->delay.ms < 0 || c->idle_ms < 0 || c->gran_ms <= 0 || c->run_for_ms < 0 ||
        sd_reader_lp(&r, &c->generator) != SD_OK || sd_reader_lp(&r, &c->gen_config) != SD_OK) {
        return SD_EPROTO;
    }
    c->delay.months = (int32_t)months;
    return SD_OK;
}

/* ================================================================ per-source state */

typedef struct rec {
    sd_time wt; /* the write time, unless untimed */
    char *payload;
    size_t len;
    bool untimed; /* no write time: comes out at SD_TIME_MIN, no watermark candidate */
} rec;

typedef struct part_reader {
    char *path;
    long offset; /* bytes consumed */
    long line;   /* lines consumed (for messages) */
    sd_vec recs; /* rec: read, not yet delivered from head on */
    size_t head;
    int64_t next_index; /* a generator's next record */
    bool gen_done;      /* the generator said end */
} part_reader;

typedef struct src_state {
    struct src_state *next;
    char *key;
    int64_t step;  /* the step expected next */
    sd_time start; /* the source's clock at step 0 */
    sd__partwm wm;
    part_reader *parts;
    size_t n;
    char *last; /* the last history snapshot emitted */
} src_state;

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static src_state *table;

static void state_free(src_state *s)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        part_reader *pr = &s->parts[i];
        for (size_t k = 0; k < pr->recs.len; k++) {
            sd_free(SD_VEC_AT(&pr->recs, rec, k)->payload);
        }
        sd_vec_deinit(&pr->recs);
        sd_free(pr->path);
    }
    sd_free(s->parts);
    sd__partwm_deinit(&s->wm);
    sd_free(s->last);
    sd_free(s->key);
    sd_free(s);
}

/* Unlink the entry of key and return it (caller owns), or NULL. */
static src_state *table_take(const char *key)
{
    pthread_mutex_lock(&table_mu);
    src_state **pp = &table;
    src_state *hit = NULL;
    while (*pp != NULL) {
        if (strcmp((*pp)->key, key) == 0) {
            hit = *pp;
            *pp = hit->next;
            hit->next = NULL;
            break;
        }
        pp = &(*pp)->next;
    }
    pthread_mutex_unlock(&table_mu);
    return hit;
}

static void table_put(src_state *s)
{
    pthread_mutex_lock(&table_mu);
    s->next = table;
    table = s;
    pthread_mutex_unlock(&table_mu);
}

/* ================================================================ reading */

/* "WRITE_TIME PAYLOAD" -> a record; false when malformed. An empty WRITE_TIME (the line starts
 * with its space) or NULL: a record without a write time. */
static bool parse_line(const char *line, size_t len, rec *out)
{
    size_t i = 0;
    bool neg = false;
    int64_t v = 0;
    if (len > 0 && line[len - 1] == '\r') {
        len--;
    }
    size_t none = len > 0 && line[0] == ' '                   ? 0
                  : len >= 5 && memcmp(line, "NULL ", 5) == 0 ? 4
                                                              : len;
    if (none < len) {
        out->wt = SD_TIME_MIN;
        out->untimed = true;
        out->len = len - none - 1;
        out->payload = sd_strndup(line + none + 1, out->len);
        return true;
    }
    if (i < len && line[i] == '-') {
        neg = true;
        i++;
    }
    size_t first = i;
    while (i < len && line[i] >= '0' && line[i] <= '9') {
        int d = line[i] - '0';
        if (v > (INT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
        i++;
    }
    if (i == first || i >= len || line[i] != ' ') {
        return false;
    }
    v = neg ? -v : v;
    if (v < SD_TIME_MIN || v > SD_TIME_MAX) {
        return false;
    }
    out->wt = v;
    out->untimed = false;
    out->len = len - i - 1;
    out->payload = sd_strndup(line + i + 1, out->len);
    return true;
}

/* Append the complete lines after pr->offset to pr->recs (and, when whole, a last line
 * without its newline). Fails the bundle with a message naming the file and line. */
static sd_status read_more(sd_ctx *c, part_reader *pr, bool whole)
{
    FILE *f = fopen(pr->path, "rb");
    if (f == NULL) {
        return sd_fail(c, "partitioned source %s: cannot open %s: %s", sd_ctx_transform(c),
                       pr->path, strerror(errno));
    }
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = fseek(f, pr->offset, SEEK_SET) == 0 ? SD_OK : SD_EIO;
    char chunk[8192];
    size_t got;
    while (st == SD_OK && (got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        st = sd_buf_append(&b, chunk, got);
    }
    if (st == SD_OK && ferror(f)) {
        st = SD_EIO;
    }
    fclose(f);
    if (st != SD_OK) {
        sd_buf_deinit(&b);
        return sd_fail(c, "partitioned source %s: cannot read %s", sd_ctx_transform(c), pr->path);
    }
    const char *p = (const char *)b.data;
    size_t at = 0;
    while (st == SD_OK && at < b.len) {
        const char *nl = memchr(p + at, '\n', b.len - at);
        if (nl == NULL && !whole) {
            break; /* an incomplete last line: wait for its newline */
        }
        size_t len = nl != NULL ? (size_t)(nl - (p + at)) : b.len - at;
        rec r;
        pr->line++;
        if (!parse_line(p + at, len, &r)) {
            st = sd_fail(c,
                         "partitioned source %s: %s line %ld: expected \"WRITE_TIME PAYLOAD\" "
                         "(the write time in ms since the epoch, empty or NULL for none, one "
                         "space, the payload)",
                         sd_ctx_transform(c), pr->path, pr->line);
            break;
        }
        if (r.payload == NULL || (st = sd_vec_push(&pr->recs, &r)) != SD_OK) {
            sd_free(r.payload);
            st = SD_ENOMEM;
            break;
        }
        at += len + (nl != NULL ? 1 : 0);
    }
    pr->offset += (long)at;
    sd_buf_deinit(&b);
    return st;
}

/* Ask the generator for partition i's next record and queue it (or mark the end). */
static sd_status gen_next(sd_ctx *c, const src_config *cfg, part_reader *pr, size_t i)
{
    sd_partition_gen_fn fn = sd__find_partition_gen(cfg->generator);
    if (fn == NULL) {
        return sd_fail(c, "partitioned source %s: no partition generator \"%.*s\" is registered",
                       sd_ctx_transform(c), (int)cfg->generator.len,
                       (const char *)cfg->generator.ptr);
    }
    sd_buf payload;
    sd_err err;
    sd_err_clear(&err);
    sd_buf_init(&payload, 0);
    sd_time wt = 0;
    bool end = false;
    sd_status st = fn(i, pr->next_index, cfg->gen_config, &payload, &wt, &end, &err);
    if (st != SD_OK) {
        sd_buf_deinit(&payload);
        return sd_fail(c, "partitioned source %s: generator %.*s, partition %zu, record %lld: %s",
                       sd_ctx_transform(c), (int)cfg->generator.len,
                       (const char *)cfg->generator.ptr, i, (long long)pr->next_index,
                       err.msg[0] != '\0' ? err.msg : sd_status_str(st));
    }
    if (end) {
        pr->gen_done = true;
        sd_buf_deinit(&payload);
        return SD_OK;
    }
    bool untimed = wt == SD_NO_WRITE_TIME;
    rec r = { untimed ? SD_TIME_MIN : sd_time_clamp(wt),
              sd_strndup((const char *)payload.data, payload.len), payload.len, untimed };
    sd_buf_deinit(&payload);
    if (r.payload == NULL || sd_vec_push(&pr->recs, &r) != SD_OK) {
        sd_free(r.payload);
        return SD_ENOMEM;
    }
    pr->next_index++;
    return SD_OK;
}

/* ================================================================ stepping */

static sd_status emit_payload(sd_ctx *c, size_t output, const char *s, size_t len, sd_time ts)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = sd_enc_bytes(&b, s, len);
    if (st == SD_OK) {
        st = sd_emit_ts(c, output, sd_buf_bytes(&b), ts);
    }
    sd_buf_deinit(&b);
    return st;
}

static sd_status put_time(sd_buf *b, sd_time t)
{
    return t <= SD_TIME_MIN ? sd_buf_append_str(b, "-inf") : sd_buf_printf(b, "%lld", (long long)t);
}

/* The history line of this step: emitted when its snapshot (all but the T+ part) changed. */
static sd_status history(sd_ctx *c, src_state *s, sd_time now)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = sd_buf_append_str(&b, "source=");
    if (st == SD_OK) {
        st = put_time(&b, s->wm.wm);
    }
    for (size_t i = 0; i < s->n && st == SD_OK; i++) {
        if ((st = sd_buf_printf(&b, " p%zu=", i)) == SD_OK &&
            (st = put_time(&b, s->wm.parts[i].est.wm)) == SD_OK && s->wm.parts[i].idle) {
            st = sd_buf_append_str(&b, " idle");
        }
    }
    if (st == SD_OK &&
        (s->last == NULL || strlen(s->last) != b.len || memcmp(s->last, b.data, b.len) != 0)) {
        char *snap = sd_strndup((const char *)b.data, b.len);
        char *line =
            snap != NULL ? sd_asprintf("T+%lld %s", (long long)(now - s->start), snap) : NULL;
        if (line == NULL) {
            st = SD_ENOMEM;
        } else {
            st = emit_payload(c, 1, line, strlen(line), s->wm.wm);
        }
        sd_free(line);
        if (st == SD_OK) {
            sd_free(s->last);
            s->last = snap;
        } else {
            sd_free(snap);
        }
    }
    sd_buf_deinit(&b);
    return st;
}

/* Step 0: a fresh state; in replay mode the files are read whole and t0 found. */
static sd_status start_state(sd_ctx *c, const src_config *cfg, src_state **out)
{
    src_state *s = sd_calloc(1, sizeof(*s));
    sd_status st = s != NULL ? SD_OK : SD_ENOMEM;
    if (st == SD_OK) {
        s->key = sd_strndup((const char *)cfg->nonce.ptr, cfg->nonce.len);
        s->parts = sd_calloc(cfg->n, sizeof(*s->parts));
        st = s->key != NULL && s->parts != NULL ? SD_OK : SD_ENOMEM;
    }
    for (size_t i = 0; st == SD_OK && i < cfg->n; i++) {
        sd_vec_init(&s->parts[i].recs, sizeof(rec));
        s->n = i + 1;
        s->parts[i].path = sd_strndup((const char *)cfg->paths[i].ptr, cfg->paths[i].len);
        st = s->parts[i].path != NULL ? SD_OK : SD_ENOMEM;
        if (st == SD_OK && cfg->generator.len > 0) {
            st = gen_next(c, cfg, &s->parts[i], i); /* the first record, to find t0 */
        } else if (st == SD_OK && !cfg->tail) {
            st = read_more(c, &s->parts[i], true);
        }
    }
    if (st == SD_OK) {
        if (cfg->tail) {
            s->start = sd_wall_now_ms();
        } else {
            sd_time first = SD_TIME_MAX;
            for (size_t i = 0; i < s->n; i++) {
                /* Each partition's first record with a write time. */
                const sd_vec *recs = &s->parts[i].recs;
                for (size_t k = 0; k < recs->len; k++) {
                    const rec *r = SD_VEC_AT(recs, rec, k);
                    if (!r->untimed) {
                        first = r->wt < first ? r->wt : first;
                        break;
                    }
                }
            }
            s->start = first == SD_TIME_MAX ? 0 : sd__floor_div(first, cfg->gran_ms) * cfg->gran_ms;
        }
        st = sd__partwm_init(&s->wm, s->n, cfg->delay, cfg->idle_ms, cfg->gran_ms, s->start);
    }
    if (st != SD_OK) {
        state_free(s);
        return st == SD_ENOMEM
                   ? sd_fail(c, "partitioned source %s: out of memory", sd_ctx_transform(c))
                   : st;
    }
    *out = s;
    return SD_OK;
}

/* One step at source time now: deliver, recompute, report. OUT: *finished. */
static sd_status step(sd_ctx *c, const src_config *cfg, src_state *s, sd_time now, bool *finished)
{
    sd_status st = SD_OK;
    bool all_done = true;
    const bool gen = cfg->generator.len > 0;
    for (size_t i = 0; i < s->n && st == SD_OK; i++) {
        part_reader *pr = &s->parts[i];
        if (cfg->tail && !gen) {
            st = read_more(c, pr, false);
        }
        /* In file order; replay (and any generator) holds a record back until the clock
         * reaches its write time. A step delivers at most MAX_PER_STEP records of a
         * partition, so a generator that never ends cannot hold a step forever. */
        for (int64_t k = 0; st == SD_OK && k < MAX_PER_STEP; k++) {
            if (gen && pr->head == pr->recs.len && !pr->gen_done &&
                (st = gen_next(c, cfg, pr, i)) != SD_OK) {
                break;
            }
            if (pr->head >= pr->recs.len) {
                break;
            }
            rec *r = SD_VEC_AT(&pr->recs, rec, pr->head);
            if ((!cfg->tail || gen) && !r->untimed && r->wt > now) {
                break; /* one without a write time comes with its predecessor */
            }
            st = emit_payload(c, 0, r->payload, r->len, r->wt);
            if (r->untimed) {
                sd__partwm_activity(&s->wm, i, now);
            } else {
                sd__partwm_observe(&s->wm, i, r->wt, now);
            }
            sd_free(r->payload);
            r->payload = NULL;
            pr->head++;
        }
        if (pr->head == pr->recs.len && pr->head > 0) {
            for (size_t k = 0; k < pr->recs.len; k++) {
                sd_free(SD_VEC_AT(&pr->recs, rec, k)->payload);
            }
            sd_vec_reset(&pr->recs);
            pr->head = 0;
        }
        all_done = all_done && pr->recs.len == 0 && (!gen || pr->gen_done);
    }
    if (st != SD_OK) {
        return st;
    }
    (void)sd__partwm_advance(&s->wm, now);
    /* Visible in the bundle's metrics (and so in GetJobMetrics and sd_run_result). */
    for (size_t i = 0; i < s->n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "p%zu", i);
        sd__ctx_partition_wm(c, name, s->wm.parts[i].est.wm);
    }
    sd__ctx_partition_wm(c, "source", s->wm.wm);
    if ((st = history(c, s, now)) != SD_OK || (st = sd_watermark_set(c, s->wm.wm)) != SD_OK) {
        return st;
    }
    *finished = cfg->tail ? cfg->run_for_ms > 0 && now - s->start >= cfg->run_for_ms : all_done;
    return SD_OK;
}

/* The first step at or after `from` whose clock reaches t. */
static int64_t step_at(const src_config *cfg, const src_state *s, sd_time t, int64_t from)
{
    if (t <= s->start) {
        return from;
    }
    int64_t k = (t - s->start) / cfg->gran_ms + ((t - s->start) % cfg->gran_ms != 0 ? 1 : 0);
    return k > from ? k : from;
}

/*
 * Replay: the next step in which something can happen — a partition's next record appears or
 * an active partition's silence reaches the idle timeout. The steps before it would observe
 * nothing and change no partition, so their watermark would be this step's: skipping them
 * changes nothing visible and keeps long quiet stretches (an hour at a 1 s granularity) from
 * costing thousands of bundles. Capped so that the resume delay cannot overflow.
 */
static int64_t next_step(const src_config *cfg, const src_state *s, int64_t pos)
{
    const int64_t cap = pos + (INT64_MAX / 4) / cfg->gran_ms;
    int64_t best = cap;
    for (size_t i = 0; i < s->n; i++) {
        const part_reader *pr = &s->parts[i];
        if (pr->head >= pr->recs.len && cfg->generator.len > 0 && !pr->gen_done) {
            return pos + 1; /* a step's cap stopped the generator: go on at once */
        }
        if (pr->head < pr->recs.len) {
            const rec *r = SD_VEC_AT(&pr->recs, rec, pr->head);
            int64_t k = r->untimed ? pos + 1 : step_at(cfg, s, r->wt, pos + 1);
            best = k < best ? k : best;
        }
        const sd__part_wm *pw = &s->wm.parts[i];
        if (!pw->idle && cfg->idle_ms > 0 && pw->last_data <= SD_TIME_MAX - cfg->idle_ms) {
            int64_t k = step_at(cfg, s, pw->last_data + cfg->idle_ms, pos + 1);
            best = k < best ? k : best;
        }
    }
    return best;
}

static sd_status part_initial(sd_ctx *c, void *state, sd_offset_range *out)
{
    (void)c;
    (void)state;
    out->from = 0;
    out->to = INT64_MAX;
    return SD_OK;
}

static sd_status part_process(sd_ctx *c, void *state)
{
    src_config cfg;
    (void)state;
    if (config_decode(sd_ctx_config(c), &cfg) != SD_OK) {
        return sd_fail(c, "partitioned source %s: malformed configuration", sd_ctx_transform(c));
    }
    int64_t pos = sd_ctx_restriction(c).from;
    if (!sd_try_claim(c, pos)) {
        return SD_OK;
    }
    char *key = sd_strndup((const char *)cfg.nonce.ptr, cfg.nonce.len);
    if (key == NULL) {
        return SD_ENOMEM;
    }
    src_state *s = table_take(key);
    sd_free(key);
    sd_status st = SD_OK;
    if (pos == 0) {
        state_free(s);
        s = NULL;
        st = start_state(c, &cfg, &s);
    } else if (s == NULL || s->step != pos) {
        st = sd_fail(c,
                     "partitioned source %s: step %lld ran in a worker process that did not run "
                     "step %lld (its partitions' state lives in the process that reads them; was "
                     "the read moved to another worker or split by the runner?)",
                     sd_ctx_transform(c), (long long)pos, (long long)(pos - 1));
        if (s != NULL) {
            table_put(s);
        }
        return st;
    }
    if (st != SD_OK) {
        return st;
    }
    sd_time now;
    if (cfg.tail) {
        now = sd_wall_now_ms();
    } else {
        /* The step's time on the replay clock, saturating at the end of time. */
        now = pos > (SD_TIME_MAX - s->start) / cfg.gran_ms ? SD_TIME_MAX
                                                           : s->start + pos * cfg.gran_ms;
    }
    bool finished = false;
    st = step(c, &cfg, s, now, &finished);
    if (st != SD_OK || finished) {
        state_free(s);
        if (st == SD_OK) {
            (void)sd_try_claim(c, INT64_MAX); /* refused: the restriction is done */
        }
        return st;
    }
    int64_t next = cfg.tail ? pos + 1 : next_step(&cfg, s, pos);
    /* Claim the steps skipped over (nothing would happen in them), so the residual starts
     * at the next step that does something and the clock stays start + step * granularity.
     * (A refused claim means the runner cut the restriction meanwhile: handled below.) */
    if (next - 1 > pos) {
        SD_IGNORE(sd_try_claim(c, next - 1));
    }
    sd_offset_range r = sd_ctx_restriction(c);
    if (r.to != INT64_MAX) {
        /*
         * The runner checkpointed this call (Sundial does so to an SDF bundle running longer
         * than sundial_sdf_checkpoint_ms): its residual starts at r.to, now, without the
         * resume delay. On the replay clock the step number alone says the time, so nothing
         * visible changes; a cut beyond the next step would leave two readers of one state.
         */
        if (r.to > next) {
            state_free(s);
            return sd_fail(c,
                           "partitioned source %s: the runner split the read at step %lld "
                           "(beyond the next step %lld); only checkpoints are supported",
                           sd_ctx_transform(c), (long long)r.to, (long long)next);
        }
        s->step = r.to;
        table_put(s);
        return SD_OK;
    }
    s->step = next;
    table_put(s);
    return sd_resume(c, (next - pos) * cfg.gran_ms);
}

/* ================================================================ construction */

static sd_status duration_or(const char *text, const char *dflt, sd_interval *out, sd_err *err)
{
    return sd_duration_parse(text != NULL ? text : dflt, out, err);
}

static sd_status
build_config(const char *name, const sd_partitioned_spec *spec, sd_buf *cfg, sd_err *err)
{
    static atomic_long counter;
    sd_interval delay, idle, gran, run_for = { 0, 0 };
    sd_status st;
    if ((st = duration_or(spec->delay, "PT0S", &delay, err)) != SD_OK ||
        (st = duration_or(spec->idle_timeout, "PT5S", &idle, err)) != SD_OK ||
        (st = duration_or(spec->granularity, "PT1S", &gran, err)) != SD_OK ||
        (spec->run_for != NULL &&
         (st = sd_duration_parse(spec->run_for, &run_for, err)) != SD_OK)) {
        return sd_err_prefix(err, "ReadPartitioned \"%s\": ", name);
    }
    if (idle.months != 0 || gran.months != 0 || run_for.months != 0) {
        return sd_err_set(err, SD_EINVAL,
                          "ReadPartitioned \"%s\": the idle timeout, granularity and run_for "
                          "need a fixed length (no years or months)",
                          name);
    }
    if (gran.ms <= 0) {
        return sd_err_set(err, SD_EINVAL,
                          "ReadPartitioned \"%s\": the granularity must be more than 0", name);
    }
    long id = atomic_fetch_add(&counter, 1);
    char nonce[96];
    snprintf(nonce, sizeof(nonce), "%ld-%ld-%lld", (long)getpid(), id, (long long)sd_wall_now_ms());
    st = sd_buf_put_lp(cfg, sd_bytes_str(nonce));
    if (st == SD_OK) {
        st = sd_enc_int(cfg, spec->tail ? 1 : 0);
    }
    if (st == SD_OK) {
        st = sd_enc_int(cfg, (int64_t)spec->n_partitions);
    }
    char cwd[4096];
    bool have_cwd = getcwd(cwd, sizeof(cwd)) != NULL;
    for (size_t i = 0; i < spec->n_partitions && st == SD_OK; i++) {
        const char *f = spec->generator != NULL ? "" : spec->files[i];
        char *abs = f[0] == '/' || !have_cwd ? sd_strdup(f) : sd_asprintf("%s/%s", cwd, f);
        st = abs == NULL ? SD_ENOMEM : sd_buf_put_lp(cfg, sd_bytes_str(abs));
        sd_free(abs);
    }
    if (st == SD_OK && (st = sd_enc_int(cfg, delay.months)) == SD_OK &&
        (st = sd_enc_int(cfg, delay.ms)) == SD_OK && (st = sd_enc_int(cfg, idle.ms)) == SD_OK &&
        (st = sd_enc_int(cfg, gran.ms)) == SD_OK && (st = sd_enc_int(cfg, run_for.ms)) == SD_OK &&
        (st = sd_buf_put_lp(cfg, sd_bytes_str(spec->generator))) == SD_OK) {
        st = sd_buf_put_lp(cfg, spec->generator_config);
    }
    return st == SD_OK ? SD_OK : sd_err_set(err, st, "out of memory");
}

sd_pcoll *sd_read_partitioned(sd_pipeline *p,
                              const char *name,
                              const sd_partitioned_spec *spec,
                              sd_pcoll **watermarks)
{
    const char *nm = name != NULL ? name : "ReadPartitioned";
    if (sd__pipeline_failed(p)) {
        return NULL;
    }
    if (spec == NULL || spec->n_partitions == 0 || spec->n_partitions > MAX_PARTITIONS ||
        (spec->files == NULL) == (spec->generator == NULL)) {
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "ReadPartitioned \"%s\": expected 1 to %d partitions, each a file "
                                 "(files) or all from a generator (generator), not both",
                                 nm, MAX_PARTITIONS);
    }
    if (spec->generator != NULL && sd__find_partition_gen(sd_bytes_str(spec->generator)) == NULL) {
        return sd__pipeline_fail(p, SD_EINVAL,
                                 "ReadPartitioned \"%s\": no partition generator \"%s\" is "
                                 "registered (sd_register_partition_gen)",
                                 nm, spec->generator);
    }
    for (size_t i = 0; spec->files != NULL && i < spec->n_partitions; i++) {
        if (spec->files[i] == NULL || spec->files[i][0] == '\0') {
            return sd__pipeline_fail(
                p, SD_EINVAL, "ReadPartitioned \"%s\": partition %zu has no file name", nm, i);
        }
    }
    sd_buf cfg;
    sd_err err;
    sd_err_clear(&err);
    sd_buf_init(&cfg, 0);
    if (build_config(nm, spec, &cfg, &err) != SD_OK) {
        sd_buf_deinit(&cfg);
        return sd__pipeline_fail(p, err.code, "%s", err.msg);
    }
    long saved = sd__pipeline_begin_composite(p, nm);
    sd_pcoll *imp = sd_impulse(p, "Impulse");
    const sd_pcoder *str = sd_pcoder_string(p);
    const sd_pcoder *coders[2] = { str, str };
    const char *const tags[2] = { "records", "watermarks" };
    sd_pardo_spec ps = { .dofn = SD_FN_PARTITIONED,
                         .config = sd_buf_bytes(&cfg),
                         .n_outputs = 2,
                         .output_coders = coders,
                         .output_tags = tags,
                         .watermark = { .kind = SD_WM_MANUAL } };
    sd_pcoll *outs[2] = { NULL, NULL };
    sd_pcoll *records = sd_pardo(p, "Read", imp, &ps, outs);
    sd__pipeline_end_composite(p, saved, records);
    sd_buf_deinit(&cfg);
    if (watermarks != NULL) {
        *watermarks = records != NULL ? outs[1] : NULL;
    }
    return sd__pipeline_failed(p) ? NULL : records;
}

void sd__register_partitioned_builtins(void)
{
    static const sd_dofn fn = { .process = part_process,
                                .initial_restriction = part_initial,
                                .unbounded_per_element = true };
    if (sd_register_dofn(SD_FN_PARTITIONED, &fn) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
}
