"""GPU check of pools: two engines in two processes join one pool on kvoffloadd's CUDA
backend; A stores blocks of its torch KV cache, B (another process, other GPU memory) looks the
keys up, loads them into other block ids of its own cache and finds A's bytes, bitwise. Also:
a third engine naming another model identity is refused FAILED_PRECONDITION before anything is
allocated, and a store B makes is a hit for A and loads byte-exact into A's cache.

    KVOFFLOAD_DAEMON=.../kvoffloadd KVOFFLOAD_LIB=.../libkvoffload_c.so \
        PYTHONPATH=python python3 python/tests/gpu_pool.py

Run on the accelerator machine (tests/gpu_e2e/run_on_device.sh, stage tests); without a GPU it
says so and exits 0. Ends with one line "N passed, N failed".
"""

import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

LAYERS, N, BS, H, D = 4, 256, 16, 8, 128
PAGE = BS * H * D * 2  # bf16 bytes of one block of K (or V) in one layer
POOL = "gpu-pool"
IDENTITY = "llama-shaped bf16 kv=bf16 bs=16"
A_BLOCKS = list(range(10, 18))   # A stores these ...
B_BLOCKS = list(range(100, 108))  # ... B loads them here
B_STORE = list(range(30, 34))    # B stores these; A loads them into A_LOAD
A_LOAD = list(range(200, 204))
TIMEOUT_S = 60


def spec(kvo, engine_id, identity=IDENTITY):
    # Same budget for every member: the layout members agree on includes the rows per member.
    return kvo.EngineSpec(engine_id=engine_id, num_layers=LAYERS, page_bytes=2 * PAGE,
                          budget_bytes=64 << 20, pool=POOL, model_identity=identity)


