#!/usr/bin/env bash
#
# tools/java_worker.sh --id=ID --provision_endpoint=HOST:PORT [...] - a Beam Java SDK worker as a
# local process: the command of the PROCESS environment that tools/expansion_service.sh hands out,
# started by the runner (Sundial) with the flags above, one process per Java environment of a job.
#
# It runs dev.sundial.xlang.JavaWorker (xlang/) on the classpath tools/setup.sh resolved into
# BUILD_DIR/xlang, the same one the expansion service runs with. BUILD_DIR is $SUNDIAL_BUILD_DIR
# (the expansion service puts it in the environment's payload), else ./build of the repository.
# Extra JVM flags: $SUNDIAL_JAVA_WORKER_OPTS. Whatever stops it from starting is printed to stderr
# with a non-zero exit status, which Sundial reports as the job's failure.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SUNDIAL_BUILD_DIR:-$repo_root/build}"
cpf="$build/xlang/classpath"
jar="$build/xlang/sundial-xlang.jar"
if [[ -f "$build/xlang/NOT-RUN" ]]; then
    echo "java worker: the Java expansion service and worker were not installed: $(cat "$build/xlang/NOT-RUN")" >&2
    exit 1
fi
if [[ ! -s "$cpf" || ! -f "$jar" ]]; then
    echo "java worker: no $cpf or $jar (run tools/setup.sh $build)" >&2
    exit 1
fi
command -v java >/dev/null 2>&1 || { echo "java worker: java is not installed" >&2; exit 1; }
# shellcheck disable=SC2086 # the options are words on purpose
exec java ${SUNDIAL_JAVA_WORKER_OPTS:-} -cp "$jar:$(cat "$cpf")" dev.sundial.xlang.JavaWorker "$@"
