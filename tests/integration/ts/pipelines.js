/*
 * pipelines.js - small Beam TypeScript pipelines, one per Sundial feature, for the
 * ts_pipeline_* integration tests.
 *
 * Usage: node pipelines.js NAME [--direct | --process]
 *   NAME      one of the keys of PIPELINES below (or "list" to print them).
 *   --direct  run on the SDK's in-process direct runner instead of Sundial (harness self-check;
 *             the expected outputs in expected/ must hold there too).
 *   --process run on Sundial with a beam:env:process:v1 environment (ts_process_runner.js): the
 *             runner starts the worker as a separate process, so the RESULT lines appear in
 *             that process's output (see ts_process_run.sh), not in this one's.
 * Without --direct, $SUNDIAL_ENDPOINT (host:port) names the job server; without --process too,
 * the pipeline runs as a PortableRunner job in LOOPBACK mode, so the SDK worker lives in this
 * process.
 *
 * Each pipeline prints its results as lines starting with "RESULT ". Output order is not
 * defined, so the driver sorts them before comparing with expected/NAME.txt. The script then
 * prints "FINAL STATE <state>" and exits 0 for DONE, 1 for any other final state (or a job
 * still running after $SUNDIAL_JOB_TIMEOUT_MS, default 60000, which it then cancels), and 2
 * when the pipeline threw (for example, the job server refused it).
 *
 * The pipelines are ordered as a ladder, from what needs the least of the runner:
 *   impulse      runner-side Impulse feeding one SDK ParDo; no grouping.
 *   wordcount    Create (which reshuffles through a GroupByKey), FlatMap, a lifted combine.
 *   windowed_gbk timestamps, fixed 60 s windows, the raw GroupByKey URN, window parameters.
 *   side_input   a singleton side input, served through the Fn State API.
 *   counters     user counter and distribution, read back through GetJobMetrics.
 *   large_element      a 3 MiB element across a Reshuffle (more than one data piece).
 *   large_bundle       a 256 MiB bundle output into a GroupByKey, 2 MiB grouped values.
 *   too_large_element  a 5 MiB element: over the SDK's 4 MiB gRPC receive limit, so Sundial
 *                      must fail the job at once, saying why (expected/NAME.fails).
 *   sum_large        a global sum above 2^32 (10^12): right by default (not lifted).
 *   sum_large_lifted the same with lifting forced: wrong on Sundial, as the SDK's 32-bit
 *                      accumulators wrap (expected/NAME.sundial.txt), right on the direct runner.
 *   keys_20k, keys_200k  a GroupByKey over 20,000 / 200,000 keys (two values each), summarized.
 *   count_million_lifted  1,000,000 elements counted, lifting forced (exact for counts).
 *   sum_million      a global sum of 0..999,999: the SDK cannot carry it on any portable
 *                      runner; Sundial fails it at once, saying why (expected/NAME.fails).
 *   sliding_reshuffle  sliding windows (size = period) assigned at the minimum timestamp,
 *                      one starting below it, across a Reshuffle: kept as the SDK made them.
 *   fanout_one_element  one element's outputs (2.4 MB) past the SDK sink's flush point.
 *   skewed_fanout    payloads of 0 to 160,000 characters, each emitted twice, through a
 *                      Flatten: bundles whose output passes the SDK sink's 1 MB flush point
 *                      (which resends) still give each payload exactly twice.
 *
 * The SDK ships every user function to its worker with serialize-closures, so a function
 * that uses a module-level name must declare it in fn.__closure (see eventTime below).
 */
"use strict";

const { loadBeam } = require("./sdk");

const { req, beam, dir: loadedDir } = loadBeam();
const Long = req("long");
const pardo = req("apache-beam/transforms/pardo");
const windowings = req("apache-beam/transforms/windowings");
const { reshuffle } = req("apache-beam/transforms/utils");
const combiners = req("apache-beam/transforms/combiners");
const { groupByKey } = req("apache-beam/transforms/internal");
const { directRunner } = req("apache-beam/runners/direct_runner");
const { PortableRunner } = req("apache-beam/runners/portable_runner/runner");
const { JobState_Enum } = req("apache-beam/proto/beam_job_api");

/* ---- DoFns (module level, no free variables unless declared in __closure) ---- */

function emit(x) {
    console.log("RESULT " + (typeof x === "string" ? x : JSON.stringify(x)));
    return x;
}

