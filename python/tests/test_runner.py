"""SundialRunner: Beam finds it by name and it starts the binary it was given."""

import os
import subprocess
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners import create_runner
from apache_beam.testing.util import assert_that, equal_to

import sundial_beam
from sundial_beam.pytest_plugin import sundial_jobs
from sundial_beam.runner import SundialJobServer, SundialRunner, started_endpoints


def test_runner_names() -> None:
    for name in ("sundial_beam.SundialRunner", "SundialRunner", "Sundial", "sundialrunner"):
        assert isinstance(create_runner(name), SundialRunner), name


def test_job_server_uses_the_binary_in_place(sundial_binary: str) -> None:
    server = SundialJobServer(PipelineOptions([]))
    cmd, endpoint = server.subprocess_cmd_and_endpoint()
    assert cmd[0] == sundial_binary  # not a copy in Beam's Prism cache
    assert "--job_port" in cmd and endpoint.startswith("localhost:")


def test_runs_a_pipeline_and_it_is_in_the_job_list() -> None:
    p = beam.Pipeline(options=PipelineOptions(["--runner=SundialRunner"]))
    out = (p | beam.Create(["a b", "b"]) | beam.FlatMap(str.split)
           | beam.combiners.Count.PerElement())
    assert_that(out, equal_to([("a", 1), ("b", 2)]))
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    job_id = getattr(result, "_job_id")
    jobs = [j for e in started_endpoints() for j in sundial_jobs(e)]
    assert [j["state"] for j in jobs if j["job_id"] == job_id] == ["DONE"], (job_id, jobs)


def test_python_m_passes_through(sundial_binary: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-m", "sundial_beam", "version"], env=env,
                         capture_output=True, text=True, check=True)
    direct = subprocess.run([sundial_binary, "version"], capture_output=True, text=True,
                            check=True)
    assert out.stdout == direct.stdout and out.stdout.startswith("sundial ")
    bad = subprocess.run([sys.executable, "-m", "sundial_beam", "no-such-command"], env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command" in bad.stderr
    ctl = subprocess.run([sys.executable, "-m", "sundial_beam", "ctl", "version"], env=env,
                         capture_output=True, text=True, check=True)
    assert ctl.stdout.startswith("sundialctl ")


def test_version_is_a_string() -> None:
    assert isinstance(sundial_beam.__version__, str) and sundial_beam.__version__
