/*
 * force_sundial.js - a mocha --require hook that sends every pipeline of the Beam TypeScript
 * SDK's own test suites to one Sundial job endpoint.
 *
 * The SDK's tests pick their runner in three ways: createRunner() (the "default" runner,
 * which quietly prefers the in-process direct runner), directRunner(), and loopbackRunner()
 * (which, through BEAM_SERVICE_OVERRIDES, reaches a job service). Only the last one would
 * reach Sundial unaided, so most pipelines would never leave the test process. This hook
 * replaces all three factories (and universalRunner) on the SDK's module objects before any
 * test file loads. The test files copy those exports into local variables when they load,
 * so the replacement must happen first; mocha's --require guarantees that.
 *
 * Every replacement returns a PortableRunner with environmentType LOOPBACK and the job
 * endpoint taken from $SUNDIAL_ENDPOINT (host:port). The options a test passes (for example
 * directTestSplits for the liquid-sharding test) are kept and reach the runner as pipeline
 * options; only the environment type and the endpoint are forced.
 *
 * Guards, so that nothing passes by running elsewhere:
 *   - the direct runner's runPipeline throws if anything still reaches it;
 *   - Python venv bootstrapping, subprocess services and Java jar downloads throw at once
 *     (the Python-dependent tests are also excluded by the driver's --grep; this makes sure
 *     no excluded or unexpected test can start a pip install that mocha cannot interrupt).
 *
 * Accounting: the hook counts pipelines attempted (handed to the runner), submitted (Run
 * returned a job id) and finished (by terminal state). At process exit it prints
 *     sundial-attempted: A
 *     sundial-submitted: N
 *     sundial-finished: DONE=x FAILED=y ...
 *     sundial-blocked: direct=d subprocess=s
 * to stdout, and writes the same numbers as JSON to $SUNDIAL_COUNTS_FILE when that is set.
 *
 * Noise: in LOOPBACK the SDK worker runs inside this process and console.log()s every
 * instruction it receives. When $SUNDIAL_WORKER_LOG names a file, console.log/info/debug are
 * appended there instead (console.warn/error stay on stderr). mocha's reporter keeps its
 * own reference to the original console.log, so the test report is unaffected.
 */
"use strict";

const fs = require("fs");
const util = require("util");
const { loadBeam } = require("./sdk");

const ENDPOINT_RE = /^[A-Za-z0-9.-]+:[0-9]{1,5}$/;

const endpoint = process.env.SUNDIAL_ENDPOINT || "";
if (!ENDPOINT_RE.test(endpoint)) {
    throw new Error(
        `force_sundial.js: SUNDIAL_ENDPOINT must be host:port of a Sundial job server, ` +
            `got "${endpoint}"`
    );
}

const counts = {
    endpoint,
    attempted: 0,
    submitted: 0,
    finished: {},
    blocked: { direct: 0, subprocess: 0 },
};

/* ---- quiet the in-process worker (optional) ---- */

if (process.env.SUNDIAL_WORKER_LOG) {
    const fd = fs.openSync(process.env.SUNDIAL_WORKER_LOG, "a");
    const toLog = (...args) => {
        fs.writeSync(fd, util.format(...args) + "\n");
    };
    console.log = toLog;
    console.info = toLog;
    console.debug = toLog;
}

/* ---- load the SDK (index first, see sdk.js) ---- */

const { req } = loadBeam();
const runnerMod = req("apache-beam/runners/runner");
const directMod = req("apache-beam/runners/direct_runner");
const universalMod = req("apache-beam/runners/universal");
const { PortableRunner } = req("apache-beam/runners/portable_runner/runner");
const serviceMod = req("apache-beam/utils/service");
const { JobState_Enum } = req("apache-beam/proto/beam_job_api");

const TERMINAL = new Set(["DONE", "FAILED", "CANCELLED", "UPDATED", "DRAINED"]);

/* A PortableRunner that always targets Sundial in LOOPBACK mode and keeps the counts. */
class SundialRunner extends PortableRunner {
    constructor(options) {
        super({ ...(options || {}), environmentType: "LOOPBACK", jobEndpoint: endpoint });
    }

    async runPipelineWithProto(pipeline, options) {
        counts.attempted += 1;
        const forced = { ...(options || {}), environmentType: "LOOPBACK" };
        const result = await super.runPipelineWithProto(pipeline, forced);
        counts.submitted += 1;
        const getState = result.getState.bind(result);
        let recorded = false;
        result.getState = async () => {
            const state = await getState();
            const name = JobState_Enum[state.state];
            if (!recorded && TERMINAL.has(name)) {
                recorded = true;
                counts.finished[name] = (counts.finished[name] || 0) + 1;
            }
            return state;
        };
        return result;
    }
}

function sundialRunner(options = {}) {
    return new SundialRunner(options);
}

/* ---- replace the runner factories ---- */

const originalCreateRunner = runnerMod.createRunner;
const originalDirectRunner = directMod.directRunner;

runnerMod.createRunner = function createRunner(options = {}) {
    if (options.runner === "dataflow" || options.runner === "flink") {
        return originalCreateRunner(options);
    }
    return sundialRunner(options);
};
runnerMod.loopbackRunner = sundialRunner;
directMod.directRunner = sundialRunner;
universalMod.universalRunner = sundialRunner;

/* ---- guards ---- */

/* The DirectRunner class is not exported; reach its prototype through an instance. */
const directProto = Object.getPrototypeOf(originalDirectRunner({}));
directProto.runPipeline = async function runPipeline() {
    counts.blocked.direct += 1;
    throw new Error("force_sundial.js: a pipeline reached the SDK's direct runner");
};

function refuse(what) {
    return function refused() {
        counts.blocked.subprocess += 1;
        throw new Error(
            `force_sundial.js: ${what} is disabled in Sundial's TypeScript conformance run`
        );
    };
}
serviceMod.PythonService.beamPython = refuse("bootstrapping a Python venv");
serviceMod.PythonService.whichPython = refuse("looking for Python");
serviceMod.SubprocessService.prototype.start = refuse("starting a subprocess service");
serviceMod.JavaJarService.cachedJar = refuse("downloading a Java jar");
serviceMod.JavaJarService.gradleToJar = refuse("resolving a Java jar");
serviceMod.JavaJarService.mavenJarUrl = refuse("resolving a Maven jar");

/* ---- report at exit ---- */

process.on("exit", () => {
    const finished = Object.entries(counts.finished)
        .map(([k, v]) => `${k}=${v}`)
        .join(" ");
    const text =
        `sundial-attempted: ${counts.attempted}\n` +
        `sundial-submitted: ${counts.submitted}\n` +
        `sundial-finished: ${finished || "none"}\n` +
        `sundial-blocked: direct=${counts.blocked.direct} ` +
        `subprocess=${counts.blocked.subprocess}\n`;
    try {
        fs.writeSync(1, text);
    } catch (e) {
        /* stdout may already be closed; the counts file below still carries the numbers */
    }
    if (process.env.SUNDIAL_COUNTS_FILE) {
        fs.writeFileSync(process.env.SUNDIAL_COUNTS_FILE, JSON.stringify(counts) + "\n");
    }
});

module.exports = { counts, SundialRunner };
