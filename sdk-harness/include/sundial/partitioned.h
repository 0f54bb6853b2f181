/*
 * Sundial C SDK: ISO 8601 durations and partitioned sources (YDB topics, Kafka partitions,
 * Flink splits) with per-partition watermarks, idleness and a watermark granularity. Part of
 * <sundial/sundial.h>, which includes it; it may also be included alone.
 */
#ifndef SD_SUNDIAL_PARTITIONED_H
#define SD_SUNDIAL_PARTITIONED_H

#include <sundial/sundial.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Parse an ISO 8601 duration into an sd_interval: P[nY][nM][nW][nD][T[nH][nM][n[.fff]S]].
 * Years and months go to the calendar part (1Y = 12 months), the rest to milliseconds (a day
 * is 24 hours, as in SQL's day-time intervals). Strict: upper-case designators in that order,
 * each at most once, at least one; no sign (durations here are never negative); a fraction
 * only on seconds, with at most 3 digits; weeks only alone (PnW); "T" must be followed by a
 * time part. Overflow (more than INT32_MAX months or INT64_MAX ms) is an error.
 * OUT: *out. Returns SD_OK or SD_EINVAL with a message naming the text, the offset and the
 * expectation.
 */
SD_API SD_MUST_CHECK sd_status sd_duration_parse(const char *text, sd_interval *out, sd_err *err);
/* The same for a fixed-length duration (no years or months). OUT: *ms. */
SD_API SD_MUST_CHECK sd_status sd_duration_parse_ms(const char *text, int64_t *ms, sd_err *err);

/* A generator's *write_time for a record without one (see sd_read_partitioned). */
#define SD_NO_WRITE_TIME INT64_MIN

/*
 * A generator of partition records, instead of files: the index-th record (index 0, 1, ... in
 * order) of partition `partition` (0 .. n_partitions - 1). Append its payload to *payload
 * (empty on entry) and set *write_time (SD_NO_WRITE_TIME: the record has none; other values
 * are clamped to Beam's timestamp range), or set *end when the partition has no record at index
 * (then none after it is asked for). config is the spec's generator_config. It must be a pure
 * function of its arguments: it is asked for a record once, but may be asked again in another
 * worker. A record appears when the source's clock reaches its write time, in both clocks (so
 * on the wall clock a generator can produce records "in the future" that appear later).
 * Return SD_OK, or an error status with err set: the job fails with that message.
 */
typedef sd_status (*sd_partition_gen_fn)(size_t partition,
                                         int64_t index,
                                         sd_bytes config,
                                         sd_buf *payload,
                                         sd_time *write_time,
                                         bool *end,
                                         sd_err *err);
/* Register a generator by name (as sd_register_dofn: before building or running; in every
 * process that may run as a worker). */
SD_API SD_MUST_CHECK sd_status sd_register_partition_gen(const char *name, sd_partition_gen_fn fn);

/*
 * A partitioned source: n_partitions partitions, each a file of records (or a generator, see
 * generator below), one per line:
 *
 *     WRITE_TIME PAYLOAD        (WRITE_TIME: milliseconds since the epoch, UTC; one space)
 *
 * Each record comes out as the string PAYLOAD with event time WRITE_TIME. Watermarks follow
 * the stream processors' rules:
 *   - each partition has its own watermark, the bounded-delay estimate of its records
 *     (max over its records of WRITE_TIME - delay, each record's candidate first);
 *   - the source's watermark is the minimum over its *active* partitions, and never goes back;
 *   - a partition that produced nothing for idle_timeout of the job clock is idle and excluded
 *     from that minimum until it produces again (a partition that never produced is active
 *     from the start, so it holds the watermark back until its idle timeout, as in Flink);
 *     when every partition is idle the watermark stays where it is;
 *   - the source's watermark is recomputed once per granularity of the job clock, at
 *     multiples of it (so it moves in steps no closer than the granularity).
 * Records behind the watermark still come out: they are late downstream (dropped and
 * counted, or routed with sd_group_by_key_late).
 *
 * A record without a write time (an empty WRITE_TIME, the line starting with its space, or
 * NULL; a generator's SD_NO_WRITE_TIME) is accepted, as Flink's sources accept a row whose
 * rowtime is NULL: it contributes no watermark candidate (Flink's watermark generators skip a
 * NULL one) but is activity (its partition is not idle), and it appears with the record before
 * it (in replay and from a generator, not gated by a write time). It comes out with the
 * minimum timestamp (BoundedWindow.TIMESTAMP_MIN_VALUE, SD_TIME_MIN), the timestamp Beam gives
 * an element that has no event time of its own (Impulse, Create): it claims no time, so it
 * can neither hold nor move a watermark nor pass for on-time data. In the global window it
 * flows on like any element; an event-time window puts it in the earliest window, long
 * expired, so a windowed aggregation drops it as late and counts it (or routes it with
 * sd_group_by_key_late, or sundial_late_data_dir records it), much as Flink's window
 * operators drop rows with a NULL time attribute. Stamping it with its partition's watermark
 * instead would invent an event time and count it in whatever window is open.
 *
 * Two clocks (tail chooses; run the job with the matching sd_run_options.wall_clock):
 *   replay (tail false; for the synthetic clock): the files are complete and are replayed as
 *     their topic was written: a record appears when the source's clock reaches its
 *     WRITE_TIME (a record whose write time is not after its predecessor's appears with it).
 *     The source's clock starts at the earliest first write time, floored to the
 *     granularity, and moves one granularity per step (a self-checkpoint resumed one
 *     granularity later, instant on the synthetic clock). The source ends, and its watermark
 *     goes to the end of time, when every file is consumed. Deterministic.
 *   tail (tail true; for the wall clock): the files are followed as they grow; a record
 *     appears once its line is complete (newline-terminated), idleness is measured on the
 *     wall clock, and the source ends after run_for (NULL: runs until drained).
 *
 * Durations are ISO 8601 strings (sd_duration_parse): delay (NULL = "PT0S"; may have months,
 * e.g. "P1M" for Flink's rt - INTERVAL '1' MONTH), idle_timeout (NULL = "PT5S"; "PT0S" =
 * never idle), granularity (NULL = "PT1S"; must be > 0), run_for (tail only).
 *
 * The source is a splittable DoFn (one element for the whole source, a self-checkpoint per
 * step, a manual watermark estimate), so any runner that runs C SDFs runs it. Its
 * per-partition state lives in the worker process that reads it: a runner that moves the
 * read to another worker process fails the job with a message saying so (Sundial's embedded
 * runner and loopback workers keep it in one process).
 *
 * OUT: *watermarks, when not NULL: a PCollection of strings, the source's watermark history,
 * one element per step in which something visible changed:
 *
 *     T+<ms since the source's clock started> source=<wm> p0=<wm>[ idle] p1=<wm>[ idle] ...
 *
 * with watermarks in ms since the epoch ("-inf" before any data); a test can assert the exact
 * sequence. Returns the records (strings). NULL on error (sticky; bad durations, no
 * partitions, a missing file name are construction errors naming the transform).
 */
typedef struct sd_partitioned_spec {
    size_t n_partitions;
    const char *const *files;  /* n_partitions file names (relative: to the current directory) */
    const char *generator;     /* instead of files: a registered sd_partition_gen_fn */
    sd_bytes generator_config; /* its config (copied) */
    const char *delay;
    const char *idle_timeout;
    const char *granularity;
    bool tail;
    const char *run_for;
} sd_partitioned_spec;

SD_API sd_pcoll *sd_read_partitioned(sd_pipeline *p,
                                     const char *name,
                                     const sd_partitioned_spec *spec,
                                     sd_pcoll **watermarks);

#ifdef __cplusplus
}
#endif

#endif /* SD_SUNDIAL_PARTITIONED_H */
