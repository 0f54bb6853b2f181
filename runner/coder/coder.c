/*
 * Sundial: coder trees.
 *
 * A pipeline names its coders by id in Components.coders; each is a FunctionSpec (URN and
 * payload) plus component coder ids. This file turns that graph into an immutable tree of
 * sd_coder nodes that every other coder function walks:
 *
 *   windowed_value ─┬─ kv ─┬─ string_utf8          (id "c3")
 *                   │      └─ length_prefix ── unknown<beam:coder:pickled:v1>
 *                   └─ global_window
 *
 * Building validates what later walks rely on, so they need not re-check: the component count
 * of every standard kind, the window coder slot of windowed values and timers, payloads that
 * carry structure (a row coder's Schema, a param_windowed_value's fixed header), a bounded tree
 * depth, and the absence of cycles (a coder that contains itself would make every walk loop).
 * Unknown URNs are kept as SD_CODER_UNKNOWN nodes: the runner cannot find their boundaries
 * unless a length_prefix wraps them, and the flags `known` / `skippable`, computed bottom-up
 * once here, tell callers which operations will succeed.
 *
 * Nodes are reference counted so that a component id used by several coders is built once and
 * shared; the count uses atomic builtins because trees are read by bundle threads. Trees are
 * immutable after building, which is what makes sharing safe.
 */
#include "runner/coder/coder.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/map.h"
#include "runner/coder/coder_int.h"
#include "runner/coder/schema.h"
#include "runner/urns/urns.h"

/* ------------------------------------------------------------------------------------------ */
/* Kind table                                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef struct kind_info {
    const char *urn;
    const char *name;
    int n_components; /* -1 = any */
    bool wire;        /* the WIRE column */
} kind_info;

static const kind_info KINDS[SD_CODER_KIND_COUNT] = {
#define KIND_ROW(KIND, URN, NAME, N, WIRE) [SD_CODER_##KIND] = { URN, NAME, N, WIRE },
    SD_CODER_KINDS(KIND_ROW)
#undef KIND_ROW
        [SD_CODER_UNKNOWN] = { "", "unknown", -1, false },
};

static bool kind_valid(sd_coder_kind kind)
{
    return (int)kind >= 0 && (int)kind < SD_CODER_KIND_COUNT;
}

const char *sd_coder_kind_urn(sd_coder_kind kind)
{
    return kind_valid(kind) ? KINDS[kind].urn : "";
}

const char *sd_coder_kind_name(sd_coder_kind kind)
{
    return kind_valid(kind) ? KINDS[kind].name : "invalid";
}

int sd_coder_kind_components(sd_coder_kind kind)
{
    return kind_valid(kind) ? KINDS[kind].n_components : -1;
}

bool sd_coder_kind_wire(sd_coder_kind kind)
{
    return kind_valid(kind) && KINDS[kind].wire;
}

sd_coder_kind sd_coder_kind_from_urn(const char *urn)
{
    if (urn == NULL) {
        return SD_CODER_UNKNOWN;
    }
    for (int k = 0; k < (int)SD_CODER_UNKNOWN; k++) {
        if (strcmp(KINDS[k].urn, urn) == 0) {
            return (sd_coder_kind)k;
        }
    }
    return SD_CODER_UNKNOWN;
}