function splitWords(line) {
    return line
        .toLowerCase()
        .split(/[^a-z]+/)
        .filter((w) => w.length > 0);
}

function formatCount(kv) {
    return kv.element + " " + kv.count;
}

function eventTime(e) {
    return Long.fromValue(e.t * 1000);
}
eventTime.__closure = () => ({ Long });

function toKV(e) {
    return { key: e.w, value: e.t };
}

function formatWindowed(kv, context) {
    const w = context.window.lookup();
    const times = [...kv.value].sort((a, b) => a - b);
    return `[${w.start.toNumber() / 1000}s,${w.end.toNumber() / 1000}s) ${kv.key} ` +
        `n=${times.length} t=${times.join(",")}`;
}

function addSide(x, context) {
    return `${x}+${context.side.lookup()}=${x + context.side.lookup()}`;
}

function countAndSquare(x, context) {
    context.seen.increment(x);
    context.sizes.update(x);
    return "square " + x * x;
}

/* Large values: a string of n characters whose content depends on its seed. */
const MIB = 1024 * 1024;

function bigString(seed, n) {
    return "abcdefghijklmnopqrstuvwxyz0123456789".charAt(seed % 36).repeat(n);
}

function make3MiB(_bytes) {
    return bigString(7, 3 * MIB);
}
make3MiB.__closure = () => ({ bigString, MIB });

function check3MiB(s) {
    return s === bigString(7, 3 * MIB) ? `ok ${s.length}` : `BAD ${s.length}`;
}
check3MiB.__closure = () => ({ bigString, MIB });

function make5MiB(_bytes) {
    return bigString(3, 5 * MIB);
}
make5MiB.__closure = () => ({ bigString, MIB });

const SEEDS256 = Array.from({ length: 256 }, (_, i) => i);

function keyed128(i) {
    return { key: i % 128, value: i };
}

function inflate1MiB(kv) {
    return { key: kv.key, value: bigString(kv.value, MIB) };
}
inflate1MiB.__closure = () => ({ bigString, MIB });

function checkGroup1MiB(kv) {
    const vs = [...kv.value];
    const good = vs.every((s) => s.length === MIB && s === s.charAt(0).repeat(MIB));
    return good ? `${vs.length} values` : `key ${kv.key}: BAD`;
}
checkGroup1MiB.__closure = () => ({ MIB });

function describeLength(s) {
    return `got ${s.length}`;
}

/* 1,000 values of 10^9: their sum, 10^12, needs more than 32 bits. */
const BILLIONS = Array.from({ length: 1000 }, () => 1000000000);

function formatSum(r) {
    return `sum ${r.sum}`;
}

/* Many keys, many elements: 100 seeds, each fanned out to a block of keys (two values a key)
 * or of numbers. Each seed's fan-out stays far below the SDK sink's 1 MB flush threshold. */
const SEEDS100 = Array.from({ length: 100 }, (_, i) => i);

function keysOf(perSeed) {
    function fanOut(seed) {
        const out = [];
        for (let j = 0; j < perSeed; j++) {
            const key = `k${seed * perSeed + j}`;
            out.push({ key, value: 1 }, { key, value: 2 });
        }
        return out;
    }
    fanOut.__closure = () => ({ perSeed });
    return fanOut;
}

function groupIsGood(kv) {
    const vs = [...kv.value].sort();
    return vs.length === 2 && vs[0] === 1 && vs[1] === 2;
}

function goodOrBad(kv) {
    return groupIsGood(kv) ? "good" : "bad";
}
goodOrBad.__closure = () => ({ groupIsGood });

function markN(_x) {
    return "n";
}

function numbersOf(seed) {
    const out = [];
    for (let j = 0; j < 10000; j++) {
        out.push(seed * 10000 + j);
    }
    return out;
}

/* Summarized with countPerElement. Its accumulator is the SDK's generic object coder (32-bit
 * integers), so Sundial does not lift it: the two keys "good"/"bad" get one grouped element
 * each, 200,000 short strings, well under the SDK's 4 MiB message limit. */
function manyKeys(perSeed) {
    return {
        build(root) {
            root.apply(beam.create(SEEDS100))
                .flatMap(keysOf(perSeed))
                .apply(groupByKey())
                .map(goodOrBad)
                .apply(beam.countPerElement())
                .map(formatCount)
                .map(emit);
        },
    };
}

/* One element with a non-ASCII key, given event time 1,700,000,008,845 ms (issue 33). */
const SLIDING_ONE = [{ key: "cl\u00e9-\u043a\u043b\u044e\u0447-\u9375", value: 1 }];

