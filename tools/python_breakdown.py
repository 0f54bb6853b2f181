#
# tools/python_breakdown.py - where one Beam Python `with TestPipeline(...)` block spends its
# time, on Sundial, on Prism (both reached through Beam's PrismRunner) and on the SDK's
# in-process FnApiRunner. Run it with tools/python_breakdown.sh BUILD (its knobs are listed there).
#
# Each round is a fresh Python process per runner (rounds interleaved: sundial, prism, fnapi,
# sundial, ...). The child imports apache_beam, then hooks the SDK's own functions (nothing of
# the SDK is changed: its functions are wrapped in this process only) and runs BLOCKS blocks,
# the same pipeline as tools/bench_python.py's first_pipeline (Create of three elements, a Map,
# assert_that). Every hook records (wall time, thread, the thread's CPU time), so each step has
# a wall span and the CPU its own thread spent in it; the process's CPU (every thread) and the
# runner process's CPU (every thread, from /proc/PID/task/*/schedstat) are read per block, and
# the time spent in `import` statements the block triggered (lazy imports) is summed.
#
# Printed per runner and block: the median over rounds of each step (wall ms, own-thread CPU
# ms), then the median totals. With --profile the child also runs the main thread of the chosen
# block under cProfile and prints the top functions by cumulative time (relative figures: the
# machine may be loaded; cProfile roughly doubles pure-Python work).
#
# Steps (main thread unless marked):
#   build            TestPipeline(...) and applying the transforms, up to Pipeline.run
#   options_check    Pipeline.run's get_all_options (every runner)
#   runner_api_trip  TestPipeline's to_runner_api/from_runner_api round trip (every runner)
#   to_proto         PipelineRunner.run_pipeline: visitor + to_runner_api (portable runners)
#   worker_pool      starting the LOOPBACK worker pool's gRPC server (portable runners)
#   optimize         PortableRunner._optimize_pipeline (pack/lift combiners, sort stages)
#   job_server       create_job_service: the first block starts the binary and waits for the
#                    channel; later ones reuse it
#   describe_options DescribePipelineOptions RPC and the options' encoding (argparse again)
#   prepare_rpc      Prepare RPC (pipeline bytes to the runner, its answer)
#   stage            artifact staging (skipped when Prepare offers no endpoint)
#   run_rpcs         GetStateStream + first state, GetMessageStream, Run
#   wait             wait_until_finish up to the terminal state, then its cleanup
#   fnapi_*          FnApiRunner: run_via_runner_api's stages (create_stages, run_stages)
# Worker-side events (other threads) are shown relative to the Run RPC's answer: StartWorker
# received, control channel ready, first instruction, descriptor fetched, bundle processor
# built, each bundle's process_bundle, the last response.
#
import json
import os
import statistics
import subprocess
import sys
import threading
import time

KINDS = ("sundial", "prism", "fnapi")


def runner_args(kind, binary):
  if kind == "fnapi":
    return ["--runner=FnApiRunner"]
  return ["--runner=PrismRunner", "--prism_location=" + binary]


# ------------------------------------------------------------------------------ the child


class Recorder:
  def __init__(self):
    self.events = []  # (wall s, thread name, label, thread cpu s)
    self.lock = threading.Lock()
    self.import_s = 0.0
    self.local = threading.local()

  def mark(self, label):
    ev = (time.time(), threading.current_thread().name, label, time.thread_time())
    with self.lock:
      self.events.append(ev)

  def take(self):
    with self.lock:
      ev, self.events = self.events, []
      imp, self.import_s = self.import_s, 0.0
    return ev, imp


REC = Recorder()


def wrap(owner, name, label, after=None):
  """Replace owner.name by a function that marks label> and label< around the call."""
  import inspect
  raw = inspect.getattr_static(owner, name)
  is_static = isinstance(raw, staticmethod)
  is_class = isinstance(raw, classmethod)
  orig = raw.__func__ if (is_static or is_class) else raw

  def wrapper(*a, **k):
    REC.mark(label + ">")
    try:
      out = orig(*a, **k)
      if after is not None:
        after(a, k, out)
      return out
    finally:
      REC.mark(label + "<")

  wrapper.__name__ = getattr(orig, "__name__", name)
  wrapper.__wrapped__ = orig
  if is_static:
    wrapper = staticmethod(wrapper)
  elif is_class:
    wrapper = classmethod(wrapper)
  setattr(owner, name, wrapper)


