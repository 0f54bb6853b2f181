/*
 * Sundial: executor: one committed metric per identity.
 *
 * Every bundle's ProcessBundleResponse reports its own monitoring infos, so a stage that ran
 * in several bundles reports the same metric (URN, type and labels) several times. A job's
 * committed metrics must hold one value per metric: Beam's clients index them by their key
 * (Python's PortableMetrics keeps the last it reads, so two bundles counting 2 and 4 showed 4,
 * not 6). Before publishing, the executor therefore merges duplicates the way Beam aggregates
 * each type (payload encodings as beam_runner_api.proto's MonitoringInfoTypeUrns describe):
 *
 *   sum_int64            varint                                  sum
 *   sum_double           big-endian double                       sum
 *   distribution_int64   varint count, sum, min, max             counts and sums add, min/max
 *   distribution_double  varint count; double sum, min, max      the same
 *   latest_int64/double  varint timestamp ms, then the value     the latest timestamp wins
 *                                                                (the later report on a tie)
 *   set_string           big-endian int32 count, then the        union, in first-seen order
 *                        strings (varint length + UTF-8)
 *
 * Other types (top/bottom N, histograms, bounded tries, progress) and payloads that do not
 * decode are passed through as they came, one per report. The merged payloads live in this
 * module's buffers while the job copies the infos (sd__exec_metrics_merged_release).
 *
 * A long job does not wait for its end: exec_metrics.c merges what it kept whenever the
 * reports pile up (every bundle reports again, so a streaming job would otherwise keep every
 * bundle's infos for hours). The merge of merges is the same merge, report order kept. Only
 * the types passed through lose something then: each keeps its latest report
 * (pass_latest), which is what Beam's clients read anyway (they index metrics by key, and the
 * last one read wins).
 */
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/exec/exec_int.h"
#include "runner/urns/urns.h"

typedef enum kind { K_PASS, K_SUM_I, K_SUM_D, K_DIST_I, K_DIST_D, K_LATEST, K_SET } kind;

static kind kind_of(const char *type)
{
    static const struct {
        const char *urn;
        kind k;
    } kinds[] = {
        { SD_URN_METRIC_TYPE_SUM_INT64, K_SUM_I },
        { SD_URN_METRIC_TYPE_SUM_DOUBLE, K_SUM_D },
        { SD_URN_METRIC_TYPE_DISTRIBUTION_INT64, K_DIST_I },
        { SD_URN_METRIC_TYPE_DISTRIBUTION_DOUBLE, K_DIST_D },
        { SD_URN_METRIC_TYPE_LATEST_INT64, K_LATEST },
        { SD_URN_METRIC_TYPE_LATEST_DOUBLE, K_LATEST },
        { SD_URN_METRIC_TYPE_SET_STRING, K_SET },
    };

    for (size_t i = 0; type != NULL && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcmp(type, kinds[i].urn) == 0) {
            return kinds[i].k;
        }
    }
    return K_PASS;
}

/* What one metric adds up to so far. */
typedef struct acc {
    kind k;
    size_t first;   /* index of its first report: the info that carries the result */
    size_t reports; /* how many were merged into it */
    uint64_t i[4];  /* sums and counts (two's complement wrap, as the SDKs' int64 does) */
    int64_t min, max;
    double d[3];       /* sum, min, max */
    int64_t latest_ts; /* K_LATEST: the winning report's timestamp */
    size_t latest;     /* K_LATEST: its index; K_PASS (pass_latest): its latest report */
    sd_vec strs;       /* K_SET: sd_bytes borrowed from the infos, first-seen order */
    sd_map seen;       /* K_SET: string -> present */
} acc;

static double get_double(sd_reader *r, bool *ok)
{
    uint64_t bits = 0;
    double v = 0;
    *ok = *ok && sd_reader_be64(r, &bits) == SD_OK;
    memcpy(&v, &bits, sizeof(v));
    return v;
}

static uint64_t get_varint(sd_reader *r, bool *ok)
{
    uint64_t v = 0;
    *ok = *ok && sd_reader_varint(r, &v) == SD_OK;
    return v;
}

/* Fold one report (its payload p, at index at) into a. False when p does not decode (a is
 * then unchanged). */
