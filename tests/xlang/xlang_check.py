"""xlang_check.py BUILD SRC [--prism PRISM_BIN] - Java transforms in a Beam Python pipeline on
Sundial, without Docker (label "xlang"; docs/xlang.md).

Starts Beam Java's expansion service with tools/expansion_service.sh (on 127.0.0.1, a free port;
checked to listen on nothing else) and a Sundial server, and runs Beam Python pipelines whose
Python part is LOOPBACK and whose Java part runs in a Java SDK worker process that Sundial starts
from the PROCESS environment the expansion service hands out:

  1. one job with three Java transforms, data crossing between the SDKs with standard coders:
     GenerateSequence (its external registration, beam:external:java:generate_sequence:v1) into
     a Python Map; Python strings into Count.perElement called by class name
     (JavaExternalTransform, allowed by tests/xlang/allowlist.yaml); Python rows into the schema
     transform beam:schematransform:org.apache.beam:yaml:explode:v1. Each output is asserted.
  2. a Docker environment (Python's --environment_type=DOCKER): refused at Prepare, saying how
     to get a process environment.
  3. a PROCESS environment whose command does not exist: refused at Prepare, naming it.
  4. a Java worker that cannot start (a Sundial server whose environment gives the JVM an option
     it does not have, SUNDIAL_JAVA_WORKER_OPTS): the job fails with the JVM's stderr.

With --prism PRISM_BIN the same cases run on Prism instead and each outcome is printed (side by
side with Sundial's in docs/xlang.md); nothing is asserted then, and a job that does not end
within a minute is reported as hanging.

Exit 0 on success, 1 on failure, 77 (NOT RUN) when the venv, Java, or setup's xlang part
(BUILD/xlang) is missing.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import typing

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sundial_py import Checks, serve  # noqa: E402

START_S = int(os.environ.get("SD_XLANG_START_SECONDS", "300"))  # a JVM on a loaded machine
JOB_S = int(os.environ.get("SD_XLANG_JOB_SECONDS", "300"))
BAD_JVM_OPTION = "-XX:+SundialNoSuchJvmOption"


def not_run(why):
    print("NOT RUN: " + why)
    return 77


def start_expansion_service(build, src):
    """tools/expansion_service.sh on a free port; (process, HOST:PORT)."""
    env = dict(os.environ, SUNDIAL_BUILD_DIR=build)
    proc = subprocess.Popen(
        ["bash", os.path.join(src, "tools", "expansion_service.sh"), "0",
         "--javaClassLookupAllowlistFile=" + os.path.join(src, "tests", "xlang", "allowlist.yaml")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + START_S
    seen = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(r"expansion service listening on (127\.0\.0\.1:\d+)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    proc.wait()
    raise RuntimeError("the expansion service did not start:\n" + "".join(seen[-20:]))


def listening_addresses(pid):
    """The local addresses pid listens on (TCP), from ss; None when ss is missing."""
    if shutil.which("ss") is None:
        return None
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    return [line.split()[3] for line in out.splitlines() if "pid=%d," % pid in line]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prism:
    """Prism on a free loopback port (its job endpoint), for the side-by-side run."""

    def __init__(self, binary, env=None):
        self.port = free_port()
        self.proc = subprocess.Popen([binary, "--job_port", str(self.port), "--serve_http=false"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("prism did not listen on %d" % self.port)

    def __enter__(self):
        return "localhost:%d" % self.port

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def options(endpoint, name, env_args):
    from apache_beam.options.pipeline_options import PipelineOptions
    return PipelineOptions(["--runner=PortableRunner", "--job_endpoint=" + endpoint,
                            "--job_name=" + name] + env_args)


def run(endpoint, name, build_fn, env_args=("--environment_type=LOOPBACK",), wait_s=JOB_S):
    """Run a pipeline to its end; (state, error text, seconds). A job still running after
    wait_s is cancelled and reported as HANGING."""
    import apache_beam as beam
    t0 = time.time()
    p = beam.Pipeline(options=options(endpoint, name, list(env_args)))
    build_fn(p)
    try:
        result = p.run()
    except Exception as e:  # Prepare or Run refused
        return "REFUSED", str(e), time.time() - t0
    try:
        state = result.wait_until_finish(duration=wait_s * 1000)
    except Exception as e:  # the SDK raises for every end but DONE
        return "FAILED", str(e), time.time() - t0
    state = str(state)
    if state not in ("DONE", "FAILED", "CANCELLED"):
        try:
            result.cancel()
        except Exception:
            pass
        return "HANGING", "still %s after %d s" % (state, wait_s), time.time() - t0
    return state, "", time.time() - t0


class Group(typing.NamedTuple):
    """The schema'd rows the explode schema transform takes: an array field to explode."""
    key: str
    values: typing.Sequence[int]


