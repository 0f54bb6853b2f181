"""A Sundial job's time trace, fetched after ``run()``.

Sundial records every move of a job's time: clock moves, watermark steps, holds, timers set,
cleared and fired, panes, TestStream events, late elements (docs/trace.md). A job server
keeps the trace of each job it ran and serves it as the job artifact
``sundial:artifact:trace:v1`` (``ArtifactRetrievalService.GetArtifact`` on the job port, the
job id as its payload): JSON lines, one record a line.

    result = pipeline.run()
    result.wait_until_finish()
    records = sundial_beam.fetch_trace(result)
    panes = [r for r in records if r["kind"] == "pane"]

Wall times (``"wall"``) are left out unless asked for: what remains is the same for two runs
of the same test job, so traces can be compared with ``==`` (or ``sundialctl trace --diff``).
"""

import json
from typing import Any, Dict, List, Optional

TRACE_URN = "sundial:artifact:trace:v1"


def _endpoint_of(result: Any, endpoint: Optional[str]) -> str:
    if endpoint:
        return endpoint
    from sundial_beam.runner import started_endpoints

    started = started_endpoints()
    if not started:
        raise ValueError(
            "fetch_trace: no endpoint given and this process started no Sundial job server "
            "(pass endpoint='HOST:PORT', the job server the pipeline ran on)")
    return started[-1]


def fetch_trace_lines(result: Any = None, endpoint: Optional[str] = None,
                      job_id: Optional[str] = None) -> List[str]:
    """The job's trace as the server sends it: JSON lines (wall times included).

    ``result`` is what ``Pipeline.run()`` returned (its job id is used), or give ``job_id``.
    ``endpoint`` is the job server (``HOST:PORT``); by default the last one SundialRunner
    started in this process.
    """
    import grpc
    from apache_beam.portability.api import (beam_artifact_api_pb2, beam_artifact_api_pb2_grpc,
                                             beam_runner_api_pb2)

    jid = job_id if job_id is not None else getattr(result, "_job_id", None)
    if not jid:
        raise ValueError("fetch_trace: pass the result of Pipeline.run() or a job_id")
    target = _endpoint_of(result, endpoint)
    request = beam_artifact_api_pb2.GetArtifactRequest(
        artifact=beam_runner_api_pb2.ArtifactInformation(
            type_urn=TRACE_URN, type_payload=str(jid).encode("utf-8")))
    with grpc.insecure_channel(target) as channel:
        stub = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(channel)
        data = b"".join(chunk.data for chunk in stub.GetArtifact(request, timeout=60))
    return [line for line in data.decode("utf-8").split("\n") if line]


def fetch_trace(result: Any = None, endpoint: Optional[str] = None,
                job_id: Optional[str] = None, wall: bool = False,
                kind: Optional[str] = None, stage: Optional[str] = None) -> List[Dict[str, Any]]:
    """The job's trace records as dicts, in record order.

    ``wall=False`` (the default) drops each record's wall time, leaving what is deterministic.
    ``kind`` (a kind or a comma-separated list: ``"wm_out,pane"``) and ``stage`` (a stage id)
    keep only the matching records.
    """
    kinds = set(kind.split(",")) if kind else None
    out = []
    for line in fetch_trace_lines(result, endpoint, job_id):
        rec = json.loads(line)
        if not wall:
            rec.pop("wall", None)
        if kinds is not None and rec.get("kind") not in kinds:
            continue
        if stage is not None and rec.get("stage") != stage:
            continue
        out.append(rec)
    return out
