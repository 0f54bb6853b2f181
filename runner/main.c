/*
 * Sundial: the `sundial` command.
 *
 *   sundial serve [--port N] [--host ADDR] [--clock synthetic|wall] [--max-bundle-bytes N]
 *                 [--worker-hang-timeout SECONDS] [--bundle-stall-timeout SECONDS]
 *                 [--livelock-rounds N] [--record-schedule-dir DIR]
 *                 [--memory_limit SIZE] [--spill_dir DIR]
 *                 [--replay-schedule FILE] [Prism's flags, below]
 *   sundial --job_port N [--serve_http BOOL] [--idle_shutdown_timeout DURATION] ...
 *   sundial version
 *
 * `serve` runs a Beam job server: the Job API, artifact staging/retrieval and the Fn API on
 * one gRPC port, with one event loop. When the port accepts connections it prints exactly
 * `listening on HOST:PORT` as the first line on stdout, so scripts and tests can start it with
 * --port 0 and read the port. SIGINT/SIGTERM stop it: running jobs are cancelled, workers
 * stopped, then calls are given a short grace period before the server closes.
 *
 * A drop-in for Prism. Beam's SDKs start a local runner binary with Prism's command line:
 * Python's PrismRunner runs `BIN --job_port N --log_level L --log_kind K --serve_http=false`,
 * Python's prism_runner_test runs `BIN --job_port N`, Java's PrismRunner runs
 * `BIN --job_port=N --serve_http=false`. So when the first argument is a flag rather than a
 * subcommand, `sundial` behaves as `sundial serve` with Prism's defaults (port 8073), and
 * `serve` itself accepts Prism's flags too:
 *
 *   flag                      value                          what Sundial does
 *   --job_port N              0..65535 (0 = any free port)   the Job API / Fn API port
 *   --web_port N              0..65535 (0 = any free port)   the web UI's port (default 8074)
 *   --serve_http [BOOL]       true|false|True|False|1|0|...  serve the web UI (runner/web)
 *   --idle_shutdown_timeout D Go duration (30s, 1m30s, 1h)   shut down once no job has been
 *                             or plain seconds; <= 0: never  active for D (below)
 *   --log_level L             debug|info|warn|error          stderr log level (default info:
 *                                                            start, and each job's start and end)
 *   --log_kind K              dev|json|text                  text lines (dev, text) or JSON lines
 *
 * Both `--flag value` and `--flag=value` work, and, as Go's flag package allows, a single
 * dash (`-job_port`). A boolean flag given bare (`--serve_http`) means true, as in Go; given
 * a separate following word it takes that word only when the word is a boolean spelling
 * (Python passes `--serve_http False` in some versions, which Go itself would misread).
 * A bad value prints a message naming the flag and what it expects, and exits 2.
 *
 * The web UI. Prism's command line serves it by default (--serve_http defaults to true, as
 * in Prism, on --web_port 8074); `sundial serve` does not, unless asked with --serve_http or
 * --web_port N (either is enough; --serve_http=false wins). It binds the job port's host.
 * When it serves, stdout's second line is `web ui on http://HOST:PORT/` (the bound port, so
 * --web_port 0 can be read back). A web port that cannot be bound is fatal when --web_port
 * chose it, and only a warning on the default port 8074 (Beam's Python suites start many
 * `sundial --job_port N` at once and never read the UI; another runner may hold 8074).
 *
 * Idle shutdown follows Prism (jobservices/server.go): the timer starts when the server
 * starts, any prepared job that has not reached a terminal state keeps the server busy (a
 * prepared job that is never run does too), and once the last one terminates the server
 * shuts down after the timeout unless a new job is prepared meanwhile. Sundial polls the job
 * counts on a libev timer (a tick of a quarter of the timeout, between 50 ms and 1 s) rather
 * than hooking every job transition: the cost is up to one tick of lateness, the gain is that
 * the job service needs no callback into main.
 *
 * Beam Python's PrismRunner (Prism's command line with --log_kind, stdout a pipe that stderr
 * shares, a Python parent) sleeps a second at its exit when the process it started still runs:
 * the process splits after it listens, and its launcher exits once the first job is prepared,
 * while the server lives as long as its client (runner/detach.c; SUNDIAL_DETACH=0 turns it off).
 *
 * Out of memory during start-up is fatal here (and only here): there is nothing to serve yet.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h>
#endif
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/err.h"
#include "runner/base/fs.h"
#include "runner/base/log.h"
#include "runner/detach.h"
#include "runner/jobservice/options.h"
#include "runner/server/server.h"
#include "runner/transport/rpc.h"

#define DEFAULT_SERVE_PORT 8099
#define DEFAULT_PRISM_PORT 8073
#define DEFAULT_WEB_PORT   8074

typedef struct serve_state {
    sd_server *server;
    bool stopping;
    ev_signal sigint;
    ev_signal sigterm;
    /* Idle shutdown (disabled when idle_timeout_s <= 0). */
    double idle_timeout_s;
    ev_timer idle_tick;
    ev_tstamp last_busy;
    size_t last_total;
    /* Beam Python's launch (runner/detach.c): the pipe that lets the launcher go once the
     * first job is prepared, watched after every loop iteration until then; -1 otherwise. */
    int detach_fd;
    ev_check detach_check;
} serve_state;

