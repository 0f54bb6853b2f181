/*
 * Unit tests of teststream/: the event model (ts.h), the TestStreamPayload codec (ts_pb.h)
 * and the driver's wiring into the engine (ts_drive.h). How the engine plays TestStreams
 * under every bundle shape is test_engine's (test_engine_teststream.c and the trigger, state
 * and drain tests, all of which script their sources through this driver).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/base/buf.h"
#include "runner/coder/coder.h"
#include "runner/engine/em.h"
#include "teststream/ts.h"
#include "teststream/ts_drive.h"
#include "teststream/ts_pb.h"

static sd_bytes str_bytes(const char *s)
{
    return sd_bytes_make((const uint8_t *)s, strlen(s));
}

/* A two-output script with every kind of event, empty elements included. */
static sd_status build_script(sd_ts_stream **out, sd_err *err)
{
    static const char *const outs[] = { "main", "side" };
    sd_ts_stream *s = NULL;
    sd_status rc = sd_ts_stream_create("Events", outs, 2, &s, err);
    sd_bytes els[3] = { str_bytes("a"), str_bytes(""), str_bytes("ccc") };
    sd_time ts[3] = { 5, SD_TIME_MIN, SD_TIME_MAX };
    if (rc == SD_OK) {
        rc = sd_ts_stream_add_elements(s, 0, els, ts, 3, err);
    }
    if (rc == SD_OK) {
        rc = sd_ts_stream_advance_watermark(s, 1, 1000, err);
    }
    if (rc == SD_OK) {
        rc = sd_ts_stream_advance_clock(s, 60000, err);
    }
    if (rc == SD_OK) {
        rc = sd_ts_stream_add_elements(s, 1, &els[2], &ts[0], 1, err);
    }
    if (rc == SD_OK) {
        rc = sd_ts_stream_add_elements(s, 0, NULL, NULL, 0, err);
    }
    if (rc == SD_OK) {
        rc = sd_ts_stream_advance_watermark(s, 0, SD_TIME_MAX, err);
    }
    if (rc != SD_OK) {
        sd_ts_stream_destroy(s);
        s = NULL;
    }
    *out = s;
    return rc;
}

/* Render a script as text: "E0[a@5,@MIN,ccc@MAX] W1@1000 C60000 ..." */
static void render(const sd_ts_stream *s, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sd_ts_stream_n_events(s); i++) {
        sd_ts_event ev;
        sd_ts_stream_event(s, i, &ev);
        if (ev.kind == SD_TS_ELEMENTS) {
            n += (size_t)snprintf(out + n, cap - n, "E%zu[", ev.output);
            for (size_t k = 0; k < ev.n; k++) {
                sd_bytes b;
                sd_time t;
                sd_ts_stream_element(s, i, k, &b, &t);
                n += (size_t)snprintf(out + n, cap - n, "%s%.*s@", k > 0 ? "," : "", (int)b.len,
                                      b.len > 0 ? (const char *)b.ptr : "");
                if (t == SD_TIME_MIN || t == SD_TIME_MAX) {
                    n += (size_t)snprintf(out + n, cap - n, "%s", t == SD_TIME_MIN ? "MIN" : "MAX");
                } else {
                    n += (size_t)snprintf(out + n, cap - n, "%lld", (long long)t);
                }
            }
            n += (size_t)snprintf(out + n, cap - n, "] ");
        } else if (ev.kind == SD_TS_WATERMARK) {
            if (ev.wm == SD_TIME_MAX) {
                n += (size_t)snprintf(out + n, cap - n, "W%zu@MAX ", ev.output);
            } else {
                n += (size_t)snprintf(out + n, cap - n, "W%zu@%lld ", ev.output, (long long)ev.wm);
            }
        } else {
            n += (size_t)snprintf(out + n, cap - n, "C%lld ", (long long)ev.advance_ms);
        }
    }
}

static const char *const SCRIPT = "E0[a@5,@MIN,ccc@MAX] W1@1000 C60000 E1[ccc@5] E0[] W0@MAX ";

static void test_model_events(void **state)
{
    (void)state;
    sd_err err;
    sd_err_clear(&err);
    sd_ts_stream *s = NULL;
    char text[512];
    assert_int_equal(build_script(&s, &err), SD_OK);
    render(s, text, sizeof(text));
    assert_string_equal(text, SCRIPT);
    size_t i;
    assert_true(sd_ts_stream_find_output(s, "side", &i));
    assert_int_equal(i, 1);
    assert_false(sd_ts_stream_find_output(s, "nope", &i));
    assert_string_equal(sd_ts_stream_outputs(s)[0], "main");
    sd_ts_stream_destroy(s);
}

