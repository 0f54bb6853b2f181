#!/usr/bin/env bash
#
# tools/test.sh [BUILD_DIR [ctest args...]] - the project's test command (also what CI runs).
#
#   1. tools/setup.sh BUILD_DIR   Debian packages and the pinned npm packages (idempotent);
#   2. configure with CMake       RelWithDebInfo, warnings as errors (SD_WERROR=ON);
#   3. build                      -j2;
#   4. ctest                      every registered test, unit and integration, with the
#                                 output of failing tests shown.
#
# BUILD_DIR defaults to build (inside the repository). Extra arguments go to ctest, e.g.
# `tools/test.sh build -L unit` runs only the unit tests.

set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${1:-build}"
[[ $# -gt 0 ]] && shift

echo "test.sh: setup ($build_dir)"
bash tools/setup.sh "$build_dir"

echo "test.sh: configure"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSD_WERROR=ON

echo "test.sh: build"
cmake --build "$build_dir" -j2

echo "test.sh: ctest"
ctest --test-dir "$build_dir" --output-on-failure "$@"
