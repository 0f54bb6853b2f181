"""pause_event_check.py SUNDIAL - `pause?before=event` end to end, through Beam's Python SDK.

A scripted TestStream (no live endpoint) plays four events: #0 the element "a" at 1 s, #1 the
watermark to 10 s, #2 the element "b" at 11 s, #3 the watermark to the end. The values are
keyed, windowed into fixed windows of 10 s and grouped; the groups are the output. A step
("Hold") keeps the bundle of "a" busy until the check lets it go, so the job is known to be
running event #0 when the check asks it to pause before the next event:

  1. `sundialctl pause JOB --before-event` (POST /api/jobs/ID/pause?before=event) while "a" is
     in flight: the gate is still open (nothing to rest at yet), the pause is armed;
  2. "a" let go, the job rests before event #1: the reason says so, the TestStream's output
     holds "a" only and its watermark has not reached 10 s, nothing is output;
  3. one event stepped: the watermark is 10 s, the window [0 s, 10 s) is output, "b" has not
     been delivered: the job rests again before event #2;
  4. resumed: both windows, and the output equals the unpaused run's (same options);
  5. the paused run's trace has the gate's records in order — a pause before event #1, a step
     of one event, a pause (step done) before event #2, a resume — each naming the TestStream
     event that follows it; `sundialctl trace --diff` of the paused and the unpaused runs
     says identical (the gate's records left out), and different with --control.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from sundial_py import Checks, serve_web

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def record(line):
    with open(os.environ["PEC_OUT"], "a") as f:
        f.write(line + "\n")


def seen():
    try:
        with open(os.environ["PEC_OUT"]) as f:
            return sorted(l.strip() for l in f)
    except FileNotFoundError:
        return []


def hold(v):
    """Keeps the bundle of "a" in flight until the check creates the go file (when asked)."""
    started, go = os.environ.get("PEC_STARTED"), os.environ.get("PEC_GO")
    if v == "a" and started and go:
        open(started, "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)
    return v


def build(p):
    import apache_beam as beam
    from apache_beam.coders import StrUtf8Coder
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import FixedWindows, TimestampedValue

    class Out(beam.DoFn):
        def process(self, kv, w=beam.DoFn.WindowParam):
            record("%s %s [%d, %d)" % (kv[0], sorted(kv[1]), int(w.start), int(w.end)))

    events = (TestStream(coder=StrUtf8Coder())
              .add_elements([TimestampedValue("a", 1)])
              .advance_watermark_to(10)
              .add_elements([TimestampedValue("b", 11)])
              .advance_watermark_to_infinity())
    (p | "Events" >> events
     | "Hold" >> beam.Map(hold)
     | "Key" >> beam.Map(lambda v: ("k", v))
     | "Window" >> beam.WindowInto(FixedWindows(10))
     | "Group" >> beam.GroupByKey()
     | "Out" >> beam.ParDo(Out()))


def pipeline(endpoint, name):
    """PortableRunner, LOOPBACK, streaming; both runs keep the tap (--sundial_tap) so their
    options are the same."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from sundial_beam.options import SundialOptions
    opts = PipelineOptions(["--runner=PortableRunner", "--job_endpoint=" + endpoint,
                            "--environment_type=LOOPBACK", "--job_name=" + name,
                            "--sundial_tap=true"])
    opts.view_as(StandardOptions).streaming = True
    opts.view_as(SundialOptions)
    p = beam.Pipeline(options=opts)
    build(p)
    return p


def wait_for(path, seconds=60):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def events_view(st):
    """The TestStream stage's output watermark (ms) and its PCollection's name."""
    stage = next((s for s in st["stages"] if "Events" in s["name"]), None)
    pc = next((p for p in st["pcollections"] if p["name"].startswith("Events")), None)
    return (stage["output_watermark_ms"] if stage else None), (pc["name"] if pc else None)


