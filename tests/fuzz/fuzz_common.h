/*
 * Sundial fuzz targets: shared harness pieces (header-only, static helpers).
 *
 * What is here
 * ------------
 * - fz_reader: cuts a fuzz input into records "[header byte][24-bit little-endian length]
 *   [bytes]" (a short last record takes what is left), the input format of the multi-message
 *   targets.
 * - fz_plan_engine: Pipeline -> sd_plan_validate -> sd_plan_build -> xplan -> a fresh engine
 *   set up as the executor sets one up (exec_start.c engine_setup), then a bounded drive of the
 *   engine in which every SDK bundle completes with no output, then teardown.
 * - fz_world: one libev loop, one transport hub, one sd_fnapi, created once per process, and
 *   per input an executor whose environments start through the exec seam
 *   (sd__exec_set_env_starter) plus a job service (rpc NULL) whose transport is a fake io
 *   that discards what it sends. So a job is prepared and run by the real handlers and the
 *   real executor, its workers are registered with the real Fn API, and nothing touches the
 *   network or starts a process.
 * - fz_pipelines: the captured PrepareJobRequests in tests/fuzz/pipelines/ (or the directory
 *   named by SD_FUZZ_PIPELINES), loaded once.
 *
 * The harness aborts only on its own setup failures; everything the input controls goes
 * through the runner's error paths.
 */
#ifndef SD_TESTS_FUZZ_FUZZ_COMMON_H
#define SD_TESTS_FUZZ_FUZZ_COMMON_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/engine/em.h"
#include "runner/exec/exec.h"
#include "runner/exec/exec_int.h"
#include "runner/fnapi/fnapi.h"
#include "runner/fnapi/fnapi_int.h"
#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"
#include "runner/plan/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FZ_MAX_RECORDS 256

static inline void fz_die(const char *what)
{
    fprintf(stderr, "fuzz harness setup failed: %s\n", what);
    abort(); /* setup only: the harness owns the process */
}

/* ---------------------------------------------------------------- records */

typedef struct fz_reader {
    const uint8_t *p;
    size_t left;
    size_t n_read;
} fz_reader;

static inline fz_reader fz_reader_make(const uint8_t *data, size_t size)
{
    fz_reader r = { data, size, 0 };
    return r;
}

/* The next record. OUT: hdr, msg (borrowed from the input). False at the end. */
static inline bool fz_next(fz_reader *r, uint8_t *hdr, sd_bytes *msg)
{
    size_t len;
    if (r->left < 1 || r->n_read >= FZ_MAX_RECORDS) {
        return false;
    }
    *hdr = r->p[0];
    len = r->left >= 4 ? (size_t)r->p[1] | (size_t)r->p[2] << 8 | (size_t)r->p[3] << 16 : 0;
    r->p += r->left >= 4 ? 4 : r->left;
    r->left -= r->left >= 4 ? 4 : r->left;
    if (len > r->left) {
        len = r->left;
    }
    *msg = sd_bytes_make(len > 0 ? r->p : (const uint8_t *)"", len);
    r->p += len;
    r->left -= len;
    r->n_read++;
    return true;
}

/* ---------------------------------------------------------------- plan + engine */

/* How many bundles fz_plan_engine drives before tearing down. */
#define FZ_MAX_BUNDLES 64

/*
 * Plan the pipeline and, when it plans, set up an engine with it and drive it a little.
 * Mirrors exec_start.c engine_setup for the config (synthetic clock, bounded unless a TestStream or
 * an unbounded PCollection says otherwise).
 */
static inline void fz_plan_engine(const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *p)
{
    sd_err err;
    sd_plan *plan = NULL;
    sd_exec_plan xp;
    sd_em *em = NULL;
    sd_plan_options popt = { 0 };
    bool have_xp = false;

    sd_err_clear(&err);
    if (sd_plan_validate(p, &err) != SD_OK) {
        return;
    }
    popt.data_url = "127.0.0.1:1";
    popt.state_url = "127.0.0.1:1";
    popt.lift_combiners = true;
    if (sd_plan_build(p, &popt, &plan, &err) != SD_OK) {
        return;
    }
    if (sd_exec_plan_init(plan, &xp, &err) != SD_OK) {
        goto out;
    }
    have_xp = true;
    sd_em_config cfg = { 0 };
    cfg.clock = SD_CLOCK_SYNTHETIC;
    cfg.max_bundle_bytes = 256 * 1024;
    cfg.bounded = plan->teststream_stage == SD_PLAN_NONE;
    for (size_t i = 0; i < plan->n_pcollections; i++) {
        if (!plan->pcollections[i].bounded) {
            cfg.bounded = false;
        }
    }
    cfg.streaming = !cfg.bounded;
    if (sd_em_create(&cfg, &em) != SD_OK) {
        goto out;
    }
    if (sd_exec_plan_to_engine(&xp, em, &err) != SD_OK) {
        goto out;
    }
    for (int i = 0; i < FZ_MAX_BUNDLES; i++) {
        sd_bundle *b = NULL;
        if (sd_em_next_bundle(em, &b, &err) != SD_OK || b == NULL) {
            break;
        }
        if (sd_em_complete_bundle(em, b, &err) != SD_OK) {
            break;
        }
    }
    if (!sd_em_done(em)) {
        sd_buf dump;
        sd_buf_init(&dump, 1 << 16);
        (void)sd_em_check_stuck(em, &dump);
        sd_buf_deinit(&dump);
    }
out:
    sd_em_destroy(em);
    if (have_xp) {
        sd_exec_plan_deinit(&xp);
    }
    sd_plan_destroy(plan);
}

