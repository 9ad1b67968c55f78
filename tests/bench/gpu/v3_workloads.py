"""The pieces of the copy-path v3 benchmark that touch the GPU; v3_bench.py
runs each in a process of its own and tells it what to do over stdin (one JSON object a line,
one answer a line on stdout).

  Model   the model's work, captured in CUDA graphs so that neither launch gaps nor another
          thread's interpreter lock count: a bf16 GEMM loop (20 x 8192^3) and an 8-layer
          Llama-8B-shaped decode step at batch 64 written with plain torch ops (RMSNorm, fused
          QKV, rotary, GQA attention over a 1024-token cache, SwiGLU MLP), 8 steps a replay.
  Copier  one copier at a time, in its own process, alternating 512 MiB stores (GPU -> host)
          and loads until told to stop:
            dma     plain cudaMemcpyAsync of contiguous pinned memory, no kernel (the floor)
            torch   per-layer index_select into GPU staging + a non_blocking copy to pinned
                    memory on a second stream (loads: the mirror image with index_copy_)
            kvo     a kvoffload worker submitting store and load jobs to a daemon
  KV layouts (the job's GPU side, bf16; every layout 8 layers):
            per_layer_32k / per_layer_4k  vLLM's per-layer caches [2, num_blocks, page] per layer
            cross_layer_2m                one tensor [num_blocks, 2 MiB] (a block's layers, K, V)
          blocks "random" (a random permutation of GPU blocks into consecutive rows),
          "runs16" (runs of 16 consecutive GPU blocks in random order) or "consecutive" (GPU
          blocks 0..n-1 into rows 0..n-1).
"""

import json
import math
import os
import statistics
import sys
import threading
import time

import torch

LAYERS = 8
DEVICE = "cuda"  # tests here set "cpu"
STAGING = 64 << 20
LAYOUTS = {  # name: (page bytes of one K or V tensor of one layer, per-layer?)
    "per_layer_4k": (4 << 10, True),
    "per_layer_32k": (32 << 10, True),
    "per_layer_64k": (64 << 10, True),
    "per_layer_16k": (16 << 10, True),
    "cross_layer_2m": (2 << 20, False),
}


def answer(**row):
    print(json.dumps(row), flush=True)


