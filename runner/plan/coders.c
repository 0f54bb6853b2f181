/*
 * Sundial planner: coder checks and the length-prefix (LP) rule.
 *
 * The runner sees elements only as bytes, but it must find element boundaries in a data stream,
 * split KVs into key and value for GroupByKey and state, and count iterable elements. It can do
 * that for exactly the "known" URNs, the WIRE column of runner/coder/coder.h's SD_CODER_KINDS
 * (bytes, string_utf8, varint, double, bool, kv, iterable, nullable, length_prefix,
 * global_window, interval_window, custom_window, windowed_value, timer). Any other
 * coder is wrapped in beam:coder:length_prefix:v1 so the SDK writes varint(len) before it; the
 * runner then treats the inside as opaque bytes. Structural coders are rebuilt over the wire
 * forms of their components, so kv(genericobjectjs, string) becomes kv(lp(genericobjectjs),
 * string). The wire form of a coder is computed once and memoized (c->wire); synthesized
 * coders are named "<id>_lp" (with a numeric suffix on collision).
 *
 * The wrapped coder is not a runner convenience that could be stripped again: the TypeScript
 * SDK's LengthPrefixCoder encodes the inner genericobjectjs value in the outer context, which
 * differs from its nested encoding. So the descriptor's PCollection coders name the wire form
 * too, and the SDK decodes what the runner stores (side inputs, GBK output) with the same coder
 * it used to encode it.
 *
 * Coder checks run once per coder id (c->seen "c:<id>" -> 1 done, 2 in progress), find
 * dangling component ids and cycles, and verify the arity of the URNs the runner parses.
 */
#include <stdint.h>
#include <string.h>

#include "runner/coder/coder.h"
#include "runner/plan/plan_int.h"
#include "runner/urns/urns.h"

#define MAX_CODER_DEPTH 64
#define SEEN_DONE       ((void *)1)
#define SEEN_ACTIVE     ((void *)2)

static bool streq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

const pb_coder *sd__plan_coder_get(const pl_ctx *c, const char *id)
{
    if (id == NULL) {
        return NULL;
    }
    const pb_coder *k = sd_map_get_str(&c->new_coders, id);
    return k != NULL ? k : sd_map_get_str(&c->coders, id);
}

const char *sd__plan_coder_urn(const pl_ctx *c, const char *id)
{
    const pb_coder *k = sd__plan_coder_get(c, id);
    if (k == NULL) {
        return NULL;
    }
    return k->spec != NULL && k->spec->urn != NULL ? k->spec->urn : "";
}

/* Leaves the runner parses (no components): the WIRE kinds of runner/coder/coder.h without
 * components. */
static bool urn_known_leaf(const char *urn)
{
    sd_coder_kind k = sd_coder_kind_from_urn(urn);
    return sd_coder_kind_wire(k) && sd_coder_kind_components(k) == 0;
}

/* Structural URNs the runner parses (WIRE kinds with components, length_prefix aside);
 * returns their arity, or -1. */
static int urn_structural_arity(const char *urn)
{
    sd_coder_kind k = sd_coder_kind_from_urn(urn);
    if (!sd_coder_kind_wire(k) || k == SD_CODER_LENGTH_PREFIX) {
        return -1;
    }
    int n = sd_coder_kind_components(k);
    return n > 0 ? n : -1;
}

/* Does component i of a coder of this URN hold a window coder? */
static bool window_position(const char *urn, size_t i)
{
    return i == 1 && (streq(urn, SD_URN_CODER_WINDOWED_VALUE) || streq(urn, SD_URN_CODER_TIMER));
}

bool sd__plan_coder_known(const char *urn)
{
    return urn_known_leaf(urn) || streq(urn, SD_URN_CODER_LENGTH_PREFIX) ||
           urn_structural_arity(urn) >= 0;
}

/* ----------------------------------------------------------------------------------------- */
/* Checks                                                                                     */
/* ----------------------------------------------------------------------------------------- */

