/*
 * ts_slow.js - one Beam TypeScript job in LOOPBACK mode whose bundle never ends by itself, for
 * faults.sh (kill_loopback): the worker lives in this node process, so killing the process
 * kills the worker in the middle of its bundle.
 *
 * Usage: SUNDIAL_ENDPOINT=host:port SUNDIAL_TS_DIR=<build>/ts node ts_slow.js MARK_FILE
 *
 * The pipeline is Create([1, 2, 3]) -> Map(slow). slow writes this process's pid to MARK_FILE
 * (beside it, then renamed), then blocks the thread for 30 s per element (Atomics.wait: no CPU
 * used). The test kills the process long before that; if it does not, the script prints the
 * final state and exits 0 only for DONE, which the test counts as a failure.
 */
"use strict";

const fs = require("fs");
const path = require("path");
const { loadBeam } = require(path.join(__dirname, "../ts/sdk"));

const { req, beam } = loadBeam();
const { PortableRunner } = req("apache-beam/runners/portable_runner/runner");
const { JobState_Enum } = req("apache-beam/proto/beam_job_api");

const markFile = path.resolve(process.argv[2] || "");

/*
 * The DoFn is serialized (serialize-closures) and cannot carry the fs module, so the work it
 * needs is left on globalThis: with LOOPBACK the worker runs in this very process. Globals
 * (globalThis, Atomics) resolve where the worker runs, so slow declares no __closure.
 */
globalThis.sundialFaultMark = function () {
    const tmp = `${markFile}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, `${process.pid}\n`);
    fs.renameSync(tmp, markFile);
};

function slow(x) {
    globalThis.sundialFaultMark();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 30000);
    return x;
}

async function main() {
    if (!process.argv[2]) {
        console.error("usage: node ts_slow.js MARK_FILE");
        return 2;
    }
    const runner = new PortableRunner({
        environmentType: "LOOPBACK",
        jobEndpoint: process.env.SUNDIAL_ENDPOINT || "",
    });
    const result = await runner.runAsync((root) => {
        root.apply(beam.create([1, 2, 3])).map(slow);
    });
    const state = await result.waitUntilFinish(120000);
    console.log(`FINAL STATE ${JobState_Enum[state]}`);
    return JobState_Enum[state] === "DONE" ? 0 : 1;
}

main().then(
    (code) => process.exit(code),
    (err) => {
        console.error("PIPELINE ERROR:", err && err.stack ? err.stack : err);
        process.exit(2);
    }
);
