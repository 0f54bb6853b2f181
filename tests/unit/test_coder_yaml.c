/*
 * Sundial tests: a tiny YAML reader, just enough for Beam's standard_coders.yaml.
 *
 * The vectors file uses a small corner of YAML: documents separated by "---", block mappings
 * (indentation-scoped "key: value" lines), "#" comments, and values that are plain scalars,
 * double-quoted strings with JSON-style escapes (\0 \n \t \r \\ \" \xNN \uXXXX), or flow
 * collections ([a, b] and {k: v}) which may span several lines and end with a trailing comma.
 * This reader supports exactly that and fails loudly on anything else, so a new construct in
 * the file shows up as a test failure rather than a silently skipped example. It lives with
 * the tests (the library has no need for YAML) and allocates through the project allocator.
 */
#include "test_coder_yaml.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"

typedef struct ty_parser {
    const char *s;
    size_t len;
    size_t pos;
    char *err;
    size_t errlen;
    bool failed;
} ty_parser;

static void fail(ty_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(ty_parser *p, const char *fmt, ...)
{
    if (p->failed) {
        return;
    }
    p->failed = true;
    size_t line = 1;
    for (size_t i = 0; i < p->pos && i < p->len; i++) {
        line += p->s[i] == '\n';
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "yaml line %zu: %s", line, msg);
}

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
/* Scalars                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct strbuf {
    char *p;
    size_t len;
    size_t cap;
} strbuf;

static bool sb_put(strbuf *b, char c)
{
    if (b->len + 2 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 32;
        char *np = sd_realloc(b->p, cap);
        if (np == NULL) {
            return false;
        }
        b->p = np;
        b->cap = cap;
    }
    b->p[b->len++] = c;
    b->p[b->len] = '\0';
    return true;
}

static bool sb_utf8(strbuf *b, uint32_t cp)
{
    if (cp < 0x80) {
        return sb_put(b, (char)cp);
    }
    if (cp < 0x800) {
        return sb_put(b, (char)(0xc0 | (cp >> 6))) && sb_put(b, (char)(0x80 | (cp & 0x3f)));
    }
    if (cp < 0x10000) {
        return sb_put(b, (char)(0xe0 | (cp >> 12))) &&
               sb_put(b, (char)(0x80 | ((cp >> 6) & 0x3f))) &&
               sb_put(b, (char)(0x80 | (cp & 0x3f)));
    }
    return sb_put(b, (char)(0xf0 | (cp >> 18))) && sb_put(b, (char)(0x80 | ((cp >> 12) & 0x3f))) &&
           sb_put(b, (char)(0x80 | ((cp >> 6) & 0x3f))) && sb_put(b, (char)(0x80 | (cp & 0x3f)));
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

static ty_node *scalar_node(ty_parser *p, ty_kind kind, strbuf *b)
{
    if (b->p == NULL) {
        b->p = sd_calloc(1, 1);
        if (b->p == NULL) {
            fail(p, "out of memory");
            return NULL;
        }
    }
    ty_node *n = node_new(kind);
    if (n == NULL) {
        sd_free(b->p);
        fail(p, "out of memory");
        return NULL;
    }
    n->text = b->p;
    n->len = b->len;
    return n;
}

static ty_node *parse_double_quoted(ty_parser *p)
{
    strbuf b = { 0 };
    p->pos++; /* opening quote */
    for (;;) {
        if (p->pos >= p->len) {
            sd_free(b.p);
            fail(p, "unterminated double-quoted string");
            return NULL;
        }
        char c = p->s[p->pos++];
        bool ok = true;
        if (c == '"') {
            break;
        }
        if (c == '\n') {
            sd_free(b.p);
            fail(p, "multi-line quoted strings are not supported");
            return NULL;
        }
        if (c != '\\') {
            ok = sb_put(&b, c);
        } else {
            if (p->pos >= p->len) {
                sd_free(b.p);
                fail(p, "dangling backslash");
                return NULL;
            }
            char e = p->s[p->pos++];
            int digits = 0;
            switch (e) {
            case '0':
                ok = sb_put(&b, '\0');
                break;
            case 'n':
                ok = sb_put(&b, '\n');
                break;
            case 't':
                ok = sb_put(&b, '\t');
                break;
            case 'r':
                ok = sb_put(&b, '\r');
                break;
            case '\\':
            case '"':
            case '/':
                ok = sb_put(&b, e);
                break;
            case 'x':
                digits = 2;
                break;
            case 'u':
                digits = 4;
                break;
            case 'U':
                digits = 8;
                break;
            default:
                sd_free(b.p);
                fail(p, "unsupported escape \\%c", e);
                return NULL;
            }
            if (digits > 0) {
                uint32_t cp = 0;
                for (int i = 0; i < digits; i++) {
                    int h = p->pos < p->len ? hexval(p->s[p->pos]) : -1;
                    if (h < 0) {
                        sd_free(b.p);
                        fail(p, "bad \\%c escape", e);
                        return NULL;
                    }
                    cp = cp * 16 + (uint32_t)h;
                    p->pos++;
                }
                ok = sb_utf8(&b, cp);
            }
        }
        if (!ok) {
            sd_free(b.p);
            fail(p, "out of memory");
            return NULL;
        }
    }
    return scalar_node(p, TY_QUOTED, &b);
}

