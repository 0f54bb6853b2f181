/*
 * Sundial: how many input elements a stage's next SDK bundle may take, beyond the engine's
 * caps (max_bundle_elements, max_bundle_bytes, the bundle shape, which em_bundle.c applies):
 * the output cap a stage may have (the TypeScript SDK's) and the even share of a spread
 * stage (a splittable DoFn's restrictions, what a Reshuffle redistributes).
 */
#include "runner/engine/em.h"
#include "runner/engine/em_int.h"

/*
 * A bundle is cut at the first of: max_bundle_elements input elements, max_bundle_bytes of
 * encoded input (a larger single element still goes alone), and — for a stage with an output
 * cap (sd_stage_spec.max_output_bytes; the planner sets one for the
 * TypeScript SDK, whose data sink duplicates output once a bundle's output passes 1 MB) — as
 * many elements as are expected to make at most that much output. The expectation is learned
 * per stage from completed bundles: output bytes per input element, rising at once to the
 * latest bundle's figure and decaying by half per bundle otherwise, so a fan-out stage (one
 * seed making 100 KB) gets small bundles and a 1:1 stage keeps large ones. Until a bundle has
 * completed, a capped stage takes one element at a time. Returns 0 for "no cap".
 */
static size_t output_capped_elements(const sd__stage *st)
{
    if (st->max_out_bytes == 0) {
        return 0;
    }
    if (!st->out_learned) {
        return 1;
    }
    size_t per = st->out_per_elem > 0 ? st->out_per_elem : 1;
    size_t n = st->max_out_bytes / per;
    return n > 0 ? n : 1;
}

sd_status sd_em_set_output_cap(sd_em *em, const char *stage, size_t max_bytes)
{
    sd__stage *st = em != NULL && stage != NULL ? sd__em_find_stage(em, stage) : NULL;
    if (st == NULL) {
        return SD_ENOTFOUND;
    }
    st->max_out_bytes = st->kind == SD_STAGE_SDK ? max_bytes : 0;
    return SD_OK;
}

void sd_em_disable_spread(sd_em *em)
{
    for (size_t i = 0; em != NULL && i < em->stages.len; i++) {
        sd__em_stage_at(em, i)->spread = false;
    }
}

/*
 * A spread stage's share of elements per bundle (sd_stage_spec.spread): fixed when a bundle
 * is made while none of the stage's bundles is in flight, so one wave of bundles cuts the
 * ready input evenly, at most SD_EM_SPREAD_BUNDLES ways. Returns 0 for "no cap".
 */
static size_t spread_elements(sd__stage *st)
{
    if (!st->spread) {
        return 0;
    }
    if (st->n_inflight == 0 || st->spread_share == 0) {
        size_t n = sd__pending_n(st);
        st->spread_share = n / SD_EM_SPREAD_BUNDLES + (n % SD_EM_SPREAD_BUNDLES != 0);
        if (st->spread_min_bytes > 0 && st->pending.len > 0) {
            size_t bytes = 0;
            for (size_t i = 0; i < st->pending.len; i++) {
                bytes += SD_VEC_AT(&st->pending, sd__elem, i)->len;
            }
            size_t avg = SD_MAX(bytes / st->pending.len, (size_t)1);
            size_t least = st->spread_min_bytes / avg + (st->spread_min_bytes % avg != 0);
            st->spread_share = SD_MAX(st->spread_share, least);
        }
    }
    return st->spread_share > 0 ? st->spread_share : 1;
}

/* After a bundle with input completed: update the stage's output bytes per input element. */
void sd__stage_learn_output_size(sd__stage *st, const sd_bundle *b)
{
    if (st->max_out_bytes == 0 || b->n_primary == 0) {
        return;
    }
    size_t out = 0;
    for (size_t o = 0; o < st->n_outputs; o++) {
        out += b->outputs[o].len;
    }
    size_t per = out / b->n_primary + (out % b->n_primary != 0);
    st->out_per_elem = SD_MAX(per, st->out_per_elem / 2);
    st->out_learned = true;
}

size_t sd__stage_bundle_cap(sd__stage *st)
{
    size_t out_cap = output_capped_elements(st);
    size_t share = spread_elements(st);
    if (out_cap == 0 || (share > 0 && share < out_cap)) {
        return share;
    }
    return out_cap;
}
