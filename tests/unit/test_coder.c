/*
 * Sundial tests: coder trees, skipping, windows, panes, windowed values, timers, iterables,
 * rows and the value model: edge cases, garbage and allocation failure.
 *
 * This file holds main and the tests of coder kinds and URNs and of building from a pipeline
 * table (sd_coder_build with a small table, its errors and its OOM loop); the other concerns
 * have a file each, run as one cmocka group per file: skipping, truncation and garbage
 * (test_coder_skip.c), panes, windows, windowed values, timers and iterables
 * (test_coder_windows.c), and the value model, rows, logical types and state-backed
 * iterables (test_coder_values.c). Coders are written in a compact notation, e.g.
 * "wv(kv(str,lp(unk)),iw)", and built by mk (test_coder_harness.h). Every built tree is run
 * through sd__coder_check. Garbage tests truncate valid encodings at every byte offset (each
 * prefix must fail with SD_EPROTO and leave the reader where it was) and feed deterministic
 * pseudo-random bytes to every entry point; under ASan/UBSan these prove the decoders never
 * read out of bounds.
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
#include "test_coder_harness.h"

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
    /* The WIRE column: what the planner sends as is (all else goes length-prefixed). */
    static const sd_coder_kind wire[] = {
        SD_CODER_BYTES,
        SD_CODER_STRING_UTF8,
        SD_CODER_VARINT,
        SD_CODER_DOUBLE,
        SD_CODER_BOOL,
        SD_CODER_KV,
        SD_CODER_ITERABLE,
        SD_CODER_NULLABLE,
        SD_CODER_LENGTH_PREFIX,
        SD_CODER_GLOBAL_WINDOW,
        SD_CODER_INTERVAL_WINDOW,
        SD_CODER_CUSTOM_WINDOW,
        SD_CODER_WINDOWED_VALUE,
        SD_CODER_TIMER,
    };
    size_t n_wire = 0;
    for (int k = 0; k <= (int)SD_CODER_UNKNOWN; k++) {
        n_wire += sd_coder_kind_wire((sd_coder_kind)k) ? 1 : 0;
    }
    assert_int_equal(n_wire, sizeof(wire) / sizeof(wire[0]));
    for (size_t i = 0; i < sizeof(wire) / sizeof(wire[0]); i++) {
        assert_true(sd_coder_kind_wire(wire[i]));
    }
    assert_int_equal(sd_coder_kind_components(SD_CODER_KV), 2);
    assert_int_equal(sd_coder_kind_components(SD_CODER_ROW), 0);
    assert_int_equal(sd_coder_kind_components(SD_CODER_UNKNOWN), -1);
    assert_int_equal(sd_coder_kind_components((sd_coder_kind)-1), -1);
    assert_false(sd_coder_kind_wire((sd_coder_kind)(SD_CODER_UNKNOWN + 1)));
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
    assert_int_equal(sd_coder_create(&chain[0], &err, SD_CODER_BOOL, NULL), SD_OK);
    for (int k = 1; k < 64; k++) {
        assert_int_equal(
            sd_coder_create(&chain[k], &err, SD_CODER_KV, chain[k - 1], chain[k - 1], NULL), SD_OK);
    }
    assert_true(sd__coder_fixed_size(chain[0]) == 1);
    assert_true(sd__coder_fixed_size(chain[62]) == (long)1 << 62);
    assert_true(sd__coder_fixed_size(chain[63]) == -1);

    /* An empty iterable of the 2^62-byte element skips at once; one element is truncated. */
    sd_coder *it = NULL;
    assert_int_equal(sd_coder_create(&it, &err, SD_CODER_ITERABLE, chain[62], NULL), SD_OK);
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
    assert_int_equal(sd_coder_create(&b, &err, SD_CODER_BYTES, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&v, &err, SD_CODER_VARINT, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&kv, &err, SD_CODER_KV, b, v, NULL), SD_OK);
    assert_null(sd__coder_check(kv));
    assert_ptr_equal(sd_coder_component(kv, 0), b);
    assert_null(sd_coder_component(kv, 2));
    assert_int_equal(sd_coder_create(&bad, &err, SD_CODER_KV, b, NULL), SD_EPROTO);
    assert_string_equal(sd_err_msg(&err), "coder beam:coder:kv:v1: expected 2 components, got 1");
    assert_null(bad);
    sd_err_clear(&err);
    assert_int_equal(sd_coder_create(&bad, &err, SD_CODER_ROW, NULL), SD_EINVAL);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),     cmocka_unit_test(test_new_and_flags),
        cmocka_unit_test(test_build_ok),  cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_build_oom), cmocka_unit_test(test_shared_kv_chain),
    };
    int failed = cmocka_run_group_tests_name("coder", tests, NULL, NULL);
    failed += test_coder_run_skip();
    failed += test_coder_run_windows();
    failed += test_coder_run_values();
    return failed;
}
