/* wordcount [FILE-OR-GLOB] [--endpoint HOST:PORT] [--process]: prints "word: count", sorted, on
 * an embedded runner or the job server at --endpoint (--process: it starts us as its worker). */
#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <sundial/sundial.h>

/* A line -> KV<word, 1> per word (runs of letters, digits and apostrophes, lower-cased). */
static sd_status split(sd_ctx *c, const sd_elem *line)
{
    char w[256];
    size_t n = 0;
    sd_status st = SD_OK;
    for (size_t i = 0; i <= line->value.len && st == SD_OK; i++) {
        int ch = tolower((unsigned char)line->value.str[i]); /* str[len] is its NUL */
        if ((isalnum(ch) || ch == '\'') && n < sizeof(w)) {
            w[n++] = (char)ch;
        } else if (!isalnum(ch) && ch != '\'' && n > 0) {
            sd_counter_add(c, "words", 1);
            st = sd_out_kv(c, sd_val_strn(w, n), sd_val_int(1));
            n = 0;
        }
    }
    return st;
}
SD_REGISTER(split)

int main(int argc, char **argv)
{
    const char *const txt[] = { "The quick brown fox jumps over the lazy dog.",
                                "The dog sleeps; the fox runs.", "A quick brown dog? A lazy fox!" };
    sd_run_options opts = { .endpoint = NULL };
    const char *file = NULL;
    int code = 0;
    if (sd_sdk_main(argc, argv, &code)) {
        return code; /* started by a runner as its SDK worker */
    }
    /* getopt_long: --endpoint HOST:PORT or --endpoint=HOST:PORT; it names a bad flag. The run's
     * schedule (bundles, order, seed) goes to --record-schedule FILE, to replay or compare. */
    static const struct option flags[] = { { "endpoint", required_argument, NULL, 'e' },
                                           { "process", no_argument, NULL, 'p' },
                                           { "record-schedule", required_argument, NULL, 'r' },
                                           { "help", no_argument, NULL, 'h' },
                                           { NULL, 0, NULL, 0 } };
    const char *usage = "usage: wordcount [FILE-OR-GLOB] [--endpoint HOST:PORT [--process]] "
                        "[--record-schedule FILE]\n";
    for (int c; (c = getopt_long(argc, argv, "h", flags, NULL)) != -1;) {
        opts.endpoint = c == 'e' ? optarg : opts.endpoint;
        opts.environment = c == 'p' ? SD_ENV_PROCESS : opts.environment;
        opts.record_schedule = c == 'r' ? optarg : opts.record_schedule;
        if (c == 'h' || c == '?') {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (argc - optind > 1) {
        fprintf(stderr, "wordcount: one input, not \"%s\" too\n%s", argv[optind + 1], usage);
        return 2;
    }
    file = optind < argc ? argv[optind] : NULL;
    sd_pipeline *p = sd_pipeline_create("wordcount");
    sd_pcoll *lines = file ? sd_read_text(p, "Read", file) : sd_create_strings(p, "Text", txt, 3);
    const sd_pcoder *kv = sd_pcoder_kv(p, sd_pcoder_string(p), sd_pcoder_varint(p));
    sd_pcoll *words = sd_apply_flat_map(p, "Split", lines, split, kv);
    sd_collection *counts = sd_collect(p, "Collect", sd_count_per_key(p, "Count", words));
    sd_err err = { .code = SD_OK };
    if ((code = sd_pipeline_run(p, &opts, NULL, &err) != SD_OK)) {
        fprintf(stderr, "wordcount: %s\n", sd_err_msg(&err));
    }
    sd_collection_sort(counts);
    const sd_elem *e;
    for (size_t i = 0; (e = sd_collection_at(counts, i)) != NULL; i++) {
        printf("%s: %lld\n", e->key.str, (long long)e->value.i);
    }
    sd_pipeline_destroy(p);
    return code;
}
