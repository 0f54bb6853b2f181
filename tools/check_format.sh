#!/usr/bin/env bash
#
# tools/check_format.sh [REPO] [--fix] - every C file of ours is formatted as .clang-format says
# (STYLE.md §9). Checks with clang-format 14 (Debian 12's), the version the style was written
# against: another version formats some constructs differently, so it is not used. Prints each
# file that differs with the first lines of the difference; exit 1 if any. --fix rewrites the
# files in place instead.
#
# The files: runner/, sdk-harness/, teststream/, tests/, tools/ and proto/pb.h (the generated
# protobuf-c code lives in the build directory and is never checked).

set -uo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
fix=0
[[ "${2:-}" == "--fix" ]] && fix=1
cd "$repo" || exit 2
cf=$(command -v clang-format-14 || true)
if [[ -z "$cf" ]]; then
    echo "check_format: clang-format-14 not found (tools/setup.sh installs clang-format)" >&2
    exit 2
fi
mapfile -t files < <(find runner sdk-harness teststream tests tools proto \
    \( -name '*.c' -o -name '*.h' \) -type f 2>/dev/null | sort)
if ((fix)); then
    "$cf" -i --style=file "${files[@]}"
    echo "check_format: formatted ${#files[@]} files"
    exit 0
fi
bad=0
for f in "${files[@]}"; do
    if ! diff -q "$f" <("$cf" --style=file "$f") >/dev/null; then
        echo "check_format: $f is not formatted (tools/check_format.sh . --fix):"
        diff -u "$f" <("$cf" --style=file "$f") | sed -n '3,12p'
        bad=$((bad + 1))
    fi
done
if ((bad)); then
    echo "check_format: $bad of ${#files[@]} files differ from .clang-format"
    exit 1
fi
echo "check_format: ok (${#files[@]} files)"
