/*
 * Sundial planner: GroupByKeys over custom merging WindowFns get a window-merging stage.
 *
 * A window fn with a URN the runner does not know (a user WindowFn: Java's serialized_java,
 * Python's pickled_python) assigns its windows in the SDK, and the runner groups by the windows
 * the elements carry. When it also merges (MergeStatus NEEDS_MERGE), only the SDK can say which
 * windows merge: Beam's beam:transform:merge_windows:v1, whose payload is the windowing
 * strategy's window fn FunctionSpec, takes KV<nonce, iterable<window>> and answers
 * KV<nonce, KV<iterable<unmerged window>, iterable<KV<merged window, iterable<consumed
 * window>>>>>. For each such GroupByKey G this pass adds (after the finish pass, before fusion)
 *
 *     G --"sundial_merge_requests"--> <G>/merge/requests --> <G>/MergeWindows (SDK)
 *                                                             --> <G>/merge/results
 *
 * in the windowing strategy's environment (else that of the SDK transform producing G's input):
 * the requests PCollection is a new output of G, both new PCollections are in the pipeline's
 * global windowing strategy with coders kv(bytes, iterable(W)) and kv(bytes, kv(iterable(W),
 * iterable(kv(W, iterable(W))))) over G's window coder W. Nothing consumes the results in the
 * graph (so there is no cycle for fusion or topology); the planner keeps them as an output of
 * the merge stage (consumed_outside in fuse.c), and the executor hands both to the engine
 * (sd_em_set_merge_windows), which feeds the results back to G (runner/engine/em_merge.c).
 * The merge stage's id is its own; the GroupByKey stage records both PCollections
 * (sd_plan_stage.merge_requests / merge_results).
 */
#include <stdint.h>
#include <string.h>

#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

static bool streq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

bool sd__plan_ws_sdk_merges(const pb_wstrat *ws)
{
    if (ws == NULL || ws->window_fn == NULL || ws->window_fn->urn == NULL ||
        ws->merge_status !=
            ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MERGE_STATUS__ENUM__NEEDS_MERGE) {
        return false;
    }
    const char *u = ws->window_fn->urn;
    return u[0] != '\0' && !streq(u, SD_URN_WINDOW_FN_GLOBAL) &&
           !streq(u, SD_URN_WINDOW_FN_FIXED) && !streq(u, SD_URN_WINDOW_FN_SLIDING) &&
           !streq(u, SD_URN_WINDOW_FN_SESSION);
}

/* The id of a global windowing strategy of the pipeline (the smallest, for determinism). */
static const char *global_ws(pl_ctx *c)
{
    const char *best = NULL;
    size_t it = 0;
    sd_bytes k;
    void *v;
    while (sd_map_next(&c->wstrats, &it, &k, &v)) {
        const pb_wstrat *ws = v;
        const char *wurn = sd__plan_coder_urn(c, ws->window_coder_id);
        if (ws->window_fn == NULL || ws->window_fn->urn == NULL ||
            !streq(ws->window_fn->urn, SD_URN_WINDOW_FN_GLOBAL) || wurn == NULL ||
            !streq(wurn, SD_URN_CODER_GLOBAL_WINDOW)) {
            continue;
        }
        const char *id = sd_arena_printf(&c->scratch, "%.*s", (int)k.len, (const char *)k.ptr);
        if (id != NULL && (best == NULL || strcmp(id, best) < 0)) {
            best = id;
        }
    }
    return best;
}

/* Where merge_windows runs: the strategy's environment, else the input producer's. */
static const char *merge_env(const pl_ctx *c, const pb_wstrat *ws, const char *input)
{
    if (ws->environment_id != NULL && ws->environment_id[0] != '\0' &&
        sd_map_has(&c->envs, sd_bytes_str(ws->environment_id))) {
        return ws->environment_id;
    }
    const pl_node *prod = sd__plan_producer(c, input);
    if (prod != NULL && prod->kind == PL_SDK && prod->env != NULL && prod->env[0] != '\0') {
        return prod->env;
    }
    return NULL;
}

typedef struct merge_coders {
    const char *req, *res;
} merge_coders;

static sd_status make_coders(pl_ctx *c, const char *gid, const char *w, merge_coders *out)
{
    const char *names[6];
    const char *suffix[6] = { "nonce", "windows", "requests", "merged", "merges", "results" };
    for (size_t i = 0; i < 6; i++) {
        names[i] = sd_arena_printf(&c->scratch, "%s/merge_%s", gid, suffix[i]);
        if (names[i] == NULL) {
            return SD_ENOMEM;
        }
    }
    const char *bytes, *witer, *pair, *pairs, *body;
    PL_TRY(sd__plan_new_coder(c, names[0], SD_URN_CODER_BYTES, 0, NULL, &bytes));
    PL_TRY(sd__plan_new_coder(c, names[1], SD_URN_CODER_ITERABLE, 1, &w, &witer));
    const char *req_parts[2] = { bytes, witer };
    PL_TRY(sd__plan_new_coder(c, names[2], SD_URN_CODER_KV, 2, req_parts, &out->req));
    const char *pair_parts[2] = { w, witer };
    PL_TRY(sd__plan_new_coder(c, names[3], SD_URN_CODER_KV, 2, pair_parts, &pair));
    PL_TRY(sd__plan_new_coder(c, names[4], SD_URN_CODER_ITERABLE, 1, &pair, &pairs));
    const char *body_parts[2] = { witer, pairs };
    char *body_name = sd_arena_printf(&c->scratch, "%s/merge_answer", gid);
    if (body_name == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd__plan_new_coder(c, body_name, SD_URN_CODER_KV, 2, body_parts, &body));
    const char *res_parts[2] = { bytes, body };
    return sd__plan_new_coder(c, names[5], SD_URN_CODER_KV, 2, res_parts, &out->res);
}

