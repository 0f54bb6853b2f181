#!/usr/bin/env bash
# tools/bench_python.sh [BUILD_DIR] - Beam Python word count (100,000 lines) and a one-element
# pipeline on Sundial vs Prism vs the SDK's FnApiRunner, interleaved, min and median of
# BENCH_ROUNDS (3) rounds; see tools/bench_python.py. Needs tools/setup.sh BUILD_DIR first.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "${1:-build}" && pwd)"
py="$build_dir/py/bin/python"
[[ -x "$py" ]] || { echo "bench_python: no venv in $build_dir/py (run tools/setup.sh)" >&2; exit 2; }
cd "$build_dir"
SUNDIAL_LOG="${SUNDIAL_LOG:-warn}" "$py" "$repo_root/tools/bench_python.py" \
    "$build_dir/bin/sundial" "$build_dir/bin-prism/prism" 2>&1 | grep -v "^WARNING:root"
