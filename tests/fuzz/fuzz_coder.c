/*
 * Sundial fuzz target: every coder entry point on arbitrary bytes.
 *
 * The first input byte picks a coder from a fixed set (built once) and a context; the rest is
 * fed to sd_coder_skip, sd_coder_decode (and, when that succeeds, an encode/decode round trip
 * whose output must be canonical), sd_wv_decode, sd_timer_decode, sd_kv_split, the iterable
 * reader and sd_pane_decode. Every tenth selector instead treats the bytes as a row coder
 * payload (a serialized Schema) and decodes a fixed value with it. Build with clang and
 * -DSD_FUZZ=ON; run e.g. `build/bin/fuzz_coder -max_total_time=60`.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runner/coder/coder.h"
#include "runner/coder/value.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_CODERS 12

static sd_coder *coders[N_CODERS];

static sd_coder *leaf(sd_coder_kind kind)
{
    sd_coder *c = NULL;
    if (sd_coder_create(&c, NULL, kind, NULL) != SD_OK) {
        abort(); /* setup only: the fuzz harness owns the process */
    }
    return c;
}

static sd_coder *node(sd_coder_kind kind, sd_coder *a, sd_coder *b)
{
    sd_coder *c = NULL;
    if (sd_coder_create(&c, NULL, kind, a, b, NULL) != SD_OK) {
        abort();
    }
    sd_coder_destroy(a);
    sd_coder_destroy(b);
    return c;
}

static sd_coder *unknown_lp(void)
{
    sd_coder *u = NULL;
    if (sd_coder_from_urn("beam:coder:pickled_python:v1", SD_BYTES_NULL, NULL, 0, &u, NULL) !=
        SD_OK) {
        abort();
    }
    return node(SD_CODER_LENGTH_PREFIX, u, NULL);
}

static void setup(void)
{
    int i = 0;
    coders[i++] = node(SD_CODER_WINDOWED_VALUE,
                       node(SD_CODER_KV, leaf(SD_CODER_STRING_UTF8),
                            node(SD_CODER_ITERABLE, leaf(SD_CODER_VARINT), NULL)),
                       leaf(SD_CODER_INTERVAL_WINDOW));
    coders[i++] =
        node(SD_CODER_WINDOWED_VALUE, node(SD_CODER_KV, leaf(SD_CODER_BYTES), unknown_lp()),
             leaf(SD_CODER_GLOBAL_WINDOW));
    coders[i++] = node(SD_CODER_TIMER, leaf(SD_CODER_BYTES), leaf(SD_CODER_INTERVAL_WINDOW));
    coders[i++] = node(SD_CODER_TIMER, leaf(SD_CODER_STRING_UTF8), leaf(SD_CODER_GLOBAL_WINDOW));
    coders[i++] = node(SD_CODER_KV, node(SD_CODER_SHARDED_KEY, leaf(SD_CODER_STRING_UTF8), NULL),
                       node(SD_CODER_NULLABLE, leaf(SD_CODER_DOUBLE), NULL));
    coders[i++] = node(SD_CODER_STATE_BACKED_ITERABLE, leaf(SD_CODER_BYTES), NULL);
    coders[i++] = node(SD_CODER_ITERABLE,
                       node(SD_CODER_KV, leaf(SD_CODER_BOOL), leaf(SD_CODER_VARINT)), NULL);
    coders[i++] = node(SD_CODER_WINDOWED_VALUE, leaf(SD_CODER_VARINT),
                       node(SD_CODER_CUSTOM_WINDOW, leaf(SD_CODER_BYTES), NULL));
    coders[i++] = node(SD_CODER_LENGTH_PREFIX,
                       node(SD_CODER_KV, leaf(SD_CODER_VARINT), leaf(SD_CODER_STRING_UTF8)), NULL);
    coders[i++] = node(SD_CODER_ITERABLE,
                       node(SD_CODER_KV, leaf(SD_CODER_GLOBAL_WINDOW), leaf(SD_CODER_BOOL)), NULL);
    coders[i++] = node(SD_CODER_KV, unknown_lp(), unknown_lp());
    coders[i++] = leaf(SD_CODER_DOUBLE);
}

