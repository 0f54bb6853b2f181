/* Sundial: coder internals shared by the runner/coder .c files and their tests. */
#ifndef SD_RUNNER_CODER_CODER_INT_H
#define SD_RUNNER_CODER_CODER_INT_H

#include "runner/coder/coder.h"
#include "runner/coder/schema.h"
#include "runner/coder/value.h"

/* Deepest coder tree sd_coder_build accepts (bounds recursion in every coder walk). */
#define SD_CODER_MAX_DEPTH 64

/* Most windows one windowed value or timer may carry (a 4-byte count could claim 2^31). */
#define SD_CODER_MAX_WINDOWS 65536

/* Most elements of zero encoded size (e.g. global windows) one iterable may claim. */
#define SD_CODER_MAX_EMPTY_ITEMS 65536

/* Most bytes of unscaled value a decimal row field may have (decimal.c bounds its work). */
#define SD_CODER_MAX_DECIMAL_BYTES 8192

/*
 * Append the text of the decimal unscaled * 10^-scale (unscaled: big-endian two's complement,
 * empty meaning 0), written as Java's BigDecimal.toString() and Python's str(Decimal) write
 * it ("-100.123", "0.0", "5E+2"). Returns SD_OK, SD_ETOOBIG (more than
 * SD_CODER_MAX_DECIMAL_BYTES bytes) or the sd_buf error (SD_ENOMEM, ...).
 */
sd_status sd__coder_decimal_format(int32_t scale, sd_bytes unscaled, sd_buf *out);

/*
 * Parse decimal text ([+-]digits[.digits][(e|E)[+-]digits]; "1.50" keeps scale 2).
 * OUT: scale; the unscaled value's minimal big-endian two's complement bytes (at least one)
 * appended to unscaled. Returns SD_OK, SD_EINVAL (not a decimal, or the scale does not fit
 * 32 bits), SD_ETOOBIG (too many digits) or SD_ENOMEM; on error unscaled may hold a partial
 * append.
 */
sd_status sd__coder_decimal_parse(sd_bytes text, int32_t *scale, sd_buf *unscaled, sd_err *err);

/*
 * Record an error about coder c: "coder <id> (<urn>): <message>" (or "coder <urn>: ..." when
 * the node has no id). Returns code.
 */
sd_status sd__coder_fail(sd_err *err, const sd_coder *c, sd_status code, const char *fmt, ...)
    SD_PRINTF(4, 5);

/* The error for a value of a logical type without a representation (SD_LOGICAL_OPAQUE):
 * skipping, decoding and encoding one all refuse it the same way. Returns SD_EUNIMPL. */
sd_status sd__coder_opaque_field(sd_err *err, const sd_coder *c, const sd_field_type *t);

/* Encoded size when it is the same for every value (0 for global windows), else -1. */
long sd__coder_fixed_size(const sd_coder *c);

/* Skip one value; r may be left mid-value on error (the public wrappers restore it). */
sd_status sd__coder_skip(const sd_coder *c, sd_reader *r, bool nested, sd_err *err);

/* Skip one row value of schema s (row coder c names the errors). */
sd_status
sd__coder_row_skip(const sd_coder *c, const sd_schema *s, sd_reader *r, int depth, sd_err *err);

/*
 * Read an iterable count prefix: OUT: count (>= 0) for the known-length form, or unknown = true
 * for the -1 form. SD_EPROTO for other negative counts or truncation.
 */
sd_status sd__coder_iterable_count(const sd_coder *c,
                                   sd_reader *r,
                                   int64_t *count,
                                   bool *unknown,
                                   sd_err *err);

/* Decode the list of windows of a windowed value or timer into ws. */
sd_status sd__coder_windows_decode(const sd_coder *owner,
                                   const sd_coder *window_coder,
                                   sd_reader *r,
                                   sd_windows *ws,
                                   sd_err *err);

/*
 * Invariant checker for tests: NULL when the tree is consistent, else a sentence naming the
 * first broken invariant (kind/URN agreement, component counts, flags, depth, derived data).
 */
const char *sd__coder_check(const sd_coder *c);

/* --- value.c: helpers the decoder (value_decode.c) shares ------------------------------- */

/* Copy n bytes (plus a NUL) into v->bytes, replacing what it held. SD_OK or SD_ENOMEM. */
sd_status sd__coder_value_set_bytes(sd_value *v, const void *p, size_t n);

/* A new value of kind (bytes or string) holding a copy of p[0..n); NULL on OOM. */
sd_value *sd__coder_value_bytes_of(sd_value_kind kind, const void *p, size_t n);

/*
 * Append item to parent's items (any kind; takes ownership of item, freed on failure).
 * SD_ENOMEM when item is NULL (a failed constructor) or the array cannot grow.
 */
sd_status sd__coder_value_add_item(sd_value *parent, sd_value *item);

/* Parse a param_windowed_value payload into c->param (called by the builders). */
sd_status sd__coder_param_parse(sd_coder *c, sd_err *err);

#endif
