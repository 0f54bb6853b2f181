/*
 * Sundial unit tests: one committed metric per identity (runner/exec/exec_metrics_merge.c).
 *
 * Reports of the same metric from several bundles are merged by their type's aggregation;
 * labels in another order are the same metric, other labels another one; types the runner does
 * not aggregate and payloads that do not decode pass through, one per report (or, pass_latest,
 * only each one's latest); release puts every info's own payload back. A run's kept reports
 * (sd__exec_metrics_add) stay bounded however many bundles report, and still add up exactly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runner/base/alloc.h"
#include "runner/exec/exec_int.h"
#include "runner/urns/urns.h"

typedef Org__Apache__Beam__Model__Pipeline__V1__MonitoringInfo__LabelsEntry pb_label;

#define MAX_INFOS 24

/* Infos built for a test, with their payload bytes and labels. */
typedef struct infos {
    pb_MonitoringInfo mi[MAX_INFOS];
    pb_label labels[MAX_INFOS][2];
    pb_label *label_ptrs[MAX_INFOS][2];
    sd_buf payload[MAX_INFOS];
    pb_MonitoringInfo *ptrs[MAX_INFOS];
    size_t n;
} infos;

/* Add a report of urn/type with labels step=STEP (and name=NAME first when swap). */
static sd_buf *add(infos *in, const char *type, const char *urn, const char *step, bool swap)
{
    assert_true(in->n < MAX_INFOS);
    size_t i = in->n++;
    pb_MonitoringInfo *mi = &in->mi[i];
    org__apache__beam__model__pipeline__v1__monitoring_info__init(mi);
    mi->urn = (char *)urn;
    mi->type = (char *)type;
    for (int j = 0; j < 2; j++) {
        org__apache__beam__model__pipeline__v1__monitoring_info__labels_entry__init(
            &in->labels[i][j]);
    }
    in->labels[i][swap ? 1 : 0].key = (char *)"PTRANSFORM";
    in->labels[i][swap ? 1 : 0].value = (char *)step;
    in->labels[i][swap ? 0 : 1].key = (char *)"NAME";
    in->labels[i][swap ? 0 : 1].value = (char *)"m";
    in->label_ptrs[i][0] = &in->labels[i][0];
    in->label_ptrs[i][1] = &in->labels[i][1];
    mi->labels = in->label_ptrs[i];
    mi->n_labels = 2;
    sd_buf_init(&in->payload[i], 0);
    in->ptrs[i] = mi;
    return &in->payload[i];
}

static void seal(infos *in)
{
    for (size_t i = 0; i < in->n; i++) {
        in->mi[i].payload.data = in->payload[i].data;
        in->mi[i].payload.len = in->payload[i].len;
    }
}

static void done(infos *in)
{
    for (size_t i = 0; i < in->n; i++) {
        assert_ptr_equal(in->mi[i].payload.data, in->payload[i].data); /* put back */
        sd_buf_deinit(&in->payload[i]);
    }
}

static void put_double(sd_buf *b, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof(bits));
    assert_int_equal(sd_buf_put_be64(b, bits), SD_OK);
}

static double get_double(sd_reader *r)
{
    uint64_t bits;
    double d;
    assert_int_equal(sd_reader_be64(r, &bits), SD_OK);
    memcpy(&d, &bits, sizeof(d));
    return d;
}

static uint64_t get_varint(sd_reader *r)
{
    uint64_t v;
    assert_int_equal(sd_reader_varint(r, &v), SD_OK);
    return v;
}

static sd_reader payload_of(const pb_MonitoringInfo *mi)
{
    return sd_reader_make(sd_bytes_make(mi->payload.data, mi->payload.len));
}

