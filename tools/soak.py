"""soak.py: the soak pipeline of tools/soak.c, written with Beam Python (see docs/soak.md).

    python tools/soak.py --job_endpoint=localhost:PORT [--seconds N] [--summary FILE]
                         [--runner_name NAME]

The same job as the C SDK's: an unbounded splittable source emits element i as
("kNNN", i) at event time t0 + i ms, no sooner than that wall time; keys follow a 20 s
cycle (all 300 keys in the first 10 s, keys 0..149 in the second); 10 s fixed windows with
early firings 2 s of processing time after a pane's first element, discarding, GroupByKey,
and a sink adding up each (window, key)'s panes; a stateful DoFn keeps (count, sum, last, due)
per key and a processing-time timer 5 s after each element, and records each fire's lateness.
The source idles 8 s after its last element so every key fires once more. The job runs through
PortableRunner with LOOPBACK workers (this process), so the checks run here when it is done.
Prints a JSON summary line; exit 0 when every output was exact.
"""

import argparse
import json
import sys
import threading
import time

import apache_beam as beam
from apache_beam.coders import TupleCoder, VarIntCoder
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import trigger, userstate, window
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.utils.timestamp import Duration, Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming

KEYS = 300
CYCLE_MS = 20000
HALF_MS = 10000
WINDOW_MS = 10000
EARLY_S = 2
QUIET_MS = 5000
TAIL_MS = 8000
RESUME_S = 0.1


def key_of(i):
    return i % KEYS if i % CYCLE_MS < HALF_MS else i % (KEYS // 2)


class Record:
    """What the job's sinks saw; filled by the LOOPBACK workers (threads of this process)."""

    def __init__(self, t0, n):
        self.mu = threading.Lock()
        self.t0, self.n = t0, n
        self.cells = {}  # (window index, key) -> [count, sum, panes, on_time, early, late, bad]
        self.first_lag = {}  # window index -> first ON_TIME pane's wall time - window end (ms)
        self.last_lag = {}
        self.fires = []  # (key, count, sum, last, lateness ms, wall ms)
        # (key, last) of a quiet period that ended without a fire -> the processing time to
        # the key's next element (under 5 s: a backlog compressed the gap)
        self.joined = {}
        self.emitted = 0
        self.grouped = 0
        self.outside = 0


REC = None


class SourceRange(RestrictionProvider):
    """The element is the number of elements n; offsets from n on are idle ms (the tail)."""

    def initial_restriction(self, element):
        return OffsetRange(0, element + TAIL_MS)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class Source(beam.DoFn):
    def __init__(self, t0, n):
        self._t0, self._n = t0, n

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element,
        tracker=beam.DoFn.RestrictionParam(SourceRange()),
        wm=beam.DoFn.WatermarkEstimatorParam(ManualWatermarkEstimator.default_provider()),
    ):
        t0, n = self._t0, self._n
        i = tracker.current_restriction().start
        now = int(time.time() * 1000)
        emitted = 0
        done = False
        while t0 + i <= now:
            if not tracker.try_claim(i):
                done = True  # the restriction is done, or the runner split it here
                break
            if i < n:
                yield window.TimestampedValue(("k%03d" % key_of(i), i), Timestamp(micros=(t0 + i) * 1000))
                emitted += 1
            i += 1
        with REC.mu:
            REC.emitted += emitted
        if done:
            return
        nxt = Timestamp(micros=(t0 + i) * 1000)
        cur = wm.current_watermark()
        if cur is None or nxt > cur:
            wm.set_watermark(nxt)
        tracker.defer_remainder(Duration(seconds=RESUME_S))


class Panes(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        now = int(time.time() * 1000)
        key, values = kv
        k = int(key[1:])
        start = w.start.micros // 1000
        end = w.end.micros // 1000
        count = total = outside = 0
        for i in values:
            if not (start <= REC.t0 + i < end) or key_of(i) != k:
                outside += 1
            count += 1
            total += i
        wi, rem = divmod(start - REC.t0, WINDOW_MS)
        timing = pane.timing
        with REC.mu:
            REC.grouped += count
            REC.outside += outside
            if rem != 0 or wi < 0 or wi >= REC.n // WINDOW_MS:
                REC.outside += count
                return
            c = REC.cells.setdefault((wi, k), [0, 0, 0, 0, 0, 0, 0])
            c[0] += count
            c[1] += total
            c[2] += 1
            if timing == PaneInfoTiming.ON_TIME:
                c[3] += 1
                lag = now - end
                if wi not in REC.first_lag or lag < REC.first_lag[wi]:
                    REC.first_lag[wi] = lag
                REC.last_lag[wi] = max(REC.last_lag.get(wi, -1), lag)
            elif timing == PaneInfoTiming.EARLY:
                c[4] += 1
            elif timing == PaneInfoTiming.LATE:
                c[5] += 1
            else:
                c[6] += 1


class Quiet(beam.DoFn):
    ACC = userstate.ReadModifyWriteStateSpec("acc", TupleCoder([VarIntCoder()] * 4))
    TIMER = userstate.TimerSpec("quiet", userstate.TimeDomain.REAL_TIME)

    def process(self, kv, acc=beam.DoFn.StateParam(ACC), timer=beam.DoFn.TimerParam(TIMER)):
        key, i = kv
        count, total, last, old_due = acc.read() or (0, 0, 0, 0)
        now = Timestamp.now()
        if count and i - last > QUIET_MS:
            # a quiet period went by without a fire: note how long it really was
            with REC.mu:
                REC.joined[(int(key[1:]), last)] = now.micros // 1000 - (old_due - QUIET_MS)
        due = now + Duration(micros=QUIET_MS * 1000)
        timer.set(due)
        acc.write((count + 1, total + i, max(last, i), due.micros // 1000))

    @userstate.on_timer(TIMER)
    def fire(self, key=beam.DoFn.KeyParam, acc=beam.DoFn.StateParam(ACC)):
        now = int(time.time() * 1000)
        a = acc.read()
        count, total, last, due = a or (0, 0, 0, 0)
        with REC.mu:
            REC.fires.append((int(key[1:]), count, total, last, now - due if a else None, now))
        acc.clear()
        return []


def pct(v, p):
    if not v:
        return -1
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100.0 * (len(v) - 1) + 0.5))]


