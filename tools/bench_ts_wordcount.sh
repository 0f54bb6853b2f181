#!/usr/bin/env bash
#
# tools/bench_ts_wordcount.sh [--direct-only] [BUILD_DIR [SUNDIAL_BIN]]
#
# Benchmark: the Beam TypeScript SDK's word count over generated text (100,000 lines by
# default, about 800,000 words), once on the SDK's own in-process direct runner and once on
# `sundial serve` (LOOPBACK, the SDK worker in the client process), from one invocation.
# Prints both wall times and the ratio sundial/direct. Each run checks its own result (an
# in-pipeline assertion against a plain-JS count), so a fast wrong answer does not count.
#
#   BUILD_DIR     default ./build (tools/setup.sh BUILD_DIR installs the SDK there)
#   SUNDIAL_BIN   default BUILD_DIR/bin/sundial
#   --direct-only run only the direct-runner half (no Sundial needed)
#   BENCH_LINES (100000), BENCH_SHARDS (200), BENCH_TIMEOUT (900 s per run) in the environment
#
# wall_ms is measured inside node, from building the pipeline to the job's terminal state
# (node start-up and SDK loading excluded, the same for both runners). Logs:
# BUILD_DIR/ts/logs/bench/. Loopback only. Exit 0 when every run that was asked for ended
# DONE with the right answer.

set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SD_LOG_TAG=bench_ts_wordcount
# shellcheck source-path=SCRIPTDIR source=../tests/integration/ts/lib/serve.sh
source "$repo_root/tests/integration/ts/lib/serve.sh"

direct_only=0
if [[ "${1:-}" == "--direct-only" ]]; then
    direct_only=1
    shift
fi
build_dir="${1:-build}"
sundial_bin="${2:-$build_dir/bin/sundial}"
lines="${BENCH_LINES:-100000}"
shards="${BENCH_SHARDS:-200}"
run_timeout="${BENCH_TIMEOUT:-900}"

sd_require_ts_sdk "$build_dir" || exit 1
ts_dir="$(cd "$build_dir/ts" && pwd)"
logdir="$ts_dir/logs/bench"
rm -rf "$logdir"
mkdir -p "$logdir" || { sd_log "error: cannot create $logdir"; exit 1; }
sd_install_cleanup

# run_one RUNNER ENDPOINT: runs the bench once; sets bench_ms (empty when it failed).
run_one() {
    local which="$1" endpoint="$2" out="$logdir/$1.out" line
    bench_ms=""
    sd_log "running $which ($lines lines, $shards shards)"
    sd_run_bounded "$run_timeout" \
        env -C "$ts_dir" SUNDIAL_TS_DIR="$ts_dir" SUNDIAL_ENDPOINT="$endpoint" \
            SUNDIAL_JOB_TIMEOUT_MS="$((run_timeout * 1000))" \
        node "$repo_root/tools/bench/wordcount_bench.js" "$which" "$lines" "$shards" \
        </dev/null >"$out" 2>&1
    local rc=$?
    line="$(grep '^BENCH ' "$out" | tail -n 1)"
    if [[ $rc -ne 0 || "$line" != *" ok=1 "* ]]; then
        sd_log "error: the $which run failed (status $rc); last lines of $out:"
        tail -n 40 "$out" >&2
        return 1
    fi
    echo "$line"
    bench_ms="$(sed -n 's/.* wall_ms=\([0-9.]*\).*/\1/p' <<<"$line")"
}

status=0
run_one direct "" || status=1
direct_ms="$bench_ms"

sundial_ms=""
if [[ $direct_only -eq 0 ]]; then
    if sd_serve_start "$sundial_bin" "$logdir"; then
        run_one sundial "$SD_SERVE_ENDPOINT" || status=1
        sundial_ms="$bench_ms"
        if ! sd_serve_alive; then
            sd_log "error: sundial died during the benchmark"
            status=1
        fi
        sd_serve_stop
        [[ $status -eq 0 ]] || sd_serve_dump_log 100
    else
        status=1
    fi
fi

echo "ts wordcount benchmark: $lines lines"
show_ms() { if [[ -n "$1" ]]; then echo "$1 ms"; else echo "failed"; fi; }
echo "  direct runner: $(show_ms "$direct_ms")"
if [[ $direct_only -eq 0 ]]; then
    echo "  sundial:       $(show_ms "$sundial_ms")"
    if [[ -n "$direct_ms" && -n "$sundial_ms" ]]; then
        awk -v s="$sundial_ms" -v d="$direct_ms" \
            'BEGIN { printf "  ratio sundial/direct: %.2f\n", s / d }'
    fi
fi
exit "$status"
