#!/usr/bin/env bash
#
# tools/demo.sh [BUILD_DIR] - the README's demo command.
#
# Sets up (Debian packages, pinned npm packages), builds, then runs the main job end to end:
#   1. starts `sundial serve --port 0` (a Beam job server on loopback),
#   2. submits a Beam TypeScript SDK word count (apache-beam 2.49.0, LOOPBACK worker) to it,
#   3. prints the word counts and the job's final state, and stops the server.
# Then it runs the C SDK's wordcount example on its embedded in-process runner.

# No `set -e`: the shared serve library's stop path may end with a harmless failing kill of an
# already-exited server; errors are checked explicitly instead.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${1:-build}"

bash tools/setup.sh "$build_dir" || { echo "demo: setup failed" >&2; exit 1; }
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null ||
    { echo "demo: cmake configure failed" >&2; exit 1; }
cmake --build "$build_dir" -j2 --target sundial wordcount >/dev/null ||
    { echo "demo: build failed" >&2; exit 1; }
build_abs="$(cd "$build_dir" && pwd)"

SD_LOG_TAG=demo
# shellcheck source=../tests/integration/ts/lib/serve.sh
source tests/integration/ts/lib/serve.sh
sd_install_cleanup
logdir="$build_abs/demo-logs"
mkdir -p "$logdir"

sd_serve_start "$build_abs/bin/sundial" "$logdir" || exit 1
echo "demo: sundial serve is listening on $SD_SERVE_ENDPOINT"
echo "demo: running a Beam TypeScript word count on it"
status=0
SUNDIAL_ENDPOINT="$SD_SERVE_ENDPOINT" SUNDIAL_TS_DIR="$build_abs/ts" \
    sd_run_bounded 120 node tests/integration/ts/pipelines.js wordcount \
    >"$logdir/wordcount.out" 2>"$logdir/wordcount.err" || status=$?
grep '^RESULT ' "$logdir/wordcount.out" | sed 's/^RESULT /  /' | sort || true
grep '^FINAL STATE' "$logdir/wordcount.out" || true
sd_serve_stop
if [[ $status -ne 0 ]]; then
    echo "demo: the TypeScript word count failed (exit $status); its stderr:" >&2
    tail -n 40 "$logdir/wordcount.err" >&2
    sd_serve_dump_log 60
    exit 1
fi

echo "demo: the C SDK word count on its embedded in-process runner (test mode):"
"$build_abs/bin/wordcount" | sed 's/^/  /' || { echo "demo: the C word count failed" >&2; exit 1; }
echo "demo: done"
