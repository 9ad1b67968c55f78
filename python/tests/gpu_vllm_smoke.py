"""GPU check of kvoffload.vllm (run on the accelerator machine, not by CI): KvoffloadSpec built
by the pinned vLLM factory (the test double in vllm_double/, no vLLM needed) over kvoffloadd's
CUDA backend, with the worker's canonical KV tensors from torch's caching allocator:
  - flash_attention: per layer [2, num_blocks, block_size, heads, head_dim], split into K and V
    as vLLM canonicalises it;
  - mla: per layer [num_blocks, block_size, 576] (one latent tensor, use_mla);
  - transformers_model: a random-initialised Llama (transformers) runs a prompt; its real KV
    (past_key_values) is paged into FlashAttention blocks, stored, and comes back bitwise.
Stores are submitted right after KV writes queued on torch's current stream (the worker's event
orders the daemon's copy after them); loads land in other blocks, byte-exact.

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
MLA_PAGE = TOKENS_PER_BLOCK * 576 * 2  # bf16 bytes of one block of one MLA layer


def canonical(tensors, page):
    """CanonicalKVCaches of per-block tensors (num_blocks, ...), `page` bytes per block each."""
    return CanonicalKVCaches(
        tensors=[CanonicalKVCacheTensor(t, page) for t in tensors],
        group_data_refs=[[CanonicalKVCacheRef(i, page) for i in range(len(tensors))]])


def finished(worker, want):
    out = finished_results(worker, want)
    assert len(out) == want, out
    return out


def round_trip(sock, engine_id, tensors, page, layers, layer_page, write, use_mla=False):
    """Stores blocks 10..25 after write() fills them (queued on the current stream, behind a long
    GEMM), looks them up, zeroes every tensor, loads them into blocks 100..115 and checks every
    tensor's bytes there. Returns the loaded blocks' tensors' views (for callers to check more)."""
    extra = {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
             "cpu_bytes_to_use": 64 << 20, "engine_id": engine_id, "socket_path": sock}
    vllm_config, kv_cache_config = make_configs(extra, layers=layers, page=layer_page,
                                                use_mla=use_mla)
    spec = OffloadingSpecFactory.create_spec(vllm_config, kv_cache_config)
    manager = spec.get_manager()
    parallel_state.RANKS = (1, 0, 0)
    worker = OffloadingWorker()
    for src, dst, handler in spec.get_handlers(canonical(tensors, page)):
        worker.register_handler(src, dst, handler)
    blocks = list(range(10, 26))
    hashes = [("%s-%d" % (engine_id, b)).encode() for b in blocks]
    big = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):
        big = big @ big / 64
    write(blocks)
    golden = [t[blocks].clone() for t in tensors]
    out = manager.prepare_store(hashes)
    assert out.block_hashes_to_store == hashes
    assert worker.transfer_async(1, (GPULoadStoreSpec(blocks, group_sizes=(len(blocks),)),
                                     out.store_spec))
    r = finished(worker, 1)[1]
    assert r.success and r.transfer_size == len(blocks) * len(tensors) * page, r
    manager.complete_store(hashes)
    assert manager.lookup(hashes) == len(blocks)
    for t in tensors:
        t.zero_()
    load = manager.prepare_load(hashes)
    dst = list(range(100, 116))
    assert worker.transfer_async(2, (load, GPULoadStoreSpec(dst, group_sizes=(len(dst),))))
    assert finished(worker, 1)[2].success
    torch.cuda.synchronize()
    for i, (t, want) in enumerate(zip(tensors, golden)):
        assert torch.equal(t[dst], want), "tensor %d: the loaded blocks differ" % i
    manager.complete_load(hashes)
    worker.shutdown()
    return dst


def flash_attention(sock):
    pad = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # offsets != 0
    kv = [torch.zeros(2, N, TOKENS_PER_BLOCK, H, D, dtype=torch.bfloat16, device="cuda")
          for _ in range(LAYERS)]

    def write(blocks):
        for layer in kv:
            layer[:, blocks] = torch.randn_like(layer[:, blocks])

    round_trip(sock, "gpu-vllm", [half for layer in kv for half in (layer[0], layer[1])], HALF,
               LAYERS, 2 * HALF, write)
    del pad


def mla(sock):
    kv = [torch.zeros(N, TOKENS_PER_BLOCK, 576, dtype=torch.bfloat16, device="cuda")
          for _ in range(LAYERS)]

    def write(blocks):
        for layer in kv:
            layer[blocks] = torch.randn_like(layer[blocks])

    round_trip(sock, "gpu-vllm-mla", kv, MLA_PAGE, LAYERS, MLA_PAGE, write, use_mla=True)


def layer_kv(cache, i):
    """(keys, values) of layer i of a transformers cache, [batch, kv_heads, seq, head_dim]."""
    if hasattr(cache, "layers"):  # transformers >= 4.56 (DynamicCache of layers)
        return cache.layers[i].keys, cache.layers[i].values
    if hasattr(cache, "key_cache"):
        return cache.key_cache[i], cache.value_cache[i]
    return cache[i]


def transformers_model(sock):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    layers, kv_heads, head_dim = 2, 2, 64
    config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=kv_heads, head_dim=head_dim,
                         max_position_embeddings=1024)
    model = LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    tokens = 16 * TOKENS_PER_BLOCK
    ids = torch.randint(0, 1000, (1, tokens), device="cuda")
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    real = [layer_kv(cache, i) for i in range(layers)]
    assert real[0][0].shape == (1, kv_heads, tokens, head_dim), real[0][0].shape
    kv = [torch.zeros(2, N, TOKENS_PER_BLOCK, kv_heads, head_dim, dtype=torch.bfloat16,
                      device="cuda") for _ in range(layers)]

    def paged(x):  # [1, heads, tokens, dim] -> [tokens / block, block, heads, dim]
        return x[0].permute(1, 0, 2).reshape(16, TOKENS_PER_BLOCK, kv_heads, head_dim)

    def write(blocks):
        for layer, (k, v) in zip(kv, real):
            layer[0, blocks] = paged(k)
            layer[1, blocks] = paged(v)

    half = TOKENS_PER_BLOCK * kv_heads * head_dim * 2
    dst = round_trip(sock, "gpu-vllm-llama", [h for layer in kv for h in (layer[0], layer[1])],
                     half, layers, 2 * half, write)
    for layer, (k, v) in zip(kv, real):
        assert torch.equal(layer[0, dst], paged(k)) and torch.equal(layer[1, dst], paged(v)), \
            "the model's KV did not come back bitwise"


def main():
    results = []
    proc, d = gpu_smoke.start_daemon()
    sock = os.path.join(d, "kvoffload.sock")
    try:
        for case in (flash_attention, mla, transformers_model):
            try:
                case(sock)
                results.append(True)
                print("PASS %s" % case.__name__, flush=True)
            except Exception:
                results.append(False)
                print("FAIL %s" % case.__name__, flush=True)
                traceback.print_exc()
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(d, ignore_errors=True)
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
