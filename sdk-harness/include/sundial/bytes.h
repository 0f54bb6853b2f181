/*
 * Sundial C SDK: byte slices, bounded growable buffers, and a bounds-checked reader.
 *
 * Elements, keys, configuration blobs and state values all travel as bytes: an sd_bytes
 * borrows them, an sd_buf builds them, an sd_reader walks them without ever reading past the
 * end (a short read is SD_EPROTO and leaves the cursor where it was).
 */
#ifndef SD_SUNDIAL_BYTES_H
#define SD_SUNDIAL_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sundial/export.h>
#include <sundial/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A borrowed byte range. Never owns its memory. */
typedef struct sd_bytes {
    const uint8_t *ptr;
    size_t len;
} sd_bytes;

#define SD_BYTES_NULL ((sd_bytes){ .ptr = NULL, .len = 0 })

static inline sd_bytes sd_bytes_make(const void *p, size_t n)
{
    sd_bytes b;
    b.ptr = (const uint8_t *)p;
    b.len = n;
    return b;
}

/* A C string as bytes (without the terminator). */
SD_API sd_bytes sd_bytes_str(const char *s);

/* True when both ranges hold the same bytes. */
SD_API bool sd_bytes_equal(sd_bytes a, sd_bytes b);

/* memcmp order, shorter first on a common prefix. */
SD_API int sd_bytes_cmp(sd_bytes a, sd_bytes b);

/*
 * A growable buffer with a maximum size. Initialise in place with sd_buf_init();
 * sd_buf_deinit() frees; a zeroed sd_buf is valid and empty with no limit. Appends that would
 * exceed max_size fail with SD_ETOOBIG and leave the buffer unchanged.
 */
typedef struct sd_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    size_t max_size; /* 0 = unlimited */
} sd_buf;

SD_API void sd_buf_init(sd_buf *b, size_t max_size);
SD_API void sd_buf_deinit(sd_buf *b);
/* Empty it, keep capacity. */
SD_API void sd_buf_reset(sd_buf *b);
/* Make room for at least `extra` more bytes. */
SD_API SD_MUST_CHECK sd_status sd_buf_reserve(sd_buf *b, size_t extra);
SD_API SD_MUST_CHECK sd_status sd_buf_append(sd_buf *b, const void *p, size_t n);
SD_API SD_MUST_CHECK sd_status sd_buf_append_bytes(sd_buf *b, sd_bytes bytes);
SD_API SD_MUST_CHECK sd_status sd_buf_append_byte(sd_buf *b, uint8_t byte);
SD_API SD_MUST_CHECK sd_status sd_buf_append_str(sd_buf *b, const char *s);
SD_API SD_MUST_CHECK sd_status sd_buf_printf(sd_buf *b, const char *fmt, ...) SD_PRINTF(2, 3);
/* Unsigned LEB128 of the 64-bit value (Beam varint: negative numbers take 10 bytes). */
SD_API SD_MUST_CHECK sd_status sd_buf_put_varint(sd_buf *b, uint64_t v);
/* Big-endian fixed-width integers. */
SD_API SD_MUST_CHECK sd_status sd_buf_put_be32(sd_buf *b, uint32_t v);
SD_API SD_MUST_CHECK sd_status sd_buf_put_be64(sd_buf *b, uint64_t v);
/* varint(len) + bytes: Beam's nested bytes encoding. */
SD_API SD_MUST_CHECK sd_status sd_buf_put_lp(sd_buf *b, sd_bytes bytes);
/* The contents as bytes (borrowed; valid until the next change). */
SD_API sd_bytes sd_buf_bytes(const sd_buf *b);
/*
 * Transfer ownership of the contents to the caller (free with sd_free) and leave the buffer
 * empty. OUT: len. Returns NULL for an empty buffer with *len = 0.
 */
SD_API uint8_t *sd_buf_take(sd_buf *b, size_t *len);

/* Number of bytes sd_buf_put_varint would write for v. */
SD_API size_t sd_varint_size(uint64_t v);

/*
 * A cursor over borrowed bytes. Every read checks bounds and returns SD_EPROTO on a short
 * read (without moving the cursor); nothing here can overrun.
 */
typedef struct sd_reader {
    const uint8_t *p;
    const uint8_t *end;
} sd_reader;

static inline sd_reader sd_reader_make(sd_bytes b)
{
    /* An empty field often has ptr == NULL, and NULL + 0 is undefined in C (clang's UBSan
     * reports "applying zero offset to null pointer"), so add only a non-zero length. */
    sd_reader r;
    r.p = b.ptr;
    r.end = b.len == 0 ? b.ptr : b.ptr + b.len;
    return r;
}

static inline size_t sd_reader_left(const sd_reader *r)
{
    return r->p == r->end ? 0 : (size_t)(r->end - r->p); /* no NULL - NULL */
}

static inline bool sd_reader_done(const sd_reader *r)
{
    return r->p >= r->end;
}

SD_API SD_MUST_CHECK sd_status sd_reader_varint(sd_reader *r, uint64_t *out);
SD_API SD_MUST_CHECK sd_status sd_reader_be32(sd_reader *r, uint32_t *out);
SD_API SD_MUST_CHECK sd_status sd_reader_be64(sd_reader *r, uint64_t *out);
SD_API SD_MUST_CHECK sd_status sd_reader_byte(sd_reader *r, uint8_t *out);
/* Take n bytes as a borrowed slice. */
SD_API SD_MUST_CHECK sd_status sd_reader_take(sd_reader *r, size_t n, sd_bytes *out);
/* varint(len) + bytes. */
SD_API SD_MUST_CHECK sd_status sd_reader_lp(sd_reader *r, sd_bytes *out);

#ifdef __cplusplus
}
#endif

#endif
