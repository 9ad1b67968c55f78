"""GPU check of kvoffload.StagedWorker (copy path v3's opt-in worker-side reorder) on kvoffloadd's
CUDA backend, with vLLM-shaped per-layer bf16 caches (sub-allocations, random blocks):

  1. a staged store (chunks through 3 staging buffers) is loaded by a plain Worker registered
     with the same tensors into other blocks, bitwise, and the reverse: a plain store is loaded
     by a staged worker, its blocks bitwise right once the verdict is OK (the rows are the same
     bytes either way);
  2. the caller's stream orders the store: blocks written on it just before submit_store (behind
     a slow GEMM still running) are stored as written;
  3. a chunk the daemon refuses fails its job; its blocks keep their bytes, the others land.

    KVOFFLOAD_DAEMON=.../kvoffloadd KVOFFLOAD_LIB=.../libkvoffload_c.so \
        PYTHONPATH=python python3 python/tests/gpu_staged.py

Run on the accelerator machine (tests/gpu_e2e/run_on_device.sh, stage tests); without a GPU it
says so and exits 0. Ends with one line "N passed, N failed".
"""

import os
import sys
import traceback

from gpu_pool import start_daemon

LAYERS, N, BS, H, D = 6, 300, 16, 8, 64
TIMEOUT_S = 60