/* Every rule of a script, named in its error, and nothing appended by a refused event. */
static void test_model_errors(void **state)
{
    (void)state;

    static const struct {
        const char *name;
        int kind;
        sd_status want;
        const char *msg;
    } rows[] = {
        { "watermark backwards", 0, SD_EINVAL,
          "TestStream Events: the watermark of main would move backwards, from 5000 to 4000" },
        { "clock backwards", 1, SD_EINVAL,
          "TestStream Events: processing time cannot move backwards (-1 ms)" },
        { "timestamp out of range", 2, SD_EINVAL, "element 1 of main: timestamp" },
        { "no such output", 3, SD_EINVAL, "TestStream Events: no output 2 (it has 1)" },
        { "backwards allowed", 4, SD_OK, "" },
        { "duplicate outputs", 5, SD_EINVAL, "output \"main\" is named twice" },
    };

    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        static const char *const one[] = { "main" }, *const dup[] = { "main", "main" };
        sd_err err;
        sd_err_clear(&err);
        sd_ts_stream *s = NULL;
        if (rows[r].kind == 5) {
            assert_int_equal(sd_ts_stream_create("Events", dup, 2, &s, &err), rows[r].want);
            assert_null(s);
            assert_non_null(strstr(sd_err_msg(&err), rows[r].msg));
            continue;
        }
        assert_int_equal(sd_ts_stream_create("Events", one, 1, &s, &err), SD_OK);
        sd_status rc = SD_OK;
        sd_bytes els[2] = { str_bytes("x"), str_bytes("y") };
        sd_time ts[2] = { 0, SD_TIME_MAX + 1 };
        switch (rows[r].kind) {
        case 0:
        case 4:
            sd_ts_stream_allow_backwards(s, rows[r].kind == 4);
            assert_int_equal(sd_ts_stream_advance_watermark(s, 0, 5000, &err), SD_OK);
            rc = sd_ts_stream_advance_watermark(s, 0, 4000, &err);
            break;
        case 1:
            rc = sd_ts_stream_advance_clock(s, -1, &err);
            break;
        case 2:
            rc = sd_ts_stream_add_elements(s, 0, els, ts, 2, &err);
            break;
        case 3:
            rc = sd_ts_stream_add_elements(s, 2, els, ts, 1, &err);
            break;
        }
        if (rc != rows[r].want) {
            fail_msg("%s: got %s (%s)", rows[r].name, sd_status_name(rc), sd_err_msg(&err));
        }
        if (rc != SD_OK) {
            assert_non_null(strstr(sd_err_msg(&err), rows[r].msg));
            /* The refused event left nothing behind. */
            assert_int_equal(sd_ts_stream_n_events(s), rows[r].kind == 0 ? 1 : 0);
        }
        sd_ts_stream_destroy(s);
    }
}

/* What the SDK's builder writes, the runner's decoder reads back as the same script. */
static void test_codec_round_trip(void **state)
{
    (void)state;
    static const char *const tags[] = { "main", "side" };
    sd_err err;
    sd_err_clear(&err);
    sd_ts_stream *s = NULL, *back = NULL;
    sd_buf payload;
    sd_buf_init(&payload, 0);
    char text[512];
    assert_int_equal(build_script(&s, &err), SD_OK);
    assert_int_equal(sd_ts_encode(s, "coder-7", &payload, &err), SD_OK);
    assert_int_equal(sd_ts_decode(sd_buf_bytes(&payload), "T1", tags, 2, NULL, NULL, &back, &err),
                     SD_OK);
    render(back, text, sizeof(text));
    assert_string_equal(text, SCRIPT);
    assert_string_equal(sd_ts_stream_name(back), "T1");
    sd_ts_stream_destroy(back);
    sd_ts_stream_destroy(s);
    sd_buf_deinit(&payload);
}

/* A recode that wraps each element: "x" -> "<x>". */
static sd_status bracket(void *ctx, sd_bytes outer, sd_buf *out, sd_err *err)
{
    (void)err;
    (*(int *)ctx)++;
    sd_status rc = sd_buf_append_byte(out, '<');
    if (rc == SD_OK) {
        rc = sd_buf_append_bytes(out, outer);
    }
    return rc == SD_OK ? sd_buf_append_byte(out, '>') : rc;
}

/*
 * Payloads as other SDKs write them: no tags (one output), a watermark without a tag (every
 * output). Payload bytes are written by hand (protobuf wire format) so the reader is checked
 * against the format, not against our own writer.
 */
