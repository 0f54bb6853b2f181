#!/usr/bin/env bash
# The README demo, checked: build/bin/wordcount gives exact counts on the embedded runner, on
# `sundial serve` (loopback worker), and on `sundial serve` starting it as a process worker; the
# jobs carry the pipeline's name.
# usage: wordcount_check.sh BIN_DIR DATA_DIR
set -euo pipefail
bin=$1
data=$2
out=$(mktemp)
serve_out=$(mktemp)
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -f "$out" "$serve_out"
}
trap cleanup EXIT

"$bin/wordcount" "$data/hamlet.txt" > "$out"
diff -u "$data/hamlet.expected" "$out"

"$bin/sundial" serve --port 0 > "$serve_out" &
server=$!
for _ in $(seq 1 100); do
    if grep -q '^listening on ' "$serve_out"; then break; fi
    sleep 0.05
done
endpoint=$(sed -n 's/^listening on //p' "$serve_out" | head -1)
[ -n "$endpoint" ] || { echo "sundial serve did not start" >&2; exit 1; }

"$bin/wordcount" "$data/hamlet.txt" --endpoint="$endpoint" > "$out"
diff -u "$data/hamlet.expected" "$out"
"$bin/wordcount" "$data/hamlet.txt" --endpoint="$endpoint" --process > "$out"
diff -u "$data/hamlet.expected" "$out"
# A job is named after its pipeline (sd_pipeline_create("wordcount")).
if [ -x "$bin/sundialctl" ]; then
    names=$("$bin/sundialctl" --endpoint "$endpoint" jobs | awk 'NR > 1 { print $3 }' | sort -u)
    [ "$names" = "wordcount" ] || { echo "job names: $names (want wordcount)" >&2; exit 1; }
fi
echo "wordcount: embedded, serve+loopback and serve+process all exact; jobs named wordcount"
