"""custom_window_check.py SUNDIAL - custom window types (windows only the SDK can read) with
Beam's Python SDK.

Starts `SUNDIAL serve --port 0` on loopback and runs pipelines on it (PortableRunner, LOOPBACK:
the SDK worker runs in this process) whose windows are user classes (BoundedWindow subclasses,
not IntervalWindow), written by the SDK with coders of their own. The runner cannot
read such a window; it has the SDK write each window after its max timestamp
(beam:coder:custom_window:v1 over the window's coder, length-prefixed), and it groups, fires,
keeps state and timers by the window's bytes and max timestamp. Each case asserts the exact
output:

  1. Labels: a window per (label, ten seconds) with the same end for "w" and "x" labels: a
     GroupByKey keeps them apart and gives each window back as the SDK made it, with the
     end-of-window timestamp.
  2. Merging: user sessions whose windows are a class of their own, merged by the SDK.
  3. Streaming (TestStream): label windows fire as the watermark passes each window's end, on
     time, and a late element after that is dropped.
  4. State and timers: a stateful DoFn keeps a bag per (key, custom window) and an event-time
     timer at each window's max timestamp reads it.
  5. The labels case under three schedule seeds and one-element bundles gives the same output.

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
        from apache_beam.transforms import userstate, window
        from apache_beam.utils.timestamp import Timestamp
    except ImportError as e:
        print("NOT RUN: apache_beam is not installed (%s)" % e)
        return 77

    class LabelWindow(window.BoundedWindow):
        """A window named by a label and ending at end (exclusive)."""

        def __init__(self, label, end):
            super().__init__(end)
            self.label = label

        def __eq__(self, other):
            return (type(self) is type(other) and self.label == other.label
                    and self.end == other.end)

        def __hash__(self):
            return hash((self.label, self.end))

        def __repr__(self):
            return "LabelWindow(%s, %s)" % (self.label, self.end)

    class LabelWindowCoder(coders.Coder):
        """The SDK's own bytes for a LabelWindow: "label|end micros"."""

        def encode(self, w):
            return ("%s|%d" % (w.label, w.end.micros)).encode()

        def decode(self, b):
            label, end = b.decode().rsplit("|", 1)
            return LabelWindow(label, Timestamp(micros=int(end)))

        def is_deterministic(self):
            return True

    class LabelWindows(window.NonMergingWindowFn):
        """Key "b" gets label x<k>, every other key w<k>, for the k-th ten seconds."""

        def assign(self, context):
            key = context.element[0]
            k = int(context.timestamp) // 10
            return [LabelWindow(("x" if key == "b" else "w") + str(k), (k + 1) * 10)]

        def get_window_coder(self):
            return LabelWindowCoder()

    class SpanWindow(window.BoundedWindow):
        """[start, end), a class of its own (not IntervalWindow)."""

        def __init__(self, start, end):
            super().__init__(end)
            self.lo = Timestamp.of(start)

        def __eq__(self, other):
            return (type(self) is type(other) and self.lo == other.lo
                    and self.end == other.end)

        def __hash__(self):
            return hash((self.lo, self.end))

    class SpanWindowCoder(coders.Coder):
        """The SDK's own bytes for a SpanWindow: "start micros,end micros"."""

        def encode(self, w):
            return ("%d,%d" % (w.lo.micros, w.end.micros)).encode()

        def decode(self, b):
            start, end = b.decode().split(",")
            return SpanWindow(Timestamp(micros=int(start)), Timestamp(micros=int(end)))

        def is_deterministic(self):
            return True

    class SpanSessions(window.WindowFn):
        """Sessions of SpanWindows: [t, t + gap), merged by the SDK when they overlap."""

        def __init__(self, gap):
            self.gap = gap

        def assign(self, context):
            return [SpanWindow(context.timestamp, context.timestamp + self.gap)]

        def get_window_coder(self):
            return SpanWindowCoder()

        def merge(self, merge_context):
            run, end = [], None
            for w in sorted(merge_context.windows, key=lambda w: (w.lo, w.end)):
                if run and w.lo < end:
                    run.append(w)
                    end = max(end, w.end)
                    continue
                if len(run) > 1:
                    merge_context.merge(run, SpanWindow(run[0].lo, end))
                run, end = [w], w.end
            if len(run) > 1:
                merge_context.merge(run, SpanWindow(run[0].lo, end))

    def describe(w):
        if isinstance(w, LabelWindow):
            return "%s@%d" % (w.label, w.max_timestamp().micros // 1000)
        if isinstance(w, SpanWindow):
            return "span[%d,%d)" % (w.lo.micros // 10**6, w.end.micros // 10**6)
        return "unexpected %r" % (w,)

    class Show(beam.DoFn):
        def process(self, kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam,
                    pane=beam.DoFn.PaneInfoParam):
            k, vs = kv
            yield "%s %s ts=%d %s %s" % (k, describe(w), ts.micros // 1000, sorted(vs), pane.timing)

    class SumAtEnd(beam.DoFn):
        """Per key and window: a bag of values, summed by a timer at the window's end."""
        BAG = userstate.BagStateSpec("bag", coders.VarIntCoder())
        END = userstate.TimerSpec("end", userstate.TimeDomain.WATERMARK)

        def process(self, kv, w=beam.DoFn.WindowParam, bag=beam.DoFn.StateParam(BAG),
                    end=beam.DoFn.TimerParam(END)):
            bag.add(kv[1])
            end.set(w.max_timestamp())

        @userstate.on_timer(END)
        def at_end(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam,
                   ts=beam.DoFn.TimestampParam, bag=beam.DoFn.StateParam(BAG)):
            yield "%s %s at=%d sum=%d" % (key, describe(w), ts.micros // 1000, sum(bag.read()))

    def windowed(p, rows, fn):
        return (p
                | beam.Create(rows)
                | beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
                | beam.WindowInto(fn))

    label_rows = [("a", 1, 1), ("a", 3, 3), ("a", 12, 12), ("b", 2, 2), ("b", 5, 5),
                  ("a", 19, 19), ("c", 7, 7)]
    label_want = ["a w0@9999 ts=9999 [1, 3] 1", "b x0@9999 ts=9999 [2, 5] 1",
                  "c w0@9999 ts=9999 [7] 1", "a w1@19999 ts=19999 [12, 19] 1"]

    checks = Checks()
    with serve(sundial) as endpoint:
        def case(name, build, what, extra=(), streaming=False):
            state, error = run_pipeline(endpoint, name, build, extra, streaming)
            checks.check(state == "DONE", "%s%s: DONE with %s (%s %s)"
                         % (name, " " + " ".join(extra) if extra else "", what, state,
                            error[-600:]))

        def labels(p):
            out = windowed(p, label_rows, LabelWindows()) | beam.GroupByKey() | beam.ParDo(Show())
            assert_that(out, equal_to(label_want))

        case("labels", labels, "exactly %s" % label_want)
        for extra in (["--sundial_schedule_seed=7"], ["--sundial_schedule_seed=99"],
                      ["--sundial_bundle_shape=one_element", "--sundial_schedule_seed=3"]):
            case("labels", labels, "the same output", extra)

        sessions_want = ["a span[1,47) ts=46999 [1, 3, 6, 9, 12] 1",
                         "b span[3,13) ts=12999 [3] 1", "b span[300,310) ts=309999 [30] 1"]

        def sessions(p):
            rows = [("a", 1, 1), ("a", 12, 37), ("a", 9, 28), ("a", 6, 19), ("a", 3, 10),
                    ("b", 3, 3), ("b", 30, 300)]
            out = windowed(p, rows, SpanSessions(10)) | beam.GroupByKey() | beam.ParDo(Show())
            assert_that(out, equal_to(sessions_want))

        case("span-sessions", sessions, "exactly %s" % sessions_want)

        streaming_want = ["a w0@9999 ts=9999 [1, 2] 1",
                          "a w1@19999 ts=19999 [3] 1"]

        def streaming(p):
            ts = (TestStream()
                  .add_elements([window.TimestampedValue(("a", 1), 1)])
                  .add_elements([window.TimestampedValue(("a", 2), 8)])
                  .advance_watermark_to(15)
                  .add_elements([window.TimestampedValue(("a", 9), 5)])  # late: w0 closed
                  .add_elements([window.TimestampedValue(("a", 3), 16)])
                  .advance_watermark_to_infinity())
            out = (p | ts | beam.WindowInto(LabelWindows()) | beam.GroupByKey()
                   | beam.ParDo(Show()))
            assert_that(out, equal_to(streaming_want))

        case("labels-streaming", streaming, "exactly %s, the late element dropped"
             % streaming_want, streaming=True)

        timers_want = ["a w0@9999 at=9999 sum=4", "b x0@9999 at=9999 sum=7",
                       "c w0@9999 at=9999 sum=7", "a w1@19999 at=19999 sum=31"]

        def timers(p):
            out = windowed(p, label_rows, LabelWindows()) | beam.ParDo(SumAtEnd())
            assert_that(out, equal_to(timers_want))

        case("state-and-timers", timers, "exactly %s" % timers_want)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
