/*
 * make_fixtures.js - regenerate the planner's TypeScript SDK pipeline fixtures (*.pb here).
 *
 * Builds small pipelines with the Beam TypeScript SDK (apache-beam 2.49.0), rewrites the
 * SDK's placeholder environment into a LOOPBACK environment (beam:env:external:v1, as the
 * SDK's PortableRunner does) and writes each Pipeline proto in binary form. Nothing is
 * submitted anywhere: no job server, no worker.
 *
 * Usage: SUNDIAL_TS_DIR=<dir with node_modules/apache-beam> node make_fixtures.js
 * (default dir: /tmp/tsprobe). The output is deterministic except for the serialized
 * closures inside DoFn payloads, which the planner treats as opaque bytes.
 */
"use strict";

const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const dir = path.resolve(process.env.SUNDIAL_TS_DIR || "/tmp/tsprobe");
const req = createRequire(path.join(dir, "resolver.js"));
/* The index first: deep imports form a cycle that resolves only in this order. */
const beam = req("apache-beam");
const { Pipeline } = req("apache-beam/internal/pipeline");
const { Root } = req("apache-beam/pvalue");
const runnerApi = req("apache-beam/proto/beam_runner_api");
const environments = req("apache-beam/internal/environments");
const internal = req("apache-beam/transforms/internal");
const pardo = req("apache-beam/transforms/pardo");
const combiners = req("apache-beam/transforms/combiners");

async function build(name, fn) {
    const p = new Pipeline();
    await fn(new Root(p));
    const proto = runnerApi.Pipeline.clone(p.getProto());
    for (const [id, env] of Object.entries(proto.components.environments)) {
        if (env.urn === environments.TYPESCRIPT_DEFAULT_ENVIRONMENT_URN) {
            proto.components.environments[id] = environments.asExternalEnvironment(
                env,
                "localhost:50000"
            );
        }
    }
    const out = path.join(__dirname, name + ".pb");
    fs.writeFileSync(out, runnerApi.Pipeline.toBinary(proto));
    console.log(`${out}: ${Object.keys(proto.components.transforms).length} transforms`);
}

function splitWords(line) {
    return line.split(/[^a-z]+/).filter((w) => w.length > 0);
}

function toKV(e) {
    return { key: e.word, value: 1 };
}

async function main() {
    /* Word count: create -> flatMap -> countPerElement (lifted combine) -> map. */
    await build("ts_wordcount", (root) => {
        root
            .apply(beam.create(["the quick brown fox", "the lazy dog"]))
            .flatMap(splitWords)
            .apply(beam.countPerElement())
            .map((kv) => `${kv.element}: ${kv.count}`);
    });

    /* Fixed windows and a literal GroupByKey. */
    await build("ts_windowed_gbk", (root) => {
        root
            .apply(
                beam.create([
                    { word: "apple", t: 1 },
                    { word: "banana", t: 70 },
                ])
            )
            .apply(beam.assignTimestamps((e) => e.t * 1000))
            .apply(beam.windowInto(beam.fixedWindows(60)))
            .map(toKV)
            .apply(internal.groupByKey())
            .map((kv) => kv.key);
    });

    /* An iterable side input. */
    await build("ts_side_input", (root) => {
        const side = root.apply(beam.withName("createSide", beam.create([1, 2, 3])));
        root
            .apply(beam.withName("createMain", beam.create(["a", "b"])))
            .map(
                pardo.withContext((x, ctx) => x + [...ctx.side.lookup()].length, {
                    side: pardo.iterableSideInput(side),
                })
            );
    });

    /* Sessions: the combine is emitted without the combine_per_key URN (merging windows). */
    await build("ts_sessions_combine", (root) => {
        root
            .apply(beam.create([{ word: "a", t: 1 }, { word: "a", t: 2 }]))
            .apply(beam.assignTimestamps((e) => e.t * 1000))
            .apply(beam.windowInto(beam.sessions(10)))
            .map(toKV)
            .apply(beam.groupBy("key").combining("value", combiners.sum, "total"));
    });

    /* Flatten of two creates. */
    await build("ts_flatten", (root) => {
        const a = root.apply(beam.withName("createA", beam.create([1, 2])));
        const b = root.apply(beam.withName("createB", beam.create([3])));
        beam.P([a, b]).apply(beam.flatten()).map((x) => x * 2);
    });
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