static ty_node *parse_single_quoted(ty_parser *p)
{
    strbuf b = { 0 };
    p->pos++;
    for (;;) {
        if (p->pos >= p->len || p->s[p->pos] == '\n') {
            sd_free(b.p);
            fail(p, "unterminated single-quoted string");
            return NULL;
        }
        char c = p->s[p->pos++];
        if (c == '\'') {
            if (p->pos < p->len && p->s[p->pos] == '\'') {
                p->pos++;
            } else {
                break;
            }
        }
        if (!sb_put(&b, c)) {
            sd_free(b.p);
            fail(p, "out of memory");
            return NULL;
        }
    }
    return scalar_node(p, TY_QUOTED, &b);
}

/*
 * A plain scalar. In flow context it ends at , ] } : or a newline; in block context at the end
 * of the line or a " #" comment. Trailing spaces are dropped.
 */
static ty_node *parse_plain(ty_parser *p, bool flow)
{
    size_t start = p->pos;
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == '\n' || c == '\r') {
            break;
        }
        if (flow && (c == ',' || c == ']' || c == '}' || c == ':')) {
            break;
        }
        if (!flow && c == ':' &&
            (p->pos + 1 >= p->len || p->s[p->pos + 1] == ' ' || p->s[p->pos + 1] == '\n')) {
            break;
        }
        if (c == '#' && p->pos > start && p->s[p->pos - 1] == ' ') {
            break;
        }
        p->pos++;
    }
    size_t end = p->pos;
    while (end > start && (p->s[end - 1] == ' ' || p->s[end - 1] == '\t')) {
        end--;
    }
    if (end == start) {
        fail(p, "expected a value");
        return NULL;
    }
    strbuf b = { 0 };
    for (size_t i = start; i < end; i++) {
        if (!sb_put(&b, p->s[i])) {
            sd_free(b.p);
            fail(p, "out of memory");
            return NULL;
        }
    }
    return scalar_node(p, TY_PLAIN, &b);
}

/* ------------------------------------------------------------------------------------------ */
/* Flow collections                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* Skip spaces, newlines and comments (inside flow collections). */
static void skip_flow_ws(ty_parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n') {
                p->pos++;
            }
        } else {
            break;
        }
    }
}

static ty_node *parse_flow(ty_parser *p, int depth);

static ty_node *parse_flow_scalar(ty_parser *p)
{
    char c = p->s[p->pos];
    if (c == '"') {
        return parse_double_quoted(p);
    }
    if (c == '\'') {
        return parse_single_quoted(p);
    }
    return parse_plain(p, true);
}

