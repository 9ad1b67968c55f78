"""TTFT table (copy path v3): what a recomputed prefix costs against bringing its KV back.

A random-initialised Llama-3-8B-shaped model (transformers, bf16, 32 layers, 32 query heads,
8 KV heads, head dim 128; no download) and prompts of 4k, 16k and 32k random tokens. Per prompt:

  recompute_ms   prefill of the prompt (the base model over every token, then the LM head on the
                 last one): what a prefix that is not cached costs; median of 3 after a warm-up
  kvoffload_ms   the prefix's KV (vLLM's cross-layer layout, [num_blocks, 32 layers, K/V, 16
                 tokens, 8 heads, 128]: 2 MiB blocks) stored once through the kvoffload Python
                 package, then loaded back into other (random) block ids: submit -> finished,
                 median of 5 after a warm-up. Daemon default flags (no MPS here: copy engines).
  inprocess_ms   the same bytes from pinned host memory into the same block ids inside the model's
                 process: one non_blocking copy_ per 2 MiB block on a side stream (what vLLM's
                 swap_blocks does), median of 5 after a warm-up
  link_ms        kv_bytes / the H2D ceiling of the same run (one contiguous pinned copy of 1 GiB,
                 torch_bench.ceiling)
  logits_bitwise the next token's logits computed from the loaded blocks equal, bit for bit, the
                 ones computed from the original blocks (both caches built the same way: the
                 prefix's KV gathered from paged blocks, one decode step of the prompt's last
                 token); the loaded blocks are also compared byte for byte first

Optional, with --disk_tier_dir DIR (a directory on the node's local disk; O_DIRECT must work):

  from_disk_ms   the prefix brought back from the disk tier: a second daemon with
                 --disk_tier_path=DIR/<tokens> and an indexed engine ("ttft-disk", a region of the
                 prefix's rows) stores the prefix from the same source blocks (one key a block),
                 its spills are awaited (kvoffload_tier_spills_total on its metrics endpoint), the
                 daemon is restarted (a new, empty region; the same disk) and the time is taken
                 from the first Lookup to the load's finish: Lookup every 1 ms until every key is
                 HIT (the tier's promotion into the region), PrepareLoad, one load job into the
                 same destination block ids (poisoned first), CompleteLoad; the destination
                 blocks are then compared byte for byte with the source. from_disk_promote_ms is
                 the Lookup-to-all-HIT part. --tier_promote_timeout_ms=60000 there, so that the
                 whole promotion is timed; whether it fits the default bound (500 ms, past which
                 vLLM would recompute) is reported as within_default_bound.

The blocks hold the KV of the prompt's first T-1 tokens (T/16 blocks of 2 MiB: 512 MiB at 4k).
Also measured, after every job: the daemon's GPU memory (nvidia-smi, the daemon's pid) against a
bare CUDA context (a process that only calls cudaFree(0), lazy module loading).

    KVOFFLOAD_DAEMON=.../kvoffloadd KVOFFLOAD_LIB=.../libkvoffload_c.so \
        PYTHONPATH=python python3 tests/bench/gpu/ttft_bench.py > ttft.jsonl
    # with the 'from disk' column (tests/gpu_e2e/run_on_device.sh stage ttft_disk):
    ... python3 tests/bench/gpu/ttft_bench.py --disk_tier_dir /var/tmp/kvo-ttft-tier > ttft.jsonl
    # here, from the run's files: merge into docs/benchmarks.{json,md}
    python3 tests/bench/gpu/ttft_bench.py --merge runs/<run>/ttft.jsonl --commit C --date D
"""

import json
import os
import statistics
import subprocess
import sys
import time

GIB = 1 << 30
LAYERS, HEADS, KV_HEADS, HEAD_DIM = 32, 32, 8, 128
BLOCK_TOKENS = 16  # 32 layers x K/V x 16 tokens x 8 heads x 128 x 2 bytes = 2 MiB
PROMPTS = (4096, 16384, 32768)


