#!/usr/bin/env python3
"""Merges one run of stage v3_2d (run_on_device.sh: v3_bench.py interference, throughput and layout
with --paths=default,page_dma) into docs/benchmarks.json as `copy_2d` (keeping every other key)
and prints the markdown tables for docs/benchmarks.md's section "Copy engines: 2D copies".

  python3 tests/bench/gpu/v3_2d_report.py RUN_DIR   # interference_2d.jsonl, throughput_2d.jsonl,
                                                  # layout_2d.jsonl, run.json
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]


def lines(path):
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.startswith("{")]


def main():
    run = pathlib.Path(sys.argv[1])
    meta = json.loads((run / "run.json").read_text())
    inter = [l["interference_v3"] for l in lines(run / "interference_2d.jsonl")
             if "interference_v3" in l]
    tput_lines = lines(run / "throughput_2d.jsonl")
    ceiling = next(l["ceiling_v3"] for l in tput_lines if "ceiling_v3" in l)
    torch = {(l["torch_v3"]["layout"], l["torch_v3"]["blocks"]): l["torch_v3"]
             for l in tput_lines if "torch_v3" in l}
    tput = [l["throughput_v3"] for l in tput_lines if "throughput_v3" in l]
    layout = [l["layout_v3"] for l in lines(run / "layout_2d.jsonl") if "layout_v3" in l]
    floors = [r for r in inter if r["path"] == "dma_floor"]
    floor_gemm = sum(r["gemm_pct"] for r in floors) / len(floors)
    floor_decode = sum(r["decode_pct"] for r in floors) / len(floors)

    def torch_best(lay, blocks, direction):
        t = torch.get((lay, blocks), {})
        return max((v for k, v in t.items() if k.endswith("_" + direction)), default=None)

    rows = []
    print("**Interference** (no MPS; floor = plain DMA of the same run, mean of its two "
          "measurements: GEMM %.2f %%, decode %.2f %%)\n" % (floor_gemm, floor_decode))
    print("| copier | layout | blocks | GEMM | decode | copy GB/s |\n|---|---|---|---:|---:|---:|")
    for r in inter:
        print("| %s | %s | %s | %.2f %% | %.2f %% | %.1f |" % (
            r["path"], r["layout"], r["blocks"], r["gemm_pct"], r["decode_pct"], r["copy_gbps"]))
    print("\n**Throughput** (GB/s; ceiling store %.2f, load %.2f)\n" %
          (ceiling["store"], ceiling["load"]))
    print("| layout | blocks | direction | jobs | default (2D) | page_dma | 2D / page | "
          "default / ceiling | default / PyTorch best |\n|---|---|---|---:|---:|---:|---:|---:|---:|")
    by = {(r["layout"], r["blocks"], r["direction"], r["jobs"], r["path"]): r["gbps"] for r in tput}
    for (lay, blocks, direction, jobs, path), g in by.items():
        if path != "default":
            continue
        page = by.get((lay, blocks, direction, jobs, "page_dma"))
        best = torch_best(lay, blocks, direction)
        row = dict(layout=lay, blocks=blocks, direction=direction, jobs=jobs, gbps=g,
                   page_dma_gbps=page, ceiling_gbps=ceiling[direction], torch_best_gbps=best)
        rows.append(row)
        print("| %s | %s | %s | %d | %.2f | %s | %s | %.1f %% | %s |" % (
            lay, blocks, direction, jobs, g, "%.2f" % page if page else "—",
            "%.2f×" % (g / page) if page else "—", 100 * g / ceiling[direction],
            "%.2f×" % (g / best) if best else "—"))
    print("\n**Layout** (default path with 2D copies; one job, GB/s; `tensor_major`: an engine "
          "per K/V tensor, what a tensor-major row layout would give)\n")
    print("| page | blocks | direction | per_layer | per_layer_bpr16 | tensor_major |\n"
          "|---|---|---|---:|---:|---:|")
    lay_by = {}
    for r in layout:
        if r.get("path", "default") == "default":
            lay_by.setdefault((r["layout"], r["blocks"], r["direction"]), {})[
                r["registration"]] = r["gbps"]
    for (lay, blocks, direction), regs in lay_by.items():
        print("| %s | %s | %s | %s |" % (lay, blocks, direction, " | ".join(
            "%.2f" % regs[k] if k in regs else "—"
            for k in ("per_layer", "per_layer_bpr16", "tensor_major"))))
    out = ROOT / "docs" / "benchmarks.json"
    data = json.loads(out.read_text())
    data["copy_2d"] = dict(run=meta, ceiling_gbps=ceiling, floor_gemm_pct=round(floor_gemm, 2),
                           floor_decode_pct=round(floor_decode, 2),
                           interference=[{k: r[k] for k in ("layout", "blocks", "path", "gemm_pct",
                                                            "decode_pct", "copy_gbps")}
                                         for r in inter],
                           throughput=rows,
                           layout=[dict(layout=k[0], blocks=k[1], direction=k[2], **v)
                                   for k, v in lay_by.items()])
    out.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
