"""drain_check.py SUNDIAL - JobService.Drain end to end with Beam's Python SDK.

Starts `SUNDIAL serve --port 0` on loopback and runs two streaming pipelines on it
(PortableRunner, LOOPBACK: the SDK worker runs in this process, so what the DoFns print
comes back here), each drained once it has produced output:

  1. An unbounded splittable DoFn: PeriodicImpulse (one element every 0.1 s for an hour, on
     the wall clock) -> one-second fixed windows -> count per window. Without Drain it runs
     for an hour. Drained, the runner sends the SDF's work through the SDK's truncation
     (PeriodicImpulse truncates to nothing), the watermark goes to the end of time and every
     window fires: the job must end DRAINED within seconds, and the counts printed must add
     up to every impulse the SDF emitted (nothing read is lost).
  2. A TestStream (400 events, 0.05 s each to process) -> fixed windows -> sum per key: the
     events not yet played are dropped, the windows of those that were fire; DRAINED, and
     every element that went through the first DoFn is in a sum.

  3. Unbounded sources never stall: two splittable DoFns that always have data (they claim on
     and never return by themselves), flattened. The runner checkpoints their bundles every
     second (sundial_sdf_checkpoint_ms), so what they emitted reaches the stage after the
     Flatten from both while they run; then the job is drained (their own truncation ends
     them) and every element emitted is there.

Also: Drain of a finished job is FAILED_PRECONDITION and of an unknown one NOT_FOUND.
Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import os
import re
import subprocess
import sys
import time

failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def emit(tag, value):
    """Record what a DoFn saw, in the file $DRAIN_CHECK_LOG (the DoFns run in this process,
    but Beam pickles them, so they share only what they look up when called)."""
    with open(os.environ["DRAIN_CHECK_LOG"], "a") as f:
        f.write("%s %s\n" % (tag, value))


def tagged(tag):
    try:
        with open(os.environ["DRAIN_CHECK_LOG"]) as f:
            return [l[len(tag) + 1:].strip() for l in f if l.startswith(tag + " ")]
    except FileNotFoundError:
        return []


def wait_for(cond, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def run_and_drain(beam, endpoint, stub, pb, name, build, ready):
    """Run build(p) on the server, wait for ready(), Drain, wait for the end."""
    from apache_beam.options.pipeline_options import PipelineOptions

    class SundialOptions(PipelineOptions):
        """Declared, so the portable runner sends --sundial_clock to the job (it drops the
        options no PipelineOptions class declares, and the job would run on the server's
        synthetic clock instead)."""

        @classmethod
        def _add_argparse_args(cls, parser):
            parser.add_argument("--sundial_clock", choices=("wall", "synthetic"), default=None)

    options = SundialOptions([
        "--runner=PortableRunner",
        "--job_endpoint=" + endpoint,
        "--environment_type=LOOPBACK",
        "--streaming",
        "--sundial_clock=wall",
        "--job_name=" + name,
    ])
    p = beam.Pipeline(options=options)
    build(p)
    result = p.run()
    job_id = result._job_id
    check(wait_for(ready, 60), "%s: output arrives before the drain" % name)
    t0 = time.time()
    resp = stub.Drain(pb.DrainJobRequest(job_id=job_id))
    check(pb.JobState.Enum.Name(resp.state) in ("DRAINING", "DRAINED"),
          "%s: Drain answers %s" % (name, pb.JobState.Enum.Name(resp.state)))
    try:
        result.wait_until_finish(duration=60000)
    except RuntimeError as e:  # the SDK raises for every end but DONE
        print("ended:", e, flush=True)
    took = time.time() - t0
    state = str(result.state)
    check(state.endswith("DRAINED"), "%s: the job ends DRAINED (%s) in %.1f s" % (name, state, took))
    check(took < 30, "%s: the drain took under 30 s" % name)
    return job_id


def main():
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
        import grpc
        from apache_beam.portability.api.org.apache.beam.model.job_management.v1 import (
            beam_job_api_pb2 as pb, beam_job_api_pb2_grpc as pb_grpc)
        from apache_beam.transforms import window
        from apache_beam.transforms.periodicsequence import PeriodicImpulse
        from apache_beam.testing.test_stream import TestStream
        from apache_beam.transforms.window import TimestampedValue
        from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
        from apache_beam.transforms.core import RestrictionProvider
    except ImportError as e:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh): %s" % e)
        return 77
    import tempfile
    log_dir = tempfile.mkdtemp(prefix="drain_check-")
    os.environ["DRAIN_CHECK_LOG"] = os.path.join(log_dir, "seen.txt")
    serve = subprocess.Popen([sundial, "serve", "--port", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        first = serve.stdout.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        if not check(m is not None, "the server says where it listens (%r)" % first.strip()):
            return 1
        endpoint = m.group(1)
        channel = grpc.insecure_channel(endpoint)
        stub = pb_grpc.JobServiceStub(channel)

        # 1. PeriodicImpulse: an unbounded SDF that only a drain ends.
        def impulses(p):
            now = time.time()
            (p
             | "Ticks" >> PeriodicImpulse(start_timestamp=now, stop_timestamp=now + 3600,
                                          fire_interval=0.1)
             | "Seen" >> beam.Map(lambda t: (emit("TICK", t), ("k", 1))[1])
             | "PerSecond" >> beam.WindowInto(window.FixedWindows(1))
             | "Count" >> beam.CombinePerKey(sum)
             | "Out" >> beam.Map(lambda kv: emit("COUNT", kv[1])))

        job1 = run_and_drain(beam, endpoint, stub, pb, "drain-sdf", impulses,
                             lambda: len(tagged("COUNT")) >= 2)
        ticks, counts = tagged("TICK"), [int(c) for c in tagged("COUNT")]
        check(len(ticks) > 0 and sum(counts) == len(ticks),
              "drain-sdf: the windows count every impulse emitted (%d counted, %d emitted)"
              % (sum(counts), len(ticks)))

        # 2. A TestStream: the events not played yet are dropped.
        def stream(p):
            ts = TestStream().advance_watermark_to(0)
            for i in range(400):
                ts = (ts.add_elements([TimestampedValue(("u%d" % (i % 2), 1), i)])
                      .advance_watermark_to(i + 1))
            (p
             | "Events" >> ts.advance_watermark_to_infinity()
             | "Slow" >> beam.Map(lambda kv: (time.sleep(0.05), emit("SEEN", kv[0]), kv)[2])
             | "PerTen" >> beam.WindowInto(window.FixedWindows(10))
             | "Sum" >> beam.CombinePerKey(sum)
             | "Out" >> beam.Map(lambda kv: emit("SUM", kv[1])))

        job2 = run_and_drain(beam, endpoint, stub, pb, "drain-teststream", stream,
                             lambda: len(tagged("SUM")) >= 2)
        seen, sums = tagged("SEEN"), [int(s) for s in tagged("SUM")]
        check(0 < len(seen) < 400, "drain-teststream: the stream stopped early (%d of 400 events)"
              % len(seen))
        check(sum(sums) == len(seen), "drain-teststream: every element read is summed (%d of %d)"
              % (sum(sums), len(seen)))

        # 3. Two endless sources, flattened: checkpoints keep both flowing.
        class Endless(RestrictionProvider):
            def initial_restriction(self, element):
                return OffsetRange(0, 2 ** 62)

            def create_tracker(self, restriction):
                return OffsetRestrictionTracker(restriction)

            def restriction_size(self, element, restriction):
                return 1

            def truncate(self, element, restriction):
                return None  # on drain, stop

        @beam.DoFn.unbounded_per_element()
        class Source(beam.DoFn):
            def process(self, element, tracker=beam.DoFn.RestrictionParam(Endless())):
                i = tracker.current_restriction().start
                while tracker.try_claim(i):
                    emit("MADE", "%s-%d" % (element, i))
                    yield "%s-%d" % (element, i)
                    i += 1
                    time.sleep(0.01)

        def endless(p):
            a = p | "A" >> beam.Create(["a"]) | "ReadA" >> beam.ParDo(Source())
            b = p | "B" >> beam.Create(["b"]) | "ReadB" >> beam.ParDo(Source())
            (a, b) | "Both" >> beam.Flatten() | "Got" >> beam.Map(lambda x: emit("GOT", x))

        def both_flow():
            got = tagged("GOT")
            return (sum(1 for g in got if g.startswith("a-")) >= 20 and
                    sum(1 for g in got if g.startswith("b-")) >= 20)

        t0 = time.time()
        run_and_drain(beam, endpoint, stub, pb, "endless-sources", endless, both_flow)
        made, got = sorted(tagged("MADE")), sorted(tagged("GOT"))
        check(both_flow(), "endless-sources: both sources reached the Flatten's consumer while "
              "they ran (%.1f s)" % (time.time() - t0))
        check(made == got, "endless-sources: every element made arrived (%d made, %d arrived)"
              % (len(made), len(got)))

        # Drain of an ended job and of an unknown one.
        for job, code, what in ((job1, grpc.StatusCode.FAILED_PRECONDITION, "a drained job"),
                                ("job-999", grpc.StatusCode.NOT_FOUND, "an unknown job")):
            try:
                r = stub.Drain(pb.DrainJobRequest(job_id=job))
                # A drained job is left alone: its state again.
                check(job == job1 and pb.JobState.Enum.Name(r.state) == "DRAINED",
                      "Drain of %s answers DRAINED" % what)
            except grpc.RpcError as e:
                check(e.code() == code, "Drain of %s is %s (%s)" % (what, e.code(), e.details()))
        _ = job2
        channel.close()
    finally:
        import shutil
        shutil.rmtree(log_dir, ignore_errors=True)
        serve.terminate()
        try:
            serve.wait(timeout=10)
        except subprocess.TimeoutExpired:
            serve.kill()
    if failures:
        print("drain_check: %d failure(s)" % len(failures))
        return 1
    print("drain_check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
