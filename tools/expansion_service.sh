#!/usr/bin/env bash
#
# tools/expansion_service.sh [PORT] [OPTION...] - Beam's Java expansion service for Python (or any
# SDK's) pipelines that use Java transforms on Sundial, without Docker (docs/xlang.md).
#
#   tools/expansion_service.sh 8097
#   tools/expansion_service.sh 8097 --javaClassLookupAllowlistFile=allowlist.yaml
#
# It listens on 127.0.0.1:PORT only (PORT 0: a free port; default 8097) and hands out, for every
# transform it expands, a PROCESS environment whose command is tools/java_worker.sh: Sundial
# starts that as the Java SDK worker of the job, on the same classpath the expansion service
# runs with (Beam Java 2.73.0 from tools/setup.sh: BUILD_DIR/xlang). Each OPTION is handed to
# the expansion service as a Beam pipeline option, e.g. --javaClassLookupAllowlistFile=FILE for
# JavaExternalTransform (a YAML allow list, or '*' for any class). The ones this script sets:
#
#   --defaultEnvironmentType=PROCESS
#   --defaultEnvironmentConfig={"command": "<repo>/tools/java_worker.sh",
#                               "env": {"SUNDIAL_BUILD_DIR": "<build dir>"}}
#   --filesToStage=BUILD_DIR/xlang/sundial-xlang.jar
#
# The last keeps what Python stages for the Java environment to Sundial's own small jar: the
# worker runs on the local classpath, so the ~60 MB of jars Beam would otherwise attach to every
# environment (and Python would copy into every job) are not needed.
#
# BUILD_DIR is $SUNDIAL_BUILD_DIR, else ./build of the repository. Once listening it prints
# "expansion service listening on 127.0.0.1:PORT (environment ...)". Ctrl-C stops it.
set -euo pipefail

die() { printf 'expansion_service: %s\n' "$*" >&2; exit 1; }
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

port=8097
if [[ $# -gt 0 && "$1" != --* ]]; then
    port=$1
    shift
fi
[[ "$port" =~ ^[0-9]+$ && "$port" -le 65535 ]] || die "PORT must be 0..65535, not '$port'"
build="${SUNDIAL_BUILD_DIR:-$repo_root/build}"
build="$(cd "$build" 2>/dev/null && pwd)" || die "no build directory $build"
if [[ -f "$build/xlang/NOT-RUN" ]]; then
    die "the expansion service was not installed: $(cat "$build/xlang/NOT-RUN")"
fi
cpf="$build/xlang/classpath"
jar="$build/xlang/sundial-xlang.jar"
[[ -s "$cpf" && -s "$jar" ]] || die "no $cpf or $jar: run tools/setup.sh $build first"
command -v java >/dev/null 2>&1 || die "java is not installed (tools/setup.sh installs it)"

# JSON strings: backslash and double quote escaped.
json() { local s=${1//\\/\\\\}; printf '"%s"' "${s//\"/\\\"}"; }
config="{\"command\": $(json "$repo_root/tools/java_worker.sh"), \"env\": {\"SUNDIAL_BUILD_DIR\": $(json "$build")}}"
exec java -cp "$jar:$(cat "$cpf")" dev.sundial.xlang.LoopbackExpansionService "$port" \
    --defaultEnvironmentType=PROCESS --defaultEnvironmentConfig="$config" \
    --filesToStage="$jar" "$@"
