#
# tools/bench_python.py - what a Beam Python user waits for, on Sundial, on Prism and on the
# SDK's in-process FnApiRunner, side by side in one run (run it with tools/bench_python.sh).
# Sundial and Prism are reached as users reach them: `--runner=PrismRunner
# --prism_location=BIN` (the SDK starts the binary itself and keeps it for the process).
#
#   first_pipeline  a fresh Python process per round and runner (apache_beam already
#                   imported): the first `with TestPipeline(...)` block (a Create of three
#                   elements, a Map and assert_that), which includes starting the runner, then
#                   a second block in the same process;
#   pytest_5        `python -m pytest` on a file of five small pipeline tests (Map, FlatMap and
#                   CombinePerKey, GroupByKey, a side input, fixed windows), the whole process's
#                   wall time, as a user runs a test file;
#   wordcount       100,000 generated lines (Create -> FlatMap -> CombinePerKey(sum)), counts
#                   checked in the pipeline; one process, the runner already started (a warm-up
#                   pipeline first).
#
# Rounds are interleaved (sundial, prism, fnapi, sundial, ...); each figure is printed with its
# min and median, and `ratio NAME sundial/X R` lines compare medians. BENCH_BEFORE=BIN adds a
# column "before" for a second Sundial binary (an older build), measured in the same rounds.
# BENCH_ROUNDS (default 5; wordcount uses 3), BENCH_LINES (100000), BENCH_ONLY (a comma list of
# first_pipeline, pytest_5, wordcount).
#
# The child modes (`--child first KIND BIN`) are this script run by itself.
#
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

WORD_RE = re.compile(r"[a-z']+")
VOCAB = ("the quick brown fox jumps over lazy dog a is and sleeps runs far near red blue "
         "green stone river cloud apple night day time beam sun dial clock").split()

PYTEST_FILE = '''
import os
import shlex

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window


def pipeline():
  return TestPipeline(options=PipelineOptions(shlex.split(os.environ["BENCH_PIPELINE_ARGS"])))


def test_map():
  with pipeline() as p:
    assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 10), equal_to([10, 20, 30]))


def test_count_words():
  with pipeline() as p:
    counts = (p | beam.Create(["a b", "b c c"]) | beam.FlatMap(str.split)
              | beam.Map(lambda w: (w, 1)) | beam.CombinePerKey(sum))
    assert_that(counts, equal_to([("a", 1), ("b", 2), ("c", 2)]))


def test_group_by_key():
  with pipeline() as p:
    grouped = (p | beam.Create([("k", 1), ("k", 2), ("j", 3)]) | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
    assert_that(grouped, equal_to([("k", [1, 2]), ("j", [3])]))


def test_side_input():
  with pipeline() as p:
    side = p | "Side" >> beam.Create([100])
    out = (p | "Main" >> beam.Create([1, 2])
           | beam.Map(lambda x, s: x + s, s=beam.pvalue.AsSingleton(side)))
    assert_that(out, equal_to([101, 102]))


def test_fixed_windows():
  with pipeline() as p:
    sums = (p | beam.Create([1, 2, 11, 12, 13])
            | beam.Map(lambda t: window.TimestampedValue(("k", t), t))
            | beam.WindowInto(window.FixedWindows(10)) | beam.CombinePerKey(sum)
            | beam.MapTuple(lambda k, v: v))
    assert_that(sums, equal_to([3, 36]))
'''


def runner_args(kind, binary):
  if kind == "fnapi":
    return ["--runner=FnApiRunner"]
  return ["--runner=PrismRunner", "--prism_location=" + binary]


def child_first(kind, binary):
  """One fresh process: the first and the second TestPipeline block, in seconds."""
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions
  from apache_beam.testing.test_pipeline import TestPipeline
  from apache_beam.testing.util import assert_that, equal_to
  times = []
  for _ in range(2):
    t0 = time.perf_counter()
    with TestPipeline(options=PipelineOptions(runner_args(kind, binary))) as p:
      assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x + 1), equal_to([2, 3, 4]))
    times.append(time.perf_counter() - t0)
  print("BENCH %.6f %.6f" % tuple(times))


def make_lines(n):
  out = []
  x = 12345
  for _ in range(n):
    words = []
    for _ in range(8):
      x = (x * 1103515245 + 12345) & 0x7fffffff
      words.append(VOCAB[x % len(VOCAB)])
    out.append(" ".join(words))
  return out


