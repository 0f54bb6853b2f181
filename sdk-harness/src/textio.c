/*
 * Sundial C SDK: text files in (sd_read_text, with globs) and out (sd_write_text, in shards).
 *
 * Both are composites of ordinary transforms over built-in DoFns, so they run on any Beam
 * runner that can start a C worker on this machine's files:
 *
 *   ReadText:  Impulse -> Glob (expand the pattern, one element per file, sorted)
 *                      -> Reshuffle (files spread over bundles) -> Lines (one per line)
 *   WriteText: WindowInto(global) -> Shard (KV<shard, 0x01 ++ line>) --+
 *              Create(KV<i, 0x00>) for every shard i -----------------+-> Flatten
 *                      -> GroupByKey -> Write (one file per shard, written aside and renamed)
 *
 * The pattern is expanded when the pipeline runs, not when it is built, so a pipeline built
 * on one machine reads the files of the machine that runs it (Beam's TextIO does the same).
 * The 0x00 markers make every shard a group even when no line hashes to it, so all
 * NNNNN files exist afterwards, as Beam's fixed-shard writes promise; the 0x01 tag keeps a
 * marker apart from an empty line. Paths are made absolute at construction because a worker
 * started by a runner may run in another directory.
 */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "sdk-harness/src/sdk_int.h"

/* ================================================================ helpers */

/* path made absolute against the current directory. Caller owns; NULL when out of memory. */
static char *absolute(const char *path)
{
    char cwd[4096];
    if (path[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL) {
        return sd_strdup(path);
    }
    return sd_asprintf("%s/%s", cwd, path);
}

/* A config holding one lp(string) and, when with_n, a varint. */
static sd_status path_config(sd_buf *cfg, const char *path, bool with_n, uint64_t n)
{
    sd_status st = sd_buf_put_lp(cfg, sd_bytes_str(path));
    if (st == SD_OK && with_n) {
        st = sd_buf_put_varint(cfg, n);
    }
    return st;
}

/* The bytes of a nested string/bytes element. */
static bool element_text(sd_ctx *c, sd_bytes *out)
{
    sd_reader r = sd_reader_make(sd_ctx_element(c));
    return sd_read_bytes(&r, out) == SD_OK;
}

/* ================================================================ reading */

static sd_status glob_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    sd_bytes pat;
    glob_t g;
    (void)state;
    if (sd_reader_lp(&r, &pat) != SD_OK) {
        return sd_fail(c, "ReadText: malformed configuration");
    }
    char *pattern = sd_strndup((const char *)pat.ptr, pat.len);
    if (pattern == NULL) {
        return SD_ENOMEM;
    }
    memset(&g, 0, sizeof(g));
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        sd_status st = sd_fail(c, "no file matches \"%s\"", pattern);
        sd_free(pattern);
        return st;
    }
    if (rc != 0) {
        globfree(&g);
        sd_status st = sd_fail(c, "cannot expand \"%s\" (%s)", pattern,
                               rc == GLOB_NOSPACE ? "out of memory" : "a directory is unreadable");
        sd_free(pattern);
        return st;
    }
    sd_free(pattern);
    sd_status st = SD_OK;
    for (size_t i = 0; i < g.gl_pathc && st == SD_OK; i++) {
        st = sd_emit_str(c, g.gl_pathv[i], strlen(g.gl_pathv[i]));
    }
    globfree(&g);
    return st;
}

static sd_status lines_process(sd_ctx *c, void *state)
{
    sd_bytes p;
    (void)state;
    if (!element_text(c, &p)) {
        return sd_fail(c, "ReadText: a file name is not a string");
    }
    char *path = sd_strndup((const char *)p.ptr, p.len);
    if (path == NULL) {
        return SD_ENOMEM;
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        sd_status st = sd_fail(c, "cannot open %s: %s", path, strerror(errno));
        sd_free(path);
        return st;
    }
    /* Lines of any length: fgets chunks gathered into one buffer until the line end. */
    sd_buf line;
    char chunk[8192];
    sd_status st = SD_OK;
    bool more = true;
    sd_buf_init(&line, 0);
    while (st == SD_OK && more) {
        sd_buf_reset(&line);
        bool ended = false;
        while (st == SD_OK && !ended) {
            if (fgets(chunk, sizeof(chunk), f) == NULL) {
                more = false;
                break;
            }
            size_t n = strlen(chunk);
            ended = n > 0 && chunk[n - 1] == '\n';
            st = sd_buf_append(&line, chunk, n);
        }
        if (st != SD_OK || (!more && line.len == 0)) {
            break;
        }
        size_t len = line.len;
        if (len > 0 && line.data[len - 1] == '\n') {
            len--;
            if (len > 0 && line.data[len - 1] == '\r') {
                len--;
            }
        }
        st = sd_emit_str(c, (const char *)line.data, len);
    }
    if (st == SD_OK && ferror(f)) {
        st = sd_fail(c, "cannot read %s: %s", path, strerror(errno));
    }
    sd_buf_deinit(&line);
    fclose(f);
    sd_free(path);
    return st;
}

