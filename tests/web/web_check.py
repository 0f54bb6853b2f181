"""web_check.py SUNDIAL JOB_SCRIPT - the web UI against a running job, over plain HTTP.

Starts `SUNDIAL serve --port 0 --web_port 0 --serve_http` on loopback, checks its first two
stdout lines, runs JOB_SCRIPT (web_job.py, Beam's Python SDK) against it, and while the job
runs checks what the UI's JSON API and pages say:
  - /api/jobs lists the job RUNNING with its times;
  - the job's stages are named by the user transforms fused into them (Clicks, SlowScore,
    SumPerUser/..., the Format label with markup in it, unescaped in JSON);
  - watermarks, holds and timers are there, element counts per PCollection grow while it runs;
  - messages carry the state changes, and after the cancel what happened;
  - the timeline has samples for every stage and TestStream marks;
  - the pages are served with a CSP; POSTs need X-Sundial-Action; a foreign Host is refused;
  - POST cancel makes the job CANCELLED (and the job script sees CANCELLED);
  - POST drain on a second job makes it DRAINED, with every element read in its results.
Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def http(url, method="GET", headers=None, timeout=10):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get_json(url):
    status, _, body = http(url)
    if status != 200:
        raise RuntimeError("GET %s: HTTP %d %s" % (url, status, body[:200]))
    return json.loads(body)


def main():
    sundial, job_script = sys.argv[1], sys.argv[2]
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        print("NOT RUN: Beam's Python SDK is not installed (run tools/setup.sh)")
        return 77
    serve = subprocess.Popen([sundial, "serve", "--port", "0", "--web_port", "0", "--serve_http"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = None
    try:
        first = serve.stdout.readline().strip()
        second = serve.stdout.readline().strip()
        check(first.startswith("listening on 127.0.0.1:"), "first line: %r" % first)
        if not check(second.startswith("web ui on http://127.0.0.1:") and second.endswith("/"),
                     "second line: %r" % second):
            return 1
        endpoint = first.split()[-1]
        base = second.split()[-1]
        check(not second.endswith(":0/"), "port 0 was resolved to a real port")

        status, headers, body = http(base)
        check(status == 200 and b"<!doctype html>" in body, "GET / serves the page")
        check("script-src 'self'" in headers.get("Content-Security-Policy", ""),
              "the page has a Content-Security-Policy")
        status, headers, _ = http(base + "app.js")
        check(status == 200 and headers.get("Content-Type", "").startswith("text/javascript"),
              "GET /app.js")
        check(get_json(base + "api/jobs")["jobs"] == [], "no jobs before the first one")

        job = subprocess.Popen([sys.executable, job_script, endpoint], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        job_id = None
        for line in job.stdout:
            if line.startswith("JOB "):
                job_id = line.split()[1]
                break
        if not check(job_id is not None, "the job was submitted"):
            return 1

        # Wait until SlowScore has processed a few elements (counts come with commits).
        deadline = time.time() + 90
        doc = None

        def slow_count(d):
            for p in (d.get("view") or {}).get("pcollections", []):
                if p["name"].startswith("9SlowScore") or p["name"].startswith("SlowScore"):
                    return p["elements"] or 0
            return 0
        while time.time() < deadline:
            doc = get_json(base + "api/jobs/" + job_id)
            if doc["job"]["state"] == "RUNNING" and slow_count(doc) >= 3:
                break
            time.sleep(0.5)
        check(doc is not None and slow_count(doc) >= 3, "SlowScore's output is counted live")

        jobs = get_json(base + "api/jobs")["jobs"]
        listed = [j for j in jobs if j["id"] == job_id]
        check(len(listed) == 1 and listed[0]["state"] == "RUNNING", "/api/jobs lists it RUNNING")
        check(listed and listed[0]["started"] is not None and listed[0]["duration_ms"] > 0,
              "it has a start time and a duration")

        view = doc["view"]
        check(view is not None and view["live"], "the job has a live view")
        check(view["clock"] == "synthetic", "the clock is synthetic (test mode)")
        stages = view["stages"]
        names = [n for s in stages for n in s["transforms"]]
        print("      stages:", [(s["id"], s["kind"], s["transforms"]) for s in stages])
        check(any(s["kind"] == "teststream" and "Clicks" in s["transforms"] for s in stages),
              "the TestStream stage is named Clicks")
        check(any("SlowScore" in s["transforms"] for s in stages), "a stage is named SlowScore")
        check(any(n.startswith("SumPerUser") for s in stages if s["kind"] == "gbk"
                  for n in s["transforms"]), "the GroupByKey stage is named after SumPerUser")
        check('Format <img src=x onerror="window.__xss=1">' in names,
              "the markup label travels as plain JSON text")
        check(all(k in s for s in stages for k in
                  ("input_wm", "output_wm", "hold", "et_timers", "pt_timers", "pending")),
              "every stage has watermarks, hold, timers and pending counts")
        check(any(isinstance(s["output_wm"], int) for s in stages),
              "some output watermark is a finite time")
        before = slow_count(doc)
        time.sleep(2.5)
        doc2 = get_json(base + "api/jobs/" + job_id)
        check(slow_count(doc2) > before, "element counts grow while it runs (%d -> %d)"
              % (before, slow_count(doc2)))
        states = [m["state"] for m in doc2["messages"] if "state" in m]
        check(states[:3] == ["STOPPED", "STARTING", "RUNNING"], "state changes are messages")
        later = get_json(base + "api/jobs/%s?after=%d" % (job_id, doc2["last_seq"]))
        check(all(m["seq"] > doc2["last_seq"] for m in later["messages"]), "?after= pages messages")

        tl = get_json(base + "api/jobs/%s/timeline" % job_id)
        check(tl["full"] and len(tl["samples"]) >= 2, "the timeline has samples (%d)"
              % len(tl["samples"]))
        check(all(len(r) == 3 + len(stages) for r in tl["samples"]),
              "each sample has every stage's output watermark")
        kinds = {m["kind"] for m in tl["marks"]}
        check("ts_watermark" in kinds and "ts_clock" in kinds,
              "TestStream watermark and processing-time events are marked (%s)" % sorted(kinds))
        last = tl["samples"][-1][0]
        inc = get_json(base + "api/jobs/%s/timeline?gen=%d&after=%d" % (job_id, tl["generation"], last))
        check(not inc["full"] and all(r[0] > last for r in inc["samples"]),
              "the timeline can be fetched incrementally")

        status, _, _ = http(base + "api/jobs/%s/cancel" % job_id, method="POST")
        check(status == 403, "a POST without X-Sundial-Action is refused (%d)" % status)
        status, _, _ = http(base + "api/jobs", headers={"Host": "evil.example:80"})
        check(status == 421, "a foreign Host header is refused (%d)" % status)
        status, _, _ = http(base + "api/jobs/job-999")
        check(status == 404, "an unknown job is 404")

        status, _, body = http(base + "api/jobs/%s/cancel" % job_id, method="POST",
                               headers={"X-Sundial-Action": "1"})
        check(status == 200 and json.loads(body)["state"] in ("CANCELLING", "CANCELLED"),
              "POST cancel is accepted: %s" % body[:80])
        deadline = time.time() + 30
        state = None
        while time.time() < deadline:
            state = get_json(base + "api/jobs/" + job_id)["job"]["state"]
            if state == "CANCELLED":
                break
            time.sleep(0.3)
        check(state == "CANCELLED", "the job is CANCELLED")
        try:
            out, _ = job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            out, _ = job.communicate()
        check("FINAL" in out and "CANCELLED" in out.split("FINAL", 1)[1],
              "the SDK saw CANCELLED: %r" % out.strip().splitlines()[-1:])
        final = get_json(base + "api/jobs/" + job_id)
        texts = [m.get("text", "") for m in final["messages"]]
        check("cancel requested" in texts and any("Run to CANCELLED" in t for t in texts),
              "the job's messages tell the cancel and the run's end")
        check(final["view"] is not None and not final["view"]["live"] and
              len(final["view"]["stages"]) == len(stages), "a finished job keeps its last view")
        check(final["job"]["ended"] is not None, "a finished job has an end time")
        status, _, body = http(base + "api/jobs/%s/drain" % job_id, method="POST",
                               headers={"X-Sundial-Action": "1"})
        check(status == 409 and b"CANCELLED" in body,
              "Drain of the cancelled job answers 409 with the reason (%d %s)" % (status, body[:80]))

        # A second job, drained: its TestStream stops, every window read so far fires.
        job = subprocess.Popen([sys.executable, job_script, endpoint, "web-ui-drain", "DRAINED"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        job_id = None
        for line in job.stdout:
            if line.startswith("JOB "):
                job_id = line.split()[1]
                break
        if not check(job_id is not None, "the second job was submitted"):
            return 1
        deadline = time.time() + 90
        while time.time() < deadline:
            doc = get_json(base + "api/jobs/" + job_id)
            if doc["job"]["state"] == "RUNNING" and slow_count(doc) >= 3:
                break
            time.sleep(0.5)
        status, _, body = http(base + "api/jobs/%s/drain" % job_id, method="POST",
                               headers={"X-Sundial-Action": "1"})
        check(status == 200 and json.loads(body)["state"] in ("DRAINING", "DRAINED"),
              "POST drain is accepted: %s" % body[:80])
        try:
            out, _ = job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            out, _ = job.communicate()
        done = get_json(base + "api/jobs/" + job_id)
        scored = slow_count(done)
        sums = [int(l.rsplit(":", 1)[1]) for l in out.splitlines() if l.startswith("OUT ")]
        check(job.returncode == 0 and done["job"]["state"] == "DRAINED",
              "the drained job ends DRAINED, and the SDK saw it: %r"
              % out.strip().splitlines()[-1:])
        check(0 < scored < 200 and sum(sums) == scored,
              "the stream stopped early and every scored click is summed (%d of %d)"
              % (sum(sums), scored))
        texts = [m.get("text", "") for m in done["messages"]]
        check("drain requested" in texts and any("Run to DRAINED" in t for t in texts),
              "the job's messages tell the drain and the run's end")
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        serve.terminate()
        try:
            _, err = serve.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            serve.kill()
            _, err = serve.communicate()
        check(serve.returncode == 0, "sundial exited 0 after SIGTERM (%s)" % serve.returncode)
        if failures:
            sys.stderr.write("----- sundial stderr (last 40 lines) -----\n")
            sys.stderr.write("\n".join(err.splitlines()[-40:]) + "\n")
    if failures:
        print("web_check: %d failure(s)" % len(failures))
        return 1
    print("web_check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
