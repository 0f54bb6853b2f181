#!/usr/bin/env bash
#
# tools/check_deps.sh [REPO] - the dependency rules of DESIGN.md and STYLE.md §1:
#   - runner/engine and runner/coder never include protobuf-c, gRPC or libev headers
#     (nor generated .pb-c.h files): the engine is pure C and testable with no network;
#   - teststream/: only ts_pb.c (the TestStreamPayload codec) includes protobuf-c or generated
#     headers; the event model and the engine-side driver stay pure C, like the engine;
#   - the engine never includes teststream/ (the driver reaches it through its source hook),
#     and the C SDK's public headers include nothing of the runner or teststream/;
#   - gRPC headers (<grpc/...>) appear only in runner/transport;
#   - libmicrohttpd (<microhttpd.h>) appears only in runner/web.
# Prints each violation; exit 1 if any.

set -uo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$repo" || exit 2
fail=0
pure=$(grep -rnE '#[[:space:]]*include[[:space:]]*[<"](grpc/|protobuf-c/|ev\.h|.*\.pb-c\.h)' \
    runner/engine runner/coder 2>/dev/null || true)
if [[ -n "$pure" ]]; then
    echo "check_deps: the engine and coders must stay pure C (no protobuf-c, gRPC, libev):"
    echo "$pure"
    fail=1
fi
tsp=$(grep -rnE '#[[:space:]]*include[[:space:]]*[<"](grpc/|protobuf-c/|ev\.h|.*\.pb-c\.h)' \
    teststream 2>/dev/null | grep -vE "^teststream/ts_pb\.c:" || true)
if [[ -n "$tsp" ]]; then
    echo "check_deps: teststream/ outside ts_pb.c must stay pure C (no protobuf-c, gRPC, libev):"
    echo "$tsp"
    fail=1
fi
up=$(grep -rnE '#[[:space:]]*include[[:space:]]*"teststream/' runner/engine runner/coder \
    runner/base 2>/dev/null || true)
up+=$(grep -rnE '#[[:space:]]*include[[:space:]]*"(runner|teststream)/' sdk-harness/include \
    2>/dev/null || true)
if [[ -n "$up" ]]; then
    echo "check_deps: the engine includes teststream/, or an SDK public header the runner:"
    echo "$up"
    fail=1
fi
grpc=$(grep -rnE '#[[:space:]]*include[[:space:]]*[<"]grpc/' runner sdk-harness teststream \
    tools tests 2>/dev/null | grep -vE "^(runner/transport/|tests/unit/test_transport)" ||
    true)
if [[ -n "$grpc" ]]; then
    echo "check_deps: gRPC headers outside runner/transport:"
    echo "$grpc"
    fail=1
fi
mhd=$(grep -rnE '#[[:space:]]*include[[:space:]]*[<"]microhttpd\.h' runner sdk-harness teststream \
    tools tests 2>/dev/null | grep -vE "^runner/web/" || true)
if [[ -n "$mhd" ]]; then
    echo "check_deps: libmicrohttpd headers outside runner/web:"
    echo "$mhd"
    fail=1
fi
[[ $fail -eq 0 ]] && echo "check_deps: ok"
exit $fail
