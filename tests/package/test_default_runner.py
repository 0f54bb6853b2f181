"""Run with `pytest --sundial` inside the clean root: a pipeline that names no runner."""

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to


def test_no_runner_named() -> None:
    with beam.Pipeline() as p:
        assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 10),
                    equal_to([10, 20, 30]))
