/*
 * Sundial: executor: the data plane.
 *
 * Out: a dispatched bundle's input goes to its worker as Elements messages of whole
 * elements (at most SD_DATA_PIECE_BYTES of them each; a larger element travels alone), the
 * last piece together with the end of the input, then every timer family's timers and
 * is_last. In: the worker's Elements carry the bundle's output per sink transform and the
 * timers it set; each is handed to the engine as it arrives (sd_em_bundle_output/_timers,
 * tentative until the commit), and every is_last counts the bundle down towards completion.
 * Data for an unknown instruction is dropped with a warning (a bundle of a failed job);
 * data for a transform that is no output of the stage fails the job.
 */
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/base/time.h"
#include "runner/exec/exec_int.h"

/* The most bundle input one Data message carries (whole elements; a larger one goes alone). */
#define SD_DATA_PIECE_BYTES (1024 * 1024)

/*
 * The input a bundle sends: its elements before `cut`, in pieces of whole elements, with
 * element `subst` replaced by the bytes `root` (a replayed split's primary roots) as a piece
 * of its own; cut = SIZE_MAX and subst = SIZE_MAX send the input as the engine has it.
 */
typedef struct input_pieces {
    const sd_bundle *b;
    size_t next; /* the next element */
    size_t cut;
    size_t subst;
    sd_bytes root;
} input_pieces;

static bool next_piece(input_pieces *it, sd_bytes *piece)
{
    if (it->next == it->subst && it->subst < it->cut) {
        it->next++;
        *piece = it->root;
        return true;
    }
    size_t upto = it->subst > it->next ? SD_MIN(it->cut, it->subst) : it->cut;
    return sd_em_bundle_input_piece(it->b, &it->next, upto, SD_DATA_PIECE_BYTES, piece);
}

/* Free what input_last allocated; the message's bytes stay the engine's. */
void sd__exec_input_deinit(sd_exec_input *in)
{
    sd_free(in->timers);
    sd_free(in->tptrs);
    in->timers = NULL;
    in->tptrs = NULL;
}

/*
 * Fill in->msg with the last Elements message of f's input: `piece` (when have) and the end
 * of the input as two entries, then every timer input and every timer family's is_last.
 * The message points into in, the engine's bundle and f; nothing is copied.
 */
static sd_status input_last(sd_exec_inflight *f, bool have, sd_bytes piece, sd_exec_input *in)
{
    const sd_exec_stage *st = f->st;
    const sd_bundle *b = f->b;
    pb_Elements init = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
    pb_Elements_Data dinit = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
    in->msg = init;
    in->data = dinit;
    in->end = dinit;
    in->datas[0] = &in->data;
    in->datas[1] = &in->end;
    in->timers = NULL;
    in->tptrs = NULL;
    if (st->source_transform != NULL) {
        /* The last piece travels with the end of the input, as two entries of one message:
         * the Python SDK drops the data of an entry that also says is_last, and the
         * TypeScript SDK handles the entries of one message in order but overlapping
         * messages concurrently (an is_last of its own could overtake the data). */
        in->data.instruction_id = f->instruction_id;
        in->data.transform_id = (char *)st->source_transform;
        in->data.data.data = have ? (uint8_t *)piece.ptr : NULL;
        in->data.data.len = have ? piece.len : 0;
        in->end.instruction_id = f->instruction_id;
        in->end.transform_id = (char *)st->source_transform;
        in->end.is_last = 1;
        in->msg.n_data = have ? 2 : 1;
        in->msg.data = have ? in->datas : &in->datas[1];
    }
    size_t n_timer_in = sd_em_bundle_n_timer_inputs(b);
    size_t n_timers = n_timer_in + st->n_timer_families;
    if (n_timers == 0) {
        return SD_OK;
    }
    in->timers = sd_calloc(n_timers, sizeof(*in->timers));
    in->tptrs = sd_calloc(n_timers, sizeof(*in->tptrs));
    if (in->timers == NULL || in->tptrs == NULL) {
        sd__exec_input_deinit(in);
        return SD_ENOMEM;
    }
    pb_Elements_Timers tinit = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__TIMERS__INIT;
    size_t k = 0;
    for (size_t i = 0; i < n_timer_in; i++, k++) {
        const char *tid, *fam;
        sd_bytes tb;
        sd_em_bundle_timer_input(b, i, &tid, &fam, &tb);
        pb_Elements_Timers t = tinit;
        t.instruction_id = f->instruction_id;
        t.transform_id = (char *)tid;
        t.timer_family_id = (char *)fam;
        t.timers.data = (uint8_t *)tb.ptr;
        t.timers.len = tb.len;
        in->timers[k] = t;
        in->tptrs[k] = &in->timers[k];
    }
    for (size_t i = 0; i < st->n_timer_families; i++, k++) {
        pb_Elements_Timers t = tinit;
        t.instruction_id = f->instruction_id;
        t.transform_id = (char *)st->timer_families[i].transform_id;
        t.timer_family_id = (char *)st->timer_families[i].family_id;
        t.is_last = 1;
        in->timers[k] = t;
        in->tptrs[k] = &in->timers[k];
    }
    in->msg.n_timers = n_timers;
    in->msg.timers = in->tptrs;
    return SD_OK;
}

