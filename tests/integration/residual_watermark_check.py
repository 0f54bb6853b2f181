"""residual_watermark_check.py SUNDIAL - a residual holds the watermark at its estimate.

Starts `SUNDIAL serve --port 0` on loopback and runs streaming pipelines on it with Beam's
Python SDK (PortableRunner, LOOPBACK: the SDK worker runs in this process, on the synthetic
clock):

    Impulse -> Source (an unbounded splittable DoFn) -> Key -> Stateful (event-time timer)

The source starts empty: its first call outputs nothing and defers (a delayed residual) with
its watermark estimate (a ManualWatermarkEstimator) at E, well ahead of 1970. The next call
outputs one element at E + 1 s and keeps the estimate there; every later call outputs
nothing, moves the estimate to E + 60 s and defers again (delayed or immediate residuals,
one pipeline each). The stateful DoFn sets an event-time timer at E + 10 s for that element.

The runner must hold the source stage's output watermark at each residual's estimate, not at
the minimum timestamp nor at the residual element's own timestamp (the impulse's, in 1970):
the timer must fire while the source is still live. The source keeps deferring until a file
says the timer fired (or 60 calls have passed), so a runner that pins the watermark at 1970
would fire the timer only when the source ends and its watermark jumps to the end of time.
Each run checks: DONE; the timer fired at E + 10 s with the element in its state; the source
was still running when it fired (the number of source calls then is below the bound); and the
watermark the timer saw passed the estimate's first value E.

Then two partitions of one unbounded SDF, run with --sundial_bundle_shape=one_element (each
restriction in a bundle of its own): A outputs at E + 1000 s and estimates there, B starts
empty without an estimate, then outputs at E + 1 s and E + 2 s. A GroupByKey in fixed 10 s
windows must get both of B's values. B comes first, so each round A's bundle completes last:
one stage-wide estimate (the last bundle's, as before) let A's carry the watermark past B's
data, and the GroupByKey dropped both of B's values as late (measured: ['A=0']).

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

failures = []

E = 1000000  # the first estimate, in seconds since the epoch (1970-01-12)
BOUND = 60   # source calls before it gives up waiting for the timer


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def main():
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
        from apache_beam.coders import coders
        from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
        from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.transforms.core import RestrictionProvider
        from apache_beam.transforms.timeutil import TimeDomain
        from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer
        from apache_beam.utils.timestamp import Duration, Timestamp
    except ImportError as e:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh): %s" % e)
        return 77

    class Range(RestrictionProvider):
        def initial_restriction(self, element):
            return OffsetRange(0, 1000)

        def create_tracker(self, restriction):
            return OffsetRestrictionTracker(restriction)

        def restriction_size(self, element, restriction):
            return restriction.size()

    class Source(beam.DoFn):
        """Empty first, then one element, then empty while its estimate moves on; it ends
        once the downstream timer fired (a file says so) or after BOUND calls. Files, not
        attributes: the DoFn is pickled."""

        def __init__(self, calls, fired, delay):
            self.calls = calls
            self.fired = fired
            self.delay = delay

        @beam.DoFn.unbounded_per_element()
        def process(self, element, tracker=beam.DoFn.RestrictionParam(Range()),
                    wm=beam.DoFn.WatermarkEstimatorParam(
                        ManualWatermarkEstimator.default_provider())):
            with open(self.calls, "a") as f:
                f.write(".")
            n = os.path.getsize(self.calls)
            pos = tracker.current_restriction().start
            if os.path.exists(self.fired) or n >= BOUND:
                while tracker.try_claim(pos):
                    pos += 1
                return
            if n == 1:
                wm.set_watermark(Timestamp(E))
            elif n == 2:
                if not tracker.try_claim(pos):
                    return
                yield beam.window.TimestampedValue("one", Timestamp(E + 1))
                wm.set_watermark(Timestamp(E + 1))
            else:
                wm.set_watermark(Timestamp(E + 60))
            tracker.defer_remainder(Duration.of(self.delay) if self.delay else None)

    class Stateful(beam.DoFn):
        SEEN = BagStateSpec("seen", coders.StrUtf8Coder())
        FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

        def __init__(self, calls, fired):
            self.calls = calls
            self.fired = fired

        def process(self, kv, seen=beam.DoFn.StateParam(SEEN),
                    flush=beam.DoFn.TimerParam(FLUSH)):
            seen.add(kv[1])
            flush.set(Timestamp(E + 10))

        @on_timer(FLUSH)
        def on_flush(self, seen=beam.DoFn.StateParam(SEEN), ts=beam.DoFn.TimestampParam):
            calls = os.path.getsize(self.calls) if os.path.exists(self.calls) else 0
            with open(self.fired, "w") as f:
                f.write("%s %d %s" % (",".join(sorted(seen.read())), calls, float(ts)))
            return []

    class Partitions(beam.DoFn):
        """Partition "A": one element at E + 1000 s, estimate there, then waits (deferring
        1 s) until B is done. Partition "B": empty and without an estimate first, then one
        element at E + 1 s, then one at E + 2 s, then done."""

        def __init__(self, calls):
            self.calls = calls

        @beam.DoFn.unbounded_per_element()
        def process(self, element, tracker=beam.DoFn.RestrictionParam(Range()),
                    wm=beam.DoFn.WatermarkEstimatorParam(
                        ManualWatermarkEstimator.default_provider())):
            path = self.calls + "." + element
            with open(path, "a") as f:
                f.write(".")
            n = os.path.getsize(path)
            pos = tracker.current_restriction().start
            b_done = os.path.exists(self.calls + ".B") and os.path.getsize(self.calls + ".B") > 3
            if element == "A":
                if n == 1 and tracker.try_claim(pos):
                    yield beam.window.TimestampedValue(("A", 0), Timestamp(E + 1000))
                    wm.set_watermark(Timestamp(E + 1000))
                elif b_done or n >= BOUND:
                    while tracker.try_claim(pos):
                        pos += 1
                    return
            else:
                if n == 2 and tracker.try_claim(pos):
                    yield beam.window.TimestampedValue(("B", 1), Timestamp(E + 1))
                    wm.set_watermark(Timestamp(E + 1))
                elif n == 3 and tracker.try_claim(pos):
                    yield beam.window.TimestampedValue(("B", 2), Timestamp(E + 2))
                    wm.set_watermark(Timestamp(E + 2))
                elif n >= 4:
                    while tracker.try_claim(pos):
                        pos += 1
                    return
            tracker.defer_remainder(Duration.of(1))

    class ShapeOptions(PipelineOptions):
        """Declared, so the portable runner sends it (it drops options it does not know)."""

        @classmethod
        def _add_argparse_args(cls, parser):
            parser.add_argument("--sundial_bundle_shape", type=str, default=None)

    def record(kv, path):
        with open(path, "a") as f:
            f.write("%s=%s\n" % (kv[0], ",".join(str(v) for v in sorted(kv[1]))))
        return kv

    root = tempfile.mkdtemp(prefix="residual_watermark_check-")  # removed at the end
    serve = subprocess.Popen([sundial, "serve", "--port", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        first = serve.stdout.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        if not check(m is not None, "the server says where it listens (%r)" % first.strip()):
            return 1
        endpoint = m.group(1)
        for name, delay in (("delayed", 1), ("immediate", 0)):
            work = tempfile.mkdtemp(dir=root)
            calls, fired = os.path.join(work, "calls"), os.path.join(work, "fired")
            options = PipelineOptions([
                "--runner=PortableRunner",
                "--job_endpoint=" + endpoint,
                "--environment_type=LOOPBACK",
                "--streaming",
                "--job_name=residual-" + name,
            ])
            p = beam.Pipeline(options=options)
            (p
             | beam.Impulse()
             | "Source" >> beam.ParDo(Source(calls, fired, delay))
             | "Key" >> beam.Map(lambda v: ("k", v))
             | "Stateful" >> beam.ParDo(Stateful(calls, fired)))
            t0 = time.time()
            result = p.run()
            error = ""
            try:
                result.wait_until_finish(duration=120000)
            except RuntimeError as e:  # the SDK raises for every end but DONE
                error = str(e)
            took = time.time() - t0
            state = str(result.state)
            check(state.endswith("DONE"), "%s: the job is DONE (%s %s) in %.1f s"
                  % (name, state, error[:300], took))
            got = open(fired).read().split() if os.path.exists(fired) else []
            if not check(len(got) == 3, "%s: the event-time timer fired (%r)" % (name, got)):
                continue
            check(got[0] == "one", "%s: the element is in the timer's state (%r)" % (name, got[0]))
            check(float(got[2]) == E + 10, "%s: the timer fired at E + 10 s (%s)" % (name, got[2]))
            check(int(got[1]) < BOUND,
                  "%s: it fired while the source was live: after %s of at most %d source calls "
                  "(a watermark held at 1970 fires it only when the source ends)"
                  % (name, got[1], BOUND))
            check(int(got[1]) >= 3,
                  "%s: it fired only once the estimate passed E + 10 s (after call %s >= 3)"
                  % (name, got[1]))
        work = tempfile.mkdtemp(dir=root)
        calls, groups = os.path.join(work, "calls"), os.path.join(work, "groups")
        p = beam.Pipeline(options=ShapeOptions([
            "--runner=PortableRunner",
            "--job_endpoint=" + endpoint,
            "--environment_type=LOOPBACK",
            "--streaming",
            "--sundial_bundle_shape=one_element",
            "--job_name=residual-partitions",
        ]))
        (p
         | beam.Create(["B", "A"])
         | "Partitions" >> beam.ParDo(Partitions(calls))
         | beam.WindowInto(beam.window.FixedWindows(10))
         | beam.GroupByKey()
         | beam.Map(record, groups))
        result = p.run()
        error = ""
        try:
            result.wait_until_finish(duration=120000)
        except RuntimeError as e:
            error = str(e)
        state = str(result.state)
        check(state.endswith("DONE"), "partitions: the job is DONE (%s %s)" % (state, error[:300]))
        got = sorted(open(groups).read().split()) if os.path.exists(groups) else []
        check(got == ["A=0", "B=1,2"],
              "partitions: the GroupByKey got every value, B's none late (%r)" % (got,))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        serve.terminate()
        try:
            serve.wait(timeout=10)
        except subprocess.TimeoutExpired:
            serve.kill()
    if failures:
        print("residual_watermark_check: %d failure(s)" % len(failures))
        return 1
    print("residual_watermark_check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