def emit(**row):
    print(json.dumps(row), flush=True)


def gpu_mib_of(pid):
    """GPU memory nvidia-smi attributes to `pid` (MiB), or None."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid) and fields[1].isdigit():
            return int(fields[1])
    return None


FLOOR = r"""
import ctypes, sys, time
for name in sys.argv[1:]:
    try:
        rt = ctypes.CDLL(name)
        break
    except OSError:
        rt = None
if rt is None or rt.cudaFree(ctypes.c_void_p(0)) != 0:
    sys.exit(3)
print("ready", flush=True)
time.sleep(30)
"""


def context_floor_mib():
    """A bare CUDA context: a process that calls cudaFree(0) and nothing else."""
    import glob
    import torch
    candidates = sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia",
                                               "cu*", "lib", "libcudart.so*")))
    candidates += sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia",
                                                "cuda_runtime", "lib", "libcudart.so*")))
    candidates += ["/usr/local/cuda/lib64/libcudart.so", "libcudart.so"]
    p = subprocess.Popen([sys.executable, "-c", FLOOR] + candidates, stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, CUDA_MODULE_LOADING="LAZY"))
    try:
        if p.stdout.readline().strip() != "ready":
            return None
        time.sleep(0.5)
        return gpu_mib_of(p.pid)
    finally:
        p.kill()
        p.wait()


def build_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, rope_theta=500000.0,
                      max_position_embeddings=65536, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):  # initialised on the GPU: seconds, not minutes on the CPU
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    attn = getattr(model.config, "_attn_implementation", None)
    if attn not in ("sdpa", "flash_attention_2"):
        # Eager attention would materialise 32k x 32k scores per head and run out of memory.
        raise RuntimeError("attention implementation %r, not sdpa" % attn)
    return model.eval()


def layer_kv(cache, l):
    """(K, V) of layer l, each [1, KV_HEADS, tokens, HEAD_DIM], across transformers versions."""
    if hasattr(cache, "layers"):
        return cache.layers[l].keys, cache.layers[l].values
    if hasattr(cache, "key_cache"):
        return cache.key_cache[l], cache.value_cache[l]
    return cache[l][0], cache[l][1]


def next_logits(model, kv, blocks, prefix, last_token):
    """Logits of the token after the prompt: the prefix's KV gathered from paged `blocks`, one
    decode step of the prompt's last token."""
    import torch
    from transformers import DynamicCache
    cache = DynamicCache()
    paged = kv[blocks]  # [n, LAYERS, 2, BLOCK_TOKENS, KV_HEADS, HEAD_DIM]
    for l in range(LAYERS):
        k = paged[:, l, 0].reshape(-1, KV_HEADS, HEAD_DIM)[:prefix].transpose(0, 1)[None]
        v = paged[:, l, 1].reshape(-1, KV_HEADS, HEAD_DIM)[:prefix].transpose(0, 1)[None]
        cache.update(k.contiguous(), v.contiguous(), l)
    ids = torch.tensor([[last_token]], device="cuda")
    pos = torch.tensor([[prefix]], device="cuda")
    with torch.no_grad():
        try:
            out = model(input_ids=ids, past_key_values=cache, position_ids=pos,
                        cache_position=pos[0], use_cache=True)
        except TypeError:  # a transformers without cache_position derives it from the cache
            out = model(input_ids=ids, past_key_values=cache, position_ids=pos, use_cache=True)
    return out.logits[0, -1].clone()


