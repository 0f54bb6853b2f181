#!/usr/bin/env bash
#
# tests/package/package_test.sh BUILD_DIR - the packages on a clean machine (ctest label
# `package`).
#
# Builds the wheel and the .deb (tools/package.sh), then in minimal Debian 12 roots made with
# debootstrap, entered with chroot in a mount and PID namespace of their own (no build tree
# inside: only the package and the test's own files are copied in):
#   1. wheel: a root with python3-venv and nothing else (no compiler, no gRPC, protobuf-c,
#      libev or libmicrohttpd); a fresh venv gets apache-beam and the wheel; a pipeline with a
#      TestStream and a processing-time timer runs on the bundled binary (pipeline.py);
#      `pytest --sundial` runs a test whose pipeline names no runner on Sundial; and
#      `python -m sundial_beam` passes through to the binary.
#   2. deb: a root with gcc, make, cmake and pkg-config; `apt-get install ./sundial_V_amd64.deb`
#      resolves its dependencies from Debian 12; the man pages and the systemd unit are
#      checked; the C word count is built with pkg-config and with find_package(Sundial) and
#      run (embedded, and against the installed `sundial serve` on loopback).
#
# Caches, in BUILD_DIR/pkg-root (only the first run pays): the debootstrap root as a tarball
# (plus one with the compiler), and a wheelhouse of apache-beam and pytest for the root's
# Python, each with a stamp of what made it. The network inside the roots is used only for
# package registries (Debian's mirror, PyPI); the servers the tests start bind loopback.
#
# Exit 77 (ctest: skipped, reported NOT RUN) when this machine cannot do it: not root, no
# unshare/chroot, no debootstrap, or no registry reachable.
set -uo pipefail

