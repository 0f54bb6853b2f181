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
# Output filters: as printed; and session_timeout's, which prints each session from its DoFn,
# at times and in an order that are the wall clock's: the sessions, sorted, without times.
as_printed() { cat; }
sessions() { sed -n 's/^\(.*[] ]\)\{0,1\}\([a-z][a-z]*: [0-9][0-9]* events, [0-9][0-9]* clicks\)$/\2/p' | sort; }

# check NAME FILTER PROGRAM ARGS...: Sundial's output, then the job server's with each worker
# kind, each through FILTER. What a DoFn prints goes to its worker's stdout: with a PROCESS
# worker started by a Java job server that is not the client's (nor the server's log), so an
# example whose output comes from its DoFns (FILTER sessions) is compared with an EXTERNAL
# worker and, with a PROCESS worker, must end DONE (exit 0) and print its own last line.
check() {
    local name=$1 filter=$2
    shift 2
    "$@" 2> "$work/$name.sundial.err" > "$work/$name.sundial.raw" ||
        { cat "$work/$name.sundial.err" >&2; fail "$name on Sundial"; }
    "$filter" < "$work/$name.sundial.raw" > "$work/$name.sundial"
    [[ -s "$work/$name.sundial" ]] || fail "$name printed nothing on Sundial"
    local env t0 t1
    for env in process external; do
        local extra=()
        [[ $env == process ]] && extra=(--process)
        t0=$(date +%s.%N)
        if ! timeout "$job_timeout" "$@" --endpoint="localhost:$port" "${extra[@]}" \
                2> "$work/$name.$env.err" > "$work/$name.$env.raw"; then
            cat "$work/$name.$env.err" >&2
            tail -40 "$work/server.log" >&2
            fail "$name on $runner ($env worker)"
        fi
        t1=$(date +%s.%N)
        if [[ $env == process && $filter == sessions ]]; then
            grep -q "sessions (timeout .*) took" "$work/$name.$env.raw" ||
                fail "$name on $runner ($env worker): no closing line"
            printf 'jobservers: %-22s %-6s %-8s worker: DONE (%.1f s; its DoFn prints in the worker)\n' \
                "$name" "$runner" "$env" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
            passed=$((passed + 1))
            continue
        fi
        "$filter" < "$work/$name.$env.raw" > "$work/$name.$env"
        if ! diff -u "$work/$name.sundial" "$work/$name.$env" > "$work/$name.$env.diff"; then
            head -40 "$work/$name.$env.diff" >&2
            fail "$name on $runner ($env worker): output differs from Sundial's"
        fi
        printf 'jobservers: %-22s %-6s %-8s worker: identical to Sundial (%d lines, %.1f s)\n' \
            "$name" "$runner" "$env" "$(wc -l < "$work/$name.$env")" \
            "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
        passed=$((passed + 1))
    done
}

set -o pipefail
# Every example that does not need TestStream's processing-time control (which Flink refuses):
# the word count (Create, and a text file); session_timeout on the wall clock (stateful DoFn,
# bag state, processing-time timers; its "[+N s]" times and total are the wall clock's);
# watermarks' YDB and Flink parts (a partitioned source with per-partition watermarks and
# idleness, an SDF; its Spark part scripts processing time). Not here: leaderboard and
# session_timeout's test mode (processing time), late_data (a Sundial extension: the late
# output of a GroupByKey).
check wordcount as_printed "$bin/wordcount"
check wordcount_hamlet as_printed "$bin/wordcount" "$data/hamlet.txt"
# Spark's portable runner has no bundle checkpoints for splittable DoFns ("The ActiveBundle
# does not have a registered bundle checkpoint handler"), which watermarks' partitioned source
# takes while it waits for its partitions: Flink only.
default_examples="session_timeout watermarks"
[[ $runner == spark ]] && default_examples="session_timeout"
for ex in ${SD_JOBSERVER_EXAMPLES:-$default_examples}; do
    case $ex in
    session_timeout)
        check session_timeout_wall sessions "$bin/session_timeout" --clock wall --timeout-ms 1000 ;;
    watermarks) check watermarks as_printed "$bin/watermarks" --no-processing-time ;;
    *) fail "unknown example $ex" ;;
    esac
done
echo "jobservers: $runner: $passed jobs passed their checks"
