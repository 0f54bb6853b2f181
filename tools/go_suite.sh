#!/usr/bin/env bash
#
# tools/go_suite.sh BUILD_DIR [sundial|prism] [prism|universal] [PACKAGE...]
#
# Runs Beam's own Go SDK tests (v2.77.0: go/test/integration/{primitives,wordcount,synthetic}
# and go/test/regression, the test binaries tools/setup.sh built into BUILD_DIR/go/bin) against
# one job server on loopback, the way Beam runs them against Prism:
#
#     X.test -test.v --runner=MODE --endpoint=127.0.0.1:PORT --environment_type=LOOPBACK
#
# The server is Sundial (`BUILD_DIR/bin/sundial serve --port 0`, the default) or Beam's Prism
# (`BUILD_DIR/bin-prism/prism --job_port PORT`), started here and stopped at the end. MODE picks
# the Go SDK's filter list (go/test/integration/integration.go): `prism` applies Prism's (the
# default), `universal` none. TestOomParDo is always skipped (under LOOPBACK it grows the test
# process's memory until it dies). TestDrain runs an unbounded splittable DoFn until a runner
# drains the job; Beam filters it for every runner ("does not drain jobs by itself"). Here, on
# Sundial in universal mode, it runs on its own while this script drains its job once it runs
# (`sundialctl drain`, what a user would do): the job ends DRAINED and the test passes. Prism
# implements no Drain, so there it is skipped (it would run until the binary's timeout).
#
# Prints every test's result, then one line
#     go_suite: RUNNER MODE: N passed, N failed, N skipped in S s
# then `go_suite: FAILED TestX: first error line` per failure and `go_suite: NOISE: line` per
# line of the test output that only a misbehaving runner causes (the Go SDK's "unknown metric
# type", a job message nesting job messages), which counts as a failure. Logs are kept in
# BUILD_DIR/go-suite/RUNNER-MODE/ (RUNNER-MODE-PACKAGES/ when packages are named).
#
# GO_SUITE_SICKBAY=1 skips the tests listed in tests/go/sickbay.txt (tests that fail on Prism
# too), each printed with its reason. GO_SUITE_BIN_DIR overrides BUILD_DIR/go/bin;
# GO_SUITE_TIMEOUT is each binary's -test.timeout (default 600s); GO_SUITE_DRAIN=0 leaves TestDrain
# out on Sundial too (tools/bench_go.sh: the same tests on both runners). Exit status: 0 when nothing
# failed, 1 otherwise, 2 for a bad command line, 77 when the suite cannot run (no test binaries:
# setup's NOT-RUN marker is printed; no Prism): reported as NOT RUN, never as passed.

set -uo pipefail

usage() { echo "usage: tools/go_suite.sh BUILD_DIR [sundial|prism] [prism|universal] [PACKAGE...]" >&2; exit 2; }
not_run() { echo "go_suite: NOT RUN: $*"; exit 77; }

