#!/usr/bin/env bash
#
# cli_flags_check.sh BIN_DIR - every command line is read one way (getopt_long): `sundial`,
# `sundialctl` and the C SDK's examples take a flag's value as the next word or after '='
# (--endpoint HOST:PORT, --endpoint=HOST:PORT) with the same effect; an unknown flag and a
# flag without its value exit 2 with a message naming the flag, then the usage; --help prints
# the usage on stdout and exits 0. Servers listen on loopback on an ephemeral port.

set -uo pipefail
bin="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SD_LOG_TAG=cli_flags_check
# shellcheck source=ts/lib/serve.sh
source "$here/ts/lib/serve.sh"
sd_install_cleanup
work="$(mktemp -d)"
second_pid=
cleanup_second() { [[ -n "$second_pid" ]] && kill "$second_pid" 2>/dev/null; rm -rf "$work"; }
trap 'cleanup_second; sd_serve_stop' EXIT
fail() { echo "cli_flags_check: FAIL: $*" >&2; exit 1; }

# bad PROGRAM FLAG-TEXT ARGS...: exit 2, stderr names 'FLAG-TEXT' and holds the usage, and
# nothing on stdout.
bad() {
    local prog="$1" flag="$2"
    shift 2
    "$bin/$prog" "$@" >"$work/out" 2>"$work/err" </dev/null
    local rc=$?
    [[ $rc == 2 ]] || fail "$prog $*: exit $rc, want 2 ($(head -3 "$work/err"))"
    grep -q -- "'$flag'" "$work/err" || fail "$prog $*: the error does not name $flag: $(cat "$work/err")"
    grep -q '^usage:' "$work/err" || fail "$prog $*: no usage after the error: $(cat "$work/err")"
    [[ ! -s "$work/out" ]] || fail "$prog $*: wrote to stdout: $(head -3 "$work/out")"
}

# 1. Every program: an unknown flag, a missing value, --help.
declare -A needs_value=([sundial]=--port [sundialctl]=--endpoint [wordcount]=--endpoint
    [session_timeout]=--clock [leaderboard]=--record-schedule [late_data]=--endpoint
    [watermarks]=--tail)
for prog in sundial sundialctl wordcount session_timeout leaderboard late_data watermarks; do
    pre=()
    [[ $prog == sundial ]] && pre=(serve)
    bad "$prog" --no-such-flag "${pre[@]}" --no-such-flag
    bad "$prog" --no-such-flag=1 "${pre[@]}" --no-such-flag=1
    bad "$prog" "${needs_value[$prog]}" "${pre[@]}" "${needs_value[$prog]}"
    "$bin/$prog" "${pre[@]}" --help >"$work/out" 2>"$work/err" || fail "$prog --help: exit $?"
    grep -q '^usage:' "$work/out" || fail "$prog --help printed no usage: $(head -3 "$work/out")"
done
bad sundial -bogus --job_port=0 -bogus # Prism's one-dash form is read the same way

# 2. sundial: --port 0 --clock wall and --port=0 --clock=wall.
sd_serve_start "$bin/sundial" "$work/serve" || exit 1
ep="$SD_SERVE_ENDPOINT"
"$bin/sundial" serve --port=0 --clock=wall >"$work/second.out" 2>"$work/second.err" </dev/null &
second_pid=$!
for _ in $(seq 100); do
    [[ $(wc -l <"$work/second.out") -ge 1 ]] && break
    sleep 0.1
done
grep -Eq '^listening on 127\.0\.0\.1:[0-9]+$' "$work/second.out" ||
    fail "serve --port=0 --clock=wall: $(cat "$work/second.out" "$work/second.err")"
grep -q '(clock wall)' "$work/second.err" || fail "--clock=wall not taken: $(cat "$work/second.err")"
kill "$second_pid"
wait "$second_pid" 2>/dev/null
second_pid=
"$bin/sundial" serve --port 0 --clock wall --bogus 2>/dev/null && fail "sundial took --bogus"

# 3. The C SDK's examples against that server, and sundialctl reading it: both forms.
"$bin/wordcount" "$here/sdk/data/hamlet.txt" --endpoint "$ep" >"$work/wc1" ||
    fail "wordcount --endpoint EP"
"$bin/wordcount" --endpoint="$ep" "$here/sdk/data/hamlet.txt" >"$work/wc2" ||
    fail "wordcount --endpoint=EP"
diff -q "$here/sdk/data/hamlet.expected" "$work/wc1" >/dev/null || fail "wordcount (space form) counts"
diff -q "$here/sdk/data/hamlet.expected" "$work/wc2" >/dev/null || fail "wordcount (= form) counts"
for form in "--endpoint $ep jobs" "--endpoint=$ep jobs" "jobs --endpoint $ep"; do
    # shellcheck disable=SC2086
    "$bin/sundialctl" $form >"$work/jobs" 2>"$work/err" || fail "sundialctl $form: $(cat "$work/err")"
    [[ $(grep -c ' DONE' "$work/jobs") == 2 ]] || fail "sundialctl $form: $(cat "$work/jobs")"
done

# 4. Values that change what an example does, in both forms.
for form in space equals; do
    if [[ $form == space ]]; then
        args=(--clock wall --timeout-ms 300)
    else
        args=(--clock=wall --timeout-ms=300)
    fi
    out=$("$bin/session_timeout" "${args[@]}") || fail "session_timeout ${args[*]}: exit $?"
    grep -q '^\[+0\.[0-9]* s\] ada: 3 events, 16 clicks$' <<<"$out" ||
        fail "session_timeout ${args[*]} did not run on the wall clock with a 300 ms timeout: $out"
done
"$bin/session_timeout" --clock=sundial >/dev/null 2>"$work/err" && fail "--clock=sundial taken"
grep -q -- '--clock expects synthetic or wall, got "sundial"' "$work/err" ||
    fail "bad --clock value: $(cat "$work/err")"
"$bin/leaderboard" --record-schedule "$work/lb1" >/dev/null || fail "leaderboard --record-schedule F"
"$bin/leaderboard" --record-schedule="$work/lb2" >/dev/null || fail "leaderboard --record-schedule=F"
[[ -s "$work/lb1" ]] && cmp -s "$work/lb1" "$work/lb2" || fail "the two recorded schedules differ"
"$bin/late_data" --record-schedule="$work/ld" >/dev/null || fail "late_data --record-schedule=F"
[[ -s "$work/ld" ]] || fail "late_data recorded no schedule"
"$bin/watermarks" --no-processing-time --dir "$work/w1" >/dev/null || fail "watermarks --dir D"
"$bin/watermarks" --no-processing-time --dir="$work/w2" >/dev/null || fail "watermarks --dir=D"
[[ -d "$work/w1" && -d "$work/w2" ]] || fail "watermarks did not use --dir"
"$bin/watermarks" --tail=0 >/dev/null 2>"$work/err" && fail "watermarks took --tail=0"
grep -q -- '--tail expects 1..600000 milliseconds, got "0"' "$work/err" ||
    fail "bad --tail value: $(cat "$work/err")"
echo "cli_flags_check: ok (7 programs: both value forms, unknown flags, missing values, --help)"