sd_pcoll *sd_read_text(sd_pipeline *p, const char *name, const char *pattern)
{
    sd_buf cfg;
    if (sd__pipeline_failed(p)) {
        return NULL;
    }
    if (pattern == NULL || pattern[0] == '\0') {
        return sd__pipeline_fail(p, SD_EINVAL, "ReadText \"%s\": empty file pattern",
                                 name != NULL ? name : "(null)");
    }
    char *abs = absolute(pattern);
    sd_buf_init(&cfg, 0);
    if (abs == NULL || path_config(&cfg, abs, false, 0) != SD_OK) {
        sd_free(abs);
        sd_buf_deinit(&cfg);
        return sd__pipeline_fail(p, SD_ENOMEM, "out of memory");
    }
    sd_free(abs);
    long saved = sd__pipeline_begin_composite(p, name);
    const sd_coder *str = sd_pcoder_string(p);
    sd_pcoll *imp = sd_impulse(p, "Impulse");
    sd_pcoll *files = sd_apply(p, "Glob", imp, SD_FN_TEXT_GLOB, sd_buf_bytes(&cfg), str);
    sd_pcoll *spread = sd_reshuffle(p, "Reshuffle", files);
    sd_pcoll *lines = sd_apply(p, "Lines", spread, SD_FN_TEXT_READ, SD_BYTES_NULL, str);
    sd__pipeline_end_composite(p, saved, lines);
    sd_buf_deinit(&cfg);
    return sd__pipeline_failed(p) ? NULL : lines;
}

/* ================================================================ writing */

/* FNV-1a: a stable hash, so a line lands in the same shard on every run. */
static uint64_t fnv1a(sd_bytes b)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < b.len; i++) {
        h = (h ^ b.ptr[i]) * 0x100000001b3ULL;
    }
    return h;
}

static sd_status shard_process(sd_ctx *c, void *state)
{
    sd_buf *b = state;
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    uint64_t n;
    sd_bytes text;
    sd_status st;
    if (sd_reader_varint(&r, &n) != SD_OK || n == 0) {
        return sd_fail(c, "WriteText: malformed configuration");
    }
    if (!element_text(c, &text)) {
        return sd_fail(c, "WriteText: an element is not a string");
    }
    sd_buf_reset(b);
    if ((st = sd_enc_int(b, (int64_t)(fnv1a(text) % n))) != SD_OK ||
        (st = sd_buf_put_varint(b, text.len + 1)) != SD_OK ||
        (st = sd_buf_append_byte(b, 0x01)) != SD_OK ||
        (st = sd_buf_append_bytes(b, text)) != SD_OK) {
        return st;
    }
    return sd_emit(c, 0, sd_buf_bytes(b));
}

