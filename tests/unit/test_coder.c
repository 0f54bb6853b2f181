/*
 * Sundial tests: coder trees, skipping, windows, panes, windowed values, timers, iterables,
 * rows and the value model — edge cases, garbage and allocation failure.
 *
 * Coders are written in a compact notation, e.g. "wv(kv(str,lp(unk)),iw)", and built with
 * sd_coder_from_urn; pipeline-shaped graphs go through sd_coder_build with a small table.
 * Every built tree is run through sd__coder_check. Garbage tests truncate valid encodings at
 * every byte offset (each prefix must fail with SD_EPROTO and leave the reader where it was)
 * and feed deterministic pseudo-random bytes to every entry point; under ASan/UBSan these
 * prove the decoders never read out of bounds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/coder/coder.h"
#include "runner/coder/coder_int.h"
#include "runner/coder/schema.h"
#include "runner/coder/value.h"

#define UNKNOWN_URN "beam:coder:pickled_python:v1"

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static const struct {
    const char *name;
    const char *urn;
} SPEC_NAMES[] = {
    { "bytes", "beam:coder:bytes:v1" },
    { "str", "beam:coder:string_utf8:v1" },
    { "varint", "beam:coder:varint:v1" },
    { "double", "beam:coder:double:v1" },
    { "bool", "beam:coder:bool:v1" },
    { "gw", "beam:coder:global_window:v1" },
    { "iw", "beam:coder:interval_window:v1" },
    { "cw", "beam:coder:custom_window:v1" },
    { "kv", "beam:coder:kv:v1" },
    { "iter", "beam:coder:iterable:v1" },
    { "sbi", "beam:coder:state_backed_iterable:v1" },
    { "null", "beam:coder:nullable:v1" },
    { "lp", "beam:coder:length_prefix:v1" },
    { "wv", "beam:coder:windowed_value:v1" },
    { "timer", "beam:coder:timer:v1" },
    { "sk", "beam:coder:sharded_key:v1" },
    { "unk", UNKNOWN_URN },
};

/* Parse the compact notation; returns NULL (and fails the test) on a bad spec. */
static sd_coder *mk_rec(const char **s)
{
    size_t n = 0;
    while ((*s)[n] >= 'a' && (*s)[n] <= 'z') {
        n++;
    }
    const char *urn = NULL;
    for (size_t i = 0; i < sizeof(SPEC_NAMES) / sizeof(SPEC_NAMES[0]); i++) {
        if (strlen(SPEC_NAMES[i].name) == n && strncmp(SPEC_NAMES[i].name, *s, n) == 0) {
            urn = SPEC_NAMES[i].urn;
        }
    }
    if (urn == NULL) {
        fail_msg("bad coder spec at \"%s\"", *s);
    }
    *s += n;
    sd_coder *comps[4];
    size_t nc = 0;
    if (**s == '(') {
        (*s)++;
        for (;;) {
            assert_true(nc < 4);
            comps[nc++] = mk_rec(s);
            if (**s == ',') {
                (*s)++;
                continue;
            }
            assert_int_equal(**s, ')');
            (*s)++;
            break;
        }
    }
    sd_coder *c = NULL;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_coder_from_urn(urn, SD_BYTES_NULL, comps, nc, &c, &err);
    for (size_t i = 0; i < nc; i++) {
        sd_coder_destroy(comps[i]);
    }
    if (st != SD_OK) {
        fail_msg("building %s: %s", urn, sd_err_msg(&err));
    }
    return c;
}

static sd_coder *mk(const char *spec)
{
    const char *s = spec;
    sd_coder *c = mk_rec(&s);
    assert_int_equal(*s, '\0');
    const char *why = sd__coder_check(c);
    if (why != NULL) {
        fail_msg("%s: %s", spec, why);
    }
    return c;
}

/* "03 61 62 63" -> bytes (into buf). */
static size_t hex(const char *h, uint8_t *buf, size_t cap)
{
    size_t n = 0;
    while (*h != '\0') {
        if (*h == ' ') {
            h++;
            continue;
        }
        unsigned v;
        assert_int_equal(sscanf(h, "%2x", &v), 1);
        assert_true(n < cap);
        buf[n++] = (uint8_t)v;
        h += 2;
    }
    return n;
}

static bool contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Kinds and URNs                                                                             */
/* ------------------------------------------------------------------------------------------ */

static void test_kinds(void **state)
{
    (void)state;
    for (int k = 0; k < (int)SD_CODER_UNKNOWN; k++) {
        const char *urn = sd_coder_kind_urn((sd_coder_kind)k);
        assert_true(strncmp(urn, "beam:coder:", 11) == 0);
        assert_int_equal(sd_coder_kind_from_urn(urn), k);
        assert_true(sd_coder_urn_is_standard(urn));
    }
    assert_false(sd_coder_urn_is_standard(UNKNOWN_URN));
    assert_false(sd_coder_urn_is_standard(""));
    assert_false(sd_coder_urn_is_standard(NULL));
    assert_int_equal(sd_coder_kind_from_urn("beam:coder:kv:v2"), SD_CODER_UNKNOWN);
    assert_string_equal(sd_coder_kind_name(SD_CODER_WINDOWED_VALUE), "windowed_value");
    assert_string_equal(sd_coder_kind_urn(SD_CODER_UNKNOWN), "");
}

/*
 * A client can share components: KV(k, k) with k = KV(j, j) and so on is 63 nodes but 2^63
 * bytes of fixed size. The fixed size must be computed once per node (a recursive walk took
 * 2^depth steps, so skipping an iterable of such KVs hung) and must not overflow: the 64-deep
 * chain is "not fixed" (-1) rather than a signed overflow.
 */
static void test_shared_kv_chain(void **state)
{
    (void)state;
    sd_err err;
    sd_err_clear(&err);
    sd_coder *chain[64] = { NULL }; /* chain[k]: depth k + 1, fixed size 2^k */
    assert_int_equal(sd_coder_new(&chain[0], &err, SD_CODER_BOOL, NULL), SD_OK);
    for (int k = 1; k < 64; k++) {
        assert_int_equal(
            sd_coder_new(&chain[k], &err, SD_CODER_KV, chain[k - 1], chain[k - 1], NULL), SD_OK);
    }
    assert_true(sd__coder_fixed_size(chain[0]) == 1);
    assert_true(sd__coder_fixed_size(chain[62]) == (long)1 << 62);
    assert_true(sd__coder_fixed_size(chain[63]) == -1);

    /* An empty iterable of the 2^62-byte element skips at once; one element is truncated. */
    sd_coder *it = NULL;
    assert_int_equal(sd_coder_new(&it, &err, SD_CODER_ITERABLE, chain[62], NULL), SD_OK);
    static const uint8_t empty[] = { 0, 0, 0, 0 };
    static const uint8_t one[] = { 0, 0, 0, 1, 1, 0, 1 };
    sd_reader r = sd_reader_make(sd_bytes_make(empty, sizeof(empty)));
    assert_int_equal(sd_coder_skip(it, &r, true, &err), SD_OK);
    assert_true(sd_reader_done(&r));
    r = sd_reader_make(sd_bytes_make(one, sizeof(one)));
    assert_int_equal(sd_coder_skip(it, &r, true, &err), SD_EPROTO);
    sd_coder_destroy(it);
    for (int k = 0; k < 64; k++) {
        sd_coder_destroy(chain[k]);
    }
}

