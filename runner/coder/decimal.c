/*
 * Sundial: decimal numbers as text, for the beam:logical_type:decimal:v1 row fields.
 *
 * On the wire a decimal is varint(scale) followed by its unscaled integer as nested bytes in
 * big-endian two's complement (Java's BigDecimalCoder; Python's DecimalCoder matches it): the
 * number is unscaled * 10^-scale. In the value model the field is BYTES holding the number's
 * text, which is what the logical type's BYTES representation holds in the Python SDK
 * (str(Decimal)) and what the cross-SDK vectors write. Text and wire form convert both ways
 * without loss, because the text keeps the scale: the text is written the way Java's
 * BigDecimal.toString() and Python's str(Decimal) both write it:
 *
 *   digits = the unscaled magnitude in decimal, adjusted = (digits - 1) - scale
 *   scale >= 0 and adjusted >= -6:  plain, with the point `scale` digits from the right,
 *                                   padded with zeros ("0.0", "-100.123", "0.000001")
 *   otherwise:                      d[.ddd]E+n / E-n with n = adjusted ("5E+2", "1.23E-7")
 *
 * and parsed back from any [+-]digits[.digits][(e|E)[+-]digits] text, whose scale is the
 * number of fraction digits minus the exponent. The only thing text cannot carry is the sign of
 * a zero ("-0.0" is read as 0 with scale 1; the wire has no negative zero either).
 *
 * Base conversion is quadratic in the length of the number, so both directions stop at
 * SD_CODER_MAX_DECIMAL_BYTES bytes of unscaled value (about 19,700 digits): enough for any
 * real decimal, and a hostile value cannot cost more than a few million limb operations.
 * The arithmetic uses 32-bit limbs in base 2^32, least significant first, and divides or
 * multiplies by 10^9 at a time.
 */
#include <limits.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/coder/coder_int.h"

#define BILLION 1000000000u

/* Most digits a parsed coefficient may have (SD_CODER_MAX_DECIMAL_BYTES * 8 * log10(2)). */
#define MAX_DIGITS ((size_t)SD_CODER_MAX_DECIMAL_BYTES * 8 * 30103 / 100000)

/* Divide limbs[0..n) by d in place; returns the remainder. */
static uint32_t limbs_divmod(uint32_t *limbs, size_t n, uint32_t d)
{
    uint64_t rem = 0;
    for (size_t i = n; i-- > 0;) {
        uint64_t cur = (rem << 32) | limbs[i];
        limbs[i] = (uint32_t)(cur / d);
        rem = cur % d;
    }
    return (uint32_t)rem;
}

