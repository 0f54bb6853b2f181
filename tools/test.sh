#!/usr/bin/env bash
#
# tools/test.sh [BUILD_DIR [ctest args...]] - the project's test command (also what CI runs).
#
#   1. tools/setup.sh BUILD_DIR   Debian packages and the pinned npm packages (idempotent);
#   2. configure with CMake       RelWithDebInfo, warnings as errors (SD_WERROR=ON);
#   3. build                      -j2;
#   4. ctest                      every registered test, unit and integration, with the
#                                 output of failing tests shown;
#   5. sanitizers                 steps 1-4 again in BUILD_DIR-asan with gcc ASan+UBSan
#                                 (SD_SANITIZE=address,undefined, which also stops at the first
#                                 UBSan report), running the unit and integration tests. This
#                                 roughly doubles the time; SD_SKIP_SANITIZE=1 skips it.
#   6. fuzzing                    tools/fuzz.sh BUILD_DIR-fuzz 30: every libFuzzer target in
#                                 tests/fuzz for 30 s on its seeds (needs clang; about 3 min
#                                 with the build); SD_SKIP_FUZZ=1 skips it.
#
# BUILD_DIR defaults to build (inside the repository). Extra arguments go to ctest (in both
# runs), e.g. `tools/test.sh build -L unit` runs only the unit tests.

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

# Step 6 (issue 8): the fuzz targets for 30 s each, in their own clang build directory.
fuzz_step() {
    if [[ "${SD_SKIP_FUZZ:-0}" == 1 ]]; then
        echo "test.sh: fuzzing skipped (SD_SKIP_FUZZ=1)"
        return 0
    fi
    echo "test.sh: fuzz (${build_dir}-fuzz, 30 s per target)"
    bash tools/fuzz.sh "${build_dir}-fuzz" 30
}

if [[ "${SD_SKIP_SANITIZE:-0}" == 1 ]]; then
    echo "test.sh: sanitizer run skipped (SD_SKIP_SANITIZE=1)"
    fuzz_step
    exit 0
fi

# One sanitizer build (issue 8): gcc ASan+UBSan. Its own directory, so the plain build above
# stays incremental. The lint tests already ran above, and valgrind would not mix with ASan.
san_dir="${build_dir}-asan"
san_start=$SECONDS
# The SDKs installed by setup above serve both builds: link them instead of installing twice.
mkdir -p "$san_dir"
for d in ts py bin-prism web-node; do
    if [[ -e "$build_dir/$d" && ! -e "$san_dir/$d" ]]; then
        ln -s "$(cd "$build_dir/$d" && pwd)" "$san_dir/$d"
    fi
done

echo "test.sh: configure ($san_dir, ASan+UBSan)"
cmake -S . -B "$san_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSD_WERROR=ON \
    -DSD_SANITIZE=address,undefined

echo "test.sh: build ($san_dir)"
cmake --build "$san_dir" -j2

echo "test.sh: ctest ($san_dir)"
san_args=("$@")
if [[ ${#san_args[@]} -eq 0 ]]; then
    san_args=(-L 'unit|integration')
fi
UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}" \
    ctest --test-dir "$san_dir" --output-on-failure "${san_args[@]}"
echo "test.sh: sanitizer run took $((SECONDS - san_start)) s"
fuzz_step