static sd_status check_rec(pl_ctx *c, const char *id, const char *who, unsigned depth)
{
    char *key = sd_arena_printf(&c->scratch, "c:%s", id);
    if (key == NULL) {
        return SD_ENOMEM;
    }
    void *state = sd_map_get_str(&c->seen, key);
    if (state == SEEN_DONE) {
        return SD_OK;
    }
    if (state == SEEN_ACTIVE || depth > MAX_CODER_DEPTH) {
        PL_TRY(sd_map_put_str(&c->seen, key, SEEN_DONE));
        return sd__plan_problem(c, true, "coder \"%s\" contains itself (cycle in components)", id);
    }
    const pb_coder *k = sd__plan_coder_get(c, id);
    if (k == NULL) {
        PL_TRY(sd_map_put_str(&c->seen, key, SEEN_DONE));
        return sd__plan_problem(c, true, "coder \"%s\" (used by %s) does not exist", id, who);
    }
    PL_TRY(sd_map_put_str(&c->seen, key, SEEN_ACTIVE));
    const char *urn = k->spec != NULL && k->spec->urn != NULL ? k->spec->urn : "";
    if (urn[0] == '\0') {
        PL_TRY(sd__plan_problem(c, true, "coder \"%s\" has no URN", id));
    }
    int arity = urn_structural_arity(urn);
    if (streq(urn, SD_URN_CODER_LENGTH_PREFIX)) {
        arity = 1;
    }
    if (arity >= 0 && k->n_component_coder_ids != (size_t)arity) {
        PL_TRY(sd__plan_problem(c, true, "coder \"%s\" (%s) needs %d component%s, has %zu", id, urn,
                                arity, arity == 1 ? "" : "s", k->n_component_coder_ids));
    }
    char *me = sd_arena_printf(&c->scratch, "coder \"%s\"", id);
    if (me == NULL) {
        return SD_ENOMEM;
    }
    for (size_t i = 0; i < k->n_component_coder_ids; i++) {
        PL_TRY(check_rec(c, k->component_coder_ids[i], me, depth + 1));
    }
    return sd_map_put_str(&c->seen, key, SEEN_DONE);
}

sd_status sd__plan_check_coder(pl_ctx *c, const char *id, const char *who)
{
    if (id == NULL || id[0] == '\0') {
        return sd__plan_problem(c, true, "%s has no coder id", who);
    }
    return check_rec(c, id, who, 0);
}

/* ----------------------------------------------------------------------------------------- */
/* Synthesis                                                                                  */
/* ----------------------------------------------------------------------------------------- */

static sd_status new_coder_ex(pl_ctx *c,
                              const char *base,
                              const char *urn,
                              ProtobufCBinaryData payload,
                              size_t n,
                              const char *const *components,
                              const char **id)
{
    const char *nid = sd__plan_unique_id(c, &c->coders, &c->new_coders, base);
    pb_coder *k = sd_arena_alloc(&c->scratch, sizeof(*k));
    pb_spec *spec = sd_arena_alloc(&c->scratch, sizeof(*spec));
    char **comps = sd_arena_alloc(&c->scratch, sizeof(*comps) * (n + 1));
    if (nid == NULL || k == NULL || spec == NULL || comps == NULL) {
        return SD_ENOMEM;
    }
    org__apache__beam__model__pipeline__v1__coder__init(k);
    org__apache__beam__model__pipeline__v1__function_spec__init(spec);
    spec->urn = (char *)urn;
    spec->payload = payload;
    for (size_t i = 0; i < n; i++) {
        comps[i] = (char *)components[i];
    }
    k->spec = spec;
    k->n_component_coder_ids = n;
    k->component_coder_ids = comps;
    PL_TRY(sd_map_put_str(&c->new_coders, nid, k));
    *id = nid;
    return SD_OK;
}

