"""prism_exit_check.py SUNDIAL - a Python process that ran pipelines through Beam's PrismRunner
exits without Beam's one-second stop sleep, and leaves no server behind.

Beam Python's PrismRunner stops the runner it started from an atexit handler: if that process
is still running it sends SIGINT and sleeps a second before looking again. Sundial, started
that way, lets its launcher exit once the first job is prepared and serves on in a child that
ends when its client's end of the log pipe closes (runner/detach.c). Each case runs a fresh
Python process (this file, `--child MODE`) and checks:

  1. jobs: two TestPipeline blocks pass; after them the process Beam started has exited with
     status 0; afterwards nothing serves on the job port (the server went with its client);
     the process exits more than half a second sooner than the same run with case 3's
     setting (the SDK's stop sleep, 1 s, is not paid);
  2. no job: a process that starts the runner and never prepares a job keeps the launcher:
     Beam stops it as always (SIGINT, forwarded to the server), and nothing is left serving;
  3. SUNDIAL_DETACH=0: the launcher stays (the process Beam started still runs after the
     jobs), and the server is still stopped at exit.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import os
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
from sundial_py import Checks  # noqa: E402


def launched():
    """(the process Beam started, its job port) from the SDK's cache of started servers."""
    from apache_beam.utils import subprocess_server
    for key, entry in subprocess_server.SubprocessServer._cache._cache.items():
        cmd = list(key[0])
        process = entry.obj[0]
        return process, int(cmd[cmd.index("--job_port") + 1])
    return None, None


def child(mode, sundial):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to
    args = ["--runner=PrismRunner", "--prism_location=" + sundial]
    if mode == "nojob":
        from apache_beam.runners.portability import prism_runner
        runner = prism_runner.PrismRunner()
        runner.default_job_server(PipelineOptions(args)).start()
    else:
        for i in range(2):
            with TestPipeline(options=PipelineOptions(args)) as p:
                assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x + i),
                            equal_to([1 + i, 2 + i, 3 + i]))
            print("BLOCK %d passed" % i)
    process, port = launched()
    time.sleep(0.2)  # the launcher's exit follows the first Prepare: give it a moment
    print("LAUNCHER %s" % ("running" if process.poll() is None else
                           "exited %d" % process.returncode))
    print("PORT %d" % port)
    print("END %.6f" % time.time(), flush=True)


def serving(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def gone_within(port, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not serving(port):
            return True
        time.sleep(0.05)
    return False


def run_child(mode, sundial, env):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, sundial],
                       capture_output=True, text=True, env=env, timeout=180)
    ended = time.time()
    out = dict(l.split(" ", 1) for l in p.stdout.splitlines() if " " in l)
    if p.returncode != 0 or "END" not in out:
        print(p.stdout[-2000:] + p.stderr[-4000:])
        return None
    out["exit_s"] = ended - float(out["END"])
    out["port"] = int(out["PORT"])
    return out


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    sundial = os.path.abspath(sys.argv[1])
    try:
        import apache_beam  # noqa: F401
    except ImportError as e:
        print("NOT RUN: apache_beam is not installed (%s)" % e)
        return 77
    checks = Checks()
    env = dict(os.environ)
    env.pop("SUNDIAL_DETACH", None)

    out = run_child("jobs", sundial, env)
    if checks.check(out is not None, "two TestPipeline blocks through PrismRunner pass"):
        checks.check(out["LAUNCHER"] == "exited 0",
                     "the process Beam started has exited 0 after the jobs (%s)" % out["LAUNCHER"])
        checks.check(gone_within(out["port"], 5),
                     "nothing serves on port %d once the client is gone" % out["port"])

    detached = out
    out = run_child("nojob", sundial, env)
    if checks.check(out is not None, "a process that starts the runner and submits nothing"):
        checks.check(out["LAUNCHER"] == "running",
                     "without a job the launcher stays (%s)" % out["LAUNCHER"])
        checks.check(gone_within(out["port"], 5),
                     "Beam's SIGINT at exit stops the server (port %d)" % out["port"])

    env["SUNDIAL_DETACH"] = "0"
    out = run_child("jobs", sundial, env)
    if checks.check(out is not None, "SUNDIAL_DETACH=0: the blocks pass"):
        checks.check(out["LAUNCHER"] == "running",
                     "SUNDIAL_DETACH=0: the launcher stays (%s)" % out["LAUNCHER"])
        checks.check(gone_within(out["port"], 5),
                     "SUNDIAL_DETACH=0: the server is stopped at exit (port %d)" % out["port"])
        if detached is not None:
            # The SDK's stop sleeps 1 s whenever the launcher still runs; the interpreter's
            # own teardown (the same in both) varies with the machine's load.
            checks.check(out["exit_s"] - detached["exit_s"] > 0.5,
                         "the Python process exits without the 1 s stop sleep (%.3f s after its "
                         "last line; %.3f s with SUNDIAL_DETACH=0)" % (detached["exit_s"],
                                                                      out["exit_s"]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