/* ---------------------------------------------------------------- fake job-service io */

typedef struct fz_call {
    sd__jobsvc_method m;
    void *rec;     /* the service's record while the call is open, else NULL */
    bool finished; /* the service finished it */
    size_t n_sent;
} fz_call;

static inline sd_status fz_send(void *io_ctx, void *call, sd_bytes msg)
{
    fz_call *c = call;
    (void)io_ctx;
    (void)msg;
    if (c->finished) {
        return SD_ESTATE;
    }
    c->n_sent++;
    return SD_OK;
}

static inline void fz_finish(void *io_ctx, void *call, sd_rpc_code code, const char *message)
{
    fz_call *c = call;
    (void)io_ctx;
    (void)code;
    (void)message;
    c->finished = true;
}

static inline size_t fz_queue_len(void *io_ctx, void *call)
{
    (void)io_ctx;
    (void)call;
    return 0;
}

static int fz_want_pump;

static inline void fz_want_pump_cb(void *io_ctx)
{
    (void)io_ctx;
    fz_want_pump++;
}

static inline void fz_install_io(sd_jobsvc *svc)
{
    sd__jobsvc_io io = { .send = fz_send,
                         .finish = fz_finish,
                         .send_queue_len = fz_queue_len,
                         .want_pump = fz_want_pump_cb };
    sd__jobsvc_set_io(svc, &io);
}

static inline void fz_check(const sd_jobsvc *svc)
{
    const char *broken = sd__jobsvc_check(svc);
    if (broken != NULL) {
        fprintf(stderr, "job service invariant broken: %s\n", broken);
        abort(); /* a finding: the fuzzer reports it as a crash */
    }
}

/* Open a call with request bytes; the call stays open (rec set) or was answered at once. */
static inline void fz_open(sd_jobsvc *svc, fz_call *c, sd__jobsvc_method m, sd_bytes req)
{
    memset(c, 0, sizeof(*c));
    c->m = m;
    c->rec = sd__jobsvc_on_open(svc, m, c, req);
    fz_check(svc);
    if (fz_want_pump > 0) {
        fz_want_pump = 0;
        sd__jobsvc_pump(svc);
        fz_check(svc);
    }
}

/* The transport's on_close for a call still open (cancelled unless the service finished it). */
static inline void fz_close(sd_jobsvc *svc, fz_call *c)
{
    if (c->rec != NULL) {
        void *rec = c->rec;
        c->rec = NULL;
        sd__jobsvc_on_close(svc, rec, !c->finished);
        fz_check(svc);
    }
}

/* ---------------------------------------------------------------- world */

#define FZ_MAX_WORKERS 8

typedef struct fz_world {
    struct ev_loop *loop;
    sd_rpc *rpc;
    sd_fnapi *fn;
    /* per input */
    sd_exec *ex;
    sd_jobsvc *svc;
    char *workers[FZ_MAX_WORKERS]; /* ids of the workers the executor started, in order */
    size_t n_workers;
} fz_world;

static fz_world W;

/* The memory budget fz_world_begin gives the executor (0: its default); fuzz_fnapi sets one
 * byte for half of its inputs, so the spill file takes everything those sessions send. */
static int64_t fz_memory_limit;

static inline sd_status
fz_env_starter(void *ctx, const char *worker_id, const char *env_id, sd_err *err)
{
    (void)ctx;
    (void)env_id;
    (void)err;
    if (W.n_workers < FZ_MAX_WORKERS) {
        W.workers[W.n_workers] = sd_strdup(worker_id);
        if (W.workers[W.n_workers] != NULL) {
            W.n_workers++;
        }
    }
    return SD_OK;
}

static inline void fz_world_init(void)
{
    sd_err err;
    sd_err_clear(&err);
    sd_log_set_level(SD_LOG_OFF);
    W.loop = ev_loop_new(EVFLAG_AUTO);
    if (W.loop == NULL || sd_rpc_create(W.loop, &W.rpc, &err) != SD_OK ||
        sd_fnapi_create(W.rpc, &W.fn, &err) != SD_OK) {
        fz_die("loop, transport hub or Fn API");
    }
}

