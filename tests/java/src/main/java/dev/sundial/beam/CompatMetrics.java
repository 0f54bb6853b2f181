package dev.sundial.beam;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
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
 * A job's user metrics as Beam's portable client reports them (PortableMetrics, since Beam's fix
 * of its issue 32001): the Job API's attempted and committed MonitoringInfos are merged by metric
 * identity (type, step, namespace, name), a committed one replacing the attempted one, and each
 * result says whether it is committed (then getCommitted() answers; otherwise it throws, as for
 * a runner without committed metrics). Counters, distributions, gauges and string sets.
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
    // Insertion order is the attempted list's, then committed-only metrics; committed wins.
    Map<String, MonitoringInfo> merged = new LinkedHashMap<>();
    Map<String, Boolean> committed = new HashMap<>();
    for (MonitoringInfo mi : m.getAttemptedList()) {
      merged.putIfAbsent(identity(mi), mi);
      committed.putIfAbsent(identity(mi), false);
    }
    for (MonitoringInfo mi : m.getCommittedList()) {
      merged.put(identity(mi), mi);
      committed.put(identity(mi), true);
    }
    for (Map.Entry<String, MonitoringInfo> e : merged.entrySet()) {
      MonitoringInfo mi = e.getValue();
      boolean isCommitted = committed.get(e.getKey());
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
              MetricResult.create(key, isCommitted, MonitoringInfoEncodings.decodeInt64Counter(mi.getPayload())));
          break;
        case "beam:metrics:distribution_int64:v1":
          DistributionData d = MonitoringInfoEncodings.decodeInt64Distribution(mi.getPayload());
          r.distributions.add(
              MetricResult.create(
                  key, isCommitted, DistributionResult.create(d.sum(), d.count(), d.min(), d.max())));
          break;
        case "beam:metrics:latest_int64:v1":
          GaugeData g = MonitoringInfoEncodings.decodeInt64Gauge(mi.getPayload());
          r.gauges.add(MetricResult.create(key, isCommitted, GaugeResult.create(g.value(), g.timestamp())));
          break;
        case "beam:metrics:set_string:v1":
          r.stringSets.add(
              MetricResult.create(
                  key,
                  isCommitted,
                  StringSetResult.create(
                      MonitoringInfoEncodings.decodeStringSet(mi.getPayload()).stringSet())));
          break;
        default:
          break;
      }
    }
    return r;
  }

  private static String identity(MonitoringInfo mi) {
    Map<String, String> l = mi.getLabelsMap();
    return mi.getType()
        + "|"
        + l.getOrDefault("PTRANSFORM", "")
        + "|"
        + l.getOrDefault("NAMESPACE", "")
        + "|"
        + l.getOrDefault("NAME", "");
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
