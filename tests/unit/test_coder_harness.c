/*
 * Sundial tests: the shared harness of the coder tests (test_coder*.c, not the vectors).
 *
 * mk builds a coder tree from the compact notation ("wv(kv(str,lp(unk)),iw)", one name per
 * standard coder URN in SPEC_NAMES, "unk" for an unknown one) with sd_coder_from_urn and runs
 * it through sd__coder_check; hex and contains are the small helpers every file uses.
 */
#include "test_coder_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/coder/coder_int.h"

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

sd_coder *mk(const char *spec)
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
size_t hex(const char *h, uint8_t *buf, size_t cap)
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

bool contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}
