/*
 * trace_browser_check.js SUNDIAL BUILD_DIR BIN_DIR - the time trace drawn by the web UI, in a
 * real headless Chromium (Debian's chromium, puppeteer-core from BUILD_DIR/web-node).
 *
 * Starts `SUNDIAL serve --port 0 --web_port 0 --serve_http`, runs the C SDK's leaderboard and
 * session_timeout examples (BIN_DIR) against it — jobs of a few tens of milliseconds — and for
 * each job page checks what the page shows against the job's trace from the API:
 *   - the timeline is drawn from the trace, and each stage's line has exactly as many steps
 *     as the trace has output-watermark records for it (not the ~100 ms samples);
 *   - one mark per pane (by timing: leaderboard's early, on-time and late panes), timer
 *     firing, TestStream event and late element; each with hover text (an SVG <title>);
 *   - the y axis: +∞ and −∞ bands, and at least two distinct round event-time labels, none
 *     of them the epoch's "00:00:00" repeated; the x axis in processing time reads in hours
 *     ("+1 h", ...) for hours of game time;
 *   - clicking a stage in the legend leaves only that stage's line (and again: all of them);
 *   - stage and PCollection names break only at "/" and "." in a narrow window (every segment
 *     of every name is on one line);
 *   - counts per PCollection come from the runner (the C SDK reports none);
 *   - session_timeout run paused from the start (--pause=start) and driven from its job page
 *     (Step, Step by 3h, Resume): the pause gate's records are marks, one per record of the
 *     trace's kinds pause and step, each with its hover text.
 * Screenshots: BUILD_DIR/web-screenshots/trace-leaderboard.png, trace-leaderboard-isolated.png,
 * trace-session-timeout.png, trace-session-paused.png, trace-narrow.png. The page must log no errors. Exit 0 pass,
 * 1 fail, 77 when chromium or puppeteer-core is missing (skipped, never passed).
 */
"use strict";

const { spawn, spawnSync } = require("child_process");
const fs = require("fs");
const http = require("http");
const path = require("path");
const readline = require("readline");

const [sundial, buildDir, binDir] = process.argv.slice(2);
const SKIP = 77;
const shots = path.join(buildDir, "web-screenshots");
const chromium = process.env.SD_CHROMIUM || "/usr/bin/chromium";
const failures = [];
const children = [];

function check(cond, what) {
    console.log((cond ? "ok:   " : "FAIL: ") + what);
    if (!cond) failures.push(what);
    return cond;
}

function skip(why) {
    console.log("NOT RUN: " + why);
    process.exit(SKIP);
}

function getJSON(url) {
    return new Promise((res, rej) => {
        http.get(url, (r) => {
            let body = "";
            r.on("data", (d) => { body += d; });
            r.on("end", () => { try { res(JSON.parse(body)); } catch (e) { rej(e); } });
        }).on("error", rej);
    });
}

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

function firstLines(child, n) {
    const rl = readline.createInterface({ input: child.stdout });
    const got = [];
    return new Promise((res, rej) => {
        const timer = setTimeout(() => rej(new Error("sundial did not start")), 20000);
        rl.on("line", (l) => { got.push(l); if (got.length === n) { clearTimeout(timer); res(got); } });
    });
}

/* What the page shows of the timeline. */
async function timelineFacts(page) {
    return page.evaluate(() => {
        const svg = document.querySelector("#timeline-svg");
        return {
            source: svg && svg.getAttribute("data-source"),
            lines: [...document.querySelectorAll("#timeline path[data-stage]")].map((p) => ({
                stage: p.getAttribute("data-stage"), steps: Number(p.getAttribute("data-steps")) })),
            marks: [...document.querySelectorAll("#timeline g.tmark")].map((g) => ({
                kind: g.getAttribute("data-kind"), timing: g.getAttribute("data-timing"),
                title: (g.querySelector("title") || {}).textContent || "" })),
            yticks: [...document.querySelectorAll("#timeline text.ytick")].map((t) => t.textContent),
            xticks: [...document.querySelectorAll("#timeline text.xtick")].map((t) => t.textContent),
        };
    });
}

/* Every "/"- or "."-separated segment of every stage and PCollection name on one line. */
async function brokenSegments(page) {
    return page.evaluate(() => {
        const bad = [];
        for (const holder of document.querySelectorAll("#stages-body .names li, #stages-body .io")) {
            for (const node of holder.childNodes) {
                if (node.nodeType !== Node.TEXT_NODE) continue;
                const text = node.textContent;
                const r = document.createRange();
                let from = 0;
                for (const seg of text.split(/(?<=[/. ])/)) {
                    const word = seg.trim();
                    const at = text.indexOf(word, from);
                    from = at + word.length;
                    if (word.length < 2) continue;
                    r.setStart(node, at);
                    r.setEnd(node, at + word.length);
                    const tops = new Set([...r.getClientRects()].map((x) => Math.round(x.top)));
                    if (tops.size > 1) bad.push(word);
                }
            }
        }
        return bad;
    });
}