/* A fresh executor and job service (artifact_dir may be NULL) for one input. */
static inline void fz_world_begin(const char *artifact_dir)
{
    sd_err err;
    sd_exec_config cfg = { 0 };
    sd_err_clear(&err);
    cfg.endpoint = "127.0.0.1:1";
    cfg.stall_timeout_s = -1;
    cfg.memory_limit = fz_memory_limit;
    if (sd_exec_create(W.rpc, W.fn, &cfg, &W.ex, &err) != SD_OK) {
        fz_die("executor");
    }
    sd__exec_set_env_starter(W.ex, fz_env_starter, NULL);
    sd_job_hooks hooks = sd_exec_job_hooks(W.ex);
    if (sd_jobsvc_create(NULL, &hooks, artifact_dir, &W.svc, &err) != SD_OK) {
        fz_die("job service");
    }
    fz_install_io(W.svc);
    W.n_workers = 0;
}

/* Let the loop run what is due now (the executor's idle kick: scheduling, dispatch). */
static inline void fz_world_pump(void)
{
    ev_run(W.loop, EVRUN_NOWAIT);
}

static inline void fz_world_end(void)
{
    sd_exec_destroy(W.ex); /* cancels the running job: its workers are destroyed */
    W.ex = NULL;
    fz_check(W.svc);
    sd_jobsvc_destroy(W.svc);
    W.svc = NULL;
    for (size_t i = 0; i < W.n_workers; i++) {
        sd_free(W.workers[i]);
    }
    W.n_workers = 0;
}

/* Prepare and run a job from packed PrepareJobRequest bytes. True when the job runs. */
static inline bool fz_world_submit(sd_bytes prepare)
{
    fz_call c;
    Org__Apache__Beam__Model__JobManagement__V1__RunJobRequest run =
        ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__RUN_JOB_REQUEST__INIT;
    uint8_t buf[64];
    fz_open(W.svc, &c, SD__JS_PREPARE, prepare);
    fz_close(W.svc, &c);
    sd_job *job = sd_jobsvc_find(W.svc, "job-001");
    if (job == NULL) {
        return false;
    }
    run.preparation_id = (char *)"job-001";
    size_t n = protobuf_c_message_get_packed_size(&run.base);
    if (n > sizeof(buf)) {
        return false;
    }
    protobuf_c_message_pack(&run.base, buf);
    fz_open(W.svc, &c, SD__JS_RUN, sd_bytes_make(buf, n));
    fz_close(W.svc, &c);
    fz_world_pump(); /* the first sd__exec_schedule(): bundles dispatched, split timers started */
    fz_world_pump(); /* split timers of 0 s fire */
    return sd_job_state_get(job) == SD_JOB_RUNNING;
}

/* ---------------------------------------------------------------- captured pipelines */

#define FZ_MAX_PIPELINES 64

typedef struct fz_pipeline {
    char name[128];
    uint8_t *bytes; /* packed PrepareJobRequest */
    size_t len;
} fz_pipeline;

static fz_pipeline fz_pipelines[FZ_MAX_PIPELINES];
static size_t fz_n_pipelines;

static inline int fz_name_cmp(const void *a, const void *b)
{
    return strcmp(((const fz_pipeline *)a)->name, ((const fz_pipeline *)b)->name);
}

/*
 * Load every *.prepare file of the pipelines directory, sorted by name (so an input's
 * selector byte means the same pipeline on every machine).
 */
static inline void fz_load_pipelines(void)
{
    const char *dir = getenv("SD_FUZZ_PIPELINES");
    char path[1024];
    DIR *d;
    struct dirent *de;
    if (dir == NULL || dir[0] == '\0') {
        dir = SD_SOURCE_DIR "/tests/fuzz/pipelines";
    }
    d = opendir(dir);
    if (d == NULL) {
        fz_die("cannot open the pipelines directory (tests/fuzz/pipelines or SD_FUZZ_PIPELINES)");
    }
    while ((de = readdir(d)) != NULL && fz_n_pipelines < FZ_MAX_PIPELINES) {
        size_t nl = strlen(de->d_name);
        if (nl < 9 || nl >= sizeof(fz_pipelines[0].name) ||
            strcmp(de->d_name + nl - 8, ".prepare") != 0) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            continue;
        }
        fz_pipeline *fp = &fz_pipelines[fz_n_pipelines];
        size_t cap = 1 << 16, len = 0;
        uint8_t *b = sd_malloc(cap);
        size_t got;
        while (b != NULL && (got = fread(b + len, 1, cap - len, f)) > 0) {
            len += got;
            if (len == cap) {
                uint8_t *nb = sd_realloc(b, cap * 2);
                if (nb == NULL) {
                    sd_free(b);
                    b = NULL;
                    break;
                }
                b = nb;
                cap *= 2;
            }
        }
        fclose(f);
        if (b == NULL) {
            fz_die("out of memory loading pipelines");
        }
        snprintf(fp->name, sizeof(fp->name), "%s", de->d_name);
        fp->bytes = b;
        fp->len = len;
        fz_n_pipelines++;
    }
    closedir(d);
    if (fz_n_pipelines == 0) {
        fz_die("no *.prepare files in the pipelines directory");
    }
    qsort(fz_pipelines, fz_n_pipelines, sizeof(fz_pipelines[0]), fz_name_cmp);
}

#endif
