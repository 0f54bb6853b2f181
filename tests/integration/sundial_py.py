"""sundial_py.py - what the Python end-to-end checks share: a Sundial server on loopback, Beam
pipelines run on it through the PortableRunner (LOOPBACK: the SDK worker runs in the checking
process), and the ok/FAIL lines every check prints.

    from sundial_py import Checks, serve, run_pipeline

    checks = Checks()
    with serve(sundial_binary) as endpoint:       # `sundial serve --port 0`, stopped on exit
        state, error = run_pipeline(endpoint, "name", build)   # build(p) adds the transforms
        checks.check(state == "DONE", "what was checked (%s %s)" % (state, error))
    return checks.finish()                         # prints "N passed, N failed"; exit status

Only the standard library is imported here; Beam is imported by the functions that need it, so
a check can still say NOT RUN (exit 77) when Beam is missing.
"""
import contextlib
import queue
import re
import socket
import subprocess


class Checks:
    """Counts and prints each check's outcome."""

    def __init__(self):
        self.passes = []
        self.failures = []

    def check(self, cond, what):
        print(("ok:   " if cond else "FAIL: ") + what, flush=True)
        (self.passes if cond else self.failures).append(what)
        return cond

    def finish(self):
        """Print the closing count; the process's exit status (0 when nothing failed)."""
        print("%d passed, %d failed" % (len(self.passes), len(self.failures)))
        return 1 if self.failures else 0


@contextlib.contextmanager
def serve(sundial, flags=()):
    """Run `sundial serve --port 0 [flags]` on loopback; yields its HOST:PORT."""
    proc = subprocess.Popen([sundial, "serve", "--port", "0"] + list(flags),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first = proc.stdout.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        if m is None:
            raise RuntimeError("sundial serve did not say where it listens: %r" % first)
        yield m.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def serve_web(sundial, flags=()):
    """`sundial serve --port 0 --web_port 0 [flags]` on loopback; yields (HOST:PORT of the job
    service, the web UI's http://HOST:PORT/)."""
    proc = subprocess.Popen([sundial, "serve", "--port", "0", "--web_port", "0"] + list(flags),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first, second = proc.stdout.readline(), proc.stdout.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", first)
        w = re.search(r"web ui on (http://\S+)", second)
        if m is None or w is None:
            raise RuntimeError("sundial serve did not say where it listens: %r %r"
                               % (first, second))
        yield m.group(1), w.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sundial_options(endpoint, name, extra=(), streaming=False):
    """PortableRunner options for a LOOPBACK job on endpoint. Sundial's own options
    (--sundial_schedule_seed, --sundial_bundle_shape, --sundial_clock, ...) are declared, so
    Beam sends them (it drops options no PipelineOptions class declares)."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    class SundialOptions(PipelineOptions):
        @classmethod
        def _add_argparse_args(cls, parser):
            parser.add_argument("--sundial_schedule_seed", type=int, default=None)
            parser.add_argument("--sundial_bundle_shape", type=str, default=None)
            parser.add_argument("--sundial_clock", type=str, default=None)

    opts = SundialOptions(["--runner=PortableRunner", "--job_endpoint=" + endpoint,
                           "--environment_type=LOOPBACK", "--job_name=" + name] + list(extra))
    opts.view_as(StandardOptions).streaming = streaming
    return opts


def run_pipeline(endpoint, name, build, extra=(), streaming=False, timeout_ms=120000):
    """Build a pipeline with build(p), run it to its end; (state, error text)."""
    import apache_beam as beam

    p = beam.Pipeline(options=sundial_options(endpoint, name, extra, streaming))
    build(p)
    try:
        result = p.run()
        result.wait_until_finish(duration=timeout_ms)
        return str(result.state), ""
    except Exception as e:  # the SDK raises for every end but DONE
        return "FAILED", str(e)


END = object()


class QueueReader:
    """What Beam's TestStreamServiceController reads: read_multiple() yields
    TestStreamPayload.Event protos; here, whatever a check puts on the queue, until END."""

    def __init__(self):
        self.q = queue.Queue()

    def read_multiple(self, labels):
        while True:
            e = self.q.get()
            if e is END:
                return
            yield e


def free_port():
    """A loopback port nothing listens on now (for a service the check starts itself)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
