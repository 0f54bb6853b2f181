"""Pause, step and inspect a Sundial job from a test (the runner's HTTP JSON control API).

A job on Sundial's synthetic clock can rest at quiescence: nothing runs, no TestStream event
is played and the clock does not move until the test steps it. ``paused`` runs a pipeline that
way and yields a ``JobController``::

    from sundial_beam.control import paused

    with paused(pipeline, web_url) as job:          # the job starts paused
        job.step(duration="59m")                    # time moves by the job's own events only
        assert job.state("Sessionize", key="alice", state_id="count",
                         coder=VarIntCoder()) == [[2]]
        job.step(duration="2m")                     # the 60-minute timeout fires
        assert job.elements("Out") == [...]
    # leaving the block resumes the job and waits for its end

``web_url`` is the server's web UI (``sundial serve --web_port 0`` prints it on its second
line). Changing calls carry the ``X-Sundial-Action`` header the server asks for; the server
answers only on loopback unless it was told otherwise. Only the standard library is used here.
"""

import contextlib
import datetime
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterator, List, Optional, Union

Duration = Union[str, int, float, datetime.timedelta]

_TERMINAL = ("DONE", "FAILED", "CANCELLED", "DRAINED", "UPDATED")


class ControlError(RuntimeError):
    """The server refused a control call; the message is the server's."""


def _duration(d: Duration) -> str:
    """'59m' stays; numbers are seconds; timedeltas become milliseconds."""
    if isinstance(d, datetime.timedelta):
        return "%dms" % int(d.total_seconds() * 1000)
    if isinstance(d, (int, float)):
        return "%dms" % int(d * 1000)
    return str(d)


def _time(t: Union[str, int, float, datetime.datetime]) -> str:
    """RFC 3339 strings and '+DURATION' stay; datetimes and numbers (seconds) become ms."""
    if isinstance(t, datetime.datetime):
        return str(int(t.timestamp() * 1000))
    if isinstance(t, (int, float)):
        return str(int(t * 1000))
    return str(t)


