#!/usr/bin/env bash
#
# tools/bench_ts_keys.sh [BUILD_DIR [SUNDIAL_BIN]]
#
# Benchmark (issue: no cliffs with many keys): the TypeScript SDK pipelines keys_2k ...
# keys_200k (a GroupByKey over 2,000 ... 200,000 keys of two values, fanned out from 100
# seeds) and count_million_lifted (1,000,000 elements counted), each on the SDK's direct runner
# and on `sundial serve` (LOOPBACK), interleaved, BENCH_ROUNDS rounds (default 3). Every run
# checks its result (tests/integration/ts/run_pipeline.sh against expected/NAME.txt); a wrong
# or failed run is reported as such and not timed. Prints per pipeline the min and median wall
# time of each runner (seconds, the whole run_pipeline.sh: node start, server start, job), the
# ratio sundial/direct of the medians, and the SDK bundles per stage of Sundial's last run.
#
#   BENCH_PIPELINES  default "keys_2k keys_10k keys_20k keys_40k keys_200k count_million_lifted"
#   BENCH_ROUNDS     default 3

set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
sundial_bin="${2:-$build_dir/bin/sundial}"
pipelines="${BENCH_PIPELINES:-keys_2k keys_10k keys_20k keys_40k keys_200k count_million_lifted}"
rounds="${BENCH_ROUNDS:-3}"
runner="$repo_root/tests/integration/ts/run_pipeline.sh"

[[ -x "$sundial_bin" ]] || { echo "bench_ts_keys: no $sundial_bin (build first)" >&2; exit 2; }
[[ -d "$build_dir/ts/node_modules/apache-beam" ]] ||
    { echo "bench_ts_keys: no TypeScript SDK in $build_dir/ts (run tools/setup.sh)" >&2; exit 2; }

declare -A times
status=0

# One timed run: prints seconds, or FAIL.
one() {
    local what="$1" name="$2" t0 t1
    t0=$(date +%s.%N)
    if [[ "$what" == direct ]]; then
        bash "$runner" --direct "$build_dir" "$name" >/dev/null 2>&1 || { echo FAIL; return; }
    else
        SUNDIAL_LOG=info bash "$runner" "$sundial_bin" "$build_dir" "$name" >/dev/null 2>&1 ||
            { echo FAIL; return; }
    fi
    t1=$(date +%s.%N)
    echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }'
}

stats() { # "a b c" -> "min median"
    tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "- -"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.2f %.2f", v[1], m }'
}

for ((r = 1; r <= rounds; r++)); do
    for name in $pipelines; do
        for what in direct sundial; do
            t=$(one "$what" "$name")
            if [[ "$t" == FAIL ]]; then
                echo "bench_ts_keys: round $r: $name on $what FAILED (logs under $build_dir/ts/logs)"
                status=1
            else
                times[$name,$what]="${times[$name,$what]:-} $t"
            fi
        done
    done
done

printf "%-22s %15s %15s %8s  %s\n" pipeline "direct min/med" "sundial min/med" ratio \
    "sundial bundles per stage (last run)"
for name in $pipelines; do
    read -r dmin dmed <<<"$(echo "${times[$name,direct]:-}" | stats)"
    read -r smin smed <<<"$(echo "${times[$name,sundial]:-}" | stats)"
    ratio=$(awk -v a="$smed" -v b="$dmed" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-";
        else printf "%.2f", a / b }')
    log="$build_dir/ts/logs/pipeline-$name/sundial.stderr"
    bundles=$(grep -o 'stage-[0-9]* in_wm=.* bundles=[0-9]*' "$log" 2>/dev/null |
        awk '{ split($NF, b, "="); if (b[2] > 0) printf "%s:%s ", $1, b[2] }')
    printf "%-22s %7s/%-7s %7s/%-7s %8s  %s\n" "$name" "$dmin" "$dmed" "$smin" "$smed" "$ratio" \
        "${bundles:--}"
done
exit $status
