/*
 * Sundial: the robustness test's harness (tests/integration/robust), shared by its files.
 *
 * One binary, test_robust, built from:
 *   robust_harness.c       the fixture (one embedded runner, a client loop), Job API client
 *                          calls, hand-made pipelines, running a job to its end, the fake
 *                          worker pool (StartWorker/StopWorker), group setup and teardown
 *   robust_fake.c          the fake SDK worker and its table of misbehaviours
 *   test_robust_jobapi.c   part 1: the Job API and environments probed with bad requests
 *   test_robust_workers.c  part 2: the table of misbehaving workers, cancels and hangs
 *   test_robust.c          part 3: Fn API isolation, the runner still serves; main()
 * The tests run in that order against one runner (see test_robust.c).
 */
#ifndef SD_TESTS_INTEGRATION_ROBUST_ROBUST_H
#define SD_TESTS_INTEGRATION_ROBUST_ROBUST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <ev.h>

#include "org/apache/beam/model/job_management/v1/beam_artifact_api.pb-c.h"
#include "org/apache/beam/model/job_management/v1/beam_job_api.pb-c.h"
#include "proto/pb.h"
#include "runner/base/buf.h"
#include "runner/base/vec.h"
#include "runner/server/embed.h"
#include "runner/transport/rpc.h"

#define PBJ(name) org__apache__beam__model__job_management__v1__##name
#define PBP(name) org__apache__beam__model__pipeline__v1__##name
#define PBF(name) org__apache__beam__model__fn_execution__v1__##name
#define FNE(x)    ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__##x
#define JSTATE(x) ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_STATE__ENUM__##x
#define MSG_IS_STATE \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_RESPONSE__RESPONSE_STATE_RESPONSE
#define MSG_IS_MESSAGE \
    ORG__APACHE__BEAM__MODEL__JOB_MANAGEMENT__V1__JOB_MESSAGES_RESPONSE__RESPONSE_MESSAGE_RESPONSE
#define JOB_MESSAGE_ERROR 5

#define JS  "/org.apache.beam.model.job_management.v1.JobService/"
#define ARS "/org.apache.beam.model.job_management.v1.ArtifactRetrievalService/"
#define ASS "/org.apache.beam.model.job_management.v1.ArtifactStagingService/"

#define FAKE_DOFN_URN   "beam:dofn:robust_fake:v1"
#define HANG_TIMEOUT_S  2
#define STALL_TIMEOUT_S 5
#define JOB_TIMEOUT_S   40.0

typedef Org__Apache__Beam__Model__JobManagement__V1__JobMessagesResponse msgs_resp;
typedef SD_FN(ProcessBundleProgressResponse) pb_ProgressResponse;
typedef SD_FN(StateKey__BagUserState) pb_BagUserState;
typedef SD_FN(StateGetRequest) pb_StateGetRequest;
typedef SD_FN(ProcessBundleDescriptor) pb_Descriptor;
typedef SD_PL(Components) pb_Components;
typedef SD_PL(FunctionSpec) pb_FunctionSpec;
typedef SD_FN(BundleApplication) pb_BundleApplication;
typedef SD_FN(StateKey__IterableSideInput) pb_IterableSideInput;
typedef SD_FN(StateAppendRequest) pb_StateAppendRequest;
typedef SD_FN(StateClearRequest) pb_StateClearRequest;

/* ================================================================ fixture */

typedef struct fake fake;

typedef struct mcase mcase;

