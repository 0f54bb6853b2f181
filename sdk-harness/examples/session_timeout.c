/*
 * session_timeout: per-user sessions that end after an hour without activity, computed by a
 * stateful C DoFn with a processing-time timer — and finished in milliseconds, because the
 * Sundial runner's test-mode clock jumps straight to the next timer when nothing else can
 * happen.
 *
 *   session_timeout [--endpoint HOST:PORT [--process]] [--clock synthetic|wall] [--timeout-ms N]
 *                   [--record-schedule FILE] [--pause start|event]
 *
 * (a flag's value follows it or an '=': --clock wall or --clock=wall)
 *
 * Each event is KV<user, clicks>. The DoFn appends clicks to a bag state and (re)sets the
 * user's "timeout" timer to the timeout (default one hour) of processing time from now; when
 * the timer fires it emits "[when] user: N events, M clicks" and clears the bag; when is the
 * timer's firing time on the job's clock (the hour of the simulated day in test mode).
 *
 * Test mode (the default): a TestStream plays a simulated day — clicks at 08:00, 08:30, 10:00,
 * 15:00 and 22:00 of processing time, with quiet hours between — so sessions time out in the
 * gaps, and the day ends in a few milliseconds of wall time. With --clock wall the runner uses
 * the wall clock (production mode): the clicks arrive at once and the program really waits for
 * the timeout, so pair it with a short --timeout-ms.
 *
 * --pause start|event (with --endpoint on `sundial serve --web_port N`) runs the day paused
 * from its start or before its first click (the pipeline option sundial_pause): it waits for
 * someone to step it — the job page's Step and Resume, `sundialctl step|resume JOB`
 * (docs/time-control.md).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sundial/sundial.h>
#include <unistd.h>

static int64_t timeout_ms = 3600LL * 1000LL;
/* The wall time just before the run, and the clock mode: for printing when sessions end. */
static int64_t run_start_ms;
static bool wall_mode;

static sd_status on_event(sd_ctx *c, void *state)
{
    sd_bytes user, clicks;
    (void)state;
    if (sd_ctx_kv(c, &user, &clicks) != SD_OK) {
        return sd_fail(c, "event is not KV<string, varint>");
    }
    sd_status st = sd_state_append(c, "clicks", clicks);
    if (st == SD_OK) {
        st = sd_timer_set(c, "timeout", SD_BYTES_NULL, sd_ctx_processing_time(c) + timeout_ms,
                          sd_ctx_timestamp(c));
    }
    return st;
}

static sd_status on_timeout(sd_ctx *c, void *state, const char *family, sd_bytes tag)
{
    sd_iter it;
    sd_bytes v, user;
    bool has;
    int64_t events = 0, clicks = 0;
    char line[256];
    (void)state;
    (void)family;
    (void)tag;
    sd_status st = sd_state_read(c, "clicks", &it);
    while (st == SD_OK && (st = sd_iter_next(&it, &v, &has)) == SD_OK && has) {
        sd_reader r = sd_reader_make(v);
        int64_t x;
        if (sd_read_int(&r, &x) != SD_OK) {
            return sd_fail(c, "bad clicks value");
        }
        events++;
        clicks += x;
    }
    sd_reader kr = sd_reader_make(sd_ctx_key(c));
    if (st != SD_OK || sd_read_bytes(&kr, &user) != SD_OK) {
        return st != SD_OK ? st : sd_fail(c, "bad key");
    }
    if ((st = sd_state_clear(c, "clicks")) != SD_OK) {
        return st;
    }
    /* When the session ended, on the job's clock: it starts at the wall time the job starts, so
     * in test mode the day's hours are whole minutes after run_start_ms (printed as the time of
     * the simulated day), in wall mode the real wait (printed in seconds). */
    int64_t since = sd_ctx_fire_time(c) - run_start_ms;
    char when[32];
    if (wall_mode) {
        snprintf(when, sizeof(when), "+%.1f s", (double)since / 1000.0);
    } else {
        int64_t min = (since + 30 * 1000) / (60 * 1000);
        snprintf(when, sizeof(when), "%02lld:%02lld", (long long)(min / 60 % 24),
                 (long long)(min % 60));
    }
    int n = snprintf(line, sizeof(line), "[%s] %.*s: %lld events, %lld clicks", when, (int)user.len,
                     (const char *)user.ptr, (long long)events, (long long)clicks);
    return sd_emit_str(c, line, (size_t)n);
}

