/*
 * Sundial tests: the coder tests' shared harness (test_coder_harness.c).
 *
 * test_coder is one executable built from test_coder.c (main, kinds and URNs, building from a
 * pipeline table), test_coder_skip.c, test_coder_windows.c and test_coder_values.c; each
 * file's tests stay static and run as one cmocka group through its test_coder_run_* function.
 */
#ifndef SD_TESTS_UNIT_TEST_CODER_HARNESS_H
#define SD_TESTS_UNIT_TEST_CODER_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/coder/coder.h"

#define UNKNOWN_URN "beam:coder:pickled_python:v1"

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

/* Build a coder from the compact notation (fails the test on a bad spec or a broken tree). */
sd_coder *mk(const char *spec);

/* "03 61 62 63" -> bytes (into buf, at most cap); fails the test on bad hex or overflow. */
size_t hex(const char *h, uint8_t *buf, size_t cap);

/* Does hay contain needle? */
bool contains(const char *hay, const char *needle);

/* The groups (one per file); each returns the number of failed tests. */
int test_coder_run_skip(void);
int test_coder_run_windows(void);
int test_coder_run_values(void);

#endif
