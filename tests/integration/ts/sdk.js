/*
 * sdk.js - find the Beam TypeScript SDK that tools/setup.sh installed.
 *
 * The SDK is not installed next to these sources: tools/setup.sh runs `npm ci` in
 * <build>/ts, so the files here resolve "apache-beam" from that directory instead of their
 * own. The directory is $SUNDIAL_TS_DIR when set, else the current directory (the drivers
 * cd into <build>/ts before starting node).
 *
 * The SDK's index must be loaded before any deep import: several of its modules form an
 * import cycle (pvalue <-> transforms) that only resolves in that order.
 */
"use strict";

const path = require("path");
const { createRequire } = require("module");

/*
 * Returns { req, beam, dir }: a require() rooted at the SDK's install directory, the SDK's
 * index module, and the directory itself. Throws an Error that names the directory and the
 * fix when the SDK is not installed there.
 */
function loadBeam() {
    const dir = path.resolve(process.env.SUNDIAL_TS_DIR || process.cwd());
    const req = createRequire(path.join(dir, "sundial-resolver.js"));
    let beam;
    try {
        beam = req("apache-beam");
    } catch (e) {
        throw new Error(
            `apache-beam is not installed under ${dir}/node_modules ` +
                `(run tools/setup.sh <build-dir> first): ${e.message}`
        );
    }
    return { req, beam, dir };
}

module.exports = { loadBeam };
