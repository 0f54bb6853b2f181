/*
 * wordcount: count the words of a text file (or of a built-in text) with a Beam pipeline
 * written in C, and print "word: count" lines sorted by word.
 *
 *   wordcount [FILE] [--endpoint=HOST:PORT] [--process]
 *
 * Without --endpoint the pipeline runs on a Sundial runner started for the run (test mode,
 * loopback worker in this process). With --endpoint it is submitted to that job server
 * (`sundial serve`, or any Beam job server). --process asks the runner to start this program
 * as its SDK worker (beam:env:process:v1) instead of using the loopback worker pool.
 *
 * The pipeline: Create(lines) -> Split (DoFn: line -> words, lower-cased) -> Pair with 1 ->
 * CountPerKey (a combine the runner lifts) -> Format (DoFn: "word: count") -> Collect (a DoFn
 * that appends each line to an output file this program reads back and sorts).
 *
 * A word is a maximal run of letters, digits and apostrophes; words are lower-cased (ASCII).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "sundial/sundial.h"

static const char *const builtin_text[] = {
    "The quick brown fox jumps over the lazy dog.",
    "The dog sleeps; the fox runs.",
    "A quick brown dog? A lazy fox!",
};

/* ---------------------------------------------------------------- DoFns */

static bool word_char(unsigned char ch)
{
    return isalnum(ch) || ch == '\'';
}

/* string line -> KV<string word, varint 1> */
static sd_status split_words(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes line;
    char word[256];
    (void)state;
    if (sd_read_bytes(&r, &line) != SD_OK) {
        return sd_fail(c, "Split: element is not a string");
    }
    size_t i = 0;
    while (i < line.len) {
        while (i < line.len && !word_char(line.ptr[i])) {
            i++;
        }
        size_t n = 0;
        while (i < line.len && word_char(line.ptr[i])) {
            if (n < sizeof(word)) {
                word[n++] = (char)tolower(line.ptr[i]);
            }
            i++;
        }
        if (n > 0) {
            sd_counter_add(c, "words", 1);
            sd_status st = sd_emit_kv_str_int(c, word, n, 1);
            if (st != SD_OK) {
                return st;
            }
        }
    }
    return SD_OK;
}

/* KV<string, varint> -> string "word: count" */
static sd_status format_count(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes word;
    int64_t n;
    char line[512];
    (void)state;
    if (sd_read_bytes(&r, &word) != SD_OK || sd_read_int(&r, &n) != SD_OK) {
        return sd_fail(c, "Format: element is not KV<string, varint>");
    }
    int len = snprintf(line, sizeof(line), "%.*s: %lld", (int)word.len, (const char *)word.ptr,
                       (long long)n);
    return sd_emit_str(c, line, (size_t)len);
}

/* Collect: append each string to the file named by the config (one per line). */
static sd_status collect_setup(sd_bytes config, void **state, sd_err *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%.*s", (int)config.len, (const char *)config.ptr);
    FILE *f = fopen(path, "a");
    if (f == NULL) {
        return sd_err_set(err, SD_EIO, "cannot open %s", path);
    }
    /* One write(2) per line on an O_APPEND file: lines from parallel bundles never mix. */
    setvbuf(f, NULL, _IOLBF, 0);
    *state = f;
    return SD_OK;
}

static sd_status collect_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    sd_bytes s;
    if (sd_read_bytes(&r, &s) != SD_OK) {
        return sd_fail(c, "Collect: element is not a string");
    }
    fprintf(state, "%.*s\n", (int)s.len, (const char *)s.ptr);
    return SD_OK;
}

static sd_status collect_finish(sd_ctx *c, void *state)
{
    (void)c;
    fflush(state);
    return SD_OK;
}

static void collect_teardown(void *state)
{
    if (state != NULL) {
        fclose(state);
    }
}

