#!/usr/bin/env bash
#
# tools/soak.sh [options] - run the soak pipeline (tools/soak.c, tools/soak.py) on the wall
# clock for a while, sample the runner's memory, and check every output (docs/soak.md).
#
#   --build DIR        build directory (default build/): bin/sundial, bin/soak, py/, bin-prism/
#   --seconds N        seconds of data (default 1800; whole 20 s cycles), plus ~15 s around
#   --runs LIST        comma-separated runs, each SDK-RUNNER: c-sundial, py-sundial, c-prism,
#                      py-prism (default c-sundial,py-sundial,py-prism); they run concurrently
#   --out DIR          where samples, logs and summaries go (default a new directory in /tmp)
#   --warmup S         RSS baseline taken after S seconds (default: a sixth of the run, 30..300)
#   --check            assert the goals: exact outputs, RSS drift after warm-up at most
#                      --max-drift percent (default 5), timer lateness p99 at most --max-p99 ms
#                      (default 50); exit 1 when a run misses one
#   --max-drift PCT, --max-p99 MS, --early-off (runs every pipeline without early firings),
#   --rss-limit-mb N   stop a runner whose RSS passes N MB (default 4096; the run then fails)
#   --py-state-cache-mb N  Beam Python's state cache (--max_cache_memory_usage_mb; its default
#                      0 keeps no user state across bundles, whatever cache token the runner sends)
#
# Each run starts its own runner on loopback (sundial serve --port 0 --clock wall, or Prism on
# a free port), runs the client against it, samples RSS (runner and client, from /proc) and
# the load average every 10 s into OUT/RUN.samples, and writes OUT/RUN.json: the client's
# summary plus the RSS figures. OUT/results.md is the table of all runs.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build"
seconds=1800
runs="c-sundial,py-sundial,py-prism"
out=""
warmup=""
check=0
max_drift=5
max_p99=50
early=""
rss_limit_mb=4096
py_cache=""
while [[ $# -gt 0 ]]; do
    case "$1" in
    --build) build="$(cd "$2" && pwd)" || exit 2; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --check) check=1; shift ;;
    --max-drift) max_drift="$2"; shift 2 ;;
    --max-p99) max_p99="$2"; shift 2 ;;
    --early-off) early="--early-off"; shift ;;
    --rss-limit-mb) rss_limit_mb="$2"; shift 2 ;;
    --py-state-cache-mb) py_cache="--state_cache_mb=$2"; shift 2 ;;
    *) echo "soak.sh: unknown argument \"$1\" (see the header of $0)" >&2; exit 2 ;;
    esac
done
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -lt 20 ]]; then
    echo "soak.sh: --seconds expects a whole number of at least 20, got \"$seconds\"" >&2
    exit 2
fi
if [[ -z "$warmup" ]]; then
    warmup=$((seconds / 6))
    [[ $warmup -lt 30 ]] && warmup=30
    [[ $warmup -gt 300 ]] && warmup=300
fi
[[ -n "$out" ]] || out="$(mktemp -d /tmp/soak.XXXXXX)"
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
py="$build/py/bin/python"
prism="$build/bin-prism/prism"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

rss_kb() { # VmRSS of a live process, or empty
    awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null
}

cpu_ticks() { # user + system CPU time of a live process in clock ticks, or empty
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null
}

