"""Copy-path v3 benchmark, one run on one GPU; JSON lines on stdout.

  v3_bench.py interference [--mps] [--quick]   slowdown of the model's graph-captured work (a
      bf16 GEMM loop, a Llama-8B-shaped decode step) while a copier in another process moves
      512 MiB jobs: the plain-DMA floor, PyTorch's gather + copy, and kvoffload on every path
      (a daemon per path), for each layout. --mps: every process is a client of the MPS control
      daemon the caller started (run_on_device.sh's v3_mps stage); the rows say mps: true.
  v3_bench.py throughput [--quick]   GB/s of one job and of two jobs in flight, per layout,
      direction and path, against the same run's ceiling and the best PyTorch-only method
  v3_bench.py cpu [--quick]          the daemon's host CPU per job, 1 to 1M blocks, one run
      (and the same blocks as lists)
  v3_bench.py layout [--quick]       what layout buys at 4-64 KiB pages
  v3_bench.py reorder [--quick]      the worker-side reorder (kvoffload.StagedWorker, driven
      by v3_reorder.py): rate, and cost to the model from its own process against torch_staged
      in-process
  --paths=a,b (interference, throughput, layout): only these paths of PATHS (by name), e.g.
      --paths=default,page_dma for the 2D copies against the page-by-page copy engines

The orchestrator never touches CUDA (a child of a CUDA process must not use CUDA): the model,
the copier and the measuring processes are `v3_bench.py --role ...` children talking JSON lines
over pipes (v3_workloads.py). Env: KVOFFLOAD_DAEMON, KVOFFLOAD_LIB, PYTHONPATH with kvoffload.
Merge a run into docs/benchmarks.{json,md} with tests/bench/gpu/v3_report.py.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_BYTES = 512 << 20
INTERFERENCE_LAYOUTS = [("per_layer_32k", "random"), ("per_layer_32k", "consecutive"),
                        ("per_layer_4k", "random"), ("cross_layer_2m", "random")]
THROUGHPUT_LAYOUTS = INTERFERENCE_LAYOUTS + [("per_layer_4k", "consecutive"),
                                             ("cross_layer_2m", "consecutive")]
# Daemon flags of each path. Without MPS the default rule (--sm_copies=if_mps) means copy
# engines only (the same as --copy_path=copy_engine); under MPS it lets the daemon pick per job.
# page_dma: the copy-engine path before 2D copies (a DMA per page even for consecutive blocks).
# one_issuer: every job's copies issued by one thread on one stream (the default before the
# IssuePool; throughput only: it moves the same DMA, so its cost to the model is the default's).
PATHS = {
    False: [("default", []), ("sm_always", ["--sm_copies=always"]),
            ("staged", ["--copy_path=staged"]), ("kernel", ["--copy_path=kernel"]),
            ("page_dma", ["--cuda_2d_min_blocks=0"]),
            ("one_issuer", ["--cuda_issue_threads=1"])],
    True: [("default", []), ("copy_engine", ["--copy_path=copy_engine"]),
           ("staged", ["--copy_path=staged"]), ("kernel", ["--copy_path=kernel"])],
}


def emit(**row):
    print(json.dumps(row), flush=True)


def note(msg):
    print("v3_bench: " + msg, file=sys.stderr, flush=True)


class Child:
    """A `v3_bench.py --role` process: one JSON command a line in, one JSON answer a line out."""

    def __init__(self, role, **args):
        self.role = role
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "v3_bench.py"), "--role",
                                   role, json.dumps(args)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)

    def read(self):
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("%s process ended (rc %s)" % (self.role, self.p.poll()))
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                if "error" in r and r["error"] and not ("running" in r or "jobs" in r):
                    raise RuntimeError("%s: %s" % (self.role, r["error"]))
                return r

    def ask(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.ask(cmd="quit")
        except Exception:
            pass
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class Daemon:
    def __init__(self, extra=(), region="12GiB"):
        self.dir = tempfile.mkdtemp(prefix="kvo-v3-", dir="/tmp")
        self.sock = os.path.join(self.dir, "kvoffload.sock")
        self.p = subprocess.Popen([os.environ["KVOFFLOAD_DAEMON"], "--backend=cuda",
                                   "--runtime_dir=" + self.dir, "--metrics_address=",
                                   "--max_region_bytes=" + region, "--populate_threads=16",
                                   # Jobs name rows across the whole region (no index), so it is
                                   # pinned before OpenEngine returns; restart_pin measures the
                                   # default (serve while pinning).
                                   "--region_chunk_bytes=0",
                                   "--log_level=warn", "--idle_engine_ttl_s=1"] + list(extra),
                                  stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.sock):
            if self.p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kvoffloadd %s did not start (rc %s)" % (extra, self.p.poll()))
            time.sleep(0.05)

    def gpu_mib(self):
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        for line in out.splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) == 2 and f[0] == str(self.p.pid) and f[1].isdigit():
                return int(f[1])
        return None

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def cpu_seconds(pid):
    """utime + stime of every thread the process had, alive or ended (clock ticks: 10 ms)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_group(name):
    """Who a thread belongs to, from its name: the daemon's own threads name themselves kvo-*
    (common/thread_name.h); gRPC's and the CUDA driver's are grouped."""
    if name.startswith("kvo-"):
        return name
    if name.startswith("nexting_thread"):  # gRPC's callback threads: sessions' reads and writes
        return "grpc-callback"
    if name.startswith(("grpc", "default-execut", "event_engine", "resolver", "timer")):
        return "grpc"
    if name.startswith("cuda"):
        return "cuda-driver"
    return "other:" + name


