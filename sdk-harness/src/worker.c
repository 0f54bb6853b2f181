/*
 * Sundial C SDK: the Fn API worker — a client of a runner's Control, Data, State and Logging
 * services that runs bundles with the bundle processor.
 *
 * Threads. Streams live on the runtime's loop thread; bundles run on their own threads (one
 * detached thread per ProcessBundle instruction), because a DoFn may block on the State API
 * and the state response arrives on the loop thread (running DoFns there would deadlock).
 *
 *   loop thread                                   bundle thread (one per instruction)
 *   -----------                                   ------------------------------------
 *   Control: ProcessBundle -> spawn ------------> fetch descriptor (unary via loop, wait)
 *   Data in: chunk -> inbox[instruction] -------> pop chunks, feed the processor
 *   State in: response -> waiter[id] ----------> state_get: send via loop, wait
 *   send tasks (FIFO) <------------------------- outputs, is_last, then the response
 *
 * Everything shared between the two sides sits under one mutex (w->mu) with one condition
 * variable broadcast on every change: inboxes, state waiters, the descriptor cache, idle
 * processors, the live-bundle count. Bundle threads never touch a stream; they queue send
 * tasks with sd_rpc_run_on_loop, which runs them in submission order, so a bundle's data and
 * is_last markers always precede its ProcessBundleResponse.
 *
 * Data may arrive before the ProcessBundle request that it belongs to (different streams):
 * chunks for an unknown instruction open its inbox, and the bundle thread finds them there.
 *
 * Shutdown: when the runner closes the control stream, or StopWorker arrives, the worker
 * cancels its streams, fails every state waiter and inbox (bundle threads end with an error
 * that nobody reads), and frees itself on the loop thread once the last stream has closed and
 * the last bundle thread has left.
 *
 * Other instructions: progress answers with no metrics, split answers with an empty split
 * (the runner then keeps the bundle whole), finalize and monitoring-info requests answer
 * empty, and anything unknown gets an error response naming the request.
 *
 * Files: this one holds the control stream and the lifecycle; worker_io.c the data and state
 * streams and a bundle's I/O; worker_bundle.c descriptors and bundle threads. Their shared
 * types are in worker_int.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/transport/rpc.h"
#include "runner/urns/urns.h"
#include "sdk-harness/src/sdf_int.h"
#include "sdk-harness/src/worker_int.h"

/* ================================================================ small helpers */

void sd__worker_chunk_destroy(chunk *c)
{
    if (c != NULL) {
        sd_free(c->tid);
        sd_free(c->family);
        sd_free(c->data);
        sd_free(c);
    }
}

static void inbox_free(void *v)
{
    inbox *ib = v;
    chunk *c = ib->head;
    while (c != NULL) {
        chunk *n = c->next;
        sd__worker_chunk_destroy(c);
        c = n;
    }
    sd_free(ib);
}

void sd__worker_desc_free(void *v)
{
    FNF(process_bundle_descriptor__free_unpacked)(v, NULL);
}

static void idle_free(void *v)
{
    idle_list *l = v;
    for (size_t i = 0; i < l->procs.len; i++) {
        sd__proc_destroy(*SD_VEC_AT(&l->procs, sd__proc *, i));
    }
    sd_vec_deinit(&l->procs);
    sd_free(l);
}

sd_status sd__worker_pack(const ProtobufCMessage *m, sd_buf *out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    sd_buf_reset(out);
    sd_status st = sd_buf_reserve(out, n > 0 ? n : 1);
    if (st == SD_OK) {
        out->len = protobuf_c_message_pack(m, out->data);
    }
    return st;
}

/* ================================================================ control */

