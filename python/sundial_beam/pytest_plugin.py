"""The pytest plugin: ``pytest --sundial`` runs every pipeline the tests build on Sundial.

Loaded by pytest itself once the wheel is installed (entry point ``pytest11``). Off unless
``--sundial`` is given or the ini file says ``sundial = true``; then, with no change to the
tests:

* pipelines that name no runner, or Beam's ``DirectRunner`` (whose default picks Prism, or
  Python's older runners for TestStream, real-time timers and the like), run on
  ``SundialRunner``: ``DirectRunner.run_pipeline`` is redirected for the session. That
  takes in ``TestPipeline``s too, whose ``--test-pipeline-options`` name no runner, while
  those options, and what tests decide from them (Beam skips integration tests when no
  options are given), stay exactly as without ``--sundial``.

``--test-pipeline-options`` is registered here too (Beam's checkout registers it in a
conftest that the installed package does not carry), so Beam's own test modules take their
options from it as in Beam's tree. At the end the plugin asks each Sundial job server the
session started for its job list (``GetJobs``) and prints how many jobs ran and how they
ended; ``--sundial-report=FILE`` writes that list as JSON.
"""

import json
from typing import Any, Dict, List, Optional

import pytest

_state: Dict[str, Any] = {"active": False, "saved": None, "runs": 0}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sundial", "Sundial (Apache Beam runner)")
    group.addoption("--sundial", action="store_true", default=False,
                    help="run every Beam pipeline the tests build on Sundial")
    group.addoption("--sundial-report", default=None, metavar="FILE",
                    help="with --sundial: write the Sundial job list (id, name, state) to FILE")
    parser.addini("sundial", type="bool", default=False,
                  help="run every Beam pipeline the tests build on Sundial (as --sundial)")
    try:
        parser.addoption(
            "--test-pipeline-options",
            help="Options to use in test pipelines (Beam TestPipeline). NOTE: tests may "
            "ignore some or all of these options.")
    except ValueError:
        pass  # a conftest (Beam's own) or another plugin registered it first


def activate() -> None:
    """Send pipelines run by Beam's DirectRunner (the default runner) to SundialRunner."""
    if _state["active"]:
        return
    from apache_beam.runners.direct import direct_runner

    from sundial_beam.runner import SundialRunner

    def run_on_sundial(self: Any, pipeline: Any, options: Any) -> Any:
        _state["runs"] += 1
        return SundialRunner().run_pipeline(pipeline, options)

    _state["saved"] = direct_runner.SwitchingDirectRunner.run_pipeline
    direct_runner.SwitchingDirectRunner.run_pipeline = run_on_sundial
    _state["active"] = True


def deactivate() -> None:
    """Undo activate()."""
    if not _state["active"]:
        return
    from apache_beam.runners.direct import direct_runner

    direct_runner.SwitchingDirectRunner.run_pipeline = _state["saved"]
    _state["active"] = False


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("sundial") or config.getini("sundial"))


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    from apache_beam.testing.test_pipeline import TestPipeline

    if TestPipeline.pytest_test_pipeline_options is None:
        given: Optional[str] = config.getoption("test_pipeline_options", default=None)
        TestPipeline.pytest_test_pipeline_options = given or ""
    if _enabled(config):
        import sundial_beam  # noqa: F401  (registers --runner=SundialRunner)

        activate()


def pytest_unconfigure(config: pytest.Config) -> None:
    deactivate()


def sundial_jobs(endpoint: str, timeout: float = 10.0) -> List[Dict[str, str]]:
    """The job list of the job server at endpoint: id, name and state of each job."""
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
        reply = stub.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=timeout)
    return [{
        "endpoint": endpoint,
        "job_id": info.job_id,
        "job_name": info.job_name,
        "state": beam_job_api_pb2.JobState.Enum.Name(info.state),
    } for info in reply.job_info]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from sundial_beam.runner import started_endpoints

    jobs: List[Dict[str, str]] = []
    errors: List[str] = []
    for endpoint in started_endpoints():
        try:
            jobs.extend(sundial_jobs(endpoint))
        except Exception as e:  # the server may have stopped; say so, do not fail the run
            errors.append(f"{endpoint}: {e}")
    states: Dict[str, int] = {}
    for job in jobs:
        states[job["state"]] = states.get(job["state"], 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(states.items())) or "none"
    terminalreporter.write_sep("-", "sundial")
    terminalreporter.write_line(
        f"sundial: {len(started_endpoints())} job server(s); {len(jobs)} jobs in their job "
        f"lists ({summary}); {_state['runs']} DirectRunner pipelines redirected")
    for err in errors:
        terminalreporter.write_line(f"sundial: could not list jobs of {err}")
    report = config.getoption("sundial_report")
    if report:
        with open(report, "w", encoding="utf-8") as f:
            json.dump({"jobs": jobs, "redirected": _state["runs"], "errors": errors}, f,
                      indent=1)
