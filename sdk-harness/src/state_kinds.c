/*
 * Sundial C SDK: combining and map user state, built on the two State API shapes a runner
 * offers (bag user state and multimap user state).
 *
 * Combining state is a bag of accumulators. sd_state_add appends add(create(), input) — one
 * State API append and no read, so a hot key costs what a bag append costs — and
 * sd_state_combined merges whatever accumulators are there and extracts. When a read finds
 * more than one accumulator it writes the merged one back (clear + append), so the bag stays
 * short for keys that are read as often as they are written; a key written many times between
 * reads grows by one accumulator per add until its next read. CombineFns are associative and
 * commutative by contract, so folding in any order gives the same answer.
 *
 * Map state is multimap user state with at most one value per map key: put clears the map
 * key and appends the value; get reads the map key's values and takes the last (there is
 * never more than one unless another writer appended); keys is the multimap-keys state; the
 * whole map is cleared through the multimap-keys state key (sd_state_clear in proc_ctx.c).
 *
 * Ordered-list state is ordered-list user state: each entry travels as kv(varint sort key,
 * length-prefixed value), the value being the element's nested encoding with the spec's coder;
 * reads and range clears send an OrderedListRange [start, end) and the runner answers with the
 * entries in sort-key order, so the SDK keeps nothing and sorts nothing itself.
 *
 * Every failure goes through sd_fail (via the proc_ctx.c helpers), so a DoFn can simply return
 * the status.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "sdk-harness/src/sdf_int.h"

/* The state's info, checked to be of kind. */
static sd_status info_of(sd_ctx *c,
                         const char *state_id,
                         sd_user_state_kind kind,
                         const char *what,
                         const sd__state_info **out)
{
    sd_status st = sd__ctx_state_info(c, state_id, out);
    if (st != SD_OK) {
        return st;
    }
    if ((*out)->kind != kind) {
        return sd_fail(c, "transform %s: %s on state %s, which is not %s state",
                       sd_ctx_transform(c), what, state_id, sd_user_state_name(kind));
    }
    return SD_OK;
}

/* One nested value of coder co, exactly. */
static bool one_value(const sd_coder *co, sd_bytes v)
{
    sd_reader r = sd_reader_make(v);
    return sd_coder_skip(co, &r, true, NULL) == SD_OK && sd_reader_done(&r);
}

/* ================================================================ combining */

static sd_status cfn_fail(sd_ctx *c, const char *state_id, const char *what, const sd_err *ue)
{
    return sd_fail(c, "transform %s: combining state %s: CombineFn %s failed: %s",
                   sd_ctx_transform(c), state_id, what, sd_err_msg(ue));
}

sd_status sd_state_add(sd_ctx *c, const char *state_id, sd_bytes input)
{
    const sd__state_info *in;
    sd_status st = info_of(c, state_id, SD_USER_STATE_COMBINING, "sd_state_add", &in);
    if (st != SD_OK) {
        return st;
    }
    sd_buf a, b;
    sd_err ue;
    sd_err_clear(&ue);
    sd_buf_init(&a, 0);
    sd_buf_init(&b, 0);
    if ((st = in->cfn->create(in->config, &a, &ue)) != SD_OK) {
        st = cfn_fail(c, state_id, "create", &ue);
    } else if ((st = in->cfn->add(in->config, sd_buf_bytes(&a), input, &b, &ue)) != SD_OK) {
        st = cfn_fail(c, state_id, "add", &ue);
    } else if (!one_value(in->coder, sd_buf_bytes(&b))) {
        st = sd_fail(c, "transform %s: combining state %s: add gave no single %s accumulator",
                     sd_ctx_transform(c), state_id, in->coder->urn);
    } else {
        st = sd__ctx_state_call(c, state_id, SD__STATE_APPEND, NULL, false, sd_buf_bytes(&b), NULL);
    }
    sd_buf_deinit(&a);
    sd_buf_deinit(&b);
    return st;
}

