#!/usr/bin/env bash
#
# tools/conformance.sh [python|java|go|all] [BUILD_DIR] - Beam's own runner suites against
# Sundial and against Prism in the same run, side by side; writes docs/conformance.md.
#
#   python  tools/python_suite.sh: prism_runner_test.py (PrismRunnerTest) and the SDK's
#           TestStream / user state / trigger tests and its ValidatesRunner tests (vr), on
#           Sundial then on Prism;
#   java    tools/java_suite.sh: the Java ValidatesRunner suite (when tests/java exists);
#   go      tools/go_suite.sh: Beam's Go SDK tests (primitives, wordcount, synthetic,
#           regression) in both filter modes (--runner=prism and --runner=universal), on
#           Sundial then on Prism; its rows go to a section of their own in docs/conformance.md
#           (between the go:begin/go:end markers), which the other modes keep as it is;
#   all     python and java (the default).
#
# Every suite runs whole, without the sickbay (known failures count as failures here). The
# report gives, per suite and runner, passed/failed/skipped and the wall time, the ratio of
# wall times (Sundial / Prism), and every Sundial failure with its first error line. A suite
# that cannot run (no venv, no Prism, no Maven repository) is reported as NOT RUN.
# BUILD_DIR defaults to build; run tools/setup.sh and build Sundial there first.

set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
which="${1:-all}"
build_dir="${2:-build}"
case "$which" in python|java|go|all) ;; *) echo "usage: tools/conformance.sh [python|java|go|all] [BUILD_DIR]" >&2; exit 2 ;; esac
report="$repo_root/docs/conformance.md"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The Go section of the report (kept when the other modes rewrite the rest).
go_section() { sed -n '/^<!-- go:begin -->$/,/^<!-- go:end -->$/p' "$report" 2>/dev/null; }

