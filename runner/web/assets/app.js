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
            xmode: "clock", view: null, job: null, finishedPolls: 0,
        };
        const title = el("h1", { id: "job-name" }, id);
        const facts = el("div", { class: "facts", id: "facts" });
        const note = el("span", { class: "note", id: "action-note" });
        const cancelBtn = el("button", { id: "cancel", class: "danger" }, "Cancel");
        const drainBtn = el("button", { id: "drain", title: "Stop reading the job's sources, finish what was read, fire every window, end DRAINED" }, "Drain");
        const errorBox = el("div", { id: "error" });
        const xClock = el("button", { class: "on" }, "processing time");
        const xWall = el("button", {}, "wall time");
        const chart = el("div", { class: "timeline", id: "timeline" });
        const stagesBody = el("tbody", { id: "stages-body" });
        const pcollBody = el("tbody", {});
        const msgs = el("ul", { class: "msgs", id: "messages" });
        const tc = timeControl(id);

        cancelBtn.addEventListener("click", () => act("cancel"));
        drainBtn.addEventListener("click", () => act("drain"));
        xClock.addEventListener("click", () => { st.xmode = "clock"; xClock.className = "on"; xWall.className = ""; draw(); });
        xWall.addEventListener("click", () => { st.xmode = "wall"; xWall.className = "on"; xClock.className = ""; draw(); });

        replace(main,
            el("div", { class: "muted" }, el("a", { href: "/" }, "← all jobs")),
            title, facts,
            el("div", { class: "actions" }, cancelBtn, drainBtn, note),
            errorBox,
            tc.node,
            el("h2", {}, "Watermark timeline",
                el("span", { class: "toggle" }, "x axis: ", xClock, " ", xWall)),
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
                el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "PCollection"),
                    el("th", {}, "Id"), el("th", { class: "num" }, "Elements"))), pcollBody)),
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
                return el("div", { class: "io", title: p.id }, el("b", {}, n), " ", p.name);
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
                        .map((n) => el("li", {}, n))),
                    holding(s) ? el("span", { class: "badge", title: "output watermark behind input watermark: held by its own holds, pending work or timers" }, "holds time back") : null),
                ioCell(view, s.inputs), ioCell(view, s.outputs),
                el("td", { class: "time" }, fmtEvent(s.input_wm)),
                el("td", { class: "time" }, fmtEvent(s.output_wm)),
                el("td", { class: "time" }, tnum(s.hold) === Infinity ? "none" : fmtEvent(s.hold)),
                el("td", { class: "num" }, s.pending),
                el("td", { class: "num" }, s.in_progress),
                el("td", { class: "num" }, `${s.et_timers} / ${s.pt_timers}`),
                el("td", { class: "num" }, s.dropped_late))));
            replace(pcollBody, ...view.pcollections.map((p) => el("tr", {},
                el("td", {}, p.name), el("td", { class: "muted" }, p.id),
                el("td", { class: "num" }, p.elements === null ? "not reported" : p.elements))));
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
            const view = st.view;
            const tl = st.timeline;
            const rows = tl.head ? tl.samples.concat([tl.head]) : tl.samples;
            if (!view || rows.length === 0) {
                replace(chart, el("p", { class: "muted" }, "No samples yet."));
                return;
            }
            const W = 1100, H = 340, L = 150, R = 60, T = 26, B = 40, BAND = 16;
            const xi = st.xmode === "clock" ? 2 : 1;
            const xs = rows.map((r) => tnum(r[xi])).filter(Number.isFinite);
            let x0 = Math.min(...xs), x1 = Math.max(...xs);
            if (!(x1 > x0)) { x0 -= 500; x1 += 500; }
            let ys = [];
            for (const r of rows) for (let s = 3; s < r.length; s++) {
                const v = tnum(r[s]);
                if (Number.isFinite(v) && v < GLOBAL_MAX - 1000) ys.push(v);
            }
            let y0 = ys.length ? Math.min(...ys) : 0, y1 = ys.length ? Math.max(...ys) : 1;
            if (!(y1 > y0)) { y0 -= 1000; y1 += 1000; }
            const padY = (y1 - y0) * 0.05;
            y0 -= padY; y1 += padY;
            const top = T + BAND, bottom = H - B - BAND;
            const X = (v) => L + (W - L - R) * (v - x0) / (x1 - x0);
            const Y = (v) => {
                if (v === -Infinity) return H - B - BAND / 2;
                if (v === Infinity || v >= GLOBAL_MAX - 1000) return T + BAND / 2;
                return bottom - (bottom - top) * (v - y0) / (y1 - y0);
            };
            const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
                "aria-label": "output watermark of every stage against processing time" });
            /* grid and axes */
            const yFmt = (v) => {
                const d = new Date(v);
                return (y1 - y0 > 86400000 ? d.toISOString().slice(0, 10) + " " : "") +
                    d.toISOString().slice(11, 19);
            };
            for (let k = 0; k <= 4; k++) {
                const v = y0 + (y1 - y0) * k / 4;
                root.appendChild(svg("line", { class: "grid", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
                root.appendChild(svg("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, yFmt(v)));
            }
            root.appendChild(svg("text", { x: L - 6, y: T + BAND / 2 + 4, "text-anchor": "end" }, "+∞"));
            root.appendChild(svg("text", { x: L - 6, y: H - B - BAND / 2 + 4, "text-anchor": "end" }, "−∞"));
            root.appendChild(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
            root.appendChild(svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
            const xFmt = st.xmode === "clock"
                ? (v) => fmtClock(v)
                : (v) => `+${((v) / 1000).toFixed(1)} s`;
            for (let k = 0; k <= 5; k++) {
                const v = x0 + (x1 - x0) * k / 5;
                root.appendChild(svg("text", { x: X(v), y: H - B + 16, "text-anchor": "middle" }, xFmt(v)));
            }
            root.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" },
                st.xmode === "clock" ? `job processing time (${view.clock} clock)` : "wall time since the job started"));
            root.appendChild(svg("text", { x: 8, y: 14 }, "output watermark (event time, UTC)"));
            /* marks */
            for (const m of tl.marks) {
                const mx = tnum(st.xmode === "clock" ? m.clock_ms : m.wall_ms);
                if (!Number.isFinite(mx)) continue;
                const info = MARKS[m.kind] || { color: "#999", label: m.kind };
                const g = svg("g", { class: "mark-" + m.kind });
                g.appendChild(svg("line", { class: "mark", x1: X(mx), x2: X(mx), y1: T, y2: H - B, stroke: info.color }));
                g.appendChild(svg("path", { d: `M${X(mx) - 5},${T - 8} h10 l-5,7 z`, fill: info.color }));
                const what = m.kind === "ts_watermark" ? `→ ${fmtEvent(m.to)}`
                    : m.kind === "ts_end" ? "" : `→ ${fmtClock(tnum(m.to))} (+${fmtDuration(tnum(m.to) - tnum(m.from))})`;
                g.appendChild(svg("title", {}, `${info.label} ${what}`));
                root.appendChild(g);
            }
            /* One step line per stage. Stages often share a watermark, so earlier stages are
             * drawn wider underneath: coinciding lines show as nested bands, not one line. */
            const n = view.stages.length;
            view.stages.forEach((s, i) => {
                let d = "";
                let px = null;
                for (const r of rows) {
                    const x = tnum(r[xi]);
                    if (!Number.isFinite(x)) continue;
                    const y = Y(tnum(r[3 + i]));
                    d += px === null ? `M${X(x).toFixed(1)},${y.toFixed(1)}` : `H${X(x).toFixed(1)}V${y.toFixed(1)}`;
                    px = x;
                }
                const width = Math.min(1.6 + 2.4 * (n - 1 - i), 12) + (holding(s) ? 1.5 : 0);
                const path = svg("path", { d, fill: "none", stroke: COLORS[i % COLORS.length],
                    "stroke-width": width, "stroke-linejoin": "round", "data-stage": s.id });
                path.appendChild(svg("title", {}, `${stageLabel(s)}: ${fmtEvent(s.output_wm)}`));
                root.appendChild(path);
            });
            const legend = el("div", { class: "legend" }, ...view.stages.map((s, i) =>
                el("span", { class: holding(s) ? "held" : null },
                    el("span", { class: "swatch", style: { background: COLORS[i % COLORS.length] } }),
                    stageLabel(s), holding(s) ? " — holds time back" : "")),
                ...Object.entries(MARKS).filter(([k]) => tl.marks.some((m) => m.kind === k))
                    .map(([, v]) => el("span", {}, el("span", { class: "swatch", style: { background: v.color } }),
                        "▾ " + v.label + ` (${tl.marks.filter((m) => MARKS[m.kind] === v).length})`)));
            replace(chart, root, legend);
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
