#!/usr/bin/env bash
#
# tools/bench_all.sh [BUILD_DIR [--scale]] - issue 13's goals, measured in one run.
#
# Runs the benchmark commands one after the other, each with its own baseline measured in the
# same process, interleaved and content-checked (see each command's header comment), keeps
# their whole output in BUILD_DIR/bench-logs/, and prints one line a goal: the figure this run
# measured, the goal, and "met" or "MISSED". --scale adds the scaling commands (C SDK 100k-10M
# elements, engine GroupByKey and timers at 10x steps; a few minutes more).
#
# The goals (issue 13):
#   C SDK pipeline, 1M KV elements:  plain C loop rate / pipeline rate      <= 3 (next: <= 2)
#   engine GroupByKey, 1M / 1000 keys: engine CPU time / plain grouping loop <= 2.5
#   100k processing-time timers: engine / bare binary heap                   <= 8
#   1M processing-time timers: engine median CPU time                        < 1.5 s
#   one stream of 1 KiB messages: transport / raw gRPC C core                >= 0.5
#   one-element C pipeline on a reused runner, submit to DONE, median        <= 2 ms
#   50M elements through GroupByKey under a 256 MiB budget: peak RSS median  <= 1024 MB
#
# Exit 0 when every goal is met, 1 when one is missed, 2 when a command failed. The figures
# move with the machine's load (printed before and after); run it on a quiet machine to judge.

set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${1:-build}"
scale=0
if [[ "${2:-}" == --scale ]]; then
    scale=1
fi
bin="$build_dir/bin"
for b in bench_sdk bench_engine bench_pt_timers bench_transport; do
    if [[ ! -x "$bin/$b" ]]; then
        echo "bench_all.sh: $bin/$b is missing; build $build_dir first" >&2
        exit 2
    fi
done
logs="$build_dir/bench-logs"
mkdir -p "$logs"

# run NAME CMD...: run a benchmark, its output to the terminal and logs/NAME.log.
run() {
    local name="$1"
    shift
    echo "bench_all.sh: $name: $*"
    if ! "$@" 2>&1 | tee "$logs/$name.log"; then
        echo "bench_all.sh: $name failed (its output: $logs/$name.log)" >&2
        exit 2
    fi
}

# field LOG SED_EXPR: the last value the sed expression extracts from a log.
field() {
    local v
    v="$(sed -n "$2" "$logs/$1.log" | tail -1)"
    if [[ -z "$v" ]]; then
        echo "bench_all.sh: no figure in $logs/$1.log for $2" >&2
        exit 2
    fi
    echo "$v"
}

echo "bench_all.sh: start $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg)"
run sdk "$bin/bench_sdk" -r 60
run engine "$bin/bench_engine"
run pt_timers "$bin/bench_pt_timers"
run pt_timers_1m "$bin/bench_pt_timers" 1000000 1000 30 3
run transport "$bin/bench_transport"
run memory "$bin/bench_sdk" --memory 50000000 256MiB 3
if ((scale)); then
    run sdk_scale "$bin/bench_sdk" --scale
    run engine_scale "$bin/bench_engine" --scale
    run pt_timers_scale "$bin/bench_pt_timers" --scale
fi
echo "bench_all.sh: end $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg)"

missed=0
# goal NAME VALUE OP LIMIT UNIT: print one line; OP is <= < or >=.
goal() {
    local ok
    ok="$(awk -v v="$2" -v l="$4" -v op="$3" \
        'BEGIN { print ((op == "<=" && v <= l) || (op == "<" && v < l) || (op == ">=" && v >= l)) }')"
    if [[ "$ok" == 1 ]]; then
        printf '  %-58s %10s %-3s (goal %s %s)  met\n' "$1" "$2" "$5" "$3" "$4"
    else
        printf '  %-58s %10s %-3s (goal %s %s)  MISSED\n' "$1" "$2" "$5" "$3" "$4"
        missed=1
    fi
}

sdk_ratio="$(field sdk 's/^ratio sdk_pipeline \([0-9.]*\)$/\1/p')"
latency="$(field sdk 's/^ *one reused runner .*median *\([0-9.]*\) ms$/\1/p')"
engine_ratio="$(field engine 's/^ratio engine_gbk \([0-9.]*\)$/\1/p')"
timers_ratio="$(field pt_timers 's/^ratio pt_timers \([0-9.]*\)$/\1/p')"
timers_1m="$(field pt_timers_1m 's/^ *1000000 timers: engine min [0-9.]* median \([0-9.]*\) s.*/\1/p')"
transport_ratio="$(field transport 's/^ratio transport\/raw \([0-9.]*\)$/\1/p')"
memory_rss="$(field memory 's/^ *budget .* peak RSS min [0-9]* MB median \([0-9]*\) MB$/\1/p')"

echo "bench_all.sh: issue 13's goals, this run"
goal "C SDK 1M KV pipeline: loop rate / pipeline rate (CPU)" "$sdk_ratio" "<=" 3 x
goal "  the next goal" "$sdk_ratio" "<=" 2 x
goal "engine GroupByKey 1M / 1000 keys: engine / loop (CPU)" "$engine_ratio" "<=" 2.5 x
goal "100k processing-time timers: engine / binary heap (CPU)" "$timers_ratio" "<=" 8 x
goal "1M processing-time timers: engine median (CPU)" "$timers_1m" "<" 1.5 s
goal "1 KiB messages on one stream: transport / raw gRPC" "$transport_ratio" ">=" 0.5 x
goal "one-element C pipeline, reused runner: median" "$latency" "<=" 2 ms
goal "50M elements through GroupByKey, 256 MiB budget: peak RSS" "$memory_rss" "<=" 1024 MB
exit "$missed"