/*
 * Whatever decodes must encode, and the encoding is canonical: decoding it and encoding again
 * gives the same bytes. (Decoding then encoding need not give back the input bytes, nor the same
 * value: the wire admits non-canonical forms, e.g. a two-index pane of an EARLY firing.)
 */
static void roundtrip(const sd_coder *c, sd_bytes in, bool nested)
{
    sd_reader r = sd_reader_make(in);
    sd_value *v = NULL;
    if (sd_coder_decode(c, &r, nested, &v, NULL) != SD_OK) {
        return;
    }
    sd_buf out = { 0 }, out2 = { 0 };
    if (sd_coder_encode(c, v, nested, &out, NULL) != SD_OK) {
        abort();
    }
    sd_reader r2 = sd_reader_make(sd_buf_bytes(&out));
    sd_value *again = NULL;
    if (sd_coder_decode(c, &r2, nested, &again, NULL) != SD_OK || !sd_reader_done(&r2) ||
        sd_coder_encode(c, again, nested, &out2, NULL) != SD_OK ||
        !sd_bytes_equal(sd_buf_bytes(&out), sd_buf_bytes(&out2))) {
        abort();
    }
    sd_value_destroy(again);
    sd_value_destroy(v);
    sd_buf_deinit(&out);
    sd_buf_deinit(&out2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        setup();
        ready = true;
    }
    if (size == 0) {
        return 0;
    }
    uint8_t sel = data[0];
    sd_bytes in = sd_bytes_make(data + 1, size - 1);

    if (sel % 10 == 9) {
        sd_coder *row = NULL;
        if (sd_coder_from_urn("beam:coder:row:v1", in, NULL, 0, &row, NULL) == SD_OK) {
            static const uint8_t values[] = { 0x03, 0x00, 0x01, 0x61, 0x02, 0x00, 0x00, 0x00 };
            roundtrip(row, sd_bytes_make(values, sizeof(values)), true);
            sd_coder_destroy(row);
        }
        return 0;
    }

    const sd_coder *c = coders[sel % N_CODERS];
    bool nested = (sel & 0x80) != 0;
    sd_reader r = sd_reader_make(in);
    if (sd_coder_skip(c, &r, nested, NULL) != SD_OK && r.p != in.ptr) {
        abort(); /* a failed skip must not move the reader */
    }
    roundtrip(c, in, nested);

    sd_wv_header h;
    sd_timer t;
    sd_bytes a, b;
    sd_wv_header_init(&h);
    sd_timer_init(&t);
    r = sd_reader_make(in);
    if (c->kind == SD_CODER_WINDOWED_VALUE && sd_wv_decode(c, &r, &h, &a, NULL) == SD_OK) {
        sd_buf out = { 0 };
        if (sd_wv_encode(c, &h, a, &out, NULL) != SD_OK) {
            abort();
        }
        sd_buf_deinit(&out);
    }
    if (c->kind == SD_CODER_TIMER && sd_timer_decode(c, &r, &t, NULL) == SD_OK) {
        sd_buf out = { 0 };
        if (sd_timer_encode(c, &t, &out, NULL) != SD_OK) {
            abort();
        }
        sd_buf_deinit(&out);
    }
    if (c->kind == SD_CODER_KV && sd_kv_split(c, in, &a, &b, NULL) == SD_OK &&
        a.len + b.len != in.len) {
        abort();
    }
    if (c->kind == SD_CODER_ITERABLE || c->kind == SD_CODER_STATE_BACKED_ITERABLE) {
        sd_iterable_reader it;
        r = sd_reader_make(in);
        if (sd_iterable_begin(&it, c, &r, NULL) == SD_OK) {
            bool has = true;
            for (int i = 0; i < 100000 && has; i++) {
                if (sd_iterable_next(&it, &a, &has, NULL) != SD_OK) {
                    break;
                }
            }
        }
    }
    sd_pane p;
    r = sd_reader_make(in);
    if (sd_pane_decode(&r, &p, NULL) == SD_OK) {
        sd_buf out = { 0 };
        if (sd_pane_encode(&p, &out) != SD_OK) {
            abort();
        }
        sd_buf_deinit(&out);
    }
    sd_wv_header_deinit(&h);
    sd_timer_deinit(&t);
    return 0;
}