[[ $# -ge 1 ]] || usage
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "$1" 2>/dev/null && pwd)" || { echo "go_suite: no build directory $1" >&2; exit 2; }
shift
runner="${1:-sundial}"; [[ $# -gt 0 ]] && shift
mode="${1:-prism}"; [[ $# -gt 0 ]] && shift
case "$runner" in sundial|prism) ;; *) usage ;; esac
case "$mode" in prism|universal) ;; *) usage ;; esac
packages=("$@")
suffix=""
if [[ ${#packages[@]} -gt 0 ]]; then
    suffix="-$(IFS=-; echo "${packages[*]}")" # its own log folder (ctest runs them side by side)
else
    packages=(primitives wordcount synthetic regression)
fi

bin_dir="${GO_SUITE_BIN_DIR:-$build_dir/go/bin}"
for p in "${packages[@]}"; do
    if [[ ! -x "$bin_dir/$p.test" ]]; then
        if [[ -f "$build_dir/go/NOT-RUN" ]]; then
            not_run "$(cat "$build_dir/go/NOT-RUN")"
        fi
        not_run "no $bin_dir/$p.test (run tools/setup.sh)"
    fi
done
sundial="$build_dir/bin/sundial"
sundialctl="$build_dir/bin/sundialctl"
prism="$build_dir/bin-prism/prism"
if [[ "$runner" == prism && ! -x "$prism" ]]; then
    not_run "no $prism (tools/setup.sh installs Prism)"
fi
if [[ "$runner" == sundial && ! -x "$sundial" ]]; then
    echo "go_suite: no $sundial (build Sundial first)" >&2
    exit 2
fi

out_dir="$build_dir/go-suite/$runner-$mode$suffix"
rm -rf "$out_dir"
mkdir -p "$out_dir"
timeout_s="${GO_SUITE_TIMEOUT:-600s}"

skip='TestOomParDo'
if [[ "${GO_SUITE_SICKBAY:-0}" == 1 && -f "$repo_root/tests/go/sickbay.txt" ]]; then
    while read -r name reason; do
        [[ -z "$name" || "$name" == \#* ]] && continue
        echo "go_suite: sickbay: $name ($reason)"
        skip="$skip|^$name\$"
    done <"$repo_root/tests/go/sickbay.txt"
fi

server_pid=""
stop_server() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
        server_pid=""
    fi
}
trap stop_server EXIT

# Start the server; sets port.
start_server() {
    local log="$out_dir/server.log"
    if [[ "$runner" == sundial ]]; then
        SUNDIAL_LOG="${SUNDIAL_LOG:-warn}" "$sundial" serve --port 0 >"$log" 2>&1 &
        server_pid=$!
        for _ in $(seq 1 200); do
            port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$log" | head -1)
            [[ -n "$port" ]] && return 0
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.05
        done
    else
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        "$prism" --job_port "$port" --serve_http=false >"$log" 2>&1 &
        server_pid=$!
        for _ in $(seq 1 200); do
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.05
        done
    fi
    echo "go_suite: the $runner server did not start; its log:" >&2
    cat "$log" >&2
    exit 1
}

# Drain the first job that is RUNNING for a second (TestDrain's), then return.
drain_when_running() {
    local seen=0 job
    for _ in $(seq 1 600); do
        job=$("$sundialctl" --endpoint "127.0.0.1:$port" jobs 2>/dev/null | awk '$2 == "RUNNING" { print $1; exit }')
        if [[ -n "$job" ]]; then
            seen=$((seen + 1))
            if [[ $seen -ge 10 ]]; then
                "$sundialctl" --endpoint "127.0.0.1:$port" drain "$job" >>"$out_dir/drain.log" 2>&1
                return
            fi
        fi
        sleep 0.1
    done
}

start=$(date +%s.%N)
start_server
for p in "${packages[@]}"; do
    "$bin_dir/$p.test" -test.v -test.timeout "$timeout_s" -test.skip "$skip|^TestDrain\$" \
        --runner="$mode" --endpoint="127.0.0.1:$port" --environment_type=LOOPBACK \
        >"$out_dir/$p.log" 2>&1
    echo "go_suite: $p: exit $?" >>"$out_dir/status.log"
done
drain_log="$out_dir/primitives-drain.log"
drain_ran=0
if [[ " ${packages[*]} " == *" primitives "* && "$mode" == universal && "$runner" == sundial &&
      "${GO_SUITE_DRAIN:-1}" == 1 ]]; then
    drain_ran=1
    drain_when_running &
    drainer=$!
    "$bin_dir/primitives.test" -test.v -test.timeout 120s -test.run '^TestDrain$' \
        --runner="$mode" --endpoint="127.0.0.1:$port" --environment_type=LOOPBACK \
        >"$drain_log" 2>&1
    kill "$drainer" 2>/dev/null
    wait "$drainer" 2>/dev/null
fi
stop_server
end=$(date +%s.%N)
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')

logs=()
for p in "${packages[@]}"; do logs+=("$out_dir/$p.log"); done
[[ $drain_ran == 1 ]] && logs+=("$drain_log")

passed=$(cat "${logs[@]}" | grep -cE '^--- PASS: ')
failed=$(cat "${logs[@]}" | grep -cE '^--- FAIL: ')
skipped=$(cat "${logs[@]}" | grep -cE '^--- SKIP: ')
# A binary that ended without a test result (a panic outside a test, a timeout) fails too.
for f in "${logs[@]}"; do
    if ! grep -qE '^(ok|PASS)$|^ok ' "$f" && ! grep -qE '^--- FAIL: ' "$f"; then
        failed=$((failed + 1))
        echo "go_suite: FAILED $(basename "$f" .log): $(grep -m1 -E 'panic:|timed out|FAIL' "$f" | cut -c1-300)" >>"$out_dir/failures.txt"
    fi
done
for f in "${logs[@]}"; do
    grep -E '^(--- PASS|--- FAIL|--- SKIP): ' "$f"
done
for f in "${logs[@]}"; do
    # A failed test's first telling line: an assertion's or a panic's, else its first line.
    awk '/^=== RUN   / { name = $3; first = ""; told = "" }
         /^    [^ ]/ && first == "" && name != "" { first = $0; sub(/^ +/, "", first); msg[name] = first }
         /^ +(passert|panic:|actual PCollection|[0-9]+ (correct|unexpected|missing) entries)/ && told == "" && name != "" {
             told = $0; sub(/^ +/, "", told); msg[name] = told }
         /^--- FAIL: / { n = $3; print "go_suite: FAILED " n ": " substr(msg[n], 1, 300) }' "$f"
done >>"$out_dir/failures.txt"
# Noise: lines a runner causes that Prism does not.
noise=$(cat "${logs[@]}" | grep -E 'unknown metric type|\[worker [^]]*\][^[]*\(time=[^)]*\)\(id=[0-9]+\)\[worker ' | cut -c1-200)
n_noise=0
[[ -n "$noise" ]] && n_noise=$(wc -l <<<"$noise")

echo "go_suite: $runner $mode: $passed passed, $failed failed, $skipped skipped in $secs s"
[[ -s "$out_dir/failures.txt" ]] && cat "$out_dir/failures.txt"
if [[ $n_noise -gt 0 ]]; then
    echo "go_suite: NOISE: $n_noise lines, e.g."
    head -5 <<<"$noise" | sed 's/^/go_suite: NOISE: /'
fi
[[ $failed -eq 0 && $n_noise -eq 0 ]]
