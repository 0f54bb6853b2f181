/*
 * Sundial C SDK: coders, as opaque handles.
 *
 * A coder says how a PCollection's elements are encoded (one of Beam's standard coders:
 * bytes, string, varint, double, bool, KV, iterable, ...). Programs obtain coder handles from
 * the pipeline (sd_pcoder_string(p), sd_pcoder_kv(p, k, v), ...) and pass them back; they
 * never look inside one. The handles are owned by the pipeline (or, in a DoFn, by the SDK) and
 * are immutable, so any thread may use them.
 *
 * Naming. The handle is sd_pcoder, "a pipeline's coder", and its constructors are
 * sd_pcoder_<kind>(p, ...): it sits beside sd_pcoll (a pipeline's PCollection), which a user
 * meets in the same calls, and both are handles the pipeline owns. The prefix keeps the SDK's
 * public names out of the runner's coder module (runner/coder/coder.h: sd_coder_build,
 * sd_coder_destroy, ...), whose functions take and return coder trees the caller owns. The
 * handle is in fact the runner's coder tree, used directly (no wrapper, no copy), which is why
 * the struct tag below is sd_coder; a program never sees the tag, only the typedef.
 */
#ifndef SD_SUNDIAL_CODER_H
#define SD_SUNDIAL_CODER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_coder sd_pcoder;

#ifdef __cplusplus
}
#endif

#endif
