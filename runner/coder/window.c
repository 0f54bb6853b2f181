/*
 * Sundial: windows, pane info, windowed values and timers.
 *
 * These are the parts of an element the runner must understand, not merely skip: the engine
 * assigns elements to windows, compares timestamps against watermarks, and fires timers, so
 * it needs the decoded header of every windowed value and timer while the element itself
 * stays opaque bytes. The wire layouts (all timestamps 8-byte big-endian with the sign bit
 * flipped):
 *
 *   windowed value  = ts(8) | count(4) window... | pane | element
 *   timer           = key(nested) | tag(varint len + utf8) | count(4) window... | clear(1)
 *                     [ fire(8) | hold(8) | pane ]          (only when clear == 0)
 *   interval window = end(8) | varint(end - start)          global window = nothing
 *   custom window   = max_ts(8) | component encoding
 *   pane            = byte [varint index [varint nonspec_index]]
 *                     byte = form << 4 | timing << 2 | last << 1 | first
 *
 * A param_windowed_value writes only the element; its fixed timestamp, windows and pane come
 * from the coder payload (itself a windowed value of an empty bytes element), parsed once when
 * the coder is built. Window lists use sd_windows, which keeps up to SD_WINDOWS_INLINE windows
 * inline so that the common one-window element costs no allocation, and reuses its heap
 * storage between decodes. A hostile count is capped at SD_CODER_MAX_WINDOWS.
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/coder/coder.h"
#include "runner/coder/coder_int.h"

/* ------------------------------------------------------------------------------------------ */
/* Windows                                                                                    */
/* ------------------------------------------------------------------------------------------ */

sd_window sd_window_global(void)
{
    return (sd_window){ .start = SD_TIME_MIN, .end = SD_TIME_GLOBAL_MAX + 1, .global = true };
}

sd_window sd_window_interval(sd_time start, sd_time end)
{
    return (sd_window){ .start = start, .end = end };
}

sd_time sd_window_max_ts(const sd_window *w)
{
    if (w->global) {
        return SD_TIME_GLOBAL_MAX;
    }
    return w->end == INT64_MIN ? INT64_MIN : w->end - 1;
}

static int cmp_i64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b;
}

int sd_window_cmp(const sd_window *a, const sd_window *b)
{
    if (a->global != b->global) {
        return a->global ? -1 : 1;
    }
    if (a->global) {
        return 0;
    }
    int c = cmp_i64(sd_window_max_ts(a), sd_window_max_ts(b));
    if (c == 0) {
        c = cmp_i64(a->start, b->start);
    }
    if (c == 0 && a->custom != b->custom) {
        c = a->custom ? 1 : -1;
    }
    if (c == 0 && a->custom) {
        c = sd_bytes_cmp(a->custom_bytes, b->custom_bytes);
    }
    return c;
}

bool sd_window_equal(const sd_window *a, const sd_window *b)
{
    return sd_window_cmp(a, b) == 0;
}

sd_status
sd_window_encode(const sd_coder *window_coder, const sd_window *w, sd_buf *out, sd_err *err)
{
    sd_status st;
    switch (window_coder->kind) {
    case SD_CODER_GLOBAL_WINDOW:
        if (!w->global) {
            return sd__coder_fail(err, window_coder, SD_EINVAL,
                                  "cannot encode a non-global window");
        }
        return SD_OK;
    case SD_CODER_INTERVAL_WINDOW:
        if (w->global || w->custom || w->start > w->end) {
            return sd__coder_fail(err, window_coder, SD_EINVAL,
                                  "expected an interval window with start <= end");
        }
        if ((st = sd_coder_put_ts(out, w->end)) != SD_OK) {
            return sd__coder_fail(err, window_coder, st, "cannot append");
        }
        if ((st = sd_buf_put_varint(out, (uint64_t)w->end - (uint64_t)w->start)) != SD_OK) {
            return sd__coder_fail(err, window_coder, st, "cannot append");
        }
        return SD_OK;
    case SD_CODER_CUSTOM_WINDOW:
        if (!w->custom) {
            return sd__coder_fail(err, window_coder, SD_EINVAL,
                                  "expected a custom window (custom = true and its bytes)");
        }
        if ((st = sd_coder_put_ts(out, sd_window_max_ts(w))) != SD_OK ||
            (st = sd_buf_append_bytes(out, w->custom_bytes)) != SD_OK) {
            return sd__coder_fail(err, window_coder, st, "cannot append");
        }
        return SD_OK;
    case SD_CODER_UNKNOWN:
        return sd__coder_fail(err, window_coder, SD_EUNIMPL, "unknown window coder");
    default:
        return sd__coder_fail(err, window_coder, SD_EINVAL, "not a window coder");
    }
}

