"""Submit and round-trip latency of 1-block jobs after idle gaps (host backend, no GPU).

    KVOD=bazel-bin/daemon/kvoffloadd KVOFFLOAD_LIB=bazel-bin/client/libkvoffload_c.so \\
        PYTHONPATH=python python3 tests/bench/submit_gap.py [sleep|busy|spinners]

Starts a daemon (--backend=host), opens one engine and worker, warms up with 200 jobs, then per
gap between jobs (none, 1 ms, 10 ms) prints the p50 of the Submit call and the p50 / p90 of
submit → finished. The gap is a sleep (the default: the client's CPU may halt), a busy loop (it
may not), or a sleep with a SCHED_IDLE busy loop on every CPU (no CPU halts). What it shows on a
VM whose idle CPUs halt: how much of a job's latency is wake-ups rather than work. Used for the
client Watchdog A/B of 2026-12-03 (docs/benchmarks.md "Wake-ups on the submit path"): run it with
two KVOFFLOAD_LIB builds in turn against the same KVOD.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "sleep"
    import kvoffload as kvo
    from kvoffload.host import HostAllocation
    d = tempfile.mkdtemp(prefix="kvo-gap-")
    sock = os.path.join(d, "kvoffload.sock")
    daemon = subprocess.Popen([os.environ.get("KVOD", "bazel-bin/daemon/kvoffloadd"),
                               "--backend=host", "--runtime_dir=" + d, "--metrics_address=",
                               "--max_region_bytes=1GiB"], stderr=subprocess.DEVNULL)
    spinners = []
    try:
        while not os.path.exists(sock):
            if daemon.poll() is not None:
                sys.exit("kvoffloadd exited with %s" % daemon.returncode)
            time.sleep(0.02)
        if mode == "spinners":
            code = ("import os\nos.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
                    "while True: pass\n")
            spinners = [subprocess.Popen([sys.executable, "-c", code])
                        for _ in range(os.cpu_count())]
        mem = HostAllocation(64 << 20)
        spec = kvo.EngineSpec(engine_id="gap", num_layers=1, page_bytes=4096,
                              budget_bytes=64 * 4096, rows_assigned_by_engine=True)
        w = kvo.Worker.connect_host(sock, spec, 0, [mem.tensor(
            offset=0, num_blocks=64, block_stride_bytes=4096, page_bytes=4096)])
        job = 0

        def one():
            nonlocal job
            job += 1
            t0 = time.perf_counter_ns()
            w.submit_runs(job, "store", [(0, 0, 1)])
            t1 = time.perf_counter_ns()
            w.wait(job, timeout_s=10).check()
            t2 = time.perf_counter_ns()
            return (t1 - t0) / 1e3, (t2 - t0) / 1e3

        for _ in range(200):
            one()
        for gap in (0, 0.001, 0.01):
            subs, tots = [], []
            for _ in range(300 if gap < 0.01 else 100):
                if gap and mode == "busy":
                    end = time.perf_counter() + gap
                    while time.perf_counter() < end:
                        pass
                elif gap:
                    time.sleep(gap)
                a, b = one()
                subs.append(a)
                tots.append(b)
            tots.sort()
            print("%s gap %5.1f ms: submit p50 %6.1f µs, submit->finished p50 %6.1f p90 %6.1f"
                  % (mode, gap * 1e3, statistics.median(subs), statistics.median(tots),
                     tots[int(len(tots) * 0.9)]), flush=True)
        w.close()
    finally:
        for s in spinners:
            s.kill()
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
