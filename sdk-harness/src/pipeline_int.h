/*
 * Sundial C SDK: the pipeline builder's model, shared by the builder (pipeline.c, with its
 * composites in pipeline_composites.c) and its translation into a Beam Pipeline proto
 * (pipeline_proto.c).
 *
 * The model is what the builder records and nothing more: transforms in creation order (a
 * composite before its parts, which name it as parent), PCollections with their coder and
 * windowing strategy index, the coders the pipeline owns and the windowing strategies (index
 * 0 is the global one). Ids are final when recorded; coder and windowing ids are assigned
 * only at translation. Nothing here is visible outside pipeline*.c.
 */
#ifndef SD_SDK_HARNESS_SRC_PIPELINE_INT_H
#define SD_SDK_HARNESS_SRC_PIPELINE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/base/map.h"
#include "runner/base/vec.h"
#include "sdk-harness/src/sdk_int.h"
#include "sundial/sundial.h"

/* sd_pipeline.magic: checked at the public entry points. */
#define PX_MAGIC 0x53445049u

typedef enum px_kind {
    PX_COMPOSITE = 0,
    PX_IMPULSE,
    PX_PARDO,
    PX_GBK,
    PX_FLATTEN,
    PX_WINDOW_INTO,
    PX_COMBINE_PER_KEY, /* composite with a CombinePayload */
    PX_RESHUFFLE,       /* composite with the reshuffle URN */
    PX_TESTSTREAM       /* root; payload from an sd_teststream (teststream.c) */
} px_kind;

typedef struct px_kv {
    char *local;
    char *pcoll;
} px_kv;

typedef struct px_side {
    char *local;
    sd_side_access access;
    size_t windowing; /* of the side PCollection */
} px_side;

typedef struct px_state {
    char *id;
    sd_state_kind kind;
    const sd_coder *coder;
    const sd_coder *key_coder; /* map state */
    sd_buf combine;            /* combining state: the CombineFn payload */
} px_state;

typedef struct px_timer {
    char *family;
    sd_time_domain domain;
} px_timer;

typedef struct px_transform {
    px_kind kind;
    char *id;
    sd_buf fn_payload;         /* DoFn or CombineFn payload */
    const sd_coder *acc_coder; /* combines */
    size_t windowing;          /* WINDOW_INTO: the new strategy */
    sd_vec inputs;             /* px_kv */
    sd_vec outputs;            /* px_kv */
    sd_vec subs;               /* char * ids */
    sd_vec sides;              /* px_side */
    sd_vec states;             /* px_state */
    sd_vec timers;             /* px_timer */
    const sd_coder *key_coder; /* stateful ParDos: the input's key coder */
    size_t in_windowing;       /* stateful ParDos: the input's windowing */
    bool splittable;           /* a splittable DoFn: restriction coder set */
    bool sdf_unbounded;        /* its DoFn is unbounded per element: outputs are unbounded */
    bool expiry;               /* OnWindowExpiration: timers include SD_EXPIRY_FAMILY */
    long parent;
    const sd_coder *elem_coder;      /* TESTSTREAM: the element coder */
    const sd_teststream *teststream; /* TESTSTREAM: the events (owned by the pipeline) */
    sd__created *created;            /* a Create's elements by reference (owned by the pipeline) */
} px_transform;

struct sd_pcoll {
    sd_pipeline *p;
    char *id;
    const sd_coder *coder;
    size_t windowing;
    bool unbounded; /* a TestStream output, or downstream of one */
};

/* An object whose lifetime is the pipeline's (sd__pipeline_own). */
typedef struct px_owned {
    void *obj;
    void (*free_fn)(void *);
} px_owned;

struct sd_pipeline {
    uint32_t magic;
    char *name;
    sd_err err;
    sd_vec coders;     /* sd_coder * (owned references) */
    sd_vec pcolls;     /* sd_pcoll * (owned) */
    sd_vec windowings; /* sd_windowfn */
    sd_vec transforms; /* px_transform * (owned) */
    long parent;       /* index of the composite being built, or -1 */
    sd_map ids;        /* transform and PCollection ids in use */
    sd_vec owned;      /* px_owned: trigger nodes, TestStream builders, collections */
    long runs;         /* sd_pipeline_run calls that ended SD_OK */
};

/* ---------------------------------------------------------------- model helpers (pipeline.c) */

/* For pipeline_composites.c; errors are sticky (sd__pipeline_fail, sd__pipeline_failed of
 * sdk_int.h). NULL or false after a failure. */
void *sd__pipeline_oom(sd_pipeline *p);
/* Every input non-NULL and of pipeline p (what names the transform kind in the message). */
bool sd__pipeline_check_inputs(sd_pipeline *p, const char *what, sd_pcoll *const *in, size_t n);
/* A new transform named name inside the current composite scope (a unique id). */
px_transform *sd__pipeline_new_transform(sd_pipeline *p, const char *name, px_kind kind);
bool sd__pipeline_add_input(sd_pipeline *p, px_transform *t, const char *local, const sd_pcoll *in);
/* A new PCollection "<t's id>.<local>", output local of t. */
sd_pcoll *sd__pipeline_add_output(sd_pipeline *p,
                                  px_transform *t,
                                  const char *local,
                                  const sd_coder *coder,
                                  size_t windowing);
/* Open the composite scope of t: transforms created until sd__pipeline_leave become its
 * parts. Returns the scope to restore. leave records out (if any) as t's output "out". */
long sd__pipeline_enter(sd_pipeline *p, px_transform *t);
void sd__pipeline_leave(sd_pipeline *p, px_transform *t, long saved, sd_pcoll *out);

#endif
