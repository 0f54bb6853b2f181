#!/usr/bin/env bash
#
# session_timeout_check.sh BIN_DIR - the session_timeout example, as the README shows it:
#   test mode: a TestStream plays a day; sessions time out in the quiet hours, in the order
#     their timeouts fall, each printed with the synthetic time it fired (bob 09:00, ada 09:30,
#     cy 11:00, bob 16:00, ada 23:00), and the day takes well under a second of wall time;
#   --clock wall --timeout-ms 1500: the runner really waits (at least 1.5 s) and every user's
#     one session ends.
set -uo pipefail
bin="$1"
fail() { echo "session_timeout_check: FAIL: $*" >&2; exit 1; }

out=$("$bin/session_timeout" 2>/tmp/st.$$) || fail "test mode exited $?: $(cat /tmp/st.$$)"
# Each session with the time of the simulated day its timer fired, then the wall time taken.
want=$'[09:00] bob: 1 events, 1 clicks\n[09:30] ada: 2 events, 7 clicks\n[11:00] cy: 1 events, 1 clicks\n[16:00] bob: 1 events, 5 clicks\n[23:00] ada: 1 events, 9 clicks'
[[ "$(head -n 5 <<<"$out")" == "$want" ]] || fail "test mode printed:"$'\n'"$out"
[[ $(wc -l <<<"$out") -eq 6 ]] || fail "test mode printed more than the sessions and a summary:"$'\n'"$out"
ms=$(tail -n 1 <<<"$out" | grep -o 'took [0-9]* ms of wall time' | grep -o '[0-9]*')
[[ -n "$ms" && "$ms" -lt 1000 ]] || fail "a simulated day took ${ms:-?} ms of wall time"

start=$(date +%s%N)
out=$("$bin/session_timeout" --clock wall --timeout-ms 1500 2>/tmp/st.$$) ||
    fail "wall mode exited $?: $(cat /tmp/st.$$)"
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
[[ $elapsed -ge 1500 ]] || fail "wall mode did not wait for the timeout (${elapsed} ms)"
# The sessions end together, after the real timeout: "[+1.5 s] user: ...", then the summary.
sorted=$(grep '^\[+' <<<"$out" | sed 's/^\[+[0-9.]* s\] //' | sort)
want=$'ada: 3 events, 16 clicks\nbob: 2 events, 6 clicks\ncy: 1 events, 1 clicks'
[[ "$sorted" == "$want" ]] || fail "wall mode printed:"$'\n'"$out"
rm -f /tmp/st.$$
echo "session_timeout_check: ok (test mode ${ms} ms, wall mode ${elapsed} ms)"