/* Give GBK node k the output local -> pcoll (outputs stay sorted by local name). */
static sd_status add_gbk_output(pl_ctx *c, size_t k, const char *local, const char *pcoll)
{
    pl_node *n = sd__plan_node(c, k);
    pl_io *outs = sd_arena_alloc(&c->scratch, sizeof(pl_io) * (n->n_outputs + 1));
    if (outs == NULL) {
        return SD_ENOMEM;
    }
    size_t w = 0;
    bool placed = false;
    for (size_t i = 0; i < n->n_outputs; i++) {
        if (!placed && strcmp(local, n->outputs[i].local) < 0) {
            outs[w++] = (pl_io){ local, pcoll };
            placed = true;
        }
        outs[w++] = n->outputs[i];
    }
    if (!placed) {
        outs[w++] = (pl_io){ local, pcoll };
    }
    n->outputs = outs;
    n->n_outputs = w;
    PL_TRY(sd_map_put_str(&c->producer, pcoll, (void *)(uintptr_t)(k + 1)));
    return sd__plan_sync_msg_io(c, n, true);
}

static sd_status add_merge(pl_ctx *c, size_t k, const pb_pcoll *in, const pb_wstrat *ws)
{
    const pl_node *g = sd__plan_node(c, k);
    const char *gid = g->id;
    const char *tn = sd__plan_tname(c, gid);
    const char *env = merge_env(c, ws, g->main_input);
    const char *global = global_ws(c);
    if (tn == NULL) {
        return SD_ENOMEM;
    }
    if (env == NULL || global == NULL) {
        return sd__plan_problem(c, false,
                                "%s: its window fn \"%s\" merges windows, which only its SDK can "
                                "do (merge_windows), but the pipeline has %s",
                                tn, ws->window_fn->urn,
                                env == NULL ? "no environment to run it in"
                                            : "no global windowing strategy for its data");
    }
    merge_coders mc;
    PL_TRY(make_coders(c, gid, ws->window_coder_id, &mc));
    pb_pcoll like;
    org__apache__beam__model__pipeline__v1__pcollection__init(&like);
    like.is_bounded = in->is_bounded;
    like.windowing_strategy_id = (char *)global;
    char *rq = sd_arena_printf(&c->scratch, "%s/merge/requests", gid);
    char *rs = sd_arena_printf(&c->scratch, "%s/merge/results", gid);
    if (rq == NULL || rs == NULL) {
        return SD_ENOMEM;
    }
    const char *req_pc, *res_pc;
    PL_TRY(sd__plan_new_pcoll(c, rq, mc.req, &like, &req_pc));
    PL_TRY(sd__plan_new_pcoll(c, rs, mc.res, &like, &res_pc));
    const char *tid = sd__plan_new_transform_id(c, gid, "MergeWindows");
    size_t len =
        org__apache__beam__model__pipeline__v1__function_spec__get_packed_size(ws->window_fn);
    uint8_t *spec = sd_arena_alloc(&c->scratch, len + 1);
    if (tid == NULL || spec == NULL) {
        return SD_ENOMEM;
    }
    org__apache__beam__model__pipeline__v1__function_spec__pack(ws->window_fn, spec);
    pl_io io_in = { "0", req_pc };
    pl_io io_out = { "0", res_pc };
    ProtobufCBinaryData payload = { len, spec };
    pb_transform *t = sd__plan_synth_transform(c, tid, SD_URN_TRANSFORM_MERGE_WINDOWS, payload, env,
                                               1, &io_in, 1, &io_out);
    if (t == NULL) {
        return SD_ENOMEM;
    }
    size_t idx;
    PL_TRY(sd__plan_add_node(c, tid, PL_SDK, env, t, &idx));
    PL_TRY(add_gbk_output(c, k, SD_GBK_MERGE_OUTPUT_TAG, req_pc));
    PL_TRY(sd_map_put_str(&c->merge_pairs, req_pc, (void *)res_pc));
    PL_TRY(sd_map_put_str(&c->merge_results, res_pc, PL_PRESENT));
    return sd__plan_finish_node(c, idx);
}

sd_status sd__plan_rewrite_merging_gbks(pl_ctx *c)
{
    size_t n_nodes = c->nodes.len; /* new nodes are SDK merge transforms */
    for (size_t k = 0; k < n_nodes; k++) {
        const pl_node *n = sd__plan_node(c, k);
        if (n->kind != PL_GBK || n->main_input == NULL) {
            continue;
        }
        const pb_pcoll *in = sd__plan_pcoll_get(c, n->main_input);
        const pb_wstrat *ws =
            in == NULL ? NULL : sd_map_get_str(&c->wstrats, in->windowing_strategy_id);
        if (sd__plan_ws_sdk_merges(ws)) {
            PL_TRY(add_merge(c, k, in, ws));
        }
    }
    return SD_OK;
}
