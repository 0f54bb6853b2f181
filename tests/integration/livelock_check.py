"""livelock_check.py SUNDIAL - live-locks fail, not spin, with Beam's Python SDK.

Starts `SUNDIAL serve --port 0` on loopback and runs batch pipelines on it (PortableRunner,
LOOPBACK: the SDK worker runs in this process):

  1. A splittable DoFn that defers its remainder (tracker.defer_remainder(), Python's
     ProcessContinuation.resume) without claiming anything:
     every bundle hands its restriction back unchanged and outputs nothing, so the job would
     spin forever. It must fail within seconds with "the job is live-locked", the default
     bound (1000) and the per-stage dump.
  2. The same with the pipeline option --sundial_livelock_rounds=100: the bound is 100.
  3. The same deferring 2 s on the synthetic clock: an SDK that reads the wall clock and hands
     its input back unchanged runs again at once (the clock does not jump ahead of it), so it
     spins just as fast; once the 2 s it asked for have really passed, the next 1000 bundles
     fail it the same way.
  4. Not a live-lock: an SDF that claims one position per call and resumes, 1500 times, with
     no output at all (more bundles than the bound): its restriction moves, the job is DONE.
  5. --sundial_livelock_rounds=many is refused with a clear message.
  6. Not a live-lock: PeriodicImpulse with a 10 s interval on the synthetic clock. It compares
     the wall clock with its next tick and defers, unchanged, until then; it is waiting for
     real time (the time it asked to be woken at has not come): DONE, with every tick. And it
     does not spin meanwhile: the worker (this process) spends well under 1.5 s of CPU.

Then on a second server started with `--livelock-rounds 50`: the spinning SDF fails with the
bound 50, and with the job's --sundial_livelock_rounds=0 (never) an SDF that spins 1200 times
before it claims its restriction ends DONE. `--livelock-rounds x` is refused at start.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def run(beam, endpoint, name, build, extra=()):
    """Run build(p) on the server; returns (final state, error text, seconds)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    class SundialOptions(PipelineOptions):
        """Declared, so the portable runner sends it (it drops options it does not know)."""

        @classmethod
        def _add_argparse_args(cls, parser):
            # A string: the runner, not argparse, must judge a bad value.
            parser.add_argument("--sundial_livelock_rounds", type=str, default=None)

    options = SundialOptions([
        "--runner=PortableRunner",
        "--job_endpoint=" + endpoint,
        "--environment_type=LOOPBACK",
        "--job_name=" + name,
    ] + list(extra))
    p = beam.Pipeline(options=options)
    build(p)
    t0 = time.time()
    result = p.run()
    error = ""
    try:
        result.wait_until_finish(duration=120000)
    except RuntimeError as e:  # the SDK raises for every end but DONE
        error = str(e)
    return str(result.state), error, time.time() - t0