static void test_merge_by_type(void **state)
{
    (void)state;
    infos in = { .n = 0 };
    const char *c = "beam:metric:user:sum_int64:v1";
    /* sum_int64: 2 and -5 (a varint of the two's complement) and 40, labels in either order. */
    assert_int_equal(sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, c, "s1", false), 2),
                     SD_OK);
    assert_int_equal(
        sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, c, "s1", true), (uint64_t)-5),
        SD_OK);
    /* Another step: another metric. */
    assert_int_equal(sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, c, "s2", false), 7),
                     SD_OK);
    assert_int_equal(sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, c, "s1", false), 40),
                     SD_OK);
    /* distribution_int64: (2, 4, 1, 3) + (0, 0, 0, 0) + (1, 9, 9, 9). */
    const char *d = "beam:metric:user:distribution_int64:v1";
    uint64_t dists[3][4] = { { 2, 4, 1, 3 }, { 0, 0, 0, 0 }, { 1, 9, 9, 9 } };
    for (int k = 0; k < 3; k++) {
        sd_buf *b = add(&in, SD_URN_METRIC_TYPE_DISTRIBUTION_INT64, d, "s1", false);
        for (int j = 0; j < 4; j++) {
            assert_int_equal(sd_buf_put_varint(b, dists[k][j]), SD_OK);
        }
    }
    /* sum_double 0.5 + 0.25; distribution_double (1, 2.0, 2.0, 2.0) + (2, 1.0, -1.0, 2.0). */
    put_double(add(&in, SD_URN_METRIC_TYPE_SUM_DOUBLE, "sd", "s1", false), 0.5);
    put_double(add(&in, SD_URN_METRIC_TYPE_SUM_DOUBLE, "sd", "s1", false), 0.25);
    double dd[2][3] = { { 2.0, 2.0, 2.0 }, { 1.0, -1.0, 2.0 } };
    for (int k = 0; k < 2; k++) {
        sd_buf *b = add(&in, SD_URN_METRIC_TYPE_DISTRIBUTION_DOUBLE, "dd", "s1", false);
        assert_int_equal(sd_buf_put_varint(b, (uint64_t)k + 1), SD_OK);
        for (int j = 0; j < 3; j++) {
            put_double(b, dd[k][j]);
        }
    }
    /* latest_int64: (ts 5, 1), (ts 9, 2), (ts 9, 3): the later report on a tie. */
    int64_t lat[3][2] = { { 5, 1 }, { 9, 2 }, { 9, 3 } };
    for (int k = 0; k < 3; k++) {
        sd_buf *b = add(&in, SD_URN_METRIC_TYPE_LATEST_INT64, "g", "s1", false);
        assert_int_equal(sd_buf_put_varint(b, (uint64_t)lat[k][0]), SD_OK);
        assert_int_equal(sd_buf_put_varint(b, (uint64_t)lat[k][1]), SD_OK);
    }
    /* set_string {a, zzz} + {zzz, b}. */
    const char *sets[2][2] = { { "a", "zzz" }, { "zzz", "b" } };
    for (int k = 0; k < 2; k++) {
        sd_buf *b = add(&in, SD_URN_METRIC_TYPE_SET_STRING, "ss", "s1", false);
        assert_int_equal(sd_buf_put_be32(b, 2), SD_OK);
        for (int j = 0; j < 2; j++) {
            assert_int_equal(sd_buf_put_lp(b, sd_bytes_str(sets[k][j])), SD_OK);
        }
    }
    /* Not aggregated here: both reports pass through. */
    assert_int_equal(
        sd_buf_append_str(add(&in, SD_URN_METRIC_TYPE_BOUNDED_TRIE, "t", "s1", false), "x"), SD_OK);
    assert_int_equal(
        sd_buf_append_str(add(&in, SD_URN_METRIC_TYPE_BOUNDED_TRIE, "t", "s1", false), "y"), SD_OK);
    seal(&in);
    size_t n_out = 0;
    sd_exec_merged m;
    assert_int_equal(sd__exec_metrics_merge(in.ptrs, in.n, false, &n_out, &m), SD_OK);
    /* s1 counter, s2 counter, distribution, sum_double, distribution_double, latest, set,
     * and the two tries. */
    assert_int_equal(n_out, 9);
    sd_reader r = payload_of(in.ptrs[0]);
    assert_int_equal((int64_t)get_varint(&r), 37);
    r = payload_of(in.ptrs[1]);
    assert_int_equal(get_varint(&r), 7);
    assert_string_equal(in.ptrs[1]->labels[0]->value, "s2");
    r = payload_of(in.ptrs[2]);
    assert_int_equal(get_varint(&r), 3);
    assert_int_equal(get_varint(&r), 13);
    assert_int_equal(get_varint(&r), 1);
    assert_int_equal(get_varint(&r), 9);
    r = payload_of(in.ptrs[3]);
    assert_true(get_double(&r) == 0.75);
    r = payload_of(in.ptrs[4]);
    assert_int_equal(get_varint(&r), 3);
    assert_true(get_double(&r) == 3.0);
    assert_true(get_double(&r) == -1.0);
    assert_true(get_double(&r) == 2.0);
    r = payload_of(in.ptrs[5]);
    assert_int_equal(get_varint(&r), 9);
    assert_int_equal(get_varint(&r), 3);
    r = payload_of(in.ptrs[6]);
    uint32_t n_set;
    assert_int_equal(sd_reader_be32(&r, &n_set), SD_OK);
    assert_int_equal(n_set, 3);
    const char *want[] = { "a", "zzz", "b" };
    for (int j = 0; j < 3; j++) {
        sd_bytes s;
        assert_int_equal(sd_reader_lp(&r, &s), SD_OK);
        assert_true(sd_bytes_equal(s, sd_bytes_str(want[j])));
    }
    assert_int_equal(in.ptrs[7]->payload.data[0], 'x');
    assert_int_equal(in.ptrs[8]->payload.data[0], 'y');
    sd__exec_metrics_merged_release(&m);
    done(&in);
}

