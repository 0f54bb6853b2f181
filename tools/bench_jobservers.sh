#!/usr/bin/env bash
#
# tools/bench_jobservers.sh [BUILD_DIR] [RUNS] - the C word count over a 4 MB text on Sundial
# (embedded runner), on Beam's Flink job server (local mini-cluster) and on Beam's Spark job
# server (local[2]), with a PROCESS and an EXTERNAL (loopback) worker, and Beam Python's own
# word count (apache_beam.examples.wordcount, LOOPBACK) on the same Flink server as a control.
# Wall time of each job from the client's start to its exit, RUNS times each (default 3),
# interleaved; prints every time, then min and median per row. Each server is started once (in
# a network namespace of its own with only lo, as the ctest suites do) and gets one warm-up
# job first, which is reported but not counted. Needs root, tools/setup.sh's job-server step
# and, for the control, BUILD_DIR/py (Beam Python).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=$(cd "${1:-$repo_root/build}" && pwd)
runs=${2:-3}
if [[ "${SD_BENCH_NETNS:-}" != 1 ]]; then
    [[ $(id -u) -eq 0 ]] || { echo "bench_jobservers: needs root (a network namespace)" >&2; exit 1; }
    SD_BENCH_NETNS=1 exec unshare -n "$0" "$build" "$runs"
fi
ip link set lo up
work=$(mktemp -d)
server=""
cleanup() {
    [[ -n "$server" ]] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
    rm -rf "$work"
}
trap cleanup EXIT

# 4 MiB of text: lines of ten words drawn from 5,000 (a fixed seed: the same file every time).
awk 'BEGIN { srand(40); n = 0; while (n < 4194304) { l = "";
       for (i = 0; i < 10; i++) l = l (i ? " " : "") "w" int(rand() * 5000);
       print l; n += length(l) + 1 } }' > "$work/input.txt"
echo "input: $(wc -c < "$work/input.txt") bytes, $(wc -l < "$work/input.txt") lines"

declare -A times
timed() { # ROW COMMAND...: run, record the wall time in seconds under ROW
    local row=$1 t0 t1
    shift
    t0=$(date +%s.%N)
    "$@" > "$work/out" 2> "$work/err" || { cat "$work/err" >&2; echo "bench_jobservers: $row failed" >&2; exit 1; }
    t1=$(date +%s.%N)
    local dt
    dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    times[$row]+="$dt "
    echo "  $row: $dt s"
}
start_server() { # RUNNER: start it, set port
    bash "$repo_root/tools/job_server.sh" --exec "$1" "$build" 0 > "$work/$1.log" 2>&1 &
    server=$!
    port=""
    for ((i = 0; i < 3000; i++)); do
        port=$(sed -n 's/.*JobService started on [^:]*:\([0-9][0-9]*\).*/\1/p' "$work/$1.log" | head -1)
        [[ -n "$port" ]] && return 0
        sleep 0.1
    done
    echo "bench_jobservers: the $1 job server did not start" >&2
    exit 1
}
stop_server() { kill "$server"; wait "$server" 2>/dev/null || true; server=""; }

wc_c=$build/bin/wordcount
py=$build/py/bin/python
"$wc_c" "$work/input.txt" > "$work/sundial.out"
echo "sundial: $(wc -l < "$work/sundial.out") distinct words"

for runner in flink spark; do
    start_server "$runner"
    echo "$runner job server on localhost:$port; warm-up job:"
    timed "warm-up $runner" "$wc_c" "$work/input.txt" --endpoint="localhost:$port" --process
    for ((r = 0; r < runs; r++)); do
        timed "C sundial" "$wc_c" "$work/input.txt"
        timed "C $runner process" "$wc_c" "$work/input.txt" --endpoint="localhost:$port" --process
        cmp -s "$work/out" "$work/sundial.out" || { echo "C $runner: output differs" >&2; exit 1; }
        timed "C $runner external" "$wc_c" "$work/input.txt" --endpoint="localhost:$port"
        cmp -s "$work/out" "$work/sundial.out" || { echo "C $runner: output differs" >&2; exit 1; }
        if [[ $runner == flink && -x "$py" ]]; then
            timed "Python flink loopback" "$py" -m apache_beam.examples.wordcount \
                --input "$work/input.txt" --output "$work/py-out" --runner=PortableRunner \
                --job_endpoint="localhost:$port" --environment_type=LOOPBACK
        fi
    done
    stop_server
done

echo
printf '%-24s %8s %8s   %s\n' row min median all
for row in "C sundial" "C flink process" "C flink external" "Python flink loopback" \
           "C spark process" "C spark external"; do
    [[ -n "${times[$row]:-}" ]] || continue
    # shellcheck disable=SC2086
    printf '%s\n' ${times[$row]} | sort -n | awk -v row="$row" '{ v[NR] = $1; all = all $1 " " }
        END { printf "%-24s %8.2f %8.2f   %s\n", row, v[1], v[int((NR + 1) / 2)], all }'
done