def three_java_transforms(exp):
    import apache_beam as beam
    from apache_beam.io.external.generate_sequence import GenerateSequence
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms.external import (JavaExternalTransform,
                                                 SchemaAwareExternalTransform)

    beam.coders.registry.register_coder(Group, beam.coders.RowCoder)

    def build(p):
        squares = (p | "Sequence" >> GenerateSequence(start=1, stop=21, expansion_service=exp)
                   | "Square" >> beam.Map(lambda x: x * x))
        assert_that(squares, equal_to([x * x for x in range(1, 21)]), label="CheckSquares")
        counts = (p | "Words" >> beam.Create("the cat and the dog and the bird".split())
                  | "Count" >> JavaExternalTransform("org.apache.beam.sdk.transforms.Count",
                                                     expansion_service=exp).perElement()
                  | "Format" >> beam.MapTuple(lambda w, n: "%s=%d" % (w, n)))
        assert_that(counts, equal_to(["the=3", "and=2", "cat=1", "dog=1", "bird=1"]),
                    label="CheckCounts")
        rows = (p | "Rows" >> beam.Create([Group("x", [1, 2]), Group("y", [3]), Group("z", [])])
                .with_output_types(Group)
                | "Explode" >> SchemaAwareExternalTransform(
                    "beam:schematransform:org.apache.beam:yaml:explode:v1", exp,
                    fields=["values"], cross_product=True)
                | "Pairs" >> beam.Map(lambda r: (r.key, r.values)))
        assert_that(rows, equal_to([("x", 1), ("x", 2), ("y", 3)]), label="CheckExploded")
    return build


def sequence_only(exp):
    import apache_beam as beam
    from apache_beam.io.external.generate_sequence import GenerateSequence

    def build(p):
        _ = (p | GenerateSequence(start=0, stop=5, expansion_service=exp)
             | beam.Map(lambda x: x + 1))
    return build


def python_only(p):
    import apache_beam as beam
    _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2)


def main():
    args = sys.argv[1:]
    prism = None
    if "--prism" in args:
        i = args.index("--prism")
        prism = os.path.abspath(args[i + 1])
        del args[i:i + 2]
    build, src = os.path.abspath(args[0]), os.path.abspath(args[1])
    try:
        import apache_beam  # noqa: F401
    except ImportError as e:
        return not_run("apache_beam is not installed (%s)" % e)
    if os.path.exists(os.path.join(build, "xlang", "NOT-RUN")):
        with open(os.path.join(build, "xlang", "NOT-RUN")) as f:
            return not_run("setup's xlang part did not run: " + f.read().strip())
    for f in ("classpath", "sundial-xlang.jar"):
        if not os.path.exists(os.path.join(build, "xlang", f)):
            return not_run("no %s/xlang/%s (run tools/setup.sh %s)" % (build, f, build))
    if shutil.which("java") is None:
        return not_run("java is not installed")
    sundial = os.path.join(build, "bin", "sundial")
    runner = "prism" if prism else "sundial"

    def server(env=None):
        if prism:
            return Prism(prism, env=env)
        return serve(sundial) if env is None else serve_with_env(sundial, env)

    checks = Checks()
    t0 = time.time()
    es, exp = start_expansion_service(build, src)
    try:
        print("xlang: expansion service on %s, ready in %.1f s" % (exp, time.time() - t0),
              flush=True)
        addrs = listening_addresses(es.pid)
        if addrs is not None:
            checks.check(addrs and all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:"))
                                       for a in addrs),
                         "the expansion service listens on loopback only: %s" % addrs)

        with server() as endpoint:
            state, error, secs = run(endpoint, "xlang-three", three_java_transforms(exp))
            report(checks, prism, "GenerateSequence + JavaExternalTransform(Count) + explode "
                   "schema transform", state, error, secs, state == "DONE")

            state, error, secs = run(endpoint, "xlang-docker", python_only,
                                     ("--environment_type=DOCKER",), wait_s=60)
            report(checks, prism, "a Docker environment", state, error, secs,
                   state == "REFUSED" and "Docker" in error and "LOOPBACK" in error
                   and "expansion_service.sh" in error)

            missing = "/nonexistent/sundial-xlang-boot"
            state, error, secs = run(endpoint, "xlang-missing-command", python_only,
                                     ("--environment_type=PROCESS",
                                      '--environment_config={"command": "%s"}' % missing),
                                     wait_s=60)
            report(checks, prism, "a PROCESS command that does not exist", state, error, secs,
                   state == "REFUSED" and ('"%s" does not exist' % missing) in error)

        bad = dict(os.environ, SUNDIAL_JAVA_WORKER_OPTS=BAD_JVM_OPTION)
        with server(bad) as endpoint:
            state, error, secs = run(endpoint, "xlang-worker-cannot-start", sequence_only(exp),
                                     wait_s=60)
            report(checks, prism, "a Java worker that cannot start (JVM option %s)"
                   % BAD_JVM_OPTION, state, error, secs,
                   state == "FAILED" and "its stderr ended with" in error
                   and "Unrecognized VM option" in error)
    finally:
        es.terminate()
        try:
            es.wait(timeout=15)
        except subprocess.TimeoutExpired:
            es.kill()
            es.wait()
    print("xlang: %s: %.1f s in all" % (runner, time.time() - t0))
    if prism:
        return 0
    return checks.finish()


def report(checks, prism, what, state, error, secs, ok):
    short = " ".join(error.split())[:600]
    if prism:
        print("prism: %-60s %-8s %6.1f s  %s" % (what, state, secs, short), flush=True)
        return
    checks.check(ok, "%s: %s in %.1f s%s" % (what, state, secs, (": " + short) if short else ""))


class serve_with_env:
    """sundial serve --port 0 with an environment of its own (inherited by its workers)."""

    def __init__(self, sundial, env):
        self.proc = subprocess.Popen([sundial, "serve", "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)

    def __enter__(self):
        first = self.proc.stdout.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        if m is None:
            raise RuntimeError("sundial serve did not say where it listens: %r" % first)
        return m.group(1)

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    sys.exit(main())
