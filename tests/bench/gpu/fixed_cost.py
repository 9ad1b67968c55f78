"""The copy-engine path's fixed cost per job (copy path v3): where a 512 MiB job's time goes.

  fixed_cost.py OUT.json [--quick]   (run_on_device.sh stage fixed_cost)
  fixed_cost.py --self_test          the log parsing and the medians, without a GPU

For each daemon variant (flags below), one daemon with --log_level=debug, whose CUDA backend then
logs one "job timing:" line per job (daemon/copy/cuda/job_times.h: received -> planned ->
enqueue -> first batch returned -> enqueued -> completion observed -> verdict handed on), and one
worker per case, one job at a time (submit -> finished, as v3_bench's "jobs: 1" rows):
  cross_layer_2m random / consecutive   512 MiB jobs of 2 MiB pages (256 blocks), both directions
  one_block                             1 block of 2 MiB, both directions
  per_layer_32k random                  512 MiB of 32 KiB pages (16384 copies: many calls)
Per (variant, case, direction): the client's median, its GB/s and share of the same run's
ceiling (one contiguous 512 MiB cudaMemcpyAsync), the gap (client - bytes / ceiling), the
medians of each backend step, and outside_us (client - the backend's received -> reported:
Python, the C ABI, gRPC both ways and the engine). Writes OUT.json after every variant (a
timeout keeps what was measured; each daemon's log beside it, in fixed_cost_logs/) and prints a
table. Env as v3_bench.py (KVOFFLOAD_DAEMON, KVOFFLOAD_LIB, PYTHONPATH with kvoffload). The
daemons are exec'd (not forked) children, so this process may hold a CUDA context.

Reading it: in variant default (a first call of 8 copies, each later one twice as many, the
daemon's default since 0e1753c) the copy engines start after first_us. What is left in gap_us is
the completion + verdict + outside_us, which in_us and out_us split into the way in (submit
called -> the backend has the job) and out (verdict handed on -> the client's wait returned).
spin keeps every CPU busy with SCHED_IDLE loops (qos, not in the list now, holds a 0 µs CPU
latency request): what they take off in_us and out_us is what idle CPUs' wake-ups cost on that
host (the JSON records the cpuidle driver and states). one_issuer: every job from one thread
on one stream: per_layer_32k random (16384 copies a job) shows what the IssuePool's threads buy
where the host's issue rate bounds a job. *_again repeat a variant at the end (drift).
"""

import ctypes
import json
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from v3_bench import cpu_seconds  # beside this file (the bundle copies both)

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_BYTES = 512 << 20
BUDGET_S = 80  # stop starting variants after this long (the stage's timeout is 120 s)
ALARM_S = 105  # then the variant running is abandoned (its daemon stopped), the JSON kept
# name, daemon flags, what keeps CPUs from idling (None, "spin" or "qos"). Other batch schedules (first_1, batches_of_32, no_overlap_hint)
# were measured at ed70e7d (runs/2026-12-02-ed70e7d-gpu); no stream wake-ups
# (--cuda_stream_wake_min_bytes=0) and copies as their own cudaMemcpyAsync at acdd84c
# (runs/2026-12-03-acdd84c-diag); one call of up to 4096 copies (--cuda_first_batch_copies=0)
# at 0e1753c (runs/2026-12-03-0e1753c-gpu-v3). spin: one SCHED_IDLE busy loop per CPU while
# measured, so no CPU idles (a woken thread preempts the spinner at once). qos: a CPU latency
# request of 0 µs held on /dev/cpu_dma_latency (PM QoS, what tuned's latency-performance profile
# sets; root only): the kernel keeps every CPU in its shallowest idle state.
# one_issuer: every job's copies from one thread on one stream (--cuda_issue_threads=1, the default
# before 2026-12-03's IssuePool); qos was measured at 6ade07f and 76254d3 (no effect: the guest
# has no cpuidle driver) and is kept for hosts that have one.
VARIANTS = [
    ("default", [], None),
    ("one_issuer", ["--cuda_issue_threads=1"], None),
    ("spin", [], "spin"),
    ("default_again", [], None),
    ("one_issuer_again", ["--cuda_issue_threads=1"], None),
]
STEPS = ["plan_us", "wait_us", "first_us", "enqueue_us", "copy_us", "verdict_us", "total_us"]
TIMING = re.compile(r"job timing: (store|load) (.*)$")


