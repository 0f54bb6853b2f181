/*
 * Sundial: executor: the State API.
 *
 * A worker's StateRequests are answered from the engine, for the bundle the request names:
 *
 *   key type                      get                        append      clear
 *   iterable / multimap side in.  sd_em_side_input_get       -           -     (read-only)
 *   multimap keys side input      sd_em_side_input_keys      -           -
 *   bag user state                sd_em_user_state_get       _append     _clear
 *   multimap user state           the same, with a map key
 *   multimap keys user state      sd_em_user_state_keys      -           _clear (all keys)
 *   multimap entries user state   sd_em_user_state_entries   -           _clear
 *   ordered list user state       sd_em_ordered_list_get     _append     _clear (a range)
 *
 * Which user-state kinds travel on which of these keys (bag, value and combining state on bag
 * keys; map, set and multimap state on the multimap keys; ordered lists on their own) is the
 * KEY column of the state kinds table, runner/urns/state_kinds.h.
 *
 * A get answer over STATE_CHUNK_BYTES is paged: the first page goes with a continuation
 * token ("sundial-page-N"), the rest stays on the run (r->pages) until the worker has asked
 * for it all. Pages end between values, never inside one: Beam's Python SDK decodes each page
 * on its own ("Unknown type tag" otherwise). The values' coder comes from the side input's
 * PCollection or the state's spec; where the runner has none it can split (or none at all),
 * pages end at the byte limit as before, which SDKs that join the pages (Java) still read. Every
 * failure is an error answer naming the request and the instruction; the job goes on (the SDK
 * decides what the failed request means for its bundle).
 */
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "runner/coder/coder.h"
#include "runner/exec/exec_int.h"

#define STATE_CHUNK_BYTES (1024 * 1024)

/* What a StateRequest asks for. */
typedef enum state_op { STATE_GET, STATE_APPEND, STATE_CLEAR } state_op;

void sd__exec_page_destroy(void *p)
{
    sd_exec_page *ps = p;
    sd_buf_deinit(&ps->data);
    sd_coder_destroy(ps->coder);
    sd_free(ps);
}

static void state_reply(sd_fnapi_worker *w,
                        const char *id,
                        const char *error,
                        const sd_bytes *data,
                        const char *token,
                        state_op op)
{
    pb_StateResponse resp = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_RESPONSE__INIT;
    pb_StateGetResponse get = ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_GET_RESPONSE__INIT;
    pb_StateAppendResponse app =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_APPEND_RESPONSE__INIT;
    pb_StateClearResponse clr =
        ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_CLEAR_RESPONSE__INIT;
    resp.id = (char *)id;
    if (error != NULL) {
        resp.error = (char *)error;
    } else if (op == STATE_GET) {
        resp.response_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_RESPONSE__RESPONSE_GET;
        resp.get = &get;
        if (data != NULL) {
            get.data.data = (uint8_t *)data->ptr;
            get.data.len = data->len;
        }
        if (token != NULL) {
            get.continuation_token.data = (uint8_t *)token;
            get.continuation_token.len = strlen(token);
        }
    } else if (op == STATE_APPEND) {
        resp.response_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_RESPONSE__RESPONSE_APPEND;
        resp.append = &app;
    } else {
        resp.response_case =
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_RESPONSE__RESPONSE_CLEAR;
        resp.clear = &clr;
    }
    if (sd_fnapi_worker_state_reply(w, &resp) != SD_OK) {
        SD_WARN("exec", "could not answer state request %s", id);
    }
}

/*
 * Where the page starting at off ends: past whole values of vc, at least one, as close to
 * STATE_CHUNK_BYTES as whole values allow (a single larger value is a page of its own); at the
 * byte limit when vc is NULL or the bytes do not split into its values.
 */
