#!/usr/bin/env bash
# tools/python_breakdown.sh [BUILD_DIR] - where a Beam Python `with TestPipeline` block's time
# goes, step by step, on Sundial, Prism and the in-process FnApiRunner (tools/python_breakdown.py
# says what each step is). BREAKDOWN_KINDS (default sundial,prism,fnapi), BREAKDOWN_ROUNDS (5,
# a fresh process per round and runner, interleaved), BREAKDOWN_BLOCKS (3 blocks per process),
# BREAKDOWN_BEFORE=BIN (a column for an older sundial binary), BREAKDOWN_PROFILE=N (cProfile the
# main thread of block N, 0-based, in the first round), BREAKDOWN_RUNNER_LOG=1 (the runner's
# debug log lines in the timeline). Needs tools/setup.sh.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "${1:-build}" && pwd)"
py="$build_dir/py/bin/python"
[[ -x "$py" ]] || { echo "python_breakdown: no venv in $build_dir/py (run tools/setup.sh)" >&2; exit 2; }
cd "$build_dir"
"$py" "$repo_root/tools/python_breakdown.py" "$build_dir/bin/sundial" "$build_dir/bin-prism/prism" \
    2>&1 | grep -v "^WARNING:root"