def run_paused(checks, endpoint, web, ctl, tmp):
    from sundial_beam.control import JobController
    os.environ["PEC_STARTED"] = os.path.join(tmp, "started")
    os.environ["PEC_GO"] = os.path.join(tmp, "go")
    try:
        result = pipeline(endpoint, "paused-before-event").run()
        job = JobController(web, result._job_id)
        checks.check(wait_for(os.environ["PEC_STARTED"]),
                     "the bundle of \"a\" (event #0) is in flight")
        r = subprocess.run([ctl, "--web", web, "pause", job.job_id, "--before-event"],
                           capture_output=True, text=True, timeout=60)
        st = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
        checks.check(r.returncode == 0 and st.get("pause_before_event") is True and
                     not st.get("paused"),
                     "sundialctl pause --before-event while \"a\" is in flight: armed, the gate "
                     "still open (exit %d, pause_before_event %s, paused %s) %s"
                     % (r.returncode, st.get("pause_before_event"), st.get("paused"),
                        r.stderr[-300:]))
        open(os.environ["PEC_GO"], "w").close()
        st = job.wait_at_rest()
        wm, events_pc = events_view(st)
        got = job.elements(events_pc) if events_pc else None
        checks.check(st.get("reason") == "before event" and st.get("at_rest"),
                     "the job rests before the next event (%s)" % st.get("reason"))
        checks.check(got == ["a"] and wm is not None and wm < 10000 and seen() == [],
                     "event #1 not applied: the TestStream delivered %s, its watermark %s ms, "
                     "output %s" % (got, wm, seen()))
        st = job.step(events=1)
        wm, _ = events_view(st)
        got = job.elements(events_pc) if events_pc else None
        checks.check(st.get("at_rest") and st.get("reason") == "step done" and wm == 10000,
                     "one event stepped: the watermark is 10 s, at rest again (%s, %s ms)"
                     % (st.get("reason"), wm))
        checks.check(seen() == ["k ['a'] [0, 10)"] and got == ["a"],
                     "the window [0 s, 10 s) is out, \"b\" (event #2) not delivered: %s, %s"
                     % (seen(), got))
        job.resume()
        result.wait_until_finish(duration=120000)
        checks.check(str(result.state) == "DONE", "resumed: DONE (%s)" % result.state)
        return result, seen()
    finally:
        os.environ.pop("PEC_STARTED", None)
        os.environ.pop("PEC_GO", None)


def check_traces(checks, endpoint, ctl, tmp, paused, unpaused):
    from sundial_beam.trace import fetch_trace, fetch_trace_lines
    recs = fetch_trace(paused, endpoint=endpoint)
    gate = [r for r in recs if r["kind"] in ("pause", "step")]
    got = ["%s:%s" % (r["kind"], r.get("cause")) for r in gate]
    checks.check(got == ["pause:before_event", "step:events", "pause:step_done", "step:resume"]
                 and gate[1].get("count") == 1,
                 "the paused run's trace: the gate's records in order (%s)" % got)
    # Each pause names the TestStream event it held back: the next one the trace plays.
    for r in (x for x in gate if x["kind"] == "pause"):
        nxt = next((x for x in recs if x["seq"] > r["seq"] and x["kind"] == "teststream"), None)
        checks.check(r.get("count") == 1 and nxt is not None and r.get("index") == nxt["index"],
                     "pause %s: before TestStream event #%s, the next one played (#%s)"
                     % (r.get("cause"), r.get("index"), nxt and nxt["index"]))
    checks.check([r["index"] for r in gate if r["kind"] == "pause"] == [1, 2],
                 "the pauses: before event #1, then before event #2")
    files = []
    for name, result in (("paused", paused), ("unpaused", unpaused)):
        path = os.path.join(tmp, name + ".jsonl")
        with open(path, "w") as f:
            f.write("\n".join(fetch_trace_lines(result, endpoint=endpoint)) + "\n")
        files.append(path)
    r = subprocess.run([ctl, "--endpoint", endpoint, "trace", "--diff"] + files, capture_output=True, text=True,
                       timeout=60)
    checks.check(r.returncode == 0 and "identical" in r.stdout and "4 and 0" in r.stdout,
                 "sundialctl trace --diff paused unpaused: identical but for the gate's records "
                 "(%d) %s" % (r.returncode, (r.stdout + r.stderr)[-400:]))
    r = subprocess.run([ctl, "--endpoint", endpoint, "trace", "--diff"] + files + ["--control"], capture_output=True,
                       text=True, timeout=60)
    checks.check(r.returncode == 1 and '"kind":"pause"' in r.stdout,
                 "with --control the gate's records differ (%d)" % r.returncode)


def main():
    if len(sys.argv) != 2:
        print("usage: pause_event_check.py SUNDIAL", file=sys.stderr)
        return 2
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        print("NOT RUN: apache_beam is not installed")
        return 77
    os.environ.setdefault("SUNDIAL_BINARY", sys.argv[1])  # sundial_beam's option table
    ctl = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "sundialctl")
    checks = Checks()
    tmp = tempfile.mkdtemp(prefix="pec_check_")
    try:
        with serve_web(sys.argv[1]) as (endpoint, web):
            os.environ["PEC_OUT"] = os.path.join(tmp, "paused.out")
            paused, paused_out = run_paused(checks, endpoint, web, ctl, tmp)
            os.environ["PEC_OUT"] = os.path.join(tmp, "unpaused.out")
            unpaused = pipeline(endpoint, "unpaused").run()
            unpaused.wait_until_finish(duration=120000)
            checks.check(str(unpaused.state) == "DONE" and seen() == paused_out ==
                         ["k ['a'] [0, 10)", "k ['b'] [10, 20)"],
                         "the paused-and-stepped run's output equals the unpaused run's "
                         "(%s vs %s)" % (paused_out, seen()))
            check_traces(checks, endpoint, ctl, tmp, paused, unpaused)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