static void test_new_and_flags(void **state)
{
    (void)state;
    sd_err err;
    sd_coder *b = NULL, *v = NULL, *kv = NULL, *bad = NULL;
    sd_err_clear(&err);
    assert_int_equal(sd_coder_new(&b, &err, SD_CODER_BYTES, NULL), SD_OK);
    assert_int_equal(sd_coder_new(&v, &err, SD_CODER_VARINT, NULL), SD_OK);
    assert_int_equal(sd_coder_new(&kv, &err, SD_CODER_KV, b, v, NULL), SD_OK);
    assert_null(sd__coder_check(kv));
    assert_ptr_equal(sd_coder_component(kv, 0), b);
    assert_null(sd_coder_component(kv, 2));
    assert_int_equal(sd_coder_new(&bad, &err, SD_CODER_KV, b, NULL), SD_EPROTO);
    assert_string_equal(sd_err_msg(&err), "coder beam:coder:kv:v1: expected 2 components, got 1");
    assert_null(bad);
    sd_err_clear(&err);
    assert_int_equal(sd_coder_new(&bad, &err, SD_CODER_ROW, NULL), SD_EINVAL);
    sd_coder_destroy(b);
    sd_coder_destroy(v);
    sd_coder_destroy(kv);

    static const struct {
        const char *spec;
        bool known;
        bool skippable;
        const char *describe;
    } rows[] = {
        { "bytes", true, true, "bytes" },
        { "unk", false, false, "unknown<" UNKNOWN_URN ">" },
        { "lp(unk)", false, true, "length_prefix(unknown<" UNKNOWN_URN ">)" },
        { "kv(str,lp(unk))", false, true,
          "kv(string_utf8, length_prefix(unknown<" UNKNOWN_URN ">))" },
        { "kv(unk,varint)", false, false, "kv(unknown<" UNKNOWN_URN ">, varint)" },
        { "wv(kv(bytes,iter(varint)),iw)", true, true,
          "windowed_value(kv(bytes, iterable(varint)), interval_window)" },
        { "wv(varint,unk)", false, false, "windowed_value(varint, unknown<" UNKNOWN_URN ">)" },
        { "timer(str,gw)", true, true, "timer(string_utf8, global_window)" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sd_coder *c = mk(rows[i].spec);
        sd_buf d = { 0 };
        assert_int_equal(sd_coder_describe(c, &d), SD_OK);
        assert_int_equal(sd_buf_append_byte(&d, 0), SD_OK);
        assert_string_equal((char *)d.data, rows[i].describe);
        if (sd_coder_is_known(c) != rows[i].known ||
            sd_coder_is_skippable(c) != rows[i].skippable) {
            fail_msg("%s: known/skippable flags wrong", rows[i].spec);
        }
        sd_coder *again = mk(rows[i].spec);
        assert_true(sd_coder_equal(c, again));
        sd_buf_deinit(&d);
        sd_coder_destroy(again);
        sd_coder_destroy(c);
    }
    sd_coder *a = mk("kv(bytes,varint)"), *b2 = mk("kv(bytes,bool)");
    assert_false(sd_coder_equal(a, b2));
    sd_coder_destroy(a);
    sd_coder_destroy(b2);
}

/* ------------------------------------------------------------------------------------------ */
/* Building from a pipeline table                                                             */
/* ------------------------------------------------------------------------------------------ */

typedef struct tentry {
    const char *id;
    const char *urn;
    const char *payload_hex;
    const char *comps[3];
} tentry;

typedef struct ttable {
    const tentry *entries;
    size_t n;
    uint8_t payload[256];
    const char *chain_ids[80]; /* for the deep-chain case */
} ttable;

static bool tlookup(void *ctx,
                    const char *id,
                    const char **urn,
                    sd_bytes *payload,
                    const char *const **component_ids,
                    size_t *n_components)
{
    ttable *t = ctx;
    for (size_t i = 0; i < t->n; i++) {
        const tentry *e = &t->entries[i];
        if (strcmp(e->id, id) == 0) {
            *urn = e->urn;
            *payload = SD_BYTES_NULL;
            if (e->payload_hex != NULL) {
                size_t n = hex(e->payload_hex, t->payload, sizeof(t->payload));
                *payload = sd_bytes_make(t->payload, n);
            }
            size_t n = 0;
            while (n < 3 && e->comps[n] != NULL) {
                n++;
            }
            *component_ids = e->comps;
            *n_components = n;
            return true;
        }
    }
    return false;
}

#define KV     "beam:coder:kv:v1"
#define WV     "beam:coder:windowed_value:v1"
#define STR    "beam:coder:string_utf8:v1"
#define LP     "beam:coder:length_prefix:v1"
#define GW     "beam:coder:global_window:v1"
#define IW     "beam:coder:interval_window:v1"
#define VARINT "beam:coder:varint:v1"
#define ROW    "beam:coder:row:v1"
#define PWV    "beam:coder:param_windowed_value:v1"

/* A schema: str: string, i32: int32, f64: double, arr: array<string> (from the vectors). */
#define ROW_SCHEMA_HEX                                                                           \
    "0a 09 0a 03 73 74 72 1a 02 10 07 0a 09 0a 03 69 33 32 1a 02 10 03 0a 09 0a 03 66 36 34 1a " \
    "02 10 06 0a 0d 0a 03 61 72 72 1a 06 1a 04 0a 02 10 07 12 02 69 64"
/* t = 1000, window [10, 20), pane 30/40, empty element. */
#define PWV_PAYLOAD_HEX "80 00 00 00 00 00 03 e8 00 00 00 01 80 00 00 00 00 00 00 14 0a 26 1e 28 00"

static const tentry GOOD[] = {
    { "c1", WV, NULL, { "c2", "c3" } },
    { "c2", KV, NULL, { "c4", "c5" } },
    { "c3", GW, NULL, { NULL } },
    { "c4", STR, NULL, { NULL } },
    { "c5", LP, NULL, { "c6" } },
    { "c6", UNKNOWN_URN, NULL, { NULL } },
    { "c7", KV, NULL, { "c4", "c4" } },
    { "c8", ROW, ROW_SCHEMA_HEX, { NULL } },
    { "c9", PWV, PWV_PAYLOAD_HEX, { "c8", "c10" } },
    { "c10", IW, NULL, { NULL } },
    { "c11", KV, NULL, { "c7", "c9" } },
};

static void test_build_ok(void **state)
{
    (void)state;
    ttable t = { .entries = GOOD, .n = sizeof(GOOD) / sizeof(GOOD[0]) };
    sd_coder_table table = { .lookup = tlookup, .ctx = &t };
    sd_coder *c = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_coder_build(&table, "c1", &c, &err), SD_OK);
    assert_null(sd__coder_check(c));
    assert_string_equal(c->id, "c1");
    assert_int_equal(c->kind, SD_CODER_WINDOWED_VALUE);
    assert_false(sd_coder_is_known(c));
    assert_true(sd_coder_is_skippable(c));
    assert_int_equal(c->components[0]->components[1]->components[0]->kind, SD_CODER_UNKNOWN);
    sd_coder_destroy(c);

    /* A component id used twice is one shared node. */
    assert_int_equal(sd_coder_build(&table, "c7", &c, &err), SD_OK);
    assert_ptr_equal(c->components[0], c->components[1]);
    sd_coder_destroy(c);

    /* Rows and param windowed values parse their payloads at build time. */
    assert_int_equal(sd_coder_build(&table, "c11", &c, &err), SD_OK);
    assert_null(sd__coder_check(c));
    const sd_coder *pwv = c->components[1];
    assert_int_equal(pwv->kind, SD_CODER_PARAM_WINDOWED_VALUE);
    assert_int_equal(pwv->param->ts, 1000);
    assert_int_equal(pwv->param->windows.n, 1);
    assert_int_equal(sd_windows_items(&pwv->param->windows)[0].start, 10);
    assert_int_equal(sd_windows_items(&pwv->param->windows)[0].end, 20);
    assert_int_equal(pwv->param->pane.index, 30);
    assert_int_equal(pwv->param->pane.nonspec_index, 40);
    const sd_schema *s = pwv->components[0]->schema;
    assert_non_null(s);
    assert_int_equal(s->n_fields, 4);
    assert_string_equal(s->fields[3].name, "arr");
    assert_int_equal(s->fields[3].type->kind, SD_FIELD_ARRAY);
    assert_int_equal(s->fields[3].type->element->atomic, SD_ATOMIC_STRING);
    assert_string_equal(s->id, "id");
    sd_coder_destroy(c);
}

static void test_build_errors(void **state)
{
    (void)state;
    static const tentry missing[] = { { "c1", KV, NULL, { "c2", "cX" } },
                                      { "c2", STR, NULL, { NULL } } };
    static const tentry cycle[] = { { "c1", KV, NULL, { "c2", "c3" } },
                                    { "c2", STR, NULL, { NULL } },
                                    { "c3", LP, NULL, { "c1" } } };
    static const tentry self[] = { { "c1", LP, NULL, { "c1" } } };
    static const tentry count[] = { { "c1", WV, NULL, { "c5", "c2" } },
                                    { "c2", GW, NULL, { NULL } },
                                    { "c5", KV, NULL, { "c2" } } };
    static const tentry scalar[] = { { "c1", VARINT, NULL, { "c2" } },
                                     { "c2", VARINT, NULL, { NULL } } };
    static const tentry window[] = { { "c1", WV, NULL, { "c2", "c2" } },
                                     { "c2", STR, NULL, { NULL } } };
    static const tentry row[] = { { "c1", ROW, "0a 05 0a 03 73", { NULL } } };
    static const tentry row_notype[] = { { "c1", ROW, "0a 05 0a 03 73 74 72", { NULL } } };
    static const tentry pwv[] = { { "c1", PWV, "80 00 00", { "c2", "c3" } },
                                  { "c2", VARINT, NULL, { NULL } },
                                  { "c3", GW, NULL, { NULL } } };
    static const tentry empty_urn[] = { { "c1", "", NULL, { NULL } } };

    static const struct {
        const char *name;
        const tentry *entries;
        size_t n;
        sd_status want;
        const char *msg;
    } rows[] = {
        { "missing", missing, 2, SD_ENOTFOUND, "coder cX: not found" },
        { "cycle", cycle, 3, SD_EPROTO, "cycle" },
        { "self", self, 1, SD_EPROTO, "cycle" },
        { "count", count, 3, SD_EPROTO,
          "coder c5 (beam:coder:kv:v1): expected 2 components, got 1" },
        { "scalar", scalar, 2, SD_EPROTO, "expected 0 components, got 1" },
        { "window", window, 2, SD_EPROTO, "component 1 must be a window coder" },
        { "row", row, 1, SD_EPROTO, "coder c1 (beam:coder:row:v1): bad payload" },
        { "row_notype", row_notype, 1, SD_EPROTO, "has no type" },
        { "pwv", pwv, 3, SD_EPROTO, "bad payload" },
        { "empty_urn", empty_urn, 1, SD_EPROTO, "empty URN" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        ttable t = { .entries = rows[i].entries, .n = rows[i].n };
        sd_coder_table table = { .lookup = tlookup, .ctx = &t };
        sd_coder *c = (sd_coder *)&t; /* must be reset to NULL */
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_coder_build(&table, "c1", &c, &err);
        if (st != rows[i].want || !contains(sd_err_msg(&err), rows[i].msg) || c != NULL) {
            fail_msg("%s: got %s \"%s\"", rows[i].name, sd_status_name(st), sd_err_msg(&err));
        }
    }

    /* A chain deeper than the limit. */
    tentry chain[SD_CODER_MAX_DEPTH + 2];
    static char ids[SD_CODER_MAX_DEPTH + 2][8];
    for (int i = 0; i < SD_CODER_MAX_DEPTH + 2; i++) {
        snprintf(ids[i], sizeof(ids[i]), "d%d", i);
    }
    for (int i = 0; i < SD_CODER_MAX_DEPTH + 2; i++) {
        chain[i] = (tentry){ .id = ids[i], .urn = i == SD_CODER_MAX_DEPTH + 1 ? VARINT : LP };
        chain[i].comps[0] = i == SD_CODER_MAX_DEPTH + 1 ? NULL : ids[i + 1];
    }
    ttable t = { .entries = chain, .n = SD_CODER_MAX_DEPTH + 2 };
    sd_coder_table table = { .lookup = tlookup, .ctx = &t };
    sd_coder *c = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_coder_build(&table, "d0", &c, &err), SD_EPROTO);
    if (!contains(sd_err_msg(&err), "deeper than")) {
        fail_msg("deep chain: %s", sd_err_msg(&err));
    }
    /* Just within the limit works. */
    sd_err_clear(&err);
    assert_int_equal(sd_coder_build(&table, "d3", &c, &err), SD_OK);
    assert_null(sd__coder_check(c));
    sd_coder_destroy(c);

    assert_int_equal(sd_coder_build(NULL, "c1", &c, NULL), SD_EINVAL);
}

