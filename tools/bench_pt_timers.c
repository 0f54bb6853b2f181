/*
 * bench_pt_timers: processing-time timers on the synthetic clock, with no SDK and no network.
 *
 *   bench_pt_timers [N_TIMERS [N_KEYS [DAYS [ROUNDS]]]]
 *                         (default 100000 timers, 1000 keys, 30 days, 5 rounds)
 *   bench_pt_timers --scale [ROUNDS]   10,000 / 100,000 / 1,000,000 timers over 1000 keys
 *
 * The job is impulse -> gen -> timers, driven through em.h by a fake executor. gen (a fake SDK
 * stage) emits one KV<key, index> per key; timers is a stateful stage whose fake DoFn sets,
 * for each key, N_TIMERS / N_KEYS processing-time timers (distinct tags) due at pseudo-random
 * times spread over DAYS days, and, when they fire, checks each one: it comes in firing-time
 * order, never early, exactly once (a bitmap over key x tag), and at exactly the time that
 * key and tag were set for (its delay from the job start). The engine runs in test mode: the
 * synthetic clock jumps to the next due timer whenever nothing else can happen, so a month of
 * processing time passes as fast as the engine can hand out the firings.
 *
 * The baseline is a plain binary heap pushing and popping the same due times: the bare cost
 * of ordering them (its sum of popped times must equal the engine's). The two sides run
 * interleaved, ROUNDS times each (each engine round a fresh engine); printed per round and
 * then as min and median, with the ratio engine/baseline of the medians on the last line
 * (`ratio pt_timers X`). Times are the thread's CPU time, wall time in brackets: both sides
 * are single-threaded, so they agree on an idle machine, and on a shared one CPU time leaves
 * out the waits for a core that make wall times (and their ratio) swing from round to round.
 * --scale runs each size in a child process, so the peak RSS printed (the child's, engine and
 * baseline together) belongs to that size alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/time.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"

#define BENCH_NAME "bench_pt_timers"
#include "bench_common.h"

#define WALL0 1700000000000LL /* the fake wall clock: the job starts (and stays) here */

static sd_time fake_wall(void *ctx)
{
    (void)ctx;
    return WALL0;
}

/* splitmix64, for reproducible due times. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The delay of timer i of key k: in [1, range] ms, the same in the job and the baseline. */
static int64_t delay_of(size_t k, size_t i, int64_t range)
{
    uint64_t s = ((uint64_t)k << 32) ^ (uint64_t)i ^ 0x5eedULL;
    return 1 + (int64_t)(mix(&s) % (uint64_t)range);
}

/* ---- the baseline: a plain binary min-heap of due times -------------------------------- */

static void heap_push(int64_t *h, size_t *n, int64_t v)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int64_t heap_pop(int64_t *h, size_t *n)
{
    int64_t top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) {
            break;
        }
        if (c + 1 < *n && h[c + 1] < h[c]) {
            c++;
        }
        if (last <= h[c]) {
            break;
        }
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) {
        h[i] = last;
    }
    return top;
}

static span baseline(size_t keys, size_t per_key, int64_t range, int64_t *sum)
{
    size_t n = 0;
    int64_t *h = sd_malloc(keys * per_key * sizeof(int64_t));
    if (h == NULL) {
        exit(1);
    }
    span t0 = span_start();
    for (size_t k = 0; k < keys; k++) {
        for (size_t i = 0; i < per_key; i++) {
            heap_push(h, &n, delay_of(k, i, range));
        }
    }
    *sum = 0;
    while (n > 0) {
        *sum += heap_pop(h, &n);
    }
    span t = span_since(t0);
    sd_free(h);
    return t;
}

/* ---- the fake executor --------------------------------------------------------------- */

typedef struct coders {
    sd_coder *bytes, *varint, *gw, *kv, *wv_bytes, *wv_kv, *timer;
} coders;

