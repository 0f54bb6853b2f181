"""schedule_check.py SUNDIAL WORKDIR - schedule recording and replay with Beam's Python SDK.

Starts `SUNDIAL serve --port 0` on loopback and runs one pipeline (PortableRunner, LOOPBACK:
the SDK worker runs in this process) whose output shows the order the runner delivered its
elements in: Create -> a stateful DoFn numbering each key's elements -> a DoFn appending each
line to a file, in processing order. With the options declared in a PipelineOptions class:

  1. recorded under sundial_schedule_seed=5, sundial_bundle_shape=one_element: DONE, and the
     schedule file is a version-1 recording of that seed and shape;
  2. replayed (sundial_replay_schedule): DONE, and the output lines are byte-identical;
  3. recorded again: the same schedule file, byte for byte;
  4. a tampered recording (one bundle digest changed): FAILED, the error names the step;
  5. `sundial serve --record-schedule-dir DIR`: a job without the options is recorded to
     DIR/<job id>.schedule;
  6. sundial_explore_seeds=2: the runner runs the job six times (seeds 1 and 2, three bundle
     shapes each) inside its one job, which ends DONE with six numbered copies of the output
     and no schedule kept; sundial_explore_seeds=zero fails naming the option.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import glob
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


def start(sundial, *flags):
    proc = subprocess.Popen([sundial, "serve", "--port", "0"] + list(flags),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    m = re.match(r"listening on (\S+)", line)
    if not m:
        proc.kill()
        raise RuntimeError("sundial serve did not start: %r" % line)
    return proc, m.group(1)


def run(beam, endpoint, out_path, extra=()):
    """Run the numbering pipeline; returns (final state, error text)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

    class SundialOptions(PipelineOptions):
        """Declared, so the portable runner sends them (it drops options it does not know)."""

        @classmethod
        def _add_argparse_args(cls, parser):
            parser.add_argument("--sundial_schedule_seed", type=str, default=None)
            parser.add_argument("--sundial_bundle_shape", type=str, default=None)
            parser.add_argument("--sundial_record_schedule", type=str, default=None)
            parser.add_argument("--sundial_replay_schedule", type=str, default=None)
            parser.add_argument("--sundial_explore_seeds", type=str, default=None)
            parser.add_argument("--sundial_explore_dir", type=str, default=None)

    class Number(beam.DoFn):
        N = ReadModifyWriteStateSpec("n", beam.coders.VarIntCoder())

        def process(self, kv, n=beam.DoFn.StateParam(N)):
            i = n.read() or 0
            n.write(i + 1)
            yield "%s#%d:%d" % (kv[0], i, kv[1])

    class Append(beam.DoFn):
        def __init__(self, path):
            self.path = path

        def process(self, line):
            with open(self.path, "a") as f:
                f.write(line + "\n")

    if os.path.exists(out_path):
        os.unlink(out_path)
    options = SundialOptions([
        "--runner=PortableRunner",
        "--job_endpoint=" + endpoint,
        "--environment_type=LOOPBACK",
        "--job_name=schedules",
    ] + list(extra))
    p = beam.Pipeline(options=options)
    (p
     | beam.Create([("k" if i % 3 else "x", i) for i in range(12)])
     | "Number" >> beam.ParDo(Number())
     | "Append" >> beam.ParDo(Append(out_path)))
    result = p.run()
    error = ""
    try:
        result.wait_until_finish(duration=120000)
    except RuntimeError as e:  # the SDK raises for every end but DONE
        error = str(e)
    return str(result.state), error


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    sundial, work = sys.argv[1], sys.argv[2]
    try:
        import apache_beam as beam
    except ImportError as e:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh): %s" % e)
        return 77
    os.makedirs(work, exist_ok=True)
    rec_a = os.path.join(work, "a.schedule")
    rec_b = os.path.join(work, "b.schedule")
    tampered = os.path.join(work, "tampered.schedule")
    out = os.path.join(work, "out.txt")
    seeded = ["--sundial_schedule_seed=5", "--sundial_bundle_shape=one_element"]
    proc, endpoint = start(sundial)
    try:
        state, err = run(beam, endpoint, out, seeded + ["--sundial_record_schedule=" + rec_a])
        check(state == "DONE", "recorded run is DONE (%s %s)" % (state, err[:300]))
        out_a = read(out)
        got = sorted(out_a.decode().split())
        want = sorted(["k#%d" % i for i in range(8)] + ["x#%d" % i for i in range(4)])
        vals = sorted(int(l.split(":")[1]) for l in got)
        check(sorted(l.split(":")[0] for l in got) == want and vals == list(range(12)),
              "12 lines, each key numbered 0.. in delivery order: %r" % out_a)
        sched = read(rec_a).decode()
        check(sched.startswith("sundial-schedule v1\nseed 5\nshape one_element\n"),
              "the recording's header names the seed and shape")
        check(len(re.findall(r"^step \d+ bundle ", sched, re.M)) >= 12,
              "one bundle per element is recorded")

        state, err = run(beam, endpoint, out, ["--sundial_replay_schedule=" + rec_a])
        check(state == "DONE", "replayed run is DONE (%s %s)" % (state, err[:300]))
        # Each line says which element of its key it was, so the lines are the delivery order.
        # The order in which the file gets them is not: the SDK runs the bundles of a wave
        # (up to four in flight) on threads of its own, so their appends interleave by real
        # time. What the runner receives is checked by the replay itself (every commit step
        # holds a digest of the bundle's output bytes).
        check(sorted(read(out).split(b"\n")) == sorted(out_a.split(b"\n")),
              "the replay's output is byte-identical, line for line")

        state, err = run(beam, endpoint, out, seeded + ["--sundial_record_schedule=" + rec_b])
        check(state == "DONE" and read(rec_b) == read(rec_a),
              "recording again gives the same schedule file, byte for byte")

        lines = sched.split("\n")
        k = [i for i, l in enumerate(lines) if " bundle " in l][3]
        step = int(lines[k].split()[1])
        lines[k] = lines[k][:-1] + ("0" if lines[k][-1] != "0" else "1")
        with open(tampered, "w") as f:
            f.write("\n".join(lines))
        state, err = run(beam, endpoint, out, ["--sundial_replay_schedule=" + tampered])
        check(state == "FAILED" and
              ("schedule replay diverged at step %d (" % step) in err,
              "a tampered recording fails naming step %d: %s" % (step, err[:400]))

        edir = os.path.join(work, "explore")
        os.makedirs(edir, exist_ok=True)
        for f in glob.glob(os.path.join(edir, "*")):
            os.unlink(f)
        state, err = run(beam, endpoint, out, ["--sundial_explore_seeds=2",
                                               "--sundial_explore_dir=" + edir])
        got = read(out).decode().split()
        # Each run numbers each key's elements in its own delivery order (seeds and shapes
        # differ), so across the six runs: every label six times, every value six times.
        labels = sorted(l.split(":")[0] for l in got)
        values = sorted(int(l.split(":")[1]) for l in got)
        check(state == "DONE" and labels == sorted(want * 6) and
              values == sorted(list(range(12)) * 6) and not os.listdir(edir),
              "exploring two seeds runs the job six times, DONE, nothing kept (%s %s, %d lines)"
              % (state, err[:300], len(got)))
        state, err = run(beam, endpoint, out, ["--sundial_explore_seeds=zero"])
        check(state == "FAILED" and "sundial_explore_seeds:v1: expected a number of seeds" in err,
              "a bad sundial_explore_seeds is refused by name: %s" % err[:300])
    finally:
        proc.terminate()
        proc.wait()

    rdir = os.path.join(work, "recorded")
    os.makedirs(rdir, exist_ok=True)
    for f in glob.glob(os.path.join(rdir, "*.schedule")):
        os.unlink(f)
    proc, endpoint = start(sundial, "--record-schedule-dir", rdir)
    try:
        state, err = run(beam, endpoint, out)
        files = glob.glob(os.path.join(rdir, "*.schedule"))
        check(state == "DONE" and len(files) == 1 and
              read(files[0]).startswith(b"sundial-schedule v1\nseed 0\nshape greedy\n"),
              "sundial serve --record-schedule-dir records a job: %s" % files)
    finally:
        proc.terminate()
        proc.wait()
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all schedule checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
