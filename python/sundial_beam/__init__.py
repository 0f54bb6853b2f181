"""Sundial for Apache Beam's Python SDK.

Sundial is a local Beam runner in C with a synthetic processing-time clock. This package
carries the ``sundial`` and ``sundialctl`` binaries and makes them a Beam runner:

    python my_pipeline.py --runner=sundial_beam.SundialRunner

``SundialRunner`` is Beam's ``PrismRunner`` started on the bundled binary; ``SundialOptions``
declares the runner's own pipeline options (``--sundial_clock`` and the rest); the pytest
plugin (``pytest --sundial``) runs every pipeline a test suite builds on Sundial.
"""

from sundial_beam._binary import binary_path, ctl_path
try:
    from sundial_beam._version import __version__  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # a source checkout: tools/package.sh writes _version.py into the wheel
    __version__ = "0+source"
from sundial_beam.options import SundialOptions, option_table
from sundial_beam.runner import SundialJobServer, SundialRunner, register_runner_name
from sundial_beam.trace import fetch_trace, fetch_trace_lines

__all__ = [
    "SundialJobServer",
    "SundialOptions",
    "SundialRunner",
    "__version__",
    "binary_path",
    "ctl_path",
    "fetch_trace",
    "fetch_trace_lines",
    "option_table",
    "register_runner_name",
]

register_runner_name()