static size_t page_end(const sd_buf *data, size_t off, const sd_coder *vc)
{
    size_t left = data->len - off;
    size_t limit = left > STATE_CHUNK_BYTES ? STATE_CHUNK_BYTES : left;
    if (vc == NULL || left <= STATE_CHUNK_BYTES) {
        return off + limit;
    }
    sd_reader r = sd_reader_make(sd_bytes_make(data->data + off, left));
    size_t end = 0;
    while (!sd_reader_done(&r)) {
        sd_bytes v;
        if (sd_coder_slice(vc, &r, true, &v, NULL) != SD_OK) {
            return off + limit; /* not this coder's values: the byte limit */
        }
        size_t at = (size_t)(r.p - (data->data + off));
        if (at > STATE_CHUNK_BYTES && end > 0) {
            break;
        }
        end = at;
        if (at >= STATE_CHUNK_BYTES) {
            break;
        }
    }
    return off + end;
}

/* Answer a get with data, paging anything above STATE_CHUNK_BYTES by continuation token, each
 * page whole values of vc (NULL: pages at the byte limit). */
static void state_reply_paged(sd_exec_run *r,
                              sd_fnapi_worker *w,
                              const char *id,
                              sd_buf *data,
                              const sd_coder *vc)
{
    if (data->len <= STATE_CHUNK_BYTES) {
        sd_bytes all = sd_buf_bytes(data);
        state_reply(w, id, NULL, &all, NULL, STATE_GET);
        return;
    }
    sd_exec_page *ps = sd_calloc(1, sizeof(*ps));
    char token[64];
    if (ps == NULL) {
        state_reply(w, id, "out of memory", NULL, NULL, STATE_GET);
        return;
    }
    ps->data = *data;
    sd_buf_init(data, 0);
    ps->coder = vc != NULL ? sd_coder_ref((sd_coder *)vc) : NULL;
    ps->offset = page_end(&ps->data, 0, vc);
    snprintf(token, sizeof(token), "sundial-page-%llu", (unsigned long long)++r->next_token);
    if (sd_map_put_str(&r->pages, token, ps) != SD_OK) {
        sd__exec_page_destroy(ps);
        state_reply(w, id, "out of memory", NULL, NULL, STATE_GET);
        return;
    }
    sd_bytes first = sd_bytes_make(ps->data.data, ps->offset);
    state_reply(w, id, NULL, &first, token, STATE_GET);
}

static void state_continue(sd_exec_run *r, sd_fnapi_worker *w, const char *id, sd_bytes token)
{
    sd_exec_page *ps = sd_map_get(&r->pages, token);
    if (ps == NULL) {
        state_reply(w, id, "unknown continuation token", NULL, NULL, STATE_GET);
        return;
    }
    size_t end = page_end(&ps->data, ps->offset, ps->coder);
    sd_bytes chunk = sd_bytes_make(ps->data.data + ps->offset, end - ps->offset);
    ps->offset = end;
    if (ps->offset < ps->data.len) {
        char tok[64];
        snprintf(tok, sizeof(tok), "%.*s", (int)token.len, (const char *)token.ptr);
        state_reply(w, id, NULL, &chunk, tok, STATE_GET);
    } else {
        state_reply(w, id, NULL, &chunk, NULL, STATE_GET);
        sd_map_remove(&r->pages, token);
    }
}

#define BYTES(pbd) sd_bytes_make((pbd).data, (pbd).len)
/* The engine's address of a StateKey's side input (s: any *SideInput key) or user state. */
#define SIDE_REF(f, s)                                                     \
    ((sd_em_side_ref){ .transform_id = side_owner((f), (s)->transform_id), \
                       .side_input_id = (s)->side_input_id,                \
                       .window = BYTES((s)->window) })
#define STATE_REF(s)                                       \
    ((sd_em_state_ref){ .transform_id = (s)->transform_id, \
                        .state_id = (s)->user_state_id,    \
                        .window = BYTES((s)->window),      \
                        .key = BYTES((s)->key) })

