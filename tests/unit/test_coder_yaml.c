/*
 * Sundial tests: Beam's standard_coders.yaml read with libyaml into a small node tree.
 *
 * libyaml (Debian's libyaml-dev) does the parsing; this file only turns its event stream into
 * ty_node trees (documents of mappings, sequences and scalars, keeping whether a scalar was
 * quoted, since the vectors spell byte strings as quoted text) and gives the vectors test the
 * few look-ups it needs. Aliases and tags are refused: the vectors file uses neither, so one
 * appearing shows up as a test failure rather than a silently misread example. Nodes are
 * allocated through the project allocator.
 */
#include "test_coder_yaml.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "runner/base/alloc.h"

/* ------------------------------------------------------------------------------------------ */
/* Nodes                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static ty_node *node_new(ty_kind kind)
{
    ty_node *n = sd_calloc(1, sizeof(*n));
    if (n != NULL) {
        n->kind = kind;
    }
    return n;
}

void ty_free(ty_node *n)
{
    if (n == NULL) {
        return;
    }
    for (size_t i = 0; i < n->n; i++) {
        if (n->keys != NULL) {
            ty_free(n->keys[i]);
        }
        ty_free(n->values[i]);
    }
    sd_free(n->keys);
    sd_free(n->values);
    sd_free(n->text);
    sd_free(n);
}

void ty_free_docs(ty_node **docs, size_t n_docs)
{
    for (size_t i = 0; i < n_docs; i++) {
        ty_free(docs[i]);
    }
    sd_free(docs);
}

static bool node_add(ty_node *n, ty_node *key, ty_node *value)
{
    if (n->n == n->cap) {
        size_t cap = n->cap ? n->cap * 2 : 8;
        ty_node **v = sd_realloc(n->values, cap * sizeof(*v));
        if (v == NULL) {
            return false;
        }
        n->values = v;
        if (n->kind == TY_MAP) {
            ty_node **k = sd_realloc(n->keys, cap * sizeof(*k));
            if (k == NULL) {
                return false;
            }
            n->keys = k;
        }
        n->cap = cap;
    }
    if (n->kind == TY_MAP) {
        n->keys[n->n] = key;
    }
    n->values[n->n++] = value;
    return true;
}

const ty_node *ty_get(const ty_node *map, const char *key)
{
    if (map == NULL || map->kind != TY_MAP) {
        return NULL;
    }
    for (size_t i = 0; i < map->n; i++) {
        if (ty_is(map->keys[i], key)) {
            return map->values[i];
        }
    }
    return NULL;
}

bool ty_is(const ty_node *n, const char *s)
{
    return n != NULL && (n->kind == TY_PLAIN || n->kind == TY_QUOTED) && n->len == strlen(s) &&
           memcmp(n->text, s, n->len) == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* libyaml events -> nodes                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Deeper than any vector; bounds the recursion on hostile input. */
#define TY_MAX_DEPTH 64

typedef struct ty_reader {
    yaml_parser_t parser;
    char *err;
    size_t errlen;
    bool failed;
} ty_reader;

static void fail_at(ty_reader *r, const yaml_event_t *ev, const char *what)
{
    if (r->failed) {
        return;
    }
    r->failed = true;
    if (r->parser.error != YAML_NO_ERROR) {
        snprintf(r->err, r->errlen, "yaml line %zu: %s", r->parser.problem_mark.line + 1,
                 r->parser.problem != NULL ? r->parser.problem : "malformed");
    } else {
        snprintf(r->err, r->errlen, "yaml line %zu: %s", ev != NULL ? ev->start_mark.line + 1 : 0,
                 what);
    }
}

/* The next event into ev (the caller deletes it); false (with the error set) on failure. */
static bool next_event(ty_reader *r, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&r->parser, ev)) {
        fail_at(r, NULL, "malformed");
        return false;
    }
    return true;
}

static ty_node *scalar_node(ty_reader *r, const yaml_event_t *ev)
{
    bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    ty_node *n = node_new(plain ? TY_PLAIN : TY_QUOTED);
    char *text = n != NULL ? sd_malloc(ev->data.scalar.length + 1) : NULL;
    if (text == NULL) {
        sd_free(n);
        fail_at(r, ev, "out of memory");
        return NULL;
    }
    memcpy(text, ev->data.scalar.value, ev->data.scalar.length);
    text[ev->data.scalar.length] = '\0';
    n->text = text;
    n->len = ev->data.scalar.length;
    return n;
}

static ty_node *read_node(ty_reader *r, yaml_event_t *ev, int depth);