static void test_decode_rules(void **state)
{
    (void)state;
    static const char *const one[] = { "" }, *const two[] = { "a", "b" };
    /* events { element_event { elements { encoded_element: "x" timestamp: 7 } } }
     * events { watermark_event { new_watermark: 9 } }
     * events { processing_time_event { advance_duration: 3 } } */
    static const uint8_t untagged[] = { 0x12, 0x09, 0x1a, 0x07, 0x0a, 0x05, 0x0a, 0x01,
                                        'x',  0x10, 0x07, 0x12, 0x04, 0x0a, 0x02, 0x08,
                                        0x09, 0x12, 0x04, 0x12, 0x02, 0x08, 0x03 };
    /* events { element_event { tag: "zz" } } */
    static const uint8_t unknown[] = { 0x12, 0x06, 0x1a, 0x04, 0x1a, 0x02, 'z', 'z' };
    /* events { } : no kind */
    static const uint8_t nokind[] = { 0x12, 0x00 };
    static const uint8_t garbage[] = { 0x12, 0x7f, 0x01 };

    static const struct {
        const char *name;
        const uint8_t *bytes;
        size_t len;
        const char *const *tags;
        size_t n_tags;
        sd_status want;
        const char *text; /* the script, or a piece of the error */
    } rows[] = {
        { "untagged, one output", untagged, sizeof(untagged), one, 1, SD_OK, "E0[<x>@7] W0@9 C3 " },
        { "untagged watermark, every output", untagged + 11, sizeof(untagged) - 11, two, 2, SD_OK,
          "W0@9 W1@9 C3 " },
        { "untagged element, two outputs", untagged, sizeof(untagged), two, 2, SD_EINVAL,
          "TestStream T: event 0 names unknown tag \"\"" },
        { "unknown tag", unknown, sizeof(unknown), two, 2, SD_EINVAL,
          "TestStream T: event 0 names unknown tag \"zz\"" },
        { "no kind", nokind, sizeof(nokind), two, 2, SD_EINVAL,
          "TestStream T: event 0 has no kind" },
        { "malformed", garbage, sizeof(garbage), two, 2, SD_EINVAL,
          "TestStream T: malformed TestStreamPayload" },
    };

    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        sd_err err;
        sd_err_clear(&err);
        sd_ts_stream *s = NULL;
        int calls = 0;
        sd_status rc = sd_ts_decode(sd_bytes_make(rows[r].bytes, rows[r].len), "T", rows[r].tags,
                                    rows[r].n_tags, bracket, &calls, &s, &err);
        if (rc != rows[r].want) {
            fail_msg("%s: got %s (%s)", rows[r].name, sd_status_name(rc), sd_err_msg(&err));
        }
        if (rc == SD_OK) {
            char text[256];
            render(s, text, sizeof(text));
            assert_string_equal(text, rows[r].text);
        } else {
            assert_null(s);
            if (strstr(sd_err_msg(&err), rows[r].text) == NULL) {
                fail_msg("%s: message \"%s\" lacks \"%s\"", rows[r].name, sd_err_msg(&err),
                         rows[r].text);
            }
        }
        sd_ts_stream_destroy(s);
    }
}

/*
 * The live side of the codec, against hand-written wire bytes (Beam's field numbers): each
 * event as a TestStreamService streams it, the payload of a live TestStream, and the
 * EventsRequest a service reads; every event encoded alone decodes back as itself.
 */
