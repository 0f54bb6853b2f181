/*
 * Integration tests for the C SDK's typed helpers, text I/O and collections, end to end on the
 * embedded runner: Map / FlatMap / Filter over strings, ints, doubles and KVs; sd_read_text
 * with a glob over several files; sd_write_text into shards (every shard written, every line
 * once); sd_collect and sd_collection_sort; and the errors a user sees, which name the
 * transform (a Map that emits twice, a function given the wrong type, a pattern that matches
 * nothing, a construction on an unsupported coder).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sundial/sundial.h>
#include <unistd.h>

#include <cmocka.h>

/* ---------------------------------------------------------------- typed functions */

/* string -> its length */
static sd_status str_len(sd_ctx *c, const sd_elem *in)
{
    return sd_out(c, sd_val_int((int64_t)in->value.len));
}
SD_REGISTER(str_len)

static bool is_even(const sd_elem *in)
{
    return in->value.i % 2 == 0;
}
SD_REGISTER(is_even)

/* int n -> n copies of KV<"n", n / 2.0> */
static sd_status repeat_half(sd_ctx *c, const sd_elem *in)
{
    char key[32];
    snprintf(key, sizeof(key), "%lld", (long long)in->value.i);
    for (int64_t i = 0; i < in->value.i; i++) {
        sd_status st = sd_out_kv(c, sd_val_str(key), sd_val_double((double)in->value.i / 2.0));
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

/* KV<string, double> -> "key=value" (registered by pointer only: fine in-process) */
static sd_status format_kv(sd_ctx *c, const sd_elem *in)
{
    return sd_out_strf(c, "%s=%.1f", in->key.str, in->value.d);
}

static sd_status twice(sd_ctx *c, const sd_elem *in)
{
    sd_status st = sd_out(c, in->value);
    return st != SD_OK ? st : sd_out(c, in->value);
}

static sd_status wrong_type(sd_ctx *c, const sd_elem *in)
{
    (void)in;
    return sd_out(c, sd_val_str("not an int"));
}

static sd_status upper(sd_ctx *c, const sd_elem *in)
{
    char buf[256];
    size_t n = in->value.len < sizeof(buf) ? in->value.len : sizeof(buf);
    for (size_t i = 0; i < n; i++) {
        char ch = in->value.str[i];
        buf[i] = ch >= 'a' && ch <= 'z' ? (char)(ch - 'a' + 'A') : ch;
    }
    return sd_out(c, sd_val_strn(buf, n));
}

/* ---------------------------------------------------------------- helpers */

static sd_status run(sd_pipeline *p, sd_err *err)
{
    sd_run_options opts = { .timeout_ms = 60000 };
    sd_err_clear(err);
    return sd_pipeline_run(p, &opts, NULL, err);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---------------------------------------------------------------- tests */

static void test_map_filter_flat_map(void **state)
{
    (void)state;
    sd_err err;
    static const char *const words[] = { "a", "bb", "cccc", "dd", "eeeeee" };
    sd_pipeline *p = sd_pipeline_create("typed");
    sd_pcoll *lens = sd_apply_map(p, "Len", sd_create_strings(p, "Words", words, 5), str_len,
                                  sd_pcoder_varint(p));
    sd_pcoll *even = sd_apply_filter(p, "Even", lens, is_even);
    const sd_pcoder *kvd = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_double(p));
    sd_pcoll *halves = sd_apply_flat_map(p, "Repeat", even, repeat_half, kvd);
    sd_pcoll *text = sd_apply_map(p, "Format", halves, format_kv, sd_pcoder_string(p));
    sd_collection *ints = sd_collect(p, "CollectEven", even);
    sd_collection *kvs = sd_collect(p, "CollectKV", halves);
    sd_collection *strs = sd_collect(p, "CollectText", text);
    assert_int_equal(sd_collection_len(ints), -1); /* not run yet */
    assert_int_equal(run(p, &err), SD_OK);

    sd_collection_sort(ints);
    assert_int_equal(sd_collection_len(ints), 4); /* 2, 2, 4, 6 */
    static const int64_t want_ints[] = { 2, 2, 4, 6 };
    for (size_t i = 0; i < 4; i++) {
        assert_false(sd_collection_at(ints, i)->is_kv);
        assert_int_equal(sd_collection_at(ints, i)->value.i, want_ints[i]);
    }
    assert_null(sd_collection_at(ints, 4));

    sd_collection_sort(kvs);
    assert_int_equal(sd_collection_len(kvs), 2 + 2 + 4 + 6);
    const sd_elem *first = sd_collection_at(kvs, 0);
    assert_true(first->is_kv);
    assert_string_equal(first->key.str, "2");
    assert_true(first->value.d == 1.0);
    const sd_elem *last = sd_collection_at(kvs, 13);
    assert_string_equal(last->key.str, "6");
    assert_true(last->value.d == 3.0);

    sd_collection_sort(strs);
    assert_int_equal(sd_collection_len(strs), 14);
    assert_string_equal(sd_collection_at(strs, 0)->value.str, "2=1.0");
    assert_string_equal(sd_collection_at(strs, 13)->value.str, "6=3.0");
    sd_pipeline_destroy(p);
}

static void test_text_round_trip(void **state)
{
    (void)state;
    char dir[] = "/tmp/sd-typed-XXXXXX";
    char path[512], prefix[512];
    sd_err err;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/in-1.txt", dir);
    write_file(path, "alpha\nbeta\r\n\ngamma");
    snprintf(path, sizeof(path), "%s/in-2.txt", dir);
    write_file(path, "delta\n");
    snprintf(path, sizeof(path), "%s/other.log", dir);
    write_file(path, "not read\n");
    snprintf(path, sizeof(path), "%s/in-*.txt", dir);
    snprintf(prefix, sizeof(prefix), "%s/out", dir);

    sd_pipeline *p = sd_pipeline_create("text");
    sd_pcoll *lines = sd_read_text(p, "Read", path);
    sd_pcoll *up = sd_apply_map(p, "Upper", lines, upper, NULL);
    sd_write_text(p, "Write", up, prefix, 3);
    sd_collection *got = sd_collect(p, "Collect", lines);
    assert_int_equal(run(p, &err), SD_OK);

    sd_collection_sort(got);
    static const char *const want[] = { "", "alpha", "beta", "delta", "gamma" };
    assert_int_equal(sd_collection_len(got), 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(sd_collection_at(got, i)->value.str, want[i]);
    }

    /* Three shards, every one written; together they hold each line once. */
    char all[256] = "";
    for (int s = 0; s < 3; s++) {
        char shard[600], line[64];
        snprintf(shard, sizeof(shard), "%s-%05d-of-00003", prefix, s);
        FILE *f = fopen(shard, "r");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f) != NULL) {
            strncat(all, line, sizeof(all) - strlen(all) - 1);
        }
        fclose(f);
        unlink(shard);
    }
    assert_int_equal(strlen(all), strlen("\nALPHA\nBETA\nDELTA\nGAMMA\n"));
    static const char *const up_lines[] = { "ALPHA\n", "BETA\n", "DELTA\n", "GAMMA\n" };
    for (size_t i = 0; i < 4; i++) {
        assert_non_null(strstr(all, up_lines[i]));
    }
    sd_pipeline_destroy(p);
    snprintf(path, sizeof(path), "%s/in-1.txt", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/in-2.txt", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/other.log", dir);
    unlink(path);
    rmdir(dir);
}

