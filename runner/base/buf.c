/*
 * Sundial: byte buffers and readers.
 *
 * sd_buf grows geometrically (doubling, starting at 64 bytes) up to an optional maximum so that
 * a misbehaving peer cannot make the runner allocate without bound: the caller picks the limit
 * per use (e.g. a data-plane bundle cap). sd_reader is the single place where untrusted bytes are
 * parsed at the lowest level; every decoder in the project builds on it, so bounds checks live
 * here and nowhere else.
 */
#include "runner/base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"

sd_bytes sd_bytes_str(const char *s)
{
    return sd_bytes_make(s, s == NULL ? 0 : strlen(s));
}

bool sd_bytes_equal(sd_bytes a, sd_bytes b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

int sd_bytes_cmp(sd_bytes a, sd_bytes b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n == 0 ? 0 : memcmp(a.ptr, b.ptr, n);
    if (c != 0) {
        return c;
    }
    return (a.len > b.len) - (a.len < b.len);
}

void sd_buf_init(sd_buf *b, size_t max_size)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max_size = max_size;
}

void sd_buf_deinit(sd_buf *b)
{
    sd_free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void sd_buf_reset(sd_buf *b)
{
    b->len = 0;
}

sd_status sd_buf_reserve(sd_buf *b, size_t extra)
{
    size_t need;
    size_t cap;
    uint8_t *p;

    if (extra > SIZE_MAX - b->len) {
        return SD_ETOOBIG;
    }
    need = b->len + extra;
    if (b->max_size != 0 && need > b->max_size) {
        return SD_ETOOBIG;
    }
    if (need <= b->cap) {
        return SD_OK;
    }
    cap = b->cap == 0 ? 64 : b->cap;
    while (cap < need) {
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    }
    if (b->max_size != 0 && cap > b->max_size) {
        cap = b->max_size;
    }
    p = sd_realloc(b->data, cap);
    if (p == NULL) {
        return SD_ENOMEM;
    }
    b->data = p;
    b->cap = cap;
    return SD_OK;
}

/*
 * Small appends into room the buffer has are the common case (codecs write fields of a few
 * bytes): they take no call to reserve or memcpy. Measured with callgrind, the calls were most
 * of the cost of encoding a timer or a windowed value header.
 */
sd_status sd_buf_append(sd_buf *b, const void *p, size_t n)
{
    sd_status st;
    if (n <= 16 && n <= b->cap - b->len) {
        const uint8_t *src = p;
        for (size_t i = 0; i < n; i++) {
            b->data[b->len + i] = src[i];
        }
        b->len += n;
        return SD_OK;
    }
    st = sd_buf_reserve(b, n);
    if (st != SD_OK) {
        return st;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return SD_OK;
}

sd_status sd_buf_append_bytes(sd_buf *b, sd_bytes bytes)
{
    return sd_buf_append(b, bytes.ptr, bytes.len);
}

sd_status sd_buf_append_byte(sd_buf *b, uint8_t byte)
{
    return sd_buf_append(b, &byte, 1);
}

sd_status sd_buf_append_str(sd_buf *b, const char *s)
{
    return sd_buf_append(b, s, strlen(s));
}

sd_status sd_buf_printf(sd_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    sd_status st;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return SD_EINVAL;
    }
    st = sd_buf_reserve(b, (size_t)n + 1);
    if (st != SD_OK) {
        return st;
    }
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return SD_OK;
}

size_t sd_varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

sd_status sd_buf_put_varint(sd_buf *b, uint64_t v)
{
    if (v < 0x80 && b->cap > b->len) {
        b->data[b->len++] = (uint8_t)v;
        return SD_OK;
    }
    uint8_t tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    return sd_buf_append(b, tmp, n);
}

sd_status sd_buf_put_be32(sd_buf *b, uint32_t v)
{
    sd_status st = b->cap - b->len >= 4 ? SD_OK : sd_buf_reserve(b, 4);
    if (st != SD_OK) {
        return st;
    }
    uint8_t *q = b->data + b->len;
    q[0] = (uint8_t)(v >> 24);
    q[1] = (uint8_t)(v >> 16);
    q[2] = (uint8_t)(v >> 8);
    q[3] = (uint8_t)v;
    b->len += 4;
    return SD_OK;
}

sd_status sd_buf_put_be64(sd_buf *b, uint64_t v)
{
    sd_status st = b->cap - b->len >= 8 ? SD_OK : sd_buf_reserve(b, 8);
    if (st != SD_OK) {
        return st;
    }
    uint8_t *q = b->data + b->len;
    for (int i = 0; i < 8; i++) {
        q[i] = (uint8_t)(v >> (56 - 8 * i));
    }
    b->len += 8;
    return SD_OK;
}

sd_status sd_buf_put_lp(sd_buf *b, sd_bytes bytes)
{
    if (bytes.len < 0x80 && bytes.len < b->cap - b->len) {
        /* One length byte and room for all: written in place (keys are put per lock). */
        b->data[b->len] = (uint8_t)bytes.len;
        if (bytes.len > 0) {
            memcpy(b->data + b->len + 1, bytes.ptr, bytes.len);
        }
        b->len += 1 + bytes.len;
        return SD_OK;
    }
    size_t old = b->len;
    sd_status st = sd_buf_put_varint(b, bytes.len);
    if (st == SD_OK) {
        st = sd_buf_append_bytes(b, bytes);
    }
    if (st != SD_OK) {
        b->len = old;
    }
    return st;
}

sd_bytes sd_buf_bytes(const sd_buf *b)
{
    return sd_bytes_make(b->data, b->len);
}

uint8_t *sd_buf_take(sd_buf *b, size_t *len)
{
    uint8_t *p = b->data;
    *len = b->len;
    if (b->len == 0) {
        sd_free(p);
        p = NULL;
    }
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}

sd_status sd_reader_varint(sd_reader *r, uint64_t *out)
{
    uint64_t v = 0;
    const uint8_t *p = r->p;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= r->end) {
            return SD_EPROTO;
        }
        uint8_t byte = *p++;
        if (shift == 63 && (byte & 0x7e) != 0) {
            return SD_EPROTO; /* more than 64 bits */
        }
        v |= (uint64_t)(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0) {
            r->p = p;
            *out = v;
            return SD_OK;
        }
    }
    return SD_EPROTO;
}

