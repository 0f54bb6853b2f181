# tests/integration/ts/lib/serve.sh - start and stop `sundial serve` for integration tests.
#
# Sourced (not executed) by the drivers in tests/integration/ts/. It owns the whole life
# of one job server per driver run:
#
#   sd_serve_start BIN LOGDIR   start `BIN serve --port 0`, wait for its first stdout line
#                               "listening on 127.0.0.1:PORT"; sets SD_SERVE_PID,
#                               SD_SERVE_PORT, SD_SERVE_ENDPOINT (127.0.0.1:PORT).
#   sd_serve_alive              true while the server process is running.
#   sd_serve_stop               SIGTERM, then SIGKILL after SD_SERVE_STOP_GRACE seconds;
#                               sets SD_SERVE_EXIT (its exit status) and SD_SERVE_KILLED.
#   sd_serve_dump_log [LINES]   print the tail of the server's stderr log.
#   sd_run_bounded SECS CMD...  run CMD under `timeout`, in the background so that a signal
#                               to the driver is handled at once; returns CMD's status
#                               (124 on timeout).
#   sd_install_cleanup          stop the server and any bounded command on EXIT/INT/TERM.
#   sd_require_ts_sdk BUILD     fail with the fix when BUILD/ts/node_modules is missing.
#
# Knobs (environment): SD_SERVE_START_TIMEOUT (20 s), SD_SERVE_STOP_GRACE (10 s).
# Everything stays on loopback: the server is asked for an ephemeral port and must announce
# 127.0.0.1.

SD_SERVE_PID=
SD_SERVE_PORT=
SD_SERVE_ENDPOINT=
SD_SERVE_EXIT=
SD_SERVE_KILLED=0
SD_SERVE_STDOUT=
SD_SERVE_STDERR=
SD_BOUNDED_PID=

sd_log() { printf '%s: %s\n' "${SD_LOG_TAG:-sundial-it}" "$*" >&2; }

# True while pid $1 exists and is not a zombie (an exited child we have not reaped yet).
sd__pid_running() {
    local pid="$1" stat
    [[ -n "$pid" ]] || return 1
    if [[ -r "/proc/$pid/stat" ]]; then
        stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
        stat="${stat##*) }"
        [[ "${stat:0:1}" != "Z" && "${stat:0:1}" != "X" ]]
    else
        kill -0 "$pid" 2>/dev/null
    fi
}

sd_serve_alive() { sd__pid_running "$SD_SERVE_PID"; }

sd_serve_dump_log() {
    local lines="${1:-200}"
    if [[ -n "$SD_SERVE_STDERR" && -s "$SD_SERVE_STDERR" ]]; then
        printf -- '----- sundial stderr (last %s lines of %s) -----\n' \
            "$lines" "$SD_SERVE_STDERR" >&2
        tail -n "$lines" "$SD_SERVE_STDERR" >&2
        printf -- '----- end of sundial stderr -----\n' >&2
    else
        sd_log "sundial wrote nothing to stderr${SD_SERVE_STDERR:+ ($SD_SERVE_STDERR)}"
    fi
}

