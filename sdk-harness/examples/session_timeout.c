/*
 * session_timeout: per-user sessions that end after an hour without activity, computed by a
 * stateful C DoFn with a processing-time timer — and finished in milliseconds, because the
 * Sundial runner's test-mode clock jumps straight to the next timer when nothing else can
 * happen.
 *
 *   session_timeout [--endpoint=HOST:PORT] [--wall]
 *
 * Each event is KV<user, clicks>. The DoFn appends clicks to a bag state and (re)sets the
 * user's "timeout" timer to one hour of processing time from now; when the timer fires it
 * emits "user: N events, M clicks" and clears the bag. With --wall the runner uses the wall
 * clock instead (production mode), and the program really waits an hour.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/time.h"
#include "sundial/sundial.h"

#define TIMEOUT_MS (3600LL * 1000LL)

static sd_status on_event(sd_ctx *c, void *state)
{
    sd_bytes user, clicks;
    (void)state;
    if (sd_ctx_kv(c, &user, &clicks) != SD_OK) {
        return sd_fail(c, "event is not KV<string, varint>");
    }
    sd_status st = sd_state_append(c, "clicks", clicks);
    if (st == SD_OK) {
        st = sd_timer_set(c, "timeout", SD_BYTES_NULL, sd_ctx_processing_time(c) + TIMEOUT_MS,
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
    int n = snprintf(line, sizeof(line), "%.*s: %lld events, %lld clicks", (int)user.len,
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
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--endpoint=", 11) == 0) {
            opts.endpoint = argv[i] + 11;
        } else if (strcmp(argv[i], "--wall") == 0) {
            opts.wall_clock = true;
        } else {
            fprintf(stderr, "usage: session_timeout [--endpoint=HOST:PORT] [--wall]\n");
            return 2;
        }
    }
    sd_pipeline *p = sd_pipeline_create("session_timeout");
    const sd_coder *kv = sd_coder_kv(p, sd_coder_string(p), sd_coder_varint(p));
    const char *users[] = { "ada", "bob", "ada", "cy", "bob", "ada" };
    const int64_t clicks[] = { 3, 1, 4, 1, 5, 9 };
    sd_buf all;
    sd_buf_init(&all, 0);
    size_t offs[7] = { 0 };
    sd_time ts[6];
    for (int i = 0; i < 6; i++) {
        if (sd_enc_str(&all, users[i]) != SD_OK || sd_enc_int(&all, clicks[i]) != SD_OK) {
            return 1;
        }
        offs[i + 1] = all.len;
        ts[i] = 1000 * (i + 1);
    }
    sd_bytes events[6];
    for (int i = 0; i < 6; i++) {
        events[i] = sd_bytes_make(all.data + offs[i], offs[i + 1] - offs[i]);
    }
    sd_pcoll *in = sd_create(p, "Events", kv, events, 6, ts);
    sd_state_spec bag = { .id = "clicks", .kind = SD_STATE_BAG, .coder = sd_coder_varint(p) };
    sd_timer_spec timer = { "timeout", SD_PROCESSING_TIME };
    const sd_coder *outc[1] = { sd_coder_string(p) };
    sd_pardo_spec spec = { .dofn = "sessions:track", .n_outputs = 1, .output_coders = outc,
                           .n_states = 1, .states = &bag, .n_timers = 1, .timers = &timer };
    sd_pcoll *sessions_out = sd_pardo(p, "Sessions", in, &spec, NULL);
    sd_apply(p, "Print", sessions_out, "sessions:print", SD_BYTES_NULL, NULL);
    sd_err err;
    sd_err_clear(&err);
    int64_t t0 = sd_mono_now_ms();
    sd_status st = sd_pipeline_run(p, &opts, NULL, &err);
    if (st != SD_OK) {
        fprintf(stderr, "session_timeout: %s\n", sd_err_msg(&err));
    } else {
        fprintf(stderr, "one hour of session timeouts took %lld ms\n",
                (long long)(sd_mono_now_ms() - t0));
    }
    sd_buf_deinit(&all);
    sd_pipeline_destroy(p);
    return st == SD_OK ? 0 : 1;
}
