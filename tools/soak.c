/*
 * soak: a streaming pipeline on the wall clock, from the C SDK, with every output checked.
 *
 *   soak --endpoint=HOST:PORT [--seconds N] [--summary FILE]
 *
 * The job (see docs/soak.md): an unbounded splittable source emits element i (KV<"kNNN", i>)
 * at event time t0 + i ms, no sooner than that wall time, so about 1,000 a second; the keys
 * follow a 20 s cycle: in its first 10 s every one of 300 keys gets elements, in the second
 * only keys 0..149, so keys 150..299 are quiet for 10 s each cycle. Two branches:
 *   - 10 s fixed windows, early firings 2 s of processing time after a pane's first element,
 *     discarding panes, then a GroupByKey; the sink adds up each (window, key)'s panes;
 *   - a stateful DoFn keeping (count, sum, last, due) per key and a processing-time timer
 *     reset to 5 s after each element; when it fires the DoFn records the fire's lateness
 *     (wall time now - the due time it set) and what it held, and clears its state.
 * After the last element the source idles 8 s (the watermark still advancing) so every key
 * goes quiet and fires once more. When the job is done, the program computes what every
 * (window, key) and every quiet period must hold from the element formula and compares.
 * The summary (a JSON line) gives counts, mismatches, lateness and watermark-lag
 * percentiles; exit 0 when every output was exact.
 *
 * The checks run in this process: the job's workers are this process (LOOPBACK).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sundial/sundial.h>
#include <time.h>

#define KEYS      300
#define CYCLE_MS  20000
#define HALF_MS   10000
#define WINDOW_MS 10000
#define EARLY_MS  2000
#define QUIET_MS  5000
#define TAIL_MS   8000
#define RESUME_MS 100

/* The key of element i: every key in the first half of a cycle, keys below KEYS/2 after. */
static int key_of(int64_t i)
{
    return (int)(i % CYCLE_MS < HALF_MS ? i % KEYS : i % (KEYS / 2));
}

/* What one (window, key) received over its panes. */
typedef struct cell {
    int64_t count, sum;
    int32_t panes, on_time, early, late, bad;
} cell;

/* One timer firing: what the key's state held, and how late the timer was. */
typedef struct fire {
    int32_t key;
    int64_t count, sum, last;
    int64_t lateness_ms;
    int64_t at_ms; /* wall time of the fire */
} fire;

static struct {
    pthread_mutex_t mu;
    int64_t t0, n;
    int64_t n_windows;
    cell *cells;        /* n_windows * KEYS */
    int64_t *first_lag; /* per window: first ON_TIME pane's wall time - window end; -1 none */
    int64_t *last_lag;  /* per window: last ON_TIME pane's */
    fire *fires;
    size_t n_fires, cap_fires;
    /* Quiet periods (of event time) that ended without a fire, as the DoFn saw them: key, the
     * period's last element, and in lateness_ms the processing time between that element and
     * the next (under 5 s: a backlog compressed the gap, the timer was rightly reset). */
    fire *joined;
    size_t n_joined, cap_joined;
    int64_t emitted, elements_seen, out_of_window;
    int64_t last_src_ms, src_max_gap_ms, src_max_gap_at; /* the source's longest pause */
    int n_odd;                                           /* odd fires printed so far */
    char err[256];
} g = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void note_error(const char *msg)
{
    pthread_mutex_lock(&g.mu);
    if (g.err[0] == '\0') {
        snprintf(g.err, sizeof(g.err), "%s", msg);
    }
    pthread_mutex_unlock(&g.mu);
}

/* Append f to *v (n, cap), under g.mu. False when out of memory. */
static bool fires_push(fire **v, size_t *n, size_t *cap, fire f)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4096;
        fire *nv = realloc(*v, nc * sizeof(**v));
        if (nv == NULL) {
            return false;
        }
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = f;
    return true;
}

static int64_t cfg_int(sd_reader *r)
{
    int64_t v = 0;
    return sd_read_int(r, &v) == SD_OK ? v : 0;
}

