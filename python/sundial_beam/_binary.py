"""Where the bundled binaries are."""

import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _find(name: str, env: str) -> str:
    override = os.environ.get(env)
    if override:
        return override
    path = _HERE / "bin" / name
    if not path.is_file():
        raise FileNotFoundError(
            f"sundial_beam: the bundled {name} binary is missing ({path}); install the "
            f"sundial-beam wheel for your platform, or name a binary with ${env}")
    return str(path)


def binary_path() -> str:
    """The ``sundial`` binary: $SUNDIAL_BINARY, else the one in this package."""
    return _find("sundial", "SUNDIAL_BINARY")


def ctl_path() -> str:
    """The ``sundialctl`` binary: $SUNDIALCTL_BINARY, else the one in this package."""
    return _find("sundialctl", "SUNDIALCTL_BINARY")