def metric(port, name):
    """The sum of a metric's samples on a daemon's /metrics (every label set), or None."""
    import urllib.request
    try:
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read()
    except OSError:
        return None
    total, seen = 0.0, False
    for line in text.decode().splitlines():
        if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def free_port():
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def from_disk(kv, src_list, dst_blocks, block_bytes, tokens, disk_dir, num_blocks):
    """The 'from disk' column (module docstring): store the prefix through a disk-tier daemon,
    restart it, then Lookup until HIT + load. Returns the fields for the ttft row."""
    import shutil
    import torch
    import kvoffload as kvo
    from torch_bench import start_daemon
    n = len(src_list)
    tier = os.path.join(disk_dir, "t%d" % tokens)
    shutil.rmtree(tier, ignore_errors=True)
    os.makedirs(tier)
    spec = kvo.EngineSpec(engine_id="ttft-disk", num_layers=LAYERS,
                          page_bytes=block_bytes // LAYERS, budget_bytes=n * block_bytes,
                          rows_assigned_by_engine=False, model_identity="ttft-bench")
    keys = ["ttft-%d-%d" % (tokens, i) for i in range(n)]

    def start():
        port = free_port()
        proc, sock = start_daemon([
            "--disk_tier_path=" + tier, "--disk_tier_bytes=%d" % ((n + 16) * (block_bytes + 4096)),
            "--disk_tier_row_bytes=%d" % block_bytes, "--tier_promote_timeout_ms=60000",
            "--metrics_address=127.0.0.1:%d" % port])
        sched = kvo.Scheduler.open(sock, spec)
        w = kvo.Worker.connect_cuda(sock, spec, 0,
                                    [(kv.data_ptr(), num_blocks, block_bytes, block_bytes)],
                                    num_events=1)
        return proc, port, sched, w

    def stop(proc, sched, w):
        w.close()
        sched.close()
        proc.terminate()
        proc.wait(timeout=60)

    proc, port, sched, w = start()
    try:
        ps = sched.prepare_store(keys)
        w.submit_store(1, [src_list[i] for i in ps.indices], ps.rows)
        w.wait(1, timeout_s=120).check()
        sched.complete_store(ps.keys)
        t = time.monotonic()
        while (metric(port, "kvoffload_tier_spills_total") or 0) < n:
            if time.monotonic() - t > 300:
                raise RuntimeError("the prefix was not spilled in 300 s")
            time.sleep(0.01)
        spill_s = time.monotonic() - t
    finally:
        stop(proc, sched, w)
    proc, port, sched, w = start()  # a new daemon: an empty region, the same disk
    try:
        kv[dst_blocks] = float("nan")
        torch.cuda.synchronize()
        dst_list = dst_blocks.tolist()
        lookups = 0
        t0 = time.monotonic()
        while True:
            states = sched.lookup(keys)
            lookups += 1
            if all(s == kvo.KeyState.HIT for s in states):
                break
            if any(s == kvo.KeyState.MISS for s in states):
                raise RuntimeError("a key of the prefix is a MISS after the restart")
            time.sleep(0.001)
        promote_ms = (time.monotonic() - t0) * 1e3
        rows = sched.prepare_load(keys)
        w.submit_load(2, dst_list, rows)
        w.wait(2, timeout_s=120).check()
        from_disk_ms = (time.monotonic() - t0) * 1e3
        sched.complete_load(keys)
        exact = bool(torch.equal(kv[dst_blocks].view(torch.int16),
                                 kv[torch.tensor(src_list, device="cuda")].view(torch.int16)))
        promotions = metric(port, "kvoffload_tier_promotions_total")
    finally:
        stop(proc, sched, w)
        shutil.rmtree(tier, ignore_errors=True)
    return {"from_disk_ms": round(from_disk_ms, 2), "from_disk_promote_ms": round(promote_ms, 2),
            "from_disk_exact": exact, "from_disk_lookups": lookups,
            "from_disk_promotions": promotions, "within_default_bound": promote_ms <= 500,
            "from_disk_spill_wait_s": round(spill_s, 3),
            "from_disk_promote_gbps": round(n * block_bytes / promote_ms / 1e6, 3)}