def kv_cache(torch, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # A pad first: the caches are sub-allocations (offsets into allocations != 0).
    pad = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    kv = {"layer.%d" % i: torch.randn(2, N, BS, H, D, dtype=torch.bfloat16, device="cuda",
                                      generator=gen) for i in range(LAYERS)}
    return pad, kv


def blocks_of(kv, blocks):
    return {n: t[:, blocks].cpu() for n, t in kv.items()}


def wait_file(path):
    deadline = time.monotonic() + TIMEOUT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError("no " + path)
        time.sleep(0.02)


def member(name, sock, work_dir, q):
    """One engine of the pool in a process of its own. Puts ("ok"|"fail", name, text) on q."""
    try:
        import torch
        import kvoffload as kvo
        torch.cuda.set_device(0)
        seed = 1 if name == "a" else 2
        pad, kv = kv_cache(torch, seed)
        s = spec(kvo, "pool-" + name)
        scheduler = kvo.Scheduler.open(sock, s)
        worker = kvo.Worker.connect_cuda(sock, s, 0, kv, num_blocks=N)
        torch.cuda.synchronize()

        def store(job_id, blocks, keys):
            prepared = scheduler.prepare_store(keys)
            assert prepared.indices == list(range(len(keys))), prepared
            worker.submit_store(job_id, blocks, prepared.rows)
            worker.wait(job_id, timeout_s=TIMEOUT_S).check()
            scheduler.complete_store(keys)

        def load(job_id, blocks, keys, expected_file):
            states = scheduler.lookup(keys)
            assert states == [kvo.KeyState.HIT] * len(keys), states
            rows = scheduler.prepare_load(keys)
            neighbours = blocks_of(kv, [blocks[0] - 1, blocks[-1] + 1])
            worker.submit_load(job_id, blocks, rows)
            worker.wait(job_id, timeout_s=TIMEOUT_S).check()
            scheduler.complete_load(keys)
            torch.cuda.synchronize()
            expected = torch.load(expected_file)
            for n, t in kv.items():
                got = t[:, blocks].cpu()
                assert torch.equal(got.view(torch.int16), expected[n].view(torch.int16)), n
            after = blocks_of(kv, [blocks[0] - 1, blocks[-1] + 1])
            for n in kv:
                assert torch.equal(after[n], neighbours[n]), "neighbours of %s changed" % n

        a_keys = [b"pool-key-a-%d" % b for b in A_BLOCKS]
        b_keys = [b"pool-key-b-%d" % b for b in B_STORE]
        if name == "a":
            store(1, A_BLOCKS, a_keys)
            torch.save(blocks_of(kv, A_BLOCKS), os.path.join(work_dir, "a.pt.tmp"))
            os.rename(os.path.join(work_dir, "a.pt.tmp"), os.path.join(work_dir, "a.pt"))
            # A stays a member while B loads what it stored, then loads what B stored.
            wait_file(os.path.join(work_dir, "b.pt"))
            load(2, A_LOAD, b_keys, os.path.join(work_dir, "b.pt"))
            open(os.path.join(work_dir, "a.done"), "w").close()
        else:
            wait_file(os.path.join(work_dir, "a.pt"))
            load(1, B_BLOCKS, a_keys, os.path.join(work_dir, "a.pt"))
            store(2, B_STORE, b_keys)
            torch.save(blocks_of(kv, B_STORE), os.path.join(work_dir, "b.pt.tmp"))
            os.rename(os.path.join(work_dir, "b.pt.tmp"), os.path.join(work_dir, "b.pt"))
            wait_file(os.path.join(work_dir, "a.done"))
        worker.close()
        scheduler.close()
        del pad
        q.put(("ok", name, ""))
    except Exception:
        q.put(("fail", name, traceback.format_exc()))


def start_daemon(kvo_daemon):
    d = tempfile.mkdtemp(prefix="kvo-pool-", dir="/tmp")
    proc = subprocess.Popen([kvo_daemon, "--backend=cuda", "--runtime_dir=" + d,
                             "--metrics_address=", "--max_region_bytes=1GiB",
                             "--log_level=info"], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(d, "kvoffload.sock")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("kvoffloadd did not start (rc %s)" % proc.poll())
        time.sleep(0.05)
    return proc, d


def main():
    import torch
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device (gpu_pool.py runs on the accelerator machine)")
        print("0 passed, 0 failed")
        return 0
    import kvoffload as kvo
    results = []

    def check(name, ok, text=""):
        results.append(ok)
        print(("PASS " if ok else "FAIL ") + name, flush=True)
        if text:
            print(text, flush=True)

    proc, d = start_daemon(os.environ["KVOFFLOAD_DAEMON"])
    sock = os.path.join(d, "kvoffload.sock")
    try:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        procs = [ctx.Process(target=member, args=(n, sock, d, q)) for n in ("a", "b")]
        for p in procs:
            p.start()
        outcomes = {}
        deadline = time.monotonic() + 4 * TIMEOUT_S
        while len(outcomes) < 2 and time.monotonic() < deadline:
            try:
                status, name, text = q.get(timeout=1)
                outcomes[name] = (status, text)
            except Exception:
                if all(p.exitcode is not None for p in procs) and q.empty():
                    break
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        for name, what in (("a", "A stores, then loads B's store into its other blocks, bitwise"),
                           ("b", "B (another process) loads A's store into other blocks, "
                                 "bitwise, then stores for A")):
            status, text = outcomes.get(name, ("fail", "no outcome (exit %s)" %
                                               procs[0 if name == "a" else 1].exitcode))
            check("member %s: %s" % (name, what), status == "ok", text)

        # Another model identity: refused before anything is allocated, naming the field.
        try:
            kvo.Scheduler.open(sock, spec(kvo, "pool-c", identity="another model"))
        except kvo.KvoffloadError as e:
            check("another model identity is FAILED_PRECONDITION naming model_identity",
                  e.name == "FAILED_PRECONDITION" and "model_identity" in str(e), str(e))
        else:
            check("another model identity is FAILED_PRECONDITION naming model_identity", False,
                  "it was accepted")
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(d, ignore_errors=True)
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    return 0 if all(results) and results else 1


if __name__ == "__main__":
    sys.exit(main())
