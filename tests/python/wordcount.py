#
# Sundial: a plain Beam Python word count that checks its own result.
#
#   python wordcount.py --runner=PrismRunner --prism_location=BUILD/bin/sundial
#   python wordcount.py --runner=PortableRunner --job_endpoint=localhost:PORT \
#       --environment_type=LOOPBACK
#
# Counts the words of a small generated text (Create -> FlatMap -> CombinePerKey) and checks
# the counts with assert_that, so the job fails on the runner if the result is wrong. Prints
# "wordcount: ok (N distinct words)" when the pipeline finished in state DONE.
#
"""A self-checking word count for running Beam Python on Sundial."""

import collections
import re
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

LINES = [
    'the quick brown fox jumps over the lazy dog',
    'the dog sleeps',
    'a fox is quick and a dog is lazy',
] * 50


def expected_counts():
  c = collections.Counter()
  for line in LINES:
    c.update(re.findall(r"[a-z']+", line))
  return sorted(c.items())


def main(argv):
  options = PipelineOptions(argv)
  want = expected_counts()
  with beam.Pipeline(options=options) as p:
    counts = (
        p
        | 'Lines' >> beam.Create(LINES)
        | 'Words' >> beam.FlatMap(lambda line: re.findall(r"[a-z']+", line))
        | 'Pair' >> beam.Map(lambda w: (w, 1))
        | 'Count' >> beam.CombinePerKey(sum))
    assert_that(counts, equal_to(want))
  result = p.result
  state = result.state
  if state != 'DONE':
    print('wordcount: FAIL: final state %s' % state)
    return 1
  print('wordcount: ok (%d distinct words)' % len(want))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