sd_status sd__plan_new_coder(pl_ctx *c,
                             const char *base,
                             const char *urn,
                             size_t n_components,
                             const char *const *components,
                             const char **id)
{
    ProtobufCBinaryData none = { 0, NULL };
    return new_coder_ex(c, base, urn, none, n_components, components, id);
}

static sd_status window_rec(pl_ctx *c, const char *id, unsigned depth, const char **out);

static sd_status wire_rec(pl_ctx *c, const char *id, unsigned depth, const char **out)
{
    const char *memo = sd_map_get_str(&c->wire, id);
    if (memo != NULL) {
        *out = memo;
        return SD_OK;
    }
    const pb_coder *k = sd__plan_coder_get(c, id);
    const char *urn = sd__plan_coder_urn(c, id);
    const char *result = id;
    if (k == NULL || depth > MAX_CODER_DEPTH) {
        /* Validation reported it; keep the id so assembly can go on. */
        *out = id;
        return SD_OK;
    }
    if (urn_known_leaf(urn) || streq(urn, SD_URN_CODER_LENGTH_PREFIX)) {
        result = id;
    } else if (urn_structural_arity(urn) >= 0) {
        size_t n = k->n_component_coder_ids;
        const char **comps = sd_arena_alloc(&c->scratch, sizeof(*comps) * (n + 1));
        if (comps == NULL) {
            return SD_ENOMEM;
        }
        bool changed = false;
        for (size_t i = 0; i < n; i++) {
            if (window_position(urn, i)) {
                PL_TRY(window_rec(c, k->component_coder_ids[i], depth + 1, &comps[i]));
            } else {
                PL_TRY(wire_rec(c, k->component_coder_ids[i], depth + 1, &comps[i]));
            }
            changed = changed || !streq(comps[i], k->component_coder_ids[i]);
        }
        if (changed) {
            char *base = sd_arena_printf(&c->scratch, "%s_lp", id);
            if (base == NULL) {
                return SD_ENOMEM;
            }
            PL_TRY(new_coder_ex(c, base, urn, k->spec->payload, n, comps, &result));
        }
    } else {
        char *base = sd_arena_printf(&c->scratch, "%s_lp", id);
        if (base == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd__plan_new_coder(c, base, SD_URN_CODER_LENGTH_PREFIX, 1, &id, &result));
    }
    PL_TRY(sd_map_put_str(&c->wire, id, (void *)result));
    if (!streq(result, id)) {
        /* A wire coder is its own wire form. */
        PL_TRY(sd_map_put_str(&c->wire, result, (void *)result));
    }
    *out = result;
    return SD_OK;
}

sd_status sd__plan_wire_coder(pl_ctx *c, const char *id, const char **wire)
{
    return wire_rec(c, id, 0, wire);
}

/*
 * A window coder the runner cannot read (a custom WindowFn's own coder: Java's
 * CustomWindowCoder, a Python window type's pickled coder) is replaced everywhere the SDK meets
 * it — the windowing strategy, and the window component of windowed_value and timer coders — by
 * beam:coder:custom_window:v1 over it, length-prefixed (the form Beam's own Python runner uses):
 * the SDK then writes each window's max timestamp before the window, and the runner groups,
 * fires and expires by that timestamp while keeping the window itself as opaque bytes. Beam's
 * Java and Python SDKs read that coder (TimestampPrefixingWindowCoder). global_window,
 * interval_window and an SDK's own custom_window are kept (the latter's component in its wire
 * form).
 */
sd_status sd__plan_window_coder(pl_ctx *c, const char *id, const char **out)
{
    return window_rec(c, id, 0, out);
}

/* sd__plan_window_coder at a depth of the walk (a cycle through window positions ends at
 * MAX_CODER_DEPTH like any other; the checks report it). */
