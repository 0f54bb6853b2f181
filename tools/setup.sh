#!/usr/bin/env bash
#
# tools/setup.sh [BUILD_DIR] - install what Sundial needs to build and test.
#
# 1. Debian packages: checked one by one with dpkg-query; only when something is missing does
#    it run `apt-get update` and `apt-get install -y --no-install-recommends` (as root, or
#    through sudo). Node.js is special: on some machines `nodejs` comes from a vendor package
#    that already contains npm, on plain Debian 12 `nodejs` and `npm` are two packages. So
#    `nodejs` is installed only when the `node` command is missing, and `npm` only when the
#    `npm` command is still missing after that.
# 2. npm packages for the TypeScript integration tests, pinned by
#    tests/integration/ts/package-lock.json, installed with `npm ci` into BUILD_DIR/ts (never
#    into the source tree). A stamp (hash of package.json, the lockfile and the node major
#    version) makes a second run a no-op.
#
# Idempotent. BUILD_DIR defaults to ./build (relative to the current directory).
# Exits non-zero with a message naming the failed step.

set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
ts_src="$repo_root/tests/integration/ts"

# ---- Debian packages ----------------------------------------------------------------------

debian_packages=(
    build-essential
    cmake
    pkg-config
    ca-certificates
    libgrpc-dev
    protobuf-c-compiler
    libprotobuf-c-dev
    protobuf-compiler
    libprotobuf-dev
    libev-dev
    libcmocka-dev
)

as_root=()
need_root() {
    if [[ $(id -u) -eq 0 ]]; then
        as_root=()
    elif command -v sudo >/dev/null 2>&1; then
        as_root=(sudo)
    else
        die "not root and sudo is not installed: cannot install Debian packages ($*)"
    fi
}

is_installed() {
    local status
    status="$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)"
    [[ "$status" == "installed" ]]
}

apt_updated=0
apt_install() {
    need_root "$@"
    local env_cmd=(env DEBIAN_FRONTEND=noninteractive)
    if [[ $apt_updated -eq 0 ]]; then
        say "running apt-get update"
        "${as_root[@]}" "${env_cmd[@]}" apt-get update \
            || die "apt-get update failed"
        apt_updated=1
    fi
    say "installing Debian packages: $*"
    "${as_root[@]}" "${env_cmd[@]}" apt-get install -y --no-install-recommends "$@" \
        || die "apt-get install failed for: $*"
}

command -v dpkg-query >/dev/null 2>&1 \
    || die "dpkg-query not found: this script expects Debian 12 (or a derivative)"

missing=()
for pkg in "${debian_packages[@]}"; do
    is_installed "$pkg" || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    apt_install "${missing[@]}"
else
    say "Debian packages: all ${#debian_packages[@]} present"
fi

if ! command -v node >/dev/null 2>&1; then
    apt_install nodejs
fi
if ! command -v npm >/dev/null 2>&1; then
    apt_install npm
fi
command -v node >/dev/null 2>&1 || die "node is still missing after installing nodejs"
command -v npm >/dev/null 2>&1 || die "npm is still missing after installing npm"
say "node $(node --version), npm $(npm --version)"

# ---- npm packages for the TypeScript tests ------------------------------------------------

[[ -f "$ts_src/package.json" && -f "$ts_src/package-lock.json" ]] \
    || die "missing $ts_src/package.json or package-lock.json"

mkdir -p "$build_dir/ts" || die "cannot create $build_dir/ts"
ts_dir="$(cd "$build_dir/ts" && pwd)"
stamp_file="$ts_dir/node_modules/.sundial-setup-stamp"

node_major="$(node -p 'process.versions.node.split(".")[0]')"
want_stamp="$( { cat "$ts_src/package.json" "$ts_src/package-lock.json"; \
                 echo "node-major=$node_major"; } | sha256sum | cut -d' ' -f1)"
have_stamp="$(cat "$stamp_file" 2>/dev/null || true)"

if [[ "$want_stamp" == "$have_stamp" && -f "$ts_dir/node_modules/apache-beam/package.json" ]]
then
    say "npm packages in $ts_dir are up to date with the lockfile"
else
    say "installing pinned npm packages into $ts_dir (npm ci)"
    cp "$ts_src/package.json" "$ts_src/package-lock.json" "$ts_dir/" \
        || die "cannot copy package.json/package-lock.json into $ts_dir"
    # --ignore-scripts: the only install scripts in the tree are protobufjs postinstall
    # checks that nothing here needs; skipping them keeps npm 9 and npm 11 alike.
    (cd "$ts_dir" && npm ci --no-audit --no-fund --ignore-scripts) \
        || die "npm ci failed in $ts_dir (the registry must be reachable)"
    [[ -f "$ts_dir/node_modules/apache-beam/package.json" ]] \
        || die "npm ci finished but apache-beam is missing from $ts_dir/node_modules"
    printf '%s\n' "$want_stamp" > "$stamp_file"
    say "npm packages installed: apache-beam $(node -p \
        "require('$ts_dir/node_modules/apache-beam/package.json').version")"
fi

say "done"