# Start the runner of run $1 (sundial|prism); sets runner_pid and endpoint.
start_runner() {
    local kind="$1" name="$2"
    if [[ "$kind" == sundial ]]; then
        "$build/bin/sundial" serve --port 0 --clock wall >"$out/$name.runner.out" \
            2>"$out/$name.runner.log" &
        runner_pid=$!
        echo "$runner_pid" >>"$out/.pids"
        local line="" i
        for i in $(seq 1 300); do # its first line: "listening on HOST:PORT"
            line=$(head -n 1 "$out/$name.runner.out" 2>/dev/null)
            [[ "$line" == "listening on "* ]] && break
            kill -0 "$runner_pid" 2>/dev/null || break
            sleep 0.1
        done
        endpoint=""
        [[ "$line" == "listening on "* ]] && endpoint="${line#listening on }"
    else
        local port
        port=$(free_port)
        "$prism" --job_port "$port" --serve_http=false >"$out/$name.runner.log" 2>&1 &
        runner_pid=$!
        echo "$runner_pid" >>"$out/.pids"
        endpoint="localhost:$port"
        local i
        for i in $(seq 1 100); do
            (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
            sleep 0.1
        done
    fi
}

# One run: $1 = SDK-RUNNER. Writes OUT/RUN.samples, OUT/RUN.json, OUT/RUN.client.log.
one_run() {
    local name="$1" sdk="${1%%-*}" kind="${1#*-}"
    local runner_pid endpoint
    start_runner "$kind" "$name"
    if [[ -z "$endpoint" ]] || ! kill -0 "$runner_pid" 2>/dev/null; then
        echo "soak.sh: $name: the runner did not start (see $out/$name.runner.log)" >&2
        return 1
    fi
    local summary="$out/$name.summary.json"
    rm -f "$summary"
    if [[ "$sdk" == c ]]; then
        "$build/bin/soak" "--endpoint=$endpoint" "--seconds=$seconds" "--summary=$summary" \
            "--runner-name=$kind" "--fires=$out/$name.fires" $early >"$out/$name.client.out" 2>"$out/$name.client.log" &
    else
        (cd "$repo/tools" && PYTHONDONTWRITEBYTECODE=1 exec "$py" soak.py "--job_endpoint=$endpoint" "--seconds=$seconds" \
            "--summary=$summary" "--runner_name=$kind" "--fires=$out/$name.fires" $early $py_cache) \
            >"$out/$name.client.out" 2>"$out/$name.client.log" &
    fi
    local client_pid=$! t0
    echo "$client_pid" >>"$out/.pids"
    t0=$(date +%s)
    echo "t_s runner_rss_kb client_rss_kb load1" >"$out/$name.samples"
    local next=$t0 rss client_ticks=0 ticks
    while kill -0 "$client_pid" 2>/dev/null; do
        rss=$(rss_kb "$runner_pid")
        echo "$(($(date +%s) - t0)) ${rss:-0} $(rss_kb "$client_pid") $(cut -d' ' -f1 /proc/loadavg)" \
            >>"$out/$name.samples"
        if [[ -n "$rss" && $rss -gt $((rss_limit_mb * 1024)) ]]; then
            echo "soak.sh: $name: the runner's RSS passed ${rss_limit_mb} MB: stopping it" >&2
            echo "runner stopped: RSS over ${rss_limit_mb} MB" >>"$out/$name.runner.log"
            kill "$runner_pid" 2>/dev/null
        fi
        next=$((next + 10))
        while [[ $(date +%s) -lt $next ]] && kill -0 "$client_pid" 2>/dev/null; do
            ticks=$(cpu_ticks "$client_pid")
            client_ticks=${ticks:-$client_ticks}
            sleep 0.2
        done
    done
    wait "$client_pid"
    local rc=$?
    local runner_ticks hz
    runner_ticks=$(cpu_ticks "$runner_pid")
    hz=$(getconf CLK_TCK)
    echo "${runner_ticks:-0} $client_ticks $hz" >"$out/$name.cpu"
    kill "$runner_pid" 2>/dev/null
    wait "$runner_pid" 2>/dev/null
    [[ -s "$summary" ]] || echo "{\"sdk\":\"$sdk\",\"runner\":\"$kind\",\"exact\":false,\"error\":\"no summary (client exit $rc)\"}" >"$summary"
    python3 - "$summary" "$out/$name.samples" "$warmup" "$name" >"$out/$name.json" <<'EOF'
import json, statistics, sys
summary, samples, warmup, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
s = json.load(open(summary))
rows = []
for line in open(samples).read().splitlines()[1:]:
    f = line.split()
    if len(f) == 4:
        rows.append((int(f[0]), int(f[1]), int(f[2]), float(f[3])))
def med(v):
    return int(statistics.median(v)) if v else -1
after = [r for r in rows if r[0] >= warmup]
s["run"] = name
s["samples"] = len(rows)
s["rss_start_kb"] = rows[0][1] if rows else -1
# baseline: the median of the first three samples after warm-up; end: of the last three
s["rss_warm_kb"] = med([r[1] for r in after[:3]])
s["rss_end_kb"] = med([r[1] for r in after[-3:]])
s["rss_max_after_warm_kb"] = max([r[1] for r in after], default=-1)
w = s["rss_warm_kb"]
s["rss_drift_pct"] = round(100.0 * (s["rss_end_kb"] - w) / w, 1) if w > 0 else None
s["rss_max_drift_pct"] = round(100.0 * (s["rss_max_after_warm_kb"] - w) / w, 1) if w > 0 else None
s["client_rss_warm_kb"] = med([r[2] for r in after[:3]])
s["client_rss_end_kb"] = med([r[2] for r in after[-3:]])
loads = [r[3] for r in rows]
# timer lateness p99 in each sixth of the run (drift over time)
fires = []
try:
    for line in open(samples.replace(".samples", ".fires")):
        f = line.split()
        fires.append((int(f[0]), int(f[1])))
except OSError:
    pass
fires.sort()
if fires:
    lo, hi = fires[0][0], fires[-1][0] + 1
    segs = []
    for k in range(6):
        a, b = lo + (hi - lo) * k // 6, lo + (hi - lo) * (k + 1) // 6
        v = sorted(x[1] for x in fires if a <= x[0] < b)
        segs.append(v[min(len(v) - 1, int(0.99 * (len(v) - 1) + 0.5))] if v else None)
    s["lateness_p99_by_sixth_ms"] = segs
try:  # CPU seconds (user + system) of the runner and the client (with its SDK worker)
    rt, ct, hz = (int(x) for x in open(samples.replace(".samples", ".cpu")).read().split())
    s["runner_cpu_s"] = round(rt / hz, 1)
    s["client_cpu_s"] = round(ct / hz, 1)
except (OSError, ValueError):
    pass
s["load1_mean"] = round(sum(loads) / len(loads), 2) if loads else None
s["load1_max"] = max(loads) if loads else None
print(json.dumps(s))
EOF
    return 0
}

# Stopped (a test's timeout, ^C): stop the runners and clients this run started.
rm -f "$out/.pids"
stop_all() {
    [[ -f "$out/.pids" ]] && kill $(cat "$out/.pids") 2>/dev/null
    exit 1
}
trap stop_all TERM INT

IFS=',' read -r -a run_list <<<"$runs"
for r in "${run_list[@]}"; do
    case "$r" in
    c-sundial | c-prism) [[ -x "$build/bin/soak" ]] || { echo "soak.sh: $build/bin/soak is not built" >&2; exit 2; } ;;&
    py-sundial | py-prism) [[ -x "$py" ]] || { echo "soak.sh: no Beam Python venv at $build/py" >&2; exit 2; } ;;&
    *-sundial) [[ -x "$build/bin/sundial" ]] || { echo "soak.sh: $build/bin/sundial is not built" >&2; exit 2; } ;;
    *-prism) [[ -x "$prism" ]] || { echo "soak.sh: no Prism at $prism (tools/setup.sh installs it)" >&2; exit 2; } ;;
    *) echo "soak.sh: unknown run \"$r\" (c-sundial, py-sundial, c-prism, py-prism)" >&2; exit 2 ;;
    esac
