#!/usr/bin/env bash
#
# run_pipeline.sh SUNDIAL_BIN BUILD_DIR NAME
# run_pipeline.sh --direct BUILD_DIR NAME
#
# Runs one pipeline of pipelines.js (a Beam TypeScript SDK job) and checks its output:
#   - starts `SUNDIAL_BIN serve --port 0` (lib/serve.sh) and runs `node pipelines.js NAME`
#     against it in LOOPBACK mode (the SDK worker lives in the node process);
#   - with --direct instead of a binary, runs the pipeline on the SDK's own direct runner
#     (harness self-check: proves the expected file and the SDK install, no Sundial involved);
#   - the sorted "RESULT ..." lines must equal expected/NAME.txt, the job must end DONE, and
#     sundial must still be running at the end (then it is stopped: SIGTERM, SIGKILL after
#     SD_SERVE_STOP_GRACE).
#   - except on Sundial when expected/NAME.fails exists: then the job must end FAILED with no
#     results, and every line of NAME.fails must appear in sundial's stderr (why it failed);
# Bounded: SD_SERVE_START_TIMEOUT (20 s), SD_TS_RUN_TIMEOUT (120 s for the node process),
# SUNDIAL_JOB_TIMEOUT_MS (60000, after which the script cancels the job).
# Logs: BUILD_DIR/ts/logs/pipeline-NAME/.

set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/serve.sh
source "$here/lib/serve.sh"

if [[ $# -ne 3 ]]; then
    echo "usage: $0 {SUNDIAL_BIN|--direct} BUILD_DIR NAME" >&2
    exit 64
fi
sundial_bin="$1"
build_dir="$2"
name="$3"
SD_LOG_TAG="ts_pipeline_$name"
direct=0
[[ "$sundial_bin" == "--direct" ]] && direct=1

expected="$here/expected/$name.txt"
# A pipeline whose right answer on Sundial differs from the direct runner's (a known SDK
# defect that only shows when a runner encodes something) has expected/NAME.sundial.txt.
[[ $direct -eq 0 && -f "$here/expected/$name.sundial.txt" ]] && expected="$here/expected/$name.sundial.txt"
[[ -f "$expected" ]] || { sd_log "error: no expected output $expected"; exit 1; }
sd_require_ts_sdk "$build_dir" || exit 1
ts_dir="$(cd "$build_dir/ts" && pwd)"
logdir="$ts_dir/logs/pipeline-$name"
[[ $direct -eq 1 ]] && logdir="$ts_dir/logs/direct-$name"
rm -rf "$logdir"
mkdir -p "$logdir" || { sd_log "error: cannot create $logdir"; exit 1; }

sd_install_cleanup
args=("$name")
if [[ $direct -eq 1 ]]; then
    args+=(--direct)
    endpoint=""
else
    sd_serve_start "$sundial_bin" "$logdir" || exit 1
    endpoint="$SD_SERVE_ENDPOINT"
fi

out="$logdir/node.out"
sd_run_bounded "${SD_TS_RUN_TIMEOUT:-120}" \
    env -C "$ts_dir" SUNDIAL_ENDPOINT="$endpoint" SUNDIAL_TS_DIR="$ts_dir" \
    node "$here/pipelines.js" "${args[@]}" </dev/null >"$out" 2>&1
node_rc=$?

failures=()
fails_file="$here/expected/$name.fails"
if [[ $direct -eq 0 && -f "$fails_file" ]]; then
    # A pipeline Sundial must refuse: FAILED (not a hang, not DONE), no results, and the
    # runner's log says why (every line of NAME.fails is a fixed string that must appear).
    [[ $node_rc -eq 1 ]] || failures+=("pipelines.js $name exited with status $node_rc, want 1")
    grep -q '^FINAL STATE FAILED$' "$out" || failures+=("the job did not end in state FAILED")
    if grep -q '^RESULT ' "$out"; then failures+=("a job that must fail printed results"); fi
    while IFS= read -r needle; do
        [[ -z "$needle" ]] && continue
        grep -qF -- "$needle" "$SD_SERVE_STDERR" \
            || failures+=("sundial's log does not say: $needle")
    done <"$fails_file"
    : >"$logdir/diff.txt"
else
    [[ $node_rc -eq 0 ]] || failures+=("pipelines.js $name exited with status $node_rc")
    grep -q '^FINAL STATE DONE$' "$out" || failures+=("the job did not end in state DONE")
    grep '^RESULT ' "$out" | LC_ALL=C sort >"$logdir/actual.txt"
    if ! diff -u "$expected" "$logdir/actual.txt" >"$logdir/diff.txt"; then
        failures+=("RESULT lines differ from expected/$name.txt")
    fi
fi

if [[ $direct -eq 0 ]]; then
    if sd_serve_alive; then
        sd_serve_stop
    else
        sd_serve_stop
        failures+=("sundial died during the run (exit status $SD_SERVE_EXIT)")
    fi
fi

if [[ ${#failures[@]} -gt 0 ]]; then
    for f in "${failures[@]}"; do sd_log "FAIL: $f"; done
    echo "----- node output (last 200 lines of $out) -----" >&2
    tail -n 200 "$out" >&2
    if [[ -s "$logdir/diff.txt" ]]; then
        echo "----- expected vs actual -----" >&2
        cat "$logdir/diff.txt" >&2
    fi
    [[ $direct -eq 1 ]] || sd_serve_dump_log 400
    sd_log "logs: $logdir"
    exit 1
fi
sd_log "PASS ($(wc -l <"$expected") result lines match)"
exit 0