/* A finished job's page, once its timeline is drawn from the trace: what it shows. */
async function finishedTimeline(page, base, jobId) {
    await page.goto(`${base}job/${jobId}`, { waitUntil: "load" });
    await page.waitForFunction(() => {
        const s = document.querySelector("#timeline-svg");
        return s && s.getAttribute("data-source") === "trace";
    }, { timeout: 20000, polling: 200 });
    await page.waitForFunction(() => document.querySelector("#status").textContent.includes("not refreshing"),
        { timeout: 20000, polling: 200 });
    return timelineFacts(page);
}

async function checkJob(page, base, jobId, label, expect) {
    const trace = await getJSON(`${base}api/jobs/${jobId}/trace`);
    const doc = await getJSON(`${base}api/jobs/${jobId}`);
    const recs = trace.records;
    check(recs.length > 0, `${label}: the API has its trace (${recs.length} records)`);
    const f = await finishedTimeline(page, base, jobId);
    check(f.source === "trace", `${label}: the timeline is drawn from the trace`);
    /* every step */
    const want = {};
    for (const r of recs) if (r.kind === "wm_out") want[r.stage] = (want[r.stage] || 0) + 1;
    const shown = Object.fromEntries(f.lines.map((l) => [l.stage, l.steps]));
    const stepsOk = doc.view.stages.every((s) => (shown[s.id] || 0) === (want[s.id] || 0));
    const total = Object.values(shown).reduce((a, b) => a + b, 0);
    check(stepsOk && f.lines.length === doc.view.stages.length,
        `${label}: every stage's line has its trace's watermark steps (${total} steps drawn; ` +
        `per stage ${JSON.stringify(shown)})`);
    check(total >= expect.minSteps, `${label}: at least ${expect.minSteps} watermark steps (${total})`);
    /* marks */
    const count = (k) => recs.filter((r) => r.kind === k).length;
    for (const k of ["pane", "timer_fire", "teststream", "late"]) {
        const drawn = f.marks.filter((m) => m.kind === k).length;
        check(drawn === count(k), `${label}: ${drawn} ${k} mark(s) for ${count(k)} record(s)`);
    }
    if (expect.timerFires !== undefined) {
        const fires = f.marks.filter((m) => m.kind === "timer_fire");
        check(fires.length === expect.timerFires && fires.every((m) => m.title.includes("timer timeout fired (processing time")),
            `${label}: ${expect.timerFires} processing-time timer firings marked (${fires.length}: ${JSON.stringify((fires[0] || {}).title)})`);
    }
    for (const t of expect.paneTimings || []) {
        check(f.marks.some((m) => m.kind === "pane" && m.timing === t), `${label}: a ${t} pane mark`);
    }
    check(f.marks.length > 0 && f.marks.every((m) => m.title.length > 10), `${label}: every mark has hover detail`);
    const paneTitle = (f.marks.find((m) => m.kind === "pane") || {}).title || "";
    if (expect.paneTimings) {
        check(/pane (early|on_time|late) #\d+, \d+ value\(s\)/.test(paneTitle) && paneTitle.includes("window ["),
            `${label}: a pane's hover text: ${JSON.stringify(paneTitle)}`);
    }
    /* axes */
    check(f.yticks.includes("+∞ (end of time)") && f.yticks.includes("−∞ (start of time)"),
        `${label}: ±∞ drawn as bands (${f.yticks.join(" | ")})`);
    const finite = f.yticks.filter((t) => !t.includes("∞"));
    if (expect.finiteY) {
        check(finite.length >= 2 && new Set(finite).size === finite.length,
            `${label}: distinct event-time labels (${finite.join(" | ")})`);
    } else {
        /* every watermark of the job is −∞ or +∞: no made-up scale (never the epoch) */
        const note = await page.$eval("#timeline-svg", (s) => s.textContent);
        check(finite.length === 0 && note.includes("no finite output watermark"),
            `${label}: only the ±∞ bands, no invented event times (${finite.join(" | ")})`);
    }
    for (const l of expect.yLabels || []) check(finite.includes(l), `${label}: y axis shows ${l}`);
    await page.click("#x-clock");
    const fc = await timelineFacts(page);
    check(fc.xticks.some((t) => expect.xClock.test(t)),
        `${label}: processing-time axis reads ${expect.xClock} (${fc.xticks.join(" | ")})`);
    await page.click("#x-steps");
    /* counts measured by the runner */
    const sources = await page.$$eval("#pcollections tbody tr", (rows) => rows.map((r) => r.getAttribute("data-source")));
    check(sources.length > 0 && sources.every((s) => s === "runner"),
        `${label}: every PCollection counted by the runner (${sources.length}: ${[...new Set(sources)].join(",")})`);
    return doc;
}