static void test_build_oom(void **state)
{
    (void)state;
    ttable t = { .entries = GOOD, .n = sizeof(GOOD) / sizeof(GOOD[0]) };
    sd_coder_table table = { .lookup = tlookup, .ctx = &t };
    const char *roots[] = { "c1", "c11" };
    for (size_t r = 0; r < 2; r++) {
        int n;
        for (n = 1; n < 10000; n++) {
            sd_coder *c = NULL;
            sd_err err;
            sd_err_clear(&err);
            sd_alloc_fail_after(n, 1);
            sd_status st = sd_coder_build(&table, roots[r], &c, &err);
            sd_alloc_fail_after(0, 0);
            if (st == SD_OK) {
                assert_null(sd__coder_check(c));
                sd_coder_destroy(c);
                break;
            }
            if (st != SD_ENOMEM) {
                fail_msg("root %s, failure at allocation %d: %s %s", roots[r], n,
                         sd_status_name(st), sd_err_msg(&err));
            }
            assert_null(c);
        }
        assert_true(n > 3);
        assert_true(n < 10000);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Skipping                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void test_skip_table(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        const char *spec;
        const char *bytes;
        bool nested;
        sd_status want;
        size_t consumed;
    } rows[] = {
        { "bytes nested", "bytes", "03 61 62 63 ff", true, SD_OK, 4 },
        { "bytes outer takes all", "bytes", "03 61 62 63 ff", false, SD_OK, 5 },
        { "bytes nested short", "bytes", "04 61 62 63", true, SD_EPROTO, 0 },
        { "varint 10 bytes", "varint", "ff ff ff ff ff ff ff ff ff 01 07", true, SD_OK, 10 },
        { "varint 11 bytes", "varint", "ff ff ff ff ff ff ff ff ff 81 01", true, SD_EPROTO, 0 },
        { "double", "double", "3f b9 99 99 99 99 99 9a", true, SD_OK, 8 },
        { "kv outer value takes all", "kv(str,bytes)", "01 61 62 63", false, SD_OK, 4 },
        { "kv nested", "kv(str,bytes)", "01 61 01 62 63", true, SD_OK, 4 },
        { "iterable", "iter(varint)", "00 00 00 02 01 c8 01 09", true, SD_OK, 7 },
        { "iterable negative", "iter(varint)", "ff ff ff fe 00", true, SD_EPROTO, 0 },
        { "iterable too many", "iter(varint)", "00 00 01 00 01 02", true, SD_EPROTO, 0 },
        { "iterable blocks", "iter(bytes)", "ff ff ff ff 01 01 61 02 00 00 00 09", true, SD_OK,
          11 },
        { "iterable token refused", "iter(bytes)",
          "ff ff ff ff ff ff ff ff ff ff ff ff ff 01 01 74", true, SD_EPROTO, 0 },
        { "state token", "sbi(bytes)",
          "ff ff ff ff 01 01 61 ff ff ff ff ff ff ff ff ff 01 02 74 74", true, SD_OK, 20 },
        { "2^31-1 global windows are O(1)", "iter(gw)", "7f ff ff ff", true, SD_OK, 4 },
        { "fixed-size overflow", "iter(bool)", "7f ff ff ff 01", true, SD_EPROTO, 0 },
        { "nullable null", "null(varint)", "00 05", true, SD_OK, 1 },
        { "nullable value", "null(varint)", "01 05", true, SD_OK, 2 },
        { "nullable bad flag", "null(varint)", "02 05", true, SD_EPROTO, 0 },
        { "lp unknown", "lp(unk)", "02 aa bb cc", true, SD_OK, 3 },
        { "unknown refused", "unk", "02 aa bb", true, SD_EUNIMPL, 0 },
        { "kv unknown value outer", "kv(str,unk)", "01 61 62", false, SD_EUNIMPL, 0 },
        { "interval window", "iw", "80 00 01 52 9a a4 9b 68 80 dd db 01", true, SD_OK, 12 },
        { "custom window", "cw(bytes)", "80 00 00 00 00 00 00 05 02 61 62", true, SD_OK, 11 },
        { "wv global", "wv(varint,gw)", "80 00 01 52 9a a4 9b 68 00 00 00 01 0f 02", true, SD_OK,
          14 },
        { "wv bad pane form", "wv(varint,gw)", "80 00 01 52 9a a4 9b 68 00 00 00 01 3f 02", true,
          SD_EPROTO, 0 },
        { "timer cleared", "timer(str,gw)", "03 6b 65 79 03 74 61 67 00 00 00 01 01", true, SD_OK,
          13 },
        { "timer bad clear", "timer(str,gw)", "03 6b 65 79 03 74 61 67 00 00 00 01 02", true,
          SD_EPROTO, 0 },
        { "sharded key", "sk(str)", "02 00 01 03 61 62 63", true, SD_OK, 7 },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t buf[64];
        size_t n = hex(rows[i].bytes, buf, sizeof(buf));
        sd_coder *c = mk(rows[i].spec);
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_coder_skip(c, &r, rows[i].nested, &err);
        size_t consumed = (size_t)(r.p - buf);
        if (st != rows[i].want || consumed != rows[i].consumed) {
            fail_msg("%s: got %s after %zu bytes (%s)", rows[i].name, sd_status_name(st), consumed,
                     sd_err_msg(&err));
        }
        if (st != SD_OK && !contains(sd_err_msg(&err), "coder beam:coder:")) {
            fail_msg("%s: error does not name the coder: %s", rows[i].name, sd_err_msg(&err));
        }
        sd_coder_destroy(c);
    }
}

/* Valid nested encodings, cut at every offset: each prefix must fail cleanly. */
static const struct {
    const char *spec;
    const char *bytes;
} VALID[] = {
    { "kv(bytes,varint)", "04 61 62 00 63 0a" },
    { "iter(varint)", "00 00 00 04 01 0a c8 01 e8 07" },
    { "iter(bytes)", "ff ff ff ff 02 04 61 62 00 63 04 64 65 00 66 00" },
    { "sbi(bytes)", "ff ff ff ff 01 01 61 ff ff ff ff ff ff ff ff ff 01 02 74 74" },
    { "wv(varint,iw)", "7f ff ff ff ff ff ff 9c 00 00 00 02 80 00 01 52 9a a4 9b 68 80 dd db 01 7f "
                       "df 3b 64 5a 1c ad 76 ed 02 0f 02" },
    { "wv(kv(str,lp(unk)),gw)", "80 00 00 00 00 00 00 01 00 00 00 01 26 1e 28 01 6b 02 aa bb" },
    { "timer(str,gw)", "03 6b 65 79 03 74 61 67 00 00 00 01 00 80 00 00 00 00 00 04 d2 80 00 00 00 "
                       "00 00 16 2e 0f" },
    { "timer(bytes,iw)", "01 6b 00 00 00 00 01 80 00 00 00 00 00 00 14 0a 00 80 00 00 00 00 00 00 "
                         "15 80 00 00 00 00 00 00 0a 2b 03 01" },
    { "null(double)", "01 7f f8 00 00 00 00 00 00" },
    { "sk(bytes)", "02 00 01 03 61 62 63" },
    { "cw(bytes)", "80 00 00 00 00 00 00 05 02 61 62" },
    { "lp(unk)", "03 01 02 03" },
};

static void test_truncation(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(VALID) / sizeof(VALID[0]); i++) {
        uint8_t buf[128];
        size_t n = hex(VALID[i].bytes, buf, sizeof(buf));
        sd_coder *c = mk(VALID[i].spec);
        sd_err err;

        /* The whole encoding is fine. */
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_err_clear(&err);
        if (sd_coder_skip(c, &r, true, &err) != SD_OK || !sd_reader_done(&r)) {
            fail_msg("%s: valid encoding rejected: %s", VALID[i].spec, sd_err_msg(&err));
        }
        for (size_t cut = 0; cut < n; cut++) {
            /* Copy to an exact-size heap block so ASan sees any overread. */
            uint8_t *p = sd_malloc(cut ? cut : 1);
            assert_non_null(p);
            memcpy(p, buf, cut);
            sd_bytes b = sd_bytes_make(p, cut);

            r = sd_reader_make(b);
            sd_err_clear(&err);
            sd_status st = sd_coder_skip(c, &r, true, &err);
            if (st != SD_EPROTO || r.p != p) {
                fail_msg("%s cut at %zu: skip gave %s", VALID[i].spec, cut, sd_status_name(st));
            }
            sd_value *v = NULL;
            r = sd_reader_make(b);
            st = sd_coder_decode(c, &r, true, &v, NULL);
            if (c->known && (st != SD_EPROTO || r.p != p || v != NULL)) {
                fail_msg("%s cut at %zu: decode gave %s", VALID[i].spec, cut, sd_status_name(st));
            }
            if (c->kind == SD_CODER_WINDOWED_VALUE) {
                sd_wv_header h;
                sd_bytes elem;
                sd_wv_header_init(&h);
                r = sd_reader_make(b);
                st = sd_wv_decode(c, &r, &h, &elem, NULL);
                assert_int_equal(st, SD_EPROTO);
                assert_ptr_equal(r.p, p);
                sd_wv_header_deinit(&h);
            }
            if (c->kind == SD_CODER_TIMER) {
                sd_timer t;
                sd_timer_init(&t);
                r = sd_reader_make(b);
                if (sd_timer_decode(c, &r, &t, NULL) != SD_EPROTO) {
                    fail_msg("%s cut at %zu: timer decode accepted a prefix", VALID[i].spec, cut);
                }
                assert_ptr_equal(r.p, p);
                sd_timer_deinit(&t);
            }
            sd_free(p);
        }
        sd_coder_destroy(c);
    }
}

/* Deterministic pseudo-random garbage through every entry point: no crash, no overread. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)rng_state;
}

static void test_garbage(void **state)
{
    (void)state;
    const char *specs[] = { "wv(kv(str,iter(varint)),iw)", "timer(bytes,iw)",
                            "sbi(null(double))",           "kv(sk(str),lp(unk))",
                            "wv(cw(bytes),cw(varint))",    "iter(kv(gw,bool))" };
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        sd_coder *c = mk(specs[s]);
        for (int iter = 0; iter < 3000; iter++) {
            size_t n = rnd() % 48;
            uint8_t *p = sd_malloc(n ? n : 1);
            assert_non_null(p);
            for (size_t i = 0; i < n; i++) {
                /* Bias towards small and 0xff bytes, which make plausible counts. */
                uint32_t x = rnd();
                p[i] = (x & 3) == 0   ? 0xff
                       : (x & 3) == 1 ? (uint8_t)(x >> 8) % 4
                                      : (uint8_t)(x >> 8);
            }
            sd_bytes b = sd_bytes_make(p, n);
            for (int nested = 0; nested < 2; nested++) {
                sd_reader r = sd_reader_make(b);
                sd_status st = sd_coder_skip(c, &r, nested, NULL);
                assert_true(r.p >= p && r.p <= p + n);
                if (st != SD_OK) {
                    assert_ptr_equal(r.p, p);
                }
                sd_value *v = NULL;
                r = sd_reader_make(b);
                if (sd_coder_decode(c, &r, nested, &v, NULL) == SD_OK) {
                    /* Whatever decoded must encode, canonically: decoding and encoding the
                     * output again gives the same bytes. */
                    sd_buf out = { 0 }, out2 = { 0 };
                    sd_value *again = NULL;
                    assert_int_equal(sd_coder_encode(c, v, nested, &out, NULL), SD_OK);
                    sd_reader r2 = sd_reader_make(sd_buf_bytes(&out));
                    assert_int_equal(sd_coder_decode(c, &r2, nested, &again, NULL), SD_OK);
                    assert_true(sd_reader_done(&r2));
                    assert_int_equal(sd_coder_encode(c, again, nested, &out2, NULL), SD_OK);
                    assert_true(sd_bytes_equal(sd_buf_bytes(&out), sd_buf_bytes(&out2)));
                    sd_value_destroy(again);
                    sd_buf_deinit(&out);
                    sd_buf_deinit(&out2);
                }
                sd_value_destroy(v);
            }
            sd_wv_header h;
            sd_timer t;
            sd_bytes e;
            sd_wv_header_init(&h);
            sd_timer_init(&t);
            sd_reader r = sd_reader_make(b);
            sd_status st = SD_OK;
            if (c->kind == SD_CODER_WINDOWED_VALUE) {
                st = sd_wv_decode(c, &r, &h, &e, NULL);
            }
            if (c->kind == SD_CODER_TIMER) {
                st = sd_timer_decode(c, &r, &t, NULL);
            }
            if (c->kind == SD_CODER_KV) {
                sd_bytes k, v;
                st = sd_kv_split(c, b, &k, &v, NULL);
            }
            if (st != SD_OK) {
                assert_ptr_equal(r.p, p);
            }
            sd_wv_header_deinit(&h);
            sd_timer_deinit(&t);
            sd_free(p);
        }
        sd_coder_destroy(c);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Panes and windows                                                                          */
/* ------------------------------------------------------------------------------------------ */

