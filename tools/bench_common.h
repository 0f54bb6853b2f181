/*
 * Sundial benchmarks: what bench_engine and bench_pt_timers share — coder construction and
 * fatal checks, both clocks of a timed span (the thread's CPU time beside the wall time: on a
 * shared machine CPU time leaves out the waits for a core), medians and peak RSS. A header of
 * static functions, included by one benchmark each; BENCH_NAME names it in messages.
 */
#ifndef SD_TOOLS_BENCH_COMMON_H
#define SD_TOOLS_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "runner/base/err.h"
#include "runner/base/time.h"
#include "runner/coder/coder.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench_common.h"
#endif

/* A coder of kind over components a, b (NULL: fewer); exits on failure. */
static sd_coder *mk(sd_coder_kind kind, sd_coder *a, sd_coder *b)
{
    sd_coder *c = NULL;
    sd_err err = { 0 };
    sd_status st = b != NULL   ? sd_coder_create(&c, &err, kind, a, b, NULL)
                   : a != NULL ? sd_coder_create(&c, &err, kind, a, NULL)
                               : sd_coder_create(&c, &err, kind, NULL);
    if (st != SD_OK) {
        fprintf(stderr, "%s: coder: %s\n", BENCH_NAME, sd_err_msg(&err));
        exit(1);
    }
    return c;
}

/* Exit with what and err's message unless st is SD_OK. */
static void check(sd_status st, const char *what, const sd_err *err)
{
    if (st != SD_OK) {
        fprintf(stderr, "%s: %s: %s (%s)\n", BENCH_NAME, what, sd_err_msg(err), sd_status_name(st));
        exit(1);
    }
}

/* The calling thread's CPU time. Both sides are single-threaded, so on an idle machine it is
 * the wall time; on a shared one it leaves out the time spent waiting for a core. */
static int64_t cpu_now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        return sd_mono_now_ns();
    }
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A span of both clocks. */
typedef struct span {
    int64_t wall, cpu;
} span;

static span span_start(void)
{
    return (span){ .wall = sd_mono_now_ns(), .cpu = cpu_now_ns() };
}

static span span_since(span t0)
{
    return (span){ .wall = sd_mono_now_ns() - t0.wall, .cpu = cpu_now_ns() - t0.cpu };
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v). */
static int64_t median(int64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_i64);
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

#endif
