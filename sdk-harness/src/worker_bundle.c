/*
 * Sundial C SDK: the worker's descriptors and bundles.
 *
 * Descriptors. A ProcessBundle instruction names a ProcessBundleDescriptor; the first bundle
 * that needs one fetches it from the control service (a unary call made on the loop, waited
 * for on the bundle thread) and caches it under w->mu for the worker's life.
 *
 * Bundles. Each ProcessBundle instruction gets a detached thread (bundle_main) that opens the
 * descriptor's data and state streams, takes an idle processor for the descriptor or builds
 * one, feeds it the instruction's inbox chunk by chunk until every input has ended, finishes
 * it and answers with a ProcessBundleResponse (counters as monitoring infos, residual roots
 * of splittable DoFns). A processor whose bundle succeeded goes back to the idle list; one
 * whose bundle failed is destroyed. While a bundle runs its processor is registered in
 * w->running, so split requests from the control stream can reach it.
 *
 * The last bundle thread to leave a dead worker queues finish_task after its own sends, so
 * the loop frees the worker only after they have gone out.
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

/* ================================================================ descriptors */

typedef struct desc_fetch {
    sd__worker *w;
    char *id;
    bool done;
    char error[512];
} desc_fetch;

static void desc_fetched(void *ctx, sd_rpc_code code, const char *message, sd_bytes response)
{
    desc_fetch *f = ctx;
    sd__worker *w = f->w;
    pb_ProcessBundleDescriptor *d = NULL;
    if (code != SD_RPC_OK) {
        snprintf(f->error, sizeof(f->error), "GetProcessBundleDescriptor %s: %s", f->id, message);
    } else if ((d = FNF(process_bundle_descriptor__unpack)(NULL, response.len, response.ptr)) ==
               NULL) {
        snprintf(f->error, sizeof(f->error), "GetProcessBundleDescriptor %s: malformed response",
                 f->id);
    }
    pthread_mutex_lock(&w->mu);
    if (d != NULL) {
        if (sd_map_get_str(&w->descs, f->id) == NULL) {
            if (sd_map_put_str(&w->descs, f->id, d) != SD_OK) {
                sd__worker_desc_free(d);
                snprintf(f->error, sizeof(f->error), "out of memory");
            }
        } else {
            sd__worker_desc_free(d);
        }
    }
    f->done = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void desc_fetch_start(void *arg)
{
    desc_fetch *f = arg;
    sd__worker *w = f->w;
    sd_err err;
    sd_buf bytes;
    SD_FN(GetProcessBundleDescriptorRequest) req = FNE(GET_PROCESS_BUNDLE_DESCRIPTOR_REQUEST__INIT);
    sd_rpc_metadata md = { "worker_id", w->id };
    sd_err_clear(&err);
    sd_buf_init(&bytes, 0);
    req.process_bundle_descriptor_id = f->id;
    sd_status st = w->stopping ? SD_ECANCELED : sd__worker_pack(&req.base, &bytes);
    if (st == SD_OK) {
        st = sd_rpc_unary(w->ctl_ch, SD_PATH_GET_PBD, sd_buf_bytes(&bytes), &md, 1, 60000,
                          desc_fetched, f, &err);
    }
    sd_buf_deinit(&bytes);
    if (st != SD_OK) {
        pthread_mutex_lock(&w->mu);
        snprintf(f->error, sizeof(f->error), "GetProcessBundleDescriptor %s: %s", f->id,
                 err.code != SD_OK ? sd_err_msg(&err) : sd_status_str(st));
        f->done = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

/* The descriptor (borrowed; cached for the worker's life). Blocks on a fetch when needed. */
static const pb_ProcessBundleDescriptor *get_desc(sd__worker *w, const char *id, sd_err *err)
{
    pthread_mutex_lock(&w->mu);
    const pb_ProcessBundleDescriptor *d = sd_map_get_str(&w->descs, id);
    pthread_mutex_unlock(&w->mu);
    if (d != NULL) {
        return d;
    }
    desc_fetch f = { .w = w, .id = (char *)id };
    if (sd_rpc_run_on_loop(w->rpc, desc_fetch_start, &f) != SD_OK) {
        sd_err_set(err, SD_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&w->mu);
    while (!f.done) {
        /* The fetch always completes (the unary callback runs even on shutdown). */
        pthread_cond_wait(&w->cv, &w->mu);
    }
    d = sd_map_get_str(&w->descs, id);
    pthread_mutex_unlock(&w->mu);
    if (d == NULL) {
        sd_err_set(err, SD_EIO, "%s", f.error[0] ? f.error : "descriptor unavailable");
    }
    return d;
}

/* The data and state URLs a descriptor names (the first port's; "" = the control URL). */
static void desc_urls(const pb_ProcessBundleDescriptor *d, const char **data, const char **state)
{
    *data = "";
    *state = d->state_api_service_descriptor != NULL ? d->state_api_service_descriptor->url : "";
    for (size_t i = 0; i < d->n_transforms; i++) {
        const SD_PL(PTransform) *t = d->transforms[i]->value;
        if (t == NULL || t->spec == NULL || t->spec->urn == NULL) {
            continue;
        }
        if (strcmp(t->spec->urn, SD_URN_RUNNER_SOURCE) == 0 ||
            strcmp(t->spec->urn, SD_URN_RUNNER_SINK) == 0) {
            SD_FN(RemoteGrpcPort) *p =
                FNF(remote_grpc_port__unpack)(NULL, t->spec->payload.len, t->spec->payload.data);
            if (p != NULL) {
                static _Thread_local char url[256];
                if (p->api_service_descriptor != NULL && p->api_service_descriptor->url != NULL) {
                    snprintf(url, sizeof(url), "%s", p->api_service_descriptor->url);
                    *data = url;
                }
                FNF(remote_grpc_port__free_unpacked)(p, NULL);
                if ((*data)[0] != '\0') {
                    return;
                }
            }
        }
    }
}

/* ================================================================ bundles */

/*
 * DelayedBundleApplications for residual roots (sd__residual_root: splittable DoFn
 * checkpoints, a split's rests): the element, the requested delay, and the estimator's
 * watermark for every output. One allocation (*mem) holds every message; the pointers borrow
 * from the roots; free *mem and the array. NULL when out of memory.
 */
pb_DelayedBundleApplication **sd__worker_residual_roots(const sd_vec *roots, void **mem)
{
    typedef SD_FN(BundleApplication) pb_BundleApplication;
    typedef SD_FN(BundleApplication__OutputWatermarksEntry) pb_WmEntry;
    typedef Google__Protobuf__Duration pb_Duration;
    typedef Google__Protobuf__Timestamp pb_Timestamp;
    size_t n = roots->len, n_out = 0;
    for (size_t i = 0; i < n; i++) {
        n_out += ((const sd__residual_root *)sd_vec_at(roots, i))->n_outputs;
    }
    size_t per = sizeof(pb_DelayedBundleApplication *) + sizeof(pb_DelayedBundleApplication) +
                 sizeof(pb_BundleApplication) + sizeof(pb_Duration) + sizeof(pb_Timestamp);
    uint8_t *m = sd_calloc(1, n * per + n_out * (sizeof(pb_WmEntry) + sizeof(pb_WmEntry *)) + 64);
    if (m == NULL) {
        return NULL;
    }
    *mem = m;
    pb_DelayedBundleApplication **ptrs = sd_calloc(n, sizeof(*ptrs));
    if (ptrs == NULL) {
        return NULL;
    }
    pb_DelayedBundleApplication *dba = (void *)m;
    pb_BundleApplication *ba = (void *)(dba + n);
    pb_Duration *du = (void *)(ba + n);
    pb_Timestamp *ts = (void *)(du + n);
    pb_WmEntry *we = (void *)(ts + n);
    pb_WmEntry **wp = (void *)(we + n_out);
    for (size_t i = 0; i < n; i++) {
        const sd__residual_root *rr = sd_vec_at(roots, i);
        pb_DelayedBundleApplication d0 = FNE(DELAYED_BUNDLE_APPLICATION__INIT);
        pb_BundleApplication b0 = FNE(BUNDLE_APPLICATION__INIT);
        pb_Duration du0 = GOOGLE__PROTOBUF__DURATION__INIT;
        pb_Timestamp ts0 = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
        dba[i] = d0;
        ba[i] = b0;
        du[i] = du0;
        ts[i] = ts0;
        ba[i].transform_id = rr->transform;
        ba[i].input_id = rr->input;
        ba[i].element.data = rr->element.data;
        ba[i].element.len = rr->element.len;
        if (rr->has_watermark) {
            /* Floor division keeps nanos in [0, 1e9) for times before the epoch. */
            int64_t sec = rr->watermark / 1000, rem = rr->watermark % 1000;
            if (rem < 0) {
                sec--;
                rem += 1000;
            }
            ts[i].seconds = sec;
            ts[i].nanos = (int32_t)(rem * 1000000);
            ba[i].n_output_watermarks = rr->n_outputs;
            ba[i].output_watermarks = wp;
            for (size_t k = 0; k < rr->n_outputs; k++) {
                pb_WmEntry e0 = FNE(BUNDLE_APPLICATION__OUTPUT_WATERMARKS_ENTRY__INIT);
                *we = e0;
                we->key = rr->outputs[k];
                we->value = &ts[i];
                *wp++ = we++;
            }
        }
        if (rr->delay_ms > 0) {
            du[i].seconds = rr->delay_ms / 1000;
            du[i].nanos = (int32_t)((rr->delay_ms % 1000) * 1000000);
            dba[i].requested_time_delay = &du[i];
        }
        dba[i].application = &ba[i];
        ptrs[i] = &dba[i];
    }
    return ptrs;
}

/* v as a varint into p (room for 10 bytes). The number of bytes written. */
static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t len = 0;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        p[len++] = (uint8_t)(byte | (v ? 0x80 : 0));
    } while (v && len < 10);
    return len;
}

static void
respond(sd__worker *w, const char *instruction, const char *error, const sd__bundle_result *res)
{
    pb_InstructionResponse r = FNE(INSTRUCTION_RESPONSE__INIT);
    pb_ProcessBundleResponse pr = FNE(PROCESS_BUNDLE_RESPONSE__INIT);
    pb_MonitoringInfo **mis = NULL;
    pb_MonitoringInfo *mi = NULL;
    pb_MonitoringInfo **with_base = NULL;
    pb_MonitoringInfo base_mi = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__INIT;
    uint8_t base_payload[20];
    SD_PL(MonitoringInfo__LabelsEntry) *labels = NULL;
    SD_PL(MonitoringInfo__LabelsEntry) **lptr = NULL;
    uint8_t *payloads = NULL;
    pb_DelayedBundleApplication **roots = NULL;
    void *roots_mem = NULL;
    sd_buf bytes;
    r.instruction_id = (char *)instruction;
    if (error != NULL) {
        r.error = (char *)error;
    } else {
        size_t n = res != NULL ? res->counters.len : 0;
        if (n > 0) {
            mis = sd_calloc(n, sizeof(*mis));
            mi = sd_calloc(n, sizeof(*mi));
            labels = sd_calloc(3 * n, sizeof(*labels));
            lptr = sd_calloc(3 * n, sizeof(*lptr));
            payloads = sd_calloc(n, 20);
            if (mis == NULL || mi == NULL || labels == NULL || lptr == NULL || payloads == NULL) {
                n = 0;
            }
        }
        for (size_t i = 0; i < n; i++) {
            const sd__counter *c = sd_vec_at(&res->counters, i);
            pb_MonitoringInfo init = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__INIT;
            SD_PL(MonitoringInfo__LabelsEntry)
            linit = ORG__APACHE__BEAM__MODEL__PIPELINE__V1__MONITORING_INFO__LABELS_ENTRY__INIT;
            mi[i] = init;
            mi[i].urn = c->partition_wm ? SD_URN_METRIC_PARTITION_WM : SD_URN_METRIC_USER_SUM_INT64;
            mi[i].type =
                c->partition_wm ? SD_URN_METRIC_TYPE_LATEST_INT64 : SD_URN_METRIC_TYPE_SUM_INT64;
            /* varint payload; latest_int64 is varint(wall ms) then varint(value) */
            uint8_t *p = payloads + 20 * i;
            size_t len = 0;
            if (c->partition_wm) {
                len = put_varint(p, (uint64_t)sd_wall_now_ms());
            }
            len += put_varint(p + len, (uint64_t)c->value);
            mi[i].payload.data = p;
            mi[i].payload.len = len;
            for (int k = 0; k < 3; k++) {
                labels[3 * i + k] = linit;
                lptr[3 * i + k] = &labels[3 * i + k];
            }
            labels[3 * i].key = SD_LABEL_PTRANSFORM;
            labels[3 * i].value = c->transform;
            labels[3 * i + 1].key = SD_LABEL_NAMESPACE;
            labels[3 * i + 1].value = "sundial";
            labels[3 * i + 2].key = SD_LABEL_NAME;
            labels[3 * i + 2].value = c->name;
            mi[i].n_labels = 3;
            if (c->partition_wm) {
                labels[3 * i + 1].key = SD_LABEL_SUNDIAL_PARTITION;
                labels[3 * i + 1].value = c->name;
                mi[i].n_labels = 2;
            }
            mi[i].labels = &lptr[3 * i];
            mis[i] = &mi[i];
        }
        pr.n_monitoring_infos = n;
        pr.monitoring_infos = mis;
        /* The processing time the bundle's DoFns saw (the runner rebases its timers on it). */
        if (res != NULL && res->has_pt_base && (with_base = sd_calloc(n + 1, sizeof(*mis)))) {
            base_mi.urn = SD_URN_METRIC_SUNDIAL_PROCESSING_TIME_BASE;
            base_mi.type = SD_URN_METRIC_TYPE_LATEST_INT64;
            size_t len = put_varint(base_payload, (uint64_t)sd_wall_now_ms());
            len += put_varint(base_payload + len, (uint64_t)res->pt_base);
            base_mi.payload.data = base_payload;
            base_mi.payload.len = len;
            for (size_t i = 0; i < n; i++) {
                with_base[i] = mis[i];
            }
            with_base[n] = &base_mi;
            pr.n_monitoring_infos = n + 1;
            pr.monitoring_infos = with_base;
        }
        if (res != NULL && res->residuals.len > 0) {
            roots = sd__worker_residual_roots(&res->residuals, &roots_mem);
            if (roots != NULL) {
                pr.n_residual_roots = res->residuals.len;
                pr.residual_roots = roots;
            } else {
                /* Never drop a residual silently: fail the bundle instead. */
                r.error = "out of memory while reporting residual roots";
            }
        }
        r.response_case = FNE(INSTRUCTION_RESPONSE__RESPONSE_PROCESS_BUNDLE);
        r.process_bundle = &pr;
    }
    sd_buf_init(&bytes, 0);
    if (sd__worker_pack(&r.base, &bytes) == SD_OK) {
        (void)sd__worker_queue_send(w, SEND_CONTROL, NULL, &bytes);
    }
    sd_buf_deinit(&bytes);
    sd_free(mis);
    sd_free(with_base);
    sd_free(mi);
    sd_free(labels);
    sd_free(lptr);
    sd_free(payloads);
    sd_free(roots);
    sd_free(roots_mem);
}

static sd__proc *take_proc(sd__worker *w, const char *desc_id)
{
    sd__proc *p = NULL;
    pthread_mutex_lock(&w->mu);
    idle_list *l = sd_map_get_str(&w->idle, desc_id);
    if (l != NULL && l->procs.len > 0) {
        p = *SD_VEC_AT(&l->procs, sd__proc *, l->procs.len - 1);
        l->procs.len--;
    }
    pthread_mutex_unlock(&w->mu);
    return p;
}

static void give_proc(sd__worker *w, const char *desc_id, sd__proc *p)
{
    pthread_mutex_lock(&w->mu);
    idle_list *l = sd_map_get_str(&w->idle, desc_id);
    if (l == NULL && !w->dead) {
        l = sd_calloc(1, sizeof(*l));
        if (l != NULL) {
            sd_vec_init(&l->procs, sizeof(sd__proc *));
            if (sd_map_put_str(&w->idle, desc_id, l) != SD_OK) {
                sd_free(l);
                l = NULL;
            }
        }
    }
    if (l != NULL && !w->dead && sd_vec_push(&l->procs, &p) == SD_OK) {
        p = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    sd__proc_destroy(p);
}

/* Pop the next chunk of the bundle's inbox, waiting for it. NULL when the worker died, or
 * with *lost set when some of the bundle's input could not be kept (out of memory). */
static chunk *next_chunk(sd__worker *w, const char *instruction, bool *lost)
{
    chunk *c = NULL;
    *lost = false;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        inbox *ib = sd_map_get_str(&w->inboxes, instruction);
        if ((ib != NULL && ib->lost) || w->inbox_lost) {
            *lost = true;
            break;
        }
        if (ib != NULL && ib->head != NULL) {
            c = ib->head;
            ib->head = c->next;
            if (ib->head == NULL) {
                ib->tail = NULL;
            }
            break;
        }
        if (w->dead) {
            break;
        }
        pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return c;
}

typedef struct ensure_data_t {
    sd__worker *w;
    const char *data_url;
    sd_status st;
    sd_err err;
} ensure_data_t;

static void ensure_data(void *arg)
{
    ensure_data_t *e = arg;
    if (e->w->stopping) {
        e->st = sd_err_set(&e->err, SD_ECANCELED, "the worker is stopping");
        return;
    }
    if (sd__worker_get_stream(e->w, e->data_url, SEND_DATA, &e->err) == NULL) {
        e->st = e->err.code != SD_OK ? e->err.code : SD_EUNAVAIL;
    }
}

static sd_status run_bundle(bundle *b, sd__bundle_result *res, sd_err *err)
{
    sd__worker *w = b->w;
    sd_status st;
    const pb_ProcessBundleDescriptor *d = get_desc(w, b->desc_id, err);
    if (d == NULL) {
        return err != NULL ? err->code : SD_EIO;
    }
    const char *du, *su;
    desc_urls(d, &du, &su);
    b->data_url = sd_strdup(du);
    b->state_url = sd_strdup(su);
    if (b->data_url == NULL || b->state_url == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    /* Open the data stream now: the runner holds the bundle's input until it exists. Input
     * that came embedded in the request needs no stream: the first output opens it
     * (send_task_run), in order before what it sends. The state stream, on the endpoint the
     * descriptor names for state (a server of its own on Java runners), is opened by the
     * first state request. */
    ensure_data_t ed = { .w = w, .data_url = b->data_url, .st = SD_OK };
    sd_err_clear(&ed.err);
    if (!b->embedded && (sd__rt_call(w->rt, ensure_data, &ed) != SD_OK || ed.st != SD_OK)) {
        return sd_err_set(err, SD_EUNAVAIL, "worker %s: cannot open a data stream to %s: %s", w->id,
                          b->data_url[0] ? b->data_url : w->control_url,
                          ed.err.code != SD_OK ? sd_err_msg(&ed.err) : "the loop is gone");
    }
    sd__proc *p = take_proc(w, b->desc_id);
    if (p == NULL && (st = sd__proc_create(d, &p, err)) != SD_OK) {
        return st;
    }
    sd__bundle_io io = sd__worker_bundle_io(b);
    /* Visible to split requests (loop thread) while it runs. */
    pthread_mutex_lock(&w->mu);
    bool registered = sd_map_put_str(&w->running, b->instruction, p) == SD_OK;
    pthread_mutex_unlock(&w->mu);
    st = sd__proc_start(p, b->instruction, &io, err);
    while (st == SD_OK && !sd__proc_inputs_done(p)) {
        bool lost;
        chunk *c = next_chunk(w, b->instruction, &lost);
        if (lost) {
            st = sd_err_set(err, SD_ENOMEM,
                            "worker %s: out of memory keeping the input of bundle %s (the bundle "
                            "fails rather than run on part of its input)",
                            w->id, b->instruction);
            break;
        }
        if (c == NULL) {
            st = sd_err_set(err, SD_ECANCELED, "worker %s shut down during bundle %s", w->id,
                            b->instruction);
            break;
        }
        if (c->timer) {
            st = sd__proc_timers(p, c->tid, c->family, sd_bytes_make(c->data, c->len), c->is_last,
                                 err);
        } else {
            st = sd__proc_data(p, c->tid, sd_bytes_make(c->data, c->len), c->is_last, err);
        }
        sd__worker_chunk_destroy(c);
    }
    if (st == SD_OK) {
        st = sd__proc_finish(p, res, err);
    }
    if (registered) {
        pthread_mutex_lock(&w->mu);
        sd_map_remove(&w->running, sd_bytes_str(b->instruction));
        if (sd__proc_set_split_lost(p, false) && st == SD_OK) {
            st = sd_err_set(err, SD_ENOMEM,
                            "bundle %s: out of memory answering a split request (the split "
                            "element's rest could not be handed back)",
                            b->instruction);
        }
        pthread_mutex_unlock(&w->mu);
    }
    if (st == SD_OK) {
        give_proc(w, b->desc_id, p);
    } else {
        sd__proc_destroy(p);
    }
    return st;
}

static void finish_task(void *arg)
{
    sd__worker *w = arg;
    pthread_mutex_lock(&w->mu);
    w->finish_tasks--;
    pthread_mutex_unlock(&w->mu);
    sd__worker_maybe_finish(w);
}

static void *bundle_main(void *arg)
{
    bundle *b = arg;
    sd__worker *w = b->w;
    sd__bundle_result res;
    sd_err err;
    sd_err_clear(&err);
    sd__bundle_result_init(&res);
    sd_status st = run_bundle(b, &res, &err);
    /* Its state writes are answered before it is: a write the runner refused fails it. */
    sd_err serr;
    sd_err_clear(&serr);
    sd_status settled = sd__worker_state_settle(b, &serr);
    if (st == SD_OK && settled != SD_OK) {
        st = settled;
        err = serr;
    }
    if (st != SD_OK && b->shared) {
        /* Its writes are in the cache but will not be committed. */
        sd__scache_fail(w->scache, b->desc_id, sd_buf_bytes(&b->token));
    }
    sd__worker_state_deinit(b);
    if (st != SD_OK) {
        SD_INFO("sdk", "worker %s: bundle %s failed: %s", w->id, b->instruction, sd_err_msg(&err));
    }
    respond(w, b->instruction, st == SD_OK ? NULL : sd_err_msg(&err), &res);
    sd__bundle_result_deinit(&res);
    pthread_mutex_lock(&w->mu);
    sd_map_remove(&w->inboxes, sd_bytes_str(b->instruction));
    w->live_bundles--;
    bool last = w->live_bundles == 0 && w->dead;
    if (last) {
        /* Counted before it is queued, so the loop cannot free the worker under it. */
        w->finish_tasks++;
    }
    pthread_mutex_unlock(&w->mu);
    sd_free(b->instruction);
    sd_free(b->desc_id);
    sd_free(b->data_url);
    sd_free(b->state_url);
    sd_free(b);
    if (last) {
        /* Queued after this bundle's sends, so it runs after them. */
        if (sd_rpc_run_on_loop(w->rpc, finish_task, w) != SD_OK) {
            pthread_mutex_lock(&w->mu);
            w->finish_tasks--;
            pthread_mutex_unlock(&w->mu);
        }
    }
    return NULL;
}

sd_status sd__worker_start_bundle(sd__worker *w,
                                  const char *instruction,
                                  const pb_ProcessBundleRequest *req,
                                  sd_err *err)
{
    pthread_t t;
    pthread_attr_t attr;
    const char *desc_id =
        req->process_bundle_descriptor_id != NULL ? req->process_bundle_descriptor_id : "";
    bundle *b = sd_calloc(1, sizeof(*b));
    if (b == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    b->w = w;
    b->embedded = req->elements != NULL;
    sd__worker_state_init(b);
    b->instruction = sd_strdup(instruction);
    b->desc_id = sd_strdup(desc_id);
    sd_status tst = SD_OK;
    for (size_t i = 0; i < req->n_cache_tokens && tst == SD_OK; i++) {
        const SD_FN(ProcessBundleRequest__CacheToken) *ct = req->cache_tokens[i];
        if (ct != NULL &&
            ct->type_case == FNE(PROCESS_BUNDLE_REQUEST__CACHE_TOKEN__TYPE_USER_STATE)) {
            sd_buf_reset(&b->token);
            tst = sd_buf_append(&b->token, ct->token.data, ct->token.len);
        }
    }
    if (b->instruction == NULL || b->desc_id == NULL || tst != SD_OK) {
        sd__worker_state_deinit(b);
        sd_free(b->instruction);
        sd_free(b->desc_id);
        sd_free(b);
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    b->shared = sd__scache_begin(w->scache, b->desc_id, sd_buf_bytes(&b->token));
    pthread_mutex_lock(&w->mu);
    if (sd_map_get_str(&w->inboxes, instruction) == NULL) {
        inbox *ib = sd_calloc(1, sizeof(*ib));
        if (ib == NULL || sd_map_put_str(&w->inboxes, instruction, ib) != SD_OK) {
            sd_free(ib);
        }
    }
    w->live_bundles++;
    pthread_mutex_unlock(&w->mu);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, bundle_main, b);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&w->mu);
        w->live_bundles--;
        sd_map_remove(&w->inboxes, sd_bytes_str(instruction));
        pthread_mutex_unlock(&w->mu);
        sd__worker_state_deinit(b);
        sd_free(b->instruction);
        sd_free(b->desc_id);
        sd_free(b);
        return sd_err_set(err, SD_EIO, "cannot start a bundle thread");
    }
    return SD_OK;
}