/* The transform whose side inputs transform_id reads: a draining splittable stage's
 * truncation (sd_plan_stage.drain_truncate) reads those of the SDF it truncates for. */
static const char *side_owner(const sd_exec_inflight *f, const char *transform_id)
{
    const sd_plan_stage *ps = f->st->ps;
    if (ps->drain_truncate != NULL && strcmp(transform_id, ps->drain_truncate) == 0) {
        return ps->drain_process;
    }
    return transform_id;
}

/* Side inputs: read-only, so only a get is allowed. */
static sd_status side_input_request(sd_exec_run *r,
                                    sd_exec_inflight *f,
                                    const pb_StateKey *k,
                                    state_op op,
                                    sd_buf *out,
                                    sd_err *err)
{
    if (op != STATE_GET) {
        return sd_err_set(err, SD_EINVAL, "side inputs are read-only");
    }
    switch (k->type_case) {
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ITERABLE_SIDE_INPUT: {
        const SD_FN(StateKey__IterableSideInput) *s = k->iterable_side_input;
        const sd_em_side_ref ref = SIDE_REF(f, s);
        return sd_em_side_input_get(r->em, f->b, &ref, NULL, out, err);
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_SIDE_INPUT: {
        const SD_FN(StateKey__MultimapSideInput) *s = k->multimap_side_input;
        const sd_em_side_ref ref = SIDE_REF(f, s);
        sd_bytes key = BYTES(s->key);
        return sd_em_side_input_get(r->em, f->b, &ref, &key, out, err);
    }
    default: {
        const SD_FN(StateKey__MultimapKeysSideInput) *s = k->multimap_keys_side_input;
        const sd_em_side_ref ref = SIDE_REF(f, s);
        return sd_em_side_input_keys(r->em, f->b, &ref, out, err);
    }
    }
}

/* Bag and multimap user state: get, append or clear one value list (map_key NULL: a bag). */
static sd_status value_state_request(sd_exec_run *r,
                                     sd_exec_inflight *f,
                                     const pb_StateRequest *req,
                                     const sd_em_state_ref *ref,
                                     const sd_bytes *map_key,
                                     state_op op,
                                     sd_buf *out,
                                     sd_err *err)
{
    switch (op) {
    case STATE_GET:
        return sd_em_user_state_get(r->em, f->b, ref, map_key, out, err);
    case STATE_APPEND:
        return sd_em_user_state_append(r->em, f->b, ref, map_key, BYTES(req->append->data), err);
    default:
        return sd_em_user_state_clear(r->em, f->b, ref, map_key, err);
    }
}

/* A multimap's keys: get the keys, or clear the whole map; no append. */
static sd_status map_keys_request(sd_exec_run *r,
                                  sd_exec_inflight *f,
                                  const SD_FN(StateKey__MultimapKeysUserState) * s,
                                  state_op op,
                                  sd_buf *out,
                                  sd_err *err)
{
    const sd_em_state_ref ref = STATE_REF(s);
    if (op == STATE_GET) {
        return sd_em_user_state_keys(r->em, f->b, &ref, out, err);
    }
    if (op == STATE_CLEAR) {
        return sd_em_user_state_clear(r->em, f->b, &ref, NULL, err);
    }
    return sd_err_set(err, SD_EINVAL, "append to multimap keys state is not allowed");
}

/* A multimap's entries: get every key with its values, or clear the whole map; no append. */
static sd_status map_entries_request(sd_exec_run *r,
                                     sd_exec_inflight *f,
                                     const SD_FN(StateKey__MultimapEntriesUserState) * s,
                                     state_op op,
                                     sd_buf *out,
                                     sd_err *err)
{
    const sd_em_state_ref ref = STATE_REF(s);
    if (op == STATE_GET) {
        /* The runner splits the stored bytes into values with the state's value coder. */
        sd_coder *vc = NULL;
        sd_status st = sd__exec_plan_multimap_value_coder(&r->xp, f->st, s->transform_id,
                                                          s->user_state_id, &vc, err);
        if (st == SD_OK) {
            st = sd_em_user_state_entries(r->em, f->b, &ref, vc, out, err);
        }
        sd_coder_destroy(vc);
        return st;
    }
    if (op == STATE_CLEAR) {
        return sd_em_user_state_clear(r->em, f->b, &ref, NULL, err);
    }
    return sd_err_set(err, SD_EINVAL, "append to multimap entries state is not allowed");
}

/* Ordered list user state: get or clear a range of sort keys (no range: all), or append. */
static sd_status ordered_list_request(sd_exec_run *r,
                                      sd_exec_inflight *f,
                                      const pb_StateRequest *req,
                                      const SD_FN(StateKey__OrderedListUserState) * s,
                                      state_op op,
                                      sd_buf *out,
                                      sd_err *err)
{
    /* No range means the whole list. */
    int64_t start = s->range != NULL ? s->range->start : INT64_MIN;
    int64_t end = s->range != NULL ? s->range->end : INT64_MAX;
    const sd_em_state_ref ref = STATE_REF(s);
    switch (op) {
    case STATE_GET:
        return sd_em_ordered_list_get(r->em, f->b, &ref, start, end, out, err);
    case STATE_APPEND:
        return sd_em_ordered_list_append(r->em, f->b, &ref, BYTES(req->append->data), err);
    default:
        return sd_em_ordered_list_clear(r->em, f->b, &ref, start, end, err);
    }
}

/*
 * The coder of the values a get for key k returns, to end its pages between values: the side
 * PCollection's (borrowed from the engine) or the user state spec's (built: *owned, freed by
 * the caller). NULL where the runner has none (ordered lists, multimap entries, unknown keys).
 */
static const sd_coder *
page_coder(sd_exec_run *r, sd_exec_inflight *f, const pb_StateKey *k, sd_coder **owned)
{
    *owned = NULL;
    const char *tid = NULL, *sid = NULL;
    bool keys = false;
    switch (k->type_case) {
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ITERABLE_SIDE_INPUT:
        return sd_em_side_input_coder(r->em, f->b,
                                      side_owner(f, k->iterable_side_input->transform_id),
                                      k->iterable_side_input->side_input_id, false, false);
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_SIDE_INPUT:
        return sd_em_side_input_coder(r->em, f->b,
                                      side_owner(f, k->multimap_side_input->transform_id),
                                      k->multimap_side_input->side_input_id, true, false);
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_KEYS_SIDE_INPUT:
        return sd_em_side_input_coder(r->em, f->b,
                                      side_owner(f, k->multimap_keys_side_input->transform_id),
                                      k->multimap_keys_side_input->side_input_id, false, true);
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_BAG_USER_STATE:
        tid = k->bag_user_state->transform_id;
        sid = k->bag_user_state->user_state_id;
        break;
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_USER_STATE:
        tid = k->multimap_user_state->transform_id;
        sid = k->multimap_user_state->user_state_id;
        break;
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_KEYS_USER_STATE:
        tid = k->multimap_keys_user_state->transform_id;
        sid = k->multimap_keys_user_state->user_state_id;
        keys = true;
        break;
    default:
        return NULL;
    }
    if (tid == NULL || sid == NULL ||
        sd__exec_plan_state_coder(&r->xp, f->st, tid, sid, keys, owned, NULL) != SD_OK) {
        return NULL;
    }
    return *owned;
}

/* Serve one request of bundle f from the engine by its key type. OUT: out (a get's data). */
static sd_status serve(sd_exec_run *r,
                       sd_exec_inflight *f,
                       const pb_StateRequest *req,
                       state_op op,
                       sd_buf *out,
                       sd_err *err)
{
    const pb_StateKey *k = req->state_key;
    switch (k->type_case) {
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ITERABLE_SIDE_INPUT:
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_SIDE_INPUT:
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_KEYS_SIDE_INPUT:
        return side_input_request(r, f, k, op, out, err);
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_BAG_USER_STATE: {
        const SD_FN(StateKey__BagUserState) *s = k->bag_user_state;
        const sd_em_state_ref ref = STATE_REF(s);
        return value_state_request(r, f, req, &ref, NULL, op, out, err);
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_USER_STATE: {
        const SD_FN(StateKey__MultimapUserState) *s = k->multimap_user_state;
        const sd_em_state_ref ref = STATE_REF(s);
        sd_bytes mk = BYTES(s->map_key);
        return value_state_request(r, f, req, &ref, &mk, op, out, err);
    }
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_KEYS_USER_STATE:
        return map_keys_request(r, f, k->multimap_keys_user_state, op, out, err);
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_MULTIMAP_ENTRIES_USER_STATE:
        return map_entries_request(r, f, k->multimap_entries_user_state, op, out, err);
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_KEY__TYPE_ORDERED_LIST_USER_STATE:
        return ordered_list_request(r, f, req, k->ordered_list_user_state, op, out, err);
    default:
        return sd_err_set(err, SD_EUNIMPL, "state key type %d is not supported by Sundial",
                          (int)k->type_case);
    }
}

void sd__exec_on_worker_state(sd_fnapi_worker *w, const pb_StateRequest *req, void *ctx)
{
    sd_exec_env *e = ctx;
    sd_exec_run *r = e->r;
    sd_exec_inflight *f = sd_map_get_str(&r->inflight, req->instruction_id);
    sd_err err;
    sd_buf out;
    state_op op;
    char msg[SD_ERR_MSG_MAX + 64];

    if (req->request_case ==
            ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__REQUEST_GET &&
        req->get != NULL && req->get->continuation_token.len > 0) {
        state_continue(r, w, req->id, BYTES(req->get->continuation_token));
        return;
    }
    if (f == NULL) {
        snprintf(msg, sizeof(msg), "state request %s names unknown or finished instruction %s",
                 req->id, req->instruction_id);
        state_reply(w, req->id, msg, NULL, NULL, STATE_GET);
        return;
    }
    if (req->state_key == NULL) {
        state_reply(w, req->id, "state request without a state_key", NULL, NULL, STATE_GET);
        return;
    }
    switch (req->request_case) {
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__REQUEST_GET:
        op = STATE_GET;
        break;
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__REQUEST_APPEND:
        op = STATE_APPEND;
        break;
    case ORG__APACHE__BEAM__MODEL__FN_EXECUTION__V1__STATE_REQUEST__REQUEST_CLEAR:
        op = STATE_CLEAR;
        break;
    default:
        state_reply(w, req->id, "state request has no get, append or clear", NULL, NULL, STATE_GET);
        return;
    }
    if (op == STATE_GET) {
        f->state_gets++;
    } else {
        f->state_writes++;
    }
    sd_err_clear(&err);
    sd_buf_init(&out, 0);
    sd_status st = serve(r, f, req, op, &out, &err);
    if (st != SD_OK) {
        sd_err_failed(&err, st, "serving the state request");
        snprintf(msg, sizeof(msg), "state request %s (instruction %s): %s", req->id,
                 req->instruction_id, sd_err_msg(&err));
        state_reply(w, req->id, msg, NULL, NULL, op);
    } else if (op == STATE_GET) {
        sd_coder *owned = NULL;
        const sd_coder *vc =
            out.len > STATE_CHUNK_BYTES ? page_coder(r, f, req->state_key, &owned) : NULL;
        state_reply_paged(r, w, req->id, &out, vc);
        sd_coder_destroy(owned);
    } else {
        state_reply(w, req->id, NULL, NULL, NULL, op);
    }
    sd_buf_deinit(&out);
}
