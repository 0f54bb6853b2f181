/*
 * browser_check.js SUNDIAL BUILD_DIR JOB_SCRIPT PYTHON - the web UI in a real headless
 * Chromium (Debian's chromium, driven by puppeteer-core from BUILD_DIR/web-node).
 *
 * Starts `SUNDIAL serve --port 0 --web_port 0 --serve_http`, runs JOB_SCRIPT (web_job.py, a
 * slow streaming job of Beam's Python SDK) against it, then in the browser:
 *   1. loads the jobs list, waits for the job's row (RUNNING), saves jobs.png;
 *   2. follows the job's link, waits for its stages, element counts and a timeline with a
 *      line per stage and TestStream marks, checks the transform names are shown (the label
 *      with markup in it as text, and that it ran no script), saves job-running.png;
 *   3. clicks Cancel, waits until the page shows CANCELLED, saves job-cancelled.png;
 *   4. opens a second job of the same script (started with the first), clicks Pause (the
 *      time control section says it rests), Step (it rests again, "step done"), saves
 *      job-paused.png, then clicks Drain (which opens the gate), waits until the page shows
 *      DRAINED with the drain in its messages, saves job-drained.png.
 * Screenshots go to BUILD_DIR/web-screenshots/. The page must log no errors (a CSP
 * violation would be one). Exit 0 pass, 1 fail, 77 when chromium, puppeteer-core or Beam's
 * Python SDK is missing (skipped, never passed).
 */
"use strict";

const { spawn, spawnSync } = require("child_process");
const fs = require("fs");
const path = require("path");
const readline = require("readline");

const [sundial, buildDir, jobScript, python] = process.argv.slice(2);
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

function lines(child) {
    const rl = readline.createInterface({ input: child.stdout });
    const queue = [];
    const waiters = [];
    rl.on("line", (l) => (waiters.length ? waiters.shift()(l) : queue.push(l)));
    rl.on("close", () => { while (waiters.length) waiters.shift()(null); });
    return () => new Promise((res) => (queue.length ? res(queue.shift()) : waiters.push(res)));
}

function withTimeout(p, ms, what) {
    return Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error("timed out: " + what)), ms))]);
}