/* Write one shard's lines into path, through a temporary file renamed into place. */
static sd_status write_shard(sd_ctx *c, const char *path, sd_iter *values)
{
    char *tmp = sd_asprintf("%s.tmp-%ld", path, (long)getpid());
    if (tmp == NULL) {
        return SD_ENOMEM;
    }
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        sd_status st = sd_fail(c, "cannot create %s: %s", tmp, strerror(errno));
        sd_free(tmp);
        return st;
    }
    sd_status st = SD_OK;
    bool has = true;
    while (st == SD_OK) {
        sd_bytes v, tagged;
        if ((st = sd_iter_next(values, &v, &has)) != SD_OK || !has) {
            break;
        }
        sd_reader r = sd_reader_make(v);
        if (sd_read_bytes(&r, &tagged) != SD_OK || tagged.len == 0) {
            st = sd_fail(c, "WriteText: malformed grouped line");
        } else if (tagged.ptr[0] == 0x01 &&
                   (fwrite(tagged.ptr + 1, 1, tagged.len - 1, f) != tagged.len - 1 ||
                    fputc('\n', f) == EOF)) {
            st = sd_fail(c, "cannot write %s: %s", tmp, strerror(errno));
        }
    }
    if (fclose(f) != 0 && st == SD_OK) {
        st = sd_fail(c, "cannot write %s: %s", tmp, strerror(errno));
    }
    if (st == SD_OK && rename(tmp, path) != 0) {
        st = sd_fail(c, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    if (st != SD_OK) {
        unlink(tmp);
    }
    sd_free(tmp);
    return st;
}

static sd_status write_process(sd_ctx *c, void *state)
{
    sd_reader r = sd_reader_make(sd_ctx_config(c));
    sd_bytes prefix, key;
    uint64_t n;
    int64_t shard;
    sd_iter values;
    (void)state;
    if (sd_reader_lp(&r, &prefix) != SD_OK || sd_reader_varint(&r, &n) != SD_OK) {
        return sd_fail(c, "WriteText: malformed configuration");
    }
    if (sd_ctx_grouped(c, &key, &values) != SD_OK) {
        return sd_fail(c, "WriteText: the input is not grouped by shard");
    }
    sd_reader kr = sd_reader_make(key);
    if (sd_read_int(&kr, &shard) != SD_OK || shard < 0 || (uint64_t)shard >= n) {
        return sd_fail(c, "WriteText: a shard number is out of range");
    }
    char *path = sd_asprintf("%.*s-%05lld-of-%05llu", (int)prefix.len, (const char *)prefix.ptr,
                             (long long)shard, (unsigned long long)n);
    if (path == NULL) {
        return SD_ENOMEM;
    }
    sd_status st = write_shard(c, path, &values);
    sd_free(path);
    return st;
}

void sd_write_text(sd_pipeline *p,
                   const char *name,
                   sd_pcoll *input,
                   const char *prefix,
                   int n_shards)
{
    sd_buf cfg, ncfg, markers;
    if (sd__pipeline_failed(p) || input == NULL) {
        return;
    }
    const char *nm = name != NULL ? name : "(null)";
    const sd_coder *ic = sd_pcoll_coder(input);
    if (ic->kind != SD_CODER_STRING_UTF8 && ic->kind != SD_CODER_BYTES) {
        sd__pipeline_fail(p, SD_EINVAL, "WriteText \"%s\": the input %s is not strings or bytes",
                          nm, sd_pcoll_id(input));
        return;
    }
    if (prefix == NULL || prefix[0] == '\0') {
        sd__pipeline_fail(p, SD_EINVAL, "WriteText \"%s\": empty file prefix", nm);
        return;
    }
    size_t n = n_shards > 0 ? (size_t)n_shards : 1;
    char *abs = absolute(prefix);
    sd_bytes *elems = sd_calloc(n, sizeof(*elems));
    size_t *ends = sd_calloc(n, sizeof(*ends));
    sd_buf_init(&cfg, 0);
    sd_buf_init(&ncfg, 0);
    sd_buf_init(&markers, 0);
    sd_status st = abs != NULL && elems != NULL && ends != NULL ? SD_OK : SD_ENOMEM;
    if (st == SD_OK && (st = path_config(&cfg, abs, true, n)) == SD_OK) {
        st = sd_buf_put_varint(&ncfg, n);
    }
    /* Marker i: KV<varint i, bytes(0x00)>. Sliced after the buffer stops moving. */
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        if ((st = sd_enc_int(&markers, (int64_t)i)) == SD_OK &&
            (st = sd_buf_put_varint(&markers, 1)) == SD_OK) {
            st = sd_buf_append_byte(&markers, 0x00);
        }
        ends[i] = markers.len;
    }
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        size_t start = i == 0 ? 0 : ends[i - 1];
        elems[i] = sd_bytes_make(markers.data + start, ends[i] - start);
    }
    if (st != SD_OK) {
        sd__pipeline_fail(p, st, "out of memory");
    } else {
        long saved = sd__pipeline_begin_composite(p, name);
        const sd_coder *kv = sd_pcoder_kv(p, sd_pcoder_varint(p), sd_pcoder_bytes(p));
        sd_windowfn global = { .kind = SD_WINDOW_GLOBAL };
        sd_pcoll *g = sd_window_into(p, "Global", input, &global);
        sd_pcoll *parts[2] = { sd_apply(p, "Shard", g, SD_FN_TEXT_SHARD, sd_buf_bytes(&ncfg), kv),
                               sd_create(p, "Shards", kv, elems, n, NULL) };
        sd_pcoll *all =
            parts[0] != NULL && parts[1] != NULL ? sd_flatten(p, "All", parts, 2) : NULL;
        sd_pcoll *grouped = sd_group_by_key(p, "Group", all);
        sd_apply(p, "Write", grouped, SD_FN_TEXT_WRITE, sd_buf_bytes(&cfg), NULL);
        sd__pipeline_end_composite(p, saved, NULL);
    }
    sd_buf_deinit(&markers);
    sd_buf_deinit(&ncfg);
    sd_buf_deinit(&cfg);
    sd_free(ends);
    sd_free(elems);
    sd_free(abs);
}

/* ================================================================ registration */

void sd__register_textio_builtins(void)
{
    static const sd_dofn glob_fn = { .process = glob_process };
    static const sd_dofn lines = { .process = lines_process };
    static const sd_dofn shard = { .setup = sd__buf_state_setup,
                                   .process = shard_process,
                                   .teardown = sd__buf_state_teardown };
    static const sd_dofn write = { .process = write_process };
    if (sd_register_dofn(SD_FN_TEXT_GLOB, &glob_fn) != SD_OK ||
        sd_register_dofn(SD_FN_TEXT_READ, &lines) != SD_OK ||
        sd_register_dofn(SD_FN_TEXT_SHARD, &shard) != SD_OK ||
        sd_register_dofn(SD_FN_TEXT_WRITE, &write) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
}
