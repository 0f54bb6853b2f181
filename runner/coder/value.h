/* Sundial: a generic value model for every standard coder (tests and the C SDK). */
#ifndef SD_RUNNER_CODER_VALUE_H
#define SD_RUNNER_CODER_VALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"
#include "runner/coder/coder.h"

/*
 * A decoded value as a heap tree. One struct for all kinds keeps construction and destruction
 * trivial; each kind documents which fields it uses. Values own all their memory (bytes are
 * copied on decode). Free with sd_value_destroy().
 *
 * Which value each coder produces / accepts:
 *   BYTES -> BYTES; STRING_UTF8 -> STRING; VARINT -> INT; DOUBLE -> DOUBLE; BOOL -> BOOL;
 *   KV -> KV (items[0] key, items[1] value); ITERABLE -> LIST;
 *   STATE_BACKED_ITERABLE -> LIST (has_token + bytes = the continuation token, if any);
 *   NULLABLE -> NULL or the component's value; LENGTH_PREFIX -> the component's value, or
 *   BYTES (the inner bytes) when the component is not known;
 *   GLOBAL_WINDOW, INTERVAL_WINDOW, CUSTOM_WINDOW -> WINDOW (custom: bytes = the component
 *   encoding, window.custom_bytes points at it);
 *   WINDOWED_VALUE, PARAM_WINDOWED_VALUE -> WV (ts, pane, items[0] value, items[1] a LIST of
 *   WINDOW); TIMER -> TIMER (items[0] user key value, items[1] LIST of WINDOW, bytes = tag,
 *   clear, and when !clear: ts = fire, hold, pane);
 *   ROW -> ROW (items[i] = field i in schema order; NULL kind for null fields);
 *   map fields of rows -> MAP (items = key0, value0, key1, value1, ...);
 *   SHARDED_KEY -> SHARDED_KEY (bytes = shard id, items[0] = key).
 * Row atomic types: BYTE/INT16/INT32/INT64 -> INT, FLOAT/DOUBLE -> DOUBLE, STRING -> STRING,
 * BOOLEAN -> BOOL, BYTES -> BYTES; ARRAY/ITERABLE -> LIST; logical types -> the value of their
 * representation, with two whose wire form differs (schema.h, sd_logical_encoding):
 * beam:logical_type:millis_instant:v1 -> INT, milliseconds since the epoch (the INT64
 * representation; the wire flips its sign bit); beam:logical_type:decimal:v1 -> BYTES holding
 * the number as text ("-100.123", "5E+2": Java's BigDecimal.toString() form, which keeps the
 * scale; STRING is accepted when encoding). A FLOAT field's DOUBLE holds a float's value.
 */
typedef enum sd_value_kind {
    SD_VALUE_NULL,
    SD_VALUE_BOOL,
    SD_VALUE_INT,
    SD_VALUE_DOUBLE,
    SD_VALUE_BYTES,
    SD_VALUE_STRING,
    SD_VALUE_KV,
    SD_VALUE_LIST,
    SD_VALUE_MAP,
    SD_VALUE_ROW,
    SD_VALUE_WINDOW,
    SD_VALUE_WV,
    SD_VALUE_TIMER,
    SD_VALUE_SHARDED_KEY
} sd_value_kind;

typedef struct sd_value sd_value;

struct sd_value {
    sd_value_kind kind;
    bool b;         /* BOOL; TIMER: clear bit */
    int64_t i;      /* INT */
    double d;       /* DOUBLE */
    uint8_t *bytes; /* owned, NUL-terminated for convenience: BYTES, STRING, TIMER tag,
                       SHARDED_KEY shard id, WINDOW custom encoding, LIST state token */
    size_t len;
    bool has_token;   /* LIST from a state-backed iterable that ended with a token */
    sd_value **items; /* owned children (see the table above) */
    size_t n_items;
    size_t cap_items;
    sd_time ts;       /* WV timestamp; TIMER fire timestamp */
    sd_time hold;     /* TIMER hold timestamp */
    sd_pane pane;     /* WV, TIMER */
    sd_window window; /* WINDOW */
};

/* Constructors return NULL on out-of-memory. Those taking child values take ownership of them,
 * even when they fail, so calls can be nested without leaks. */