sd_status sd_state_combined(sd_ctx *c, const char *state_id, sd_bytes *out)
{
    const sd__state_info *in;
    sd_bytes all;
    sd_status st = info_of(c, state_id, SD_USER_STATE_COMBINING, "sd_state_combined", &in);
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_GET, NULL, false, SD_BYTES_NULL, &all);
    }
    if (st != SD_OK) {
        return st;
    }
    sd_buf acc, tmp;
    sd_buf *res = sd__ctx_temp_buf(c);
    sd_err ue;
    size_t n = 0;
    sd_err_clear(&ue);
    sd_buf_init(&acc, 0);
    sd_buf_init(&tmp, 0);
    sd_reader r = sd_reader_make(all);
    if (res == NULL) {
        st = sd_fail(c, "transform %s: out of memory", sd_ctx_transform(c));
    }
    while (st == SD_OK && !sd_reader_done(&r)) {
        sd_bytes x;
        if (sd_coder_slice(in->coder, &r, true, &x, NULL) != SD_OK) {
            st = sd_fail(c,
                         "transform %s: combining state %s holds bytes that are not %s "
                         "accumulators",
                         sd_ctx_transform(c), state_id, in->coder->urn);
            break;
        }
        if (n++ == 0) {
            st = sd_buf_append_bytes(&acc, x);
            continue;
        }
        sd_buf_reset(&tmp);
        if ((st = in->cfn->merge(in->config, sd_buf_bytes(&acc), x, &tmp, &ue)) != SD_OK) {
            st = cfn_fail(c, state_id, "merge", &ue);
            break;
        }
        sd_buf t = acc;
        acc = tmp;
        tmp = t;
    }
    if (st == SD_OK && n == 0 && (st = in->cfn->create(in->config, &acc, &ue)) != SD_OK) {
        st = cfn_fail(c, state_id, "create", &ue);
    }
    /* Compact: one merged accumulator replaces many. */
    if (st == SD_OK && n > 1) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_CLEAR, NULL, false, SD_BYTES_NULL, NULL);
        if (st == SD_OK) {
            st = sd__ctx_state_call(c, state_id, SD__STATE_APPEND, NULL, false, sd_buf_bytes(&acc),
                                    NULL);
        }
    }
    if (st == SD_OK && (st = in->cfn->extract(in->config, sd_buf_bytes(&acc), res, &ue)) != SD_OK) {
        st = cfn_fail(c, state_id, "extract", &ue);
    }
    if (st == SD_OK) {
        *out = sd_buf_bytes(res);
    }
    sd_buf_deinit(&acc);
    sd_buf_deinit(&tmp);
    return st;
}

/* ================================================================ map */

static sd_status check_key(sd_ctx *c, const char *state_id, const sd__state_info *in, sd_bytes key)
{
    if (!one_value(in->key_coder, key)) {
        return sd_fail(c, "transform %s: map state %s: key is not one nested %s value",
                       sd_ctx_transform(c), state_id, in->key_coder->urn);
    }
    return SD_OK;
}

sd_status sd_state_map_put(sd_ctx *c, const char *state_id, sd_bytes key, sd_bytes value)
{
    const sd__state_info *in;
    sd_status st = info_of(c, state_id, SD_USER_STATE_MAP, "sd_state_map_put", &in);
    if (st == SD_OK) {
        st = check_key(c, state_id, in, key);
    }
    if (st == SD_OK && !one_value(in->coder, value)) {
        st = sd_fail(c, "transform %s: map state %s: value is not one nested %s value",
                     sd_ctx_transform(c), state_id, in->coder->urn);
    }
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_CLEAR, &key, false, SD_BYTES_NULL, NULL);
    }
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_APPEND, &key, false, value, NULL);
    }
    return st;
}

