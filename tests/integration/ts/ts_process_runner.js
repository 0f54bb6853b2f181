/*
 * ts_process_runner.js - run Beam TypeScript pipelines with a beam:env:process:v1 environment.
 *
 * The SDK's PortableRunner knows two fates for the pipeline's default environment (urn
 * "js_default"): LOOPBACK turns it into beam:env:external:v1 pointing at a worker pool inside
 * the client, anything else into a docker environment (after `npm pack` calls that do not work
 * in 2.49.0). It has no PROCESS mode. The subclass below adds one: before handing the pipeline
 * to PortableRunner, it replaces every js_default environment with
 *
 *   urn      beam:env:process:v1
 *   payload  ProcessPayload{command: <ts_process_boot.sh>, env: {SUNDIAL_TS_DIR: <sdk dir>}}
 *
 * keeping the environment's capabilities, dependencies, display data and resource hints. As
 * no js_default environment is left and environmentType is "PROCESS" (not LOOPBACK), the SDK
 * neither starts a worker pool nor takes its docker branch. The runner then starts the
 * command with the standard boot flags; ts_process_boot.js does the rest.
 *
 * The worker runs in its own process, so whatever a DoFn prints goes to that process's stdout
 * (inherited from the runner) and, through the Fn Logging service, to the job's messages; it
 * does not reach this client.
 *
 * Usage:
 *   const { processRunner } = require("./ts_process_runner");
 *   const runner = processRunner(req, { jobEndpoint: "127.0.0.1:8099", tsDir });
 * where req is the SDK-rooted require from sdk.js loadBeam() and tsDir the directory whose
 * node_modules holds the SDK (the worker needs it too).
 */
"use strict";

const path = require("path");

const PROCESS_URN = "beam:env:process:v1";
const BOOT_COMMAND = path.join(__dirname, "ts_process_boot.sh");

/*
 * Returns a PortableRunner (subclass) for opts.jobEndpoint whose jobs use a process
 * environment running opts.bootCommand (default: ts_process_boot.sh beside this file).
 * Other options are passed on to PortableRunner as its default pipeline options.
 */
function processRunner(req, opts) {
    const { PortableRunner } = req("apache-beam/runners/portable_runner/runner");
    const runnerApi = req("apache-beam/proto/beam_runner_api");
    const environments = req("apache-beam/internal/environments");
    const { bootCommand, tsDir, ...runnerOptions } = opts;
    const command = bootCommand || BOOT_COMMAND;
    const env = tsDir ? { SUNDIAL_TS_DIR: path.resolve(tsDir) } : {};

    class ProcessEnvironmentRunner extends PortableRunner {
        async runPipelineWithProto(pipeline, options) {
            const rewritten = runnerApi.Pipeline.clone(pipeline);
            const envs = rewritten.components.environments;
            for (const [id, e] of Object.entries(envs)) {
                if (e.urn !== environments.TYPESCRIPT_DEFAULT_ENVIRONMENT_URN) continue;
                envs[id] = runnerApi.Environment.create({
                    ...e,
                    urn: PROCESS_URN,
                    payload: runnerApi.ProcessPayload.toBinary(
                        runnerApi.ProcessPayload.create({ command, env })),
                });
            }
            return super.runPipelineWithProto(rewritten,
                { ...(options || {}), environmentType: "PROCESS" });
        }
    }

    return new ProcessEnvironmentRunner({ ...runnerOptions, environmentType: "PROCESS" });
}

module.exports = { processRunner, PROCESS_URN, BOOT_COMMAND };
