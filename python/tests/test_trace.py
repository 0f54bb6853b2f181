"""sundial_beam.fetch_trace: a job's time trace after run(), as docs/python.md shows it."""

from typing import Any, Dict, List

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing import test_stream
from apache_beam.transforms import window

import sundial_beam


def _run_windowed_job() -> List[Dict[str, Any]]:
    options = PipelineOptions(["--runner=SundialRunner"])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=options)
    events = (test_stream.TestStream()
              .add_elements([beam.window.TimestampedValue(("a", 1), 1),
                             beam.window.TimestampedValue(("b", 2), 2)])
              .advance_watermark_to(10)
              .add_elements([beam.window.TimestampedValue(("a", 3), 12)])
              .advance_watermark_to_infinity())
    _ = (p | events | beam.WindowInto(window.FixedWindows(10)) | beam.GroupByKey()
         | beam.MapTuple(lambda k, vs: (k, sum(vs))))
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    return sundial_beam.fetch_trace(result)


def test_fetch_trace_after_run() -> None:
    records = _run_windowed_job()
    kinds = [r["kind"] for r in records]
    assert records and all("wall" not in r for r in records)
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)
    assert kinds.count("teststream") >= 3, kinds
    panes = [r for r in records if r["kind"] == "pane"]
    # a and b in [0, 10 s), a in [10 s, 20 s): one on-time pane each
    assert sorted((r["window"]["start"], r["cause"]) for r in panes) == [
        (0, "on_time"), (0, "on_time"), (10000, "on_time")], panes
    assert "wm_out" in kinds


def test_two_runs_give_the_same_trace() -> None:
    assert _run_windowed_job() == _run_windowed_job()