static void test_panes(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        sd_pane pane;
        const char *bytes;
        sd_pane decoded; /* what decoding the bytes gives (differs when the form drops data) */
    } rows[] = {
        { "no firing", SD_PANE_NO_FIRING_INIT, "0f", SD_PANE_NO_FIRING_INIT },
        { "on time only", SD_PANE_ON_TIME_AND_ONLY_FIRING_INIT, "07",
          SD_PANE_ON_TIME_AND_ONLY_FIRING_INIT },
        { "vector 30/40",
          { false, true, SD_PANE_ON_TIME, 30, 40 },
          "26 1e 28",
          { false, true, SD_PANE_ON_TIME, 30, 40 } },
        { "early -1",
          { true, false, SD_PANE_EARLY, 0, -1 },
          "11 00",
          { true, false, SD_PANE_EARLY, 0, -1 } },
        { "early 3",
          { false, false, SD_PANE_EARLY, 3, -1 },
          "10 03",
          { false, false, SD_PANE_EARLY, 3, -1 } },
        { "late equal",
          { false, true, SD_PANE_LATE, 5, 5 },
          "1a 05",
          { false, true, SD_PANE_LATE, 5, 5 } },
        { "late two",
          { false, false, SD_PANE_LATE, 300, 2 },
          "28 ac 02 02",
          { false, false, SD_PANE_LATE, 300, 2 } },
        { "unknown drops indices",
          { true, true, SD_PANE_UNKNOWN, 7, 7 },
          "0f",
          SD_PANE_NO_FIRING_INIT },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t want[16];
        size_t n = hex(rows[i].bytes, want, sizeof(want));
        sd_buf b = { 0 };
        assert_int_equal(sd_pane_encode(&rows[i].pane, &b), SD_OK);
        if (b.len != n || memcmp(b.data, want, n) != 0) {
            fail_msg("%s: wrong encoding", rows[i].name);
        }
        sd_reader r = sd_reader_make(sd_bytes_make(want, n));
        sd_pane p;
        assert_int_equal(sd_pane_decode(&r, &p, NULL), SD_OK);
        assert_true(sd_reader_done(&r));
        if (!sd_pane_equal(&p, &rows[i].decoded)) {
            fail_msg("%s: wrong decoding", rows[i].name);
        }
        sd_buf_deinit(&b);
    }
    static const char *bad[] = { "", "3f", "10", "20 01", "40", "f0" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t buf[8];
        size_t n = hex(bad[i], buf, sizeof(buf));
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_pane p;
        sd_err err;
        sd_err_clear(&err);
        assert_int_equal(sd_pane_decode(&r, &p, &err), SD_EPROTO);
        assert_ptr_equal(r.p, buf);
        assert_true(contains(sd_err_msg(&err), "pane info"));
    }
    sd_pane invalid = { .timing = 9 };
    sd_buf b = { 0 };
    assert_int_equal(sd_pane_encode(&invalid, &b), SD_EINVAL);
    sd_buf_deinit(&b);
}

static void test_windows(void **state)
{
    (void)state;
    sd_window g = sd_window_global();
    sd_window a = sd_window_interval(10, 20), b = sd_window_interval(0, 20);
    sd_window c = sd_window_interval(10, 30);
    assert_int_equal(sd_window_max_ts(&g), SD_TIME_GLOBAL_MAX);
    assert_int_equal(sd_window_max_ts(&a), 19);
    assert_true(sd_window_cmp(&g, &a) < 0);
    assert_true(sd_window_cmp(&b, &a) < 0);
    assert_true(sd_window_cmp(&a, &c) < 0);
    assert_true(sd_window_equal(&a, &a));
    assert_false(sd_window_equal(&a, &b));

    sd_coder *iw = mk("iw"), *gw = mk("gw"), *cw = mk("cw(bytes)");
    sd_buf out = { 0 };
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_window_encode(iw, &a, &out, &err), SD_OK);
    assert_int_equal(out.len, 9);
    sd_reader r = sd_reader_make(sd_buf_bytes(&out));
    sd_window back;
    assert_int_equal(sd_window_decode(iw, &r, &back, &err), SD_OK);
    assert_true(sd_window_equal(&back, &a));
    sd_window inverted = sd_window_interval(30, 20);
    assert_int_equal(sd_window_encode(iw, &inverted, &out, NULL), SD_EINVAL);
    assert_int_equal(sd_window_encode(gw, &a, &out, NULL), SD_EINVAL);
    assert_int_equal(sd_window_encode(iw, &g, &out, NULL), SD_EINVAL);

    /* A span reaching below INT64_MIN is refused. */
    uint8_t low[] = { 0x00, 0, 0, 0, 0, 0, 0, 0x05, 0x0a };
    r = sd_reader_make(sd_bytes_make(low, sizeof(low)));
    sd_err_clear(&err);
    assert_int_equal(sd_window_decode(iw, &r, &back, &err), SD_EPROTO);
    assert_true(contains(sd_err_msg(&err), "span"));

    /* Custom windows keep their component bytes. */
    sd_buf_reset(&out);
    sd_window cwin = {
        .start = SD_TIME_MIN, .end = 100, .custom = true, .custom_bytes = sd_bytes_make("\x02xy", 3)
    };
    assert_int_equal(sd_window_encode(cw, &cwin, &out, &err), SD_OK);
    r = sd_reader_make(sd_buf_bytes(&out));
    assert_int_equal(sd_window_decode(cw, &r, &back, &err), SD_OK);
    assert_true(back.custom);
    assert_int_equal(sd_window_max_ts(&back), 99);
    assert_true(sd_bytes_equal(back.custom_bytes, cwin.custom_bytes));
    assert_true(sd_window_equal(&back, &cwin));

    sd_coder *v = mk("varint"), *u = mk("unk");
    assert_int_equal(sd_window_decode(v, &r, &back, NULL), SD_EINVAL);
    assert_int_equal(sd_window_decode(u, &r, &back, NULL), SD_EUNIMPL);
    sd_buf_deinit(&out);
    sd_coder_destroy(iw);
    sd_coder_destroy(gw);
    sd_coder_destroy(cw);
    sd_coder_destroy(v);
    sd_coder_destroy(u);

    /* sd_windows: inline then heap, and reuse. */
    sd_windows ws;
    sd_windows_init(&ws);
    for (int i = 0; i < 11; i++) {
        sd_window w = sd_window_interval(i, i + 5);
        assert_int_equal(sd_windows_push(&ws, &w), SD_OK);
        assert_int_equal(ws.n, (size_t)i + 1);
        for (int j = 0; j <= i; j++) {
            assert_int_equal(sd_windows_items(&ws)[j].start, j);
        }
    }
    sd_window two[2] = { sd_window_interval(1, 2), sd_window_interval(3, 4) };
    assert_int_equal(sd_windows_set(&ws, two, 2), SD_OK);
    assert_int_equal(sd_windows_items(&ws)[1].end, 4);
    sd_windows_deinit(&ws);
}

/* ------------------------------------------------------------------------------------------ */
/* Windowed values, KVs, timers, iterables                                                    */
/* ------------------------------------------------------------------------------------------ */

static void test_wv_roundtrip(void **state)
{
    (void)state;
    sd_coder *c = mk("wv(kv(str,lp(unk)),iw)");
    const sd_coder *wc = sd_wv_window_coder(c);
    assert_int_equal(wc->kind, SD_CODER_INTERVAL_WINDOW);
    assert_int_equal(sd_wv_element_coder(c)->kind, SD_CODER_KV);
    sd_window wins[6];
    for (int i = 0; i < 6; i++) {
        wins[i] = sd_window_interval(i * 10, i * 10 + 10);
    }
    sd_pane pane = { false, false, SD_PANE_LATE, 4, 1 };
    /* Two elements back to back, as on the data plane. */
    sd_buf stream = { 0 };
    for (int k = 0; k < 2; k++) {
        assert_int_equal(sd_wv_encode_header(&stream, wc, -5 + k, wins, 6 - (size_t)k * 5, &pane),
                         SD_OK);
        assert_int_equal(sd_buf_append(&stream, "\x01k\x02\xaa\xbb", 5), SD_OK);
    }
    sd_reader r = sd_reader_make(sd_buf_bytes(&stream));
    sd_wv_header h;
    sd_wv_header_init(&h);
    for (int k = 0; k < 2; k++) {
        sd_bytes elem, key, value;
        sd_err err;
        sd_err_clear(&err);
        assert_int_equal(sd_wv_decode(c, &r, &h, &elem, &err), SD_OK);
        assert_int_equal(h.ts, -5 + k);
        assert_int_equal(h.windows.n, 6 - (size_t)k * 5);
        for (size_t i = 0; i < h.windows.n; i++) {
            assert_true(sd_window_equal(&sd_windows_items(&h.windows)[i], &wins[i]));
        }
        assert_true(sd_pane_equal(&h.pane, &pane));
        assert_int_equal(elem.len, 5);
        assert_int_equal(sd_kv_split(sd_wv_element_coder(c), elem, &key, &value, &err), SD_OK);
        assert_true(sd_bytes_equal(key, sd_bytes_make("\x01k", 2)));
        assert_true(sd_bytes_equal(value, sd_bytes_make("\x02\xaa\xbb", 3)));
        /* Re-encoding reproduces the element exactly. */
        sd_buf again = { 0 };
        assert_int_equal(sd_wv_encode(c, &h, elem, &again, &err), SD_OK);
        sd_buf_deinit(&again);
    }
    assert_true(sd_reader_done(&r));
    sd_wv_header_deinit(&h);
    sd_buf_deinit(&stream);

    /* Wrong coder kinds are EINVAL; unknown element coders EUNIMPL. */
    sd_coder *kv = mk("kv(str,str)"), *wu = mk("wv(unk,gw)");
    uint8_t bytes[] = { 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x0f, 0x01 };
    r = sd_reader_make(sd_bytes_make(bytes, sizeof(bytes)));
    sd_bytes elem;
    sd_wv_header_init(&h);
    assert_int_equal(sd_wv_decode(kv, &r, &h, &elem, NULL), SD_EINVAL);
    assert_int_equal(sd_wv_decode(wu, &r, &h, &elem, NULL), SD_EUNIMPL);
    assert_ptr_equal(r.p, bytes);
    sd_bytes k, v;
    assert_int_equal(sd_kv_split(wu, sd_bytes_make(bytes, 2), &k, &v, NULL), SD_EINVAL);
    sd_wv_header_deinit(&h);
    sd_coder_destroy(kv);
    sd_coder_destroy(wu);
    sd_coder_destroy(c);

    /* Too many windows. */
    sd_coder *g = mk("wv(varint,gw)");
    uint8_t many[] = { 0x80, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0x0f, 0x01 };
    r = sd_reader_make(sd_bytes_make(many, sizeof(many)));
    sd_err err;
    sd_err_clear(&err);
    sd_wv_header_init(&h);
    assert_int_equal(sd_wv_decode(g, &r, &h, &elem, &err), SD_EPROTO);
    assert_true(contains(sd_err_msg(&err), "windows"));
    sd_wv_header_deinit(&h);
    sd_coder_destroy(g);
}