typedef struct run {
    sd_em *em;
    sd_err err;
    const sd_coder *wv_kv;
    const sd_coder *timer_coder;
    size_t keys, per_key;
    int64_t span;
    size_t fired;
    size_t bundles;
    size_t max_per_bundle;
    sd_time last_fire;
    int64_t sum_delay; /* of fired timers, relative to the job start: matches the baseline */
    sd_time start;
    uint8_t *seen; /* keys * per_key flags: fired already */
    sd_buf buf;
    sd_wv_header hdr;     /* decoding scratch */
    sd_timer fired_timer; /* decoding scratch */
    sd_timer set;         /* the timers set: one global window; the rest per timer */
} run;

static void gen(run *r, sd_bundle *b)
{
    sd_buf *out = &r->buf;
    sd_window gw = sd_window_global();
    sd_pane nf = SD_PANE_NO_FIRING;
    sd_buf_reset(out);
    for (size_t k = 0; k < r->keys; k++) {
        char key[32];
        int kn = snprintf(key, sizeof(key), "key-%zu", k);
        if (sd_wv_encode_header(out, sd_wv_window_coder(r->wv_kv), 0, &gw, 1, &nf, NULL) != SD_OK ||
            sd_buf_put_lp(out, sd_bytes_make(key, (size_t)kn)) != SD_OK ||
            sd_buf_put_varint(out, k) != SD_OK) {
            exit(1);
        }
    }
    check(sd_em_bundle_output(r->em, b, "keys", sd_buf_bytes(out), &r->err), "output", &r->err);
}

/* Which key and tag a fired timer is: its nested key "key-<k>" and varint tag <i>. */
static bool timer_index(const run *r, const sd_timer *t, size_t *k, size_t *i)
{
    sd_reader kr = sd_reader_make(t->key), tr = sd_reader_make(t->tag);
    sd_bytes name;
    uint64_t tag;
    if (sd_reader_lp(&kr, &name) != SD_OK || !sd_reader_done(&kr) || name.len < 5 ||
        memcmp(name.ptr, "key-", 4) != 0 || sd_reader_varint(&tr, &tag) != SD_OK ||
        !sd_reader_done(&tr) || tag >= r->per_key) {
        return false;
    }
    size_t v = 0;
    for (size_t j = 4; j < name.len; j++) {
        if (name.ptr[j] < '0' || name.ptr[j] > '9') {
            return false;
        }
        v = v * 10 + (size_t)(name.ptr[j] - '0');
    }
    *k = v;
    *i = (size_t)tag;
    return v < r->keys;
}

static void check_fired(run *r, const sd_timer *t)
{
    size_t k, i;
    if (!timer_index(r, t, &k, &i)) {
        fprintf(stderr, "bench_pt_timers: a fired timer of no key or tag the job set\n");
        exit(1);
    }
    if (t->fire > sd_em_clock_now(r->em) || t->fire < r->last_fire ||
        t->fire - r->start != delay_of(k, i, r->span) || r->seen[k * r->per_key + i]) {
        fprintf(
            stderr,
            "bench_pt_timers: timer key %zu tag %zu (delay %lld) fired at clock %lld, due %lld, "
            "after %lld%s\n",
            k, i, (long long)delay_of(k, i, r->span), (long long)sd_em_clock_now(r->em),
            (long long)t->fire, (long long)r->last_fire,
            r->seen[k * r->per_key + i] ? ", a second time" : "");
        exit(1);
    }
    r->seen[k * r->per_key + i] = 1;
    r->last_fire = t->fire;
    r->sum_delay += t->fire - r->start;
    r->fired++;
}