if [[ "$which" == go ]]; then
    go_rows=()
    go_failures=()
    for mode in prism universal; do
        for runner in sundial prism; do
            log="$tmp/go-$mode-$runner.log"
            start=$(date +%s.%N)
            GO_SUITE_SICKBAY=0 bash "$repo_root/tools/go_suite.sh" "$build_dir" "$runner" "$mode" >"$log" 2>&1
            end=$(date +%s.%N)
            secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
            line=$(grep -E "^go_suite: ($runner $mode:|NOT RUN)" "$log" | tail -1)
            if grep -q "NOT RUN" <<<"$line"; then
                go_rows+=("| go $mode | $runner | NOT RUN: ${line#*NOT RUN: } | | | $secs |")
                echo "conformance: go $mode on $runner: NOT RUN"
                continue
            fi
            p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+'); f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+')
            s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+')
            go_rows+=("| go $mode | $runner | ${p:-?} | ${f:-?} | ${s:-?} | $secs |")
            echo "conformance: go $mode on $runner: ${p:-?} passed, ${f:-?} failed, ${s:-?} skipped in $secs s"
            while IFS= read -r fl; do go_failures+=("- go $mode on $runner: ${fl#go_suite: }"); done \
                < <(grep -E "^go_suite: (FAILED|NOISE)" "$log" | cut -c1-300)
        done
    done
    {
        echo "<!-- go:begin -->"
        echo "## Beam's Go SDK tests"
        echo
        echo "Written by \`tools/conformance.sh go\` on $(date -u +%Y-%m-%dT%H:%MZ) ($(nproc) cores), Sundial at"
        echo "$(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo '?'): Beam's Go SDK v2.77.0 test binaries (go/test/integration/"
        echo "primitives, wordcount, synthetic and go/test/regression) against each runner on loopback,"
        echo "LOOPBACK environment, TestOomParDo skipped; \`prism\` applies Prism's filter list, \`universal\`"
        echo "none. TestDrain runs on Sundial in universal mode only (drained by tools/go_suite.sh; Prism has"
        echo "no Drain). Everything runs whole here (the ctest runs leave out tests/go/sickbay.txt)."
        echo
        echo "| suite | runner | passed | failed | skipped | wall s |"
        echo "| --- | --- | --- | --- | --- | --- |"
        printf '%s\n' "${go_rows[@]}"
        echo
        echo "Failures and noise (first line):"
        echo
        if [[ ${#go_failures[@]} -eq 0 ]]; then echo "None."; else printf '%s\n' "${go_failures[@]}"; fi
        echo "<!-- go:end -->"
    } >"$tmp/go.md"
    if [[ -f "$report" ]] && grep -q '^<!-- go:begin -->$' "$report"; then
        awk -v f="$tmp/go.md" '/^<!-- go:begin -->$/ { while ((getline l < f) > 0) print l; skip = 1; next }
             /^<!-- go:end -->$/ { skip = 0; next } !skip' "$report" >"$tmp/report.md"
    else
        { cat "$report" 2>/dev/null; echo; cat "$tmp/go.md"; } >"$tmp/report.md"
    fi
    cp "$tmp/report.md" "$report"
    echo "conformance: wrote the Go section of $report"
    exit 0
fi
kept_go="$(go_section)"

rows=()
failures=()
run_one() { # run_one KIND SUITE RUNNER: appends a row; Sundial failures go to failures[]
    local kind="$1" suite="$2" runner="$3" log="$tmp/$1-$2-$3.log" start end secs line
    start=$(date +%s.%N)
    if [[ "$kind" == python ]]; then
        PY_SUITE_SICKBAY=0 bash "$repo_root/tools/python_suite.sh" "$build_dir" "$runner" "$suite" >"$log" 2>&1
    else
        bash "$repo_root/tools/java_suite.sh" "$build_dir" "$runner" >"$log" 2>&1
    fi
    end=$(date +%s.%N)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    line=$(grep -E "^(python|java)_suite: ($runner|NOT RUN)" "$log" | grep -E "passed|NOT RUN" | tail -1)
    if grep -q "NOT RUN" <<<"$line"; then
        rows+=("| $kind $suite | $runner | NOT RUN: ${line#*NOT RUN: } | | | $secs |")
        echo "conformance: $kind $suite on $runner: NOT RUN"
        return
    fi
    local p f s e
    p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+'); f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+')
    s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+'); e=$(grep -oE '[0-9]+ errors' <<<"$line" | grep -oE '[0-9]+')
    rows+=("| $kind $suite | $runner | ${p:-?} | $(( ${f:-0} + ${e:-0} )) | ${s:-?} | $secs |")
    echo "conformance: $kind $suite on $runner: ${p:-?} passed, $(( ${f:-0} + ${e:-0} )) failed, ${s:-?} skipped in $secs s"
    eval "secs_${kind}_${suite}_${runner}=$secs"
    if [[ "$runner" == sundial ]]; then
        while IFS= read -r fl; do failures+=("- $kind $suite: ${fl#*FAILED }"); done \
            < <(grep -E "^(python|java)_suite: FAILED" "$log" | cut -c1-400)
    fi
}

suites=()
[[ "$which" == python || "$which" == all ]] && suites+=("python prism" "python sdk" "python vr")
[[ "$which" == java || "$which" == all ]] && suites+=("java validatesrunner")
for su in "${suites[@]}"; do
    read -r kind suite <<<"$su"
    if [[ "$kind" == java && ! -f "$repo_root/tools/java_suite.sh" ]]; then
        rows+=("| java $suite | both | NOT RUN: no tools/java_suite.sh | | | |")
        continue
    fi
    run_one "$kind" "$suite" sundial
    run_one "$kind" "$suite" prism
done

{
    echo "# Beam's runner suites: Sundial and Prism side by side"
    echo
    echo "Written by \`tools/conformance.sh $which\` on $(date -u +%Y-%m-%dT%H:%MZ) ($(nproc) cores)."
    echo "Sundial: this tree ($(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo '?'));"
    echo "Prism: \`go install github.com/apache/beam/sdks/v2/go/cmd/prism@v2.77.0\`; SDKs: apache-beam 2.77.0 (PyPI), Beam Java 2.73.0."
    echo "Every suite runs whole here (the ctest runs leave out tests/python/sickbay.txt)."
    echo
    echo "| suite | runner | passed | failed | skipped | wall s |"
    echo "| --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
    echo
    echo "Wall-time ratio (Sundial / Prism):"
    for su in "${suites[@]}"; do
        read -r kind suite <<<"$su"
        a="secs_${kind}_${suite}_sundial"; b="secs_${kind}_${suite}_prism"
        if [[ -n "${!a:-}" && -n "${!b:-}" ]]; then
            echo "- $kind $suite: $(awk -v a="${!a}" -v b="${!b}" 'BEGIN { printf "%.2f", a / b }')"
        fi
    done
    echo
    echo "## Sundial failures (first error line)"
    echo
    if [[ ${#failures[@]} -eq 0 ]]; then echo "None."; else printf '%s\n' "${failures[@]}"; fi
    if [[ -n "$kept_go" ]]; then echo; printf '%s\n' "$kept_go"; fi
} >"$report"
echo "conformance: wrote $report"