static void test_live_codec(void **state)
{
    (void)state;
    static const char *const tags[] = { "a", "b" };
    /* element_event(3) { elements(1) { encoded_element(1): "x" timestamp(2): 7 } tag(3): "a" } */
    static const uint8_t ev_elems[] = { 0x1a, 0x0a, 0x0a, 0x05, 0x0a, 0x01,
                                        'x',  0x10, 0x07, 0x1a, 0x01, 'a' };
    /* watermark_event(1) { new_watermark(1): 9 tag(2): "b" } */
    static const uint8_t ev_wm[] = { 0x0a, 0x05, 0x08, 0x09, 0x12, 0x01, 'b' };
    /* processing_time_event(2) { advance_duration(1): 3 } */
    static const uint8_t ev_clock[] = { 0x12, 0x02, 0x08, 0x03 };
    /* coder_id(1): "c" endpoint(3) { url(1): "127.0.0.1:5" } */
    static const uint8_t live[] = { 0x0a, 0x01, 'c', 0x1a, 0x0d, 0x0a, 0x0b, '1', '2',
                                    '7',  '.',  '0', '.',  '0',  '.',  '1',  ':', '5' };
    /* output_ids(1): "b" */
    static const uint8_t req_b[] = { 0x0a, 0x01, 'b' };
    static const uint8_t req_zz[] = { 0x0a, 0x02, 'z', 'z' };
    static const uint8_t req_bad[] = { 0x0a, 0x7f };
    sd_err err;
    sd_err_clear(&err);
    sd_ts_stream *s = NULL, *back = NULL;
    assert_int_equal(sd_ts_stream_create("L", tags, 2, &s, &err), SD_OK);
    assert_int_equal(sd_ts_stream_create("L", tags, 2, &back, &err), SD_OK);
    sd_bytes x = str_bytes("x");
    sd_time t7 = 7;
    assert_int_equal(sd_ts_stream_add_elements(s, 0, &x, &t7, 1, &err), SD_OK);
    assert_int_equal(sd_ts_stream_advance_watermark(s, 1, 9, &err), SD_OK);
    assert_int_equal(sd_ts_stream_advance_clock(s, 3, &err), SD_OK);

    const struct {
        const uint8_t *bytes;
        size_t len;
    } want[] = { { ev_elems, sizeof(ev_elems) },
                 { ev_wm, sizeof(ev_wm) },
                 { ev_clock, sizeof(ev_clock) } };

    sd_buf b;
    sd_buf_init(&b, 0);
    for (size_t i = 0; i < 3; i++) {
        sd_buf_reset(&b);
        assert_int_equal(sd_ts_encode_event(s, i, &b, &err), SD_OK);
        assert_int_equal(b.len, want[i].len);
        assert_memory_equal(b.data, want[i].bytes, want[i].len);
        assert_int_equal(sd_ts_decode_event(back, sd_buf_bytes(&b), i, NULL, NULL, &err), SD_OK);
    }
    char text[128];
    render(back, text, sizeof(text));
    assert_string_equal(text, "E0[x@7] W1@9 C3 ");

    sd_buf_reset(&b);
    assert_int_equal(sd_ts_encode_live("c", "127.0.0.1:5", &b, &err), SD_OK);
    assert_int_equal(b.len, sizeof(live));
    assert_memory_equal(b.data, live, sizeof(live));
    char *url = NULL;
    assert_int_equal(sd_ts_payload_endpoint(sd_buf_bytes(&b), "L", &url, &err), SD_OK);
    assert_string_equal(url, "127.0.0.1:5");
    sd_free(url);

    bool w[2] = { false, false };
    assert_int_equal(sd_ts_decode_events_request(s, sd_bytes_make(NULL, 0), w, &err), SD_OK);
    assert_true(w[0] && w[1]); /* no output named: all of them */
    assert_int_equal(sd_ts_decode_events_request(s, sd_bytes_make(req_b, sizeof(req_b)), w, &err),
                     SD_OK);
    assert_true(!w[0] && w[1]);
    assert_int_equal(sd_ts_decode_events_request(s, sd_bytes_make(req_zz, sizeof(req_zz)), w, &err),
                     SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "asks for output \"zz\"; the stream's outputs are "
                                             "\"a\", \"b\""));
    sd_err_clear(&err);
    assert_int_equal(
        sd_ts_decode_events_request(s, sd_bytes_make(req_bad, sizeof(req_bad)), w, &err),
        SD_EINVAL);
    assert_non_null(strstr(sd_err_msg(&err), "is not an EventsRequest"));
    sd_buf_deinit(&b);
    sd_ts_stream_destroy(s);
    sd_ts_stream_destroy(back);
}

/* Building, encoding and decoding fail cleanly (SD_ENOMEM, nothing leaked) at every
 * allocation. */
static void test_oom_loop(void **state)
{
    (void)state;
    static const char *const tags[] = { "main", "side" };
    for (long n = 1;; n++) {
        sd_err err;
        sd_err_clear(&err);
        sd_ts_stream *s = NULL, *back = NULL;
        sd_buf payload;
        sd_buf_init(&payload, 0);
        sd_alloc_fail_after(n, 0);
        sd_status rc = build_script(&s, &err);
        if (rc == SD_OK) {
            rc = sd_ts_encode(s, "c", &payload, &err);
        }
        if (rc == SD_OK) {
            rc = sd_ts_decode(sd_buf_bytes(&payload), "T", tags, 2, NULL, NULL, &back, &err);
        }
        long injected = sd_alloc_injected_failures();
        sd_alloc_fail_after(0, 0);
        sd_ts_stream_destroy(back);
        sd_ts_stream_destroy(s);
        sd_buf_deinit(&payload);
        if (injected == 0) {
            assert_int_equal(rc, SD_OK);
            break;
        }
        /* protobuf-c's own allocations go through malloc; only ours are injected, and a
         * failed unpack reads as a malformed payload. */
        assert_true(rc == SD_ENOMEM || (rc == SD_EINVAL && back == NULL));
    }
}

