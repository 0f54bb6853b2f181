#!/usr/bin/env bash
# What `sundial serve` leaves on disk (issue 8: artifact directory, per-job files):
#   - by default it makes one private directory, $TMPDIR/sundial-XXXXXX, mode 0700, and
#     removes it (with everything in it) at SIGTERM;
#   - each job's directory goes when the job ends, also with --artifacts_dir, whose directory
#     itself stays (it is the user's);
#   - --artifacts_dir refuses a symlink, a directory others can write, and one of another
#     user (root only: chown), with a message naming the rule, exit 1;
#   - --host beyond loopback warns on stderr that anyone reaching the port can run code.
# usage: serve_files_check.sh BIN_DIR DATA_DIR
set -uo pipefail
bin=$1
data=$2
work=$(mktemp -d)
server=""
fail() { echo "serve_files_check: FAIL: $*" >&2; exit 1; }
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; fi
    rm -rf "$work"
}
trap cleanup EXIT

start() { # start ARGS...: sets server and endpoint
    "$bin/sundial" serve --port 0 "$@" >"$work/out" 2>"$work/err" &
    server=$!
    for _ in $(seq 1 200); do
        grep -q '^listening on ' "$work/out" && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.05
    done
    endpoint=$(sed -n 's/^listening on //p' "$work/out" | head -1)
    [ -n "$endpoint" ] || fail "sundial serve $* did not start: $(cat "$work/err")"
}
stop() {
    kill -TERM "$server"
    wait "$server"
    server=""
}

# 1. The default private directory, and the job's directory gone after the job.
mkdir "$work/tmp"
TMPDIR="$work/tmp" start
dirs=("$work"/tmp/sundial-*)
[ ${#dirs[@]} -eq 1 ] && [ -d "${dirs[0]}" ] || fail "expected one sundial-XXXXXX in TMPDIR, got: ${dirs[*]}"
mode=$(stat -c %a "${dirs[0]}")
[ "$mode" = 700 ] || fail "${dirs[0]} has mode $mode, want 700"
"$bin/wordcount" "$data/hamlet.txt" --endpoint="$endpoint" >"$work/wc" || fail "wordcount failed"
diff -q "$data/hamlet.expected" "$work/wc" >/dev/null || fail "wordcount gave wrong counts"
sleep 0.2
left=$(find "${dirs[0]}" -mindepth 1 | head -5)
[ -z "$left" ] || fail "files left after the job ended: $left"
stop
[ ! -e "${dirs[0]}" ] || fail "${dirs[0]} still exists after SIGTERM"

# 2. --artifacts_dir: used, its job directories removed, the directory itself kept.
mkdir -m 700 "$work/mine"
start --artifacts_dir "$work/mine"
"$bin/wordcount" "$data/hamlet.txt" --endpoint="$endpoint" >"$work/wc" || fail "wordcount failed"
sleep 0.2
left=$(find "$work/mine" -mindepth 1 | head -5)
[ -z "$left" ] || fail "files left in --artifacts_dir after the job: $left"
stop
[ -d "$work/mine" ] || fail "--artifacts_dir was removed at exit; it is the user's"

# 3. Directories that must be refused.
ln -s "$work/mine" "$work/link"
mkdir -m 777 "$work/open"
chmod 777 "$work/open"
for bad in "$work/link" "$work/open"; do
    "$bin/sundial" serve --port 0 --artifacts_dir "$bad" >"$work/out" 2>"$work/err"
    rc=$?
    [ $rc -eq 1 ] || fail "--artifacts_dir $bad: exit $rc, want 1"
    grep -q -- "--artifacts_dir: \"$bad\"" "$work/err" || fail "--artifacts_dir $bad: $(cat "$work/err")"
done
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -m 700 "$work/theirs" && chown nobody "$work/theirs"
    "$bin/sundial" serve --port 0 --artifacts_dir "$work/theirs" >"$work/out" 2>"$work/err"
    [ $? -eq 1 ] && grep -q "belongs to another user" "$work/err" \
        || fail "another user's directory was not refused: $(cat "$work/err")"
fi

# 4. Beyond loopback: a warning (0.0.0.0 binds every address; nothing connects to it here).
start --host 0.0.0.0
grep -q "WARNING: listening on 0.0.0.0:.*no authentication" "$work/err" \
    || fail "no warning for --host 0.0.0.0: $(cat "$work/err")"
stop
start
if grep -q WARNING "$work/err"; then fail "a loopback server warned: $(cat "$work/err")"; fi
stop
echo "serve_files_check: private directory, job files removed, bad directories refused, warning beyond loopback"
