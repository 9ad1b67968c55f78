"""Probe (copy path v3, layouts): how fast do the copy engines move per-layer pages that are strided on
one side, as one 2D copy per tensor (cudaMemcpy2DAsync), against one 1D copy per page and the
contiguous ceiling? No kernel anywhere. Prints JSON lines.

Layout as the daemon's region: a row holds a block's `tensors` pages back to back (block-major),
so tensor t of block b sits at host offset b * tensors * page + t * page; on the GPU, tensor t is
its own allocation with block stride = page (vLLM's per-layer caches).
"""
import ctypes, ctypes.util, glob, json, os, random, sys, time
import torch

def cudart():
    cands = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu*", "lib", "libcudart.so*"))
    cands += glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
    cands += glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcudart*.so*"))
    cands += ["libcudart.so"]
    for c in cands:
        try:
            return ctypes.CDLL(c), c
        except OSError:
            pass
    raise SystemExit("no libcudart")

rt, rt_path = cudart()
H2D, D2H = 1, 2
rt.cudaMemcpy2DAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]

def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what}: cuda error {rc}")

def timed(fn, reps=5):
    s = torch.cuda.current_stream()
    times = []
    for _ in range(reps + 1):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(s); fn(s.cuda_stream); b.record(s); b.synchronize()
        times.append(a.elapsed_time(b))
    times = sorted(times[1:])
    return times[len(times) // 2]

def main():
    total = 512 << 20
    tensors = 16
    host = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    dev_all = torch.empty(total, dtype=torch.uint8, device="cuda")
    hb = host.data_ptr()
    print(json.dumps({"probe": "dma2d", "cudart": rt_path, "device": torch.cuda.get_device_name()}))
    # ceiling: one contiguous copy
    for name, kind in (("store", D2H), ("load", H2D)):
        def one(st, kind=kind):
            if kind == D2H:
                check(rt.cudaMemcpyAsync(hb, dev_all.data_ptr(), total, kind, st), "1d")
            else:
                check(rt.cudaMemcpyAsync(dev_all.data_ptr(), hb, total, kind, st), "1d")
        ms = timed(one)
        print(json.dumps({"what": "ceiling", "direction": name, "gbps": round(total / ms / 1e6, 2)}))
    for page in (4096, 16384, 32768, 65536):
        blocks = total // (tensors * page)
        per_tensor = blocks * page
        dev = [dev_all.data_ptr() + t * per_tensor for t in range(tensors)]
        bpb = tensors * page
        for blocks_kind in ("consecutive", "runs16", "random"):
            if blocks_kind == "consecutive":
                runs = [(0, 0, blocks)]  # (gpu block, row, n)
            elif blocks_kind == "runs16":
                order = list(range(blocks // 16)); random.Random(1).shuffle(order)
                runs = [(g * 16, i * 16, 16) for i, g in enumerate(order)]
            else:
                order = list(range(blocks)); random.Random(1).shuffle(order)
                runs = [(g, i, 1) for i, g in enumerate(order)]
            for name, kind in (("store", D2H), ("load", H2D)):
                def two_d(st, kind=kind):
                    for g, r, n in runs:
                        for t in range(tensors):
                            gp = dev[t] + g * page
                            hp = hb + r * bpb + t * page
                            if kind == D2H:
                                check(rt.cudaMemcpy2DAsync(hp, bpb, gp, page, page, n, kind, st), "2d")
                            else:
                                check(rt.cudaMemcpy2DAsync(gp, page, hp, bpb, page, n, kind, st), "2d")
                calls = len(runs) * tensors
                if calls > 70000:
                    continue
                t0 = time.perf_counter(); ms = timed(two_d, reps=3); cpu = time.perf_counter() - t0
                print(json.dumps({"what": "2d", "page": page, "blocks": blocks_kind, "direction": name,
                                  "calls": calls, "gbps": round(total / ms / 1e6, 2),
                                  "ms": round(ms, 3)}), flush=True)

main()
