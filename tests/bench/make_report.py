#!/usr/bin/env python3
"""Turns one accelerator-machine run into docs/benchmarks.json and the GPU table of
docs/benchmarks.md. Every number comes from the same run (tests/gpu_e2e/run_on_device.sh).

  python3 tests/bench/make_report.py RUN_DIR --commit SHA [--date YYYY-MM-DD]

RUN_DIR holds device.txt, bench.jsonl (copy baselines: ceiling, memcpy_per_page, memcpy_batch)
and e2e.jsonl (kvoffload end to end, latency, interference).
"""
import argparse
import datetime
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [4096, 16384, 65536, 262144, 2097152]
TARGETS = {"ceiling_fraction": 0.95, "interference_slowdown_pct": 5.0, "latency_p50_us": 100.0}


def read_jsonl(path):
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def human(page):
    return f"{page // 1048576} MiB" if page >= 1048576 else f"{page // 1024} KiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    args = ap.parse_args()
    run = pathlib.Path(args.run_dir)
    device = (run / "device.txt").read_text().strip()
    baselines = read_jsonl(run / "bench.jsonl")
    e2e = read_jsonl(run / "e2e.jsonl")
    staged = read_jsonl(run / "e2e_staged.jsonl") if (run / "e2e_staged.jsonl").exists() else []

    ceiling = {}
    for r in baselines:
        if r.get("method") == "ceiling" and r.get("page_bytes") == PAGES[0]:
            ceiling["d2h_gbps" if r["direction"] == "store" else "h2d_gbps"] = r["gbps"]
    rows = []
    for r in baselines:
        if r.get("method") in ("ceiling", "memcpy_per_page", "memcpy_batch") and r.get("page_bytes") in PAGES:
            rows.append({"method": r["method"], "direction": r["direction"],
                         "page_bytes": r["page_bytes"], "shape": "pages", "gbps": r["gbps"]})
    latency, interference = {}, {}
    for r in e2e:
        if r.get("method") == "kvoffload":
            rows.append({k: r[k] for k in ("method", "direction", "page_bytes", "shape", "gbps")}
                        | {"gbps_single_job": r.get("gbps_single_job")})
        elif "latency_us" in r:
            latency = r["latency_us"]
        elif "interference_slowdown_pct" in r:
            interference = r
    report = {
        "device": device,
        "commit": args.commit,
        "date": args.date,
        "ceiling": ceiling,
        "rows": rows,
        "interference_slowdown_pct": interference.get("interference_slowdown_pct"),
        "interference": interference,
        "latency_us": {"p50": latency.get("p50"), "p99": latency.get("p99")},
        "targets": TARGETS,
        # Not the default: the same benchmark with --staged_store_min_bytes=256KiB.
        "experimental_staged_stores": {
            "rows": [{k: r[k] for k in ("method", "direction", "page_bytes", "shape", "gbps")}
                     for r in staged if r.get("method") == "kvoffload" and r["direction"] == "store"],
            "interference": next((r for r in staged if "interference_slowdown_pct" in r), None),
        },
    }
    (ROOT / "docs/benchmarks.json").write_text(json.dumps(report, indent=2) + "\n")

    def cell(method, direction, page, shape="pages"):
        for r in rows:
            if (r["method"], r["direction"], r["page_bytes"], r["shape"]) == (method, direction, page, shape):
                return r["gbps"]
        return None

    lines = [f"Run of commit `{args.commit}` on {args.date}, device: {device}. One run, 1 GiB per",
             "measurement, median of 5 (GB/s = 10^9 bytes/s). `kvoffload` is end to end: a worker",
             "process submits over gRPC, the daemon copies between the worker's GPU memory (CUDA IPC)",
             "and its region; its GB/s is throughput with two jobs in flight, and the single-job",
             "number (submit → finished) is in parentheses.", ""]
    for direction, ceil_key in (("store", "d2h_gbps"), ("load", "h2d_gbps")):
        ceil = ceiling.get(ceil_key)
        lines.append(f"**{direction}** ({'GPU → host' if direction == 'store' else 'host → GPU'}), "
                     f"ceiling {ceil} GB/s (one contiguous pinned cudaMemcpyAsync)")
        lines.append("")
        lines.append("| page | memcpy_per_page | memcpy_batch | kvoffload | kvoffload / ceiling | target 95 % |")
        lines.append("|---|---:|---:|---:|---:|---|")
        for page in PAGES:
            k = next((r for r in rows if r["method"] == "kvoffload" and r["direction"] == direction
                      and r["page_bytes"] == page and r["shape"] == "pages"), None)
            pp, mb = cell("memcpy_per_page", direction, page), cell("memcpy_batch", direction, page)
            ratio = k["gbps"] / ceil if k and ceil else None
            lines.append(f"| {human(page)} | {pp} | {mb} | {k['gbps'] if k else '—'} "
                         f"({k.get('gbps_single_job') if k else '—'}) | "
                         f"{f'{ratio:.1%}' if ratio else '—'} | "
                         f"{'met' if ratio and ratio >= 0.95 else 'missed'} |")
        lines.append("")
    lines.append("| model shape | direction | page | kvoffload GB/s | / ceiling |")
    lines.append("|---|---|---:|---:|---:|")
    for r in rows:
        if r["method"] == "kvoffload" and r["shape"] != "pages":
            ceil = ceiling.get("d2h_gbps" if r["direction"] == "store" else "h2d_gbps")
            lines.append(f"| {r['shape']} | {r['direction']} | {human(r['page_bytes'])} | "
                         f"{r['gbps']} ({r.get('gbps_single_job')}) | {r['gbps'] / ceil:.1%} |")
    lines.append("")
    lines.append(f"- 1-block job latency, submit → finished (CUDA backend, 4 KiB block): "
                 f"p50 {latency.get('p50')} µs, p99 {latency.get('p99')} µs (target p50 ≤ 100 µs).")
    if interference:
        lines.append(f"- Concurrent compute-bound kernel (one wave on every SM) while kvoffload moves "
                     f"{interference.get('copy_gbps')} GB/s: {interference.get('alone_ms')} ms alone, "
                     f"{interference.get('loaded_ms')} ms loaded, slowdown "
                     f"{interference.get('interference_slowdown_pct')} % (target ≤ 5 %).")
    backend_interference = [r for r in baselines if r.get("method") == "interference"]
    report["backend_interference"] = backend_interference
    (ROOT / "docs/benchmarks.json").write_text(json.dumps(report, indent=2) + "\n")
    for r in backend_interference:
        lines.append(f"- Backend alone (gpu_baselines, in-process, stores only): a one-wave compute "
                     f"kernel of {r['alone_ms']} ms slows by {r['slowdown_pct']} % with "
                     f"{r['store_path']} stores ({r['store_gbps_meanwhile']} GB/s meanwhile).")
    if staged:
        st = report["experimental_staged_stores"]
        lines.append("")
        lines.append("Experimental, not the default: the same run with `--staged_store_min_bytes=256KiB` "
                     "(stores gathered on the GPU, moved by copy engines):")
        lines.append("")
        lines.append("| shape | page | store GB/s | / ceiling |")
        lines.append("|---|---:|---:|---:|")
        for r in st["rows"]:
            lines.append(f"| {r['shape']} | {human(r['page_bytes'])} | {r['gbps']} | "
                         f"{r['gbps'] / ceiling['d2h_gbps']:.1%} |")
        if st["interference"]:
            i = st["interference"]
            lines.append("")
            lines.append(f"- Concurrent compute-bound kernel with staged stores: slowdown "
                         f"{i['interference_slowdown_pct']} % while moving {i['copy_gbps']} GB/s.")
        (ROOT / "docs/benchmarks.json").write_text(json.dumps(report, indent=2) + "\n")
    table = "\n".join(lines) + "\n"

    md = ROOT / "docs/benchmarks.md"
    text = md.read_text() if md.exists() else "# Benchmarks\n"
    begin, end = "<!-- gpu-begin -->", "<!-- gpu-end -->"
    block = f"{begin}\n{table}{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text += f"\n## GPU data path (H200)\n\n{block}\n"
    md.write_text(text)
    print(table)


if __name__ == "__main__":
    main()