def hook_imports():
  import builtins
  orig = builtins.__import__
  local = REC.local

  def imp(*a, **k):
    depth = getattr(local, "depth", 0)
    if depth:
      local.depth = depth + 1
      try:
        return orig(*a, **k)
      finally:
        local.depth = depth
    local.depth = 1
    t0 = time.perf_counter()
    try:
      return orig(*a, **k)
    finally:
      local.depth = 0
      if threading.current_thread() is threading.main_thread():
        REC.import_s += time.perf_counter() - t0

  builtins.__import__ = imp


def install_hooks():
  from apache_beam import pipeline as pl
  from apache_beam.options import pipeline_options as po
  from apache_beam.runners import runner as rn
  from apache_beam.runners.portability import portable_runner as pr
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  from apache_beam.runners.worker import bundle_processor as bp
  from apache_beam.runners.worker import data_plane
  from apache_beam.runners.worker import sdk_worker
  from apache_beam.runners.worker import worker_pool_main as wp
  from apache_beam.utils import subprocess_server

  wrap(pl.Pipeline, "run", "pipeline_run")
  wrap(pl.Pipeline, "to_runner_api", "to_runner_api")
  wrap(pl.Pipeline, "from_runner_api", "from_runner_api")
  wrap(po.PipelineOptions, "get_all_options", "get_all_options")
  wrap(rn.PipelineRunner, "run_pipeline", "runner_run_pipeline")
  wrap(pr.PortableRunner, "run_portable_pipeline", "run_portable")
  wrap(pr.PortableRunner, "start_and_replace_loopback_environments", "worker_pool")
  wrap(pr.PortableRunner, "_optimize_pipeline", "optimize")
  wrap(pr.PortableRunner, "create_job_service", "job_server")
  wrap(subprocess_server.SubprocessServer, "start", "binary_start")
  wrap(pr.JobServiceHandle, "get_pipeline_options", "describe_options")
  wrap(pr.JobServiceHandle, "prepare", "prepare")
  wrap(pr.JobServiceHandle, "stage", "stage")
  wrap(pr.JobServiceHandle, "run", "run_rpcs")
  wrap(pr.PipelineResult, "wait_until_finish", "wait")
  wrap(pr.PipelineResult, "_cleanup", "cleanup")
  orig_state = pr.PipelineResult.runner_api_state_to_pipeline_state

  def state_name(s):
    name = orig_state(s)
    REC.mark("state " + str(name))
    return name

  pr.PipelineResult.runner_api_state_to_pipeline_state = staticmethod(state_name)
  wrap(fn_runner.FnApiRunner, "run_pipeline", "fnapi_run_pipeline")
  wrap(fn_runner.FnApiRunner, "run_via_runner_api", "fnapi_run")
  wrap(fn_runner.FnApiRunner, "create_stages", "fnapi_create_stages")
  wrap(fn_runner.FnApiRunner, "run_stages", "fnapi_run_stages")
  # Worker side.
  wrap(wp.BeamFnExternalWorkerPoolServicer, "StartWorker", "StartWorker")
  wrap(sdk_worker.SdkHarness, "__init__", "harness_init")
  wrap(sdk_worker.SdkHarness, "run", "harness_run")
  wrap(sdk_worker.SdkHarness, "_request_process_bundle", "recv_process_bundle")
  wrap(sdk_worker.SdkHarness, "_request_register", "recv_register")
  wrap(sdk_worker.BundleProcessorCache, "get", "processor_get")
  wrap(sdk_worker.GrpcStateHandlerFactory, "create_state_handler", "state_handler")
  wrap(data_plane.GrpcClientDataChannelFactory, "create_data_channel_from_url", "data_channel")
  wrap(bp.BundleProcessor, "__init__", "processor_build")
  wrap(bp.BundleProcessor, "process_bundle", "process_bundle")
  wrap(sdk_worker.SdkWorker, "do_instruction", "instruction")


class RunnerLog:
  """The runner's log lines (PrismRunner hands them to the logger "PrismJobServer", with the
  time the runner stamped on each) as events of the thread "runner"."""
  def __init__(self):
    import logging
    self.level = logging.DEBUG

  def install(self):
    import logging

    class H(logging.Handler):
      def emit(self, record):
        msg = record.getMessage()
        with REC.lock:
          REC.events.append((record.created, "runner", "log " + msg[:110], 0.0))

    logging.getLogger("PrismJobServer").addHandler(H(level=logging.DEBUG))