def thread_cpu_ns(pid):
    """{tid: (group, CPU ns, times it slept)} for the process's live threads: schedstat's run
    time (ns, not the 10 ms ticks of /proc/PID/stat) and voluntary context switches (each one a
    sleep, so roughly a wake-up each)."""
    out = {}
    base = "/proc/%d/task" % pid
    for tid in os.listdir(base):
        try:
            with open(os.path.join(base, tid, "schedstat")) as f:
                ns = int(f.read().split()[0])
            with open(os.path.join(base, tid, "comm")) as f:
                name = f.read().strip()
            with open(os.path.join(base, tid, "status")) as f:
                sleeps = next(int(line.split()[1]) for line in f
                              if line.startswith("voluntary_ctxt_switches"))
        except (OSError, ValueError, IndexError, StopIteration):  # ended meanwhile
            continue
        out[tid] = (thread_group(name), ns, sleeps)
    return out


def cpu_between(before, after, field=1):
    """Per thread group, CPU ns (field 1) or sleeps (field 2) between two thread_cpu_ns readings
    (threads started in between count from zero; threads that ended in between are missing:
    compare with cpu_seconds)."""
    groups = {}
    for tid, now in after.items():
        then = before.get(tid, (now[0], 0, 0))
        groups[now[0]] = groups.get(now[0], 0) + now[field] - then[field]
    return groups