static void test_param_wv(void **state)
{
    (void)state;
    uint8_t payload[64];
    size_t n = hex(PWV_PAYLOAD_HEX, payload, sizeof(payload));
    sd_coder *comps[2] = { mk("varint"), mk("iw") };
    sd_coder *c = NULL;
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_coder_from_urn(PWV, sd_bytes_make(payload, n), comps, 2, &c, &err), SD_OK);
    assert_null(sd__coder_check(c));
    uint8_t two[] = { 0x02, 0x03 };
    sd_reader r = sd_reader_make(sd_bytes_make(two, 2));
    sd_wv_header h;
    sd_bytes elem;
    sd_wv_header_init(&h);
    assert_int_equal(sd_wv_decode(c, &r, &h, &elem, &err), SD_OK);
    assert_int_equal(h.ts, 1000);
    assert_int_equal(h.windows.n, 1);
    assert_int_equal(sd_windows_items(&h.windows)[0].end, 20);
    assert_int_equal(h.pane.index, 30);
    assert_int_equal(elem.len, 1);
    assert_int_equal(sd_reader_left(&r), 1);
    sd_buf out = { 0 };
    assert_int_equal(sd_wv_encode(c, &h, elem, &out, &err), SD_OK);
    assert_int_equal(out.len, 1);
    sd_buf_deinit(&out);
    sd_wv_header_deinit(&h);
    sd_coder_destroy(c);

    /* An unknown window coder cannot be read from the payload. */
    sd_coder *unk = mk("unk");
    sd_coder *comps2[2] = { comps[0], unk };
    sd_err_clear(&err);
    assert_int_equal(sd_coder_from_urn(PWV, sd_bytes_make(payload, n), comps2, 2, &c, &err),
                     SD_EUNIMPL);
    sd_coder_destroy(unk);
    sd_coder_destroy(comps[0]);
    sd_coder_destroy(comps[1]);
}

static void test_timers(void **state)
{
    (void)state;
    sd_coder *c = mk("timer(bytes,iw)");
    sd_timer t;
    sd_timer_init(&t);
    t.key = sd_bytes_make("\x01k", 2);
    t.tag = sd_bytes_make("tag", 3);
    sd_window w = sd_window_interval(0, 60000);
    assert_int_equal(sd_windows_push(&t.windows, &w), SD_OK);
    t.fire = 59999;
    t.hold = -1;
    t.pane = (sd_pane){ true, false, SD_PANE_EARLY, 2, -1 };
    sd_buf out = { 0 };
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_timer_encode(c, &t, &out, &err), SD_OK);
    t.clear = true;
    assert_int_equal(sd_timer_encode(c, &t, &out, &err), SD_OK);

    sd_reader r = sd_reader_make(sd_buf_bytes(&out));
    sd_timer d;
    sd_timer_init(&d);
    assert_int_equal(sd_timer_decode(c, &r, &d, &err), SD_OK);
    assert_false(d.clear);
    assert_true(sd_bytes_equal(d.key, t.key));
    assert_true(sd_bytes_equal(d.tag, t.tag));
    assert_int_equal(d.fire, 59999);
    assert_int_equal(d.hold, -1);
    assert_true(sd_pane_equal(&d.pane, &t.pane));
    assert_int_equal(d.windows.n, 1);
    assert_int_equal(sd_timer_decode(c, &r, &d, &err), SD_OK);
    assert_true(d.clear);
    assert_true(sd_reader_done(&r));
    sd_timer_deinit(&d);
    sd_timer_deinit(&t);
    sd_buf_deinit(&out);
    sd_coder *kv = mk("kv(bytes,bytes)");
    assert_int_equal(sd_timer_decode(kv, &r, &d, NULL), SD_EINVAL);
    assert_int_equal(sd_timer_encode(kv, &t, &out, NULL), SD_EINVAL);
    sd_coder_destroy(kv);
    sd_coder_destroy(c);
}

static void test_iterable_reader(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        const char *spec;
        const char *bytes;
        size_t n_elems;
        const char *token; /* NULL = none */
        sd_status want;
    } rows[] = {
        { "known", "iter(varint)", "00 00 00 03 01 c8 01 05", 3, NULL, SD_OK },
        { "empty", "iter(varint)", "00 00 00 00", 0, NULL, SD_OK },
        { "blocks", "iter(bytes)", "ff ff ff ff 02 01 61 01 62 01 01 63 00", 3, NULL, SD_OK },
        { "token", "sbi(bytes)", "ff ff ff ff 01 01 61 ff ff ff ff ff ff ff ff ff 01 02 74 75", 1,
          "tu", SD_OK },
        { "token only", "sbi(varint)", "ff ff ff ff ff ff ff ff ff ff ff ff ff 01 00", 0, "",
          SD_OK },
        { "token in plain iterable", "iter(bytes)", "ff ff ff ff ff ff ff ff ff ff ff ff ff 01 00",
          0, NULL, SD_EPROTO },
        { "truncated block", "iter(bytes)", "ff ff ff ff 02 01 61", 1, NULL, SD_EPROTO },
        { "count beyond input", "iter(varint)", "00 00 00 09 01", 0, NULL, SD_EPROTO },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t buf[64];
        size_t n = hex(rows[i].bytes, buf, sizeof(buf));
        sd_coder *c = mk(rows[i].spec);
        sd_reader r = sd_reader_make(sd_bytes_make(buf, n));
        sd_iterable_reader it;
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_iterable_begin(&it, c, &r, &err);
        size_t count = 0;
        bool has = true;
        while (st == SD_OK && has) {
            sd_bytes e;
            st = sd_iterable_next(&it, &e, &has, &err);
            count += st == SD_OK && has;
        }
        if (st != rows[i].want || count != rows[i].n_elems) {
            fail_msg("%s: %s after %zu elements (%s)", rows[i].name, sd_status_name(st), count,
                     sd_err_msg(&err));
        }
        if (st == SD_OK) {
            assert_true(sd_reader_done(&r));
            assert_int_equal(it.has_token, rows[i].token != NULL);
            if (rows[i].token != NULL) {
                assert_true(sd_bytes_equal(it.token, sd_bytes_str(rows[i].token)));
            }
            /* The generic decoder agrees. */
            sd_value *v = NULL;
            r = sd_reader_make(sd_bytes_make(buf, n));
            assert_int_equal(sd_coder_decode(c, &r, true, &v, NULL), SD_OK);
            assert_int_equal(v->n_items, count);
            assert_int_equal(v->has_token, rows[i].token != NULL);
            sd_value_destroy(v);
        }
        sd_coder_destroy(c);
    }
    sd_buf b = { 0 };
    assert_int_equal(sd_iterable_encode_begin(&b, 258), SD_OK);
    assert_memory_equal(b.data, "\x00\x00\x01\x02", 4);
    assert_int_equal(sd_iterable_encode_begin(&b, (size_t)INT32_MAX + 1), SD_ETOOBIG);
    sd_buf_deinit(&b);
}

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void roundtrip_value(const char *spec, sd_value *v, bool nested, const char *want_hex)
{
    sd_coder *c = mk(spec);
    sd_buf out = { 0 };
    sd_err err;
    sd_err_clear(&err);
    if (sd_coder_encode(c, v, nested, &out, &err) != SD_OK) {
        fail_msg("%s: encode: %s", spec, sd_err_msg(&err));
    }
    if (want_hex != NULL) {
        uint8_t want[128];
        size_t n = hex(want_hex, want, sizeof(want));
        if (out.len != n || memcmp(out.data, want, n) != 0) {
            fail_msg("%s: unexpected bytes", spec);
        }
    }
    sd_reader r = sd_reader_make(sd_buf_bytes(&out));
    sd_value *back = NULL;
    assert_int_equal(sd_coder_decode(c, &r, nested, &back, &err), SD_OK);
    assert_true(sd_reader_done(&r));
    if (!sd_value_equal(back, v)) {
        sd_buf d = { 0 };
        assert_int_equal(sd_value_describe(back, &d), SD_OK);
        assert_int_equal(sd_buf_append_byte(&d, 0), SD_OK);
        fail_msg("%s: round trip gave %s", spec, (char *)d.data);
    }
    sd_value_destroy(back);
    sd_value_destroy(v);
    sd_buf_deinit(&out);
    sd_coder_destroy(c);
}

static void test_values(void **state)
{
    (void)state;
    double nan_value = __builtin_nan("");
    roundtrip_value("double", sd_value_double(nan_value), true, "7f f8 00 00 00 00 00 00");
    roundtrip_value("double", sd_value_double(-0.0), true, "80 00 00 00 00 00 00 00");
    roundtrip_value("double", sd_value_double(__builtin_inf()), true, "7f f0 00 00 00 00 00 00");
    roundtrip_value("double", sd_value_double(-__builtin_inf()), true, "ff f0 00 00 00 00 00 00");
    roundtrip_value("null(varint)", sd_value_null(), true, "00");
    roundtrip_value("null(str)", sd_value_string("ab", 2), false, "01 61 62");
    roundtrip_value("null(str)", sd_value_string("ab", 2), true, "01 02 61 62");
    roundtrip_value("lp(unk)", sd_value_bytes("\xaa", 1), true, "01 aa");
    roundtrip_value("lp(varint)", sd_value_int(300), true, "02 ac 02");
    roundtrip_value("lp(str)", sd_value_string("hi", 2), true, "02 68 69");
    /* The user key is nested even in the outer context (Beam's vectors, document 33). */
    roundtrip_value("sk(str)", sd_value_sharded_key("\x01", 1, sd_value_string("k", 1)), false,
                    "01 01 01 6b");
    roundtrip_value("sk(str)", sd_value_sharded_key("", 0, sd_value_string("k", 1)), true,
                    "00 01 6b");
    sd_window cwin = {
        .start = SD_TIME_MIN, .end = 1, .custom = true, .custom_bytes = sd_bytes_make("\x03", 1)
    };
    roundtrip_value("cw(varint)", sd_value_window(&cwin), true, "80 00 00 00 00 00 00 00 03");

    sd_value *sbi = sd_value_list();
    assert_int_equal(sd_value_push(sbi, sd_value_int(1)), SD_OK);
    assert_int_equal(sd_value_push(sbi, sd_value_int(2)), SD_OK);
    sbi->has_token = true;
    sbi->bytes = sd_malloc(3);
    memcpy(sbi->bytes, "ab", 3);
    sbi->len = 2;
    roundtrip_value("sbi(varint)", sbi, true,
                    "ff ff ff ff 02 01 02 ff ff ff ff ff ff ff ff ff 01 02 61 62");

    sd_value *wins = sd_value_list();
    sd_window w = sd_window_interval(0, 10);
    assert_int_equal(sd_value_push(wins, sd_value_window(&w)), SD_OK);
    sd_pane pane = SD_PANE_ON_TIME_AND_ONLY_FIRING;
    roundtrip_value("timer(varint,iw)",
                    sd_value_timer(sd_value_int(7), "t", 1, wins, false, 9, 3, &pane), true, NULL);

    /* Kind mismatches name the coder and both kinds. */
    sd_coder *kv = mk("kv(str,varint)");
    sd_value *bad = sd_value_kv(sd_value_string("a", 1), sd_value_string("b", 1));
    sd_buf out = { 0 };
    sd_err err;
    sd_err_clear(&err);
    assert_int_equal(sd_coder_encode(kv, bad, true, &out, &err), SD_EINVAL);
    assert_string_equal(
        sd_err_msg(&err),
        "coder beam:coder:varint:v1: cannot encode a string value (expected an int)");
    sd_value_destroy(bad);
    sd_buf_deinit(&out);
    sd_coder_destroy(kv);

    /* Bad bools and unknown coders. */
    sd_coder *bl = mk("bool"), *u = mk("unk");
    uint8_t two = 2;
    sd_reader r = sd_reader_make(sd_bytes_make(&two, 1));
    sd_value *v = NULL;
    assert_int_equal(sd_coder_decode(bl, &r, true, &v, NULL), SD_EPROTO);
    assert_int_equal(sd_coder_decode(u, &r, true, &v, NULL), SD_EUNIMPL);
    sd_coder_destroy(bl);
    sd_coder_destroy(u);

    /* A length prefix must hold exactly one value. */
    sd_coder *lpv = mk("lp(varint)");
    uint8_t extra[] = { 0x02, 0x01, 0x01 };
    r = sd_reader_make(sd_bytes_make(extra, 3));
    sd_err_clear(&err);
    assert_int_equal(sd_coder_decode(lpv, &r, true, &v, &err), SD_EPROTO);
    assert_true(contains(sd_err_msg(&err), "left inside the length prefix"));
    sd_coder_destroy(lpv);

    /* Millions of empty elements are refused when decoding values. */
    sd_coder *ig = mk("iter(gw)");
    uint8_t big[] = { 0x7f, 0xff, 0xff, 0xff };
    r = sd_reader_make(sd_bytes_make(big, 4));
    assert_int_equal(sd_coder_decode(ig, &r, true, &v, NULL), SD_ETOOBIG);
    sd_coder_destroy(ig);
}