def run(disk_dir=None):
    import torch
    import kvoffload as kvo
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    # Default daemon flags (a 12 GiB region cap covers the 4 GiB here); medians after a warm-up.
    from torch_bench import ceiling, start_daemon, timed

    def median_ms(fn, reps):
        return timed(fn, reps) * 1e3

    torch.cuda.init()
    dev = torch.cuda.get_device_name(0)
    max_blocks = PROMPTS[-1] // BLOCK_TOKENS
    block_bytes = LAYERS * 2 * BLOCK_TOKENS * KV_HEADS * HEAD_DIM * 2
    assert block_bytes == 2 << 20
    # H2D ceiling of this run: one contiguous pinned copy of 1 GiB.
    ceiling_gbps = ceiling(GIB)[1]
    emit(device=dev, torch=torch.__version__, ceiling_h2d_gbps=round(ceiling_gbps, 2))

    model = build_model()
    import transformers
    emit(transformers=transformers.__version__)
    # Paged cache: room for the largest prompt twice (original and loaded blocks) and a few more;
    # a block count no other dim has, so the block dim is unambiguous.
    num_blocks = 2 * max_blocks + 11
    kv = torch.empty(num_blocks, LAYERS, 2, BLOCK_TOKENS, KV_HEADS, HEAD_DIM,
                     dtype=torch.bfloat16, device="cuda")
    kv.normal_()  # random bytes in every block, padding included
    proc, sock = start_daemon()
    try:
        spec = kvo.EngineSpec(engine_id="ttft", num_layers=LAYERS, page_bytes=block_bytes // LAYERS,
                              budget_bytes=max_blocks * block_bytes, rows_assigned_by_engine=True)
        w = kvo.Worker.connect_cuda(sock, spec, 0,
                                    [(kv.data_ptr(), num_blocks, block_bytes, block_bytes)],
                                    num_events=1)
        job = 0
        gen = torch.Generator(device="cpu")
        gen.manual_seed(17)
        for tokens in PROMPTS:
            prompt = torch.randint(0, 128256, (1, tokens), generator=gen).cuda()
            prefix = tokens - 1
            n = (prefix + BLOCK_TOKENS - 1) // BLOCK_TOKENS
            perm = torch.randperm(num_blocks, generator=gen)
            src, dst_blocks = perm[:n].cuda(), perm[n:2 * n].cuda()
            rows = list(range(n))

            def prefill():
                with torch.no_grad():
                    out = model.model(input_ids=prompt, use_cache=True)
                    logits = model.lm_head(out.last_hidden_state[:, -1:])
                return out, logits

            recompute_ms = median_ms(prefill, 3)
            out, prefill_logits = prefill()
            # The prefix's KV into the source blocks, cross-layer layout.
            with torch.no_grad():
                for l in range(LAYERS):
                    k, v = layer_kv(out.past_key_values, l)
                    for which, t in ((0, k), (1, v)):
                        flat = t[0, :, :prefix].transpose(0, 1)  # [prefix, KV_HEADS, HEAD_DIM]
                        paged = torch.zeros(n * BLOCK_TOKENS, KV_HEADS, HEAD_DIM,
                                            dtype=t.dtype, device="cuda")
                        paged[:prefix] = flat
                        kv[src, l, which] = paged.view(n, BLOCK_TOKENS, KV_HEADS, HEAD_DIM)
            del out
            torch.cuda.synchronize()
            kv_bytes = n * block_bytes
            src_list, dst_list = src.tolist(), dst_blocks.tolist()

            job += 1
            w.submit_store(job, src_list, rows)
            w.wait(job, timeout_s=120).check()

            def kvo_load():
                nonlocal job
                job += 1
                w.submit_load(job, dst_list, rows)
                w.wait(job, timeout_s=120).check()

            kvoffload_ms = median_ms(kvo_load, 5)

            pinned = torch.empty((n,) + tuple(kv.shape[1:]), dtype=kv.dtype, pin_memory=True)
            pinned.copy_(kv[src])
            side = torch.cuda.Stream()

            def inprocess_load():
                with torch.cuda.stream(side):
                    for i, b in enumerate(dst_list):
                        kv[b].copy_(pinned[i], non_blocking=True)
                side.synchronize()

            inprocess_ms = median_ms(inprocess_load, 5)
            inprocess_exact = bool(torch.equal(kv[dst_blocks].view(torch.int16),
                                               kv[src].view(torch.int16)))
            del pinned

            # Bitwise check: poison the destination, load once more through kvoffload.
            kv[dst_blocks] = float("nan")
            torch.cuda.synchronize()
            kvo_load()
            blocks_exact = bool(torch.equal(kv[dst_blocks].view(torch.int16),
                                            kv[src].view(torch.int16)))
            last = int(prompt[0, -1])
            original = next_logits(model, kv, src, prefix, last)
            loaded = next_logits(model, kv, dst_blocks, prefix, last)
            logits_bitwise = bool(torch.equal(original.view(torch.int16), loaded.view(torch.int16)))
            # Whether the model itself gives the same bits twice from the same blocks: where it
            # does not, no loader can make the logits bitwise (the blocks' bytes say it all).
            again = next_logits(model, kv, src, prefix, last)
            model_repeatable = bool(torch.equal(original.view(torch.int16),
                                                again.view(torch.int16)))
            del again
            link_ms = kv_bytes / (ceiling_gbps * 1e9) * 1e3
            disk = from_disk(kv, src_list, dst_blocks, block_bytes, tokens, disk_dir,
                             num_blocks) if disk_dir else {}
            emit(ttft=dict({"tokens": tokens, "kv_bytes": kv_bytes,
                            "recompute_ms": round(recompute_ms, 2),
                            "kvoffload_ms": round(kvoffload_ms, 2),
                            "inprocess_ms": round(inprocess_ms, 2), "link_ms": round(link_ms, 2),
                            "logits_bitwise": logits_bitwise and blocks_exact}, **disk),
                 blocks_exact=blocks_exact, inprocess_exact=inprocess_exact,
                 model_repeatable=model_repeatable,
                 first_token=int(loaded.argmax()),
                 matches_prefill_token=int(loaded.argmax()) == int(prefill_logits[0, -1].argmax()),
                 kvoffload_gbps=round(kv_bytes / kvoffload_ms / 1e6, 2),
                 inprocess_gbps=round(kv_bytes / inprocess_ms / 1e6, 2))
            del prefill_logits
            torch.cuda.empty_cache()
        emit(daemon_gpu_mib={"0": gpu_mib_of(proc.pid)}, context_floor_mib=context_floor_mib())
        w.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def bitwise_cell(r):
    """The table's last cell: whether the first token's logits from the loaded blocks are the
    original's bits, and, where not, whether the blocks' bytes were and the model repeats itself
    (two runs from the same blocks: a model that does not repeat cannot be matched by a loader)."""
    if r["logits_bitwise"]:
        return "yes" if r.get("model_repeatable", True) else \
            "yes (but the model alone does not repeat its bits at this length)"
    why = []
    if r.get("blocks_exact"):
        why.append("blocks byte-exact")
    if r.get("model_repeatable") is False:
        why.append("the model alone not repeatable")
    return "NO" + (" (%s)" % "; ".join(why) if why else "")