static void reply_simple(sd__worker *w, const char *instruction, int kind, const char *error)
{
    pb_InstructionResponse r = FNE(INSTRUCTION_RESPONSE__INIT);
    SD_FN(ProcessBundleProgressResponse) prog = FNE(PROCESS_BUNDLE_PROGRESS_RESPONSE__INIT);
    pb_ProcessBundleSplitResponse split = FNE(PROCESS_BUNDLE_SPLIT_RESPONSE__INIT);
    SD_FN(FinalizeBundleResponse) fin = FNE(FINALIZE_BUNDLE_RESPONSE__INIT);
    SD_FN(MonitoringInfosMetadataResponse) mon = FNE(MONITORING_INFOS_METADATA_RESPONSE__INIT);
    SD_FN(HarnessMonitoringInfosResponse) hm = FNE(HARNESS_MONITORING_INFOS_RESPONSE__INIT);
    SD_FN(RegisterResponse) reg = FNE(REGISTER_RESPONSE__INIT);
    sd_buf bytes;
    r.instruction_id = (char *)instruction;
    if (error != NULL) {
        r.error = (char *)error;
    } else {
        r.response_case = (SD_FN(InstructionResponse__ResponseCase))kind;
        switch (kind) {
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_PROGRESS):
            r.process_bundle_progress = &prog;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT):
            r.process_bundle_split = &split;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_FINALIZE_BUNDLE):
            r.finalize_bundle = &fin;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_MONITORING_INFOS):
            r.monitoring_infos = &mon;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_HARNESS_MONITORING_INFOS):
            r.harness_monitoring_infos = &hm;
            break;
        case FNE(INSTRUCTION_RESPONSE__RESPONSE_REGISTER):
            r.register_ = &reg;
            break;
        default:
            r.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE__NOT_SET);
            break;
        }
    }
    sd_buf_init(&bytes, 0);
    if (sd__worker_pack(&r.base, &bytes) == SD_OK && w->ctl != NULL) {
        SD_IGNORE(sd_rpc_stream_send(w->ctl, sd_buf_bytes(&bytes)));
    }
    sd_buf_deinit(&bytes);
}

/*
 * A split request for a bundle running a splittable DoFn: split the element in process (see
 * sd__proc_split) and answer with the channel split. True when a split was made and answered;
 * false: the caller answers with an empty split (the bundle stays whole). Loop thread.
 */
