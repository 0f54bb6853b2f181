#!/usr/bin/env bash
#
# The C SDK's examples on Beam's Flink or Spark job server (ctest labels flink, spark):
#
#   run_examples.sh flink|spark BUILD_DIR SOURCE_DIR
#
# One job server per run, started with tools/job_server.sh --exec in a network namespace of
# its own that has only `lo` (unshare -n; Beam's Java servers bind every interface), with the
# clients inside the same namespace. Each example runs first on Sundial's embedded runner, then
# on the job server with a PROCESS worker (the server starts the example binary with only --id
# and --provision_endpoint) and with an EXTERNAL worker (the client's own loopback worker pool);
# each output must be identical to Sundial's.
#
# Exit 77 (ctest: skipped, reported as NOT RUN, never as passed) when the job server was not
# installed (tools/setup.sh left BUILD_DIR/jobservers/NOT-RUN, or no classpath) or when no
# network namespace can be made (not root, no unshare).
set -euo pipefail

not_run() { echo "jobservers: NOT RUN: $*"; exit 77; }
fail() { echo "jobservers: FAIL: $*" >&2; exit 1; }

runner=${1:?usage: run_examples.sh flink|spark BUILD_DIR SOURCE_DIR}
build=$(cd "${2:?BUILD_DIR}" && pwd)
src=$(cd "${3:?SOURCE_DIR}" && pwd)
bin=$build/bin
data=$src/tests/integration/sdk/data

if [[ "${SD_JOBSERVER_NETNS:-}" != 1 ]]; then
    [[ -f "$build/jobservers/NOT-RUN" ]] && not_run "$(cat "$build/jobservers/NOT-RUN")"
    [[ -s "$build/jobservers/$runner.classpath" ]] ||
        not_run "no $build/jobservers/$runner.classpath (run tools/setup.sh $build)"
    command -v java >/dev/null 2>&1 || not_run "java is not installed"
    command -v unshare >/dev/null 2>&1 || not_run "no unshare command for a network namespace"
    [[ $(id -u) -eq 0 ]] || not_run "a network namespace of its own needs root"
    SD_JOBSERVER_NETNS=1 exec unshare -n "$0" "$@"
fi

# ---- inside the namespace: only lo, and nothing listens yet ------------------------------------
ip link set lo up
if ip -o link show | grep -qv ': lo:'; then
    fail "the namespace has an interface other than lo"
fi
work=$(mktemp -d)
server=""
cleanup() {
    if [[ -n "$server" ]]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

bash "$src/tools/job_server.sh" --exec "$runner" "$build" 0 > "$work/server.log" 2>&1 &
server=$!
limit=$(( ${SD_JOBSERVER_START_SECONDS:-300} * 10 ))
port=""
for ((i = 0; i < limit; i++)); do
    port=$(sed -n 's/.*JobService started on [^:]*:\([0-9][0-9]*\).*/\1/p' "$work/server.log" | head -1)
    [[ -n "$port" ]] && break
    kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; fail "the $runner job server exited"; }
    sleep 0.1
done
[[ -n "$port" ]] || { tail -20 "$work/server.log" >&2; fail "the $runner job server did not start"; }
echo "jobservers: Beam $runner job server on localhost:$port (network namespace with only lo)"

job_timeout=${SD_JOBSERVER_JOB_SECONDS:-600}
passed=0
# check NAME PROGRAM ARGS...: Sundial's output, then the job server's with each worker kind.
check() {
    local name=$1
    shift
    "$@" > "$work/$name.sundial" 2> "$work/$name.sundial.err" ||
        { cat "$work/$name.sundial.err" >&2; fail "$name on Sundial"; }
    [[ -s "$work/$name.sundial" ]] || fail "$name printed nothing on Sundial"
    local env t0 t1
    for env in process external; do
        local extra=()
        [[ $env == process ]] && extra=(--process)
        t0=$(date +%s.%N)
        if ! timeout "$job_timeout" "$@" --endpoint="localhost:$port" "${extra[@]}" \
                > "$work/$name.$env" 2> "$work/$name.$env.err"; then
            cat "$work/$name.$env.err" >&2
            tail -40 "$work/server.log" >&2
            fail "$name on $runner ($env worker)"
        fi
        t1=$(date +%s.%N)
        if ! diff -u "$work/$name.sundial" "$work/$name.$env" > "$work/$name.$env.diff"; then
            head -40 "$work/$name.$env.diff" >&2
            fail "$name on $runner ($env worker): output differs from Sundial's"
        fi
        printf 'jobservers: %-22s %-8s %s worker: identical to Sundial (%d lines, %.1f s)\n' \
            "$name" "$runner" "$env" "$(wc -l < "$work/$name.$env")" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
        passed=$((passed + 1))
    done
}

check wordcount "$bin/wordcount"
check wordcount_hamlet "$bin/wordcount" "$data/hamlet.txt"
echo "jobservers: $runner: $passed jobs, every output identical to Sundial's"
