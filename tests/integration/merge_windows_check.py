"""merge_windows_check.py SUNDIAL - custom merging WindowFns with Beam's Python SDK.

Starts `SUNDIAL serve --port 0` on loopback and runs pipelines on it (PortableRunner, LOOPBACK:
the SDK worker runs in this process) whose GroupByKey reads a user WindowFn (a WindowFn subclass
with merge(), sent as beam:window_fn:pickled_python:v1 with MergeStatus NEEDS_MERGE). The runner
cannot merge such windows itself: it has the SDK do it (beam:transform:merge_windows:v1 in a
stage of its own) and merges the groups as answered. Each case asserts the exact grouped output
(key, window, values, pane):

  1. Overlap: windows [t, t + 10 s) that merge when they overlap (sessions, written by the user):
     a chain of five elements merges into one window, a far element stays alone.
  2. Parity: windows [t, t + 100 s) of one parity merge (all windows overlap, only those whose
     start has the same parity merge): two merged windows and one alone.
  3. Streaming (TestStream): the overlap fn with the watermark moving between elements; a merged
     window fires once, on time, with every value, and a window that closed before a later
     element stays apart.
  4. The same batch pipeline under three schedule seeds and one-element bundles gives the same
     output.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
from sundial_py import Checks, run_pipeline, serve  # noqa: E402


def main():
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
        from apache_beam import coders
        from apache_beam.testing.test_stream import TestStream
        from apache_beam.testing.util import assert_that, equal_to
        from apache_beam.transforms import window
        from apache_beam.utils.timestamp import MIN_TIMESTAMP
    except ImportError as e:
        print("NOT RUN: apache_beam is not installed (%s)" % e)
        return 77

    class OverlapWindows(window.WindowFn):
        """Sessions written as a user WindowFn: [t, t + gap), merged when they overlap."""

        def __init__(self, gap):
            self.gap = gap

        def assign(self, context):
            return [window.IntervalWindow(context.timestamp, context.timestamp + self.gap)]

        def get_window_coder(self):
            return coders.coders.IntervalWindowCoder()

        def merge(self, merge_context):
            run, end = [], MIN_TIMESTAMP
            for w in sorted(merge_context.windows, key=lambda w: (w.start, w.end)):
                if run and w.start < end:
                    run.append(w)
                    end = max(end, w.end)
                    continue
                if len(run) > 1:
                    merge_context.merge(run, window.IntervalWindow(run[0].start, end))
                run, end = [w], w.end
            if len(run) > 1:
                merge_context.merge(run, window.IntervalWindow(run[0].start, end))

    class ParityWindows(window.WindowFn):
        """[t, t + 100 s); the windows of a key whose start (in seconds) has one parity merge."""

        def assign(self, context):
            return [window.IntervalWindow(context.timestamp, context.timestamp + 100)]

        def get_window_coder(self):
            return coders.coders.IntervalWindowCoder()

        def merge(self, merge_context):
            for parity in (0, 1):
                ws = [w for w in merge_context.windows if int(w.start) % 2 == parity]
                if len(ws) > 1:
                    merge_context.merge(ws, window.IntervalWindow(min(w.start for w in ws),
                                                                  max(w.end for w in ws)))

    class Show(beam.DoFn):
        def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
            k, vs = kv
            yield "%s [%g,%g) %s %s" % (k, float(w.start), float(w.end), sorted(vs),
                                        pane.timing)

    def grouped(p, rows, fn):
        return (p
                | beam.Create(rows)
                | beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
                | beam.WindowInto(fn)
                | beam.GroupByKey()
                | beam.ParDo(Show()))

    overlap_rows = [("a", 1, 1), ("a", 12, 37), ("a", 9, 28), ("a", 6, 19), ("a", 3, 10),
                    ("b", 3, 3), ("b", 30, 300)]
    overlap_want = ["a [1,47) [1, 3, 6, 9, 12] 1", "b [3,13) [3] 1", "b [300,310) [30] 1"]
    parity_rows = [("a", 1, 1), ("a", 2, 2), ("a", 3, 3), ("a", 5, 5), ("a", 8, 8),
                   ("b", 4, 4)]
    parity_want = ["a [1,105) [1, 3, 5] 1", "a [2,108) [2, 8] 1", "b [4,104) [4] 1"]

    checks = Checks()
    with serve(sundial) as endpoint:
        def case(name, rows, fn, want, extra=()):
            def build(p):
                assert_that(grouped(p, rows, fn), equal_to(want))
            state, error = run_pipeline(endpoint, name, build, extra)
            checks.check(state == "DONE", "%s%s: DONE with exactly %s (%s %s)"
                         % (name, " " + " ".join(extra) if extra else "", want, state,
                            error[-600:]))

        case("overlap", overlap_rows, OverlapWindows(10), overlap_want)
        case("parity", parity_rows, ParityWindows(), parity_want)
        for extra in (["--sundial_schedule_seed=7"], ["--sundial_schedule_seed=99"],
                      ["--sundial_bundle_shape=one_element", "--sundial_schedule_seed=3"]):
            case("overlap", overlap_rows, OverlapWindows(10), overlap_want, extra)

        def streaming(p):
            ts = (TestStream()
                  .add_elements([window.TimestampedValue(("a", 1), 1)])
                  .advance_watermark_to(2)
                  .add_elements([window.TimestampedValue(("a", 2), 8)])
                  .advance_watermark_to(12)
                  .add_elements([window.TimestampedValue(("a", 3), 16)])
                  .add_elements([window.TimestampedValue(("a", 4), 30)])
                  .advance_watermark_to(23)
                  .add_elements([window.TimestampedValue(("a", 5), 35)])
                  .advance_watermark_to_infinity())
            out = (p | ts | beam.WindowInto(OverlapWindows(10)) | beam.GroupByKey()
                   | beam.ParDo(Show()))
            # [1,11) + [8,18) + [16,26) chain into [1,26) (each merge while the window was
            # still open); [30,40) + [35,45) merge after the watermark passed 23.
            assert_that(out, equal_to(["a [1,26) [1, 2, 3] 1", "a [30,45) [4, 5] 1"]))

        state, error = run_pipeline(endpoint, "overlap-streaming", streaming, streaming=True)
        checks.check(state == "DONE", "streaming overlap: each merged window fires once, on "
                     "time, with every value (%s %s)" % (state, error[-600:]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
