"""live_teststream_check.py SUNDIAL - a live TestStream: events pulled from a TestStreamService.

A TestStream whose payload names an endpoint reads its events from Beam's TestStreamService
while the job runs. Beam's Python SDK ships a server for it (TestStreamServiceController,
apache_beam.testing.test_stream_service); this check serves one from its own process, on
loopback, fed from a queue, and runs pipelines on `SUNDIAL serve --port 0` (PortableRunner,
LOOPBACK) whose TestStream names it:

  live:     ("a", 1), ("b", 2) at 1 s; then nothing for 1.5 s (the job must keep RUNNING: a job
            waiting for its next live event is neither done nor stuck); ("a", 3) at 2 s, the
            watermark to 20 s, a processing-time advance, and the service ends the stream.
            10 s fixed windows summed per key: a=4, b=2 in [0, 10); the job ends DONE.
  gone:     the service sends one event, then goes away (the server stops mid-stream): the
            job FAILS, and its error names the TestStream and the endpoint.
  nothing:  the endpoint has no server at all: the job FAILS naming the endpoint.

Each DoFn appends what it saw to $LTS_CHECK_LOG (Beam pickles DoFns). Exit 0 on success, 1 on
failure, 77 when Beam's Python SDK is not installed.
"""
import os
import shutil
import sys
import tempfile
import threading
import time

from sundial_py import END, QueueReader, free_port, Checks, serve, sundial_options

def record(line):
    with open(os.environ["LTS_CHECK_LOG"], "a") as f:
        f.write(line + "\n")


def seen():
    try:
        with open(os.environ["LTS_CHECK_LOG"]) as f:
            return sorted(l.strip() for l in f)
    except FileNotFoundError:
        return []


def start_job(endpoint, name, ts_endpoint):
    import apache_beam as beam
    from apache_beam.coders import StrUtf8Coder, TupleCoder, VarIntCoder
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms import window

    class Out(beam.DoFn):
        def process(self, kv, w=beam.DoFn.WindowParam):
            record("%s=%d [%d,%d)" % (kv[0], kv[1], int(w.start), int(w.end)))

    p = beam.Pipeline(options=sundial_options(endpoint, name, streaming=True))
    (p | "Live" >> TestStream(coder=TupleCoder([StrUtf8Coder(), VarIntCoder()]),
                              endpoint=ts_endpoint)
     | "Window" >> beam.WindowInto(window.FixedWindows(10))
     | "Sum" >> beam.CombinePerKey(sum)
     | "Out" >> beam.ParDo(Out()))
    return p.run()


def events(coder_kvs):
    """Beam's own event classes, as the runner API has them."""
    from apache_beam.coders import StrUtf8Coder, TupleCoder, VarIntCoder
    from apache_beam.testing.test_stream import ElementEvent, ProcessingTimeEvent, WatermarkEvent
    from apache_beam.transforms.window import TimestampedValue
    coder = TupleCoder([StrUtf8Coder(), VarIntCoder()])
    out = []
    for kind, arg in coder_kvs:
        if kind == "elements":
            ev = ElementEvent([TimestampedValue(kv, ts) for kv, ts in arg])
        elif kind == "watermark":
            ev = WatermarkEvent(arg)
        else:
            ev = ProcessingTimeEvent(arg)
        out.append(ev.to_runner_api(coder))
    return out


def state_of(result):
    try:
        return str(result.state)
    except Exception as e:  # noqa: BLE001 - the SDK raises for some ends
        return "ERROR %s" % e


def wait_end(result, timeout_s=120):
    try:
        result.wait_until_finish(duration=timeout_s * 1000)
        return str(result.state), ""
    except Exception as e:  # the SDK raises for every end but DONE
        return "FAILED", str(e)


def case_live(checks, endpoint):
    from apache_beam.testing.test_stream_service import TestStreamServiceController
    reader = QueueReader()
    ctl = TestStreamServiceController(reader, endpoint="localhost:%d" % free_port())
    ctl.start()
    try:
        result = start_job(endpoint, "live", ctl.endpoint)
        for e in events([("elements", [(("a", 1), 1), (("b", 2), 1)])]):
            reader.q.put(e)
        time.sleep(1.5)
        st = state_of(result)
        checks.check("RUNNING" in st, "live: waiting for the next live event, the job keeps "
                     "running (%s)" % st)
        checks.check(seen() == [], "live: no window fired before the watermark moved (%s)"
                     % seen())
        for e in events([("elements", [(("a", 3), 2)]), ("watermark", 20),
                         ("clock", 60)]):
            reader.q.put(e)
        reader.q.put(END)
        state, error = wait_end(result)
        checks.check(state == "DONE", "live: the job ends DONE once the service ends the "
                     "stream (%s %s)" % (state, error[-300:]))
        checks.check(seen() == ["a=4 [0,10)", "b=2 [0,10)"],
                     "live: the live events were played in order: a=4, b=2 in [0, 10) (%s)"
                     % seen())
    finally:
        reader.q.put(END)
        ctl.stop()


def case_gone_mid_stream(checks, endpoint):
    from apache_beam.testing.test_stream_service import TestStreamServiceController
    reader = QueueReader()
    ctl = TestStreamServiceController(reader, endpoint="localhost:%d" % free_port())
    ctl.start()
    result = start_job(endpoint, "gone_mid", ctl.endpoint)
    for e in events([("elements", [(("a", 1), 1)])]):
        reader.q.put(e)
    time.sleep(1.0)
    stopper = threading.Thread(target=ctl.stop)  # the call is open, waiting on the queue
    stopper.start()
    state, error = wait_end(result)
    reader.q.put(END)
    stopper.join(30)
    checks.check(state == "FAILED" and ctl.endpoint in error and "went away" in error,
                 "gone: a service that goes away mid-stream fails the job naming the endpoint "
                 "(%s %s)" % (state, error[-400:]))


def case_nothing(checks, endpoint):
    url = "localhost:%d" % free_port()
    result = start_job(endpoint, "nothing", url)
    state, error = wait_end(result)
    checks.check(state == "FAILED" and url in error,
                 "nothing: no service at the endpoint fails the job naming it (%s %s)"
                 % (state, error[-400:]))


def main():
    if len(sys.argv) != 2:
        print("usage: live_teststream_check.py SUNDIAL", file=sys.stderr)
        return 2
    try:
        import apache_beam  # noqa: F401
        from apache_beam.testing import test_stream_service  # noqa: F401
    except ImportError:
        print("NOT RUN: apache_beam is not installed")
        return 77
    checks = Checks()
    tmp = tempfile.mkdtemp(prefix="lts_check_")
    try:
        with serve(sys.argv[1]) as endpoint:
            for name, case in (("live", case_live), ("gone", case_gone_mid_stream),
                               ("nothing", case_nothing)):
                os.environ["LTS_CHECK_LOG"] = os.path.join(tmp, name + ".log")
                case(checks, endpoint)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