class JobController:
    """One job's control surface: /api/jobs/ID/{pause,step,resume,timers,state,elements}."""

    def __init__(self, web_url: str, job_id: str, timeout: float = 120.0):
        self.base = web_url.rstrip("/") + "/api/jobs/" + urllib.parse.quote(job_id, safe="")
        self.job_id = job_id
        self.timeout = timeout

    # ------------------------------------------------------------------ transport
    def _call(self, method: str, action: str, **params: Any) -> Dict[str, Any]:
        q = {k: v for k, v in params.items() if v is not None}
        url = self.base + "/" + action + ("?" + urllib.parse.urlencode(q) if q else "")
        req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        if method == "POST":
            req.add_header("X-Sundial-Action", "1")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                doc: Dict[str, Any] = json.loads(resp.read().decode("utf-8"))
                return doc
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", "replace")
            try:
                msg = json.loads(body).get("error", body)
            except ValueError:
                msg = body
            raise ControlError("%s %s: HTTP %d: %s" % (method, action, e.code, msg)) from None

    # ------------------------------------------------------------------ the gate
    def status(self) -> Dict[str, Any]:
        """The gate, the job clock and every stage's watermarks, hold and timer counts."""
        return self._call("GET", "pause")

    def wait_at_rest(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Until the job rests at the gate (or has ended); the status then."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            st = self.status()
            if st.get("at_rest") or st.get("state") in _TERMINAL:
                return st
            if time.monotonic() > deadline:
                raise TimeoutError("job %s did not come to rest: %s" % (self.job_id, st))
            time.sleep(0.02)

    def pause(self, at: Optional[Union[str, int, float, datetime.datetime]] = None,
              before_event: bool = False, wait: bool = True) -> Dict[str, Any]:
        """Pause now, or before the clock passes ``at``, or before the next TestStream event."""
        self._call("POST", "pause", at=_time(at) if at is not None else None,
                   before="event" if before_event else None)
        return self.wait_at_rest() if wait and at is None and not before_event else self.status()

    def step(self, events: Optional[int] = None, duration: Optional[Duration] = None,
             watermark: Optional[Union[str, int, float]] = None,
             pcollection: Optional[str] = None, wait: bool = True) -> Dict[str, Any]:
        """One step: the next ``events`` time steps (default 1), or those within ``duration``
        of processing time, or those taken while ``pcollection``'s watermark is behind
        ``watermark``. Waits until the job rests again (or ends) unless ``wait`` is False."""
        if duration is not None:
            self._call("POST", "step", **{"for": _duration(duration)})
        elif watermark is not None:
            self._call("POST", "step", watermark=_time(watermark), pcollection=pcollection)
        else:
            self._call("POST", "step", events=events or 1)
        return self.wait_at_rest() if wait else self.status()

    def resume(self) -> Dict[str, Any]:
        return self._call("POST", "resume")

    # ------------------------------------------------------------------ inspection
    def stages(self) -> List[Dict[str, Any]]:
        """Each stage's id, name, kind, input and output watermarks, hold, pending counts."""
        stages: List[Dict[str, Any]] = self.status()["stages"]
        return stages

    def timers(self, stage: Optional[str] = None) -> List[Dict[str, Any]]:
        """The stored timers (of one stage: its id or a transform name in it)."""
        timers: List[Dict[str, Any]] = self._call("GET", "timers", stage=stage)["timers"]
        return timers

    def state(self, stage: str, key: Optional[Any] = None, key_hex: Optional[str] = None,
              state_id: Optional[str] = None, coder: Any = None) -> List[Any]:
        """User state cells of ``stage`` (all keys, or one given readable or as nested hex;
        all state ids, or one). With a Beam ``coder`` each cell's values are decoded (a list
        per cell); without, the raw cells (dicts with key, state_id, value_hex, ...)."""
        readable = None
        if key is not None:
            readable = key if isinstance(key, str) else json.dumps(key, separators=(",", ":"))
        cells: List[Any] = self._call("GET", "state", stage=stage, key=readable,
                                      key_hex=key_hex)["cells"]
        if state_id is not None:
            cells = [c for c in cells if c["state_id"] == state_id]
        if coder is None:
            return cells
        return [_decode_all(coder, bytes.fromhex(c["value_hex"])) for c in cells]

    def elements(self, pcollection: str, raw: bool = False) -> List[Any]:
        """What has been delivered into ``pcollection`` (its id or its name) so far: readable
        values, or the raw records (value, hex, timestamp, window) with raw=True."""
        got = self._call("GET", "elements", pcollection=pcollection)["elements"]
        return got if raw else [e["value"] for e in got]


def _decode_all(coder: Any, data: bytes) -> List[Any]:
    from apache_beam.coders.coder_impl import create_InputStream  # Beam is the caller's
    impl = coder.get_impl()
    stream = create_InputStream(data)
    out = []
    while stream.size() > 0:
        out.append(impl.decode_from_stream(stream, True))
    return out


@contextlib.contextmanager
def paused(pipeline: Any, web_url: str, timeout: float = 120.0) -> Iterator[JobController]:
    """Run ``pipeline`` paused from its start (``--sundial_pause=start``) and yield its
    controller, at rest. On leaving the block the job is resumed and waited for; the result
    is then ``controller.result``."""
    from sundial_beam.options import SundialOptions
    pipeline.options.view_as(SundialOptions).sundial_pause = "start"
    result = pipeline.run()
    job_id = getattr(result, "_job_id", None) or getattr(result, "job_id", None)
    if not job_id:
        raise ControlError("the runner's result names no job id (run on Sundial's job server)")
    ctl = JobController(web_url, job_id, timeout)
    ctl.result = result  # type: ignore[attr-defined]
    ctl.wait_at_rest()
    try:
        yield ctl
    finally:
        try:
            if ctl.status().get("state") not in _TERMINAL:
                ctl.resume()
        finally:
            result.wait_until_finish(duration=int(timeout * 1000))
