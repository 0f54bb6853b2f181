"""``SundialRunner``: Beam's PrismRunner on the bundled ``sundial`` binary.

Sundial answers Prism's command line, so everything but finding the binary is Beam's: the
job server is started on a free loopback port when the first pipeline runs, shared by the
pipelines of the process, and stopped at exit. ``--prism_location`` is not needed (when
given it is used, as with PrismRunner); the binary is never copied into Beam's Prism cache.
"""

import threading
from typing import Any, List, Optional, Tuple

from apache_beam.options import pipeline_options
from apache_beam.runners.portability import job_server, prism_runner
from apache_beam.utils import shared

from sundial_beam._binary import binary_path

# The endpoints of the job servers this process started, oldest first (the pytest plugin
# asks them for their job lists).
_endpoints: List[str] = []
_endpoints_lock = threading.Lock()


def started_endpoints() -> List[str]:
    """The job endpoints (``localhost:PORT``) of the Sundial servers this process started."""
    with _endpoints_lock:
        return list(_endpoints)


class SundialJobServer(prism_runner.PrismJobServer):  # type: ignore[misc]  # untyped base
    """Prism's job server launcher, with the bundled ``sundial`` as the binary."""

    def __init__(self, options: pipeline_options.PipelineOptions) -> None:
        super().__init__(options)
        location = options.view_as(pipeline_options.PrismRunnerOptions).prism_location
        self._sundial_path: str = location or binary_path()
        self._sundial_endpoint: Optional[str] = None

    def _get_executable_path(self) -> str:
        return self._sundial_path

    def subprocess_cmd_and_endpoint(self) -> Tuple[List[Any], str]:
        cmd, endpoint = super().subprocess_cmd_and_endpoint()
        self._sundial_endpoint = endpoint
        return cmd, endpoint

    def start(self) -> Any:
        stub = super().start()
        with _endpoints_lock:
            if self._sundial_endpoint is not None and self._sundial_endpoint not in _endpoints:
                _endpoints.append(self._sundial_endpoint)
        return stub


class SundialRunner(prism_runner.PrismRunner):  # type: ignore[misc]  # untyped base
    """Runs pipelines on Sundial, started from the binary this package carries.

    Name it ``--runner=sundial_beam.SundialRunner`` (or ``--runner=SundialRunner`` once
    ``sundial_beam`` is imported). Sundial's own options are ``sundial_beam.SundialOptions``.
    """

    shared_handle = shared.Shared()

    def default_job_server(self, options: pipeline_options.PipelineOptions) -> Any:
        debug_options = options.view_as(pipeline_options.DebugOptions)

        def make() -> job_server.StopOnExitJobServer:
            return job_server.StopOnExitJobServer(SundialJobServer(options))

        if debug_options.lookup_experiment("disable_prism_server_singleton"):
            return make()
        return SundialRunner.shared_handle.acquire(make)


def register_runner_name(name: Optional[str] = None) -> None:
    """Let ``--runner=SundialRunner`` (and ``--runner=Sundial``) name this runner.

    Beam looks short runner names up in a table of its own; this adds ours to it. A fully
    qualified ``--runner=sundial_beam.SundialRunner`` works without it.
    """
    from apache_beam.runners import runner as beam_runner

    key = (name or "SundialRunner").lower()
    table = getattr(beam_runner, "_RUNNER_MAP", None)
    if isinstance(table, dict):
        table[key] = "sundial_beam.runner.SundialRunner"