def settle(pid, timeout_s=20.0):
    """Waits until the process uses under 1 % of a CPU over 200 ms (background work such as a
    closed engine's region teardown must not be counted as the next jobs' cost). Returns the
    seconds waited, or None when it did not settle."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        a = sum(t[1] for t in thread_cpu_ns(pid).values())
        time.sleep(0.2)
        if sum(t[1] for t in thread_cpu_ns(pid).values()) - a < 2e6:
            return round(time.monotonic() - t0, 2)
    return None


# ---------------------------------------------------------------------------------------------

def copy_gbps(jobs, t0, t1):
    """Rate of the jobs that finished inside [t0, t1], from the end of the job before them."""
    inside = [i for i, (t, _) in enumerate(jobs) if t0 <= t <= t1 and i > 0]
    if not inside:
        return None
    first, last = inside[0], inside[-1]
    moved = sum(b for _, b in jobs[first:last + 1])
    span = jobs[last][0] - jobs[first - 1][0]
    return moved / span / 1e9 if span > 0 else None


def picked(paths, only):
    """The paths named in `only` (a list, or None for all of `paths`), looked up in PATHS."""
    if only is None:
        return paths
    known = dict(PATHS[False] + PATHS[True])
    missing = [n for n in only if n not in known]
    if missing:
        sys.exit("unknown path(s) %s; known: %s" % (missing, sorted(known)))
    return [(n, known[n]) for n in only]


def interference(mps, quick, only=None):
    reps = dict(reps_gemm=6, reps_decode=8) if quick else dict(reps_gemm=12, reps_decode=20)
    layouts = INTERFERENCE_LAYOUTS[:2] if quick else INTERFERENCE_LAYOUTS
    paths = picked(PATHS[mps][:2] if quick else
                   [p for p in PATHS[mps] if p[0] != "one_issuer"], only)
    model = Child("model")
    copier = Child("copier")
    info = model.read()
    copier.read()
    emit(phase="interference", mps=mps, **{k: v for k, v in info.items() if k != "ready"})
    last = model.ask(cmd="measure", **reps)  # the first alone measurement

    def with_copier(path, layout, blocks, setup):
        nonlocal last
        before = last
        copier.ask(cmd="setup", job_bytes=JOB_BYTES, layout=layout, blocks=blocks, **setup)
        r = copier.ask(cmd="go")
        if not r.get("running"):
            raise RuntimeError("copier %s %s %s: %s" % (path, layout, blocks, r.get("error")))
        loaded = model.ask(cmd="measure", **reps)
        jobs = copier.ask(cmd="stop")
        copier.ask(cmd="teardown")
        last = model.ask(cmd="measure", **reps)
        row = dict(layout=layout, blocks=blocks, path=path, mps=mps)
        for w in ("gemm", "decode"):
            alone = min(before[w + "_ms"], last[w + "_ms"])
            row[w + "_alone_ms"] = alone
            row[w + "_loaded_ms"] = loaded[w + "_ms"]
            row[w + "_pct"] = round((loaded[w + "_ms"] / alone - 1) * 100, 2)
            g = copy_gbps(jobs["jobs"], *loaded[w + "_t"])
            row[w + "_copy_gbps"] = round(g, 2) if g else None
        g = copy_gbps(jobs["jobs"], loaded["gemm_t"][0], loaded["decode_t"][1])
        row["copy_gbps"] = round(g, 2) if g else None
        if jobs.get("error"):
            row["error"] = jobs["error"]
        emit(interference_v3=row)
        return row

    try:
        with_copier("dma_floor", "contiguous", "consecutive", dict(kind="dma"))
        for layout, blocks in layouts:
            with_copier("torch_gather", layout, blocks, dict(kind="torch"))
        for path, flags in paths:
            d = Daemon(flags)
            try:
                for layout, blocks in layouts:
                    try:
                        with_copier(path, layout, blocks, dict(kind="kvo", socket=d.sock))
                    except RuntimeError as e:  # one path failing must not lose the others
                        emit(interference_v3=dict(layout=layout, blocks=blocks, path=path,
                                                  mps=mps, error=str(e)))
                        copier.close()
                        copier = Child("copier")
                        copier.read()
                emit(daemon_gpu_mib=d.gpu_mib(), path=path, mps=mps)
            finally:
                d.stop()
        with_copier("dma_floor", "contiguous", "consecutive", dict(kind="dma"))
    finally:
        model.close()
        copier.close()
    if not mps:  # a bare CUDA context of this machine, for the daemon's GPU memory bound
        from ttft_bench import context_floor_mib
        emit(context_floor_mib=context_floor_mib())


def throughput(quick, only=None):
    layouts = THROUGHPUT_LAYOUTS[:3] if quick else THROUGHPUT_LAYOUTS
    paths = picked(PATHS[False][:1] if quick else
                   [PATHS[False][0], PATHS[False][5], PATHS[False][2], PATHS[False][3],
                    PATHS[False][4]], only)
    tp = Child("throughput")
    emit(phase="throughput", **{k: v for k, v in tp.read().items() if k != "ready"})
    try:
        emit(**tp.ask(cmd="ceiling"))
        for layout, blocks in layouts:
            emit(**tp.ask(cmd="torch", layout=layout, blocks=blocks, quick=quick))
        for path, flags in paths:
            d = Daemon(flags)
            try:
                for layout, blocks in layouts:
                    for r in tp.ask(cmd="kvo", socket=d.sock, path=path, layout=layout,
                                    blocks=blocks, quick=quick)["rows"]:
                        emit(throughput_v3=r)
            finally:
                d.stop()
    finally:
        tp.close()


def cpu(quick):
    d = Daemon()
    c = Child("cpu", socket=d.sock, daemon_pid=d.p.pid)
    try:
        c.read()
        for blocks in ((1, 1024) if quick else (1, 1024, 32768, 1 << 20)):
            emit(cpu_us_per_job=c.ask(cmd="cpu", blocks=blocks, quick=quick))
    finally:
        c.close()
        d.stop()


def layout(quick, only=None):
    """Layouts: per-layer pages of 4-64 KiB, random / runs of 16 / consecutive blocks,
    registered as today (a block's 16 pages back to back in its row: a segment contiguous on
    both sides is one page), the same with blocks_per_row 16, and the same bytes with each
    tensor in a region of its own (an engine per K/V tensor: what a tensor-major row layout
    would give; consecutive blocks are then one segment per tensor, runs of 16 one per run)."""
    pages = ("per_layer_4k", "per_layer_32k") if quick else (
        "per_layer_4k", "per_layer_16k", "per_layer_32k", "per_layer_64k")
    tp = Child("throughput")
    tp.read()
    try:
        for path, flags in picked([PATHS[False][0]], only):
            d = Daemon(flags)
            try:
                for name in pages:
                    for blocks in ("random", "runs16", "consecutive"):
                        for r in tp.ask(cmd="layout", socket=d.sock, layout=name, blocks=blocks,
                                        quick=quick)["rows"]:
                            emit(layout_v3=dict(r, path=path))
            finally:
                d.stop()
    finally:
        tp.close()


# Staging buffers × chunk; full chunks are CUDA graph replays unless cuda_graphs is False (the
# op-by-op gathers and scatters, for the A/B).
REORDER_VARIANTS = [dict(chunk_bytes=64 << 20, slots=2), dict(chunk_bytes=32 << 20, slots=4),
                    dict(chunk_bytes=16 << 20, slots=8), dict(chunk_bytes=64 << 20, slots=4),
                    dict(chunk_bytes=32 << 20, slots=4, cuda_graphs=False)]
REORDER_IN_MODEL = REORDER_VARIANTS[1]


def reorder(quick):
    """The worker-side reorder (kvoffload.StagedWorker via v3_reorder.py): its rate against the
    ceiling and torch_staged, and its cost to the model from the model's own process against
    torch_staged on a thread of the model's process (the in-process PyTorch method)."""
    layouts = [("per_layer_32k", "random")] if quick else [("per_layer_32k", "random"),
                                                           ("per_layer_4k", "random")]
    reps = dict(reps_gemm=6, reps_decode=8) if quick else dict(reps_gemm=12, reps_decode=20)
    d = Daemon()
    tp = Child("throughput")
    tp.read()
    try:
        emit(**tp.ask(cmd="ceiling"))
        for layout, blocks in layouts:
            emit(**tp.ask(cmd="torch", layout=layout, blocks=blocks, quick=quick))
            for variant in REORDER_VARIANTS[:1] if quick else REORDER_VARIANTS:
                for r in tp.ask(cmd="reorder", socket=d.sock, layout=layout, blocks=blocks,
                                quick=quick, **variant)["rows"]:
                    emit(throughput_v3=r)
    finally:
        tp.close()
    model = Child("model")
    emit(phase="reorder", **{k: v for k, v in model.read().items() if k != "ready"})
    try:
        last = model.ask(cmd="measure", **reps)
        for layout, blocks in layouts:
            for kind, path in (("torch", "torch_inprocess"), ("reorder", "reorder_inprocess")):
                before = last
                model.ask(cmd="inproc_setup", kind=kind, layout=layout, blocks=blocks,
                          job_bytes=JOB_BYTES, socket=d.sock, **REORDER_IN_MODEL)
                r = model.ask(cmd="inproc_go")
                if not r.get("running"):
                    raise RuntimeError("%s %s: %s" % (path, layout, r.get("error")))
                loaded = model.ask(cmd="measure", **reps)
                jobs = model.ask(cmd="inproc_stop")
                model.ask(cmd="inproc_teardown")
                last = model.ask(cmd="measure", **reps)
                row = dict(layout=layout, blocks=blocks, path=path, mps=False)
                for w in ("gemm", "decode"):
                    alone = min(before[w + "_ms"], last[w + "_ms"])
                    row[w + "_alone_ms"], row[w + "_loaded_ms"] = alone, loaded[w + "_ms"]
                    row[w + "_pct"] = round((loaded[w + "_ms"] / alone - 1) * 100, 2)
                g = copy_gbps(jobs["jobs"], loaded["gemm_t"][0], loaded["decode_t"][1])
                row["copy_gbps"] = round(g, 2) if g else None
                emit(interference_v3=row)
    finally:
        model.close()
        d.stop()