/* The stateful DoFn: per element, set per_key timers; per firing, check it. */
static void dofn(run *r, sd_bundle *b)
{
    /* The fake SDK's own work stays small so that the ratio measures the engine: decoding
     * scratch lives in r (no per-bundle setup), and one timer record serves every timer set. */
    sd_reader in = sd_reader_make(sd_em_bundle_input(b));
    sd_buf_reset(&r->buf);
    while (!sd_reader_done(&in)) {
        sd_bytes elem, ukey;
        uint64_t k;
        check(sd_wv_decode(r->wv_kv, &in, &r->hdr, &elem, &r->err), "decode input", &r->err);
        sd_reader er = sd_reader_make(elem);
        if (sd_reader_lp(&er, &ukey) != SD_OK || sd_reader_varint(&er, &k) != SD_OK) {
            exit(1);
        }
        sd_timer *set = &r->set;
        set->key = sd_bytes_make(elem.ptr, (size_t)(ukey.ptr + ukey.len - elem.ptr));
        set->hold = r->hdr.ts;
        set->pane = SD_PANE_NO_FIRING;
        for (size_t i = 0; i < r->per_key; i++) {
            uint8_t tag[10];
            sd_buf tb = { .data = tag, .cap = sizeof(tag) };
            if (sd_buf_put_varint(&tb, i) != SD_OK) {
                exit(1);
            }
            set->tag = sd_bytes_make(tag, tb.len);
            set->fire = WALL0 + delay_of((size_t)k, i, r->span); /* absolute, SDK wall clock */
            check(sd_timer_encode(r->timer_coder, set, &r->buf, &r->err), "encode timer", &r->err);
        }
    }
    if (r->buf.len > 0) {
        check(sd_em_bundle_timers(r->em, b, "T", "pt", sd_buf_bytes(&r->buf), &r->err), "timers",
              &r->err);
    }
    size_t here = 0;
    for (size_t i = 0; i < sd_em_bundle_n_timer_inputs(b); i++) {
        const char *tid, *fid;
        sd_bytes timers;
        sd_em_bundle_timer_input(b, i, &tid, &fid, &timers);
        sd_reader tr = sd_reader_make(timers);
        while (!sd_reader_done(&tr)) {
            check(sd_timer_decode(r->timer_coder, &tr, &r->fired_timer, &r->err), "decode timer",
                  &r->err);
            check_fired(r, &r->fired_timer);
            here++;
        }
    }
    r->max_per_bundle = here > r->max_per_bundle ? here : r->max_per_bundle;
}

/* One engine run on a fresh engine; checks the result. Returns its times; fills r. */
static span engine_round(const coders *c, run *r, int64_t base_sum)
{
    sd_em_config cfg = { .clock = SD_CLOCK_SYNTHETIC, .wall_now = fake_wall };
    size_t n = r->keys * r->per_key;
    r->fired = r->bundles = r->max_per_bundle = 0;
    r->last_fire = SD_TIME_MIN;
    r->sum_delay = 0;
    memset(r->seen, 0, n);
    check(sd_em_create(&cfg, &r->em), "create", &r->err);
    static const char *imp[] = { "imp" }, *ks[] = { "keys" };
    check(sd_em_add_pcollection(r->em, "imp", c->wv_bytes, NULL, &r->err), "pcollection", &r->err);
    check(sd_em_add_pcollection(r->em, "keys", c->wv_kv, NULL, &r->err), "pcollection", &r->err);
    sd_timer_family_spec fam = { "T", "pt", true, c->timer };
    sd_stage_spec s_imp = {
        .id = "impulse", .kind = SD_STAGE_IMPULSE, .outputs = imp, .n_outputs = 1
    };
    sd_stage_spec s_gen = { .id = "gen",
                            .kind = SD_STAGE_SDK,
                            .inputs = imp,
                            .n_inputs = 1,
                            .outputs = ks,
                            .n_outputs = 1 };
    sd_stage_spec s_tim = { .id = "timers",
                            .kind = SD_STAGE_SDK,
                            .inputs = ks,
                            .n_inputs = 1,
                            .stateful = true,
                            .timer_families = &fam,
                            .n_timer_families = 1 };
    check(sd_em_add_stage(r->em, &s_imp, &r->err), "stage", &r->err);
    check(sd_em_add_stage(r->em, &s_gen, &r->err), "stage", &r->err);
    check(sd_em_add_stage(r->em, &s_tim, &r->err), "stage", &r->err);
    check(sd_em_start(r->em, &r->err), "start", &r->err);
    r->start = sd_em_clock_now(r->em);

    span t0 = span_start();
    for (;;) {
        sd_bundle *b = NULL;
        check(sd_em_next_bundle(r->em, &b, &r->err), "next bundle", &r->err);
        if (b == NULL) {
            break;
        }
        r->bundles++;
        if (strcmp(sd_em_bundle_stage(b), "gen") == 0) {
            gen(r, b);
        } else {
            dofn(r, b);
        }
        check(sd_em_complete_bundle(r->em, b, &r->err), "complete", &r->err);
    }
    span t = span_since(t0);
    if (!sd_em_done(r->em) || r->fired != n || r->sum_delay != base_sum) {
        sd_buf dump;
        sd_buf_init(&dump, 0);
        sd_status stuck = sd_em_check_stuck(r->em, &dump);
        fprintf(stderr,
                "bench_pt_timers: fired %zu of %zu (delay sum %lld, baseline %lld), done=%d, "
                "%s\n%.*s",
                r->fired, n, (long long)r->sum_delay, (long long)base_sum, (int)sd_em_done(r->em),
                sd_status_name(stuck), (int)dump.len, (const char *)dump.data);
        exit(1);
    }
    r->start = sd_em_clock_now(r->em) - r->start; /* now: processing time covered */
    sd_em_destroy(r->em);
    r->em = NULL;
    return t;
}

