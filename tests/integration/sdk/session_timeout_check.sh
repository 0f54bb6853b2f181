#!/usr/bin/env bash
#
# session_timeout_check.sh BIN_DIR - the session_timeout example, as the README shows it:
#   test mode: a TestStream plays a day; sessions time out in the quiet hours, in the order
#     their timeouts fall (bob 09:00, ada 09:30, cy 11:00, bob 16:00, ada 23:00), and the day
#     takes well under a second of wall time;
#   --clock wall --timeout-ms 1500: the runner really waits (at least 1.5 s) and every user's
#     one session ends.
set -uo pipefail
bin="$1"
fail() { echo "session_timeout_check: FAIL: $*" >&2; exit 1; }

out=$("$bin/session_timeout" 2>/tmp/st.$$) || fail "test mode exited $?: $(cat /tmp/st.$$)"
want=$'bob: 1 events, 1 clicks\nada: 2 events, 7 clicks\ncy: 1 events, 1 clicks\nbob: 1 events, 5 clicks\nada: 1 events, 9 clicks'
[[ "$out" == "$want" ]] || fail "test mode printed:"$'\n'"$out"
ms=$(grep -o 'took [0-9]* ms' /tmp/st.$$ | grep -o '[0-9]*')
[[ -n "$ms" && "$ms" -lt 1000 ]] || fail "a simulated day took ${ms:-?} ms of wall time"

start=$(date +%s%N)
out=$("$bin/session_timeout" --clock wall --timeout-ms 1500 2>/tmp/st.$$) ||
    fail "wall mode exited $?: $(cat /tmp/st.$$)"
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
[[ $elapsed -ge 1500 ]] || fail "wall mode did not wait for the timeout (${elapsed} ms)"
sorted=$(sort <<<"$out")
want=$'ada: 3 events, 16 clicks\nbob: 2 events, 6 clicks\ncy: 1 events, 1 clicks'
[[ "$sorted" == "$want" ]] || fail "wall mode printed:"$'\n'"$out"
rm -f /tmp/st.$$
echo "session_timeout_check: ok (test mode ${ms} ms, wall mode ${elapsed} ms)"