def runner_pid(kind):
  """The runner process the SDK started, or None. Found by its job port (the SDK's cache of
  started servers holds the command line) among every process's command line: Sundial's
  launcher may have exited already (runner/detach.c), and the process with the most threads
  is the server (its janitor shares the command line)."""
  if kind == "fnapi":
    return None
  from apache_beam.utils import subprocess_server
  want = None
  for key in subprocess_server.SubprocessServer._cache._cache:
    cmd = [str(a) for a in key[0]]
    if "--job_port" in cmd:
      want = ["--job_port", cmd[cmd.index("--job_port") + 1]]
  best, best_threads = None, 0
  for d in os.listdir("/proc"):
    if not d.isdigit():
      continue
    try:
      with open("/proc/%s/cmdline" % d, "rb") as f:
        args = f.read().decode(errors="replace").split("\0")
      with open("/proc/%s/status" % d) as f:
        threads = int([l for l in f if l.startswith("Threads:")][0].split()[1])
    except (OSError, IndexError, ValueError):
      continue
    if want is None or not any(args[i:i + 2] == want for i in range(len(args) - 1)):
      continue
    if threads > best_threads:
      best, best_threads = int(d), threads
  return best


def task_cpu_ns(pid):
  """CPU time of every thread of pid, in ns (schedstat), or 0."""
  total = 0
  try:
    tasks = os.listdir("/proc/%d/task" % pid)
  except OSError:
    return 0
  for t in tasks:
    try:
      with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
        total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
      pass
  return total


def child(kind, binary, blocks, profile_block):
  t0 = time.perf_counter()
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions
  from apache_beam.testing.test_pipeline import TestPipeline
  from apache_beam.testing.util import assert_that, equal_to
  import_beam_s = time.perf_counter() - t0
  install_hooks()
  hook_imports()
  extra = []
  if os.environ.get("BREAKDOWN_RUNNER_LOG") and kind != "fnapi":
    RunnerLog().install()
    extra = ["--prism_log_level=debug"]
  out = {"import_beam_ms": import_beam_s * 1e3, "blocks": []}
  pid = None
  for i in range(blocks):
    prof = None
    if profile_block == i:
      import cProfile
      prof = cProfile.Profile()
    REC.take()
    r0 = task_cpu_ns(pid) if pid else 0
    c0 = time.process_time()
    REC.mark("block>")
    if prof:
      prof.enable()
    with TestPipeline(options=PipelineOptions(runner_args(kind, binary) + extra)) as p:
      assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x + 1), equal_to([2, 3, 4]))
    if prof:
      prof.disable()
    REC.mark("block<")
    c1 = time.process_time()
    if pid is None:
      pid = runner_pid(kind)
      r0 = 0  # the runner started in this block: all its CPU so far is this block's
    r1 = task_cpu_ns(pid) if pid else 0
    time.sleep(0.05)  # the worker's teardown after the block (background, reported apart)
    c2 = time.process_time()
    events, imp = REC.take()
    block = {
        "events": events,
        "import_ms": imp * 1e3,
        "process_cpu_ms": (c1 - c0) * 1e3,
        "after_cpu_ms": (c2 - c1) * 1e3,
        "runner_cpu_ms": (r1 - r0) / 1e6 if pid else None,
    }
    if prof:
      import io
      import pstats
      s = io.StringIO()
      pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
      block["profile"] = s.getvalue()
    out["blocks"].append(block)
  out["end"] = time.time()
  print("BREAKDOWN " + json.dumps(out), flush=True)
  # From here on: the interpreter's exit (atexit: the SDK stops the runner it started).


# ------------------------------------------------------------------------------ the parent


def first(events, label, thread=None, after=None):
  for t, th, lab, cpu in events:
    if lab == label and (thread is None or th == thread) and (after is None or t >= after):
      return t, cpu
  return None, None


def last(events, label, thread=None):
  found = (None, None)
  for t, th, lab, cpu in events:
    if lab == label and (thread is None or th == thread):
      found = (t, cpu)
  return found


def span(events, label, thread="MainThread", nth=0):
  """(wall ms, own-thread CPU ms) of the nth label>..label< pair on thread, or None."""
  seen = 0
  depth = 0
  start = None
  for t, th, lab, cpu in events:
    if th != thread:
      continue
    if lab == label + ">":
      if depth == 0:
        start = (t, cpu)
      depth += 1
    elif lab == label + "<" and depth > 0:
      depth -= 1
      if depth == 0:
        if seen == nth:
          return (t - start[0]) * 1e3, (cpu - start[1]) * 1e3
        seen += 1
  return None


