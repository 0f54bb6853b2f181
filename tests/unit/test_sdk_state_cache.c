/*
 * The C SDK worker's user-state cache across bundles (sdk-harness/src/state_cache.c): values
 * kept per (token, state key), dropped when a stage's token changes or a bundle with the token
 * fails, appends followed only on a value held whole, and an LRU within a byte budget.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sdk-harness/src/state_cache.h"

#define B(s) sd_bytes_make((s), strlen(s))

/* The cached value of key under token as a string ("-" when not held). */
static const char *get(sd__scache *c, const char *desc, const char *token, const char *key)
{
    static char out[2048];
    sd_buf b;
    sd_buf_init(&b, 0);
    if (!sd__scache_get(c, desc, B(token), B(key), &b)) {
        sd_buf_deinit(&b);
        return "-";
    }
    assert_true(b.len < sizeof(out));
    if (b.len > 0) {
        memcpy(out, b.data, b.len);
    }
    out[b.len] = '\0';
    sd_buf_deinit(&b);
    return out;
}

static void test_kept_while_the_token_stays(void **state)
{
    (void)state;
    sd__scache *c = sd__scache_new(1 << 20);
    assert_non_null(c);
    assert_true(sd__scache_begin(c, "d1", B("t1")));
    assert_string_equal(get(c, "d1", "t1", "k"), "-");
    sd__scache_update(c, "d1", B("t1"), B("k"), SD_SCACHE_PUT, B("ab"));
    sd__scache_update(c, "d1", B("t1"), B("k"), SD_SCACHE_APPEND, B("c"));
    /* An append to a value not held keeps nothing (the whole value is unknown). */
    sd__scache_update(c, "d1", B("t1"), B("j"), SD_SCACHE_APPEND, B("x"));
    sd__scache_update(c, "d1", B("t1"), B("e"), SD_SCACHE_CLEAR, SD_BYTES_NULL);
    /* The next bundle, same token: all still there. */
    assert_true(sd__scache_begin(c, "d1", B("t1")));
    assert_string_equal(get(c, "d1", "t1", "k"), "abc");
    assert_string_equal(get(c, "d1", "t1", "j"), "-");
    assert_string_equal(get(c, "d1", "t1", "e"), "");
    /* Another stage's token does not disturb d1's entries. */
    assert_true(sd__scache_begin(c, "d2", B("u1")));
    assert_string_equal(get(c, "d1", "t1", "k"), "abc");
    /* A new token for d1: its old entries go, and are not found under the new one. */
    assert_true(sd__scache_begin(c, "d1", B("t2")));
    assert_string_equal(get(c, "d1", "t2", "k"), "-");
    assert_string_equal(get(c, "d1", "t1", "k"), "-");
    sd__scache_stats s = sd__scache_stats_get(c);
    assert_int_equal(s.entries, 0);
    assert_int_equal(s.bytes, 0);
    assert_int_equal(s.token_changes, 1);
    sd__scache_free(c);
}

static void test_a_failed_bundle_kills_its_token(void **state)
{
    (void)state;
    sd__scache *c = sd__scache_new(1 << 20);
    assert_true(sd__scache_begin(c, "d1", B("t1")));
    sd__scache_update(c, "d1", B("t1"), B("k"), SD_SCACHE_PUT, B("v"));
    sd__scache_fail(c, "d1", B("t1"));
    assert_string_equal(get(c, "d1", "t1", "k"), "-");
    /* Bundles that still come with the token keep nothing under it. */
    assert_false(sd__scache_begin(c, "d1", B("t1")));
    sd__scache_update(c, "d1", B("t1"), B("k"), SD_SCACHE_PUT, B("v"));
    assert_string_equal(get(c, "d1", "t1", "k"), "-");
    /* A new token starts afresh. */
    assert_true(sd__scache_begin(c, "d1", B("t2")));
    sd__scache_update(c, "d1", B("t2"), B("k"), SD_SCACHE_PUT, B("w"));
    assert_string_equal(get(c, "d1", "t2", "k"), "w");
    sd__scache_free(c);
}

static void test_no_token_no_budget(void **state)
{
    (void)state;
    sd__scache *c = sd__scache_new(1 << 20);
    assert_false(sd__scache_begin(c, "d1", SD_BYTES_NULL));
    sd__scache_free(c);
    c = sd__scache_new(0);
    assert_false(sd__scache_begin(c, "d1", B("t1")));
    sd__scache_free(c);
    assert_false(sd__scache_begin(NULL, "d1", B("t1")));
}

/* Within the budget, least recently used first; a value alone over the budget is not kept. */
static void test_lru_within_the_budget(void **state)
{
    (void)state;
    char big[1000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sd__scache *c = sd__scache_new(4096);
    assert_true(sd__scache_begin(c, "d", B("t")));
    sd__scache_update(c, "d", B("t"), B("k1"), SD_SCACHE_PUT, B(big));
    sd__scache_update(c, "d", B("t"), B("k2"), SD_SCACHE_PUT, B(big));
    sd__scache_update(c, "d", B("t"), B("k3"), SD_SCACHE_PUT, B(big));
    assert_string_equal(get(c, "d", "t", "k1"), big); /* k1 now the most recent */
    sd__scache_update(c, "d", B("t"), B("k4"), SD_SCACHE_PUT, B(big));
    sd__scache_stats s = sd__scache_stats_get(c);
    assert_true(s.bytes <= 4096);
    assert_int_equal(s.evictions, 1);
    assert_string_equal(get(c, "d", "t", "k2"), "-"); /* the least recently used went */
    assert_string_equal(get(c, "d", "t", "k1"), big);
    assert_string_equal(get(c, "d", "t", "k3"), big);
    assert_string_equal(get(c, "d", "t", "k4"), big);
    /* Appends grow a value past the budget: it goes rather than the cache overflowing. */
    for (int i = 0; i < 5; i++) {
        sd__scache_update(c, "d", B("t"), B("k4"), SD_SCACHE_APPEND, B(big));
    }
    s = sd__scache_stats_get(c);
    assert_true(s.bytes <= 4096);
    assert_string_equal(get(c, "d", "t", "k4"), "-");
    /* A value read whole over the budget is not kept, and replaces what was held. */
    char huge[5000];
    memset(huge, 'y', sizeof(huge) - 1);
    huge[sizeof(huge) - 1] = '\0';
    sd__scache_update(c, "d", B("t"), B("k3"), SD_SCACHE_PUT, B(huge));
    assert_string_equal(get(c, "d", "t", "k3"), "-");
    s = sd__scache_stats_get(c);
    assert_true(s.bytes <= 4096);
    sd__scache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_while_the_token_stays),
        cmocka_unit_test(test_a_failed_bundle_kills_its_token),
        cmocka_unit_test(test_no_token_no_budget),
        cmocka_unit_test(test_lru_within_the_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