bool sd__exec_input_embed(sd_exec_run *r, sd_exec_inflight *f, sd_exec_input *in)
{
    const sd_bundle *b = f->b;
    if (!f->env->embed || f->cut != SIZE_MAX || f->subst != SIZE_MAX) {
        return false;
    }
    sd_bytes all = sd_em_bundle_input(b);
    uint64_t bytes = all.len;
    for (size_t i = 0; i < sd_em_bundle_n_timer_inputs(b); i++) {
        const char *tid, *fam;
        sd_bytes tb;
        sd_em_bundle_timer_input(b, i, &tid, &fam, &tb);
        bytes += tb.len;
    }
    if (bytes > SD_EMBED_INPUT_BYTES) {
        return false;
    }
    if (input_last(f, all.len > 0, all, in) != SD_OK) {
        return false; /* out of memory: the data stream may still do */
    }
    SD_DEBUG("exec", "job %s: bundle %s: %llu input bytes in the request", r->job_id,
             f->instruction_id, (unsigned long long)bytes);
    return true;
}

/*
 * Send a dispatched bundle's input to its worker: the data in pieces of whole elements of at
 * most SD_DATA_PIECE_BYTES each (one Elements message a piece; a larger element travels
 * alone), the last piece with the end of the input and the timers (input_last). SDKs decode
 * each Data message on its own, so a piece never splits an element; and gRPC clients that
 * keep the default 4 MiB receive limit (the TypeScript SDK) accept every message of a bundle
 * whose elements fit. Returns SD_OK, or fails the job and returns the error.
 */
sd_status sd__exec_send_bundle_input(sd_exec_run *r, sd_exec_inflight *f, sd_exec_env *e)
{
    const sd_exec_stage *st = f->st;
    sd_status rc = SD_OK;
    bool have = false;
    sd_bytes piece = SD_BYTES_NULL;
    if (st->source_transform != NULL) {
        input_pieces it = { f->b, 0, f->cut, f->subst, sd_buf_bytes(&f->subst_bytes) };
        pb_Elements msg = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__INIT;
        pb_Elements_Data data = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__ELEMENTS__DATA__INIT;
        pb_Elements_Data *datas[1] = { &data };
        sd_bytes ahead;
        have = next_piece(&it, &piece);
        data.instruction_id = f->instruction_id;
        data.transform_id = (char *)st->source_transform;
        msg.n_data = 1;
        msg.data = datas;
        /* Every piece but the last goes alone. */
        while (rc == SD_OK && have && next_piece(&it, &ahead)) {
            data.data.data = (uint8_t *)piece.ptr;
            data.data.len = piece.len;
            rc = sd_fnapi_worker_send_elements(e->worker, &msg);
            piece = ahead;
        }
        SD_DEBUG("exec", "job %s: bundle %s: %zu input bytes", r->job_id, f->instruction_id,
                 sd_em_bundle_input(f->b).len);
    }
    if (rc == SD_OK) {
        sd_exec_input in;
        if (input_last(f, have, piece, &in) != SD_OK) {
            sd__exec_run_fail(r, "out of memory dispatching a bundle");
            return SD_ENOMEM;
        }
        if (in.msg.n_data > 0 || in.msg.n_timers > 0) {
            rc = sd_fnapi_worker_send_elements(e->worker, &in.msg);
        }
        sd__exec_input_deinit(&in);
    }
    if (rc != SD_OK) {
        sd__exec_run_fail(r, "stage %s: could not send bundle data to worker %s", st->id,
                          e->worker_id);
    }
    return rc;
}

