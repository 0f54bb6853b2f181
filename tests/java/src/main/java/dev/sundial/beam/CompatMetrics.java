package dev.sundial.beam;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;
import java.util.stream.Collectors;
import org.apache.beam.model.jobmanagement.v1.JobApi;
import org.apache.beam.model.pipeline.v1.MetricsApi.MonitoringInfo;
import org.apache.beam.runners.core.metrics.DistributionData;
import org.apache.beam.runners.core.metrics.GaugeData;
import org.apache.beam.runners.core.metrics.MonitoringInfoEncodings;
import org.apache.beam.sdk.metrics.DistributionResult;
import org.apache.beam.sdk.metrics.GaugeResult;
import org.apache.beam.sdk.metrics.MetricFiltering;
import org.apache.beam.sdk.metrics.MetricKey;
import org.apache.beam.sdk.metrics.MetricName;
import org.apache.beam.sdk.metrics.MetricQueryResults;
import org.apache.beam.sdk.metrics.MetricResult;
import org.apache.beam.sdk.metrics.MetricResults;
import org.apache.beam.sdk.metrics.MetricsFilter;
import org.apache.beam.sdk.metrics.StringSetResult;

/**
 * A job's user metrics as Beam's portable client reports them: the Job API's attempted and
 * committed MonitoringInfos together, each as an attempted value (committed values are not
 * supported, as in Beam's PortableMetrics); counters, distributions, gauges and string sets.
 */
final class CompatMetrics extends MetricResults {
  private final List<MetricResult<Long>> counters = new ArrayList<>();
  private final List<MetricResult<DistributionResult>> distributions = new ArrayList<>();
  private final List<MetricResult<GaugeResult>> gauges = new ArrayList<>();
  private final List<MetricResult<StringSetResult>> stringSets = new ArrayList<>();

  static CompatMetrics empty() {
    return new CompatMetrics();
  }

  static CompatMetrics of(JobApi.MetricResults m) {
    CompatMetrics r = new CompatMetrics();
    List<MonitoringInfo> all = new ArrayList<>(m.getAttemptedList());
    all.addAll(m.getCommittedList());
    for (MonitoringInfo mi : all) {
      Map<String, String> labels = mi.getLabelsMap();
      if (labels.get("NAMESPACE") == null || labels.get("NAME") == null) {
        continue; // a system metric (element counts, timings)
      }
      MetricKey key =
          MetricKey.create(
              labels.get("PTRANSFORM"), MetricName.named(labels.get("NAMESPACE"), labels.get("NAME")));
      switch (mi.getType()) {
        case "beam:metrics:sum_int64:v1":
          r.counters.add(
              MetricResult.create(key, false, MonitoringInfoEncodings.decodeInt64Counter(mi.getPayload())));
          break;
        case "beam:metrics:distribution_int64:v1":
          DistributionData d = MonitoringInfoEncodings.decodeInt64Distribution(mi.getPayload());
          r.distributions.add(
              MetricResult.create(
                  key, false, DistributionResult.create(d.sum(), d.count(), d.min(), d.max())));
          break;
        case "beam:metrics:latest_int64:v1":
          GaugeData g = MonitoringInfoEncodings.decodeInt64Gauge(mi.getPayload());
          r.gauges.add(MetricResult.create(key, false, GaugeResult.create(g.value(), g.timestamp())));
          break;
        case "beam:metrics:set_string:v1":
          r.stringSets.add(
              MetricResult.create(
                  key,
                  false,
                  StringSetResult.create(
                      MonitoringInfoEncodings.decodeStringSet(mi.getPayload()).stringSet())));
          break;
        default:
          break;
      }
    }
    return r;
  }

  private static <T> List<MetricResult<T>> select(List<MetricResult<T>> in, MetricsFilter f) {
    Predicate<MetricResult<T>> p = x -> f == null || MetricFiltering.matches(f, x.getKey());
    return in.stream().filter(p).collect(Collectors.toList());
  }

  @Override
  public MetricQueryResults queryMetrics(MetricsFilter filter) {
    return MetricQueryResults.create(
        select(counters, filter),
        select(distributions, filter),
        select(gauges, filter),
        select(stringSets, filter),
        Collections.emptyList(),
        Collections.emptyList());
  }
}