def merge(path, commit, date):
    """Adds the run's `ttft` rows (and `ttft_run`) to docs/benchmarks.json, keeping every other
    key, and writes its table into docs/benchmarks.md between the ttft markers."""
    rows, run = [], {"commit": commit, "date": date, "run": os.path.dirname(path)}
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "ttft" in r:
            rows.append(dict(r["ttft"], blocks_exact=r.get("blocks_exact"),
                             model_repeatable=r.get("model_repeatable")))
        for key in ("device", "ceiling_h2d_gbps", "transformers", "torch", "daemon_gpu_mib",
                    "context_floor_mib"):
            if key in r:
                run[key] = r[key]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs")
    jpath = os.path.join(root, "benchmarks.json")
    report = json.load(open(jpath))
    report["ttft"] = rows
    report["ttft_run"] = run
    with open(jpath, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    # The 'from disk' columns, when the run measured them (--disk_tier_dir).
    disk_head = disk_rule = ""
    if any("from_disk_ms" in r for r in rows):
        disk_head = (" from disk ms (Lookup → loaded; promotion part) | prefill / from disk | "
                     "promotion within the default 500 ms bound | from disk byte-exact |")
        disk_rule = "---:|---:|---|---|"

    def disk_cells(r):
        if "from_disk_ms" not in r:
            return " — | — | — | — |"
        return " %.1f (%.1f) | %.1f× | %s | %s |" % (
            r["from_disk_ms"], r["from_disk_promote_ms"], r["recompute_ms"] / r["from_disk_ms"],
            "yes" if r.get("within_default_bound") else "no",
            "yes" if r.get("from_disk_exact") else "NO")

    lines = ["<!-- ttft-begin -->",
             "Run of commit `%s` on %s, device: %s (%s/ttft.jsonl, tests/bench/gpu/ttft_bench.py). "
             "Random-initialised Llama-3-8B-shaped model (bf16, 32 layers, GQA 8 KV heads), "
             "random prompts; KV in vLLM's cross-layer layout (2 MiB blocks of 16 tokens), "
             "loaded into other block ids. Link = bytes / this run's H2D ceiling (%.2f GB/s). "
             "Medians (prefill of 3, loads of 5)." % (commit, date, run.get("device"), run["run"],
                                                      run.get("ceiling_h2d_gbps", 0)),
             "",
             "| prompt tokens | KV | prefill (recompute) ms | kvoffload load ms | in-process "
             "copy ms | link ms | kvoffload / link | kvoffload / in-process | prefill / "
             "kvoffload | first token bitwise |" + disk_head,
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|" + disk_rule]
    for r in rows:
        lines.append("| %d | %d MiB | %.1f | %.1f | %.1f | %.1f | %.3f× | %.3f× | %.1f× | %s |" % (
            r["tokens"], r["kv_bytes"] >> 20, r["recompute_ms"], r["kvoffload_ms"],
            r["inprocess_ms"], r["link_ms"], r["kvoffload_ms"] / r["link_ms"],
            r["kvoffload_ms"] / r["inprocess_ms"], r["recompute_ms"] / r["kvoffload_ms"],
            bitwise_cell(r)) + (disk_cells(r) if disk_head else ""))
    if run.get("daemon_gpu_mib"):
        lines += ["", "Daemon GPU memory after these jobs (nvidia-smi, the daemon's process): "
                  "%s MiB on device 0; a bare CUDA context (cudaFree(0) alone, lazy loading): "
                  "%s MiB." % (run["daemon_gpu_mib"].get("0"), run.get("context_floor_mib"))]
    lines.append("<!-- ttft-end -->")
    mpath = os.path.join(root, "benchmarks.md")
    md = open(mpath).read()
    block = "\n".join(lines)
    if "<!-- ttft-begin -->" in md:
        head, rest = md.split("<!-- ttft-begin -->", 1)
        md = head + block + rest.split("<!-- ttft-end -->", 1)[1]
    else:
        md = md.rstrip("\n") + "\n\n## Time to first token: recompute or load\n\n" + \
            block + "\n"
    with open(mpath, "w") as f:
        f.write(md)


def main():
    if "--merge" in sys.argv:
        args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
        merge(args["--merge"], args["--commit"], args["--date"])
        return
    disk_dir = None
    if "--disk_tier_dir" in sys.argv:
        disk_dir = sys.argv[sys.argv.index("--disk_tier_dir") + 1]
        os.makedirs(disk_dir, exist_ok=True)
    run(disk_dir)


if __name__ == "__main__":
    main()
