"""GPU check of kvoffload.vllm (run on the accelerator machine, not by CI): KvoffloadSpec built
by the pinned vLLM factory (the test double in vllm_double/, no vLLM needed) over kvoffloadd's
CUDA backend; the worker's canonical KV tensors are torch tensors from the caching allocator in
FlashAttention's per-layer [2, num_blocks, block_size, heads, head_dim] layout split into K and V
as vLLM canonicalises them. Stores are submitted after KV writes queued on torch's current stream
(the worker's event orders the daemon's copy after them); loads land byte-exact.

    KVOFFLOAD_DAEMON=.../kvoffloadd KVOFFLOAD_LIB=.../libkvoffload_c.so \\
        PYTHONPATH=python python3 python/tests/gpu_vllm_smoke.py

Ends with one line "N passed, N failed".
"""

import os
import shutil
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "vllm_double"))
sys.path.insert(0, HERE)

import gpu_smoke  # noqa: E402  (start_daemon)
import kvoffload as kvo  # noqa: E402
from test_vllm_spec import TOKENS_PER_BLOCK, finished_results, make_configs  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.v1.kv_offload.factory import OffloadingSpecFactory  # noqa: E402
from vllm.v1.kv_offload.mediums import GPULoadStoreSpec  # noqa: E402
from vllm.v1.kv_offload.spec import (CanonicalKVCacheRef, CanonicalKVCaches,  # noqa: E402
                                     CanonicalKVCacheTensor)
from vllm.v1.kv_offload.worker.worker import OffloadingWorker  # noqa: E402

LAYERS, N, H, D = 4, 256, 8, 128
HALF = TOKENS_PER_BLOCK * H * D * 2  # bf16 bytes of one block of K (or V) of one layer


def canonical(kv):
    tensors = []
    for layer in kv:
        for half in (layer[0], layer[1]):  # K, V: each (num_blocks, ...)
            tensors.append(CanonicalKVCacheTensor(half, HALF))
    return CanonicalKVCaches(tensors=tensors,
                             group_data_refs=[[CanonicalKVCacheRef(i, HALF)
                                               for i in range(len(tensors))]])


def finished(worker, want):
    out = finished_results(worker, want)
    assert len(out) == want, out
    return out


def main():
    results = []
    proc, d = gpu_smoke.start_daemon()
    sock = os.path.join(d, "kvoffload.sock")
    try:
        def run():
            pad = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # offsets != 0
            kv = [torch.zeros(2, N, TOKENS_PER_BLOCK, H, D, dtype=torch.bfloat16, device="cuda")
                  for _ in range(LAYERS)]
            extra = {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
                     "cpu_bytes_to_use": 64 << 20, "engine_id": "gpu-vllm", "socket_path": sock}
            vllm_config, kv_cache_config = make_configs(extra, layers=LAYERS, page=2 * HALF)
            spec = OffloadingSpecFactory.create_spec(vllm_config, kv_cache_config)
            manager = spec.get_manager()
            parallel_state.RANKS = (1, 0, 0)
            worker = OffloadingWorker()
            for src, dst, handler in spec.get_handlers(canonical(kv)):
                worker.register_handler(src, dst, handler)
            blocks = list(range(10, 26))
            hashes = [b"gpu-vllm-%d" % b for b in blocks]
            # The "forward": KV written on the current stream after a long kernel, and the store
            # submitted right away; the worker's event makes the daemon wait for the writes.
            big = torch.randn(4096, 4096, device="cuda")
            for _ in range(20):
                big = big @ big / 64
            for layer in kv:
                layer[:, blocks] = torch.randn_like(layer[:, blocks])
            golden = [layer[:, blocks].clone() for layer in kv]
            out = manager.prepare_store(hashes)
            assert out.block_hashes_to_store == hashes
            assert worker.transfer_async(1, (GPULoadStoreSpec(blocks, group_sizes=(16,)),
                                             out.store_spec))
            r = finished(worker, 1)[1]
            assert r.success and r.transfer_size == len(blocks) * 2 * LAYERS * HALF, r
            manager.complete_store(hashes)
            assert manager.lookup(hashes) == len(blocks)
            for layer in kv:
                layer.zero_()
            load = manager.prepare_load(hashes)
            dst = list(range(100, 116))
            assert worker.transfer_async(2, (load, GPULoadStoreSpec(dst, group_sizes=(16,))))
            assert finished(worker, 1)[2].success
            torch.cuda.synchronize()
            for layer, want in zip(kv, golden):
                assert torch.equal(layer[:, dst], want), "load differs"
            manager.complete_load(hashes)
            worker.shutdown()
            del pad

        try:
            run()
            results.append(True)
            print("PASS store_lookup_load_byte_exact", flush=True)
        except Exception:
            results.append(False)
            print("FAIL store_lookup_load_byte_exact", flush=True)
            traceback.print_exc()
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(d, ignore_errors=True)
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