/* A report whose payload does not decode is kept as it came, and so is its metric's first. */
static void test_merge_undecodable(void **state)
{
    (void)state;
    infos in = { .n = 0 };
    assert_int_equal(sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, "c", "s", false), 4),
                     SD_OK);
    assert_int_equal(sd_buf_append_byte(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, "c", "s", false),
                                        0x80), /* a varint cut short */
                     SD_OK);
    assert_int_equal(sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, "c", "s", false), 6),
                     SD_OK);
    seal(&in);
    size_t n_out = 0;
    sd_exec_merged m;
    assert_int_equal(sd__exec_metrics_merge(in.ptrs, in.n, false, &n_out, &m), SD_OK);
    assert_int_equal(n_out, 2);
    sd_reader r = payload_of(in.ptrs[0]);
    assert_int_equal(get_varint(&r), 10);
    assert_int_equal(in.ptrs[1]->payload.len, 1);
    sd__exec_metrics_merged_release(&m);
    done(&in);
}

/* pass_latest: a type that is not aggregated keeps only its latest report, per metric. */
static void test_merge_pass_latest(void **state)
{
    (void)state;
    infos in = { .n = 0 };
    const char *tries[] = { "x", "y", "z" };
    for (int k = 0; k < 3; k++) {
        assert_int_equal(sd_buf_append_str(add(&in, SD_URN_METRIC_TYPE_BOUNDED_TRIE, "t",
                                               k == 1 ? "s2" : "s1", false),
                                           tries[k]),
                         SD_OK);
        assert_int_equal(
            sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, "c", "s1", false), 5), SD_OK);
    }
    seal(&in);
    size_t n_out = 0;
    sd_exec_merged m;
    assert_int_equal(sd__exec_metrics_merge(in.ptrs, in.n, true, &n_out, &m), SD_OK);
    /* the counter (first seen at 1), s2's trie (2), s1's latest trie (4), in report order */
    assert_int_equal(n_out, 3);
    sd_reader r = payload_of(in.ptrs[0]);
    assert_int_equal(get_varint(&r), 15);
    assert_int_equal(in.ptrs[1]->payload.data[0], 'y');
    assert_int_equal(in.ptrs[2]->payload.data[0], 'z');
    sd__exec_metrics_merged_release(&m);
    done(&in);
}