/* The items of a collection whose start event was just read, up to its end event. */
static ty_node *read_collection(ty_reader *r, const yaml_event_t *start, ty_kind kind, int depth)
{
    yaml_event_type_t end = kind == TY_MAP ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;
    ty_node *n = node_new(kind);
    if (n == NULL) {
        fail_at(r, start, "out of memory");
        return NULL;
    }
    for (;;) {
        yaml_event_t ev;
        if (!next_event(r, &ev)) {
            ty_free(n);
            return NULL;
        }
        if (ev.type == end) {
            yaml_event_delete(&ev);
            return n;
        }
        ty_node *key = NULL;
        if (kind == TY_MAP) {
            key = read_node(r, &ev, depth + 1);
            yaml_event_delete(&ev);
            if (key == NULL || !next_event(r, &ev)) {
                ty_free(key);
                ty_free(n);
                return NULL;
            }
        }
        ty_node *value = read_node(r, &ev, depth + 1);
        yaml_event_delete(&ev);
        if (value == NULL || !node_add(n, key, value)) {
            if (value != NULL) {
                fail_at(r, NULL, "out of memory");
            }
            ty_free(key);
            ty_free(value);
            ty_free(n);
            return NULL;
        }
    }
}

/* The node that starts with ev (a scalar or a collection's start). */
static ty_node *read_node(ty_reader *r, yaml_event_t *ev, int depth)
{
    if (depth > TY_MAX_DEPTH) {
        fail_at(r, ev, "nested too deeply");
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        if (ev->data.scalar.tag != NULL && !ev->data.scalar.plain_implicit &&
            !ev->data.scalar.quoted_implicit) {
            fail_at(r, ev, "tags are not expected in the vectors");
            return NULL;
        }
        return scalar_node(r, ev);
    case YAML_SEQUENCE_START_EVENT:
        return read_collection(r, ev, TY_SEQ, depth);
    case YAML_MAPPING_START_EVENT:
        return read_collection(r, ev, TY_MAP, depth);
    case YAML_ALIAS_EVENT:
        fail_at(r, ev, "aliases are not expected in the vectors");
        return NULL;
    default:
        fail_at(r, ev, "expected a scalar, a sequence or a mapping");
        return NULL;
    }
}

static bool append_doc(ty_node ***docs, size_t *n, ty_node *doc)
{
    ty_node **grown = sd_realloc(*docs, (*n + 1) * sizeof(*grown));
    if (grown == NULL) {
        return false;
    }
    *docs = grown;
    (*docs)[(*n)++] = doc;
    return true;
}

/* One document's body, after its start event: a mapping, or nothing (an empty document). */
static bool read_document(ty_reader *r, ty_node ***docs, size_t *n)
{
    yaml_event_t ev;
    if (!next_event(r, &ev)) {
        return false;
    }
    ty_node *doc = NULL;
    if (ev.type == YAML_SCALAR_EVENT && ev.data.scalar.length == 0 &&
        ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        /* An empty document: nothing to keep. */
    } else if (ev.type != YAML_MAPPING_START_EVENT) {
        fail_at(r, &ev, "a document must be a mapping");
    } else {
        doc = read_node(r, &ev, 0);
    }
    yaml_event_delete(&ev);
    if (r->failed) {
        return false;
    }
    if (doc != NULL && !append_doc(docs, n, doc)) {
        ty_free(doc);
        fail_at(r, NULL, "out of memory");
        return false;
    }
    if (!next_event(r, &ev)) {
        return false;
    }
    bool ok = ev.type == YAML_DOCUMENT_END_EVENT;
    if (!ok) {
        fail_at(r, &ev, "expected the end of the document");
    }
    yaml_event_delete(&ev);
    return ok;
}

bool ty_parse_stream(const char *text,
                     size_t len,
                     ty_node ***docs,
                     size_t *n_docs,
                     char *errbuf,
                     size_t errlen)
{
    ty_reader r = { .err = errbuf, .errlen = errlen };
    ty_node **out = NULL;
    size_t n = 0;
    *docs = NULL;
    *n_docs = 0;
    if (!yaml_parser_initialize(&r.parser)) {
        snprintf(errbuf, errlen, "yaml: cannot initialise libyaml's parser");
        return false;
    }
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
    bool done = false;
    while (!done && !r.failed) {
        yaml_event_t ev;
        if (!next_event(&r, &ev)) {
            break;
        }
        yaml_event_type_t type = ev.type;
        yaml_event_delete(&ev);
        if (type == YAML_DOCUMENT_START_EVENT) {
            (void)read_document(&r, &out, &n);
        } else if (type == YAML_STREAM_END_EVENT) {
            done = true;
        } else if (type != YAML_STREAM_START_EVENT) {
            fail_at(&r, NULL, "unexpected event between documents");
        }
    }
    yaml_parser_delete(&r.parser);
    if (r.failed) {
        ty_free_docs(out, n);
        return false;
    }
    *docs = out;
    *n_docs = n;
    return true;
}

bool ty_latin1(const char *text, size_t len, unsigned char *out, size_t *out_len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        if (s[i] < 0x80) {
            cp = s[i++];
        } else if ((s[i] & 0xe0) == 0xc0 && i + 1 < len && (s[i + 1] & 0xc0) == 0x80) {
            cp = ((uint32_t)(s[i] & 0x1f) << 6) | (s[i + 1] & 0x3f);
            i += 2;
        } else {
            return false;
        }
        if (cp > 0xff) {
            return false;
        }
        out[o++] = (unsigned char)cp;
    }
    *out_len = o;
    return true;
}
