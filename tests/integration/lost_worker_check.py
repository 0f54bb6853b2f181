"""lost_worker_check.py SUNDIAL - a PROCESS worker that closes its control stream and stays
alive.

Sundial waits a moment (SD_EXEC_LOST_GRACE_S) for a lost PROCESS worker's exit status before
failing the job with the stream's reason. When the worker was still alive at the end of that
wait, the timer's callback failed the job (which frees the worker's record) and then freed the
record's message again: a use after free that crashed the server (ASan: heap-use-after-free in
lost_grace_cb). Checks:

  1. the job whose worker (a script this check writes to a temporary directory and names as its
     PROCESS command) opens its control stream, closes it and sleeps, FAILS naming the lost
     worker;
  2. the server is still there afterwards and runs the next job (LOOPBACK) to DONE.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import json
import os
import stat
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
from sundial_py import Checks, run_pipeline, serve  # noqa: E402

WORKER = """#!%s
import sys, time, grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
channel = grpc.insecure_channel(flags["control_endpoint"])
call = beam_fn_api_pb2_grpc.BeamFnControlStub(channel).Control(
    iter(()), metadata=[("worker_id", flags["id"])])
try:
    for _ in call:
        break
except grpc.RpcError:
    pass
channel.close()
time.sleep(5)  # alive well past the runner's grace period for an exit status
"""


def main():
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
        from apache_beam.testing.util import assert_that, equal_to
    except ImportError as e:
        print("NOT RUN: apache_beam is not installed (%s)" % e)
        return 77
    checks = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        worker = os.path.join(tmp, "drop_control_worker")
        with open(worker, "w") as f:
            f.write(WORKER % sys.executable)
        os.chmod(worker, stat.S_IRWXU)
        process = ["--environment_type=PROCESS",
                   "--environment_config=" + json.dumps({"command": worker})]

        def simple(p):
            _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x + 1)

        def checked(p):
            got = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 10)
            assert_that(got, equal_to([10, 20, 30]))

        with serve(sundial) as endpoint:
            state, error = run_pipeline(endpoint, "lost-worker", simple, extra=process,
                                        timeout_ms=60000)
            checks.check(state == "FAILED" and "lost" in error and "control stream" in error,
                         "a worker that closes its control stream and stays alive fails the "
                         "job naming it (%s: %s)" % (state, " ".join(error.split())[:300]))
            # The sundial_options of run_pipeline put LOOPBACK first; the later flag wins.
            state, error = run_pipeline(endpoint, "after-lost-worker", checked,
                                        timeout_ms=60000)
            checks.check(state == "DONE", "the server runs the next job to DONE (%s %s)"
                         % (state, error[:300]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
