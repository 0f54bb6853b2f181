"""trace_check.py SUNDIAL SUNDIALCTL BIN_DIR - a job's time trace and runner-measured counts,
for the C SDK's examples on `sundial serve` (issue 37):

  - element and byte counts per PCollection are measured by the runner (count_source
    "runner") for a C SDK job, whose SDK reports no element counts;
  - GET /api/jobs/ID/trace: every record, in order; the kind and stage filters; wall=0; a bad
    kind is a 400 naming it; the leaderboard's trace has its early, on-time and late panes,
    its dropped late score, its TestStream events and its clock moves;
  - sundialctl trace: JSON lines when piped (the same records as the API), --kind/--stage,
    a table on a terminal (through script(1) when it is there);
  - sundialctl trace --diff: two runs of the same job are identical (also against a saved
    file), byte for byte without wall times; accumulating vs discarding panes differ (exit 1);
    an unreadable input is exit 2;
  - the pause gate in the trace (issue 38): session_timeout run paused from its start and
    stepped over HTTP (one event, 3 h, resume) has its pause and step records, with their
    fields, under ?kind=pause,step; `sundialctl trace` describes them in its table; --diff
    against the unpaused run is identical (the gate's records left out) and, with --control,
    different.
Exit 0 on success, 1 on failure.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def http(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url):
    status, body = http(url)
    if status != 200:
        raise RuntimeError("GET %s: HTTP %d %s" % (url, status, body[:300]))
    return json.loads(body)


def post(url):
    req = urllib.request.Request(url, method="POST", data=b"", headers={"X-Sundial-Action": "1"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def paused_session(base, ep, bindir):
    """session_timeout --pause=start, stepped over HTTP: one event, 3 h, resume. Its job id."""
    before = len(get_json(base + "api/jobs")["jobs"])
    proc = subprocess.Popen([os.path.join(bindir, "session_timeout"), "--endpoint=" + ep,
                             "--pause=start"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        job = None
        for _ in range(400):
            jobs = get_json(base + "api/jobs")["jobs"]
            if len(jobs) > before:
                job = jobs[0]["id"]
                break
            time.sleep(0.05)
        if not check(job is not None, "session_timeout --pause=start: its job appears"):
            return None
        gate = base + "api/jobs/%s/" % job

        def rest(after):
            for _ in range(1200):
                d = get_json(gate + "pause")
                if (d.get("at_rest") and d["time_steps"] > after) or d.get("state") == "DONE":
                    return d
                time.sleep(0.05)
            raise RuntimeError("job %s did not come to rest: %s" % (job, get_json(gate + "pause")))

        d = rest(-1)
        check(d["reason"] == "paused from the start", "paused: at rest from the start (%s)" % d["reason"])
        post(gate + "step?events=1")
        d = rest(d["time_steps"])
        post(gate + "step?for=3h")
        rest(d["time_steps"])
        post(gate + "resume")
        out, err = proc.communicate(timeout=60)
        check(proc.returncode == 0, "paused: resumed, session_timeout ends (exit %s) %s"
              % (proc.returncode, err[-300:]))
        return job
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120, **kw)


def main():
    sundial, ctl, bindir = sys.argv[1], sys.argv[2], sys.argv[3]
    serve = subprocess.Popen([sundial, "serve", "--port", "0", "--web_port", "0", "--serve_http"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tmp = tempfile.mkdtemp(prefix="trace_check.")
    try:
        ep = serve.stdout.readline().split()[-1]
        base = serve.stdout.readline().split()[-1]
        jobs = {}
        for name, args in (("lb1", []), ("lb2", []), ("lbd", ["--discarding"]), ("st", None)):
            prog = os.path.join(bindir, "session_timeout" if args is None else "leaderboard")
            r = run([prog, "--endpoint=" + ep] + (args or []))
            check(r.returncode == 0, "%s ran (exit %d) %s" % (name, r.returncode, r.stderr[-300:]))
            jobs[name] = get_json(base + "api/jobs")["jobs"][0]["id"]  # newest first
        lb = jobs["lb1"]

        # ---- runner-measured counts (the C SDK sends no element counts)
        view = get_json(base + "api/jobs/" + lb)["view"]
        pcs = {p["name"]: p for p in view["pcollections"]}
        scores = pcs.get("Scores.out", {})
        check(scores.get("count_source") == "runner" and (scores.get("elements") or 0) > 0
              and (scores.get("bytes") or 0) > 0 and scores.get("sdk_elements") is None,
              "Scores.out counted by the runner: %s" % scores)
        stage_pcs = {i for s in view["stages"] for i in s["inputs"] + s["outputs"]}
        check(all(view["pcollections"][i]["count_source"] == "runner" for i in stage_pcs),
              "every PCollection between stages is counted by the runner")

        # ---- the API
        doc = get_json(base + "api/jobs/%s/trace" % lb)
        recs = doc["records"]
        check(doc["available"] and not doc["live"] and not doc["cut"]
              and doc["total"] == len(recs) and len(recs) > 20,
              "the trace of %s: %d records, total %d" % (lb, len(recs), doc["total"]))
        check([r["seq"] for r in recs] == list(range(len(recs))), "records in order, seq 0..n-1")
        check(all("wall" in r and "clock" in r for r in recs), "records carry clock and wall")
        kinds = [r["kind"] for r in recs]
        panes = [r for r in recs if r["kind"] == "pane"]
        timings = sorted({p["cause"] for p in panes})
        check(set(timings) >= {"early", "on_time", "late"},
              "leaderboard panes: early, on time and late (%s)" % timings)
        check(all((isinstance(p.get("window"), dict) or p.get("window") == "global") and "key" in p
                  for p in panes) and any(isinstance(p.get("window"), dict) for p in panes),
              "panes carry their window and key digest")
        check(kinds.count("late") >= 1, "the too-late score is in the trace (%d)" % kinds.count("late"))
        check(kinds.count("teststream") >= 5, "TestStream events (%d)" % kinds.count("teststream"))
        check(any(r["kind"] == "clock" and r.get("cause") == "teststream" for r in recs),
              "a clock move caused by the TestStream")
        check(kinds.count("wm_out") >= len(view["stages"]), "output watermark steps (%d)" % kinds.count("wm_out"))
        gbk = next(s["id"] for s in view["stages"] if s["transforms"] == ["ByTeam"])
        only = get_json(base + "api/jobs/%s/trace?kind=pane&stage=%s" % (lb, gbk))["records"]
        check(only == [p for p in panes if p.get("stage") == gbk] and len(only) >= 3,
              "?kind=pane&stage=%s: that stage's %d panes" % (gbk, len(only)))
        two = get_json(base + "api/jobs/%s/trace?kind=wm_out,late&wall=0" % lb)["records"]
        check({r["kind"] for r in two} == {"wm_out", "late"} and all("wall" not in r for r in two),
              "?kind=wm_out,late&wall=0")
        after = get_json(base + "api/jobs/%s/trace?after=10" % lb)["records"]
        check([r["seq"] for r in after] == list(range(11, len(recs))), "?after=10")
        status, body = http(base + "api/jobs/%s/trace?kind=panes" % lb)
        check(status == 400 and b'panes' in body, "a bad kind: 400 naming it (%d %s)" % (status, body[:120]))
        status, body = http(base + "api/jobs/job-999/trace")
        check(status == 404, "an unknown job: 404")
        st_recs = get_json(base + "api/jobs/%s/trace" % jobs["st"])["records"]
        fires = [r for r in st_recs if r["kind"] == "timer_fire"]
        check(len(fires) == 5 and all(r.get("cause") == "processing_time" and r.get("name") == "timeout"
                                      for r in fires),
              "session_timeout: its 5 processing-time timer firings (%d)" % len(fires))

        # ---- sundialctl trace
        r = run([ctl, "--endpoint", ep, "trace", lb])
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        check(r.returncode == 0 and lines == recs, "sundialctl trace (piped): the API's records as JSON lines")
        r = run([ctl, "--endpoint", ep, "trace", lb, "--kind", "pane", "--stage", gbk])
        check(r.returncode == 0 and [json.loads(x) for x in r.stdout.splitlines()] == only,
              "sundialctl trace --kind pane --stage %s" % gbk)
        r = run([ctl, "--endpoint", ep, "trace", lb, "--kind", "panes"])
        check(r.returncode == 2 and "panes" in r.stderr, "sundialctl trace --kind panes: usage error naming it")
        if shutil.which("script"):
            r = run(["script", "-qec", "%s --endpoint %s trace %s --kind pane" % (ctl, ep, lb), "/dev/null"])
            out = r.stdout.replace("\r", "")
            check("STEP" in out and "on_time pane #" in out and ("%d of %d records" % (len(panes), len(recs))) in out,
                  "sundialctl trace on a terminal: a table\n" + out[:600])
        else:
            print("skip: no script(1) for the terminal table")

        # ---- --diff
        r = run([ctl, "--endpoint", ep, "trace", "--diff", lb, jobs["lb2"]])
        check(r.returncode == 0 and "identical" in r.stdout,
              "trace --diff of two runs of leaderboard: identical (%d) %s" % (r.returncode, r.stdout[:300]))
        a = http(base + "api/jobs/%s/trace?wall=0" % lb)[1].replace(lb.encode(), b"")
        b = http(base + "api/jobs/%s/trace?wall=0" % jobs["lb2"])[1].replace(jobs["lb2"].encode(), b"")
        check(a == b, "the two runs' traces are byte-identical without wall times (%d bytes)" % len(a))
        saved = os.path.join(tmp, "lb1.jsonl")
        with open(saved, "w") as f:
            f.write(run([ctl, "--endpoint", ep, "trace", lb]).stdout)
        r = run([ctl, "--endpoint", ep, "trace", "--diff", saved, jobs["lb2"]])
        check(r.returncode == 0, "trace --diff of a saved file and a job: identical")
        r = run([ctl, "--endpoint", ep, "trace", "--diff", lb, jobs["lbd"]])
        check(r.returncode == 1 and "\n-{" in r.stdout and "\n+{" in r.stdout,
              "accumulating vs discarding: different, with - and + lines (%d)" % r.returncode)
        r = run([ctl, "--endpoint", ep, "trace", "--diff", lb, os.path.join(tmp, "missing")])
        check(r.returncode == 2, "an unknown job or file: exit 2 (%d)" % r.returncode)

        # ---- the pause gate's records
        pj = paused_session(base, ep, bindir)
        if pj is not None:
            gate = get_json(base + "api/jobs/%s/trace?kind=pause,step" % pj)["records"]
            got = ["%s:%s" % (g["kind"], g.get("cause")) for g in gate]
            check(got == ["pause:start", "step:events", "pause:step_done", "step:for",
                          "pause:step_done", "step:resume"],
                  "?kind=pause,step: the gate's records in order (%s)" % got)
            hour = 3600000
            if len(gate) == 6:
                first, ev, _, dur = gate[0], gate[1], gate[2], gate[3]
                check(first.get("count") == 1 and first.get("index") == 0 and first.get("t") == 8 * hour
                      and first["clock"] == 0 and "t2" not in first and "stage" not in first,
                      "the first pause: before TestStream event #0, which moves the clock to 8 h (%s)" % first)
                check(ev.get("count") == 1 and "t" not in ev, "step events=1: count 1 (%s)" % ev)
                check(dur.get("count") == 3 * hour and dur.get("t2") == 8 * hour and dur.get("t") == 11 * hour,
                      "step for=3h: from 8 h to 11 h of processing time (%s)" % dur)
            if shutil.which("script"):
                r = run(["script", "-qec", "%s --endpoint %s trace %s --kind pause,step" % (ctl, ep, pj),
                         "/dev/null"])
                out = r.stdout.replace("\r", "")
                check("paused from the start, before TestStream event #0" in out and
                      "step: for 3 h of processing time, +8 h -> +11 h" in out and
                      "resume: the gate opens for good" in out and "6 of " in out,
                      "sundialctl trace --kind pause,step on a terminal\n" + out[:900])
            r = run([ctl, "--endpoint", ep, "trace", "--diff", jobs["st"], pj])
            check(r.returncode == 0 and "left out: 0 and 6" in r.stdout,
                  "trace --diff unpaused paused: identical but for the gate's records (%d) %s"
                  % (r.returncode, r.stdout[:600]))
            r = run([ctl, "--endpoint", ep, "trace", "--diff", jobs["st"], pj, "--control"])
            check(r.returncode == 1 and '"kind":"pause","cause":"start"' in r.stdout,
                  "trace --diff --control: the gate's records differ (%d) %s" % (r.returncode, r.stdout[:400]))
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=20)
        except subprocess.TimeoutExpired:
            serve.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("trace_check: %d failure(s)" % len(failures))
        return 1
    print("trace_check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