static sd_status window_decode(const sd_coder *wc, sd_reader *r, sd_window *w, sd_err *err)
{
    sd_time ts;
    uint64_t span;
    memset(w, 0, sizeof(*w));
    switch (wc->kind) {
    case SD_CODER_GLOBAL_WINDOW:
        *w = sd_window_global();
        return SD_OK;
    case SD_CODER_INTERVAL_WINDOW:
        if (sd_coder_get_ts(r, &ts) != SD_OK) {
            return sd__coder_fail(err, wc, SD_EPROTO, "truncated input: expected an 8-byte end");
        }
        if (sd_reader_varint(r, &span) != SD_OK) {
            return sd__coder_fail(err, wc, SD_EPROTO, "expected the window span (a varint)");
        }
        /* start = end - span must not wrap below INT64_MIN. */
        if (span > (uint64_t)ts - (uint64_t)INT64_MIN) {
            return sd__coder_fail(err, wc, SD_EPROTO,
                                  "window span %llu reaches below the "
                                  "smallest timestamp",
                                  (unsigned long long)span);
        }
        w->end = ts;
        w->start = (sd_time)((uint64_t)ts - span);
        return SD_OK;
    case SD_CODER_CUSTOM_WINDOW: {
        if (sd_coder_get_ts(r, &ts) != SD_OK) {
            return sd__coder_fail(err, wc, SD_EPROTO,
                                  "truncated input: expected an 8-byte max timestamp");
        }
        if (ts == INT64_MAX) {
            return sd__coder_fail(err, wc, SD_EPROTO, "max timestamp out of range");
        }
        sd_bytes body;
        sd_status st = sd_coder_slice(wc->components[0], r, true, &body, err);
        if (st != SD_OK) {
            return st;
        }
        w->start = SD_TIME_MIN;
        w->end = ts + 1;
        w->custom = true;
        w->custom_bytes = body;
        return SD_OK;
    }
    case SD_CODER_UNKNOWN:
        return sd__coder_fail(err, wc, SD_EUNIMPL, "unknown window coder");
    default:
        return sd__coder_fail(err, wc, SD_EINVAL, "not a window coder");
    }
}

