"""sundial_beam.control against a stand-in for the server's JSON API (loopback, any port): the
requests it makes, the action header on changes, the server's refusals as ControlError, and
a step that waits until the job rests. (tests/integration/pause_timeout_check.py runs it
against the real runner.)"""

import datetime
import http.server
import json
import threading
import urllib.parse
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from sundial_beam.control import ControlError, JobController, _duration, _time


class _Api(http.server.BaseHTTPRequestHandler):
    seen: List[Tuple[str, str, bool]] = []
    polls = 0

    def _answer(self, code: int, doc: Dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        _Api.seen.append(("GET", self.path, False))
        if self.path.startswith("/api/jobs/job-1/pause"):
            _Api.polls += 1
            self._answer(200, {"state": "RUNNING", "at_rest": _Api.polls >= 3,
                               "stages": [{"id": "s1"}]})
        elif self.path.startswith("/api/jobs/job-1/state"):
            self._answer(200, {"cells": [{"state_id": "count", "value_hex": "02"},
                                         {"state_id": "user", "value_hex": "05616c696365"}]})
        else:
            self._answer(404, {"error": "state: no stage \"x\""})

    def do_POST(self) -> None:  # noqa: N802
        action = self.headers.get("X-Sundial-Action") == "1"
        _Api.seen.append(("POST", self.path, action))
        if "for=soon" in self.path:
            self._answer(400, {"error": "step: for=soon is not a duration"})
        else:
            self._answer(200, {"state": "RUNNING", "at_rest": False})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    _Api.seen = []
    _Api.polls = 0
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Api)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d/" % srv.server_address[1]
    srv.shutdown()


def test_formats() -> None:
    assert _duration("59m") == "59m"
    assert _duration(90) == "90000ms"
    assert _duration(datetime.timedelta(minutes=2)) == "120000ms"
    assert _time("+5m") == "+5m"
    assert _time(1.5) == "1500"


def test_step_waits_and_sends_the_action_header(api: str) -> None:
    job = JobController(api, "job-1", timeout=10)
    st = job.step(duration="59m")
    assert st["at_rest"] is True
    posts = [s for s in _Api.seen if s[0] == "POST"]
    assert len(posts) == 1 and posts[0][2], posts
    assert urllib.parse.urlparse(posts[0][1]).query == "for=59m"
    assert _Api.polls >= 3


def test_refusals_carry_the_servers_message(api: str) -> None:
    job = JobController(api, "job-1", timeout=10)
    with pytest.raises(ControlError, match="HTTP 400: step: for=soon is not a duration"):
        job.step(duration="soon")
    with pytest.raises(ControlError, match="HTTP 404"):
        job.timers("x")


def test_state_filters_and_decodes(api: str) -> None:
    class Two:  # a coder-like object: one varint-free byte per value
        def get_impl(self) -> Any:
            return self

        def decode_from_stream(self, stream: Any, nested: bool) -> int:
            return int(stream.read_byte())

    job = JobController(api, "job-1", timeout=10)
    assert [c["state_id"] for c in job.state("s1")] == ["count", "user"]
    assert job.state("s1", key="alice", state_id="count", coder=Two()) == [[2]]
