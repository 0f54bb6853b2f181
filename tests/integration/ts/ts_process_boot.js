/*
 * ts_process_boot.js - boot program for a Beam TypeScript SDK worker started by a runner as a
 * beam:env:process:v1 environment.
 *
 * The TypeScript SDK ships no boot program of its own for PROCESS environments (its container
 * uses a Go boot binary). A runner starts the environment's command with the standard boot
 * flags:
 *
 *   --id=WORKER_ID --provision_endpoint=H:P --control_endpoint=H:P --logging_endpoint=H:P
 *   --artifact_endpoint=H:P --semi_persist_dir=DIR
 *
 * This program then:
 *   1. asks the runner's ProvisionService.GetProvisionInfo for this worker (the request carries
 *      gRPC metadata "worker_id: WORKER_ID"), with a deadline;
 *   2. turns ProvisionInfo.pipeline_options (a google.protobuf.Struct) into JSON;
 *   3. starts `node <sdk>/dist/src/apache_beam/worker/worker_main.js --id=...
 *      --control_endpoint=... --logging_endpoint=... --options=<JSON>` with inherited stdio.
 *      worker_main.js needs --options: without it, it dies with a JSON SyntaxError (and exit
 *      status 0).
 * Endpoints given as flags win; the ones in ProvisionInfo fill in missing flags.
 *
 * Lifetime: this process exits when the worker exits, with the worker's status (128 + signal
 * number when the worker was killed). SIGTERM, SIGINT and SIGHUP are passed on to the worker,
 * and this process follows it; a signal that arrives before the worker is started ends this
 * process at once. The worker never stops by itself (it waits for days once started), so the
 * runner is expected to terminate it at job end.
 *
 * The SDK is found under $SUNDIAL_TS_DIR/node_modules (the client puts SUNDIAL_TS_DIR into the
 * ProcessPayload's environment), else under the current directory.
 *
 * Exit statuses of its own: 64 bad flags, 69 provisioning failed, 70 the worker could not be
 * started.
 */
"use strict";

const path = require("path");
const childProcess = require("child_process");
const os = require("os");
const { loadBeam } = require("./sdk");

const TAG = "ts_process_boot";
const PROVISION_DEADLINE_MS = 15000;

function fail(code, message) {
    console.error(`${TAG}: ${message}`);
    process.exit(code);
}

/*
 * Parses "--name=value" and "--name value" flags into an object. Unknown flags are kept (a
 * runner may add more than the standard set); positional arguments are an error.
 */
function parseFlags(argv) {
    const flags = {};
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        const m = /^--([A-Za-z0-9_]+)(?:=(.*))?$/s.exec(arg);
        if (!m) fail(64, `unexpected argument "${arg}" (expected --name=value flags)`);
        if (m[2] !== undefined) {
            flags[m[1]] = m[2];
        } else if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
            flags[m[1]] = argv[++i];
        } else {
            flags[m[1]] = "";
        }
    }
    return flags;
}

/* Resolves with the ProvisionInfo message; rejects with an Error naming the endpoint. */
function getProvisionInfo(req, endpoint, workerId) {
    const grpc = req("@grpc/grpc-js");
    const { ProvisionServiceClient } = req("apache-beam/proto/beam_provision_api.grpc-client");
    const client = new ProvisionServiceClient(endpoint, grpc.ChannelCredentials.createInsecure());
    const metadata = new grpc.Metadata();
    metadata.add("worker_id", workerId);
    const deadline = new Date(Date.now() + PROVISION_DEADLINE_MS);
    return new Promise((resolve, reject) => {
        client.getProvisionInfo({}, metadata, { deadline }, (err, response) => {
            client.close();
            if (err) {
                reject(new Error(`GetProvisionInfo at ${endpoint} failed: ${err.message}`));
            } else if (!response || !response.info) {
                reject(new Error(`GetProvisionInfo at ${endpoint} returned no info`));
            } else {
                resolve(response.info);
            }
        });
    });
}

let worker = null;
let pendingSignal = null;

function onSignal(signal) {
    if (worker) {
        pendingSignal = signal;
        worker.kill(signal);
    } else {
        /* Nothing started yet: nothing to clean up. */
        process.exit(128 + os.constants.signals[signal]);
    }
}

async function main() {
    for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(sig, () => onSignal(sig));

    const flags = parseFlags(process.argv.slice(2));
    if (!flags.id) fail(64, "missing --id=WORKER_ID");
    if (!flags.provision_endpoint) fail(64, "missing --provision_endpoint=HOST:PORT");

    let sdk;
    try {
        sdk = loadBeam();
    } catch (e) {
        fail(70, e.message);
    }

    let info;
    try {
        info = await getProvisionInfo(sdk.req, flags.provision_endpoint, flags.id);
    } catch (e) {
        fail(69, e.message);
    }

    const { Struct } = sdk.req("apache-beam/proto/google/protobuf/struct");
    const options = info.pipelineOptions ? Struct.toJson(info.pipelineOptions) : {};
    const control = flags.control_endpoint || (info.controlEndpoint && info.controlEndpoint.url);
    const logging = flags.logging_endpoint || (info.loggingEndpoint && info.loggingEndpoint.url);
    if (!control) fail(69, "no control endpoint: neither --control_endpoint nor ProvisionInfo");

    const workerMain = path.join(sdk.dir, "node_modules", "apache-beam", "dist", "src",
        "apache_beam", "worker", "worker_main.js");
    const args = [workerMain, `--id=${flags.id}`, `--control_endpoint=${control}`];
    if (logging) args.push(`--logging_endpoint=${logging}`);
    args.push(`--options=${JSON.stringify(options)}`);

    worker = childProcess.spawn(process.execPath, args, { stdio: "inherit" });
    worker.on("error", (e) => fail(70, `cannot start ${workerMain}: ${e.message}`));
    worker.on("exit", (code, signal) => {
        if (signal) {
            /* Killed on our request is a clean stop; anything else reports the signal. */
            process.exit(pendingSignal === signal ? 0 : 128 + os.constants.signals[signal]);
        }
        process.exit(code === null ? 1 : code);
    });
}

main().catch((e) => fail(70, e && e.stack ? e.stack : String(e)));