bool sd_coder_urn_is_standard(const char *urn)
{
    return sd_coder_kind_from_urn(urn) != SD_CODER_UNKNOWN;
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

sd_status sd__coder_fail(sd_err *err, const sd_coder *c, sd_status code, const char *fmt, ...)
{
    if (err == NULL || err->code != SD_OK) {
        return code;
    }
    char msg[SD_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c != NULL && c->id != NULL) {
        return sd_err_set(err, code, "coder %s (%s): %s", c->id, c->urn, msg);
    }
    return sd_err_set(err, code, "coder %s: %s", c != NULL ? c->urn : "(null)", msg);
}

sd_status sd__coder_opaque_field(sd_err *err, const sd_coder *c, const sd_field_type *t)
{
    return sd__coder_fail(err, c, SD_EUNIMPL,
                          "a field of logical type %s, which has no representation: only its "
                          "SDK can read it",
                          t->logical_urn != NULL ? t->logical_urn : "(unnamed)");
}

static sd_status
fail_named(sd_err *err, const char *id, const char *urn, sd_status code, const char *fmt, ...)
    SD_PRINTF(5, 6);

static sd_status
fail_named(sd_err *err, const char *id, const char *urn, sd_status code, const char *fmt, ...)
{
    if (err == NULL || err->code != SD_OK) {
        return code;
    }
    char msg[SD_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (id != NULL) {
        return sd_err_set(err, code, "coder %s (%s): %s", id, urn, msg);
    }
    return sd_err_set(err, code, "coder %s: %s", urn, msg);
}

/* ------------------------------------------------------------------------------------------ */
/* Nodes                                                                                      */
/* ------------------------------------------------------------------------------------------ */

sd_coder *sd_coder_ref(sd_coder *c)
{
    if (c != NULL) {
        __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    }
    return c;
}

static void param_destroy(struct sd_wv_header *h)
{
    if (h != NULL) {
        sd_wv_header_deinit(h);
        sd_free(h);
    }
}

void sd_coder_destroy(sd_coder *c)
{
    /* Iterative over the first component only would complicate things; trees are shallow
     * (SD_CODER_MAX_DEPTH), so plain recursion is bounded. */
    if (c == NULL) {
        return;
    }
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    for (size_t i = 0; i < c->n_components; i++) {
        sd_coder_destroy(c->components[i]);
    }
    sd_free(c->components);
    sd_free(c->urn);
    sd_free(c->id);
    sd_free((void *)c->payload.ptr);
    sd_schema_destroy(c->schema);
    param_destroy(c->param);
    sd_free(c);
}

const sd_coder *sd_coder_component(const sd_coder *c, size_t i)
{
    if (c == NULL || i >= c->n_components) {
        return NULL;
    }
    return c->components[i];
}

bool sd_coder_is_known(const sd_coder *c)
{
    return c != NULL && c->known;
}

bool sd_coder_is_skippable(const sd_coder *c)
{
    return c != NULL && c->skippable;
}

static bool is_window_kind(sd_coder_kind k)
{
    return k == SD_CODER_GLOBAL_WINDOW || k == SD_CODER_INTERVAL_WINDOW ||
           k == SD_CODER_CUSTOM_WINDOW;
}

/* Compute known/skippable from the components (all already final). */
static void compute_flags(sd_coder *c)
{
    bool all_known = true;
    bool all_skippable = true;
    c->depth = 1;
    for (size_t i = 0; i < c->n_components; i++) {
        if (c->components[i]->depth + 1 > c->depth) {
            c->depth = c->components[i]->depth + 1;
        }
        all_known = all_known && c->components[i]->known;
        all_skippable = all_skippable && c->components[i]->skippable;
    }
    switch (c->kind) {
    case SD_CODER_UNKNOWN:
        c->known = false;
        c->skippable = false;
        break;
    case SD_CODER_LENGTH_PREFIX:
        c->known = all_known;
        c->skippable = true;
        break;
    default:
        c->known = all_known;
        c->skippable = all_skippable;
        break;
    }
}

/*
 * The fixed encoded size of c from its components' (already computed), or -1. Computed once
 * per node: components are shared (a client's KV(k, k) with k = KV(j, j) ... is a DAG), so a
 * recursive walk took 2^depth steps, and the sum of a 64-deep chain overflows a long, which is
 * then taken as "not fixed".
 */
static long fixed_size_of(const sd_coder *c)
{
    switch (c->kind) {
    case SD_CODER_GLOBAL_WINDOW:
        return 0;
    case SD_CODER_BOOL:
        return 1;
    case SD_CODER_DOUBLE:
        return 8;
    case SD_CODER_KV: {
        long a = c->components[0]->fixed_size;
        long b = c->components[1]->fixed_size;
        return a < 0 || b < 0 || a > LONG_MAX - b ? -1 : a + b;
    }
    default:
        return -1;
    }
}

long sd__coder_fixed_size(const sd_coder *c)
{
    return c->fixed_size;
}

/*
 * Check the component count and slot kinds of a standard coder, then parse its payload.
 * On success c is complete; on failure the caller destroys it.
 */
static sd_status finish_node(sd_coder *c, sd_err *err)
{
    int want = KINDS[c->kind].n_components;
    if (want >= 0 && (size_t)want != c->n_components) {
        return sd__coder_fail(err, c, SD_EPROTO, "expected %d component%s, got %zu", want,
                              want == 1 ? "" : "s", c->n_components);
    }
    if (c->kind == SD_CODER_WINDOWED_VALUE || c->kind == SD_CODER_PARAM_WINDOWED_VALUE ||
        c->kind == SD_CODER_TIMER) {
        const sd_coder *w = c->components[1];
        if (!is_window_kind(w->kind) && w->kind != SD_CODER_UNKNOWN) {
            return sd__coder_fail(err, c, SD_EPROTO,
                                  "component 1 must be a window coder, got %s (%s)",
                                  sd_coder_kind_name(w->kind), w->urn);
        }
    }
    compute_flags(c);
    c->fixed_size = fixed_size_of(c);
    if (c->depth > SD_CODER_MAX_DEPTH) {
        return sd__coder_fail(err, c, SD_EPROTO, "nested deeper than %d levels",
                              SD_CODER_MAX_DEPTH);
    }
    if (c->kind == SD_CODER_ROW) {
        sd_err sub;
        sd_err_clear(&sub);
        sd_status st = sd_schema_parse(c->payload, &c->schema, &sub);
        if (st != SD_OK) {
            return sd__coder_fail(err, c, st, "bad payload: %s", sd_err_msg(&sub));
        }
    }
    if (c->kind == SD_CODER_PARAM_WINDOWED_VALUE) {
        sd_status st = sd__coder_param_parse(c, err);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* A fresh node with copies of urn/id/payload and room for n components; NULL on OOM. */
static sd_coder *node_alloc(const char *id, const char *urn, sd_bytes payload, size_t n)
{
    sd_coder *c = sd_calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->refs = 1;
    c->kind = sd_coder_kind_from_urn(urn);
    c->urn = sd_strdup(urn);
    c->id = id != NULL ? sd_strdup(id) : NULL;
    if (payload.len > 0) {
        c->payload.ptr = sd_memdup(payload.ptr, payload.len);
        c->payload.len = payload.len;
    }
    if (n > 0) {
        c->components = sd_calloc(n, sizeof(sd_coder *));
    }
    if (c->urn == NULL || (id != NULL && c->id == NULL) ||
        (payload.len > 0 && c->payload.ptr == NULL) || (n > 0 && c->components == NULL)) {
        c->payload.len = 0;
        sd_coder_destroy(c);
        return NULL;
    }
    return c;
}

sd_status sd_coder_from_urn(const char *urn,
                            sd_bytes payload,
                            sd_coder *const *components,
                            size_t n_components,
                            sd_coder **out,
                            sd_err *err)
{
    *out = NULL;
    if (urn == NULL) {
        return sd_err_set(err, SD_EINVAL, "coder: NULL URN");
    }
    for (size_t i = 0; i < n_components; i++) {
        if (components[i] == NULL) {
            return fail_named(err, NULL, urn, SD_EINVAL, "component %zu is NULL", i);
        }
        if (components[i]->depth >= SD_CODER_MAX_DEPTH) {
            return fail_named(err, NULL, urn, SD_EPROTO, "nested deeper than %d levels",
                              SD_CODER_MAX_DEPTH);
        }
    }
    sd_coder *c = node_alloc(NULL, urn, payload, n_components);
    if (c == NULL) {
        return fail_named(err, NULL, urn, SD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n_components; i++) {
        c->components[i] = sd_coder_ref(components[i]);
        c->n_components++;
    }
    sd_status st = finish_node(c, err);
    if (st != SD_OK) {
        sd_coder_destroy(c);
        return st;
    }
    *out = c;
    return SD_OK;
}

sd_status sd_coder_create(sd_coder **out, sd_err *err, sd_coder_kind kind, ...)
{
    *out = NULL;
    if (!kind_valid(kind) || kind == SD_CODER_UNKNOWN || kind == SD_CODER_ROW ||
        kind == SD_CODER_PARAM_WINDOWED_VALUE) {
        return sd_err_set(err, SD_EINVAL,
                          "sd_coder_create: kind %s needs a URN or payload; use sd_coder_from_urn",
                          sd_coder_kind_name(kind));
    }
    sd_coder *comps[4];
    size_t n = 0;
    va_list ap;
    va_start(ap, kind);
    for (;;) {
        sd_coder *comp = va_arg(ap, sd_coder *);
        if (comp == NULL) {
            break;
        }
        if (n == 4) {
            va_end(ap);
            return sd_err_set(err, SD_EINVAL, "coder %s: too many components", KINDS[kind].urn);
        }
        comps[n++] = comp;
    }
    va_end(ap);
    return sd_coder_from_urn(KINDS[kind].urn, SD_BYTES_NULL, comps, n, out, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Building from a pipeline's coder table                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Marker stored in the memo map while a coder's components are being built. */
static char IN_PROGRESS;

typedef struct builder {
    const sd_coder_table *table;
    sd_map memo; /* id -> sd_coder* (borrowed reference held by `owned`) or &IN_PROGRESS */
    sd_coder **owned;
    size_t n_owned;
    size_t cap_owned;
} builder;

static sd_status remember(builder *b, sd_coder *c)
{
    if (b->n_owned == b->cap_owned) {
        size_t ncap = b->cap_owned ? b->cap_owned * 2 : 16;
        sd_coder **no = sd_realloc(b->owned, ncap * sizeof(*no));
        if (no == NULL) {
            return SD_ENOMEM;
        }
        b->owned = no;
        b->cap_owned = ncap;
    }
    b->owned[b->n_owned++] = c;
    return SD_OK;
}

static sd_status build_rec(builder *b, const char *id, int depth, sd_coder **out, sd_err *err)
{
    void *memo = sd_map_get_str(&b->memo, id);
    const char *urn = NULL;
    sd_bytes payload = SD_BYTES_NULL;
    const char *const *comp_ids = NULL;
    size_t n_comps = 0;

    if (memo == &IN_PROGRESS) {
        bool found = b->table->lookup(b->table->ctx, id, &urn, &payload, &comp_ids, &n_comps);
        return fail_named(err, id, found && urn ? urn : "?", SD_EPROTO,
                          "cycle: the coder contains itself");
    }
    if (memo != NULL) {
        *out = memo;
        return SD_OK;
    }
    if (!b->table->lookup(b->table->ctx, id, &urn, &payload, &comp_ids, &n_comps)) {
        return sd_err_set(err, SD_ENOTFOUND, "coder %s: not found in the pipeline's coders", id);
    }
    if (urn == NULL || urn[0] == '\0') {
        return sd_err_set(err, SD_EPROTO, "coder %s: empty URN", id);
    }
    if (depth >= SD_CODER_MAX_DEPTH) {
        return fail_named(err, id, urn, SD_EPROTO, "nested deeper than %d levels",
                          SD_CODER_MAX_DEPTH);
    }
    if (n_comps > 0 && comp_ids == NULL) {
        return fail_named(err, id, urn, SD_EINVAL, "lookup gave %zu components but no ids",
                          n_comps);
    }
    if (sd_map_put_str(&b->memo, id, &IN_PROGRESS) != SD_OK) {
        return fail_named(err, id, urn, SD_ENOMEM, "out of memory");
    }
    sd_coder *c = node_alloc(id, urn, payload, n_comps);
    if (c == NULL) {
        sd_map_remove(&b->memo, sd_bytes_str(id));
        return fail_named(err, id, urn, SD_ENOMEM, "out of memory");
    }
    sd_status st = SD_OK;
    for (size_t i = 0; i < n_comps && st == SD_OK; i++) {
        sd_coder *comp = NULL;
        if (comp_ids[i] == NULL) {
            st = fail_named(err, id, urn, SD_EPROTO, "component %zu has no id", i);
            break;
        }
        st = build_rec(b, comp_ids[i], depth + 1, &comp, err);
        if (st == SD_OK) {
            c->components[c->n_components++] = sd_coder_ref(comp);
        }
    }
    if (st == SD_OK) {
        st = finish_node(c, err);
    }
    if (st == SD_OK && (st = remember(b, c)) != SD_OK) {
        st = fail_named(err, id, urn, SD_ENOMEM, "out of memory");
    }
    if (st != SD_OK) {
        sd_map_remove(&b->memo, sd_bytes_str(id));
        sd_coder_destroy(c);
        return st;
    }
    /* The memo entry already exists (IN_PROGRESS), so replacing it cannot allocate. */
    if (sd_map_put_str(&b->memo, id, c) != SD_OK) {
        return fail_named(err, id, urn, SD_EINTERNAL, "memo update failed");
    }
    *out = c;
    return SD_OK;
}

sd_status
sd_coder_build(const sd_coder_table *table, const char *coder_id, sd_coder **out, sd_err *err)
{
    *out = NULL;
    if (table == NULL || table->lookup == NULL || coder_id == NULL) {
        return sd_err_set(err, SD_EINVAL, "sd_coder_build: table, lookup and coder_id required");
    }
    builder b = { .table = table };
    sd_map_init(&b.memo, NULL);
    sd_coder *root = NULL;
    sd_status st = build_rec(&b, coder_id, 0, &root, err);
    if (st == SD_OK) {
        *out = sd_coder_ref(root);
    } else if (st != SD_ENOMEM && err != NULL) {
        /* Name the root when the failure is further down, once (not per level). */
        char own[256];
        snprintf(own, sizeof(own), "coder %s ", coder_id);
        if (strncmp(err->msg, own, strlen(own)) != 0) {
            sd_err_prefix(err, "building coder %s: ", coder_id);
        }
    }
    /* Each built node was created with one reference held by `owned`; drop them all. The
     * root survives through the extra reference taken above, and shared components through
     * their parents. */
    for (size_t i = 0; i < b.n_owned; i++) {
        sd_coder_destroy(b.owned[i]);
    }
    sd_free(b.owned);
    sd_map_deinit(&b.memo);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Description and equality                                                                   */
/* ------------------------------------------------------------------------------------------ */

sd_status sd_coder_describe(const sd_coder *c, sd_buf *out)
{
    sd_status st;
    if (c == NULL) {
        return sd_buf_append_str(out, "(null)");
    }
    if (c->kind == SD_CODER_UNKNOWN) {
        st = sd_buf_printf(out, "unknown<%s>", c->urn);
    } else {
        st = sd_buf_append_str(out, KINDS[c->kind].name);
    }
    if (st != SD_OK || c->n_components == 0) {
        return st;
    }
    if ((st = sd_buf_append_byte(out, '(')) != SD_OK) {
        return st;
    }
    for (size_t i = 0; i < c->n_components; i++) {
        if (i > 0 && (st = sd_buf_append_str(out, ", ")) != SD_OK) {
            return st;
        }
        if ((st = sd_coder_describe(c->components[i], out)) != SD_OK) {
            return st;
        }
    }
    return sd_buf_append_byte(out, ')');
}

bool sd_coder_equal(const sd_coder *a, const sd_coder *b)
{
    if (a == b) {
        return true;
    }
    if (a == NULL || b == NULL || a->kind != b->kind || strcmp(a->urn, b->urn) != 0 ||
        !sd_bytes_equal(a->payload, b->payload) || a->n_components != b->n_components) {
        return false;
    }
    for (size_t i = 0; i < a->n_components; i++) {
        if (!sd_coder_equal(a->components[i], b->components[i])) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* Invariant checker (tests)                                                                  */
/* ------------------------------------------------------------------------------------------ */

static const char *check_rec(const sd_coder *c, int budget)
{
    if (budget <= 0) {
        return "tree deeper than SD_CODER_MAX_DEPTH";
    }
    if (c->urn == NULL) {
        return "node without a URN";
    }
    if (__atomic_load_n(&c->refs, __ATOMIC_RELAXED) <= 0) {
        return "node with a non-positive reference count";
    }
    if (sd_coder_kind_from_urn(c->urn) != c->kind) {
        return "kind does not match the URN";
    }
    int want = KINDS[c->kind].n_components;
    if (want >= 0 && (size_t)want != c->n_components) {
        return "component count does not match the kind";
    }
    if ((c->payload.len == 0) != (c->payload.ptr == NULL)) {
        return "payload pointer and length disagree";
    }
    if ((c->kind == SD_CODER_ROW) != (c->schema != NULL)) {
        return "row schema present on a non-row node or missing on a row node";
    }
    if ((c->kind == SD_CODER_PARAM_WINDOWED_VALUE) != (c->param != NULL)) {
        return "param header present on the wrong node";
    }
    int depth = 1;
    bool known = c->kind != SD_CODER_UNKNOWN;
    bool skippable = c->kind != SD_CODER_UNKNOWN;
    for (size_t i = 0; i < c->n_components; i++) {
        const sd_coder *comp = c->components[i];
        if (comp == NULL) {
            return "NULL component";
        }
        const char *why = check_rec(comp, budget - 1);
        if (why != NULL) {
            return why;
        }
        depth = comp->depth + 1 > depth ? comp->depth + 1 : depth;
        known = known && comp->known;
        skippable = skippable && comp->skippable;
    }
    if (c->kind == SD_CODER_LENGTH_PREFIX) {
        skippable = true;
    }
    if (depth != c->depth) {
        return "stored depth is wrong";
    }
    if (fixed_size_of(c) != c->fixed_size) {
        return "stored fixed size is wrong";
    }
    if (known != c->known) {
        return "known flag disagrees with the components";
    }
    if (skippable != c->skippable) {
        return "skippable flag disagrees with the components";
    }
    if (c->known && !c->skippable) {
        return "a known coder must be skippable";
    }
    return NULL;
}

const char *sd__coder_check(const sd_coder *c)
{
    if (c == NULL) {
        return "NULL coder";
    }
    return check_rec(c, SD_CODER_MAX_DEPTH);
}