static bool
reply_split(sd__worker *w, const char *instruction, const pb_ProcessBundleSplitRequest *req)
{
    typedef SD_FN(ProcessBundleSplitResponse__ChannelSplit) pb_ChannelSplit;
    typedef SD_FN(BundleApplication) pb_BundleApplication;
    sd__split sp;
    char source[256];
    bool made = false;
    memset(&sp, 0, sizeof(sp));
    sd_vec_init(&sp.primaries, sizeof(sd__residual_root));
    sd_vec_init(&sp.residuals, sizeof(sd__residual_root));
    pthread_mutex_lock(&w->mu);
    sd__proc *p =
        req->instruction_id != NULL ? sd_map_get_str(&w->running, req->instruction_id) : NULL;
    for (size_t i = 0; p != NULL && i < req->n_desired_splits && !made; i++) {
        const pb_DesiredSplit *ds = req->desired_splits[i]->value;
        if (ds == NULL) {
            continue;
        }
        sd__split_deinit(&sp);
        if (sd__proc_split(p, req->desired_splits[i]->key, ds->fraction_of_remainder, &sp) ==
                SD_OK &&
            sp.split) {
            snprintf(source, sizeof(source), "%s", sp.source);
            made = true;
        }
    }
    if (!made) {
        pthread_mutex_unlock(&w->mu);
        sd__split_deinit(&sp);
        return false;
    }
    pb_InstructionResponse r = FNE(INSTRUCTION_RESPONSE__INIT);
    pb_ProcessBundleSplitResponse split = FNE(PROCESS_BUNDLE_SPLIT_RESPONSE__INIT);
    pb_ChannelSplit cs = FNE(PROCESS_BUNDLE_SPLIT_RESPONSE__CHANNEL_SPLIT__INIT);
    pb_ChannelSplit *css[1] = { &cs };
    size_t np = sp.primaries.len;
    pb_BundleApplication *prim = sd_calloc(np, sizeof(*prim));
    pb_BundleApplication **pptrs = sd_calloc(np, sizeof(*pptrs));
    void *res_mem = NULL;
    pb_DelayedBundleApplication **res = sd__worker_residual_roots(&sp.residuals, &res_mem);
    if (prim == NULL || pptrs == NULL || res == NULL) {
        /* The element is split already and its rest exists only here: the bundle fails
         * (worker_bundle.c reads this when it ends) rather than lose it. */
        sd__proc_set_split_lost(p, true);
    }
    pthread_mutex_unlock(&w->mu);
    sd_buf bytes;
    sd_buf_init(&bytes, 0);
    if (prim != NULL && pptrs != NULL && res != NULL) {
        for (size_t i = 0; i < np; i++) {
            const sd__residual_root *rr = sd_vec_at(&sp.primaries, i);
            pb_BundleApplication b0 = FNE(BUNDLE_APPLICATION__INIT);
            prim[i] = b0;
            prim[i].transform_id = rr->transform;
            prim[i].input_id = rr->input;
            prim[i].element.data = rr->element.data;
            prim[i].element.len = rr->element.len;
            pptrs[i] = &prim[i];
        }
        split.n_primary_roots = np;
        split.primary_roots = pptrs;
        split.n_residual_roots = sp.residuals.len;
        split.residual_roots = res;
        cs.transform_id = source;
        cs.last_primary_element = sp.last_primary;
        cs.first_residual_element = sp.first_residual;
        split.n_channel_splits = 1;
        split.channel_splits = css;
        r.instruction_id = (char *)instruction;
        r.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE_SPLIT);
        r.process_bundle_split = &split;
    } else {
        r.instruction_id = (char *)instruction;
        r.error = "out of memory answering a split request";
    }
    if (sd__worker_pack(&r.base, &bytes) == SD_OK && w->ctl != NULL) {
        SD_IGNORE(sd_rpc_stream_send(w->ctl, sd_buf_bytes(&bytes)));
    }
    sd_buf_deinit(&bytes);
    sd_free(prim);
    sd_free(pptrs);
    sd_free(res);
    sd_free(res_mem);
    SD_DEBUG("sdk",
             "worker %s: bundle %s split: element %lld becomes %zu primary and %zu "
             "residual roots, the rest returned",
             w->id, req->instruction_id, (long long)sp.last_primary + 1, np, sp.residuals.len);
    sd__split_deinit(&sp);
    return true;
}

/* A RegisterRequest (the runner pushes descriptors, SD_URN_PROTOCOL_SUNDIAL_REGISTER_DESCRIPTORS):
 * each descriptor joins the cache, taken out of req (which is freed without it). */
static void register_descriptors(sd__worker *w, const char *id, SD_FN(RegisterRequest) * reg)
{
    const char *error = NULL;
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; reg != NULL && i < reg->n_process_bundle_descriptor; i++) {
        pb_ProcessBundleDescriptor *d = reg->process_bundle_descriptor[i];
        if (d == NULL || d->id == NULL || d->id[0] == '\0') {
            error = "RegisterRequest: a descriptor without an id";
            continue;
        }
        if (sd_map_get_str(&w->descs, d->id) != NULL) {
            continue; /* already cached (fetched); req frees this copy */
        }
        if (sd_map_put_str(&w->descs, d->id, d) != SD_OK) {
            error = "RegisterRequest: out of memory";
            continue;
        }
        reg->process_bundle_descriptor[i] = NULL; /* the cache owns it now */
    }
    pthread_mutex_unlock(&w->mu);
    reply_simple(w, id, FNE(INSTRUCTION_RESPONSE__RESPONSE_REGISTER), error);
}

