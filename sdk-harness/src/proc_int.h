/*
 * Sundial C SDK: internals of the bundle processor, shared by its five files and nothing else.
 *
 * The processor executes one ProcessBundleDescriptor (see proc.c for the whole picture). Its
 * code is split by concern, all over the types below:
 *
 *     proc_graph.c   descriptor -> operator graph: PCollection nodes, one operator per
 *                    transform, DoFn setup, topological order (sd__proc_create)
 *     proc_pardo.c   descriptor -> ParDo operator: payload, DoFn, state and timer specs,
 *                    main and side inputs, outputs, splittable DoFn components
 *     proc_ops.c     the operators: what each kind does with one windowed value, and the
 *                    fan-out from a PCollection to its consumers (sd__proc_emit)
 *     proc_ctx.c     the DoFn context API user code calls (<sundial/sundial.h> sd_ctx_*,
 *                    sd_emit*, state, timers, side inputs)
 *     proc.c         bundle execution: start, data and timer streams, finish, destroy
 *
 * Nothing here is visible outside sdk-harness/src/proc*.c; the worker and the unit tests use
 * the sd__proc_* interface of sdk_int.h.
 */
#ifndef SD_SDK_HARNESS_SRC_PROC_INT_H
#define SD_SDK_HARNESS_SRC_PROC_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/base/map.h"
#include "runner/base/vec.h"
#include "sdk-harness/src/sdf_int.h"
#include "sdk-harness/src/sdk_int.h"

#define PLF(x) org__apache__beam__model__pipeline__v1__##x

typedef SD_FN(ProcessBundleDescriptor) pb_PBD;
typedef SD_PL(PTransform) pb_PTransform;

/* ================================================================ types */

/* A PCollection's window fn, parsed from its windowing strategy (durations in ms). */
typedef struct winfn {
    sd_window_kind kind;
    int64_t size;   /* fixed, sliding */
    int64_t period; /* sliding */
    int64_t offset; /* fixed, sliding */
    int64_t gap;    /* sessions */
} winfn;

typedef struct op op;

/* A PCollection node: its coders and window fn, and the operators that consume it. */
typedef struct pcn {
    char *id;
    sd_coder *coder;
    sd_coder *window_coder;
    winfn wf;
    sd_vec consumers; /* op * */
} pcn;

/* One windowed value in flight: a borrowed view, never copied between operators. */
typedef struct wv {
    sd_time ts;
    const sd_window *windows;
    size_t n_windows;
    sd_pane pane;
    sd_bytes elem;
} wv;

/* Operator kinds, one per transform URN the processor runs (see proc.c). */
typedef enum op_kind {
    OP_SOURCE,
    OP_SINK,
    OP_PARDO,
    OP_WINDOW_INTO,
    OP_FLATTEN,
    OP_PRECOMBINE,
    OP_MERGE,
    OP_EXTRACT,
    OP_CONVERT,
    OP_COMBINE_GROUPED
} op_kind;

/* A ParDo's side input: its local name, node and access pattern. */
typedef struct side {
    char *local;
    pcn *pc;
    bool multimap;
} side;

/* The context a DoFn's callbacks get (<sundial/sundial.h>); one per ParDo operator. */
struct sd_ctx {
    op *op;
    const wv *in; /* NULL outside process and on_timer */
    sd_window win;
    sd_buf scratch;
    sd_bytes key;      /* stateful: the current key */
    sd_time fire;      /* on_timer: the firing time */
    sd_vec reads;      /* sd_buf * holding state reads until the callback returns */
    sd__sdf_call *sdf; /* splittable DoFns: the running SDF callback's tracker etc. */
};

/* A timer family of a stateful ParDo: outgoing timers and the incoming stream's state. */
typedef struct tfam {
    char *family;
    sd_coder *coder;
    sd_buf out;
    sd_buf in_pending; /* the incomplete tail of an incoming timer chunk */
    bool done;
} tfam;

/* A precombine table entry: one window and key's accumulator. */
typedef struct acc_entry {
    sd_window w;
    sd_time min_ts;
    sd_buf key;
    sd_buf acc;
} acc_entry;

/* An operator: the common part, then each kind's fields (only its kind's are set). */
struct op {
    op_kind kind;
    char *tid;
    sd__proc *bp;
    pcn *in;
    pcn **outs;
    size_t n_outs;
    bool visited;
    /* source / sink */
    sd_coder *port_coder;
    bool lp_wrap;
    bool param_wv;
    bool global_wc; /* the port's window coder is the global window coder */
    sd_buf pending;
    bool done;
    sd_wv_header hdr;
    /* pardo */
    const sd_dofn *fn;
    void *state;
    bool setup_done;
    uint8_t *payload;
    sd__dofn_payload pl;
    sd_ctx ctx;
    side *sides;
    size_t n_sides;
    bool stateful;
    char **state_ids;
    sd_coder **state_coders;
    sd__state_info *state_infos; /* kind, coders and CombineFn of each state */
    sd_coder **state_key_coders; /* map state keys */
    uint8_t **state_cfgs;        /* combining state: CombineFn payload copies */
    size_t n_states;
    size_t n_state_slots; /* allocated entries of the arrays above (>= n_states) */
    tfam *fams;
    size_t n_fams;
    sd_timer timer;  /* scratch for encoding and decoding */
    sd_map counters; /* name -> int64_t * */
    /* splittable DoFns (sdf_role: 0 none, else an SDF_* role) */
    int sdf_role;
    sd_wm_spec wm_spec;
    bool sdf_feeds;    /* source: its output is an SDF process op's input */
    size_t n_emitted;  /* source: elements emitted in this bundle */
    size_t stop_at;    /* source: emit no element with index >= this (split; SIZE_MAX) */
    op *sdf_src;       /* process: the data source of its input (the residual encoding) */
    char *main_local;  /* process: the main input's local name */
    char **out_locals; /* process: output local names */
    size_t n_out_locals;
    /* window_into */
    winfn wf;
    /* combines */
    const sd_combinefn *cfn;
    uint8_t *cpayload;
    sd_bytes ccfg;
    sd_coder *acc_coder;
    sd_map accs; /* window+key -> acc_entry * */
    sd_buf b1, b2, b3;
};