function slidingEventTime(_kv) {
    return Long.fromValue(1700000008845);
}
slidingEventTime.__closure = () => ({ Long });

function formatKeyedWindow(kv, context) {
    const w = context.window.lookup();
    return `[${w.start.toString()},${w.end.toString()}) ${kv.key} ${kv.value}`;
}

/* 55 seeds whose payloads range from 0 to 160,000 characters, most of them small (issue 33):
 * the learned output size per element of a bundle of small ones lets the next bundle take
 * several large ones, whose output passes the SDK sink's 1 MB flush point. */
const SKEW_SEEDS = Array.from({ length: 55 }, (_, i) => i);

function skewSize(seed) {
    return seed < 40 ? seed * 13 : 160000 - (54 - seed) * 1000;
}

function skewSeeds(_bytes) {
    return SKEW_SEEDS;
}
skewSeeds.__closure = () => ({ SKEW_SEEDS });

function keyBySeed(seed) {
    return { key: seed, value: seed };
}

function seedOf(kv) {
    return kv.key;
}

/* Emits its seed's payload twice, for seeds of the given parity (two DoFns, then a Flatten). */
function twiceOf(parity) {
    function twice(seed) {
        if (seed % 2 !== parity) {
            return [];
        }
        const payload = bigString(seed, skewSize(seed));
        return [{ key: seed, value: payload }, { key: seed, value: payload }];
    }
    twice.__closure = () => ({ parity, bigString, skewSize });
    return twice;
}
twiceOf.__closure = () => ({ bigString, skewSize });

function checkSkewGroup(kv) {
    const want = bigString(kv.key, skewSize(kv.key));
    const vs = [...kv.value];
    const bad = vs.filter((v) => v !== want).length;
    return `seed ${kv.key}: ${vs.length} copies of ${want.length} chars` +
        (bad > 0 ? `, ${bad} BAD` : "");
}
checkSkewGroup.__closure = () => ({ bigString, skewSize });

/* One element's own fan-out past the sink's flush point: 12 values of 200,000 characters. */
function fanOut12(_bytes) {
    return Array.from({ length: 12 }, (_, i) => ({ key: i % 3, value: bigString(i, 200000) }));
}
fanOut12.__closure = () => ({ bigString });

function checkFanOutGroup(kv) {
    const vs = [...kv.value].map((v) => v.charAt(0) + v.length).sort();
    return `key ${kv.key}: ${vs.join(" ")}`;
}

/* ---- the pipelines ---- */

