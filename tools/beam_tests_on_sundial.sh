#!/usr/bin/env bash
#
# tools/beam_tests_on_sundial.sh BUILD_DIR [MODULE...] - Beam's own test modules, from the
# installed apache_beam package, run twice: as they are (Beam's DirectRunner default, which
# picks Prism or Python's older runners) and with `pytest --sundial` from the sundial-beam
# wheel (BUILD_DIR/pkg, made by tools/package.sh). Prints both runs' counts, the tests whose
# outcome differs, and the Sundial job list the plugin saw (the jobs ran on Sundial). Exit 0
# when the outcomes are the same test by test and Sundial's job list is not empty.
#
# MODULEs are paths inside apache_beam; default: Beam's YAML tests that need no pandas or
# JavaScript engine, and a few transform test modules. The wheel goes into a venv of its own,
# BUILD_DIR/pkg/proof-venv, which sees BUILD_DIR/py (Beam, pytest) and BUILD_DIR/pkg-venv (the
# YAML tests' jinja2, jsonschema) through a .pth file. Logs: BUILD_DIR/pkg/beam-tests/.
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:?usage: beam_tests_on_sundial.sh BUILD_DIR [MODULE...]}" && pwd)"
shift
modules=("$@")
if [[ ${#modules[@]} -eq 0 ]]; then
    modules=(yaml/yaml_transform_test.py yaml/yaml_combine_test.py yaml/yaml_join_test.py
             yaml/yaml_testing_test.py yaml/yaml_transform_scope_test.py
             transforms/deduplicate_test.py transforms/window_test.py)
fi
wheel="$(ls "$build"/pkg/sundial_beam-*manylinux*.whl 2>/dev/null | head -n 1)"
[[ -n "$wheel" ]] || { echo "beam_tests: no wheel in $build/pkg: run tools/package.sh $build" >&2; exit 2; }
venv="$build/pkg/proof-venv"
out="$build/pkg/beam-tests"
rm -rf "$venv" "$out"
mkdir -p "$out/home"
"$build/py/bin/python" -m venv "$venv" || exit 2
site() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
printf '%s\n%s\n' "$(site "$build/pkg-venv/bin/python")" "$(site "$build/py/bin/python")" \
    >"$(site "$venv/bin/python")/sundial-proof.pth"
"$venv/bin/python" -m pip install --quiet --no-deps "$wheel" || exit 2
beam_dir="$("$venv/bin/python" -c 'import apache_beam, os; print(os.path.dirname(apache_beam.__file__))')"
paths=()
for m in "${modules[@]}"; do paths+=("$beam_dir/$m"); done

run() { # run NAME ARGS...: one pytest run of the modules, JUnit report in $out/NAME.xml
    local name="$1"
    shift
    (cd "$out" && HOME="$out/home" PYTHONPATH="$repo_root/tests/python" SUNDIAL_LOG=warn \
        "$venv/bin/python" -m pytest -c "$repo_root/tests/python/pytest.ini" --rootdir="$out" \
        --timeout=300 -q --junitxml="$out/$name.xml" "$@" "${paths[@]}") \
        >"$out/$name.log" 2>&1
    echo "beam_tests: $name: $(grep -E '^[=]* ?[0-9]+ (passed|failed)' "$out/$name.log" | tail -n 1) ($(tail -n 1 "$out/$name.log" | grep -o 'in [0-9.]*s'))"
}
run default
run sundial --sundial --sundial-report="$out/sundial-jobs.json"
grep '^sundial: ' "$out/sundial.log"

"$venv/bin/python" - "$out" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
out = sys.argv[1]
def outcomes(name):
    got = {}
    for tc in ET.parse(f"{out}/{name}.xml").getroot().iter("testcase"):
        kinds = [c.tag for c in tc if c.tag in ("failure", "error", "skipped")]
        got[tc.get("classname") + "::" + tc.get("name")] = kinds[0] if kinds else "passed"
    return got
a, b = outcomes("default"), outcomes("sundial")
diff = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
for t in diff:
    print(f"beam_tests: DIFFERS {t}: default {a.get(t)}, --sundial {b.get(t)}")
jobs = json.load(open(f"{out}/sundial-jobs.json"))["jobs"]
states = {}
for j in jobs:
    states[j["state"]] = states.get(j["state"], 0) + 1
print(f"beam_tests: {len(a)} tests; {len(diff)} differ; Sundial's job list: {len(jobs)} jobs {states}")
sys.exit(1 if diff or not jobs else 0)
PY
