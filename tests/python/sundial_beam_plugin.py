#
# Sundial: a pytest plugin that runs Beam's own Python test modules from the installed
# apache_beam package, as Beam's sdks/python/conftest.py does from a Beam checkout.
#
# Beam's runner suites (prism_runner_test.py, test_stream_test.py, userstate_test.py, ...)
# read their pipeline options from `--test-pipeline-options`, an option registered not by the
# apache_beam package but by sdks/python/conftest.py, which lives outside it. Installed from
# PyPI there is no such conftest, so this plugin registers the option and hands its value to
# TestPipeline.pytest_test_pipeline_options (which TestPipeline and PrismRunnerTest read), and
# enables Beam's additional type checks as that conftest does. Load it with
# `pytest -p sundial_beam_plugin` and this directory on PYTHONPATH (tools/python_suite.sh does).
#
# The sundial-beam wheel's own pytest plugin (python/sundial_beam/pytest_plugin.py, loaded
# by pytest once the wheel is installed) registers the same option the same way and adds
# `--sundial`; whichever of the two loads first registers it, the other leaves it be, and
# both hand the same value to TestPipeline.
#
# Beam's conftest also sets gRPC keep-alive and retry environment variables for its Docker CI;
# they are not needed on loopback and are left out so the suite measures the runners alone.
#
"""Registers --test-pipeline-options for Beam's test modules run from site-packages."""

from apache_beam.options import pipeline_options
from apache_beam.testing.test_pipeline import TestPipeline

# The markers Beam's sdks/python/pytest.ini declares that the runner suites use.
_MARKERS = (
    'it_validatesrunner: collect for the ValidatesRunner integration test suite.',
    'no_sickbay_batch: tests that are known to fail in batch on some runner.',
    'no_sickbay_streaming: tests that are known to fail in streaming on some runner.',
    'no_xdist: run without pytest-xdist plugin.',
    'uses_prism: tests that need Prism.',
    'uses_java_expansion_service: needs a Java expansion service.',
    'uses_python_expansion_service: needs a Python expansion service.',
    'uses_pyarrow: needs pyarrow.',
    'uses_pandas: needs pandas.',
    'uses_dill: needs dill.',
    'it_postcommit: post-commit integration tests.',
    'sickbay_direct: known failures on the DirectRunner.',
    'sickbay_spark: known failures on Spark.',
    'sickbay_flink: known failures on Flink.',
    'sickbay_dataflow: known failures on Dataflow.',
)


def pytest_addoption(parser):
  try:
    parser.addoption(
        '--test-pipeline-options',
        help='Options to use in test pipelines (Beam TestPipeline). NOTE: tests may '
        'ignore some or all of these options.')
  except ValueError:
    pass  # registered by sundial_beam's plugin


def pytest_configure(config):
  for marker in _MARKERS:
    config.addinivalue_line('markers', marker)
  if TestPipeline.pytest_test_pipeline_options is None:
    TestPipeline.pytest_test_pipeline_options = config.getoption(
        'test_pipeline_options', default='')
  pipeline_options.enable_all_additional_type_checks()
