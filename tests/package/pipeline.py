"""Run inside the clean Debian 12 root by package_test.sh, with only the wheel and apache-beam
installed: a TestStream and a processing-time timer on the bundled Sundial, no
--prism_location. Prints "wheel pipeline: OK" and the job list when the result is right."""

import sys

import apache_beam as beam
from apache_beam.coders import StrUtf8Coder, VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (BagStateSpec, TimerSpec, on_timer)
from apache_beam.utils.timestamp import Duration, Timestamp

import sundial_beam
from sundial_beam.pytest_plugin import sundial_jobs
from sundial_beam.runner import started_endpoints

HOUR = Duration(seconds=3600)


class BufferForAnHour(beam.DoFn):
    """Holds a key's values and emits their sum one hour of processing time after the first."""
    BUF = BagStateSpec("buf", VarIntCoder())
    FLUSH = TimerSpec("flush", TimeDomain.REAL_TIME)

    def process(self, kv, buf=beam.DoFn.StateParam(BUF), flush=beam.DoFn.TimerParam(FLUSH)):
        if not list(buf.read()):
            flush.set(Timestamp.now() + HOUR)
        buf.add(kv[1])

    @on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, buf=beam.DoFn.StateParam(BUF)):
        total = sum(buf.read())
        buf.clear()
        yield f"{key}={total}"


def main() -> int:
    opts = PipelineOptions(["--runner=SundialRunner"])
    opts.view_as(StandardOptions).streaming = True
    stream = (TestStream(coder=StrUtf8Coder()).add_elements(["a", "b", "a"])
              .advance_processing_time(2 * 3600)
              .add_elements(["b"]).advance_processing_time(2 * 3600)
              .advance_watermark_to_infinity())
    with beam.Pipeline(options=opts) as p:
        out = (p | stream | beam.Map(lambda w: (w, 1)) | beam.ParDo(BufferForAnHour()))
        assert_that(out, equal_to(["a=2", "b=1", "b=1"]))
    endpoints = started_endpoints()
    assert len(endpoints) == 1, endpoints
    jobs = sundial_jobs(endpoints[0])
    print(f"sundial_beam {sundial_beam.__version__}, binary {sundial_beam.binary_path()}")
    print("job list:", jobs)
    assert [j["state"] for j in jobs] == ["DONE"], jobs
    print("wheel pipeline: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