typedef struct fixture {
    struct ev_loop *loop;
    sd_rpc *rpc;
    sd_embedded *emb;
    char runner_ep[64];
    sd_rpc_channel *ch; /* to the runner */
    sd_rpc_server *pool;
    char pool_ep[64];
    bool pool_closed;
    /* per job */
    const mcase *mode;
    fake *fakes;
    int start_calls;
    int stop_calls;
    char worker_id[160]; /* from the last StartWorker */
    char stage_a[64];    /* pardo1's stage id (its descriptor id up to the first '.') */
    char desc_a[160];    /* pardo1's descriptor id as the runner sent it */
    char grouped[256];   /* what pardo2 saw: "k1=[a,c] k2=[b]" */
    char state_error[512];
    bool acted_a;       /* pardo1's bundle reached the fake worker */
    int state_errors;   /* StateResponses with an error */
    int fetches;        /* GetProcessBundleDescriptor calls the fake workers made */
    int registered;     /* descriptors the runner pushed in RegisterRequests */
    char problem[1024]; /* first problem seen inside a callback */
} fixture;

extern fixture F;

/* ---------------------------------------------------------------- client calls */

typedef struct reply {
    bool done;
    sd_rpc_code code;
    char msg[4096];
    sd_buf data;
} reply;

/* A client stream: messages collected until the server closes it. */
typedef struct cstream {
    bool done;
    sd_rpc_code code;
    char msg[4096];
    sd_vec msgs; /* sd_buf */
} cstream;

/* ---------------------------------------------------------------- pipelines */
/* Every protobuf-c piece of a hand-made pipeline lives in this arena until it is packed. */
typedef struct arena {
    void *blocks[1024];
    size_t n;
} arena;

#define PL_MAX 16

typedef struct plb {
    arena a;
    pb_Pipeline *p;
    pb_Components *c;
} plb;

/* ---------------------------------------------------------------- jobs */
typedef struct job_result {
    char job_id[160];
    int state;
    char error[8192];  /* every JOB_MESSAGE_ERROR text, joined by " | " */
    char others[8192]; /* the other messages (warnings, worker logs), for diagnostics */
} job_result;

/* ---------------------------------------------------------------- the fake SDK worker */
typedef enum misbehave {
    MB_GOOD,
    MB_REGISTERED,      /* behaves; its environment takes descriptors pushed in a RegisterRequest */
    MB_GARBAGE_ELEMENT, /* sink data that is not a windowed KV */
    MB_GARBAGE_LAST,    /* the same, but the response first and the bad data last */
    MB_TRUNCATED_ELEMENT,   /* one good element, then half of another */
    MB_HALF_CLOSE_CONTROL,  /* half-close the control stream mid-bundle */
    MB_CANCEL_CONTROL,      /* cancel the control stream mid-bundle */
    MB_DISCONNECT,          /* drop the whole connection mid-bundle */
    MB_ERROR_RESPONSE,      /* ProcessBundle answered with an error string */
    MB_MALFORMED_DATA,      /* bytes on the Data stream that are not an Elements message */
    MB_MALFORMED_CONTROL,   /* bytes on the Control stream that are not an InstructionResponse */
    MB_MALFORMED_STATE,     /* bytes on the State stream that are not a StateRequest */
    MB_UNKNOWN_INSTRUCTION, /* data for an instruction nobody sent, then a good bundle */
    MB_UNKNOWN_TRANSFORM,   /* data for the right bundle but a transform that is no sink */
    MB_UNKNOWN_TIMER,       /* timers for a family the stage does not have */
    MB_WRONG_RESPONSE_KIND, /* ProcessBundle answered with a progress response */
    MB_STATE_UNKNOWN,       /* a state request naming no bundle, then a good bundle */
    MB_STATE_GARBAGE,       /* state requests with garbage keys for a stateless stage */
    MB_DUPLICATE_RESPONSE,  /* every response sent twice */
    MB_NO_IS_LAST,          /* answers ProcessBundle but never ends its output stream */
    MB_BAD_RESIDUAL,        /* a residual root whose element is not an input element */
    MB_ODD_METRICS,         /* monitoring infos with garbage payloads and empty URNs */
    MB_LOGS,                /* garbage on the Logging stream, then a real log entry */
    MB_STALL,               /* answers progress requests, never finishes the bundle */
    MB_HANG,                /* never answers the bundle nor progress requests */
    MB_POOL_REFUSES,        /* StartWorkerResponse.error */
    MB_POOL_FAILS           /* StartWorker fails with a gRPC status */
} misbehave;

