#!/usr/bin/env bash
#
# tools/check_banned.sh [REPO] - forbid raw allocation and unsafe string calls outside
# runner/base (STYLE.md §5): malloc, calloc, realloc, free, strdup, strcpy, sprintf, atoi,
# strtok. Library code allocates through sd_malloc & co. so tests can inject failures.
# Tests and tools are exempt. Prints each offending line; exit 1 if any.

set -uo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$repo" || exit 2
pattern='(^|[^_a-zA-Z0-9.>])(malloc|calloc|realloc|free|strdup|strcpy|sprintf|atoi|strtok)[[:space:]]*\('
hits=$(grep -rnE "$pattern" runner sdk-harness teststream --include='*.c' --include='*.h' 2>/dev/null |
    grep -v '^runner/base/' |
    grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*)' || true)
if [[ -n "$hits" ]]; then
    echo "check_banned: raw allocation or unsafe string calls outside runner/base:"
    echo "$hits"
    exit 1
fi
echo "check_banned: ok"
