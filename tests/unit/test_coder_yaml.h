/* Sundial tests: a tiny YAML reader for the subset used by Beam's standard_coders.yaml. */
#ifndef SD_TESTS_UNIT_TEST_CODER_YAML_H
#define SD_TESTS_UNIT_TEST_CODER_YAML_H

#include <stdbool.h>
#include <stddef.h>

typedef enum ty_kind {
    TY_PLAIN,  /* unquoted scalar (text holds it as written) */
    TY_QUOTED, /* quoted scalar (text is UTF-8 after escape processing) */
    TY_SEQ,
    TY_MAP
} ty_kind;

typedef struct ty_node ty_node;

struct ty_node {
    ty_kind kind;
    char *text; /* scalars: NUL-terminated, may contain NULs (use len) */
    size_t len;
    ty_node **keys;   /* MAP keys (scalars) */
    ty_node **values; /* MAP values / SEQ items */
    size_t n;
    size_t cap;
};

/*
 * Parse a whole file of documents separated by "---" lines. Each document is a block mapping.
 * OUT: docs (array of n_docs maps). Returns false with a message in errbuf on bad input.
 */
bool ty_parse_stream(const char *text,
                     size_t len,
                     ty_node ***docs,
                     size_t *n_docs,
                     char *errbuf,
                     size_t errlen);

void ty_free(ty_node *n);
void ty_free_docs(ty_node **docs, size_t n_docs);

/* Value of key in a MAP node (scalars compared by text), or NULL. */
const ty_node *ty_get(const ty_node *map, const char *key);

/* Scalar text equals s. */
bool ty_is(const ty_node *n, const char *s);

/*
 * Convert UTF-8 text whose code points are all <= 0xFF to one byte per code point (how the
 * yaml file spells byte strings). Returns false if a code point is larger or the UTF-8 is bad.
 * OUT: out (must hold len bytes), out_len.
 */
bool ty_latin1(const char *text, size_t len, unsigned char *out, size_t *out_len);

#endif
