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
import re
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def record(tag, line):
    with open(os.environ["LWC_CHECK_LOG"], "a") as f:
        f.write("%s %s\n" % (tag, line))


def seen(tag):
    try:
        with open(os.environ["LWC_CHECK_LOG"]) as f:
            return sorted(l[len(tag) + 1:].strip() for l in f if l.startswith(tag + " "))
    except FileNotFoundError:
        return []


def options(endpoint, tag):
    from apache_beam.options.pipeline_options import PipelineOptions
    return PipelineOptions([
        "--runner=PortableRunner",
        "--job_endpoint=" + endpoint,
        "--environment_type=LOOPBACK",
        "--streaming",
        "--job_name=" + tag,
    ])


def run_stateful(beam, endpoint, tag):
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
    with beam.Pipeline(options=options(endpoint, tag)) as p:
        (p | "Stream" >> stream
         | "Window" >> beam.WindowInto(window.FixedWindows(10))
         | "State" >> beam.ParDo(Stateful()))


def run_panes(beam, endpoint, tag, step):
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
    with beam.Pipeline(options=options(endpoint, tag)) as p:
        (p | "Stream" >> stream
         | "Window" >> beam.WindowInto(window.FixedWindows(60), allowed_lateness=300)
         | "Group" >> beam.GroupByKey()
         | "Panes" >> beam.ParDo(Panes()))


def main():
    if len(sys.argv) != 2:
        print("usage: late_windows_check.py SUNDIAL", file=sys.stderr)
        return 2
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
    except ImportError as e:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh): %s" % e)
        return 77
    log_dir = tempfile.mkdtemp(prefix="late_windows_check-")
    os.environ["LWC_CHECK_LOG"] = os.path.join(log_dir, "seen.txt")
    serve = subprocess.Popen([sundial, "serve", "--port", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        first = serve.stdout.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        if not check(m is not None, "the server says where it listens (%r)" % first.strip()):
            return 1
        endpoint = m.group(1)
        panes = ["0 ON_TIME values=[1]", "1 LATE last values=[]"]
        cases = [
            ("stateful", lambda tag: run_stateful(beam, endpoint, tag),
             ["v=1 window_end=10 held=0"]),
            ("jump", lambda tag: run_panes(beam, endpoint, tag, False), panes),
            ("step", lambda tag: run_panes(beam, endpoint, tag, True), panes),
        ]
        for tag, run, want in cases:
            try:
                run(tag)
            except Exception as e:  # the job failed: report it as this case's failure
                check(False, "%s: the pipeline ran (%s)" % (tag, str(e).splitlines()[0]))
                continue
            got = seen(tag)
            check(got == sorted(want), "%s: %s (want %s)" % (tag, got, sorted(want)))
    finally:
        import shutil
        shutil.rmtree(log_dir, ignore_errors=True)
        serve.terminate()
        try:
            serve.wait(timeout=10)
        except subprocess.TimeoutExpired:
            serve.kill()
    if failures:
        print("late_windows_check: %d failure(s)" % len(failures))
        return 1
    print("late_windows_check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