say() { printf 'package_test: %s\n' "$*"; }
fail() { printf 'package_test: FAIL: %s\n' "$*" >&2; exit 1; }
not_run() { printf 'package_test: NOT RUN: %s\n' "$*" >&2; exit 77; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"
build_dir="$(cd "${1:?usage: package_test.sh BUILD_DIR}" && pwd)"
cache="$build_dir/pkg-root"
beam_version="2.77.0"
pytest_version="$(sed -n 's/^pytest==//p' "$repo_root/tests/python/requirements.txt")"

[[ $(id -u) -eq 0 ]] || not_run "needs root (debootstrap, chroot, unshare)"
command -v debootstrap >/dev/null || not_run "debootstrap is not installed (tools/setup.sh)"
command -v unshare >/dev/null || not_run "unshare is not installed"
[[ -f "$build_dir/pkg-venv/NOT-RUN" ]] && not_run "$(cat "$build_dir/pkg-venv/NOT-RUN")"

# The Debian mirror apt already uses here.
mirror="$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | grep -v security | head -n 1 | awk '{ print ($1 == "deb") ? $2 : $2 }')"
[[ "$mirror" == http*://* ]] || not_run "no Debian mirror found in /etc/apt/sources.list*"

mkdir -p "$cache"
work="$(mktemp -d "$cache/run.XXXXXX")"
cleanup() {
    # The roots' mounts lived in namespaces that ended with their processes; never cross into
    # another file system all the same.
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# in_root ROOT CMD...: run CMD in ROOT with its own /proc and the host's /dev, in new mount
# and PID namespaces (all of it ends with CMD), a clean environment, and the host's DNS.
in_root() {
    local root="$1"
    shift
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    # debootstrap writes no /etc/hosts; an installed Debian has one naming localhost.
    [[ -s "$root/etc/hosts" ]] ||
        printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
    # pip checks PyPI's certificate against the host's trust store (which may hold a CA the
    # root's ca-certificates lacks); apt uses Debian's own signatures.
    cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/etc/ssl/certs/host-ca-bundle.crt"
    unshare --mount --pid --fork --kill-child /bin/sh -c '
        r="$1"; shift
        mount --make-rprivate / &&
        mount -t proc proc "$r/proc" &&
        mount --rbind /dev "$r/dev" || exit 125
        exec chroot "$r" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TMPDIR=/tmp \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            DEBIAN_FRONTEND=noninteractive PIP_CERT=/etc/ssl/certs/host-ca-bundle.crt \
            PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"' sh "$root" "$@"
}

# cached NAME STAMP MAKER: BUILD_DIR/pkg-root/NAME.tar, remade by MAKER DIR when its stamp
# differs (MAKER fills DIR).
cached_root() {
    local name="$1" stamp="$2" maker="$3"
    local tar="$cache/$name.tar"
    if [[ -f "$tar" && "$(cat "$cache/$name.stamp" 2>/dev/null)" == "$stamp" ]]; then
        return 0
    fi
    say "making the cached root $name (first run only)"
    local dir="$work/make-$name"
    rm -f "$cache/$name.stamp"
    "$maker" "$dir" || return 1
    tar -C "$dir" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar" || return 1
    rm -rf --one-file-system "$dir"
    printf '%s\n' "$stamp" >"$cache/$name.stamp"
}

make_base() {
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$1" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
        { say "debootstrap failed: $(tail -3 "$cache/debootstrap.log")"; return 1; }
    in_root "$1" apt-get clean
}

make_dev() {
    mkdir -p "$1" && tar -C "$1" -xf "$cache/base.tar" || return 1
    in_root "$1" sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends \
        gcc libc6-dev make cmake pkg-config && apt-get clean' >"$cache/dev.log" 2>&1 ||
        { say "installing the compiler failed: $(tail -3 "$cache/dev.log")"; return 1; }
}

make_wheelhouse() {
    # Downloaded with the root's own Python, so the wheels fit it.
    local root="$1"
    mkdir -p "$root" && tar -C "$root" -xf "$cache/base.tar" || return 1
    in_root "$root" sh -c "python3 -m venv /opt/dl && /opt/dl/bin/pip download -q \
        --dest /opt/wheelhouse apache-beam==$beam_version pytest==$pytest_version" \
        >"$cache/wheelhouse.log" 2>&1 ||
        { say "pip download failed: $(tail -3 "$cache/wheelhouse.log")"; return 1; }
    rm -rf "$cache/wheelhouse.tmp" && cp -r "$root/opt/wheelhouse" "$cache/wheelhouse.tmp" &&
        rm -rf "$cache/wheelhouse" && mv "$cache/wheelhouse.tmp" "$cache/wheelhouse"
}

base_stamp="bookworm minbase python3,python3-venv,ca-certificates $mirror"
cached_root base "$base_stamp" make_base || not_run "cannot debootstrap Debian 12 from $mirror"
cached_root dev "$base_stamp + gcc libc6-dev make cmake pkg-config" make_dev ||
    not_run "cannot install a compiler into the root from $mirror"
wh_stamp="$base_stamp apache-beam==$beam_version pytest==$pytest_version"
if [[ ! -d "$cache/wheelhouse" || "$(cat "$cache/wheelhouse.stamp" 2>/dev/null)" != "$wh_stamp" ]]
then
    say "downloading the wheelhouse (first run only)"
    make_wheelhouse "$work/make-wheelhouse" || not_run "PyPI cannot be reached"
    rm -rf --one-file-system "$work/make-wheelhouse"
    printf '%s\n' "$wh_stamp" >"$cache/wheelhouse.stamp"
fi

# ---- the packages --------------------------------------------------------------------------
t0=$SECONDS
"$repo_root/tools/package.sh" "$build_dir" >"$work/package.log" 2>&1 ||
    fail "tools/package.sh: $(tail -5 "$work/package.log")"
grep '^package: \(wheel\|deb\):' "$work/package.log"
wheel="$(ls "$build_dir"/pkg/sundial_beam-*manylinux*.whl)"
deb="$(ls "$build_dir"/pkg/sundial_*_amd64.deb)"
version="$("$build_dir/bin/sundial" version | awk '{ print $2 }')"
say "packages made in $((SECONDS - t0)) s"

# ---- 1. the wheel on a machine with no compiler and none of the libraries ------------------
t0=$SECONDS
root="$work/wheel-root"
mkdir -p "$root" && tar -C "$root" -xf "$cache/base.tar" || fail "cannot unpack the base root"
mkdir -p "$root/opt/t"
cp -r "$cache/wheelhouse" "$root/opt/t/wheelhouse"
cp "$wheel" "$here/pipeline.py" "$here/test_default_runner.py" "$root/opt/t/"
cat >"$root/opt/t/run.sh" <<EOS
set -eu
for cc in cc gcc clang; do
    if command -v \$cc >/dev/null; then echo "the root has a compiler: \$cc"; exit 1; fi
done
if ldconfig -p | grep -E 'libgrpc|libprotobuf-c|libev\.|libmicrohttpd'; then
    echo "the root has a library the wheel must bundle"; exit 1
fi
python3 -m venv /opt/venv
/opt/venv/bin/pip install -q --no-compile --no-index --find-links /opt/t/wheelhouse \
    apache-beam==$beam_version pytest==$pytest_version
/opt/venv/bin/pip install -q --no-compile --no-index --find-links /opt/t/wheelhouse /opt/t/$(basename "$wheel")
cd /opt/t
/opt/venv/bin/python -m sundial_beam version
/opt/venv/bin/sundial version
/opt/venv/bin/sundialctl version
/opt/venv/bin/python pipeline.py
/opt/venv/bin/python -m pytest -q -p no:cacheprovider --sundial --sundial-report=/opt/t/report.json \
    test_default_runner.py
/opt/venv/bin/python -c 'import json; r = json.load(open("/opt/t/report.json")); \
    assert [j["state"] for j in r["jobs"]] == ["DONE"] and r["redirected"] == 1, r; print("pytest --sundial: the job ran on Sundial:", r["jobs"])'
EOS
in_root "$root" /bin/sh /opt/t/run.sh >"$work/wheel.log" 2>&1 ||
    fail "the wheel in a clean root: $(tail -25 "$work/wheel.log")"
grep -q "^sundial $version$" "$work/wheel.log" || fail "python -m sundial_beam version: $(head "$work/wheel.log")"
grep -q "^wheel pipeline: OK$" "$work/wheel.log" || fail "no 'wheel pipeline: OK' in the log"
grep -E '^(sundial_beam |job list|wheel pipeline|pytest --sundial)' "$work/wheel.log"
rm -rf --one-file-system "$root"
say "wheel: installed and ran in a clean Debian 12 root in $((SECONDS - t0)) s"

# ---- 2. the .deb and the C SDK --------------------------------------------------------------
t0=$SECONDS
root="$work/deb-root"
mkdir -p "$root" && tar -C "$root" -xf "$cache/dev.tar" || fail "cannot unpack the dev root"
mkdir -p "$root/opt/t/consumer" "$root/opt/t/data"
cp "$deb" "$root/opt/t/"
cp "$here/consumer/CMakeLists.txt" "$repo_root/sdk-harness/examples/wordcount.c" "$root/opt/t/consumer/"
cp "$repo_root/tests/integration/sdk/data/hamlet.txt" \
    "$repo_root/tests/integration/sdk/data/hamlet.expected" "$root/opt/t/data/"
cat >"$root/opt/t/run.sh" <<'EOS'
set -eu
cd /opt/t
if ! apt-get install -y -q ./sundial_*_amd64.deb >apt.log 2>&1; then
    apt-get update -q >/dev/null && apt-get install -y -q ./sundial_*_amd64.deb >apt.log 2>&1 ||
        { tail -20 apt.log; exit 1; }
fi
grep -E '^(Setting up|Unpacking) ' apt.log | sed 's/^/apt: /'
dpkg -s sundial | grep -E '^(Version|Depends):'
sundial version
sundialctl version
# The man pages are the binaries' --help.
for b in sundial sundialctl; do
    zcat /usr/share/man/man1/$b.1.gz >$b.man
    grep -q '^\.TH' $b.man || { echo "$b.1 is not a man page"; exit 1; }
done
grep -q 'list\\-options' sundial.man || { echo "sundial.1 lacks --list-options of --help"; exit 1; }
grep -q 'drain' sundialctl.man || { echo "sundialctl.1 lacks the drain command of --help"; exit 1; }
# The systemd unit: installed, loopback, not enabled.
unit=/usr/lib/systemd/system/sundial.service
grep -q '^ExecStart=/usr/bin/sundial serve --host 127.0.0.1' $unit
if ls /etc/systemd/system/*.wants/sundial.service 2>/dev/null; then echo "enabled"; exit 1; fi
echo "man pages and the systemd unit: OK"
# The C word count with pkg-config ...
cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Werror consumer/wordcount.c -o wc-pc \
    $(pkg-config --cflags --libs sundial-embedded)
./wc-pc data/hamlet.txt >pc.out
diff -u data/hamlet.expected pc.out
echo "pkg-config word count: OK ($(wc -l <pc.out) words)"
# ... and with find_package(Sundial).
cmake -S consumer -B cm -DCMAKE_BUILD_TYPE=Release >cm.log 2>&1 || { tail cm.log; exit 1; }
cmake --build cm >>cm.log 2>&1 || { tail -20 cm.log; exit 1; }
./cm/wordcount data/hamlet.txt >cm.out
diff -u data/hamlet.expected cm.out
echo "find_package(Sundial) word count: OK"
# Against the installed job server, on loopback.
sundial serve --port 0 >serve.out 2>serve.err &
pid=$!
for i in $(seq 100); do grep -q '^listening on' serve.out && break; sleep 0.1; done
ep=$(sed -n 's/^listening on //p' serve.out | head -n 1)
case "$ep" in 127.0.0.1:*) ;; *) echo "server not on loopback: '$ep'"; kill $pid; exit 1;; esac
./cm/wordcount data/hamlet.txt --endpoint=$ep >ep.out
diff -u data/hamlet.expected ep.out
sundialctl --endpoint $ep jobs
kill -TERM $pid; wait $pid || true
echo "word count on the installed sundial serve: OK"
EOS
in_root "$root" /bin/sh /opt/t/run.sh >"$work/deb.log" 2>&1 ||
    fail "the .deb in a clean root: $(tail -25 "$work/deb.log")"
grep -E '^(apt: Setting up sundial|Depends:|man pages|pkg-config|find_package|word count on)' \
    "$work/deb.log"
rm -rf --one-file-system "$root"
say "deb: installed and the C SDK built and ran in a clean Debian 12 root in $((SECONDS - t0)) s"
say "wheel $(basename "$wheel") $(stat -c %s "$wheel") bytes; deb $(basename "$deb") $(stat -c %s "$deb") bytes"
echo "1 passed, 0 failed"