const PIPELINES = {
    impulse: {
        build(root) {
            root.apply(beam.impulse())
                .map((_bytes) => "impulse seen")
                .map(emit);
        },
    },

    wordcount: {
        build(root) {
            root.apply(beam.create([
                "The quick brown fox jumps over the lazy dog.",
                "The dog barks!",
                "A quick brown dog; the end",
            ]))
                .flatMap(splitWords)
                .apply(beam.countPerElement())
                .map(formatCount)
                .map(emit);
        },
    },

    windowed_gbk: {
        build(root) {
            root.apply(beam.create([
                { w: "apple", t: 5 },
                { w: "banana", t: 30 },
                { w: "apple", t: 59 },
                { w: "apple", t: 60 },
                { w: "banana", t: 90 },
                { w: "banana", t: 119 },
                { w: "cherry", t: 150 },
            ]))
                .apply(beam.assignTimestamps(eventTime))
                .apply(beam.windowInto(windowings.fixedWindows(60)))
                .map(toKV)
                .apply(groupByKey())
                .map(pardo.withContext(formatWindowed, { window: pardo.windowParam() }))
                .map(emit);
        },
    },

    side_input: {
        build(root) {
            const side = root.apply(beam.withName("createSide", beam.create([100])));
            root.apply(beam.withName("createMain", beam.create([1, 2, 3])))
                .map(addSide, { side: pardo.singletonSideInput(side) })
                .map(emit);
        },
    },

    /* 3 MiB in one element across a Reshuffle: over the 1 MiB data chunk, under the SDK's
     * 4 MiB gRPC receive limit. */
    large_element: {
        build(root) {
            root.apply(beam.impulse())
                .map(make3MiB)
                .apply(reshuffle())
                .map(check3MiB)
                .map(emit);
        },
    },

    /* One bundle of 256 small inputs emits 256 values of 1 MiB (256 MiB), grouped under 128
     * keys (2 MiB a key: the SDK refuses messages over 4 MiB). Each value comes from its own
     * input element (fanout_one_element has one element's fan-out past the SDK sink's 1 MB
     * flush point, which resends). */
    large_bundle: {
        build(root) {
            root.apply(beam.create(SEEDS256))
                .map(keyed128)
                .map(inflate1MiB)
                .apply(groupByKey())
                .map(checkGroup1MiB)
                .apply(beam.countPerElement())
                .map(formatCount)
                .map(emit);
        },
    },

    /* 5 MiB in one element: the TypeScript SDK's gRPC client refuses messages over 4 MiB, so
     * it cannot reach a worker. The job must FAIL quickly, saying so, never hang
     * (expected/too_large_element.state). */
    too_large_element: {
        build(root) {
            root.apply(beam.impulse())
                .map(make5MiB)
                .apply(reshuffle())
                .map(describeLength)
                .map(emit);
        },
    },

    /* A global sum of 1,000 x 10^9 = 10^12. By default Sundial does not lift this combine for
     * the TypeScript SDK (its coders keep 32 bits of an integer accumulator). */
    sum_large: {
        build(root) {
            root.apply(beam.create(BILLIONS))
                .apply(beam.groupGlobally().combining((x) => x, combiners.sum, "sum"))
                .map(formatSum)
                .map(emit);
        },
    },

    /* The same with lifting forced by the pipeline option: the SDK's 32-bit accumulators wrap
     * (expected/sum_large_lifted.sundial.txt; its direct runner never encodes them). */
    sum_large_lifted: {
        options: { sundialLiftCombiners: true },
        build(root) {
            root.apply(beam.create(BILLIONS))
                .apply(beam.groupGlobally().combining((x) => x, combiners.sum, "sum"))
                .map(formatSum)
                .map(emit);
        },
    },

    /* Sliding windows whose size equals their period, assigned before the event time (so at
     * the minimum timestamp), then a Reshuffle. The SDK's sliding window fn, at that negative
     * timestamp, gives two windows, one of them starting below the minimum timestamp: the
     * engine took such a window for its own encoding of a custom window and the job failed
     * with "engine: success" (issue 33). Both windows must come back as the SDK made them. */
    sliding_reshuffle: {
        build(root) {
            root.apply(beam.create(SLIDING_ONE))
                .apply(beam.windowInto(windowings.slidingWindows(10, 10)))
                .apply(beam.assignTimestamps(slidingEventTime))
                .apply(reshuffle())
                .map(pardo.withContext(formatKeyedWindow, { window: pardo.windowParam() }))
                .map(emit);
        },
    },

    /* Skewed output sizes (issue 33: 131 elements instead of 110). A GroupByKey hands the 55
     * seeds to a stage that emits each seed's payload (0 to 160,000 characters) twice, in
     * two DoFns joined by a Flatten; a second GroupByKey counts the copies: exactly 2 each. */
    skewed_fanout: {
        build(root) {
            const seeds = root.apply(beam.impulse())
                .flatMap(skewSeeds)
                .map(keyBySeed)
                .apply(beam.withName("bySeed", groupByKey()))
                .map(seedOf);
            const even = seeds.flatMap(beam.withName("twiceEven", twiceOf(0)));
            const odd = seeds.flatMap(beam.withName("twiceOdd", twiceOf(1)));
            beam.P([even, odd])
                .apply(beam.flatten())
                .apply(beam.withName("copies", groupByKey()))
                .map(checkSkewGroup)
                .map(emit);
        },
    },

    /* One element emits 2.4 MB: the SDK's sink resends its buffer for each output after the
     * first 1 MB; each value must still arrive once (4 a key). */
    fanout_one_element: {
        build(root) {
            root.apply(beam.impulse())
                .flatMap(fanOut12)
                .apply(groupByKey())
                .map(checkFanOutGroup)
                .map(emit);
        },
    },

    /* A GroupByKey over 20,000 and 200,000 keys of two values each (issue: the stage after
     * the GroupByKey used to run as hundreds of tiny bundles, over 2 minutes at 200,000). */
    keys_2k: manyKeys(20),
    keys_10k: manyKeys(100),
    keys_20k: manyKeys(200),
    keys_40k: manyKeys(400),
    keys_200k: manyKeys(2000),

    /* 1,000,000 elements counted with countPerElement, lifting forced by the pipeline option:
     * the SDK's accumulators (32-bit integers) are exact for counts, and the lifted combine
     * never groups a million values into one element (which this SDK could not receive). */
    count_million_lifted: {
        options: { sundialLiftCombiners: true },
        build(root) {
            root.apply(beam.create(SEEDS100))
                .flatMap(numbersOf)
                .map(markN)
                .apply(beam.countPerElement())
                .map(formatCount)
                .map(emit);
        },
    },

    /* A global sum of 0..999,999 = 499,999,500,000 (the direct runner's answer). The
     * TypeScript SDK 2.49 cannot run it right on any portable runner: its sum accumulator
     * (the generic object coder) keeps 32 bits of an integer, so lifted it wraps (Prism:
     * 1,783,293,664), and unlifted the one grouped element of a million numbers (14 MB) is over
     * its gRPC client's 4 MiB limit. Sundial does not lift it and fails the job at once,
     * saying why (expected/sum_million.fails); summing per key first (say i % 1000) and then
     * globally is exact. */
    sum_million: {
        build(root) {
            root.apply(beam.create(SEEDS100))
                .flatMap(numbersOf)
                .apply(beam.groupGlobally().combining((x) => x, combiners.sum, "sum"))
                .map(formatSum)
                .map(emit);
        },
    },

    counters: {
        build(root) {
            root.apply(beam.create([1, 2, 3, 4]))
                .map(beam.withName("countAndSquare", pardo.withContext(countAndSquare, {
                    seen: pardo.counter("seen"),
                    sizes: pardo.distribution("sizes"),
                })))
                .map(emit);
        },
        async after(result) {
            const counters = await result.counters();
            const dists = await result.distributions();
            console.log(`RESULT counter seen=${counters.seen}`);
            const d = dists.sizes || {};
            console.log(`RESULT distribution sizes count=${d.count} sum=${d.sum} ` +
                `min=${d.min} max=${d.max}`);
        },
    },
};

