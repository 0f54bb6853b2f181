#!/usr/bin/env python3
"""big_pipeline_check.py SUNDIAL: large pipelines do not stall the server (issue 8, point 5).

Against a server started here on a loopback ephemeral port with --max_pipeline_transforms 50000:
  1. Prepare and Run of a chain of 40,000 transforms while a second client calls GetJobs every
     20 ms: both succeed and no GetJobs answer takes longer than 0.5 s (planning used to run
     on the loop thread: 13 s for this Run);
  2. a chain of 60,000 transforms is refused with RESOURCE_EXHAUSTED naming the limit, in
     under 3 s;
  3. SIGTERM while such a Prepare is being checked: the server exits within 1 s.
Uses Beam's Python protos and grpcio from the venv tools/setup.sh installs.
"""
import os
import signal
import sys
import threading
import time

import grpc
from apache_beam.portability.api import beam_job_api_pb2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools"))
import bench_prepare  # noqa: E402  (chain, start, stub)

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def main():
    binary = sys.argv[1]
    os.environ["SUNDIAL_FLAGS"] = "--max_pipeline_transforms 50000"
    small, big = bench_prepare.chain(40000), bench_prepare.chain(60000)
    proc, addr = bench_prepare.start(binary)
    try:
        js, poll = bench_prepare.stub(addr), bench_prepare.stub(addr)
        res, worst = {}, [0.0]
        th = threading.Thread(target=bench_prepare.prepare, args=(js, small, res, True))
        th.start()
        while th.is_alive():
            t0 = time.monotonic()
            poll.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30)
            worst[0] = max(worst[0], time.monotonic() - t0)
            time.sleep(0.02)
        th.join()
        check(res.get("answer") == "OK" and res.get("run") == "OK",
              "40,000 transforms: Prepare %s in %.2f s, Run %s in %.2f s"
              % (res.get("answer"), res.get("secs", -1), res.get("run"),
                 res.get("run_secs", -1)))
        check(worst[0] < 0.5, "slowest GetJobs meanwhile %.3f s (limit 0.5 s)" % worst[0])

        res = {}
        bench_prepare.prepare(js, big, res)
        check(res["answer"].startswith("RESOURCE_EXHAUSTED") and
              "--max_pipeline_transforms" in res["answer"] and res["secs"] < 3.0,
              "60,000 transforms: %s in %.2f s" % (res["answer"], res["secs"]))

        res = {}
        th = threading.Thread(target=bench_prepare.prepare, args=(js, small, res))
        th.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
            secs = time.monotonic() - t0
        except Exception:
            secs = float("inf")
        th.join()
        check(secs < 1.0, "SIGTERM during a Prepare: exited in %.2f s (limit 1 s), Prepare %s"
              % (secs, res.get("answer")))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print("big_pipeline_check: %s" % ("FAILED: " + "; ".join(failures) if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
