#!/usr/bin/env bash
#
# tools/fuzz.sh [BUILD_DIR [SECONDS [TARGET...]]] - build and run the libFuzzer targets.
#
#   1. configure BUILD_DIR (default build-fuzz) with clang, -DSD_FUZZ=ON (every library
#      instrumented, ASan+UBSan on) and warnings as errors; build only the fuzz targets;
#   2. run each TARGET (default: every tests/fuzz/fuzz_*.c) for SECONDS (default 30) on a
#      fresh copy of its seeds, tests/fuzz/corpus/TARGET/ and the inputs of past findings,
#      tests/fuzz/regressions/TARGET/ (neither is ever modified);
#   3. print executions, executions per second and the result per target (libFuzzer's whole
#      output stays in BUILD_DIR/fuzz-logs/TARGET.log). A crash, leak, sanitizer report or
#      per-input timeout (25 s) leaves its input in BUILD_DIR/fuzz-artifacts/ and makes the
#      script exit 1 after the last target.
#
# libFuzzer options: -timeout=25 (a unit slower than that is a finding), -rss_limit_mb=2560
# (also the largest single malloc), -reload=0 (one process per corpus, so libFuzzer's
# once-a-second re-read of the corpus directory only cost time); leak detection stays on (LSan
# runs when an input frees less than it allocates, and at exit).
#
# SD_FUZZ_RUNS=N runs each target for N executions instead (a campaign); SECONDS, when given
# as well, still caps each target's run, so a campaign that cannot finish stops with its stats;
# SD_FUZZ_KEEP=1 keeps the grown corpora in BUILD_DIR/fuzz-corpus/TARGET/; SD_FUZZ_RESUME=1
# starts each target from its kept corpus as well as its seeds, so a campaign longer than one
# sitting runs in parts (libFuzzer's state between parts is the corpus; the executions add up).
# SD_FUZZ_SANITIZE chooses the sanitizers (default address,undefined; `undefined` alone runs
# about three times as many inputs a second, without ASan's memory checks or leak detection:
# give it its own BUILD_DIR, and replay its corpus in an ASan build afterwards); SD_FUZZ_ARGS
# adds libFuzzer options (e.g. -entropic_scale_per_exec_time=1, which favours fast inputs).
# Reproduce a finding with `BUILD_DIR/bin/TARGET BUILD_DIR/fuzz-artifacts/<file>`.

set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${1:-build-fuzz}"
seconds="${2:-30}"
seconds_given=$(($# >= 2))
shift $(($# > 2 ? 2 : $#))
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    for f in tests/fuzz/fuzz_*.c; do
        targets+=("$(basename "$f" .c)")
    done
fi

cc="${CC:-clang}"
if ! command -v "$cc" >/dev/null || ! "$cc" --version | grep -q clang; then
    echo "fuzz.sh: libFuzzer needs clang (CC=$cc is not clang)" >&2
    exit 2
fi
if [[ -f "$build_dir/CMakeCache.txt" ]] &&
    ! grep -q '^CMAKE_C_COMPILER:.*clang' "$build_dir/CMakeCache.txt"; then
    echo "fuzz.sh: $build_dir was configured with another compiler; use a fresh directory" >&2
    exit 2
fi

sanitize="${SD_FUZZ_SANITIZE:-address,undefined}"
read -r -a extra_args <<<"${SD_FUZZ_ARGS:-}"
echo "fuzz.sh: configure ($build_dir, clang, SD_FUZZ=ON, -fsanitize=$sanitize)"
CC="$cc" cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSD_WERROR=ON \
    -DSD_FUZZ=ON -DSD_SANITIZE="$sanitize" >/dev/null
echo "fuzz.sh: build ${targets[*]}"
cmake --build "$build_dir" -j2 --target "${targets[@]}" >/dev/null

artifacts="$build_dir/fuzz-artifacts"
logs="$build_dir/fuzz-logs"
mkdir -p "$artifacts" "$logs"
work_root="$(mktemp -d "${TMPDIR:-/tmp}/sundial-fuzz-XXXXXX")"
trap 'rm -rf "$work_root"' EXIT

if [[ -n "${SD_FUZZ_RUNS:-}" ]]; then
    limit=(-runs="$SD_FUZZ_RUNS")
    what="$SD_FUZZ_RUNS executions"
    if ((seconds_given)); then
        limit+=(-max_total_time="$seconds")
        what+=" (at most $seconds s)"
    fi
else
    limit=(-max_total_time="$seconds")
    what="$seconds s"
fi

failed=0
summary=()
for t in "${targets[@]}"; do
    bin="$build_dir/bin/$t"
    work="$work_root/$t"
    mkdir -p "$work"
    kept=()
    if [[ "${SD_FUZZ_RESUME:-0}" == 1 ]]; then
        kept=("$build_dir/fuzz-corpus/$t")
    fi
    for seeds in "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t" "${kept[@]}"; do
        if [[ -d "$seeds" ]]; then
            cp -r "$seeds/." "$work/"
        fi
    done
    log="$logs/$t.log"
    echo "fuzz.sh: $t for $what"
    start=$SECONDS
    rc=0
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}" \
        "$bin" "${limit[@]}" -timeout=25 -rss_limit_mb=2560 -reload=0 -print_final_stats=1 \
        "${extra_args[@]}" -artifact_prefix="$artifacts/$t-" "$work" >"$log" 2>&1 || rc=$?
    took=$((SECONDS - start))
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1)"
    if [[ $rc -ne 0 ]]; then
        failed=1
        result="FAILED (exit $rc)"
        echo "fuzz.sh: $t failed; its log:" >&2
        grep -v '^#[0-9]' "$log" | tail -60 >&2
    else
        result=ok
    fi
    summary+=("$(printf '%-16s %12s execs %8s exec/s %5s s  %-9s %s' "$t" "${execs:-?}" \
        "${rate:-?}" "$took" "${cov:-}" "$result")")
    if [[ "${SD_FUZZ_KEEP:-0}" == 1 ]]; then
        mkdir -p "$build_dir/fuzz-corpus"
        rm -rf "$build_dir/fuzz-corpus/$t"
        mv "$work" "$build_dir/fuzz-corpus/$t"
    fi
done

echo "fuzz.sh: summary"
printf '  %s\n' "${summary[@]}"
if [[ $failed -ne 0 ]]; then
    echo "fuzz.sh: FAILED: inputs are in $artifacts/" >&2
    exit 1
fi
echo "fuzz.sh: ok"
