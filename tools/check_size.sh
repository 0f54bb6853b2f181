#!/usr/bin/env bash
#
# tools/check_size.sh [REPO] - smoke alarms for size: no function over 150 lines (one step per
# function), and no C source file over 2,500 lines. The file bound is not a design rule: a file
# is one concept and may grow while it stays one (split along a concept's seam, never to fit a
# number); a file past the bound is a smell to look at, e.g. two concepts grown into one file. A function is counted
# from its opening brace in column 0 to the closing brace in column 0 (the layout .clang-format
# gives every function definition). Generated code lives in the build directory and is not
# checked. Prints each offender; exit 1 if any.

set -uo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$repo" || exit 2
max_file=2500
max_fn=150
mapfile -t files < <(find runner sdk-harness teststream tests tools proto \
    \( -name '*.c' -o -name '*.h' \) -type f 2>/dev/null | sort)
bad=0
for f in "${files[@]}"; do
    n=$(wc -l <"$f")
    if ((n > max_file)); then
        echo "check_size: $f has $n lines (the smell alarm is $max_file: is it still one concept?)"
        bad=$((bad + 1))
    fi
done
long=$(awk -v max="$max_fn" '
    FNR == 1 { start = 0; name = "" }
    /^[A-Za-z_].*\(/ { sig = $0 }
    /^\{/ { start = FNR; name = sig }
    /^\}/ && start > 0 {
        len = FNR - start + 1
        if (len > max) {
            sub(/\(.*/, "", name)
            printf "check_size: %s:%d: function %s has %d lines (at most %d)\n",
                FILENAME, start, name, len, max
        }
        start = 0
    }
' "${files[@]}")
if [[ -n "$long" ]]; then
    echo "$long"
    bad=$((bad + $(wc -l <<<"$long")))
fi
if ((bad)); then
    echo "check_size: $bad offenders"
    exit 1
fi
echo "check_size: ok (${#files[@]} files)"
