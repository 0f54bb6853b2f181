/*
 * axes_check.js APP_JS - the web UI's time axes (app.js, section "time axes") at every scale,
 * without a browser: the section's functions are loaded on their own and asked for ticks.
 *   event time (absolute, UTC): 40 ms -> milliseconds; 3 h -> hours and minutes; 3 days ->
 *   the date where it changes; 400 days -> months; 30 years -> years; 300 years -> centuries
 *   of years; within a day the labels of one axis are all different (never "00:00:00" five
 *   times, the old axis of every short job);
 *   processing time (relative): "+0", "+10 ms", "+30 min", "+1 h 30 min", "+2 d".
 * Exit 0 pass, 1 fail.
 */
"use strict";
const fs = require("fs");

const src = fs.readFileSync(process.argv[2], "utf8");
const a = src.indexOf("const SEC = 1000");
const b = src.indexOf("/* A name with a line-break");
if (a < 0 || b < a) {
    console.log("FAIL: app.js has no time-axes section");
    process.exit(1);
}
/* eslint-disable-next-line no-new-func */
const axes = new Function(src.slice(a, b) + "\nreturn { timeTicks, timeLabels, relTicks, fmtRel };")();
const failures = [];
function check(cond, what) {
    console.log((cond ? "ok:   " : "FAIL: ") + what);
    if (!cond) failures.push(what);
}
function labels(from, to) {
    const { ticks, unit } = axes.timeTicks(from, to, 6);
    return axes.timeLabels(ticks, unit);
}
const H = 3600000, D = 24 * H, Y = 365.25 * D;
const day0 = Date.UTC(2026, 11, 7);
const cases = [
    ["40 ms", 0, 40, ["00:00:00.000", "00:00:00.010", "00:00:00.040"]],
    ["3 h", 0, 3 * H, ["00:00", "01:00", "03:00"]],
    ["3 days", day0 + 14 * H, day0 + 3 * D + 14 * H, ["2026-12-08 00:00", "2026-12-09 00:00", "12:00"]],
    ["400 days", day0, day0 + 400 * D, ["2027-01", "2027-07"]],
    ["30 years", 0, 30 * Y, ["1970", "1980", "1990"]],
    ["300 years", Date.UTC(1800, 0, 1), Date.UTC(2100, 0, 1), ["1900", "2000", "2100"]],
];
for (const [name, from, to, want] of cases) {
    const got = labels(from, to);
    check(got.length >= 2 && got.length <= 8, `${name}: ${got.length} ticks (${got.join(" | ")})`);
    /* times of day repeat over days: there each day's first tick carries its date */
    if (to - from < D) check(new Set(got).size === got.length, `${name}: every label different`);
    for (const w of want) check(got.includes(w), `${name}: shows ${w}`);
}
const rel = (from, to) => axes.relTicks(from, to, 7).map(axes.fmtRel);
check(rel(0, 40).join(" ") === "+0 +10 ms +20 ms +30 ms +40 ms", `40 ms relative: ${rel(0, 40).join(" ")}`);
check(rel(0, 3 * H).includes("+1 h 30 min"), `3 h relative: ${rel(0, 3 * H).join(" ")}`);
check(rel(0, 10 * D).includes("+2 d"), `10 days relative: ${rel(0, 10 * D).join(" ")}`);
if (failures.length) {
    console.log(`axes_check: ${failures.length} failure(s)`);
    process.exit(1);
}
console.log("axes_check: PASS");