/* True while the job's run exists: completing a bundle may fail the run and free it. */
static bool run_alive(sd_exec *ex, const char *job_id)
{
    return sd_map_get_str(&ex->runs, job_id) != NULL;
}

void sd__exec_on_worker_elements(sd_fnapi_worker *w, const pb_Elements *msg, void *ctx)
{
    sd_exec_env *e = ctx;
    sd_exec_run *r = e->r;
    sd_exec *ex = r->ex;
    char job_id[160];
    sd_err err;
    (void)w;
    sd_err_clear(&err);
    snprintf(job_id, sizeof(job_id), "%s", r->job_id);
    for (size_t i = 0; i < msg->n_data && !r->finishing; i++) {
        const pb_Elements_Data *d = msg->data[i];
        sd_exec_inflight *f = sd_map_get_str(&r->inflight, d->instruction_id);
        if (f == NULL) {
            SD_WARN("exec", "job %s: data for unknown instruction %s dropped", r->job_id,
                    d->instruction_id);
            continue;
        }
        const char *pcoll = NULL;
        for (size_t k = 0; k < f->st->n_sinks; k++) {
            if (strcmp(f->st->sinks[k].transform_id, d->transform_id) == 0) {
                pcoll = f->st->sinks[k].pcollection;
            }
        }
        if (pcoll == NULL) {
            sd__exec_run_fail(
                r,
                "stage %s: worker %s sent data for transform %s, which is not an output "
                "of the stage",
                f->st->id, e->worker_id, d->transform_id);
            return;
        }
        SD_DEBUG("exec", "job %s: bundle %s: %zu bytes of %s%s", r->job_id, d->instruction_id,
                 d->data.len, pcoll, d->is_last ? " (last)" : "");
        f->active_ms = sd_mono_now_ms();
        sd_status st = d->data.len > 0
                           ? sd_em_bundle_output(r->em, f->b, pcoll,
                                                 sd_bytes_make(d->data.data, d->data.len), &err)
                           : SD_OK;
        if (st != SD_OK) {
            sd_err_failed(&err, st, "the engine's bundle output");
            sd__exec_run_fail(r, "stage %s: output %s: %s", f->st->id, pcoll, sd_err_msg(&err));
            return;
        }
        if (d->is_last) {
            f->lasts_remaining--;
            sd__exec_bundle_maybe_complete(f);
            if (!run_alive(ex, job_id)) {
                return; /* r and e are freed */
            }
        }
    }
    for (size_t i = 0; i < msg->n_timers && !r->finishing; i++) {
        const pb_Elements_Timers *t = msg->timers[i];
        sd_exec_inflight *f = sd_map_get_str(&r->inflight, t->instruction_id);
        if (f == NULL) {
            continue;
        }
        f->active_ms = sd_mono_now_ms();
        sd_status st = t->timers.len > 0
                           ? sd_em_bundle_timers(r->em, f->b, t->transform_id, t->timer_family_id,
                                                 sd_bytes_make(t->timers.data, t->timers.len), &err)
                           : SD_OK;
        if (st != SD_OK) {
            sd_err_failed(&err, st, "the engine's bundle timers");
            sd__exec_run_fail(r, "stage %s: timers %s/%s: %s", f->st->id, t->transform_id,
                              t->timer_family_id, sd_err_msg(&err));
            return;
        }
        if (t->is_last) {
            f->lasts_remaining--;
            sd__exec_bundle_maybe_complete(f);
            if (!run_alive(ex, job_id)) {
                return;
            }
        }
    }
}
