#!/usr/bin/env bash
#
# run_crossed.sh SUNDIAL_BIN BUILD_DIR - several TypeScript jobs of one shape at once, from one
# process, against one `sundial serve`: each must end DONE with exactly its own results
# (crossed_jobs.js checks that), and the server must still be running afterwards.
# Bounded: SD_TS_RUN_TIMEOUT (120 s for the node process). Logs: BUILD_DIR/ts/logs/crossed/.

set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/serve.sh
source "$here/lib/serve.sh"

if [[ $# -ne 2 ]]; then
    echo "usage: $0 SUNDIAL_BIN BUILD_DIR" >&2
    exit 64
fi
SD_LOG_TAG="ts_crossed_jobs"
sd_require_ts_sdk "$2" || exit 1
ts_dir="$(cd "$2/ts" && pwd)"
logdir="$ts_dir/logs/crossed"
rm -rf "$logdir"
mkdir -p "$logdir" || { sd_log "error: cannot create $logdir"; exit 1; }

sd_install_cleanup
sd_serve_start "$1" "$logdir" || exit 1
out="$logdir/node.out"
failures=()
# Several rounds: the crossing depended on which job's worker asked first.
for round in 1 2 3; do
    sd_run_bounded "${SD_TS_RUN_TIMEOUT:-120}" \
        env -C "$ts_dir" SUNDIAL_ENDPOINT="$SD_SERVE_ENDPOINT" SUNDIAL_TS_DIR="$ts_dir" \
        node "$here/crossed_jobs.js" 3 </dev/null >"$out.$round" 2>&1
    rc=$?
    [[ $rc -eq 0 ]] || failures+=("round $round: crossed_jobs.js exited with status $rc")
done
if sd_serve_alive; then
    sd_serve_stop
else
    sd_serve_stop
    failures+=("sundial died during the run (exit status $SD_SERVE_EXIT)")
fi
if [[ ${#failures[@]} -gt 0 ]]; then
    for f in "${failures[@]}"; do sd_log "FAIL: $f"; done
    for round in 1 2 3; do
        echo "----- round $round -----" >&2
        grep -E '^(JOB|WRONG|  want|  got|PIPELINE ERROR)' "$out.$round" >&2
    done
    sd_serve_dump_log 200
    exit 1
fi
sd_log "PASS (3 rounds of 3 concurrent jobs, each with exactly its own results)"
exit 0