/* Run-time errors name the user's transform. */
static void test_errors_name_the_transform(void **state)
{
    (void)state;
    sd_err err;
    static const char *const words[] = { "x" };
    static const int64_t ints[] = { 1 };

    sd_pipeline *p = sd_pipeline_create("typed-twice");
    sd_collect(p, "Collect",
               sd_apply_map(p, "Twice", sd_create_strings(p, "W", words, 1), twice, NULL));
    assert_int_equal(run(p, &err), SD_ESTATE);
    assert_non_null(strstr(err.msg, "transform \"Twice\""));
    assert_non_null(strstr(err.msg, "emitted 2 elements"));
    sd_pipeline_destroy(p);

    p = sd_pipeline_create("typed-wrong-type");
    sd_apply_map(p, "Wrong", sd_create_ints(p, "I", ints, 1), wrong_type, NULL);
    assert_int_equal(run(p, &err), SD_ESTATE);
    assert_non_null(strstr(err.msg, "transform \"Wrong\""));
    assert_non_null(strstr(err.msg, "emitted a string, but the output holds int"));
    sd_pipeline_destroy(p);

    p = sd_pipeline_create("typed-no-match");
    sd_collect(p, "Collect", sd_read_text(p, "ReadLogs", "/nonexistent-sundial/*.log"));
    assert_int_equal(run(p, &err), SD_ESTATE);
    assert_non_null(strstr(err.msg, "transform \"ReadLogs/Glob\""));
    assert_non_null(strstr(err.msg, "no file matches \"/nonexistent-sundial/*.log\""));
    sd_pipeline_destroy(p);
}

/* Construction errors are sticky and name the transform. */
static void test_construction_errors(void **state)
{
    (void)state;
    sd_err err;
    static const char *const words[] = { "x" };
    sd_pipeline *p = sd_pipeline_create("typed-grouped");
    sd_pcoll *kv = sd_apply_map(p, "Pair", sd_create_strings(p, "W", words, 1), str_len,
                                sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p)));
    sd_pcoll *grouped = sd_group_by_key(p, "Group", kv);
    assert_null(sd_apply_map(p, "Len", grouped, str_len, NULL));
    assert_non_null(sd_pipeline_error(p));
    assert_non_null(strstr(sd_pipeline_error(p)->msg, "Map \"Len\""));
    assert_int_equal(run(p, &err), SD_EINVAL);
    sd_pipeline_destroy(p);

    p = sd_pipeline_create("typed-write-ints");
    static const int64_t ints[] = { 1 };
    sd_write_text(p, "Write", sd_create_ints(p, "I", ints, 1), "/tmp/never", 1);
    assert_non_null(sd_pipeline_error(p));
    assert_non_null(strstr(sd_pipeline_error(p)->msg, "WriteText \"Write\""));
    sd_pipeline_destroy(p);
}

int main(int argc, char **argv)
{
    int code = 0;
    if (sd_sdk_main(argc, argv, &code)) {
        return code;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_filter_flat_map),
        cmocka_unit_test(test_text_round_trip),
        cmocka_unit_test(test_errors_name_the_transform),
        cmocka_unit_test(test_construction_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
