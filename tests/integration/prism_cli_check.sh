#!/usr/bin/env bash
#
# prism_cli_check.sh BIN_DIR - `sundial` accepts Prism's command line, the way Beam's
# launchers spell it:
#   - Java's PrismRunner:            sundial --job_port=0 --serve_http=False
#   - Python's PrismRunner:          sundial --job_port 0 --log_level info --log_kind json
#                                            --serve_http=false
#   - separate-word booleans:        sundial --job_port 0 --serve_http False
#   - the subcommand form:           sundial serve --job_port 0
# Each must print `listening on 127.0.0.1:PORT` first and accept a TCP connection on PORT.
# `--idle_shutdown_timeout 300ms` with no job must exit 0 on its own within a few seconds.
# Bad values must exit 2 with a message naming the flag.

set -uo pipefail
bin="$1/sundial"
tmp="$(mktemp -d)"
pid=
cleanup() {
    if [[ -n "$pid" ]]; then
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "prism_cli_check: FAIL: $*" >&2; [[ -s "$tmp/err" ]] && tail -20 "$tmp/err" >&2; exit 1; }

[[ -x "$bin" ]] || fail "no executable $bin"

# Start sundial with the given arguments, wait for its first line, read PORT, connect.
check_listens() {
    local first="" port ticks=100
    # Empty the files here, not in the child's redirection: the child may truncate them
    # after this shell has already read the previous run's line.
    : >"$tmp/out"
    : >"$tmp/err"
    "$bin" "$@" >>"$tmp/out" 2>>"$tmp/err" </dev/null &
    pid=$!
    while ((ticks > 0)); do
        if [[ $(wc -l <"$tmp/out") -ge 1 ]]; then
            first="$(head -n 1 "$tmp/out")"
            break
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"
            fail "sundial $* exited with status $? before printing its first line"
        fi
        sleep 0.1
        ticks=$((ticks - 1))
    done
    [[ "$first" =~ ^listening\ on\ 127\.0\.0\.1:([0-9]+)$ ]] \
        || fail "sundial $*: first stdout line is '$first' (stdout: $(wc -c <"$tmp/out") bytes, $ticks ticks left), want 'listening on 127.0.0.1:PORT'"
    port="${BASH_REMATCH[1]}"
    [[ "$port" -gt 0 ]] || fail "sundial $*: announced port 0"
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null \
        || fail "sundial $*: nothing accepts connections on port $port"
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    local rc=$?
    pid=
    [[ $rc -eq 0 ]] || fail "sundial $*: exit status $rc after SIGTERM, want 0"
    echo "prism_cli_check: ok: sundial $* (port $port)"
}

check_listens --job_port=0 --serve_http=False
check_listens --job_port 0 --serve_http False
check_listens --job_port 0 --log_level info --log_kind json --serve_http=false
# Python's PrismRunner reads these lines as Go slog's JSON: it maps "level" through
# getattr(logging, level), so the level must be upper case ("info" names the function
# logging.info, and its log thread dies on the comparison, leaving our stdout undrained).
grep -q '^{"time":"[^"]*","level":"INFO",' "$tmp/err" \
    || fail "--log_kind json: no line with \"level\":\"INFO\": $(head -n 2 "$tmp/err")"
if grep '^{' "$tmp/err" | grep -v -q '"level":"\(DEBUG\|INFO\|WARN\|ERROR\)"'; then
    fail "--log_kind json: a level outside DEBUG/INFO/WARN/ERROR: $(grep '^{' "$tmp/err" | head -n 3)"
fi
echo "prism_cli_check: ok: --log_kind json writes slog's level names"
check_listens --job_port=0 --serve_http=false --web_port=0 --idle_shutdown_timeout=-1
check_listens -job_port=0 -serve_http
check_listens serve --job_port 0 --serve_http False

# SIGKILL (how Beam's Python PortableRunnerTest ends its runner): the private artifact
# directory, made under $TMPDIR, is still removed, by the janitor process (runner/base/fs.c).
: >"$tmp/out"
: >"$tmp/err"
mkdir -p "$tmp/tmpdir"
TMPDIR="$tmp/tmpdir" "$bin" --job_port 0 --serve_http=false >>"$tmp/out" 2>>"$tmp/err" </dev/null &
pid=$!
for _ in $(seq 50); do
    [[ -s "$tmp/out" ]] && break
    sleep 0.1
done
[[ -n "$(ls -A "$tmp/tmpdir")" ]] || fail "no artifact directory under TMPDIR while serving"
kill -KILL "$pid"
wait "$pid" 2>/dev/null
pid=
for _ in $(seq 50); do
    [[ -z "$(ls -A "$tmp/tmpdir")" ]] && break
    sleep 0.1
done
[[ -z "$(ls -A "$tmp/tmpdir")" ]] || fail "after SIGKILL the artifact directory is left: $(ls -A "$tmp/tmpdir")"
echo "prism_cli_check: ok: SIGKILL leaves no artifact directory"

# Idle shutdown: nothing is submitted, so the server must stop by itself.
start=$SECONDS
timeout 10 "$bin" --job_port 0 --idle_shutdown_timeout 300ms >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
[[ $rc -eq 0 ]] || fail "--idle_shutdown_timeout 300ms: exit status $rc, want 0 (124 = no shutdown)"
[[ "$(head -n 1 "$tmp/out")" =~ ^listening\ on ]] || fail "--idle_shutdown_timeout: no listening line"
echo "prism_cli_check: ok: idle shutdown after 300ms ($((SECONDS - start)) s)"

# Bad values: exit 2, and the message names the flag.
check_bad() {
    local flag="$1"
    shift
    timeout 10 "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    local rc=$?
    [[ $rc -eq 2 ]] || fail "sundial $*: exit status $rc, want 2"
    grep -q -- "$flag" "$tmp/err" || fail "sundial $*: message does not name $flag: $(cat "$tmp/err")"
    echo "prism_cli_check: ok: sundial $* -> 2: $(head -n 1 "$tmp/err")"
}
check_bad --job_port --job_port=abc
check_bad --job_port --job_port 70000
check_bad --job_port --job_port
check_bad --web_port --web_port=-1
check_bad --serve_http --serve_http=maybe
check_bad --idle_shutdown_timeout --idle_shutdown_timeout=5q
check_bad --idle_shutdown_timeout --idle_shutdown_timeout 1h30
check_bad --log_level --log_level=loud
check_bad --log_kind --log_kind=xml
check_bad --no_such_flag --no_such_flag=1
check_bad --job_port serve --job_port=x
echo "prism_cli_check: ok"
