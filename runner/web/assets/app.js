/*
 * Sundial web UI: the jobs list (/) and a job page (/job/ID), drawn from the JSON API and
 * refreshed every second. Every name and message comes from users' pipelines, so text goes
 * into the page only through textContent and attribute setters, never as markup.
 */
"use strict";

(function () {
    const POLL_MS = 1000;
    const TERMINAL = new Set(["DONE", "FAILED", "CANCELLED", "UPDATED", "DRAINED"]);
    const COLORS = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f",
        "#ad1457", "#4e342e", "#558b2f", "#283593", "#9e9d24", "#37474f"];
    const MARKS = {
        ts_watermark: { color: "#7b1fa2", label: "TestStream watermark" },
        ts_clock: { color: "#00897b", label: "TestStream processing time" },
        ts_end: { color: "#757575", label: "TestStream ended" },
        clock_jump: { color: "#ef6c00", label: "clock jump" },
    };
    const GLOBAL_MAX = 9223371950454775;
    const main = document.getElementById("main");
    const status = document.getElementById("status");

    /* ---- DOM helpers (text only, never HTML) ---- */

    function el(tag, attrs, ...children) {
        const e = document.createElement(tag);
        for (const [k, v] of Object.entries(attrs || {})) {
            if (k === "style") {
                /* Through the CSSOM: the page's CSP refuses style attributes. */
                Object.assign(e.style, v);
            } else if (v !== null && v !== undefined && v !== false) {
                e.setAttribute(k, String(v));
            }
        }
        for (const c of children) {
            if (c === null || c === undefined) continue;
            e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
        }
        return e;
    }

    function svg(tag, attrs, text) {
        const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
        for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
        if (text !== undefined) e.textContent = String(text);
        return e;
    }

    function replace(node, ...children) {
        node.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
    }

    /* ---- time values: numbers, or "-inf" / "+inf" / big decimals as strings ---- */

    function tnum(v) {
        if (v === "-inf") return -Infinity;
        if (v === "+inf") return Infinity;
        return typeof v === "string" ? Number(v) : v;
    }

    function pad(n, w) {
        return String(n).padStart(w || 2, "0");
    }

    function fmtEvent(v) {
        const t = tnum(v);
        if (t === -Infinity) return "−∞ (start of time)";
        if (t === Infinity) return "+∞ (end of time)";
        if (t >= GLOBAL_MAX - 1000) return "end of global window";
        const d = new Date(t);
        if (isNaN(d.getTime())) return String(v);
        return d.toISOString().replace("T", " ").replace("Z", " UTC");
    }

    function fmtWall(ms) {
        if (ms === null || ms === undefined) return "—";
        const d = new Date(ms);
        return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
            `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    }

    function fmtClock(ms) {
        const d = new Date(ms);
        return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.` +
            pad(d.getMilliseconds(), 3);
    }

    function fmtDuration(ms) {
        if (ms === null || ms === undefined || ms < 0) return "—";
        if (ms < 1000) return `${ms} ms`;
        const s = ms / 1000;
        if (s < 60) return `${s.toFixed(1)} s`;
        const m = Math.floor(s / 60);
        if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
        return `${Math.floor(m / 60)} h ${m % 60} min`;
    }

    function fmtBytes(n) {
        if (n === null || n === undefined) return "—";
        if (n < 1024) return `${n} B`;
        const units = ["KiB", "MiB", "GiB", "TiB"];
        let v = n / 1024, u = 0;
        while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
        return `${v.toFixed(v < 10 ? 1 : 0)} ${units[u]}`;
    }

    /* Where a PCollection's count comes from: measured by the runner on the data plane, or
     * only reported by the SDK (a PCollection fused inside a stage never reaches the runner). */
    const COUNT_SOURCE = {
        runner: "measured by the runner on the data plane",
        sdk: "reported by the SDK (fused inside a stage: the runner does not see it)",
        none: "not measured (fused inside a stage) and not reported by the SDK",
    };

    function stateBadge(state) {
        return el("span", { class: "state " + state, "data-state": state }, state);
    }

    async function getJSON(url) {
        const r = await fetch(url, { cache: "no-store" });
        const body = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
        if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
        return body;
    }

    async function postAction(url) {
        const r = await fetch(url, { method: "POST", headers: { "X-Sundial-Action": "1" } });
        const body = await r.json().catch(() => ({}));
        if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
        return body;
    }

    function setStatus(text, bad) {
        status.textContent = text;
        status.style.color = bad ? "#ff8a80" : "";
    }

    /* ================================================================ time control */

    /*
     * A test-mode job's gate (/api/jobs/ID/pause, step, resume, timers, state): Pause, Step
     * and Resume buttons, the gate and the job clock, the pending timers and a stage's user
     * state. Its own section of the job page; refresh(done) is called on every poll.
     */
    function timeControl(id) {
        const base = `/api/jobs/${encodeURIComponent(id)}`;
        const gate = el("span", { class: "note", id: "gate" });
        const pauseBtn = el("button", { id: "pause", title: "Stop at the next quiescence: no clock jump, no TestStream event" }, "Pause");
        const stepBtn = el("button", { id: "step", title: "Take the next time step (a TestStream event or a clock jump to the next timer)" }, "Step");
        const dur = el("input", { id: "step-for", size: "6", value: "1m", title: "A processing-time duration: 90s, 59m, 1h30m" });
        const stepForBtn = el("button", { id: "step-for-btn" }, "Step by");
        const resumeBtn = el("button", { id: "resume" }, "Resume");
        const timersBody = el("tbody", { id: "timers-body" });
        const stageSel = el("select", { id: "state-stage" });
        const stateBody = el("tbody", { id: "state-body" });
        const node = el("section", { id: "time-control" },
            el("h2", {}, "Time control"),
            el("div", { class: "actions" }, pauseBtn, stepBtn, dur, stepForBtn, resumeBtn, gate),
            el("details", { id: "timers" }, el("summary", {}, "Pending timers"),
                el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Stage"),
                    el("th", {}, "Family"), el("th", {}, "Domain"), el("th", {}, "Key"),
                    el("th", {}, "Fires"), el("th", {}, "Hold"))), timersBody)),
            el("details", { id: "user-state" }, el("summary", {}, "User state ", stageSel),
                el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Key"),
                    el("th", {}, "State"), el("th", {}, "Value (hex)"))), stateBody)));
        let stagesKnown = false;

        async function post(action, query) {
            try {
                await postAction(`${base}/${action}${query ? "?" + query : ""}`);
                gate.textContent = `${action}…`;
            } catch (e) {
                gate.textContent = `${action}: ${e.message}`;
            }
        }
        pauseBtn.addEventListener("click", () => post("pause"));
        stepBtn.addEventListener("click", () => post("step", "events=1"));
        stepForBtn.addEventListener("click", () => post("step", "for=" + encodeURIComponent(dur.value)));
        resumeBtn.addEventListener("click", () => post("resume"));
        stageSel.addEventListener("change", () => refreshState());

        async function refreshState() {
            if (!stageSel.value) return;
            try {
                const doc = await getJSON(`${base}/state?stage=${encodeURIComponent(stageSel.value)}`);
                replace(stateBody, ...doc.cells.map(c => el("tr", {},
                    el("td", {}, c.key === null ? c.key_hex : JSON.stringify(c.key)),
                    el("td", {}, c.state_id), el("td", { class: "mono" }, c.value_hex))));
            } catch (e) {
                replace(stateBody, el("tr", {}, el("td", { colspan: "3" }, e.message)));
            }
        }

        async function refresh(done) {
            let doc;
            try {
                doc = await getJSON(`${base}/pause`);
            } catch (e) {
                gate.textContent = e.message;
                return;
            }
            const running = !done && doc.state === "RUNNING";
            pauseBtn.disabled = !running || doc.paused;
            stepBtn.disabled = stepForBtn.disabled = resumeBtn.disabled = !running || !doc.paused;
            gate.textContent = !running ? "" : doc.paused
                ? `${doc.at_rest ? "paused" : "pausing"} (${doc.reason}) at ${doc.clock}` +
                  (doc.next_timer ? `; next timer ${doc.next_timer}` : "")
                : `running; clock ${doc.clock}`;
            if (!doc.stages) return;
            if (!stagesKnown) {
                replace(stageSel, ...doc.stages.filter(s => s.kind === "sdk").map(s =>
                    el("option", { value: s.id }, s.name)));
                stagesKnown = true;
            }
            if (doc.paused) {
                try {
                    const t = await getJSON(`${base}/timers`);
                    replace(timersBody, ...t.timers.map(x => el("tr", {},
                        el("td", {}, x.transform_name), el("td", {}, x.family),
                        el("td", {}, x.domain), el("td", {}, x.key === null ? x.key_hex : JSON.stringify(x.key)),
                        el("td", {}, x.fire), el("td", {}, x.hold))));
                } catch (e) {
                    replace(timersBody, el("tr", {}, el("td", { colspan: "6" }, e.message)));
                }
                refreshState();
            }
        }
        return { node, refresh };
    }

    /* ================================================================ jobs list */

    function listPage() {
        document.title = "Sundial — jobs";
        const tbody = el("tbody", { id: "jobs-body" });
        replace(main,
            el("h1", {}, "Jobs"),
            el("table", { id: "jobs" },
                el("thead", {}, el("tr", {},
                    el("th", {}, "Name"), el("th", {}, "Job"), el("th", {}, "State"),
                    el("th", {}, "Started"), el("th", { class: "num" }, "Duration"))),
                tbody));
        async function poll() {
            try {
                const doc = await getJSON("/api/jobs");
                if (doc.jobs.length === 0) {
                    replace(tbody, el("tr", {}, el("td", { colspan: 5, class: "muted" },
                        "No jobs yet. Submit one to this server's job port.")));
                } else {
                    replace(tbody, ...doc.jobs.map((j) => el("tr", { "data-job": j.id },
                        el("td", {}, el("a", { href: "/job/" + encodeURIComponent(j.id) },
                            j.name || "(unnamed)")),
                        el("td", { class: "muted" }, j.id),
                        el("td", {}, stateBadge(j.state)),
                        el("td", { class: "time" }, fmtWall(j.started || j.created)),
                        el("td", { class: "num" }, fmtDuration(j.duration_ms)))));
                }
                setStatus("updated " + fmtClock(Date.now()));
            } catch (e) {
                setStatus("cannot reach sundial: " + e.message, true);
            }
            setTimeout(poll, POLL_MS);
        }
        poll();
    }

    /* ================================================================ time axes
     *
     * Ticks at round values at every scale, from milliseconds to centuries. Event times are
     * absolute (UTC): labels carry a date when the span crosses days, only the date from a
     * day's step up, a month or a year beyond. Processing and wall times on the x axis are
     * relative to the job's start ("+1 h 30 min"). −∞ and +∞ have bands of their own, never
     * a position on the scale (never 1970).
     */

    const SEC = 1000, MIN = 60 * SEC, HOUR = 60 * MIN, DAY = 24 * HOUR;
    const MS_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, SEC, 2 * SEC, 5 * SEC, 10 * SEC,
        15 * SEC, 30 * SEC, MIN, 2 * MIN, 5 * MIN, 10 * MIN, 15 * MIN, 30 * MIN, HOUR, 2 * HOUR,
        3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY];
    const MONTH_STEPS = [1, 2, 3, 6];

    /* About `want` ticks in [a, b] (absolute UTC ms). [{v, label}], step info in .unit. */
    function timeTicks(a, b, want) {
        const span = b - a;
        const ticks = [];
        const ms = MS_STEPS.find((s) => span / s <= want);
        if (ms !== undefined) {
            for (let v = Math.ceil(a / ms) * ms; v <= b; v += ms) ticks.push(v);
            return { ticks, unit: ms < SEC ? "ms" : ms < MIN ? "s" : ms < DAY ? "min" : "day" };
        }
        const d0 = new Date(a);
        let months = MONTH_STEPS.find((m) => span / (m * 30.44 * DAY) <= want);
        if (months === undefined) {
            const seq = [1, 2, 5];
            let y = 1;
            for (let k = 1; span / (y * 365.25 * DAY) > want; k++) y = seq[k % 3] * 10 ** Math.floor(k / 3);
            months = 12 * y;
        }
        let y = d0.getUTCFullYear(), m = d0.getUTCMonth();
        m = Math.ceil(m / months) * months;
        if (months >= 12) { y = Math.ceil(y / (months / 12)) * (months / 12); m = 0; }
        for (let k = 0; k < 1000; k++) {
            const v = Date.UTC(y, m + k * months, 1);
            if (v < a) continue;
            if (v > b || !Number.isFinite(v)) break;
            ticks.push(v);
        }
        return { ticks, unit: months >= 12 ? "year" : "month" };
    }

    function isoParts(v) {
        const s = new Date(v).toISOString(); /* 1970-01-01T00:00:00.000Z, or ±YYYYYY- */
        const t = s.indexOf("T");
        return { date: s.slice(0, t), time: s.slice(t + 1, s.length - 1) };
    }

    /* Labels for timeTicks: the time at the step's grain, with the date when it changes. */
    function timeLabels(ticks, unit) {
        const crosses = ticks.length > 0 && isoParts(ticks[0]).date !== isoParts(ticks[ticks.length - 1]).date;
        let lastDate = crosses ? "" : null;
        return ticks.map((v) => {
            const p = isoParts(v);
            let label;
            if (unit === "year") label = p.date.slice(0, p.date.length - 6);
            else if (unit === "month") label = p.date.slice(0, p.date.length - 3);
            else if (unit === "day") label = p.date;
            else {
                label = unit === "ms" ? p.time : unit === "s" ? p.time.slice(0, 8) : p.time.slice(0, 5);
                if (p.date !== lastDate && lastDate !== null) label = `${p.date} ${label}`;
            }
            lastDate = p.date;
            return label;
        });
    }

    /* "+0", "+250 ms", "+1.5 s", "+2 min", "+1 h 30 min", "+3 d 4 h": a relative time. */
    function fmtRel(ms) {
        const sign = ms < 0 ? "−" : "+";
        let v = Math.abs(ms);
        if (v === 0) return "+0";
        if (v < SEC) return `${sign}${Math.round(v)} ms`;
        if (v < MIN) return `${sign}${+(v / SEC).toFixed(v % SEC === 0 ? 0 : 2)} s`;
        if (v < HOUR) {
            const m = Math.floor(v / MIN), s = Math.round((v % MIN) / SEC);
            return `${sign}${m} min${s ? ` ${s} s` : ""}`;
        }
        if (v < DAY) {
            const h = Math.floor(v / HOUR), m = Math.round((v % HOUR) / MIN);
            return `${sign}${h} h${m ? ` ${m} min` : ""}`;
        }
        const d = Math.floor(v / DAY), h = Math.round((v % DAY) / HOUR);
        if (d >= 365) return `${sign}${(v / (365.25 * DAY)).toFixed(1)} y`;
        return `${sign}${d} d${h ? ` ${h} h` : ""}`;
    }

    /* About `want` ticks of a relative time in [a, b]. */
    function relTicks(a, b, want) {
        const span = b - a;
        let step = MS_STEPS.find((s) => span / s <= want);
        if (step === undefined) {
            step = 30 * DAY;
            while (span / step > want) step *= 2;
        }
        const ticks = [];
        for (let v = Math.ceil(a / step) * step; v <= b; v += step) ticks.push(v);
        return ticks;
    }

    /* A name with a line-break chance after every "/" and "." (segments stay whole). */
    function nameNodes(name) {
        const parts = String(name).split(/(?<=[/.])/);
        const out = [];
        parts.forEach((p, i) => { out.push(document.createTextNode(p)); if (i + 1 < parts.length) out.push(el("wbr")); });
        return out;
    }

    /* ================================================================ the trace, drawn
     *
     * The engine's time trace (GET /api/jobs/ID/trace) has every change of every stage's
     * output watermark, every pane, timer firing, TestStream event and late drop, and the pause
     * gate's stops and the steps asked of it, with the job clock and the wall time. The timeline draws it when it has one (it falls back on the
     * executor's ~100 ms samples otherwise). x axis: "steps" (trace order: every drawn record
     * its own slot, so a job of 40 ms with a hundred steps shows each), the job's processing
     * time, or the wall time. The marks carry their details as <title> (hover).
     */

    const TRACE_KINDS = "wm_out,pane,timer_fire,teststream,late,cut,pause,step";
    const MARK_STYLE = {
        pane: { color: "#2e7d32", label: "pane" },
        timer_fire: { color: "#6a1b9a", label: "timer fired" },
        teststream: { color: "#00897b", label: "TestStream event" },
        late: { color: "#c62828", label: "late element" },
        cut: { color: "#000000", label: "trace cut" },
        pause: { color: "#f9a825", label: "paused" },
        step: { color: "#1565c0", label: "step asked" },
    };
    /* The pause gate's records: few, and always drawn (they tell how the job was driven). */
    const CONTROL_KINDS = new Set(["pause", "step"]);
    const PAUSE_WHY = {
        start: "paused from the start", by_hand: "paused by hand", at_time: "paused at the pause time",
        before_event: "paused before the next event", step_done: "the step is done: at rest again",
    };
    const PANE_COLOR = { early: "#ef6c00", on_time: "#2e7d32", late: "#c62828", unknown: "#757575" };
    const TS_STYLE = {
        elements: { color: "#546e7a", label: "TestStream elements" },
        watermark: { color: "#7b1fa2", label: "TestStream watermark" },
        processing_time: { color: "#00897b", label: "TestStream processing time" },
    };

    /* A trace mark's colour and legend label (TestStream events by what they played). */
    function markStyle(r) {
        return (r.kind === "teststream" && TS_STYLE[r.cause]) || MARK_STYLE[r.kind];
    }

    function fmtWindow(w) {
        if (w === undefined || w === null) return "";
        if (w === "global") return "global window";
        if (w.max !== undefined) return `custom window (max ${fmtEvent(w.max)})`;
        return `[${fmtEvent(w.start)}, ${fmtEvent(w.end)})`;
    }

    function recDetail(r, stageName) {
        const where = r.stage !== undefined ? ` · ${stageName(r.stage)}` : "";
        const win = r.window !== undefined ? `\nwindow ${fmtWindow(r.window)}` : "";
        const key = r.key ? `\nkey #${r.key}` : "";
        const at = `\nstep ${r.seq} · processing time ${fmtRel(r.clock)}`;
        switch (r.kind) {
        case "pane":
            return `pane ${r.cause} #${r.index}, ${r.count} value(s)${where}\ntimestamp ${fmtEvent(r.t)}${win}${key}${at}`;
        case "timer_fire":
            return `timer ${r.name || ""} fired (${r.cause === "processing_time" ? "processing time " + fmtRel(tnum(r.t)) : "event time " + fmtEvent(r.t)})${where}${win}${key}${at}`;
        case "teststream":
            return `TestStream event #${r.index}: ${r.cause}` +
                (r.cause === "elements" ? `, ${r.count} element(s)` : r.cause === "watermark" ? ` → ${fmtEvent(r.t)}` : ` → ${fmtRel(tnum(r.t))}`) + `${where}${at}`;
        case "late":
            return `late element (${r.cause})${where}\ntimestamp ${fmtEvent(r.t)}, watermark ${fmtEvent(r.t2)}${win}${at}`;
        case "cut":
            return `the trace was cut here (its cap): nothing after step ${r.count} was recorded`;
        case "pause":
            return `${PAUSE_WHY[r.cause] || "paused (" + r.cause + ")"}` +
                (r.cause === "at_time" ? ` ${fmtRel(tnum(r.t2))}` : "") +
                `\nbefore ${r.count === 1 ? "TestStream event #" + r.index : "the clock's jump to " + fmtRel(tnum(r.t))}${at}`;
        case "step":
            return (r.cause === "events" ? `step: the next ${r.count} time step(s)`
                : r.cause === "for" ? `step: for ${fmtDuration(r.count)} of processing time (${fmtRel(tnum(r.t2))} → ${fmtRel(tnum(r.t))})`
                    : r.cause === "watermark" ? `step: while ${r.pcoll}'s watermark is behind ${fmtEvent(r.t)} (now ${fmtEvent(r.t2)})`
                        : r.cause === "resume" ? "resume: the gate opens for good" : `step (${r.cause})`) + at;
        default:
            return `${r.kind}${where}${at}`;
        }
    }

    /*
     * Series and marks from trace records: per stage the steps of its output watermark
     * [{x, y}], starting at −∞; marks [{x, y, rec}]. xOf(rec, i) places a record.
     */
    function traceSeries(records, stageIndex, nStages, xOf) {
        const lines = Array.from({ length: nStages }, () => []);
        const marks = [];
        records.forEach((r, i) => {
            const x = xOf(r, i);
            const s = r.stage !== undefined ? stageIndex.get(r.stage) : undefined;
            if (r.kind === "wm_out") {
                if (s !== undefined) lines[s].push({ x, y: tnum(r.t) });
            } else if (MARK_STYLE[r.kind]) {
                marks.push({ x, rec: r, stage: s });
            }
        });
        return { lines, marks };
    }

    /*
     * Draw the timeline into `chart`. model: {view, samples (sampler rows), marks (sampler
     * marks), trace (records or null), xmode ("steps", "clock", "wall"), isolate (stage index
     * or null), onIsolate(i)}.
     */
    function drawTimeline(chart, model) {
        const view = model.view;
        if (!view) {
            replace(chart, el("p", { class: "muted" }, "No samples yet."));
            return;
        }
        const n = view.stages.length;
        const stageIndex = new Map(view.stages.map((s, i) => [s.id, i]));
        const stageName = (id) => { const i = stageIndex.get(id); return i === undefined ? id : stageLabel(view.stages[i]); };
        const useTrace = model.trace !== null && model.trace.some((r) => r.kind === "wm_out");
        let lines, marks = [], xLabel, xTicks;
        const W = 1100, H = 360, L = 170, R = 40, T = 30, B = 46, BAND = 16;
        if (useTrace) {
            const recs = model.trace;
            const wall0 = recs.length ? recs[0].wall : 0;
            const xOf = model.xmode === "steps" ? (r, i) => i + 1
                : model.xmode === "clock" ? (r) => r.clock : (r) => r.wall - wall0;
            ({ lines, marks } = traceSeries(recs, stageIndex, n, xOf));
            const x1 = model.xmode === "steps" ? recs.length + 1 : Math.max(...recs.map((r, i) => xOf(r, i)));
            xLabel = model.xmode === "steps" ? "trace steps in order (labels: the job's processing time then)"
                : model.xmode === "clock" ? `job processing time (${view.clock} clock), since the job started`
                    : "wall time since the job started";
            for (const l of lines) l.unshift({ x: 0, y: -Infinity });
            lines.forEach((l) => l.push({ x: x1, y: l[l.length - 1].y }));
            xTicks = (x0, xx1, X) => {
                if (model.xmode !== "steps") return relTicks(x0, xx1, 7).map((v) => ({ x: X(v), label: fmtRel(v) }));
                const out = [];
                const k = Math.max(1, Math.ceil(recs.length / 7));
                for (let i = 0; i < recs.length; i += k) out.push({ x: X(i + 1), label: fmtRel(recs[i].clock), sub: `#${i + 1}` });
                return out;
            };
        } else {
            const rows = model.samples;
            if (rows.length === 0) {
                replace(chart, el("p", { class: "muted" }, "No samples yet."));
                return;
            }
            const xi = model.xmode === "wall" ? 1 : 2;
            const t0 = tnum(rows[0][xi]);
            lines = view.stages.map((s, i) => rows.map((r) => ({ x: tnum(r[xi]) - t0, y: tnum(r[3 + i]) })));
            xLabel = model.xmode === "wall" ? "wall time since the job started"
                : `job processing time (${view.clock} clock), since the first sample`;
            xTicks = (x0, xx1, X) => relTicks(x0, xx1, 7).map((v) => ({ x: X(v), label: fmtRel(v) }));
            for (const m of model.marks) {
                const mx = tnum(model.xmode === "wall" ? m.wall_ms : m.clock_ms) - (model.xmode === "wall" ? 0 : t0);
                if (Number.isFinite(mx)) marks.push({ x: mx, sampler: m });
            }
        }
        /* x range */
        const allX = [];
        for (const l of lines) for (const p of l) allX.push(p.x);
        for (const m of marks) allX.push(m.x);
        let x0 = Math.min(...allX), x1 = Math.max(...allX);
        if (!(x1 > x0)) { x0 -= 1; x1 += 1; }
        /* y range: finite event times of the lines and marks drawn (the end of the global
         * window is a finite time, drawn at the +∞ band's edge with its own label) */
        const shown = (i) => model.isolate === null || model.isolate === i;
        const ys = [];
        lines.forEach((l, i) => { if (shown(i)) for (const p of l) if (Number.isFinite(p.y) && p.y < GLOBAL_MAX - 1000) ys.push(p.y); });
        for (const m of marks) {
            if (m.rec && (m.rec.kind === "pane" || m.rec.kind === "late" || (m.rec.kind === "timer_fire" && m.rec.cause !== "processing_time"))) {
                const v = tnum(m.rec.t);
                if (Number.isFinite(v) && v < GLOBAL_MAX - 1000 && (m.stage === undefined || shown(m.stage))) ys.push(v);
            }
        }
        const haveY = ys.length > 0;
        let y0 = haveY ? Math.min(...ys) : 0, y1 = haveY ? Math.max(...ys) : 1;
        if (!(y1 > y0)) { y0 -= 500; y1 += 500; }
        const padY = (y1 - y0) * 0.05;
        y0 -= padY; y1 += padY;
        const top = T + BAND, bottom = H - B - BAND;
        const X = (v) => L + (W - L - R) * (v - x0) / (x1 - x0);
        const Y = (v) => {
            if (v === -Infinity) return H - B - BAND / 2;
            if (v === Infinity || v >= GLOBAL_MAX - 1000) return T + BAND / 2;
            return bottom - (bottom - top) * (v - y0) / (y1 - y0);
        };
        const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", id: "timeline-svg",
            "data-source": useTrace ? "trace" : "samples",
            "aria-label": "output watermark of every stage against processing time" });
        /* y axis: bands for ±∞, round event times between */
        root.appendChild(svg("rect", { class: "band", x: L, y: T, width: W - L - R, height: BAND }));
        root.appendChild(svg("rect", { class: "band", x: L, y: H - B - BAND, width: W - L - R, height: BAND }));
        root.appendChild(svg("text", { class: "ytick inf", x: L - 6, y: T + BAND / 2 + 4, "text-anchor": "end" }, "+∞ (end of time)"));
        root.appendChild(svg("text", { class: "ytick inf", x: L - 6, y: H - B - BAND / 2 + 4, "text-anchor": "end" }, "−∞ (start of time)"));
        let dateNote = "";
        if (haveY) {
            const { ticks, unit } = timeTicks(y0, y1, 6);
            const labels = timeLabels(ticks, unit);
            ticks.forEach((v, k) => {
                root.appendChild(svg("line", { class: "grid", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
                root.appendChild(svg("text", { class: "ytick", x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, labels[k]));
            });
            const d0 = isoParts(y0).date, d1 = isoParts(y1).date;
            if (unit !== "day" && unit !== "month" && unit !== "year") dateNote = d0 === d1 ? `, ${d0}` : "";
        } else {
            root.appendChild(svg("text", { x: (L + W - R) / 2, y: (top + bottom) / 2, "text-anchor": "middle", class: "muted" },
                model.trace !== null ? "no finite output watermark in the trace: every stage at −∞ or +∞"
                    : "no finite watermark yet: every stage is at −∞ or +∞"));
        }
        root.appendChild(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
        root.appendChild(svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
        for (const t of xTicks(x0, x1, X)) {
            root.appendChild(svg("line", { class: "grid", x1: t.x, x2: t.x, y1: T, y2: H - B }));
            root.appendChild(svg("text", { class: "xtick", x: t.x, y: H - B + 14, "text-anchor": "middle" }, t.label));
            if (t.sub) root.appendChild(svg("text", { class: "xsub", x: t.x, y: H - B + 26, "text-anchor": "middle" }, t.sub));
        }
        root.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, xLabel));
        root.appendChild(svg("text", { x: 8, y: 14 }, `output watermark (event time, UTC${dateNote})`));
        /* sampler marks (no trace): vertical lines as before */
        for (const m of marks.filter((mm) => mm.sampler)) {
            const sm = m.sampler;
            const info = MARKS[sm.kind] || { color: "#999", label: sm.kind };
            const g = svg("g", { class: "mark-" + sm.kind });
            g.appendChild(svg("line", { class: "mark", x1: X(m.x), x2: X(m.x), y1: T, y2: H - B, stroke: info.color }));
            g.appendChild(svg("path", { d: `M${X(m.x) - 5},${T - 8} h10 l-5,7 z`, fill: info.color }));
            const what = sm.kind === "ts_watermark" ? `→ ${fmtEvent(sm.to)}`
                : sm.kind === "ts_end" ? "" : `→ ${fmtClock(tnum(sm.to))} (+${fmtDuration(tnum(sm.to) - tnum(sm.from))})`;
            g.appendChild(svg("title", {}, `${info.label} ${what}`));
            root.appendChild(g);
        }
        /* One step line per stage; coinciding lines show as nested bands (earlier stages
         * wider underneath). An isolated stage is drawn alone, the others faint. */
        lines.forEach((l, i) => {
            let d = "";
            for (const p of l) {
                if (!Number.isFinite(p.x)) continue;
                const y = Y(p.y);
                d += d === "" ? `M${X(p.x).toFixed(1)},${y.toFixed(1)}` : `H${X(p.x).toFixed(1)}V${y.toFixed(1)}`;
            }
            const s = view.stages[i];
            const iso = model.isolate !== null;
            const width = iso ? 2.5 : Math.min(1.6 + 2.4 * (n - 1 - i), 12) + (holding(s) ? 1.5 : 0);
            const path = svg("path", { d, fill: "none", stroke: COLORS[i % COLORS.length],
                "stroke-width": width, "stroke-linejoin": "round", "data-stage": s.id,
                "data-steps": Math.max(0, l.length - 2), class: shown(i) ? "wm" : "wm faded" });
            path.appendChild(svg("title", {}, `${stageLabel(s)}: ${fmtEvent(s.output_wm)}` +
                (useTrace ? ` (${Math.max(0, l.length - 2)} watermark step(s))` : "")));
            if (!iso || shown(i)) root.appendChild(path);
        });
        /* trace marks: panes (diamonds at the pane's timestamp), timer firings (circles),
         * TestStream events (dashed verticals), late elements (crosses at their timestamp), the
         * pause gate's stops (a pause sign) and the steps asked of it (a play sign) */
        const counts = {};
        /* Thousands of marks would bury the lines (and slow the page): past MAX_MARKS only the
         * TestStream events and the trace's cut are drawn, and the legend says so. */
        const MAX_MARKS = 3000;
        let traceMarks = marks.filter((mm) => mm.rec && (mm.stage === undefined || shown(mm.stage)));
        let omitted = 0;
        if (traceMarks.length > MAX_MARKS) {
            const kept = traceMarks.filter((mm) => mm.rec.kind === "teststream" || mm.rec.kind === "cut" ||
                CONTROL_KINDS.has(mm.rec.kind));
            omitted = traceMarks.length - kept.length;
            traceMarks = kept;
        }
        for (const m of traceMarks) {
            const r = m.rec;
            if (m.stage !== undefined && !shown(m.stage)) continue;
            const style = markStyle(r);
            counts[style.label] = counts[style.label] || { color: style.color, n: 0 };
            counts[style.label].n++;
            const x = X(m.x);
            const g = svg("g", { class: "tmark tmark-" + r.kind, "data-kind": r.kind,
                "data-stage": r.stage === undefined ? "" : r.stage });
            if (r.kind === "pane") {
                const y = Y(tnum(r.t));
                const c = PANE_COLOR[r.cause] || style.color;
                g.setAttribute("data-timing", r.cause);
                g.appendChild(svg("path", { d: `M${x},${y - 6} l6,6 l-6,6 l-6,-6 z`, fill: c, stroke: "#fff", "stroke-width": 1 }));
            } else if (r.kind === "timer_fire") {
                const y = r.cause === "processing_time" ? H - B - BAND / 2 : Y(tnum(r.t));
                g.appendChild(svg("circle", { cx: x, cy: y, r: 4, fill: "#fff", stroke: style.color, "stroke-width": 2 }));
            } else if (r.kind === "late") {
                const y = Y(tnum(r.t));
                g.appendChild(svg("path", { d: `M${x - 5},${y - 5} l10,10 m0,-10 l-10,10`, stroke: style.color, "stroke-width": 2.5 }));
            } else if (r.kind === "pause") {
                /* a pause sign above the chart, a dotted line down through it */
                g.appendChild(svg("line", { class: "mark gate", x1: x, x2: x, y1: T, y2: H - B, stroke: style.color }));
                g.appendChild(svg("rect", { x: x - 5, y: T - 13, width: 4, height: 12, fill: style.color }));
                g.appendChild(svg("rect", { x: x + 1, y: T - 13, width: 4, height: 12, fill: style.color }));
            } else if (r.kind === "step") {
                /* a play sign above the chart */
                g.appendChild(svg("line", { class: "mark gate", x1: x, x2: x, y1: T, y2: H - B, stroke: style.color }));
                g.appendChild(svg("path", { d: `M${x - 4},${T - 13} l10,6 l-10,6 z`, fill: style.color }));
            } else {
                g.appendChild(svg("line", { class: "mark", x1: x, x2: x, y1: T, y2: H - B, stroke: style.color }));
                g.appendChild(svg("path", { d: `M${x - 5},${T - 8} h10 l-5,7 z`, fill: style.color }));
            }
            g.appendChild(svg("title", {}, recDetail(r, stageName)));
            root.appendChild(g);
        }
        /* legend: a stage's entry isolates its lines and marks (click again: all) */
        const legend = el("div", { class: "legend", id: "timeline-legend" }, ...view.stages.map((s, i) => {
            const b = el("button", { class: "stage-key" + (model.isolate === i ? " on" : "") + (holding(s) ? " held" : ""),
                "data-stage": s.id, title: model.isolate === i ? "show every stage" : "show only this stage" },
            el("span", { class: "swatch", style: { background: COLORS[i % COLORS.length] } }),
            ...nameNodes(stageLabel(s)), holding(s) ? " — holds time back" : "");
            b.addEventListener("click", () => model.onIsolate(model.isolate === i ? null : i));
            return b;
        }),
        ...(useTrace ? Object.entries(counts)
            .map(([label, v]) => el("span", { class: "mark-key" },
                el("span", { class: "swatch", style: { background: v.color } }), `${label} (${v.n})`))
            .concat(omitted ? [el("span", { class: "mark-key muted", id: "marks-omitted" },
                `${omitted.toLocaleString("en-US")} pane, timer and late marks not drawn (isolate a stage to see its own)`)] : [])
            : Object.entries(MARKS).filter(([k]) => model.marks.some((m) => m.kind === k))
                .map(([, v]) => el("span", {}, el("span", { class: "swatch", style: { background: v.color } }),
                    "▾ " + v.label + ` (${model.marks.filter((m) => MARKS[m.kind] === v).length})`))));
        replace(chart, root, legend);
    }

    /* ================================================================ job page */

    function stageLabel(s) {
        if (s.transforms.length === 0) return s.id;
        return s.transforms[0] + (s.transforms.length > 1 ? ` +${s.transforms.length - 1}` : "");
    }

    /* A stage holds time back when its output watermark is behind its input watermark. */
    function holding(s) {
        return tnum(s.output_wm) < tnum(s.input_wm);
    }

    function jobPage(id) {
        const st = {
            lastSeq: 0, timeline: { gen: null, samples: [], head: null, marks: [] },
            xmode: "steps", view: null, job: null, finishedPolls: 0,
            trace: { records: [], after: null, cut: false }, isolate: null,
        };
        const title = el("h1", { id: "job-name" }, id);
        const facts = el("div", { class: "facts", id: "facts" });
        const note = el("span", { class: "note", id: "action-note" });
        const cancelBtn = el("button", { id: "cancel", class: "danger" }, "Cancel");
        const drainBtn = el("button", { id: "drain", title: "Stop reading the job's sources, finish what was read, fire every window, end DRAINED" }, "Drain");
        const errorBox = el("div", { id: "error" });
        const xSteps = el("button", { class: "on", id: "x-steps", title: "every traced step its own slot" }, "steps");
        const xClock = el("button", { id: "x-clock" }, "processing time");
        const xWall = el("button", { id: "x-wall" }, "wall time");
        const chart = el("div", { class: "timeline", id: "timeline" });
        const stagesBody = el("tbody", { id: "stages-body" });
        const pcollBody = el("tbody", {});
        const msgs = el("ul", { class: "msgs", id: "messages" });
        const tc = timeControl(id);

        cancelBtn.addEventListener("click", () => act("cancel"));
        drainBtn.addEventListener("click", () => act("drain"));
        for (const [b, mode] of [[xSteps, "steps"], [xClock, "clock"], [xWall, "wall"]]) {
            b.addEventListener("click", () => {
                st.xmode = mode;
                for (const o of [xSteps, xClock, xWall]) o.className = o === b ? "on" : "";
                draw();
            });
        }

        replace(main,
            el("div", { class: "muted" }, el("a", { href: "/" }, "← all jobs")),
            title, facts,
            el("div", { class: "actions" }, cancelBtn, drainBtn, note),
            errorBox,
            tc.node,
            el("h2", {}, "Watermark timeline",
                el("span", { class: "toggle" }, "x axis: ", xSteps, " ", xClock, " ", xWall)),
            chart,
            el("h2", {}, "Stages"),
            el("table", { id: "stages" },
                el("thead", {}, el("tr", {},
                    el("th", {}, "Stage (user transforms fused in)"),
                    el("th", {}, "Elements in"), el("th", {}, "Elements out"),
                    el("th", {}, "Input watermark"), el("th", {}, "Output watermark"),
                    el("th", {}, "Hold"), el("th", { class: "num" }, "Pending"),
                    el("th", { class: "num" }, "In flight"),
                    el("th", { class: "num" }, "Timers (event / proc.)"),
                    el("th", { class: "num" }, "Dropped late"))),
                stagesBody),
            el("details", {}, el("summary", {}, "PCollections"),
                el("table", { id: "pcollections" }, el("thead", {}, el("tr", {}, el("th", {}, "PCollection"),
                    el("th", {}, "Id"), el("th", { class: "num" }, "Elements"),
                    el("th", { class: "num" }, "Bytes"), el("th", {}, "Counted by"))), pcollBody)),
            el("h2", {}, "Messages"),
            msgs);

        async function act(what) {
            cancelBtn.disabled = true;
            drainBtn.disabled = true;
            note.textContent = what === "cancel" ? "cancelling…" : "draining…";
            try {
                const r = await postAction(`/api/jobs/${encodeURIComponent(id)}/${what}`);
                note.textContent = `${what}: job is ${r.state}`;
            } catch (e) {
                note.textContent = `${what}: ${e.message}`;
            }
            /* The next refresh shows the new state. */
        }

        function ioCell(view, list) {
            if (list.length === 0) return el("td", { class: "muted" }, "—");
            return el("td", {}, ...list.map((i) => {
                const p = view.pcollections[i];
                const n = p.elements === null ? "—" : p.elements.toLocaleString("en-US");
                return el("div", { class: "io", title: `${p.id}: ${COUNT_SOURCE[p.count_source] || ""}` },
                    el("b", {}, n), p.bytes !== null ? el("span", { class: "bytes" }, `\u00a0(${fmtBytes(p.bytes)})`) : null,
                    " ", ...nameNodes(p.name));
            }));
        }

        function renderFacts(job, view) {
            const items = [
                ["State", stateBadge(job.state)],
                ["Job", job.id],
                ["Started", fmtWall(job.started || job.created)],
                ["Duration", fmtDuration(job.duration_ms)],
            ];
            if (view) {
                items.push(["Clock", `${view.clock} — ${fmtEvent(view.clock_ms)}`]);
                items.push(["SDK bundles", view.bundles_done.toLocaleString("en-US")]);
            }
            replace(facts, ...items.map(([k, v]) => el("div", {}, el("span", { class: "k" }, k),
                typeof v === "object" ? v : String(v))));
        }

        function renderStages(view) {
            if (!view) {
                replace(stagesBody, el("tr", {}, el("td", { colspan: 10, class: "muted" },
                    "No stages yet (the job has not started running).")));
                replace(pcollBody);
                return;
            }
            replace(stagesBody, ...view.stages.map((s, i) => el("tr", { "data-stage": s.id },
                el("td", {},
                    el("span", { class: "swatch", style: { background: COLORS[i % COLORS.length] } }),
                    el("span", { class: "kind" }, `${s.kind} · ${s.id}`),
                    el("ul", { class: "names" }, ...(s.transforms.length ? s.transforms : [s.id])
                        .map((n) => el("li", {}, ...nameNodes(n)))),
                    holding(s) ? el("span", { class: "badge", title: "output watermark behind input watermark: held by its own holds, pending work or timers" }, "holds time back") : null),
                ioCell(view, s.inputs), ioCell(view, s.outputs),
                el("td", { class: "time" }, fmtEvent(s.input_wm)),
                el("td", { class: "time" }, fmtEvent(s.output_wm)),
                el("td", { class: "time" }, tnum(s.hold) === Infinity ? "none" : fmtEvent(s.hold)),
                el("td", { class: "num" }, s.pending),
                el("td", { class: "num" }, s.in_progress),
                el("td", { class: "num" }, `${s.et_timers} / ${s.pt_timers}`),
                el("td", { class: "num" }, s.dropped_late))));
            replace(pcollBody, ...view.pcollections.map((p) => el("tr", { "data-pcoll": p.id, "data-source": p.count_source },
                el("td", {}, p.name), el("td", { class: "muted" }, p.id),
                el("td", { class: "num" }, p.elements === null ? "not counted" : p.elements.toLocaleString("en-US")),
                el("td", { class: "num" }, p.bytes === null ? "—" : fmtBytes(p.bytes)),
                el("td", { class: "muted", title: COUNT_SOURCE[p.count_source] || "" },
                    p.count_source === "runner" ? "runner" : p.count_source === "sdk" ? "SDK metric" : "—"))));
        }

        function renderMessages(list) {
            const atBottom = msgs.scrollHeight - msgs.scrollTop - msgs.clientHeight < 20;
            for (const m of list) {
                const when = el("span", { class: "muted" }, fmtClock(m.time));
                if (m.state !== undefined) {
                    msgs.appendChild(el("li", { class: "st" }, when, "state",
                        el("pre", {}, "→ " + m.state)));
                } else {
                    msgs.appendChild(el("li", { class: m.importance }, when, m.importance,
                        el("pre", {}, m.text)));
                }
            }
            if (atBottom) msgs.scrollTop = msgs.scrollHeight;
        }

        function mergeTimeline(t) {
            const tl = st.timeline;
            if (t.generation === null) return;
            if (t.full || tl.gen !== t.generation) {
                tl.samples = t.samples;
            } else {
                tl.samples.push(...t.samples);
            }
            tl.gen = t.generation;
            tl.head = t.head;
            tl.marks = t.marks;
        }

        /* The SVG: each stage's output watermark (y, event time) against processing time. */
        function draw() {
            drawTimeline(chart, { view: st.view, samples: st.timeline.head ? st.timeline.samples.concat([st.timeline.head]) : st.timeline.samples,
                marks: st.timeline.marks, trace: st.trace.records.length ? st.trace.records : null,
                xmode: st.xmode, isolate: st.isolate,
                onIsolate: (i) => { st.isolate = i; draw(); } });
        }

        /* The engine's trace: only records after the last one fetched (it only grows). */
        async function fetchTrace() {
            const q = `kind=${TRACE_KINDS}` + (st.trace.after !== null ? `&after=${st.trace.after}` : "");
            try {
                let t = await getJSON(`/api/jobs/${encodeURIComponent(id)}/trace?${q}`);
                if (st.trace.after !== null && t.total <= st.trace.after) {
                    /* a new run of the job (schedule exploration) started a new trace */
                    st.trace = { records: [], after: null, cut: false };
                    t = await getJSON(`/api/jobs/${encodeURIComponent(id)}/trace?kind=${TRACE_KINDS}`);
                }
                st.trace.records.push(...t.records);
                if (t.records.length) st.trace.after = t.records[t.records.length - 1].seq;
                st.trace.cut = t.cut;
            } catch (e) {
                /* no trace (yet): the sampler's timeline is drawn */
            }
        }

        async function poll() {
            try {
                const doc = await getJSON(`/api/jobs/${encodeURIComponent(id)}?after=${st.lastSeq}`);
                const tq = st.timeline.gen === null ? "" :
                    `?gen=${st.timeline.gen}&after=${st.timeline.samples.length ? st.timeline.samples[st.timeline.samples.length - 1][0] : 0}`;
                const t = await getJSON(`/api/jobs/${encodeURIComponent(id)}/timeline${tq}`);
                st.job = doc.job;
                st.view = doc.view;
                st.lastSeq = doc.last_seq;
                document.title = `Sundial — ${doc.job.name || doc.job.id}`;
                title.textContent = doc.job.name || "(unnamed job)";
                renderFacts(doc.job, doc.view);
                const done = TERMINAL.has(doc.job.state);
                cancelBtn.disabled = done || doc.job.state === "CANCELLING";
                drainBtn.disabled = done || doc.job.state === "CANCELLING" || doc.job.state === "DRAINING";
                replace(errorBox, doc.job.error ? el("div", { class: "card", style: { borderColor: "#c62828" } },
                    el("b", {}, "Failed: "), el("pre", { style: { whiteSpace: "pre-wrap", margin: "4px 0 0" } }, doc.job.error)) : null);
                renderStages(doc.view);
                tc.refresh(done);
                renderMessages(doc.messages);
                mergeTimeline(t);
                await fetchTrace();
                draw();
                setStatus("updated " + fmtClock(Date.now()));
                st.finishedPolls = done && !(doc.view && doc.view.live) ? st.finishedPolls + 1 : 0;
            } catch (e) {
                setStatus(e.message, true);
            }
            /* A finished job changes no more: stop after a last refresh. */
            if (st.finishedPolls < 2) setTimeout(poll, POLL_MS);
            else setStatus("job finished; not refreshing");
        }
        poll();
    }

    const path = location.pathname;
    if (path.startsWith("/job/")) {
        jobPage(decodeURIComponent(path.slice(5)));
    } else {
        listPage();
    }
})();