def steps(block):
  """The main-thread steps of one block: [(name, wall ms, cpu ms)]."""
  ev = block["events"]
  out = []
  b0, c0 = first(ev, "block>", "MainThread")
  b1, c1 = first(ev, "block<", "MainThread")
  r0, rc0 = first(ev, "pipeline_run>", "MainThread")
  if r0 is not None:
    out.append(("build", (r0 - b0) * 1e3, (rc0 - c0) * 1e3))
  s = span(ev, "get_all_options", nth=0)
  if s:
    out.append(("options_check", *s))
  a = span(ev, "to_runner_api", nth=0)
  f = span(ev, "from_runner_api", nth=0)
  if a and f:
    out.append(("runner_api_trip", a[0] + f[0], a[1] + f[1]))
  # PipelineRunner.run_pipeline's to_runner_api is the second to_runner_api span.
  rp = span(ev, "runner_run_pipeline")
  rpp = span(ev, "run_portable")
  if rp and rpp:
    out.append(("to_proto", rp[0] - rpp[0], rp[1] - rpp[1]))
  frp = span(ev, "fnapi_run_pipeline")
  frr = span(ev, "fnapi_run")
  if frp and frr:
    out.append(("to_proto", frp[0] - frr[0], frp[1] - frr[1]))
  for name, label in (("worker_pool", "worker_pool"), ("optimize", "optimize"),
                      ("describe_options", "describe_options"), ("prepare_rpc", "prepare"),
                      ("stage", "stage"), ("run_rpcs", "run_rpcs")):
    s = span(ev, label)
    if s:
      out.append((name, *s))
  js = span(ev, "job_server")
  if js:
    out.append(("job_server", *js))
  w = span(ev, "wait", nth=0)
  if w:
    out.append(("wait", *w))
  for name in ("fnapi_create_stages", "fnapi_run_stages"):
    s = span(ev, name)
    if s:
      out.append((name, *s))
  fr = span(ev, "fnapi_run")
  if fr:
    inner = sum(x[1] for x in out if x[0].startswith("fnapi_"))
    innerc = sum(x[2] for x in out if x[0].startswith("fnapi_"))
    out.append(("fnapi_other", fr[0] - inner, fr[1] - innerc))
  total = ((b1 - b0) * 1e3, (c1 - c0) * 1e3)
  named = sum(x[1] for x in out)
  namedc = sum(x[2] for x in out)
  out.append(("rest (main thread)", total[0] - named, total[1] - namedc))
  out.append(("BLOCK", *total))
  return out


def worker_timeline(block):
  """Worker-side events relative to the Run RPC's end (ms), first occurrence each."""
  ev = block["events"]
  t_run, _ = last(ev, "run_rpcs<", "MainThread")
  if t_run is None:
    t_run, _ = first(ev, "fnapi_run>", "MainThread")
  if t_run is None:
    return []
  rows = []
  for label in ("StartWorker>", "harness_init<", "StartWorker<", "harness_run>",
                "recv_register>", "recv_process_bundle>", "processor_get>", "state_handler>",
                "state_handler<", "processor_build>", "data_channel>", "data_channel<",
                "processor_build<", "process_bundle>", "process_bundle<", "instruction<"):
    t, _ = first(ev, label)
    if t is not None:
      rows.append((label, (t - t_run) * 1e3))
  # Every bundle: start and end of process_bundle.
  n = 0
  for t, th, lab, cpu in ev:
    if lab == "process_bundle<":
      n += 1
      rows.append(("bundle %d done" % n, (t - t_run) * 1e3))
  for lab in ("state DONE", "cleanup>", "cleanup<", "block<"):
    t, _ = first(ev, lab)
    if t is not None:
      rows.append((lab, (t - t_run) * 1e3))
  for t, th, lab, cpu in ev:
    if th == "runner":
      rows.append((lab, (t - t_run) * 1e3))
  rows.sort(key=lambda x: x[1])
  return rows


def worker_cpu(block):
  """CPU ms spent in worker-side spans on their own threads: StartWorker (harness init),
  processor builds, process_bundle."""
  ev = block["events"]
  threads = {th for _, th, _, _ in ev}
  res = {}
  for label in ("StartWorker", "processor_get", "process_bundle"):
    tot_w = tot_c = 0.0
    for th in threads:
      k = 0
      while True:
        s = span(ev, label, thread=th, nth=k)
        if s is None:
          break
        tot_w += s[0]
        tot_c += s[1]
        k += 1
    res[label] = (tot_w, tot_c)
  return res