static sd_status print_line(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes s;
    (void)state;
    if (sd_read_bytes(&r, &s) != SD_OK) {
        return sd_fail(c, "not a string");
    }
    printf("%.*s\n", (int)s.len, (const char *)s.ptr);
    fflush(stdout);
    return SD_OK;
}

/* --pause start|event: the pipeline option sundial_pause, so the job waits for steps from
 * outside (the web UI, sundialctl). false: not one of them. */
static bool set_pause(sd_run_options *opts, const char *mode)
{
    static const char *const name[] = { "beam:option:sundial_pause:v1" };
    static const char *value[1];
    if (strcmp(mode, "start") != 0 && strcmp(mode, "event") != 0) {
        return false;
    }
    value[0] = mode;
    opts->n_options = 1;
    opts->option_names = name;
    opts->option_values = value;
    return true;
}

int main(int argc, char **argv)
{
    static const sd_dofn sessions = { .process = on_event, .on_timer = on_timeout };
    static const sd_dofn printer = { .process = print_line };
    int code;
    if (sd_register_dofn("sessions:track", &sessions) != SD_OK ||
        sd_register_dofn("sessions:print", &printer) != SD_OK) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    sd_run_options opts = { 0 };
    /* getopt_long: a value follows its flag or an '=' (--clock=wall); it names a bad flag, and
     * the usage follows. */
    static const struct option flags[] = { { "endpoint", required_argument, NULL, 'e' },
                                           { "process", no_argument, NULL, 'p' },
                                           { "wall", no_argument, NULL, 'w' },
                                           { "clock", required_argument, NULL, 'c' },
                                           { "timeout-ms", required_argument, NULL, 't' },
                                           { "record-schedule", required_argument, NULL, 'r' },
                                           { "pause", required_argument, NULL, 'P' },
                                           { "help", no_argument, NULL, 'h' },
                                           { NULL, 0, NULL, 0 } };
    const char *usage = "usage: session_timeout [--endpoint HOST:PORT [--process]] "
                        "[--clock synthetic|wall] [--timeout-ms N] [--record-schedule FILE] "
                        "[--pause start|event]\n";
    int c;
    while ((c = getopt_long(argc, argv, "h", flags, NULL)) != -1) {
        char *end = NULL;
        if (c == 'e') {
            opts.endpoint = optarg;
        } else if (c == 'p') {
            opts.environment = SD_ENV_PROCESS; /* the job server starts us as its worker */
        } else if (c == 'w') {
            opts.wall_clock = true;
        } else if (c == 'c' && strcmp(optarg, "wall") != 0 && strcmp(optarg, "synthetic") != 0) {
            fprintf(stderr, "session_timeout: --clock expects synthetic or wall, got \"%s\"\n%s",
                    optarg, usage);
            return 2;
        } else if (c == 'c') {
            opts.wall_clock = strcmp(optarg, "wall") == 0;
        } else if (c == 't' && ((timeout_ms = strtoll(optarg, &end, 10)) <= 0 || *end != '\0')) {
            fprintf(stderr,
                    "session_timeout: --timeout-ms expects a positive number, got \"%s\"\n%s",
                    optarg, usage);
            return 2;
        } else if (c == 'r') {
            opts.record_schedule = optarg; /* the run's schedule, to replay or compare */
        } else if (c == 'P' && !set_pause(&opts, optarg)) {
            fprintf(stderr, "session_timeout: --pause expects start or event, got \"%s\"\n%s",
                    optarg, usage);
            return 2;
        } else if (c != 't' && c != 'P') {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "session_timeout: unexpected argument \"%s\"\n%s", argv[optind], usage);
        return 2;
    }
    if (opts.n_options > 0 && opts.endpoint == NULL) {
        fprintf(stderr, "session_timeout: --pause needs --endpoint: a server to step it from\n");
        return 2;
    }
    sd_pipeline *p = sd_pipeline_create("session_timeout");
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));

    /* The day's clicks: (hour of processing time, user, clicks). */
    static const struct {
        int64_t at_min;
        const char *user;
        int64_t clicks;
    } day[] = { { 8 * 60, "ada", 3 }, { 8 * 60, "bob", 1 },  { 8 * 60 + 30, "ada", 4 },
                { 10 * 60, "cy", 1 }, { 15 * 60, "bob", 5 }, { 22 * 60, "ada", 9 } };

    const size_t n_day = sizeof(day) / sizeof(day[0]);
    sd_buf all;
    sd_buf_init(&all, 0);
    size_t offs[16] = { 0 };
    sd_time ts[16];
    for (size_t i = 0; i < n_day; i++) {
        if (sd_enc_str(&all, day[i].user) != SD_OK || sd_enc_int(&all, day[i].clicks) != SD_OK) {
            return 1;
        }
        offs[i + 1] = all.len;
        ts[i] = day[i].at_min * 60 * 1000; /* event time: minutes into the day */
    }
    sd_bytes events[16];
    for (size_t i = 0; i < n_day; i++) {
        events[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_pcoll *in;
    if (opts.wall_clock) {
        /* Production mode: the clicks arrive now; the timeout runs on the wall clock. */
        in = sd_create(p, "Events", kv, events, n_day, ts);
    } else {
        /* Test mode: a TestStream plays the day on the synthetic processing-time clock. */
        sd_teststream *t = sd_teststream_create(p, "Day", kv, NULL, 0);
        int64_t now_min = 0;
        for (size_t i = 0; i < n_day; i++) {
            if (day[i].at_min > now_min) {
                sd_teststream_advance_processing_time(t, (day[i].at_min - now_min) * 60 * 1000);
                now_min = day[i].at_min;
            }
            sd_teststream_add_elements(t, NULL, &events[i], &ts[i], 1);
        }
        sd_teststream_advance_processing_time(t, (24 * 60 - now_min) * 60 * 1000);
        sd_teststream_advance_watermark_to_infinity(t);
        in = sd_teststream_output(t, NULL);
    }
    sd_state_spec bag = { .id = "clicks", .kind = SD_STATE_BAG, .coder = sd_pcoder_varint(p) };
    sd_timer_spec timer = { "timeout", SD_PROCESSING_TIME };
    const sd_pcoder *outc[1] = { sd_pcoder_string(p) };
    sd_pardo_spec spec = { .dofn = "sessions:track",
                           .n_outputs = 1,
                           .output_coders = outc,
                           .n_states = 1,
                           .states = &bag,
                           .n_timers = 1,
                           .timers = &timer };
    sd_pcoll *sessions_out = sd_pardo(p, "Sessions", in, &spec, NULL);
    sd_apply(p, "Print", sessions_out, "sessions:print", SD_BYTES_NULL, NULL);
    sd_err err;
    sd_err_clear(&err);
    int64_t t0 = sd_mono_now_ms();
    wall_mode = opts.wall_clock;
    run_start_ms = sd_wall_now_ms();
    sd_status st = sd_pipeline_run(p, &opts, NULL, &err);
    if (st != SD_OK) {
        fprintf(stderr, "session_timeout: %s\n", sd_err_msg(&err));
    } else {
        /* Printed on stdout after the sessions (stdout is flushed after each of them). */
        int64_t took = sd_mono_now_ms() - t0;
        if (opts.wall_clock) {
            printf("the clicks' sessions (timeout %lld ms, wall clock) took %lld ms\n",
                   (long long)timeout_ms, (long long)took);
        } else {
            printf("a simulated day of sessions (24 h of processing time, timeout %lld %s, "
                   "synthetic clock) took %lld ms of wall time\n",
                   (long long)(timeout_ms % 60000 == 0 ? timeout_ms / 60000 : timeout_ms),
                   timeout_ms % 60000 == 0 ? "min" : "ms", (long long)took);
        }
    }
    sd_buf_deinit(&all);
    sd_pipeline_destroy(p);
    return st == SD_OK ? 0 : 1;
}