sd_status
sd_state_map_get(sd_ctx *c, const char *state_id, sd_bytes key, sd_bytes *value, bool *found)
{
    const sd__state_info *in;
    sd_bytes all;
    *found = false;
    sd_status st = info_of(c, state_id, SD_USER_STATE_MAP, "sd_state_map_get", &in);
    if (st == SD_OK) {
        st = check_key(c, state_id, in, key);
    }
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_GET, &key, false, SD_BYTES_NULL, &all);
    }
    sd_reader r = sd_reader_make(st == SD_OK ? all : SD_BYTES_NULL);
    while (st == SD_OK && !sd_reader_done(&r)) {
        sd_bytes v;
        if (sd_coder_slice(in->coder, &r, true, &v, NULL) != SD_OK) {
            return sd_fail(c, "transform %s: map state %s holds bytes that are not %s values",
                           sd_ctx_transform(c), state_id, in->coder->urn);
        }
        *value = v; /* the last write wins */
        *found = true;
    }
    return st;
}

sd_status sd_state_map_remove(sd_ctx *c, const char *state_id, sd_bytes key)
{
    const sd__state_info *in;
    sd_status st = info_of(c, state_id, SD_USER_STATE_MAP, "sd_state_map_remove", &in);
    if (st == SD_OK) {
        st = check_key(c, state_id, in, key);
    }
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_CLEAR, &key, false, SD_BYTES_NULL, NULL);
    }
    return st;
}

sd_status sd_state_map_keys(sd_ctx *c, const char *state_id, sd_iter *keys)
{
    const sd__state_info *in;
    sd_bytes all;
    sd_status st = info_of(c, state_id, SD_USER_STATE_MAP, "sd_state_map_keys", &in);
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_GET, NULL, true, SD_BYTES_NULL, &all);
    }
    if (st == SD_OK) {
        memset(keys, 0, sizeof(*keys));
        keys->r = sd_reader_make(all);
        keys->stream = true;
        keys->elem = in->key_coder;
    }
    return st;
}

/* ================================================================ set */

/* A set is a multimap whose map keys are its values, each holding one marker value. */
static const uint8_t SET_MARK[1] = { 1 };

static sd_status set_value(sd_ctx *c, const char *state_id, const char *what, sd_bytes v)
{
    const sd__state_info *in;
    sd_status st = info_of(c, state_id, SD_USER_STATE_SET, what, &in);
    if (st == SD_OK && !one_value(in->coder, v)) {
        st = sd_fail(c, "transform %s: set state %s: value is not one nested %s value",
                     sd_ctx_transform(c), state_id, in->coder->urn);
    }
    return st;
}

sd_status sd_state_set_add(sd_ctx *c, const char *state_id, sd_bytes value)
{
    sd_status st = set_value(c, state_id, "sd_state_set_add", value);
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_CLEAR, &value, false, SD_BYTES_NULL, NULL);
    }
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_APPEND, &value, false,
                                sd_bytes_make(SET_MARK, sizeof(SET_MARK)), NULL);
    }
    return st;
}

sd_status sd_state_set_remove(sd_ctx *c, const char *state_id, sd_bytes value)
{
    sd_status st = set_value(c, state_id, "sd_state_set_remove", value);
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_CLEAR, &value, false, SD_BYTES_NULL, NULL);
    }
    return st;
}

sd_status sd_state_set_contains(sd_ctx *c, const char *state_id, sd_bytes value, bool *found)
{
    sd_bytes marks = SD_BYTES_NULL;
    *found = false;
    sd_status st = set_value(c, state_id, "sd_state_set_contains", value);
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_GET, &value, false, SD_BYTES_NULL, &marks);
    }
    *found = st == SD_OK && marks.len > 0;
    return st;
}

sd_status sd_state_set_read(sd_ctx *c, const char *state_id, sd_iter *values)
{
    const sd__state_info *in;
    sd_bytes all;
    sd_status st = info_of(c, state_id, SD_USER_STATE_SET, "sd_state_set_read", &in);
    if (st == SD_OK) {
        st = sd__ctx_state_call(c, state_id, SD__STATE_GET, NULL, true, SD_BYTES_NULL, &all);
    }
    if (st == SD_OK) {
        memset(values, 0, sizeof(*values));
        values->r = sd_reader_make(all);
        values->stream = true;
        values->elem = in->coder;
    }
    return st;
}

