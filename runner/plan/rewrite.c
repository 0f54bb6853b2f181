/*
 * Sundial planner: graph rewrites after the finish pass (TestStream outputs, Flatten inputs).
 *
 * The runner moves a TestStream's elements and a Flatten's inputs as bytes it never parses, so
 * two kinds of PCollection need an SDK (or a copy) in between before fusion sees the graph:
 *
 *   - a TestStream stores its elements in one coder (teststream_stored_coder), while each
 *     output's consumers read that output's own coder: an output whose coder differs is
 *     rerouted through an SDK-side transcoding Flatten "<ts>/Transcode/<tag>" that reads a new
 *     raw PCollection (rewrite_teststreams, run first);
 *   - a Flatten concatenates its inputs' bytes, so an input in another coder than the output's
 *     goes through an SDK-side transcoding Flatten, and a repeated input through a runner-side
 *     copy, each into a PCollection of its own, so no other consumer of the input sees a
 *     changed coder and the engine never sees one input twice (rewrite_flattens).
 *
 * Each rewrite adds nodes with sd__plan_add_node and finishes them at once with
 * sd__plan_finish_node (graph.c), and rewires the rewritten node's message with
 * sd__plan_sync_msg_io. Without any SDK environment nothing can transcode and the graph is
 * left as it is. The loops run over the nodes that existed before the rewrite: new nodes are
 * one-input Flattens, which need no rewrite.
 */
#include <stdint.h>
#include <string.h>

#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

static bool streq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* ----------------------------------------------------------------------------------------- */
/* Flatten inputs: transcoding and repeated inputs                                            */
/* ----------------------------------------------------------------------------------------- */

/*
 * The environment of pcoll's first SDK consumer (main or side input, in node order, so a
 * transcoder placed there fuses with it when it can), else of any SDK node. NULL when the
 * pipeline runs no SDK code. Transcoding TestStream outputs starts here; Flatten inputs come
 * here after their producer and the Flatten itself.
 */
static const char *consumer_env(const pl_ctx *c, const char *pcoll)
{
    const char *any = NULL;
    for (size_t i = 0; i < c->nodes.len; i++) {
        const pl_node *n = sd__plan_node(c, i);
        if (n->kind != PL_SDK || n->env[0] == '\0') {
            continue;
        }
        for (size_t j = 0; j < n->n_inputs; j++) {
            if (streq(n->inputs[j].pcoll, pcoll)) {
                return n->env;
            }
        }
        any = any != NULL ? any : n->env;
    }
    return any;
}

/*
 * The environment that transcodes a Flatten input: the input's producer's (so the transcoder
 * fuses into that stage), else the Flatten's own, else that of an SDK consumer of the
 * Flatten's output, else that of any SDK node. NULL when the pipeline runs no SDK code.
 */
static const char *transcode_env(const pl_ctx *c, size_t fidx, const char *in_pc)
{
    const pl_node *prod = sd__plan_producer(c, in_pc);
    if (prod != NULL && prod->kind == PL_SDK && prod->env[0] != '\0') {
        return prod->env;
    }
    const pl_node *f = sd__plan_node(c, fidx);
    const char *own = f->msg->environment_id;
    if (own != NULL && own[0] != '\0' && sd_map_has(&c->envs, sd_bytes_str(own))) {
        return own;
    }
    return consumer_env(c, f->outputs[0].pcoll);
}

/*
 * A one-input Flatten reading input i of Flatten fidx into a new PCollection (coder `coder`,
 * the input's windowing and boundedness), which becomes that input instead. env NULL makes it
 * a runner-side Flatten (an element copy), otherwise an SDK-side one: the SDK decodes with the
 * input's coder and its data sink encodes with `coder`, which is how an element changes coder
 * without the runner parsing either. The new node is finished here (producer, references).
 */
static sd_status
reroute_flatten_input(pl_ctx *c, size_t fidx, size_t i, const char *env, const char *coder)
{
    const pl_node *f = sd__plan_node(c, fidx);
    const char *in_pc = f->inputs[i].pcoll;
    const pb_pcoll *in = sd__plan_pcoll_get(c, in_pc);
    bool sdk = env != NULL;
    char *tbase = sd_arena_printf(&c->scratch, "%s/%s/%s", f->id, sdk ? "Transcode" : "Copy",
                                  f->inputs[i].local);
    char *pbase = sd_arena_printf(&c->scratch, "%s/%s/%s", f->id, sdk ? "transcoded" : "copy",
                                  f->inputs[i].local);
    if (tbase == NULL || pbase == NULL) {
        return SD_ENOMEM;
    }
    const char *tid = sd__plan_unique_id(c, &c->transform_ids, NULL, tbase);
    if (tid == NULL) {
        return SD_ENOMEM;
    }
    const char *pc;
    PL_TRY(sd__plan_new_pcoll(c, pbase, coder, in, &pc));
    pl_io io_in = { "0", in_pc };
    pl_io io_out = { "0", pc };
    ProtobufCBinaryData none = { 0, NULL };
    pb_transform *t = sd__plan_synth_transform(c, tid, SD_URN_TRANSFORM_FLATTEN, none,
                                               sdk ? env : "", 1, &io_in, 1, &io_out);
    if (t == NULL) {
        return SD_ENOMEM;
    }
    size_t idx;
    PL_TRY(sd__plan_add_node(c, tid, sdk ? PL_SDK : PL_FLATTEN, env, t, &idx));
    PL_TRY(sd__plan_finish_node(c, idx));
    sd__plan_node(c, fidx)->inputs[i].pcoll = pc;
    return SD_OK;
}

