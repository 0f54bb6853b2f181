#!/usr/bin/env bash
#
# tools/package.sh [BUILD_DIR] - make Sundial's packages from a configured build:
#
#   BUILD_DIR/pkg/sundial_beam-V-py3-none-manylinux_*.whl   the Python wheel: the sundial and
#       sundialctl binaries with every shared library they need that a plain Debian 12 lacks
#       bundled and relinked by auditwheel, and the sundial_beam package (python/)
#   BUILD_DIR/pkg/sundial_V_amd64.deb                        cpack -G DEB (cmake/SundialPackage.cmake)
#
# V is the project's version (CMakeLists.txt project(VERSION), as `sundial version` prints it).
# The wheel's tools (setuptools, auditwheel, mypy; tools/package-requirements.txt) come from
# BUILD_DIR/pkg-venv, made by tools/setup.sh. Prints the two paths and their sizes last.
set -euo pipefail

say() { printf 'package: %s\n' "$*"; }
die() { printf 'package: error: %s\n' "$*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "${1:-build}" && pwd)" || die "no build directory ${1:-build}"
venv="$build_dir/pkg-venv"
out="$build_dir/pkg"

[[ -f "$build_dir/CMakeCache.txt" ]] || die "$build_dir is not a configured CMake build"
[[ -x "$venv/bin/auditwheel" ]] ||
    die "$venv has no auditwheel: run tools/setup.sh $build_dir (see $venv/NOT-RUN if present)"
if grep -q '^SD_SANITIZE:[A-Z]*=.' "$build_dir/CMakeCache.txt"; then
    die "$build_dir is a sanitizer build: package from a plain (RelWithDebInfo) build"
fi

say "building sundial, sundialctl, the C SDK and the man pages"
cmake "$build_dir" >"$build_dir/package-build.log" 2>&1 ||
    die "cmake failed: see $build_dir/package-build.log"
nice cmake --build "$build_dir" -j2 --target sundial sundialctl sd_man_pages \
    sundial_shared sundial_static sundial_embedded_shared sundial_embedded_static \
    >>"$build_dir/package-build.log" 2>&1 || die "build failed: see $build_dir/package-build.log"

sundial="$build_dir/bin/sundial"
version="$("$sundial" version | awk '{ print $2 }')"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "sundial version printed '$version'"
mkdir -p "$out"

# ---- the wheel -------------------------------------------------------------------------------
stage="$out/wheel-src"
rm -rf "$stage" "$out/wheel-raw"
mkdir -p "$stage"
cp -r "$repo_root/python/." "$stage/"
rm -rf "$stage/tests" "$stage"/sundial_beam/__pycache__
sed "s/@SD_VERSION@/$version/" "$repo_root/python/sundial_beam/_version.py.in" \
    >"$stage/sundial_beam/_version.py"
rm -f "$stage/sundial_beam/_version.py.in"
mkdir -p "$stage/sundial_beam/bin"
for b in sundial sundialctl; do
    # Without debug information: the wheel is what users download.
    strip --strip-unneeded -o "$stage/sundial_beam/bin/$b" "$build_dir/bin/$b"
    chmod 755 "$stage/sundial_beam/bin/$b"
done
# The runner's option table, which SundialOptions declares (sundial --list-options).
"$sundial" --list-options >"$stage/sundial_beam/options.json"

say "building the wheel (sundial-beam $version)"
"$venv/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation \
    --wheel-dir "$out/wheel-raw" "$stage" >"$out/wheel-build.log" 2>&1 ||
    die "pip wheel failed: see $out/wheel-build.log"
raw="$(ls "$out"/wheel-raw/sundial_beam-"$version"-*.whl)"
rm -f "$out"/sundial_beam-*.whl
say "auditwheel repair $(basename "$raw")"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair --wheel-dir "$out" "$raw" \
    >"$out/auditwheel.log" 2>&1 || die "auditwheel repair failed: see $out/auditwheel.log"
wheel="$(ls "$out"/sundial_beam-"$version"-*manylinux*.whl)"

# ---- the Debian package ----------------------------------------------------------------------
say "cpack -G DEB"
rm -f "$out"/sundial_*.deb
(cd "$build_dir" && cpack -G DEB --config "$build_dir/CPackConfig.cmake") \
    >"$out/cpack.log" 2>&1 || die "cpack failed: see $out/cpack.log"
deb="$out/sundial_${version}_amd64.deb"
[[ -f "$deb" ]] || die "cpack made no $deb (see $out/cpack.log)"

say "wheel: $wheel ($(stat -c %s "$wheel") bytes)"
say "deb:   $deb ($(stat -c %s "$deb") bytes)"