def report(name, kinds, times, unit="s"):
  for k in kinds:
    print("%-16s %-8s min %8.3f %s  median %8.3f %s  (%d rounds)" % (
        name, k, min(times[k]), unit, statistics.median(times[k]), unit, len(times[k])))
  for k in kinds:
    if k != "sundial":
      print("ratio %s sundial/%s %.2f" % (
          name, k, statistics.median(times["sundial"]) / statistics.median(times[k])))
  sys.stdout.flush()


def bench_first(kinds, bins, rounds):
  first = {k: [] for k in kinds}
  second = {k: [] for k in kinds}
  env = dict(os.environ)
  for _ in range(rounds):
    for k in kinds:
      out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "first", k,
                            bins.get(k, "")], env=env, check=True, capture_output=True,
                           text=True).stdout
      line = [l for l in out.splitlines() if l.startswith("BENCH ")][-1].split()
      first[k].append(float(line[1]))
      second[k].append(float(line[2]))
  report("first_pipeline", kinds, first)
  report("second_pipeline", kinds, second)


def bench_pytest(kinds, bins, rounds):
  times = {k: [] for k in kinds}
  with tempfile.TemporaryDirectory(prefix="bench-pytest-") as d:
    path = os.path.join(d, "test_small_pipelines.py")
    with open(path, "w") as f:
      f.write(PYTEST_FILE)
    for _ in range(rounds):
      for k in kinds:
        env = dict(os.environ)
        env["BENCH_PIPELINE_ARGS"] = " ".join(runner_args(k, bins.get(k, "")))
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-p", "no:randomly", path], cwd=d, env=env, capture_output=True,
                           text=True)
        times[k].append(time.perf_counter() - t0)
        if r.returncode != 0 or "5 passed" not in r.stdout:
          sys.exit("bench_python: pytest_5 on %s failed:\n%s%s" % (k, r.stdout, r.stderr))
  report("pytest_5", kinds, times)


def bench_wordcount(kinds, bins, rounds, n_lines):
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions
  from apache_beam.testing.util import assert_that, equal_to
  lines = make_lines(n_lines)
  c = collections.Counter()
  for line in lines:
    c.update(WORD_RE.findall(line))
  want = sorted(c.items())

  def wordcount(k, data, expect):
    with beam.Pipeline(options=PipelineOptions(runner_args(k, bins.get(k, "")))) as p:
      counts = (p | beam.Create(data, reshuffle=False) | beam.FlatMap(WORD_RE.findall)
                | beam.Map(lambda w: (w, 1)) | beam.CombinePerKey(sum))
      assert_that(counts, equal_to(expect))

  for k in kinds:  # start each runner once (the SDK keeps it)
    wordcount(k, ["a b a"], [("a", 2), ("b", 1)])
  times = {k: [] for k in kinds}
  for _ in range(rounds):
    for k in kinds:
      t0 = time.perf_counter()
      wordcount(k, lines, want)
      times[k].append(time.perf_counter() - t0)
  report("wordcount_%dk" % (n_lines // 1000), kinds, times)


def main():
  if len(sys.argv) >= 3 and sys.argv[1] == "--child":
    if sys.argv[2] == "first":
      child_first(sys.argv[3], sys.argv[4])
      return
    sys.exit("bench_python: unknown child mode %s" % sys.argv[2])
  sundial, prism = sys.argv[1], sys.argv[2]
  rounds = int(os.environ.get("BENCH_ROUNDS", "5"))
  n_lines = int(os.environ.get("BENCH_LINES", "100000"))
  only = os.environ.get("BENCH_ONLY", "first_pipeline,pytest_5,wordcount").split(",")
  bins = {"sundial": sundial}
  kinds = ["sundial"]
  before = os.environ.get("BENCH_BEFORE", "")
  if before:
    bins["before"] = before
    kinds.append("before")
  if prism and os.path.exists(prism):
    bins["prism"] = prism
    kinds.append("prism")
  else:
    print("bench_python: no Prism binary (%s): its column is left out" % prism)
  kinds.append("fnapi")
  print("bench_python: runners %s; %s" % (
      ", ".join("%s=%s" % (k, bins.get(k, "in-process")) for k in kinds),
      "load average %.1f %.1f %.1f" % os.getloadavg()))
  if "first_pipeline" in only:
    bench_first(kinds, bins, rounds)
  if "pytest_5" in only:
    bench_pytest(kinds, bins, rounds)
  if "wordcount" in only:
    bench_wordcount(kinds, bins, min(rounds, 3), n_lines)


if __name__ == "__main__":
  main()
