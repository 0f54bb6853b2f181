/*
 * crossed_jobs.js - two Beam TypeScript jobs of the same shape, submitted at once from one
 * process, must each get their own results (issue: "Jobs get crossed").
 *
 * Usage: SUNDIAL_ENDPOINT=host:port node crossed_jobs.js [N]
 *
 * Runs N (default 2) pipelines concurrently against one job server in LOOPBACK mode. They
 * are identical in shape (so their stages and descriptor numbering are the same) and differ
 * only in their Create data and in the tag their DoFn writes. Each element is printed as
 * "RESULT <tag> <value>" by the worker that processed it. The script prints one line per job
 * ("JOB <tag> <state>") and exits 0 only when every job ended DONE and the RESULT lines are
 * exactly each job's own data under its own tag; otherwise it prints what was wrong and
 * exits 1 (2 when a pipeline threw).
 */
"use strict";

const { loadBeam } = require("./sdk");

const { req, beam } = loadBeam();
const { PortableRunner } = req("apache-beam/runners/portable_runner/runner");
const { JobState_Enum } = req("apache-beam/proto/beam_job_api");

const results = [];
const realLog = console.log;
console.log = function (...args) {
    const line = args.join(" ");
    if (line.startsWith("RESULT ")) results.push(line);
    realLog.apply(console, args);
};

function build(tag, values) {
    function tagIt(x) {
        console.log(`RESULT ${tag} ${x}`);
        return x;
    }
    tagIt.__closure = () => ({ tag, console });
    return (root) => {
        root.apply(beam.create(values)).map(tagIt);
    };
}

async function main() {
    const endpoint = process.env.SUNDIAL_ENDPOINT || "";
    const n = Number(process.argv[2] || 2);
    const timeoutMs = Number(process.env.SUNDIAL_JOB_TIMEOUT_MS || 60000);
    const jobs = [];
    const want = [];
    for (let j = 0; j < n; j++) {
        const tag = `job${j}`;
        const values = [1, 2, 3].map((v) => v + 10 * j);
        values.forEach((v) => want.push(`RESULT ${tag} ${v}`));
        const runner = new PortableRunner({ environmentType: "LOOPBACK", jobEndpoint: endpoint });
        jobs.push(runner.runAsync(build(tag, values)).then(async (result) => {
            const state = await result.waitUntilFinish(timeoutMs);
            return { tag, state: JobState_Enum[state] };
        }));
    }
    const states = await Promise.all(jobs);
    let ok = true;
    for (const s of states) {
        realLog(`JOB ${s.tag} ${s.state}`);
        if (s.state !== "DONE") ok = false;
    }
    const got = [...results].sort();
    want.sort();
    if (JSON.stringify(got) !== JSON.stringify(want)) {
        ok = false;
        realLog(`WRONG RESULTS\n  want: ${want.join(" | ")}\n  got:  ${got.join(" | ")}`);
    }
    return ok ? 0 : 1;
}

main().then(
    (code) => process.exit(code),
    (err) => {
        console.error("PIPELINE ERROR:", err && err.stack ? err.stack : err);
        process.exit(2);
    }
);
