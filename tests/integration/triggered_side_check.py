"""triggered_side_check.py SUNDIAL - triggered side inputs end to end with Beam's Python SDK.

Starts `SUNDIAL serve --port 0` on loopback and runs streaming pipelines on it (PortableRunner,
LOOPBACK: the SDK worker runs in this process). One TestStream carries side values ("s", v)
and main values ("m", v), each in an event of its own. The side values go through
WindowInto(GlobalWindows, Repeatedly(trigger)) and CombineGlobally(sum) into an AsSingleton
side input; each main value is mapped with that side input and records what it read.

A triggered side input is read before it finishes: a main element waits only for the side
window's first firing, and reads the latest firing that had arrived when it was processed (one
value: AsSingleton would fail on more than one). What each main element saw is therefore fixed
by the TestStream's order on the synthetic clock:

  count, discarding:    m99 (before any firing) and m100 see 1; after 2 and 3 fire, m101
                        sees 3 (the last firing's sum only); after 10, m102 sees 10.
  count, accumulating:  1, 1, 6, 16 (each firing sums everything so far).
  processing time:      Repeatedly(AfterProcessingTime(5 s)): 1 fires when the clock moves,
                        m100 sees 1; 2 and 3 arrive but have not fired, m101 still sees 1;
                        the clock moves, m102 sees 5.

  fixed windows:        the count-discarding case with side and main in fixed windows of
                        100 s (all at timestamp 1): the same readings, per window.

Beam's Python SDK computes the arguments of a DoFn whose side inputs are all in the global
window once per DoFn instance and reuses them across bundles (apache/beam#28776), so such a
DoFn would never see a later firing of a global-window side input. A DoFn that takes its window
(DoFn.WindowParam) has its side inputs read per element, so the reader here does.

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


def emit(tag, main, side):
    """Record what a main element read, in $TSI_CHECK_LOG (Beam pickles the DoFns, so they
    share only what they look up when called)."""
    with open(os.environ["TSI_CHECK_LOG"], "a") as f:
        f.write("%s %d %d\n" % (tag, main, side))


def seen(tag):
    try:
        with open(os.environ["TSI_CHECK_LOG"]) as f:
            rows = [l.split() for l in f if l.startswith(tag + " ")]
    except FileNotFoundError:
        return {}
    return {int(m): int(s) for _, m, s in rows}


def reader_class(beam):
    class Reader(beam.DoFn):
        """Records the side input each main element read (its window as a parameter: see the
        module comment)."""

        def __init__(self, tag):
            self.tag = tag

        def process(self, kv, side, w=beam.DoFn.WindowParam):
            del w
            emit(self.tag, kv[1], side)

    return Reader


def run_case(beam, endpoint, tag, trigger, accumulating, events, fixed):
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms import trigger as tr
    from apache_beam.transforms import window

    options = PipelineOptions([
        "--runner=PortableRunner",
        "--job_endpoint=" + endpoint,
        "--environment_type=LOOPBACK",
        "--streaming",
        "--job_name=" + tag,
    ])
    stream = TestStream()
    for kind, arg in events:
        if kind == "e":
            stream = stream.add_elements([window.TimestampedValue(arg, 1)])
        else:
            stream = stream.advance_processing_time(arg)
    stream = stream.advance_watermark_to_infinity()
    mode = (tr.AccumulationMode.ACCUMULATING if accumulating else tr.AccumulationMode.DISCARDING)
    wfn = window.FixedWindows(100) if fixed else window.GlobalWindows()
    Reader = reader_class(beam)
    with beam.Pipeline(options=options) as p:
        both = p | "Stream" >> stream
        side = (both
                | "Side" >> beam.Filter(lambda kv: kv[0] == "s")
                | "SideValue" >> beam.Map(lambda kv: kv[1])
                | "Trigger" >> beam.WindowInto(wfn, trigger=trigger, accumulation_mode=mode)
                | "Sum" >> beam.CombineGlobally(sum).without_defaults())
        (both
         | "Main" >> beam.Filter(lambda kv: kv[0] == "m")
         | "MainWindow" >> beam.WindowInto(wfn)
         | "Read" >> beam.ParDo(Reader(tag), beam.pvalue.AsSingleton(side)))


def main():
    if len(sys.argv) != 2:
        print("usage: triggered_side_check.py SUNDIAL", file=sys.stderr)
        return 2
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
        from apache_beam.transforms import trigger as tr
    except ImportError as e:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh): %s" % e)
        return 77
    log_dir = tempfile.mkdtemp(prefix="triggered_side_check-")
    os.environ["TSI_CHECK_LOG"] = os.path.join(log_dir, "seen.txt")
    serve = subprocess.Popen([sundial, "serve", "--port", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        first = serve.stdout.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        if not check(m is not None, "the server says where it listens (%r)" % first.strip()):
            return 1
        endpoint = m.group(1)
        count = [("e", ("m", 99)), ("e", ("s", 1)), ("e", ("m", 100)), ("e", ("s", 2)),
                 ("e", ("s", 3)), ("e", ("m", 101)), ("e", ("s", 10)), ("e", ("m", 102))]
        cases = [
            ("count-discarding", tr.Repeatedly(tr.AfterCount(1)), False, count, False,
             {99: 1, 100: 1, 101: 3, 102: 10}),
            ("count-accumulating", tr.Repeatedly(tr.AfterCount(1)), True, count, False,
             {99: 1, 100: 1, 101: 6, 102: 16}),
            ("processing-time", tr.Repeatedly(tr.AfterProcessingTime(5)), False,
             [("e", ("s", 1)), ("c", 10), ("e", ("m", 100)), ("e", ("s", 2)), ("e", ("s", 3)),
              ("e", ("m", 101)), ("c", 10), ("e", ("m", 102))], False,
             {100: 1, 101: 1, 102: 5}),
            ("fixed-windows", tr.Repeatedly(tr.AfterCount(1)), False, count, True,
             {99: 1, 100: 1, 101: 3, 102: 10}),
        ]
        for tag, trigger, accumulating, events, fixed, want in cases:
            try:
                run_case(beam, endpoint, tag, trigger, accumulating, events, fixed)
            except Exception as e:  # the job failed: report it as this case's failure
                check(False, "%s: the pipeline ran (%s)" % (tag, str(e).splitlines()[0]))
                continue
            got = seen(tag)
            check(got == want, "%s: each main element read the latest firing: %s (want %s)" %
                  (tag, sorted(got.items()), sorted(want.items())))
    finally:
        import shutil
        shutil.rmtree(log_dir, ignore_errors=True)
        serve.terminate()
        try:
            serve.wait(timeout=10)
        except subprocess.TimeoutExpired:
            serve.kill()
    if failures:
        print("triggered_side_check: %d failure(s)" % len(failures))
        return 1
    print("triggered_side_check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