/* ---- driver ---- */

function usage(message) {
    console.error(`pipelines.js: ${message}`);
    console.error(`usage: node pipelines.js {${Object.keys(PIPELINES).join("|")}|list} ` +
        `[--direct|--process]`);
    process.exit(64);
}

async function main() {
    const args = process.argv.slice(2);
    const direct = args.includes("--direct");
    const processEnv = args.includes("--process");
    const names = args.filter((a) => a !== "--direct" && a !== "--process");
    if (direct && processEnv) usage("--direct and --process exclude each other");
    if (names.length !== 1) usage("expected exactly one pipeline name");
    if (names[0] === "list") {
        console.log(Object.keys(PIPELINES).join("\n"));
        return 0;
    }
    const spec = PIPELINES[names[0]];
    if (!spec) usage(`unknown pipeline "${names[0]}"`);

    let runner;
    if (direct) {
        runner = directRunner();
    } else {
        const endpoint = process.env.SUNDIAL_ENDPOINT || "";
        if (!/^[A-Za-z0-9.-]+:[0-9]{1,5}$/.test(endpoint)) {
            usage(`SUNDIAL_ENDPOINT must be host:port (got "${endpoint}"), or pass --direct`);
        }
        if (processEnv) {
            const { processRunner } = require("./ts_process_runner");
            runner = processRunner(req, { jobEndpoint: endpoint, tsDir: loadedDir });
        } else {
            runner = new PortableRunner({ environmentType: "LOOPBACK", jobEndpoint: endpoint,
                                          ...(spec.options || {}) });
        }
    }

    const timeoutMs = Number(process.env.SUNDIAL_JOB_TIMEOUT_MS || 60000);
    const result = await runner.runAsync((root) => spec.build(root));
    let state = await result.waitUntilFinish(timeoutMs);
    if (JobState_Enum[state] !== "DONE" && result.cancel) {
        const terminal = ["DONE", "FAILED", "CANCELLED", "UPDATED", "DRAINED"];
        if (!terminal.includes(JobState_Enum[state])) {
            console.error(`job not finished after ${timeoutMs} ms; cancelling`);
            await result.cancel().catch((e) => console.error(`cancel failed: ${e}`));
        }
    }
    console.log(`FINAL STATE ${JobState_Enum[state]}`);
    if (JobState_Enum[state] !== "DONE") return 1;
    if (spec.after) await spec.after(result);
    return 0;
}

main().then(
    (code) => process.exit(code),
    (err) => {
        console.error("PIPELINE ERROR:", err && err.stack ? err.stack : err);
        process.exit(2);
    }
);