static bool fold(acc *a, sd_bytes p, size_t at)
{
    sd_reader r = sd_reader_make(p);
    bool ok = true, first = a->reports == 0;
    switch (a->k) {
    case K_SUM_I: {
        uint64_t v = get_varint(&r, &ok);
        ok = ok && sd_reader_done(&r);
        if (ok) {
            a->i[0] += v;
        }
        break;
    }
    case K_SUM_D: {
        double v = get_double(&r, &ok);
        ok = ok && sd_reader_done(&r);
        if (ok) {
            a->d[0] += v;
        }
        break;
    }
    case K_DIST_I: {
        uint64_t n = get_varint(&r, &ok), s = get_varint(&r, &ok);
        int64_t lo = (int64_t)get_varint(&r, &ok), hi = (int64_t)get_varint(&r, &ok);
        ok = ok && sd_reader_done(&r);
        if (ok && n > 0) {
            bool none = a->i[0] == 0;
            a->min = none || lo < a->min ? lo : a->min;
            a->max = none || hi > a->max ? hi : a->max;
        }
        if (ok) {
            a->i[0] += n;
            a->i[1] += s;
        }
        break;
    }
    case K_DIST_D: {
        uint64_t n = get_varint(&r, &ok);
        double s = get_double(&r, &ok), lo = get_double(&r, &ok), hi = get_double(&r, &ok);
        ok = ok && sd_reader_done(&r);
        if (ok && n > 0) {
            bool none = a->i[0] == 0;
            a->d[1] = none || lo < a->d[1] ? lo : a->d[1];
            a->d[2] = none || hi > a->d[2] ? hi : a->d[2];
        }
        if (ok) {
            a->i[0] += n;
            a->d[0] += s;
        }
        break;
    }
    case K_LATEST: {
        int64_t ts = (int64_t)get_varint(&r, &ok);
        if (ok && (first || ts >= a->latest_ts)) {
            a->latest_ts = ts;
            a->latest = at;
        }
        break;
    }
    case K_SET: {
        uint32_t n = 0;
        ok = sd_reader_be32(&r, &n) == SD_OK && n <= INT32_MAX;
        for (uint32_t j = 0; ok && j < n; j++) {
            sd_bytes s;
            ok = sd_reader_lp(&r, &s) == SD_OK;
            if (ok && !sd_map_has(&a->seen, s)) {
                ok = sd_map_put(&a->seen, s, (void *)1) == SD_OK &&
                     sd_vec_push(&a->strs, &s) == SD_OK;
            }
        }
        ok = ok && sd_reader_done(&r);
        break;
    }
    case K_PASS:
        ok = false;
        break;
    }
    if (ok) {
        a->reports++;
    }
    return ok;
}

/* The merged payload of a (more than one report). */
static sd_status encode(const acc *a, pb_MonitoringInfo *const *infos, sd_buf *out)
{
    sd_status st = SD_OK;
    uint64_t bits[3];
    memcpy(bits, a->d, sizeof(bits));
    switch (a->k) {
    case K_SUM_I:
        return sd_buf_put_varint(out, a->i[0]);
    case K_SUM_D:
        return sd_buf_put_be64(out, bits[0]);
    case K_DIST_I:
        st = sd_buf_put_varint(out, a->i[0]);
        st = st == SD_OK ? sd_buf_put_varint(out, a->i[1]) : st;
        st = st == SD_OK ? sd_buf_put_varint(out, (uint64_t)a->min) : st;
        return st == SD_OK ? sd_buf_put_varint(out, (uint64_t)a->max) : st;
    case K_DIST_D:
        st = sd_buf_put_varint(out, a->i[0]);
        for (int j = 0; j < 3 && st == SD_OK; j++) {
            st = sd_buf_put_be64(out, bits[j]);
        }
        return st;
    case K_LATEST: {
        const pb_MonitoringInfo *w = infos[a->latest];
        return sd_buf_append(out, w->payload.data, w->payload.len);
    }
    case K_SET:
        st = sd_buf_put_be32(out, (uint32_t)a->strs.len);
        for (size_t j = 0; j < a->strs.len && st == SD_OK; j++) {
            st = sd_buf_put_lp(out, *SD_VEC_AT(&a->strs, sd_bytes, j));
        }
        return st;
    case K_PASS:
        break;
    }
    return SD_EINTERNAL;
}

/* The identity of a metric: type, URN and its labels sorted by key, in k. */
static sd_status identity(const pb_MonitoringInfo *mi, sd_buf *k)
{
    sd_buf_reset(k);
    sd_status st = sd_buf_put_lp(k, sd_bytes_str(mi->type));
    st = st == SD_OK ? sd_buf_put_lp(k, sd_bytes_str(mi->urn)) : st;
    const char *prev = NULL;
    for (size_t n = 0; n < mi->n_labels && st == SD_OK; n++) {
        /* The next label in key order after prev (labels are few: quadratic is fine). */
        const char *best = NULL;
        size_t at = 0;
        for (size_t j = 0; j < mi->n_labels; j++) {
            const char *key = mi->labels[j]->key != NULL ? mi->labels[j]->key : "";
            if ((prev == NULL || strcmp(key, prev) > 0) &&
                (best == NULL || strcmp(key, best) < 0)) {
                best = key;
                at = j;
            }
        }
        if (best == NULL) {
            break;
        }
        const char *val = mi->labels[at]->value != NULL ? mi->labels[at]->value : "";
        st = sd_buf_put_lp(k, sd_bytes_str(best));
        st = st == SD_OK ? sd_buf_put_lp(k, sd_bytes_str(val)) : st;
        prev = best;
    }
    return st;
}

static void acc_free(void *p)
{
    acc *a = p;
    if (a != NULL) {
        sd_vec_deinit(&a->strs);
        sd_map_deinit(&a->seen);
        sd_free(a);
    }
}