static sd_status window_rec(pl_ctx *c, const char *id, unsigned depth, const char **out)
{
    const char *urn = sd__plan_coder_urn(c, id);
    if (urn == NULL || streq(urn, SD_URN_CODER_GLOBAL_WINDOW) ||
        streq(urn, SD_URN_CODER_INTERVAL_WINDOW) || streq(urn, SD_URN_CODER_CUSTOM_WINDOW)) {
        return wire_rec(c, id, depth, out); /* missing coders are reported by the checks */
    }
    char *key = sd_arena_printf(&c->scratch, "window\x1f%s", id);
    if (key == NULL) {
        return SD_ENOMEM;
    }
    const char *memo = sd_map_get_str(&c->port, key);
    if (memo != NULL) {
        *out = memo;
        return SD_OK;
    }
    const char *inner;
    PL_TRY(wire_rec(c, id, depth, &inner));
    if (!streq(sd__plan_coder_urn(c, inner), SD_URN_CODER_LENGTH_PREFIX)) {
        /* A structural coder the runner reads (a KV, say) still has no length of its own. */
        char *lp = sd_arena_printf(&c->scratch, "%s_lp", id);
        if (lp == NULL) {
            return SD_ENOMEM;
        }
        PL_TRY(sd__plan_new_coder(c, lp, SD_URN_CODER_LENGTH_PREFIX, 1, &id, &inner));
    }
    char *base = sd_arena_printf(&c->scratch, "%s_custom_window", id);
    if (base == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd__plan_new_coder(c, base, SD_URN_CODER_CUSTOM_WINDOW, 1, &inner, out));
    PL_TRY(sd_map_put_str(&c->wire, *out, (void *)*out));
    return sd_map_put_str(&c->port, key, (void *)*out);
}

sd_status sd__plan_custom_window_coders(pl_ctx *c)
{
    size_t it = 0;
    sd_bytes k;
    void *v;
    sd_vec changed; /* pb_wstrat * copies, put back after the walk */
    sd_vec_init(&changed, sizeof(pb_wstrat *));
    sd_status rc = SD_OK;
    while (rc == SD_OK && sd_map_next(&c->wstrats, &it, &k, &v)) {
        const pb_wstrat *ws = v;
        const char *wc = NULL;
        if (ws->window_coder_id == NULL || ws->window_coder_id[0] == '\0' ||
            sd__plan_coder_get(c, ws->window_coder_id) == NULL) {
            continue; /* reported by the windowing checks */
        }
        rc = sd__plan_window_coder(c, ws->window_coder_id, &wc);
        if (rc != SD_OK || streq(wc, ws->window_coder_id)) {
            continue;
        }
        pb_wstrat *copy = sd_arena_memdup(&c->scratch, ws, sizeof(*copy));
        char *id = sd_arena_printf(&c->scratch, "%.*s", (int)k.len, (const char *)k.ptr);
        if (copy == NULL || id == NULL) {
            rc = SD_ENOMEM;
            break;
        }
        copy->window_coder_id = (char *)wc;
        rc = sd_vec_push(&changed, &copy);
        if (rc == SD_OK) {
            rc = sd_vec_push(&changed, &id);
        }
    }
    for (size_t i = 0; rc == SD_OK && i + 1 < changed.len; i += 2) {
        pb_wstrat *copy = *SD_VEC_AT(&changed, pb_wstrat *, i);
        const char *id = *SD_VEC_AT(&changed, const char *, i + 1);
        rc = sd_map_put_str(&c->wstrats, id, copy);
    }
    sd_vec_deinit(&changed);
    return rc;
}

/*
 * A PCollection's elements may themselves be windowed values: Java's Create.windowedValues reads
 * WindowedValue<T> from its source before it restores each value's window, timestamp and pane.
 * The Java SDK harness takes a windowed_value coder named as a PCollection's coder for an old
 * way of naming the data plane's form and uses its value coder instead (its
 * PCollectionConsumerRegistry, "Stop passing windowed value coders within PCollections"), so its
 * element-size sampling casts each WindowedValue to the value's type and the bundle fails. Such a
 * PCollection is therefore named with length_prefix(windowed_value(...)) everywhere: in the
 * descriptors (also inside a stage, where Java would otherwise unwrap it) and as the element
 * coder of its data-plane port, where the runner then keeps each element as opaque bytes. A
 * windowed_value nested deeper (inside a KV, say) is not touched: only a PCollection's own coder
 * is unwrapped.
 */
