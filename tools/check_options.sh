#!/usr/bin/env bash
#
# tools/check_options.sh SUNDIAL_BINARY [REPO] - the runner's option table (`sundial
# --list-options`, runner/jobservice/options.c) names exactly the pipeline options the runner
# reads: every "sundial_NAME" or "beam:option:sundial_NAME:v1" string in runner/ (outside the
# table itself and the output tags of runner/urns/urns.h) has a row, and every row is read
# somewhere. The Python package declares its SundialOptions from that table, so this is what
# keeps them from drifting.
set -uo pipefail
bin="${1:?usage: check_options.sh SUNDIAL_BINARY [REPO]}"
repo="${2:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"

table="$("$bin" --list-options)" || { echo "check_options: $bin --list-options failed" >&2; exit 1; }
listed="$(printf '%s\n' "$table" | grep -o '"name": "sundial_[a-z0-9_]*"' |
    sed 's/"name": "\(.*\)"/\1/' | sort -u)"
[[ -n "$listed" ]] || { echo "check_options: the table lists no option" >&2; exit 1; }
read_in_code="$(cd "$repo" && grep -rhoE '"(beam:option:)?sundial_[a-z0-9_]+(:v1)?"' runner \
    --include='*.c' --include='*.h' --exclude=options.c --exclude=urns.h |
    sed -E 's/"(beam:option:)?(sundial_[a-z0-9_]+)(:v1)?"/\2/' | sort -u)"
# Output tags (SD_GBK_LATE_OUTPUT_TAG "sundial_late", ...) are names, not options.
tags="$(sed -n 's/^#define SD_[A-Z_]*_TAG "\(sundial_[a-z0-9_]*\)".*/\1/p' "$repo/runner/urns/urns.h")"
read_in_code="$(comm -23 <(printf '%s\n' "$read_in_code") <(printf '%s\n' "$tags" | sort -u))"

bad=0
for name in $read_in_code; do
    grep -qx "$name" <<<"$listed" || {
        echo "check_options: runner/ reads $name, which runner/jobservice/options.c does not list" >&2
        bad=1
    }
done
for name in $listed; do
    grep -qx "$name" <<<"$read_in_code" || {
        echo "check_options: options.c lists $name, which nothing in runner/ reads" >&2
        bad=1
    }
done
((bad == 0)) || exit 1
echo "check_options: ok ($(wc -l <<<"$listed") options, each read by the runner and listed)"