def main():
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
        from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
        from apache_beam.transforms.core import RestrictionProvider
        from apache_beam.transforms.periodicsequence import PeriodicImpulse
        from apache_beam.utils.timestamp import Duration
    except ImportError as e:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh): %s" % e)
        return 77

    class Range(RestrictionProvider):
        def __init__(self, n):
            self.n = n

        def initial_restriction(self, element):
            return OffsetRange(0, self.n)

        def create_tracker(self, restriction):
            return OffsetRestrictionTracker(restriction)

        def restriction_size(self, element, restriction):
            return restriction.size()

    class Spin(beam.DoFn):
        """Defers without claiming: the restriction never moves."""

        def __init__(self, delay):
            self.delay = delay

        def process(self, element, tracker=beam.DoFn.RestrictionParam(Range(10))):
            tracker.defer_remainder(Duration.of(self.delay) if self.delay else None)
            return []

    class Crawl(beam.DoFn):
        """Claims one position per call, outputs nothing, defers: slow, but it moves."""

        def process(self, element, tracker=beam.DoFn.RestrictionParam(Range(1500))):
            if tracker.try_claim(tracker.current_restriction().start):
                tracker.defer_remainder()
            return []

    class SpinThenClaim(beam.DoFn):
        """Defers without claiming 1200 times (counted in a file: the DoFn is pickled), then
        claims everything: a live-lock for a while, then an end."""

        def __init__(self, counter):
            self.counter = counter

        def process(self, element, tracker=beam.DoFn.RestrictionParam(Range(10))):
            with open(self.counter, "a") as f:
                f.write(".")
            if os.path.getsize(self.counter) < 1200:
                tracker.defer_remainder()
                return []
            pos = tracker.current_restriction().start
            while tracker.try_claim(pos):
                pos += 1
            return ["claimed"]

    def spin(delay):
        return lambda p: p | beam.Create(["x"]) | "Spin" >> beam.ParDo(Spin(delay))

    def start(*flags):
        serve = subprocess.Popen([sundial, "serve", "--port", "0"] + list(flags),
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        first = serve.stdout.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        check(m is not None, "the server%s says where it listens (%r)"
              % ((" with " + " ".join(flags)) if flags else "", first.strip()))
        return serve, (m.group(1) if m else None)

    def stop(serve):
        serve.terminate()
        try:
            serve.wait(timeout=10)
        except subprocess.TimeoutExpired:
            serve.kill()

    bad = subprocess.run([sundial, "serve", "--port", "0", "--livelock-rounds", "x"],
                         capture_output=True, text=True, timeout=30)
    check(bad.returncode == 2 and "--livelock-rounds expects a number of bundles" in bad.stderr,
          "serve --livelock-rounds x is refused (%d, %r)" % (bad.returncode, bad.stderr.strip()))

    serve, endpoint = start()
    try:
        if endpoint is None:
            return 1

        for name, build, extra, bound in (
                ("spin", spin(0), (), 1000),
                ("spin-100", spin(0), ("--sundial_livelock_rounds=100",), 100),
                ("spin-delayed", spin(2), (), 1000)):
            state, error, took = run(beam, endpoint, name, build, extra)
            check(state.endswith("FAILED"), "%s: the job fails (%s) in %.1f s" % (name, state, took))
            check("the job is live-locked: " in error,
                  "%s: the message says live-locked (%r)" % (name, error[:300]))
            check("(bound %d)" % bound in error, "%s: the message names the bound %d" % (name, bound))
            check("Per-stage state:" in error and "(sdk):" in error,
                  "%s: the message has the per-stage dump" % name)
            check(took < 30, "%s: detected within 30 s (%.1f s)" % (name, took))

        state, error, took = run(beam, endpoint, "crawl",
                                 lambda p: p | beam.Create(["x"]) | beam.ParDo(Crawl()))
        check(state.endswith("DONE"),
              "crawl: 1500 claims without output is progress, the job is DONE (%s %s) in %.1f s"
              % (state, error[:300], took))

        ticks = os.path.join(tempfile.mkdtemp(prefix="livelock_check-"), "ticks")

        def tick(t, path=ticks):
            with open(path, "a") as f:
                f.write(".")

        def periodic(p):
            now = time.time()
            (p
             | PeriodicImpulse(start_timestamp=now, stop_timestamp=now + 10.5, fire_interval=10)
             | beam.Map(tick))

        cpu0 = time.process_time()
        state, error, took = run(beam, endpoint, "periodic", periodic)
        cpu = time.process_time() - cpu0
        n = os.path.getsize(ticks) if os.path.exists(ticks) else 0
        check(state.endswith("DONE") and took >= 9 and n == 2,
              "periodic: PeriodicImpulse waiting 10 s for its tick is not live-locked: %s in "
              "%.1f s with %d ticks %s" % (state, took, n, error[:200]))
        # Nor does it spin while it waits: its stage hands out nothing until the wall clock
        # reaches the resume it asked for (a bundle a second at most). Spinning, the SDK in this
        # process spent over 2 s of CPU in those 10 s (1,300 bundles); waiting, about 0.2 s.
        check(cpu < 1.5, "periodic: the SDK worker (this process) spent %.2f s of CPU while the "
              "source waited 10 s for its tick (spinning costs over 2 s)" % cpu)
        os.remove(ticks) if n else None
        os.rmdir(os.path.dirname(ticks))

        state, error, took = run(beam, endpoint, "bad-option", spin(0),
                                 ("--sundial_livelock_rounds=many",))
        check(state.endswith("FAILED") and "sundial_livelock_rounds:v1: expected a number" in error
              and '"many"' in error, "bad-option: refused with a clear message (%r)" % error[:300])
    finally:
        stop(serve)

    serve, endpoint = start("--livelock-rounds", "50")
    counter_dir = tempfile.mkdtemp(prefix="livelock_check-")
    try:
        if endpoint is None:
            return 1
        state, error, took = run(beam, endpoint, "spin-flag", spin(0))
        check(state.endswith("FAILED") and "the job is live-locked: " in error
              and "(bound 50)" in error,
              "spin-flag: --livelock-rounds 50 is the bound (%s, %.1f s, %r)"
              % (state, took, error[:200]))
        counter = os.path.join(counter_dir, "calls")
        state, error, took = run(
            beam, endpoint, "spin-then-claim",
            lambda p: p | beam.Create(["x"]) | beam.ParDo(SpinThenClaim(counter)),
            ("--sundial_livelock_rounds=0",))
        calls = os.path.getsize(counter) if os.path.exists(counter) else 0
        check(state.endswith("DONE") and calls >= 1200,
              "spin-then-claim: the job's option 0 turns the check off: %d calls, then DONE "
              "(%s %s) in %.1f s" % (calls, state, error[:200], took))
    finally:
        import shutil
        shutil.rmtree(counter_dir, ignore_errors=True)
        stop(serve)
    if failures:
        print("livelock_check: %d failure(s)" % len(failures))
        return 1
    print("livelock_check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
