/*
 * Sundial fuzz target: every Job API, artifact staging and artifact retrieval request.
 *
 * The input is a session of requests in fz_reader records. A record's header byte h picks
 * what happens (h % 16):
 *   0..13  open a call of method h (sd__jobsvc_method order: Prepare, Run, GetJobs, GetState,
 *          GetPipeline, Cancel, Drain, GetStateStream, GetMessageStream, GetJobMetrics,
 *          DescribePipelineOptions, ResolveArtifacts, GetArtifact, ReverseArtifactRetrieval)
 *          with the record's bytes as its request (empty for the bidi staging call);
 *   14     the bytes are a client message on the most recent open client-streaming call (the
 *          staging call, whose client sends ArtifactResponseWrappers);
 *   15     the most recent open call is closed (the client went away).
 * Each input gets a fresh job service (so the first job is always "job-001") wired to the
 * real executor, whose environments start through the exec seam, and the real Fn API; the
 * service's invariant checker runs after every step and a broken invariant aborts. At the end
 * every open call is closed, the executor (and so every running job) and the service are
 * destroyed. Staged artifacts go to a private directory made once per process and emptied
 * after every input (making and removing one per input cost a few per cent of the time).
 * Seeds: the Job API traffic of Python SDK pipelines, captured with SUNDIAL_CAPTURE_DIR.
 */
#include <dirent.h>

#include "runner/base/fs.h"
#include "tests/fuzz/fuzz_common.h"

#define MAX_CALLS 64

static char *artifact_root;

static void remove_root(void)
{
    sd_rmtree(artifact_root);
}

/* Remove everything under artifact_root (what a job kept, e.g. sundial_keep_artifacts). */
static void empty_root(void)
{
    DIR *d = opendir(artifact_root);
    struct dirent *e;
    if (d == NULL) {
        return; /* the service makes it again */
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            char *path = sd_asprintf("%s/%s", artifact_root, e->d_name);
            if (path == NULL) {
                fz_die("out of memory");
            }
            sd_rmtree(path);
            sd_free(path);
        }
    }
    closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    sd_err err;
    (void)argc;
    (void)argv;
    fz_world_init();
    sd_err_clear(&err);
    if (sd_private_tmpdir("sundial-fuzz-jobapi", &artifact_root, &err) != SD_OK) {
        fz_die("artifact directory");
    }
    atexit(remove_root); /* libFuzzer exits through exit(); a crash leaves it behind */
    return 0;
}

static bool is_client_streaming(sd__jobsvc_method m)
{
    sd_rpc_kind k = sd__jobsvc_method_get(m)->kind;
    return k == SD_RPC_KIND_CLIENT_STREAM || k == SD_RPC_KIND_BIDI;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_call calls[MAX_CALLS];
    size_t n_calls = 0;
    fz_reader rd = fz_reader_make(data, size);
    uint8_t hdr;
    sd_bytes msg;

    fz_world_begin(artifact_root);
    sd_jobsvc_set_history(W.svc, 4);

    while (fz_next(&rd, &hdr, &msg)) {
        unsigned op = hdr % 16;
        if (op < SD__JS_METHOD_COUNT) {
            if (n_calls == MAX_CALLS) {
                break;
            }
            fz_call *c = &calls[n_calls];
            fz_open(W.svc, c, (sd__jobsvc_method)op, msg);
            if (c->rec != NULL) {
                n_calls++;
            }
        } else if (op == 14) {
            for (size_t i = n_calls; i-- > 0;) {
                if (calls[i].rec != NULL && !calls[i].finished && is_client_streaming(calls[i].m)) {
                    sd__jobsvc_on_message(W.svc, calls[i].rec, msg);
                    fz_check(W.svc);
                    break;
                }
            }
        } else if (n_calls > 0) {
            fz_close(W.svc, &calls[--n_calls]);
        }
        fz_world_pump();
        if (fz_want_pump > 0) {
            fz_want_pump = 0;
            sd__jobsvc_pump(W.svc);
            fz_check(W.svc);
        }
    }
    while (n_calls > 0) {
        fz_close(W.svc, &calls[--n_calls]);
    }
    fz_world_end();
    empty_root();
    return 0;
}
