#!/usr/bin/env bash
#
# tools/java_suite.sh BUILD_DIR [sundial|prism] [-- extra mvn args...]
#
# Runs Beam's Java ValidatesRunner suite (the JUnit category ValidatesRunner of
# beam-sdks-java-core 2.73.0's tests jar; Maven project tests/java, whose dependencies
# tools/setup.sh resolved into BUILD_DIR/m2) against Sundial (BUILD_DIR/bin/sundial, the default)
# or against Beam's Prism (BUILD_DIR/bin-prism/prism), and prints every failing test with its
# first error line, then one line
#     java_suite: RUNNER: N passed, N failed, N skipped in S s
# (failed counts JUnit failures and errors), parsed from the surefire reports.
#
# Extra arguments after -- go to mvn, e.g. -Dtest='ParDoTest*,GroupByKeyTest*' or
# -Dsundial.groups=org.apache.beam.sdk.testing.UsesTestStream,... (categories run instead of
# ValidatesRunner; the excluded categories stay excluded).
#
# With JAVA_SUITE_SICKBAY=1 (as ctest runs it), the tests listed in tests/java/sickbay.txt are
# deselected and each is printed with its reason: known failures are named in every run, never
# hidden, and the list is the to-do list. (Not combined with an -Dtest of your own: then the
# sickbay is not applied, and the run says so.)
#
# Each pipeline has a time limit (JAVA_SUITE_TIMEOUT seconds, default 120, passed as
# --testTimeoutSeconds): a pipeline that has not finished by then is cancelled, its runner
# stopped, and its test fails. JAVA_SUITE_TOTAL_TIMEOUT (seconds, default 0 = none) bounds the
# whole mvn run. Everything goes under BUILD_DIR/java-suite/RUNNER/ (or $JAVA_SUITE_OUT): mvn.log, Maven's output
# (target/, with target/surefire-reports), user.home (home/, fresh each run), and one runner log
# per pipeline in runner-logs/, named after the job (Sundial's log level: SUNDIAL_LOG, default
# warn).
#
# Exit status: 0 = all passed; 1 = some failed (or mvn failed); 2 for a bad command line; 77 when
# the suite cannot run (tools/setup.sh left BUILD_DIR/java/NOT-RUN, or Prism is missing): such a
# run is reported as NOT RUN, never as passed.

set -uo pipefail

usage() { echo "usage: tools/java_suite.sh BUILD_DIR [sundial|prism] [-- mvn args]" >&2; exit 2; }
not_run() { echo "java_suite: NOT RUN: $*"; exit 77; }