sd_status sd_window_decode(const sd_coder *window_coder, sd_reader *r, sd_window *w, sd_err *err)
{
    sd_reader save = *r;
    sd_status st = window_decode(window_coder, r, w, err);
    if (st != SD_OK) {
        *r = save;
    }
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Window lists                                                                               */
/* ------------------------------------------------------------------------------------------ */

void sd_windows_init(sd_windows *ws)
{
    memset(ws, 0, sizeof(*ws));
}

void sd_windows_deinit(sd_windows *ws)
{
    sd_free(ws->heap);
    memset(ws, 0, sizeof(*ws));
}

static sd_status windows_reserve(sd_windows *ws, size_t n)
{
    if (n <= SD_WINDOWS_INLINE || n <= ws->heap_cap) {
        return SD_OK;
    }
    size_t cap = ws->heap_cap ? ws->heap_cap : 8;
    while (cap < n) {
        cap *= 2;
    }
    sd_window *h = sd_realloc(ws->heap, cap * sizeof(*h));
    if (h == NULL) {
        return SD_ENOMEM;
    }
    ws->heap = h;
    ws->heap_cap = cap;
    return SD_OK;
}

sd_status sd_windows_set(sd_windows *ws, const sd_window *windows, size_t n)
{
    sd_status st = windows_reserve(ws, n);
    if (st != SD_OK) {
        return st;
    }
    if (n > 0) {
        memmove(n > SD_WINDOWS_INLINE ? ws->heap : ws->small, windows, n * sizeof(*windows));
    }
    ws->n = n;
    return SD_OK;
}

sd_status sd_windows_push(sd_windows *ws, const sd_window *w)
{
    size_t n = ws->n + 1;
    sd_status st = windows_reserve(ws, n);
    if (st != SD_OK) {
        return st;
    }
    if (n == SD_WINDOWS_INLINE + 1) {
        /* Moving from inline to heap storage. */
        memcpy(ws->heap, ws->small, sizeof(ws->small));
    }
    (n > SD_WINDOWS_INLINE ? ws->heap : ws->small)[n - 1] = *w;
    ws->n = n;
    return SD_OK;
}

sd_status sd__coder_windows_decode(const sd_coder *owner,
                                   const sd_coder *window_coder,
                                   sd_reader *r,
                                   sd_windows *ws,
                                   sd_err *err)
{
    int64_t count;
    bool unknown;
    sd_status st = sd__coder_iterable_count(owner, r, &count, &unknown, err);
    if (st != SD_OK) {
        return st;
    }
    ws->n = 0;
    if (window_coder->kind == SD_CODER_GLOBAL_WINDOW && !unknown && count <= SD_WINDOWS_INLINE) {
        /* The common case, per element of a global-window PCollection: the windows take no
         * bytes, so skip the per-window decode and push (measured: a tenth of the engine's
         * GroupByKey in bench_engine). */
        static const sd_window global = { .start = SD_TIME_MIN,
                                          .end = SD_TIME_GLOBAL_MAX + 1,
                                          .global = true };
        for (int64_t i = 0; i < count; i++) {
            ws->small[i] = global;
        }
        ws->n = (size_t)count;
        return SD_OK;
    }
    for (;;) {
        uint64_t n = (uint64_t)count;
        if (unknown) {
            if (sd_reader_varint(r, &n) != SD_OK) {
                return sd__coder_fail(err, owner, SD_EPROTO,
                                      "truncated input: expected a window block size");
            }
            if (n == 0) {
                return SD_OK;
            }
        }
        if (n > SD_CODER_MAX_WINDOWS - ws->n) {
            return sd__coder_fail(err, owner, SD_EPROTO, "more than %d windows",
                                  SD_CODER_MAX_WINDOWS);
        }
        for (uint64_t i = 0; i < n; i++) {
            sd_window w;
            if ((st = window_decode(window_coder, r, &w, err)) != SD_OK) {
                return st;
            }
            if ((st = sd_windows_push(ws, &w)) != SD_OK) {
                return sd__coder_fail(err, owner, st, "out of memory for windows");
            }
        }
        if (!unknown) {
            return SD_OK;
        }
    }
}

static sd_status windows_encode(const sd_coder *window_coder,
                                const sd_window *windows,
                                size_t n,
                                sd_buf *out,
                                sd_err *err)
{
    sd_status st = sd_iterable_encode_begin(out, n);
    if (st != SD_OK) {
        return sd__coder_fail(err, window_coder, st, "cannot append the window count");
    }
    for (size_t i = 0; i < n; i++) {
        if ((st = sd_window_encode(window_coder, &windows[i], out, err)) != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Pane info                                                                                  */
/* ------------------------------------------------------------------------------------------ */

sd_status sd_pane_encode(const sd_pane *p, sd_buf *out)
{
    if (p->timing < SD_PANE_EARLY || p->timing > SD_PANE_UNKNOWN) {
        return SD_EINVAL;
    }
    uint8_t b = (uint8_t)((p->first ? 1 : 0) | (p->last ? 2 : 0) | (p->timing << 2));
    sd_status st;
    if ((p->index == 0 && p->nonspec_index == 0) || p->timing == SD_PANE_UNKNOWN) {
        return sd_buf_append_byte(out, b);
    }
    if (p->index == p->nonspec_index || p->timing == SD_PANE_EARLY) {
        if ((st = sd_buf_append_byte(out, (uint8_t)(0x10 | b))) != SD_OK) {
            return st;
        }
        return sd_buf_put_varint(out, (uint64_t)p->index);
    }
    if ((st = sd_buf_append_byte(out, (uint8_t)(0x20 | b))) != SD_OK ||
        (st = sd_buf_put_varint(out, (uint64_t)p->index)) != SD_OK) {
        return st;
    }
    return sd_buf_put_varint(out, (uint64_t)p->nonspec_index);
}

/* sd_pane_decode; with metadata_bit, bit 0x80 of the byte is the element-metadata flag
 * (sd__wv_pane_decode), returned in *has_metadata. */
static sd_status
pane_decode(sd_reader *r, sd_pane *p, bool metadata_bit, bool *has_metadata, sd_err *err)
{
    sd_reader save = *r;
    uint8_t b;
    uint64_t a = 0, c = 0;
    if (sd_reader_byte(r, &b) != SD_OK) {
        return sd_err_set(err, SD_EPROTO, "pane info: truncated input: expected 1 byte");
    }
    *has_metadata = metadata_bit && (b & 0x80) != 0;
    if (*has_metadata) {
        b &= 0x7f;
    }
    p->first = (b & 1) != 0;
    p->last = (b & 2) != 0;
    p->timing = (b >> 2) & 3;
    switch (b >> 4) {
    case 0:
        p->index = 0;
        p->nonspec_index = 0;
        return SD_OK;
    case 1:
        if (sd_reader_varint(r, &a) != SD_OK) {
            *r = save;
            return sd_err_set(err, SD_EPROTO, "pane info: expected the pane index (a varint)");
        }
        p->index = (int64_t)a;
        p->nonspec_index = p->timing == SD_PANE_EARLY ? -1 : (int64_t)a;
        return SD_OK;
    case 2:
        if (sd_reader_varint(r, &a) != SD_OK || sd_reader_varint(r, &c) != SD_OK) {
            *r = save;
            return sd_err_set(err, SD_EPROTO,
                              "pane info: expected the pane index and non-speculative index "
                              "(two varints)");
        }
        p->index = (int64_t)a;
        p->nonspec_index = (int64_t)c;
        return SD_OK;
    default:
        *r = save;
        return sd_err_set(err, SD_EPROTO,
                          "pane info: unknown encoding form %u in byte 0x%02x "
                          "(expected 0, 1 or 2)",
                          (unsigned)(b >> 4), b);
    }
}

sd_status sd_pane_decode(sd_reader *r, sd_pane *p, sd_err *err)
{
    bool has_metadata;
    return pane_decode(r, p, false, &has_metadata, err);
}

sd_status sd__wv_pane_decode(sd_reader *r, sd_pane *p, sd_bytes *metadata, sd_err *err)
{
    sd_reader save = *r;
    bool has_metadata;
    *metadata = SD_BYTES_NULL;
    sd_status st = pane_decode(r, p, true, &has_metadata, err);
    if (st != SD_OK || !has_metadata) {
        return st;
    }
    if (sd_reader_lp(r, metadata) != SD_OK) {
        *r = save;
        return sd_err_set(err, SD_EPROTO,
                          "pane info: byte 0x%02x flags element metadata, but the bytes after the "
                          "pane are not its length-prefixed message",
                          save.p[0]);
    }
    return SD_OK;
}

bool sd_pane_equal(const sd_pane *a, const sd_pane *b)
{
    return a->first == b->first && a->last == b->last && a->timing == b->timing &&
           a->index == b->index && a->nonspec_index == b->nonspec_index;
}

/* ------------------------------------------------------------------------------------------ */
/* Windowed values                                                                            */
/* ------------------------------------------------------------------------------------------ */

void sd_wv_header_init(sd_wv_header *h)
{
    memset(h, 0, sizeof(*h));
}

void sd_wv_header_deinit(sd_wv_header *h)
{
    sd_windows_deinit(&h->windows);
    memset(h, 0, sizeof(*h));
}

const sd_coder *sd_wv_element_coder(const sd_coder *c)
{
    if (c == NULL ||
        (c->kind != SD_CODER_WINDOWED_VALUE && c->kind != SD_CODER_PARAM_WINDOWED_VALUE)) {
        return NULL;
    }
    return c->components[0];
}

const sd_coder *sd_wv_window_coder(const sd_coder *c)
{
    if (c == NULL ||
        (c->kind != SD_CODER_WINDOWED_VALUE && c->kind != SD_CODER_PARAM_WINDOWED_VALUE)) {
        return NULL;
    }
    return c->components[1];
}

/* A pane for coder c; of a windowed value (wv), past any element metadata after it. */
static sd_status pane_read(const sd_coder *c, sd_reader *r, sd_pane *p, bool wv, sd_err *err)
{
    sd_err sub;
    sd_bytes metadata;
    sd_err_clear(&sub);
    if ((wv ? sd__wv_pane_decode(r, p, &metadata, &sub) : sd_pane_decode(r, p, &sub)) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO, "%s", sd_err_msg(&sub));
    }
    return SD_OK;
}

static inline uint64_t load_be64(const uint8_t *p)
{
    return (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 | (uint64_t)p[2] << 40 |
           (uint64_t)p[3] << 32 | (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 |
           (uint64_t)p[6] << 8 | (uint64_t)p[7];
}

/* n (1 to SD_WINDOWS_INLINE) global windows into ws. */
static inline void set_global_windows(sd_windows *ws, uint32_t n)
{
    /* Field by field: a struct assignment from a constant compiled to a zeroing "rep stos"
     * per call, which was a tenth of the engine's GroupByKey time in bench_engine. */
    for (uint32_t i = 0; i < n; i++) {
        sd_window *w = &ws->small[i];
        w->start = SD_TIME_MIN;
        w->end = SD_TIME_GLOBAL_MAX + 1;
        w->global = true;
        w->custom = false;
        w->custom_bytes.ptr = NULL;
        w->custom_bytes.len = 0;
    }
    ws->n = n;
}

/* The count of a global-window list at p when the one-step reads below take it (1 to
 * SD_WINDOWS_INLINE), else 0. */
static inline uint32_t global_count(const uint8_t *p)
{
    uint32_t n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    return n >= 1 && n <= SD_WINDOWS_INLINE ? n : 0;
}

/* The panes of the one-byte form b (b >> 4 == 0): what sd_pane_decode makes of them. */
#define ONE_BYTE_PANE(b)                                                      \
    {                                                                         \
        .first = ((b)&1) != 0, .last = ((b)&2) != 0, .timing = ((b) >> 2) & 3 \
    }
static const sd_pane one_byte_panes[16] = {
    ONE_BYTE_PANE(0),  ONE_BYTE_PANE(1),  ONE_BYTE_PANE(2),  ONE_BYTE_PANE(3),
    ONE_BYTE_PANE(4),  ONE_BYTE_PANE(5),  ONE_BYTE_PANE(6),  ONE_BYTE_PANE(7),
    ONE_BYTE_PANE(8),  ONE_BYTE_PANE(9),  ONE_BYTE_PANE(10), ONE_BYTE_PANE(11),
    ONE_BYTE_PANE(12), ONE_BYTE_PANE(13), ONE_BYTE_PANE(14), ONE_BYTE_PANE(15),
};
#undef ONE_BYTE_PANE

/* A pane of the one-byte form, copied whole from the table. Stored field by field, it was
 * read back whole by the engine (walk_values: a 16-byte load over several smaller stores,
 * which the CPU cannot forward, so it waits for them to retire): a stall on every element. */
static inline void pane_from_byte(uint8_t b, sd_pane *p)
{
    *p = one_byte_panes[b & 15];
}

/*
 * The commonest header, read in one step: global windows (1 to SD_WINDOWS_INLINE of them,
 * which take no bytes) and a pane of the one-byte form (index 0). Every engine delivery and
 * check decodes a header per element, and the general path's calls per field were most of
 * the engine's GroupByKey time in bench_engine. Returns false, consuming nothing, for any
 * other header: the general path then reads it, with the same result for these.
 */
static bool header_read_global(const sd_coder *c, sd_reader *r, sd_wv_header *hdr)
{
    const uint8_t *p = r->p;
    if (c->components[1]->kind != SD_CODER_GLOBAL_WINDOW || sd_reader_left(r) < 13) {
        return false;
    }
    uint32_t n = global_count(p + 8);
    if (n == 0 || (p[12] >> 4) != 0) {
        return false;
    }
    hdr->ts = sd_time_decode(load_be64(p));
    set_global_windows(&hdr->windows, n);
    pane_from_byte(p[12], &hdr->pane);
    r->p = p + 13;
    return true;
}

/* Timestamp, windows and pane of a full windowed value (window coder = c's component 1). */
static sd_status header_read(const sd_coder *c, sd_reader *r, sd_wv_header *hdr, sd_err *err)
{
    if (header_read_global(c, r, hdr)) {
        return SD_OK;
    }
    if (sd_coder_get_ts(r, &hdr->ts) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO, "truncated input: expected an 8-byte timestamp");
    }
    sd_status st = sd__coder_windows_decode(c, c->components[1], r, &hdr->windows, err);
    if (st != SD_OK) {
        return st;
    }
    return pane_read(c, r, &hdr->pane, true, err);
}

sd_status sd__coder_param_parse(sd_coder *c, sd_err *err)
{
    c->param = sd_calloc(1, sizeof(*c->param));
    if (c->param == NULL) {
        return sd__coder_fail(err, c, SD_ENOMEM, "out of memory");
    }
    if (c->components[1]->kind == SD_CODER_UNKNOWN) {
        return sd__coder_fail(err, c, SD_EUNIMPL,
                              "cannot read the payload's windows: unknown "
                              "window coder %s",
                              c->components[1]->urn);
    }
    sd_reader r = sd_reader_make(c->payload);
    sd_err sub;
    sd_err_clear(&sub);
    if (header_read(c, &r, c->param, &sub) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO,
                              "bad payload (expected a windowed value "
                              "header): %s",
                              sd_err_msg(&sub));
    }
    /* The rest is the encoded empty element; it carries nothing we need. */
    return SD_OK;
}

static sd_status
wv_decode(const sd_coder *c, sd_reader *r, sd_wv_header *hdr, sd_bytes *element, sd_err *err)
{
    sd_status st;
    if (c->kind == SD_CODER_PARAM_WINDOWED_VALUE) {
        hdr->ts = c->param->ts;
        hdr->pane = c->param->pane;
        if ((st = sd_windows_set(&hdr->windows, sd_windows_items(&c->param->windows),
                                 c->param->windows.n)) != SD_OK) {
            return sd__coder_fail(err, c, st, "out of memory for windows");
        }
    } else if ((st = header_read(c, r, hdr, err)) != SD_OK) {
        return st;
    }
    return sd_coder_slice(c->components[0], r, true, element, err);
}

sd_status sd_wv_decode(const sd_coder *wv_coder,
                       sd_reader *r,
                       sd_wv_header *hdr,
                       sd_bytes *element,
                       sd_err *err)
{
    if (wv_coder == NULL || (wv_coder->kind != SD_CODER_WINDOWED_VALUE &&
                             wv_coder->kind != SD_CODER_PARAM_WINDOWED_VALUE)) {
        return sd__coder_fail(err, wv_coder, SD_EINVAL,
                              "sd_wv_decode needs a windowed value "
                              "coder");
    }
    sd_reader save = *r;
    sd_status st = wv_decode(wv_coder, r, hdr, element, err);
    if (st != SD_OK) {
        *r = save;
    }
    return st;
}

sd_status sd_wv_encode_header(sd_buf *out,
                              const sd_coder *window_coder,
                              sd_time ts,
                              const sd_window *windows,
                              size_t n,
                              const sd_pane *pane,
                              sd_err *err)
{
    sd_status st = sd_coder_put_ts(out, ts);
    if (st != SD_OK) {
        return sd__coder_fail(err, window_coder, st, "cannot append the timestamp");
    }
    if ((st = windows_encode(window_coder, windows, n, out, err)) != SD_OK) {
        return st;
    }
    if ((st = sd_pane_encode(pane, out)) != SD_OK) {
        return sd__coder_fail(err, window_coder, st, "cannot encode the pane (timing %d)",
                              pane->timing);
    }
    return SD_OK;
}

sd_status sd_wv_encode(const sd_coder *wv_coder,
                       const sd_wv_header *hdr,
                       sd_bytes element,
                       sd_buf *out,
                       sd_err *err)
{
    sd_status st;
    if (wv_coder == NULL || (wv_coder->kind != SD_CODER_WINDOWED_VALUE &&
                             wv_coder->kind != SD_CODER_PARAM_WINDOWED_VALUE)) {
        return sd__coder_fail(err, wv_coder, SD_EINVAL,
                              "sd_wv_encode needs a windowed value "
                              "coder");
    }
    if (wv_coder->kind == SD_CODER_WINDOWED_VALUE) {
        if ((st = sd_coder_put_ts(out, hdr->ts)) != SD_OK) {
            return sd__coder_fail(err, wv_coder, st, "cannot append");
        }
        if ((st = windows_encode(wv_coder->components[1], sd_windows_items(&hdr->windows),
                                 hdr->windows.n, out, err)) != SD_OK) {
            return st;
        }
        if ((st = sd_pane_encode(&hdr->pane, out)) != SD_OK) {
            return sd__coder_fail(err, wv_coder, st, "cannot encode the pane (timing %d)",
                                  hdr->pane.timing);
        }
    }
    if ((st = sd_buf_append_bytes(out, element)) != SD_OK) {
        return sd__coder_fail(err, wv_coder, st, "cannot append the element");
    }
    return SD_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Timers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

void sd_timer_init(sd_timer *t)
{
    memset(t, 0, sizeof(*t));
}

void sd_timer_deinit(sd_timer *t)
{
    sd_windows_deinit(&t->windows);
    memset(t, 0, sizeof(*t));
}

static sd_status timer_decode(const sd_coder *c, sd_reader *r, sd_timer *t, sd_err *err)
{
    sd_status st = sd_coder_slice(c->components[0], r, true, &t->key, err);
    if (st != SD_OK) {
        sd_err_prefix(err, "timer key: ");
        return st;
    }
    if (sd_reader_lp(r, &t->tag) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO,
                              "expected the dynamic timer tag (varint length + bytes)");
    }
    /* The commonest rest in one step, as header_read_global: global windows, a set timer
     * (clear byte 0), its two timestamps and a one-byte pane. */
    const uint8_t *p = r->p;
    uint32_t n;
    if (c->components[1]->kind == SD_CODER_GLOBAL_WINDOW && sd_reader_left(r) >= 22 &&
        (n = global_count(p)) != 0 && p[4] == 0 && (p[21] >> 4) == 0) {
        set_global_windows(&t->windows, n);
        t->clear = false;
        t->fire = sd_time_decode(load_be64(p + 5));
        t->hold = sd_time_decode(load_be64(p + 13));
        pane_from_byte(p[21], &t->pane);
        r->p = p + 22;
        return SD_OK;
    }
    if ((st = sd__coder_windows_decode(c, c->components[1], r, &t->windows, err)) != SD_OK) {
        return st;
    }
    uint8_t clear;
    if (sd_reader_byte(r, &clear) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO, "truncated input: expected the clear bit");
    }
    if (clear > 1) {
        return sd__coder_fail(err, c, SD_EPROTO, "clear bit %u (expected 0 or 1)", clear);
    }
    t->clear = clear == 1;
    if (t->clear) {
        t->fire = 0;
        t->hold = 0;
        t->pane = SD_PANE_NO_FIRING;
        return SD_OK;
    }
    if (sd_coder_get_ts(r, &t->fire) != SD_OK || sd_coder_get_ts(r, &t->hold) != SD_OK) {
        return sd__coder_fail(err, c, SD_EPROTO,
                              "truncated input: expected fire and hold timestamps (16 bytes)");
    }
    return pane_read(c, r, &t->pane, false, err);
}

sd_status sd_timer_decode(const sd_coder *timer_coder, sd_reader *r, sd_timer *t, sd_err *err)
{
    if (timer_coder == NULL || timer_coder->kind != SD_CODER_TIMER) {
        return sd__coder_fail(err, timer_coder, SD_EINVAL, "sd_timer_decode needs a timer coder");
    }
    sd_reader save = *r;
    sd_status st = timer_decode(timer_coder, r, t, err);
    if (st != SD_OK) {
        *r = save;
    }
    return st;
}

static inline void store_be64(uint8_t *q, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        q[i] = (uint8_t)(v >> (56 - 8 * i));
    }
}

/*
 * The commonest timer in one step: set (not a clear), in one global window, with a pane of the
 * one-byte form; the same bytes as the general path, written after one reservation (the engine
 * encodes every timer it fires; the per-field appends were most of that). False, writing
 * nothing, when the general path must encode it.
 */
static bool timer_encode_global(const sd_coder *c, const sd_timer *t, sd_buf *out, sd_status *st)
{
    const sd_pane *pn = &t->pane;
    if (c->components[1]->kind != SD_CODER_GLOBAL_WINDOW || t->clear || t->windows.n != 1 ||
        !sd_windows_items(&t->windows)[0].global || pn->timing < SD_PANE_EARLY ||
        pn->timing > SD_PANE_UNKNOWN ||
        !((pn->index == 0 && pn->nonspec_index == 0) || pn->timing == SD_PANE_UNKNOWN)) {
        return false;
    }
    uint8_t lp[10];
    size_t lpn = 0;
    for (uint64_t v = t->tag.len; lpn == 0 || v > 0; v >>= 7) {
        lp[lpn++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    }
    size_t n = t->key.len + lpn + t->tag.len + 4 + 1 + 8 + 8 + 1;
    if ((*st = sd_buf_reserve(out, n)) != SD_OK) {
        return true;
    }
    uint8_t *q = out->data + out->len;
    if (t->key.len > 0) {
        memcpy(q, t->key.ptr, t->key.len);
        q += t->key.len;
    }
    memcpy(q, lp, lpn);
    q += lpn;
    if (t->tag.len > 0) {
        memcpy(q, t->tag.ptr, t->tag.len);
        q += t->tag.len;
    }
    /* One window (a 4-byte count; a global window takes no bytes), then "not a clear". */
    q[0] = 0;
    q[1] = 0;
    q[2] = 0;
    q[3] = 1;
    q[4] = 0;
    store_be64(q + 5, sd_time_encode(t->fire));
    store_be64(q + 13, sd_time_encode(t->hold));
    q[21] = (uint8_t)((pn->first ? 1 : 0) | (pn->last ? 2 : 0) | (pn->timing << 2));
    out->len += n;
    return true;
}

sd_status sd_timer_encode(const sd_coder *timer_coder, const sd_timer *t, sd_buf *out, sd_err *err)
{
    sd_status st;
    if (timer_coder == NULL || timer_coder->kind != SD_CODER_TIMER) {
        return sd__coder_fail(err, timer_coder, SD_EINVAL, "sd_timer_encode needs a timer coder");
    }
    if (timer_encode_global(timer_coder, t, out, &st)) {
        return st == SD_OK ? SD_OK : sd__coder_fail(err, timer_coder, st, "cannot append");
    }
    if ((st = sd_buf_append_bytes(out, t->key)) != SD_OK ||
        (st = sd_buf_put_lp(out, t->tag)) != SD_OK) {
        return sd__coder_fail(err, timer_coder, st, "cannot append");
    }
    if ((st = windows_encode(timer_coder->components[1], sd_windows_items(&t->windows),
                             t->windows.n, out, err)) != SD_OK) {
        return st;
    }
    if ((st = sd_buf_append_byte(out, t->clear ? 1 : 0)) != SD_OK) {
        return sd__coder_fail(err, timer_coder, st, "cannot append");
    }
    if (t->clear) {
        return SD_OK;
    }
    if ((st = sd_coder_put_ts(out, t->fire)) != SD_OK ||
        (st = sd_coder_put_ts(out, t->hold)) != SD_OK) {
        return sd__coder_fail(err, timer_coder, st, "cannot append");
    }
    if ((st = sd_pane_encode(&t->pane, out)) != SD_OK) {
        return sd__coder_fail(err, timer_coder, st, "cannot encode the pane (timing %d)",
                              t->pane.timing);
    }
    return SD_OK;
}
