"""The package's tests run on the source tree (python/) with the binaries of a build named by
$SUNDIAL_BINARY and $SUNDIALCTL_BINARY (tests/package/CMakeLists.txt sets them)."""

import os

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def sundial_binary() -> str:
    path = os.environ.get("SUNDIAL_BINARY", "")
    if not path:
        pytest.fail("set SUNDIAL_BINARY to a built sundial binary")
    return path