sd_serve_start() {
    local bin="$1" logdir="$2"
    local timeout="${SD_SERVE_START_TIMEOUT:-20}"
    local ticks=$((timeout * 10)) first=""

    if [[ ! -f "$bin" || ! -x "$bin" ]]; then
        sd_log "error: sundial binary not found or not executable: $bin" \
            "(build the 'sundial' target first)"
        return 1
    fi
    mkdir -p "$logdir" || { sd_log "error: cannot create log dir $logdir"; return 1; }
    SD_SERVE_STDOUT="$logdir/sundial.stdout"
    SD_SERVE_STDERR="$logdir/sundial.stderr"
    : >"$SD_SERVE_STDOUT"
    : >"$SD_SERVE_STDERR"

    # Own process group (setsid), so that stopping it also reaches anything it spawned.
    # Without job control a background child is not a group leader, so setsid runs the
    # server in place and $! stays its pid; with job control it is a leader already.
    if [[ $- != *m* ]] && command -v setsid >/dev/null 2>&1; then
        setsid "$bin" serve --port 0 >"$SD_SERVE_STDOUT" 2>"$SD_SERVE_STDERR" </dev/null &
    else
        "$bin" serve --port 0 >"$SD_SERVE_STDOUT" 2>"$SD_SERVE_STDERR" </dev/null &
    fi
    SD_SERVE_PID=$!
    SD_SERVE_KILLED=0
    SD_SERVE_EXIT=

    while ((ticks > 0)); do
        # Only a complete (newline-terminated) first line counts.
        if [[ $(wc -l <"$SD_SERVE_STDOUT") -ge 1 ]]; then
            first="$(head -n 1 "$SD_SERVE_STDOUT")"
            if [[ "$first" =~ ^listening\ on\ 127\.0\.0\.1:([0-9]+)$ ]]; then
                SD_SERVE_PORT="${BASH_REMATCH[1]}"
                SD_SERVE_ENDPOINT="127.0.0.1:$SD_SERVE_PORT"
                sd_log "sundial (pid $SD_SERVE_PID) listening on $SD_SERVE_ENDPOINT"
                return 0
            fi
            sd_log "error: sundial's first stdout line is '$first'," \
                "expected 'listening on 127.0.0.1:PORT'"
            sd_serve_stop
            sd_serve_dump_log 200
            return 1
        fi
        if ! sd_serve_alive; then
            wait "$SD_SERVE_PID" 2>/dev/null
            SD_SERVE_EXIT=$?
            sd_log "error: sundial exited with status $SD_SERVE_EXIT before announcing its port"
            SD_SERVE_PID=
            sd_serve_dump_log 200
            return 1
        fi
        sleep 0.1
        ticks=$((ticks - 1))
    done
    sd_log "error: sundial printed no 'listening on 127.0.0.1:PORT' line within ${timeout} s" \
        "(is stdout flushed after that line?)"
    sd_serve_stop
    sd_serve_dump_log 200
    return 1
}

# Send signal $1 to the server: to its whole process group when it leads one.
sd__signal_server() {
    local sig="$1" pid="$2" stat fields
    if [[ -r "/proc/$pid/stat" ]]; then
        stat="$(cat "/proc/$pid/stat" 2>/dev/null)"
        read -r -a fields <<<"${stat##*) }"
        if [[ "${fields[2]:-}" == "$pid" ]]; then
            kill "-$sig" -- "-$pid" 2>/dev/null
            return
        fi
    fi
    kill "-$sig" "$pid" 2>/dev/null
}

sd_serve_stop() {
    local pid="$SD_SERVE_PID" grace="${SD_SERVE_STOP_GRACE:-10}" ticks
    [[ -n "$pid" ]] || return 0
    SD_SERVE_PID=
    if sd__pid_running "$pid"; then
        sd__signal_server TERM "$pid"
        ticks=$((grace * 10))
        while ((ticks > 0)) && sd__pid_running "$pid"; do
            sleep 0.1
            ticks=$((ticks - 1))
        done
        if sd__pid_running "$pid"; then
            sd_log "warning: sundial (pid $pid) still running ${grace} s after SIGTERM;" \
                "sending SIGKILL"
            SD_SERVE_KILLED=1
        fi
    fi
    # Also reaps anything the server left behind in its group. The (possibly zombie)
    # leader is not waited for yet, so its pid, and so the group id, cannot be reused.
    sd__signal_server KILL "$pid"
    wait "$pid" 2>/dev/null
    SD_SERVE_EXIT=$?
    return 0
}

sd_run_bounded() {
    local secs="$1" rc
    shift
    timeout --kill-after=10 "$secs" "$@" &
    SD_BOUNDED_PID=$!
    wait "$SD_BOUNDED_PID"
    rc=$?
    SD_BOUNDED_PID=
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        sd_log "error: command did not finish within ${secs} s and was stopped:" \
            "$(printf '%q ' "$@" | cut -c1-160)"
    fi
    return "$rc"
}

sd__cleanup() {
    if [[ -n "$SD_BOUNDED_PID" ]]; then
        kill -TERM "$SD_BOUNDED_PID" 2>/dev/null
        wait "$SD_BOUNDED_PID" 2>/dev/null
        SD_BOUNDED_PID=
    fi
    sd_serve_stop
}

sd_install_cleanup() {
    trap 'sd__cleanup' EXIT
    trap 'sd_log "interrupted"; exit 130' INT
    trap 'sd_log "terminated"; exit 143' TERM
}

sd_require_ts_sdk() {
    local build="$1"
    if [[ ! -f "$build/ts/node_modules/apache-beam/package.json" ||
          ! -f "$build/ts/node_modules/mocha/package.json" ]]; then
        sd_log "error: the Beam TypeScript SDK is not installed in $build/ts/node_modules;" \
            "run tools/setup.sh $build"
        return 1
    fi
    if ! command -v node >/dev/null 2>&1; then
        sd_log "error: node is not installed; run tools/setup.sh $build"
        return 1
    fi
}
