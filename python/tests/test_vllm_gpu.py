"""GPU check of kvoffload.vllm for every supported vLLM release (run on the accelerator
machine, not by CI): the spec built by each release's factory (its test double,
vllm_double/<double>, no vLLM needed) over kvoffloadd's CUDA backend, the worker side with
canonical KV tensors from torch's caching allocator:

  - per_layer: per layer [2, num_blocks, block_size, heads, head_dim], split into K and V as
    vLLM 0.20 canonicalises FlashAttention's layout;
  - cross_layer: one [num_blocks, layers, 2, block_size, heads, head_dim] tensor (vLLM's
    cross-layer layout, one canonical tensor of all layers' pages);
  - mla: per layer [num_blocks, block_size, 576] (use_mla);
  - mid_block: offloaded blocks of 2 GPU blocks, a load starting at the second GPU block of
    the first offloaded block (sub-row ranges).
Stores are submitted right after KV writes queued on torch's current stream (behind a long
GEMM; the worker's CUDA event orders the daemon's copy after them); loads land in other blocks
and are compared bitwise.

    KVOFFLOAD_DAEMON=.../kvoffloadd KVOFFLOAD_LIB=.../libkvoffload_c.so \\
        PYTHONPATH=python python3 python/tests/test_vllm_gpu.py

Ends with one line "N passed, N failed" (every release's double together).
"""

import os
import shutil
import subprocess
import sys
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
N, H, D, TOKENS = 256, 8, 128, 16


def load_tests(loader, tests, pattern):
    """Not part of CI's discovery (it needs a GPU): run this file directly."""
    return unittest.TestSuite()


