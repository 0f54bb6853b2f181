#!/usr/bin/env bash
#
# tools/demo.sh [BUILD_DIR] - the README's demo command: why Sundial exists, in under a minute.
#
# Sets up (Debian packages, pinned npm and PyPI packages), builds, then:
#   1. the clock: a simulated day of per-user sessions that end after an hour without clicks
#      (a stateful C DoFn with processing-time timers, sdk-harness/examples/session_timeout.c),
#      run on the synthetic clock: each session is printed with the synthetic time its timer
#      fired, then the wall time the day took (milliseconds) against the simulated time;
#   2. the same pipeline against the wall clock, with a 1.5 s timeout, which really waits;
#   3. `sundial serve` on loopback, and on it a Beam TypeScript word count (apache-beam 2.49.0)
#      and a Beam Python word count (apache-beam 2.77.0, PortableRunner, LOOPBACK worker), each
#      checked, then the server is stopped.
# Exits non-zero, saying which step failed, if any does.

# No `set -e`: the shared serve library's stop path may end with a harmless failing kill of an
# already-exited server; errors are checked explicitly instead.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${1:-build}"

bash tools/setup.sh "$build_dir" || { echo "demo: setup failed" >&2; exit 1; }
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null ||
    { echo "demo: cmake configure failed" >&2; exit 1; }
cmake --build "$build_dir" -j2 --target sundial session_timeout >/dev/null ||
    { echo "demo: build failed" >&2; exit 1; }
build_abs="$(cd "$build_dir" && pwd)"
demo_start=$SECONDS

echo
echo "demo: 1. a simulated day of user sessions (timeout: one hour of processing time) on"
echo "         Sundial's synthetic clock: timers fire in order, at once"
"$build_abs/bin/session_timeout" | sed 's/^/  /' ||
    { echo "demo: the synthetic-clock session run failed" >&2; exit 1; }

echo
echo "demo: 2. the same sessions against the wall clock (timeout 1.5 s): this one really waits"
"$build_abs/bin/session_timeout" --clock wall --timeout-ms 1500 | sed 's/^/  /' ||
    { echo "demo: the wall-clock session run failed" >&2; exit 1; }

SD_LOG_TAG=demo
# shellcheck source=../tests/integration/ts/lib/serve.sh
source tests/integration/ts/lib/serve.sh
sd_install_cleanup
logdir="$build_abs/demo-logs"
mkdir -p "$logdir"

echo
sd_serve_start "$build_abs/bin/sundial" "$logdir" || exit 1
echo "demo: 3. sundial serve is listening on $SD_SERVE_ENDPOINT (a Beam job server on loopback)"
echo "demo:    a Beam TypeScript word count on it:"
status=0
SUNDIAL_ENDPOINT="$SD_SERVE_ENDPOINT" SUNDIAL_TS_DIR="$build_abs/ts" \
    sd_run_bounded 120 node tests/integration/ts/pipelines.js wordcount \
    >"$logdir/wordcount.out" 2>"$logdir/wordcount.err" || status=$?
grep '^RESULT ' "$logdir/wordcount.out" | sed 's/^RESULT /  /' | sort | head -n 8 || true
echo "  ... $(grep -c '^RESULT ' "$logdir/wordcount.out") words; $(grep '^FINAL STATE' "$logdir/wordcount.out")"
if [[ $status -ne 0 ]]; then
    echo "demo: the TypeScript word count failed (exit $status); its stderr:" >&2
    tail -n 40 "$logdir/wordcount.err" >&2
    sd_serve_dump_log 60
    sd_serve_stop
    exit 1
fi

echo "demo:    a Beam Python word count on it (PortableRunner, LOOPBACK):"
py="$build_abs/py/bin/python"
if [[ -x "$py" ]]; then
    sd_run_bounded 120 "$py" tests/python/wordcount.py --runner=PortableRunner \
        --job_endpoint="$SD_SERVE_ENDPOINT" --environment_type=LOOPBACK \
        >"$logdir/py-wordcount.out" 2>"$logdir/py-wordcount.err" || status=$?
    sed 's/^/  /' "$logdir/py-wordcount.out"
    if [[ $status -ne 0 ]]; then
        echo "demo: the Python word count failed (exit $status); its stderr:" >&2
        tail -n 40 "$logdir/py-wordcount.err" >&2
        sd_serve_dump_log 60
        sd_serve_stop
        exit 1
    fi
else
    echo "  (not run: setup left no Python venv at $build_abs/py; see its NOT-RUN note)"
fi
sd_serve_stop
echo
echo "demo: done in $((SECONDS - demo_start)) s after setup"