sd_status sd_reader_be32(sd_reader *r, uint32_t *out)
{
    if (sd_reader_left(r) < 4) {
        return SD_EPROTO;
    }
    *out = ((uint32_t)r->p[0] << 24) | ((uint32_t)r->p[1] << 16) | ((uint32_t)r->p[2] << 8) |
           (uint32_t)r->p[3];
    r->p += 4;
    return SD_OK;
}

sd_status sd_reader_be64(sd_reader *r, uint64_t *out)
{
    uint64_t v = 0;
    if (sd_reader_left(r) < 8) {
        return SD_EPROTO;
    }
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | r->p[i];
    }
    r->p += 8;
    *out = v;
    return SD_OK;
}

sd_status sd_reader_byte(sd_reader *r, uint8_t *out)
{
    if (r->p >= r->end) {
        return SD_EPROTO;
    }
    *out = *r->p++;
    return SD_OK;
}

sd_status sd_reader_take(sd_reader *r, size_t n, sd_bytes *out)
{
    if (sd_reader_left(r) < n) {
        return SD_EPROTO;
    }
    *out = sd_bytes_make(r->p, n);
    if (n > 0) {
        r->p += n; /* a reader over NULL bytes must not compute NULL + 0 */
    }
    return SD_OK;
}

sd_status sd_reader_lp(sd_reader *r, sd_bytes *out)
{
    if (r->p < r->end && *r->p < 0x80 && (size_t)*r->p < sd_reader_left(r)) {
        /* One length byte (the common case): no varint loop. */
        *out = sd_bytes_make(r->p + 1, *r->p);
        r->p += 1 + *r->p;
        return SD_OK;
    }
    sd_reader save = *r;
    uint64_t n;
    sd_status st = sd_reader_varint(r, &n);
    if (st != SD_OK) {
        return st;
    }
    if (n > sd_reader_left(r)) {
        *r = save;
        return SD_EPROTO;
    }
    return sd_reader_take(r, (size_t)n, out);
}
