#!/usr/bin/env bash
#
# tools/bench_memory.sh [BUILD_DIR] [--sdk c,py,java] [--mib N] [--size BYTES] [--keys K]
#                       [--max-ratio R --allowance-mib A]
#
# The runner's peak resident size against the data in flight: one bundle of N MiB (default
# 256) of KV<varint key, bytes> elements, values of SIZE bytes (default 1 MiB) over K keys
# (default 256), into a GroupByKey, then every value checked downstream — from the C SDK
# (tools/bench_memory_c.c), Beam Python (tools/bench_memory_py.py, LOOPBACK) and Beam Java
# (tests/java's MemoryBenchTest, LOOPBACK in the test JVM). The runner is `sundial serve` on
# loopback, a process of its own (the SDK workers run in the clients' processes), so its peak is
# the runner's alone: VmHWM from /proc/PID/status, read after the job is done (Java: the
# runner is started by the test through a wrapper that reads it until the runner exits).
#
# Data in flight: the bytes of the bundle's encoded elements — for each element its varint
# key, the value's varint length and the value's bytes (each client prints the figure it
# made). The windowed-value header around each element on the Data stream (timestamp, window,
# pane: about 14 bytes) is not counted.
#
# The peak includes what the server holds before any job (its code, libraries, gRPC at rest:
# about 15 MiB), which no job can remove: --allowance-mib rest allows exactly that, the VmRSS
# measured before the job (Java: one second after the runner started, before the test's job
# arrives), instead of a fixed figure.
#
# Prints one row per SDK: SDK, bytes in flight, the runner's RSS at rest (before the job), its
# peak RSS, peak / in flight, and (peak - rest) / in flight. With --max-ratio R and
# --allowance-mib A (a number of MiB, or `rest`) it exits 1 unless every peak <= R x in flight
# + A (what the ctest test memory_in_flight asserts). 77 when an SDK cannot run (Beam or Maven
# missing).
#
# Environment: SUNDIAL_BIN (default BUILD_DIR/bin/sundial), and for Java the Maven
# repository BUILD_DIR/m2 and a copy of the setup's Maven output in BUILD_DIR/java.

set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$repo/build}"
[[ $# -gt 0 && "$1" != --* ]] && shift
build="$(cd "$build" && pwd)" || { echo "bench_memory: no build directory" >&2; exit 2; }
sdks=c,py,java mib=256 size=1048576 keys=256 max_ratio="" allowance=0
while [[ $# -gt 0 ]]; do
    case "$1" in
    --sdk) sdks="$2"; shift 2 ;;
    --mib) mib="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --keys) keys="$2"; shift 2 ;;
    --max-ratio) max_ratio="$2"; shift 2 ;;
    --allowance-mib) allowance="$2"; shift 2 ;;
    *) echo "usage: tools/bench_memory.sh [BUILD_DIR] [--sdk c,py,java] [--mib N] [--size BYTES]" \
        "[--keys K] [--max-ratio R --allowance-mib A]" >&2; exit 2 ;;
    esac
