/*
 * Sundial C SDK: coders, as opaque handles.
 *
 * A coder says how a PCollection's elements are encoded (one of Beam's standard coders:
 * bytes, string, varint, double, bool, KV, iterable, ...). Programs obtain coder handles from
 * the pipeline (sd_coder_string(p), sd_coder_kv(p, k, v), ...) and pass them back; they never
 * look inside one. The handles are owned by the pipeline (or, in a DoFn, by the SDK) and are
 * immutable, so any thread may use them.
 */
#ifndef SD_SUNDIAL_CODER_H
#define SD_SUNDIAL_CODER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_coder sd_coder;

#ifdef __cplusplus
}
#endif

#endif