def start_daemon():
    import tempfile
    d = tempfile.mkdtemp(prefix="kvo-gpu-", dir="/tmp")
    proc = subprocess.Popen([os.environ["KVOFFLOAD_DAEMON"], "--backend=cuda",
                             "--runtime_dir=" + d, "--metrics_address=",
                             "--max_region_bytes=1GiB", "--log_level=warn"],
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(d, "kvoffload.sock")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("kvoffloadd did not start (rc %s)" % proc.poll())
        time.sleep(0.05)
    return proc, d


class CudaKv:
    """Canonical KV tensors (each (num_blocks, ...)) and the blocks' bytes to compare."""

    def __init__(self, tensors, page):
        self.tensors = tensors
        self.page = page

    def canonical(self, mod):
        return mod.CanonicalKVCaches(
            tensors=[mod.CanonicalKVCacheTensor(t, self.page) for t in self.tensors],
            group_data_refs=[[mod.CanonicalKVCacheRef(i, self.page)
                              for i in range(len(self.tensors))]])

    def snapshot(self, blocks):
        return [t[blocks].clone() for t in self.tensors]

    def zero(self):
        for t in self.tensors:
            t.zero_()


def round_trip(G, sock, name, kv, layers, layer_page, write, use_mla=False, bpr=1):
    import torch
    from test_vllm_generations import keys
    extra = {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
             "cpu_bytes_to_use": 32 << 20, "engine_id": "%s-%s" % (name, G.name),
             "socket_path": sock}
    if bpr > 1:
        extra["block_size"] = bpr * TOKENS
    spec = G.create(extra, layers=layers, page=layer_page, use_mla=use_mla)
    manager = spec.get_manager()
    w, _ = G.worker(G.create(extra, layers=layers, page=layer_page, use_mla=use_mla),
                    kv_class=lambda: kv)
    blocks = list(range(10, 26))
    hashes = keys(name, len(blocks) // bpr)
    big = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):
        big = big @ big / 64
    write(blocks)  # queued behind the GEMM on the current stream
    golden = kv.snapshot(blocks)
    out = G.prepare_store(manager, hashes)
    assert out.keys_to_store == hashes
    assert w.store(1, G.gpu(blocks), out.store_spec)
    r = w.finished(1)[1]
    assert r.success and r.transfer_size == len(blocks) * len(kv.tensors) * kv.page, r
    G.complete_store(manager, hashes)
    deadline = time.monotonic() + 10
    while G.hits(manager, hashes) < len(hashes) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert G.hits(manager, hashes) == len(hashes)
    kv.zero()
    load = G.prepare_load(manager, hashes)
    first = 1 if bpr > 1 else 0  # mid_block: the first GPU block is in the GPU prefix cache
    dst = list(range(100, 100 + len(blocks) - first))
    assert w.load(2, load, G.gpu(dst, first_index=first))
    assert w.finished(1)[2].success
    torch.cuda.synchronize()
    from kvoffload.vllm import gen_common
    errors = set()
    for wc in list(gen_common._CORES):
        errors |= wc.take_load_error_blocks()
    assert not errors, "load errors %s" % errors
    for i, (t, want) in enumerate(zip(kv.tensors, golden)):
        assert torch.equal(t[dst], want[first:]), "tensor %d: the loaded blocks differ" % i
    G.complete_load(manager, hashes)
    w.shutdown()
    manager.shutdown()


def per_layer(G, sock, layers=4):
    import torch
    kv = [torch.zeros(2, N, TOKENS, H, D, dtype=torch.bfloat16, device="cuda")
          for _ in range(layers)]
    half = TOKENS * H * D * 2

    def write(blocks):
        for layer in kv:
            layer[:, blocks] = torch.randn_like(layer[:, blocks])
    round_trip(G, sock, "per-layer", CudaKv([h for layer in kv for h in (layer[0], layer[1])],
                                            half), layers, 2 * half, write)


def cross_layer(G, sock, layers=4, bpr=1, name="cross-layer"):
    import torch
    kv = torch.zeros(N, layers, 2, TOKENS, H, D, dtype=torch.bfloat16, device="cuda")
    page = layers * 2 * TOKENS * H * D * 2

    def write(blocks):
        kv[blocks] = torch.randn_like(kv[blocks])
    round_trip(G, sock, name, CudaKv([kv], page), layers, page // layers, write, bpr=bpr)


def mla(G, sock, layers=4):
    import torch
    kv = [torch.zeros(N, TOKENS, 576, dtype=torch.bfloat16, device="cuda")
          for _ in range(layers)]
    page = TOKENS * 576 * 2

    def write(blocks):
        for layer in kv:
            layer[blocks] = torch.randn_like(layer[blocks])
    round_trip(G, sock, "mla", CudaKv(kv, page), layers, page, write, use_mla=True)


def mid_block(G, sock):
    cross_layer(G, sock, bpr=2, name="mid-block")


def run_generation(generation):
    sys.path.insert(0, HERE)
    import test_vllm_generations as suite
    G = suite.setup_generation(generation)
    suite.connector_class()  # loaded, as in vLLM: the load-error path is wired
    import torch
    results = []
    proc, d = start_daemon()
    sock = os.path.join(d, "kvoffload.sock")
    print("%s: torch %s on %s" % (generation, torch.__version__, torch.cuda.get_device_name(0)))
    try:
        for case in (per_layer, cross_layer, mla, mid_block):
            try:
                case(G, sock)
                results.append(True)
                print("PASS %s %s" % (generation, case.__name__), flush=True)
            except Exception:
                results.append(False)
                print("FAIL %s %s" % (generation, case.__name__), flush=True)
                traceback.print_exc()
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(d, ignore_errors=True)
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
    return 0 if all(results) else 1


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--generation":
        return run_generation(sys.argv[2])
    passed = failed = 0
    sys.path.insert(0, HERE)
    import vllm_signatures
    for generation in vllm_signatures.DOUBLES_IN_USE:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--generation",
                              generation], capture_output=True, text=True, timeout=900)
        sys.stdout.write(out.stdout)
        sys.stdout.write(out.stderr[-6000:])
        for line in out.stdout.splitlines():
            if line.startswith("PASS "):
                passed += 1
            elif line.startswith("FAIL "):
                failed += 1
        if out.returncode != 0 and not any(l.startswith("FAIL ") for l in
                                           out.stdout.splitlines()):
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