/* ---- the source ------------------------------------------------------------------------- */

static sd_status src_initial(sd_ctx *c, void *state, sd_offset_range *out)
{
    (void)state;
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    int64_t t0 = cfg_int(&r), n = cfg_int(&r);
    (void)t0;
    out->from = 0;
    out->to = n + TAIL_MS; /* offsets from n on are idle milliseconds: the tail */
    return SD_OK;
}

static sd_status src_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    int64_t t0 = cfg_int(&r), n = cfg_int(&r);
    int64_t i = sd_ctx_restriction(c).from;
    int64_t now = sd_wall_now_ms();
    sd_buf b;
    sd_buf_init(&b, 0);
    sd_status st = SD_OK;
    int64_t emitted = 0;
    bool done = false;
    while (st == SD_OK && t0 + i <= now) {
        if (!sd_try_claim(c, i)) {
            done = true; /* the restriction is done, or the runner split it here */
            break;
        }
        if (i < n) {
            char key[16];
            snprintf(key, sizeof(key), "k%03d", key_of(i));
            b.len = 0;
            st = sd_enc_str(&b, key);
            if (st == SD_OK) {
                st = sd_enc_int(&b, i);
            }
            if (st == SD_OK) {
                st = sd_emit_ts(c, 0, sd_buf_bytes(&b), t0 + i);
            }
            emitted++;
        }
        i++;
    }
    sd_buf_deinit(&b);
    pthread_mutex_lock(&g.mu);
    g.emitted += emitted;
    if (g.last_src_ms != 0 && now - g.last_src_ms > g.src_max_gap_ms) {
        g.src_max_gap_ms = now - g.last_src_ms;
        g.src_max_gap_at = g.last_src_ms - g.t0;
    }
    g.last_src_ms = now;
    pthread_mutex_unlock(&g.mu);
    if (done || st != SD_OK) {
        return st;
    }
    st = sd_watermark_set(c, t0 + i); /* the next element's timestamp */
    return st != SD_OK ? st : sd_resume(c, RESUME_MS);
}

/* ---- the windowed branch's sink ---------------------------------------------------------- */

static sd_status parse_key(sd_bytes kb, int *key)
{
    if (kb.len != 4 || ((const char *)kb.ptr)[0] != 'k') {
        return SD_EPROTO;
    }
    const char *s = (const char *)kb.ptr + 1;
    int k = 0;
    for (int j = 0; j < 3; j++) {
        if (s[j] < '0' || s[j] > '9') {
            return SD_EPROTO;
        }
        k = k * 10 + (s[j] - '0');
    }
    *key = k;
    return k < KEYS ? SD_OK : SD_EPROTO;
}