sd_value *sd_value_null(void);
sd_value *sd_value_bool(bool b);
sd_value *sd_value_int(int64_t i);
sd_value *sd_value_double(double d);
sd_value *sd_value_bytes(const void *p, size_t n);
sd_value *sd_value_string(const char *s, size_t n);
sd_value *sd_value_kv(sd_value *key, sd_value *value);
sd_value *sd_value_list(void);
sd_value *sd_value_map(void);
sd_value *sd_value_row(void);
/* A window; custom_bytes (if custom) is copied. */
sd_value *sd_value_window(const sd_window *w);
/* windows must be a LIST of WINDOW values. */
sd_value *sd_value_wv(sd_time ts, sd_value *windows, const sd_pane *pane, sd_value *value);
sd_value *sd_value_timer(sd_value *key,
                         const char *tag,
                         size_t tag_len,
                         sd_value *windows,
                         bool clear,
                         sd_time fire,
                         sd_time hold,
                         const sd_pane *pane);
sd_value *sd_value_sharded_key(const void *shard, size_t shard_len, sd_value *key);

/* Append a child to a LIST, MAP (key then value) or ROW; takes ownership of item even on
 * failure. Returns SD_ENOMEM or SD_EINVAL (item NULL or parent not a container). */
SD_MUST_CHECK sd_status sd_value_push(sd_value *parent, sd_value *item);

/* Free a value tree. NULL is a no-op. */
void sd_value_destroy(sd_value *v);

/* Deep equality; doubles compare by bit pattern (so NaN == NaN and 0.0 != -0.0). */
bool sd_value_equal(const sd_value *a, const sd_value *b);

/* Append a readable rendering (JSON-like) to out. */
SD_MUST_CHECK sd_status sd_value_describe(const sd_value *v, sd_buf *out);

/* Name of a value kind ("int", "list", ...). Never NULL. */
const char *sd_value_kind_name(sd_value_kind kind);

/*
 * Decode one value encoded with coder from r (nested or outer context). OUT: out (caller owns).
 * Returns SD_EPROTO on bad bytes, SD_EUNIMPL for unknown coders (except inside a LENGTH_PREFIX),
 * SD_ENOMEM. On error r is unchanged and *out is NULL.
 */
SD_MUST_CHECK sd_status
sd_coder_decode(const sd_coder *coder, sd_reader *r, bool nested, sd_value **out, sd_err *err);

/*
 * Reads the rest of a state-backed iterable whose encoding ended in a continuation token.
 * Appends to out the remaining elements as one stream of nested encodings with the element
 * coder: what the StateGetResponse.data chunks for StateKey.runner{key = token} carry, joined
 * (a runner or harness follows continuation tokens of the state API itself; an empty stream
 * means no more elements). token is borrowed for the call. Returns SD_OK, or an error code
 * with err set, which the decode then returns.
 */
typedef sd_status (*sd_state_read_fn)(void *ctx, sd_bytes token, sd_buf *out, sd_err *err);

/* Decoding options; a zeroed struct (or NULL) gives sd_coder_decode's behaviour. */
typedef struct sd_decode_opts {
    /*
     * NULL: a state-backed iterable that ends in a token decodes to the elements before it,
     * with has_token and the token in bytes. Otherwise the token is resolved through
     * state_read and the LIST holds every element, with has_token false.
     */
    sd_state_read_fn state_read;
    void *state_ctx; /* passed to state_read */
} sd_decode_opts;

/*
 * sd_coder_decode with options (opts may be NULL). Same results and errors, plus whatever
 * state_read returns, and SD_EPROTO when its stream does not parse as elements.
 */
SD_MUST_CHECK sd_status sd_coder_decode_with(const sd_coder *coder,
                                             sd_reader *r,
                                             bool nested,
                                             const sd_decode_opts *opts,
                                             sd_value **out,
                                             sd_err *err);

/*
 * Append the encoding of v with coder (nested or outer context). SD_EINVAL when v's kind does
 * not fit the coder (the message names the coder URN and both kinds). On error out may hold a
 * partial encoding beyond its original length; callers truncate if they need to.
 */
SD_MUST_CHECK sd_status
sd_coder_encode(const sd_coder *coder, const sd_value *v, bool nested, sd_buf *out, sd_err *err);

#endif