# ---------------------------------------------------------------------------------------------
# Roles (children).

def throughput_main(args):
    import torch
    import v3_workloads as w
    torch.cuda.init()
    w.answer(ready=True, device=torch.cuda.get_device_name(0), torch=torch.__version__)
    ceiling = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        reps = 3 if cmd.get("quick") else 5
        try:
            if cmd["cmd"] == "ceiling":
                dma = w.PlainDma(1 << 30)
                ceiling = {"store": (1 << 30) / w.median_ms(dma.store, reps) / 1e6,
                           "load": (1 << 30) / w.median_ms(dma.load, reps) / 1e6}
                del dma
                torch.cuda.empty_cache()
                w.answer(ceiling_v3={k: round(v, 2) for k, v in ceiling.items()})
            elif cmd["cmd"] == "torch":
                lay = w.Layout(cmd["layout"], cmd["blocks"], JOB_BYTES)
                methods = {"torch_staged": w.TorchStaged(lay)}
                if not lay.per_layer:
                    methods["torch_per_block"] = w.TorchPerBlock(lay)
                out = {}
                for name, m in methods.items():
                    for direction in ("store", "load"):
                        ms = w.median_ms(getattr(m, direction), reps)
                        out["%s_%s" % (name, direction)] = round(lay.bytes / ms / 1e6, 2)
                del methods, lay
                torch.cuda.empty_cache()
                w.answer(torch_v3=dict(layout=cmd["layout"], blocks=cmd["blocks"], **out))
            elif cmd["cmd"] == "kvo":
                w.answer(rows=kvo_rows(w, cmd, reps))
            elif cmd["cmd"] == "layout":
                w.answer(rows=layout_rows(w, cmd, reps))
            elif cmd["cmd"] == "reorder":
                w.answer(rows=reorder_rows(w, cmd, reps))
            elif cmd["cmd"] == "quit":
                w.answer(bye=True)
                return
        except Exception as e:
            w.answer(error=repr(e))