def med(xs):
  xs = [x for x in xs if x is not None]
  return statistics.median(xs) if xs else float("nan")


def main():
  if len(sys.argv) >= 2 and sys.argv[1] == "--child":
    child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    return
  sundial, prism = sys.argv[1], sys.argv[2]
  kinds = [k for k in os.environ.get("BREAKDOWN_KINDS", ",".join(KINDS)).split(",") if k]
  rounds = int(os.environ.get("BREAKDOWN_ROUNDS", "5"))
  blocks = int(os.environ.get("BREAKDOWN_BLOCKS", "3"))
  profile = int(os.environ.get("BREAKDOWN_PROFILE", "-1"))
  bins = {"sundial": sundial, "prism": prism}
  before = os.environ.get("BREAKDOWN_BEFORE", "")
  if before:  # an older sundial binary, as a column of its own, interleaved with the others
    bins["before"] = before
    if "before" not in kinds:
      kinds.insert(1, "before")
  print("python_breakdown: %s; %d rounds, %d blocks each; load average %.1f %.1f %.1f" % (
      ", ".join("%s=%s" % (k, bins.get(k, "in-process")) for k in kinds), rounds, blocks,
      *os.getloadavg()))
  res = {k: [] for k in kinds}
  for r in range(rounds):
    for k in kinds:
      cmd = [sys.executable, os.path.abspath(__file__), "--child", k, bins.get(k, ""),
             str(blocks), str(profile if r == 0 else -1)]
      p = subprocess.run(cmd, capture_output=True, text=True)
      ended = time.time()
      lines = [l for l in p.stdout.splitlines() if l.startswith("BREAKDOWN ")]
      if p.returncode != 0 or not lines:
        sys.exit("python_breakdown: %s failed:\n%s%s" % (k, p.stdout[-3000:], p.stderr[-3000:]))
      res[k].append(json.loads(lines[-1][len("BREAKDOWN "):]))
      res[k][-1]["exit_ms"] = (ended - res[k][-1]["end"]) * 1e3
  for k in kinds:
    runs = res[k]
    print("\n== %s: import apache_beam %.0f ms, process exit after the last block %.0f ms "
          "(medians)" % (k, med([x["import_beam_ms"] for x in runs]),
                         med([x["exit_ms"] for x in runs])))
    for b in range(blocks):
      per = [steps(x["blocks"][b]) for x in runs]
      names = [n for n, _, _ in per[0]]
      print("-- %s block %d: step, wall ms (median of %d), own-thread CPU ms" % (k, b + 1,
                                                                                 len(runs)))
      for n in names:
        ws = [dict((a, (w, c)) for a, w, c in s).get(n, (None, None)) for s in per]
        print("   %-20s %8.1f %8.1f" % (n, med([w for w, _ in ws]), med([c for _, c in ws])))
      blk = [x["blocks"][b] for x in runs]
      print("   %-20s %8.1f" % ("lazy imports", med([x["import_ms"] for x in blk])))
      print("   %-20s %8.1f" % ("process CPU", med([x["process_cpu_ms"] for x in blk])))
      print("   %-20s %8.1f" % ("runner CPU", med([x["runner_cpu_ms"] for x in blk])))
      print("   %-20s %8.1f" % ("CPU after block", med([x["after_cpu_ms"] for x in blk])))
      wc = [worker_cpu(x) for x in blk]
      for lab in ("StartWorker", "processor_get", "process_bundle"):
        print("   worker %-13s %8.1f %8.1f" % (lab, med([w[lab][0] for w in wc]),
                                                 med([w[lab][1] for w in wc])))
      # The timeline of the round whose block is the median.
      totals = sorted((steps(x)[-1][1], i) for i, x in enumerate(blk))
      mid = blk[totals[len(totals) // 2][1]]
      print("   timeline (ms after the Run RPC's answer; median round):")
      for lab, t in worker_timeline(mid):
        print("     %8.1f  %s" % (t, lab))
      if "profile" in blk[0]:
        print("   cProfile of the main thread (round 1):")
        print("\n".join("     " + l for l in blk[0]["profile"].splitlines()[:70]))
  sys.stdout.flush()


if __name__ == "__main__":
  main()
