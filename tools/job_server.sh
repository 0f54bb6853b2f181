#!/usr/bin/env bash
#
# tools/job_server.sh flink|spark [PORT] - Beam's Flink or Spark job server for C SDK pipelines
# (or any Beam SDK's), reachable only on this machine's loopback.
#
#   tools/job_server.sh flink 8099      # Flink local mini-cluster (--flink-master=[local])
#   tools/job_server.sh spark 8099      # Spark local[2]
#
# Beam's Java servers (job, artifact, Fn API) bind every interface whatever host they are
# given, so the server runs in a network namespace of its own that has only `lo`
# ("sundial-RUNNER-PORT", made with `ip netns add`; needs root), and socat forwards
# 127.0.0.1:PORT on the host to the job port inside it. Nothing else of the server is
# reachable from outside the namespace. Then, from the host:
#
#   build/bin/wordcount FILE --endpoint=localhost:8099 --process
#
# A PROCESS worker (--process) is started by the job server inside the namespace and needs
# nothing from outside. A LOOPBACK (external worker pool) job needs the runner to reach the
# client's worker pool on loopback, so that client must run inside the namespace too:
#
#   ip netns exec sundial-flink-8099 build/bin/wordcount FILE --endpoint=localhost:8099
#
# Ctrl-C (or SIGTERM) stops the server, the relay and removes the namespace.
#
# The classpaths come from tools/setup.sh (BUILD_DIR/jobservers/RUNNER.classpath, Beam 2.62.0
# resolved with Maven); BUILD_DIR is $SUNDIAL_BUILD_DIR, else ./build of the repository.
#
# Internal form, used by the ctest suites (tests/jobservers/run_examples.sh) inside a namespace
# they made themselves:
#   tools/job_server.sh --exec flink|spark BUILD_DIR PORT    exec the server in this namespace
#                                                             (PORT 0: an ephemeral port, logged
#                                                             as "JobService started on ...")
set -euo pipefail

die() { printf 'job_server: %s\n' "$*" >&2; exit 1; }
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The java command line of RUNNER's job server on job port PORT (into the array `cmd`).
server_cmd() {
    local runner=$1 build=$2 port=$3
    local cpf="$build/jobservers/$runner.classpath"
    if [[ -f "$build/jobservers/NOT-RUN" ]]; then
        die "the job servers were not installed: $(cat "$build/jobservers/NOT-RUN")"
    fi
    [[ -s "$cpf" ]] || die "no $cpf: run tools/setup.sh $build first"
    command -v java >/dev/null 2>&1 || die "java is not installed (tools/setup.sh installs it)"
    local common=(--job-port="$port" --artifact-port=0 --expansion-port=-1)
    case "$runner" in
    flink)
        cmd=(java -cp "$(cat "$cpf")" org.apache.beam.runners.flink.FlinkJobServerDriver
             --flink-master='[local]' "${common[@]}")
        ;;
    spark)
        # Spark 3.5 on Java 17 reaches into these JDK packages.
        local opens=() p
        for p in java.lang java.lang.invoke java.lang.reflect java.io java.net java.nio java.util \
                 java.util.concurrent java.util.concurrent.atomic sun.nio.ch sun.nio.cs \
                 sun.security.action sun.util.calendar; do
            opens+=("--add-opens=java.base/$p=ALL-UNNAMED")
        done
        cmd=(java "${opens[@]}" -cp "$(cat "$cpf")"
             org.apache.beam.runners.spark.SparkJobServerDriver --spark-master-url='local[2]'
             "${common[@]}")
        ;;
    *) die "unknown runner '$runner' (flink or spark)" ;;
    esac
}

if [[ "${1:-}" == "--exec" ]]; then
    [[ $# -eq 4 ]] || die "usage: job_server.sh --exec flink|spark BUILD_DIR PORT"
    server_cmd "$2" "$3" "$4"
    exec "${cmd[@]}"
fi

runner=${1:-}
port=${2:-8099}
[[ "$runner" == flink || "$runner" == spark ]] || die "usage: job_server.sh flink|spark [PORT]"
[[ "$port" =~ ^[0-9]+$ && "$port" -ge 1 && "$port" -le 65535 ]] || die "PORT must be 1..65535, not '$port'"
build="${SUNDIAL_BUILD_DIR:-$repo_root/build}"
build="$(cd "$build" 2>/dev/null && pwd)" || die "no build directory $build"
server_cmd "$runner" "$build" "$port" # checks the install before anything is made
[[ $(id -u) -eq 0 ]] || die "a network namespace needs root (ip netns add); run as root"
command -v ip >/dev/null 2>&1 || die "the ip command (iproute2) is missing"
command -v socat >/dev/null 2>&1 || die "socat is missing (apt-get install socat; tools/setup.sh installs it)"

ns="sundial-$runner-$port"
ip netns add "$ns" || die "cannot create network namespace $ns (is one left over? ip netns del $ns)"
server="" relay=""
cleanup() {
    set +e # every step runs, whatever the one before returned
    trap - EXIT INT TERM
    if [[ -n "$relay" ]]; then kill "$relay" 2>/dev/null; fi
    if [[ -n "$server" ]]; then
        kill "$server" 2>/dev/null
        wait "$server" 2>/dev/null
    fi
    # The server's own children (a PROCESS worker) live in the namespace too.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns del "$ns" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 0' INT TERM
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" "${cmd[@]}" &
server=$!
# The relay: each connection to 127.0.0.1:PORT on the host is joined to the same port on the
# namespace's loopback.
socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" \
    "EXEC:ip netns exec $ns socat STDIO TCP\\:127.0.0.1\\:$port" &
relay=$!
printf 'job_server: Beam %s job server starting in network namespace %s; host endpoint localhost:%s\n' \
    "$runner" "$ns" "$port"
printf 'job_server: LOOPBACK clients run inside it: ip netns exec %s PROGRAM --endpoint=localhost:%s\n' \
    "$ns" "$port"
wait "$server"