/* Everything the command line sets; the zero value is not the default, see serve_opts_init. */
typedef struct serve_opts {
    long port;
    long web_port;
    bool serve_http;
    bool have_web_port;   /* --web_port was given */
    bool have_serve_http; /* --serve_http was given */
    double idle_timeout_s;
    const char *host;
    bool wall;
    long max_bundle;
    long hang;
    long stall;           /* seconds; -1 = the executor's default */
    long livelock;        /* bundles; -1 = the executor's default */
    int64_t memory_limit; /* bytes per job; -1 = the executor's default; 0 = none */
    const char *spill_dir;
    const char *record_schedule_dir; /* NULL: jobs record only when their options ask */
    const char *replay_schedule;     /* NULL: jobs replay only when their options ask */
    long job_history;
    double job_history_ttl_s;     /* 0 = default (a day); < 0 = never */
    long max_pipeline_bytes;      /* -1 = default; 0 = no limit */
    long max_pipeline_transforms; /* -1 = default; 0 = no limit */
    const char *artifacts_dir;
    bool have_log_level;
    sd_log_level log_level;
    const char *log_kind;
    bool have_log_kind; /* --log_kind was given */
} serve_opts;

static void usage(FILE *f)
{
    fprintf(f, "usage:\n"
               "  sundial serve [--port N] [--host ADDR] [--clock synthetic|wall]\n"
               "                [--max-bundle-bytes N] [--worker-hang-timeout SECONDS]\n"
               "                [--bundle-stall-timeout SECONDS] [--livelock-rounds N]\n"
               "                [--record-schedule-dir DIR] [--replay-schedule FILE]\n"
               "                [--memory_limit SIZE] [--spill_dir DIR]\n"
               "                [--artifacts_dir DIR]\n"
               "                [--job_history N] [--job_history_ttl DURATION]\n"
               "                [--max_pipeline_bytes N]\n"
               "                [--max_pipeline_transforms N]\n"
               "                [--job_port N] [--idle_shutdown_timeout DURATION]\n"
               "                [--log_level debug|info|warn|error] [--log_kind dev|json|text]\n"
               "                [--serve_http BOOL] [--web_port N]\n"
               "      Run a Beam job server (Job API + Fn API on one port). --port 0 picks a\n"
               "      free port; the first stdout line is 'listening on HOST:PORT'.\n"
               "      Default port 8099, host 127.0.0.1, clock synthetic.\n"
               "  sundial --job_port N [other flags as above]\n"
               "      Prism's command line (what Beam's PrismRunner runs): the same server,\n"
               "      default port 8073. --idle_shutdown_timeout (Go duration such as 30s, 5m,\n"
               "      1h30m, or plain seconds) stops it after that long with no active job.\n"
               "      --serve_http (default true here, false for `serve`) serves the web UI on\n"
               "      --web_port (default 8074; giving it to `serve` turns the UI on); stdout's\n"
               "      second line is then 'web ui on http://HOST:PORT/'.\n"
               "      --worker-hang-timeout (default 60): a worker that leaves a progress request\n"
               "      unanswered that long fails its job. --bundle-stall-timeout (default 600,\n"
               "      0 = never): a bundle whose worker answers but which consumes no input and\n"
               "      produces no output that long fails its job with a per-stage dump.\n"
               "      --livelock-rounds (default 1000, 0 = never): that many bundles in a row\n"
               "      without progress (no watermark, output, timer or state moved) fail the\n"
               "      job as live-locked, with a per-stage dump; a job's pipeline option\n"
               "      sundial_livelock_rounds overrides it.\n"
               "      --record-schedule-dir DIR: every job records its schedule (bundles, clock\n"
               "      jumps, splits, seed) to DIR/<job id>.schedule; --replay-schedule FILE:\n"
               "      every job replays FILE and fails at the first step that differs. A job's\n"
               "      options sundial_record_schedule / sundial_replay_schedule override both.\n"
               "      --memory_limit (default 1GiB, 0 = none; 268435456, 512MiB, 2G): what a job\n"
               "      holds beyond it (pending elements, GroupByKey values, bundle outputs) is\n"
               "      spilled to an unlinked file in --spill_dir (default $TMPDIR, else /tmp);\n"
               "      a job's pipeline option sundial_memory_limit overrides it.\n"
               "      --job_history (default 100) finished jobs are kept, each for at most\n"
               "      --job_history_ttl (default 24h; 0 = forever) after it ended.\n"
               "      --max_pipeline_bytes (default 536870912) and --max_pipeline_transforms\n"
               "      (default 200000; 0 = no limit for either): larger Prepare requests are\n"
               "      refused with RESOURCE_EXHAUSTED before they are decoded.\n"
               "  sundial --list-options\n"
               "      Print the runner's own pipeline options (beam:option:sundial_*:v1) as\n"
               "      JSON: name, kind, choices and help of each.\n"
               "  sundial version\n"
               "A flag's value follows it or an '=' (--port 0 or --port=0); one dash works too\n"
               "(-port 0), as Go's flags and Prism take them.\n");
}

