/*
 * Sundial C SDK: the pure parts of partitioned sources (partwm.c) — per-partition watermarks,
 * the minimum over active partitions, idleness and granularity — shared with the source's
 * DoFn (partitioned.c) and its unit tests. No I/O, no locks, no clock of its own: every call
 * is given the source's clock reading `now`.
 */
#ifndef SD_SDK_HARNESS_SRC_PARTWM_INT_H
#define SD_SDK_HARNESS_SRC_PARTWM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdk-harness/src/sdf_int.h"
#include "sundial/partitioned.h"

typedef struct sd__part_wm {
    sd__wm_est est;    /* the partition's bounded-delay estimator (its watermark: est.wm) */
    bool idle;         /* excluded from the source's minimum */
    sd_time last_data; /* the source clock when it last produced (or started) */
} sd__part_wm;

typedef struct sd__partwm {
    sd__part_wm *parts;
    size_t n;
    int64_t idle_ms;   /* 0: never idle */
    int64_t gran_ms;   /* > 0 */
    sd_time next_emit; /* the next granularity boundary at which wm is recomputed */
    sd_time wm;        /* the source's watermark: monotone, SD_TIME_MIN at first */
} sd__partwm;

/*
 * n >= 1 partitions, each active with no data as of `start`; delay >= 0 (the bounded-delay
 * estimator's); gran_ms > 0; idle_ms >= 0. SD_EINVAL for bad arguments, SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd__partwm_init(sd__partwm *w,
                                        size_t n,
                                        sd_interval delay,
                                        int64_t idle_ms,
                                        int64_t gran_ms,
                                        sd_time start);
/* Free the partitions; safe on a zeroed struct. */
void sd__partwm_deinit(sd__partwm *w);
/* Partition i produced a record with event time ts at source time now: it is active again. */
void sd__partwm_observe(sd__partwm *w, size_t i, sd_time ts, sd_time now);
/* Partition i produced a record without an event time at source time now: it is active again,
 * but its estimator sees no candidate (Flink's generators skip a NULL one). */
void sd__partwm_activity(sd__partwm *w, size_t i, sd_time now);
/*
 * The source's clock reads now: mark partitions idle whose silence reached idle_ms, and at a
 * granularity boundary recompute the watermark. True when the watermark moved or a partition
 * went idle.
 */
bool sd__partwm_advance(sd__partwm *w, sd_time now);

/* Floor of a / b for b > 0. */
int64_t sd__floor_div(int64_t a, int64_t b);

#endif
