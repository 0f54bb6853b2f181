/*
 * Sundial fuzz target: Pipeline bytes -> planner -> engine.
 *
 * The input is a serialized Pipeline (as a job client puts into PrepareJobRequest). It is
 * unpacked, validated (sd_plan_validate: every check Prepare runs), planned (sd_plan_build:
 * graph, coders, windowing, fusion, ProcessBundleDescriptors), indexed for the executor
 * (sd_exec_plan_init) and registered with a fresh engine (sd_exec_plan_to_engine, which also
 * decodes TestStream payloads); the engine is then driven for up to FZ_MAX_BUNDLES bundles,
 * each SDK bundle completing with no output, and everything is torn down. Seeds: pipelines
 * captured from the Python and C SDKs (tests/fuzz/corpus/fuzz_pipeline/).
 */
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    sd_log_set_level(SD_LOG_OFF);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Org__Apache__Beam__Model__Pipeline__V1__Pipeline *p =
        org__apache__beam__model__pipeline__v1__pipeline__unpack(NULL, size, data);
    if (p == NULL) {
        return 0;
    }
    fz_plan_engine(p);
    org__apache__beam__model__pipeline__v1__pipeline__free_unpacked(p, NULL);
    return 0;
}
