"""pause_timeout_check.py SUNDIAL - steer a job's time from the test: pause, feed, step, inspect.

The worked example of a Spark-style processing-time timeout (mapGroupsWithState with
GroupStateTimeout.ProcessingTimeTimeout): a stateful DoFn counts each user's clicks and
(re)sets a processing-time timer one hour after the user's latest click; when it fires the
user's count goes out with "timeout" and the state is cleared. Tested the way Kafka Streams'
TopologyTestDriver tests are written, with sundial_beam.control:

  1. the job starts paused (sundial_pause=start) on `SUNDIAL serve --port 0 --web_port 0`;
  2. two users' clicks are fed live, from this process, through Beam's
     TestStreamServiceController (the TestStream names its endpoint), and the stream ends;
  3. step 59 minutes: no timeout yet, nothing out; alice's state holds her 2 clicks and her
     timer is pending;
  4. step 2 minutes: both timeouts fire: alice 2, bob 1;
  5. the same pipeline unpaused (no controller calls) gives the same output — and the paused
     run's output is identical under each bundle shape and schedule seed.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from sundial_py import END, QueueReader, free_port, Checks, serve_web

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

def record(line):
    with open(os.environ["PTC_CHECK_LOG"], "a") as f:
        f.write(line + "\n")


def seen():
    try:
        with open(os.environ["PTC_CHECK_LOG"]) as f:
            return sorted(l.strip() for l in f)
    except FileNotFoundError:
        return []


def build(p, ts_endpoint):
    from typing import Tuple

    import apache_beam as beam
    from apache_beam.coders import StrUtf8Coder, TupleCoder, VarIntCoder
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.timeutil import TimeDomain
    from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
    from apache_beam.utils.timestamp import Duration, Timestamp

    class Sessionize(beam.DoFn):
        """mapGroupsWithState with a one-hour processing-time timeout."""
        COUNT = ReadModifyWriteStateSpec("count", VarIntCoder())
        USER = ReadModifyWriteStateSpec("user", StrUtf8Coder())
        TIMEOUT = TimerSpec("timeout", TimeDomain.REAL_TIME)

        def process(self, click, count=beam.DoFn.StateParam(COUNT),
                    user=beam.DoFn.StateParam(USER), timeout=beam.DoFn.TimerParam(TIMEOUT)):
            count.write((count.read() or 0) + click[1])
            user.write(click[0])
            timeout.set(Timestamp.now() + Duration(seconds=3600))

        @on_timer(TIMEOUT)
        def expired(self, count=beam.DoFn.StateParam(COUNT), user=beam.DoFn.StateParam(USER)):
            yield "%s %d timeout" % (user.read(), count.read() or 0)
            count.clear()
            user.clear()

    class Out(beam.DoFn):
        def process(self, line):
            record(line)

    (p | "Clicks" >> TestStream(coder=TupleCoder([StrUtf8Coder(), VarIntCoder()]),
                                endpoint=ts_endpoint)
     | "Typed" >> beam.Map(lambda kv: kv).with_output_types(Tuple[str, int])
     | "Sessionize" >> beam.ParDo(Sessionize())
     | "Out" >> beam.ParDo(Out()))


def click_events():
    from apache_beam.coders import StrUtf8Coder, TupleCoder, VarIntCoder
    from apache_beam.testing.test_stream import ElementEvent
    from apache_beam.transforms.window import TimestampedValue
    coder = TupleCoder([StrUtf8Coder(), VarIntCoder()])
    return [ElementEvent([TimestampedValue(("alice", 1), 1), TimestampedValue(("bob", 1), 1)])
            .to_runner_api(coder),
            ElementEvent([TimestampedValue(("alice", 1), 2)]).to_runner_api(coder)]


def pipeline(endpoint, name, extra=()):
    """PortableRunner, LOOPBACK, streaming; Sundial's options declared by the package's
    SundialOptions (the runner's own table), which the controller's paused() also uses."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from sundial_beam.options import SundialOptions
    opts = PipelineOptions(["--runner=PortableRunner", "--job_endpoint=" + endpoint,
                            "--environment_type=LOOPBACK", "--job_name=" + name] + list(extra))
    opts.view_as(StandardOptions).streaming = True
    opts.view_as(SundialOptions)
    return beam.Pipeline(options=opts)


def run_paused(checks, endpoint, web, tag, extra=(), narrate=True):
    """The TopologyTestDriver-style test; returns the job's output."""
    from apache_beam.coders import VarIntCoder
    from apache_beam.testing.test_stream_service import TestStreamServiceController
    from sundial_beam.control import paused
    reader = QueueReader()
    ctl = TestStreamServiceController(reader, endpoint="localhost:%d" % free_port())
    ctl.start()
    p = pipeline(endpoint, "paused-" + tag, extra)
    build(p, ctl.endpoint)
    try:
        with paused(p, web) as job:
            st = job.status()
            if narrate:
                checks.check(st["paused"] and st["at_rest"] and seen() == [],
                             "%s: the job starts paused, at rest, nothing out (%s)"
                             % (tag, st["reason"]))
            if narrate:
                bad_inputs(checks, job, web)
            for e in click_events():
                reader.q.put(e)
            reader.q.put(END)
            clock0 = st["clock_ms"]
            st = job.step(duration=0)  # the clicks, played at the current processing time
            if narrate:
                names = [pc["name"] for pc in st["pcollections"]]
                typed = [n for n in names if "Typed" in n]
                got = job.elements(typed[0]) if typed else None
                checks.check(got is not None and sorted(map(tuple, got)) ==
                             [("alice", 1), ("alice", 1), ("bob", 1)],
                             "%s: the clicks delivered so far, readable (%s of %s)"
                             % (tag, got, names))
            st = job.step(duration="59m")
            alice = job.state("Sessionize", key="alice", state_id="count", coder=VarIntCoder())
            timers = job.timers("Sessionize")
            if narrate:
                sess = [x for x in st["stages"] if "Sessionize" in x["name"]]
                checks.check(len(sess) == 1 and "timer" in sess[0]["holds"],
                             "%s: the stateful stage's output watermark is held by its timers "
                             "(%s)" % (tag, sess and sess[0]["holds"]))
                checks.check(st["at_rest"] and st["clock_ms"] == clock0 and seen() == [],
                             "%s: 59 minutes on, no timeout: nothing out, the clock has not "
                             "jumped (%s)" % (tag, seen()))
                checks.check(alice == [[2]],
                             "%s: alice's state holds her 2 clicks (%s)" % (tag, alice))
                checks.check(sorted(t["key"] for t in timers) == ["alice", "bob"] and
                             all(t["domain"] == "processing" for t in timers),
                             "%s: one pending processing-time timer per user (%s)"
                             % (tag, [(t["key"], t["fire"]) for t in timers]))
            if narrate:
                # The same control surface from the command line: sundialctl.
                ctl_bin = os.path.join(os.path.dirname(os.environ["SUNDIAL_BINARY"]), "sundialctl")
                us = subprocess.run([ctl_bin, "--web", web, "user-state", job.job_id, "--stage",
                                     "Sessionize", "--key", "alice"], capture_output=True,
                                    text=True, timeout=60)
                checks.check(us.returncode == 0 and '"key":"alice"' in us.stdout and
                             '"key":"bob"' not in us.stdout,
                             "%s: sundialctl user-state --key alice shows alice's cells only (%s)"
                             % (tag, (us.stdout + us.stderr)[-200:]))
                stp = subprocess.run([ctl_bin, "--web", web, "step", job.job_id, "--for", "2m"],
                                     capture_output=True, text=True, timeout=120)
                st = json.loads(stp.stdout.strip().splitlines()[-1]) if stp.returncode == 0 else {}
                checks.check(stp.returncode == 0 and (st.get("at_rest") or st.get("state") == "DONE"),
                             "%s: sundialctl step --for 2m returns once the job rests (%s)"
                             % (tag, (stp.stdout + stp.stderr)[-200:]))
            else:
                st = job.step(duration="2m")
            if narrate:
                checks.check(seen() == ["alice 2 timeout", "bob 1 timeout"],
                             "%s: 61 minutes on, both timeouts fired: %s" % (tag, seen()))
                checks.check(st["state"] == "DONE" or job.state("Sessionize") == [],
                             "%s: the timed-out users' state is cleared, nothing is left (%s)"
                             % (tag, st["state"]))
        state = str(job.result.state)
        if narrate:
            checks.check(state == "DONE", "%s: resumed, the job ends DONE (%s)" % (tag, state))
    finally:
        reader.q.put(END)
        ctl.stop()
    return seen()


def case_pause_at(checks, endpoint, web):
    """--sundial_pause_at=+30m: the job runs (the clicks are played) and stops before the
    clock jump to the timeouts at +60 min would pass +30 min; resumed, they fire."""
    from apache_beam.testing.test_stream_service import TestStreamServiceController
    from sundial_beam.control import JobController
    reader = QueueReader()
    ctl = TestStreamServiceController(reader, endpoint="localhost:%d" % free_port())
    ctl.start()
    try:
        p = pipeline(endpoint, "pause-at", ["--sundial_pause_at=+30m"])
        build(p, ctl.endpoint)
        result = p.run()
        for e in click_events():
            reader.q.put(e)
        reader.q.put(END)
        job = JobController(web, result._job_id)
        st = job.wait_at_rest()
        checks.check(st.get("reason") == "pause at time" and seen() == [] and
                     len(job.timers("Sessionize")) == 2,
                     "pause_at: the job rests before its clock passes +30 min, both timers "
                     "pending, nothing out (%s, %s)" % (st.get("reason"), seen()))
        job.resume()
        result.wait_until_finish(duration=60000)
        checks.check(str(result.state) == "DONE" and
                     seen() == ["alice 2 timeout", "bob 1 timeout"],
                     "pause_at: resumed, both timeouts fire and the job ends DONE (%s)" % seen())
    finally:
        reader.q.put(END)
        ctl.stop()


def bad_inputs(checks, job, web):
    """Every bad request gets a clear refusal naming the thing and the expectation."""
    import urllib.error
    import urllib.request
    from sundial_beam.control import ControlError

    def refused(fn):
        try:
            fn()
        except ControlError as e:
            return str(e)
        return "accepted"

    got = refused(lambda: job._call("POST", "step", **{"for": "soon"}))
    checks.check("HTTP 400" in got and "not a duration" in got,
                 "bad input: step for=soon is refused as not a duration (%s)" % got[-120:])
    got = refused(lambda: job._call("POST", "step", watermark="+1m", pcollection="Nope"))
    checks.check("HTTP 404" in got and "Nope" in got,
                 "bad input: a step to the watermark of an unknown PCollection names it (%s)"
                 % got[-120:])
    got = refused(lambda: job.state("NoSuchStage"))
    checks.check("HTTP 404" in got and "NoSuchStage" in got,
                 "bad input: user state of an unknown stage names it (%s)" % got[-120:])
    got = refused(lambda: job._call("POST", "pause", at="yesterday"))
    checks.check("HTTP 400" in got and "yesterday" in got,
                 "bad input: pause at=yesterday is refused as not a time (%s)" % got[-120:])
    req = urllib.request.Request(job.base + "/step?events=1", method="POST", data=b"")
    try:
        urllib.request.urlopen(req, timeout=30)
        code = 200
    except urllib.error.HTTPError as e:
        code = e.code
    checks.check(code == 403, "a step without the X-Sundial-Action header is refused (%d)" % code)
    st = job.status()
    checks.check(st["at_rest"] and st["steps_taken"] == 0,
                 "bad input: none of them moved the job (%s)" % st["reason"])


def run_unpaused(endpoint, tag, extra=()):
    from apache_beam.testing.test_stream_service import TestStreamServiceController
    reader = QueueReader()
    ctl = TestStreamServiceController(reader, endpoint="localhost:%d" % free_port())
    ctl.start()
    try:
        p = pipeline(endpoint, "unpaused-" + tag, extra)
        build(p, ctl.endpoint)
        result = p.run()
        for e in click_events():
            reader.q.put(e)
        reader.q.put(END)
        result.wait_until_finish(duration=120000)
    finally:
        reader.q.put(END)
        ctl.stop()
    return seen()


def case_wall(checks, endpoint, web):
    """Wall-clock jobs refuse to pause, saying why: as an option (the job fails at its start)
    and by hand (the request is refused; the job runs on)."""
    from apache_beam.testing.test_stream_service import TestStreamServiceController
    from sundial_beam.control import ControlError, JobController
    p = pipeline(endpoint, "wall-option", ["--sundial_clock=wall", "--sundial_pause=start"])
    build(p, "localhost:%d" % free_port())
    result = p.run()
    try:
        result.wait_until_finish(duration=60000)
        state, error = str(result.state), ""
    except Exception as e:  # noqa: BLE001 - the SDK raises for every end but DONE
        state, error = "FAILED", str(e)
    checks.check(state == "FAILED" and "wall clock" in error,
                 "wall: sundial_pause=start on the wall clock fails the job saying why (%s %s)"
                 % (state, error[-250:]))
    reader = QueueReader()
    ctl = TestStreamServiceController(reader, endpoint="localhost:%d" % free_port())
    ctl.start()
    try:
        p = pipeline(endpoint, "wall-hand", ["--sundial_clock=wall"])
        build(p, ctl.endpoint)
        result = p.run()
        job = JobController(web, result._job_id)
        refused = ""
        for _ in range(200):  # until the job runs (its live source keeps it running)
            if job.status().get("state") == "RUNNING":
                break
            import time
            time.sleep(0.05)
        try:
            job.pause()
        except ControlError as e:
            refused = str(e)
        checks.check("HTTP 400" in refused and "wall clock" in refused,
                     "wall: pausing a wall-clock job by hand is refused, saying why (%s)"
                     % refused[-200:])
        reader.q.put(END)
        result.wait_until_finish(duration=60000)
        checks.check(str(result.state) == "DONE", "wall: the refused job runs on to DONE (%s)"
                     % result.state)
    finally:
        reader.q.put(END)
        ctl.stop()


def main():
    if len(sys.argv) != 2:
        print("usage: pause_timeout_check.py SUNDIAL", file=sys.stderr)
        return 2
    try:
        import apache_beam  # noqa: F401
        from apache_beam.testing import test_stream_service  # noqa: F401
    except ImportError:
        print("NOT RUN: apache_beam is not installed")
        return 77
    os.environ.setdefault("SUNDIAL_BINARY", sys.argv[1])
    checks = Checks()
    tmp = tempfile.mkdtemp(prefix="ptc_check_")
    try:
        with serve_web(sys.argv[1]) as (endpoint, web):
            os.environ["PTC_CHECK_LOG"] = os.path.join(tmp, "wall.log")
            case_wall(checks, endpoint, web)
            os.environ["PTC_CHECK_LOG"] = os.path.join(tmp, "pause_at.log")
            case_pause_at(checks, endpoint, web)
            os.environ["PTC_CHECK_LOG"] = os.path.join(tmp, "paused.log")
            paused_out = run_paused(checks, endpoint, web, "paused")
            os.environ["PTC_CHECK_LOG"] = os.path.join(tmp, "unpaused.log")
            unpaused_out = run_unpaused(endpoint, "unpaused")
            checks.check(paused_out == unpaused_out,
                         "the paused-and-stepped run's output equals the unpaused run's "
                         "(%s vs %s)" % (paused_out, unpaused_out))
            for shape in ("greedy", "one_key", "one_element"):
                for seed in (0, 7):
                    tag = "%s-seed%d" % (shape, seed)
                    extra = ["--sundial_bundle_shape=" + shape,
                             "--sundial_schedule_seed=%d" % seed]
                    os.environ["PTC_CHECK_LOG"] = os.path.join(tmp, tag + ".p.log")
                    got_p = run_paused(checks, endpoint, web, tag, extra, narrate=False)
                    os.environ["PTC_CHECK_LOG"] = os.path.join(tmp, tag + ".u.log")
                    got_u = run_unpaused(endpoint, tag, extra)
                    checks.check(got_p == got_u == unpaused_out,
                                 "%s: paused-and-stepped equals unpaused (%s vs %s)"
                                 % (tag, got_p, got_u))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