static int register_fns(void)
{
    static const sd_dofn split = { .process = split_words };
    static const sd_dofn format = { .process = format_count };
    static const sd_dofn collect = { .setup = collect_setup,
                                     .process = collect_process,
                                     .finish_bundle = collect_finish,
                                     .teardown = collect_teardown };
    if (sd_register_dofn("wordcount:split", &split) != SD_OK ||
        sd_register_dofn("wordcount:format", &format) != SD_OK ||
        sd_register_dofn("wordcount:collect", &collect) != SD_OK) {
        fprintf(stderr, "wordcount: cannot register DoFns\n");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- input and output */

static char **read_lines(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    char **lines = NULL;
    size_t cap = 0;
    char buf[65536];
    *n = 0;
    if (f == NULL) {
        return NULL;
    }
    while (fgets(buf, sizeof(buf), f) != NULL) {
        size_t len = strlen(buf);
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) {
            buf[--len] = '\0';
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            char **grown = sd_realloc(lines, cap * sizeof(char *));
            if (grown == NULL) {
                break;
            }
            lines = grown;
        }
        lines[*n] = sd_strdup(buf);
        if (lines[*n] == NULL) {
            break;
        }
        (*n)++;
    }
    fclose(f);
    return lines != NULL ? lines : sd_calloc(1, sizeof(char *));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int print_sorted(const char *path)
{
    size_t n;
    char **lines = read_lines(path, &n);
    if (lines == NULL) {
        fprintf(stderr, "wordcount: cannot read results from %s\n", path);
        return 1;
    }
    qsort(lines, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++) {
        printf("%s\n", lines[i]);
        sd_free(lines[i]);
    }
    sd_free(lines);
    return 0;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    int code;
    const char *file = NULL;
    const char *endpoint = NULL;
    bool process_env = false;
    if (register_fns() != 0) {
        return 1;
    }
    if (sd_sdk_main(argc, argv, &code)) {
        return code; /* started by a runner as its SDK worker */
    }
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--endpoint=", 11) == 0) {
            endpoint = argv[i] + 11;
        } else if (strcmp(argv[i], "--process") == 0) {
            process_env = true;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: wordcount [FILE] [--endpoint=HOST:PORT] [--process]\n");
            return 2;
        } else {
            file = argv[i];
        }
    }
    size_t n_lines = sizeof(builtin_text) / sizeof(builtin_text[0]);
    char **lines = NULL;
    if (file != NULL) {
        lines = read_lines(file, &n_lines);
        if (lines == NULL) {
            fprintf(stderr, "wordcount: cannot read %s\n", file);
            return 1;
        }
    }
    char out_path[] = "/tmp/sundial-wordcount-XXXXXX";
    int fd = mkstemp(out_path);
    if (fd < 0) {
        fprintf(stderr, "wordcount: cannot create a temporary file\n");
        return 1;
    }
    close(fd);

    sd_pipeline *p = sd_pipeline_create("wordcount");
    sd_pcoll *text = sd_create_strings(p, "Lines",
                                       lines != NULL ? (const char *const *)lines : builtin_text,
                                       n_lines);
    const sd_coder *kv = sd_coder_kv(p, sd_coder_string(p), sd_coder_varint(p));
    sd_pcoll *words = sd_apply(p, "Split", text, "wordcount:split", SD_BYTES_NULL, kv);
    sd_pcoll *counts = sd_count_per_key(p, "Count", words);
    sd_pcoll *formatted = sd_apply(p, "Format", counts, "wordcount:format", SD_BYTES_NULL,
                                   sd_coder_string(p));
    sd_apply(p, "Collect", formatted, "wordcount:collect", sd_bytes_str(out_path), NULL);

    sd_run_options opts = { .endpoint = endpoint,
                            .environment = process_env ? SD_ENV_PROCESS : SD_ENV_LOOPBACK };
    sd_run_result res;
    sd_err err;
    sd_err_clear(&err);
    sd_status st = sd_pipeline_run(p, &opts, &res, &err);
    int rc = 0;
    if (st != SD_OK) {
        fprintf(stderr, "wordcount: %s\n", sd_err_msg(&err));
        rc = 1;
    } else {
        rc = print_sorted(out_path);
    }
    unlink(out_path);
    sd_run_result_deinit(&res);
    sd_pipeline_destroy(p);
    for (size_t i = 0; lines != NULL && i < n_lines; i++) {
        sd_free(lines[i]);
    }
    sd_free(lines);
    return rc;
}