static ty_node *parse_flow_collection(ty_parser *p, int depth)
{
    bool is_map = p->s[p->pos] == '{';
    char close = is_map ? '}' : ']';
    ty_node *n = node_new(is_map ? TY_MAP : TY_SEQ);
    if (n == NULL) {
        fail(p, "out of memory");
        return NULL;
    }
    p->pos++;
    for (;;) {
        skip_flow_ws(p);
        if (p->pos >= p->len) {
            fail(p, "unterminated flow collection");
            break;
        }
        if (p->s[p->pos] == close) {
            p->pos++;
            return n;
        }
        ty_node *key = NULL, *value = NULL;
        if (is_map) {
            key = parse_flow_scalar(p);
            if (key == NULL) {
                break;
            }
            skip_flow_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                ty_free(key);
                fail(p, "expected ':' in a flow mapping");
                break;
            }
            p->pos++;
        }
        value = parse_flow(p, depth + 1);
        if (value == NULL) {
            ty_free(key);
            break;
        }
        if (!node_add(n, key, value)) {
            ty_free(key);
            ty_free(value);
            fail(p, "out of memory");
            break;
        }
        skip_flow_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
        } else if (p->pos >= p->len || p->s[p->pos] != close) {
            fail(p, "expected ',' or '%c'", close);
            break;
        }
    }
    ty_free(n);
    return NULL;
}

static ty_node *parse_flow(ty_parser *p, int depth)
{
    if (depth > 64) {
        fail(p, "nested too deeply");
        return NULL;
    }
    skip_flow_ws(p);
    if (p->pos >= p->len) {
        fail(p, "expected a value");
        return NULL;
    }
    char c = p->s[p->pos];
    if (c == '[' || c == '{') {
        return parse_flow_collection(p, depth);
    }
    return parse_flow_scalar(p);
}

/* ------------------------------------------------------------------------------------------ */
/* Block mappings                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* Position of the first content line at or after pos (skipping blanks and comments). */
static size_t next_content_line(const ty_parser *p, size_t pos, size_t *indent)
{
    while (pos < p->len) {
        size_t i = pos;
        while (i < p->len && p->s[i] == ' ') {
            i++;
        }
        if (i < p->len && p->s[i] != '\n' && p->s[i] != '\r' && p->s[i] != '#') {
            *indent = i - pos;
            return pos;
        }
        while (i < p->len && p->s[i] != '\n') {
            i++;
        }
        pos = i + (i < p->len);
    }
    return p->len;
}