done
sundial="${SUNDIAL_BIN:-$build/bin/sundial}"
[[ -x "$sundial" ]] || { echo "bench_memory: $sundial is missing: build first" >&2; exit 2; }
count=$(( mib * 1048576 / size ))
(( count >= 1 )) || { echo "bench_memory: --mib $mib holds no value of $size bytes" >&2; exit 2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/sundial-bench-memory-XXXXXX")" || exit 2
server_pid=""
cleanup() {
    [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status" 2>/dev/null; }

# Start `sundial serve --port 0`; sets server_pid and endpoint.
start_server() {
    "$sundial" serve --port 0 >"$work/serve.out" 2>"$work/serve.err" &
    server_pid=$!
    endpoint=""
    for _ in $(seq 200); do
        endpoint="$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$work/serve.out")"
        [[ -n "$endpoint" ]] && return 0
        sleep 0.05
    done
    echo "bench_memory: sundial serve did not start: $(cat "$work/serve.err")" >&2
    return 1
}

stop_server() {
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
}

rows=() failed=0 notrun=0
# row SDK IN_FLIGHT REST_KIB PEAK_KIB
row() {
    local line
    line="$(awk -v s="$1" -v f="$2" -v r="$3" -v p="$4" -v mr="$max_ratio" -v a="$allowance" 'BEGIN {
        pb = p * 1024; rb = r * 1024
        verdict = ""
        allow = a == "rest" ? rb : a * 1048576
        if (mr != "") verdict = (pb <= mr * f + allow) ? "  ok" : "  OVER"
        printf "%-7s %12d %9.1f %9.1f %6.2f %8.2f%s", s, f, rb / 1048576, pb / 1048576, pb / f, (pb - rb) / f, verdict
    }')"
    rows+=("$line")
    echo "$line"
    [[ "$line" == *OVER ]] && failed=1
}

# Run a client against a fresh server; CLIENT args with @EP@ replaced by the endpoint.
run_client() {
    local sdk="$1"; shift
    start_server || return 1
    local rest args=() a
    rest="$(kib "$server_pid" VmRSS)"
    for a in "$@"; do args+=("${a//@EP@/$endpoint}"); done
    "${args[@]}" >"$work/$sdk.out" 2>"$work/$sdk.err"
    local rc=$?
    local peak
    peak="$(kib "$server_pid" VmHWM)"
    stop_server
    local inflight
    inflight="$(sed -n 's/^in_flight_bytes \([0-9]*\)$/\1/p' "$work/$sdk.out" | head -1)"
    if [[ $rc == 77 ]]; then
        echo "bench_memory: $sdk: NOT RUN: $(tail -1 "$work/$sdk.out")"
        notrun=1
        return 0
    fi
    if [[ $rc != 0 || -z "$inflight" ]] || ! grep -qx done "$work/$sdk.out"; then
        echo "bench_memory: $sdk: the run failed (exit $rc):" >&2
        tail -5 "$work/$sdk.err" >&2
        failed=1
        return 0
    fi
    row "$sdk" "$inflight" "$rest" "$peak"
}

run_java() {
    [[ -d "$build/m2" ]] && command -v mvn >/dev/null && command -v java >/dev/null || {
        echo "bench_memory: java: NOT RUN: Maven, java or $build/m2 missing (tools/setup.sh)"
        notrun=1
        return 0
    }
    [[ -f "$build/java/NOT-RUN" ]] && { echo "bench_memory: java: NOT RUN: $(cat "$build/java/NOT-RUN")"; notrun=1; return 0; }
    # The test starts the runner itself (BIN -job_port=N -serve_http=false); the wrapper runs
    # it as a child and keeps its VmRSS at start and its VmHWM, read every 20 ms until it exits.
    cat >"$work/runner" <<EOF
#!/usr/bin/env bash
"$sundial" "\$@" &
pid=\$!
trap 'kill -TERM \$pid 2>/dev/null' TERM INT
rest="" n=0
while kill -0 \$pid 2>/dev/null; do
    v=\$(awk '\$1 == "VmHWM:" { print \$2 }' /proc/\$pid/status 2>/dev/null)
    n=\$((n + 1))
    [[ -z "\$rest" && \$n -ge 50 ]] && rest=\$(awk '\$1 == "VmRSS:" { print \$2 }' /proc/\$pid/status 2>/dev/null)
    [[ -n "\$v" && -n "\$rest" ]] && echo "\$rest \$v" >"$work/java.hwm"
    sleep 0.02
done
wait \$pid
EOF
    chmod +x "$work/runner"
    mkdir -p "$work/java-home" "$work/java-logs"
    rm -rf "$work/java-target"
    [[ -d "$build/java/target" ]] && cp -r "$build/java/target" "$work/java-target"
    (cd "$work" && mvn -B -o -q -f "$repo/tests/java/pom.xml" \
        -Dmaven.repo.local="$build/m2" \
        -Dsundial.buildDir="$work/java-target" \
        -Dsundial.bin="$work/runner" \
        -Dsundial.home="$work/java-home" \
        -Dsundial.logDir="$work/java-logs" \
        -Dsundial.testTimeoutSeconds=600 \
        -Dsundial.groups=dev.sundial.beam.MemoryBench \
        -Dtest=MemoryBenchTest -DtrimStackTrace=false \
        -Dbench.count="$count" -Dbench.size="$size" -Dbench.keys="$keys" \
        -DargLine="-Xmx3g -Dbench.count=$count -Dbench.size=$size -Dbench.keys=$keys" \
        test) >"$work/java.mvn" 2>&1
    local report="$work/java-target/surefire-reports/dev.sundial.beam.MemoryBenchTest-output.txt"
    local xml="$work/java-target/surefire-reports/TEST-dev.sundial.beam.MemoryBenchTest.xml"
    local inflight
    inflight="$(sed -n 's/^in_flight_bytes \([0-9]*\)$/\1/p' "$report" 2>/dev/null | head -1)"
    if [[ -z "$inflight" || ! -f "$xml" ]] || grep -q '<failure\|<error' "$xml" || [[ ! -s "$work/java.hwm" ]]; then
        echo "bench_memory: java: the run failed:" >&2
        grep -m3 -A3 '<failure\|<error' "$xml" >&2 2>/dev/null || tail -20 "$work/java.mvn" >&2
        failed=1
        return 0
    fi
    local rest peak
    read -r rest peak <"$work/java.hwm"
    row java "$inflight" "$rest" "$peak"
}

echo "bench_memory: $count values of $size bytes over $keys keys in one bundle into a GroupByKey;"
echo "runner: $sundial serve (peak = VmHWM of that process alone); machine load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %12s %9s %9s %6s %8s\n' SDK in_flight rest_MiB peak_MiB ratio net_ratio
IFS=, read -r -a list <<<"$sdks"
for sdk in "${list[@]}"; do
    case "$sdk" in
    c) run_client c "$build/bin/bench_memory_c" --endpoint @EP@ --count "$count" --size "$size" --keys "$keys" ;;
    py)
        py="${SD_PYTHON:-$build/py/bin/python}"
        if [[ ! -x "$py" ]] || ! "$py" -c 'import apache_beam' 2>/dev/null; then
            echo "bench_memory: py: NOT RUN: no Beam Python at $py (tools/setup.sh)"
            notrun=1
        else
            run_client py "$py" "$repo/tools/bench_memory_py.py" @EP@ "$count" "$size" "$keys"
        fi
        ;;
    java) run_java ;;
    *) echo "bench_memory: unknown SDK $sdk (c, py, java)" >&2; exit 2 ;;
    esac
done
(( failed )) && exit 1
(( notrun )) && exit 77
exit 0