def die_with_parent():
    """preexec_fn: the daemon gets SIGTERM if this process dies (a stage timeout's SIGKILL)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def note(msg):
    print("fixed_cost: " + msg, file=sys.stderr, flush=True)


def parse_timings(text):
    """Every "job timing:" line of a daemon log, in order: dicts of direction and numbers."""
    out = []
    for line in text.splitlines():
        m = TIMING.search(line)
        if not m:
            continue
        row = {"direction": m.group(1)}
        for kv in m.group(2).split():
            k, _, v = kv.partition("=")
            try:
                row[k] = float(v)
            except ValueError:
                pass
        out.append(row)
    return out


def median(xs):
    xs = [x for x in xs if x is not None and x >= 0]
    return round(statistics.median(xs), 1) if xs else None


def summarize(jobs, timings, ceiling):
    """jobs: the client's record, in submission order (dicts case, direction, bytes, client_us,
    warm); timings: parse_timings of the daemon's log (one line per job, same order, one job at
    a time). Returns (rows, errors)."""
    errors = []
    if len(timings) != len(jobs):
        errors.append("%d jobs but %d timing lines" % (len(jobs), len(timings)))
    matched = []
    for i, j in enumerate(jobs):
        t = timings[i] if i < len(timings) else None
        if t is not None and (t["direction"] != j["direction"] or t.get("bytes") != j["bytes"]):
            errors.append("job %d (%s %s %d B) has timing line %r" % (i, j["case"], j["direction"],
                                                                     j["bytes"], t))
            t = None
        matched.append((j, t))
    rows = []
    keys = []
    for j, _ in matched:
        if (j["case"], j["direction"]) not in keys:
            keys.append((j["case"], j["direction"]))
    for case, direction in keys:
        sel = [(j, t) for j, t in matched
               if j["case"] == case and j["direction"] == direction and not j["warm"]]
        if not sel:
            continue
        nbytes = sel[0][0]["bytes"]
        client = median([j["client_us"] for j, _ in sel])
        row = dict(case=case, direction=direction, bytes=nbytes, jobs=len(sel), client_us=client,
                   gbps=round(nbytes / client / 1e3, 2) if client else None)
        c = ceiling.get(direction)
        if c and client:
            link = nbytes / c / 1e3
            row.update(link_us=round(link, 1), pct_ceiling=round(100 * link / client, 1),
                       gap_us=round(client - link, 1))
        ts = [t for _, t in sel if t is not None]
        row["backend"] = {k: median([t.get(k) for t in ts]) for k in STEPS + ["copies", "batches"]}
        outside = [j["client_us"] - t["total_us"] for j, t in sel
                   if t is not None and t.get("total_us", -1) >= 0]
        row["outside_us"] = median(outside)
        # The way in (submit called -> the backend has the job) and out (verdict handed on ->
        # the client's wait returned): one clock (CLOCK_MONOTONIC) on both sides.
        ends = [(j, t) for j, t in sel if t is not None and "submit_ns" in j and
                t.get("received_ns", 0) > 0 and t.get("reported_ns", 0) > 0]
        row["in_us"] = median([(t["received_ns"] - j["submit_ns"]) / 1e3 for j, t in ends])
        row["out_us"] = median([(j["done_ns"] - t["reported_ns"]) / 1e3 for j, t in ends])
        cpu = [j["daemon_cpu_us"] for j, _ in sel if j.get("daemon_cpu_us") is not None]
        row["daemon_cpu_us"] = round(sum(cpu) / len(cpu), 1) if cpu else None
        rows.append(row)
    return rows, errors


# ---------------------------------------------------------------------------------------------

class Daemon:
    def __init__(self, flags, log_path):
        self.dir = tempfile.mkdtemp(prefix="kvo-fixed-", dir="/tmp")
        self.sock = os.path.join(self.dir, "kvoffload.sock")
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.p = subprocess.Popen([os.environ["KVOFFLOAD_DAEMON"], "--backend=cuda",
                                   "--runtime_dir=" + self.dir, "--metrics_address=",
                                   "--max_region_bytes=4GiB", "--populate_threads=16",
                                   # Jobs name rows across the whole region (no index), so it is
                                   # pinned before OpenEngine returns; restart_pin measures the
                                   # default (serve while pinning).
                                   "--region_chunk_bytes=0",
                                   "--log_level=debug", "--idle_engine_ttl_s=1"] + list(flags),
                                  stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                  preexec_fn=die_with_parent)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.sock):
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("kvoffloadd %s did not start (rc %s)" % (flags, self.p.poll()))
            time.sleep(0.02)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        with open(self.log_path) as f:
            return f.read()


class KeepAwake:
    """What keeps CPUs from idling during a variant: "spin", one SCHED_IDLE busy loop per CPU
    (any woken thread preempts a spinner at once); "qos", a 0 µs CPU latency request held open
    on /dev/cpu_dma_latency (raises OSError without root); None, nothing."""

    CODE = ("import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
            "while True: pass\n")

    def __init__(self, mode):
        self.procs, self.qos = [], None
        if mode == "spin":
            self.procs = [subprocess.Popen([sys.executable, "-c", self.CODE],
                                           preexec_fn=die_with_parent)
                          for _ in range(os.cpu_count())]
        elif mode == "qos":
            self.qos = open("/dev/cpu_dma_latency", "wb", buffering=0)
            self.qos.write(struct.pack("i", 0))  # held until the file is closed

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
        if self.qos is not None:
            self.qos.close()


def cpuidle():
    """The cpuidle driver and CPU 0's idle states (name:exit latency µs), for the record."""
    base = "/sys/devices/system/cpu/cpuidle"
    out = {}
    try:
        with open(os.path.join(base, "current_driver")) as f:
            out["driver"] = f.read().strip()
        states = []
        cpu0 = "/sys/devices/system/cpu/cpu0/cpuidle"
        for st in sorted(os.listdir(cpu0)):
            with open(os.path.join(cpu0, st, "name")) as f, \
                    open(os.path.join(cpu0, st, "latency")) as g:
                states.append("%s:%s" % (f.read().strip(), g.read().strip()))
        out["states"] = states
    except OSError as e:
        out["error"] = repr(e)
    return out