/* Skip the rest of the current line, which may only hold spaces and a comment. */
static void end_of_line(ty_parser *p)
{
    while (p->pos < p->len &&
           (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\r')) {
        p->pos++;
    }
    if (p->pos < p->len && p->s[p->pos] == '#') {
        while (p->pos < p->len && p->s[p->pos] != '\n') {
            p->pos++;
        }
    }
    if (p->pos < p->len && p->s[p->pos] != '\n') {
        fail(p, "unexpected text after a value");
        return;
    }
    if (p->pos < p->len) {
        p->pos++;
    }
}

/* Does the line at pos (content starting at pos) begin with "key:"? */
static bool line_is_key(const ty_parser *p, size_t pos)
{
    ty_parser probe = *p;
    char err[8];
    probe.err = err;
    probe.errlen = sizeof(err);
    probe.failed = false;
    probe.pos = pos;
    ty_node *k = p->s[pos] == '"' || p->s[pos] == '\'' ? parse_flow_scalar(&probe)
                                                       : parse_plain(&probe, false);
    if (k == NULL) {
        return false;
    }
    ty_free(k);
    while (probe.pos < probe.len && probe.s[probe.pos] == ' ') {
        probe.pos++;
    }
    return probe.pos < probe.len && probe.s[probe.pos] == ':';
}

static ty_node *parse_block_map(ty_parser *p, size_t min_indent, int depth)
{
    if (depth > 16) {
        fail(p, "block mappings nested too deeply");
        return NULL;
    }
    ty_node *map = node_new(TY_MAP);
    if (map == NULL) {
        fail(p, "out of memory");
        return NULL;
    }
    size_t map_indent = SIZE_MAX;
    for (;;) {
        size_t indent = 0;
        size_t line = next_content_line(p, p->pos, &indent);
        if (line >= p->len) {
            p->pos = p->len;
            break;
        }
        if (map_indent == SIZE_MAX) {
            if (indent < min_indent) {
                break;
            }
            map_indent = indent;
        } else if (indent < map_indent) {
            break;
        } else if (indent > map_indent) {
            p->pos = line + indent;
            fail(p, "unexpected indentation");
            break;
        }
        p->pos = line + indent;
        ty_node *key = p->s[p->pos] == '"' || p->s[p->pos] == '\'' ? parse_flow_scalar(p)
                                                                   : parse_plain(p, false);
        if (key == NULL) {
            break;
        }
        while (p->pos < p->len && p->s[p->pos] == ' ') {
            p->pos++;
        }
        if (p->pos >= p->len || p->s[p->pos] != ':') {
            ty_free(key);
            fail(p, "expected ':' after a mapping key");
            break;
        }
        p->pos++;
        while (p->pos < p->len && p->s[p->pos] == ' ') {
            p->pos++;
        }
        ty_node *value = NULL;
        if (p->pos >= p->len || p->s[p->pos] == '\n' || p->s[p->pos] == '\r' ||
            p->s[p->pos] == '#') {
            end_of_line(p);
            size_t vindent = 0;
            size_t vline = next_content_line(p, p->pos, &vindent);
            if (vline < p->len && vindent > map_indent) {
                if (line_is_key(p, vline + vindent)) {
                    p->pos = vline;
                    value = parse_block_map(p, vindent, depth + 1);
                } else {
                    p->pos = vline + vindent;
                    value = parse_flow(p, 0);
                    if (value != NULL) {
                        end_of_line(p);
                    }
                }
            } else {
                strbuf b = { 0 };
                if (sb_put(&b, 'n') && sb_put(&b, 'u') && sb_put(&b, 'l') && sb_put(&b, 'l')) {
                    value = scalar_node(p, TY_PLAIN, &b);
                } else {
                    sd_free(b.p);
                    fail(p, "out of memory");
                }
            }
        } else {
            char c = p->s[p->pos];
            value = c == '[' || c == '{' || c == '"' || c == '\'' ? parse_flow(p, 0)
                                                                  : parse_plain(p, false);
            if (value != NULL) {
                end_of_line(p);
            }
        }
        if (value == NULL || p->failed) {
            ty_free(key);
            ty_free(value);
            if (!p->failed) {
                fail(p, "bad value");
            }
            break;
        }
        if (!node_add(map, key, value)) {
            ty_free(key);
            ty_free(value);
            fail(p, "out of memory");
            break;
        }
    }
    if (p->failed) {
        ty_free(map);
        return NULL;
    }
    return map;
}

/* ------------------------------------------------------------------------------------------ */
/* Streams                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static bool is_separator(const char *s, size_t len, size_t pos)
{
    return pos + 3 <= len && memcmp(s + pos, "---", 3) == 0 &&
           (pos + 3 == len || s[pos + 3] == '\n' || s[pos + 3] == '\r' || s[pos + 3] == ' ');
}

bool ty_parse_stream(const char *text,
                     size_t len,
                     ty_node ***docs,
                     size_t *n_docs,
                     char *errbuf,
                     size_t errlen)
{
    ty_node **out = NULL;
    size_t n = 0;
    size_t start = 0;
    *docs = NULL;
    *n_docs = 0;
    while (start <= len) {
        /* Find the end of this document: the next line that is exactly "---". */
        size_t end = start;
        for (;;) {
            if (end >= len) {
                end = len;
                break;
            }
            if ((end == 0 || text[end - 1] == '\n') && is_separator(text, len, end)) {
                break;
            }
            end++;
        }
        ty_parser p = { .s = text, .len = end, .pos = start, .err = errbuf, .errlen = errlen };
        size_t indent;
        if (next_content_line(&p, start, &indent) < end) {
            ty_node *doc = parse_block_map(&p, 0, 0);
            if (doc == NULL) {
                ty_free_docs(out, n);
                return false;
            }
            ty_node **grown = sd_realloc(out, (n + 1) * sizeof(*grown));
            if (grown == NULL) {
                ty_free(doc);
                ty_free_docs(out, n);
                snprintf(errbuf, errlen, "out of memory");
                return false;
            }
            out = grown;
            out[n++] = doc;
        }
        if (end >= len) {
            break;
        }
        start = end + 3;
        while (start < len && text[start] != '\n') {
            start++;
        }
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