def check(rec):
    rep = {"windows": 0, "window_keys": 0, "window_mismatches": 0, "early_panes": 0, "late_panes": 0}
    n_windows = rec.n // WINDOW_MS
    for w in range(n_windows):
        want = {}
        for i in range(w * WINDOW_MS, (w + 1) * WINDOW_MS):
            c = want.setdefault(key_of(i), [0, 0])
            c[0] += 1
            c[1] += i
        bad = False
        for k in range(KEYS):
            got = rec.cells.get((w, k), [0, 0, 0, 0, 0, 0, 0])
            exp = want.get(k, [0, 0])
            has = exp[0] > 0
            if got[0] != exp[0] or got[1] != exp[1] or got[3] != (1 if has else 0) or got[6] or (
                not has and got[2]
            ):
                if rep["window_mismatches"] < 5:
                    print("soak: window %d key k%03d: got %s, want %s" % (w, k, got, exp), file=sys.stderr)
                bad = True
            rep["window_keys"] += has
            rep["early_panes"] += got[4]
            rep["late_panes"] += got[5]
        rep["window_mismatches"] += bad
        rep["windows"] += 1
    lags = [rec.first_lag[w] for w in range(n_windows) if w in rec.first_lag]
    rep["wm_lag_p50_ms"] = pct(lags, 50)
    rep["wm_lag_p99_ms"] = pct(lags, 99)
    rep["wm_lag_max_ms"] = max(lags) if lags else -1
    rep["on_time_last_max_ms"] = max(rec.last_lag.values()) if rec.last_lag else -1

    # The timers (the rules of tools/soak.c's check_fires): each fire holds exactly the key's
    # elements since its previous fire; every designed quiet period ends in a fire; no fire
    # before its due time or with empty state; fires beyond the quiet periods (the job stalled
    # longer than QUIET_MS) are counted as extra.
    mism = 0
    fires = {}
    for f in rec.fires:
        if f[1] == 0 or f[4] is None or f[4] < 0:
            mism += 1
            if mism <= 5:
                print("soak: timer of k%03d fired %s" % (f[0], "with empty state" if not f[1] else "before its due time"), file=sys.stderr)
        if f[1] > 0:
            fires.setdefault(f[0], []).append(f)
    for v in fires.values():
        v.sort(key=lambda f: f[3])
    nxt = {k: 0 for k in fires}
    open_ = {}  # key -> [count, sum, last]
    closed = set()
    expected = extra = joined = 0
    for i in range(rec.n + 1):
        ks = [key_of(i)] if i < rec.n else range(KEYS)
        for k in ks:
            a = open_.get(k)
            if a and (i == rec.n or i - a[2] > QUIET_MS):
                expected += 1
                gap = rec.joined.get((k, a[2])) if i < rec.n else None
                if k not in closed and gap is not None and gap < QUIET_MS:
                    joined += 1
                elif k not in closed:
                    mism += 1
                    if mism <= 5:
                        print("soak: no timer fired for k%03d after element %d" % (k, a[2]), file=sys.stderr)
        if i == rec.n:
            break
        k = key_of(i)
        a = open_.get(k)
        if k in closed:
            if a and i - a[2] <= QUIET_MS:
                extra += 1
            closed.discard(k)
            a = None
        if not a:
            a = open_[k] = [0, 0, 0]
        a[0] += 1
        a[1] += i
        a[2] = i
        fl = fires.get(k, [])
        j = nxt.get(k, 0)
        while j < len(fl) and fl[j][3] < i:
            mism += 1  # a fire whose last element is none of this key's
            j += 1
        if j < len(fl) and fl[j][3] == i:
            if fl[j][1] != a[0] or fl[j][2] != a[1]:
                mism += 1
                if mism <= 5:
                    print("soak: timer of k%03d at element %d held %d (sum %d), want %d (sum %d)" % (k, i, fl[j][1], fl[j][2], a[0], a[1]), file=sys.stderr)
            j += 1
            closed.add(k)
        nxt[k] = j
    for k, fl in fires.items():
        mism += len(fl) - nxt.get(k, 0)
    late = [f[4] for f in rec.fires if f[4] is not None]
    rep.update(
        fires_expected=expected,
        fires_seen=len(rec.fires),
        fires_extra=extra,
        fires_joined=joined,
        fire_mismatches=mism,
        lateness_p50_ms=pct(late, 50),
        lateness_p99_ms=pct(late, 99),
        lateness_max_ms=max(late) if late else -1,
    )
    return rep