/* ------------------------------------------------------------------------------------------ */
/* Value parsers: each prints "sundial: --flag expects ..., got "x"" and returns false         */
/* ------------------------------------------------------------------------------------------ */

static bool parse_long(const char *flag, const char *s, long max, const char *expects, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (s[0] == '\0' || errno != 0 || *end != '\0' || v < 0 || v > max) {
        fprintf(stderr, "sundial: --%s expects %s, got \"%s\"\n", flag, expects, s);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_port(const char *flag, const char *s, long *out)
{
    return parse_long(flag, s, 65535, "a port number 0..65535 (0 = any free port)", out);
}

/* The spellings Go's strconv.ParseBool accepts, which are those Beam's launchers use. */
static bool bool_word(const char *s, bool *out)
{
    static const char *const yes[] = { "1", "t", "T", "TRUE", "true", "True" };
    static const char *const no[] = { "0", "f", "F", "FALSE", "false", "False" };
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

/*
 * Go's time.ParseDuration: an optional sign, then one or more "number unit" pairs, the number
 * decimal with an optional fraction, the unit one of ns us µs μs ms s m h ("1h30m", "1.5s");
 * "0" alone needs no unit. Sundial also takes a bare number as seconds ("90"). OUT: seconds.
 */
static bool parse_go_duration(const char *s, double *out)
{
    static const struct {
        const char *name;
        double seconds;
    } units[] = {
        /* Longer names first so "ms" is not read as "m" followed by garbage. */
        { "ns", 1e-9 }, { "us", 1e-6 }, { "\xc2\xb5s", 1e-6 }, { "\xce\xbcs", 1e-6 },
        { "ms", 1e-3 }, { "s", 1.0 },   { "m", 60.0 },         { "h", 3600.0 },
    };

    const char *p = s;
    double sign = 1.0;
    double total = 0.0;

    if (*p == '-' || *p == '+') {
        sign = *p == '-' ? -1.0 : 1.0;
        p++;
    }
    if (*p == '\0') {
        return false;
    }
    while (*p != '\0') {
        const char *start = p;
        double v = 0.0;
        while (*p >= '0' && *p <= '9') {
            v = v * 10.0 + (*p - '0');
            p++;
        }
        bool had_int = p > start;
        bool had_frac = false;
        if (*p == '.') {
            double scale = 0.1;
            p++;
            while (*p >= '0' && *p <= '9') {
                v += (*p - '0') * scale;
                scale /= 10.0;
                p++;
                had_frac = true;
            }
        }
        if (!had_int && !had_frac) {
            return false;
        }
        if (*p == '\0') {
            /* A bare number: "0" in Go, any number of seconds in Sundial, but only alone. */
            if (start != s && start != s + 1) {
                return false;
            }
            total += v;
            break;
        }
        size_t k = 0;
        size_t n_units = sizeof(units) / sizeof(units[0]);
        for (; k < n_units; k++) {
            size_t len = strlen(units[k].name);
            if (strncmp(p, units[k].name, len) == 0) {
                p += len;
                break;
            }
        }
        if (k == n_units) {
            return false;
        }
        total += v * units[k].seconds;
    }
    if (!isfinite(total)) {
        return false;
    }
    *out = sign * total;
    return true;
}

static bool parse_log_level(const char *s, sd_log_level *out)
{
    static const struct {
        const char *name;
        sd_log_level level;
    } levels[] = {
        { "debug", SD_LOG_DEBUG },
        { "info", SD_LOG_INFO },
        { "warn", SD_LOG_WARN },
        { "error", SD_LOG_ERROR },
    };

    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        /* Prism lower-cases the value before matching; so do we. */
        if (strcasecmp(s, levels[i].name) == 0) {
            *out = levels[i].level;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------------------------ */
/* Command line                                                                               */
/* ------------------------------------------------------------------------------------------ */

enum {
    OPT_PORT = 1000,
    OPT_HOST,
    OPT_CLOCK,
    OPT_MAX_BUNDLE,
    OPT_HANG,
    OPT_STALL,
    OPT_LIVELOCK,
    OPT_MEMORY_LIMIT,
    OPT_SPILL_DIR,
    OPT_RECORD_SCHEDULE,
    OPT_REPLAY_SCHEDULE,
    OPT_ARTIFACTS_DIR,
    OPT_JOB_HISTORY,
    OPT_JOB_HISTORY_TTL,
    OPT_MAX_PIPELINE_BYTES,
    OPT_MAX_PIPELINE_TRANSFORMS,
    OPT_JOB_PORT,
    OPT_WEB_PORT,
    OPT_SERVE_HTTP,
    OPT_IDLE,
    OPT_LOG_LEVEL,
    OPT_LOG_KIND,
    OPT_HELP,
};

static const struct option long_options[] = {
    { "port", required_argument, NULL, OPT_PORT },
    { "host", required_argument, NULL, OPT_HOST },
    { "clock", required_argument, NULL, OPT_CLOCK },
    { "max-bundle-bytes", required_argument, NULL, OPT_MAX_BUNDLE },
    { "worker-hang-timeout", required_argument, NULL, OPT_HANG },
    { "bundle-stall-timeout", required_argument, NULL, OPT_STALL },
    { "livelock-rounds", required_argument, NULL, OPT_LIVELOCK },
    { "memory_limit", required_argument, NULL, OPT_MEMORY_LIMIT },
    { "spill_dir", required_argument, NULL, OPT_SPILL_DIR },
    { "record-schedule-dir", required_argument, NULL, OPT_RECORD_SCHEDULE },
    { "replay-schedule", required_argument, NULL, OPT_REPLAY_SCHEDULE },
    { "artifacts_dir", required_argument, NULL, OPT_ARTIFACTS_DIR },
    { "job_history", required_argument, NULL, OPT_JOB_HISTORY },
    { "job_history_ttl", required_argument, NULL, OPT_JOB_HISTORY_TTL },
    { "max_pipeline_bytes", required_argument, NULL, OPT_MAX_PIPELINE_BYTES },
    { "max_pipeline_transforms", required_argument, NULL, OPT_MAX_PIPELINE_TRANSFORMS },
    { "job_port", required_argument, NULL, OPT_JOB_PORT },
    { "web_port", required_argument, NULL, OPT_WEB_PORT },
    { "serve_http", optional_argument, NULL, OPT_SERVE_HTTP },
    { "idle_shutdown_timeout", required_argument, NULL, OPT_IDLE },
    { "log_level", required_argument, NULL, OPT_LOG_LEVEL },
    { "log_kind", required_argument, NULL, OPT_LOG_KIND },
    { "help", no_argument, NULL, OPT_HELP },
    { NULL, 0, NULL, 0 },
};

static void serve_opts_init(serve_opts *o, long default_port)
{
    memset(o, 0, sizeof(*o));
    o->port = default_port;
    o->web_port = DEFAULT_WEB_PORT;
    o->serve_http = true;
    o->idle_timeout_s = -1.0;
    o->stall = -1;
    o->livelock = -1;
    o->memory_limit = -1;
    o->max_pipeline_bytes = -1;
    o->max_pipeline_transforms = -1;
    o->host = "127.0.0.1";
    o->log_kind = "dev";
}

/* Loopback addresses: 127.0.0.0/8, ::1 and localhost. */
static bool is_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
           strcmp(host, "[::1]") == 0 || strcmp(host, "localhost") == 0;
}

/* The option's name as the user typed it, for messages ("job_port"). */
static const char *opt_name(int code)
{
    for (const struct option *o = long_options; o->name != NULL; o++) {
        if (o->val == code) {
            return o->name;
        }
    }
    return "?";
}

/*
 * Flags parse in three groups, each a function that handles the flag codes it knows and returns
 * 0 (taken), 2 (bad value, already reported) or -1 (not one of its flags).
 */

/* Where and how to serve: ports, host, clock, artifacts and job history. */
static int parse_place_flag(int c, serve_opts *o)
{
    long v;
    switch (c) {
    case OPT_PORT:
    case OPT_JOB_PORT:
        if (!parse_port(opt_name(c), optarg, &v)) {
            return 2;
        }
        o->port = v;
        return 0;
    case OPT_WEB_PORT:
        if (!parse_port(opt_name(c), optarg, &v)) {
            return 2;
        }
        o->web_port = v;
        o->have_web_port = true;
        return 0;
    case OPT_HOST:
        if (optarg[0] == '\0') {
            fprintf(stderr, "sundial: --host expects an address, got \"\"\n");
            return 2;
        }
        o->host = optarg;
        return 0;
    case OPT_CLOCK:
        if (strcmp(optarg, "wall") == 0) {
            o->wall = true;
        } else if (strcmp(optarg, "synthetic") == 0) {
            o->wall = false;
        } else {
            fprintf(stderr, "sundial: --clock expects 'synthetic' or 'wall', got \"%s\"\n", optarg);
            return 2;
        }
        return 0;
    case OPT_ARTIFACTS_DIR:
        if (optarg[0] == '\0') {
            fprintf(stderr, "sundial: --artifacts_dir expects a directory, got \"\"\n");
            return 2;
        }
        o->artifacts_dir = optarg;
        return 0;
    case OPT_JOB_HISTORY:
        if (!parse_long(opt_name(c), optarg, 1000000, "a number of jobs 1..1000000",
                        &o->job_history)) {
            return 2;
        }
        if (o->job_history < 1) {
            fprintf(stderr,
                    "sundial: --job_history expects a number of jobs 1..1000000, "
                    "got \"%s\"\n",
                    optarg);
            return 2;
        }
        return 0;
    case OPT_JOB_HISTORY_TTL: {
        double ttl = 0;
        if (!parse_go_duration(optarg, &ttl) || ttl < 0) {
            fprintf(stderr,
                    "sundial: --job_history_ttl expects a duration such as 30m, 24h or a "
                    "number of seconds (0 = forever), got \"%s\"\n",
                    optarg);
            return 2;
        }
        o->job_history_ttl_s = ttl == 0 ? -1 : ttl;
        return 0;
    }
    default:
        return -1;
    }
}

/* Resource limits: bundle size, hang and stall times, the live-lock bound, pipeline size. */
static int parse_limit_flag(int c, serve_opts *o)
{
    switch (c) {
    case OPT_MAX_BUNDLE:
        if (!parse_long(opt_name(c), optarg, LONG_MAX, "a non-negative number of bytes",
                        &o->max_bundle)) {
            return 2;
        }
        return 0;
    case OPT_HANG:
        if (!parse_long(opt_name(c), optarg, 86400, "a number of seconds 0..86400", &o->hang)) {
            return 2;
        }
        return 0;
    case OPT_MAX_PIPELINE_BYTES:
        if (!parse_long(opt_name(c), optarg, 1L << 31,
                        "a number of bytes 0..2147483648 (0 = no limit)", &o->max_pipeline_bytes)) {
            return 2;
        }
        return 0;
    case OPT_MAX_PIPELINE_TRANSFORMS:
        if (!parse_long(opt_name(c), optarg, 100000000L,
                        "a number of transforms 0..100000000 (0 = no limit)",
                        &o->max_pipeline_transforms)) {
            return 2;
        }
        return 0;
    case OPT_STALL:
        if (!parse_long(opt_name(c), optarg, 30L * 86400,
                        "a number of seconds 0..2592000 (0 = never)", &o->stall)) {
            return 2;
        }
        return 0;
    case OPT_LIVELOCK:
        if (!parse_long(opt_name(c), optarg, 1000000000L,
                        "a number of bundles 0..1000000000 (0 = never)", &o->livelock)) {
            return 2;
        }
        return 0;
    case OPT_MEMORY_LIMIT: {
        uint64_t v;
        if (!sd_size_parse(optarg, &v) || v > (uint64_t)INT64_MAX) {
            fprintf(stderr,
                    "sundial: --memory_limit expects a size in bytes (such as 268435456, 512MiB "
                    "or 2G; 0 = no limit), got \"%s\"\n",
                    optarg);
            return 2;
        }
        o->memory_limit = (int64_t)v;
        return 0;
    }
    case OPT_SPILL_DIR:
        if (optarg[0] == '\0') {
            fprintf(stderr, "sundial: --spill_dir expects a directory, got \"\"\n");
            return 2;
        }
        o->spill_dir = optarg;
        return 0;
    case OPT_RECORD_SCHEDULE:
    case OPT_REPLAY_SCHEDULE:
        if (optarg[0] == '\0') {
            fprintf(stderr, "sundial: --%s expects a %s, got \"\"\n", opt_name(c),
                    c == OPT_RECORD_SCHEDULE ? "directory" : "schedule file");
            return 2;
        }
        if (c == OPT_RECORD_SCHEDULE) {
            o->record_schedule_dir = optarg;
        } else {
            o->replay_schedule = optarg;
        }
        return 0;
    default:
        return -1;
    }
}

/* Prism's compatibility flags and logging: --serve_http, --idle_shutdown_timeout, --log_*. */
static int parse_prism_flag(int c, int argc, char **argv, serve_opts *o)
{
    switch (c) {
    case OPT_SERVE_HTTP:
        o->have_serve_http = true;
        if (optarg != NULL) {
            if (!bool_word(optarg, &o->serve_http)) {
                fprintf(stderr,
                        "sundial: --serve_http expects a boolean (true, false, True, "
                        "False, 1, 0), got \"%s\"\n",
                        optarg);
                return 2;
            }
        } else if (optind < argc && bool_word(argv[optind], &o->serve_http)) {
            optind++;
        } else {
            o->serve_http = true;
        }
        return 0;
    case OPT_IDLE:
        if (!parse_go_duration(optarg, &o->idle_timeout_s)) {
            fprintf(stderr,
                    "sundial: --idle_shutdown_timeout expects a duration such as 30s, 5m, "
                    "1h30m or a number of seconds, got \"%s\"\n",
                    optarg);
            return 2;
        }
        return 0;
    case OPT_LOG_LEVEL:
        if (!parse_log_level(optarg, &o->log_level)) {
            fprintf(stderr, "sundial: --log_level expects debug, info, warn or error, got \"%s\"\n",
                    optarg);
            return 2;
        }
        o->have_log_level = true;
        return 0;
    case OPT_LOG_KIND:
        if (strcasecmp(optarg, "dev") != 0 && strcasecmp(optarg, "json") != 0 &&
            strcasecmp(optarg, "text") != 0) {
            fprintf(stderr, "sundial: --log_kind expects dev, json or text, got \"%s\"\n", optarg);
            return 2;
        }
        o->log_kind = optarg;
        o->have_log_kind = true;
        return 0;
    default:
        return -1;
    }
}

/*
 * Parse argv[0..argc) (argv[0] is the command name as getopt expects). Returns 0 to serve,
 * 1 when --help was printed, 2 on a bad command line (already reported).
 */
static int parse_serve_args(int argc, char **argv, serve_opts *o)
{
    int c;

    /* "+" stops at the first non-option. An unknown flag or a missing value is named by
     * getopt itself ("unrecognized option '--x'", "option '--port' requires an argument"),
     * as in sundialctl and the C SDK's examples, and the usage follows. */
    opterr = 1;
    optind = 1;
    while ((c = getopt_long_only(argc, argv, "+", long_options, NULL)) != -1) {
        if (c == OPT_HELP) {
            usage(stdout);
            return 1;
        }
        if (c == '?') {
            usage(stderr);
            return 2;
        }
        int rc = parse_place_flag(c, o);
        if (rc == -1) {
            rc = parse_limit_flag(c, o);
        }
        if (rc == -1) {
            rc = parse_prism_flag(c, argc, argv, o);
        }
        if (rc == -1) { /* a flag of the table that no parser takes: a bug, said as such */
            fprintf(stderr, "sundial: flag \"%s\" is not handled\n", argv[optind - 1]);
            return 2;
        }
        if (rc != 0) {
            return rc;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sundial: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Serving                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static void server_closed(void *ctx)
{
    (void)ctx;
    sd_rpc_loop_break(EV_DEFAULT, EVBREAK_ALL);
}

static void stop_serving(serve_state *s)
{
    if (s->stopping) {
        return;
    }
    s->stopping = true;
    ev_timer_stop(EV_DEFAULT, &s->idle_tick);
    ev_check_stop(EV_DEFAULT, &s->detach_check);
    sd_server_shutdown(s->server, 1000, server_closed, s);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    serve_state *s = w->data;
    (void)loop;
    (void)revents;
    if (!s->stopping) {
        SD_INFO("main", "signal %d: shutting down", w->signum);
    }
    stop_serving(s);
}

static void on_idle_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    serve_state *s = w->data;
    size_t total = 0;
    size_t active = 0;
    (void)revents;
    sd_server_job_counts(s->server, &total, &active);
    ev_tstamp now = ev_now(loop);
    if (active > 0 || total != s->last_total) {
        s->last_busy = now;
        s->last_total = total;
        return;
    }
    if (now - s->last_busy >= s->idle_timeout_s) {
        SD_INFO("main", "no active job for %.3f s (--idle_shutdown_timeout): shutting down",
                s->idle_timeout_s);
        stop_serving(s);
    }
}

/* The first job is prepared: the launcher may go (runner/detach.c). */
static void on_detach_check(struct ev_loop *loop, ev_check *w, int revents)
{
    serve_state *s = w->data;
    size_t total = 0;
    (void)revents;
    sd_server_job_counts(s->server, &total, NULL);
    if (total > 0) {
        ev_check_stop(loop, w);
        sd_detach_ready(&s->detach_fd);
    }
}

static int serve(int argc, char **argv, long default_port)
{
    serve_opts o;
    serve_state s;
    sd_err err;

    serve_opts_init(&o, default_port);
    int rc = parse_serve_args(argc, argv, &o);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    if (o.have_log_level) {
        sd_log_set_level(o.log_level);
    } else if (getenv("SUNDIAL_LOG") == NULL) {
        /* A server says by default when it starts, and when each job starts and ends (info);
         * the embedded runner inside a user's program stays quiet unless asked (warn). */
        sd_log_set_level(SD_LOG_INFO);
    }
    /* dev and text are the same text lines; json is one object a line. */
    sd_log_set_json(strcmp(o.log_kind, "json") == 0);

    /* Listen before anything else (see sd_rpc_listen_early): Beam's launchers connect a few
     * milliseconds after the exec, and a refused connect costs them a second of backoff. The
     * private directory, the janitor, gRPC, the services and the web UI come after. */
    int early_fd = -1;
    int early_port = (int)o.port;
    sd_err_clear(&err);
    if (sd_rpc_listen_early(o.host, (int)o.port, &early_fd, &early_port, &err) != SD_OK) {
        fprintf(stderr, "sundial: %s\n", sd_err_msg(&err));
        return 1;
    }

    memset(&s, 0, sizeof(s));
    signal(SIGPIPE, SIG_IGN);
    s.detach_fd = -1;
    if (sd_detach_wanted(default_port == DEFAULT_PRISM_PORT, o.have_log_kind)) {
        s.detach_fd = sd_detach_split(early_fd); /* the launcher stays in there */
    }
    struct ev_loop *loop = EV_DEFAULT;
    sd_server_config cfg = { 0 };
    cfg.host = o.host;
    cfg.port = early_port;
    cfg.have_listen_fd = early_fd >= 0;
    cfg.listen_fd = early_fd;
    cfg.wall_clock = o.wall;
    cfg.max_bundle_bytes = (size_t)o.max_bundle;
    cfg.hang_timeout_s = (int)o.hang;
    /* 0 on the command line means never; the executor reads 0 as its default. */
    cfg.stall_timeout_s = o.stall < 0 ? 0 : o.stall == 0 ? -1 : (int)o.stall;
    cfg.livelock_rounds = o.livelock < 0 ? 0 : o.livelock == 0 ? -1 : (int64_t)o.livelock;
    cfg.memory_limit = o.memory_limit < 0 ? 0 : o.memory_limit == 0 ? -1 : o.memory_limit;
    cfg.spill_dir = o.spill_dir;
    cfg.record_schedule_dir = o.record_schedule_dir;
    cfg.replay_schedule = o.replay_schedule;
    cfg.artifact_dir = o.artifacts_dir;
    char *own_dir = NULL;
    if (o.artifacts_dir == NULL) {
        /* Made here, before any thread starts, so that a janitor process can remove it even
         * when this one is killed (Beam's Python PortableRunnerTest ends its runner with
         * SIGKILL; SIGTERM and SIGINT are handled and clean up themselves). */
        sd_err_clear(&err);
        if (sd_private_tmpdir("sundial", &own_dir, &err) != SD_OK ||
            sd_remove_when_gone(own_dir, &err) != SD_OK) {
            fprintf(stderr, "sundial: %s\n", sd_err_msg(&err));
            if (own_dir != NULL) {
                sd_rmtree(own_dir);
                sd_free(own_dir);
            }
            if (early_fd >= 0) {
                (void)close(early_fd);
            }
            return 1;
        }
        cfg.artifact_dir = own_dir;
        cfg.own_artifact_dir = true;
    }
    cfg.job_history = (int)o.job_history;
    cfg.job_history_ttl_s = o.job_history_ttl_s;
    cfg.max_pipeline_bytes = o.max_pipeline_bytes < 0    ? 0
                             : o.max_pipeline_bytes == 0 ? SIZE_MAX
                                                         : (size_t)o.max_pipeline_bytes;
    cfg.max_pipeline_transforms = o.max_pipeline_transforms < 0 ? 0
                                  : o.max_pipeline_transforms == 0
                                      ? SIZE_MAX
                                      : (size_t)o.max_pipeline_transforms;
    /* The web UI: see the header comment. Prism's command line serves it unless told not to. */
    bool prism = default_port == DEFAULT_PRISM_PORT;
    cfg.serve_http = o.have_serve_http ? o.serve_http : (prism || o.have_web_port);
    cfg.web_port = (int)o.web_port;
    cfg.web_optional = !o.have_web_port;
    sd_err_clear(&err);
    if (sd_server_create(loop, &cfg, &s.server, &err) != SD_OK) {
        fprintf(stderr, "sundial: %s\n", sd_err_msg(&err));
        if (own_dir != NULL) {
            sd_rmtree(own_dir);
            sd_free(own_dir);
        }
        return 1;
    }
    ev_signal_init(&s.sigint, on_signal, SIGINT);
    ev_signal_init(&s.sigterm, on_signal, SIGTERM);
    s.sigint.data = &s;
    s.sigterm.data = &s;
    ev_signal_start(loop, &s.sigint);
    ev_signal_start(loop, &s.sigterm);

    ev_check_init(&s.detach_check, on_detach_check);
    s.detach_check.data = &s;
    if (s.detach_fd >= 0) {
        ev_check_start(loop, &s.detach_check);
    }

    ev_timer_init(&s.idle_tick, on_idle_tick, 0.0, 0.0);
    s.idle_tick.data = &s;
    s.idle_timeout_s = o.idle_timeout_s;
    if (s.idle_timeout_s > 0) {
        double tick = s.idle_timeout_s / 4.0;
        tick = tick < 0.05 ? 0.05 : tick > 1.0 ? 1.0 : tick;
        ev_timer_set(&s.idle_tick, tick, tick);
        s.last_busy = ev_now(loop);
        ev_timer_start(loop, &s.idle_tick);
    }

    printf("listening on %s\n", sd_server_endpoint(s.server));
    if (sd_server_web_url(s.server) != NULL) {
        printf("web ui on %s\n", sd_server_web_url(s.server));
    }
    fflush(stdout);
    if (!is_loopback(o.host)) {
        fprintf(stderr,
                "sundial: WARNING: listening on %s, beyond loopback, with no authentication: "
                "anyone who can reach this port can run code on this machine (a pipeline's "
                "PROCESS environment is a command line)\n",
                sd_server_endpoint(s.server));
    }
    SD_INFO("main", "Sundial job server on %s (clock %s)", sd_server_endpoint(s.server),
            o.wall ? "wall" : "synthetic");

    sd_rpc_loop_run(loop);

    ev_timer_stop(loop, &s.idle_tick);
    ev_signal_stop(loop, &s.sigint);
    ev_signal_stop(loop, &s.sigterm);
    sd_server_destroy(s.server); /* removes own_dir */
    sd_free(own_dir);
    return 0;
}

/*
 * Memory goes back to the system when a job is done with it. Elements of a megabyte and more
 * pass through the server (gRPC's receive buffers on its own threads, decoded messages, bundle
 * outputs, GroupByKey values), and glibc by default raises its mmap threshold as large blocks
 * are freed, up to 32 MiB, so later ones come from the per-thread heaps, which give memory back
 * only from their top: a server that had moved 256 MiB of 1 MiB elements kept about 200 MiB
 * after the job ended, and its peak was 2.5 times the data it held. A fixed threshold of
 * 256 KiB maps every block from that size up on its own, so freeing it returns it at once; the
 * peak falls to about twice the data held and the resident size returns to its start after each
 * job. Smaller blocks, the common case, are untouched. A user's MALLOC_MMAP_THRESHOLD_ wins.
 */
#define SERVER_MMAP_THRESHOLD (256 * 1024)

static void tune_malloc(void)
{
#if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD)
    if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL) {
        (void)mallopt(M_MMAP_THRESHOLD, SERVER_MMAP_THRESHOLD);
    }
#endif
}

int main(int argc, char **argv)
{
    tune_malloc();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("sundial %s\n", SD_PROJECT_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "--list-options") == 0 || strcmp(argv[1], "list-options") == 0) {
        /* The runner's own pipeline options as JSON (runner/jobservice/options.h). */
        return sd_option_table_write_json(stdout) == 0 && fflush(stdout) == 0 ? 0 : 1;
    }
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "serve") == 0) {
        /* getopt wants argv[0] to be the program (it names it in its errors): it moves into
         * the place of "serve". */
        argv[1] = argv[0];
        return serve(argc - 1, argv + 1, DEFAULT_SERVE_PORT);
    }
    if (argv[1][0] == '-') {
        /* Prism's command line: flags and no subcommand. */
        return serve(argc, argv, DEFAULT_PRISM_PORT);
    }
    fprintf(stderr, "sundial: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
