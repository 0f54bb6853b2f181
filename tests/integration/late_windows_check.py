"""late_windows_check.py SUNDIAL - expired windows and clean-up panes with Beam's Python SDK.

Starts `SUNDIAL serve --port 0` on loopback and runs streaming TestStream pipelines on it
(PortableRunner, LOOPBACK: the SDK worker runs in this process); each DoFn appends what it saw
to $LWC_CHECK_LOG (Beam pickles the DoFns, so they share only what they look up when called).

  stateful:  fixed 10 s windows, no allowed lateness; ("k", 1) at 1 s, the watermark to 15 s,
             then ("k", 2) at 2 s into a stateful DoFn (a bag per key and window). Java's
             stateful ParDo runner drops the second element (its window's clean-up time,
             9.999 s, is behind the input watermark) and counts it as late; the DoFn must see
             only ("k", 1), with an empty bag.
  jump:      fixed 60 s windows, allowed lateness 300 s; ("k", 1) at 1 s, then the watermark
             straight to the end of time, into a GroupByKey. Python's windowing strategy says
             EMIT_ALWAYS: the on-time pane [1] (not the last), then the empty closing pane,
             LATE and last — the panes Java's ReduceFnRunner gives (its end-of-window timer,
             then the clean-up timer it sets).
  step:      the same with the watermark to 61 s first: the same two panes.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import os
import shutil
import sys
import tempfile

from sundial_py import Checks, run_pipeline, serve


def record(tag, line):
    with open(os.environ["LWC_CHECK_LOG"], "a") as f:
        f.write("%s %s\n" % (tag, line))


def seen(tag):
    try:
        with open(os.environ["LWC_CHECK_LOG"]) as f:
            return sorted(l[len(tag) + 1:].strip() for l in f if l.startswith(tag + " "))
    except FileNotFoundError:
        return []


def build_stateful(beam, tag):
    from apache_beam.coders import VarIntCoder
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms import window
    from apache_beam.transforms.userstate import BagStateSpec

    class Stateful(beam.DoFn):
        BAG = BagStateSpec("bag", VarIntCoder())

        def process(self, kv, bag=beam.DoFn.StateParam(BAG), w=beam.DoFn.WindowParam):
            held = len(list(bag.read()))
            bag.add(kv[1])
            record(tag, "v=%d window_end=%d held=%d" % (kv[1], int(w.end), held))

    stream = (TestStream()
              .add_elements([window.TimestampedValue(("k", 1), 1)])
              .advance_watermark_to(15)
              .add_elements([window.TimestampedValue(("k", 2), 2)])
              .advance_watermark_to_infinity())

    def build(p):
        (p | "Stream" >> stream
         | "Window" >> beam.WindowInto(window.FixedWindows(10))
         | "State" >> beam.ParDo(Stateful()))
    return build


def build_panes(beam, tag, step):
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms import window

    class Panes(beam.DoFn):
        def process(self, kv, pane=beam.DoFn.PaneInfoParam):
            timing = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}[pane.timing]
            record(tag, "%d %s%s values=%s" % (pane.index, timing, " last" if pane.is_last else "",
                                               sorted(kv[1])))

    stream = TestStream().add_elements([window.TimestampedValue(("k", 1), 1)])
    if step:
        stream = stream.advance_watermark_to(61)
    stream = stream.advance_watermark_to_infinity()

    def build(p):
        (p | "Stream" >> stream
         | "Window" >> beam.WindowInto(window.FixedWindows(60), allowed_lateness=300)
         | "Group" >> beam.GroupByKey()
         | "Panes" >> beam.ParDo(Panes()))
    return build


def main():
    if len(sys.argv) != 2:
        print("usage: late_windows_check.py SUNDIAL", file=sys.stderr)
        return 2
    try:
        import apache_beam as beam
    except ImportError as e:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh): %s" % e)
        return 77
    checks = Checks()
    log_dir = tempfile.mkdtemp(prefix="late_windows_check-")
    os.environ["LWC_CHECK_LOG"] = os.path.join(log_dir, "seen.txt")
    panes = ["0 ON_TIME values=[1]", "1 LATE last values=[]"]
    cases = [
        ("stateful", build_stateful(beam, "stateful"), ["v=1 window_end=10 held=0"]),
        ("jump", build_panes(beam, "jump", False), panes),
        ("step", build_panes(beam, "step", True), panes),
    ]
    try:
        with serve(sys.argv[1]) as endpoint:
            for tag, build, want in cases:
                state, error = run_pipeline(endpoint, tag, build, streaming=True)
                if not checks.check(state == "DONE", "%s: the pipeline ran (%s %s)"
                                    % (tag, state, error.splitlines()[0] if error else "")):
                    continue
                got = seen(tag)
                checks.check(got == sorted(want), "%s: %s (want %s)" % (tag, got, sorted(want)))
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
