/*
 * Sundial fuzz target: every Fn API message the runner decodes from an SDK worker.
 *
 * Setup per input: a fresh job service and executor (fz_world) prepare and run one of the
 * captured pipelines in tests/fuzz/pipelines/ (its plan, the same for every input, is built
 * once and lent to the executor: plan_source below). Input byte 0 picks it: pipeline
 * (b % 2P) / 2 of the P captured, with a memory budget of one byte (everything the session
 * sends goes through the spill file) when (b / 2P) is odd, and
 * when b is odd with the option beam:option:direct_test_splits:v1 naming its first ParDo
 * (timings 0 s, so the executor asks the worker for channel splits "job-001/<bundle>-split1"
 * and "-split2" of that stage's first bundle as soon as it runs: how split responses are
 * reached without a clock). The executor plans it,
 * sets up the engine, registers one worker per environment with the real Fn API (started
 * through the exec seam: no process, no pool) and dispatches the first bundles, whose
 * ProcessBundle instructions and input wait in the worker's queues as they would for an SDK
 * that has not connected yet. Job and bundle ids are deterministic ("job-001/..."), so
 * captured messages address live instructions.
 *
 * Then the rest of the input is a session in fz_reader records; header byte h: h % 4 is the
 * stream (sd__fn_stream: Control = InstructionResponse, Data = Elements with data and timers,
 * State = StateRequest, Logging = LogEntry.List) and (h / 4) % workers the worker. Each
 * record goes through sd__fnapi_worker_deliver(), the same decode-and-dispatch the gRPC stream
 * handlers run, into the executor's hooks (bundle responses with residuals and metrics,
 * split and progress responses, outputs and timers into the engine, user state and side
 * inputs, logs into job messages). Between records the loop runs what is due, so completed
 * bundles commit and the next ones dispatch. At the end the executor is destroyed (the job is
 * cancelled) and the service with it.
 *
 * Seeds: whole worker sessions captured from the Python and C SDKs with SUNDIAL_CAPTURE_DIR
 * (tests/fuzz/capture.py), each prefixed with its pipeline's selector, and the same sessions
 * on the split variant preceded by split responses made up by capture.py.
 */
#include "tests/fuzz/fuzz_common.h"

typedef Org__Apache__Beam__Model__JobManagement__V1__PrepareJobRequest pb_prepare;

/* Packed PrepareJobRequests: [2i] pipeline i as captured, [2i + 1] with the split option. */
static sd_bytes variants[2 * FZ_MAX_PIPELINES];
static sd_buf split_variants[FZ_MAX_PIPELINES];

/*
 * The plan of each variant, built once (sd_plan_build with the options the executor passes,
 * as it would plan the job itself) and then lent to every run of that variant through the exec seam
 * sd__exec_set_plan_source. Planning a fixed pipeline again for every input cost about a
 * third of each execution and reached nothing new; the engine, the workers and everything
 * after the plan are still made fresh per input.
 */
static sd_plan *plans[2 * FZ_MAX_PIPELINES];
static size_t cur_variant;

static sd_plan *plan_source(void *ctx, const sd_job *job, const sd_plan_options *popt)
{
    (void)ctx;
    if (plans[cur_variant] == NULL) {
        sd_err err;
        sd_err_clear(&err);
        if (sd_plan_build(sd_job_pipeline(job), popt, &plans[cur_variant], &err) != SD_OK) {
            return NULL; /* the run plans it and fails as it would */
        }
    }
    return plans[cur_variant];
}

/* A fresh world whose executor takes its plans from plan_source, for variant v. */
static void begin(size_t v)
{
    cur_variant = v;
    fz_world_begin(NULL);
    sd__exec_set_plan_source(W.ex, plan_source, NULL);
}

/* The unique name of the pipeline's first ParDo, or NULL. Borrowed from req. */
static const char *first_pardo(const pb_prepare *req)
{
    const Org__Apache__Beam__Model__Pipeline__V1__Components *c =
        req->pipeline != NULL ? req->pipeline->components : NULL;
    for (size_t i = 0; c != NULL && i < c->n_transforms; i++) {
        const Org__Apache__Beam__Model__Pipeline__V1__PTransform *t = c->transforms[i]->value;
        if (t != NULL && t->spec != NULL && t->spec->urn != NULL &&
            strcmp(t->spec->urn, "beam:transform:pardo:v1") == 0 && t->unique_name != NULL &&
            t->unique_name[0] != '\0' && strchr(t->unique_name, '"') == NULL &&
            strchr(t->unique_name, '\\') == NULL) {
            return t->unique_name;
        }
    }
    return NULL;
}