struct mcase {
    const char *name;
    misbehave mb;
    int want_state;
    const char *want[5]; /* substrings of the error text; "$W" worker id, "$S" pardo1's stage */
};

typedef struct fdesc {
    char id[160];
    int status; /* 0 unknown, 1 fetching, 2 ready, 3 failed */
    int role;   /* 1 = pardo1's stage, 2 = pardo2's stage */
    char source[128];
    char sinks[4][128];
    size_t n_sinks;
} fdesc;

typedef struct fbundle {
    char iid[160];
    char desc[160];
    bool requested;
    bool input_done;
    bool acted;
    sd_buf input;
} fbundle;

struct fake {
    fake *next;
    const mcase *mode; /* the row this worker plays (F.mode when it started) */
    char id[160];
    sd_rpc_channel *ch;
    sd_rpc_stream *ctl;
    sd_rpc_stream *data;
    sd_rpc_stream *state;
    sd_rpc_stream *logging;
    int open; /* streams whose on_close has not run yet */
    bool closed_all;
    fdesc descs[4];
    size_t n_descs;
    fbundle bundles[32];
    size_t n_bundles;
    fbundle *waiting; /* a bundle waiting for `waiting_for` more StateResponses */
    const fdesc *waiting_desc;
    int waiting_for;
};

/* ================================================================ shared steps */

/* robust_harness.c */
void problem(const char *fmt, ...) SD_PRINTF(1, 2);
bool wait_for(const bool *flag, double seconds);
void settle(double seconds);
void pack(const ProtobufCMessage *m, sd_buf *out);
void unary_md(const char *path, sd_bytes req, const sd_rpc_metadata *md, size_t n_md, reply *r);
void unary(const char *path, sd_bytes req, reply *r);
void unary_msg(const char *path, const ProtobufCMessage *m, reply *r);
void reply_free(reply *r);
void cs_on_message(sd_rpc_stream *s, sd_bytes msg, void *ctx);
void cs_on_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx);
void stream_call(const char *path,
                 const sd_bytes *first,
                 bool keep_open,
                 cstream *c,
                 double seconds);
void cstream_free(cstream *c);
void arena_free(arena *a);
void pl_init(plb *b);
void pl_pcoll(plb *b, const char *id, const char *coder);
pb_Environment *pl_env(plb *b, const char *id, const char *urn, ProtobufCBinaryData payload);
void pl_transform(plb *b,
                  const char *id,
                  const char *urn,
                  const char *in,
                  const char *out,
                  const char *env);
void pl_common_coders(plb *b);
void pl_main_in(plb *b, const char *env_urn, ProtobufCBinaryData env_payload);
void pl_main(plb *b);
void prepare(const pb_Pipeline *p, const char *name, reply *r, char *prep_id, size_t cap);
void collect_messages(const char *job_id, job_result *out);
void run_prepared(const char *prep, const char *name, job_result *out);
void run_job(const pb_Pipeline *p, const char *name, job_result *out);
int group_setup(void **state);
int group_teardown(void **state);

/* robust_fake.c */
void fake_start(const char *worker_id, const char *control_url);
bool fakes_closed(void);
void fakes_free(void);

/* test_robust_jobapi.c */
void check_contains(const char *what, const char *text, const char *needle);

/* test_robust_workers.c */
void start_hung_job(const mcase *mode, char *prep, size_t cap);
void cancel_job(const char *prep);
void expect_workers_stopped(int starts);
/* The number of rows of the misbehaving-worker table (part 3 checks every one ran). */
size_t robust_n_cases(void);

/* The tests, one file per concern (main() in test_robust.c runs them in this order). */
void test_malformed_requests(void **state);
void test_unknown_ids(void **state);
void test_prepare_lists_every_problem(void **state);
void test_environment_failures(void **state);
void test_misbehaving_workers(void **state);
void test_cancel_hung_job(void **state);
void test_hung_job_beside_a_good_one(void **state);

#endif