sd_status sd__plan_pcoll_coder(pl_ctx *c, const char *id, const char **coder)
{
    const char *urn = sd__plan_coder_urn(c, id);
    if (urn == NULL || !streq(urn, SD_URN_CODER_WINDOWED_VALUE)) {
        return wire_rec(c, id, 0, coder);
    }
    char *key = sd_arena_printf(&c->scratch, "pcoll\x1f%s", id);
    if (key == NULL) {
        return SD_ENOMEM;
    }
    const char *memo = sd_map_get_str(&c->port, key);
    if (memo != NULL) {
        *coder = memo;
        return SD_OK;
    }
    char *base = sd_arena_printf(&c->scratch, "%s_lp", id);
    if (base == NULL) {
        return SD_ENOMEM;
    }
    PL_TRY(sd__plan_new_coder(c, base, SD_URN_CODER_LENGTH_PREFIX, 1, &id, coder));
    PL_TRY(sd_map_put_str(&c->wire, *coder, (void *)*coder));
    return sd_map_put_str(&c->port, key, (void *)*coder);
}

sd_status sd__plan_port_coder(pl_ctx *c, const char *elem, const char *win, const char **port)
{
    char *key = sd_arena_printf(&c->scratch, "%s\x1f%s", elem, win);
    if (key == NULL) {
        return SD_ENOMEM;
    }
    const char *memo = sd_map_get_str(&c->port, key);
    if (memo != NULL) {
        *port = memo;
        return SD_OK;
    }
    char *base = sd_arena_printf(&c->scratch, "wv:%s:%s", elem, win);
    if (base == NULL) {
        return SD_ENOMEM;
    }
    const char *comps[2] = { elem, win };
    PL_TRY(sd__plan_new_coder(c, base, SD_URN_CODER_WINDOWED_VALUE, 2, comps, port));
    PL_TRY(sd_map_put_str(&c->wire, *port, (void *)*port));
    return sd_map_put_str(&c->port, key, (void *)*port);
}

/*
 * Structural equality: the same id, or the same URN, payload and (recursively) components.
 * Two SDK-side coders that are equal this way encode every value to the same bytes, so a
 * runner-side Flatten may concatenate their outputs. Missing coders and over-deep trees
 * compare unequal (the conservative answer: a transcode is never wrong, only slower).
 */
static bool coders_equal_rec(const pl_ctx *c, const char *a, const char *b, unsigned depth)
{
    if (a == NULL || b == NULL) {
        return false;
    }
    if (streq(a, b)) {
        return true;
    }
    const pb_coder *x = sd__plan_coder_get(c, a);
    const pb_coder *y = sd__plan_coder_get(c, b);
    if (x == NULL || y == NULL || depth > MAX_CODER_DEPTH) {
        return false;
    }
    const char *ux = x->spec != NULL && x->spec->urn != NULL ? x->spec->urn : "";
    const char *uy = y->spec != NULL && y->spec->urn != NULL ? y->spec->urn : "";
    size_t px = x->spec != NULL ? x->spec->payload.len : 0;
    size_t py = y->spec != NULL ? y->spec->payload.len : 0;
    if (!streq(ux, uy) || px != py || x->n_component_coder_ids != y->n_component_coder_ids) {
        return false;
    }
    if (px > 0 && memcmp(x->spec->payload.data, y->spec->payload.data, px) != 0) {
        return false;
    }
    for (size_t i = 0; i < x->n_component_coder_ids; i++) {
        if (!coders_equal_rec(c, x->component_coder_ids[i], y->component_coder_ids[i], depth + 1)) {
            return false;
        }
    }
    return true;
}

bool sd__plan_coders_equal(const pl_ctx *c, const char *a, const char *b)
{
    return coders_equal_rec(c, a, b, 0);
}