/* ROUNDS interleaved rounds of baseline and engine. Returns the ratio of the CPU-time medians. */
static double bench(const coders *c, size_t n, size_t keys, double days, size_t rounds, bool quiet)
{
    run r = { .wv_kv = c->wv_kv,
              .timer_coder = c->timer,
              .keys = keys,
              .per_key = n / keys,
              .span = (int64_t)(days * 86400000.0) };
    /* CPU and wall times of each side: ecpu, ewall, bcpu, bwall. */
    int64_t *t = sd_calloc(4 * rounds, sizeof(int64_t));
    int64_t *ecpu = t, *ewall = t + rounds, *bcpu = t + 2 * rounds, *bwall = t + 3 * rounds;
    r.seen = sd_malloc(n);
    if (t == NULL || r.seen == NULL) {
        exit(1);
    }
    sd_buf_init(&r.buf, 0);
    sd_wv_header_init(&r.hdr);
    sd_timer_init(&r.fired_timer);
    sd_timer_init(&r.set);
    sd_window gw = sd_window_global();
    check(sd_windows_set(&r.set.windows, &gw, 1), "windows", &r.err);
    if (!quiet) {
        printf("processing-time timers on the synthetic clock: %zu timers, %zu keys, %.1f days, "
               "%zu rounds (times: CPU, wall in brackets)\n",
               n, keys, days, rounds);
    }
    for (size_t i = 0; i < rounds; i++) {
        int64_t sum;
        span b = baseline(keys, r.per_key, r.span, &sum);
        span e = engine_round(c, &r, sum);
        bcpu[i] = b.cpu;
        bwall[i] = b.wall;
        ecpu[i] = e.cpu;
        ewall[i] = e.wall;
        if (!quiet) {
            double s = (double)e.cpu / 1e9;
            printf("  round %zu: engine %.3f s [%.3f] (%.0f timers/s, %zu bundles, at most %zu "
                   "firings in one; %.1f days covered, synthetic/CPU time %.3g)  baseline %.3f s "
                   "[%.3f]  ratio %.1f\n",
                   i + 1, s, (double)e.wall / 1e9, (double)n / s, r.bundles, r.max_per_bundle,
                   (double)r.start / 86400000.0, ((double)r.start / 1e3) / s, (double)b.cpu / 1e9,
                   (double)b.wall / 1e9, (double)e.cpu / (double)b.cpu);
        }
    }
    int64_t emed = median(ecpu, rounds), bmed = median(bcpu, rounds);
    int64_t ewmed = median(ewall, rounds), bwmed = median(bwall, rounds);
    double ratio = (double)emed / (double)bmed;
    printf("  %zu timers: engine min %.3f median %.3f s (%.2f us a timer) [wall min %.3f median "
           "%.3f]  baseline min %.3f median %.3f s [wall min %.3f median %.3f]  ratio of mins "
           "%.1f, of medians %.1f [wall %.1f, %.1f]  peak RSS %.1f MB\n",
           n, (double)ecpu[0] / 1e9, (double)emed / 1e9, (double)emed / 1e3 / (double)n,
           (double)ewall[0] / 1e9, (double)ewmed / 1e9, (double)bcpu[0] / 1e9, (double)bmed / 1e9,
           (double)bwall[0] / 1e9, (double)bwmed / 1e9, (double)ecpu[0] / (double)bcpu[0], ratio,
           (double)ewall[0] / (double)bwall[0], (double)ewmed / (double)bwmed,
           (double)peak_rss_kb() / 1024.0);
    sd_free(t);
    sd_free(r.seen);
    sd_buf_deinit(&r.buf);
    sd_wv_header_deinit(&r.hdr);
    sd_timer_deinit(&r.fired_timer);
    sd_timer_deinit(&r.set);
    return ratio;
}