sd_status sd__exec_metrics_merge(pb_MonitoringInfo **infos,
                                 size_t n,
                                 bool pass_latest,
                                 size_t *out_n,
                                 sd_exec_merged *m)
{
    sd_map by_id;
    sd_buf key;
    sd_status st = SD_OK;
    size_t k = 0;
    sd_map_init(&by_id, acc_free);
    sd_buf_init(&key, 0);
    memset(m, 0, sizeof(*m));
    m->keep = sd_calloc(n == 0 ? 1 : n, sizeof(*m->keep));
    /* pass_latest: the passed-through metric each report belongs to (NULL: none) */
    acc **pass_of = pass_latest ? sd_calloc(n == 0 ? 1 : n, sizeof(*pass_of)) : NULL;
    sd_vec accs; /* acc * in first-seen order (borrowed from by_id) */
    sd_vec_init(&accs, sizeof(acc *));
    if (m->keep == NULL || (pass_latest && pass_of == NULL)) {
        st = SD_ENOMEM;
    }
    for (size_t i = 0; i < n && st == SD_OK; i++) {
        pb_MonitoringInfo *mi = infos[i];
        bool named = mi->urn != NULL && mi->type != NULL;
        kind kd = named ? kind_of(mi->type) : K_PASS;
        acc *a = NULL;
        if (named && (kd != K_PASS || pass_latest) && (st = identity(mi, &key)) == SD_OK) {
            a = sd_map_get(&by_id, sd_buf_bytes(&key));
            if (a == NULL) {
                a = sd_calloc(1, sizeof(*a));
                if (a == NULL) {
                    st = SD_ENOMEM;
                    break;
                }
                a->k = kd;
                a->first = i;
                sd_vec_init(&a->strs, sizeof(sd_bytes));
                sd_map_init(&a->seen, NULL);
                if (sd_map_put(&by_id, sd_buf_bytes(&key), a) != SD_OK) {
                    acc_free(a);
                    st = SD_ENOMEM;
                    break;
                }
                st = sd_vec_push(&accs, &a);
                if (st == SD_OK && kd != K_PASS &&
                    fold(a, sd_bytes_make(mi->payload.data, mi->payload.len), i)) {
                    m->keep[k++] = i;
                    continue;
                }
                a->k = K_PASS; /* its first report does not decode: pass them all through */
            } else if (a->k != K_PASS &&
                       fold(a, sd_bytes_make(mi->payload.data, mi->payload.len), i)) {
                continue; /* merged into the first */
            }
            if (a->k == K_PASS && pass_of != NULL) {
                a->latest = i;
                pass_of[i] = a;
            }
        }
        m->keep[k++] = i;
    }
    if (st == SD_OK && pass_of != NULL) { /* only the latest report of a passed-through metric */
        size_t kept = 0;
        for (size_t j = 0; j < k; j++) {
            size_t i = m->keep[j];
            if (pass_of[i] == NULL || pass_of[i]->latest == i) {
                m->keep[kept++] = i;
            }
        }
        k = kept;
    }
    sd_free(pass_of);
    /* Give each merged metric its combined payload (the originals are put back on release). */
    m->bufs = sd_calloc(accs.len == 0 ? 1 : accs.len, sizeof(*m->bufs));
    m->saved = sd_calloc(accs.len == 0 ? 1 : accs.len, sizeof(*m->saved));
    m->at = sd_calloc(accs.len == 0 ? 1 : accs.len, sizeof(*m->at));
    if (st == SD_OK && (m->bufs == NULL || m->saved == NULL || m->at == NULL)) {
        st = SD_ENOMEM;
    }
    for (size_t j = 0; j < accs.len && st == SD_OK; j++) {
        acc *a = *SD_VEC_AT(&accs, acc *, j);
        if (a->k == K_PASS || a->reports < 2) {
            continue;
        }
        sd_buf *b = &m->bufs[m->n];
        sd_buf_init(b, 0);
        st = encode(a, infos, b);
        if (st != SD_OK) {
            sd_buf_deinit(b);
            break;
        }
        pb_MonitoringInfo *mi = infos[a->first];
        m->at[m->n] = mi;
        m->saved[m->n] = mi->payload;
        mi->payload.data = b->data;
        mi->payload.len = b->len;
        m->n++;
    }
    sd_vec_deinit(&accs);
    sd_map_deinit(&by_id);
    sd_buf_deinit(&key);
    if (st != SD_OK) {
        sd__exec_metrics_merged_release(m);
        return st;
    }
    /* The infos that stay, in their order. */
    for (size_t j = 0; j < k; j++) {
        infos[j] = infos[m->keep[j]];
    }
    *out_n = k;
    return SD_OK;
}

void sd__exec_metrics_merged_release(sd_exec_merged *m)
{
    for (size_t j = 0; j < m->n; j++) {
        m->at[j]->payload = m->saved[j];
        sd_buf_deinit(&m->bufs[j]);
    }
    sd_free(m->bufs);
    sd_free(m->saved);
    sd_free(m->at);
    sd_free(m->keep);
    memset(m, 0, sizeof(*m));
}
