"""web_job.py ENDPOINT [NAME [EXPECT]] - a long-running streaming job for the web UI tests.

Submits, with Beam's Python SDK (PortableRunner, LOOPBACK: the SDK worker runs in this
process), a pipeline whose time moves visibly and slowly:

    Clicks (TestStream: per event one click, a watermark step and 30 s of processing time)
      -> SlowScore (sleeps 0.25 s per element)
      -> PerMinute (fixed one-minute windows) -> SumPerUser (GroupByKey + sum) -> Format

It runs for about a minute unless cancelled or drained. Prints "JOB <id>" once the job is
submitted, "OUT <user>: <sum>" for each result (the SDK worker runs in this process) and
"FINAL <state>" when it ends; exits 0 when the job ended in state EXPECT (default CANCELLED:
what the tests do to it), 1 otherwise.
"""
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window
from apache_beam.transforms.window import TimestampedValue

EVENTS = 200
FORMAT_LABEL = 'Format <img src=x onerror="window.__xss=1">'


class SlowScore(beam.DoFn):
    def process(self, click):
        time.sleep(0.25)
        yield (click[0], 1)


def main():
    endpoint = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else "web-ui-demo"
    expect = sys.argv[3] if len(sys.argv) > 3 else "CANCELLED"
    stream = TestStream().advance_watermark_to(0)
    for i in range(EVENTS):
        user = "user%d" % (i % 3)
        stream = (stream.add_elements([TimestampedValue((user, i // 3), i * 10)])
                  .advance_watermark_to(i * 10 + 5)
                  .advance_processing_time(30))
    stream = stream.advance_watermark_to_infinity()
    options = PipelineOptions([
        "--runner=PortableRunner",
        "--job_endpoint=" + endpoint,
        "--environment_type=LOOPBACK",
        "--streaming",
        "--job_name=" + name,
    ])
    p = beam.Pipeline(options=options)
    (p
     | "Clicks" >> stream
     | "SlowScore" >> beam.ParDo(SlowScore())
     | "PerMinute" >> beam.WindowInto(window.FixedWindows(60))
     | "SumPerUser" >> beam.CombinePerKey(sum)
     # A label with markup in it: the web UI must show it as text (tests check no script runs).
     | FORMAT_LABEL >> beam.Map(lambda kv: "%s: %d" % kv)
     | "Print" >> beam.Map(lambda line: print("OUT", line, flush=True)))
    result = p.run()
    print("JOB", result._job_id, flush=True)
    try:
        result.wait_until_finish()
    except RuntimeError as e:  # the SDK raises for every end but DONE
        print("ENDED", e, flush=True)
    state = str(result.state)
    print("FINAL", state, flush=True)
    return 0 if state.endswith(expect) else 1


if __name__ == "__main__":
    sys.exit(main())
