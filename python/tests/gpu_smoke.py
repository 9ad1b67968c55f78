"""GPU end-to-end check of the Python package (run on the accelerator machine, not by bazel test):
kvoffloadd on its CUDA backend, torch KV caches in vLLM's per-layer [2, num_blocks, block_size,
heads, head_dim] layout registered with Worker.connect_cuda, and stores/loads ordered by the
worker's interprocess events.

    KVOFFLOAD_DAEMON=.../kvoffloadd KVOFFLOAD_LIB=.../libkvoffload_c.so \
        PYTHONPATH=python python3 python/tests/gpu_smoke.py

Ends with one line "N passed, N failed".
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import torch

import kvoffload as kvo

LAYERS, N, BS, H, D = 4, 256, 16, 8, 128
PAGE = BS * H * D * 2  # bf16 bytes of one block of K (or V) in one layer


def start_daemon():
    d = tempfile.mkdtemp(prefix="kvo-gpu-", dir="/tmp")
    proc = subprocess.Popen([os.environ["KVOFFLOAD_DAEMON"], "--backend=cuda",
                             "--runtime_dir=" + d, "--metrics_address=",
                             "--max_region_bytes=1GiB", "--log_level=info"],
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(d, "kvoffload.sock")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("kvoffloadd did not start (rc %s)" % proc.poll())
        time.sleep(0.05)
    return proc, d


def main():
    results = []

    def check(name, fn):
        try:
            fn()
            results.append(True)
            print("PASS", name, flush=True)
        except Exception:
            results.append(False)
            print("FAIL", name, flush=True)
            traceback.print_exc()

    print("library:", kvo.version(), "torch", torch.__version__, torch.cuda.get_device_name(0))
    proc, d = start_daemon()
    sock = os.path.join(d, "kvoffload.sock")
    try:
        torch.manual_seed(0)
        # Sub-allocated by the caching allocator (a pad first): offsets into allocations != 0.
        pad = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        kv = {"layer.%d" % i: torch.randn(2, N, BS, H, D, dtype=torch.bfloat16, device="cuda")
              for i in range(LAYERS)}
        spec = kvo.EngineSpec(engine_id="gpu-smoke", num_layers=LAYERS, page_bytes=2 * PAGE,
                              budget_bytes=64 << 20)
        views = kvo.kv_tensor_views(kv, num_blocks=N)
        assert len(views) == 2 * LAYERS and all(v.page_bytes == PAGE for v in views), views
        scheduler = kvo.Scheduler.open(sock, spec)
        worker = kvo.Worker.connect_cuda(sock, spec, 0, kv, num_blocks=N, num_events=4)
        info = worker.info
        print("registered:", info)
        assert info.device == 0 and info.num_events == 4
        assert info.worker_bytes_per_block == 2 * LAYERS * PAGE
        stream = torch.cuda.Stream()
        blocks = list(range(10, 18))
        keys = [b"gpu-%d" % b for b in blocks]

        def snapshot(bs):
            return {n: t[:, bs].clone() for n, t in kv.items()}

        def store_ordered_by_event():
            prepared = scheduler.prepare_store(keys)
            assert prepared.indices == list(range(len(keys)))
            with torch.cuda.stream(stream):
                torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the KV writes
                for t in kv.values():
                    t[:, blocks] = 7.0
            worker.record_event(0, stream)
            worker.submit_store(1, blocks, prepared.rows, event_index=0)
            done = worker.wait(1, timeout_s=30).check()
            assert done.bytes == len(blocks) * info.worker_bytes_per_block, done
            scheduler.complete_store(keys)
            torch.cuda.synchronize()

        def load_ordered_by_event():
            golden = snapshot(blocks)
            assert all(bool((g == 7.0).all()) for g in golden.values())
            rows = scheduler.prepare_load(keys)
            with torch.cuda.stream(stream):
                torch.cuda._sleep(200_000_000)
                for t in kv.values():
                    t[:, blocks] = 0.0  # the engine zeroes the blocks; the load must land after
            worker.record_event(1, stream)
            worker.submit_load(2, blocks, rows, event_index=1)
            worker.wait(2, timeout_s=30).check()
            worker.wait_event(1, stream)
            stream.synchronize()
            scheduler.complete_load(keys)
            for n, t in kv.items():
                assert torch.equal(t[:, blocks], golden[n]), n

        def load_into_other_blocks():
            other = list(range(100, 108))
            before = snapshot([99, 108])
            rows = scheduler.prepare_load(keys)
            worker.submit_load(3, other, rows)
            jobs = []
            deadline = time.monotonic() + 30
            while not jobs and time.monotonic() < deadline:
                jobs = worker.poll()
                time.sleep(0.01)
            assert [j.job_id for j in jobs] == [3] and jobs[0].ok, jobs
            scheduler.complete_load(keys)
            torch.cuda.synchronize()
            for n, t in kv.items():
                assert bool((t[:, other] == 7.0).all()), n
                assert torch.equal(t[:, [99, 108]], before[n]), n  # neighbours untouched

        def torch_stream_and_int_stream():
            worker.record_event(2, torch.cuda.current_stream())
            worker.wait_event(2, torch.cuda.current_stream().cuda_stream)
            worker.record_event(3)  # None: torch's current stream
            try:
                worker.record_event(4, stream)
            except kvo.KvoffloadError as e:
                assert e.name == "INVALID_ARGUMENT", e
            else:
                raise AssertionError("event 4 of a pool of 4 was accepted")

        def host_pointer_is_invalid():
            host = torch.empty(N * PAGE, dtype=torch.uint8)
            try:
                kvo.Worker.connect_cuda(sock, spec, 0, [(host.data_ptr(), N, PAGE, PAGE)])
            except kvo.KvoffloadError as e:
                assert e.name == "INVALID_ARGUMENT", e
                print("  host pointer:", e)
            else:
                raise AssertionError("a host pointer was accepted")

        check("store ordered by the worker's event", store_ordered_by_event)
        check("load ordered by the worker's event, then wait_event", load_ordered_by_event)
        check("load into other blocks, finished through poll", load_into_other_blocks)
        check("record/wait with torch streams, ints and None", torch_stream_and_int_stream)
        check("connect_cuda with a host pointer", host_pointer_is_invalid)
        worker.close()
        scheduler.close()
        del pad
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(d, ignore_errors=True)
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    return 0 if all(results) and results else 1


if __name__ == "__main__":
    sys.exit(main())