def two_in_flight(submit, wait, direction, n):
    """Seconds for n jobs with two in flight (alternating block sets 0 and 1), timed once the
    pipeline is full."""
    inflight = [submit(direction, 0), submit(direction, 1)]
    wait(inflight.pop(0))  # warm: the pipeline is full from here
    t0 = time.perf_counter()
    for j in range(n):
        inflight.append(submit(direction, j % 2))
        wait(inflight.pop(0))
    elapsed = time.perf_counter() - t0
    wait(inflight.pop(0))
    return elapsed


def kvo_rows(w, cmd, reps):
    """One job at a time (submit -> finished, median) and two in flight (disjoint blocks and
    rows, steady state over 4 x reps jobs), both directions."""
    import torch
    lay = w.Layout(cmd["layout"], cmd["blocks"], JOB_BYTES, sets=2)
    k = w.KvoWorker(cmd["socket"], lay)
    rows = []
    try:
        for s in (0, 1):
            k.run("store", s)  # rows of both sets exist before the loads
        for direction in ("store", "load"):
            ms = w.median_ms(lambda: k.run(direction, 0), reps)
            rows.append(dict(layout=cmd["layout"], blocks=cmd["blocks"], direction=direction,
                             jobs=1, path=cmd["path"], gbps=round(lay.bytes / ms / 1e6, 2)))
            n = 4 * reps
            elapsed = two_in_flight(k.submit, k.wait, direction, n)
            rows.append(dict(layout=cmd["layout"], blocks=cmd["blocks"], direction=direction,
                             jobs=2, path=cmd["path"], gbps=round(n * lay.bytes / elapsed / 1e9,
                                                                  2)))
    finally:
        k.close()
        del lay
        torch.cuda.empty_cache()
    return rows