async function main() {
    let puppeteer;
    try {
        puppeteer = require(path.join(buildDir, "web-node", "node_modules", "puppeteer-core"));
    } catch (e) {
        skip(`puppeteer-core is not installed in ${buildDir}/web-node (run tools/setup.sh ${buildDir})`);
    }
    if (!fs.existsSync(chromium)) skip(`${chromium} is missing (apt-get install chromium)`);
    if (!fs.existsSync(python) ||
        spawnSync(python, ["-c", "import apache_beam"], { stdio: "ignore" }).status !== 0) {
        skip(`Beam's Python SDK is not installed (${python})`);
    }
    fs.mkdirSync(shots, { recursive: true });
    const SHOTS = ["jobs.png", "job-running.png", "job-cancelled.png", "job-paused.png",
        "job-drained.png"];
    for (const f of SHOTS) {
        fs.rmSync(path.join(shots, f), { force: true });
    }

    const serve = spawn(sundial, ["serve", "--port", "0", "--web_port", "0", "--serve_http"],
        { stdio: ["ignore", "pipe", "pipe"] });
    children.push(serve);
    let serveErr = "";
    serve.stderr.on("data", (d) => { serveErr += d; });
    const serveLine = lines(serve);
    const first = await withTimeout(serveLine(), 20000, "sundial's first line");
    const second = await withTimeout(serveLine(), 20000, "sundial's second line");
    check(/^listening on 127\.0\.0\.1:\d+$/.test(first || ""), `first line ${first}`);
    if (!check(/^web ui on http:\/\/127\.0\.0\.1:\d+\/$/.test(second || ""), `second line ${second}`)) return;
    const endpoint = first.split(" ").pop();
    const base = second.split(" ").pop();

    /* The job to drain starts now too, so it is running by the time step 4 needs it. */
    const drained = spawn(python, [jobScript, endpoint, "web-ui-drain", "DRAINED"],
        { stdio: ["ignore", "pipe", "ignore"] });
    children.push(drained);
    let drainedOut = "";
    drained.stdout.on("data", (d) => { drainedOut += d; });
    const drainedDone = new Promise((res) => drained.on("exit", (code) => res(code)));
    const job = spawn(python, [jobScript, endpoint], { stdio: ["ignore", "pipe", "pipe"] });
    children.push(job);
    let jobOut = "";
    job.stderr.on("data", () => {});
    const jobLine = lines(job);
    let jobId = null;
    for (;;) {
        const l = await withTimeout(jobLine(), 90000, "the job's id");
        if (l === null) break;
        jobOut += l + "\n";
        if (l.startsWith("JOB ")) { jobId = l.split(" ")[1]; break; }
    }
    if (!check(jobId !== null, `the job was submitted (${jobId})`)) return;
    const jobDone = new Promise((res) => job.on("exit", (code) => res(code)));
    (async () => { for (let l; (l = await jobLine()) !== null;) jobOut += l + "\n"; })();

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

        /* 1. the jobs list */
        await page.goto(base, { waitUntil: "load" });
        await page.waitForSelector(`tr[data-job="${jobId}"] .state[data-state="RUNNING"]`, { timeout: 30000 });
        const row = await page.$eval(`tr[data-job="${jobId}"]`, (tr) => tr.innerText);
        check(row.includes(jobId) && row.includes("RUNNING"), `the list shows ${jobId} RUNNING`);
        await page.screenshot({ path: path.join(shots, "jobs.png") });

        /* 2. the job page, live */
        await Promise.all([page.waitForNavigation({ waitUntil: "load" }),
            /* clicked inside the page: the list is redrawn every second, and a node found by
             * one round trip may be replaced before a second one clicks it */
            page.$eval(`tr[data-job="${jobId}"] a`, (a) => a.click())]);
        check(page.url() === `${base}job/${jobId}`, `the link leads to the job page (${page.url()})`);
        await page.waitForFunction(() => {
            const counts = [...document.querySelectorAll("#stages-body .io b")]
                .map((b) => parseInt(b.textContent.replace(/,/g, ""), 10)).filter((n) => n > 0);
            return counts.length >= 2 &&
                document.querySelectorAll("#timeline path[data-stage]").length >= 4 &&
                document.querySelectorAll("#timeline g[class^=mark-], #timeline g.tmark").length >= 4;
        }, { timeout: 60000, polling: 250 });
        await new Promise((r) => setTimeout(r, 3000)); /* let the timeline grow a little */
        const text = await page.$eval("#main", (m) => m.innerText);
        for (const name of ["Clicks", "SlowScore", "SumPerUser/Group", "Input watermark",
            "Output watermark", "synthetic", "TestStream watermark", "TestStream processing time"]) {
            check(text.includes(name), `the job page shows "${name}"`);
        }
        check(text.includes('Format <img src=x onerror="window.__xss=1">'),
            "the label with markup in it is shown as text");
        check(await page.evaluate(() => window.__xss === undefined &&
            document.querySelector("#main img") === null), "the label ran no script");
        await page.screenshot({ path: path.join(shots, "job-running.png"), fullPage: true });

        /* 3. Cancel */
        await page.waitForFunction(() => !document.querySelector("#cancel").disabled, { timeout: 10000 });
        await page.click("#cancel");
        await page.waitForSelector('#facts .state[data-state="CANCELLED"]', { timeout: 30000 });
        check(true, "after Cancel the page shows CANCELLED");
        await new Promise((r) => setTimeout(r, 1500));
        const after = await page.$eval("#main", (m) => m.innerText);
        check(after.includes("cancel requested"), "the messages show the cancel");
        check(await page.$eval("#cancel", (b) => b.disabled), "Cancel is disabled once the job ended");
        await page.screenshot({ path: path.join(shots, "job-cancelled.png"), fullPage: true });

        /* 4. Drain, on the second job */
        const m = /JOB (\S+)/.exec(drainedOut);
        if (check(m !== null, `the second job was submitted (${m && m[1]})`)) {
            const drainId = m[1];
            await page.goto(`${base}job/${drainId}`, { waitUntil: "load" });
            await page.waitForSelector('#facts .state[data-state="RUNNING"]', { timeout: 30000 });
            /* Time control: Pause stops it at rest, Step takes one step, the gate says so. */
            await page.waitForFunction(() => !document.querySelector("#pause").disabled, { timeout: 10000 });
            await page.click("#pause");
            await page.waitForFunction(() => /^paused \(paused\) at /.test(document.querySelector("#gate").textContent) &&
                !document.querySelector("#step").disabled, { timeout: 30000, polling: 100 });
            check(true, "after Pause the page shows the job paused at rest, Step enabled");
            const before = await page.$eval("#gate", (g) => g.textContent);
            await page.click("#step");
            await page.waitForFunction(() => /step done/.test(document.querySelector("#gate").textContent),
                { timeout: 30000, polling: 100 });
            check(true, `after Step the job rests again ("${before}" then "${await page.$eval("#gate", (g) => g.textContent)}")`);
            const tcText = await page.$eval("#time-control", (t) => t.innerText);
            check(tcText.includes("Pending timers") && tcText.includes("User state"),
                "the time control section shows the timers and user state panels");
            await page.screenshot({ path: path.join(shots, "job-paused.png"), fullPage: true });
            await page.waitForFunction(() => !document.querySelector("#drain").disabled, { timeout: 10000 });
            await page.click("#drain");
            await page.waitForSelector('#facts .state[data-state="DRAINED"]', { timeout: 30000 });
            check(true, "after Drain the page shows DRAINED");
            await new Promise((r) => setTimeout(r, 1500));
            const drainedText = await page.$eval("#main", (el) => el.innerText);
            check(drainedText.includes("drain requested") && drainedText.includes("Run to DRAINED"),
                "the messages show the drain and the end");
            check(await page.$eval("#drain", (b) => b.disabled) && await page.$eval("#cancel", (b) => b.disabled),
                "Drain and Cancel are disabled once the job ended");
            await page.screenshot({ path: path.join(shots, "job-drained.png"), fullPage: true });
        }
        check(pageErrors.length === 0, `no errors in the page (${pageErrors.join(" | ")})`);
    } finally {
        await browser.close();
    }
    const code = await withTimeout(jobDone, 60000, "the job script's end").catch(() => null);
    check(code === 0 && /FINAL .*CANCELLED/.test(jobOut), `the SDK saw CANCELLED (${jobOut.trim().split("\n").pop()})`);
    const drainedCode = await withTimeout(drainedDone, 60000, "the second job script's end").catch(() => null);
    check(drainedCode === 0 && /FINAL .*DRAINED/.test(drainedOut), `the SDK saw DRAINED (${drainedOut.trim().split("\n").pop()})`);
    for (const f of SHOTS) {
        check(fs.existsSync(path.join(shots, f)), `saved ${path.join(shots, f)}`);
    }
    if (failures.length) process.stderr.write("----- sundial stderr -----\n" + serveErr.slice(-4000));
}

main().then(() => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
    if (failures.length) { console.log(`browser_check: ${failures.length} failure(s)`); process.exit(1); }
    console.log("browser_check: PASS");
    process.exit(0);
}, (e) => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    console.log("FAIL: " + (e && e.stack || e));
    process.exit(1);
});