/* session_timeout paused from the start, stepped from its job page; the gate's marks. */
async function checkPaused(page, base, endpoint, binDir) {
    const before = (await getJSON(`${base}api/jobs`)).jobs.length;
    const child = spawn(path.join(binDir, "session_timeout"), [`--endpoint=${endpoint}`, "--pause=start"],
        { stdio: ["ignore", "pipe", "pipe"] });
    children.push(child);
    let out = "";
    child.stdout.on("data", (d) => { out += d; });
    child.stderr.on("data", (d) => { out += d; });
    const exited = new Promise((res) => child.on("exit", (code) => res(code)));
    let id = null;
    for (let i = 0; i < 400 && id === null; i++) {
        const jobs = (await getJSON(`${base}api/jobs`)).jobs;
        if (jobs.length > before) id = jobs[0].id;
        else await sleep(50);
    }
    if (!check(id !== null, "session_timeout --pause=start: its job appears")) return;
    const gate = () => getJSON(`${base}api/jobs/${id}/pause`);
    /* until the job rests after more than `after` time steps (or ends) */
    const rest = async (after) => {
        for (let i = 0; i < 600; i++) {
            const d = await gate();
            if ((d.at_rest && d.time_steps > after) || d.state === "DONE") return d;
            await sleep(50);
        }
        throw new Error(`job ${id} did not come to rest: ${JSON.stringify(await gate())}`);
    };
    const d0 = await rest(-1);
    check(d0.at_rest && d0.reason === "paused from the start",
        `paused: the job rests from its start (${d0.reason})`);
    await page.goto(`${base}job/${id}`, { waitUntil: "load" });
    await page.waitForFunction(() => { const b = document.querySelector("#step"); return b && !b.disabled; },
        { timeout: 20000, polling: 100 });
    await page.click("#step");
    const d1 = await rest(d0.time_steps);
    await page.waitForFunction(() => !document.querySelector("#step-for-btn").disabled, { timeout: 20000, polling: 100 });
    await page.$eval("#step-for", (e) => { e.value = "3h"; });
    await page.click("#step-for-btn");
    const d2 = await rest(d1.time_steps);
    check(d2.state === "RUNNING" && d2.at_rest, `paused: Step, then Step by 3h: at rest again (${d2.reason})`);
    await page.waitForFunction(() => !document.querySelector("#resume").disabled, { timeout: 20000, polling: 100 });
    await page.click("#resume");
    const code = await Promise.race([exited, sleep(60000).then(() => "timeout")]);
    check(code === 0, `paused: resumed from the page, session_timeout ends (exit ${code}) ${out.trim().split("\n").pop()}`);
    const recs = (await getJSON(`${base}api/jobs/${id}/trace?kind=pause,step`)).records;
    const seq = recs.map((r) => `${r.kind}:${r.cause}`).join(" ");
    check(seq === "pause:start step:events pause:step_done step:for pause:step_done step:resume",
        `paused: the trace's gate records: ${seq}`);
    const f = await finishedTimeline(page, base, id);
    for (const k of ["pause", "step"]) {
        const drawn = f.marks.filter((m) => m.kind === k).length;
        const want = recs.filter((r) => r.kind === k).length;
        check(drawn === want && want > 0, `paused: ${drawn} ${k} mark(s) for ${want} record(s)`);
    }
    const titles = f.marks.filter((m) => m.kind === "pause" || m.kind === "step").map((m) => m.title);
    for (const want of ["paused from the start", "step: the next 1 time step(s)", "step: for 3 h 0 min of processing time",
        "the step is done: at rest again", "resume: the gate opens for good"]) {
        check(titles.some((t) => t.includes(want)), `paused: a mark's hover text says "${want}"`);
    }
    check(titles.some((t) => /before TestStream event #0/.test(t)), "paused: the first pause names the event it holds back");
    await page.screenshot({ path: path.join(shots, "trace-session-paused.png"), fullPage: true });
}

async function main() {
    let puppeteer;
    try {
        puppeteer = require(path.join(buildDir, "web-node", "node_modules", "puppeteer-core"));
    } catch (e) {
        skip(`puppeteer-core is not installed in ${buildDir}/web-node (run tools/setup.sh ${buildDir})`);
    }
    if (!fs.existsSync(chromium)) skip(`${chromium} is missing (apt-get install chromium)`);
    fs.mkdirSync(shots, { recursive: true });
    const SHOTS = ["trace-leaderboard.png", "trace-leaderboard-isolated.png", "trace-session-timeout.png",
        "trace-session-paused.png", "trace-narrow.png"];
    for (const f of SHOTS) fs.rmSync(path.join(shots, f), { force: true });

    const serve = spawn(sundial, ["serve", "--port", "0", "--web_port", "0", "--serve_http"],
        { stdio: ["ignore", "pipe", "pipe"] });
    children.push(serve);
    let serveErr = "";
    serve.stderr.on("data", (d) => { serveErr += d; });
    const [first, second] = await firstLines(serve, 2);
    const endpoint = first.split(" ").pop();
    const base = second.split(" ").pop();
    const ids = {};
    for (const [name, prog] of [["leaderboard", "leaderboard"], ["session", "session_timeout"]]) {
        const r = spawnSync(path.join(binDir, prog), [`--endpoint=${endpoint}`], { encoding: "utf8", timeout: 60000 });
        check(r.status === 0, `${prog} ran on ${endpoint} (exit ${r.status}) ${r.stdout.trim().split("\n").pop()}`);
        ids[name] = (await getJSON(`${base}api/jobs`)).jobs[0].id;
    }

    const browser = await puppeteer.launch({
        executablePath: chromium,
        headless: true,
        args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
    });
    try {
        const page = await browser.newPage();
        await page.setViewport({ width: 1440, height: 1000 });
        const pageErrors = [];
        page.on("console", (m) => { if (m.type() === "error") pageErrors.push(m.text()); });
        page.on("pageerror", (e) => pageErrors.push(String(e)));

        /* the leaderboard: three hours of game time in a few tens of ms */
        const lb = await checkJob(page, base, ids.leaderboard, "leaderboard", {
            minSteps: 12, paneTimings: ["early", "on_time", "late"], yLabels: ["01:00", "02:00"], finiteY: true,
            xClock: /^\+\d+ (h|min)/,
        });
        await page.screenshot({ path: path.join(shots, "trace-leaderboard.png"), fullPage: true });
        const gbk = lb.view.stages.find((s) => s.transforms.length === 1 && s.transforms[0] === "ByTeam");
        if (check(gbk !== undefined, "leaderboard: its ByTeam GroupByKey stage")) {
            await page.click(`#timeline-legend button[data-stage="${gbk.id}"]`);
            const iso = await timelineFacts(page);
            check(iso.lines.length === 1 && iso.lines[0].stage === gbk.id,
                `isolating ${gbk.id} leaves its line alone (${iso.lines.map((l) => l.stage).join(",")})`);
            check(iso.marks.length > 0 && iso.marks.every((m) => m.kind === "pane" || m.kind === "timer_fire" || m.kind === "late"),
                `the isolated stage keeps its own marks (${iso.marks.map((m) => m.kind).join(",")})`);
            await page.screenshot({ path: path.join(shots, "trace-leaderboard-isolated.png"),
                clip: { x: 0, y: 0, width: 1440, height: 900 } });
            await page.click(`#timeline-legend button[data-stage="${gbk.id}"]`);
            const all = await timelineFacts(page);
            check(all.lines.length === lb.view.stages.length, "clicking it again shows every stage");
        }

        /* session_timeout: a simulated day of processing-time timers */
        /* its event time stays at −∞ until the end: two steps (to +∞), five timer firings */
        await checkJob(page, base, ids.session, "session_timeout", {
            minSteps: 2, finiteY: false, timerFires: 5, xClock: /^\+\d+ h/,
        });
        await page.screenshot({ path: path.join(shots, "trace-session-timeout.png"), fullPage: true });

        await checkPaused(page, base, endpoint, binDir);

        /* names in a narrow window */
        await page.setViewport({ width: 700, height: 1000 });
        await page.goto(`${base}job/${ids.leaderboard}`, { waitUntil: "load" });
        await page.waitForSelector("#stages-body .names li", { timeout: 20000 });
        const bad = await brokenSegments(page);
        check(bad.length === 0, `names break only between segments at 700 px (broken: ${bad.join(", ")})`);
        await page.screenshot({ path: path.join(shots, "trace-narrow.png"), fullPage: true });
        check(pageErrors.length === 0, `no errors in the page (${pageErrors.join(" | ")})`);
    } finally {
        await browser.close();
    }
    for (const f of SHOTS) check(fs.existsSync(path.join(shots, f)), `saved ${path.join(shots, f)}`);
    if (failures.length) process.stderr.write("----- sundial stderr -----\n" + serveErr.slice(-4000));
}

main().then(() => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
    if (failures.length) { console.log(`trace_browser_check: ${failures.length} failure(s)`); process.exit(1); }
    console.log("trace_browser_check: PASS");
    process.exit(0);
}, (e) => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    console.log("FAIL: " + (e && e.stack || e));
    process.exit(1);
});
