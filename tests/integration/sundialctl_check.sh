#!/usr/bin/env bash
#
# sundialctl_check.sh BIN_DIR - sundialctl against a real `sundial serve`: a C SDK word count
# is submitted to the server, then `jobs`, `state`, `metrics` (stage watermarks at +inf after
# a bounded job, the job clock, the SDK's counter) and `messages` must show it, and an unknown
# job id must give exit status 1 with a NOT_FOUND message naming the id; then a running job's
# partition watermarks (a tailing partitioned source) must show in `metrics` while it runs.

set -uo pipefail
bin="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SD_LOG_TAG=sundialctl_check
# shellcheck source=ts/lib/serve.sh
source "$here/ts/lib/serve.sh"
sd_install_cleanup
logdir="$(mktemp -d)"
fail() { echo "sundialctl_check: FAIL: $*" >&2; sd_serve_dump_log 40; exit 1; }

sd_serve_start "$bin/sundial" "$logdir" || exit 1
ep="$SD_SERVE_ENDPOINT"
"$bin/wordcount" "--endpoint=$ep" >"$logdir/wc.out" 2>&1 || fail "wordcount on $ep failed"
"$bin/sundialctl" --endpoint "$ep" jobs >"$logdir/jobs" || fail "jobs"
grep -Eq '^job-001 +DONE' "$logdir/jobs" || fail "jobs: $(cat "$logdir/jobs")"
[[ "$("$bin/sundialctl" --endpoint "$ep" state job-001)" == "job-001 DONE" ]] || fail "state"
"$bin/sundialctl" --endpoint "$ep" metrics job-001 >"$logdir/metrics" || fail "metrics"
grep -Eq '^stage-001 +\+inf +\+inf' "$logdir/metrics" || fail "metrics: $(cat "$logdir/metrics")"
grep -q '^job clock: ' "$logdir/metrics" || fail "no job clock"
grep -q 'beam:metric:user:sum_int64:v1' "$logdir/metrics" || fail "no user counter"
# Progress per PCollection from the runner's own counts: the impulse's one element, and the
# grouped counts, one per distinct word of the example's text (11), with their bytes.
grep -Eq '^Text/Impulse.out +1 +1 +Text/Impulse.out$' "$logdir/metrics" ||
    fail "no PCollection counts: $(cat "$logdir/metrics")"
grep -Eq '^Count/grouped +11 +[0-9]+ +Count/grouped$' "$logdir/metrics" ||
    fail "grouped count: $(cat "$logdir/metrics")"
# Stages carry the user's names for what was fused into them (first .. last).
grep -Eq '^stage-001 .*Text/Impulse$' "$logdir/metrics" || fail "stage names: $(cat "$logdir/metrics")"
grep -Eq '^stage-002 .* Text/[A-Za-z]+ \.\. Count/' "$logdir/metrics" ||
    fail "stage names: $(cat "$logdir/metrics")"
# watch on a finished job: one refresh (piped: no screen control), exit 0 for DONE.
"$bin/sundialctl" --endpoint "$ep" watch job-001 >"$logdir/watch" || fail "watch exited $?"
grep -Eq '^=== [0-9T:-]+Z job-001 DONE$' "$logdir/watch" || fail "watch: $(cat "$logdir/watch")"
grep -Eq '^stage-001 +\+inf +\+inf' "$logdir/watch" || fail "watch table: $(cat "$logdir/watch")"
if grep -q $'\033' "$logdir/watch"; then fail "watch wrote screen control codes into a pipe"; fi
"$bin/sundialctl" --endpoint "$ep" jobs extra 2>/dev/null && fail "jobs took an extra argument"
"$bin/sundialctl" --version | grep -q '^sundialctl ' || fail "--version"
"$bin/sundialctl" --endpoint "$ep" messages job-001 >"$logdir/messages" || fail "messages"
grep -q '^state DONE' "$logdir/messages" || fail "messages: $(cat "$logdir/messages")"
if "$bin/sundialctl" --endpoint "$ep" state job-999 2>"$logdir/err"; then
    fail "unknown job accepted"
fi
grep -q 'job-999' "$logdir/err" || fail "unknown job message: $(cat "$logdir/err")"
# drain: a finished job cannot be drained (the reason names its state), an unknown one is named.
if "$bin/sundialctl" --endpoint "$ep" drain job-001 2>"$logdir/err"; then
    fail "drain of a DONE job accepted"
fi
grep -q 'DONE' "$logdir/err" || fail "drain of a DONE job: $(cat "$logdir/err")"
"$bin/sundialctl" --endpoint "$ep" drain job-999 2>"$logdir/err" && fail "drain of job-999 accepted"
grep -q 'job-999' "$logdir/err" || fail "drain of an unknown job: $(cat "$logdir/err")"
# Watermarks while a job runs: a partitioned source tailing files on the wall clock for 3 s
# (the watermarks example's --tail mode); its partitions' watermarks show in `metrics` while
# the job is RUNNING, and the stage table is there too.
"$bin/watermarks" --tail=3000 "--endpoint=$ep" >"$logdir/tail.out" 2>&1 &
tail_pid=$!
seen=0
for _ in $(seq 1 40); do
    sleep 0.1
    [[ "$("$bin/sundialctl" --endpoint "$ep" state job-002 2>/dev/null)" == "job-002 RUNNING" ]] ||
        continue
    "$bin/sundialctl" --endpoint "$ep" metrics job-002 >"$logdir/running" 2>&1 || continue
    if grep -Eq '^partition Topic/Read p0 [0-9T:.-]+Z \([0-9]+\)$' "$logdir/running" &&
        grep -Eq '^partition Topic/Read p1 [0-9T:.-]+Z \([0-9]+\)$' "$logdir/running" &&
        grep -Eq '^partition Topic/Read source ' "$logdir/running" &&
        grep -Eq '^stage-[0-9]+ ' "$logdir/running"; then
        seen=1
        break
    fi
done
wait "$tail_pid" || fail "watermarks --tail: $(cat "$logdir/tail.out")"
((seen)) || fail "no partition watermarks while running: $(cat "$logdir/running" 2>/dev/null)"
grep -Eq '^tail: [0-9]+ records; last watermarks p0=[0-9]+ p1=[0-9]+$' "$logdir/tail.out" ||
    fail "watermarks --tail: $(cat "$logdir/tail.out")"
sd_serve_stop
echo "sundialctl_check: ok"