def main():
    import shutil
    import torch
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device (gpu_staged.py runs on the accelerator machine)")
        print("0 passed, 0 failed")
        return 0
    import kvoffload as kvo
    torch.cuda.set_device(0)
    results = []

    def check(name, ok, text=""):
        results.append(bool(ok))
        print(("PASS " if ok else "FAIL ") + name, flush=True)
        if text and not ok:
            print(text, flush=True)

    proc, d = start_daemon(os.environ["KVOFFLOAD_DAEMON"])
    sock = os.path.join(d, "kvoffload.sock")
    try:
        gen = torch.Generator(device="cuda").manual_seed(3)
        pad = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # noqa: F841 — offsets
        kv = {"layer.%d" % i: torch.randn(2, N, BS, H, D, dtype=torch.bfloat16, device="cuda",
                                          generator=gen) for i in range(LAYERS)}
        page = BS * H * D * 2
        spec = kvo.EngineSpec(engine_id="staged-gpu", num_layers=LAYERS, page_bytes=2 * page,
                              budget_bytes=256 << 20)
        sched = kvo.Scheduler.open(sock, spec)
        g = torch.Generator().manual_seed(4)
        perm = torch.randperm(N, generator=g).tolist()

        def blocks_of(blocks):
            idx = torch.tensor(blocks, device="cuda")
            return [t.index_select(1, idx).clone() for t in kv.values()]

        def same(a, b):
            return all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(a, b))

        def poison(blocks):
            idx = torch.tensor(blocks, device="cuda")
            for t in kv.values():
                t.index_fill_(1, idx, float("nan"))

        def staged():
            # 3 buffers of 7 blocks: a 40-block job is 6 chunks.
            return kvo.StagedWorker.connect_cuda(sock, spec, 0, kv, num_blocks=N,
                                                 staging_bytes=3 * 7 * 2 * LAYERS * page,
                                                 buffers=3)

        try:
            # 1. staged store -> plain load, plain store -> staged load.
            keys = [b"s%d" % i for i in range(40)]
            src, dst = perm[:40], perm[40:80]
            golden = blocks_of(src)
            w = staged()
            w.submit_store(1, src, sched.prepare_store(keys).rows)
            v = w.wait(1, TIMEOUT_S)
            check("the 40-block store's 5 full chunks were CUDA graph replays, its 6th op by op",
                  w.uses_cuda_graphs and w.graph_replays == 5, "replays %d" % w.graph_replays)
            sched.complete_store(keys)
            w.close()
            plain = kvo.Worker.connect_cuda(sock, spec, 0, kv, num_blocks=N)
            poison(dst)
            torch.cuda.synchronize()
            plain.submit_load(2, dst, sched.prepare_load(keys))
            plain.wait(2, TIMEOUT_S).check()
            sched.complete_load(keys)
            check("a staged store (6 chunks, 3 buffers) is what a plain worker loads, bitwise",
                  v.ok and v.bytes == 40 * 2 * LAYERS * page and same(blocks_of(dst), golden),
                  v.message)
            keys2 = [b"p%d" % i for i in range(40)]
            src2, dst2 = perm[80:120], perm[120:160]
            golden2 = blocks_of(src2)
            plain.submit_store(3, src2, sched.prepare_store(keys2).rows)
            plain.wait(3, TIMEOUT_S).check()
            sched.complete_store(keys2)
            plain.close()
            # The same load op by op (cuda_graphs=False) brings the same bytes.
            eager = kvo.StagedWorker.connect_cuda(sock, spec, 0, kv, num_blocks=N,
                                                  staging_bytes=3 * 7 * 2 * LAYERS * page,
                                                  buffers=3, cuda_graphs=False)
            dst2e = perm[242:282]
            poison(dst2e)
            eager.submit_load(40, dst2e, sched.prepare_load(keys2))
            ve = eager.wait(40, TIMEOUT_S)
            sched.complete_load(keys2)
            eager.close()
            check("without CUDA graphs a staged load brings the same bytes",
                  ve.ok and not eager.uses_cuda_graphs and eager.graph_replays == 0 and
                  same(blocks_of(dst2e), golden2),
                  ve.message)
            w = staged()
            poison(dst2)
            w.submit_load(4, dst2, sched.prepare_load(keys2))
            v = w.wait(4, TIMEOUT_S)
            sched.complete_load(keys2)
            check("a plain store is what a staged worker loads, bitwise, at its verdict",
                  v.ok and same(blocks_of(dst2), golden2), v.message)
            check("a staged load's full chunks are CUDA graph replays (5 of 6)",
                  w.graph_replays == 5, "replays %d" % w.graph_replays)

            # 2. The caller's stream orders the store: a long kernel, then the blocks' writes.
            keys3 = [b"o%d" % i for i in range(21)]
            src3 = perm[160:181]
            busy = torch.randn(8192, 8192, device="cuda")
            idx3 = torch.tensor(src3, device="cuda")
            for _ in range(8):
                busy = busy @ busy / 100  # ~ms of work queued ahead of the writes
            for i, t in enumerate(kv.values()):
                t.index_fill_(1, idx3, float(i + 1))
            w.submit_store(5, src3, sched.prepare_store(keys3).rows)  # stream=None: current
            v = w.wait(5, TIMEOUT_S)
            sched.complete_store(keys3)
            golden3 = blocks_of(src3)
            dst3 = perm[181:202]
            poison(dst3)
            w.submit_load(6, dst3, sched.prepare_load(keys3))
            v2 = w.wait(6, TIMEOUT_S)
            sched.complete_load(keys3)
            check("a store follows the caller's stream (writes queued behind a busy GEMM)",
                  v.ok and v2.ok and same(blocks_of(dst3), golden3) and
                  all(bool((t.index_select(1, torch.tensor(dst3, device="cuda")) == i + 1).all())
                      for i, t in enumerate(kv.values())), v.message + v2.message)

            # 3. A refused chunk: its blocks keep their bytes, the others land.
            rows = sched.prepare_load(keys)
            bad = list(rows)
            bad[10] = w.info.num_rows + 1  # chunk 1 (rows 7..13)
            dst4 = perm[202:242]
            before = blocks_of(dst4)
            w.submit_load(7, dst4, bad)
            v = w.wait(7, TIMEOUT_S)
            sched.complete_load(keys)
            after = blocks_of(dst4)
            ok_chunks = all(torch.equal(a[:, list(range(0, 7)) + list(range(14, 40))].view(
                torch.int16), g_[:, list(range(0, 7)) + list(range(14, 40))].view(torch.int16))
                for a, g_ in zip(after, golden))
            kept = all(torch.equal(a[:, 7:14].view(torch.int16), b[:, 7:14].view(torch.int16))
                       for a, b in zip(after, before))
            check("a refused chunk fails its job (OUT_OF_RANGE); its blocks keep their bytes, "
                  "the other chunks land",
                  not v.ok and v.code == kvo.StatusCode.OUT_OF_RANGE and ok_chunks and kept,
                  "%s %s ok_chunks=%s kept=%s" % (v.code_name, v.message, ok_chunks, kept))
            w.close()
        except Exception:  # noqa: BLE001
            check("no exception", False, traceback.format_exc())
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(d, ignore_errors=True)
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    return 0 if all(results) and results else 1


if __name__ == "__main__":
    sys.exit(main())
