/* Sundial: the transport's capture switch (request messages written to files for fuzz seeds). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/transport/rpc_int.h"

/*
 * Capture switch for the fuzz seeds (tests/fuzz/README.md): with SUNDIAL_CAPTURE_DIR set, every
 * request message a handler receives is also written to
 * <dir>/<pid>-<seq>-<Method>-<o|m>[-<worker_id>].bin (o: a unary or server-streaming request,
 * m: a message on a client stream; seq orders them across all calls). Off by default; a
 * failed write is ignored.
 */
static const char *capture_dir;
static pthread_once_t capture_once = PTHREAD_ONCE_INIT;

static void capture_init(void)
{
    const char *dir = getenv("SUNDIAL_CAPTURE_DIR");
    capture_dir = dir != NULL && dir[0] != '\0' ? dir : NULL;
}

void sd__rpc_capture(const sd_rpc_call *call, sd_bytes msg, bool open)
{
    /* Every hub of the process (a runner and an SDK runtime in one) shares the sequence. */
    static atomic_ulong seq;
    char name[512], wid[128];
    const char *method, *w, *path;
    size_t n = 0;
    pthread_once(&capture_once, capture_init);
    const char *dir = capture_dir;
    if (dir == NULL) {
        return;
    }
    path = sd_rpc_call_method(call);
    w = sd_rpc_call_metadata(call, "worker_id"); /* looked up only when capturing */
    method = strrchr(path, '/');
    method = method != NULL ? method + 1 : path;
    for (; w != NULL && w[n] != '\0' && n + 1 < sizeof(wid); n++) {
        char ch = w[n];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_';
        wid[n] = ok ? ch : '_';
    }
    wid[n] = '\0';
    snprintf(name, sizeof(name), "%s/%ld-%08lu-%s-%c%s%s.bin", dir, (long)getpid(),
             atomic_fetch_add(&seq, 1) + 1, method, open ? 'o' : 'm', n > 0 ? "-" : "", wid);
    FILE *f = fopen(name, "wb");
    if (f != NULL) {
        if (msg.len > 0) {
            (void)fwrite(msg.ptr, 1, msg.len, f);
        }
        fclose(f);
    }
}
