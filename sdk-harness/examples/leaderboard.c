/*
 * leaderboard: hourly team scores with speculative, on-time and late results — a scripted
 * stream (TestStream), a trigger with early and late firings, and per-pane assertions.
 *
 *   leaderboard [--endpoint HOST:PORT] [--discarding] [--record-schedule FILE]
 *
 * Scores are KV<team, points> with event timestamps. They are summed per team in fixed
 * one-hour windows whose trigger fires
 *   early   ten minutes (processing time) after the first score of a pane,
 *   on time when the watermark passes the end of the hour,
 *   late    for every score that arrives afterwards, up to two hours late.
 * Panes accumulate (each shows the hour's total so far) unless --discarding is given (each
 * shows the points since the previous pane). The stream's script plays a game over the
 * first hour, moves processing time forward so early results appear, closes the hour, then
 * delivers one late score and one too-late score (dropped). Each pane is printed as
 *
 *     [00:00, 01:00) red     12  EARLY   #0
 *
 * and assertions inside the job check the on-time and late panes, so the program exits 0 only
 * if the runner produced exactly the expected panes. On Sundial's test clock the ten-minute
 * waits take no time.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sundial/sundial.h>

#define MINUTE (60LL * 1000LL)
#define HOUR   (60LL * MINUTE)

/* KV<string, Iterable<varint>> -> KV<string, varint>: the pane's total. */
static sd_status sum_pane(sd_ctx *c, void *state)
{
    sd_bytes team, v;
    sd_iter points;
    bool has;
    int64_t total = 0;
    (void)state;
    if (sd_ctx_grouped(c, &team, &points) != SD_OK) {
        return sd_fail(c, "sum: not a grouped KV");
    }
    sd_status st;
    while ((st = sd_iter_next(&points, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        int64_t x;
        if (sd_read_int(&r, &x) != SD_OK) {
            return sd_fail(c, "sum: points are not a varint");
        }
        total += x;
    }
    if (st != SD_OK) {
        return st;
    }
    sd_buf out;
    sd_buf_init(&out, 0);
    st = sd_buf_append_bytes(&out, team);
    if (st == SD_OK) {
        st = sd_enc_int(&out, total);
    }
    if (st == SD_OK) {
        st = sd_emit(c, 0, sd_buf_bytes(&out));
    }
    sd_buf_deinit(&out);
    return st;
}

/* KV<string, varint> -> "team=total" (for the assertions), and print the pane. */
static sd_status show_pane(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes team;
    int64_t total;
    char line[128];
    (void)state;
    if (sd_read_bytes(&r, &team) != SD_OK || sd_read_int(&r, &total) != SD_OK) {
        return sd_fail(c, "show: not KV<string, varint>");
    }
    sd_window w = sd_ctx_window(c);
    sd_pane pane = sd_ctx_pane(c);
    printf("[%02lld:%02lld, %02lld:%02lld) %-6.*s %4lld  %-7s #%lld\n", (long long)(w.start / HOUR),
           (long long)(w.start % HOUR / MINUTE), (long long)(w.end / HOUR),
           (long long)(w.end % HOUR / MINUTE), (int)team.len, (const char *)team.ptr,
           (long long)total, sd_pane_timing_name(pane.timing), (long long)pane.index);
    fflush(stdout);
    int n = snprintf(line, sizeof(line), "%.*s=%lld", (int)team.len, (const char *)team.ptr,
                     (long long)total);
    return sd_emit_str(c, line, (size_t)n);
}

/* Add one KV<team, points> score at event time t. */
static void score(sd_teststream *ts, const char *team, int64_t points, sd_time t)
{
    sd_buf b;
    sd_buf_init(&b, 0);
    if (sd_enc_str(&b, team) == SD_OK && sd_enc_int(&b, points) == SD_OK) {
        sd_bytes e = sd_buf_bytes(&b);
        sd_teststream_add_elements(ts, NULL, &e, &t, 1);
    }
    sd_buf_deinit(&b);
}

int main(int argc, char **argv)
{
    static const sd_dofn sum = { .process = sum_pane };
    static const sd_dofn show = { .process = show_pane };
    int code;
    if (sd_register_dofn("leaderboard:sum", &sum) != SD_OK ||
        sd_register_dofn("leaderboard:show", &show) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    sd_run_options opts = { 0 };
    bool discarding = false;
    /* getopt_long: a value follows its flag or an '=' (--endpoint=HOST:PORT); it names a bad
     * flag, and the usage follows. */
    static const struct option flags[] = { { "endpoint", required_argument, NULL, 'e' },
                                           { "discarding", no_argument, NULL, 'd' },
                                           { "record-schedule", required_argument, NULL, 'r' },
                                           { "help", no_argument, NULL, 'h' },
                                           { NULL, 0, NULL, 0 } };
    const char *usage =
        "usage: leaderboard [--endpoint HOST:PORT] [--discarding] [--record-schedule FILE]\n";
    int c;
    while ((c = getopt_long(argc, argv, "h", flags, NULL)) != -1) {
        if (c == 'e') {
            opts.endpoint = optarg;
        } else if (c == 'd') {
            discarding = true;
        } else if (c == 'r') {
            opts.record_schedule = optarg; /* the run's schedule, to replay or compare */
        } else {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "leaderboard: unexpected argument \"%s\"\n%s", argv[optind], usage);
        return 2;
    }

    sd_pipeline *p = sd_pipeline_create("leaderboard");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_teststream *game = sd_teststream_create(p, "Scores", kv, NULL, 0);
    score(game, "red", 5, 3 * MINUTE);
    score(game, "blue", 2, 4 * MINUTE);
    sd_teststream_advance_processing_time(game, 12 * MINUTE); /* early results */
    score(game, "red", 7, 20 * MINUTE);
    sd_teststream_advance_watermark(game, NULL, 30 * MINUTE);
    sd_teststream_advance_processing_time(game, 12 * MINUTE); /* red's second early pane */
    score(game, "blue", 9, 50 * MINUTE);
    sd_teststream_advance_watermark(game, NULL, HOUR); /* the hour is over: on time */
    score(game, "red", 4, 40 * MINUTE);                /* late, within two hours */
    sd_teststream_advance_watermark(game, NULL, 3 * HOUR + MINUTE);
    score(game, "blue", 100, 10 * MINUTE); /* too late: dropped */

    const sd_trigger_spec *trigger = sd_trigger_after_watermark(
        p, sd_trigger_after_processing_time(p, 10 * MINUTE), sd_trigger_after_count(p, 1));
    sd_windowfn hourly = { .kind = SD_WINDOW_FIXED,
                           .size_ms = HOUR,
                           .allowed_lateness_ms = 2 * HOUR,
                           .trigger = trigger,
                           .accumulation =
                               discarding ? SD_DISCARDING_PANES : SD_ACCUMULATING_PANES };
    sd_pcoll *windowed = sd_window_into(p, "Hourly", sd_teststream_output(game, NULL), &hourly);
    sd_pcoll *grouped = sd_group_by_key(p, "ByTeam", windowed);
    sd_pcoll *totals = sd_apply(p, "Total", grouped, "leaderboard:sum", SD_BYTES_NULL, NULL);
    sd_pcoll *shown =
        sd_apply(p, "Show", totals, "leaderboard:show", SD_BYTES_NULL, sd_pcoder_string(p));

    sd_window first_hour = sd_window_interval(0, HOUR);
    const char *const on_time_acc[] = { "red=12", "blue=11" };
    const char *const on_time_dis[] = { "red=0", "blue=9" };
    sd_assert_strings_in_pane(p, "OnTime", shown, &first_hour, SD_PANES_ON_TIME,
                              discarding ? on_time_dis : on_time_acc, 2);
    const char *const late_acc[] = { "red=16" };
    const char *const late_dis[] = { "red=4" };
    sd_assert_strings_in_pane(p, "Late", shown, &first_hour, SD_PANES_LATE,
                              discarding ? late_dis : late_acc, 1);

    sd_err err;
    sd_err_clear(&err);
    sd_run_result res;
    int64_t t0 = sd_mono_now_ms();
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    if (st != SD_OK) {
        fprintf(stderr, "leaderboard: %s\n", sd_err_msg(&err));
    } else {
        fprintf(stderr, "%lld late score(s) dropped; three hours of game time took %lld ms\n",
                (long long)sd_run_result_counter(&res, SD_RUN_DROPPED_LATE),
                (long long)(sd_mono_now_ms() - t0));
        sd_run_result_deinit(&res);
    }
    sd_pipeline_destroy(p);
    return st == SD_OK ? 0 : 1;
}
