#!/usr/bin/env bash
#
# tools/bench_ts_latency.sh [BUILD_DIR [RUNS]] - job latency of a one-element Beam TypeScript
# pipeline on `sundial serve`, measured runner side: the executor's "Run to DONE" time for
# each job (from Run handing the job over to the DONE state: starting the LOOPBACK worker,
# its control stream, the descriptor fetch, the bundles). RUNS jobs (default 10) go to one
# server; the script prints the median, min and max, and for scale the client-side wall time
# of the same runs (node's whole PortableRunner.run, including its polling back-off).

set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SD_LOG_TAG=bench_ts_latency
# shellcheck source-path=SCRIPTDIR source=../tests/integration/ts/lib/serve.sh
source "$repo_root/tests/integration/ts/lib/serve.sh"
build_dir="${1:-build}"
runs="${2:-10}"
sd_require_ts_sdk "$build_dir" || exit 1
ts_dir="$(cd "$build_dir/ts" && pwd)"
logdir="$ts_dir/logs/bench-latency"
mkdir -p "$logdir"
sd_install_cleanup
SUNDIAL_LOG=info sd_serve_start "$(cd "$build_dir" && pwd)/bin/sundial" "$logdir" || exit 1
client_ms=()
for ((i = 0; i < runs; i++)); do
    t0=$(date +%s%N)
    (cd "$ts_dir" && SUNDIAL_ENDPOINT="$SD_SERVE_ENDPOINT" SUNDIAL_TS_DIR="$ts_dir" \
        sd_run_bounded 60 node "$repo_root/tests/integration/ts/pipelines.js" impulse \
        >"$logdir/run-$i.out" 2>&1) || { echo "run $i failed" >&2; exit 1; }
    client_ms+=("$(( ($(date +%s%N) - t0) / 1000000 ))")
done
sd_serve_stop
mapfile -t runner_ms < <(grep -o 'DONE: Run to end in [0-9.]* ms' "$SD_SERVE_STDERR" |
    awk '{print $6}' | sort -n)
if [[ ${#runner_ms[@]} -ne $runs ]]; then
    echo "expected $runs DONE jobs in the server log, found ${#runner_ms[@]}" >&2
    exit 1
fi
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf 'one-element TS pipeline, %d jobs on one sundial serve\n' "$runs"
printf '  runner side, Run to DONE: median %s ms (min %s, max %s)\n' \
    "$(printf '%s\n' "${runner_ms[@]}" | median)" "${runner_ms[0]}" "${runner_ms[$((runs - 1))]}"
printf '  client side, whole run() incl. node start: median %s ms\n' \
    "$(printf '%s\n' "${client_ms[@]}" | median)"