static void on_control_msg(sd_rpc_stream *s, sd_bytes msg, void *ctx)
{
    sd__worker *w = ctx;
    sd_err err;
    char buf[256];
    (void)s;
    sd_err_clear(&err);
    pb_InstructionRequest *req = FNF(instruction_request__unpack)(NULL, msg.len, msg.ptr);
    if (req == NULL) {
        SD_WARN("sdk", "worker %s: malformed InstructionRequest ignored", w->id);
        return;
    }
    const char *id = req->instruction_id != NULL ? req->instruction_id : "";
    switch (req->request_case) {
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE):
        /* Input embedded in the request (beam:protocol:control_request_elements_embedding:v1)
         * goes to the bundle's inbox as if it had come over the data stream. */
        if (req->process_bundle != NULL && req->process_bundle->elements != NULL) {
            sd__worker_inbox_add(w, req->process_bundle->elements, id);
        }
        if (req->process_bundle == NULL ||
            sd__worker_start_bundle(w, id, req->process_bundle, &err) != SD_OK) {
            reply_simple(w, id, 0, err.code != SD_OK ? sd_err_msg(&err) : "malformed request");
        }
        break;
    case FNE(INSTRUCTION_REQUEST__REQUEST_REGISTER):
        register_descriptors(w, id, req->register_);
        break;
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_SPLIT):
        if (req->process_bundle_split != NULL && reply_split(w, id, req->process_bundle_split)) {
            break;
        }
        reply_simple(w, id, (int)req->request_case, NULL);
        break;
    case FNE(INSTRUCTION_REQUEST__REQUEST_PROCESS_BUNDLE_PROGRESS):
    case FNE(INSTRUCTION_REQUEST__REQUEST_FINALIZE_BUNDLE):
    case FNE(INSTRUCTION_REQUEST__REQUEST_MONITORING_INFOS):
    case FNE(INSTRUCTION_REQUEST__REQUEST_HARNESS_MONITORING_INFOS):
        /* Request and response oneof numbers are the same. */
        reply_simple(w, id, (int)req->request_case, NULL);
        break;
    default:
        snprintf(buf, sizeof(buf), "the Sundial C SDK worker does not support instruction kind %d",
                 (int)req->request_case);
        reply_simple(w, id, 0, buf);
        break;
    }
    FNF(instruction_request__free_unpacked)(req, NULL);
}

static void on_control_close(sd_rpc_stream *s, sd_rpc_code code, const char *message, void *ctx)
{
    sd__worker *w = ctx;
    char why[512];
    (void)s;
    w->ctl = NULL;
    w->open_streams--;
    snprintf(why, sizeof(why), "control stream closed (%d%s%s)", (int)code, message[0] ? ": " : "",
             message);
    sd__worker_shutdown(w, why);
    sd__worker_maybe_finish(w);
}

/* ================================================================ lifecycle */

void sd__worker_shutdown(sd__worker *w, const char *why)
{
    if (w->stopping) {
        return;
    }
    w->stopping = true;
    snprintf(w->why, sizeof(w->why), "%s", why);
    pthread_mutex_lock(&w->mu);
    w->dead = true;
    /* Fail pending state requests; their owners see !done and give up. */
    size_t it = 0;
    sd_bytes k;
    void *v;
    while (sd_map_next(&w->waiters, &it, &k, &v)) {
        waiter *wt = v;
        wt->failed = true;
        snprintf(wt->error, sizeof(wt->error), "worker shut down: %s", why);
        wt->done = true;
    }
    sd_map_deinit(&w->waiters);
    sd_map_init(&w->waiters, NULL);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->ctl != NULL) {
        sd_rpc_stream_cancel(w->ctl);
    }
    if (w->log != NULL) {
        sd_rpc_stream_cancel(w->log);
    }
    for (size_t i = 0; i < w->chans.len; i++) {
        chan *c = *SD_VEC_AT(&w->chans, chan *, i);
        if (c->data != NULL) {
            sd_rpc_stream_cancel(c->data);
        }
        if (c->state != NULL) {
            sd_rpc_stream_cancel(c->state);
        }
    }
}

