/*
 * wordcount_bench.js - one timed run of a Beam TypeScript word count over generated text.
 *
 * Usage: node wordcount_bench.js {direct|sundial} [LINES] [SHARDS]
 *   direct   the SDK's in-process direct runner;
 *   sundial  a PortableRunner job (LOOPBACK) on $SUNDIAL_ENDPOINT (host:port).
 * LINES defaults to 100000, SHARDS to 200. Run it with the current directory (or
 * $SUNDIAL_TS_DIR) set to <build>/ts, where tools/setup.sh installed the SDK.
 *
 * The text is generated inside the pipeline, so the submitted pipeline stays small: Create
 * makes SHARDS shard descriptors, a FlatMap expands each into its lines with a seeded
 * xorshift generator over a fixed 2000-word vocabulary (skewed, so some words are frequent),
 * then the classic word count follows: FlatMap(split) -> countPerElement. A global combine
 * reduces the counts to {total, distinct, checksum}, which an in-pipeline assertion compares
 * with the same numbers computed here in plain JS, so a wrong answer fails the job.
 *
 * Shards keep each DoFn call's output small (about 500 lines); the 2.49.0 SDK worker can
 * duplicate output when one call pushes its sink buffer past 1 MB.
 *
 * Prints one line:
 *   BENCH runner=<r> lines=<n> words=<w> distinct=<d> state=<STATE> ok=<0|1> wall_ms=<ms>
 * where wall_ms runs from building the pipeline to the job's terminal state. Exit 0 when the
 * job ended DONE (the assertion held), 1 otherwise, 2 on an error such as a refused job.
 */
"use strict";

const path = require("path");
const { loadBeam } = require(path.join(__dirname, "..", "..", "tests", "integration", "ts",
                                       "sdk.js"));

const { req, beam } = loadBeam();
const combiners = req("apache-beam/transforms/combiners");
const testing = req("apache-beam/testing/assert");
const { directRunner } = req("apache-beam/runners/direct_runner");
const { PortableRunner } = req("apache-beam/runners/portable_runner/runner");
const { JobState_Enum } = req("apache-beam/proto/beam_job_api");

/* A fixed vocabulary of 2000 pronounceable words, the same on every run. */
function makeVocabulary() {
    const onsets = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"];
    const vowels = ["a", "e", "i", "o", "u"];
    const words = [];
    for (let i = 0; words.length < 2000; i++) {
        let w = "";
        let x = i + 7;
        const syllables = 1 + (i % 3);
        for (let s = 0; s < syllables; s++) {
            w += onsets[x % onsets.length] + vowels[(x >> 2) % vowels.length];
            x = Math.floor(x / 5) + s * 31 + 3;
        }
        words.push(w + i.toString(36));
    }
    return words;
}
const VOCAB = makeVocabulary();

/* The lines of one shard: {shard, lines} -> lines.length strings. Deterministic. */
function shardLines(spec) {
    let state = (Math.imul(spec.shard + 1, 2654435761) ^ 0x5bd1e995) >>> 0 || 1;
    const next = () => {
        state ^= state << 13;
        state >>>= 0;
        state ^= state >>> 17;
        state ^= state << 5;
        state >>>= 0;
        return state;
    };
    const out = [];
    for (let l = 0; l < spec.lines; l++) {
        const n = 4 + (next() % 9);
        const words = [];
        for (let k = 0; k < n; k++) {
            /* product of two uniforms: small indices are much more frequent */
            const idx = Math.floor(((next() % VOCAB.length) * (next() % VOCAB.length)) /
                                   VOCAB.length);
            words.push(k === 0 ? VOCAB[idx].toUpperCase() : VOCAB[idx]);
        }
        out.push(words.join(l % 3 === 0 ? ", " : " ") + ".");
    }
    return out;
}
shardLines.__closure = () => ({ VOCAB, Math });

function splitWords(line) {
    return line.toLowerCase().split(/[^a-z0-9]+/).filter((w) => w.length > 0);
}

/*
 * Per distinct word: its count and a count-weighted hash, for the checksum. The hash is kept
 * small so the checksum stays below 2^32: the 2.49.0 SDK's VarIntCoder truncates to 32 bits,
 * and a runner that lifts combiners encodes the sum's accumulators with it (the direct runner
 * never encodes them).
 */
function digest(kv) {
    let h = 2166136261;
    for (let i = 0; i < kv.element.length; i++) {
        h = Math.imul(h ^ kv.element.charCodeAt(i), 16777619) >>> 0;
    }
    return { n: kv.count, h: (h % 1009) * kv.count };
}

function shardSpecs(lines, shards) {
    const specs = [];
    for (let s = 0; s < shards; s++) {
        const lo = Math.floor((lines * s) / shards);
        const hi = Math.floor((lines * (s + 1)) / shards);
        if (hi > lo) specs.push({ shard: s, lines: hi - lo });
    }
    return specs;
}

/* The expected summary, computed without Beam. */
function expectedSummary(specs) {
    const counts = new Map();
    for (const spec of specs) {
        for (const line of shardLines(spec)) {
            for (const w of splitWords(line)) counts.set(w, (counts.get(w) || 0) + 1);
        }
    }
    let total = 0;
    let checksum = 0;
    for (const [element, count] of counts) {
        const d = digest({ element, count });
        total += d.n;
        checksum += d.h;
    }
    return { total, distinct: counts.size, checksum };
}

async function main() {
    const which = process.argv[2];
    const lines = Number(process.argv[3] || 100000);
    const shards = Number(process.argv[4] || 200);
    if (!["direct", "sundial"].includes(which) || !(lines > 0) || !(shards > 0)) {
        console.error("usage: node wordcount_bench.js {direct|sundial} [LINES] [SHARDS]");
        return 64;
    }
    let runner;
    if (which === "direct") {
        runner = directRunner();
    } else {
        const endpoint = process.env.SUNDIAL_ENDPOINT || "";
        if (!/^[A-Za-z0-9.-]+:[0-9]{1,5}$/.test(endpoint)) {
            console.error(`SUNDIAL_ENDPOINT must be host:port, got "${endpoint}"`);
            return 64;
        }
        runner = new PortableRunner({ environmentType: "LOOPBACK", jobEndpoint: endpoint });
    }

    const specs = shardSpecs(lines, shards);
    const want = expectedSummary(specs);

    const t0 = process.hrtime.bigint();
    const result = await runner.runAsync((root) => {
        root.apply(beam.create(specs))
            .flatMap(shardLines)
            .flatMap(splitWords)
            .apply(beam.countPerElement())
            .map(digest)
            .apply(beam.groupGlobally()
                .combining("n", combiners.sum, "total")
                .combining("n", combiners.count, "distinct")
                .combining("h", combiners.sum, "checksum"))
            .apply(testing.assertDeepEqual([want]));
    });
    const state = JobState_Enum[await result.waitUntilFinish(
        Number(process.env.SUNDIAL_JOB_TIMEOUT_MS || 600000))];
    const wallMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const ok = state === "DONE" ? 1 : 0;
    process.stdout.write(`BENCH runner=${which} lines=${lines} words=${want.total} ` +
        `distinct=${want.distinct} state=${state} ok=${ok} wall_ms=${wallMs.toFixed(1)}\n`);
    return ok ? 0 : 1;
}

main().then(
    (code) => process.exit(code),
    (err) => {
        console.error("BENCH ERROR:", err && err.stack ? err.stack : err);
        process.exit(2);
    }
);