/* ================================================================ ordered list */

static sd_status check_range(sd_ctx *c, const char *state_id, int64_t start, int64_t end)
{
    if (start > end) {
        return sd_fail(c,
                       "transform %s: ordered-list state %s: range [%lld, %lld) has start "
                       "after end",
                       sd_ctx_transform(c), state_id, (long long)start, (long long)end);
    }
    return SD_OK;
}

sd_status sd_state_ordered_add(sd_ctx *c, const char *state_id, int64_t sort_key, sd_bytes value)
{
    const sd__state_info *in;
    sd_status st = info_of(c, state_id, SD_USER_STATE_ORDERED_LIST, "sd_state_ordered_add", &in);
    if (st != SD_OK) {
        return st;
    }
    if (!one_value(in->coder, value)) {
        return sd_fail(c, "transform %s: ordered-list state %s: value is not one nested %s value",
                       sd_ctx_transform(c), state_id, in->coder->urn);
    }
    sd_buf entry;
    sd_buf_init(&entry, 0);
    st = sd_buf_put_varint(&entry, (uint64_t)sort_key);
    if (st == SD_OK) {
        st = sd_buf_put_lp(&entry, value);
    }
    if (st != SD_OK) {
        st = sd_fail(c, "transform %s: out of memory", sd_ctx_transform(c));
    } else {
        /* An append carries no range: the entry says where it goes. */
        st = sd__ctx_state_call(c, state_id, SD__STATE_APPEND, NULL, false, sd_buf_bytes(&entry),
                                NULL);
    }
    sd_buf_deinit(&entry);
    return st;
}

sd_status sd_state_ordered_read(sd_ctx *c,
                                const char *state_id,
                                int64_t start,
                                int64_t end,
                                sd_ordered_iter *entries)
{
    const sd__state_info *in;
    sd_bytes all = SD_BYTES_NULL;
    sd_status st = info_of(c, state_id, SD_USER_STATE_ORDERED_LIST, "sd_state_ordered_read", &in);
    if (st == SD_OK) {
        st = check_range(c, state_id, start, end);
    }
    if (st == SD_OK && start < end) {
        st = sd__ctx_state_call_range(c, state_id, SD__STATE_GET, start, end, SD_BYTES_NULL, &all);
    }
    if (st == SD_OK) {
        memset(entries, 0, sizeof(*entries));
        entries->r = sd_reader_make(all);
        entries->elem = in->coder;
    }
    return st;
}

sd_status sd_state_ordered_clear_range(sd_ctx *c, const char *state_id, int64_t start, int64_t end)
{
    const sd__state_info *in;
    sd_status st =
        info_of(c, state_id, SD_USER_STATE_ORDERED_LIST, "sd_state_ordered_clear_range", &in);
    if (st == SD_OK) {
        st = check_range(c, state_id, start, end);
    }
    if (st == SD_OK && start < end) {
        st =
            sd__ctx_state_call_range(c, state_id, SD__STATE_CLEAR, start, end, SD_BYTES_NULL, NULL);
    }
    return st;
}

sd_status sd_ordered_next(sd_ordered_iter *it, int64_t *sort_key, sd_bytes *value, bool *has)
{
    *has = false;
    if (sd_reader_done(&it->r)) {
        return SD_OK;
    }
    uint64_t k;
    sd_bytes v;
    sd_reader save = it->r;
    if (sd_reader_varint(&it->r, &k) != SD_OK || sd_reader_lp(&it->r, &v) != SD_OK ||
        (it->elem != NULL && !one_value(it->elem, v))) {
        it->r = save;
        return SD_EPROTO;
    }
    *sort_key = (int64_t)k;
    *value = v;
    *has = true;
    return SD_OK;
}