static sd_status panes_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes kb, ks, v;
    sd_iter it;
    bool has;
    int key;
    sd_status st = sd_ctx_grouped(c, &kb, &it);
    sd_reader kr = sd_reader_make(kb);
    if (st != SD_OK || sd_read_bytes(&kr, &ks) != SD_OK || parse_key(ks, &key) != SD_OK) {
        return sd_fail(c, "panes: element is not KV<kNNN, Iterable<int>>");
    }
    sd_window w = sd_ctx_window(c);
    sd_pane pane = sd_ctx_pane(c);
    int64_t now = sd_wall_now_ms();
    int64_t count = 0, sum = 0, outside = 0;
    while ((st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        int64_t i;
        if (sd_read_int(&r, &i) != SD_OK) {
            return sd_fail(c, "panes: value is not an int");
        }
        if (g.t0 + i < w.start || g.t0 + i >= w.end || key_of(i) != key) {
            outside++;
        }
        count++;
        sum += i;
    }
    if (st != SD_OK) {
        return st;
    }
    int64_t wi = (w.start - g.t0) / WINDOW_MS;
    pthread_mutex_lock(&g.mu);
    g.elements_seen += count;
    g.out_of_window += outside;
    if (w.start < g.t0 || wi >= g.n_windows || (w.start - g.t0) % WINDOW_MS != 0) {
        g.out_of_window += count;
        pthread_mutex_unlock(&g.mu);
        return SD_OK;
    }
    cell *cl = &g.cells[wi * KEYS + key];
    cl->count += count;
    cl->sum += sum;
    cl->panes++;
    cl->early += pane.timing == SD_PANE_EARLY;
    cl->late += pane.timing == SD_PANE_LATE;
    cl->bad += pane.timing == SD_PANE_UNKNOWN;
    if (pane.timing == SD_PANE_ON_TIME) {
        cl->on_time++;
        int64_t lag = now - w.end;
        if (g.first_lag[wi] < 0 || lag < g.first_lag[wi]) {
            g.first_lag[wi] = lag;
        }
        if (lag > g.last_lag[wi]) {
            g.last_lag[wi] = lag;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return SD_OK;
}

/* ---- the stateful branch ------------------------------------------------------------------ */

typedef struct acc {
    int64_t count, sum, last, due;
} acc;

static sd_status acc_read(sd_ctx *c, acc *a)
{
    sd_iter it;
    sd_bytes v, inner;
    bool has;
    memset(a, 0, sizeof(*a));
    sd_status st = sd_state_read(c, "acc", &it);
    if (st == SD_OK) {
        st = sd_iter_next(&it, &v, &has);
    }
    if (st != SD_OK || !has) {
        return st;
    }
    sd_reader r = sd_reader_make(v);
    if (sd_read_bytes(&r, &inner) != SD_OK) {
        return SD_EPROTO;
    }
    sd_reader ir = sd_reader_make(inner);
    if (sd_read_int(&ir, &a->count) != SD_OK || sd_read_int(&ir, &a->sum) != SD_OK ||
        sd_read_int(&ir, &a->last) != SD_OK || sd_read_int(&ir, &a->due) != SD_OK) {
        return SD_EPROTO;
    }
    return SD_OK;
}

static sd_status acc_write(sd_ctx *c, const acc *a)
{
    sd_buf inner, outer;
    sd_buf_init(&inner, 0);
    sd_buf_init(&outer, 0);
    sd_status st = sd_enc_int(&inner, a->count);
    if (st == SD_OK) {
        st = sd_enc_int(&inner, a->sum);
    }
    if (st == SD_OK) {
        st = sd_enc_int(&inner, a->last);
    }
    if (st == SD_OK) {
        st = sd_enc_int(&inner, a->due);
    }
    if (st == SD_OK) {
        st = sd_enc_bytes(&outer, inner.data, inner.len);
    }
    if (st == SD_OK) {
        st = sd_state_write(c, "acc", sd_buf_bytes(&outer));
    }
    sd_buf_deinit(&inner);
    sd_buf_deinit(&outer);
    return st;
}

static sd_status quiet_process(sd_ctx *c, void *state)
{
    (void)state;
    sd_bytes kb, vb;
    acc a;
    int64_t i;
    if (sd_ctx_kv(c, &kb, &vb) != SD_OK) {
        return sd_fail(c, "quiet: element is not a KV");
    }
    sd_reader r = sd_reader_make(vb);
    if (sd_read_int(&r, &i) != SD_OK) {
        return sd_fail(c, "quiet: value is not an int");
    }
    sd_status st = acc_read(c, &a);
    if (st != SD_OK) {
        return sd_fail(c, "quiet: reading state: %s", sd_status_name(st));
    }
    int64_t key = 0;
    sd_reader kr = sd_reader_make(kb);
    sd_bytes ks;
    if (a.count > 0 && i - a.last > QUIET_MS && sd_read_bytes(&kr, &ks) == SD_OK) {
        int k;
        if (parse_key(ks, &k) == SD_OK) {
            key = k; /* a quiet period went by without a fire: note how long it really was */
            int64_t gap = sd_ctx_processing_time(c) - (a.due - QUIET_MS);
            pthread_mutex_lock(&g.mu);
            bool ok = fires_push(&g.joined, &g.n_joined, &g.cap_joined,
                                 (fire){ (int32_t)key, 0, 0, a.last, gap, 0 });
            pthread_mutex_unlock(&g.mu);
            if (!ok) {
                return sd_fail(c, "quiet: out of memory");
            }
        }
    }
    a.count++;
    a.sum += i;
    a.last = i > a.last ? i : a.last;
    a.due = sd_ctx_processing_time(c) + QUIET_MS;
    st = sd_timer_set(c, "quiet", SD_BYTES_NULL, a.due, sd_ctx_timestamp(c));
    return st != SD_OK ? st : acc_write(c, &a);
}

static sd_status quiet_timer(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    (void)state;
    (void)family;
    (void)tag;
    int64_t now = sd_wall_now_ms();
    acc a;
    int key;
    sd_reader kr = sd_reader_make(sd_ctx_key(c));
    sd_bytes kb;
    if (sd_read_bytes(&kr, &kb) != SD_OK || parse_key(kb, &key) != SD_OK) {
        return sd_fail(c, "quiet: bad key");
    }
    sd_status st = acc_read(c, &a);
    if (st != SD_OK) {
        return sd_fail(c, "quiet timer: reading state: %s", sd_status_name(st));
    }
    pthread_mutex_lock(&g.mu);
    if (!fires_push(&g.fires, &g.n_fires, &g.cap_fires,
                    (fire){ key, a.count, a.sum, a.last, a.count ? now - a.due : -1, now })) {
        pthread_mutex_unlock(&g.mu);
        return sd_fail(c, "quiet timer: out of memory");
    }
    if ((a.count == 0 || now - a.due > 1000 || now < a.due) && g.n_odd++ < 10) {
        fprintf(stderr,
                "soak: odd fire of k%03d at t=%lld ms: state %s, due t=%lld ms, fire time "
                "t=%lld ms\n",
                key, (long long)(now - g.t0), a.count ? "held" : "EMPTY", (long long)(a.due - g.t0),
                (long long)(sd_ctx_fire_time(c) - g.t0));
    }
    pthread_mutex_unlock(&g.mu);
    return sd_state_clear(c, "acc");
}

/* ---- checking ------------------------------------------------------------------------------ */

static int cmp_fire(const void *a, const void *b)
{
    const fire *x = a, *y = b;
    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    return x->last < y->last ? -1 : x->last > y->last;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100) of v[0..n) (sorted in place); -1 for none. */
static int64_t pct(int64_t *v, size_t n, double p)
{
    if (n == 0) {
        return -1;
    }
    qsort(v, n, sizeof(*v), cmp_i64);
    size_t at = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return v[at < n ? at : n - 1];
}

typedef struct report {
    int64_t windows, cells, window_mismatches, early_panes, late_panes;
    int64_t fires_expected, fires_seen, fires_extra, fires_joined, fire_mismatches;
    int64_t late_p50, late_p99, late_max, lag_p50, lag_p99, lag_max, lag_all_max;
} report;

/* Every (window, key): the panes add up to what the formula generated, one ON_TIME pane. */
static void check_windows(report *rep)
{
    cell *want = calloc((size_t)KEYS, sizeof(*want));
    int64_t *lags = calloc((size_t)g.n_windows + 1, sizeof(*lags));
    size_t n_lags = 0;
    for (int64_t w = 0; w < g.n_windows && want && lags; w++) {
        memset(want, 0, (size_t)KEYS * sizeof(*want));
        for (int64_t i = w * WINDOW_MS; i < (w + 1) * WINDOW_MS && i < g.n; i++) {
            want[key_of(i)].count++;
            want[key_of(i)].sum += i;
        }
        bool bad = false;
        for (int k = 0; k < KEYS; k++) {
            const cell *got = &g.cells[w * KEYS + k];
            bool has = want[k].count > 0;
            if (got->count != want[k].count || got->sum != want[k].sum ||
                got->on_time != (has ? 1 : 0) || got->bad != 0 || (!has && got->panes != 0)) {
                if (rep->window_mismatches < 5) {
                    fprintf(stderr,
                            "soak: window %lld key k%03d: got %lld elements (sum %lld) in %d "
                            "panes (%d on time), want %lld (sum %lld)\n",
                            (long long)w, k, (long long)got->count, (long long)got->sum, got->panes,
                            got->on_time, (long long)want[k].count, (long long)want[k].sum);
                }
                bad = true;
            }
            rep->cells += has;
            rep->early_panes += got->early;
            rep->late_panes += got->late;
        }
        rep->window_mismatches += bad;
        rep->windows++;
        if (g.first_lag[w] >= 0) {
            lags[n_lags++] = g.first_lag[w];
        }
        rep->lag_all_max = g.last_lag[w] > rep->lag_all_max ? g.last_lag[w] : rep->lag_all_max;
    }
    rep->lag_p50 = pct(lags, n_lags, 50);
    rep->lag_p99 = pct(lags, n_lags, 99);
    rep->lag_max = n_lags ? lags[n_lags - 1] : -1;
    free(want);
    free(lags);
}

/*
 * The timers. Each fire must hold exactly the key's elements since its previous fire, up to
 * the `last` it reports (nothing lost or counted twice in state); every quiet period of the
 * design (a key without elements for more than QUIET_MS of event time, and the tail) must end
 * in a fire (no lost timer); no fire may come before the due time its state holds, and none
 * may find the state empty (a timer fired twice, or after a reset in the same bundle). Fires
 * beyond the quiet periods are legitimate when the job stalled for more than QUIET_MS (a key
 * really was quiet that long): counted as extra, not as mismatches. A quiet period without a
 * fire is legitimate when a backlog compressed it: the DoFn saw the key's next element less
 * than QUIET_MS of processing time after the last one (g.joined), so the timer was rightly
 * reset before it came due: counted as joined.
 */
static void check_fires(report *rep)
{
    size_t *next = calloc((size_t)KEYS, sizeof(*next)); /* per key: index of its next fire */
    size_t *first = calloc((size_t)KEYS + 1, sizeof(*first));
    acc *open = calloc((size_t)KEYS, sizeof(*open));      /* count, sum, last since the last fire */
    bool *closed = calloc((size_t)KEYS, sizeof(*closed)); /* a fire ended at the last element */
    int64_t *late = malloc((g.n_fires + 1) * sizeof(*late));
    if (next == NULL || first == NULL || open == NULL || closed == NULL || late == NULL) {
        rep->fire_mismatches = -1;
        goto out;
    }
    if (g.n_fires > 0) { /* qsort's array may not be NULL, even for no element */
        qsort(g.fires, g.n_fires, sizeof(*g.fires), cmp_fire);
    }
    if (g.n_joined > 0) {
        qsort(g.joined, g.n_joined, sizeof(*g.joined), cmp_fire);
    }
    for (size_t j = 0, k = 0; k <= KEYS; k++) { /* fires of key k: [first[k], first[k+1]) */
        while (j < g.n_fires && g.fires[j].key < (int32_t)k) {
            j++;
        }
        first[k] = j;
    }
    size_t nl = 0;
    for (size_t j = 0; j < g.n_fires; j++) {
        const fire *f = &g.fires[j];
        if (f->count == 0 || f->lateness_ms < 0) {
            rep->fire_mismatches++; /* empty (fired twice) or before its due time */
            if (rep->fire_mismatches <= 5) {
                fprintf(stderr, "soak: timer of k%03d fired %s\n", f->key,
                        f->count == 0 ? "with empty state" : "before its due time");
            }
        }
        if (f->count > 0) {
            late[nl++] = f->lateness_ms;
        }
    }
    for (int k = 0; k < KEYS; k++) {
        next[k] = first[k];
        while (next[k] < first[k + 1] && g.fires[next[k]].count == 0) {
            next[k]++;
        }
    }
    for (int64_t i = 0; i <= g.n; i++) {
        int k = i < g.n ? key_of(i) : 0;
        for (int kk = i < g.n ? k : 0; kk < (i < g.n ? k + 1 : KEYS); kk++) {
            acc *a = &open[kk];
            /* a quiet period before i (or the tail): it must have ended in a fire */
            if (a->count > 0 && (i == g.n || i - a->last > QUIET_MS)) {
                rep->fires_expected++;
                fire probe = { kk, 0, 0, a->last, 0, 0 };
                const fire *j = i == g.n || g.n_joined == 0 ? NULL
                                                            : bsearch(&probe, g.joined, g.n_joined,
                                                                      sizeof(probe), cmp_fire);
                if (!closed[kk] && j != NULL && j->lateness_ms < QUIET_MS) {
                    rep->fires_joined++; /* a backlog compressed the gap below 5 s */
                } else if (!closed[kk]) {
                    rep->fire_mismatches++;
                    if (rep->fire_mismatches <= 5) {
                        fprintf(stderr, "soak: no timer fired for k%03d after element %lld\n", kk,
                                (long long)a->last);
                    }
                }
            }
        }
        if (i == g.n) {
            break;
        }
        acc *a = &open[k];
        if (closed[k] && i - a->last <= QUIET_MS && a->count > 0) {
            rep->fires_extra++; /* the previous fire split an active period */
        }
        if (closed[k]) {
            memset(a, 0, sizeof(*a));
            closed[k] = false;
        }
        a->count++;
        a->sum += i;
        a->last = i;
        while (next[k] < first[k + 1] && g.fires[next[k]].last < i) {
            rep->fire_mismatches++; /* a fire whose last element is none of this key's */
            next[k]++;
        }
        if (next[k] < first[k + 1] && g.fires[next[k]].last == i) {
            const fire *f = &g.fires[next[k]++];
            if (f->count != a->count || f->sum != a->sum) {
                rep->fire_mismatches++;
                if (rep->fire_mismatches <= 5) {
                    fprintf(stderr,
                            "soak: timer of k%03d at element %lld held %lld elements (sum %lld), "
                            "want %lld (sum %lld)\n",
                            k, (long long)i, (long long)f->count, (long long)f->sum,
                            (long long)a->count, (long long)a->sum);
                }
            }
            closed[k] = true;
        }
    }
    for (int k = 0; k < KEYS; k++) {
        for (; next[k] < first[k + 1]; next[k]++) {
            rep->fire_mismatches += g.fires[next[k]].count > 0; /* past the last element */
        }
    }
    rep->fires_seen = (int64_t)g.n_fires;
    rep->late_p50 = pct(late, nl, 50);
    rep->late_p99 = pct(late, nl, 99);
    rep->late_max = nl ? late[nl - 1] : -1;
out:
    free(next);
    free(first);
    free(open);
    free(closed);
    free(late);
}

/* ---- progress, options, main --------------------------------------------------------------- */

static volatile int running = 1;

static void *progress(void *arg)
{
    (void)arg;
    int64_t next = sd_mono_now_ms() + 10000;
    while (running) {
        nanosleep(&(struct timespec){ .tv_nsec = 200 * 1000 * 1000 }, NULL);
        if (sd_mono_now_ms() < next) {
            continue;
        }
        next += 10000;
        pthread_mutex_lock(&g.mu);
        int64_t worst = -1;
        for (size_t j = 0; j < g.n_fires; j++) {
            worst = g.fires[j].lateness_ms > worst ? g.fires[j].lateness_ms : worst;
        }
        fprintf(stderr, "soak: t=%llds emitted %lld, grouped %lld, fires %zu (latest %lld ms)\n",
                (long long)((sd_wall_now_ms() - g.t0) / 1000), (long long)g.emitted,
                (long long)g.elements_seen, g.n_fires, (long long)worst);
        pthread_mutex_unlock(&g.mu);
    }
    return NULL;
}

static sd_pipeline *build(int64_t t0, int64_t n, bool early_firings, sd_buf *cfg)
{
    sd_pipeline *p = sd_pipeline_create("soak");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    if (sd_enc_int(cfg, t0) != SD_OK || sd_enc_int(cfg, n) != SD_OK) {
        return p;
    }
    const sd_pcoder *outc[1] = { kv };
    sd_pardo_spec src = { .dofn = "soak:source",
                          .config = sd_buf_bytes(cfg),
                          .n_outputs = 1,
                          .output_coders = outc,
                          .watermark = { .kind = SD_WM_MANUAL } };
    sd_pcoll *in = sd_pardo(p, "Source", sd_impulse(p, "Impulse"), &src, NULL);

    const sd_trigger_spec *early =
        early_firings ? sd_trigger_after_processing_time(p, EARLY_MS) : NULL;
    sd_windowfn fn = { .kind = SD_WINDOW_FIXED,
                       .size_ms = WINDOW_MS,
                       .offset_ms = t0 % WINDOW_MS,
                       .trigger = sd_trigger_after_watermark(p, early, NULL),
                       .accumulation = SD_DISCARDING_PANES };
    sd_pcoll *grouped = sd_group_by_key(p, "Group", sd_window_into(p, "Window", in, &fn));
    sd_apply(p, "Panes", grouped, "soak:panes", SD_BYTES_NULL, sd_pcoder_string(p));

    sd_state_spec st = { .id = "acc", .kind = SD_STATE_VALUE, .coder = sd_pcoder_bytes(p) };
    sd_timer_spec timer = { "quiet", SD_PROCESSING_TIME };
    const sd_pcoder *qc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec quiet = { .dofn = "soak:quiet",
                            .n_outputs = 1,
                            .output_coders = qc,
                            .n_states = 1,
                            .states = &st,
                            .n_timers = 1,
                            .timers = &timer };
    sd_pardo(p, "Quiet", in, &quiet, NULL);
    return p;
}

/* One line per fire: its wall time (ms) and lateness (ms), for the lateness over time. */
static void write_fires(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "soak: cannot write %s\n", path);
        return;
    }
    for (size_t j = 0; j < g.n_fires; j++) {
        if (g.fires[j].count > 0) {
            fprintf(f, "%lld %lld\n", (long long)g.fires[j].at_ms,
                    (long long)g.fires[j].lateness_ms);
        }
    }
    fclose(f);
}

