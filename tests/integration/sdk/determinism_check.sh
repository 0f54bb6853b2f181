#!/usr/bin/env bash
# Determinism as a test: an example of sdk-harness/examples/ run N times on the embedded runner
# (test mode: synthetic clock) with its schedule recorded gives byte-identical output (stdout
# and exit status) and a byte-identical schedule file every time. Some examples end by printing
# how much wall time the run took ("... took 48 ms ..."): that one number is the wall clock's,
# not the pipeline's, so it is masked before comparing; nothing else is.
# usage: determinism_check.sh BIN_DIR WORK_DIR RUNS EXAMPLE [ARGS...]
set -euo pipefail
bin=$1
work=$2
runs=$3
ex=$4
shift 4
dir="$work/determinism-$ex$(printf '%s' "$*" | tr -c 'a-z0-9' '_')"
rm -rf "$dir"
mkdir -p "$dir"
start=$(date +%s%N)
for i in $(seq 1 "$runs"); do
    set +e
    "$bin/$ex" "$@" --record-schedule="$dir/run.schedule" > "$dir/run.out" 2> "$dir/run.err"
    rc=$?
    set -e
    sed -i -E 's/took [0-9]+ ms/took (wall time) ms/g' "$dir/run.out"
    echo "exit $rc" >> "$dir/run.out"
    if [ "$i" = 1 ]; then
        [ "$rc" = 0 ] || { echo "$ex: run 1 failed ($rc):" >&2; cat "$dir/run.err" >&2; exit 1; }
        grep -q '^step 1 ' "$dir/run.schedule" || { echo "$ex: empty schedule" >&2; exit 1; }
        mv "$dir/run.out" "$dir/first.out"
        mv "$dir/run.schedule" "$dir/first.schedule"
        continue
    fi
    if ! cmp -s "$dir/first.out" "$dir/run.out"; then
        echo "$ex: run $i printed something else than run 1:" >&2
        diff -u "$dir/first.out" "$dir/run.out" >&2 || true
        exit 1
    fi
    if ! cmp -s "$dir/first.schedule" "$dir/run.schedule"; then
        echo "$ex: run $i recorded another schedule than run 1:" >&2
        diff -u "$dir/first.schedule" "$dir/run.schedule" | head -40 >&2 || true
        exit 1
    fi
    rm -f "$dir/run.schedule"
done
ms=$(( ($(date +%s%N) - start) / 1000000 ))
steps=$(grep -c '^step ' "$dir/first.schedule")
echo "$ex $*: $runs runs, identical output ($(wc -l < "$dir/first.out") lines) and schedule ($steps steps) in $ms ms"
rm -rf "$dir"