/*
 * The runner concatenates a Flatten's input bytes, so every input must arrive in the output's
 * coder, and the engine reads each input PCollection once. Per input, in listing order:
 *   - its coder differs (structurally) from the output's: an SDK-side transcoding Flatten
 *     (Prism injects the same) re-encodes it into a PCollection of its own with the output's
 *     coder, so the input keeps its coder for every other consumer (a GroupByKey, a side
 *     input, another Flatten with another coder);
 *   - else it repeats an earlier input: a runner-side copy Flatten gives this listing its own
 *     PCollection, so each listing contributes every element once (Beam semantics).
 * When no SDK environment exists at all, differing inputs are left as they are and take the
 * output's wire coder at assembly (the only choice without an SDK to transcode).
 */
sd_status sd__plan_rewrite_flattens(pl_ctx *c)
{
    size_t n_nodes = c->nodes.len; /* new nodes are one-input Flattens: nothing to rewrite */
    for (size_t k = 0; k < n_nodes; k++) {
        pl_node *f = sd__plan_node(c, k);
        if (f->kind != PL_FLATTEN || f->n_outputs != 1) {
            continue;
        }
        const pb_pcoll *out = sd__plan_pcoll_get(c, f->outputs[0].pcoll);
        if (out == NULL) {
            continue; /* reported */
        }
        size_t n_in = f->n_inputs;
        const char **orig = sd_arena_alloc(&c->scratch, sizeof(*orig) * (n_in + 1));
        if (orig == NULL) {
            return SD_ENOMEM;
        }
        for (size_t i = 0; i < n_in; i++) {
            orig[i] = f->inputs[i].pcoll;
        }
        bool changed = false;
        for (size_t i = 0; i < n_in; i++) {
            const pb_pcoll *in = sd__plan_pcoll_get(c, orig[i]);
            if (in == NULL) {
                continue; /* reported */
            }
            bool repeat = false;
            for (size_t j = 0; j < i && !repeat; j++) {
                repeat = streq(orig[j], orig[i]);
            }
            const char *env = NULL;
            if (!sd__plan_coders_equal(c, in->coder_id, out->coder_id)) {
                env = transcode_env(c, k, orig[i]);
            }
            if (env != NULL) {
                PL_TRY(reroute_flatten_input(c, k, i, env, out->coder_id));
                changed = true;
            } else if (repeat) {
                PL_TRY(reroute_flatten_input(c, k, i, NULL, in->coder_id));
                changed = true;
            }
        }
        if (changed) {
            PL_TRY(sd__plan_sync_msg_io(c, sd__plan_node(c, k), false));
        }
    }
    return SD_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* TestStream outputs: transcoding                                                            */
/* ----------------------------------------------------------------------------------------- */

/*
 * The coder a TestStream's elements are stored in, or NULL when the runner cannot store them in
 * any form an SDK can read. Each element arrives as the outer encoding of the payload's coder C,
 * and the engine keeps nested encodings. When W(C) = C (the C SDK's coders) the runner
 * re-encodes each element (xplan.c); when C is opaque (pickled_python, TypeScript's
 * genericobjectjs), W(C) = length_prefix(C), and varint(len) + the outer bytes already is its
 * nested encoding. A known structural coder over opaque parts falls between: kv(pickled,
 * pickled) has W = kv(lp(pickled), lp(pickled)), and only the SDK knows where a pickled key
 * ends; such elements are stored length-prefixed whole, in a new length_prefix(C) "<C>_raw".
 * OUT: stored (id), needs_sdk (the stored form is not W(C): every output must be transcoded).
 */
static sd_status
teststream_stored_coder(pl_ctx *c, const char *coder, const char **stored, bool *needs_sdk)
{
    *stored = NULL;
    *needs_sdk = false;
    const char *urn = sd__plan_coder_urn(c, coder);
    if (urn == NULL) {
        return SD_OK; /* missing: reported */
    }
    PL_TRY(sd__plan_wire_coder(c, coder, stored));
    if (streq(*stored, coder) || !sd__plan_coder_known(urn)) {
        return SD_OK;
    }
    *needs_sdk = true;
    char *base = sd_arena_printf(&c->scratch, "%s_raw", coder);
    if (base == NULL) {
        return SD_ENOMEM;
    }
    return sd__plan_new_coder(c, base, SD_URN_CODER_LENGTH_PREFIX, 1, &coder, stored);
}

/*
 * Output i of TestStream tsidx now goes to a new PCollection "<ts>/raw/<tag>" (coder raw, the
 * output's windowing and boundedness), and an SDK-side beam:transform:flatten:v1
 * "<ts>/Transcode/<tag>" in env reads it and produces the original output PCollection: the SDK
 * decodes with raw and its data sink encodes with the output's wire coder. Every consumer keeps
 * reading the original PCollection. The new node is finished here (producer, references).
 */
static sd_status
reroute_teststream_output(pl_ctx *c, size_t tsidx, size_t i, const char *env, const char *raw)
{
    const pl_node *ts = sd__plan_node(c, tsidx);
    const char *out_pc = ts->outputs[i].pcoll;
    const pb_pcoll *out = sd__plan_pcoll_get(c, out_pc);
    char *tbase = sd_arena_printf(&c->scratch, "%s/Transcode/%s", ts->id, ts->outputs[i].local);
    char *pbase = sd_arena_printf(&c->scratch, "%s/raw/%s", ts->id, ts->outputs[i].local);
    if (tbase == NULL || pbase == NULL) {
        return SD_ENOMEM;
    }
    const char *tid = sd__plan_unique_id(c, &c->transform_ids, NULL, tbase);
    if (tid == NULL) {
        return SD_ENOMEM;
    }
    const char *pc;
    PL_TRY(sd__plan_new_pcoll(c, pbase, raw, out, &pc));
    pl_io io_in = { "0", pc };
    pl_io io_out = { "0", out_pc };
    ProtobufCBinaryData none = { 0, NULL };
    pb_transform *t = sd__plan_synth_transform(c, tid, SD_URN_TRANSFORM_FLATTEN, none, env, 1,
                                               &io_in, 1, &io_out);
    if (t == NULL) {
        return SD_ENOMEM;
    }
    size_t idx;
    PL_TRY(sd__plan_add_node(c, tid, PL_SDK, env, t, &idx));
    /* The transcoder takes over the output; the TestStream produces the raw PCollection. */
    PL_TRY(sd_map_put_str(&c->producer, out_pc, (void *)(uintptr_t)(idx + 1)));
    PL_TRY(sd_map_put_str(&c->producer, pc, (void *)(uintptr_t)(tsidx + 1)));
    sd__plan_node(c, tsidx)->outputs[i].pcoll = pc;
    return sd__plan_finish_node(c, idx);
}

/*
 * The runner stores a TestStream's elements in one coder (teststream_stored_coder), but each
 * output's consumers read that output's own coder, which need not be the payload's: Python
 * encodes the elements with FastPrimitivesCoder (pickled_python) and gives the output the
 * element type's coder, e.g. kv(DeterministicFastPrimitivesCoder, FastPrimitivesCoder), whose
 * key bytes differ. So an output is rerouted (reroute_teststream_output) through an SDK that
 * decodes the stored form and encodes the output's coder when its coder differs (structurally)
 * from the payload's or the stored form is not W(payload coder); otherwise, as for the C SDK's
 * and TypeScript's TestStreams, its consumers read the runner's bytes directly. Without any SDK
 * environment nothing can transcode, and the TestStream is left as it is. Prism has no such
 * step and fails these pipelines ("zero length key").
 */
sd_status sd__plan_rewrite_teststreams(pl_ctx *c)
{
    size_t n_nodes = c->nodes.len; /* new nodes are SDK Flattens */
    for (size_t k = 0; k < n_nodes; k++) {
        pl_node *n = sd__plan_node(c, k);
        if (n->kind != PL_TESTSTREAM || n->teststream == NULL) {
            continue;
        }
        const char *coder = n->teststream->coder_id;
        const char *stored;
        bool needs_sdk;
        PL_TRY(teststream_stored_coder(c, coder, &stored, &needs_sdk));
        /* No PCollection is named "": this asks for any SDK node's environment. */
        if (stored == NULL || consumer_env(c, "") == NULL) {
            continue; /* reported, or no SDK to transcode */
        }
        bool changed = false;
        size_t n_out = n->n_outputs;
        for (size_t i = 0; i < n_out; i++) {
            const char *pc = sd__plan_node(c, k)->outputs[i].pcoll;
            const pb_pcoll *out = sd__plan_pcoll_get(c, pc);
            if (out == NULL) {
                continue; /* reported */
            }
            if (!needs_sdk && sd__plan_coders_equal(c, coder, out->coder_id)) {
                continue;
            }
            const char *env = consumer_env(c, pc);
            PL_TRY(reroute_teststream_output(c, k, i, env, stored));
            changed = true;
        }
        if (changed) {
            n = sd__plan_node(c, k);
            n->teststream_raw_coder = stored;
            PL_TRY(sd__plan_sync_msg_io(c, n, true));
        }
    }
    return SD_OK;
}