/* ------------------------------------------------------------------------------------------ */
/* Rows and schemas                                                                           */
/* ------------------------------------------------------------------------------------------ */

static sd_coder *row_coder(const char *payload_hex, sd_status want)
{
    uint8_t payload[256];
    size_t n = hex(payload_hex, payload, sizeof(payload));
    sd_coder *c = NULL;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_coder_from_urn(ROW, sd_bytes_make(payload, n), NULL, 0, &c, &err);
    if (st != want) {
        fail_msg("row payload %s: %s %s", payload_hex, sd_status_name(st), sd_err_msg(&err));
    }
    return c;
}

static void test_rows(void **state)
{
    (void)state;
    /*
     * Schema with encoding positions: a: int16 (pos 2), b: float (pos 0), c: byte (pos 1),
     * d: map<string, array<nullable int64>> (pos 3), e: nullable row{x: bool} (pos 4).
     */
    const char *schema2 =
        "0a 09 0a 01 61 1a 02 10 02 28 02 0a 09 0a 01 62 1a 02 10 05 28 00 0a 09 0a 01 63 1a 02 "
        "10 01 28 01 0a 17 0a 01 64 1a 10 2a 0e 0a 02 10 07 12 08 1a 06 0a 04 08 01 10 04 28 03 "
        "0a 16 0a 01 65 1a 0f 08 01 32 0b 0a 09 0a 07 0a 01 78 1a 02 10 08 28 04 20 01";
    sd_coder *c = row_coder(schema2, SD_OK);
    assert_null(sd__coder_check(c));
    const sd_schema *s = c->schema;
    assert_true(s->encoding_positions_set);
    assert_int_equal(s->order[0], 1);
    assert_int_equal(s->order[1], 2);
    assert_int_equal(s->order[2], 0);
    assert_int_equal(s->fields[4].type->kind, SD_FIELD_ROW);
    assert_true(s->fields[4].type->nullable);
    sd_value *row = sd_value_row();
    assert_int_equal(sd_value_push(row, sd_value_int(-2)), SD_OK);
    assert_int_equal(sd_value_push(row, sd_value_double(1.5)), SD_OK);
    assert_int_equal(sd_value_push(row, sd_value_int(-1)), SD_OK);
    sd_value *map = sd_value_map();
    sd_value *arr = sd_value_list();
    assert_int_equal(sd_value_push(arr, sd_value_int(5)), SD_OK);
    assert_int_equal(sd_value_push(arr, sd_value_null()), SD_OK);
    assert_int_equal(sd_value_push(map, sd_value_string("k", 1)), SD_OK);
    assert_int_equal(sd_value_push(map, arr), SD_OK);
    assert_int_equal(sd_value_push(row, map), SD_OK);
    assert_int_equal(sd_value_push(row, sd_value_null()), SD_OK);
    /* 5 fields, bitmap {e null}, then b (float 1.5), c (byte -1), a (int16 -2), d. */
    {
        sd_buf out = { 0 };
        sd_err err;
        sd_err_clear(&err);
        assert_int_equal(sd_coder_encode(c, row, true, &out, &err), SD_OK);
        uint8_t want[64];
        size_t n = hex("05 01 10 3f c0 00 00 ff ff fe 00 00 00 01 01 6b 00 00 00 02 01 05 00", want,
                       sizeof(want));
        assert_int_equal(out.len, n);
        assert_memory_equal(out.data, want, n);
        sd_reader r = sd_reader_make(sd_buf_bytes(&out));
        sd_value *back = NULL;
        assert_int_equal(sd_coder_decode(c, &r, true, &back, &err), SD_OK);
        assert_true(sd_value_equal(back, row));
        r = sd_reader_make(sd_buf_bytes(&out));
        assert_int_equal(sd_coder_skip(c, &r, true, &err), SD_OK);
        assert_true(sd_reader_done(&r));
        /* Fewer fields on the wire (schema evolution): the rest are null. */
        uint8_t old[] = { 0x01, 0x00, 0x40, 0x00, 0x00, 0x00 };
        r = sd_reader_make(sd_bytes_make(old, sizeof(old)));
        sd_value *partial = NULL;
        assert_int_equal(sd_coder_decode(c, &r, true, &partial, &err), SD_OK);
        assert_int_equal(partial->items[1]->kind, SD_VALUE_DOUBLE);
        assert_int_equal(partial->items[0]->kind, SD_VALUE_NULL);
        sd_value_destroy(partial);
        /* More fields than the schema cannot be delimited. */
        uint8_t more[] = { 0x09, 0x00 };
        r = sd_reader_make(sd_bytes_make(more, sizeof(more)));
        assert_int_equal(sd_coder_skip(c, &r, true, NULL), SD_EPROTO);
        /* Null in a non-nullable field is refused. */
        sd_value_destroy(row->items[0]);
        row->items[0] = sd_value_null();
        sd_buf_reset(&out);
        sd_err_clear(&err);
        assert_int_equal(sd_coder_encode(c, row, true, &out, &err), SD_EINVAL);
        assert_true(contains(sd_err_msg(&err), "non-nullable field \"a\""));
        /* Out-of-range int16. */
        sd_value_destroy(row->items[0]);
        row->items[0] = sd_value_int(40000);
        sd_err_clear(&err);
        assert_int_equal(sd_coder_encode(c, row, true, &out, &err), SD_EINVAL);
        sd_value_destroy(back);
        sd_buf_deinit(&out);
    }
    sd_value_destroy(row);
    sd_coder_destroy(c);

    /* INT32 negatives: written as 32-bit varints, read from either width. */
    c = row_coder("0a 07 0a 01 69 1a 02 10 03", SD_OK);
    row = sd_value_row();
    assert_int_equal(sd_value_push(row, sd_value_int(-1)), SD_OK);
    sd_buf out = { 0 };
    assert_int_equal(sd_coder_encode(c, row, true, &out, NULL), SD_OK);
    uint8_t want32[] = { 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f };
    assert_int_equal(out.len, sizeof(want32));
    assert_memory_equal(out.data, want32, sizeof(want32));
    uint8_t wide[] = { 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
    sd_reader r = sd_reader_make(sd_bytes_make(wide, sizeof(wide)));
    sd_value *back = NULL;
    assert_int_equal(sd_coder_decode(c, &r, true, &back, NULL), SD_OK);
    assert_true(sd_value_equal(back, row));
    sd_value_destroy(back);
    sd_value_destroy(row);
    sd_buf_deinit(&out);
    sd_coder_destroy(c);

    /* Bad schemas. */
    static const char *bad[] = {
        "0a",                                     /* truncated length */
        "0a 03 0a 01",                            /* truncated field */
        "0b",                                     /* group wire type */
        "0a 05 0a 01 61 1a 00",                   /* type without type_info */
        "0a 07 0a 01 61 1a 02 10 0a",             /* atomic type 10 */
        "0a 09 0a 01 61 1a 02 10 02 28 01 20 01", /* position 1 of 1 field */
        "0a 05 0a 01 61 1a 02 1a 00",             /* truncated type */
        "0a 08 0a 01 61 1a 03 3a 01 0a",          /* logical type cut */
        "0a 07 0a 01 61 1a 02 2a 00",             /* map without key/value */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_null(row_coder(bad[i], SD_EPROTO));
    }
    /* Nesting: 30 levels of array<...> parse, 40 are refused (bounded recursion). */
    for (int levels = 30; levels <= 40; levels += 10) {
        sd_buf type = { 0 }, tmp = { 0 };
        assert_int_equal(sd_buf_append(&type, "\x10\x07", 2), SD_OK); /* atomic string */
        for (int level = 0; level < levels; level++) {
            /* FieldType{ array_type(3): ArrayType{ element_type(1): type } } */
            sd_buf_reset(&tmp);
            assert_int_equal(sd_buf_append_byte(&tmp, 0x0a), SD_OK);
            assert_int_equal(sd_buf_put_lp(&tmp, sd_buf_bytes(&type)), SD_OK);
            sd_buf_reset(&type);
            assert_int_equal(sd_buf_append_byte(&type, 0x1a), SD_OK);
            assert_int_equal(sd_buf_put_lp(&type, sd_buf_bytes(&tmp)), SD_OK);
        }
        sd_buf field = { 0 }, schema_buf = { 0 };
        assert_int_equal(sd_buf_append(&field, "\x0a\x01z\x1a", 4), SD_OK);
        assert_int_equal(sd_buf_put_lp(&field, sd_buf_bytes(&type)), SD_OK);
        assert_int_equal(sd_buf_append_byte(&schema_buf, 0x0a), SD_OK);
        assert_int_equal(sd_buf_put_lp(&schema_buf, sd_buf_bytes(&field)), SD_OK);
        sd_schema *sch = NULL;
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_schema_parse(sd_buf_bytes(&schema_buf), &sch, &err);
        assert_int_equal(st, levels == 30 ? SD_OK : SD_EPROTO);
        sd_schema_destroy(sch);
        sd_buf_deinit(&type);
        sd_buf_deinit(&tmp);
        sd_buf_deinit(&field);
        sd_buf_deinit(&schema_buf);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Logical types with their own wire form, and state-backed iterables read through state      */
/* ------------------------------------------------------------------------------------------ */

static void test_decimal_text(void **state)
{
    (void)state;

    /* Both directions: the wire form (scale, unscaled) prints as text and parses back. */
    static const struct {
        const char *name;
        int32_t scale;
        const char *unscaled;
        const char *text;
    } rows[] = {
        { "zero", 1, "00", "0.0" },
        { "zero, scale 0", 0, "00", "0" },
        { "one", 1, "0a", "1.0" },
        { "pi", 4, "7a b7", "3.1415" },
        { "negative", 3, "fe 78 e5", "-100.123" },
        { "127", 0, "7f", "127" },
        { "128 needs a sign byte", 0, "00 80", "128" },
        { "-128", 0, "80", "-128" },
        { "-129", 0, "ff 7f", "-129" },
        { "10^9 (one chunk)", 0, "3b 9a ca 00", "1000000000" },
        { "10^18", 0, "0d e0 b6 b3 a7 64 00 00", "1000000000000000000" },
        { "2^64", 0, "01 00 00 00 00 00 00 00 00", "18446744073709551616" },
        { "-2^64", 0, "ff 00 00 00 00 00 00 00 00", "-18446744073709551616" },
        { "negative scale", -2, "05", "5E+2" },
        { "zero, negative scale", -2, "00", "0E+2" },
        { "exponent keeps the digits", -3, "7b", "1.23E+5" },
        { "smallest plain", 6, "01", "0.000001" },
        { "too small for plain", 7, "01", "1E-7" },
        { "plain with leading zeros", 8, "30 39", "0.00012345" },
        { "long and small (Python's str)", 29, "fd 62 bd 49 b1 89 8e bd bb 35",
          "-1.2345678901234567890123E-7" },
        { "large scale", 30, "0c", "1.2E-29" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t want[32];
        size_t n = hex(rows[i].unscaled, want, sizeof(want));
        sd_buf text = { 0 }, unscaled = { 0 };
        assert_int_equal(sd__decimal_format(rows[i].scale, sd_bytes_make(want, n), &text), SD_OK);
        if (text.len != strlen(rows[i].text) || memcmp(text.data, rows[i].text, text.len) != 0) {
            fail_msg("%s: formatted as %.*s", rows[i].name, (int)text.len, (char *)text.data);
        }
        int32_t scale = 0;
        sd_err err;
        sd_err_clear(&err);
        assert_int_equal(sd__decimal_parse(sd_bytes_make(rows[i].text, strlen(rows[i].text)),
                                           &scale, &unscaled, &err),
                         SD_OK);
        if (scale != rows[i].scale || unscaled.len != n || memcmp(unscaled.data, want, n) != 0) {
            fail_msg("%s: parsed to scale %d and %zu bytes", rows[i].name, (int)scale,
                     unscaled.len);
        }
        sd_buf_deinit(&text);
        sd_buf_deinit(&unscaled);
    }

    /* Other spellings parse to the canonical wire form. */
    static const struct {
        const char *text;
        int32_t scale;
        const char *unscaled;
    } spellings[] = {
        { "+1.5", 1, "0f" },  { "1.5e1", 0, "0f" }, { "15E-1", 1, "0f" }, { "-0.0", 1, "00" },
        { "00012", 0, "0c" }, { ".5", 1, "05" },    { "5.", 0, "05" },    { "-0", 0, "00" },
    };

    for (size_t i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
        uint8_t want[8];
        size_t n = hex(spellings[i].unscaled, want, sizeof(want));
        sd_buf unscaled = { 0 };
        int32_t scale = 0;
        assert_int_equal(
            sd__decimal_parse(sd_bytes_make(spellings[i].text, strlen(spellings[i].text)), &scale,
                              &unscaled, NULL),
            SD_OK);
        if (scale != spellings[i].scale || unscaled.len != n ||
            memcmp(unscaled.data, want, n) != 0) {
            fail_msg("\"%s\": scale %d, %zu bytes", spellings[i].text, (int)scale, unscaled.len);
        }
        sd_buf_deinit(&unscaled);
    }

    /* Not decimals. */
    static const char *const bad[] = { "",    "-",   ".",    "1.2.3", "1e",     "1e+",
                                       "NaN", "Inf", " 1",   "1 ",    "0x10",   "1e99999999999",
                                       "--1", "1,5", "1e5.", "e5",    "1.5e-x", "1e2147483649" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sd_buf unscaled = { 0 };
        int32_t scale = 0;
        sd_err err;
        sd_err_clear(&err);
        sd_status st =
            sd__decimal_parse(sd_bytes_make(bad[i], strlen(bad[i])), &scale, &unscaled, &err);
        if (st != SD_EINVAL) {
            fail_msg("\"%s\" gave %s", bad[i], sd_status_name(st));
        }
        assert_true(contains(sd_err_msg(&err), "decimal"));
        sd_buf_deinit(&unscaled);
    }

    /* Non-minimal and empty unscaled bytes still read; the size limit holds both ways. */
    sd_buf text = { 0 };
    assert_int_equal(sd__decimal_format(0, sd_bytes_make("\x00\x00\x05", 3), &text), SD_OK);
    assert_int_equal(text.len, 1);
    assert_int_equal(text.data[0], '5');
    sd_buf_reset(&text);
    assert_int_equal(sd__decimal_format(2, SD_BYTES_NULL, &text), SD_OK);
    assert_int_equal(text.len, 4);
    assert_memory_equal(text.data, "0.00", 4);
    sd_buf_deinit(&text);
    uint8_t *huge = sd_calloc(SD_CODER_MAX_DECIMAL_BYTES + 1, 1);
    assert_non_null(huge);
    huge[0] = 0x7f;
    assert_int_equal(sd__decimal_format(0, sd_bytes_make(huge, SD_CODER_MAX_DECIMAL_BYTES), &text),
                     SD_OK);
    /* The largest allowed value has about 8192 * 2.408 digits; it parses back to itself. */
    assert_true(text.len > 19700 && text.len < 19740);
    sd_buf back = { 0 };
    int32_t scale = 0;
    assert_int_equal(sd__decimal_parse(sd_buf_bytes(&text), &scale, &back, NULL), SD_OK);
    assert_int_equal(back.len, SD_CODER_MAX_DECIMAL_BYTES);
    assert_memory_equal(back.data, huge, SD_CODER_MAX_DECIMAL_BYTES);
    assert_int_equal(sd_buf_append_byte(&text, '0'), SD_OK);
    sd_buf_reset(&back);
    assert_int_equal(sd__decimal_parse(sd_buf_bytes(&text), &scale, &back, NULL), SD_ETOOBIG);
    sd_buf_deinit(&text);
    sd_buf_deinit(&back);
    assert_int_equal(
        sd__decimal_format(0, sd_bytes_make(huge, SD_CODER_MAX_DECIMAL_BYTES + 1), &text),
        SD_ETOOBIG);
    sd_free(huge);
}

/* Row schema {t: millis_instant (INT64), d: nullable decimal (BYTES)}, from Beam's schema_pb2. */
#define LOGICAL_SCHEMA_HEX                                                                       \
    "0a 30 0a 01 74 1a 2b 3a 29 0a 23 62 65 61 6d 3a 6c 6f 67 69 63 61 6c 5f 74 79 70 65 3a 6d " \
    "69 6c 6c 69 73 5f 69 6e 73 74 61 6e 74 3a 76 31 1a 02 10 04 0a 2b 0a 01 64 1a 26 08 01 3a " \
    "22 0a 1c 62 65 61 6d 3a 6c 6f 67 69 63 61 6c 5f 74 79 70 65 3a 64 65 63 69 6d 61 6c 3a 76 " \
    "31 1a 02 10 09"

static void test_row_logical_types(void **state)
{
    (void)state;
    sd_coder *c = row_coder(LOGICAL_SCHEMA_HEX, SD_OK);
    assert_null(sd__coder_check(c));
    assert_int_equal(c->schema->fields[0].type->logical, SD_LOGICAL_MILLIS_INSTANT);
    assert_int_equal(c->schema->fields[1].type->logical, SD_LOGICAL_DECIMAL);

    /*
     * Rows as Python's RowCoder writes them, and what we write back. Python writes a negative
     * scale as a 64-bit varint; Java's BigDecimalCoder (and we) write a 32-bit one.
     */
    static const struct {
        const char *name;
        int64_t millis;
        const char *decimal; /* NULL: a null field */
        const char *python;
        const char *ours; /* NULL: same as python */
    } rows[] = {
        { "before the epoch, negative scale", -5, "5E+2",
          "02 00 7f ff ff ff ff ff ff fb fe ff ff ff ff ff ff ff ff 01 01 05",
          "02 00 7f ff ff ff ff ff ff fb fe ff ff ff 0f 01 05" },
        { "2020, long decimal", 1597328054123, "-1.2345678901234567890123E-7",
          "02 00 80 00 01 73 e8 2b d7 6b 1d 0a fd 62 bd 49 b1 89 8e bd bb 35", NULL },
        { "epoch, null decimal", 0, NULL, "02 01 02 80 00 00 00 00 00 00 00", NULL },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t py[64], ours[64];
        size_t npy = hex(rows[i].python, py, sizeof(py));
        size_t nours = rows[i].ours ? hex(rows[i].ours, ours, sizeof(ours)) : npy;
        if (rows[i].ours == NULL) {
            memcpy(ours, py, npy);
        }
        sd_value *want = sd_value_row();
        assert_int_equal(sd_value_push(want, sd_value_int(rows[i].millis)), SD_OK);
        assert_int_equal(
            sd_value_push(want, rows[i].decimal
                                    ? sd_value_bytes(rows[i].decimal, strlen(rows[i].decimal))
                                    : sd_value_null()),
            SD_OK);
        sd_err err;
        sd_err_clear(&err);
        for (int form = 0; form < 2; form++) {
            sd_bytes b = form == 0 ? sd_bytes_make(py, npy) : sd_bytes_make(ours, nours);
            sd_reader r = sd_reader_make(b);
            sd_value *got = NULL;
            assert_int_equal(sd_coder_decode(c, &r, true, &got, &err), SD_OK);
            assert_true(sd_reader_done(&r));
            if (!sd_value_equal(got, want)) {
                fail_msg("%s: decoded value differs", rows[i].name);
            }
            sd_value_destroy(got);
            r = sd_reader_make(b);
            assert_int_equal(sd_coder_skip(c, &r, true, &err), SD_OK);
            assert_true(sd_reader_done(&r));
        }
        sd_buf out = { 0 };
        assert_int_equal(sd_coder_encode(c, want, true, &out, &err), SD_OK);
        if (out.len != nours || memcmp(out.data, ours, nours) != 0) {
            fail_msg("%s: unexpected encoding", rows[i].name);
        }
        sd_buf_deinit(&out);
        sd_value_destroy(want);
    }

    /* A STRING decimal encodes too; wrong kinds and bad text are SD_EINVAL. */
    static const struct {
        const char *name;
        sd_value *t, *d;
        sd_status want;
    } enc[] = {
        { "string decimal", NULL, NULL, SD_OK },
        { "millis as a string", NULL, NULL, SD_EINVAL },
        { "decimal as an int", NULL, NULL, SD_EINVAL },
        { "decimal text", NULL, NULL, SD_EINVAL },
    };

    for (size_t i = 0; i < sizeof(enc) / sizeof(enc[0]); i++) {
        sd_value *row = sd_value_row();
        sd_value *t = i == 1 ? sd_value_string("1", 1) : sd_value_int(1);
        sd_value *d = i == 2   ? sd_value_int(1)
                      : i == 3 ? sd_value_bytes("1.5x", 4)
                               : sd_value_string("-1.50", 5);
        assert_int_equal(sd_value_push(row, t), SD_OK);
        assert_int_equal(sd_value_push(row, d), SD_OK);
        sd_buf out = { 0 };
        sd_err err;
        sd_err_clear(&err);
        sd_status st = sd_coder_encode(c, row, true, &out, &err);
        if (st != enc[i].want) {
            fail_msg("%s: %s (%s)", enc[i].name, sd_status_name(st), sd_err_msg(&err));
        }
        if (i == 0) {
            uint8_t want[32];
            size_t n = hex("02 00 80 00 00 00 00 00 00 01 02 02 ff 6a", want, sizeof(want));
            assert_int_equal(out.len, n);
            assert_memory_equal(out.data, want, n);
        } else {
            assert_true(contains(sd_err_msg(&err), "field \""));
        }
        sd_buf_deinit(&out);
        sd_value_destroy(row);
    }

    /* Bad wire data: truncated instant, scale beyond 32 bits, decimal beyond the limit. */
    static const char *const garbage[] = {
        "02 00 80 00 00",
        "02 00 80 00 00 00 00 00 00 00 80 80 80 80 10 01 00",
        "02 00 80 00 00 00 00 00 00 00 01",
    };
    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
        uint8_t b[64];
        size_t n = hex(garbage[i], b, sizeof(b));
        sd_reader r = sd_reader_make(sd_bytes_make(b, n));
        sd_value *v = NULL;
        assert_int_equal(sd_coder_decode(c, &r, true, &v, NULL), SD_EPROTO);
        assert_null(v);
        /* Skipping finds boundaries without checking values, so only truncation fails it. */
        r = sd_reader_make(sd_bytes_make(b, n));
        assert_int_equal(sd_coder_skip(c, &r, true, NULL), i == 1 ? SD_OK : SD_EPROTO);
    }
    sd_buf big = { 0 };
    assert_int_equal(sd_buf_append(&big, "\x02\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00", 11),
                     SD_OK);
    assert_int_equal(sd_buf_put_varint(&big, SD_CODER_MAX_DECIMAL_BYTES + 1), SD_OK);
    for (int k = 0; k <= SD_CODER_MAX_DECIMAL_BYTES; k++) {
        assert_int_equal(sd_buf_append_byte(&big, 0x11), SD_OK);
    }
    sd_reader r = sd_reader_make(sd_buf_bytes(&big));
    sd_value *v = NULL;
    assert_int_equal(sd_coder_decode(c, &r, true, &v, NULL), SD_ETOOBIG);
    r = sd_reader_make(sd_buf_bytes(&big));
    assert_int_equal(sd_coder_skip(c, &r, true, NULL), SD_OK);
    sd_buf_deinit(&big);

    /* OOM loop over a decode and an encode with a decimal. */
    uint8_t b[64];
    size_t n = hex(rows[1].python, b, sizeof(b));
    int k;
    for (k = 1; k < 1000; k++) {
        sd_reader rr = sd_reader_make(sd_bytes_make(b, n));
        sd_value *got = NULL;
        sd_buf out = { 0 };
        sd_alloc_fail_after(k, 1);
        sd_status st = sd_coder_decode(c, &rr, true, &got, NULL);
        if (st == SD_OK) {
            st = sd_coder_encode(c, got, true, &out, NULL);
        }
        sd_alloc_fail_after(0, 0);
        sd_value_destroy(got);
        sd_buf_deinit(&out);
        if (st == SD_OK) {
            break;
        }
        assert_int_equal(st, SD_ENOMEM);
    }
    assert_true(k > 1 && k < 1000);
    sd_coder_destroy(c);

    /* millis_instant and decimal must have their Beam representations. */
    const char *wrong_repr = "0a 30 0a 01 74 1a 2b 3a 29 0a 23 62 65 61 6d 3a 6c 6f 67 69 63 61 6c "
                             "5f 74 79 70 65 3a 6d 69 6c 6c 69 73 5f 69 6e 73 74 61 6e 74 3a 76 "
                             "31 1a 02 10 07";
    assert_null(row_coder(wrong_repr, SD_EPROTO));
}

/* The state behind the token "t": the varints 10 and 11. */
static sd_status read_t(void *ctx, sd_bytes token, sd_buf *out, sd_err *err)
{
    int *calls = ctx;
    (*calls)++;
    if (token.len == 1 && token.ptr[0] == 't') {
        return sd_buf_append(out, "\x0a\x0b", 2);
    }
    if (token.len == 1 && token.ptr[0] == 'g') {
        return sd_buf_append(out, "\x80", 1); /* a truncated varint */
    }
    return sd_err_set(err, SD_ENOTFOUND, "no state for the token");
}

static void test_state_backed_read(void **state)
{
    (void)state;
    sd_coder *c = mk("sbi(varint)");
    /* [5], then the token "t"; and the same with token "x" (unknown) and "g" (bad state). */
    uint8_t with_t[] = { 0xff, 0xff, 0xff, 0xff, 0x01, 0x05, 0xff, 0xff, 0xff,
                         0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 't' };
    int calls = 0;
    sd_decode_opts opts = { .state_read = read_t, .state_ctx = &calls };
    sd_err err;
    sd_err_clear(&err);

    /* Without a state reader the token stays in the value. */
    sd_reader r = sd_reader_make(sd_bytes_make(with_t, sizeof(with_t)));
    sd_value *v = NULL;
    assert_int_equal(sd_coder_decode_with(c, &r, true, NULL, &v, &err), SD_OK);
    assert_true(v->has_token);
    assert_int_equal(v->n_items, 1);
    assert_int_equal(v->len, 1);
    sd_value_destroy(v);

    /* With one, the list holds every element and no token. */
    r = sd_reader_make(sd_bytes_make(with_t, sizeof(with_t)));
    assert_int_equal(sd_coder_decode_with(c, &r, true, &opts, &v, &err), SD_OK);
    assert_true(sd_reader_done(&r));
    assert_int_equal(calls, 1);
    assert_false(v->has_token);
    assert_int_equal(v->n_items, 3);
    assert_int_equal(v->items[0]->i, 5);
    assert_int_equal(v->items[1]->i, 10);
    assert_int_equal(v->items[2]->i, 11);
    sd_value_destroy(v);

    /* The reader's errors and unparsable state fail the decode and leave r alone. */
    static const struct {
        char token;
        sd_status want;
    } fails[] = { { 'x', SD_ENOTFOUND }, { 'g', SD_EPROTO } };

    for (size_t i = 0; i < sizeof(fails) / sizeof(fails[0]); i++) {
        with_t[sizeof(with_t) - 1] = (uint8_t)fails[i].token;
        r = sd_reader_make(sd_bytes_make(with_t, sizeof(with_t)));
        sd_err_clear(&err);
        assert_int_equal(sd_coder_decode_with(c, &r, true, &opts, &v, &err), fails[i].want);
        assert_null(v);
        assert_ptr_equal(r.p, with_t);
    }
    with_t[sizeof(with_t) - 1] = 't';

    /* OOM loop with the reader. */
    int k;
    for (k = 1; k < 1000; k++) {
        r = sd_reader_make(sd_bytes_make(with_t, sizeof(with_t)));
        sd_alloc_fail_after(k, 1);
        sd_status st = sd_coder_decode_with(c, &r, true, &opts, &v, NULL);
        sd_alloc_fail_after(0, 0);
        if (st == SD_OK) {
            assert_int_equal(v->n_items, 3);
            sd_value_destroy(v);
            break;
        }
        assert_int_equal(st, SD_ENOMEM);
        assert_null(v);
    }
    assert_true(k > 1 && k < 1000);
    sd_coder_destroy(c);

    /* Elements of zero size cannot be counted in a state stream (the reader gives "\x0a"). */
    sd_coder *gw = mk("sbi(gw)");
    uint8_t gw_t[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                       0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 't' };
    r = sd_reader_make(sd_bytes_make(gw_t, sizeof(gw_t)));
    sd_err_clear(&err);
    assert_int_equal(sd_coder_decode_with(gw, &r, true, &opts, &v, &err), SD_EPROTO);
    assert_true(contains(sd_err_msg(&err), "zero encoded size"));
    sd_coder_destroy(gw);
}

static void test_decode_oom(void **state)
{
    (void)state;

    static const struct {
        const char *spec;
        const char *bytes;
    } rows[] = {
        { "wv(kv(str,iter(varint)),iw)",
          "80 00 00 00 00 00 00 05 00 00 00 01 80 00 00 00 00 00 00 0a 0a 0f 01 6b 00 00 00 02 "
          "01 02" },
        { "timer(str,gw)", "03 6b 65 79 03 74 61 67 00 00 00 01 00 80 00 00 00 00 00 04 d2 80 00 "
                           "00 00 00 00 16 2e 0f" },
        { "sbi(bytes)", "ff ff ff ff 01 01 61 ff ff ff ff ff ff ff ff ff 01 02 74 74" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t buf[128];
        size_t len = hex(rows[i].bytes, buf, sizeof(buf));
        sd_coder *c = mk(rows[i].spec);
        int n;
        for (n = 1; n < 1000; n++) {
            sd_reader r = sd_reader_make(sd_bytes_make(buf, len));
            sd_value *v = NULL;
            sd_alloc_fail_after(n, 1);
            sd_status st = sd_coder_decode(c, &r, true, &v, NULL);
            sd_alloc_fail_after(0, 0);
            if (st == SD_OK) {
                assert_true(sd_reader_done(&r));
                sd_value_destroy(v);
                break;
            }
            assert_int_equal(st, SD_ENOMEM);
            assert_null(v);
            assert_ptr_equal(r.p, buf);
        }
        assert_true(n > 1 && n < 1000);
        sd_coder_destroy(c);
    }
    /* Row decoding too, from the vectors' schema. */
    uint8_t payload[128];
    size_t pn = hex(ROW_SCHEMA_HEX, payload, sizeof(payload));
    uint8_t data[64];
    size_t dn = hex("04 00 03 66 6f 6f a9 46 3f b9 99 99 99 99 99 9a 00 00 00 02 01 61 01 62", data,
                    sizeof(data));
    for (int n = 1; n < 1000; n++) {
        sd_coder *c = NULL;
        sd_value *v = NULL;
        sd_alloc_fail_after(n, 1);
        sd_status st = sd_coder_from_urn(ROW, sd_bytes_make(payload, pn), NULL, 0, &c, NULL);
        if (st == SD_OK) {
            sd_reader r = sd_reader_make(sd_bytes_make(data, dn));
            st = sd_coder_decode(c, &r, true, &v, NULL);
        }
        sd_alloc_fail_after(0, 0);
        sd_value_destroy(v);
        sd_coder_destroy(c);
        if (st == SD_OK) {
            break;
        }
        assert_int_equal(st, SD_ENOMEM);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_new_and_flags),
        cmocka_unit_test(test_build_ok),
        cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_build_oom),
        cmocka_unit_test(test_skip_table),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_panes),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_wv_roundtrip),
        cmocka_unit_test(test_param_wv),
        cmocka_unit_test(test_timers),
        cmocka_unit_test(test_iterable_reader),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_decode_oom),
        cmocka_unit_test(test_shared_kv_chain),
        cmocka_unit_test(test_decimal_text),
        cmocka_unit_test(test_row_logical_types),
        cmocka_unit_test(test_state_backed_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
