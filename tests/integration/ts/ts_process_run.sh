#!/usr/bin/env bash
#
# ts_process_run.sh SUNDIAL_BIN BUILD_DIR NAME
#
# Runs one pipeline of pipelines.js on `sundial serve` with a beam:env:process:v1 environment
# (`node pipelines.js NAME --process`, see ts_process_runner.js): Sundial itself starts the
# SDK worker as a child process (ts_process_boot.sh -> ts_process_boot.js -> the SDK's
# worker_main.js) and must kill it when the job ends. Checks:
#   - the client exits 0 and prints "FINAL STATE DONE";
#   - the sorted "RESULT ..." lines equal expected/NAME.txt. They are read from sundial's
#     stdout file: the worker inherits the server's stdout, and the SDK's console capture
#     passes every line through to it synchronously, while the DoFn runs, so the lines are
#     there before the bundle (and so the job) completes. The other route, the job's messages
#     (the worker's Fn Logging stream), is not used for the check: the SDK worker sends its
#     log batches every 100 ms and the runner kills it at job end, so the last lines are
#     routinely lost (observed: only the worker's first line arrived). The messages are saved
#     to the log directory (messages.txt) for diagnosis only;
#   - the client's own output has no RESULT lines and the server's has the SDK's "Starting
#     worker" line (the worker really ran outside the client);
#   - within SD_TS_REAP_TIMEOUT (10 s) of the job's end, no ts_process_boot or worker_main
#     process is left in the server's process group (the group the server leads, so parallel
#     tests do not see each other's workers);
#   - sundial is still running at the end (then it is stopped as lib/serve.sh does).
# Bounded: SD_SERVE_START_TIMEOUT (20 s), SD_TS_RUN_TIMEOUT (120 s for the client),
# SUNDIAL_JOB_TIMEOUT_MS (60000, after which the client cancels the job).
# Logs: BUILD_DIR/ts/logs/process-NAME/.

set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/serve.sh
source "$here/lib/serve.sh"

if [[ $# -ne 3 ]]; then
    echo "usage: $0 SUNDIAL_BIN BUILD_DIR NAME" >&2
    exit 64
fi
sundial_bin="$1"
build_dir="$2"
name="$3"
SD_LOG_TAG="ts_process_$name"

expected="$here/expected/$name.txt"
[[ -f "$expected" ]] || { sd_log "error: no expected output $expected"; exit 1; }
[[ -x "$here/ts_process_boot.sh" ]] ||
    { sd_log "error: $here/ts_process_boot.sh is missing or not executable"; exit 1; }
sd_require_ts_sdk "$build_dir" || exit 1
ts_dir="$(cd "$build_dir/ts" && pwd)"
logdir="$ts_dir/logs/process-$name"
rm -rf "$logdir"
mkdir -p "$logdir" || { sd_log "error: cannot create $logdir"; exit 1; }

# Processes of the server's group whose command line names the boot program or the worker.
leftover_workers() {
    local pgid
    pgid="$(ps -o pgid= -p "$SD_SERVE_PID" 2>/dev/null | tr -d ' ')"
    [[ -n "$pgid" ]] || return 0
    pgrep -a -g "$pgid" -f 'ts_process_boot|worker_main\.js' 2>/dev/null
}

sd_install_cleanup
sd_serve_start "$sundial_bin" "$logdir" || exit 1
endpoint="$SD_SERVE_ENDPOINT"

out="$logdir/node.out"
sd_run_bounded "${SD_TS_RUN_TIMEOUT:-120}" \
    env -C "$ts_dir" SUNDIAL_ENDPOINT="$endpoint" SUNDIAL_TS_DIR="$ts_dir" \
    node "$here/pipelines.js" "$name" --process </dev/null >"$out" 2>&1
node_rc=$?

failures=()
[[ $node_rc -eq 0 ]] || failures+=("pipelines.js $name --process exited with status $node_rc")
grep -q '^FINAL STATE DONE$' "$out" || failures+=("the job did not end in state DONE")
if grep -q '^RESULT ' "$out"; then
    failures+=("RESULT lines reached the client: the worker ran in the client, not as a process")
fi

# Reaping: the job is over, so its worker must be gone (Sundial gives it 0.5 s after SIGTERM).
ticks=$((${SD_TS_REAP_TIMEOUT:-10} * 10))
left="$(leftover_workers)"
while [[ -n "$left" ]] && ((ticks > 0)); do
    sleep 0.1
    ticks=$((ticks - 1))
    left="$(leftover_workers)"
done
if [[ -n "$left" ]]; then
    failures+=("worker processes still running after the job ended: $(echo "$left" | tr '\n' ';')")
fi

# Diagnosis only (see the header): the job's messages, worker log lines included.
timeout 10 "$build_dir/bin/sundialctl" --endpoint "$endpoint" messages job-001 \
    >"$logdir/messages.txt" 2>&1

grep -q '^Starting worker ' "$SD_SERVE_STDOUT" ||
    failures+=("no 'Starting worker' line in sundial's stdout: no process worker ran")
grep '^RESULT ' "$SD_SERVE_STDOUT" | LC_ALL=C sort >"$logdir/actual.txt"
if ! diff -u "$expected" "$logdir/actual.txt" >"$logdir/diff.txt"; then
    failures+=("RESULT lines in the worker's output differ from expected/$name.txt")
fi

if sd_serve_alive; then
    sd_serve_stop
else
    sd_serve_stop
    failures+=("sundial died during the run (exit status $SD_SERVE_EXIT)")
fi

if [[ ${#failures[@]} -gt 0 ]]; then
    for f in "${failures[@]}"; do sd_log "FAIL: $f"; done
    echo "----- client output (last 100 lines of $out) -----" >&2
    tail -n 100 "$out" >&2
    echo "----- sundial stdout, worker output included (last 200 lines) -----" >&2
    tail -n 200 "$SD_SERVE_STDOUT" >&2
    if [[ -s "$logdir/diff.txt" ]]; then
        echo "----- expected vs actual -----" >&2
        cat "$logdir/diff.txt" >&2
    fi
    sd_serve_dump_log 400
    sd_log "logs: $logdir"
    exit 1
fi
sd_log "PASS ($(wc -l <"$expected") result lines match; worker process gone after the job)"
exit 0