/* limbs[0..*n) = limbs * mul + add; the caller guarantees room for one more limb. */
static void limbs_muladd(uint32_t *limbs, size_t *n, uint32_t mul, uint32_t add)
{
    uint64_t carry = add;
    for (size_t i = 0; i < *n; i++) {
        uint64_t cur = (uint64_t)limbs[i] * mul + carry;
        limbs[i] = (uint32_t)cur;
        carry = cur >> 32;
    }
    if (carry != 0) {
        limbs[(*n)++] = (uint32_t)carry;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Wire form -> text                                                                          */
/* ------------------------------------------------------------------------------------------ */

/*
 * OUT: digits (caller frees with sd_free), the magnitude of the two's complement big-endian
 * value in decimal without leading zeros ("0" for zero), and its length and sign.
 */
static sd_status magnitude_digits(sd_bytes unscaled, char **out, size_t *out_len, bool *negative)
{
    size_t n = unscaled.len;
    *negative = n > 0 && (unscaled.ptr[0] & 0x80) != 0;
    size_t n_limbs = n / 4 + 1;
    uint32_t *limbs = sd_calloc(n_limbs, sizeof(*limbs));
    /* 9 digits per 10^9 chunk; a limb holds fewer than 10 digits. */
    size_t cap = n_limbs * 10 + 1;
    char *digits = sd_malloc(cap);
    if (limbs == NULL || digits == NULL) {
        sd_free(limbs);
        sd_free(digits);
        return SD_ENOMEM;
    }
    /* Magnitude: for a negative value invert every byte and add one (-x = ~x + 1). */
    uint32_t carry = *negative ? 1 : 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t b = unscaled.ptr[n - 1 - k];
        if (*negative) {
            b = (~b & 0xffu) + carry;
            carry = b >> 8;
            b &= 0xffu;
        }
        limbs[k / 4] |= b << (8 * (k % 4));
    }
    size_t used = n_limbs;
    size_t len = 0;
    /* Chunks of 9 digits come out least significant first; written backwards from the end. */
    char *end = digits + cap;
    char *p = end;
    do {
        uint32_t chunk = limbs_divmod(limbs, used, BILLION);
        while (used > 0 && limbs[used - 1] == 0) {
            used--;
        }
        for (int k = 0; k < 9 && (used > 0 || chunk != 0 || k == 0); k++) {
            *--p = (char)('0' + chunk % 10);
            chunk /= 10;
        }
    } while (used > 0);
    len = (size_t)(end - p);
    memmove(digits, p, len);
    digits[len] = '\0';
    sd_free(limbs);
    *out = digits;
    *out_len = len;
    return SD_OK;
}

/* Append digits[0..n) with a point `frac` digits from the right, zero-padded on the left. */
static sd_status put_plain(sd_buf *out, const char *digits, size_t n, size_t frac)
{
    sd_status st;
    if (frac == 0) {
        return sd_buf_append(out, digits, n);
    }
    if (n > frac) {
        if ((st = sd_buf_append(out, digits, n - frac)) != SD_OK ||
            (st = sd_buf_append_byte(out, '.')) != SD_OK) {
            return st;
        }
        return sd_buf_append(out, digits + n - frac, frac);
    }
    if ((st = sd_buf_append(out, "0.", 2)) != SD_OK) {
        return st;
    }
    for (size_t k = n; k < frac; k++) {
        if ((st = sd_buf_append_byte(out, '0')) != SD_OK) {
            return st;
        }
    }
    return sd_buf_append(out, digits, n);
}

sd_status sd__coder_decimal_format(int32_t scale, sd_bytes unscaled, sd_buf *out)
{
    if (unscaled.len > SD_CODER_MAX_DECIMAL_BYTES) {
        return SD_ETOOBIG;
    }
    char *digits = NULL;
    size_t n = 0;
    bool negative = false;
    sd_status st = magnitude_digits(unscaled, &digits, &n, &negative);
    if (st != SD_OK) {
        return st;
    }
    int64_t adjusted = (int64_t)n - 1 - scale;
    if (negative) {
        st = sd_buf_append_byte(out, '-');
    }
    if (st == SD_OK && scale >= 0 && adjusted >= -6) {
        st = put_plain(out, digits, n, (size_t)scale);
    } else if (st == SD_OK) {
        /* Scientific: the first digit, the others after a point, then the exponent. */
        if ((st = sd_buf_append_byte(out, (uint8_t)digits[0])) == SD_OK && n > 1 &&
            (st = sd_buf_append_byte(out, '.')) == SD_OK) {
            st = sd_buf_append(out, digits + 1, n - 1);
        }
        if (st == SD_OK) {
            st = sd_buf_printf(out, "E%c%lld", adjusted >= 0 ? '+' : '-',
                               (long long)(adjusted >= 0 ? adjusted : -adjusted));
        }
    }
    sd_free(digits);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Text -> wire form                                                                          */
/* ------------------------------------------------------------------------------------------ */

static bool is_digit(uint8_t ch)
{
    return ch >= '0' && ch <= '9';
}

/*
 * Append the minimal big-endian two's complement bytes of (negative ? -mag : mag), where mag is
 * limbs[0..n) (n may be 0 for zero). At least one byte is written.
 */
static sd_status put_twos_complement(const uint32_t *limbs, size_t n, bool negative, sd_buf *out)
{
    /* One spare byte in front leaves room for the sign. */
    size_t len = 4 * n + 1;
    uint8_t *b = sd_calloc(len, 1);
    if (b == NULL) {
        return SD_ENOMEM;
    }
    for (size_t k = 0; k < 4 * n; k++) {
        b[len - 1 - k] = (uint8_t)(limbs[k / 4] >> (8 * (k % 4)));
    }
    if (negative) {
        unsigned carry = 1;
        for (size_t k = len; k-- > 0;) {
            unsigned v = (~(unsigned)b[k] & 0xffu) + carry;
            b[k] = (uint8_t)v;
            carry = v >> 8;
        }
    }
    /* Drop leading bytes that only repeat the sign of the byte after them. */
    size_t start = 0;
    while (start + 1 < len && ((b[start] == 0x00 && (b[start + 1] & 0x80) == 0) ||
                               (b[start] == 0xff && (b[start + 1] & 0x80) != 0))) {
        start++;
    }
    sd_status st = sd_buf_append(out, b + start, len - start);
    sd_free(b);
    return st;
}

sd_status sd__coder_decimal_parse(sd_bytes text, int32_t *scale, sd_buf *unscaled, sd_err *err)
{
    const uint8_t *p = text.ptr, *end = text.ptr + text.len;
    bool negative = false;
    if (p < end && (*p == '+' || *p == '-')) {
        negative = *p == '-';
        p++;
    }
    const uint8_t *coef = p;
    size_t n_digits = 0, n_frac = 0;
    bool point = false;
    for (; p < end && (is_digit(*p) || (*p == '.' && !point)); p++) {
        if (*p == '.') {
            point = true;
        } else {
            n_digits++;
            n_frac += point ? 1 : 0;
        }
    }
    const uint8_t *coef_end = p;
    int64_t exponent = 0;
    bool exp_ok = true;
    if (p < end && (*p == 'e' || *p == 'E')) {
        bool exp_negative = false;
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            exp_negative = *p == '-';
            p++;
        }
        exp_ok = p < end;
        for (; p < end && is_digit(*p); p++) {
            /* Anything past 2^40 is out of range below anyway; stop growing there. */
            if (exponent < ((int64_t)1 << 40)) {
                exponent = exponent * 10 + (*p - '0');
            }
        }
        exponent = exp_negative ? -exponent : exponent;
    }
    if (n_digits == 0 || !exp_ok || p != end) {
        return sd_err_set(err, SD_EINVAL,
                          "decimal \"%.*s\": expected [+-]digits[.digits][E[+-]digits]",
                          (int)(text.len > 64 ? 64 : text.len), (const char *)text.ptr);
    }
    int64_t s = (int64_t)n_frac - exponent;
    if (s < INT32_MIN || s > INT32_MAX) {
        return sd_err_set(err, SD_EINVAL, "decimal \"%.*s\": scale %lld does not fit in 32 bits",
                          (int)(text.len > 64 ? 64 : text.len), (const char *)text.ptr,
                          (long long)s);
    }
    /* Leading zeros carry no value (but do count as digits of the scale above). */
    const uint8_t *q = coef;
    size_t significant = n_digits;
    while (q < coef_end && (*q == '0' || *q == '.') && significant > 0) {
        significant -= *q == '0' ? 1 : 0;
        q++;
    }
    if (significant > MAX_DIGITS) {
        return sd_err_set(err, SD_ETOOBIG, "decimal with %zu digits (limit %zu)", significant,
                          (size_t)MAX_DIGITS);
    }
    /* 10^9 < 2^30, so each 9-digit chunk adds less than one limb. */
    size_t n_limbs = 0;
    uint32_t *limbs = sd_calloc(significant / 9 + 2, sizeof(*limbs));
    if (limbs == NULL) {
        return sd_err_set(err, SD_ENOMEM, "decimal: out of memory");
    }
    uint32_t chunk = 0, mul = 1;
    for (; q < coef_end; q++) {
        if (*q == '.') {
            continue;
        }
        chunk = chunk * 10 + (uint32_t)(*q - '0');
        mul *= 10;
        if (mul == BILLION) {
            limbs_muladd(limbs, &n_limbs, mul, chunk);
            chunk = 0;
            mul = 1;
        }
    }
    if (mul > 1) {
        limbs_muladd(limbs, &n_limbs, mul, chunk);
    }
    while (n_limbs > 0 && limbs[n_limbs - 1] == 0) {
        n_limbs--;
    }
    sd_status st = put_twos_complement(limbs, n_limbs, negative && n_limbs > 0, unscaled);
    sd_free(limbs);
    if (st != SD_OK) {
        return sd_err_set(err, st, "decimal: cannot append (%s)", sd_status_name(st));
    }
    *scale = (int32_t)s;
    return SD_OK;
}