void sd__worker_maybe_finish(sd__worker *w)
{
    if (!w->stopping || w->finished || w->open_streams > 0) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    int live = w->live_bundles;
    int queued = w->finish_tasks;
    pthread_mutex_unlock(&w->mu);
    if (live > 0 || queued > 0) {
        return; /* a queued finish_task will call us again */
    }
    w->finished = true;
    for (size_t i = 0; i < w->chans.len; i++) {
        chan *c = *SD_VEC_AT(&w->chans, chan *, i);
        if (!c->borrowed) {
            sd__rt_channel_give(w->rt, c->url, c->ch);
        }
        sd_free(c->url);
        sd_free(c);
    }
    sd_vec_deinit(&w->chans);
    /* The connections stay for the runner's next worker (the runner keeps serving). */
    sd__rt_channel_give(w->rt, w->control_url, w->ctl_ch);
    sd__rt_channel_give(w->rt, w->logging_url, w->log_ch);
    sd_map_deinit(&w->inboxes);
    sd_map_deinit(&w->waiters);
    sd_map_deinit(&w->descs);
    sd_map_deinit(&w->idle);
    sd_map_deinit(&w->running);
    sd__scache_free(w->scache);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    if (w->on_done != NULL) {
        w->on_done(w->done_ctx, w->why);
    }
    sd_free(w->id);
    sd_free(w->control_url);
    sd_free(w->logging_url);
    sd_free(w);
}

void sd__worker_stop(sd__worker *w)
{
    if (w != NULL) {
        sd__worker_shutdown(w, "stopped");
        sd__worker_maybe_finish(w);
    }
}

sd_status sd__worker_start(sd__rt *rt,
                           const char *worker_id,
                           const char *control_url,
                           const char *logging_url,
                           void (*on_done)(void *ctx, const char *why),
                           void *ctx,
                           sd__worker **out,
                           sd_err *err)
{
    sd__worker *w = sd_calloc(1, sizeof(*w));
    if (w == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    w->rt = rt;
    w->rpc = sd__rt_rpc(rt);
    w->id = sd_strdup(worker_id);
    w->control_url = sd_strdup(control_url);
    w->logging_url = logging_url != NULL && logging_url[0] ? sd_strdup(logging_url) : NULL;
    w->on_done = on_done;
    w->done_ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    sd_vec_init(&w->chans, sizeof(chan *));
    sd_map_init(&w->inboxes, inbox_free);
    sd_map_init(&w->waiters, NULL);
    sd_map_init(&w->descs, sd__worker_desc_free);
    sd_map_init(&w->idle, idle_free);
    sd_map_init(&w->running, NULL);
    /* Without memory for it, the worker keeps user state per bundle only. */
    w->scache = sd__scache_new(sd__scache_default_budget());
    sd_rpc_metadata md = { "worker_id", w->id };
    sd_rpc_stream_handler ch = { on_control_msg, on_control_close, w };
    sd_status st = SD_OK;
    if (w->id == NULL || w->control_url == NULL) {
        st = sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (st == SD_OK) {
        st = sd__rt_channel_take(w->rt, control_url, &w->ctl_ch, err);
    }
    if (st == SD_OK) {
        st = sd_rpc_stream_open(w->ctl_ch, SD_PATH_CONTROL, &md, 1, &ch, &w->ctl, err);
    }
    if (st != SD_OK) {
        if (w->ctl_ch != NULL) {
            sd_rpc_channel_destroy(w->ctl_ch);
        }
        sd_map_deinit(&w->inboxes);
        sd_map_deinit(&w->descs);
        sd_map_deinit(&w->idle);
        sd_map_deinit(&w->running);
        sd_vec_deinit(&w->chans);
        sd_free(w->id);
        sd_free(w->control_url);
        sd_free(w->logging_url);
        sd_free(w);
        return st;
    }
    w->open_streams = 1;
    if (w->logging_url != NULL) {
        sd_rpc_stream_handler lh = { NULL, sd__worker_on_aux_close, w };
        sd_err lerr;
        sd_err_clear(&lerr);
        /* On the control channel when the runner serves both at one endpoint. */
        bool same = strcmp(w->logging_url, w->control_url) == 0;
        sd_rpc_channel *lch = same ? w->ctl_ch : NULL;
        if (!same && sd__rt_channel_take(w->rt, w->logging_url, &w->log_ch, &lerr) == SD_OK) {
            lch = w->log_ch;
        }
        if (lch != NULL &&
            sd_rpc_stream_open(lch, SD_PATH_LOGGING, &md, 1, &lh, &w->log, &lerr) == SD_OK) {
            w->open_streams++;
        }
    }
    *out = w;
    return SD_OK;
}
