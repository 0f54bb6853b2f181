"""pytest --sundial: pipelines that name no runner, and TestPipeline's, run on Sundial."""

import json
from pathlib import Path
from typing import Any, Dict

import pytest

INNER = '''
import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to


def test_no_runner():
    with beam.Pipeline() as p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x + 1), equal_to([2, 3]))


def test_test_pipeline():
    with TestPipeline() as p:
        assert_that(p | beam.Create(["x"]), equal_to(["x"]))


def test_integration():
    # Beam skips these unless --test-pipeline-options name a runner.
    with TestPipeline(is_integration_test=True) as p:
        assert_that(p | beam.Create(["y"]), equal_to(["y"]))
'''


def _run(pytester: pytest.Pytester, *args: str, passed: int, skipped: int,
         failed: int = 0) -> Dict[str, Any]:
    pytester.makepyfile(test_inner=INNER)
    report = Path(pytester.path) / "report.json"
    result = pytester.runpytest_subprocess("-p", "sundial_beam.pytest_plugin",
                                           f"--sundial-report={report}", *args)
    result.assert_outcomes(passed=passed, skipped=skipped, failed=failed)
    if not report.exists():
        return {}
    got: Dict[str, Any] = json.loads(report.read_text())
    return got


def test_flag_runs_everything_on_sundial(pytester: pytest.Pytester) -> None:
    # As without --sundial, the integration test is skipped (no test pipeline options).
    got = _run(pytester, "--sundial", passed=2, skipped=1)
    assert [j["state"] for j in got["jobs"]] == ["DONE"] * 2, got
    # Both named no runner, the TestPipeline too: Beam's DirectRunner sent them to Sundial.
    assert got["redirected"] == 2


def test_test_pipeline_options_keep_working(pytester: pytest.Pytester) -> None:
    # An option the runner refuses, given through --test-pipeline-options, fails the two
    # TestPipeline jobs on Sundial (they name no runner: DirectRunner, redirected).
    got = _run(pytester, "--sundial", "--test-pipeline-options=--sundial_livelock_rounds=-1",
               passed=1, skipped=0, failed=2)
    assert sorted(j["state"] for j in got["jobs"]) == ["DONE", "FAILED", "FAILED"], got
    assert got["redirected"] == 3


def test_ini_setting(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nsundial = true\n")
    got = _run(pytester, passed=2, skipped=1)
    assert [j["state"] for j in got["jobs"]] == ["DONE"] * 2, got


def test_off_by_default(pytester: pytest.Pytester) -> None:
    assert _run(pytester, passed=2, skipped=1) == {}