def layout_rows(w, cmd, reps):
    """Item 2: the per-layer layout as registered today (blocks_per_row 1 and 16) against one
    engine per tensor (tensor-major), one job per direction, the same bytes and blocks."""
    import torch
    lay = w.Layout(cmd["layout"], cmd["blocks"], JOB_BYTES)
    rows = []

    def row(registration, direction, ms):
        rows.append(dict(layout=cmd["layout"], blocks=cmd["blocks"], direction=direction,
                         registration=registration, gbps=round(lay.bytes / ms / 1e6, 2)))

    try:
        for registration, bpr in (("per_layer", 1), ("per_layer_bpr16", 16)):
            k = w.KvoWorker(cmd["socket"], lay, blocks_per_row=bpr)
            k.run("store")
            for direction in ("store", "load"):
                row(registration, direction, w.median_ms(lambda: k.run(direction), reps))
            k.close()
        # Tensor-major: each of the 16 K/V tensors its own engine and region, one job per
        # tensor, all 16 in flight at once.
        workers = []
        for t in lay.tensors:
            for kv in range(2):
                # The same blocks, one K or V tensor: a block is one page.
                sub = types.SimpleNamespace(
                    sets=1, n=lay.n, bpb=lay.page, num_blocks=lay.num_blocks,
                    block_lists=lay.block_lists,
                    registration=[(t[kv].data_ptr(), lay.num_blocks, lay.page, lay.page)],
                    spec_fields=lambda: (1, lay.page))
                workers.append(w.KvoWorker(cmd["socket"], sub, blocks_per_row=1))
        for kw in workers:
            kw.run("store")
        for direction in ("store", "load"):
            def all_tensors():
                jobs = [kw.submit(direction) for kw in workers]
                for kw, job in zip(workers, jobs):
                    kw.wait(job)
            row("tensor_major", direction, w.median_ms(all_tensors, reps))
        for kw in workers:
            kw.close()
    finally:
        del lay
        torch.cuda.empty_cache()
    return rows


def reorder_rows(w, cmd, reps):
    """The reorder's store and load of one 512 MiB job (chunks pipelined over `slots` staging
    buffers), median of reps, after a round trip that must bring every byte back; and two jobs
    in flight (disjoint blocks and rows, steady state over 4 x reps jobs), as kvo_rows."""
    import torch
    from v3_reorder import Reorder
    lay = w.Layout(cmd["layout"], cmd["blocks"], JOB_BYTES, sets=2)
    graphs = cmd.get("cuda_graphs", True)
    m = Reorder(cmd["socket"], lay, chunk_bytes=cmd["chunk_bytes"], slots=cmd["slots"],
                cuda_graphs=graphs)
    if graphs and not m.worker.uses_cuda_graphs:  # the A/B would compare eager with eager
        m.close()
        raise RuntimeError("StagedWorker captured no CUDA graphs (see its log)")
    rows = []
    name = "reorder_%dx%dm%s" % (cmd["slots"], cmd["chunk_bytes"] >> 20,
                                 "" if graphs else "_eager")
    try:
        exact = m.check()
        m.wait(m.submit("store", 1))  # set 1's rows exist before its loads
        for direction in ("store", "load"):
            ms = w.median_ms(getattr(m, direction), reps)
            rows.append(dict(layout=cmd["layout"], blocks=cmd["blocks"], direction=direction,
                             jobs=1, path=name, gbps=round(lay.bytes / ms / 1e6, 2),
                             bytes_exact=exact, chunk_blocks=m.chunk, slots=cmd["slots"],
                             graph_replays=m.worker.graph_replays))
            n = 4 * reps
            elapsed = two_in_flight(m.submit, m.wait, direction, n)
            rows.append(dict(layout=cmd["layout"], blocks=cmd["blocks"], direction=direction,
                             jobs=2, path=name, gbps=round(n * lay.bytes / elapsed / 1e9, 2),
                             bytes_exact=exact, chunk_blocks=m.chunk, slots=cmd["slots"],
                             graph_replays=m.worker.graph_replays))
    finally:
        m.close()
        del m, lay
        torch.cuda.empty_cache()
    return rows


