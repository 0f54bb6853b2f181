#!/usr/bin/env bash
#
# tools/check_size.sh [REPO] - one concern per file, one step per function (issue 14): no C
# source file of ours over 1,200 lines and no function over 150 lines. A function is counted
# from its opening brace in column 0 to the closing brace in column 0 (the layout .clang-format
# gives every function definition). Generated code lives in the build directory and is not
# checked. Prints each offender; exit 1 if any.

set -uo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$repo" || exit 2
max_file=1200
max_fn=150
mapfile -t files < <(find runner sdk-harness teststream tests tools proto \
    \( -name '*.c' -o -name '*.h' \) -type f 2>/dev/null | sort)
bad=0
for f in "${files[@]}"; do
    n=$(wc -l <"$f")
    if ((n > max_file)); then
        echo "check_size: $f has $n lines (at most $max_file: split it along its seams)"
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
