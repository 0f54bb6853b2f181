/*
 * Sundial: the pipeline options the runner reads, as one table.
 *
 * Every beam:option:sundial_*:v1 that any part of the runner looks at (sd_job_option* with a
 * "sundial_" key) has a row here. The table is what `sundial --list-options` prints (JSON),
 * and the Python package (python/sundial_beam) declares its PipelineOptions from that
 * output, so a Python user can pass every option and none is missing or stale.
 * tools/check_options.sh fails when a sundial_ key read in runner/ has no row.
 */
#ifndef SD_RUNNER_JOBSERVICE_OPTIONS_H
#define SD_RUNNER_JOBSERVICE_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

/* The kind of value an option takes, as the SDKs should declare it. */
typedef enum sd_option_kind {
    SD_OPTION_STRING, /* free text (a path, a list of names) */
    SD_OPTION_ENUM,   /* one of `choices` */
    SD_OPTION_INT,    /* an integer (a number or a decimal string) */
    SD_OPTION_SIZE,   /* a byte size: 4096, 512MiB, 2G */
    SD_OPTION_BOOL    /* true or false (a bool or the strings "true"/"false") */
} sd_option_kind;

typedef struct sd_option_info {
    const char *name; /* "sundial_clock"; on the wire beam:option:<name>:v1 */
    sd_option_kind kind;
    const char *choices; /* SD_OPTION_ENUM: "synthetic|wall"; NULL otherwise */
    const char *help;    /* one sentence, for --help of the SDKs */
} sd_option_info;

/* The table, in a stable order; *n receives its length. */
const sd_option_info *sd_option_table(size_t *n);

/* The kind's name in the JSON dump: "string", "enum", "int", "size", "bool". */
const char *sd_option_kind_name(sd_option_kind kind);

/*
 * Write the table to f as JSON: {"options": [{"name": ..., "urn": "beam:option:...:v1",
 * "kind": ..., "choices": [...], "help": ...}, ...]} and a newline. Returns 0, or -1 when f
 * reports a write error.
 */
int sd_option_table_write_json(FILE *f);

#endif