/* Pack a report of a run: count as a counter and a distribution, one trie per report. */
static void run_report(sd_exec_run *r, int64_t v)
{
    infos in = { .n = 0 };
    assert_int_equal(
        sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_SUM_INT64, "c", "s", false), (uint64_t)v),
        SD_OK);
    sd_buf *d = add(&in, SD_URN_METRIC_TYPE_DISTRIBUTION_INT64, "d", "s", false);
    assert_int_equal(sd_buf_put_varint(d, 1), SD_OK);
    assert_int_equal(sd_buf_put_varint(d, (uint64_t)v), SD_OK);
    assert_int_equal(sd_buf_put_varint(d, (uint64_t)v), SD_OK);
    assert_int_equal(sd_buf_put_varint(d, (uint64_t)v), SD_OK);
    assert_int_equal(
        sd_buf_put_varint(add(&in, SD_URN_METRIC_TYPE_BOUNDED_TRIE, "t", "s", false), (uint64_t)v),
        SD_OK);
    seal(&in);
    for (size_t i = 0; i < in.n; i++) {
        sd__exec_metrics_add(r, in.ptrs[i]);
    }
    done(&in);
}

/*
 * A streaming job's bundles report for hours: the run keeps a bounded number of reports (it
 * kept every one, about 200 bytes each, so Beam Python's soak grew 3 MB a minute), and what it
 * publishes still adds up exactly.
 */
static void test_run_reports_bounded(void **state)
{
    (void)state;
    sd_exec_run *r = sd_calloc(1, sizeof(*r));
    assert_non_null(r);
    sd_vec_init(&r->metrics, sizeof(sd_buf));
    sd_map_init(&r->gauges, sd__exec_gauge_free);
    const int64_t n = 100000;
    size_t most = 0;
    for (int64_t v = 1; v <= n; v++) {
        run_report(r, v);
        most = SD_MAX(most, r->metrics.len);
    }
    assert_true(most <= 4096);
    assert_true(r->metrics_merged);
    /* What publishing merges: one counter, one distribution, the latest trie. */
    size_t k = r->metrics.len, n_out = 0;
    pb_MonitoringInfo **got = sd_calloc(k, sizeof(*got));
    pb_MonitoringInfo **pub = sd_calloc(k, sizeof(*pub));
    assert_non_null(got);
    assert_non_null(pub);
    for (size_t i = 0; i < k; i++) {
        const sd_buf *b = SD_VEC_AT(&r->metrics, sd_buf, i);
        got[i] = (pb_MonitoringInfo *)protobuf_c_message_unpack(
            &org__apache__beam__model__pipeline__v1__monitoring_info__descriptor, NULL, b->len,
            b->data);
        assert_non_null(got[i]);
        pub[i] = got[i];
    }
    sd_exec_merged m;
    assert_int_equal(sd__exec_metrics_merge(pub, k, r->metrics_merged, &n_out, &m), SD_OK);
    assert_int_equal(n_out, 3);
    uint64_t sum = (uint64_t)(n * (n + 1) / 2);
    sd_reader rd = payload_of(pub[0]);
    assert_int_equal(get_varint(&rd), sum);
    rd = payload_of(pub[1]);
    assert_int_equal(get_varint(&rd), (uint64_t)n);
    assert_int_equal(get_varint(&rd), sum);
    assert_int_equal(get_varint(&rd), 1);
    assert_int_equal(get_varint(&rd), (uint64_t)n);
    rd = payload_of(pub[2]);
    assert_int_equal(get_varint(&rd), (uint64_t)n);
    sd__exec_metrics_merged_release(&m);
    for (size_t i = 0; i < k; i++) {
        protobuf_c_message_free_unpacked(&got[i]->base, NULL);
        sd_buf_deinit(SD_VEC_AT(&r->metrics, sd_buf, i));
    }
    sd_free(got);
    sd_free(pub);
    sd_vec_deinit(&r->metrics);
    sd_map_deinit(&r->gauges);
    sd_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_by_type),
        cmocka_unit_test(test_merge_undecodable),
        cmocka_unit_test(test_merge_pass_latest),
        cmocka_unit_test(test_run_reports_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
