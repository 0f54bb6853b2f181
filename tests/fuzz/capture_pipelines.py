#
# Sundial: small Beam Python pipelines whose traffic seeds the fuzz targets.
#
#   python capture_pipelines.py NAME --runner=PortableRunner --job_endpoint=localhost:PORT \
#       --environment_type=LOOPBACK
#
# NAME picks one pipeline: teststream (TestStream with elements, watermarks and processing
# time into fixed windows and a GroupByKey), state (a stateful DoFn with bag and read-modify-write
# state and an event-time timer), sideinput (list, dict and singleton side inputs) or
# combine (CombineGlobally and CombinePerKey with lifted combiners, and a Flatten). Each
# checks its result with assert_that, so a wrong answer fails the job. Used by
# tests/fuzz/capture.sh; the messages they make are what the fuzz seeds are cut from.
#
"""Pipelines that exercise TestStream, user state, timers and side inputs on a runner."""

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate, window
from apache_beam.coders import VarIntCoder


def teststream(p):
  stream = (TestStream()
            .advance_watermark_to(0)
            .add_elements([window.TimestampedValue(('a', 1), 1),
                           window.TimestampedValue(('b', 2), 2)])
            .advance_processing_time(5)
            .add_elements([window.TimestampedValue(('a', 3), 12)])
            .advance_watermark_to(20)
            .add_elements([window.TimestampedValue(('a', 4), 3)])
            .advance_watermark_to_infinity())
  out = (p | stream
         | beam.WindowInto(window.FixedWindows(10))
         | beam.GroupByKey()
         | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
  assert_that(out, equal_to([('a', [1]), ('b', [2]), ('a', [3])]))


class Buffer(beam.DoFn):
  BAG = userstate.BagStateSpec('bag', VarIntCoder())
  SUM = userstate.ReadModifyWriteStateSpec('sum', VarIntCoder())
  FLUSH = userstate.TimerSpec('flush', userstate.TimeDomain.WATERMARK)

  def process(self, kv, ts=beam.DoFn.TimestampParam, bag=beam.DoFn.StateParam(BAG),
              total=beam.DoFn.StateParam(SUM), flush=beam.DoFn.TimerParam(FLUSH)):
    bag.add(kv[1])
    total.write((total.read() or 0) + kv[1])
    flush.set(ts + 100)

  @userstate.on_timer(FLUSH)
  def on_flush(self, key=beam.DoFn.KeyParam, bag=beam.DoFn.StateParam(BAG),
               total=beam.DoFn.StateParam(SUM)):
    values = sorted(bag.read())
    bag.clear()
    yield key, values, total.read()


def state(p):
  out = (p | beam.Create([('k1', 1), ('k2', 5), ('k1', 2), ('k1', 3)])
         | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
         | beam.ParDo(Buffer()))
  assert_that(out, equal_to([('k1', [1, 2, 3], 6), ('k2', [5], 5)]))


def sideinput(p):
  main = p | 'main' >> beam.Create([1, 2, 3])
  lst = p | 'lst' >> beam.Create([10, 20])
  dct = p | 'dct' >> beam.Create([(1, 'one'), (2, 'two'), (3, 'three')])
  one = p | 'one' >> beam.Create([100])
  out = main | beam.Map(lambda x, l, d, s: (d[x], x + sum(l) + s),
                        beam.pvalue.AsList(lst), beam.pvalue.AsDict(dct),
                        beam.pvalue.AsSingleton(one))
  assert_that(out, equal_to([('one', 131), ('two', 132), ('three', 133)]))


def combine(p):
  a = p | 'a' >> beam.Create([('x', 1), ('y', 2)])
  b = p | 'b' >> beam.Create([('x', 3)])
  both = (a, b) | beam.Flatten()
  per_key = both | beam.CombinePerKey(sum)
  total = both | beam.Values() | beam.CombineGlobally(sum)
  assert_that(per_key, equal_to([('x', 4), ('y', 2)]), label='per_key')
  assert_that(total, equal_to([6]), label='total')


PIPELINES = {'teststream': teststream, 'state': state, 'sideinput': sideinput,
             'combine': combine}


def main(argv):
  name = argv[1]
  opts = PipelineOptions(argv[2:])
  if name == 'teststream':
    opts.view_as(StandardOptions).streaming = True
  with beam.Pipeline(options=opts) as p:
    PIPELINES[name](p)
  print('%s: ok' % name)


if __name__ == '__main__':
  main(sys.argv)
