"""metrics_check.py SUNDIAL - committed metrics are one value per metric, whatever the bundles.

Beam's clients index a job's committed metrics by metric (Python's PortableMetrics keeps the
last report it reads), so the runner must merge what each bundle reports. Runs Beam's
test_metrics pipeline (two elements 'a' and 'zzz' into six consumers: two counters, a
distribution, a gauge, a string set) with Beam's Python SDK (PortableRunner, LOOPBACK) on

  1. `sundial serve --max-bundle-bytes 1`: every element its own bundle, so every metric is
     reported twice and must be merged: counters 2 and 4, distribution (count 2, sum 4, min 1,
     max 3), gauge 3, string set {a, zzz};
  2. `sundial serve --memory_limit 1`: every element through the spill file; the same values;
  3. the default server: the same values (one bundle, nothing to merge).

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import sys

from sundial_py import Checks, serve, sundial_options


def metrics_pipeline(endpoint, name):
    """Run Beam's test_metrics pipeline; (state, query results by kind)."""
    import apache_beam as beam
    from apache_beam.metrics import Metrics, MetricsFilter

    counter = Metrics.counter("ns", "counter")
    distribution = Metrics.distribution("ns", "distribution")
    gauge = Metrics.gauge("ns", "gauge")
    string_set = Metrics.string_set("ns", "string_set")
    p = beam.Pipeline(options=sundial_options(endpoint, name))
    pcoll = p | beam.Create(["a", "zzz"])
    # pylint: disable=expression-not-assigned
    pcoll | "count1" >> beam.FlatMap(lambda x: counter.inc())
    pcoll | "count2" >> beam.FlatMap(lambda x: counter.inc(len(x)))
    pcoll | "dist" >> beam.FlatMap(lambda x: distribution.update(len(x)))
    pcoll | "gauge" >> beam.FlatMap(lambda x: gauge.set(3))
    pcoll | "string_set" >> beam.FlatMap(lambda x: string_set.add(x))
    result = p.run()
    result.wait_until_finish(duration=120000)
    return str(result.state), result.metrics().query(MetricsFilter())


def check_run(checks, endpoint, what):
    state, q = metrics_pipeline(endpoint, "metrics-" + what.split()[0])
    checks.check(state == "DONE", "%s: DONE (%s)" % (what, state))
    counters = sorted((c.key.step.split("_")[-2], c.committed) for c in q["counters"]
                      if c.key.metric.name == "counter")
    checks.check(counters == [("count1", 2), ("count2", 4)],
                 "%s: counters merged per step: %s" % (what, counters))
    dists = [(d.committed.count, d.committed.sum, d.committed.min, d.committed.max)
             for d in q["distributions"] if d.key.metric.name == "distribution"]
    checks.check(dists == [(2, 4, 1, 3)], "%s: distribution (count, sum, min, max) %s" %
                 (what, dists))
    gauges = [g.committed.value for g in q["gauges"] if g.key.metric.name == "gauge"]
    checks.check(gauges == [3], "%s: gauge %s" % (what, gauges))
    sets = [sorted(s.committed) for s in q["string_sets"] if s.key.metric.name == "string_set"]
    checks.check(sets == [["a", "zzz"]], "%s: string set %s" % (what, sets))


def main():
    sundial = sys.argv[1]
    try:
        import apache_beam  # noqa: F401
    except ImportError as e:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh): %s" % e)
        return 77
    checks = Checks()
    with serve(sundial, ["--max-bundle-bytes", "1"]) as endpoint:
        check_run(checks, endpoint, "one element a bundle")
    with serve(sundial, ["--memory_limit", "1"]) as endpoint:
        check_run(checks, endpoint, "spilling everything")
    with serve(sundial) as endpoint:
        check_run(checks, endpoint, "default")
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