def measure_variant(w, flags, log_path, quick, keep=None):
    """One daemon: every case, both directions, one job at a time. Returns (jobs, log text)."""
    reps = {"one_block": 20 if quick else 50}
    default_reps = 5 if quick else 12
    cases = [("cross_layer_2m_random", "cross_layer_2m", "random", JOB_BYTES),
             ("cross_layer_2m_consecutive", "cross_layer_2m", "consecutive", JOB_BYTES),
             ("one_block", "cross_layer_2m", "random", 2 << 20),
             # 16384 copies of 32 KiB a job: where more calls could cost (the schedule adds 11)
             ("per_layer_32k_random", "per_layer_32k", "random", JOB_BYTES)]
    d = Daemon(flags, log_path)
    try:
        awake = KeepAwake(keep)
    except OSError:
        d.stop()
        raise
    jobs = []
    try:
        for case, layout, blocks, nbytes in cases:
            lay = w.Layout(layout, blocks, nbytes)
            k = w.KvoWorker(d.sock, lay)
            try:
                for direction, warm in (("store", True), ("load", True)):
                    t0 = time.perf_counter()
                    k.run(direction)
                    jobs.append(dict(case=case, direction=direction, bytes=lay.bytes, warm=warm,
                                     client_us=(time.perf_counter() - t0) * 1e6))
                for direction in ("store", "load"):
                    n = reps.get(case, default_reps)
                    c0 = cpu_seconds(d.p.pid)
                    for _ in range(n):
                        t0 = time.perf_counter()
                        submit_ns = time.monotonic_ns()
                        k.wait(k.submit(direction))
                        done_ns = time.monotonic_ns()
                        jobs.append(dict(case=case, direction=direction, bytes=lay.bytes,
                                         warm=False, submit_ns=submit_ns, done_ns=done_ns,
                                         client_us=(time.perf_counter() - t0) * 1e6))
                    cpu_us = (cpu_seconds(d.p.pid) - c0) / n * 1e6
                    for j in jobs[-n:]:
                        j["daemon_cpu_us"] = cpu_us
            finally:
                k.close()
                del lay
    finally:
        awake.stop()
        text = d.stop()
    return jobs, text


def ceiling_gbps(w):
    import torch
    dma = w.PlainDma(JOB_BYTES)
    out = {d: round(JOB_BYTES / w.median_ms(getattr(dma, d), 7) / 1e6, 2) for d in ("store", "load")}
    del dma
    torch.cuda.empty_cache()
    return out