/* The driver's wiring: one per engine, before start, streams name real TestStream outputs. */
static void test_driver_wiring(void **state)
{
    (void)state;
    sd_err err;
    sd_err_clear(&err);
    sd_em *em = NULL;
    sd_coder *c = NULL, *gw = NULL, *wv = NULL;
    assert_int_equal(sd_coder_create(&c, &err, SD_CODER_BYTES, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&gw, &err, SD_CODER_GLOBAL_WINDOW, NULL), SD_OK);
    assert_int_equal(sd_coder_create(&wv, &err, SD_CODER_WINDOWED_VALUE, c, gw, NULL), SD_OK);
    assert_int_equal(sd_em_create(NULL, &em), SD_OK);
    assert_int_equal(sd_em_add_pcollection(em, "out", wv, NULL, &err), SD_OK);
    static const char *const outs[] = { "out" };
    sd_stage_spec ts = { .id = "ts", .kind = SD_STAGE_TESTSTREAM, .outputs = outs, .n_outputs = 1 };
    assert_int_equal(sd_em_add_stage(em, &ts, &err), SD_OK);
    sd_ts_driver *d = NULL, *d2 = NULL;
    assert_int_equal(sd_ts_driver_create(em, &d, &err), SD_OK);
    assert_int_equal(sd_ts_driver_create(em, &d2, &err), SD_EEXIST);
    assert_null(d2);

    static const char *const tags[] = { "t" }, *const bad[] = { "nope" };
    sd_ts_stream *s = NULL;
    assert_int_equal(sd_ts_stream_create("ts", tags, 1, &s, &err), SD_OK);
    sd_err_clear(&err);
    assert_int_equal(sd_ts_driver_add(d, "nostage", s, outs, &err), SD_ENOTFOUND);
    assert_non_null(strstr(sd_err_msg(&err), "\"nostage\": no such TestStream stage"));
    assert_int_equal(sd_ts_stream_create("ts", tags, 1, &s, &err), SD_OK);
    sd_err_clear(&err);
    assert_int_equal(sd_ts_driver_add(d, "ts", s, bad, &err), SD_ENOTFOUND);
    assert_non_null(strstr(sd_err_msg(&err), "\"nope\" is not one of its outputs"));
    assert_int_equal(sd_ts_stream_create("ts", tags, 1, &s, &err), SD_OK);
    assert_int_equal(sd_ts_driver_add(d, "ts", s, outs, &err), SD_OK);
    assert_ptr_equal(sd_ts_driver_stream(d, "ts"), s);
    sd_bytes e = str_bytes("v");
    sd_time t = 42;
    assert_int_equal(sd_ts_stream_add_elements(s, 0, &e, &t, 1, &err), SD_OK);
    assert_int_equal(sd_ts_stream_advance_watermark(s, 0, 100, &err), SD_OK);
    assert_int_equal(sd_ts_stream_create("ts", tags, 1, &s, &err), SD_OK);
    assert_int_equal(sd_ts_driver_add(d, "ts", s, outs, &err), SD_EEXIST);

    /* Played at quiescence: the element, then the watermark, then the end of the stream. */
    assert_int_equal(sd_em_start(em, &err), SD_OK);
    sd_time wm = 0;
    assert_int_equal(sd_em_pcollection_watermark(em, "out", &wm), SD_OK);
    assert_int_equal(wm, SD_TIME_MIN);
    sd_bundle *b = NULL;
    assert_int_equal(sd_em_next_bundle(em, &b, &err), SD_OK);
    assert_null(b); /* no SDK stage: the whole script plays in one call */
    assert_int_equal(sd_em_pcollection_watermark(em, "out", &wm), SD_OK);
    assert_int_equal(wm, SD_TIME_MAX);
    sd_em_pcoll_stats ps;
    sd_em_pcollection_info(em, 0, &ps);
    assert_int_equal(ps.elements, 1);
    assert_true(sd_em_done(em));
    sd_em_destroy(em); /* frees the driver and its streams */
    sd_coder_destroy(wv);
    sd_coder_destroy(gw);
    sd_coder_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_events),     cmocka_unit_test(test_model_errors),
        cmocka_unit_test(test_codec_round_trip), cmocka_unit_test(test_decode_rules),
        cmocka_unit_test(test_oom_loop),         cmocka_unit_test(test_live_codec),
        cmocka_unit_test(test_driver_wiring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