def build(p, t0, n, early=True):
    src = p | beam.Impulse() | "N" >> beam.Map(lambda _, n=n: n) | "Source" >> beam.ParDo(Source(t0, n))
    (
        src
        | "Window"
        >> beam.WindowInto(
            # The offset in whole microseconds: as float seconds it is 1 µs short for about 2 %
            # of the values (1.001 s becomes 1,000,999 µs), and no pane then lands on a window
            # of the check.
            window.FixedWindows(WINDOW_MS // 1000, offset=Timestamp(micros=(t0 % WINDOW_MS) * 1000)),
            trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(EARLY_S) if early else None),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | "Group" >> beam.GroupByKey()
        | "Panes" >> beam.ParDo(Panes())
    )
    _ = src | "Quiet" >> beam.ParDo(Quiet())


def progress(rec, stop):
    while not stop.wait(10):
        with rec.mu:
            late = [f[4] for f in rec.fires if f[4] is not None]
            print(
                "soak: t=%ds emitted %d, grouped %d, fires %d (worst %d ms)"
                % ((time.time() * 1000 - rec.t0) // 1000, rec.emitted, rec.grouped, len(rec.fires), max(late or [-1])),
                file=sys.stderr,
                flush=True,
            )


def main(argv):
    global REC
    ap = argparse.ArgumentParser()
    ap.add_argument("--job_endpoint", required=True)
    ap.add_argument("--seconds", type=int, default=100)
    ap.add_argument("--summary")
    ap.add_argument("--fires", help="write each fire's wall time and lateness (ms) here")
    ap.add_argument("--runner_name", default="sundial")
    ap.add_argument("--early-off", action="store_true", help="no early firings (Prism's panic)")
    ap.add_argument(
        "--state_cache_mb",
        type=int,
        default=0,
        help="the SDK's state cache (--max_cache_memory_usage_mb; 0: Beam's default, none)",
    )
    args = ap.parse_args(argv)
    n = (args.seconds * 1000 + CYCLE_MS - 1) // CYCLE_MS * CYCLE_MS
    t0 = int(time.time() * 1000) + 8000  # the Python job takes a few seconds to start
    REC = Record(t0, n)
    opts = PipelineOptions(
        [
            "--runner=PortableRunner",
            "--job_endpoint=" + args.job_endpoint,
            "--environment_type=LOOPBACK",
            "--streaming",
            # Beam's PortableRunner puts this deadline (default 300 s) on the job's state and
            # message streams, which ends any longer job with DEADLINE_EXCEEDED.
            "--job_server_timeout=%d" % (args.seconds + 3600),
        ]
        + (["--max_cache_memory_usage_mb=%d" % args.state_cache_mb] if args.state_cache_mb else [])
    )
    stop = threading.Event()
    th = threading.Thread(target=progress, args=(REC, stop), daemon=True)
    th.start()
    error = ""
    try:
        p = beam.Pipeline(options=opts)
        build(p, t0, n, early=not args.early_off)
        res = p.run()
        res.wait_until_finish()
        state = str(res.state)
        if "DONE" not in state:
            error = "the job ended " + state
    except Exception as e:  # the job failed: report it in the summary
        error = "the job failed: %s" % str(e).splitlines()[0][:200] if str(e) else repr(e)
    stop.set()
    if args.fires:
        with open(args.fires, "w") as f:
            for fr in REC.fires:
                if fr[4] is not None:
                    f.write("%d %d\n" % (fr[5], fr[4]))
    rep = check(REC)
    exact = (
        not error
        and rep["window_mismatches"] == 0
        and rep["fire_mismatches"] == 0
        and rep["late_panes"] == 0
        and REC.outside == 0
        and REC.grouped == n
    )
    out = dict(sdk="python", runner=args.runner_name, elements=REC.emitted, grouped=REC.grouped)
    out.update(rep)
    out.update(exact=exact, error=error)
    line = json.dumps(out)
    print(line)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(line + "\n")
    return 0 if exact else 1


if __name__ == "__main__":
    # Run as the module "soak", so the DoFns pickle by reference and the LOOPBACK workers
    # (threads of this process) record into this module's REC.
    import soak as _soak

    sys.exit(_soak.main(sys.argv[1:]))