done
echo "soak.sh: ${runs} for ${seconds} s of data (warm-up ${warmup} s), output in $out"
pids=()
for r in "${run_list[@]}"; do
    one_run "$r" &
    pids+=($!)
done
for p in "${pids[@]}"; do
    wait "$p"
done

python3 - "$out" "$check" "$max_drift" "$max_p99" "${run_list[@]}" <<'EOF'
import json, os, sys
out, check, max_drift, max_p99 = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3]), float(sys.argv[4])
runs = sys.argv[5:]
head = ("| run | RSS start / after warm-up / end (MB) | drift (max) | client RSS warm / end (MB) "
        "| timer lateness p50 / p99 / max (ms) | watermark lag p50 / p99 / max (ms) "
        "| windows (window-keys) | fires seen / quiet periods (extra, joined) | mismatches (windows, timers) "
        "| lateness p99 by sixth of the run (ms) | CPU s runner / client | load avg mean / max | exact |")
lines = [head, "|" + "---|" * (head.count("|") - 1)]
failed = []
def mb(kb):
    return "%.1f" % (kb / 1024.0) if isinstance(kb, int) and kb >= 0 else "-"
for r in runs:
    path = os.path.join(out, r + ".json")
    try:
        s = json.load(open(path))
    except (OSError, ValueError):
        s = {"exact": False, "error": "no result"}
    g = s.get
    lines.append("| %s | %s / %s / %s | %s%% (%s%%) | %s / %s | %s / %s / %s | %s / %s / %s | %s (%s) | %s / %s (%s, %s) | %s, %s | %s | %s / %s | %s / %s | %s |" % (
        r, mb(g("rss_start_kb")), mb(g("rss_warm_kb")), mb(g("rss_end_kb")), g("rss_drift_pct"),
        g("rss_max_drift_pct"), mb(g("client_rss_warm_kb")), mb(g("client_rss_end_kb")),
        g("lateness_p50_ms"), g("lateness_p99_ms"), g("lateness_max_ms"), g("wm_lag_p50_ms"),
        g("wm_lag_p99_ms"), g("wm_lag_max_ms"), g("windows"), g("window_keys"), g("fires_seen"),
        g("fires_expected"), g("fires_extra"), g("fires_joined"), g("window_mismatches"), g("fire_mismatches"),
        " ".join(str(x) for x in g("lateness_p99_by_sixth_ms") or []), g("runner_cpu_s"),
        g("client_cpu_s"), g("load1_mean"),
        g("load1_max"), "yes" if g("exact") else "NO" + (": " + g("error") if g("error") else "")))
    why = []
    if not g("exact"):
        why.append("outputs not exact" + (" (" + g("error") + ")" if g("error") else ""))
    d = g("rss_drift_pct")
    if d is None or d > max_drift:
        why.append("RSS drift %s%% > %s%%" % (d, max_drift))
    p = g("lateness_p99_ms")
    if p is None or p < 0 or p > max_p99:
        why.append("timer lateness p99 %s ms > %s ms" % (p, max_p99))
    if why:
        failed.append("%s: %s" % (r, "; ".join(why)))
table = "\n".join(lines) + "\n"
open(os.path.join(out, "results.md"), "w").write(table)
print(table)
for f in failed:
    print("soak.sh: goal missed: " + f)
sys.exit(1 if check and failed else 0)
EOF
