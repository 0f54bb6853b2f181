#
# tools/bench_python.py - Beam Python pipelines on Sundial, on Prism and on the SDK's
# in-process FnApiRunner, side by side in one run (run it with tools/bench_python.sh).
#
#   wordcount  100,000 generated lines (Create -> FlatMap -> CombinePerKey(sum)), the counts
#              checked in the pipeline against the ones computed here (assert_that);
#   oneelement one element through a Map: Run -> DONE as the SDK sees it.
#
# Sundial and Prism each run as a job server started once (`--job_port PORT`), reached with
# PortableRunner and LOOPBACK workers, so the figures are the runner's own cost, not process
# start-up. Rounds are interleaved (sundial, prism, fnapi, sundial, ...); each prints min and
# median, and the last lines are `ratio NAME X` (Sundial / baseline, by median).
#
import collections
import os
import re
import socket
import statistics
import subprocess
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

WORD_RE = re.compile(r"[a-z']+")
VOCAB = ("the quick brown fox jumps over lazy dog a is and sleeps runs far near red blue "
         "green stone river cloud apple night day time beam sun dial clock").split()


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


def free_port():
  s = socket.socket()
  s.bind(("127.0.0.1", 0))
  port = s.getsockname()[1]
  s.close()
  return port


def start_server(binary):
  port = free_port()
  proc = subprocess.Popen([binary, "--job_port", str(port), "--serve_http", "False"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 30
  while time.time() < deadline:
    try:
      socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
      return proc, "localhost:%d" % port
    except OSError:
      time.sleep(0.1)
  proc.kill()
  raise RuntimeError("%s did not listen on %d" % (binary, port))


def options_for(kind, endpoint):
  if kind == "fnapi":
    return PipelineOptions(["--runner=FnApiRunner"])
  return PipelineOptions(["--runner=PortableRunner", "--job_endpoint=" + endpoint,
                          "--environment_type=LOOPBACK"])


def wordcount(options, lines, want):
  with beam.Pipeline(options=options) as p:
    counts = (p | beam.Create(lines, reshuffle=False)
              | beam.FlatMap(WORD_RE.findall)
              | beam.Map(lambda w: (w, 1))
              | beam.CombinePerKey(sum))
    assert_that(counts, equal_to(want))


def one_element(options, _lines, _want):
  with beam.Pipeline(options=options) as p:
    assert_that(p | beam.Create([1]) | beam.Map(lambda x: x + 1), equal_to([2]))


def main():
  sundial, prism = sys.argv[1], sys.argv[2]
  rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
  n_lines = int(os.environ.get("BENCH_LINES", "100000"))
  lines = make_lines(n_lines)
  c = collections.Counter()
  for line in lines:
    c.update(WORD_RE.findall(line))
  want = sorted(c.items())
  servers = {}
  kinds = ["sundial", "fnapi"]
  servers["sundial"] = start_server(sundial)
  if prism and os.path.exists(prism):
    servers["prism"] = start_server(prism)
    kinds = ["sundial", "prism", "fnapi"]
  else:
    print("bench_python: no Prism binary (%s): its column is left out" % prism)
  try:
    for name, fn in (("wordcount_%dk" % (n_lines // 1000), wordcount),
                     ("one_element", one_element)):
      times = {k: [] for k in kinds}
      for r in range(rounds):
        for k in kinds:
          ep = servers[k][1] if k in servers else None
          t0 = time.perf_counter()
          fn(options_for(k, ep), lines, want)
          times[k].append(time.perf_counter() - t0)
      for k in kinds:
        print("%-14s %-8s min %8.3f s  median %8.3f s  (%d rounds, result checked)" % (
            name, k, min(times[k]), statistics.median(times[k]), rounds))
      for k in kinds[1:]:
        print("ratio %s_sundial/%s %.2f" % (
            name, k, statistics.median(times["sundial"]) / statistics.median(times[k])))
  finally:
    for proc, _ in servers.values():
      proc.terminate()
      proc.wait(timeout=10)


if __name__ == "__main__":
  main()