def print_table(result):
    print("ceiling GB/s (one 512 MiB cudaMemcpyAsync): %s" % result.get("ceiling_gbps"))
    print("cpuidle: %s" % result.get("cpuidle"))
    head = ("variant", "case", "dir", "client", "GB/s", "%ceil", "gap", "plan", "first",
            "enqueue", "copy", "verdict", "outside", "in", "out", "batches", "cpu")
    fmt = "%-15s %-27s %-5s %8s %6s %6s %7s %6s %6s %7s %8s %7s %7s %6s %6s %7s %8s"
    print(fmt % head)
    for v in result["variants"]:
        for r in v.get("rows", []):
            b = r["backend"]
            print(fmt % (
                v["name"], r["case"], r["direction"], r["client_us"], r["gbps"],
                r.get("pct_ceiling"), r.get("gap_us"), b["plan_us"], b["first_us"],
                b["enqueue_us"], b["copy_us"], b["verdict_us"], r["outside_us"],
                r.get("in_us"), r.get("out_us"), b["batches"], r.get("daemon_cpu_us")))
        for e in v.get("errors", []):
            print("%-15s ERROR %s" % (v["name"], e))
    print("(µs, medians; gap = client - bytes/ceiling; outside = client - backend total = in "
          "(submit -> received) + out (reported -> wait returned); cpu = the daemon's CPU per "
          "job, mean)")
    for key, by_variant in result.get("compare", {}).items():
        print("%-34s client µs by variant: %s" % (key, ", ".join(
            "%s %s" % (name, " / ".join(str(x) for x in xs)) for name, xs in by_variant.items())))


def compare(variants):
    """{"case direction": {variant base name: [client medians, one per run of it]}}: the
    variants side by side (one_batch_again counts as a second run of one_batch)."""
    out = {}
    for v in variants:
        base = v["name"].replace("_again", "")
        for r in v.get("rows", []):
            out.setdefault("%s %s" % (r["case"], r["direction"]), {}).setdefault(
                base, []).append(r["client_us"])
    return out


