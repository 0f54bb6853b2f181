#!/usr/bin/env bash
#
# tools/bench_go.sh [BUILD_DIR] [ROUNDS] - wall time of Beam's Go SDK suite (tools/go_suite.sh:
# primitives, wordcount, synthetic, regression; --runner=prism then --runner=universal) on
# Sundial and on Prism, interleaved: each round runs Sundial then Prism (odd rounds) or Prism
# then Sundial (even rounds), so load that drifts during the run weighs on both. The same tests
# run on both (TestDrain, which Prism cannot run, is left out; GO_SUITE_DRAIN=0). Prints each
# run, then per runner the min and median of the rounds' totals and the ratio Sundial / Prism
# of each. ROUNDS defaults to 3. Needs tools/setup.sh's Go binaries and Prism.

set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
rounds="${2:-3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() { # run RUNNER ROUND: total seconds of both modes appended to $tmp/RUNNER
    local runner="$1" total=0 mode start end secs
    for mode in prism universal; do
        start=$(date +%s.%N)
        GO_SUITE_DRAIN=0 GO_SUITE_SICKBAY=0 bash "$repo_root/tools/go_suite.sh" "$build_dir" "$runner" "$mode" \
            >"$tmp/$runner-$mode.log" 2>&1
        local rc=$?
        end=$(date +%s.%N)
        if [[ $rc -eq 77 ]]; then
            echo "bench_go: NOT RUN: $(grep -m1 'NOT RUN' "$tmp/$runner-$mode.log")"
            exit 77
        fi
        secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
        echo "bench_go: round $2 $runner $mode: $secs s ($(grep -E "^go_suite: $runner $mode:" "$tmp/$runner-$mode.log" | sed 's/^go_suite: [a-z]* [a-z]*: //; s/ in .*//'))"
        total=$(awk -v a="$total" -v b="$secs" 'BEGIN { printf "%.1f", a + b }')
    done
    echo "$total" >>"$tmp/$runner"
    echo "bench_go: round $2 $runner total: $total s"
}

for r in $(seq 1 "$rounds"); do
    if (( r % 2 == 1 )); then run sundial "$r"; run prism "$r"; else run prism "$r"; run sundial "$r"; fi
done
stats() { sort -n "$tmp/$1" | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f %.1f", v[1], m }'; }
read -r smin smed <<<"$(stats sundial)"
read -r pmin pmed <<<"$(stats prism)"
echo "bench_go: $rounds rounds; Sundial min $smin s, median $smed s; Prism min $pmin s, median $pmed s"
echo "bench_go: ratio Sundial / Prism: min $(awk -v a="$smin" -v b="$pmin" 'BEGIN { printf "%.2f", a / b }'), median $(awk -v a="$smed" -v b="$pmed" 'BEGIN { printf "%.2f", a / b }')"
