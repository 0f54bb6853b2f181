/*
 * Sundial fuzz target: TestStreamPayload bytes, through everything that decodes them.
 *
 * A runner-side TestStream's payload is read twice: the planner unpacks it and checks its
 * coder (runner/plan/graph.c), and the executor's engine setup decodes every event
 * (teststream/ts_pb.c sd_ts_decode), re-encoding each element with the payload's coder
 * (runner/exec/xplan.c teststream_element), and hands the streams to the TestStream driver
 * (teststream/ts_drive.c), which the bounded drive then plays into the engine.
 * The templates are the captured pipelines in tests/fuzz/pipelines/ that contain a TestStream
 * (Python's TestStream tests and the C SDK's). Input: byte 0 picks a template, the rest
 * replaces that TestStream transform's payload; the pipeline then goes through
 * fz_plan_engine (plan, engine setup, a bounded drive, teardown).
 */
#include "tests/fuzz/fuzz_common.h"

typedef Org__Apache__Beam__Model__Pipeline__V1__Pipeline pb_pipeline;
typedef Org__Apache__Beam__Model__Pipeline__V1__FunctionSpec pb_spec;

typedef struct template
{
    Org__Apache__Beam__Model__JobManagement__V1__PrepareJobRequest *req;
    pb_spec *spec; /* the TestStream transform's spec inside req */
}

template;

static template templates[FZ_MAX_PIPELINES];
static size_t n_templates;

static pb_spec *teststream_spec(pb_pipeline *p)
{
    if (p == NULL || p->components == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < p->components->n_transforms; i++) {
        Org__Apache__Beam__Model__Pipeline__V1__PTransform *t = p->components->transforms[i]->value;
        if (t != NULL && t->spec != NULL && t->spec->urn != NULL &&
            strcmp(t->spec->urn, "beam:transform:teststream:v1") == 0) {
            return t->spec;
        }
    }
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    sd_log_set_level(SD_LOG_OFF);
    fz_load_pipelines();
    for (size_t i = 0; i < fz_n_pipelines; i++) {
        Org__Apache__Beam__Model__JobManagement__V1__PrepareJobRequest *req =
            org__apache__beam__model__job_management__v1__prepare_job_request__unpack(
                NULL, fz_pipelines[i].len, fz_pipelines[i].bytes);
        pb_spec *spec = req != NULL ? teststream_spec(req->pipeline) : NULL;
        if (spec == NULL) {
            if (req != NULL) {
                org__apache__beam__model__job_management__v1__prepare_job_request__free_unpacked(
                    req, NULL);
            }
            continue;
        }
        templates[n_templates].req = req;
        templates[n_templates].spec = spec;
        n_templates++;
    }
    if (n_templates == 0) {
        fz_die("no captured pipeline has a TestStream");
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    template *t = &templates[data[0] % n_templates];
    ProtobufCBinaryData saved = t->spec->payload;
    /* Borrowed for the call: the template is restored before anything frees it. */
    t->spec->payload.data = (uint8_t *)(size > 1 ? data + 1 : (const uint8_t *)"");
    t->spec->payload.len = size - 1;
    fz_plan_engine(t->req->pipeline);
    t->spec->payload = saved;
    return 0;
}