/* The processor of one descriptor; reused bundle after bundle until one fails. */
struct sd__proc {
    char *id;
    sd_vec pcs;   /* pcn * */
    sd_vec ops;   /* op *, topological order after create */
    sd_vec srcs;  /* op * */
    sd_vec sinks; /* op * */
    const sd__bundle_io *io;
    char *instruction;
    sd_err err;
    sd_map side_cache; /* key -> sd_buf * */
    bool broken;
    bool split_lost;          /* a split's answer could not be sent (the worker's mu guards it) */
    sd_vec residuals;         /* sd__residual_root of the running bundle */
    pthread_mutex_t split_mu; /* guards sdf_active and its tracker against split requests */
    sd__sdf_call *sdf_active; /* the SDF call now in process, or NULL */
    op *sdf_active_op;
    size_t sdf_active_index; /* its element's index in the bundle's input */
    sd_time now;             /* processing time for the whole bundle (wall ms at its start) */
};

/* op.sdf_role: the splittable DoFn component a ParDo operator runs (0: none). */
enum { SDF_PAIR = 1, SDF_SPLIT = 2, SDF_PROCESS = 3, SDF_TRUNCATE = 4 };

/* ================================================================ small helpers */

/* a mod m in [0, m) for m > 0, also for negative a (window start arithmetic). */
static inline int64_t pos_mod(int64_t a, int64_t m)
{
    int64_t r = a % m;
    return r < 0 ? r + m : r;
}

/* Map and vector free callbacks: an sd_buf * value, an int64_t * counter, an acc_entry *. */
static inline void buf_free_value(void *v)
{
    sd_buf *b = v;
    sd_buf_deinit(b);
    sd_free(b);
}

static inline void counter_free(void *v)
{
    sd_free(v);
}

static inline void acc_free(void *v)
{
    acc_entry *e = v;
    sd_buf_deinit(&e->key);
    sd_buf_deinit(&e->acc);
    sd_free(e);
}

/* ================================================================ shared inside the processor */

/* proc.c: record the bundle's first error (later ones keep it), mark the processor broken and
 * copy that first error to err. Returns its code. */
sd_status sd__proc_fail(sd__proc *bp, sd_err *err, sd_status code, const char *fmt, ...)
    SD_PRINTF(4, 5);

/* proc_ops.c: hand v to every consumer of pc, in order; the first failure stops it. */
sd_status sd__proc_emit(pcn *pc, const wv *v, sd_err *err);
/* proc_ops.c: send a sink's pending bytes (is_last ends its stream). */
sd_status sd__proc_sink_flush(op *o, bool is_last, sd_err *err);
/* proc_ops.c: emit a precombine operator's table in key order and empty it. */
sd_status sd__proc_precombine_flush(op *o, sd_err *err);

/* proc_ctx.c: free the state reads a callback made (they live until it returns). */
void sd__proc_drop_reads(sd_ctx *c);
/* proc_ctx.c: the timer family of a stateful ParDo, or NULL. */
tfam *sd__proc_find_family(op *o, const char *family);

/* proc_graph.c: teardown an operator's DoFn (if set up) and free it. NULL is a no-op. */
void sd__proc_op_destroy(op *o);
/* proc_graph.c, for proc_pardo.c: the value of key in a descriptor string map (NULL if
 * absent); build coder id of d (caller owns); the node of PCollection id (created on first
 * sight); make o a consumer of PCollection pcoll_id (its input); o's n outputs ids[i]. */
const char *sd__proc_string_map(size_t n, void **entries, const char *key);
sd_status sd__proc_build_coder(const pb_PBD *d, const char *id, sd_coder **out, sd_err *err);
sd_status sd__proc_add_pcn(sd__proc *bp, const pb_PBD *d, const char *id, pcn **out, sd_err *err);
sd_status
sd__proc_connect_input(sd__proc *bp, const pb_PBD *d, op *o, const char *pcoll_id, sd_err *err);
sd_status
sd__proc_set_outputs(sd__proc *bp, const pb_PBD *d, op *o, size_t n, const char **ids, sd_err *err);

/* proc_pardo.c: build ParDo operator o (kind OP_PARDO, sdf_role set) from transform t. */
sd_status
sd__proc_build_pardo(sd__proc *bp, const pb_PBD *d, const pb_PTransform *t, op *o, sd_err *err);

#endif