int main(int argc, char **argv)
{
    bool scale = argc > 1 && strcmp(argv[1], "--scale") == 0;
    size_t n = !scale && argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
    size_t keys = !scale && argc > 2 ? strtoull(argv[2], NULL, 10) : 1000;
    double days = !scale && argc > 3 ? strtod(argv[3], NULL) : 30.0;
    const char *rounds_arg = scale ? (argc > 2 ? argv[2] : NULL) : (argc > 4 ? argv[4] : NULL);
    size_t rounds = rounds_arg != NULL ? strtoull(rounds_arg, NULL, 10) : scale ? 3 : 5;
    if (n == 0 || keys == 0 || n % keys != 0 || days <= 0 || rounds == 0) {
        fprintf(stderr, "usage: bench_pt_timers [N_TIMERS [N_KEYS [DAYS [ROUNDS]]]] | "
                        "--scale [ROUNDS]  (N_KEYS divides N_TIMERS, DAYS > 0)\n");
        return 2;
    }
    coders c;
    c.bytes = mk(SD_CODER_BYTES, NULL, NULL);
    c.varint = mk(SD_CODER_VARINT, NULL, NULL);
    c.gw = mk(SD_CODER_GLOBAL_WINDOW, NULL, NULL);
    c.kv = mk(SD_CODER_KV, c.bytes, c.varint);
    c.wv_bytes = mk(SD_CODER_WINDOWED_VALUE, c.bytes, c.gw);
    c.wv_kv = mk(SD_CODER_WINDOWED_VALUE, c.kv, c.gw);
    c.timer = mk(SD_CODER_TIMER, c.bytes, c.gw);

    if (!scale) {
        double ratio = bench(&c, n, keys, days, rounds, false);
        printf("ratio pt_timers %.1f\n", ratio);
    } else {
        printf("processing-time timers, scaling (1000 keys, 30 days, %zu rounds a size, each size "
               "in its own process)\n",
               rounds);
        for (size_t size = 10000; size <= 1000000; size *= 10) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid < 0) {
                perror("bench_pt_timers: fork");
                return 1;
            }
            if (pid == 0) {
                double ratio = bench(&c, size, 1000, 30.0, rounds, true);
                printf("ratio pt_timers_%zu %.1f\n", size, ratio);
                fflush(stdout);
                _exit(0);
            }
            int status = 0;
            if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "bench_pt_timers: the %zu-timer run failed\n", size);
                return 1;
            }
        }
    }
    sd_coder *all[] = { c.bytes, c.varint, c.gw, c.kv, c.wv_bytes, c.wv_kv, c.timer };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sd_coder_destroy(all[i]);
    }
    return 0;
}