[[ $# -ge 1 ]] || usage
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "$1" 2>/dev/null && pwd)" || { echo "java_suite: no build directory $1" >&2; exit 2; }
shift
runner=sundial
if [[ $# -gt 0 && "$1" != "--" ]]; then runner="$1"; shift; fi
if [[ $# -gt 0 && "$1" == "--" ]]; then shift; fi
extra=("$@")

[[ -f "$build_dir/java/NOT-RUN" ]] && not_run "Java suite: $(cat "$build_dir/java/NOT-RUN")"
[[ -d "$build_dir/m2" ]] || not_run "no Maven repository $build_dir/m2 (run tools/setup.sh $build_dir)"
command -v mvn >/dev/null 2>&1 || not_run "mvn is not installed (run tools/setup.sh $build_dir)"
command -v java >/dev/null 2>&1 || not_run "java is not installed (run tools/setup.sh $build_dir)"

case "$runner" in
sundial)
    bin="$build_dir/bin/sundial"
    [[ -x "$bin" ]] || { echo "java_suite: $bin is missing: build Sundial first" >&2; exit 2; }
    ;;
prism)
    bin="$build_dir/bin-prism/prism"
    if [[ ! -x "$bin" ]] && command -v go >/dev/null 2>&1; then
        echo "java_suite: building Prism v2.77.0 into $build_dir/bin-prism"
        mkdir -p "$build_dir/bin-prism"
        GOBIN="$build_dir/bin-prism" go install github.com/apache/beam/sdks/v2/go/cmd/prism@v2.77.0 \
            >"$build_dir/bin-prism/go-install.log" 2>&1 || true
    fi
    [[ -x "$bin" ]] || not_run "no Prism binary $bin: $(cat "$build_dir/bin-prism/NOT-RUN" 2>/dev/null \
        || echo "run tools/setup.sh $build_dir")"
    ;;
*) usage ;;
esac

out_dir="${JAVA_SUITE_OUT:-$build_dir/java-suite/$runner}"
rm -rf "$out_dir"
mkdir -p "$out_dir/home" "$out_dir/runner-logs" || { echo "java_suite: cannot create $out_dir" >&2; exit 2; }
out_dir="$(cd "$out_dir" && pwd)" # Maven runs elsewhere: every path it is given is absolute
# SD_SUITE_RUNNER_ARGS adds flags to every runner command line (Sundial's, e.g.
# "--memory_limit 1" to run the suite with everything spilled), through a wrapper.
if [[ -n "${SD_SUITE_RUNNER_ARGS:-}" ]]; then
    cat >"$out_dir/runner-wrapper" <<EOF
#!/usr/bin/env bash
exec "$bin" "\$@" $SD_SUITE_RUNNER_ARGS
EOF
    chmod +x "$out_dir/runner-wrapper"
    bin="$out_dir/runner-wrapper"
fi

# Sickbay: lines "CLASS#METHOD REASON" (CLASS relative to org.apache.beam.sdk, nested classes
# with $), turned into surefire exclusions. -Dtest overrides the pom's includes, so the default
# include patterns go first (they match the nested test classes too: ParDoTest$StateTests).
sickbay=()
if [[ "${JAVA_SUITE_SICKBAY:-0}" == 1 && -f "$repo_root/tests/java/sickbay.txt" ]]; then
    own_test=0
    for a in "${extra[@]}"; do
        [[ "$a" == -Dtest=* ]] && own_test=1
    done
    if [[ $own_test == 1 ]]; then
        echo "java_suite: sickbay not applied: the command line has its own -Dtest"
    else
        pattern="**/Test*,**/*Test,**/*Tests,**/*TestCase"
        while read -r s_test s_reason; do
            [[ -z "$s_test" || "$s_test" == \#* ]] && continue
            s_class="${s_test%%#*}"
            s_method="${s_test#*#}"
            pattern+=",!org/apache/beam/sdk/${s_class//.//}#$s_method"
            echo "java_suite: sickbay (known failure, not run): $s_test: $s_reason"
        done <"$repo_root/tests/java/sickbay.txt"
        sickbay=("-Dtest=$pattern")
    fi
fi

echo "java_suite: $runner ($bin), output in $out_dir"
total_timeout="${JAVA_SUITE_TOTAL_TIMEOUT:-0}"
start=$(date +%s.%N)
(
    cd "$out_dir" || exit 2
    export SUNDIAL_LOG="${SUNDIAL_LOG:-warn}"
    timeout_cmd=()
    [[ "$total_timeout" != 0 ]] && timeout_cmd=(timeout --kill-after=30 "$total_timeout")
    "${timeout_cmd[@]}" mvn -B -o -f "$repo_root/tests/java/pom.xml" \
        -Dmaven.repo.local="$build_dir/m2" \
        -Dsundial.buildDir="$out_dir/target" \
        -Dsundial.bin="$bin" \
        -Dsundial.home="$out_dir/home" \
        -Dsundial.logDir="$out_dir/runner-logs" \
        -Dsundial.testTimeoutSeconds="${JAVA_SUITE_TIMEOUT:-120}" \
        "${sickbay[@]}" "${extra[@]}" test
) >"$out_dir/mvn.log" 2>&1
rc=$?
end=$(date +%s.%N)
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')

summary="$(python3 - "$out_dir/target/surefire-reports" <<'EOF'
import glob, os, sys
import xml.etree.ElementTree as ET
files = sorted(glob.glob(os.path.join(sys.argv[1], 'TEST-*.xml')))
# A test can have more than one <testcase> (a failure in the test and another in a rule or an
# @After): one test, failed if any of its entries failed.
status, first_error, order = {}, {}, []
for path in files:
    try:
        root = ET.parse(path).getroot()
    except Exception as e:
        print("java_suite: unreadable report %s (%s)" % (path, e))
        continue
    for tc in root.iter('testcase'):
        key = (tc.get('classname', ''), tc.get('name', ''))
        if key not in status:
            order.append(key)
            status[key] = 'passed'
        bad = [r for r in tc if r.tag in ('failure', 'error')]
        if bad:
            if status[key] != 'failed':
                r = bad[0]
                text = (r.get('message') or r.text or '').strip()
                first = ''
                for line in text.splitlines():
                    line = line.strip()
                    if line and not line.startswith('at ') \
                            and not line.startswith('The Runner experienced'):
                        first = line
                        break
                first_error[key] = (float(tc.get('time') or 0), first or r.get('type', ''))
            status[key] = 'failed'
        elif any(r.tag == 'skipped' for r in tc) and status[key] == 'passed':
            status[key] = 'skipped'
for key in order:
    if status[key] == 'failed':
        secs, first = first_error[key]
        cls = key[0].replace('org.apache.beam.sdk.', '')
        print("java_suite: FAILED %s.%s (%.1f s): %s" % (cls, key[1], secs, first[:240]))
t = len(order)
f = sum(1 for k in order if status[k] == 'failed')
s = sum(1 for k in order if status[k] == 'skipped')
print("%d passed, %d failed, %d skipped" % (t - f - s, f, s))
EOF
)"
# The failing tests first, the counts on the last line.
printf '%s\n' "$summary" | sed '$d'
counts="$(printf '%s\n' "$summary" | tail -n 1)"
grep -E '^\[(ERROR|WARNING)\] (Failed to execute|Could not|Crashed|The forked VM)' "$out_dir/mvn.log" | head -5
echo "java_suite: $runner: $counts in $secs s"
if [[ $rc -ne 0 ]]; then
    echo "java_suite: mvn exited $rc (see $out_dir/mvn.log)"
    exit 1
fi
case "$counts" in
*" 0 failed"*) [[ "$counts" == "0 passed"* ]] && exit 1; exit 0 ;;
*) exit 1 ;;
esac