def main(argv):
    if argv[:1] == ["--self_test"]:
        return self_test()
    if not argv:
        sys.exit(__doc__)
    out_path, quick = argv[0], "--quick" in argv
    t_start = time.monotonic()

    def out_of_time(signum, frame):
        raise TimeoutError("fixed_cost.py ran past %d s" % ALARM_S)

    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(ALARM_S)
    sys.path.insert(0, HERE)
    commit = "unknown"
    try:
        with open(os.path.join(HERE, "COMMIT")) as f:
            commit = f.read().strip()
    except OSError:
        pass
    result = dict(bench="fixed_cost", commit=commit, job_bytes=JOB_BYTES, variants=[],
                  errors=[])
    log_dir = os.path.join(os.path.dirname(os.path.abspath(out_path)), "fixed_cost_logs")
    os.makedirs(log_dir, exist_ok=True)

    def save():
        with open(out_path + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(out_path + ".tmp", out_path)

    try:
        import torch
        import v3_workloads as w
        torch.cuda.init()
        result["device"] = torch.cuda.get_device_name(0)
    except Exception as e:  # the JSON still says why there are no rows
        result["errors"].append("setup: %r" % (e,))
        save()
        raise

    try:
        result["ceiling_gbps"] = ceiling_gbps(w)
    except Exception as e:  # the rows still come, without their share of the ceiling
        result["errors"].append("ceiling: %r" % (e,))
        result["ceiling_gbps"] = {}
    save()
    result["cpuidle"] = cpuidle()
    for name, flags, keep in VARIANTS:
        if time.monotonic() - t_start > BUDGET_S:
            result["errors"].append("out of time before variant %s" % name)
            break
        t0 = time.monotonic()
        v = dict(name=name, flags=flags, keep_awake=keep)
        try:
            jobs, text = measure_variant(w, flags, os.path.join(log_dir, name + ".log"), quick,
                                         keep)
            v["rows"], v["errors"] = summarize(jobs, parse_timings(text), result["ceiling_gbps"])
        except Exception as e:  # TimeoutError too: what the other variants measured stays
            v["errors"] = ["%r" % (e,)]
        v["seconds"] = round(time.monotonic() - t0, 1)
        result["variants"].append(v)
        save()
        note("%s done in %.1f s" % (name, v["seconds"]))
    result["seconds"] = round(time.monotonic() - t_start, 1)
    result["compare"] = compare(result["variants"])
    save()
    print_table(result)
    return 0 if all(not v.get("errors") for v in result["variants"]) and result["variants"] else 1


def self_test():
    log = "\n".join([
        "[2026-12-01 21:00:00.000] [kvoffload.cuda] [info] device 0: copy engines only",
        "[..] [kvoffload.cuda] [debug] job timing: store bytes=536870912 copies=256 batches=6 "
        "plan_us=3.0 wait_us=0.5 first_us=12.0 enqueue_us=310.0 copy_us=9500.0 verdict_us=21.0 "
        "total_us=9834.5 ok=1",
        "[..] [kvoffload.cuda] [debug] job timing: store bytes=536870912 copies=256 batches=6 "
        "plan_us=5.0 wait_us=0.5 first_us=14.0 enqueue_us=330.0 copy_us=9400.0 verdict_us=25.0 "
        "total_us=9760.5 ok=1 received_ns=5000000 reported_ns=14760500",
        "[..] [kvoffload.cuda] [debug] job timing: store bytes=536870912 copies=256 batches=6 "
        "plan_us=4.0 wait_us=0.5 first_us=13.0 enqueue_us=320.0 copy_us=9450.0 verdict_us=23.0 "
        "total_us=9800.0 ok=1",
        "[..] [kvoffload.cuda] [debug] job timing: load bytes=2097152 copies=1 batches=1 "
        "plan_us=1.0 wait_us=0.1 first_us=6.0 enqueue_us=8.0 copy_us=50.0 verdict_us=5.0 "
        "total_us=64.1 ok=1",
    ])
    t = parse_timings(log)
    assert len(t) == 4 and t[0]["direction"] == "store" and t[3]["copy_us"] == 50.0, t
    jobs = [dict(case="c", direction="store", bytes=536870912, warm=True, client_us=20000.0),
            dict(case="c", direction="store", bytes=536870912, warm=False, client_us=10500.0,
                 submit_ns=4800000, done_ns=15000500, daemon_cpu_us=900.0),
            dict(case="c", direction="store", bytes=536870912, warm=False, client_us=10400.0,
                 daemon_cpu_us=900.0),
            dict(case="one", direction="load", bytes=2097152, warm=False, client_us=110.0)]
    rows, errors = summarize(jobs, t, {"store": 53.6870912, "load": 50.0})
    assert errors == [], errors
    assert len(rows) == 2, rows
    r = rows[0]
    assert r["jobs"] == 2 and r["client_us"] == 10450.0, r
    assert r["link_us"] == 10000.0 and r["gap_us"] == 450.0 and r["pct_ceiling"] == 95.7, r
    assert r["backend"]["enqueue_us"] == 325.0 and r["backend"]["first_us"] == 13.5, r
    # The way in and out from the one job with both clock readings; the daemon's CPU per job.
    assert r["in_us"] == 200.0 and r["out_us"] == 240.0 and r["daemon_cpu_us"] == 900.0, r
    assert rows[1]["in_us"] is None and rows[1]["daemon_cpu_us"] is None, rows[1]
    assert r["outside_us"] == round(statistics.median([10500 - 9760.5, 10400 - 9800.0]), 1), r
    assert rows[1]["outside_us"] == 45.9 and rows[1]["backend"]["batches"] == 1.0, rows[1]
    # A missing or mismatched line is named, and its job keeps only the client's time.
    rows, errors = summarize(jobs[:3] + [dict(case="one", direction="store", bytes=4096,
                                              warm=False, client_us=90.0)], t, {})
    assert len(errors) == 1 and "job 3" in errors[0], errors
    assert rows[1]["backend"]["total_us"] is None and rows[1]["client_us"] == 90.0, rows[1]
    rows, errors = summarize(jobs, t[:2], {})
    assert "4 jobs but 2 timing lines" in errors[0], errors
    c = compare([dict(name="one_batch", rows=[dict(case="c", direction="store", client_us=2.0)]),
                 dict(name="default", rows=[dict(case="c", direction="store", client_us=1.0)]),
                 dict(name="one_batch_again", rows=[dict(case="c", direction="store",
                                                         client_us=3.0)])])
    assert c == {"c store": {"one_batch": [2.0, 3.0], "default": [1.0]}}, c
    print("self test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