/* Pipeline i with beam:option:direct_test_splits:v1 added (the captured bytes if it has no
 * ParDo). */
static sd_bytes with_splits(size_t i)
{
    const fz_pipeline *fp = &fz_pipelines[i];
    sd_bytes same = sd_bytes_make(fp->bytes, fp->len);
    pb_prepare *req = org__apache__beam__model__job_management__v1__prepare_job_request__unpack(
        NULL, fp->len, fp->bytes);
    const char *name = req != NULL ? first_pardo(req) : NULL;
    if (name == NULL || req->pipeline_options == NULL) {
        if (req != NULL) {
            org__apache__beam__model__job_management__v1__prepare_job_request__free_unpacked(req,
                                                                                             NULL);
        }
        return same;
    }
    char *json = sd_asprintf("{\"%s\": {\"timings\": [0, 0], \"fractions\": [0.5, 0.25]}}", name);
    Google__Protobuf__Struct *opts = req->pipeline_options;
    Google__Protobuf__Value value = GOOGLE__PROTOBUF__VALUE__INIT;
    Google__Protobuf__Struct__FieldsEntry entry = GOOGLE__PROTOBUF__STRUCT__FIELDS_ENTRY__INIT;
    Google__Protobuf__Struct__FieldsEntry **fields = sd_calloc(opts->n_fields + 1, sizeof(*fields));
    if (json == NULL || fields == NULL) {
        fz_die("out of memory building split variants");
    }
    value.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    value.string_value = json;
    entry.key = (char *)"beam:option:direct_test_splits:v1";
    entry.value = &value;
    if (opts->n_fields > 0) {
        memcpy(fields, opts->fields, opts->n_fields * sizeof(*fields));
    }
    fields[opts->n_fields] = &entry;
    Google__Protobuf__Struct__FieldsEntry **saved = opts->fields;
    opts->fields = fields;
    opts->n_fields++;
    if (sd_fnapi_pb_pack(&req->base, &split_variants[i]) != SD_OK) {
        fz_die("out of memory packing a split variant");
    }
    /* Put the unpacked message back as protobuf-c made it before freeing it. */
    opts->n_fields--;
    opts->fields = saved;
    sd_free(fields);
    sd_free(json);
    org__apache__beam__model__job_management__v1__prepare_job_request__free_unpacked(req, NULL);
    return sd_buf_bytes(&split_variants[i]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_world_init();
    fz_load_pipelines();
    for (size_t i = 0; i < fz_n_pipelines; i++) {
        sd_buf_init(&split_variants[i], 0);
        variants[2 * i] = sd_bytes_make(fz_pipelines[i].bytes, fz_pipelines[i].len);
        variants[2 * i + 1] = with_splits(i);
    }
    /* Plan every variant now, so no input pays for it (nor looks like a leak to libFuzzer). */
    for (size_t v = 0; v < 2 * fz_n_pipelines; v++) {
        begin(v);
        (void)fz_world_submit(variants[v]);
        fz_world_end();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader rd;
    uint8_t hdr;
    sd_bytes msg;
    if (size < 1) {
        return 0;
    }
    size_t v = data[0] % (2 * fz_n_pipelines);
    fz_memory_limit = (data[0] / (2 * fz_n_pipelines)) % 2 == 1 ? 1 : 0;
    begin(v);
    if (fz_world_submit(variants[v]) && W.n_workers > 0) {
        rd = fz_reader_make(data + 1, size - 1);
        while (fz_next(&rd, &hdr, &msg)) {
            /* The worker may be gone (the job failed): then nothing is delivered. */
            sd_fnapi_worker *w = sd__fnapi_worker_get(W.fn, W.workers[(hdr / 4) % W.n_workers]);
            sd__fnapi_worker_deliver(w, (sd__fn_stream)(hdr % 4), msg);
            fz_world_pump();
        }
    }
    fz_world_end();
    return 0;
}
