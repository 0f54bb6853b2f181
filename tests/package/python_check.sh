#!/usr/bin/env bash
# tests/package/python_check.sh BUILD_DIR SUNDIAL SUNDIALCTL - the sundial_beam package on the
# source tree (python/) with this build's binaries: its pytest tests, then mypy --strict.
# Exit 77 (NOT RUN) when tools/setup.sh could not make BUILD_DIR/pkg-venv.
set -uo pipefail
build="$1"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$build/pkg-venv"
if [[ -f "$venv/NOT-RUN" || ! -x "$venv/bin/mypy" ]]; then
    echo "python_sundial_beam: NOT RUN: $(cat "$venv/NOT-RUN" 2>/dev/null || echo "no $venv (tools/setup.sh)")"
    exit 77
fi
export SUNDIAL_BINARY="$2" SUNDIALCTL_BINARY="$3" PYTHONPATH="$repo/python"
cd "$repo/python" || exit 1
"$venv/bin/python" -m mypy --strict --cache-dir "$build/pkg/mypy-cache" sundial_beam tests ||
    { echo "python_sundial_beam: FAIL: mypy --strict"; exit 1; }
"$venv/bin/python" -m pytest -q -p no:cacheprovider -o addopts= tests
