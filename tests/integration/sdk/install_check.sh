#!/usr/bin/env bash
#
# install_check.sh BUILD_DIR SOURCE_DIR - the C SDK as a user outside this repository gets it:
#   1. `cmake --install BUILD_DIR --prefix P` puts headers, libsundial (shared with a versioned
#      soname, and static), the CMake package, sundial.pc and the binaries in place;
#   2. every public header compiles on its own with only -IP/include (it includes nothing but
#      <sundial/...> and the C library);
#   3. libsundial.so exports only sd_* symbols (no protobuf-c generated code, no internals)
#      and holds no runner (no engine, job service or server), libsundial_embedded.so exports
#      exactly sd_embedded_runner_v1;
#   4. the examples build out of tree with find_package(Sundial) (shared and static) and with
#      pkg-config, and the word counts they print are exact;
#   5. a program linked with the SDK alone still finds the embedded runner next to
#      libsundial.so, and says what to link when it is not there (statically linked).
set -uo pipefail
build="$(cd "$1" && pwd)"
src="$(cd "$2" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "install_check: FAIL: $*" >&2; exit 1; }
data="$src/tests/integration/sdk/data"
prefix="$work/prefix"
cc="${CC:-cc}"
# A sanitizer build's libraries need the sanitizer runtime in every program that links them:
# the out-of-tree builds below get the build's -fsanitize flags (none in a normal build).
san=$(sed -n 's/^SD_SANITIZE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
san_flags=()
[[ -n "$san" ]] && san_flags=("-fsanitize=$san")

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
    fail "cmake --install: $(tail -5 "$work/install.log")"
libdir="$prefix/lib"
for f in bin/sundial bin/sundialctl include/sundial/sundial.h include/sundial/version.h \
    lib/libsundial.a lib/libsundial_embedded.a lib/cmake/Sundial/SundialConfig.cmake \
    lib/cmake/Sundial/SundialConfigVersion.cmake lib/pkgconfig/sundial.pc \
    lib/pkgconfig/sundial-embedded.pc; do
    [[ -e "$prefix/$f" ]] || fail "not installed: $f"
done
soname=$(objdump -p "$libdir/libsundial.so" | awk '/SONAME/ { print $2 }')
[[ "$soname" =~ ^libsundial\.so\.[0-9]+$ && -e "$libdir/$soname" ]] || fail "soname '$soname'"

# 2. Self-contained headers: nothing outside <sundial/...> and libc.
for h in "$prefix"/include/sundial/*.h; do
    name="sundial/$(basename "$h")"
    printf '#include <%s>\nint main(void) { return 0; }\n' "$name" >"$work/h.c"
    "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -I"$prefix/include" -c "$work/h.c" \
        -o "$work/h.o" 2>"$work/h.err" || fail "$name alone: $(head -5 "$work/h.err")"
done
stray=$(grep -h '#include' "$prefix"/include/sundial/*.h | grep -v '<sundial/' |
    grep -vE '<(stdarg|stdbool|stddef|stdint)\.h>' || true)
[[ -z "$stray" ]] || fail "public headers include: $stray"

# 3. Exported symbols.
others=$(nm -D --defined-only "$libdir/libsundial.so" | awk '{ print $3 }' | grep -v '^sd_' || true)
[[ -z "$others" ]] || fail "exported besides sd_*: $(echo "$others" | head -5)"
internal=$(nm -D --defined-only "$libdir/libsundial.so" | awk '{ print $3 }' | grep -c '^sd__' || true)
[[ "$internal" == 0 ]] || fail "$internal internal sd__ symbols exported"
n_api=$(nm -D --defined-only "$libdir/libsundial.so" | grep -c ' sd_')
runner=$(nm "$libdir/libsundial.so" | grep -cE ' sd_(em|server|jobsvc|exec|plan|web)_' || true)
[[ "$runner" == 0 ]] || fail "libsundial.so holds $runner runner functions"
emb=$(nm -D --defined-only "$libdir/libsundial_embedded.so" | awk '{ print $3 }' | tr '\n' ' ')
[[ "$emb" == "sd_embedded_runner_v1 " ]] || fail "libsundial_embedded.so exports: $emb"

run_wc() { # run_wc BIN LABEL: exact counts on the hamlet text (read through a glob)
    "$1" "$data/hamlet*.txt" >"$work/wc.out" 2>"$work/wc.err" || fail "$2: $(tail -3 "$work/wc.err")"
    diff -u "$data/hamlet.expected" "$work/wc.out" >"$work/wc.diff" || fail "$2: $(head "$work/wc.diff")"
}

# 4a. find_package, shared and static.
for mode in shared static; do
    flag=OFF
    [[ $mode == static ]] && flag=ON
    cmake -S "$src/tests/integration/sdk/consumer" -B "$work/cm-$mode" \
        -DCMAKE_PREFIX_PATH="$prefix" -DSD_EXAMPLES="$src/sdk-harness/examples" \
        -DSD_CONSUMER_STATIC=$flag -DCMAKE_C_FLAGS="${san_flags[*]}" \
        -DCMAKE_EXE_LINKER_FLAGS="${san_flags[*]}" >"$work/cm.log" 2>&1 ||
        fail "configure ($mode): $(tail "$work/cm.log")"
    cmake --build "$work/cm-$mode" -j2 >"$work/cm.log" 2>&1 || fail "build ($mode): $(tail -20 "$work/cm.log")"
    run_wc "$work/cm-$mode/wordcount" "find_package $mode wordcount"
    "$work/cm-$mode/leaderboard" >/dev/null 2>&1 || fail "find_package $mode leaderboard"
    "$work/cm-$mode/late_data" >/dev/null 2>&1 || fail "find_package $mode late_data"
    "$work/cm-$mode/watermarks" >/dev/null 2>&1 || fail "find_package $mode watermarks"
done
# 5. The SDK alone: shared, it loads the embedded runner from beside libsundial.so; static,
# there is none, and the error says what to link.
run_wc "$work/cm-shared/worker_only" "SDK-only wordcount"
if "$work/cm-static/worker_only" >"$work/wo.out" 2>&1; then
    fail "a static SDK-only program ran without a runner"
fi
grep -q 'no embedded runner: link Sundial::embedded' "$work/wo.out" ||
    fail "SDK-only static error: $(cat "$work/wo.out")"
if ldd "$work/cm-static/wordcount" | grep -q libsundial; then
    fail "the static build links libsundial.so"
fi

# 4b. pkg-config, with nothing but the .pc file to go on.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
"$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -Werror "${san_flags[@]}" \
    "$src/sdk-harness/examples/wordcount.c" -o "$work/wc-pc" \
    $(pkg-config --cflags --libs sundial-embedded) \
    -Wl,-rpath,"$libdir" 2>"$work/pc.err" || fail "pkg-config build: $(head "$work/pc.err")"
run_wc "$work/wc-pc" "pkg-config wordcount"

lines=$(wc -l <"$src/sdk-harness/examples/wordcount.c")
echo "install_check: ok ($n_api sd_* symbols exported and nothing else; soname $soname;" \
    "find_package shared+static and pkg-config builds exact; wordcount.c $lines lines)"