class Layout:
    """A job's GPU KV caches and blocks. sets: how many disjoint block sets (jobs in flight)."""

    def __init__(self, name, blocks, job_bytes, sets=1, seed=1):
        page, per_layer = LAYOUTS[name]
        self.name, self.order, self.page, self.per_layer = name, blocks, page, per_layer
        self.bpb = 2 * LAYERS * page if per_layer else page  # bytes per block
        self.n = max(1, job_bytes // self.bpb)
        self.sets = sets
        self.num_blocks = sets * self.n + 8
        g = torch.Generator(device=DEVICE)
        g.manual_seed(seed)
        elems = page // 2
        if per_layer:
            self.tensors = [torch.randn(2, self.num_blocks, elems, dtype=torch.bfloat16,
                                        device=DEVICE, generator=g) for _ in range(LAYERS)]
            self.registration = {"layer.%d" % l: t for l, t in enumerate(self.tensors)}
        else:
            t = torch.randn(self.num_blocks, elems, dtype=torch.bfloat16, device=DEVICE,
                            generator=g)
            self.tensors = [t.view(1, self.num_blocks, elems)]
            self.registration = [(t.data_ptr(), self.num_blocks, page, page)]
        if blocks == "random":
            perm = torch.randperm(self.num_blocks, device=DEVICE, generator=g)
        elif blocks == "runs16":  # runs of 16 consecutive GPU blocks, the runs in random order
            runs = torch.randperm(self.num_blocks // 16, device=DEVICE, generator=g)
            perm = (runs[:, None] * 16 + torch.arange(16, device=DEVICE)).flatten()
        else:
            perm = torch.arange(self.num_blocks, device=DEVICE)
        self.block_sets = [perm[i * self.n:(i + 1) * self.n] for i in range(sets)]
        self.block_lists = [b.tolist() for b in self.block_sets]
        self.bytes = self.n * self.bpb

    def spec_fields(self):
        """EngineSpec num_layers / page_bytes for this layout (bytes of one layer of a block)."""
        return LAYERS, self.bpb // LAYERS


class TorchStaged:
    """The PyTorch-only method, tuned fairly (torch_bench.TorchStaged, any layout): per-tensor
    gather into one of two 64 MiB staging buffers, copy on a second stream; every (tensor, chunk)
    piece contiguous in pinned memory."""

    def __init__(self, lay, block_set=0, own_stream=False):
        self.lay, self.blocks = lay, lay.block_sets[block_set]
        self.elems = lay.page // 2
        self.kdim = lay.tensors[0].shape[0]  # 2 (K, V) per layer, 1 cross-layer
        self.host = torch.empty(len(lay.tensors) * self.kdim * lay.n * self.elems,
                                dtype=torch.bfloat16, pin_memory=True)
        self.chunk = max(1, STAGING // (self.kdim * lay.page))
        self.staging = [torch.empty(self.kdim * self.chunk * self.elems, dtype=torch.bfloat16,
                                    device=DEVICE) for _ in range(2)]
        self.copy_stream = torch.cuda.Stream()
        # Gathers on the caller's stream; own_stream: on one of its own (a copier on a thread of
        # the model's process, which must not queue behind the model's work).
        self.compute = torch.cuda.Stream() if own_stream else torch.cuda.current_stream()
        self.free = [torch.cuda.Event() for _ in range(2)]
        self.ready = [torch.cuda.Event() for _ in range(2)]

    def _pieces(self):
        offset = 0
        for t in self.lay.tensors:
            for b0 in range(0, self.lay.n, self.chunk):
                b1 = min(self.lay.n, b0 + self.chunk)
                size = self.kdim * (b1 - b0) * self.elems
                yield t, b0, b1, self.host[offset:offset + size], size
                offset += size

    def store(self):
        for i, (t, b0, b1, host, size) in enumerate(self._pieces()):
            s = i % 2
            buf = self.staging[s][:size].view(self.kdim, b1 - b0, self.elems)
            self.compute.wait_event(self.free[s])
            with torch.cuda.stream(self.compute):
                torch.index_select(t, 1, self.blocks[b0:b1], out=buf)
            self.ready[s].record(self.compute)
            self.copy_stream.wait_event(self.ready[s])
            with torch.cuda.stream(self.copy_stream):
                host.copy_(buf.view(-1), non_blocking=True)
            self.free[s].record(self.copy_stream)
        self.copy_stream.synchronize()

    def load(self):
        for i, (t, b0, b1, host, size) in enumerate(self._pieces()):
            s = i % 2
            flat = self.staging[s][:size]
            self.copy_stream.wait_event(self.free[s])
            with torch.cuda.stream(self.copy_stream):
                flat.copy_(host, non_blocking=True)
            self.ready[s].record(self.copy_stream)
            self.compute.wait_event(self.ready[s])
            with torch.cuda.stream(self.compute):
                t.index_copy_(1, self.blocks[b0:b1], flat.view(self.kdim, b1 - b0, self.elems))
            self.free[s].record(self.compute)
        self.compute.synchronize()


class TorchPerBlock:
    """vLLM's swap_blocks: one non_blocking copy_ per (tensor, block) on a side stream. Only
    for large pages (cross-layer): at 4-32 KiB it is per-page DMA, far below the others."""

    def __init__(self, lay, block_set=0):
        self.lay = lay
        self.blocks = lay.block_lists[block_set]
        t = lay.tensors[0]
        self.host = torch.empty((len(lay.tensors), t.shape[0], lay.n, t.shape[2]),
                                dtype=t.dtype, pin_memory=True)
        self.stream = torch.cuda.Stream()

    def store(self):
        with torch.cuda.stream(self.stream):
            for ti, t in enumerate(self.lay.tensors):
                for k in range(t.shape[0]):
                    for i, b in enumerate(self.blocks):
                        self.host[ti, k, i].copy_(t[k, b], non_blocking=True)
        self.stream.synchronize()

    def load(self):
        with torch.cuda.stream(self.stream):
            for ti, t in enumerate(self.lay.tensors):
                for k in range(t.shape[0]):
                    for i, b in enumerate(self.blocks):
                        t[k, b].copy_(self.host[ti, k, i], non_blocking=True)
        self.stream.synchronize()


class PlainDma:
    """The floor: contiguous pinned cudaMemcpyAsync of the same bytes, no kernel."""

    def __init__(self, nbytes):
        self.dev = torch.empty(nbytes, dtype=torch.uint8, device=DEVICE)
        self.dev.fill_(7)
        self.host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        self.stream = torch.cuda.Stream()

    def store(self):
        with torch.cuda.stream(self.stream):
            self.host.copy_(self.dev, non_blocking=True)
        self.stream.synchronize()

    def load(self):
        with torch.cuda.stream(self.stream):
            self.dev.copy_(self.host, non_blocking=True)
        self.stream.synchronize()


class KvoWorker:
    """One engine (rows assigned by the engine, `sets` disjoint row sets) and its worker."""
    count = 0

    def __init__(self, sock, lay, blocks_per_row=1):
        import kvoffload as kvo
        KvoWorker.count += 1
        self.lay = lay
        layers, page_bytes = lay.spec_fields()
        self.bpr = blocks_per_row
        rows = lay.sets * lay.n // blocks_per_row
        self.spec = kvo.EngineSpec(engine_id="v3-%d-%d" % (os.getpid(), KvoWorker.count),
                                   num_layers=layers, page_bytes=page_bytes,
                                   blocks_per_row=blocks_per_row,
                                   budget_bytes=rows * lay.bpb * blocks_per_row,
                                   rows_assigned_by_engine=True)
        self.worker = kvo.Worker.connect_cuda(sock, self.spec, 0, lay.registration,
                                              num_blocks=lay.num_blocks, num_events=4)
        per_set = lay.n // blocks_per_row
        self.rows = [list(range(s * per_set, (s + 1) * per_set)) for s in range(lay.sets)]
        self.job = 0

    def submit(self, direction, s=0):
        self.job += 1
        fn = self.worker.submit_store if direction == "store" else self.worker.submit_load
        fn(self.job, self.lay.block_lists[s], self.rows[s])
        return self.job

    def wait(self, job):
        self.worker.wait(job, timeout_s=120).check()

    def run(self, direction, s=0):
        self.wait(self.submit(direction, s))

    def close(self):
        self.worker.close()


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e3


# ---------------------------------------------------------------------------------------------
# The model process.

class Decode:
    """8 Llama-3-8B-shaped decoder layers, one decode step of a batch of `batch` sequences with
    a `ctx`-token cache each; plain torch ops so the step captures into a CUDA graph."""
    H, I, NH, NKV, HD = 4096, 14336, 32, 8, 128

    def __init__(self, layers=8, batch=64, ctx=1024, seed=3):
        g = torch.Generator(device=DEVICE)
        g.manual_seed(seed)
        H, I, NH, NKV, HD = self.H, self.I, self.NH, self.NKV, self.HD

        def w(*shape):
            return torch.randn(*shape, dtype=torch.bfloat16, device=DEVICE,
                               generator=g) * (1.0 / math.sqrt(shape[0]))

        self.layers = [dict(n1=torch.ones(H, dtype=torch.bfloat16, device=DEVICE),
                            qkv=w(H, (NH + 2 * NKV) * HD), o=w(NH * HD, H),
                            n2=torch.ones(H, dtype=torch.bfloat16, device=DEVICE),
                            gu=w(H, 2 * I), down=w(I, H),
                            k=torch.randn(batch, NKV, ctx, HD, dtype=torch.bfloat16,
                                          device=DEVICE, generator=g),
                            v=torch.randn(batch, NKV, ctx, HD, dtype=torch.bfloat16,
                                          device=DEVICE, generator=g))
                       for _ in range(layers)]
        self.batch, self.ctx = batch, ctx
        self.x = torch.randn(batch, H, dtype=torch.bfloat16, device=DEVICE, generator=g)
        pos = ctx - 1
        inv = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=DEVICE).float() / HD))
        ang = pos * inv
        self.cos = torch.cat([ang.cos(), ang.cos()]).to(torch.bfloat16)
        self.sin = torch.cat([ang.sin(), ang.sin()]).to(torch.bfloat16)
        self.scale = 1.0 / math.sqrt(HD)

    @staticmethod
    def rms(x, weight):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * weight

    def rope(self, t):
        half = t.shape[-1] // 2
        rot = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * self.cos + rot * self.sin

    def step(self, x):
        B, H, NH, NKV, HD = self.batch, self.H, self.NH, self.NKV, self.HD
        pos = self.ctx - 1
        h = x
        for L in self.layers:
            qkv = self.rms(h, L["n1"]) @ L["qkv"]
            q, k, v = qkv.split([NH * HD, NKV * HD, NKV * HD], dim=-1)
            q = self.rope(q.view(B, NH, HD))
            k = self.rope(k.view(B, NKV, HD))
            L["k"][:, :, pos].copy_(k)  # the new token's K and V into the cache
            L["v"][:, :, pos].copy_(v.view(B, NKV, HD))
            # GQA: the 4 query heads of a KV head attend together ([B, NKV, 4, HD]).
            qg = q.view(B, NKV, NH // NKV, HD)
            scores = torch.matmul(qg, L["k"].transpose(-1, -2)) * self.scale
            attn = torch.matmul(torch.softmax(scores.float(), dim=-1).to(qg.dtype), L["v"])
            h = h + attn.reshape(B, NH * HD) @ L["o"]
            gate, up = (self.rms(h, L["n2"]) @ L["gu"]).chunk(2, dim=-1)
            h = h + (torch.nn.functional.silu(gate) * up) @ L["down"]
        return h


def capture(fn, warmup=3):
    """fn's work as a CUDA graph (warmed up on a side stream first, as torch's docs say)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


class Model:
    def __init__(self, decode_steps=8, ctx=1024):
        a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=DEVICE)
        b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=DEVICE)
        c = torch.empty(8192, 8192, dtype=torch.bfloat16, device=DEVICE)

        def gemm():
            for _ in range(20):
                torch.matmul(a, b, out=c)

        self.gemm = capture(gemm)
        self.dec = Decode(ctx=ctx)
        self.out = torch.empty_like(self.dec.x)

        def decode():
            h = self.dec.x
            for _ in range(decode_steps):
                h = self.dec.step(h)
            self.out.copy_(h)

        self.decode = capture(decode)
        self.keep = (a, b, c)
        self.decode_steps = decode_steps

    @staticmethod
    def timed(graph, reps):
        """Median ms of graph replays timed with events, replayed back to back (no host gap)."""
        graph.replay()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
        t0 = time.monotonic()
        for s, e in ev:
            s.record()
            graph.replay()
            e.record()
        torch.cuda.synchronize()
        t1 = time.monotonic()
        return statistics.median(s.elapsed_time(e) for s, e in ev), t0, t1

    def measure(self, reps_gemm, reps_decode):
        g_ms, g0, g1 = self.timed(self.gemm, reps_gemm)
        d_ms, d0, d1 = self.timed(self.decode, reps_decode)
        return dict(gemm_ms=round(g_ms, 4), decode_ms=round(d_ms, 4), gemm_t=[g0, g1],
                    decode_t=[d0, d1])


def model_main(args):
    torch.cuda.init()
    model = Model(ctx=args.get("ctx", 1024))
    answer(ready=True, device=torch.cuda.get_device_name(0), torch=torch.__version__,
           decode_steps=model.decode_steps, ctx=model.dec.ctx, batch=model.dec.batch)
    inproc = {}  # a copier on a thread of this process (v3_bench.py reorder)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["cmd"] == "measure":
                answer(**model.measure(cmd.get("reps_gemm", 12), cmd.get("reps_decode", 20)))
            elif cmd["cmd"] == "inproc_setup":
                lay = Layout(cmd["layout"], cmd["blocks"], cmd["job_bytes"])
                if cmd["kind"] == "torch":
                    mover = TorchStaged(lay, own_stream=True)
                else:
                    from v3_reorder import Reorder
                    mover = Reorder(cmd["socket"], lay, chunk_bytes=cmd["chunk_bytes"],
                                    slots=cmd["slots"], follow_model=False)
                    mover.store()  # rows exist before the first load
                inproc.update(lay=lay, mover=mover)
                answer(ready=True, bytes=lay.bytes)
            elif cmd["cmd"] == "inproc_go":
                inproc["loop"] = Loop(inproc["mover"], inproc["lay"].bytes)
                inproc["loop"].warm.wait(120)
                answer(running=inproc["loop"].error is None, error=inproc["loop"].error)
            elif cmd["cmd"] == "inproc_stop":
                answer(jobs=inproc["loop"].finish(), error=inproc["loop"].error)
            elif cmd["cmd"] == "inproc_teardown":
                if hasattr(inproc.get("mover"), "close"):
                    inproc["mover"].close()
                inproc.clear()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                answer(done=True)
            elif cmd["cmd"] == "quit":
                answer(bye=True)
                return
        except Exception as e:
            answer(error=repr(e))


# ---------------------------------------------------------------------------------------------
# The copier process.

class Loop:
    """Alternates store and load of `mover` on a thread of this (copier) process until stopped;
    records (monotonic end time, bytes) per finished job."""

    def __init__(self, mover, nbytes):
        self.mover, self.nbytes = mover, nbytes
        self.stop = threading.Event()
        self.warm = threading.Event()
        self.jobs = []
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.jobs.append((time.monotonic(), 0))
            while not self.stop.is_set():
                for direction in ("store", "load"):
                    getattr(self.mover, direction)()
                    self.jobs.append((time.monotonic(), self.nbytes))
                if len(self.jobs) >= 5:
                    self.warm.set()
        except Exception as e:  # reported to the orchestrator, which fails the row
            self.error = repr(e)
            self.warm.set()

    def finish(self):
        self.stop.set()
        self.thread.join()
        return self.jobs


class KvoMover:
    def __init__(self, worker):
        self.w = worker

    def store(self):
        self.w.run("store")

    def load(self):
        self.w.run("load")


def copier_main(args):
    torch.cuda.init()
    answer(ready=True, device=torch.cuda.get_device_name(0))
    state = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["cmd"] == "setup":
                kind = cmd["kind"]
                if kind == "dma":
                    mover, nbytes = PlainDma(cmd["job_bytes"]), cmd["job_bytes"]
                else:
                    lay = Layout(cmd["layout"], cmd["blocks"], cmd["job_bytes"])
                    nbytes = lay.bytes
                    if kind == "torch":
                        mover = TorchStaged(lay)
                    else:
                        state["worker"] = KvoWorker(cmd["socket"], lay)
                        mover = KvoMover(state["worker"])
                        state["worker"].run("store")  # rows exist before the first load
                    state["lay"] = lay
                state["mover"], state["nbytes"] = mover, nbytes
                answer(ready=True, bytes=nbytes)
            elif cmd["cmd"] == "go":
                state["loop"] = Loop(state["mover"], state["nbytes"])
                state["loop"].warm.wait(120)
                answer(running=state["loop"].error is None, error=state["loop"].error)
            elif cmd["cmd"] == "stop":
                jobs = state["loop"].finish()
                answer(jobs=jobs, error=state["loop"].error)
            elif cmd["cmd"] == "teardown":
                if "worker" in state:
                    state["worker"].close()
                state.clear()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                answer(done=True)
            elif cmd["cmd"] == "quit":
                answer(bye=True)
                return
        except Exception as e:
            answer(error=repr(e))