static void print_summary(FILE *f, const report *r, bool ok, const char *runner)
{
    fprintf(f,
            "{\"sdk\":\"c\",\"runner\":\"%s\",\"elements\":%lld,\"grouped\":%lld,"
            "\"windows\":%lld,\"window_keys\":%lld,\"window_mismatches\":%lld,"
            "\"early_panes\":%lld,\"late_panes\":%lld,\"fires_expected\":%lld,"
            "\"fires_seen\":%lld,\"fires_extra\":%lld,\"fires_joined\":%lld,\"fire_mismatches\":%"
            "lld,\"lateness_p50_ms\":"
            "%lld,"
            "\"lateness_p99_ms\":%lld,\"lateness_max_ms\":%lld,\"wm_lag_p50_ms\":%lld,"
            "\"wm_lag_p99_ms\":%lld,\"wm_lag_max_ms\":%lld,\"on_time_last_max_ms\":%lld,"
            "\"source_max_gap_ms\":%lld,\"source_max_gap_at_s\":%lld,"
            "\"exact\":%s,\"error\":\"%s\"}\n",
            runner, (long long)g.emitted, (long long)g.elements_seen, (long long)r->windows,
            (long long)r->cells, (long long)r->window_mismatches, (long long)r->early_panes,
            (long long)r->late_panes, (long long)r->fires_expected, (long long)r->fires_seen,
            (long long)r->fires_extra, (long long)r->fires_joined, (long long)r->fire_mismatches,
            (long long)r->late_p50, (long long)r->late_p99, (long long)r->late_max,
            (long long)r->lag_p50, (long long)r->lag_p99, (long long)r->lag_max,
            (long long)r->lag_all_max, (long long)g.src_max_gap_ms,
            (long long)(g.src_max_gap_at / 1000), ok ? "true" : "false", g.err);
}

