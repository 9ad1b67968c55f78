"""The 1-block job latency from Python on the host backend: submit_store of one 4 KiB block and
wait for its verdict, 2000 times after 200 warm-up jobs; prints one JSON line: p50 and p99 in µs,
and per job the CPU µs and context switches of this process and of the daemon (less sensitive
than wall time to a machine shared with other work).

Runs the daemon named by $KVOFFLOAD_DAEMON with the Python package and C library on PYTHONPATH /
$KVOFFLOAD_LIB, so two builds can be compared on one machine, interleaved
(tests/bench/py_latency_ab.sh): the control path (client queues, C ABI, gRPC, the daemon's
engine) without a GPU. The CUDA figure is torch_bench.py --latency on the H200."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from kvoffload import EngineSpec, HostAllocation, Worker

PAGE = 4096
BLOCKS = 64


def usage(pid):
    """(CPU seconds, context switches) of every thread of `pid` so far."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu = switches = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return cpu, switches


def main():
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    d = tempfile.mkdtemp(prefix="kvo-lat-", dir="/tmp")
    proc = subprocess.Popen([os.environ["KVOFFLOAD_DAEMON"], "--backend=host", "--runtime_dir=" + d,
                             "--metrics_address=", "--log_level=warn",
                             "--max_region_bytes=64MiB"], stdin=subprocess.DEVNULL)
    try:
        sock = os.path.join(d, "kvoffload.sock")
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kvoffloadd did not start (rc %s)" % proc.poll())
            time.sleep(0.02)
        alloc = HostAllocation(PAGE * BLOCKS)
        spec = EngineSpec(engine_id="latency", num_layers=1, page_bytes=PAGE,
                          budget_bytes=PAGE * BLOCKS, rows_assigned_by_engine=True)
        w = Worker.connect_host(sock, spec, 0, [alloc.tensor(0, BLOCKS, PAGE, PAGE)])
        samples = []
        for i in range(jobs + 200):
            if i == 200:
                before = usage(os.getpid()), usage(proc.pid)
            b = i % BLOCKS
            t0 = time.perf_counter()
            w.submit_store(i + 1, [b], [b])
            w.wait(i + 1, timeout_s=10).check()
            if i >= 200:
                samples.append((time.perf_counter() - t0) * 1e6)
        after = usage(os.getpid()), usage(proc.pid)
        w.close()
        samples.sort()
        per_job = {}
        for who, b0, b1 in (("client", before[0], after[0]), ("daemon", before[1], after[1])):
            per_job[who + "_cpu_us"] = round((b1[0] - b0[0]) / jobs * 1e6, 1)
            per_job[who + "_switches"] = round((b1[1] - b0[1]) / jobs, 2)
        print(json.dumps({"latency_python_host_us": {
            "p50": round(samples[len(samples) // 2], 1),
            "p99": round(samples[int(len(samples) * 0.99)], 1), "n": jobs, **per_job}}))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