def cpu_main(args):
    """Daemon CPU per store job of `blocks` consecutive 4 KiB blocks: one run, as lists, and
    one block of the same bytes (the job's copy lasts as long; what the blocks add is the
    difference: the daemon also spends CPU waiting for the copy to complete)."""
    import torch
    import kvoffload as kvo
    import v3_workloads as w
    torch.cuda.init()
    w.answer(ready=True)
    pid = args["daemon_pid"]

    def engine(name, nb, page):
        kv = torch.empty(nb + 1, page, dtype=torch.uint8, device="cuda")
        spec = kvo.EngineSpec(engine_id=name, num_layers=1, page_bytes=page,
                              budget_bytes=nb * page, rows_assigned_by_engine=True)
        wk = kvo.Worker.connect_cuda(args["socket"], spec, 0,
                                     [(kv.data_ptr(), nb + 1, page, page)], num_events=1)
        wk.submit_runs(1, "store", [(0, 0, nb)])
        wk.wait(1, timeout_s=120).check()
        return kv, wk

    def per_job(wk, jobs, submit, first, key, result):
        # A warm-up pass first, not counted, then the daemon left to finish what it does in the
        # background (a closed engine's teardown, a region still pinning): that CPU is not the
        # jobs'. CPU from schedstat (ns) per thread group; the tick count of /proc/PID/stat
        # beside it as a check (it also holds threads that ended meanwhile).
        for j in range(first, first + min(5, jobs)):
            submit(j)
            wk.wait(j, timeout_s=120).check()
        first += min(5, jobs)
        result[key + "_settle_s"] = settle(pid)
        c0, th0 = cpu_seconds(pid), thread_cpu_ns(pid)
        t0 = time.perf_counter()
        for j in range(first, first + jobs):
            submit(j)
            wk.wait(j, timeout_s=120).check()
        wall = time.perf_counter() - t0
        th1 = thread_cpu_ns(pid)
        groups = cpu_between(th0, th1)
        sleeps = cpu_between(th0, th1, field=2)
        result[key + "_us"] = round(sum(groups.values()) / jobs / 1e3, 1)
        result[key + "_sleeps"] = {g: round(n / jobs, 1) for g, n in sorted(sleeps.items()) if n}
        result[key + "_stat_us"] = round((cpu_seconds(pid) - c0) / jobs * 1e6, 1)
        result[key + "_wall_us"] = round(wall / jobs * 1e6, 1)
        result[key + "_threads_us"] = {g: round(ns / jobs / 1e3, 1)
                                       for g, ns in sorted(groups.items()) if ns > 0}

    def closed():
        # The daemon tears a closed engine down (unpins and unmaps its region: up to seconds of
        # CPU for 4 GiB) once it has been idle --idle_engine_ttl_s (1 s here); not the next
        # engine's jobs' cost, so it is over before they are counted.
        time.sleep(1.5)
        settle(pid)

    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            w.answer(bye=True)
            return
        try:
            nb = cmd["blocks"]
            scale = 4 if cmd.get("quick") else 1
            runs_jobs = max(20, min(2000, (1 << 24) // nb)) // scale
            list_jobs = max(5, min(1000, (1 << 22) // nb)) // scale
            result = {"blocks": nb, "runs_jobs": runs_jobs, "jobs": list_jobs}
            kv, wk = engine("cpu-%d" % nb, nb, 4096)
            ids = list(range(nb))
            per_job(wk, runs_jobs, lambda j: wk.submit_runs(j, "store", [(0, 0, nb)]), 2,
                    "runs", result)
            per_job(wk, list_jobs, lambda j: wk.submit_store(j, ids, ids), 2 + 2 * runs_jobs,
                    "lists", result)
            result["us"], result["wall_us"] = result["lists_us"], result["lists_wall_us"]
            wk.close()
            del kv
            closed()
            if nb > 1:
                try:
                    kv, wk = engine("cpu-one-%d" % nb, 1, nb * 4096)
                    per_job(wk, runs_jobs, lambda j: wk.submit_runs(j, "store", [(0, 0, 1)]), 2,
                            "one_block", result)
                    wk.close()
                    del kv
                    closed()
                except Exception as e:  # the block-count rows above still count
                    result["one_block_error"] = repr(e)
            torch.cuda.empty_cache()
            w.answer(**result)
        except Exception as e:
            w.answer(error=repr(e))


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--role"]:
        sys.path.insert(0, HERE)
        roles = {"throughput": throughput_main, "cpu": cpu_main}
        if os.environ.get("V3_FAKE_ROLES"):  # orchestration tests without a GPU
            sys.path.insert(0, os.environ["V3_FAKE_ROLES"])
            import fake_roles as w
            roles = {"throughput": w.throughput_main, "cpu": w.cpu_main}
        else:
            import v3_workloads as w
        roles.update(model=w.model_main, copier=w.copier_main)
        args = json.loads(argv[2]) if len(argv) > 2 else {}
        roles[argv[1]](args)
        return
    if not argv or argv[0] not in ("interference", "throughput", "cpu", "layout", "reorder"):
        sys.exit(__doc__)
    sys.path.insert(0, HERE)
    quick = "--quick" in argv
    only = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--paths=")), None)
    t0 = time.monotonic()
    if argv[0] == "interference":
        interference("--mps" in argv, quick, only)
    elif argv[0] == "throughput":
        throughput(quick, only)
    elif argv[0] == "cpu":
        cpu(quick)
    elif argv[0] == "reorder":
        reorder(quick)
    else:
        layout(quick, only)
    note("%s took %.1f s" % (argv[0], time.monotonic() - t0))


if __name__ == "__main__":
    main()
