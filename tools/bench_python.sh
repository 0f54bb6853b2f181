#!/usr/bin/env bash
# tools/bench_python.sh [BUILD_DIR] - what a Beam Python user waits for, on Sundial vs Prism vs
# the SDK's in-process FnApiRunner, in one run, interleaved, min and median: the first
# TestPipeline block of a fresh process (PrismRunner starting the runner binary), a pytest file
# of five small pipeline tests, and a 100,000-line word count; see tools/bench_python.py for
# the figures and the knobs (BENCH_ROUNDS, BENCH_ONLY, BENCH_BEFORE=an older sundial binary).
# Needs tools/setup.sh BUILD_DIR first. The Beam PrismRunnerTest comparison is
# tools/python_suite.sh BUILD_DIR sundial|prism prism (docs/benchmarks.md).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "${1:-build}" && pwd)"
py="$build_dir/py/bin/python"
[[ -x "$py" ]] || { echo "bench_python: no venv in $build_dir/py (run tools/setup.sh)" >&2; exit 2; }
cd "$build_dir"
SUNDIAL_LOG="${SUNDIAL_LOG:-warn}" "$py" "$repo_root/tools/bench_python.py" \
    "$build_dir/bin/sundial" "$build_dir/bin-prism/prism" 2>&1 | grep -v "^WARNING:root"