int main(int argc, char **argv)
{
    static const sd_dofn source = { .process = src_process,
                                    .initial_restriction = src_initial,
                                    .unbounded_per_element = true };
    static const sd_dofn panes = { .process = panes_process };
    static const sd_dofn quiet = { .process = quiet_process, .on_timer = quiet_timer };
    int code;
    if (sd_register_dofn("soak:source", &source) != SD_OK ||
        sd_register_dofn("soak:panes", &panes) != SD_OK ||
        sd_register_dofn("soak:quiet", &quiet) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    sd_run_options opts = { .wall_clock = true };
    int64_t seconds = 100;
    const char *summary = NULL, *runner = "sundial", *fires = NULL;
    bool early_firings = true;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--endpoint=", 11) == 0) {
            opts.endpoint = argv[i] + 11;
        } else if (strncmp(argv[i], "--seconds=", 10) == 0 && atoll(argv[i] + 10) > 0) {
            seconds = atoll(argv[i] + 10);
        } else if (strncmp(argv[i], "--summary=", 10) == 0) {
            summary = argv[i] + 10;
        } else if (strncmp(argv[i], "--fires=", 8) == 0) {
            fires = argv[i] + 8;
        } else if (strcmp(argv[i], "--early-off") == 0) {
            early_firings = false;
        } else if (strncmp(argv[i], "--runner-name=", 14) == 0) {
            runner = argv[i] + 14;
        } else {
            fprintf(stderr, "usage: soak [--endpoint=HOST:PORT] [--seconds=N] [--summary=FILE] "
                            "[--runner-name=NAME] [--fires=FILE] [--early-off]\n");
            return 2;
        }
    }
    /* Whole cycles of data; the first element 5 s from now, after the job has started. */
    g.n = (seconds * 1000 + CYCLE_MS - 1) / CYCLE_MS * CYCLE_MS;
    g.t0 = sd_wall_now_ms() + 5000;
    g.n_windows = g.n / WINDOW_MS;
    g.cells = calloc((size_t)(g.n_windows * KEYS), sizeof(*g.cells));
    g.first_lag = malloc((size_t)g.n_windows * sizeof(int64_t));
    g.last_lag = malloc((size_t)g.n_windows * sizeof(int64_t));
    if (g.cells == NULL || g.first_lag == NULL || g.last_lag == NULL) {
        return 1;
    }
    for (int64_t w = 0; w < g.n_windows; w++) {
        g.first_lag[w] = -1;
        g.last_lag[w] = -1;
    }
    sd_buf cfg;
    sd_buf_init(&cfg, 0);
    sd_pipeline *p = build(g.t0, g.n, early_firings, &cfg);
    pthread_t th;
    bool have_th = pthread_create(&th, NULL, progress, NULL) == 0;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, NULL, &err);
    running = 0;
    if (have_th) {
        pthread_join(th, NULL);
    }
    if (st != SD_OK) {
        fprintf(stderr, "soak: the job failed: %s\n", sd_err_msg(&err));
        note_error("the job failed");
    }
    if (fires != NULL) {
        write_fires(fires); /* before the checks sort the fires */
    }
    report rep = { 0 };
    rep.lag_all_max = -1;
    check_windows(&rep);
    check_fires(&rep);
    bool ok = st == SD_OK && g.err[0] == '\0' && rep.window_mismatches == 0 &&
              rep.fire_mismatches == 0 && rep.late_panes == 0 && g.out_of_window == 0 &&
              g.elements_seen == g.n && rep.windows == g.n_windows;
    print_summary(stdout, &rep, ok, runner);
    if (summary != NULL) {
        FILE *f = fopen(summary, "w");
        if (f != NULL) {
            print_summary(f, &rep, ok, runner);
            fclose(f);
        }
    }
    sd_pipeline_destroy(p);
    sd_buf_deinit(&cfg);
    return ok ? 0 : 1;
}
