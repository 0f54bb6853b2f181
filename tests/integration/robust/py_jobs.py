#
# py_jobs.py - N Beam Python jobs at once against one job server, for faults.sh (load_mixed).
#
#   python py_jobs.py ENDPOINT N
#
# Every job is submitted (PortableRunner, LOOPBACK workers in this process) before any is
# waited for. Job j is Create(1..20+j) -> Map to "pyJ:i:i*i" -> assert_that(equal_to(the exact
# strings)): the in-pipeline assertion fails the job on a wrong answer. Prints "JOB pyJ STATE"
# per job and exits 0 only when every one ended DONE.
#
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to


def square_line(tag):
  return lambda i: "%s:%d:%d" % (tag, i, i * i)


def main():
  if len(sys.argv) != 3:
    print("usage: py_jobs.py ENDPOINT N", file=sys.stderr)
    return 2
  endpoint, n = sys.argv[1], int(sys.argv[2])
  opts = PipelineOptions([
      "--runner=PortableRunner",
      "--job_endpoint=" + endpoint,
      "--environment_type=LOOPBACK",
  ])
  runs = []
  for j in range(n):
    tag = "py%d" % j
    values = list(range(1, 21 + j))
    p = beam.Pipeline(options=opts)
    out = p | "Values" >> beam.Create(values) | "Square" >> beam.Map(square_line(tag))
    assert_that(out, equal_to([square_line(tag)(i) for i in values]))
    runs.append((tag, p.run()))
  ok = True
  for tag, result in runs:
    try:
      state = result.wait_until_finish()
    except Exception as e:  # a failed job raises; report it as that job's state
      state = "FAILED (%s)" % str(e).splitlines()[0][:200]
    print("JOB %s %s" % (tag, state), flush=True)
    ok = ok and state == "DONE"
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
