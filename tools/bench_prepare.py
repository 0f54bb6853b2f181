#!/usr/bin/env python3
"""tools/bench_prepare.py: how a very large Prepare treats the rest of the server.

    BUILD/py/bin/python tools/bench_prepare.py BUILD/bin/sundial [N ...]

For each N (default 20000 and 1000000) it starts the runner on a loopback ephemeral port, builds
a chain Impulse -> N ParDo transforms (Beam's protos from the installed SDK), sends it with
Prepare and then Run (the external environment's worker pool is not served, so the job fails once
planned) while a second client calls GetJobs every 20 ms, and prints, per N: the pipeline's size, how long
Prepare and Run took and what they answered, the slowest GetJobs answer meanwhile, and how long
the server took to exit after SIGTERM sent while a second such Prepare was in flight. Extra
server flags can be given in SUNDIAL_FLAGS.
"""
import os
import signal
import subprocess
import sys
import threading
import time

import grpc
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc
from apache_beam.portability.api import beam_runner_api_pb2

MAX_MSG = 1 << 30


def chain(n):
    p = beam_runner_api_pb2.Pipeline()
    c = p.components
    c.coders["bytes"].spec.urn = "beam:coder:bytes:v1"
    c.windowing_strategies["global"].window_fn.urn = "beam:window_fn:global_windows:v1"
    c.windowing_strategies["global"].window_coder_id = "gw"
    c.coders["gw"].spec.urn = "beam:coder:global_window:v1"
    env = c.environments["env"]
    env.urn = "beam:env:external:v1"
    # A worker pool nobody serves (port 1 on loopback): Prepare accepts the environment, and
    # the job fails once planned, when no worker comes.
    ext = beam_runner_api_pb2.ExternalPayload()
    ext.endpoint.url = "127.0.0.1:1"
    env.payload = ext.SerializeToString()
    def pcoll(name):
        pc = c.pcollections[name]
        pc.unique_name = name
        pc.coder_id = "bytes"
        pc.windowing_strategy_id = "global"
        pc.is_bounded = beam_runner_api_pb2.IsBounded.BOUNDED
    pcoll("pc0")
    imp = c.transforms["t0"]
    imp.unique_name = "Impulse"
    imp.spec.urn = "beam:transform:impulse:v1"
    imp.outputs["out"] = "pc0"
    p.root_transform_ids.append("t0")
    payload = beam_runner_api_pb2.ParDoPayload()
    payload.do_fn.urn = "beam:dofn:pickled_python_info:v1"
    payload.do_fn.payload = b"x" * 16
    pbytes = payload.SerializeToString()
    for i in range(1, n + 1):
        pcoll("pc%d" % i)
        t = c.transforms["t%d" % i]
        t.unique_name = "Map%d" % i
        t.spec.urn = "beam:transform:pardo:v1"
        t.spec.payload = pbytes
        t.environment_id = "env"
        t.inputs["in"] = "pc%d" % (i - 1)
        t.outputs["out"] = "pc%d" % i
        p.root_transform_ids.append("t%d" % i)
    return p


def start(binary):
    flags = os.environ.get("SUNDIAL_FLAGS", "").split()
    proc = subprocess.Popen([binary, "serve", "--port", "0"] + flags, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline().split()
    return proc, line[-1]


def stub(addr):
    ch = grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", MAX_MSG),
                                              ("grpc.max_receive_message_length", MAX_MSG)])
    return beam_job_api_pb2_grpc.JobServiceStub(ch)


def answer(e):
    return "%s: %s" % (e.code().name, e.details()[:300])


def prepare(js, p, out, run=False):
    t0 = time.monotonic()
    try:
        r = js.Prepare(beam_job_api_pb2.PrepareJobRequest(pipeline=p, job_name="big"),
                       timeout=120)
        out["answer"] = "OK"
    except grpc.RpcError as e:
        out["answer"] = answer(e)
        out["secs"] = time.monotonic() - t0
        return
    out["secs"] = time.monotonic() - t0
    if run:
        out["phase"] = "run"
        t0 = time.monotonic()
        try:
            js.Run(beam_job_api_pb2.RunJobRequest(preparation_id=r.preparation_id), timeout=120)
            out["run"] = "OK"
        except grpc.RpcError as e:
            out["run"] = answer(e)
        out["run_secs"] = time.monotonic() - t0


def one(binary, n):
    p = chain(n)
    size = p.ByteSize()
    proc, addr = start(binary)
    js, poll = stub(addr), stub(addr)
    res, worst = {}, {"prepare": 0.0, "run": 0.0}
    th = threading.Thread(target=prepare, args=(js, p, res, True))
    th.start()
    while th.is_alive():
        phase = res.get("phase", "prepare")
        t0 = time.monotonic()
        try:
            poll.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30)
        except grpc.RpcError:
            pass
        worst[phase] = max(worst[phase], time.monotonic() - t0)
        time.sleep(0.02)
    th.join()
    # SIGTERM while another such Prepare is in flight.
    res2 = {}
    th = threading.Thread(target=prepare, args=(js, p, res2))
    th.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
        term = "%.2f s" % (time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        proc.kill()
        term = "> 30 s (killed)"
    th.join()
    run = ""
    if "run" in res:
        run = "; Run %.2f s (%s)" % (res["run_secs"], res["run"])
    print("N=%d transforms, %.1f MiB: Prepare %.2f s (%s)%s; slowest GetJobs during Prepare "
          "%.3f s, during Run %.3f s; SIGTERM -> exit %s"
          % (n, size / 1048576.0, res["secs"], res["answer"], run, worst["prepare"],
             worst["run"], term), flush=True)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    sizes = [int(a) for a in sys.argv[2:]] or [20000, 1000000]
    for n in sizes:
        one(sys.argv[1], n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
