#!/usr/bin/env bash
#
# tests/fuzz/capture.sh [BUILD_DIR [RAW_DIR]] - capture real SDK traffic and cut fuzz seeds.
#
# Runs real pipelines with SUNDIAL_CAPTURE_DIR set, so the runner's transport writes every
# request message it receives (runner/transport/rpc_server.c), then tests/fuzz/capture.py
# turns the captures into tests/fuzz/pipelines/*.prepare and tests/fuzz/corpus/<target>/:
#   - Beam Python (BUILD_DIR/py, from tools/setup.sh): tests/python/wordcount.py and
#     tests/fuzz/capture_pipelines.py {teststream,state,sideinput,combine}, each on its own
#     `sundial serve` (so each is job-001) with the LOOPBACK environment;
#   - the C SDK: the integration test binaries in BUILD_DIR/bin (embedded runner).
# BUILD_DIR defaults to build-fuzz; RAW_DIR (the raw captures, kept) to BUILD_DIR/capture.

set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
build_dir="${1:-build-fuzz}"
raw="${2:-$build_dir/capture}"
py="${SD_CAPTURE_PYTHON:-$build_dir/py/bin/python}"
[[ -x "$py" ]] || py=build/py/bin/python
rm -rf "$raw"
mkdir -p "$raw"

run_python() { # NAME SCRIPT [ARGS...]
    local name="$1" out="$raw/py-$1" port_file pid port
    shift
    mkdir -p "$out"
    port_file="$(mktemp)"
    SUNDIAL_CAPTURE_DIR="$out" "$build_dir/bin/sundial" serve --port 0 >"$port_file" 2>/dev/null &
    pid=$!
    for _ in $(seq 100); do
        grep -q 'listening on' "$port_file" && break
        sleep 0.1
    done
    port="$(sed -n 's/.*listening on [^:]*:\([0-9]*\).*/\1/p' "$port_file" | head -1)"
    echo "capture: $name on port $port"
    if ! timeout 300 "$py" "$@" --runner=PortableRunner --job_endpoint="localhost:$port" \
        --environment_type=LOOPBACK >"$out.log" 2>&1; then
        echo "capture: $name failed (see $out.log)"
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$port_file"
}

if [[ -x "$py" ]]; then
    run_python wordcount tests/python/wordcount.py
    for p in teststream state sideinput combine; do
        run_python "$p" tests/fuzz/capture_pipelines.py "$p"
    done
else
    echo "capture: no Beam Python venv ($py); Python seeds skipped"
fi

for t in test_pipelines test_teststream test_stateful test_state_kinds test_triggers; do
    bin="$build_dir/bin/sdk_it_$t"
    [[ -x "$bin" ]] || continue
    mkdir -p "$raw/c-$t"
    echo "capture: C SDK $t"
    SUNDIAL_CAPTURE_DIR="$raw/c-$t" timeout 300 "$bin" >"$raw/c-$t.log" 2>&1 ||
        echo "capture: $t failed (see $raw/c-$t.log)"
done

python3 tests/fuzz/capture.py "$raw" tests/fuzz
